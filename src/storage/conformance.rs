//! One conformance suite for every [`Storage`] backend: each test runs on memory, SQLite and
//! PostgreSQL (and on every backend added later; `TUNE_REQUIRE_PG=1` or `CI` fails the suite
//! where no PostgreSQL server can start instead of skipping it), so the engine may rely on the
//! same contract whichever holds the study.
//!
//! Every method of the trait and the tests that hold the backends to it (a test that only
//! sets a study up with a method is not listed for it):
//!
//! | method | tests |
//! | --- | --- |
//! | `location` | `a_missing_study_is_none_to_find_and_an_error_to_load_…` |
//! | `find_study` | `a_missing_study_is_none_to_find_and_an_error_to_load_…` |
//! | `study` | `a_missing_study_is_none_to_find_and_an_error_to_load_…`, `a_multi_objective_study_keeps_…`, `deleting_a_study_removes_it_whole_…` |
//! | `create_or_load_study` | `a_missing_study_is_none_to_find_and_an_error_to_load_…` (load, `Differs`), `a_multi_objective_study_keeps_…`, `reports_values_and_failures_round_trip`, `a_stored_study_file_keeps_no_database_password` |
//! | `list_studies` | `studies_are_listed_in_creation_order_with_their_direction_counts_and_best`, `the_best_is_the_lowest_or_highest_…`, `deleting_a_study_removes_it_whole_…`, `reports_values_and_failures_round_trip` |
//! | `register_worker` | `workers_get_distinct_ids_and_a_trial_its_directory`, `recovery_takes_every_silent_trial_once_…` |
//! | `heartbeat` | `a_worker_that_heartbeats_keeps_its_trials_and_a_silent_workers_are_recovered`, `a_late_result_for_a_trial_declared_interrupted_is_fenced_off` |
//! | `recover_interrupted` | `a_worker_that_heartbeats_keeps_its_trials_…`, `recovery_takes_every_silent_trial_once_and_finds_nothing_where_none_runs`, `a_late_result_for_a_trial_declared_interrupted_is_fenced_off` |
//! | `claim` | `claims_give_numbers_once_and_respect_the_budget`, `the_proposer_sees_finished_trials_and_pending_params`, `enqueued_params_run_first_…`, `a_discarded_trial_is_kept_…` |
//! | `set_trial_dir` | `workers_get_distinct_ids_and_a_trial_its_directory` |
//! | `set_checkpoint_step`, `checkpoint_step` | `workers_get_distinct_ids_and_a_trial_its_directory` (the last step recorded wins, kept after the trial ends) |
//! | `enqueue` | `enqueued_params_run_first_and_are_known_as_fixed`, `trials_are_read_in_number_order_…`, `studies_are_listed_…` |
//! | `has_fixed_params` | `enqueued_params_run_first_and_are_known_as_fixed` |
//! | `add_report` | `reports_come_back_in_order_with_their_steps_and_the_final_one_apart`, `reports_values_and_failures_round_trip`, `nul_bytes_in_what_a_trial_wrote_…`, `a_late_result_…_is_fenced_off` |
//! | `finish_trial` | `reports_values_and_failures_round_trip`, `a_pruned_trial_keeps_its_last_value_step_and_reason`, `gpu_telemetry_is_stored_…`, `nul_bytes_in_what_a_trial_wrote_…`, `a_late_result_…_is_fenced_off`, `claims_give_numbers_once_…` (interrupted) |
//! | `history` | `the_proposer_sees_finished_trials_and_pending_params`, `reports_values_and_failures_round_trip`, `a_worker_that_heartbeats_keeps_its_trials_…`, `reports_come_back_in_order_…` |
//! | `reports` | `reports_come_back_in_order_with_their_steps_and_the_final_one_apart`, `reports_values_and_failures_round_trip` |
//! | `trial_reports` | `reports_come_back_in_order_with_their_steps_and_the_final_one_apart`, `nul_bytes_in_what_a_trial_wrote_…`, `a_late_result_…_is_fenced_off` |
//! | `trials` | `trials_are_read_in_number_order_by_state_and_by_number`, `recovery_takes_every_silent_trial_once_…`, `a_discarded_trial_is_kept_…` |
//! | `trial` | `trials_are_read_in_number_order_by_state_and_by_number` (a missing number is `None`), `reports_values_and_failures_round_trip`, `workers_get_distinct_ids_and_a_trial_its_directory` |
//! | `counted` | `studies_are_listed_…`, `recovery_takes_every_silent_trial_once_…`, `claims_give_numbers_once_…`, `a_discarded_trial_is_kept_…`, `a_late_result_…_is_fenced_off` |
//! | `count_state` | `studies_are_listed_in_creation_order_with_their_direction_counts_and_best`, `recovery_takes_every_silent_trial_once_…`, `enqueued_params_run_first_…` |
//! | `best` | `the_best_is_the_lowest_or_highest_finite_complete_value_the_first_on_a_tie`, `a_discarded_trial_is_kept_…`, `a_late_result_…_is_fenced_off` |
//! | `study_file` | `the_stored_study_file_follows_the_file_it_runs_from`, `a_stored_study_file_keeps_no_database_password`, `a_missing_study_is_none_to_find_…` (none stored) |
//! | `set_study_file` | `the_stored_study_file_follows_the_file_it_runs_from`, `a_stored_study_file_keeps_no_database_password` |
//! | `delete_study` | `deleting_a_study_removes_it_whole_and_leaves_the_others`, `workers_get_distinct_ids_…` |
//! | `retry_of`, `attempt` | `an_interrupted_trials_reruns_are_its_next_attempts` (declared by its worker and by recovery) |
//! | `promote` (and a paused trial's `finish_trial`) | `a_paused_trial_is_promoted_once_into_a_rerun_and_the_budget_does_not_move` |
//! | `enqueue_child`, `set_parent`, `lineage` | `a_pbt_child_is_queued_with_its_parent_claimed_first_and_not_fixed` |
//! | `set_discarded` | `a_discarded_trial_is_kept_but_left_out_of_the_history_the_budget_and_the_best` (both ways) |
//!
//! A recovered trial's reason is worded once for every backend (`storage::Gone::reason`); the
//! workers here are silent, not dead, so every backend must say "no heartbeat". Not pinned:
//! the order of the numbers `recover_interrupted` returns (no caller asks for one).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::fixtures::{params, space};
use super::{
    ClaimRequest, MemoryStorage, NewStudy, PostgresStorage, SqliteStorage, Storage, StorageUrl,
    StudyRow,
};
use crate::space::Params;
use crate::trial::{
    Direction, Outcome, Placement, Ran, Report, Trial, TrialId, TrialNumber, TrialState,
    TrialStatus, WorkerId,
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
        assert_eq!(
            s.best(&study).expect("best"),
            Some((TrialNumber(0), 0.7)),
            "{name}"
        );
        let back = s
            .trial(&study, TrialNumber(0))
            .expect("read")
            .expect("trial 0");
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
        assert_eq!(
            s.reports(&study).expect("reports")[&TrialNumber(0)].len(),
            3,
            "{name}"
        );

        let f = claim(s.as_mut(), &study, w, None, &params(0.2)).expect("a trial");
        s.finish_trial(f.id, &failed("exited with status 1", false), &[])
            .expect("finish");
        let back = s
            .trial(&study, TrialNumber(1))
            .expect("read")
            .expect("trial 1");
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
        assert_eq!(list[0].best_trial, Some(TrialNumber(0)), "{name}");
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
                paused: false,
                ran: Ran::default(),
            },
            &[],
        )
        .expect("finish");
        let back = s
            .trial(&study, TrialNumber(0))
            .expect("read")
            .expect("trial");
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
        // A proposed trial's params are not fixed ones, nor are another study's.
        let p = claim(s.as_mut(), &study, w, None, &params(0.6)).expect("a new trial");
        assert_eq!(p.params, params(0.6), "{name}");
        assert!(
            !s.has_fixed_params(&study, &params(0.6)).expect("fixed"),
            "{name}"
        );
        let other = named(s.as_mut(), "other", Direction::Minimize, "loss");
        assert!(
            !s.has_fixed_params(&other, &params(0.3)).expect("fixed"),
            "{name}"
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
        let first = s.trial(&study, t.number).expect("read").expect("first");
        assert!(first.status.interrupted(), "{name}: stays interrupted");

        // The same when the recovery declared it (its worker's heartbeat aged past the grace):
        // the worker's late heartbeat revives nothing, its report and result are refused.
        let w2 = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let cut = claim(s.as_mut(), &study, w2, None, &params(0.3)).expect("a trial");
        let recovered = s
            .recover_interrupted(&study, std::time::Duration::ZERO)
            .expect("recover");
        assert_eq!(recovered, [cut.number], "{name}");
        s.heartbeat(w2, &[cut.id]).expect("a late heartbeat");
        let e = s.add_report(cut.id, 0, &late, false, "loss").unwrap_err();
        assert!(
            matches!(e, super::StorageError::Fenced { .. }),
            "{name}: {e}"
        );
        let e = s.finish_trial(cut.id, &done, &[]).unwrap_err();
        assert!(
            matches!(e, super::StorageError::Fenced { .. }),
            "{name}: {e}"
        );
        assert_recovered(s.as_ref(), &study, &cut, name);
        assert!(
            s.trial_reports(cut.id).expect("reports").is_empty(),
            "{name}"
        );
        assert_eq!(s.counted(&study).expect("counted"), 1, "{name}");
        assert_eq!(
            s.best(&study).expect("best").map(|b| b.0),
            Some(rerun.number),
            "{name}"
        );
    }
}

