//! The three lines at the top: the study and its status, the budget's progress, the counts
//! and the best trial (or the sampler's exploring note).

use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::theme::{Theme, arrow_of};
use super::{fit_items, param_items};
use crate::fmt::{Precision, fmt_duration};
use crate::trial::{Direction, TrialState};
use crate::tui::state::{Mode, UiState};

fn status_span(state: &UiState, theme: &Theme) -> Span<'static> {
    if let Some(f) = &state.finished {
        return Span::styled(format!("■ finished: {}", f.reason), theme.header());
    }
    if state.info.is_none() && !state.disconnected {
        return Span::styled("… starting", theme.dim());
    }
    if state.disconnected {
        return Span::styled("■ disconnected", theme.fg(Color::Red));
    }
    if let Some(graceful) = state.stopping {
        let s = if graceful {
            "■ stopping: running trials finish"
        } else {
            "■ stopping: trials stopped"
        };
        return Span::styled(s, theme.fg(Color::Yellow).add_modifier(Modifier::BOLD));
    }
    match state.pause_pending {
        Some(true) => return Span::styled("‖ pausing…", theme.fg(Color::Yellow)),
        Some(false) => return Span::styled("▶ resuming…", theme.fg(Color::Yellow)),
        None => {}
    }
    if state.paused {
        Span::styled(
            "‖ paused",
            theme.fg(Color::Yellow).add_modifier(Modifier::BOLD),
        )
    } else {
        Span::styled("▶ running", theme.fg(Color::Green))
    }
}

