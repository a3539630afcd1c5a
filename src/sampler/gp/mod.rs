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
//! Sobol design.
//!
//! The sampler holds one cache, the last fitted hyper-parameters, used as a warm start: a
//! sampler rebuilt from the history (a resumed study) works the same way, only from a cold
//! start. Studies beyond [`GpOptions::max_points`] finished trials are modelled on a subset
//! (the best half plus an even spread of the rest), which bounds the cost of an ask smoothly.

mod acquisition;
mod cost;
mod discrete;
mod ehvi;
mod feasibility;
mod fit;
mod kernel;
mod multi;

use rand::Rng;
use rand_distr::StandardNormal;

use super::qmc::sobol_point;
use super::{
    AskContext, Exploration, MIN_COMPLETE_TO_MODEL, Phase, RandomSampler, Sampler, SobolSampler,
    avoid_repeat, is_duplicate, mix,
};
use crate::pruner::forecast::{Reference, forecast};
use crate::space::{ParamKind, Params, Space};
use crate::trial::{Direction, Outcome};
use acquisition::Acq;
use cost::Cost;
use discrete::{Held, LowCard};
use feasibility::Feasibility;
use fit::{FitData, Posterior};
use kernel::Layout;

pub use acquisition::log_ei;

/// Settings of the GP sampler.
#[derive(Debug, Clone, PartialEq)]
pub struct GpOptions {
    /// Trials drawn from the Sobol design before the model takes over; `None` picks one that
    /// fits the dimension ([`default_startup`]).
    pub n_startup: Option<usize>,
    /// Most trials the posterior is built on; beyond, a subset.
    pub max_points: usize,
    /// Most trials the hyper-parameters are fitted on.
    pub max_fit_points: usize,
    /// Low-cardinality integers and categoricals get per-value candidates and an exploration
    /// floor (`discrete`); off, they are searched like any discrete parameter (coordinate
    /// search from the best candidates), which can lock onto one value of a trap.
    pub robust_discrete: bool,
    /// Failed trials also train a classifier whose probability of running multiplies the
    /// acquisition (`feasibility`); off, they only enter the regression at the worst value
    /// (where they stay with it on as well). With no failure in the history it changes nothing.
    pub learn_failures: bool,
    /// The durations of complete trials train a model of log duration, and the acquisition is
    /// expected improvement per expected second (`cost`). With fewer than five known durations,
    /// or durations that vary less than 1.5-fold, it changes nothing.
    pub cost_aware: bool,
    /// On a study with two objectives, every other trial is proposed by expected hypervolume
    /// improvement over one GP per objective (`ehvi`); off, or with more objectives, every
    /// trial by a random scalarisation of the objectives (ParEGO) over one GP.
    pub ehvi: bool,
}

impl Default for GpOptions {
    fn default() -> Self {
        GpOptions {
            n_startup: None,
            max_points: 128,
            max_fit_points: 64,
            robust_discrete: true,
            learn_failures: true,
            cost_aware: true,
            ehvi: true,
        }
    }
}

/// Initial design size: a little more than the number of parameters, between 5 and 10.
pub fn default_startup(space: &Space) -> usize {
    (space.len() + 3).clamp(5, 10)
}

pub struct GpSampler {
    opts: GpOptions,
    theta: Option<Vec<f64>>,
    /// Each objective's last fitted hyper-parameters, on a multi-objective study.
    thetas: Vec<Option<Vec<f64>>>,
    /// Set while the sampler answers a scalarisation of a multi-objective study (ParEGO), which
    /// has no one incumbent to refine ([`EXPLOIT_EVERY`]).
    scalarised: bool,
}

