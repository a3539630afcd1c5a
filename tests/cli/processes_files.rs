//! Processes that must not outlive their trial or tune, and files that are not what they seem
//! (issue 29, items 16 and 17).
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

/// `tune show N` of `study` in `db`, as JSON.
fn show(sb: &Sandbox, db: &str, n: u64, study: &str) -> serde_json::Value {
    let out = sb.ok(&[
        "--db",
        db,
        "show",
        &n.to_string(),
        study,
        "--format",
        "json",
    ]);
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The stored log of trial `n` whose file name is `name`, read.
fn stored_log(sb: &Sandbox, db: &str, n: u64, study: &str, name: &str) -> String {
    let show = show(sb, db, n, study);
    let path = show["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .filter_map(|l| l.as_str())
        .find(|l| l.ends_with(name))
        .unwrap_or_else(|| panic!("no {name} among {show:#}"))
        .to_string();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn a_symlink_planted_where_a_trials_log_goes_is_never_followed() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("planted", 3, 1, "", &["{x}"]));
    sb.write(
        "trial.sh",
        "echo \"out of $TUNE_TRIAL\"; echo \"err of $TUNE_TRIAL\" >&2; echo \"tune: {\\\"loss\\\": $1}\"\n",
    );
    let victim = sb.write("victim.txt", "precious\n");
    let runs = sb.join("runs/planted");
    std::fs::create_dir_all(runs.join("trial-00000")).expect("mkdir");
    std::fs::create_dir_all(sb.join("elsewhere")).expect("mkdir");
    let link = |target: &Path, at: &Path| std::os::unix::fs::symlink(target, at).expect("symlink");
    // Every way of planting one: at stdout.log, at stderr.log (pointing nowhere yet), and the
    // trial's directory itself a link to a directory of someone else's.
    link(&victim, &runs.join("trial-00000/stdout.log"));
    link(
        &sb.join("created-by-tune.txt"),
        &runs.join("trial-00000/stderr.log"),
    );
    link(&sb.join("elsewhere"), &runs.join("trial-00001"));
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);

    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious\n",
        "{}",
        text(&out)
    );
    assert!(
        !sb.join("created-by-tune.txt").exists(),
        "a dangling link is not created through"
    );
    assert_eq!(
        std::fs::read_dir(sb.join("elsewhere"))
            .expect("dir")
            .count(),
        0,
        "nothing written there"
    );
    let trials = sb.trials("s.toml");
    assert!(
        trials.iter().all(|t| t["state"] == "complete"),
        "{trials:#?}"
    );
    for n in 0..3 {
        let dir = show(&sb, "tune.db", n, "s.toml")["trial_dir"]
            .as_str()
            .expect("trial_dir")
            .to_string();
        let meta = std::fs::symlink_metadata(&dir).expect("the trial directory");
        assert!(meta.is_dir(), "{dir} is a real directory, not a link");
        assert_eq!(
            stored_log(&sb, "tune.db", n, "s.toml", "stdout.log"),
            format!("out of {n}\n")
        );
        assert_eq!(
            stored_log(&sb, "tune.db", n, "s.toml", "stderr.log"),
            format!("err of {n}\n")
        );
    }
}

#[test]
fn one_study_file_run_against_two_databases_keeps_each_databases_logs() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("twice", 2, 1, "", &["{x}"]));
    for db in ["a.db", "b.db", "c.db"] {
        sb.write(
            "trial.sh",
            &format!("echo \"run of {db}\"\necho \"tune: {{\\\"loss\\\": $1}}\"\n"),
        );
        sb.ok(&["--db", db, "run", "s.toml", "--no-tui"]);
    }
    let mut dirs = std::collections::BTreeSet::new();
    for db in ["a.db", "b.db", "c.db"] {
        for n in 0..2 {
            assert_eq!(
                stored_log(&sb, db, n, "s.toml", "stdout.log"),
                format!("run of {db}\n")
            );
            let dir = show(&sb, db, n, "s.toml")["trial_dir"]
                .as_str()
                .expect("dir")
                .to_string();
            assert!(dirs.insert(dir.clone()), "{dir} is used twice");
        }
    }
    // A study deleted and run again keeps the old run's directories too.
    sb.ok(&["--db", "a.db", "delete", "s.toml", "--yes"]);
    sb.write(
        "trial.sh",
        "echo again\necho \"tune: {\\\"loss\\\": $1}\"\n",
    );
    sb.ok(&["--db", "a.db", "run", "s.toml", "--no-tui"]);
    assert_eq!(
        stored_log(&sb, "a.db", 0, "s.toml", "stdout.log"),
        "again\n"
    );
    assert_eq!(
        stored_log(&sb, "b.db", 0, "s.toml", "stdout.log"),
        "run of b.db\n"
    );
}

#[test]
fn a_study_name_longer_than_a_file_name_still_runs_its_trials() {
    for name in [
        "x".repeat(300),
        format!("{}/{}", "y".repeat(200), "z".repeat(200)),
        "é".repeat(200),
    ] {
        let sb = Sandbox::new();
        sb.write("s.toml", &sh_study(&name, 2, 1, "", &["{x}"]));
        sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
        let out = sb.ok(&["run", "s.toml", "--no-tui"]);
        let trials = sb.trials("s.toml");
        assert!(
            trials.len() == 2 && trials.iter().all(|t| t["state"] == "complete"),
            "{name}: {trials:#?}\n{}",
            text(&out)
        );
        for e in std::fs::read_dir(sb.join("runs")).expect("runs/").flatten() {
            assert!(e.file_name().len() <= 255, "{:?}", e.file_name());
        }
    }
}

