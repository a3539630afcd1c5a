//! The query commands of `shared/spec/cli.md` on a study the binary ran: filters, sorting,
//! limits, the JSON object of a trial, CSV, `tune studies`, `tune best`, and the SQL view.

use serde_json::Value;

use crate::common::{Sandbox, sh_study};

fn json(out: std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn queries_filter_sort_limit_and_print_json_csv_and_tables_as_the_cli_spec_says() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("queries", 6, 2, "", &["{x}"]));
    sb.write(
        "trial.sh",
        "[ \"$TUNE_TRIAL\" = 1 ] && exit 1\necho \"tune: {\\\"step\\\": 0, \\\"loss\\\": $1, \\\"acc\\\": 0.5}\"\n",
    );
    sb.ok(&["run", "s.toml"]);
    let all = sb.trials("s.toml");
    assert_eq!(all.len(), 6);
    // One object per trial with exactly the keys of the spec.
    for t in &all {
        let mut keys: Vec<&str> = t
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "duration_s",
                "error",
                "finished_at",
                "metrics",
                "number",
                "params",
                "started_at",
                "state",
                "value"
            ]
        );
    }
    let failed = json(sb.ok(&["trials", "s.toml", "--state", "failed", "--format", "json"]));
    assert_eq!(failed.as_array().map(Vec::len), Some(1));
    assert_eq!(failed[0]["number"], 1);
    assert!(
        failed[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("status 1"))
    );
    let complete = json(sb.ok(&[
        "trials", "s.toml", "--state", "complete", "--format", "json",
    ]));
    assert_eq!(complete.as_array().map(Vec::len), Some(5));

    // Sorted by value (minimize: smallest first), limited.
    let mut values: Vec<f64> = all.iter().filter_map(|t| t["value"].as_f64()).collect();
    values.sort_by(f64::total_cmp);
    let top = json(sb.ok(&[
        "trials", "s.toml", "--sort", "value", "--limit", "2", "--format", "json",
    ]));
    let top: Vec<f64> = top
        .as_array()
        .expect("array")
        .iter()
        .map(|t| t["value"].as_f64().expect("value"))
        .collect();
    assert_eq!(top, values[..2]);
    let best = json(sb.ok(&["best", "s.toml", "--format", "json"]));
    assert_eq!(best["value"].as_f64(), Some(values[0]));
    let by_name = json(sb.ok(&["best", "--study", "queries", "--format", "json"]));
    assert_eq!(
        by_name, best,
        "`--study NAME` finds tune.db in the working directory"
    );

    // CSV: a header, then one row per trial, params and metrics as columns.
    let csv =
        String::from_utf8(sb.ok(&["trials", "s.toml", "--format", "csv"]).stdout).expect("UTF-8");
    let mut lines = csv.lines();
    let header = lines.next().expect("a header");
    for col in [
        "number",
        "state",
        "value",
        "params.x",
        "params.k",
        "params.c",
        "metrics.loss",
    ] {
        assert!(header.split(',').any(|h| h == col), "`{col}` in `{header}`");
    }
    assert_eq!(lines.count(), 6);

    // Tables for people.
    let table = String::from_utf8(sb.ok(&["trials", "s.toml"]).stdout).expect("UTF-8");
    assert!(
        table.contains("state") && table.contains("complete") && table.contains("failed"),
        "{table}"
    );

    // `tune studies`: counts by state and the best value.
    let studies = json(sb.ok(&["studies", "--format", "json"]));
    let s = &studies[0];
    assert_eq!(s["name"], "queries");
    assert_eq!(s["complete"], 5);
    assert_eq!(s["failed"], 1);
    assert_eq!(s["best_value"].as_f64(), Some(values[0]));

    // The SQL view gives a row per trial with its params and value.
    let db = sb.db("tune.db");
    let rows: Vec<(i64, String, Option<f64>, String)> = db
        .prepare("SELECT number, state, value, params FROM tune_trials_view WHERE study = 'queries' ORDER BY number")
        .expect("the view exists")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(rows.len(), 6);
    for ((n, state, value, params), t) in rows.iter().zip(&all) {
        assert_eq!(t["number"], *n);
        assert_eq!(t["state"], state.as_str());
        assert_eq!(t["value"].as_f64(), *value);
        let p: Value = serde_json::from_str(params).expect("params are a JSON object");
        assert_eq!(p, t["params"], "trial {n}");
    }
}

