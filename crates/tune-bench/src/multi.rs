//! `tune-bench multi`: multi-objective search (issue 13) measured as the hypervolume of the
//! complete trials' Pareto front after a budget of trials.
//!
//! A run drives the sampler directly (`tune::sampler::build_with`, the same samplers a study
//! gets) with an `AskContext` built here, `others` filled, with `q` asks outstanding (1:
//! sequential). Each problem has a fixed reference point; hypervolume is `tune`'s exact
//! `pareto::hypervolume` of every complete trial's losses so far. Per problem and sampler the
//! table gives the mean and the worst seed's hypervolume at each budget, the mean as a
//! fraction of the true front's hypervolume (exact for ZDT1, ZDT2 and DTLZ2; for `train` the
//! front of a dense grid of its space, a lower bound of the truth) and the mean ms per ask.
//! `python/optuna_multi_bench.py` runs the same problems with Optuna's samplers.
//!
//! Samplers: every name `tune` knows (`random`, `sobol`, `tpe`, `gp`, `auto`, `nsga2`), and
//! `nsga2-pN`, NSGA-II with population size N (to choose its default).

use std::f64::consts::FRAC_PI_2;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use tune::sampler::multi::pareto::{hypervolume, losses};
use tune::sampler::multi::{Nsga2Options, Nsga2Sampler};
use tune::sampler::{
    AskContext, GpOptions, GpPolicy, GpSampler, Sampler, SamplerKind, SamplerOptions, build_with,
};
use tune::space::{ParamValue, Params, Space};
use tune::trial::{Direction, FinishedTrial, Outcome, TrialNumber};

use crate::cli::MultiArgs;

/// One multi-objective problem: every objective is minimised.
pub struct MultiProblem {
    pub name: &'static str,
    pub space_toml: &'static str,
    pub n_objectives: usize,
    pub reference: &'static [f64],
    /// The true Pareto front's hypervolume against `reference`; `None`: the front of a grid
    /// of the space instead ([`grid_front_hv`]).
    pub true_hv: Option<f64>,
    pub f: fn(&Params) -> Vec<f64>,
    /// The objectives as hypervolume measures them (monotone per objective, so the Pareto
    /// front is the samplers' own): `train`'s seconds span four decades and are measured in
    /// log10, so that the front's slow, accurate end counts as much as its fast one.
    pub measured: fn(&[f64]) -> Vec<f64>,
}

fn as_is(v: &[f64]) -> Vec<f64> {
    v.to_vec()
}

fn log_seconds(v: &[f64]) -> Vec<f64> {
    vec![v[0], v[1].log10()]
}

impl MultiProblem {
    pub fn space(&self) -> anyhow::Result<Space> {
        let t: toml::Table = toml::from_str(self.space_toml)?;
        Ok(Space::from_toml(&t)?)
    }
}

fn num(p: &Params, k: &str) -> f64 {
    p.get(k).and_then(ParamValue::as_f64).unwrap_or(f64::NAN)
}

fn xs(p: &Params, d: usize) -> Vec<f64> {
    (0..d).map(|i| num(p, &format!("x{i}"))).collect()
}

const CUBE6: &str = "x0 = { type = \"float\", low = 0.0, high = 1.0 }\n\
                     x1 = { type = \"float\", low = 0.0, high = 1.0 }\n\
                     x2 = { type = \"float\", low = 0.0, high = 1.0 }\n\
                     x3 = { type = \"float\", low = 0.0, high = 1.0 }\n\
                     x4 = { type = \"float\", low = 0.0, high = 1.0 }\n\
                     x5 = { type = \"float\", low = 0.0, high = 1.0 }";

/// ZDT1 (Zitzler, Deb, Thiele 2000), d = 6: a convex front f2 = 1 - sqrt(f1).
fn zdt1(p: &Params) -> Vec<f64> {
    let x = xs(p, 6);
    let g = 1.0 + 9.0 * x[1..].iter().sum::<f64>() / 5.0;
    vec![x[0], g * (1.0 - (x[0] / g).sqrt())]
}

