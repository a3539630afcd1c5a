//! Styles (colour only where allowed, so `NO_COLOR` keeps every shape) and the marks that
//! tell states and directions apart.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders};

use crate::trial::{Direction, TrialState};

/// Marks of the objective chart, one shape per state.
pub(super) const MARK_COMPLETE: char = '•';
pub(super) const MARK_PRUNED: char = '+';
/// A trial's predicted final value in the learning-curve chart (its 80 % band a bar through it).
pub(crate) const MARK_PREDICTED: char = '◆';
pub(super) const MARK_FAILED: char = '×';

pub(super) struct Theme {
    pub(super) color: bool,
}

impl Theme {
    pub(super) fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }
    pub(super) fn state(&self, s: TrialState) -> Style {
        match s {
            TrialState::Running => self.fg(Color::Cyan),
            TrialState::Queued => self.fg(Color::Gray),
            TrialState::Complete => self.fg(Color::Green),
            TrialState::Pruned => self.fg(Color::Yellow),
            TrialState::Failed => self.fg(Color::Red),
        }
    }
    pub(super) fn best(&self) -> Style {
        self.fg(Color::LightMagenta).add_modifier(Modifier::BOLD)
    }
    pub(super) fn title(&self) -> Style {
        self.fg(Color::LightBlue).add_modifier(Modifier::BOLD)
    }
    pub(super) fn dim(&self) -> Style {
        if self.color {
            Style::new().fg(Color::DarkGray)
        } else {
            Style::new()
        }
    }
    pub(super) fn header(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
    pub(super) fn selected(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }
    pub(super) fn slot(&self, i: usize) -> Style {
        const C: [Color; 6] = [
            Color::Cyan,
            Color::LightGreen,
            Color::LightYellow,
            Color::LightRed,
            Color::LightBlue,
            Color::Magenta,
        ];
        self.fg(C[i % C.len()])
    }
}

pub(super) fn section<'a>(title: Line<'a>, theme: &Theme) -> Block<'a> {
    Block::new()
        .borders(Borders::TOP)
        .border_style(theme.dim())
        .title(title)
}

/// Marks of values beyond the objective chart's range, drawn on its edge.
pub(super) const MARK_ABOVE: char = '↑';
pub(super) const MARK_BELOW: char = '↓';

pub(super) fn arrow_of(d: Direction) -> &'static str {
    match d {
        Direction::Minimize => "↓ min",
        Direction::Maximize => "↑ max",
    }
}

/// A trial's state as a mark and a word: `▶ running`, `× failed`.
pub(super) fn state_mark(s: TrialState) -> &'static str {
    match s {
        TrialState::Running => "▶ running",
        TrialState::Queued => "… queued",
        TrialState::Complete => "• complete",
        TrialState::Pruned => "+ pruned",
        TrialState::Failed => "× failed",
    }
}
