//! Attempts (issue 27): a command trial interrupted mid-run (`kill -9` of tune) runs its params
//! again as attempt 2, with `TUNE_ATTEMPT=2` and the same `TUNE_CHECKPOINT_DIR`, so the shipped
//! example script (`studies/resumable_curve.py`) goes on after its last saved epoch and the
//! re-run's curve never repeats a step.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::common::{PATIENCE, Sandbox, counted, text, wait_output, wait_until, wait_within};

/// The epoch saved in a checkpoint directory's `state.json`, if there is one.
pub(crate) fn saved_epoch(dir: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(dir.join("state.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["epoch"].as_i64()
}

pub(crate) fn show(sb: &Sandbox, study: &str, n: u64) -> Value {
    let out = sb.ok(&["show", &n.to_string(), study, "--format", "json"]);
    serde_json::from_slice(&out.stdout).expect("`tune show` prints JSON")
}

/// The trial that ran `first`'s params again (its next attempt).
pub(crate) fn rerun_of<'a>(trials: &'a [Value], first: &Value) -> &'a Value {
    trials
        .iter()
        .find(|t| t["number"] != first["number"] && t["params"] == first["params"])
        .expect("the first trial's params ran again")
}

/// The shipped example (`studies/resumable-curve.toml` and its script) in `sb`, with `trials`
/// trials on one slot, epochs of 0.3 s; its path there.
pub(crate) fn resumable_study(sb: &Sandbox, trials: u32) -> &'static str {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("studies");
    let script = std::fs::read_to_string(root.join("resumable_curve.py")).expect("the script");
    sb.write("studies/resumable_curve.py", &script);
    let study = std::fs::read_to_string(root.join("resumable-curve.toml")).expect("the study");
    let study = study
        .replace("trials = 8", &format!("trials = {trials}"))
        .replace("count = 2", "count = 1")
        .replace(
            "\"--epochs\", \"6\"]",
            "\"--epochs\", \"6\", \"--epoch-seconds\", \"0.3\"]",
        );
    assert!(
        study.contains("0.3") && study.contains(&format!("trials = {trials}")),
        "{study}"
    );
    let file = "studies/resumable-curve.toml";
    sb.write(file, &study);
    file
}