/// ZDT2, d = 6: a concave front f2 = 1 - f1².
fn zdt2(p: &Params) -> Vec<f64> {
    let x = xs(p, 6);
    let g = 1.0 + 9.0 * x[1..].iter().sum::<f64>() / 5.0;
    vec![x[0], g * (1.0 - (x[0] / g).powi(2))]
}

/// DTLZ2 (Deb et al. 2002) with 3 objectives, d = 6: the front is the unit sphere's octant.
fn dtlz2(p: &Params) -> Vec<f64> {
    let x = xs(p, 6);
    let g: f64 = x[2..].iter().map(|v| (v - 0.5).powi(2)).sum();
    let (a, b) = (x[0] * FRAC_PI_2, x[1] * FRAC_PI_2);
    vec![
        (1.0 + g) * a.cos() * b.cos(),
        (1.0 + g) * a.cos() * b.sin(),
        (1.0 + g) * a.sin(),
    ]
}

/// Training examples per epoch in `train`.
const TRAIN_N: f64 = 50_000.0;

/// A training-shaped problem: (validation loss, training seconds). A wider model has a lower
/// loss floor and a larger batch less gradient noise, but both cost time per step; a large
/// batch takes fewer steps per epoch, so it needs more epochs; the best learning rate grows
/// with the batch (square-root scaling). The second objective is the whole run's time
/// (epochs × seconds per epoch): with seconds per epoch alone, epochs would be free and every
/// Pareto-optimal trial would take the most epochs.
pub fn train(p: &Params) -> Vec<f64> {
    let (lr, batch, width, epochs) = (
        num(p, "lr"),
        num(p, "batch_size"),
        num(p, "width"),
        num(p, "epochs"),
    );
    let steps_per_epoch = TRAIN_N / batch;
    let floor = 0.2 + 0.6 * (32.0 / width).powf(0.7);
    let noise = 0.08 * (16.0 / batch).sqrt();
    let best_lr = 3e-3 * (batch / 64.0).sqrt();
    let lr_pen = 0.1 * (lr / best_lr).log10().powi(2);
    let needed = 2000.0 * (width / 32.0).powf(0.3);
    let undertrained = 0.6 * (-(epochs * steps_per_epoch) / needed).exp();
    let seconds_per_epoch = steps_per_epoch * (0.005 + 4e-9 * batch * width * width);
    vec![
        floor + noise + lr_pen + undertrained,
        epochs * seconds_per_epoch,
    ]
}

const TRAIN_SPACE: &str = "lr         = { type = \"float\", low = 1e-4, high = 1e-1, log = true }\n\
                           batch_size = { type = \"int\", low = 16, high = 512, log = true }\n\
                           width      = { type = \"int\", low = 32, high = 1024, log = true }\n\
                           epochs     = { type = \"int\", low = 1, high = 20 }";

/// The problems, with their reference points (documented in `BENCHMARKS.md`).
pub fn problems() -> Vec<MultiProblem> {
    vec![
        MultiProblem {
            name: "zdt1",
            space_toml: CUBE6,
            n_objectives: 2,
            // BoTorch's reference point for ZDT: a box that random trials reach (with 1.1 they
            // almost never do in 50 trials, g being 1 + 9 · mean(x1..x5)).
            reference: &[11.0, 11.0],
            // ∫₀¹ (11 - (1 - √a)) da + 10 · 11 = 10 + 2/3 + 110.
            true_hv: Some(120.0 + 2.0 / 3.0),
            f: zdt1,
            measured: as_is,
        },
        MultiProblem {
            name: "zdt2",
            space_toml: CUBE6,
            n_objectives: 2,
            reference: &[11.0, 11.0],
            // ∫₀¹ (11 - (1 - a²)) da + 110 = 10 + 1/3 + 110.
            true_hv: Some(120.0 + 1.0 / 3.0),
            f: zdt2,
            measured: as_is,
        },
        MultiProblem {
            name: "dtlz2",
            space_toml: CUBE6,
            n_objectives: 3,
            reference: &[1.1, 1.1, 1.1],
            // The box less the unit ball's octant, which no front point dominates.
            true_hv: Some(1.331 - std::f64::consts::PI / 6.0),
            f: dtlz2,
            measured: as_is,
        },
        MultiProblem {
            name: "train",
            space_toml: TRAIN_SPACE,
            n_objectives: 2,
            // (validation loss, log10 seconds): under a loss of 1 within 1000 s.
            reference: &[1.0, 3.0],
            true_hv: None,
            f: train,
            measured: log_seconds,
        },
    ]
}

