//! Storage of studies, trials and reports, behind one `Storage` trait with three backends.
//!
//! - SQLite (`sqlite`): one file in Optuna's RDB schema (version 12) plus tune's own tables (see
//!   `migrations/`), so Optuna's tools open a tune database unchanged. Several tune processes may
//!   share one file: every write is a `BEGIN IMMEDIATE` transaction under a busy timeout, so
//!   waiting happens where the timeout applies and no "database is locked" reaches the user, and
//!   trial numbers are given out inside such a transaction, exactly once each.
//! - PostgreSQL (`postgres`): the same schema on a server, for workers on many machines sharing
//!   one study; numbers are given out under the study's advisory lock, liveness by heartbeats.
//! - Memory (`memory`): the reference the conformance suite holds the other two to, and the
//!   store of the benchmarks and the pruner testkit.
//!
//! The two database backends mirror each other and import nothing from each other: what both
//! need is here. This file: the trait and the decisions every backend makes alike (the
//! history, a trial's ending, when a running trial's owner is [`Gone`]); `codec`: how a status,
//! a value, a param, a direction and a time are stored, Optuna's spellings included; `sql`: the
//! statements both dialects share, once; `watch` and `copy`: the backend-neutral halves of
//! `tune watch` and `tune copy`. Each backend's folder keeps its I/O (`sqlite/{mod, watch,
//! copy}`, `postgres/{mod, connect, watch, copy, blocking}`).
//!
//! What does not belong here: deciding anything (samplers, pruners, the engine) or turning rows
//! into UI events (`events::replay`).

mod codec;
#[cfg(test)]
mod conformance;
pub mod copy;
pub mod host;
mod memory;
pub(crate) mod postgres;
mod sql;
mod sqlite;
/// An ephemeral PostgreSQL server, for tests and the storage benchmark.
#[cfg(any(test, feature = "fixtures"))]
pub mod test_server;
pub mod text;
pub mod url;
pub mod watch;

pub use memory::MemoryStorage;
pub use postgres::PostgresStorage;
pub use sqlite::SqliteStorage;
pub use url::{PgUrl, StorageUrl, UrlError};

/// Opens the storage at `url` for a run: creates the database (a SQLite file) or the schema
/// (on a server) when they are missing, and brings an older schema up to date.
pub fn open(url: &StorageUrl) -> Result<Box<dyn Storage>, StorageError> {
    Ok(match url {
        StorageUrl::Sqlite(p) => Box::new(SqliteStorage::open(p)?),
        StorageUrl::Postgres(u) => Box::new(PostgresStorage::open(u)?),
    })
}

/// Opens the storage at `url` for reading only; nothing is created or migrated.
pub fn open_read(url: &StorageUrl) -> Result<Box<dyn Storage>, StorageError> {
    Ok(match url {
        StorageUrl::Sqlite(p) => Box::new(SqliteStorage::open_read_only(p)?),
        StorageUrl::Postgres(u) => Box::new(PostgresStorage::open_read_only(u)?),
    })
}

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::space::{Params, Space};
use crate::trial::{
    Direction, FinishedTrial, GpuMemScope, GpuTelemetry, Objective, Report, Trial, TrialId,
    TrialNumber, TrialState, TrialStatus, WorkerId,
};

/// A study as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyRow {
    pub id: i64,
    pub name: String,
    /// The first objective.
    pub direction: Direction,
    pub metric: String,
    /// The further objectives of a multi-objective study (Optuna's `study_directions` rows 1..n,
    /// their names in the study system attribute `study:metric_names`); empty for one.
    pub others: Vec<Objective>,
}

impl StudyRow {
    /// Every objective, in order.
    pub fn objectives(&self) -> Vec<Objective> {
        crate::trial::objectives(&self.metric, self.direction, &self.others)
    }

    pub fn is_multi(&self) -> bool {
        !self.others.is_empty()
    }
}

/// A study to create, or to load when it exists with the same direction and metric.
#[derive(Debug, Clone, Copy)]
pub struct NewStudy<'a> {
    pub name: &'a str,
    pub direction: Direction,
    pub metric: &'a str,
    /// The further objectives (a multi-objective study).
    pub others: &'a [Objective],
    /// The study file and its text, kept with the study so a database says how it was made.
    pub file: Option<&'a Path>,
    pub source: Option<&'a str>,
}

