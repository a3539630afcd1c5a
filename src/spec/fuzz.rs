//! A bounded fuzzer over the study-file parser: arbitrary TOML study files, with values of every
//! kind (extreme integers and floats, durations past any clock, strings, lists, tables) at every
//! key the parser knows and at some it does not. `parse` must answer `Ok` or a clean error
//! naming the file, and never panic. Its case count is fixed so that it runs in seconds with
//! the rest of `cargo test` (and so in CI); `PROPTEST_CASES` raises it for a longer hunt.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::{Overrides, SpecErrorKind, parse};
use crate::limits::MAX_DURATION;
use crate::study::TrialSpec;

/// A valid study file of each trial kind: the fuzzer mutates these, so that most cases get past
/// the first refusal and reach the checks deep inside.
const COMMAND: &str = r#"
[study]
name = "fuzz"
metric = "loss"
trials = 3
timeout = "1h"
seed = 1
heartbeat = "2s"
heartbeat_grace = "60s"
max_consecutive_failures = 5

[space]
x = { type = "float", low = -1.0, high = 1.0, step = 0.5 }
k = { type = "int", low = 1, high = 8, step = 1, log = true }
c = { type = "categorical", choices = ["a", "b"] }
d = { type = "float", low = 0.1, high = 0.2, when = { c = "a" } }

[sampler]
kind = "tpe"
n_startup = 4

[pruner]
kind = "hyperband"
min_resource = 1
max_resource = 27
reduction_factor = 3
brackets = 2

[workers]
count = 2
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "t.sh", "{x}", "{k}", "{c}"]
timeout = "5m"
grace = "10s"

[[enqueue]]
x = 0.5
k = 2
c = "b"
"#;

pub(super) const BUILTIN: &str = r#"
[study]
name = "fuzz-builtin"
metric = "val_loss"
trials = 2

[space]
lr = { type = "float", low = 1e-4, high = 1e-1, log = true }
batch_size = { type = "categorical", choices = [32, 64] }

[pruner]
kind = "asha"
min_resource = 1
reduction_factor = 3
min_early_stopping_rate = 0

[workers]
devices = "cpu"
slots_per_device = 2
gpu_memory_fraction = 0.5

[trial]
kind = "builtin"
epochs = 3
accumulation = 2
reference_batch = 64
report_every = 10
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
"#;

/// What a key holds, so that most values drawn for it are of its kind (and at its bounds).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Duration,
    Integer,
    Number,
    Other,
}

use Kind::{Duration as D, Integer as I, Number as N, Other as O};

/// Every table the parser reads, with the keys it knows there (and a stranger).
const KEYS: &[(&str, &[(&str, Kind)])] = &[
    (
        "study",
        &[
            ("name", O),
            ("metric", O),
            ("direction", O),
            ("trials", I),
            ("timeout", D),
            ("seed", I),
            ("storage", O),
            ("heartbeat", D),
            ("heartbeat_grace", D),
            ("runs_dir", O),
            ("max_consecutive_failures", I),
            ("zz", O),
        ],
    ),
    (
        "sampler",
        &[("kind", O), ("n_startup", I), ("cost_aware", O), ("zz", O)],
    ),
    (
        "pruner",
        &[
            ("kind", O),
            ("resource", O),
            ("warmup_steps", N),
            ("min_trials", I),
            ("interval", N),
            ("min_resource", N),
            ("max_resource", N),
            ("reduction_factor", N),
            ("min_early_stopping_rate", I),
            ("brackets", I),
            ("mode", O),
            ("population", I),
            ("quantile", N),
            ("resample_probability", N),
            ("perturb", O),
            ("mutate", O),
            ("zz", O),
        ],
    ),
    (
        "workers",
        &[
            ("count", I),
            ("devices", O),
            ("slots_per_device", I),
            ("gpu_memory_fraction", N),
            ("gpus_per_trial", I),
            ("zz", O),
        ],
    ),
    (
        "trial",
        &[
            ("kind", O),
            ("command", O),
            ("timeout", D),
            ("grace", D),
            ("env", O),
            ("requires", O),
            ("check", O),
            ("launcher", O),
            ("python", O),
            ("time_budget", D),
            ("report_every", I),
            ("epochs", I),
            ("batch_size", I),
            ("accumulation", I),
            ("reference_batch", I),
            ("lr", N),
            ("warmup", N),
            ("clip_grad", N),
            ("zz", O),
        ],
    ),
    (
        "trial.model",
        &[
            ("kind", O),
            ("width", I),
            ("depth", I),
            ("heads", I),
            ("context", I),
            ("dropout", N),
            ("zz", O),
        ],
    ),
    (
        "trial.data",
        &[
            ("dataset", O),
            ("validation", N),
            ("limit", I),
            ("max_device_mb", I),
            ("prefetch", I),
            ("zz", O),
        ],
    ),
    (
        "space.x",
        &[
            ("type", O),
            ("low", N),
            ("high", N),
            ("step", N),
            ("log", O),
        ],
    ),
    (
        "space.k",
        &[
            ("type", O),
            ("low", I),
            ("high", I),
            ("step", I),
            ("log", O),
        ],
    ),
    (
        "space.c",
        &[("type", O), ("choices", O), ("when", O), ("zz", O)],
    ),
    (
        "space.d",
        &[("type", O), ("low", N), ("high", N), ("when", O)],
    ),
    ("space", &[("x", O), ("k", O), ("new", O)]),
    ("enqueue.0", &[("x", N), ("k", I), ("c", O), ("zz", O)]),
    (
        "",
        &[
            ("study", O),
            ("space", O),
            ("sampler", O),
            ("pruner", O),
            ("workers", O),
            ("trial", O),
            ("enqueue", O),
            ("zz", O),
        ],
    ),
];