#[test]
fn studies_and_show_print_csv_too() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("curves", 2, 1, "", &["{x}"]));
    sb.write(
        "trial.sh",
        "for s in 0 1 2; do echo \"tune: {\\\"step\\\": $s, \\\"loss\\\": $1, \\\"acc\\\": 0.$s}\"; done\n",
    );
    sb.ok(&["run", "s.toml"]);
    let best = json(sb.ok(&["best", "s.toml", "--format", "json"]));

    let studies = String::from_utf8(sb.ok(&["studies", "--format", "csv"]).stdout).expect("UTF-8");
    let mut rows = csv_rows(&studies);
    let header = rows.remove(0);
    assert_eq!(rows.len(), 1, "{studies}");
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    assert_eq!(rows[0][col("study")], "curves");
    assert_eq!(rows[0][col("complete")], "2");
    assert_eq!(
        rows[0][col("best_value")].parse::<f64>().ok(),
        best["value"].as_f64()
    );
    assert_eq!(rows[0][col("best_trial")], best["number"].to_string());

    // `show --format csv` is the trial's learning curve: one row per report.
    let show = String::from_utf8(sb.ok(&["show", "0", "s.toml", "--format", "csv"]).stdout)
        .expect("UTF-8");
    let mut rows = csv_rows(&show);
    let header = rows.remove(0);
    for c in ["trial", "step", "final", "acc", "loss", "at"] {
        assert!(header.iter().any(|h| h == c), "`{c}` in {header:?}");
    }
    let step = header.iter().position(|h| h == "step").expect("step");
    let acc = header.iter().position(|h| h == "acc").expect("acc");
    let steps: Vec<&str> = rows.iter().map(|r| r[step].as_str()).collect();
    assert_eq!(steps, ["0", "1", "2"], "{show}");
    assert_eq!(rows[2][acc], "0.2");
}

fn csv_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

#[test]
fn why_a_trial_failed_is_in_the_event_line_the_trials_table_csv_and_show() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("why", 2, 1, "", &["{x}"]));
    // Trial 1 fails the way a Python script does: a traceback on stderr, then status 1.
    sb.write(
        "trial.sh",
        "if [ \"$TUNE_TRIAL\" = 1 ]; then\n  echo 'Traceback (most recent call last):' >&2\n  echo '  File \"train.py\", line 3' >&2\n  echo 'ValueError: lr must be positive' >&2\n  exit 1\nfi\necho \"tune: {\\\"loss\\\": $1}\"\n",
    );
    let run = sb.ok(&["run", "s.toml", "--no-tui"]);
    let lines = String::from_utf8(run.stdout).expect("UTF-8");
    let failed = lines
        .lines()
        .find(|l| l.contains("trial 1 failed"))
        .unwrap_or_else(|| panic!("no failure line in:\n{lines}"));
    assert!(
        failed.contains("exited with status 1")
            && failed.ends_with("ValueError: lr must be positive"),
        "{failed}"
    );

    let table = String::from_utf8(sb.ok(&["trials", "s.toml"]).stdout).expect("UTF-8");
    assert!(table.contains("ValueError: lr must be positive"), "{table}");

    let csv =
        String::from_utf8(sb.ok(&["trials", "s.toml", "--format", "csv"]).stdout).expect("UTF-8");
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let headers = reader.headers().expect("a header").clone();
    let tail_col = headers
        .iter()
        .position(|h| h == "log_tail")
        .expect("log_tail column");
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("a row")).collect();
    assert!(rows[1][tail_col].contains("Traceback"), "{csv}");
    assert!(
        rows[1][tail_col].ends_with("ValueError: lr must be positive"),
        "{csv}"
    );
    assert_eq!(&rows[0][tail_col], "", "{csv}");

    let show = String::from_utf8(sb.ok(&["show", "1", "s.toml"]).stdout).expect("UTF-8");
    assert!(show.contains("ValueError: lr must be positive"), "{show}");

    // And in SQL: the view has the stderr tail and the machine.
    let (tail, host): (Option<String>, Option<String>) = sb
        .db("tune.db")
        .query_row(
            "SELECT log_tail, host FROM tune_trials_view WHERE study = 'why' AND number = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the view has log_tail and host");
    assert!(
        tail.is_some_and(|t| t.ends_with("ValueError: lr must be positive")),
        "the view's log_tail"
    );
    assert!(host.is_some_and(|h| !h.is_empty()), "the view's host");
}

