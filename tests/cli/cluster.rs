//! Launching and stopping workers the way a cluster does: every shell script the repository
//! ships parses, the Slurm batch script runs a real worker (a stand-in for `sbatch`: bash with
//! the SLURM_* variables set, `tune` on PATH) against a throwaway PostgreSQL, and what SIGTERM
//! does to `tune run` and `tune worker` (what the docs, the Slurm script and the Kubernetes
//! manifest promise) is pinned.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rstest::rstest;
use serde_json::Value;

use crate::common::{
    PATIENCE, Sandbox, counted, output_within, sh_study, states, stderr, text, tune_bin,
    wait_output, wait_until, wait_within,
};
use crate::postgres::test_server;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

const SBATCH: &str = "docs/slurm/tune-worker.sbatch";

/// The shell scripts under `dir`: files named `*.sh`, `*.bash` or `*.sbatch`, or starting with a
/// `sh`/`bash` shebang. Build outputs, virtual environments and git's own files are not ours.
fn shell_scripts(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            if !matches!(
                name.as_str(),
                ".git"
                    | "target"
                    | ".venv"
                    | ".venv-mfbench"
                    | ".libtorch"
                    | ".gpu"
                    | "gpu-bundle"
                    | "node_modules"
                    | "datasets"
            ) {
                shell_scripts(&p, out);
            }
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let by_name = [".sh", ".bash", ".sbatch"]
            .iter()
            .any(|x| name.ends_with(x));
        let by_shebang = std::fs::read(&p).is_ok_and(|b| {
            let first = b.split(|&c| c == b'\n').next().unwrap_or_default();
            let first = String::from_utf8_lossy(first);
            first.starts_with("#!")
                && ["/sh", "/bash", "env sh", "env bash"]
                    .iter()
                    .any(|s| first.trim_end().ends_with(s))
        });
        if by_name || by_shebang {
            out.push(p);
        }
    }
}

