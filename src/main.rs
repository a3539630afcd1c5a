//! The `tune` binary: parses the command line and maps every error to an exit status
//! (0 done, 1 the run failed, 2 bad input), with `anyhow` only at this edge.

use std::process::ExitCode;

use clap::Parser;

use tune::cli::{Cli, Command};
use tune::commands::{self, BadInput};

/// Subcommands, so that `tune STUDY.toml` can mean `tune run STUDY.toml`.
const SUBCOMMANDS: &[&str] = &[
    "run", "studies", "trials", "best", "show", "enqueue", "ask-tell", "bench", "help", "worker",
    "watch",
];

fn main() -> ExitCode {
    if let Some(code) = trainer_dispatch() {
        return code;
    }
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(first) = args.get(1).and_then(|a| a.to_str())
        && !first.starts_with('-')
        && !SUBCOMMANDS.contains(&first)
    {
        args.insert(1, "run".into());
    }
    let cli = match Cli::try_parse_from(args) {
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
    if !matches!(cli.command, Command::Run(_)) {
        // Queries piped into `head` must end quietly, as other command-line tools do, instead
        // of panicking on a closed standard output. `run` keeps the default: it must record
        // its trials' states whatever happens to its output.
        // SAFETY: setting a signal disposition to SIG_DFL before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let db = cli.db.clone();
    let result = match cli.command {
        Command::Run(a) => commands::run::run(&a, db.as_deref()),
        Command::Studies(a) => commands::query::studies(&a, db.as_deref()),
        Command::Trials(a) => commands::query::trials(&a, db.as_deref()),
        Command::Best(a) => commands::query::best(&a, db.as_deref()),
        Command::Show(a) => commands::query::show(&a, db.as_deref()),
        Command::Enqueue(a) => commands::enqueue::enqueue(&a, db.as_deref()),
        Command::AskTell(a) => commands::ask_tell::ask_tell(&a, db.as_deref()),
        Command::Bench(b) => commands::bench::bench(&b),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if let Some(bad) = e.downcast_ref::<BadInput>() {
                eprintln!("error: {bad}");
                ExitCode::from(2)
            } else {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        }
    }
}

/// TEMPORARY (branch `trainer`): the hidden `tune worker --device D` subcommand and
/// `tune bench trainer [--steps N] [--models mlp,cnn] [--amp off,bf16]`, dispatched before clap
/// until src/cli.rs has them.
fn trainer_dispatch() -> Option<ExitCode> {
    let args: Vec<String> = std::env::args().collect();
    match (
        args.get(1).map(String::as_str),
        args.get(2).map(String::as_str),
    ) {
        (Some("worker"), _) => {
            let device = match (args.get(2).map(String::as_str), args.get(3)) {
                (Some("--device"), Some(d)) => d.clone(),
                _ => "cpu".to_string(),
            };
            Some(tune::runner::worker::worker_main(&device))
        }
        (Some("bench"), Some("trainer")) => {
            let opts = tune::train::bench::BenchOptions::from_args(&args[3..]);
            Some(match tune::train::bench::run(&opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tune bench trainer: {e}");
                    ExitCode::FAILURE
                }
            })
        }
        _ => None,
    }
}
