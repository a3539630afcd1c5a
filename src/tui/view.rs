//! Draws a [`UiState`]: a pure function of the state and the frame's size. Nothing here
//! changes the state, reads the clock (the state carries `now`) or reads the database.
//!
//! Every mark that tells states apart has a shape as well as a colour, so the screen reads
//! the same under `NO_COLOR` and in a monochrome `capture-pane`.

use std::collections::BTreeSet;

use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Borders, Cell, Chart, Clear, Dataset, GraphType, HighlightSpacing, Paragraph, Row,
    Table, TableState, Wrap,
};

use super::state::{Column, Filter, Overlay, Screen, TrialRow, UiState, keys};
use crate::space::{ParamValue, Params};
use crate::trial::{Direction, TrialNumber, TrialState};

/// Marks of the objective chart, one shape per state.
const MARK_COMPLETE: char = '•';
const MARK_PRUNED: char = '+';
const MARK_FAILED: char = '×';

/// Draws the whole screen.
pub fn render(frame: &mut Frame, state: &UiState) {
    let area = frame.area();
    let theme = Theme { color: state.color };
    match state.screen {
        Screen::Main => render_main(frame, area, state, &theme),
        Screen::Trial(n) => render_trial(frame, area, state, n, &theme),
    }
    if let Some(o) = state.overlay {
        render_overlay(frame, area, state, o, &theme);
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

// ----- style ----------------------------------------------------------------------------------

struct Theme {
    color: bool,
}

impl Theme {
    fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }
    fn state(&self, s: TrialState) -> Style {
        match s {
            TrialState::Running => self.fg(Color::Cyan),
            TrialState::Queued => self.fg(Color::Gray),
            TrialState::Complete => self.fg(Color::Green),
            TrialState::Pruned => self.fg(Color::Yellow),
            TrialState::Failed => self.fg(Color::Red),
        }
    }
    fn best(&self) -> Style {
        self.fg(Color::LightMagenta).add_modifier(Modifier::BOLD)
    }
    fn title(&self) -> Style {
        self.fg(Color::LightBlue).add_modifier(Modifier::BOLD)
    }
    fn dim(&self) -> Style {
        if self.color {
            Style::new().fg(Color::DarkGray)
        } else {
            Style::new()
        }
    }
    fn header(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
    fn selected(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }
    fn slot(&self, i: usize) -> Style {
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

fn section<'a>(title: Line<'a>, theme: &Theme) -> Block<'a> {
    Block::new()
        .borders(Borders::TOP)
        .border_style(theme.dim())
        .title(title)
}

// ----- formatting -----------------------------------------------------------------------------

/// A value with about five significant digits, in a form that stays narrow.
pub fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let a = v.abs();
    if a == 0.0 {
        return "0".into();
    }
    if !(1e-3..1e5).contains(&a) {
        return format!("{v:.3e}");
    }
    let decimals = (4 - a.log10().floor() as i32).clamp(0, 6) as usize;
    format!("{v:.decimals$}")
}

/// A number with three significant digits, for params and axis labels.
fn fmt_short(v: f64) -> String {
    if !v.is_finite() {
        return fmt_value(v);
    }
    let a = v.abs();
    if a == 0.0 {
        return "0".into();
    }
    if !(1e-2..1e4).contains(&a) {
        let s = format!("{v:.2e}");
        return s.replace(".00e", "e").replace("0e", "e");
    }
    let decimals = (2 - a.log10().floor() as i32).clamp(0, 4) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A rate: `950`, `12.3k`, `4.1M`.
fn fmt_rate(v: f64) -> String {
    if !v.is_finite() {
        return fmt_value(v);
    }
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn fmt_param(v: &ParamValue) -> String {
    match v {
        ParamValue::Float(x) => fmt_short(*x),
        other => other.to_string(),
    }
}

/// `name=value` pairs, compact.
fn param_items(p: &Params) -> Vec<String> {
    p.iter()
        .map(|(k, v)| format!("{k}={}", fmt_param(v)))
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

pub use crate::fmt::fmt_duration;

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

/// A thin gauge for rows stacked one above the other (blocks would merge into one slab):
/// heavy line for the done part, in halves of a cell, light line for the rest.
fn line_bar(ratio: f64, width: usize) -> (String, String) {
    let ratio = if ratio.is_finite() {
        ratio.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let halves = (ratio * width as f64 * 2.0).round() as usize;
    let mut done = "━".repeat(halves / 2);
    if halves % 2 == 1 {
        done.push('╸');
    }
    let used = halves.div_ceil(2);
    (done, "─".repeat(width.saturating_sub(used)))
}

fn state_mark(s: TrialState) -> &'static str {
    match s {
        TrialState::Running => "▶ running",
        TrialState::Queued => "… queued",
        TrialState::Complete => "• complete",
        TrialState::Pruned => "+ pruned",
        TrialState::Failed => "× failed",
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

// ----- main screen ----------------------------------------------------------------------------

fn render_main(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let l = main_layout(area, state);
    render_header(frame, l.header, state, theme);
    render_workers(frame, l.workers, state, theme);
    if l.charts.height >= 4 {
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .areas(l.charts);
        match state.others().len() {
            0 => render_objective_chart(frame, left, state, theme),
            1 => render_pareto_chart(frame, left, state, theme),
            _ => render_front_table(frame, left, state, theme),
        }
        render_curves_chart(frame, right, state, theme);
    }
    render_table(frame, l.table, state, theme);
    render_footer(frame, l.footer, state, theme);
}

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

fn render_header(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
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
    if state.mode == super::state::Mode::Watch {
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
    }

    let c = state.counts;
    let best = state.best_trial().map(|b| {
        let label = format!(
            "best #{} {}",
            b.number,
            b.value.map(fmt_value).unwrap_or_default()
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
        .and_then(|r| crate::events::exploring_note(&r, next, c.complete));
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

fn render_workers(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let metric = state
        .info
        .as_ref()
        .map(|i| i.metric.as_str())
        .unwrap_or("value");
    if area.height == 0 {
        return;
    }
    let busy = state.slots.iter().filter(|s| s.trial.is_some()).count();
    let shown = area.height.saturating_sub(2) as usize;
    let hidden = state.slots.len().saturating_sub(shown);
    let mut title = vec![
        Span::styled(" Workers ", theme.title()),
        Span::styled(format!("{busy}/{} busy ", state.slots.len()), theme.dim()),
    ];
    if hidden > 0 {
        title.push(Span::styled(
            format!("({hidden} more on a taller terminal) "),
            theme.dim(),
        ));
    }
    let block = section(Line::from(title), theme);
    let wide = area.width >= 120;
    // The GPU column exists only where NVML sampled a running trial: no driver, no column.
    let gpu_col = state
        .slots
        .iter()
        .filter_map(|s| s.trial.and_then(|n| state.trial(n)))
        .any(|t| t.gpu.is_some());
    let mut header = vec![
        Cell::from("slot"),
        Cell::from("device"),
        Cell::from("trial"),
        Cell::from("params"),
        Cell::from("progress"),
        Cell::from(truncate(metric, 9)),
        Cell::from("samp/s"),
        Cell::from("wait"),
    ];
    if gpu_col {
        header.push(Cell::from("gpu sm mem"));
    }
    let header = Row::new(header).style(theme.header());
    let progress_w: u16 = if wide { 30 } else { 16 };
    // The progress texts first: every bar starts in the same column, after the widest text.
    let texts: Vec<Option<(String, Option<f64>)>> = state
        .slots
        .iter()
        .map(|s| {
            let t = s.trial.and_then(|n| state.trial(n))?;
            Some(progress_text(t, wide))
        })
        .collect();
    let text_w = texts
        .iter()
        .flatten()
        .filter(|(_, r)| r.is_some())
        .map(|(t, _)| t.chars().count())
        .max()
        .unwrap_or(0);
    let gauge_w = (progress_w as usize).saturating_sub(text_w + 1);
    let gpu_w: usize = if gpu_col { GPU_W as usize + 1 } else { 0 };
    // What the params column gets of the width: the rest of the row after the fixed columns
    // and the spaces between the eight columns.
    let params_w = (area.width as usize)
        .saturating_sub(4 + 7 + 6 + progress_w as usize + 9 + 6 + 4 + 7 + gpu_w);
    let rows: Vec<Row> = state
        .slots
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let t = s.trial.and_then(|n| state.trial(n));
            let Some(t) = t else {
                return Row::new(vec![
                    Cell::from(format!("{i}")),
                    Cell::from(s.device.clone()),
                    Cell::from("idle").style(theme.dim()),
                ]);
            };
            let progress = match texts.get(i).cloned().flatten() {
                Some((text, Some(ratio))) if gauge_w >= 3 => {
                    let (full, rest) = line_bar(ratio, gauge_w);
                    Line::from(vec![
                        Span::raw(format!("{text:<text_w$} ")),
                        Span::styled(full, theme.slot(i)),
                        Span::styled(rest, theme.dim()),
                    ])
                }
                Some((text, _)) => Line::raw(text),
                None => Line::raw(""),
            };
            let na = || "–".to_string();
            let mut cells = vec![
                Cell::from(format!("{i}")),
                Cell::from(s.device.clone()),
                Cell::from(format!("#{}", t.number)).style(theme.slot(i)),
                Cell::from(fit_items(&param_items(&t.params), params_w)),
                Cell::from(progress),
                Cell::from(t.latest().map(fmt_value).unwrap_or_else(na)),
                Cell::from(
                    t.metric(keys::SAMPLES_PER_S)
                        .map(fmt_rate)
                        .unwrap_or_else(na),
                ),
                Cell::from(
                    t.metric(keys::DATA_WAIT)
                        .map(|w| format!("{:.0}%", w * 100.0))
                        .unwrap_or_else(na),
                ),
            ];
            if gpu_col {
                // The GPU's utilisation and memory now: an idle GPU under a running trial
                // says the trial waits on data or on kernel launches.
                cells.push(Cell::from(
                    t.gpu
                        .map(|u| {
                            format!(
                                "{:>3.0}% {}",
                                u.latest.sm_pct,
                                fmt_gb_short(u.latest.mem_mb)
                            )
                        })
                        .unwrap_or_else(na),
                ));
            }
            Row::new(cells)
        })
        .collect();
    let mut widths = vec![
        Constraint::Length(4),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Fill(1),
        Constraint::Length(progress_w),
        Constraint::Length(9),
        Constraint::Length(6),
        Constraint::Length(4),
    ];
    if gpu_col {
        widths.push(Constraint::Length(GPU_W));
    }
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .column_spacing(1)
            .block(block),
        area,
    );
}

/// A running trial's progress as its worker row says it, and the fraction for its bar where
/// the trial says how far it goes: `ep 3/6` (`epoch 3/6` when `wide`), `step 1874/5000`,
/// `37%`; without a total, `step 1874` or `epoch 3.4`, and no bar.
fn progress_text(t: &TrialRow, wide: bool) -> (String, Option<f64>) {
    let Some(last) = &t.last else {
        return ("starting".into(), None);
    };
    let (ep, st) = if wide {
        ("epoch ", "step ")
    } else {
        ("ep ", "")
    };
    match t.progress() {
        Some((done, total, "ep")) => (
            format!("{ep}{}/{}", fmt_count(done), fmt_count(total)),
            Some(done / total),
        ),
        Some((done, total, "step")) => (
            format!("{st}{}/{}", fmt_count(done), fmt_count(total)),
            Some(done / total),
        ),
        Some((done, total, _)) => (format!("{:.0}%", 100.0 * done / total), Some(done / total)),
        None => match t.metric(keys::EPOCH).filter(|e| e.is_finite()) {
            Some(e) => (format!("epoch {}", fmt_count(e)), None),
            None => (format!("step {}", fmt_count(last.step as f64)), None),
        },
    }
}

/// A count that stays narrow: `3`, `3.4` (an epoch part way), `1874`, `18.7k`.
fn fmt_count(v: f64) -> String {
    if !v.is_finite() {
        return fmt_value(v);
    }
    if v.abs() >= 1e4 {
        return fmt_rate(v);
    }
    if (v - v.round()).abs() < 0.05 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.1}")
    }
}

/// The worker rows' GPU column: "100% 65.6G".
const GPU_W: u16 = 10;

/// GPU memory in a few characters: "812M", "2.1G", "65.6G".
fn fmt_gb_short(mb: f64) -> String {
    if mb < 1000.0 {
        format!("{mb:.0}M")
    } else {
        format!("{:.1}G", mb / 1024.0)
    }
}

/// The y range that shows the bulk of the values. Outliers on the bad side (above the range
/// for a loss, below it for an accuracy) are clipped to the edge, so one diverged trial does
/// not flatten every other point; the good side is never clipped, since the best value lies
/// there. An outlier is a value past Tukey's far-out fence, three interquartile ranges beyond
/// the quartile: quartiles rather than the 5th and 95th percentiles, because with a dozen
/// trials those percentiles are the outliers themselves. Values that are all positive never
/// get a negative bound (a loss axis that goes below zero reads as a negative loss).
fn robust_bounds(values: &mut [f64], dir: Direction) -> [f64; 2] {
    let n = values.len();
    if n == 0 {
        return [0.0, 1.0];
    }
    values.sort_unstable_by(f64::total_cmp);
    let (first, last) = (values[0], values[n - 1]);
    let (lo, hi) = if n < 4 {
        (first, last)
    } else {
        let q1 = quantile(values, 0.25);
        let q3 = quantile(values, 0.75);
        // Nearly all values equal: the fence still leaves room for small differences.
        let spread = (q3 - q1)
            .max(quantile(values, 0.5).abs() * 0.05)
            .max(f64::MIN_POSITIVE);
        match dir {
            Direction::Minimize => {
                let fence = q3 + 3.0 * spread;
                let hi = values.iter().rev().find(|v| **v <= fence);
                (first, hi.copied().unwrap_or(last))
            }
            Direction::Maximize => {
                let fence = q1 - 3.0 * spread;
                let lo = values.iter().find(|v| **v >= fence);
                (lo.copied().unwrap_or(first), last)
            }
        }
    };
    pad(lo, hi)
}

/// The `p` quantile of sorted values, interpolated between neighbours.
fn quantile(sorted: &[f64], p: f64) -> f64 {
    let x = p.clamp(0.0, 1.0) * (sorted.len().saturating_sub(1)) as f64;
    let i = x.floor() as usize;
    let j = (i + 1).min(sorted.len() - 1);
    sorted[i] + (sorted[j] - sorted[i]) * (x - i as f64)
}

/// A 5% margin on both sides, never below zero for a range that starts at or above it.
fn pad(lo: f64, hi: f64) -> [f64; 2] {
    if !(lo.is_finite() && hi.is_finite()) {
        return [0.0, 1.0];
    }
    let span = hi - lo;
    let m = if span > 0.0 {
        span * 0.05
    } else {
        lo.abs().max(1.0) * 0.05
    };
    let bottom = if lo >= 0.0 { (lo - m).max(0.0) } else { lo - m };
    [bottom, hi + m]
}

fn axis_labels(b: [f64; 2], integer: bool) -> Vec<Span<'static>> {
    let f = |v: f64| {
        if integer {
            format!("{}", v.round() as i64)
        } else {
            fmt_short(v)
        }
    };
    vec![
        Span::raw(f(b[0])),
        Span::raw(f((b[0] + b[1]) / 2.0)),
        Span::raw(f(b[1])),
    ]
}

/// The y axis's labels; on a log scale the axis holds `log10` of the values, and the labels
/// say the values.
fn value_labels(b: [f64; 2], log: bool) -> Vec<Span<'static>> {
    let f = |y: f64| fmt_short(if log { 10f64.powf(y) } else { y });
    vec![
        Span::raw(f(b[0])),
        Span::raw(f((b[0] + b[1]) / 2.0)),
        Span::raw(f(b[1])),
    ]
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

/// Marks of values beyond the objective chart's range, drawn on its edge.
const MARK_ABOVE: char = '↑';
const MARK_BELOW: char = '↓';

fn render_objective_chart(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let dir = state.direction();
    // A log axis holds log10 of the values; with a value at or below zero it cannot, and the
    // chart stays linear (its title says so).
    let log = state.log_scale && state.log_scale_applies();
    let to_y = |v: f64| if log { v.log10() } else { v };
    let mut complete = Vec::new();
    let mut pruned = Vec::new();
    let mut failed_x = Vec::new();
    let (mut xmin, mut xmax) = (f64::INFINITY, f64::NEG_INFINITY);
    for t in &state.trials {
        let x = t.number.0 as f64;
        match t.state {
            TrialState::Complete => match t.value.filter(|v| v.is_finite()) {
                Some(v) => complete.push((x, to_y(v))),
                None => failed_x.push(x),
            },
            TrialState::Pruned => match t.value.or_else(|| t.latest()).filter(|v| v.is_finite()) {
                Some(v) => pruned.push((x, to_y(v))),
                None => failed_x.push(x),
            },
            TrialState::Failed => failed_x.push(x),
            _ => continue,
        }
        xmin = xmin.min(x);
        xmax = xmax.max(x);
    }
    let mut ys: Vec<f64> = complete.iter().chain(&pruned).map(|p| p.1).collect();
    let yb = robust_bounds(&mut ys, dir);
    // Values beyond the range, drawn on its edge with an arrow that says which way they lie.
    let beyond = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
        pts.iter()
            .filter(|p| p.1 > yb[1] || p.1 < yb[0])
            .map(|&(x, y)| (x, y.clamp(yb[0], yb[1])))
            .collect()
    };
    let above: Vec<(f64, f64)> = beyond(&complete)
        .into_iter()
        .chain(beyond(&pruned))
        .filter(|p| p.1 == yb[1])
        .collect();
    let below: Vec<(f64, f64)> = beyond(&complete)
        .into_iter()
        .chain(beyond(&pruned))
        .filter(|p| p.1 == yb[0])
        .collect();
    let inside = |p: &&(f64, f64)| (yb[0]..=yb[1]).contains(&p.1);
    let scale = match (state.log_scale, log) {
        (true, true) => Some(Span::styled("log ", theme.header())),
        (true, false) => Some(Span::styled("log: a value ≤ 0 ", theme.header())),
        _ => None,
    };
    let off = above.len() + below.len();
    let mut required = vec![Span::styled(" Objective ", theme.title())];
    required.extend(scale);
    let title = fit_title(
        required,
        vec![
            if off > 0 {
                vec![Span::styled(
                    format!("{MARK_ABOVE}{off} off-scale "),
                    theme.fg(Color::Yellow),
                )]
            } else {
                Vec::new()
            },
            vec![Span::styled(
                format!("{MARK_COMPLETE}ok {MARK_PRUNED}pruned {MARK_FAILED}failed "),
                theme.dim(),
            )],
            vec![Span::styled("─best ", theme.dim())],
        ],
        area.width,
    );
    let block = section(title, theme);
    if complete.is_empty() && pruned.is_empty() && failed_x.is_empty() {
        frame.render_widget(
            Paragraph::new(Span::styled(" no finished trial yet", theme.dim())).block(block),
            area,
        );
        return;
    }
    let clip = |p: &mut (f64, f64)| p.1 = p.1.clamp(yb[0], yb[1]);
    complete.iter_mut().for_each(clip);
    // Failed trials have no value: they sit on the bad edge of the chart.
    let bad_edge = match dir {
        Direction::Minimize => yb[1],
        Direction::Maximize => yb[0],
    };
    let failed: Vec<(f64, f64)> = failed_x.iter().map(|&x| (x, bad_edge)).collect();
    // The best-so-far line, as a step function through the complete trials in number order.
    let mut by_number = complete.clone();
    by_number.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut best_line: Vec<(f64, f64)> = Vec::new();
    let mut best: Option<f64> = None;
    for &(x, v) in &by_number {
        if best.is_none_or(|b| dir.better(v, b)) {
            if let Some(b) = best {
                best_line.push((x, b));
            }
            best_line.push((x, v));
            best = Some(v);
        }
    }
    if let Some(b) = best {
        best_line.push((xmax, b));
    }
    let complete_in: Vec<(f64, f64)> = complete.iter().filter(inside).copied().collect();
    let pruned_in: Vec<(f64, f64)> = pruned.iter().filter(inside).copied().collect();
    let xb = if xmax > xmin {
        [xmin, xmax]
    } else {
        [xmin - 1.0, xmin + 1.0]
    };
    // The line first, so that the trials' marks draw over it.
    let datasets = vec![
        Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.best())
            .data(&best_line),
        Dataset::default()
            .marker(Marker::Custom(MARK_COMPLETE))
            .style(theme.state(TrialState::Complete))
            .data(&complete_in),
        Dataset::default()
            .marker(Marker::Custom(MARK_PRUNED))
            .style(theme.state(TrialState::Pruned))
            .data(&pruned_in),
        Dataset::default()
            .marker(Marker::Custom(MARK_FAILED))
            .style(theme.state(TrialState::Failed))
            .data(&failed),
        Dataset::default()
            .marker(Marker::Custom(MARK_ABOVE))
            .style(theme.fg(Color::Yellow))
            .data(&above),
        Dataset::default()
            .marker(Marker::Custom(MARK_BELOW))
            .style(theme.fg(Color::Yellow))
            .data(&below),
    ];
    let chart = Chart::new(datasets)
        .block(block)
        .legend_position(None)
        .x_axis(
            Axis::default()
                .bounds(xb)
                .labels(axis_labels(xb, true))
                .style(theme.dim()),
        )
        .y_axis(
            Axis::default()
                .bounds(yb)
                .labels(value_labels(yb, log))
                .style(theme.dim()),
        );
    frame.render_widget(chart, area);
}

fn arrow_of(d: Direction) -> &'static str {
    match d {
        Direction::Minimize => "↓ min",
        Direction::Maximize => "↑ max",
    }
}

/// A two-objective study's complete trials, one objective on each axis, with the Pareto front
/// drawn over them (its points joined in the order of the first objective).
fn render_pareto_chart(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let (Some(info), [second]) = (&state.info, state.others()) else {
        return;
    };
    let front = state.pareto_front();
    let on_front: BTreeSet<TrialNumber> = front.iter().map(|t| t.number).collect();
    let points: Vec<(TrialNumber, f64, f64)> = state
        .trials
        .iter()
        .filter(|t| t.state == TrialState::Complete && !t.uncounted())
        .filter_map(|t| Some((t.number, t.value?, *t.others.first()?)))
        .filter(|(_, x, y)| x.is_finite() && y.is_finite())
        .collect();
    let title = fit_title(
        vec![Span::styled(" Pareto front ", theme.title())],
        vec![
            vec![Span::styled(
                format!("{} of {} ", front.len(), points.len()),
                theme.header(),
            )],
            vec![Span::styled(
                format!("{MARK_COMPLETE}trial ●front "),
                theme.dim(),
            )],
        ],
        area.width,
    );
    let block = section(title, theme);
    if points.is_empty() {
        frame.render_widget(
            Paragraph::new(Span::styled(" no complete trial yet", theme.dim())).block(block),
            area,
        );
        return;
    }
    let mut xs: Vec<f64> = points.iter().map(|p| p.1).collect();
    let mut ys: Vec<f64> = points.iter().map(|p| p.2).collect();
    let xb = robust_bounds(&mut xs, info.direction);
    let yb = robust_bounds(&mut ys, second.direction);
    let clamp = |x: f64, y: f64| (x.clamp(xb[0], xb[1]), y.clamp(yb[0], yb[1]));
    let dominated: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| !on_front.contains(&p.0))
        .map(|p| clamp(p.1, p.2))
        .collect();
    let mut front_pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| on_front.contains(&p.0))
        .map(|p| clamp(p.1, p.2))
        .collect();
    front_pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let datasets = vec![
        Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.best())
            .data(&front_pts),
        Dataset::default()
            .marker(Marker::Custom(MARK_COMPLETE))
            .style(theme.dim())
            .data(&dominated),
        Dataset::default()
            .marker(Marker::Custom('●'))
            .style(theme.best())
            .data(&front_pts),
    ];
    let chart = Chart::new(datasets)
        .block(block)
        .legend_position(None)
        .x_axis(
            Axis::default()
                .title(Span::styled(
                    format!("{} {}", info.metric, arrow_of(info.direction)),
                    theme.dim(),
                ))
                .bounds(xb)
                .labels(value_labels(xb, false))
                .style(theme.dim()),
        )
        .y_axis(
            Axis::default()
                .title(Span::styled(
                    format!("{} {}", second.metric, arrow_of(second.direction)),
                    theme.dim(),
                ))
                .bounds(yb)
                .labels(value_labels(yb, false))
                .style(theme.dim()),
        );
    frame.render_widget(chart, area);
}

