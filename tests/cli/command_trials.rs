//! Command trials (`shared/spec/command-trials.md`) run by the real binary: the budget, the
//! slots, what the command gets, what it says back, and how it fails.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Sandbox, assert_numbers_once, counted, sh_study, stderr, text};

/// Reports step 0 and 1 (the objective is `x` at the last step) after a short sleep, and
/// leaves what it was given in its trial directory.
const REPORTING: &str = r#"
echo "a line of log"
echo "a line of error" >&2
env | grep '^TUNE_\|^CUDA_VISIBLE_DEVICES' > "$TUNE_TRIAL_DIR/env.txt"
printf '%s\n' "$@" > "$TUNE_TRIAL_DIR/args.txt"
pwd -P > "$TUNE_TRIAL_DIR/cwd.txt"
echo 'tune: {"step": 0, "loss": 10.5, "acc": 0.1}'
sleep 0.3
echo "tune: {\"step\": 1, \"loss\": $1, \"acc\": $2}"
"#;

const ARGS: &[&str] = &["{x}", "{k}", "{c}", "{trial}", "{trial_dir}", "{device}"];

fn time(t: &Value, key: &str) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(t[key].as_str().expect("a timestamp")).expect("RFC 3339")
}

#[test]
fn a_command_study_with_two_workers_runs_to_its_budget() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("budget", 6, 2, "", ARGS));
    sb.write("trial.sh", REPORTING);
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);

    let trials = sb.trials("s.toml");
    assert_eq!(trials.len(), 6, "{}", text(&out));
    assert!(
        trials.iter().all(|t| t["state"] == "complete"),
        "{trials:#?}"
    );
    assert_numbers_once(&trials);
    // Two slots: never more than two trials at once, and some ran side by side.
    let mut max_at_once = 0;
    for t in &trials {
        let s = time(t, "started_at");
        let at_once = trials
            .iter()
            .filter(|u| time(u, "started_at") <= s && s < time(u, "finished_at"))
            .count();
        max_at_once = max_at_once.max(at_once);
    }
    assert_eq!(max_at_once, 2, "two slots run two trials at once");
    // The study prints one line per trial event on a pipe.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches(" started on cpu").count(), 6, "{stdout}");
    assert_eq!(stdout.matches(" complete in ").count(), 6, "{stdout}");
    assert!(stdout.contains("the trial budget is spent"), "{stdout}");
}

#[test]
fn the_value_is_the_metric_of_the_last_report_and_every_report_is_stored() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("reports", 2, 2, "", ARGS));
    sb.write("trial.sh", REPORTING);
    sb.ok(&["run", "s.toml"]);
    for t in sb.trials("s.toml") {
        let n = t["number"].to_string();
        assert_eq!(t["value"], t["params"]["x"], "the value is the last `loss`");
        assert_eq!(t["metrics"]["acc"].as_f64(), t["params"]["k"].as_f64());
        let show: Value =
            serde_json::from_slice(&sb.ok(&["show", &n, "s.toml", "--format", "json"]).stdout)
                .expect("JSON");
        let steps: Vec<(u64, f64)> = show["reports"]
            .as_array()
            .expect("reports")
            .iter()
            .map(|r| {
                (
                    r["step"].as_u64().expect("step"),
                    r["metrics"]["loss"].as_f64().expect("loss"),
                )
            })
            .collect();
        assert_eq!(steps, [(0, 10.5), (1, t["value"].as_f64().expect("value"))]);
        // Everything else the command printed went to its logs, whose paths are recorded.
        let logs: Vec<String> = show["logs"]
            .as_array()
            .expect("logs")
            .iter()
            .map(|l| l.as_str().expect("a path").to_string())
            .collect();
        let all: String = logs
            .iter()
            .map(|l| std::fs::read_to_string(sb.path().join(l)).expect("a log file"))
            .collect();
        assert!(
            all.contains("a line of log") && all.contains("a line of error"),
            "{all}"
        );
        assert!(
            !all.contains("tune: {"),
            "reports are not logged as output: {all}"
        );
    }
}

