//! Trials: the one [`Trial`] type with its lifecycle ([`TrialStatus`]), numbers and ids, reports,
//! and the finished-trial record that samplers learn from (a projection of a `Trial`).
//!
//! Nothing here touches storage or the clock; the scheduler owns the lifecycle and the
//! storage layer maps these types to rows.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

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

/// The most bytes of a failed trial's standard error stored with it (`log_tail`): its end, the
/// part that says why. The whole stream stays in the trial's `stderr.log`. Hazard: without a
/// bound one 100 MB line of output is a 100 MB row, in every copy of the database.
pub const LOG_TAIL_BYTES: usize = 16 * 1024;

/// The last `max` bytes of `text` or fewer, starting on a UTF-8 character boundary.
pub fn last_bytes(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// A log tail as stored: unchanged when it fits in [`LOG_TAIL_BYTES`], else its last
/// `LOG_TAIL_BYTES` bytes (cut on a character boundary) under a line that says what was cut.
pub fn bound_log_tail(text: String) -> String {
    if text.len() <= LOG_TAIL_BYTES {
        return text;
    }
    let kept = last_bytes(&text, LOG_TAIL_BYTES);
    format!(
        "[tune: cut the first {} bytes of this tail; the trial's stderr.log has them all]\n{kept}",
        text.len() - kept.len()
    )
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

/// One objective of a study: the report key whose value it is, and which way is better. A
/// multi-objective study has several; the first is the one pruners and single-objective views
/// use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Objective {
    pub metric: String,
    pub direction: Direction,
}

/// Every objective of a study, in order: the first (`metric`, `direction`), then `others`.
pub fn objectives(metric: &str, direction: Direction, others: &[Objective]) -> Vec<Objective> {
    std::iter::once(Objective {
        metric: metric.to_string(),
        direction,
    })
    .chain(others.iter().cloned())
    .collect()
}

/// A complete trial's losses (lower is better) on every objective of a study whose first
/// objective goes `direction` and whose further ones are `others`: `None` unless the trial has
/// one finite value per objective (`first`, then `rest`).
pub fn losses(
    direction: Direction,
    others: &[Objective],
    first: f64,
    rest: &[f64],
) -> Option<Vec<f64>> {
    if rest.len() != others.len() {
        return None;
    }
    let l: Vec<f64> = std::iter::once(direction.loss(first))
        .chain(rest.iter().zip(others).map(|(v, o)| o.direction.loss(*v)))
        .collect();
    l.iter().all(|x| x.is_finite()).then_some(l)
}

/// The states of the CLI contract (`docs/cli.md`).
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

/// The metric key that marks a trial's final report (`"final": true`): its objective is the
/// trial's value, and it is stored but never judged by a pruner.
pub const FINAL_KEY: &str = "final";

/// One intermediate report: a step and its metrics (the objective among them, usually).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub step: u64,
    pub metrics: BTreeMap<String, f64>,
}

/// What a command trial's output said about its reports beyond the reports themselves, for
/// the message of a trial that ended without a value: the malformed report lines (and the
/// first), a line that looks like a report but lacks the `tune: ` prefix, a report-like line
/// on standard error, and a step that went backwards. Lines are kept cut to
/// [`ReportNotes::SHOWN`] characters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportNotes {
    /// Report lines (`tune: …`) that were not a valid report, and were ignored.
    pub malformed: u64,
    /// The first of them and what is wrong with it.
    pub first_malformed: Option<(String, String)>,
    /// The first line on standard output that looks like a report (a JSON object, or `tune:`
    /// inside the line) but is none.
    pub unprefixed: Option<String>,
    /// The first line on standard error that looks like a report.
    pub on_stderr: Option<String>,
    /// The first report whose step went backwards: (its step, the step before it).
    pub backwards: Option<(u64, u64)>,
}

impl ReportNotes {
    /// How many characters of a line a note keeps: enough to recognise it, never a whole
    /// megabyte of output in a trial's error.
    pub const SHOWN: usize = 200;

    /// `line` cut to [`ReportNotes::SHOWN`] characters (marked `…` when cut).
    pub fn shown(line: &str) -> String {
        let line = line.trim();
        match line.char_indices().nth(Self::SHOWN) {
            Some((i, _)) => format!("{}…", &line[..i]),
            None => line.to_string(),
        }
    }

