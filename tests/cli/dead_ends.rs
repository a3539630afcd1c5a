//! Dead ends that name the way out (issue 29): a refusal or a failure that leaves the user
//! stuck says what happened and which command gets them going again, from the real binary.

use std::path::Path;

use rstest::rstest;

use crate::common::{Sandbox, sh_study, stderr, text};

/// A trial script that reports `loss` = its first argument.
const REPORTS_X: &str = "echo \"tune: {\\\"loss\\\": $1}\"\n";

/// Asserts a refusal: exit status 2 and every needle in standard error.
fn assert_refused(out: &std::process::Output, needles: &[&str]) {
    assert_eq!(out.status.code(), Some(2), "{}", text(out));
    let err = stderr(out);
    for n in needles {
        assert!(err.contains(n), "`{n}` not in:\n{}", text(out));
    }
}

/// The sandbox's absolute path, as the binary sees its working directory.
fn real(sb: &Sandbox) -> String {
    std::fs::canonicalize(sb.path())
        .expect("the sandbox exists")
        .display()
        .to_string()
}

// ---- item 8: a query that finds no database says where it looked ----

/// A sandbox laid out like the repository: a study run from the root whose database is
/// `studies/tune.db`, beside its file.
fn repository_layout() -> Sandbox {
    let sb = Sandbox::new();
    sb.write("studies/trial.sh", REPORTS_X);
    sb.write("studies/s.toml", &sh_study("s", 2, 1, "", &["{x}"]));
    sb.ok(&["run", "studies/s.toml", "--no-tui"]);
    assert!(sb.join("studies/tune.db").is_file());
    assert!(!sb.join("tune.db").exists());
    sb
}

#[rstest]
#[case::studies(&["studies"], false)]
#[case::trials(&["trials", "--study", "s"], true)]
#[case::best(&["best", "--study", "s"], true)]
#[case::show(&["show", "0", "--study", "s"], true)]
#[case::watch(&["watch", "--study", "s"], true)]
#[case::discard(&["discard", "0", "--study", "s"], true)]
#[case::delete(&["delete", "--study", "s", "--yes"], true)]
fn a_query_from_the_wrong_directory_says_where_it_looked_and_names_the_database_found(
    #[case] args: &[&str],
    #[case] takes_a_file: bool,
) {
    let sb = repository_layout();
    let out = sb.run(args);
    let looked = format!("{}/tune.db", real(&sb));
    assert_refused(
        &out,
        &[
            &looked,
            "current directory",
            "--db studies/tune.db",
            "TUNE_DB",
        ],
    );
    assert_eq!(
        stderr(&out).contains("study file instead"),
        takes_a_file,
        "{}",
        text(&out)
    );
    // The way out it names works, and nothing was created where it looked.
    let mut fixed: Vec<&str> = args.to_vec();
    fixed.extend(["--db", "studies/tune.db"]);
    if args[0] != "watch" {
        sb.ok(&fixed);
    }
    assert!(!sb.join("tune.db").exists());
}

#[test]
fn a_missing_database_named_by_db_or_a_study_file_is_named_with_its_absolute_path() {
    let sb = repository_layout();
    let root = real(&sb);
    // --db that names nothing: where it looked, and the flag it came from.
    let out = sb.run(&["trials", "--study", "s", "--db", "studies/x.db"]);
    assert_refused(&out, &["--db", &format!("{root}/studies/x.db")]);
    let out = sb.run(&["studies", "--db", "x.db"]);
    assert_refused(&out, &["--db", &format!("{root}/x.db")]);
    // A study file that has not run yet: its storage, and the command that creates it.
    sb.write("new/n.toml", &sh_study("n", 2, 1, "", &["{x}"]));
    let out = sb.run(&["trials", "new/n.toml"]);
    assert_refused(
        &out,
        &[
            "new/n.toml",
            &format!("{root}/new/tune.db"),
            "tune run new/n.toml",
        ],
    );
    // A database without the study names the studies it holds.
    let out = sb.run(&["trials", "--study", "nope", "--db", "studies/tune.db"]);
    assert_refused(&out, &["no study named `nope`", "it holds `s`"]);
}

/// The README's querying block, one command per line, split as a shell would (single quotes
/// only, which is all it uses), without `tune` and the comment.
fn readme_queries() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README");
    let section = readme
        .split("## Querying")
        .nth(1)
        .expect("the README has a querying section");
    let block = section
        .split("```sh")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the querying section has a sh block");
    block
        .lines()
        .filter(|l| l.starts_with("tune "))
        .map(|l| {
            let mut words = Vec::new();
            let mut word = String::new();
            let mut quoted = false;
            for c in l.chars() {
                match c {
                    '\'' => quoted = !quoted,
                    '#' if !quoted && word.is_empty() => break,
                    c if c.is_whitespace() && !quoted => {
                        if !word.is_empty() {
                            words.push(std::mem::take(&mut word));
                        }
                    }
                    c => word.push(c),
                }
            }
            if !word.is_empty() {
                words.push(word);
            }
            words.remove(0);
            words
        })
        .collect()
}

