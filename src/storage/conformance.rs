//! One conformance suite for every [`Storage`] backend: each test runs on memory and on
//! SQLite (and on every backend added later), so the engine may rely on the same contract
//! whichever holds the study.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::fixtures::{params, space};
use super::{
    ClaimRequest, MemoryStorage, NewStudy, PostgresStorage, SqliteStorage, Storage, StorageUrl,
    StudyRow,
};
use crate::space::Params;
use crate::trial::{
    Direction, Outcome, Placement, Ran, Report, Trial, TrialState, TrialStatus, WorkerId,
};

/// What keeps a backend's database alive (a temp dir, a server) as long as the storage.
type KeepAlive = Box<dyn std::any::Any>;

/// Every backend, fresh: memory, SQLite and PostgreSQL (a fresh database on a shared
/// ephemeral server, which stops when the last test using it drops it).
fn backends() -> Vec<(&'static str, Box<dyn Storage>, KeepAlive)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = SqliteStorage::open(&dir.path().join("t.db")).expect("sqlite opens");
    let mut out: Vec<(&'static str, Box<dyn Storage>, KeepAlive)> = vec![
        ("memory", Box::new(MemoryStorage::new()), Box::new(())),
        ("sqlite", Box::new(sqlite), Box::new(dir)),
    ];
    if let Some((server, url)) = super::test_server::shared_db() {
        let StorageUrl::Postgres(u) =
            StorageUrl::parse(&url, std::path::Path::new("/")).expect("url")
        else {
            panic!("not a PostgreSQL URL: {url}")
        };
        let pg = PostgresStorage::open(&u).expect("postgres opens");
        out.push(("postgres", Box::new(pg), Box::new(server)));
    }
    out
}

fn study(s: &mut dyn Storage, direction: Direction, metric: &str) -> StudyRow {
    s.create_or_load_study(&NewStudy {
        others: &[],
        name: "x",
        direction,
        metric,
        file: None,
        source: None,
    })
    .expect("study")
}

fn claim(
    s: &mut dyn Storage,
    study: &StudyRow,
    w: WorkerId,
    budget: Option<u64>,
    p: &Params,
) -> Option<Trial> {
    let sp = space();
    let req = ClaimRequest {
        worker: w,
        budget,
        slot: 0,
        device: "cpu",
        space: &sp,
    };
    s.claim(study, &req, &mut |_, _| p.clone()).expect("claim")
}

fn failed(reason: &str, interrupted: bool) -> TrialStatus {
    TrialStatus::Failed {
        reason: reason.into(),
        log_tail: Some("last line".into()),
        interrupted,
        ran: Ran::default(),
    }
}

#[test]
fn claims_give_numbers_once_and_respect_the_budget() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let mut numbers = Vec::new();
        for _ in 0..3 {
            let t = claim(s.as_mut(), &study, w, Some(3), &params(0.01)).expect("a trial");
            assert_eq!(t.state(), TrialState::Running, "{name}");
            let at = t.status.placement().expect("placed");
            assert_eq!(at.device.as_deref(), Some("cpu"), "{name}");
            assert_eq!(at.slot, Some(0), "{name}");
            numbers.push(t.number.0);
        }
        assert_eq!(numbers, [0, 1, 2], "{name}");
        assert!(
            claim(s.as_mut(), &study, w, Some(3), &params(0.01)).is_none(),
            "{name}"
        );
        let rows = s.trials(&study, None).expect("rows");
        assert_eq!(rows[1].params, params(0.01), "{name}");
        // An interrupted trial frees its place and queues its params again.
        s.finish_trial(rows[1].id, &failed("interrupted", true), &[])
            .expect("finish");
        let rerun = claim(s.as_mut(), &study, w, Some(3), &params(0.5)).expect("the rerun");
        assert_eq!(rerun.number.0, 3, "{name}");
        assert_eq!(
            rerun.params,
            params(0.01),
            "{name}: the rerun keeps its params"
        );
        assert_eq!(s.counted(&study).expect("counted"), 0, "{name}");
        assert_eq!(
            s.count_state(&study, TrialState::Running).expect("count"),
            3,
            "{name}"
        );
    }
}