/// A study with three or more objectives: its Pareto front as a table, one trial a row, in the
/// order of the first objective.
fn render_front_table(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let Some(info) = &state.info else {
        return;
    };
    let mut front = state.pareto_front();
    let title = fit_title(
        vec![Span::styled(" Pareto front ", theme.title())],
        vec![vec![Span::styled(
            format!("{} trial(s) ", front.len()),
            theme.header(),
        )]],
        area.width,
    );
    let block = section(title, theme);
    if front.is_empty() {
        frame.render_widget(
            Paragraph::new(Span::styled(" no complete trial yet", theme.dim())).block(block),
            area,
        );
        return;
    }
    front.sort_by(|a, b| {
        let l = |t: &TrialRow| info.direction.loss(t.value.unwrap_or(f64::NAN));
        l(a).total_cmp(&l(b))
    });
    let mut header = vec![Cell::from("#")];
    header.push(Cell::from(format!(
        "{} {}",
        info.metric,
        arrow_of(info.direction).chars().next().unwrap_or(' ')
    )));
    header.extend(info.others.iter().map(|o| {
        Cell::from(format!(
            "{} {}",
            o.metric,
            arrow_of(o.direction).chars().next().unwrap_or(' ')
        ))
    }));
    let rows: Vec<Row> = front
        .iter()
        .map(|t| {
            let mut cells = vec![Cell::from(t.number.0.to_string())];
            cells.push(Cell::from(t.value.map(fmt_value).unwrap_or_default()));
            cells.extend(t.others.iter().map(|v| Cell::from(fmt_value(*v))));
            Row::new(cells)
        })
        .collect();
    let mut widths = vec![Constraint::Length(5)];
    widths.extend((0..=info.others.len()).map(|_| Constraint::Fill(1)));
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(theme.header()))
        .block(block);
    frame.render_widget(table, area);
}

