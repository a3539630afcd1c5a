//! Events: the room between the study (the scheduler in-process, or a database another
//! process writes) and whoever shows it (the live UI, the line printer). What the scheduler
//! tells the outside world, what the outside world may ask of it (steering), the replay of a
//! stored study into the same events (`tune watch`), and the line printer.
//!
//! The UI depends on this module, trials and the space, never on storage or the spec; turning
//! stored rows into events happens here ([`replay`]).

pub mod lines;
pub mod replay;

use std::time::{Duration, SystemTime};

use crate::space::Params;
use crate::trial::{Direction, Report, TrialNumber, TrialState};

/// The slot of a trial whose slot the event source does not know (a replay, for a trial of a
/// worker process it does not count as live; a resumed study's best trial's old reports).
pub const NO_SLOT: usize = usize::MAX;

/// The study as the UI shows it in its header.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyInfo {
    pub name: String,
    pub metric: String,
    pub direction: Direction,
    pub sampler: String,
    pub pruner: String,
    /// The trial budget (`trials`), if any.
    pub budget: Option<u64>,
    pub timeout: Option<Duration>,
    /// The device of each worker slot, by slot index.
    pub slots: Vec<String>,
    /// Where the study is stored.
    pub storage: String,
}

/// A finished trial as events carry it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialSummary {
    pub number: TrialNumber,
    pub state: TrialState,
    pub value: Option<f64>,
    pub params: Params,
    pub error: Option<String>,
    pub duration: Option<Duration>,
    /// The trial's log files.
    pub logs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The study opened; `existing` are its trials already finished (resume).
    StudyStarted {
        info: StudyInfo,
        existing: Vec<TrialSummary>,
        at: SystemTime,
    },
    TrialStarted {
        number: TrialNumber,
        slot: usize,
        device: String,
        params: Params,
        at: SystemTime,
    },
    TrialReported {
        number: TrialNumber,
        slot: usize,
        report: Report,
    },
    TrialFinished {
        slot: usize,
        trial: TrialSummary,
        at: SystemTime,
    },
    /// Scheduling of new trials paused or resumed.
    Paused(bool),
    /// The user asked to stop; running trials are finishing (`graceful`) or being stopped.
    Stopping {
        graceful: bool,
    },
    StudyFinished {
        reason: String,
        at: SystemTime,
    },
}

/// Steering requests to the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Pause,
    Resume,
    /// Stop one running trial, recorded as pruned (`as_pruned`) or failed.
    StopTrial {
        number: TrialNumber,
        as_pruned: bool,
    },
    /// Stop asking for trials; `graceful` lets running ones finish, otherwise they are stopped.
    Quit {
        graceful: bool,
    },
}

/// What changes a view of the study besides keys: events, and what only a replay of the
/// database learns.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Event(Event),
    /// A trial's log files (events do not carry them).
    Logs(TrialNumber, Vec<String>),
    /// A message for the footer (a failed poll, say).
    Notice(String),
}