#[test]
fn the_proposer_sees_finished_trials_and_pending_params() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let a = claim(s.as_mut(), &study, w, None, &params(0.1)).expect("a");
        s.add_report(a.id, 0, &report(1, "loss", 0.5), false, "loss")
            .expect("report");
        s.finish_trial(
            a.id,
            &TrialStatus::Complete {
                others: Vec::new(),
                value: 0.5,
                ran: Ran::default(),
            },
            &[],
        )
        .expect("finish");
        claim(s.as_mut(), &study, w, None, &params(0.2)).expect("b");
        let sp = space();
        let req = ClaimRequest {
            worker: w,
            budget: None,
            slot: 1,
            device: "cpu",
            space: &sp,
        };
        let mut seen = None;
        s.claim(&study, &req, &mut |h, n| {
            seen = Some((h.clone(), n));
            params(0.3)
        })
        .expect("claim");
        let (h, n) = seen.expect("proposed");
        assert_eq!(n.0, 2, "{name}");
        assert_eq!(h.finished.len(), 1, "{name}");
        assert_eq!(h.finished[0].outcome, Outcome::Complete { value: 0.5 });
        assert_eq!(h.finished[0].curve, vec![(1, 0.5)], "{name}");
        assert_eq!(h.pending, vec![params(0.2)], "{name}");

        // A proposal after trial 1 finished sees it finished, no longer pending (backends that
        // remember what they read must notice the change), and trial 2 pending.
        let rows = s.trials(&study, None).expect("rows");
        s.finish_trial(
            rows[1].id,
            &TrialStatus::Complete {
                others: Vec::new(),
                value: 0.25,
                ran: Ran::default(),
            },
            &[],
        )
        .expect("finish");
        let mut seen = None;
        s.claim(&study, &req, &mut |h, n| {
            seen = Some((h.clone(), n));
            params(0.4)
        })
        .expect("claim");
        let (h, n) = seen.expect("proposed");
        assert_eq!(n.0, 3, "{name}");
        let values: Vec<Outcome> = h.finished.iter().map(|f| f.outcome.clone()).collect();
        assert_eq!(
            values,
            [
                Outcome::Complete { value: 0.5 },
                Outcome::Complete { value: 0.25 }
            ],
            "{name}"
        );
        assert_eq!(h.finished[1].params, params(0.2), "{name}");
        assert_eq!(h.pending, vec![params(0.3)], "{name}");
    }
}

fn report(step: u64, key: &str, v: f64) -> Report {
    Report {
        step,
        metrics: BTreeMap::from([(key.to_string(), v)]),
    }
}

