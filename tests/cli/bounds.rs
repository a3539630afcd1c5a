//! Bounds: no duration or number a user can write makes tune panic, hang, wrap or grow without
//! bound. Every duration and integer key of the study file and every duration and integer flag
//! of every command gets extreme values (0, negative, 1e30, u64::MAX, "999999999999y",
//! i64::MAX + 1, …); the keys and flags are enumerated from the binary itself, so that a new
//! one without cases here fails the test. Refusals are exit 2, naming the file and the key, with
//! nothing written (not even the database file).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{Sandbox, output_within, stderr, text};

/// A command study of two quick trials, with every numeric key written out so that each
/// can be replaced; `timeout` keeps a huge `trials` from running long.
const COMMAND: &str = r#"[study]
name = "bounds"
metric = "loss"
trials = 2
timeout = "4s"
seed = 1
heartbeat = "2s"
heartbeat_grace = "60s"
max_consecutive_failures = 5

[space]
x = { type = "float", low = -1.0, high = 1.0 }
k = { type = "int", low = 1, high = 4, step = 1 }
c = { type = "categorical", choices = ["a", "b"] }

[sampler]
kind = "random"
n_startup = 2

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "trial.sh", "{x}"]
timeout = "1m"
grace = "10s"
"#;

const TRIAL: &str = "echo \"tune: {\\\"loss\\\": $1}\"\n";

/// A builtin study: parsed in full before tune looks for `tune-worker`, so its keys are
/// checked here without libtorch.
const BUILTIN: &str = r#"[study]
name = "bounds-builtin"
metric = "val_loss"
trials = 2

[space]
lr = { type = "float", low = 1e-4, high = 1e-1, log = true }

[workers]
devices = "cpu"

[trial]
kind = "builtin"
epochs = 2
batch_size = 32
accumulation = 1
reference_batch = 64
report_every = 0
time_budget = "1m"
timeout = "5m"

[trial.model]
kind = "transformer"
width = 32
depth = 2
heads = 2
context = 16

[trial.data]
dataset = "gpl3-text"
limit = 1000
max_device_mb = 64
prefetch = 2
"#;

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Class {
    Duration,
    Integer,
    /// A float; extremes are tried too, but the item is durations and integers.
    Number,
    /// Strings, lists, tables, booleans: not this test's business.
    Other,
}

use Class::{Duration as D, Integer as I, Number as N, Other as O};

