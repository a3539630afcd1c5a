//! The builtin trainer's runner: one long-lived worker process per slot (`tune-worker worker
//! --device D`), spawned on the slot's first trial, reused from trial to trial so libtorch
//! starts once, and replaced when it dies. libtorch lives only in the worker: a crash there
//! (a signal, an abort in C++) fails that trial and never the orchestrator.
//!
//! The messages both ends exchange are in [`super::protocol`].

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use super::protocol::{EndStatus, FromWorker, ToWorker};
use super::{ReportSender, RunEnd, RunFuture, RunResult, StopRequest, TrialJob, TrialRunner};
use crate::builtin::BuiltinTrial;
use crate::train::data::DataCache;
use crate::train::{TrainError, TrainEvent};
use crate::trial::Report;

/// How long a worker may take to stop a trial once asked, before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(20);
/// Lines of the log kept as a failed trial's tail.
const TAIL_LINES: usize = 20;

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    device: String,
}

type Slot = Arc<tokio::sync::Mutex<Option<Worker>>>;

/// Runs builtin trials in worker processes, one per slot.
pub struct WorkerRunner {
    trial: Arc<BuiltinTrial>,
    exe: PathBuf,
    slots: Mutex<HashMap<usize, Slot>>,
}

impl WorkerRunner {
    /// `exe` is the `tune-worker` binary (`tune-worker worker --device D` hosts libtorch).
    pub fn new(trial: BuiltinTrial, exe: PathBuf) -> WorkerRunner {
        WorkerRunner {
            trial: Arc::new(trial),
            exe,
            slots: Mutex::new(HashMap::new()),
        }
    }

    fn slot(&self, slot: usize) -> Slot {
        // A poisoned lock only means another thread panicked while inserting; the map is
        // still usable.
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(slot).or_default().clone()
    }
}

fn spawn(exe: &Path, device: &str, log: &Path) -> Result<Worker, String> {
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("cannot open the log {}: {e}", log.display()))?;
    let mut child = Command::new(exe)
        .args(["worker", "--device", device])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        // One intra-op thread per trial (shared/notes/platform.md): OpenMP threads spin under
        // load and make every trial slower. The worker also calls set_num_threads(1).
        .env("OMP_NUM_THREADS", "1")
        .env("MKL_NUM_THREADS", "1")
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the worker {}: {e}", exe.display()))?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| "the worker has no stdin".to_string())?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| "the worker has no stdout".to_string())?;
    Ok(Worker {
        child,
        stdin,
        stdout: BufReader::new(stdout).lines(),
        device: device.to_string(),
    })
}

/// The last lines of a log file.
fn tail(path: &Path) -> Option<String> {
    let text = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(TAIL_LINES);
    let t = lines[start..].join("\n");
    (!t.trim().is_empty()).then_some(t)
}

fn describe_exit(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("worker exited with status {c}"),
            (None, Some(sig)) => {
                let name = nix::sys::signal::Signal::try_from(sig)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {sig}"));
                format!("worker killed by signal {sig} ({name})")
            }
            _ => "worker ended".into(),
        },
        None => "worker ended (status unknown)".into(),
    }
}

async fn send(w: &mut Worker, msg: &ToWorker) -> std::io::Result<()> {
    let mut line = serde_json::to_string(msg).map_err(std::io::Error::other)?;
    line.push('\n');
    w.stdin.write_all(line.as_bytes()).await?;
    w.stdin.flush().await
}

impl TrialRunner for WorkerRunner {
    fn run(
        &self,
        job: TrialJob,
        reports: ReportSender,
        stop: watch::Receiver<StopRequest>,
    ) -> RunFuture {
        let slot = self.slot(job.slot);
        let trial = (*self.trial).clone();
        let exe = self.exe.clone();
        Box::pin(async move {
            let mut guard = slot.lock().await;
            run_on(&mut guard, &exe, trial, job, reports, stop).await
        })
    }
}

/// Why the orchestrator ended a run itself.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Asked {
    Nothing,
    Stop,
    Timeout,
}