#[test]
fn reports_values_and_failures_round_trip() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Maximize, "acc");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let t = claim(s.as_mut(), &study, w, None, &params(0.1)).expect("a trial");
        for step in 0..3u64 {
            let mut m = BTreeMap::new();
            m.insert("acc".to_string(), 0.5 + step as f64 / 10.0);
            m.insert("loss".to_string(), f64::NAN);
            s.add_report(t.id, step, &Report { step, metrics: m }, false, "acc")
                .expect("report");
        }
        let logs = vec![PathBuf::from("/tmp/x/stdout.log")];
        s.finish_trial(
            t.id,
            &TrialStatus::Complete {
                others: Vec::new(),
                value: 0.7,
                ran: Ran::default(),
            },
            &logs,
        )
        .expect("finish");
        let h = s.history(&study, &space()).expect("history");
        assert!(h.pending.is_empty(), "{name}");
        assert_eq!(h.finished.len(), 1, "{name}");
        assert_eq!(h.finished[0].outcome, Outcome::Complete { value: 0.7 });
        assert_eq!(h.finished[0].curve.len(), 3, "{name}");
        assert_eq!(s.best(&study).expect("best"), Some((0, 0.7)), "{name}");
        let back = s.trial(&study, 0).expect("read").expect("trial 0");
        assert_eq!(back.value(), Some(0.7), "{name}");
        assert_eq!(back.logs, logs, "{name}");
        assert!(
            back.metrics["loss"].is_nan(),
            "{name}: the last report's metrics"
        );
        let ran = match &back.status {
            TrialStatus::Complete { ran, .. } => ran.clone(),
            other => panic!("{name}: {other:?}"),
        };
        assert!(ran.started.is_some() && ran.finished.is_some(), "{name}");
        assert_eq!(
            ran.at,
            Placement {
                host: ran.at.host.clone(),
                ..t.status.placement().cloned().expect("placed")
            },
            "{name}"
        );
        assert_eq!(s.trial_reports(t.id).expect("reports").len(), 3, "{name}");
        assert_eq!(s.reports(&study).expect("reports")[&0].len(), 3, "{name}");

        let f = claim(s.as_mut(), &study, w, None, &params(0.2)).expect("a trial");
        s.finish_trial(f.id, &failed("exited with status 1", false), &[])
            .expect("finish");
        let back = s.trial(&study, 1).expect("read").expect("trial 1");
        assert_eq!(back.status.reason(), Some("exited with status 1"), "{name}");
        assert_eq!(
            back.status.error().as_deref(),
            Some("exited with status 1\nlast line"),
            "{name}"
        );
        assert_eq!(s.counted(&study).expect("counted"), 2, "{name}");

        // The same name with another direction is refused.
        assert!(
            s.create_or_load_study(&NewStudy {
                others: &[],
                name: "x",
                direction: Direction::Minimize,
                metric: "acc",
                file: None,
                source: None,
            })
            .is_err(),
            "{name}"
        );
        let list = s.list_studies().expect("list");
        assert_eq!(list.len(), 1, "{name}");
        assert_eq!((list[0].complete, list[0].failed), (1, 1), "{name}");
        assert_eq!(list[0].best_trial, Some(0), "{name}");
    }
}

#[test]
fn a_pruned_trial_keeps_its_last_value_step_and_reason() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let t = claim(s.as_mut(), &study, w, None, &params(0.1)).expect("a trial");
        s.add_report(t.id, 0, &report(4, "loss", 2.5), false, "loss")
            .expect("report");
        s.finish_trial(
            t.id,
            &TrialStatus::Pruned {
                value: Some(2.5),
                step: Some(4),
                reason: Some("at step 4 (rung 1: 3rd of 4 trials there, below the top 1/3)".into()),
                ran: Ran::default(),
            },
            &[],
        )
        .expect("finish");
        let back = s.trial(&study, 0).expect("read").expect("trial");
        match back.status {
            TrialStatus::Pruned {
                value,
                step,
                reason,
                ..
            } => {
                assert_eq!((value, step), (Some(2.5), Some(4)), "{name}");
                assert_eq!(
                    reason.as_deref(),
                    Some("at step 4 (rung 1: 3rd of 4 trials there, below the top 1/3)"),
                    "{name}"
                );
            }
            other => panic!("{name}: {other:?}"),
        }
        let h = s.history(&study, &space()).expect("history");
        assert_eq!(
            h.finished[0].outcome,
            Outcome::Pruned {
                value: Some(2.5),
                step: Some(4)
            },
            "{name}"
        );
    }
}

#[test]
fn enqueued_params_run_first_and_are_known_as_fixed() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        assert!(!s.has_fixed_params(&study, &params(0.3)).expect("fixed"));
        let n = s.enqueue(&study, &space(), &params(0.3)).expect("enqueue");
        assert_eq!(n.0, 0, "{name}");
        assert!(
            s.has_fixed_params(&study, &params(0.3)).expect("fixed"),
            "{name}"
        );
        assert_eq!(
            s.count_state(&study, TrialState::Queued).expect("count"),
            1,
            "{name}"
        );
        let t = claim(s.as_mut(), &study, w, None, &params(0.9)).expect("the queued trial");
        assert_eq!(t.number.0, 0, "{name}");
        assert_eq!(
            t.params,
            params(0.3),
            "{name}: a queued trial proposes nothing"
        );
    }
}