#[test]
fn the_command_gets_its_params_in_full_precision_its_environment_and_the_study_directory() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("env", 2, 1, "", ARGS));
    sb.write("trial.sh", REPORTING);
    sb.ok(&["run", "s.toml"]);
    for t in sb.trials("s.toml") {
        let n = t["number"].as_u64().expect("number");
        let show: Value = serde_json::from_slice(
            &sb.ok(&["show", &n.to_string(), "s.toml", "--format", "json"])
                .stdout,
        )
        .expect("JSON");
        let dir = std::path::PathBuf::from(show["trial_dir"].as_str().expect("trial_dir"));
        let dir = sb.path().join(dir);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("the script wrote it");
        let args: Vec<String> = read("args.txt").lines().map(str::to_string).collect();
        let x: f64 = args[0].parse().expect("{x} is a number");
        assert_eq!(
            x.to_bits(),
            t["params"]["x"].as_f64().expect("x").to_bits(),
            "{args:?}"
        );
        assert_eq!(args[1], t["params"]["k"].to_string());
        assert_eq!(args[2], t["params"]["c"].as_str().expect("c"));
        assert_eq!(args[3], n.to_string());
        assert_eq!(
            std::fs::canonicalize(sb.path().join(&args[4])).expect("{trial_dir} exists"),
            std::fs::canonicalize(&dir).expect("trial dir")
        );
        assert_eq!(args[5], "cpu");
        let env: std::collections::BTreeMap<String, String> = read("env.txt")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(env["TUNE_TRIAL"], n.to_string());
        assert_eq!(env["TUNE_DEVICE"], "cpu");
        let params: Value = serde_json::from_str(&env["TUNE_PARAMS"]).expect("TUNE_PARAMS is JSON");
        assert_eq!(params, t["params"]);
        assert_eq!(
            std::fs::canonicalize(&env["TUNE_TRIAL_DIR"]).expect("TUNE_TRIAL_DIR exists"),
            std::fs::canonicalize(&dir).expect("trial dir")
        );
        assert_eq!(
            read("cwd.txt").trim(),
            std::fs::canonicalize(sb.path())
                .expect("sandbox")
                .display()
                .to_string(),
            "the working directory is the study file's directory"
        );
    }
}

#[test]
fn a_trial_that_reports_its_own_param_gets_exactly_that_value() {
    // Pins full precision end to end: the float in argv, the report parsed back, the value
    // stored. A parser that rounds (serde_json without `float_roundtrip`) is 1 ulp off here.
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("exact", 8, 2, "", &["{x}"]));
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    sb.ok(&["run", "s.toml"]);
    let db = sb.db("tune.db");
    let mut stmt = db
        .prepare(
            "SELECT p.param_value, v.value FROM trial_params p
             JOIN trial_values v ON v.trial_id = p.trial_id WHERE p.param_name = 'x'",
        )
        .expect("query");
    let pairs: Vec<(f64, f64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(pairs.len(), 8);
    for (p, v) in pairs {
        assert_eq!(p.to_bits(), v.to_bits(), "param {p:?} came back as {v:?}");
    }
}

#[test]
fn a_final_report_gives_the_value_without_being_an_intermediate_one() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("final", 1, 1, "", &[]));
    sb.write(
        "trial.sh",
        r#"echo 'tune: {"step": 0, "loss": 3.5}'
echo 'tune: {"step": 1, "loss": 2.5}'
echo 'tune: {"final": true, "loss": 0.125}'
"#,
    );
    sb.ok(&["run", "s.toml"]);
    let t = &sb.trials("s.toml")[0];
    assert_eq!(t["state"], "complete");
    assert_eq!(t["value"], 0.125);
    let steps: Vec<(i64, f64)> = sb
        .db("tune.db")
        .prepare("SELECT step, intermediate_value FROM trial_intermediate_values ORDER BY step")
        .expect("query")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(steps, [(0, 3.5), (1, 2.5)]);
}

