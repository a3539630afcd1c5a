//! The UI's whole state: what the study looks like (from [`Event`]s) and what the user is
//! looking at (from keys). Nothing here draws, reads a clock or touches the terminal: the
//! clock is injected with [`UiState::tick`], so that the same state always renders the same
//! screen and snapshot tests are deterministic.
//!
//! [`UiState`] is one struct; its methods live by domain: `row` (a trial as the UI knows it,
//! the worker slots, the counts), `fold` (the events), `table` (the trials table's columns,
//! sort, filter, selection and scrolling) and `input` (the keys). This file holds the
//! struct, the small types the screen reads, and the study-wide queries (best, Pareto front,
//! budget progress).
//!
//! [`Event`]: crate::events::Event

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::events::{Control, StudyInfo};
pub use crate::events::{NO_SLOT, Update};
use crate::trial::{Direction, Objective, TrialNumber, TrialState};

mod fold;
mod input;
mod insight;
mod row;
mod table;

pub use insight::{
    ImportanceCache, InsightTab, InsightView, MIN_TRIALS, RECOMPUTE_AFTER, RECOMPUTE_GROWTH,
    Ranking,
};
pub use row::{Counts, Slot, TrialRow};
pub use table::{Column, Filter, TableView};

/// Metric keys the built-in trainer reports besides the objective; shown where present.
pub mod keys {
    pub const EPOCH: &str = "epoch";
    /// Total epochs, under either name the trainer may use.
    pub const TOTAL_EPOCHS: [&str; 2] = ["total_epochs", "epochs"];
    /// Total steps, for trials that count steps rather than epochs.
    pub const TOTAL_STEPS: [&str; 2] = ["total_steps", "max_steps"];
    /// The fraction of the run done, in [0, 1]: what the builtin trainer reports when only a
    /// time budget bounds the run (no number of epochs to count against).
    pub const PROGRESS: &str = "progress";
    pub const SAMPLES_PER_S: &str = "samples_per_s";
    pub const DATA_WAIT: &str = "data_wait";
}

/// What the terminal loop must do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send this to the scheduler.
    Control(Control),
    /// Leave the UI now.
    Exit,
}

/// Whether the UI may steer the study (in-process) or only watches it (`tune watch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Live,
    Watch,
}

/// The screen under any overlay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    Main,
    Trial(TrialNumber),
    /// Importance, slices, pairs, parallel coordinates and the slots' timeline (`i`).
    Insight,
}

/// A dialog or help drawn over the screen; it takes the keys while open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlay {
    Help,
    /// Quit: stop the study now, or let the running trials finish.
    Quit,
    /// Stop one trial: record it as pruned or as failed.
    StopTrial(TrialNumber),
}

/// How the study run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub reason: String,
    /// The best trial of the whole study as stored when it ended, counting every process's
    /// trials (this UI saw only its own), where the source said it.
    pub best: Option<(TrialNumber, f64)>,
    pub at: SystemTime,
}

/// The budget as the header gauge shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Fraction of the budget spent, when there is a budget.
    pub ratio: Option<f64>,
    pub elapsed: Duration,
    /// Estimated time left; `None` until there is a rate to extrapolate.
    pub left: Option<Duration>,
}

/// Everything the UI draws, and nothing else.
#[derive(Debug, Clone)]
pub struct UiState {
    pub mode: Mode,
    /// Colours on (false under `NO_COLOR`).
    pub color: bool,
    /// The injected clock: the time the screen is drawn for.
    pub now: SystemTime,
    pub info: Option<StudyInfo>,
    /// When this run of the study started.
    pub started_at: Option<SystemTime>,
    /// Trials finished before this run (a resumed study): not counted in the rate.
    pub finished_before: usize,
    pub finished: Option<Finished>,
    pub paused: bool,
    /// A pause or resume was asked and the scheduler has not confirmed it yet.
    pub pause_pending: Option<bool>,
    /// The study is stopping (`Some(graceful)`).
    pub stopping: Option<bool>,
    /// The user chose to quit: leave the UI when the study has finished.
    pub quit_requested: bool,
    /// Trials in arrival order; find one by number with [`UiState::trial`].
    pub trials: Vec<TrialRow>,
    index: HashMap<TrialNumber, usize>,
    pub counts: Counts,
    pub best: Option<TrialNumber>,
    /// Every parameter name seen, sorted: the table's param columns.
    pub param_names: Vec<String>,
    /// Some trial failed or was pruned with a reason: the table shows why in its last column.
    pub failed_any: bool,
    /// Some trial has a prediction: the table shows the `pred.` column (last).
    pub predicted_any: bool,
    /// The complete trials' curves (by step, in losses), what predictions are matched
    /// against, and which trials they are.
    pub references: Vec<crate::pruner::forecast::Reference>,
    pub referenced: std::collections::BTreeSet<TrialNumber>,
    pub slots: Vec<Slot>,
    pub table: TableView,
    /// The table's rows: indices into `trials`, filtered and sorted.
    pub order: Vec<usize>,
    pub screen: Screen,
    pub overlay: Option<Overlay>,
    /// A one-line message in the footer (what the last key did, or why it did nothing).
    pub notice: Option<String>,
    /// The event source is gone (the scheduler ended or the database went away).
    pub disconnected: bool,
    /// The objective chart's y axis is logarithmic (`l` toggles it).
    pub log_scale: bool,
    /// The insight screen: its view, picks and cached importances.
    pub insight: InsightView,
    /// Counts every change to a complete trial (one arriving, leaving, changing value or
    /// being discarded): the importances are stale when it moved since they were computed.
    pub complete_version: u64,
}