/// A study with its counts, for `tune studies`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StudySummary {
    pub name: String,
    pub direction: Direction,
    pub metric: String,
    pub trials: u64,
    pub queued: u64,
    pub running: u64,
    pub complete: u64,
    pub pruned: u64,
    pub failed: u64,
    pub best_value: Option<f64>,
    pub best_trial: Option<TrialNumber>,
    /// A multi-objective study's further objectives (absent from JSON for one objective).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<Objective>,
    /// A multi-objective study's Pareto front: how many complete trials are on it (`best_value`
    /// and `best_trial` are then the first objective's alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pareto_front: Option<u64>,
}

/// A study's trials counted by state, as [`sql::LIST_STUDIES`] reads them: all, queued,
/// running, complete, pruned, failed (a SUM over no trial is NULL: none).
pub(crate) type StudyCounts = [Option<i64>; 6];

impl StudySummary {
    /// A listed study from one row of [`sql::LIST_STUDIES`], its best still to be filled in.
    pub(crate) fn of_row(study: &StudyRow, counts: StudyCounts) -> StudySummary {
        let n = |i: usize| counts[i].unwrap_or(0).max(0) as u64;
        StudySummary {
            name: study.name.clone(),
            direction: study.direction,
            metric: study.metric.clone(),
            trials: n(0),
            queued: n(1),
            running: n(2),
            complete: n(3),
            pruned: n(4),
            failed: n(5),
            best_value: None,
            best_trial: None,
            others: Vec::new(),
            pareto_front: None,
        }
    }
}

/// What samplers learn from: the finished trials (interrupted ones left out: their reruns
/// stand for them) and the params of the running and queued ones (pending).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub finished: Vec<FinishedTrial>,
    pub pending: Vec<Params>,
}

/// A worker's request for its next trial.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub worker: WorkerId,
    /// The study's trial budget: trials that ended on their own plus running ones.
    pub budget: Option<u64>,
    pub slot: usize,
    pub device: &'a str,
    /// The space the proposer works in (stored params are filtered to it).
    pub space: &'a Space,
}

/// Proposes the params of a new trial from the study's history (the sampler, in the engine).
pub type Propose<'a> = dyn FnMut(&History, TrialNumber) -> Params + 'a;

/// One stored report, with whether it was the final one and when it arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredReport {
    pub report: Report,
    pub is_final: bool,
    pub at: Option<SystemTime>,
}

/// The `trial_system_attributes` key of a trial's last checkpoint step (its value a JSON
/// integer).
pub const CHECKPOINT_STEP_KEY: &str = "tune:checkpoint_step";

/// The `trial_system_attributes` key of the trial a population-based-training child continues
/// from (its value a [`Parent`] as JSON: `{"trial": 3, "step": 40}`).
pub const PARENT_KEY: &str = "tune:parent";

pub use crate::trial::Parent;

/// One child of population-based training and the trial it continues from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lineage {
    pub child: TrialNumber,
    pub parent: Parent,
}

impl Lineage {
    /// Rows of (child number, attribute JSON), damaged ones left out.
    pub(crate) fn of_rows(rows: Vec<(i64, String)>) -> Vec<Lineage> {
        rows.into_iter()
            .filter_map(|(n, json)| {
                Some(Lineage {
                    child: TrialNumber(u64::try_from(n).ok()?),
                    parent: Parent::parse(&json)?,
                })
            })
            .collect()
    }
}

/// The seam between the engine (and the query commands) and a database. Every method is one
/// transaction; several processes, on one machine or several, may share one study, so each
/// write that hands something out (a trial number, a queued trial) hands it out exactly once.
pub trait Storage: Send {
    /// Where the study lives, for messages (a path; a server URL without its password).
    fn location(&self) -> String;

    fn find_study(&self, name: &str) -> Result<Option<StudyRow>, StorageError>;

    /// The study named `name`, or [`StorageError::NoStudy`].
    fn study(&self, name: &str) -> Result<StudyRow, StorageError> {
        self.find_study(name)?.ok_or_else(|| StorageError::NoStudy {
            path: PathBuf::from(self.location()),
            name: name.to_string(),
        })
    }

