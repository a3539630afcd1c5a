//! `tune delete STUDY.toml` / `tune delete --study NAME`: delete a study whole from its
//! database, after asking (or with `--yes`). The trial directories stay on disk: they are the
//! user's files, and the message says where they are.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use super::{bad, storage_fault, writable_study};
use crate::cli::DeleteArgs;
use crate::storage::StorageUrl;

pub fn delete(args: &DeleteArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let (mut storage, row, url) = writable_study(&args.study, db)?;
    let trials = storage.trials(&row, None).map_err(storage_fault)?;
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(bad(format!(
                "tune delete asks before deleting study `{}` ({} trials) from {url}; without a terminal to ask on, add --yes",
                row.name,
                trials.len()
            )));
        }
        eprint!(
            "Delete study `{}` and its {} trials from {url}? This cannot be undone. [y/N] ",
            row.name,
            trials.len()
        );
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            eprintln!("nothing deleted");
            return Ok(ExitCode::SUCCESS);
        }
    }
    let n = storage.delete_study(&row).map_err(storage_fault)?;
    let dirs: std::collections::BTreeSet<_> = trials
        .iter()
        .filter_map(|t| t.trial_dir.as_ref().and_then(|d| d.parent()))
        .collect();
    println!("deleted study `{}` ({n} trials) from {url}", row.name);
    for d in dirs {
        println!("its trial directories are left in {}", d.display());
    }
    Ok(ExitCode::SUCCESS)
}
