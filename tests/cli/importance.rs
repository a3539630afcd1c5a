//! `tune importance` on studies the binary ran: the parameter the objective depends on ranks
//! first, the JSON and CSV shapes of docs/cli.md, and bad input (an objective that does not
//! exist, a study with no complete trial) answered with a message, never a panic.

use serde_json::Value;

use crate::common::{Sandbox, sh_study, text};

/// A study of 40 trials whose loss is x² (+ a hundredth of k): x matters, k and c barely.
fn x_study(sb: &Sandbox) {
    sb.write("s.toml", &sh_study("imp", 40, 4, "", &["{x}", "{k}"]));
    sb.write(
        "trial.sh",
        "v=$(awk \"BEGIN { print $1 * $1 + 0.01 * $2 }\")\necho \"tune: {\\\"step\\\": 0, \\\"loss\\\": $v}\"\n",
    );
    sb.ok(&["run", "s.toml"]);
}

#[test]
fn importance_ranks_the_parameter_the_loss_depends_on_first_in_every_format() {
    let sb = Sandbox::new();
    x_study(&sb);
    let out = sb.ok(&["importance", "s.toml", "--format", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["study"], "imp");
    assert_eq!(v["method"], "ped-anova");
    let objectives = v["objectives"].as_array().expect("an array of objectives");
    assert_eq!(objectives.len(), 1);
    let o = &objectives[0];
    assert_eq!(o["objective"], 0);
    assert_eq!(o["metric"], "loss");
    assert_eq!(o["direction"], "minimize");
    assert_eq!(o["trials"], 40);
    let imp = o["importances"].as_array().expect("importances");
    let names: Vec<&str> = imp.iter().filter_map(|p| p["param"].as_str()).collect();
    assert_eq!(names.len(), 3, "{v}");
    assert_eq!(names[0], "x", "{v}");
    let sum: f64 = imp.iter().filter_map(|p| p["importance"].as_f64()).sum();
    assert!((sum - 1.0).abs() < 1e-9, "{v}");

    let csv = String::from_utf8_lossy(&sb.ok(&["importance", "s.toml", "--format", "csv"]).stdout)
        .into_owned();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("objective,metric,param,importance"));
    assert!(
        lines.next().is_some_and(|l| l.starts_with("0,loss,x,")),
        "{csv}"
    );

    let bars = String::from_utf8_lossy(&sb.ok(&["importance", "s.toml"]).stdout).into_owned();
    assert!(
        bars.contains(
            "importance for `loss` (minimize) of study `imp`, ped-anova over 40 complete trials"
        ),
        "{bars}"
    );
    let x_line = bars
        .lines()
        .find(|l| l.trim_start().starts_with("x "))
        .expect("a line for x");
    assert!(x_line.contains('█'), "{bars}");
}

