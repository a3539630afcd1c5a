//! Trials: numbers, states, reports and the finished-trial record that samplers and pruners see.
//!
//! Nothing here touches storage or the clock; the scheduler owns the lifecycle and the
//! storage layer maps these types to rows.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::space::Params;

/// The number of a trial within its study: 0, 1, 2, … given out exactly once each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TrialNumber(pub u64);

impl fmt::Display for TrialNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Whether the objective is minimised or maximised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    #[default]
    Minimize,
    Maximize,
}

impl Direction {
    /// The value turned into a loss (lower is better), the form samplers and pruners use.
    pub fn loss(self, value: f64) -> f64 {
        match self {
            Direction::Minimize => value,
            Direction::Maximize => -value,
        }
    }

    /// Whether `a` is strictly better than `b`.
    pub fn better(self, a: f64, b: f64) -> bool {
        self.loss(a) < self.loss(b)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Minimize => "minimize",
            Direction::Maximize => "maximize",
        }
    }
}

/// The states of the CLI contract (`shared/spec/cli.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrialState {
    Queued,
    Running,
    Complete,
    Pruned,
    Failed,
}

impl TrialState {
    pub fn as_str(self) -> &'static str {
        match self {
            TrialState::Queued => "queued",
            TrialState::Running => "running",
            TrialState::Complete => "complete",
            TrialState::Pruned => "pruned",
            TrialState::Failed => "failed",
        }
    }

    /// Optuna's spelling in the `trials.state` column.
    pub fn optuna(self) -> &'static str {
        match self {
            TrialState::Queued => "WAITING",
            TrialState::Running => "RUNNING",
            TrialState::Complete => "COMPLETE",
            TrialState::Pruned => "PRUNED",
            TrialState::Failed => "FAIL",
        }
    }

    pub fn from_optuna(s: &str) -> Option<TrialState> {
        Some(match s {
            "WAITING" => TrialState::Queued,
            "RUNNING" => TrialState::Running,
            "COMPLETE" => TrialState::Complete,
            "PRUNED" => TrialState::Pruned,
            "FAIL" => TrialState::Failed,
            _ => return None,
        })
    }

    pub fn parse(s: &str) -> Option<TrialState> {
        Some(match s {
            "queued" => TrialState::Queued,
            "running" => TrialState::Running,
            "complete" => TrialState::Complete,
            "pruned" => TrialState::Pruned,
            "failed" | "fail" => TrialState::Failed,
            _ => return None,
        })
    }

    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TrialState::Complete | TrialState::Pruned | TrialState::Failed
        )
    }
}

/// One intermediate report: a step and its metrics (the objective among them, usually).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub step: u64,
    pub metrics: BTreeMap<String, f64>,
}

/// How a finished trial ended, as samplers see it. Values are in the study's own direction;
/// use [`Direction::loss`] to compare.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Complete {
        value: f64,
    },
    /// Stopped by the pruner; `value` is the last reported objective, `step` where it stopped.
    Pruned {
        value: Option<f64>,
        step: Option<u64>,
    },
    /// Failed by its own fault (crash, divergence, non-finite value, timeout).
    Failed,
}

/// A finished trial: what samplers and pruners learn from.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedTrial {
    pub number: TrialNumber,
    pub params: Params,
    pub outcome: Outcome,
    /// The objective's intermediate values, by step, in report order.
    pub curve: Vec<(u64, f64)>,
}

impl FinishedTrial {
    /// The final value of a complete trial.
    pub fn value(&self) -> Option<f64> {
        match self.outcome {
            Outcome::Complete { value } => Some(value),
            _ => None,
        }
    }
}