#[test]
fn an_interrupted_trials_reruns_are_its_next_attempts() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let first = claim(s.as_mut(), &study, w, None, &params(0.2)).expect("a trial");
        let other = claim(s.as_mut(), &study, w, None, &params(0.7)).expect("a trial");
        let one = super::Attempt {
            first: first.number,
            attempt: 1,
        };
        assert_eq!(
            s.attempt(&study, first.number).expect("attempt"),
            one,
            "{name}"
        );
        assert_eq!(
            s.retry_of(&study, first.number).expect("retry of"),
            None,
            "{name}"
        );
        // Its worker declares it interrupted: the re-run is attempt 2 of the same params.
        s.finish_trial(first.id, &failed("interrupted", true), &[])
            .expect("interrupt");
        let second = claim(s.as_mut(), &study, w, None, &params(0.9)).expect("the rerun");
        assert_eq!(second.params, params(0.2), "{name}");
        assert_eq!(
            s.retry_of(&study, second.number).expect("retry of"),
            Some(first.number),
            "{name}"
        );
        assert_eq!(
            s.attempt(&study, second.number).expect("attempt"),
            super::Attempt {
                first: first.number,
                attempt: 2
            },
            "{name}"
        );
        // The recovery declares the re-run interrupted (silent past the grace); the other
        // running trial with it. Their re-runs are attempts 3 and 2.
        let recovered = s
            .recover_interrupted(&study, std::time::Duration::ZERO)
            .expect("recover");
        assert_eq!(recovered.len(), 2, "{name}: {recovered:?}");
        let a = claim(s.as_mut(), &study, w, None, &params(0.5)).expect("a rerun");
        let b = claim(s.as_mut(), &study, w, None, &params(0.5)).expect("a rerun");
        let (third, other2) = if a.params == params(0.2) {
            (a, b)
        } else {
            (b, a)
        };
        assert_eq!(third.params, params(0.2), "{name}");
        assert_eq!(other2.params, params(0.7), "{name}");
        assert_eq!(
            s.attempt(&study, third.number).expect("attempt"),
            super::Attempt {
                first: first.number,
                attempt: 3
            },
            "{name}"
        );
        assert_eq!(
            s.attempt(&study, other2.number).expect("attempt"),
            super::Attempt {
                first: other.number,
                attempt: 2
            },
            "{name}"
        );
        // A trial that ends on its own is nobody's re-run; a number that does not exist is a
        // first attempt of itself.
        let fresh = claim(s.as_mut(), &study, w, None, &params(0.4)).expect("a trial");
        s.finish_trial(fresh.id, &complete(0.4), &[]).expect("ends");
        assert_eq!(
            s.retry_of(&study, fresh.number).expect("retry of"),
            None,
            "{name}"
        );
        assert_eq!(
            s.attempt(&study, TrialNumber(999))
                .expect("attempt")
                .attempt,
            1,
            "{name}"
        );
    }
}

