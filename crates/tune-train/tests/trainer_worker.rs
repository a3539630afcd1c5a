//! The builtin trainer's worker processes, driven through `WorkerRunner` with the real
//! `tune-worker` binary: reuse across trials, a crash that fails only its trial, pruning, timeouts and
//! divergence. Digits and tiny models keep each test to a few seconds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tune::builtin::{BuiltinTrial, parse_builtin};
use tune::runner::worker::WorkerRunner;
use tune::runner::{Progress, RunEnd, RunResult, StopRequest, TrialJob, TrialRunner};
use tune::space::{ParamValue, Params, Space};
use tune::trial::{Report, TrialNumber};

fn trial(extra: &str) -> BuiltinTrial {
    let src = format!(
        "kind = \"builtin\"\nbatch_size = 64\n{extra}\n[model]\nkind = \"mlp\"\nwidth = 32\ndepth = 1\n[data]\ndataset = \"digits\"\n"
    );
    let t: toml::Table = toml::from_str(&src).expect("trial table");
    let space: toml::Table =
        toml::from_str(r#"lr = { type = "float", low = 1e-4, high = 1e9, log = true }"#)
            .expect("space table");
    let space = Space::from_toml(&space).expect("space");
    parse_builtin(&t, &space, Path::new(".")).expect("valid trial")
}

fn runner(t: BuiltinTrial) -> WorkerRunner {
    WorkerRunner::new(t, PathBuf::from(env!("CARGO_BIN_EXE_tune-worker")))
}

fn job(dir: &Path, number: u64, lr: f64, timeout: Option<Duration>) -> TrialJob {
    let mut params = Params::new();
    params.insert("lr".into(), ParamValue::Float(lr));
    TrialJob {
        number: TrialNumber(number),
        params,
        slot: 0,
        device: "cpu".into(),
        trial_dir: dir.join(format!("trial-{number}")),
        attempt: 1,
        first: TrialNumber(number),
        checkpoint_dir: tune::checkpoint::trial_dir(
            None,
            "study",
            number,
            &dir.join(format!("trial-{number}")),
        ),
        timeout,
        seed: 42,
    }
}

/// Runs a job to its end; `on_report` may ask for a stop.
async fn run(
    r: &WorkerRunner,
    job: TrialJob,
    mut on_report: impl FnMut(&Report) -> StopRequest,
) -> (RunResult, Vec<Report>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = watch::channel(StopRequest::None);
    let fut = r.run(job, tx, stop_rx);
    tokio::pin!(fut);
    let mut reports = Vec::new();
    loop {
        tokio::select! {
            res = &mut fut => {
                while let Ok(p) = rx.try_recv() {
                    if let Progress::Report(rep) = p {
                        reports.push(rep);
                    }
                }
                return (res, reports);
            }
            Some(p) = rx.recv() => {
                // Checkpoints are the engine's business; these tests look at the reports.
                let Progress::Report(rep) = p else { continue };
                let s = on_report(&rep);
                reports.push(rep);
                if s != StopRequest::None {
                    let _ = stop_tx.send(s);
                }
            }
        }
    }
}

/// The worker's pid, from the line it writes to each trial's log.
fn worker_pid(log: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix("tune worker ")?
            .split(':')
            .next()?
            .parse()
            .ok()
    })
}

#[tokio::test]
async fn a_worker_streams_reports_and_is_reused_from_trial_to_trial() {
    let dir = tempfile::tempdir().expect("temp dir");
    let r = runner(trial("epochs = 2"));
    let (a, reps) = run(&r, job(dir.path(), 0, 1e-2, None), |_| StopRequest::None).await;
    assert_eq!(a.end, RunEnd::Finished, "{a:?}");
    assert_eq!(reps.len(), 2);
    for key in [
        "val_loss",
        "val_acc",
        "train_loss",
        "samples_per_s",
        "data_wait",
        "epoch",
    ] {
        assert!(reps[1].metrics.contains_key(key), "{key} missing");
    }
    assert!(reps[1].metrics["val_acc"] > 0.5, "{:?}", reps[1].metrics);
    let (b, _) = run(&r, job(dir.path(), 1, 1e-2, None), |_| StopRequest::None).await;
    assert_eq!(b.end, RunEnd::Finished);
    assert_eq!(a.logs.len(), 1);
    let (pa, pb) = (worker_pid(&a.logs[0]), worker_pid(&b.logs[0]));
    assert!(pa.is_some());
    assert_eq!(pa, pb, "the second trial must reuse the first worker");
}

