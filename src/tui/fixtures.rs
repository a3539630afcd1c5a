//! Deterministic study states for the UI's snapshot tests and for the render benchmark of
//! `tune-bench`: the same events a real study sends, made up from a fixed formula so every run
//! draws the same screen.
//!
//! Test code only: compiled for this crate's tests and, through the `fixtures` feature, for
//! `tune-bench`; the `tune` binary never carries it. What belongs here is pure data (no clock
//! reads, no timing, no files): the benchmark's timing and its database live in `tune-bench`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::state::{Mode, UiState};
use crate::events::{Event, StudyInfo};
use crate::space::{Param, ParamKind, ParamValue, Params, Space};
use crate::trial::{
    Direction, Placement, Ran, Report, Trial, TrialNumber, TrialState, TrialStatus,
};

/// The fixtures' epoch: a fixed instant, so elapsed times in snapshots never move.
pub fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// A well-mixed pseudo-random number in [0, 1) from a seed (SplitMix64).
fn unit(seed: u64) -> f64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

pub fn info(budget: Option<u64>, slots: usize) -> StudyInfo {
    StudyInfo {
        name: "mnist-mlp".into(),
        metric: "val_loss".into(),
        direction: Direction::Minimize,
        others: Vec::new(),
        sampler: "tpe".into(),
        pruner: "median".into(),
        rungs: None,
        exploration: None,
        budget,
        timeout: None,
        slots: (0..slots)
            .map(|i| {
                if i < 2 {
                    format!("cuda:{i}")
                } else {
                    "cpu".into()
                }
            })
            .collect(),
        storage: "tune.db".into(),
        space: Some(space()),
    }
}

/// The space [`params`] samples from, as a study file would declare it.
pub fn space() -> Space {
    let p = |name: &str, kind| Param {
        name: name.into(),
        kind,
        when: Vec::new(),
    };
    let choices = ["adam", "sgd", "adamw"].map(|c| ParamValue::Str(c.into()));
    Space::new(vec![
        p(
            "lr",
            ParamKind::Float {
                low: 1e-4,
                high: 1e-1,
                log: true,
                step: None,
            },
        ),
        p(
            "batch_size",
            ParamKind::Int {
                low: 32,
                high: 256,
                log: true,
                step: 1,
            },
        ),
        p(
            "optimizer",
            ParamKind::Categorical {
                choices: choices.to_vec(),
            },
        ),
        p(
            "dropout",
            ParamKind::Float {
                low: 0.0,
                high: 0.5,
                log: false,
                step: Some(0.01),
            },
        ),
    ])
    .expect("the fixtures' space is valid")
}

pub fn params(n: u64) -> Params {
    let lr = 10f64.powf(-4.0 + 3.0 * unit(n * 4));
    let bs = [32i64, 64, 128, 256][(unit(n * 4 + 1) * 4.0) as usize % 4];
    let opt = ["adam", "sgd", "adamw"][(unit(n * 4 + 2) * 3.0) as usize % 3];
    let dropout = (unit(n * 4 + 3) * 50.0).round() / 100.0;
    let mut p = Params::new();
    p.insert("lr".into(), ParamValue::Float(lr));
    p.insert("batch_size".into(), ParamValue::Int(bs));
    p.insert("optimizer".into(), ParamValue::Str(opt.into()));
    p.insert("dropout".into(), ParamValue::Float(dropout));
    p
}

/// The objective of trial `n` at `epoch` (of 10): a noisy decaying curve whose floor
/// depends on the params.
pub fn val_loss(n: u64, epoch: u64) -> f64 {
    let lr = params(n)
        .get("lr")
        .and_then(ParamValue::as_f64)
        .unwrap_or(1e-3);
    let floor = 0.08 + 0.25 * (lr.log10() + 2.5).powi(2) / 2.25 + 0.05 * unit(n * 7 + 11);
    floor + 1.6 * (-0.45 * epoch as f64).exp() + 0.01 * unit(n * 131 + epoch)
}

