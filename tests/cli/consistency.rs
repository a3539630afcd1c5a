//! What `tune` says agrees with what is stored, whoever else works on the study: the finishing
//! line names the best of the whole study, the start line does not count interrupted trials as
//! done, an error says its cause once, every event is one line whatever the user's text holds,
//! and a reader that opens a database the instant it is created is not told its schema is old.

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{PATIENCE, Sandbox, sh_study, states, stderr, text, wait_output, wait_until};

/// The last line of what a run printed on stdout.
fn last_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// `(trial, value)` of a finishing line's `best of the study loss=V at trial N`.
fn study_best(line: &str) -> (u64, f64) {
    let rest = line
        .split("; best of the study loss=")
        .nth(1)
        .unwrap_or_else(|| panic!("no best of the study in `{line}`"));
    let (value, trial) = rest
        .split_once(" at trial ")
        .unwrap_or_else(|| panic!("no trial in `{line}`"));
    (
        trial.trim().parse().expect("a trial number"),
        value.parse().expect("a value"),
    )
}

#[test]
fn every_process_of_a_shared_study_ends_on_the_best_of_the_whole_study() {
    let sb = Sandbox::new();
    let study = sh_study("shared-best", 8, 1, "", &["{x}"])
        .replace("[workers]", "[sampler]\nkind = \"random\"\n\n[workers]");
    sb.write("s.toml", &study);
    // Process B's trials all score 100 worse than process A's, so the study's best is one of
    // A's trials, which B never saw finish: B's own trials alone would give a best over 98.
    sb.write(
        "trial.sh",
        "sleep 0.3\nawk -v x=\"$1\" -v o=\"$OFFSET\" 'BEGIN { printf \"tune: {\\\"loss\\\": %s}\\n\", x + o }'\n",
    );
    let spawn = |offset: &str| {
        sb.tune(&["run", "s.toml", "--no-tui"])
            .env("OFFSET", offset)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tune starts")
    };
    let (a, b) = (spawn("0"), spawn("100"));
    let (a, b) = (wait_output(a, PATIENCE), wait_output(b, PATIENCE));
    let best = sb.ok(&["best", "s.toml", "--format", "json"]);
    let best: Value = serde_json::from_slice(&best.stdout).expect("JSON");
    let best_number = best["number"].as_u64().expect("a number");
    for out in [&a, &b] {
        assert!(out.status.success(), "{}", text(out));
        let line = last_line(out);
        assert!(line.contains("study finished: "), "{}", text(out));
        let (n, v) = study_best(&line);
        assert_eq!(n, best_number, "{line}\n{best:#}");
        assert!(v < 50.0, "the best is one of A's trials: {line}");
    }
    assert!(
        String::from_utf8_lossy(&b.stdout).contains(" started on "),
        "process B ran trials of its own: {}",
        text(&b)
    );
}

#[test]
fn the_start_line_does_not_count_interrupted_trials_as_done() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("interrupted", 6, 2, "", &["{x}"]));
    sb.write("trial.sh", "sleep 0.4\necho \"tune: {\\\"loss\\\": $1}\"\n");
    let mut child = sb
        .tune(&["run", "s.toml", "--no-tui"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tune starts");
    wait_until(PATIENCE, "two complete trials", || {
        states(&sb).iter().filter(|(_, s)| s == "COMPLETE").count() >= 2
    });
    std::thread::sleep(Duration::from_millis(150));
    child.kill().expect("SIGKILL the orchestrator");
    crate::common::wait_within(&mut child, PATIENCE);
    let at_kill = states(&sb);
    let done = at_kill.iter().filter(|(_, s)| s == "COMPLETE").count();
    let running = at_kill.iter().filter(|(_, s)| s == "RUNNING").count();
    assert!(running > 0, "the kill left no running trial: {at_kill:?}");

    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    let start = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        start.contains(&format!(
            ": {done} trials done ({running} interrupted, run again), budget 6"
        )),
        "{}",
        text(&out)
    );
}