/// The curves of `rows` (the objective by report), by epoch when every one of them knows its
/// epochs, else by step; and whether they are by epoch.
fn curves_of(rows: &[&TrialRow]) -> (Vec<Vec<(f64, f64)>>, bool) {
    let by_epoch = !rows.is_empty() && rows.iter().all(|t| t.curve_by_epoch().is_some());
    let curves = rows
        .iter()
        .map(|t| match t.curve_by_epoch().filter(|_| by_epoch) {
            Some(c) => c.to_vec(),
            None => t.curve.iter().map(|&(s, v)| (s as f64, v)).collect(),
        })
        .collect();
    (curves, by_epoch)
}

fn render_curves_chart(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let best = state.best_trial();
    let running: Vec<(usize, &TrialRow)> = state
        .slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.trial.and_then(|n| state.trial(n)).map(|t| (i, t)))
        .filter(|(_, t)| !t.curve.is_empty())
        .collect();
    let rows: Vec<&TrialRow> = best
        .into_iter()
        .chain(running.iter().map(|(_, t)| *t))
        .collect();
    let (curves, by_epoch) = curves_of(&rows);
    let unit = if by_epoch { "epoch" } else { "step" };
    let vs = vec![
        Span::styled("running vs ", theme.dim()),
        Span::styled(
            best.map(|b| format!("•best #{} ", b.number))
                .unwrap_or_else(|| "best ".into()),
            theme.best(),
        ),
    ];
    let long = format!(" Learning curves by {unit} ");
    let vs_w: usize = vs.iter().map(|s| s.width()).sum();
    let name = if long.chars().count() + vs_w <= area.width as usize {
        long
    } else {
        format!(" Curves by {unit} ")
    };
    let title = fit_title(
        vec![Span::styled(name, theme.title())],
        vec![vs],
        area.width,
    );
    let block = section(title, theme);
    if curves.iter().all(|c| c.is_empty()) {
        frame.render_widget(
            Paragraph::new(Span::styled(" no reports yet", theme.dim())).block(block),
            area,
        );
        return;
    }
    render_curves(
        frame,
        area,
        block,
        state.direction(),
        best.is_some(),
        (&curves, by_epoch),
        &running,
        theme,
    );
}

