//! Runners execute one trial: a user's command (`command`) or the built-in libtorch trainer in
//! a long-lived worker process (`worker`).
//!
//! A runner streams reports as they arrive and ends with a [`RunResult`]; it never decides the
//! trial's state (the scheduler does, from the reports and the end), and a failure of the
//! trial is a value here, never an `Err` that could stop the study.

pub mod command;
pub mod keeper;
pub mod protocol;
pub mod worker;

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::space::Params;
use crate::trial::{Report, ReportNotes, TrialNumber};

/// The environment variables that carry the study database's location or credentials, which
/// no trial inherits (docs/command-trials.md): a trial reports on standard output and needs no
/// way into the database, and a script that logs its environment must not log a password.
/// `[trial] env` may still set them for a trial that wants them.
pub const DB_CREDENTIALS: &[&str] = &["TUNE_DB", "PGPASSWORD", "PGPASSFILE"];

/// What a runner refuses before a trial, or reads wrong during one. None of these stops a
/// study by itself: a bad report or a worker that will not start fails one trial (its message
/// becomes the reason), and a program or worker that is not ready is refused before any trial.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunnerError {
    /// The command's program or a required file is missing, or `[trial] check` failed.
    #[error("{0}")]
    NotReady(String),
    /// A `tune: {...}` line that is not a report.
    #[error("{0}")]
    BadReport(String),
    /// `tune-worker --capabilities` could not be asked or did not answer.
    #[error("{0}")]
    Capabilities(String),
    /// A `tune-worker` process (or its keeper, or its log) could not be started.
    #[error("{0}")]
    Spawn(String),
}

/// How a process that did not succeed ended, read from its exit status: the one reading of an
/// `ExitStatus` (code, or signal and its name) that each runner words its reason from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It exited with this status code.
    Code(i32),
    /// A signal killed it: its number and name (`SIGKILL`, or `signal N` for one nix does
    /// not know).
    Signal { number: i32, name: String },
    /// Neither a code nor a signal (a stopped process, say).
    Other,
}

impl Exit {
    pub(crate) fn of(status: std::process::ExitStatus) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(number)) => Exit::Signal {
                number,
                name: nix::sys::signal::Signal::try_from(number)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {number}")),
            },
            _ => Exit::Other,
        }
    }
}

/// One trial to run on one slot.
#[derive(Debug, Clone)]
pub struct TrialJob {
    pub number: TrialNumber,
    pub params: Params,
    /// The worker slot (0-based) that runs it; runners that keep a process per slot key on it.
    pub slot: usize,
    /// `cpu` or `cuda:N`: the slot's device, the only one the trial may use.
    pub device: String,
    /// A directory of this trial's own, created before start; logs go there.
    pub trial_dir: PathBuf,
    /// Which attempt at these params this run is (1-based): an interrupted trial's params run
    /// again as attempt n + 1 (`TUNE_ATTEMPT`).
    pub attempt: u32,
    /// The number of the first attempt at these params (`number` itself for a first run):
    /// what the trial's checkpoints and its seed are keyed by, so that every attempt resumes
    /// and draws as the first.
    pub first: TrialNumber,
    /// Where the trial keeps its checkpoints, created before start and the same for every
    /// attempt ([`crate::checkpoint::trial_dir`]; `TUNE_CHECKPOINT_DIR`, `{checkpoint_dir}`).
    pub checkpoint_dir: PathBuf,
    /// Per-trial wall-clock limit.
    pub timeout: Option<Duration>,
    /// The study seed; with the trial number it seeds everything the trial draws.
    pub seed: u64,
}

/// Why the scheduler asks a running trial to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRequest {
    /// Keep running.
    None,
    /// The pruner decided to stop it (recorded as pruned).
    Prune,
    /// The user stopped it, to be recorded as failed.
    Cancel,
    /// Not the trial's fault (tune preempted by SIGTERM, Ctrl-C twice, storage lost): it runs
    /// again as its next attempt, so a builtin trial checkpoints first and keeps its
    /// checkpoints; a command trial gets SIGTERM and the grace, as for any stop, to save its own.
    Interrupt,
}

/// How a run ended, before the scheduler turns it into a trial state.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// Ran to its end on its own (exit status 0, or the trainer finished its budget).
    Finished,
    /// Failed by its own fault: non-zero exit, signal, timeout, divergence, out of memory.
    Failed {
        reason: String,
        /// The last lines of standard error, where there is one.
        log_tail: Option<String>,
    },
    /// Stopped because of a [`StopRequest`].
    Stopped,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub end: RunEnd,
    /// Log files this run wrote (recorded in the database).
    pub logs: Vec<PathBuf>,
    /// What the output said about its reports besides them (command trials), for the message
    /// of a trial that ends without a value.
    pub notes: Option<ReportNotes>,
}

/// What a runner hands the scheduler while a trial runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A report, stored in the trial's curve.
    Report(Report),
    /// The trial saved a checkpoint that holds everything up to `step` (a builtin worker's
    /// `checkpoint` message, a command's `tune: {"checkpoint": true, "step": N}` line): its
    /// next attempt resumes there, and keeps this attempt's reports up to it.
    Checkpoint { step: u64 },
}

