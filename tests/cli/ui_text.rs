//! What the line output and `tune show` say about a study's trials: a pruned trial says where
//! and why it was pruned, in the words of its pruner (issue 29, item 10).

use serde_json::Value;

use crate::common::{Sandbox, text};

/// A study of one worker whose trial 0 reports `good` at steps 0–4 (epochs 1–5), and whose
/// later trials report `bad` at steps 0 and 1 and would then sleep: every later trial is pruned
/// there, by the `[pruner]` table `pruner`.
fn study(direction: &str, pruner: &str) -> String {
    format!(
        r#"[study]
name = "why"
metric = "loss"
direction = "{direction}"
trials = 3

[space]
x = {{ type = "float", low = -2.0, high = 2.0 }}

[pruner]
{pruner}

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "trial.sh"]
grace = "2s"
"#
    )
}

fn script(good: f64, bad: f64) -> String {
    format!(
        r#"if [ "$TUNE_TRIAL" = 0 ]; then
  for s in 0 1 2 3 4; do echo "tune: {{\"step\": $s, \"epoch\": $((s + 1)), \"loss\": {good}}}"; done
else
  echo 'tune: {{"step": 0, "epoch": 1, "loss": {bad}}}'
  echo 'tune: {{"step": 1, "epoch": 2, "loss": {bad}}}'
  sleep 30
  echo 'tune: {{"step": 2, "epoch": 3, "loss": {good}}}'
fi
"#
    )
}

/// Runs the study and checks that trial 1 is pruned with `reason` (what follows "pruned "),
/// in the line output of `tune run`, in `tune show` and its JSON, and in `tune watch`'s lines
/// read back from the database afterwards.
fn pruned_with(direction: &str, pruner: &str, good: f64, bad: f64, reason: &str) {
    let sb = Sandbox::new();
    sb.write("s.toml", &study(direction, pruner));
    sb.write("trial.sh", &script(good, bad));
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    let all = text(&out);
    let line = all
        .lines()
        .find(|l| l.contains("trial 1 pruned"))
        .unwrap_or_else(|| panic!("no line for trial 1:\n{all}"));
    assert!(
        line.contains(&format!("trial 1 pruned {reason}")),
        "{pruner}: {line}"
    );

    let show = sb.ok(&["show", "1", "s.toml"]);
    assert!(
        String::from_utf8_lossy(&show.stdout).contains(&format!("pruned {reason}")),
        "{pruner}: {}",
        text(&show)
    );
    let json: Value =
        serde_json::from_slice(&sb.ok(&["show", "1", "s.toml", "--format", "json"]).stdout)
            .expect("JSON");
    assert_eq!(json["state"], "pruned", "{json:#}");
    assert_eq!(json["pruned_reason"], reason, "{json:#}");
    // A trial that was not pruned has no reason.
    let json: Value =
        serde_json::from_slice(&sb.ok(&["show", "0", "s.toml", "--format", "json"]).stdout)
            .expect("JSON");
    assert_eq!(json["pruned_reason"], Value::Null, "{json:#}");

    // After the fact, from the database alone.
    let watch = sb.ok(&["watch", "s.toml"]);
    let all = text(&watch);
    assert!(
        all.contains(&format!("trial 1 pruned {reason}")),
        "{pruner}: {all}"
    );
}

#[test]
fn a_trial_pruned_by_asha_says_at_which_rung_and_how_it_ranked() {
    pruned_with(
        "minimize",
        "kind = \"asha\"\nmin_resource = 1\nreduction_factor = 3",
        1.5,
        100.5,
        "at step 1 (rung 0: 2nd of 2 trials there, below the top 1/3)",
    );
}

#[test]
fn a_trial_pruned_by_asha_over_a_reported_key_names_that_key() {
    // Epochs count from 1 here: the first rung is at epoch 1, the second at epoch 2.
    pruned_with(
        "maximize",
        "kind = \"asha\"\nmin_resource = 1\nreduction_factor = 2\nresource = \"epoch\"",
        100.5,
        1.5,
        "at epoch 1 (rung 0: 2nd of 2 trials there, below the top 1/2)",
    );
}

#[test]
fn a_trial_pruned_by_hyperband_names_its_bracket_and_rung() {
    pruned_with(
        "minimize",
        "kind = \"hyperband\"\nmin_resource = 1\nmax_resource = 9\nbrackets = 1",
        1.5,
        100.5,
        "at step 1 (bracket 0, rung 0: 2nd of 2 trials there, below the top 1/3)",
    );
}

