//! `tune bench …`: benchmarks that print ratios against a baseline measured in the same run.

use std::process::ExitCode;

use crate::bench::OptimizerBenchOptions;
use crate::cli::{BenchCommand, OptimizersArgs};
use crate::sampler::SamplerKind;

pub fn bench(cmd: &BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Overhead(a) => crate::bench_overhead::run(a),
        BenchCommand::Optimizers(a) => {
            crate::bench::run_optimizers(&optimizer_options(a)?)?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Pruning(a) => crate::bench_pruning::run(a),
        BenchCommand::Trainer(a) => {
            // libtorch lives in tune-worker only; the benchmark runs there.
            let status =
                ends_with_bench(&mut std::process::Command::new(super::run::worker_exe()?))
                    .arg("bench")
                    .args(&a.args)
                    .status()?;
            Ok(if status.success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// Makes a child of a benchmark end with it: when the benchmark is killed (a `kill PID`, a
/// supervisor's SIGTERM), the child gets SIGTERM too instead of running on as an orphan. A
/// `tune run` child takes it as its first Ctrl-C: no new trials, the running ones finish, every
/// state recorded. Ctrl-C at a terminal already reaches the whole process group.
///
/// Linux sends the signal when the *thread* that spawned the child ends, so only the main
/// thread, which lives as long as the benchmark, may spawn through this.
pub(crate) fn ends_with_bench(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and calls only prctl(2), which
    // is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)
        })
    }
}

fn optimizer_options(a: &OptimizersArgs) -> anyhow::Result<OptimizerBenchOptions> {
    let samplers = a
        .samplers
        .iter()
        .map(|n| {
            SamplerKind::parse(n).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown sampler `{n}` (one of {})",
                    SamplerKind::NAMES.join(", ")
                )
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let timing_at =
        a.timing_at
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
