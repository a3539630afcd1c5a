//! The replay of a stored study into events: what `tune watch` shows of a study that another
//! process (or machine) is running, read from its database.
//!
//! A [`Poller`] reads the database read-only about once a second and turns what changed into
//! the same [`Event`]s the scheduler sends in-process, so one UI state
//! drives both. It never writes and never holds a lock that could make the study's writes
//! wait: the connection is `SQLITE_OPEN_READ_ONLY` on a WAL database, and when SQLite's
//! `data_version` says nothing was committed since the last poll, it reads nothing at all.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use super::{Event, NO_SLOT, StudyInfo, Update};
use crate::spec::{self, Overrides};
use crate::storage::host::{hostname, process_alive};
use crate::storage::watch::WatchWorker;
use crate::storage::watch::{WatchSource, open_watch};
use crate::storage::{StorageError, StorageUrl, StoredStudyFile, StudyRow};
use crate::trial::{Report, Trial, TrialNumber, TrialState};

/// How often the database is polled.
pub const POLL: Duration = Duration::from_secs(1);

/// The study file's settings that the database keeps only as text.
#[derive(Debug, Clone)]
struct Settings {
    sampler: String,
    pruner: String,
    rungs: Option<super::RungSchedule>,
    exploration: Option<super::Exploration>,
    budget: Option<u64>,
    timeout: Option<Duration>,
    /// After this long without a heartbeat, a worker process counts as gone.
    grace: Duration,
    space: Option<crate::space::Space>,
}

/// The process(es) running the study now, as the poller last saw them.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    workers: Vec<i64>,
    started_at: SystemTime,
    /// The first global slot index of each worker's slots.
    slot_base: HashMap<i64, usize>,
    slots: Vec<String>,
}

/// Reads a study's changes from its database and turns them into events.
pub struct Poller {
    storage: Box<dyn WatchSource>,
    study: StudyRow,
    settings: Settings,
    /// The stored study file the settings were read from: `tune run` with a changed file
    /// (a raised budget) stores the new one, and the poller reads it again.
    study_text: Option<String>,
    data_version: Option<i64>,
    /// What the UI was last told of each trial, by trial id.
    known: HashMap<i64, (TrialNumber, TrialState, Option<usize>)>,
    /// The children of population-based training already told ([`Event::Lineage`]).
    lineage_sent: std::collections::HashSet<TrialNumber>,
    last_report: i64,
    run: Option<Run>,
    workers: Vec<WatchWorker>,
    finished: bool,
    /// This machine's name, to tell local worker processes from remote ones.
    host: String,
    /// When the last trial the poller has seen finished: when a spent budget ended the run.
    last_finish: Option<SystemTime>,
}

impl Poller {
    /// Opens the database read-only and finds the study.
    pub fn open(db: &StorageUrl, study: &str) -> Result<Poller, StorageError> {
        let storage = open_watch(db)?;
        let row = storage.storage().study(study)?;
        let stored = storage.storage().study_file(&row)?;
        let settings = settings_of(&stored);
        Ok(Poller {
            storage,
            study: row,
            settings,
            study_text: stored.text,
            data_version: None,
            known: HashMap::new(),
            lineage_sent: Default::default(),
            last_report: 0,
            run: None,
            workers: Vec::new(),
            finished: false,
            host: hostname(),
            last_finish: None,
        })
    }

    /// One poll: the updates since the last one (on the first, the whole study).
    pub fn poll(&mut self, now: SystemTime) -> Result<Vec<Update>, StorageError> {
        let dv = self.storage.change_marker()?;
        let changed = self.data_version != Some(dv);
        self.data_version = Some(dv);
        let mut out = Vec::new();
        if changed {
            // One read transaction: the states, the trials and the reports are one snapshot,
            // so no report can name a trial this poll has not seen.
            self.storage.begin_snapshot()?;
            let read = self.storage.watch_workers(&self.study).and_then(|w| {
                self.workers = w;
                self.read_changes(now, &mut out)
            });
            // Ends the read transaction (there is nothing to commit), on error too.
            self.storage.end_snapshot();
            read?;
        } else {
            // Nothing committed; only the passing of time can end a run (a dead process).
            self.check_run(now, &mut out);
        }
        Ok(out)
    }