#[test]
fn an_error_says_its_cause_once() {
    let sb = Sandbox::new();
    sb.write("x.db", "garbage\n");
    sb.write("trial.sh", "echo 'tune: {\"loss\": 1}'\n");
    sb.write("s.toml", &sh_study("e", 1, 1, "", &[]));
    for args in [
        &["--db", "x.db", "studies"][..],
        &["--db", "x.db", "run", "s.toml", "--no-tui"],
        &["--db", "x.db", "trials", "s.toml"],
    ] {
        let out = sb.run(args);
        // Bad input, as any `--db` that does not name a database.
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = stderr(&out);
        assert_eq!(
            err.matches("not a database").count(),
            1,
            "`tune {}`: {err}",
            args.join(" ")
        );
        assert!(err.contains("x.db: file is not a database"), "{err}");
        assert!(!err.contains("Error code"), "{err}");
        said_once(&err);
    }
    // A file SQLite cannot open: its path once, not again at the end of SQLite's message.
    std::fs::create_dir(sb.join("dir.db")).expect("a directory");
    let out = sb.run(&["--db", "dir.db", "run", "s.toml", "--no-tui"]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("unable to open database file"), "{err}");
    assert_eq!(err.matches("dir.db").count(), 1, "{err}");
    said_once(&err);
}

/// No part of an error's chain says the part before it again.
fn said_once(err: &str) {
    for line in err.lines() {
        let parts: Vec<&str> = line.split(": ").collect();
        assert!(
            parts.windows(2).all(|w| w[0] != w[1]),
            "a repeated part in `{line}`"
        );
    }
}

#[test]
fn a_newline_in_a_categorical_choice_or_the_study_name_stays_on_its_events_one_line() {
    let sb = Sandbox::new();
    // The study's name is TOML's "two\nlines": a newline too.
    let study = sh_study("two\\nlines", 3, 1, "", &["{c}"]).replace(
        "choices = [\"a\", \"b\"]",
        "choices = [\"two\\nlines\", \"x\\r\\u001b[2Jy\"]",
    );
    sb.write("s.toml", &study);
    sb.write("trial.sh", "echo 'tune: {\"loss\": 1}'\n");
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // A study start, a start and an end per trial, a study end: nothing else, each one line.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1 + 2 * 3 + 1, "{stdout}");
    for l in &lines {
        assert!(
            l.starts_with('['),
            "a line that is not an event: `{l}`\n{stdout}"
        );
        assert!(!l.contains('\r') && !l.contains('\u{1b}'), "{l:?}");
    }
    assert!(
        stdout.contains("c=two\\nlines") || stdout.contains("c=x\\r\\u{1b}[2Jy"),
        "{stdout}"
    );
    assert!(
        lines[0].contains("study two\\nlines (minimize loss)"),
        "{stdout}"
    );
}

#[test]
fn a_database_with_no_tables_yet_reads_as_one_with_no_studies() {
    let sb = Sandbox::new();
    // An empty file, and a file switched to WAL but not yet migrated: what a reader finds when
    // it opens the database between its creation and its migration by `tune run`.
    sb.write("empty.db", "");
    let wal = sb.db("wal.db");
    wal.pragma_update(None, "journal_mode", "WAL")
        .expect("WAL mode");
    for db in ["empty.db", "wal.db"] {
        let t0 = Instant::now();
        let out = sb.ok(&["--db", db, "studies", "--format", "json"]);
        let list: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(list, Value::Array(Vec::new()), "{}", text(&out));
        assert!(t0.elapsed() < Duration::from_secs(10), "it waits briefly");
        // `tune watch` finds no study in it, as in any database without that study.
        let out = sb.run(&["--db", db, "watch", "--study", "s"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            stderr(&out).contains("no study named `s`"),
            "{}",
            text(&out)
        );
        assert!(!stderr(&out).contains("older"), "{}", text(&out));
    }
    drop(wal);
}

#[test]
fn readers_racing_the_creation_of_a_database_never_see_an_old_schema() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("race", 2, 1, "", &[]));
    sb.write("trial.sh", "sleep 0.3\necho 'tune: {\"loss\": 1}'\n");
    let run = sb
        .tune(&["run", "s.toml", "--no-tui"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts");
    // Read the instant the file appears, and on until the study exists.
    wait_until(PATIENCE, "tune.db to be created", || {
        sb.join("tune.db").exists()
    });
    let t0 = Instant::now();
    let mut reads = 0;
    loop {
        let out = sb.run(&["studies", "--format", "json"]);
        reads += 1;
        assert!(
            out.status.success(),
            "read {reads} of a database being created: {}",
            text(&out)
        );
        let list: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        if list.as_array().is_some_and(|l| !l.is_empty()) || t0.elapsed() > PATIENCE {
            break;
        }
    }
    let run = wait_output(run, PATIENCE);
    assert!(run.status.success(), "{}", text(&run));
}