    /// Creates the study, or loads it when it exists with the same direction and metric
    /// (a different one is a [`StorageError::Conflict`]).
    fn create_or_load_study(&mut self, new: &NewStudy<'_>) -> Result<StudyRow, StorageError>;

    fn list_studies(&self) -> Result<Vec<StudySummary>, StorageError>;

    /// Records a process that runs trials of the study, with the devices of its slots.
    fn register_worker(
        &mut self,
        study: &StudyRow,
        devices: &[String],
    ) -> Result<WorkerId, StorageError>;

    /// Stamps the worker and each of its running trials.
    fn heartbeat(&mut self, worker: WorkerId, trials: &[TrialId]) -> Result<(), StorageError>;

    /// Marks running trials whose owner is gone (no heartbeat for `grace`, or a dead
    /// process on this machine) as failed, interrupted, and queues their params again.
    /// Returns the numbers of the trials it recovered.
    fn recover_interrupted(
        &mut self,
        study: &StudyRow,
        grace: Duration,
    ) -> Result<Vec<TrialNumber>, StorageError>;

    /// Gives the worker its next trial, running: a queued one first, else a new number while
    /// the budget allows, whose params `propose` makes from the history. At most one process
    /// proposes for a study at a time, so two asking at once never propose the same point:
    /// the second sees the first's proposal as pending. `None` when the budget is taken.
    fn claim(
        &mut self,
        study: &StudyRow,
        req: &ClaimRequest<'_>,
        propose: &mut Propose<'_>,
    ) -> Result<Option<Trial>, StorageError>;

    /// Records the directory a running trial logs to.
    fn set_trial_dir(&mut self, trial: TrialId, dir: &Path) -> Result<(), StorageError>;

    /// Records that a running trial saved a checkpoint holding everything up to `step` (the
    /// last one recorded counts): where its next attempt resumes, and which of its reports that
    /// attempt keeps (kept in Optuna's `trial_system_attributes` as [`CHECKPOINT_STEP_KEY`]).
    fn set_checkpoint_step(&mut self, trial: TrialId, step: u64) -> Result<(), StorageError>;

    /// The step of the last checkpoint the trial recorded ([`Storage::set_checkpoint_step`]).
    fn checkpoint_step(&self, trial: TrialId) -> Result<Option<u64>, StorageError>;

    /// Queues a trial with fixed params (`tune enqueue`, `[[enqueue]]`).
    fn enqueue(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
    ) -> Result<TrialNumber, StorageError>;

    /// Queues a child of population-based training: `params` continue from the checkpoint of
    /// trial `parent.trial` (at `parent.step`, as known when it was queued), in one
    /// transaction. Its params are not "fixed" (`[[enqueue]]`'s). Returns its number.
    fn enqueue_child(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
        parent: Parent,
    ) -> Result<TrialNumber, StorageError>;

    /// Records the trial a child continues from again: the step of the parent's checkpoint
    /// it actually started from, known when it starts.
    fn set_parent(&mut self, trial: TrialId, parent: Parent) -> Result<(), StorageError>;

    /// Every child of population-based training in the study, with its parent, by number.
    fn lineage(&self, study: &StudyRow) -> Result<Vec<Lineage>, StorageError>;

    /// Whether `params` were already enqueued in this study (so `[[enqueue]]` entries are
    /// queued once, not on every resume).
    fn has_fixed_params(&self, study: &StudyRow, params: &Params) -> Result<bool, StorageError>;

    /// Stores report number `seq` of a trial: every metric, and Optuna's intermediate value
    /// when it carries the objective `metric` and is not the final report.
    fn add_report(
        &mut self,
        trial: TrialId,
        seq: u64,
        report: &Report,
        is_final: bool,
        metric: &str,
    ) -> Result<(), StorageError>;

    /// Ends a trial with a finished `status` (its `ran` is filled in by storage) and the log
    /// files it wrote. An interrupted trial's params are queued again.
    fn finish_trial(
        &mut self,
        trial: TrialId,
        status: &TrialStatus,
        logs: &[PathBuf],
    ) -> Result<(), StorageError>;

    /// What samplers learn from, with params filtered to `space`.
    fn history(&self, study: &StudyRow, space: &Space) -> Result<History, StorageError>;

    /// Every non-final report of every trial of the study, by trial number (for pruners).
    fn reports(&self, study: &StudyRow)
    -> Result<BTreeMap<TrialNumber, Vec<Report>>, StorageError>;

    /// The reports of one trial, in order.
    fn trial_reports(&self, trial: TrialId) -> Result<Vec<StoredReport>, StorageError>;

    /// The trials of a study in number order, optionally of one state.
    fn trials(
        &self,
        study: &StudyRow,
        state: Option<TrialState>,
    ) -> Result<Vec<Trial>, StorageError>;

    /// One trial by number.
    fn trial(&self, study: &StudyRow, number: TrialNumber) -> Result<Option<Trial>, StorageError>;

    /// Resumes paused trial `number` (pruned with `paused`, see [`TrialStatus::Pruned`]): it
    /// becomes an earlier attempt (failed, interrupted, its reason `reason`) and its params are
    /// queued again as its re-run, which resumes from its checkpoint, in one transaction.
    /// Returns the re-run's number; `None` when the trial is not paused (any more: another
    /// process promoted it first), which changes nothing.
    fn promote(
        &mut self,
        study: &StudyRow,
        number: TrialNumber,
        reason: &str,
    ) -> Result<Option<TrialNumber>, StorageError>;

    /// The number of the interrupted trial whose params trial `number` runs again (the
    /// `retry_of` of an interrupted trial's re-run), `None` for a first run.
    fn retry_of(
        &self,
        study: &StudyRow,
        number: TrialNumber,
    ) -> Result<Option<TrialNumber>, StorageError>;

    /// Every re-run of the study with the trial whose params it runs again (`retry_of`), in
    /// one read: (re-run, earlier attempt).
    fn reruns(&self, study: &StudyRow) -> Result<Vec<(TrialNumber, TrialNumber)>, StorageError>;

    /// Which attempt at its params trial `number` is: its first run's number and the attempt
    /// (1-based), following the chain of re-runs of interrupted trials back to the first.
    fn attempt(&self, study: &StudyRow, number: TrialNumber) -> Result<Attempt, StorageError> {
        let mut first = number;
        let mut attempt = 1u32;
        while let Some(earlier) = self.retry_of(study, first)? {
            // A re-run always has a higher number than the trial it retries; anything else is
            // a damaged chain, which must not loop.
            if earlier >= first {
                break;
            }
            first = earlier;
            attempt = attempt.saturating_add(1);
        }
        Ok(Attempt { first, attempt })
    }

    /// How many trials ended on their own (the budget's count).
    fn counted(&self, study: &StudyRow) -> Result<u64, StorageError>;

    /// The number of trials of the study in `state`.
    fn count_state(&self, study: &StudyRow, state: TrialState) -> Result<u64, StorageError>;

    /// The best complete trial's number and value (finite values only; the lower number
    /// wins a tie).
    fn best(&self, study: &StudyRow) -> Result<Option<(TrialNumber, f64)>, StorageError>;

    /// The study file the study was created from, as stored with it (`tune worker` runs a
    /// study from this alone).
    fn study_file(&self, study: &StudyRow) -> Result<StoredStudyFile, StorageError>;

    /// Stores the study file a study now runs from (its path and text), so that `tune worker`
    /// and readers see the file as it is now: a raised budget, another sampler.
    fn set_study_file(
        &mut self,
        study: &StudyRow,
        file: &Path,
        text: &str,
    ) -> Result<(), StorageError>;

    /// Deletes the study whole (`tune delete`): its trials with their params, values, curves,
    /// reports and attributes, its workers and its file, in one transaction. Returns how many
    /// trials it had.
    fn delete_study(&mut self, study: &StudyRow) -> Result<u64, StorageError>;

    /// Marks the finished trials `numbers` of the study as discarded (`tune discard`), or takes
    /// the mark back (`discarded` false): a discarded trial stays stored and shown, but the
    /// samplers leave it out, the budget does not count it and it is never the best. Trials
    /// that have not finished are left as they are. Returns how many trials it changed.
    fn set_discarded(
        &mut self,
        study: &StudyRow,
        numbers: &[u64],
        discarded: bool,
    ) -> Result<u64, StorageError>;
}

/// What a trial's last report becomes in Optuna's `trial_user_attributes`, where Optuna and
/// optuna-dashboard show what a trial measured beside its objective: each metric as a JSON
/// number. A metric that is not finite is left out (JSON has no NaN; the dashboard's parser
/// would fail on the row).
pub(crate) fn user_attributes(metrics_json: Option<&str>) -> Vec<(String, String)> {
    metrics_json
        .map(metrics_from_json)
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, v)| v.is_finite())
        .filter_map(|(k, v)| Some((k, serde_json::to_string(&v).ok()?)))
        .collect()
}

