//! The insight screen (`i`): a row of tabs over one view at a time. This file holds the
//! screen's layout and its parameter views: the importances with the objective against the
//! picked parameter (its slice), and the picked pair against each other. Parallel coordinates
//! are in `parallel`, the slots' timeline in `timeline`.
//!
//! Parameters are placed as `crate::space` encodes them: a number at its position in the unit
//! interval (so a log parameter is on a log scale), a categorical choice in a column of its
//! own, labelled with the choice.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::charts::{Scale, chart, marks, render_empty};
use super::scales::{axis_labels, robust_bounds};
use super::theme::{MARK_COMPLETE, MARK_FAILED, MARK_PRUNED, Theme, section};
use super::{fit_title, parallel, timeline, truncate};
use crate::fmt::Precision;
use crate::space::{Param, ParamKind, ParamValue};
use crate::trial::{Direction, TrialState};
use crate::tui::state::{InsightTab, MIN_TRIALS, TrialRow, UiState};

/// A pair's trials among the best quarter of the complete ones.
pub(super) const MARK_GOOD: char = '●';

pub(super) fn render_insight(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let [header, tabs, body, footer] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    super::header::render_header(frame, header, state, theme);
    render_tabs(frame, tabs, state, theme);
    match state.insight.tab {
        InsightTab::Importance => render_importance_tab(frame, body, state, theme),
        InsightTab::Pair => render_pair(frame, body, state, theme),
        InsightTab::Parallel => parallel::render_parallel(frame, body, state, theme),
        InsightTab::Timeline => timeline::render_timeline(frame, body, state, theme),
    }
    super::render_footer(frame, footer, state, theme);
}

/// The tabs, the picked one reversed, then what is picked where there is room.
fn render_tabs(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let mut spans = Vec::new();
    for t in InsightTab::ALL {
        // Brackets as well as reversed: the picked tab reads without colour or attributes.
        let (text, style) = if t == state.insight.tab {
            (
                format!("[{}]", t.label()),
                theme.selected().patch(theme.title()),
            )
        } else {
            (format!(" {} ", t.label()), theme.dim())
        };
        spans.push(Span::raw(" "));
        spans.push(Span::styled(text, style));
    }
    let used: usize = spans.iter().map(|s| s.width()).sum();
    let mut picks = Vec::new();
    // The marks of the importance list: ▸ the parameter, ▹ the pair's other one.
    if let Some((a, b)) = state.insight_pair() {
        picks.push(match b {
            Some(b) => format!("▸{} ▹{}", a.name, b.name),
            None => format!("▸{}", a.name),
        });
    }
    let objectives = state.objectives();
    if objectives.len() > 1
        && let Some((metric, _)) = objectives.get(state.insight.objective)
    {
        picks.push(format!("for {metric}"));
    }
    let picks = picks.join(" · ");
    let room = (area.width as usize).saturating_sub(used + 2);
    if room >= 12 && !picks.is_empty() {
        let text = truncate(&picks, room);
        let pad = room - text.chars().count();
        spans.push(Span::raw(" ".repeat(pad + 1)));
        spans.push(Span::styled(text, theme.header()));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

// ----- what the views share -------------------------------------------------------------------

/// Where a finished trial sits on an objective's axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Placed {
    /// A complete trial's value.
    Value(f64),
    /// A pruned or failed trial's last reported value of the objective.
    Last(f64),
    /// No value (a failed trial that reported nothing, a NaN, a further objective of a trial
    /// that did not complete): drawn on the chart's bad edge.
    Edge,
}

/// Where trial `t` sits on objective `k` (0: the study's metric; the others only complete
/// trials have). `None` for a trial that has not finished.
pub(super) fn placed(t: &TrialRow, k: usize) -> Option<Placed> {
    let finite = |v: Option<f64>| v.filter(|v| v.is_finite());
    Some(match t.state {
        TrialState::Complete => {
            let v = if k == 0 {
                t.value()
            } else {
                t.others().get(k - 1).copied()
            };
            finite(v).map_or(Placed::Edge, Placed::Value)
        }
        // Intermediate reports are of the study's metric only.
        TrialState::Pruned | TrialState::Failed if k == 0 => {
            finite(t.value().or_else(|| t.latest())).map_or(Placed::Edge, Placed::Last)
        }
        TrialState::Pruned | TrialState::Failed => Placed::Edge,
        TrialState::Running | TrialState::Queued => return None,
    })
}

/// The direction and name of objective `k`.
pub(super) fn objective(state: &UiState, k: usize) -> (String, Direction) {
    state
        .objectives()
        .get(k)
        .cloned()
        .unwrap_or_else(|| ("value".into(), Direction::Minimize))
}

/// How a parameter's axis runs.
pub(super) enum ParamAxis<'a> {
    /// A number, at its position in the unit interval.
    Unit { log: bool },
    /// A choice per column (or row), at its index.
    Choices(&'a [ParamValue]),
}

pub(super) fn param_axis(p: &Param) -> ParamAxis<'_> {
    match &p.kind {
        ParamKind::Categorical { choices } => ParamAxis::Choices(choices),
        ParamKind::Float { log, .. } | ParamKind::Int { log, .. } => ParamAxis::Unit { log: *log },
    }
}

