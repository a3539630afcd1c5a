//! Each figure, drawn onto a `plotters` area. One function per figure; each starts by asking
//! whether it has anything to draw, and says so in an honest empty figure when not.

use std::collections::BTreeMap;
use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{ParamAxis, span_of};
use super::{
    BEST_CURVES, BEST_N, MAX_CURVE_POINTS, MAX_POINTS, MAX_PRUNED_CURVES, PlotError, StudyView,
    draw_error, stride, thin,
};
use crate::fmt::Precision;
use crate::trial::{Trial, TrialState, TrialStatus};

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

pub const COMPLETE: RGBColor = RGBColor(31, 119, 180);
pub const PRUNED: RGBColor = RGBColor(255, 127, 14);
pub const FAILED: RGBColor = RGBColor(214, 39, 40);
pub const RUNNING: RGBColor = RGBColor(44, 160, 44);
const MERGED: RGBColor = RGBColor(120, 120, 120);
const INK: RGBColor = RGBColor(40, 40, 40);
const NOTE: RGBColor = RGBColor(110, 110, 110);
const LIGHT: RGBColor = RGBColor(245, 245, 245);
const BOLD: RGBColor = RGBColor(222, 222, 222);

const FONT: &str = "sans-serif";

/// What the empty history, slices, contour and parallel coordinates say.
pub const NO_COMPLETE: &str = "no complete trials yet";

/// An honest empty figure: its title and why there is nothing to draw.
pub fn empty<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    why: &str,
) -> Result<(), PlotError> {
    let (w, h) = area.dim_in_pixel();
    let centre = Pos::new(HPos::Center, VPos::Center);
    area.draw(&Text::new(
        title.to_string(),
        (w as i32 / 2, 20),
        TextStyle::from((FONT, 17).into_font()).pos(centre),
    ))
    .map_err(draw_error)?;
    area.draw(&Text::new(
        why.to_string(),
        (w as i32 / 2, h as i32 / 2),
        TextStyle::from((FONT, 16).into_font())
            .color(&NOTE)
            .pos(centre),
    ))
    .map_err(draw_error)?;
    Ok(())
}

/// A chart with a caption and room for labels (`left`: the width of the y labels).
fn chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    x: Range<f64>,
    y: Range<f64>,
    left: u32,
) -> Result<Chart<'a, DB>, PlotError> {
    ChartBuilder::on(area)
        .caption(title, (FONT, 16))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(left)
        .build_cartesian_2d(x, y)
        .map_err(draw_error)
}

fn legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    at: SeriesLabelPosition,
) -> Result<(), PlotError> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 12))
        .draw()
        .map_err(draw_error)
}

/// A note in a chart's top left corner (what was left out, why).
fn note<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, text: &str) -> Result<(), PlotError> {
    if text.is_empty() {
        return Ok(());
    }
    let area = chart.plotting_area().strip_coord_spec();
    area.draw(&Text::new(
        text.to_string(),
        (6, 6),
        TextStyle::from((FONT, 12).into_font()).color(&NOTE),
    ))
    .map_err(draw_error)
}

