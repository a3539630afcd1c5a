//! End to end: a command-trial study with a pruner, scripted learning curves, and what the
//! SQLite database says afterwards about which trials were pruned.
//!
//! The trial command is a small Python script whose curve is chosen by the trial number
//! (`TUNE_TRIAL`), so the expected prunings are those of the unit test
//! `asha_keeps_the_top_third_of_each_rung_as_trials_arrive`, now through the real scheduler,
//! runner, signals and storage.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use tune::pruner::{PruneContext, PrunerConfig, TrialCurve, build};
use tune::trial::{Direction, Report, TrialNumber, TrialState};

/// Trial n reports `loss = CURVES[n]` at steps 1..=4, one report every 250 ms, so that the
/// scheduler's SIGTERM lands before the next report.
const SCRIPT: &str = r#"
import json, os, time
CURVES = [5.0, 3.0, 4.0, 1.0, 2.0, 6.0, 0.5, 2.5, 0.8]
q = CURVES[int(os.environ["TUNE_TRIAL"]) % len(CURVES)]
for step in range(1, 5):
    print("tune: " + json.dumps({"step": step, "loss": q}), flush=True)
    time.sleep(0.25)
"#;

fn study(trials: u64, pruner: &str) -> String {
    study_on(trials, 1, pruner)
}

fn study_on(trials: u64, workers: u64, pruner: &str) -> String {
    format!(
        r#"
[study]
name = "scripted"
metric = "loss"
direction = "minimize"
trials = {trials}
seed = 1

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}

[workers]
count = {workers}
devices = ["cpu"]

[trial]
kind = "command"
command = ["python3", "curve.py"]
timeout = "1m"

[pruner]
{pruner}
"#
    )
}

const ASHA: &str = r#"kind = "asha"
min_resource = 1
max_resource = 4
reduction_factor = 3"#;

fn run_study(dir: &Path, trials: u64, pruner: &str) {
    run_study_on(dir, trials, 1, pruner)
}

fn run_study_on(dir: &Path, trials: u64, workers: u64, pruner: &str) {
    std::fs::write(dir.join("curve.py"), SCRIPT).expect("script written");
    std::fs::write(dir.join("study.toml"), study_on(trials, workers, pruner))
        .expect("study written");
    let out = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(["run", "--no-tui", "study.toml"])
        .current_dir(dir)
        .output()
        .expect("tune runs");
    assert!(
        out.status.success(),
        "tune failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[derive(Debug, PartialEq)]
struct Row {
    state: String,
    value: Option<f64>,
    pruned_step: Option<i64>,
    /// The objective of the trial's last stored report.
    last_loss: Option<f64>,
}

fn trials(dir: &Path) -> BTreeMap<i64, Row> {
    let db = rusqlite::Connection::open(dir.join("tune.db")).expect("database opens");
    let mut stmt = db
        .prepare(
            "SELECT v.number, v.state, v.value, x.pruned_step,
                    (SELECT json_extract(r.metrics_json, '$.loss') FROM tune_reports r
                     WHERE r.trial_id = t.trial_id ORDER BY r.seq DESC LIMIT 1)
             FROM tune_trials_view v
             JOIN trials t ON t.number = v.number
             JOIN studies s ON s.study_id = t.study_id AND s.study_name = v.study
             LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
             WHERE v.study = 'scripted'",
        )
        .expect("query prepares");
    stmt.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            Row {
                state: r.get(1)?,
                value: r.get(2)?,
                pruned_step: r.get(3)?,
                last_loss: r.get(4)?,
            },
        ))
    })
    .expect("query runs")
    .collect::<Result<_, _>>()
    .expect("rows read")
}

/// (trial, the step at which the rules prune it) for the nine scripted curves.
const ASHA_PRUNED: [(i64, i64); 5] = [(2, 1), (4, 1), (5, 1), (7, 1), (8, 3)];

fn assert_asha_prunings(rows: &BTreeMap<i64, Row>) {
    const CURVES: [f64; 9] = [5.0, 3.0, 4.0, 1.0, 2.0, 6.0, 0.5, 2.5, 0.8];
    assert_eq!(rows.len(), 9, "{rows:?}");
    for (&n, row) in rows {
        let decided = ASHA_PRUNED.iter().find(|(m, _)| *m == n).map(|&(_, s)| s);
        // Flat curves: the last value is the curve's, wherever the trial stopped, and a pruned
        // trial keeps it as its value.
        assert_eq!(
            row.last_loss,
            Some(CURVES[n as usize]),
            "trial {n}: {row:?}"
        );
        assert_eq!(row.value, Some(CURVES[n as usize]), "trial {n}: {row:?}");
        match decided {
            Some(step) => {
                assert_eq!(row.state, "pruned", "trial {n}: {row:?}");
                // The step it stopped at: the deciding report, or a later one the script
                // printed before the signal landed on a loaded machine.
                let stopped = row.pruned_step.expect("a pruned trial has its step");
                assert!(stopped >= step, "trial {n}: {row:?}");
            }
            None => assert_eq!(row.state, "complete", "trial {n}: {row:?}"),
        }
    }
}

