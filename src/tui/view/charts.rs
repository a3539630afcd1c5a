//! The main screen's charts: the objective by trial, a two-objective Pareto front, a wider
//! front as a table, and learning curves (also drawn by the trial screen). Every chart is
//! built by [`chart`], so they share their axes' style and their empty state.

use std::collections::BTreeSet;

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Style};
use ratatui::symbols::Marker;
use ratatui::text::Span;
use ratatui::widgets::{Axis, Block, Cell, Chart, Dataset, GraphType, Paragraph, Row, Table};

use super::fit_title;
use super::scales::{axis_labels, robust_bounds, value_labels};
use super::theme::{
    MARK_ABOVE, MARK_BELOW, MARK_COMPLETE, MARK_FAILED, MARK_PREDICTED, MARK_PRUNED, Theme,
    arrow_of, section,
};
use crate::fmt::Precision;
use crate::trial::{Direction, TrialNumber, TrialState};
use crate::tui::state::{TrialRow, UiState};

pub(super) fn render_objective_chart(
    frame: &mut Frame,
    area: Rect,
    state: &UiState,
    theme: &Theme,
) {
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
            TrialState::Complete => match t.value().filter(|v| v.is_finite()) {
                Some(v) => complete.push((x, to_y(v))),
                None => failed_x.push(x),
            },
            TrialState::Pruned => {
                match t.value().or_else(|| t.latest()).filter(|v| v.is_finite()) {
                    Some(v) => pruned.push((x, to_y(v))),
                    None => failed_x.push(x),
                }
            }
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
        render_empty(frame, area, block, " no finished trial yet", theme);
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
        line(Marker::Braille, theme.best(), &best_line),
        marks(
            MARK_COMPLETE,
            theme.state(TrialState::Complete),
            &complete_in,
        ),
        marks(MARK_PRUNED, theme.state(TrialState::Pruned), &pruned_in),
        marks(MARK_FAILED, theme.state(TrialState::Failed), &failed),
        marks(MARK_ABOVE, theme.fg(Color::Yellow), &above),
        marks(MARK_BELOW, theme.fg(Color::Yellow), &below),
    ];
    let x = Scale::new(xb, axis_labels(xb, true));
    let y = Scale::new(yb, value_labels(yb, log));
    frame.render_widget(chart(datasets, block, x, y, theme), area);
}

/// A two-objective study's complete trials, one objective on each axis, with the Pareto front
/// drawn over them (its points joined in the order of the first objective).
pub(super) fn render_pareto_chart(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let (Some(info), [second]) = (&state.info, state.others()) else {
        return;
    };
    let front = state.pareto_front();
    let on_front: BTreeSet<TrialNumber> = front.iter().map(|t| t.number).collect();
    let points: Vec<(TrialNumber, f64, f64)> = state
        .trials
        .iter()
        .filter(|t| t.state == TrialState::Complete && !t.uncounted())
        .filter_map(|t| Some((t.number, t.value()?, *t.others().first()?)))
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
                format!("{MARK_COMPLETE}trial {MARK_FRONT}front "),
                theme.dim(),
            )],
        ],
        area.width,
    );
    let block = section(title, theme);
    if points.is_empty() {
        render_empty(frame, area, block, " no complete trial yet", theme);
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
        line(Marker::Braille, theme.best(), &front_pts),
        marks(MARK_COMPLETE, theme.dim(), &dominated),
        marks(MARK_FRONT, theme.best(), &front_pts),
    ];
    let named =
        |metric: &str, d: Direction| Span::styled(format!("{metric} {}", arrow_of(d)), theme.dim());
    let x = Scale::new(xb, value_labels(xb, false)).named(named(&info.metric, info.direction));
    let y = Scale::new(yb, value_labels(yb, false)).named(named(&second.metric, second.direction));
    frame.render_widget(chart(datasets, block, x, y, theme), area);
}

