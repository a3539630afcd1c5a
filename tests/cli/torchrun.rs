//! `[trial] launcher = "torchrun"`, for real: studies/ddp_regression.py trains a linear model
//! with DistributedDataParallel on two ranks (gloo on the CPU) in a slot that is a group of two
//! stand-in GPUs (`gpus_per_trial = 2`, `TUNE_TEST_CUDA_DEVICES`). Needs a Python that imports
//! torch: the project's `.venv` with the repository's own `.libtorch` tree (a PyPI torch wheel
//! unpacked, with the pure-Python dependencies and CUDA libraries of `.venv/bench`, which
//! `./scripts/setup.sh --bench` installs), or any `python3` with torch; skipped with a message
//! where there is none.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::common::{Sandbox, output_within, text};

/// The Python that imports torch and the environment it needs, or `None` (the test then
/// says why it is skipped).
fn torch_python() -> Option<(String, Vec<(String, String)>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = root.join(".venv/bin/python");
    let python = if venv.is_file() {
        venv.display().to_string()
    } else {
        "python3".to_string()
    };
    let mut env: Vec<(String, String)> = Vec::new();
    let tree = root.join(".libtorch");
    let bench = root.join(".venv/bench");
    if tree.join("torch/__init__.py").is_file() {
        let mut path = vec![tree.display().to_string()];
        if bench.is_dir() {
            path.push(bench.display().to_string());
        }
        env.push(("PYTHONPATH".into(), path.join(":")));
        // A CUDA wheel's torch/_C links the CUDA libraries even on a CPU.
        let mut libs: Vec<PathBuf> = Vec::new();
        for base in [bench.join("nvidia"), tree.join("nvidia")] {
            for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
                for lib in [e.path().join("lib"), e.path().join("cu13/lib")] {
                    if lib.is_dir() {
                        libs.push(lib);
                    }
                }
            }
        }
        libs.sort();
        let libs: Vec<String> = libs.iter().map(|p| p.display().to_string()).collect();
        env.push(("LD_LIBRARY_PATH".into(), libs.join(":")));
    }
    let probe = std::process::Command::new(&python)
        .args(["-c", "import torch, torch.distributed.run"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .ok()?;
    probe.status.success().then_some((python, env))
}

/// Runs a one-trial torchrun study of ddp_regression.py with `args` on two stand-in GPUs.
fn run_ddp(
    sb: &Sandbox,
    python: &str,
    env: &[(String, String)],
    args: &str,
    trial: &str,
) -> Output {
    run_ddp_study(sb, python, env, 1, args, trial)
}

/// Runs a torchrun study of `trials` trials of ddp_regression.py with `args` on two stand-in
/// GPUs (one slot: the trials run one after the other); `tail` ends the `[trial]` table and may
/// add tables of its own.
fn run_ddp_study(
    sb: &Sandbox,
    python: &str,
    env: &[(String, String)],
    trials: u32,
    args: &str,
    tail: &str,
) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("studies/ddp_regression.py");
    std::fs::copy(&script, sb.join("ddp_regression.py")).expect("copy the DDP script");
    let env_table: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k} = {v:?}"))
        .chain(std::iter::once("CUDA_VISIBLE_DEVICES = \"\"".to_string()))
        .collect();
    sb.write(
        "s.toml",
        &format!(
            r#"[study]
name = "ddp"
metric = "val_loss"
trials = {trials}
seed = 1

[space]
lr = {{ type = "float", low = 0.05, high = 0.1 }}

[workers]
devices = "auto"
gpus_per_trial = 2

[trial]
kind = "command"
launcher = "torchrun"
python = {python:?}
command = ["ddp_regression.py", "--lr", "{{lr}}", {args}]
env = {{ {} }}
{tail}
"#,
            env_table.join(", ")
        ),
    );
    let mut c = sb.tune(&["--db", "t.db", "run", "s.toml", "--no-tui"]);
    c.env("TUNE_TEST_CUDA_DEVICES", "2")
        .env_remove("CUDA_VISIBLE_DEVICES");
    output_within(c, Duration::from_secs(240))
}

fn show(sb: &Sandbox) -> serde_json::Value {
    show_trial(sb, 0)
}

