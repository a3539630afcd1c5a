//! SQLite's side of `tune watch` (see [`crate::storage::watch`]).
//!
//! Only `SELECT`s on a connection opened with [`SqliteStorage::open_read_only`]: in WAL mode
//! a reader never blocks a writer, so the running study's writes never wait on `watch`.

use rusqlite::params;

use super::{trial_columns, trial_row};
use crate::space::{ParamValue, Params};
use crate::storage::codec::parse_time;
use crate::storage::watch::{WatchReport, WatchSource, WatchWorker};
use crate::storage::{SqliteStorage, Storage, StorageError, StudyRow};
use crate::trial::{Trial, TrialState};

impl WatchSource for SqliteStorage {
    fn storage(&self) -> &dyn Storage {
        self
    }
    fn change_marker(&self) -> Result<i64, StorageError> {
        self.watch_data_version()
    }
    fn begin_snapshot(&self) -> Result<(), StorageError> {
        // A read transaction in WAL mode takes no lock that a writer waits on.
        self.connection()
            .execute_batch("BEGIN DEFERRED")
            .map_err(|e| self.watch_err(e))
    }
    fn end_snapshot(&self) {
        let _ = self.connection().execute_batch("ROLLBACK");
    }
    fn watch_states(&self, study: &StudyRow) -> Result<Vec<(i64, u64, TrialState)>, StorageError> {
        SqliteStorage::watch_states(self, study)
    }
    fn watch_trials(&self, ids: &[i64]) -> Result<Vec<Trial>, StorageError> {
        SqliteStorage::watch_trials(self, ids)
    }
    fn watch_reports_after(
        &self,
        study: &StudyRow,
        after: i64,
    ) -> Result<Vec<WatchReport>, StorageError> {
        SqliteStorage::watch_reports_after(self, study, after)
    }
    fn watch_workers(&self, study: &StudyRow) -> Result<Vec<WatchWorker>, StorageError> {
        SqliteStorage::watch_workers(self, study)
    }
}

impl SqliteStorage {
    fn watch_err(&self, e: rusqlite::Error) -> StorageError {
        StorageError::Sqlite {
            path: self.path().to_path_buf(),
            error: e,
        }
    }

    /// SQLite's `data_version`: it changes when another connection commits to the file, so an
    /// unchanged value means there is nothing new to read.
    pub fn watch_data_version(&self) -> Result<i64, StorageError> {
        self.connection()
            .pragma_query_value(None, "data_version", |r| r.get(0))
            .map_err(|e| self.watch_err(e))
    }

    /// Every trial's id, number and state: the cheap scan that finds what changed.
    pub fn watch_states(
        &self,
        study: &StudyRow,
    ) -> Result<Vec<(i64, u64, TrialState)>, StorageError> {
        let mut stmt = self
            .connection()
            .prepare_cached("SELECT trial_id, number, state FROM trials WHERE study_id = ?1")
            .map_err(|e| self.watch_err(e))?;
        let rows = stmt
            .query_map([study.id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(|e| self.watch_err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, number, state) = row.map_err(|e| self.watch_err(e))?;
            if let Some(s) = TrialState::from_optuna(&state) {
                out.push((id, number.max(0) as u64, s));
            }
        }
        Ok(out)
    }

    /// The trials with these ids, whole (params decoded as the user wrote them).
    pub fn watch_trials(&self, ids: &[i64]) -> Result<Vec<Trial>, StorageError> {
        let mut out = Vec::with_capacity(ids.len());
        // `->` keeps a categorical choice's JSON type (json_extract would turn `true` into 1).
        // Chunks keep each statement under SQLite's variable limit.
        for chunk in ids.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(",");
            let cols = trial_columns("NULL");
            let sql = format!(
                "SELECT {cols},
                        (SELECT json_group_object(p.param_name,
                            CASE json_extract(p.distribution_json, '$.name')
                              WHEN 'CategoricalDistribution'
                                THEN p.distribution_json -> ('$.attributes.choices[' || CAST(p.param_value AS INTEGER) || ']')
                              WHEN 'IntDistribution' THEN CAST(p.param_value AS INTEGER)
                              ELSE p.param_value END)
                         FROM trial_params p WHERE p.trial_id = t.trial_id)
                 FROM trials t
                 LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
                 LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
                 LEFT JOIN tune_workers w ON w.worker_id = x.worker_id
                 WHERE t.trial_id IN ({marks})"
            );
            let mut stmt = self
                .connection()
                .prepare(&sql)
                .map_err(|e| self.watch_err(e))?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(chunk.iter()), |r| {
                    let params: Option<String> = r.get(24)?;
                    let params = params.as_deref().map(decode_params).unwrap_or_default();
                    Ok(trial_row(r)?.into_trial(params))
                })
                .map_err(|e| self.watch_err(e))?;
            for row in rows {
                out.push(row.map_err(|e| self.watch_err(e))?);
            }
        }
        Ok(out)
    }

    /// The study's intermediate reports stored after report `after`, in order.
    pub fn watch_reports_after(
        &self,
        study: &StudyRow,
        after: i64,
    ) -> Result<Vec<WatchReport>, StorageError> {
        let mut stmt = self
            .connection()
            .prepare_cached(
                "SELECT r.report_id, r.trial_id, r.step, r.metrics_json
                 FROM tune_reports r JOIN trials t ON t.trial_id = r.trial_id
                 WHERE t.study_id = ?1 AND r.report_id > ?2 AND r.is_final = 0
                 ORDER BY r.report_id",
            )
            .map_err(|e| self.watch_err(e))?;
        let rows = stmt
            .query_map(params![study.id, after], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(|e| self.watch_err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (report_id, trial_id, step, json) = row.map_err(|e| self.watch_err(e))?;
            out.push(WatchReport {
                report_id,
                trial_id,
                step: step.unwrap_or(0).max(0) as u64,
                metrics: serde_json::from_str(&json).unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// The study's worker processes, oldest first.
    pub fn watch_workers(&self, study: &StudyRow) -> Result<Vec<WatchWorker>, StorageError> {
        let mut stmt = self
            .connection()
            .prepare_cached(
                "SELECT worker_id, host, pid, started_at, heartbeat, devices_json
                 FROM tune_workers WHERE study_id = ?1 ORDER BY worker_id",
            )
            .map_err(|e| self.watch_err(e))?;
        let rows = stmt
            .query_map([study.id], |r| {
                let started: String = r.get(3)?;
                let beat: String = r.get(4)?;
                let devices: String = r.get(5)?;
                Ok(WatchWorker {
                    worker_id: r.get(0)?,
                    host: r.get(1)?,
                    pid: r.get(2)?,
                    started_at: parse_time(&started),
                    heartbeat: parse_time(&beat),
                    devices: serde_json::from_str(&devices).unwrap_or_default(),
                })
            })
            .map_err(|e| self.watch_err(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.watch_err(e))
    }
}

/// Params from the JSON object the query builds (values as the user wrote them).
fn decode_params(json: &str) -> Params {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let mut out = Params::new();
    if let Some(o) = v.as_object() {
        for (k, v) in o {
            if let Some(p) = ParamValue::from_json(v) {
                out.insert(k.clone(), p);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_json_keeps_each_values_type() {
        let p = decode_params(r#"{"lr": 0.01, "layers": 3, "opt": "adam", "bn": true}"#);
        assert_eq!(p["lr"], ParamValue::Float(0.01));
        assert_eq!(p["layers"], ParamValue::Int(3));
        assert_eq!(p["opt"], ParamValue::Str("adam".into()));
        assert_eq!(p["bn"], ParamValue::Bool(true));
    }
}