#[test]
fn a_late_result_for_a_trial_declared_interrupted_is_fenced_off() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let t = claim(s.as_mut(), &study, w, Some(1), &params(0.2)).expect("a trial");
        // Another process declares it interrupted (its worker went silent) and queues it again.
        s.finish_trial(t.id, &failed("interrupted", true), &[])
            .expect("interrupt");
        // The cut-off worker comes back with a report and a result: both refused.
        let late = Report {
            step: 1,
            metrics: BTreeMap::from([("loss".to_string(), 0.1)]),
        };
        let e = s.add_report(t.id, 0, &late, false, "loss").unwrap_err();
        assert!(
            matches!(e, super::StorageError::Fenced { .. }),
            "{name}: {e}"
        );
        let done = TrialStatus::Complete {
            others: Vec::new(),
            value: 0.1,
            ran: Ran::default(),
        };
        let e = s.finish_trial(t.id, &done, &[]).unwrap_err();
        assert!(
            matches!(e, super::StorageError::Fenced { .. }),
            "{name}: {e}"
        );
        // Nothing counted twice: the budget of one is still free for the rerun.
        assert_eq!(s.counted(&study).expect("counted"), 0, "{name}");
        assert!(s.best(&study).expect("best").is_none(), "{name}");
        let rerun = claim(s.as_mut(), &study, w, Some(1), &params(0.9)).expect("the rerun");
        assert_eq!(rerun.params, params(0.2), "{name}");
        s.finish_trial(rerun.id, &done, &[])
            .expect("the rerun ends");
        assert_eq!(s.counted(&study).expect("counted"), 1, "{name}");
        let first = s.trial(&study, t.number.0).expect("read").expect("first");
        assert!(first.status.interrupted(), "{name}: stays interrupted");
    }
}

#[test]
fn deleting_a_study_removes_it_whole_and_leaves_the_others() {
    for (name, mut s, _dir) in backends() {
        let doomed = study(s.as_mut(), Direction::Minimize, "loss");
        let kept = s
            .create_or_load_study(&NewStudy {
                others: &[],
                name: "kept",
                direction: Direction::Minimize,
                metric: "loss",
                file: None,
                source: None,
            })
            .expect("second study");
        let w = s.register_worker(&doomed, &["cpu".into()]).expect("worker");
        let wk = s.register_worker(&kept, &["cpu".into()]).expect("worker");
        for (st, w, v) in [(&doomed, w, 0.1), (&doomed, w, 0.2), (&kept, wk, 0.3)] {
            let t = claim(s.as_mut(), st, w, None, &params(v)).expect("a trial");
            s.add_report(t.id, 0, &report(0, "loss", v), false, "loss")
                .expect("report");
            s.finish_trial(
                t.id,
                &TrialStatus::Complete {
                    others: Vec::new(),
                    value: v,
                    ran: Ran::default(),
                },
                &[],
            )
            .expect("finish");
        }
        assert_eq!(s.delete_study(&doomed).expect("delete"), 2, "{name}");
        let names: Vec<String> = s
            .list_studies()
            .expect("list")
            .into_iter()
            .map(|x| x.name)
            .collect();
        assert_eq!(names, ["kept"], "{name}");
        assert!(s.study("x").is_err(), "{name}: the deleted study is gone");
        assert_eq!(s.trials(&kept, None).expect("rows").len(), 1, "{name}");
        // The name can be used again, from trial 0.
        let again = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&again, &["cpu".into()]).expect("worker");
        let t = claim(s.as_mut(), &again, w, None, &params(0.5)).expect("a trial");
        assert_eq!(t.number.0, 0, "{name}");
    }
}

