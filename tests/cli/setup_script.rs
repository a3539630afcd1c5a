//! `scripts/setup.sh`: the arguments and the check of an installed torch, which both end before
//! anything is installed or built (a wrong torch must be refused up front, with the ways out).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::common::{PATIENCE, Sandbox, output_within, stderr, text};

fn setup(args: &[&str]) -> Output {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/setup.sh");
    let mut c = Command::new("bash");
    c.arg(script).args(args).stdin(Stdio::null());
    output_within(c, PATIENCE)
}

/// A stand-in Python whose `import torch` reports `version`, `dir` and `cuda`, as the
/// script's one-liner prints them.
fn fake_python(sb: &Sandbox, version: &str, dir: &str, cuda: &str) -> String {
    let p = sb.write(
        "python",
        &format!("#!/bin/sh\nprintf '%s\\n%s\\n%s\\n' '{version}' '{dir}' '{cuda}'\n"),
    );
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
        .expect("make the stand-in python executable");
    p.display().to_string()
}

#[test]
fn an_unknown_argument_prints_the_usage_with_cuda_and_exits_2() {
    let out = setup(&["--gpu"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("[--cuda [--torch-python PYTHON] [--check]]"),
        "{}",
        text(&out)
    );
}

#[test]
fn torch_python_without_cuda_is_refused() {
    let out = setup(&["--torch-python", "/usr/bin/python3"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("--torch-python goes with --cuda"),
        "{}",
        text(&out)
    );
}

#[test]
fn an_installed_torch_of_another_version_is_refused_with_both_ways_out() {
    let sb = Sandbox::new();
    let py = fake_python(&sb, "2.11.0+cu130", "/opt/venv/torch", "13.0");
    let out = setup(&["--cuda", "--torch-python", &py]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    for needle in [
        "expects torch 2.13.x",
        "has torch 2.11.0+cu130 (/opt/venv/torch)",
        "./scripts/setup.sh --cuda",
        "crates/tune-train/Cargo.toml",
        "LIBTORCH=/opt/venv/torch cargo build --release --workspace --features tune-train/cuda",
    ] {
        assert!(err.contains(needle), "stderr lacks `{needle}`:\n{err}");
    }
}

#[test]
fn an_installed_torch_of_the_right_version_without_cuda_is_refused() {
    let sb = Sandbox::new();
    let py = fake_python(&sb, "2.13.0+cpu", "/opt/venv/torch", "");
    let out = setup(&["--cuda", "--torch-python", &py]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("built without CUDA"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_python_without_torch_is_refused() {
    let sb = Sandbox::new();
    let py = sb.write(
        "python",
        "#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n",
    );
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = setup(&["--cuda", "--torch-python", &py.display().to_string()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("cannot import torch"),
        "{}",
        text(&out)
    );
    assert!(
        stderr(&out).contains("No module named torch"),
        "{}",
        text(&out)
    );
}
