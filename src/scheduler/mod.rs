//! The study loop: ask the sampler, persist, dispatch to worker slots, collect reports, prune,
//! tell. The scheduler is the only writer of study state; it tells the outside world what
//! happens through [`Event`]s and takes steering through [`Control`]s.
//!
//! A failed trial is data: it becomes a state with a reason and the study goes on. Only a fault
//! of storage stops the study, and then cleanly (running trials are stopped first).

pub mod events;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch};

pub use events::{Control, Event, StudyInfo, TrialSummary};

use crate::pruner::{PruneContext, Pruner, TrialCurve};
use crate::runner::command::FINAL_KEY;
use crate::runner::{RunEnd, RunResult, StopRequest, TrialJob, TrialRunner};
use crate::sampler::{AskContext, Sampler};
use crate::space::Params;
use crate::storage::{Claim, SqliteStorage, StorageError, StudyRow, WorkerId};
use crate::study::Study;
use crate::trial::{Report, TrialNumber, TrialState};

/// Why a running trial is being stopped by us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopKind {
    Prune,
    UserPruned,
    UserFailed,
    /// Ctrl-C twice or a fatal error: not the trial's fault, so it is run again later.
    Interrupt,
}

struct Running {
    trial_id: i64,
    number: TrialNumber,
    params: Params,
    stop: watch::Sender<StopRequest>,
    stop_kind: Option<StopKind>,
    seq: u64,
    last_step: Option<u64>,
    /// The objective's last intermediate value and the final report's, if any.
    last_value: Option<f64>,
    final_value: Option<f64>,
    started: Instant,
}

enum SlotMsg {
    Report(usize, Report),
    Done(usize, RunResult),
}

/// What a finished run of the scheduler says.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub complete: u64,
    pub pruned: u64,
    pub failed: u64,
    pub best: Option<(u64, f64)>,
    /// Whether the user stopped the run before its budget was spent.
    pub interrupted: bool,
}

pub struct Scheduler {
    study: Study,
    storage: SqliteStorage,
    row: StudyRow,
    worker: WorkerId,
    sampler: Box<dyn Sampler>,
    pruner: Box<dyn Pruner>,
    runner: Arc<dyn TrialRunner>,
    events: mpsc::UnboundedSender<Event>,
    /// Reports of every trial of the study (for the pruner), refreshed from storage.
    curves: BTreeMap<u64, TrialCurve>,
}

fn summary_of(row: &crate::storage::TrialRow) -> TrialSummary {
    TrialSummary {
        number: TrialNumber(row.number),
        state: row.state,
        value: row.value,
        params: row.params.clone(),
        error: row.error.clone(),
        duration: row
            .duration_s
            .and_then(|s| Duration::try_from_secs_f64(s).ok()),
        logs: row.logs.clone(),
    }
}

impl Scheduler {
    /// Opens (or creates) the study in its database.
    pub fn open(
        study: Study,
        sampler: Box<dyn Sampler>,
        pruner: Box<dyn Pruner>,
        runner: Arc<dyn TrialRunner>,
        events: mpsc::UnboundedSender<Event>,
    ) -> Result<Scheduler, StorageError> {
        let mut storage = SqliteStorage::open(&study.storage)?;
        let row = storage.create_or_load_study(
            &study.name,
            study.direction,
            &study.metric,
            Some(&study.file),
            Some(&study.source),
        )?;
        let worker = storage.register_worker(&row, &study.slots)?;
        for p in &study.enqueue {
            if !storage.has_fixed_params(&row, p)? {
                storage.enqueue(&row, &study.space, p)?;
            }
        }
        Ok(Scheduler {
            study,
            storage,
            row,
            worker,
            sampler,
            pruner,
            runner,
            events,
            curves: BTreeMap::new(),
        })
    }

    pub fn study_row(&self) -> &StudyRow {
        &self.row
    }

    fn emit(&self, e: Event) {
        // A UI that went away must not stop the study.
        let _ = self.events.send(e);
    }

    fn refresh_curves(&mut self) -> Result<(), StorageError> {
        let reports = self.storage.reports(&self.row)?;
        // Interrupted trials are left out: their params run again under a new number, and
        // a rerun must not compete with its own earlier attempt at a rung.
        let trials = self.storage.trials(&self.row, None)?;
        let interrupted: std::collections::HashSet<u64> = trials
            .iter()
            .filter(|t| t.interrupted)
            .map(|t| t.number)
            .collect();
        let states: BTreeMap<u64, TrialState> =
            trials.into_iter().map(|t| (t.number, t.state)).collect();
        self.curves = reports
            .into_iter()
            .filter(|(n, _)| !interrupted.contains(n))
            .map(|(n, reports)| {
                (
                    n,
                    TrialCurve {
                        number: TrialNumber(n),
                        state: states.get(&n).copied().unwrap_or(TrialState::Running),
                        reports,
                    },
                )
            })
            .collect();
        Ok(())
    }

