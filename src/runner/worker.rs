//! The builtin trainer's runner: one long-lived worker process per slot (`tune-worker worker
//! --device D`), spawned on the slot's first trial, reused from trial to trial so libtorch
//! starts once, and replaced when it dies. libtorch lives only in the worker: a crash there
//! (a signal, an abort in C++) fails that trial and never the orchestrator.
//!
//! The messages both ends exchange are in [`super::protocol`].

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use super::keeper::{Keeper, Lifeline};
use super::protocol::{Capabilities, EndStatus, FromWorker, ToWorker};
use super::{
    Exit, Progress, ReportSender, RunEnd, RunFuture, RunResult, RunnerError, SlotProcesses,
    StopRequest, TrialJob, TrialRunner,
};
use crate::builtin::BuiltinTrial;
use crate::checkpoint::Keep;
use crate::runner::protocol::CheckpointJob;
use crate::trial::{Direction, Report};

/// How long a worker may take to stop a trial once asked, before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(20);
/// How long an interrupted trial (preemption) may take to save its checkpoint before it is
/// asked to stop anyway: the save comes at the next step boundary.
const CHECKPOINT_WAIT: Duration = Duration::from_secs(10);
/// Lines of the log kept as a failed trial's tail.
const TAIL_LINES: usize = 20;

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    device: String,
    /// The worker's keeper's lifeline, where it runs under one: dropping the worker (or this)
    /// kills the worker and anything it started.
    lifeline: Option<Lifeline>,
}

