//! `tune bench optimizers`: runs the benchmark problems with several samplers and seeds, in the
//! sequential setting and with q trials outstanding, and prints per problem the mean simple
//! regret and the normalised score of the benchmark suite's README at each budget, and the median
//! milliseconds per ask at given trial counts. On failure problems (`--problems fail`) it also
//! reports the mean number of failed trials, and the sampler `gp-penalty` is the GP without the
//! learned failure constraint (failed trials only enter its regression at the worst value), so
//! that one run shows both. Cost problems (`--problems cost`) are measured per unit of
//! simulated time instead (`cost`), with `gp-plain`, the GP without its cost model, as the
//! reference.
//!
//! The score's reference, the median best of random search after t trials, is measured in the
//! same run (sequential random search with its own seeds), as the README defines it. The
//! harness drives samplers through the one ask/tell engine, as `tune ask-tell` does: a fresh
//! sampler per run, the study seed, asks answered in trial-number order, outstanding trials
//! told oldest first.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::StandardNormal;

use crate::cli::OptimizersArgs;
use crate::problems::{Problem, problems};
use tune::engine::{Engine, EngineSpec, Finish};
use tune::pruner::PrunerConfig;
use tune::sampler::{
    GpOptions, GpPolicy, GpSampler, Sampler, SamplerKind, SamplerOptions, build_with,
    mix as mix_seed,
};
use tune::space::Params;
use tune::storage::MemoryStorage;
use tune::trial::{Direction, TrialId};

/// A sampler the harness runs: one a study can name, or a variant kept for comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchSampler {
    Kind(SamplerKind),
    /// The GP with its policy's `learn_failures` off: a failed trial is only the worst value in the
    /// regression, as before issue 13.
    GpPenalty,
    /// The GP with `cost_aware` off: plain log EI whatever the trials' durations (issue 13).
    GpPlain,
}

impl BenchSampler {
    pub fn parse(s: &str) -> Option<BenchSampler> {
        match s {
            "gp-penalty" => Some(BenchSampler::GpPenalty),
            "gp-plain" => Some(BenchSampler::GpPlain),
            _ => SamplerKind::parse(s).map(BenchSampler::Kind),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BenchSampler::Kind(k) => k.as_str(),
            BenchSampler::GpPenalty => "gp-penalty",
            BenchSampler::GpPlain => "gp-plain",
        }
    }

