//! The PostgreSQL implementation of storage: one study shared by processes on many machines.
//!
//! The schema is Optuna's, exactly as Optuna creates it on PostgreSQL (enum types included),
//! plus tune's tables (`migrations/postgres/`), so `optuna.load_study` reads a tune study.
//! Everything that hands something out is coordinated by the database alone:
//! - trial numbers are given out under the study's transaction-scoped advisory lock, so they
//!   are unique, and at most one process proposes for a study at a time (the second sees the
//!   first's proposal as pending);
//! - a queued trial is claimed under the same lock (and `FOR UPDATE SKIP LOCKED`), exactly once;
//! - a result is accepted only while its trial is still running: a worker that was cut off and
//!   declared gone cannot overwrite the rerun of its trial or count twice (fencing).
//!
//! The client is async (`tokio-postgres`). Its connection is driven by a one-thread runtime
//! owned by the storage, and the synchronous [`Storage`] methods call it through the blocking
//! bridge of `blocking.rs` (one place that waits on the client's futures), so the same storage
//! works on the scheduler's executor, on plain threads and in tests.
//! One connection per storage: a process holds at most two (the study and a watcher).

mod blocking;
mod connect;
mod copy;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use chrono::NaiveDateTime;
use tokio_postgres::{Client, Row};

use self::blocking::{PgResult, Session, Sql};
use self::connect::PgFault;
use super::codec::{
    TrialRow, decode_with, direction_of, direction_text, value_type, value_type_without_nan,
};
use super::host::hostname;
use super::sql;
use super::url::PgUrl;
use super::{
    ClaimRequest, Gone, History, NewStudy, Propose, ServerFault, Storage, StorageError,
    StoredReport, StoredStudyFile, StudyCounts, StudyRow, StudySummary,
};
use crate::space::{Params, Space};
use crate::trial::{
    Direction, FinishedTrial, Report, Trial, TrialId, TrialNumber, TrialState, TrialStatus,
    WorkerId,
};

/// The migrations, in order; `tune_schema_version` records how many were applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/postgres/0001_optuna_schema.sql"),
    include_str!("../../../migrations/postgres/0002_tune_tables.sql"),
    include_str!("../../../migrations/postgres/0003_reports_view.sql"),
    include_str!("../../../migrations/postgres/0004_trials_view_log_tail.sql"),
    include_str!("../../../migrations/postgres/0005_discarded_trials.sql"),
    include_str!("../../../migrations/postgres/0006_gpu_telemetry.sql"),
    include_str!("../../../migrations/postgres/0007_paused_trials.sql"),
    include_str!("../../../migrations/postgres/0008_trial_lineage.sql"),
];

/// The first key of every advisory lock tune takes ("tu"), so tune's locks never collide with
/// another application's on the same server. The second key is the study id (0: migrations).
pub(crate) const LOCK_CLASS: i32 = 0x7475;

/// Now on the server's clock, as Optuna's naive-UTC timestamps. One clock for every machine:
/// heartbeats and their grace are compared on the server, so machines' clocks may disagree.
const NOW: &str = "(clock_timestamp() AT TIME ZONE 'UTC')";

/// How long a process keeps trying to reach a server it has lost before it gives up (and
/// stops its study); `TUNE_DB_RETRY_SECS` changes it.
const DEFAULT_RETRY: Duration = Duration::from_secs(120);

/// How long a reader waits for a database without tune's schema to get it: the first
/// `tune run` creates it in one transaction, well within this.
const SCHEMA_WAIT: Duration = Duration::from_secs(2);

pub struct PostgresStorage {
    url: PgUrl,
    /// `Option` only so that `Drop` can shut it down without waiting (see there).
    rt: Option<tokio::runtime::Runtime>,
    /// `RefCell`: reads through `&self` reconnect too (the trait is `Send`, not `Sync`).
    client: std::cell::RefCell<Option<Client>>,
    retry_for: Duration,
    /// Set once a call gave up on the server: later calls (a study stopping its trials and
    /// recording them) try once each instead of waiting out the whole retry time again.
    gave_up: std::cell::Cell<bool>,
    history: std::cell::RefCell<HistoryCache>,
    stmts: Stmts,
}

impl PostgresStorage {
    /// Queues a trial with `params` and one `trial_system_attributes` entry (`key` = `value`),
    /// in one transaction under the study's lock: `[[enqueue]]`'s fixed params, or a PBT
    /// child's parent.
    fn queue(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
        key: &str,
        value: &str,
    ) -> Result<TrialNumber, StorageError> {
        let sid = id32(study.id);
        self.run(|c| {
            let tx = c.transaction()?;
            lock_study(&tx, &self.stmts, sid)?;
            let (id, number) = insert_trial(&tx, &self.stmts, sid, TrialState::Queued.optuna())?;
            insert_params(&tx, &self.stmts, id, space, params)?;
            tx.execute(
                "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES ($1, $2, $3)",
                &[&id, &key, &value],
            )?;
            tx.commit()?;
            Ok(TrialNumber(number as u64))
        })
    }

    /// Connects and brings the schema up to date (several processes migrating a fresh
    /// database at once: one migrates, the others wait for it and find the work done).
    pub fn open(url: &PgUrl) -> Result<PostgresStorage, StorageError> {
        let mut s = Self::connect_only(url)?;
        s.migrate()?;
        Ok(s)
    }

    /// Connects for reading: the schema must be there already and not newer than this tune.
    pub fn open_read_only(url: &PgUrl) -> Result<PostgresStorage, StorageError> {
        let s = Self::connect_only(url)?;
        // A reader that connects while the first `tune run` creates the schema (in one
        // transaction) reads version 0: it waits for the schema a little before saying there
        // is none.
        let deadline = Instant::now() + SCHEMA_WAIT;
        let version = loop {
            let v = s.run(|c| schema_version(c))?;
            if v != 0 || Instant::now() >= deadline {
                break v;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let known = MIGRATIONS.len() as i64;
        if version > known {
            return Err(s.too_new(version));
        }
        if version < known {
            return Err(StorageError::Server {
                location: s.location(),
                message: format!(
                    "the database has no tune schema (version {version} of {known}); `tune run` with this URL creates it"
                ),
                fault: ServerFault::Failed,
            });
        }
        Ok(s)
    }

    fn connect_only(url: &PgUrl) -> Result<PostgresStorage, StorageError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tune-postgres")
            .enable_all()
            .build()
            .map_err(|e| StorageError::Server {
                location: url.to_string(),
                message: format!("cannot start the database client's runtime: {e}"),
                fault: ServerFault::Failed,
            })?;
        let retry_for = std::env::var("TUNE_DB_RETRY_SECS")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(DEFAULT_RETRY, Duration::from_secs);
        // A first connection that fails is reported at once (a wrong host or password is
        // better told now than after minutes), except while the server is starting up.
        let started = Instant::now();
        let client = loop {
            match connect::connect(&rt, url) {
                Ok(c) => break c,
                Err(PgFault::Transient(m))
                    if m.contains("starting up") && started.elapsed() < Duration::from_secs(30) =>
                {
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(f) => {
                    return Err(StorageError::Server {
                        location: url.to_string(),
                        message: f.message().to_string(),
                        fault: f.fault(),
                    });
                }
            }
        };
        Ok(PostgresStorage {
            url: url.clone(),
            rt: Some(rt),
            client: std::cell::RefCell::new(Some(client)),
            retry_for,
            gave_up: std::cell::Cell::new(false),
            history: std::cell::RefCell::new(HistoryCache::default()),
            stmts: Stmts::default(),
        })
    }

    fn too_new(&self, found: i64) -> StorageError {
        StorageError::TooNew {
            path: PathBuf::from(self.location()),
            found,
            known: MIGRATIONS.len() as i64,
        }
    }

    /// Runs `f` on the connection; when the server is lost (restarted, unreachable, the link
    /// cut), reconnects with backoff and runs it again, for at most `TUNE_DB_RETRY_SECS`. Each
    /// `f` is one transaction, so running it again after a lost connection is safe: the server
    /// rolled the first attempt back.
    pub(crate) fn run<T>(
        &self,
        mut f: impl FnMut(&mut Session<'_>) -> PgResult<T>,
    ) -> Result<T, StorageError> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(100);
        let mut told = false;
        loop {
            let mut slot = self.client.borrow_mut();
            if slot.as_ref().is_none_or(Client::is_closed) {
                *slot = None;
                match connect::connect(self.rt(), &self.url) {
                    Ok(c) => {
                        if told {
                            crate::notice::tell(format!("reconnected to {}", self.url));
                        }
                        self.stmts.clear();
                        *slot = Some(c);
                    }
                    Err(PgFault::Transient(m)) if started.elapsed() < self.retry_window() => {
                        if !told {
                            crate::notice::tell(format!(
                                "lost the database ({m}); retrying for up to {} s",
                                self.retry_for.as_secs()
                            ));
                            told = true;
                        }
                        drop(slot);
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_secs(5));
                        continue;
                    }
                    Err(f) => return Err(self.gave_up(f, started)),
                }
            }
            let client = slot.as_mut().expect("connected just above");
            match f(&mut Session(client)) {
                Ok(v) => return Ok(v),
                // The data of this write, not the server: no retry would help.
                Err(e) if e.as_db_error().is_some_and(|d| is_data_fault(d.code())) => {
                    let message = e
                        .as_db_error()
                        .map(|d| format!("{} (SQLSTATE {})", d.message(), d.code().code()))
                        .unwrap_or_default();
                    return Err(StorageError::Rejected {
                        location: self.location(),
                        message,
                    });
                }
                Err(e) => match connect::classify(&self.url, &e) {
                    PgFault::Transient(m) if started.elapsed() < self.retry_window() => {
                        if !told {
                            crate::notice::tell(format!(
                                "lost the database ({m}); retrying for up to {} s",
                                self.retry_for.as_secs()
                            ));
                            told = true;
                        }
                        // A session the server ended is gone; a serialization failure keeps it.
                        if client.is_closed() || e.as_db_error().is_none() {
                            *slot = None;
                        }
                        drop(slot);
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_secs(5));
                    }
                    fault => return Err(self.gave_up(fault, started)),
                },
            }
        }
    }

