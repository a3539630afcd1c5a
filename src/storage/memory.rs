//! Storage in memory: the same contract as the database backends, for a process that needs no
//! file (`tune ask-tell` without `--db`, the optimizer benchmark, engine and pruner tests).
//! A clone is another handle on the same data, as a second process opening the same database
//! would be (the pruner testkit resumes a study that way), heartbeats and recovery included.
//! It is held to the same conformance suite as SQLite and PostgreSQL (`storage::conformance`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::{
    ClaimRequest, History, NewStudy, Propose, Storage, StorageError, StoredReport, StoredStudyFile,
    StudyRow, StudySummary,
};
use crate::space::{Params, Space};
use crate::trial::{
    Placement, Ran, Report, Trial, TrialId, TrialNumber, TrialState, TrialStatus, WorkerId,
};

struct Study {
    row: StudyRow,
    /// Trial ids in number order.
    trials: Vec<TrialId>,
    file: StoredStudyFile,
}

struct Stored {
    study: i64,
    trial: Trial,
    reports: Vec<StoredReport>,
    /// `[[enqueue]]`/`tune enqueue` params, so a resume queues them once.
    fixed: bool,
    /// A running trial's last sign of life: its claim or its worker's last heartbeat.
    beat: Option<Instant>,
    /// The interrupted trial whose params this one runs again.
    retry_of: Option<TrialNumber>,
    /// The step of its last checkpoint.
    checkpoint: Option<u64>,
    /// The trial it continues from (population-based training).
    parent: Option<super::Parent>,
}

