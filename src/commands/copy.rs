//! `tune copy --from URL --to URL [--study NAME]`: move studies between SQLite and
//! PostgreSQL, both ways, trials, params, values, curves, reports and logs' paths included.

use std::path::Path;
use std::process::ExitCode;

use super::{bad, storage_fault};
use crate::cli::CopyArgs;
use crate::storage::StorageUrl;
use crate::storage::copy::open_copyable;

pub fn copy(args: &CopyArgs) -> anyhow::Result<ExitCode> {
    let from =
        StorageUrl::parse(&args.from, Path::new("")).map_err(|e| bad(format!("--from: {e}")))?;
    let to = StorageUrl::parse(&args.to, Path::new("")).map_err(|e| bad(format!("--to: {e}")))?;
    if from == to {
        return Err(bad("--from and --to name the same database"));
    }
    if let Some(p) = from.as_sqlite()
        && !p.exists()
    {
        return Err(bad(format!("--from: {}: no such database", p.display())));
    }
    let source = open_copyable(&from, false).map_err(storage_fault)?;
    let names = match &args.study {
        Some(n) => vec![n.clone()],
        None => source.study_names().map_err(storage_fault)?,
    };
    if names.is_empty() {
        return Err(bad(format!("{from}: there is no study to copy")));
    }
    // Everything is read before anything is written: a study that cannot be read (a missing
    // name) stops the copy with the destination untouched.
    let dumps = names
        .iter()
        .map(|n| {
            source
                .export_study(n)
                .map(crate::storage::copy::StudyDump::storable)
                .map_err(storage_fault)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut dest = open_copyable(&to, true).map_err(storage_fault)?;
    for d in &dumps {
        dest.import_study(d).map_err(|e| match e {
            crate::storage::StorageError::Conflict { .. } => bad(format!("--to: {e}")),
            other => storage_fault(other),
        })?;
        println!(
            "copied study `{}` ({} trials) from {from} to {to}",
            d.name,
            d.trials.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
