//! Every tuned rule of the GP's ask in one place ([`GpPolicy`]): each field is the constant of
//! one rule, documented where the rule is, with the experiment that chose it. A study file sets
//! none of these ([`super::GpOptions`] holds what it can set); the benchmark builds other
//! policies to measure what a rule brings (its ablations switch a rule off here).
//!
//! The rules, by the stage of `propose` they act in (`propose.rs`):
//! - **model**: a subset beyond [`GpPolicy::max_points`] / [`GpPolicy::max_fit_points`]
//!   trials, the output warp's soft cap ([`GpPolicy::warp_cap`]) and pessimistic prior mean
//!   ([`GpPolicy::prior_mean_q`]), an extra fit start with the noise high
//!   ([`GpPolicy::noisy_start_log_sn2`]);
//! - **incumbent**: an improvement margin once the incumbent has a twin
//!   ([`GpPolicy::ei_margin`]);
//! - **side models**: a failure classifier ([`GpPolicy::learn_failures`]; the cost model is
//!   the study's choice, [`super::GpOptions::cost_aware`]);
//! - **candidates**: per-value candidates and an exploration floor for low-cardinality
//!   parameters ([`GpPolicy::robust_discrete`]), a starved value searched near its best trial
//!   ([`GpPolicy::held_radius`]), refining asks near the incumbent
//!   ([`GpPolicy::exploit_every`]), the Sobol sweep and the perturbations of the best trials;
//! - **refine** and **pick**: the starting points and steps of the local search;
//! - **multi-objective**: EHVI taking turns with ParEGO ([`GpPolicy::ehvi`]).

/// The tuned constants and switches of the GP's ask ([`Default`]: the measured best).
#[derive(Debug, Clone, PartialEq)]
pub struct GpPolicy {
    // ---- model ----
    /// Most trials the posterior is built on; beyond, a subset (the best half plus an even
    /// spread of the rest), which bounds the cost of an ask smoothly (BENCHMARKS.md, the
    /// optimizers' ms per ask).
    pub max_points: usize,
    /// Most trials the hyper-parameters are fitted on (the same kind of subset).
    pub max_fit_points: usize,
    /// Where the output warp's soft cap on the upper tail starts (robust z-score): above it a
    /// loss only says "bad" (`ln_1p` growth), so that huge losses do not flatten the model.
    pub warp_cap: f64,
    /// The quantile of the complete trials' (warped) losses at which the model's prior mean
    /// sits: where it has seen nothing, the model expects a loss this bad, not an average one.
    /// With the prior at the mean, log EI sent a share of the trials to unexplored corners of
    /// the box (on rosenbrock4, trials above 1e3 where the best was near 2) instead of following
    /// the valley it had found. 0.8, 0.85 and 0.9 all raised every set's mean score at 25 and
    /// 50 trials; 0.9 also lowered the trap seeds below random's median, where 0.85 raised
    /// them (docs/experiments/gp-prior-mean.md, "A pessimistic prior mean").
    pub prior_mean_q: f64,
    /// The log noise variance (model outputs have unit variance) of an extra start of the
    /// hyper-parameter fit, made on a cold start and on every [`Self::noisy_start_every`]-th
    /// ask. Warm starts alone kept the fit of a noisy objective in its low-noise mode, whose
    /// short length scales chase the noise: hartmann6 with noise scored below TPE at q = 1 and
    /// q = 4, and above it with this start on every other ask (docs/experiments/gp-noise.md,
    /// "Noisy objectives").
    pub noisy_start_log_sn2: f64,
    /// How often (in trial numbers) the fit also starts from [`Self::noisy_start_log_sn2`]: on
    /// every ask it scored a little higher but doubled the ask time; on every third, lower.
    pub noisy_start_every: u64,

    // ---- incumbent ----
    /// Distance (in every feature) under which two complete trials are twins
    /// ([`Self::ei_margin`]).
    pub twin: f64,
    /// How far below the best warped loss improvement counts once the incumbent has a twin. A
    /// model sure of a slope into a box's edge finds its best log EI in re-running the
    /// incumbent a hair away, for a gain too small to matter, again after every such trial (a
    /// branin seed spent 12 of its last 35 trials within 0.005 of one point on the edge).
    /// Applied always, the margin stops short of the last digits of a smooth bowl; held back
    /// until a twin appears, it moves no other benchmark problem's mean score by more than a
    /// point (docs/experiments/gp-refining.md, "An improvement margin once the incumbent has a
    /// twin").
    pub ei_margin: f64,

    // ---- side models ----
    /// Failed trials also train a classifier whose probability of running multiplies the
    /// acquisition (`feasibility`); off, they only enter the regression at the worst value
    /// (where they stay with it on as well). With no failure in the history it changes
    /// nothing. The benchmark's `gp-penalty` switches it off (BENCHMARKS.md, failure problems;
    /// issue 13).
    pub learn_failures: bool,

