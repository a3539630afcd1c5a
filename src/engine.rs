//! The one ask/tell engine: ask for a trial for a slot, report → prune decision, finish with an
//! outcome. Synchronous and over the [`Storage`] trait, so that `tune run` (through the async
//! scheduler), `tune ask-tell`, the pruner testkit, the trainer's study tests and the optimizer
//! benchmark all drive the same code, in the way argmin's `Executor` is the one loop of its
//! solvers.
//!
//! What belongs here: turning a claim into a proposal (the sampler), storing reports and
//! asking the pruner, deciding a finished trial's state from how it ended and what it
//! reported, keeping the pruner's view of every trial of the study fresh. What does not: slots,
//! processes, channels, timers and signals (the scheduler), the UI, the CLI.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::pruner::forecast::Place;
use crate::pruner::{Prune, PruneContext, Pruner, PrunerConfig, TrialCurve};
use crate::sampler::{AskContext, Sampler};
use crate::space::{Params, Space};
use crate::storage::{ClaimRequest, NewStudy, Storage, StorageError, StudyRow};
use crate::trial::{
    Direction, FINAL_KEY, GpuTelemetry, Objective, Placement, Ran, Report, ReportNotes, Trial,
    TrialId, TrialNumber, TrialState, TrialStatus, WorkerId,
};

/// A checkpoint an earlier attempt at a trial's params recorded ([`Engine::recorded_checkpoint`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCheckpoint {
    /// The attempt that recorded it.
    pub trial: TrialNumber,
    /// The step it holds everything up to.
    pub step: u64,
    /// The machine it ran on, where stored.
    pub host: Option<String>,
}

/// What the engine needs of a study.
#[derive(Debug, Clone)]
pub struct EngineSpec<'a> {
    pub name: &'a str,
    pub metric: &'a str,
    pub direction: Direction,
    /// The further objectives of a multi-objective study (empty for one).
    pub others: &'a [Objective],
    pub space: &'a Space,
    pub seed: u64,
    /// Trials that end on their own, at most.
    pub budget: Option<u64>,
    /// How long another process's running trial may stay silent before it counts as
    /// interrupted.
    pub heartbeat_grace: Duration,
    pub pruner: &'a PrunerConfig,
    /// The study file and its text, stored with a new study.
    pub file: Option<&'a Path>,
    pub source: Option<&'a str>,
    /// The device of each slot of this process.
    pub slots: &'a [String],
    /// Params to run first (queued once per study, not on every resume).
    pub enqueue: &'a [Params],
}

/// What the pruner says after a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Continue,
    /// Stop the trial: it is clearly losing. It is recorded as pruned when it ends.
    Prune,
    /// Pause the trial (promotion-based ASHA): ask it to checkpoint and stop. It is recorded
    /// as paused when it ends, resumable from that checkpoint (pruned, saying why, when no
    /// checkpoint was recorded). A driver that cannot pause treats it as [`Decision::Prune`].
    Pause,
    /// Population-based training found the trial in the bottom of its point: the driver asks
    /// [`Engine::exploit`] to queue a child from a parent's checkpoint, and stops the trial
    /// when it did (it goes on otherwise: no parent's checkpoint can be read, or no budget).
    Exploit,
}

/// A parent's checkpoint a child of population-based training could start from: the parent,
/// the first attempt at its params (whose run directory keys its checkpoint directory), that
/// directory and the step of its last recorded checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct ParentCheckpoint {
    pub trial: TrialNumber,
    pub first: TrialNumber,
    pub first_run_dir: Option<PathBuf>,
    pub host: Option<String>,
    pub step: u64,
    /// The parent's params (its checkpoints' owner names them).
    pub params: Params,
    /// Whether the parent is still running: only a running trial is a parent, since a finished
    /// one's checkpoint is at its end (nothing left to train) or gone.
    pub running: bool,
}

/// What [`Engine::exploit`] did: the child queued, the parent it continues from, and what
/// the exploited trial's reason says.
#[derive(Debug, Clone, PartialEq)]
pub struct Exploited {
    pub trial: TrialNumber,
    pub child: TrialNumber,
    pub parent: crate::storage::Parent,
    /// Where the parent's checkpoint is: the child's copy is taken from it at once.
    pub from: ParentCheckpoint,
    pub reason: String,
}

/// How a trial ended, as its driver saw it; the engine turns it into a [`TrialStatus`].
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// Ran to its end on its own: complete with its final report's objective (else its last
    /// one), failed when it reported none or a value that is not finite.
    Ended,
    /// Told its value directly (`tune ask-tell`): complete when finite, else failed. A
    /// multi-objective trial takes its further objectives' values from its reports.
    Value(f64),
    /// Told every objective's value directly (`tune ask-tell` on a multi-objective study):
    /// complete when all are finite, else failed.
    Values(Vec<f64>),
    /// Stopped as pruned, with this value (`None`: its last reported one). Its reason is the
    /// pruner's where the pruner decided it, else `reason` (`by the user`).
    Pruned {
        value: Option<f64>,
        reason: Option<String>,
    },
    /// Failed by its own fault.
    Failed {
        reason: String,
        log_tail: Option<String>,
    },
    /// Stopped through no fault of its own: failed as interrupted, its params run again.
    Interrupted { reason: String },
}

/// A trial this engine started and has not finished.
struct Live {
    trial: Trial,
    seq: u64,
    last_step: Option<u64>,
    /// The objective's last intermediate value, and the final report's.
    last_value: Option<f64>,
    final_value: Option<f64>,
    /// Every metric's last value over the reports, and the final report's metrics: where a
    /// multi-objective trial's further objectives come from.
    seen: BTreeMap<String, f64>,
    final_metrics: BTreeMap<String, f64>,
    /// Being stopped already: later reports are stored but not judged.
    stopping: bool,
    /// Why the database refused one of its reports (see `StorageError::Rejected`): the trial
    /// then ends failed, saying so, since its result would rest on a report not stored.
    refused: Option<String>,
    /// What its runner noticed in its output besides the reports (command trials).
    notes: Option<ReportNotes>,
    /// Why the pruner stopped it, once it has ([`Prune`]'s text).
    pruned: Option<String>,
    /// The pruner paused it rather than pruned it ([`Decision::Pause`]).
    pausing: bool,
    /// Population-based training advised exploiting it ([`Decision::Exploit`]): the advice,
    /// until [`Engine::exploit`] takes it.
    exploit: Option<Prune>,
    /// What it used of its GPU, as its driver last summarised it (the scheduler's samples).
    gpu: Option<GpuTelemetry>,
    /// Whether its first report was seen: an attempt that resumed from a checkpoint takes the
    /// earlier attempts' reports up to it then ([`Engine::report`]).
    started: bool,
}

impl Live {
    /// Remembers a report's metrics.
    fn note(&mut self, metrics: &BTreeMap<String, f64>, is_final: bool) {
        let into = if is_final {
            &mut self.final_metrics
        } else {
            &mut self.seen
        };
        into.extend(metrics.iter().map(|(k, v)| (k.clone(), *v)));
    }

    /// Why a trial that ran to its end has no value of `metric`, on the reason's first line
    /// (kept the same from trial to trial of one mistake: no values, no counts, so that
    /// `max_consecutive_failures` sees the same failure), and on the next lines what its
    /// output showed: how many reports, the first malformed report line, a report without its
    /// prefix or on the wrong stream, a step that went backwards.
    fn no_value(&self, metric: &str) -> String {
        let keys: Vec<String> = self
            .seen
            .keys()
            .chain(self.final_metrics.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|k| format!("`{k}`"))
            .collect();
        let mut what = Vec::new();
        if self.seq > 0 && keys.is_empty() {
            what.push("its reports had no metric".to_string());
        } else if self.seq > 0 {
            what.push(format!("its reports had {}", keys.join(", ")));
        }
        let notes = self.notes.clone().unwrap_or_default();
        if notes.malformed > 0 {
            what.push("malformed report lines were ignored".into());
        }
        if notes.unprefixed.is_some() {
            what.push("a line that looks like a report lacks the `tune: ` prefix".into());
        }
        if notes.on_stderr.is_some() {
            what.push("a report-like line went to standard error, not standard output".into());
        }
        if self.seq == 0 && what.is_empty() {
            what.push("no report arrived".into());
        }
        let mut out = format!(
            "no value: the trial ended without reporting `{metric}` ({})",
            what.join("; ")
        );
        if self.notes.is_none() {
            return out;
        }
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        out.push_str(&format!(
            "\n  {} report{} stored{}",
            self.seq,
            plural(self.seq),
            if notes.malformed > 0 {
                format!(
                    ", {} malformed report line{} ignored",
                    notes.malformed,
                    plural(notes.malformed)
                )
            } else {
                String::new()
            }
        ));
        if let Some((line, why)) = &notes.first_malformed {
            out.push_str(&format!("\n  the first malformed line ({why}): {line}"));
        }
        if let Some(line) = &notes.unprefixed {
            out.push_str(&format!(
                "\n  on standard output without the `tune: ` prefix: {line}"
            ));
        }
        if let Some(line) = &notes.on_stderr {
            out.push_str(&format!("\n  on standard error: {line}"));
        }
        if let Some((step, before)) = notes.backwards {
            out.push_str(&format!(
                "\n  a report's step went backwards: step {step} after step {before}"
            ));
        }
        out.push_str(&format!(
            "\n  a report is one line on standard output, such as: tune: {{\"step\": 3, \"{metric}\": 0.42}}"
        ));
        out
    }

