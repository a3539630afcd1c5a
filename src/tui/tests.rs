//! Tests of the UI: state updates from events and keys, and snapshots of the screen.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::Color;

use super::fixtures::{self, infallible, info, params, report, state_with, t0};
use super::state::{Action, Column, Filter, Mode, Overlay, Screen, UiState};
use super::view;
use crate::scheduler::{Control, Event};
use crate::trial::{
    Direction, Placement, Ran, Report, Trial, TrialNumber, TrialState, TrialStatus,
};

fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

fn code(k: KeyCode) -> KeyEvent {
    KeyEvent::new(k, KeyModifiers::NONE)
}

fn terminal(state: &UiState, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut t = infallible(Terminal::new(TestBackend::new(w, h)));
    infallible(t.draw(|f| view::render(f, state)));
    t
}

fn screen(state: &UiState, w: u16, h: u16) -> String {
    terminal(state, w, h).backend().to_string()
}

fn finished(state: &mut UiState, reason: &str) {
    let at = state.now;
    state.apply(&Event::StudyFinished {
        reason: reason.into(),
        best: None,
        at,
    });
}

/// Trial `n` finished in `state` with `value`, after 10 s.
fn summary(n: u64, state: TrialState, value: Option<f64>) -> Trial {
    failed_with(n, state, value, "exited with status 1")
}

fn failed_with(n: u64, state: TrialState, value: Option<f64>, reason: &str) -> Trial {
    let ran = Ran::span(Placement::default(), t0(), Duration::from_secs(10));
    let status = TrialStatus::ended(state, value, reason, ran);
    Trial::unstored(TrialNumber(n), params(n), status)
}

fn started(n: u64, slot: usize) -> Event {
    Event::TrialStarted {
        number: TrialNumber(n),
        slot,
        device: "cpu".into(),
        params: params(n),
        at: t0(),
    }
}

fn done(n: u64, slot: usize, state: TrialState, value: Option<f64>) -> Event {
    Event::TrialFinished {
        slot,
        trial: summary(n, state, value),
        at: t0() + Duration::from_secs(10),
        study_best: None,
    }
}

fn fresh(direction: Direction, budget: Option<u64>) -> UiState {
    let mut s = UiState::new(Mode::Live, false, t0());
    let mut i = info(budget, 2);
    i.direction = direction;
    s.apply(&Event::StudyStarted {
        info: i,
        existing: Vec::new(),
        at: t0(),
    });
    s
}

// ----- state from events ------------------------------------------------------------------

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

// ----- the table ----------------------------------------------------------------------------

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

// ----- keys ---------------------------------------------------------------------------------

#[test]
fn p_pauses_then_resumes_and_the_event_confirms() {
    let mut s = fresh(Direction::Minimize, None);
    assert_eq!(
        s.handle_key(key('p')),
        Some(Action::Control(Control::Pause))
    );
    assert_eq!(s.pause_pending, Some(true));
    s.apply(&Event::Paused(true));
    assert_eq!((s.paused, s.pause_pending), (true, None));
    assert_eq!(
        s.handle_key(key('p')),
        Some(Action::Control(Control::Resume))
    );
}

#[test]
fn stopping_a_running_trial_asks_pruned_or_failed() {
    for (answer, as_pruned) in [('p', true), ('f', false)] {
        let mut s = state_with(10, 2, 2, None);
        s.handle_key(key('f')); // running only
        let n = s.table.selected.expect("a running trial is selected");
        assert_eq!(s.handle_key(key('x')), None);
        assert_eq!(s.overlay, Some(Overlay::StopTrial(n)));
        assert_eq!(
            s.handle_key(key(answer)),
            Some(Action::Control(Control::StopTrial {
                number: n,
                as_pruned
            }))
        );
        assert_eq!(s.overlay, None);
    }
}

