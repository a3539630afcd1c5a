//! `tune-bench optimizers --problems cost`: cost-aware search (issue 13) measured as the best
//! value reached per unit of simulated compute time.
//!
//! Each cost problem gives a trial's simulated duration as a formula of its params. A run drives
//! the sampler directly, sequentially, with a history whose every trial carries that simulated
//! duration (`FinishedTrial::seconds`; the engine would record wall time, which here is the
//! sampler's own), until the run has spent the largest time budget. The time budgets are the
//! mean simulated time that `gp-plain` (the GP with its cost model off) spends in each of the
//! `--budgets` trial counts, measured first on the same seeds; per sampler the table gives the
//! mean regret (best minus optimum) and the mean number of trials within each time budget.

use std::fmt::Write as _;

use crate::optimizers::{BenchSampler, OptimizerBenchOptions};
use crate::problems::Problem;
use tune::sampler::{AskContext, SamplerOptions};
use tune::trial::{Direction, FinishedTrial, Outcome, TrialNumber};

/// Trials one run may take at most, as a multiple of the largest trial budget (a sampler that
/// buys only cheap trials would otherwise run on for long).
const MAX_TRIALS_FACTOR: usize = 3;

/// One run: (simulated seconds spent, best value) after each trial.
fn run(
    problem: &Problem,
    kind: BenchSampler,
    opts: &SamplerOptions,
    seed: u64,
    max_time: f64,
    max_trials: usize,
) -> anyhow::Result<Vec<(f64, f64)>> {
    let space = problem.space()?;
    let Some(cost) = problem.cost else {
        anyhow::bail!("{} is not a cost problem", problem.name);
    };
    let mut sampler = kind.build(opts);
    let mut history: Vec<FinishedTrial> = Vec::new();
    let mut trace = Vec::new();
    let (mut spent, mut best) = (0.0, f64::INFINITY);
    while spent < max_time && history.len() < max_trials {
        let n = history.len() as u64;
        let params = sampler.ask(&AskContext {
            others: &[],
            space: &space,
            direction: Direction::Minimize,
            history: &history,
            pending: &[],
            trial_number: TrialNumber(n),
            seed,
        });
        if let Err(e) = space.validate(&params) {
            anyhow::bail!(
                "{} proposed invalid params on {}: {e}",
                kind.as_str(),
                problem.name
            );
        }
        let v = (problem.f)(&params);
        let secs = cost(&params);
        spent += secs;
        best = f64::min(best, v);
        trace.push((spent, best));
        history.push(FinishedTrial {
            others: Vec::new(),
            number: TrialNumber(n),
            params,
            outcome: Outcome::Complete { value: v },
            curve: Vec::new(),
            seconds: Some(secs),
        });
    }
    Ok(trace)
}

/// The best value and the trial count within `budget` simulated seconds.
fn within(trace: &[(f64, f64)], budget: f64) -> (f64, usize) {
    let n = trace.iter().take_while(|(s, _)| *s <= budget).count();
    (
        if n == 0 {
            f64::INFINITY
        } else {
            trace[n - 1].1
        },
        n,
    )
}

/// Measures every cost problem of `problems` and returns the markdown tables.
pub fn measure(
    opts: &OptimizerBenchOptions,
    problems: &[Problem],
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<String> {
    let sopts = SamplerOptions {
        n_startup: opts.n_startup,
        cost_aware: None,
    };
    let max_budget = opts.budgets.iter().copied().max().unwrap_or(0);
    let mut o = String::new();
    for problem in problems.iter().filter(|p| p.cost.is_some()) {
        // Time budgets: gp-plain's mean simulated time at each trial budget.
        let mut plain = Vec::new();
        for s in 0..opts.seeds {
            plain.push(run(
                problem,
                BenchSampler::GpPlain,
                &sopts,
                s,
                f64::INFINITY,
                max_budget,
            )?);
        }
        let times: Vec<f64> = opts
            .budgets
            .iter()
            .map(|&b| plain.iter().map(|t| t[b - 1].0).sum::<f64>() / plain.len() as f64)
            .collect();
        let max_time = times.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            o,
            "\n### {} (cost; time budgets = gp-plain's mean simulated seconds at {} trials)\n",
            problem.name,
            opts.budgets
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let head: Vec<String> = opts
            .budgets
            .iter()
            .zip(&times)
            .map(|(b, t)| format!("regret @{t:.0}s (T{b}) | trials"))
            .collect();
        let _ = writeln!(o, "| sampler | {} |", head.join(" | "));
        let _ = writeln!(o, "|---|{}", "---|---|".repeat(times.len()));
        let mut samplers = vec![BenchSampler::GpPlain];
        samplers.extend(
            opts.samplers
                .iter()
                .copied()
                .filter(|s| *s != BenchSampler::GpPlain),
        );
        for kind in samplers {
            let mut regret = vec![0.0; times.len()];
            let mut trials = vec![0.0; times.len()];
            for s in 0..opts.seeds {
                let tr = run(
                    problem,
                    kind,
                    &sopts,
                    s,
                    max_time,
                    MAX_TRIALS_FACTOR * max_budget,
                )?;
                for (k, &t) in times.iter().enumerate() {
                    let (b, n) = within(&tr, t);
                    regret[k] += (b - problem.optimum) / opts.seeds as f64;
                    trials[k] += n as f64 / opts.seeds as f64;
                }
            }
            let cells: Vec<String> = regret
                .iter()
                .zip(&trials)
                .map(|(r, n)| format!("{r:.2e} | {n:.1}"))
                .collect();
            let _ = writeln!(o, "| {} | {} |", kind.as_str(), cells.join(" | "));
            progress(&format!("{} {} done", problem.name, kind.as_str()));
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problems::problems;

    #[test]
    fn a_tiny_cost_benchmark_reports_regret_within_time_budgets() {
        let opts = OptimizerBenchOptions {
            seeds: 1,
            budgets: vec![6, 8],
            samplers: vec![BenchSampler::parse("gp").expect("gp")],
            n_startup: Some(5),
            ..OptimizerBenchOptions::default()
        };
        let ps: Vec<Problem> = problems()
            .into_iter()
            .filter(|p| p.name == "cost_epochs")
            .collect();
        let text = measure(&opts, &ps, &mut |_| {}).expect("runs");
        assert!(
            text.contains("| gp-plain |") && text.contains("| gp |"),
            "{text}"
        );
        assert!(text.contains("(T8)"), "{text}");
        // Every cost problem's optimum is its minimum over a sample of its space.
        for p in problems().into_iter().filter(|p| p.cost.is_some()) {
            let space = p.space().expect("parses");
            for k in 0..2000u64 {
                let u: Vec<f64> = (0..space.len())
                    .map(|j| {
                        ((k * (2 * j as u64 + 3) * 7919 + 13 * j as u64) % 1000) as f64 / 1000.0
                    })
                    .collect();
                let v = (p.f)(&space.from_unit(&u));
                assert!(v >= p.optimum - 1e-9, "{}: {v} below {}", p.name, p.optimum);
            }
        }
    }
}
