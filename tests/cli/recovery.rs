//! Crashes: a `tune run` killed with SIGKILL mid-study leaves running trials behind; the next
//! run marks them failed (interrupted), runs their params again, and ends with exactly the
//! budget, no number given twice.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::common::{
    PATIENCE, Sandbox, assert_numbers_once, counted, sh_study, states, text, wait_until,
    wait_within,
};

fn is_interrupted(t: &Value) -> bool {
    t["state"] == "failed"
        && t["error"]
            .as_str()
            .is_some_and(|e| e.contains("interrupted"))
}

#[test]
fn a_kill_9_mid_study_and_a_rerun_end_with_exactly_the_budget_and_no_number_twice() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("crash", 8, 2, "", &["{x}"]));
    sb.write("trial.sh", "sleep 0.4\necho \"tune: {\\\"loss\\\": $1}\"\n");

    let mut child = sb
        .tune(&["run", "s.toml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tune starts");
    wait_until(PATIENCE, "two complete trials", || {
        states(&sb).iter().filter(|(_, s)| s == "COMPLETE").count() >= 2
    });
    // Mid-trial, not in the instant between a trial's claim and the storing of its params.
    std::thread::sleep(Duration::from_millis(150));
    child.kill().expect("SIGKILL the orchestrator");
    wait_within(&mut child, PATIENCE);
    let running: Vec<u64> = states(&sb)
        .into_iter()
        .filter(|(_, s)| s == "RUNNING")
        .map(|(n, _)| n)
        .collect();
    assert!(
        !running.is_empty(),
        "the kill left no running trial: nothing was tested"
    );
    let before = sb.trials("s.toml");
    let params_of = |trials: &[Value], n: u64| -> Value {
        trials.iter().find(|t| t["number"] == n).expect("the trial")["params"].clone()
    };

    let out = sb.ok(&["run", "s.toml"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("recovered"),
        "{}",
        text(&out)
    );
    let after = sb.trials("s.toml");
    assert_eq!(counted(&after), 8, "exactly the budget: {after:#?}");
    assert_numbers_once(&after);
    assert!(
        after
            .iter()
            .all(|t| t["state"] != "running" && t["state"] != "queued")
    );
    // The interrupted trials are exactly those the kill left running; each failed as
    // interrupted, and its params ran again, completely, under a new number.
    let interrupted: Vec<u64> = after
        .iter()
        .filter(|t| is_interrupted(t))
        .map(|t| t["number"].as_u64().expect("number"))
        .collect();
    assert_eq!(interrupted, running);
    let complete_params: BTreeMap<String, u64> = after
        .iter()
        .filter(|t| t["state"] == "complete")
        .map(|t| {
            (
                t["params"].to_string(),
                t["number"].as_u64().expect("number"),
            )
        })
        .collect();
    for n in &running {
        let p = params_of(&before, *n);
        if p.as_object().is_some_and(|o| o.is_empty()) {
            // Killed between its claim and its params: it never ran, there is nothing to redo.
            continue;
        }
        let rerun = complete_params.get(&p.to_string());
        assert!(
            rerun.is_some_and(|r| r > n),
            "the params of interrupted trial {n} ran again: {p}"
        );
    }
    // Trials finished before the kill are untouched.
    for t in before.iter().filter(|t| t["state"] == "complete") {
        assert!(after.contains(t), "{t:#} changed");
    }
}

#[test]
fn trials_of_an_owner_on_another_host_are_recovered_once_its_heartbeat_is_stale() {
    let sb = Sandbox::new();
    let study = sh_study(
        "stale",
        3,
        1,
        "heartbeat = \"0.2s\"\nheartbeat_grace = \"1s\"",
        &["{x}"],
    );
    sb.write("s.toml", &study);
    sb.write("trial.sh", "sleep 0.3\necho \"tune: {\\\"loss\\\": $1}\"\n");
    let mut child = sb
        .tune(&["run", "s.toml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tune starts");
    wait_until(PATIENCE, "a complete trial", || {
        states(&sb).iter().any(|(_, s)| s == "COMPLETE")
    });
    std::thread::sleep(Duration::from_millis(100));
    child.kill().expect("SIGKILL the orchestrator");
    wait_within(&mut child, PATIENCE);
    // Pretend the dead process ran elsewhere: only its heartbeat can tell it is gone.
    sb.db("tune.db")
        .execute("UPDATE tune_workers SET host = 'another-host'", [])
        .expect("update");
    std::thread::sleep(Duration::from_millis(1200));
    sb.ok(&["run", "s.toml"]);
    let after = sb.trials("s.toml");
    assert_eq!(counted(&after), 3);
    assert_numbers_once(&after);
    let stale: Vec<&Value> = after.iter().filter(|t| is_interrupted(t)).collect();
    assert!(!stale.is_empty(), "{after:#?}");
    for t in stale {
        assert!(
            t["error"]
                .as_str()
                .unwrap_or_default()
                .contains("heartbeat"),
            "{t:#}"
        );
    }
}

#[test]
fn one_sigterm_stops_running_trials_as_interrupted_and_a_rerun_completes_the_budget() {
    let sb = Sandbox::new();
    let study = sh_study("stopped", 4, 2, "", &["{x}"])
        .replace("kind = \"command\"", "kind = \"command\"\ngrace = \"1s\"");
    sb.write("s.toml", &study);
    sb.write("trial.sh", "sleep 20\necho \"tune: {\\\"loss\\\": $1}\"\n");
    let mut child = sb
        .tune(&["run", "s.toml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tune starts");
    wait_until(PATIENCE, "two running trials", || {
        states(&sb).iter().filter(|(_, s)| s == "RUNNING").count() == 2
    });
    std::thread::sleep(Duration::from_millis(200));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    // A preemption: no new trials, the running ones stopped within the grace.
    let t0 = std::time::Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = wait_within(&mut child, Duration::from_secs(15));
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "stopped within the grace"
    );
    assert_eq!(status.code(), Some(75), "the preemption's exit status");

    let stopped = sb.trials("s.toml");
    let interrupted: Vec<&Value> = stopped.iter().filter(|t| is_interrupted(t)).collect();
    assert_eq!(interrupted.len(), 2, "{stopped:#?}");
    assert_eq!(
        counted(&stopped),
        0,
        "interrupted trials do not count toward the budget"
    );
    assert!(
        stopped.iter().filter(|t| t["state"] == "queued").count() == 2,
        "their params wait to run again: {stopped:#?}"
    );

    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    sb.ok(&["run", "s.toml"]);
    let after = sb.trials("s.toml");
    assert_eq!(counted(&after), 4);
    assert_numbers_once(&after);
    for t in interrupted {
        assert!(
            after
                .iter()
                .any(|u| u["state"] == "complete" && u["params"] == t["params"]),
            "the params of interrupted trial {} ran again",
            t["number"]
        );
    }
}
