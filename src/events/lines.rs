//! The line printer: one line per study event on standard output, for pipes, CI and
//! `--no-tui` (`tune run`, `tune watch`). [`Printer`] turns events into lines (pure, tested);
//! [`print_lines`] writes them as they come.
//!
//! One event is exactly one line: text that comes from the user (a study or parameter name, a
//! categorical choice, a failure's reason) has its control characters escaped (`\n`, `\u{1b}`),
//! so a value with a newline can neither split an event nor forge one, and `grep`/`wc -l` on
//! the output count events.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::Event;
use crate::fmt::{fmt_params, fmt_value};
use crate::trial::{Direction, Trial, TrialNumber, TrialState};

/// Turns events into lines, keeping the best value seen for the finishing line.
pub struct Printer {
    direction: Direction,
    metric: String,
    best: Option<(TrialNumber, f64)>,
    /// A multi-objective study's further objectives (from its start), and every complete
    /// trial's losses on all objectives, for the size of the Pareto front.
    others: Vec<crate::trial::Objective>,
    points: Vec<(u64, Vec<f64>)>,
    /// The GPU use of running trials, for their finishing line (where NVML samples them).
    gpu: std::collections::HashMap<u64, crate::telemetry::SlotUsage>,
    /// The sampler's rule for exploring (from the study's start), the trials counted so far
    /// by how they ended, and the next trial number: whether it still explores.
    exploration: Option<super::Exploration>,
    ended: Counted,
    next: u64,
    /// The running trials' curves and the complete ones', for what a pruned trial would have
    /// reached (issue 26).
    predictor: crate::pruner::prediction::Predictor,
}

/// Finished trials that count toward the budget, by state.
#[derive(Debug, Clone, Copy, Default)]
struct Counted {
    complete: usize,
    pruned: usize,
    failed: usize,
}

impl Counted {
    fn add(&mut self, t: &Trial) {
        if t.discarded || t.status.interrupted() {
            return;
        }
        match t.state() {
            TrialState::Complete => self.complete += 1,
            TrialState::Pruned => self.pruned += 1,
            TrialState::Failed => self.failed += 1,
            _ => {}
        }
    }
}

impl Printer {
    pub fn new(direction: Direction, metric: String) -> Printer {
        Printer {
            direction,
            metric: metric.clone(),
            best: None,
            others: Vec::new(),
            points: Vec::new(),
            gpu: std::collections::HashMap::new(),
            exploration: None,
            ended: Counted::default(),
            next: 0,
            predictor: crate::pruner::prediction::Predictor::new(direction, metric),
        }
    }

    /// `; sampler: exploring (Sobol) until 2 trials complete; 0 complete, 5 pruned` while the
    /// sampler's own rule keeps it exploring past its initial design; else nothing.
    fn exploring(&self) -> String {
        let Some(note) = self.exploration.and_then(|r| {
            super::exploring_note(
                &r,
                self.next,
                self.ended.complete,
                self.ended.complete + self.ended.pruned,
            )
        }) else {
            return String::new();
        };
        let c = self.ended;
        let failed = if c.failed > 0 {
            format!(", {} failed", c.failed)
        } else {
            String::new()
        };
        format!(
            "; {note}; {} complete, {} pruned{failed}",
            c.complete, c.pruned
        )
    }

    fn consider(&mut self, t: &Trial) {
        // A discarded trial is never the best (storage's `best` leaves it out too).
        if t.state() == TrialState::Complete
            && !t.discarded
            && let Some(v) = t.value()
            && self.best.is_none_or(|(_, b)| self.direction.better(v, b))
        {
            self.best = Some((t.number, v));
        }
        if !self.others.is_empty()
            && t.state() == TrialState::Complete
            && !t.discarded
            && let Some(v) = t.value()
            && let Some(l) =
                crate::trial::losses(self.direction, &self.others, v, t.status.others())
        {
            self.points.push((t.number.0, l));
        }
    }