/// Strings that mean something somewhere: durations at and past every bound, kinds, devices.
const WORDS: &[&str] = &[
    "",
    "0",
    "-1",
    "1e30",
    "nan",
    "inf",
    "18446744073709551615",
    "9223372036854775808",
    "999999999999y",
    "10y",
    "11y",
    "1ns",
    "2s",
    "1h 30m",
    "0.5",
    "auto",
    "cpu",
    "cuda:0",
    "cuda:99999999999",
    "command",
    "builtin",
    "median",
    "asha",
    "hyperband",
    "pbt",
    "promote",
    "none",
    "float",
    "int",
    "categorical",
    "minimize",
    "maximize",
    "step",
    "epoch",
    "{x}",
    "{",
    "a\u{0}b",
    "λ",
    "digits",
    "gpl3-text",
    "mlp",
    "transformer",
];

const INTEGERS: &[i64] = &[
    0,
    1,
    -1,
    2,
    3,
    i64::MAX,
    i64::MIN,
    i64::MAX - 1,
    1 << 53,
    (1 << 53) + 1,
    u32::MAX as i64,
    1_000_000_000,
];

const NUMBERS: &[f64] = &[
    0.0,
    -0.0,
    0.5,
    1.0,
    1.5,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    1e30,
    -1e30,
    1e-300,
    f64::MAX,
    f64::MIN_POSITIVE,
];

/// Durations at and past every bound, as the file would spell them.
const DURATIONS: &[&str] = &[
    "0",
    "-1",
    "-5s",
    "1e30",
    "1e10",
    "nan",
    "inf",
    "18446744073709551615",
    "9223372036854775807",
    "9223372036854775808",
    "999999999999y",
    "584942417355y",
    "10y",
    "11y",
    "3650d",
    "1ns",
    "0.000000001",
    "2s",
    "1h 30m",
];

fn integer() -> BoxedStrategy<toml::Value> {
    prop_oneof![
        prop::sample::select(INTEGERS).prop_map(toml::Value::Integer),
        any::<i64>().prop_map(toml::Value::Integer),
    ]
    .boxed()
}

fn number() -> BoxedStrategy<toml::Value> {
    prop_oneof![
        prop::sample::select(NUMBERS).prop_map(toml::Value::Float),
        any::<f64>().prop_map(toml::Value::Float),
    ]
    .boxed()
}

fn scalar() -> impl Strategy<Value = toml::Value> {
    prop_oneof![
        integer(),
        number(),
        prop::sample::select(WORDS).prop_map(|s| toml::Value::String(s.to_string())),
        prop::sample::select(DURATIONS).prop_map(|s| toml::Value::String(s.to_string())),
        ".{0,12}".prop_map(toml::Value::String),
        any::<bool>().prop_map(toml::Value::Boolean),
    ]
}

/// A value for a key of `kind`: mostly of that kind, sometimes anything at all.
fn value_for(kind: Kind) -> BoxedStrategy<toml::Value> {
    let typed = match kind {
        Kind::Duration => prop::sample::select(DURATIONS)
            .prop_map(|s| toml::Value::String(s.to_string()))
            .boxed(),
        Kind::Integer => integer(),
        Kind::Number => prop_oneof![number(), integer()].boxed(),
        Kind::Other => value().boxed(),
    };
    prop_oneof![3 => typed, 1 => value()].boxed()
}

