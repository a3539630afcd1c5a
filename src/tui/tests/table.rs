//! The trials table: its columns, sorting, the state filter, the selection and scrolling.

use super::*;

#[test]
fn sorting_by_value_puts_the_best_first_and_missing_values_last() {
    let mut s = fresh(Direction::Minimize, None);
    s.apply(&done(0, 0, TrialState::Complete, Some(0.5)));
    s.apply(&done(1, 0, TrialState::Failed, None));
    s.apply(&done(2, 0, TrialState::Complete, Some(0.1)));
    s.apply(&done(3, 0, TrialState::Complete, Some(0.3)));
    s.handle_key(key('3'));
    assert_eq!(s.columns()[s.table.sort], Column::Value);
    let numbers: Vec<u64> = s.order.iter().map(|&i| s.trials[i].number.0).collect();
    assert_eq!(numbers, [2, 3, 0, 1]);
    s.handle_key(key('r'));
    let numbers: Vec<u64> = s.order.iter().map(|&i| s.trials[i].number.0).collect();
    assert_eq!(numbers, [0, 3, 2, 1], "reversed, still missing last");
}

#[test]
fn sorting_by_a_param_column_orders_numbers_numerically() {
    let mut s = fresh(Direction::Minimize, None);
    for n in 0..20 {
        s.apply(&done(n, 0, TrialState::Complete, Some(n as f64)));
    }
    let lr = s
        .columns()
        .iter()
        .position(|c| *c == Column::Param("lr".into()))
        .expect("lr column");
    s.sort_by(lr);
    let lrs: Vec<f64> = s
        .order
        .iter()
        .map(|&i| s.trials[i].params["lr"].as_f64().expect("float"))
        .collect();
    assert!(lrs.windows(2).all(|w| w[0] <= w[1]), "{lrs:?}");
}

#[test]
fn the_state_filter_lists_only_that_state_and_cycles_back_to_all() {
    let mut s = state_with(30, 4, 4, Some(100));
    let keys = ['f', 'f', 'f', 'f'];
    let want = [
        TrialState::Running,
        TrialState::Complete,
        TrialState::Pruned,
        TrialState::Failed,
    ];
    for (k, st) in keys.iter().zip(want) {
        s.handle_key(key(*k));
        assert_eq!(s.table.filter, Filter::Only(st));
        assert!(!s.order.is_empty());
        assert!(s.order.iter().all(|&i| s.trials[i].state == st));
    }
    s.handle_key(key('f'));
    assert_eq!(s.table.filter, Filter::All);
    assert_eq!(s.order.len(), 34);
}

#[test]
fn the_selection_stays_on_its_trial_when_new_trials_arrive() {
    let mut s = fresh(Direction::Minimize, None);
    for n in 0..5 {
        s.apply(&done(n, 0, TrialState::Complete, Some(n as f64)));
    }
    s.handle_key(code(KeyCode::Down));
    s.handle_key(code(KeyCode::Down));
    let picked = s.table.selected;
    assert_eq!(picked, Some(TrialNumber(2)), "newest first: 4, 3, 2");
    s.apply(&started(5, 0));
    assert_eq!(s.table.selected, picked);
    assert_eq!(s.trials[s.order[s.table.cursor]].number, TrialNumber(2));
}

#[test]
fn moving_past_the_page_scrolls_the_table() {
    let mut s = state_with(50, 0, 2, None);
    s.set_page(5);
    for _ in 0..7 {
        s.handle_key(key('j'));
    }
    assert_eq!(s.table.cursor, 7);
    assert_eq!(s.table.offset, 3);
    s.handle_key(key('G'));
    assert_eq!(s.table.cursor, 49);
    assert_eq!(s.table.offset, 45);
    s.handle_key(key('g'));
    assert_eq!((s.table.cursor, s.table.offset), (0, 0));
}

#[test]
fn the_fixed_columns_come_first_in_the_order_sort_column_assumes() {
    let s = state_with(3, 0, 2, None);
    let c = s.columns();
    assert_eq!(
        c[..5],
        [
            Column::Number,
            Column::State,
            Column::Value,
            Column::Duration,
            Column::Step
        ]
    );
    assert_eq!(c[5], Column::Param("batch_size".into()));
}