#[test]
fn every_shell_script_and_sbatch_file_in_the_repository_parses_with_bash_n_and_passes_shellcheck() {
    let mut scripts = Vec::new();
    shell_scripts(repo(), &mut scripts);
    let names: Vec<String> = scripts
        .iter()
        .map(|p| p.strip_prefix(repo()).unwrap_or(p).display().to_string())
        .collect();
    for must in [SBATCH, "scripts/setup.sh", "scripts/test.sh"] {
        assert!(
            names.iter().any(|n| n == must),
            "{must} not found: {names:?}"
        );
    }
    let broken: Vec<String> = scripts
        .iter()
        .filter_map(|p| {
            let out = Command::new("bash")
                .arg("-n")
                .arg(p)
                .output()
                .expect("bash runs");
            (!out.status.success()).then(|| {
                format!(
                    "{}: {}",
                    p.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })
        })
        .collect();
    assert!(
        broken.is_empty(),
        "scripts that do not parse:\n{}",
        broken.join("\n")
    );

    // And ShellCheck, where installed (`./scripts/setup.sh --python-tests` installs it).
    match Command::new("shellcheck").args(&scripts).output() {
        Err(_) => eprintln!("skipped: shellcheck is not installed; bash -n only"),
        Ok(out) => assert!(
            out.status.success(),
            "shellcheck:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A directory holding only `tune` (a link to the binary under test), for PATH.
fn bin_dir(sb: &Sandbox) -> PathBuf {
    let dir = sb.join("bin");
    std::fs::create_dir_all(&dir).expect("bin dir");
    let link = dir.join("tune");
    if !link.exists() {
        std::os::unix::fs::symlink(tune_bin(), &link).expect("link tune");
    }
    dir
}

/// The Slurm script run as one array task would run it: bash, in a clean environment with
/// the variables sbatch sets, `PATH` as given.
fn sbatch_task(sb: &Sandbox, path: &str, study: &str, task: u32) -> Command {
    let mut c = Command::new("bash");
    c.arg(repo().join(SBATCH))
        .arg(study)
        .current_dir(sb.path())
        .env_clear()
        .env("PATH", path)
        .env("HOME", sb.path())
        .env("TMPDIR", sb.join("node-tmp"))
        .env("SLURM_JOB_ID", format!("{}", 4242 + task))
        .env("SLURM_ARRAY_JOB_ID", "4242")
        .env("SLURM_ARRAY_TASK_ID", task.to_string())
        .env("SLURM_SUBMIT_DIR", sb.path())
        .env("SLURM_JOB_NAME", "tune-worker")
        .env("SLURM_NNODES", "1")
        .stdin(Stdio::null());
    std::fs::create_dir_all(sb.join("node-tmp")).expect("the node's TMPDIR");
    c
}

fn with_tune_on_path(sb: &Sandbox) -> String {
    format!("{}:/usr/bin:/bin", bin_dir(sb).display())
}

#[test]
fn the_slurm_script_runs_array_tasks_that_finish_a_stored_study_on_postgresql() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("slurm", 5, 2, "", &["{x}"]));
    sb.write("trial.sh", "sleep 0.2\necho \"tune: {\\\"loss\\\": $1}\"\n");
    // Stored once, as the script's header says, without running anything here: one queued
    // trial is enough to put the study and its file in the database.
    sb.ok(&[
        "enqueue",
        "s.toml",
        "--db",
        &url,
        "--params",
        r#"{"x": 0.5, "k": 2, "c": "a"}"#,
    ]);

    let path = with_tune_on_path(&sb);
    let mut task = sbatch_task(&sb, &path, "slurm", 3);
    task.env("TUNE_DB", &url).env("TUNE_DEVICES", "cpu");
    let out = output_within(task, PATIENCE);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("joining study `slurm`"), "{err}");

    let trials = trials_on(&sb, &url, "slurm");
    assert_eq!(counted(&trials), 5, "{trials:#?}");
    assert!(
        trials.iter().all(|t| t["state"] == "complete"),
        "{trials:#?}"
    );
    // The trial directories are on the node's local disk, named after the job and the task.
    assert!(
        sb.join("node-tmp/tune-runs-4242-3/trial-00000").is_dir(),
        "the runs directory of task 3"
    );

    // A task that starts once the budget is spent exits 0 too, so the array completes; with no
    // array variables at all (a plain `sbatch`), the job id names the runs directory.
    let mut late = sbatch_task(&sb, &path, "slurm", 4);
    late.env_remove("SLURM_ARRAY_JOB_ID")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env("TUNE_DB", &url);
    let out = output_within(late, PATIENCE);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(counted(&trials_on(&sb, &url, "slurm")), 5);
    drop(server);
}

fn trials_on(sb: &Sandbox, url: &str, study: &str) -> Vec<Value> {
    let out = sb.ok(&["trials", "--db", url, "--study", study, "--format", "json"]);
    match serde_json::from_slice(&out.stdout).expect("JSON") {
        Value::Array(a) => a,
        other => panic!("{other}"),
    }
}

#[rstest]
#[case::without_tune_db(None, "", "set TUNE_DB to the PostgreSQL URL")]
#[case::without_tune_on_path(Some("postgresql://u@h/db"), "", "cannot run `tune` on")]
#[case::with_a_missing_tune_bin(
    Some("postgresql://u@h/db"),
    "TUNE_BIN=/nowhere/tune",
    "cannot run `/nowhere/tune` on"
)]
#[case::with_a_missing_directory(
    Some("postgresql://u@h/db"),
    "TUNE_DIR=/nowhere/project",
    "the study's directory `/nowhere/project` does not exist"
)]
fn the_slurm_script_refuses_at_once_what_a_task_lacks_and_names_the_fix(
    #[case] db: Option<&str>,
    #[case] var: &str,
    #[case] says: &str,
) {
    let sb = Sandbox::new();
    // `tune` on PATH except where the case is that it is missing.
    let path = if says.contains("cannot run `tune` on") {
        "/usr/bin:/bin".to_string()
    } else {
        with_tune_on_path(&sb)
    };
    let mut task = sbatch_task(&sb, &path, "s", 0);
    if let Some(db) = db {
        task.env("TUNE_DB", db);
    }
    if let Some((k, v)) = var.split_once('=') {
        task.env(k, v);
    }
    let out = output_within(task, PATIENCE);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains(says), "{err}");
    assert!(err.starts_with("tune-worker.sbatch: "), "{err}");
}