/// A value's place on its parameter's axis: the unit position of a number, the index of a
/// choice (`None` for a value that is not one of the choices).
pub(super) fn param_pos(p: &Param, v: &ParamValue) -> Option<f64> {
    match &p.kind {
        ParamKind::Categorical { choices } => {
            choices.iter().position(|c| c.same(v)).map(|i| i as f64)
        }
        _ => {
            let u = p.to_unit(v);
            u.is_finite().then_some(u)
        }
    }
}

/// A small, fixed offset per trial in [-0.25, 0.25], so that the trials on one choice spread
/// over its column instead of drawing one mark.
fn jitter(n: u64) -> f64 {
    let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    (h % 1000) as f64 / 1000.0 * 0.5 - 0.25
}

/// A parameter axis of a chart: its bounds, labels and name. A categorical axis has a label
/// per choice, placed where ratatui puts labels: evenly along a y axis (bounds on the first
/// and last choice), and centred in equal slots along an x axis (an empty label at each end,
/// bounds half a slot past them).
fn param_scale(p: &Param, horizontal: bool, label_w: usize) -> Scale {
    let name = match param_axis(p) {
        ParamAxis::Unit { log: true } => format!("{} (log)", p.name),
        _ => p.name.clone(),
    };
    let scale = match param_axis(p) {
        ParamAxis::Unit { .. } => {
            let label = |u: f64| Span::raw(Precision::LABEL.param(&p.from_unit(u)));
            Scale::new([0.0, 1.0], vec![label(0.0), label(0.5), label(1.0)])
        }
        ParamAxis::Choices(choices) => {
            let n = choices.len().max(1) as f64;
            let names = choices
                .iter()
                .map(|c| Span::raw(truncate(&Precision::LABEL.param(c), label_w)));
            if horizontal {
                let labels = std::iter::once(Span::raw(""))
                    .chain(names)
                    .chain(std::iter::once(Span::raw("")))
                    .collect();
                Scale::new([-1.5, n + 0.5], labels)
            } else if choices.len() == 1 {
                // One choice: in the middle, an empty label either side.
                let labels = std::iter::once(Span::raw(""))
                    .chain(names)
                    .chain(std::iter::once(Span::raw("")))
                    .collect();
                Scale::new([-1.0, 1.0], labels)
            } else {
                Scale::new([0.0, n - 1.0], names.collect())
            }
        }
    };
    scale.named(Span::raw(name))
}

/// Trial `t`'s place on `p`'s axis, spread over its column when `p` is categorical.
fn spread_pos(p: &Param, t: &TrialRow) -> Option<f64> {
    let v = t.params.get(&p.name)?;
    let x = param_pos(p, v)?;
    Some(if p.is_categorical() {
        x + jitter(t.number.0)
    } else {
        x
    })
}

// ----- importance and slice -------------------------------------------------------------------

fn render_importance_tab(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let list_w = if area.width >= 120 { 44 } else { 30 };
    let [top, legend] = Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(area);
    // A column between the two: the slice's axis labels do not read as the last bar's.
    let [list, _, slice] = Layout::horizontal([
        Constraint::Length(list_w),
        Constraint::Length(2),
        Constraint::Min(0),
    ])
    .areas(top);
    render_importance(frame, list, state, theme);
    render_slice(frame, slice, state, theme);
    render_slice_legend(frame, legend, state, theme);
}