    fn retry_window(&self) -> Duration {
        if self.gave_up.get() {
            Duration::ZERO
        } else {
            self.retry_for
        }
    }

    fn gave_up(&self, fault: PgFault, started: Instant) -> StorageError {
        let kind = fault.fault();
        let message = match fault {
            PgFault::Transient(m) => {
                self.gave_up.set(true);
                format!(
                    "{m} (gave up after {:.0} s; TUNE_DB_RETRY_SECS sets how long to keep trying)",
                    started.elapsed().as_secs_f64()
                )
            }
            PgFault::Refused(m) => m,
        };
        StorageError::Server {
            location: self.location(),
            message,
            fault: kind,
        }
    }

    /// Applies the migrations the database lacks, in one transaction under an advisory lock.
    /// A database that Optuna created (its tables without tune's) starts from migration 2.
    fn migrate(&mut self) -> Result<(), StorageError> {
        let known = MIGRATIONS.len() as i64;
        let version = self.run(|c| schema_version(c))?;
        if version > known {
            return Err(self.too_new(version));
        }
        if version == known {
            return Ok(());
        }
        let location = self.location();
        let outcome = self.run(|c| {
            let tx = c.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&LOCK_CLASS])?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS tune_schema_version (version INTEGER NOT NULL)",
            )?;
            let mut version = schema_version(&tx)?;
            if version > known {
                return Ok(Err(version));
            }
            if version == 0 {
                let optuna: bool = tx
                    .query_one("SELECT to_regclass('public.studies') IS NOT NULL", &[])?
                    .get(0);
                if optuna {
                    version = 1;
                }
            }
            for sql in MIGRATIONS.iter().skip(version as usize) {
                tx.batch_execute(sql)?;
            }
            tx.execute("DELETE FROM tune_schema_version", &[])?;
            tx.execute(
                "INSERT INTO tune_schema_version (version) VALUES ($1)",
                &[&(known as i32)],
            )?;
            tx.commit()?;
            Ok(Ok(()))
        });
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(found)) => Err(self.too_new(found)),
            Err(StorageError::Server { message, .. }) => Err(StorageError::Migration {
                path: PathBuf::from(location),
                message,
            }),
            Err(e) => Err(e),
        }
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("the runtime lives until drop")
    }

    /// A connection for administration (creating databases, counting sessions) by tools and
    /// benchmarks: no schema is read or made.
    pub fn connect_admin(url: &PgUrl) -> Result<PostgresStorage, StorageError> {
        Self::connect_only(url)
    }

    /// Runs one statement outside any transaction (`CREATE DATABASE` cannot run in one).
    pub fn admin(&self, sql: &str) -> Result<(), StorageError> {
        self.run(|c| c.batch_execute(sql))
    }

    /// The first column of the first row of a query, as a count.
    pub fn admin_count(&self, sql: &str) -> Result<i64, StorageError> {
        self.run(|c| Ok(c.query_one(sql, &[])?.get::<_, i64>(0)))
    }

    /// The URL, without its password.
    pub fn url(&self) -> &PgUrl {
        &self.url
    }
}