/// What Ctrl-C (SIGINT) and SIGTERM do. `tune run` and `tune worker` behave alike (the worker
/// runs the study loop of `tune run`), with or without an earlier process on the study.
#[derive(Clone, Copy, Debug)]
enum Who {
    Run,
    Worker,
}

/// A study of 6 trials, 2 at once, each sleeping `secs` and then reporting; the process under
/// test is started with its output piped.
fn start(sb: &Sandbox, who: Who, secs: f64) -> std::process::Child {
    let study = sh_study("term", 6, 2, "", &["{x}"])
        .replace("kind = \"command\"", "kind = \"command\"\ngrace = \"1s\"");
    sb.write("s.toml", &study);
    sb.write(
        "trial.sh",
        &format!("sleep {secs}\necho \"tune: {{\\\"loss\\\": $1}}\"\n"),
    );
    let args: Vec<&str> = match who {
        Who::Run => vec!["run", "s.toml", "--no-tui"],
        Who::Worker => {
            sb.ok(&[
                "enqueue",
                "s.toml",
                "--params",
                r#"{"x": 1.0, "k": 1, "c": "b"}"#,
            ]);
            vec!["worker", "--db", "tune.db", "--study", "term", "--no-tui"]
        }
    };
    sb.tune(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts")
}

/// The failed trials of `trials` whose reason starts with `why`.
fn failed_as<'a>(trials: &'a [Value], why: &str) -> Vec<&'a Value> {
    trials
        .iter()
        .filter(|t| {
            t["state"] == "failed" && t["error"].as_str().is_some_and(|e| e.starts_with(why))
        })
        .collect()
}

fn running(sb: &Sandbox) -> usize {
    states(sb).iter().filter(|(_, s)| s == "RUNNING").count()
}

fn signal(child: &std::process::Child, sig: Signal) {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    kill(pid, sig).expect("a signal");
}

fn interrupt(child: &std::process::Child) {
    signal(child, Signal::SIGINT);
}

#[rstest]
#[case::tune_run(Who::Run)]
#[case::tune_worker(Who::Worker)]
fn one_ctrl_c_starts_no_new_trial_lets_the_running_ones_finish_and_exits_0(#[case] who: Who) {
    let sb = Sandbox::new();
    let child = start(&sb, who, 2.0);
    wait_until(PATIENCE, "two running trials", || running(&sb) == 2);
    let t0 = Instant::now();
    interrupt(&child);
    let out: Output = wait_output(child, PATIENCE);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{who:?}: {all}");
    assert!(
        stderr(&out).contains(
            "tune: stopping: no new trials; running ones finish (Ctrl-C again to stop them)"
        ),
        "{who:?}: {all}"
    );
    // It waited for them: they ran to their end and reported.
    assert!(
        t0.elapsed() >= Duration::from_millis(1500),
        "{who:?}: {all}"
    );
    let trials = sb.trials("s.toml");
    let states: Vec<&str> = trials.iter().filter_map(|t| t["state"].as_str()).collect();
    let complete = states.iter().filter(|s| **s == "complete").count();
    assert_eq!(
        complete, 2,
        "{who:?}: the two running trials completed: {trials:#?}"
    );
    assert!(
        !states.iter().any(|s| *s == "running" || *s == "failed"),
        "{who:?}: none was stopped, none started after: {trials:#?}"
    );
}