#[test]
fn failed_trials_are_data_with_their_reason_and_the_study_goes_on() {
    let sb = Sandbox::new();
    sb.write(
        "s.toml",
        &sh_study("failing", 6, 2, "max_consecutive_failures = 0", &[]),
    );
    sb.write(
        "trial.sh",
        r#"case $TUNE_TRIAL in
0) echo 'tune: {"loss": 1.0}'; echo "boom: the GPU caught fire" >&2; exit 3 ;;
1) echo "no report at all" ;;
2) echo 'tune: {"loss": NaN}' ;;
3) echo 'tune: {"loss": 1.0}'; kill -9 $$ ;;
4) echo 'tune: {"acc": 0.5}' ;;
*) echo 'tune: {"loss": 0.5}' ;;
esac
"#,
    );
    let out = sb.ok(&["run", "s.toml"]);
    let trials = sb.trials("s.toml");
    assert_eq!(
        trials.len(),
        6,
        "failed trials count toward the budget: {}",
        text(&out)
    );
    let error = |n: usize| trials[n]["error"].as_str().unwrap_or_default().to_string();
    for (n, want) in [
        (0, "exited with status 3"),
        (1, "no value"),
        (2, "not a finite number"),
        (3, "SIGKILL"),
        (4, "no value"),
    ] {
        assert_eq!(trials[n]["state"], "failed", "trial {n}: {:#}", trials[n]);
        assert!(trials[n]["value"].is_null(), "a failed trial has no value");
        assert!(
            error(n).contains(want),
            "trial {n}: `{}` lacks `{want}`",
            error(n)
        );
    }
    assert_eq!(trials[5]["state"], "complete");
    let show: Value =
        serde_json::from_slice(&sb.ok(&["show", "0", "s.toml", "--format", "json"]).stdout)
            .expect("JSON");
    assert!(
        show["log_tail"]
            .as_str()
            .unwrap_or_default()
            .contains("boom: the GPU caught fire"),
        "the last lines of standard error are stored: {show:#}"
    );
    // NaN is never the best.
    let best: Value =
        serde_json::from_slice(&sb.ok(&["best", "s.toml", "--format", "json"]).stdout)
            .expect("JSON");
    assert_eq!(best["number"], 5);
}

#[test]
fn a_study_where_no_trial_completes_exits_with_status_1() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("hopeless", 2, 2, "", &[]));
    sb.write("trial.sh", "exit 1\n");
    let out = sb.run(&["run", "s.toml"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("no trial completed"),
        "{}",
        text(&out)
    );
    assert_eq!(sb.trials("s.toml").len(), 2);
}

#[test]
fn a_trial_that_outlives_its_timeout_is_stopped_and_fails() {
    let sb = Sandbox::new();
    let study = sh_study("slow", 2, 2, "", &[]).replace(
        "kind = \"command\"",
        "kind = \"command\"\ntimeout = \"1s\"\ngrace = \"1s\"",
    );
    sb.write("s.toml", &study);
    // The sleep is a grandchild in the trial's process group: it must die too.
    sb.write(
        "trial.sh",
        "echo 'tune: {\"step\": 0, \"loss\": 1}'\nsleep 30\necho 'tune: {\"loss\": 0}'\n",
    );
    let t0 = Instant::now();
    let out = sb.run(&["run", "s.toml"]);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t0.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    for t in sb.trials("s.toml") {
        assert_eq!(t["state"], "failed");
        assert!(
            t["error"]
                .as_str()
                .unwrap_or_default()
                .contains("timed out"),
            "{t:#}"
        );
    }
}

