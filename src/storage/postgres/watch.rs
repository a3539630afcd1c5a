//! `tune watch` on a PostgreSQL study: the same reads as on SQLite, in one read-only
//! snapshot, and a cheap change counter instead of re-reading every second.

use super::blocking::Sql;
use super::{PostgresStorage, id32, query_trials_where, to_system};
use crate::storage::watch::{WatchReport, WatchSource, WatchWorker};
use crate::storage::{Storage, StorageError, StudyRow};
use crate::trial::{Trial, TrialState};

impl WatchSource for PostgresStorage {
    fn storage(&self) -> &dyn Storage {
        self
    }

    /// The server's next transaction id: it moves only when some transaction writes, so
    /// (like SQLite's `data_version`) an unchanged value means nothing new to read. One tiny
    /// query a poll, nothing held between polls, nothing asked of the writers.
    fn change_marker(&self) -> Result<i64, StorageError> {
        let v = self.run(|c| {
            Ok(
                c.query_one("SELECT pg_snapshot_xmax(pg_current_snapshot())::text", &[])?
                    .get::<_, String>(0),
            )
        })?;
        Ok(v.parse::<i64>().unwrap_or(0))
    }

    fn begin_snapshot(&self) -> Result<(), StorageError> {
        self.run(|c| c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"))
    }

    fn end_snapshot(&self) {
        let _ = self.run(|c| c.batch_execute("ROLLBACK"));
    }

    fn watch_states(&self, study: &StudyRow) -> Result<Vec<(i64, u64, TrialState)>, StorageError> {
        let rows = self.run(|c| {
            c.query(
                "SELECT trial_id, number, state::text FROM trials WHERE study_id = $1",
                &[&id32(study.id)],
            )
        })?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let s = TrialState::from_optuna(r.get::<_, &str>(2))?;
                Some((
                    r.get::<_, i32>(0) as i64,
                    r.get::<_, i32>(1).max(0) as u64,
                    s,
                ))
            })
            .collect())
    }

    fn watch_trials(&self, ids: &[i64]) -> Result<Vec<Trial>, StorageError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i32> = ids.iter().map(|&i| id32(i)).collect();
        let mut trials = self.run(|c| query_trials_where(c, None, None, None, Some(&ids)))?;
        // The UI takes a trial's metrics from its reports, as on SQLite.
        for t in &mut trials {
            t.metrics.clear();
        }
        Ok(trials)
    }

    fn watch_reports_after(
        &self,
        study: &StudyRow,
        after: i64,
    ) -> Result<Vec<WatchReport>, StorageError> {
        let rows = self.run(|c| {
            c.query(
                "SELECT r.report_id, r.trial_id, r.step, r.metrics_json
                 FROM tune_reports r JOIN trials t ON t.trial_id = r.trial_id
                 WHERE t.study_id = $1 AND r.report_id > $2 AND r.is_final = 0
                 ORDER BY r.report_id",
                &[&id32(study.id), &after],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| WatchReport {
                report_id: r.get(0),
                trial_id: r.get::<_, i32>(1) as i64,
                step: r.get::<_, Option<i64>>(2).unwrap_or(0).max(0) as u64,
                metrics: serde_json::from_str(r.get(3)).unwrap_or_default(),
            })
            .collect())
    }

    fn watch_workers(&self, study: &StudyRow) -> Result<Vec<WatchWorker>, StorageError> {
        let rows = self.run(|c| {
            c.query(
                "SELECT worker_id, host, pid, started_at, heartbeat, devices_json
                 FROM tune_workers WHERE study_id = $1 ORDER BY worker_id",
                &[&id32(study.id)],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| WatchWorker {
                worker_id: r.get(0),
                host: r.get(1),
                pid: r.get(2),
                started_at: to_system(r.get(3)),
                heartbeat: to_system(r.get(4)),
                devices: serde_json::from_str(r.get(5)).unwrap_or_default(),
            })
            .collect())
    }
}