    /// Whether a line that is not a report looks like one that was meant to be: a JSON object
    /// on its own, or `tune:` after other text (a logging prefix) or in other case.
    pub fn looks_like_report(line: &str) -> bool {
        let t = line.trim();
        (t.starts_with('{') && t.ends_with('}')) || t.to_ascii_lowercase().contains("tune:")
    }
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

impl Outcome {
    /// A pruned trial's place among pruned trials, in the study's `direction`: the step it
    /// reached (deeper is better) and its last value as a loss (infinite when it has none or
    /// none finite). `None` for other outcomes.
    pub fn pruned_rank(&self, direction: Direction) -> Option<(u64, f64)> {
        match *self {
            Outcome::Pruned { value, step } => Some((
                step.unwrap_or(0),
                value
                    .map(|v| direction.loss(v))
                    .filter(|v| v.is_finite())
                    .unwrap_or(f64::INFINITY),
            )),
            _ => None,
        }
    }
}

/// A finished trial: what samplers and pruners learn from.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedTrial {
    pub number: TrialNumber,
    pub params: Params,
    pub outcome: Outcome,
    /// The objective's intermediate values, by step, in report order.
    pub curve: Vec<(u64, f64)>,
    /// How long it ran, in seconds, when both its start and its end are known: what the GP's
    /// cost model learns from (`sampler::gp` `cost`).
    pub seconds: Option<f64>,
    /// A complete trial's values of the study's further objectives (multi-objective studies),
    /// in their own directions; empty otherwise.
    pub others: Vec<f64>,
}

impl FinishedTrial {
    /// The final value of a complete trial.
    pub fn value(&self) -> Option<f64> {
        match self.outcome {
            Outcome::Complete { value } => Some(value),
            _ => None,
        }
    }

    /// A complete trial's value of every objective, in order (the first objective's, then the
    /// further ones').
    pub fn values(&self) -> Option<Vec<f64>> {
        let v = self.value()?;
        Some(
            std::iter::once(v)
                .chain(self.others.iter().copied())
                .collect(),
        )
    }
}

/// Storage's key of one trial (a row id): what the engine holds while the trial runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TrialId(pub i64);

/// One `tune` process (or ask-tell session) that runs trials of a study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkerId(pub i64);

/// Where a trial runs: the worker process, its slot and device, the machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub worker: Option<WorkerId>,
    pub slot: Option<usize>,
    /// `cpu` or `cuda:N`.
    pub device: Option<String>,
    pub host: Option<String>,
}

/// Whose memory a trial's GPU memory peak ([`GpuTelemetry::peak_mem_mb`]) counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuMemScope {
    /// The trial's own processes: what NVML lists as used by the processes of the trial's
    /// process tree (CUDA context and the allocator's cache included). Two trials sharing a GPU
    /// each see only their own.
    Process,
    /// The whole device, every process's memory: where the trial's own processes could not be
    /// told apart (NVML lists no process of theirs, as inside a container with a PID namespace
    /// of its own). Trials sharing the GPU then count each other's memory too.
    Device,
}

impl GpuMemScope {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuMemScope::Process => "process",
            GpuMemScope::Device => "device",
        }
    }

    pub fn parse(s: &str) -> Option<GpuMemScope> {
        match s {
            "process" => Some(GpuMemScope::Process),
            "device" => Some(GpuMemScope::Device),
            _ => None,
        }
    }
}

/// What a trial used of its GPU while it ran, summarised from NVML samples taken once a
/// second on a CUDA slot (`telemetry`): stored with the trial where NVML answered at least
/// once, absent otherwise (a CPU slot, a machine without an NVIDIA driver, a trial shorter
/// than one sample).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GpuTelemetry {
    /// The most GPU memory in use at any sample, in MB (MiB), of the processes [`Self::mem_scope`]
    /// says.
    pub peak_mem_mb: f64,
    pub mem_scope: GpuMemScope,
    /// The mean over the samples of NVML's GPU utilisation: the percent of time a kernel ran
    /// (`nvidia-smi`'s GPU-Util), for the whole device.
    pub mean_sm_pct: f64,
    /// The mean over the samples of NVML's memory utilisation: the percent of time device
    /// memory was read or written, for the whole device.
    pub mean_mem_bw_pct: f64,
    /// How many samples the means and the peak are over.
    pub samples: u32,
}

