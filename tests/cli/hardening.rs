//! Faults and abuse from outside, at the binary level: whatever bytes a trial writes are
//! stored and the study goes on, on SQLite and PostgreSQL alike (a NUL byte, bytes that are
//! not UTF-8); what cannot be stored or passed to a command is refused before anything is
//! written; a database password shows in no message, no stored study file and no trial's
//! environment; an ask-tell session killed with a trial outstanding leaves nothing `running`
//! for good.

use std::process::Stdio;

use serde_json::Value;

use crate::common::{Sandbox, sh_study, text};
use crate::postgres::test_server;

/// A trial that writes NUL bytes and bytes that are not UTF-8 everywhere it can: in metric
/// names (JSON's `\u0000`), in its standard error, and (trial 1) in the stderr tail of a
/// failure.
const NUL_SCRIPT: &str = r#"printf 'tune: {"step": 0, "loss": %s, "lo\\u0000ss": 1, "\\u0000": 2}\n' "$1"
printf 'err\000or \377\376 not utf-8\n' >&2
[ "$TUNE_TRIAL" = 1 ] && { printf 'dying\000 now\n' >&2; exit 3; }
printf 'tune: {"final": true, "loss": %s, "x\\u0000y": 3}\n' "$1"
exit 0
"#;

/// `tune trials` of study `nul` as JSON, from `db` (a path or a URL).
fn trials_of(sb: &Sandbox, db: &str, study: &str) -> Vec<Value> {
    let out = sb.ok(&["trials", "--db", db, "--study", study, "--format", "json"]);
    match serde_json::from_slice(&out.stdout) {
        Ok(Value::Array(a)) => a,
        other => panic!("`tune trials` printed {other:?}: {}", text(&out)),
    }
}

/// Runs the NUL-writing study twice against `db` (the second time with a raised budget, as
/// a rerun) and checks that every trial ended and what they wrote was stored.
fn nul_bytes_are_stored_and_the_study_goes_on(db: &str) {
    let sb = Sandbox::new();
    sb.write("trial.sh", NUL_SCRIPT);
    for trials in [3, 5] {
        sb.write("s.toml", &sh_study("nul", trials, 2, "", &["{x}"]));
        let out = sb.ok(&["run", "s.toml", "--db", db, "--no-tui"]);
        let all = text(&out);
        assert!(!all.contains("storage failed"), "{all}");
        let rows = trials_of(&sb, db, "nul");
        assert_eq!(rows.len(), trials as usize, "{rows:#?}");
        for t in &rows {
            assert_ne!(t["state"], "running", "{t:#}");
            let failed = t["number"] == 1;
            assert_eq!(
                t["state"],
                if failed { "failed" } else { "complete" },
                "{t:#}"
            );
        }
        let show = sb.ok(&[
            "show", "1", "--db", db, "--study", "nul", "--format", "json",
        ]);
        let failed: Value = serde_json::from_slice(&show.stdout).expect("`tune show` prints JSON");
        let shown = failed["log_tail"].as_str().unwrap_or_default();
        assert!(
            shown.contains("dying\u{FFFD} now") && shown.contains("err\u{FFFD}or \u{FFFD}\u{FFFD}"),
            "the stderr tail is stored with U+FFFD for each NUL and bad byte: {failed:#}"
        );
        let done = rows.iter().find(|t| t["number"] == 0).expect("trial 0");
        let metrics = done["metrics"].to_string();
        assert!(metrics.contains("x\u{FFFD}y"), "{done:#}");
        assert!(!done.to_string().contains("\\u0000"), "{done:#}");
        // The warning says where the metric went, in the trial's own log.
        let logs = logs_under(&sb.join("runs"), "stdout.log");
        assert!(
            logs.iter()
                .any(|l| l.contains("metric name holds a NUL byte")),
            "{logs:#?}"
        );
    }
}

#[test]
fn nul_bytes_and_bad_utf8_a_trial_writes_are_stored_on_sqlite_and_the_study_goes_on() {
    nul_bytes_are_stored_and_the_study_goes_on("tune.db");
}

#[test]
fn nul_bytes_and_bad_utf8_a_trial_writes_are_stored_on_postgresql_and_the_study_goes_on() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    nul_bytes_are_stored_and_the_study_goes_on(&url);
    // Nothing stored holds a NUL: PostgreSQL would have refused it, and its JSON views
    // (`\u0000` in `jsonb`) would fail for every reader.
    let n = server
        .psql(
            test_db(&url),
            "SELECT COUNT(*) FROM tune_reports_view WHERE metrics::text LIKE '%u0000%'",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n.trim(), "0");
    drop(server);
}

