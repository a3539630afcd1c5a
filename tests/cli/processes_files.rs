//! Processes that must not outlive their trial or tune (issue 29, item 16).
//!
//! Every trial here leaves behind the three kinds of process that escape a plain process-group
//! kill or a parent-death signal: a daemon that calls `setsid()`, an orphan of a double fork,
//! and a child that ignores SIGTERM. Each writes its pid into `pids/`; the tests then end the
//! trial or tune in each way there is and check that none of them is left.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::{PATIENCE, Sandbox, sh_study, text, wait_until, wait_within};

/// The kinds of process each trial leaves behind, by the name of its pid file.
const KINDS: [&str; 4] = ["main", "setsid", "orphan", "deaf"];

/// A trial script that starts the three escapees, reports, then does `then`.
fn escaping_trial(then: &str) -> String {
    format!(
        r#"mkdir -p pids
T=$TUNE_TRIAL
setsid sh -c 'echo $$ > pids/'$T'-setsid.tmp; mv pids/'$T'-setsid.tmp pids/'$T'-setsid; exec sleep 300' &
( sh -c 'echo $$ > pids/'$T'-orphan.tmp; mv pids/'$T'-orphan.tmp pids/'$T'-orphan; exec sleep 300' & )
sh -c 'trap "" TERM; echo $$ > pids/'$T'-deaf.tmp; mv pids/'$T'-deaf.tmp pids/'$T'-deaf; while :; do sleep 1; done' &
echo $$ > pids/$T-main.tmp; mv pids/$T-main.tmp pids/$T-main
while [ ! -e pids/$T-setsid ] || [ ! -e pids/$T-orphan ] || [ ! -e pids/$T-deaf ]; do sleep 0.05; done
echo "tune: {{\"loss\": $1}}"
{then}
"#
    )
}

/// A study of `trials` such trials on one slot, with a short grace.
fn study(name: &str, trials: u64, extra_trial: &str) -> String {
    sh_study(name, trials, 1, "", &["{x}"]).replace(
        "kind = \"command\"",
        &format!("kind = \"command\"\ngrace = \"1s\"\n{extra_trial}"),
    )
}

/// The pids the trials wrote (every kind of every trial that started).
fn pids(sb: &Sandbox) -> Vec<(String, i32)> {
    let Ok(dir) = std::fs::read_dir(sb.join("pids")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                return None;
            }
            let pid = std::fs::read_to_string(e.path())
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some((name, pid))
        })
        .collect()
}

/// Whether `pid` is a live process (a zombie is not: it runs nothing and holds nothing).
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .unwrap_or("");
    state != "Z" && state != "X"
}

/// Waits until every kind of process of trial `n` has written its pid.
fn wait_for_escapees(sb: &Sandbox, n: u64) {
    wait_until(PATIENCE, "the trial's processes to start", || {
        let p = pids(sb);
        KINDS
            .iter()
            .all(|k| p.iter().any(|(name, _)| *name == format!("{n}-{k}")))
    });
}

/// Asserts that, within a few seconds, no process any trial started is alive; kills the
/// survivors either way so that a failing test leaves nothing behind.
fn assert_none_left(sb: &Sandbox, how: &str) {
    let all = pids(sb);
    assert!(
        !all.is_empty(),
        "no trial wrote its pids: nothing was tested"
    );
    let t0 = std::time::Instant::now();
    let mut left: Vec<(String, i32)> = all.clone();
    while t0.elapsed() < Duration::from_secs(5) {
        left.retain(|(_, p)| alive(*p));
        if left.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for (_, p) in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::SIGKILL);
    }
    panic!("after {how}, these processes of the trials were still running: {left:?}");
}