/// Three trials complete over 10 reports each, then trial 3 runs its first four: `1/step + end`.
fn predicted_state() -> UiState {
    let mut s = fresh(Direction::Minimize, None);
    let rep = |n: u64, step: u64, v: f64| Event::TrialReported {
        number: TrialNumber(n),
        slot: 0,
        report: Report {
            step,
            metrics: BTreeMap::from([("val_loss".to_string(), v)]),
        },
    };
    for n in 0..3u64 {
        let end = 0.1 + 0.05 * n as f64;
        s.apply(&started(n, 0));
        for step in 1..=10 {
            s.apply(&rep(n, step, 1.0 / step as f64 + end));
            assert_eq!(
                s.trials[n as usize].predicted, None,
                "fewer than three curves"
            );
        }
        s.apply(&done(n, 0, TrialState::Complete, Some(0.1 + end)));
    }
    assert!(!s.columns().contains(&Column::Predicted));
    s.apply(&started(3, 1));
    for step in 1..=4 {
        s.apply(&rep(3, step, 1.0 / step as f64 + 0.15));
    }
    s
}

#[test]
fn a_running_trial_gets_its_predicted_final_value_and_band_once_three_curves_are_complete() {
    let mut s = predicted_state();
    let p = s.trials[3].predicted.expect("a prediction");
    assert!((p.value - 0.25).abs() < 0.05, "{p:?}");
    assert!(p.low <= p.value && p.value <= p.high);
    assert_eq!((p.at_step, p.from_curves), (4.0, 3));
    let cols = s.columns();
    assert_eq!(cols.last(), Some(&Column::Predicted), "before why, if any");
    let cell = view::cell_text(&Column::Predicted, &s.trials[3], &s);
    assert!(cell.contains(" [") && cell.ends_with(']'), "{cell}");
    assert_eq!(view::cell_text(&Column::Predicted, &s.trials[0], &s), "");
    // Sorting by it puts the predicted trial first, the others (none) last.
    s.sort_by(cols.len() - 1);
    assert_eq!(s.columns()[s.table.sort], Column::Predicted);
    // The column is drawn at 80×24 (the state, value and pred. columns come first) and wide.
    let head = cell.split(' ').next().unwrap().to_string();
    for (w, h) in [(80, 24), (160, 40)] {
        let text = screen(&s, w, h);
        assert!(text.contains("pred."), "{w}×{h}:\n{text}");
        assert!(text.contains(&head), "{w}×{h}:\n{text}");
    }
    // Complete, it has its value and no prediction; the column stays for the others.
    s.apply(&done(3, 1, TrialState::Complete, Some(0.25)));
    assert_eq!(s.trials[3].predicted, None);
    assert_eq!(s.references.len(), 4);
}

#[test]
fn a_pruned_trial_keeps_the_prediction_it_had_when_pruned() {
    let mut s = predicted_state();
    let before = s.trials[3].predicted.expect("a prediction");
    s.apply(&done(3, 1, TrialState::Pruned, Some(0.4)));
    assert_eq!(s.trials[3].predicted, Some(before));
    assert_eq!(s.references.len(), 3, "a pruned curve is no reference");
}

#[test]
fn the_learning_curve_chart_draws_a_running_trials_prediction_at_the_full_resource() {
    let mut s = predicted_state();
    let mark = crate::tui::view::MARK_PREDICTED;
    for (w, h) in [(80, 24), (160, 40)] {
        let text = screen(&s, w, h);
        // The mark itself (with its band) at the best curve's end; the legend where it fits.
        let legend = format!("{mark}pred.");
        let marks = text.matches(mark).count() - text.matches(&legend).count();
        assert_eq!(marks, 1, "{w}×{h}:\n{text}");
        assert_eq!(text.contains(&legend), w >= 160, "{w}×{h}:\n{text}");
    }
    // Complete, the trial has no prediction left to draw.
    s.apply(&done(3, 1, TrialState::Complete, Some(0.25)));
    let text = screen(&s, 160, 40);
    assert!(!text.contains(mark), "{text}");
}
