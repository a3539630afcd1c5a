//! Every file in `studies/` is executable documentation: each study file parses, each script
//! there is used by a study, and the small studies run (with a budget of two trials).

use std::path::{Path, PathBuf};

use crate::common::{Sandbox, sh_study, stderr, text};

fn studies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("studies")
}

/// The study files in `studies/`, sorted.
fn study_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(studies_dir())
        .expect("studies/ exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "studies/ holds study files");
    files
}

#[test]
fn every_study_file_in_studies_parses() {
    for file in study_files() {
        if let Err(e) = tune::spec::load(&file, &tune::spec::Overrides::default()) {
            panic!("{e}");
        }
    }
}

#[test]
fn the_readme_screenshots_study_parses() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots/demo.toml");
    if let Err(e) = tune::spec::load(&file, &tune::spec::Overrides::default()) {
        panic!("{e}");
    }
}

/// Issue 12, item 14: the quickstart shows the mission, searching the learning rate, the
/// optimizer, the batch size, gradient-accumulation steps and the precision together (the
/// trainer tests run it whole), and the README's walk-through says so.
#[test]
fn the_quickstart_searches_lr_optimizer_batch_size_accumulation_and_precision() {
    use tune::space::{ParamKind, ParamValue};
    let study = tune::spec::load(
        &studies_dir().join("quickstart.toml"),
        &tune::spec::Overrides::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let param = |name: &str| {
        study
            .space
            .get(name)
            .unwrap_or_else(|| panic!("the quickstart does not search {name}"))
    };
    for name in ["lr", "optimizer", "batch_size"] {
        param(name);
    }
    match &param("accumulation").kind {
        ParamKind::Int { low, high, .. } => assert!(*low == 1 && *high > 1, "{low}..{high}"),
        other => panic!("accumulation is searched as {other:?}"),
    }
    match &param("amp").kind {
        ParamKind::Categorical { choices } => {
            for want in ["bf16", "off"] {
                assert!(
                    choices.contains(&ParamValue::Str(want.to_string())),
                    "amp choices {choices:?} lack {want}"
                );
            }
        }
        other => panic!("amp is searched as {other:?}"),
    }
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README");
    assert!(
        readme.contains("gradient-accumulation steps, precision"),
        "the README's first study does not name what the quickstart searches"
    );
}

#[test]
fn every_other_file_in_studies_is_used_by_a_study() {
    let sources: String = study_files()
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("readable"))
        .collect();
    for entry in std::fs::read_dir(studies_dir()).expect("studies/ exists") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        // Scripts and data must serve a study; notes for people (*.md) need not.
        if path.is_dir() || name.ends_with(".toml") || name.ends_with(".md") || left_by_a_run(&name)
        {
            continue;
        }
        assert!(
            sources.contains(&name),
            "studies/{name} is used by no study file"
        );
    }
}

/// What running a study leaves beside its file (the quickstart does, in `studies/`): its
/// database with SQLite's `-wal`/`-shm` companions, the `.ask-lock` of proposals, and the
/// trial directories. None of it is part of the project, so no check may trip over it.
fn left_by_a_run(name: &str) -> bool {
    name == "runs" || name.ends_with(".db") || name.contains(".db-") || name.contains(".db.")
}

#[test]
fn what_a_study_run_leaves_in_studies_is_not_taken_for_a_project_file() {
    for left in [
        "tune.db",
        "tune.db-wal",
        "tune.db-shm",
        "tune.db.ask-lock",
        "runs",
    ] {
        assert!(left_by_a_run(left), "{left}");
    }
    for ours in [
        "digits_softmax.py",
        "quickstart.toml",
        "digits.csv.gz",
        "db.py",
    ] {
        assert!(!left_by_a_run(ours), "{ours}");
    }
}

/// Copies a directory of the repository into the sandbox (leaving out runs and databases), so
/// that studies run where their relative paths still hold but write only to the temp dir.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("readable") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if left_by_a_run(&name) {
            continue;
        }
        if path.is_dir() {
            copy_tree(&path, &to.join(&name));
        } else {
            std::fs::copy(&path, to.join(&name)).expect("copy");
        }
    }
}