    fn live_run(&self, now: SystemTime) -> Option<Run> {
        let live: Vec<&WatchWorker> = self
            .workers
            .iter()
            .filter(|w| {
                let fresh = w.heartbeat.is_some_and(|h| {
                    now.duration_since(h).unwrap_or_default() <= self.settings.grace
                });
                // On this machine a process that exited is known to be gone at once, without
                // waiting out the grace period.
                fresh && (w.host != self.host || process_alive(w.pid))
            })
            .collect();
        if live.is_empty() {
            return None;
        }
        let mut slot_base = HashMap::new();
        let mut slots = Vec::new();
        // Workers on several machines (`tune worker`): each slot is named with its host, so
        // the UI's worker rows say where every trial runs.
        let many_hosts = live.iter().any(|w| w.host != live[0].host);
        for w in &live {
            slot_base.insert(w.worker_id, slots.len());
            if many_hosts {
                slots.extend(w.devices.iter().map(|d| format!("{}/{d}", w.host)));
            } else {
                slots.extend(w.devices.iter().cloned());
            }
        }
        Some(Run {
            workers: live.iter().map(|w| w.worker_id).collect(),
            started_at: live
                .iter()
                .filter_map(|w| w.started_at)
                .min()
                .unwrap_or(now),
            slot_base,
            slots,
        })
    }

    fn info(&self, slots: Vec<String>) -> StudyInfo {
        StudyInfo {
            name: self.study.name.clone(),
            metric: self.study.metric.clone(),
            direction: self.study.direction,
            others: self.study.others.clone(),
            sampler: self.settings.sampler.clone(),
            pruner: self.settings.pruner.clone(),
            rungs: self.settings.rungs.clone(),
            exploration: self.settings.exploration,
            budget: self.settings.budget,
            timeout: self.settings.timeout,
            slots,
            storage: self.storage.storage().location(),
            space: self.settings.space.clone(),
        }
    }

    fn global_slot(&self, t: &Trial) -> Option<usize> {
        let run = self.run.as_ref()?;
        let at = t.status.placement()?;
        let base = run.slot_base.get(&at.worker?.0)?;
        Some(base + at.slot?)
    }

    /// Ends the run in the UI: no live worker process is left, or the budget is spent.
    fn finish(&mut self, reason: String, at: SystemTime, out: &mut Vec<Update>) {
        // A failed read leaves the printer with the best of the trials it was shown, which for
        // a replay is every trial anyway.
        let best = self.storage.storage().best(&self.study).unwrap_or(None);
        out.push(Update::Event(Event::StudyFinished { reason, best, at }));
        self.finished = true;
        self.run = None;
    }

    fn finish_dead(&mut self, now: SystemTime, out: &mut Vec<Update>) {
        let last_beat = self.workers.iter().filter_map(|w| w.heartbeat).max();
        let reason = match last_beat {
            Some(t) => format!(
                "no process is running it (last heartbeat {} ago)",
                crate::fmt::fmt_duration(now.duration_since(t).unwrap_or_default())
            ),
            None => "no process is running it".to_string(),
        };
        self.finish(reason, last_beat.unwrap_or(now), out);
    }

    /// With nothing committed, only the passing of time can end a run: a worker process
    /// whose heartbeat stopped.
    fn check_run(&mut self, now: SystemTime, out: &mut Vec<Update>) {
        if !self.finished && self.live_run(now).is_none() {
            self.finish_dead(now, out);
        }
    }

    /// Reads the stored study file again when it changed, so that a budget raised since the
    /// poller opened is the one the UI shows and the one that ends the run (else a watch shows
    /// "38/24 trials", and ends a run whose raised budget is not yet spent).
    fn refresh_settings(&mut self) -> Result<(), StorageError> {
        let stored = self.storage.storage().study_file(&self.study)?;
        if stored.text != self.study_text {
            self.settings = settings_of(&stored);
            self.study_text = stored.text;
        }
        Ok(())
    }

