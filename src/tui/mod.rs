//! The live terminal UI: `tune STUDY.toml` on a terminal, and `tune watch`.
//!
//! [`state`] is a plain struct that scheduler [`Event`]s and keys
//! update (pure, tested alone); [`view`] draws it and nothing else; [`terminal`] is the loop
//! that owns the terminal. The UI never reads the database while drawing: `watch` turns what
//! changed in the database into the same events.
//! The line output for pipes is not here: callers check [`stdout_is_terminal`] first.

// Deterministic study states: for tests here and, with the feature, for `tune-bench`'s render
// benchmark; never in the shipped binary.
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod state;
pub mod terminal;
pub mod view;

use std::io::IsTerminal;

pub use state::{Action, Mode, UiState, Update};
pub use terminal::{Options, run};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::events::{Control, Event};

/// `tune run` on a terminal: the UI in live mode with colours as `NO_COLOR` allows. Returns
/// when the user leaves (the study may still be finishing: the caller awaits it).
pub async fn run_live(
    events: UnboundedReceiver<Event>,
    controls: UnboundedSender<Control>,
) -> std::io::Result<UiState> {
    run(
        events,
        controls,
        Options {
            mode: Mode::Live,
            color: color_allowed(),
        },
    )
    .await
}

/// One line that says how the study stands, printed on the restored terminal after the UI
/// leaves (the alternate screen takes the UI's last frame with it).
pub fn summary_line(state: &UiState) -> String {
    let c = state.counts;
    let name = state
        .info
        .as_ref()
        .map(|i| i.name.as_str())
        .unwrap_or("study");
    let metric = state
        .info
        .as_ref()
        .map(|i| i.metric.as_str())
        .unwrap_or("value");
    let mut line = format!(
        "{name}: {} trials ({} complete, {} pruned, {} failed, {} running)",
        c.total(),
        c.complete,
        c.pruned,
        c.failed,
        c.running
    );
    // The study's best as stored, with other processes' trials, once the run has ended;
    // else the best this UI saw.
    let best = match state.finished.as_ref().and_then(|f| f.best) {
        Some((n, v)) => Some(("best of the study: trial", n, Some(v), state.trial(n))),
        None => state
            .best_trial()
            .map(|b| ("best trial", b.number, b.value(), Some(b))),
    };
    if let Some((label, n, value, row)) = best {
        line.push_str(&format!(
            "; {label} {n} {metric}={}",
            value
                .map(|v| crate::fmt::Precision::CELL.fmt(v))
                .unwrap_or_default()
        ));
        let params = row
            .map(|b| {
                b.params
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        if !params.is_empty() {
            line.push_str(&format!(" ({params})"));
        }
    }
    if let Some(f) = &state.finished {
        line.push_str(&format!("; finished: {}", f.reason));
    }
    line
}

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