    /// A further objective's value: the final report's, else the last reported one.
    fn other(&self, metric: &str) -> Option<f64> {
        self.final_metrics
            .get(metric)
            .or_else(|| self.seen.get(metric))
            .copied()
    }
}

pub struct Engine {
    storage: Box<dyn Storage>,
    study: StudyRow,
    worker: WorkerId,
    space: Space,
    seed: u64,
    budget: Option<u64>,
    grace: Duration,
    sampler: Box<dyn Sampler>,
    pruner: Box<dyn Pruner>,
    /// One pruner per further objective of a multi-objective study (the same rule as
    /// `pruner`, with its own memo): a trial is pruned only when every objective it reports
    /// along the way would prune it.
    other_pruners: Vec<Box<dyn Pruner>>,
    resource: String,
    /// Every trial of the study with reports, as the pruner sees them, sorted by number
    /// (refreshed from storage, so other processes' trials count too). Empty when the pruner
    /// never judges. A slice, so that the pruner reads it in place: cloning every curve on
    /// every report made a long study's reports quadratic.
    curves: Vec<TrialCurve>,
    running: BTreeMap<TrialId, Live>,
    /// The reports a re-run's first report copied from its earlier attempt (`resume_curve`),
    /// until the caller takes them ([`Engine::take_resumed`]) to show them.
    resumed: Vec<Report>,
    /// The promotion the last ask made ([`Engine::take_promotion`]).
    promoted: Option<(TrialNumber, TrialNumber, String)>,
    /// The first attempt of each re-run of the study (for [`PruneContext::origins`]).
    origins: crate::pruner::Origins,
    /// The study's paused trials, as this engine last read or made them (promotion-based
    /// pruners only): the candidates of each ask's promotion.
    paused: std::collections::BTreeSet<TrialNumber>,
    /// The `[pruner]` table of population-based training, where the study has one.
    pbt: Option<crate::pruner::PbtConfig>,
}

impl Engine {
    /// Creates or loads the study in `storage` and registers this process as a worker of it.
    pub fn open(
        mut storage: Box<dyn Storage>,
        spec: &EngineSpec<'_>,
        sampler: Box<dyn Sampler>,
        pruner: Box<dyn Pruner>,
    ) -> Result<Engine, StorageError> {
        let study = storage.create_or_load_study(&NewStudy {
            name: spec.name,
            direction: spec.direction,
            metric: spec.metric,
            others: spec.others,
            file: spec.file,
            source: spec.source,
        })?;
        let worker = storage.register_worker(&study, spec.slots)?;
        for p in spec.enqueue {
            if !storage.has_fixed_params(&study, p)? {
                storage.enqueue(&study, spec.space, p)?;
            }
        }
        let mut engine = Engine {
            storage,
            study,
            worker,
            space: spec.space.clone(),
            seed: spec.seed,
            budget: spec.budget,
            grace: spec.heartbeat_grace,
            sampler,
            pruner,
            other_pruners: spec
                .others
                .iter()
                .map(|_| crate::pruner::build(spec.pruner))
                .collect(),
            resource: spec.pruner.resource().to_string(),
            curves: Vec::new(),
            resumed: Vec::new(),
            promoted: None,
            origins: crate::pruner::Origins::new(),
            paused: std::collections::BTreeSet::new(),
            pbt: match spec.pruner {
                PrunerConfig::Pbt(c) => Some(c.clone()),
                _ => None,
            },
            running: BTreeMap::new(),
        };
        engine.refresh_curves()?;
        Ok(engine)
    }

    pub fn study(&self) -> &StudyRow {
        &self.study
    }

    pub fn storage(&self) -> &dyn Storage {
        self.storage.as_ref()
    }

    pub fn direction(&self) -> Direction {
        self.study.direction
    }

    /// The trials this engine runs now.
    pub fn running(&self) -> impl Iterator<Item = &Trial> {
        self.running.values().map(|l| &l.trial)
    }

    /// Marks running trials whose owner is gone as interrupted (their params run again).
    /// Returns their numbers.
    pub fn recover(&mut self) -> Result<Vec<TrialNumber>, StorageError> {
        let recovered = self.storage.recover_interrupted(&self.study, self.grace)?;
        if !recovered.is_empty() {
            self.refresh_curves()?;
        }
        Ok(recovered)
    }

    /// Stamps this process's running trials as alive, recovers other processes' dead ones and
    /// refreshes the pruner's view of the study.
    pub fn heartbeat(&mut self) -> Result<(), StorageError> {
        let ids: Vec<TrialId> = self.running.keys().copied().collect();
        self.storage.heartbeat(self.worker, &ids)?;
        self.storage.recover_interrupted(&self.study, self.grace)?;
        self.refresh_curves()
    }

    fn refresh_curves(&mut self) -> Result<(), StorageError> {
        if !self.pruner.judges() {
            return Ok(());
        }
        let reports = self.storage.reports(&self.study)?;
        // Interrupted trials are left out: their params run again under a new number, and a
        // rerun must not compete with its own earlier attempt at a rung.
        let trials = self.storage.trials(&self.study, None)?;
        let states: BTreeMap<TrialNumber, (TrialState, bool, Place)> = trials
            .iter()
            .map(|t| {
                let place = Place::of(&self.space, &t.params);
                (t.number, (t.state(), t.status.interrupted(), place))
            })
            .collect();
        self.paused = trials
            .iter()
            .filter(|t| t.status.paused() && !t.discarded)
            .map(|t| t.number)
            .collect();
        self.curves = reports
            .into_iter()
            .filter(|(n, _)| !states.get(n).is_some_and(|s| s.1))
            .map(|(n, reports)| {
                let (state, place) = states
                    .get(&n)
                    .map_or((TrialState::Running, Place::default()), |s| {
                        (s.0, s.2.clone())
                    });
                TrialCurve {
                    number: n,
                    state,
                    reports,
                    place,
                }
            })
            .collect();
        self.curves.sort_by_key(|c| c.number);
        let reruns: BTreeMap<TrialNumber, TrialNumber> =
            self.storage.reruns(&self.study)?.into_iter().collect();
        self.origins = reruns
            .keys()
            .map(|&n| {
                // Back along the chain; each step goes to a lower number, so it ends.
                let mut first = n;
                while let Some(&earlier) = reruns.get(&first).filter(|e| **e < first) {
                    first = earlier;
                }
                (n, first)
            })
            .collect();
        Ok(())
    }

    /// The next trial for `slot` on `device`, running: a queued one, else a new one whose
    /// params the sampler proposes from the study's history. `None` when the budget allows no
    /// more now.
    pub fn ask(&mut self, slot: usize, device: &str) -> Result<Option<Trial>, StorageError> {
        // A paused trial that has earned its promotion goes before any new trial: its re-run is
        // queued, and queued trials are claimed first.
        self.promoted = None;
        self.promote_paused()?;
        let (space, direction, seed) = (&self.space, self.study.direction, self.seed);
        let others: Vec<Direction> = self.study.others.iter().map(|o| o.direction).collect();
        let sampler = &mut self.sampler;
        let mut propose = |history: &crate::storage::History, number: TrialNumber| {
            sampler.ask(&AskContext {
                others: &others,
                space,
                direction,
                history: &history.finished,
                pending: &history.pending,
                trial_number: number,
                seed,
            })
        };
        let req = ClaimRequest {
            worker: self.worker,
            budget: self.budget,
            slot,
            device,
            space: &self.space,
        };
        let Some(trial) = self.storage.claim(&self.study, &req, &mut propose)? else {
            return Ok(None);
        };
        if self.pruner.judges() {
            let first = self.storage.attempt(&self.study, trial.number)?.first;
            if first != trial.number {
                self.origins.insert(trial.number, first);
            }
        }
        self.running.insert(
            trial.id,
            Live {
                trial: trial.clone(),
                seq: 0,
                last_step: None,
                last_value: None,
                final_value: None,
                seen: BTreeMap::new(),
                final_metrics: BTreeMap::new(),
                stopping: false,
                refused: None,
                notes: None,
                pruned: None,
                pausing: false,
                exploit: None,
                gpu: None,
                started: false,
            },
        );
        Ok(Some(trial))
    }