#[test]
fn the_stored_study_file_follows_the_file_it_runs_from() {
    for (name, mut s, _dir) in backends() {
        let row = study(s.as_mut(), Direction::Minimize, "loss");
        s.set_study_file(&row, std::path::Path::new("/w/s.toml"), "trials = 9")
            .expect("set");
        let f = s.study_file(&row).expect("file");
        assert_eq!(f.path.as_deref(), Some("/w/s.toml"), "{name}");
        assert_eq!(f.text.as_deref(), Some("trials = 9"), "{name}");
    }
}

#[test]
fn a_discarded_trial_is_kept_but_left_out_of_the_history_the_budget_and_the_best() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let complete = |v: f64| TrialStatus::Complete {
            others: Vec::new(),
            value: v,
            ran: Ran::default(),
        };
        // 0: the best, 1: failed, 2: still running.
        let a = claim(s.as_mut(), &study, w, Some(3), &params(0.1)).expect("a");
        s.finish_trial(a.id, &complete(0.1), &[]).expect("finish");
        let b = claim(s.as_mut(), &study, w, Some(3), &params(0.2)).expect("b");
        s.finish_trial(b.id, &failed("exited with status 1", false), &[])
            .expect("finish");
        claim(s.as_mut(), &study, w, Some(3), &params(0.3)).expect("c");
        let propose = |s: &mut dyn Storage| {
            let sp = space();
            let req = ClaimRequest {
                worker: w,
                budget: None,
                slot: 1,
                device: "cpu",
                space: &sp,
            };
            let mut seen = None;
            s.claim(&study, &req, &mut |h, _| {
                seen = Some(h.clone());
                params(0.9)
            })
            .expect("claim");
            seen.expect("proposed")
        };
        // A proposal fills what a backend remembers, so that the mark must be noticed after.
        assert_eq!(propose(s.as_mut()).finished.len(), 2, "{name}");
        assert_eq!(s.best(&study).expect("best"), Some((0, 0.1)), "{name}");

        // Running trials (2) are left as they are; 0 and 1 change; a second call changes none.
        assert_eq!(
            s.set_discarded(&study, &[0, 1, 2], true).expect("discard"),
            2,
            "{name}"
        );
        assert_eq!(
            s.set_discarded(&study, &[0, 1], true).expect("discard"),
            0,
            "{name}"
        );
        let rows = s.trials(&study, None).expect("rows");
        let marks: Vec<bool> = rows.iter().map(|t| t.discarded).collect();
        assert_eq!(marks, [true, true, false, false], "{name}: kept and marked");
        assert_eq!(rows[0].value(), Some(0.1), "{name}: the value stays");
        assert_eq!(s.counted(&study).expect("counted"), 0, "{name}");
        assert_eq!(s.best(&study).expect("best"), None, "{name}");
        let h = propose(s.as_mut());
        assert!(h.finished.is_empty(), "{name}: {:?}", h.finished);
        // A budget of 4 counts the three running trials (2 and the two proposals) only: one
        // more may start.
        assert!(
            claim(s.as_mut(), &study, w, Some(4), &params(0.4)).is_some(),
            "{name}"
        );
        assert!(
            claim(s.as_mut(), &study, w, Some(4), &params(0.5)).is_none(),
            "{name}"
        );

        // Restored, trial 0 counts and leads again.
        assert_eq!(
            s.set_discarded(&study, &[0], false).expect("restore"),
            1,
            "{name}"
        );
        assert_eq!(s.best(&study).expect("best"), Some((0, 0.1)), "{name}");
        assert_eq!(s.counted(&study).expect("counted"), 1, "{name}");
        let h = propose(s.as_mut());
        let numbers: Vec<u64> = h.finished.iter().map(|f| f.number.0).collect();
        assert_eq!(numbers, [0], "{name}");
    }
}