#[test]
fn running_a_study_again_continues_it_and_never_runs_a_trial_twice() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    sb.write("s.toml", &sh_study("resume", 3, 2, "", &["{x}"]));
    sb.ok(&["run", "s.toml"]);
    let first = sb.trials("s.toml");
    assert_eq!(first.len(), 3);
    // The budget is spent: a rerun runs nothing.
    let out = sb.ok(&["s.toml"]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("started"),
        "{}",
        text(&out)
    );
    assert_eq!(sb.trials("s.toml"), first);
    // A larger budget continues the same study.
    sb.write("s.toml", &sh_study("resume", 5, 2, "", &["{x}"]));
    sb.ok(&["run", "s.toml"]);
    let all = sb.trials("s.toml");
    assert_eq!(all.len(), 5);
    assert_numbers_once(&all);
    assert_eq!(&all[..3], &first[..], "finished trials are never run again");
    let params: BTreeSet<String> = all.iter().map(|t| t["params"].to_string()).collect();
    assert_eq!(
        params.len(),
        5,
        "the sampler does not propose the same point again"
    );
}

#[test]
fn enqueued_trials_run_first_with_their_params_and_count_toward_the_budget() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    let study =
        sh_study("queued", 3, 1, "", &["{x}"]) + "\n[[enqueue]]\nx = 0.25\nk = 2\nc = \"b\"\n";
    sb.write("s.toml", &study);
    let out = sb.ok(&[
        "enqueue",
        "s.toml",
        "--params",
        r#"{"x": -1.5, "k": 4, "c": "a"}"#,
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("queued trial 0"),
        "{}",
        text(&out)
    );
    sb.ok(&["run", "s.toml"]);
    let trials = sb.trials("s.toml");
    assert_eq!(counted(&trials), 3);
    assert_eq!(
        trials[0]["params"],
        serde_json::json!({"x": -1.5, "k": 4, "c": "a"})
    );
    assert_eq!(trials[0]["value"], -1.5);
    assert_eq!(
        trials[1]["params"],
        serde_json::json!({"x": 0.25, "k": 2, "c": "b"})
    );
    // `[[enqueue]]` entries are queued once, not again on every resume.
    sb.ok(&["run", "s.toml"]);
    assert_eq!(sb.trials("s.toml").len(), 3);
}

/// A median-pruned study: trial 0 sets the bar, every later trial reports far worse at step 0
/// and would then sleep for a long time.
pub const PRUNED_STUDY: &str = r#"[study]
name = "pruned"
metric = "loss"
trials = 3

[space]
x = { type = "float", low = -2.0, high = 2.0 }

[pruner]
kind = "median"
min_trials = 1

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "pruned.sh"]
grace = "2s"
"#;

pub const PRUNED_SCRIPT: &str = r#"if [ "$TUNE_TRIAL" = 0 ]; then
  for s in 0 1 2; do echo "tune: {\"step\": $s, \"loss\": 1.5}"; done
else
  echo 'tune: {"step": 0, "loss": 100.5}'
  sleep 30
  echo 'tune: {"step": 1, "loss": 0.5}'
fi
"#;

#[test]
fn a_trial_the_pruner_stops_is_stored_as_pruned_with_its_last_reported_value() {
    let sb = Sandbox::new();
    sb.write("p.toml", PRUNED_STUDY);
    sb.write("pruned.sh", PRUNED_SCRIPT);
    let t0 = Instant::now();
    let out = sb.ok(&["run", "p.toml"]);
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "pruned trials are stopped, not waited for: {:?}\n{}",
        t0.elapsed(),
        text(&out)
    );
    let trials = sb.trials("p.toml");
    assert_eq!(counted(&trials), 3, "pruned trials count toward the budget");
    assert_eq!(trials[0]["state"], "complete");
    for t in &trials[1..] {
        assert_eq!(t["state"], "pruned", "{t:#}");
        assert_eq!(t["value"], 100.5, "the last reported value is kept");
        let n = t["number"].to_string();
        let show: Value =
            serde_json::from_slice(&sb.ok(&["show", &n, "p.toml", "--format", "json"]).stdout)
                .expect("JSON");
        assert_eq!(show["pruned_step"], 0);
        assert_eq!(show["reports"].as_array().map(Vec::len), Some(1));
    }
    let best: Value =
        serde_json::from_slice(&sb.ok(&["best", "p.toml", "--format", "json"]).stdout)
            .expect("JSON");
    assert_eq!(best["number"], 0, "a pruned trial is never the best");
}

