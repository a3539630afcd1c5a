//! The `tune` binary: parses the command line and maps every error to an exit status
//! (0 done, 1 the run failed, 2 bad input), with `anyhow` only at this edge.

use std::process::ExitCode;

use std::path::Path;

use clap::Parser;

use tune::cli::{Cli, Command};
use tune::commands::{self, BadInput};
use tune::storage::StorageUrl;

/// Subcommands, so that `tune STUDY.toml` can mean `tune run STUDY.toml`.
const SUBCOMMANDS: &[&str] = &[
    "run", "studies", "trials", "best", "show", "enqueue", "ask-tell", "bench", "help", "worker",
    "watch", "copy",
];

fn main() -> ExitCode {
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
    // A bad `--db`/TUNE_DB is refused before any command opens or writes anything.
    let db = match cli.db.as_ref().map(|d| StorageUrl::parse(d, Path::new(""))) {
        None => None,
        Some(Ok(url)) => Some(url),
        Some(Err(e)) => {
            eprintln!("error: --db (or TUNE_DB): {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Run(a) => commands::run::run(&a, db.as_ref()),
        Command::Studies(a) => commands::query::studies(&a, db.as_ref()),
        Command::Trials(a) => commands::query::trials(&a, db.as_ref()),
        Command::Best(a) => commands::query::best(&a, db.as_ref()),
        Command::Show(a) => commands::query::show(&a, db.as_ref()),
        Command::Watch(a) => commands::watch::watch(&a, db.as_ref()),
        Command::Enqueue(a) => commands::enqueue::enqueue(&a, db.as_ref()),
        Command::AskTell(a) => commands::ask_tell::ask_tell(&a, db.as_ref()),
        Command::Bench(b) => commands::bench::bench(&b),
        Command::Worker(a) => commands::worker::worker(&a, db.as_ref()),
        Command::Copy(a) => commands::copy::copy(&a),
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