#[test]
fn a_kill_9_mid_trial_reruns_it_as_attempt_2_from_its_checkpoint() {
    let sb = Sandbox::new();
    let file = resumable_study(&sb, 3);

    let mut child = sb
        .tune(&["run", file, "--no-tui"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tune starts");
    let ckpt: PathBuf = sb.join("studies/runs/resumable-curve/trial-00000/checkpoints");
    wait_until(PATIENCE, "trial 0 saved epoch 1", || {
        saved_epoch(&ckpt).is_some_and(|e| e >= 1)
    });
    child.kill().expect("SIGKILL the orchestrator");
    wait_within(&mut child, PATIENCE);
    // The keeper takes the trial's process down with tune; give it the moment it needs.
    std::thread::sleep(Duration::from_millis(300));
    let kept = saved_epoch(&ckpt).expect("a checkpoint survives the kill");
    assert!(
        (1..5).contains(&kept),
        "killed mid-trial, not at its end: {kept}"
    );

    let out = sb.ok(&["run", file, "--no-tui"]);
    let trials = sb.trials(file);
    assert_eq!(
        counted(&trials),
        3,
        "exactly the budget: {trials:#?}\n{}",
        text(&out)
    );
    let first = trials.iter().find(|t| t["number"] == 0).expect("trial 0");
    assert_eq!(first["state"], "failed", "{first:#}");
    let rerun = rerun_of(&trials, first);
    assert_eq!(rerun["state"], "complete", "{rerun:#}");
    let r = rerun["number"].as_u64().expect("a number");

    // Attempt 2 ran in trial 0's checkpoint directory and resumed after the kept epoch.
    let log = std::fs::read_to_string(ckpt.join("attempts.log")).expect("attempts.log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            "attempt=1 trial=0 resumed_from=-1".to_string(),
            format!("attempt=2 trial={r} resumed_from={kept}"),
        ],
        "{log}"
    );
    let shown = show(&sb, file, r);
    assert_eq!(shown["attempt"], 2, "{shown:#}");
    assert_eq!(shown["retry_of"], 0, "{shown:#}");
    assert_eq!(shown["first_attempt"], 0, "{shown:#}");
    let first_shown = show(&sb, file, 0);
    assert_eq!(first_shown["attempt"], 1, "{first_shown:#}");
    assert_eq!(first_shown["retry_of"], Value::Null, "{first_shown:#}");
    let out = sb.ok(&["show", &r.to_string(), file]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("attempt 2 at these params: re-runs interrupted trial 0"),
        "{}",
        text(&out)
    );
    let steps: Vec<i64> = shown["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .map(|x| x["step"].as_i64().expect("a step"))
        .collect();
    // Attempt 1's reports before the re-run's first step (its checkpoint lines said it
    // checkpoints), then the re-run's own: every epoch once, in order. A kill -9 may take the
    // last epoch's lines with tune (the keeper stops the script a moment after tune died, and
    // it may save that epoch meanwhile): that epoch is then missing, never repeated.
    let all: Vec<i64> = (0..6).collect();
    let gap: Vec<i64> = all.iter().copied().filter(|e| *e != kept).collect();
    assert!(
        steps == all || steps == gap,
        "{steps:?} (kept {kept}): {shown:#}"
    );
    // Trials that were never interrupted are first attempts in checkpoint directories of
    // their own.
    for t in trials
        .iter()
        .filter(|t| t["number"] != 0 && t["number"] != r)
    {
        let n = t["number"].as_u64().expect("a number");
        let own = sb.join(&format!(
            "studies/runs/resumable-curve/trial-{n:05}/checkpoints/attempts.log"
        ));
        let log = std::fs::read_to_string(&own).expect("its own attempts.log");
        assert_eq!(log, format!("attempt=1 trial={n} resumed_from=-1\n"));
    }
}

/// Preemption (SIGTERM to `tune run`, issue 27): the trial stops mid-run, recorded interrupted
/// and queued again at once, `tune` exits 75; the next run takes it from the queue as attempt 2
/// in the same checkpoint directory and resumes after its last saved epoch.
#[test]
fn a_sigterm_mid_trial_exits_75_and_the_rerun_is_attempt_2_from_its_checkpoint() {
    let sb = Sandbox::new();
    let file = resumable_study(&sb, 2);

    let child = sb
        .tune(&["run", file, "--no-tui"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts");
    let ckpt: PathBuf = sb.join("studies/runs/resumable-curve/trial-00000/checkpoints");
    wait_until(PATIENCE, "trial 0 saved epoch 1", || {
        saved_epoch(&ckpt).is_some_and(|e| e >= 1)
    });
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let out = wait_output(child, PATIENCE);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    let kept = saved_epoch(&ckpt).expect("the checkpoint stays");
    assert!(
        (1..5).contains(&kept),
        "stopped mid-trial, not at its end: {kept}"
    );
    let stopped = sb.trials(file);
    let first = stopped.iter().find(|t| t["number"] == 0).expect("trial 0");
    assert_eq!(first["state"], "failed", "{first:#}");
    assert!(
        first["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("interrupted: preempted")),
        "{first:#}"
    );
    assert_eq!(counted(&stopped), 0, "{stopped:#?}");
    assert!(
        stopped
            .iter()
            .any(|t| t["state"] == "queued" && t["params"] == first["params"]),
        "queued again at once: {stopped:#?}"
    );

    let out = sb.ok(&["run", file, "--no-tui"]);
    let trials = sb.trials(file);
    assert_eq!(
        counted(&trials),
        2,
        "exactly the budget: {trials:#?}\n{}",
        text(&out)
    );
    let rerun = rerun_of(&trials, first);
    assert_eq!(rerun["state"], "complete", "{rerun:#}");
    let r = rerun["number"].as_u64().expect("a number");
    let log = std::fs::read_to_string(ckpt.join("attempts.log")).expect("attempts.log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            "attempt=1 trial=0 resumed_from=-1".to_string(),
            format!("attempt=2 trial={r} resumed_from={kept}"),
        ],
        "{log}"
    );
    let shown = show(&sb, file, r);
    assert_eq!(shown["attempt"], 2, "{shown:#}");
    let steps: Vec<i64> = shown["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .map(|x| x["step"].as_i64().expect("a step"))
        .collect();
    // Epochs 0..=kept from attempt 1 (its checkpoint lines said it saved them), the rest from
    // attempt 2: every epoch once, in order.
    let want: Vec<i64> = (0..6).collect();
    assert_eq!(steps, want, "every epoch once: {shown:#}");
    let first_run = show(&sb, file, 0);
    let lost: Vec<f64> = first_run["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .map(|x| x["metrics"]["val_loss"].as_f64().expect("a loss"))
        .collect();
    let kept_values: Vec<f64> = shown["reports"].as_array().expect("reports")[..=kept as usize]
        .iter()
        .map(|x| x["metrics"]["val_loss"].as_f64().expect("a loss"))
        .collect();
    assert_eq!(
        kept_values,
        lost[..=kept as usize],
        "the kept epochs are attempt 1's reports: {shown:#}"
    );
}
