//! Tests of the UI: state updates from events and keys, and snapshots of the screen, a file per
//! part of the UI; the helpers that build events and draw on a `TestBackend` are here. A
//! snapshot's file is named after its test's module path: moving a snapshot test to another
//! file renames its `.snap` under `src/tui/tests/snapshots/` too. The imports and helpers here
//! are every file's prelude (`use super::*`).

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

mod budget;
mod epochs;
mod events;
mod exploring;
mod insight;
mod insight_views;
mod keys;
mod multi;
mod objective;
mod screen;
mod table;
mod tokens;

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
