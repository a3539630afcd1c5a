//! NSGA-II (Deb et al. 2002) as a steady-state sampler.
//!
//! A generational NSGA-II waits for a whole population before it breeds the next; a tuning
//! study asks one trial at a time, often with others still running. So every ask rebuilds the
//! parent population from the history alone: the complete trials ranked by non-dominated sort,
//! ties within a front broken by crowding distance (wider gaps first), and the best
//! `population_size` kept (elitism). Pruned trials rank below every complete one (a deeper
//! step first), so they fill the population only when too few trials completed; failed trials
//! are never parents. One child is bred per ask: two binary tournaments pick the parents, SBX
//! crosses numbers and uniform crossover picks categories, polynomial mutation moves each
//! number with probability 1/d and a category is redrawn with the same probability. All of it
//! happens in the unit cube, so log scales, ints and steps are the space's business.
//!
//! The first population is a scrambled Sobol design. Every ask draws from its own RNG stream
//! (`ctx.rng()`), so parallel asks over the same history breed different children, and a child
//! that repeats a finished or pending configuration is bred again. With one objective the
//! sort is a plain ranking and the sampler is an elitist genetic algorithm.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::pareto::{crowding_distance, losses, non_dominated_sort};
use crate::sampler::{AskContext, Sampler, SobolSampler, avoid_repeat, is_duplicate};
use crate::space::{ParamKind, Params};

/// NSGA-II's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Nsga2Options {
    /// Sobol trials before the first generation; `None`: the population size.
    pub n_startup: Option<usize>,
    /// Parents kept from the history. Small, because tuning budgets are small: with 50 trials
    /// Optuna's 50 would leave a single generation (measured in `docs/experiments/multi-objective.md`,
    /// "Multi-objective").
    pub population_size: usize,
    /// Probability that a child is a crossover of two parents rather than a copy of one.
    pub crossover_prob: f64,
    /// SBX distribution index: higher keeps children closer to their parents.
    pub eta_crossover: f64,
    /// Polynomial mutation's distribution index.
    pub eta_mutation: f64,
    /// Per-parameter mutation probability; `None`: 1/d.
    pub mutation_prob: Option<f64>,
}

