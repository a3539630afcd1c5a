//! `tune bench …` only hands over to the `tune-bench` binary beside `tune`: every argument
//! unread, its exit status as `tune`'s, and a message naming the build command when it is
//! missing. A stand-in `tune-bench` script records what it was given, so these tests need
//! neither the real benchmarks nor a built `tune-bench`.

use std::path::PathBuf;
use std::process::Command;

use crate::common::{PATIENCE, Sandbox, output_within, stderr, tune_bin};

/// A copy of `tune` alone in `bin/` of the sandbox (a hard link where the file system allows
/// it), so that what lies beside it is up to the test.
fn lone_tune(sb: &Sandbox) -> PathBuf {
    let bin = sb.join("bin");
    std::fs::create_dir_all(&bin).expect("create bin/");
    let tune = bin.join("tune");
    if std::fs::hard_link(tune_bin(), &tune).is_err() {
        std::fs::copy(tune_bin(), &tune).expect("copy tune");
    }
    tune
}

#[test]
fn tune_bench_passes_every_argument_to_tune_bench_and_exits_with_its_status() {
    let sb = Sandbox::new();
    let tune = lone_tune(&sb);
    // Written by a child process, not by this one: a file this multi-threaded test process
    // has open for writing can be inherited by another test's fork, and exec'ing it then
    // fails with "Text file busy" (ETXTBSY).
    let status = Command::new("sh")
        .args([
            "-c",
            "printf '%s' \"$2\" > \"$1\" && chmod 755 \"$1\"",
            "sh",
        ])
        .arg(sb.join("bin/tune-bench"))
        .arg("#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$(dirname \"$0\")/args\"\nexit 7\n")
        .status()
        .expect("sh starts");
    assert!(status.success(), "writing the stand-in: {status}");
    let mut cmd = Command::new(&tune);
    cmd.args(["bench", "optimizers", "--help", "--seeds", "3", "-x"]);
    let out = output_within(cmd, PATIENCE);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let args = std::fs::read_to_string(sb.join("bin/args")).expect("the stand-in ran");
    assert_eq!(args, "optimizers\n--help\n--seeds\n3\n-x\n");
}

#[test]
fn tune_bench_without_tune_bench_beside_tune_names_the_build_command() {
    let sb = Sandbox::new();
    let tune = lone_tune(&sb);
    let mut cmd = Command::new(&tune);
    cmd.args(["bench", "overhead"]);
    let out = output_within(cmd, PATIENCE);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("tune-bench not found") && err.contains("cargo build -p tune-bench"),
        "{err}"
    );
}
