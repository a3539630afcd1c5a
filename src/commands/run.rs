//! `tune run STUDY.toml`: create or resume the study and run it to its budget.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{fmt_params, fmt_value, load_study};
use crate::cli::RunArgs;
use crate::runner::TrialRunner;
use crate::runner::command::CommandRunner;
use crate::runner::worker::WorkerRunner;
use crate::scheduler::{Control, Event, Scheduler};
use crate::study::TrialSpec;
use crate::trial::{Direction, TrialState};

pub fn run(args: &RunArgs, db: Option<&Path>) -> anyhow::Result<ExitCode> {
    let study = load_study(&args.study, db)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let ui = !args.no_tui && crate::tui::stdout_is_terminal();
    rt.block_on(run_async(study, ui))
}

async fn run_async(study: crate::study::Study, ui: bool) -> anyhow::Result<ExitCode> {
    let runner: Arc<dyn TrialRunner> = match &study.trial {
        TrialSpec::Command(c) => Arc::new(CommandRunner::new(c.clone())),
        TrialSpec::Builtin(b) => Arc::new(WorkerRunner::new((**b).clone(), worker_exe()?)),
    };
    let sampler = crate::sampler::build_with(study.sampler, &study.sampler_options);
    let pruner = crate::pruner::build(&study.pruner);
    let (etx, erx) = mpsc::unbounded_channel();
    let (ctx, crx) = mpsc::unbounded_channel();
    let direction = study.direction;
    let metric = study.metric.clone();
    let file = study.file.clone();
    let scheduler = Scheduler::open(study, sampler, pruner, runner, etx)
        .map_err(|e| super::storage_error(&file, e))?;

    // Ctrl-C (or SIGTERM) once: stop asking for trials and let the running ones finish;
    // twice: stop them too. Every state is recorded either way.
    let signals = ctx.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let mut count = 0;
        loop {
            tokio::select! {
                r = tokio::signal::ctrl_c() => { if r.is_err() { return; } }
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
            count += 1;
            let graceful = count == 1;
            if graceful {
                eprintln!(
                    "tune: stopping: no new trials; running ones finish (Ctrl-C again to stop them)"
                );
            } else {
                eprintln!("tune: stopping the running trials");
            }
            if signals.send(Control::Quit { graceful }).is_err() {
                return;
            }
        }
    });

    let summary = if ui {
        // The UI steers through its own sender; it stays open after the study ends, until
        // the user leaves, and restores the terminal on every way out.
        let ui = tokio::spawn(crate::tui::run_live(erx, ctx.clone()));
        drop(ctx);
        let summary = scheduler.run(crx).await;
        match ui.await {
            Ok(Ok(state)) => println!("{}", crate::tui::summary_line(&state)),
            Ok(Err(e)) => eprintln!("tune: the terminal UI failed: {e}"),
            Err(e) => eprintln!("tune: the terminal UI failed: {e}"),
        }
        summary
    } else {
        let printer = tokio::spawn(print_lines(erx, direction, metric));
        let summary = scheduler.run(crx).await;
        drop(ctx);
        let _ = printer.await;
        summary
    };
    let summary = summary?;
    if summary.complete == 0 {
        eprintln!("tune: no trial completed");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per trial event on standard output (pipes, CI, `--no-tui`).
pub(crate) async fn print_lines(
    mut rx: mpsc::UnboundedReceiver<Event>,
    direction: Direction,
    metric: String,
) {
    let t0 = Instant::now();
    let mut best: Option<(u64, f64)> = None;
    let stamp = |t0: Instant| {
        let s = t0.elapsed().as_secs();
        format!("[{:02}:{:02}:{:02}]", s / 3600, (s / 60) % 60, s % 60)
    };
    use std::io::Write;
    let mut out = std::io::stdout();
    while let Some(ev) = rx.recv().await {
        let line = match ev {
            Event::StudyStarted { info, existing, .. } => {
                for t in &existing {
                    if t.state == TrialState::Complete
                        && let Some(v) = t.value
                        && best.is_none_or(|(_, b)| direction.better(v, b))
                    {
                        best = Some((t.number.0, v));
                    }
                }
                format!(
                    "{} study {} ({} {}) in {}: {} trials done, budget {}, {} slot(s) on {}, sampler {}, pruner {}",
                    stamp(t0),
                    info.name,
                    info.direction.as_str(),
                    info.metric,
                    info.storage,
                    existing.len(),
                    info.budget
                        .map(|b| b.to_string())
                        .unwrap_or_else(|| "unlimited".into()),
                    info.slots.len(),
                    info.slots.join(","),
                    info.sampler,
                    info.pruner
                )
            }
            Event::TrialStarted {
                number,
                device,
                params,
                ..
            } => {
                format!(
                    "{} trial {number} started on {device}: {}",
                    stamp(t0),
                    fmt_params(&params)
                )
            }
            Event::TrialReported { .. } => continue,
            Event::TrialFinished { trial, .. } => {
                let dur = trial
                    .duration
                    .map(|d| format!(" in {:.1}s", d.as_secs_f64()))
                    .unwrap_or_default();
                match trial.state {
                    TrialState::Complete => {
                        let v = trial.value.unwrap_or(f64::NAN);
                        if best.is_none_or(|(_, b)| direction.better(v, b)) {
                            best = Some((trial.number.0, v));
                        }
                        let (bn, bv) = best.unwrap_or((trial.number.0, v));
                        format!(
                            "{} trial {} complete{dur}: {metric}={} (best {} at trial {bn})",
                            stamp(t0),
                            trial.number,
                            fmt_value(Some(v)),
                            fmt_value(Some(bv))
                        )
                    }
                    TrialState::Pruned => format!(
                        "{} trial {} pruned{dur}: {metric}={}",
                        stamp(t0),
                        trial.number,
                        fmt_value(trial.value)
                    ),
                    _ => format!(
                        "{} trial {} failed{dur}: {}",
                        stamp(t0),
                        trial.number,
                        trial
                            .error
                            .as_deref()
                            .unwrap_or("unknown")
                            .lines()
                            .next()
                            .unwrap_or("")
                    ),
                }
            }
            Event::Paused(p) => format!(
                "{} scheduling {}",
                stamp(t0),
                if p { "paused" } else { "resumed" }
            ),
            Event::Stopping { graceful } => format!(
                "{} stopping ({})",
                stamp(t0),
                if graceful {
                    "running trials finish"
                } else {
                    "running trials are stopped"
                }
            ),
            Event::StudyFinished { reason, .. } => {
                let b = best
                    .map(|(n, v)| format!("best {metric}={} at trial {n}", fmt_value(Some(v))))
                    .unwrap_or_else(|| "no complete trial".into());
                format!("{} study finished: {reason}; {b}", stamp(t0))
            }
        };
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
    let _ = Duration::ZERO;
}

/// The `tune-worker` binary that hosts libtorch: installed beside `tune`. It is built only with
/// the whole workspace (it links libtorch; `tune` alone does not), so a missing one is a set-up
/// mistake, reported as bad input before any trial starts.
pub fn worker_exe() -> anyhow::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let worker = exe.with_file_name("tune-worker");
    if !worker.is_file() {
        return Err(super::bad(format!(
            "builtin trials need `tune-worker` beside `tune` (it hosts the libtorch trainer), but {} does not exist; build both with `./scripts/setup.sh --libtorch && cargo build --release --workspace` (command trials need neither)",
            worker.display()
        )));
    }
    Ok(worker)
}