/// Runs six slow trials on `t.db`, does `harm` to the file after two are complete, and
/// returns what tune printed and how it ended.
fn run_and_harm_the_database(harm: impl FnOnce(&Sandbox)) -> std::process::Output {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("doomed", 6, 1, "", &["{x}"]));
    sb.write("trial.sh", "sleep 0.3\necho \"tune: {\\\"loss\\\": $1}\"\n");
    let child = sb
        .tune(&["--db", "t.db", "run", "s.toml", "--no-tui"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts");
    wait_until(PATIENCE, "two complete trials", || {
        rusqlite::Connection::open_with_flags(
            sb.join("t.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .and_then(|db| {
            db.query_row(
                "SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'",
                [],
                |r| r.get::<_, i64>(0),
            )
        })
        .is_ok_and(|n| n >= 2)
    });
    harm(&sb);
    crate::common::wait_output(child, PATIENCE)
}

#[test]
fn a_database_deleted_or_replaced_during_a_run_ends_it_with_a_failure_that_says_so() {
    let deleted = run_and_harm_the_database(|sb| {
        for f in ["t.db", "t.db-wal", "t.db-shm"] {
            let _ = std::fs::remove_file(sb.join(f));
        }
    });
    let replaced = run_and_harm_the_database(|sb| {
        let other = sb.write("other.db", "");
        std::fs::rename(other, sb.join("t.db")).expect("rename over the database");
    });
    for (out, word) in [(deleted, "deleted"), (replaced, "replaced")] {
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let err = crate::common::stderr(&out);
        assert!(
            err.contains(&format!("t.db: the database file was {word}"))
                && err.contains("while this process had it open; nothing more is stored"),
            "{err}"
        );
        assert!(!text(&out).contains("budget is spent"), "{}", text(&out));
    }
}

#[test]
fn the_keeper_passes_on_the_trials_own_exit_status_and_signal() {
    let sb = Sandbox::new();
    sb.write("s.toml", &study("ends", 5, ""));
    sb.write(
        "trial.sh",
        r#"echo "tune: {\"loss\": $1}"
case $TUNE_TRIAL in
0) exit 3 ;;
1) echo "sh: nope: not found" >&2; exit 127 ;;
2) kill -SEGV $$ ;;
3) kill -KILL $$ ;;
4) kill -ABRT $$ ;;
esac
"#,
    );
    let out = sb.run(&["run", "s.toml", "--no-tui"]);
    let trials = sb.trials("s.toml");
    let error = |n: u64| {
        trials
            .iter()
            .find(|t| t["number"] == n)
            .and_then(|t| t["error"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    for (n, want) in [
        (0, "exited with status 3"),
        (1, "exited with status 127"),
        (2, "killed by SIGSEGV"),
        (3, "killed by SIGKILL"),
        (4, "killed by SIGABRT"),
    ] {
        assert_eq!(error(n), want, "trial {n}\n{}", text(&out));
    }
}

#[test]
fn a_keeper_killed_on_its_own_takes_its_trials_process_with_it_and_the_study_goes_on() {
    // The OOM killer or a stray kill -9 may hit the keeper alone: its trial's process must not
    // run on untethered (tune would wait on its pipes for as long as it ran).
    let sb = Sandbox::new();
    sb.write("s.toml", &study("keeperless", 2, ""));
    sb.write(
        "trial.sh",
        "echo $$ > main-$TUNE_TRIAL.tmp; mv main-$TUNE_TRIAL.tmp main-$TUNE_TRIAL\n\
         if [ \"$TUNE_TRIAL\" = 0 ]; then exec sleep 300; fi\n\
         echo \"tune: {\\\"loss\\\": $1}\"\n",
    );
    let mut child = sb
        .tune(&["run", "s.toml", "--no-tui"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts");
    wait_until(PATIENCE, "trial 0 to start", || sb.join("main-0").exists());
    let main: i32 = std::fs::read_to_string(sb.join("main-0"))
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    let stat = std::fs::read_to_string(format!("/proc/{main}/stat")).expect("the trial runs");
    let keeper: i32 = stat[stat.rfind(')').expect("a stat line") + 1..]
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("its parent");
    let cmdline = std::fs::read(format!("/proc/{keeper}/cmdline")).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("__keep-trial"),
        "the trial's parent is its keeper"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(keeper),
        nix::sys::signal::SIGKILL,
    )
    .expect("kill the keeper");
    wait_until(Duration::from_secs(5), "the trial's process to die", || {
        !alive(main)
    });
    let status = wait_within(&mut child, PATIENCE);
    assert_eq!(status.code(), Some(0), "the study goes on to its end");
    let trials = sb.trials("s.toml");
    let states: Vec<&str> = trials.iter().filter_map(|t| t["state"].as_str()).collect();
    assert_eq!(states, ["failed", "complete"], "{trials:#?}");
    assert!(
        trials[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("SIGKILL")),
        "{trials:#?}"
    );
}
