//! The insight screen's views drawn (insta snapshots at 80×24 and 160×48, the bad-data cases
//! among them), apart from its keys and state (`insight.rs`), to keep each file to what it holds.

use super::insight::*;
use super::*;
use crate::tui::state::InsightTab;

#[test]
fn snapshot_importance_and_slice_running_80x24() {
    let s = on(state_with(30, 4, 4, Some(100)), InsightTab::Importance);
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_importance_and_slice_finished_160x48() {
    let s = on(finished_study(), InsightTab::Importance);
    insta::assert_snapshot!(screen(&s, 160, 48));
}

#[test]
fn snapshot_slice_of_a_categorical_parameter_80x24() {
    let mut s = on(finished_study(), InsightTab::Importance);
    s.insight.param = Some("optimizer".into());
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_pair_running_80x24() {
    let s = on(state_with(30, 4, 4, Some(100)), InsightTab::Pair);
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_pair_with_a_categorical_axis_160x48() {
    let mut s = on(finished_study(), InsightTab::Pair);
    s.insight.param = Some("lr".into());
    s.insight.pair = Some("optimizer".into());
    insta::assert_snapshot!(screen(&s, 160, 48));
}

#[test]
fn snapshot_parallel_running_80x24() {
    let s = on(state_with(30, 4, 4, Some(100)), InsightTab::Parallel);
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_parallel_finished_160x48() {
    let s = on(finished_study(), InsightTab::Parallel);
    insta::assert_snapshot!(screen(&s, 160, 48));
}

#[test]
fn snapshot_timeline_running_with_gpus_80x24() {
    let s = on(running_with_gpu(), InsightTab::Timeline);
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_timeline_running_with_gpus_160x48() {
    let s = on(running_with_gpu(), InsightTab::Timeline);
    insta::assert_snapshot!(screen(&s, 160, 48));
}

#[test]
fn a_timeline_with_more_slots_than_rows_says_how_many_it_left_out() {
    let s = on(state_with(60, 24, 24, None), InsightTab::Timeline);
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("(7 more slots on a taller terminal)"),
        "{text}"
    );
    assert!(text.contains("16 cpu"), "{text}");
    assert!(!text.contains("17 cpu"), "{text}");
}

#[test]
fn snapshot_timeline_finished_without_telemetry_80x24() {
    let s = on(finished_study(), InsightTab::Timeline);
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_two_objectives_second_picked_80x24() {
    let mut s = on(two_objectives(), InsightTab::Importance);
    s.handle_key(key('o'));
    insta::assert_snapshot!(all_tabs(&mut s, 80, 24));
}

#[test]
fn snapshot_insight_help_80x24() {
    let mut s = on(state_with(30, 4, 4, Some(100)), InsightTab::Importance);
    s.handle_key(key('?'));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

// ----- bad data: an honest empty view, never a panic ------------------------------------------

#[test]
fn snapshot_no_trials_80x24() {
    let mut s = fresh(Direction::Minimize, Some(10));
    let text = all_tabs(&mut s, 80, 24);
    assert!(text.contains("needs 2 complete trials"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn snapshot_only_failed_trials_80x24() {
    let mut s = study_of(Some(fixtures::space()), 6, params, |k| {
        // Half reported a value before failing; half did not.
        (TrialState::Failed, None, if k % 2 == 0 { 2 } else { 0 })
    });
    let text = all_tabs(&mut s, 80, 24);
    assert!(text.contains("needs 2 complete trials"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn snapshot_one_parameter_80x24() {
    let mut s = study_of(
        Some(one_param_space()),
        12,
        |k| only("lr", params(k)),
        |k| (TrialState::Complete, Some(fixtures::val_loss(k, 10)), 0),
    );
    let text = all_tabs(&mut s, 80, 24);
    assert!(text.contains("this space has one"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn snapshot_categorical_only_space_80x24() {
    let mut s = study_of(Some(categorical_space()), 16, categorical_params, |k| {
        let v = 0.2 + 0.1 * (k % 3) as f64 + 0.05 * (k % 2) as f64;
        if k % 7 == 6 {
            (TrialState::Pruned, Some(v + 0.3), 3)
        } else {
            (TrialState::Complete, Some(v), 0)
        }
    });
    insta::assert_snapshot!(all_tabs(&mut s, 80, 24));
}

#[test]
fn snapshot_nan_values_80x24() {
    let mut s = study_of(Some(fixtures::space()), 12, params, |k| {
        let v = if k % 3 == 0 {
            f64::NAN
        } else {
            fixtures::val_loss(k, 10)
        };
        (TrialState::Complete, Some(v), 0)
    });
    let text = all_tabs(&mut s, 80, 24);
    // NaN trials leave the importance (8 of 12 count) and sit on the slice's bad edge.
    assert!(text.contains("8 trials"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn without_a_declared_space_the_views_infer_one_from_the_trials() {
    let mut s = study_of(None, 12, params, |k| {
        (TrialState::Complete, Some(fixtures::val_loss(k, 10)), 0)
    });
    let text = all_tabs(&mut s, 160, 48);
    let space = s.insight_space().expect("inferred from the trials");
    assert_eq!(space.len(), 4);
    assert!(space.get("optimizer").is_some_and(|p| p.is_categorical()));
    assert!(text.contains("Importance"), "{text}");
}

#[test]
fn without_colour_no_insight_view_has_a_coloured_cell() {
    let mut s = on(running_with_gpu(), InsightTab::Importance);
    for tab in InsightTab::ALL {
        s.insight.tab = tab;
        s.color = false;
        let coloured = terminal(&s, 160, 48)
            .backend()
            .buffer()
            .content()
            .iter()
            .filter(|c| c.fg != Color::Reset || c.bg != Color::Reset)
            .count();
        assert_eq!(coloured, 0, "{tab:?}");
        s.color = true;
        let t = terminal(&s, 160, 48);
        assert!(
            t.backend()
                .buffer()
                .content()
                .iter()
                .any(|c| c.fg != Color::Reset),
            "{tab:?}"
        );
    }
}

#[test]
fn every_insight_view_draws_at_tiny_sizes_without_panicking() {
    let mut cases = vec![
        running_with_gpu(),
        finished_study(),
        two_objectives(),
        UiState::new(Mode::Live, false, t0()),
    ];
    for s in &mut cases {
        for (w, h) in [(1, 1), (10, 5), (20, 8), (40, 12), (300, 100)] {
            all_tabs(s, w, h);
            s.handle_key(key('?'));
            screen(s, w, h);
            s.handle_key(key('?'));
        }
    }
}
