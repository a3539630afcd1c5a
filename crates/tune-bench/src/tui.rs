//! `tune-bench tui`: the live UI's cost with a big study (issue 6; goal: under 5 ms a frame).
//!
//! 1. Render: the whole `Terminal::draw` on ratatui's `TestBackend` (layout, widgets, the
//!    buffer diff) of a state of N finished trials and 8 running, at three terminal sizes,
//!    sorted by number and by value; and the cost of folding one trial's events into it.
//! 2. Watch: `tune watch`'s poller on a SQLite database of N finished trials, which this
//!    module writes into a temp dir (the UI itself never writes a database).
//!
//! The states come from `tune::tui::fixtures`, the same deterministic ones the snapshot tests
//! draw.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tune::events::Event;
use tune::events::replay::Poller;
use tune::space::Space;
use tune::storage::{ClaimRequest, NewStudy, SqliteStorage, Storage};
use tune::trial::{Direction, Placement, Ran, TrialNumber, TrialState, TrialStatus};
use tune::tui::UiState;
use tune::tui::fixtures::{finished_trial, infallible, params, report, state_with, val_loss};
use tune::tui::view;

use crate::cli::TuiArgs;

/// The goal of issue 6, in ms per frame.
pub const GOAL_MS: f64 = 5.0;

/// Running trials (and slots) in the drawn state: every slot row and its sparkline is drawn.
const RUNNING: u64 = 8;

pub fn run(a: &TuiArgs) -> anyhow::Result<ExitCode> {
    let results = run_render_bench(a.trials, a.frames);
    let worst = results
        .iter()
        .filter(|(what, _)| what.starts_with("render"))
        .map(|(_, ms)| *ms)
        .fold(0.0_f64, f64::max);
    println!("tui render: worst {worst:.3} ms/frame (goal < {GOAL_MS} ms)");
    let [first, idle, one] = watch_poll_ms(a.trials)?;
    println!(
        "tui watch: {n} trials, {r} reports: first poll {first:.1} ms, \
         a poll with nothing committed {idle:.3} ms, a poll after one report {one:.1} ms",
        n = a.trials,
        r = a.trials * 3
    );
    Ok(ExitCode::SUCCESS)
}

/// Renders `state` into a `width`×`height` test terminal `frames` times and returns the
/// mean milliseconds per frame (the whole draw: layout, widgets, buffer diff).
pub fn render_ms(state: &UiState, width: u16, height: u16, frames: u32) -> f64 {
    let mut term = infallible(Terminal::new(TestBackend::new(width, height)));
    infallible(term.draw(|f| view::render(f, state)));
    let start = Instant::now();
    for _ in 0..frames {
        infallible(term.draw(|f| view::render(f, state)));
    }
    start.elapsed().as_secs_f64() * 1000.0 / frames.max(1) as f64
}

/// Mean milliseconds to fold one trial's start, report and finish into `state` (the table
/// sorts again on the finish): the per-event cost the UI pays while a big study runs.
pub fn apply_ms(state: &UiState, reps: u32) -> f64 {
    let mut s = state.clone();
    let first = s.trials.len() as u64;
    let start = Instant::now();
    for k in 0..u64::from(reps) {
        let n = first + k;
        let events = [
            Event::TrialStarted {
                number: TrialNumber(n),
                slot: 0,
                device: "cpu".into(),
                params: params(n),
                at: s.now,
            },
            Event::TrialReported {
                number: TrialNumber(n),
                slot: 0,
                report: report(n, 1),
            },
            Event::TrialFinished {
                slot: 0,
                trial: finished_trial(
                    n,
                    TrialState::Complete,
                    val_loss(n, 10),
                    Ran::span(
                        Placement::default(),
                        s.now - Duration::from_secs(60),
                        Duration::from_secs(60),
                    ),
                ),
                at: s.now,
                study_best: None,
            },
        ];
        for e in &events {
            s.apply(e);
        }
    }
    start.elapsed().as_secs_f64() * 1000.0 / f64::from(reps.max(1))
}