impl GpSampler {
    pub fn new(opts: GpOptions) -> GpSampler {
        GpSampler {
            opts,
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

/// A monotone map of losses to the model's outputs: a log warp when a few losses dwarf the
/// rest (so that values spanning decades do not flatten the model near the optimum), a robust
/// centre and scale, a soft cap on the upper tail (huge losses only say "bad"), then unit
/// variance with zero (the GP's prior mean) at a high quantile ([`PRIOR_MEAN_Q`]). The lower
/// tail, where the optimum is, is never squashed.
struct Warp {
    min: f64,
    log_c: Option<f64>,
    centre: f64,
    scale: f64,
    /// The capped value that maps to zero.
    zero: f64,
    sd: f64,
}

const CAP: f64 = 2.5;

/// The quantile of the complete trials' (warped) losses at which the model's prior mean sits:
/// where it has seen nothing, the model expects a loss this bad, not an average one. With the
/// prior at the mean, log EI sent a share of the trials to unexplored corners of the box, where
/// the model was most unsure and no better than average (on rosenbrock4, 6 of the 40 trials
/// after the initial design landed on values above 1e3 where the best was near 2), instead of
/// following the valley it had found. Measured on the public, trap, extra and failure problems
/// (docs/experiments/gp-prior-mean.md, "A pessimistic prior mean"): 0.8, 0.85 and 0.9 all raise every set's mean
/// score at 25 and 50 trials; 0.9 also lowers the trap seeds below random's median (BENCHMARKS.md,
/// "Trap problems (robust mixed-space search)"; q = 1: 0.02 to 0.01; q = 4: 0.04 to 0.03), where 0.85 raised them to 0.03.
const PRIOR_MEAN_Q: f64 = 0.9;

/// Half-width (unit cube) of the box around a starved value's best trial in which the
/// acquisition's half of that value's asks searches. Measured on the trap and mixed problems
/// (docs/experiments/gp-mixed-space.md, "Near the held value's best trial"): 0.15 and 0.25 free as many trap seeds
/// (0.35 and 0.5 fewer at q = 4); 0.15 cost svm_quantised a seed at -75, 0.25 none.
const HELD_RADIUS: f64 = 0.25;

/// How far below the best warped loss (model outputs have unit variance) improvement counts
/// once the incumbent has a twin: a complete trial closer than [`TWIN`] in every feature. A
/// model sure of a slope into a box's edge finds its best log EI in re-running the incumbent a
/// hair away, for a gain too small to matter, and does so again after every such trial: on
/// branin one seed in 60 spent 12 of its last 35 trials within 0.005 of one point on the edge
/// x0 = 10 and ended at the floor (-100). Applied always, the margin (0.003 to 0.02 tried) ends
/// that too but stops short of the last digits of a smooth bowl (the failure-classifier and
/// cost-model tests lose their precision); held back until a twin appears, it moves no other
/// benchmark problem's mean score by more than a point (docs/experiments/gp-refining.md, "An improvement margin
/// once the incumbent has a twin").
const EI_MARGIN: f64 = 0.01;

/// Every this many asks (from trial [`EXPLOIT_FROM`] on, when no value is held), the ask
/// refines the incumbent instead of maximising log EI: it minimises the posterior mean within
/// [`EXPLOIT_RADIUS`] of the incumbent (unit cube). Log EI alone, once it has found a good basin,
/// spends its asks on the other basins and leaves the last digits of the one it found: on branin
/// a median seed found a regret of 2.3e-4 at trial 14 and never improved on it in the 36 trials
/// that followed. Measured on the public, extra, trap, failure and noisy problems
/// (docs/experiments/gp-refining.md, "Refining the incumbent"): every 5th ask from trial 20, within 0.03, raised the
/// mean score @50 of every set but the traps at q = 4 (95.6 to 94.8) and brought branin to 100.0;
/// from the first model-guided ask on, the scores @25 fell. Not in multi-objective studies, which
/// have no one incumbent: with it, ParEGO's dtlz2 front lost 2.8 points of hypervolume.
const EXPLOIT_EVERY: u64 = 5;

/// The first trial number that may be a refining ask ([`EXPLOIT_EVERY`]).
const EXPLOIT_FROM: u64 = 20;

/// Half-width (unit cube) of the box around the incumbent in which a refining ask minimises the
/// posterior mean ([`EXPLOIT_EVERY`]).
const EXPLOIT_RADIUS: f64 = 0.03;

/// Distance (in every feature) under which two trials are twins for [`EI_MARGIN`].
const TWIN: f64 = 1e-3;

/// The log noise variance (model outputs have unit variance) of an extra start of the
/// hyper-parameter fit, made on a cold start and on every [`NOISY_START_EVERY`]-th ask. Warm
/// starts alone kept the fit of a noisy objective in its low-noise mode, whose short length
/// scales chase the noise: on tune-bench's noisy problems (BENCHMARKS.md, "Noisy objectives") hartmann6 with
/// noise scored 47.8 at q = 1 and 37.8 at q = 4, below TPE's 54.0 and 58.8; with this start on
/// every other ask, 72.7 and 59.2 (docs/experiments/gp-noise.md, "Noisy objectives"). On every ask it scored
/// 77.3 but doubled the ask time; on every third, 66.7.
const NOISY_START_LOG_SN2: f64 = -2.3;

/// How often (in trial numbers) the fit also starts from [`NOISY_START_LOG_SN2`].
const NOISY_START_EVERY: u64 = 2;

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Warp {
    fn fit(ys: &[f64]) -> Warp {
        let mut s = ys.to_vec();
        s.sort_by(f64::total_cmp);
        let min = s[0];
        let max = s[s.len() - 1];
        let med = quantile(&s, 0.5);
        let span = (max - min).abs().max(1e-300);
        let log_c = if max - med > 5.0 * (med - min) && max > min {
            Some((quantile(&s, 0.25) - min).max(1e-9 * span))
        } else {
            None
        };
        let mut w = Warp {
            min,
            log_c,
            centre: 0.0,
            scale: 1.0,
            zero: 0.0,
            sd: 1.0,
        };
        let ws: Vec<f64> = s.iter().map(|&y| w.pre(y)).collect();
        w.centre = quantile(&ws, 0.5);
        let iqr = quantile(&ws, 0.75) - quantile(&ws, 0.25);
        let n = ws.len() as f64;
        let mean = ws.iter().sum::<f64>() / n;
        let sd = (ws.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        w.scale = if iqr > 1e-12 * span {
            iqr / 1.349
        } else if sd > 0.0 {
            sd
        } else {
            1.0
        };
        let zs: Vec<f64> = ws.iter().map(|&x| w.cap(x)).collect();
        let mean = zs.iter().sum::<f64>() / n;
        let sd2 = (zs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        w.sd = if sd2 > 1e-12 { sd2 } else { 1.0 };
        // Zero, the GP's prior mean, is put at a high quantile of the losses, not at their
        // mean (`PRIOR_MEAN_Q`).
        let mut sorted = zs;
        sorted.sort_by(f64::total_cmp);
        w.zero = quantile(&sorted, PRIOR_MEAN_Q);
        w
    }

    fn pre(&self, y: f64) -> f64 {
        match self.log_c {
            Some(c) => ((y - self.min).max(0.0) / c).ln_1p(),
            None => y,
        }
    }

    fn cap(&self, w: f64) -> f64 {
        let z = (w - self.centre) / self.scale;
        if z > CAP { CAP + (z - CAP).ln_1p() } else { z }
    }

    fn apply(&self, y: f64) -> f64 {
        (self.cap(self.pre(y)) - self.zero) / self.sd
    }
}

/// A finished trial as the model sees it.
struct Obs {
    params: Params,
    feat: Vec<f64>,
    z: f64,
    complete: bool,
    /// Failed, or finished with a value that is not finite (NaN, infinite): did not run.
    failed: bool,
    /// How long it ran (complete trials only): what the cost model learns from.
    seconds: Option<f64>,
}

/// Unit-cube coordinates of a trial's params; inactive params (which have none) get `fill`.
fn to_u(space: &Space, params: &Params, fill: &mut impl FnMut() -> f64) -> Vec<f64> {
    space
        .params()
        .iter()
        .map(|p| match params.get(&p.name) {
            Some(v) => p.to_unit(v),
            None => fill(),
        })
        .collect()
}

/// The features of the trials `idx` that `label` gives a label, with those labels, in order.
fn labelled<T>(
    obs: &[Obs],
    idx: &[usize],
    label: impl Fn(&Obs) -> Option<T>,
) -> (Vec<Vec<f64>>, Vec<T>) {
    idx.iter()
        .filter_map(|&i| label(&obs[i]).map(|y| (obs[i].feat.clone(), y)))
        .unzip()
}

/// Picks at most `max` observations: the best half by model output, then an even spread of the
/// rest (deterministic, so that the same history gives the same model).
fn subset(obs: &[Obs], max: usize) -> Vec<usize> {
    if obs.len() <= max {
        return (0..obs.len()).collect();
    }
    let mut order: Vec<usize> = (0..obs.len()).collect();
    order.sort_by(|&a, &b| obs[a].z.total_cmp(&obs[b].z).then(a.cmp(&b)));
    let best = max / 2;
    let mut keep: Vec<usize> = order[..best].to_vec();
    let rest = &order[best..];
    let want = max - best;
    for k in 0..want {
        keep.push(rest[k * rest.len() / want]);
    }
    keep.sort_unstable();
    keep
}

/// Complete trials needed before a pruned trial's final value is forecast from its curve.
const MIN_CURVES_TO_FORECAST: usize = 3;

/// The forecast final loss of a pruned trial from its curve (`(step, value)` in report order),
/// matched against the complete trials' curves `refs`; `None` with too few of them, no finite
/// point, or no complete curve that reaches where it stopped.
fn forecast_final(refs: &[Reference], curve: &[(u64, f64)], direction: Direction) -> Option<f64> {
    if refs.len() < MIN_CURVES_TO_FORECAST {
        return None;
    }
    let points: Vec<(f64, f64)> = curve
        .iter()
        .map(|&(step, v)| (step as f64, direction.loss(v)))
        .filter(|(_, l)| l.is_finite())
        .collect();
    let &(r, y) = points.last()?;
    let earlier = points.iter().rev().find(|p| p.0 < r).copied();
    forecast(refs, earlier, (r, y), 0.9)
        .map(|f| f.mean)
        .filter(|m| m.is_finite())
}

/// Which objective the model learns: the study's only one, or one of a multi-objective study's
/// (not `trial::Objective`, a stored objective's metric and direction).
#[derive(Clone, Copy)]
enum Modelled {
    Single,
    /// The objective at this position of [`AskContext::directions`].
    Multi(usize),
}

/// The finished trials as the model of `objective` sees them; `None` with fewer than two
/// complete trials.
fn observations(ctx: &AskContext<'_>, layout: &Layout, objective: Modelled) -> Option<Vec<Obs>> {
    let directions = ctx.directions();
    // A complete trial's loss on the objective: infinite (did not run) when any of its
    // objectives is missing or not finite.
    let loss = |t: &crate::trial::FinishedTrial, value: f64| -> f64 {
        match objective {
            Modelled::Single => ctx.direction.loss(value),
            Modelled::Multi(j) => t
                .values()
                .filter(|v| v.len() == directions.len() && v.iter().all(|x| x.is_finite()))
                .map_or(f64::INFINITY, |v| directions[j].loss(v[j])),
        }
    };
    let mut complete = Vec::new();
    for t in ctx.history {
        if let Outcome::Complete { value } = t.outcome {
            let l = loss(t, value);
            if l.is_finite() {
                complete.push(l);
            }
        }
    }
    if complete.len() < MIN_COMPLETE_TO_MODEL {
        return None;
    }
    let warp = Warp::fit(&complete);
    // The complete trials' learning curves, which a pruned trial's final value is forecast
    // from (one objective only: a multi-objective trial's curve may be any objective's).
    let refs: Vec<Reference> = match objective {
        Modelled::Single => ctx
            .history
            .iter()
            .filter(|t| matches!(t.outcome, Outcome::Complete { .. }))
            .filter_map(|t| {
                Reference::new(
                    t.curve
                        .iter()
                        .map(|&(step, v)| (step as f64, ctx.direction.loss(v))),
                )
            })
            .collect(),
        Modelled::Multi(_) => Vec::new(),
    };
    let mut zs: Vec<f64> = complete.iter().map(|&y| warp.apply(y)).collect();
    zs.sort_by(f64::total_cmp);
    let worst = zs[zs.len() - 1];
    let median = quantile(&zs, 0.5);
    let mut obs = Vec::with_capacity(ctx.history.len());
    for t in ctx.history {
        // Failed and diverged trials get the worst value seen (they teach the model where
        // not to go, without a made-up huge loss that would flatten it). A pruned trial gets
        // the forecast of its final value from its curve, learnt from the complete trials'
        // curves (`pruner::forecast`), where there are enough of them to learn from: a slow
        // starter cut early then reads as what it would have become, not as a loser; without a
        // forecast, its last value, but no better than the median: it was stopped for looking
        // bad. (A multi-objective trial's last value may be any objective's: the median.)
        let (z, is_complete) = match t.outcome {
            Outcome::Complete { value } => {
                let l = loss(t, value);
                if l.is_finite() {
                    (warp.apply(l), true)
                } else {
                    (worst, false)
                }
            }
            Outcome::Pruned { .. }
                if let Some(f) = forecast_final(&refs, &t.curve, ctx.direction) =>
            {
                (warp.apply(f), false)
            }
            Outcome::Pruned { value, .. } => {
                let v = value
                    .filter(|_| matches!(objective, Modelled::Single))
                    .map(|v| ctx.direction.loss(v))
                    .filter(|l| l.is_finite())
                    .map(|l| warp.apply(l).max(median))
                    .unwrap_or(median);
                (v, false)
            }
            Outcome::Failed => (worst, false),
        };
        let failed = match t.outcome {
            Outcome::Failed => true,
            Outcome::Complete { .. } => !is_complete,
            Outcome::Pruned { .. } => false,
        };
        obs.push(Obs {
            feat: layout.encode(ctx.space, &t.params),
            params: t.params.clone(),
            z,
            complete: is_complete,
            failed,
            seconds: t
                .seconds
                .filter(|s| is_complete && s.is_finite() && *s >= 0.0),
        });
    }
    Some(obs)
}

/// The kernel's hyper-parameters fitted on (a subset of) `obs`, warm-started from `cache` (the
/// last ask's fit, which it then holds): a cold start searches longer and from more places.
fn fit_theta(
    opts: &GpOptions,
    cache: &mut Option<Vec<f64>>,
    layout: &Layout,
    obs: &[Obs],
    trial_number: u64,
    rng: &mut impl Rng,
) -> Vec<f64> {
    let fit_idx = subset(obs, opts.max_fit_points);
    let fx: Vec<Vec<f64>> = fit_idx.iter().map(|&i| obs[i].feat.clone()).collect();
    let fy: Vec<f64> = fit_idx.iter().map(|&i| obs[i].z).collect();
    let data = FitData::new(layout, &fx, &fy);
    let default = data.default_theta();
    let mut starts = Vec::new();
    let cached = cache.clone().filter(|t| t.len() == data.dim());
    let cold = cached.is_none();
    if let Some(t) = cached {
        starts.push(t);
    }
    if cold || obs.len() < 30 || trial_number.is_multiple_of(10) {
        starts.push(default.clone());
    }
    // A noisy objective's fit has a low-noise mode (short length scales that interpolate the
    // noise) which a warm start never leaves; a start with the noise high finds the other.
    if cold || trial_number.is_multiple_of(NOISY_START_EVERY) {
        let mut t = default.clone();
        t[layout.groups + 1] = NOISY_START_LOG_SN2;
        starts.push(t);
    }
    if cold || obs.len() < 20 {
        let mut t = default.clone();
        for v in t.iter_mut().take(layout.groups) {
            *v += 0.7 * rng.sample::<f64, _>(StandardNormal);
        }
        starts.push(t);
    }
    let theta = fit::fit(
        &data,
        &starts,
        if cold { 80 } else { 15 },
        if cold { 1e-5 } else { 0.05 },
    )
    .map(|(t, _)| t)
    .unwrap_or(default);
    *cache = Some(theta.clone());
    theta
}

/// The posterior on (a subset of) `obs`, with the pending trials as fantasies at its mean
/// (kriging believer), so that a batch spreads out.
fn posterior(
    opts: &GpOptions,
    ctx: &AskContext<'_>,
    layout: &Layout,
    obs: &[Obs],
    theta: &[f64],
) -> Option<Posterior> {
    let idx = subset(obs, opts.max_points);
    let mut x: Vec<Vec<f64>> = idx.iter().map(|&i| obs[i].feat.clone()).collect();
    let mut y: Vec<f64> = idx.iter().map(|&i| obs[i].z).collect();
    let post = Posterior::new(layout, x.clone(), &y, theta)?;
    if ctx.pending.is_empty() {
        return Some(post);
    }
    let pf: Vec<Vec<f64>> = ctx
        .pending
        .iter()
        .map(|p| layout.encode(ctx.space, p))
        .collect();
    for (f, (m, _)) in pf.iter().zip(post.predict(&pf)) {
        x.push(f.clone());
        y.push(m);
    }
    Posterior::new(layout, x, &y, theta)
}

/// Unit-cube candidates around `base`: `n` Gaussian steps, the first half with a standard
/// deviation of 0.02, the rest 0.1; a categorical is redrawn with probability 0.15.
fn perturbations(space: &Space, base: &[f64], n: usize, rng: &mut impl Rng) -> Vec<Vec<f64>> {
    (0..n)
        .map(|k| {
            let sd = if k < n / 2 { 0.02 } else { 0.1 };
            base.iter()
                .zip(space.params())
                .map(|(&b, p)| match p.kind {
                    ParamKind::Categorical { .. } => {
                        if rng.random::<f64>() < 0.15 {
                            rng.random::<f64>()
                        } else {
                            b
                        }
                    }
                    _ => {
                        let e: f64 = rng.sample(StandardNormal);
                        (b + sd * e).clamp(0.0, 1.0)
                    }
                })
                .collect()
        })
        .collect()
}

/// What the next ask holds, if anything: a value of a low-cardinality parameter behind its
/// exploration floor, else the least-tried other value when the search has stalled on a
/// plateau, else a combination of categorical values behind its floor (`discrete`).
fn starved(space: &Space, low: &LowCard, ctx: &AskContext<'_>, obs: &[Obs]) -> Option<Held> {
    if low.is_empty() {
        return None;
    }
    let counts = low.counts(space, ctx.history, ctx.pending);
    // Past its cap a value (or combination) stays owed an even share while it is unresolved:
    // its best trial is neither among the best (the acquisition already tries it) nor among the
    // worst (clearly bad) of the complete trials (`discrete::UNRESOLVED`).
    let mut zs: Vec<f64> = obs.iter().filter(|o| o.complete).map(|o| o.z).collect();
    zs.sort_by(f64::total_cmp);
    let (lo, hi) = discrete::UNRESOLVED;
    let (lo, hi) = (quantile(&zs, lo), quantile(&zs, hi));
    let unresolved = |z: f64| z > lo && z <= hi;
    let mut best_z: Vec<Vec<f64>> = counts
        .iter()
        .map(|c| vec![f64::INFINITY; c.len()])
        .collect();
    let mut combo_z = vec![f64::INFINITY; low.combos().unwrap_or(0)];
    for o in obs.iter().filter(|o| o.complete) {
        let key = low.key(space, &o.params);
        if let Some(c) = low.combo_of(&key) {
            combo_z[c] = combo_z[c].min(o.z);
        }
        for (bz, k) in best_z.iter_mut().zip(key) {
            if let Some(k) = k {
                bz[k] = bz[k].min(o.z);
            }
        }
    }
    let flags: Vec<Vec<bool>> = best_z
        .iter()
        .map(|bz| bz.iter().map(|&z| unresolved(z)).collect())
        .collect();
    low.starved_with(&counts, &flags)
        .or_else(|| {
            // Stalled on a plateau: the least-tried other value, held the same way.
            let done: Vec<discrete::Done> = ctx
                .history
                .iter()
                .zip(obs)
                .filter(|(_, o)| o.complete)
                .filter_map(|(t, o)| {
                    Some(discrete::Done {
                        key: low.key(space, &t.params),
                        z: o.z,
                        loss: ctx.direction.loss(t.value()?),
                    })
                })
                .collect();
            low.plateau_escape(&done, &counts)
        })
        .map(|(pi, vi)| Held::value(pi, vi, counts[pi][vi]))
        .or_else(|| {
            let cc = low.combo_counts(space, ctx.history, ctx.pending)?;
            let flags: Vec<bool> = combo_z.iter().map(|&z| unresolved(z)).collect();
            let c = low.starved_combo(&cc, &flags)?;
            Some(Held::combination(low, c, cc[c]))
        })
}

impl GpSampler {
    fn propose(&mut self, ctx: &AskContext<'_>) -> Option<Params> {
        let space = ctx.space;
        let layout = Layout::new(space);
        let obs = observations(ctx, &layout, Modelled::Single)?;
        let mut rng = ctx.rng();
        let theta = fit_theta(
            &self.opts,
            &mut self.theta,
            &layout,
            &obs,
            ctx.trial_number.0,
            &mut rng,
        );
        let post = posterior(&self.opts, ctx, &layout, &obs, &theta)?;
        let incumbent = obs
            .iter()
            .filter(|o| o.complete)
            .min_by(|a, b| a.z.total_cmp(&b.z))?;
        let best = incumbent.z;
        // Once the incumbent has a twin (another complete trial closer than `TWIN` in every
        // feature), improvement counts only beyond `EI_MARGIN`.
        let twinned = obs.iter().filter(|o| o.complete).any(|o| {
            !std::ptr::eq(o, incumbent)
                && o.feat
                    .iter()
                    .zip(&incumbent.feat)
                    .all(|(a, b)| (a - b).abs() < TWIN)
        });
        let margin = if twinned { EI_MARGIN } else { 0.0 };

        // Failed trials as a constraint: where they cluster, the chance of running falls. They
        // stay in the regression at the worst value too. Taken out of it (the issue's "no longer
        // a penalised value"), the model extrapolates good values into the failing region: on
        // tune-bench's three failure problems (BENCHMARKS.md, "Failed trials as a learned
        // constraint") the score rose on fail_oom
        // (92.6 against 79.5) but the failed trials went from 3.7 / 5.9 / 5.4 to 3.6 / 10.3 /
        // 5.1, and to 21.5 / 36.5 / 25.2 without the `SAFE` rank rule.
        // Durations give EI per expected second when they vary (none known, or barely varying:
        // no model, the same proposals as without it). Both side models learn from the same
        // spread of trials (`subset`).
        let kept = subset(&obs, self.opts.max_points);
        let feas = self
            .opts
            .learn_failures
            .then(|| {
                let (x, ok) = labelled(&obs, &kept, |o| {
                    (o.complete || o.failed).then_some(o.complete)
                });
                Feasibility::fit(&layout, &x, &ok, &theta)
            })
            .flatten();
        let cost = self
            .opts
            .cost_aware
            .then(|| {
                let (x, seconds) = labelled(&obs, &kept, |o| o.seconds);
                Cost::fit(&layout, &x, &seconds, &theta)
            })
            .flatten();
        let d = space.len();

        // A value of a low-cardinality parameter that is behind its exploration floor is held
        // for this ask (pending trials count, so a batch spreads over the starved values).
        let low = if self.opts.robust_discrete {
            LowCard::new(space)
        } else {
            LowCard { params: Vec::new() }
        };
        let holding = starved(space, &low, ctx, &obs);
        let forced: Vec<(usize, f64)> = holding
            .iter()
            .flat_map(|h| &h.values)
            .map(|&(pi, vi)| (low.params[pi].index, low.params[pi].units[vi]))
            .collect();
        // A starved value's trial may be a space-filling one: the next point of a scrambled Sobol
        // stream of its own, the value held. The model cannot be trusted there (it has seen
        // the value little, and what it has seen may be far from the value's valley), and
        // log EI under a confident wrong model sends such trials to the box's edges, where a
        // narrow valley is never met; an even spread over the other parameters meets it.
        // Every other starved ask (by the value's count) is this space-filling point; the rest
        // hold the value and maximise the acquisition, which exploits what the spread found.
        if let Some(h) = holding.as_ref().filter(|h| h.have % 2 == 0) {
            let mut u = sobol_point(h.have as u64, space.len(), mix(ctx.seed, h.stream));
            for &(i, v) in &forced {
                u[i] = v;
            }
            let p = space.from_unit(&u);
            if !is_duplicate(&p, ctx) {
                return Some(p);
            }
        }
        // The acquisition's half of a starved value's asks searches near that value's best
        // trial: a box of half-width `HELD_RADIUS` on the parameters that are neither
        // categorical nor low-cardinality (those stay free). Unbounded, log EI under a model
        // that has seen the value little goes to the box's corners, where it is most unsure.
        // Improvement is measured from that best trial too, not from the incumbent: against
        // the incumbent, a value behind it can only win where the model is most unsure, so
        // log EI sends the ask to the box's corners again; against its own best, the ask
        // follows what the value's trials have shown (a local search of that value). On the
        // trap problems (BENCHMARKS.md, "Trap problems (robust mixed-space search)") this alone raised the mean @50 at q = 4 from 88.9
        // to 91.5 and freed trap_cat5's seed below random's median at q = 1 (docs/experiments/gp-mixed-space.md,
        // "Combinations of categoricals").
        // A refining ask (`EXPLOIT_EVERY`) is held the same way, near the incumbent.
        let n = ctx.trial_number.0;
        let exploit = holding.is_none()
            && !self.scalarised
            && n >= EXPLOIT_FROM
            && n % EXPLOIT_EVERY == EXPLOIT_EVERY - 1;
        let anchor: Option<&Obs> = if exploit {
            Some(incumbent)
        } else {
            holding.as_ref().and_then(|h| {
                obs.iter()
                    .filter(|o| o.complete && h.matches(&low.key(space, &o.params)))
                    .min_by(|a, b| a.z.total_cmp(&b.z))
            })
        };
        let radius = if exploit { EXPLOIT_RADIUS } else { HELD_RADIUS };
        let held_anchor: Option<Vec<f64>> = anchor.map(|a| {
            let mut fill = || 0.5;
            to_u(space, &a.params, &mut fill)
        });
        let acq = Acq {
            space,
            layout: &layout,
            post: &post,
            best: anchor.map_or(best - margin, |a| a.z),
            greedy: exploit,
            feas: feas.as_ref(),
            cost: cost.as_ref(),
        };
        let held_box: Option<Vec<(f64, f64)>> = held_anchor.as_ref().map(|a| {
            space
                .params()
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let free = matches!(p.kind, ParamKind::Categorical { .. })
                        || low.params.iter().any(|d| d.index == i);
                    if free {
                        (0.0, 1.0)
                    } else {
                        ((a[i] - radius).max(0.0), (a[i] + radius).min(1.0))
                    }
                })
                .collect()
        });
        let hold = |u: &mut Vec<f64>| {
            for &(i, v) in &forced {
                u[i] = v;
            }
            if let Some(b) = &held_box {
                for (x, &(lo, hi)) in u.iter_mut().zip(b) {
                    *x = x.clamp(lo, hi);
                }
            }
        };

        // Candidates: a scrambled Sobol sweep plus perturbations of the best trials.
        let sweep_seed = mix(ctx.seed, ctx.trial_number.0 ^ 0xACE0_0000);
        let n_sweep = 256;
        let mut cands: Vec<Vec<f64>> = (0..n_sweep)
            .map(|i| {
                let mut u = sobol_point(i as u64, d, sweep_seed);
                if let Some(b) = &held_box {
                    for (x, &(lo, hi)) in u.iter_mut().zip(b) {
                        *x = lo + (hi - lo) * *x;
                    }
                }
                u
            })
            .collect();
        if let Some(a) = &held_anchor {
            cands.extend(perturbations(space, a, 32, &mut rng));
        }
        let mut ranked: Vec<&Obs> = obs.iter().filter(|o| o.complete).collect();
        ranked.sort_by(|a, b| a.z.total_cmp(&b.z));
        let mut incumbents: Vec<Vec<f64>> = Vec::new();
        for o in ranked.iter().take(5) {
            let mut fill = || rng.random::<f64>();
            let base = to_u(space, &o.params, &mut fill);
            cands.extend(perturbations(space, &base, 32, &mut rng));
            incumbents.push(base);
        }
        cands.iter_mut().for_each(&hold);
        let mut scores = acq.score(&cands);

        // Every value (and combination) of the low-cardinality parameters, substituted into the
        // two best trials and the three best candidates.
        if !low.is_empty() {
            let mut top: Vec<usize> = (0..cands.len()).collect();
            top.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
            let bases: Vec<Vec<f64>> = incumbents
                .iter()
                .take(2)
                .cloned()
                .chain(top.iter().take(3).map(|&i| cands[i].clone()))
                .collect();
            let mut extra: Vec<Vec<f64>> =
                bases.iter().flat_map(|b| low.substitutions(b)).collect();
            extra.iter_mut().for_each(&hold);
            scores.extend(acq.score(&extra));
            cands.extend(extra);
        }

        let mut order: Vec<usize> = (0..cands.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));

        // Starting points of the local refinement: the best few distinct candidates (their
        // discrete values free to move), then the best candidate of each combination of
        // low-cardinality values (those values held), so that each value competes with its own
        // best continuous setting rather than with the incumbent's.
        let held: Vec<usize> = forced.iter().map(|&(i, _)| i).collect();
        let all_low: Vec<usize> = low.params.iter().map(|p| p.index).collect();
        let mut starts: Vec<(usize, bool)> = Vec::new();
        let mut seen: Vec<Params> = Vec::new();
        for &i in &order {
            if starts.len() >= 3 {
                break;
            }
            let p = space.from_unit(&cands[i]);
            if seen.contains(&p) {
                continue;
            }
            seen.push(p);
            starts.push((i, false));
        }
        if !low.is_empty() {
            let mut keys: Vec<Vec<Option<usize>>> =
                seen.iter().map(|p| low.key(space, p)).collect();
            let mut groups = 0;
            for &i in &order {
                if groups >= discrete::MAX_GROUPS_REFINED {
                    break;
                }
                let k = low.key(space, &space.from_unit(&cands[i]));
                if keys.contains(&k) {
                    continue;
                }
                keys.push(k);
                starts.push((i, true));
                groups += 1;
            }
        }
        let mut finals: Vec<(Vec<f64>, f64)> = Vec::new();
        for (i, group) in starts {
            let (u, s) = acq.refine_continuous(&cands[i], scores[i], 25);
            let frozen = if group { &all_low } else { &held };
            let (mut u, s) = acq.refine_discrete(&u, s, frozen);
            let s = if held_box.is_some() {
                hold(&mut u);
                acq.score(std::slice::from_ref(&u))[0]
            } else {
                s
            };
            finals.push((u, s));
        }
        // Then every other candidate, in score order, as fall-backs against duplicates.
        finals.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (u, _) in finals
            .iter()
            .map(|(u, s)| (u.clone(), *s))
            .chain(order.iter().map(|&i| (cands[i].clone(), scores[i])))
        {
            let p = space.from_unit(&u);
            if !is_duplicate(&p, ctx) {
                return Some(p);
            }
        }
        None
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
        );
        let complete = ctx.history.iter().filter(|t| t.value().is_some()).count();
        let phase = rule.phase(ctx.trial_number.0, complete);
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
            // Too little data (fewer than two complete trials), a model that cannot be built,
            // or nothing new among the candidates: keep exploring.
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
