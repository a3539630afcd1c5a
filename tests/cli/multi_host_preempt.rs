//! Preemption across machines (issue 27): three network-namespace machines (PostgreSQL on one,
//! `tune worker` on two, as in `multi_host.rs`) share a study of command trials that checkpoint
//! every epoch (`studies/resumable_curve.py`). Worker machine A gets SIGTERM while its trials
//! are mid-run, as a cluster's preemption with a 10 s grace; it must exit 75 within the grace,
//! its trials recorded interrupted (not failed, not counted) and queued again at once, so that
//! machine B resumes them from their checkpoints (in A's run directory: every machine sees the
//! same filesystem, as a shared one) long before any heartbeat grace, redoing at most one
//! epoch, each curve holding every epoch once. The study ends with its budget exact.
//!
//! Needs root (namespaces) and PostgreSQL 15; says "skipped:" without them, unless
//! `TUNE_REQUIRE_PG=1` makes that a failure.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    Sandbox, assert_numbers_once, counted, output_within, report_steps, text, tune_bin,
};
use crate::multi_host::{Proc, count_in, machines_with_a_database, poll};
use crate::postgres::test_server::PgServer;

const TRIALS: usize = 6;
const DB: &str = "preempt";
const EPOCHS: i64 = 6;
/// What a cluster gives between its SIGTERM and its SIGKILL (Kubernetes'
/// `terminationGracePeriodSeconds`, Slurm's `--signal=B:TERM@N`).
const GRACE: Duration = Duration::from_secs(10);
/// The whole test never takes this long; past it the test fails instead of hanging. Far
/// shorter than the study's `heartbeat_grace` (10 min): a re-queue that waited for a
/// heartbeat grace instead of happening at once would fail it.
const LIMIT: Duration = Duration::from_secs(90);

/// The shipped example's study: 6 epochs of 0.5 s, a checkpoint after each; two trials at
/// once per machine.
fn study_file() -> String {
    format!(
        r#"[study]
name = "preempt"
metric = "val_loss"
trials = {TRIALS}
seed = 5
heartbeat = "500ms"
heartbeat_grace = "10m"

[sampler]
kind = "random"

[space]
lr = {{ type = "float", low = 1e-3, high = 1.0, log = true }}
decay = {{ type = "float", low = 0.0, high = 0.5 }}

[workers]
count = 2
devices = ["cpu"]

[trial]
kind = "command"
command = ["python3", "resumable_curve.py", "--lr", "{{lr}}", "--decay", "{{decay}}",
           "--epochs", "{EPOCHS}", "--epoch-seconds", "0.5"]
requires = ["resumable_curve.py"]
"#
    )
}

/// The running trials on `host` whose recorded checkpoint (`tune:checkpoint_step`) is at
/// least `step`.
fn running_checkpointed(server: &PgServer, host: &str, step: i64) -> u64 {
    count_in(
        server,
        DB,
        &format!(
            "SELECT count(*) FROM trials t JOIN tune_trials x ON x.trial_id = t.trial_id
             JOIN tune_workers w ON w.worker_id = x.worker_id
             JOIN trial_system_attributes a ON a.trial_id = t.trial_id
               AND a.key = 'tune:checkpoint_step'
             WHERE t.state = 'RUNNING' AND w.host = '{host}' AND a.value_json::bigint >= {step}"
        ),
    )
}

fn running_on(server: &PgServer, host: &str) -> u64 {
    count_in(
        server,
        DB,
        &format!(
            "SELECT count(*) FROM trials t JOIN tune_trials x ON x.trial_id = t.trial_id
             JOIN tune_workers w ON w.worker_id = x.worker_id
             WHERE t.state = 'RUNNING' AND w.host = '{host}'"
        ),
    )
}

