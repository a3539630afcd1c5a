//! The Gaussian-process sampler: the default Bayesian optimizer of `tune`.
//!
//! Per ask: the history becomes features (`kernel`: mixed space, inactive params without
//! invented values) and robustly transformed losses; Matérn-5/2 hyper-parameters are fitted by
//! MAP with L-BFGS from several starts (`fit`); pending trials enter as kriging-believer
//! fantasies; log expected improvement is maximised by a Sobol sweep, local perturbations of
//! the best trials, L-BFGS on continuous floats and a coordinate search on discrete params
//! (`acquisition`). Low-cardinality integers and categoricals (`discrete`) get every value
//! substituted into the best points, the best point of each value refined on its own, and an
//! exploration floor that no value can be starved below. The first trials are a scrambled
//! Sobol design. Learning curves count from the first reports on: while fewer than two trials
//! are complete (a pruner stopped the rest), the model learns the trials' values at the highest
//! rung that three of them reached and proposes the best configuration there (`model`); once
//! trials complete, a pruned trial enters at the forecast of its final value from its curve.
//!
//! The sampler holds one cache, the last fitted hyper-parameters, used as a warm start: a
//! sampler rebuilt from the history (a resumed study) works the same way, only from a cold
//! start. Studies beyond [`GpPolicy::max_points`] finished trials are modelled on a subset
//! (the best half plus an even spread of the rest), which bounds the cost of an ask smoothly.
//!
//! Layout: this file holds the options a study sets and the [`Sampler`] impl; `policy` the
//! tuned rules ([`GpPolicy`]); `model` the model stage; `propose` the single-objective ask as
//! named stages (model → incumbent → side models → focus → candidates → refine → pick);
//! `multi` the multi-objective ask.

mod acquisition;
mod cost;
mod discrete;
mod ehvi;
mod feasibility;
mod fit;
mod kernel;
mod model;
mod multi;
mod policy;
mod propose;

use super::{AskContext, Exploration, Phase, RandomSampler, Sampler, SobolSampler, avoid_repeat};
use crate::space::{Params, Space};
use crate::trial::Outcome;

pub use acquisition::log_ei;
pub use policy::GpPolicy;

/// What a study file sets of the GP sampler (`[sampler]`: `n_startup`, `cost_aware`). The
/// tuned rules of its asks, and the switches the benchmark ablates, are a [`GpPolicy`].
#[derive(Debug, Clone, PartialEq)]
pub struct GpOptions {
    /// Trials drawn from the Sobol design before the model takes over; `None` picks one that
    /// fits the dimension ([`default_startup`]).
    pub n_startup: Option<usize>,
    /// The durations of complete trials train a model of log duration, and the acquisition is
    /// expected improvement per expected second (`cost`). With fewer than five known durations,
    /// or durations that vary less than 1.5-fold, it changes nothing.
    pub cost_aware: bool,
}

impl Default for GpOptions {
    fn default() -> Self {
        GpOptions {
            n_startup: None,
            cost_aware: true,
        }
    }
}

/// Initial design size: a little more than the number of parameters, between 5 and 10.
pub fn default_startup(space: &Space) -> usize {
    (space.len() + 3).clamp(5, 10)
}

pub struct GpSampler {
    opts: GpOptions,
    policy: GpPolicy,
    theta: Option<Vec<f64>>,
    /// Each objective's last fitted hyper-parameters, on a multi-objective study.
    thetas: Vec<Option<Vec<f64>>>,
    /// Set while the sampler answers a scalarisation of a multi-objective study (ParEGO), which
    /// has no one incumbent to refine ([`GpPolicy::exploit_every`]).
    scalarised: bool,
}

impl GpSampler {
    /// The sampler a study gets: its options, the default policy.
    pub fn new(opts: GpOptions) -> GpSampler {
        GpSampler::with_policy(opts, GpPolicy::default())
    }

    /// The sampler with other tuned rules (the benchmark's ablations).
    pub fn with_policy(opts: GpOptions, policy: GpPolicy) -> GpSampler {
        GpSampler {
            opts,
            policy,
            theta: None,
            thetas: Vec::new(),
            scalarised: false,
        }
    }
}

impl Default for GpSampler {
    fn default() -> Self {
        GpSampler::new(GpOptions::default())
    }
}

impl Sampler for GpSampler {
    fn ask(&mut self, ctx: &AskContext<'_>) -> Params {
        if ctx.is_multi() && !self.uses_ehvi(ctx) {
            let index = self.scalarisation_index(ctx);
            self.scalarised = true;
            let p = crate::sampler::multi::parego::ask_at(self, ctx, index);
            self.scalarised = false;
            return p;
        }
        let rule = Exploration::new(
            self.opts
                .n_startup
                .unwrap_or_else(|| default_startup(ctx.space)),
        )
        .with_rungs();
        let complete = ctx.history.iter().filter(|t| t.value().is_some()).count();
        let reported = ctx
            .history
            .iter()
            .filter(|t| !matches!(t.outcome, Outcome::Failed) && !t.curve.is_empty())
            .count();
        let phase = rule.phase(ctx.trial_number.0, complete, reported);
        if let Phase::InitialDesign { .. } = phase {
            return avoid_repeat(SobolSampler.ask(ctx), ctx);
        }
        let proposal = if ctx.is_multi() {
            self.propose_ehvi(ctx)
        } else {
            self.propose(ctx)
        };
        let p = match proposal {
            Some(p) => p,
            // Too little data (fewer than two complete trials and no rung that three trials
            // reached), a model that cannot be built, or nothing new among the candidates:
            // keep exploring.
            None => {
                if let Phase::TooFewComplete { .. } = phase {
                    SobolSampler.ask(ctx)
                } else {
                    RandomSampler.ask(ctx)
                }
            }
        };
        avoid_repeat(p, ctx)
    }
}

#[cfg(test)]
mod tests;
