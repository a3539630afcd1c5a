//! Builtin studies through the real CLI (`tune run`): a worker killed mid-trial fails that
//! trial with its cause, and the study goes on to finish its budget.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{resume_study, run_study, tune_bin, tune_json};

/// The pids of the children of `pid` (Linux: /proc/PID/task/*/children).
fn children(pid: u32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    out
}

#[test]
fn a_killed_worker_fails_its_trial_and_the_study_goes_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let study = dir.path().join("crash.toml");
    std::fs::write(
        &study,
        r#"
[study]
name = "crash"
metric = "val_loss"
trials = 3
seed = 1

[space]
lr = { type = "float", low = 1e-3, high = 1e-2, log = true }

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "builtin"
time_budget = "3s"
report_every = 5
batch_size = 32

[trial.model]
kind = "mlp"
width = 16
depth = 1

[trial.data]
dataset = "digits"
"#,
    )
    .expect("write study");
    let tune = Command::new(tune_bin())
        .args(["--db"])
        .arg(dir.path().join("t.db"))
        .args(["run", "--no-tui"])
        .arg(&study)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune runs");
    // Kill the first worker as soon as it exists.
    let start = Instant::now();
    let mut killed = false;
    while start.elapsed() < Duration::from_secs(20) && !killed {
        for pid in children(tune.id()) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains("worker") {
                std::thread::sleep(Duration::from_millis(500));
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                killed = true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(killed, "no worker process appeared");
    let out = tune.wait_with_output().expect("tune ends");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("worker killed by signal 9"),
        "the killed trial names its cause:\n{text}"
    );
    assert!(text.contains("study finished"), "{text}");
    assert_eq!(
        text.matches(" complete in ").count(),
        2,
        "the other two trials complete:\n{text}"
    );
    assert!(Path::new(&dir.path().join("t.db")).exists());
}

#[test]
fn the_worker_says_whether_it_was_built_with_cuda() {
    let out = Command::new(env!("CARGO_BIN_EXE_tune-worker"))
        .arg("--capabilities")
        .output()
        .expect("tune-worker runs");
    assert!(out.status.success(), "{out:?}");
    let caps: tune::runner::protocol::Capabilities =
        serde_json::from_slice(&out.stdout).expect("one JSON line of capabilities");
    assert_eq!(caps.cuda, cfg!(feature = "cuda"));
    if !caps.cuda {
        assert_eq!(caps.cuda_devices, 0);
    }
}