fn value() -> impl Strategy<Value = toml::Value> {
    scalar().prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(toml::Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["type", "low", "high", "choices", "when", "c", "kind"]),
                inner,
                0..4,
            )
            .prop_map(|m| toml::Value::Table(
                m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

/// One change to a study: a key set to a value, or removed.
#[derive(Debug, Clone)]
enum Edit {
    Set(&'static str, &'static str, toml::Value),
    Remove(&'static str, &'static str),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop::sample::select(KEYS)
        .prop_flat_map(|(table, keys)| prop::sample::select(keys).prop_map(move |k| (table, k)))
        .prop_flat_map(|(table, (key, kind))| {
            prop_oneof![
                4 => value_for(kind).prop_map(move |v| Edit::Set(table, key, v)),
                1 => Just(Edit::Remove(table, key)),
            ]
        })
}

fn table_at<'a>(doc: &'a mut toml::Table, path: &str) -> Option<&'a mut toml::Table> {
    let mut t = doc;
    // `enqueue.0`: the first table of the array of tables `enqueue` (the index is skipped).
    for part in path
        .split('.')
        .filter(|p| !p.is_empty() && p.parse::<usize>().is_err())
    {
        t = match t.get_mut(part)? {
            toml::Value::Table(t) => t,
            toml::Value::Array(a) => a.first_mut()?.as_table_mut()?,
            _ => return None,
        };
    }
    Some(t)
}

fn apply(base: &str, edits: &[Edit]) -> String {
    let mut doc: toml::Table = toml::from_str(base).expect("the base studies parse");
    for e in edits {
        match e {
            Edit::Set(table, key, v) => {
                if let Some(t) = table_at(&mut doc, table) {
                    t.insert(key.to_string(), v.clone());
                }
            }
            Edit::Remove(table, key) => {
                if let Some(t) = table_at(&mut doc, table) {
                    t.remove(*key);
                }
            }
        }
    }
    // Floats TOML cannot spell (NaN is `nan`, fine) all print; a failure here is the
    // serialiser's, not the parser's, so such a case checks the base instead.
    toml::to_string(&doc).unwrap_or_else(|_| base.to_string())
}

fn check(src: &str) {
    let file = Path::new("/nonexistent-fuzz-dir/study.toml");
    // A panic here fails the case; an error must name the file.
    match parse(file, src, &Overrides::default()) {
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.starts_with("/nonexistent-fuzz-dir/study.toml: "),
                "{text}"
            );
            // Every mistake but text that is not TOML is about a key, which its message names
            // (whole, or by its last part where toml wrote the message).
            match &e.key {
                None => assert_eq!(e.kind, SpecErrorKind::Syntax, "{text}"),
                Some(key) => {
                    let last = key.rsplit('.').next().unwrap_or(key);
                    let last = last.split('[').next().unwrap_or(last);
                    assert!(e.message.contains(last), "`{key}` is not in {text}");
                }
            }
        }
        // What was accepted must be safe to use: every duration adds to a clock.
        Ok(study) => {
            let mut durations = vec![
                Some(study.heartbeat),
                Some(study.heartbeat_grace),
                study.timeout,
            ];
            match &study.trial {
                TrialSpec::Command(c) => durations.extend([c.timeout, Some(c.grace)]),
                TrialSpec::Builtin(b) => durations.extend([b.timeout, b.time_budget]),
            }
            for d in durations.into_iter().flatten() {
                assert!(d <= MAX_DURATION, "{d:?} accepted in\n{src}");
                assert!(
                    std::time::Instant::now().checked_add(d).is_some()
                        && chrono::TimeDelta::from_std(d)
                            .ok()
                            .and_then(|d| chrono::Utc::now().checked_sub_signed(d))
                            .is_some(),
                    "{d:?} overflows a clock"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(Config {
        // Bounded so that it runs in seconds in every `cargo test`; `PROPTEST_CASES=100000`
        // for a longer hunt.
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(384),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn no_command_study_file_makes_the_parser_panic(
        edits in prop::collection::vec(edit(), 1..6)
    ) {
        check(&apply(COMMAND, &edits));
    }

    #[test]
    fn no_builtin_study_file_makes_the_parser_panic(
        edits in prop::collection::vec(edit(), 1..6)
    ) {
        check(&apply(BUILTIN, &edits));
    }

    #[test]
    fn no_text_at_all_makes_the_parser_panic(src in "(\\[?[a-z_.]{0,8}\\]?\n?[a-z_]{0,8} ?=? ?[-+0-9a-z\"{}\\[\\],.]{0,12}\n){0,6}") {
        check(&src);
    }
}

#[test]
fn the_base_studies_of_the_fuzzer_are_valid() {
    for base in [COMMAND, BUILTIN] {
        parse(
            Path::new("/nonexistent-fuzz-dir/study.toml"),
            base,
            &Overrides::default(),
        )
        .expect("a valid base");
    }
}
