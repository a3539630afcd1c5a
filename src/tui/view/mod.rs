//! Draws a [`UiState`]: a pure function of the state and the frame's size. Nothing here
//! changes the state, reads the clock (the state carries `now`) or reads the database.
//!
//! Every mark that tells states apart has a shape as well as a colour, so the screen reads
//! the same under `NO_COLOR` and in a monochrome `capture-pane`.
//!
//! One room per part of the screen: `theme` (styles and marks), `header`, `workers`,
//! `charts` (one chart builder; the axes' ranges and labels in `scales`), `table`, `trial`
//! (the trial screen) and `overlay` (help and dialogs). Here: the layout, the footer and the
//! text fitting they share. Numbers are written by [`crate::fmt`].

mod charts;
mod header;
mod insight;
mod overlay;
mod parallel;
mod scales;
mod table;
mod theme;
mod timeline;
mod trial;
mod workers;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

#[cfg(test)]
pub(super) use table::cell_text;
#[cfg(test)]
pub(crate) use theme::MARK_PREDICTED;
use theme::Theme;

use super::state::{Mode, Screen, UiState};
use crate::fmt::Precision;
use crate::space::Params;

/// Draws the whole screen.
pub fn render(frame: &mut Frame, state: &UiState) {
    let area = frame.area();
    let theme = Theme { color: state.color };
    match state.screen {
        Screen::Main => render_main(frame, area, state, &theme),
        Screen::Trial(n) => trial::render_trial(frame, area, state, n, &theme),
        Screen::Insight => insight::render_insight(frame, area, state, &theme),
    }
    if let Some(o) = state.overlay {
        overlay::render_overlay(frame, area, state, o, &theme);
    }
}

/// The areas of the main screen.
struct MainLayout {
    header: Rect,
    workers: Rect,
    charts: Rect,
    table: Rect,
    footer: Rect,
}

fn main_layout(area: Rect, state: &UiState) -> MainLayout {
    let rest = area.height.saturating_sub(4);
    let slots = state.slots.len().max(1) as u16;
    // Workers get their rows, but never more than a third of the space; a finished study
    // has no workers to show and gives their room to the table.
    let workers = if state.finished.is_some() {
        0
    } else {
        (2 + slots).min((rest / 3).max(3))
    };
    let charts = if area.height <= 30 {
        7
    } else {
        ((rest - workers) * 9 / 20).min(24)
    };
    let charts = charts.min(rest.saturating_sub(workers + 4));
    let [header, workers, charts, table, footer] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(workers),
        Constraint::Length(charts),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    MainLayout {
        header,
        workers,
        charts,
        table,
        footer,
    }
}

/// How many trial rows the table shows on a screen of this size (for paging).
pub fn table_rows(area: Rect, state: &UiState) -> usize {
    main_layout(area, state).table.height.saturating_sub(2) as usize
}

// ----- main screen ----------------------------------------------------------------------------

fn render_main(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let l = main_layout(area, state);
    header::render_header(frame, l.header, state, theme);
    workers::render_workers(frame, l.workers, state, theme);
    if l.charts.height >= 4 {
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .areas(l.charts);
        match state.others().len() {
            0 => charts::render_objective_chart(frame, left, state, theme),
            1 => charts::render_pareto_chart(frame, left, state, theme),
            _ => charts::render_front_table(frame, left, state, theme),
        }
        charts::render_curves_chart(frame, right, state, theme);
    }
    table::render_table(frame, l.table, state, theme);
    render_footer(frame, l.footer, state, theme);
}

