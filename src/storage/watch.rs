//! The reads of `tune watch`, on any backend: cheap enough to run every second against a study
//! that another process is writing, and incremental, so that a poll of a 10 000-trial study
//! reads only what changed. Each backend implements [`WatchSource`] in its own `watch` module
//! (`sqlite/watch.rs`, `postgres/watch.rs`).

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::{PostgresStorage, SqliteStorage, Storage, StorageError, StorageUrl, StudyRow};
use crate::trial::{Trial, TrialState};

/// One stored report, with its id (reports only ever append, so the id is a cursor).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchReport {
    pub report_id: i64,
    pub trial_id: i64,
    pub step: u64,
    pub metrics: BTreeMap<String, f64>,
}

/// A worker process of the study, with the devices of its slots.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchWorker {
    pub worker_id: i64,
    pub host: String,
    pub pid: i64,
    pub started_at: Option<SystemTime>,
    pub heartbeat: Option<SystemTime>,
    pub devices: Vec<String>,
}

pub use super::StoredStudyFile;

/// The reads of `tune watch`, on any backend that a study lives in.
pub trait WatchSource: Send {
    /// The storage itself, for the ordinary reads (the study, its stored study file).
    fn storage(&self) -> &dyn Storage;
    /// A number that changes whenever something may have been committed since the last call
    /// (an equal number means there is nothing new to read).
    fn change_marker(&self) -> Result<i64, StorageError>;
    /// Starts a read-only snapshot: the reads until [`WatchSource::end_snapshot`] see one
    /// state of the study.
    fn begin_snapshot(&self) -> Result<(), StorageError>;
    /// Ends the snapshot (nothing to commit); safe to call after an error.
    fn end_snapshot(&self);
    /// Every trial's id, number and state: the cheap scan that finds what changed.
    fn watch_states(&self, study: &StudyRow) -> Result<Vec<(i64, u64, TrialState)>, StorageError>;
    /// The trials with these ids, whole.
    fn watch_trials(&self, ids: &[i64]) -> Result<Vec<Trial>, StorageError>;
    /// The study's intermediate reports stored after report `after`, in order.
    fn watch_reports_after(
        &self,
        study: &StudyRow,
        after: i64,
    ) -> Result<Vec<WatchReport>, StorageError>;
    /// The study's worker processes, oldest first.
    fn watch_workers(&self, study: &StudyRow) -> Result<Vec<WatchWorker>, StorageError>;
}

/// Opens the storage at `url` for watching, read-only.
pub fn open_watch(url: &StorageUrl) -> Result<Box<dyn WatchSource>, StorageError> {
    Ok(match url {
        StorageUrl::Sqlite(p) => Box::new(SqliteStorage::open_read_only(p)?),
        StorageUrl::Postgres(u) => Box::new(PostgresStorage::open_read_only(u)?),
    })
}
