//! The worker process's side of the protocol (`tune::runner::protocol`): the body of
//! `tune-worker worker --device D`. It reads jobs on stdin, trains each on this process's
//! device, and writes reports and the trial's end on its own copy of stdout.
//!
//! What belongs here: the worker's main loop, its device and its output descriptors. What does
//! not: spawning, reusing and killing workers, timeouts (`tune::runner::worker`, the
//! orchestrator's side); the training run itself ([`crate::fit`]).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tune::builtin::{BuiltinTrial, trial_seed};
use tune::runner::protocol::{CheckpointJob, EndStatus, FromWorker, ToWorker};
use tune::space::Params;

use crate::data::DataCache;
use crate::snapshot::SnapshotStore;
use crate::{Checkpoints, TrainError, TrainEvent};

/// Parses `cpu`, `cuda` or `cuda:N`.
pub fn parse_device(s: &str) -> Option<tch::Device> {
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

/// The body of `tune-worker worker --device D`: reads jobs on stdin, trains,
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
    // One intra-op thread per trial: under load, OpenMP threads
    // spin and every step gets slower. The inter-op pool must be sized before any use.
    tch::set_num_interop_threads(1);
    tch::set_num_threads(1);

    let stop = Arc::new(AtomicBool::new(false));
    let now = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<ToWorker>();
    let (stop_reader, now_reader) = (stop.clone(), now.clone());
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<ToWorker>(&line) {
                Ok(msg) => {
                    if let Some(job) = route(msg, &stop_reader, &now_reader)
                        && tx.send(job).is_err()
                    {
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
            seed_number,
            params,
            trial,
            log,
            checkpoint,
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
        let job = Job {
            number,
            seed,
            seed_number,
            params: &params,
            trial: &trial,
            checkpoint: checkpoint.as_ref(),
        };
        let end = run_job(
            &job,
            device,
            &device_name,
            &stop,
            &now,
            &mut cache,
            &mut write,
        );
        if !write(&end) {
            // The orchestrator is gone.
            break;
        }
    }
    ExitCode::SUCCESS
}

/// What the stdin reader does with a message: a stop or a checkpoint request sets its flag
/// at once (the trial polls them at step boundaries); a job goes to the main loop, returned.
fn route(msg: ToWorker, stop: &AtomicBool, now: &AtomicBool) -> Option<ToWorker> {
    match msg {
        ToWorker::Stop => {
            stop.store(true, Ordering::Relaxed);
            None
        }
        ToWorker::Checkpoint => {
            now.store(true, Ordering::Relaxed);
            None
        }
        job @ ToWorker::Job { .. } => {
            // Cleared here, in message order, so a stale stop or checkpoint request of the
            // previous trial cannot reach this one and one sent after this job cannot be lost.
            stop.store(false, Ordering::Relaxed);
            now.store(false, Ordering::Relaxed);
            Some(job)
        }
    }
}

/// One job's parts, as the worker got them.
struct Job<'a> {
    number: u64,
    seed: u64,
    /// The number the trial's seed is drawn for (its first attempt's), where not `number`.
    seed_number: Option<u64>,
    params: &'a Params,
    trial: &'a BuiltinTrial,
    checkpoint: Option<&'a CheckpointJob>,
}

/// Runs one job: opens its checkpoint directory (resuming from it when asked), trains,
/// writes each report and checkpoint through `write`, removes the checkpoints when the trial
/// finished or failed (keeping the best when asked) and returns the trial's end.
fn run_job(
    job: &Job<'_>,
    device: Option<tch::Device>,
    device_name: &str,
    stop: &AtomicBool,
    now: &AtomicBool,
    cache: &mut DataCache,
    write: &mut dyn FnMut(&FromWorker) -> bool,
) -> FromWorker {
    let number = job.number;
    // Reports and checkpoints both go out through `write`, never at the same time.
    let write = std::cell::RefCell::new(write);
    let send = |msg: &FromWorker| {
        (write.borrow_mut())(msg);
    };
    let mut on_event = |e| {
        let TrainEvent::Report(r) = e;
        let metrics = r
            .metrics
            .into_iter()
            .map(|(k, v)| (k, v.is_finite().then_some(v)))
            .collect();
        send(&FromWorker::Report {
            step: r.step,
            metrics,
        });
    };
    let store = match job.checkpoint {
        None => None,
        Some(c) => match SnapshotStore::open(&c.dir, c.direction).map(|s| s.keep_last(c.keep_last))
        {
            Ok(store) => Some(store),
            // A directory that cannot be made: the trial trains without checkpoints.
            Err(e) => {
                eprintln!("tune worker: trial {number} trains without checkpoints: {e}");
                None
            }
        },
    };
    let result = match device {
        None => Err(TrainError::Failed(format!(
            "unknown device {device_name:?} (cpu, cuda or cuda:N)"
        ))),
        Some(d) if d.is_cuda() && !tch::Cuda::is_available() => {
            Err(TrainError::Failed(if cfg!(feature = "cuda") {
                format!("{device_name}: libtorch sees no CUDA device")
            } else {
                format!(
                    "{device_name} is not available to this build of tune-worker: build it with CUDA (`./scripts/setup.sh --cuda`)"
                )
            }))
        }
        Some(d) => {
            let seed = trial_seed(job.seed, job.seed_number.unwrap_or(number));
            match (&store, job.checkpoint) {
                (Some(store), Some(c)) => {
                    let resume = if c.resume {
                        let mut warnings = Vec::new();
                        let snap = store.load(&mut warnings);
                        for w in warnings {
                            eprintln!("tune worker: {w}");
                        }
                        if snap.is_none() {
                            eprintln!(
                                "tune worker: trial {number}: no usable checkpoint in {}; starting from scratch",
                                store.dir().display()
                            );
                        }
                        snap
                    } else {
                        None
                    };
                    let mut on_save = |saved: &crate::snapshot::Saved| {
                        send(&FromWorker::Checkpoint {
                            step: saved.step,
                            path: saved.path.clone(),
                            best: saved.best,
                        });
                    };
                    let mut ck = Checkpoints {
                        store,
                        every: c
                            .every_s
                            .filter(|s| s.is_finite() && *s >= 0.0)
                            .map(std::time::Duration::from_secs_f64),
                        metric: c.metric.clone(),
                        now,
                        resume,
                        on_save: &mut on_save,
                    };
                    crate::train_with_checkpoints(
                        job.trial,
                        job.params,
                        d,
                        seed,
                        stop,
                        cache,
                        Some(&mut ck),
                        &mut on_event,
                    )
                }
                _ => crate::train(job.trial, job.params, d, seed, stop, cache, &mut on_event),
            }
        }
    };
    if device.is_some_and(|d| d.is_cuda()) {
        // The trial's tensors are gone: hand their cached blocks back to the driver, so
        // that another slot's trial on this GPU can have them while this worker waits.
        crate::cuda::empty_cache();
    }
    // A stopped trial keeps its checkpoints: a stop may be a pause or a preemption.
    if let (Some(store), Some(c)) = (&store, job.checkpoint)
        && !matches!(result, Err(TrainError::Stopped))
        && let Err(e) = store.clean(c.keep_best)
    {
        eprintln!("tune worker: trial {number}: cannot remove its checkpoints: {e}");
    }
    match result {
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
    }
}
