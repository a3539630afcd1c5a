//! The keys: what each does on the main screen, on a trial's screen and in a dialog. Keys only
//! change the state; what the terminal loop must do comes back as an [`Action`].

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::{Action, Mode, Overlay, Screen, UiState};
use crate::events::Control;
use crate::trial::{TrialNumber, TrialState};

impl UiState {
    /// Changes the state for one key; returns what the loop must do, if anything.
    pub fn handle_key(&mut self, key: KeyEvent) -> Option<Action> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        // The notice says what the last key did: a new key makes it old news (and gives the
        // footer's hints their room back).
        self.notice = None;
        let ctrl_c =
            key.modifiers.contains(KeyModifiers::CONTROL) && matches!(key.code, KeyCode::Char('c'));
        if let Some(o) = self.overlay {
            return self.overlay_key(o, key.code, ctrl_c);
        }
        if ctrl_c {
            return self.ask_quit();
        }
        match self.screen {
            Screen::Main => self.main_key(key.code),
            Screen::Trial(n) => self.trial_key(n, key.code),
            Screen::Insight => self.insight_key(key.code),
        }
    }

    fn overlay_key(&mut self, o: Overlay, code: KeyCode, ctrl_c: bool) -> Option<Action> {
        match o {
            Overlay::Help => {
                self.overlay = None;
                if ctrl_c {
                    return self.ask_quit();
                }
                None
            }
            Overlay::Quit => {
                // Ctrl-C twice stops the study: what people expect of a second Ctrl-C.
                if ctrl_c || code == KeyCode::Char('s') {
                    return self.quit(false);
                }
                match code {
                    KeyCode::Char('w') => self.quit(true),
                    KeyCode::Esc | KeyCode::Char('n') | KeyCode::Char('q') => {
                        self.overlay = None;
                        None
                    }
                    _ => None,
                }
            }
            Overlay::StopTrial(n) => {
                let as_pruned = match code {
                    KeyCode::Char('p') => true,
                    KeyCode::Char('f') => false,
                    KeyCode::Esc | KeyCode::Char('n') | KeyCode::Char('q') => {
                        self.overlay = None;
                        return None;
                    }
                    _ => return None,
                };
                self.overlay = None;
                if self.trial(n).map(|t| t.state) != Some(TrialState::Running) {
                    self.notice = Some(format!("trial {n} is no longer running"));
                    return None;
                }
                self.notice = Some(format!(
                    "stopping trial {n} (to be recorded as {})",
                    if as_pruned { "pruned" } else { "failed" }
                ));
                Some(Action::Control(Control::StopTrial {
                    number: n,
                    as_pruned,
                }))
            }
        }
    }

    fn quit(&mut self, graceful: bool) -> Option<Action> {
        self.overlay = None;
        self.quit_requested = true;
        if self.finished.is_some() || self.disconnected {
            return Some(Action::Exit);
        }
        self.notice = Some(if graceful {
            "quitting: no new trials; waiting for the running ones to finish".into()
        } else {
            "quitting: stopping the running trials".into()
        });
        Some(Action::Control(Control::Quit { graceful }))
    }

    fn ask_quit(&mut self) -> Option<Action> {
        // Nothing to steer: watching, or the study is over. Leave at once.
        if self.mode == Mode::Watch || self.finished.is_some() || self.disconnected {
            return Some(Action::Exit);
        }
        self.overlay = Some(Overlay::Quit);
        None
    }

    fn read_only(&mut self) -> bool {
        if self.mode == Mode::Watch {
            self.notice =
                Some("watch is read-only: steer from the process running the study".into());
            return true;
        }
        if self.finished.is_some() {
            self.notice = Some("the study has finished".into());
            return true;
        }
        false
    }

    fn toggle_pause(&mut self) -> Option<Action> {
        if self.read_only() {
            return None;
        }
        let pause = !self.pause_pending.unwrap_or(self.paused);
        self.pause_pending = Some(pause);
        self.notice = Some(if pause {
            "pausing: no new trials start; running ones go on".into()
        } else {
            "resuming".into()
        });
        Some(Action::Control(if pause {
            Control::Pause
        } else {
            Control::Resume
        }))
    }

    fn ask_stop(&mut self, n: Option<TrialNumber>) -> Option<Action> {
        if self.read_only() {
            return None;
        }
        match n.and_then(|n| self.trial(n)) {
            Some(t) if t.state == TrialState::Running => {
                self.overlay = Some(Overlay::StopTrial(t.number));
            }
            Some(t) => self.notice = Some(format!("trial {} is not running", t.number)),
            None => self.notice = Some("no trial selected".into()),
        }
        None
    }

    fn main_key(&mut self, code: KeyCode) -> Option<Action> {
        let page = self.table.page.max(1) as isize;
        match code {
            KeyCode::Char('q') | KeyCode::Esc => return self.ask_quit(),
            KeyCode::Char('?') | KeyCode::Char('h') => self.overlay = Some(Overlay::Help),
            KeyCode::Up | KeyCode::Char('k') => self.move_cursor(-1),
            KeyCode::Down | KeyCode::Char('j') => self.move_cursor(1),
            KeyCode::PageUp => self.move_cursor(-page),
            KeyCode::PageDown => self.move_cursor(page),
            KeyCode::Home | KeyCode::Char('g') => self.move_cursor(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_cursor(isize::MAX / 2),
            KeyCode::Char('s') | KeyCode::Right | KeyCode::Char('>') => {
                let n = self.columns().len();
                self.sort_by((self.table.sort + 1) % n);
            }
            KeyCode::Left | KeyCode::Char('<') => {
                let n = self.columns().len();
                self.sort_by((self.table.sort + n - 1) % n);
            }
            KeyCode::Char('r') | KeyCode::Char('S') => {
                let i = self.table.sort;
                self.sort_by(i);
            }
            KeyCode::Char(c @ '1'..='9') => self.sort_by(c as usize - '1' as usize),
            KeyCode::Char('f') => {
                self.table.filter = self.table.filter.next();
                self.refresh_order();
                self.notice = Some(format!("showing {} trials", self.table.filter.label()));
            }
            KeyCode::Enter => {
                if let Some(n) = self.table.selected {
                    self.screen = Screen::Trial(n);
                }
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => return self.toggle_pause(),
            KeyCode::Char('x') => return self.ask_stop(self.selected_row().map(|t| t.number)),
            KeyCode::Char('l') => self.toggle_log_scale(),
            KeyCode::Char('i') => self.open_insight(),
            _ => {}
        }
        None
    }

    /// The insight screen: `Tab` (or `←` `→`) goes through its views, `n` `N` through the
    /// parameters, `m` `M` through the pair's second one, `o` through the objectives.
    fn insight_key(&mut self, code: KeyCode) -> Option<Action> {
        match code {
            KeyCode::Esc | KeyCode::Backspace | KeyCode::Char('q') | KeyCode::Char('i') => {
                self.screen = Screen::Main
            }
            KeyCode::Char('?') | KeyCode::Char('h') => self.overlay = Some(Overlay::Help),
            KeyCode::Tab | KeyCode::Right | KeyCode::Char('>') => {
                self.insight.tab = self.insight.tab.next()
            }
            KeyCode::BackTab | KeyCode::Left | KeyCode::Char('<') => {
                self.insight.tab = self.insight.tab.prev()
            }
            KeyCode::Char('n') | KeyCode::Down | KeyCode::Char('j') => self.cycle_param(1, false),
            KeyCode::Char('N') | KeyCode::Up | KeyCode::Char('k') => self.cycle_param(-1, false),
            KeyCode::Char('m') => self.cycle_param(1, true),
            KeyCode::Char('M') => self.cycle_param(-1, true),
            KeyCode::Char('o') => self.cycle_objective(),
            KeyCode::Char('p') | KeyCode::Char(' ') => return self.toggle_pause(),
            _ => {}
        }
        None
    }

    fn toggle_log_scale(&mut self) {
        self.log_scale = !self.log_scale;
        self.notice = Some(if !self.log_scale {
            "objective chart: linear scale".into()
        } else if self.log_scale_applies() {
            "objective chart: log scale".into()
        } else {
            "objective chart: log scale once every value is positive".into()
        });
    }

    /// Whether the objective chart can draw on a log scale now: every finite value it would
    /// plot is positive (a log axis has no place for zero or a negative value).
    pub fn log_scale_applies(&self) -> bool {
        self.trials
            .iter()
            .filter(|t| matches!(t.state, TrialState::Complete | TrialState::Pruned))
            .filter_map(|t| t.value().or_else(|| t.latest()))
            .filter(|v| v.is_finite())
            .all(|v| v > 0.0)
    }

    fn trial_key(&mut self, n: TrialNumber, code: KeyCode) -> Option<Action> {
        match code {
            KeyCode::Esc | KeyCode::Backspace | KeyCode::Enter | KeyCode::Char('q') => {
                self.screen = Screen::Main
            }
            KeyCode::Char('?') | KeyCode::Char('h') => self.overlay = Some(Overlay::Help),
            KeyCode::Up | KeyCode::Char('k') | KeyCode::Down | KeyCode::Char('j') => {
                self.move_cursor(if matches!(code, KeyCode::Up | KeyCode::Char('k')) {
                    -1
                } else {
                    1
                });
                if let Some(s) = self.table.selected {
                    self.screen = Screen::Trial(s);
                }
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => return self.toggle_pause(),
            KeyCode::Char('x') => return self.ask_stop(Some(n)),
            _ => {}
        }
        None
    }
}