/// Where a runner sends [`Progress`] while a trial runs.
pub type ReportSender = mpsc::UnboundedSender<Progress>;

/// A boxed future of a trial run.
pub type RunFuture = Pin<Box<dyn Future<Output = RunResult> + Send>>;

/// The seam between the scheduler and the ways a trial can run.
pub trait TrialRunner: Send + Sync {
    /// Starts `job`; the future ends when the trial has ended and every report was sent.
    /// `stop` changes from [`StopRequest::None`] when the trial must stop early.
    fn run(
        &self,
        job: TrialJob,
        reports: ReportSender,
        stop: watch::Receiver<StopRequest>,
    ) -> RunFuture;

    /// The process the trial now running on `slot` descends from, itself included (its keeper,
    /// or its own process where there is none; a builtin trial's worker): what GPU telemetry
    /// matches the driver's per-process memory against. `None` while no process of the slot
    /// runs, and for runners without processes.
    fn trial_process(&self, slot: usize) -> Option<u32> {
        let _ = slot;
        None
    }
}

/// The root process of each slot's running trial, as [`TrialRunner::trial_process`] answers:
/// shared between a runner and the futures of its runs, which record their process while it
/// runs.
#[derive(Debug, Clone, Default)]
pub struct SlotProcesses(Arc<Mutex<HashMap<usize, u32>>>);

impl SlotProcesses {
    /// The root process of `slot`'s running trial.
    pub fn get(&self, slot: usize) -> Option<u32> {
        self.map().get(&slot).copied()
    }

    /// Records `pid` as `slot`'s root process until the guard is dropped (the run's end, on
    /// every path out of it).
    pub fn hold(&self, slot: usize, pid: u32) -> HeldProcess {
        self.map().insert(slot, pid);
        HeldProcess {
            owner: self.clone(),
            slot,
            pid,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<usize, u32>> {
        // A poisoned lock only means a thread panicked while holding it; the map is whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A slot's root process, recorded while this lives (see [`SlotProcesses::hold`]).
#[derive(Debug)]
pub struct HeldProcess {
    owner: SlotProcesses,
    slot: usize,
    pid: u32,
}

impl Drop for HeldProcess {
    fn drop(&mut self) {
        let mut map = self.owner.map();
        // Only its own entry: the slot's next run may have recorded its process already.
        if map.get(&self.slot) == Some(&self.pid) {
            map.remove(&self.slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slots_process_is_known_while_its_run_holds_it_and_not_after() {
        let p = SlotProcesses::default();
        assert_eq!(p.get(0), None);
        let first = p.hold(0, 10);
        let other = p.hold(1, 20);
        assert_eq!((p.get(0), p.get(1)), (Some(10), Some(20)));
        // The slot's next run records its process before the last run's guard is dropped.
        let next = p.hold(0, 11);
        drop(first);
        assert_eq!(p.get(0), Some(11), "the next run's process stays");
        drop(next);
        drop(other);
        assert_eq!((p.get(0), p.get(1)), (None, None));
    }

    #[test]
    fn a_process_descends_from_its_parents_and_not_from_its_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep starts");
        let (me, kid) = (std::process::id(), child.id());
        assert!(keeper::descends_from(kid, me));
        assert!(keeper::descends_from(me, me));
        assert!(!keeper::descends_from(me, kid));
        // A process that is not there descends from nobody.
        assert!(!keeper::descends_from(u32::MAX - 1, me));
        child.kill().expect("kill our own sleep");
        child.wait().expect("reap it");
    }

    #[tokio::test]
    async fn a_command_trials_process_is_its_slots_while_it_runs() {
        use crate::space::Params;
        let dir = tempfile::tempdir().expect("temp dir");
        let spec = crate::study::CommandSpec {
            argv: vec!["sleep".into(), "2".into()],
            env: vec![],
            timeout: None,
            grace: Duration::from_secs(1),
            workdir: dir.path().to_path_buf(),
            requires: vec![],
            check: vec![],
            launcher: None,
            checkpoint_dir: None,
        };
        let runner = command::CommandRunner::new(spec);
        let job = TrialJob {
            number: TrialNumber(0),
            params: Params::new(),
            slot: 3,
            device: "cpu".into(),
            trial_dir: dir.path().to_path_buf(),
            attempt: 1,
            first: TrialNumber(0),
            checkpoint_dir: dir.path().join("checkpoints"),
            timeout: None,
            seed: 0,
        };
        let (rtx, _rrx) = mpsc::unbounded_channel();
        let (_stx, srx) = watch::channel(StopRequest::None);
        let run = tokio::spawn(runner.run(job, rtx, srx));
        let mut seen = None;
        for _ in 0..100 {
            seen = runner.trial_process(3);
            if seen.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let pid = seen.expect("the slot's process is known while it runs");
        assert!(keeper::descends_from(pid, std::process::id()));
        assert_eq!(runner.trial_process(0), None, "another slot has none");
        let end = run.await.expect("the run ends");
        assert_eq!(end.end, RunEnd::Finished);
        assert_eq!(runner.trial_process(3), None, "forgotten when the run ends");
    }
}
