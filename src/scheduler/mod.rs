//! The study loop: slots, channels, timers and signals around the one ask/tell [`Engine`].
//! The engine decides (what to run, whether to prune, what a finished trial's state is) and
//! stores; the scheduler runs trials on worker slots, forwards their reports, steers them
//! (prune, user stops, Ctrl-C) and tells the outside world what happens through [`Event`]s.
//!
//! A failed trial is data: it becomes a state with a reason and the study goes on. Only a fault
//! of storage stops the study, and then cleanly (running trials are stopped first).

mod remote;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{mpsc, watch};

pub use crate::events::{Control, Event, NO_SLOT, StudyInfo};

use crate::engine::{Decision, Engine, EngineSpec, Finish};
use crate::pruner::Pruner;
use crate::runner::keeper::descends_from;
use crate::runner::{Progress, RunEnd, RunResult, StopRequest, TrialJob, TrialRunner};
use crate::sampler::Sampler;
use crate::storage::{Storage, StorageError, StudyRow};
use crate::study::Study;
use crate::telemetry::{GpuSource, Gpus, SlotUsage};
use crate::trial::{FINAL_KEY, Trial, TrialId, TrialNumber, TrialState};

/// Why a running trial is being stopped by us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopKind {
    Prune,
    /// Promotion-based ASHA paused it at a rung: it checkpoints and stops, resumable.
    Pause,
    UserPruned,
    UserFailed,
    /// Ctrl-C twice, SIGTERM (preemption) or a fatal error: not the trial's fault, so it is
    /// run again (at once, by whichever process claims a trial next) from its checkpoint.
    Interrupt,
}

/// A trial running on one of this process's slots.
struct Busy {
    id: TrialId,
    number: TrialNumber,
    stop: watch::Sender<StopRequest>,
    stop_kind: Option<StopKind>,
    /// Where its checkpoints are (`TUNE_CHECKPOINT_DIR`): their disk use is told at each one.
    checkpoint_dir: PathBuf,
}

impl Busy {
    fn stop(&mut self, kind: StopKind) {
        self.stop_kind = Some(kind);
        let _ = self.stop.send(match kind {
            StopKind::Prune | StopKind::UserPruned => StopRequest::Prune,
            StopKind::UserFailed => StopRequest::Cancel,
            // A pause asks what a preemption asks: checkpoint now, then stop.
            StopKind::Interrupt | StopKind::Pause => StopRequest::Interrupt,
        });
    }
}

enum SlotMsg {
    Report(usize, Progress),
    /// The trial's checkpoints could not be fetched and none is there: it starts from scratch.
    FromScratch(usize, TrialNumber),
    /// A child of population-based training copied its builtin parent's snapshot at a step
    /// other than the one recorded when it was queued (the parent saved again in between).
    Reparent(usize, TrialNumber, crate::trial::Parent),
    Gpu(usize, TrialNumber, SlotUsage),
    Done(usize, RunResult),
}

/// How often a running trial's GPU is sampled: NVML's utilisation is itself an average over
/// its last sample period (1/6 s to 1 s by GPU), so sampling faster adds nothing.
const GPU_SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Why the study ends once its running trials are done.
#[derive(Debug)]
enum Ending {
    BudgetSpent,
    Timeout,
    User,
    /// SIGTERM: the machine is being taken away (Slurm preemption or time limit, Kubernetes
    /// eviction, a spot instance reclaimed).
    Preempted,
    Storage(StorageError),
    /// `max_consecutive_failures` trials in a row failed on their own: the last one's why.
    Failing(String),
}

/// Where the study loop is: the one place that says whether trials may start.
#[derive(Debug)]
enum Phase {
    /// Free slots get trials.
    Running,
    /// The user paused scheduling: running trials go on, none start.
    Paused,
    /// No new trials; once every slot is free the study ends.
    Draining(Ending),
}

/// What a finished run of the scheduler says.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub complete: u64,
    pub pruned: u64,
    pub failed: u64,
    pub best: Option<(TrialNumber, f64)>,
    /// Whether the user stopped the run before its budget was spent.
    pub interrupted: bool,
    /// Whether SIGTERM preempted it: its running trials were checkpointed, recorded as
    /// interrupted and queued again for any worker (`tune run` and `tune worker` exit 75).
    pub preempted: bool,
    /// Why the run stopped early because its trials kept failing, if it did.
    pub failing: Option<String>,
    /// Whether it ended because the budget was spent.
    pub budget_spent: bool,
    /// How many trials this run started.
    pub started: u64,
    /// The trials the budget counts at the end.
    pub counted: u64,
    /// Queued trials left waiting when the budget was spent (their numbers): they run only
    /// once `trials` is raised. Empty when the run ended otherwise.
    pub queued: Vec<u64>,
}

pub struct Scheduler {
    study: Study,
    engine: Engine,
    runner: Arc<dyn TrialRunner>,
    events: mpsc::UnboundedSender<Event>,
    /// NVML, where the study has a CUDA slot and the machine a driver; `None` otherwise,
    /// and then nothing is sampled.
    gpus: Option<Arc<dyn GpuSource>>,
    /// Trials that failed on their own in a row here, all the same way, and that way.
    failures_in_a_row: (u64, String),
    /// Trials this run started.
    started: u64,
    /// SIGTERM came: the trials stopped now are preempted (their reason says so).
    preempted: bool,
    /// First attempts whose re-runs were said to start from scratch for want of a recorded
    /// checkpoint: said once per trial, not at every attempt.
    told_from_scratch: std::collections::BTreeSet<crate::trial::TrialNumber>,
    /// The copies of parents' checkpoints taken when their children were queued
    /// (population-based training), by child, under way or done.
    staged: std::collections::HashMap<TrialNumber, Staged>,
    /// The object store that keeps a copy of every trial's checkpoints
    /// (`checkpoint_dir = "s3://…"`); `None` for checkpoints on a filesystem only.
    store: Option<crate::checkpoint::remote::Store>,
}

