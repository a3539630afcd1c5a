//! Several `tune run` processes on one database share a study: trial numbers are given out
//! once each, the budget holds across processes, and nobody sees "database is locked".

use std::collections::BTreeSet;
use std::process::Stdio;

use crate::common::{PATIENCE, Sandbox, assert_numbers_once, counted, sh_study, text, wait_output};

#[test]
fn two_tune_run_processes_share_a_study_without_a_lost_or_doubled_trial() {
    let sb = Sandbox::new();
    // The random sampler: this pins the orchestrator (numbers, budget, params stored), not
    // how far apart a model-based sampler spreads proposals of two processes.
    let study = sh_study("shared", 16, 2, "", &["{x}"])
        .replace("[workers]", "[sampler]\nkind = \"random\"\n\n[workers]");
    sb.write("s.toml", &study);
    sb.write("trial.sh", "sleep 0.2\necho \"tune: {\\\"loss\\\": $1}\"\n");
    // Both start on a database that does not exist yet: creating it is raced too.
    let spawn = || {
        sb.tune(&["run", "s.toml"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tune starts")
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (wait_output(a, PATIENCE), wait_output(b, PATIENCE));
    for out in [&a, &b] {
        assert!(out.status.success(), "{}", text(out));
        let all = text(out);
        assert!(!all.contains("locked") && !all.contains("busy"), "{all}");
    }
    let trials = sb.trials("s.toml");
    assert_eq!(trials.len(), 16, "{trials:#?}");
    assert_eq!(counted(&trials), 16);
    assert!(trials.iter().all(|t| t["state"] == "complete"));
    assert_numbers_once(&trials);
    let params: BTreeSet<String> = trials.iter().map(|t| t["params"].to_string()).collect();
    assert_eq!(params.len(), 16, "every trial has its own params");
    assert!(
        trials
            .iter()
            .all(|t| t["params"].as_object().is_some_and(|p| p.len() == 3))
    );
    // Both processes ran trials of the study.
    let workers: BTreeSet<i64> = sb
        .db("tune.db")
        .prepare("SELECT DISTINCT worker_id FROM tune_trials")
        .expect("query")
        .query_map([], |r| r.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(workers.len(), 2, "both processes ran trials");
    let started = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout)
            .matches(" started on ")
            .count()
    };
    assert_eq!(started(&a) + started(&b), 16, "{}\n{}", text(&a), text(&b));
}