impl Default for Nsga2Options {
    fn default() -> Self {
        Nsga2Options {
            n_startup: None,
            population_size: 16,
            crossover_prob: 0.9,
            eta_crossover: 15.0,
            eta_mutation: 20.0,
            mutation_prob: None,
        }
    }
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

/// Children bred again when one repeats a finished or pending configuration.
const MAX_REBREED: usize = 16;

/// A parent: its unit-cube coordinates (`None` where inactive), its front and crowding.
struct Parent {
    u: Vec<Option<f64>>,
    rank: usize,
    crowding: f64,
}

impl Parent {
    /// Whether `self` wins a tournament against `other`: lower front, then wider gap.
    fn beats(&self, other: &Parent) -> bool {
        self.rank < other.rank || (self.rank == other.rank && self.crowding > other.crowding)
    }
}

impl Sampler for Nsga2Sampler {
    fn ask(&mut self, ctx: &AskContext<'_>) -> Params {
        let pop = self.opts.population_size.max(2);
        let n_startup = self.opts.n_startup.unwrap_or(pop);
        if (ctx.trial_number.0 as usize) < n_startup {
            return SobolSampler.ask(ctx);
        }
        let parents = self.parents(ctx, pop);
        if parents.len() < 2 {
            return SobolSampler.ask(ctx);
        }
        let mut rng = ctx.rng();
        let mut child = self.breed(ctx, &parents, &mut rng);
        for _ in 0..MAX_REBREED {
            if !is_duplicate(&child, ctx) {
                break;
            }
            child = self.breed(ctx, &parents, &mut rng);
        }
        avoid_repeat(child, ctx)
    }
}

impl Nsga2Sampler {
    /// The best `pop` finished trials: complete ones by front and crowding, then pruned ones.
    fn parents(&self, ctx: &AskContext<'_>, pop: usize) -> Vec<Parent> {
        let space = ctx.space;
        let coords = |p: &Params| -> Vec<Option<f64>> {
            space
                .params()
                .iter()
                .map(|q| p.get(&q.name).map(|v| q.to_unit(v)))
                .collect()
        };
        let scored = losses(ctx.history, &ctx.directions());
        let points: Vec<Vec<f64>> = scored.iter().map(|(_, l)| l.clone()).collect();
        let mut out = Vec::with_capacity(pop);
        for (rank, front) in non_dominated_sort(&points).into_iter().enumerate() {
            let crowd = crowding_distance(&points, &front);
            let mut members: Vec<(usize, f64)> = front.into_iter().zip(crowd).collect();
            // Widest gaps first; the index breaks ties so the order is deterministic.
            members.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            for (i, c) in members {
                if out.len() == pop {
                    return out;
                }
                out.push(Parent {
                    u: coords(&ctx.history[scored[i].0].params),
                    rank,
                    crowding: c,
                });
            }
        }
        // Pruned trials count as worse than any complete one: deeper first, then lower loss.
        let mut pruned: Vec<(u64, f64, &Params)> = ctx
            .history
            .iter()
            .filter_map(|t| {
                let (step, loss) = t.outcome.pruned_rank(ctx.direction)?;
                Some((step, loss, &t.params))
            })
            .collect();
        pruned.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.total_cmp(&b.1)));
        let base = out.last().map_or(0, |p: &Parent| p.rank + 1);
        for (k, (_, _, p)) in pruned.into_iter().enumerate() {
            if out.len() == pop {
                break;
            }
            out.push(Parent {
                u: coords(p),
                rank: base + k,
                crowding: 0.0,
            });
        }
        out
    }

    /// One child: two tournaments, crossover, mutation, decoded into params.
    fn breed(&self, ctx: &AskContext<'_>, parents: &[Parent], rng: &mut ChaCha8Rng) -> Params {
        let a = tournament(parents, rng, None);
        let b = tournament(parents, rng, Some(a));
        let (pa, pb) = (&parents[a], &parents[b]);
        let params = ctx.space.params();
        let d = params.len().max(1) as f64;
        let pm = self.opts.mutation_prob.unwrap_or(1.0 / d).clamp(0.0, 1.0);
        let cross = rng.random::<f64>() < self.opts.crossover_prob;
        let u: Vec<f64> = params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                // A parameter inactive in one parent takes the other's value; inactive in both,
                // a uniform draw (it only matters if the child activates it).
                let (x, y) = match (pa.u[i], pb.u[i]) {
                    (Some(x), Some(y)) => (x, y),
                    (Some(x), None) | (None, Some(x)) => (x, x),
                    (None, None) => {
                        let r = rng.random::<f64>();
                        (r, r)
                    }
                };
                let categorical = matches!(p.kind, ParamKind::Categorical { .. });
                let mut v = if !cross || x == y {
                    x
                } else if categorical {
                    if rng.random::<bool>() { x } else { y }
                } else {
                    sbx(x, y, self.opts.eta_crossover, rng)
                };
                if rng.random::<f64>() < pm {
                    v = if categorical {
                        rng.random::<f64>()
                    } else {
                        polynomial_mutation(v, self.opts.eta_mutation, rng)
                    };
                }
                v.clamp(0.0, 1.0)
            })
            .collect();
        ctx.space.from_unit(&u)
    }
}

/// Binary tournament: the better of two distinct random parents (other than `not`, when
/// there are enough).
fn tournament(parents: &[Parent], rng: &mut ChaCha8Rng, not: Option<usize>) -> usize {
    let n = parents.len();
    let pick = |rng: &mut ChaCha8Rng| loop {
        let i = rng.random_range(0..n);
        if Some(i) != not || n < 2 {
            return i;
        }
    };
    let i = pick(rng);
    let mut j = pick(rng);
    if n > 2 {
        while j == i {
            j = pick(rng);
        }
    }
    if parents[j].beats(&parents[i]) { j } else { i }
}