/// Draws curves in one chart; the first is the reference (the best trial) when `has_ref`.
/// The x axis is in epochs or in steps, as `curves.1` says.
#[allow(clippy::too_many_arguments)]
fn render_curves(
    frame: &mut Frame,
    area: Rect,
    block: Block,
    dir: Direction,
    has_ref: bool,
    curves: (&[Vec<(f64, f64)>], bool),
    running: &[(usize, &TrialRow)],
    theme: &Theme,
) {
    let (curves, by_epoch) = curves;
    let mut ys: Vec<f64> = curves
        .iter()
        .flatten()
        .map(|p| p.1)
        .filter(|v| v.is_finite())
        .collect();
    let yb = robust_bounds(&mut ys, dir);
    let xmax = curves
        .iter()
        .flatten()
        .map(|p| p.0)
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let xmin = curves
        .iter()
        .flatten()
        .map(|p| p.0)
        .fold(xmax, f64::min)
        .min(xmax - 1.0);
    let xb = [xmin, xmax];
    let clipped: Vec<Vec<(f64, f64)>> = curves
        .iter()
        .map(|c| {
            c.iter()
                .filter(|p| p.1.is_finite())
                .map(|&(x, y)| (x, y.clamp(yb[0], yb[1])))
                .collect()
        })
        .collect();
    let mut datasets = Vec::new();
    let mut rest = clipped.iter();
    if has_ref && let Some(c) = rest.next() {
        datasets.push(
            Dataset::default()
                .marker(Marker::Dot)
                .graph_type(GraphType::Line)
                .style(theme.best())
                .data(c),
        );
    }
    for (k, c) in rest.enumerate() {
        let slot = running.get(k).map(|(i, _)| *i).unwrap_or(k);
        datasets.push(
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(theme.slot(slot))
                .data(c),
        );
    }
    // Steps are whole numbers; epochs may stop part way (a report every N steps).
    let x_integer = !by_epoch || (xb.iter().all(|x| x.fract() == 0.0) && xb[1] - xb[0] >= 2.0);
    let chart = Chart::new(datasets)
        .block(block)
        .legend_position(None)
        .x_axis(
            Axis::default()
                .bounds(xb)
                .labels(axis_labels(xb, x_integer))
                .style(theme.dim()),
        )
        .y_axis(
            Axis::default()
                .bounds(yb)
                .labels(axis_labels(yb, false))
                .style(theme.dim()),
        );
    frame.render_widget(chart, area);
}