/// Colours from dark (0, the best) to light (1): a five-stop approximation of viridis, whose
/// lightness rises evenly so order reads without a legend in grey too.
pub fn ramp(t: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 5] = [
        (68, 1, 84),
        (59, 82, 139),
        (33, 145, 140),
        (94, 201, 98),
        (253, 231, 37),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let x = t * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn plural(n: usize, one: &str) -> String {
    format!("{n} {one}{}", if n == 1 { "" } else { "s" })
}

/// "2000 of 10000 drawn (the best half and an even stride of the rest)" when thinned.
fn thinned(shown: usize, all: usize) -> String {
    if shown < all {
        format!("{shown} of {all} drawn: the best half and an even stride of the rest")
    } else {
        String::new()
    }
}

/// A deterministic spread of points on one categorical choice, in `[-0.25, 0.25]`.
fn jitter(n: u64) -> f64 {
    let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    (h % 1000) as f64 / 1000.0 * 0.5 - 0.25
}

/// Optimization history: every complete trial's value by number, pruned trials' last values,
/// failed trials marked on the floor, and the best so far.
pub fn history<DB: DrawingBackend>(
    view: &StudyView,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    let o = view.objective();
    let title = format!(
        "optimization history of `{}` ({})",
        o.metric,
        o.direction.as_str()
    );
    let complete: Vec<(f64, f64)> = view
        .complete()
        .iter()
        .map(|(t, v)| (t.number.0 as f64, *v))
        .collect();
    let pruned_all: Vec<(f64, f64)> = view
        .trials
        .iter()
        .filter(|t| t.state() == TrialState::Pruned)
        .filter_map(|t| {
            t.value()
                .filter(|v| v.is_finite())
                .map(|v| (t.number.0 as f64, v))
        })
        .collect();
    if complete.is_empty() && pruned_all.is_empty() {
        return empty(area, &title, NO_COMPLETE);
    }
    let d = o.direction;
    let shown = thin(&complete, |p| d.loss(p.1), MAX_POINTS);
    let pruned = thin(&pruned_all, |p| d.loss(p.1), MAX_POINTS / 4);
    let failed_all: Vec<f64> = view
        .trials
        .iter()
        .filter(|t| t.state() == TrialState::Failed)
        .map(|t| t.number.0 as f64)
        .collect();
    let failed = stride(&failed_all, MAX_POINTS / 4);
    let non_finite = view.count(TrialState::Complete) - complete.len();
    let mut best: Vec<(f64, f64)> = Vec::new();
    for &(n, v) in &complete {
        match best.last() {
            Some(&(_, b)) if !d.better(v, b) => {}
            _ => {
                if let Some(&(_, b)) = best.last() {
                    best.push((n, b));
                }
                best.push((n, v));
            }
        }
    }
    let last = view.trials.last().map(|t| t.number.0 as f64).unwrap_or(0.0);
    if let Some(&(_, b)) = best.last() {
        best.push((last, b));
    }
    let (ylo, yhi) = span_of(shown.iter().chain(&pruned).map(|p| p.1));
    let (xlo, xhi) = super::axis::pad(0.0, last.max(1.0));
    let mut chart = chart(area, &title, xlo..xhi, ylo..yhi, 70)?;
    chart
        .configure_mesh()
        .light_line_style(LIGHT)
        .bold_line_style(BOLD)
        .x_desc("trial")
        .x_label_formatter(&|x| {
            if x.fract() == 0.0 {
                format!("{x:.0}")
            } else {
                String::new()
            }
        })
        .y_desc(o.metric.as_str())
        .y_label_formatter(&|y| Precision::LABEL.fmt(*y))
        .label_style((FONT, 12))
        .draw()
        .map_err(draw_error)?;
    let s = chart
        .draw_series(
            pruned
                .iter()
                .map(|&p| Cross::new(p, 3, PRUNED.mix(0.8).stroke_width(1))),
        )
        .map_err(draw_error)?;
    if !pruned_all.is_empty() {
        s.label(format!("pruned (last value), {}", pruned_all.len()))
            .legend(|(x, y)| Cross::new((x, y), 3, PRUNED));
    }
    chart
        .draw_series(
            shown
                .iter()
                .map(|&p| Circle::new(p, 2, COMPLETE.mix(0.75).filled())),
        )
        .map_err(draw_error)?
        .label(format!("complete, {}", complete.len()))
        .legend(|(x, y)| Circle::new((x, y), 3, COMPLETE.filled()));
    let floor = ylo + (yhi - ylo) * 0.01;
    let s = chart
        .draw_series(
            failed
                .iter()
                .map(|&n| TriangleMarker::new((n, floor), 4, FAILED.filled())),
        )
        .map_err(draw_error)?;
    if !failed_all.is_empty() {
        s.label(format!("failed (no value), {}", failed_all.len()))
            .legend(|(x, y)| TriangleMarker::new((x, y), 4, FAILED.filled()));
    }
    chart
        .draw_series(LineSeries::new(best, INK.stroke_width(2)))
        .map_err(draw_error)?
        .label("best so far")
        .legend(|(x, y)| PathElement::new(vec![(x - 8, y), (x + 8, y)], INK.stroke_width(2)));
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    let mut notes = vec![thinned(shown.len(), complete.len())];
    if non_finite > 0 {
        notes.push(format!(
            "{} without a finite value not drawn",
            plural(non_finite, "complete trial")
        ));
    }
    let text: Vec<String> = notes.into_iter().filter(|s| !s.is_empty()).collect();
    note(&mut chart, &text.join("; "))
}

/// Horizontal bars: `(label, value)` pairs, largest on top, each with its value written.
fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_desc: &str,
    rows: &[(String, f64)],
    colour: RGBColor,
    value: impl Fn(f64) -> String,
) -> Result<(), PlotError> {
    let n = rows.len();
    let max = rows.iter().map(|r| r.1).fold(0.0f64, f64::max);
    let max = if max > 0.0 { max } else { 1.0 };
    let longest = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(4);
    let left = (longest as u32 * 7 + 16).clamp(60, 320);
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let mut chart = chart(area, title, 0.0..max * 1.15, -0.5..n as f64 - 0.5, left)?;
    let label = |y: &f64| {
        let i = y.round();
        if (y - i).abs() > 1e-6 || i < 0.0 {
            return String::new();
        }
        // Row 0 is drawn at the top: positions count down from n - 1.
        let k = n as f64 - 1.0 - i;
        if k < 0.0 {
            return String::new();
        }
        names.get(k as usize).cloned().unwrap_or_default()
    };
    chart
        .configure_mesh()
        .light_line_style(LIGHT)
        .bold_line_style(BOLD)
        .disable_y_mesh()
        .y_labels(n.max(1))
        .y_label_formatter(&label)
        .x_label_formatter(&|x| Precision::LABEL.fmt(*x))
        .x_desc(x_desc)
        .label_style((FONT, 12))
        .draw()
        .map_err(draw_error)?;
    chart
        .draw_series(rows.iter().enumerate().map(|(k, (_, v))| {
            let y = n as f64 - 1.0 - k as f64;
            Rectangle::new([(0.0, y - 0.35), (*v, y + 0.35)], colour.filled())
        }))
        .map_err(draw_error)?;
    chart
        .draw_series(rows.iter().enumerate().map(|(k, (_, v))| {
            let y = n as f64 - 1.0 - k as f64;
            Text::new(
                format!(" {}", value(*v)),
                (*v, y),
                TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
            )
        }))
        .map_err(draw_error)?;
    Ok(())
}

/// Each parameter's share of the first objective's importance (PED-ANOVA).
pub fn importance<DB: DrawingBackend>(
    view: &StudyView,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    let o = view.objective();
    let title = format!(
        "parameter importance for `{}` (PED-ANOVA, {})",
        o.metric,
        plural(view.complete().len(), "complete trial")
    );
    if view.importances.is_empty() {
        return empty(area, &title, NO_COMPLETE);
    }
    bars(
        area,
        &title,
        "share of importance",
        &view.importances,
        COMPLETE,
        |v| format!("{v:.3}"),
    )
}