impl UiState {
    pub fn new(mode: Mode, color: bool, now: SystemTime) -> UiState {
        UiState {
            mode,
            color,
            now,
            info: None,
            started_at: None,
            finished_before: 0,
            finished: None,
            paused: false,
            pause_pending: None,
            stopping: None,
            quit_requested: false,
            trials: Vec::new(),
            index: HashMap::new(),
            counts: Counts::default(),
            best: None,
            param_names: Vec::new(),
            failed_any: false,
            predicted_any: false,
            references: Vec::new(),
            referenced: std::collections::BTreeSet::new(),
            slots: Vec::new(),
            table: TableView {
                sort: 0,
                descending: true,
                filter: Filter::All,
                selected: None,
                cursor: 0,
                at_top: true,
                offset: 0,
                page: 10,
            },
            order: Vec::new(),
            screen: Screen::Main,
            overlay: None,
            notice: None,
            disconnected: false,
            log_scale: false,
            insight: InsightView::default(),
            complete_version: 0,
        }
    }

    /// Moves the injected clock, and brings what is computed on a timer up to date (the
    /// insight screen's importances): the terminal loop calls this before each frame, so the
    /// work is done here and never in `render`.
    pub fn tick(&mut self, now: SystemTime) {
        self.now = now;
        self.refresh_insight();
    }

    pub fn trial(&self, n: TrialNumber) -> Option<&TrialRow> {
        self.index.get(&n).map(|&i| &self.trials[i])
    }

    pub fn direction(&self) -> Direction {
        self.info
            .as_ref()
            .map(|i| i.direction)
            .unwrap_or(Direction::Minimize)
    }

    /// The study's further objectives (empty for a single-objective study).
    pub fn others(&self) -> &[Objective] {
        self.info.as_ref().map_or(&[], |i| i.others.as_slice())
    }

    /// A multi-objective study's Pareto front: its complete, counted trials that no other beats
    /// on every objective, by number.
    pub fn pareto_front(&self) -> Vec<&TrialRow> {
        let Some(info) = &self.info else {
            return Vec::new();
        };
        let rows: Vec<(&TrialRow, Vec<f64>)> = self
            .trials
            .iter()
            .filter(|t| t.state == TrialState::Complete && !t.uncounted())
            .filter_map(|t| {
                let l = crate::trial::losses(info.direction, &info.others, t.value()?, t.others())?;
                Some((t, l))
            })
            .collect();
        let points: Vec<Vec<f64>> = rows.iter().map(|(_, l)| l.clone()).collect();
        let mut front: Vec<&TrialRow> = crate::sampler::multi::pareto::pareto_front(&points)
            .into_iter()
            .map(|i| rows[i].0)
            .collect();
        front.sort_by_key(|t| t.number);
        front
    }

    pub fn best_trial(&self) -> Option<&TrialRow> {
        self.best.and_then(|n| self.trial(n))
    }

    /// Whether the UI should leave: the user asked to quit and the study has ended.
    pub fn should_exit(&self) -> bool {
        self.quit_requested && (self.finished.is_some() || self.disconnected)
    }

    /// The budget spent, the time since the run started and the estimate of the time left.
    ///
    /// The rate counts only trials finished in this run, so a resumed study does not look
    /// faster than it is; with a timeout, the estimate never exceeds what the timeout leaves.
    pub fn progress(&self) -> Progress {
        let elapsed = match (self.started_at, &self.finished) {
            (Some(s), Some(f)) => f.at.duration_since(s).unwrap_or_default(),
            (Some(s), None) => self.now.duration_since(s).unwrap_or_default(),
            _ => Duration::ZERO,
        };
        let info = self.info.as_ref();
        let budget = info.and_then(|i| i.budget);
        let timeout = info.and_then(|i| i.timeout);
        let done = self.counts.finished();
        let counted = self.counts.counted();
        // Capped: more counted trials than the budget (it was lowered, or trials finished
        // together at its end) is a spent budget, never more than 100%.
        let by_trials = budget.map(|b| {
            let b = b.max(1) as f64;
            (counted as f64 / b).min(1.0)
        });
        let by_time = timeout.map(|t| {
            if t.is_zero() {
                1.0
            } else {
                (elapsed.as_secs_f64() / t.as_secs_f64()).min(1.0)
            }
        });
        let ratio = match (by_trials, by_time) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if self.finished.is_some() {
            return Progress {
                ratio: ratio.map(|_| 1.0),
                elapsed,
                left: Some(Duration::ZERO),
            };
        }
        let done_here = done.saturating_sub(self.finished_before);
        let left_by_trials = budget.and_then(|b| {
            if done_here == 0 {
                return None;
            }
            let remaining = (b as usize).saturating_sub(counted) as f64;
            let per_trial = elapsed.as_secs_f64() / done_here as f64;
            Duration::try_from_secs_f64(remaining * per_trial).ok()
        });
        let left_by_time = timeout.map(|t| t.saturating_sub(elapsed));
        let left = match (left_by_trials, left_by_time) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Progress {
            ratio,
            elapsed,
            left,
        }
    }
}
