//! Population-based training on the builtin trainer through the real CLI (`tune run`, issue
//! 27): the child of an exploited trial resumes its parent's snapshot (weights, optimizer
//! state, data order, step) with its own explored `lr`. A test binary of its own: its two
//! slots race each other, and the other trainer tests would load the machine under them.

use std::path::Path;

use serde_json::Value;

mod common;

use common::{run_study, tune_json, worker_log};

/// Two slots on digits (the MLP, on the CPU, adam), 16 epochs, seeded. Trial 0 (`lr = 1e-4`,
/// batch 16) learns steadily; trial 1 (`lr = 1e-6`, batch 4) barely moves, and with four
/// times the steps an epoch it reaches each epoch far behind trial 0 (about 2 s for its first
/// two against 0.6 s), long before trial 0 ends (about 5 s). So at a point (`interval = 2`:
/// epoch 2, else 4 where a slow start put trial 1 first at 2) it ranks 2nd of 2, in the bottom
/// half, and is exploited: trial 2 continues from trial 0's checkpoint, its `lr` times 0.8 or
/// 1.2 (`resample_probability = 0`; the only searched param that may change mid-run), its
/// batch size trial 0's. The budget of 3 leaves no room for another child.
fn pbt_study() -> &'static str {
    r#"
[study]
name = "pbt"
metric = "val_loss"
trials = 3
seed = 7

[space]
lr = { type = "float", low = 1e-6, high = 1e-1, log = true }
batch_size = { type = "categorical", choices = [4, 16] }

[workers]
count = 2
devices = ["cpu"]

[trial]
kind = "builtin"
epochs = 16
optimizer = "adam"

[trial.model]
kind = "mlp"
width = 256
depth = 2

[trial.data]
dataset = "digits"

[pruner]
kind = "pbt"
resource = "epoch"
interval = 2
quantile = 0.5
resample_probability = 0

[[enqueue]]
lr = 1e-4
batch_size = 16

[[enqueue]]
lr = 1e-6
batch_size = 4
"#
}

/// A trial's reports but the final one, as (step, epoch, val_loss, lr).
fn curve(shown: &Value) -> Vec<(u64, f64, f64, f64)> {
    shown["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .filter(|r| r["final"] != true)
        .map(|r| {
            let m = &r["metrics"];
            let f = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
            (
                r["step"].as_u64().expect("a step"),
                f("epoch"),
                f("val_loss"),
                f("lr"),
            )
        })
        .collect()
}

#[test]
fn a_builtin_trial_exploited_by_pbt_is_replaced_by_a_child_resuming_its_parents_snapshot() {
    let dir = tempfile::tempdir().expect("temp dir");
    let study = dir.path().join("pbt.toml");
    std::fs::write(&study, pbt_study()).expect("write study");
    let db = dir.path().join("t.db");
    let log = run_study(&db, &study);
    let study_s = study.to_str().expect("utf-8 path");
    let show = |n: u64| tune_json(&db, &["show", &n.to_string(), study_s, "--format", "json"]);
    let trials = tune_json(&db, &["trials", study_s, "--format", "json"]);
    assert_eq!(
        trials.as_array().map(Vec::len),
        Some(3),
        "{trials:#}\n{log}"
    );

    // Trial 2 is trial 0's child, from the checkpoint at step `from`, and completes.
    let (parent, exploited, child) = (show(0), show(1), show(2));
    assert_eq!(child["parent"]["trial"], 0, "{child:#}\n{log}");
    let from = child["parent"]["step"].as_u64().expect("the parent's step");
    assert_eq!(child["state"], "complete", "{child:#}\n{log}");
    assert_eq!(parent["state"], "complete", "{parent:#}");
    assert_eq!(parent["children"][0]["trial"], 2, "{parent:#}");
    assert_eq!(parent["children"][0]["step"], from, "{parent:#}");
    // Trial 1 is pruned saying so, naming the very step the child's record names.
    assert_eq!(exploited["state"], "pruned", "{exploited:#}");
    let why = exploited["pruned_reason"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!(
            "exploited; trial 2 continues from trial 0's checkpoint at step {from} with lr "
        )),
        "{exploited:#}\n{log}"
    );
    assert!(
        log.contains(&format!(
            "trial 2 starts from trial 0's checkpoint at step {from} ("
        )),
        "{log}"
    );

    // The child's params: the parent's, `lr` times one of the factors.
    let p_lr = parent["params"]["lr"].as_f64().expect("lr");
    let c_lr = child["params"]["lr"].as_f64().expect("lr");
    assert!(
        [0.8, 1.2]
            .iter()
            .any(|f| (c_lr / (p_lr * f) - 1.0).abs() < 1e-9),
        "lr {c_lr} is not {p_lr} × 0.8 or 1.2"
    );
    assert_eq!(
        child["params"]["batch_size"],
        parent["params"]["batch_size"]
    );

    // The trainer resumed the copied snapshot: its log says from where, the record's step.
    let worker = worker_log(&child);
    assert!(
        worker.contains(&format!("resumed from the checkpoint at step {from} (")),
        "resumed from step {from}, not restarted: {worker}"
    );
    // Its curve goes on from there: the first epoch past the checkpoint's, then every
    // epoch once, to the last; at its own lr, not the parent's (set every step).
    let (p_curve, c_curve) = (curve(&parent), curve(&child));
    let (step, epoch, _, _) = p_curve[0];
    let per_epoch = (step as f64 / epoch).round() as u64;
    let past = from / per_epoch + 1;
    let epochs: Vec<f64> = c_curve.iter().map(|r| r.1).collect();
    assert_eq!(
        epochs,
        (past..=16).map(|e| e as f64).collect::<Vec<_>>(),
        "from step {from} ({per_epoch} steps an epoch)"
    );
    assert!(c_curve[0].0 > from, "{c_curve:?}");
    assert!(
        c_curve.iter().all(|r| (r.3 / c_lr - 1.0).abs() < 1e-6),
        "trained at lr {c_lr}: {c_curve:?}"
    );

    // And from the parent's weights: one epoch from scratch leaves the parent at its first
    // val_loss (the child's params but for lr's 20 %); the child's first is far below it and
    // close to the parent's own at that epoch.
    let (first, first_val) = (c_curve[0].1, c_curve[0].2);
    let fresh = p_curve[0].2;
    let (_, _, same_epoch, _) = *p_curve
        .iter()
        .find(|r| r.1 == first)
        .expect("the parent reported that epoch");
    assert!(
        first_val < 0.75 * fresh,
        "child at epoch {first}: val_loss {first_val}, a fresh model's first epoch {fresh}"
    );
    assert!(
        (first_val / same_epoch - 1.0).abs() < 0.3,
        "child at epoch {first}: val_loss {first_val}, the parent's {same_epoch}"
    );
    // The child's copy was its own: nothing of the staging is left.
    let runs = Path::new(child["trial_dir"].as_str().expect("a run directory"))
        .parent()
        .expect("the study's runs")
        .join(".pbt");
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}
