//! Figures of a study (`tune plot`, `tune report`): the optimization history, importance, slices,
//! a contour, parallel coordinates, learning curves, the Pareto front, the slot timeline and the
//! failures, drawn with `plotters` into SVG text or PNG bytes.
//!
//! This room turns a [`StudyView`] (trials, their learning curves and the space, read by
//! `commands/`) into pictures. It does no I/O and reads no clock: the view carries the `now` a
//! running trial's bar ends at, and the caller writes the bytes where the user asked. Every
//! figure has an honest empty form ("no complete trials yet") instead of an error, and every
//! figure stays small at 10 000 trials by the one downsampling rule of [`thin`].

mod axis;
mod figures;

use std::collections::BTreeMap;
use std::sync::Once;
use std::time::SystemTime;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::insight::ped_anova::PedAnova;
use crate::insight::{self, Importance};
use crate::space::{Param, Space};
use crate::trial::{Direction, Objective, Trial, TrialNumber, TrialState};

pub use axis::ParamAxis;

/// The most points one scatter draws: past it, [`thin`] keeps the best half and an even stride of
/// the rest. 2 000 circles keep an SVG under ~200 kB and a browser's paint instant, and are more
/// than a 900-pixel-wide plot can tell apart.
pub const MAX_POINTS: usize = 2000;

/// How many of the best complete trials the parallel coordinates and the "best" learning curves
/// draw by default.
pub const BEST_N: usize = 50;

/// How many best learning curves are drawn: more than ten lines of one colour scale stop being
/// told apart.
pub const BEST_CURVES: usize = 10;

/// The most pruned trials' curves drawn (an even stride past it, as [`thin`] does).
pub const MAX_PRUNED_CURVES: usize = 300;

/// The most points of one learning curve (an even stride of its reports past it, last kept).
pub const MAX_CURVE_POINTS: usize = 200;

/// How many of the most important parameters get a slice plot in the report.
pub const TOP_PARAMS: usize = 4;

/// A figure that could not be made. Drawing itself fails only on a bug or a font that cannot be
/// read; what the user can get wrong (a parameter the study does not have) is its own kind.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlotError {
    #[error("the study has no parameter `{name}` (it has {known})")]
    NoParam { name: String, known: String },
    #[error("drawing failed: {0}")]
    Draw(String),
}

/// One figure, with what it needs beyond the view.
#[derive(Debug, Clone, PartialEq)]
pub enum Figure {
    /// Each trial's objective by trial number, and the best so far.
    History,
    /// Each parameter's PED-ANOVA share for the first objective.
    Importance,
    /// The objective against each named parameter (the top [`TOP_PARAMS`] when empty).
    Slice(Vec<String>),
    /// The best objective over a grid of two parameters (the two most important when `None`).
    Contour(Option<(String, String)>),
    /// The best [`BEST_N`] complete trials across every parameter and the objective.
    Parallel,
    /// The learning curves of the best [`BEST_CURVES`] complete trials.
    CurvesBest,
    /// The learning curves of pruned trials, coloured by the step (rung) they stopped at.
    CurvesPruned,
    /// The first two objectives of a multi-objective study, its Pareto front marked.
    Pareto,
    /// Which trial ran on which slot, and when; idle gaps are white.
    Timeline,
    /// How many trials failed for each reason.
    Failures,
}

/// What the figures read: a study's trials (not discarded), their learning curves, the space
/// and the clock's `now`, with the first objective's importances worked out once.
#[derive(Debug, Clone)]
pub struct StudyView {
    pub name: String,
    pub objectives: Vec<Objective>,
    /// The study's space (`None` while no trial of a study stored without one has params).
    pub space: Option<Space>,
    /// The trials that count, by number (discarded ones are left out: they are not data).
    pub trials: Vec<Trial>,
    /// How many trials `tune discard` set aside (said in the summary, drawn nowhere).
    pub discarded: usize,
    /// Each trial's objective by step, from its intermediate reports.
    pub curves: BTreeMap<TrialNumber, Vec<(u64, f64)>>,
    /// The first objective's PED-ANOVA shares, highest first (empty without complete trials).
    pub importances: Vec<(String, f64)>,
    /// Where a running trial's bar ends.
    pub now: SystemTime,
}

