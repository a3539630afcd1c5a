//! The slots' timeline: a row per worker slot, time running left to right from the first
//! trial's start to now (or the study's end), each trial a run of cells from its start to its
//! end with its number where it fits, idle time dotted. Under a slot whose trials NVML sampled,
//! a row of the GPU's mean utilisation during each trial (`crate::telemetry`); without a
//! driver, no such row.
//!
//! Trials that ran on no slot this UI knows (a resumed study's earlier trials, a watched
//! worker's that is gone) are counted in the title, not drawn.

use std::time::{Duration, SystemTime};

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::charts::render_empty;
use super::theme::{Theme, section};
use super::{fit_title, truncate};
use crate::fmt::fmt_duration;
use crate::trial::{TrialNumber, TrialState};
use crate::tui::state::{TrialRow, UiState};

/// How each state fills its cells: a shape per state, so the timeline reads without colour.
fn fill(s: TrialState) -> char {
    match s {
        TrialState::Complete => '━',
        TrialState::Pruned => '┅',
        TrialState::Failed => '╳',
        TrialState::Running | TrialState::Queued => '═',
    }
}

const IDLE: char = '·';

/// Eighths of a cell's height for the GPU's utilisation, 0 to 100 %.
const SHADES: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The width of the slot's label on the left and of its use on the right.
const LABEL_W: usize = 10;
const USE_W: usize = 10;

/// One cell of a slot's row: the trial there, if any.
#[derive(Clone, Copy)]
struct Occupant {
    number: TrialNumber,
    state: TrialState,
    gpu: Option<f64>,
}

pub(super) fn render_timeline(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let start_end = |t: &TrialRow| -> Option<(SystemTime, SystemTime)> {
        let start = t.started_at?;
        let end = match t.state {
            TrialState::Running => state.now,
            _ => t.finished_at.or_else(|| t.duration.map(|d| start + d))?,
        };
        Some((start, end.max(start)))
    };
    let placed: Vec<(usize, &TrialRow, SystemTime, SystemTime)> = state
        .trials
        .iter()
        .filter_map(|t| {
            let slot = t.slot.filter(|s| *s < state.slots.len())?;
            let (a, b) = start_end(t)?;
            Some((slot, t, a, b))
        })
        .collect();
    let unplaced = state
        .trials
        .iter()
        .filter(|t| t.state != TrialState::Queued)
        .count()
        .saturating_sub(placed.len());
    let legend = format!(
        "{}complete {}pruned {}failed {}running {IDLE}idle ",
        fill(TrialState::Complete),
        fill(TrialState::Pruned),
        fill(TrialState::Failed),
        fill(TrialState::Running)
    );
    let mut optional = vec![vec![Span::styled(legend, theme.dim())]];
    if unplaced > 0 {
        optional.insert(
            0,
            vec![Span::styled(
                format!("{unplaced} on no slot of this run "),
                theme.dim(),
            )],
        );
    }
    let title = |extra: Option<String>| {
        let mut required = vec![Span::styled(" Timeline ", theme.title())];
        required.extend(extra.map(|e| Span::styled(e, theme.header())));
        fit_title(required, optional.clone(), area.width)
    };
    if state.slots.is_empty() || placed.is_empty() {
        let why = if state.slots.is_empty() {
            " no worker slot known yet"
        } else {
            " no trial has started on a slot of this run yet"
        };
        render_empty(frame, area, section(title(None), theme), why, theme);
        return;
    }
    let first = placed.iter().map(|p| p.2).min().unwrap_or(state.now);
    let last = match &state.finished {
        Some(f) => f.at,
        None => state.now,
    }
    .max(placed.iter().map(|p| p.3).max().unwrap_or(first));
    let span = last
        .duration_since(first)
        .unwrap_or_default()
        .max(Duration::from_secs(1));
    let bar_w = (area.width as usize).saturating_sub(LABEL_W + USE_W);
    // Each slot's row, and its GPU row where any of its trials was sampled.
    let gpu_of = |t: &TrialRow| {
        t.gpu
            .as_ref()
            .map(|u| u.telemetry().mean_sm_pct)
            .or_else(|| t.status.gpu().map(|g| g.mean_sm_pct))
            .filter(|v| v.is_finite())
    };
    let col = |at: SystemTime| -> usize {
        let d = at.duration_since(first).unwrap_or_default().as_secs_f64();
        ((d / span.as_secs_f64()) * bar_w as f64).floor() as usize
    };
    let mut lines: Vec<Line> = Vec::new();
    let room = area.height.saturating_sub(2) as usize;
    let mut shown = 0;
    for (slot, s) in state.slots.iter().enumerate() {
        let mine: Vec<&(usize, &TrialRow, SystemTime, SystemTime)> =
            placed.iter().filter(|p| p.0 == slot).collect();
        let has_gpu = mine.iter().any(|p| gpu_of(p.1).is_some());
        let need = 1 + usize::from(has_gpu);
        if lines.len() + need > room {
            break;
        }
        shown += 1;
        let mut cells: Vec<Option<Occupant>> = vec![None; bar_w];
        let mut busy = Duration::ZERO;
        let mut gpu_weighted = (0.0, 0.0);
        let mut by_start = mine.clone();
        by_start.sort_by_key(|p| p.2);
        for (_, t, a, b) in by_start {
            let d = b.duration_since(*a).unwrap_or_default();
            busy += d;
            if let Some(g) = gpu_of(t) {
                gpu_weighted.0 += g * d.as_secs_f64();
                gpu_weighted.1 += d.as_secs_f64();
            }
            let (ca, cb) = (col(*a).min(bar_w.saturating_sub(1)), col(*b));
            // A trial shorter than a cell still gets its cell.
            let cb = cb.max(ca + 1).min(bar_w);
            for c in cells.iter_mut().take(cb).skip(ca) {
                *c = Some(Occupant {
                    number: t.number,
                    state: t.state,
                    gpu: gpu_of(t),
                });
            }
        }
        let label = truncate(
            &format!("{slot} {}", super::workers::short_device(&s.device)),
            LABEL_W - 1,
        );
        let mut spans = vec![Span::styled(format!("{label:<LABEL_W$}"), theme.slot(slot))];
        spans.extend(runs(&cells, theme));
        let share = busy.as_secs_f64() / span.as_secs_f64();
        spans.push(Span::styled(
            format!(" {:>3.0}% busy", (share * 100.0).min(100.0)),
            theme.dim(),
        ));
        lines.push(Line::from(spans));
        if has_gpu {
            let shades: String = cells
                .iter()
                .map(|c| match c.and_then(|o| o.gpu) {
                    Some(g) => SHADES[((g.clamp(0.0, 100.0) / 100.0) * 8.0).round() as usize],
                    None => ' ',
                })
                .collect();
            let mean = if gpu_weighted.1 > 0.0 {
                format!(" gpu {:>3.0}%", gpu_weighted.0 / gpu_weighted.1)
            } else {
                String::new()
            };
            lines.push(Line::from(vec![
                Span::styled(format!("{:<LABEL_W$}", "  gpu sm"), theme.dim()),
                Span::styled(shades, theme.fg(ratatui::style::Color::LightGreen)),
                Span::styled(mean, theme.dim()),
            ]));
        }
    }
    let hidden = state.slots.len() - shown;
    let extra = (hidden > 0).then(|| format!("({hidden} more slots on a taller terminal) "));
    // The time axis: the start, the middle and the end, as time since the first start.
    lines.push(Line::from(Span::styled(
        format!("{:<LABEL_W$}{}", "", time_axis(span, bar_w)),
        theme.dim(),
    )));
    frame.render_widget(
        Paragraph::new(lines).block(section(title(extra), theme)),
        area,
    );
}

