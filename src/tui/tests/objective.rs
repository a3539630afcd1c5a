//! The objective chart's range: outliers off the scale, an axis that stays above zero, and the
//! log scale.

use super::*;

/// Eleven losses between 0.1 and 0.5 and one that diverged to 250.
fn outlier_state() -> UiState {
    let mut s = fresh(Direction::Minimize, Some(20));
    for n in 0..12 {
        let v = if n == 7 {
            250.0
        } else {
            0.1 + 0.4 * ((n * 5) % 11) as f64 / 10.0
        };
        s.apply(&done(n, 0, TrialState::Complete, Some(v)));
    }
    s.apply(&done(12, 0, TrialState::Pruned, Some(90.0)));
    s
}

/// The objective chart's y labels, top to bottom (the text left of its axis).
fn objective_labels(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.contains("Objective"))
        .skip(1)
        .take_while(|l| l.contains('│'))
        .filter_map(|l| {
            let label = l.trim_start_matches('"').split('│').next()?.trim();
            (!label.is_empty()).then(|| label.to_string())
        })
        .collect()
}

#[test]
fn one_outlier_neither_squashes_the_objective_chart_nor_takes_its_axis_below_zero() {
    let s = outlier_state();
    for (w, h) in [(80, 24), (160, 48)] {
        let text = screen(&s, w, h);
        let labels = objective_labels(&text);
        let values: Vec<f64> = labels.iter().filter_map(|l| l.parse().ok()).collect();
        assert_eq!(values.len(), 3, "{labels:?}\n{text}");
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)), "{labels:?}");
        // The two beyond the range sit on its edge, marked.
        assert!(text.contains('↑'), "{text}");
    }
    assert!(screen(&s, 160, 48).contains("↑2 off-scale"));
}

#[test]
fn a_few_positive_values_never_get_a_negative_axis() {
    let mut s = fresh(Direction::Minimize, None);
    for (n, v) in [(0, 0.001), (1, 0.02), (2, 5.0)] {
        s.apply(&done(n, 0, TrialState::Complete, Some(v)));
    }
    let labels = objective_labels(&screen(&s, 80, 24));
    assert_eq!(
        labels.first().map(String::as_str),
        Some("5.25"),
        "{labels:?}"
    );
    assert_eq!(labels.last().map(String::as_str), Some("0"), "{labels:?}");
}

/// Losses over four decades.
fn log_state() -> UiState {
    let mut s = fresh(Direction::Minimize, Some(40));
    for n in 0..30u64 {
        let v = 10f64.powf(-3.0 + 4.0 * ((n * 7) % 30) as f64 / 29.0);
        s.apply(&done(n, 0, TrialState::Complete, Some(v)));
    }
    s
}

#[test]
fn l_toggles_a_log_scale_that_the_chart_title_and_the_footer_name() {
    let mut s = log_state();
    assert!(!s.log_scale);
    assert_eq!(s.handle_key(key('l')), None);
    assert!(s.log_scale);
    assert_eq!(s.notice.as_deref(), Some("objective chart: log scale"));
    let text = screen(&s, 80, 24);
    assert!(text.contains(" Objective log "), "{text}");
    assert!(text.contains(" l linear "), "{text}");
    let labels = objective_labels(&text);
    // Decades apart: the labels say values, not their logarithms.
    assert_eq!(
        labels.first().map(String::as_str),
        Some("15.8"),
        "{labels:?}"
    );
    assert_eq!(
        labels.last().map(String::as_str),
        Some("6.31e-4"),
        "{labels:?}"
    );
    s.handle_key(key('l'));
    assert!(!s.log_scale);
    assert!(screen(&s, 80, 24).contains(" l log "));

    // A value at or below zero has no place on a log axis: the chart stays linear and says so.
    let mut s = fresh(Direction::Maximize, None);
    for (n, v) in [(0, -1.0), (1, 2.0)] {
        s.apply(&done(n, 0, TrialState::Complete, Some(v)));
    }
    s.handle_key(key('l'));
    assert!(s.notice.as_deref().is_some_and(|n| n.contains("positive")));
    assert!(screen(&s, 80, 24).contains("log: a value ≤ 0"));
}

#[test]
fn snapshot_objective_with_outliers_80x24() {
    insta::assert_snapshot!(screen(&outlier_state(), 80, 24));
}

#[test]
fn snapshot_objective_with_outliers_160x48() {
    insta::assert_snapshot!(screen(&outlier_state(), 160, 48));
}

#[test]
fn snapshot_objective_on_a_log_scale_80x24() {
    let mut s = log_state();
    s.handle_key(key('l'));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_objective_on_a_log_scale_160x48() {
    let mut s = log_state();
    s.handle_key(key('l'));
    insta::assert_snapshot!(screen(&s, 160, 48));
}
