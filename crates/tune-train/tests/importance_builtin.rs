//! Issue 28: on a real builtin study (tune's trainer fitting an MLP to the vendored digits),
//! `tune importance` ranks the parameters as Optuna's `get_param_importances` does reading the
//! same SQLite file with the same method: Spearman's rank correlation ≥ 0.8 and the same top
//! parameter, for PED-ANOVA and for fANOVA. One slot, so the study (its proposals and, on the
//! CPU, its trainings) is the same on every run; its parameters matter unequally (a learning
//! rate over five decades, a width of 4 or 256, a dropout up to 0.05), so that fANOVA's
//! forests, scikit-learn's and tune's, rank them alike. Optuna comes from the project's venv, which
//! `scripts/setup.sh --python-tests` makes (run here, as the CLI tests do: a quick no-op when
//! it is there).

use std::path::Path;
use std::process::{Command, Stdio};

mod common;

use common::{run_study, tune_json};

const STUDY: &str = r#"
[study]
name = "digits-importance"
metric = "val_loss"
trials = 40
seed = 11

[space]
lr = { type = "float", low = 1e-5, high = 1.0, log = true }
width = { type = "categorical", choices = [4, 256] }
dropout = { type = "float", low = 0.0, high = 0.05 }

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "builtin"
epochs = 2
batch_size = 32
optimizer = "adam"

[trial.model]
kind = "mlp"

[trial.data]
dataset = "digits"

[pruner]
kind = "none"
"#;

const OPTUNA: &str = r#"
import json, sys, warnings, optuna
from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator, get_param_importances
warnings.simplefilter("ignore")
optuna.logging.set_verbosity(optuna.logging.ERROR)
s = optuna.load_study(study_name="digits-importance", storage=sys.argv[1])
ev = FanovaImportanceEvaluator(seed=0) if sys.argv[2] == "fanova" else PedAnovaImportanceEvaluator()
print(json.dumps(get_param_importances(s, evaluator=ev)))
"#;

/// The project's venv Python, after `scripts/setup.sh --python-tests`.
fn python() -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(root.join("scripts/setup.sh"))
        .arg("--python-tests")
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .expect("setup runs");
    assert!(
        out.status.success(),
        "scripts/setup.sh --python-tests failed: Optuna is needed for this test\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    root.join(".venv/bin/python")
}

/// Spearman's rank correlation of two importance lists over the same names.
fn spearman(a: &[(String, f64)], b: &[(String, f64)]) -> f64 {
    let of =
        |v: &[(String, f64)], name: &str| v.iter().find(|x| x.0 == name).expect("the same names").1;
    let (x, y): (Vec<f64>, Vec<f64>) = a.iter().map(|(p, v)| (*v, of(b, p))).unzip();
    tune::insight::spearman(&x, &y)
}

#[test]
fn importance_of_a_builtin_study_agrees_with_optuna_for_both_methods() {
    let dir = tempfile::tempdir().expect("temp dir");
    let study = dir.path().join("study.toml");
    std::fs::write(&study, STUDY).expect("write study");
    let db = dir.path().join("t.db");
    run_study(&db, &study);
    let python = python();
    for method in ["ped-anova", "fanova"] {
        let study_s = study.to_str().expect("utf-8 path");
        let ours = tune_json(
            &db,
            &[
                "importance",
                study_s,
                "--method",
                method,
                "--format",
                "json",
            ],
        );
        let ours: Vec<(String, f64)> = ours["objectives"][0]["importances"]
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
        let out = Command::new(&python)
            .arg("-c")
            .arg(OPTUNA)
            .arg(format!("sqlite:///{}", db.display()))
            .arg(method)
            .output()
            .expect("python runs");
        assert!(
            out.status.success(),
            "Optuna: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&out.stdout).expect("Optuna prints JSON");
        let mut theirs: Vec<(String, f64)> = theirs
            .into_iter()
            .map(|(k, v)| (k, v.as_f64().expect("a share")))
            .collect();
        theirs.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let what = format!("{method}: tune {ours:?}\nOptuna {theirs:?}");
        assert_eq!(ours.len(), 3, "{what}");
        assert_eq!(ours.len(), theirs.len(), "{what}");
        assert_eq!(ours[0].0, theirs[0].0, "{what}");
        assert!(spearman(&ours, &theirs) >= 0.8, "{what}");
    }
}
