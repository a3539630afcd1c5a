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

pub use gp::{GpOptions, GpPolicy, GpSampler};
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

/// The fewest complete trials (with a finite value) the model-based samplers need before they
/// model the objective: one value has nothing to be compared with. With fewer, after their
/// initial design, they keep drawing from the Sobol sequence.
pub const MIN_COMPLETE_TO_MODEL: usize = 2;

/// The fewest trials with a value at one step of their learning curves (a rung) from which the
/// GP models the objective at that step while fewer than [`MIN_COMPLETE_TO_MODEL`] trials are
/// complete: a study whose every trial is pruned still gets model-guided proposals (BOHB's rule
/// of modelling the highest budget with enough observations; `gp::model`).
pub const MIN_AT_RUNG_TO_MODEL: usize = 3;

/// When a model-based sampler (the GP, TPE) explores, drawing from its Sobol design, rather
/// than models: the one rule those samplers follow, and what the UI and the line output say of
/// it ("sampler: exploring (Sobol) until 2 trials complete").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exploration {
    /// Trials numbered below this are the initial design.
    pub startup: usize,
    /// After it, fewer complete trials than this still leave the sampler exploring...
    pub min_complete: usize,
    /// ...unless this many trials reported along the way (the GP models the highest step they
    /// share, [`MIN_AT_RUNG_TO_MODEL`]); `None` for a sampler that learns from complete trials
    /// only.
    pub min_reported: Option<usize>,
}

/// What a model-based sampler does at an ask, by [`Exploration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The initial design: trials numbered below `startup`.
    InitialDesign { startup: usize },
    /// Past the initial design, but fewer than `need` trials are complete (pruning or failures
    /// have left too few) and fewer than `need_reported` (where the sampler models rungs) have
    /// reported: still exploring.
    TooFewComplete {
        complete: usize,
        need: usize,
        need_reported: Option<usize>,
    },
    /// The model proposes.
    Modelling,
}

impl Exploration {
    /// The rule of a sampler whose initial design has `startup` trials.
    pub fn new(startup: usize) -> Exploration {
        Exploration {
            startup,
            min_complete: MIN_COMPLETE_TO_MODEL,
            min_reported: None,
        }
    }

    /// The rule of a sampler that also models a rung of the trials' learning curves (the GP).
    pub fn with_rungs(self) -> Exploration {
        Exploration {
            min_reported: Some(MIN_AT_RUNG_TO_MODEL),
            ..self
        }
    }

    /// The phase of the ask for trial `number` when `complete` trials are complete and
    /// `reported` finished trials (complete or pruned) reported a value along the way.
    pub fn phase(&self, number: u64, complete: usize, reported: usize) -> Phase {
        if usize::try_from(number).is_ok_and(|n| n < self.startup) {
            Phase::InitialDesign {
                startup: self.startup,
            }
        } else if complete < self.min_complete
            && self.min_reported.is_none_or(|need| reported < need)
        {
            Phase::TooFewComplete {
                complete,
                need: self.min_complete,
                need_reported: self.min_reported,
            }
        } else {
            Phase::Modelling
        }
    }
}

