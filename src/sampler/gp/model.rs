//! The model stage of an ask: the history as the model sees it ([`Obs`], through the output
//! [`Warp`]), the kernel's hyper-parameters ([`fit_theta`]) and the posterior with the pending
//! trials as fantasies ([`posterior`]). Its tuned constants are in [`GpPolicy`].

use std::collections::HashMap;

use rand::Rng;
use rand_distr::StandardNormal;

use super::GpPolicy;
use super::fit::{self, FitData, Posterior};
use super::kernel::Layout;

use crate::pruner::forecast::{Matched, Place, Reference};
use crate::sampler::{AskContext, MIN_AT_RUNG_TO_MODEL, MIN_COMPLETE_TO_MODEL};
use crate::space::{Params, Space};
use crate::trial::{Direction, FinishedTrial, Outcome};

/// A monotone map of losses to the model's outputs: a log warp when a few losses dwarf the
/// rest (so that values spanning decades do not flatten the model near the optimum), a robust
/// centre and scale, a soft cap on the upper tail (huge losses only say "bad"), then unit
/// variance with zero (the GP's prior mean) at a high quantile
/// ([`GpPolicy::prior_mean_q`]; the cap: [`GpPolicy::warp_cap`]). The lower
/// tail, where the optimum is, is never squashed.
pub(super) struct Warp {
    min: f64,
    log_c: Option<f64>,
    centre: f64,
    scale: f64,
    /// The capped value that maps to zero.
    zero: f64,
    sd: f64,
    /// Where the soft cap starts ([`GpPolicy::warp_cap`]).
    cap: f64,
}

pub(super) fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Warp {
    pub(super) fn fit(ys: &[f64], policy: &GpPolicy) -> Warp {
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
            cap: policy.warp_cap,
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
        // mean (`GpPolicy::prior_mean_q`).
        let mut sorted = zs;
        sorted.sort_by(f64::total_cmp);
        w.zero = quantile(&sorted, policy.prior_mean_q);
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
        if z > self.cap {
            self.cap + (z - self.cap).ln_1p()
        } else {
            z
        }
    }

    pub(super) fn apply(&self, y: f64) -> f64 {
        (self.cap(self.pre(y)) - self.zero) / self.sd
    }
}

/// A finished trial as the model sees it.
pub(super) struct Obs {
    pub params: Params,
    pub feat: Vec<f64>,
    pub z: f64,
    pub complete: bool,
    /// Failed, or finished with a value that is not finite (NaN, infinite): did not run.
    pub failed: bool,
    /// How long it ran (complete trials only): what the cost model learns from.
    pub seconds: Option<f64>,
}

