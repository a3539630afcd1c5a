//! Trials that report epochs: the builtin trainer's progress, ASHA's rungs in the header and
//! the help, and learning curves drawn by epoch.

use super::*;

/// A builtin trial's report: the trainer counts optimizer steps (312 an epoch here) and says
/// its epoch, its total epochs and the fraction done besides.
fn builtin_report(step: u64, value: f64) -> Report {
    let epoch = step as f64 / 312.0;
    let mut m = BTreeMap::new();
    m.insert("epoch".into(), epoch);
    m.insert("total_epochs".into(), 6.0);
    m.insert("progress".into(), epoch / 6.0);
    m.insert("val_loss".into(), value);
    m.insert("samples_per_s".into(), 12_000.0);
    m.insert("data_wait".into(), 0.05);
    Report { step, metrics: m }
}

fn builtin_loss(n: u64, step: u64) -> f64 {
    0.2 + 0.05 * n as f64 + 1.5 * (-0.6 * step as f64 / 312.0).exp()
}

fn reported(n: u64, slot: usize, report: Report) -> Event {
    Event::TrialReported {
        number: TrialNumber(n),
        slot,
        report,
    }
}

/// A builtin study of 6 epochs reporting every half epoch: three trials done, two running
/// (3 and 5.5 epochs in).
fn builtin_state() -> UiState {
    let mut s = fresh(Direction::Minimize, Some(12));
    for n in 0..3 {
        s.apply(&started(n, 0));
        for k in 1..=12 {
            s.apply(&reported(
                n,
                0,
                builtin_report(156 * k, builtin_loss(n, 156 * k)),
            ));
        }
        s.apply(&done(
            n,
            0,
            TrialState::Complete,
            Some(builtin_loss(n, 1872)),
        ));
    }
    for (n, slot, halves) in [(3, 0, 6), (4, 1, 11)] {
        s.apply(&started(n, slot));
        for k in 1..=halves {
            s.apply(&reported(
                n,
                slot,
                builtin_report(156 * k, builtin_loss(n, 156 * k)),
            ));
        }
    }
    s
}

/// The builtin study under ASHA over its 6 epochs, as the scheduler describes it.
fn asha_state(mode: Mode) -> UiState {
    let mut s = builtin_state();
    s.mode = mode;
    if let Some(info) = s.info.as_mut() {
        info.pruner = "asha".into();
        info.rungs = Some(crate::events::RungSchedule {
            resource: "epoch".into(),
            rungs: vec![1.0, 3.0],
            more: false,
            reduction_factor: 3.0,
            brackets: None,
            pauses: false,
        });
    }
    s
}

#[test]
fn the_header_shows_the_rung_schedule_where_it_fits_and_the_help_always() {
    for mode in [Mode::Live, Mode::Watch] {
        let wide = screen(&asha_state(mode), 120, 36);
        let top = wide.lines().next().expect("a first line");
        assert!(
            top.contains("tpe/asha (rungs at 1, 3 epochs, keeps 1/3)"),
            "{top}"
        );
        assert!(top.contains("? help"), "{top}");
        // Too narrow for it: the pruner's name alone, the status and the hint whole.
        let narrow = screen(&asha_state(mode), 80, 24);
        let top = narrow.lines().next().expect("a first line");
        assert!(!top.contains("rungs"), "{top}");
        assert!(top.contains("tpe/asha") && top.contains("? help"), "{top}");
        let mut s = asha_state(mode);
        s.handle_key(key('?'));
        let help = screen(&s, 80, 24);
        assert!(
            help.contains("pruner: asha, rungs at 1, 3 epochs, keeps 1/3"),
            "{help}"
        );
    }
    // A pruner without rungs says nothing of them.
    let mut s = builtin_state();
    s.handle_key(key('?'));
    assert!(!screen(&s, 160, 48).contains("rungs"));
}

#[test]
fn snapshot_asha_rungs_in_the_header_120x36() {
    insta::assert_snapshot!(screen(&asha_state(Mode::Live), 120, 36));
}