/// A paused trial (promotion-based ASHA) reads back paused, counts as pruned, and is promoted
/// once: it becomes its re-run's earlier attempt (failed, interrupted, its reason), the re-run
/// is queued with its params before any new trial, and the budget's count does not move.
#[test]
fn a_paused_trial_is_promoted_once_into_a_rerun_and_the_budget_does_not_move() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let paused = claim(s.as_mut(), &study, w, Some(3), &params(0.2)).expect("a trial");
        let pruned = claim(s.as_mut(), &study, w, Some(3), &params(0.7)).expect("a trial");
        let pause = |paused: bool| TrialStatus::Pruned {
            value: Some(0.5),
            step: Some(3),
            reason: Some("at epoch 3 (rung 1: 2nd of 2 trials there, below the top 1/3)".into()),
            paused,
            ran: Ran::default(),
        };
        s.set_checkpoint_step(paused.id, 3).expect("checkpoint");
        s.finish_trial(paused.id, &pause(true), &[]).expect("pause");
        s.finish_trial(pruned.id, &pause(false), &[])
            .expect("prune");
        let back = s
            .trial(&study, paused.number)
            .expect("read")
            .expect("there");
        assert!(back.status.paused(), "{name}: {:?}", back.status);
        assert_eq!(back.state(), TrialState::Pruned, "{name}");
        let other = s
            .trial(&study, pruned.number)
            .expect("read")
            .expect("there");
        assert!(!other.status.paused(), "{name}: {:?}", other.status);
        assert_eq!(s.counted(&study).expect("counted"), 2, "{name}");
        assert_eq!(
            s.history(&study, &space()).expect("history").finished.len(),
            2,
            "{name}: a paused trial teaches as a pruned one"
        );
        // Only a paused trial is promoted.
        assert_eq!(
            s.promote(&study, pruned.number, "no").expect("promote"),
            None,
            "{name}"
        );
        assert_eq!(
            s.promote(&study, TrialNumber(999), "no").expect("promote"),
            None,
            "{name}"
        );
        let reason = "interrupted: paused, then promoted (rung 1: 1st of 4 trials there)";
        let rerun = s
            .promote(&study, paused.number, reason)
            .expect("promote")
            .expect("a re-run");
        assert_eq!(
            s.promote(&study, paused.number, reason).expect("again"),
            None,
            "{name}: promoted once"
        );
        let earlier = s
            .trial(&study, paused.number)
            .expect("read")
            .expect("there");
        assert!(earlier.status.interrupted(), "{name}: {:?}", earlier.status);
        assert_eq!(earlier.status.value(), None, "{name}");
        assert!(
            matches!(&earlier.status, TrialStatus::Failed { reason: r, .. } if r == reason),
            "{name}: {:?}",
            earlier.status
        );
        assert_eq!(
            s.retry_of(&study, rerun).expect("retry of"),
            Some(paused.number),
            "{name}"
        );
        assert_eq!(s.counted(&study).expect("counted"), 1, "{name}");
        assert_eq!(
            s.history(&study, &space()).expect("history").finished.len(),
            1,
            "{name}: the promoted attempt teaches nothing; its re-run will"
        );
        // The budget (3) has room for the re-run, which is claimed before any new trial, and
        // for one more.
        let next = claim(s.as_mut(), &study, w, Some(3), &params(0.9)).expect("the re-run");
        assert_eq!(next.number, rerun, "{name}");
        assert_eq!(next.params, params(0.2), "{name}");
        assert!(
            claim(s.as_mut(), &study, w, Some(3), &params(0.9)).is_some(),
            "{name}"
        );
        assert!(
            claim(s.as_mut(), &study, w, Some(3), &params(0.9)).is_none(),
            "{name}"
        );
    }
}