/// The report of trial `n` after `epoch` of 10, with the trainer's usual keys.
pub fn report(n: u64, epoch: u64) -> Report {
    let mut m = BTreeMap::new();
    m.insert("epoch".into(), epoch as f64);
    m.insert("total_epochs".into(), 10.0);
    m.insert("val_loss".into(), val_loss(n, epoch));
    m.insert("train_loss".into(), val_loss(n, epoch) * 0.9);
    m.insert("samples_per_s".into(), 9000.0 + 3000.0 * unit(n + 5));
    m.insert("data_wait".into(), 0.02 + 0.2 * unit(n + 9));
    Report {
        step: epoch,
        metrics: m,
    }
}

/// What finished trial `n` became: every 13th failed, every 5th pruned at epoch 3.
fn outcome(n: u64) -> (TrialState, u64) {
    if n % 13 == 12 {
        (TrialState::Failed, 2)
    } else if n % 5 == 3 {
        (TrialState::Pruned, 3)
    } else {
        (TrialState::Complete, 10)
    }
}

/// The events of a study with `finished` trials done and `running` trials on their slots
/// (`running <= slots`), each running trial `epochs_in` epochs in; trials take 60 s each.
/// Trial `n` finished in `state` (complete or pruned with `value`; failed with an out-of-memory
/// error and the last lines of its standard error).
pub fn finished_trial(n: u64, state: TrialState, value: f64, ran: Ran) -> Trial {
    let status = match state {
        TrialState::Complete => TrialStatus::Complete {
            others: Vec::new(),
            value,
            ran,
        },
        TrialState::Pruned => TrialStatus::Pruned {
            value: Some(value),
            step: Some(3),
            reason: Some(format!(
                "at epoch 3 (rung 1: {} of 4 trials there, below the top 1/3)",
                ["3rd", "4th"][(n % 2) as usize]
            )),
            paused: false,
            ran,
        },
        _ => TrialStatus::Failed {
            reason: "exit status 1: CUDA out of memory".into(),
            log_tail: Some("RuntimeError: tried to allocate 2.00 GiB".into()),
            interrupted: false,
            ran,
        },
    };
    Trial::unstored(TrialNumber(n), params(n), status)
}

pub fn study_events(
    finished: u64,
    running: u64,
    slots: usize,
    budget: Option<u64>,
) -> (Vec<Event>, SystemTime) {
    let mut ev = vec![Event::StudyStarted {
        info: info(budget, slots),
        existing: Vec::new(),
        at: t0(),
    }];
    let per_slot = slots.max(1) as u64;
    let trial_time = Duration::from_secs(60);
    for n in 0..finished {
        let slot = (n % per_slot) as usize;
        let start = t0() + trial_time * (n / per_slot) as u32;
        ev.push(Event::TrialStarted {
            number: TrialNumber(n),
            slot,
            device: info(budget, slots).slots[slot].clone(),
            params: params(n),
            at: start,
        });
        let (state, epochs) = outcome(n);
        for e in 1..=epochs {
            ev.push(Event::TrialReported {
                number: TrialNumber(n),
                slot,
                report: report(n, e),
            });
        }
        let took = trial_time * epochs as u32 / 10;
        ev.push(Event::TrialFinished {
            slot,
            trial: finished_trial(
                n,
                state,
                val_loss(n, epochs),
                Ran::span(Placement::default(), start, took),
            ),
            at: start + took,
            study_best: None,
        });
    }
    let now_base = t0() + trial_time * (finished / per_slot) as u32;
    for k in 0..running {
        let n = finished + k;
        let slot = k as usize;
        ev.push(Event::TrialStarted {
            number: TrialNumber(n),
            slot,
            device: info(budget, slots).slots[slot].clone(),
            params: params(n),
            at: now_base,
        });
        for e in 1..=(2 + 2 * k).min(9) {
            ev.push(Event::TrialReported {
                number: TrialNumber(n),
                slot,
                report: report(n, e),
            });
        }
    }
    (ev, now_base + Duration::from_secs(37))
}

/// A state built from [`study_events`], its clock at the end of them.
pub fn state_with(finished: u64, running: u64, slots: usize, budget: Option<u64>) -> UiState {
    let (events, now) = study_events(finished, running, slots, budget);
    let mut s = UiState::new(Mode::Live, false, now);
    for e in &events {
        s.apply(e);
    }
    s.tick(now);
    s
}

/// Unwraps what ratatui's `TestBackend` cannot fail to do (its error type is `Infallible`).
pub fn infallible<T>(r: Result<T, std::convert::Infallible>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => match e {},
    }
}