/// Grid points per parameter of [`grid_front_hv`] in the benchmark.
const GRID: usize = 48;

/// The hypervolume of the front of a grid of `per` points per parameter in the unit cube
/// (every value of an int with fewer): the best known front of a two-objective problem
/// without an analytic one (`train`), a lower bound of the true front's.
pub fn grid_front_hv(problem: &MultiProblem, per: usize) -> anyhow::Result<f64> {
    anyhow::ensure!(
        problem.n_objectives == 2,
        "the grid front is two-objective only"
    );
    let space = problem.space()?;
    let sizes: Vec<usize> = space
        .params()
        .iter()
        .map(|p| p.grid_size().map_or(per, |g| (g as usize).min(per)))
        .collect();
    let total: usize = sizes.iter().product();
    let mut pts = Vec::with_capacity(total);
    for k in 0..total {
        let mut i = k;
        let u: Vec<f64> = sizes
            .iter()
            .map(|&n| {
                let x = if n > 1 {
                    (i % n) as f64 / (n - 1) as f64
                } else {
                    0.5
                };
                i /= n;
                x
            })
            .collect();
        pts.push((problem.measured)(&(problem.f)(&space.from_unit(&u))));
    }
    // The front by one sort and a sweep (the general O(n²) filter is too slow for a grid).
    pts.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
    let mut front: Vec<Vec<f64>> = Vec::new();
    let mut best = f64::INFINITY;
    for p in pts {
        if p[1] < best {
            best = p[1];
            front.push(p);
        }
    }
    Ok(hypervolume(&front, problem.reference))
}

/// A sampler of the benchmark: one of `tune`'s, or NSGA-II with a given population.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MultiSampler {
    Kind(SamplerKind),
    Nsga2Pop(usize),
    /// The GP searching random scalarisations (ParEGO) instead of EHVI.
    GpParego,
}

impl MultiSampler {
    pub fn parse(s: &str) -> Option<MultiSampler> {
        if s == "gp-parego" {
            return Some(MultiSampler::GpParego);
        }
        if let Some(n) = s.strip_prefix("nsga2-p") {
            return n
                .parse()
                .ok()
                .filter(|&n| n >= 2)
                .map(MultiSampler::Nsga2Pop);
        }
        SamplerKind::parse(s).map(MultiSampler::Kind)
    }

    pub fn name(self) -> String {
        match self {
            MultiSampler::Kind(k) => k.as_str().to_string(),
            MultiSampler::Nsga2Pop(n) => format!("nsga2-p{n}"),
            MultiSampler::GpParego => "gp-parego".to_string(),
        }
    }

    fn build(self) -> Box<dyn Sampler> {
        match self {
            MultiSampler::Kind(k) => build_with(k, &SamplerOptions::default()),
            MultiSampler::Nsga2Pop(n) => Box::new(Nsga2Sampler::new(Nsga2Options {
                population_size: n,
                ..Nsga2Options::default()
            })),
            MultiSampler::GpParego => Box::new(GpSampler::with_policy(
                GpOptions::default(),
                GpPolicy {
                    ehvi: false,
                    ..GpPolicy::default()
                },
            )),
        }
    }
}

