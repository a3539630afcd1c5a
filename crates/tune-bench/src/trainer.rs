//! `tune-bench trainer`: the trainer against PyTorch eager. It needs libtorch, which only
//! `tune-worker` links, so the benchmark itself runs there (`tune-worker bench ARGS…`); this
//! hands over and reports its status.

use std::process::{Command, ExitCode};

use crate::cli::TrainerBenchArgs;
use crate::process::ends_with_bench;

pub fn run(a: &TrainerBenchArgs) -> anyhow::Result<ExitCode> {
    let status = ends_with_bench(&mut Command::new(tune::commands::run::worker_exe()?))
        .arg("bench")
        .args(&a.args)
        .status()?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