#[test]
fn a_finished_trial_cannot_be_stopped() {
    let mut s = state_with(10, 0, 2, None);
    assert_eq!(s.handle_key(key('x')), None);
    assert_eq!(s.overlay, None);
    assert!(
        s.notice
            .as_deref()
            .is_some_and(|n| n.contains("not running"))
    );
}

#[test]
fn quit_offers_stopping_now_or_letting_trials_finish() {
    let mut s = state_with(10, 2, 2, None);
    assert_eq!(s.handle_key(key('q')), None);
    assert_eq!(s.overlay, Some(Overlay::Quit));
    assert_eq!(s.handle_key(code(KeyCode::Esc)), None);
    assert_eq!(s.overlay, None);
    s.handle_key(key('q'));
    assert_eq!(
        s.handle_key(key('w')),
        Some(Action::Control(Control::Quit { graceful: true }))
    );
    assert!(
        !s.should_exit(),
        "the UI stays until the study has finished"
    );
    finished(&mut s, "stopped by the user");
    assert!(s.should_exit());

    let mut s = state_with(10, 2, 2, None);
    s.handle_key(key('q'));
    assert_eq!(
        s.handle_key(key('s')),
        Some(Action::Control(Control::Quit { graceful: false }))
    );
}

#[test]
fn ctrl_c_twice_stops_the_study() {
    let mut s = state_with(10, 2, 2, None);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(s.handle_key(ctrl_c), None);
    assert_eq!(
        s.handle_key(ctrl_c),
        Some(Action::Control(Control::Quit { graceful: false }))
    );
}

#[test]
fn q_leaves_at_once_when_the_study_has_finished() {
    let mut s = state_with(10, 0, 2, None);
    finished(&mut s, "budget spent");
    assert_eq!(s.handle_key(key('q')), Some(Action::Exit));
}

#[test]
fn watch_mode_never_steers_and_q_leaves() {
    let (events, now) = fixtures::study_events(10, 2, 2, None);
    let mut s = UiState::new(Mode::Watch, false, now);
    events.iter().for_each(|e| s.apply(e));
    assert_eq!(s.handle_key(key('p')), None);
    s.handle_key(key('f'));
    assert_eq!(s.handle_key(key('x')), None);
    assert_eq!(s.overlay, None);
    assert_eq!(s.handle_key(key('q')), Some(Action::Exit));
}

#[test]
fn enter_opens_the_selected_trial_and_esc_goes_back() {
    let mut s = state_with(10, 0, 2, None);
    s.handle_key(code(KeyCode::Enter));
    assert_eq!(s.screen, Screen::Trial(TrialNumber(9)));
    s.handle_key(code(KeyCode::Down));
    assert_eq!(s.screen, Screen::Trial(TrialNumber(8)));
    s.handle_key(code(KeyCode::Esc));
    assert_eq!(s.screen, Screen::Main);
}

#[test]
fn help_opens_with_question_mark_and_any_key_closes_it() {
    let mut s = state_with(3, 0, 2, None);
    s.handle_key(key('?'));
    assert_eq!(s.overlay, Some(Overlay::Help));
    assert_eq!(s.handle_key(key('q')), None, "q closes help, does not quit");
    assert_eq!(s.overlay, None);
}

#[test]
fn no_color_set_to_anything_but_empty_turns_colours_off() {
    use std::ffi::OsStr;
    assert!(super::color_allowed_by(None));
    assert!(super::color_allowed_by(Some(OsStr::new(""))));
    assert!(!super::color_allowed_by(Some(OsStr::new("1"))));
}

// ----- the screen ---------------------------------------------------------------------------

#[test]
fn without_colour_no_cell_has_a_colour() {
    let s = state_with(30, 4, 4, Some(100));
    let t = terminal(&s, 160, 48);
    let coloured = t
        .backend()
        .buffer()
        .content()
        .iter()
        .filter(|c| c.fg != Color::Reset || c.bg != Color::Reset)
        .count();
    assert_eq!(coloured, 0);
    let mut s = s;
    s.color = true;
    let t = terminal(&s, 160, 48);
    assert!(
        t.backend()
            .buffer()
            .content()
            .iter()
            .any(|c| c.fg != Color::Reset)
    );
}

