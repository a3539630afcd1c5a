//! The commands of the binary, one file each. They return `anyhow::Result<ExitCode>`; an error
//! wrapping [`BadInput`] exits with status 2, any other with 1.

pub mod ask_tell;
pub mod bench;
pub mod copy;
pub mod delete;
pub mod discard;
pub mod enqueue;
pub mod importance;
pub mod plot;
pub mod query;
pub mod report;
pub mod run;
pub mod watch;
pub mod worker;

use std::path::{Path, PathBuf};

use crate::cli::StudyRef;
use crate::spec::{self, Overrides};
use crate::storage::{Storage, StorageError, StorageErrorKind, StorageUrl, StudyRow};
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
/// The study as storage creates or checks it: its name, objectives and file.
pub fn new_study(study: &Study) -> crate::storage::NewStudy<'_> {
    crate::storage::NewStudy {
        name: &study.name,
        direction: study.direction,
        metric: &study.metric,
        others: &study.others,
        file: Some(&study.file),
        source: Some(&study.source),
    }
}

pub fn storage_error(file: &Path, e: StorageError) -> anyhow::Error {
    match e {
        StorageError::Conflict { .. } => bad(format!("{}: {e}", file.display())),
        StorageError::Differs { .. } => differs(file, None, &e, None),
        other => storage_fault(other),
    }
}

/// The refusal of a study file that disagrees with the study stored under its name
/// ([`StorageError::Differs`]), with the three ways on: the file back as it was, another name,
/// or the stored study deleted (`trials`: how many it has and how many completed, where known,
/// so the user sees what deleting loses).
pub fn differs(
    file: &Path,
    db: Option<&StorageUrl>,
    e: &StorageError,
    trials: Option<(usize, usize)>,
) -> anyhow::Error {
    let f = file.display();
    let on = db.map(|d| format!(" --db {d}")).unwrap_or_default();
    let has = match trials {
        Some((0, _)) => " (it has no trial)".to_string(),
        Some((n, 0)) => format!(
            " and its {n} trial{} (none complete)",
            if n == 1 { "" } else { "s" }
        ),
        Some((n, c)) => format!(
            " and its {n} trial{} ({c} complete)",
            if n == 1 { "" } else { "s" }
        ),
        None => " and its trials".to_string(),
    };
    bad(format!(
        "{f}: {e}. To go on with the stored study, change the file back; to keep both, give this one another `study.name`; to start over from this file, `tune delete {f}{on}` deletes the stored study{has}, then `tune run {f}{on}`"
    ))
}

/// [`storage_error`] without a study file.
///
/// Bad input (status 2) is what the user fixes: a study that is not there or differs, a schema
/// newer than this tune, a file that is not a SQLite database, a server that refused us or
/// reported a fault of what was asked. The rest (status 1) is storage failing: a server that
/// cannot be reached (it may come back), a database lost or that failed.
pub fn storage_fault(e: StorageError) -> anyhow::Error {
    match e.kind() {
        StorageErrorKind::NewerSchema
        | StorageErrorKind::NoStudy
        | StorageErrorKind::Differs
        | StorageErrorKind::NotADatabase
        | StorageErrorKind::Refused
        | StorageErrorKind::ServerFailed => bad(e.to_string()),
        StorageErrorKind::Unreachable
        | StorageErrorKind::Migration
        | StorageErrorKind::Conflict
        | StorageErrorKind::Rejected
        | StorageErrorKind::Fenced
        | StorageErrorKind::Lost
        | StorageErrorKind::Other => anyhow::Error::new(e),
    }
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
    let (url, name, from): (StorageUrl, String, DbFrom<'_>) = match (&r.study_file, &r.name) {
        (Some(f), name) => {
            let s = load_study(f, db)?;
            let from = if db.is_some() {
                DbFrom::Flag
            } else {
                DbFrom::StudyFile(f)
            };
            (s.storage.clone(), name.clone().unwrap_or(s.name), from)
        }
        (None, Some(n)) => (default_storage(db), n.clone(), DbFrom::of_flag(db, true)),
        (None, None) => return Err(bad("name a study: a study file, or --study NAME")),
    };
    let storage = open_read(&url, from)?;
    let row = match storage.study(&name) {
        Ok(row) => row,
        Err(e @ StorageError::NoStudy { .. }) => {
            // Name the studies that are there: the usual cause is the right name in another
            // database, or a typo.
            let names: Vec<String> = storage
                .list_studies()
                .map(|l| l.into_iter().map(|s| format!("`{}`", s.name)).collect())
                .unwrap_or_default();
            let there = if names.is_empty() {
                "it holds no study".to_string()
            } else {
                format!("it holds {}", names.join(", "))
            };
            return Err(bad(format!("{e} ({there})")));
        }
        Err(e) => return Err(storage_fault(e)),
    };
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

/// Where a reader's database came from, for the message when it is not there.
#[derive(Debug, Clone, Copy)]
pub enum DbFrom<'a> {
    /// `--db` or `TUNE_DB`.
    Flag,
    /// Nothing named one: `tune.db` in the current directory. `or_file`: the command also
    /// takes a study file instead (every query but `tune studies`).
    Default { or_file: bool },
    /// The study file's `storage` (by default `tune.db` beside it).
    StudyFile(&'a Path),
}

impl DbFrom<'_> {
    /// `Flag` when `--db`/TUNE_DB was given, else `Default`.
    pub fn of_flag(db: Option<&StorageUrl>, or_file: bool) -> DbFrom<'static> {
        if db.is_some() {
            DbFrom::Flag
        } else {
            DbFrom::Default { or_file }
        }
    }
}

