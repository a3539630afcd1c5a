//! Tree-structured Parzen estimator (multivariate, with a constant liar): the second choice, for
//! large budgets and high dimensions where a GP costs more than it brings.
//!
//! Trials are split into the best `gamma(n)` ("below") and the rest ("above", with failed
//! trials and, as a constant liar, pending ones); each group becomes a Parzen mixture in the
//! unit cube (truncated Gaussians for numbers, smoothed point masses for categories, the
//! uniform prior for a parameter a component does not have); candidates are drawn from the
//! "below" mixture and the one with the highest `l(x) / g(x)` that is not a repeat wins.

use rand::Rng;
use rand_distr::StandardNormal;
use statrs::function::erf::erfc;

use super::{
    AskContext, Exploration, Phase, RandomSampler, Sampler, SobolSampler, avoid_repeat,
    is_duplicate,
};
use crate::space::{ParamKind, Params, Space};
use crate::trial::Outcome;

/// Settings of the TPE sampler.
#[derive(Debug, Clone, PartialEq)]
pub struct TpeOptions {
    pub n_startup: usize,
    pub n_candidates: usize,
}

impl Default for TpeOptions {
    fn default() -> Self {
        TpeOptions {
            n_startup: 10,
            n_candidates: 24,
        }
    }
}

#[derive(Default)]
pub struct TpeSampler {
    pub opts: TpeOptions,
}

/// One kernel component: a unit-cube coordinate per parameter, `None` where inactive.
type Comp = Vec<Option<f64>>;

struct Parzen<'a> {
    space: &'a Space,
    comps: Vec<Comp>,
    sigma: f64,
    eps: f64,
}

fn norm_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

