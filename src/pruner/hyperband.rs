//! Hyperband (Li et al. 2018) over asynchronous successive-halving brackets, as Optuna's
//! `HyperbandPruner` runs it.
//!
//! With `s_max = ⌊log_η(max_resource / min_resource)⌋` there are `s_max + 1` brackets (or the
//! `brackets` most aggressive ones); bracket `b` is ASHA with minimum early-stopping rate `b`,
//! so bracket 0 judges trials from `min_resource` on and the last one barely prunes. Bracket
//! `b` gets a share of trials proportional to the paper's `n = ⌈(s_max+1) η^s / (s+1)⌉` with
//! `s = s_max − b`. A trial's bracket follows from its trial number alone, by Fibonacci
//! hashing (`number · 2^64/φ`, whose fractional parts spread evenly), so every run and every
//! resume puts a trial in the same bracket without storing it, and trials compete only with
//! trials of their own bracket. The `[pruner]` keys are in [`super::HyperbandConfig`].

use super::asha::{Rungs, rung_resource};
use super::{HyperbandConfig, PruneContext, Pruner, reached};
use crate::trial::TrialNumber;

/// `⌊log_η(max / min)⌋ + 1`, counted by multiplication so that `max = min · η^k` exactly is
/// not lost to a logarithm's rounding.
pub(crate) fn bracket_count(min: f64, max: f64, eta: f64) -> u32 {
    let mut s_max = 0;
    // 63 brackets at most, like the rung ladder: bounds the loop for unchecked values.
    while s_max < 63 && reached(max, rung_resource(min, eta, s_max + 1)) && eta > 1.0 {
        s_max += 1;
    }
    s_max + 1
}

pub struct HyperbandPruner {
    /// Bracket `b`'s ladder and its share of trials.
    brackets: Vec<(Rungs, f64)>,
    total: f64,
}

impl HyperbandPruner {
    pub fn new(config: &HyperbandConfig) -> HyperbandPruner {
        let eta = config.reduction_factor;
        let all = config
            .max_resource
            .map_or(1, |max| bracket_count(config.min_resource, max, eta));
        let used = config.brackets.map_or(all, |b| b.clamp(1, all));
        let brackets: Vec<(Rungs, f64)> = (0..used)
            .map(|b| {
                let s = all - 1 - b;
                let n =
                    all as f64 * eta.powi(i32::try_from(s).unwrap_or(i32::MAX)) / (s as f64 + 1.0);
                let rungs = Rungs {
                    min_resource: config.min_resource,
                    max_resource: config.max_resource,
                    eta,
                    min_early_stopping_rate: b,
                };
                (rungs, n.ceil())
            })
            .collect();
        let total = brackets.iter().map(|(_, w)| w).sum();
        HyperbandPruner { brackets, total }
    }

    /// The bracket of a trial: its Fibonacci hash's place in [0, 1), scaled by the shares.
    pub fn bracket_of(&self, trial: TrialNumber) -> usize {
        let u = trial.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) as f64 / 18_446_744_073_709_551_616.0;
        let mut target = u * self.total;
        for (b, (_, share)) in self.brackets.iter().enumerate() {
            if target < *share {
                return b;
            }
            target -= share;
        }
        self.brackets.len().saturating_sub(1)
    }

    /// The number of brackets in use.
    pub fn brackets(&self) -> usize {
        self.brackets.len()
    }
}

impl Pruner for HyperbandPruner {
    fn should_prune(&mut self, ctx: &PruneContext<'_>) -> bool {
        let b = self.bracket_of(ctx.trial);
        let Some((rungs, _)) = self.brackets.get(b) else {
            return false;
        };
        rungs.should_prune(ctx, |t| self.bracket_of(t) == b)
    }
}