/// The slices of `axes`, one panel each, in a grid.
pub fn slices<DB: DrawingBackend>(
    view: &StudyView,
    axes: &[ParamAxis],
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    if axes.is_empty() {
        return empty(area, "slice", "the study has no parameters yet");
    }
    let cols = match axes.len() {
        1 => 1,
        2..=4 => 2,
        _ => 3,
    };
    let rows = axes.len().div_ceil(cols);
    let panels = area.split_evenly((rows, cols));
    for (axis, panel) in axes.iter().zip(&panels) {
        slice(view, axis, panel)?;
    }
    Ok(())
}

/// The objective against one parameter: complete trials, pruned trials at their last value,
/// failed trials on the floor. A categorical parameter's points spread a little around their
/// choice so that they do not hide each other.
pub fn slice<DB: DrawingBackend>(
    view: &StudyView,
    axis: &ParamAxis,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    let o = view.objective();
    let d = o.direction;
    let title = format!("`{}` against {}", o.metric, axis.title());
    let x_of = |t: &Trial| {
        let v = t.params.get(&axis.name)?;
        let x = axis.pos(v)?;
        Some(if axis.is_categorical() {
            x + jitter(t.number.0)
        } else {
            x
        })
    };
    let mut complete = Vec::new();
    let mut pruned = Vec::new();
    let mut failed = Vec::new();
    for t in &view.trials {
        let Some(x) = x_of(t) else { continue };
        let v = t.value().filter(|v| v.is_finite());
        match (t.state(), v) {
            (TrialState::Complete, Some(v)) => complete.push((x, v)),
            (TrialState::Pruned, Some(v)) => pruned.push((x, v)),
            (TrialState::Failed, _) => failed.push(x),
            _ => {}
        }
    }
    if complete.is_empty() && pruned.is_empty() {
        return empty(area, &title, NO_COMPLETE);
    }
    let all = complete.len();
    let complete = thin(&complete, |p| d.loss(p.1), MAX_POINTS);
    let pruned = thin(&pruned, |p| d.loss(p.1), MAX_POINTS / 4);
    let failed = stride(&failed, MAX_POINTS / 4);
    let (ylo, yhi) = span_of(complete.iter().chain(&pruned).map(|p| p.1));
    let mut chart = chart(area, &title, axis.range(), ylo..yhi, 64)?;
    chart
        .configure_mesh()
        .light_line_style(LIGHT)
        .bold_line_style(BOLD)
        .x_labels(axis.ticks())
        .x_label_formatter(&|x| axis.label(*x))
        .y_label_formatter(&|y| Precision::LABEL.fmt(*y))
        .x_desc(axis.title())
        .y_desc(o.metric.as_str())
        .label_style((FONT, 11))
        .draw()
        .map_err(draw_error)?;
    let s = chart
        .draw_series(
            pruned
                .iter()
                .map(|&p| Cross::new(p, 3, PRUNED.mix(0.8).stroke_width(1))),
        )
        .map_err(draw_error)?;
    if !pruned.is_empty() {
        s.label("pruned")
            .legend(|(x, y)| Cross::new((x, y), 3, PRUNED));
    }
    chart
        .draw_series(
            complete
                .iter()
                .map(|&p| Circle::new(p, 2, COMPLETE.mix(0.7).filled())),
        )
        .map_err(draw_error)?
        .label("complete")
        .legend(|(x, y)| Circle::new((x, y), 3, COMPLETE.filled()));
    let floor = ylo + (yhi - ylo) * 0.01;
    let s = chart
        .draw_series(
            failed
                .iter()
                .map(|&x| TriangleMarker::new((x, floor), 4, FAILED.filled())),
        )
        .map_err(draw_error)?;
    if !failed.is_empty() {
        s.label("failed")
            .legend(|(x, y)| TriangleMarker::new((x, y), 4, FAILED.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    note(&mut chart, &thinned(complete.len(), all))
}

/// Where `x` falls among `bins` cells of `axis` (a categorical axis: its choice's cell).
fn cell(axis: &ParamAxis, x: f64, bins: usize) -> usize {
    if axis.is_categorical() {
        return (x.round().max(0.0) as usize).min(bins - 1);
    }
    if let Some((lo, step, _)) = axis.levels() {
        return (((x - lo) / step).round().max(0.0) as usize).min(bins - 1);
    }
    let r = axis.range();
    let f = (x - r.start) / (r.end - r.start);
    ((f * bins as f64).floor().max(0.0) as usize).min(bins - 1)
}

/// The span of cell `i` of `bins` on `axis`.
fn cell_span(axis: &ParamAxis, i: usize, bins: usize) -> (f64, f64) {
    if axis.is_categorical() {
        return (i as f64 - 0.5, i as f64 + 0.5);
    }
    if let Some((lo, step, _)) = axis.levels() {
        let c = lo + step * i as f64;
        return (c - step / 2.0, c + step / 2.0);
    }
    let r = axis.range();
    let w = (r.end - r.start) / bins as f64;
    (r.start + w * i as f64, r.start + w * (i + 1) as f64)
}

/// How many cells a numeric contour axis has: fine enough to show a valley, coarse enough that
/// most cells of a 100-trial study hold a trial.
const CONTOUR_BINS: usize = 20;

/// The best value of the first objective over a grid of two parameters as filled contours
/// (darker is better; cells without a trial interpolated, [`contour_grid`]), with the trials
/// on top.
pub fn contour<DB: DrawingBackend>(
    view: &StudyView,
    a: &ParamAxis,
    b: &ParamAxis,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    let o = view.objective();
    let d = o.direction;
    let title = format!(
        "best `{}` over {} × {} (darker is better)",
        o.metric,
        a.title(),
        b.title()
    );
    let pts: Vec<(f64, f64, f64)> = view
        .complete()
        .iter()
        .filter_map(|(t, v)| {
            let x = a.pos(t.params.get(&a.name)?)?;
            let y = b.pos(t.params.get(&b.name)?)?;
            Some((x, y, d.loss(*v)))
        })
        .collect();
    if pts.is_empty() {
        return empty(area, &title, NO_COMPLETE);
    }
    let bins = |ax: &ParamAxis| {
        if ax.is_categorical() {
            ax.choices().max(1)
        } else if let Some((_, _, n)) = ax.levels() {
            n
        } else {
            CONTOUR_BINS
        }
    };
    let (nx, ny) = (bins(a), bins(b));
    let mut best: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for &(x, y, l) in &pts {
        let k = (cell(a, x, nx), cell(b, y, ny));
        let e = best.entry(k).or_insert(l);
        if l < *e {
            *e = l;
        }
    }
    let grid = contour_grid(&best, (nx, ny), (a.is_categorical(), b.is_categorical()));
    let mut chart = chart(area, &title, a.range(), b.range(), 70)?;
    chart
        .configure_mesh()
        .light_line_style(LIGHT)
        .bold_line_style(BOLD)
        .disable_mesh()
        .x_labels(a.ticks())
        .y_labels(b.ticks())
        .x_label_formatter(&|x| a.label(*x))
        .y_label_formatter(&|y| b.label(*y))
        .x_desc(a.title())
        .y_desc(b.title())
        .label_style((FONT, 11))
        .draw()
        .map_err(draw_error)?;
    chart
        .draw_series(grid.iter().map(|&((i, j), r)| {
            let (x0, x1) = cell_span(a, i, nx);
            let (y0, y1) = cell_span(b, j, ny);
            Rectangle::new([(x0, y0), (x1, y1)], ramp(r).filled())
        }))
        .map_err(draw_error)?;
    let jit = |ax: &ParamAxis, v: f64, n: usize| {
        if ax.is_categorical() {
            v + jitter(n as u64) * 0.8
        } else {
            v
        }
    };
    let shown = thin(&pts, |p| p.2, MAX_POINTS);
    chart
        .draw_series(shown.iter().enumerate().map(|(k, &(x, y, _))| {
            Circle::new((jit(a, x, k), jit(b, y, k + 7)), 2, WHITE.mix(0.9).filled())
        }))
        .map_err(draw_error)?;
    note(&mut chart, &thinned(shown.len(), pts.len()))
}

/// The filled bands of a contour: how many levels the colours take.
const CONTOUR_LEVELS: f64 = 10.0;

/// The colour level of every cell of an `nx × ny` contour grid, in [0, 1] (0 the best), from
/// the best loss of the cells that hold trials (`best`). Levels follow the filled cells' rank,
/// not their values, so one diverged trial does not wash the rest out. A cell without a trial
/// takes the inverse-distance-weighted (power 2, in cells) mean of the filled cells' ranks,
/// along numeric axes only: across a categorical axis the choices have no order, so a cell
/// learns only from cells of its own choice, and stays empty when its choice has none. Every
/// level is rounded to one of [`CONTOUR_LEVELS`] bands, which draws filled contours.
pub(crate) fn contour_grid(
    best: &BTreeMap<(usize, usize), f64>,
    (nx, ny): (usize, usize),
    (cat_x, cat_y): (bool, bool),
) -> Vec<((usize, usize), f64)> {
    let mut ranked: Vec<f64> = best.values().copied().collect();
    ranked.sort_by(f64::total_cmp);
    let rank = |l: f64| {
        let i = ranked.partition_point(|x| *x < l);
        if ranked.len() > 1 {
            i as f64 / (ranked.len() - 1) as f64
        } else {
            0.0
        }
    };
    let filled: Vec<((usize, usize), f64)> = best.iter().map(|(&k, &l)| (k, rank(l))).collect();
    let band = |r: f64| (r * (CONTOUR_LEVELS - 1.0)).round() / (CONTOUR_LEVELS - 1.0);
    let mut out = Vec::with_capacity(nx * ny);
    for i in 0..nx {
        for j in 0..ny {
            if let Some(&l) = best.get(&(i, j)) {
                out.push(((i, j), band(rank(l))));
                continue;
            }
            let (mut num, mut den) = (0.0, 0.0);
            for &((fi, fj), r) in &filled {
                if (cat_x && fi != i) || (cat_y && fj != j) {
                    continue;
                }
                let dx = if cat_x { 0.0 } else { fi as f64 - i as f64 };
                let dy = if cat_y { 0.0 } else { fj as f64 - j as f64 };
                let w = 1.0 / (dx * dx + dy * dy);
                num += w * r;
                den += w;
            }
            if den > 0.0 {
                out.push(((i, j), band(num / den)));
            }
        }
    }
    out
}

/// The best [`BEST_N`] complete trials as lines across the most important parameters (up to
/// eight) and the objective, each axis spanning its parameter's range; darker is better.
pub fn parallel<DB: DrawingBackend>(
    view: &StudyView,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    let o = view.objective();
    let d = o.direction;
    let mut complete = view.complete();
    let title = format!(
        "parallel coordinates: the best {} of {} (darker is better)",
        complete.len().min(BEST_N),
        plural(complete.len(), "complete trial")
    );
    if complete.is_empty() {
        return empty(area, &title, NO_COMPLETE);
    }
    complete.sort_by(|a, b| d.loss(a.1).total_cmp(&d.loss(b.1)));
    complete.truncate(BEST_N);
    let axes: Vec<ParamAxis> = view
        .top_params(8)
        .iter()
        .filter_map(|n| view.axis(n).ok())
        .collect();
    let (vlo, vhi) = span_of(complete.iter().map(|c| c.1));
    let k = axes.len();
    let mut names: Vec<String> = axes.iter().map(ParamAxis::title).collect();
    names.push(o.metric.clone());
    let mut chart = ChartBuilder::on(area)
        .caption(&title, (FONT, 16))
        .margin(24)
        .x_label_area_size(30)
        .y_label_area_size(0)
        .build_cartesian_2d(-0.4..k as f64 + 0.4, -0.08..1.08)
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .light_line_style(LIGHT)
        .bold_line_style(BOLD)
        .disable_mesh()
        .disable_y_axis()
        .x_labels(k + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            names.get(i as usize).cloned().unwrap_or_default()
        })
        .label_style((FONT, 12))
        .draw()
        .map_err(draw_error)?;
    for i in 0..=k {
        chart
            .draw_series(LineSeries::new(
                [(i as f64, 0.0), (i as f64, 1.0)],
                INK.mix(0.6).stroke_width(1),
            ))
            .map_err(draw_error)?;
    }
    let n = complete.len();
    // The worst first, so the best lines are drawn last, on top.
    for (rank, (t, v)) in complete.iter().enumerate().rev() {
        let mut line: Vec<(f64, f64)> = Vec::new();
        let colour = ramp(if n > 1 {
            rank as f64 / (n - 1) as f64
        } else {
            0.0
        });
        let mut segments: Vec<Vec<(f64, f64)>> = Vec::new();
        for (i, ax) in axes.iter().enumerate() {
            let r = ax.range();
            match t.params.get(&ax.name).and_then(|p| ax.pos(p)) {
                Some(x) => line.push((i as f64, (x - r.start) / (r.end - r.start))),
                // An inactive conditional parameter breaks the line.
                None => segments.push(std::mem::take(&mut line)),
            }
        }
        line.push((k as f64, (v - vlo) / (vhi - vlo)));
        segments.push(line);
        for s in segments.into_iter().filter(|s| s.len() > 1) {
            chart
                .draw_series(LineSeries::new(s, colour.mix(0.8).stroke_width(1)))
                .map_err(draw_error)?;
        }
    }
    // Each axis's ends, written at its top and bottom.
    let style = TextStyle::from((FONT, 11).into_font()).color(&NOTE);
    for (i, ax) in axes.iter().enumerate() {
        let r = ax.range();
        let (lo, hi) = if ax.is_categorical() {
            (
                ax.label(0.0),
                ax.label(ax.choices().saturating_sub(1) as f64),
            )
        } else {
            (ax.label(r.start), ax.label(r.end))
        };
        for (text, y, v) in [(hi, 1.0, VPos::Bottom), (lo, 0.0, VPos::Top)] {
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    (i as f64, y),
                    style.pos(Pos::new(HPos::Center, v)),
                )))
                .map_err(draw_error)?;
        }
    }
    for (text, y, v) in [
        (Precision::LABEL.fmt(vhi), 1.0, VPos::Bottom),
        (Precision::LABEL.fmt(vlo), 0.0, VPos::Top),
    ] {
        chart
            .draw_series(std::iter::once(Text::new(
                text,
                (k as f64, y),
                style.pos(Pos::new(HPos::Center, v)),
            )))
            .map_err(draw_error)?;
    }
    Ok(())
}