/// A child of population-based training is queued with its params and its parent in one
/// write, claimed before any new trial, counted in the budget, not known as fixed params, and
/// its parent's step can be recorded again when it starts.
#[test]
fn a_pbt_child_is_queued_with_its_parent_claimed_first_and_not_fixed() {
    use super::{Lineage, Parent};
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let a = claim(s.as_mut(), &study, w, Some(3), &params(0.2)).expect("a trial");
        let b = claim(s.as_mut(), &study, w, Some(3), &params(0.7)).expect("a trial");
        assert_eq!(s.lineage(&study).expect("lineage"), vec![], "{name}");
        let parent = Parent {
            trial: a.number,
            step: 4,
        };
        let child = s
            .enqueue_child(&study, &space(), &params(0.24), parent)
            .expect("queued");
        assert!(child > b.number, "{name}");
        assert!(
            !s.has_fixed_params(&study, &params(0.24)).expect("fixed"),
            "{name}: a child's params are not [[enqueue]]'s"
        );
        assert_eq!(
            s.lineage(&study).expect("lineage"),
            vec![Lineage { child, parent }],
            "{name}"
        );
        // The budget (3) counts the queued child: it is claimed first, and no trial after it.
        let next = claim(s.as_mut(), &study, w, Some(3), &params(0.9)).expect("the child");
        assert_eq!(
            (next.number, &next.params),
            (child, &params(0.24)),
            "{name}"
        );
        assert!(
            claim(s.as_mut(), &study, w, Some(3), &params(0.9)).is_none(),
            "{name}"
        );
        // At its start it records the step it actually started from.
        let started = Parent {
            trial: a.number,
            step: 6,
        };
        s.set_parent(next.id, started).expect("set parent");
        assert_eq!(
            s.lineage(&study).expect("lineage"),
            vec![Lineage {
                child,
                parent: started
            }],
            "{name}: recorded again, not twice"
        );
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
        // New trials take ids of their own: the other study's trial is untouched.
        let u = claim(s.as_mut(), &again, w, None, &params(0.6)).expect("a trial");
        assert_eq!(u.number.0, 1, "{name}");
        let theirs = s
            .trial(&kept, TrialNumber(0))
            .expect("read")
            .expect("kept's trial");
        assert_eq!(theirs.value(), Some(0.3), "{name}");
        assert_eq!(theirs.params, params(0.3), "{name}");
        assert_eq!(s.trials(&again, None).expect("rows").len(), 2, "{name}");
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
        assert_eq!(
            s.best(&study).expect("best"),
            Some((TrialNumber(0), 0.1)),
            "{name}"
        );

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
        // Numbers the study does not have change nothing either.
        assert_eq!(
            s.set_discarded(&study, &[7, 99], true).expect("discard"),
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
        assert_eq!(
            s.best(&study).expect("best"),
            Some((TrialNumber(0), 0.1)),
            "{name}"
        );
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
        let one = s
            .trial(&study, TrialNumber(0))
            .expect("read")
            .expect("trial 0");
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
        let back = s
            .trial(&study, TrialNumber(0))
            .expect("read")
            .expect("trial 0");
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
        let one = s
            .trial(&study, TrialNumber(0))
            .expect("read")
            .expect("trial 0");
        assert_eq!(one.status.gpu(), Some(&gpu), "{name}: one trial by number");
        // The telemetry is no metric: the last report's metrics are what they were.
        assert_eq!(one.metrics.len(), 1, "{name}");
    }
}

fn complete(v: f64) -> TrialStatus {
    TrialStatus::Complete {
        others: Vec::new(),
        value: v,
        ran: Ran::default(),
    }
}

fn named(s: &mut dyn Storage, name: &str, direction: Direction, metric: &str) -> StudyRow {
    s.create_or_load_study(&NewStudy {
        others: &[],
        name,
        direction,
        metric,
        file: None,
        source: None,
    })
    .expect("study")
}

/// The numbers of a study's trials in `state`.
fn numbers_in(s: &dyn Storage, study: &StudyRow, state: TrialState) -> Vec<u64> {
    s.trials(study, Some(state))
        .expect("rows")
        .iter()
        .map(|t| t.number.0)
        .collect()
}

/// What every backend says of a trial its recovery declared interrupted: failed, through no
/// fault of its own, for the one reason every backend gives a silent owner, ended where it
/// ran.
fn assert_recovered(s: &dyn Storage, study: &StudyRow, claimed: &Trial, name: &str) {
    let back = s
        .trial(study, claimed.number)
        .expect("read")
        .expect("the trial");
    assert_eq!(back.state(), TrialState::Failed, "{name}: {back:?}");
    assert!(back.status.interrupted(), "{name}: {back:?}");
    let reason = back.status.reason().unwrap_or_default();
    assert!(
        reason.starts_with("interrupted: no heartbeat for more than "),
        "{name}: {reason}"
    );
    assert!(back.status.finished().is_some(), "{name}: an end time");
    assert_eq!(
        back.status.placement().and_then(|p| p.worker),
        claimed.status.placement().and_then(|p| p.worker),
        "{name}: the worker it ran on"
    );
    assert_eq!(back.params, claimed.params, "{name}");
}

