//! The commands of the binary, one file each. They return `anyhow::Result<ExitCode>`; an error
//! wrapping [`BadInput`] exits with status 2, any other with 1.

pub mod ask_tell;
pub mod bench;
pub mod copy;
pub mod delete;
pub mod discard;
pub mod enqueue;
pub mod query;
pub mod run;
pub mod watch;
pub mod worker;

use std::path::{Path, PathBuf};

use crate::cli::StudyRef;
use crate::spec::{self, Overrides};
use crate::storage::{Storage, StorageError, StorageUrl, StudyRow};
use crate::study::Study;

/// Bad input from the user (a study file, a flag, a space): exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

pub fn bad(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(msg.into()))
}

/// Loads and checks a study file; every mistake is bad input.
pub fn load_study(file: &Path, db: Option<&StorageUrl>) -> anyhow::Result<Study> {
    spec::load(file, &Overrides { db: db.cloned() }).map_err(|e| bad(e.to_string()))
}

/// A storage fault that is the user's to fix is bad input (status 2): a study file that
/// disagrees with the study stored under its name, a file that is not a database, a database
/// with a newer schema, a server that refuses the password or has no such database. Others (a
/// server that cannot be reached, a failed write) are failures of the run (status 1).
pub fn storage_error(file: &Path, e: StorageError) -> anyhow::Error {
    match e {
        StorageError::Conflict { .. } => bad(format!("{}: {e}", file.display())),
        other => storage_fault(other),
    }
}

/// [`storage_error`] without a study file.
pub fn storage_fault(e: StorageError) -> anyhow::Error {
    match &e {
        StorageError::TooNew { .. } | StorageError::NoStudy { .. } => bad(e.to_string()),
        // `--db` names a file that is not a SQLite database: the user's to fix.
        StorageError::Sqlite { error, .. }
            if error.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) =>
        {
            bad(e.to_string())
        }
        StorageError::Server { message, .. } if !is_unreachable(message) => bad(e.to_string()),
        _ => anyhow::Error::new(e),
    }
}

/// Whether a server fault is one of reaching it (status 1: it may come back), rather than one
/// of what was asked of it.
fn is_unreachable(message: &str) -> bool {
    message.contains("cannot reach the PostgreSQL server") || message.contains("connection")
}

/// The storage of commands that name none: `--db`/TUNE_DB, else `tune.db` here.
pub fn default_storage(db: Option<&StorageUrl>) -> StorageUrl {
    db.cloned()
        .unwrap_or_else(|| StorageUrl::Sqlite(PathBuf::from("tune.db")))
}

/// Opens the database a query names, read-only, and finds the study: from a study file (its
/// name and storage), or `--study NAME` in `--db`/TUNE_DB (default `tune.db`).
pub fn open_study(
    r: &StudyRef,
    db: Option<&StorageUrl>,
) -> anyhow::Result<(Box<dyn Storage>, StudyRow, StorageUrl)> {
    let (url, name): (StorageUrl, String) = match (&r.study_file, &r.name) {
        (Some(f), name) => {
            let s = load_study(f, db)?;
            (s.storage.clone(), name.clone().unwrap_or(s.name))
        }
        (None, Some(n)) => (default_storage(db), n.clone()),
        (None, None) => return Err(bad("name a study: a study file, or --study NAME")),
    };
    let storage = open_read(&url)?;
    let row = storage.study(&name).map_err(storage_fault)?;
    Ok((storage, row, url))
}

/// [`open_study`] for a command that changes the study (`tune delete`): the database opened
/// for writing, once it is known to exist and to hold the study.
pub fn writable_study(
    r: &StudyRef,
    db: Option<&StorageUrl>,
) -> anyhow::Result<(Box<dyn Storage>, StudyRow, StorageUrl)> {
    let (reader, row, url) = open_study(r, db)?;
    drop(reader);
    let storage = crate::storage::open(&url).map_err(storage_fault)?;
    let row = storage.study(&row.name).map_err(storage_fault)?;
    Ok((storage, row, url))
}

/// Opens a database for a query: read-only, and a missing file is bad input.
pub fn open_read(url: &StorageUrl) -> anyhow::Result<Box<dyn Storage>> {
    if let Some(path) = url.as_sqlite()
        && !path.exists()
    {
        return Err(bad(format!("{}: no such database", path.display())));
    }
    crate::storage::open_read(url).map_err(storage_fault)
}

pub use crate::fmt::{fmt_params, fmt_value};