/// Every key of every table, classified. `table` is where the key lives; a `@kind` suffix
/// names the `kind` the table needs for the key to exist (pruner keys differ by kind).
const KEYS: &[(&str, &str, Class)] = &[
    ("study", "name", O),
    ("study", "metric", O),
    ("study", "direction", O),
    ("study", "trials", I),
    ("study", "timeout", D),
    ("study", "seed", I),
    ("study", "storage", O),
    ("study", "heartbeat", D),
    ("study", "heartbeat_grace", D),
    ("study", "runs_dir", O),
    ("study", "max_consecutive_failures", I),
    ("sampler", "kind", O),
    ("sampler", "n_startup", I),
    ("sampler", "cost_aware", O),
    ("workers", "count", I),
    ("workers", "devices", O),
    ("workers", "slots_per_device", I),
    ("workers", "gpu_memory_fraction", N),
    ("workers", "gpus_per_trial", I),
    ("trial@command", "kind", O),
    ("trial@command", "command", O),
    ("trial@command", "timeout", D),
    ("trial@command", "grace", D),
    ("trial@command", "env", O),
    ("trial@command", "requires", O),
    ("trial@command", "check", O),
    ("trial@command", "launcher", O),
    ("trial@command", "python", O),
    ("pruner@median", "warmup_steps", N),
    ("pruner@median", "min_trials", I),
    ("pruner@median", "interval", N),
    ("pruner@median", "resource", O),
    ("pruner@asha", "min_resource", N),
    ("pruner@asha", "max_resource", N),
    ("pruner@asha", "reduction_factor", N),
    ("pruner@asha", "min_early_stopping_rate", I),
    ("pruner@asha", "resource", O),
    ("pruner@asha", "mode", O),
    ("pruner@hyperband", "min_resource", N),
    ("pruner@hyperband", "max_resource", N),
    ("pruner@hyperband", "reduction_factor", N),
    ("pruner@hyperband", "brackets", I),
    ("pruner@hyperband", "resource", O),
    ("pruner@hyperband", "mode", O),
    ("pruner@forecast", "min_resource", N),
    ("pruner@forecast", "max_resource", N),
    ("pruner@forecast", "min_trials", I),
    ("pruner@forecast", "confidence", N),
    ("pruner@forecast", "resource", O),
    ("space.k", "type", O),
    ("space.k", "low", I),
    ("space.k", "high", I),
    ("space.k", "step", I),
    ("space.k", "log", O),
    ("space.k", "when", O),
    ("space.x", "low", N),
    ("space.x", "high", N),
    ("space.x", "step", N),
    ("trial@builtin", "time_budget", D),
    ("trial@builtin", "timeout", D),
    ("trial@builtin", "report_every", I),
    ("trial@builtin", "model", O),
    ("trial@builtin", "data", O),
    ("trial@builtin", "lr", N),
    ("trial@builtin", "optimizer", O),
    ("trial@builtin", "momentum", N),
    ("trial@builtin", "nesterov", O),
    ("trial@builtin", "weight_decay", N),
    ("trial@builtin", "batch_size", I),
    ("trial@builtin", "accumulation", I),
    ("trial@builtin", "amp", O),
    ("trial@builtin", "schedule", O),
    ("trial@builtin", "warmup", N),
    ("trial@builtin", "lr_scaling", O),
    ("trial@builtin", "reference_batch", I),
    ("trial@builtin", "clip_grad", N),
    ("trial@builtin", "epochs", I),
    ("trial@builtin", "cuda_graphs", O),
    ("trial@builtin", "checkpoints", O),
    ("trial@builtin", "checkpoint_dir", O),
    ("trial@command", "checkpoint_dir", O),
    ("trial@builtin", "checkpoint_every", D),
    ("trial@builtin", "keep_checkpoints", O),
    ("trial@builtin", "keep_last", I),
    ("trial.model", "kind", O),
    ("trial.model", "width", I),
    ("trial.model", "depth", I),
    ("trial.model", "dropout", N),
    ("trial.model", "heads", I),
    ("trial.model", "context", I),
    ("trial.model", "checkpointing", O),
];

/// Durations no key accepts: zero, negative, not a number, and every way past the bound.
const BAD_DURATIONS: &[&str] = &[
    "0",
    "0s",
    "-1",
    "-5s",
    "nan",
    "inf",
    "1e30",
    "18446744073709551615",
    "9223372036854775807s",
    "999999999999y",
    "584942417355y",
    "11y",
];

/// Integers at every edge. Those TOML cannot hold (past i64) are refused by the parser.
const INTEGERS: &[&str] = &[
    "0",
    "-1",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "18446744073709551615",
    "1e30",
    "2147483648",
];

/// Floats at every edge (TOML spells NaN and infinity).
const NUMBERS: &[&str] = &["0.0", "-1.0", "1e30", "-1e308", "nan", "inf", "5e-324"];