#[test]
fn a_builtin_study_on_cuda_with_this_cpu_worker_is_refused_before_any_trial() {
    if cfg!(feature = "cuda") {
        // A CUDA build may train there: this refusal is for the CPU build.
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let study = dir.path().join("gpu.toml");
    std::fs::write(
        &study,
        "[study]\nname = \"gpu\"\nmetric = \"val_loss\"\ntrials = 2\n\n[space]\nlr = { type = \"float\", low = 1e-3, high = 1e-2, log = true }\n\n[workers]\ndevices = [\"cuda:0\"]\n\n[trial]\nkind = \"builtin\"\nepochs = 1\n\n[trial.model]\nkind = \"mlp\"\n\n[trial.data]\ndataset = \"digits\"\n",
    )
    .expect("write study");
    let out = Command::new(tune_bin())
        .arg("--db")
        .arg(dir.path().join("t.db"))
        .args(["run", "--no-tui"])
        .arg(&study)
        .stdin(Stdio::null())
        .output()
        .expect("tune runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("./scripts/setup.sh --cuda"), "{err}");
    assert!(!dir.path().join("t.db").exists(), "no trial started");
}

#[test]
fn tune_worker_links_libtorch_cuda_exactly_when_built_with_cuda() {
    // The counterpart of tune's test that `tune` names no libtorch: the same search finds
    // the worker's libraries, so a `tune` that linked them would be caught.
    let bytes = std::fs::read(env!("CARGO_BIN_EXE_tune-worker")).expect("read tune-worker");
    let names = |lib: &str| bytes.windows(lib.len()).any(|w| w == lib.as_bytes());
    assert!(names("libtorch_cpu.so"));
    assert_eq!(names("libtorch_cuda.so"), cfg!(feature = "cuda"));
}

/// The README's builtin examples, each copied alone to a directory of its own and run through
/// `tune run` with a budget cut to two short trials: they need no file beside them (their data
/// is built into the trainer, or installed by `scripts/setup.sh`), so they run wherever a user
/// copies them.
#[test]
fn every_builtin_example_study_runs_when_copied_alone_to_another_directory() {
    let studies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../studies");
    let mut ran = Vec::new();
    for entry in std::fs::read_dir(&studies).expect("studies/") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable");
        let mut doc: toml::Table = toml::from_str(&text).expect("TOML");
        let trial = doc.get_mut("trial").and_then(|t| t.as_table_mut());
        let Some(trial) =
            trial.filter(|t| t.get("kind").and_then(|k| k.as_str()) == Some("builtin"))
        else {
            continue;
        };
        if text.contains("fashion-mnist") && !Path::new(tune::builtin::FASHION_MNIST_DIR).exists() {
            panic!(
                "{}: needs {} (scripts/setup.sh installs it)",
                path.display(),
                tune::builtin::FASHION_MNIST_DIR
            );
        }
        // Two short trials: one epoch (or three seconds), a slice of a large dataset.
        if trial.contains_key("epochs") {
            trial.insert("epochs".into(), toml::Value::Integer(1));
        }
        if trial.contains_key("time_budget") {
            trial.insert("time_budget".into(), toml::Value::String("3s".into()));
        }
        if let Some(data) = trial.get_mut("data").and_then(|d| d.as_table_mut())
            && data.get("dataset").and_then(|d| d.as_str()) == Some("fashion-mnist")
        {
            data.insert("limit".into(), toml::Value::Integer(2000));
        }
        let study = doc
            .get_mut("study")
            .and_then(|s| s.as_table_mut())
            .expect("[study]");
        study.insert("trials".into(), toml::Value::Integer(2));
        study.remove("storage");
        let dir = tempfile::tempdir().expect("temp dir");
        let name = path.file_name().expect("a name");
        let copy = dir.path().join(name);
        std::fs::write(&copy, toml::to_string(&doc).expect("TOML")).expect("write the copy");
        let out = Command::new(tune_bin())
            .args(["run", "--no-tui"])
            .arg(&copy)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("tune runs");
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        let listed = Command::new(tune_bin())
            .args(["trials", "--format", "json"])
            .arg(&copy)
            .output()
            .expect("tune trials runs");
        let trials: Vec<serde_json::Value> =
            serde_json::from_slice(&listed.stdout).expect("the trials as JSON");
        assert_eq!(trials.len(), 2, "{}: {said}", path.display());
        // A trial may diverge (the space reaches high learning rates); nothing else may fail.
        for t in &trials {
            let diverged = t["error"].as_str().is_some_and(|e| e.contains("diverged"));
            assert!(
                t["state"] == "complete" || diverged,
                "{}: trial {} ended {}: {said}",
                path.display(),
                t["number"],
                t["state"]
            );
        }
        ran.push(name.to_string_lossy().into_owned());
    }
    assert!(ran.len() >= 4, "the builtin examples: {ran:?}");
}

/// The epochs of a trial's reports, in order (`tune show N --format json`).
fn report_epochs(db: &Path, study: &Path, n: u64) -> Vec<f64> {
    let shown = tune_json(
        db,
        &[
            "show",
            &n.to_string(),
            study.to_str().expect("utf-8 path"),
            "--format",
            "json",
        ],
    );
    shown["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .filter_map(|r| r["metrics"]["epoch"].as_f64())
        .collect()
}

/// Issue 27: a builtin trial cut off by a `kill -9` of tune in epoch 3 of 6 runs again (the
/// next `tune run`) as its attempt 2, which resumes from the checkpoint the trainer saved at an
/// epoch's end, not from scratch, and ends exactly where an uninterrupted run ends.
#[test]
fn a_builtin_trial_cut_off_by_a_kill_9_resumes_from_its_checkpoint_and_ends_as_if_never_cut() {
    cut_and_resume(nix::sys::signal::Signal::SIGKILL);
}

/// Issue 27: SIGTERM (a preemption) has the trial checkpoint where it stands (mid-epoch) before
/// it stops; tune exits 75, and the next run loses nothing: its first report is the epoch that
/// was in progress, and it ends exactly where an uninterrupted run ends.
#[test]
fn a_builtin_trial_preempted_by_sigterm_checkpoints_first_and_its_rerun_loses_nothing() {
    cut_and_resume(nix::sys::signal::Signal::SIGTERM);
}

fn cut_and_resume(sig: nix::sys::signal::Signal) {
    let preempt = sig == nix::sys::signal::Signal::SIGTERM;
    let dir = tempfile::tempdir().expect("temp dir");
    let text = resume_study("");
    // The reference: the same study (same name and seed: the same params and draws), never cut.
    let (ref_dir, cut_dir) = (dir.path().join("ref"), dir.path().join("cut"));
    for d in [&ref_dir, &cut_dir] {
        std::fs::create_dir_all(d).expect("mkdir");
        std::fs::write(d.join("study.toml"), &text).expect("write study");
    }
    let run = |d: &Path| {
        Command::new(tune_bin())
            .arg("--db")
            .arg(d.join("t.db"))
            .args(["run", "--no-tui"])
            .arg(d.join("study.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tune runs")
    };
    assert!(run(&ref_dir).wait().expect("tune ends").success());
    let (ref_db, cut_db) = (ref_dir.join("t.db"), cut_dir.join("t.db"));
    let (ref_study, cut_study) = (ref_dir.join("study.toml"), cut_dir.join("study.toml"));
    let reference = tune_json(
        &ref_db,
        &["trials", ref_study.to_str().unwrap(), "--format", "json"],
    );
    let ref_value = reference[0]["value"]
        .as_f64()
        .expect("the reference completed");
    assert_eq!(
        report_epochs(&ref_db, &ref_study, 0),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );

    let mut tune = run(&cut_dir);
    let start = Instant::now();
    let mut killed_at = None;
    while start.elapsed() < Duration::from_secs(120) && killed_at.is_none() {
        std::thread::sleep(Duration::from_millis(20));
        let Ok(out) = Command::new(tune_bin())
            .arg("--db")
            .arg(&cut_db)
            .args([
                "trials",
                cut_study.to_str().unwrap(),
                "--state",
                "running",
                "--format",
                "json",
            ])
            .output()
        else {
            continue;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
            continue;
        };
        if let Some(e) = v[0]["metrics"]["epoch"].as_f64().filter(|e| *e >= 3.0) {
            // Into the next epoch, past its start.
            std::thread::sleep(Duration::from_millis(150));
            let pid = nix::unistd::Pid::from_raw(i32::try_from(tune.id()).expect("a pid"));
            nix::sys::signal::kill(pid, sig).expect("signal tune");
            killed_at = Some(e);
        }
    }
    let killed_at = killed_at.expect("trial 0 reached epoch 3 while tune ran");
    let status = tune.wait().expect("tune is gone");
    if preempt {
        assert_eq!(status.code(), Some(75), "a preemption's exit status");
    }
    assert!(
        killed_at < 6.0,
        "killed mid-trial, not at its end: {killed_at}"
    );
    // The keeper takes the worker down with tune.
    std::thread::sleep(Duration::from_millis(500));

    assert!(run(&cut_dir).wait().expect("tune ends").success());
    let trials = tune_json(
        &cut_db,
        &["trials", cut_study.to_str().unwrap(), "--format", "json"],
    );
    let trials = trials.as_array().expect("trials");
    let rerun = trials
        .iter()
        .find(|t| t["state"] == "complete")
        .unwrap_or_else(|| panic!("the re-run completed: {trials:#?}"));
    let n = rerun["number"].as_u64().expect("number");
    assert_ne!(n, 0, "trial 0 was cut off: {trials:#?}");
    assert_eq!(rerun["params"], reference[0]["params"], "the same params");
    let shown = tune_json(
        &cut_db,
        &[
            "show",
            &n.to_string(),
            cut_study.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_eq!(
        (shown["attempt"].as_u64(), shown["retry_of"].as_u64()),
        (Some(2), Some(0))
    );
    let before = report_epochs(&cut_db, &cut_study, 0);
    let after = report_epochs(&cut_db, &cut_study, n);
    // The re-run's curve is whole: attempt 1's reports before the re-run's own first one (the
    // worker's checkpoint messages said the trial checkpoints), then its own, every epoch once.
    assert_eq!(
        after,
        (1..=6).map(f64::from).collect::<Vec<_>>(),
        "before the cut {before:?}"
    );
    // It resumed from the checkpoint, not from scratch: the re-run's worker says where.
    let log = common::worker_log(&shown);
    let line = log
        .lines()
        .find(|l| l.contains("resumed from the checkpoint at step"))
        .unwrap_or_else(|| panic!("resumed, not restarted: {log}"));
    if preempt {
        // The checkpoint was taken where the trial stood when preempted, inside an epoch.
        assert!(!line.contains(", step 0 of it)"), "mid-epoch: {line}");
    }
    assert!(after.windows(2).all(|w| w[1] == w[0] + 1.0), "{after:?}");
    assert_eq!(
        rerun["value"].as_f64(),
        Some(ref_value),
        "bit for bit on the CPU: the uninterrupted run ends at {ref_value}"
    );
}

/// Issue 27: promotion-based ASHA on the builtin trainer. On one slot, trial 0 (`lr = 1e-2`)
/// leads the first rung (epoch 1), trial 1 (`2e-4`) comes 2nd of 2 and pauses there, saving
/// its checkpoint; trials 2 to 5 (`1e-5` and about: they barely learn in an epoch) pause
/// below it. At 6 trials the top 2 go on, so trial 1 is promoted: its params run again as
/// attempt 2, which resumes from the checkpoint it paused with and carries its curve on, every
/// epoch once.
#[test]
fn a_builtin_trial_paused_at_a_rung_is_promoted_and_resumes_from_its_checkpoint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let study = dir.path().join("promote.toml");
    let mut text = String::from(
        r#"
[study]
name = "promote"
metric = "val_loss"
trials = 8
seed = 5

[space]
lr = { type = "float", low = 1e-5, high = 1e-1, log = true }

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "builtin"
epochs = 4
batch_size = 32
optimizer = "adam"
keep_last = 2

[trial.model]
kind = "mlp"
width = 64
depth = 1

[trial.data]
dataset = "digits"

[pruner]
kind = "asha"
mode = "promote"
resource = "epoch"
"#,
    );
    for lr in ["1e-2", "2e-4", "1e-5", "1.1e-5", "1.2e-5", "1.3e-5"] {
        text.push_str(&format!("\n[[enqueue]]\nlr = {lr}\n"));
    }
    std::fs::write(&study, text).expect("write study");
    let db = dir.path().join("t.db");
    let log = run_study(&db, &study);
    let study_s = study.to_str().expect("utf-8 path");
    let trials = tune_json(&db, &["trials", study_s, "--format", "json"]);
    let trials = trials.as_array().expect("an array");
    let first = trials.iter().find(|t| t["number"] == 1).expect("trial 1");
    let why = first["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("paused, then promoted (rung 0: 2nd of 6 trials there, in the top 1/3)"),
        "{first}\n{log}"
    );
    for n in 2..=5 {
        let t = trials.iter().find(|t| t["number"] == n).expect("a trial");
        assert_eq!(
            (&t["state"], &t["paused"]),
            (&"pruned".into(), &true.into()),
            "{t}"
        );
    }
    let rerun = trials
        .iter()
        .find(|t| t["number"] != 1 && t["params"] == first["params"])
        .expect("trial 1's params ran again");
    let n = rerun["number"].as_u64().expect("a number");
    let shown = tune_json(&db, &["show", &n.to_string(), study_s, "--format", "json"]);
    assert_eq!(
        (shown["attempt"].as_u64(), shown["retry_of"].as_u64()),
        (Some(2), Some(1))
    );
    let epochs = report_epochs(&db, &study, n);
    assert_eq!(epochs.first(), Some(&1.0), "{epochs:?}");
    assert!(
        epochs.len() >= 2,
        "it ran past the rung it paused at: {epochs:?}"
    );
    assert!(epochs.windows(2).all(|w| w[1] == w[0] + 1.0), "{epochs:?}");
    let worker = common::worker_log(&shown);
    assert!(
        worker.contains("resumed from the checkpoint at step"),
        "resumed, not restarted: {worker}"
    );
    // A paused trial keeps its checkpoints, `keep_last = 2` of them at most besides the
    // latest and the best.
    let paused = tune_json(&db, &["show", "3", study_s, "--format", "json"]);
    let run_dir = paused["trial_dir"].as_str().expect("a run directory");
    let names: Vec<String> = std::fs::read_dir(Path::new(run_dir).join("checkpoints"))
        .expect("its checkpoints stay while it is paused")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let kept = names.iter().filter(|n| n.starts_with("step-")).count();
    assert!(names.iter().any(|n| n == "latest.snap"), "{names:?}");
    assert!((1..=2).contains(&kept), "{names:?}");
    // Deleting the study removes the checkpoints its paused trials kept.
    let out = Command::new(tune_bin())
        .arg("--db")
        .arg(&db)
        .args(["delete", study_s, "--yes"])
        .output()
        .expect("tune delete runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("of its trials' checkpoints"), "{said}");
    assert!(!Path::new(run_dir).join("checkpoints").exists(), "{said}");
}
