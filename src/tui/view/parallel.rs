//! Parallel coordinates of the best trials: one vertical axis per parameter of the space, in
//! its order, and the picked objective last; each trial a line through its values. A
//! parameter's axis is its unit interval as `crate::space` encodes it (a log parameter on a
//! log scale, a categorical one's choices in equal cells, labelled), the objective's the range
//! of the trials drawn. A trial without a conditional parameter has no segment to or from
//! that axis.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::widgets::canvas::{Canvas, Line as Segment};

use super::charts::render_empty;
use super::insight::{ParamAxis, objective, param_axis};
use super::theme::{Theme, section};
use super::{fit_title, truncate};
use crate::fmt::Precision;
use crate::space::Param;
use crate::trial::TrialState;
use crate::tui::state::{TrialRow, UiState};

/// The best trial's crossings of the axes.
const MARK_BEST: char = '◆';

/// How many of the best trials are drawn: more lines on a wide screen, where they still part.
fn how_many(width: u16) -> usize {
    if width >= 120 { 20 } else { 10 }
}

pub(super) fn render_parallel(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let k = state.insight.objective;
    let (metric, dir) = objective(state, k);
    let value = |t: &TrialRow| -> Option<f64> {
        if t.state != TrialState::Complete || t.uncounted() {
            return None;
        }
        let v = if k == 0 {
            t.value()
        } else {
            t.others().get(k - 1).copied()
        };
        v.filter(|v| v.is_finite())
    };
    let mut ranked: Vec<(&TrialRow, f64)> = state
        .trials
        .iter()
        .filter_map(|t| Some((t, value(t)?)))
        .collect();
    let total = ranked.len();
    ranked.sort_by(|a, b| {
        dir.loss(a.1)
            .total_cmp(&dir.loss(b.1))
            .then(a.0.number.cmp(&b.0.number))
    });
    ranked.truncate(how_many(area.width));
    let title = fit_title(
        vec![Span::styled(" Parallel coordinates ", theme.title())],
        if ranked.is_empty() {
            Vec::new()
        } else {
            vec![
                vec![Span::styled(
                    format!("best {} of {total} by {metric} ", ranked.len()),
                    theme.header(),
                )],
                vec![Span::styled(format!("{MARK_BEST}best "), theme.dim())],
            ]
        },
        area.width,
    );
    let block = section(title, theme);
    let Some(space) = state.insight_space() else {
        render_empty(frame, area, block, " no trial with params yet", theme);
        return;
    };
    if ranked.is_empty() {
        let why = format!(" no complete trial with a finite {metric} yet");
        render_empty(frame, area, block, &why, theme);
        return;
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [plot, names] = Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(inner);
    if plot.height < 4 || plot.width < 10 {
        return;
    }
    let params: Vec<&Param> = space.params().iter().collect();
    let axes = params.len() + 1;
    let w = plot.width as f64;
    let h = plot.height as f64;
    // The last axis's labels are written to its right: keep room for them.
    let right = (plot.width / 5).clamp(4, 10) as f64;
    let col = |j: usize| ((j as f64) * (w - 1.0 - right) / (axes - 1).max(1) as f64).round();
    let spacing = ((w - 1.0 - right) / (axes - 1).max(1) as f64).floor() as usize;
    // Rows: labels on the top and bottom ones, the unit interval between.
    let y_of = |u: f64| 1.0 + u.clamp(0.0, 1.0) * (h - 3.0);
    let lo = ranked.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let hi = ranked.iter().map(|r| r.1).fold(f64::NEG_INFINITY, f64::max);
    let objective_u = |v: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    // Each trial's position on each axis (`None`: an inactive parameter).
    let positions: Vec<Vec<Option<f64>>> = ranked
        .iter()
        .map(|(t, v)| {
            params
                .iter()
                .map(|p| unit_of(p, t))
                .chain(std::iter::once(Some(objective_u(*v))))
                .collect()
        })
        .collect();
    let colour = |c: Color| if theme.color { c } else { Color::Reset };
    let picked = state.insight_pair().map(|p| p.0.name.clone());
    let label_w = spacing.saturating_sub(2).max(1);
    let canvas = Canvas::default()
        .marker(Marker::Braille)
        .x_bounds([0.0, w - 1.0])
        .y_bounds([0.0, h - 1.0])
        .paint(|ctx| {
            // Worst first, so the best lines draw over the rest.
            for (rank, pos) in positions.iter().enumerate().rev() {
                let c = match rank {
                    0 => colour(Color::LightMagenta),
                    r if r < 3 => colour(Color::Cyan),
                    _ => colour(Color::Blue),
                };
                for j in 0..axes - 1 {
                    if let (Some(a), Some(b)) = (pos[j], pos[j + 1]) {
                        ctx.draw(&Segment::new(col(j), y_of(a), col(j + 1), y_of(b), c));
                    }
                }
            }
            ctx.layer();
            for j in 0..axes {
                for row in 1..(h as usize - 1) {
                    ctx.print(col(j), row as f64, Span::styled("│", theme.dim()));
                }
            }
            for (j, p) in params.iter().enumerate() {
                let w = label_w;
                match param_axis(p) {
                    ParamAxis::Unit { .. } => {
                        let label = |u: f64| truncate(&Precision::LABEL.param(&p.from_unit(u)), w);
                        ctx.print(col(j), h - 1.0, Span::styled(label(1.0), theme.dim()));
                        ctx.print(col(j), 0.0, Span::styled(label(0.0), theme.dim()));
                    }
                    ParamAxis::Choices(choices) => {
                        let n = choices.len().max(1) as f64;
                        let mut used = Vec::new();
                        for (i, c) in choices.iter().enumerate() {
                            let row = y_of((i as f64 + 0.5) / n).round();
                            if used.contains(&(row as i64)) {
                                continue;
                            }
                            used.push(row as i64);
                            let text = truncate(&Precision::LABEL.param(c), w);
                            ctx.print(col(j) + 1.0, row, Span::styled(text, theme.dim()));
                        }
                    }
                }
            }
            let last = col(axes - 1);
            let fmt = |v: f64| truncate(&Precision::LABEL.fmt(v), right as usize);
            ctx.print(last, h - 1.0, Span::styled(fmt(hi), theme.dim()));
            ctx.print(last, 0.0, Span::styled(fmt(lo), theme.dim()));
            if let Some(best) = positions.first() {
                for (j, u) in best.iter().enumerate() {
                    if let Some(u) = u {
                        let style = theme.best();
                        ctx.print(
                            col(j),
                            y_of(*u).round(),
                            Span::styled(MARK_BEST.to_string(), style),
                        );
                    }
                }
            }
        });
    frame.render_widget(canvas, plot);
    // The axes' names under them, the picked parameter's marked.
    let mut spans = Vec::new();
    let mut at = 0usize;
    for j in 0..axes {
        let c = col(j) as usize;
        if c > at {
            spans.push(Span::raw(" ".repeat(c - at)));
            at = c;
        }
        let room = if j + 1 == axes {
            (plot.width as usize).saturating_sub(at)
        } else {
            (col(j + 1) as usize).saturating_sub(at + 1)
        };
        let (name, style) = match params.get(j) {
            Some(p) if Some(&p.name) == picked.as_ref() => (format!("▸{}", p.name), theme.header()),
            Some(p) => (p.name.clone(), theme.dim()),
            None => (metric.clone(), theme.header()),
        };
        let text = truncate(&name, room);
        at += text.chars().count();
        spans.push(Span::styled(text, style));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), names);
}

/// A trial's place on `p`'s axis in the unit interval (`None`: it does not have `p`, or a
/// value the space does not know, such as a choice since removed).
fn unit_of(p: &Param, t: &TrialRow) -> Option<f64> {
    let v = t.params.get(&p.name)?;
    if let ParamAxis::Choices(choices) = param_axis(p)
        && !choices.iter().any(|c| c.same(v))
    {
        return None;
    }
    let u = p.to_unit(v);
    u.is_finite().then_some(u)
}
