//! `tune bench …`: benchmarks that print ratios against a baseline measured in the same run.

use std::process::ExitCode;

use crate::cli::BenchCommand;

pub fn bench(cmd: &BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Overhead(a) => crate::bench_overhead::run(a),
    }
}
