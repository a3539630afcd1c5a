//! A parameter as an axis: where a value sits (log scales as their logarithm, a categorical
//! parameter's choices at 0, 1, 2, …) and how a position is labelled. Every figure plots on plain
//! `f64` coordinates through this, so one chart type serves log, linear and categorical axes.

use std::ops::Range;

use crate::fmt::Precision;
use crate::space::{Param, ParamKind, ParamValue};

/// The most values of an integer parameter that get a cell each in a contour (more are binned
/// like a float).
pub const MAX_LEVELS: i64 = 20;

#[derive(Debug, Clone, PartialEq)]
enum Scale {
    Linear,
    /// Positions are `log10` of the value.
    Log,
    /// Positions are the choice's index.
    Categorical(Vec<ParamValue>),
}

/// One parameter's axis.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamAxis {
    pub name: String,
    scale: Scale,
    /// A linear integer parameter with few values: its lowest value, its step and how many
    /// values it has (a contour gives each value its own cell).
    levels: Option<(f64, f64, usize)>,
    /// The positions the axis spans (padded so no point sits on its edge).
    lo: f64,
    hi: f64,
}

impl ParamAxis {
    pub fn of(p: &Param) -> ParamAxis {
        let (scale, lo, hi) = match &p.kind {
            ParamKind::Float {
                low,
                high,
                log: true,
                ..
            } if *low > 0.0 => (Scale::Log, low.log10(), high.log10()),
            ParamKind::Int {
                low,
                high,
                log: true,
                ..
            } if *low > 0 => (Scale::Log, (*low as f64).log10(), (*high as f64).log10()),
            ParamKind::Float { low, high, .. } => (Scale::Linear, *low, *high),
            ParamKind::Int { low, high, .. } => (Scale::Linear, *low as f64, *high as f64),
            ParamKind::Categorical { choices } => (
                Scale::Categorical(choices.clone()),
                -0.5,
                choices.len().max(1) as f64 - 0.5,
            ),
        };
        let levels = match &p.kind {
            ParamKind::Int {
                low,
                high,
                log: false,
                step,
            } if *step > 0 && high >= low => {
                let n = (high - low) / step + 1;
                (n <= MAX_LEVELS).then_some((*low as f64, *step as f64, n as usize))
            }
            _ => None,
        };
        let (lo, hi) = match levels {
            // Half a step beyond each end, so the end values' cells are whole.
            Some((l, s, n)) => (l - s / 2.0, l + s * (n as f64 - 0.5)),
            None => pad(lo, hi),
        };
        ParamAxis {
            name: p.name.clone(),
            scale,
            levels,
            lo,
            hi,
        }
    }

    /// A linear integer axis's (lowest value, step, count) when it has at most [`MAX_LEVELS`].
    pub fn levels(&self) -> Option<(f64, f64, usize)> {
        self.levels
    }

    pub fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }

    pub fn is_categorical(&self) -> bool {
        matches!(self.scale, Scale::Categorical(_))
    }

    /// How many choices a categorical axis has (0 for a numeric one).
    pub fn choices(&self) -> usize {
        match &self.scale {
            Scale::Categorical(c) => c.len(),
            _ => 0,
        }
    }

    /// Where `v` sits; `None` for a value the axis cannot place (a string on a numeric axis, a
    /// non-positive value on a log axis, a choice the space does not list).
    pub fn pos(&self, v: &ParamValue) -> Option<f64> {
        match &self.scale {
            Scale::Linear => v.as_f64().filter(|x| x.is_finite()),
            Scale::Log => v
                .as_f64()
                .filter(|x| *x > 0.0 && x.is_finite())
                .map(f64::log10),
            Scale::Categorical(c) => c.iter().position(|x| x.same(v)).map(|i| i as f64),
        }
    }

    /// The label of position `x`: the value (a log axis's `10^x`), or a categorical axis's
    /// choice at whole positions (nothing between them).
    pub fn label(&self, x: f64) -> String {
        match &self.scale {
            Scale::Linear => Precision::LABEL.fmt(x),
            Scale::Log => Precision::LABEL.fmt(10f64.powf(x)),
            Scale::Categorical(c) => {
                let i = x.round();
                if (x - i).abs() > 1e-6 || i < 0.0 {
                    return String::new();
                }
                c.get(i as usize).map(|v| v.to_string()).unwrap_or_default()
            }
        }
    }

    /// The axis's name with its scale when that is not plain (`lr (log)`).
    pub fn title(&self) -> String {
        match self.scale {
            Scale::Log => format!("{} (log)", self.name),
            _ => self.name.clone(),
        }
    }

    /// How many tick labels suit the axis: one per choice on a categorical axis.
    pub fn ticks(&self) -> usize {
        match &self.scale {
            Scale::Categorical(c) => c.len().max(1),
            _ => 6,
        }
    }
}

/// `lo..hi` widened by 4 % each side (a point on the edge is hidden under the frame), and to a
/// unit span when empty (a parameter with one value).
pub fn pad(lo: f64, hi: f64) -> (f64, f64) {
    if !(lo.is_finite() && hi.is_finite()) {
        return (0.0, 1.0);
    }
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
    let span = hi - lo;
    if span <= f64::EPSILON * lo.abs().max(1.0) {
        let half = (lo.abs() * 0.1).max(0.5);
        return (lo - half, hi + half);
    }
    (lo - span * 0.04, hi + span * 0.04)
}

/// The padded span of `values` (finite ones; `0..1` when there are none).
pub fn span_of(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in values.into_iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return (0.0, 1.0);
    }
    pad(lo, hi)
}