/// One line of a curve chart: its legend label (none for context lines), colour and points.
type Line = (Option<String>, RGBAColor, Vec<(f64, f64)>);

/// Step → value lines on one chart.
fn curve_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    metric: &str,
    lines: &[Line],
    note_text: &str,
) -> Result<(), PlotError> {
    let (xlo, xhi) = span_of(lines.iter().flat_map(|l| l.2.iter().map(|p| p.0)));
    let (ylo, yhi) = span_of(lines.iter().flat_map(|l| l.2.iter().map(|p| p.1)));
    let mut chart = chart(area, title, xlo.max(0.0)..xhi, ylo..yhi, 70)?;
    chart
        .configure_mesh()
        .light_line_style(LIGHT)
        .bold_line_style(BOLD)
        .x_desc("step")
        .y_desc(metric)
        .y_label_formatter(&|y| Precision::LABEL.fmt(*y))
        .label_style((FONT, 12))
        .draw()
        .map_err(draw_error)?;
    let mut labelled = false;
    for (label, colour, pts) in lines {
        let colour = *colour;
        let s = chart
            .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(1)))
            .map_err(draw_error)?;
        if let Some(l) = label {
            labelled = true;
            s.label(l.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x - 8, y), (x + 8, y)], colour.stroke_width(2))
            });
        }
    }
    if labelled {
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    note(&mut chart, note_text)
}