/// What a trial's GPU telemetry becomes in Optuna's `trial_user_attributes` (the mirror of its
/// `tune_trials.gpu_*` columns, which hold the truth): one attribute per field under
/// [`GpuTelemetry::KEYS`], written after the metrics' attributes, so that a reported metric of
/// the same name is shadowed there (it stays in `tune_reports`). Non-finite numbers are left out,
/// as for metrics.
pub(crate) fn gpu_user_attributes(gpu: Option<&GpuTelemetry>) -> Vec<(String, String)> {
    gpu.map(|g| {
        g.fields()
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
    .unwrap_or_default()
}

/// A trial's GPU telemetry from its `tune_trials.gpu_*` columns (peak, scope, mean SM, mean
/// bandwidth, samples): `None` unless the peak and the sample count are there. A scope this tune
/// does not know reads as `device`, the weaker claim.
pub(crate) fn gpu_of_columns(
    peak_mem_mb: Option<f64>,
    scope: Option<&str>,
    mean_sm_pct: Option<f64>,
    mean_mem_bw_pct: Option<f64>,
    samples: Option<i64>,
) -> Option<GpuTelemetry> {
    Some(GpuTelemetry {
        peak_mem_mb: peak_mem_mb?,
        mem_scope: scope
            .and_then(GpuMemScope::parse)
            .unwrap_or(GpuMemScope::Device),
        mean_sm_pct: mean_sm_pct.unwrap_or(f64::NAN),
        mean_mem_bw_pct: mean_mem_bw_pct.unwrap_or(f64::NAN),
        samples: u32::try_from(samples?.max(0)).unwrap_or(u32::MAX),
    })
}

/// Why a running trial's owner is gone, the decision [`Storage::recover_interrupted`] makes
/// the same way on every backend: its tune process died on this machine, or nothing of it
/// (trial heartbeat, worker heartbeat, start) is newer than the grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// The owner ran here (`host`), and its process (`pid`, not this one) is dead.
    Died { pid: i64 },
    /// No sign of life for longer than the grace.
    Silent,
}

impl Gone {
    /// Whether a running trial of owner (`host`, `pid`) is gone; `stale`: its last sign of
    /// life is older than the grace (or there is none). A dead process here wins: it is the
    /// more precise reason.
    pub(crate) fn of(host: Option<&str>, pid: Option<i64>, stale: bool) -> Option<Gone> {
        let me = std::process::id() as i64;
        match (host, pid) {
            (Some(h), Some(pid))
                if h == host::hostname() && pid != me && !host::process_alive(pid) =>
            {
                Some(Gone::Died { pid })
            }
            _ if stale => Some(Gone::Silent),
            _ => None,
        }
    }

    /// The reason the interrupted trial is stored with, worded the same on every backend.
    pub(crate) fn reason(self, grace: Duration) -> String {
        match self {
            Gone::Died { pid } => {
                format!("interrupted: the tune process (pid {pid}) that ran it died")
            }
            Gone::Silent => format!(
                "interrupted: no heartbeat for more than {}s",
                grace.as_secs()
            ),
        }
    }
}

/// Which attempt at its params a trial is ([`Storage::attempt`]): a trial interrupted (its
/// worker killed, its heartbeat lost, its machine preempted) is run again under a new number;
/// every attempt shares the first run's checkpoint directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// The number of the first run of these params.
    pub first: TrialNumber,
    /// 1 for a first run, n + 1 for the re-run of attempt n.
    pub attempt: u32,
}