#[test]
fn a_multi_objective_study_keeps_every_objective_and_every_value() {
    use crate::trial::Objective;
    let others = [
        Objective {
            metric: "samples_per_s".into(),
            direction: Direction::Maximize,
        },
        Objective {
            metric: "mem".into(),
            direction: Direction::Minimize,
        },
    ];
    let new = NewStudy {
        name: "mo",
        direction: Direction::Minimize,
        metric: "val_loss",
        others: &others,
        file: None,
        source: None,
    };
    for (name, mut s, _dir) in backends() {
        let study = s.create_or_load_study(&new).expect("study");
        assert_eq!(study.others, others, "{name}");
        assert_eq!(
            s.study("mo").expect("found").others,
            others,
            "{name}: read back"
        );
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let a = claim(s.as_mut(), &study, w, None, &params(0.1)).expect("a");
        s.finish_trial(
            a.id,
            &TrialStatus::Complete {
                value: 0.5,
                others: vec![1200.0, 3.5],
                ran: Ran::default(),
            },
            &[],
        )
        .expect("finish");
        let b = claim(s.as_mut(), &study, w, None, &params(0.2)).expect("b");
        s.finish_trial(b.id, &failed("crashed", false), &[])
            .expect("finish");
        let rows = s.trials(&study, None).expect("rows");
        assert_eq!(rows[0].status.others(), [1200.0, 3.5], "{name}");
        assert!(rows[1].status.others().is_empty(), "{name}");
        let one = s.trial(&study, 0).expect("read").expect("trial 0");
        assert_eq!(one.status.others(), [1200.0, 3.5], "{name}");
        let h = s.history(&study, &space()).expect("history");
        assert_eq!(
            h.finished[0].values(),
            Some(vec![0.5, 1200.0, 3.5]),
            "{name}"
        );
        assert_eq!(h.finished[1].values(), None, "{name}");

        // The same name with other objectives is refused, naming both sets.
        let changed = [Objective {
            metric: "samples_per_s".into(),
            direction: Direction::Minimize,
        }];
        let err = s
            .create_or_load_study(&NewStudy {
                others: &changed,
                ..new
            })
            .expect_err("other objectives");
        let msg = err.to_string();
        assert!(
            msg.contains("samples_per_s (maximize)") && msg.contains("samples_per_s (minimize)"),
            "{name}: {msg}"
        );
        // A single-objective study of the same metric is refused too.
        assert!(
            s.create_or_load_study(&NewStudy { others: &[], ..new })
                .is_err(),
            "{name}"
        );
    }
}

#[test]
fn nul_bytes_in_what_a_trial_wrote_are_stored_as_the_replacement_character() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let t = claim(s.as_mut(), &study, w, None, &params(0.1)).expect("a trial");
        let mut m = BTreeMap::from([("loss".to_string(), 0.5), ("a\0b".to_string(), 1.0)]);
        s.add_report(t.id, 0, &report(0, "\0", 2.0), false, "loss")
            .unwrap_or_else(|e| panic!("{name}: a NUL in a metric name: {e}"));
        s.add_report(
            t.id,
            1,
            &Report {
                step: 1,
                metrics: m.clone(),
            },
            false,
            "loss",
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        m.insert("final\0".into(), 3.0);
        s.add_report(
            t.id,
            2,
            &Report {
                step: 1,
                metrics: m,
            },
            true,
            "loss",
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let status = TrialStatus::Failed {
            reason: "exited\0 with status 1".into(),
            log_tail: Some("bad\0line\n\0".into()),
            interrupted: false,
            ran: Ran::default(),
        };
        s.finish_trial(t.id, &status, &[])
            .unwrap_or_else(|e| panic!("{name}: a NUL in the reason or the tail: {e}"));
        let back = s.trial(&study, 0).expect("read").expect("trial 0");
        assert_eq!(
            back.status.reason(),
            Some("exited\u{FFFD} with status 1"),
            "{name}"
        );
        assert_eq!(
            back.status.error().as_deref(),
            Some("exited\u{FFFD} with status 1\nbad\u{FFFD}line\n\u{FFFD}"),
            "{name}"
        );
        assert_eq!(back.metrics.get("a\u{FFFD}b"), Some(&1.0), "{name}");
        assert_eq!(back.metrics.get("final\u{FFFD}"), Some(&3.0), "{name}");
        let reports = s.trial_reports(t.id).expect("reports");
        assert_eq!(reports.len(), 3, "{name}");
        assert_eq!(
            reports[0].report.metrics.get("\u{FFFD}"),
            Some(&2.0),
            "{name}"
        );
        assert!(
            reports
                .iter()
                .all(|r| r.report.metrics.keys().all(|k| !k.contains('\0'))),
            "{name}: {reports:?}"
        );
    }
}