/// Times `tune watch`'s poller on a database of `n` finished trials with 3 reports each:
/// the first poll (the whole study), a poll when nothing was committed, and a poll after one
/// new report. Returns milliseconds for each, in that order.
pub fn watch_poll_ms(n: u64) -> anyhow::Result<[f64; 3]> {
    let dir = tempfile::Builder::new()
        .prefix("tune-bench-watch-")
        .tempdir()?;
    let db = dir.path().join("bench.db");
    // The fixtures' params, as a study file would declare them.
    let space = Space::from_toml(&toml::from_str(
        r#"lr = { type = "float", low = 1e-4, high = 1.0, log = true }
           batch_size = { type = "categorical", choices = [32, 64, 128, 256] }
           optimizer = { type = "categorical", choices = ["adam", "sgd", "adamw"] }
           dropout = { type = "float", low = 0.0, high = 0.5 }"#,
    )?)?;
    let mut w = SqliteStorage::open(&db)?;
    let study = w.create_or_load_study(&NewStudy {
        others: &[],
        name: "bench",
        direction: Direction::Minimize,
        metric: "val_loss",
        file: None,
        source: None,
    })?;
    let worker = w.register_worker(&study, &["cpu".into()])?;
    let mut last = None;
    for k in 0..n {
        // Queued with its params, then claimed: a claim of a queued trial proposes nothing, so
        // filling the study stays linear in its size.
        w.enqueue(&study, &space, &params(k))?;
        let req = ClaimRequest {
            worker,
            budget: None,
            slot: 0,
            device: "cpu",
            space: &space,
        };
        let trial = w
            .claim(&study, &req, &mut |_, _| params(k))?
            .ok_or_else(|| anyhow::anyhow!("no trial to claim"))?;
        for e in 1..=3 {
            w.add_report(trial.id, e, &report(k, e), false, "val_loss")?;
        }
        last = Some(trial.id);
        // The last trial stays running: the report the third poll must see goes to it, as
        // reports only ever come from running trials (a finished one's are fenced off).
        if k + 1 == n {
            break;
        }
        w.finish_trial(
            trial.id,
            &TrialStatus::Complete {
                others: Vec::new(),
                value: val_loss(k, 3),
                ran: Ran::default(),
            },
            &[],
        )?;
    }
    let last = last.ok_or_else(|| anyhow::anyhow!("no trial written"))?;
    let mut p = Poller::open(&tune::storage::StorageUrl::Sqlite(db.clone()), "bench")?;
    let now = SystemTime::now();
    let t = Instant::now();
    let first = p.poll(now)?;
    let first_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let idle = p.poll(now)?;
    let idle_ms = t.elapsed().as_secs_f64() * 1000.0;
    w.add_report(last, 4, &report(n, 4), false, "val_loss")?;
    let t = Instant::now();
    let one = p.poll(now)?;
    let one_ms = t.elapsed().as_secs_f64() * 1000.0;
    // A poller that saw too little would time less work than the UI does: not a figure.
    anyhow::ensure!(
        first.len() as u64 >= n && idle.is_empty() && one.len() == 1,
        "the poller saw {} updates first (expected at least {n}), then {} (expected none), \
         then {} (expected one)",
        first.len(),
        idle.len(),
        one.len()
    );
    Ok([first_ms, idle_ms, one_ms])
}

/// The render benchmark: `trials` finished trials, 8 running, at 80×24, 160×48 and 250×70,
/// sorted by number and by value. Prints ms/frame, and the cost of one trial's events.
pub fn run_render_bench(trials: u64, frames: u32) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut state = state_with(trials, RUNNING, RUNNING as usize, Some(trials * 2));
    for sort in ["number", "value"] {
        if sort == "value" {
            state.sort_by(2);
        }
        for (w, h) in [(80u16, 24u16), (160, 48), (250, 70)] {
            let ms = render_ms(&state, w, h, frames);
            println!(
                "tui render: {trials} trials, {w}x{h}, sorted by {sort}: {ms:.3} ms/frame ({frames} frames)"
            );
            out.push((format!("render {w}x{h} by {sort}"), ms));
        }
        let ms = apply_ms(&state, 200);
        println!(
            "tui events: one trial (start, report, finish) into {trials}, sorted by {sort}: {ms:.3} ms"
        );
        out.push((format!("events by {sort}"), ms));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_render_bench_times_every_size_and_sort_order() {
        let results = run_render_bench(50, 2);
        assert_eq!(results.len(), 8, "{results:?}");
        assert!(
            results.iter().all(|(_, ms)| ms.is_finite() && *ms >= 0.0),
            "{results:?}"
        );
    }

    #[test]
    fn the_watch_bench_polls_the_whole_study_then_nothing_then_one_report() {
        let ms = watch_poll_ms(20).expect("the watch bench runs");
        assert!(ms.iter().all(|m| m.is_finite() && *m >= 0.0), "{ms:?}");
    }
}