/// A trial's curve as drawn: finite points, at most [`MAX_CURVE_POINTS`].
fn curve_of(view: &StudyView, t: &Trial) -> Vec<(f64, f64)> {
    let pts: Vec<(f64, f64)> = view
        .curves
        .get(&t.number)
        .map(|c| {
            c.iter()
                .filter(|p| p.1.is_finite())
                .map(|&(s, v)| (s as f64, v))
                .collect()
        })
        .unwrap_or_default();
    stride(&pts, MAX_CURVE_POINTS)
}

/// The learning curves of the best [`BEST_CURVES`] complete trials (darker is better).
pub fn curves_best<DB: DrawingBackend>(
    view: &StudyView,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    let o = view.objective();
    let d = o.direction;
    let title = format!(
        "learning curves of the best complete trials (`{}`)",
        o.metric
    );
    let mut complete = view.complete();
    if complete.is_empty() {
        return empty(area, &title, NO_COMPLETE);
    }
    complete.sort_by(|a, b| d.loss(a.1).total_cmp(&d.loss(b.1)));
    let best: Vec<_> = complete
        .iter()
        .filter(|(t, _)| !curve_of(view, t).is_empty())
        .take(BEST_CURVES)
        .collect();
    if best.is_empty() {
        return empty(
            area,
            &title,
            "no learning curves: the complete trials reported no intermediate values",
        );
    }
    let n = best.len();
    let lines: Vec<_> = best
        .iter()
        .enumerate()
        .rev()
        .map(|(k, (t, v))| {
            let c = ramp(if n > 1 {
                k as f64 / (n - 1) as f64 * 0.85
            } else {
                0.0
            });
            (
                Some(format!("#{}: {}", t.number, Precision::LABEL.fmt(*v))),
                c.mix(0.9),
                curve_of(view, t),
            )
        })
        .collect();
    curve_chart(area, &title, &o.metric, &lines, "")
}

