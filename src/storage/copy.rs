//! `tune copy`: a whole study moved between databases (SQLite ⇄ PostgreSQL), like Optuna's
//! `copy_study`, so a study started on a laptop continues on the team's server. A study is read
//! into a [`StudyDump`] (every row of Optuna's tables and tune's, with times as stored), then
//! written as a new study in the destination, where ids are its own but numbers, states,
//! params, values, curves, reports, attributes and times are the source's.

use chrono::NaiveDateTime;

use super::{StorageError, StorageUrl};
use crate::trial::Direction;

/// One study, whole.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyDump {
    pub name: String,
    pub direction: Direction,
    pub metric: String,
    pub study_file: Option<String>,
    pub config_toml: Option<String>,
    pub created_at: Option<NaiveDateTime>,
    pub user_attrs: Vec<(String, Option<String>)>,
    pub system_attrs: Vec<(String, Option<String>)>,
    pub workers: Vec<WorkerDump>,
    pub trials: Vec<TrialDump>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorkerDump {
    /// The worker's id in the source, which trials refer to.
    pub id: i64,
    pub host: String,
    pub pid: i64,
    pub started_at: Option<NaiveDateTime>,
    pub heartbeat: Option<NaiveDateTime>,
    pub devices_json: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TrialDump {
    pub number: i64,
    /// Optuna's state name (`COMPLETE`, `FAIL`, …).
    pub state: String,
    pub start: Option<NaiveDateTime>,
    pub complete: Option<NaiveDateTime>,
    /// Name, internal value, distribution JSON.
    pub params: Vec<(String, Option<f64>, Option<String>)>,
    /// Objective, value, value type.
    pub values: Vec<(i64, Option<f64>, String)>,
    /// Step, value, value type.
    pub intermediate: Vec<(i64, Option<f64>, String)>,
    pub user_attrs: Vec<(String, Option<String>)>,
    pub system_attrs: Vec<(String, Option<String>)>,
    pub heartbeat: Option<NaiveDateTime>,
    pub tune: Option<TuneTrialDump>,
    pub reports: Vec<ReportDump>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TuneTrialDump {
    /// The source worker's id (see [`WorkerDump::id`]).
    pub worker: Option<i64>,
    pub slot: Option<i64>,
    pub device: Option<String>,
    pub trial_dir: Option<String>,
    pub logs_json: Option<String>,
    pub error: Option<String>,
    pub log_tail: Option<String>,
    pub interrupted: i64,
    pub pruned_step: Option<i64>,
    pub retry_of: Option<i64>,
    pub discarded: i64,
    /// The GPU telemetry columns (`gpu_*`), as stored.
    pub gpu: GpuColumns,
}

/// A trial's `tune_trials.gpu_*` columns, as stored (all `None` where its GPU was not sampled).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuColumns {
    pub peak_mem_mb: Option<f64>,
    pub mem_scope: Option<String>,
    pub mean_sm_pct: Option<f64>,
    pub mean_mem_bw_pct: Option<f64>,
    pub samples: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReportDump {
    pub seq: i64,
    pub step: Option<i64>,
    pub is_final: i64,
    pub metrics_json: String,
    pub reported_at: Option<NaiveDateTime>,
}

impl StudyDump {
    /// The dump as any database stores it, whatever the source kept (one written by an older
    /// tune): the study file without its storage password, and NUL bytes in a trial's error,
    /// stderr tail and attribute names replaced (see `storage::text`).
    pub fn storable(mut self) -> StudyDump {
        use super::text::{storable, study_file_for_storage};
        let clean = |s: &mut String| {
            if s.contains('\0') {
                *s = storable(s).into_owned();
            }
        };
        if let Some(t) = &mut self.config_toml {
            *t = study_file_for_storage(t).into_owned();
        }
        for (k, _) in self
            .user_attrs
            .iter_mut()
            .chain(self.system_attrs.iter_mut())
        {
            clean(k);
        }
        for t in &mut self.trials {
            for (k, _) in t.user_attrs.iter_mut().chain(t.system_attrs.iter_mut()) {
                clean(k);
            }
            if let Some(x) = &mut t.tune {
                for s in [&mut x.error, &mut x.log_tail].into_iter().flatten() {
                    clean(s);
                }
            }
        }
        self
    }
}

/// A database that studies can be copied out of and into.
pub trait Copyable {
    /// The names of every study, oldest first.
    fn study_names(&self) -> Result<Vec<String>, StorageError>;
    fn export_study(&self, name: &str) -> Result<StudyDump, StorageError>;
    /// Writes `dump` as a new study, in one transaction; a study of that name already there
    /// is a [`StorageError::Conflict`] and nothing is written.
    fn import_study(&mut self, dump: &StudyDump) -> Result<(), StorageError>;
}

/// Opens `url` for copying: `create` makes (and migrates) a missing destination.
pub fn open_copyable(url: &StorageUrl, create: bool) -> Result<Box<dyn Copyable>, StorageError> {
    Ok(match url {
        StorageUrl::Sqlite(p) if create => Box::new(super::SqliteStorage::open(p)?),
        StorageUrl::Sqlite(p) => Box::new(super::SqliteStorage::open_read_only(p)?),
        StorageUrl::Postgres(u) if create => Box::new(super::PostgresStorage::open(u)?),
        StorageUrl::Postgres(u) => Box::new(super::PostgresStorage::open_read_only(u)?),
    })
}