/// The study file as `tune_studies` keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredStudyFile {
    pub path: Option<String>,
    pub text: Option<String>,
}

/// What `tune_trials` keeps of a trial's end, the same on every backend: its log paths (as a
/// JSON list), and from its status the error (why it failed, or why it was pruned), the stderr
/// tail, the pruning step, whether it was interrupted and its GPU telemetry.
pub(crate) struct EndColumns<'a> {
    pub logs_json: String,
    pub error: Option<&'a str>,
    pub log_tail: Option<&'a str>,
    pub pruned_step: Option<i64>,
    /// `tune_trials.interrupted`: stopped through no fault of its own. For a failed trial, its
    /// params run again; for a pruned one, it is paused (resumable).
    pub interrupted: bool,
    /// Whether its params are queued again now (a failed, interrupted trial).
    pub requeue: bool,
    /// Its GPU telemetry, where its GPU was sampled (`tune_trials.gpu_*`).
    pub gpu: Option<&'a GpuTelemetry>,
}

pub(crate) fn end_columns<'a>(status: &'a TrialStatus, logs: &[PathBuf]) -> EndColumns<'a> {
    let logs_json = serde_json::to_string(
        &logs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>(),
    )
    .unwrap_or_else(|_| "[]".into());
    let (error, log_tail, pruned_step, interrupted) = match status {
        TrialStatus::Failed {
            reason,
            log_tail,
            interrupted,
            ..
        } => (
            Some(reason.as_str()),
            log_tail.as_deref(),
            None,
            *interrupted,
        ),
        // A pruned trial's reason lives in the same column as a failed one's: why it ended
        // short (tune_trials.error, see docs/database.md).
        TrialStatus::Pruned {
            step,
            reason,
            paused,
            ..
        } => (reason.as_deref(), None, step.map(|s| s as i64), *paused),
        _ => (None, None, None, false),
    };
    EndColumns {
        logs_json,
        error,
        log_tail,
        pruned_step,
        interrupted,
        requeue: status.interrupted(),
        gpu: status.gpu(),
    }
}

