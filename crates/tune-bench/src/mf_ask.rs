//! `tune-bench multifidelity --ask-time N` (issue 26's goal: an ask below 50 ms at 1 000 trials
//! with 20 reports each): a study of `N` finished trials on a learning-curve problem, every
//! trial with at least 20 reports (a quarter complete at 40 epochs, the rest pruned after 20),
//! run through the one engine of `tune run` (memory storage), then the next asks of each sampler
//! timed, and the forecast pruner's decision on a report of a new trial. The history is the same
//! for every sampler (its params enqueued, drawn at random), so the samplers are timed on one
//! study.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Context;
use rand::{SeedableRng, rngs::StdRng};

use crate::curves::CurveProblem;
use crate::multifidelity::{PrunerArm, open_engine};
use crate::optimizers::{median, thread_cpu_ms};
use tune::engine::Finish;
use tune::sampler::{AskContext, RandomSampler, Sampler, SamplerKind};
use tune::space::Params;
use tune::trial::{Direction, Report, TrialNumber};

/// Epochs of a complete trial, and the reports of a pruned one.
const EPOCHS: u64 = 40;
const PRUNED_AT: u64 = 20;
/// Asks timed per sampler.
const TIMED: usize = 7;

/// Milliseconds of each timed ask (wall clock and this thread's CPU time: on a shared machine
/// the CPU time is the figure that does not depend on the neighbours), and of each timed
/// pruner decision.
pub struct AskTimes {
    pub sampler: SamplerKind,
    pub ask_ms: Vec<f64>,
    pub ask_cpu_ms: Vec<f64>,
    pub report_ms: Vec<f64>,
}

fn report(step: u64, loss: f64) -> Report {
    let mut metrics = BTreeMap::new();
    metrics.insert("loss".to_string(), loss);
    metrics.insert("epoch".to_string(), step as f64);
    Report { step, metrics }
}

/// Runs the `n`-trial history for `sampler` on `problem` (the forecast pruner judging every
/// report) and times its next asks.
pub fn measure(problem: &CurveProblem, sampler: SamplerKind, n: usize) -> anyhow::Result<AskTimes> {
    let mut problem = problem.clone();
    problem.epochs = EPOCHS;
    let space = problem.space()?;
    let mut rng = StdRng::seed_from_u64(7);
    let history: Vec<Params> = (0..n)
        .map(|k| {
            RandomSampler.ask(&AskContext {
                space: &space,
                direction: Direction::Minimize,
                others: &[],
                history: &[],
                pending: &[],
                trial_number: TrialNumber(k as u64),
                seed: rand::Rng::random(&mut rng),
            })
        })
        .collect();
    let pruner = PrunerArm::Forecast.config(EPOCHS);
    let slots = vec!["cpu".to_string()];
    let mut engine = open_engine(&problem, &space, sampler, &pruner, 1, &slots, &history)?;
    for k in 0..n {
        let trial = engine.ask(0, "cpu")?.context("the engine stopped asking")?;
        let curve = problem.curve(&trial.params);
        let complete = k % 4 == 0;
        let reports = if complete { EPOCHS } else { PRUNED_AT };
        for step in 1..=reports {
            let loss = curve.losses[(step - 1) as usize];
            // A diverged trial's NaN is a report too; the pruner's decisions are not followed
            // here: the history's shape is fixed.
            engine.report(trial.id, report(step, loss))?;
        }
        let how = if curve.losses[(reports - 1) as usize].is_nan() {
            Finish::Failed {
                reason: "diverged".into(),
                log_tail: None,
            }
        } else if complete {
            Finish::Ended
        } else {
            Finish::Pruned {
                value: None,
                reason: None,
            }
        };
        engine.finish(trial.id, how, &[])?;
    }
    let mut times = AskTimes {
        sampler,
        ask_ms: Vec::new(),
        ask_cpu_ms: Vec::new(),
        report_ms: Vec::new(),
    };
    for _ in 0..TIMED {
        let (t0, c0) = (Instant::now(), thread_cpu_ms());
        let trial = engine.ask(0, "cpu")?.context("the engine stopped asking")?;
        times.ask_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        times.ask_cpu_ms.push(thread_cpu_ms() - c0);
        let curve = problem.curve(&trial.params);
        // Its first reports past the pruner's first rung: each decision timed.
        for step in 1..=3 {
            let t0 = Instant::now();
            engine.report(trial.id, report(step, curve.losses[(step - 1) as usize]))?;
            times.report_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        engine.finish(
            trial.id,
            Finish::Pruned {
                value: None,
                reason: None,
            },
            &[],
        )?;
    }
    Ok(times)
}

/// The table `--ask-time` prints.
pub fn render(problem: &str, n: usize, rows: &[AskTimes]) -> String {
    let mut out = format!(
        "ask time at {n} finished trials with {PRUNED_AT}+ reports each ({problem}, {EPOCHS}-epoch curves, a quarter complete, the forecast pruner), median / max of {TIMED} asks:\n| sampler | ask ms p50 | ask ms max | ask CPU ms p50 | ask CPU ms max | forecast decision ms p50 | max |\n|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        out.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |\n",
            r.sampler.as_str(),
            median(&mut r.ask_ms.clone()),
            max(&r.ask_ms),
            median(&mut r.ask_cpu_ms.clone()),
            max(&r.ask_cpu_ms),
            median(&mut r.report_ms.clone()),
            max(&r.report_ms),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_is_built_and_every_timed_ask_is_measured() {
        let p = crate::curves::curve_problems()
            .into_iter()
            .find(|p| p.name == "power_bowl")
            .unwrap();
        let t = measure(&p, SamplerKind::Random, 12).unwrap();
        assert_eq!(t.ask_ms.len(), TIMED);
        assert_eq!(t.ask_cpu_ms.len(), TIMED);
        assert_eq!(t.report_ms.len(), 3 * TIMED);
        assert!(t.ask_ms.iter().all(|ms| ms.is_finite() && *ms >= 0.0));
        assert!(render("power_bowl", 12, &[t]).contains("| random |"));
    }
}