/// The keys the binary itself knows in a table, read from its refusal of an unknown one
/// (serde's "expected one of `a`, `b`" or tune's "known: a, b" / "allowed: a, b").
fn keys_the_binary_knows(sb: &Sandbox, study: &str) -> BTreeSet<String> {
    sb.write("probe.toml", study);
    let out = sb.run(&["run", "probe.toml", "--no-tui"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(err.contains("zz_probe"), "{err}");
    let list = ["expected one of ", "known: ", "allowed: "]
        .iter()
        .find_map(|m| err.split_once(m).map(|(_, rest)| rest.to_string()))
        .unwrap_or_else(|| panic!("no list of keys in: {err}"));
    let list = list.lines().next().unwrap_or_default();
    let list = list.split(')').next().unwrap_or_default();
    list.split(',')
        .map(|k| {
            k.trim()
                .trim_matches(|c| c == '`' || c == '.' || c == ' ')
                .trim_start_matches("or ")
                .trim_matches('`')
                .to_string()
        })
        .filter(|k| !k.is_empty())
        .collect()
}

/// The base study text for a table of [`KEYS`], with that table in place.
fn base_for(table: &str) -> toml::Table {
    let (path, kind) = table.split_once('@').unwrap_or((table, ""));
    let builtin = kind == "builtin" || path.starts_with("trial.");
    let mut doc: toml::Table =
        toml::from_str(if builtin { BUILTIN } else { COMMAND }).expect("the bases parse");
    if path == "pruner" {
        let mut p = toml::Table::new();
        p.insert("kind".into(), kind.into());
        if kind == "hyperband" || kind == "forecast" {
            p.insert("max_resource".into(), 27.into());
        }
        doc.insert("pruner".into(), p.into());
    }
    doc
}

fn table_mut<'a>(doc: &'a mut toml::Table, table: &str) -> &'a mut toml::Table {
    let path = table.split('@').next().unwrap_or(table);
    let mut t = doc;
    for part in path.split('.') {
        t = t
            .get_mut(part)
            .and_then(toml::Value::as_table_mut)
            .unwrap_or_else(|| panic!("the base has `{path}`"));
    }
    t
}

/// A study with `table.key = raw` (raw TOML text, so that values past i64 reach the parser).
fn study_with(table: &str, key: &str, raw: &str) -> String {
    let mut doc = base_for(table);
    let marker = "__bounds_marker__";
    table_mut(&mut doc, table).insert(key.into(), marker.into());
    let text = toml::to_string(&doc).expect("the study prints");
    let quoted = format!("\"{marker}\"");
    assert!(text.contains(&quoted), "{text}");
    text.replacen(&quoted, raw, 1)
}

#[test]
fn every_numeric_key_of_the_study_file_has_cases_here() {
    let sb = Sandbox::new();
    let mut probes: Vec<(&str, String)> = Vec::new();
    for table in [
        "study",
        "sampler",
        "workers",
        "trial@command",
        "pruner@median",
        "pruner@asha",
        "pruner@hyperband",
        "pruner@forecast",
        "space.k",
        "trial@builtin",
        "trial.model",
    ] {
        probes.push((table, study_with(table, "zz_probe", "1")));
    }
    for (table, study) in probes {
        let known = keys_the_binary_knows(&sb, &study);
        let ours: BTreeSet<String> = KEYS
            .iter()
            .filter(|(t, _, _)| *t == table)
            .map(|(_, k, _)| k.to_string())
            .collect();
        // `kind` is the tag that chose the table's shape; serde does not list it.
        let known: BTreeSet<String> = known.into_iter().filter(|k| k != "kind").collect();
        let missing: Vec<&String> = known.difference(&ours).collect();
        assert!(
            missing.is_empty(),
            "keys of `[{table}]` with no class in tests/cli/bounds.rs KEYS: {missing:?} (known: {known:?})"
        );
    }
}