#[test]
fn the_readme_querying_commands_work_from_the_repository_root() {
    let sb = Sandbox::new();
    // The real study file with a quick stand-in for its Python script.
    let real_study = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("studies/command-digits.toml"),
    )
    .expect("studies/command-digits.toml");
    let head = real_study
        .split("[trial]")
        .next()
        .expect("the study file has a [trial] table");
    sb.write(
        "studies/command-digits.toml",
        &format!(
            "{head}[trial]\nkind = \"command\"\ncommand = [\"sh\", \"trial.sh\", \"{{lr}}\"]\n"
        ),
    );
    sb.write(
        "studies/trial.sh",
        "[ \"$TUNE_TRIAL\" = 3 ] && exit 1\necho \"tune: {\\\"val_loss\\\": $1}\"\n",
    );
    sb.ok(&["studies/command-digits.toml", "--no-tui"]);
    let commands = readme_queries();
    assert!(commands.len() >= 8, "{commands:?}");
    for mut args in commands {
        if args[0] == "delete" {
            args.push("--yes".into()); // it asks on a terminal; the test has none
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        sb.ok(&args);
    }
}

// ---- item 4: queued trials the budget has no room for ----

#[rstest]
// A finished study: the queued trial has no room at all.
#[case::on_a_finished_study(3, 3, 1, &["is spent", "3 trials counted", "it will not run", "raise `trials` to 4"])]
// Room for one, two queued: one of them waits.
#[case::beyond_the_room_left(3, 2, 2, &["room for 1 more", "1 of them will not run", "raise `trials` to 4"])]
// Two queued on a finished study: none of them runs.
#[case::several_on_a_finished_study(2, 2, 2, &["is spent", "none of them will run", "raise `trials` to 4"])]
fn enqueue_says_when_the_budget_has_no_room_for_the_queue_and_run_names_the_queued_trials_left(
    #[case] trials: u64,
    #[case] run_first: u64,
    #[case] queue: u64,
    #[case] at_enqueue: &[&str],
) {
    let sb = Sandbox::new();
    sb.write("trial.sh", REPORTS_X);
    sb.write("s.toml", &sh_study("q", run_first, 1, "", &["{x}"]));
    sb.ok(&["run", "s.toml", "--no-tui"]);
    sb.write("s.toml", &sh_study("q", trials, 1, "", &["{x}"]));
    let mut last = None;
    for i in 0..queue {
        let params = format!("{{\"x\": 0.{i}5, \"k\": 2, \"c\": \"a\"}}");
        last = Some(sb.ok(&["enqueue", "s.toml", "--params", &params]));
    }
    let out = last.expect("queued at least one");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("queued trial"),
        "{}",
        text(&out)
    );
    for n in at_enqueue {
        assert!(stderr(&out).contains(n), "`{n}` not in:\n{}", text(&out));
    }
    assert!(stderr(&out).contains("s.toml"), "{}", text(&out));

    // The run ends with the queued trials it left, and the `trials` that runs them.
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    let left: Vec<u64> = sb
        .trials("s.toml")
        .iter()
        .filter(|t| t["state"] == "queued")
        .map(|t| t["number"].as_u64().expect("a number"))
        .collect();
    assert!(!left.is_empty());
    let err = stderr(&out);
    let want = format!("raise `trials` to {}", trials + left.len() as u64);
    assert!(err.contains("did not run"), "{}", text(&out));
    assert!(err.contains(&want), "`{want}` not in:\n{}", text(&out));
    for n in &left {
        assert!(err.contains(&n.to_string()), "{}", text(&out));
    }
    // Following it runs them all.
    sb.write(
        "s.toml",
        &sh_study("q", trials + left.len() as u64, 1, "", &["{x}"]),
    );
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    assert!(!stderr(&out).contains("did not run"), "{}", text(&out));
    assert!(
        sb.trials("s.toml").iter().all(|t| t["state"] == "complete"),
        "every queued trial ran"
    );
}

