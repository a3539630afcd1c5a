//! The preemption benchmark (`tune bench preemption`, issue 27): what interruptions cost a
//! builtin study with trial checkpoints, and without them (a cut-off trial then starts over).
//!
//! Per seed, the same trials (enqueued params, so that every arm trains the very same
//! configurations) run three times, each in a fresh directory, by the real `tune` binary:
//! 1. `uninterrupted`: checkpoints on, never stopped: the baseline;
//! 2. `checkpoints`: checkpoints on, and `tune run` interrupted about once every `--every`
//!    trial-epochs (SIGKILL: a lost machine; or SIGTERM, a preemption, with `--signal term`),
//!    then started again until the study is done;
//! 3. `no checkpoints`: the same interruptions with `checkpoints = false`;
//!
//! then twice by Optuna (`preemption_optuna`), training the same model on the same data in
//! eager PyTorch, where a Python with Optuna and torch is set up (skipped, with a line that
//! says why, where not):
//! 4. `optuna uninterrupted`: never stopped, the Optuna arms' own baseline (another trainer,
//!    other startup costs: its wall time is not tune's);
//! 5. `optuna retry`: the same interruptions, survived as Optuna documents it (heartbeat,
//!    stale trials failed and enqueued again by the retry callback, retrained from scratch).
//!
//! Measured: the wall time of the whole arm (every `tune run` of it, restarts included) and the
//! epochs trained (every report of every attempt), each over the baseline's; and whether the
//! arm's trials ended at the very values of the baseline's (bit for bit on the CPU with
//! checkpoints: the resumed run is the uninterrupted one). The interruptions are drawn from the
//! seed (exponential gaps in reported trial-epochs, then a uniform delay into the next epoch),
//! so both interrupted arms see the same schedule.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cli::PreemptionArgs;
use tune::storage::SqliteStorage;

/// One arm's run of one seed.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmRun {
    pub wall_s: f64,
    /// Every epoch trained, over every attempt of every trial (a copied report counts once).
    pub epochs_reported: u64,
    pub interruptions: u32,
    /// The final values of the complete trials, by their params (as JSON text), sorted.
    pub values: Vec<(String, f64)>,
}

/// The arms, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    Uninterrupted,
    Checkpoints,
    NoCheckpoints,
    OptunaUninterrupted,
    OptunaRetry,
}

impl Arm {
    /// The arms `tune` runs; the first is their baseline.
    pub const TUNE: [Arm; 3] = [Arm::Uninterrupted, Arm::Checkpoints, Arm::NoCheckpoints];
    /// The arms Optuna runs; the first is their baseline.
    pub const OPTUNA: [Arm; 2] = [Arm::OptunaUninterrupted, Arm::OptunaRetry];

    pub fn label(self) -> &'static str {
        match self {
            Arm::Uninterrupted => "uninterrupted",
            Arm::Checkpoints => "checkpoints",
            Arm::NoCheckpoints => "no checkpoints",
            Arm::OptunaUninterrupted => "optuna uninterrupted",
            Arm::OptunaRetry => "optuna retry",
        }
    }

    fn checkpoints(self) -> bool {
        self != Arm::NoCheckpoints
    }

    fn interrupted(self) -> bool {
        !matches!(self, Arm::Uninterrupted | Arm::OptunaUninterrupted)
    }
}

/// The study file of one arm: the quickstart's model on a Fashion-MNIST subset, trials whose
/// params are all enqueued (the space is only there to accept them).
pub fn study_toml(a: &PreemptionArgs, arm: Arm, seed: u64) -> String {
    format!(
        r#"[study]
name = "preemption"
metric = "val_loss"
direction = "minimize"
trials = {trials}
seed = {seed}
storage = "bench.db"

[space]
lr = {{ type = "float", low = 1e-4, high = 1e-2, log = true }}
batch_size = {{ type = "categorical", choices = [64, 128] }}
dropout = {{ type = "float", low = 0.0, high = 0.2 }}

[sampler]
kind = "random"

[pruner]
kind = "none"

[workers]
count = {workers}
devices = ["cpu"]

[trial]
kind = "builtin"
epochs = {epochs}
optimizer = "adam"
schedule = "cosine"
timeout = "10m"
checkpoints = {checkpoints}

[trial.model]
kind = "mlp"
depth = 2
width = 128

[trial.data]
dataset = "fashion-mnist"
limit = {limit}
"#,
        trials = a.trials,
        workers = a.workers,
        epochs = a.epochs,
        limit = a.limit,
        checkpoints = arm.checkpoints(),
    )
}