fn show_trial(sb: &Sandbox, n: u64) -> serde_json::Value {
    let n = n.to_string();
    let out = sb.ok(&[
        "show", &n, "--db", "t.db", "--study", "ddp", "--format", "json",
    ]);
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Waits (up to 10 s, for the kernel to reap them) until none of `pids` runs; the ones left.
fn still_running(pids: &[i32]) -> Vec<i32> {
    let gone = |pid: &i32| !Path::new(&format!("/proc/{pid}")).exists();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !pids.iter().all(gone) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    pids.iter().copied().filter(|p| !gone(p)).collect()
}

/// The trial's directory (`trial_dir` of `tune show`), absolute.
fn trial_dir(sb: &Sandbox, trial: &serde_json::Value) -> PathBuf {
    let dir = PathBuf::from(trial["trial_dir"].as_str().expect("a trial directory"));
    if dir.is_absolute() {
        dir
    } else {
        sb.join(&dir.display().to_string())
    }
}

fn rank_pids(sb: &Sandbox, trial: &serde_json::Value) -> Vec<i32> {
    let dir = trial_dir(sb, trial);
    (0..2)
        .filter_map(|r| std::fs::read_to_string(dir.join(format!("rank-{r}.pid"))).ok())
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

macro_rules! torch_or_skip {
    () => {
        match torch_python() {
            Some(t) => t,
            None => {
                eprintln!(
                    "skipped: no Python here imports torch (./scripts/setup.sh --bench installs what .libtorch needs)"
                );
                return;
            }
        }
    };
}

#[test]
fn two_ranks_train_with_ddp_and_only_rank_0_reports() {
    let (python, env) = torch_or_skip!();
    let sb = Sandbox::new();
    let out = run_ddp(&sb, &python, &env, "\"--epochs\", \"3\"", "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let trial = show(&sb);
    assert_eq!(trial["state"], "complete", "{trial}");
    assert_eq!(trial["device"], "cuda:0,cuda:1", "{trial}");
    assert_eq!(rank_pids(&sb, &trial).len(), 2, "both ranks ran: {trial}");
    let reports = trial["reports"].as_array().expect("reports");
    assert_eq!(reports.len(), 3, "one report per epoch, rank 0's: {trial}");
    for r in reports {
        let v = r["metrics"]["val_loss"].as_f64().expect("val_loss");
        assert!(v < 1000.0, "rank 1's line was taken for a report: {trial}");
    }
    // Rank 1's output is logged, not lost.
    let dir = trial_dir(&sb, &trial);
    let logged = walk(&dir.join("ranks"))
        .into_iter()
        .filter(|p| p.ends_with("1/stdout.log"))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect::<String>();
    assert!(logged.contains("\"rank\": 1"), "rank 1's log: {logged:?}");
}

#[test]
fn a_rank_that_crashes_fails_the_trial_with_its_stderr() {
    let (python, env) = torch_or_skip!();
    let sb = Sandbox::new();
    let out = run_ddp(
        &sb,
        &python,
        &env,
        "\"--epochs\", \"3\", \"--crash-rank\", \"1\"",
        "",
    );
    assert!(out.status.code().is_some(), "{}", text(&out));
    let trial = show(&sb);
    assert_eq!(trial["state"], "failed", "{trial}");
    let tail = trial["log_tail"].as_str().unwrap_or_default();
    assert!(
        tail.contains("--- rank 1, the last lines of its stderr ---"),
        "{tail}"
    );
    assert!(
        tail.contains("rank 1 crashed on purpose after epoch 0"),
        "{tail}"
    );
}

#[test]
fn a_trial_stopped_by_its_timeout_leaves_no_rank_running() {
    let (python, env) = torch_or_skip!();
    let sb = Sandbox::new();
    let out = run_ddp(
        &sb,
        &python,
        &env,
        "\"--epochs\", \"5\", \"--sleep\", \"300\"",
        // Long enough for both ranks to import torch and start on a busy machine.
        "timeout = \"60s\"\ngrace = \"3s\"",
    );
    assert!(out.status.code().is_some(), "{}", text(&out));
    let trial = show(&sb);
    assert_eq!(trial["state"], "failed", "{trial}");
    let pids = rank_pids(&sb, &trial);
    assert_eq!(pids.len(), 2, "both ranks had started: {trial}");
    let left = still_running(&pids);
    assert!(left.is_empty(), "ranks still running: {left:?}");
}

/// A prune (not a timeout, not a crash) stops the whole group: both ranks end at once, and the
/// trial is recorded pruned at the step it was judged. Trial 0 (lr 0.1) sets the median; trial
/// 1 (lr 0.05, slower on the same data) is behind it after its first epoch.
#[test]
fn a_pruned_trial_stops_every_rank_at_once() {
    let (python, env) = torch_or_skip!();
    let sb = Sandbox::new();
    let out = run_ddp_study(
        &sb,
        &python,
        &env,
        2,
        // Six epochs of at least 2 s each: 12 s and more if nothing stops the ranks.
        "\"--epochs\", \"6\", \"--sleep\", \"2\"",
        "grace = \"3s\"\n\n[pruner]\nkind = \"median\"\nmin_trials = 1\n\n\
         [[enqueue]]\nlr = 0.1\n\n[[enqueue]]\nlr = 0.05\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let first = show_trial(&sb, 0);
    assert_eq!(first["state"], "complete", "{first}");
    assert_eq!(
        first["reports"].as_array().map(Vec::len),
        Some(6),
        "{first}"
    );
    let pruned = show_trial(&sb, 1);
    assert_eq!(pruned["state"], "pruned", "{pruned}");
    let reports = pruned["reports"].as_array().expect("reports").len();
    assert!(
        (1..=2).contains(&reports),
        "judged at its first report, so at most one more came: {pruned}"
    );
    let pids = rank_pids(&sb, &pruned);
    assert_eq!(pids.len(), 2, "both ranks had started: {pruned}");
    let left = still_running(&pids);
    assert!(left.is_empty(), "ranks still running: {left:?}");
    // Rank 1 stopped with rank 0: its log holds no more epochs than rank 0 reported.
    let rank1: usize = walk(&trial_dir(&sb, &pruned).join("ranks"))
        .into_iter()
        .filter(|p| p.ends_with("1/stdout.log"))
        .map(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("tune:"))
                .count()
        })
        .sum();
    assert!(
        (1..=reports).contains(&rank1),
        "rank 1 logged {rank1} epochs, rank 0 reported {reports}: {pruned}"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
