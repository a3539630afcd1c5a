//! Issue 27, checkpoints in an object store: a builtin trial whose snapshots go to an S3 server
//! (moto's server mode, `tests/cli/moto.rs` of the root package) is cut off by a `kill -9` of
//! tune, its local staging directory deleted (as on a machine that never ran it), and its next
//! attempt fetches `latest.snap` from the store and resumes there: every epoch once in its
//! curve, and nothing left in the store once it completed.
//!
//! Needs `tune` built first (`cargo build -p tune`), as `trainer_cli.rs` does.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
#[path = "../../../tests/cli/moto.rs"]
mod moto;

use common::{resume_study, tune_bin};

/// trial 0's copy in the bucket.
const TRIAL_0: &str = "tune/resume/trial-00000/";

fn tune(dir: &Path, env: &[(&str, String)], args: &[&str]) -> Command {
    let mut c = Command::new(tune_bin());
    c.arg("--db").arg(dir.join("t.db")).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn json(out: Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn a_builtin_trial_killed_mid_run_resumes_on_another_machine_from_the_object_store() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(moto) = moto::Moto::start(&repo, &[]) else {
        return;
    };
    moto.create_bucket("ckpt");
    let env = moto.env();
    let dir = tempfile::tempdir().expect("temp dir");
    let study = dir.path().join("study.toml");
    std::fs::write(
        &study,
        resume_study("checkpoint_dir = \"s3://ckpt/tune\"\n"),
    )
    .expect("write study");
    let study_arg = study.to_str().expect("utf-8 path");

    let mut running = tune(dir.path(), &env, &["run", "--no-tui", study_arg])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tune runs");
    // Cut off in epoch 3 or later, once a checkpoint is in the store.
    let start = Instant::now();
    let mut killed_at = None;
    while start.elapsed() < Duration::from_secs(120) && killed_at.is_none() {
        std::thread::sleep(Duration::from_millis(50));
        let Ok(out) = tune(
            dir.path(),
            &env,
            &[
                "trials", study_arg, "--state", "running", "--format", "json",
            ],
        )
        .output() else {
            continue;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
            continue;
        };
        let epoch = v[0]["metrics"]["epoch"].as_f64().filter(|e| *e >= 3.0);
        let uploaded = || {
            moto.keys("ckpt", TRIAL_0)
                .contains(&format!("{TRIAL_0}latest.snap"))
        };
        if let Some(e) = epoch.filter(|_| uploaded()) {
            running.kill().expect("SIGKILL tune");
            killed_at = Some(e);
        }
    }
    let killed_at = killed_at.expect("trial 0 reached epoch 3 with a checkpoint in the store");
    running.wait().expect("tune is gone");
    assert!(killed_at < 6.0, "killed mid-trial: {killed_at}");
    // The keeper takes the worker down with tune.
    std::thread::sleep(Duration::from_millis(500));
    let keys = moto.keys("ckpt", TRIAL_0);
    assert!(
        keys.contains(&format!("{TRIAL_0}trial.json")),
        "the owner object: {keys:?}"
    );

    // Another machine: none of trial 0's local checkpoints.
    let local = dir.path().join("runs/resume/trial-00000/checkpoints");
    assert!(local.join("latest.snap").is_file(), "staged locally");
    std::fs::remove_dir_all(&local).expect("the staging directory goes");

    let out = tune(dir.path(), &env, &["run", "--no-tui", study_arg])
        .stdin(Stdio::null())
        .output()
        .expect("tune runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("fetched") && err.contains("s3://ckpt/tune/resume/trial-00000"),
        "{err}"
    );
    let trials = json(
        tune(dir.path(), &env, &["trials", study_arg, "--format", "json"])
            .output()
            .expect("tune runs"),
    );
    let rerun = trials
        .as_array()
        .expect("trials")
        .iter()
        .find(|t| t["state"] == "complete")
        .unwrap_or_else(|| panic!("the re-run completed: {trials:#?}"));
    let n = rerun["number"].as_u64().expect("number");
    assert_ne!(n, 0, "trial 0 was cut off");
    let shown = json(
        tune(
            dir.path(),
            &env,
            &["show", &n.to_string(), study_arg, "--format", "json"],
        )
        .output()
        .expect("tune runs"),
    );
    assert_eq!(shown["attempt"].as_u64(), Some(2), "{shown:#}");
    let epochs: Vec<f64> = shown["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .filter_map(|r| r["metrics"]["epoch"].as_f64())
        .collect();
    assert_eq!(epochs, (1..=6).map(f64::from).collect::<Vec<_>>());
    // Resumed from the fetched snapshot, not from scratch: the re-run's worker says where.
    let log = common::worker_log(&shown);
    assert!(
        log.contains("resumed from the checkpoint at step"),
        "resumed, not restarted: {log}"
    );
    // keep_checkpoints = "none": the completed trial's copy is gone.
    let left = moto.keys("ckpt", "tune/resume/");
    assert!(left.is_empty(), "cleaned: {left:?}");
}
