//! Multi-objective studies end to end: `metric` and `direction` lists, every objective's value
//! stored per trial, `tune best` printing the Pareto front, and Optuna reading the same front
//! from the database.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::{Sandbox, output_within, sh_study, stderr, text};

/// Two objectives that pull apart: `loss` wants x = 1 and k = 1, `cost` wants x = -1 and k = 4.
const TRIAL: &str = r#"awk -v x="$1" -v k="$2" 'BEGIN { printf "tune: {\"step\": 0, \"loss\": %.15g, \"cost\": %.15g}\n", (x-1)*(x-1) + 0.1*k, (x+1)*(x+1) + 1/k }'
"#;

fn mo_study(name: &str, trials: u64, sampler: &str) -> String {
    sh_study(
        name,
        trials,
        2,
        &format!("[sampler]\nkind = \"{sampler}\""),
        &["{x}", "{k}"],
    )
    .replacen(
        "metric = \"loss\"",
        "metric = [\"loss\", \"cost\"]\ndirection = [\"minimize\", \"minimize\"]",
        1,
    )
}

fn formula(t: &Value) -> (f64, f64) {
    let x = t["params"]["x"].as_f64().expect("x");
    let k = t["params"]["k"].as_f64().expect("k");
    ((x - 1.0).powi(2) + 0.1 * k, (x + 1.0).powi(2) + 1.0 / k)
}

fn dominates(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 <= b.0 && a.1 <= b.1 && (a.0 < b.0 || a.1 < b.1)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + b.abs())
}

#[test]
fn a_two_objective_study_stores_both_values_and_best_prints_its_pareto_front() {
    for sampler in ["gp", "nsga2", "tpe"] {
        let sb = Sandbox::new();
        sb.write("trial.sh", TRIAL);
        sb.write("s.toml", &mo_study("mo", 14, sampler));
        let lines = text(&sb.ok(&["run", "s.toml", "--no-tui"]));
        let all = sb.trials("s.toml");
        assert_eq!(all.len(), 14, "{sampler}");
        let mut points = Vec::new();
        for t in &all {
            assert_eq!(t["state"], "complete", "{sampler}: {t}");
            let (loss, cost) = formula(t);
            let values = t["values"].as_array().expect("values");
            assert_eq!(values.len(), 2, "{t}");
            let got = (values[0].as_f64().unwrap(), values[1].as_f64().unwrap());
            assert!(close(got.0, loss) && close(got.1, cost), "{t}");
            assert!(close(t["value"].as_f64().unwrap(), loss), "{t}");
            points.push((t["number"].as_u64().unwrap(), got));
        }
        // Brute force: the trials no other trial dominates.
        let mut want: Vec<u64> = points
            .iter()
            .filter(|(_, p)| !points.iter().any(|(_, q)| dominates(*q, *p)))
            .map(|(n, _)| *n)
            .collect();
        want.sort_unstable();
        let best: Value =
            serde_json::from_slice(&sb.ok(&["best", "s.toml", "--format", "json"]).stdout)
                .expect("JSON");
        let got: Vec<u64> = best
            .as_array()
            .expect("an array: the front")
            .iter()
            .map(|t| t["number"].as_u64().unwrap())
            .collect();
        assert_eq!(got, want, "{sampler}");
        assert!(
            want.len() >= 2,
            "{sampler}: a front of one point: {points:?}"
        );
        // The event lines give every objective and the front's size as it grows.
        assert!(
            lines.contains(" complete in ") && lines.contains("(Pareto front: "),
            "{lines}"
        );
        assert!(
            lines
                .lines()
                .any(|l| l.contains("loss=") && l.contains(" cost=")),
            "{lines}"
        );
        assert!(
            lines.contains(&format!("the Pareto front has {} trial(s)", want.len())),
            "{lines}"
        );
        let table = text(&sb.ok(&["best", "s.toml"]));
        assert!(
            table.contains("Pareto front of `mo`")
                && table.contains("loss (minimize), cost (minimize)"),
            "{table}"
        );
        let studies = text(&sb.ok(&["studies"]));
        assert!(
            studies.contains("loss,cost")
                && studies.contains("minimize,minimize")
                && studies.contains(&format!("Pareto front: {} trial(s)", want.len())),
            "{studies}"
        );
        let listed: Value =
            serde_json::from_slice(&sb.ok(&["studies", "--format", "json"]).stdout).expect("JSON");
        assert_eq!(listed[0]["pareto_front"], want.len(), "{listed}");
        assert_eq!(listed[0]["others"][0]["metric"], "cost", "{listed}");
        for n in &want {
            assert!(
                table.lines().any(|l| l.starts_with(&format!("| {n} "))),
                "trial {n} missing from:\n{table}"
            );
        }
    }
}

