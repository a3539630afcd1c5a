//! Scripted learning curves for the pruner tests: a small stand-in for the scheduler.
//!
//! [`Sim`] stores reports as the scheduler would, asks the pruner after each one, stops a
//! trial the pruner prunes (its later scripted reports are dropped, as a stopped process sends
//! none) and marks a trial complete after its last scripted report. Every decision is also
//! asked of a freshly built pruner over the same context, so every scripted test also pins
//! that a resumed study, which rebuilds its pruner and its contexts from storage, decides
//! exactly as the study that never stopped.

use std::collections::BTreeMap;
use std::ops::Range;

use super::{PruneContext, Pruner, PrunerConfig, TrialCurve, build};
use crate::trial::{Direction, Report, TrialNumber, TrialState};

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
    live: Box<dyn Pruner>,
    pub trials: Vec<TrialCurve>,
    /// (trial, step of the report that pruned it), in decision order.
    pub pruned: Vec<(u64, u64)>,
}

impl Sim {
    pub fn new(config: PrunerConfig, direction: Direction) -> Sim {
        Sim::resume(config, direction, Vec::new())
    }

    /// A study reopened from storage: the trials as stored, a pruner built anew.
    pub fn resume(config: PrunerConfig, direction: Direction, trials: Vec<TrialCurve>) -> Sim {
        assert_eq!(config.check(), Ok(()), "scripted configs are valid");
        let live = build(&config);
        Sim {
            config,
            direction,
            live,
            trials,
            pruned: Vec::new(),
        }
    }

    fn state(&self, n: u64) -> Option<TrialState> {
        self.trials
            .iter()
            .find(|t| t.number == TrialNumber(n))
            .map(|t| t.state)
    }

    /// Stores the report of trial `n` and asks the pruner. `None` when the trial has already
    /// stopped (the report never arrives).
    pub fn send(&mut self, n: u64, r: Report) -> Option<bool> {
        match self.state(n) {
            Some(s) if s.is_finished() => return None,
            Some(_) => {}
            None => self.trials.push(TrialCurve {
                number: TrialNumber(n),
                state: TrialState::Running,
                reports: Vec::new(),
            }),
        }
        let step = r.step;
        let curve = self
            .trials
            .iter_mut()
            .find(|t| t.number == TrialNumber(n))
            .expect("pushed above");
        curve.reports.push(r);
        let ctx = PruneContext {
            direction: self.direction,
            metric: METRIC,
            resource: self.config.resource(),
            trial: TrialNumber(n),
            trials: &self.trials,
        };
        let decision = self.live.should_prune(&ctx);
        let fresh = build(&self.config).should_prune(&ctx);
        assert_eq!(
            decision, fresh,
            "trial {n} at step {step}: a rebuilt pruner disagrees with the live one"
        );
        // Asking twice is harmless: the answer is the same.
        assert_eq!(decision, self.live.should_prune(&ctx));
        if decision {
            self.set_state(n, TrialState::Pruned);
            self.pruned.push((n, step));
        }
        Some(decision)
    }

    pub fn set_state(&mut self, n: u64, state: TrialState) {
        if let Some(t) = self.trials.iter_mut().find(|t| t.number == TrialNumber(n)) {
            t.state = state;
        }
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
                self.set_state(*n, TrialState::Complete);
            }
        }
        self
    }
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