#[rstest]
#[case::tune_run(Who::Run)]
#[case::tune_worker(Who::Worker)]
fn a_second_ctrl_c_stops_the_running_trials_records_them_interrupted_and_exits_1(#[case] who: Who) {
    let sb = Sandbox::new();
    let mut child = start(&sb, who, 30.0);
    wait_until(PATIENCE, "two running trials", || running(&sb) == 2);
    interrupt(&child);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().expect("wait").is_none(),
        "{who:?}: one Ctrl-C waits"
    );
    let t0 = Instant::now();
    interrupt(&child);
    let out = wait_output(child, PATIENCE);
    let all = text(&out);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "{who:?}: within the grace: {all}"
    );
    // No trial completed before the stop: the run counts as not done.
    assert_eq!(out.status.code(), Some(1), "{who:?}: {all}");
    let err = stderr(&out);
    assert!(
        err.contains("tune: stopping the running trials"),
        "{who:?}: {all}"
    );
    let trials = sb.trials("s.toml");
    let interrupted = failed_as(&trials, "interrupted").len();
    assert_eq!(interrupted, 2, "{who:?}: {trials:#?}");
    assert_eq!(counted(&trials), 0, "{who:?}: {trials:#?}");
}

/// Issue 27: SIGTERM is a preemption (Slurm's preemption or time limit, a Kubernetes
/// eviction). One is enough: no new trial starts, the running ones get SIGTERM and the grace
/// to save their checkpoints, are recorded as interrupted (not failed, not counted) and queued
/// again at once, and the process exits 75 so that Slurm's `--requeue` and Kubernetes run it
/// again. The next process runs the queued attempts without waiting for any heartbeat grace and
/// ends the study at its exact budget.
#[rstest]
#[case::tune_run(Who::Run)]
#[case::tune_worker(Who::Worker)]
fn one_sigterm_preempts_the_running_trials_requeues_them_at_once_and_exits_75(#[case] who: Who) {
    let sb = Sandbox::new();
    let child = start(&sb, who, 30.0);
    wait_until(PATIENCE, "two running trials", || running(&sb) == 2);
    let t0 = Instant::now();
    signal(&child, Signal::SIGTERM);
    let out = wait_output(child, PATIENCE);
    let all = text(&out);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "{who:?}: within the grace, not after the trials' 30 s: {all}"
    );
    assert_eq!(out.status.code(), Some(75), "{who:?}: {all}");
    assert!(
        stderr(&out).contains("tune: SIGTERM: preempted"),
        "{who:?}: {all}"
    );
    let trials = sb.trials("s.toml");
    let interrupted = failed_as(&trials, "interrupted");
    assert_eq!(interrupted.len(), 2, "{who:?}: {trials:#?}");
    assert_eq!(counted(&trials), 0, "{who:?}: not failures: {trials:#?}");
    let queued = trials.iter().filter(|t| t["state"] == "queued").count();
    assert!(queued >= 2, "{who:?}: queued again at once: {trials:#?}");

    // The next process (a requeued task, a restarted pod) takes them at once.
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    let t1 = Instant::now();
    sb.ok(&["run", "s.toml", "--no-tui"]);
    assert!(
        t1.elapsed() < Duration::from_secs(30),
        "{who:?}: no heartbeat grace waited for"
    );
    let after = sb.trials("s.toml");
    assert_eq!(counted(&after), 6, "{who:?}: the exact budget: {after:#?}");
    for t in interrupted {
        assert!(
            after
                .iter()
                .any(|u| u["state"] == "complete" && u["params"] == t["params"]),
            "{who:?}: the params of interrupted trial {} ran again",
            t["number"]
        );
    }
}