impl StudyView {
    /// The view of `trials` (discarded ones are counted and dropped). `space` is the study's
    /// own, or `None` to read it from the trials (an ask-tell study stored without a file).
    pub fn new(
        name: &str,
        objectives: Vec<Objective>,
        space: Option<Space>,
        trials: Vec<Trial>,
        curves: BTreeMap<TrialNumber, Vec<(u64, f64)>>,
        now: SystemTime,
    ) -> StudyView {
        let discarded = trials.iter().filter(|t| t.discarded).count();
        let trials: Vec<Trial> = trials.into_iter().filter(|t| !t.discarded).collect();
        let space = space.or_else(|| insight::infer_space(&trials));
        let directions: Vec<Direction> = objectives.iter().map(|o| o.direction).collect();
        let importances = match insight::observations(&trials, &directions, 0) {
            Ok(obs) if !obs.is_empty() => match &space {
                Some(space) => PedAnova::default().importances(space, &obs),
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
        StudyView {
            name: name.to_string(),
            objectives,
            space,
            trials,
            discarded,
            curves,
            importances,
            now,
        }
    }

    /// The first objective (a study always has one; a default stands in for a malformed view).
    pub fn objective(&self) -> Objective {
        self.objectives.first().cloned().unwrap_or(Objective {
            metric: "value".into(),
            direction: Direction::Minimize,
        })
    }

    /// The complete trials with a finite first objective, with it.
    pub fn complete(&self) -> Vec<(&Trial, f64)> {
        self.trials
            .iter()
            .filter(|t| t.state() == TrialState::Complete)
            .filter_map(|t| t.value().filter(|v| v.is_finite()).map(|v| (t, v)))
            .collect()
    }

    /// How many trials are in `state`.
    pub fn count(&self, state: TrialState) -> usize {
        self.trials.iter().filter(|t| t.state() == state).count()
    }

    /// The `n` most important parameters (importance order; the space's order without one).
    pub fn top_params(&self, n: usize) -> Vec<String> {
        let mut names: Vec<String> = self.importances.iter().map(|(p, _)| p.clone()).collect();
        for p in self.params() {
            if !names.contains(&p.name) {
                names.push(p.name.clone());
            }
        }
        names.truncate(n);
        names
    }

    /// The space's parameters (none without a space).
    pub fn params(&self) -> &[Param] {
        self.space.as_ref().map(Space::params).unwrap_or(&[])
    }

    /// The axis of parameter `name`, or the error that names the parameters there are.
    pub fn axis(&self, name: &str) -> Result<ParamAxis, PlotError> {
        match self.params().iter().find(|p| p.name == name) {
            Some(p) => Ok(ParamAxis::of(p)),
            None => Err(PlotError::NoParam {
                name: name.to_string(),
                known: if self.params().is_empty() {
                    "none yet".to_string()
                } else {
                    self.params()
                        .iter()
                        .map(|p| format!("`{}`", p.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            }),
        }
    }
}

/// At most `max` of `items`, in their order: all when they fit; else the best `max / 2` by
/// `loss` (lower is better) and an even stride of the rest. The best trials are what a user
/// looks for and are never dropped; the stride keeps the shape of the rest. Deterministic.
pub fn thin<T: Clone>(items: &[T], loss: impl Fn(&T) -> f64, max: usize) -> Vec<T> {
    if items.len() <= max {
        return items.to_vec();
    }
    let best_n = max / 2;
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| loss(&items[a]).total_cmp(&loss(&items[b])).then(a.cmp(&b)));
    let mut keep = vec![false; items.len()];
    for &i in &order[..best_n] {
        keep[i] = true;
    }
    let rest: Vec<usize> = (0..items.len()).filter(|&i| !keep[i]).collect();
    let room = max - best_n;
    let stride = rest.len().div_ceil(room.max(1));
    for &i in rest.iter().step_by(stride.max(1)) {
        keep[i] = true;
    }
    items
        .iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(t, _)| t.clone())
        .collect()
}

/// At most `max` of `items`, an even stride in their order, the last always kept (the end of a
/// learning curve is what it reached).
pub fn stride<T: Clone>(items: &[T], max: usize) -> Vec<T> {
    if items.len() <= max || max < 2 {
        return items.to_vec();
    }
    let step = (items.len() - 1).div_ceil(max - 1);
    let mut out: Vec<T> = items.iter().step_by(step).cloned().collect();
    if !(items.len() - 1).is_multiple_of(step)
        && let Some(last) = items.last()
    {
        out.push(last.clone());
    }
    out
}

/// The font every figure writes with, shipped in the binary (DejaVu Sans, `assets/fonts/`): the
/// PNG backend rasterises with it and the SVG backend measures its labels with it, so neither
/// needs a system font or fontconfig at run time.
fn register_fonts() {
    static FONTS: Once = Once::new();
    FONTS.call_once(|| {
        const DEJAVU: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
        // A font compiled into the binary that does not parse is a build fault, seen by every
        // test that draws; the figures then fail with `Draw`, never a panic.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, DEJAVU);
    });
}

/// The default size of a figure, in pixels.
pub const SIZE: (u32, u32) = (900, 520);

/// `figure` as an SVG document of `size` pixels.
pub fn svg(view: &StudyView, figure: &Figure, size: (u32, u32)) -> Result<String, PlotError> {
    register_fonts();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        draw(view, figure, &root)?;
        root.present().map_err(draw_error)?;
    }
    Ok(out)
}

/// `figure` as a PNG image of `size` pixels.
pub fn png(view: &StudyView, figure: &Figure, size: (u32, u32)) -> Result<Vec<u8>, PlotError> {
    register_fonts();
    let (w, h) = size;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        draw(view, figure, &root)?;
        root.present().map_err(draw_error)?;
    }
    let mut bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut bytes, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        // Figures are flat colours: the best compression makes them several times smaller.
        enc.set_compression(png::Compression::Best);
        let mut writer = enc.write_header().map_err(draw_error)?;
        writer.write_image_data(&rgb).map_err(draw_error)?;
    }
    Ok(bytes)
}