#[test]
fn enqueue_within_the_budget_says_nothing_more() {
    let sb = Sandbox::new();
    sb.write("trial.sh", REPORTS_X);
    sb.write("s.toml", &sh_study("q", 3, 1, "", &["{x}"]));
    let out = sb.ok(&[
        "enqueue",
        "s.toml",
        "--params",
        "{\"x\": 0.5, \"k\": 2, \"c\": \"a\"}",
    ]);
    assert_eq!(stderr(&out), "", "{}", text(&out));
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    assert!(!stderr(&out).contains("did not run"), "{}", text(&out));
}

// ---- item 6: a budget held by failed trials ----

#[test]
fn a_budget_spent_on_failed_trials_names_tune_discard_and_following_it_runs_the_study() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo 'No module named numpy' >&2\nexit 1\n");
    sb.write(
        "s.toml",
        &sh_study("broken", 3, 1, "max_consecutive_failures = 0", &["{x}"]),
    );
    let out = sb.run(&["run", "s.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("tune discard s.toml --state failed"),
        "{}",
        text(&out)
    );
    // Fixed script, same budget: the rerun runs nothing and says how to go on.
    sb.write("trial.sh", REPORTS_X);
    let out = sb.run(&["run", "s.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    for n in [
        "no trial completed",
        "3 trials failed",
        "`trials = 3`",
        "tune discard s.toml --state failed",
    ] {
        assert!(err.contains(n), "`{n}` not in:\n{}", text(&out));
    }
    // The command it names exists with those flags, and then the study runs.
    sb.ok(&["discard", "s.toml", "--state", "failed"]);
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    assert!(!stderr(&out).contains("discard"), "{}", text(&out));
    let complete = sb
        .trials("s.toml")
        .iter()
        .filter(|t| t["state"] == "complete")
        .count();
    assert_eq!(complete, 3);
}

#[test]
fn a_rerun_with_db_names_the_database_in_the_discard_it_suggests() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "exit 1\n");
    sb.write("s.toml", &sh_study("broken", 2, 1, "", &["{x}"]));
    let out = sb.run(&["run", "s.toml", "--no-tui", "--db", "other.db"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("tune discard s.toml --db other.db --state failed"),
        "{}",
        text(&out)
    );
    sb.ok(&["discard", "s.toml", "--db", "other.db", "--state", "failed"]);
}

#[test]
fn a_rerun_of_a_study_whose_budget_was_spent_with_some_failures_says_how_to_run_more() {
    let sb = Sandbox::new();
    sb.write(
        "trial.sh",
        "[ \"$TUNE_TRIAL\" = 1 ] && exit 1\necho \"tune: {\\\"loss\\\": $1}\"\n",
    );
    sb.write("s.toml", &sh_study("some", 3, 1, "", &["{x}"]));
    let first = sb.ok(&["run", "s.toml", "--no-tui"]);
    assert!(!stderr(&first).contains("raise"), "{}", text(&first));
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    let err = stderr(&out);
    for n in [
        "before this run",
        "raise `trials`",
        "tune discard s.toml --state failed",
    ] {
        assert!(err.contains(n), "`{n}` not in:\n{}", text(&out));
    }
}

// ---- item 5: a study file that disagrees with the stored study ----