/// A report's metrics back from their stored JSON. A non-finite metric is stored as `null`
/// (JSON has no NaN) and reads back as NaN; without this one NaN would lose them all.
pub(crate) fn metrics_from_json(json: &str) -> BTreeMap<String, f64> {
    serde_json::from_str::<BTreeMap<String, Option<f64>>>(json)
        .map(|m| {
            m.into_iter()
                .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
                .collect()
        })
        .unwrap_or_default()
}

/// Builds the samplers' [`History`] from a study's trials; `curve` gives the objective's
/// intermediate values of a trial. The one place that decides what samplers learn from.
pub(crate) fn history_of<'a>(
    trials: impl IntoIterator<Item = &'a Trial>,
    space: &Space,
    mut curve: impl FnMut(TrialId) -> Vec<(u64, f64)>,
) -> History {
    let mut h = History::default();
    // Only the params and the outcome are copied: this runs on every ask.
    let in_space = |t: &Trial| -> Params {
        t.params
            .iter()
            .filter(|(k, _)| space.get(k).is_some())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    for t in trials {
        match t.status {
            _ if t.discarded => {}
            TrialStatus::Queued | TrialStatus::Running { .. } => {
                let params = in_space(t);
                if !params.is_empty() {
                    h.pending.push(params);
                }
            }
            _ => {
                let c = curve(t.id);
                if let Some(outcome) = t.outcome(&c) {
                    h.finished.push(FinishedTrial {
                        others: t.status.others().to_vec(),
                        number: t.number,
                        params: in_space(t),
                        outcome,
                        curve: c,
                        seconds: t.seconds(),
                    });
                }
            }
        }
    }
    h
}

/// `existing` may be loaded for `new` only with the same direction and metric.
pub(crate) fn check_same(
    location: &str,
    existing: StudyRow,
    new: &NewStudy<'_>,
) -> Result<StudyRow, StorageError> {
    let conflict = |stored: String, given: String| StorageError::Differs {
        path: PathBuf::from(location),
        name: existing.name.clone(),
        stored,
        given,
    };
    if existing.direction != new.direction {
        return Err(conflict(
            format!("direction {}", existing.direction.as_str()),
            new.direction.as_str().to_string(),
        ));
    }
    if existing.metric != new.metric {
        return Err(conflict(
            format!("metric `{}`", existing.metric),
            format!("`{}`", new.metric),
        ));
    }
    if existing.others != new.others {
        let list = |first: &str, d: Direction, o: &[Objective]| {
            std::iter::once(format!("{first} ({})", d.as_str()))
                .chain(
                    o.iter()
                        .map(|o| format!("{} ({})", o.metric, o.direction.as_str())),
                )
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(conflict(
            format!(
                "objectives {}",
                list(&existing.metric, existing.direction, &existing.others)
            ),
            list(new.metric, new.direction, new.others),
        ));
    }
    Ok(existing)
}

/// Optuna's study system attribute that names a study's objectives (`Study.metric_names`),
/// which optuna-dashboard shows on its axes.
pub(crate) const METRIC_NAMES_KEY: &str = "study:metric_names";

/// The JSON list of every objective's name, the value of [`METRIC_NAMES_KEY`].
pub(crate) fn metric_names_json(metric: &str, others: &[Objective]) -> String {
    let names: Vec<&str> = std::iter::once(metric)
        .chain(others.iter().map(|o| o.metric.as_str()))
        .collect();
    serde_json::to_string(&names).unwrap_or_default()
}

/// The further objectives from their stored directions and the stored names (objective `i`
/// without a name is called `value{i}`, as a study that Optuna wrote without names).
pub(crate) fn others_of(directions: &[String], names_json: Option<&str>) -> Vec<Objective> {
    let names: Vec<String> = names_json
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default();
    directions
        .iter()
        .enumerate()
        .map(|(i, d)| Objective {
            metric: names
                .get(i + 1)
                .cloned()
                .unwrap_or_else(|| format!("value{}", i + 1)),
            direction: codec::direction_of(Some(d)),
        })
        .collect()
}

/// Puts the further objectives' values (trial id → value per objective 1..n, read from
/// `trial_values`) into the complete trials among `trials`.
pub(crate) fn attach_others(
    trials: &mut [Trial],
    mut values: std::collections::HashMap<i64, Vec<f64>>,
) {
    if values.is_empty() {
        return;
    }
    for t in trials {
        if let TrialStatus::Complete { others, .. } = &mut t.status
            && let Some(v) = values.remove(&t.id.0)
        {
            *others = v;
        }
    }
}

/// A fault of storage. Unlike a failed trial, this stops a study (cleanly).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// SQLite's error is in the message and deliberately not the error's `source()`: the
    /// binary prints an error's whole chain (`{:#}`), which would say it twice ("file is not
    /// a database: file is not a database: Error code 26: …").
    #[error("{path}: {error}")]
    Sqlite {
        path: PathBuf,
        error: rusqlite::Error,
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
    /// The study stored under the name has another direction, metric or objectives than the
    /// study file (`stored`, `given`); nothing was written. The caller names the way out.
    #[error("{path}: study `{name}` is stored with {stored}, but the study file says {given}")]
    Differs {
        path: PathBuf,
        name: String,
        stored: String,
        given: String,
    },
    /// A database server's fault: unreachable, refused, or an error it reported (`fault`
    /// says which). `location` never carries a password.
    #[error("{location}: {message}")]
    Server {
        location: String,
        message: String,
        fault: ServerFault,
    },
    /// The database refused a value a write carried (PostgreSQL's data exceptions, SQLSTATE
    /// class 22, and its size limits, 54000; SQLite's "string or blob too big"): a fault of
    /// that write's data, not of the database, so the engine records the trial without it
    /// rather than stopping the study (see `Engine::finish`).
    #[error("{location}: the database refused a value: {message}")]
    Rejected { location: String, message: String },
    /// A result for a trial that is no longer running: another process declared it
    /// interrupted (its worker was cut off) and queued it again. The result is discarded so
    /// that it neither overwrites the rerun nor counts twice.
    #[error(
        "{path}: trial (id {trial}) was declared interrupted by another process while this one was cut off; its result is discarded"
    )]
    Fenced { path: PathBuf, trial: i64 },
    /// The database file was deleted or replaced while it was open: what is written now would
    /// go to a file nobody can open again, so the study stops instead of pretending.
    #[error("{path}: {message}")]
    Lost { path: PathBuf, message: String },
}

