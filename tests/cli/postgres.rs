//! The real binary against a real PostgreSQL server (an ephemeral one per test run, from
//! `tune::storage::test_server`): Optuna reads what `tune` stored there, `tune copy` moves a
//! study to the server and back unchanged, bad URLs and unusable servers are refused with a
//! message and the documented status (never showing the password), and a study keeps going
//! through a server restart. Without PostgreSQL 15 each test says "skipped:", unless
//! `TUNE_REQUIRE_PG=1` (or CI) makes that a failure.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The library's ephemeral server, compiled into this test binary: in the library it exists
/// only under `cfg(test)` or the `fixtures` feature, which an integration test does not get.
#[allow(dead_code)]
#[path = "../../src/storage/test_server.rs"]
pub(crate) mod test_server;

use test_server::{PASSWORD, PgServer};

use crate::common::{
    PATIENCE, Sandbox, assert_numbers_once, counted, output_within, sh_study, text, wait_output,
    wait_until,
};

/// A trial with intermediate reports at steps 0 and 1, a final value apart from them in trial
/// 1, and a failure after a report in trial 2.
const REPORTING_SCRIPT: &str = r#"echo "tune: {\"step\": 0, \"loss\": -5.5, \"acc\": 0.5}"
echo "tune: {\"step\": 1, \"loss\": $2}"
[ "$TUNE_TRIAL" = 2 ] && { echo "diverged" >&2; exit 7; }
echo "tune: {\"step\": 2, \"loss\": $1}"
[ "$TUNE_TRIAL" = 1 ] && echo 'tune: {"final": true, "loss": 0.0625}'
exit 0
"#;

/// The database's name, the last part of its URL.
fn db_name(url: &str) -> &str {
    url.rsplit('/').next().expect("a URL with a path")
}

/// Asserts the exit status, and that no password (the server's, or `also`) was printed.
fn assert_refused(out: &Output, code: i32, also: &str) -> String {
    let all = text(out);
    assert_eq!(out.status.code(), Some(code), "{all}");
    assert!(!all.contains(PASSWORD), "the password was printed:\n{all}");
    assert!(
        also.is_empty() || !all.contains(also),
        "the password was printed:\n{all}"
    );
    all
}

/// `tune ARGS` printing JSON, parsed.
fn json(sb: &Sandbox, args: &[&str]) -> Value {
    let out = sb.ok(args);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

#[test]
fn optuna_loads_a_study_that_tune_stored_on_postgresql() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let python = crate::optuna_compat::python_after_setup(&["--python-tests", "--postgres"]);
    let sb = Sandbox::new();
    let study = sh_study(
        "pg-compat",
        4,
        2,
        "direction = \"maximize\"",
        &["{x}", "{k}"],
    );
    sb.write("s.toml", &study);
    sb.write("trial.sh", REPORTING_SCRIPT);
    sb.ok(&["run", "s.toml", "--db", &url, "--no-tui"]);

    let storage = url.replacen("postgresql://", "postgresql+psycopg2://", 1);
    let mut dump = Command::new(&python);
    dump.arg("-c")
        .arg(crate::optuna_compat::DUMP)
        .arg(&storage)
        .arg("pg-compat")
        .current_dir(sb.path())
        .stdin(Stdio::null());
    let out = output_within(dump, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "Optuna could not load the study from PostgreSQL:\n{}",
        text(&out)
    );
    let optuna: Value = serde_json::from_slice(&out.stdout).expect("the dump is JSON");
    assert_eq!(optuna["summaries"], serde_json::json!(["pg-compat"]));
    assert_eq!(optuna["pg-compat"]["direction"], "MAXIMIZE");
    crate::optuna_compat::assert_same(
        &sb,
        &url,
        "pg-compat",
        &optuna["pg-compat"],
        &[
            ("x", "FloatDistribution"),
            ("k", "IntDistribution"),
            ("c", "CategoricalDistribution"),
        ],
    );
    let trials = optuna["pg-compat"]["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 4);
    assert_eq!(trials[1]["values"], serde_json::json!([0.0625]));
    assert_eq!(trials[1]["intermediate"].as_array().map(Vec::len), Some(3));
    assert_eq!(trials[2]["state"], "FAIL");
    assert_eq!(trials[2]["intermediate"].as_array().map(Vec::len), Some(2));
    drop(server);
}

/// Every view of a study a script reads: its trials, each trial whole, the best one.
fn snapshot(sb: &Sandbox, db: &str, study: &str) -> Value {
    let trials = json(
        sb,
        &["trials", "--db", db, "--study", study, "--format", "json"],
    );
    let shows: Vec<Value> = trials
        .as_array()
        .expect("an array")
        .iter()
        .map(|t| {
            let n = t["number"].to_string();
            json(
                sb,
                &["show", &n, "--db", db, "--study", study, "--format", "json"],
            )
        })
        .collect();
    let best = json(
        sb,
        &["best", "--db", db, "--study", study, "--format", "json"],
    );
    serde_json::json!({"trials": trials, "shows": shows, "best": best})
}

#[test]
fn a_study_copied_to_postgresql_and_back_is_unchanged() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("moving", 4, 2, "", &["{x}", "{k}"]));
    sb.write("trial.sh", REPORTING_SCRIPT);
    sb.ok(&["run", "s.toml", "--no-tui"]);
    // A second study in the same file, which `--study moving` must leave behind.
    sb.write(
        "other.toml",
        &sh_study("staying", 1, 1, "", &["{x}", "{k}"]),
    );
    sb.ok(&["run", "other.toml", "--no-tui"]);
    // Trial 0's GPU telemetry, as a run on a GPU stores it (this machine has none): it moves
    // with the trial.
    sb.db("tune.db")
        .execute(
            "UPDATE tune_trials SET gpu_peak_mem_mb = 6348.8, gpu_mem_scope = 'device',
                gpu_mean_sm_pct = 55.5, gpu_mean_mem_bw_pct = 20.25, gpu_samples = 4
             WHERE trial_id = (SELECT t.trial_id FROM trials t JOIN studies s USING (study_id)
                               WHERE s.study_name = 'moving' AND t.number = 0)",
            [],
        )
        .expect("trial 0's telemetry");
    let before = snapshot(&sb, "tune.db", "moving");
    assert_eq!(before["trials"].as_array().map(Vec::len), Some(4));
    assert_eq!(before["trials"][0]["gpu"]["mem_scope"], "device");

    let out = sb.ok(&[
        "copy", "--from", "tune.db", "--to", &url, "--study", "moving",
    ]);
    assert!(!text(&out).contains(PASSWORD), "{}", text(&out));
    assert_eq!(snapshot(&sb, &url, "moving"), before, "on the server");
    let out = sb.ok(&[
        "copy", "--from", &url, "--to", "back.db", "--study", "moving",
    ]);
    assert!(!text(&out).contains(PASSWORD), "{}", text(&out));
    assert_eq!(snapshot(&sb, "back.db", "moving"), before, "back in SQLite");

    let studies = |db: &str| -> Vec<String> {
        json(&sb, &["studies", "--db", db, "--format", "json"])
            .as_array()
            .expect("an array")
            .iter()
            .map(|s| s["name"].as_str().expect("a name").to_string())
            .collect()
    };
    assert_eq!(studies(&url), ["moving"]);
    assert_eq!(studies("back.db"), ["moving"]);
    // Copying it again is refused (bad input): the study is already there.
    let out = sb.run(&[
        "copy", "--from", "tune.db", "--to", &url, "--study", "moving",
    ]);
    assert_refused(&out, 2, "");
    drop(server);
}

