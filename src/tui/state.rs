//! The UI's whole state: what the study looks like (from [`Event`]s) and what the user is
//! looking at (from keys). Nothing here draws, reads a clock or touches the terminal: the
//! clock is injected with [`UiState::tick`], so that the same state always renders the same
//! screen and snapshot tests are deterministic.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::events::{Control, Event, StudyInfo};
pub use crate::events::{NO_SLOT, Update};
use crate::space::{ParamValue, Params};
use crate::trial::{
    Direction, Objective, Placement, Report, Trial, TrialNumber, TrialState, TrialStatus,
};

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
    pub gpu: Option<crate::telemetry::GpuUsage>,
}

impl TrialRow {
    fn new(number: TrialNumber, state: TrialState) -> TrialRow {
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
            last: None,
            n_reports: 0,
            logs: Vec::new(),
            gpu: None,
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
    fn slot(&mut self, s: TrialState) -> &mut usize {
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

/// A column of the trials table; the params follow the fixed ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Column {
    Number,
    State,
    Value,
    Duration,
    Step,
    Param(String),
    /// Why a trial failed, on one line (the last column, shown once a trial has failed).
    Why,
}

impl Column {
    pub fn title(&self) -> &str {
        match self {
            Column::Number => "#",
            Column::State => "state",
            Column::Value => "value",
            Column::Duration => "time",
            Column::Step => "step",
            Column::Param(p) => p,
            Column::Why => "why",
        }
    }
}

/// The index of [`Column::Step`] in [`UiState::columns`].
const STEP_COLUMN: usize = 4;

/// Which trials the table lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    All,
    Only(TrialState),
}

impl Filter {
    fn next(self) -> Filter {
        match self {
            Filter::All => Filter::Only(TrialState::Running),
            Filter::Only(TrialState::Running) => Filter::Only(TrialState::Complete),
            Filter::Only(TrialState::Complete) => Filter::Only(TrialState::Pruned),
            Filter::Only(TrialState::Pruned) => Filter::Only(TrialState::Failed),
            Filter::Only(_) => Filter::All,
        }
    }