impl<'a> Parzen<'a> {
    fn new(space: &'a Space, comps: Vec<Comp>) -> Parzen<'a> {
        let n = comps.len().max(1) as f64;
        let d = space
            .params()
            .iter()
            .filter(|p| !p.is_categorical())
            .count()
            .max(1) as f64;
        Parzen {
            space,
            comps,
            // Scott-like rule in the unit cube, as Optuna's multivariate TPE.
            sigma: (0.2 * n.powf(-1.0 / (d + 4.0))).max(0.01),
            eps: (1.0 / (1.0 + n).sqrt()).min(0.5),
        }
    }

    /// Log density at `u`, over the parameters active in `params`; the prior (uniform) is one
    /// more component with the weight of one trial.
    fn log_density(&self, u: &[f64], params: &Params) -> f64 {
        let mut terms = Vec::with_capacity(self.comps.len() + 1);
        terms.push(0.0); // the prior: density 1 in the unit cube
        for c in &self.comps {
            let mut s = 0.0;
            for (i, p) in self.space.params().iter().enumerate() {
                if !params.contains_key(&p.name) {
                    continue;
                }
                let Some(m) = c[i] else { continue };
                match &p.kind {
                    ParamKind::Categorical { choices } => {
                        let k = choices.len() as f64;
                        let same = (u[i] * k).floor() == (m * k).floor();
                        let pr = if same {
                            1.0 - self.eps + self.eps / k
                        } else {
                            self.eps / k
                        };
                        s += (pr * k).ln(); // relative to the uniform 1/k
                    }
                    _ => {
                        let sg = self.sigma;
                        let z = (u[i] - m) / sg;
                        let mass = (norm_cdf((1.0 - m) / sg) - norm_cdf(-m / sg)).max(1e-12);
                        s += -0.5 * z * z
                            - (sg * (2.0 * std::f64::consts::PI).sqrt()).ln()
                            - mass.ln();
                    }
                }
            }
            terms.push(s);
        }
        let mx = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = terms.iter().map(|t| (t - mx).exp()).sum();
        mx + sum.ln() - (terms.len() as f64).ln()
    }

    fn sample(&self, rng: &mut impl Rng) -> Vec<f64> {
        let j = rng.random_range(0..=self.comps.len());
        let comp = if j == 0 {
            None
        } else {
            Some(&self.comps[j - 1])
        };
        self.space
            .params()
            .iter()
            .enumerate()
            .map(|(i, p)| match comp.and_then(|c| c[i]) {
                None => rng.random::<f64>(),
                Some(m) => match p.kind {
                    ParamKind::Categorical { .. } => {
                        if rng.random::<f64>() < self.eps {
                            rng.random::<f64>()
                        } else {
                            m
                        }
                    }
                    _ => {
                        for _ in 0..16 {
                            let e: f64 = rng.sample(StandardNormal);
                            let x = m + self.sigma * e;
                            if (0.0..=1.0).contains(&x) {
                                return x;
                            }
                        }
                        m
                    }
                },
            })
            .collect()
    }
}

fn comp_of(space: &Space, params: &Params) -> Comp {
    space
        .params()
        .iter()
        .map(|p| params.get(&p.name).map(|v| p.to_unit(v)))
        .collect()
}

impl Sampler for TpeSampler {
    fn ask(&mut self, ctx: &AskContext<'_>) -> Params {
        let p = self.propose(ctx);
        avoid_repeat(p, ctx)
    }
}

impl TpeSampler {
    fn propose(&mut self, ctx: &AskContext<'_>) -> Params {
        let rule = Exploration::new(self.opts.n_startup);
        if let Phase::InitialDesign { .. } = rule.phase(ctx.trial_number.0, 0, 0) {
            return SobolSampler.ask(ctx);
        }
        let space = ctx.space;
        // Rank: complete by loss, then pruned (deeper first, then by value), then failed.
        let mut complete: Vec<(f64, &Params)> = Vec::new();
        let mut pruned: Vec<(u64, f64, &Params)> = Vec::new();
        let mut rest: Vec<&Params> = Vec::new();
        for t in ctx.history {
            match t.outcome {
                Outcome::Complete { value } if ctx.direction.loss(value).is_finite() => {
                    complete.push((ctx.direction.loss(value), &t.params));
                }
                Outcome::Pruned { .. } => {
                    if let Some((step, loss)) = t.outcome.pruned_rank(ctx.direction) {
                        pruned.push((step, loss, &t.params));
                    }
                }
                _ => rest.push(&t.params),
            }
        }
        if let Phase::TooFewComplete { .. } = rule.phase(ctx.trial_number.0, complete.len(), 0) {
            return SobolSampler.ask(ctx);
        }
        complete.sort_by(|a, b| a.0.total_cmp(&b.0));
        pruned.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.total_cmp(&b.1)));
        let n = complete.len() + pruned.len();
        let n_below = n.div_ceil(10).clamp(1, 25).min(complete.len());
        let below: Vec<Comp> = complete[..n_below]
            .iter()
            .map(|(_, p)| comp_of(space, p))
            .collect();
        let above: Vec<Comp> = complete[n_below..]
            .iter()
            .map(|(_, p)| *p)
            .chain(pruned.iter().map(|t| t.2))
            .chain(rest)
            .chain(ctx.pending.iter())
            .map(|p| comp_of(space, p))
            .collect();
        let l = Parzen::new(space, below);
        let g = Parzen::new(space, above);
        let mut rng = ctx.rng();
        let mut cands: Vec<(f64, Params)> = (0..self.opts.n_candidates.max(1))
            .map(|_| {
                let u = l.sample(&mut rng);
                let p = space.from_unit(&u);
                // Score the point as it will run (rounded, inactive params dropped).
                let ur: Vec<f64> = space
                    .params()
                    .iter()
                    .zip(&u)
                    .map(|(q, &x)| p.get(&q.name).map(|v| q.to_unit(v)).unwrap_or(x))
                    .collect();
                (l.log_density(&ur, &p) - g.log_density(&ur, &p), p)
            })
            .collect();
        cands.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (_, p) in cands {
            if !is_duplicate(&p, ctx) {
                return p;
            }
        }
        RandomSampler.ask(ctx)
    }
}
