//! The keys: pausing, stopping a trial, quitting, watch mode, the trial screen and help.

use super::*;

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