/// The params every arm of `seed` enqueues, as JSON objects.
pub fn trial_params(seed: u64, n: u64) -> Vec<String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7072_6565_6d70);
    (0..n)
        .map(|_| {
            let lr = 10f64.powf(rng.random_range(-4.0..-2.0));
            let batch = if rng.random_bool(0.5) { 64 } else { 128 };
            let dropout = rng.random_range(0.0..0.2);
            serde_json::json!({"lr": lr, "batch_size": batch, "dropout": dropout}).to_string()
        })
        .collect()
}

/// The signal that interrupts a study, from `--signal` (`term`, else `kill`).
pub fn signal(a: &PreemptionArgs) -> nix::sys::signal::Signal {
    match a.signal.as_str() {
        "term" => nix::sys::signal::Signal::SIGTERM,
        _ => nix::sys::signal::Signal::SIGKILL,
    }
}

/// Where the next interruption comes: after this many more reported trial-epochs, then this
/// fraction of an epoch later.
pub fn schedule(seed: u64, every: f64, n: usize) -> Vec<(u64, f64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6b69_6c6c);
    (0..n)
        .map(|_| {
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            let gap = (-u.ln() * every).round().max(1.0) as u64;
            (gap, rng.random_range(0.0..1.0))
        })
        .collect()
}