    pub fn admits(self, s: TrialState) -> bool {
        match self {
            Filter::All => true,
            Filter::Only(x) => x == s,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Filter::All => "all",
            Filter::Only(s) => s.as_str(),
        }
    }
}

/// The table's view: sort, filter, selection and scroll.
#[derive(Debug, Clone, PartialEq)]
pub struct TableView {
    /// Index into [`UiState::columns`].
    pub sort: usize,
    pub descending: bool,
    pub filter: Filter,
    /// The selected trial; the selection follows it when rows move.
    pub selected: Option<TrialNumber>,
    /// Its position in [`UiState::order`].
    pub cursor: usize,
    /// The cursor stays on the first row as rows come and go, until the user moves it (and
    /// again after `g`/Home): a live table reads like `top`.
    pub at_top: bool,
    /// The first row shown.
    pub offset: usize,
    /// Rows the table shows, set from the terminal size (for paging and scrolling).
    pub page: usize,
}

/// The screen under any overlay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    Main,
    Trial(TrialNumber),
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
        }
    }

    /// Moves the injected clock.
    pub fn tick(&mut self, now: SystemTime) {
        self.now = now;
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

    /// The table's columns: the fixed ones, then one per parameter.
    pub fn columns(&self) -> Vec<Column> {
        let mut c = vec![
            Column::Number,
            Column::State,
            Column::Value,
            Column::Duration,
            Column::Step,
        ];
        c.extend(self.param_names.iter().cloned().map(Column::Param));
        if self.failed_any {
            c.push(Column::Why);
        }
        c
    }

    /// The column sorted by, without building the column list (this runs per report).
    fn sort_column(&self) -> Column {
        match self.table.sort {
            0 => Column::Number,
            1 => Column::State,
            2 => Column::Value,
            3 => Column::Duration,
            4 => Column::Step,
            k => match self.param_names.get(k - 5) {
                Some(p) => Column::Param(p.clone()),
                None if self.failed_any && k == 5 + self.param_names.len() => Column::Why,
                None => Column::Number,
            },
        }
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

    // ----- events -------------------------------------------------------------------------

    /// Folds one scheduler event into the state.
    pub fn apply(&mut self, ev: &Event) {
        if self.apply_quiet(ev) {
            self.refresh_order();
        }
    }

    /// Folds a burst of updates in, sorting the table once at the end rather than per event
    /// (a `watch` of 10 000 trials starts with that many).
    pub fn apply_all<'a>(&mut self, updates: impl IntoIterator<Item = &'a Update>) {
        let mut reorder = false;
        for u in updates {
            match u {
                Update::Event(ev) => reorder |= self.apply_quiet(ev),
                Update::Notice(m) => self.notice = Some(m.clone()),
            }
        }
        if reorder {
            self.refresh_order();
        }
    }

    /// Applies one event; returns whether the table's order may have changed.
    fn apply_quiet(&mut self, ev: &Event) -> bool {
        match ev {
            Event::StudyStarted { info, existing, at } => {
                self.slots = info
                    .slots
                    .iter()
                    .map(|d| Slot {
                        device: d.clone(),
                        trial: None,
                    })
                    .collect();
                self.info = Some(info.clone());
                self.started_at = Some(*at);
                self.finished = None;
                for t in existing {
                    self.upsert_trial(t, None);
                }
                self.finished_before = self.counts.finished();
                self.recompute_best();
                true
            }
            Event::TrialStarted {
                number,
                slot,
                device,
                params,
                at,
            } => {
                let i = self.row_index(*number, TrialState::Running);
                self.set_state(i, TrialState::Running);
                let known = *slot < self.slots.len();
                let row = &mut self.trials[i];
                row.params = params.clone();
                row.started_at = Some(*at);
                row.slot = known.then_some(*slot);
                row.device = Some(device.clone());
                row.status = TrialStatus::Running {
                    at: Placement {
                        slot: row.slot,
                        device: row.device.clone(),
                        ..Placement::default()
                    },
                    started: row.started_at,
                };
                self.note_params(i);
                self.occupy_slot(*slot, *number);
                true
            }
            Event::TrialReported {
                number,
                slot,
                report,
            } => {
                let value = self
                    .info
                    .as_ref()
                    .and_then(|info| report.metrics.get(&info.metric).copied());
                let i = self.row_index(*number, TrialState::Running);
                let row = &mut self.trials[i];
                if let Some(v) = value {
                    row.curve.push((report.step, v));
                    if let Some(e) = report.metrics.get(keys::EPOCH).filter(|e| e.is_finite()) {
                        row.curve_epochs.push((*e, v));
                    }
                }
                row.n_reports += 1;
                row.last = Some(report.clone());
                if row.slot.is_none() && *slot < self.slots.len() {
                    row.slot = Some(*slot);
                }
                // Only the step column can change order, and only when sorting by it.
                self.table.sort == STEP_COLUMN
            }
            Event::TrialFinished {
                slot, trial, at, ..
            } => {
                self.upsert_trial(trial, Some(*at));
                if let Some(s) = self.slots.get_mut(*slot)
                    && s.trial == Some(trial.number)
                {
                    s.trial = None;
                }
                true
            }
            Event::GpuSampled { number, usage, .. } => {
                let i = self.row_index(*number, TrialState::Running);
                self.trials[i].gpu = Some(*usage);
                false
            }
            Event::Paused(p) => {
                self.paused = *p;
                self.pause_pending = None;
                false
            }
            Event::Stopping { graceful } => {
                self.stopping = Some(*graceful);
                false
            }
            Event::StudyFinished { reason, best, at } => {
                self.finished = Some(Finished {
                    reason: reason.clone(),
                    best: best.map(|(n, v)| (TrialNumber(n), v)),
                    at: *at,
                });
                for s in &mut self.slots {
                    s.trial = None;
                }
                false
            }
        }
    }

    /// Marks the event source gone (the channel closed, the database vanished).
    pub fn disconnect(&mut self) {
        self.disconnected = true;
    }

    /// Attaches log paths to a trial (the `watch` poller reads them from the database).
    fn row_index(&mut self, n: TrialNumber, state: TrialState) -> usize {
        if let Some(&i) = self.index.get(&n) {
            return i;
        }
        self.trials.push(TrialRow::new(n, state));
        *self.counts.slot(state) += 1;
        let i = self.trials.len() - 1;
        self.index.insert(n, i);
        i
    }

    fn set_state(&mut self, i: usize, s: TrialState) {
        let old = self.trials[i].state;
        if old != s {
            *self.counts.slot(old) -= 1;
            *self.counts.slot(s) += 1;
            // An interrupted trial that runs again is no longer a finished one: its state
            // leaves the finished ones, whatever its status says until the next event.
            self.recount(i, |row| row.state = s);
        }
    }

    /// Changes row `i` through `change`, keeping [`Counts::uncounted`] in step with it: every
    /// change to what decides [`TrialRow::uncounted`] goes through here, so the count can
    /// never drift from the rows (and underflow when a trial runs again).
    fn recount(&mut self, i: usize, change: impl FnOnce(&mut TrialRow)) {
        let row = &mut self.trials[i];
        let before = row.uncounted();
        change(row);
        match (before, row.uncounted()) {
            (false, true) => self.counts.uncounted += 1,
            (true, false) => self.counts.uncounted -= 1,
            _ => {}
        }
    }

    fn upsert_trial(&mut self, t: &Trial, at: Option<SystemTime>) {
        let state = t.state();
        let i = self.row_index(t.number, state);
        self.set_state(i, state);
        self.recount(i, |row| {
            row.status = t.status.clone();
            row.discarded = t.discarded;
        });
        let was_best = self.best == Some(t.number);
        let row = &mut self.trials[i];
        row.params = t.params.clone();
        row.error = t.status.error();
        // The table's column is narrow: the last line of the error (the exception its
        // standard error ended with, else the reason) says the most in the least space; a
        // pruned trial's is where and why it was pruned.
        row.why = match t.status.pruned_reason() {
            Some(r) => Some(r.to_string()),
            None => row
                .error
                .as_deref()
                .and_then(|e| e.lines().rev().map(str::trim).find(|l| !l.is_empty()))
                .map(str::to_string),
        };
        if row.why.is_some() {
            self.failed_any = true;
        }
        let duration = t.duration(at.unwrap_or(self.now));
        row.duration = duration;
        if !t.logs.is_empty() {
            row.logs = t.logs.iter().map(|p| p.display().to_string()).collect();
        }
        if state.is_finished() {
            row.finished_at = at.or(t.status.finished()).or(row.finished_at);
            if row.started_at.is_none()
                && let (Some(end), Some(d)) = (row.finished_at, duration)
            {
                row.started_at = end.checked_sub(d);
            }
        }
        self.note_params(i);
        if was_best {
            self.recompute_best();
        } else {
            self.consider_best(i);
        }
    }

    /// Puts trial `n` on its slot. A slot the study did not declare ([`NO_SLOT`] from
    /// `watch`, for a trial of a worker it cannot see) puts it on none: the trial is still
    /// in the table, and no index from an event can grow the slot list.
    fn occupy_slot(&mut self, slot: usize, n: TrialNumber) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.trial = Some(n);
        }
    }

    fn note_params(&mut self, i: usize) {
        let new: Vec<&String> = self.trials[i]
            .params
            .keys()
            .filter(|k| self.param_names.binary_search(k).is_err())
            .collect();
        if new.is_empty() {
            return;
        }
        let mut all: BTreeSet<String> = self.param_names.drain(..).collect();
        all.extend(new.into_iter().cloned().collect::<Vec<_>>());
        let sorted_by = self.sort_column();
        self.param_names = all.into_iter().collect();
        // Keep sorting by the same column when a new param column shifts the indices.
        if let Some(pos) = self.columns().iter().position(|c| *c == sorted_by) {
            self.table.sort = pos;
        }
    }

    fn consider_best(&mut self, i: usize) {
        let row = &self.trials[i];
        let Some(v) = row.value().filter(|v| v.is_finite()) else {
            return;
        };
        // A discarded trial is never the best: storage's `best` leaves it out too.
        if row.state != TrialState::Complete || row.discarded {
            return;
        }
        let better = match self.best_trial().and_then(|b| b.value()) {
            None => true,
            Some(b) => self.direction().better(v, b),
        };
        if better {
            self.best = Some(row.number);
        }
    }

    fn recompute_best(&mut self) {
        self.best = None;
        for i in 0..self.trials.len() {
            self.consider_best(i);
        }
    }

    /// Rebuilds the table's rows after trials, the sort or the filter changed, and keeps the
    /// cursor on the selected trial.
    pub fn refresh_order(&mut self) {
        let col = self.sort_column();
        let filter = self.table.filter;
        let trials = &self.trials;
        self.order.clear();
        self.order
            .extend((0..trials.len()).filter(|&i| filter.admits(trials[i].state)));
        let desc = self.table.descending;
        let now = self.now;
        self.order.sort_by(|&a, &b| {
            let (ta, tb) = (&trials[a], &trials[b]);
            let ord = compare(&col, now, ta, tb, desc);
            // Ties fall back to the trial number, always ascending, so the order is total.
            ord.then(ta.number.cmp(&tb.number))
        });
        self.follow_selection();
    }

    fn follow_selection(&mut self) {
        if self.table.at_top {
            self.table.cursor = 0;
            self.table.selected = self.order.first().map(|&i| self.trials[i].number);
            self.scroll_to_cursor();
            return;
        }
        let pos = self
            .table
            .selected
            .and_then(|n| self.order.iter().position(|&i| self.trials[i].number == n));
        match pos {
            Some(p) => self.table.cursor = p,
            None => {
                self.table.cursor = self.table.cursor.min(self.order.len().saturating_sub(1));
                self.table.selected = self
                    .order
                    .get(self.table.cursor)
                    .map(|&i| self.trials[i].number);
            }
        }
        self.scroll_to_cursor();
    }

    fn scroll_to_cursor(&mut self) {
        let page = self.table.page.max(1);
        let c = self.table.cursor;
        if c < self.table.offset {
            self.table.offset = c;
        } else if c >= self.table.offset + page {
            self.table.offset = c + 1 - page;
        }
        let max_offset = self.order.len().saturating_sub(page);
        self.table.offset = self.table.offset.min(max_offset);
    }

    /// Sets how many table rows the screen shows (from the terminal size).
    pub fn set_page(&mut self, rows: usize) {
        self.table.page = rows.max(1);
        self.scroll_to_cursor();
    }

    fn move_cursor(&mut self, delta: isize) {
        if self.order.is_empty() {
            return;
        }
        let last = self.order.len() - 1;
        let c = self.table.cursor as isize + delta;
        self.table.cursor = c.clamp(0, last as isize) as usize;
        self.table.at_top = self.table.cursor == 0;
        self.table.selected = Some(self.trials[self.order[self.table.cursor]].number);
        self.scroll_to_cursor();
    }

    fn selected_row(&self) -> Option<&TrialRow> {
        self.table.selected.and_then(|n| self.trial(n))
    }

    /// Sorts by column `i`; choosing the sorted column again reverses it. Value sorts best
    /// first; the number newest first.
    pub fn sort_by(&mut self, i: usize) {
        let ncols = self.columns().len();
        if i >= ncols {
            return;
        }
        if self.table.sort == i {
            self.table.descending = !self.table.descending;
        } else {
            self.table.sort = i;
            self.table.descending = match self.sort_column() {
                Column::Number | Column::Duration | Column::Step => true,
                Column::Value => self.direction() == Direction::Maximize,
                Column::State | Column::Param(_) | Column::Why => false,
            };
        }
        self.refresh_order();
        let col = self.sort_column();
        self.notice = Some(format!(
            "sorted by {} {}",
            col.title(),
            if self.table.descending { "▼" } else { "▲" }
        ));
    }

    // ----- keys ---------------------------------------------------------------------------

    /// Changes the state for one key; returns what the loop must do, if anything.
    pub fn handle_key(&mut self, key: KeyEvent) -> Option<Action> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        let ctrl_c =
            key.modifiers.contains(KeyModifiers::CONTROL) && matches!(key.code, KeyCode::Char('c'));
        if let Some(o) = self.overlay {
            return self.overlay_key(o, key.code, ctrl_c);
        }
        if ctrl_c {
            return self.ask_quit();
        }
        match self.screen {
            Screen::Main => self.main_key(key.code),
            Screen::Trial(n) => self.trial_key(n, key.code),
        }
    }

    fn overlay_key(&mut self, o: Overlay, code: KeyCode, ctrl_c: bool) -> Option<Action> {
        match o {
            Overlay::Help => {
                self.overlay = None;
                if ctrl_c {
                    return self.ask_quit();
                }
                None
            }
            Overlay::Quit => {
                // Ctrl-C twice stops the study: what people expect of a second Ctrl-C.
                if ctrl_c || code == KeyCode::Char('s') {
                    return self.quit(false);
                }
                match code {
                    KeyCode::Char('w') => self.quit(true),
                    KeyCode::Esc | KeyCode::Char('n') | KeyCode::Char('q') => {
                        self.overlay = None;
                        None
                    }
                    _ => None,
                }
            }
            Overlay::StopTrial(n) => {
                let as_pruned = match code {
                    KeyCode::Char('p') => true,
                    KeyCode::Char('f') => false,
                    KeyCode::Esc | KeyCode::Char('n') | KeyCode::Char('q') => {
                        self.overlay = None;
                        return None;
                    }
                    _ => return None,
                };
                self.overlay = None;
                if self.trial(n).map(|t| t.state) != Some(TrialState::Running) {
                    self.notice = Some(format!("trial {n} is no longer running"));
                    return None;
                }
                self.notice = Some(format!(
                    "stopping trial {n} (to be recorded as {})",
                    if as_pruned { "pruned" } else { "failed" }
                ));
                Some(Action::Control(Control::StopTrial {
                    number: n,
                    as_pruned,
                }))
            }
        }
    }

    fn quit(&mut self, graceful: bool) -> Option<Action> {
        self.overlay = None;
        self.quit_requested = true;
        if self.finished.is_some() || self.disconnected {
            return Some(Action::Exit);
        }
        self.notice = Some(if graceful {
            "quitting: no new trials; waiting for the running ones to finish".into()
        } else {
            "quitting: stopping the running trials".into()
        });
        Some(Action::Control(Control::Quit { graceful }))
    }

    fn ask_quit(&mut self) -> Option<Action> {
        // Nothing to steer: watching, or the study is over. Leave at once.
        if self.mode == Mode::Watch || self.finished.is_some() || self.disconnected {
            return Some(Action::Exit);
        }
        self.overlay = Some(Overlay::Quit);
        None
    }

    fn read_only(&mut self) -> bool {
        if self.mode == Mode::Watch {
            self.notice =
                Some("watch is read-only: steer from the process running the study".into());
            return true;
        }
        if self.finished.is_some() {
            self.notice = Some("the study has finished".into());
            return true;
        }
        false
    }

    fn toggle_pause(&mut self) -> Option<Action> {
        if self.read_only() {
            return None;
        }
        let pause = !self.pause_pending.unwrap_or(self.paused);
        self.pause_pending = Some(pause);
        self.notice = Some(if pause {
            "pausing: no new trials start; running ones go on".into()
        } else {
            "resuming".into()
        });
        Some(Action::Control(if pause {
            Control::Pause
        } else {
            Control::Resume
        }))
    }

    fn ask_stop(&mut self, n: Option<TrialNumber>) -> Option<Action> {
        if self.read_only() {
            return None;
        }
        match n.and_then(|n| self.trial(n)) {
            Some(t) if t.state == TrialState::Running => {
                self.overlay = Some(Overlay::StopTrial(t.number));
            }
            Some(t) => self.notice = Some(format!("trial {} is not running", t.number)),
            None => self.notice = Some("no trial selected".into()),
        }
        None
    }

    fn main_key(&mut self, code: KeyCode) -> Option<Action> {
        let page = self.table.page.max(1) as isize;
        match code {
            KeyCode::Char('q') | KeyCode::Esc => return self.ask_quit(),
            KeyCode::Char('?') | KeyCode::Char('h') => self.overlay = Some(Overlay::Help),
            KeyCode::Up | KeyCode::Char('k') => self.move_cursor(-1),
            KeyCode::Down | KeyCode::Char('j') => self.move_cursor(1),
            KeyCode::PageUp => self.move_cursor(-page),
            KeyCode::PageDown => self.move_cursor(page),
            KeyCode::Home | KeyCode::Char('g') => self.move_cursor(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_cursor(isize::MAX / 2),
            KeyCode::Char('s') | KeyCode::Right | KeyCode::Char('>') => {
                let n = self.columns().len();
                self.sort_by((self.table.sort + 1) % n);
            }
            KeyCode::Left | KeyCode::Char('<') => {
                let n = self.columns().len();
                self.sort_by((self.table.sort + n - 1) % n);
            }
            KeyCode::Char('r') | KeyCode::Char('S') => {
                let i = self.table.sort;
                self.sort_by(i);
            }
            KeyCode::Char(c @ '1'..='9') => self.sort_by(c as usize - '1' as usize),
            KeyCode::Char('f') => {
                self.table.filter = self.table.filter.next();
                self.refresh_order();
                self.notice = Some(format!("showing {} trials", self.table.filter.label()));
            }
            KeyCode::Enter => {
                if let Some(n) = self.table.selected {
                    self.screen = Screen::Trial(n);
                }
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => return self.toggle_pause(),
            KeyCode::Char('x') => return self.ask_stop(self.selected_row().map(|t| t.number)),
            KeyCode::Char('l') => self.toggle_log_scale(),
            _ => {}
        }
        None
    }

    fn toggle_log_scale(&mut self) {
        self.log_scale = !self.log_scale;
        self.notice = Some(if !self.log_scale {
            "objective chart: linear scale".into()
        } else if self.log_scale_applies() {
            "objective chart: log scale".into()
        } else {
            "objective chart: log scale once every value is positive".into()
        });
    }

    /// Whether the objective chart can draw on a log scale now: every finite value it would
    /// plot is positive (a log axis has no place for zero or a negative value).
    pub fn log_scale_applies(&self) -> bool {
        self.trials
            .iter()
            .filter(|t| matches!(t.state, TrialState::Complete | TrialState::Pruned))
            .filter_map(|t| t.value().or_else(|| t.latest()))
            .filter(|v| v.is_finite())
            .all(|v| v > 0.0)
    }

    fn trial_key(&mut self, n: TrialNumber, code: KeyCode) -> Option<Action> {
        match code {
            KeyCode::Esc | KeyCode::Backspace | KeyCode::Enter | KeyCode::Char('q') => {
                self.screen = Screen::Main
            }
            KeyCode::Char('?') | KeyCode::Char('h') => self.overlay = Some(Overlay::Help),
            KeyCode::Up | KeyCode::Char('k') | KeyCode::Down | KeyCode::Char('j') => {
                self.move_cursor(if matches!(code, KeyCode::Up | KeyCode::Char('k')) {
                    -1
                } else {
                    1
                });
                if let Some(s) = self.table.selected {
                    self.screen = Screen::Trial(s);
                }
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => return self.toggle_pause(),
            KeyCode::Char('x') => return self.ask_stop(Some(n)),
            _ => {}
        }
        None
    }
}

fn cmp_opt_f64(a: Option<f64>, b: Option<f64>, desc: bool) -> Ordering {
    // Missing values sort last whichever the direction; NaN sorts with them.
    let a = a.filter(|v| !v.is_nan());
    let b = b.filter(|v| !v.is_nan());
    match (a, b) {
        (Some(x), Some(y)) => {
            let o = x.total_cmp(&y);
            if desc { o.reverse() } else { o }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

fn cmp_param(a: Option<&ParamValue>, b: Option<&ParamValue>, desc: bool) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => {
            let o = match (x.as_f64(), y.as_f64()) {
                (Some(p), Some(q)) => p.total_cmp(&q),
                _ => x.to_string().cmp(&y.to_string()),
            };
            if desc { o.reverse() } else { o }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

fn state_rank(s: TrialState) -> u8 {
    match s {
        TrialState::Running => 0,
        TrialState::Queued => 1,
        TrialState::Complete => 2,
        TrialState::Pruned => 3,
        TrialState::Failed => 4,
    }
}

fn compare(col: &Column, now: SystemTime, a: &TrialRow, b: &TrialRow, desc: bool) -> Ordering {
    let flip = |o: Ordering| if desc { o.reverse() } else { o };
    match col {
        Column::Number => flip(a.number.cmp(&b.number)),
        Column::State => flip(state_rank(a.state).cmp(&state_rank(b.state))),
        // A running trial sorts by its latest value, so the table ranks it among the others.
        Column::Value => {
            let va = a.value().or_else(|| a.latest());
            let vb = b.value().or_else(|| b.latest());
            cmp_opt_f64(va, vb, desc)
        }
        Column::Duration => cmp_opt_f64(
            a.elapsed(now).map(|d| d.as_secs_f64()),
            b.elapsed(now).map(|d| d.as_secs_f64()),
            desc,
        ),
        Column::Step => cmp_opt_f64(
            a.last.as_ref().map(|r| r.step as f64),
            b.last.as_ref().map(|r| r.step as f64),
            desc,
        ),
        Column::Param(p) => cmp_param(a.params.get(p), b.params.get(p), desc),
        Column::Why => {
            let o = a.why.cmp(&b.why);
            if desc { o.reverse() } else { o }
        }
    }
}
