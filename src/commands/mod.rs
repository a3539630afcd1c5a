//! The commands of the binary, one file each. They return `anyhow::Result<ExitCode>`; an error
//! wrapping [`BadInput`] exits with status 2, any other with 1.

pub mod ask_tell;
pub mod bench;
pub mod enqueue;
pub mod query;
pub mod run;
pub mod watch;

use std::path::{Path, PathBuf};

use crate::cli::StudyRef;
use crate::spec::{self, Overrides};
use crate::storage::{SqliteStorage, Storage, StorageError, StudyRow};
use crate::study::Study;

/// Bad input from the user (a study file, a flag, a space): exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

pub fn bad(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(msg.into()))
}

/// Loads and checks a study file; every mistake is bad input.
pub fn load_study(file: &Path, db: Option<&Path>) -> anyhow::Result<Study> {
    spec::load(
        file,
        &Overrides {
            db: db.map(Path::to_path_buf),
        },
    )
    .map_err(|e| bad(e.to_string()))
}

/// A study file that disagrees with the study stored under its name (its direction or metric)
/// is bad input in the file, not a fault of storage: status 2, naming the file.
pub fn storage_error(file: &Path, e: StorageError) -> anyhow::Error {
    match e {
        StorageError::Conflict { .. } => bad(format!("{}: {e}", file.display())),
        other => anyhow::Error::new(other),
    }
}

/// Opens the database a query names, read-only, and finds the study: from a study file (its
/// name and storage), or `--study NAME` in `--db`/TUNE_DB (default `tune.db`).
pub fn open_study(r: &StudyRef, db: Option<&Path>) -> anyhow::Result<(SqliteStorage, StudyRow)> {
    let (path, name): (PathBuf, String) = match (&r.study_file, &r.name) {
        (Some(f), name) => {
            let s = load_study(f, db)?;
            (s.storage.clone(), name.clone().unwrap_or(s.name))
        }
        (None, Some(n)) => (
            db.map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("tune.db")),
            n.clone(),
        ),
        (None, None) => return Err(bad("name a study: a study file, or --study NAME")),
    };
    let storage = open_read(&path)?;
    let row = storage.study(&name).map_err(|e| match e {
        StorageError::NoStudy { .. } => bad(e.to_string()),
        other => anyhow::Error::new(other),
    })?;
    Ok((storage, row))
}

/// Opens a database for a query: read-only, and a missing file is bad input.
pub fn open_read(path: &Path) -> anyhow::Result<SqliteStorage> {
    if !path.exists() {
        return Err(bad(format!("{}: no such database", path.display())));
    }
    Ok(SqliteStorage::open_read_only(path)?)
}

pub use crate::fmt::{fmt_params, fmt_value};