pub(super) fn cell_text(col: &Column, t: &TrialRow, state: &UiState) -> String {
    match col {
        Column::Number => t.number.to_string(),
        Column::State => state_mark(t.state).to_string(),
        Column::Value => match (t.value, t.state) {
            (Some(v), _) => fmt_value(v),
            (None, TrialState::Running) => t
                .latest()
                .map(|v| format!("({})", fmt_value(v)))
                .unwrap_or_default(),
            _ => String::new(),
        },
        Column::Duration => t.elapsed(state.now).map(fmt_duration).unwrap_or_default(),
        Column::Step => t
            .last
            .as_ref()
            .map(|r| r.step.to_string())
            .unwrap_or_default(),
        Column::Param(p) => t.params.get(p).map(fmt_param).unwrap_or_default(),
        Column::Why => t.why.clone().unwrap_or_default(),
    }
}

/// What a column of the trials table needs: its widest visible cell (never cut), its title's
/// width (a title may be shortened to [`TITLE_MIN`] with `…`), and whether it is the error
/// text, which takes whatever the row has left and is cut with `…` (prose, not a number).
struct ColumnNeed {
    cells: usize,
    title: usize,
    rest: bool,
}

/// The narrowest a shortened column title gets: three letters and `…`.
const TITLE_MIN: usize = 4;