#[test]
fn a_study_whose_budget_is_a_timeout_starts_no_trial_after_it_passes() {
    let sb = Sandbox::new();
    let study = sh_study("timed", 1, 2, "timeout = \"1s\"", &["{x}"]).replace("trials = 1\n", "");
    sb.write("s.toml", &study);
    sb.write("trial.sh", "sleep 0.3\necho \"tune: {\\\"loss\\\": $1}\"\n");
    let t0 = Instant::now();
    let out = sb.ok(&["run", "s.toml"]);
    let wall = t0.elapsed();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("the study timeout passed"),
        "{}",
        text(&out)
    );
    assert!(wall < Duration::from_secs(5), "took {wall:?}");
    let trials = sb.trials("s.toml");
    assert!(trials.len() >= 2, "{trials:#?}");
    assert!(
        trials.iter().all(|t| t["state"] == "complete"),
        "running trials finish"
    );
    let last_start = trials
        .iter()
        .map(|t| time(t, "started_at"))
        .max()
        .expect("trials");
    let first_start = trials
        .iter()
        .map(|t| time(t, "started_at"))
        .min()
        .expect("trials");
    assert!(
        last_start - first_start < chrono::TimeDelta::milliseconds(1100),
        "no trial starts after the timeout"
    );
}

#[test]
fn two_studies_whose_names_differ_only_in_unsafe_characters_keep_their_own_runs() {
    let sb = Sandbox::new();
    sb.write(
        "trial.sh",
        "echo \"tune: {\\\"loss\\\": $1}\" ; echo \"$2\" > \"$TUNE_TRIAL_DIR/mine.txt\"\n",
    );
    sb.write("a.toml", &sh_study("a/b", 1, 1, "", &["{x}", "a/b"]));
    sb.write("b.toml", &sh_study("a_b", 1, 1, "", &["{x}", "a_b"]));
    sb.ok(&["run", "a.toml"]);
    sb.ok(&["run", "b.toml"]);
    let mut dirs: Vec<String> = std::fs::read_dir(sb.join("runs"))
        .expect("runs/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    assert_eq!(dirs[0], "a_b", "a plain name keeps its directory name");
    assert!(dirs[1].starts_with("a_b@"), "{dirs:?}");
    // Each trial wrote into its own study's directory.
    let mine = |d: &str| {
        std::fs::read_to_string(sb.join("runs").join(d).join("trial-00000").join("mine.txt"))
            .unwrap_or_else(|e| panic!("runs/{d}/trial-00000/mine.txt: {e}"))
    };
    assert_eq!(mine(&dirs[0]).trim(), "a_b");
    assert_eq!(mine(&dirs[1]).trim(), "a/b");
}

#[test]
fn a_placeholder_may_name_a_parameter_in_any_script() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    let study = sh_study("unicode", 1, 1, "", &["{λ}"]).replace(
        "[space]\n",
        "[space]\n\"λ\" = { type = \"float\", low = 0.25, high = 0.5 }\n",
    );
    sb.write("s.toml", &study);
    sb.ok(&["run", "s.toml"]);
    let t = &sb.trials("s.toml")[0];
    assert_eq!(t["state"], "complete", "{t}");
    assert_eq!(t["value"], t["params"]["λ"], "{t}");
}