#[test]
fn a_trial_that_does_not_report_every_objective_fails_naming_the_missing_one() {
    let sb = Sandbox::new();
    sb.write(
        "trial.sh",
        "if [ \"$TUNE_TRIAL\" = 1 ]; then echo \"tune: {\\\"loss\\\": $1}\"; else echo \"tune: {\\\"loss\\\": $1, \\\"cost\\\": 2}\"; fi\n",
    );
    sb.write("s.toml", &mo_study("mo", 3, "random"));
    sb.ok(&["run", "s.toml", "--no-tui"]);
    let all = sb.trials("s.toml");
    let states: Vec<&str> = all.iter().map(|t| t["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["complete", "failed", "complete"]);
    let why = all[1]["error"].as_str().expect("a reason");
    assert!(why.contains("`cost`"), "{why}");
}

#[test]
fn changing_the_objectives_of_a_stored_study_is_refused_and_keeps_its_trials() {
    let sb = Sandbox::new();
    sb.write("trial.sh", TRIAL);
    sb.write("s.toml", &mo_study("mo", 2, "random"));
    sb.ok(&["run", "s.toml", "--no-tui"]);
    let flipped = mo_study("mo", 4, "random").replacen(
        "direction = [\"minimize\", \"minimize\"]",
        "direction = [\"minimize\", \"maximize\"]",
        1,
    );
    sb.write("s.toml", &flipped);
    let out = sb.run(&["run", "s.toml", "--no-tui"]);
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("cost (minimize)") && err.contains("cost (maximize)"),
        "{err}"
    );
    sb.write("s.toml", &mo_study("mo", 2, "random"));
    assert_eq!(sb.trials("s.toml").len(), 2);
}

/// Optuna reads the study as multi-objective: its directions, metric names, every trial's
/// values, and the same Pareto front (`study.best_trials`).
#[test]
fn optuna_reads_the_directions_the_values_and_the_same_pareto_front() {
    let sb = Sandbox::new();
    sb.write("trial.sh", TRIAL);
    sb.write("s.toml", &mo_study("mo", 10, "nsga2"));
    sb.ok(&["run", "s.toml", "--no-tui"]);
    let all = sb.trials("s.toml");
    let best: Value =
        serde_json::from_slice(&sb.ok(&["best", "s.toml", "--format", "json"]).stdout)
            .expect("JSON");
    let front: Vec<u64> = best
        .as_array()
        .expect("front")
        .iter()
        .map(|t| t["number"].as_u64().unwrap())
        .collect();
    let python = crate::optuna_compat::python_after_setup(&["--python-tests"]);
    let script = r#"
import json, sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
s = optuna.load_study(study_name="mo", storage=sys.argv[1])
print(json.dumps({
    "directions": [d.name for d in s.directions],
    "metric_names": s.metric_names,
    "values": {t.number: t.values for t in s.trials},
    "front": sorted(t.number for t in s.best_trials),
}))
"#;
    let mut cmd = Command::new(&python);
    cmd.arg("-c")
        .arg(script)
        .arg(format!("sqlite:///{}", sb.join("tune.db").display()));
    let out = output_within(cmd, Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out));
    let seen: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        seen["directions"],
        serde_json::json!(["MINIMIZE", "MINIMIZE"])
    );
    assert_eq!(seen["metric_names"], serde_json::json!(["loss", "cost"]));
    for t in &all {
        let n = t["number"].as_u64().unwrap().to_string();
        assert_eq!(seen["values"][&n], t["values"], "trial {n}");
    }
    assert_eq!(seen["front"], serde_json::json!(front));
}

#[test]
fn plot_and_report_show_the_objective_named_by_number_or_metric() {
    let sb = Sandbox::new();
    sb.write("trial.sh", TRIAL);
    sb.write("s.toml", &mo_study("mo_plot", 10, "random"));
    sb.ok(&["run", "s.toml", "--no-tui"]);
    let all = sb.trials("s.toml");
    let best = |i: usize| {
        all.iter()
            .map(|t| t["values"][i].as_f64().expect("a value"))
            .fold(f64::INFINITY, f64::min)
    };
    let (best_loss, best_cost) = (best(0), best(1));
    assert!(
        best_loss != best_cost,
        "the two objectives must differ for this test"
    );
    let summary = |args: &[&str]| {
        let mut a = vec!["report", "s.toml", "-o", "r.html"];
        a.extend_from_slice(args);
        sb.ok(&a);
        let page = std::fs::read_to_string(sb.join("r.html")).expect("the report");
        crate::report::section(&page, "summary").to_string()
    };
    // The first objective by default; the second by number and by name, the same page.
    let first = summary(&[]);
    assert!(first.contains("best of `loss`"), "{first}");
    let by_number = summary(&["--objective", "1"]);
    assert!(by_number.contains("best of `cost`"), "{by_number}");
    let by_name = summary(&["--objective", "cost"]);
    assert_eq!(by_number, by_name);
    // The best cost is its own trial's value, not the best loss's trial's.
    let shown = |s: &str, metric: &str| -> f64 {
        let at = s.find(&format!("{metric} = ")).expect("the best row") + metric.len() + 3;
        s[at..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    // (Six significant digits on the page.)
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-5 * b.abs().max(1e-3);
    assert!(near(shown(&by_name, "cost"), best_cost), "{by_name}");
    assert!(near(shown(&first, "loss"), best_loss), "{first}");
    assert!(
        by_name.contains("cost (minimize, shown), loss (minimize)"),
        "{by_name}"
    );
    // Figures name the objective they draw.
    sb.ok(&[
        "plot",
        "history",
        "s.toml",
        "--objective",
        "cost",
        "-o",
        "h.svg",
    ]);
    let svg = std::fs::read_to_string(sb.join("h.svg")).expect("the figure");
    assert!(svg.contains("history of `cost`"), "the history of cost");
    // An objective the study lacks: exit 2, naming what it has, and nothing written.
    for bad in ["2", "latency", "1.5", "18446744073709551616"] {
        let out = sb
            .tune(&[
                "plot",
                "history",
                "s.toml",
                "--objective",
                bad,
                "-o",
                "x.svg",
            ])
            .output()
            .expect("tune");
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out));
        let err = stderr(&out);
        assert!(err.contains("--objective"), "{bad}: {err}");
        assert!(err.contains("0 `loss`, 1 `cost`"), "{bad}: {err}");
        assert!(!sb.join("x.svg").exists(), "{bad}: wrote a figure");
    }
}