#[test]
fn a_stored_study_file_keeps_no_database_password() {
    for (name, mut s, _dir) in backends() {
        let text =
            "[study]\nstorage = \"postgresql://u:s3cret@h/db?password=p2&sslmode=require\"\n";
        let row = s
            .create_or_load_study(&NewStudy {
                others: &[],
                name: "x",
                direction: Direction::Minimize,
                metric: "loss",
                file: Some(std::path::Path::new("/w/s.toml")),
                source: Some(text),
            })
            .expect("study");
        let want = "[study]\nstorage = \"postgresql://u@h/db?sslmode=require\"\n";
        let f = s.study_file(&row).expect("file");
        assert_eq!(f.text.as_deref(), Some(want), "{name}: created");
        s.set_study_file(&row, std::path::Path::new("/w/s.toml"), text)
            .expect("set");
        let f = s.study_file(&row).expect("file");
        assert_eq!(f.text.as_deref(), Some(want), "{name}: updated");
    }
}

#[test]
fn gpu_telemetry_is_stored_with_a_finished_trial_and_absent_where_none_was_sampled() {
    use crate::trial::{GpuMemScope, GpuTelemetry};
    let gpu = GpuTelemetry {
        peak_mem_mb: 1536.5,
        mem_scope: GpuMemScope::Process,
        mean_sm_pct: 71.25,
        mean_mem_bw_pct: 33.5,
        samples: 12,
    };
    let with_gpu = |status: TrialStatus| {
        status.with_ran(Ran {
            gpu: Some(gpu),
            ..Ran::default()
        })
    };
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s
            .register_worker(&study, &["cuda:0".into()])
            .expect("worker");
        let done = claim(s.as_mut(), &study, w, None, &params(0.1)).expect("a trial");
        s.add_report(done.id, 0, &report(0, "loss", 0.3), false, "loss")
            .expect("report");
        let complete = TrialStatus::ended(TrialState::Complete, Some(0.3), "", Ran::default());
        s.finish_trial(done.id, &with_gpu(complete), &[])
            .expect("finish");
        // A failed trial and a device-wide figure: both kept as they were.
        let oom = claim(s.as_mut(), &study, w, None, &params(0.2)).expect("a trial");
        let device = GpuTelemetry {
            mem_scope: GpuMemScope::Device,
            ..gpu
        };
        let failed_oom = failed("CUDA out of memory", false).with_ran(Ran {
            gpu: Some(device),
            ..Ran::default()
        });
        s.finish_trial(oom.id, &failed_oom, &[]).expect("finish");
        // A trial on a slot whose GPU was never sampled.
        let plain = claim(s.as_mut(), &study, w, None, &params(0.3)).expect("a trial");
        let complete = TrialStatus::ended(TrialState::Complete, Some(0.4), "", Ran::default());
        s.finish_trial(plain.id, &complete, &[]).expect("finish");

        let rows = s.trials(&study, None).expect("rows");
        assert_eq!(rows[0].status.gpu(), Some(&gpu), "{name}");
        assert_eq!(rows[1].status.gpu(), Some(&device), "{name}");
        assert_eq!(rows[2].status.gpu(), None, "{name}");
        let one = s.trial(&study, 0).expect("read").expect("trial 0");
        assert_eq!(one.status.gpu(), Some(&gpu), "{name}: one trial by number");
        // The telemetry is no metric: the last report's metrics are what they were.
        assert_eq!(one.metrics.len(), 1, "{name}");
    }
}