#[test]
fn a_url_that_is_refused_exits_2_before_anything_is_written() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("refused", 2, 1, "", &["{x}", "{k}"]));
    sb.write("trial.sh", REPORTING_SCRIPT);
    for bad in [
        format!("{url}?sslmode=sometimes"),
        format!("{url}?colour=blue"),
        url.replacen("postgresql://", "mysql://", 1),
        url.replacen(&format!("/{}", db_name(&url)), "/", 1),
    ] {
        let out = sb.run(&["run", "s.toml", "--db", &bad, "--no-tui"]);
        let all = assert_refused(&out, 2, "");
        assert!(all.contains("storage") || all.contains("--db"), "{all}");
    }
    let tables = server
        .psql(
            db_name(&url),
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
        )
        .expect("psql");
    assert_eq!(tables.trim(), "0", "nothing was created on the server");
    assert!(!sb.join("tune.db").exists(), "no SQLite file either");
    assert!(!sb.join("runs").exists(), "no trial ran");
}

#[test]
fn an_unreachable_server_exits_1_with_its_address_and_no_password() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("far", 2, 1, "", &["{x}", "{k}"]));
    sb.write("trial.sh", REPORTING_SCRIPT);
    // A port nobody listens on: connection refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgresql://tune:far-away-secret@127.0.0.1:{port}/tune");
    let t0 = Instant::now();
    let out = sb.run(&["run", "s.toml", "--db", &url, "--no-tui"]);
    let all = assert_refused(&out, 1, "far-away-secret");
    assert!(
        all.contains("cannot reach") && all.contains(&format!("127.0.0.1:{port}")),
        "{all}"
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "told at once");
    let out = sb.run(&["trials", "--db", &url, "--study", "far"]);
    assert_refused(&out, 1, "far-away-secret");
}

#[test]
fn a_server_that_refuses_the_connection_is_bad_input_with_a_clear_message() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("refusing", 2, 1, "", &["{x}", "{k}"]));
    sb.write("trial.sh", REPORTING_SCRIPT);
    let run = |db: &str| sb.run(&["run", "s.toml", "--db", db, "--no-tui"]);

    let wrong = url.replacen(PASSWORD, "not-the-pw-4711", 1);
    let all = assert_refused(&run(&wrong), 2, "not-the-pw-4711");
    assert!(all.contains("password authentication failed"), "{all}");

    let missing = url.replacen(db_name(&url), "no_such_db", 1);
    let all = assert_refused(&run(&missing), 2, "");
    assert!(all.contains("`no_such_db` does not exist"), "{all}");

    // The test server has no certificate: TLS asked for and not offered.
    let all = assert_refused(&run(&format!("{url}?sslmode=require")), 2, "");
    assert!(all.contains("does not offer TLS"), "{all}");
    assert!(all.contains("sslmode=require"), "{all}");
    // `prefer` (the default) goes on without TLS.
    sb.ok(&[
        "run",
        "s.toml",
        "--db",
        &format!("{url}?sslmode=prefer"),
        "--no-tui",
    ]);
    drop(server);
}