#[test]
fn snapshot_asha_rungs_in_the_help_80x24() {
    let mut s = asha_state(Mode::Live);
    s.handle_key(key('?'));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_asha_rungs_watched_160x48() {
    insta::assert_snapshot!(screen(&asha_state(Mode::Watch), 160, 48));
}

#[test]
fn a_builtin_trial_shows_its_epochs_and_a_bar_not_a_bare_step() {
    let s = builtin_state();
    let t = s.trial(TrialNumber(3)).expect("running");
    assert_eq!(t.progress(), Some((3.0, 6.0, "ep")));
    let narrow = screen(&s, 80, 24);
    let row = narrow
        .lines()
        .find(|l| l.contains("#3 "))
        .expect("slot 0's row");
    assert!(row.contains("ep 3/6   ━━━╸───"), "{row}");
    assert!(!narrow.contains("step 936"), "{narrow}");
    let wide = screen(&s, 160, 48);
    assert!(wide.contains("epoch 3/6   ━━━━━━━━━───"), "{wide}");
    assert!(wide.contains("epoch 5.5/6 ━"), "{wide}");
}

#[rstest::rstest]
#[case::epochs_of_a_total(&[("epoch", 3.0), ("total_epochs", 6.0)], "ep 3/6")]
#[case::steps_of_a_total(&[("total_steps", 5000.0)], "1874/5000")]
#[case::a_fraction_of_a_time_budget(&[("epoch", 3.4), ("progress", 0.37)], "37%")]
#[case::an_epoch_without_a_total(&[("epoch", 3.4)], "epoch 3.4")]
#[case::nothing_but_a_step(&[], "step 1874")]
fn a_command_trial_shows_the_progress_its_reports_give(
    #[case] keys: &[(&str, f64)],
    #[case] want: &str,
) {
    let mut s = fresh(Direction::Minimize, None);
    s.apply(&started(0, 0));
    let mut m: BTreeMap<String, f64> = keys.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    m.insert("val_loss".into(), 0.5);
    s.apply(&reported(
        0,
        0,
        Report {
            step: 1874,
            metrics: m,
        },
    ));
    let text = screen(&s, 80, 24);
    let row = text
        .lines()
        .find(|l| l.contains("#0 "))
        .expect("slot 0's row");
    assert!(row.contains(want), "{want:?} missing from {row}");
}

#[test]
fn learning_curves_are_drawn_by_epoch_when_every_report_says_its_epoch() {
    let s = builtin_state();
    let text = screen(&s, 160, 48);
    assert!(text.contains("Learning curves by epoch"), "{text}");
    // The x axis ends at the 6th epoch, not at step 1872.
    let x_labels = text
        .lines()
        .skip_while(|l| !l.contains('└'))
        .nth(1)
        .expect("the x axes' labels");
    assert!(x_labels.ends_with(" 6\""), "{x_labels}");
    let t = s.trial(TrialNumber(4)).expect("running");
    assert_eq!(t.curve_by_epoch().map(|c| c.len()), Some(11));
    assert_eq!(
        t.curve_by_epoch().and_then(|c| c.last()).map(|p| p.0),
        Some(5.5)
    );

    // A command trial that reports no epoch: by step.
    let mut s = fresh(Direction::Minimize, None);
    s.apply(&started(0, 0));
    for step in [100, 200, 300] {
        let m = BTreeMap::from([("val_loss".to_string(), 1.0 / step as f64)]);
        s.apply(&reported(0, 0, Report { step, metrics: m }));
    }
    let text = screen(&s, 160, 48);
    assert!(text.contains("Learning curves by step"), "{text}");
    s.handle_key(code(KeyCode::Enter));
    assert!(screen(&s, 160, 48).contains("val_loss by step"));
}

#[test]
fn snapshot_builtin_trials_by_epoch_80x24() {
    insta::assert_snapshot!(screen(&builtin_state(), 80, 24));
}

#[test]
fn snapshot_builtin_trials_by_epoch_160x48() {
    insta::assert_snapshot!(screen(&builtin_state(), 160, 48));
}