impl GpuTelemetry {
    /// The flat names of its fields, in order: the CSV columns of `tune trials` and the keys of
    /// the Optuna user attributes it is mirrored to.
    pub const KEYS: [&'static str; 5] = [
        "gpu_peak_mem_mb",
        "gpu_mem_scope",
        "gpu_mean_sm_pct",
        "gpu_mean_mem_bw_pct",
        "gpu_samples",
    ];

    /// Its fields under [`Self::KEYS`], as JSON values.
    pub fn fields(&self) -> [(&'static str, serde_json::Value); 5] {
        let [peak, scope, sm, bw, n] = Self::KEYS;
        [
            (peak, serde_json::json!(self.peak_mem_mb)),
            (scope, serde_json::json!(self.mem_scope.as_str())),
            (sm, serde_json::json!(self.mean_sm_pct)),
            (bw, serde_json::json!(self.mean_mem_bw_pct)),
            (n, serde_json::json!(self.samples)),
        ]
    }
}

/// Where and when a finished trial ran, and what it used of its GPU. Either time may be missing
/// in a database that another tool wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ran {
    pub at: Placement,
    pub started: Option<SystemTime>,
    pub finished: Option<SystemTime>,
    /// Its GPU telemetry, where its slot's GPU was sampled.
    pub gpu: Option<GpuTelemetry>,
}

impl Ran {
    /// Ran on `at` from `started` for `took`.
    pub fn span(at: Placement, started: SystemTime, took: Duration) -> Ran {
        Ran {
            at,
            started: Some(started),
            finished: started.checked_add(took),
            gpu: None,
        }
    }
}

/// A trial's lifecycle, each state carrying its own data, so that no code can read "the
/// value of a running trial" or "the error of a complete one".
#[derive(Debug, Clone, PartialEq)]
pub enum TrialStatus {
    /// Waiting for a slot (enqueued by hand, or the rerun of an interrupted trial).
    Queued,
    Running {
        at: Placement,
        started: Option<SystemTime>,
    },
    Complete {
        value: f64,
        /// The values of the study's further objectives (a multi-objective study), in order;
        /// empty for a single objective.
        others: Vec<f64>,
        ran: Ran,
    },
    /// Stopped by the pruner (or the user as pruned): its last reported objective, the
    /// step it stopped at, and why, as the user reads it after "pruned " (the pruner's
    /// [`crate::pruner::Prune`], `by the user`, `by the ask-tell client`, or `None` where
    /// nobody said).
    Pruned {
        value: Option<f64>,
        step: Option<u64>,
        reason: Option<String>,
        /// Paused at a rung of promotion-based ASHA (`[pruner] mode = "promote"`): it stopped
        /// with a checkpoint and may be resumed later (promoted) as a re-run of its params.
        /// Until then it counts as pruned everywhere (the budget, the samplers, the rungs).
        paused: bool,
        ran: Ran,
    },
    /// Failed: `reason` says why; `log_tail` holds the last lines of its standard error;
    /// `interrupted` when it was not the trial's fault (its params run again).
    Failed {
        reason: String,
        log_tail: Option<String>,
        interrupted: bool,
        ran: Ran,
    },
}

impl TrialStatus {
    /// The state without its data (the CLI's filter, Optuna's `state` column).
    pub fn state(&self) -> TrialState {
        match self {
            TrialStatus::Queued => TrialState::Queued,
            TrialStatus::Running { .. } => TrialState::Running,
            TrialStatus::Complete { .. } => TrialState::Complete,
            TrialStatus::Pruned { .. } => TrialState::Pruned,
            TrialStatus::Failed { .. } => TrialState::Failed,
        }
    }

    /// The value the study shows: a complete trial's objective, a pruned trial's last one.
    pub fn value(&self) -> Option<f64> {
        match self {
            TrialStatus::Complete { value, .. } => Some(*value),
            TrialStatus::Pruned { value, .. } => *value,
            _ => None,
        }
    }