/// Unit-cube coordinates of a trial's params; inactive params (which have none) get `fill`.
pub(super) fn to_u(space: &Space, params: &Params, fill: &mut impl FnMut() -> f64) -> Vec<f64> {
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
pub(super) fn labelled<T>(
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
pub(super) fn subset(obs: &[Obs], max: usize) -> Vec<usize> {
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
/// point, or no complete curve that reaches where it stopped. `matched` holds the references
/// read at each `(r₀, r)` already met: trials pruned at the same rung share them.
pub(super) fn forecast_final(
    refs: &[Reference],
    matched: &mut HashMap<(Option<u64>, u64), Option<Matched>>,
    curve: &[(u64, f64)],
    direction: Direction,
) -> Option<f64> {
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
    matched
        .entry((earlier.map(|p| p.0.to_bits()), r.to_bits()))
        .or_insert_with(|| Matched::at(refs, earlier.map(|p| p.0), r))
        .as_ref()?
        .forecast(earlier.map(|p| p.1), y, &Place::default(), 0.9)
        .map(|f| f.mean)
        .filter(|m| m.is_finite())
}

/// Which objective the model learns: the study's only one, or one of a multi-objective study's
/// (not `trial::Objective`, a stored objective's metric and direction).
#[derive(Clone, Copy)]
pub(super) enum Modelled {
    Single,
    /// The objective at this position of [`AskContext::directions`].
    Multi(usize),
}

/// The finished trials as the model of `objective` sees them: their final values, once two
/// trials are complete; before that (every trial pruned so far, a single objective), their
/// values at the highest rung enough of them reached ([`rung_observations`]); `None` with
/// neither.
pub(super) fn observations(
    policy: &GpPolicy,
    ctx: &AskContext<'_>,
    layout: &Layout,
    objective: Modelled,
) -> Option<Vec<Obs>> {
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
        return match objective {
            Modelled::Single => rung_observations(policy, ctx, layout),
            Modelled::Multi(_) => None,
        };
    }
    let warp = Warp::fit(&complete, policy);
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
    let mut matched = HashMap::new();
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
                if let Some(f) = forecast_final(&refs, &mut matched, &t.curve, ctx.direction) =>
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

/// A trial's learning curve as losses: its finite points, `(step, loss)` in step order.
fn loss_curve(t: &FinishedTrial, direction: Direction) -> Vec<(u64, f64)> {
    let mut points: Vec<(u64, f64)> = t
        .curve
        .iter()
        .map(|&(step, v)| (step, direction.loss(v)))
        .filter(|(_, l)| l.is_finite())
        .collect();
    // Report order is step order for every trainer tune knows; a stable sort keeps a repeated
    // step's reports in the order they came.
    points.sort_by_key(|p| p.0);
    points
}

/// A curve's loss at `rung`: its last point at or before it.
fn loss_at(curve: &[(u64, f64)], rung: u64) -> Option<f64> {
    curve.iter().rev().find(|p| p.0 <= rung).map(|p| p.1)
}

/// The rung a history's learning curves are modelled at: the highest step that at least
/// [`MIN_AT_RUNG_TO_MODEL`] trials reached, each with a value at or before it (BOHB's rule: the
/// highest budget with enough observations); `None` when no step has that many.
pub(super) fn model_rung(curves: &[Vec<(u64, f64)>]) -> Option<u64> {
    let mut steps: Vec<u64> = curves.iter().flatten().map(|p| p.0).collect();
    steps.sort_unstable();
    steps.dedup();
    steps.into_iter().rev().find(|&r| {
        curves
            .iter()
            .filter(|c| c.first().is_some_and(|p| p.0 <= r) && c.last().is_some_and(|p| p.0 >= r))
            .count()
            >= MIN_AT_RUNG_TO_MODEL
    })
}

/// The finished trials as the model sees them while fewer than two are complete, from their
/// learning curves: a trial that reached the model's rung ([`model_rung`]) enters at its loss
/// there, as a modelled point the incumbent may be; one stopped below it at its last loss but
/// no better than the rung's median (it was stopped for looking bad, and a lower rung's loss
/// is not comparable); one with no finite report at the median; a failed one at the worst.
/// The proposals then aim at the best configuration at the rung, which is what the pruner
/// promotes towards the full budget. `None` when no rung has enough trials.
fn rung_observations(policy: &GpPolicy, ctx: &AskContext<'_>, layout: &Layout) -> Option<Vec<Obs>> {
    let curves: Vec<Vec<(u64, f64)>> = ctx
        .history
        .iter()
        .map(|t| match t.outcome {
            Outcome::Failed => Vec::new(),
            _ => loss_curve(t, ctx.direction),
        })
        .collect();
    let rung = model_rung(&curves)?;
    let at_rung: Vec<Option<f64>> = curves
        .iter()
        .map(|c| {
            c.last()
                .filter(|p| p.0 >= rung)
                .and_then(|_| loss_at(c, rung))
        })
        .collect();
    let losses: Vec<f64> = at_rung.iter().flatten().copied().collect();
    let warp = Warp::fit(&losses, policy);
    let mut zs: Vec<f64> = losses.iter().map(|&l| warp.apply(l)).collect();
    zs.sort_by(f64::total_cmp);
    let worst = zs[zs.len() - 1];
    let median = quantile(&zs, 0.5);
    let obs = ctx
        .history
        .iter()
        .zip(curves.iter().zip(&at_rung))
        .map(|(t, (curve, at))| {
            let failed = matches!(t.outcome, Outcome::Failed);
            let (z, complete) = match (failed, at, curve.last()) {
                (true, _, _) => (worst, false),
                (false, Some(l), _) => (warp.apply(*l), true),
                (false, None, Some(&(_, l))) => (warp.apply(l).max(median), false),
                (false, None, None) => (median, false),
            };
            Obs {
                feat: layout.encode(ctx.space, &t.params),
                params: t.params.clone(),
                z,
                complete,
                failed,
                seconds: None,
            }
        })
        .collect();
    Some(obs)
}

/// The kernel's hyper-parameters fitted on (a subset of) `obs`, warm-started from `cache` (the
/// last ask's fit, which it then holds): a cold start searches longer and from more places.
pub(super) fn fit_theta(
    policy: &GpPolicy,
    cache: &mut Option<Vec<f64>>,
    layout: &Layout,
    obs: &[Obs],
    trial_number: u64,
    rng: &mut impl Rng,
) -> Vec<f64> {
    let fit_idx = subset(obs, policy.max_fit_points);
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
    if cold || trial_number.is_multiple_of(policy.noisy_start_every) {
        let mut t = default.clone();
        t[layout.groups + 1] = policy.noisy_start_log_sn2;
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
pub(super) fn posterior(
    policy: &GpPolicy,
    ctx: &AskContext<'_>,
    layout: &Layout,
    obs: &[Obs],
    theta: &[f64],
) -> Option<Posterior> {
    let idx = subset(obs, policy.max_points);
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