/// What one run of `tune run` on an extreme value must show: a clean end (0, 1 or 2), never a
/// panic, and for a refusal the file and the key named and no database file. `refused`: whether
/// it must be refused (`None`: either way).
fn check_clean(
    out: &Output,
    key: &str,
    db: &Path,
    what: &str,
    refused: Option<bool>,
) -> Result<(), String> {
    let err = stderr(out);
    let code = out.status.code();
    let fail = |why: &str| Err(format!("{what}: {why}\n{}", text(out)));
    if err.contains("panicked") || !matches!(code, Some(0..=2)) {
        return fail(&format!("ended with {:?}", out.status));
    }
    // A builtin study is checked with `tune trials`, which parses it whole and then finds no
    // database: a status 2 that says so is that, an acceptance.
    let builtin = study_is_builtin(what);
    let is_refusal = code == Some(2) && (!builtin || !err.contains("no database at"));
    if let Some(r) = refused
        && is_refusal != r
    {
        return fail(if r { "accepted" } else { "refused" });
    }
    if is_refusal {
        if !err.contains("s.toml:") {
            return fail("the refusal does not name the file");
        }
        if !err.contains(key) {
            return fail(&format!("the refusal does not name `{key}`"));
        }
        if db.exists() {
            return fail("refused, yet the database file was created");
        }
    }
    Ok(())
}

/// Whether a case (named `table.key = value`) is on the builtin study.
fn study_is_builtin(what: &str) -> bool {
    what.starts_with("trial@builtin") || what.starts_with("trial.model")
}