    fn read_changes(&mut self, now: SystemTime, out: &mut Vec<Update>) -> Result<(), StorageError> {
        self.refresh_settings()?;
        let first = self.known.is_empty() && self.last_report == 0;
        let states = self.storage.watch_states(&self.study)?;
        let changed: Vec<i64> = states
            .iter()
            .filter(|(id, _, s)| {
                *s != TrialState::Queued && self.known.get(id).is_none_or(|k| k.1 != *s)
            })
            .map(|(id, _, _)| *id)
            .collect();
        let mut trials = self.storage.watch_trials(&changed)?;
        trials.sort_by_key(|t| (t.status.finished(), t.number));

        let run_before = self.run.clone();
        let run_now = self.live_run(now);
        let new_run = first
            || run_before.as_ref().map(|r| &r.workers) != run_now.as_ref().map(|r| &r.workers);
        if new_run {
            // The study (re)started, or this is the first look: everything finished before the
            // run began is `existing`, the rest are events, so the rate counts only this run.
            let (started_at, slots) = match &run_now {
                Some(r) => (r.started_at, r.slots.clone()),
                None => (
                    self.workers
                        .iter()
                        .filter_map(|w| w.started_at)
                        .max()
                        .unwrap_or(now),
                    self.workers
                        .last()
                        .map(|w| w.devices.clone())
                        .unwrap_or_default(),
                ),
            };
            let mut existing = Vec::new();
            let mut rest = Vec::new();
            for t in trials {
                if t.state().is_finished() && t.status.finished().is_none_or(|f| f < started_at) {
                    existing.push(t);
                } else {
                    rest.push(t);
                }
            }
            self.run = run_now.clone().or(Some(Run {
                workers: Vec::new(),
                started_at,
                slot_base: self
                    .workers
                    .last()
                    .map(|w| HashMap::from([(w.worker_id, 0)]))
                    .unwrap_or_default(),
                slots: slots.clone(),
            }));
            out.push(Update::Event(Event::StudyStarted {
                info: self.info(slots),
                existing: existing.clone(),
                at: started_at,
            }));
            for t in &existing {
                if let Some(f) = t.status.finished() {
                    self.last_finish = Some(self.last_finish.map_or(f, |l| l.max(f)));
                }
                self.known.insert(t.id.0, (t.number, t.state(), None));
            }
            self.emit_trials(&rest, out, now);
            if run_now.is_none() {
                self.run = None;
            }
            self.finished = false;
        } else {
            self.emit_trials(&trials, out, now);
        }

        // Population-based training's children, once each, after their rows exist.
        if self.settings.pruner == "pbt" {
            for l in self.storage.storage().lineage(&self.study)? {
                if self.lineage_sent.insert(l.child) {
                    out.push(Update::Event(Event::Lineage {
                        child: l.child,
                        parent: l.parent,
                    }));
                }
            }
        }
        for r in self
            .storage
            .watch_reports_after(&self.study, self.last_report)?
        {
            self.last_report = self.last_report.max(r.report_id);
            let Some(&(number, _, slot)) = self.known.get(&r.trial_id) else {
                continue;
            };
            out.push(Update::Event(Event::TrialReported {
                number,
                slot: slot.unwrap_or(NO_SLOT),
                report: Report {
                    step: r.step,
                    metrics: r.metrics,
                },
            }));
        }
        let running = states.iter().any(|(_, _, s)| *s == TrialState::Running);
        if !self.finished {
            if run_now.is_none() {
                self.finish_dead(now, out);
            } else if !running && self.budget_spent()? {
                let at = self.last_finish.unwrap_or(now);
                self.finish("the trial budget is spent".into(), at, out);
            }
        }
        Ok(())
    }

    /// Whether the trial budget is spent, counted as the scheduler counts it (storage's
    /// `counted`, in this poll's snapshot): interrupted trials, whose params run again, and
    /// discarded ones leave room in the budget, so they must not end the run in the UI.
    fn budget_spent(&self) -> Result<bool, StorageError> {
        let Some(budget) = self.settings.budget else {
            return Ok(false);
        };
        Ok(self.storage.storage().counted(&self.study)? >= budget)
    }

    fn emit_trials(&mut self, trials: &[Trial], out: &mut Vec<Update>, now: SystemTime) {
        for t in trials {
            let state = t.state();
            if let Some(f) = t.status.finished() {
                self.last_finish = Some(self.last_finish.map_or(f, |l| l.max(f)));
            }
            let slot = self.global_slot(t);
            if state == TrialState::Running {
                // A trial running on a worker the poller does not count as live (its
                // heartbeat is late) is shown in the table, not on a slot.
                out.push(Update::Event(Event::TrialStarted {
                    number: t.number,
                    slot: slot.unwrap_or(NO_SLOT),
                    device: t
                        .status
                        .placement()
                        .and_then(|p| p.device.clone())
                        .unwrap_or_default(),
                    params: t.params.clone(),
                    at: t.status.started().unwrap_or(now),
                }));
            }
            if state.is_finished() {
                out.push(Update::Event(Event::TrialFinished {
                    slot: slot.unwrap_or(NO_SLOT),
                    trial: t.clone(),
                    at: t.status.finished().unwrap_or(now),
                    study_best: None,
                }));
            }
            self.known.insert(t.id.0, (t.number, state, slot));
        }
    }
}