    /// Runs the study until its budget is spent, its timeout passes, or the user quits.
    pub async fn run(
        mut self,
        mut controls: mpsc::UnboundedReceiver<Control>,
    ) -> Result<RunSummary, StorageError> {
        let recovered = self
            .storage
            .recover_interrupted(&self.row, self.study.heartbeat_grace)?;
        if !recovered.is_empty() {
            tracing_line(&format!(
                "recovered {} interrupted trial(s) from an earlier run: {:?}; their params run again",
                recovered.len(),
                recovered
            ));
        }
        self.refresh_curves()?;
        let existing: Vec<TrialSummary> = self
            .storage
            .trials(&self.row, None)?
            .iter()
            .filter(|t| t.state.is_finished())
            .map(summary_of)
            .collect();
        self.emit(Event::StudyStarted {
            info: StudyInfo {
                name: self.study.name.clone(),
                metric: self.study.metric.clone(),
                direction: self.study.direction,
                sampler: self.study.sampler.as_str().to_string(),
                pruner: self.study.pruner.name().to_string(),
                budget: self.study.trials,
                timeout: self.study.timeout,
                slots: self.study.slots.clone(),
                storage: self.study.storage.display().to_string(),
            },
            existing,
            at: SystemTime::now(),
        });

        // A resumed study's best trial keeps its learning curve in the UI: replay its reports
        // (on no slot, as they come from the database and not a running trial).
        if let Some((best, _)) = self.storage.best(&self.row)?
            && let Some(c) = self.curves.get(&best)
        {
            for report in &c.reports {
                self.emit(Event::TrialReported {
                    number: TrialNumber(best),
                    slot: usize::MAX,
                    report: report.clone(),
                });
            }
        }
        let n_slots = self.study.slots.len();
        let mut slots: Vec<Option<Running>> = (0..n_slots).map(|_| None).collect();
        let (tx, mut rx) = mpsc::unbounded_channel::<SlotMsg>();
        let deadline = self.study.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut deadline_passed = false;
        let mut stopping = false;
        let mut interrupted = false;
        let mut paused = false;
        let mut budget_full = false;
        let mut tick = tokio::time::interval(self.study.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut fatal: Option<StorageError> = None;

        loop {
            if !stopping && !paused && !deadline_passed && fatal.is_none() {
                budget_full = false;
                for (slot, entry) in slots.iter_mut().enumerate() {
                    if entry.is_some() {
                        continue;
                    }
                    match self.start_trial(slot, &tx) {
                        Ok(Some(r)) => *entry = Some(r),
                        Ok(None) => {
                            budget_full = true;
                            break;
                        }
                        Err(e) => {
                            fatal = Some(e);
                            break;
                        }
                    }
                }
            }
            if let Some(e) = &fatal
                && !stopping
            {
                tracing_line(&format!("storage failed, stopping the study: {e}"));
                stopping = true;
                for r in slots.iter_mut().flatten() {
                    r.stop_kind = Some(StopKind::Interrupt);
                    let _ = r.stop.send(StopRequest::Cancel);
                }
            }
            let idle = slots.iter().all(Option::is_none);
            if idle {
                if stopping || deadline_passed || fatal.is_some() {
                    break;
                }
                if budget_full && self.storage.count_state(&self.row, TrialState::Running)? == 0 {
                    // The budget is taken by finished trials and nothing runs anywhere that
                    // could free a place: the study is done. While other processes still run
                    // trials of it, wait for them on the tick (one may be interrupted).
                    break;
                }
            }

            tokio::select! {
                msg = rx.recv() => {
                    let Some(msg) = msg else { break };
                    match msg {
                        SlotMsg::Report(slot, report) => {
                            if let Err(e) = self.on_report(slot, &mut slots, report) {
                                fatal.get_or_insert(e);
                            }
                        }
                        SlotMsg::Done(slot, result) => {
                            if let Some(r) = slots[slot].take()
                                && let Err(e) = self.on_done(slot, r, result)
                            {
                                fatal.get_or_insert(e);
                            }
                        }
                    }
                }
                ctl = controls.recv(), if !controls.is_closed() => {
                    match ctl {
                        Some(Control::Pause) => { paused = true; self.emit(Event::Paused(true)); }
                        Some(Control::Resume) => { paused = false; self.emit(Event::Paused(false)); }
                        Some(Control::StopTrial { number, as_pruned }) => {
                            for r in slots.iter_mut().flatten() {
                                if r.number == number {
                                    r.stop_kind = Some(if as_pruned { StopKind::UserPruned } else { StopKind::UserFailed });
                                    let _ = r.stop.send(if as_pruned { StopRequest::Prune } else { StopRequest::Cancel });
                                }
                            }
                        }
                        Some(Control::Quit { graceful }) => {
                            stopping = true;
                            interrupted = true;
                            self.emit(Event::Stopping { graceful });
                            if !graceful {
                                for r in slots.iter_mut().flatten() {
                                    r.stop_kind = Some(StopKind::Interrupt);
                                    let _ = r.stop.send(StopRequest::Cancel);
                                }
                            }
                        }
                        None => {}
                    }
                }
                _ = tick.tick() => {
                    let ids: Vec<i64> = slots.iter().flatten().map(|r| r.trial_id).collect();
                    let res = self.storage.heartbeat(self.worker, &ids)
                        .and_then(|_| self.storage.recover_interrupted(&self.row, self.study.heartbeat_grace))
                        .and_then(|_| self.refresh_curves());
                    if let Err(e) = res { fatal.get_or_insert(e); }
                }
                _ = async {
                    match deadline {
                        Some(d) if !deadline_passed => tokio::time::sleep_until(d).await,
                        _ => std::future::pending().await,
                    }
                } => {
                    deadline_passed = true;
                }
            }
        }

        let rows = self.storage.trials(&self.row, None)?;
        let count = |s: TrialState| rows.iter().filter(|t| t.state == s).count() as u64;
        let summary = RunSummary {
            complete: count(TrialState::Complete),
            pruned: count(TrialState::Pruned),
            failed: rows
                .iter()
                .filter(|t| t.state == TrialState::Failed && !t.interrupted)
                .count() as u64,
            best: self.storage.best(&self.row)?,
            interrupted,
        };
        let reason = if let Some(e) = &fatal {
            format!("storage failed: {e}")
        } else if interrupted {
            "stopped by the user".to_string()
        } else if deadline_passed {
            "the study timeout passed".to_string()
        } else {
            "the trial budget is spent".to_string()
        };
        self.emit(Event::StudyFinished {
            reason,
            at: SystemTime::now(),
        });
        match fatal {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }

    /// Claims the next trial for `slot` and starts it. `None` when the budget allows no more.
    fn start_trial(
        &mut self,
        slot: usize,
        tx: &mpsc::UnboundedSender<SlotMsg>,
    ) -> Result<Option<Running>, StorageError> {
        let device = self.study.slots[slot].clone();
        // Held until the params are stored: see `SqliteStorage::ask_lock`.
        let ask_lock = self.storage.ask_lock()?;
        let claim =
            self.storage
                .claim_trial(&self.row, self.worker, self.study.trials, slot, &device)?;
        let (trial_id, number, params) = match claim {
            Claim::Full => return Ok(None),
            Claim::Queued {
                trial_id,
                number,
                params,
            } => (trial_id, number, params),
            Claim::New { trial_id, number } => {
                let (history, pending) = self.storage.history(&self.row, &self.study.space)?;
                let ctx = AskContext {
                    space: &self.study.space,
                    direction: self.study.direction,
                    history: &history,
                    pending: &pending,
                    trial_number: number,
                    seed: self.study.seed,
                };
                let params = self.sampler.ask(&ctx);
                self.storage
                    .set_params(trial_id, &self.study.space, &params)?;
                (trial_id, number, params)
            }
        };
        drop(ask_lock);
        let trial_dir = self.study.runs_dir.join(format!("trial-{:05}", number.0));
        self.storage.set_trial_dir(trial_id, &trial_dir)?;
        let (stop_tx, stop_rx) = watch::channel(StopRequest::None);
        let now = SystemTime::now();
        self.emit(Event::TrialStarted {
            number,
            slot,
            device: device.clone(),
            params: params.clone(),
            at: now,
        });
        let job = TrialJob {
            number,
            params: params.clone(),
            slot,
            device,
            trial_dir: trial_dir.clone(),
            timeout: self.trial_timeout(),
            seed: self.study.seed,
        };
        let runner = Arc::clone(&self.runner);
        let tx = tx.clone();
        tokio::spawn(async move {
            if let Err(e) = tokio::fs::create_dir_all(&trial_dir).await {
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
                    },
                ));
                return;
            }
            let (rtx, mut rrx) = mpsc::unbounded_channel();
            let fut = runner.run(job, rtx, stop_rx);
            tokio::pin!(fut);
            // Reports and the end travel on one channel, so the end never overtakes a report.
            let result = loop {
                tokio::select! {
                    biased;
                    Some(r) = rrx.recv() => { let _ = tx.send(SlotMsg::Report(slot, r)); }
                    res = &mut fut => break res,
                }
            };
            while let Ok(r) = rrx.try_recv() {
                let _ = tx.send(SlotMsg::Report(slot, r));
            }
            let _ = tx.send(SlotMsg::Done(slot, result));
        });
        Ok(Some(Running {
            trial_id,
            number,
            params,
            stop: stop_tx,
            stop_kind: None,
            seq: 0,
            last_step: None,
            last_value: None,
            final_value: None,
            started: Instant::now(),
        }))
    }

    fn trial_timeout(&self) -> Option<Duration> {
        self.study.trial.timeout()
    }

    fn on_report(
        &mut self,
        slot: usize,
        slots: &mut [Option<Running>],
        mut report: Report,
    ) -> Result<(), StorageError> {
        let Some(r) = slots[slot].as_mut() else {
            return Ok(());
        };
        let is_final = report.metrics.remove(FINAL_KEY).is_some();
        self.storage
            .add_report(r.trial_id, r.seq, &report, is_final, &self.study.metric)?;
        r.seq += 1;
        let value = report.metrics.get(&self.study.metric).copied();
        if is_final {
            r.final_value = value.or(r.final_value);
        } else {
            r.last_step = Some(report.step);
            if value.is_some() {
                r.last_value = value;
            }
        }
        let number = r.number;
        self.emit(Event::TrialReported {
            number,
            slot,
            report: report.clone(),
        });
        if is_final || value.is_none() || r.stop_kind.is_some() {
            return Ok(());
        }
        let curve = self.curves.entry(number.0).or_insert_with(|| TrialCurve {
            number,
            state: TrialState::Running,
            reports: Vec::new(),
        });
        curve.state = TrialState::Running;
        curve.reports.push(report);
        let trials: Vec<TrialCurve> = self.curves.values().cloned().collect();
        let ctx = PruneContext {
            direction: self.study.direction,
            metric: &self.study.metric,
            resource: self.study.pruner.resource(),
            trial: number,
            trials: &trials,
        };
        if self.pruner.should_prune(&ctx) {
            r.stop_kind = Some(StopKind::Prune);
            let _ = r.stop.send(StopRequest::Prune);
        }
        Ok(())
    }

    fn on_done(&mut self, slot: usize, r: Running, result: RunResult) -> Result<(), StorageError> {
        let metric = &self.study.metric;
        let value = r.final_value.or(r.last_value);
        let (state, value, error, tail, interrupted, pruned_step) = match (&result.end, r.stop_kind)
        {
            (_, Some(StopKind::Interrupt)) => (
                TrialState::Failed,
                None,
                Some(
                    "interrupted: stopped when the study was stopped; its params run again"
                        .to_string(),
                ),
                None,
                true,
                None,
            ),
            (RunEnd::Finished, _) => match value {
                Some(v) if v.is_finite() => {
                    (TrialState::Complete, Some(v), None, None, false, None)
                }
                Some(v) => (
                    TrialState::Failed,
                    None,
                    Some(format!(
                        "the value of `{metric}` is {v}, not a finite number"
                    )),
                    None,
                    false,
                    None,
                ),
                None => (
                    TrialState::Failed,
                    None,
                    Some(format!(
                        "no value: the trial ended without reporting `{metric}`"
                    )),
                    None,
                    false,
                    None,
                ),
            },
            (_, Some(StopKind::Prune | StopKind::UserPruned)) => (
                TrialState::Pruned,
                r.last_value,
                None,
                None,
                false,
                r.last_step,
            ),
            (_, Some(StopKind::UserFailed)) => (
                TrialState::Failed,
                None,
                Some("stopped by the user".to_string()),
                None,
                false,
                None,
            ),
            (RunEnd::Failed { reason, log_tail }, None) => (
                TrialState::Failed,
                None,
                Some(reason.clone()),
                log_tail.clone(),
                false,
                None,
            ),
            (RunEnd::Stopped, None) => (
                TrialState::Failed,
                None,
                Some("stopped".to_string()),
                None,
                false,
                None,
            ),
        };
        self.storage.finish_trial(
            r.trial_id,
            state,
            value,
            error.as_deref(),
            tail.as_deref(),
            &result.logs,
            pruned_step,
            interrupted,
        )?;
        if let Some(c) = self.curves.get_mut(&r.number.0) {
            c.state = state;
        }
        self.emit(Event::TrialFinished {
            slot,
            trial: TrialSummary {
                number: r.number,
                state,
                value: if state == TrialState::Pruned {
                    r.last_value
                } else {
                    value
                },
                params: r.params,
                error: error.map(|e| match tail {
                    Some(t) if !t.is_empty() => format!("{e}\n{t}"),
                    _ => e,
                }),
                duration: Some(r.started.elapsed()),
                logs: result
                    .logs
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect(),
            },
            at: SystemTime::now(),
        });
        Ok(())
    }
}

/// Diagnostics of the scheduler itself go to standard error, never standard output (which
/// carries the line output or the UI).
fn tracing_line(msg: &str) {
    eprintln!("tune: {msg}");
}