/// `attempt=A trial=N resumed_from=E` lines of a checkpoint directory's `attempts.log`.
fn attempts_log(dir: &Path) -> Vec<(u64, u64, i64)> {
    std::fs::read_to_string(dir.join("attempts.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .and_then(|v| v.parse::<i64>().ok())
                    .unwrap_or_else(|| panic!("{k} in {l:?}"))
            };
            (
                field("attempt=") as u64,
                field("trial=") as u64,
                field("resumed_from="),
            )
        })
        .collect()
}

#[test]
fn a_sigterm_on_one_machine_resumes_its_trials_on_the_other_from_their_checkpoints() {
    let t0 = Instant::now();
    let Some((net, server)) = machines_with_a_database(&["db", "a", "b"]) else {
        return;
    };
    let url = server.create_db(DB);
    let sb = Sandbox::new();
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("studies/resumable_curve.py"),
    )
    .expect("the shipped script");
    for m in ["a", "b"] {
        sb.write(&format!("{m}/resumable_curve.py"), &script);
        sb.write(&format!("{m}/study.toml"), &study_file());
    }
    let deadline = t0 + LIMIT;

    // The study is stored from machine A (with one trial queued), then A joins it.
    let mut store = net.command(1, "ma", &tune_bin());
    store
        .args([
            "enqueue",
            "study.toml",
            "--db",
            &url,
            "--params",
            r#"{"lr": 0.05, "decay": 0.1}"#,
        ])
        .current_dir(sb.join("a"));
    let out = output_within(store, Duration::from_secs(30));
    assert!(out.status.success(), "tune enqueue: {}", text(&out));
    let worker = |i: usize, host: &str| {
        let mut w = net.command(i, host, &tune_bin());
        w.args([
            "worker", "--db", &url, "--study", "preempt", "--wait", "60s", "--no-tui",
        ])
        .current_dir(sb.join(if i == 1 { "a" } else { "b" }));
        Proc::spawn(w, sb.path(), host)
    };
    let mut a = worker(1, "ma");
    poll("two trials running on A", deadline, &mut [&mut a], || {
        running_on(&server, "ma") == 2
    });
    // B joins, busy with trials of its own when A is preempted.
    let mut b = worker(2, "mb");
    poll(
        "A's trials past their first checkpoint, B running",
        deadline,
        &mut [&mut a, &mut b],
        || running_checkpointed(&server, "ma", 1) == 2 && running_on(&server, "mb") >= 1,
    );

    // The preemption: SIGTERM, then SIGKILL if A is still there after the grace.
    a.signal("TERM");
    let sent = Instant::now();
    while a.try_wait().is_none() && sent.elapsed() < GRACE {
        std::thread::sleep(Duration::from_millis(50));
    }
    let within_grace = a.try_wait().is_some();
    let exited_after = sent.elapsed();
    if !within_grace {
        a.kill_machine();
    }
    let a_out = a.wait(Duration::from_secs(5));
    assert!(
        within_grace,
        "A exited within the {GRACE:?} grace: {}",
        text(&a_out)
    );
    assert_eq!(a_out.status.code(), Some(75), "A: {}", text(&a_out));
    assert!(
        text(&a_out).contains("tune: SIGTERM: preempted"),
        "A: {}",
        text(&a_out)
    );

    // B finishes the study: its budget is spent, so it exits 0.
    let b_out = b.wait(deadline.saturating_duration_since(Instant::now()));
    assert!(b_out.status.success(), "B: {}", text(&b_out));

    let tune_on_b = |args: &[&str]| {
        let mut q = net.command(2, "mb", &tune_bin());
        q.args(args).args(["--db", &url]);
        let out = output_within(q, Duration::from_secs(30));
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        serde_json::from_slice::<Value>(&out.stdout).expect("JSON")
    };
    let trials = tune_on_b(&[
        "trials", "--study", "preempt", "--state", "all", "--format", "json",
    ]);
    let trials = trials.as_array().expect("a list").clone();
    assert_numbers_once(&trials);
    assert_eq!(counted(&trials), TRIALS, "the budget, exactly: {trials:#?}");
    let shown: BTreeMap<u64, Value> = trials
        .iter()
        .map(|t| {
            let n = t["number"].as_u64().expect("a number");
            let s = tune_on_b(&[
                "show",
                &n.to_string(),
                "--study",
                "preempt",
                "--format",
                "json",
            ]);
            (n, s)
        })
        .collect();

    // A's two trials: interrupted by the preemption (failed with that reason, not counted),
    // with no value, run on A.
    let interrupted: Vec<&Value> = shown
        .values()
        .filter(|t| {
            t["state"] == "failed"
                && t["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("interrupted: preempted"))
        })
        .collect();
    assert_eq!(interrupted.len(), 2, "A's two trials: {shown:#?}");
    assert_eq!(
        shown.values().filter(|t| t["state"] == "complete").count(),
        TRIALS,
        "nothing else failed, nothing left running or queued: {shown:#?}"
    );
    for lost in &interrupted {
        let n = lost["number"].as_u64().expect("a number");
        assert_eq!(lost["host"], "ma", "{lost:#}");
        assert!(lost["value"].is_null(), "{lost:#}");
        assert_eq!(lost["attempt"], 1, "{lost:#}");
        // Its re-run: attempt 2 on B, at the same params, complete.
        let rerun = shown
            .values()
            .find(|t| t["retry_of"] == n)
            .unwrap_or_else(|| panic!("trial {n} ran again: {shown:#?}"));
        let r = rerun["number"].as_u64().expect("a number");
        assert_eq!(rerun["state"], "complete", "{rerun:#}");
        assert_eq!(
            rerun["host"], "mb",
            "resumed on the other machine: {rerun:#}"
        );
        assert_eq!(rerun["attempt"], 2, "{rerun:#}");
        assert_eq!(rerun["params"], lost["params"], "{rerun:#}");
        // It ran in A's checkpoint directory and resumed after the last saved epoch: the
        // epochs A had reported past it are at most one (the one whose save the SIGTERM cut).
        let recorded = count_in(
            &server,
            DB,
            &format!(
                "SELECT a.value_json FROM trial_system_attributes a JOIN trials t
                 ON t.trial_id = a.trial_id WHERE t.number = {n}
                 AND a.key = 'tune:checkpoint_step'"
            ),
        ) as i64;
        assert!(recorded >= 1, "trial {n} checkpointed before the SIGTERM");
        let dir = Path::new(lost["trial_dir"].as_str().expect("a trial dir")).join("checkpoints");
        assert!(
            dir.starts_with(sb.join("a")),
            "A's run directory: {}",
            dir.display()
        );
        let log = attempts_log(&dir);
        assert_eq!(log.len(), 2, "two attempts in {}: {log:?}", dir.display());
        assert_eq!((log[0].0, log[0].1, log[0].2), (1, n, -1), "{log:?}");
        let (attempt, trial, resumed_from) = log[1];
        assert_eq!((attempt, trial), (2, r), "{log:?}");
        assert!(
            resumed_from >= recorded,
            "trial {r} resumed from its checkpoint (step {recorded}), not from scratch: {log:?}"
        );
        let reported_by_a = report_steps(lost)
            .last()
            .copied()
            .expect("A reported epochs");
        assert!(
            reported_by_a - resumed_from <= 1,
            "at most one epoch redone: A reported up to {reported_by_a}, B resumed after {resumed_from}"
        );
        // The resumed trial's curve: every epoch once, in order, no gap.
        let want: Vec<i64> = (0..EPOCHS).collect();
        assert_eq!(report_steps(rerun), want, "every epoch once: {rerun:#}");
    }
    eprintln!(
        "multi-host preemption: A exited 75 {:.1} s after SIGTERM; study done in {:.1} s",
        exited_after.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    drop(server);
    drop(net);
}