/// How a database server failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerFault {
    /// It cannot be reached, or was lost and did not come back in time: it may come back.
    Unreachable,
    /// It refused us: a wrong or missing password, a database that does not exist, TLS it
    /// does not offer, a role it does not let in. The user's to fix.
    Refused,
    /// An error it reported about what was asked of it, or the client's own failure.
    Failed,
}

/// What kind of fault a [`StorageError`] is, for callers that act on it (the commands pick
/// their exit status by it) rather than on its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageErrorKind {
    /// The database server cannot be reached ([`ServerFault::Unreachable`]).
    Unreachable,
    /// The database server refused us ([`ServerFault::Refused`]).
    Refused,
    /// Another fault a database server reported ([`ServerFault::Failed`]).
    ServerFailed,
    /// The file is not a SQLite database.
    NotADatabase,
    /// The database's schema is newer than this tune.
    NewerSchema,
    /// Migrating the schema failed.
    Migration,
    /// A write that disagrees with what is stored ([`StorageError::Conflict`]).
    Conflict,
    /// No study of that name.
    NoStudy,
    /// The stored study differs from the study file.
    Differs,
    /// The database refused a value a write carried.
    Rejected,
    /// A result for a trial another process declared interrupted.
    Fenced,
    /// The database file was deleted or replaced while open.
    Lost,
    /// Any other fault of SQLite.
    Other,
}