#[test]
fn every_screen_draws_at_tiny_sizes_without_panicking() {
    let mut s = state_with(30, 4, 4, Some(100));
    for (w, h) in [(1, 1), (10, 5), (40, 12), (80, 24), (300, 100)] {
        screen(&s, w, h);
        s.handle_key(code(KeyCode::Enter));
        screen(&s, w, h);
        s.handle_key(code(KeyCode::Esc));
        s.handle_key(key('?'));
        screen(&s, w, h);
        s.handle_key(key('?'));
    }
}

#[test]
fn snapshot_waiting_for_the_study_80x24() {
    let s = UiState::new(Mode::Live, false, t0());
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_running_with_failures_80x24() {
    let s = state_with(30, 4, 4, Some(100));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_running_with_failures_160x48() {
    let s = state_with(30, 4, 4, Some(100));
    insta::assert_snapshot!(screen(&s, 160, 48));
}

#[test]
fn snapshot_finished_80x24() {
    let mut s = state_with(100, 0, 4, Some(100));
    finished(&mut s, "budget spent");
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_finished_sorted_by_value_160x48() {
    let mut s = state_with(100, 0, 4, Some(100));
    finished(&mut s, "budget spent");
    s.handle_key(key('3'));
    insta::assert_snapshot!(screen(&s, 160, 48));
}

#[test]
fn snapshot_failed_trial_opened_80x24() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.handle_key(key('f'));
    s.handle_key(key('f'));
    s.handle_key(key('f'));
    s.handle_key(key('f')); // failed
    s.handle_key(code(KeyCode::Enter));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_pruned_trial_opened_80x24() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.handle_key(key('f'));
    s.handle_key(key('f'));
    s.handle_key(key('f')); // pruned
    s.handle_key(code(KeyCode::Enter));
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("pruned  at epoch 3 (rung 1: 3rd of 4 trials there, below the top 1/3)"),
        "{text}"
    );
    insta::assert_snapshot!(text);
}

#[test]
fn a_pruned_trials_reason_is_its_why_in_the_table() {
    let s = state_with(30, 4, 4, Some(100));
    let text = screen(&s, 160, 48);
    let row = text
        .lines()
        .find(|l| l.contains(" 28 + pruned"))
        .expect("trial 28's row");
    assert!(
        row.contains("at epoch 3 (rung 1: 3rd of 4 trials there, below the top 1/3)"),
        "{row}"
    );
}

#[test]
fn snapshot_running_trial_opened_160x48() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.handle_key(key('f')); // running
    s.handle_key(code(KeyCode::Enter));
    insta::assert_snapshot!(screen(&s, 160, 48));
}