fn render_footer(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let hints: &[(&str, &str)] = match (state.screen, state.mode) {
        (Screen::Trial(_), Mode::Live) => &[
            ("esc", "back"),
            ("↑↓", "trial"),
            ("x", "stop"),
            ("p", "pause"),
            ("?", "help"),
        ],
        (Screen::Trial(_), Mode::Watch) => &[("esc", "back"), ("↑↓", "trial"), ("?", "help")],
        (Screen::Insight, _) if state.others().is_empty() => &[
            ("esc", "back"),
            ("tab", "view"),
            ("n", "param"),
            ("m", "pair"),
            ("?", "help"),
        ],
        (Screen::Insight, _) => &[
            ("esc", "back"),
            ("tab", "view"),
            ("n", "param"),
            ("m", "pair"),
            ("o", "objective"),
            ("?", "help"),
        ],
        (Screen::Main, Mode::Live) => &[
            ("q", "quit"),
            ("p", "pause"),
            ("x", "stop"),
            ("s", "sort"),
            ("f", "filter"),
            ("l", "log"),
            ("i", "insight"),
            ("⏎", "open"),
            ("?", "help"),
        ],
        (Screen::Main, Mode::Watch) => &[
            ("q", "quit"),
            ("s", "sort"),
            ("f", "filter"),
            ("l", "log"),
            ("i", "insight"),
            ("⏎", "open"),
            ("?", "help"),
        ],
    };
    // The scale key names what it would switch to.
    let scale = if state.log_scale { "linear" } else { "log" };
    let mut hints: Vec<(&str, &str)> = hints
        .iter()
        .map(|&(k, w)| if k == "l" { (k, scale) } else { (k, w) })
        .collect();
    // What the last key did matters more than the list of keys (which `?` shows whole): hints
    // give way, the least needed first, until the notice has room to be read.
    const NOTICE_ROOM: usize = 28;
    const GIVE_WAY: [&str; 9] = ["i", "⏎", "tab", "m", "f", "s", "x", "p", "↑↓"];
    let hints_width = |h: &[(&str, &str)]| -> usize {
        h.iter()
            .map(|(k, w)| k.chars().count() + w.chars().count() + 2)
            .sum()
    };
    if let Some(n) = &state.notice {
        let want = n.chars().count().min(NOTICE_ROOM) + 3;
        for key in GIVE_WAY {
            if hints_width(&hints) + want <= area.width as usize {
                break;
            }
            hints.retain(|(k, _)| *k != key);
        }
    }
    let mut spans = Vec::new();
    for (k, what) in &hints {
        spans.push(Span::styled(format!(" {k}"), theme.header()));
        spans.push(Span::styled(format!(" {what}"), theme.dim()));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
    if let Some(n) = &state.notice {
        let hints_w = hints_width(&hints);
        let room = (area.width as usize).saturating_sub(hints_w + 2);
        if room > 8 {
            let text = truncate(n, room);
            let w = text.chars().count() as u16 + 1;
            let r = Rect {
                x: area.x + area.width - w,
                width: w,
                ..area
            };
            frame.render_widget(
                Paragraph::new(Span::styled(text, theme.fg(Color::Yellow))),
                r,
            );
        }
    }
}

/// `name=value` pairs, compact.
fn param_items(p: &Params) -> Vec<String> {
    p.iter()
        .map(|(k, v)| format!("{k}={}", Precision::LABEL.param(v)))
        .collect()
}

/// As many whole items as fit in `width` cells, then how many were left out (`+2 more`, or
/// `+2` where that is all there is room for). An item is never cut: `batch_size=6` of
/// `batch_size=64` reads as another value.
fn fit_items(items: &[String], width: usize) -> String {
    let n = items.len();
    let w = |s: &str| s.chars().count();
    // The width of the first k items joined by spaces.
    let mut joined = vec![0usize; n + 1];
    for (k, item) in items.iter().enumerate() {
        joined[k + 1] = joined[k] + w(item) + usize::from(k > 0);
    }
    if joined[n] <= width {
        return items.join(" ");
    }
    for k in (0..n).rev() {
        let left = n - k;
        let sep = usize::from(k > 0);
        for suffix in [format!("+{left} more"), format!("+{left}")] {
            if joined[k] + sep + w(&suffix) <= width {
                let mut out = items[..k].join(" ");
                if k > 0 {
                    out.push(' ');
                }
                out.push_str(&suffix);
                return out;
            }
        }
    }
    if width > 0 {
        "…".into()
    } else {
        String::new()
    }
}

fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// A chart's title: the `required` spans, then the groups of `optional` ones in order, up to
/// the first that does not fit in `width` (a cut legend is worse than none; a group only
/// makes sense after the ones before it).
fn fit_title<'a>(required: Vec<Span<'a>>, optional: Vec<Vec<Span<'a>>>, width: u16) -> Line<'a> {
    let mut spans = required;
    let mut used: usize = spans.iter().map(|s| s.width()).sum();
    for group in optional {
        let w: usize = group.iter().map(|s| s.width()).sum();
        if used + w > width as usize {
            break;
        }
        used += w;
        spans.extend(group);
    }
    Line::from(spans)
}