#[test]
fn a_worker_for_a_study_that_never_appears_waits_its_wait_then_exits_2() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    let t0 = Instant::now();
    let out = sb.run(&[
        "worker", "--db", &url, "--study", "missing", "--wait", "2s", "--no-tui",
    ]);
    let waited = t0.elapsed();
    let all = assert_refused(&out, 2, "");
    assert!(all.contains("no study named `missing`"), "{all}");
    assert!(all.contains("waiting for study `missing`"), "{all}");
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(20),
        "waited {waited:?}"
    );
    drop(server);
}

#[test]
fn readers_racing_the_first_run_on_a_fresh_database_wait_for_its_schema() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("pg-race", 2, 1, "", &["{x}", "{k}"]));
    sb.write("trial.sh", "sleep 0.3\necho 'tune: {\"loss\": 1}'\n");
    let run = sb
        .tune(&["run", "s.toml", "--db", &url, "--no-tui"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts");
    // Reading while the run creates the schema: each read waits for it, none says there is
    // no schema.
    let t0 = Instant::now();
    loop {
        let out = sb.run(&["studies", "--db", &url, "--format", "json"]);
        assert!(out.status.success(), "{}", text(&out));
        let list: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        if list.as_array().is_some_and(|l| !l.is_empty()) || t0.elapsed() > PATIENCE {
            break;
        }
    }
    let run = wait_output(run, PATIENCE);
    assert!(run.status.success(), "{}", text(&run));
    drop(server);
}

#[test]
fn a_database_with_a_newer_schema_is_refused() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("future", 1, 1, "", &["{x}", "{k}"]));
    sb.write("trial.sh", REPORTING_SCRIPT);
    sb.ok(&["run", "s.toml", "--db", &url, "--no-tui"]);
    server
        .psql(
            db_name(&url),
            "UPDATE tune_schema_version SET version = version + 1",
        )
        .expect("psql");
    for args in [
        vec!["run", "s.toml", "--db", &url, "--no-tui"],
        vec!["trials", "--db", &url, "--study", "future"],
        vec!["worker", "--db", &url, "--study", "future", "--no-tui"],
    ] {
        let all = assert_refused(&sb.run(&args), 2, "");
        assert!(all.contains("newer than this tune knows"), "{all}");
    }
    // Nothing ran: the one trial of the first run is all there is.
    let n = server
        .psql(db_name(&url), "SELECT count(*) FROM trials")
        .expect("psql");
    assert_eq!(n.trim(), "1");
}

#[test]
fn a_study_goes_on_through_a_server_restart_and_meets_its_budget_exactly() {
    // A server of its own: a restart would disturb the other tests' databases.
    let Some(server) = test_server::pg_or_skip() else {
        return;
    };
    let server: PgServer = server;
    let url = server.create_db("restart");
    let sb = Sandbox::new();
    let study = sh_study("restarted", 20, 2, "", &["{x}"])
        .replace("[workers]", "[sampler]\nkind = \"random\"\n\n[workers]");
    sb.write("s.toml", &study);
    sb.write("trial.sh", "sleep 0.3\necho \"tune: {\\\"loss\\\": $1}\"\n");
    let child = sb
        .tune(&["run", "s.toml", "--db", &url, "--no-tui"])
        .env("TUNE_DB_RETRY_SECS", "60")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts");
    let complete = || {
        server
            .psql(
                "restart",
                "SELECT count(*) FROM trials WHERE state = 'COMPLETE'",
            )
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    wait_until(PATIENCE, "three trials to complete", || complete() >= 3);
    server.restart().expect("the server restarts");
    assert!(complete() < 20, "the restart came before the study's end");
    let out = wait_output(child, PATIENCE);
    assert!(out.status.success(), "{}", text(&out));
    let all = text(&out);
    assert!(!all.contains(PASSWORD), "{all}");
    let trials = json(
        &sb,
        &[
            "trials",
            "--db",
            &url,
            "--study",
            "restarted",
            "--format",
            "json",
        ],
    );
    let trials = trials.as_array().expect("an array");
    assert_eq!(counted(trials), 20, "{trials:#?}");
    assert_eq!(
        trials.iter().filter(|t| t["state"] == "complete").count(),
        20,
        "{trials:#?}"
    );
    assert!(
        trials
            .iter()
            .all(|t| t["state"] == "complete" || t["state"] == "failed"),
        "nothing left running: {trials:#?}"
    );
    assert_numbers_once(trials);
}