fn settings_of(stored: &StoredStudyFile) -> Settings {
    let unknown = Settings {
        sampler: "?".into(),
        pruner: "?".into(),
        rungs: None,
        exploration: None,
        budget: None,
        timeout: None,
        grace: Duration::from_secs(30),
        space: None,
    };
    let Some(text) = &stored.text else {
        return unknown;
    };
    let file = PathBuf::from(stored.path.as_deref().unwrap_or("study.toml"));
    // The stored text is the study file as it was run; a file that no longer checks (moved
    // paths, say) still has a name, a metric and a direction in the database.
    match spec::parse(&file, text, &Overrides::default()) {
        Ok(s) => Settings {
            sampler: s.sampler.as_str().to_string(),
            pruner: s.pruner.name().to_string(),
            rungs: s.pruner.rung_schedule(),
            // One objective only, as the scheduler says it.
            exploration: s
                .sampler
                .exploration(&s.space, &s.sampler_options)
                .filter(|_| s.others.is_empty()),
            budget: s.trials,
            timeout: s.timeout,
            grace: s.heartbeat_grace.max(s.heartbeat * 3),
            space: Some(s.space),
        },
        Err(_) => unknown,
    }
}

/// Runs the poller on its own thread (SQLite calls block) until the receiver is dropped.
/// A failed poll is reported as a notice and retried; the database going away for good
/// closes the channel, which the UI shows as disconnected.
pub fn spawn_poller(mut poller: Poller) -> UnboundedReceiver<Update> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || poll_loop(&mut poller, &tx));
    rx
}