/// Opens a database for a query: read-only, and a missing file is bad input that says where
/// it looked and how to name the right one.
pub fn open_read(url: &StorageUrl, from: DbFrom<'_>) -> anyhow::Result<Box<dyn Storage>> {
    if let Some(path) = url.as_sqlite()
        && !path.exists()
    {
        return Err(bad(no_database(path, from)));
    }
    crate::storage::open_read(url).map_err(storage_fault)
}

/// How many databases found near a missing one a message names, at most.
const NEARBY_SHOWN: usize = 5;

/// The message for a SQLite database that is not there: the absolute path it looked at, why
/// there, and the ways to name the right one (with the files of that name found nearby).
fn no_database(path: &Path, from: DbFrom<'_>) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let nearby = nearby_databases(path);
    let found = match nearby.as_slice() {
        [] => String::new(),
        [one] => format!("; found {}: add `--db {}`", one.display(), one.display()),
        many => format!(
            "; found: {} (name one with `--db PATH`)",
            many.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    match from {
        DbFrom::Default { or_file } => format!(
            "no database at {} (with neither a study file nor --db/TUNE_DB, a query reads tune.db in the current directory){found}. {}",
            abs.display(),
            if or_file {
                "Name the study file instead (`tune trials STUDY.toml`: its database is its `[study] storage`, by default tune.db beside the file), or the database with `--db PATH` or TUNE_DB"
            } else {
                "Name the database with `--db PATH` or TUNE_DB (a study's database is its file's `[study] storage`, by default tune.db beside the study file)"
            }
        ),
        DbFrom::Flag => format!("--db (or TUNE_DB): no database at {}{found}", abs.display()),
        DbFrom::StudyFile(f) => format!(
            "{}: no database at {} (the study file's `[study] storage`): the study has not run yet (`tune run {}` creates it){found}",
            f.display(),
            abs.display(),
            f.display()
        ),
    }
}

/// Files with the missing database's name in the directories just below the one it was looked
/// for in (`studies/tune.db` for `tune.db`), relative as the path was: where a database made
/// by running a study file from another directory usually is. One level only, so a query
/// never walks a large tree.
fn nearby_databases(path: &Path) -> Vec<PathBuf> {
    let (Some(name), Some(dir)) = (path.file_name(), path.parent()) else {
        return Vec::new();
    };
    let listed = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = std::fs::read_dir(listed) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| dir.join(e.file_name()).join(name))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.truncate(NEARBY_SHOWN);
    found
}

pub use crate::fmt::{fmt_params, fmt_value};