    /// Records that a running trial saved a checkpoint holding everything up to `step`: its
    /// next attempt, if it is interrupted, resumes there and keeps its reports up to it. A
    /// value the database refuses is left out (the next attempt then keeps less of the curve).
    pub fn checkpoint(&mut self, id: TrialId, step: u64) -> Result<(), StorageError> {
        if !self.running.contains_key(&id) {
            return Ok(());
        }
        match self.storage.set_checkpoint_step(id, step) {
            Ok(()) | Err(StorageError::Rejected { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The last checkpoint an earlier attempt at running trial `number`'s params recorded
    /// (following its re-runs back, the latest first): which trial, at what step, on which
    /// host. `None` when none of them recorded one (a first attempt, a script that never
    /// prints a checkpoint line, `checkpoints = false`).
    pub fn recorded_checkpoint(
        &self,
        number: TrialNumber,
    ) -> Result<Option<RecordedCheckpoint>, StorageError> {
        for t in self.earlier_attempts(number)? {
            if let Some(step) = self.storage.checkpoint_step(t.id)? {
                let host = t.status.placement().and_then(|p| p.host.clone());
                return Ok(Some(RecordedCheckpoint {
                    trial: t.number,
                    step,
                    host,
                }));
            }
        }
        Ok(None)
    }

    /// The earlier attempts at trial `number`'s params, following its re-runs back, the
    /// latest first. Each step back goes to a lower number, so a damaged chain cannot loop.
    fn earlier_attempts(&self, number: TrialNumber) -> Result<Vec<Trial>, StorageError> {
        let mut out = Vec::new();
        let mut from = number;
        while let Some(earlier) = self
            .storage
            .retry_of(&self.study, from)?
            .filter(|e| *e < from)
        {
            from = earlier;
            match self.storage.trial(&self.study, earlier)? {
                Some(t) => out.push(t),
                None => break,
            }
        }
        Ok(out)
    }

    /// Running trial `id` starts from scratch although an earlier attempt recorded a
    /// checkpoint (this machine does not see it): none of the earlier attempts' reports is
    /// copied into its curve, whatever step it reports first. Without this, a re-run whose
    /// first report comes late (a script that reports every few steps) would keep the lost
    /// attempt's reports before it, from a run it did not continue.
    pub fn from_scratch(&mut self, id: TrialId) {
        if let Some(live) = self.running.get_mut(&id) {
            live.started = true;
        }
    }

    /// At the first report (step `first`) of a running trial that re-runs interrupted ones:
    /// when the attempts before it checkpoint (one of them recorded a checkpoint), it resumed
    /// from one, so its curve starts with the reports of the latest attempt that made any,
    /// those before `first`, copied into its own. The lost attempt's reports at `first` and
    /// later are not: the trial reports those steps again, and its curve never repeats a step
    /// or goes back. Reports between the recorded checkpoint and `first` are kept: they come
    /// from a checkpoint saved whose line was cut off (killed between the save and the line),
    /// and the trial goes on from their state. A script that starts over (its first step at
    /// the start) keeps nothing; a script that never checkpoints keeps nothing, as before.
    fn resume_curve(&mut self, id: TrialId, first: u64) -> Result<(), StorageError> {
        let Some(live) = self.running.get_mut(&id) else {
            return Ok(());
        };
        live.started = true;
        let number = live.trial.number;
        let mut checkpointed = false;
        let mut source: Option<Vec<crate::storage::StoredReport>> = None;
        for t in self.earlier_attempts(number)? {
            checkpointed |= self.storage.checkpoint_step(t.id)?.is_some();
            if source.is_none() {
                let reports = self.storage.trial_reports(t.id)?;
                if !reports.is_empty() {
                    source = Some(reports);
                }
            }
            if checkpointed && source.is_some() {
                break;
            }
        }
        let (true, Some(source)) = (checkpointed, source) else {
            return Ok(());
        };
        let keep: Vec<Report> = source
            .into_iter()
            .filter(|r| !r.is_final && r.report.step < first)
            .map(|r| r.report)
            .collect();
        let metric = self.study.metric.clone();
        for report in keep {
            let Some(live) = self.running.get_mut(&id) else {
                return Ok(());
            };
            match self
                .storage
                .add_report(id, live.seq, &report, false, &metric)
            {
                Ok(()) => {}
                Err(StorageError::Rejected { .. }) => continue,
                Err(e) => return Err(e),
            }
            live.seq += 1;
            live.note(&report.metrics, false);
            live.last_step = Some(report.step);
            let value = report.metrics.get(&metric).copied();
            if value.is_some() {
                live.last_value = value;
            }
            self.resumed.push(report.clone());
            if value.is_some() && self.pruner.judges() {
                self.running_curve(number).reports.push(report);
            }
        }
        Ok(())
    }

    /// The pruner's view of running trial `number`'s curve, made on its first report.
    fn running_curve(&mut self, number: TrialNumber) -> &mut TrialCurve {
        let at = match self.curves.binary_search_by_key(&number, |c| c.number) {
            Ok(i) => i,
            Err(i) => {
                let place = self
                    .running
                    .values()
                    .find(|l| l.trial.number == number)
                    .map_or_else(Place::default, |l| Place::of(&self.space, &l.trial.params));
                self.curves.insert(
                    i,
                    TrialCurve {
                        number,
                        state: TrialState::Running,
                        reports: Vec::new(),
                        place,
                    },
                );
                i
            }
        };
        let curve = &mut self.curves[at];
        curve.state = TrialState::Running;
        curve
    }

    /// Records what a running trial's runner noticed in its output besides the reports, for
    /// the message if it ends without a value.
    pub fn note_output(&mut self, id: TrialId, notes: ReportNotes) {
        if let Some(l) = self.running.get_mut(&id) {
            l.notes = Some(notes);
        }
    }

    /// Records what a running trial has used of its GPU so far (the latest summary wins); it is
    /// stored with the trial when it ends.
    pub fn note_gpu(&mut self, id: TrialId, gpu: GpuTelemetry) {
        if let Some(l) = self.running.get_mut(&id) {
            l.gpu = Some(gpu);
        }
    }

    /// Which attempt at its params trial `number` is, and the number of its first run.
    pub fn attempt(&self, number: TrialNumber) -> Result<crate::storage::Attempt, StorageError> {
        self.storage.attempt(&self.study, number)
    }

    /// The directory a trial's first run logged to (its stable run directory), where stored.
    pub fn trial_dir_of(&self, number: TrialNumber) -> Result<Option<PathBuf>, StorageError> {
        Ok(self
            .storage
            .trial(&self.study, number)?
            .and_then(|t| t.trial_dir))
    }

    /// Records where a running trial logs.
    pub fn set_trial_dir(&mut self, id: TrialId, dir: &Path) -> Result<(), StorageError> {
        self.storage.set_trial_dir(id, dir)?;
        if let Some(l) = self.running.get_mut(&id) {
            l.trial.trial_dir = Some(dir.to_path_buf());
        }
        Ok(())
    }

    /// The reports that the last [`Engine::report`] copied into a resumed trial's curve from
    /// its earlier attempt (those before the checkpoint it resumed from), in step order; empty
    /// otherwise. Whoever shows a running trial's curve (the live UI, the predictions) emits
    /// them before the report itself, so the curve is whole there too, not only in storage.
    pub fn take_resumed(&mut self) -> Vec<Report> {
        std::mem::take(&mut self.resumed)
    }

    /// Stores a report of a running trial and asks the pruner about it. A report marked
    /// final (`"final": true`) is stored as such and never judged.
    pub fn report(&mut self, id: TrialId, mut report: Report) -> Result<Decision, StorageError> {
        self.resumed.clear();
        if self.running.get(&id).is_some_and(|l| !l.started) {
            self.resume_curve(id, report.step)?;
        }
        let Some(live) = self.running.get_mut(&id) else {
            return Ok(Decision::Continue);
        };
        let is_final = report.metrics.remove(FINAL_KEY).is_some();
        match self
            .storage
            .add_report(id, live.seq, &report, is_final, &self.study.metric)
        {
            Ok(()) => {}
            // The trial's own data, not the database's fault: the study goes on, and the
            // trial ends failed with the reason (see `finish`).
            Err(StorageError::Rejected { message, .. }) => {
                live.refused.get_or_insert_with(|| {
                    format!(
                        "the database refused a report of this trial (step {}): {message}",
                        report.step
                    )
                });
                return Ok(Decision::Continue);
            }
            Err(e) => return Err(e),
        }
        live.seq += 1;
        live.trial.metrics = report.metrics.clone();
        live.note(&report.metrics, is_final);
        let value = report.metrics.get(&self.study.metric).copied();
        if is_final {
            live.final_value = value.or(live.final_value);
        } else {
            live.last_step = Some(report.step);
            if value.is_some() {
                live.last_value = value;
            }
        }
        if is_final || value.is_none() || live.stopping || !self.pruner.judges() {
            return Ok(Decision::Continue);
        }
        let number = live.trial.number;
        self.running_curve(number).reports.push(report);
        let Some(prune) = self.verdict(number) else {
            return Ok(Decision::Continue);
        };
        if matches!(prune.why, crate::pruner::PruneWhy::Exploit { .. }) {
            if let Some(live) = self.running.get_mut(&id) {
                live.exploit = Some(prune);
            }
            return Ok(Decision::Exploit);
        }
        // A diverged trial is pruned even where the pruner pauses: it cannot climb.
        let pause = self.pruner.pauses() && prune.why != crate::pruner::PruneWhy::NotANumber;
        if let Some(live) = self.running.get_mut(&id) {
            live.stopping = true;
            live.pausing = pause;
            live.pruned = Some(prune.to_string());
        }
        Ok(if pause {
            Decision::Pause
        } else {
            Decision::Prune
        })
    }

    /// Acts on the advice of population-based training for running trial `id`
    /// ([`Decision::Exploit`]): takes the first of its candidate parents (best first) still running that has
    /// recorded a checkpoint that `take` can read here, explores the parent's params, queues
    /// the child (its parent recorded with it) and marks the trial as stopping, pruned with
    /// the reason. `take` says the step of the checkpoint the child will copy (the recorded
    /// one, or a newer one that the parent has saved since and that was frozen for the
    /// child), `None` where it cannot be read. `None`, and the trial goes on, where no parent
    /// qualifies or the budget has no room for the child (the trial is counted; so is the
    /// child).
    pub fn exploit(
        &mut self,
        id: TrialId,
        mut take: impl FnMut(&ParentCheckpoint) -> Option<u64>,
    ) -> Result<Option<Exploited>, StorageError> {
        let Some(config) = self.pbt.clone() else {
            return Ok(None);
        };
        let Some(live) = self.running.get_mut(&id) else {
            return Ok(None);
        };
        let Some(prune) = live.exploit.take() else {
            return Ok(None);
        };
        let number = live.trial.number;
        let crate::pruner::PruneWhy::Exploit { parents, .. } = &prune.why else {
            return Ok(None);
        };
        if let Some(budget) = self.budget {
            let taken = self.storage.counted(&self.study)?
                + self.storage.count_state(&self.study, TrialState::Queued)?
                + self.storage.count_state(&self.study, TrialState::Running)?;
            if taken >= budget {
                return Ok(None);
            }
        }
        let mut chosen = None;
        for &p in parents {
            if let Some(mut c) = self.parent_checkpoint(p)?
                && c.running
                && let Some(step) = take(&c)
            {
                c.step = step;
                chosen = Some(c);
                break;
            }
        }
        let Some(c) = chosen else {
            return Ok(None);
        };
        let parent_params = c.params.clone();
        let all: Vec<String> = self.space.params().iter().map(|p| p.name.clone()).collect();
        let mutate = config.mutate.as_deref().unwrap_or(&all);
        // Another child of the same trial at the same point explores the same way; any other
        // differs.
        let seed = self
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(number.0.wrapping_mul(1_000_003))
            .wrapping_add(prune.at.to_bits());
        let (params, changes) =
            crate::pruner::pbt::explore(&self.space, &parent_params, mutate, &config, seed);
        let parent = crate::storage::Parent {
            trial: c.trial,
            step: c.step,
        };
        let child = self
            .storage
            .enqueue_child(&self.study, &self.space, &params, parent)?;
        let explored = if changes.is_empty() {
            "its params unchanged".to_string()
        } else {
            changes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let reason = format!(
            "{prune}: exploited; trial {child} continues from trial {}'s checkpoint at step {} with {explored}",
            c.trial, c.step
        );
        if let Some(live) = self.running.get_mut(&id) {
            live.stopping = true;
            live.pruned = Some(reason.clone());
        }
        Ok(Some(Exploited {
            trial: number,
            child,
            parent,
            from: c,
            reason,
        }))
    }

    /// The trial a child of population-based training continues from, `None` for any other.
    pub fn parent_of(
        &self,
        number: TrialNumber,
    ) -> Result<Option<crate::storage::Parent>, StorageError> {
        if self.pbt.is_none() {
            return Ok(None);
        }
        Ok(self
            .storage
            .lineage(&self.study)?
            .into_iter()
            .find(|l| l.child == number)
            .map(|l| l.parent))
    }

    /// Where a parent's checkpoints are, and the step of its last one, for a child starting
    /// now: `None` when the parent is gone.
    pub fn parent_checkpoint(
        &self,
        parent: TrialNumber,
    ) -> Result<Option<ParentCheckpoint>, StorageError> {
        let Some(t) = self.storage.trial(&self.study, parent)? else {
            return Ok(None);
        };
        let Some(step) = self.storage.checkpoint_step(t.id)? else {
            return Ok(None);
        };
        let first = self.storage.attempt(&self.study, parent)?.first;
        let first_run_dir = if first == parent {
            t.trial_dir.clone()
        } else {
            self.trial_dir_of(first)?
        };
        Ok(Some(ParentCheckpoint {
            trial: parent,
            first,
            first_run_dir,
            host: t.status.placement().and_then(|p| p.host.clone()),
            step,
            running: t.state() == TrialState::Running,
            params: t.params,
        }))
    }

    /// Records the step of the parent's checkpoint a starting child actually copied.
    pub fn set_parent(
        &mut self,
        id: TrialId,
        parent: crate::storage::Parent,
    ) -> Result<(), StorageError> {
        self.storage.set_parent(id, parent)
    }

    /// Resumes the paused trial that has earned it most, if any (promotion-based ASHA): it
    /// becomes an earlier attempt and its params are queued again, to resume from its
    /// checkpoint on the next claim ([`Engine::take_promotion`] says which).
    fn promote_paused(&mut self) -> Result<(), StorageError> {
        if !self.pruner.pauses() || !self.pruner.judges() {
            return Ok(());
        }
        let paused: Vec<TrialNumber> = self.paused.iter().copied().collect();
        let Some(&any) = paused.first() else {
            return Ok(());
        };
        let ctx = PruneContext {
            direction: self.study.direction,
            metric: &self.study.metric,
            resource: &self.resource,
            trial: any,
            trials: &self.curves,
            origins: &self.origins,
        };
        let Some(promotion) = self.pruner.promotion(&ctx, &paused) else {
            return Ok(());
        };
        let reason = format!(
            "interrupted: paused, then promoted ({promotion}); its re-run resumes from its checkpoint"
        );
        // Promoted now, or by another process first: no longer a candidate either way.
        self.paused.remove(&promotion.trial);
        let Some(rerun) = self
            .storage
            .promote(&self.study, promotion.trial, &reason)?
        else {
            // Another process promoted it first: its curve leaves the rungs on the next
            // refresh.
            return Ok(());
        };
        // Its re-run carries its curve on from here (it competes at no rung against itself).
        if let Ok(i) = self
            .curves
            .binary_search_by_key(&promotion.trial, |c| c.number)
        {
            self.curves.remove(i);
        }
        self.promoted = Some((promotion.trial, rerun, promotion.to_string()));
        Ok(())
    }

    /// The promotion the last [`Engine::ask`] made, if it made one: the paused trial, its
    /// re-run and why (`rung 0: 2nd of 6 trials there, in the top 1/3`).
    pub fn take_promotion(&mut self) -> Option<(TrialNumber, TrialNumber, String)> {
        self.promoted.take()
    }

    /// Why the pruner advised running trial `id` to stop, once it has (the text stored with
    /// the trial when it ends pruned); `None` while it may go on.
    pub fn prune_reason(&self, id: TrialId) -> Option<&str> {
        self.running.get(&id)?.pruned.as_deref()
    }

    /// What the pruner says of trial `number` now, from every trial of the study as this
    /// engine last read them. Asking twice gives the same answer.
    ///
    /// A multi-objective study asks the rule once per objective that the trial reports along
    /// the way (the first always) and prunes only when every one says so: a trial among the
    /// best on any objective is a candidate for the Pareto front and runs on.
    pub fn judge(&mut self, number: TrialNumber) -> Decision {
        match self.verdict(number) {
            Some(_) => Decision::Prune,
            None => Decision::Continue,
        }
    }

    /// [`Engine::judge`] with the reason: the first objective's where every objective says
    /// to prune.
    fn verdict(&mut self, number: TrialNumber) -> Option<Prune> {
        let trials = self.curves.as_slice();
        let own = trials
            .binary_search_by_key(&number, |c| c.number)
            .ok()
            .map(|i| &trials[i]);
        let reports = |metric: &str| {
            own.is_some_and(|t| t.reports.iter().any(|r| r.metrics.contains_key(metric)))
        };
        let first = std::iter::once((&self.study.metric, self.study.direction, &mut self.pruner));
        let others = self
            .study
            .others
            .iter()
            .zip(self.other_pruners.iter_mut())
            .map(|(o, p)| (&o.metric, o.direction, p))
            .filter(|(m, _, _)| reports(m));
        let mut reason = None;
        for (metric, direction, pruner) in first.chain(others) {
            let ctx = PruneContext {
                direction,
                metric,
                resource: &self.resource,
                trial: number,
                trials,
                origins: &self.origins,
            };
            let prune = pruner.decide(&ctx)?;
            reason.get_or_insert(prune);
        }
        reason
    }

    /// Takes over running trial `number` of the study, whose run goes on while the engine
    /// that claimed it is gone (a study reopened by another process that keeps driving the
    /// same run, as the pruner testkit's resumed studies do). Its stored reports count.
    pub fn adopt(&mut self, number: TrialNumber) -> Result<Trial, StorageError> {
        let trial = self
            .storage
            .trial(&self.study, number)?
            .filter(|t| t.state() == TrialState::Running)
            .ok_or_else(|| StorageError::Conflict {
                path: PathBuf::from(self.storage.location()),
                message: format!("trial {number} is not running"),
            })?;
        let stored = self.storage.trial_reports(trial.id)?;
        let metric = &self.study.metric;
        let mut live = Live {
            trial: trial.clone(),
            seq: stored.len() as u64,
            last_step: None,
            last_value: None,
            final_value: None,
            seen: BTreeMap::new(),
            final_metrics: BTreeMap::new(),
            stopping: false,
            refused: None,
            notes: None,
            pruned: None,
            pausing: false,
            exploit: None,
            gpu: None,
            started: !stored.is_empty(),
        };
        for r in stored {
            live.note(&r.report.metrics, r.is_final);
            let value = r.report.metrics.get(metric).copied();
            if r.is_final {
                live.final_value = value.or(live.final_value);
            } else {
                live.last_step = Some(r.report.step);
                live.last_value = value.or(live.last_value);
            }
        }
        self.running.insert(trial.id, live);
        Ok(trial)
    }

    /// A running trial is being stopped (by the user, or the study): its later reports are
    /// stored but no longer judged.
    pub fn stopping(&mut self, id: TrialId) {
        if let Some(l) = self.running.get_mut(&id) {
            l.stopping = true;
        }
    }

    /// Ends a running trial and returns it as stored.
    pub fn finish(
        &mut self,
        id: TrialId,
        how: Finish,
        logs: &[PathBuf],
    ) -> Result<Trial, StorageError> {
        let Some(live) = self.running.remove(&id) else {
            return Err(StorageError::Conflict {
                path: PathBuf::from(self.storage.location()),
                message: format!("trial id {} is not running in this process", id.0),
            });
        };
        let metric = &self.study.metric;
        let ran = match &live.trial.status {
            TrialStatus::Running { at, started } => Ran {
                at: at.clone(),
                started: *started,
                finished: Some(SystemTime::now()),
                gpu: live.gpu,
            },
            _ => Ran {
                at: Placement::default(),
                started: None,
                finished: Some(SystemTime::now()),
                gpu: live.gpu,
            },
        };
        let failed = |reason: String| TrialStatus::Failed {
            reason,
            log_tail: None,
            interrupted: false,
            ran: ran.clone(),
        };
        // Every objective's value, or why the trial failed: the first objective's from `first`,
        // the further ones' from `others` (else from the reports).
        let valued = |first: Option<f64>, others: Option<Vec<f64>>| {
            let mut values = vec![(metric.as_str(), first)];
            for (i, o) in self.study.others.iter().enumerate() {
                let v = match &others {
                    Some(given) => given.get(i).copied(),
                    None => live.other(&o.metric),
                };
                values.push((o.metric.as_str(), v));
            }
            for (m, v) in &values {
                match v {
                    None => return failed(live.no_value(m)),
                    Some(v) if !v.is_finite() => {
                        return failed(format!("the value of `{m}` is {v}, not a finite number"));
                    }
                    Some(_) => {}
                }
            }
            let mut values = values.into_iter().map(|(_, v)| v.unwrap_or(f64::NAN));
            TrialStatus::Complete {
                value: values.next().unwrap_or(f64::NAN),
                others: values.collect(),
                ran: ran.clone(),
            }
        };
        let status = match how {
            Finish::Ended => valued(live.final_value.or(live.last_value), None),
            Finish::Value(v) => valued(Some(v), None),
            Finish::Values(vs) => {
                let k = self.study.others.len() + 1;
                if vs.len() == k {
                    valued(vs.first().copied(), Some(vs[1..].to_vec()))
                } else {
                    failed(format!(
                        "{} values told for a study with {k} objectives",
                        vs.len()
                    ))
                }
            }
            Finish::Pruned { value, reason } => {
                let mut reason = live.pruned.clone().or(reason);
                // Paused only where it can resume: some attempt at its params recorded a
                // checkpoint. Otherwise a resumption would start over, so it is pruned, and
                // its reason says why.
                let paused = live.pausing && {
                    let own = self.storage.checkpoint_step(id)?.is_some();
                    own || self.recorded_checkpoint(live.trial.number)?.is_some()
                };
                if live.pausing && !paused {
                    reason = reason.map(|r| {
                        format!("{r}; not paused: it recorded no checkpoint to resume from")
                    });
                }
                TrialStatus::Pruned {
                    value: value.or(live.last_value),
                    step: live.last_step,
                    reason,
                    paused,
                    ran: ran.clone(),
                }
            }
            Finish::Failed { reason, log_tail } => TrialStatus::Failed {
                reason,
                log_tail: log_tail.map(crate::trial::bound_log_tail),
                interrupted: false,
                ran: ran.clone(),
            },
            Finish::Interrupted { reason } => TrialStatus::Failed {
                reason,
                log_tail: None,
                interrupted: true,
                ran: ran.clone(),
            },
        };
        let status = match live.refused.clone() {
            Some(why) if !status.interrupted() => failed(why),
            _ => status,
        };
        let status = match self.storage.finish_trial(id, &status, logs) {
            Ok(()) => status,
            // What the trial wrote (its tail, its reason) was refused: it is recorded failed
            // without it, so that it neither stays `running` nor stops the study, and is not
            // run again only to be refused again.
            Err(StorageError::Rejected { message, .. }) => {
                let bare = failed(format!(
                    "the database refused what this trial wrote, so it is stored without it: {message}"
                ));
                self.storage.finish_trial(id, &bare, logs)?;
                bare
            }
            Err(e) => return Err(e),
        };
        let mut trial = live.trial;
        if status.paused() {
            self.paused.insert(trial.number);
        }
        if let Ok(i) = self
            .curves
            .binary_search_by_key(&trial.number, |c| c.number)
        {
            if status.interrupted() {
                self.curves.remove(i);
            } else {
                self.curves[i].state = status.state();
            }
        }
        trial.status = status;
        trial.logs = logs.to_vec();
        Ok(trial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pruner::{AshaConfig, build as build_pruner};
    use crate::sampler::{SamplerKind, build as build_sampler};
    use crate::storage::{MemoryStorage, SqliteStorage};

    fn space() -> Space {
        let t: toml::Table =
            toml::from_str(r#"x = { type = "float", low = 0.0, high = 1.0 }"#).expect("toml");
        Space::from_toml(&t).expect("space")
    }

    fn engine(storage: Box<dyn Storage>, budget: Option<u64>, pruner: &PrunerConfig) -> Engine {
        let space = space();
        let spec = EngineSpec {
            others: &[],
            name: "s",
            metric: "loss",
            direction: Direction::Minimize,
            space: &space,
            seed: 7,
            budget,
            heartbeat_grace: Duration::from_secs(60),
            pruner,
            file: None,
            source: None,
            slots: &["cpu".to_string()],
            enqueue: &[],
        };
        Engine::open(
            storage,
            &spec,
            build_sampler(SamplerKind::Random),
            build_pruner(pruner),
        )
        .expect("engine")
    }

    fn report(step: u64, loss: f64) -> Report {
        Report {
            step,
            metrics: BTreeMap::from([("loss".to_string(), loss)]),
        }
    }

    fn backends() -> Vec<(Box<dyn Storage>, Option<tempfile::TempDir>)> {
        let dir = tempfile::tempdir().expect("temp dir");
        let sqlite = SqliteStorage::open(&dir.path().join("t.db")).expect("sqlite");
        vec![
            (Box::new(MemoryStorage::new()), None),
            (Box::new(sqlite), Some(dir)),
        ]
    }

    /// The pruner sees where every trial sits in the search space, running ones from their
    /// first report and the others as read back from storage, so that a forecast can tell a
    /// trial near complete ones from one in a region none of them has seen.
    #[test]
    fn the_pruner_sees_each_trials_place_in_the_space() {
        use crate::pruner::forecast::Place;
        for (storage, _dir) in backends() {
            let pruner = PrunerConfig::Forecast(crate::pruner::ForecastConfig {
                max_resource: Some(10.0),
                resource: "step".into(),
                ..crate::pruner::ForecastConfig::default()
            });
            let mut e = engine(storage, Some(3), &pruner);
            let t0 = e.ask(0, "cpu").expect("ask").expect("a trial");
            let t1 = e.ask(0, "cpu").expect("ask").expect("a trial");
            e.report(t0.id, report(1, 0.5)).expect("r");
            e.report(t1.id, report(1, 0.4)).expect("r");
            let want = |t: &Trial| Place::of(&space(), &t.params);
            let place = |e: &Engine, t: &Trial| {
                e.curves
                    .iter()
                    .find(|c| c.number == t.number)
                    .map(|c| c.place.clone())
            };
            assert_eq!(place(&e, &t0), Some(want(&t0)));
            assert_ne!(want(&t0), want(&t1));
            e.finish(t0.id, Finish::Ended, &[]).expect("finish");
            e.heartbeat().expect("refresh from storage");
            assert_eq!(place(&e, &t0), Some(want(&t0)));
            assert_eq!(place(&e, &t1), Some(want(&t1)));
            assert_ne!(want(&t0), Place::default());
        }
    }

    /// Population-based training through the engine: a parent whose checkpoint the driver
    /// cannot read is passed over (the trial goes on), and the child's record and the
    /// exploited trial's reason name the step of the checkpoint the driver says the child
    /// copies: a builtin parent's, frozen when it is exploited, is often newer than the one
    /// its last checkpoint message recorded.
    #[test]
    fn a_pbt_child_records_the_step_of_the_checkpoint_it_copies_not_the_last_recorded_one() {
        for (storage, _dir) in backends() {
            let pruner = PrunerConfig::Pbt(crate::pruner::PbtConfig {
                interval: 2.0,
                quantile: 0.5,
                resample_probability: 0.0,
                ..crate::pruner::PbtConfig::default()
            });
            let mut e = engine(storage, Some(4), &pruner);
            let t0 = e.ask(0, "cpu").expect("ask").expect("a trial");
            let t1 = e.ask(0, "cpu").expect("ask").expect("a trial");
            for (step, loss) in [(1, 0.2), (2, 0.1)] {
                assert_eq!(
                    e.report(t0.id, report(step, loss)).expect("r"),
                    Decision::Continue
                );
            }
            e.checkpoint(t0.id, 2).expect("checkpoint");
            assert_eq!(
                e.report(t1.id, report(1, 0.6)).expect("r"),
                Decision::Continue
            );
            assert_eq!(
                e.report(t1.id, report(2, 0.5)).expect("r"),
                Decision::Exploit
            );
            assert_eq!(e.exploit(t1.id, |_| None).expect("exploit"), None);
            // At the next point the parent's checkpoint can be read, and the driver froze a
            // newer one than the recorded step 4.
            for (step, loss) in [(3, 0.09), (4, 0.08)] {
                e.report(t0.id, report(step, loss)).expect("r");
            }
            e.checkpoint(t0.id, 4).expect("checkpoint");
            e.report(t1.id, report(3, 0.5)).expect("r");
            assert_eq!(
                e.report(t1.id, report(4, 0.5)).expect("r"),
                Decision::Exploit
            );
            let x = e
                .exploit(t1.id, |c| {
                    assert_eq!((c.trial, c.step), (t0.number, 4));
                    Some(5)
                })
                .expect("exploit")
                .expect("exploited");
            let parent = crate::storage::Parent {
                trial: t0.number,
                step: 5,
            };
            assert_eq!((x.trial, x.parent, x.from.step), (t1.number, parent, 5));
            assert!(
                x.reason.contains(&format!(
                    "exploited; trial {} continues from trial {}'s checkpoint at step 5 with",
                    x.child, t0.number
                )),
                "{}",
                x.reason
            );
            assert_eq!(e.parent_of(x.child).expect("lineage"), Some(parent));
        }
    }

    /// Promotion-based ASHA through the engine: a trial outside the top at a rung gets
    /// `Pause`; it is recorded paused when it recorded a checkpoint and pruned (saying why)
    /// when it did not; once enough trials rank below it, the next ask promotes it: its re-run
    /// comes before any new trial, within the budget, and resumes its curve.
    #[test]
    fn a_paused_trial_is_promoted_by_a_later_ask_and_its_rerun_carries_its_curve_on() {
        for (storage, _dir) in backends() {
            let pruner = PrunerConfig::Asha(AshaConfig {
                max_resource: Some(9.0),
                mode: crate::pruner::AshaMode::Promote,
                ..AshaConfig::default()
            });
            let mut e = engine(storage, Some(8), &pruner);
            // Trial 0 leads rung 0 (step 1) and completes.
            let t0 = e.ask(0, "cpu").expect("ask").expect("a trial");
            assert_eq!(
                e.report(t0.id, report(1, 0.1)).expect("r"),
                Decision::Continue
            );
            e.finish(t0.id, Finish::Ended, &[]).expect("finish");
            // Trial 1 ranks 2nd of 2: paused, with its checkpoint at step 1.
            let t1 = e.ask(0, "cpu").expect("ask").expect("a trial");
            assert_eq!(e.report(t1.id, report(1, 0.3)).expect("r"), Decision::Pause);
            e.checkpoint(t1.id, 1).expect("checkpoint");
            let paused = e
                .finish(
                    t1.id,
                    Finish::Pruned {
                        value: None,
                        reason: None,
                    },
                    &[],
                )
                .expect("finish");
            assert!(paused.status.paused(), "{:?}", paused.status);
            // Trial 2 ranks 3rd of 3 and saved no checkpoint: pruned, and says why.
            let t2 = e.ask(0, "cpu").expect("ask").expect("a trial");
            assert_eq!(e.report(t2.id, report(1, 0.5)).expect("r"), Decision::Pause);
            let pruned = e
                .finish(
                    t2.id,
                    Finish::Pruned {
                        value: None,
                        reason: None,
                    },
                    &[],
                )
                .expect("finish");
            assert!(!pruned.status.paused());
            assert!(
                pruned.status.pruned_reason().is_some_and(
                    |r| r.ends_with("not paused: it recorded no checkpoint to resume from")
                ),
                "{:?}",
                pruned.status
            );
            // Trials 3 to 5 rank below trial 1: at 6 trials the top 2 go on, and trial 1 is
            // 2nd. Each of them pauses (checkpointed) in turn.
            for v in [0.6, 0.7, 0.8] {
                let t = e.ask(0, "cpu").expect("ask").expect("a trial");
                assert_ne!(t.params, t1.params, "not yet promoted");
                assert_eq!(e.report(t.id, report(1, v)).expect("r"), Decision::Pause);
                e.checkpoint(t.id, 1).expect("checkpoint");
                e.finish(
                    t.id,
                    Finish::Pruned {
                        value: None,
                        reason: None,
                    },
                    &[],
                )
                .expect("finish");
            }
            let counted = e.storage().counted(e.study()).expect("counted");
            let rerun = e.ask(0, "cpu").expect("ask").expect("the promoted re-run");
            assert_eq!(rerun.params, t1.params);
            assert_eq!(
                e.storage()
                    .retry_of(e.study(), rerun.number)
                    .expect("retry of"),
                Some(t1.number)
            );
            let earlier = e
                .storage()
                .trial(e.study(), t1.number)
                .expect("read")
                .expect("t1");
            assert!(earlier.status.interrupted(), "{:?}", earlier.status);
            assert_eq!(
                e.storage().counted(e.study()).expect("counted"),
                counted - 1,
                "the promoted attempt leaves the budget; its re-run runs in its place"
            );
            // Its first own report (step 2) brings trial 1's report at step 1 into its curve.
            assert_eq!(
                e.report(rerun.id, report(2, 0.25)).expect("r"),
                Decision::Continue
            );
            let steps: Vec<u64> = e.take_resumed().iter().map(|r| r.step).collect();
            assert_eq!(steps, vec![1]);
            // No other trial has reached rung 1 (step 3): first there, it goes on.
            assert_eq!(
                e.report(rerun.id, report(3, 0.2)).expect("r"),
                Decision::Continue
            );
        }
    }

    #[test]
    fn an_exploited_trial_queues_a_child_of_the_best_readable_parent_within_the_budget() {
        let pruner = PrunerConfig::Pbt(crate::pruner::PbtConfig {
            interval: 2.0,
            quantile: 0.5,
            resample_probability: 0.0,
            max_resource: Some(9.0),
            ..crate::pruner::PbtConfig::default()
        });
        // Three trials side by side, reporting steps `from..=to` in turn: at each point 1 is
        // the best, 0 next, and 2 (reporting last) the worst of three.
        let steps = |e: &mut Engine, t: &[Trial], from: u64, to: u64| -> Decision {
            let mut last = Decision::Continue;
            for (i, v) in [0.2, 0.1, 0.8].into_iter().enumerate() {
                for step in from..=to {
                    let d = e.report(t[i].id, report(step, v)).expect("report");
                    if i < 2 {
                        assert_eq!(d, Decision::Continue, "trial {i} at step {step}");
                    }
                    last = d;
                }
            }
            last
        };
        for (storage, _dir) in backends() {
            let mut e = engine(storage, Some(4), &pruner);
            let t: Vec<Trial> = (0..3)
                .map(|_| e.ask(0, "cpu").expect("ask").expect("a trial"))
                .collect();
            assert_eq!(steps(&mut e, &t, 1, 2), Decision::Exploit);
            // Its only candidate parent (trial 1) recorded no checkpoint: no exploit, it goes on.
            assert_eq!(e.exploit(t[2].id, |c| Some(c.step)).expect("exploit"), None);
            assert_eq!(e.prune_reason(t[2].id), None);
            e.checkpoint(t[1].id, 4).expect("checkpoint");
            assert_eq!(steps(&mut e, &t, 3, 4), Decision::Exploit);
            // A parent this machine cannot read is passed over.
            assert_eq!(e.exploit(t[2].id, |_| None).expect("exploit"), None);
            e.checkpoint(t[1].id, 6).expect("checkpoint");
            assert_eq!(steps(&mut e, &t, 5, 6), Decision::Exploit);
            let x = e
                .exploit(t[2].id, |c| (c.trial == t[1].number).then_some(c.step))
                .expect("exploit")
                .expect("exploited");
            assert_eq!((x.parent.trial, x.parent.step), (t[1].number, 6));
            let reason = e.prune_reason(t[2].id).expect("stopping, with its reason");
            assert!(
                reason.starts_with("at step 6 (3rd of 3 trials there, in the bottom 1/2): exploited; trial 3 continues from trial 1's checkpoint at step 6 with "),
                "{reason}"
            );
            assert_eq!(e.parent_of(x.child).expect("parent"), Some(x.parent));
            // The child is claimed next, with the parent's params, `x` perturbed (kept in
            // [0, 1]).
            let child = e.ask(0, "cpu").expect("ask").expect("the child");
            assert_eq!(child.number, x.child);
            let x_of = |p: &Params| p["x"].as_f64().expect("x");
            let (was, now) = (x_of(&t[1].params), x_of(&child.params));
            assert!(
                [0.8, 1.2]
                    .iter()
                    .any(|r| (now - (was * r).min(1.0)).abs() < 1e-9),
                "{was} → {now}"
            );
        }
        // With a budget of 3 there is no room for a child: no exploit.
        let (storage, _dir) = backends().remove(0);
        let mut e = engine(storage, Some(3), &pruner);
        let t: Vec<Trial> = (0..3)
            .map(|_| e.ask(0, "cpu").expect("ask").expect("a trial"))
            .collect();
        e.checkpoint(t[1].id, 1).expect("checkpoint");
        assert_eq!(steps(&mut e, &t, 1, 2), Decision::Exploit);
        assert_eq!(e.exploit(t[2].id, |c| Some(c.step)).expect("exploit"), None);
        assert_eq!(e.prune_reason(t[2].id), None);
    }

    #[test]
    fn an_engine_asks_until_the_budget_is_spent_and_numbers_trials_once_each() {
        for (storage, _dir) in backends() {
            let mut e = engine(storage, Some(3), &PrunerConfig::None);
            let mut numbers = Vec::new();
            while let Some(t) = e.ask(0, "cpu").expect("ask") {
                numbers.push(t.number.0);
                e.report(t.id, report(1, t.number.0 as f64))
                    .expect("report");
                let done = e.finish(t.id, Finish::Ended, &[]).expect("finish");
                assert_eq!(done.value(), Some(t.number.0 as f64));
            }
            assert_eq!(numbers, vec![0, 1, 2]);
            assert_eq!(
                e.storage().best(e.study()).expect("best"),
                Some((TrialNumber(0), 0.0))
            );
        }
    }

    #[test]
    fn reports_without_a_pruner_keep_no_curves_and_stay_cheap_however_many_came_before() {
        // Every report used to clone every curve for the pruner, even with none: 50 000
        // reports of one trial were 1.25e9 report clones (minutes); now each costs its store.
        let mut e = engine(Box::new(MemoryStorage::new()), None, &PrunerConfig::None);
        let t = e.ask(0, "cpu").expect("ask").expect("a trial");
        for i in 0..50_000u64 {
            let d = e
                .report(t.id, report(i, 1.0 / (i + 1) as f64))
                .expect("report");
            assert_eq!(d, Decision::Continue);
        }
        assert!(e.curves.is_empty(), "no pruner, no curves");
        // With a pruner the curves are read in place, sorted by number.
        let asha = PrunerConfig::Asha(AshaConfig::default());
        let mut e = engine(Box::new(MemoryStorage::new()), None, &asha);
        let a = e.ask(0, "cpu").expect("ask").expect("a trial");
        let b = e.ask(1, "cpu").expect("ask").expect("a trial");
        e.report(b.id, report(1, 1.0)).expect("report");
        e.report(a.id, report(1, 2.0)).expect("report");
        let numbers: Vec<u64> = e.curves.iter().map(|c| c.number.0).collect();
        assert_eq!(numbers, [a.number.0, b.number.0]);
    }

    #[test]
    fn a_final_report_gives_the_value_and_is_never_judged() {
        for (storage, _dir) in backends() {
            let mut e = engine(storage, None, &PrunerConfig::None);
            let t = e.ask(0, "cpu").expect("ask").expect("a trial");
            e.report(t.id, report(1, 5.0)).expect("report");
            let mut fin = report(1, 2.0);
            fin.metrics.insert(FINAL_KEY.into(), 1.0);
            e.report(t.id, fin).expect("final");
            let done = e.finish(t.id, Finish::Ended, &[]).expect("finish");
            assert_eq!(done.value(), Some(2.0));
        }
    }

    #[test]
    fn a_trial_without_a_value_fails_and_an_interrupted_one_runs_again() {
        for (storage, _dir) in backends() {
            let mut e = engine(storage, Some(2), &PrunerConfig::None);
            let t = e.ask(0, "cpu").expect("ask").expect("a trial");
            let failed = e.finish(t.id, Finish::Ended, &[]).expect("finish");
            assert!(
                failed
                    .status
                    .error()
                    .expect("an error")
                    .contains("without reporting")
            );
            let t = e.ask(0, "cpu").expect("ask").expect("a trial");
            let params = t.params.clone();
            let i = e
                .finish(
                    t.id,
                    Finish::Interrupted {
                        reason: "interrupted: test".into(),
                    },
                    &[],
                )
                .expect("finish");
            assert!(i.status.interrupted());
            // The interrupted trial does not count: its rerun is asked next, same params.
            let rerun = e.ask(0, "cpu").expect("ask").expect("the rerun");
            assert_eq!(rerun.params, params);
            assert_eq!(rerun.number.0, 2);
            e.finish(rerun.id, Finish::Value(1.0), &[]).expect("finish");
            assert!(e.ask(0, "cpu").expect("ask").is_none(), "budget of 2 spent");
        }
    }

    /// Issue 27: an attempt that resumed from a checkpoint keeps the lost attempt's reports
    /// before its own first step and none after, so its curve has every step once; through a
    /// second interruption before any report too; a re-run that starts over keeps none, and so
    /// does the re-run of a trial that never checkpointed.
    #[test]
    fn a_resumed_attempt_keeps_the_earlier_reports_up_to_the_checkpoint_and_none_after() {
        let steps = |e: &Engine, id: TrialId| -> Vec<(u64, f64)> {
            e.storage
                .trial_reports(id)
                .expect("reports")
                .iter()
                .map(|r| (r.report.step, r.report.metrics["loss"]))
                .collect()
        };
        let interrupt = |e: &mut Engine, id: TrialId| {
            e.finish(
                id,
                Finish::Interrupted {
                    reason: "interrupted: test".into(),
                },
                &[],
            )
            .expect("finish");
        };
        for (storage, _dir) in backends() {
            let mut e = engine(storage, Some(2), &PrunerConfig::None);
            // Attempt 1: reports 1..=5, checkpoints after 2 and 4, lost in step 5.
            let a1 = e.ask(0, "cpu").expect("ask").expect("a trial");
            for step in 1..=5 {
                e.report(a1.id, report(step, 1.0 / step as f64)).expect("r");
                if step % 2 == 0 {
                    e.checkpoint(a1.id, step).expect("checkpoint");
                }
            }
            interrupt(&mut e, a1.id);
            // Attempt 2: cut off before it reported or saved anything.
            let a2 = e.ask(0, "cpu").expect("ask").expect("attempt 2");
            assert_eq!(a2.params, a1.params);
            interrupt(&mut e, a2.id);
            // Attempt 3 resumes from attempt 1's checkpoint at step 4: its first report is 5.
            let a3 = e.ask(0, "cpu").expect("ask").expect("attempt 3");
            e.report(a3.id, report(5, 0.19)).expect("r");
            // The copied reports are handed over once, to be shown (the live UI's curve).
            let shown: Vec<u64> = e.take_resumed().iter().map(|r| r.step).collect();
            assert_eq!(shown, vec![1, 2, 3, 4]);
            assert!(e.take_resumed().is_empty(), "taken once");
            e.report(a3.id, report(6, 0.15)).expect("r");
            assert!(e.take_resumed().is_empty(), "only the first report copies");
            assert_eq!(
                steps(&e, a3.id),
                vec![
                    (1, 1.0),
                    (2, 0.5),
                    (3, 1.0 / 3.0),
                    (4, 0.25),
                    (5, 0.19),
                    (6, 0.15)
                ],
                "steps 1-4 from attempt 1, none of its lost step 5"
            );
            e.checkpoint(a3.id, 6).expect("checkpoint");
            interrupt(&mut e, a3.id);
            // Attempt 4 starts over (its script ignored the checkpoint): nothing is kept.
            let a4 = e.ask(0, "cpu").expect("ask").expect("attempt 4");
            e.report(a4.id, report(1, 0.9)).expect("r");
            assert!(
                e.take_resumed().is_empty(),
                "a restart from scratch copies nothing"
            );
            assert_eq!(steps(&e, a4.id), vec![(1, 0.9)]);
            let done = e.finish(a4.id, Finish::Ended, &[]).expect("finish");
            assert_eq!(done.value(), Some(0.9));
            // A first run keeps nothing of anyone; the re-run of one that never checkpointed
            // keeps nothing of it, even where its steps go on.
            let other = e.ask(0, "cpu").expect("ask").expect("a second trial");
            e.report(other.id, report(3, 0.7)).expect("r");
            assert_eq!(steps(&e, other.id), vec![(3, 0.7)]);
            interrupt(&mut e, other.id);
            let again = e.ask(0, "cpu").expect("ask").expect("its re-run");
            e.report(again.id, report(4, 0.6)).expect("r");
            assert_eq!(steps(&e, again.id), vec![(4, 0.6)]);
        }
    }

    /// Issue 27, a checkpoint directory not shared by every machine: the re-run learns which
    /// earlier attempt recorded a checkpoint (through attempts that recorded none), and one
    /// marked as starting from scratch keeps none of the lost reports, even where its first
    /// report comes after them (a script that reports every few steps).
    #[test]
    fn a_rerun_that_restarts_from_scratch_keeps_no_earlier_report_whatever_its_first_step() {
        for (storage, _dir) in backends() {
            let mut e = engine(storage, Some(1), &PrunerConfig::None);
            let a1 = e.ask(0, "cpu").expect("ask").expect("a trial");
            assert_eq!(e.recorded_checkpoint(a1.number).expect("read"), None);
            for step in 1..=4 {
                e.report(a1.id, report(step, 1.0 / step as f64)).expect("r");
            }
            e.checkpoint(a1.id, 3).expect("checkpoint");
            let lost = Finish::Interrupted {
                reason: "interrupted: test".into(),
            };
            e.finish(a1.id, lost.clone(), &[]).expect("finish");
            let a2 = e.ask(0, "cpu").expect("ask").expect("attempt 2");
            e.finish(a2.id, lost, &[]).expect("finish");
            let a3 = e.ask(0, "cpu").expect("ask").expect("attempt 3");
            let c = e
                .recorded_checkpoint(a3.number)
                .expect("read")
                .expect("attempt 1's");
            assert_eq!((c.trial, c.step), (a1.number, 3));
            e.from_scratch(a3.id);
            e.report(a3.id, report(4, 0.3)).expect("r");
            let steps: Vec<u64> = e
                .storage
                .trial_reports(a3.id)
                .expect("reports")
                .iter()
                .map(|r| r.report.step)
                .collect();
            assert_eq!(steps, [4], "its own report only");
        }
    }

    #[test]
    fn the_pruner_stops_a_losing_trial_and_it_is_stored_pruned_with_its_last_value() {
        let asha = PrunerConfig::Asha(AshaConfig {
            min_resource: 1.0,
            reduction_factor: 2.0,
            ..AshaConfig::default()
        });
        for (storage, _dir) in backends() {
            let mut e = engine(storage, None, &asha);
            let good = e.ask(0, "cpu").expect("ask").expect("a trial");
            assert_eq!(
                e.report(good.id, report(1, 0.1)).expect("r"),
                Decision::Continue
            );
            e.report(good.id, report(2, 0.05)).expect("r");
            e.finish(good.id, Finish::Ended, &[]).expect("finish");
            let bad = e.ask(0, "cpu").expect("ask").expect("a trial");
            assert_eq!(
                e.report(bad.id, report(1, 9.0)).expect("r"),
                Decision::Prune
            );
            // Judged once: a later report is stored, not judged again.
            assert_eq!(
                e.report(bad.id, report(2, 9.5)).expect("r"),
                Decision::Continue
            );
            let p = e
                .finish(
                    bad.id,
                    Finish::Pruned {
                        value: None,
                        reason: None,
                    },
                    &[],
                )
                .expect("finish");
            assert_eq!(p.state(), TrialState::Pruned);
            assert_eq!(p.value(), Some(9.5));
            let stored = e
                .storage()
                .trial(e.study(), TrialNumber(1))
                .expect("read")
                .expect("trial");
            assert_eq!(stored.state(), TrialState::Pruned);
            assert_eq!(stored.value(), Some(9.5));
        }
    }

    #[test]
    fn a_multi_objective_trial_is_pruned_only_when_every_objective_it_reports_says_so() {
        let asha = PrunerConfig::Asha(AshaConfig {
            min_resource: 1.0,
            reduction_factor: 2.0,
            ..AshaConfig::default()
        });
        let others = [Objective {
            metric: "speed".into(),
            direction: Direction::Maximize,
        }];
        let r = |step: u64, loss: f64, speed: Option<f64>| Report {
            step,
            metrics: std::iter::once(("loss".to_string(), loss))
                .chain(speed.map(|v| ("speed".to_string(), v)))
                .collect(),
        };
        let space = space();
        let spec = EngineSpec {
            others: &others,
            name: "mo",
            metric: "loss",
            direction: Direction::Minimize,
            space: &space,
            seed: 7,
            budget: None,
            heartbeat_grace: Duration::from_secs(60),
            pruner: &asha,
            file: None,
            source: None,
            slots: &["cpu".to_string()],
            enqueue: &[],
        };
        for (storage, _dir) in backends() {
            let mut e = Engine::open(
                storage,
                &spec,
                build_sampler(SamplerKind::Random),
                build_pruner(&asha),
            )
            .expect("engine");
            // The first trial sets the rung: good loss, slow.
            let first = e.ask(0, "cpu").expect("ask").expect("a trial");
            e.report(first.id, r(1, 0.1, Some(10.0))).expect("r");
            e.report(first.id, r(2, 0.05, Some(10.0))).expect("r");
            let done = e.finish(first.id, Finish::Ended, &[]).expect("finish");
            assert_eq!(done.status.others(), [10.0]);
            // Worse loss but much faster: on the front, kept.
            let fast = e.ask(0, "cpu").expect("ask").expect("a trial");
            assert_eq!(
                e.report(fast.id, r(1, 0.9, Some(500.0))).expect("r"),
                Decision::Continue
            );
            e.finish(fast.id, Finish::Ended, &[]).expect("finish");
            // Worse on both: pruned.
            let bad = e.ask(0, "cpu").expect("ask").expect("a trial");
            assert_eq!(
                e.report(bad.id, r(1, 0.9, Some(5.0))).expect("r"),
                Decision::Prune
            );
            e.finish(
                bad.id,
                Finish::Pruned {
                    value: None,
                    reason: None,
                },
                &[],
            )
            .expect("finish");
            // An objective the trial does not report along the way does not vote: worse loss
            // alone prunes, as in a single-objective study.
            let silent = e.ask(0, "cpu").expect("ask").expect("a trial");
            assert_eq!(
                e.report(silent.id, r(1, 0.95, None)).expect("r"),
                Decision::Prune
            );
        }
    }
}
