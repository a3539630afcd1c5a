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

use tune::builtin::trial_seed;
use tune::runner::protocol::{EndStatus, FromWorker, ToWorker};

use crate::data::DataCache;
use crate::{TrainError, TrainEvent};

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
                        "{device_name} is not available to this build of tune-worker: build it with CUDA (`./scripts/setup.sh --cuda`)"
                    )
                }))
            }
            Some(d) => crate::train(
                &trial,
                &params,
                d,
                trial_seed(seed, number),
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
        if device.is_some_and(|d| d.is_cuda()) {
            // The trial's tensors are gone: hand their cached blocks back to the driver, so
            // that another slot's trial on this GPU can have them while this worker waits.
            crate::cuda::empty_cache();
        }
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
