//! Runners execute one trial: a user's command (`command`) or the built-in libtorch trainer in
//! a long-lived worker process (`worker`).
//!
//! A runner streams reports as they arrive and ends with a [`RunResult`]; it never decides the
//! trial's state (the scheduler does, from the reports and the end), and a failure of the
//! trial is a value here, never an `Err` that could stop the study.

pub mod command;
pub mod keeper;
pub mod protocol;
pub mod worker;

use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::space::Params;
use crate::trial::{Report, ReportNotes, TrialNumber};

/// The environment variables that carry the study database's location or credentials, which
/// no trial inherits (docs/command-trials.md): a trial reports on standard output and needs no
/// way into the database, and a script that logs its environment must not log a password.
/// `[trial] env` may still set them for a trial that wants them.
pub const DB_CREDENTIALS: &[&str] = &["TUNE_DB", "PGPASSWORD", "PGPASSFILE"];

/// What a runner refuses before a trial, or reads wrong during one. None of these stops a
/// study by itself: a bad report or a worker that will not start fails one trial (its message
/// becomes the reason), and a program or worker that is not ready is refused before any trial.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunnerError {
    /// The command's program or a required file is missing, or `[trial] check` failed.
    #[error("{0}")]
    NotReady(String),
    /// A `tune: {...}` line that is not a report.
    #[error("{0}")]
    BadReport(String),
    /// `tune-worker --capabilities` could not be asked or did not answer.
    #[error("{0}")]
    Capabilities(String),
    /// A `tune-worker` process (or its keeper, or its log) could not be started.
    #[error("{0}")]
    Spawn(String),
}

/// How a process that did not succeed ended, read from its exit status: the one reading of an
/// `ExitStatus` (code, or signal and its name) that each runner words its reason from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It exited with this status code.
    Code(i32),
    /// A signal killed it: its number and name (`SIGKILL`, or `signal N` for one nix does
    /// not know).
    Signal { number: i32, name: String },
    /// Neither a code nor a signal (a stopped process, say).
    Other,
}

impl Exit {
    pub(crate) fn of(status: std::process::ExitStatus) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(number)) => Exit::Signal {
                number,
                name: nix::sys::signal::Signal::try_from(number)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {number}")),
            },
            _ => Exit::Other,
        }
    }
}

/// One trial to run on one slot.
#[derive(Debug, Clone)]
pub struct TrialJob {
    pub number: TrialNumber,
    pub params: Params,
    /// The worker slot (0-based) that runs it; runners that keep a process per slot key on it.
    pub slot: usize,
    /// `cpu` or `cuda:N`: the slot's device, the only one the trial may use.
    pub device: String,
    /// A directory of this trial's own, created before start; logs go there.
    pub trial_dir: PathBuf,
    /// Per-trial wall-clock limit.
    pub timeout: Option<Duration>,
    /// The study seed; with the trial number it seeds everything the trial draws.
    pub seed: u64,
}

/// Why the scheduler asks a running trial to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRequest {
    /// Keep running.
    None,
    /// The pruner decided to stop it (recorded as pruned).
    Prune,
    /// The user stopped it, to be recorded as failed.
    Cancel,
}

/// How a run ended, before the scheduler turns it into a trial state.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// Ran to its end on its own (exit status 0, or the trainer finished its budget).
    Finished,
    /// Failed by its own fault: non-zero exit, signal, timeout, divergence, out of memory.
    Failed {
        reason: String,
        /// The last lines of standard error, where there is one.
        log_tail: Option<String>,
    },
    /// Stopped because of a [`StopRequest`].
    Stopped,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub end: RunEnd,
    /// Log files this run wrote (recorded in the database).
    pub logs: Vec<PathBuf>,
    /// What the output said about its reports besides them (command trials), for the message
    /// of a trial that ends without a value.
    pub notes: Option<ReportNotes>,
}

/// What a runner hands the scheduler while a trial runs.
pub type ReportSender = mpsc::UnboundedSender<Report>;

/// A boxed future of a trial run.
pub type RunFuture = Pin<Box<dyn Future<Output = RunResult> + Send>>;

/// The seam between the scheduler and the ways a trial can run.
pub trait TrialRunner: Send + Sync {
    /// Starts `job`; the future ends when the trial has ended and every report was sent.
    /// `stop` changes from [`StopRequest::None`] when the trial must stop early.
    fn run(
        &self,
        job: TrialJob,
        reports: ReportSender,
        stop: watch::Receiver<StopRequest>,
    ) -> RunFuture;
}
