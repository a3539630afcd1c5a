//! The state from events: counts, slots, the best trial, curves, the budget's progress and
//! its estimate, pause and stop.

use super::*;

#[test]
fn counts_follow_trials_through_their_lifecycle() {
    let mut s = fresh(Direction::Minimize, Some(10));
    s.apply(&started(0, 0));
    s.apply(&started(1, 1));
    assert_eq!((s.counts.running, s.counts.finished()), (2, 0));
    s.apply(&done(0, 0, TrialState::Complete, Some(0.5)));
    s.apply(&done(1, 1, TrialState::Failed, None));
    assert_eq!(s.counts.running, 0);
    assert_eq!((s.counts.complete, s.counts.failed), (1, 1));
    assert_eq!(s.counts.total(), 2);
}

#[test]
fn a_finished_trial_frees_its_slot_and_a_new_one_takes_it() {
    let mut s = fresh(Direction::Minimize, None);
    s.apply(&started(0, 1));
    assert_eq!(s.slots[1].trial, Some(TrialNumber(0)));
    s.apply(&done(0, 1, TrialState::Complete, Some(1.0)));
    assert_eq!(s.slots[1].trial, None);
    s.apply(&started(1, 1));
    assert_eq!(s.slots[1].trial, Some(TrialNumber(1)));
}

#[test]
fn best_is_the_best_complete_value_in_the_studys_direction() {
    for (dir, want) in [(Direction::Minimize, 2), (Direction::Maximize, 1)] {
        let mut s = fresh(dir, None);
        s.apply(&done(0, 0, TrialState::Complete, Some(0.5)));
        s.apply(&done(1, 0, TrialState::Complete, Some(0.9)));
        s.apply(&done(2, 0, TrialState::Complete, Some(0.1)));
        assert_eq!(s.best, Some(TrialNumber(want)), "{dir:?}");
    }
}

#[test]
fn pruned_failed_and_nan_trials_are_never_best() {
    let mut s = fresh(Direction::Minimize, None);
    s.apply(&done(0, 0, TrialState::Complete, Some(0.5)));
    s.apply(&done(1, 0, TrialState::Pruned, Some(0.01)));
    s.apply(&done(2, 0, TrialState::Complete, Some(f64::NAN)));
    s.apply(&done(3, 0, TrialState::Failed, None));
    assert_eq!(s.best, Some(TrialNumber(0)));
}

#[test]
fn reports_build_the_objective_curve_and_keep_the_latest_metrics() {
    let mut s = fresh(Direction::Minimize, None);
    s.apply(&started(0, 0));
    for e in 1..=3 {
        s.apply(&Event::TrialReported {
            number: TrialNumber(0),
            slot: 0,
            report: report(0, e),
        });
    }
    let t = s.trial(TrialNumber(0)).expect("trial 0 started");
    assert_eq!(t.curve.len(), 3);
    assert_eq!(t.n_reports, 3);
    assert_eq!(t.latest(), Some(fixtures::val_loss(0, 3)));
    assert_eq!(t.progress(), Some((3.0, 10.0, "ep")));
}

#[test]
fn progress_degrades_gracefully_when_the_total_is_not_reported() {
    let mut s = fresh(Direction::Minimize, None);
    s.apply(&started(0, 0));
    let mut m = BTreeMap::new();
    m.insert("loss".to_string(), 1.0);
    s.apply(&Event::TrialReported {
        number: TrialNumber(0),
        slot: 0,
        report: Report {
            step: 7,
            metrics: m.clone(),
        },
    });
    let t = s.trial(TrialNumber(0)).expect("started");
    assert_eq!(t.progress(), None);
    assert!(t.curve.is_empty(), "loss is not the objective val_loss");
    // Steps against a reported total count too.
    m.insert("total_steps".into(), 28.0);
    s.apply(&Event::TrialReported {
        number: TrialNumber(0),
        slot: 0,
        report: Report {
            step: 14,
            metrics: m,
        },
    });
    let t = s.trial(TrialNumber(0)).expect("started");
    assert_eq!(t.progress(), Some((14.0, 28.0, "step")));
}

#[test]
fn the_estimate_extrapolates_this_runs_rate_to_the_rest_of_the_budget() {
    let mut s = fresh(Direction::Minimize, Some(40));
    for n in 0..10 {
        s.apply(&done(n, 0, TrialState::Complete, Some(1.0)));
    }
    s.tick(t0() + Duration::from_secs(100));
    let p = s.progress();
    assert_eq!(p.ratio, Some(0.25));
    assert_eq!(p.elapsed, Duration::from_secs(100));
    // 10 trials in 100 s, 30 left: 300 s.
    assert_eq!(p.left, Some(Duration::from_secs(300)));
}

#[test]
fn trials_finished_before_a_resume_count_toward_the_budget_but_not_the_rate() {
    let mut s = UiState::new(Mode::Live, false, t0());
    s.apply(&Event::StudyStarted {
        info: info(Some(40), 2),
        existing: (0..20)
            .map(|n| summary(n, TrialState::Complete, Some(1.0)))
            .collect(),
        at: t0(),
    });
    assert_eq!(s.finished_before, 20);
    s.tick(t0() + Duration::from_secs(50));
    assert_eq!(s.progress().left, None, "no trial finished in this run yet");
    s.apply(&done(20, 0, TrialState::Complete, Some(1.0)));
    let p = s.progress();
    assert_eq!(p.ratio, Some(21.0 / 40.0));
    assert_eq!(p.left, Some(Duration::from_secs(19 * 50)));
}

#[test]
fn a_timeout_caps_the_estimate() {
    let mut s = UiState::new(Mode::Live, false, t0());
    let mut i = info(Some(1000), 1);
    i.timeout = Some(Duration::from_secs(600));
    s.apply(&Event::StudyStarted {
        info: i,
        existing: Vec::new(),
        at: t0(),
    });
    s.apply(&done(0, 0, TrialState::Complete, Some(1.0)));
    s.tick(t0() + Duration::from_secs(60));
    let p = s.progress();
    assert_eq!(p.left, Some(Duration::from_secs(540)));
    assert_eq!(p.ratio, Some(0.1));
}

#[test]
fn pause_and_stopping_events_show_in_the_state() {
    let mut s = fresh(Direction::Minimize, None);
    s.apply(&Event::Paused(true));
    assert!(s.paused);
    s.apply(&Event::Stopping { graceful: true });
    assert_eq!(s.stopping, Some(true));
    finished(&mut s, "budget spent");
    assert_eq!(
        s.finished.as_ref().map(|f| f.reason.as_str()),
        Some("budget spent")
    );
}
