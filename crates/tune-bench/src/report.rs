//! `tune-bench report` (issue 28; goal: `tune report` under 5 s at 10 000 trials): writes a
//! study of N trials with learning curves (some pruned, some failed, on 8 slots) into a temp
//! SQLite file, then times the `tune` binary beside this one on it: `tune report`, and
//! `tune importance` with PED-ANOVA and with fANOVA, each the median of `--repeat` runs of the
//! whole process (start, reading the database, the work, the output). Where Optuna is there
//! (`--python`, `.venv` from `scripts/setup.sh --python-tests`), it times
//! `optuna.importance.get_param_importances` with the same two evaluators on the same file and
//! prints tune's time over Optuna's, measured in the same run: each evaluator in its own
//! process, printed as it ends, stopped at `--optuna-limit`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use tune::space::{ParamValue, Params, Space};
use tune::storage::{ClaimRequest, NewStudy, SqliteStorage, Storage};
use tune::trial::{Direction, Ran, Report, TrialStatus};

use crate::cli::ReportBenchArgs;
use crate::process::{ends_with_bench, tune_exe};

/// The goal of issue 28, in seconds for `tune report` at 10 000 trials.
pub const GOAL_S: f64 = 5.0;

/// Slots the trials are spread over (lanes of the timeline).
const SLOTS: u64 = 8;

const SPACE: &str = r#"lr = { type = "float", low = 1e-5, high = 1e-1, log = true }
batch = { type = "int", low = 16, high = 256, log = true }
optimizer = { type = "categorical", choices = ["sgd", "adam", "adamw"] }
dropout = { type = "float", low = 0.0, high = 0.5 }
layers = { type = "int", low = 1, high = 6 }"#;

/// A splitmix64 step: the benchmark's params are a fixed function of the trial number.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(n: u64, k: u64) -> f64 {
    (mix(n.wrapping_mul(31).wrapping_add(k)) >> 11) as f64 / (1u64 << 53) as f64
}

/// Trial `n`'s params and its final loss (lr and dropout matter, layers a little, the rest not).
fn trial(n: u64) -> (Params, f64) {
    let lr = 10f64.powf(-5.0 + 4.0 * unit(n, 0));
    let batch = (16.0 * 16f64.powf(unit(n, 1))).round() as i64;
    let opt = ["sgd", "adam", "adamw"][(unit(n, 2) * 3.0) as usize % 3];
    let dropout = 0.5 * unit(n, 3);
    let layers = 1 + (unit(n, 4) * 6.0) as i64 % 6;
    let loss = 0.2
        + 0.1 * (lr.log10() + 3.0).powi(2)
        + 0.4 * (dropout - 0.2).powi(2)
        + 0.01 * layers as f64
        + 0.02 * unit(n, 5);
    let p = Params::from([
        ("lr".to_string(), ParamValue::Float(lr)),
        ("batch".to_string(), ParamValue::Int(batch.clamp(16, 256))),
        ("optimizer".to_string(), ParamValue::Str(opt.into())),
        ("dropout".to_string(), ParamValue::Float(dropout)),
        ("layers".to_string(), ParamValue::Int(layers)),
    ]);
    (p, loss)
}

