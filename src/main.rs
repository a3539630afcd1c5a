//! The `tune` binary: parses the command line and maps every error to an exit status
//! (0 done, 1 the run failed, 2 bad input), with `anyhow` only at this edge.

use std::process::ExitCode;

use std::path::Path;

use clap::{CommandFactory, Parser};

use tune::cli::{Cli, Command};
use tune::commands::{self, BadInput};
use tune::storage::StorageUrl;

/// Subcommands, so that `tune STUDY.toml` can mean `tune run STUDY.toml`.
/// The command line as given, copied before a password in it was masked (see
/// [`hide_passwords`]); `None` where the hook does not run (not glibc).
static ARGS: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

/// Runs before `main` (glibc passes `argc`/`argv` to `.init_array` functions): copies the
/// command line, then overwrites any password in it with `*`, in the process's own argument
/// memory, which is what `ps` and `/proc/PID/cmdline` show. A `--db postgresql://u:PW@…`
/// typed by hand is then visible to other users only for the instant before `main`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
#[unsafe(link_section = ".init_array")]
static HIDE_PASSWORDS: extern "C" fn(libc::c_int, *mut *mut libc::c_char, *mut *mut libc::c_char) =
    hide_passwords;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn hide_passwords(
    argc: libc::c_int,
    argv: *mut *mut libc::c_char,
    _envp: *mut *mut libc::c_char,
) {
    use std::os::unix::ffi::OsStringExt;
    if argv.is_null() || argc <= 0 {
        return;
    }
    let mut copy = Vec::with_capacity(argc as usize);
    for i in 0..argc as usize {
        // SAFETY: glibc passes `argc` valid, NUL-terminated C strings in `argv`.
        let p = unsafe { *argv.add(i) };
        if p.is_null() {
            break;
        }
        // SAFETY: as above.
        let bytes = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
        copy.push(std::ffi::OsString::from_vec(bytes.to_vec()));
        for span in tune::storage::url::password_spans(bytes) {
            for j in span {
                // SAFETY: `j` is inside this argument's bytes, which the process owns.
                unsafe { *p.add(j) = b'*' as libc::c_char };
            }
        }
    }
    let _ = ARGS.set(copy);
}

/// Whether the command line is the `tune STUDY.toml` shortcut for `tune run STUDY.toml`,
/// options first or not (`tune --db x.db study.toml`): its first word that is neither an
/// option nor `--db`'s value is no subcommand and names a study file (`.toml`, a path, or a
/// file that exists). Anything else is left to clap, which suggests the subcommand meant
/// (`tune tirals` → `trials`) instead of trying to read a study file called `tirals`.
fn names_a_study_file(args: &[std::ffi::OsString]) -> bool {
    let mut words = args.iter().skip(1);
    while let Some(w) = words.next() {
        let Some(w) = w.to_str() else {
            return true; // not UTF-8: only a path can be
        };
        if w == "--db" {
            words.next();
            continue;
        }
        if w.starts_with('-') {
            continue;
        }
        return !is_subcommand(w)
            && (w.ends_with(".toml") || w.contains('/') || Path::new(w).is_file());
    }
    false
}

/// Whether `word` names a subcommand (or one of its aliases), read from the clap definitions
/// themselves so that a new subcommand can never be taken for a study file's name.
fn is_subcommand(word: &str) -> bool {
    word == "help"
        || Cli::command()
            .get_subcommands()
            .any(|c| c.get_name() == word || c.get_all_aliases().any(|a| a == word))
}

fn main() -> ExitCode {
    let mut args: Vec<std::ffi::OsString> = ARGS
        .get()
        .cloned()
        .unwrap_or_else(|| std::env::args_os().collect());
    if args
        .get(1)
        .is_some_and(|a| a == tune::runner::keeper::KEEPER_ARG)
    {
        // A trial's keeper (src/runner/keeper.rs), started by tune itself.
        tune::runner::keeper::keeper_main(&args[2..]);
    }
    if names_a_study_file(&args) {
        args.insert(1, "run".into());
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    ExitCode::SUCCESS
                }
                _ => {
                    // clap quotes the argument it could not place, which may be a URL.
                    eprint!("{}", tune::storage::url::redact(&e.render().to_string()));
                    ExitCode::from(2)
                }
            };
        }
    };
    if !matches!(cli.command, Command::Run(_) | Command::Worker(_)) {
        // Queries piped into `head` must end quietly, as other command-line tools do, instead
        // of panicking on a closed standard output. `run` and `worker` keep the default (a
        // write to a closed pipe fails, and they write with `tune::say!`, which shrugs it off):
        // they must record their trials' states, answer SIGTERM and exit with their status
        // whatever happens to their output.
        // SAFETY: setting a signal disposition to SIG_DFL before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // A bad `--db`/TUNE_DB is refused before any command opens or writes anything.
    let db = match cli.db.as_ref().map(|d| StorageUrl::parse(d, Path::new(""))) {
        None => None,
        Some(Ok(url)) => {
            // `copy` creates its destination's directory; everything else refuses a typo'd path
            // instead of creating a directory nobody asked for.
            if let Some(parent) = url.as_sqlite().and_then(Path::parent)
                && !parent.as_os_str().is_empty()
                && !parent.is_dir()
            {
                tune::say!(
                    "error: --db (or TUNE_DB): the directory {} does not exist (create it, or name a database in an existing directory)",
                    tune::storage::url::redact(&parent.display().to_string())
                );
                return ExitCode::from(2);
            }
            Some(url)
        }
        Some(Err(e)) => {
            tune::say!("error: --db (or TUNE_DB): {e}");
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
        Command::Delete(a) => commands::delete::delete(&a, db.as_ref()),
        Command::Discard(a) => commands::discard::discard(&a, db.as_ref()),
        Command::Importance(a) => commands::importance::importance(&a, db.as_ref()),
        Command::Plot(a) => commands::plot::plot(&a, db.as_ref()),
        Command::Report(a) => commands::report::report(&a, db.as_ref()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Every message may quote a location (a study file's line, a path that is a
            // mistyped URL): no password is printed, however malformed its URL.
            let hide = tune::storage::url::redact;
            if let Some(bad) = e.downcast_ref::<BadInput>() {
                tune::say!("error: {}", hide(&bad.to_string()));
                ExitCode::from(2)
            } else {
                tune::say!("error: {}", hide(&format!("{e:#}")));
                ExitCode::from(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<std::ffi::OsString> {
        line.split_whitespace().map(Into::into).collect()
    }

    #[test]
    fn every_subcommand_and_alias_is_taken_as_one_never_as_a_study_file() {
        for c in Cli::command().get_subcommands() {
            for name in std::iter::once(c.get_name()).chain(c.get_all_aliases()) {
                assert!(is_subcommand(name), "`{name}` is not known as a subcommand");
                assert!(!names_a_study_file(&words(&format!(
                    "tune --db x.db {name}"
                ))));
            }
        }
        assert!(is_subcommand("discard") && is_subcommand("help"));
    }

    #[test]
    fn a_toml_file_or_a_path_is_a_study_file() {
        assert!(names_a_study_file(&words("tune study.toml")));
        assert!(names_a_study_file(&words("tune --db x.db studies/s.toml")));
        assert!(!names_a_study_file(&words("tune tirals")));
    }
}