impl Scheduler {
    /// Opens (or creates) the study in `storage`.
    pub fn open(
        study: Study,
        storage: Box<dyn Storage>,
        sampler: Box<dyn Sampler>,
        pruner: Box<dyn Pruner>,
        runner: Arc<dyn TrialRunner>,
        events: mpsc::UnboundedSender<Event>,
    ) -> Result<Scheduler, StorageError> {
        let spec = EngineSpec {
            name: &study.name,
            metric: &study.metric,
            direction: study.direction,
            others: &study.others,
            space: &study.space,
            seed: study.seed,
            budget: study.trials,
            heartbeat_grace: study.heartbeat_grace,
            pruner: &study.pruner,
            file: Some(&study.file),
            source: Some(&study.source),
            slots: &study.slots,
            enqueue: &study.enqueue,
        };
        let engine = Engine::open(storage, &spec, sampler, pruner)?;
        let gpus = study
            .slots
            .iter()
            .any(|d| crate::devices::cuda_index(d).is_some())
            .then(Gpus::open)
            .flatten()
            .map(|g| Arc::new(g) as Arc<dyn GpuSource>);
        // `tune run` and `tune worker` probed the store before opening the study: a client
        // refused now is told, and the checkpoints stay on this machine.
        let store = study.trial.checkpoint_store().and_then(|url| {
            crate::checkpoint::remote::Store::open(url)
                .inspect_err(|e| {
                    crate::notice::tell(format!(
                        "trial.checkpoint_dir: {e}; checkpoints stay on this machine"
                    ));
                })
                .ok()
        });
        Ok(Scheduler {
            study,
            engine,
            runner,
            events,
            gpus,
            failures_in_a_row: (0, String::new()),
            started: 0,
            preempted: false,
            told_from_scratch: Default::default(),
            staged: Default::default(),
            store,
        })
    }

    /// Samples the CUDA slots' GPUs from `source` instead of the machine's driver (tests
    /// script the readings).
    #[cfg(test)]
    fn with_gpu_source(mut self, source: Arc<dyn GpuSource>) -> Scheduler {
        self.gpus = Some(source);
        self
    }

    pub fn study_row(&self) -> &StudyRow {
        self.engine.study()
    }

    fn emit(&self, e: Event) {
        // A UI that went away must not stop the study.
        let _ = self.events.send(e);
    }

    /// Tells the UI what the study looks like before this run starts trials.
    fn announce(&mut self) -> Result<(), StorageError> {
        let recovered = self.engine.recover()?;
        if !recovered.is_empty() {
            tracing_line(&format!(
                "recovered {} interrupted trial(s) from an earlier run: {:?}; their params run again",
                recovered.len(),
                recovered
            ));
        }
        let (storage, row) = (self.engine.storage(), self.engine.study());
        let existing: Vec<Trial> = storage
            .trials(row, None)?
            .into_iter()
            .filter(|t| t.state().is_finished())
            .collect();
        let best = storage.best(row)?;
        let best_reports = match best {
            Some((n, _)) => storage.reports(row)?.remove(&n).unwrap_or_default(),
            None => Vec::new(),
        };
        self.emit(Event::StudyStarted {
            info: StudyInfo {
                name: self.study.name.clone(),
                metric: self.study.metric.clone(),
                direction: self.study.direction,
                others: self.study.others.clone(),
                sampler: self.study.sampler.as_str().to_string(),
                pruner: self.study.pruner.name().to_string(),
                rungs: self.study.pruner.rung_schedule(),
                // One objective only: on several, the samplers scalarise and follow other rules.
                exploration: self
                    .study
                    .sampler
                    .exploration(&self.study.space, &self.study.sampler_options)
                    .filter(|_| self.study.others.is_empty()),
                budget: self.study.trials,
                timeout: self.study.timeout,
                slots: self.study.slots.clone(),
                storage: self.study.storage.to_string(),
                space: Some(self.study.space.clone()),
            },
            existing,
            at: SystemTime::now(),
        });
        // A resumed study's best trial keeps its learning curve in the UI: replay its reports
        // (on no slot, as they come from the database and not a running trial).
        if let Some((best, _)) = best {
            for report in best_reports {
                self.emit(Event::TrialReported {
                    number: best,
                    slot: NO_SLOT,
                    report,
                });
            }
        }
        Ok(())
    }