    // ---- candidates ----
    /// Low-cardinality integers and categoricals get per-value candidates and an exploration
    /// floor (`discrete`); off, they are searched like any discrete parameter (coordinate
    /// search from the best candidates), which can lock onto one value of a trap
    /// (docs/experiments/gp-mixed-space.md, "Robust mixed-space search").
    pub robust_discrete: bool,
    /// Half-width (unit cube) of the box around a starved value's best trial in which the
    /// acquisition's half of that value's asks searches. 0.15 and 0.25 freed as many trap
    /// seeds (0.35 and 0.5 fewer at q = 4); 0.15 cost svm_quantised a seed, 0.25 none
    /// (docs/experiments/gp-mixed-space.md, "Near the held value's best trial").
    pub held_radius: f64,
    /// Every this many asks (from trial [`Self::exploit_from`] on, when no value is held, not
    /// on a scalarised multi-objective ask), the ask refines the incumbent instead of
    /// maximising log EI: it minimises the posterior mean within [`Self::exploit_radius`] of
    /// the incumbent. Log EI alone, once it has found a good basin, spends its asks on the
    /// other basins and leaves the last digits of the one it found (branin's median seed never
    /// improved on its trial 14). Every 5th ask from trial 20, within 0.03, raised the mean
    /// score @50 of every set but the traps at q = 4 and brought branin to 100.0; from the
    /// first model-guided ask on, the scores @25 fell; in multi-objective studies (no one
    /// incumbent) ParEGO's dtlz2 front lost hypervolume (docs/experiments/gp-refining.md,
    /// "Refining the incumbent").
    pub exploit_every: u64,
    /// The first trial number that may be a refining ask ([`Self::exploit_every`]).
    pub exploit_from: u64,
    /// Half-width (unit cube) of the box around the incumbent in which a refining ask
    /// minimises the posterior mean ([`Self::exploit_every`]).
    pub exploit_radius: f64,
    /// Points of the scrambled Sobol sweep over the box (or the held box) that every ask
    /// scores (docs/experiments/optimizers-first-gp.md).
    pub sweep: usize,
    /// The best complete trials whose neighbourhoods are perturbed into candidates.
    pub perturbed_trials: usize,
    /// Perturbations of each such trial (and of the held anchor): half with a standard
    /// deviation of 0.02 in the unit cube, half 0.1.
    pub perturbations: usize,
    /// With low-cardinality parameters, every value (and combination) is substituted into
    /// this many best trials ...
    pub substituted_trials: usize,
    /// ... and this many best candidates.
    pub substituted_candidates: usize,

    // ---- refine ----
    /// The best distinct candidates refined by L-BFGS on the continuous floats and a
    /// coordinate search on the discrete params (plus the best candidate of each
    /// low-cardinality combination, `discrete::MAX_GROUPS_REFINED`).
    pub refine_starts: usize,
    /// L-BFGS iterations of each refinement.
    pub refine_iterations: u64,

    // ---- multi-objective ----
    /// On a study with two objectives, every other trial is proposed by expected hypervolume
    /// improvement over one GP per objective (`ehvi`); off, or with more objectives, every
    /// trial by a random scalarisation of the objectives (ParEGO) over one GP. The benchmark's
    /// `gp-parego` switches it off (BENCHMARKS.md, multi-objective; `multi.rs` has the
    /// figures of the alternation).
    pub ehvi: bool,
}

impl Default for GpPolicy {
    fn default() -> Self {
        GpPolicy {
            max_points: 128,
            max_fit_points: 64,
            warp_cap: 2.5,
            prior_mean_q: 0.9,
            noisy_start_log_sn2: -2.3,
            noisy_start_every: 2,
            twin: 1e-3,
            ei_margin: 0.01,
            learn_failures: true,
            robust_discrete: true,
            held_radius: 0.25,
            exploit_every: 5,
            exploit_from: 20,
            exploit_radius: 0.03,
            sweep: 256,
            perturbed_trials: 5,
            perturbations: 32,
            substituted_trials: 2,
            substituted_candidates: 3,
            refine_starts: 3,
            refine_iterations: 25,
            ehvi: true,
        }
    }
}

impl GpPolicy {
    /// Whether the ask numbered `trial` is a refining one ([`Self::exploit_every`]), given
    /// that no value is held and the ask is not a scalarisation.
    pub(super) fn refines_at(&self, trial: u64) -> bool {
        trial >= self.exploit_from && trial % self.exploit_every == self.exploit_every - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refining_asks_are_every_fifth_from_trial_twenty() {
        let p = GpPolicy::default();
        let at: Vec<u64> = (0..40).filter(|&n| p.refines_at(n)).collect();
        assert_eq!(at, vec![24, 29, 34, 39]);
        let late = GpPolicy {
            exploit_from: 30,
            ..GpPolicy::default()
        };
        assert_eq!(
            (0..40).filter(|&n| late.refines_at(n)).collect::<Vec<_>>(),
            vec![34, 39]
        );
    }
}