#[test]
fn importance_by_fanova_ranks_the_parameter_the_loss_depends_on_first() {
    let sb = Sandbox::new();
    x_study(&sb);
    let out = sb.ok(&[
        "importance",
        "s.toml",
        "--method",
        "fanova",
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["method"], "fanova");
    let imp = v["objectives"][0]["importances"]
        .as_array()
        .expect("importances");
    let names: Vec<&str> = imp.iter().filter_map(|p| p["param"].as_str()).collect();
    assert_eq!(names.len(), 3, "{v}");
    assert_eq!(names[0], "x", "{v}");
    assert!(
        imp[0]["importance"].as_f64().is_some_and(|x| x > 0.8),
        "{v}"
    );
    let sum: f64 = imp.iter().filter_map(|p| p["importance"].as_f64()).sum();
    assert!((sum - 1.0).abs() < 1e-9, "{v}");
}

#[test]
fn importance_refuses_a_missing_objective_and_a_study_without_complete_trials() {
    let sb = Sandbox::new();
    x_study(&sb);
    let out = sb.run(&["importance", "s.toml", "--objective", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--objective 1: study `imp` has 1 objective"),
        "{}",
        text(&out)
    );

    for n in ["-1", "18446744073709551616", "1e30"] {
        let out = sb.run(&["importance", "s.toml", "--objective", n]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "--objective {n}: {}",
            text(&out)
        );
        assert!(!text(&out).contains("panicked"), "{}", text(&out));
    }

    let out = sb.run(&["importance", "--study", "nope", "--db", "tune.db"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("nope"), "{}", text(&out));

    sb.write("f.toml", &sh_study("fails", 3, 1, "", &[]));
    sb.write("trial.sh", "exit 1\n");
    sb.run(&["run", "f.toml"]);
    let out = sb.run(&["importance", "f.toml"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("study `fails` has no complete trial with a finite `loss` yet"),
        "{}",
        text(&out)
    );
}

/// The Python side of the agreement tests: Optuna's PED-ANOVA (or fANOVA) of each study in tune's database,
/// per objective (a multi-objective study's objective k as `target`, signed so lower is
/// better, as Optuna's documentation says to).
const OPTUNA_IMPORTANCE: &str = r#"
import json, sys, warnings, optuna
from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator, get_param_importances
warnings.simplefilter("ignore")
optuna.logging.set_verbosity(optuna.logging.ERROR)
out = {}
for name in sys.argv[3:]:
    s = optuna.load_study(study_name=name, storage=sys.argv[1])
    ev = FanovaImportanceEvaluator(seed=0) if sys.argv[2] == "fanova" else PedAnovaImportanceEvaluator()
    if len(s.directions) == 1:
        out[name] = [get_param_importances(s, evaluator=ev)]
    else:
        out[name] = []
        for k, d in enumerate(s.directions):
            sign = 1.0 if d == optuna.study.StudyDirection.MINIMIZE else -1.0
            out[name].append(get_param_importances(
                s, evaluator=ev, target=lambda t, k=k, sign=sign: sign * t.values[k]))
print(json.dumps(out))
"#;

/// Spearman's rank correlation of two importance lists over the same names.
fn spearman(a: &[(String, f64)], b: &[(String, f64)]) -> f64 {
    let of =
        |v: &[(String, f64)], name: &str| v.iter().find(|x| x.0 == name).expect("the same names").1;
    let (x, y): (Vec<f64>, Vec<f64>) = a.iter().map(|(p, v)| (*v, of(b, p))).unzip();
    tune::insight::spearman(&x, &y)
}

/// On three studies tune ran (a command study with real structure; a stand-in of the builtin
/// study's space run as a command: log learning rate, log batch size, optimizer, momentum
/// only for SGD, stepped dropout, maximized; a two-objective study), tune's importances and
/// Optuna's (loading tune's SQLite file with `optuna.load_study`) rank alike: Spearman >= 0.8,
/// the same top parameter, and in fact the same shares.
#[test]
fn importance_agrees_with_optuna_reading_the_same_database() {
    agrees_with_optuna("ped-anova");
}

/// The same three studies ranked by fANOVA, tune's forest against Optuna's (scikit-learn's,
/// whose random numbers differ): Spearman >= 0.8 and the same top parameter. Optuna's fANOVA
/// ranks only the parameters every trial holds, so the builtin-shaped study's conditional
/// momentum is left out on both sides.
#[test]
fn importance_by_fanova_agrees_with_optuna_reading_the_same_database() {
    agrees_with_optuna("fanova");
}

/// Runs the three studies, ranks them with `method` in tune and in Optuna, and compares; the
/// shares must be the same to 1e-6 for the deterministic PED-ANOVA.
fn agrees_with_optuna(method: &str) {
    let sb = Sandbox::new();
    sb.write(
        "trial.sh",
        r#"awk -v x="$1" -v k="$2" -v c="$3" 'BEGIN { printf "tune: {\"step\": 0, \"loss\": %.15g, \"cost\": %.15g}\n", (x-0.5)*(x-0.5) + 0.3*k + (c == "b" ? 0.4 : 0), (x+1)*(x+1) + 1/k }'
"#,
    );
    sb.write(
        "a.toml",
        &sh_study("command", 40, 4, "", &["{x}", "{k}", "{c}"]),
    );
    sb.write(
        "m.toml",
        &sh_study("multi", 40, 4, "", &["{x}", "{k}", "{c}"]).replacen(
            "metric = \"loss\"",
            "metric = [\"loss\", \"cost\"]\ndirection = [\"minimize\", \"minimize\"]",
            1,
        ),
    );
    sb.write(
        "b.sh",
        r#"awk -v lr="$1" -v b="$2" -v o="$3" -v m="$4" -v d="$5" 'BEGIN { l = log(lr)/log(10); printf "tune: {\"step\": 0, \"acc\": %.15g}\n", 0.95 - 0.02*(l+2.5)*(l+2.5) - 0.01*log(b)/log(2) - (o == "sgd" ? 0.1*(0.9-m)*(0.9-m) : 0.02) - 0.05*d }'
"#,
    );
    sb.write(
        "b.toml",
        r#"[study]
name = "builtin-shaped"
metric = "acc"
direction = "maximize"
trials = 40
seed = 3

[space]
lr = { type = "float", low = 1e-5, high = 1e-1, log = true }
batch = { type = "int", low = 16, high = 256, log = true }
optimizer = { type = "categorical", choices = ["sgd", "adam"] }
momentum = { type = "float", low = 0.0, high = 0.99, when = { optimizer = "sgd" } }
dropout = { type = "float", low = 0.0, high = 0.5, step = 0.1 }

[workers]
count = 4
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "b.sh", "{lr}", "{batch}", "{optimizer}", "{momentum}", "{dropout}"]
"#,
    );
    // 40 trials each (the top 10 % is then 4 trials); a loaded machine gets more than the
    // usual patience for the three runs.
    for f in ["a.toml", "m.toml", "b.toml"] {
        let out = crate::common::output_within(
            sb.tune(&["run", f, "--no-tui"]),
            std::time::Duration::from_secs(300),
        );
        assert!(out.status.success(), "tune run {f}: {}", text(&out));
    }
    let python = crate::optuna_compat::python_after_setup(&["--python-tests"]);
    let mut cmd = std::process::Command::new(&python);
    cmd.arg("-c")
        .arg(OPTUNA_IMPORTANCE)
        .arg(format!("sqlite:///{}", sb.join("tune.db").display()))
        .arg(method)
        .args(["command", "multi", "builtin-shaped"]);
    let out = crate::common::output_within(cmd, std::time::Duration::from_secs(120));
    assert!(out.status.success(), "Optuna: {}", text(&out));
    let optuna: Value = serde_json::from_slice(&out.stdout).expect("Optuna prints JSON");
    for (file, study, objectives) in [
        ("a.toml", "command", 1),
        ("m.toml", "multi", 2),
        ("b.toml", "builtin-shaped", 1),
    ] {
        let out = sb.ok(&["importance", file, "--method", method, "--format", "json"]);
        let ours: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let ours = ours["objectives"].as_array().expect("objectives");
        let theirs = optuna[study].as_array().expect("Optuna's objectives");
        assert_eq!(ours.len(), objectives);
        assert_eq!(theirs.len(), objectives);
        for (o, t) in ours.iter().zip(theirs) {
            let ours: Vec<(String, f64)> = o["importances"]
                .as_array()
                .expect("importances")
                .iter()
                .map(|p| {
                    (
                        p["param"].as_str().expect("param").to_string(),
                        p["importance"].as_f64().expect("importance"),
                    )
                })
                .collect();
            let mut theirs: Vec<(String, f64)> = t
                .as_object()
                .expect("a dict")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_f64().expect("a share")))
                .collect();
            theirs.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let what = format!(
                "{study} objective {}: tune {ours:?}\nOptuna {theirs:?}",
                o["objective"]
            );
            assert_eq!(ours.len(), theirs.len(), "{what}");
            assert_eq!(ours[0].0, theirs[0].0, "{what}");
            assert!(spearman(&ours, &theirs) >= 0.8, "{what}");
            if method != "ped-anova" {
                continue;
            }
            for (p, v) in &ours {
                let w = theirs
                    .iter()
                    .find(|t| &t.0 == p)
                    .expect("the same params")
                    .1;
                assert!((v - w).abs() < 1e-6, "{p}: {what}");
            }
        }
    }
}
