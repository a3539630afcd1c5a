//! The Optuna arms of the preemption benchmark: the same enqueued trials, model and data as the
//! tune arms, run by Optuna's documented way to survive a killed worker (an RDBStorage on
//! SQLite with a heartbeat, stale trials failed and enqueued again by the retry callback, each
//! retry training from scratch), in `crates/tune-bench/python/optuna_retry_arm.py`.
//!
//! What lives here: finding a Python that imports Optuna and torch (the arms are skipped,
//! never failed, where there is none), running the script's worker processes (as many as
//! tune's slots, each in its own process group so that a kill takes its whole tree), killing
//! them all on the tune arms' schedule and starting them again until every trial is complete,
//! and reading the epoch log the workers append to. The schedule, the params and the table
//! stay in `preemption`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::cli::PreemptionArgs;
use crate::preemption::{ArmRun, schedule, signal, trial_params};

/// The arms' script, relative to the repository root.
const SCRIPT: &str = "crates/tune-bench/python/optuna_retry_arm.py";

/// A Python that imports Optuna and the repository's torch, with the environment it needs.
#[derive(Debug, Clone)]
pub struct Python {
    exe: PathBuf,
    script: PathBuf,
    /// `.libtorch` (torch itself) and `.venv/bench` (what it imports), as the trainer
    /// benchmark's PyTorch side has them.
    pythonpath: String,
    /// The CUDA libraries of `.venv/bench`, which torch's `_C` links even on a CPU.
    ld_library_path: String,
}

/// Where the script and the Python set-up are: `TUNE_REPO`, else the current directory when it
/// is a checkout, else the checkout this binary was built from.
fn repo_root() -> PathBuf {
    if let Some(d) = std::env::var_os("TUNE_REPO") {
        return PathBuf::from(d);
    }
    match std::env::current_dir() {
        Ok(d) if d.join(SCRIPT).is_file() => d,
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    }
}

impl Python {
    /// The Python of `PYTHON`, else `.venv/bin/python`, else `python3`, when it imports
    /// `optuna` and `torch`; otherwise why not, with the set-up that fixes it.
    pub fn find() -> Result<Python, String> {
        let root = repo_root();
        let exe = std::env::var_os("PYTHON").map_or_else(
            || {
                let venv = root.join(".venv/bin/python");
                if venv.exists() {
                    venv
                } else {
                    PathBuf::from("python3")
                }
            },
            PathBuf::from,
        );
        let bench = root.join(".venv/bench");
        let ld_library_path = std::fs::read_dir(bench.join("nvidia"))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.path().join("lib"))
                    .filter(|p| p.is_dir())
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            })
            .unwrap_or_default();
        let py = Python {
            script: root.join(SCRIPT),
            pythonpath: format!("{}:{}", root.join(".libtorch").display(), bench.display()),
            ld_library_path,
            exe,
        };
        let out = py
            .command()
            .args(["-c", "import optuna, torch"])
            .env_remove("PYTHONWARNINGS")
            .output()
            .map_err(|e| format!("cannot run {}: {e}", py.exe.display()))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "{} cannot import optuna and torch ({}); scripts/setup.sh --python-tests --bench \
                 installs both",
                py.exe.display(),
                err.lines().last().unwrap_or("no message").trim()
            ));
        }
        Ok(py)
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.exe);
        c.env("PYTHONPATH", &self.pythonpath)
            .env("LD_LIBRARY_PATH", &self.ld_library_path)
            // One thread per worker, as each tune-worker.
            .env("OMP_NUM_THREADS", "1");
        c
    }

    /// Runs one of the script's short commands to its end.
    fn script(&self, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .command()
            .arg(&self.script)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("starting {}", self.exe.display()))?;
        anyhow::ensure!(
            out.status.success(),
            "{} {}: {}",
            SCRIPT,
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The epochs in the workers' log: its whole `epoch INDEX EPOCH VALUE` lines. A line a kill cut
/// short (no newline yet) is not counted: the epoch it would record is not finished as far as
/// the study knows.
pub fn epochs_in_log(text: &str) -> u64 {
    let whole = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => return 0,
    };
    whole
        .lines()
        .filter(|l| parse_epoch_line(l).is_some())
        .count() as u64
}

