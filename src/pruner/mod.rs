//! Pruners decide from intermediate reports whether a running trial should stop early.
//!
//! A pruner is pure: the reports already stored (of this trial and of every other trial of the
//! study, finished or running) go in, a decision comes out. No clock, no I/O, so a resumed study
//! rebuilds every decision from storage and keeps its rungs.

use serde::{Deserialize, Serialize};

use crate::trial::{Direction, Report, TrialNumber, TrialState};

/// The reports of one trial, as a pruner sees them.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialCurve {
    pub number: TrialNumber,
    pub state: TrialState,
    pub reports: Vec<Report>,
}

/// Everything a pruner may look at when trial `trial` has just reported.
pub struct PruneContext<'a> {
    pub direction: Direction,
    /// The objective's key in the reports.
    pub metric: &'a str,
    /// The key whose value is the trial's resource (`"step"` means the report's step).
    pub resource: &'a str,
    /// The trial that reported; its reports are the last entry's in `trials` with this number.
    pub trial: TrialNumber,
    /// Every trial of the study with at least one report (including `trial`).
    pub trials: &'a [TrialCurve],
}

impl PruneContext<'_> {
    /// The reports of the trial under decision.
    pub fn own(&self) -> &[Report] {
        self.trials
            .iter()
            .find(|t| t.number == self.trial)
            .map(|t| t.reports.as_slice())
            .unwrap_or(&[])
    }

    /// The resource a report stands at, in the study's unit.
    pub fn resource_of(&self, r: &Report) -> Option<f64> {
        if self.resource == "step" {
            Some(r.step as f64)
        } else {
            r.metrics.get(self.resource).copied()
        }
    }
}

/// The seam between the scheduler and the pruning rules.
pub trait Pruner: Send {
    /// Whether `ctx.trial` should stop now.
    fn should_prune(&mut self, ctx: &PruneContext<'_>) -> bool;
}

/// Never prunes.
pub struct NoPruner;

impl Pruner for NoPruner {
    fn should_prune(&mut self, _ctx: &PruneContext<'_>) -> bool {
        false
    }
}

/// The pruners a study can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PrunerKind {
    #[default]
    None,
}

impl PrunerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PrunerKind::None => "none",
        }
    }
}

pub fn build(kind: PrunerKind) -> Box<dyn Pruner> {
    match kind {
        PrunerKind::None => Box::new(NoPruner),
    }
}