#[test]
fn asha_prunes_the_scripted_command_trials_it_should() {
    let dir = tempfile::tempdir().expect("temp dir");
    run_study(dir.path(), 9, ASHA);
    assert_asha_prunings(&trials(dir.path()));
}

#[test]
fn a_resumed_study_keeps_its_rungs() {
    // Five trials, then the same study resumed with a budget of nine: trial 8 is pruned at
    // rung 3 only because trials 0, 1 and 3 of the first run are still on that rung.
    let dir = tempfile::tempdir().expect("temp dir");
    run_study(dir.path(), 5, ASHA);
    let first = trials(dir.path());
    assert_eq!(first.len(), 5, "{first:?}");
    run_study(dir.path(), 9, ASHA);
    assert_asha_prunings(&trials(dir.path()));
}

#[test]
fn without_a_pruner_every_scripted_trial_completes() {
    let dir = tempfile::tempdir().expect("temp dir");
    run_study(dir.path(), 4, r#"kind = "none""#);
    let rows = trials(dir.path());
    assert_eq!(rows.len(), 4);
    assert!(rows.values().all(|r| r.state == "complete"), "{rows:?}");
}

#[test]
fn a_bad_pruner_table_is_refused_before_any_trial_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("curve.py"), SCRIPT).expect("script written");
    std::fs::write(
        dir.path().join("study.toml"),
        study(3, "kind = \"asha\"\nreduction_factor = 1"),
    )
    .expect("study written");
    let out = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(["run", "--no-tui", "study.toml"])
        .current_dir(dir.path())
        .output()
        .expect("tune runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("pruner.reduction_factor must be at least 2, got 1"),
        "{stderr}"
    );
    assert!(!dir.path().join("tune.db").exists() || trials(dir.path()).is_empty());
}

/// Every stored report, in the order the scheduler stored (and judged) them.
fn reports_in_arrival_order(dir: &Path) -> Vec<(u64, Report)> {
    let db = rusqlite::Connection::open(dir.join("tune.db")).expect("database opens");
    let mut stmt = db
        .prepare(
            "SELECT t.number, r.step, r.metrics_json FROM tune_reports r
             JOIN trials t ON t.trial_id = r.trial_id
             WHERE r.is_final = 0 ORDER BY r.report_id",
        )
        .expect("query prepares");
    stmt.query_map([], |r| {
        let json: String = r.get(2)?;
        Ok((
            r.get::<_, i64>(0)? as u64,
            Report {
                step: r.get::<_, i64>(1)? as u64,
                metrics: serde_json::from_str(&json).expect("stored metrics are JSON"),
            },
        ))
    })
    .expect("query runs")
    .collect::<Result<_, _>>()
    .expect("rows read")
}

#[test]
fn parallel_asha_decisions_replay_from_the_stored_reports() {
    // Three workers: which trial meets which at a rung depends on timing, so the check is
    // that the rules, replayed over the stored reports in arrival order, prune exactly the
    // trials the study pruned, at the steps where it stopped them.
    let dir = tempfile::tempdir().expect("temp dir");
    run_study_on(dir.path(), 9, 3, ASHA);
    let rows = trials(dir.path());
    assert_eq!(rows.len(), 9, "{rows:?}");

    let config: PrunerConfig = toml::from_str(ASHA).expect("the table parses");
    let mut pruner = build(&config);
    let mut curves: Vec<TrialCurve> = Vec::new();
    let mut replayed = BTreeMap::new();
    for (n, report) in reports_in_arrival_order(dir.path()) {
        if replayed.contains_key(&n) {
            // Printed before the signal landed: stored, but never judged.
            continue;
        }
        let i = match curves.iter().position(|c| c.number == TrialNumber(n)) {
            Some(i) => i,
            None => {
                curves.push(TrialCurve {
                    place: Default::default(),
                    number: TrialNumber(n),
                    state: TrialState::Running,
                    reports: Vec::new(),
                });
                curves.len() - 1
            }
        };
        let step = report.step;
        curves[i].reports.push(report);
        let ctx = PruneContext {
            direction: Direction::Minimize,
            metric: "loss",
            resource: config.resource(),
            trial: TrialNumber(n),
            trials: &curves,
            origins: &tune::pruner::NO_ORIGINS,
        };
        if pruner.should_prune(&ctx) {
            replayed.insert(n, step);
            curves[i].state = TrialState::Pruned;
        }
    }
    for (&n, row) in &rows {
        match replayed.get(&(n as u64)) {
            Some(&step) => {
                assert_eq!(row.state, "pruned", "trial {n}: {row:?}");
                assert!(row.pruned_step >= Some(step as i64), "trial {n}: {row:?}");
            }
            None => assert_eq!(row.state, "complete", "trial {n}: {row:?}"),
        }
    }
    // The best curve is never behind anyone at a rung.
    assert_eq!(rows[&6].state, "complete", "{rows:?}");
    assert!(!replayed.is_empty());
}