/// Runs every case (what, key, study text, must it be refused) on its own sandbox, a few at a
/// time, and reports every failure at once.
fn run_cases(cases: Vec<(String, String, String, Option<bool>)>) {
    let n = 4;
    let mut chunks: Vec<Vec<_>> = (0..n).map(|_| Vec::new()).collect();
    for (i, c) in cases.into_iter().enumerate() {
        chunks[i % n].push(c);
    }
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                s.spawn(move || {
                    let mut failed = Vec::new();
                    for (what, key, study, refused) in chunk {
                        let sb = Sandbox::new();
                        sb.write("trial.sh", TRIAL);
                        sb.write("s.toml", &study);
                        // A builtin study would need `tune-worker` (and libtorch) to run:
                        // `tune trials` parses it whole and stops at the missing database.
                        let mut c = if study_is_builtin(&what) {
                            sb.tune(&["trials", "s.toml"])
                        } else {
                            sb.tune(&["run", "s.toml", "--no-tui"])
                        };
                        c.env("TUNE_TEST_CUDA_DEVICES", "0");
                        let out = output_within(c, Duration::from_secs(30));
                        if let Err(e) = check_clean(&out, &key, &sb.join("tune.db"), &what, refused)
                        {
                            failed.push(e);
                        }
                    }
                    failed
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a case thread"))
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn durations_past_their_bounds_are_refused_by_key_before_anything_is_written() {
    let mut cases = Vec::new();
    for (table, key, class) in KEYS {
        if *class != D {
            continue;
        }
        let shown = format!("{}.{key}", table.split(['@', '.']).next().unwrap_or(table));
        for v in BAD_DURATIONS {
            cases.push((
                format!("{table}.{key} = {v:?}"),
                shown.clone(),
                study_with(table, key, &format!("{v:?}")),
                Some(true),
            ));
        }
    }
    run_cases(cases);
}

#[test]
fn the_longest_durations_accepted_run_a_study_to_its_end() {
    // At the bound, every clock must still hold them: adding to an Instant, subtracting from
    // a date (recovery), the worker's wait. `heartbeat` itself stays short, or the study
    // would not see its trials' ends for years.
    let mut cases = Vec::new();
    for (key, v) in [
        ("timeout", "10y"),
        ("heartbeat_grace", "10y"),
        ("heartbeat_grace", "3652d"),
    ] {
        cases.push((
            format!("study.{key} = {v:?}"),
            format!("study.{key}"),
            study_with("study", key, &format!("{v:?}")).replace("trials = 2", "trials = 1"),
            Some(false),
        ));
    }
    for key in ["timeout", "grace"] {
        cases.push((
            format!("trial.{key} = \"10y\""),
            format!("trial.{key}"),
            study_with("trial@command", key, "\"10y\""),
            Some(false),
        ));
    }
    run_cases(cases);
}

#[test]
fn extreme_integers_at_every_integer_key_end_cleanly() {
    let mut cases = Vec::new();
    for (table, key, class) in KEYS {
        let values: &[&str] = match class {
            I => INTEGERS,
            N => NUMBERS,
            _ => continue,
        };
        for v in values {
            // Past i64, or a float where an integer belongs: refused whatever the key.
            let refused = match (class, *v) {
                (I, "9223372036854775808" | "18446744073709551615" | "1e30") => Some(true),
                _ => None,
            };
            cases.push((
                format!("{table}.{key} = {v}"),
                key.to_string(),
                study_with(table, key, v),
                refused,
            ));
        }
    }
    run_cases(cases);
}

/// A stored study to point flags at.
fn stored_study() -> Sandbox {
    let sb = Sandbox::new();
    sb.write("trial.sh", TRIAL);
    sb.write("s.toml", &COMMAND.replace("trials = 2", "trials = 1"));
    sb.ok(&["run", "s.toml", "--no-tui"]);
    sb
}

/// Every flag or positional of every command that takes a value, as `command --flag`.
fn value_arguments() -> BTreeSet<String> {
    use clap::CommandFactory;
    let cli = tune::cli::Cli::command();
    let mut out = BTreeSet::new();
    for sub in cli.get_subcommands() {
        for a in sub.get_arguments() {
            let takes = a.get_action().takes_values();
            if takes && a.get_id() != "db" {
                out.insert(format!("{} {}", sub.get_name(), a.get_id()));
            }
        }
    }
    out
}

/// Every argument that takes a value, classified: durations and integers get cases below.
const ARGUMENTS: &[(&str, Class)] = &[
    ("worker wait", D),
    ("worker count", I),
    ("worker study", O),
    ("worker devices", O),
    ("worker runs_dir", O),
    ("worker dir", O),
    ("trials limit", I),
    ("trials state", O),
    ("trials sort", O),
    ("trials format", O),
    ("trials study_file", O),
    ("trials name", O),
    ("show args", I),
    ("show name", O),
    ("show format", O),
    ("discard args", I),
    ("discard name", O),
    ("discard state", O),
    ("ask-tell seed", I),
    ("ask-tell space", O),
    ("ask-tell sampler", O),
    ("ask-tell direction", O),
    ("ask-tell study", O),
    ("ask-tell pruner", O),
    ("ask-tell max_resource", N),
    ("run study", O),
    ("studies format", O),
    ("best format", O),
    ("best study_file", O),
    ("best name", O),
    ("watch study_file", O),
    ("watch name", O),
    ("enqueue study", O),
    ("enqueue params", O),
    ("delete study_file", O),
    ("delete name", O),
    ("copy from", O),
    ("copy to", O),
    ("copy study", O),
    ("bench args", O),
    ("importance study_file", O),
    ("importance name", O),
    ("importance method", O),
    ("importance format", O),
    ("importance objective", I),
    ("plot kind", O),
    ("plot study_file", O),
    ("plot name", O),
    ("plot output", O),
    ("plot params", O),
    // A number or a metric's name; bad ones (past the count, too large, neither): multi_objective.rs.
    ("plot objective", O),
    ("plot width", I),
    ("plot height", I),
    ("report study_file", O),
    ("report name", O),
    ("report output", O),
    ("report objective", O),
];

#[test]
fn every_flag_that_takes_a_value_has_a_class_here() {
    let ours: BTreeSet<String> = ARGUMENTS.iter().map(|(a, _)| a.to_string()).collect();
    let theirs = value_arguments();
    let missing: Vec<&String> = theirs.difference(&ours).collect();
    assert!(
        missing.is_empty(),
        "arguments with no class in tests/cli/bounds.rs ARGUMENTS: {missing:?}"
    );
}

/// Runs `tune ARGS` within `limit` and checks it ended cleanly: 0, 1 or 2, no panic.
fn clean(sb: &Sandbox, args: &[&str], limit: Duration) -> Output {
    let out = output_within(sb.tune(args), limit);
    let what = format!("tune {}", args.join(" "));
    assert!(!stderr(&out).contains("panicked"), "{what}: {}", text(&out));
    assert!(
        matches!(out.status.code(), Some(0..=2)),
        "{what}: {:?}\n{}",
        out.status,
        text(&out)
    );
    out
}

#[test]
fn extreme_durations_and_integers_on_every_flag_end_cleanly() {
    let sb = stored_study();
    let limit = Duration::from_secs(20);
    // --wait: refused past its bound before the database is opened (or created).
    for v in BAD_DURATIONS {
        let out = clean(
            &sb,
            &[
                "worker",
                "--study",
                "nope",
                "--db",
                "other.db",
                &format!("--wait={v}"),
                "--no-tui",
            ],
            limit,
        );
        assert_eq!(out.status.code(), Some(2), "--wait {v}: {}", text(&out));
        assert!(stderr(&out).contains("--wait"), "{}", text(&out));
        assert!(
            !sb.join("other.db").exists(),
            "--wait {v} created a database"
        );
    }
    // The longest wait accepted: a study that exists is found at once.
    for count in [
        "0",
        "-1",
        "1025",
        "18446744073709551615",
        "18446744073709551616",
    ] {
        let out = clean(
            &sb,
            &[
                "worker",
                "--study",
                "bounds",
                "--db",
                "tune.db",
                &format!("--count={count}"),
                "--wait",
                "10y",
                "--no-tui",
            ],
            limit,
        );
        assert_eq!(
            out.status.code(),
            Some(2),
            "--count {count}: {}",
            text(&out)
        );
        assert!(stderr(&out).contains("count"), "{}", text(&out));
    }
    for v in [
        "0",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
        "1e30",
    ] {
        clean(&sb, &["trials", "s.toml", &format!("--limit={v}")], limit);
        clean(&sb, &["show", "s.toml", "--", v], limit);
        clean(
            &sb,
            &["ask-tell", "--space", "s.toml", &format!("--seed={v}")],
            limit,
        );
    }
    for v in [
        "0-99999999999",
        "0-18446744073709551615",
        "18446744073709551615",
        "9223372036854775808",
        "18446744073709551616",
        "5-18446744073709551615",
    ] {
        // A materialised range would run out of memory or past `limit`.
        let out = clean(&sb, &["discard", "s.toml", "--", v], limit);
        assert_eq!(out.status.code(), Some(2), "discard {v}: {}", text(&out));
    }
    // A range reaching past the last trial names the first missing one, and changes nothing.
    let out = clean(&sb, &["discard", "s.toml", "0-99999999999"], limit);
    assert!(stderr(&out).contains("no trial 1 "), "{}", text(&out));
    let out = sb.ok(&["trials", "s.toml", "--format", "json"]);
    let trials: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        trials
            .as_array()
            .expect("a list")
            .iter()
            .all(|t| t["discarded"] != Value::Bool(true)),
        "{trials}"
    );
}

/// A trial script that prints each of `lines` as a report, then a good final one.
fn reporting_script(lines: &[&str]) -> String {
    let mut s = String::new();
    for l in lines {
        s.push_str(&format!("echo 'tune: {l}'\n"));
    }
    s.push_str("echo 'tune: {\"loss\": 0.25, \"final\": true}'\n");
    s
}

#[test]
fn report_steps_beyond_i64_negative_or_fractional_are_malformed_never_wrapped() {
    let sb = Sandbox::new();
    let bad = [
        r#"{"step": 9223372036854775808, "loss": 1}"#,
        r#"{"step": 18446744073709551615, "loss": 1}"#,
        r#"{"step": 100000000000000000000, "loss": 1}"#,
        r#"{"step": -1, "loss": 1}"#,
        r#"{"step": -9223372036854775808, "loss": 1}"#,
        r#"{"step": 1.5, "loss": 1}"#,
        r#"{"step": 1e30, "loss": 1}"#,
        r#"{"step": "3", "loss": 1}"#,
    ];
    let mut lines: Vec<&str> = bad.to_vec();
    // The largest step is stored as is; a report after it without a step has none to take.
    lines.push(r#"{"step": 9223372036854775807, "loss": 0.5}"#);
    lines.push(r#"{"loss": 0.4}"#);
    sb.write("trial.sh", &reporting_script(&lines));
    sb.write("s.toml", &COMMAND.replace("trials = 2", "trials = 1"));
    sb.ok(&["run", "s.toml", "--no-tui"]);
    let out = sb.ok(&["show", "0", "s.toml", "--format", "json"]);
    let shown: Value = serde_json::from_slice(&out.stdout).expect("json");
    let steps: Vec<i128> = shown["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .map(|r| r["step"].as_i64().map(i128::from).expect("an i64 step"))
        .collect();
    assert!(steps.iter().all(|s| *s >= 0), "{shown}");
    assert_eq!(steps.first(), Some(&(i64::MAX as i128)), "{shown}");
    assert_eq!(shown["state"], "complete", "{shown}");
    let stdout_log = shown["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .filter_map(Value::as_str)
        .find(|p| p.ends_with("stdout.log"))
        .expect("a stdout.log");
    let log = std::fs::read_to_string(stdout_log).expect("the log");
    let malformed = log.matches("tune: ignored a malformed report").count();
    assert_eq!(malformed, bad.len() + 1, "{log}");
    assert!(
        log.contains("`step` must be an integer from 0 to 9223372036854775807"),
        "{log}"
    );
    assert!(log.contains("would pass the largest"), "{log}");
}

#[test]
fn ask_tell_refuses_trial_numbers_past_i64_and_goes_on() {
    let sb = Sandbox::new();
    sb.write(
        "space.toml",
        "[space]\nx = { type = \"float\", low = 0.0, high = 1.0 }\n",
    );
    let mut child = sb
        .tune(&["ask-tell", "--space", "space.toml"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ask-tell starts");
    let requests = [
        r#"{"ask": {}}"#,
        r#"{"tell": {"trial": 18446744073709551615, "value": 1.0}}"#,
        r#"{"tell": {"trial": 9223372036854775808, "value": 1.0}}"#,
        r#"{"tell": {"trial": 100000000000000000000, "value": 1.0}}"#,
        r#"{"tell": {"trial": -1, "value": 1.0}}"#,
        r#"{"tell": {"trial": 0.5, "value": 1.0}}"#,
        r#"{"tell": {"trial": 0, "value": 1e400}}"#,
        r#"{"tell": {"trial": 0, "value": 0.5}}"#,
    ];
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for r in requests {
            writeln!(stdin, "{r}").expect("write a request");
        }
    }
    let out = crate::common::wait_output(child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON answer"))
        .collect();
    assert_eq!(answers.len(), requests.len(), "{}", text(&out));
    for a in &answers[1..requests.len() - 1] {
        assert!(a["error"].is_string(), "{a}");
    }
    assert_eq!(answers[requests.len() - 1], serde_json::json!({"ok": true}));
}

// Work that grows with the input: each bounded or linear (issue 29, item 15).

/// A space with `n` string choices, and a conditional parameter whose `when` lists `n / 2`.
fn big_space(n: usize) -> String {
    let choices: Vec<String> = (0..n).map(|i| format!("\"c{i}\"")).collect();
    let half: Vec<String> = (0..n / 2).map(|i| format!("\"c{}\"", i * 2)).collect();
    format!(
        "[space]\nc = {{ type = \"categorical\", choices = [{}] }}\nd = {{ type = \"float\", low = 0.0, high = 1.0, when = {{ c = [{}] }} }}\n",
        choices.join(", "),
        half.join(", ")
    )
}

#[test]
fn a_categorical_of_200_000_choices_is_checked_in_linear_time() {
    // Duplicates were found by comparing each choice with every earlier one, and `when`
    // values with every choice: 2e10 comparisons here, minutes. Now a set: well under a second
    // of checking (the rest is the debug binary reading 3 MB of TOML).
    let sb = Sandbox::new();
    sb.write("space.toml", &big_space(200_000));
    let mut child = sb
        .tune(&["ask-tell", "--space", "space.toml", "--sampler", "random"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ask-tell starts");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        writeln!(stdin, r#"{{"ask": {{}}}}"#).expect("ask");
    }
    // Quadratic checking would not answer within this wait; the figures are in `tune bench
    // scaling`, never in a test.
    let out = crate::common::wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("one JSON answer");
    let c = answer["params"]["c"].as_str().expect("a choice");
    assert!(c.starts_with('c'), "{answer}");
    // A duplicate among them is still found, and named.
    let dup = big_space(200_000).replacen("\"c199999\"", "\"c7\"", 1);
    sb.write("dup.toml", &dup);
    let out = sb.run(&["ask-tell", "--space", "dup.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("choice c7 is listed twice"),
        "{}",
        text(&out)
    );
}

/// The bytes `tune` keeps of a failed trial's standard error (the whole of it stays in the log).
const LOG_TAIL_BYTES: usize = 16 * 1024;

#[test]
fn a_failed_trials_stored_log_tail_is_bounded_cut_on_a_character_and_says_so() {
    // One 4 MB line of two-byte characters (after one byte, so that a cut at a fixed byte
    // count would split one), many 300 kB lines, and lines that fit: each is stored bounded.
    for (name, script, whole) in [
        (
            "one-long-line",
            "head -c 2000000 /dev/zero | tr '\\0' 'x' | sed 's/x/é/g' | { printf 'a'; cat; echo; } >&2\nexit 1\n",
            false,
        ),
        (
            "many-long-lines",
            "i=0; while [ $i -lt 30 ]; do head -c 150000 /dev/zero | tr '\\0' 'x' | sed 's/x/é/g' | tr -d '\\n' >&2; echo 'λ end' >&2; i=$((i+1)); done\nexit 1\n",
            false,
        ),
        (
            "short-lines",
            "echo 'Traceback' >&2\necho 'ValueError: bad lr' >&2\nexit 1\n",
            true,
        ),
    ] {
        let sb = Sandbox::new();
        sb.write("trial.sh", script);
        sb.write(
            "s.toml",
            &COMMAND
                .replace("trials = 2", "trials = 1")
                .replace("[\"sh\", \"trial.sh\", \"{x}\"]", "[\"sh\", \"trial.sh\"]"),
        );
        let out = sb.run(&["run", "s.toml", "--no-tui"]);
        assert!(!stderr(&out).contains("panicked"), "{}", text(&out));
        let out = sb.ok(&["show", "0", "s.toml", "--format", "json"]);
        let shown: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(shown["state"], "failed", "{name}: {shown}");
        let tail = shown["log_tail"].as_str().expect("a log tail");
        let marker = "[tune: cut the first ";
        assert!(
            tail.len() <= LOG_TAIL_BYTES + 200,
            "{name}: {} bytes stored",
            tail.len()
        );
        if whole {
            assert_eq!(tail, "Traceback\nValueError: bad lr", "{name}");
        } else {
            assert!(tail.starts_with(marker), "{name}: {}", &tail[..80]);
            assert!(!tail.contains('\u{FFFD}'), "{name}: a character was split");
        }
        let db = std::fs::metadata(sb.join("tune.db"))
            .expect("the database")
            .len();
        assert!(db < 2_000_000, "{name}: the database is {db} bytes");
        // The log itself has every byte.
        let stderr_log = shown["logs"]
            .as_array()
            .expect("logs")
            .iter()
            .filter_map(Value::as_str)
            .find(|p| p.ends_with("stderr.log"))
            .expect("a stderr.log");
        let logged = std::fs::metadata(stderr_log).expect("the log").len();
        assert!(whole || logged > 4_000_000, "{name}: {logged} bytes logged");
    }
}