/// One run: the hypervolume after each trial, and the ms of each ask.
pub fn run(
    problem: &MultiProblem,
    kind: MultiSampler,
    seed: u64,
    budget: usize,
    q: usize,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let space = problem.space()?;
    let others = vec![Direction::Minimize; problem.n_objectives - 1];
    let directions = vec![Direction::Minimize; problem.n_objectives];
    let mut sampler = kind.build();
    let mut history: Vec<FinishedTrial> = Vec::new();
    let mut pending: Vec<(u64, Params)> = Vec::new();
    let (mut hv, mut ms) = (Vec::with_capacity(budget), Vec::with_capacity(budget));
    let mut next = 0u64;
    while history.len() < budget {
        while pending.len() < q.max(1) && (next as usize) < budget {
            let queued: Vec<Params> = pending.iter().map(|(_, p)| p.clone()).collect();
            let t0 = Instant::now();
            let params = sampler.ask(&AskContext {
                space: &space,
                direction: Direction::Minimize,
                others: &others,
                history: &history,
                pending: &queued,
                trial_number: TrialNumber(next),
                seed,
            });
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
            if let Err(e) = space.validate(&params) {
                anyhow::bail!(
                    "{} proposed invalid params on {}: {e}",
                    kind.name(),
                    problem.name
                );
            }
            pending.push((next, params));
            next += 1;
        }
        // The oldest outstanding trial finishes first.
        let (n, params) = pending.remove(0);
        let v = (problem.f)(&params);
        history.push(FinishedTrial {
            number: TrialNumber(n),
            params,
            outcome: Outcome::Complete { value: v[0] },
            curve: Vec::new(),
            seconds: None,
            others: v[1..].to_vec(),
        });
        let pts: Vec<Vec<f64>> = losses(&history, &directions)
            .into_iter()
            .map(|(_, l)| (problem.measured)(&l))
            .collect();
        hv.push(hypervolume(&pts, problem.reference));
    }
    Ok((hv, ms))
}