    /// The trials on the Pareto front of what this printer saw.
    fn front(&self) -> Vec<u64> {
        let losses: Vec<Vec<f64>> = self.points.iter().map(|p| p.1.clone()).collect();
        crate::sampler::multi::pareto::pareto_front(&losses)
            .into_iter()
            .map(|i| self.points[i].0)
            .collect()
    }

    /// The line for `ev`, `elapsed` after the printer started, with no line break in it;
    /// `None` for events that get no line of their own (reports).
    pub fn line(&mut self, ev: &Event, elapsed: Duration) -> Option<String> {
        self.text(ev, elapsed).map(|l| one_line(&l))
    }

    fn text(&mut self, ev: &Event, elapsed: Duration) -> Option<String> {
        let s = elapsed.as_secs();
        let stamp = format!("[{:02}:{:02}:{:02}]", s / 3600, (s / 60) % 60, s % 60);
        let metric = self.metric.clone();
        Some(match ev {
            Event::StudyStarted { info, existing, .. } => {
                self.others = info.others.clone();
                self.exploration = info.exploration;
                for t in existing {
                    self.consider(t);
                    self.ended.add(t);
                    self.next = self.next.max(t.number.0 + 1);
                }
                // Done as the budget counts it (storage's `counted`): an interrupted trial's
                // params run again as another trial, and a discarded trial leaves its place.
                let interrupted = existing.iter().filter(|t| t.status.interrupted()).count();
                let discarded = existing
                    .iter()
                    .filter(|t| t.discarded && !t.status.interrupted())
                    .count();
                let mut left_out = Vec::new();
                if interrupted > 0 {
                    left_out.push(format!("{interrupted} interrupted, run again"));
                }
                if discarded > 0 {
                    left_out.push(format!("{discarded} discarded"));
                }
                let counted = existing.len() - interrupted - discarded;
                let done = match left_out.is_empty() {
                    true => format!("{counted} trials done"),
                    false => format!("{counted} trials done ({})", left_out.join("; ")),
                };
                format!(
                    "{stamp} study {} ({} {}) in {}: {done}, budget {}, {} slot(s) on {}, sampler {}, pruner {}",
                    info.name,
                    info.direction.as_str(),
                    info.metric,
                    info.storage,
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
                self.next = self.next.max(number.0 + 1);
                format!(
                    "{stamp} trial {number} started on {device}: {}",
                    fmt_params(params)
                )
            }
            Event::TrialReported { number, report, .. } => {
                self.predictor.report(number.0, report);
                return None;
            }
            // The scheduler says so itself when the child starts (with what it copied).
            Event::Lineage { .. } => return None,
            // The live UI shows it; a line a checkpoint would drown the log.
            Event::Checkpointed { .. } => return None,
            Event::GpuSampled { number, usage, .. } => {
                self.gpu.insert(number.0, usage.clone());
                return None;
            }
            Event::TrialFinished {
                trial,
                at,
                study_best,
                ..
            } => {
                // Storage's best of the whole study (other processes' trials too) wins over
                // the best this printer saw, which it includes.
                if study_best.is_some() {
                    self.best = *study_best;
                }
                let gpu = self.gpu.remove(&trial.number.0);
                let dur = trial
                    .duration(*at)
                    .map(|d| format!(" in {:.1}s", d.as_secs_f64()))
                    .unwrap_or_default();
                let dur = match gpu {
                    Some(u) => format!("{dur} ({})", u.summary()),
                    None => dur,
                };
                self.ended.add(trial);
                self.next = self.next.max(trial.number.0 + 1);
                let predicted = self.predictor.finish(
                    trial.number.0,
                    trial.state() == TrialState::Complete && !trial.discarded,
                );
                match trial.state() {
                    TrialState::Complete if !self.others.is_empty() => {
                        self.consider(trial);
                        let values: Vec<String> =
                            std::iter::once(format!("{metric}={}", fmt_value(trial.value())))
                                .chain(
                                    self.others.iter().zip(trial.status.others()).map(|(o, v)| {
                                        format!("{}={}", o.metric, fmt_value(Some(*v)))
                                    }),
                                )
                                .collect();
                        let front = self.front();
                        let on = if front.contains(&trial.number.0) {
                            ", this one on it"
                        } else {
                            ""
                        };
                        format!(
                            "{stamp} trial {} complete{dur}: {} (Pareto front: {} trial(s){on})",
                            trial.number,
                            values.join(" "),
                            front.len()
                        )
                    }
                    TrialState::Complete => {
                        self.consider(trial);
                        let v = trial.value().unwrap_or(f64::NAN);
                        let (bn, bv) = self.best.unwrap_or((trial.number, v));
                        format!(
                            "{stamp} trial {} complete{dur}: {metric}={} (best {} at trial {bn}){}",
                            trial.number,
                            fmt_value(Some(v)),
                            fmt_value(Some(bv)),
                            self.exploring()
                        )
                    }
                    TrialState::Pruned => format!(
                        "{stamp} trial {} {}{}{dur}: {metric}={}{}{}",
                        trial.number,
                        if trial.status.paused() {
                            "paused"
                        } else {
                            "pruned"
                        },
                        trial
                            .status
                            .pruned_reason()
                            .map(|r| format!(" {r}"))
                            .unwrap_or_default(),
                        fmt_value(trial.value()),
                        predicted
                            .map(|p| format!(" (would have reached {})", p.compact()))
                            .unwrap_or_default(),
                        self.exploring()
                    ),
                    _ => format!(
                        "{stamp} trial {} failed{dur}: {}{}{}",
                        trial.number,
                        trial.status.why().unwrap_or_else(|| "unknown".into()),
                        // A reason of several lines (what a trial without a value printed)
                        // shows its first here; the rest is one command away.
                        if trial.status.reason().is_some_and(|r| r.contains('\n')) {
                            format!(" (more: `tune show {}`)", trial.number)
                        } else {
                            String::new()
                        },
                        self.exploring()
                    ),
                }
            }
            Event::Paused(p) => format!(
                "{stamp} scheduling {}",
                if *p { "paused" } else { "resumed" }
            ),
            Event::Stopping { graceful } => format!(
                "{stamp} stopping ({})",
                if *graceful {
                    "running trials finish"
                } else {
                    "running trials are stopped"
                }
            ),
            Event::StudyFinished { reason, .. } if !self.others.is_empty() => {
                let front = self.front();
                format!(
                    "{stamp} study finished: {reason}; the Pareto front has {} trial(s) (`tune best` lists them)",
                    front.len()
                )
            }
            Event::StudyFinished { reason, best, .. } => {
                // The study's best as stored, with the trials of every other process that runs
                // it; this printer saw only this one's.
                let b = best
                    .or(self.best)
                    .map(|(n, v)| {
                        format!(
                            "best of the study {metric}={} at trial {n}",
                            fmt_value(Some(v))
                        )
                    })
                    .unwrap_or_else(|| "no complete trial in the study".into());
                format!("{stamp} study finished: {reason}; {b}")
            }
        })
    }
}

/// `line` with its control characters (and Unicode's line and paragraph separators) escaped
/// as Rust writes them: `\n`, `\r`, `\t`, `\u{1b}`.
fn one_line(line: &str) -> String {
    if !line.chars().any(breaks_a_line) {
        return line.to_string();
    }
    let mut out = String::with_capacity(line.len() + 8);
    for c in line.chars() {
        if breaks_a_line(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn breaks_a_line(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Writes one line per event on standard output until the sender closes.
pub async fn print_lines(
    mut rx: mpsc::UnboundedReceiver<Event>,
    direction: Direction,
    metric: String,
) {
    use std::io::Write;
    let t0 = Instant::now();
    let mut printer = Printer::new(direction, metric);
    let mut out = std::io::stdout();
    while let Some(ev) = rx.recv().await {
        if let Some(line) = printer.line(&ev, t0.elapsed()) {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::space::{ParamValue, Params};
    use crate::trial::{Placement, Ran, TrialNumber, TrialStatus};

    fn finished(n: u64, status: TrialStatus) -> Event {
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(0.01));
        Event::TrialFinished {
            slot: 0,
            trial: Trial::unstored(TrialNumber(n), p, status),
            at: SystemTime::UNIX_EPOCH,
            study_best: None,
        }
    }

    fn ran(secs: u64) -> Ran {
        Ran::span(
            Placement::default(),
            SystemTime::UNIX_EPOCH,
            Duration::from_secs(secs),
        )
    }

    #[test]
    fn a_trials_line_names_the_best_of_the_whole_study_when_storage_says_it() {
        let mut p = Printer::new(Direction::Minimize, "loss".into());
        let mut ev = finished(
            4,
            TrialStatus::Complete {
                others: Vec::new(),
                value: 0.5,
                ran: ran(2),
            },
        );
        // Trial 3, run by another process, is better than anything this one saw.
        if let Event::TrialFinished { study_best, .. } = &mut ev {
            *study_best = Some((TrialNumber(3), 0.25));
        }
        let a = p.line(&ev, Duration::ZERO).expect("a line");
        assert!(a.ends_with("loss=0.5 (best 0.25 at trial 3)"), "{a}");
        // Without storage's word, the printer keeps the study's best it was last told.
        let b = p
            .line(
                &finished(
                    5,
                    TrialStatus::Complete {
                        others: Vec::new(),
                        value: 0.4,
                        ran: ran(1),
                    },
                ),
                Duration::ZERO,
            )
            .expect("a line");
        assert!(b.ends_with("loss=0.4 (best 0.25 at trial 3)"), "{b}");
    }

    #[test]
    fn finished_trials_get_a_line_with_their_value_duration_and_the_best_so_far() {
        let mut p = Printer::new(Direction::Minimize, "loss".into());
        let t = Duration::from_secs(3725);
        let a = p
            .line(
                &finished(
                    0,
                    TrialStatus::Complete {
                        others: Vec::new(),
                        value: 0.5,
                        ran: ran(2),
                    },
                ),
                t,
            )
            .expect("a line");
        assert_eq!(
            a,
            "[01:02:05] trial 0 complete in 2.0s: loss=0.5 (best 0.5 at trial 0)"
        );
        let b = p
            .line(
                &finished(
                    1,
                    TrialStatus::Complete {
                        others: Vec::new(),
                        value: 0.7,
                        ran: ran(1),
                    },
                ),
                t,
            )
            .expect("a line");
        assert!(b.ends_with("loss=0.7 (best 0.5 at trial 0)"), "{b}");
        let f = p
            .line(
                &finished(
                    2,
                    TrialStatus::Failed {
                        reason: "exited with status 1".into(),
                        log_tail: Some("Traceback".into()),
                        interrupted: false,
                        ran: ran(1),
                    },
                ),
                t,
            )
            .expect("a line");
        assert!(
            f.ends_with("trial 2 failed in 1.0s: exited with status 1: Traceback"),
            "{f}"
        );
        let end = p
            .line(
                &Event::StudyFinished {
                    reason: "the trial budget is spent".into(),
                    best: None,
                    at: SystemTime::UNIX_EPOCH,
                },
                t,
            )
            .expect("a line");
        assert!(
            end.ends_with("best of the study loss=0.5 at trial 0"),
            "{end}"
        );
    }

    #[test]
    fn the_finishing_line_names_the_studys_best_over_the_one_this_process_saw() {
        let mut p = Printer::new(Direction::Minimize, "loss".into());
        let done = TrialStatus::Complete {
            others: Vec::new(),
            value: 0.5,
            ran: ran(1),
        };
        p.line(&finished(0, done), Duration::ZERO);
        let end = p
            .line(
                &Event::StudyFinished {
                    reason: "the trial budget is spent".into(),
                    best: Some((TrialNumber(7), 0.25)),
                    at: SystemTime::UNIX_EPOCH,
                },
                Duration::ZERO,
            )
            .expect("a line");
        assert!(
            end.ends_with("; best of the study loss=0.25 at trial 7"),
            "{end}"
        );
    }

    #[test]
    fn the_start_line_does_not_count_interrupted_trials_as_done() {
        let mut p = Printer::new(Direction::Minimize, "loss".into());
        let trial = |n, status| Trial::unstored(TrialNumber(n), Params::new(), status);
        let ev = Event::StudyStarted {
            info: crate::events::StudyInfo {
                others: Vec::new(),
                name: "s".into(),
                metric: "loss".into(),
                direction: Direction::Minimize,
                sampler: "tpe".into(),
                pruner: "none".into(),
                rungs: None,
                exploration: None,
                budget: Some(4),
                timeout: None,
                slots: vec!["cpu".into()],
                storage: "t.db".into(),
                space: None,
            },
            existing: vec![
                trial(
                    0,
                    TrialStatus::Complete {
                        others: Vec::new(),
                        value: 1.0,
                        ran: ran(1),
                    },
                ),
                trial(
                    1,
                    TrialStatus::Failed {
                        reason: "interrupted".into(),
                        log_tail: None,
                        interrupted: true,
                        ran: ran(1),
                    },
                ),
            ],
            at: SystemTime::UNIX_EPOCH,
        };
        let line = p.line(&ev, Duration::ZERO).expect("a line");
        assert!(
            line.contains(": 1 trials done (1 interrupted, run again), budget 4"),
            "{line}"
        );
    }

    #[test]
    fn the_start_line_does_not_count_discarded_trials_as_done_nor_best() {
        let mut p = Printer::new(Direction::Minimize, "loss".into());
        let complete = |n, value| {
            Trial::unstored(
                TrialNumber(n),
                Params::new(),
                TrialStatus::Complete {
                    others: Vec::new(),
                    value,
                    ran: ran(1),
                },
            )
        };
        let mut discarded = complete(1, 0.1);
        discarded.discarded = true;
        let ev = Event::StudyStarted {
            info: crate::events::StudyInfo {
                others: Vec::new(),
                name: "s".into(),
                metric: "loss".into(),
                direction: Direction::Minimize,
                sampler: "tpe".into(),
                pruner: "none".into(),
                rungs: None,
                exploration: None,
                budget: Some(4),
                timeout: None,
                slots: vec!["cpu".into()],
                storage: "t.db".into(),
                space: None,
            },
            existing: vec![complete(0, 1.0), discarded],
            at: SystemTime::UNIX_EPOCH,
        };
        let line = p.line(&ev, Duration::ZERO).expect("a line");
        assert!(
            line.contains(": 1 trials done (1 discarded), budget 4"),
            "{line}"
        );
        assert_eq!(
            p.best,
            Some((TrialNumber(0), 1.0)),
            "the discarded 0.1 is not the best"
        );
    }

    #[test]
    fn user_text_with_line_breaks_stays_on_the_events_one_line() {
        let mut p = Printer::new(Direction::Minimize, "loss".into());
        let mut params = Params::new();
        params.insert(
            "opt\nname".into(),
            ParamValue::Str("a\nb\r\u{1b}[2J\u{2028}c".into()),
        );
        let line = p
            .line(
                &Event::TrialStarted {
                    number: TrialNumber(3),
                    slot: 0,
                    device: "cpu".into(),
                    params,
                    at: SystemTime::UNIX_EPOCH,
                },
                Duration::ZERO,
            )
            .expect("a line");
        assert_eq!(
            line,
            "[00:00:00] trial 3 started on cpu: opt\\nname=a\\nb\\r\\u{1b}[2J\\u{2028}c"
        );
        let failed = p
            .line(
                &finished(
                    3,
                    TrialStatus::Failed {
                        reason: "exited with status 1\nsecond line".into(),
                        log_tail: Some("Traceback\nValueError: bad\n".into()),
                        interrupted: false,
                        ran: ran(1),
                    },
                ),
                Duration::ZERO,
            )
            .expect("a line");
        assert!(!failed.contains('\n'), "{failed}");
    }

    #[test]
    fn a_pruned_trials_line_says_what_it_would_have_reached_once_three_curves_are_complete() {
        let mut p = Printer::new(Direction::Minimize, "loss".into());
        let report = |n: u64, step: u64, v: f64| Event::TrialReported {
            number: TrialNumber(n),
            slot: 0,
            report: crate::trial::Report {
                step,
                metrics: [("loss".to_string(), v)].into(),
            },
        };
        let pruned = |n: u64| {
            finished(
                n,
                TrialStatus::Pruned {
                    value: Some(1.0),
                    step: Some(2),
                    reason: None,
                    paused: false,
                    ran: ran(1),
                },
            )
        };
        // Complete curves 1/step + end over 10 steps.
        for n in 0..3u64 {
            let end = 0.1 + 0.05 * n as f64;
            for s in 1..=10 {
                assert_eq!(
                    p.line(&report(n, s, 1.0 / s as f64 + end), Duration::ZERO),
                    None
                );
            }
            let done = finished(
                n,
                TrialStatus::Complete {
                    others: Vec::new(),
                    value: 0.1 + end,
                    ran: ran(2),
                },
            );
            p.line(&done, Duration::ZERO).expect("a line");
            if n == 1 {
                // Two complete curves: nothing to say yet.
                p.line(&report(8, 1, 1.15), Duration::ZERO);
                p.line(&report(8, 2, 0.65), Duration::ZERO);
                let line = p.line(&pruned(8), Duration::ZERO).expect("a line");
                assert!(!line.contains("would have reached"), "{line}");
            }
        }
        p.line(&report(9, 1, 1.15), Duration::ZERO);
        p.line(&report(9, 2, 0.65), Duration::ZERO);
        let line = p.line(&pruned(9), Duration::ZERO).expect("a line");
        let tail = line
            .split_once("(would have reached → ")
            .unwrap_or_else(|| panic!("{line}"))
            .1;
        let predicted: f64 = tail.split(' ').next().unwrap().parse().unwrap();
        assert!((predicted - 0.25).abs() < 0.05, "{line}");
        assert!(tail.contains(" [") && tail.ends_with("])"), "{line}");
    }

    #[test]
    fn reports_get_no_line() {
        let mut p = Printer::new(Direction::Maximize, "acc".into());
        let ev = Event::TrialReported {
            number: TrialNumber(0),
            slot: 0,
            report: crate::trial::Report {
                step: 1,
                metrics: Default::default(),
            },
        };
        assert_eq!(p.line(&ev, Duration::ZERO), None);
    }

    #[test]
    fn a_finished_trial_whose_gpu_was_sampled_names_its_use() {
        let mut p = Printer::new(Direction::Minimize, "loss".into());
        let mut u = crate::telemetry::SlotUsage::one(
            0,
            crate::telemetry::GpuSample::device(20.0, 0.0, 1000.0),
        );
        u.add([(0, crate::telemetry::GpuSample::device(46.0, 0.0, 2200.0))]);
        let sampled = Event::GpuSampled {
            number: TrialNumber(0),
            slot: 0,
            usage: u,
        };
        assert_eq!(p.line(&sampled, Duration::ZERO), None);
        let line = p
            .line(
                &finished(
                    0,
                    TrialStatus::Complete {
                        others: Vec::new(),
                        value: 0.5,
                        ran: ran(2),
                    },
                ),
                Duration::ZERO,
            )
            .expect("a line");
        assert!(
            line.contains("complete in 2.0s (GPU 33% SM, peak 2.1 GB): loss=0.5"),
            "{line}"
        );
        // Only that trial's: the next one has no GPU note.
        let next = p
            .line(
                &finished(
                    1,
                    TrialStatus::Complete {
                        others: Vec::new(),
                        value: 0.7,
                        ran: ran(2),
                    },
                ),
                Duration::ZERO,
            )
            .expect("a line");
        assert!(!next.contains("GPU"), "{next}");
    }
}
