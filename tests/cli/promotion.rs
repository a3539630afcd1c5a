//! Promotion-based ASHA (`[pruner] mode = "promote"`, issue 27): a trial outside the top at a
//! rung pauses there with its checkpoint, and once enough later trials rank below it, it is
//! promoted: its params run again as its next attempt, which resumes from the checkpoint and
//! carries its curve on, every step once. Run on the shipped resumable example script, on one
//! slot, with enqueued params whose ranks are known (`lr = 0.1` puts the script's loss floor at
//! `decay`, and its noise is below 0.01), so that the pauses and the promotion are the same on
//! every run.

use std::path::Path;

use crate::attempts::{rerun_of, resumable_study, show};
use crate::common::{Sandbox, report_steps, text};

/// The decays of the enqueued trials, in order: trial 0 the best; 1 to 5 each worse than all
/// before it, so each pauses at the first rung (step 1), until 5 trials there rank below
/// trial 1 and it is promoted (2nd of 6, in the top 1/3).
const DECAYS: [f64; 6] = [0.0, 0.1, 0.3, 0.35, 0.4, 0.45];

fn promote_study(sb: &Sandbox) -> &'static str {
    let file = resumable_study(sb, 8);
    let path = sb.join(file);
    let mut study = std::fs::read_to_string(&path).expect("the study");
    study.push_str(
        "\n[pruner]\nkind = \"asha\"\nmode = \"promote\"\nresource = \"step\"\n\
         min_resource = 1\nmax_resource = 5\nreduction_factor = 3\n",
    );
    for d in DECAYS {
        study.push_str(&format!("\n[[enqueue]]\nlr = 0.1\ndecay = {d}\n"));
    }
    // Short epochs: the pauses, not the training, are under test.
    let study = study.replace(
        "\"--epoch-seconds\", \"0.3\"",
        "\"--epoch-seconds\", \"0.15\"",
    );
    sb.write(file, &study);
    file
}

#[test]
fn a_paused_trial_is_promoted_and_resumes_from_its_checkpoint_with_each_step_once() {
    let sb = Sandbox::new();
    let file = promote_study(&sb);
    let out = sb.run(&["run", file, "--no-tui"]);
    assert!(out.status.success(), "{}", text(&out));
    let log = text(&out);
    assert!(
        log.contains("trial 2 paused at step 1 (rung 0: 3rd of 3 trials there"),
        "{log}"
    );
    assert!(
        log.contains("trial 1 promoted (rung 0: 2nd of 6 trials there, in the top 1/3): trial 6 resumes it from its checkpoint"),
        "{log}"
    );

    let trials = sb.trials(file);
    let by_number = |n: u64| {
        trials
            .iter()
            .find(|t| t["number"] == n)
            .unwrap_or_else(|| panic!("trial {n} in {trials:?}"))
    };
    // Trial 0 led every rung and completed; trial 1 paused at step 1, then was promoted: it is
    // now the earlier attempt of its re-run (failed as interrupted, saying why).
    assert_eq!(by_number(0)["state"], "complete");
    let first = by_number(1);
    assert_eq!(first["state"], "failed", "{first}");
    let why = first["error"].as_str().expect("a reason");
    assert!(
        why.contains("paused, then promoted (rung 0: 2nd of 6 trials there, in the top 1/3)"),
        "{why}"
    );
    // Trials 2 to 5 paused at the first rung and stay paused: pruned, resumable.
    for n in 2..=5 {
        let t = by_number(n);
        assert_eq!(t["state"], "pruned", "{t}");
        assert_eq!(t["paused"], true, "{t}");
    }

    // The re-run resumed from trial 1's checkpoint: its curve starts with trial 1's reports up
    // to it, goes on after it, and has every step once, in order.
    let rerun = rerun_of(&trials, first);
    let n = rerun["number"].as_u64().expect("a number");
    let shown = show(&sb, file, n);
    assert_eq!(shown["retry_of"], 1, "{shown}");
    assert_eq!(shown["attempt"], 2, "{shown}");
    let curve = report_steps(&shown);
    assert_eq!(
        curve,
        (0..curve.len() as i64).collect::<Vec<_>>(),
        "{shown}"
    );
    assert!(
        curve.len() >= 4,
        "it went past the rung it paused at: {shown}"
    );
    let ckpt = sb.join("studies/runs/resumable-curve/trial-00001/checkpoints");
    let attempts = std::fs::read_to_string(ckpt.join("attempts.log")).expect("attempts.log");
    let lines: Vec<&str> = attempts.lines().collect();
    assert_eq!(lines.len(), 2, "{attempts}");
    assert!(lines[0].ends_with("resumed_from=-1"), "{attempts}");
    let from: i64 = lines[1]
        .rsplit('=')
        .next()
        .and_then(|e| e.parse().ok())
        .expect("resumed_from=E");
    assert!(from >= 1, "attempt 2 resumed after the rung: {attempts}");
    assert_eq!(curve.first().copied(), Some(0));
    assert!(
        curve.contains(&(from + 1)),
        "attempt 2 reported the step after its checkpoint: {shown}"
    );

    // `tune show` and `tune trials` tell a paused trial from a pruned one.
    let out = sb.ok(&["show", "3", file]);
    let said = text(&out);
    assert!(said.contains("paused at step 1 (rung 0:"), "{said}");
    assert!(said.contains("resumable from its checkpoint"), "{said}");
    let out = sb.ok(&["trials", file]);
    assert!(text(&out).contains("paused"), "{}", text(&out));

    // Plain SQL sees the same: the view's `paused` column.
    let db = sb.db(&Path::new("studies").join("tune.db").display().to_string());
    let paused: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM tune_trials_view WHERE paused AND state = 'pruned'",
            [],
            |r| r.get(0),
        )
        .expect("the view has `paused`");
    let listed = trials.iter().filter(|t| t["paused"] == true).count();
    assert_eq!(paused as usize, listed);
    assert!(paused >= 4, "{paused}");
}