impl StorageError {
    /// The kind of this fault.
    pub fn kind(&self) -> StorageErrorKind {
        match self {
            StorageError::Sqlite { error, .. }
                if error.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) =>
            {
                StorageErrorKind::NotADatabase
            }
            StorageError::Sqlite { .. } => StorageErrorKind::Other,
            StorageError::TooNew { .. } => StorageErrorKind::NewerSchema,
            StorageError::Migration { .. } => StorageErrorKind::Migration,
            StorageError::Conflict { .. } => StorageErrorKind::Conflict,
            StorageError::NoStudy { .. } => StorageErrorKind::NoStudy,
            StorageError::Differs { .. } => StorageErrorKind::Differs,
            StorageError::Server { fault, .. } => match fault {
                ServerFault::Unreachable => StorageErrorKind::Unreachable,
                ServerFault::Refused => StorageErrorKind::Refused,
                ServerFault::Failed => StorageErrorKind::ServerFailed,
            },
            StorageError::Rejected { .. } => StorageErrorKind::Rejected,
            StorageError::Fenced { .. } => StorageErrorKind::Fenced,
            StorageError::Lost { .. } => StorageErrorKind::Lost,
        }
    }
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

/// Fixtures shared by the storage tests of every backend.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::space::{ParamValue, Params, Space};

    pub fn space() -> Space {
        let t: toml::Table = toml::from_str(
            r#"lr = { type = "float", low = 1e-4, high = 1.0, log = true }
               opt = { type = "categorical", choices = ["sgd", "adam"] }
               k = { type = "int", low = 1, high = 8 }"#,
        )
        .expect("valid TOML");
        Space::from_toml(&t).expect("valid space")
    }

    pub fn params(lr: f64) -> Params {
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(lr));
        p.insert("opt".into(), ParamValue::Str("adam".into()));
        p.insert("k".into(), ParamValue::Int(3));
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_gone_when_its_process_here_died_or_it_fell_silent() {
        let here = host::hostname();
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawns true");
        let dead = i64::from(child.id());
        child.wait().expect("true exits");
        let me = std::process::id() as i64;
        assert_eq!(
            Gone::of(Some(&here), Some(dead), false),
            Some(Gone::Died { pid: dead })
        );
        // A dead process is the more precise reason, even when the owner is silent too.
        assert_eq!(
            Gone::of(Some(&here), Some(dead), true),
            Some(Gone::Died { pid: dead })
        );
        assert_eq!(Gone::of(Some(&here), Some(me), false), None);
        assert_eq!(Gone::of(Some("elsewhere"), Some(dead), false), None);
        assert_eq!(
            Gone::of(Some("elsewhere"), Some(dead), true),
            Some(Gone::Silent)
        );
        assert_eq!(Gone::of(None, None, true), Some(Gone::Silent));
    }

    #[test]
    fn the_interrupted_reason_is_worded_once() {
        let grace = Duration::from_secs(30);
        assert_eq!(
            Gone::Died { pid: 42 }.reason(grace),
            "interrupted: the tune process (pid 42) that ran it died"
        );
        assert_eq!(
            Gone::Silent.reason(grace),
            "interrupted: no heartbeat for more than 30s"
        );
    }
}