/// The same preemption when whoever read tune's output is gone (a parent killed, `2>&1 | head`
/// ended): writes to its standard output and error fail, and must change nothing. Before, the
/// SIGTERM handler's message panicked on the closed pipe, the preemption was lost, and the
/// study ran on, starting new trials (`tune worker` was even killed by SIGPIPE on its first
/// line). It still exits 75 within the grace with the trials interrupted, and a study whose
/// output is gone from the start still runs to its end.
#[rstest]
#[case::tune_run(Who::Run)]
#[case::tune_worker(Who::Worker)]
fn with_its_output_pipes_closed_sigterm_still_preempts_and_exits_75(#[case] who: Who) {
    let sb = Sandbox::new();
    let mut child = start(&sb, who, 30.0);
    // Close the read ends: every later write of tune's fails with EPIPE.
    drop(child.stdout.take());
    drop(child.stderr.take());
    wait_until(PATIENCE, "two running trials", || running(&sb) == 2);
    let t0 = Instant::now();
    signal(&child, Signal::SIGTERM);
    let status = wait_within(&mut child, PATIENCE);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "{who:?}: within the grace, not after the trials' 30 s"
    );
    assert_eq!(status.code(), Some(75), "{who:?}: {status:?}");
    let trials = sb.trials("s.toml");
    let interrupted = failed_as(&trials, "interrupted: preempted").len();
    assert_eq!(interrupted, 2, "{who:?}: {trials:#?}");
    assert_eq!(
        trials.iter().filter(|t| t["state"] == "running").count(),
        0,
        "{who:?}: no new trial after SIGTERM: {trials:#?}"
    );

    // The rest of the study with its output gone from the start: it ends, exit 0, every trial.
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    let mut rest = sb
        .tune(&["run", "s.toml", "--no-tui"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts");
    drop(rest.stdout.take());
    drop(rest.stderr.take());
    let status = wait_within(&mut rest, PATIENCE);
    assert_eq!(status.code(), Some(0), "{who:?}: {status:?}");
    assert_eq!(
        counted(&sb.trials("s.toml")),
        6,
        "{who:?}: the exact budget"
    );
}

/// Floats whose shortest exact text has 16 or 17 significant digits.
const LONG_FLOATS: [&str; 3] = [
    "0.30000000000000004",
    "-1.2345678901234567",
    "1.0000000000000002",
];

/// The study of [`LONG_FLOATS`]: each queued, then run, on the database `db`.
fn run_long_floats(sb: &Sandbox, db: &str) {
    sb.write("p.toml", &sh_study("digits", 3, 1, "", &["{x}"]));
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": 1}\"\n");
    for x in LONG_FLOATS {
        sb.ok(&[
            "enqueue",
            "p.toml",
            "--db",
            db,
            "--params",
            &format!(r#"{{"x": {x}, "k": 1, "c": "a"}}"#),
        ]);
    }
    sb.ok(&["run", "p.toml", "--db", db, "--no-tui"]);
    let trials = trials_on(sb, db, "digits");
    let mut xs: Vec<String> = trials
        .iter()
        .map(|t| t["params"]["x"].to_string())
        .collect();
    xs.sort();
    let mut want: Vec<String> = LONG_FLOATS.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(xs, want, "`tune trials --format json` keeps every digit");
}

#[test]
fn the_trials_view_keeps_every_digit_of_a_param_with_the_sqlite_tune_bundles() {
    let sb = Sandbox::new();
    run_long_floats(&sb, "tune.db");
    let db = sb.db("tune.db");
    let mut stmt = db
        .prepare("SELECT json_extract(params, '$.x') FROM tune_trials_view WHERE study = 'digits'")
        .expect("the view");
    let mut got: Vec<String> = stmt
        .query_map([], |r| r.get::<_, f64>(0))
        .expect("rows")
        .map(|x| format!("{:?}", x.expect("a float")))
        .collect();
    got.sort();
    let mut want: Vec<String> = LONG_FLOATS.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(
        got, want,
        "docs/database.md: recent SQLite keeps every digit"
    );
    // The exact value is in trial_params whatever SQLite reads it.
    let exact: Vec<f64> = db
        .prepare("SELECT param_value FROM trial_params WHERE param_name = 'x'")
        .expect("trial_params")
        .query_map([], |r| r.get(0))
        .expect("rows")
        .map(|x| x.expect("a float"))
        .collect();
    for x in LONG_FLOATS {
        let x: f64 = x.parse().expect("a float");
        assert!(
            exact.iter().any(|e| e.total_cmp(&x).is_eq()),
            "{x} in {exact:?}"
        );
    }
}

#[test]
fn the_trials_view_keeps_every_digit_of_a_param_on_postgresql() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    run_long_floats(&sb, &url);
    let name = url.rsplit('/').next().expect("a database name");
    let out = server
        .psql(
            name,
            "SELECT params->>'x' FROM tune_trials_view WHERE study = 'digits' ORDER BY 1",
        )
        .expect("psql");
    let mut got: Vec<&str> = out.lines().collect();
    got.sort_unstable();
    let mut want = LONG_FLOATS.to_vec();
    want.sort_unstable();
    assert_eq!(got, want, "docs/database.md: PostgreSQL keeps every digit");
}

