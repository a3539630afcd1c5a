//! Events: the room between the study (the scheduler in-process, or a database another
//! process writes) and whoever shows it (the live UI, the line printer). What the scheduler
//! tells the outside world, what the outside world may ask of it (steering), the replay of a
//! stored study into the same events (`tune watch`), and the line printer.
//!
//! The UI depends on this module, trials and the space, never on storage or the spec; turning
//! stored rows into events happens here ([`replay`]).

pub mod lines;
pub mod notices;
pub mod replay;

use std::time::{Duration, SystemTime};

pub use crate::pruner::RungSchedule;
pub use crate::sampler::{Exploration, Phase};
use crate::space::Params;
use crate::telemetry::SlotUsage;
use crate::trial::{Direction, Report, Trial, TrialNumber};

/// The slot of a trial whose slot the event source does not know (a replay, for a trial of a
/// worker process it does not count as live; a resumed study's best trial's old reports).
pub const NO_SLOT: usize = usize::MAX;

/// The study as the UI shows it in its header.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyInfo {
    pub name: String,
    pub metric: String,
    pub direction: Direction,
    /// The further objectives of a multi-objective study (empty for one).
    pub others: Vec<crate::trial::Objective>,
    pub sampler: String,
    pub pruner: String,
    /// Where an ASHA or Hyperband pruner judges trials; `None` for other pruners (and a
    /// watched study whose stored file no longer checks).
    pub rungs: Option<RungSchedule>,
    /// When the sampler explores rather than models (the GP's and TPE's rule); `None` for a
    /// sampler that never models, and a watched study whose stored file no longer checks.
    pub exploration: Option<Exploration>,
    /// The trial budget (`trials`), if any.
    pub budget: Option<u64>,
    pub timeout: Option<Duration>,
    /// The device of each worker slot, by slot index.
    pub slots: Vec<String>,
    /// Where the study is stored.
    pub storage: String,
    /// The search space as the study file declares it (log scales, steps, choices), for the
    /// UI's insight views; `None` where the source has no study file that checks (an
    /// ask-tell study, a watched study whose stored file no longer parses): readers then infer
    /// one from the trials (`crate::insight::infer_space`).
    pub space: Option<crate::space::Space>,
}

/// What the line output and the UI say when the sampler is past its initial design and still
/// explores for want of data (pruning or failures have left too few complete trials): `sampler:
/// exploring (Sobol) until 2 trials complete` (and `or 3 report` for the GP, which models a
/// rung of the learning curves before any trial completes), by the sampler's own rule for its
/// ask of trial `next` with `complete` trials complete and `reported` finished trials that
/// reported along the way (complete and pruned ones: a pruned trial was stopped at a report).
/// `None` during the initial design (expected, and said by the study file's docs) and once the
/// model proposes.
pub fn exploring_note(
    rule: &Exploration,
    next: u64,
    complete: usize,
    reported: usize,
) -> Option<String> {
    match rule.phase(next, complete, reported) {
        Phase::TooFewComplete {
            need,
            need_reported,
            ..
        } => Some(format!(
            "sampler: exploring (Sobol) until {need} trial{} complete{}",
            if need == 1 { "" } else { "s" },
            need_reported.map_or(String::new(), |r| format!(" or {r} report"))
        )),
        Phase::InitialDesign { .. } | Phase::Modelling => None,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The study opened; `existing` are its trials already finished (resume).
    StudyStarted {
        info: StudyInfo,
        existing: Vec<Trial>,
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
    /// A running trial reported a checkpoint at `step`; its checkpoint directory holds `bytes`
    /// on this machine now (a file under several names counted once).
    Checkpointed {
        number: TrialNumber,
        step: u64,
        bytes: u64,
    },
    /// A child of population-based training (`[pruner] kind = "pbt"`) continues `parent`'s
    /// training: sent when it starts (and by a replay for every child stored).
    Lineage {
        child: TrialNumber,
        parent: crate::trial::Parent,
    },
    /// A trial ended: the whole trial as stored, its log files among it.
    TrialFinished {
        slot: usize,
        trial: Trial,
        at: SystemTime,
        /// The study's best `(number, value)` as stored once this trial ended, with the
        /// trials of every other process on the study; `None` where the source does not say
        /// (a replay, a test), and readers fall back to the best they saw.
        study_best: Option<(TrialNumber, f64)>,
    },
    /// The GPU of a running trial's slot, sampled (about once a second) while it runs: only
    /// where NVML is there (`crate::telemetry`), for command and builtin trials alike.
    GpuSampled {
        number: TrialNumber,
        slot: usize,
        usage: SlotUsage,
    },
    /// Scheduling of new trials paused or resumed.
    Paused(bool),
    /// The user asked to stop; running trials are finishing (`graceful`) or being stopped.
    Stopping { graceful: bool },
    StudyFinished {
        reason: String,
        /// The best trial of the whole study (number, value) as stored when it ended, counting
        /// the trials of every process that runs it, not only this one's; `None` when no trial
        /// is complete or the source could not read it.
        best: Option<(TrialNumber, f64)>,
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
    /// SIGTERM: the machine is going away. Start no trial; every running one checkpoints, stops
    /// and is recorded as interrupted, so that its next attempt (on any worker, at once)
    /// resumes it.
    Preempt,
}

/// What changes a view of the study besides keys: events, and what only a replay of the
/// database learns.
// Updates travel one at a time through a channel, so boxing the large variant saves nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Event(Event),
    /// A message for the footer (a failed poll, say).
    Notice(String),
}