    /// Makes objective `k` (≥ 1) the first, as a view of one objective reads it: a complete
    /// trial's value trades places with its `k`-th objective's; a pruned trial's value (the
    /// first objective's last report) becomes the last report of objective `k` on its `curve`
    /// (that objective's, by step), or none.
    pub fn promote_objective(&mut self, k: usize, curve: Option<&Vec<(u64, f64)>>) {
        match self {
            TrialStatus::Complete { value, others, .. } => {
                match others.get_mut(k - 1) {
                    Some(o) => std::mem::swap(value, o),
                    // Not measured (a trial stored before the objective was added): no value,
                    // not the first objective's under another name.
                    None => *value = f64::NAN,
                }
            }
            TrialStatus::Pruned { value, .. } => {
                *value = curve
                    .and_then(|c| c.iter().max_by_key(|p| p.0))
                    .map(|p| p.1);
            }
            _ => {}
        }
    }

    /// A complete trial's values of the further objectives (empty otherwise).
    pub fn others(&self) -> &[f64] {
        match self {
            TrialStatus::Complete { others, .. } => others,
            _ => &[],
        }
    }

    /// Where it runs or ran.
    pub fn placement(&self) -> Option<&Placement> {
        match self {
            TrialStatus::Queued => None,
            TrialStatus::Running { at, .. } => Some(at),
            TrialStatus::Complete { ran, .. }
            | TrialStatus::Pruned { ran, .. }
            | TrialStatus::Failed { ran, .. } => Some(&ran.at),
        }
    }

    pub fn started(&self) -> Option<SystemTime> {
        match self {
            TrialStatus::Queued => None,
            TrialStatus::Running { started, .. } => *started,
            TrialStatus::Complete { ran, .. }
            | TrialStatus::Pruned { ran, .. }
            | TrialStatus::Failed { ran, .. } => ran.started,
        }
    }

    pub fn finished(&self) -> Option<SystemTime> {
        match self {
            TrialStatus::Complete { ran, .. }
            | TrialStatus::Pruned { ran, .. }
            | TrialStatus::Failed { ran, .. } => ran.finished,
            _ => None,
        }
    }

    /// A finished trial's GPU telemetry, where its GPU was sampled.
    pub fn gpu(&self) -> Option<&GpuTelemetry> {
        match self {
            TrialStatus::Complete { ran, .. }
            | TrialStatus::Pruned { ran, .. }
            | TrialStatus::Failed { ran, .. } => ran.gpu.as_ref(),
            _ => None,
        }
    }