fn spawn(sb: &Sandbox, args: &[&str]) -> Child {
    sb.tune(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tune starts")
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    nix::sys::signal::kill(pid, sig).expect("signal tune");
}

#[test]
fn nothing_a_trial_started_outlives_the_trial_when_it_ends_on_its_own() {
    let sb = Sandbox::new();
    sb.write("s.toml", &study("own-end", 2, ""));
    sb.write("trial.sh", &escaping_trial("exit 0"));
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    let trials = sb.trials("s.toml");
    assert!(
        trials.iter().all(|t| t["state"] == "complete"),
        "the trials' own ends are unchanged: {trials:#?}\n{}",
        text(&out)
    );
    assert_eq!(pids(&sb).len(), 2 * KINDS.len(), "both trials ran");
    assert_none_left(&sb, "the end of the study");
}

#[test]
fn nothing_a_trial_started_outlives_a_kill_9_of_tune_run() {
    let sb = Sandbox::new();
    sb.write("s.toml", &study("killed", 3, ""));
    sb.write("trial.sh", &escaping_trial("sleep 300"));
    let mut child = spawn(&sb, &["run", "s.toml", "--no-tui"]);
    wait_for_escapees(&sb, 0);
    signal(&child, nix::sys::signal::SIGKILL);
    wait_within(&mut child, PATIENCE);
    assert_none_left(&sb, "kill -9 of `tune run`");
}

#[test]
fn nothing_a_trial_started_outlives_a_kill_9_of_tune_worker() {
    let sb = Sandbox::new();
    sb.write("s.toml", &study("joined", 3, ""));
    // Create the study without running a trial, then let a worker join it.
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    sb.ok(&[
        "--db",
        "t.db",
        "enqueue",
        "s.toml",
        "--params",
        "{\"x\": 0.5, \"k\": 2, \"c\": \"a\"}",
    ]);
    sb.write("trial.sh", &escaping_trial("sleep 300"));
    let mut child = spawn(
        &sb,
        &["--db", "t.db", "worker", "--study", "joined", "--no-tui"],
    );
    wait_for_escapees(&sb, 0);
    signal(&child, nix::sys::signal::SIGKILL);
    wait_within(&mut child, PATIENCE);
    assert_none_left(&sb, "kill -9 of `tune worker`");
}

#[test]
fn nothing_a_trial_started_outlives_two_ctrl_c_even_when_the_trial_ignores_sigterm() {
    let sb = Sandbox::new();
    sb.write("s.toml", &study("interrupted", 3, ""));
    sb.write(
        "trial.sh",
        &escaping_trial("trap '' TERM\nsleep 300 & wait; wait"),
    );
    let mut child = spawn(&sb, &["run", "s.toml", "--no-tui"]);
    wait_for_escapees(&sb, 0);
    signal(&child, nix::sys::signal::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    signal(&child, nix::sys::signal::SIGINT);
    let status = wait_within(&mut child, Duration::from_secs(20));
    assert!(status.code().is_some(), "tune ended on its own: {status:?}");
    assert_none_left(&sb, "two Ctrl-C");
}

#[test]
fn nothing_a_trial_started_outlives_its_timeout_even_when_it_ignores_sigterm() {
    let sb = Sandbox::new();
    sb.write("s.toml", &study("slow", 2, "timeout = \"1s\""));
    sb.write(
        "trial.sh",
        &escaping_trial("trap '' TERM\nsleep 300 & wait; wait"),
    );
    let out = sb.run(&["run", "s.toml", "--no-tui"]);
    let trials = sb.trials("s.toml");
    assert_eq!(trials.len(), 2, "{}", text(&out));
    for t in &trials {
        assert_eq!(t["state"], "failed", "{t:#}");
        assert!(
            t["error"].as_str().is_some_and(|e| e.contains("timed out")),
            "{t:#}"
        );
    }
    assert_none_left(&sb, "the trials' timeouts");
}

#[test]
fn a_program_that_cannot_start_still_says_so_in_the_trials_error() {
    let sb = Sandbox::new();
    // `check_ready` sees the program; it is gone when the trial starts.
    sb.write(
        "s.toml",
        &sh_study("vanishing", 1, 1, "", &[]).replace("\"sh\", ", "\"./prog.sh\", "),
    );
    let prog = sb.write("prog.sh", "#!/bin/sh\necho 'tune: {\"loss\": 1}'\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = sb.run(&["run", "s.toml", "--no-tui"]);
    let trials = sb.trials("s.toml");
    let err = trials
        .first()
        .and_then(|t| t["error"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        err.contains("cannot start `./prog.sh`") && err.contains("ermission denied"),
        "{err}\n{}",
        text(&out)
    );
}