/// The params of `params` that `space` has (what a queued trial keeps).
fn of_space(space: &Space, params: &Params) -> Params {
    params
        .iter()
        .filter(|(k, _)| space.get(k).is_some())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Every study and trial in plain collections.
#[derive(Default)]
struct Data {
    studies: Vec<Study>,
    trials: BTreeMap<TrialId, Stored>,
    workers: Vec<(WorkerId, i64, Vec<String>)>,
}

/// A handle on studies kept in memory; clones share them.
#[derive(Clone, Default)]
pub struct MemoryStorage {
    data: Arc<Mutex<Data>>,
}

impl MemoryStorage {
    pub fn new() -> MemoryStorage {
        MemoryStorage::default()
    }

    fn data(&self) -> MutexGuard<'_, Data> {
        // A panic while the lock was held leaves whole values behind (every write replaces
        // a field), so the data stays usable.
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Data {
    fn study_mut(&mut self, id: i64) -> Result<&mut Study, StorageError> {
        self.studies
            .iter_mut()
            .find(|s| s.row.id == id)
            .ok_or_else(|| StorageError::NoStudy {
                path: PathBuf::from(":memory:"),
                name: format!("#{id}"),
            })
    }

    fn stored(&self, id: TrialId) -> Result<&Stored, StorageError> {
        self.trials.get(&id).ok_or_else(|| missing(id))
    }

    fn stored_mut(&mut self, id: TrialId) -> Result<&mut Stored, StorageError> {
        self.trials.get_mut(&id).ok_or_else(|| missing(id))
    }

    fn of_study(&self, study: &StudyRow) -> impl Iterator<Item = &Stored> {
        self.studies
            .iter()
            .filter(move |s| s.row.id == study.id)
            .flat_map(|s| s.trials.iter())
            .filter_map(|id| self.trials.get(id))
    }

    /// Adds a trial with the next number of the study.
    fn insert(
        &mut self,
        study: i64,
        params: Params,
        status: TrialStatus,
    ) -> Result<TrialId, StorageError> {
        // Never an id in use, also after a study was deleted.
        let id = TrialId(self.trials.keys().next_back().map_or(0, |k| k.0) + 1);
        let s = self.study_mut(study)?;
        let number = TrialNumber(s.trials.len() as u64);
        s.trials.push(id);
        self.trials.insert(
            id,
            Stored {
                study,
                trial: Trial {
                    id,
                    ..Trial::unstored(number, params, status)
                },
                reports: Vec::new(),
                fixed: false,
                beat: None,
                retry_of: None,
                checkpoint: None,
                parent: None,
            },
        );
        Ok(id)
    }

    /// Queues the params of interrupted trial `number` again under a new number.
    fn requeue(
        &mut self,
        study: i64,
        params: Params,
        number: TrialNumber,
    ) -> Result<TrialId, StorageError> {
        let id = self.insert(study, params, TrialStatus::Queued)?;
        if let Some(s) = self.trials.get_mut(&id) {
            s.retry_of = Some(number);
        }
        Ok(id)
    }
}

fn missing(id: TrialId) -> StorageError {
    StorageError::Conflict {
        path: PathBuf::from(":memory:"),
        message: format!("no trial with id {}", id.0),
    }
}

fn counts_toward_budget(t: &Trial) -> bool {
    let ended_or_running = match &t.status {
        TrialStatus::Complete { .. } | TrialStatus::Pruned { .. } => true,
        TrialStatus::Running { .. } => true,
        TrialStatus::Failed { interrupted, .. } => !interrupted,
        TrialStatus::Queued => false,
    };
    ended_or_running && !t.discarded
}

impl Data {
    fn location(&self) -> String {
        ":memory:".into()
    }
}

impl Storage for Data {
    fn location(&self) -> String {
        Data::location(self)
    }

    fn find_study(&self, name: &str) -> Result<Option<StudyRow>, StorageError> {
        Ok(self
            .studies
            .iter()
            .find(|s| s.row.name == name)
            .map(|s| s.row.clone()))
    }

    fn create_or_load_study(&mut self, new: &NewStudy<'_>) -> Result<StudyRow, StorageError> {
        if let Some(s) = self.find_study(new.name)? {
            return super::check_same(&self.location(), s, new);
        }
        let row = StudyRow {
            // Never an id in use, also after a study was deleted.
            id: self.studies.iter().map(|s| s.row.id).max().unwrap_or(0) + 1,
            name: new.name.to_string(),
            direction: new.direction,
            metric: new.metric.to_string(),
            others: new.others.to_vec(),
        };
        self.studies.push(Study {
            row: row.clone(),
            trials: Vec::new(),
            file: StoredStudyFile {
                path: new.file.map(|p| p.display().to_string()),
                text: new
                    .source
                    .map(|s| super::text::study_file_for_storage(s).into_owned()),
            },
        });
        Ok(row)
    }

    fn list_studies(&self) -> Result<Vec<StudySummary>, StorageError> {
        let mut out = Vec::new();
        for s in &self.studies {
            let count = |state: TrialState| {
                self.of_study(&s.row)
                    .filter(|t| t.trial.state() == state)
                    .count() as u64
            };
            let best = self.best(&s.row)?;
            out.push(StudySummary {
                others: Vec::new(),
                pareto_front: None,
                name: s.row.name.clone(),
                direction: s.row.direction,
                metric: s.row.metric.clone(),
                trials: s.trials.len() as u64,
                queued: count(TrialState::Queued),
                running: count(TrialState::Running),
                complete: count(TrialState::Complete),
                pruned: count(TrialState::Pruned),
                failed: count(TrialState::Failed),
                best_value: best.map(|b| b.1),
                best_trial: best.map(|b| b.0),
            });
        }
        Ok(out)
    }

    fn register_worker(
        &mut self,
        study: &StudyRow,
        devices: &[String],
    ) -> Result<WorkerId, StorageError> {
        // Never an id in use, also after a study (and its workers) was deleted.
        let id = WorkerId(self.workers.iter().map(|w| w.0.0).max().unwrap_or(0) + 1);
        self.workers.push((id, study.id, devices.to_vec()));
        Ok(id)
    }

    /// Stamps the worker's running trials; a trial that is not running (ended, declared
    /// interrupted, unknown) is left as it is, as on the database backends.
    fn heartbeat(&mut self, _worker: WorkerId, trials: &[TrialId]) -> Result<(), StorageError> {
        let now = Instant::now();
        for id in trials {
            if let Some(s) = self.trials.get_mut(id)
                && s.trial.state() == TrialState::Running
            {
                s.beat = Some(now);
            }
        }
        Ok(())
    }

    /// Marks running trials of the study with no sign of life for longer than `grace` as
    /// failed (interrupted) and queues their params again, as the database backends do: the
    /// handles on one store stand for processes, and one whose engine stops stamping its
    /// trials is gone. (No process can die apart from the store here, so there is no "dead
    /// process" case.)
    fn recover_interrupted(
        &mut self,
        study: &StudyRow,
        grace: Duration,
    ) -> Result<Vec<TrialNumber>, StorageError> {
        let gone: Vec<TrialId> = self
            .of_study(study)
            .filter(|s| {
                s.trial.state() == TrialState::Running && s.beat.is_none_or(|b| b.elapsed() > grace)
            })
            .map(|s| s.trial.id)
            .collect();
        let mut recovered = Vec::with_capacity(gone.len());
        for id in gone {
            let s = self.stored_mut(id)?;
            let TrialStatus::Running { at, started } = &s.trial.status else {
                continue;
            };
            let ran = Ran {
                at: at.clone(),
                started: *started,
                finished: Some(SystemTime::now()),
                gpu: None,
            };
            s.trial.status = TrialStatus::Failed {
                // Nothing dies here but the store itself: its trials only fall silent.
                reason: super::Gone::Silent.reason(grace),
                log_tail: None,
                interrupted: true,
                ran,
            };
            s.beat = None;
            recovered.push(s.trial.number);
            let (study, params, number) = (s.study, s.trial.params.clone(), s.trial.number);
            if !params.is_empty() {
                self.requeue(study, params, number)?;
            }
        }
        Ok(recovered)
    }

    fn claim(
        &mut self,
        study: &StudyRow,
        req: &ClaimRequest<'_>,
        propose: &mut Propose<'_>,
    ) -> Result<Option<Trial>, StorageError> {
        let taken = self
            .of_study(study)
            .filter(|t| counts_toward_budget(&t.trial))
            .count() as u64;
        if req.budget.is_some_and(|b| taken >= b) {
            return Ok(None);
        }
        let at = Placement {
            worker: Some(req.worker),
            slot: Some(req.slot),
            device: Some(req.device.to_string()),
            host: Some(super::host::hostname()),
        };
        let running = TrialStatus::Running {
            at,
            started: Some(SystemTime::now()),
        };
        let queued = self
            .of_study(study)
            .find(|t| t.trial.state() == TrialState::Queued)
            .map(|t| t.trial.id);
        let id = match queued {
            Some(id) => {
                self.stored_mut(id)?.trial.status = running;
                id
            }
            None => {
                let id = self.insert(study.id, Params::new(), running)?;
                let number = self.stored(id)?.trial.number;
                let history = self.history(study, req.space)?;
                let params = propose(&history, number);
                self.stored_mut(id)?.trial.params = params;
                id
            }
        };
        // Its first sign of life, as the database backends stamp a claimed trial.
        let s = self.stored_mut(id)?;
        s.beat = Some(Instant::now());
        Ok(Some(s.trial.clone()))
    }

    fn set_trial_dir(&mut self, trial: TrialId, dir: &Path) -> Result<(), StorageError> {
        self.stored_mut(trial)?.trial.trial_dir = Some(dir.to_path_buf());
        Ok(())
    }

    fn set_checkpoint_step(&mut self, trial: TrialId, step: u64) -> Result<(), StorageError> {
        self.stored_mut(trial)?.checkpoint = Some(step);
        Ok(())
    }

    fn checkpoint_step(&self, trial: TrialId) -> Result<Option<u64>, StorageError> {
        Ok(self.stored(trial)?.checkpoint)
    }

    fn enqueue(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
    ) -> Result<TrialNumber, StorageError> {
        let id = self.insert(study.id, of_space(space, params), TrialStatus::Queued)?;
        let s = self.stored_mut(id)?;
        s.fixed = true;
        Ok(s.trial.number)
    }

    fn enqueue_child(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
        parent: super::Parent,
    ) -> Result<TrialNumber, StorageError> {
        let id = self.insert(study.id, of_space(space, params), TrialStatus::Queued)?;
        let s = self.stored_mut(id)?;
        s.parent = Some(parent);
        Ok(s.trial.number)
    }

    fn set_parent(&mut self, trial: TrialId, parent: super::Parent) -> Result<(), StorageError> {
        self.stored_mut(trial)?.parent = Some(parent);
        Ok(())
    }

    fn lineage(&self, study: &StudyRow) -> Result<Vec<super::Lineage>, StorageError> {
        let mut out: Vec<super::Lineage> = self
            .of_study(study)
            .filter_map(|s| {
                s.parent.map(|p| super::Lineage {
                    child: s.trial.number,
                    parent: p,
                })
            })
            .collect();
        out.sort_by_key(|l| l.child);
        Ok(out)
    }

    fn has_fixed_params(&self, study: &StudyRow, params: &Params) -> Result<bool, StorageError> {
        Ok(self
            .of_study(study)
            .any(|t| t.fixed && t.trial.params == *params))
    }

    fn add_report(
        &mut self,
        trial: TrialId,
        _seq: u64,
        report: &Report,
        is_final: bool,
        _metric: &str,
    ) -> Result<(), StorageError> {
        let report = &*super::text::storable_report(report);
        let location = self.location();
        let s = self.stored_mut(trial)?;
        if !matches!(s.trial.status, TrialStatus::Running { .. }) {
            return Err(StorageError::Fenced {
                path: PathBuf::from(location),
                trial: trial.0,
            });
        }
        s.trial.metrics = report.metrics.clone();
        s.reports.push(StoredReport {
            report: report.clone(),
            is_final,
            at: Some(SystemTime::now()),
        });
        Ok(())
    }

    fn finish_trial(
        &mut self,
        trial: TrialId,
        status: &TrialStatus,
        logs: &[PathBuf],
    ) -> Result<(), StorageError> {
        let status = &*super::text::storable_status(status);
        let location = self.location();
        let s = self.stored_mut(trial)?;
        // Only a running trial may end (see `StorageError::Fenced`).
        let (at, started) = match &s.trial.status {
            TrialStatus::Running { at, started } => (at.clone(), *started),
            _ => {
                return Err(StorageError::Fenced {
                    path: PathBuf::from(location),
                    trial: trial.0,
                });
            }
        };
        let ran = Ran {
            at,
            started,
            finished: Some(SystemTime::now()),
            gpu: status.gpu().copied(),
        };
        s.trial.status = status.clone().with_ran(ran);
        s.trial.logs = logs.to_vec();
        if status.interrupted() {
            // Run the same params again: the interruption was not the trial's fault.
            let (study, params, number) = (s.study, s.trial.params.clone(), s.trial.number);
            if !params.is_empty() {
                self.requeue(study, params, number)?;
            }
        }
        Ok(())
    }

    fn history(&self, study: &StudyRow, space: &Space) -> Result<History, StorageError> {
        Ok(super::history_of(
            self.of_study(study).map(|s| &s.trial),
            space,
            |id| {
                self.trials
                    .get(&id)
                    .map(|s| {
                        s.reports
                            .iter()
                            .filter(|r| !r.is_final)
                            .filter_map(|r| {
                                r.report
                                    .metrics
                                    .get(&study.metric)
                                    .map(|v| (r.report.step, *v))
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            },
        ))
    }

    fn reports(
        &self,
        study: &StudyRow,
    ) -> Result<BTreeMap<TrialNumber, Vec<Report>>, StorageError> {
        // A trial with no report but its final one has none here, as on the databases.
        Ok(self
            .of_study(study)
            .map(|s| {
                let reports: Vec<Report> = s
                    .reports
                    .iter()
                    .filter(|r| !r.is_final)
                    .map(|r| r.report.clone())
                    .collect();
                (s.trial.number, reports)
            })
            .filter(|(_, r)| !r.is_empty())
            .collect())
    }

    fn trial_reports(&self, trial: TrialId) -> Result<Vec<StoredReport>, StorageError> {
        Ok(self.stored(trial)?.reports.clone())
    }

    fn trials(
        &self,
        study: &StudyRow,
        state: Option<TrialState>,
    ) -> Result<Vec<Trial>, StorageError> {
        Ok(self
            .of_study(study)
            .filter(|s| state.is_none_or(|st| s.trial.state() == st))
            .map(|s| s.trial.clone())
            .collect())
    }

    fn reruns(&self, study: &StudyRow) -> Result<Vec<(TrialNumber, TrialNumber)>, StorageError> {
        Ok(self
            .of_study(study)
            .filter_map(|s| Some((s.trial.number, s.retry_of?)))
            .collect())
    }

    fn promote(
        &mut self,
        study: &StudyRow,
        TrialNumber(number): TrialNumber,
        reason: &str,
    ) -> Result<Option<TrialNumber>, StorageError> {
        let Some(s) = self
            .trials
            .values_mut()
            .find(|s| s.study == study.id && s.trial.number.0 == number && s.trial.status.paused())
        else {
            return Ok(None);
        };
        let TrialStatus::Pruned { ran, .. } = &s.trial.status else {
            return Ok(None);
        };
        // An earlier attempt of its re-run, as on the database backends (`sql::PROMOTED_*`).
        let ran = ran.clone();
        s.trial.status = TrialStatus::Failed {
            reason: reason.to_string(),
            log_tail: None,
            interrupted: true,
            ran,
        };
        let (study_id, params) = (s.study, s.trial.params.clone());
        let id = self.requeue(study_id, params, TrialNumber(number))?;
        Ok(self.trials.get(&id).map(|s| s.trial.number))
    }

    fn retry_of(
        &self,
        study: &StudyRow,
        TrialNumber(number): TrialNumber,
    ) -> Result<Option<TrialNumber>, StorageError> {
        Ok(self
            .of_study(study)
            .find(|s| s.trial.number.0 == number)
            .and_then(|s| s.retry_of))
    }

    fn trial(
        &self,
        study: &StudyRow,
        TrialNumber(number): TrialNumber,
    ) -> Result<Option<Trial>, StorageError> {
        Ok(self
            .of_study(study)
            .find(|s| s.trial.number.0 == number)
            .map(|s| s.trial.clone()))
    }

    fn counted(&self, study: &StudyRow) -> Result<u64, StorageError> {
        Ok(self
            .of_study(study)
            .filter(|s| counts_toward_budget(&s.trial) && s.trial.state() != TrialState::Running)
            .count() as u64)
    }

    fn count_state(&self, study: &StudyRow, state: TrialState) -> Result<u64, StorageError> {
        Ok(self
            .of_study(study)
            .filter(|s| s.trial.state() == state)
            .count() as u64)
    }

    fn best(&self, study: &StudyRow) -> Result<Option<(TrialNumber, f64)>, StorageError> {
        let mut best: Option<(TrialNumber, f64)> = None;
        for s in self.of_study(study) {
            if let TrialStatus::Complete { value, .. } = s.trial.status
                && value.is_finite()
                && !s.trial.discarded
                && best.is_none_or(|(_, b)| study.direction.better(value, b))
            {
                best = Some((s.trial.number, value));
            }
        }
        Ok(best)
    }

    fn set_study_file(
        &mut self,
        study: &StudyRow,
        file: &Path,
        text: &str,
    ) -> Result<(), StorageError> {
        if let Some(s) = self.studies.iter_mut().find(|s| s.row.id == study.id) {
            s.file = StoredStudyFile {
                path: Some(file.display().to_string()),
                text: Some(super::text::study_file_for_storage(text).into_owned()),
            };
        }
        Ok(())
    }

    fn delete_study(&mut self, study: &StudyRow) -> Result<u64, StorageError> {
        let Some(k) = self.studies.iter().position(|s| s.row.id == study.id) else {
            return Ok(0);
        };
        let gone = self.studies.remove(k);
        for id in &gone.trials {
            self.trials.remove(id);
        }
        self.workers.retain(|(_, s, _)| *s != study.id);
        Ok(gone.trials.len() as u64)
    }

    fn set_discarded(
        &mut self,
        study: &StudyRow,
        numbers: &[u64],
        discarded: bool,
    ) -> Result<u64, StorageError> {
        let ids: Vec<TrialId> = self
            .of_study(study)
            .filter(|s| numbers.contains(&s.trial.number.0))
            .map(|s| s.trial.id)
            .collect();
        let mut changed = 0;
        for id in ids {
            if let Some(s) = self.trials.get_mut(&id)
                && !matches!(
                    s.trial.status,
                    TrialStatus::Queued | TrialStatus::Running { .. }
                )
                && s.trial.discarded != discarded
            {
                s.trial.discarded = discarded;
                changed += 1;
            }
        }
        Ok(changed)
    }

    fn study_file(&self, study: &StudyRow) -> Result<StoredStudyFile, StorageError> {
        Ok(self
            .studies
            .iter()
            .find(|s| s.row.id == study.id)
            .map(|s| s.file.clone())
            .unwrap_or(StoredStudyFile {
                path: None,
                text: None,
            }))
    }
}

/// Every call takes the lock once, so each is one transaction, as the trait asks.
impl Storage for MemoryStorage {
    fn location(&self) -> String {
        self.data().location()
    }
    fn find_study(&self, name: &str) -> Result<Option<StudyRow>, StorageError> {
        self.data().find_study(name)
    }
    fn create_or_load_study(&mut self, new: &NewStudy<'_>) -> Result<StudyRow, StorageError> {
        self.data().create_or_load_study(new)
    }
    fn list_studies(&self) -> Result<Vec<StudySummary>, StorageError> {
        self.data().list_studies()
    }
    fn register_worker(
        &mut self,
        study: &StudyRow,
        devices: &[String],
    ) -> Result<WorkerId, StorageError> {
        self.data().register_worker(study, devices)
    }
    fn heartbeat(&mut self, worker: WorkerId, trials: &[TrialId]) -> Result<(), StorageError> {
        self.data().heartbeat(worker, trials)
    }
    fn recover_interrupted(
        &mut self,
        study: &StudyRow,
        grace: Duration,
    ) -> Result<Vec<TrialNumber>, StorageError> {
        self.data().recover_interrupted(study, grace)
    }
    fn claim(
        &mut self,
        study: &StudyRow,
        req: &ClaimRequest<'_>,
        propose: &mut Propose<'_>,
    ) -> Result<Option<Trial>, StorageError> {
        self.data().claim(study, req, propose)
    }
    fn set_trial_dir(&mut self, trial: TrialId, dir: &Path) -> Result<(), StorageError> {
        self.data().set_trial_dir(trial, dir)
    }
    fn set_checkpoint_step(&mut self, trial: TrialId, step: u64) -> Result<(), StorageError> {
        self.data().set_checkpoint_step(trial, step)
    }
    fn checkpoint_step(&self, trial: TrialId) -> Result<Option<u64>, StorageError> {
        self.data().checkpoint_step(trial)
    }
    fn enqueue(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
    ) -> Result<TrialNumber, StorageError> {
        self.data().enqueue(study, space, params)
    }
    fn has_fixed_params(&self, study: &StudyRow, params: &Params) -> Result<bool, StorageError> {
        self.data().has_fixed_params(study, params)
    }
    fn enqueue_child(
        &mut self,
        study: &StudyRow,
        space: &Space,
        params: &Params,
        parent: super::Parent,
    ) -> Result<TrialNumber, StorageError> {
        self.data().enqueue_child(study, space, params, parent)
    }
    fn set_parent(&mut self, trial: TrialId, parent: super::Parent) -> Result<(), StorageError> {
        self.data().set_parent(trial, parent)
    }
    fn lineage(&self, study: &StudyRow) -> Result<Vec<super::Lineage>, StorageError> {
        self.data().lineage(study)
    }
    fn add_report(
        &mut self,
        trial: TrialId,
        seq: u64,
        report: &Report,
        is_final: bool,
        metric: &str,
    ) -> Result<(), StorageError> {
        self.data().add_report(trial, seq, report, is_final, metric)
    }
    fn finish_trial(
        &mut self,
        trial: TrialId,
        status: &TrialStatus,
        logs: &[PathBuf],
    ) -> Result<(), StorageError> {
        self.data().finish_trial(trial, status, logs)
    }
    fn history(&self, study: &StudyRow, space: &Space) -> Result<History, StorageError> {
        self.data().history(study, space)
    }
    fn reports(
        &self,
        study: &StudyRow,
    ) -> Result<BTreeMap<TrialNumber, Vec<Report>>, StorageError> {
        self.data().reports(study)
    }
    fn trial_reports(&self, trial: TrialId) -> Result<Vec<StoredReport>, StorageError> {
        self.data().trial_reports(trial)
    }
    fn trials(
        &self,
        study: &StudyRow,
        state: Option<TrialState>,
    ) -> Result<Vec<Trial>, StorageError> {
        self.data().trials(study, state)
    }
    fn trial(
        &self,
        study: &StudyRow,
        TrialNumber(number): TrialNumber,
    ) -> Result<Option<Trial>, StorageError> {
        self.data().trial(study, TrialNumber(number))
    }
    fn promote(
        &mut self,
        study: &StudyRow,
        number: TrialNumber,
        reason: &str,
    ) -> Result<Option<TrialNumber>, StorageError> {
        self.data().promote(study, number, reason)
    }
    fn reruns(&self, study: &StudyRow) -> Result<Vec<(TrialNumber, TrialNumber)>, StorageError> {
        self.data().reruns(study)
    }
    fn retry_of(
        &self,
        study: &StudyRow,
        number: TrialNumber,
    ) -> Result<Option<TrialNumber>, StorageError> {
        self.data().retry_of(study, number)
    }
    fn counted(&self, study: &StudyRow) -> Result<u64, StorageError> {
        self.data().counted(study)
    }
    fn count_state(&self, study: &StudyRow, state: TrialState) -> Result<u64, StorageError> {
        self.data().count_state(study, state)
    }
    fn best(&self, study: &StudyRow) -> Result<Option<(TrialNumber, f64)>, StorageError> {
        self.data().best(study)
    }
    fn study_file(&self, study: &StudyRow) -> Result<StoredStudyFile, StorageError> {
        self.data().study_file(study)
    }
    fn delete_study(&mut self, study: &StudyRow) -> Result<u64, StorageError> {
        self.data().delete_study(study)
    }
    fn set_discarded(
        &mut self,
        study: &StudyRow,
        numbers: &[u64],
        discarded: bool,
    ) -> Result<u64, StorageError> {
        self.data().set_discarded(study, numbers, discarded)
    }
    fn set_study_file(
        &mut self,
        study: &StudyRow,
        file: &Path,
        text: &str,
    ) -> Result<(), StorageError> {
        self.data().set_study_file(study, file, text)
    }
}
