//! The live terminal UI: `tune STUDY.toml` on a terminal, and `tune watch`.
//!
//! [`state`] is a plain struct that scheduler [`Event`](crate::scheduler::Event)s and keys
//! update (pure, tested alone); [`view`] draws it and nothing else; [`terminal`] is the loop
//! that owns the terminal. The UI never reads the database while drawing: `watch` turns what
//! changed in the database into the same events.
//! The line output for pipes is not here: callers check [`stdout_is_terminal`] first.

pub mod bench;
pub mod state;
pub mod terminal;
pub mod view;
pub mod watch;

use std::io::IsTerminal;

pub use state::{Action, Mode, UiState};
pub use terminal::{Options, run};

/// Whether colours are allowed: `NO_COLOR` set to anything but the empty string turns them
/// off (<https://no-color.org>).
pub fn color_allowed() -> bool {
    color_allowed_by(std::env::var_os("NO_COLOR").as_deref())
}

fn color_allowed_by(no_color: Option<&std::ffi::OsStr>) -> bool {
    no_color.is_none_or(|v| v.is_empty())
}

/// Whether standard output is a terminal (else the caller prints lines instead of the UI).
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

#[cfg(test)]
mod tests;
