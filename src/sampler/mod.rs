//! Samplers propose the next trial's params from the study's history.
//!
//! A sampler is pure: the history, the pending trials and an RNG derived from the study seed
//! and the trial number go in, params come out. No clock, no I/O, no tokio, so a study resumed
//! from storage gets the same proposals and every sampler can be tested alone. Samplers work in
//! the unit cube and decode with [`crate::space::Space::from_unit`], which guarantees valid
//! values.

pub mod gp;
pub mod multi;
pub(crate) mod qmc;
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
    /// The directions of the study's further objectives (a multi-objective study); empty for
    /// one objective. A complete trial's values of them are its `others`.
    pub others: &'a [Direction],
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
    /// Whether the study has more than one objective.
    pub fn is_multi(&self) -> bool {
        !self.others.is_empty()
    }

    /// The direction of every objective, in order.
    pub fn directions(&self) -> Vec<Direction> {
        std::iter::once(self.direction)
            .chain(self.others.iter().copied())
            .collect()
    }

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
    /// NSGA-II, the evolutionary multi-objective sampler.
    Nsga2,
}

impl SamplerKind {
    pub const NAMES: &'static [&'static str] =
        &["auto", "gp", "tpe", "nsga2", "random", "sobol", "qmc"];

    pub fn parse(s: &str) -> Option<SamplerKind> {
        Some(match s {
            "random" => SamplerKind::Random,
            "sobol" | "qmc" => SamplerKind::Sobol,
            "gp" => SamplerKind::Gp,
            "tpe" => SamplerKind::Tpe,
            "auto" => SamplerKind::Auto,
            "nsga2" | "nsga-ii" | "nsgaii" => SamplerKind::Nsga2,
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
            SamplerKind::Nsga2 => "nsga2",
        }
    }
}

/// Settings shared by the model-based samplers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SamplerOptions {
    /// Trials of the initial (Sobol) design; `None`: a default that fits the dimension.
    pub n_startup: Option<usize>,
    /// The GP's cost model (`[sampler] cost_aware`): expected improvement per expected second
    /// when trial durations vary; `None`: the GP's default (on).
    pub cost_aware: Option<bool>,
}

/// Builds the sampler a study asked for, with default settings.
pub fn build(kind: SamplerKind) -> Box<dyn Sampler> {
    build_with(kind, &SamplerOptions::default())
}

/// Builds the sampler a study asked for. On a multi-objective study the GP searches the Pareto
/// front by expected hypervolume improvement and random scalarisations in turn (two
/// objectives) or random scalarisations alone (more), TPE by random scalarisations
/// ([`multi::Parego`]); on one objective they are themselves.
pub fn build_with(kind: SamplerKind, opts: &SamplerOptions) -> Box<dyn Sampler> {
    let tpe = || TpeSampler {
        opts: tpe_options(opts),
    };
    match kind {
        SamplerKind::Random => Box::new(RandomSampler),
        SamplerKind::Sobol => Box::new(SobolSampler),
        SamplerKind::Gp => Box::new(GpSampler::new(gp_options(opts))),
        SamplerKind::Tpe => Box::new(multi::Parego { inner: tpe() }),
        SamplerKind::Auto => Box::new(AutoSampler {
            gp: GpSampler::new(gp_options(opts)),
            tpe: multi::Parego { inner: tpe() },
        }),
        SamplerKind::Nsga2 => Box::new(multi::Nsga2Sampler::new(multi::Nsga2Options {
            n_startup: opts.n_startup,
            ..multi::Nsga2Options::default()
        })),
    }
}

fn gp_options(opts: &SamplerOptions) -> GpOptions {
    GpOptions {
        n_startup: opts.n_startup,
        cost_aware: opts.cost_aware.unwrap_or(GpOptions::default().cost_aware),
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
    tpe: multi::Parego<TpeSampler>,
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

/// Largest discrete space [`unseen_config`] walks.
const MAX_WALK: u128 = 1 << 20;

/// A configuration that is neither finished nor pending, found by walking the grid of a fully
/// discrete space from `start` (so that different trials start at different places). `None`
/// when some float is continuous (a repeat is then practically impossible), the space is too
/// large to walk, or every configuration has been seen. The last resort of the model-based
/// samplers against spending budget on a repeat.
pub fn unseen_config(ctx: &AskContext<'_>, start: u64) -> Option<Params> {
    use crate::space::{ParamKind, ParamValue};
    let total = ctx.space.cardinality()?;
    if total > MAX_WALK {
        return None;
    }
    let grids: Vec<Vec<ParamValue>> = ctx
        .space
        .params()
        .iter()
        .map(|p| match &p.kind {
            ParamKind::Categorical { choices } => Some(choices.clone()),
            ParamKind::Int {
                low, high, step, ..
            } => Some(
                (0..=(high - low) / step)
                    .map(|k| ParamValue::Int(low + k * step))
                    .collect(),
            ),
            ParamKind::Float {
                low, step: Some(s), ..
            } => {
                let n = p.grid_size()? as usize;
                Some(
                    (0..n)
                        .map(|k| p.from_unit(p.to_unit(&ParamValue::Float(low + k as f64 * s))))
                        .collect(),
                )
            }
            ParamKind::Float { step: None, .. } => None,
        })
        .collect::<Option<_>>()?;
    let key = |p: &Params| serde_json::to_string(p).unwrap_or_default();
    let seen: std::collections::HashSet<String> = ctx
        .history
        .iter()
        .map(|t| key(&t.params))
        .chain(ctx.pending.iter().map(key))
        .collect();
    let size: u128 = grids.iter().map(|g| g.len() as u128).product();
    for k in 0..size {
        let mut i = (u128::from(start) + k) % size;
        let mut u = Vec::with_capacity(grids.len());
        for (p, g) in ctx.space.params().iter().zip(&grids) {
            let n = g.len() as u128;
            u.push(p.to_unit(&g[(i % n) as usize]));
            i /= n;
        }
        let cand = ctx.space.from_unit(&u);
        if !seen.contains(&key(&cand)) {
            return Some(cand);
        }
    }
    None
}

/// `p`, or an unseen configuration instead when `p` repeats a finished or pending one.
pub fn avoid_repeat(p: Params, ctx: &AskContext<'_>) -> Params {
    if is_duplicate(&p, ctx) {
        unseen_config(ctx, mix(ctx.seed, ctx.trial_number.0 ^ 0x5EE4)).unwrap_or(p)
    } else {
        p
    }
}