#[test]
fn a_trial_pruned_by_the_median_rule_says_its_best_and_the_median() {
    pruned_with(
        "minimize",
        "kind = \"median\"\nmin_trials = 1",
        1.5,
        100.5,
        "at step 0 (its best 100.5 is worse than the median 1.5 of 1 complete trial there)",
    );
}

#[test]
fn a_maximised_study_states_the_median_rule_in_its_own_terms() {
    pruned_with(
        "maximize",
        "kind = \"median\"\nmin_trials = 1",
        100.5,
        1.5,
        "at step 0 (its best 1.5 is worse than the median 100.5 of 1 complete trial there)",
    );
}

// ----- the sampler still exploring (issue 29, item 11) ---------------------------------------

/// A median-pruned study of `trials` trials whose `[sampler]` is `sampler`: trial 0 completes
/// at 1.5 and every later trial is pruned at its first report, so pruning leaves one complete
/// trial, fewer than the model needs.
fn all_pruned_study(sampler: &str, trials: u64) -> String {
    study("minimize", "kind = \"median\"\nmin_trials = 1")
        .replace("trials = 3", &format!("trials = {trials}"))
        .replace("[pruner]", &format!("[sampler]\n{sampler}\n\n[pruner]"))
}

fn lines_of(sb: &Sandbox, study: &str) -> String {
    sb.write("s.toml", study);
    sb.write("trial.sh", &script(1.5, 100.5));
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_lines_say_the_sampler_still_explores_once_pruning_leaves_too_few_complete_trials() {
    // The GP (and `auto`, the GP here) also models the trials' values at a rung once three
    // trials reported along the way: its note says so, and goes once three did.
    for (sampler, startup, rungs) in [
        ("kind = \"gp\"\nn_startup = 2", 2, true),
        ("kind = \"auto\"\nn_startup = 3", 3, true),
        ("kind = \"tpe\"\nn_startup = 2", 2, false),
        ("kind = \"tpe\"\nn_startup = 4", 4, false),
        // The GP's default initial design for one param: 5 trials, by when three reported.
        ("kind = \"gp\"", 5, true),
    ] {
        let sb = Sandbox::new();
        let out = lines_of(&sb, &all_pruned_study(sampler, 7));
        for n in 1..7u64 {
            let line = out
                .lines()
                .find(|l| l.contains(&format!("trial {n} pruned")))
                .unwrap_or_else(|| panic!("{sampler}: no line for trial {n}:\n{out}"));
            // The trial after this one is asked past the initial design with one complete
            // trial (and, for the GP, fewer than three that reported): the sampler explores,
            // by its own rule.
            let (until, shown) = if rungs {
                (" or 3 report", n + 1 >= startup && 1 + n < 3)
            } else {
                ("", n + 1 >= startup)
            };
            let note = format!(
                "; sampler: exploring (Sobol) until 2 trials complete{until}; 1 complete, {n} pruned"
            );
            assert_eq!(line.ends_with(&note), shown, "{sampler}, trial {n}: {line}");
            assert_eq!(
                line.contains("exploring"),
                shown,
                "{sampler}, trial {n}: {line}"
            );
        }
    }
}

#[test]
fn the_lines_say_nothing_of_exploring_once_two_trials_are_complete_or_for_a_sampler_without_a_model()
 {
    // Two complete trials: the model proposes.
    let sb = Sandbox::new();
    sb.write(
        "s.toml",
        &study("minimize", "kind = \"none\"")
            .replace("trials = 3", "trials = 6")
            .replace(
                "[pruner]",
                "[sampler]\nkind = \"gp\"\nn_startup = 2\n\n[pruner]",
            ),
    );
    sb.write("trial.sh", "echo 'tune: {\"step\": 0, \"loss\": 1.5}'\n");
    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("exploring"),
        "{}",
        text(&out)
    );
    // Random and Sobol never model: nothing to say.
    for sampler in ["kind = \"random\"", "kind = \"sobol\""] {
        let sb = Sandbox::new();
        let out = lines_of(&sb, &all_pruned_study(sampler, 5));
        assert!(!out.contains("exploring"), "{sampler}: {out}");
    }
}

#[test]
fn tune_watch_says_the_sampler_still_explores_after_the_fact() {
    let sb = Sandbox::new();
    lines_of(&sb, &all_pruned_study("kind = \"tpe\"\nn_startup = 2", 4));
    let out = sb.ok(&["watch", "s.toml"]);
    let all = String::from_utf8_lossy(&out.stdout);
    assert!(
        all.contains("; sampler: exploring (Sobol) until 2 trials complete; 1 complete, 3 pruned"),
        "{}",
        text(&out)
    );
}