/// `(trial index, epoch, validation loss)` of one log line.
fn parse_epoch_line(line: &str) -> Option<(u64, u64, f64)> {
    let mut it = line.split_whitespace();
    if it.next()? != "epoch" {
        return None;
    }
    let index = it.next()?.parse().ok()?;
    let epoch = it.next()?.parse().ok()?;
    let value = it.next()?.parse().ok()?;
    it.next().is_none().then_some((index, epoch, value))
}

/// The complete trials of the script's `summary`, as `("trial INDEX", value)`, sorted.
pub fn parse_summary(text: &str) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "complete").then_some(())?;
            let index: u64 = it.next()?.parse().ok()?;
            let value: f64 = it.next()?.parse().ok()?;
            Some((format!("trial {index}"), value))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn reported(log: &Path) -> u64 {
    std::fs::read_to_string(log).map_or(0, |t| epochs_in_log(&t))
}

/// Sends `signal` to the process group of each worker still running (its Python and anything
/// it started), then reaps them.
fn kill_all(workers: &mut [Child], signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
    for w in workers.iter_mut() {
        // One that ended (and was reaped) may have its id reused: never signal it.
        if w.try_wait()?.is_none() {
            let pgid = nix::unistd::Pid::from_raw(i32::try_from(w.id())?);
            let _ = nix::sys::signal::killpg(pgid, signal);
        }
    }
    for w in workers.iter_mut() {
        w.wait()?;
    }
    Ok(())
}