/// Which columns of the table fit in `width` cells (one between columns), and how wide each
/// is: `(column index, width)` in column order.
///
/// Columns are never cut: a column is shown whole or left out. The trial number, its state and
/// its value come first, then the column sorted by, then the rest in order, each taken if it
/// still fits (a wide categorical column left out does not hide the narrow ones after it).
/// Titles are shortened before any column is left out, and get their full width back
/// wherever room is left.
fn fit_columns(needs: &[ColumnNeed], sort: usize, width: usize) -> Vec<(usize, usize)> {
    let n = needs.len();
    let least = |c: &ColumnNeed| {
        if c.rest {
            c.title
        } else {
            c.cells.max(c.title.min(TITLE_MIN))
        }
    };
    let full = |c: &ColumnNeed| {
        if c.rest {
            least(c)
        } else {
            c.cells.max(c.title)
        }
    };
    let first = (0..n.min(3)).chain((sort >= 3 && sort < n).then_some(sort));
    let others = (3..n).filter(|&k| k != sort);
    let mut widths: Vec<Option<usize>> = vec![None; n];
    let mut used = 0usize;
    for k in first.chain(others) {
        let w = least(&needs[k]) + usize::from(used > 0);
        if used + w <= width {
            used += w;
            widths[k] = Some(least(&needs[k]));
        }
    }
    // Full titles back, in column order, where they fit.
    for (k, w) in widths.iter_mut().enumerate() {
        if let Some(w) = w {
            let more = full(&needs[k]) - *w;
            if used + more <= width {
                used += more;
                *w += more;
            }
        }
    }
    // What is left goes to the titles still shortened, a cell each in turn.
    while used < width {
        let mut grew = false;
        for (k, w) in widths.iter_mut().enumerate() {
            if let Some(w) = w
                && !needs[k].rest
                && *w < full(&needs[k])
                && used < width
            {
                *w += 1;
                used += 1;
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    // The error text takes the rest of the row.
    if let Some(w) = widths
        .iter_mut()
        .zip(needs)
        .filter(|(_, c)| c.rest)
        .find_map(|(w, _)| w.as_mut())
    {
        *w += width - used;
    }
    widths
        .into_iter()
        .enumerate()
        .filter_map(|(k, w)| w.map(|w| (k, w)))
        .collect()
}

/// Prose in `width` cells, cut with `…` after the last whole character that fits, with no
/// space before the `…` (a lone `…` reads as a word of its own).
fn cut_prose(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
    t.truncate(t.trim_end().len());
    t.push('…');
    t
}

/// A column title in `width` cells: whole, or shortened with `…` (a sort mark kept).
fn abbreviate(title: &str, width: usize) -> String {
    if title.chars().count() <= width {
        return title.to_string();
    }
    match title.strip_suffix(['▲', '▼']) {
        Some(name) => {
            let mark = &title[name.len()..];
            let mut t = truncate(name, width.saturating_sub(1));
            t.push_str(mark);
            t
        }
        None => truncate(title, width),
    }
}

fn render_table(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let cols = state.columns();
    let tv = &state.table;
    let rows_h = area.height.saturating_sub(2) as usize;
    // The state keeps the cursor in view for its page; clamp again in case the page it knows
    // is stale (a resize not yet seen).
    let mut offset = tv
        .offset
        .min(state.order.len().saturating_sub(rows_h.max(1)));
    if tv.cursor >= offset + rows_h.max(1) {
        offset = tv.cursor + 1 - rows_h.max(1);
    }
    if tv.cursor < offset {
        offset = tv.cursor;
    }
    let best = state.best;
    // The cells of the visible rows only: the table never formats 10 000 rows a frame.
    let visible: Vec<(&TrialRow, Vec<String>)> = state
        .order
        .iter()
        .skip(offset)
        .take(rows_h)
        .map(|&i| {
            let t = &state.trials[i];
            (t, cols.iter().map(|c| cell_text(c, t, state)).collect())
        })
        .collect();
    // Whole columns only: each as wide as its widest visible cell, so no number or state word
    // is ever cut to something that reads as another one; the columns that do not fit are left
    // out whole (the title says how many; the trial view shows them all).
    let titles: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut t = c.title().to_string();
            if i == tv.sort {
                t.push(if tv.descending { '▼' } else { '▲' });
            }
            t
        })
        .collect();
    let needs: Vec<ColumnNeed> = cols
        .iter()
        .enumerate()
        .map(|(k, c)| ColumnNeed {
            cells: visible
                .iter()
                .map(|(_, v)| v[k].chars().count())
                .max()
                .unwrap_or(0)
                .max(match c {
                    // Steady widths for the columns every row has, so they do not jump.
                    Column::State => 10,
                    Column::Value => 9,
                    _ => 0,
                }),
            // One cell after the title, for the sort mark or air; the error text, last in
            // the row, needs none.
            title: c.title().chars().count() + usize::from(!matches!(c, Column::Why)),
            rest: matches!(c, Column::Why),
        })
        .collect();
    // The highlight mark takes one cell before the first column.
    let fit = fit_columns(&needs, tv.sort, area.width.saturating_sub(1) as usize);
    let header = Row::new(
        fit.iter()
            .map(|&(k, w)| Cell::from(abbreviate(&titles[k], w))),
    )
    .style(theme.header());
    let widths: Vec<Constraint> = fit
        .iter()
        .map(|&(_, w)| Constraint::Length(w as u16))
        .collect();
    let visible: Vec<(&TrialRow, Vec<String>)> = visible
        .into_iter()
        .map(|(t, cells)| {
            let cells = fit
                .iter()
                .map(|&(k, w)| match cols[k] {
                    // Prose, not a number: as much of the error as fits, marked as cut.
                    Column::Why => cut_prose(&cells[k], w),
                    _ => cells[k].clone(),
                })
                .collect();
            (t, cells)
        })
        .collect();
    let hidden = cols.len() - fit.len();
    let title = vec![
        Span::styled(" Trials ", theme.title()),
        Span::styled(
            format!(
                "{}{} · sort {} {} · filter {} ",
                state.order.len(),
                if tv.filter == Filter::All {
                    String::new()
                } else {
                    format!("/{}", state.trials.len())
                },
                cols.get(tv.sort).map(|c| c.title()).unwrap_or("#"),
                if tv.descending { "▼" } else { "▲" },
                tv.filter.label()
            ),
            theme.dim(),
        ),
    ];
    // Whole or not at all, like every optional part of a title.
    let left_out = if hidden > 0 {
        vec![vec![Span::styled(
            format!(
                "· {hidden} column{} left out (⏎ shows all) ",
                if hidden == 1 { "" } else { "s" }
            ),
            theme.dim(),
        )]]
    } else {
        Vec::new()
    };
    let block = section(fit_title(title, left_out, area.width), theme);
    let rows: Vec<Row> = visible
        .into_iter()
        .map(|(t, cells)| {
            let mut style = theme.state(t.state);
            if Some(t.number) == best {
                style = theme.best();
            }
            Row::new(cells.into_iter().map(Cell::from)).style(style)
        })
        .collect();
    if rows.is_empty() {
        let msg = if state.trials.is_empty() {
            " no trials yet"
        } else {
            " no trial matches the filter (f to change it)"
        };
        frame.render_widget(
            Paragraph::new(Span::styled(msg, theme.dim())).block(block),
            area,
        );
        return;
    }
    // A table state local to this frame: the rows are already the visible window, so the
    // selection is the cursor's place in it.
    let mut ts = TableState::default();
    if tv.selected.is_some() && tv.cursor >= offset {
        ts.select(Some(tv.cursor - offset));
    }
    frame.render_stateful_widget(
        Table::new(rows, widths)
            .header(header)
            .column_spacing(1)
            .row_highlight_style(theme.selected())
            .highlight_symbol("▸")
            .highlight_spacing(HighlightSpacing::Always)
            .block(block),
        area,
        &mut ts,
    );
}

fn render_footer(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let hints: &[(&str, &str)] = match (state.screen, state.mode) {
        (Screen::Trial(_), super::state::Mode::Live) => &[
            ("esc", "back"),
            ("↑↓", "trial"),
            ("x", "stop"),
            ("p", "pause"),
            ("?", "help"),
        ],
        (Screen::Trial(_), super::state::Mode::Watch) => {
            &[("esc", "back"), ("↑↓", "trial"), ("?", "help")]
        }
        (Screen::Main, super::state::Mode::Live) => &[
            ("q", "quit"),
            ("p", "pause"),
            ("x", "stop"),
            ("s", "sort"),
            ("f", "filter"),
            ("l", "log"),
            ("⏎", "open"),
            ("?", "help"),
        ],
        (Screen::Main, super::state::Mode::Watch) => &[
            ("q", "quit"),
            ("s", "sort"),
            ("f", "filter"),
            ("l", "log"),
            ("⏎", "open"),
            ("?", "help"),
        ],
    };
    // The scale key names what it would switch to.
    let scale = if state.log_scale { "linear" } else { "log" };
    let hints: Vec<(&str, &str)> = hints
        .iter()
        .map(|&(k, w)| if k == "l" { (k, scale) } else { (k, w) })
        .collect();
    let mut spans = Vec::new();
    for (k, what) in &hints {
        spans.push(Span::styled(format!(" {k}"), theme.header()));
        spans.push(Span::styled(format!(" {what}"), theme.dim()));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
    if let Some(n) = &state.notice {
        let hints_w: usize = hints
            .iter()
            .map(|(k, w)| k.chars().count() + w.chars().count() + 2)
            .sum();
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

// ----- the trial screen -----------------------------------------------------------------------

fn render_trial(
    frame: &mut Frame,
    area: Rect,
    state: &UiState,
    n: crate::trial::TrialNumber,
    theme: &Theme,
) {
    let [body, footer] = Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(area);
    render_footer(frame, footer, state, theme);
    let Some(t) = state.trial(n) else {
        frame.render_widget(Paragraph::new(format!(" trial {n} is not known")), body);
        return;
    };
    let metric = state
        .info
        .as_ref()
        .map(|i| i.metric.as_str())
        .unwrap_or("value");
    let mut title = vec![
        Span::styled(format!(" Trial #{} ", t.number), theme.title()),
        Span::styled(state_mark(t.state), theme.state(t.state)),
    ];
    if let Some(v) = t.value {
        title.push(Span::raw(format!("  {metric} {}", fmt_value(v))));
    }
    if state.best == Some(t.number) {
        title.push(Span::styled("  ★ best", theme.best()));
    }
    title.push(Span::raw(" "));
    let block = Block::bordered()
        .border_style(theme.dim())
        .title(Line::from(title));
    let inner = block.inner(body);
    frame.render_widget(block, body);

    let mut lines: Vec<Line> = Vec::new();
    let key_w = t
        .params
        .keys()
        .map(|k| k.chars().count())
        .max()
        .unwrap_or(0)
        .max(8);
    lines.push(Line::from(Span::styled("params", theme.header())));
    for (k, v) in &t.params {
        // Six significant digits, as the CLI writes them: the full binary expansion
        // (0.20127142100802745) is noise to a reader.
        lines.push(Line::from(format!(
            "  {k:<key_w$} {}",
            crate::fmt::fmt_param(v)
        )));
    }
    let mut when = Vec::new();
    if let Some(d) = &t.device {
        when.push(format!("on {d}"));
    }
    if let Some(s) = t.slot {
        when.push(format!("slot {s}"));
    }
    if let Some(d) = t.elapsed(state.now) {
        when.push(format!(
            "{} {}",
            if t.state == TrialState::Running {
                "running for"
            } else {
                "took"
            },
            fmt_duration(d)
        ));
    }
    lines.push(Line::from(vec![
        Span::styled("run     ", theme.header()),
        Span::raw(when.join(", ")),
    ]));
    if let Some(u) = &t.gpu {
        lines.push(Line::from(vec![
            Span::styled("gpu     ", theme.header()),
            Span::raw(format!(
                "{}; now {:.0}% SM, {} ({} samples)",
                u.summary(),
                u.latest.sm_pct,
                crate::telemetry::fmt_mb(u.latest.mem_mb),
                u.samples
            )),
        ]));
    }
    lines.push(Line::from(vec![
        Span::styled("reports ", theme.header()),
        Span::raw(match &t.last {
            Some(r) => format!("{} (last at step {})", t.n_reports, r.step),
            None => "none".into(),
        }),
    ]));
    if let Some(r) = &t.last {
        let m = r
            .metrics
            .iter()
            .map(|(k, v)| format!("{k}={}", fmt_short(*v)))
            .collect::<Vec<_>>()
            .join("  ");
        lines.push(Line::from(vec![
            Span::styled("last    ", theme.header()),
            Span::raw(m),
        ]));
    }
    if t.state == TrialState::Pruned
        && let Some(w) = &t.why
    {
        lines.push(Line::from(vec![
            Span::styled("pruned  ", theme.header()),
            Span::raw(w.clone()),
        ]));
    }
    if let Some(e) = &t.error {
        lines.push(Line::from(Span::styled(
            "error",
            theme.state(TrialState::Failed).add_modifier(Modifier::BOLD),
        )));
        // A traceback can be long: its first line (what happened) and its last lines (where)
        // matter most, and the log paths below must stay on screen.
        let cap = if inner.height < 40 { 8 } else { 20 };
        let all: Vec<&str> = e.lines().collect();
        let shown: Vec<String> = if all.len() <= cap {
            all.iter().map(|l| format!("  {l}")).collect()
        } else {
            let tail = cap - 2;
            std::iter::once(format!("  {}", all[0]))
                .chain(std::iter::once(format!(
                    "  … {} more lines …",
                    all.len() - 1 - tail
                )))
                .chain(all[all.len() - tail..].iter().map(|l| format!("  {l}")))
                .collect()
        };
        for l in shown {
            lines.push(Line::from(Span::styled(l, theme.state(TrialState::Failed))));
        }
    }
    lines.push(Line::from(Span::styled("logs", theme.header())));
    if t.logs.is_empty() {
        lines.push(Line::from(Span::styled(
            "  (none recorded yet)",
            theme.dim(),
        )));
    }
    for l in &t.logs {
        lines.push(Line::from(format!("  {l}")));
    }
    let w = inner.width.max(1) as usize;
    let need: usize = lines.iter().map(|l| l.width().max(1).div_ceil(w)).sum();
    let info = Paragraph::new(lines).wrap(Wrap { trim: false });
    let (info_area, chart_area) = if inner.width >= 110 {
        let [a, b] = Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)])
            .areas(inner);
        (a, b)
    } else {
        // The text takes what it needs, leaving the chart at least 7 rows where it can.
        let need = need as u16;
        let chart_min = if t.curve.is_empty() { 2 } else { 7 };
        let text_h = need.min(inner.height.saturating_sub(chart_min).max(inner.height / 2));
        let [a, b] =
            Layout::vertical([Constraint::Length(text_h), Constraint::Min(0)]).areas(inner);
        (a, b)
    };
    frame.render_widget(info, info_area);

    let best = state.best_trial().filter(|b| b.number != t.number);
    let rows: Vec<&TrialRow> = best.into_iter().chain(std::iter::once(t)).collect();
    let (curves, by_epoch) = curves_of(&rows);
    let chart_title = Line::from(vec![
        Span::styled(
            format!(" {metric} by {} ", if by_epoch { "epoch" } else { "step" }),
            theme.title(),
        ),
        Span::styled(
            best.map(|b| format!("vs •best #{} ", b.number))
                .unwrap_or_default(),
            theme.best(),
        ),
    ]);
    let block = section(chart_title, theme);
    if t.curve.is_empty() {
        frame.render_widget(
            Paragraph::new(Span::styled(format!(" no {metric} reported"), theme.dim()))
                .block(block),
            chart_area,
        );
        return;
    }
    let slot = [(t.slot.unwrap_or(0), t)];
    render_curves(
        frame,
        chart_area,
        block,
        state.direction(),
        best.is_some(),
        (&curves, by_epoch),
        &slot,
        theme,
    );
}

// ----- overlays -------------------------------------------------------------------------------

fn render_overlay(frame: &mut Frame, area: Rect, state: &UiState, o: Overlay, theme: &Theme) {
    let (title, lines): (String, Vec<Line>) = match o {
        Overlay::Help => {
            let mut keys: Vec<(&str, &str)> = vec![
                ("↑↓ j k", "move in the trials table"),
                ("PgUp PgDn g G", "page, first, last"),
                ("s / ← →", "sort by the next / previous column"),
                ("1-9", "sort by that column; again to reverse"),
                ("r", "reverse the sort"),
                (
                    "f",
                    "filter by state: all, running, complete, pruned, failed",
                ),
                ("l", "objective chart: log or linear scale"),
                ("Enter", "open the trial: params, curve, error, logs"),
                ("Esc", "back to the study"),
            ];
            if state.mode == super::state::Mode::Live {
                keys.extend([
                    ("p / space", "pause or resume starting new trials"),
                    ("x", "stop the selected running trial (pruned or failed)"),
                    ("q / Ctrl-C", "quit: stop the study, or let trials finish"),
                ]);
            } else {
                keys.push(("q", "leave (watch only reads: the study goes on)"));
            }
            keys.push(("?", "this help; any key closes it"));
            let lines = keys
                .into_iter()
                .map(|(k, w)| {
                    Line::from(vec![
                        Span::styled(format!(" {k:<14}"), theme.header()),
                        Span::raw(w),
                    ])
                })
                .chain([
                    Line::raw(""),
                    Line::from(Span::styled(
                        format!(" chart marks: {MARK_COMPLETE} complete  {MARK_PRUNED} pruned  {MARK_FAILED} failed  {MARK_ABOVE}{MARK_BELOW} off-scale  line: best"),
                        theme.dim(),
                    )),
                ])
                .chain(
                    state
                        .info
                        .as_ref()
                        .and_then(|i| Some((i.pruner.as_str(), i.rungs.as_ref()?)))
                        .map(|(pruner, r)| {
                            Line::from(Span::styled(
                                format!(" pruner: {pruner}, {}", r.text()),
                                theme.dim(),
                            ))
                        }),
                )
                .collect();
            (" Keys ".into(), lines)
        }
        Overlay::Quit => (
            " Quit ".into(),
            vec![
                Line::raw(" Quit the study?"),
                Line::raw(""),
                Line::from(vec![
                    Span::styled(" s ", theme.header()),
                    Span::raw("stop now: running trials are stopped"),
                ]),
                Line::from(vec![
                    Span::styled(" w ", theme.header()),
                    Span::raw("wait: start no new trial, let running ones finish"),
                ]),
                Line::from(vec![
                    Span::styled(" Esc ", theme.header()),
                    Span::raw("cancel"),
                ]),
            ],
        ),
        Overlay::StopTrial(n) => (
            format!(" Stop trial {n} "),
            vec![
                Line::raw(format!(" Stop trial {n} and record it as:")),
                Line::raw(""),
                Line::from(vec![
                    Span::styled(" p ", theme.header()),
                    Span::raw("pruned (its last value counts for the pruner)"),
                ]),
                Line::from(vec![
                    Span::styled(" f ", theme.header()),
                    Span::raw("failed"),
                ]),
                Line::from(vec![
                    Span::styled(" Esc ", theme.header()),
                    Span::raw("cancel"),
                ]),
            ],
        ),
    };
    let want_w = lines.iter().map(|l| l.width()).max().unwrap_or(20) as u16 + 3;
    let w = want_w.min(area.width.saturating_sub(2)).max(10);
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = Rect {
        x: area.x + (area.width.saturating_sub(w)) / 2,
        y: area.y + (area.height.saturating_sub(h)) / 2,
        width: w,
        height: h,
    };
    frame.render_widget(Clear, r);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(Span::styled(title, theme.title()))),
        r,
    );
}