    /// Why it failed, in one line (without its standard error's tail).
    pub fn reason(&self) -> Option<&str> {
        match self {
            TrialStatus::Failed { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// Why a pruned trial was pruned, as the user reads it after "pruned " (`at epoch 3
    /// (rung 1: 3rd of 4 trials there, below the top 1/3)`); `None` for other states and
    /// where nobody said.
    pub fn pruned_reason(&self) -> Option<&str> {
        match self {
            TrialStatus::Pruned { reason, .. } => reason.as_deref(),
            _ => None,
        }
    }

    /// Why it failed, with the last lines of its standard error when there are any.
    pub fn error(&self) -> Option<String> {
        match self {
            TrialStatus::Failed {
                reason, log_tail, ..
            } => Some(match log_tail {
                Some(t) if !t.trim().is_empty() => format!("{reason}\n{t}"),
                _ => reason.clone(),
            }),
            _ => None,
        }
    }

    /// Why it failed, on one line: the reason, then the last line its standard error wrote
    /// (usually the exception), e.g. `exited with status 1: ValueError: lr must be positive`.
    pub fn why(&self) -> Option<String> {
        let TrialStatus::Failed {
            reason, log_tail, ..
        } = self
        else {
            return None;
        };
        let first = reason.lines().next().unwrap_or("").trim_end();
        let last = log_tail
            .as_deref()
            .and_then(|t| t.lines().rev().map(str::trim).find(|l| !l.is_empty()));
        Some(match last {
            // A last line that says the reason again (the worker's own `... failed: REASON`)
            // adds nothing.
            Some(l) if !first.contains(l) && !l.contains(first) => format!("{first}: {l}"),
            _ => first.to_string(),
        })
    }

    /// Whether it is paused at a rung, resumable (see [`TrialStatus::Pruned`]).
    pub fn paused(&self) -> bool {
        matches!(self, TrialStatus::Pruned { paused: true, .. })
    }

    /// Whether it failed through no fault of its own (its params run again).
    pub fn interrupted(&self) -> bool {
        matches!(
            self,
            TrialStatus::Failed {
                interrupted: true,
                ..
            }
        )
    }

    /// A finished status of kind `state`: complete with `value` (NaN when there is none),
    /// pruned with `value`, or failed for `reason` (any other kind). For fixtures and tests
    /// that script a study's trials.
    pub fn ended(state: TrialState, value: Option<f64>, reason: &str, ran: Ran) -> TrialStatus {
        match state {
            TrialState::Complete => TrialStatus::Complete {
                others: Vec::new(),
                value: value.unwrap_or(f64::NAN),
                ran,
            },
            TrialState::Pruned => TrialStatus::Pruned {
                value,
                step: None,
                reason: None,
                paused: false,
                ran,
            },
            _ => TrialStatus::Failed {
                reason: reason.into(),
                log_tail: None,
                interrupted: false,
                ran,
            },
        }
    }

    /// The same finished state, stamped with where and when it ran.
    pub fn with_ran(mut self, new: Ran) -> TrialStatus {
        if let TrialStatus::Complete { ran, .. }
        | TrialStatus::Pruned { ran, .. }
        | TrialStatus::Failed { ran, .. } = &mut self
        {
            *ran = new;
        }
        self
    }
}

/// A trial: the one type storage, the scheduler, events, queries and the UI share.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    pub id: TrialId,
    pub number: TrialNumber,
    pub params: Params,
    pub status: TrialStatus,
    /// The directory its logs go to, once it has started.
    pub trial_dir: Option<PathBuf>,
    /// The log files it wrote.
    pub logs: Vec<PathBuf>,
    /// The metrics of its last report.
    pub metrics: BTreeMap<String, f64>,
    /// Set aside by `tune discard`: kept and shown, but the samplers do not learn from it, the
    /// budget does not count it and it is never the best.
    pub discarded: bool,
}

impl Trial {
    /// A trial that no storage holds (a fixture, a test): its id is its number.
    pub fn unstored(number: TrialNumber, params: Params, status: TrialStatus) -> Trial {
        Trial {
            id: TrialId(number.0 as i64),
            number,
            params,
            status,
            trial_dir: None,
            logs: Vec::new(),
            metrics: BTreeMap::new(),
            discarded: false,
        }
    }

    pub fn state(&self) -> TrialState {
        self.status.state()
    }

    pub fn value(&self) -> Option<f64> {
        self.status.value()
    }

    /// How long it ran (finished), or has run until `now` (running).
    pub fn duration(&self, now: SystemTime) -> Option<Duration> {
        let start = self.status.started()?;
        let end = match self.status {
            TrialStatus::Running { .. } => now,
            _ => self.status.finished()?,
        };
        end.duration_since(start).ok()
    }

    /// How long a finished trial ran, in seconds, when its start and end are both known.
    pub fn seconds(&self) -> Option<f64> {
        let (start, end) = (self.status.started()?, self.status.finished()?);
        end.duration_since(start).ok().map(|d| d.as_secs_f64())
    }

    /// What samplers learn from this trial, when it is finished and not interrupted (its
    /// rerun stands for it). `curve` is the objective's intermediate values by step.
    pub fn to_finished(&self, curve: Vec<(u64, f64)>) -> Option<FinishedTrial> {
        Some(FinishedTrial {
            number: self.number,
            params: self.params.clone(),
            outcome: self.outcome(&curve)?,
            curve,
            seconds: self.seconds(),
            others: self.status.others().to_vec(),
        })
    }

    /// How it ended, as samplers see it: `None` while it runs, and for an interrupted trial.
    pub fn outcome(&self, curve: &[(u64, f64)]) -> Option<Outcome> {
        Some(match &self.status {
            TrialStatus::Queued | TrialStatus::Running { .. } => return None,
            TrialStatus::Failed {
                interrupted: true, ..
            } => return None,
            TrialStatus::Complete { value, .. } if value.is_finite() => {
                Outcome::Complete { value: *value }
            }
            TrialStatus::Complete { .. } | TrialStatus::Failed { .. } => Outcome::Failed,
            TrialStatus::Pruned { value, step, .. } => Outcome::Pruned {
                value: value.or_else(|| curve.last().map(|c| c.1)),
                step: step.or_else(|| curve.last().map(|c| c.0)),
            },
        })
    }

    /// The JSON object of the CLI contract (`docs/cli.md`).
    pub fn to_json(&self) -> serde_json::Value {
        let rfc = |t: Option<SystemTime>| {
            t.map(|t| {
                chrono::DateTime::<chrono::Utc>::from(t)
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            })
        };
        let duration_s = match (self.status.started(), self.status.finished()) {
            (Some(a), Some(b)) => b.duration_since(a).ok().map(|d| d.as_secs_f64()),
            _ => None,
        };
        let mut v = serde_json::json!({
            "number": self.number.0,
            "state": self.state().as_str(),
            "value": self.value(),
            "params": self.params,
            "metrics": self.metrics,
            "started_at": rfc(self.status.started()),
            "finished_at": rfc(self.status.finished()),
            "duration_s": duration_s,
            "error": self.status.reason(),
        });
        // Only a complete trial of a multi-objective study has `values` (every objective's, in
        // order; `value` stays the first's): single-objective trials keep the shape scripts know.
        if !self.status.others().is_empty()
            && let Some(first) = self.value()
        {
            let values: Vec<f64> = std::iter::once(first)
                .chain(self.status.others().iter().copied())
                .collect();
            v["values"] = serde_json::json!(values);
        }
        // Only a discarded trial has the key: every other trial keeps the shape scripts know.
        if self.discarded {
            v["discarded"] = serde_json::Value::Bool(true);
        }
        // Only a paused trial has the key (its state stays `pruned`, one of the five states).
        if self.status.paused() {
            v["paused"] = serde_json::Value::Bool(true);
        }
        // Only a trial whose GPU was sampled has the key (docs/cli.md).
        if let Some(g) = self.status.gpu() {
            v["gpu"] = serde_json::json!(g);
        }
        v
    }
}

/// The trial a trial continues from (population-based training, `[pruner] kind = "pbt"`): its
/// number, and the step of its checkpoint the child started from. Storage keeps it in Optuna's
/// `trial_system_attributes` (`tune:parent`, [`Parent::json`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Parent {
    pub trial: TrialNumber,
    pub step: u64,
}

impl Parent {
    /// The attribute's JSON value.
    pub fn json(&self) -> String {
        serde_json::json!({"trial": self.trial.0, "step": self.step}).to_string()
    }

