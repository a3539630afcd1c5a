//! The line printer: one line per study event on standard output, for pipes, CI and
//! `--no-tui` (`tune run`, `tune watch`).

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::Event;
use crate::fmt::{fmt_params, fmt_value};
use crate::trial::{Direction, TrialState};

/// One line per trial event on standard output (pipes, CI, `--no-tui`).
pub async fn print_lines(
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
