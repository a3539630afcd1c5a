//! One trial as the UI knows it ([`TrialRow`]: its status plus what the screen draws
//! besides), the worker slots and the counts by state. The event fold in `fold` keeps them.

use std::time::{Duration, SystemTime};

use super::keys;
use crate::space::Params;
use crate::trial::{Placement, Report, TrialNumber, TrialState, TrialStatus};

/// One trial as the UI knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRow {
    pub number: TrialNumber,
    /// The state the counts file it under: its status's, set with it (through
    /// `UiState::set_state`, which keeps [`Counts`] in step).
    pub state: TrialState,
    /// The trial's lifecycle as the latest event said it: the value and further objectives
    /// of a complete trial, a pruned one's last value, a failed one's error. The rest of the
    /// row is what the UI draws besides.
    pub status: TrialStatus,
    pub params: Params,
    /// The status's error (why it failed, then the last lines of its standard error), put
    /// together once when the status arrives rather than on every frame the trial screen
    /// draws.
    pub error: Option<String>,
    /// Set aside by `tune discard`: still listed, but the budget does not count it and it is
    /// never the best (as storage counts it).
    pub discarded: bool,
    /// The last line of [`error`](Self::error), or a pruned trial's reason, for the table.
    pub why: Option<String>,
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    pub duration: Option<Duration>,
    pub slot: Option<usize>,
    pub device: Option<String>,
    /// The objective's intermediate values by step, in report order.
    pub curve: Vec<(u64, f64)>,
    /// The same values by epoch, for the reports that carry an `epoch`; the charts draw by
    /// epoch when every point has one ([`TrialRow::curve_by_epoch`]).
    pub curve_epochs: Vec<(f64, f64)>,
    /// The latest report, whole.
    pub last: Option<Report>,
    pub n_reports: usize,
    /// Log files, where the source knows them (the database does; events do not yet).
    pub logs: Vec<String>,
    /// Its slot's GPU while it ran (latest sample, mean utilisation, peak memory), where
    /// NVML sampled it: live runs on a machine with an NVIDIA driver only.
    pub gpu: Option<crate::telemetry::SlotUsage>,
    /// The predicted final value and its band (issue 26): a running trial's from its reports
    /// so far, a pruned one's as it stood when pruned (what it would have reached); `None`
    /// before three complete curves, and for a complete trial.
    pub predicted: Option<crate::pruner::prediction::Prediction>,
    /// Population-based training: the trial it continues from, and those continuing from it.
    pub parent: Option<crate::trial::Parent>,
    pub children: Vec<TrialNumber>,
    /// Its last checkpoint's step and what its checkpoint directory held then, in bytes (live
    /// runs only: the scheduler measures it at each checkpoint).
    pub checkpoint: Option<(u64, u64)>,
}

impl TrialRow {
    pub(super) fn new(number: TrialNumber, state: TrialState) -> TrialRow {
        let status = match state {
            TrialState::Running => TrialStatus::Running {
                at: Placement::default(),
                started: None,
            },
            // A finished state comes with its trial, whose status replaces this at once.
            _ => TrialStatus::Queued,
        };
        TrialRow {
            number,
            state,
            status,
            params: Params::new(),
            error: None,
            discarded: false,
            why: None,
            started_at: None,
            finished_at: None,
            duration: None,
            slot: None,
            device: None,
            curve: Vec::new(),
            curve_epochs: Vec::new(),
            predicted: None,
            last: None,
            n_reports: 0,
            logs: Vec::new(),
            gpu: None,
            parent: None,
            children: Vec::new(),
            checkpoint: None,
        }
    }

    /// The final value (complete), or the last reported one (pruned), as the scheduler said.
    pub fn value(&self) -> Option<f64> {
        self.status.value()
    }

    /// A complete trial's values of the further objectives (a multi-objective study).
    pub fn others(&self) -> &[f64] {
        self.status.others()
    }

    /// A metric of the latest report.
    pub fn metric(&self, key: &str) -> Option<f64> {
        self.last.as_ref()?.metrics.get(key).copied()
    }

    /// A finished trial the trial budget leaves out: interrupted (its params run again) or
    /// discarded; the same rule as storage's `counted`.
    pub fn uncounted(&self) -> bool {
        self.state.is_finished() && (self.status.interrupted() || self.discarded)
    }

    /// The latest objective value reported, for running trials.
    pub fn latest(&self) -> Option<f64> {
        self.curve.last().map(|&(_, v)| v)
    }

    /// The objective by epoch, when every report that gave it also said its epoch (a curve
    /// half by epoch and half by step would draw two scales on one axis).
    pub fn curve_by_epoch(&self) -> Option<&[(f64, f64)]> {
        (!self.curve.is_empty() && self.curve_epochs.len() == self.curve.len())
            .then_some(self.curve_epochs.as_slice())
    }

    /// Progress as (done, total, unit): epochs where the trial reports `epoch` and
    /// `total_epochs` (`"ep"`), else steps against a reported total (`"step"`), else the
    /// fraction a `progress` key gives (`"%"`, out of 1). `None` when nothing says how far the
    /// trial goes.
    pub fn progress(&self) -> Option<(f64, f64, &'static str)> {
        let last = self.last.as_ref()?;
        let m = &last.metrics;
        let usable = |total: f64| total.is_finite() && total > 0.0;
        if let (Some(&done), Some(&total)) = (
            m.get(keys::EPOCH),
            keys::TOTAL_EPOCHS.iter().find_map(|k| m.get(*k)),
        ) && usable(total)
            && done.is_finite()
        {
            return Some((done, total, "ep"));
        }
        if let Some(&total) = keys::TOTAL_STEPS.iter().find_map(|k| m.get(*k))
            && usable(total)
        {
            return Some((last.step as f64, total, "step"));
        }
        let done = m.get(keys::PROGRESS).filter(|p| p.is_finite())?;
        Some((done.clamp(0.0, 1.0), 1.0, "%"))
    }

    /// How long it ran, or has been running at `now`.
    pub fn elapsed(&self, now: SystemTime) -> Option<Duration> {
        if let Some(d) = self.duration {
            return Some(d);
        }
        let start = self.started_at?;
        let end = self.finished_at.unwrap_or(now);
        end.duration_since(start).ok()
    }
}

/// One worker slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub device: String,
    pub trial: Option<TrialNumber>,
}

/// Trial counts by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub queued: usize,
    pub running: usize,
    pub complete: usize,
    pub pruned: usize,
    pub failed: usize,
    /// Finished trials the budget does not count ([`TrialRow::uncounted`]): interrupted ones,
    /// whose params run again, and discarded ones.
    pub uncounted: usize,
}

impl Counts {
    pub(super) fn slot(&mut self, s: TrialState) -> &mut usize {
        match s {
            TrialState::Queued => &mut self.queued,
            TrialState::Running => &mut self.running,
            TrialState::Complete => &mut self.complete,
            TrialState::Pruned => &mut self.pruned,
            TrialState::Failed => &mut self.failed,
        }
    }

    pub fn finished(&self) -> usize {
        self.complete + self.pruned + self.failed
    }

    pub fn total(&self) -> usize {
        self.queued + self.running + self.finished()
    }

    /// The finished trials the trial budget counts (as the scheduler counts them).
    pub fn counted(&self) -> usize {
        self.finished().saturating_sub(self.uncounted)
    }
}