#[tokio::test]
async fn a_killed_worker_fails_its_trial_and_a_fresh_one_runs_the_next() {
    let dir = tempfile::tempdir().expect("temp dir");
    let r = runner(trial("time_budget = \"60s\"\nreport_every = 5"));
    let log = dir.path().join("trial-0").join("worker.log");
    let (res, _) = run(&r, job(dir.path(), 0, 1e-3, None), |_| {
        if let Some(pid) = worker_pid(&log) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        StopRequest::None
    })
    .await;
    match &res.end {
        RunEnd::Failed { reason, .. } => {
            assert!(reason.contains("signal 9"), "{reason}")
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    let r2 = job(dir.path(), 1, 1e-2, None);
    let short = runner(trial("epochs = 1"));
    let (next, _) = run(&short, r2, |_| StopRequest::None).await;
    assert_eq!(next.end, RunEnd::Finished);
    // The same runner replaces its dead worker too.
    let mut j = job(dir.path(), 2, 1e-2, Some(Duration::from_secs(2)));
    j.trial_dir = dir.path().join("trial-2");
    let (again, _) = run(&r, j, |_| StopRequest::None).await;
    match again.end {
        RunEnd::Failed { reason, .. } => {
            assert!(reason.starts_with("timed out after 2s"), "{reason}")
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[tokio::test]
async fn pruning_stops_the_trial_at_a_step_boundary_and_keeps_the_worker() {
    let dir = tempfile::tempdir().expect("temp dir");
    let r = runner(trial("time_budget = \"60s\"\nreport_every = 5"));
    let (a, reps) = run(&r, job(dir.path(), 0, 1e-3, None), |_| StopRequest::Prune).await;
    assert_eq!(a.end, RunEnd::Stopped);
    assert!(!reps.is_empty());
    let mut j = job(dir.path(), 1, 1e-3, None);
    j.trial_dir = dir.path().join("trial-1");
    let (b, _) = run(&r, j, |_| StopRequest::Cancel).await;
    assert_eq!(b.end, RunEnd::Stopped);
    assert_eq!(worker_pid(&a.logs[0]), worker_pid(&b.logs[0]));
}

#[tokio::test]
async fn a_diverging_learning_rate_fails_the_trial_as_diverged() {
    let dir = tempfile::tempdir().expect("temp dir");
    let r = runner(trial("epochs = 3\noptimizer = \"sgd\"\nmomentum = 0.9"));
    let (res, _) = run(&r, job(dir.path(), 0, 1e9, None), |_| StopRequest::None).await;
    match res.end {
        RunEnd::Failed { reason, .. } => {
            assert!(reason.starts_with("diverged: loss became"), "{reason}")
        }
        other => panic!("expected divergence, got {other:?}"),
    }
}

#[tokio::test]
async fn the_same_seed_and_params_give_the_same_result_in_fresh_and_reused_workers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t = trial("epochs = 2");
    let (a, ra) = run(&runner(t.clone()), job(dir.path(), 0, 1e-2, None), |_| {
        StopRequest::None
    })
    .await;
    let reused = runner(t);
    let mut j = job(dir.path(), 0, 1e-2, None);
    j.trial_dir = dir.path().join("again-0");
    let (b, rb) = run(&reused, j, |_| StopRequest::None).await;
    let mut j = job(dir.path(), 0, 1e-2, None);
    j.trial_dir = dir.path().join("again-1");
    let (c, rc) = run(&reused, j, |_| StopRequest::None).await;
    for r in [&a, &b, &c] {
        assert_eq!(r.end, RunEnd::Finished);
    }
    let last = |r: &[Report]| r.last().map(|r| r.metrics["val_loss"]);
    assert_eq!(last(&ra), last(&rb));
    assert_eq!(last(&rb), last(&rc));
}

#[tokio::test]
async fn out_of_memory_fails_only_its_trial_with_the_allocators_words_and_the_worker_goes_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let t: toml::Table = toml::from_str(
        "kind = \"builtin\"\nbatch_size = 64\nepochs = 1\nlr = 0.01\n[model]\nkind = \"mlp\"\ndepth = 1\n[data]\ndataset = \"digits\"\n",
    )
    .expect("trial table");
    let space: toml::Table =
        toml::from_str(r#"width = { type = "int", low = 1, high = 2147483647, log = true }"#)
            .expect("space table");
    let space = Space::from_toml(&space).expect("space");
    let r = runner(parse_builtin(&t, &space, Path::new(".")).expect("valid trial"));
    let with_width = |number: u64, width: i64| {
        let mut j = job(dir.path(), number, 0.0, None);
        j.params = [("width".to_string(), ParamValue::Int(width))]
            .into_iter()
            .collect();
        j
    };
    // (2^31 - 1) × 64 floats = 512 GiB (the widest a knob may be): the allocator refuses at
    // once, nothing is touched.
    let (a, _) = run(&r, with_width(0, (1 << 31) - 1), |_| StopRequest::None).await;
    match &a.end {
        RunEnd::Failed { reason, log_tail } => {
            assert!(reason.starts_with("oom: "), "{reason}");
            assert!(reason.len() > "oom: ".len() + 10, "{reason}");
            let tail = log_tail.as_deref().unwrap_or("");
            assert!(tail.contains("out of memory"), "{tail}");
        }
        other => panic!("expected out of memory, got {other:?}"),
    }
    let (b, reps) = run(&r, with_width(1, 32), |_| StopRequest::None).await;
    assert_eq!(b.end, RunEnd::Finished, "{b:?}");
    assert!(reps.last().is_some_and(|r| r.metrics["val_acc"] > 0.5));
    assert_eq!(
        worker_pid(&a.logs[0]),
        worker_pid(&b.logs[0]),
        "the worker that ran out of memory runs the next trial"
    );
}

/// The epochs of a run's reports (one report per epoch), in order.
fn epochs(reps: &[Report]) -> Vec<u64> {
    reps.iter().map(|r| r.metrics["epoch"] as u64).collect()
}

#[tokio::test]
async fn a_trial_run_again_after_its_worker_was_killed_resumes_from_its_checkpoint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let total = 40;
    let r = runner(trial(&format!("epochs = {total}")));
    let log = dir.path().join("trial-0").join("worker.log");
    let ck = dir.path().join("trial-0").join("checkpoints");
    let (res, first) = run(&r, job(dir.path(), 0, 1e-2, None), |rep| {
        // An epoch's report comes before its checkpoint: at epoch 3's, epoch 2's (or a
        // later one) is on disk. kill -9.
        if rep.metrics["epoch"] >= 3.0
            && ck.join("latest.snap").is_file()
            && let Some(pid) = worker_pid(&log)
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        StopRequest::None
    })
    .await;
    assert!(
        matches!(&res.end, RunEnd::Failed { reason, .. } if reason.contains("signal 9")),
        "{res:?}"
    );
    let killed_at = *epochs(&first).last().expect("reports before the kill");
    assert!(killed_at < total, "the kill came too late: {first:?}");
    assert!(
        ck.join("latest.snap").is_file(),
        "the checkpoint stays for the next attempt"
    );

    // The same trial again (its next attempt): it continues after its latest checkpoint.
    let (again, second) = run(&r, job(dir.path(), 0, 1e-2, None), |_| StopRequest::None).await;
    assert_eq!(again.end, RunEnd::Finished, "{again:?}");
    let resumed = epochs(&second);
    let from = resumed[0];
    assert!(
        from >= 3,
        "resumed from scratch or from epoch 1: {resumed:?}"
    );
    // The killed epoch's report may have come before its checkpoint: at most it is lost.
    assert!(
        (killed_at..=killed_at + 1).contains(&from),
        "killed after epoch {killed_at}, resumed at {from}: {resumed:?}"
    );
    assert_eq!(
        resumed,
        (from..=total).collect::<Vec<_>>(),
        "each epoch once"
    );
    assert!(second[0].step > first[from as usize - 2].step);
    assert!(!ck.exists(), "a finished trial's checkpoints are removed");
}

#[tokio::test]
async fn checkpoints_are_removed_at_a_prune_and_the_best_stays_when_the_study_keeps_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let r = runner(trial("epochs = 30"));
    let (a, _) = run(&r, job(dir.path(), 0, 1e-2, None), |rep| {
        if rep.metrics["epoch"] >= 2.0 {
            StopRequest::Prune
        } else {
            StopRequest::None
        }
    })
    .await;
    assert_eq!(a.end, RunEnd::Stopped);
    assert!(!dir.path().join("trial-0/checkpoints").exists());

    let shared = dir.path().join("shared");
    let t = trial(&format!(
        "epochs = 2\nkeep_checkpoints = \"best\"\ncheckpoint_dir = \"{}\"",
        shared.display()
    ));
    let mut j = job(dir.path(), 1, 1e-2, None);
    j.checkpoint_dir = t.checkpoints.trial_dir("st", 1, &j.trial_dir);
    let keep = runner(t).with_objective("st", "val_acc", tune::trial::Direction::Maximize);
    let (b, _) = run(&keep, j, |_| StopRequest::None).await;
    assert_eq!(b.end, RunEnd::Finished);
    let best = shared.join("st").join("trial-00001");
    assert!(best.join("best.snap").is_file(), "the best stays");
    assert!(!best.join("latest.snap").exists());
    assert!(!dir.path().join("trial-1/checkpoints").exists());
}