/// The text of every file named `name` under `dir`.
fn logs_under(dir: &std::path::Path, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(logs_under(&p, name));
        } else if p.file_name().is_some_and(|f| f == name) {
            out.push(String::from_utf8_lossy(&std::fs::read(&p).unwrap_or_default()).into_owned());
        }
    }
    out
}

/// The database's name, the last part of its URL.
fn test_db(url: &str) -> &str {
    url.rsplit('/').next().expect("a URL with a path")
}

#[test]
fn nul_bytes_in_names_and_choices_are_refused_before_anything_is_written() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": 1}\"\n");
    let base = sh_study("ok", 2, 1, "", &["{c}"]);
    let cases = [
        (
            base.replace(r#"choices = ["a", "b"]"#, r#"choices = ["a", "b\u0000c"]"#),
            "space.c",
        ),
        (
            base.replace(r#"choices = ["a", "b"]"#, r#"choices = ["\u0000"]"#),
            "space.c",
        ),
        (
            base.replace(r#"name = "ok""#, r#"name = "o\u0000k""#),
            "study.name",
        ),
        (
            base.replace(r#"metric = "loss""#, r#"metric = "lo\u0000ss""#),
            "study.metric",
        ),
    ];
    for (study, key) in cases {
        sb.write("s.toml", &study);
        let out = sb.run(&["run", "s.toml", "--no-tui"]);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(2), "{all}");
        assert!(all.contains("s.toml") && all.contains("NUL"), "{all}");
        assert!(
            all.contains(key)
                || all.contains(&format!("`{}`", key.rsplit('.').next().unwrap_or(key))),
            "the message names {key}: {all}"
        );
        assert!(!sb.join("tune.db").exists(), "nothing is written: {all}");
    }
    // The same space for ask-tell is refused up front too.
    sb.write(
        "space.toml",
        "[space]\nc = { type = \"categorical\", choices = [\"a\\u0000\"] }\n",
    );
    let out = sb
        .tune(&["ask-tell", "--space", "space.toml"])
        .stdin(Stdio::null())
        .output()
        .expect("tune runs");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("NUL"), "{}", text(&out));
}

/// Makes the PostgreSQL database `db` refuse, as it refuses a NUL byte (SQLSTATE 22021), any
/// trial ending whose stderr tail says "poison" and any report with a metric of that name.
const REFUSE_POISON: &str = r#"
CREATE FUNCTION refuse_poison_tail() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.log_tail LIKE '%poison%' THEN
    RAISE EXCEPTION 'poison refused' USING ERRCODE = '22021';
  END IF;
  RETURN NEW;
END $$;
CREATE FUNCTION refuse_poison_report() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.metrics_json LIKE '%poison%' THEN
    RAISE EXCEPTION 'poison refused' USING ERRCODE = '22021';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER refuse_poison_tail BEFORE INSERT OR UPDATE ON tune_trials
  FOR EACH ROW EXECUTE FUNCTION refuse_poison_tail();
CREATE TRIGGER refuse_poison_report BEFORE INSERT OR UPDATE ON tune_reports
  FOR EACH ROW EXECUTE FUNCTION refuse_poison_report();
"#;

#[test]
fn a_trial_whose_data_the_database_refuses_ends_failed_and_the_study_goes_on() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    sb.write(
        "trial.sh",
        r#"[ "$TUNE_TRIAL" = 1 ] && { echo poison >&2; exit 3; }
[ "$TUNE_TRIAL" = 2 ] && echo 'tune: {"step": 0, "loss": 0.5, "poison": 1}'
echo "tune: {\"step\": 1, \"loss\": $1}"
"#,
    );
    // A first run creates the schema, then the database starts refusing.
    sb.write("s.toml", &sh_study("refused", 1, 1, "", &["{x}"]));
    sb.ok(&["run", "s.toml", "--db", &url, "--no-tui"]);
    server
        .psql(test_db(&url), REFUSE_POISON)
        .unwrap_or_else(|e| panic!("{e}"));
    sb.write("s.toml", &sh_study("refused", 4, 1, "", &["{x}"]));
    let out = sb.ok(&["run", "s.toml", "--db", &url, "--no-tui"]);
    let all = text(&out);
    assert!(!all.contains("storage failed"), "{all}");
    let rows = trials_of(&sb, &url, "refused");
    assert_eq!(rows.len(), 4, "{rows:#?}");
    let state = |n: u64| rows.iter().find(|t| t["number"] == n).expect("trial");
    for n in [0, 3] {
        assert_eq!(state(n)["state"], "complete", "{:#}", state(n));
    }
    for (n, why) in [
        (1, "refused what this trial wrote"),
        (2, "refused a report of this trial"),
    ] {
        let t = state(n);
        assert_eq!(t["state"], "failed", "{t:#}");
        let error = t["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(why) && error.contains("poison refused"),
            "{t:#}"
        );
        assert!(!error.starts_with("interrupted"), "not run again: {t:#}");
    }
    drop(server);
}

