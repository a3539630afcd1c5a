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