    /// Runs the study until its budget is spent, its timeout passes, or the user quits.
    pub async fn run(
        mut self,
        mut controls: mpsc::UnboundedReceiver<Control>,
    ) -> Result<RunSummary, StorageError> {
        self.announce()?;
        let n_slots = self.study.slots.len();
        let mut slots: Vec<Option<Busy>> = (0..n_slots).map(|_| None).collect();
        let (tx, mut rx) = mpsc::unbounded_channel::<SlotMsg>();
        let deadline = self.study.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut phase = Phase::Running;
        let mut tick = tokio::time::interval(self.study.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        loop {
            // Whether the budget left nothing to start on a free slot this time round.
            let mut full = false;
            if matches!(phase, Phase::Running) {
                for slot in 0..n_slots {
                    if slots[slot].is_some() {
                        continue;
                    }
                    match self.start_trial(slot, &tx) {
                        Ok(Some(b)) => slots[slot] = Some(b),
                        Ok(None) => {
                            full = true;
                            break;
                        }
                        Err(e) => {
                            self.fail(&mut phase, &mut slots, e);
                            break;
                        }
                    }
                }
            }
            if slots.iter().all(Option::is_none) {
                if matches!(phase, Phase::Draining(_)) {
                    break;
                }
                // The budget is taken by finished trials and nothing runs anywhere that could
                // free a place: the study is done. While other processes still run trials of
                // it, wait for them on the tick (one may be interrupted).
                if full
                    && self
                        .engine
                        .storage()
                        .count_state(self.engine.study(), TrialState::Running)?
                        == 0
                {
                    phase = Phase::Draining(Ending::BudgetSpent);
                    break;
                }
            }

            tokio::select! {
                msg = rx.recv() => {
                    let Some(msg) = msg else { break };
                    let res = match msg {
                        SlotMsg::Report(slot, report) => self.on_report(slot, &mut slots, report),
                        SlotMsg::FromScratch(slot, number) => {
                            if let Some(b) = slots[slot].as_ref().filter(|b| b.number == number) {
                                self.engine.from_scratch(b.id);
                            }
                            Ok(())
                        }
                        SlotMsg::Reparent(slot, number, parent) => {
                            match slots[slot].as_ref().filter(|b| b.number == number) {
                                Some(b) => {
                                    let id = b.id;
                                    self.emit(Event::Lineage { child: number, parent });
                                    self.engine.set_parent(id, parent)
                                }
                                None => Ok(()),
                            }
                        }
                        SlotMsg::Gpu(slot, number, usage) => {
                            // A sample may trail its trial's end; only the running trial's counts.
                            if let Some(b) = slots[slot].as_ref().filter(|b| b.number == number) {
                                // Kept with the trial when it ends: the last summary is over
                                // every sample, and it arrives before the end on this channel.
                                self.engine.note_gpu(b.id, usage.telemetry());
                                self.emit(Event::GpuSampled { number, slot, usage });
                            }
                            Ok(())
                        }
                        SlotMsg::Done(slot, result) => match slots[slot].take() {
                            Some(b) => self.on_done(slot, b, result),
                            None => Ok(()),
                        },
                    };
                    if let Err(e) = res {
                        self.fail(&mut phase, &mut slots, e);
                    }
                    let max = self.study.max_consecutive_failures;
                    if max > 0
                        && self.failures_in_a_row.0 >= max
                        && matches!(phase, Phase::Running | Phase::Paused)
                    {
                        // The same mistake would burn the rest of the budget: stop starting
                        // trials, let the running ones end, and say why.
                        phase = Phase::Draining(Ending::Failing(format!(
                            "{max} trials in a row failed the same way (study.max_consecutive_failures = {max}): {}",
                            self.failures_in_a_row.1
                        )));
                    }
                }
                ctl = controls.recv(), if !controls.is_closed() => {
                    self.on_control(ctl, &mut phase, &mut slots);
                }
                _ = tick.tick() => {
                    if let Err(e) = self.engine.heartbeat() {
                        self.fail(&mut phase, &mut slots, e);
                    }
                }
                _ = async {
                    match deadline {
                        Some(d) if !matches!(phase, Phase::Draining(_)) => tokio::time::sleep_until(d).await,
                        _ => std::future::pending().await,
                    }
                } => {
                    phase = Phase::Draining(Ending::Timeout);
                }
            }
        }

        let ending = match phase {
            Phase::Draining(e) => e,
            Phase::Running | Phase::Paused => Ending::BudgetSpent,
        };
        let (storage, row) = (self.engine.storage(), self.engine.study());
        let rows = storage.trials(row, None)?;
        let count = |s: TrialState| rows.iter().filter(|t| t.state() == s).count() as u64;
        let summary = RunSummary {
            complete: count(TrialState::Complete),
            pruned: count(TrialState::Pruned),
            failed: rows
                .iter()
                .filter(|t| t.state() == TrialState::Failed && !t.status.interrupted())
                .count() as u64,
            best: storage.best(row)?,
            interrupted: matches!(ending, Ending::User | Ending::Preempted),
            preempted: matches!(ending, Ending::Preempted),
            failing: match &ending {
                Ending::Failing(why) => Some(why.clone()),
                _ => None,
            },
            budget_spent: matches!(ending, Ending::BudgetSpent),
            started: self.started,
            counted: storage.counted(row)?,
            queued: match ending {
                Ending::BudgetSpent => rows
                    .iter()
                    .filter(|t| t.state() == TrialState::Queued)
                    .map(|t| t.number.0)
                    .collect(),
                _ => Vec::new(),
            },
        };
        let reason = match &ending {
            Ending::Storage(e) => format!("storage failed: {e}"),
            Ending::User => "stopped by the user".to_string(),
            Ending::Preempted => {
                "preempted (SIGTERM): running trials checkpointed and queued again".to_string()
            }
            Ending::Timeout => "the study timeout passed".to_string(),
            Ending::BudgetSpent => "the trial budget is spent".to_string(),
            Ending::Failing(why) => format!("stopped early: {why}"),
        };
        self.emit(Event::StudyFinished {
            reason,
            best: summary.best,
            at: SystemTime::now(),
        });
        // Copies taken for children that another process started, or that never started:
        // the parents' checkpoints are where they were.
        for (_, staged) in self.staged.drain() {
            staged.task.abort();
            let _ = staged.task.await;
            let _ = std::fs::remove_dir_all(&staged.staging);
        }
        let _ = std::fs::remove_dir(self.pbt_staging(""));
        match ending {
            Ending::Storage(e) => Err(e),
            _ => Ok(summary),
        }
    }

    /// A fault of storage: stop every running trial (as interrupted) and end the study once
    /// they are done. The first fault is the one reported.
    fn fail(&mut self, phase: &mut Phase, slots: &mut [Option<Busy>], e: StorageError) {
        if matches!(phase, Phase::Draining(Ending::Storage(_))) {
            return;
        }
        tracing_line(&format!("storage failed, stopping the study: {e}"));
        for b in slots.iter_mut().flatten() {
            self.engine.stopping(b.id);
            b.stop(StopKind::Interrupt);
        }
        *phase = Phase::Draining(Ending::Storage(e));
    }

    fn on_control(&mut self, ctl: Option<Control>, phase: &mut Phase, slots: &mut [Option<Busy>]) {
        match ctl {
            Some(Control::Pause) if matches!(phase, Phase::Running) => {
                *phase = Phase::Paused;
                self.emit(Event::Paused(true));
            }
            Some(Control::Resume) if matches!(phase, Phase::Paused) => {
                *phase = Phase::Running;
                self.emit(Event::Paused(false));
            }
            Some(Control::StopTrial { number, as_pruned }) => {
                for b in slots.iter_mut().flatten() {
                    if b.number == number {
                        self.engine.stopping(b.id);
                        b.stop(if as_pruned {
                            StopKind::UserPruned
                        } else {
                            StopKind::UserFailed
                        });
                    }
                }
            }
            Some(Control::Quit { graceful }) => {
                if !matches!(phase, Phase::Draining(Ending::Storage(_))) {
                    *phase = Phase::Draining(Ending::User);
                }
                self.emit(Event::Stopping { graceful });
                if !graceful {
                    for b in slots.iter_mut().flatten() {
                        self.engine.stopping(b.id);
                        b.stop(StopKind::Interrupt);
                    }
                }
            }
            Some(Control::Preempt) => {
                self.preempted = true;
                if !matches!(phase, Phase::Draining(Ending::Storage(_))) {
                    *phase = Phase::Draining(Ending::Preempted);
                }
                self.emit(Event::Stopping { graceful: false });
                for b in slots.iter_mut().flatten() {
                    // A trial already being stopped (pruned, cancelled) ends as it was asked.
                    if b.stop_kind.is_none() {
                        self.engine.stopping(b.id);
                        b.stop(StopKind::Interrupt);
                    }
                }
            }
            Some(Control::Pause | Control::Resume) | None => {}
        }
    }

    /// Where copies of parents' checkpoints wait for their children (population-based
    /// training): `name` inside the study's `.pbt` staging directory (the directory itself for
    /// an empty `name`).
    fn pbt_staging(&self, name: &str) -> PathBuf {
        let dir = self.study.runs_dir.join(".pbt");
        if name.is_empty() { dir } else { dir.join(name) }
    }

    fn builtin(&self) -> bool {
        matches!(self.study.trial, crate::study::TrialSpec::Builtin(_))
    }

    fn checkpoint_dirs(&self) -> CheckpointDirs {
        CheckpointDirs {
            dir: self.study.trial.checkpoint_dir().map(Path::to_path_buf),
            study: self.study.name.clone(),
            runs: self.study.runs_dir.clone(),
        }
    }

    /// A child of population-based training, at its first attempt: what fills its checkpoint
    /// directory before it runs, from its parent's checkpoints (`None` for any other trial).
    /// The step it copies is recorded as its parent's. A parent whose checkpoint this machine
    /// cannot read is told, and the child starts from scratch with its params.
    fn seed_of(
        &mut self,
        trial: &crate::trial::Trial,
        dir: &Path,
    ) -> Result<Option<Seed>, StorageError> {
        let Some(parent) = self.engine.parent_of(trial.number)? else {
            return Ok(None);
        };
        let owner = crate::checkpoint::owner(
            &self.study.name,
            trial.number.0,
            self.study.seed,
            &trial.params,
        );
        // The copy taken when it was queued, where this process queued it.
        if let Some(staged) = self.staged.remove(&trial.number) {
            return Ok(Some(Seed {
                child: trial.number,
                parent: parent.trial,
                step: parent.step,
                host: None,
                from: SeedFrom::Staged(staged),
                dir: dir.to_path_buf(),
                owner,
                builtin: self.builtin(),
            }));
        }
        let Some(pc) = self.engine.parent_checkpoint(parent.trial)? else {
            crate::notice::tell(format!(
                "trial {} continues trial {}, which recorded no checkpoint; it starts from scratch with its params",
                trial.number, parent.trial
            ));
            return Ok(None);
        };
        self.engine.set_parent(
            trial.id,
            crate::storage::Parent {
                trial: pc.trial,
                step: pc.step,
            },
        )?;
        let from = self.seed_source(&pc);
        Ok(Some(Seed {
            child: trial.number,
            parent: pc.trial,
            step: pc.step,
            host: pc.host,
            from,
            dir: dir.to_path_buf(),
            owner,
            builtin: self.builtin(),
        }))
    }

    /// Where a parent's checkpoints are read from: the object store, or its directory.
    fn seed_source(&self, pc: &crate::engine::ParentCheckpoint) -> SeedFrom {
        match &self.store {
            Some(s) => SeedFrom::Store(s.trial(&self.study.name, pc.first.0)),
            None => SeedFrom::Dir(
                self.checkpoint_dirs()
                    .of(pc.first, pc.first_run_dir.clone()),
            ),
        }
    }

    /// A re-run of an interrupted trial that must start from scratch says so, once: when
    /// this machine does not see the checkpoint an earlier attempt recorded (a checkpoint
    /// directory that is not shared by every machine; its curve then keeps nothing of the
    /// earlier attempts), or when no earlier attempt of a command trial recorded one (a
    /// script that never prints a checkpoint line). A builtin trial's checkpoints that are
    /// there but damaged are the trainer's to judge (it falls back and says so).
    fn tell_how_it_resumes(
        &mut self,
        trial: &crate::trial::Trial,
        first: crate::trial::TrialNumber,
        dir: &std::path::Path,
    ) -> Result<(), StorageError> {
        let builtin = matches!(self.study.trial, crate::study::TrialSpec::Builtin(_));
        let setting = if self.study.trial.checkpoint_dir().is_some() {
            "trial.checkpoint_dir"
        } else {
            "the study's runs_dir (which holds the checkpoints by default)"
        };
        match self.engine.recorded_checkpoint(trial.number)? {
            // With an object store the staging directory is filled by the fetch, which says
            // itself when it fails.
            Some(c)
                if self.store.is_none() && !crate::checkpoint::holds_checkpoint(dir, builtin) =>
            {
                crate::notice::tell(format!(
                    "trial {} checkpointed at step {} (on host {}) but {} holds no checkpoint on this machine: is {setting} shared by every machine? trial {} restarts from scratch",
                    c.trial.0,
                    c.step,
                    c.host.as_deref().unwrap_or("unknown"),
                    dir.display(),
                    trial.number.0,
                ));
                self.engine.from_scratch(trial.id);
            }
            None if !builtin && self.told_from_scratch.insert(first) => {
                crate::notice::tell(format!(
                    "trial {} re-runs interrupted trial {} from scratch: no attempt at its params reported a checkpoint (print `tune: {{\"checkpoint\": true, \"step\": N}}` after each save to resume from it; docs/command-trials.md)",
                    trial.number.0, first.0
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// Asks the engine for the next trial for `slot` and starts it. `None` when the budget
    /// allows no more.
    fn start_trial(
        &mut self,
        slot: usize,
        tx: &mpsc::UnboundedSender<SlotMsg>,
    ) -> Result<Option<Busy>, StorageError> {
        let device = self.study.slots[slot].clone();
        let Some(trial) = self.engine.ask(slot, &device)? else {
            return Ok(None);
        };
        if let Some((paused, rerun, why)) = self.engine.take_promotion() {
            tracing_line(&format!(
                "trial {paused} promoted ({why}): trial {rerun} resumes it from its checkpoint"
            ));
        }
        self.started += 1;
        let made = fresh_trial_dir(&self.study.runs_dir, trial.number);
        let trial_dir = match &made {
            Ok(d) => d.clone(),
            Err(_) => trial_dir_name(&self.study.runs_dir, trial.number, 1),
        };
        self.engine.set_trial_dir(trial.id, &trial_dir)?;
        // Every attempt at the same params keeps its checkpoints in its first run's directory.
        let attempt = self.engine.attempt(trial.number)?;
        let first_run_dir = if attempt.first == trial.number {
            trial_dir.clone()
        } else {
            self.engine
                .trial_dir_of(attempt.first)?
                .unwrap_or_else(|| trial_dir_name(&self.study.runs_dir, attempt.first, 1))
        };
        let checkpoint_dir = crate::checkpoint::trial_dir(
            self.study.trial.checkpoint_dir(),
            &self.study.name,
            attempt.first.0,
            &first_run_dir,
        );
        let seed = if attempt.attempt > 1 {
            self.tell_how_it_resumes(&trial, attempt.first, &checkpoint_dir)?;
            None
        } else {
            self.seed_of(&trial, &checkpoint_dir)?
        };
        let copy = self.store.as_ref().map(|s| remote::TrialCopy {
            store: s.trial(&self.study.name, attempt.first.0),
            dir: checkpoint_dir.clone(),
            owner: crate::checkpoint::owner(
                &self.study.name,
                attempt.first.0,
                self.study.seed,
                &trial.params,
            ),
            keep: self.study.trial.keep_checkpoints(),
            number: trial.number,
            runner_cleans: matches!(self.study.trial, crate::study::TrialSpec::Builtin(_)),
        });
        let (stop_tx, stop_rx) = watch::channel(StopRequest::None);
        self.emit(Event::TrialStarted {
            number: trial.number,
            slot,
            device: device.clone(),
            params: trial.params.clone(),
            at: SystemTime::now(),
        });
        if let Some(s) = &seed {
            self.emit(Event::Lineage {
                child: trial.number,
                parent: crate::storage::Parent {
                    trial: s.parent,
                    step: s.step,
                },
            });
        }
        let job_checkpoint_dir = checkpoint_dir.clone();
        let job = TrialJob {
            number: trial.number,
            params: trial.params.clone(),
            slot,
            device,
            trial_dir: trial_dir.clone(),
            attempt: attempt.attempt,
            first: attempt.first,
            checkpoint_dir,
            timeout: self.study.trial.timeout(),
            seed: self.study.seed,
        };
        let runner = Arc::clone(&self.runner);
        let tx = tx.clone();
        // Every GPU of the slot (each of a group's) is sampled.
        let indices: Vec<u32> = crate::devices::cuda_indices(&job.device)
            .into_iter()
            .filter_map(|i| u32::try_from(i).ok())
            .collect();
        let gpu = self.gpus.clone().filter(|_| !indices.is_empty());
        let number = trial.number;
        tokio::spawn(async move {
            if let Err(e) = made {
                let _ = tx.send(SlotMsg::Done(
                    slot,
                    RunResult {
                        end: RunEnd::Failed {
                            reason: format!(
                                "cannot create the trial directory {}: {e}",
                                trial_dir.display()
                            ),
                            log_tail: None,
                        },
                        logs: vec![],
                        notes: None,
                    },
                ));
                return;
            }
            // A child of population-based training: its parent's checkpoints first.
            if let Some(seed) = seed
                && let Some(parent) = seed.plant().await
            {
                let _ = tx.send(SlotMsg::Reparent(slot, number, parent));
            }
            // Before the run: its checkpoints fetched from the object store, if any.
            let uploads = match copy {
                Some(c) => Some(c.start().await),
                None => None,
            };
            // Sent before any report of the run, on the channel they take.
            if uploads.as_ref().is_some_and(|u| u.from_scratch) {
                let _ = tx.send(SlotMsg::FromScratch(slot, number));
            }
            let asked = stop_rx.clone();
            let (rtx, mut rrx) = mpsc::unbounded_channel();
            let fut = runner.run(job, rtx, stop_rx);
            tokio::pin!(fut);
            // The first sample a period in: one at the very start would catch the trial
            // before its first kernel and pull its mean down.
            let mut sample_tick = tokio::time::interval_at(
                tokio::time::Instant::now() + GPU_SAMPLE_EVERY,
                GPU_SAMPLE_EVERY,
            );
            let mut usage: Option<SlotUsage> = None;
            // Reports and the end travel on one channel, so the end never overtakes a report.
            let result = loop {
                tokio::select! {
                    biased;
                    Some(r) = rrx.recv() => {
                        if let (Progress::Checkpoint { .. }, Some(u)) = (&r, &uploads) {
                            u.checkpointed();
                        }
                        let _ = tx.send(SlotMsg::Report(slot, r));
                    }
                    res = &mut fut => break res,
                    _ = sample_tick.tick(), if gpu.is_some() => {
                        // An NVML read takes microseconds, and telling the trial's processes
                        // a few reads of /proc per process on the GPU: no need for a blocking
                        // thread.
                        let root = runner.trial_process(slot);
                        let ours = |pid: u32| root.is_some_and(|r| descends_from(pid, r));
                        let round: Vec<_> = indices
                            .iter()
                            .filter_map(|&i| Some((i, gpu.as_ref()?.read(i)?.of_trial(ours))))
                            .collect();
                        let u = match usage.as_mut() {
                            Some(u) => { u.add(round); Some(u.clone()) }
                            None => SlotUsage::first(round).map(|u| usage.insert(u).clone()),
                        };
                        if let Some(u) = u {
                            let _ = tx.send(SlotMsg::Gpu(slot, number, u));
                        }
                    }
                }
            };
            while let Ok(r) = rrx.try_recv() {
                if let (Progress::Checkpoint { .. }, Some(u)) = (&r, &uploads) {
                    u.checkpointed();
                }
                let _ = tx.send(SlotMsg::Report(slot, r));
            }
            // The copy settled before the trial's end is told: a study that ends now leaves
            // it complete (the last checkpoint up, or cleaned).
            if let Some(u) = uploads {
                let asked = *asked.borrow();
                u.finish(&result.end, asked).await;
            }
            let _ = tx.send(SlotMsg::Done(slot, result));
        });
        Ok(Some(Busy {
            id: trial.id,
            number: trial.number,
            stop: stop_tx,
            stop_kind: None,
            checkpoint_dir: job_checkpoint_dir,
        }))
    }

    fn on_report(
        &mut self,
        slot: usize,
        slots: &mut [Option<Busy>],
        progress: Progress,
    ) -> Result<(), StorageError> {
        let Some(b) = slots[slot].as_mut() else {
            return Ok(());
        };
        let report = match progress {
            Progress::Report(r) => r,
            Progress::Checkpoint { step } => {
                // What its checkpoints hold on disk now (a few files: a quick walk), for the
                // live UI; a directory that cannot be read says nothing.
                if let Ok(bytes) = crate::checkpoint::disk_use(&b.checkpoint_dir) {
                    self.emit(Event::Checkpointed {
                        number: b.number,
                        step,
                        bytes,
                    });
                }
                return self.engine.checkpoint(b.id, step);
            }
        };
        let mut shown = report.clone();
        shown.metrics.remove(FINAL_KEY);
        let decision = match self.engine.report(b.id, report) {
            Err(StorageError::Fenced { .. }) => {
                // Another process declared this trial interrupted while this one could not
                // reach the database, and its params run again elsewhere: stop this run.
                tracing_line(&format!(
                    "trial {} was taken over by another process while this one was cut off from the database; stopping it here",
                    b.number
                ));
                if b.stop_kind.is_none() {
                    b.stop(StopKind::Interrupt);
                }
                return Ok(());
            }
            other => other?,
        };
        // A resumed trial's curve up to its checkpoint, copied from its earlier attempt.
        for report in self.engine.take_resumed() {
            self.emit(Event::TrialReported {
                number: b.number,
                slot,
                report,
            });
        }
        self.emit(Event::TrialReported {
            number: b.number,
            slot,
            report: shown,
        });
        if b.stop_kind.is_none() {
            match decision {
                Decision::Continue => {}
                Decision::Prune => b.stop(StopKind::Prune),
                Decision::Pause => b.stop(StopKind::Pause),
                Decision::Exploit => {
                    // A parent qualifies where its checkpoint can be read here: in the object
                    // store, or in a directory this machine sees. A builtin parent's is frozen
                    // at once (`checkpoint::freeze`: hard links), and the child's record names
                    // the step frozen: the parent has often saved past its recorded step by
                    // now (its checkpoint messages trail its saves), and saves on.
                    let (store, builtin) = (self.store.is_some(), self.builtin());
                    let dirs = self.checkpoint_dirs();
                    let frozen_dir = self.pbt_staging(&format!("exploited-{:05}", b.number.0));
                    let mut frozen = None;
                    let take = |c: &crate::engine::ParentCheckpoint| {
                        frozen = None;
                        if store {
                            return Some(c.step);
                        }
                        let dir = dirs.of(c.first, c.first_run_dir.clone());
                        if builtin {
                            match crate::checkpoint::freeze(&dir, &frozen_dir) {
                                Ok(Some((step, files, bytes))) => {
                                    frozen = Some((files, bytes));
                                    return Some(step);
                                }
                                Ok(None) => return None,
                                // Another filesystem: copied below, as it stands then.
                                Err(_) => {}
                            }
                        }
                        crate::checkpoint::holds_checkpoint(&dir, builtin).then_some(c.step)
                    };
                    let exploited = self.engine.exploit(b.id, take)?;
                    match (exploited, frozen) {
                        (Some(x), frozen) => {
                            tracing_line(&format!("trial {} pruned {}", x.trial, x.reason));
                            b.stop(StopKind::Prune);
                            let (staging, task) = match frozen {
                                Some(n) => (frozen_dir, tokio::spawn(async move { Ok(n) })),
                                // The parent goes on and overwrites its checkpoint: the
                                // child's copy is taken now, as the parent stands at the point.
                                None => {
                                    let from = self.seed_source(&x.from);
                                    let staging =
                                        self.pbt_staging(&format!("trial-{:05}", x.child.0));
                                    let to = staging.clone();
                                    let task =
                                        tokio::spawn(async move { from.copy_to(&to, "").await });
                                    (staging, task)
                                }
                            };
                            self.staged.insert(x.child, Staged { staging, task });
                        }
                        (None, Some(_)) => {
                            let _ = std::fs::remove_dir_all(&frozen_dir);
                        }
                        (None, None) => {}
                    }
                }
            }
        }
        Ok(())
    }

    fn on_done(&mut self, slot: usize, b: Busy, result: RunResult) -> Result<(), StorageError> {
        let finish = match (result.end, b.stop_kind) {
            (_, Some(StopKind::Interrupt)) => Finish::Interrupted {
                reason: if self.preempted {
                    "interrupted: preempted (SIGTERM to tune); its params run again from its checkpoint"
                } else {
                    "interrupted: stopped when the study was stopped; its params run again"
                }
                .to_string(),
            },
            // A run that ended on its own before the stop took effect is complete.
            (RunEnd::Finished, _) => Finish::Ended,
            // The engine records a paused trial as paused when it recorded a checkpoint.
            (_, Some(StopKind::Prune | StopKind::Pause)) => Finish::Pruned {
                value: None,
                reason: None,
            },
            (_, Some(StopKind::UserPruned)) => Finish::Pruned {
                value: None,
                reason: Some("by the user".to_string()),
            },
            (_, Some(StopKind::UserFailed)) => Finish::Failed {
                reason: "stopped by the user".to_string(),
                log_tail: None,
            },
            (RunEnd::Failed { reason, log_tail }, None) => Finish::Failed { reason, log_tail },
            (RunEnd::Stopped, None) => Finish::Failed {
                reason: "stopped".to_string(),
                log_tail: None,
            },
        };
        if let Some(notes) = result.notes {
            self.engine.note_output(b.id, notes);
        }
        let trial = match self.engine.finish(b.id, finish, &result.logs) {
            Err(StorageError::Fenced { .. }) => {
                // Fencing: the trial was declared interrupted and queued again while this
                // process was cut off; its result must not overwrite the rerun or count twice.
                tracing_line(&format!(
                    "trial {} ended here after another process had taken it over; its result is discarded (its rerun counts)",
                    b.number
                ));
                return Ok(());
            }
            other => other?,
        };
        match (&trial.status, trial.state()) {
            (_, TrialState::Complete | TrialState::Pruned) => self.failures_in_a_row.0 = 0,
            (status, TrialState::Failed) if !status.interrupted() => {
                // Failing the same way again is a broken set-up (a missing file, a typo in the
                // command); failing differently (diverging at another step) is what some
                // params do, and the search goes on.
                let why = status.why().unwrap_or_default();
                if self.failures_in_a_row.0 > 0 && self.failures_in_a_row.1 == why {
                    self.failures_in_a_row.0 += 1;
                } else {
                    self.failures_in_a_row = (1, why);
                }
            }
            _ => {}
        }
        let at = trial.status.finished().unwrap_or_else(SystemTime::now);
        // The best of the whole study, other processes' trials included, for the event line's
        // "(best … at trial N)"; a storage hiccup here only loses that hint.
        let study_best = self
            .engine
            .storage()
            .best(self.engine.study())
            .ok()
            .flatten();
        self.emit(Event::TrialFinished {
            slot,
            trial,
            at,
            study_best,
        });
        Ok(())
    }
}

/// Diagnostics of the scheduler itself go to standard error, never standard output (which
/// carries the line output or the UI), or to the live UI's footer while it owns the terminal.
fn tracing_line(msg: &str) {
    crate::notice::tell(msg);
}

/// Where the trials of a study keep their checkpoints (see `checkpoint::trial_dir`).
struct CheckpointDirs {
    dir: Option<PathBuf>,
    study: String,
    runs: PathBuf,
}

impl CheckpointDirs {
    /// The checkpoint directory of the trial whose first attempt is `first`, run in
    /// `first_run_dir` (its usual name where none was stored).
    fn of(&self, first: TrialNumber, first_run_dir: Option<PathBuf>) -> PathBuf {
        let run = first_run_dir.unwrap_or_else(|| trial_dir_name(&self.runs, first, 1));
        crate::checkpoint::trial_dir(self.dir.as_deref(), &self.study, first.0, &run)
    }
}

/// Where a child's copy of its parent's checkpoints comes from.
enum SeedFrom {
    Dir(PathBuf),
    Store(crate::checkpoint::remote::TrialStore),
    /// A copy taken when the child was queued, in a staging directory.
    Staged(Staged),
}

/// A copy of a parent's checkpoints taken for its child when it was queued.
struct Staged {
    staging: PathBuf,
    task: tokio::task::JoinHandle<Result<(usize, u64), String>>,
}

impl SeedFrom {
    /// Copies the parent's checkpoints into `dir` (emptied first) and makes it `owner`'s.
    /// Returns the files and bytes copied.
    async fn copy_to(self, dir: &Path, owner: &str) -> Result<(usize, u64), String> {
        // `seed_from`'s errors name the path they met, the parent's or the child's.
        let blocking = |src: PathBuf, dir: &Path, owner: &str| {
            let (d, o) = (dir.to_path_buf(), owner.to_string());
            async move {
                tokio::task::spawn_blocking(move || crate::checkpoint::seed_from(&src, &d, &o))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
            }
        };
        match self {
            SeedFrom::Dir(src) => blocking(src, dir, owner).await,
            SeedFrom::Store(store) => {
                // Emptied and made the child's first; then the parent's objects come down.
                match crate::checkpoint::seed_from(Path::new(""), dir, owner) {
                    Err(e) => Err(e.to_string()),
                    Ok(_) => store
                        .download_all(dir)
                        .await
                        .map_err(|e| format!("fetching {}: {e}", store.url())),
                }
            }
            SeedFrom::Staged(Staged { staging, task }) => {
                task.await.map_err(|e| e.to_string())??;
                let copied = blocking(staging.clone(), dir, owner).await;
                let _ = std::fs::remove_dir_all(&staging);
                copied
            }
        }
    }
}

/// The parent's checkpoints a child of population-based training starts from, copied into its
/// own checkpoint directory `dir` before it runs.
struct Seed {
    child: TrialNumber,
    parent: TrialNumber,
    step: u64,
    host: Option<String>,
    from: SeedFrom,
    dir: PathBuf,
    /// The child's owner (`checkpoint::owner`).
    owner: String,
    /// A builtin trial: the step it resumes at is read from the copied snapshot.
    builtin: bool,
}

impl Seed {
    /// Copies and tells what it did; a copy that fails is told, and the child starts from
    /// scratch with its params (never a half copy: the directory is emptied). A builtin
    /// parent's copied snapshot names the step the child resumes at: when it is not the
    /// recorded one (the parent saved again between the record and the copy), the parent
    /// with that step is returned, to be recorded instead.
    async fn plant(self) -> Option<crate::trial::Parent> {
        let Seed {
            child,
            parent,
            step,
            host,
            from,
            dir,
            owner,
            builtin,
        } = self;
        let result = from.copy_to(&dir, &owner).await;
        match result {
            Ok((files, bytes)) if files > 0 => {
                let copied = if builtin {
                    crate::checkpoint::resume_step(&dir).filter(|s| *s != step)
                } else {
                    None
                };
                tracing_line(&format!(
                    "trial {child} starts from trial {parent}'s checkpoint at step {} ({files} file(s), {})",
                    copied.unwrap_or(step),
                    crate::checkpoint::fmt_bytes(bytes)
                ));
                return copied.map(|step| crate::trial::Parent {
                    trial: parent,
                    step,
                });
            }
            Ok(_) => crate::notice::tell(format!(
                "trial {child} cannot read trial {parent}'s checkpoint at step {step} here (recorded on host {}; is trial.checkpoint_dir shared by every machine?); it starts from scratch with its params",
                host.as_deref().unwrap_or("unknown")
            )),
            Err(e) => {
                let _ = crate::checkpoint::seed_from(Path::new(""), &dir, &owner);
                crate::notice::tell(format!(
                    "trial {child} cannot copy trial {parent}'s checkpoint (trial.checkpoint_dir): {e}; it starts from scratch with its params"
                ));
            }
        }
        None
    }
}

/// How many directories of one trial number may exist side by side before a trial fails.
const TRIAL_DIR_TRIES: u32 = 1000;

/// `RUNS/trial-NNNNN`, or `RUNS/trial-NNNNN.K` for the K-th directory of that number.
fn trial_dir_name(runs: &std::path::Path, number: TrialNumber, k: u32) -> PathBuf {
    if k <= 1 {
        runs.join(format!("trial-{:05}", number.0))
    } else {
        runs.join(format!("trial-{:05}.{k}", number.0))
    }
}

/// Creates a trial's directory, fresh: never one that exists already. Another database's run
/// of the same study file, a study deleted and run again, or a planted directory or symbolic
/// link has `trial-NNNNN` taken; the trial then gets `trial-NNNNN.2` (`.3`, …), and each
/// database records where its own trials' logs are. Creating it is atomic, so two runs at
/// once never share one.
fn fresh_trial_dir(runs: &std::path::Path, number: TrialNumber) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(runs)?;
    for k in 1..=TRIAL_DIR_TRIES {
        let dir = trial_dir_name(runs, number, k);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("{TRIAL_DIR_TRIES} directories of this trial number exist already"),
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::runner::{ReportSender, RunFuture};
    use crate::storage::SqliteStorage;
    use crate::telemetry::GpuReading;
    use crate::trial::Report;
    use crate::trial::{GpuMemScope, GpuTelemetry};

    /// A child queued by another process copies its parent's directory as it stands when the
    /// child starts: a builtin parent that saved again since its recorded checkpoint hands over
    /// a newer snapshot, and the step to record is the copied one's. A command parent's files
    /// are the script's (no step to read), and a copy at the recorded step changes nothing.
    #[tokio::test]
    async fn a_child_records_the_step_of_the_builtin_snapshot_it_copied() {
        let t = tempfile::tempdir().expect("temp dir");
        let parent_dir = t.path().join("parent");
        std::fs::create_dir_all(&parent_dir).expect("mkdir");
        crate::checkpoint::test_snapshot(&parent_dir.join(crate::checkpoint::LATEST), 5);
        let seed = |child: &str, builtin: bool, step: u64| Seed {
            child: TrialNumber(9),
            parent: TrialNumber(3),
            step,
            host: None,
            from: SeedFrom::Dir(parent_dir.clone()),
            dir: t.path().join(child),
            owner: "owner".into(),
            builtin,
        };
        assert_eq!(
            seed("a", true, 3).plant().await,
            Some(crate::trial::Parent {
                trial: TrialNumber(3),
                step: 5
            })
        );
        assert_eq!(crate::checkpoint::resume_step(&t.path().join("a")), Some(5));
        assert_eq!(seed("b", false, 3).plant().await, None);
        assert_eq!(seed("c", true, 5).plant().await, None);
    }

    /// A trial that runs a few sample periods and reports `loss`; its processes are this test's
    /// own.
    struct Sleeper;

    impl TrialRunner for Sleeper {
        fn run(
            &self,
            _job: TrialJob,
            reports: ReportSender,
            _stop: watch::Receiver<StopRequest>,
        ) -> RunFuture {
            Box::pin(async move {
                tokio::time::sleep(GPU_SAMPLE_EVERY * 5 / 2).await;
                let metrics = BTreeMap::from([("loss".to_string(), 0.5)]);
                let _ = reports.send(Progress::Report(Report { step: 1, metrics }));
                RunResult {
                    end: RunEnd::Finished,
                    logs: vec![],
                    notes: None,
                }
            }) as RunFuture
        }

        fn trial_process(&self, _slot: usize) -> Option<u32> {
            Some(std::process::id())
        }
    }

    /// Runs `study` to its end in SQLite at `db` on trials that sleep, its GPUs read from
    /// `source`: its summary, and every event it sent.
    async fn run_with_gpus(
        study: &Study,
        db: &std::path::Path,
        source: Arc<dyn GpuSource>,
    ) -> (RunSummary, mpsc::UnboundedReceiver<Event>) {
        let storage = Box::new(SqliteStorage::open(db).expect("sqlite"));
        let (etx, erx) = mpsc::unbounded_channel();
        let (_ctx, crx) = mpsc::unbounded_channel();
        let scheduler = Scheduler::open(
            study.clone(),
            storage,
            crate::sampler::build_with(study.sampler, &study.sampler_options),
            crate::pruner::build(&study.pruner),
            Arc::new(Sleeper),
            etx,
        )
        .expect("opens")
        .with_gpu_source(source);
        (scheduler.run(crx).await.expect("runs"), erx)
    }

    /// GPU 0 with this process (the trial's) using 1.5 GB and another process 4 GB.
    #[derive(Default)]
    struct Scripted {
        reads: AtomicU32,
    }

    /// No process has this id (Linux's limit is far below it).
    const STRANGER: u32 = u32::MAX - 1;

    impl GpuSource for Scripted {
        fn read(&self, index: u32) -> Option<GpuReading> {
            assert_eq!(index, 0, "only cuda:0 is a slot's GPU");
            self.reads.fetch_add(1, Ordering::SeqCst);
            Some(GpuReading {
                sm_pct: 70.0,
                mem_bw_pct: 40.0,
                mem_mb: 6000.0,
                processes: vec![(std::process::id(), 1500.0), (STRANGER, 4000.0)],
            })
        }
    }

    const STUDY: &str = r#"
[study]
name = "gpu"
metric = "loss"
trials = 2

[space]
x = { type = "float", low = 0.0, high = 1.0 }

[workers]
count = 2
devices = ["cuda:0", "cpu"]

[trial]
kind = "command"
command = ["true"]
"#;

    #[tokio::test]
    async fn a_cuda_slots_trial_stores_its_gpu_telemetry_and_a_cpu_slots_none() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("gpu.toml");
        let study = crate::spec::parse(&file, STUDY, &crate::spec::Overrides::default())
            .expect("a valid study");
        let db = dir.path().join("t.db");
        let source = Arc::new(Scripted::default());
        let (summary, _events) = run_with_gpus(&study, &db, source.clone()).await;
        assert_eq!(summary.complete, 2);

        let storage = SqliteStorage::open(&db).expect("reopens");
        let row = storage.study("gpu").expect("the study");
        let trials = storage.trials(&row, None).expect("trials");
        let on = |device: &str| {
            trials
                .iter()
                .find(|t| t.status.placement().and_then(|p| p.device.as_deref()) == Some(device))
                .expect("a trial on each slot")
        };
        let reads = source.reads.load(Ordering::SeqCst);
        assert!(reads >= 1, "the GPU was sampled");
        assert_eq!(
            on("cuda:0").status.gpu(),
            Some(&GpuTelemetry {
                peak_mem_mb: 1500.0,
                mem_scope: GpuMemScope::Process,
                mean_sm_pct: 70.0,
                mean_mem_bw_pct: 40.0,
                samples: reads,
            }),
            "its own processes' memory, not the stranger's or the device's"
        );
        assert_eq!(on("cpu").status.gpu(), None, "a CPU slot is never sampled");
    }

    /// Two GPUs of a group: cuda:0 busy with 1.5 GB of the trial's, cuda:1 nearly idle with
    /// 0.5 GB of it.
    #[derive(Default)]
    struct Pair {
        reads: [AtomicU32; 2],
    }

    impl GpuSource for Pair {
        fn read(&self, index: u32) -> Option<GpuReading> {
            self.reads[index as usize].fetch_add(1, Ordering::SeqCst);
            let (sm, own) = if index == 0 {
                (70.0, 1500.0)
            } else {
                (10.0, 500.0)
            };
            Some(GpuReading {
                sm_pct: sm,
                mem_bw_pct: sm / 2.0,
                mem_mb: own + 4000.0,
                processes: vec![(std::process::id(), own), (STRANGER, 4000.0)],
            })
        }
    }

    #[tokio::test]
    async fn every_gpu_of_a_group_is_sampled_and_the_trial_keeps_the_groups_summary() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("gpu.toml");
        let text = STUDY.replace("trials = 2", "trials = 1").replace(
            "count = 2\ndevices = [\"cuda:0\", \"cpu\"]",
            "gpus_per_trial = 2\ndevices = [\"cuda:0\", \"cuda:1\"]",
        );
        assert!(text.contains("gpus_per_trial"), "the fixture changed");
        let study = crate::spec::parse(&file, &text, &crate::spec::Overrides::default())
            .expect("a valid study");
        assert_eq!(study.slots, vec!["cuda:0,cuda:1".to_string()]);
        let db = dir.path().join("t.db");
        let source = Arc::new(Pair::default());
        let (summary, mut erx) = run_with_gpus(&study, &db, source.clone()).await;
        assert_eq!(summary.complete, 1);

        let reads = source.reads.each_ref().map(|r| r.load(Ordering::SeqCst));
        assert!(reads[0] >= 1, "the group's first GPU was sampled");
        assert_eq!(
            reads[0], reads[1],
            "each round reads every GPU of the group"
        );
        // The live usage keeps each GPU apart.
        let mut last = None;
        while let Ok(e) = erx.try_recv() {
            if let Event::GpuSampled { usage, .. } = e {
                last = Some(usage);
            }
        }
        let last = last.expect("a sample was sent");
        let each: Vec<(u32, f64, f64)> = last
            .gpus
            .iter()
            .map(|(i, u)| (*i, u.latest.sm_pct, u.latest.shown_mem_mb()))
            .collect();
        assert_eq!(each, vec![(0, 70.0, 1500.0), (1, 10.0, 500.0)]);
        // The stored summary: the mean over the group, the most on any one GPU.
        let storage = SqliteStorage::open(&db).expect("reopens");
        let row = storage.study("gpu").expect("the study");
        let trials = storage.trials(&row, None).expect("trials");
        assert_eq!(
            trials[0].status.gpu(),
            Some(&GpuTelemetry {
                peak_mem_mb: 1500.0,
                mem_scope: GpuMemScope::Process,
                mean_sm_pct: 40.0,
                mean_mem_bw_pct: 20.0,
                samples: reads[0],
            })
        );
    }
}
