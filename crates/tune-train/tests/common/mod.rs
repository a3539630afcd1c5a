//! What the trainer's end-to-end tests share: the `tune` binary they drive, and the small
//! builtin study whose one trial they cut off and resume. Each test binary uses some of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The `tune` binary beside this test's (`cargo test -p tune-train` does not build it: build
/// it first, `cargo build -p tune` or `cargo build --workspace`), or `TUNE_TEST_BIN`.
pub fn tune_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TUNE_TEST_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test knows its own path");
    let tune = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test runs from target/<profile>/deps")
        .join("tune");
    assert!(
        tune.is_file(),
        "{} not found: build it first (cargo build -p tune, or cargo build --workspace)",
        tune.display()
    );
    tune
}

/// One builtin trial of 6 short epochs on the digits MLP, seeded: the same params and draws
/// every run. `extra` goes into its `[trial]` table (e.g. a `checkpoint_dir`).
pub fn resume_study(extra: &str) -> String {
    format!(
        r#"
[study]
name = "resume"
metric = "val_loss"
trials = 1
seed = 3

[space]
lr = {{ type = "float", low = 1e-3, high = 2e-3, log = true }}

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "builtin"
epochs = 6
batch_size = 8
{extra}
[trial.model]
kind = "mlp"
width = 256
depth = 2

[trial.data]
dataset = "digits"
"#
    )
}

/// The worker log of a trial as `tune show N --format json` lists it, read whole.
pub fn worker_log(shown: &serde_json::Value) -> String {
    shown["logs"]
        .as_array()
        .and_then(|l| {
            l.iter()
                .find_map(|p| p.as_str().filter(|p| p.ends_with("worker.log")))
        })
        .map(|p| std::fs::read_to_string(p).expect("the re-run's worker log"))
        .expect("a worker log")
}

/// `tune --db DB ARGS…`, its standard output as JSON.
pub fn tune_json(db: &Path, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(tune_bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("tune runs");
    assert!(
        out.status.success(),
        "tune {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `tune --db DB run --no-tui STUDY` to its end, which must succeed: its standard error (the
/// run's log lines).
pub fn run_study(db: &Path, study: &Path) -> String {
    let out = std::process::Command::new(tune_bin())
        .arg("--db")
        .arg(db)
        .args(["run", "--no-tui"])
        .arg(study)
        .output()
        .expect("tune runs");
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{log}");
    log
}