pub(super) fn render_header(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let mut l1 = vec![Span::styled(" tune ", theme.title())];
    if let Some(i) = &state.info {
        let arrow = match i.direction {
            Direction::Minimize => "↓ min",
            Direction::Maximize => "↑ max",
        };
        l1.push(Span::styled(i.name.clone(), theme.header()));
        let objectives = std::iter::once(format!("{} {arrow}", i.metric))
            .chain(
                i.others
                    .iter()
                    .map(|o| format!("{} {}", o.metric, arrow_of(o.direction))),
            )
            .collect::<Vec<_>>()
            .join(" × ");
        l1.push(Span::raw(format!(
            "  {objectives}  {}/{}",
            i.sampler, i.pruner
        )));
    } else {
        l1.push(Span::raw(" waiting for the study…"));
    }
    let after_pruner = l1.len();
    l1.push(Span::raw("  "));
    if state.mode == Mode::Watch {
        l1.push(Span::styled("watch ", theme.dim()));
    }
    l1.push(status_span(state, theme));
    // The rung schedule after the pruner's name where the line has room for it and the help
    // hint (the help overlay always says it): a trial pruned at epoch 3 then reads as a rung
    // decision.
    if let Some(r) = state.info.as_ref().and_then(|i| i.rungs.as_ref()) {
        let rungs = Span::styled(format!(" ({})", r.text()), theme.dim());
        let l1_w: usize = l1.iter().map(|s| s.width()).sum();
        if l1_w + rungs.width() + 8 < area.width as usize {
            l1.insert(after_pruner, rungs);
        }
    }

    let p = state.progress();
    let budget = state.info.as_ref().and_then(|i| i.budget);
    let done = state.counts.finished();
    let mut l2 = vec![Span::raw(" ")];
    let bar_w = (area.width as usize / 4).clamp(10, 40);
    match p.ratio {
        Some(r) => {
            l2.push(Span::styled(bar(r, bar_w), theme.fg(Color::Green)));
            l2.push(Span::raw(format!(" {:>3.0}%", r * 100.0)));
        }
        None => l2.push(Span::styled("no budget", theme.dim())),
    }
    let counted = state.counts.counted();
    let trials = match budget {
        // More counted trials than the budget (lowered since, or trials that ended together
        // at its end): the budget is spent; "38/24" would read as a broken counter.
        Some(b) if counted as u64 > b => format!("  {counted} trials (budget {b})"),
        Some(b) => format!("  {counted}/{b} trials"),
        None => format!("  {done} trials"),
    };
    l2.push(Span::raw(trials));
    l2.push(Span::raw(format!("  elapsed {}", fmt_duration(p.elapsed))));
    if state.finished.is_none() {
        let left = match p.left {
            Some(d) => format!("  left ~{}", fmt_duration(d)),
            None => "  left ?".into(),
        };
        l2.push(Span::raw(left));
        // What the running trials' checkpoints hold on disk, once any has saved one.
        let ckpt: Vec<u64> = state
            .trials
            .iter()
            .filter(|t| t.state == TrialState::Running)
            .filter_map(|t| t.checkpoint.map(|(_, b)| b))
            .collect();
        if !ckpt.is_empty() {
            l2.push(Span::styled(
                format!("  ckpt {}", crate::checkpoint::fmt_bytes(ckpt.iter().sum())),
                theme.dim(),
            ));
        }
    }

    let c = state.counts;
    let best = state.best_trial().map(|b| {
        let label = format!(
            "best #{} {}",
            b.number,
            b.value()
                .map(|v| Precision::CELL.fmt(v))
                .unwrap_or_default()
        );
        (label, param_items(&b.params))
    });
    // The counts with their words where the best trial's params still fit whole, else by
    // their marks alone (the table and the help say what each mark is): on 80 columns the
    // params matter more than the words.
    let counts = |words: bool| {
        let n = |mark: char, k: usize, word: &str| {
            if words {
                format!("{mark}{k} {word}")
            } else {
                format!("{mark}{k}")
            }
        };
        let gap = if words { "  " } else { " " };
        vec![
            Span::raw(" "),
            Span::styled(
                n('▶', c.running, "running"),
                theme.state(TrialState::Running),
            ),
            Span::raw(gap),
            Span::styled(
                n('•', c.complete, "complete"),
                theme.state(TrialState::Complete),
            ),
            Span::raw(gap),
            Span::styled(n('+', c.pruned, "pruned"), theme.state(TrialState::Pruned)),
            Span::raw(gap),
            Span::styled(n('×', c.failed, "failed"), theme.state(TrialState::Failed)),
            Span::raw(" │ "),
        ]
    };
    let width = |spans: &[Span]| spans.iter().map(|s| s.width()).sum::<usize>();
    // The sampler's own rule: past its initial design with too few complete trials (pruning
    // or failures left too few), it still explores; that says more than the best's params.
    let next = state
        .trials
        .iter()
        .map(|t| t.number.0 + 1)
        .max()
        .unwrap_or(0);
    let exploring = state
        .info
        .as_ref()
        .and_then(|i| i.exploration)
        .and_then(|r| crate::events::exploring_note(&r, next, c.complete, c.complete + c.pruned));
    let mut l3 = counts(true);
    let exploring_shown = exploring.is_some();
    if let Some(note) = exploring {
        l3 = counts(false);
        l3.push(Span::styled(note, theme.state(TrialState::Pruned)));
        if let Some((label, _)) = &best
            && width(&l3) + 2 + label.chars().count() <= area.width as usize
        {
            l3.push(Span::raw("  "));
            l3.push(Span::styled(label.clone(), theme.best()));
        }
    } else if let Some((label, items)) = &best {
        let params_w = items.iter().map(|i| i.chars().count() + 1).sum::<usize>();
        if width(&l3) + label.chars().count() + 1 + params_w > area.width as usize {
            l3 = counts(false);
        }
    }
    match best {
        _ if exploring_shown => {}
        Some((label, items)) => {
            l3.push(Span::styled(label, theme.best()));
            let room = (area.width as usize).saturating_sub(width(&l3) + 2);
            let params = fit_items(&items, room);
            if !params.is_empty() {
                l3.push(Span::raw(format!("  {params}")));
            }
        }
        None => l3.push(Span::styled("no complete trial yet", theme.dim())),
    }
    let help = Line::from(Span::styled("? help ", theme.dim())).alignment(Alignment::Right);
    let [top, rest] = Layout::vertical([Constraint::Length(1), Constraint::Length(2)]).areas(area);
    let l1_w: usize = l1.iter().map(|s| s.width()).sum();
    frame.render_widget(Paragraph::new(Line::from(l1)), top);
    if (area.width as usize) > l1_w + 8 {
        frame.render_widget(help, top);
    }
    frame.render_widget(Paragraph::new(vec![Line::from(l2), Line::from(l3)]), rest);
}

/// A bar of `width` cells filled to `ratio`, with eighth blocks at the edge.
fn bar(ratio: f64, width: usize) -> String {
    const EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let ratio = if ratio.is_finite() {
        ratio.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let eighths = (ratio * width as f64 * 8.0).round() as usize;
    let full = eighths / 8;
    let mut s = "█".repeat(full.min(width));
    if full < width {
        let part = eighths % 8;
        if part > 0 {
            s.push(EIGHTHS[part]);
        }
        let used = full + usize::from(part > 0);
        s.push_str(&"░".repeat(width - used));
    }
    s
}