/// Each parameter's share of the importance for the picked objective, as last computed.
fn render_importance(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let k = state.insight.objective;
    let (metric, _) = objective(state, k);
    let cache = &state.insight.cache;
    let ranking = cache.rankings.get(k);
    let mut required = vec![Span::styled(" Importance ", theme.title())];
    if state.objectives().len() > 1 {
        required.push(Span::styled(format!("{metric} "), theme.header()));
    }
    let n = ranking.map_or(0, |r| r.trials);
    let title = fit_title(
        required,
        vec![
            vec![Span::styled(
                format!("{n} trial{} ", if n == 1 { "" } else { "s" }),
                theme.dim(),
            )],
            vec![Span::styled("PED-ANOVA ", theme.dim())],
        ],
        area.width,
    );
    let block = section(title, theme);
    let Some(r) = ranking.filter(|r| !r.shares.is_empty()) else {
        let why = if state.insight_space().is_none() {
            " no trial with params yet".to_string()
        } else {
            format!(" needs {MIN_TRIALS} complete trials with a finite {metric} ({n} so far)")
        };
        render_empty(frame, area, block, &why, theme);
        return;
    };
    let picked = state.insight_pair();
    let (a, b) = (
        picked.map(|p| p.0.name.as_str()),
        picked.and_then(|p| p.1).map(|p| p.name.as_str()),
    );
    let name_w = r
        .shares
        .iter()
        .map(|(p, _)| p.chars().count())
        .max()
        .unwrap_or(0)
        .min(area.width as usize / 2);
    // mark, name, space, share (4), space, bar
    let bar_w = (area.width as usize).saturating_sub(2 + name_w + 1 + 4 + 1 + 1);
    let max = r.shares.first().map_or(0.0, |s| s.1);
    let mut lines: Vec<Line> = r
        .shares
        .iter()
        .map(|(p, share)| {
            let (mark, style) = if Some(p.as_str()) == a {
                ("▸ ", theme.header())
            } else if Some(p.as_str()) == b {
                ("▹ ", theme.header())
            } else {
                ("  ", theme.fg(Color::Reset))
            };
            Line::from(vec![
                Span::styled(mark, style),
                Span::styled(format!("{:<name_w$} ", truncate(p, name_w)), style),
                Span::raw(format!("{:>3.0}% ", share * 100.0)),
                Span::styled(bar(*share, max, bar_w), theme.fg(Color::LightBlue)),
            ])
        })
        .collect();
    // Stale while a large study grows (the throttle in `state::insight`): say as of when.
    let complete = state.counts.complete;
    if cache.complete() != complete {
        lines.push(Line::from(Span::styled(
            format!(" as of {} of {complete} complete", cache.complete()),
            theme.dim(),
        )));
    }
    lines.push(Line::from(Span::styled(
        " ▸ param (n)  ▹ pair (m)",
        theme.dim(),
    )));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// A bar of `width` cells for the largest share, in eighths of a cell.
fn bar(share: f64, max: f64, width: usize) -> String {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let cells = if max > 0.0 && share.is_finite() {
        (share / max).clamp(0.0, 1.0) * width as f64
    } else {
        0.0
    };
    let eighths = (cells * 8.0).round() as usize;
    let mut s = "█".repeat(eighths / 8);
    if !eighths.is_multiple_of(8) {
        s.push(PARTS[eighths % 8]);
    }
    s
}

/// The picked objective against the picked parameter, one mark per finished trial: complete
/// ones at their value, pruned and failed ones at their last reported value, and trials with
/// no value on the chart's bad edge (the legend under the chart says so).
fn render_slice(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let k = state.insight.objective;
    let (metric, dir) = objective(state, k);
    let Some((p, _)) = state.insight_pair() else {
        let block = section(Line::from(Span::styled(" Slice ", theme.title())), theme);
        render_empty(frame, area, block, " no parameter yet", theme);
        return;
    };
    let title = fit_title(
        vec![Span::styled(" Slice ", theme.title())],
        vec![vec![Span::styled(
            format!("{metric} by {} ", p.name),
            theme.header(),
        )]],
        area.width,
    );
    let block = section(title, theme);
    let mut points: Vec<(f64, Placed, TrialState)> = Vec::new();
    for t in &state.trials {
        let (Some(at), Some(x)) = (placed(t, k), spread_pos(p, t)) else {
            continue;
        };
        points.push((x, at, t.state));
    }
    if points.is_empty() {
        let why = format!(" no finished trial with {} yet", p.name);
        render_empty(frame, area, block, &why, theme);
        return;
    }
    let chart_area = area;
    let mut ys: Vec<f64> = points
        .iter()
        .filter_map(|(_, at, _)| match at {
            Placed::Value(v) | Placed::Last(v) => Some(*v),
            Placed::Edge => None,
        })
        .collect();
    let yb = robust_bounds(&mut ys, dir);
    let edge = match dir {
        Direction::Minimize => yb[1],
        Direction::Maximize => yb[0],
    };
    let mut by_state: [Vec<(f64, f64)>; 3] = Default::default();
    for (x, at, s) in &points {
        let y = match at {
            Placed::Value(v) | Placed::Last(v) => v.clamp(yb[0], yb[1]),
            Placed::Edge => edge,
        };
        let i = match s {
            TrialState::Complete => 0,
            TrialState::Pruned => 1,
            _ => 2,
        };
        by_state[i].push((*x, y));
    }
    let label_w = (chart_area.width as usize / 5).max(3);
    let x = param_scale(p, true, label_w);
    let y = Scale::new(yb, axis_labels(yb, false));
    // Complete trials last: they draw over the pruned and failed ones they share a cell with.
    let datasets = vec![
        marks(MARK_FAILED, theme.state(TrialState::Failed), &by_state[2]),
        marks(MARK_PRUNED, theme.state(TrialState::Pruned), &by_state[1]),
        marks(
            MARK_COMPLETE,
            theme.state(TrialState::Complete),
            &by_state[0],
        ),
    ];
    frame.render_widget(chart(datasets, block, x, y, theme), chart_area);
}

/// What the slice's marks mean, and where trials without a value are: under the whole tab,
/// where it has room at 80 columns.
fn render_slice_legend(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let k = state.insight.objective;
    let (metric, dir) = objective(state, k);
    let side = match dir {
        Direction::Minimize => "top",
        Direction::Maximize => "bottom",
    };
    let text = if k == 0 {
        format!(
            " {MARK_COMPLETE}complete {MARK_PRUNED}pruned {MARK_FAILED}failed at last reported value; no value: on the {side} edge"
        )
    } else {
        format!(
            " {MARK_COMPLETE}complete; {MARK_PRUNED}pruned {MARK_FAILED}failed have no {metric}: on the {side} edge"
        )
    };
    frame.render_widget(
        Paragraph::new(Span::styled(
            truncate(&text, area.width as usize),
            theme.dim(),
        )),
        area,
    );
}

// ----- pair -----------------------------------------------------------------------------------

/// The picked pair, one parameter on each axis, each finished trial that has both at its
/// params: the best quarter of the complete ones (by the picked objective) stand out.
fn render_pair(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let k = state.insight.objective;
    let (metric, dir) = objective(state, k);
    let pair = state.insight_pair();
    let title = match pair {
        Some((a, Some(b))) => fit_title(
            vec![Span::styled(" Pair ", theme.title())],
            vec![
                vec![Span::styled(
                    format!("{} × {} ", a.name, b.name),
                    theme.header(),
                )],
                vec![Span::styled(
                    format!(
                        "{MARK_GOOD}best 25% {MARK_COMPLETE}ok {MARK_PRUNED}pruned {MARK_FAILED}failed "
                    ),
                    theme.dim(),
                )],
                vec![Span::styled(format!("by {metric} "), theme.dim())],
            ],
            area.width,
        ),
        _ => Line::from(Span::styled(" Pair ", theme.title())),
    };
    let block = section(title, theme);
    let (a, b) = match pair {
        None => {
            render_empty(frame, area, block, " no parameter yet", theme);
            return;
        }
        Some((_, None)) => {
            render_empty(
                frame,
                area,
                block,
                " a pair needs two parameters; this space has one",
                theme,
            );
            return;
        }
        Some((a, Some(b))) => (a, b),
    };
    let mut points: Vec<(f64, f64, Placed, TrialState)> = Vec::new();
    for t in &state.trials {
        let (Some(at), Some(x), Some(y)) = (placed(t, k), spread_pos(a, t), spread_pos(b, t))
        else {
            continue;
        };
        points.push((x, y, at, t.state));
    }
    if points.is_empty() {
        let why = format!(" no finished trial with both {} and {} yet", a.name, b.name);
        render_empty(frame, area, block, &why, theme);
        return;
    }
    // The best quarter's cut: the value a quarter of the way from the best.
    let mut values: Vec<f64> = points
        .iter()
        .filter_map(|p| match p.2 {
            Placed::Value(v) => Some(dir.loss(v)),
            _ => None,
        })
        .collect();
    values.sort_by(f64::total_cmp);
    let cut = values
        .get(values.len().saturating_sub(1) / 4)
        .copied()
        .unwrap_or(f64::NEG_INFINITY);
    let mut sets: [Vec<(f64, f64)>; 4] = Default::default();
    for (x, y, at, s) in &points {
        let i = match (s, at) {
            (TrialState::Complete, Placed::Value(v)) if dir.loss(*v) <= cut => 0,
            (TrialState::Complete, _) => 1,
            (TrialState::Pruned, _) => 2,
            _ => 3,
        };
        sets[i].push((*x, *y));
    }
    let label_w = (area.width as usize / 6).max(3);
    let x = param_scale(a, true, label_w);
    let y = param_scale(b, false, 8);
    let datasets = vec![
        marks(MARK_FAILED, theme.state(TrialState::Failed), &sets[3]),
        marks(MARK_PRUNED, theme.state(TrialState::Pruned), &sets[2]),
        marks(MARK_COMPLETE, theme.state(TrialState::Complete), &sets[1]),
        marks(MARK_GOOD, theme.best(), &sets[0]),
    ];
    frame.render_widget(chart(datasets, block, x, y, theme), area);
}