/// The modes that cannot pause are refused up front, naming the key: a builtin study whose
/// trials save no checkpoints, and `tune ask-tell` (its client runs the trials); a mode that
/// does not exist is refused by name.
#[test]
fn promote_mode_is_refused_where_no_trial_can_resume() {
    let sb = Sandbox::new();
    let builtin = "[study]\nname = \"p\"\nmetric = \"val_loss\"\ntrials = 2\n\n\
        [space]\nlr = { type = \"float\", low = 1e-3, high = 1.0, log = true }\n\n\
        [trial]\nkind = \"builtin\"\nepochs = 3\ncheckpoints = false\n\n\
        [trial.model]\nkind = \"mlp\"\n\n[trial.data]\ndataset = \"digits\"\n\n\
        [pruner]\nkind = \"asha\"\nmode = \"promote\"\nresource = \"epoch\"\n";
    sb.write("p.toml", builtin);
    let out = sb.run(&["run", "p.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("p.toml"), "{said}");
    assert!(said.contains("pruner.mode"), "{said}");
    assert!(said.contains("trial.checkpoints = false"), "{said}");
    assert!(!sb.join("tune.db").exists(), "nothing created");

    let unknown = builtin
        .replace("checkpoints = false\n", "")
        .replace("\"promote\"", "\"pause\"");
    sb.write("u.toml", &unknown);
    let out = sb.run(&["run", "u.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("pruner"), "{said}");
    assert!(said.contains("pause"), "{said}");
    assert!(said.contains("promote"), "{said}");

    let session = "[space]\nx = { type = \"float\", low = 0.0, high = 1.0 }\n\n\
        [pruner]\nkind = \"asha\"\nmode = \"promote\"\nmax_resource = 9\n";
    sb.write("s.toml", session);
    let out = sb.run(&["ask-tell", "--space", "s.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("s.toml: key `pruner.mode`"), "{said}");
    assert!(said.contains("tune ask-tell"), "{said}");
}