/// Draws `figure` onto `area` (white first).
pub fn draw<DB: DrawingBackend>(
    view: &StudyView,
    figure: &Figure,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError> {
    area.fill(&WHITE).map_err(draw_error)?;
    match figure {
        Figure::History => figures::history(view, area),
        Figure::Importance => figures::importance(view, area),
        Figure::Slice(names) => {
            let names = if names.is_empty() {
                view.top_params(TOP_PARAMS)
            } else {
                names.clone()
            };
            let axes = names
                .iter()
                .map(|n| view.axis(n))
                .collect::<Result<Vec<_>, _>>()?;
            figures::slices(view, &axes, area)
        }
        Figure::Contour(pair) => {
            let (a, b) = match pair {
                Some((a, b)) => (view.axis(a)?, view.axis(b)?),
                None => {
                    let top = view.top_params(2);
                    match top.as_slice() {
                        [a, b] => (view.axis(a)?, view.axis(b)?),
                        _ => {
                            return figures::empty(
                                area,
                                "contour",
                                "a contour needs two parameters; this study has fewer",
                            );
                        }
                    }
                }
            };
            figures::contour(view, &a, &b, area)
        }
        Figure::Parallel => figures::parallel(view, area),
        Figure::CurvesBest => figures::curves_best(view, area),
        Figure::CurvesPruned => figures::curves_pruned(view, area),
        Figure::Pareto => figures::pareto(view, area),
        Figure::Timeline => figures::timeline(view, area),
        Figure::Failures => figures::failures(view, area),
    }
}

pub(crate) fn draw_error(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

#[cfg(test)]
mod tests;
