//! One single-objective ask as a pipeline of named stages (each tuned constant is a field of
//! [`GpPolicy`], documented with its rule):
//!
//! 1. **model** ([`GpSampler::model`]): the history as the model sees it, the kernel's
//!    hyper-parameters and the posterior (`model.rs`);
//! 2. **incumbent** ([`Incumbent::of`]): the best complete trial, and the level below which
//!    improvement counts (a margin once it has a twin);
//! 3. **side models** ([`SideModels::fit`]): the failure classifier and the cost model, which
//!    weight the acquisition;
//! 4. **focus** ([`Focus::new`]): what this ask holds (a starved low-cardinality value, whose
//!    every other ask is a space-filling point, [`Focus::space_filling`]) and where it
//!    searches (near that value's best trial, or near the incumbent on a refining ask);
//! 5. **candidates** ([`candidates`]): a Sobol sweep, perturbations of the best trials and of
//!    the anchor, every low-cardinality value substituted into the best points, all scored;
//! 6. **refine** ([`refine`]): a local search from the best few distinct candidates and the
//!    best of each low-cardinality combination;
//! 7. **pick** ([`pick`]): the best refined point that is no duplicate, else the next
//!    candidate in score order.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

use super::acquisition::Acq;
use super::cost::Cost;
use super::discrete::{self, Held, LowCard};
use super::feasibility::Feasibility;
use super::fit::Posterior;
use super::kernel::Layout;
use super::model::{
    Modelled, Obs, fit_theta, labelled, observations, posterior, quantile, subset, to_u,
};
use super::{GpPolicy, GpSampler};
use crate::sampler::qmc::sobol_point;
use crate::sampler::{AskContext, is_duplicate, mix};
use crate::space::{ParamKind, Params, Space};

/// The model stage's result, which every later stage reads.
struct Model {
    layout: Layout,
    obs: Vec<Obs>,
    post: Posterior,
    /// The kernel's hyper-parameters, which the side models share.
    theta: Vec<f64>,
}

/// The incumbent stage's result: the best complete trial and the level improvement is
/// measured from.
struct Incumbent<'m> {
    obs: &'m Obs,
    /// The incumbent's output less the margin ([`GpPolicy::ei_margin`]) once it has a twin.
    target: f64,
}

/// The side models' stage's result: what weights the acquisition besides the posterior.
struct SideModels {
    feas: Option<Feasibility>,
    cost: Option<Cost>,
}

/// The focus stage's result: what this ask holds and where it searches.
struct Focus<'m> {
    /// The low-cardinality parameters (none without [`GpPolicy::robust_discrete`]).
    low: LowCard,
    /// The value (or combination) behind its exploration floor that this ask holds.
    holding: Option<Held>,
    /// The held values as (parameter position, unit-cube value).
    forced: Vec<(usize, f64)>,
    /// A refining ask ([`GpPolicy::exploit_every`]).
    exploit: bool,
    /// The trial the search stays near: the incumbent on a refining ask, the held value's
    /// best trial when a value is held.
    anchor: Option<&'m Obs>,
    /// The anchor in the unit cube (inactive params at 0.5).
    anchor_u: Option<Vec<f64>>,
    /// The box around the anchor that candidates are kept in.
    held_box: Option<Vec<(f64, f64)>>,
}

/// The candidates' stage's result: points of the unit cube, their scores, and their order
/// (best first).
struct Candidates {
    points: Vec<Vec<f64>>,
    scores: Vec<f64>,
    order: Vec<usize>,
}

impl GpSampler {
    /// A single-objective proposal; `None` when the model cannot be built (fewer than two
    /// complete trials) or nothing new is found.
    pub(super) fn propose(&mut self, ctx: &AskContext<'_>) -> Option<Params> {
        let mut rng = ctx.rng();
        let model = self.model(ctx, &mut rng)?;
        let incumbent = Incumbent::of(&self.policy, &model.obs)?;
        let side = SideModels::fit(&self.policy, self.opts.cost_aware, &model);
        let focus = Focus::new(&self.policy, ctx, &model, &incumbent, self.scalarised);
        if let Some(p) = focus.space_filling(ctx) {
            return Some(p);
        }
        let acq = Acq {
            space: ctx.space,
            layout: &model.layout,
            post: &model.post,
            best: focus.anchor.map_or(incumbent.target, |a| a.z),
            greedy: focus.exploit,
            feas: side.feas.as_ref(),
            cost: side.cost.as_ref(),
        };
        let cands = candidates(&self.policy, ctx, &model.obs, &focus, &acq, &mut rng);
        let finals = refine(&self.policy, ctx.space, &focus, &acq, &cands);
        pick(ctx, finals, &cands)
    }