async fn run_on(
    slot: &mut Option<Worker>,
    exe: &Path,
    trial: BuiltinTrial,
    job: TrialJob,
    reports: ReportSender,
    mut stop: watch::Receiver<StopRequest>,
) -> RunResult {
    let log = job.trial_dir.join("worker.log");
    let logs = vec![log.clone()];
    let failed = |reason: String, log_tail: Option<String>| RunResult {
        end: RunEnd::Failed { reason, log_tail },
        logs: logs.clone(),
    };
    if let Err(e) = std::fs::create_dir_all(&job.trial_dir) {
        return failed(
            format!("cannot create {}: {e}", job.trial_dir.display()),
            None,
        );
    }
    if *stop.borrow() != StopRequest::None {
        return RunResult {
            end: RunEnd::Stopped,
            logs,
        };
    }
    let msg = ToWorker::Job {
        number: job.number.0,
        seed: job.seed,
        params: job.params.clone(),
        trial: Box::new(trial),
        log: log.clone(),
    };
    // Reuse the slot's worker unless it died while idle or serves another device; a write
    // that fails means it died just now: one fresh worker gets the job.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let alive = match slot.as_mut() {
            Some(w) => w.device == job.device && matches!(w.child.try_wait(), Ok(None)),
            None => false,
        };
        if !alive {
            *slot = None;
            match spawn(exe, &job.device, &log) {
                Ok(w) => *slot = Some(w),
                Err(e) => return failed(e, None),
            }
        }
        let Some(w) = slot.as_mut() else {
            return failed("no worker".into(), None);
        };
        match send(w, &msg).await {
            Ok(()) => break,
            Err(e) if attempts >= 2 => {
                *slot = None;
                return failed(
                    format!("cannot send the job to the worker: {e}"),
                    tail(&log),
                );
            }
            Err(_) => *slot = None,
        }
    }
    let Some(w) = slot.as_mut() else {
        return failed("no worker".into(), None);
    };

    let timeout = job.timeout;
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut asked = Asked::Nothing;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let far = || tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    loop {
        tokio::select! {
            line = w.stdout.next_line() => {
                match line {
                    Ok(Some(line)) => match serde_json::from_str::<FromWorker>(&line) {
                        Ok(FromWorker::Report { step, metrics }) => {
                            let metrics = metrics
                                .into_iter()
                                .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
                                .collect();
                            // The receiver may be gone when the study is shutting down.
                            let _ = reports.send(Report { step, metrics });
                        }
                        Ok(FromWorker::End { status, reason }) => {
                            let end = match (asked, status) {
                                (Asked::Timeout, EndStatus::Stopped) => RunEnd::Failed {
                                    reason: timed_out(timeout),
                                    log_tail: None,
                                },
                                (_, EndStatus::Finished) => RunEnd::Finished,
                                (_, EndStatus::Stopped) => RunEnd::Stopped,
                                (_, EndStatus::Failed) => RunEnd::Failed {
                                    reason: reason.unwrap_or_else(|| "failed".into()),
                                    log_tail: tail(&log),
                                },
                            };
                            return RunResult { end, logs };
                        }
                        // Not ours: a stray line cannot come from the protocol writer, but
                        // keep it rather than lose it.
                        Err(_) => append_log(&log, &line),
                    },
                    Ok(None) | Err(_) => {
                        // The worker died: reap it and say how.
                        let status = tokio::time::timeout(Duration::from_secs(5), w.child.wait())
                            .await
                            .ok()
                            .and_then(Result::ok);
                        *slot = None;
                        let reason = match asked {
                            Asked::Timeout => timed_out(timeout),
                            _ => describe_exit(status),
                        };
                        return failed(reason, tail(&log));
                    }
                }
            }
            changed = stop.changed(), if asked == Asked::Nothing => {
                let request = match changed {
                    Ok(()) => *stop.borrow(),
                    // The scheduler dropped its side: treat as a cancel.
                    Err(_) => StopRequest::Cancel,
                };
                if request != StopRequest::None {
                    asked = Asked::Stop;
                    kill_at = Some(tokio::time::Instant::now() + STOP_GRACE);
                    if send(w, &ToWorker::Stop).await.is_err() {
                        kill_at = Some(tokio::time::Instant::now());
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(far)), if deadline.is_some() && asked == Asked::Nothing => {
                asked = Asked::Timeout;
                kill_at = Some(tokio::time::Instant::now() + STOP_GRACE);
                if send(w, &ToWorker::Stop).await.is_err() {
                    kill_at = Some(tokio::time::Instant::now());
                }
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(far)), if kill_at.is_some() => {
                // It did not stop at a step boundary in time (a step stuck in libtorch):
                // kill it; the slot gets a fresh worker next time.
                let _ = w.child.kill().await;
                *slot = None;
                let end = match asked {
                    Asked::Timeout => RunEnd::Failed {
                        reason: timed_out(timeout),
                        log_tail: tail(&log),
                    },
                    _ => RunEnd::Stopped,
                };
                return RunResult { end, logs };
            }
        }
    }
}

fn timed_out(t: Option<Duration>) -> String {
    match t {
        Some(t) => format!("timed out after {}", humantime::format_duration(t)),
        None => "timed out".into(),
    }
}

fn append_log(path: &Path, line: &str) {
    if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

/// Parses `cpu`, `cuda` or `cuda:N`.
fn parse_device(s: &str) -> Option<tch::Device> {
    match s {
        "cpu" => Some(tch::Device::Cpu),
        "cuda" => Some(tch::Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(tch::Device::Cuda),
    }
}

/// Points stderr (and the stdout that libtorch may print on) at `path`.
fn redirect_output(path: &Path) -> std::io::Result<()> {
    let f = OpenOptions::new().create(true).append(true).open(path)?;
    // SAFETY: dup2 on descriptors we own; 1 and 2 stay open throughout.
    unsafe {
        if libc::dup2(f.as_raw_fd(), 2) < 0 || libc::dup2(f.as_raw_fd(), 1) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The body of the hidden `tune worker --device D` subcommand: reads jobs on stdin, trains,
/// writes reports and ends on the protocol channel. Exits 0 when stdin closes.
pub fn worker_main(device: &str) -> ExitCode {
    // The protocol gets its own descriptor; fd 1 then points at stderr so that nothing
    // libtorch prints can corrupt the protocol.
    // SAFETY: dup/dup2 of the standard descriptors, which are open at process start.
    let proto_fd = unsafe { libc::dup(1) };
    if proto_fd < 0 || unsafe { libc::dup2(2, 1) } < 0 {
        eprintln!("tune worker: cannot set up the protocol channel");
        return ExitCode::from(2);
    }
    // SAFETY: proto_fd is a fresh descriptor that nothing else owns.
    let mut out = std::io::BufWriter::new(unsafe { File::from_raw_fd(proto_fd) });
    let device_name = device.to_string();
    let device = parse_device(device);
    // One intra-op thread per trial (shared/notes/platform.md): under load, OpenMP threads
    // spin and every step gets slower. The inter-op pool must be sized before any use.
    tch::set_num_interop_threads(1);
    tch::set_num_threads(1);

    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<ToWorker>();
    let stop_reader = stop.clone();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<ToWorker>(&line) {
                Ok(ToWorker::Stop) => stop_reader.store(true, Ordering::Relaxed),
                Ok(job) => {
                    // Cleared here, in message order, so a stale stop of the previous trial
                    // cannot stop this one and a stop sent after this job cannot be lost.
                    stop_reader.store(false, Ordering::Relaxed);
                    if tx.send(job).is_err() {
                        break;
                    }
                }
                Err(e) => eprintln!("tune worker: ignoring a bad message: {e}"),
            }
        }
        // The orchestrator is gone: stop what runs and let the main loop end.
        stop_reader.store(true, Ordering::Relaxed);
    });

    let mut cache = DataCache::new();
    let mut write = |msg: &FromWorker| -> bool {
        serde_json::to_string(msg)
            .ok()
            .and_then(|s| writeln!(out, "{s}").ok())
            .and_then(|_| out.flush().ok())
            .is_some()
    };
    for msg in rx {
        let ToWorker::Job {
            number,
            seed,
            params,
            trial,
            log,
        } = msg
        else {
            continue;
        };
        if let Err(e) = redirect_output(&log) {
            eprintln!("tune worker: cannot write the log {}: {e}", log.display());
        }
        eprintln!(
            "tune worker {}: trial {number} on {device_name}",
            std::process::id()
        );
        let result = match device {
            None => Err(TrainError::Failed(format!(
                "unknown device {device_name:?} (cpu, cuda or cuda:N)"
            ))),
            Some(d) if d.is_cuda() && !tch::Cuda::is_available() => {
                Err(TrainError::Failed(if cfg!(feature = "cuda") {
                    format!("{device_name}: libtorch sees no CUDA device")
                } else {
                    format!(
                        "{device_name} is not available to this build (CUDA needs `--features cuda` and a CUDA libtorch)"
                    )
                }))
            }
            Some(d) => crate::train::train(
                &trial,
                &params,
                d,
                crate::builtin::trial_seed(seed, number),
                &stop,
                &mut cache,
                &mut |e| {
                    let TrainEvent::Report(r) = e;
                    let metrics = r
                        .metrics
                        .into_iter()
                        .map(|(k, v)| (k, v.is_finite().then_some(v)))
                        .collect();
                    write(&FromWorker::Report {
                        step: r.step,
                        metrics,
                    });
                },
            ),
        };
        let end = match result {
            Ok(()) => FromWorker::End {
                status: EndStatus::Finished,
                reason: None,
            },
            Err(TrainError::Stopped) => FromWorker::End {
                status: EndStatus::Stopped,
                reason: None,
            },
            Err(e) => {
                eprintln!("tune worker: trial {number} failed: {e}");
                FromWorker::End {
                    status: EndStatus::Failed,
                    reason: Some(e.to_string()),
                }
            }
        };
        if !write(&end) {
            // The orchestrator is gone.
            break;
        }
    }
    ExitCode::SUCCESS
}