impl Drop for PostgresStorage {
    /// A storage may be dropped on an async executor (the scheduler's), where a runtime must
    /// not block to shut down: the connection task is simply stopped.
    fn drop(&mut self) {
        self.client.get_mut().take();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The applied migrations: 0 on an empty database.
/// Whether an error is PostgreSQL refusing a value (a data exception, SQLSTATE class 22, or a
/// size limit, 54000) rather than a fault of the server or the connection.
fn is_data_fault(code: &tokio_postgres::error::SqlState) -> bool {
    code.code().starts_with("22") || code.code() == "54000"
}

fn schema_version(c: &impl Sql) -> PgResult<i64> {
    let row = c.query_one(
        "SELECT to_regclass('public.tune_schema_version') IS NOT NULL",
        &[],
    )?;
    if !row.get::<_, bool>(0) {
        return Ok(0);
    }
    let v = c.query_opt("SELECT version FROM tune_schema_version LIMIT 1", &[])?;
    Ok(v.map_or(0, |r| r.get::<_, i32>(0) as i64))
}

fn to_system(t: Option<NaiveDateTime>) -> Option<SystemTime> {
    let micros = u64::try_from(t?.and_utc().timestamp_micros()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
}

pub(crate) fn id32(id: i64) -> i32 {
    // Optuna's ids are `integer` on PostgreSQL; tune never makes one beyond that range.
    i32::try_from(id).unwrap_or(i32::MAX)
}

fn find_study(c: &impl Sql, name: &str) -> PgResult<Option<StudyRow>> {
    c.query_opt(
        "SELECT s.study_id, s.study_name, d.direction::text, COALESCE(t.metric, 'value')
         FROM studies s
         LEFT JOIN study_directions d ON d.study_id = s.study_id AND d.objective = 0
         LEFT JOIN tune_studies t ON t.study_id = s.study_id
         WHERE s.study_name = $1",
        &[&name],
    )?
    .map(|r| StudyRow {
        id: r.get::<_, i32>(0) as i64,
        name: r.get(1),
        direction: direction_of(r.get::<_, Option<&str>>(2)),
        metric: r.get(3),
        others: Vec::new(),
    })
    .map(|mut row| {
        let sid = id32(row.id);
        let dirs: Vec<String> = c
            .query(sql::OTHER_DIRECTIONS, &[&sid])?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !dirs.is_empty() {
            let names: Option<String> = c
                .query_opt(sql::METRIC_NAMES, &[&sid])?
                .and_then(|r| r.get(0));
            row.others = super::others_of(&dirs, names.as_deref());
        }
        Ok(row)
    })
    .transpose()
}

/// The trials of a study (one by number, or all of one state, or all), with their params.
fn query_trials(
    c: &impl Sql,
    study: i64,
    state: Option<TrialState>,
    number: Option<u64>,
) -> PgResult<Vec<Trial>> {
    query_trials_where(c, Some(study), state, number, None)
}

/// [`query_trials`] with every filter: of a study (or of any), a state, a number, trial ids.
fn query_trials_where(
    c: &impl Sql,
    study: Option<i64>,
    state: Option<TrialState>,
    number: Option<u64>,
    ids: Option<&[i32]>,
) -> PgResult<Vec<Trial>> {
    let study = study.map(id32);
    let state = state.map(|s| s.optuna());
    let number = number.map(|n| n as i32);
    let ids: Option<Vec<i32>> = ids.map(<[i32]>::to_vec);
    let rows = c.query(
        "SELECT t.trial_id, t.number, t.state::text, v.value, v.value_type::text,
                t.datetime_start, t.datetime_complete,
                x.error, x.device, x.trial_dir, x.logs_json, x.log_tail, x.pruned_step,
                COALESCE(x.interrupted, 0),
                (SELECT metrics_json FROM tune_reports r WHERE r.trial_id = t.trial_id ORDER BY seq DESC LIMIT 1),
                x.worker_id, x.slot, w.host, COALESCE(x.discarded, 0),
                x.gpu_peak_mem_mb, x.gpu_mem_scope, x.gpu_mean_sm_pct, x.gpu_mean_mem_bw_pct,
                x.gpu_samples
         FROM trials t
         LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
         LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
         LEFT JOIN tune_workers w ON w.worker_id = x.worker_id
         WHERE ($1::int IS NULL OR t.study_id = $1) AND ($2::text IS NULL OR t.state::text = $2)
               AND ($3::int IS NULL OR t.number = $3) AND ($4::int[] IS NULL OR t.trial_id = ANY($4))
         ORDER BY t.number",
        &[&study, &state, &number, &ids],
    )?;
    let mut trials: Vec<Trial> = rows.iter().map(trial_of_row).collect();
    let prows = c.query(
        "SELECT p.trial_id, p.param_name, p.param_value, p.distribution_json
         FROM trial_params p JOIN trials t ON t.trial_id = p.trial_id
         WHERE ($1::int IS NULL OR t.study_id = $1) AND ($2::int IS NULL OR t.number = $2)
               AND ($3::int[] IS NULL OR t.trial_id = ANY($3))",
        &[&study, &number, &ids],
    )?;
    let mut by_id: HashMap<i64, Params> = HashMap::new();
    let mut dists: HashMap<String, serde_json::Value> = HashMap::new();
    for r in prows {
        let id = r.get::<_, i32>(0) as i64;
        let name: String = r.get(1);
        let v: Option<f64> = r.get(2);
        let text: String = r.get::<_, Option<String>>(3).unwrap_or_default();
        let d = dists
            .entry(text)
            .or_insert_with_key(|t| serde_json::from_str(t).unwrap_or(serde_json::Value::Null));
        if let Some(val) = decode_with(v.unwrap_or(f64::NAN), d) {
            by_id.entry(id).or_default().insert(name, val);
        }
    }
    for t in &mut trials {
        if let Some(p) = by_id.remove(&t.id.0) {
            t.params = p;
        }
    }
    let vrows = c.query(
        "SELECT v.trial_id, v.value FROM trial_values v JOIN trials t ON t.trial_id = v.trial_id
         WHERE v.objective > 0 AND ($1::int IS NULL OR t.study_id = $1)
               AND ($2::int IS NULL OR t.number = $2) AND ($3::int[] IS NULL OR t.trial_id = ANY($3))
         ORDER BY v.trial_id, v.objective",
        &[&study, &number, &ids],
    )?;
    let mut values: HashMap<i64, Vec<f64>> = HashMap::new();
    for r in vrows {
        values
            .entry(r.get::<_, i32>(0) as i64)
            .or_default()
            .push(r.get::<_, Option<f64>>(1).unwrap_or(f64::NAN));
    }
    super::attach_others(&mut trials, values);
    Ok(trials)
}

fn trial_of_row(r: &Row) -> Trial {
    TrialRow {
        id: r.get::<_, i32>(0).into(),
        number: r.get::<_, i32>(1).into(),
        state: r.get(2),
        value: r.get(3),
        value_type: r.get(4),
        started: to_system(r.get(5)),
        finished: to_system(r.get(6)),
        error: r.get(7),
        device: r.get(8),
        trial_dir: r.get(9),
        logs_json: r.get(10),
        log_tail: r.get(11),
        pruned_step: r.get(12),
        interrupted: r.get::<_, i32>(13) != 0,
        metrics_json: r.get(14),
        worker: r.get(15),
        slot: r.get::<_, Option<i32>>(16).map(i64::from),
        host: r.get(17),
        discarded: r.get::<_, i32>(18) != 0,
        gpu: super::gpu_of_columns(
            r.get(19),
            r.get::<_, Option<String>>(20).as_deref(),
            r.get(21),
            r.get(22),
            r.get::<_, Option<i32>>(23).map(i64::from),
        ),
    }
    .into_trial(Params::new())
}

/// The intermediate values of the study's trials `ids`, by trial and step.
fn curves(c: &impl Sql, study: i64, ids: &[i32]) -> PgResult<BTreeMap<i64, Vec<(u64, f64)>>> {
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    let rows = c.query(
        "SELECT i.trial_id, i.step, i.intermediate_value, i.intermediate_value_type::text
         FROM trial_intermediate_values i JOIN trials t ON t.trial_id = i.trial_id
         WHERE t.study_id = $1 AND i.trial_id = ANY($2) ORDER BY i.trial_id, i.step",
        &[&id32(study), &ids],
    )?;
    let mut out: BTreeMap<i64, Vec<(u64, f64)>> = BTreeMap::new();
    for r in rows {
        let v: Option<f64> = r.get(2);
        let ty: String = r.get(3);
        let v = match ty.as_str() {
            "INF_POS" => f64::INFINITY,
            "INF_NEG" => f64::NEG_INFINITY,
            "NAN" => f64::NAN,
            _ => v.unwrap_or(f64::NAN),
        };
        out.entry(r.get::<_, i32>(0) as i64)
            .or_default()
            .push((r.get::<_, i32>(1).max(0) as u64, v));
    }
    Ok(out)
}

/// This connection's prepared statements, by their SQL: the statements of the claim, which
/// every process runs under the study's lock, are parsed and planned once per connection
/// instead of once per call (a call then costs one round trip, not two). Cleared when the
/// connection is made again: statements live in the server's session.
#[derive(Default)]
struct Stmts(std::cell::RefCell<HashMap<&'static str, tokio_postgres::Statement>>);

impl Stmts {
    fn get(&self, c: &impl Sql, sql: &'static str) -> PgResult<tokio_postgres::Statement> {
        if let Some(s) = self.0.borrow().get(sql) {
            return Ok(s.clone());
        }
        let s = c.prepare(sql)?;
        self.0.borrow_mut().insert(sql, s.clone());
        Ok(s)
    }

    fn clear(&self) {
        self.0.borrow_mut().clear();
    }
}

const LOCK_STUDY: &str = "SELECT pg_advisory_xact_lock($1, $2)";
/// Each trial's id, whether it is pending, and whether a finished trial of it may have changed
/// since it was read: discarded, or promoted (a paused trial, pruned, that became an earlier
/// attempt of its re-run: failed, interrupted, with the step it was paused at).
const TRIAL_STATES: &str = "SELECT t.trial_id, t.state IN ('RUNNING', 'WAITING'),
        COALESCE(x.discarded, 0) <> 0 OR (t.state = 'FAIL' AND x.pruned_step IS NOT NULL)
     FROM trials t LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
     WHERE t.study_id = $1 ORDER BY t.number";
const FIRST_QUEUED: &str =
    "SELECT trial_id, number FROM trials WHERE study_id = $1 AND state = 'WAITING'
     ORDER BY number LIMIT 1 FOR UPDATE SKIP LOCKED";
const START_QUEUED: &str = "UPDATE trials SET state = 'RUNNING',
     datetime_start = (clock_timestamp() AT TIME ZONE 'UTC') WHERE trial_id = $1";
/// A new trial of the study with the next number, queued or running (the caller holds the
/// study's lock).
const NEW_TRIAL: &str = "INSERT INTO trials (number, study_id, state, datetime_start) VALUES (
     (SELECT COALESCE(MAX(number), -1) + 1 FROM trials WHERE study_id = $1), $1, $2::text::trialstate,
     CASE WHEN $2 = 'RUNNING' THEN (clock_timestamp() AT TIME ZONE 'UTC') END)
     RETURNING trial_id, number";
/// A trial's params in one statement: names, internal values and distributions as arrays.
const PUT_PARAMS: &str =
    "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json)
     SELECT $1, n, v, d FROM UNNEST($2::text[], $3::float8[], $4::text[]) AS p (n, v, d)
     ON CONFLICT (trial_id, param_name) DO UPDATE SET param_value = excluded.param_value,
        distribution_json = excluded.distribution_json";
/// Where a claimed trial runs, and its first heartbeat, in one statement.
const PLACE: &str = "WITH placed AS (
         INSERT INTO tune_trials (trial_id, worker_id, slot, device) VALUES ($1, $2, $3, $4)
         ON CONFLICT (trial_id) DO UPDATE SET worker_id = excluded.worker_id,
            slot = excluded.slot, device = excluded.device)
     INSERT INTO trial_heartbeats (trial_id, heartbeat)
     VALUES ($1, (clock_timestamp() AT TIME ZONE 'UTC'))
     ON CONFLICT (trial_id) DO UPDATE SET heartbeat = excluded.heartbeat";

const RUNNING_SHARED: &str =
    "SELECT 1 FROM trials WHERE trial_id = $1 AND state = 'RUNNING' FOR SHARE";
const PUT_REPORT: &str =
    "INSERT INTO tune_reports (trial_id, seq, step, is_final, metrics_json, reported_at)
     VALUES ($1, $2, $3, $4, $5, (clock_timestamp() AT TIME ZONE 'UTC'))
     ON CONFLICT (trial_id, seq) DO NOTHING";
const PUT_INTERMEDIATE: &str = "INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, intermediate_value_type)
     VALUES ($1, $2, $3, $4::text::trialintermediatevaluetype)
     ON CONFLICT (trial_id, step) DO UPDATE SET intermediate_value = excluded.intermediate_value,
        intermediate_value_type = excluded.intermediate_value_type";
const RUNNING_FOR_UPDATE: &str =
    "SELECT study_id, number FROM trials WHERE trial_id = $1 AND state = 'RUNNING' FOR UPDATE";
/// A trial's end: its state and time, and no more heartbeat, in one statement.
const END_TRIAL: &str = "WITH beat AS (DELETE FROM trial_heartbeats WHERE trial_id = $2)
     UPDATE trials SET state = $1::text::trialstate,
        datetime_complete = (clock_timestamp() AT TIME ZONE 'UTC') WHERE trial_id = $2";
const PUT_VALUE: &str = "INSERT INTO trial_values (trial_id, objective, value, value_type)
     VALUES ($1, 0, $2, $3::text::trialvaluetype)
     ON CONFLICT (trial_id, objective) DO UPDATE SET value = excluded.value,
        value_type = excluded.value_type";
/// A further objective's value (objective `$2`) of a complete multi-objective trial.
const PUT_VALUE_AT: &str = "INSERT INTO trial_values (trial_id, objective, value, value_type)
     VALUES ($1, $2, $3, $4::text::trialvaluetype)
     ON CONFLICT (trial_id, objective) DO UPDATE SET value = excluded.value,
        value_type = excluded.value_type";
const PUT_ENDING: &str =
    "INSERT INTO tune_trials (trial_id, error, log_tail, logs_json, pruned_step, interrupted,
        gpu_peak_mem_mb, gpu_mem_scope, gpu_mean_sm_pct, gpu_mean_mem_bw_pct, gpu_samples)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
     ON CONFLICT (trial_id) DO UPDATE SET error = excluded.error, log_tail = excluded.log_tail,
        logs_json = excluded.logs_json, pruned_step = excluded.pruned_step,
        interrupted = excluded.interrupted, gpu_peak_mem_mb = excluded.gpu_peak_mem_mb,
        gpu_mem_scope = excluded.gpu_mem_scope, gpu_mean_sm_pct = excluded.gpu_mean_sm_pct,
        gpu_mean_mem_bw_pct = excluded.gpu_mean_mem_bw_pct, gpu_samples = excluded.gpu_samples";

/// What this process has read of one study (in one space) for its proposals. A trial's params
/// never change once stored and a finished trial never changes again (but for `tune discard`'s
/// mark and a paused trial's promotion, read with the states: when the set of discarded and
/// promoted trials changes, the cache starts over), so a proposal reads the
/// trials' ids and states, and in full only the trials that are new or finished since the last
/// proposal: the work under the study's lock stays small as the study grows and as more
/// processes run trials, which is what every process waits on.
#[derive(Default)]
struct HistoryCache {
    study: i64,
    space: Option<Space>,
    /// Each trial's params (filtered to the space), by trial id.
    params: HashMap<i32, Params>,
    /// Every finished trial read so far, those the samplers leave out (interrupted) too.
    known: std::collections::HashSet<i32>,
    finished: BTreeMap<TrialNumber, FinishedTrial>,
    /// The ids of the study's discarded and promoted trials when the cache was filled.
    discarded: Vec<i32>,
}

fn history(
    c: &impl Sql,
    study: i64,
    space: &Space,
    cache: &std::cell::RefCell<HistoryCache>,
    stmts: &Stmts,
    // The trial being proposed for right now (it has no params yet).
    proposing: Option<i32>,
) -> PgResult<History> {
    let mut cache = cache.borrow_mut();
    if cache.study != study || cache.space.as_ref() != Some(space) {
        *cache = HistoryCache {
            study,
            space: Some(space.clone()),
            ..HistoryCache::default()
        };
    }
    let rows = c.query(&stmts.get(c, TRIAL_STATES)?, &[&id32(study)])?;
    let discarded: Vec<i32> = rows
        .iter()
        .filter(|r| r.get::<_, bool>(2))
        .map(|r| r.get(0))
        .collect();
    if discarded != cache.discarded {
        *cache = HistoryCache {
            study,
            space: Some(space.clone()),
            discarded,
            ..HistoryCache::default()
        };
    }
    let states: Vec<(i32, bool)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .filter(|(id, _)| Some(*id) != proposing)
        .collect();
    let unread: Vec<i32> = states
        .iter()
        .filter(|(id, pending)| {
            if *pending {
                !cache.params.contains_key(id)
            } else {
                !cache.known.contains(id)
            }
        })
        .map(|(id, _)| *id)
        .collect();
    if !unread.is_empty() {
        // Read whole; a trial that finished between the two queries is read as finished.
        let trials = query_trials_where(c, Some(study), None, None, Some(&unread))?;
        let done: Vec<i32> = trials
            .iter()
            .filter(|t| !matches!(t.status, TrialStatus::Queued | TrialStatus::Running { .. }))
            .map(|t| id32(t.id.0))
            .collect();
        let mut curves = curves(c, study, &done)?;
        let h = super::history_of(
            trials.iter().filter(|t| done.contains(&id32(t.id.0))),
            space,
            |id| curves.remove(&id.0).unwrap_or_default(),
        );
        for t in &trials {
            let in_space: Params = t
                .params
                .iter()
                .filter(|(k, _)| space.get(k).is_some())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            // A trial's params are stored with it, except the one this transaction is
            // proposing for right now: never remember it without them.
            if !in_space.is_empty() {
                cache.params.insert(id32(t.id.0), in_space);
            }
        }
        cache.known.extend(done);
        for f in h.finished {
            cache.finished.insert(f.number, f);
        }
    }
    let pending = states
        .iter()
        .filter(|(id, pending)| *pending && !cache.known.contains(id))
        .filter_map(|(id, _)| cache.params.get(id))
        .filter(|p| !p.is_empty())
        .cloned()
        .collect();
    Ok(History {
        finished: cache.finished.values().cloned().collect(),
        pending,
    })
}

fn insert_trial(c: &impl Sql, st: &Stmts, study: i32, state: &str) -> PgResult<(i32, i32)> {
    let r = c.query_one(&st.get(c, NEW_TRIAL)?, &[&study, &state])?;
    Ok((r.get(0), r.get(1)))
}

/// A trial's params (those of `space` it has), in one statement.
fn insert_params(
    c: &impl Sql,
    st: &Stmts,
    trial_id: i32,
    space: &Space,
    params: &Params,
) -> PgResult<()> {
    let (mut names, mut values, mut dists) = (Vec::new(), Vec::new(), Vec::new());
    for p in space.params() {
        if let Some(v) = params.get(&p.name) {
            names.push(p.name.clone());
            values.push(p.to_internal(v));
            dists.push(p.optuna_distribution_json().to_string());
        }
    }
    c.execute(
        &st.get(c, PUT_PARAMS)?,
        &[&trial_id, &names, &values, &dists],
    )?;
    Ok(())
}

/// Queues the params of interrupted trial `trial_id` (number `number`) again; returns the
/// re-run's number.
fn requeue(c: &impl Sql, st: &Stmts, study: i32, trial_id: i32, number: i32) -> PgResult<i32> {
    let (new_id, new_number) = insert_trial(c, st, study, TrialState::Queued.optuna())?;
    c.execute(
        "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json)
         SELECT $1, param_name, param_value, distribution_json FROM trial_params WHERE trial_id = $2",
        &[&new_id, &trial_id],
    )?;
    c.execute(
        "INSERT INTO tune_trials (trial_id, retry_of) VALUES ($1, $2)",
        &[&new_id, &(number as i64)],
    )?;
    Ok(new_number)
}

fn lock_study(c: &impl Sql, st: &Stmts, study: i32) -> PgResult<()> {
    c.execute(&st.get(c, LOCK_STUDY)?, &[&LOCK_CLASS, &study])?;
    Ok(())
}

/// What a claim found, inside its transaction: the trial's id and number.
enum Claim {
    Queued(i32, i32),
    New(i32, i32),
    Full,
}

impl Storage for PostgresStorage {
    fn location(&self) -> String {
        self.url.to_string()
    }

