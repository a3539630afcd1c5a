//! The charts' axes: which range of values they show (outliers clipped on the bad side) and
//! how their labels read.

use ratatui::text::Span;

use crate::fmt::Precision;
use crate::trial::Direction;

/// The y range that shows the bulk of the values. Outliers on the bad side (above the range
/// for a loss, below it for an accuracy) are clipped to the edge, so one diverged trial does
/// not flatten every other point; the good side is never clipped, since the best value lies
/// there. An outlier is a value past Tukey's far-out fence, three interquartile ranges beyond
/// the quartile: quartiles rather than the 5th and 95th percentiles, because with a dozen
/// trials those percentiles are the outliers themselves. Values that are all positive never
/// get a negative bound (a loss axis that goes below zero reads as a negative loss).
pub(super) fn robust_bounds(values: &mut [f64], dir: Direction) -> [f64; 2] {
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

pub(super) fn axis_labels(b: [f64; 2], integer: bool) -> Vec<Span<'static>> {
    let f = |v: f64| {
        if integer {
            format!("{}", v.round() as i64)
        } else {
            Precision::LABEL.fmt(v)
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
pub(super) fn value_labels(b: [f64; 2], log: bool) -> Vec<Span<'static>> {
    let f = |y: f64| Precision::LABEL.fmt(if log { 10f64.powf(y) } else { y });
    vec![
        Span::raw(f(b[0])),
        Span::raw(f((b[0] + b[1]) / 2.0)),
        Span::raw(f(b[1])),
    ]
}
