//! The median stopping rule (Golovin et al. 2017, "Google Vizier"; Optuna's `MedianPruner`).
//!
//! A trial whose latest report stands at resource `r` is judged when `r` has passed the warm-up
//! and has crossed into a new `interval` since its previous report. It is pruned when its best
//! value so far is strictly worse than the median of the best values that the other complete
//! trials had reached by the same resource `r` (their best over reports at or below `r`,
//! counting only trials whose reports reach `r`), provided at least `min_trials` such trials
//! exist. Only complete trials are the yardstick, as in Optuna: pruned trials would drag the
//! median towards the losers, and running ones would make the answer depend on which worker
//! happened to report first. A trial whose every value so far is NaN is pruned at its first
//! judgement past warm-up, before any yardstick exists, since it cannot win. Everything is
//! computed from the stored reports; the `[pruner]` keys are in [`super::MedianConfig`].

use std::cmp::Ordering;

use super::{MedianConfig, Point, PruneContext, Pruner, TrialCurve, cmp_loss, reached};
use crate::trial::TrialState;

pub struct MedianPruner {
    warmup: f64,
    min_trials: usize,
    interval: f64,
}

impl MedianPruner {
    pub fn new(config: &MedianConfig) -> MedianPruner {
        MedianPruner {
            warmup: config.warmup_steps,
            // A median needs a value: zero would read as one.
            min_trials: config.min_trials.max(1),
            interval: config.interval,
        }
    }

    /// Which interval after warm-up a resource falls in. The slack keeps `0.3 / 0.1`, which is
    /// `2.9999999999999996` in floating point, in interval 3.
    fn slot(&self, resource: f64) -> f64 {
        ((resource - self.warmup) / self.interval + 1e-9).floor()
    }

    /// Whether the trial's latest report is a judgement point.
    fn judged_now(&self, before: Option<f64>, now: f64) -> bool {
        if !reached(now, self.warmup) {
            return false;
        }
        match before {
            // The first report past warm-up is always judged.
            Some(b) if reached(b, self.warmup) => self.slot(now) > self.slot(b),
            _ => true,
        }
    }
}

/// A complete trial's best loss over its reports at or below `r`, if its reports reach `r`.
fn best_by(ctx: &PruneContext<'_>, t: &TrialCurve, r: f64) -> Option<f64> {
    let mut best: Option<f64> = None;
    let mut reaches = false;
    for p in ctx.curve(&t.reports) {
        if reached(p.resource, r) {
            reaches = true;
        }
        if reached(r, p.resource) {
            best = Some(match best {
                Some(b) if cmp_loss(b, p.loss) != Ordering::Greater => b,
                _ => p.loss,
            });
        }
    }
    best.filter(|_| reaches)
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(|a, b| cmp_loss(*a, *b));
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        // NaN, the worst, stays NaN here: `cmp_loss` then ranks the median worst.
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

impl Pruner for MedianPruner {
    fn should_prune(&mut self, ctx: &PruneContext<'_>) -> bool {
        let own: Vec<Point> = ctx.curve(ctx.own()).collect();
        let Some((last, earlier)) = own.split_last() else {
            return false;
        };
        let before = earlier
            .iter()
            .map(|p| p.resource)
            .max_by(|a, b| a.total_cmp(b));
        if !self.judged_now(before, last.resource) {
            return false;
        }
        let r = last.resource;
        let Some(mine) = own
            .iter()
            .filter(|p| reached(r, p.resource))
            .map(|p| p.loss)
            .min_by(|a, b| cmp_loss(*a, *b))
        else {
            return false;
        };
        if mine.is_nan() {
            return true;
        }
        let yardstick: Vec<f64> = ctx
            .trials
            .iter()
            .filter(|t| t.number != ctx.trial && t.state == TrialState::Complete)
            .filter_map(|t| best_by(ctx, t, r))
            .collect();
        if yardstick.len() < self.min_trials {
            return false;
        }
        median(yardstick).is_some_and(|m| cmp_loss(mine, m) == Ordering::Greater)
    }
}
