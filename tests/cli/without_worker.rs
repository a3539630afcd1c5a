//! `tune` built alone, without libtorch, has no `tune-worker` beside it: command studies run as
//! ever, and a builtin study is refused before any trial starts, saying how to build the worker.
//!
//! The binary under test is copied alone into the sandbox, so that a `tune-worker` that a
//! workspace build left in the same target directory cannot hide the case.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::{PATIENCE, Sandbox, output_within, sh_study, stderr, text, tune_bin};

/// Copies `tune` alone into the sandbox's `bin/` and returns its path.
fn lone_tune(sb: &Sandbox) -> PathBuf {
    let lone = sb.join("bin/tune");
    std::fs::create_dir_all(sb.join("bin")).expect("create bin/");
    // fs::copy keeps the permission bits, so the copy stays executable.
    std::fs::copy(tune_bin(), &lone).expect("copy the tune binary");
    assert!(!sb.join("bin/tune-worker").exists());
    lone
}

fn run(sb: &Sandbox, tune: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(tune);
    c.args(args)
        .current_dir(sb.path())
        .env_remove("TUNE_DB")
        .stdin(Stdio::null());
    output_within(c, PATIENCE)
}

const BUILTIN: &str = r#"[study]
name = "builtin"
metric = "val_loss"
trials = 2

[space]
lr = { type = "float", low = 1e-3, high = 1e-1, log = true }

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "builtin"
epochs = 1

[trial.model]
kind = "mlp"

[trial.data]
dataset = "digits"
"#;

#[test]
fn a_builtin_study_without_tune_worker_is_refused_before_any_trial_saying_how_to_build_it() {
    let sb = Sandbox::new();
    let tune = lone_tune(&sb);
    sb.write("builtin.toml", BUILTIN);
    let out = run(
        &sb,
        &tune,
        &["--db", "t.db", "run", "builtin.toml", "--no-tui"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    for needle in [
        "tune-worker",
        "./scripts/setup.sh --libtorch",
        "cargo build --release --workspace",
    ] {
        assert!(err.contains(needle), "stderr lacks `{needle}`:\n{err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        !sb.join("t.db").exists(),
        "no study was created, so no trial started: {}",
        text(&out)
    );
}

#[test]
fn a_command_study_runs_without_tune_worker() {
    let sb = Sandbox::new();
    let tune = lone_tune(&sb);
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    sb.write("cmd.toml", &sh_study("cmd", 2, 1, "", &["{x}"]));
    let out = run(&sb, &tune, &["--db", "t.db", "run", "cmd.toml", "--no-tui"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(
        &sb,
        &tune,
        &["--db", "t.db", "trials", "cmd.toml", "--format", "json"],
    );
    let trials: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(trials.len(), 2, "{}", text(&out));
    assert!(
        trials.iter().all(|t| t["state"] == "complete"),
        "{trials:#?}"
    );
}
