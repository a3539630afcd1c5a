//! Checkpoints in an object store (issue 27), against a real S3-compatible server (moto's
//! server mode, `tests/cli/moto.rs`): a command trial's staging directory goes up after each
//! checkpoint line, comes back on another machine (here: the local directory deleted) for the
//! trial's next attempt, and is cleaned when the trial ends; a store that cannot take the
//! checkpoints is refused before any trial, and one lost mid-study is a warning; one that
//! fails when a re-run fetches its copy leaves the re-run with what its staging directory
//! holds (resumed on the same machine, from scratch on another), and the study completes.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rstest::rstest;
use serde_json::Value;

use crate::common::{
    PATIENCE, Sandbox, counted, report_steps, stderr, text, wait_output, wait_until, wait_within,
};
use crate::moto::{Moto, Outage, free_port, s3_env};

const BUCKET: &str = "ckpt";
const URL: &str = "s3://ckpt/tune";
/// The prefix of trial 0's copy: `<url>/<study>/trial-00000/`.
const TRIAL_0: &str = "tune/resumable-curve/trial-00000/";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The shipped resumable example (`studies/resumable-curve.toml`) with `trials` trials on one
/// slot, epochs of 0.3 s, and its checkpoints in `checkpoint_dir` (a URL or a directory); its
/// path in `sb`.
pub(crate) fn store_study(sb: &Sandbox, trials: u32, checkpoint_dir: &str) -> &'static str {
    let file = crate::attempts::resumable_study(sb, trials);
    let study = std::fs::read_to_string(sb.join(file))
        .expect("the study")
        .replace(
            "timeout = \"2m\"",
            &format!("timeout = \"2m\"\ncheckpoint_dir = \"{checkpoint_dir}\""),
        );
    assert!(study.contains(checkpoint_dir), "{study}");
    sb.write(file, &study);
    file
}

/// Epochs of 1 s for a test that kills tune once trial 0's copy holds a checkpoint: the kill
/// must come mid-trial even on a loaded machine, where the store is polled seconds apart (with
/// 0.3 s epochs trial 0 could end, and its copy be cleaned, between that poll and the kill).
pub(crate) fn slow_epochs(sb: &Sandbox, file: &str) {
    let study = std::fs::read_to_string(sb.join(file))
        .expect("the study")
        .replace(
            "\"--epoch-seconds\", \"0.3\"",
            "\"--epoch-seconds\", \"1.0\"",
        );
    assert!(study.contains("\"1.0\""), "{study}");
    sb.write(file, &study);
}