/// A slot's cells as runs: each trial's in its state's fill with its number at the start
/// where it fits, idle cells dotted.
fn runs(cells: &[Option<Occupant>], theme: &Theme) -> Vec<Span<'static>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cells.len() {
        let here = cells[i];
        let mut j = i + 1;
        while j < cells.len() && same(cells[j], here) {
            j += 1;
        }
        let len = j - i;
        match here {
            None => out.push(Span::styled(IDLE.to_string().repeat(len), theme.dim())),
            Some(o) => {
                let number = o.number.to_string();
                let f = fill(o.state).to_string();
                let text = if len > number.len() {
                    format!("{number}{}", f.repeat(len - number.len()))
                } else {
                    f.repeat(len)
                };
                out.push(Span::styled(text, style_of(o.state, theme)));
            }
        }
        i = j;
    }
    out
}

/// `0`, the middle and the end of a span, placed along `width` cells.
fn time_axis(span: Duration, width: usize) -> String {
    let mut cells = vec![' '; width];
    let mut put = |at: usize, text: &str| {
        for (k, ch) in text.chars().enumerate() {
            if let Some(c) = cells.get_mut(at + k) {
                *c = ch;
            }
        }
    };
    let (mid, end) = (fmt_duration(span / 2), fmt_duration(span));
    put(0, "0");
    put((width / 2).saturating_sub(mid.chars().count() / 2), &mid);
    put(width.saturating_sub(end.chars().count()), &end);
    cells.into_iter().collect()
}

fn same(a: Option<Occupant>, b: Option<Occupant>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.number == b.number,
        _ => false,
    }
}

fn style_of(s: TrialState, theme: &Theme) -> Style {
    theme.state(s)
}