/// A `tune ask-tell` session on study `s` of `db`, driven line by line.
struct Session {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Session {
    fn start(sb: &Sandbox, db: &str) -> Session {
        use std::io::BufRead;
        let mut child = sb
            .tune(&[
                "ask-tell",
                "--space",
                "space.toml",
                "--db",
                db,
                "--study",
                "s",
                "--seed",
                "3",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tune ask-tell starts");
        let pipe = |r: Box<dyn std::io::Read + Send>| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(r).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            rx
        };
        let lines = pipe(Box::new(child.stdout.take().expect("piped")));
        let stderr = pipe(Box::new(child.stderr.take().expect("piped")));
        Session {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
        }
    }

    fn send(&mut self, request: &str) -> Value {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{request}").expect("write a request");
        stdin.flush().expect("flush");
        let line = self
            .lines
            .recv_timeout(crate::common::PATIENCE)
            .unwrap_or_else(|e| panic!("no answer to {request}: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"))
    }

    fn ask(&mut self) -> (u64, Value) {
        let a = self.send(r#"{"ask": {}}"#);
        let n = a["trial"].as_u64().unwrap_or_else(|| panic!("{a}"));
        (n, a["params"].clone())
    }

    fn tell(&mut self, n: u64, value: f64) {
        let a = self.send(&format!(
            r#"{{"tell": {{"trial": {n}, "value": {value}}}}}"#
        ));
        assert_eq!(a, serde_json::json!({"ok": true}), "tell {n}");
    }

    fn kill_9(mut self) {
        self.child.kill().expect("SIGKILL the session");
        crate::common::wait_within(&mut self.child, crate::common::PATIENCE);
    }

    /// Ends input; returns the exit code and what the session wrote on standard error.
    fn finish(mut self) -> (Option<i32>, String) {
        drop(self.stdin.take());
        let status = crate::common::wait_within(&mut self.child, crate::common::PATIENCE);
        let err: Vec<String> = self.stderr.try_iter().collect();
        (status.code(), err.join("\n"))
    }
}

const ASK_TELL_SPACE: &str = "[space]\nx = { type = \"float\", low = 0.0, high = 1.0 }\nc = { type = \"categorical\", choices = [\"a\", \"b\"] }\n";

/// Kills a session with one trial outstanding (another told), and checks that the next
/// session recovers it (a dead process on this machine, or, `elsewhere`, one on another machine
/// silent past the grace), asks its params again, and leaves nothing running.
fn a_killed_session_is_recovered(db: &str, elsewhere: Option<&dyn Fn(&Sandbox)>) {
    let sb = Sandbox::new();
    sb.write("space.toml", ASK_TELL_SPACE);
    let mut a = Session::start(&sb, db);
    let (n0, p0) = a.ask();
    let (n1, _) = a.ask();
    a.tell(n1, 0.5);
    a.kill_9();
    let running = |sb: &Sandbox| -> Vec<u64> {
        trials_of(sb, db, "s")
            .iter()
            .filter(|t| t["state"] == "running")
            .filter_map(|t| t["number"].as_u64())
            .collect()
    };
    assert_eq!(running(&sb), vec![n0], "the kill left trial {n0} running");
    if let Some(move_away) = elsewhere {
        move_away(&sb);
    }

    let mut b = Session::start(&sb, db);
    let (n2, p2) = b.ask();
    assert_eq!(p2, p0, "the recovered trial's params are asked again");
    assert!(n2 > n1, "a new number for the rerun");
    assert!(running(&sb) == vec![n2], "{:?}", running(&sb));
    b.tell(n2, 0.25);
    let (code, err) = b.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("recovered"), "the session says so: {err}");
    let rows = trials_of(&sb, db, "s");
    let t0 = rows.iter().find(|t| t["number"] == n0).expect("trial 0");
    assert_eq!(t0["state"], "failed", "{t0:#}");
    let why = t0["error"].as_str().unwrap_or_default();
    assert!(why.starts_with("interrupted"), "{t0:#}");
    // Every backend says which of the two it saw, in the same words.
    let said = if elsewhere.is_some() {
        "no heartbeat"
    } else {
        "died"
    };
    assert!(why.contains(said), "{t0:#}");
    assert!(running(&sb).is_empty());
}

#[test]
fn an_ask_tell_session_killed_with_a_trial_outstanding_is_recovered_by_the_next_on_sqlite() {
    a_killed_session_is_recovered("tune.db", None);
}

#[test]
fn an_ask_tell_session_on_another_machine_silent_past_the_grace_is_recovered() {
    let elsewhere = |sb: &Sandbox| {
        let db = sb.db("tune.db");
        db.execute_batch(
            "UPDATE tune_workers SET host = 'another-machine', heartbeat = '2000-01-01 00:00:00.000000';
             UPDATE trial_heartbeats SET heartbeat = '2000-01-01 00:00:00.000000';",
        )
        .expect("move the session's worker to another machine, silent since 2000");
    };
    a_killed_session_is_recovered("tune.db", Some(&elsewhere));
}

#[test]
fn an_ask_tell_session_killed_with_a_trial_outstanding_is_recovered_by_the_next_on_postgresql() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    a_killed_session_is_recovered(&url, None);
    drop(server);
}

#[test]
fn a_live_ask_tell_session_stamps_its_heartbeat_and_keeps_its_trials() {
    let sb = Sandbox::new();
    sb.write("space.toml", ASK_TELL_SPACE);
    let mut a = Session::start(&sb, "tune.db");
    let (n0, _) = a.ask();
    let beat = || -> String {
        sb.db("tune.db")
            .query_row(
                "SELECT h.heartbeat FROM trial_heartbeats h JOIN trials t USING (trial_id)
                 WHERE t.number = ?1",
                [n0 as i64],
                |r| r.get(0),
            )
            .unwrap_or_default()
    };
    let first = beat();
    crate::common::wait_until(crate::common::PATIENCE, "a newer heartbeat", || {
        let now = beat();
        !now.is_empty() && now > first
    });
    // A second session on the study recovers nothing of a live one.
    let mut b = Session::start(&sb, "tune.db");
    let (n1, _) = b.ask();
    assert_ne!(n1, n0);
    b.tell(n1, 1.0);
    a.tell(n0, 2.0);
    for s in [a, b] {
        let (code, err) = s.finish();
        assert_eq!(code, Some(0), "{err}");
        assert!(!err.contains("recovered"), "{err}");
    }
    let rows = trials_of(&sb, "tune.db", "s");
    assert!(rows.iter().all(|t| t["state"] == "complete"), "{rows:#?}");
}

/// Malformed database locations with a password, each of a kind that used to print it or
/// become a SQLite file named after it.
const MALFORMED_WITH_PASSWORD: &[&str] = &[
    "postgresql://u:pw/SECRET@db.example/tune",
    "postgresql://u:pw?SECRET@db.example/tune",
    "postgresql://u:SECRET@db.example:notaport/tune",
    "postgresql:/u:SECRET@db.example/tune",
    "postgres:u:SECRET@db.example/tune",
    "host=db.example password=SECRET dbname=tune",
    "host=db.example password='SEC RET' dbname=tune",
    "mysql:/u:SECRET@db.example/tune",
];

/// What is in the sandbox, by name.
fn files(sb: &Sandbox) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(sb.path())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_malformed_database_url_is_refused_without_its_password_and_creates_no_file() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": 1}\"\n");
    sb.write("s.toml", &sh_study("secret", 1, 1, "", &["{x}"]));
    let before = files(&sb);
    for url in MALFORMED_WITH_PASSWORD {
        let mut tries: Vec<(String, std::process::Output)> = Vec::new();
        for args in [
            vec!["run", "s.toml", "--no-tui", "--db", url],
            vec!["trials", "--db", url],
            vec!["copy", "--from", url, "--to", "copy.db"],
            vec!["copy", "--from", "tune.db", "--to", url],
            vec!["trials", "--study", "secret", url],
            vec![url],
        ] {
            tries.push((args.join(" "), sb.run(&args)));
        }
        let mut env = sb.tune(&["run", "s.toml", "--no-tui"]);
        env.env("TUNE_DB", url);
        tries.push((
            "TUNE_DB".into(),
            crate::common::output_within(env, crate::common::PATIENCE),
        ));
        sb.write(
            "k.toml",
            &sh_study("secret", 1, 1, &format!("storage = {url:?}"), &["{x}"]),
        );
        tries.push((
            "[study] storage".into(),
            sb.run(&["run", "k.toml", "--no-tui"]),
        ));
        for (how, out) in tries {
            let all = text(&out);
            assert_eq!(out.status.code(), Some(2), "{url} via {how}: {all}");
            assert!(
                !all.contains("SECRET") && !all.contains("SEC RET"),
                "{url} via {how}: {all}"
            );
        }
        std::fs::remove_file(sb.join("k.toml")).expect("remove k.toml");
        assert_eq!(files(&sb), before, "{url} created a file");
    }
}

