//! The `tune-bench` binary (also `tune bench …`): parses the command line, runs one benchmark
//! and maps errors to exit statuses (0 done, 1 the benchmark failed, 2 bad flags), with
//! `anyhow` only at this edge.

use std::process::ExitCode;

use clap::Parser;

use tune_bench::cli::Cli;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(2),
            };
        }
    };
    match tune_bench::run(&cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
