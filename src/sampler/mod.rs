//! Samplers propose the next trial's params from the study's history.
//!
//! A sampler is pure: the history, the pending trials and an RNG derived from the study seed
//! and the trial number go in, params come out. No clock, no I/O, no tokio, so a study resumed
//! from storage gets the same proposals and every sampler can be tested alone. Samplers work in
//! the unit cube and decode with [`crate::space::Space::from_unit`], which guarantees valid
//! values.

pub mod gp;
mod qmc;
mod random;
pub mod tpe;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::space::{Params, Space};
use crate::trial::{Direction, FinishedTrial, TrialNumber};

pub use gp::{GpOptions, GpSampler};
pub use qmc::SobolSampler;
pub use random::RandomSampler;
pub use tpe::{TpeOptions, TpeSampler};

/// Everything a sampler may look at when it proposes one trial.
pub struct AskContext<'a> {
    pub space: &'a Space,
    pub direction: Direction,
    /// Finished trials (complete, pruned, failed), in trial-number order.
    pub history: &'a [FinishedTrial],
    /// Params of trials asked for but not finished yet (running or queued elsewhere).
    pub pending: &'a [Params],
    /// The number the proposal will get.
    pub trial_number: TrialNumber,
    /// The study seed.
    pub seed: u64,
}

impl AskContext<'_> {
    /// A deterministic RNG for this trial: the same study seed and trial number always give
    /// the same stream, whatever ran before in this process.
    pub fn rng(&self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(mix(self.seed, self.trial_number.0))
    }
}

/// SplitMix64-style mixing of the seed and a stream index, so that nearby trial numbers give
/// unrelated RNG streams.
pub fn mix(seed: u64, stream: u64) -> u64 {
    let mut z = seed
        ^ stream
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(0x6A09_E667_F3BC_C909);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seam between the scheduler (or `tune ask-tell`) and an optimizer.
pub trait Sampler: Send {
    /// Proposes params for trial `ctx.trial_number`. Must always return valid params for
    /// `ctx.space` (use `Space::from_unit`), whatever the history holds.
    fn ask(&mut self, ctx: &AskContext<'_>) -> Params;
}

/// The samplers a study can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SamplerKind {
    Random,
    Sobol,
    /// The Gaussian-process Bayesian optimizer.
    Gp,
    /// The tree-structured Parzen estimator.
    Tpe,
    /// Picks for the study: the GP, handing over to TPE in spaces too wide for it.
    #[default]
    Auto,
}

impl SamplerKind {
    pub const NAMES: &'static [&'static str] = &["auto", "gp", "tpe", "random", "sobol", "qmc"];

    pub fn parse(s: &str) -> Option<SamplerKind> {
        Some(match s {
            "random" => SamplerKind::Random,
            "sobol" | "qmc" => SamplerKind::Sobol,
            "gp" => SamplerKind::Gp,
            "tpe" => SamplerKind::Tpe,
            "auto" => SamplerKind::Auto,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SamplerKind::Random => "random",
            SamplerKind::Sobol => "sobol",
            SamplerKind::Gp => "gp",
            SamplerKind::Tpe => "tpe",
            SamplerKind::Auto => "auto",
        }
    }
}

/// Settings shared by the model-based samplers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SamplerOptions {
    /// Trials of the initial (Sobol) design; `None`: a default that fits the dimension.
    pub n_startup: Option<usize>,
}

/// Builds the sampler a study asked for, with default settings.
pub fn build(kind: SamplerKind) -> Box<dyn Sampler> {
    build_with(kind, &SamplerOptions::default())
}

/// Builds the sampler a study asked for.
pub fn build_with(kind: SamplerKind, opts: &SamplerOptions) -> Box<dyn Sampler> {
    match kind {
        SamplerKind::Random => Box::new(RandomSampler),
        SamplerKind::Sobol => Box::new(SobolSampler),
        SamplerKind::Gp => Box::new(GpSampler::new(gp_options(opts))),
        SamplerKind::Tpe => Box::new(TpeSampler {
            opts: tpe_options(opts),
        }),
        SamplerKind::Auto => Box::new(AutoSampler {
            gp: GpSampler::new(gp_options(opts)),
            tpe: TpeSampler {
                opts: tpe_options(opts),
            },
        }),
    }
}

fn gp_options(opts: &SamplerOptions) -> GpOptions {
    GpOptions {
        n_startup: opts.n_startup,
        ..GpOptions::default()
    }
}

fn tpe_options(opts: &SamplerOptions) -> TpeOptions {
    let d = TpeOptions::default();
    TpeOptions {
        n_startup: opts.n_startup.unwrap_or(d.n_startup),
        ..d
    }
}

/// Above this many parameters the GP's per-ask cost (and its need for data) outgrows what it
/// brings, and `auto` uses TPE.
pub const AUTO_GP_MAX_PARAMS: usize = 24;

/// `sampler = "auto"`: the GP for ordinary spaces, TPE for very wide ones. The choice depends
/// on the space alone, so a study never switches model midway (no step in behaviour or in ask
/// time); the GP bounds its own cost on long studies by modelling a subset.
pub struct AutoSampler {
    gp: GpSampler,
    tpe: TpeSampler,
}

impl Sampler for AutoSampler {
    fn ask(&mut self, ctx: &AskContext<'_>) -> Params {
        if ctx.space.len() > AUTO_GP_MAX_PARAMS {
            self.tpe.ask(ctx)
        } else {
            self.gp.ask(ctx)
        }
    }
}

/// Whether `params` equals a finished or pending configuration (exact match).
pub fn is_duplicate(params: &Params, ctx: &AskContext<'_>) -> bool {
    ctx.history.iter().any(|t| &t.params == params) || ctx.pending.iter().any(|p| p == params)
}
