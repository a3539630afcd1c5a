//! Scripted learning curves for the pruner tests, played through the one ask/tell engine.
//!
//! [`Sim`] drives an [`Engine`] over in-memory storage as the scheduler would: it asks a trial
//! for each scripted trial number, reports each scripted report, stops a trial the engine says
//! to prune (its later scripted reports are dropped, as a stopped process sends none) and ends
//! a trial after its last scripted report. Every decision is also asked of a second engine
//! opened afresh on the same storage (a new pruner, its view read back from storage), so every
//! scripted test also pins that a resumed study decides exactly as the study that never
//! stopped.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use super::{PrunerConfig, TrialCurve, build};
use crate::engine::{Decision, Engine, EngineSpec, Finish};
use crate::sampler::{SamplerKind, build as build_sampler};
use crate::space::Space;
use crate::storage::{MemoryStorage, Storage};
use crate::trial::{Direction, Report, TrialId, TrialNumber, TrialState};

/// The objective's key in scripted reports.
pub const METRIC: &str = "loss";

/// A report at `step` whose objective is `value` (the resource is the step).
pub fn report(step: u64, value: f64) -> Report {
    Report {
        step,
        metrics: BTreeMap::from([(METRIC.to_string(), value)]),
    }
}

/// A report at `step` that also carries the resource `key = at`.
pub fn report_at(step: u64, key: &str, at: f64, value: f64) -> Report {
    let mut r = report(step, value);
    r.metrics.insert(key.to_string(), at);
    r
}

/// Trials one after another, as one worker runs them: trial `n` reports `values[i]` at step
/// `i + 1`.
pub fn sequential(curves: &[(u64, &[f64])]) -> Vec<(u64, Report)> {
    curves
        .iter()
        .flat_map(|&(n, values)| {
            values
                .iter()
                .enumerate()
                .map(move |(i, &v)| (n, report(i as u64 + 1, v)))
        })
        .collect()
}

/// Trials side by side, as parallel workers run them in lockstep: every trial reports step 1
/// (in the order given), then every trial reports step 2, and so on.
pub fn lockstep(curves: &[(u64, &[f64])]) -> Vec<(u64, Report)> {
    let longest = curves.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| {
            curves
                .iter()
                .filter(move |(_, v)| i < v.len())
                .map(move |&(n, v)| (n, report(i as u64 + 1, v[i])))
        })
        .collect()
}

pub struct Sim {
    config: PrunerConfig,
    direction: Direction,
    storage: MemoryStorage,
    engine: Engine,
    /// The engine's trial id of each scripted trial number.
    ids: BTreeMap<u64, TrialId>,
    /// The trials as the engine stored them (what a resumed study reads back).
    pub trials: Vec<TrialCurve>,
    /// (trial, step of the report that pruned it), in decision order.
    pub pruned: Vec<(u64, u64)>,
}

