//! Storage of studies, trials and reports.
//!
//! One SQLite file in Optuna's RDB schema (version 12) plus tune's own tables (see
//! `migrations/`), so Optuna's tools open a tune database unchanged. Several tune processes may
//! share one file: every write is a `BEGIN IMMEDIATE` transaction under a busy timeout, so
//! waiting happens where the timeout applies and no "database is locked" reaches the user, and
//! trial numbers are given out inside such a transaction, exactly once each.

mod sqlite;
#[cfg(test)]
pub(crate) use sqlite::fixtures as sqlite_fixtures;
pub mod watch;

pub use sqlite::{Claim, SqliteStorage, StudyRow, StudySummary, TrialRow, WorkerId};

use std::path::PathBuf;

/// A fault of storage. Unlike a failed trial, this stops a study (cleanly).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "{path}: the database has schema version {found}, newer than this tune knows ({known}); upgrade tune to open it"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("{path}: cannot migrate the schema: {message}")]
    Migration { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Conflict { path: PathBuf, message: String },
    #[error("{path}: no study named `{name}`")]
    NoStudy { path: PathBuf, name: String },
}

/// Optuna's `DATETIME` text form (naive UTC, microseconds).
pub const DATETIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.6f";

/// Now, in [`DATETIME_FORMAT`].
pub fn now_text() -> String {
    chrono::Utc::now().format(DATETIME_FORMAT).to_string()
}

/// Turns a stored datetime into RFC 3339 (UTC), as the CLI's JSON promises.
pub fn to_rfc3339(text: &str) -> Option<String> {
    let t = chrono::NaiveDateTime::parse_from_str(text, DATETIME_FORMAT)
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S"))
        .ok()?;
    Some(
        t.and_utc()
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
    )
}

/// Seconds between two stored datetimes.
pub fn seconds_between(start: &str, end: &str) -> Option<f64> {
    let p = |s: &str| chrono::NaiveDateTime::parse_from_str(s, DATETIME_FORMAT).ok();
    let (a, b) = (p(start)?, p(end)?);
    Some((b - a).num_microseconds()? as f64 / 1e6)
}
