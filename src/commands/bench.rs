//! `tune bench …`: hands over to the `tune-bench` binary installed beside `tune`, which owns
//! every benchmark, its flags and its help. Nothing here knows a benchmark: the orchestrator
//! does not link benchmark code (issue 9), and `tune-bench` depends on this crate, not the
//! other way round.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::cli::BenchArgs;

/// The benchmarks' binary, looked for beside the running `tune` as `tune-worker` is.
pub const BENCH_EXE: &str = "tune-bench";

/// Replaces this process with `tune-bench ARGS…`: same process id, same terminal, signals and
/// exit status, so a `kill` or Ctrl-C reaches the benchmark itself and no `tune` is left in
/// between to orphan it. Returns only when `tune-bench` cannot be started.
pub fn bench(a: &BenchArgs) -> anyhow::Result<ExitCode> {
    let exe = bench_exe(&std::env::current_exe()?)?;
    let err = Command::new(&exe)
        // `tune-bench` names itself after argv[0] in its usage lines: they then read as the
        // command the user typed (`tune bench optimizers [OPTIONS]`).
        .arg0("tune bench")
        .args(&a.args)
        .exec();
    Err(anyhow::Error::new(err).context(format!("starting {}", exe.display())))
}

/// `tune-bench` beside `tune_exe`, or an error that says how to build it.
fn bench_exe(tune_exe: &Path) -> anyhow::Result<PathBuf> {
    let exe = tune_exe.with_file_name(BENCH_EXE);
    anyhow::ensure!(
        exe.exists(),
        "{} not found: the benchmarks are their own binary, installed beside `tune`; build it \
         with `cargo build -p tune-bench` (or `cargo build --workspace`, with `--release` for \
         figures)",
        exe.display()
    );
    Ok(exe)
}