impl SamplerKind {
    /// When this sampler explores rather than models, on `space` with `opts`; `None` for a
    /// sampler that never models (random, Sobol) or follows another rule (NSGA-II).
    pub fn exploration(self, space: &Space, opts: &SamplerOptions) -> Option<Exploration> {
        let gp = || {
            Exploration::new(opts.n_startup.unwrap_or_else(|| gp::default_startup(space)))
                .with_rungs()
        };
        let tpe = || Exploration::new(tpe_options(opts).n_startup);
        match self {
            SamplerKind::Gp => Some(gp()),
            SamplerKind::Tpe => Some(tpe()),
            SamplerKind::Auto if space.len() > AUTO_GP_MAX_PARAMS => Some(tpe()),
            SamplerKind::Auto => Some(gp()),
            SamplerKind::Random | SamplerKind::Sobol | SamplerKind::Nsga2 => None,
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

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::first_design_trial(5, 0, 0, Phase::InitialDesign { startup: 5 })]
    #[case::last_design_trial_with_completes(5, 4, 4, Phase::InitialDesign { startup: 5 })]
    #[case::past_the_design_none_complete(5, 5, 0, Phase::TooFewComplete { complete: 0, need: 2, need_reported: None })]
    #[case::past_the_design_one_complete(5, 9, 1, Phase::TooFewComplete { complete: 1, need: 2, need_reported: None })]
    #[case::past_the_design_two_complete(5, 5, 2, Phase::Modelling)]
    fn a_model_based_sampler_explores_through_its_design_and_until_two_trials_complete(
        #[case] startup: usize,
        #[case] number: u64,
        #[case] complete: usize,
        #[case] phase: Phase,
    ) {
        // Reports alone never end the exploration of a sampler that learns from complete
        // trials only (TPE).
        assert_eq!(Exploration::new(startup).phase(number, complete, 40), phase);
    }

    #[rstest]
    #[case::in_the_design(5, 4, 0, 9, Phase::InitialDesign { startup: 5 })]
    #[case::two_reported(5, 5, 0, 2, Phase::TooFewComplete { complete: 0, need: 2, need_reported: Some(3) })]
    #[case::three_reported_none_complete(5, 5, 0, 3, Phase::Modelling)]
    #[case::two_complete_none_reported(5, 5, 2, 0, Phase::Modelling)]
    fn the_gp_models_once_three_trials_reported_or_two_completed(
        #[case] startup: usize,
        #[case] number: u64,
        #[case] complete: usize,
        #[case] reported: usize,
        #[case] phase: Phase,
    ) {
        assert_eq!(
            Exploration::new(startup)
                .with_rungs()
                .phase(number, complete, reported),
            phase
        );
    }

    #[test]
    fn each_sampler_kind_has_the_exploration_rule_it_asks_by() {
        let space = |n: usize| {
            let body: String = (0..n)
                .map(|i| format!("p{i} = {{ type = \"float\", low = 0.0, high = 1.0 }}\n"))
                .collect();
            let t: toml::Table = toml::from_str(&body).expect("toml");
            Space::from_toml(&t).expect("space")
        };
        let opts = SamplerOptions::default();
        let startup = |k: SamplerKind, n| k.exploration(&space(n), &opts).map(|e| e.startup);
        assert_eq!(startup(SamplerKind::Gp, 1), Some(5));
        assert_eq!(startup(SamplerKind::Gp, 9), Some(10));
        assert_eq!(startup(SamplerKind::Auto, 4), Some(7));
        assert_eq!(
            startup(SamplerKind::Tpe, 4),
            Some(TpeOptions::default().n_startup)
        );
        assert_eq!(
            startup(SamplerKind::Auto, AUTO_GP_MAX_PARAMS + 1),
            Some(TpeOptions::default().n_startup)
        );
        for k in [SamplerKind::Random, SamplerKind::Sobol, SamplerKind::Nsga2] {
            assert_eq!(startup(k, 3), None, "{k:?}");
        }
        let set = SamplerOptions {
            n_startup: Some(3),
            ..SamplerOptions::default()
        };
        for (k, rungs) in [
            (SamplerKind::Gp, Some(MIN_AT_RUNG_TO_MODEL)),
            (SamplerKind::Tpe, None),
            (SamplerKind::Auto, Some(MIN_AT_RUNG_TO_MODEL)),
        ] {
            let e = k
                .exploration(&space(2), &set)
                .expect("a model-based sampler");
            assert_eq!(
                (e.startup, e.min_complete, e.min_reported),
                (3, MIN_COMPLETE_TO_MODEL, rungs),
                "{k:?}"
            );
        }
    }
}