#[test]
fn a_password_in_the_study_file_is_neither_stored_with_it_nor_copied() {
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let password = test_server::PASSWORD;
    assert!(
        url.contains(password),
        "the test URL carries the password: {url}"
    );
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    let study = sh_study(
        "stored",
        2,
        1,
        &format!("storage = {url:?}  # with its password"),
        &["{x}", "password=not-a-db-secret"],
    );
    sb.write("s.toml", &study);
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    assert!(!text(&out).contains(password), "{}", text(&out));
    let stored = server
        .psql(test_db(&url), "SELECT config_toml FROM tune_studies")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!stored.contains(password), "stored verbatim: {stored}");
    assert!(
        stored.contains(&url.replace(&format!(":{password}@"), "@")),
        "the URL is kept, without its password: {stored}"
    );
    // The trial's own arguments are the user's, and kept whatever they hold.
    assert!(stored.contains("password=not-a-db-secret"), "{stored}");
    // A second run (the file unchanged) and a copy keep it so.
    sb.ok(&["run", "s.toml", "--no-tui"]);
    sb.ok(&[
        "copy", "--from", &url, "--to", "copy.db", "--study", "stored",
    ]);
    let copied: String = sb
        .db("copy.db")
        .query_row("SELECT config_toml FROM tune_studies", [], |r| r.get(0))
        .expect("the copied study file");
    assert!(!copied.contains(password), "copied verbatim: {copied}");
    // A worker still runs the study from what is stored, by its own URL.
    let worker = sb.run(&[
        "worker",
        "--db",
        &url,
        "--study",
        "stored",
        "--devices",
        "cpu",
    ]);
    assert!(!text(&worker).contains(password), "{}", text(&worker));
    drop(server);
}