    /// The model stage: observations, hyper-parameters (warm-started from the last ask's) and
    /// the posterior with the pending trials as fantasies.
    fn model(&mut self, ctx: &AskContext<'_>, rng: &mut ChaCha8Rng) -> Option<Model> {
        let layout = Layout::new(ctx.space);
        let obs = observations(&self.policy, ctx, &layout, Modelled::Single)?;
        let theta = fit_theta(
            &self.policy,
            &mut self.theta,
            &layout,
            &obs,
            ctx.trial_number.0,
            rng,
        );
        let post = posterior(&self.policy, ctx, &layout, &obs, &theta)?;
        Some(Model {
            layout,
            obs,
            post,
            theta,
        })
    }
}

impl<'m> Incumbent<'m> {
    /// The best complete trial; once it has a twin (another complete trial closer than
    /// [`GpPolicy::twin`] in every feature), improvement counts only beyond
    /// [`GpPolicy::ei_margin`].
    fn of(policy: &GpPolicy, obs: &'m [Obs]) -> Option<Incumbent<'m>> {
        let incumbent = obs
            .iter()
            .filter(|o| o.complete)
            .min_by(|a, b| a.z.total_cmp(&b.z))?;
        let twinned = obs.iter().filter(|o| o.complete).any(|o| {
            !std::ptr::eq(o, incumbent)
                && o.feat
                    .iter()
                    .zip(&incumbent.feat)
                    .all(|(a, b)| (a - b).abs() < policy.twin)
        });
        let margin = if twinned { policy.ei_margin } else { 0.0 };
        Some(Incumbent {
            obs: incumbent,
            target: incumbent.z - margin,
        })
    }
}

impl SideModels {
    /// Failed trials as a constraint: where they cluster, the chance of running falls. They
    /// stay in the regression at the worst value too. Taken out of it (the issue's "no longer
    /// a penalised value"), the model extrapolates good values into the failing region: on
    /// tune-bench's three failure problems the score rose on fail_oom but the failed trials
    /// doubled on one problem, and went up fivefold on all three without the `SAFE` rank rule.
    /// Durations give EI per expected second when they vary (none known, or barely varying:
    /// no model, the same proposals as without it). Both side models learn from the same
    /// spread of trials (`subset`).
    fn fit(policy: &GpPolicy, cost_aware: bool, model: &Model) -> SideModels {
        let obs = &model.obs;
        let kept = subset(obs, policy.max_points);
        let feas = policy
            .learn_failures
            .then(|| {
                let (x, ok) = labelled(obs, &kept, |o| {
                    (o.complete || o.failed).then_some(o.complete)
                });
                Feasibility::fit(&model.layout, &x, &ok, &model.theta)
            })
            .flatten();
        let cost = cost_aware
            .then(|| {
                let (x, seconds) = labelled(obs, &kept, |o| o.seconds);
                Cost::fit(&model.layout, &x, &seconds, &model.theta)
            })
            .flatten();
        SideModels { feas, cost }
    }
}

impl<'m> Focus<'m> {
    /// A value of a low-cardinality parameter that is behind its exploration floor is held
    /// for this ask (pending trials count, so a batch spreads over the starved values).
    ///
    /// The acquisition's half of a starved value's asks searches near that value's best
    /// trial: a box of half-width [`GpPolicy::held_radius`] on the parameters that are neither
    /// categorical nor low-cardinality (those stay free). Unbounded, log EI under a model
    /// that has seen the value little goes to the box's corners, where it is most unsure.
    /// Improvement is measured from that best trial too, not from the incumbent: against
    /// the incumbent, a value behind it can only win where the model is most unsure, so
    /// log EI sends the ask to the box's corners again; against its own best, the ask
    /// follows what the value's trials have shown (a local search of that value). On the
    /// trap problems this alone raised the mean @50 at q = 4 and freed trap_cat5's seed below
    /// random's median at q = 1 (docs/experiments/gp-mixed-space.md, "Combinations of
    /// categoricals").
    /// A refining ask ([`GpPolicy::exploit_every`]) is held the same way, near the incumbent,
    /// within [`GpPolicy::exploit_radius`].
    fn new(
        policy: &GpPolicy,
        ctx: &AskContext<'_>,
        model: &'m Model,
        incumbent: &Incumbent<'m>,
        scalarised: bool,
    ) -> Focus<'m> {
        let space = ctx.space;
        let obs = &model.obs;
        let low = if policy.robust_discrete {
            LowCard::new(space)
        } else {
            LowCard { params: Vec::new() }
        };
        let holding = starved(space, &low, ctx, obs);
        let forced: Vec<(usize, f64)> = holding
            .iter()
            .flat_map(|h| &h.values)
            .map(|&(pi, vi)| (low.params[pi].index, low.params[pi].units[vi]))
            .collect();
        let exploit = holding.is_none() && !scalarised && policy.refines_at(ctx.trial_number.0);
        let anchor: Option<&Obs> = if exploit {
            Some(incumbent.obs)
        } else {
            holding.as_ref().and_then(|h| {
                obs.iter()
                    .filter(|o| o.complete && h.matches(&low.key(space, &o.params)))
                    .min_by(|a, b| a.z.total_cmp(&b.z))
            })
        };
        let radius = if exploit {
            policy.exploit_radius
        } else {
            policy.held_radius
        };
        let anchor_u: Option<Vec<f64>> = anchor.map(|a| {
            let mut fill = || 0.5;
            to_u(space, &a.params, &mut fill)
        });
        let held_box: Option<Vec<(f64, f64)>> = anchor_u.as_ref().map(|a| {
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
        Focus {
            low,
            holding,
            forced,
            exploit,
            anchor,
            anchor_u,
            held_box,
        }
    }

    /// A starved value's trial may be a space-filling one: the next point of a scrambled
    /// Sobol stream of its own, the value held. The model cannot be trusted there (it has seen
    /// the value little, and what it has seen may be far from the value's valley), and log EI
    /// under a confident wrong model sends such trials to the box's edges, where a narrow
    /// valley is never met; an even spread over the other parameters meets it. Every other
    /// starved ask (by the value's count) is this space-filling point; the rest hold the value
    /// and maximise the acquisition, which exploits what the spread found.
    fn space_filling(&self, ctx: &AskContext<'_>) -> Option<Params> {
        let h = self.holding.as_ref().filter(|h| h.have % 2 == 0)?;
        let mut u = sobol_point(h.have as u64, ctx.space.len(), mix(ctx.seed, h.stream));
        for &(i, v) in &self.forced {
            u[i] = v;
        }
        let p = ctx.space.from_unit(&u);
        (!is_duplicate(&p, ctx)).then_some(p)
    }

    /// Sets the held values and keeps `u` in the box around the anchor.
    fn hold(&self, u: &mut [f64]) {
        for &(i, v) in &self.forced {
            u[i] = v;
        }
        if let Some(b) = &self.held_box {
            for (x, &(lo, hi)) in u.iter_mut().zip(b) {
                *x = x.clamp(lo, hi);
            }
        }
    }
}

/// The candidates' stage: a scrambled Sobol sweep (within the held box, if any) plus
/// perturbations of the anchor and of the best trials; with low-cardinality parameters, every
/// value (and combination) substituted into the best trials and the best candidates. All are
/// held ([`Focus::hold`]) and scored.
fn candidates(
    policy: &GpPolicy,
    ctx: &AskContext<'_>,
    obs: &[Obs],
    focus: &Focus<'_>,
    acq: &Acq<'_>,
    rng: &mut ChaCha8Rng,
) -> Candidates {
    let space = ctx.space;
    let d = space.len();
    let sweep_seed = mix(ctx.seed, ctx.trial_number.0 ^ 0xACE0_0000);
    let mut cands: Vec<Vec<f64>> = (0..policy.sweep)
        .map(|i| {
            let mut u = sobol_point(i as u64, d, sweep_seed);
            if let Some(b) = &focus.held_box {
                for (x, &(lo, hi)) in u.iter_mut().zip(b) {
                    *x = lo + (hi - lo) * *x;
                }
            }
            u
        })
        .collect();
    if let Some(a) = &focus.anchor_u {
        cands.extend(perturbations(space, a, policy.perturbations, rng));
    }
    let mut ranked: Vec<&Obs> = obs.iter().filter(|o| o.complete).collect();
    ranked.sort_by(|a, b| a.z.total_cmp(&b.z));
    let mut incumbents: Vec<Vec<f64>> = Vec::new();
    for o in ranked.iter().take(policy.perturbed_trials) {
        let mut fill = || rng.random::<f64>();
        let base = to_u(space, &o.params, &mut fill);
        cands.extend(perturbations(space, &base, policy.perturbations, rng));
        incumbents.push(base);
    }
    cands.iter_mut().for_each(|u| focus.hold(u));
    let mut scores = acq.score(&cands);

    let low = &focus.low;
    if !low.is_empty() {
        let mut top: Vec<usize> = (0..cands.len()).collect();
        top.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        let bases: Vec<Vec<f64>> = incumbents
            .iter()
            .take(policy.substituted_trials)
            .cloned()
            .chain(
                top.iter()
                    .take(policy.substituted_candidates)
                    .map(|&i| cands[i].clone()),
            )
            .collect();
        let mut extra: Vec<Vec<f64>> = bases.iter().flat_map(|b| low.substitutions(b)).collect();
        extra.iter_mut().for_each(|u| focus.hold(u));
        scores.extend(acq.score(&extra));
        cands.extend(extra);
    }

    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    Candidates {
        points: cands,
        scores,
        order,
    }
}

/// The refine stage. Starting points: the best few distinct candidates
/// ([`GpPolicy::refine_starts`]; their discrete values free to move, the held ones excepted),
/// then the best candidate of each combination of low-cardinality values (those values held),
/// so that each value competes with its own best continuous setting rather than with the
/// incumbent's. Each is refined on its continuous floats, then on its discrete params, and
/// held again. Returns the refined points with their scores, best first.
fn refine(
    policy: &GpPolicy,
    space: &Space,
    focus: &Focus<'_>,
    acq: &Acq<'_>,
    cands: &Candidates,
) -> Vec<(Vec<f64>, f64)> {
    let low = &focus.low;
    let held: Vec<usize> = focus.forced.iter().map(|&(i, _)| i).collect();
    let all_low: Vec<usize> = low.params.iter().map(|p| p.index).collect();
    let mut starts: Vec<(usize, bool)> = Vec::new();
    let mut seen: Vec<Params> = Vec::new();
    for &i in &cands.order {
        if starts.len() >= policy.refine_starts {
            break;
        }
        let p = space.from_unit(&cands.points[i]);
        if seen.contains(&p) {
            continue;
        }
        seen.push(p);
        starts.push((i, false));
    }
    if !low.is_empty() {
        let mut keys: Vec<Vec<Option<usize>>> = seen.iter().map(|p| low.key(space, p)).collect();
        let mut groups = 0;
        for &i in &cands.order {
            if groups >= discrete::MAX_GROUPS_REFINED {
                break;
            }
            let k = low.key(space, &space.from_unit(&cands.points[i]));
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
        let (u, s) =
            acq.refine_continuous(&cands.points[i], cands.scores[i], policy.refine_iterations);
        let frozen = if group { &all_low } else { &held };
        let (mut u, s) = acq.refine_discrete(&u, s, frozen);
        let s = if focus.held_box.is_some() {
            focus.hold(&mut u);
            acq.score(std::slice::from_ref(&u))[0]
        } else {
            s
        };
        finals.push((u, s));
    }
    finals.sort_by(|a, b| b.1.total_cmp(&a.1));
    finals
}

/// The pick stage: the best refined point that is not a duplicate of a finished or pending
/// trial, then every other candidate, in score order, as fall-backs against duplicates.
fn pick(ctx: &AskContext<'_>, finals: Vec<(Vec<f64>, f64)>, cands: &Candidates) -> Option<Params> {
    finals
        .into_iter()
        .map(|(u, _)| u)
        .chain(cands.order.iter().map(|&i| cands.points[i].clone()))
        .map(|u| ctx.space.from_unit(&u))
        .find(|p| !is_duplicate(p, ctx))
}

/// Unit-cube candidates around `base`: `n` Gaussian steps, the first half with a standard
/// deviation of 0.02, the rest 0.1; a categorical is redrawn with probability 0.15.
pub(super) fn perturbations(
    space: &Space,
    base: &[f64],
    n: usize,
    rng: &mut impl Rng,
) -> Vec<Vec<f64>> {
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