/// Measures every problem and sampler; returns the markdown tables.
pub fn measure(
    args: &MultiArgs,
    samplers: &[MultiSampler],
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<String> {
    let max_budget = args.budgets.iter().copied().max().unwrap_or(0);
    let mut o = String::new();
    for problem in problems()
        .into_iter()
        .filter(|p| args.problems.is_empty() || args.problems.iter().any(|n| n == p.name))
    {
        let (true_hv, label) = match problem.true_hv {
            Some(h) => (h, "true front"),
            None => (grid_front_hv(&problem, GRID)?, "grid front"),
        };
        let _ = writeln!(
            o,
            "\n#### {} ({} objectives, reference {:?}, {label} HV {true_hv:.4}; q = {})\n",
            problem.name, problem.n_objectives, problem.reference, args.q
        );
        let head: Vec<String> = args
            .budgets
            .iter()
            .map(|b| format!("HV@{b} mean | worst | % of front"))
            .collect();
        let _ = writeln!(o, "| sampler | {} | ms/ask |", head.join(" | "));
        let _ = writeln!(o, "|---|{}---|", "---|---|---|".repeat(args.budgets.len()));
        for &kind in samplers {
            let mut at: Vec<Vec<f64>> = vec![Vec::new(); args.budgets.len()];
            let mut all_ms = Vec::new();
            for seed in 0..args.seeds {
                let (hv, ms) = run(&problem, kind, seed, max_budget, args.q)?;
                for (k, &b) in args.budgets.iter().enumerate() {
                    at[k].push(hv[b - 1]);
                }
                all_ms.extend(ms);
            }
            let cells: Vec<String> = at
                .iter()
                .map(|v| {
                    let mean = v.iter().sum::<f64>() / v.len() as f64;
                    let worst = v.iter().copied().fold(f64::INFINITY, f64::min);
                    format!("{mean:.4} | {worst:.4} | {:.2}", 100.0 * mean / true_hv)
                })
                .collect();
            let mean_ms = all_ms.iter().sum::<f64>() / all_ms.len().max(1) as f64;
            let _ = writeln!(
                o,
                "| {} | {} | {mean_ms:.2} |",
                kind.name(),
                cells.join(" | ")
            );
            progress(&format!("{} {} done", problem.name, kind.name()));
        }
    }
    Ok(o)
}

/// `tune-bench multi`.
pub fn run_cli(args: &MultiArgs) -> anyhow::Result<ExitCode> {
    let samplers: Vec<MultiSampler> = args
        .samplers
        .iter()
        .map(|s| {
            MultiSampler::parse(s).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown sampler {s:?} (one of {}, gp-parego, or nsga2-pN)",
                    SamplerKind::NAMES.join(", ")
                )
            })
        })
        .collect::<anyhow::Result<_>>()?;
    if args.budgets.contains(&0) {
        anyhow::bail!("a budget must be at least 1 trial");
    }
    let known: Vec<&str> = problems().iter().map(|p| p.name).collect();
    if let Some(p) = args.problems.iter().find(|p| !known.contains(&p.as_str())) {
        anyhow::bail!("unknown problem {p:?} (one of {})", known.join(", "));
    }
    let text = measure(args, &samplers, &mut |m| eprintln!("{m}"))?;
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_true_fronts_reach_their_stated_hypervolume() {
        // Dense samples of each analytic front come close to the stated hypervolume from
        // below.
        let n = 2000;
        let zdt1: Vec<Vec<f64>> = (0..=n)
            .map(|i| {
                let a = i as f64 / n as f64;
                vec![a, 1.0 - a.sqrt()]
            })
            .collect();
        let zdt2: Vec<Vec<f64>> = (0..=n)
            .map(|i| {
                let a = i as f64 / n as f64;
                vec![a, 1.0 - a * a]
            })
            .collect();
        let ps = problems();
        for (pts, p) in [(zdt1, &ps[0]), (zdt2, &ps[1])] {
            let h = hypervolume(&pts, p.reference);
            let t = p.true_hv.expect("known");
            assert!(h <= t + 1e-12 && t - h < 1e-3, "{}: {h} vs {t}", p.name);
        }
        let m = 40;
        let sphere: Vec<Vec<f64>> = (0..=m)
            .flat_map(|i| {
                (0..=m).map(move |j| {
                    let (a, b) = (
                        i as f64 / m as f64 * FRAC_PI_2,
                        j as f64 / m as f64 * FRAC_PI_2,
                    );
                    vec![a.cos() * b.cos(), a.cos() * b.sin(), a.sin()]
                })
            })
            .collect();
        let h = hypervolume(&sphere, ps[2].reference);
        let t = ps[2].true_hv.expect("known");
        assert!(h <= t + 1e-12 && t - h < 0.03, "dtlz2: {h} vs {t}");
    }

    #[test]
    fn the_optimal_decision_vectors_land_on_the_fronts() {
        let space = problems()[0].space().expect("parses");
        let p = space.from_unit(&[0.25, 0.0, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(zdt1(&p), vec![0.25, 0.5]);
        assert_eq!(zdt2(&p), vec![0.25, 1.0 - 0.0625]);
        let p = space.from_unit(&[0.3, 0.7, 0.5, 0.5, 0.5, 0.5]);
        let f = dtlz2(&p);
        assert!((f.iter().map(|v| v * v).sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_training_problem_trades_loss_for_time() {
        let space = problems()[3].space().expect("parses");
        let at = |lr: f64, b: i64, w: i64, e: i64| {
            let mut p = Params::new();
            p.insert("lr".into(), ParamValue::Float(lr));
            p.insert("batch_size".into(), ParamValue::Int(b));
            p.insert("width".into(), ParamValue::Int(w));
            p.insert("epochs".into(), ParamValue::Int(e));
            space.validate(&p).expect("valid");
            train(&p)
        };
        let small = at(3e-3, 64, 32, 2);
        let big = at(3e-3 * 2.0, 256, 512, 20);
        assert!(big[0] < small[0] && big[1] > small[1], "{small:?} {big:?}");
        // Every trial of the space lies inside the reference box.
        let hv = grid_front_hv(&problems()[3], 6).expect("grid");
        assert!(hv > 0.0);
    }

    #[test]
    fn a_tiny_benchmark_prints_a_row_per_sampler() {
        let args = MultiArgs {
            samplers: vec!["random".into(), "nsga2".into(), "nsga2-p4".into()],
            seeds: 1,
            budgets: vec![6, 8],
            q: 2,
            problems: vec!["zdt1".into(), "dtlz2".into()],
        };
        let samplers: Vec<MultiSampler> = args
            .samplers
            .iter()
            .map(|s| MultiSampler::parse(s).expect("known"))
            .collect();
        let text = measure(&args, &samplers, &mut |_| {}).expect("runs");
        for row in ["| random |", "| nsga2 |", "| nsga2-p4 |", "#### dtlz2"] {
            assert!(text.contains(row), "{text}");
        }
    }
}
