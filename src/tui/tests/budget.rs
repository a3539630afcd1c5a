//! The budget gauge: more trials than the budget, and interrupted and discarded trials, which
//! the budget does not count.

use super::*;

#[test]
fn the_gauge_never_shows_more_trials_than_the_budget() {
    let mut s = fresh(Direction::Minimize, Some(24));
    for n in 0..38 {
        s.apply(&done(n, 0, TrialState::Complete, Some(1.0 + n as f64)));
    }
    let text = screen(&s, 80, 24);
    assert!(!text.contains("38/24"), "{text}");
    assert!(text.contains("100%  38 trials (budget 24)"), "{text}");
    assert_eq!(s.progress().ratio, Some(1.0));

    // The same study run again with the budget raised: the new budget.
    let existing: Vec<Trial> = (0..38)
        .map(|n| summary(n, TrialState::Complete, Some(1.0 + n as f64)))
        .collect();
    s.apply(&Event::StudyStarted {
        info: info(Some(40), 2),
        existing,
        at: t0(),
    });
    let text = screen(&s, 80, 24);
    assert!(text.contains("38/40 trials"), "{text}");
}

#[test]
fn interrupted_trials_do_not_count_toward_the_budget_until_they_run_again() {
    let mut s = fresh(Direction::Minimize, Some(4));
    s.apply(&done(0, 0, TrialState::Complete, Some(1.0)));
    let ran = Ran::span(Placement::default(), t0(), Duration::from_secs(10));
    let interrupted = Trial::unstored(
        TrialNumber(1),
        params(1),
        TrialStatus::Failed {
            reason: "the study was stopped".into(),
            log_tail: None,
            interrupted: true,
            ran,
        },
    );
    s.apply(&Event::TrialFinished {
        slot: 0,
        trial: interrupted,
        at: t0(),
        study_best: None,
    });
    assert_eq!((s.counts.finished(), s.counts.counted()), (2, 1));
    assert_eq!(s.progress().ratio, Some(0.25));
    assert!(screen(&s, 80, 24).contains("1/4 trials"));
    // Its params run again under the same number.
    s.apply(&started(1, 0));
    assert_eq!((s.counts.finished(), s.counts.counted()), (1, 1));
}

#[test]
fn discarded_trials_do_not_count_toward_the_budget_and_are_never_the_best() {
    let mut s = fresh(Direction::Minimize, Some(4));
    s.apply(&done(0, 0, TrialState::Complete, Some(1.0)));
    let ran = Ran::span(Placement::default(), t0(), Duration::from_secs(10));
    let mut discarded = Trial::unstored(
        TrialNumber(1),
        params(1),
        TrialStatus::Complete {
            others: Vec::new(),
            value: 0.1,
            ran,
        },
    );
    discarded.discarded = true;
    s.apply(&Event::TrialFinished {
        slot: 0,
        trial: discarded.clone(),
        at: t0(),
        study_best: None,
    });
    assert_eq!((s.counts.finished(), s.counts.counted()), (2, 1));
    assert_eq!(s.progress().ratio, Some(0.25));
    assert_eq!(
        s.best,
        Some(TrialNumber(0)),
        "the discarded 0.1 is not the best"
    );
    assert!(screen(&s, 80, 24).contains("1/4 trials"));
    // Restored (`tune discard --restore`): it counts again and is the best.
    discarded.discarded = false;
    s.apply(&Event::TrialFinished {
        slot: 0,
        trial: discarded,
        at: t0(),
        study_best: None,
    });
    assert_eq!((s.counts.finished(), s.counts.counted()), (2, 2));
    assert_eq!(s.best, Some(TrialNumber(1)));
}

#[test]
fn a_resumed_studys_discarded_and_interrupted_trials_leave_its_budget_unspent() {
    let mut s = UiState::new(Mode::Live, false, t0());
    let ran = Ran::span(Placement::default(), t0(), Duration::from_secs(10));
    let mut discarded = summary(1, TrialState::Complete, Some(0.5));
    discarded.discarded = true;
    let interrupted = Trial::unstored(
        TrialNumber(2),
        params(2),
        TrialStatus::Failed {
            reason: "the study was stopped".into(),
            log_tail: None,
            interrupted: true,
            ran,
        },
    );
    s.apply(&Event::StudyStarted {
        info: info(Some(4), 2),
        existing: vec![
            summary(0, TrialState::Complete, Some(1.0)),
            discarded,
            interrupted,
        ],
        at: t0(),
    });
    assert_eq!((s.counts.finished(), s.counts.counted()), (3, 1));
    assert!(screen(&s, 80, 24).contains("1/4 trials"));
}

fn overrun_state() -> UiState {
    let mut s = fresh(Direction::Minimize, Some(24));
    for n in 0..38 {
        s.apply(&done(
            n,
            0,
            TrialState::Complete,
            Some(1.0 + (n % 7) as f64),
        ));
    }
    s
}

#[test]
fn snapshot_more_trials_than_the_budget_80x24() {
    insta::assert_snapshot!(screen(&overrun_state(), 80, 24));
}

#[test]
fn snapshot_more_trials_than_the_budget_160x48() {
    insta::assert_snapshot!(screen(&overrun_state(), 160, 48));
}