#[rstest]
#[case::metric("metric = \"loss\"", "metric = \"val_loss\"", "metric `loss`")]
#[case::direction("seed = 5", "seed = 5\ndirection = \"maximize\"", "direction minimize")]
#[case::objectives(
    "metric = \"loss\"",
    "metric = [\"loss\", \"cost\"]\ndirection = [\"minimize\", \"minimize\"]",
    "objectives"
)]
#[case::space(
    "x = { type = \"float\", low = -2.0, high = 2.0 }",
    "x = { type = \"float\", low = -3.0, high = 2.0 }",
    "another search space"
)]
fn a_study_file_that_disagrees_with_the_stored_study_names_the_ways_out_and_delete_works(
    #[case] from: &str,
    #[case] to: &str,
    #[case] what: &str,
    #[values(false, true)] with_db: bool,
) {
    let sb = Sandbox::new();
    // Every trial fails (the script reports a key the file does not ask for): the user's
    // first mistake, found after the study is stored.
    sb.write("trial.sh", "echo \"tune: {\\\"val_loss\\\": $1}\"\n");
    let good = sh_study("s", 2, 1, "", &["{x}"]);
    assert!(good.contains(from), "{from}");
    sb.write("s.toml", &good);
    let db: &[&str] = if with_db { &["--db", "other.db"] } else { &[] };
    let with =
        |args: &[&str]| -> Vec<String> { args.iter().chain(db).map(|s| s.to_string()).collect() };
    let run = with(&["run", "s.toml", "--no-tui"]);
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    assert_eq!(sb.run(&run).status.code(), Some(1));
    let dbfile = if with_db { "other.db" } else { "tune.db" };
    let dump = || {
        let db = sb.db(dbfile);
        let mut s = db
            .prepare("SELECT number, state FROM trials ORDER BY number")
            .expect("select");
        s.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .expect("rows")
            .collect::<Result<Vec<_>, _>>()
            .expect("rows")
    };
    let before = dump();
    sb.write("s.toml", &good.replacen(from, to, 1));
    let out = sb.run(&run);
    let on = if with_db { " --db other.db" } else { "" };
    let delete = format!("`tune delete s.toml{on}`");
    let rerun = format!("`tune run s.toml{on}");
    assert_refused(
        &out,
        &[
            "s.toml",
            what,
            "change the file back",
            "another `study.name`",
            &delete,
            &rerun,
        ],
    );
    if what != "another search space" {
        assert!(
            stderr(&out).contains("2 trials (none complete)"),
            "{}",
            text(&out)
        );
    }
    assert_eq!(dump(), before, "nothing stored changed");
    // `tune enqueue` of the same file says the same.
    let enqueue = with(&[
        "enqueue",
        "s.toml",
        "--params",
        "{\"x\": 0.5, \"k\": 2, \"c\": \"a\"}",
    ]);
    let enqueue: Vec<&str> = enqueue.iter().map(String::as_str).collect();
    if what != "another search space" {
        let out = sb.run(&enqueue);
        assert_refused(&out, &[what, &delete]);
    }
    // The way out it names works: delete, then run the file as it is now.
    let del = with(&["delete", "s.toml", "--yes"]);
    sb.ok(&del.iter().map(String::as_str).collect::<Vec<_>>());
    let out = sb.run(&run);
    assert_ne!(out.status.code(), Some(2), "{}", text(&out));
    if what.starts_with("metric") {
        assert!(
            out.status.success(),
            "the fixed metric completes: {}",
            text(&out)
        );
    }
    assert_eq!(dump().len(), 2, "a fresh study of 2 trials");
}

#[test]
fn ask_tell_on_a_stored_study_with_other_objectives_names_the_ways_out() {
    let sb = Sandbox::new();
    sb.write(
        "space.toml",
        "[space]\nx = { type = \"float\", low = 0.0, high = 1.0 }\n",
    );
    let session = |direction: &str| {
        let mut c = sb.tune(&[
            "ask-tell",
            "--space",
            "space.toml",
            "--db",
            "a.db",
            "--study",
            "at",
            "--direction",
            direction,
        ]);
        c.stdin(std::process::Stdio::piped());
        let mut child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("tune starts");
        drop(child.stdin.take());
        crate::common::wait_output(child, crate::common::PATIENCE)
    };
    let out = session("minimize");
    assert!(out.status.success(), "{}", text(&out));
    let out = session("maximize");
    assert_refused(
        &out,
        &[
            "direction minimize",
            "--study",
            "tune delete --study at --db a.db",
        ],
    );
}

// ---- item 7: a trial without a value says what its output showed ----