#[test]
fn trials_get_no_database_credentials_unless_the_study_file_passes_them() {
    let sb = Sandbox::new();
    sb.write(
        "trial.sh",
        "env > \"env-$TUNE_TRIAL.txt\"\necho \"tune: {\\\"loss\\\": 1}\"\n",
    );
    let secrets = [
        ("TUNE_DB", "tune.db"),
        ("PGPASSWORD", "pw-SECRET"),
        ("PGPASSFILE", "/nowhere/SECRET-pgpass"),
    ];
    sb.write("s.toml", &sh_study("env", 1, 1, "", &["{x}"]));
    let mut cmd = sb.tune(&["run", "s.toml", "--no-tui"]);
    cmd.envs(secrets);
    let out = crate::common::output_within(cmd, crate::common::PATIENCE);
    assert!(out.status.success(), "{}", text(&out));
    let env = std::fs::read_to_string(sb.join("env-0.txt")).expect("the trial's environment");
    for (k, _) in secrets {
        assert!(!env.contains(&format!("{k}=")), "{k} was passed on:\n{env}");
    }
    assert!(env.contains("TUNE_TRIAL=0"), "{env}");
    // `[trial] env` passes one on purpose.
    let study = sh_study("env2", 1, 1, "", &["{x}"])
        .replace("[trial]\n", "[trial]\nenv = { PGPASSWORD = \"given\" }\n");
    sb.write("s.toml", &study);
    let mut cmd = sb.tune(&["run", "s.toml", "--no-tui"]);
    cmd.envs(secrets);
    let out = crate::common::output_within(cmd, crate::common::PATIENCE);
    assert!(out.status.success(), "{}", text(&out));
    let env = std::fs::read_to_string(sb.join("env-0.txt")).expect("the trial's environment");
    assert!(env.contains("PGPASSWORD=given"), "{env}");
    assert!(!env.contains("SECRET"), "{env}");
}