/// The scripted studies' space: the pruner never looks at params.
fn space() -> Space {
    let t: toml::Table = toml::from_str(r#"x = { type = "float", low = 0.0, high = 1.0 }"#)
        .expect("a fixed, valid space");
    Space::from_toml(&t).expect("a fixed, valid space")
}

fn open(storage: &MemoryStorage, config: &PrunerConfig, direction: Direction) -> Engine {
    let space = space();
    let spec = EngineSpec {
        others: &[],
        name: "scripted",
        metric: METRIC,
        direction,
        space: &space,
        seed: 0,
        budget: None,
        heartbeat_grace: Duration::from_secs(3600),
        pruner: config,
        file: None,
        source: None,
        slots: &["cpu".to_string()],
        enqueue: &[],
    };
    Engine::open(
        Box::new(storage.clone()),
        &spec,
        build_sampler(SamplerKind::Random),
        build(config),
    )
    .expect("memory storage opens")
}

impl Sim {
    pub fn new(config: PrunerConfig, direction: Direction) -> Sim {
        Sim::resume(config, direction, Vec::new())
    }

    /// A study reopened from storage: `trials` stored as they are (finished ones with their
    /// state, running ones still running), and an engine opened anew on it that takes over the
    /// running ones.
    pub fn resume(config: PrunerConfig, direction: Direction, trials: Vec<TrialCurve>) -> Sim {
        assert_eq!(config.check(), Ok(()), "scripted configs are valid");
        let storage = MemoryStorage::new();
        let mut sim = Sim {
            engine: open(&storage, &config, direction),
            config,
            direction,
            storage,
            ids: BTreeMap::new(),
            trials: Vec::new(),
            pruned: Vec::new(),
        };
        // The stored study, written by an engine that then goes away.
        let mut seed = sim.reopen();
        let mut seeded = BTreeMap::new();
        for t in &trials {
            while sim.next_number(&seeded) <= t.number.0 {
                let trial = seed.ask(0, "cpu").expect("ask").expect("no budget");
                seeded.insert(trial.number.0, trial.id);
            }
            let id = seeded[&t.number.0];
            for r in &t.reports {
                seed.report(id, r.clone()).expect("report");
            }
            let finish = match t.state {
                TrialState::Pruned => Some(Finish::Pruned {
                    value: None,
                    reason: None,
                }),
                TrialState::Complete => Some(Finish::Value(last_value(&t.reports))),
                TrialState::Failed => Some(Finish::Failed {
                    reason: "scripted".into(),
                    log_tail: None,
                }),
                TrialState::Running | TrialState::Queued => None,
            };
            if let Some(f) = finish {
                seed.finish(id, f, &[]).expect("finish");
            }
        }
        drop(seed);
        sim.engine = sim.reopen();
        for t in &trials {
            if t.state == TrialState::Running {
                let trial = sim.engine.adopt(t.number).expect("adopt");
                sim.ids.insert(t.number.0, trial.id);
            } else {
                sim.ids.insert(t.number.0, seeded[&t.number.0]);
            }
        }
        sim.refresh();
        sim
    }

    /// Another engine on the same stored study.
    fn reopen(&self) -> Engine {
        open(&self.storage, &self.config, self.direction)
    }

    fn next_number(&self, asked: &BTreeMap<u64, TrialId>) -> u64 {
        asked.keys().next_back().map_or(0, |n| n + 1)
    }

    /// The trials as stored: what [`Sim::resume`] takes.
    fn refresh(&mut self) {
        let study = self.engine.study().clone();
        let reports = self.storage.reports(&study).expect("reports");
        self.trials = self
            .storage
            .trials(&study, None)
            .expect("trials")
            .into_iter()
            .filter(|t| self.ids.contains_key(&t.number.0))
            .map(|t| TrialCurve {
                place: Default::default(),
                number: t.number,
                state: t.state(),
                reports: reports.get(&t.number).cloned().unwrap_or_default(),
            })
            .collect();
    }

    fn state(&self, n: u64) -> Option<TrialState> {
        let id = self.ids.get(&n)?;
        let study = self.engine.study();
        self.storage
            .trials(study, None)
            .expect("trials")
            .into_iter()
            .find(|t| t.id == *id)
            .map(|t| t.state())
    }

    /// Reports trial `n`'s report and returns the engine's decision. `None` when the trial
    /// has already stopped (the report never arrives).
    pub fn send(&mut self, n: u64, r: Report) -> Option<bool> {
        if self.state(n).is_some_and(TrialState::is_finished) {
            return None;
        }
        while !self.ids.contains_key(&n) {
            let trial = self.engine.ask(0, "cpu").expect("ask").expect("no budget");
            self.ids.insert(trial.number.0, trial.id);
        }
        let id = self.ids[&n];
        let step = r.step;
        let decision = self.engine.report(id, r).expect("report") == Decision::Prune;
        let fresh = self.reopen().judge(TrialNumber(n)) == Decision::Prune;
        assert_eq!(
            decision, fresh,
            "trial {n} at step {step}: a resumed engine disagrees with the live one"
        );
        // Asking twice is harmless: the answer is the same.
        assert_eq!(
            decision,
            self.engine.judge(TrialNumber(n)) == Decision::Prune
        );
        if decision {
            self.engine
                .finish(
                    id,
                    Finish::Pruned {
                        value: None,
                        reason: None,
                    },
                    &[],
                )
                .expect("finish");
            self.pruned.push((n, step));
        }
        self.refresh();
        Some(decision)
    }

    /// Ends trial `n` as complete with its last reported objective.
    fn complete(&mut self, n: u64) {
        let id = self.ids[&n];
        let study = self.engine.study().clone();
        let reports = self.storage.reports(&study).expect("reports");
        let v = last_value(
            reports
                .get(&TrialNumber(n))
                .map(Vec::as_slice)
                .unwrap_or(&[]),
        );
        self.engine
            .finish(id, Finish::Value(v), &[])
            .expect("finish");
        self.refresh();
    }

    /// Sends every event in order; a trial that was not pruned completes after its last one.
    pub fn play(&mut self, events: &[(u64, Report)]) -> &mut Sim {
        self.play_part(events, 0..events.len())
    }

    /// Sends `events[part]` in order; a trial that was not pruned completes after its last
    /// event in the whole script (so a study cut in two leaves it running in the first part).
    pub fn play_part(&mut self, events: &[(u64, Report)], part: Range<usize>) -> &mut Sim {
        for i in part {
            let (n, r) = &events[i];
            let last_of_trial = !events[i + 1..].iter().any(|(m, _)| m == n);
            if self.send(*n, r.clone()).is_some()
                && last_of_trial
                && self.state(*n) == Some(TrialState::Running)
            {
                self.complete(*n);
            }
        }
        self
    }
}

/// The value a scripted trial completes with: its last finite objective. A script's trial
/// that "completes" after NaN reports did so with a finite final report in real life (a NaN
/// value would fail it); pruners judge the reports, never this value, so any finite number
/// does.
fn last_value(reports: &[Report]) -> f64 {
    reports
        .iter()
        .rev()
        .filter_map(|r| r.metrics.get(METRIC).copied())
        .find(|v| v.is_finite())
        .unwrap_or(0.0)
}

/// Plays `events` and returns (trial, step) of every pruning, in order.
pub fn prunings(
    config: PrunerConfig,
    direction: Direction,
    events: &[(u64, Report)],
) -> Vec<(u64, u64)> {
    Sim::new(config, direction).play(events).pruned.clone()
}

/// The same events with every objective negated (for the maximising twin of a script).
pub fn negated(events: &[(u64, Report)]) -> Vec<(u64, Report)> {
    events
        .iter()
        .map(|(n, r)| {
            let mut r = r.clone();
            if let Some(v) = r.metrics.get_mut(METRIC) {
                *v = -*v;
            }
            (*n, r)
        })
        .collect()
}