/// The epochs trained so far in `db` (every attempt), 0 while it does not exist yet.
///
/// A retry that resumes from a checkpoint starts with a copy of the reports its earlier attempt
/// made (so that its curve is whole), byte for byte: counting rows would charge the checkpoints
/// arm for epochs nobody trained again. A report really trained carries its own timings
/// (`samples_per_s`, `data_wait`), so distinct reports are the epochs trained.
fn reported(db: &Path) -> u64 {
    let Ok(storage) = SqliteStorage::open_read_only(db) else {
        return 0;
    };
    storage
        .connection()
        .query_row(
            "SELECT COUNT(DISTINCT metrics_json) FROM tune_reports
             WHERE json_extract(metrics_json, '$.epoch') IS NOT NULL",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map_or(0, |n| u64::try_from(n).unwrap_or(0))
}

/// The complete trials' final values by params.
fn values(db: &Path) -> anyhow::Result<Vec<(String, f64)>> {
    let storage = SqliteStorage::open_read_only(db)?;
    let conn = storage.connection();
    let mut stmt = conn.prepare(
        "SELECT t.trial_id, v.value FROM trials t
         JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
         WHERE t.state = 'COMPLETE'",
    )?;
    let rows: Vec<(i64, f64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for (id, v) in rows {
        let mut p = conn.prepare(
            "SELECT param_name, param_value FROM trial_params WHERE trial_id = ?1 ORDER BY param_name",
        )?;
        let params: Vec<String> = p
            .query_map([id], |r| {
                Ok(format!(
                    "{}={}",
                    r.get::<_, String>(0)?,
                    r.get::<_, f64>(1)?
                ))
            })?
            .collect::<Result<_, _>>()?;
        out.push((params.join(","), v));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Runs one arm of one seed in `dir`.
fn run_arm(
    exe: &Path,
    a: &PreemptionArgs,
    arm: Arm,
    seed: u64,
    dir: &Path,
    epoch_s: f64,
) -> anyhow::Result<ArmRun> {
    std::fs::create_dir_all(dir)?;
    let study = dir.join("study.toml");
    std::fs::write(&study, study_toml(a, arm, seed))?;
    for p in trial_params(seed, a.trials) {
        let out = Command::new(exe)
            .args(["enqueue"])
            .arg(&study)
            .args(["--params", &p])
            .current_dir(dir)
            .env_remove("TUNE_DB")
            .output()
            .with_context(|| format!("starting {}", exe.display()))?;
        anyhow::ensure!(
            out.status.success(),
            "tune enqueue: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let db = dir.join("bench.db");
    let plan = schedule(seed, a.every, 10_000);
    let mut next = plan.iter();
    let signal = signal(a);
    let mut interruptions = 0u32;
    let t0 = Instant::now();
    for run in 0.. {
        anyhow::ensure!(run < 1000, "{}: the study never finished", arm.label());
        let mut child = crate::process::ends_with_bench(&mut Command::new(exe))
            .args(["run", "--no-tui"])
            .arg(&study)
            .current_dir(dir)
            .env_remove("TUNE_DB")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let target = arm
            .interrupted()
            .then(|| next.next().copied())
            .flatten()
            .map(|(gap, frac)| (reported(&db) + gap, frac));
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break Some(s);
            }
            if let Some((at, frac)) = target
                && reported(&db) >= at
            {
                std::thread::sleep(Duration::from_secs_f64(frac * epoch_s));
                if child.try_wait()?.is_none() {
                    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id())?);
                    let _ = nix::sys::signal::kill(pid, signal);
                    child.wait()?;
                    interruptions += 1;
                    // The keeper takes the workers down with tune.
                    std::thread::sleep(Duration::from_millis(200));
                    break None;
                }
            }
            std::thread::sleep(Duration::from_millis(25));
        };
        if let Some(s) = status {
            anyhow::ensure!(s.success(), "{}: tune run failed ({s})", arm.label());
            break;
        }
    }
    Ok(ArmRun {
        wall_s: t0.elapsed().as_secs_f64(),
        epochs_reported: reported(&db),
        interruptions,
        values: values(&db)?,
    })
}

/// Prints one arm's row against its group's baseline `b`; returns its wall and epoch ratios.
fn print_row(seed: u64, arm: Arm, r: &ArmRun, b: &ArmRun) -> (Arm, f64, f64) {
    let same = r.values.len() == b.values.len()
        && r.values
            .iter()
            .zip(&b.values)
            .all(|(x, y)| x.0 == y.0 && x.1 == y.1);
    let (tw, te) = (
        r.wall_s / b.wall_s,
        r.epochs_reported as f64 / b.epochs_reported.max(1) as f64,
    );
    println!(
        "| {seed} | {} | {} | {:.1} | {tw:.2} | {} | {te:.2} | {} |",
        arm.label(),
        r.interruptions,
        r.wall_s,
        r.epochs_reported,
        if same {
            "yes, bit for bit"
        } else if r.values.len() == b.values.len() {
            "no"
        } else {
            "trials missing"
        }
    );
    (arm, tw, te)
}

pub fn run(a: &PreemptionArgs) -> anyhow::Result<ExitCode> {
    crate::process::require_fashion_mnist("preemption")?;
    anyhow::ensure!(!a.seeds.is_empty(), "--seeds: give at least one seed");
    anyhow::ensure!(a.trials >= 1, "--trials must be at least 1");
    anyhow::ensure!(a.epochs >= 2, "--epochs must be at least 2");
    anyhow::ensure!(a.workers >= 1, "--workers must be at least 1");
    anyhow::ensure!(
        a.every.is_finite() && a.every >= 1.0,
        "--every must be a number of trial-epochs, at least 1"
    );
    anyhow::ensure!(
        matches!(a.signal.as_str(), "kill" | "term"),
        "--signal: `kill` (SIGKILL, a lost machine) or `term` (SIGTERM, a preemption), not `{}`",
        a.signal
    );
    let exe = crate::process::tune_exe()?;
    let tmp = tempfile::Builder::new()
        .prefix("tune-bench-preemption")
        .tempdir()?;
    let root: PathBuf = if a.keep {
        let p = tmp.keep();
        println!("study files and databases kept in {}", p.display());
        p
    } else {
        tmp.path().to_path_buf()
    };
    println!(
        "preemption: {} trials × {} epochs (MLP, Fashion-MNIST {} images, {} slots, CPU), interrupted by SIG{} about every {} trial-epochs; seeds {:?}",
        a.trials,
        a.epochs,
        a.limit,
        a.workers,
        a.signal.to_uppercase(),
        a.every,
        a.seeds
    );
    println!(
        "(the optuna rows train in eager PyTorch: their ratios are over `optuna uninterrupted`)"
    );
    println!();
    println!(
        "| seed | arm | interruptions | wall s | × uninterrupted | epochs trained | × uninterrupted | values as uninterrupted |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    // Optuna's arms need a Python with Optuna and torch; without one they are left out, and
    // the tune arms' figures stand alone.
    let python = crate::preemption_optuna::Python::find();
    let mut ratios: Vec<(Arm, f64, f64)> = Vec::new();
    for &seed in &a.seeds {
        let mut groups: Vec<&[Arm]> = vec![&Arm::TUNE];
        if python.is_ok() {
            groups.push(&Arm::OPTUNA);
        }
        for group in groups {
            let mut base: Option<ArmRun> = None;
            for &arm in group {
                let dir = root.join(format!("seed-{seed}-{}", arm.label().replace(' ', "-")));
                // The baseline's epoch time places each interruption inside an epoch.
                let epoch_s = base.as_ref().map_or(1.0, |b| {
                    b.wall_s * a.workers as f64 / b.epochs_reported.max(1) as f64
                });
                let r = match &python {
                    Ok(py) if Arm::OPTUNA.contains(&arm) => {
                        match crate::preemption_optuna::run_arm(
                            py,
                            a,
                            arm.interrupted(),
                            seed,
                            &dir,
                            epoch_s,
                        ) {
                            Ok(r) => r,
                            // The other arms' figures stand; this one says why it has none
                            // (without its baseline, the rest of the group has no ratio).
                            Err(why) => {
                                println!("| {seed} | {} | {why:#} | | | | | |", arm.label());
                                if base.is_none() {
                                    break;
                                }
                                continue;
                            }
                        }
                    }
                    _ => run_arm(&exe, a, arm, seed, &dir, epoch_s)?,
                };
                let b = base.get_or_insert_with(|| r.clone());
                ratios.push(print_row(seed, arm, &r, b));
            }
        }
    }
    if let Err(why) = &python {
        println!(
            "| – | {} | skipped: {why} | | | | | |",
            Arm::OptunaRetry.label()
        );
    }
    println!();
    for arm in [Arm::Checkpoints, Arm::NoCheckpoints, Arm::OptunaRetry] {
        let mine: Vec<&(Arm, f64, f64)> = ratios.iter().filter(|r| r.0 == arm).collect();
        if mine.is_empty() {
            continue;
        }
        let n = mine.len() as f64;
        println!(
            "{}: compute spent × {:.2} of an uninterrupted study (wall), × {:.2} in epochs trained (mean of {} seeds)",
            arm.label(),
            mine.iter().map(|r| r.1).sum::<f64>() / n,
            mine.iter().map(|r| r.2).sum::<f64>() / n,
            mine.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_interrupted_arms_see_the_same_schedule_and_it_averages_every() {
        let s = schedule(3, 4.0, 4000);
        assert_eq!(s, schedule(3, 4.0, 4000));
        assert_ne!(s, schedule(4, 4.0, 4000));
        let mean = s.iter().map(|g| g.0 as f64).sum::<f64>() / s.len() as f64;
        assert!((mean - 4.0).abs() < 0.3, "{mean}");
        assert!(s.iter().all(|g| g.0 >= 1 && (0.0..1.0).contains(&g.1)));
    }

    #[test]
    fn every_arm_trains_the_same_params() {
        let p = trial_params(1, 5);
        assert_eq!(p, trial_params(1, 5));
        assert_eq!(p.len(), 5);
        for t in &p {
            let v: serde_json::Value = serde_json::from_str(t).expect("JSON");
            let lr = v["lr"].as_f64().expect("lr");
            assert!((1e-4..=1e-2).contains(&lr), "{t}");
        }
    }

    #[test]
    fn the_arms_study_files_pass_the_study_check_and_differ_only_in_checkpoints() {
        let a = PreemptionArgs {
            seeds: vec![1],
            trials: 4,
            epochs: 3,
            limit: 2000,
            workers: 2,
            every: 4.0,
            signal: "kill".into(),
            keep: false,
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("study.toml");
        for arm in Arm::TUNE {
            let text = study_toml(&a, arm, 1);
            match tune::spec::parse(&path, &text, &Default::default()) {
                Ok(study) => assert_eq!(study.trials, Some(4)),
                // Everything else was checked before the data set's install.
                Err(e) if e.message.contains("fashion-mnist is not installed") => {}
                Err(e) => panic!("{arm:?}: {e}\n{text}"),
            }
            assert_eq!(
                text.contains("checkpoints = true"),
                arm != Arm::NoCheckpoints,
                "{text}"
            );
        }
    }
}