/// Simulated binary crossover (Deb & Agrawal 1995) of two coordinates in [0, 1], bounded
/// form; returns one of the two children at random.
fn sbx(x: f64, y: f64, eta: f64, rng: &mut ChaCha8Rng) -> f64 {
    // Half of the coordinates are inherited unchanged, as in the reference implementation,
    // so children keep whole building blocks of their parents.
    if rng.random::<bool>() {
        return if rng.random::<bool>() { x } else { y };
    }
    let (lo, hi) = if x < y { (x, y) } else { (y, x) };
    let gap = (hi - lo).max(1e-14);
    let r = rng.random::<f64>();
    let spread = |beta: f64| {
        let alpha = 2.0 - beta.powf(-(eta + 1.0));
        if r <= 1.0 / alpha {
            (r * alpha).powf(1.0 / (eta + 1.0))
        } else {
            (1.0 / (2.0 - r * alpha)).powf(1.0 / (eta + 1.0))
        }
    };
    let beta_lo = 1.0 + 2.0 * lo / gap;
    let beta_hi = 1.0 + 2.0 * (1.0 - hi) / gap;
    let c1 = 0.5 * ((lo + hi) - spread(beta_lo) * gap);
    let c2 = 0.5 * ((lo + hi) + spread(beta_hi) * gap);
    let c = if rng.random::<bool>() { c1 } else { c2 };
    c.clamp(0.0, 1.0)
}

