//! The SQLite implementation of storage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

mod copy;
mod watch;

use super::codec::{TrialRow, decode_with, direction_of, direction_text, parse_time, value_type};
use super::host::hostname;
use super::sql;
use super::{
    ClaimRequest, Gone, History, NewStudy, Propose, Storage, StorageError, StoredReport,
    StudyCounts, StudyRow, StudySummary, now_text,
};
use crate::space::{Params, Space};
use crate::trial::{
    Direction, Objective, Report, Trial, TrialId, TrialNumber, TrialState, TrialStatus, WorkerId,
};

/// The migrations, in order. `user_version` records how many were applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/0001_optuna_schema.sql"),
    include_str!("../../../migrations/0002_tune_tables.sql"),
    include_str!("../../../migrations/0003_reports_view.sql"),
    include_str!("../../../migrations/0004_trials_view_log_tail.sql"),
    include_str!("../../../migrations/0005_discarded_trials.sql"),
    include_str!("../../../migrations/0006_gpu_telemetry.sql"),
    include_str!("../../../migrations/0007_paused_trials.sql"),
    include_str!("../../../migrations/0008_trial_lineage.sql"),
];

/// How long a writer waits for another process's write transaction before giving up. Long,
/// because a "database is locked" error must never reach the user under normal contention.
const BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a reader waits for a database file that has no tables yet to get them: `tune run`
/// creates the file and then migrates it in one transaction, in milliseconds.
const CREATION_WAIT: Duration = Duration::from_secs(2);

/// Runs `f` again while SQLite answers "busy" or "locked" without having waited (the few
/// statements for which the busy timeout does not apply), for at most [`BUSY_TIMEOUT`].
fn retry_while_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    let mut pause = Duration::from_millis(1);
    loop {
        match f() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// What [`SqliteStorage::claim_number`] gave a worker.
enum Claim {
    /// A queued trial (enqueued, or the rerun of an interrupted one) with its params.
    Queued { trial_id: i64 },
    /// A fresh trial number: the caller asks the sampler and stores the params.
    New { trial_id: i64, number: TrialNumber },
    /// The budget is taken by finished and running trials: nothing to start now.
    Full,
}

/// Held while a new trial is proposed; see [`SqliteStorage::ask_lock`].
struct AskLock {
    _guard: nix::fcntl::Flock<std::fs::File>,
}

pub struct SqliteStorage {
    conn: Connection,
    path: PathBuf,
    /// The database file's identity (device, inode) when it was opened for writing: every
    /// write checks that the path still names that file (see [`SqliteStorage::check_file`]).
    identity: Option<(u64, u64)>,
}

/// A file's identity: its device and inode.
fn file_identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| (m.dev(), m.ino()))
}