    fn find_study(&self, name: &str) -> Result<Option<StudyRow>, StorageError> {
        // Reads through a shared reference cannot reconnect; they report the fault instead,
        // and the next write (which can) reconnects.
        self.run(|c| find_study(c, name))
    }

    fn create_or_load_study(&mut self, new: &NewStudy<'_>) -> Result<StudyRow, StorageError> {
        if let Some(s) = self.run(|c| find_study(c, new.name))? {
            return super::check_same(&self.location(), s, new);
        }
        let dir = direction_text(new.direction);
        let file = new.file.map(|p| p.display().to_string());
        let source: Option<String> = new
            .source
            .map(|s| super::text::study_file_for_storage(s).into_owned());
        self.run(|c| {
            let tx = c.transaction()?;
            // Serialises creators of the same name: the second finds the first's study.
            tx.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                &[&LOCK_CLASS, &new.name],
            )?;
            if find_study(&tx, new.name)?.is_none() {
                let id: i32 = tx.query_one(
                    "INSERT INTO studies (study_name) VALUES ($1) RETURNING study_id",
                    &[&new.name],
                )?
                .get(0);
                tx.execute(
                    "INSERT INTO study_directions (direction, study_id, objective)
                     VALUES ($1::text::studydirection, $2, 0)",
                    &[&dir, &id],
                )?;
                for (i, o) in new.others.iter().enumerate() {
                    tx.execute(
                        "INSERT INTO study_directions (direction, study_id, objective)
                         VALUES ($1::text::studydirection, $2, $3)",
                        &[&direction_text(o.direction), &id, &(i as i32 + 1)],
                    )?;
                }
                tx.execute(
                    r#"INSERT INTO study_system_attributes (study_id, "key", value_json)
                       VALUES ($1, $2, $3)"#,
                    &[
                        &id,
                        &super::METRIC_NAMES_KEY,
                        &super::metric_names_json(new.metric, new.others),
                    ],
                )?;
                tx.execute(
                    &format!(
                        "INSERT INTO tune_studies (study_id, metric, study_file, config_toml, created_at)
                         VALUES ($1, $2, $3, $4, {NOW})"
                    ),
                    &[&id, &new.metric, &file, &source],
                )?;
            }
            tx.commit()
        })?;
        let s = self
            .run(|c| find_study(c, new.name))?
            .ok_or_else(|| StorageError::NoStudy {
                path: PathBuf::from(self.location()),
                name: new.name.to_string(),
            })?;
        super::check_same(&self.location(), s, new)
    }