/// `tune studies --db URL` with the password environment given (nothing inherited).
fn studies_with(sb: &Sandbox, url: &str, env: &[(&str, String)]) -> Output {
    let mut c = sb.tune(&["studies", "--db", url]);
    c.env_remove("PGPASSWORD")
        .env_remove("PGPASSFILE")
        .env("HOME", sb.join("home"));
    for (k, v) in env {
        c.env(k, v);
    }
    output_within(c, PATIENCE)
}

#[test]
fn a_password_the_server_asks_for_and_tune_lacks_or_gets_wrong_is_told_with_where_to_put_it() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.join("home")).expect("a home");
    let pw = test_server::PASSWORD;
    let bare = url.replacen(&format!(":{pw}@"), "@", 1);
    assert_ne!(bare, url, "the URL had the password");
    let port = server.port();
    let db = url.rsplit('/').next().expect("a database name");
    let pgpass = sb.join("home/.pgpass");
    let line = format!("127.0.0.1:{port}:{db}:postgres");

    // None anywhere: where tune looked, and what to write where.
    let out = studies_with(&sb, &bare, &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    for says in [
        "asks for a password for user `postgres`, and none was given",
        "PGPASSWORD is not set",
        &format!("{} does not exist", pgpass.display()),
        &format!("add a line `{line}:PASSWORD` to ~/.pgpass"),
    ] {
        assert!(all.contains(says), "{says:?} in:\n{all}");
    }
    // A password file without a line for this server, and one that PGPASSFILE names.
    std::fs::write(&pgpass, "elsewhere:5432:*:*:x\n").expect("a .pgpass");
    let out = studies_with(&sb, &bare, &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains(&format!("{} has no line for {line}", pgpass.display())),
        "{all}"
    );
    let other = sb.join("nowhere/pgpass");
    let out = studies_with(&sb, &bare, &[("PGPASSFILE", other.display().to_string())]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains(&format!("{} does not exist", other.display())),
        "{all}"
    );

    // A wrong password: where it came from, so the right place gets corrected.
    std::fs::write(&pgpass, format!("{line}:not-it\n")).expect("a .pgpass");
    for (env, with) in [
        (
            vec![],
            format!("with the password from {}", pgpass.display()),
        ),
        (
            vec![("PGPASSWORD", "not-it-either".to_string())],
            "with the password from PGPASSWORD".to_string(),
        ),
    ] {
        let out = studies_with(&sb, &bare, &env);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(2), "{all}");
        assert!(
            all.contains("password authentication failed for user `postgres`"),
            "{all}"
        );
        assert!(all.contains(&with), "{with:?} in:\n{all}");
        assert!(!all.contains("not-it"), "a password was printed:\n{all}");
    }
    let wrong_in_url = url.replacen(pw, "wrong-one", 1);
    let out = studies_with(&sb, &wrong_in_url, &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("with the password from the URL"), "{all}");
    assert!(
        !all.contains("wrong-one"),
        "the password was printed:\n{all}"
    );

    // The right line in ~/.pgpass is all a URL without a password needs.
    std::fs::write(&pgpass, format!("{line}:{pw}\n")).expect("a .pgpass");
    let out = studies_with(&sb, &bare, &[]);
    assert!(
        !text(&out).contains("password"),
        "the password was found in ~/.pgpass: {}",
        text(&out)
    );
    drop(server);
}

/// A terminal of its own: a tmux server on a private socket, one session running `shell`.
struct Term {
    socket: String,
}