/// Writes study `bench` of `n` trials with `steps` reports each into `db`: every 5th trial is
/// pruned halfway, every 23rd fails (two reasons), the rest complete.
pub fn write_study(db: &Path, n: u64, steps: u64) -> anyhow::Result<()> {
    let space = Space::from_toml(&toml::from_str(SPACE)?)?;
    let mut w = SqliteStorage::open(db)?;
    let study = w.create_or_load_study(&NewStudy {
        others: &[],
        name: "bench",
        direction: Direction::Minimize,
        metric: "loss",
        file: None,
        source: None,
    })?;
    let devices: Vec<String> = (0..SLOTS).map(|_| "cpu".to_string()).collect();
    let worker = w.register_worker(&study, &devices)?;
    for k in 0..n {
        let (params, loss) = trial(k);
        // Queued with its params, then claimed: a claim of a queued trial proposes nothing, so
        // filling the study stays linear in its size.
        w.enqueue(&study, &space, &params)?;
        let req = ClaimRequest {
            worker,
            budget: None,
            slot: (k % SLOTS) as usize,
            device: "cpu",
            space: &space,
        };
        let t = w
            .claim(&study, &req, &mut |_, _| params.clone())?
            .ok_or_else(|| anyhow::anyhow!("no trial to claim"))?;
        let pruned = k % 5 == 4;
        let failed = k % 23 == 22;
        let last = if pruned || failed { steps / 2 } else { steps };
        let mut value = loss;
        for s in 0..last {
            value = loss * (1.0 + 2.0 / (s as f64 + 1.0));
            let report = Report {
                step: s,
                metrics: [("loss".to_string(), value)].into(),
            };
            w.add_report(t.id, s, &report, false, "loss")?;
        }
        let status = if failed {
            TrialStatus::Failed {
                reason: if k.is_multiple_of(2) {
                    "exited with status 1".into()
                } else {
                    "the value of `loss` is NaN, not a finite number".into()
                },
                log_tail: Some("RuntimeError: CUDA out of memory".into()),
                interrupted: false,
                ran: Ran::default(),
            }
        } else if pruned {
            TrialStatus::Pruned {
                value: Some(value),
                step: Some(last.saturating_sub(1)),
                reason: None,
                paused: false,
                ran: Ran::default(),
            }
        } else {
            TrialStatus::Complete {
                value: loss,
                others: Vec::new(),
                ran: Ran::default(),
            }
        };
        w.finish_trial(t.id, &status, &[])?;
    }
    Ok(())
}