/// Polynomial mutation (Deb & Goyal 1996) of a coordinate in [0, 1], bounded form.
fn polynomial_mutation(x: f64, eta: f64, rng: &mut ChaCha8Rng) -> f64 {
    let r = rng.random::<f64>();
    let p = 1.0 / (eta + 1.0);
    let delta = if r < 0.5 {
        let xy = 1.0 - x;
        let v = 2.0 * r + (1.0 - 2.0 * r) * xy.powf(eta + 1.0);
        v.powf(p) - 1.0
    } else {
        let xy = x;
        let v = 2.0 * (1.0 - r) + 2.0 * (r - 0.5) * xy.powf(eta + 1.0);
        1.0 - v.powf(p)
    };
    (x + delta).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::RandomSampler;
    use crate::sampler::multi::pareto::hypervolume;
    use crate::space::{Param, ParamValue, Space};
    use crate::trial::{Direction, FinishedTrial, Outcome, TrialNumber};

    fn float(name: &str, low: f64, high: f64, log: bool) -> Param {
        Param {
            name: name.into(),
            kind: ParamKind::Float {
                low,
                high,
                log,
                step: None,
            },
            when: Vec::new(),
        }
    }

    fn mixed_space() -> Space {
        Space::new(vec![
            float("lr", 1e-5, 1e-1, true),
            Param {
                name: "layers".into(),
                kind: ParamKind::Int {
                    low: 1,
                    high: 4,
                    log: false,
                    step: 1,
                },
                when: Vec::new(),
            },
            Param {
                name: "opt".into(),
                kind: ParamKind::Categorical {
                    choices: vec![
                        ParamValue::Str("adam".into()),
                        ParamValue::Str("sgd".into()),
                    ],
                },
                when: Vec::new(),
            },
            Param {
                name: "momentum".into(),
                kind: ParamKind::Float {
                    low: 0.0,
                    high: 0.99,
                    log: false,
                    step: None,
                },
                when: vec![crate::space::Condition {
                    parent: "opt".into(),
                    values: vec![ParamValue::Str("sgd".into())],
                }],
            },
        ])
        .expect("a valid space")
    }

    fn zdt_space(d: usize) -> Space {
        Space::new(
            (0..d)
                .map(|i| float(&format!("x{i}"), 0.0, 1.0, false))
                .collect(),
        )
        .expect("a valid space")
    }

    /// ZDT1 on the space's params: two losses, true front f2 = 1 - sqrt(f1).
    fn zdt1(p: &Params) -> (f64, f64) {
        let x: Vec<f64> = (0..p.len())
            .map(|i| p[&format!("x{i}")].as_f64().expect("a float"))
            .collect();
        let g = 1.0 + 9.0 * x[1..].iter().sum::<f64>() / (x.len() - 1) as f64;
        (x[0], g * (1.0 - (x[0] / g).sqrt()))
    }

    /// Runs `sampler` for `n` sequential trials on ZDT1; returns the history.
    fn run(sampler: &mut dyn Sampler, space: &Space, n: usize, seed: u64) -> Vec<FinishedTrial> {
        let others = [Direction::Minimize];
        let mut history = Vec::new();
        for k in 0..n as u64 {
            let params = sampler.ask(&AskContext {
                space,
                direction: Direction::Minimize,
                others: &others,
                history: &history,
                pending: &[],
                trial_number: TrialNumber(k),
                seed,
            });
            let (f1, f2) = zdt1(&params);
            history.push(FinishedTrial {
                number: TrialNumber(k),
                params,
                outcome: Outcome::Complete { value: f1 },
                curve: Vec::new(),
                seconds: None,
                others: vec![f2],
            });
        }
        history
    }

    fn hv(history: &[FinishedTrial]) -> f64 {
        let pts: Vec<Vec<f64>> = losses(history, &[Direction::Minimize, Direction::Minimize])
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        hypervolume(&pts, &[1.1, 1.1])
    }

    #[test]
    fn children_are_always_valid_params_whatever_the_history() {
        let space = mixed_space();
        let others = [Direction::Maximize];
        let mut history: Vec<FinishedTrial> = Vec::new();
        let mut s = Nsga2Sampler::new(Nsga2Options {
            population_size: 6,
            ..Default::default()
        });
        for k in 0..60u64 {
            let ctx = AskContext {
                space: &space,
                direction: Direction::Minimize,
                others: &others,
                history: &history,
                pending: &[],
                trial_number: TrialNumber(k),
                seed: 3,
            };
            let p = s.ask(&ctx);
            space.validate(&p).expect("valid params");
            // Every kind of outcome, NaN included.
            let outcome = match k % 5 {
                0 => Outcome::Failed,
                1 => Outcome::Pruned {
                    value: Some(1.0),
                    step: Some(k),
                },
                2 => Outcome::Complete { value: f64::NAN },
                _ => Outcome::Complete {
                    value: (k as f64).sin(),
                },
            };
            history.push(FinishedTrial {
                number: TrialNumber(k),
                params: p,
                outcome,
                curve: Vec::new(),
                seconds: None,
                others: vec![(k as f64).cos()],
            });
        }
    }

    #[test]
    fn the_same_seed_and_history_give_the_same_child() {
        let space = zdt_space(4);
        let a = run(
            &mut Nsga2Sampler::new(Nsga2Options::default()),
            &space,
            30,
            9,
        );
        let b = run(
            &mut Nsga2Sampler::new(Nsga2Options::default()),
            &space,
            30,
            9,
        );
        assert_eq!(a, b);
        let c = run(
            &mut Nsga2Sampler::new(Nsga2Options::default()),
            &space,
            30,
            10,
        );
        assert_ne!(a, c);
    }

    #[test]
    fn parallel_asks_over_the_same_history_differ() {
        let space = zdt_space(4);
        let mut s = Nsga2Sampler::new(Nsga2Options::default());
        let history = run(&mut s, &space, 20, 1);
        let others = [Direction::Minimize];
        let mut pending: Vec<Params> = Vec::new();
        for k in 20..24u64 {
            let p = s.ask(&AskContext {
                space: &space,
                direction: Direction::Minimize,
                others: &others,
                history: &history,
                pending: &pending,
                trial_number: TrialNumber(k),
                seed: 1,
            });
            assert!(!pending.contains(&p) && history.iter().all(|t| t.params != p));
            pending.push(p);
        }
    }

    #[test]
    fn failed_trials_are_never_parents_and_pruned_ones_rank_last() {
        let space = zdt_space(2);
        let t = |k: u64, x: f64, outcome: Outcome, others: Vec<f64>| FinishedTrial {
            number: TrialNumber(k),
            params: space.from_unit(&[x, x]),
            outcome,
            curve: Vec::new(),
            seconds: None,
            others,
        };
        let history = vec![
            t(0, 0.1, Outcome::Failed, vec![]),
            t(
                1,
                0.2,
                Outcome::Pruned {
                    value: Some(0.0),
                    step: Some(3),
                },
                vec![],
            ),
            t(2, 0.3, Outcome::Complete { value: 2.0 }, vec![2.0]),
            t(3, 0.4, Outcome::Complete { value: 1.0 }, vec![1.0]),
        ];
        let others = [Direction::Minimize];
        let ctx = AskContext {
            space: &space,
            direction: Direction::Minimize,
            others: &others,
            history: &history,
            pending: &[],
            trial_number: TrialNumber(10),
            seed: 0,
        };
        let s = Nsga2Sampler::new(Nsga2Options::default());
        let parents = s.parents(&ctx, 10);
        let firsts: Vec<f64> = parents.iter().map(|p| p.u[0].expect("active")).collect();
        assert_eq!(firsts.len(), 3);
        assert!((firsts[0] - 0.4).abs() < 1e-9 && (firsts[1] - 0.3).abs() < 1e-9);
        assert!((firsts[2] - 0.2).abs() < 1e-9);
        assert!(parents[2].rank > parents[1].rank);
    }

    #[test]
    fn a_single_objective_study_is_a_genetic_algorithm_that_improves() {
        let space = zdt_space(4);
        let sphere = |p: &Params| -> f64 {
            p.values()
                .map(|v| (v.as_f64().expect("a float") - 0.3).powi(2))
                .sum()
        };
        let best = |sampler: &mut dyn Sampler, seed: u64| {
            let mut history: Vec<FinishedTrial> = Vec::new();
            for k in 0..60u64 {
                let p = sampler.ask(&AskContext {
                    space: &space,
                    direction: Direction::Minimize,
                    others: &[],
                    history: &history,
                    pending: &[],
                    trial_number: TrialNumber(k),
                    seed,
                });
                let v = sphere(&p);
                history.push(FinishedTrial {
                    number: TrialNumber(k),
                    params: p,
                    outcome: Outcome::Complete { value: v },
                    curve: Vec::new(),
                    seconds: None,
                    others: Vec::new(),
                });
            }
            history
                .iter()
                .filter_map(FinishedTrial::value)
                .fold(f64::INFINITY, f64::min)
        };
        let (mut ga, mut random) = (0.0, 0.0);
        for seed in 0..6 {
            ga += best(&mut Nsga2Sampler::new(Nsga2Options::default()), seed);
            random += best(&mut RandomSampler, seed);
        }
        assert!(ga < random, "ga {ga} random {random}");
    }

    #[test]
    fn nsga2_beats_random_on_zdt1_in_hypervolume_over_40_trials() {
        let space = zdt_space(4);
        let (mut nsga, mut random) = (0.0, 0.0);
        let seeds = 8;
        for seed in 0..seeds {
            let mut s = Nsga2Sampler::new(Nsga2Options::default());
            nsga += hv(&run(&mut s, &space, 40, seed));
            random += hv(&run(&mut RandomSampler, &space, 40, seed));
        }
        let (nsga, random) = (nsga / seeds as f64, random / seeds as f64);
        // Measured: 0.124 against 0.030 (ZDT1's true front has 263/300 = 0.8767 here).
        assert!(nsga > 2.0 * random, "nsga2 {nsga:.4} random {random:.4}");
    }
}