impl Worker {
    /// Kills the worker: through its keeper (dropping the lifeline) where it has one, so that
    /// nothing it started is orphaned; else directly.
    async fn kill(&mut self) {
        if self.lifeline.take().is_some()
            && tokio::time::timeout(Duration::from_secs(5), self.child.wait())
                .await
                .is_ok()
        {
            return;
        }
        let _ = self.child.kill().await;
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Worker>>>;

/// Runs builtin trials in worker processes, one per slot.
pub struct WorkerRunner {
    trial: Arc<BuiltinTrial>,
    exe: PathBuf,
    slots: Mutex<HashMap<usize, Slot>>,
    gpu_memory_fraction: Option<f64>,
    keeper: Option<Keeper>,
    processes: SlotProcesses,
    objective: Arc<Objective>,
}

/// What a trial's checkpoints are named after and judged by.
#[derive(Debug, Clone)]
struct Objective {
    /// The study's name: a shared `checkpoint_dir` holds a directory per study.
    study: String,
    metric: String,
    direction: Direction,
}

impl WorkerRunner {
    /// `exe` is the `tune-worker` binary (`tune-worker worker --device D` hosts libtorch).
    pub fn new(trial: BuiltinTrial, exe: PathBuf) -> WorkerRunner {
        WorkerRunner {
            trial: Arc::new(trial),
            exe,
            slots: Mutex::new(HashMap::new()),
            gpu_memory_fraction: None,
            keeper: None,
            processes: SlotProcesses::default(),
            objective: Arc::new(Objective {
                study: "study".into(),
                metric: "val_loss".into(),
                direction: Direction::Minimize,
            }),
        }
    }

    /// The study's name and first objective: the trial's checkpoint directory under a shared
    /// `checkpoint_dir`, and the metric that judges its best checkpoint (without this call:
    /// "study", and `val_loss` minimized).
    pub fn with_objective(
        mut self,
        study: &str,
        metric: &str,
        direction: Direction,
    ) -> WorkerRunner {
        self.objective = Arc::new(Objective {
            study: study.into(),
            metric: metric.into(),
            direction,
        });
        self
    }

    /// Runs every worker under a keeper (`tune run` and `tune worker` do), so that no worker
    /// outlives tune, `kill -9` included (see [`super::keeper`]).
    pub fn with_keeper(mut self, keeper: Option<Keeper>) -> WorkerRunner {
        self.keeper = keeper;
        self
    }

    /// Caps the caching allocator of each worker on a CUDA slot at this share of its GPU's
    /// memory (`workers.gpu_memory_fraction`), so trials sharing a GPU cannot starve each other.
    pub fn with_gpu_memory_fraction(mut self, fraction: Option<f64>) -> WorkerRunner {
        self.gpu_memory_fraction = fraction;
        self
    }

    fn slot(&self, slot: usize) -> Slot {
        // A poisoned lock only means another thread panicked while inserting; the map is
        // still usable.
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(slot).or_default().clone()
    }
}

/// Asks a `tune-worker` binary what it can do (`tune-worker --capabilities`, one JSON line).
/// Blocking: called once before a study starts, never on the executor.
pub fn capabilities(exe: &Path) -> Result<Capabilities, RunnerError> {
    let out = std::process::Command::new(exe)
        .arg("--capabilities")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| RunnerError::Capabilities(format!("cannot start {}: {e}", exe.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(RunnerError::Capabilities(format!(
            "`{} --capabilities` failed ({}): {}; rebuild it with this `tune` (`cargo build --release --workspace`)",
            exe.display(),
            describe_exit(Some(out.status)),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let line = text.lines().last().unwrap_or("").trim();
    serde_json::from_str(line).map_err(|e| {
        RunnerError::Capabilities(format!(
            "`{} --capabilities` answered {line:?}, not its capabilities ({e}); rebuild it with this `tune` (`cargo build --release --workspace`)",
            exe.display()
        ))
    })
}

/// `PYTORCH_CUDA_ALLOC_CONF` with libtorch's per-process cap of the caching allocator set to
/// `fraction`, keeping the user's other settings (a cap of theirs is replaced: the study's
/// wins, since it is what keeps co-located trials apart).
fn alloc_conf(existing: Option<&str>, fraction: f64) -> String {
    let mut parts: Vec<String> = existing
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.starts_with("per_process_memory_fraction"))
        .map(str::to_string)
        .collect();
    parts.push(format!("per_process_memory_fraction:{fraction}"));
    parts.join(",")
}

fn spawn(
    exe: &Path,
    keeper: Option<&Keeper>,
    device: &str,
    log: &Path,
    gpu_memory_fraction: Option<f64>,
) -> Result<Worker, RunnerError> {
    use std::os::unix::fs::OpenOptionsExt;
    // Never through a symbolic link planted at the log's name.
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(log)
        .map_err(|e| RunnerError::Spawn(format!("cannot open the log {}: {e}", log.display())))?;
    let args = [
        "worker".to_string(),
        "--device".to_string(),
        device.to_string(),
    ];
    let (mut command, lifeline) = match keeper {
        Some(k) => {
            let (c, l) = k.command(&exe.to_string_lossy(), &args).map_err(|e| {
                RunnerError::Spawn(format!("cannot start the worker's keeper: {e}"))
            })?;
            (c, Some(l))
        }
        None => {
            let mut c = Command::new(exe);
            c.args(&args).kill_on_drop(true);
            (c, None)
        }
    };
    for k in super::DB_CREDENTIALS {
        command.env_remove(k);
    }
    if let Some(f) = gpu_memory_fraction
        && device.starts_with("cuda")
    {
        // Read by libtorch's CUDA caching allocator when it starts, before the first
        // allocation: the worker needs no CUDA headers to set it.
        let existing = std::env::var("PYTORCH_CUDA_ALLOC_CONF").ok();
        command.env(
            "PYTORCH_CUDA_ALLOC_CONF",
            alloc_conf(existing.as_deref(), f),
        );
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        // One intra-op thread per trial: OpenMP threads spin under
        // load and make every trial slower. The worker also calls set_num_threads(1).
        .env("OMP_NUM_THREADS", "1")
        .env("MKL_NUM_THREADS", "1")
        .spawn()
        .map_err(|e| {
            RunnerError::Spawn(format!("cannot start the worker {}: {e}", exe.display()))
        })?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| RunnerError::Spawn("the worker has no stdin".to_string()))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| RunnerError::Spawn("the worker has no stdout".to_string()))?;
    Ok(Worker {
        child,
        stdin,
        stdout: BufReader::new(stdout).lines(),
        device: device.to_string(),
        lifeline,
    })
}

/// The last lines of a log file.
fn tail(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    // Only the file's end is read: the log may be gigabytes, the stored tail is bounded.
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let from = len.saturating_sub(crate::trial::LOG_TAIL_BYTES as u64);
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut text = Vec::new();
    file.read_to_end(&mut text).ok()?;
    // Read from inside a character: start at the next one (at most 3 continuation bytes).
    let skip = if from > 0 {
        text.iter()
            .take(3)
            .take_while(|b| (0x80..0xC0).contains(*b))
            .count()
    } else {
        0
    };
    let from = from + skip as u64;
    let text = String::from_utf8_lossy(&text[skip..]);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // Read from the middle of a line: drop that piece, or say it was cut when it is all.
    if from > 0 && !lines.is_empty() {
        if lines.len() > 1 {
            lines.remove(0);
        } else {
            lines[0] = format!(
                "[tune: cut the first {from} bytes of this line]{}",
                lines[0]
            );
        }
    }
    let start = lines.len().saturating_sub(TAIL_LINES);
    let t = lines[start..].join("\n");
    (!t.trim().is_empty()).then_some(t)
}

fn describe_exit(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) => match Exit::of(s) {
            Exit::Code(c) => format!("worker exited with status {c}"),
            Exit::Signal { number, name } => format!("worker killed by signal {number} ({name})"),
            Exit::Other => "worker ended".into(),
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
        let keeper = self.keeper.clone();
        let fraction = self.gpu_memory_fraction;
        let processes = self.processes.clone();
        let objective = self.objective.clone();
        Box::pin(async move {
            let mut guard = slot.lock().await;
            let exe = (exe.as_path(), keeper.as_ref(), &processes);
            run_on(
                &mut guard,
                exe,
                fraction,
                (trial, &objective),
                job,
                reports,
                stop,
            )
            .await
        })
    }

    fn trial_process(&self, slot: usize) -> Option<u32> {
        self.processes.get(slot)
    }
}

/// Why the orchestrator ended a run itself.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Asked {
    Nothing,
    Stop,
    Timeout,
}

/// The worker's part of a trial's checkpoints: where, how often, what stays. `None` with
/// `checkpoints = false`.
fn checkpoint_job(trial: &BuiltinTrial, o: &Objective, job: &TrialJob) -> Option<CheckpointJob> {
    let spec = &trial.checkpoints;
    spec.enabled.then(|| CheckpointJob {
        // Chosen by the scheduler (`checkpoint::trial_dir`): the same for every attempt.
        dir: job.checkpoint_dir.clone(),
        // Set by `checkpoint::claim`: whether the directory holds this trial's checkpoints.
        resume: false,
        every_s: spec.every.map(|d| d.as_secs_f64()),
        keep_best: spec.keep == Keep::Best,
        keep_last: spec.keep_last,
        metric: o.metric.clone(),
        direction: o.direction,
    })
}

/// Removes the checkpoints of a trial that ended for good: what the worker leaves of a
/// finished or failed one (the owner file), all of one the orchestrator ended (pruned,
/// cancelled, timed out: the worker keeps a stopped trial's, which may be paused); a failure
/// goes to the log.
fn clean_checkpoints(ck: Option<&CheckpointJob>, log: &Path) {
    if let Some(c) = ck {
        let keep = if c.keep_best { Keep::Best } else { Keep::None };
        if let Err(e) = crate::checkpoint::clean(&c.dir, keep) {
            append_log(
                log,
                &format!(
                    "tune: cannot remove the checkpoints in {}: {e}",
                    c.dir.display()
                ),
            );
        }
    }
}

async fn run_on(
    slot: &mut Option<Worker>,
    (exe, keeper, processes): (&Path, Option<&Keeper>, &SlotProcesses),
    gpu_memory_fraction: Option<f64>,
    (trial, objective): (BuiltinTrial, &Objective),
    job: TrialJob,
    reports: ReportSender,
    mut stop: watch::Receiver<StopRequest>,
) -> RunResult {
    let log = job.trial_dir.join("worker.log");
    let logs = vec![log.clone()];
    let failed = |reason: String, log_tail: Option<String>| RunResult {
        end: RunEnd::Failed { reason, log_tail },
        logs: logs.clone(),
        notes: None,
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
            notes: None,
        };
    }
    let mut checkpoint = checkpoint_job(&trial, objective, &job);
    if let Some(c) = checkpoint.as_mut() {
        // Keyed by the first attempt: a re-run of the same params resumes its checkpoints.
        let owner = crate::checkpoint::owner(&objective.study, job.first.0, job.seed, &job.params);
        match crate::checkpoint::claim(&c.dir, &owner) {
            Ok(resume) => c.resume = resume,
            // The trial still runs, without checkpoints, and its log says why.
            Err(e) => {
                append_log(
                    &log,
                    &format!(
                        "tune: trial {} runs without checkpoints: cannot use {}: {e}",
                        job.number.0,
                        c.dir.display()
                    ),
                );
                checkpoint = None;
            }
        }
    }
    let msg = ToWorker::Job {
        number: job.number.0,
        seed: job.seed,
        seed_number: (job.first != job.number).then_some(job.first.0),
        params: job.params.clone(),
        trial: Box::new(trial),
        log: log.clone(),
        checkpoint: checkpoint.clone(),
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
            match spawn(exe, keeper, &job.device, &log, gpu_memory_fraction) {
                Ok(w) => *slot = Some(w),
                Err(e) => return failed(e.to_string(), None),
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
    // The trial runs in this worker (and what it starts) until the run ends (GPU telemetry).
    let _held = w.child.id().map(|pid| processes.hold(job.slot, pid));

    let timeout = job.timeout;
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut asked = Asked::Nothing;
    // The stop the scheduler asked for: its ends (a prune, a cancel) are final, so the
    // trial's checkpoints go with them.
    let mut requested = StopRequest::None;
    let ends_for_good = |asked: Asked, requested: StopRequest| match asked {
        Asked::Timeout => true,
        Asked::Stop => matches!(requested, StopRequest::Prune | StopRequest::Cancel),
        Asked::Nothing => false,
    };
    let mut kill_at: Option<tokio::time::Instant> = None;
    // An interrupted trial saves a checkpoint first: `Stop` goes once the worker says it
    // saved one, or at this instant.
    let mut stop_at: Option<tokio::time::Instant> = None;
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
                            let _ = reports.send(Progress::Report(Report { step, metrics }));
                        }
                        // On disk, where the next attempt of the trial finds it; the one an
                        // interrupted trial was asked for lets it stop now.
                        Ok(FromWorker::Checkpoint { step, .. }) => {
                            let _ = reports.send(Progress::Checkpoint { step });
                            if stop_at.take().is_some() && send(w, &ToWorker::Stop).await.is_err() {
                                kill_at = Some(tokio::time::Instant::now());
                            }
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
                            // Finished or failed: the worker removed its snapshots, this
                            // removes the rest. Stopped: only for good (not a pause).
                            if status != EndStatus::Stopped || ends_for_good(asked, requested) {
                                clean_checkpoints(checkpoint.as_ref(), &log);
                            }
                            return RunResult {
                    end,
                    logs,
                    notes: None,
                };
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
                    requested = request;
                    let now = tokio::time::Instant::now();
                    kill_at = Some(now + STOP_GRACE);
                    // Interrupted with checkpoints on: save first (its next attempt resumes
                    // from there), then stop.
                    let first = if request == StopRequest::Interrupt && checkpoint.is_some() {
                        stop_at = Some(now + CHECKPOINT_WAIT);
                        kill_at = Some(now + CHECKPOINT_WAIT + STOP_GRACE);
                        ToWorker::Checkpoint
                    } else {
                        ToWorker::Stop
                    };
                    if send(w, &first).await.is_err() {
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
            _ = tokio::time::sleep_until(stop_at.unwrap_or_else(far)), if stop_at.is_some() => {
                // No checkpoint came in time: stop without it.
                stop_at = None;
                if send(w, &ToWorker::Stop).await.is_err() {
                    kill_at = Some(tokio::time::Instant::now());
                }
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(far)), if kill_at.is_some() => {
                // It did not stop at a step boundary in time (a step stuck in libtorch):
                // kill it; the slot gets a fresh worker next time.
                w.kill().await;
                *slot = None;
                if ends_for_good(asked, requested) {
                    clean_checkpoints(checkpoint.as_ref(), &log);
                }
                let end = match asked {
                    Asked::Timeout => RunEnd::Failed {
                        reason: timed_out(timeout),
                        log_tail: tail(&log),
                    },
                    _ => RunEnd::Stopped,
                };
                return RunResult {
                    end,
                    logs,
                    notes: None,
                };
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

#[cfg(test)]
mod tests {
    use super::{alloc_conf, tail};

    #[test]
    fn the_tail_of_a_huge_log_is_read_from_its_end_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("stderr.log");
        let line = "é".repeat(500_000);
        std::fs::write(&log, format!("first\n{line}\nlast line\n")).expect("write");
        let t = tail(&log).expect("a tail");
        assert_eq!(t, "last line", "the cut piece of a line is dropped");
        std::fs::write(&log, &line).expect("write");
        let t = tail(&log).expect("a tail");
        assert!(t.starts_with("[tune: cut the first "), "{}", &t[..40]);
        assert!(!t.contains('\u{FFFD}'), "a character was split");
        assert!(t.len() <= crate::trial::LOG_TAIL_BYTES + 100, "{}", t.len());
    }

    #[test]
    fn the_memory_cap_joins_the_users_allocator_settings_and_replaces_their_cap() {
        assert_eq!(alloc_conf(None, 0.5), "per_process_memory_fraction:0.5");
        assert_eq!(
            alloc_conf(
                Some("expandable_segments:True, per_process_memory_fraction:0.9"),
                0.25
            ),
            "expandable_segments:True,per_process_memory_fraction:0.25"
        );
    }
}