#[test]
fn output_that_is_not_utf8_is_logged_as_it_came_and_the_trial_goes_on() {
    let sb = Sandbox::new();
    // Bytes that are not UTF-8 on both streams, between reports: the trial must live on,
    // report after them, and its logs keep every byte.
    sb.write(
        "trial.sh",
        "echo \"tune: {\\\"step\\\": 0, \\\"loss\\\": 5}\"\nprintf 'bad \\377\\376 bytes\\n'\nprintf 'err \\377 bytes\\n' >&2\nsleep 0.2\necho \"tune: {\\\"step\\\": 1, \\\"loss\\\": $1}\"\necho done\n",
    );
    sb.write("s.toml", &sh_study("bytes", 1, 1, "", &["{x}"]));
    sb.ok(&["run", "s.toml"]);
    let t = &sb.trials("s.toml")[0];
    assert_eq!(t["state"], "complete", "{t}");
    assert_eq!(
        t["value"], t["params"]["x"],
        "the report after the bad bytes counted: {t}"
    );
    let show: serde_json::Value =
        serde_json::from_slice(&sb.ok(&["show", "0", "s.toml", "--format", "json"]).stdout)
            .expect("JSON");
    let logs: Vec<Vec<u8>> = show["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .map(|l| std::fs::read(sb.path().join(l.as_str().expect("a path"))).expect("a log"))
        .collect();
    let has = |needle: &[u8]| {
        logs.iter()
            .any(|l| l.windows(needle.len()).any(|w| w == needle))
    };
    assert!(
        has(b"bad \xff\xfe bytes"),
        "stdout's bytes kept as they came"
    );
    assert!(has(b"err \xff bytes"), "stderr's bytes kept as they came");
    assert!(has(b"done"), "read to the end");
}

#[test]
fn a_study_whose_trials_keep_failing_stops_early_and_says_why() {
    let sb = Sandbox::new();
    sb.write(
        "trial.sh",
        "echo \"FileNotFoundError: ../datasets/digits.csv.gz\" >&2\nexit 3\n",
    );
    sb.write("s.toml", &sh_study("broken", 12, 1, "", &["{x}"]));
    let out = sb.run(&["run", "s.toml"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("5 trials in a row failed the same way") && err.contains("FileNotFoundError"),
        "{err}"
    );
    let trials = sb.trials("s.toml");
    assert_eq!(
        trials.len(),
        5,
        "the rest of the budget is left: {trials:?}"
    );
    // 0 turns the stop off: the whole budget runs.
    sb.write(
        "off.toml",
        &sh_study("off", 7, 1, "max_consecutive_failures = 0", &["{x}"]),
    );
    let out = sb.run(&["run", "off.toml"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(sb.trials("off.toml").len(), 7);
    // Failing differently each time (diverging at another step) is what some params do:
    // the search goes on.
    sb.write(
        "diverging.sh",
        "echo \"diverged: loss became NaN at step $TUNE_TRIAL\" >&2\nexit 1\n",
    );
    sb.write(
        "diverging.toml",
        &sh_study("diverging", 7, 1, "max_consecutive_failures = 2", &["{x}"])
            .replace("\"trial.sh\"", "\"diverging.sh\""),
    );
    let out = sb.run(&["run", "diverging.toml"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(sb.trials("diverging.toml").len(), 7);
    // A success in between starts the count again.
    sb.write(
        "mixed.sh",
        "[ $((TUNE_TRIAL % 2)) = 1 ] && exit 1\necho \"tune: {\\\"loss\\\": $1}\"\n",
    );
    sb.write(
        "mixed.toml",
        &sh_study("mixed", 8, 1, "max_consecutive_failures = 2", &["{x}"])
            .replace("\"trial.sh\"", "\"mixed.sh\""),
    );
    sb.ok(&["run", "mixed.toml"]);
    assert_eq!(sb.trials("mixed.toml").len(), 8);
}
