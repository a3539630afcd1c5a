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