#[test]
fn tune_delete_asks_or_needs_yes_then_removes_the_study_whole() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    sb.write("s.toml", &sh_study("doomed", 3, 1, "", &["{x}"]));
    sb.write("k.toml", &sh_study("kept", 2, 1, "", &["{x}"]));
    sb.ok(&["run", "s.toml"]);
    sb.ok(&["run", "k.toml"]);
    // No terminal to ask on: refused, nothing deleted.
    let out = sb.run(&["delete", "s.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", crate::common::text(&out));
    assert!(crate::common::stderr(&out).contains("--yes"));
    assert_eq!(sb.trials("s.toml").len(), 3);

    let out = sb.ok(&["delete", "--study", "doomed", "--yes"]);
    let said = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(said.contains("deleted study `doomed` (3 trials)"), "{said}");
    assert!(
        said.contains("runs"),
        "says where the trial directories are: {said}"
    );
    let studies = json(sb.ok(&["studies", "--format", "json"]));
    let names: Vec<&str> = studies
        .as_array()
        .expect("array")
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["kept"]);
    assert_eq!(sb.trials("k.toml").len(), 2, "the other study is untouched");
    let db = sb.db("tune.db");
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).expect(sql) };
    assert_eq!(count("SELECT COUNT(*) FROM trials"), 2);
    for table in [
        "trial_params",
        "trial_values",
        "trial_intermediate_values",
        "trial_heartbeats",
        "tune_reports",
        "tune_trials",
    ] {
        let orphans = count(&format!(
            "SELECT COUNT(*) FROM {table} WHERE trial_id NOT IN (SELECT trial_id FROM trials)"
        ));
        assert_eq!(orphans, 0, "{table} keeps rows of the deleted study");
    }
    for table in ["study_directions", "tune_studies", "tune_workers"] {
        let orphans = count(&format!(
            "SELECT COUNT(*) FROM {table} WHERE study_id NOT IN (SELECT study_id FROM studies)"
        ));
        assert_eq!(orphans, 0, "{table} keeps rows of the deleted study");
    }
    // The study file runs again from scratch, with its whole budget.
    sb.ok(&["run", "s.toml"]);
    assert_eq!(sb.trials("s.toml").len(), 3);
    // A study that is not there: status 2.
    let out = sb.run(&["delete", "--study", "nope", "--yes"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn discarded_trials_stay_visible_but_give_the_budget_back_and_the_sampler_forgets_them() {
    // The user's story: a broken set-up (a missing data file) fails every trial and spends
    // the budget; after fixing it, the failures are discarded and the study runs again.
    let sb = Sandbox::new();
    sb.write(
        "trial.sh",
        "[ -f data.csv ] || { echo \"data.csv: no such file\" >&2; exit 1; }\n\
         echo \"tune: {\\\"loss\\\": $1, \\\"val_acc\\\": 0.5}\"\n",
    );
    sb.write("s.toml", &sh_study("broken", 3, 1, "", &["{x}"]));
    let out = sb.run(&["run", "s.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(1), "{}", crate::common::text(&out));
    assert_eq!(crate::common::counted(&sb.trials("s.toml")), 3);
    let out = sb.run(&["run", "s.toml", "--no-tui"]);
    assert!(
        crate::common::text(&out).contains("budget"),
        "the budget is spent: {}",
        crate::common::text(&out)
    );

    // Bad requests change nothing.
    for (args, says) in [
        (vec!["discard", "s.toml", "7"], "has no trial 7"),
        (vec!["discard", "s.toml"], "say which trials"),
        (vec!["discard", "s.toml", "2-1"], "lower number"),
        (vec!["discard", "s.toml", "x"], "neither a trial number"),
    ] {
        let out = sb.run(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            crate::common::text(&out)
        );
        assert!(
            crate::common::stderr(&out).contains(says),
            "{args:?}: {}",
            crate::common::text(&out)
        );
    }
    assert!(
        sb.trials("s.toml")
            .iter()
            .all(|t| t.get("discarded").is_none())
    );

    let out = sb.ok(&["discard", "s.toml", "--state", "failed"]);
    let said = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        said.contains("discarded 3 trials of study `broken`"),
        "{said}"
    );
    assert!(said.contains("the budget now counts 0 trials"), "{said}");
    // Still there, marked, in every output.
    let trials = sb.trials("s.toml");
    assert_eq!(trials.len(), 3);
    assert!(
        trials
            .iter()
            .all(|t| t["discarded"] == true && t["state"] == "failed")
    );
    let table = String::from_utf8(sb.ok(&["trials", "s.toml"]).stdout).expect("UTF-8");
    assert_eq!(table.matches("failed (discarded)").count(), 3, "{table}");
    let csv =
        String::from_utf8(sb.ok(&["trials", "s.toml", "--format", "csv"]).stdout).expect("UTF-8");
    assert!(
        csv.lines().next().expect("header").contains("discarded"),
        "{csv}"
    );
    let db = sb.db("tune.db");
    let marked: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM tune_trials_view WHERE study = 'broken' AND discarded",
            [],
            |r| r.get(0),
        )
        .expect("the view has the mark");
    assert_eq!(marked, 3);

    // Fixed, the study runs its whole budget again; the best is one of the new trials.
    sb.write("data.csv", "1\n");
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    let trials = sb.trials("s.toml");
    assert_eq!(trials.len(), 6, "{}", crate::common::text(&out));
    assert!(trials[3..].iter().all(|t| t["state"] == "complete"));
    let best = json(sb.ok(&["best", "s.toml", "--format", "json"]));
    assert!(best["number"].as_u64().expect("number") >= 3);

    // A restored trial counts again: the budget of 3 is then over-full, nothing new starts.
    let said =
        String::from_utf8(sb.ok(&["discard", "--restore", "0", "s.toml"]).stdout).expect("UTF-8");
    assert!(said.contains("restored 1 trial"), "{said}");
    assert!(said.contains("the budget now counts 4 trials"), "{said}");
    sb.run(&["run", "s.toml", "--no-tui"]);
    assert_eq!(sb.trials("s.toml").len(), 6);
}