    /// A stored attribute's value; `None` for one that is not a parent (damaged by hand).
    pub fn parse(json: &str) -> Option<Parent> {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        Some(Parent {
            trial: TrialNumber(v.get("trial")?.as_u64()?),
            step: v.get("step")?.as_u64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_log_tail_keeps_its_end_cut_on_a_character_and_says_so() {
        assert_eq!(bound_log_tail("short".into()), "short");
        // One byte then two-byte characters: the cut point falls inside one.
        let text = format!("a{}end", "é".repeat(LOG_TAIL_BYTES));
        let kept = bound_log_tail(text.clone());
        let (head, body) = kept.split_once('\n').expect("a first line");
        assert!(head.starts_with("[tune: cut the first "), "{head}");
        assert!(body.len() <= LOG_TAIL_BYTES && body.len() >= LOG_TAIL_BYTES - 1);
        assert!(body.ends_with("éend") && text.ends_with(body));
        assert_eq!(last_bytes("aé", 1), "");
        assert_eq!(last_bytes("aé", 2), "é");
    }

    fn failed(reason: &str, tail: Option<&str>) -> TrialStatus {
        TrialStatus::Failed {
            reason: reason.into(),
            log_tail: tail.map(str::to_string),
            interrupted: false,
            ran: Ran::default(),
        }
    }

    #[test]
    fn why_says_the_reason_and_the_last_stderr_line_once() {
        let w = |r, t| failed(r, t).why().expect("a failure has a why");
        assert_eq!(
            w(
                "exited with status 1",
                Some("Traceback\n  File x\nValueError: bad lr\n\n")
            ),
            "exited with status 1: ValueError: bad lr"
        );
        assert_eq!(
            w(
                "diverged: loss became NaN at step 65",
                Some("tune worker: trial 9 failed: diverged: loss became NaN at step 65")
            ),
            "diverged: loss became NaN at step 65"
        );
        assert_eq!(w("timed out\nafter 5m", None), "timed out");
        assert_eq!(TrialStatus::Queued.why(), None);
    }
}