    fn list_studies(&self) -> Result<Vec<StudySummary>, StorageError> {
        let rows = self.run(|c| c.query(sql::LIST_STUDIES, &[]))?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let study = StudyRow {
                id: r.get::<_, i32>(0) as i64,
                name: r.get(1),
                direction: direction_of(r.get::<_, Option<&str>>(2)),
                metric: r.get(3),
                others: Vec::new(),
            };
            let mut counts: StudyCounts = [None; 6];
            for (i, c) in counts.iter_mut().enumerate() {
                *c = r.get::<_, Option<i64>>(4 + i);
            }
            let mut s = StudySummary::of_row(&study, counts);
            if let Some((n, v)) = self.best(&study)? {
                s.best_trial = Some(n);
                s.best_value = Some(v);
            }
            out.push(s);
        }
        Ok(out)
    }

    fn register_worker(
        &mut self,
        study: &StudyRow,
        devices: &[String],
    ) -> Result<WorkerId, StorageError> {
        let host = hostname();
        let pid = std::process::id() as i64;
        let devices = serde_json::to_string(devices).unwrap_or_else(|_| "[]".into());
        let sid = id32(study.id);
        let id = self.run(|c| {
            let tx = c.transaction()?;
            let id: i64 = tx.query_one(
                &format!(
                    "INSERT INTO tune_workers (study_id, host, pid, started_at, heartbeat, devices_json)
                     VALUES ($1, $2, $3, {NOW}, {NOW}, $4) RETURNING worker_id"
                ),
                &[&sid, &host, &pid, &devices],
            )?
            .get(0);
            tx.commit()?;
            Ok(id)
        })?;
        Ok(WorkerId(id))
    }

    fn heartbeat(&mut self, worker: WorkerId, trials: &[TrialId]) -> Result<(), StorageError> {
        let ids: Vec<i32> = trials.iter().map(|t| id32(t.0)).collect();
        self.run(|c| {
            let tx = c.transaction()?;
            tx.execute(
                &format!("UPDATE tune_workers SET heartbeat = {NOW} WHERE worker_id = $1"),
                &[&worker.0],
            )?;
            // Only trials still running: a trial already declared interrupted stays so.
            tx.execute(
                &format!(
                    "INSERT INTO trial_heartbeats (trial_id, heartbeat)
                     SELECT trial_id, {NOW} FROM trials WHERE trial_id = ANY($1) AND state = 'RUNNING'
                     ON CONFLICT (trial_id) DO UPDATE SET heartbeat = excluded.heartbeat"
                ),
                &[&ids],
            )?;
            tx.commit()
        })
    }

    fn recover_interrupted(
        &mut self,
        study: &StudyRow,
        grace: Duration,
    ) -> Result<Vec<TrialNumber>, StorageError> {
        let sid = id32(study.id);
        let grace_s = grace.as_secs_f64();
        self.run(|c| {
            // Candidates first, without a lock: most heartbeats find none.
            let rows = c.query(
                &format!(
                    "SELECT t.trial_id, w.host, w.pid,
                        COALESCE(h.heartbeat, w.heartbeat, t.datetime_start) < {NOW} - make_interval(secs => $2)
                     FROM trials t
                     LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
                     LEFT JOIN tune_workers w ON w.worker_id = x.worker_id
                     LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id
                     WHERE t.study_id = $1 AND t.state = 'RUNNING'"
                ),
                &[&sid, &grace_s],
            )?;
            let gone: Vec<(i32, Gone)> = rows
                .iter()
                .filter_map(|r| {
                    let host: Option<String> = r.get(1);
                    let stale: Option<bool> = r.get(3);
                    let gone = Gone::of(host.as_deref(), r.get(2), stale.unwrap_or(true))?;
                    Some((r.get(0), gone))
                })
                .collect();
            if gone.is_empty() {
                return Ok(Vec::new());
            }
            let tx = c.transaction()?;
            lock_study(&tx, &self.stmts, sid)?;
            let mut out = Vec::new();
            for &(id, gone) in &gone {
                // Still running? Another process may have recovered it meanwhile, or its
                // owner finished it.
                let Some(r) = tx.query_opt(
                    "SELECT number FROM trials WHERE trial_id = $1 AND state = 'RUNNING' FOR UPDATE",
                    &[&id],
                )?
                else {
                    continue;
                };
                let number: i32 = r.get(0);
                tx.execute(
                    &format!(
                        "UPDATE trials SET state = 'FAIL', datetime_complete = {NOW} WHERE trial_id = $1"
                    ),
                    &[&id],
                )?;
                tx.execute("DELETE FROM trial_heartbeats WHERE trial_id = $1", &[&id])?;
                tx.execute(
                    "INSERT INTO tune_trials (trial_id, error, interrupted) VALUES ($1, $2, 1)
                     ON CONFLICT (trial_id) DO UPDATE SET error = excluded.error, interrupted = 1",
                    &[&id, &gone.reason(grace)],
                )?;
                requeue(&tx, &self.stmts, sid, id, number)?;
                out.push(TrialNumber(number as u64));
            }
            tx.commit()?;
            Ok(out)
        })
    }

    fn claim(
        &mut self,
        study: &StudyRow,
        req: &ClaimRequest<'_>,
        propose: &mut Propose<'_>,
    ) -> Result<Option<Trial>, StorageError> {
        let sid = id32(study.id);
        let worker = req.worker.0;
        let slot = req.slot as i32;
        let device = req.device.to_string();
        let budget = req.budget;
        let space = req.space;
        let claimed = self.run(|c| {
            let st = &self.stmts;
            let tx = c.transaction()?;
            // The trials finished since this process last proposed are read before the lock,
            // so that under it only what changed meanwhile is left to read.
            history(&tx, study.id, space, &self.history, st, None)?;
            lock_study(&tx, st, sid)?;
            let taken: i64 = tx.query_one(&st.get(&tx, sql::TAKEN)?, &[&sid])?.get(0);
            if budget.is_some_and(|b| taken as u64 >= b) {
                tx.commit()?;
                return Ok(Claim::Full);
            }
            let queued = tx.query_opt(&st.get(&tx, FIRST_QUEUED)?, &[&sid])?;
            let claim = if let Some(r) = queued {
                let (id, number): (i32, i32) = (r.get(0), r.get(1));
                tx.execute(&st.get(&tx, START_QUEUED)?, &[&id])?;
                Claim::Queued(id, number)
            } else {
                let (id, number) = insert_trial(&tx, st, sid, TrialState::Running.optuna())?;
                // The proposal happens inside the transaction, under the study's lock: a
                // second process asking now waits, then sees this trial as pending.
                let h = history(&tx, study.id, space, &self.history, st, Some(id))?;
                let params = propose(&h, TrialNumber(number as u64));
                insert_params(&tx, st, id, space, &params)?;
                Claim::New(id, number)
            };
            let id = match claim {
                Claim::Queued(id, _) | Claim::New(id, _) => id,
                Claim::Full => unreachable!("returned above"),
            };
            tx.execute(&st.get(&tx, PLACE)?, &[&id, &worker, &slot, &device])?;
            tx.commit()?;
            Ok(claim)
        })?;
        let number = match claimed {
            Claim::Full => return Ok(None),
            Claim::Queued(_, number) | Claim::New(_, number) => number,
        };
        let trial = self
            .run(|c| query_trials(c, study.id, None, Some(number as u64)))?
            .into_iter()
            .next();
        trial.map(Some).ok_or_else(|| StorageError::Conflict {
            path: PathBuf::from(self.location()),
            message: format!("claimed trial {number} vanished"),
        })
    }

    fn set_trial_dir(&mut self, trial: TrialId, dir: &Path) -> Result<(), StorageError> {
        let d = dir.display().to_string();
        let id = id32(trial.0);
        self.run(|c| {
            c.execute(
                "UPDATE tune_trials SET trial_dir = $1 WHERE trial_id = $2",
                &[&d, &id],
            )?;
            Ok(())
        })
    }

    fn set_checkpoint_step(&mut self, trial: TrialId, step: u64) -> Result<(), StorageError> {
        let id = id32(trial.0);
        let v = step.to_string();
        self.run(|c| {
            c.execute(
                "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES ($1, $2, $3)
                 ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json",
                &[&id, &super::CHECKPOINT_STEP_KEY, &v],
            )?;
            Ok(())
        })
    }

    fn checkpoint_step(&self, trial: TrialId) -> Result<Option<u64>, StorageError> {
        let row = self.run(|c| {
            c.query_opt(
                "SELECT value_json FROM trial_system_attributes WHERE trial_id = $1 AND key = $2",
                &[&id32(trial.0), &super::CHECKPOINT_STEP_KEY],
            )
        })?;
        Ok(row
            .and_then(|r| r.get::<_, Option<String>>(0))
            .and_then(|v| v.trim().parse().ok()))
    }

    fn enqueue(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
    ) -> Result<TrialNumber, StorageError> {
        let json = serde_json::to_string(params).unwrap_or_else(|_| "{}".into());
        self.queue(study, space, params, "fixed_params", &json)
    }

    fn enqueue_child(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
        parent: super::Parent,
    ) -> Result<TrialNumber, StorageError> {
        self.queue(study, space, params, super::PARENT_KEY, &parent.json())
    }

    fn set_parent(&mut self, trial: TrialId, parent: super::Parent) -> Result<(), StorageError> {
        let (id, json) = (id32(trial.0), parent.json());
        self.run(|c| {
            c.execute(
                "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES ($1, $2, $3)
                 ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json",
                &[&id, &super::PARENT_KEY, &json],
            )?;
            Ok(())
        })
    }

    fn lineage(&self, study: &StudyRow) -> Result<Vec<super::Lineage>, StorageError> {
        let rows = self.run(|c| {
            c.query(
                "SELECT t.number, a.value_json FROM trial_system_attributes a
                 JOIN trials t ON t.trial_id = a.trial_id
                 WHERE t.study_id = $1 AND a.key = $2 ORDER BY t.number",
                &[&id32(study.id), &super::PARENT_KEY],
            )
        })?;
        Ok(super::Lineage::of_rows(
            rows.iter()
                .map(|r| (i64::from(r.get::<_, i32>(0)), r.get::<_, String>(1)))
                .collect(),
        ))
    }

    fn has_fixed_params(&self, study: &StudyRow, params: &Params) -> Result<bool, StorageError> {
        let json = serde_json::to_string(params).unwrap_or_default();
        let n: i64 = self
            .run(|c| {
                c.query_one(
            "SELECT COUNT(*) FROM trial_system_attributes a JOIN trials t ON t.trial_id = a.trial_id
             WHERE t.study_id = $1 AND a.key = 'fixed_params' AND a.value_json = $2",
            &[&id32(study.id), &json],
        )
            })?
            .get(0);
        Ok(n > 0)
    }

    fn add_report(
        &mut self,
        trial: TrialId,
        seq: u64,
        report: &Report,
        is_final: bool,
        metric: &str,
    ) -> Result<(), StorageError> {
        let report = super::text::storable_report(report);
        let json = serde_json::to_string(&report.metrics).unwrap_or_else(|_| "{}".into());
        let id = id32(trial.0);
        let objective = (!is_final)
            .then(|| report.metrics.get(metric).copied())
            .flatten();
        let step = i64::try_from(report.step).unwrap_or(i64::MAX);
        let fenced = self.run(|c| {
            let tx = c.transaction()?;
            // Only a running trial takes reports: one declared interrupted belongs to its rerun.
            let st = &self.stmts;
            if tx
                .query_opt(&st.get(&tx, RUNNING_SHARED)?, &[&id])?
                .is_none()
            {
                tx.rollback()?;
                return Ok(true);
            }
            tx.execute(
                &st.get(&tx, PUT_REPORT)?,
                &[&id, &(seq as i64), &step, &i32::from(is_final), &json],
            )?;
            if let Some(v) = objective {
                let step32 = i32::try_from(step).unwrap_or(i32::MAX);
                tx.execute(
                    &st.get(&tx, PUT_INTERMEDIATE)?,
                    &[&id, &step32, &v.is_finite().then_some(v), &value_type(v)],
                )?;
            }
            tx.commit()?;
            Ok(false)
        })?;
        if fenced {
            return Err(self.fenced(trial));
        }
        Ok(())
    }

    fn finish_trial(
        &mut self,
        trial: TrialId,
        status: &TrialStatus,
        logs: &[PathBuf],
    ) -> Result<(), StorageError> {
        let id = id32(trial.0);
        let status = &*super::text::storable_status(status);
        let crate::storage::EndColumns {
            logs_json: logs,
            error,
            log_tail,
            pruned_step,
            interrupted,
            requeue: queue_again,
            gpu,
        } = crate::storage::end_columns(status, logs);
        let finite = |v: f64| v.is_finite().then_some(v);
        let gpu_cols = (
            gpu.and_then(|g| finite(g.peak_mem_mb)),
            gpu.map(|g| g.mem_scope.as_str()),
            gpu.and_then(|g| finite(g.mean_sm_pct)),
            gpu.and_then(|g| finite(g.mean_mem_bw_pct)),
            gpu.map(|g| i32::try_from(g.samples).unwrap_or(i32::MAX)),
        );
        let state = status.state().optuna();
        let value = status.value();
        let fenced = self.run(|c| {
            let tx = c.transaction()?;
            // Fencing: only a trial that is still running may end. One that another process
            // declared interrupted (its worker was cut off) has a rerun; a late result from
            // the first run must neither overwrite it nor count twice.
            let st = &self.stmts;
            let Some(r) = tx.query_opt(&st.get(&tx, RUNNING_FOR_UPDATE)?, &[&id])? else {
                tx.rollback()?;
                return Ok(true);
            };
            let (sid, number): (i32, i32) = (r.get(0), r.get(1));
            tx.execute(&st.get(&tx, END_TRIAL)?, &[&state, &id])?;
            if let Some(v) = value
                && (state == "COMPLETE" || state == "PRUNED")
            {
                tx.execute(
                    &st.get(&tx, PUT_VALUE)?,
                    // Optuna's trial_values have no NaN type; a NaN objective is a failure
                    // upstream, and is stored as a finite NULL if it ever gets here.
                    &[&id, &v.is_finite().then_some(v), &value_type_without_nan(v)],
                )?;
            }
            for (i, v) in status.others().iter().enumerate() {
                tx.execute(
                    &st.get(&tx, PUT_VALUE_AT)?,
                    &[
                        &id,
                        &(i as i32 + 1),
                        &v.is_finite().then_some(*v),
                        &value_type_without_nan(*v),
                    ],
                )?;
            }
            tx.execute(
                &st.get(&tx, PUT_ENDING)?,
                &[
                    &id,
                    &error,
                    &log_tail,
                    &logs,
                    &pruned_step,
                    &i32::from(interrupted),
                    &gpu_cols.0,
                    &gpu_cols.1,
                    &gpu_cols.2,
                    &gpu_cols.3,
                    &gpu_cols.4,
                ],
            )?;
            if !queue_again {
                let last = tx.query_opt(&st.get(&tx, sql::LAST_METRICS)?, &[&id])?;
                let last: Option<String> = last.map(|r| r.get(0));
                for (key, json) in super::user_attributes(last.as_deref()) {
                    tx.execute(&st.get(&tx, sql::PUT_USER_ATTR)?, &[&id, &key, &json])?;
                }
            }
            for (key, json) in super::gpu_user_attributes(gpu) {
                tx.execute(&st.get(&tx, sql::PUT_USER_ATTR)?, &[&id, &key, &json])?;
            }
            if queue_again {
                lock_study(&tx, &self.stmts, sid)?;
                requeue(&tx, &self.stmts, sid, id, number)?;
            }
            tx.commit()?;
            Ok(false)
        })?;
        if fenced {
            return Err(self.fenced(trial));
        }
        Ok(())
    }

    fn history(&self, study: &StudyRow, space: &Space) -> Result<History, StorageError> {
        self.run(|c| history(c, study.id, space, &self.history, &self.stmts, None))
    }

    fn reports(
        &self,
        study: &StudyRow,
    ) -> Result<BTreeMap<TrialNumber, Vec<Report>>, StorageError> {
        let rows = self.run(|c| {
            c.query(
                "SELECT t.number, r.step, r.metrics_json FROM tune_reports r JOIN trials t ON t.trial_id = r.trial_id
                 WHERE t.study_id = $1 AND r.is_final = 0 ORDER BY t.number, r.seq",
                &[&id32(study.id)],
            )
        })?;
        let mut out: BTreeMap<TrialNumber, Vec<Report>> = BTreeMap::new();
        for r in rows {
            let json: String = r.get(2);
            out.entry(TrialNumber(r.get::<_, i32>(0) as u64))
                .or_default()
                .push(Report {
                    step: r.get::<_, Option<i64>>(1).unwrap_or(0).max(0) as u64,
                    metrics: super::metrics_from_json(&json),
                });
        }
        Ok(out)
    }

    fn trial_reports(&self, trial: TrialId) -> Result<Vec<StoredReport>, StorageError> {
        let rows = self.run(|c| {
            c.query(
            "SELECT step, metrics_json, is_final, reported_at FROM tune_reports WHERE trial_id = $1 ORDER BY seq",
            &[&id32(trial.0)],
        )
        })?;
        Ok(rows
            .iter()
            .map(|r| StoredReport {
                report: Report {
                    step: r.get::<_, Option<i64>>(0).unwrap_or(0).max(0) as u64,
                    metrics: super::metrics_from_json(r.get(1)),
                },
                is_final: r.get::<_, i32>(2) != 0,
                at: to_system(r.get(3)),
            })
            .collect())
    }

    fn trials(
        &self,
        study: &StudyRow,
        state: Option<TrialState>,
    ) -> Result<Vec<Trial>, StorageError> {
        self.run(|c| query_trials(c, study.id, state, None))
    }

    fn trial(
        &self,
        study: &StudyRow,
        TrialNumber(number): TrialNumber,
    ) -> Result<Option<Trial>, StorageError> {
        Ok(self
            .run(|c| query_trials(c, study.id, None, Some(number)))?
            .into_iter()
            .next())
    }

    fn reruns(&self, study: &StudyRow) -> Result<Vec<(TrialNumber, TrialNumber)>, StorageError> {
        let rows = self.run(|c| c.query(sql::RERUNS, &[&id32(study.id)]))?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let n = u64::try_from(r.get::<_, i32>(0)).ok()?;
                let of = u64::try_from(r.get::<_, Option<i64>>(1)?).ok()?;
                Some((TrialNumber(n), TrialNumber(of)))
            })
            .collect())
    }

    fn promote(
        &mut self,
        study: &StudyRow,
        TrialNumber(number): TrialNumber,
        reason: &str,
    ) -> Result<Option<TrialNumber>, StorageError> {
        let (sid, number) = (id32(study.id), i32::try_from(number).unwrap_or(i32::MAX));
        self.run(|c| {
            let tx = c.transaction()?;
            let st = &self.stmts;
            // Under the study's lock, as every claim: the re-run takes the next number.
            lock_study(&tx, st, sid)?;
            let Some(r) = tx.query_opt(sql::PAUSED_TRIAL, &[&sid, &number])? else {
                tx.rollback()?;
                return Ok(None);
            };
            let trial_id: i32 = r.get(0);
            tx.execute(sql::PROMOTED_STATE, &[&trial_id])?;
            tx.execute(sql::PROMOTED_VALUES, &[&trial_id])?;
            tx.execute(sql::PROMOTED_REASON, &[&reason, &trial_id])?;
            let rerun = requeue(&tx, st, sid, trial_id, number)?;
            tx.commit()?;
            Ok(u64::try_from(rerun).ok().map(TrialNumber))
        })
    }

    fn retry_of(
        &self,
        study: &StudyRow,
        TrialNumber(number): TrialNumber,
    ) -> Result<Option<TrialNumber>, StorageError> {
        let number = i64::try_from(number).unwrap_or(i64::MAX);
        let row = self.run(|c| {
            c.query_opt(
                "SELECT x.retry_of FROM trials t JOIN tune_trials x ON x.trial_id = t.trial_id
                 WHERE t.study_id = $1 AND t.number::bigint = $2",
                &[&id32(study.id), &number],
            )
        })?;
        Ok(row
            .and_then(|r| r.get::<_, Option<i64>>(0))
            .and_then(|n| u64::try_from(n).ok())
            .map(TrialNumber))
    }

    fn counted(&self, study: &StudyRow) -> Result<u64, StorageError> {
        let n: i64 = self
            .run(|c| c.query_one(sql::COUNTED, &[&id32(study.id)]))?
            .get(0);
        Ok(n as u64)
    }

    fn count_state(&self, study: &StudyRow, state: TrialState) -> Result<u64, StorageError> {
        let n: i64 = self
            .run(|c| {
                c.query_one(
                    "SELECT COUNT(*) FROM trials WHERE study_id = $1 AND state::text = $2",
                    &[&id32(study.id), &state.optuna()],
                )
            })?
            .get(0);
        Ok(n as u64)
    }

    fn best(&self, study: &StudyRow) -> Result<Option<(TrialNumber, f64)>, StorageError> {
        let order = match study.direction {
            Direction::Minimize => "ASC",
            Direction::Maximize => "DESC",
        };
        let r = self.run(|c| {
            c.query_opt(
            &format!(
                "SELECT t.number, v.value FROM trials t JOIN trial_values v ON v.trial_id = t.trial_id
                 LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
                 WHERE t.study_id = $1 AND t.state = 'COMPLETE' AND v.value_type = 'FINITE'
                       AND v.value IS NOT NULL AND COALESCE(x.discarded, 0) = 0
                 ORDER BY v.value {order}, t.number ASC LIMIT 1"
            ),
            &[&id32(study.id)],
        )
        })?;
        Ok(r.map(|r| (TrialNumber(r.get::<_, i32>(0) as u64), r.get::<_, f64>(1))))
    }

    fn set_study_file(
        &mut self,
        study: &StudyRow,
        file: &Path,
        text: &str,
    ) -> Result<(), StorageError> {
        let (sid, f) = (id32(study.id), file.display().to_string());
        let text = super::text::study_file_for_storage(text);
        let text: &str = &text;
        self.run(|c| {
            c.execute(
                "UPDATE tune_studies SET study_file = $1, config_toml = $2 WHERE study_id = $3",
                &[&f, &text, &sid],
            )?;
            Ok(())
        })
    }

    fn delete_study(&mut self, study: &StudyRow) -> Result<u64, StorageError> {
        let sid = id32(study.id);
        self.run(|c| {
            let tx = c.transaction()?;
            // Under the study's lock: no process proposes into a study being deleted.
            lock_study(&tx, &self.stmts, sid)?;
            let n: i64 = tx
                .query_one("SELECT COUNT(*) FROM trials WHERE study_id = $1", &[&sid])?
                .get(0);
            for sql in sql::DELETE_STUDY {
                tx.execute(*sql, &[&sid])?;
            }
            tx.commit()?;
            Ok(n as u64)
        })
    }

    fn set_discarded(
        &mut self,
        study: &StudyRow,
        numbers: &[u64],
        discarded: bool,
    ) -> Result<u64, StorageError> {
        let (sid, mark) = (id32(study.id), i32::from(discarded));
        self.run(|c| {
            let tx = c.transaction()?;
            let mut changed = 0;
            for &n in numbers {
                let n = i32::try_from(n).unwrap_or(i32::MAX);
                changed += tx.execute(sql::SET_DISCARDED, &[&mark, &sid, &n])?;
            }
            tx.commit()?;
            Ok(changed)
        })
    }

    fn study_file(&self, study: &StudyRow) -> Result<StoredStudyFile, StorageError> {
        let r = self.run(|c| {
            c.query_opt(
                "SELECT study_file, config_toml FROM tune_studies WHERE study_id = $1",
                &[&id32(study.id)],
            )
        })?;
        Ok(r.map_or(
            StoredStudyFile {
                path: None,
                text: None,
            },
            |r| StoredStudyFile {
                path: r.get(0),
                text: r.get(1),
            },
        ))
    }
}