#[test]
fn the_command_studies_run_with_a_budget_of_two_trials() {
    let sb = Sandbox::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    copy_tree(&root.join("studies"), &sb.join("studies"));
    if root.join("datasets").is_dir() {
        copy_tree(&root.join("datasets"), &sb.join("datasets"));
    }
    let mut ran = 0;
    for file in study_files() {
        let name = file
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let mut doc: toml::Table =
            toml::from_str(&std::fs::read_to_string(&file).expect("readable")).expect("TOML");
        let is_command = doc
            .get("trial")
            .and_then(|t| t.get("kind"))
            .and_then(|k| k.as_str())
            == Some("command");
        // A torchrun study needs GPUs and a Python with torch: tests/cli/torchrun.rs runs its
        // script on stand-in GPUs where torch can be had.
        let torchrun = doc.get("trial").and_then(|t| t.get("launcher")).is_some();
        if !is_command || torchrun {
            continue;
        }
        let study = doc
            .get_mut("study")
            .and_then(|s| s.as_table_mut())
            .expect("[study]");
        study.insert("trials".into(), toml::Value::Integer(2));
        study.remove("timeout");
        study.remove("storage");
        let rel = format!("studies/{name}");
        sb.write(&rel, &toml::to_string(&doc).expect("TOML"));
        let db = format!("{name}.db");
        sb.ok(&["--db", &db, "run", &rel, "--no-tui"]);
        let out = sb.ok(&["--db", &db, "trials", &rel, "--format", "json"]);
        let trials: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(trials.len(), 2, "{name}: {}", text(&out));
        assert!(
            trials.iter().all(|t| t["state"] == "complete"),
            "{name}: every trial of a shipped study completes: {trials:#?}"
        );
        ran += 1;
    }
    assert!(ran > 0, "no command study ran");
}

#[test]
fn a_study_run_again_with_another_space_is_refused_unless_allowed_and_the_stored_file_follows() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo \"tune: {\\\"loss\\\": $1}\"\n");
    let first = sh_study("s", 2, 1, "", &["{x}"]);
    sb.write("s.toml", &first);
    sb.ok(&["run", "s.toml"]);
    let stored = |sb: &Sandbox| -> String {
        sb.db("tune.db")
            .query_row("SELECT config_toml FROM tune_studies", [], |r| r.get(0))
            .expect("the stored file")
    };
    // A raised budget: the study goes on, and the stored file is the new one.
    sb.write("s.toml", &first.replace("trials = 2", "trials = 3"));
    sb.ok(&["run", "s.toml"]);
    assert_eq!(sb.trials("s.toml").len(), 3);
    assert!(stored(&sb).contains("trials = 3"), "{}", stored(&sb));
    // Another space: refused, nothing run, nothing stored.
    let wider = first
        .replace("trials = 2", "trials = 4")
        .replace(
            "[space]\n",
            "[space]\nlr = { type = \"float\", low = 0.001, high = 0.1 }\n",
        )
        .replace("low = -2.0, high = 2.0", "low = -5.0, high = 5.0");
    sb.write("s.toml", &wider);
    let out = sb.run(&["run", "s.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    for needle in ["+lr", "~x", "--allow-space-change", "3 trials"] {
        assert!(err.contains(needle), "`{needle}` in: {err}");
    }
    assert_eq!(sb.trials("s.toml").len(), 3);
    assert!(stored(&sb).contains("trials = 3"));
    // Allowed: it goes on with the new space.
    sb.ok(&["run", "s.toml", "--allow-space-change"]);
    let trials = sb.trials("s.toml");
    assert_eq!(trials.len(), 4);
    assert!(trials[3]["params"]["lr"].is_number(), "{}", trials[3]);
    assert!(stored(&sb).contains("lr = "));
}

#[test]
fn the_command_example_copied_anywhere_runs_or_says_what_is_missing_before_any_trial() {
    // The README invites copying studies/command-digits.toml and its script to a directory of
    // one's own: what is missing is named before any trial, and nothing is stored.
    let sb = Sandbox::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text_of = |f: &str| std::fs::read_to_string(root.join(f)).expect("readable");
    let study = text_of("studies/command-digits.toml")
        .replace("trials = 12", "trials = 2")
        .replace("\"--epochs\", \"3\"", "\"--epochs\", \"1\"");
    assert!(
        study.contains("trials = 2"),
        "the budget line moved: {study}"
    );
    sb.write("mine/digits.toml", &study);

    // The study file alone: its script is required.
    let out = sb.run(&["run", "mine/digits.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = crate::common::stderr(&out);
    assert!(
        err.contains("trial.requires") && err.contains("digits_softmax.py"),
        "{err}"
    );
    assert!(!sb.join("mine/tune.db").exists(), "nothing is stored");

    // With the script but without its data: the study's check says where it looked.
    sb.write(
        "mine/digits_softmax.py",
        &text_of("studies/digits_softmax.py"),
    );
    let out = sb.run(&["run", "mine/digits.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = crate::common::stderr(&out);
    assert!(
        err.contains("trial.check") && err.contains("digits.csv.gz not found"),
        "{err}"
    );
    assert!(err.contains("looked in"), "{err}");
    assert!(!sb.join("mine/tune.db").exists(), "nothing is stored");

    // With the data beside the script, it runs its budget.
    std::fs::copy(
        root.join("datasets/digits.csv.gz"),
        sb.join("mine/digits.csv.gz"),
    )
    .expect("copy the data");
    sb.ok(&["run", "mine/digits.toml", "--no-tui"]);
    let trials = sb.trials("mine/digits.toml");
    assert_eq!(trials.len(), 2);
    assert!(
        trials.iter().all(|t| t["state"] == "complete"),
        "{trials:#?}"
    );
}