#[test]
fn a_worker_that_heartbeats_keeps_its_trials_and_a_silent_workers_are_recovered() {
    // The one test that lets time pass (0.4 s a backend): a heartbeat is aged only by waiting.
    let grace = std::time::Duration::from_millis(250);
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let silent = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let alive = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let done = claim(s.as_mut(), &study, silent, None, &params(0.05)).expect("0");
        s.finish_trial(done.id, &complete(0.3), &[])
            .expect("finish");
        let lost = claim(s.as_mut(), &study, silent, None, &params(0.1)).expect("1");
        let kept = claim(s.as_mut(), &study, alive, None, &params(0.2)).expect("2");
        // A claim is a sign of life: nothing is older than a long grace.
        assert_eq!(
            s.recover_interrupted(&study, std::time::Duration::from_secs(60))
                .expect("recover"),
            Vec::<TrialNumber>::new(),
            "{name}"
        );

        std::thread::sleep(std::time::Duration::from_millis(400));
        s.heartbeat(alive, &[kept.id]).expect("heartbeat");
        let recovered = s.recover_interrupted(&study, grace).expect("recover");
        assert_eq!(recovered, [lost.number], "{name}: only the silent worker's");
        assert_recovered(s.as_ref(), &study, &lost, name);
        let still = s.trial(&study, kept.number).expect("read").expect("2");
        assert_eq!(still.status, kept.status, "{name}: the live worker's trial");
        // The recovered trial's params are queued again under a new number; it does not count
        // toward the budget, the finished one does.
        assert_eq!(
            numbers_in(s.as_ref(), &study, TrialState::Queued),
            [3],
            "{name}"
        );
        let rerun = s.trial(&study, TrialNumber(3)).expect("read").expect("3");
        assert_eq!(rerun.params, params(0.1), "{name}");
        assert_eq!(s.counted(&study).expect("counted"), 1, "{name}");
        let h = s.history(&study, &space()).expect("history");
        let finished: Vec<u64> = h.finished.iter().map(|f| f.number.0).collect();
        assert_eq!(
            finished,
            [0],
            "{name}: an interrupted trial teaches nothing"
        );
        assert_eq!(h.pending, [params(0.2), params(0.1)], "{name}");

        // The silent worker comes back and stamps its lost trial: it stays recovered, and is
        // not recovered again. (A long grace here: the reads above may take longer than the
        // short one on a loaded machine, and the live trial is not what this is about.)
        s.heartbeat(silent, &[lost.id]).expect("a late heartbeat");
        assert_recovered(s.as_ref(), &study, &lost, name);
        // Nor does a stamp for a trial that ended, or for an id no trial has: both are left
        // as they are, not an error (a worker may stamp a trial it is finishing).
        s.heartbeat(silent, &[done.id, TrialId(987_654)])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            s.trial(&study, TrialNumber(0))
                .expect("read")
                .expect("0")
                .value(),
            Some(0.3),
            "{name}"
        );
        assert_eq!(
            s.recover_interrupted(&study, std::time::Duration::from_secs(60))
                .expect("recover"),
            Vec::<TrialNumber>::new(),
            "{name}"
        );
        // The live worker takes the rerun.
        let next = claim(s.as_mut(), &study, alive, None, &params(0.9)).expect("the rerun");
        assert_eq!((next.number.0, &next.params), (3, &params(0.1)), "{name}");
    }
}

#[test]
fn recovery_takes_every_silent_trial_once_and_finds_nothing_where_none_runs() {
    let now = std::time::Duration::ZERO;
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        // No trial at all, then only queued and finished ones: nothing to recover.
        assert_eq!(
            s.recover_interrupted(&study, now).expect("recover"),
            Vec::<TrialNumber>::new(),
            "{name}"
        );
        let a = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let b = s
            .register_worker(&study, &["cuda:0".into(), "cuda:1".into()])
            .expect("worker");
        let done = claim(s.as_mut(), &study, a, None, &params(0.05)).expect("0");
        s.finish_trial(done.id, &failed("exited with status 1", false), &[])
            .expect("finish");
        s.enqueue(&study, &space(), &params(0.5)).expect("1 queued");
        assert_eq!(
            s.recover_interrupted(&study, now).expect("recover"),
            Vec::<TrialNumber>::new(),
            "{name}"
        );
        assert_eq!(
            numbers_in(s.as_ref(), &study, TrialState::Queued),
            [1],
            "{name}"
        );

        // Three running trials of two workers (the queued one among them), each stamped just
        // now; a grace of zero makes every one of them late.
        let t1 = claim(s.as_mut(), &study, a, None, &params(0.9)).expect("1");
        let t2 = claim(s.as_mut(), &study, b, None, &params(0.2)).expect("2");
        let t3 = claim(s.as_mut(), &study, b, None, &params(0.3)).expect("3");
        s.heartbeat(b, &[t2.id, t3.id]).expect("heartbeat");
        assert_eq!(t1.params, params(0.5), "{name}: the queued trial ran");
        let mut recovered = s.recover_interrupted(&study, now).expect("recover");
        recovered.sort_unstable();
        assert_eq!(
            recovered,
            [TrialNumber(1), TrialNumber(2), TrialNumber(3)],
            "{name}"
        );
        for t in [&t1, &t2, &t3] {
            assert_recovered(s.as_ref(), &study, t, name);
        }
        // Twice in a row: the second finds nothing, and changes nothing.
        let before = s.trials(&study, None).expect("rows");
        assert_eq!(
            s.recover_interrupted(&study, now).expect("recover"),
            Vec::<TrialNumber>::new(),
            "{name}"
        );
        assert_eq!(s.trials(&study, None).expect("rows"), before, "{name}");
        // Each one's params queued once more, under new numbers; none counts.
        let queued = s.trials(&study, Some(TrialState::Queued)).expect("rows");
        let numbers: Vec<u64> = queued.iter().map(|t| t.number.0).collect();
        assert_eq!(numbers, [4, 5, 6], "{name}");
        let mut again: Vec<String> = queued.iter().map(|t| format!("{:?}", t.params)).collect();
        let mut ran: Vec<String> = [&t1, &t2, &t3]
            .iter()
            .map(|t| format!("{:?}", t.params))
            .collect();
        again.sort();
        ran.sort();
        assert_eq!(again, ran, "{name}");
        assert_eq!(s.counted(&study).expect("counted"), 1, "{name}");
        assert_eq!(
            s.count_state(&study, TrialState::Failed).expect("count"),
            4,
            "{name}"
        );
        assert_eq!(
            s.count_state(&study, TrialState::Running).expect("count"),
            0,
            "{name}"
        );
        // Another study's running trial is not this recovery's business.
        let other = named(s.as_mut(), "other", Direction::Minimize, "loss");
        let w = s.register_worker(&other, &["cpu".into()]).expect("worker");
        let theirs = claim(s.as_mut(), &other, w, None, &params(0.7)).expect("theirs");
        assert_eq!(
            s.recover_interrupted(&study, now).expect("recover"),
            Vec::<TrialNumber>::new(),
            "{name}"
        );
        let back = s.trial(&other, theirs.number).expect("read").expect("0");
        assert_eq!(back.state(), TrialState::Running, "{name}");
    }
}