impl Term {
    /// `None` (the test then says it skipped) where tmux is not installed.
    fn start(name: &str, dir: &Path, shell: &str) -> Option<Term> {
        let socket = format!("tune-cluster-{}-{name}", std::process::id());
        let ok = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "new-session",
                "-d",
                "-x",
                "220",
                "-y",
                "30",
                "-c",
            ])
            .arg(dir)
            .arg(shell)
            .status()
            .ok()?;
        assert!(ok.success(), "tmux new-session failed");
        Some(Term { socket })
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p"])
            .output()
            .expect("capture-pane runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                t0.elapsed() < PATIENCE,
                "gave up waiting for {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The process the pane's shell started (the `tune` under test).
    fn child_pid(&self) -> Pid {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "display-message", "-p", "#{pane_pid}"])
            .output()
            .expect("display-message runs");
        let shell = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .unwrap_or_default();
        let pid: i32 = children
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the pane's shell {shell} has no child"));
        Pid::from_raw(pid)
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// What a line on standard error would look like on top of the UI.
fn printed_over_the_ui(screen: &str) -> bool {
    screen.contains("tune: lost the database") || screen.contains("tune: reconnected")
}

#[test]
fn a_lost_database_is_told_inside_the_live_ui_of_run_and_watch_and_sigterm_stops_the_ui_run() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("skipped: tmux is not installed (./scripts/setup.sh --python-tests installs it)");
        return;
    }
    // A server of its own: this test stops it.
    let Some(server) = test_server::pg_or_skip() else {
        return;
    };
    let url = server.create_db("lost");
    let sb = Sandbox::new();
    let study = sh_study("lost", 3, 1, "", &["{x}"])
        .replace("kind = \"command\"", "kind = \"command\"\ngrace = \"1s\"");
    sb.write("s.toml", &study);
    sb.write("trial.sh", "sleep 60\necho \"tune: {\\\"loss\\\": $1}\"\n");
    let bin = tune_bin();
    let Some(run) = Term::start(
        "run",
        sb.path(),
        &format!("env -u TUNE_DB {bin} run s.toml --db '{url}'; echo EXIT=$?; sleep 60"),
    ) else {
        eprintln!("skipped: tmux could not start");
        return;
    };
    run.wait_for("the live UI with a running trial", |s| {
        s.contains("1/1 busy")
    });
    let watch = Term::start(
        "watch",
        sb.path(),
        &format!("env -u TUNE_DB {bin} watch --study lost --db '{url}'; echo EXIT=$?; sleep 60"),
    )
    .expect("tmux starts");
    watch.wait_for("watch to show the study", |s| {
        s.contains("lost") && s.contains("watch")
    });

    // The database goes away: both UIs say so in their footer, never on top of their frame.
    server.stop().expect("the server stops");
    let t0 = Instant::now();
    loop {
        let (in_run, in_watch) = (run.screen(), watch.screen());
        let screens = format!("--- run\n{in_run}\n--- watch\n{in_watch}");
        assert!(
            !printed_over_the_ui(&screens),
            "printed on top of the UI:\n{screens}"
        );
        if in_run.contains("lost the database (") && in_watch.contains("lost the database (") {
            break;
        }
        assert!(
            t0.elapsed() < PATIENCE,
            "the UIs never told of the lost database:\n{screens}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // And back: they say that too.
    server.start_again().expect("the server starts again");
    let t0 = Instant::now();
    loop {
        let (in_run, in_watch) = (run.screen(), watch.screen());
        let screens = format!("--- run\n{in_run}\n--- watch\n{in_watch}");
        assert!(
            !printed_over_the_ui(&screens),
            "printed on top of the UI:\n{screens}"
        );
        if in_run.contains("reconnected to postgresql://")
            && in_watch.contains("reconnected to postgresql://")
        {
            break;
        }
        assert!(
            t0.elapsed() < PATIENCE,
            "the UIs never told of the reconnection:\n{screens}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // SIGTERM to `tune run` with its live UI: a preemption. The UI closes and the running
    // trial is stopped at once, recorded as interrupted and queued again; exit status 75.
    kill(run.child_pid(), Signal::SIGTERM).expect("SIGTERM");
    let s = run.wait_for("tune run to exit", |s| s.contains("EXIT="));
    assert!(s.contains("EXIT=75"), "{s}");
    let trials = trials_on(&sb, &url, "lost");
    assert!(
        trials.iter().any(|t| t["state"] == "failed"
            && t["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("interrupted"))),
        "{trials:#?}"
    );
    assert_eq!(counted(&trials), 0, "{trials:#?}");
    drop(server);
}