#[test]
fn snapshot_paused_with_stop_dialog_80x24() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.apply(&Event::Paused(true));
    s.handle_key(key('f'));
    s.handle_key(key('x'));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_help_80x24() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.handle_key(key('?'));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_quit_dialog_80x24() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.handle_key(key('q'));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_watch_with_eight_slots_80x24() {
    let (events, now) = fixtures::study_events(60, 8, 8, Some(200));
    let mut s = UiState::new(Mode::Watch, false, now);
    events.iter().for_each(|e| s.apply(e));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn the_summary_line_names_the_counts_and_the_best_trial() {
    let mut s = state_with(10, 0, 2, None);
    finished(&mut s, "the trial budget is spent");
    let line = super::summary_line(&s);
    assert!(
        line.starts_with("mnist-mlp: 10 trials (8 complete, 2 pruned, 0 failed, 0 running); best trial 1 val_loss=0.11296 (batch_size=64"),
        "{line}"
    );
    assert!(
        line.ends_with("; finished: the trial budget is spent"),
        "{line}"
    );
}

#[test]
fn the_summary_line_names_the_best_of_the_study_when_another_process_found_it() {
    let mut s = state_with(10, 0, 2, None);
    let at = s.now;
    s.apply(&Event::StudyFinished {
        reason: "the trial budget is spent".into(),
        best: Some((42, 0.05)),
        at,
    });
    let line = super::summary_line(&s);
    assert!(
        line.contains("; best of the study: trial 42 val_loss=0.05"),
        "{line}"
    );
}

#[test]
fn a_long_traceback_keeps_its_first_and_last_lines_and_the_log_paths_on_screen() {
    let mut s = fresh(Direction::Minimize, None);
    let mut err = vec!["exited with status 1".to_string()];
    err.extend((0..30).map(|i| format!("  frame {i}")));
    err.push("FileNotFoundError: digits.csv.gz".into());
    let mut t = failed_with(0, TrialState::Failed, None, &err.join("\n"));
    t.logs = vec!["/runs/0/stderr.log".into()];
    s.apply(&Event::TrialFinished {
        slot: 0,
        trial: t,
        at: t0(),
        study_best: None,
    });
    s.handle_key(code(KeyCode::Enter));
    let text = screen(&s, 80, 24);
    for want in [
        "exited with status 1",
        "… 25 more lines …",
        "FileNotFoundError: digits.csv.gz",
        "/runs/0/stderr.log",
    ] {
        assert!(text.contains(want), "{want:?} missing from\n{text}");
    }
}

#[test]
fn a_trial_on_an_unknown_slot_is_listed_but_on_no_slot() {
    let mut s = fresh(Direction::Minimize, None);
    for slot in [super::state::NO_SLOT, 2, 99] {
        s.apply(&Event::TrialStarted {
            number: TrialNumber(slot as u64 % 1000),
            slot,
            device: "cuda:7".into(),
            params: params(0),
            at: t0(),
        });
    }
    assert_eq!(s.slots.len(), 2, "the study's two slots, no more");
    assert!(s.slots.iter().all(|sl| sl.trial.is_none()));
    assert_eq!(s.counts.running, 3);
    assert!(s.trials.iter().all(|t| t.slot.is_none()));
    screen(&s, 80, 24);
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

fn gpu_sampled(n: u64, slot: usize, sm: f64, mem_mb: f64) -> Event {
    Event::GpuSampled {
        number: TrialNumber(n),
        slot,
        usage: crate::telemetry::GpuUsage::first(crate::telemetry::GpuSample::device(
            sm, 0.0, mem_mb,
        )),
    }
}

#[test]
fn the_worker_rows_show_each_slots_gpu_only_where_it_was_sampled() {
    let mut s = fresh(Direction::Minimize, Some(10));
    s.apply(&started(0, 0));
    s.apply(&started(1, 1));
    let before = screen(&s, 160, 48);
    assert!(
        !before.contains("gpu sm mem"),
        "no telemetry, no column:\n{before}"
    );
    s.apply(&gpu_sampled(0, 0, 33.0, 2150.0));
    let after = screen(&s, 160, 48);
    assert!(after.contains("gpu sm mem"), "{after}");
    assert!(after.contains(" 33% 2.1G"), "{after}");
    // Slot 1's trial was never sampled: a dash, not a zero.
    let row1 = after
        .lines()
        .find(|l| l.contains("#1 "))
        .expect("slot 1's row");
    assert!(!row1.contains('%'), "{row1}");
}

#[test]
fn the_trial_screen_shows_the_mean_utilisation_and_peak_memory_of_its_gpu() {
    let mut s = fresh(Direction::Minimize, Some(10));
    s.apply(&started(0, 0));
    s.apply(&gpu_sampled(0, 0, 20.0, 1000.0));
    let mut u =
        crate::telemetry::GpuUsage::first(crate::telemetry::GpuSample::device(20.0, 0.0, 1000.0));
    u.add(crate::telemetry::GpuSample::device(40.0, 0.0, 3000.0));
    s.apply(&Event::GpuSampled {
        number: TrialNumber(0),
        slot: 0,
        usage: u,
    });
    s.handle_key(code(KeyCode::Enter));
    let text = screen(&s, 160, 48);
    assert!(
        text.contains("GPU 30% SM, peak 2.9 GB; now 40% SM, 2.9 GB (2 samples)"),
        "{text}"
    );
}

// ----- epochs, the objective's range, the budget, params that do not fit -------------------

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

fn long_params(n: u64) -> crate::space::Params {
    use crate::space::ParamValue;
    let mut p = params(n);
    p.insert(
        "learning_rate_warmup".into(),
        ParamValue::Int(500 + n as i64),
    );
    p.insert("label_smoothing".into(), ParamValue::Float(0.05));
    p.insert("weight_decay".into(), ParamValue::Float(3.2e-4));
    p
}

/// A study whose trials have seven params with long names.
fn long_params_state() -> UiState {
    let mut s = fresh(Direction::Minimize, Some(10));
    for n in 0..4 {
        let mut t = summary(n, TrialState::Complete, Some(0.5 - 0.1 * n as f64));
        t.params = long_params(n);
        s.apply(&Event::TrialFinished {
            slot: 0,
            trial: t,
            at: t0(),
            study_best: None,
        });
    }
    s.apply(&Event::TrialStarted {
        number: TrialNumber(4),
        slot: 1,
        device: "cpu".into(),
        params: long_params(4),
        at: t0(),
    });
    s
}

#[test]
fn the_best_trials_params_are_never_cut_mid_word() {
    let s = long_params_state();
    let best = s.best_trial().expect("a best trial");
    let items: Vec<String> = best.params.keys().cloned().collect();
    for w in 80..=200 {
        let text = screen(&s, w, 24);
        let line = text.lines().nth(2).expect("the header's third line");
        let after = line
            .split("0.20000")
            .nth(1)
            .unwrap_or_else(|| panic!("no best value at {w}: {line}"));
        for token in after
            .trim_matches(|c| c == '"' || c == ' ')
            .split_whitespace()
        {
            let whole = token
                .split_once('=')
                .is_some_and(|(k, v)| items.iter().any(|i| i == k) && !v.is_empty());
            let more = token.starts_with('+') && token[1..].parse::<u32>().is_ok();
            assert!(
                whole || more || token == "more",
                "{token:?} is a cut item at width {w}: {line}"
            );
        }
    }
    // The worker rows keep whole items too.
    let text = screen(&s, 80, 24);
    let row = text
        .lines()
        .find(|l| l.contains("#4 "))
        .expect("slot 1's row");
    assert!(row.contains("batch_size=128 +6"), "{row}");
}

#[test]
fn snapshot_builtin_trials_by_epoch_80x24() {
    insta::assert_snapshot!(screen(&builtin_state(), 80, 24));
}

#[test]
fn snapshot_builtin_trials_by_epoch_160x48() {
    insta::assert_snapshot!(screen(&builtin_state(), 160, 48));
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

#[test]
fn snapshot_long_params_80x24() {
    insta::assert_snapshot!(screen(&long_params_state(), 80, 24));
}

#[test]
fn snapshot_long_params_120x30() {
    insta::assert_snapshot!(screen(&long_params_state(), 120, 30));
}

// ----- multi-objective studies ----------------------------------------------------------------

/// A study with objectives val_loss (min) and `others`, whose complete trials are `values`.
fn multi(others: &[(&str, Direction)], values: &[Vec<f64>]) -> UiState {
    let mut s = UiState::new(Mode::Live, false, t0());
    let mut i = info(Some(20), 2);
    i.others = others
        .iter()
        .map(|(m, d)| crate::trial::Objective {
            metric: m.to_string(),
            direction: *d,
        })
        .collect();
    let ran = Ran::span(Placement::default(), t0(), Duration::from_secs(10));
    let existing = values
        .iter()
        .enumerate()
        .map(|(n, v)| {
            Trial::unstored(
                TrialNumber(n as u64),
                params(n as u64),
                TrialStatus::Complete {
                    value: v[0],
                    others: v[1..].to_vec(),
                    ran: ran.clone(),
                },
            )
        })
        .collect();
    s.apply(&Event::StudyStarted {
        info: i,
        existing,
        at: t0(),
    });
    s
}

#[test]
fn a_two_objective_study_draws_its_trials_with_the_pareto_front() {
    // val_loss down, samples_per_s up: trials 0, 1 and 3 trade off; 2 is beaten by 1, 4 by 3.
    let s = multi(
        &[("samples_per_s", Direction::Maximize)],
        &[
            vec![0.10, 100.0],
            vec![0.20, 900.0],
            vec![0.30, 800.0],
            vec![0.50, 2000.0],
            vec![0.60, 1500.0],
        ],
    );
    let front: Vec<u64> = s.pareto_front().iter().map(|t| t.number.0).collect();
    assert_eq!(front, [0, 1, 3]);
    let text = screen(&s, 120, 34);
    assert!(text.contains("Pareto front 3 of 5"), "{text}");
    assert!(
        text.contains("val_loss ↓ min × samples_per_s ↑ max"),
        "{text}"
    );
    assert!(text.contains("samples_per_s ↑ max"), "{text}");
    // Three front marks are drawn, besides the legend's.
    let marks = |c: char| text.chars().filter(|x| *x == c).count();
    assert_eq!(marks('●'), 3 + 1, "{text}");
    // A discarded trial leaves the front.
    let mut s = s;
    let ran = Ran::span(Placement::default(), t0(), Duration::from_secs(10));
    let mut gone = Trial::unstored(
        TrialNumber(3),
        params(3),
        TrialStatus::Complete {
            value: 0.5,
            others: vec![2000.0],
            ran,
        },
    );
    gone.discarded = true;
    s.apply(&Event::TrialFinished {
        slot: 0,
        trial: gone,
        at: t0(),
        study_best: None,
    });
    let front: Vec<u64> = s.pareto_front().iter().map(|t| t.number.0).collect();
    assert_eq!(front, [0, 1, 4]);
}

#[test]
fn a_study_with_three_objectives_lists_its_pareto_front_in_a_table() {
    let s = multi(
        &[
            ("samples_per_s", Direction::Maximize),
            ("gpu_mem", Direction::Minimize),
        ],
        &[
            vec![0.10, 100.0, 8.0],
            vec![0.20, 900.0, 9.0],
            vec![0.30, 800.0, 9.5],
            vec![0.50, 50.0, 1.0],
        ],
    );
    let text = screen(&s, 120, 34);
    assert!(text.contains("Pareto front 3 trial(s)"), "{text}");
    assert!(text.contains("gpu_mem ↓"), "{text}");
    // Trial 2 is beaten by 1 on every objective: not listed. The rows follow val_loss.
    let listed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start_matches('"').split_whitespace().next())
        .skip_while(|w| *w != "#")
        .skip(1)
        .take_while(|w| w.parse::<u64>().is_ok())
        .collect();
    assert_eq!(listed, ["0", "1", "3"], "{text}");
}

// ----- the trials table keeps every token whole ---------------------------------------------

/// Params of every awkward shape: tiny and huge floats, negatives, a long categorical string,
/// a long int, a bool, and more of them than any screen has columns for.
fn awkward_params(n: u64) -> crate::space::Params {
    use crate::space::ParamValue;
    let k = n as f64;
    let mut p = crate::space::Params::new();
    p.insert("lr".into(), ParamValue::Float(1.99e-4 * (1.0 + k)));
    p.insert(
        "weight_decay".into(),
        ParamValue::Float(-5.44e-7 * (1.0 + k)),
    );
    p.insert("scale".into(), ParamValue::Float(-3.2e12 * (1.0 + k)));
    p.insert("eps".into(), ParamValue::Float(2.5e-300));
    p.insert(
        "seed_offset".into(),
        ParamValue::Int(-1_234_567_890_123 - n as i64),
    );
    p.insert(
        "optimizer".into(),
        ParamValue::Str(
            ["adamw_with_decoupled_weight_decay_and_amsgrad", "sgd"][n as usize % 2].into(),
        ),
    );
    p.insert("activation".into(), ParamValue::Str("leaky_relu".into()));
    p.insert("batch_size".into(), ParamValue::Int(4096));
    p.insert(
        "use_batch_norm".into(),
        ParamValue::Bool(n.is_multiple_of(2)),
    );
    p.insert("momentum".into(), ParamValue::Float(0.9));
    p.insert("label_smoothing_factor".into(), ParamValue::Float(0.05 * k));
    p
}

/// A study of complete, pruned and failed trials with values from tiny to huge, negative and
/// NaN, and two running ones that have reported (their value in parentheses).
fn awkward_state() -> UiState {
    let values = [
        1.99e-4,
        -5.44e-7,
        3.2e12,
        -0.123456,
        1e-300,
        12345.678,
        -98765432.1,
        f64::NAN,
    ];
    let mut s = fresh(Direction::Minimize, Some(40));
    for (n, v) in values.iter().enumerate() {
        let n = n as u64;
        let state = [TrialState::Complete, TrialState::Pruned, TrialState::Failed][n as usize % 3];
        let mut t = failed_with(
            n,
            state,
            Some(*v),
            "exited with status 1: RuntimeError: CUDA out of memory while allocating 2.00 GiB",
        );
        t.params = awkward_params(n);
        s.apply(&Event::TrialFinished {
            slot: 0,
            trial: t,
            at: t0(),
            study_best: None,
        });
    }
    for (k, v) in [0.13456789, -7.77e-9].iter().enumerate() {
        let n = values.len() as u64 + k as u64;
        s.apply(&Event::TrialStarted {
            number: TrialNumber(n),
            slot: k,
            device: "cpu".into(),
            params: awkward_params(n),
            at: t0(),
        });
        let mut m = BTreeMap::new();
        m.insert("val_loss".into(), *v);
        s.apply(&Event::TrialReported {
            number: TrialNumber(n),
            slot: k,
            report: Report {
                step: 3,
                metrics: m,
            },
        });
    }
    s
}

/// The tokens of the trials table on a `w`×`h` screen that are not whole: every token of a row
/// must be a whole token of some cell of the state (a number, a state word, a param's value) or
/// of a column title; only prose and titles may be shortened, and then only with `…`.
fn cut_tokens(s: &UiState, w: u16, h: u16) -> Vec<String> {
    let cols = s.columns();
    let mut whole: BTreeSet<String> = BTreeSet::new();
    let mut prose: BTreeSet<String> = BTreeSet::new();
    for t in &s.trials {
        for c in &cols {
            let text = view::cell_text(c, t, s);
            let into = if matches!(c, Column::Why) {
                &mut prose
            } else {
                &mut whole
            };
            into.extend(text.split_whitespace().map(str::to_string));
        }
    }
    for c in &cols {
        prose.insert(c.title().to_string());
        whole.insert(c.title().to_string());
    }
    let text = screen(s, w, h);
    let lines: Vec<&str> = text.lines().map(|l| l.trim_matches('"')).collect();
    let top = lines
        .iter()
        .position(|l| l.starts_with(" Trials "))
        .expect("the trials table's title");
    let mut bad = Vec::new();
    for line in &lines[top + 1..lines.len() - 1] {
        for token in line.split_whitespace() {
            let token = token.trim_start_matches('▸');
            let token = token.trim_end_matches(['▲', '▼']);
            if token.is_empty() || whole.contains(token) || prose.contains(token) {
                continue;
            }
            let shortened = token
                .strip_suffix('…')
                .is_some_and(|stem| !stem.is_empty() && prose.iter().any(|p| p.starts_with(stem)));
            if !shortened {
                bad.push(format!("{token:?} at {w}x{h}: {line}"));
            }
        }
    }
    bad
}

#[test]
fn the_trials_table_never_cuts_a_number_or_a_state_word_at_any_width() {
    let mut s = awkward_state();
    for sort in [0, 2, 5, 8] {
        s.table.sort = sort;
        for w in (40..=200).step_by(4).chain([60, 80, 100, 120]) {
            for h in [24, 40] {
                let bad = cut_tokens(&s, w, h);
                assert!(bad.is_empty(), "cut tokens:\n{}", bad.join("\n"));
            }
        }
    }
}

#[test]
fn the_trials_table_of_the_long_params_study_never_cuts_a_token() {
    let s = long_params_state();
    for w in [60, 80, 100, 120] {
        let bad = cut_tokens(&s, w, 24);
        assert!(bad.is_empty(), "cut tokens:\n{}", bad.join("\n"));
    }
}

#[test]
fn the_trials_table_leaves_whole_columns_out_and_says_so() {
    let s = awkward_state();
    let narrow = screen(&s, 80, 24);
    assert!(narrow.contains("columns left out"), "{narrow}");
    // The number, the state and the value always stay; the sorted-by param stays too.
    let mut sorted = s.clone();
    let lr = sorted
        .columns()
        .iter()
        .position(|c| matches!(c, Column::Param(p) if p == "scale"))
        .expect("a scale column");
    sorted.table.sort = lr;
    let text = screen(&sorted, 80, 24);
    let header = text
        .lines()
        .find(|l| l.contains(" # ") || l.contains(" #▲") || l.contains(" #▼"))
        .unwrap_or_default();
    assert!(header.contains("scale"), "{text}");
    for word in ["state", "value"] {
        assert!(header.contains(word), "{header}");
    }
}

#[test]
fn snapshot_awkward_values_80x24() {
    insta::assert_snapshot!(screen(&awkward_state(), 80, 24));
}

#[test]
fn snapshot_awkward_values_120x30() {
    insta::assert_snapshot!(screen(&awkward_state(), 120, 30));
}

// ----- the sampler still exploring ------------------------------------------------------------

/// A study whose sampler's initial design is `startup` trials, with `complete` complete trials
/// then `pruned` pruned ones.
fn exploring_state(startup: usize, complete: u64, pruned: u64) -> UiState {
    let mut s = UiState::new(Mode::Live, false, t0());
    let mut i = info(Some(20), 2);
    i.sampler = "gp".into();
    i.exploration = Some(crate::sampler::Exploration::new(startup));
    s.apply(&Event::StudyStarted {
        info: i,
        existing: Vec::new(),
        at: t0(),
    });
    for n in 0..complete + pruned {
        let state = if n < complete {
            TrialState::Complete
        } else {
            TrialState::Pruned
        };
        s.apply(&done(n, 0, state, Some(0.5 + n as f64)));
    }
    s
}

#[rstest::rstest]
#[case::all_pruned_past_the_design(3, 0, 5, true)]
#[case::one_complete_past_the_design(3, 1, 4, true)]
#[case::still_in_the_initial_design(8, 0, 5, false)]
#[case::two_complete(3, 2, 3, false)]
fn the_header_says_the_sampler_still_explores_by_its_own_rule(
    #[case] startup: usize,
    #[case] complete: u64,
    #[case] pruned: u64,
    #[case] shown: bool,
) {
    let s = exploring_state(startup, complete, pruned);
    for w in [80, 120] {
        let text = screen(&s, w, 24);
        let line = text.lines().nth(2).expect("the header's third line");
        assert_eq!(
            line.contains("sampler: exploring (Sobol) until 2 trials complete"),
            shown,
            "{w}: {line}"
        );
    }
}

#[test]
fn snapshot_sampler_exploring_after_pruning_80x24() {
    insta::assert_snapshot!(screen(&exploring_state(3, 1, 4), 80, 24));
}