#[test]
fn studies_are_listed_in_creation_order_with_their_direction_counts_and_best() {
    for (name, mut s, _dir) in backends() {
        assert!(s.list_studies().expect("list").is_empty(), "{name}");
        let x = named(s.as_mut(), "x", Direction::Minimize, "loss");
        let y = named(s.as_mut(), "y", Direction::Maximize, "acc");
        let w = s.register_worker(&x, &["cpu".into()]).expect("worker");
        // x: complete 0.3 and 0.1, pruned, failed, interrupted, running, and two queued
        // (one enqueued, one the interrupted trial's rerun).
        for v in [0.3, 0.1] {
            let t = claim(s.as_mut(), &x, w, None, &params(v)).expect("a trial");
            s.finish_trial(t.id, &complete(v), &[]).expect("finish");
        }
        let t = claim(s.as_mut(), &x, w, None, &params(0.2)).expect("a trial");
        let pruned = TrialStatus::Pruned {
            value: Some(0.01),
            step: Some(1),
            reason: None,
            paused: false,
            ran: Ran::default(),
        };
        s.finish_trial(t.id, &pruned, &[]).expect("finish");
        let t = claim(s.as_mut(), &x, w, None, &params(0.4)).expect("a trial");
        s.finish_trial(t.id, &failed("exited with status 1", false), &[])
            .expect("finish");
        let t = claim(s.as_mut(), &x, w, None, &params(0.5)).expect("a trial");
        s.finish_trial(t.id, &failed("interrupted", true), &[])
            .expect("finish");
        s.enqueue(&x, &space(), &params(0.6)).expect("enqueue");
        // The claim takes the rerun (the lowest queued number); the enqueued trial waits.
        claim(s.as_mut(), &x, w, None, &params(0.7)).expect("a trial");

        let list = s.list_studies().expect("list");
        let names: Vec<&str> = list.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["x", "y"], "{name}");
        let (lx, ly) = (&list[0], &list[1]);
        assert_eq!(
            (
                lx.direction,
                lx.metric.as_str(),
                ly.direction,
                ly.metric.as_str()
            ),
            (Direction::Minimize, "loss", Direction::Maximize, "acc"),
            "{name}"
        );
        assert_eq!(
            (
                lx.trials,
                lx.queued,
                lx.running,
                lx.complete,
                lx.pruned,
                lx.failed
            ),
            (7, 1, 1, 2, 1, 2),
            "{name}: {lx:?}"
        );
        assert_eq!(
            (lx.best_trial, lx.best_value),
            (Some(TrialNumber(1)), Some(0.1)),
            "{name}: a pruned value is never the best"
        );
        assert_eq!(
            (
                ly.trials,
                ly.queued,
                ly.running,
                ly.complete,
                ly.pruned,
                ly.failed
            ),
            (0, 0, 0, 0, 0, 0),
            "{name}"
        );
        assert_eq!((ly.best_trial, ly.best_value), (None, None), "{name}");
        assert!(ly.others.is_empty() && ly.pareto_front.is_none(), "{name}");

        // count_state agrees with the list, state by state; counted leaves out the queued,
        // the running and the interrupted.
        for (state, n) in [
            (TrialState::Queued, 1),
            (TrialState::Running, 1),
            (TrialState::Complete, 2),
            (TrialState::Pruned, 1),
            (TrialState::Failed, 2),
        ] {
            assert_eq!(
                s.count_state(&x, state).expect("count"),
                n,
                "{name}: {state:?}"
            );
            assert_eq!(
                s.count_state(&y, state).expect("count"),
                0,
                "{name}: {state:?}"
            );
        }
        assert_eq!(s.counted(&x).expect("counted"), 4, "{name}");
        assert_eq!(s.counted(&y).expect("counted"), 0, "{name}");
    }
}

#[test]
fn a_missing_study_is_none_to_find_and_an_error_to_load_and_a_stored_one_is_refused_when_it_differs()
 {
    use super::StorageErrorKind;
    for (name, mut s, _dir) in backends() {
        let location = s.location();
        assert!(!location.is_empty(), "{name}");
        assert_eq!(s.find_study("x").expect("find"), None, "{name}");
        let e = s.study("x").expect_err("no study yet");
        assert_eq!(e.kind(), StorageErrorKind::NoStudy, "{name}: {e}");
        assert!(
            e.to_string().contains("`x`") && e.to_string().contains(&location),
            "{name}: {e}"
        );

        let row = study(s.as_mut(), Direction::Minimize, "loss");
        assert_eq!(
            s.find_study("x").expect("find").as_ref(),
            Some(&row),
            "{name}"
        );
        assert_eq!(s.study("x").expect("load"), row, "{name}");
        assert!(!row.is_multi(), "{name}");
        // Loaded again as it is: the same row; nothing stored with it when no file was given.
        assert_eq!(
            study(s.as_mut(), Direction::Minimize, "loss"),
            row,
            "{name}"
        );
        let f = s.study_file(&row).expect("file");
        assert_eq!((f.path, f.text), (None, None), "{name}");
        // Another direction or metric is refused, naming what is stored and what was given.
        for (direction, metric, stored, given) in [
            (
                Direction::Maximize,
                "loss",
                "direction minimize",
                "maximize",
            ),
            (Direction::Minimize, "acc", "metric `loss`", "`acc`"),
        ] {
            let e = s
                .create_or_load_study(&NewStudy {
                    others: &[],
                    name: "x",
                    direction,
                    metric,
                    file: None,
                    source: None,
                })
                .expect_err("differs");
            assert_eq!(e.kind(), StorageErrorKind::Differs, "{name}: {e}");
            let msg = e.to_string();
            assert!(msg.contains(stored) && msg.contains(given), "{name}: {msg}");
        }
        assert_eq!(s.study("x").expect("load"), row, "{name}: unchanged");
        assert_eq!(s.list_studies().expect("list").len(), 1, "{name}");
    }
}