/// The learning curves of pruned trials, coloured by the step they were stopped at (their
/// rung), over the best complete trials' curves in grey.
pub fn curves_pruned<DB: DrawingBackend>(
    view: &StudyView,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    let o = view.objective();
    let d = o.direction;
    let pruned_all: Vec<(&Trial, Vec<(f64, f64)>)> = view
        .trials
        .iter()
        .filter(|t| t.state() == TrialState::Pruned)
        .map(|t| (t, curve_of(view, t)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let title = format!(
        "learning curves of pruned trials by the step they stopped at (`{}`)",
        o.metric
    );
    if pruned_all.is_empty() {
        return empty(
            area,
            &title,
            if view.count(TrialState::Pruned) == 0 {
                "no pruned trials"
            } else {
                "no learning curves: the pruned trials reported no intermediate values"
            },
        );
    }
    let pruned = stride(&pruned_all, MAX_PRUNED_CURVES);
    let stop = |t: &Trial, c: &[(f64, f64)]| match &t.status {
        TrialStatus::Pruned { step: Some(s), .. } => *s,
        _ => c.last().map(|p| p.0 as u64).unwrap_or(0),
    };
    let mut rungs: Vec<u64> = pruned.iter().map(|(t, c)| stop(t, c)).collect();
    rungs.sort_unstable();
    rungs.dedup();
    let mut complete = view.complete();
    complete.sort_by(|a, b| d.loss(a.1).total_cmp(&d.loss(b.1)));
    let mut lines: Vec<Line> = complete
        .iter()
        .map(|(t, _)| curve_of(view, t))
        .filter(|c| !c.is_empty())
        .take(BEST_CURVES)
        .map(|c| (None, MERGED.mix(0.35), c))
        .collect();
    let mut labelled = std::collections::BTreeSet::new();
    const LEGEND_RUNGS: usize = 8;
    for (t, c) in &pruned {
        let s = stop(t, c);
        let r = rungs.binary_search(&s).unwrap_or(0);
        let colour = ramp(if rungs.len() > 1 {
            r as f64 / (rungs.len() - 1) as f64 * 0.9
        } else {
            0.0
        });
        let label = (labelled.len() < LEGEND_RUNGS && labelled.insert(s))
            .then(|| format!("stopped at step {s}"));
        lines.push((label, colour.mix(0.6), c.clone()));
    }
    let shown = if pruned.len() < pruned_all.len() {
        format!(
            "{} of {} pruned trials drawn (an even stride); grey: the best complete",
            pruned.len(),
            pruned_all.len()
        )
    } else {
        "grey: the best complete trials".to_string()
    };
    curve_chart(area, &title, &o.metric, &lines, &shown)
}

/// Whether loss vector `a` dominates `b` (no worse on every objective, better on one).
fn dominates(a: &[f64], b: &[f64]) -> bool {
    a.iter().zip(b).all(|(x, y)| x <= y) && a.iter().zip(b).any(|(x, y)| x < y)
}

/// The indices of the non-dominated rows of `losses` (sorted by the first loss, each checked
/// against the front so far only: fast when the front is small, as it is).
pub fn front(losses: &[Vec<f64>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..losses.len()).collect();
    order.sort_by(|&a, &b| {
        losses[a]
            .iter()
            .zip(&losses[b])
            .map(|(x, y)| x.total_cmp(y))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut out: Vec<usize> = Vec::new();
    for i in order {
        if !out
            .iter()
            .any(|&j| dominates(&losses[j], &losses[i]) || losses[j] == losses[i])
        {
            out.push(i);
        }
    }
    out
}

/// The first two objectives of a multi-objective study, every complete trial, its Pareto front
/// (over every objective) marked and, for two objectives, joined.
pub fn pareto<DB: DrawingBackend>(
    view: &StudyView,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    let objs = &view.objectives;
    if objs.len() < 2 {
        return empty(
            area,
            "Pareto front",
            "a single-objective study has no Pareto front",
        );
    }
    let title = format!(
        "Pareto front: `{}` ({}) against `{}` ({})",
        objs[0].metric,
        objs[0].direction.as_str(),
        objs[1].metric,
        objs[1].direction.as_str()
    );
    let first = &objs[0];
    let mut values: Vec<Vec<f64>> = Vec::new();
    let mut losses: Vec<Vec<f64>> = Vec::new();
    for t in &view.trials {
        if let TrialStatus::Complete { value, others, .. } = &t.status
            && let Some(l) = crate::trial::losses(first.direction, &objs[1..], *value, others)
        {
            values.push(
                std::iter::once(*value)
                    .chain(others.iter().copied())
                    .collect(),
            );
            losses.push(l);
        }
    }
    if values.is_empty() {
        return empty(area, &title, NO_COMPLETE);
    }
    let on = front(&losses);
    let mut is_front = vec![false; values.len()];
    for &i in &on {
        is_front[i] = true;
    }
    let rest: Vec<(f64, f64)> = values
        .iter()
        .zip(&is_front)
        .filter(|(_, f)| !**f)
        .map(|(v, _)| (v[0], v[1]))
        .collect();
    let rest_shown = stride(&rest, MAX_POINTS);
    let mut front_pts: Vec<(f64, f64)> = on.iter().map(|&i| (values[i][0], values[i][1])).collect();
    front_pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (xlo, xhi) = span_of(values.iter().map(|v| v[0]));
    let (ylo, yhi) = span_of(values.iter().map(|v| v[1]));
    let mut chart = chart(area, &title, xlo..xhi, ylo..yhi, 70)?;
    chart
        .configure_mesh()
        .light_line_style(LIGHT)
        .bold_line_style(BOLD)
        .x_desc(objs[0].metric.as_str())
        .y_desc(objs[1].metric.as_str())
        .x_label_formatter(&|x| Precision::LABEL.fmt(*x))
        .y_label_formatter(&|y| Precision::LABEL.fmt(*y))
        .label_style((FONT, 12))
        .draw()
        .map_err(draw_error)?;
    chart
        .draw_series(
            rest_shown
                .iter()
                .map(|&p| Circle::new(p, 2, COMPLETE.mix(0.45).filled())),
        )
        .map_err(draw_error)?
        .label(format!("dominated, {}", rest.len()))
        .legend(|(x, y)| Circle::new((x, y), 3, COMPLETE.mix(0.45).filled()));
    if objs.len() == 2 {
        chart
            .draw_series(LineSeries::new(
                front_pts.iter().copied(),
                FAILED.mix(0.6).stroke_width(1),
            ))
            .map_err(draw_error)?;
    }
    chart
        .draw_series(
            front_pts
                .iter()
                .map(|&p| Circle::new(p, 4, FAILED.filled())),
        )
        .map_err(draw_error)?
        .label(format!("Pareto front, {}", front_pts.len()))
        .legend(|(x, y)| Circle::new((x, y), 4, FAILED.filled()));
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    let mut notes = Vec::new();
    if objs.len() > 2 {
        notes.push(format!(
            "front over all {} objectives; the first two drawn",
            objs.len()
        ));
    }
    if rest_shown.len() < rest.len() {
        notes.push(format!(
            "{} of {} dominated trials drawn (an even stride)",
            rest_shown.len(),
            rest.len()
        ));
    }
    note(&mut chart, &notes.join("; "))
}

/// The most bars the timeline draws one per trial: past it, each slot's trials closer than a
/// pixel apart merge into one grey block (the idle gaps stay).
pub const MAX_BARS: usize = 3000;

/// One bar of the timeline: seconds from the first start, the state's colour.
#[derive(Debug, Clone, PartialEq)]
struct Bar {
    from: f64,
    to: f64,
    colour: RGBColor,
}

/// The slot a trial ran on, as a label: `host w3 slot 0 (cuda:0)`, as much as is known.
fn lane(t: &Trial) -> Option<String> {
    let at = t.status.placement()?;
    let mut parts: Vec<String> = Vec::new();
    if let Some(h) = &at.host {
        parts.push(h.clone());
    }
    if let Some(w) = at.worker {
        parts.push(format!("w{}", w.0));
    }
    if let Some(s) = at.slot {
        parts.push(format!("slot {s}"));
    }
    if let Some(d) = &at.device {
        parts.push(format!("({d})"));
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// Which trial ran on which slot and when, coloured by how it ended; idle time is white.
pub fn timeline<DB: DrawingBackend>(
    view: &StudyView,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    let started: Vec<&Trial> = view
        .trials
        .iter()
        .filter(|t| t.status.started().is_some())
        .collect();
    let Some(t0) = started.iter().filter_map(|t| t.status.started()).min() else {
        return empty(area, "slot timeline", "no trial has started yet");
    };
    let secs = |at: std::time::SystemTime| {
        at.duration_since(t0)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    };
    let mut lanes: BTreeMap<String, Vec<Bar>> = BTreeMap::new();
    let mut unplaced = 0usize;
    for t in &started {
        let Some(name) = lane(t) else {
            unplaced += 1;
            continue;
        };
        let Some(from) = t.status.started().map(secs) else {
            continue;
        };
        let (end, colour) = match t.state() {
            TrialState::Running => (Some(view.now), RUNNING),
            TrialState::Complete => (t.status.finished(), COMPLETE),
            TrialState::Pruned => (t.status.finished(), PRUNED),
            _ => (t.status.finished(), FAILED),
        };
        // A finished trial without an end (another tool's database) is drawn as an instant.
        let to = end.map(secs).unwrap_or(from).max(from);
        lanes
            .entry(name)
            .or_default()
            .push(Bar { from, to, colour });
    }
    if lanes.is_empty() {
        return empty(
            area,
            "slot timeline",
            "no trial records where it ran (a study from another tool)",
        );
    }
    let end = lanes
        .values()
        .flatten()
        .map(|b| b.to)
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let mut busy = 0.0;
    for bars in lanes.values_mut() {
        bars.sort_by(|a, b| a.from.total_cmp(&b.from));
        let mut reach = f64::NEG_INFINITY;
        for b in bars.iter() {
            let from = b.from.max(reach);
            if b.to > from {
                busy += b.to - from;
            }
            reach = reach.max(b.to);
        }
    }
    let idle = 1.0 - busy / (end * lanes.len() as f64);
    let total: usize = lanes.values().map(Vec::len).sum();
    let merged = total > MAX_BARS;
    if merged {
        let pixel = end / 900.0;
        for bars in lanes.values_mut() {
            let mut out: Vec<Bar> = Vec::new();
            for b in bars.drain(..) {
                match out.last_mut() {
                    Some(last) if b.from - last.to < pixel => {
                        last.to = last.to.max(b.to);
                        last.colour = MERGED;
                    }
                    _ => out.push(b),
                }
            }
            *bars = out;
        }
    }
    let names: Vec<String> = lanes.keys().cloned().collect();
    let n = names.len();
    let title = format!(
        "slot timeline: {} on {} over {}; slots idle {:.0} % of the time",
        plural(started.len(), "trial"),
        plural(n, "slot"),
        crate::fmt::fmt_duration(std::time::Duration::from_secs(end as u64)),
        idle.max(0.0) * 100.0
    );
    let longest = names.iter().map(|s| s.chars().count()).max().unwrap_or(4);
    let left = (longest as u32 * 7 + 16).clamp(60, 260);
    let mut chart = chart(area, &title, 0.0..end * 1.02, -0.6..n as f64 - 0.4, left)?;
    let label = |y: &f64| {
        let i = y.round();
        if (y - i).abs() > 1e-6 || i < 0.0 {
            return String::new();
        }
        names.get(i as usize).cloned().unwrap_or_default()
    };
    chart
        .configure_mesh()
        .light_line_style(LIGHT)
        .bold_line_style(BOLD)
        .disable_y_mesh()
        .y_labels(n.clamp(1, 40))
        .y_label_formatter(&label)
        .x_label_formatter(&|x| crate::fmt::fmt_duration(std::time::Duration::from_secs(*x as u64)))
        .x_desc("time since the first trial started")
        .label_style((FONT, 11))
        .draw()
        .map_err(draw_error)?;
    for (i, bars) in lanes.values().enumerate() {
        let y = i as f64;
        chart
            .draw_series(bars.iter().map(|b| {
                // A bar narrower than a pixel is drawn a pixel wide, so a short trial shows;
                // a wider one loses a pixel at its end, so back-to-back trials stay apart.
                let px = end / 850.0;
                let to = if b.to - b.from > 2.0 * px {
                    b.to - px
                } else {
                    b.from + px
                };
                Rectangle::new([(b.from, y - 0.38), (to, y + 0.38)], b.colour.filled())
            }))
            .map_err(draw_error)?;
    }
    let used = |c: RGBColor| lanes.values().flatten().any(|b| b.colour == c);
    for (label, colour) in [
        ("complete", COMPLETE),
        ("pruned", PRUNED),
        ("failed", FAILED),
        ("running", RUNNING),
    ] {
        if !used(colour) {
            continue;
        }
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), u32>>())
            .map_err(draw_error)?
            .label(label)
            .legend(move |(x, y)| {
                Rectangle::new([(x - 6, y - 4), (x + 6, y + 4)], colour.filled())
            });
    }
    if used(MERGED) {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), u32>>())
            .map_err(draw_error)?
            .label("several trials (merged)")
            .legend(|(x, y)| Rectangle::new([(x - 6, y - 4), (x + 6, y + 4)], MERGED.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    let mut notes = Vec::new();
    if merged {
        notes.push(format!(
            "{total} trials: those less than a pixel apart on a slot merged into grey blocks"
        ));
    }
    if unplaced > 0 {
        notes.push(format!(
            "{} without a recorded slot not drawn",
            plural(unplaced, "trial")
        ));
    }
    note(&mut chart, &notes.join("; "))
}

/// How many failure reasons get their own bar; the rest are summed as "other".
const REASONS_SHOWN: usize = 12;

/// A failed trial's reason as grouped: its first line, interrupted ones apart, cut to 70
/// characters.
pub fn reason_key(t: &Trial) -> Option<String> {
    let reason = t.status.reason()?;
    let first = reason.lines().next().unwrap_or("").trim();
    let mut key: String = first.chars().take(70).collect();
    if first.chars().count() > 70 {
        key.push('…');
    }
    if key.is_empty() {
        key = "(no reason recorded)".into();
    }
    Some(key)
}

/// The failed trials counted by reason (interrupted ones too: a crashed machine is a reason).
pub fn failure_counts(view: &StudyView) -> Vec<(String, f64)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in &view.trials {
        if let Some(k) = reason_key(t) {
            *counts.entry(k).or_default() += 1;
        }
    }
    let mut rows: Vec<(String, usize)> = counts.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut out: Vec<(String, f64)> = rows
        .iter()
        .take(REASONS_SHOWN)
        .map(|(k, n)| (k.clone(), *n as f64))
        .collect();
    let other: usize = rows.iter().skip(REASONS_SHOWN).map(|r| r.1).sum();
    if other > 0 {
        out.push(("(other reasons)".into(), other as f64));
    }
    out
}

/// How many trials failed for each reason.
pub fn failures<DB: DrawingBackend>(
    view: &StudyView,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    let n = view.count(TrialState::Failed);
    let title = format!("failures by reason ({})", plural(n, "failed trial"));
    let rows = failure_counts(view);
    if rows.is_empty() {
        return empty(area, &title, "no failed trials");
    }
    bars(area, &title, "trials", &rows, FAILED, |v| format!("{v:.0}"))
}