impl SqliteStorage {
    /// Opens (creating if needed) a database and brings its schema up to date.
    pub fn open(path: &Path) -> Result<SqliteStorage, StorageError> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
            && !dir.exists()
        {
            std::fs::create_dir_all(dir).map_err(|e| StorageError::Migration {
                path: path.to_path_buf(),
                message: format!("cannot create directory {}: {e}", dir.display()),
            })?;
        }
        let conn = Connection::open(path).map_err(|e| Self::err_at(path, e))?;
        let mut s = SqliteStorage {
            conn,
            path: path.to_path_buf(),
            identity: file_identity(path).ok(),
        };
        s.configure()?;
        s.migrate()?;
        Ok(s)
    }

    /// Opens an existing database for reading only (`tune watch`, queries): never takes a
    /// write lock, so a running study's writes never wait on it.
    pub fn open_read_only(path: &Path) -> Result<SqliteStorage, StorageError> {
        if !path.exists() {
            return Err(StorageError::Conflict {
                path: path.to_path_buf(),
                message: "no such database".into(),
            });
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(|e| Self::err_at(path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| Self::err_at(path, e))?;
        let s = SqliteStorage {
            conn,
            path: path.to_path_buf(),
            identity: None,
        };
        let (version, empty) = s.schema_once_created()?;
        if empty {
            // An empty file (or one whose creator died before migrating it): no studies yet,
            // rather than "no such table" from every query.
            return Self::empty_read_only(path);
        }
        if version > MIGRATIONS.len() as i64 {
            return Err(StorageError::TooNew {
                path: path.to_path_buf(),
                found: version,
                known: MIGRATIONS.len() as i64,
            });
        }
        if version < MIGRATIONS.len() as i64 {
            return Err(StorageError::Migration {
                path: path.to_path_buf(),
                message: format!(
                    "schema version {version} is older than {}; open it once with `tune run` to migrate",
                    MIGRATIONS.len()
                ),
            });
        }
        Ok(s)
    }

    /// The schema version and whether the file has no tables at all, read in one statement
    /// (one snapshot). A reader that opens the file the instant `tune run` created it, before
    /// its migration commits, would read version 0 and call a database being created "older
    /// than" this tune: while the file is empty, this waits for the migration a little.
    fn schema_once_created(&self) -> Result<(i64, bool), StorageError> {
        let deadline = std::time::Instant::now() + CREATION_WAIT;
        loop {
            let (version, tables): (i64, i64) = self
                .conn
                .query_row(
                    "SELECT (SELECT user_version FROM pragma_user_version),
                            (SELECT COUNT(*) FROM sqlite_master)",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .map_err(|e| self.err(e))?;
            let empty = version == 0 && tables == 0;
            if !empty || std::time::Instant::now() >= deadline {
                return Ok((version, empty));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What an empty database file reads as: an in-memory database with the current schema
    /// and no study, under the file's name.
    fn empty_read_only(path: &Path) -> Result<SqliteStorage, StorageError> {
        let conn = Connection::open_in_memory().map_err(|e| Self::err_at(path, e))?;
        let mut s = SqliteStorage {
            conn,
            path: path.to_path_buf(),
            identity: None,
        };
        s.migrate()?;
        Ok(s)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err_at(path: &Path, error: rusqlite::Error) -> StorageError {
        // SQLite's "unable to open database file" ends with the path, which the error's
        // message starts with already.
        let error = match error {
            rusqlite::Error::SqliteFailure(e, Some(m)) => {
                let m = match m.strip_suffix(&format!(": {}", path.display())) {
                    Some(short) => short.to_string(),
                    None => m,
                };
                rusqlite::Error::SqliteFailure(e, Some(m))
            }
            other => other,
        };
        // A value too big for SQLite is that write's data, not the database (see
        // `StorageError::Rejected`).
        if error.sqlite_error_code() == Some(rusqlite::ErrorCode::TooBig) {
            return StorageError::Rejected {
                location: path.display().to_string(),
                message: error.to_string(),
            };
        }
        StorageError::Sqlite {
            path: path.to_path_buf(),
            error,
        }
    }

    fn err(&self, source: rusqlite::Error) -> StorageError {
        Self::err_at(&self.path, source)
    }

    fn configure(&mut self) -> Result<(), StorageError> {
        self.conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| self.err(e))?;
        // Switching a fresh file to WAL needs it to itself for a moment, and SQLite answers
        // SQLITE_BUSY at once, without its busy handler, while another opener holds it.
        let conn = &self.conn;
        let mode: String = retry_while_busy(|| {
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        })
        .map_err(|e| self.err(e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StorageError::Migration {
                path: self.path.clone(),
                message: format!(
                    "cannot switch to WAL journal mode (got `{mode}`); is it on a network file system?"
                ),
            });
        }
        // NORMAL in WAL mode: every committed transaction survives a kill of the process; only
        // a power loss may drop the last ones.
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| self.err(e))?;
        self.conn
            .pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Applies the migrations the file lacks, all in one `BEGIN IMMEDIATE` transaction that
    /// reads `user_version` again under the write lock: of several processes opening a fresh
    /// file at once, one migrates and the others wait and find the work done. (A migration
    /// crate that reads the version before its own deferred transaction would have the second
    /// opener run the migrations again, or fail with "database is locked".)
    fn migrate(&mut self) -> Result<(), StorageError> {
        let known = MIGRATIONS.len() as i64;
        let too_new = |found| StorageError::TooNew {
            path: self.path.clone(),
            found,
            known,
        };
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if version > known {
            return Err(too_new(version));
        }
        if version == known {
            return Ok(());
        }
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| Self::err_at(&path, e))?;
        let version: i64 = tx
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| Self::err_at(&path, e))?;
        if version > known {
            return Err(too_new(version));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(sql).map_err(|e| StorageError::Migration {
                path: path.clone(),
                message: format!("migration {} of {known}: {e}", i + 1),
            })?;
        }
        tx.pragma_update(None, "user_version", known)
            .map_err(|e| Self::err_at(&path, e))?;
        tx.commit().map_err(|e| Self::err_at(&path, e))
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction: the write lock is taken up front, where the
    /// busy timeout applies, instead of failing on upgrade from a read lock.
    pub(in crate::storage) fn write<T>(
        &mut self,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, StorageError> {
        self.check_file()?;
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| Self::err_at(&path, e))?;
        let out = f(&tx).map_err(|e| Self::err_at(&path, e))?;
        tx.commit().map_err(|e| Self::err_at(&path, e))?;
        Ok(out)
    }

    /// Fails when the database's path no longer names the file opened: it was deleted (SQLite
    /// would go on writing into the unlinked file, and the study would end "complete" with
    /// nothing stored) or replaced. One `stat` per write transaction, far cheaper than its
    /// commit.
    fn check_file(&self) -> Result<(), StorageError> {
        let Some(opened) = self.identity else {
            return Ok(());
        };
        let message = match file_identity(&self.path) {
            Ok(now) if now == opened => return Ok(()),
            Ok(_) => {
                "the database file was replaced by another file while this process had it open; nothing more is stored (the results of running trials are lost). Run again against the database you mean to keep"
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                "the database file was deleted while this process had it open; nothing more is stored (the results of running trials are lost). Run again to start over, or restore the file"
            }
            Err(_) => return Ok(()),
        };
        Err(StorageError::Lost {
            path: self.path.clone(),
            message: message.into(),
        })
    }

    /// Serialises the proposal of new trials among the processes that share this database:
    /// held from claiming a number to storing its params, so that a second process asking at
    /// the same moment sees the first one's proposal as pending instead of proposing the same
    /// point. A lock on a file beside the database (`flock`), released when the guard drops.
    fn ask_lock(&self) -> Result<AskLock, StorageError> {
        let mut name = self.path.as_os_str().to_owned();
        name.push(".ask-lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(std::path::PathBuf::from(name))
            .map_err(|e| StorageError::Conflict {
                path: self.path.clone(),
                message: format!("cannot open the ask lock beside the database: {e}"),
            })?;
        let guard = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(
            |(_, e)| StorageError::Conflict {
                path: self.path.clone(),
                message: format!("cannot take the ask lock: {e}"),
            },
        )?;
        Ok(AskLock { _guard: guard })
    }

    /// Gives this worker its next trial, inside one write transaction so that no number is
    /// given out twice: a queued trial first, else a new number while the budget allows.
    /// The budget counts trials that ended on their own plus running ones.
    fn claim_number(
        &mut self,
        study: &StudyRow,
        worker: WorkerId,
        budget: Option<u64>,
        slot: usize,
        device: &str,
    ) -> Result<Claim, StorageError> {
        self.write(|tx| {
            let taken: i64 = tx.query_row(
                sql::TAKEN,
                [study.id],
                |r| r.get(0),
            )?;
            if budget.is_some_and(|b| taken as u64 >= b) {
                return Ok(Claim::Full);
            }
            let now = now_text();
            let queued: Option<i64> = tx
                .query_row(
                    "SELECT trial_id FROM trials WHERE study_id = ?1 AND state = 'WAITING'
                     ORDER BY number LIMIT 1",
                    [study.id],
                    |r| r.get(0),
                )
                .optional()?;
            let claim = if let Some(trial_id) = queued {
                tx.execute(
                    "UPDATE trials SET state = 'RUNNING', datetime_start = ?1 WHERE trial_id = ?2",
                    params![now, trial_id],
                )?;
                Claim::Queued { trial_id }
            } else {
                let trial_id = insert_trial(tx, study.id, TrialState::Running.optuna())?;
                tx.execute(
                    "UPDATE trials SET datetime_start = ?1 WHERE trial_id = ?2",
                    params![now, trial_id],
                )?;
                let number: i64 = tx.query_row("SELECT number FROM trials WHERE trial_id = ?1", [trial_id], |r| r.get(0))?;
                Claim::New {
                    trial_id,
                    number: TrialNumber(number as u64),
                }
            };
            let trial_id = match &claim {
                Claim::Queued { trial_id, .. } | Claim::New { trial_id, .. } => *trial_id,
                Claim::Full => unreachable!("returned above"),
            };
            tx.execute(
                "INSERT INTO tune_trials (trial_id, worker_id, slot, device) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (trial_id) DO UPDATE SET worker_id = excluded.worker_id, slot = excluded.slot,
                    device = excluded.device",
                params![trial_id, worker.0, slot as i64, device],
            )?;
            tx.execute(
                "INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES (?1, ?2)
                 ON CONFLICT (trial_id) DO UPDATE SET heartbeat = excluded.heartbeat",
                params![trial_id, now],
            )?;
            Ok(claim)
        })
    }

    /// Stores a new trial's params (Optuna's internal representation and distribution).
    fn set_params(
        &mut self,
        trial_id: i64,
        space: &Space,
        params: &Params,
    ) -> Result<(), StorageError> {
        self.write(|tx| insert_params(tx, trial_id, space, params))
    }

    /// The objective's intermediate values of every trial of the study, by trial id.
    fn curves(&self, study: &StudyRow) -> Result<BTreeMap<i64, Vec<(u64, f64)>>, StorageError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT i.trial_id, i.step, i.intermediate_value, i.intermediate_value_type
                 FROM trial_intermediate_values i JOIN trials t ON t.trial_id = i.trial_id
                 WHERE t.study_id = ?1 ORDER BY i.trial_id, i.step",
            )
            .map_err(|e| self.err(e))?;
        let mut out: BTreeMap<i64, Vec<(u64, f64)>> = BTreeMap::new();
        let rows = stmt
            .query_map([study.id], |r| {
                let v: Option<f64> = r.get(2)?;
                let ty: String = r.get(3)?;
                let v = match ty.as_str() {
                    "INF_POS" => f64::INFINITY,
                    "INF_NEG" => f64::NEG_INFINITY,
                    "NAN" => f64::NAN,
                    _ => v.unwrap_or(f64::NAN),
                };
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)? as u64, v))
            })
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (id, step, v) = row.map_err(|e| self.err(e))?;
            out.entry(id).or_default().push((step, v));
        }
        Ok(out)
    }

    fn query_trials(
        &self,
        study: &StudyRow,
        state: Option<TrialState>,
        number: Option<u64>,
    ) -> Result<Vec<Trial>, StorageError> {
        // A literal filter per case, so that a single trial is found through the
        // (study_id, number) index instead of a scan (`?3 IS NULL OR …` defeats the planner).
        let (f3, f2) = if number.is_some() {
            ("AND t.number = ?3", "AND t.number = ?2")
        } else {
            ("AND ?3 IS NULL", "AND ?2 IS NULL")
        };
        let cols = trial_columns(LAST_METRICS_COLUMN);
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {cols}
                 FROM trials t
                 LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
                 LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
                 LEFT JOIN tune_workers w ON w.worker_id = x.worker_id
                 WHERE t.study_id = ?1 AND (?2 IS NULL OR t.state = ?2) {f3}
                 ORDER BY t.number"
            ))
            .map_err(|e| self.err(e))?;
        let state_filter = state.map(|s| s.optuna());
        let mut rows = stmt
            .query_map(
                params![study.id, state_filter, number.map(|n| n as i64)],
                |r| Ok(trial_row(r)?.into_trial(Params::new())),
            )
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        // Params in one pass over the study rather than one query per trial.
        let mut pstmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT p.trial_id, p.param_name, p.param_value, p.distribution_json
                 FROM trial_params p JOIN trials t ON t.trial_id = p.trial_id
                 WHERE t.study_id = ?1 {f2}"
            ))
            .map_err(|e| self.err(e))?;
        let mut by_id: std::collections::HashMap<i64, Params> = std::collections::HashMap::new();
        let mut dists: std::collections::HashMap<String, serde_json::Value> =
            std::collections::HashMap::new();
        let prow = pstmt
            .query_map(params![study.id, number.map(|n| n as i64)], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<f64>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        for p in prow {
            let (id, name, v, dist) = p.map_err(|e| self.err(e))?;
            let text = dist.unwrap_or_default();
            if !dists.contains_key(&text) {
                let parsed = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
                dists.insert(text.clone(), parsed);
            }
            if let Some(val) = dists
                .get(&text)
                .and_then(|d| decode_with(v.unwrap_or(f64::NAN), d))
            {
                by_id.entry(id).or_default().insert(name, val);
            }
        }
        for r in &mut rows {
            if let Some(p) = by_id.remove(&r.id.0) {
                r.params = p;
            }
        }
        if study.is_multi() {
            let mut vstmt = self
                .conn
                .prepare_cached(&format!(
                    "SELECT v.trial_id, v.value FROM trial_values v JOIN trials t ON t.trial_id = v.trial_id
                     WHERE t.study_id = ?1 AND v.objective > 0 {f2} ORDER BY v.trial_id, v.objective"
                ))
                .map_err(|e| self.err(e))?;
            let mut values: std::collections::HashMap<i64, Vec<f64>> =
                std::collections::HashMap::new();
            let vrows = vstmt
                .query_map(params![study.id, number.map(|n| n as i64)], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, Option<f64>>(1)?))
                })
                .map_err(|e| self.err(e))?;
            for v in vrows {
                let (id, v) = v.map_err(|e| self.err(e))?;
                values.entry(id).or_default().push(v.unwrap_or(f64::NAN));
            }
            super::attach_others(&mut rows, values);
        }
        Ok(rows)
    }

    /// A trial by its row id (one indexed lookup of its number, then the usual read).
    fn query_trial_by_id(
        &self,
        study: &StudyRow,
        trial_id: i64,
    ) -> Result<Option<Trial>, StorageError> {
        let number: i64 = self
            .conn
            .query_row(
                "SELECT number FROM trials WHERE trial_id = ?1",
                [trial_id],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        Ok(self
            .query_trials(study, None, Some(number as u64))?
            .into_iter()
            .next())
    }

    /// A study's further objectives, as stored.
    fn others(&self, study: i64) -> Result<Vec<Objective>, StorageError> {
        let q = || -> rusqlite::Result<Vec<Objective>> {
            let dirs = self
                .conn
                .prepare_cached(sql::OTHER_DIRECTIONS)?
                .query_map([study], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            if dirs.is_empty() {
                return Ok(Vec::new());
            }
            let names: Option<String> = self
                .conn
                .query_row(sql::METRIC_NAMES, [study], |r| r.get(0))
                .optional()?;
            Ok(super::others_of(&dirs, names.as_deref()))
        };
        q().map_err(|e| self.err(e))
    }

    /// Direct access for read-only tools (`watch`) and tests.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

impl Storage for SqliteStorage {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn find_study(&self, name: &str) -> Result<Option<StudyRow>, StorageError> {
        self.conn
            .query_row(
                "SELECT s.study_id, s.study_name, d.direction, COALESCE(t.metric, 'value')
                 FROM studies s
                 LEFT JOIN study_directions d ON d.study_id = s.study_id AND d.objective = 0
                 LEFT JOIN tune_studies t ON t.study_id = s.study_id
                 WHERE s.study_name = ?1",
                [name],
                |r| {
                    let dir: Option<String> = r.get(2)?;
                    Ok(StudyRow {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        direction: direction_of(dir.as_deref()),
                        metric: r.get(3)?,
                        others: Vec::new(),
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))?
            .map(|mut row| {
                row.others = self.others(row.id)?;
                Ok(row)
            })
            .transpose()
    }

    fn study(&self, name: &str) -> Result<StudyRow, StorageError> {
        self.find_study(name)?.ok_or_else(|| StorageError::NoStudy {
            path: self.path.clone(),
            name: name.to_string(),
        })
    }

    /// Creates the study, or loads it when it exists with the same direction and metric.
    fn create_or_load_study(&mut self, new: &NewStudy<'_>) -> Result<StudyRow, StorageError> {
        let NewStudy {
            name,
            direction,
            metric,
            file: study_file,
            source: config_toml,
            others: _,
        } = *new;
        let config_toml = config_toml.map(super::text::study_file_for_storage);
        let config_toml = config_toml.as_deref();
        if let Some(s) = self.find_study(name)? {
            return super::check_same(&self.location(), s, new);
        }
        let dir = direction_text(direction);
        let file = study_file.map(|p| p.display().to_string());
        let res = self.write(|tx| {
            // Another process may have created it since the check above.
            if let Some(id) = tx
                .query_row(
                    "SELECT study_id FROM studies WHERE study_name = ?1",
                    [name],
                    |r| r.get::<_, i64>(0),
                )
                .optional()?
            {
                return Ok(id);
            }
            tx.execute("INSERT INTO studies (study_name) VALUES (?1)", [name])?;
            let id = tx.last_insert_rowid();
            tx.execute(
                "INSERT INTO study_directions (direction, study_id, objective) VALUES (?1, ?2, 0)",
                params![dir, id],
            )?;
            for (i, o) in new.others.iter().enumerate() {
                tx.execute(
                    "INSERT INTO study_directions (direction, study_id, objective) VALUES (?1, ?2, ?3)",
                    params![direction_text(o.direction), id, i as i64 + 1],
                )?;
            }
            tx.execute(
                "INSERT INTO study_system_attributes (study_id, \"key\", value_json) VALUES (?1, ?2, ?3)",
                params![
                    id,
                    super::METRIC_NAMES_KEY,
                    super::metric_names_json(metric, new.others)
                ],
            )?;
            tx.execute(
                "INSERT INTO tune_studies (study_id, metric, study_file, config_toml, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, metric, file, config_toml, now_text()],
            )?;
            Ok(id)
        })?;
        let _ = res;
        let s = self.study(name)?;
        super::check_same(&self.location(), s, new)
    }

    fn list_studies(&self) -> Result<Vec<StudySummary>, StorageError> {
        let mut stmt = self
            .conn
            .prepare(sql::LIST_STUDIES)
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                let dir: Option<String> = r.get(2)?;
                let study = StudyRow {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    direction: direction_of(dir.as_deref()),
                    metric: r.get(3)?,
                    others: Vec::new(),
                };
                let mut counts: StudyCounts = [None; 6];
                for (i, c) in counts.iter_mut().enumerate() {
                    *c = r.get(4 + i)?;
                }
                Ok((study, counts))
            })
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        let mut out = Vec::with_capacity(rows.len());
        for (study, counts) in rows {
            let mut s = StudySummary::of_row(&study, counts);
            if let Some((n, v)) = self.best(&study)? {
                s.best_trial = Some(n);
                s.best_value = Some(v);
            }
            out.push(s);
        }
        Ok(out)
    }

    /// The best complete trial's number and value (finite values only).
    fn best(&self, study: &StudyRow) -> Result<Option<(TrialNumber, f64)>, StorageError> {
        let order = match study.direction {
            Direction::Minimize => "ASC",
            Direction::Maximize => "DESC",
        };
        self.conn
            .query_row(
                &format!(
                    "SELECT t.number, v.value FROM trials t JOIN trial_values v ON v.trial_id = t.trial_id
                     LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
                     WHERE t.study_id = ?1 AND t.state = 'COMPLETE' AND v.value_type = 'FINITE'
                           AND COALESCE(x.discarded, 0) = 0
                     ORDER BY v.value {order}, t.number ASC LIMIT 1"
                ),
                [study.id],
                |r| Ok((TrialNumber(r.get::<_, i64>(0)? as u64), r.get::<_, f64>(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    fn register_worker(
        &mut self,
        study: &StudyRow,
        devices: &[String],
    ) -> Result<WorkerId, StorageError> {
        let host = hostname();
        let pid = std::process::id();
        let devices = serde_json::to_string(devices).unwrap_or_else(|_| "[]".into());
        let id = self.write(|tx| {
            let now = now_text();
            tx.execute(
                "INSERT INTO tune_workers (study_id, host, pid, started_at, heartbeat, devices_json)
                 VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
                params![study.id, host, pid, now, devices],
            )?;
            Ok(tx.last_insert_rowid())
        })?;
        Ok(WorkerId(id))
    }

    /// Stamps the worker and each of its running trials (`trial_heartbeats`). A trial that is
    /// not running (ended, declared interrupted, unknown) is left as it is.
    fn heartbeat(&mut self, worker: WorkerId, trial_ids: &[TrialId]) -> Result<(), StorageError> {
        self.write(|tx| {
            let now = now_text();
            tx.execute(
                "UPDATE tune_workers SET heartbeat = ?1 WHERE worker_id = ?2",
                params![now, worker.0],
            )?;
            for id in trial_ids {
                tx.execute(
                    "INSERT INTO trial_heartbeats (trial_id, heartbeat)
                     SELECT trial_id, ?2 FROM trials WHERE trial_id = ?1 AND state = 'RUNNING'
                     ON CONFLICT (trial_id) DO UPDATE SET heartbeat = excluded.heartbeat",
                    params![id.0, now],
                )?;
            }
            Ok(())
        })
    }

    /// Marks running trials of the study whose owner is gone as failed (interrupted), and
    /// queues their params again. An owner is gone when its heartbeat is older than `grace`, or
    /// at once when it ran on this host and its process no longer exists. Returns the numbers
    /// of the trials it recovered.
    fn recover_interrupted(
        &mut self,
        study: &StudyRow,
        grace: Duration,
    ) -> Result<Vec<TrialNumber>, StorageError> {
        // Saturating: `DateTime - TimeDelta` panics past chrono's range, and a grace that
        // long means "never interrupted by age" (the spec bounds it anyway).
        let cutoff = chrono::TimeDelta::from_std(grace)
            .ok()
            .and_then(|g| chrono::Utc::now().checked_sub_signed(g))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
            .format(super::DATETIME_FORMAT)
            .to_string();
        self.write(|tx| {
            let mut stmt = tx.prepare(
                "SELECT t.trial_id, t.number, w.host, w.pid,
                        COALESCE(h.heartbeat, w.heartbeat, t.datetime_start)
                 FROM trials t
                 LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
                 LEFT JOIN tune_workers w ON w.worker_id = x.worker_id
                 LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id
                 WHERE t.study_id = ?1 AND t.state = 'RUNNING'",
            )?;
            // (trial id, number, owner host, owner pid, last sign of life)
            type Owned = (i64, i64, Option<String>, Option<i64>, Option<String>);
            let rows: Vec<Owned> = stmt
                .query_map([study.id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?
                .collect::<Result<_, _>>()?;
            let mut recovered = Vec::new();
            for (trial_id, number, whost, wpid, beat) in rows {
                let stale = beat.as_deref().is_none_or(|b| b < cutoff.as_str());
                let Some(gone) = Gone::of(whost.as_deref(), wpid, stale) else {
                    continue;
                };
                let why = gone.reason(grace);
                finish_in(tx, trial_id, TrialState::Failed, None)?;
                tx.execute(
                    "INSERT INTO tune_trials (trial_id, error, interrupted) VALUES (?1, ?2, 1)
                     ON CONFLICT (trial_id) DO UPDATE SET error = excluded.error, interrupted = 1",
                    params![trial_id, why],
                )?;
                // Queue the same params again (only when the trial had got them).
                let n_params: i64 = tx.query_row(
                    "SELECT COUNT(*) FROM trial_params WHERE trial_id = ?1",
                    [trial_id],
                    |r| r.get(0),
                )?;
                if n_params > 0 {
                    requeue(tx, study.id, trial_id, number)?;
                }
                recovered.push(TrialNumber(number as u64));
            }
            Ok(recovered)
        })
    }

    /// Records where a trial runs and logs.
    fn claim(
        &mut self,
        study: &StudyRow,
        req: &ClaimRequest<'_>,
        propose: &mut Propose<'_>,
    ) -> Result<Option<Trial>, StorageError> {
        // Held until the params are stored: see `ask_lock`.
        let ask_lock = self.ask_lock()?;
        let trial_id =
            match self.claim_number(study, req.worker, req.budget, req.slot, req.device)? {
                Claim::Full => return Ok(None),
                Claim::Queued { trial_id, .. } => trial_id,
                Claim::New { trial_id, number } => {
                    let history = self.history(study, req.space)?;
                    let params = propose(&history, number);
                    self.set_params(trial_id, req.space, &params)?;
                    trial_id
                }
            };
        drop(ask_lock);
        let trial = self.query_trial_by_id(study, trial_id)?;
        trial.map(Some).ok_or_else(|| StorageError::Conflict {
            path: self.path.clone(),
            message: format!("claimed trial {trial_id} vanished"),
        })
    }

    fn set_trial_dir(&mut self, trial_id: TrialId, dir: &Path) -> Result<(), StorageError> {
        let d = dir.display().to_string();
        self.write(|tx| {
            tx.execute(
                "UPDATE tune_trials SET trial_dir = ?1 WHERE trial_id = ?2",
                params![d, trial_id.0],
            )?;
            Ok(())
        })
    }

    fn set_checkpoint_step(&mut self, trial_id: TrialId, step: u64) -> Result<(), StorageError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES (?1, ?2, ?3)
                 ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json",
                params![trial_id.0, super::CHECKPOINT_STEP_KEY, step.to_string()],
            )?;
            Ok(())
        })
    }

    fn checkpoint_step(&self, trial_id: TrialId) -> Result<Option<u64>, StorageError> {
        let v: Option<String> = self
            .conn
            .query_row(
                "SELECT value_json FROM trial_system_attributes WHERE trial_id = ?1 AND key = ?2",
                params![trial_id.0, super::CHECKPOINT_STEP_KEY],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(v.and_then(|v| v.trim().parse().ok()))
    }

    /// Adds a trial to the queue with fixed params (`tune enqueue`, `[[enqueue]]`, ask/tell).
    fn enqueue(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
    ) -> Result<TrialNumber, StorageError> {
        let json = serde_json::to_string(params).unwrap_or_else(|_| "{}".into());
        self.write(|tx| queue(tx, study, space, params, "fixed_params", &json))
    }

    fn enqueue_child(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
        parent: super::Parent,
    ) -> Result<TrialNumber, StorageError> {
        let json = parent.json();
        self.write(|tx| queue(tx, study, space, params, super::PARENT_KEY, &json))
    }

    fn set_parent(&mut self, trial_id: TrialId, parent: super::Parent) -> Result<(), StorageError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES (?1, ?2, ?3)
                 ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json",
                params![trial_id.0, super::PARENT_KEY, parent.json()],
            )?;
            Ok(())
        })
    }

    fn lineage(&self, study: &StudyRow) -> Result<Vec<super::Lineage>, StorageError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT t.number, a.value_json FROM trial_system_attributes a
                 JOIN trials t ON t.trial_id = a.trial_id
                 WHERE t.study_id = ?1 AND a.key = ?2 ORDER BY t.number",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![study.id, super::PARENT_KEY], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        Ok(super::Lineage::of_rows(rows))
    }

    /// Whether `params` were already enqueued or run in this study (so `[[enqueue]]` entries
    /// are queued once, not on every resume).
    fn has_fixed_params(&self, study: &StudyRow, params: &Params) -> Result<bool, StorageError> {
        let json = serde_json::to_string(params).unwrap_or_default();
        let n: i64 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id
                 WHERE t.study_id = ?1 AND a.key = 'fixed_params' AND a.value_json = ?2",
                params![study.id, json],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    /// Stores one report (tune's table with every metric; Optuna's intermediate value when it
    /// carries the objective and a step).
    fn add_report(
        &mut self,
        trial_id: TrialId,
        seq: u64,
        report: &Report,
        is_final: bool,
        metric: &str,
    ) -> Result<(), StorageError> {
        let report = super::text::storable_report(report);
        let json = serde_json::to_string(&report.metrics).unwrap_or_else(|_| "{}".into());
        let fenced = self.write(|tx| {
            let running: i64 = tx.query_row(
                "SELECT COUNT(*) FROM trials WHERE trial_id = ?1 AND state = 'RUNNING'",
                [trial_id.0],
                |r| r.get(0),
            )?;
            if running == 0 {
                return Ok(true);
            }
            tx.execute(
                "INSERT INTO tune_reports (trial_id, seq, step, is_final, metrics_json, reported_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![trial_id.0, seq as i64, i64::try_from(report.step).unwrap_or(i64::MAX), is_final, json, now_text()],
            )?;
            if !is_final && let Some(v) = report.metrics.get(metric) {
                tx.execute(
                    "INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, intermediate_value_type)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (trial_id, step) DO UPDATE SET intermediate_value = excluded.intermediate_value,
                        intermediate_value_type = excluded.intermediate_value_type",
                    params![trial_id.0, i64::try_from(report.step).unwrap_or(i64::MAX), v.is_finite().then_some(*v), value_type(*v)],
                )?;
            }
            Ok(false)
        })?;
        if fenced {
            return Err(StorageError::Fenced {
                path: self.path.clone(),
                trial: trial_id.0,
            });
        }
        Ok(())
    }

    fn finish_trial(
        &mut self,
        trial: TrialId,
        status: &TrialStatus,
        logs: &[PathBuf],
    ) -> Result<(), StorageError> {
        let trial_id = trial.0;
        let status = &*super::text::storable_status(status);
        let super::EndColumns {
            logs_json: logs,
            error,
            log_tail,
            pruned_step,
            interrupted,
            requeue: queue_again,
            gpu,
        } = super::end_columns(status, logs);
        let state = status.state();
        let value = status.value();
        let fenced = self.write(|tx| {
            // Fencing: only a running trial may end; see `StorageError::Fenced`.
            let running: i64 = tx.query_row(
                "SELECT COUNT(*) FROM trials WHERE trial_id = ?1 AND state = 'RUNNING'",
                [trial_id],
                |r| r.get(0),
            )?;
            if running == 0 {
                return Ok(true);
            }
            finish_in(tx, trial_id, state, value)?;
            for (i, v) in status.others().iter().enumerate() {
                tx.execute(
                    "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (trial_id, objective) DO UPDATE SET value = excluded.value, value_type = excluded.value_type",
                    params![trial_id, i as i64 + 1, v.is_finite().then_some(*v), value_type(*v)],
                )?;
            }
            tx.execute(
                "INSERT INTO tune_trials (trial_id, error, log_tail, logs_json, pruned_step, interrupted,
                    gpu_peak_mem_mb, gpu_mem_scope, gpu_mean_sm_pct, gpu_mean_mem_bw_pct, gpu_samples)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT (trial_id) DO UPDATE SET error = excluded.error, log_tail = excluded.log_tail,
                    logs_json = excluded.logs_json, pruned_step = excluded.pruned_step,
                    interrupted = excluded.interrupted, gpu_peak_mem_mb = excluded.gpu_peak_mem_mb,
                    gpu_mem_scope = excluded.gpu_mem_scope, gpu_mean_sm_pct = excluded.gpu_mean_sm_pct,
                    gpu_mean_mem_bw_pct = excluded.gpu_mean_mem_bw_pct, gpu_samples = excluded.gpu_samples",
                params![
                    trial_id,
                    error,
                    log_tail,
                    logs,
                    pruned_step,
                    interrupted,
                    gpu.map(|g| g.peak_mem_mb).filter(|v| v.is_finite()),
                    gpu.map(|g| g.mem_scope.as_str()),
                    gpu.map(|g| g.mean_sm_pct).filter(|v| v.is_finite()),
                    gpu.map(|g| g.mean_mem_bw_pct).filter(|v| v.is_finite()),
                    gpu.map(|g| i64::from(g.samples)),
                ],
            )?;
            let put = sql::PUT_USER_ATTR;
            if !queue_again {
                let last: Option<String> = tx
                    .query_row(sql::LAST_METRICS, [trial_id], |r| {
                        r.get(0)
                    })
                    .optional()?;
                for (key, json) in super::user_attributes(last.as_deref()) {
                    tx.execute(put, params![trial_id, key, json])?;
                }
            }
            for (key, json) in super::gpu_user_attributes(gpu) {
                tx.execute(put, params![trial_id, key, json])?;
            }
            if queue_again {
                // Run the same params again: the interruption was not the trial's fault.
                let (study_id, number): (i64, i64) = tx.query_row(
                    "SELECT study_id, number FROM trials WHERE trial_id = ?1",
                    [trial_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                requeue(tx, study_id, trial_id, number)?;
            }
            Ok(false)
        })?;
        if fenced {
            return Err(StorageError::Fenced {
                path: self.path.clone(),
                trial: trial_id,
            });
        }
        Ok(())
    }

    fn set_study_file(
        &mut self,
        study: &StudyRow,
        file: &Path,
        text: &str,
    ) -> Result<(), StorageError> {
        let f = file.display().to_string();
        let text = super::text::study_file_for_storage(text);
        self.write(|tx| {
            tx.execute(
                "UPDATE tune_studies SET study_file = ?1, config_toml = ?2 WHERE study_id = ?3",
                params![f, text, study.id],
            )?;
            Ok(())
        })
    }

    fn delete_study(&mut self, study: &StudyRow) -> Result<u64, StorageError> {
        self.write(|tx| {
            let n: i64 = tx.query_row(
                "SELECT COUNT(*) FROM trials WHERE study_id = ?1",
                [study.id],
                |r| r.get(0),
            )?;
            for statement in sql::DELETE_STUDY {
                tx.execute(statement, [study.id])?;
            }
            Ok(n as u64)
        })
    }

    fn set_discarded(
        &mut self,
        study: &StudyRow,
        numbers: &[u64],
        discarded: bool,
    ) -> Result<u64, StorageError> {
        self.write(|tx| {
            let mut changed = 0;
            for &n in numbers {
                changed += tx.execute(
                    sql::SET_DISCARDED,
                    params![i64::from(discarded), study.id, n as i64],
                )?;
            }
            Ok(changed as u64)
        })
    }

    fn study_file(&self, study: &StudyRow) -> Result<super::StoredStudyFile, StorageError> {
        Ok(self
            .conn
            .query_row(
                "SELECT study_file, config_toml FROM tune_studies WHERE study_id = ?1",
                [study.id],
                |r| {
                    Ok(super::StoredStudyFile {
                        path: r.get(0)?,
                        text: r.get(1)?,
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))?
            .unwrap_or(super::StoredStudyFile {
                path: None,
                text: None,
            }))
    }

    /// Everything samplers and pruners learn from: finished trials (interrupted ones left out,
    /// their reruns stand for them) and the params of running ones (pending).
    fn history(&self, study: &StudyRow, space: &Space) -> Result<History, StorageError> {
        let trials = self.trials(study, None)?;
        let mut curves = self.curves(study)?;
        Ok(super::history_of(&trials, space, |id| {
            curves.remove(&id.0).unwrap_or_default()
        }))
    }

    /// Every report of every trial of the study, by trial number (for pruners and `watch`).
    fn reports(
        &self,
        study: &StudyRow,
    ) -> Result<BTreeMap<TrialNumber, Vec<Report>>, StorageError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT t.number, r.step, r.metrics_json FROM tune_reports r JOIN trials t ON t.trial_id = r.trial_id
                 WHERE t.study_id = ?1 AND r.is_final = 0 ORDER BY t.number, r.seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([study.id], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out: BTreeMap<TrialNumber, Vec<Report>> = BTreeMap::new();
        for row in rows {
            let (n, step, json) = row.map_err(|e| self.err(e))?;
            let metrics = super::metrics_from_json(&json);
            out.entry(TrialNumber(n)).or_default().push(Report {
                step: step.unwrap_or(0).max(0) as u64,
                metrics,
            });
        }
        Ok(out)
    }

    /// The reports of one trial, in order, with whether each was the final one.
    fn trial_reports(&self, trial_id: TrialId) -> Result<Vec<StoredReport>, StorageError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT step, metrics_json, is_final, reported_at FROM tune_reports WHERE trial_id = ?1 ORDER BY seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([trial_id.0], |r| {
                Ok((
                    r.get::<_, Option<i64>>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, bool>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (step, json, fin, at) = row.map_err(|e| self.err(e))?;
            out.push(StoredReport {
                report: Report {
                    step: step.unwrap_or(0).max(0) as u64,
                    metrics: super::metrics_from_json(&json),
                },
                is_final: fin,
                at: parse_time(&at),
            });
        }
        Ok(out)
    }

    /// The trials of a study, in number order, optionally of one state.
    fn trials(
        &self,
        study: &StudyRow,
        state: Option<TrialState>,
    ) -> Result<Vec<Trial>, StorageError> {
        self.query_trials(study, state, None)
    }

    /// One trial by number.
    fn trial(
        &self,
        study: &StudyRow,
        TrialNumber(number): TrialNumber,
    ) -> Result<Option<Trial>, StorageError> {
        Ok(self
            .query_trials(study, None, Some(number))?
            .into_iter()
            .next())
    }

    fn reruns(&self, study: &StudyRow) -> Result<Vec<(TrialNumber, TrialNumber)>, StorageError> {
        let mut stmt = self
            .conn
            .prepare_cached(sql::RERUNS)
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([study.id], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (n, of) = row.map_err(|e| self.err(e))?;
            if let (Ok(n), Ok(of)) = (u64::try_from(n), u64::try_from(of)) {
                out.push((TrialNumber(n), TrialNumber(of)));
            }
        }
        Ok(out)
    }

    fn promote(
        &mut self,
        study: &StudyRow,
        TrialNumber(number): TrialNumber,
        reason: &str,
    ) -> Result<Option<TrialNumber>, StorageError> {
        self.write(|tx| {
            let paused: Option<i64> = tx
                .query_row(sql::PAUSED_TRIAL, params![study.id, number as i64], |r| {
                    r.get(0)
                })
                .optional()?;
            let Some(trial_id) = paused else {
                return Ok(None);
            };
            tx.execute(sql::PROMOTED_STATE, [trial_id])?;
            tx.execute(sql::PROMOTED_VALUES, [trial_id])?;
            tx.execute(sql::PROMOTED_REASON, params![reason, trial_id])?;
            requeue(tx, study.id, trial_id, number as i64)?;
            let rerun: i64 = tx.query_row(
                "SELECT MAX(number) FROM trials WHERE study_id = ?1",
                [study.id],
                |r| r.get(0),
            )?;
            Ok(u64::try_from(rerun).ok().map(TrialNumber))
        })
    }

    fn retry_of(
        &self,
        study: &StudyRow,
        TrialNumber(number): TrialNumber,
    ) -> Result<Option<TrialNumber>, StorageError> {
        let n: Option<Option<i64>> = self
            .conn
            .query_row(
                "SELECT x.retry_of FROM trials t JOIN tune_trials x ON x.trial_id = t.trial_id
                 WHERE t.study_id = ?1 AND t.number = ?2",
                params![study.id, number as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(n.flatten()
            .and_then(|n| u64::try_from(n).ok())
            .map(TrialNumber))
    }

    /// How many trials ended on their own (the budget's count).
    fn counted(&self, study: &StudyRow) -> Result<u64, StorageError> {
        let n: i64 = self
            .conn
            .query_row(sql::COUNTED, [study.id], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        Ok(n as u64)
    }

    /// The number of trials of the study in `state`.
    fn count_state(&self, study: &StudyRow, state: TrialState) -> Result<u64, StorageError> {
        let n: i64 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM trials WHERE study_id = ?1 AND state = ?2",
                params![study.id, state.optuna()],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        Ok(n as u64)
    }
}

/// The last report's metrics of trial `t`, as a column of [`trial_columns`].
const LAST_METRICS_COLUMN: &str = "(SELECT metrics_json FROM tune_reports r WHERE r.trial_id = t.trial_id ORDER BY seq DESC LIMIT 1)";

/// The columns [`trial_row`] reads, from `trials t`, `trial_values v` (objective 0),
/// `tune_trials x` and `tune_workers w`; `metrics`: the last report's metrics, or `NULL`.
pub(super) fn trial_columns(metrics: &str) -> String {
    format!(
        "t.trial_id, t.number, t.state, v.value, v.value_type, t.datetime_start, t.datetime_complete,
         x.error, x.device, x.trial_dir, x.logs_json, x.log_tail, x.pruned_step,
         COALESCE(x.interrupted, 0), {metrics},
         x.worker_id, x.slot, w.host, COALESCE(x.discarded, 0),
         x.gpu_peak_mem_mb, x.gpu_mem_scope, x.gpu_mean_sm_pct, x.gpu_mean_mem_bw_pct,
         x.gpu_samples"
    )
}

/// A row of [`trial_columns`] (the first 24 columns of `r`).
pub(super) fn trial_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TrialRow> {
    let start: Option<String> = r.get(5)?;
    let end: Option<String> = r.get(6)?;
    Ok(TrialRow {
        id: r.get(0)?,
        number: r.get(1)?,
        state: r.get(2)?,
        value: r.get(3)?,
        value_type: r.get(4)?,
        started: start.as_deref().and_then(parse_time),
        finished: end.as_deref().and_then(parse_time),
        error: r.get(7)?,
        device: r.get(8)?,
        trial_dir: r.get(9)?,
        logs_json: r.get(10)?,
        log_tail: r.get(11)?,
        pruned_step: r.get(12)?,
        interrupted: r.get::<_, i64>(13)? != 0,
        metrics_json: r.get(14)?,
        worker: r.get(15)?,
        slot: r.get(16)?,
        host: r.get(17)?,
        discarded: r.get::<_, i64>(18)? != 0,
        gpu: super::gpu_of_columns(
            r.get(19)?,
            r.get::<_, Option<String>>(20)?.as_deref(),
            r.get(21)?,
            r.get(22)?,
            r.get(23)?,
        ),
    })
}

/// Queues a new trial with the params of interrupted trial `trial_id` (number `number`), so
/// that they run again; the interruption was not the trial's fault.
fn requeue(
    tx: &Transaction<'_>,
    study_id: i64,
    trial_id: i64,
    number: i64,
) -> rusqlite::Result<()> {
    let new_id = insert_trial(tx, study_id, TrialState::Queued.optuna())?;
    tx.execute(
        "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json)
         SELECT ?1, param_name, param_value, distribution_json FROM trial_params WHERE trial_id = ?2",
        params![new_id, trial_id],
    )?;
    tx.execute(
        "INSERT INTO tune_trials (trial_id, retry_of) VALUES (?1, ?2)",
        params![new_id, number],
    )?;
    Ok(())
}

/// Queues a trial with `params` and one `trial_system_attributes` entry (`key` = `value`), in
/// the caller's transaction: `[[enqueue]]`'s fixed params, or a PBT child's parent.
fn queue(
    tx: &rusqlite::Transaction<'_>,
    study: &StudyRow,
    space: &Space,
    params: &Params,
    key: &str,
    value: &str,
) -> rusqlite::Result<TrialNumber> {
    let id = insert_trial(tx, study.id, TrialState::Queued.optuna())?;
    insert_params(tx, id, space, params)?;
    tx.execute(
        "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES (?1, ?2, ?3)",
        params![id, key, value],
    )?;
    let n: i64 = tx.query_row("SELECT number FROM trials WHERE trial_id = ?1", [id], |r| {
        r.get(0)
    })?;
    Ok(TrialNumber(n as u64))
}

fn insert_trial(tx: &Transaction<'_>, study_id: i64, state: &str) -> rusqlite::Result<i64> {
    tx.execute(
        "INSERT INTO trials (number, study_id, state) VALUES (
            (SELECT COALESCE(MAX(number), -1) + 1 FROM trials WHERE study_id = ?1), ?1, ?2)",
        params![study_id, state],
    )?;
    Ok(tx.last_insert_rowid())
}

fn insert_params(
    tx: &Transaction<'_>,
    trial_id: i64,
    space: &Space,
    params: &Params,
) -> rusqlite::Result<()> {
    for p in space.params() {
        if let Some(v) = params.get(&p.name) {
            tx.execute(
                "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (trial_id, param_name) DO UPDATE SET param_value = excluded.param_value,
                    distribution_json = excluded.distribution_json",
                params![trial_id, p.name, p.to_internal(v), p.optuna_distribution_json().to_string()],
            )?;
        }
    }
    Ok(())
}

fn finish_in(
    tx: &Transaction<'_>,
    trial_id: i64,
    state: TrialState,
    value: Option<f64>,
) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE trials SET state = ?1, datetime_complete = ?2 WHERE trial_id = ?3",
        params![state.optuna(), now_text(), trial_id],
    )?;
    tx.execute(
        "DELETE FROM trial_heartbeats WHERE trial_id = ?1",
        [trial_id],
    )?;
    // Optuna keeps a pruned trial's last intermediate value as its value; so do we.
    if let Some(v) = value
        && matches!(state, TrialState::Complete | TrialState::Pruned)
    {
        tx.execute(
            "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?1, 0, ?2, ?3)
             ON CONFLICT (trial_id, objective) DO UPDATE SET value = excluded.value, value_type = excluded.value_type",
            params![trial_id, v.is_finite().then_some(v), value_type(v)],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::fixtures;
    use crate::trial::Ran;

    /// Many openers race on a file that does not exist yet (`tune run` processes started
    /// together): every one gets a migrated database, none sees "database is locked" or a
    /// migration applied twice.
    #[test]
    fn openers_racing_on_a_fresh_file_all_get_the_migrated_schema() {
        let dir = tempfile::tempdir().expect("tempdir");
        for round in 0..25 {
            let path = dir.path().join(format!("race-{round}.db"));
            let gate = std::sync::Barrier::new(6);
            let results: Vec<Result<i64, String>> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..6)
                    .map(|_| {
                        scope.spawn(|| {
                            gate.wait();
                            let s = SqliteStorage::open(&path).map_err(|e| e.to_string())?;
                            s.conn
                                .pragma_query_value(None, "user_version", |r| r.get(0))
                                .map_err(|e| e.to_string())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("no panic"))
                    .collect()
            });
            for r in results {
                assert_eq!(r, Ok(MIGRATIONS.len() as i64), "round {round}");
            }
            let s = SqliteStorage::open(&path).expect("reopens");
            let rows: i64 = s
                .conn
                .query_row("SELECT COUNT(*) FROM version_info", [], |r| r.get(0))
                .expect("count");
            assert_eq!(rows, 1, "round {round}: a migration ran twice");
        }
    }

    #[test]
    fn a_fresh_database_gets_optunas_version_rows_and_tune_tables() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = SqliteStorage::open(&dir.path().join("t.db")).expect("opens");
        let v: i64 = s
            .conn
            .query_row("SELECT schema_version FROM version_info", [], |r| r.get(0))
            .expect("row");
        assert_eq!(v, 12);
        let a: String = s
            .conn
            .query_row("SELECT version_num FROM alembic_version", [], |r| r.get(0))
            .expect("row");
        assert_eq!(a, "v3.2.0.a");
        // Reopening applies nothing twice.
        drop(s);
        SqliteStorage::open(&dir.path().join("t.db")).expect("reopens");
    }

    #[test]
    fn a_database_from_a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        {
            let s = SqliteStorage::open(&path).expect("opens");
            s.conn.pragma_update(None, "user_version", 99).expect("set");
        }
        let err = SqliteStorage::open(&path)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("newer"), "{err}");
    }

    #[test]
    fn gpu_telemetry_is_mirrored_to_optuna_user_attributes_and_the_trials_view() {
        use crate::trial::{GpuMemScope, GpuTelemetry, Report};
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = SqliteStorage::open(&dir.path().join("t.db")).expect("opens");
        let study = s
            .create_or_load_study(&super::super::NewStudy {
                others: &[],
                name: "g",
                direction: Direction::Minimize,
                metric: "loss",
                file: None,
                source: None,
            })
            .expect("study");
        let w = s
            .register_worker(&study, &["cuda:0".into()])
            .expect("worker");
        let sp = fixtures::space();
        let req = ClaimRequest {
            worker: w,
            budget: None,
            slot: 0,
            device: "cuda:0",
            space: &sp,
        };
        let t = s
            .claim(&study, &req, &mut |_, _| fixtures::params(0.1))
            .expect("claim")
            .expect("a trial");
        // A metric of the same name as a telemetry key is shadowed in the attributes only.
        let metrics = [
            ("loss".to_string(), 0.25),
            ("gpu_samples".to_string(), 99.0),
        ];
        let report = Report {
            step: 0,
            metrics: metrics.into_iter().collect(),
        };
        s.add_report(t.id, 0, &report, false, "loss")
            .expect("report");
        let gpu = GpuTelemetry {
            peak_mem_mb: 2048.0,
            mem_scope: GpuMemScope::Process,
            mean_sm_pct: 80.5,
            mean_mem_bw_pct: 41.0,
            samples: 7,
        };
        let status = TrialStatus::ended(TrialState::Complete, Some(0.25), "", Ran::default())
            .with_ran(Ran {
                gpu: Some(gpu),
                ..Ran::default()
            });
        s.finish_trial(t.id, &status, &[]).expect("finish");
        let attrs: BTreeMap<String, String> = s
            .conn
            .prepare("SELECT key, value_json FROM trial_user_attributes WHERE trial_id = ?1")
            .expect("prepare")
            .query_map([t.id.0], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(attrs["loss"], "0.25");
        assert_eq!(attrs["gpu_peak_mem_mb"], "2048.0");
        assert_eq!(attrs["gpu_mem_scope"], "\"process\"");
        assert_eq!(attrs["gpu_mean_sm_pct"], "80.5");
        assert_eq!(attrs["gpu_mean_mem_bw_pct"], "41.0");
        assert_eq!(
            attrs["gpu_samples"], "7",
            "the measurement wins over the metric"
        );
        let view: (f64, String, f64, f64, i64) = s
            .conn
            .query_row(
                "SELECT gpu_peak_mem_mb, gpu_mem_scope, gpu_mean_sm_pct, gpu_mean_mem_bw_pct,
                        gpu_samples FROM tune_trials_view WHERE number = 0",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .expect("the view's row");
        assert_eq!(view, (2048.0, "process".into(), 80.5, 41.0, 7));
        // The reported metric itself is kept whole.
        let back = s
            .trial(&study, TrialNumber(0))
            .expect("read")
            .expect("trial 0");
        assert_eq!(back.metrics["gpu_samples"], 99.0);
    }
}