#[test]
fn workers_get_distinct_ids_and_a_trial_its_directory() {
    for (name, mut s, _dir) in backends() {
        let x = study(s.as_mut(), Direction::Minimize, "loss");
        let y = named(s.as_mut(), "y", Direction::Minimize, "loss");
        let mut ids: Vec<i64> = Vec::new();
        for st in [&x, &y, &x] {
            ids.push(s.register_worker(st, &["cpu".into()]).expect("worker").0);
        }
        // With a study and its workers deleted, a new worker still gets an id of its own.
        s.delete_study(&y).expect("delete");
        ids.remove(1);
        ids.push(s.register_worker(&x, &[]).expect("worker").0);
        let mut distinct = ids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ids.len(), "{name}: {ids:?}");

        let w = WorkerId(ids[0]);
        let t = claim(s.as_mut(), &x, w, None, &params(0.1)).expect("a trial");
        assert_eq!(t.trial_dir, None, "{name}");
        let dir = std::path::Path::new("/runs/x/trial-0000");
        s.set_trial_dir(t.id, dir).expect("dir");
        let back = s.trial(&x, TrialNumber(0)).expect("read").expect("0");
        assert_eq!(back.trial_dir.as_deref(), Some(dir), "{name}");
        assert_eq!(s.checkpoint_step(t.id).expect("read"), None, "{name}");
        s.set_checkpoint_step(t.id, 7).expect("checkpoint");
        s.set_checkpoint_step(t.id, 12).expect("checkpoint");
        assert_eq!(s.checkpoint_step(t.id).expect("read"), Some(12), "{name}");
        s.finish_trial(t.id, &complete(0.2), &[]).expect("finish");
        assert_eq!(
            s.checkpoint_step(t.id).expect("read"),
            Some(12),
            "{name}: kept after the end, for the next attempt"
        );
        let rows = s.trials(&x, None).expect("rows");
        assert_eq!(rows[0].trial_dir.as_deref(), Some(dir), "{name}: kept");
        assert_eq!(
            rows[0].status.placement().and_then(|p| p.worker),
            Some(w),
            "{name}"
        );
    }
}

#[test]
fn trials_are_read_in_number_order_by_state_and_by_number() {
    for (name, mut s, _dir) in backends() {
        let x = study(s.as_mut(), Direction::Minimize, "loss");
        let y = named(s.as_mut(), "y", Direction::Minimize, "loss");
        let w = s.register_worker(&x, &["cpu".into()]).expect("worker");
        let wy = s.register_worker(&y, &["cpu".into()]).expect("worker");
        // y's trial first, so that x's numbers and ids do not line up.
        let ty = claim(s.as_mut(), &y, wy, None, &params(0.9)).expect("y 0");
        s.finish_trial(ty.id, &complete(0.9), &[]).expect("finish");
        // x: 0 complete, 1 running, 2 failed, 3 queued.
        let t0 = claim(s.as_mut(), &x, w, None, &params(0.1)).expect("0");
        let t1 = claim(s.as_mut(), &x, w, None, &params(0.2)).expect("1");
        let t2 = claim(s.as_mut(), &x, w, None, &params(0.3)).expect("2");
        s.enqueue(&x, &space(), &params(0.4)).expect("3");
        s.finish_trial(t2.id, &failed("exited with status 1", false), &[])
            .expect("finish");
        s.finish_trial(t0.id, &complete(0.1), &[]).expect("finish");

        let all = s.trials(&x, None).expect("rows");
        let numbers: Vec<u64> = all.iter().map(|t| t.number.0).collect();
        assert_eq!(numbers, [0, 1, 2, 3], "{name}");
        let states: Vec<TrialState> = all.iter().map(|t| t.state()).collect();
        assert_eq!(
            states,
            [
                TrialState::Complete,
                TrialState::Running,
                TrialState::Failed,
                TrialState::Queued
            ],
            "{name}"
        );
        assert_eq!(all[1], t1, "{name}: a running trial reads back as claimed");
        assert_eq!(all[3].params, params(0.4), "{name}");
        for (state, want) in [
            (TrialState::Complete, vec![0]),
            (TrialState::Running, vec![1]),
            (TrialState::Failed, vec![2]),
            (TrialState::Queued, vec![3]),
            (TrialState::Pruned, vec![]),
        ] {
            assert_eq!(numbers_in(s.as_ref(), &x, state), want, "{name}: {state:?}");
        }
        // One trial by number, within its own study only.
        for (i, t) in all.iter().enumerate() {
            let one = s
                .trial(&x, TrialNumber(i as u64))
                .expect("read")
                .expect("there");
            assert_eq!(&one, t, "{name}");
        }
        assert_eq!(s.trial(&x, TrialNumber(4)).expect("read"), None, "{name}");
        assert_eq!(
            s.trial(&x, TrialNumber(u64::from(u32::MAX))).expect("read"),
            None,
            "{name}"
        );
        let y0 = s.trial(&y, TrialNumber(0)).expect("read").expect("y 0");
        assert_eq!((y0.id, y0.value()), (ty.id, Some(0.9)), "{name}");
        assert_eq!(s.trial(&y, TrialNumber(1)).expect("read"), None, "{name}");
        assert_eq!(s.trials(&y, None).expect("rows").len(), 1, "{name}");
    }
}