/// Runs `file` and kills tune (SIGKILL, a lost machine) once `ready` holds, then gives the
/// keeper the moment it needs to take the trial's process down with it.
fn kill_once(
    sb: &Sandbox,
    env: &[(&str, String)],
    file: &str,
    what: &str,
    ready: impl FnMut() -> bool,
) {
    let mut child = tune_with(sb, env, &["run", file, "--no-tui"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tune starts");
    wait_until(PATIENCE, what, ready);
    child.kill().expect("SIGKILL the orchestrator");
    wait_within(&mut child, PATIENCE);
    std::thread::sleep(Duration::from_millis(300));
}

/// `tune ARGS` with `env` (the store's endpoint and credentials) added.
fn tune_with(sb: &Sandbox, env: &[(&str, String)], args: &[&str]) -> std::process::Command {
    let mut c = sb.tune(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// The epoch in a `state.json` the example script saved.
fn epoch_of(state: &str) -> Option<i64> {
    serde_json::from_str::<Value>(state).ok()?["epoch"].as_i64()
}

#[test]
fn a_command_trial_killed_mid_run_resumes_on_another_machine_from_the_object_store() {
    let Some(moto) = Moto::start(repo(), &[]) else {
        return;
    };
    moto.create_bucket(BUCKET);
    let env = moto.env();
    let sb = Sandbox::new();
    let file = store_study(&sb, 3, URL);
    slow_epochs(&sb, file);

    let remote_epoch = || {
        moto.get(BUCKET, &format!("{TRIAL_0}state.json"))
            .and_then(|s| epoch_of(&s))
    };
    let local = sb.join("studies/runs/resumable-curve/trial-00000/checkpoints");
    // The upload runs beside the trial, so the store may lag the staging directory: wait for
    // the store's own copy to hold epoch 1 or later (listing first: a GET is slower).
    kill_once(
        &sb,
        &env,
        file,
        "trial 0's epoch 1 or later in the store",
        || {
            moto.keys(BUCKET, TRIAL_0)
                .contains(&format!("{TRIAL_0}state.json"))
                && remote_epoch().is_some_and(|e| e >= 1)
        },
    );
    let kept = remote_epoch().expect("a checkpoint in the store survives the kill");
    assert!((1..5).contains(&kept), "killed mid-trial: {kept}");
    let keys = moto.keys(BUCKET, TRIAL_0);
    for k in ["trial.json", "state.json", "attempts.log"] {
        assert!(keys.contains(&format!("{TRIAL_0}{k}")), "{k} in {keys:?}");
    }
    assert!(
        !keys.iter().any(|k| k.ends_with(".tmp")),
        "temporary files stay local: {keys:?}"
    );
    // `tune show` lists the copy.
    let out = tune_with(&sb, &env, &["show", "0", file])
        .output()
        .expect("show");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!("object(s) at {URL}/resumable-curve/trial-00000")),
        "{}",
        text(&out)
    );

    // Another machine: none of trial 0's local checkpoints.
    std::fs::remove_dir_all(&local).expect("the local staging directory goes");

    let out = wait_output(
        tune_with(&sb, &env, &["run", file, "--no-tui"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tune starts"),
        PATIENCE,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("fetched") && stderr(&out).contains(URL),
        "the fetch is told: {}",
        text(&out)
    );
    let trials = sb.trials(file);
    assert_eq!(counted(&trials), 3, "{trials:#?}");
    let first = trials.iter().find(|t| t["number"] == 0).expect("trial 0");
    let rerun = crate::attempts::rerun_of(&trials, first);
    assert_eq!(rerun["state"], "complete", "{rerun:#}");
    let r = rerun["number"].as_u64().expect("a number");

    // Attempt 2 found attempt 1's files, fetched from the store, and went on after its epoch.
    let log = std::fs::read_to_string(local.join("attempts.log")).expect("attempts.log");
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            "attempt=1 trial=0 resumed_from=-1".to_string(),
            format!("attempt=2 trial={r} resumed_from={kept}"),
        ],
        "{log}"
    );
    let out = sb.ok(&["show", &r.to_string(), file, "--format", "json"]);
    let shown: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let steps: Vec<i64> = shown["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .map(|x| x["step"].as_i64().expect("a step"))
        .collect();
    let all: Vec<i64> = (0..6).collect();
    let gap: Vec<i64> = all.iter().copied().filter(|e| *e != kept).collect();
    assert!(steps == all || steps == gap, "{steps:?} (kept {kept})");
    // Every trial ended for good: nothing of any stays in the store.
    let left = moto.keys(BUCKET, "tune/resumable-curve/");
    assert!(left.is_empty(), "cleaned at each trial's end: {left:?}");
}

/// How a store that cannot take the checkpoints is refused: each case's study file, the
/// environment, and what the message must name.
fn refused(sb: &Sandbox, env: &[(&str, String)], url: &str, why: &str) {
    let file = store_study(sb, 1, url);
    let out = wait_output(
        tune_with(sb, env, &["run", file, "--no-tui"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tune starts"),
        PATIENCE,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    for want in ["trial.checkpoint_dir", url, "writing a test object", why] {
        assert!(err.contains(want), "{want:?} in: {err}");
    }
    assert!(
        !sb.join("studies/tune.db").exists(),
        "refused before the database is touched"
    );
    assert!(!sb.join("studies/runs").exists(), "no trial ran");
}

#[test]
fn an_unreachable_object_store_is_refused_before_any_trial_with_status_2() {
    // A port nobody listens on: connection refused. Needs no moto.
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let sb = Sandbox::new();
    refused(&sb, &s3_env(&endpoint), URL, &endpoint);
}

#[test]
fn a_missing_bucket_is_refused_before_any_trial_with_status_2() {
    let Some(moto) = Moto::start(repo(), &[]) else {
        return;
    };
    let sb = Sandbox::new();
    refused(&sb, &moto.env(), "s3://no-such-bucket/tune", "NoSuchBucket");
}

#[test]
fn credentials_the_store_refuses_are_refused_before_any_trial_with_status_2() {
    // moto checks credentials only when asked to (INITIAL_NO_AUTH_ACTION_COUNT=0); it then
    // knows no access key but those of its own IAM users, so ours is refused.
    let Some(moto) = Moto::start(repo(), &[("INITIAL_NO_AUTH_ACTION_COUNT", "0")]) else {
        return;
    };
    let sb = Sandbox::new();
    refused(&sb, &moto.env(), URL, "InvalidAccessKeyId");
}

#[test]
fn a_store_lost_mid_study_is_a_warning_and_the_trials_go_on() {
    let Some(mut moto) = Moto::start(repo(), &[]) else {
        return;
    };
    moto.create_bucket(BUCKET);
    let env = moto.env();
    let sb = Sandbox::new();
    let file = store_study(&sb, 2, URL);
    let child = tune_with(&sb, &env, &["run", file, "--no-tui"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts");
    wait_until(PATIENCE, "a checkpoint of trial 0 in the store", || {
        moto.keys(BUCKET, TRIAL_0)
            .contains(&format!("{TRIAL_0}state.json"))
    });
    moto.stop();
    let out = wait_output(child, PATIENCE);
    assert!(out.status.success(), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("cannot upload its checkpoint (trial.checkpoint_dir)")
            && err.contains(URL)
            && err.contains("the trial goes on"),
        "{err}"
    );
    // Once a trial, not once a checkpoint: the store never came back.
    assert!(
        err.matches("cannot upload its checkpoint").count() <= 2,
        "{err}"
    );
    let trials = sb.trials(file);
    assert_eq!(counted(&trials), 2, "{trials:#?}");
    assert!(
        trials.iter().all(|t| t["state"] == "complete"),
        "{trials:#?}"
    );
}

/// `tune delete` removes the copies tune keeps in the object store for the study's trials
/// (here: trial 0's, left by a kill -9 mid-trial), so a deleted study leaves nothing in the
/// bucket; a command trial's local checkpoint directory (its script's files) stays, and the
/// message says so.
#[test]
fn deleting_a_study_removes_its_checkpoint_copies_from_the_object_store() {
    let Some(moto) = Moto::start(repo(), &[]) else {
        return;
    };
    moto.create_bucket(BUCKET);
    let env = moto.env();
    let sb = Sandbox::new();
    let file = store_study(&sb, 3, URL);
    slow_epochs(&sb, file);
    kill_once(&sb, &env, file, "trial 0's checkpoint in the store", || {
        moto.keys(BUCKET, TRIAL_0)
            .contains(&format!("{TRIAL_0}state.json"))
    });
    let before = moto.keys(BUCKET, "tune/resumable-curve/");
    assert!(before.len() >= 3, "{before:?}");

    let out = tune_with(&sb, &env, &["delete", file, "--yes"])
        .output()
        .expect("delete");
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("removed its checkpoints at {URL}: ")),
        "{said}"
    );
    assert!(
        said.contains("checkpoint directories (their scripts' files) are left"),
        "{said}"
    );
    let after = moto.keys(BUCKET, "tune/resumable-curve/");
    assert!(
        after.is_empty(),
        "the bucket keeps nothing of the study: {after:?}"
    );
    assert!(
        sb.join("studies/runs/resumable-curve/trial-00000/checkpoints/state.json")
            .exists(),
        "the script's own files stay"
    );
}

/// What the machine of a re-run holds of the trial's checkpoints when the store fails it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Staging {
    /// The same machine: the staging directory as the killed attempt left it.
    Kept,
    /// Another machine: nothing of the trial here.
    Removed,
}

/// The store passes tune's up-front probe, then fails at the re-run's first request for the
/// trial's copy (and stays down: uploads and the clean-up fail too). The re-run says the fetch
/// failed, naming the key and the cause, and runs from what its staging directory holds: on
/// the machine that ran the lost attempt it resumes after the epoch saved there, every epoch
/// once in its curve; on another it starts from scratch and says so. Either way it completes.
#[rstest]
#[case::staging_kept_resumes_from_it(Staging::Kept)]
#[case::staging_removed_starts_from_scratch(Staging::Removed)]
fn a_store_that_fails_the_reruns_fetch_leaves_it_with_its_staging_directory(
    #[case] staging: Staging,
) {
    let Some(moto) = Moto::start(repo(), &[]) else {
        return;
    };
    moto.create_bucket(BUCKET);
    let sb = Sandbox::new();
    let file = store_study(&sb, 1, URL);
    slow_epochs(&sb, file);
    let local = sb.join("studies/runs/resumable-curve/trial-00000/checkpoints");
    kill_once(
        &sb,
        &moto.env(),
        file,
        "trial 0's epoch 1 or later in the store",
        || {
            moto.keys(BUCKET, TRIAL_0)
                .contains(&format!("{TRIAL_0}state.json"))
                && moto
                    .get(BUCKET, &format!("{TRIAL_0}state.json"))
                    .and_then(|s| epoch_of(&s))
                    .is_some_and(|e| e >= 1)
        },
    );
    // The staging directory may be an epoch ahead of the store (its upload cut off by the kill).
    let saved = crate::attempts::saved_epoch(&local).expect("the staging directory's epoch");
    assert!((1..5).contains(&saved), "killed mid-trial: {saved}");
    if staging == Staging::Removed {
        std::fs::remove_dir_all(&local).expect("the staging directory goes");
    }

    let outage = Outage::start(moto.port, "/trial-00000/");
    let out = wait_output(
        tune_with(&sb, &s3_env(&outage.endpoint()), &["run", file, "--no-tui"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tune starts"),
        PATIENCE,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(outage.is_down(), "the fetch met the outage: {}", text(&out));
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    let trials = sb.trials(file);
    assert_eq!(counted(&trials), 1, "{trials:#?}");
    let first = trials.iter().find(|t| t["number"] == 0).expect("trial 0");
    let rerun = crate::attempts::rerun_of(&trials, first);
    assert_eq!(rerun["state"], "complete", "{rerun:#}");
    let r = rerun["number"].as_u64().expect("a number");

    let fetch = format!(
        "tune: trial {r}: cannot fetch its checkpoints (trial.checkpoint_dir): {URL}/resumable-curve/trial-00000: reading its owner: "
    );
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with(&fetch)).collect();
    assert_eq!(said.len(), 1, "the failed fetch is told once:\n{err}");
    let log = std::fs::read_to_string(local.join("attempts.log")).expect("attempts.log");
    let steps = report_steps(&crate::attempts::show(&sb, file, r));
    let all: Vec<i64> = (0..6).collect();
    match staging {
        Staging::Kept => {
            assert!(
                said[0].ends_with(&format!("; it runs from what {} holds", local.display())),
                "{}",
                said[0]
            );
            assert_eq!(
                log.lines().collect::<Vec<_>>(),
                [
                    "attempt=1 trial=0 resumed_from=-1".to_string(),
                    format!("attempt=2 trial={r} resumed_from={saved}"),
                ],
                "resumed from the staging directory: {log}"
            );
            // A kill -9 may take the saved epoch's report with tune: then it is missing,
            // never repeated.
            let gap: Vec<i64> = all.iter().copied().filter(|e| *e != saved).collect();
            assert!(steps == all || steps == gap, "{steps:?} (saved {saved})");
        }
        Staging::Removed => {
            assert!(
                said[0].ends_with(&format!(
                    "; it starts from scratch: {} holds no checkpoint on this machine",
                    local.display()
                )),
                "{}",
                said[0]
            );
            assert_eq!(log, format!("attempt=2 trial={r} resumed_from=-1\n"));
            assert_eq!(steps, all, "a curve of its own");
        }
    }
    // The store stayed down: the uploads and the clean-up are warnings, not failures.
    assert!(
        err.contains("cannot upload its checkpoint (trial.checkpoint_dir)"),
        "{err}"
    );
    // What the store kept of attempt 1 is still there for a later run to clean.
    assert!(
        moto.keys(BUCKET, TRIAL_0)
            .contains(&format!("{TRIAL_0}state.json")),
        "nothing lost in the store"
    );
}