/// The median wall seconds of `repeat` runs of `tune ARGS`, which must succeed.
fn time_tune(tune: &Path, args: &[&str], repeat: u32) -> anyhow::Result<f64> {
    let mut times = Vec::new();
    for _ in 0..repeat.max(1) {
        let mut cmd = Command::new(tune);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null());
        let t = Instant::now();
        let out = ends_with_bench(&mut cmd).output()?;
        times.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(
            out.status.success(),
            "tune {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// What Optuna's side gave for one evaluator.
enum OptunaTime {
    /// The call's median seconds, and Optuna's version.
    Done { seconds: f64, version: String },
    /// Still running at the limit, and stopped.
    Stopped { limit: Duration },
}

/// How often a running Optuna process is looked at for its end.
const OPTUNA_POLL: Duration = Duration::from_millis(100);

/// Optuna's seconds for `method` (`ped-anova`, `fanova`) on `db`, each evaluator in its own
/// process so that one stopped at `limit` leaves the other's figure; or why there are none.
fn time_optuna(
    python: &str,
    db: &Path,
    method: &str,
    repeat: u32,
    limit: Duration,
) -> Result<OptunaTime, String> {
    if !Path::new(python).exists() {
        return Err(format!(
            "{python} not found (`scripts/setup.sh --python-tests` makes .venv)"
        ));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/optuna_importance_bench.py");
    // Its output goes to files, not pipes: a pipe nobody reads while waiting could fill and
    // stall the process, and its time would then be ours.
    let dir = tempfile::tempdir().map_err(|e| format!("a temp dir: {e}"))?;
    let file = |name: &str| {
        std::fs::File::create(dir.path().join(name)).map_err(|e| format!("{name}: {e}"))
    };
    let mut child = Command::new(python)
        .arg(&script)
        .arg("--db")
        .arg(db)
        .args(["--study", "bench", "--method", method])
        .args(["--repeat", &repeat.max(1).to_string()])
        .stdin(Stdio::null())
        .stdout(file("stdout")?)
        .stderr(file("stderr")?)
        .spawn()
        .map_err(|e| format!("{python}: {e}"))?;
    let start = Instant::now();
    loop {
        if child
            .try_wait()
            .map_err(|e| format!("{python}: {e}"))?
            .is_some()
        {
            break;
        }
        if start.elapsed() >= limit {
            // Killed and reaped, so that no Optuna is left computing beside the next run.
            child
                .kill()
                .map_err(|e| format!("stopping {python}: {e}"))?;
            child.wait().map_err(|e| format!("{python}: {e}"))?;
            return Ok(OptunaTime::Stopped { limit });
        }
        std::thread::sleep(OPTUNA_POLL);
    }
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    let stdout = read("stdout");
    let v: serde_json::Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or(""))
        .map_err(|e| {
            format!(
                "Optuna printed no result ({e}): {}",
                read("stderr").chars().take(500).collect::<String>()
            )
        })?;
    Ok(OptunaTime::Done {
        seconds: v[method].as_f64().unwrap_or(f64::NAN),
        version: v["optuna"].as_str().unwrap_or("?").to_string(),
    })
}

pub fn run(a: &ReportBenchArgs) -> anyhow::Result<ExitCode> {
    let tune = tune_exe()?;
    let dir = tempfile::Builder::new()
        .prefix("tune-bench-report-")
        .tempdir()?;
    let db: PathBuf = dir.path().join("bench.db");
    let t = Instant::now();
    write_study(&db, a.trials, a.steps)?;
    println!(
        "report bench: a study of {} trials with {} reports each (every 5th pruned, every 23rd failed) written in {:.1} s",
        a.trials,
        a.steps,
        t.elapsed().as_secs_f64()
    );
    let dbs = db.display().to_string();
    let html = dir.path().join("report.html").display().to_string();
    let base = ["--study", "bench", "--db", dbs.as_str()];
    let report_args: Vec<&str> = ["report"]
        .iter()
        .copied()
        .chain(base)
        .chain(["-o", html.as_str()])
        .collect();
    let report_s = time_tune(&tune, &report_args, a.repeat)?;
    let size = std::fs::metadata(&html).map(|m| m.len()).unwrap_or(0);
    println!(
        "report bench: tune report: {report_s:.3} s (median of {}; goal < {GOAL_S} s), {:.0} kB of HTML",
        a.repeat,
        size as f64 / 1024.0
    );
    let mut ours = Vec::new();
    for method in ["ped-anova", "fanova"] {
        let args: Vec<&str> = ["importance"]
            .iter()
            .copied()
            .chain(base)
            .chain(["--method", method, "--format", "json"])
            .collect();
        let s = time_tune(&tune, &args, a.repeat)?;
        println!(
            "report bench: tune importance --method {method}: {s:.3} s (median of {}, the whole process)",
            a.repeat
        );
        ours.push(s);
    }
    if a.no_optuna {
        return Ok(ExitCode::SUCCESS);
    }
    let limit = Duration::from_secs(a.optuna_limit);
    for (method, tune_s) in [("ped-anova", ours[0]), ("fanova", ours[1])] {
        match time_optuna(&a.python, &db, method, a.optuna_repeat, limit) {
            Ok(OptunaTime::Done { seconds, version }) => println!(
                "report bench: Optuna {version} get_param_importances {method}: {seconds:.3} s (the call alone); tune/Optuna = {:.3}",
                tune_s / seconds
            ),
            Ok(OptunaTime::Stopped { limit }) => println!(
                "report bench: Optuna get_param_importances {method}: > {} s (stopped at --optuna-limit, the whole process); tune/Optuna < {:.4}",
                limit.as_secs(),
                tune_s / limit.as_secs_f64()
            ),
            Err(why) => {
                println!("report bench: Optuna skipped: {why}");
                break;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_study_has_every_state_and_its_curves() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let db = dir.path().join("b.db");
        write_study(&db, 46, 4).expect("the study is written");
        let s = SqliteStorage::open(&db).expect("opens");
        let study = s.study("bench").expect("the study");
        let trials = s.trials(&study, None).expect("trials");
        assert_eq!(trials.len(), 46);
        let count = |st| trials.iter().filter(|t| t.state() == st).count();
        use tune::trial::TrialState;
        assert_eq!(count(TrialState::Pruned), 9);
        assert_eq!(count(TrialState::Failed), 2);
        let reports = s.reports(&study).expect("reports");
        assert_eq!(reports.values().map(Vec::len).max(), Some(4));
    }
}