impl PostgresStorage {
    fn fenced(&self, trial: TrialId) -> StorageError {
        StorageError::Fenced {
            path: PathBuf::from(self.location()),
            trial: trial.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageUrl;
    use crate::storage::fixtures::{params, space};
    use crate::storage::test_server::shared_db;

    fn open(url: &str) -> PostgresStorage {
        let StorageUrl::Postgres(u) = StorageUrl::parse(url, Path::new("/")).expect("url") else {
            panic!("not postgres")
        };
        PostgresStorage::open(&u).expect("opens")
    }

    #[test]
    fn processes_claiming_at_once_get_each_number_once_and_stop_at_the_budget() {
        let Some((_server, url)) = shared_db() else {
            return;
        };
        let budget = 40;
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let url = url.clone();
                std::thread::spawn(move || {
                    // Each thread is a process of its own: its own connection, migrating the
                    // fresh database at the same moment as the others.
                    let mut s = open(&url);
                    let study = s
                        .create_or_load_study(&NewStudy {
                            others: &[],
                            name: "race",
                            direction: Direction::Minimize,
                            metric: "loss",
                            file: None,
                            source: None,
                        })
                        .expect("study");
                    let w = s.register_worker(&study, &["cpu".into()]).expect("worker");
                    let sp = space();
                    let mut got = Vec::new();
                    loop {
                        let req = ClaimRequest {
                            worker: w,
                            budget: Some(budget),
                            slot: i,
                            device: "cpu",
                            space: &sp,
                        };
                        let mut pending_seen = 0;
                        let claimed = s
                            .claim(&study, &req, &mut |h, _| {
                                pending_seen = h.pending.len();
                                params(0.01 * (i + 1) as f64)
                            })
                            .expect("claim");
                        let Some(t) = claimed else { break };
                        got.push(t.number.0);
                        let done = TrialStatus::Complete {
                            others: Vec::new(),
                            value: t.number.0 as f64,
                            ran: Default::default(),
                        };
                        s.finish_trial(t.id, &done, &[]).expect("finish");
                    }
                    got
                })
            })
            .collect();
        let mut all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..budget).collect::<Vec<_>>());
    }

    #[test]
    fn a_database_with_a_newer_schema_is_refused_before_anything_is_written() {
        let Some((_server, url)) = shared_db() else {
            return;
        };
        let s = open(&url);
        s.run(|c| c.execute("UPDATE tune_schema_version SET version = 99", &[]))
            .expect("bump");
        let StorageUrl::Postgres(u) = StorageUrl::parse(&url, Path::new("/")).expect("url") else {
            panic!()
        };
        let e = PostgresStorage::open(&u).err().expect("refused");
        assert!(matches!(e, StorageError::TooNew { found: 99, .. }), "{e}");
        assert!(
            !e.to_string()
                .contains(crate::storage::test_server::PASSWORD)
        );
        let e = PostgresStorage::open_read_only(&u).err().expect("refused");
        assert!(matches!(e, StorageError::TooNew { .. }), "{e}");
    }

    #[test]
    fn a_wrong_password_and_a_missing_database_are_told_apart_without_the_password() {
        let Some((server, _url)) = shared_db() else {
            return;
        };
        let bad = format!(
            "postgresql://postgres:wrong-pw@127.0.0.1:{}/postgres",
            server.port()
        );
        let StorageUrl::Postgres(u) = StorageUrl::parse(&bad, Path::new("/")).expect("url") else {
            panic!()
        };
        let m = PostgresStorage::open(&u)
            .err()
            .expect("refused")
            .to_string();
        assert!(m.contains("password authentication failed"), "{m}");
        assert!(!m.contains("wrong-pw"), "{m}");
        let missing = format!(
            "postgresql://postgres:{}@127.0.0.1:{}/nosuchdb",
            crate::storage::test_server::PASSWORD,
            server.port()
        );
        let StorageUrl::Postgres(u) = StorageUrl::parse(&missing, Path::new("/")).expect("url")
        else {
            panic!()
        };
        let m = PostgresStorage::open(&u)
            .err()
            .expect("refused")
            .to_string();
        assert!(m.contains("database `nosuchdb` does not exist"), "{m}");
        assert!(!m.contains(crate::storage::test_server::PASSWORD), "{m}");
    }

    #[test]
    fn a_restarted_server_is_reconnected_to_and_the_study_goes_on() {
        // A server of its own: restarting the shared one would disturb other tests.
        let Some(server) = crate::storage::test_server::pg_or_skip() else {
            return;
        };
        let url = server.create_db("restart");
        let mut s = open(&url);
        let study = s
            .create_or_load_study(&NewStudy {
                others: &[],
                name: "r",
                direction: Direction::Minimize,
                metric: "loss",
                file: None,
                source: None,
            })
            .expect("study");
        server.restart().expect("restart");
        // The old session is gone; the next call reconnects and succeeds.
        let w = s
            .register_worker(&study, &["cpu".into()])
            .expect("after restart");
        let sp = space();
        let req = ClaimRequest {
            worker: w,
            budget: None,
            slot: 0,
            device: "cpu",
            space: &sp,
        };
        let t = s
            .claim(&study, &req, &mut |_, _| params(0.1))
            .expect("claim")
            .expect("a trial");
        assert_eq!(t.number.0, 0);
        assert_eq!(s.trials(&study, None).expect("read").len(), 1);
    }
}