#[test]
fn the_best_is_the_lowest_or_highest_finite_complete_value_the_first_on_a_tie() {
    for (name, mut s, _dir) in backends() {
        let min = study(s.as_mut(), Direction::Minimize, "loss");
        let max = named(s.as_mut(), "max", Direction::Maximize, "acc");
        for st in [&min, &max] {
            let w = s.register_worker(st, &["cpu".into()]).expect("worker");
            assert_eq!(s.best(st).expect("best"), None, "{name}: no trial");
            // Neither a pruned value, a failure, a running trial nor a non-finite value is a
            // best, whichever way the study goes.
            let t = claim(s.as_mut(), st, w, None, &params(0.1)).expect("a trial");
            let pruned = |v: f64| TrialStatus::Pruned {
                value: Some(v),
                step: Some(0),
                reason: None,
                paused: false,
                ran: Ran::default(),
            };
            let extreme = if st.direction == Direction::Minimize {
                -1e9
            } else {
                1e9
            };
            s.finish_trial(t.id, &pruned(extreme), &[]).expect("finish");
            let t = claim(s.as_mut(), st, w, None, &params(0.2)).expect("a trial");
            s.finish_trial(t.id, &failed("crashed", false), &[])
                .expect("finish");
            claim(s.as_mut(), st, w, None, &params(0.3)).expect("running");
            for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                let t = claim(s.as_mut(), st, w, None, &params(0.4)).expect("a trial");
                s.finish_trial(t.id, &complete(v), &[]).expect("finish");
            }
            assert_eq!(
                s.best(st).expect("best"),
                None,
                "{name}: no finite complete"
            );
            // 6: 0.5, 7: 0.2, 8: 0.8, 9: 0.2 again, 10: 0.8 again.
            for v in [0.5, 0.2, 0.8, 0.2, 0.8] {
                let t = claim(s.as_mut(), st, w, None, &params(v)).expect("a trial");
                s.finish_trial(t.id, &complete(v), &[]).expect("finish");
            }
        }
        assert_eq!(
            s.best(&min).expect("best"),
            Some((TrialNumber(7), 0.2)),
            "{name}"
        );
        assert_eq!(
            s.best(&max).expect("best"),
            Some((TrialNumber(8), 0.8)),
            "{name}"
        );
        let list = s.list_studies().expect("list");
        let bests: Vec<(Option<TrialNumber>, Option<f64>)> =
            list.iter().map(|l| (l.best_trial, l.best_value)).collect();
        assert_eq!(
            bests,
            [
                (Some(TrialNumber(7)), Some(0.2)),
                (Some(TrialNumber(8)), Some(0.8))
            ],
            "{name}"
        );
    }
}

#[test]
fn reports_come_back_in_order_with_their_steps_and_the_final_one_apart() {
    for (name, mut s, _dir) in backends() {
        let study = study(s.as_mut(), Direction::Minimize, "loss");
        let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
        let a = claim(s.as_mut(), &study, w, None, &params(0.1)).expect("0");
        let b = claim(s.as_mut(), &study, w, None, &params(0.2)).expect("1");
        let c = claim(s.as_mut(), &study, w, None, &params(0.3)).expect("2");
        // Interleaved, as two slots report; steps need not start at 0 nor be dense.
        for (t, seq, step, v, last) in [
            (&b, 0, 5, 0.9, false),
            (&a, 0, 10, 0.8, false),
            (&a, 1, 20, 0.6, false),
            (&b, 1, 10, 0.7, false),
            (&a, 2, 30, 0.5, false),
            (&a, 3, 30, 0.45, true),
            (&c, 0, 1, 0.1, true),
        ] {
            s.add_report(t.id, seq, &report(step, "loss", v), last, "loss")
                .expect("report");
        }
        let stored = s.trial_reports(a.id).expect("reports");
        let got: Vec<(u64, f64, bool)> = stored
            .iter()
            .map(|r| (r.report.step, r.report.metrics["loss"], r.is_final))
            .collect();
        assert_eq!(
            got,
            [
                (10, 0.8, false),
                (20, 0.6, false),
                (30, 0.5, false),
                (30, 0.45, true)
            ],
            "{name}"
        );
        assert!(stored.iter().all(|r| r.at.is_some()), "{name}: {stored:?}");
        assert!(s.trial_reports(b.id).expect("reports").len() == 2, "{name}");
        // For the pruners: the non-final reports by trial number; a trial with only a final
        // report (2) has none.
        let by_trial = s.reports(&study).expect("reports");
        let steps: Vec<(u64, Vec<u64>)> = by_trial
            .iter()
            .map(|(n, r)| (n.0, r.iter().map(|r| r.step).collect()))
            .collect();
        assert_eq!(steps, [(0, vec![10, 20, 30]), (1, vec![5, 10])], "{name}");
        assert_eq!(by_trial[&TrialNumber(0)][2].metrics["loss"], 0.5, "{name}");
        // The last report's metrics are the trial's, the final one included.
        s.finish_trial(a.id, &complete(0.45), &[]).expect("finish");
        let back = s.trial(&study, TrialNumber(0)).expect("read").expect("0");
        assert_eq!(back.metrics["loss"], 0.45, "{name}");
        // The curve samplers learn from is the objective's non-final values.
        let h = s.history(&study, &space()).expect("history");
        assert_eq!(
            h.finished[0].curve,
            [(10, 0.8), (20, 0.6), (30, 0.5)],
            "{name}"
        );
    }
}