    pub(crate) fn build(self, opts: &SamplerOptions) -> Box<dyn Sampler> {
        match self {
            BenchSampler::Kind(k) => build_with(k, opts),
            BenchSampler::GpPenalty => Box::new(GpSampler::with_policy(
                GpOptions {
                    n_startup: opts.n_startup,
                    ..GpOptions::default()
                },
                GpPolicy {
                    learn_failures: false,
                    ..GpPolicy::default()
                },
            )),
            BenchSampler::GpPlain => Box::new(GpSampler::new(GpOptions {
                n_startup: opts.n_startup,
                cost_aware: false,
            })),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct OptimizerBenchOptions {
    /// Seeds per sampler, problem and mode.
    pub seeds: u64,
    /// Seeds of the random-search reference.
    pub random_seeds: u64,
    /// Problem names; empty means the public ones, `all` every one, `extra` the non-public
    /// ones of the hidden set's kinds, `trap` the trap problems, `fail` the failure problems.
    pub problems: Vec<String>,
    pub budgets: Vec<usize>,
    pub samplers: Vec<BenchSampler>,
    /// Outstanding trials: 1 is sequential.
    pub q: Vec<usize>,
    /// Trial counts at which the time per ask is reported (sequential runs).
    pub timing_at: Vec<usize>,
    pub timing_seeds: u64,
    pub n_startup: Option<usize>,
}

impl OptimizerBenchOptions {
    /// Checks the command line's names and counts into options: a sampler by its name, trial
    /// counts for `--timing-at` (`none`, or nothing, for no timing runs).
    pub fn from_args(a: &OptimizersArgs) -> anyhow::Result<OptimizerBenchOptions> {
        let samplers = a
            .samplers
            .iter()
            .map(|n| {
                BenchSampler::parse(n).ok_or_else(|| {
                    anyhow::anyhow!(
                        "unknown sampler `{n}` (one of {}, gp-penalty, gp-plain)",
                        SamplerKind::NAMES.join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let timing_at = a
            .timing_at
            .iter()
            .filter(|t| t.as_str() != "none" && !t.is_empty())
            .map(|t| {
                t.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    anyhow::anyhow!("--timing-at: `{t}` is not a positive trial count")
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(OptimizerBenchOptions {
            seeds: a.seeds,
            random_seeds: a.random_seeds,
            problems: a.problems.clone(),
            budgets: a.budgets.clone(),
            samplers,
            q: a.q.clone(),
            timing_at,
            timing_seeds: a.timing_seeds,
            n_startup: a.n_startup,
        })
    }
}

impl Default for OptimizerBenchOptions {
    fn default() -> Self {
        OptimizerBenchOptions {
            seeds: 10,
            random_seeds: 50,
            problems: Vec::new(),
            budgets: vec![10, 25, 50],
            samplers: vec![
                BenchSampler::Kind(SamplerKind::Random),
                BenchSampler::Kind(SamplerKind::Tpe),
                BenchSampler::Kind(SamplerKind::Gp),
                BenchSampler::Kind(SamplerKind::Auto),
            ],
            q: vec![1, 4],
            timing_at: vec![25, 50, 100, 200],
            timing_seeds: 1,
            n_startup: None,
        }
    }
}

/// One run: the best value after each told trial, the failed trials among the first t, and the
/// time of each ask (ms): wall clock, as the harness sees it, and this thread's CPU time, which
/// a busy machine does not inflate.
pub struct RunTrace {
    pub best: Vec<f64>,
    pub failed: Vec<usize>,
    pub ask_ms: Vec<f64>,
    pub ask_cpu_ms: Vec<f64>,
}

/// CPU time of the calling thread, in ms (NaN where the clock is not available).
pub(crate) fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes into it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc == 0 {
        ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 * 1e-6
    } else {
        f64::NAN
    }
}

/// Drives one sampler on one problem for `budget` trials with `q` outstanding, through the one
/// ask/tell engine (in memory), as `tune ask-tell` does.
pub fn run_one(
    problem: &Problem,
    kind: BenchSampler,
    opts: &SamplerOptions,
    seed: u64,
    budget: usize,
    q: usize,
) -> anyhow::Result<RunTrace> {
    let space = problem.space()?;
    let pruner = PrunerConfig::None;
    let spec = EngineSpec {
        others: &[],
        name: problem.name,
        metric: "value",
        direction: Direction::Minimize,
        space: &space,
        seed,
        budget: Some(budget as u64),
        heartbeat_grace: Duration::from_secs(3600),
        pruner: &pruner,
        file: None,
        source: None,
        slots: &["cpu".to_string()],
        enqueue: &[],
    };
    let mut engine = Engine::open(
        Box::new(MemoryStorage::new()),
        &spec,
        kind.build(opts),
        tune::pruner::build(&pruner),
    )?;
    let mut pending: VecDeque<(TrialId, Params)> = VecDeque::new();
    let mut best = Vec::with_capacity(budget);
    let mut failed = Vec::with_capacity(budget);
    let mut n_failed = 0;
    let mut ask_ms = Vec::with_capacity(budget);
    let mut ask_cpu_ms = Vec::with_capacity(budget);
    let mut best_so_far = f64::INFINITY;
    let mut best_seen = f64::INFINITY;
    while best.len() < budget {
        while pending.len() < q.max(1) {
            let c0 = thread_cpu_ms();
            let t0 = Instant::now();
            let Some(trial) = engine.ask(0, "cpu")? else {
                break;
            };
            ask_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            ask_cpu_ms.push(thread_cpu_ms() - c0);
            if let Err(e) = space.validate(&trial.params) {
                anyhow::bail!(
                    "{} proposed invalid params on {}: {e}",
                    kind.as_str(),
                    problem.name
                );
            }
            pending.push_back((trial.id, trial.params));
        }
        let Some((id, params)) = pending.pop_front() else {
            anyhow::bail!("the engine stopped asking before the budget");
        };
        let truth = (problem.f)(&params);
        let v = if problem.noise > 0.0 {
            let mut rng = StdRng::seed_from_u64(mix_seed(seed, best.len() as u64));
            truth + problem.noise * rng.sample::<f64, _>(StandardNormal)
        } else {
            truth
        };
        let finish = if v.is_finite() {
            // The incumbent is the trial that looks best; its score is its noise-free value.
            if v < best_seen {
                best_seen = v;
                best_so_far = truth;
            }
            Finish::Value(v)
        } else {
            n_failed += 1;
            Finish::Failed {
                reason: "not finite".into(),
                log_tail: None,
            }
        };
        engine.finish(id, finish, &[])?;
        best.push(best_so_far);
        failed.push(n_failed);
    }
    Ok(RunTrace {
        best,
        failed,
        ask_ms,
        ask_cpu_ms,
    })
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// The README's score: 100 at the optimum, 0 at random search's median, clipped to ±100.
pub fn score(best: f64, opt: f64, rand_med: f64) -> f64 {
    let den = rand_med - opt;
    if den <= 0.0 {
        return if best <= opt { 100.0 } else { -100.0 };
    }
    (100.0 * (1.0 - (best - opt) / den)).clamp(-100.0, 100.0)
}

/// Figures of one sampler in one mode on one problem, at each budget: the mean over seeds,
/// and the robustness figures (a mean can hide a seed that never left a trap): the worst
/// seed's score and the fraction of seeds whose best is worse than random search's median
/// (a score below 0); and the mean number of failed trials among the first t.
pub struct Cell {
    pub sampler: BenchSampler,
    pub q: usize,
    pub regret: Vec<f64>,
    pub score: Vec<f64>,
    pub worst: Vec<f64>,
    pub below: Vec<f64>,
    pub failed: Vec<f64>,
}

/// Everything measured on one problem.
pub struct ProblemReport {
    pub name: &'static str,
    pub rand_med: Vec<f64>,
    pub cells: Vec<Cell>,
    /// (sampler, wall ms per ask at each `timing_at`, CPU ms per ask at each).
    pub timing: Vec<(BenchSampler, Vec<f64>, Vec<f64>)>,
    /// A failure problem: its table also shows the failed trials.
    pub fail: bool,
}

fn selected(opts: &OptimizerBenchOptions) -> anyhow::Result<Vec<Problem>> {
    let all = problems();
    if opts.problems.is_empty() {
        return Ok(all.into_iter().filter(|p| p.public).collect());
    }
    let mut out = Vec::new();
    for p in all {
        let take = opts.problems.iter().any(|w| {
            w == p.name
                || w == "all"
                || (w == "extra"
                    && !p.public
                    && !p.trap
                    && !p.fail
                    && p.cost.is_none()
                    && p.noise == 0.0)
                || (w == "noisy" && p.noise > 0.0)
                || (w == "trap" && p.trap)
                || (w == "fail" && p.fail)
                || (w == "cost" && p.cost.is_some())
                || (w == "public" && p.public)
        });
        if take {
            out.push(p);
        }
    }
    for w in &opts.problems {
        if !["all", "extra", "public", "trap", "fail", "cost", "noisy"].contains(&w.as_str())
            && !out.iter().any(|p| p.name == w.as_str())
        {
            anyhow::bail!(
                "unknown problem `{w}` (known: {}, or all, public, extra, trap, fail, cost, noisy)",
                problems()
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    Ok(out)
}

/// Runs the benchmark and returns its figures; `progress` receives a line per finished block.
pub fn measure(
    opts: &OptimizerBenchOptions,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<ProblemReport>> {
    let sopts = SamplerOptions {
        n_startup: opts.n_startup,
        cost_aware: None,
    };
    let budget = opts.budgets.iter().copied().max().unwrap_or(0);
    let mut reports = Vec::new();
    // Cost problems are measured against simulated time (`cost`), not here.
    for problem in selected(opts)?.into_iter().filter(|p| p.cost.is_none()) {
        // Reference: sequential random search.
        let mut rand_best: Vec<Vec<f64>> = vec![Vec::new(); opts.budgets.len()];
        for s in 0..opts.random_seeds {
            let tr = run_one(
                &problem,
                BenchSampler::Kind(SamplerKind::Random),
                &sopts,
                1_000_000 + s,
                budget,
                1,
            )?;
            for (k, &t) in opts.budgets.iter().enumerate() {
                rand_best[k].push(tr.best[t - 1]);
            }
        }
        let rand_med: Vec<f64> = rand_best.iter_mut().map(|v| median(v)).collect();
        let mut cells = Vec::new();
        for &q in &opts.q {
            for &kind in &opts.samplers {
                let mut regret = vec![0.0; opts.budgets.len()];
                let mut sc = vec![0.0; opts.budgets.len()];
                let mut worst = vec![f64::INFINITY; opts.budgets.len()];
                let mut below = vec![0.0; opts.budgets.len()];
                let mut failed = vec![0.0; opts.budgets.len()];
                for s in 0..opts.seeds {
                    let tr = run_one(&problem, kind, &sopts, s, budget, q)?;
                    for (k, &t) in opts.budgets.iter().enumerate() {
                        let b = tr.best[t - 1];
                        let s_k = score(b, problem.optimum, rand_med[k]);
                        regret[k] += (b - problem.optimum) / opts.seeds as f64;
                        sc[k] += s_k / opts.seeds as f64;
                        worst[k] = worst[k].min(s_k);
                        if b > rand_med[k] {
                            below[k] += 1.0 / opts.seeds as f64;
                        }
                        failed[k] += tr.failed[t - 1] as f64 / opts.seeds as f64;
                    }
                }
                let r1 = |v: &[f64]| {
                    v.iter()
                        .map(|x| (x * 10.0).round() / 10.0)
                        .collect::<Vec<_>>()
                };
                progress(&format!(
                    "{} {} q={q}: score {:?} worst {:?} below {:?} failed {:?}",
                    problem.name,
                    kind.as_str(),
                    r1(&sc),
                    r1(&worst),
                    below
                        .iter()
                        .map(|x| (x * 100.0).round() / 100.0)
                        .collect::<Vec<_>>(),
                    r1(&failed)
                ));
                cells.push(Cell {
                    sampler: kind,
                    q,
                    regret,
                    score: sc,
                    worst,
                    below,
                    failed,
                });
            }
        }
        let mut timing = Vec::new();
        if let Some(&tmax) = opts.timing_at.iter().max() {
            for &kind in &opts.samplers {
                let mut per: Vec<Vec<f64>> = vec![Vec::new(); opts.timing_at.len()];
                let mut per_cpu: Vec<Vec<f64>> = vec![Vec::new(); opts.timing_at.len()];
                for s in 0..opts.timing_seeds {
                    let tr = run_one(&problem, kind, &sopts, 500 + s, tmax, 1)?;
                    // The asks of trials t-4 .. t (1-based), as BASELINES.md measures them.
                    for (k, &t) in opts.timing_at.iter().enumerate() {
                        per[k].extend_from_slice(&tr.ask_ms[t.saturating_sub(5)..t]);
                        per_cpu[k].extend_from_slice(&tr.ask_cpu_ms[t.saturating_sub(5)..t]);
                    }
                }
                let ms: Vec<f64> = per.iter_mut().map(|v| median(v)).collect();
                let cpu: Vec<f64> = per_cpu.iter_mut().map(|v| median(v)).collect();
                progress(&format!(
                    "{} {} ms/ask {:?}",
                    problem.name,
                    kind.as_str(),
                    ms
                ));
                timing.push((kind, ms, cpu));
            }
        }
        reports.push(ProblemReport {
            name: problem.name,
            rand_med,
            cells,
            timing,
            fail: problem.fail,
        });
    }
    Ok(reports)
}

fn fmt_g(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 0.01 && x.abs() < 1e4 {
        format!("{x:.4}")
    } else {
        format!("{x:.3e}")
    }
}

/// The figures as Markdown tables.
pub fn render(opts: &OptimizerBenchOptions, reports: &[ProblemReport]) -> String {
    let mut o = String::new();
    let b = &opts.budgets;
    let hdr_b = |what: &str| {
        b.iter()
            .map(|t| format!("{what}@{t}"))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    // Summary: mean score over problems, per sampler and mode.
    let _ = writeln!(
        o,
        "### Mean score over problems ({} seeds; random reference: median of {} seeds)\n",
        opts.seeds, opts.random_seeds
    );
    let _ = writeln!(
        o,
        "Worst: the lowest score of any seed on any problem; below: the mean over problems of the \
         fraction of seeds worse than random search's median.\n"
    );
    let _ = writeln!(
        o,
        "| sampler | q | {} | {} | {} |",
        hdr_b("score"),
        hdr_b("worst"),
        hdr_b("below")
    );
    let _ = writeln!(o, "|---|---|{}", "---|".repeat(3 * b.len()));
    for &q in &opts.q {
        for &kind in &opts.samplers {
            let mut m = vec![0.0; b.len()];
            let mut worst = vec![f64::INFINITY; b.len()];
            let mut below = vec![0.0; b.len()];
            for r in reports {
                if let Some(c) = r.cells.iter().find(|c| c.sampler == kind && c.q == q) {
                    for k in 0..b.len() {
                        m[k] += c.score[k] / reports.len() as f64;
                        worst[k] = worst[k].min(c.worst[k]);
                        below[k] += c.below[k] / reports.len() as f64;
                    }
                }
            }
            let join = |v: &[f64], prec: usize| {
                v.iter()
                    .map(|x| format!("{x:.prec$}"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            };
            let _ = writeln!(
                o,
                "| {} | {q} | {} | {} | {} |",
                kind.as_str(),
                join(&m, 1),
                join(&worst, 1),
                join(&below, 2)
            );
        }
    }
    for r in reports {
        let _ = writeln!(
            o,
            "\n### {}\n\nrandom median best @{}: {}\n",
            r.name,
            b.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join("/"),
            r.rand_med
                .iter()
                .map(|x| fmt_g(*x))
                .collect::<Vec<_>>()
                .join(" / ")
        );
        let fail_cols = if r.fail {
            format!(" {} |", hdr_b("failed"))
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "| sampler | q | {} | {} | {} | {} |{fail_cols}",
            hdr_b("score"),
            hdr_b("worst"),
            hdr_b("below"),
            hdr_b("regret")
        );
        let _ = writeln!(
            o,
            "|---|---|{}",
            "---|".repeat((4 + usize::from(r.fail)) * b.len())
        );
        let f1 = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>()
                .join(" | ")
        };
        for c in &r.cells {
            let fails = if r.fail {
                format!(" {} |", f1(&c.failed))
            } else {
                String::new()
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} |{fails}",
                c.sampler.as_str(),
                c.q,
                f1(&c.score),
                f1(&c.worst),
                c.below
                    .iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(" | "),
                c.regret
                    .iter()
                    .map(|x| fmt_g(*x))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
        }
        if !r.timing.is_empty() {
            let cols = |what: &str| {
                opts.timing_at
                    .iter()
                    .map(|t| format!("{what}@{t}"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            };
            let _ = writeln!(
                o,
                "\n| sampler | {} | {} |",
                cols("ms/ask"),
                cols("cpu ms/ask")
            );
            let _ = writeln!(o, "|---|{}", "---|".repeat(2 * opts.timing_at.len()));
            let fmt = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            };
            for (kind, ms, cpu) in &r.timing {
                let _ = writeln!(o, "| {} | {} | {} |", kind.as_str(), fmt(ms), fmt(cpu));
            }
        }
    }
    o
}

/// The command's entry: measures, then prints the tables on standard output (progress on
/// standard error).
pub fn run(opts: &OptimizerBenchOptions) -> anyhow::Result<()> {
    if opts.budgets.is_empty() || opts.budgets.contains(&0) {
        anyhow::bail!("budgets must be positive trial counts");
    }
    if opts.seeds == 0 || opts.random_seeds == 0 {
        anyhow::bail!("seeds must be at least 1");
    }
    if opts.q.is_empty() || opts.q.contains(&0) {
        anyhow::bail!("q must be at least 1");
    }
    let chosen = selected(opts)?;
    if chosen.iter().any(|p| p.cost.is_none()) {
        let reports = measure(opts, &mut |line| eprintln!("{line}"))?;
        print!("{}", render(opts, &reports));
    }
    if chosen.iter().any(|p| p.cost.is_some()) {
        let text = crate::cost::measure(opts, &chosen, &mut |line| eprintln!("{line}"))?;
        print!("{text}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_is_100_at_the_optimum_and_0_at_random_median() {
        assert_eq!(score(1.0, 1.0, 3.0), 100.0);
        assert_eq!(score(3.0, 1.0, 3.0), 0.0);
        assert_eq!(score(100.0, 1.0, 3.0), -100.0);
    }

    fn args(extra: &[&str]) -> OptimizersArgs {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(
            ["tune-bench", "optimizers"].iter().chain(extra.iter()),
        )
        .expect("the flags parse");
        match cli.command {
            crate::cli::BenchCommand::Optimizers(a) => a,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn the_command_lines_defaults_are_the_options_defaults() {
        let from_cli = OptimizerBenchOptions::from_args(&args(&[])).expect("defaults are valid");
        let default = OptimizerBenchOptions::default();
        assert_eq!(from_cli.seeds, default.seeds);
        assert_eq!(from_cli.random_seeds, default.random_seeds);
        assert_eq!(from_cli.problems, default.problems);
        assert_eq!(from_cli.budgets, default.budgets);
        assert_eq!(from_cli.samplers, default.samplers);
        assert_eq!(from_cli.q, default.q);
        assert_eq!(from_cli.timing_at, default.timing_at);
        assert_eq!(from_cli.timing_seeds, default.timing_seeds);
        assert_eq!(from_cli.n_startup, default.n_startup);
    }

    #[test]
    fn timing_at_none_means_no_timing_runs_and_bad_names_are_refused() {
        let o = OptimizerBenchOptions::from_args(&args(&["--timing-at", "none"])).expect("valid");
        assert!(o.timing_at.is_empty());
        let e = OptimizerBenchOptions::from_args(&args(&["--samplers", "tpe,nope"]))
            .expect_err("an unknown sampler");
        assert!(e.to_string().contains("unknown sampler `nope`"), "{e}");
        let e = OptimizerBenchOptions::from_args(&args(&["--timing-at", "0"]))
            .expect_err("zero trials");
        assert!(e.to_string().contains("--timing-at"), "{e}");
    }

    #[test]
    fn a_tiny_benchmark_runs_end_to_end() {
        let opts = OptimizerBenchOptions {
            seeds: 1,
            random_seeds: 3,
            problems: vec!["branin".into(), "fail_oom".into()],
            budgets: vec![5, 8],
            samplers: vec![
                BenchSampler::Kind(SamplerKind::Random),
                BenchSampler::Kind(SamplerKind::Tpe),
                BenchSampler::Kind(SamplerKind::Gp),
                BenchSampler::GpPenalty,
            ],
            q: vec![1, 4],
            timing_at: vec![8],
            timing_seeds: 1,
            n_startup: Some(4),
        };
        let reports = measure(&opts, &mut |_| {}).expect("runs");
        let text = render(&opts, &reports);
        assert!(
            text.contains("### branin") && text.contains("ms/ask@8"),
            "{text}"
        );
        // A failure problem's table counts the failed trials, for every sampler.
        assert!(
            text.contains("failed@8") && text.contains("| gp-penalty |"),
            "{text}"
        );
        assert!(
            measure(
                &OptimizerBenchOptions {
                    problems: vec!["nope".into()],
                    ..opts
                },
                &mut |_| {}
            )
            .is_err()
        );
    }

    #[test]
    fn a_noisy_problem_is_scored_on_the_true_value_of_the_trial_that_looked_best() {
        let branin = problems()
            .into_iter()
            .find(|p| p.name == "branin")
            .expect("branin");
        // Noise far above branin's values: the luckiest draw is far below the optimum, the
        // true value of any trial never is.
        let noisy = Problem {
            name: "branin_very_noisy",
            noise: 100.0,
            ..branin
        };
        let opts = SamplerOptions::default();
        let run = |p: &Problem| {
            run_one(p, BenchSampler::Kind(SamplerKind::Random), &opts, 3, 30, 1).expect("runs")
        };
        let (noisy, exact) = (run(&noisy).best, run(&branin).best);
        assert_eq!((noisy.len(), exact.len()), (30, 30));
        assert!(
            noisy.iter().all(|&b| b >= branin.optimum - 1e-12),
            "{noisy:?}"
        );
        // Without noise the incumbent only improves; with noise this large a worse trial looks
        // best at least once, and the true value rises.
        assert!(exact.windows(2).all(|w| w[1] <= w[0]), "{exact:?}");
        assert!(noisy.windows(2).any(|w| w[1] > w[0]), "{noisy:?}");
    }
}
