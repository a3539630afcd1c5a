//! Optuna opens a database that `tune` wrote, unchanged: `optuna.load_study` (Optuna from
//! PyPI, installed by `scripts/setup.sh --python-tests` in the test itself) reads back the
//! trials, states, params, values, intermediate values and user attributes (each trial's final
//! metrics) exactly as `tune` reports them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Sandbox, output_within, sh_study, text};

/// Dumps each study named on the command line as Optuna sees it, one JSON object.
pub(crate) const DUMP: &str = r#"
import json, sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
storage, names = sys.argv[1], sys.argv[2:]
out = {"summaries": sorted(s.study_name for s in optuna.get_all_study_summaries(storage))}
for name in names:
    study = optuna.load_study(study_name=name, storage=storage)
    trials = []
    for t in study.trials:
        trials.append({
            "number": t.number,
            "state": t.state.name,
            "values": t.values,
            "params": t.params,
            "distributions": {k: type(d).__name__ for k, d in t.distributions.items()},
            "intermediate": sorted([k, v] for k, v in t.intermediate_values.items()),
            "has_start": t.datetime_start is not None,
            "has_complete": t.datetime_complete is not None,
            "user_attrs": t.user_attrs,
        })
    best = study.best_trial
    out[name] = {
        "direction": study.direction.name,
        "trials": trials,
        "best": {"number": best.number, "value": best.value, "params": best.params},
    }
print(json.dumps(out))
"#;

/// Runs the repository's set-up script, which makes `.venv` with Optuna; the test fails (never
/// skips) when that cannot be done.
fn python_with_optuna() -> std::path::PathBuf {
    python_after_setup(&["--python-tests"])
}

/// The `.venv` Python after `scripts/setup.sh ARGS` (e.g. with `--postgres` for psycopg2).
pub(crate) fn python_after_setup(args: &[&str]) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut setup = Command::new("bash");
    setup
        .arg(root.join("scripts/setup.sh"))
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null());
    let out = output_within(setup, Duration::from_secs(600));
    assert!(
        out.status.success(),
        "scripts/setup.sh {} failed: Optuna is needed for this test\n{}",
        args.join(" "),
        text(&out)
    );
    let python = root.join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing after set-up",
        python.display()
    );
    python
}

fn optuna_state(tune: &str) -> &'static str {
    match tune {
        "complete" => "COMPLETE",
        "failed" => "FAIL",
        "pruned" => "PRUNED",
        "running" => "RUNNING",
        "queued" => "WAITING",
        other => panic!("unknown state {other}"),
    }
}

