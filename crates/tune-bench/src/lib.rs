//! `tune-bench`: the benchmarks of `tune`, each printing ratios against a baseline measured in
//! the same run (`BENCHMARKS.md` has the figures and the commands).
//!
//! What belongs here: benchmark problems, harnesses, their accounting and tables, and the
//! fixtures' timing. What does not: anything `tune` itself needs. This crate depends on `tune`
//! (with its `fixtures` feature) and `tune` never imports from it; `tune bench ARGS…` only
//! runs this crate's binary. The trainer benchmark needs libtorch and lives with the trainer;
//! `trainer` here hands over to `tune-worker bench`.
//!
//! The harnesses report failures with `anyhow`, as `tune`'s commands do: each is the body of
//! one subcommand, and its errors end up printed at the binary's edge, never matched on.

pub mod cli;
pub mod cost;
pub mod curves;
pub mod mf_ask;
pub mod multi;
pub mod multifidelity;
pub mod optimizers;
pub mod overhead;
pub mod preemption;
pub mod preemption_optuna;
pub mod problems;
pub mod process;
pub mod pruning;
pub mod report;
pub mod scaling;
pub mod storage;
pub mod trainer;
pub mod tui;

pub use optimizers::OptimizerBenchOptions;

use std::process::ExitCode;

use cli::BenchCommand;

/// Runs one benchmark as the command line asked.
pub fn run(cmd: &BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Overhead(a) => overhead::run(a),
        BenchCommand::Optimizers(a) => {
            optimizers::run(&OptimizerBenchOptions::from_args(a)?)?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Pruning(a) => pruning::run(a),
        BenchCommand::Preemption(a) => preemption::run(a),
        BenchCommand::Multi(a) => multi::run_cli(a),
        BenchCommand::Multifidelity(a) => multifidelity::run(a),
        BenchCommand::Trainer(a) => trainer::run(a),
        BenchCommand::Tui(a) => tui::run(a),
        BenchCommand::Report(a) => report::run(a),
        BenchCommand::Scaling(a) => scaling::run(a),
        BenchCommand::Storage(a) => storage::run(a),
        BenchCommand::StorageClient(a) => storage::client(a),
    }
}