fn poll_loop(poller: &mut Poller, tx: &UnboundedSender<Update>) {
    let mut failures = 0u32;
    loop {
        match poller.poll(SystemTime::now()) {
            Ok(updates) => {
                failures = 0;
                for u in updates {
                    if tx.send(u).is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                failures += 1;
                if tx
                    .send(Update::Notice(format!("cannot read the database: {e}")))
                    .is_err()
                    || failures >= 30
                {
                    return;
                }
            }
        }
        if tx.is_closed() {
            return;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use crate::storage::SqliteStorage;
    use crate::tui::{Mode, UiState};
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::space::ParamValue;
    use crate::storage::Storage;
    use crate::trial::Direction;
    use crate::trial::{TrialId, TrialStatus, WorkerId};

    use crate::storage::fixtures::{params, space};

    fn report(step: u64, loss: f64) -> Report {
        let mut m = BTreeMap::new();
        m.insert("loss".to_string(), loss);
        m.insert("epoch".to_string(), step as f64);
        m.insert("total_epochs".to_string(), 4.0);
        Report { step, metrics: m }
    }

    struct Writer {
        s: SqliteStorage,
        study: StudyRow,
        worker: WorkerId,
    }

    impl Writer {
        fn new(path: &Path) -> Writer {
            let mut s = SqliteStorage::open(path).expect("opens");
            let study = s
                .create_or_load_study(&crate::storage::NewStudy {
                    others: &[],
                    name: "w",
                    direction: Direction::Minimize,
                    metric: "loss",
                    file: None,
                    source: None,
                })
                .expect("study");
            let worker = s
                .register_worker(&study, &["cpu".into(), "cuda:0".into()])
                .expect("worker");
            Writer { s, study, worker }
        }

        fn start(&mut self, slot: usize, lr: f64) -> TrialId {
            let sp = space();
            let req = crate::storage::ClaimRequest {
                worker: self.worker,
                budget: None,
                slot,
                device: if slot == 0 { "cpu" } else { "cuda:0" },
                space: &sp,
            };
            self.s
                .claim(&self.study, &req, &mut |_, _| params(lr))
                .expect("claims")
                .expect("a trial")
                .id
        }

        fn report(&mut self, id: TrialId, seq: u64, loss: f64) {
            self.s
                .add_report(id, seq, &report(seq, loss), false, "loss")
                .expect("report");
        }

        fn finish(&mut self, id: TrialId, state: TrialState, value: Option<f64>) {
            let status =
                TrialStatus::ended(state, value, "exit status 1", crate::trial::Ran::default());
            self.s
                .finish_trial(id, &status, &[PathBuf::from("/runs/w/stdout.log")])
                .expect("finish");
        }
    }

    fn poll_into(p: &mut Poller, ui: &mut UiState) -> usize {
        let updates = p.poll(SystemTime::now()).expect("polls");
        ui.apply_all(&updates);
        updates.len()
    }

    #[test]
    fn the_poller_turns_a_running_study_into_the_schedulers_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        let mut w = Writer::new(&db);
        let a = w.start(0, 0.01);
        w.report(a, 1, 0.9);
        w.report(a, 2, 0.5);
        w.finish(a, TrialState::Complete, Some(0.5));
        let b = w.start(0, 0.1);
        w.report(b, 1, 0.8);
        let c = w.start(1, 0.2);
        w.finish(c, TrialState::Failed, None);

        let mut p = Poller::open(&StorageUrl::Sqlite(db.clone()), "w").expect("opens read-only");
        let mut ui = UiState::new(Mode::Watch, false, SystemTime::now());
        poll_into(&mut p, &mut ui);
        assert_eq!(
            ui.info.as_ref().map(|i| i.slots.clone()),
            Some(vec!["cpu".into(), "cuda:0".into()])
        );
        assert_eq!(
            (ui.counts.complete, ui.counts.running, ui.counts.failed),
            (1, 1, 1)
        );
        assert_eq!(ui.best, Some(TrialNumber(0)));
        assert_eq!(ui.slots[0].trial, Some(TrialNumber(1)));
        let t0 = ui.trial(TrialNumber(0)).expect("trial 0");
        assert_eq!(t0.curve, vec![(1, 0.9), (2, 0.5)]);
        assert_eq!(t0.params["opt"], ParamValue::Str("adam".into()));
        assert_eq!(t0.params["k"], ParamValue::Int(3));
        assert_eq!(t0.logs, vec!["/runs/w/stdout.log".to_string()]);
        let t2 = ui.trial(TrialNumber(2)).expect("trial 2");
        assert_eq!(t2.error.as_deref(), Some("exit status 1"));
        assert_eq!(
            ui.trial(TrialNumber(1)).and_then(|t| t.progress()),
            Some((1.0, 4.0, "ep"))
        );
        assert!(ui.finished.is_none());

        // Nothing committed: nothing read, nothing sent.
        assert_eq!(poll_into(&mut p, &mut ui), 0);

        // Only what changed comes through.
        w.report(b, 2, 0.3);
        w.finish(b, TrialState::Complete, Some(0.3));
        let d = w.start(1, 0.05);
        let n = poll_into(&mut p, &mut ui);
        assert_eq!(n, 3, "a report, a finish (carrying its logs), a start");
        assert_eq!(
            ui.trial(TrialNumber(1)).map(|t| t.logs.clone()),
            Some(vec!["/runs/w/stdout.log".to_string()])
        );
        assert_eq!(ui.best, Some(TrialNumber(1)));
        assert_eq!(ui.slots[0].trial, None);
        assert_eq!(ui.slots[1].trial, Some(TrialNumber(3)));
        assert_eq!(ui.trial(TrialNumber(1)).map(|t| t.curve.len()), Some(2));
        let _ = d;
    }

    #[test]
    fn workers_on_several_machines_show_each_slot_with_its_host() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        let w = Writer::new(&db);
        // A second worker process of the same study on another machine (a `tune worker`).
        w.s.connection()
            .execute(
                "INSERT INTO tune_workers (study_id, host, pid, started_at, heartbeat, devices_json)
                 VALUES (?1, 'gpu-node-7', 4242, ?2, ?2, '[\"cuda:0\",\"cuda:1\"]')",
                rusqlite::params![w.study.id, crate::storage::now_text()],
            )
            .expect("second worker");
        let mut p = Poller::open(&StorageUrl::Sqlite(db.clone()), "w").expect("opens");
        let mut ui = UiState::new(Mode::Watch, false, SystemTime::now());
        poll_into(&mut p, &mut ui);
        let here = hostname();
        assert_eq!(
            ui.info.as_ref().map(|i| i.slots.clone()),
            Some(vec![
                format!("{here}/cpu"),
                format!("{here}/cuda:0"),
                "gpu-node-7/cuda:0".to_string(),
                "gpu-node-7/cuda:1".to_string(),
            ])
        );
    }

    #[test]
    fn a_worker_whose_heartbeat_stopped_ends_the_run_in_the_ui() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        let mut w = Writer::new(&db);
        let a = w.start(0, 0.01);
        w.finish(a, TrialState::Complete, Some(0.5));
        let mut p = Poller::open(&StorageUrl::Sqlite(db.clone()), "w").expect("opens");
        let mut ui = UiState::new(Mode::Watch, false, SystemTime::now());
        poll_into(&mut p, &mut ui);
        assert!(ui.finished.is_none());
        let later = SystemTime::now() + Duration::from_secs(3600);
        ui.apply_all(&p.poll(later).expect("polls"));
        let f = ui.finished.as_ref().expect("finished");
        assert!(
            f.reason.contains("no process is running it"),
            "{}",
            f.reason
        );
        // Told once.
        assert!(p.poll(later).expect("polls").is_empty());
    }

    #[test]
    fn a_spent_budget_with_nothing_running_ends_the_run_in_the_ui() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        let mut w = Writer::new(&db);
        let mut p = Poller::open(&StorageUrl::Sqlite(db.clone()), "w").expect("opens");
        p.settings.budget = Some(2);
        let mut ui = UiState::new(Mode::Watch, false, SystemTime::now());
        poll_into(&mut p, &mut ui);
        for lr in [0.01, 0.02] {
            let t = w.start(0, lr);
            w.finish(t, TrialState::Complete, Some(lr));
        }
        poll_into(&mut p, &mut ui);
        assert_eq!(
            ui.finished.as_ref().map(|f| f.reason.as_str()),
            Some("the trial budget is spent")
        );
        // The run ended when its last trial did, not when the poller noticed.
        let last = ui.trials.iter().filter_map(|t| t.finished_at).max();
        assert_eq!(ui.finished.as_ref().map(|f| f.at), last);
        assert_eq!(ui.progress().ratio, Some(1.0));
    }

    #[test]
    fn interrupted_and_discarded_trials_leave_the_budget_unspent_in_the_ui() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        let mut w = Writer::new(&db);
        let mut p = Poller::open(&StorageUrl::Sqlite(db.clone()), "w").expect("opens");
        p.settings.budget = Some(2);
        let mut ui = UiState::new(Mode::Watch, false, SystemTime::now());
        poll_into(&mut p, &mut ui);
        let a = w.start(0, 0.01);
        w.finish(a, TrialState::Complete, Some(0.5));
        let b = w.start(0, 0.02);
        w.finish(b, TrialState::Complete, Some(0.1));
        w.s.set_discarded(&w.study, &[1], true).expect("discards");
        let c = w.start(0, 0.03);
        let interrupted = TrialStatus::Failed {
            reason: "its worker went silent".into(),
            log_tail: None,
            interrupted: true,
            ran: crate::trial::Ran::default(),
        };
        w.s.finish_trial(c, &interrupted, &[]).expect("finish");
        poll_into(&mut p, &mut ui);
        // Three trials ended and none runs, yet only one counts: the run goes on.
        assert_eq!(ui.counts.finished(), 3);
        assert_eq!(ui.counts.counted(), 1);
        assert!(ui.finished.is_none(), "{:?}", ui.finished);
        assert_eq!(ui.progress().ratio, Some(0.5));
        // The discarded trial had the best value, and is not the best.
        assert_eq!(ui.best, Some(TrialNumber(0)));
        let d = w.start(0, 0.04);
        w.finish(d, TrialState::Complete, Some(0.7));
        poll_into(&mut p, &mut ui);
        assert_eq!(
            ui.finished.as_ref().map(|f| f.reason.as_str()),
            Some("the trial budget is spent")
        );
    }

    fn study_file(trials: u64) -> String {
        format!(
            "[study]\nname = \"w\"\nmetric = \"loss\"\ntrials = {trials}\n\n[space]\nlr = {{ type = \"float\", low = 1e-4, high = 1.0, log = true }}\n\n[trial]\nkind = \"command\"\ncommand = [\"true\"]\n"
        )
    }

    #[test]
    fn a_budget_raised_while_watching_is_the_one_the_ui_shows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        let file = dir.path().join("w.toml");
        let mut w = Writer::new(&db);
        w.s.set_study_file(&w.study, &file, &study_file(2))
            .expect("stores the file");
        let mut p = Poller::open(&StorageUrl::Sqlite(db.clone()), "w").expect("opens");
        let mut ui = UiState::new(Mode::Watch, false, SystemTime::now());
        poll_into(&mut p, &mut ui);
        for lr in [0.01, 0.02] {
            let t = w.start(0, lr);
            w.finish(t, TrialState::Complete, Some(lr));
        }
        poll_into(&mut p, &mut ui);
        assert_eq!(ui.info.as_ref().and_then(|i| i.budget), Some(2));
        assert!(ui.finished.is_some(), "the first budget is spent");

        // `tune run` with the file's budget raised to 4: it stores the new file and registers
        // its worker process, which starts a trial.
        w.s.set_study_file(&w.study, &file, &study_file(4))
            .expect("stores the new file");
        w.worker =
            w.s.register_worker(&w.study, &["cpu".into()])
                .expect("a new worker");
        let t = w.start(0, 0.03);
        w.finish(t, TrialState::Complete, Some(0.03));
        let _running = w.start(0, 0.04);
        poll_into(&mut p, &mut ui);
        assert_eq!(ui.info.as_ref().and_then(|i| i.budget), Some(4));
        assert!(ui.finished.is_none(), "3 of 4: the run goes on");
        assert_eq!(ui.counts.counted(), 3);
        assert_eq!(ui.progress().ratio, Some(0.75));
    }

    #[test]
    fn watching_never_makes_the_studys_writes_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        let mut w = Writer::new(&db);
        // No busy timeout: any lock held by the watcher would fail a write at once.
        w.s.connection()
            .busy_timeout(Duration::ZERO)
            .expect("timeout");
        let a = w.start(0, 0.01);
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let stop = stop.clone();
            let db = db.clone();
            std::thread::spawn(move || {
                let mut p = Poller::open(&StorageUrl::Sqlite(db.clone()), "w").expect("opens");
                let mut polls = 0;
                while !stop.load(Ordering::Relaxed) {
                    p.poll(SystemTime::now()).expect("polls");
                    polls += 1;
                }
                polls
            })
        };
        for seq in 1..=300 {
            w.s.add_report(a, seq, &report(seq, 1.0 / seq as f64), false, "loss")
                .expect("a write never waits on the watcher");
        }
        w.finish(a, TrialState::Complete, Some(0.01));
        stop.store(true, Ordering::Relaxed);
        let polls = watcher.join().expect("watcher ran");
        assert!(polls > 0);
    }

    #[test]
    fn a_local_worker_whose_process_exited_ends_the_run_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        let _w = Writer::new(&db);
        let mut p = Poller::open(&StorageUrl::Sqlite(db.clone()), "w").expect("opens");
        let mut ui = UiState::new(Mode::Watch, false, SystemTime::now());
        poll_into(&mut p, &mut ui);
        assert!(
            ui.finished.is_none(),
            "this test process is the worker, and alive"
        );
        // The same worker row, as if a process that has exited had written it.
        for w in &mut p.workers {
            w.pid = i64::from(i32::MAX);
        }
        ui.apply_all(&p.poll(SystemTime::now()).expect("polls"));
        assert!(ui.finished.is_some());
    }

    #[test]
    fn a_trial_left_running_by_a_silent_worker_is_listed_and_no_slot_shows_it_busy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("t.db");
        let mut w = Writer::new(&db);
        let a = w.start(1, 0.01);
        w.report(a, 1, 0.9);
        let mut p = Poller::open(&StorageUrl::Sqlite(db.clone()), "w").expect("opens");
        let mut ui = UiState::new(Mode::Watch, false, SystemTime::now());
        // An hour later: the worker's heartbeat is long silent.
        ui.apply_all(
            &p.poll(SystemTime::now() + Duration::from_secs(3600))
                .expect("polls"),
        );
        let t = ui.trial(TrialNumber(0)).expect("listed");
        // Still running as far as the database knows, on the slot it last had.
        assert_eq!((t.state, t.slot), (TrialState::Running, Some(1)));
        assert_eq!(t.curve, vec![(1, 0.9)]);
        assert!(ui.slots.iter().all(|s| s.trial.is_none()));
        assert!(ui.finished.is_some());
    }
}