#[rstest]
#[case::json_without_the_prefix(
    "echo \"{\\\"loss\\\": $1}\"\n",
    "lacks the `tune: ` prefix",
    &["without the `tune: ` prefix: {\"loss\": ", "0 reports stored"]
)]
#[case::a_logging_prefix_before_it(
    "echo \"INFO:train: tune: {\\\"loss\\\": $1}\"\n",
    "lacks the `tune: ` prefix",
    &["INFO:train: tune: {\"loss\""]
)]
#[case::python_dict_repr(
    "echo \"tune: {'loss': $1}\"\n",
    "malformed report lines were ignored",
    &["1 malformed report line ignored", "not JSON", "tune: {'loss': "]
)]
#[case::a_string_value(
    "echo 'tune: {\"loss\": \"0.5\"}'\necho 'tune: {\"loss\": \"0.4\"}'\n",
    "malformed report lines were ignored",
    &["2 malformed report lines ignored", "must be a number", "tune: {\"loss\": \"0.5\"}"]
)]
#[case::a_wrong_key(
    "echo \"tune: {\\\"val_loss\\\": $1, \\\"acc\\\": 0.5}\"\necho \"tune: {\\\"val_loss\\\": $1}\"\n",
    "its reports had `acc`, `val_loss`",
    &["2 reports stored"]
)]
#[case::on_standard_error(
    "echo \"tune: {\\\"loss\\\": $1}\" >&2\n",
    "went to standard error",
    &["on standard error: tune: {\"loss\""]
)]
#[case::steps_going_backwards(
    "echo 'tune: {\"step\": 5, \"acc\": 1}'\necho 'tune: {\"step\": 2, \"acc\": 1}'\n",
    "its reports had `acc`",
    &["step 2 after step 5"]
)]
#[case::nothing_at_all("echo starting\n", "no report arrived", &["0 reports stored"])]
fn a_trial_without_a_value_says_what_its_output_showed(
    #[case] script: &str,
    #[case] first_line: &str,
    #[case] details: &[&str],
) {
    let sb = Sandbox::new();
    sb.write("trial.sh", script);
    sb.write("s.toml", &sh_study("r", 1, 1, "", &["{x}"]));
    let out = sb.run(&["run", "s.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // The event line: what kind of mistake, and where the rest is.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("trial 0 failed"))
        .unwrap_or_else(|| panic!("no failure line in\n{}", text(&out)));
    assert!(line.contains("without reporting `loss`"), "{line}");
    assert!(line.contains(first_line), "`{first_line}` not in {line}");
    assert!(line.contains("tune show 0"), "{line}");
    // `tune show` and the JSON error: the lines themselves, and what a report looks like.
    let show = sb.ok(&["show", "0", "s.toml"]);
    let show = String::from_utf8_lossy(&show.stdout);
    for d in details
        .iter()
        .chain(&["tune: {\"step\": 3, \"loss\": 0.42}"])
    {
        assert!(show.contains(d), "`{d}` not in:\n{show}");
    }
    let error = sb.trials("s.toml")[0]["error"]
        .as_str()
        .expect("an error")
        .to_string();
    assert!(error.contains(first_line), "{error}");
}

#[test]
fn trials_that_miss_the_prefix_with_different_values_still_stop_the_study_as_failing_the_same_way()
{
    let sb = Sandbox::new();
    // Each trial prints other numbers: the failure must still read as the same one.
    sb.write("trial.sh", "echo \"{\\\"loss\\\": $1}\"\n");
    sb.write(
        "s.toml",
        &sh_study("r", 20, 1, "max_consecutive_failures = 3", &["{x}"]),
    );
    let out = sb.run(&["run", "s.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("3 trials in a row failed the same way"),
        "{}",
        text(&out)
    );
    assert_eq!(sb.trials("s.toml").len(), 3);
}

#[test]
fn a_very_long_line_is_shown_cut_in_the_failure() {
    let sb = Sandbox::new();
    sb.write(
        "trial.sh",
        "printf '{\"loss\": 1, \"pad\": \"%s\"}\\n' \"$(head -c 100000 /dev/zero | tr '\\0' a)\"\n",
    );
    sb.write("s.toml", &sh_study("r", 1, 1, "", &["{x}"]));
    sb.run(&["run", "s.toml", "--no-tui"]);
    let error = sb.trials("s.toml")[0]["error"]
        .as_str()
        .expect("an error")
        .to_string();
    assert!(error.contains("lacks the `tune: ` prefix"), "{error}");
    assert!(error.contains('…'), "cut: {}", error.len());
    assert!(error.len() < 2_000, "{} bytes", error.len());
}

#[test]
fn a_worker_on_a_budget_held_by_failed_trials_names_the_discard_by_study_name_and_database() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "exit 1\n");
    sb.write("s.toml", &sh_study("w", 2, 1, "", &["{x}"]));
    assert_eq!(
        sb.run(&["run", "s.toml", "--no-tui"]).status.code(),
        Some(1)
    );
    let out = sb.run(&["worker", "--db", "tune.db", "--study", "w", "--no-tui"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let discard = "tune discard --study w --db tune.db --state failed";
    assert!(stderr(&out).contains(discard), "{}", text(&out));
    sb.ok(&[
        "discard", "--study", "w", "--db", "tune.db", "--state", "failed",
    ]);
    sb.write("trial.sh", REPORTS_X);
    sb.ok(&["worker", "--db", "tune.db", "--study", "w", "--no-tui"]);
}

#[test]
fn enqueue_entries_in_the_study_file_beyond_its_budget_are_named_when_the_run_ends() {
    let sb = Sandbox::new();
    sb.write("trial.sh", REPORTS_X);
    let study = format!(
        "{}\n[[enqueue]]\nx = 0.5\nk = 1\nc = \"a\"\n\n[[enqueue]]\nx = 0.25\nk = 2\nc = \"b\"\n",
        sh_study("e", 1, 1, "", &["{x}"])
    );
    sb.write("s.toml", &study);
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    let err = stderr(&out);
    assert!(
        err.contains("queued trial 1 of study `e` did not run"),
        "{}",
        text(&out)
    );
    assert!(
        err.contains("raise `trials` to 2 in s.toml"),
        "{}",
        text(&out)
    );
}