/// A study with three or more objectives: its Pareto front as a table, one trial a row, in the
/// order of the first objective.
pub(super) fn render_front_table(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
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
        render_empty(frame, area, block, " no complete trial yet", theme);
        return;
    }
    front.sort_by(|a, b| {
        let l = |t: &TrialRow| info.direction.loss(t.value().unwrap_or(f64::NAN));
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
            cells.push(Cell::from(
                t.value()
                    .map(|v| Precision::CELL.fmt(v))
                    .unwrap_or_default(),
            ));
            cells.extend(
                t.others()
                    .iter()
                    .map(|v| Cell::from(Precision::CELL.fmt(*v))),
            );
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
pub(super) fn curves_of(rows: &[&TrialRow]) -> (Vec<Vec<(f64, f64)>>, bool) {
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

pub(super) fn render_curves_chart(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
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
    let mut vs = vs;
    if running.iter().any(|(_, t)| t.predicted.is_some()) {
        vs.push(Span::styled(format!("{MARK_PREDICTED}pred. "), theme.dim()));
    }
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
        render_empty(frame, area, block, " no reports yet", theme);
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
pub(super) fn render_curves(
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
        .chain(running.iter().filter_map(|(_, t)| Some(t.predicted?.value)))
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
    // Each trial's predicted final value (issue 26) sits at the full resource: where the best
    // trial's curve ends, else the chart's right edge, its 80 % band a bar through it.
    let full = if has_ref {
        clipped.first().and_then(|c| c.last()).map_or(xmax, |p| p.0)
    } else {
        xmax
    };
    let forecasts: Vec<(usize, Forecast)> = running
        .iter()
        .enumerate()
        .filter_map(|(k, (slot, t))| {
            let p = t.predicted.as_ref()?;
            let last = *clipped.get(k + usize::from(has_ref))?.last()?;
            let clamp = |v: f64| v.clamp(yb[0], yb[1]);
            (last.0 < full && [p.value, p.low, p.high].iter().all(|v| v.is_finite())).then(|| {
                let at = (full, clamp(p.value));
                let band = vec![(full, clamp(p.low)), (full, clamp(p.high))];
                (*slot, Forecast { band, at: [at] })
            })
        })
        .collect();
    let mut datasets = Vec::new();
    let mut rest = clipped.iter();
    if has_ref && let Some(c) = rest.next() {
        datasets.push(line(Marker::Dot, theme.best(), c));
    }
    for (k, c) in rest.enumerate() {
        let slot = running.get(k).map(|(i, _)| *i).unwrap_or(k);
        datasets.push(line(Marker::Braille, theme.slot(slot), c));
    }
    for (slot, f) in &forecasts {
        datasets.push(line(Marker::Braille, theme.slot(*slot), &f.band));
        datasets.push(marks(MARK_PREDICTED, theme.slot(*slot), &f.at));
    }
    // Steps are whole numbers; epochs may stop part way (a report every N steps).
    let x_integer = !by_epoch || (xb.iter().all(|x| x.fract() == 0.0) && xb[1] - xb[0] >= 2.0);
    let x = Scale::new(xb, axis_labels(xb, x_integer));
    let y = Scale::new(yb, axis_labels(yb, false));
    frame.render_widget(chart(datasets, block, x, y, theme), area);
}

/// The front's own mark in the two-objective chart (a dominated trial keeps the plain one).
const MARK_FRONT: char = '●';

/// A trial's predicted final value as drawn: its band (a vertical bar) and its point.
struct Forecast {
    band: Vec<(f64, f64)>,
    at: [(f64, f64); 1],
}

/// One axis of a chart: its range, its labels and, where the axis is an objective of its own
/// (the Pareto chart), its name.
pub(super) struct Scale {
    bounds: [f64; 2],
    labels: Vec<Span<'static>>,
    name: Option<Span<'static>>,
}

impl Scale {
    pub(super) fn new(bounds: [f64; 2], labels: Vec<Span<'static>>) -> Scale {
        Scale {
            bounds,
            labels,
            name: None,
        }
    }

    pub(super) fn named(self, name: Span<'static>) -> Scale {
        Scale {
            name: Some(name),
            ..self
        }
    }

    fn axis(self, theme: &Theme) -> Axis<'static> {
        let axis = Axis::default()
            .bounds(self.bounds)
            .labels(self.labels)
            .style(theme.dim());
        match self.name {
            Some(name) => axis.title(name),
            None => axis,
        }
    }
}

/// The one chart builder: the datasets in drawing order (each draws over the ones before it),
/// no legend (the block's title says what each mark is), dim axes.
pub(super) fn chart<'a>(
    datasets: Vec<Dataset<'a>>,
    block: Block<'a>,
    x: Scale,
    y: Scale,
    theme: &Theme,
) -> Chart<'a> {
    Chart::new(datasets)
        .block(block)
        .legend_position(None)
        .x_axis(x.axis(theme))
        .y_axis(y.axis(theme))
}

/// Points drawn as `mark`, one per trial.
pub(super) fn marks(mark: char, style: Style, data: &[(f64, f64)]) -> Dataset<'_> {
    Dataset::default()
        .marker(Marker::Custom(mark))
        .style(style)
        .data(data)
}

/// Points joined by a line drawn in `marker`'s dots.
pub(super) fn line(marker: Marker, style: Style, data: &[(f64, f64)]) -> Dataset<'_> {
    Dataset::default()
        .marker(marker)
        .graph_type(GraphType::Line)
        .style(style)
        .data(data)
}

/// A chart (or the front's table) with nothing to draw yet: its block and why.
pub(super) fn render_empty(frame: &mut Frame, area: Rect, block: Block, why: &str, theme: &Theme) {
    frame.render_widget(
        Paragraph::new(Span::styled(why.to_string(), theme.dim()))
            .wrap(ratatui::widgets::Wrap { trim: false })
            .block(block),
        area,
    );
}