/// Compares every trial of a study as `tune trials`/`tune show` print it (from database `db`)
/// with Optuna's view.
pub(crate) fn assert_same(
    sb: &Sandbox,
    db: &str,
    study: &str,
    optuna: &Value,
    distributions: &[(&str, &str)],
) {
    let out = sb.ok(&["trials", "--db", db, "--study", study, "--format", "json"]);
    let ours: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    let theirs = optuna["trials"].as_array().expect("trials");
    assert_eq!(ours.len(), theirs.len(), "{study}: {ours:#?}\n{theirs:#?}");
    for (t, o) in ours.iter().zip(theirs) {
        let n = t["number"].as_u64().expect("number");
        assert_eq!(o["number"], n);
        let state = t["state"].as_str().expect("state");
        assert_eq!(o["state"], optuna_state(state), "{study} trial {n}");
        let values = if t["value"].is_null() {
            Value::Null
        } else {
            json!([t["value"]])
        };
        assert_eq!(o["values"], values, "{study} trial {n}: the value");
        assert_eq!(o["params"], t["params"], "{study} trial {n}: the params");
        for (name, kind) in distributions {
            if o["params"].get(*name).is_some() {
                assert_eq!(
                    o["distributions"][*name], *kind,
                    "{study} trial {n}: `{name}`"
                );
            }
        }
        // The metrics of a finished trial's last report are its user attributes (what
        // optuna-dashboard shows beside the value); an interrupted or unfinished trial has none.
        let interrupted = t["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("interrupted"));
        let attrs = if matches!(state, "running" | "queued") || interrupted {
            json!({})
        } else {
            let finite: serde_json::Map<String, Value> = t["metrics"]
                .as_object()
                .expect("metrics")
                .iter()
                .filter(|(_, v)| v.as_f64().is_some_and(f64::is_finite))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Value::Object(finite)
        };
        assert_eq!(o["user_attrs"], attrs, "{study} trial {n}: user attributes");
        assert_eq!(o["has_start"], !t["started_at"].is_null());
        assert_eq!(o["has_complete"], !t["finished_at"].is_null());
        // Intermediate values: the objective of every report that is not the final one.
        let out = sb.ok(&[
            "show",
            &n.to_string(),
            "--db",
            db,
            "--study",
            study,
            "--format",
            "json",
        ]);
        let show: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let metric = if study == "compat-at" {
            "value"
        } else {
            "loss"
        };
        let steps: BTreeMap<u64, f64> = show["reports"]
            .as_array()
            .expect("reports")
            .iter()
            .filter(|r| r["final"] == false)
            .filter_map(|r| Some((r["step"].as_u64()?, r["metrics"][metric].as_f64()?)))
            .collect();
        let want: Vec<Value> = steps.iter().map(|(s, v)| json!([s, v])).collect();
        assert_eq!(
            o["intermediate"],
            json!(want),
            "{study} trial {n}: intermediate values"
        );
    }
    let best: Value = serde_json::from_slice(
        &sb.ok(&["best", "--db", db, "--study", study, "--format", "json"])
            .stdout,
    )
    .expect("JSON");
    assert_eq!(
        optuna["best"]["number"], best["number"],
        "{study}: the best trial"
    );
    assert_eq!(optuna["best"]["value"], best["value"]);
    assert_eq!(optuna["best"]["params"], best["params"]);
}

#[test]
fn optuna_loads_a_study_that_tune_wrote_as_tune_stored_it() {
    let python = python_with_optuna();
    let sb = Sandbox::new();
    // A command study: intermediate values at steps 0..2, a final report in trial 1 whose
    // value is not an intermediate one, and a failed trial (2) with a report before it died.
    let study = sh_study("compat", 5, 2, "direction = \"maximize\"", &["{x}", "{k}"]).replace(
        "[workers]",
        "lr = { type = \"float\", low = 1e-4, high = 1.0, log = true }\n\
         odd = { type = \"int\", low = 1, high = 9, step = 2 }\n\
         width = { type = \"categorical\", choices = [32, 64] }\n\
         flag = { type = \"categorical\", choices = [true, false] }\n\
         q = { type = \"float\", low = 0.0, high = 1.0, step = 0.125 }\n\
         mom = { type = \"float\", low = 0.0, high = 0.9, when = { c = \"a\" } }\n\n[workers]",
    );
    sb.write("s.toml", &study);
    sb.write(
        "trial.sh",
        r#"echo "tune: {\"step\": 0, \"loss\": -5.5, \"acc\": 0.5}"
echo "tune: {\"step\": 1, \"loss\": $2}"
[ "$TUNE_TRIAL" = 2 ] && { echo "diverged" >&2; exit 7; }
echo "tune: {\"step\": 2, \"loss\": $1}"
[ "$TUNE_TRIAL" = 1 ] && echo 'tune: {"final": true, "loss": 0.0625}'
exit 0
"#,
    );
    sb.ok(&["run", "s.toml"]);
    // A study whose median pruner stops trials 1 and 2 (same database, beside the file).
    sb.write("p.toml", crate::command_trials::PRUNED_STUDY);
    sb.write("pruned.sh", crate::command_trials::PRUNED_SCRIPT);
    sb.ok(&["run", "p.toml"]);
    // A study recorded through ask/tell, with a pruned trial that keeps its value.
    sb.write(
        "space.toml",
        "[space]\nx = { type = \"float\", low = -1.0, high = 1.0 }\n\
         n = { type = \"int\", low = 1, high = 64, log = true }\n",
    );
    let mut at = sb.tune(&[
        "ask-tell",
        "--space",
        "space.toml",
        "--sampler",
        "random",
        "--direction",
        "minimize",
        "--db",
        "tune.db",
        "--study",
        "compat-at",
    ]);
    at.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = at.spawn().expect("ask-tell starts");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(
            b"{\"ask\": {}}\n{\"ask\": {}}\n{\"ask\": {}}\n\
              {\"tell\": {\"trial\": 0, \"value\": 1.5}}\n\
              {\"tell\": {\"trial\": 1, \"state\": \"pruned\", \"value\": 0.4}}\n\
              {\"tell\": {\"trial\": 2, \"state\": \"fail\"}}\n",
        )
        .expect("requests");
    let out = crate::common::wait_output(child, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out));

    let mut dump = Command::new(&python);
    dump.arg("-c")
        .arg(DUMP)
        .arg("sqlite:///tune.db")
        .arg("compat")
        .arg("compat-at")
        .arg("pruned")
        .current_dir(sb.path())
        .stdin(Stdio::null());
    let out = output_within(dump, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "Optuna could not load the study:\n{}",
        text(&out)
    );
    let optuna: Value = serde_json::from_slice(&out.stdout).expect("the dump is JSON");

    assert_eq!(
        optuna["summaries"],
        json!(["compat", "compat-at", "pruned"])
    );
    assert_eq!(optuna["compat"]["direction"], "MAXIMIZE");
    assert_eq!(optuna["compat-at"]["direction"], "MINIMIZE");
    assert_same(
        &sb,
        "tune.db",
        "compat",
        &optuna["compat"],
        &[
            ("x", "FloatDistribution"),
            ("k", "IntDistribution"),
            ("c", "CategoricalDistribution"),
            ("lr", "FloatDistribution"),
            ("odd", "IntDistribution"),
            ("width", "CategoricalDistribution"),
            ("flag", "CategoricalDistribution"),
            ("q", "FloatDistribution"),
            ("mom", "FloatDistribution"),
        ],
    );
    assert_same(
        &sb,
        "tune.db",
        "compat-at",
        &optuna["compat-at"],
        &[("x", "FloatDistribution"), ("n", "IntDistribution")],
    );

    assert_same(
        &sb,
        "tune.db",
        "pruned",
        &optuna["pruned"],
        &[("x", "FloatDistribution")],
    );

    // The cases that matter, spelled out.
    let trials = optuna["compat"]["trials"].as_array().expect("trials");
    assert_eq!(
        trials[1]["values"],
        json!([0.0625]),
        "the final report is the value"
    );
    assert_eq!(trials[1]["intermediate"].as_array().map(Vec::len), Some(3));
    assert_eq!(trials[2]["state"], "FAIL");
    assert_eq!(trials[2]["intermediate"].as_array().map(Vec::len), Some(2));
    let at = optuna["compat-at"]["trials"].as_array().expect("trials");
    let states: Vec<&str> = at
        .iter()
        .map(|t| t["state"].as_str().expect("state"))
        .collect();
    assert_eq!(states, ["COMPLETE", "PRUNED", "FAIL"]);
    assert_eq!(
        at[1]["values"],
        json!([0.4]),
        "a pruned trial keeps its value, as in Optuna"
    );
    let pruned = optuna["pruned"]["trials"].as_array().expect("trials");
    assert_eq!(pruned[1]["state"], "PRUNED");
    assert_eq!(pruned[1]["values"], json!([100.5]));
    assert_eq!(pruned[1]["intermediate"], json!([[0, 100.5]]));
}