/// Runs one Optuna arm of one seed in `dir`: interrupted on the tune arms' schedule when
/// `interrupted`, never otherwise.
pub fn run_arm(
    py: &Python,
    a: &PreemptionArgs,
    interrupted: bool,
    seed: u64,
    dir: &Path,
    epoch_s: f64,
) -> anyhow::Result<ArmRun> {
    std::fs::create_dir_all(dir)?;
    let params = dir.join("params.jsonl");
    std::fs::write(&params, trial_params(seed, a.trials).join("\n") + "\n")?;
    let db = dir.join("optuna.db");
    let url = format!("sqlite:///{}", db.display());
    let seed_s = seed.to_string();
    py.script(
        dir,
        &[
            "setup",
            "--storage",
            &url,
            "--params",
            &params.display().to_string(),
            "--seed",
            &seed_s,
        ],
    )?;
    let log = dir.join("epochs.log");
    let (limit, epochs, trials) = (
        a.limit.to_string(),
        a.epochs.to_string(),
        a.trials.to_string(),
    );
    let data = tune::builtin::FASHION_MNIST_DIR;
    let log_s = log.display().to_string();
    let work_args = [
        "work",
        "--storage",
        &url,
        "--seed",
        &seed_s,
        "--data",
        data,
        "--limit",
        &limit,
        "--epochs",
        &epochs,
        "--trials",
        &trials,
        "--log",
        &log_s,
    ];
    let plan = schedule(seed, a.every, 10_000);
    let mut next = plan.iter();
    let signal = signal(a);
    let mut interruptions = 0u32;
    let t0 = Instant::now();
    for run in 0.. {
        anyhow::ensure!(run < 1000, "optuna: the study never finished");
        let mut workers = Vec::with_capacity(a.workers);
        for i in 0..a.workers {
            let stderr = std::fs::File::options()
                .create(true)
                .append(true)
                .open(dir.join(format!("worker-{i}.log")))?;
            let child = crate::process::ends_with_bench(
                py.command()
                    .arg(&py.script)
                    .args(work_args)
                    .current_dir(dir)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(stderr)
                    // Its own group: the kill takes the worker and anything it started.
                    .process_group(0),
            )
            .spawn()
            .with_context(|| format!("starting {}", py.exe.display()))?;
            workers.push(child);
        }
        let target = interrupted
            .then(|| next.next().copied())
            .flatten()
            .map(|(gap, frac)| (reported(&log) + gap, frac));
        let mut seen = (reported(&log), Instant::now());
        let finished = loop {
            // Optuna can lose a trial for good (a kill between failing a stale trial and
            // queueing its retry): then nothing trains again and the workers wait forever. A run
            // with no new epoch for long is stopped, and the arm says why.
            let now_reported = reported(&log);
            if now_reported != seen.0 {
                seen = (now_reported, Instant::now());
            } else if seen.1.elapsed() > stall_limit(epoch_s) {
                kill_all(&mut workers, nix::sys::signal::Signal::SIGKILL)?;
                anyhow::bail!(
                    "stalled: no epoch trained for {:.0} s after {now_reported} epochs and {interruptions} interruptions (Optuna lost a trial: killed between failing it as stale and queueing its retry); see {}",
                    stall_limit(epoch_s).as_secs_f64(),
                    dir.display()
                );
            }
            let mut all_done = true;
            for w in &mut workers {
                match w.try_wait()? {
                    Some(s) => anyhow::ensure!(
                        s.success(),
                        "optuna: a worker failed ({s}); see {}",
                        dir.display()
                    ),
                    None => all_done = false,
                }
            }
            if all_done {
                break true;
            }
            if let Some((at, frac)) = target
                && reported(&log) >= at
            {
                std::thread::sleep(Duration::from_secs_f64(frac * epoch_s));
                kill_all(&mut workers, signal)?;
                interruptions += 1;
                break false;
            }
            std::thread::sleep(Duration::from_millis(25));
        };
        if finished {
            break;
        }
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let values = parse_summary(&py.script(dir, &["summary", "--storage", &url])?);
    Ok(ArmRun {
        wall_s,
        epochs_reported: reported(&log),
        interruptions,
        values,
    })
}

/// How long a run of the arm may go without a new epoch before it counts as stalled: far past
/// an epoch, a heartbeat grace and a restart.
fn stall_limit(epoch_s: f64) -> Duration {
    Duration::from_secs_f64((60.0 * epoch_s).max(120.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_is_far_past_an_epoch_and_never_under_two_minutes() {
        assert_eq!(stall_limit(0.5), Duration::from_secs(120));
        assert_eq!(stall_limit(10.0), Duration::from_secs(600));
    }

    #[test]
    fn the_epoch_log_counts_whole_lines_and_not_one_a_kill_cut_short() {
        let log = "epoch 0 1 0.61\nepoch 1 1 0.7\nepoch 0 2 0.5\nepoch 1 2 0.6";
        assert_eq!(epochs_in_log(log), 3);
        assert_eq!(epochs_in_log(&format!("{log}\n")), 4);
        assert_eq!(epochs_in_log(""), 0);
        assert_eq!(epochs_in_log("epoch 0 1"), 0);
    }

    #[test]
    fn the_epoch_log_ignores_lines_that_are_not_epochs() {
        let log = "epoch 0 1 nan\nwarning: something\nepoch 0 x 0.5\nepoch 0 2 0.5 extra\n\n";
        // `nan` is a value like any other: a diverged epoch was still trained.
        assert_eq!(epochs_in_log(log), 1);
    }

    #[test]
    fn the_summary_gives_each_complete_trial_by_index_sorted() {
        let text = "complete 1 0.5\ncomplete 0 0.25\nsomething else\ncomplete x 1\n";
        assert_eq!(
            parse_summary(text),
            vec![("trial 0".to_string(), 0.25), ("trial 1".to_string(), 0.5)]
        );
    }
}
