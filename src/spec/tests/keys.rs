//! What key and kind each mistake of a study file carries: several mistakes per section (a
//! wrong type, a value out of range, an unknown key, two keys that conflict), each checked to
//! carry the key its message quotes.

use std::path::Path;

use super::{GOOD, check};
use crate::spec::{Overrides, SpecErrorKind, load};

/// A builtin study that checks, for the `[trial]` cases of a builtin trial.
const BUILTIN: &str = r#"
[study]
name = "builtin"
metric = "val_loss"
trials = 2

[space]
lr = { type = "float", low = 1e-4, high = 1e-1, log = true }

[trial]
kind = "builtin"
epochs = 3
timeout = "5m"

[trial.model]
kind = "mlp"

[trial.data]
dataset = "digits"
"#;

/// Whether `message` quotes `key`: whole (`` `workers.count` ``, or as a word of its own where
/// the builtin trial or the pruner wrote it: "trial.model.kind: …"), or, where toml or the
/// space wrote the message, by its last part (toml shows the offending line, `colour = "red"`,
/// and says "unknown field `colour`"; the space says "parameter `lr`").
fn quotes(message: &str, key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    message.contains(&format!("`{key}`"))
        || message.split([' ', ':']).any(|w| w == key)
        || message.contains(&format!("`{last}`"))
        || message.contains(&format!("{last} = "))
}

/// Each case: the text of `base` to replace, its replacement, and the key and kind the error
/// must carry.
fn assert_key_and_kind(base: &str, cases: &[(&str, &str, &str, SpecErrorKind)]) {
    for &(from, to, key, kind) in cases {
        assert!(base.contains(from), "{from}");
        let e = check(&base.replacen(from, to, 1)).expect_err(to);
        assert_eq!(e.file, Path::new("studies/x.toml"), "{to}");
        assert_eq!(e.key.as_deref(), Some(key), "for {to:?}: {e}");
        assert_eq!(e.kind, kind, "for {to:?}: {e}");
        assert!(
            quotes(&e.message, key),
            "for {to:?}: `{e}` does not quote `{key}`"
        );
        // Display is the file and the message, as it always was.
        assert_eq!(e.to_string(), format!("studies/x.toml: {}", e.message));
    }
}

#[test]
fn study_section_mistakes_carry_their_key_and_kind() {
    use SpecErrorKind::*;
    assert_key_and_kind(
        GOOD,
        &[
            ("trials = 4", "trials = -1", "study.trials", Value),
            ("trials = 4", "trials = \"four\"", "study.trials", Type),
            (
                "trials = 4",
                "trials = 4\ncolour = \"red\"",
                "study.colour",
                UnknownKey,
            ),
            ("trials = 4", "", "study.trials", Missing),
            ("name = \"demo\"", "name = \"\"", "study.name", Value),
            ("name = \"demo\"\n", "", "study.name", Missing),
            ("trials = 4", "trials = 4\nseed = -3", "study.seed", Value),
            (
                "trials = 4",
                "trials = 4\ntimeout = \"soon\"",
                "study.timeout",
                Duration,
            ),
            (
                "trials = 4",
                "trials = 4\nheartbeat = \"1ms\"",
                "study.heartbeat",
                Value,
            ),
            (
                "trials = 4",
                "trials = 4\nheartbeat = \"10s\"\nheartbeat_grace = \"5s\"",
                "study.heartbeat_grace",
                Conflict,
            ),
            (
                "trials = 4",
                "trials = 4\nmax_consecutive_failures = -1",
                "study.max_consecutive_failures",
                Value,
            ),
            (
                "metric = \"val_loss\"",
                "metric = \"step\"",
                "study.metric",
                Value,
            ),
            (
                "metric = \"val_loss\"",
                "metric = [\"a\", \"b\"]",
                "study.direction",
                Missing,
            ),
            (
                "metric = \"val_loss\"",
                "metric = [\"a\", \"b\"]\ndirection = [\"minimize\"]",
                "study.direction",
                Conflict,
            ),
            (
                "trials = 4",
                "trials = 4\nstorage = \"no/such/dir/x.db\"",
                "study.storage",
                Value,
            ),
        ],
    );
}

#[test]
fn space_sampler_pruner_and_enqueue_mistakes_carry_their_key_and_kind() {
    use SpecErrorKind::*;
    let with = |table: &str| format!("{table}\n[workers]");
    assert_key_and_kind(
        GOOD,
        &[
            ("high = 1e-1", "high = 1e-5", "space.lr", Value),
            (
                "[workers]",
                &with("[sampler]\nkind = \"magic\""),
                "sampler.kind",
                Value,
            ),
            (
                "[workers]",
                &with("[sampler]\nn_startup = 0"),
                "sampler.n_startup",
                Value,
            ),
            (
                "[workers]",
                &with("[sampler]\nn_startup = \"x\""),
                "sampler.n_startup",
                Type,
            ),
            (
                "[workers]",
                &with("[sampler]\ncost_aware = \"yes\""),
                "sampler.cost_aware",
                Type,
            ),
            (
                "[workers]",
                &with("[sampler]\ncolour = 1"),
                "sampler.colour",
                UnknownKey,
            ),
            (
                "[workers]",
                &with("[pruner]\nwarmup_steps = 1"),
                "pruner.kind",
                Missing,
            ),
            (
                "[workers]",
                &with("[pruner]\nkind = \"median\"\nwarmup_steps = \"x\""),
                "pruner.warmup_steps",
                Type,
            ),
            (
                "[workers]",
                &with("[pruner]\nkind = \"median\"\nwarmup_steps = -1"),
                "pruner.warmup_steps",
                Value,
            ),
            (
                "[workers]",
                &with("[pruner]\nkind = \"asha\"\nreduction_factor = 1"),
                "pruner.reduction_factor",
                Value,
            ),
            (
                "[workers]",
                &with("[pruner]\nkind = \"median\"\ncolour = 1"),
                "pruner.colour",
                UnknownKey,
            ),
            ("lr = 0.01", "lr = 5.0", "enqueue[0]", Value),
            ("lr = 0.01", "lr = [0.01]", "enqueue[0].lr", Type),
            (
                "lr = 0.01",
                "lr = 0.01\nmomentum = 0.9",
                "enqueue[0]",
                Value,
            ),
        ],
    );
}

#[test]
fn workers_mistakes_carry_their_key_and_kind() {
    use SpecErrorKind::*;
    assert_key_and_kind(
        GOOD,
        &[
            ("count = 2", "count = 0", "workers.count", Value),
            ("count = 2", "count = \"two\"", "workers.count", Type),
            (
                "count = 2",
                "count = 2\ncolour = 1",
                "workers.colour",
                UnknownKey,
            ),
            (
                "count = 2",
                "count = 2\nslots_per_device = 2",
                "workers.slots_per_device",
                Conflict,
            ),
            (
                "count = 2",
                "slots_per_device = 65",
                "workers.slots_per_device",
                Value,
            ),
            (
                "devices = [\"cpu\"]",
                "devices = 3",
                "workers.devices",
                Type,
            ),
            (
                "devices = [\"cpu\"]",
                "devices = []",
                "workers.devices",
                Value,
            ),
            (
                "devices = [\"cpu\"]",
                "devices = [\"gpu\"]",
                "workers.devices",
                Value,
            ),
            (
                "devices = [\"cpu\"]",
                "devices = [1]",
                "workers.devices",
                Type,
            ),
            (
                "devices = [\"cpu\"]",
                "devices = [\"auto\"]",
                "workers.devices",
                Value,
            ),
            (
                "count = 2\ndevices = [\"cpu\"]",
                "count = 1\ndevices = [\"cpu\", \"cuda:0\"]",
                "workers.count",
                Conflict,
            ),
            (
                "count = 2",
                "count = 2\ngpu_memory_fraction = 1.5",
                "workers.gpu_memory_fraction",
                Value,
            ),
            (
                "count = 2\ndevices = [\"cpu\"]",
                "count = 3\ndevices = [\"cuda:0\"]\ngpu_memory_fraction = 0.5",
                "workers.gpu_memory_fraction",
                Conflict,
            ),
        ],
    );
}

#[test]
fn command_trial_mistakes_carry_their_key_and_kind() {
    use SpecErrorKind::*;
    assert_key_and_kind(
        GOOD,
        &[
            (
                "kind = \"command\"",
                "kind = \"docker\"",
                "trial.kind",
                Value,
            ),
            ("kind = \"command\"", "kind = 3", "trial.kind", Type),
            ("kind = \"command\"\n", "", "trial.kind", Missing),
            (
                "timeout = \"5m\"",
                "timeout = \"5m\"\nshell = true",
                "trial.shell",
                UnknownKey,
            ),
            ("timeout = \"5m\"", "timeout = 5", "trial.timeout", Type),
            (
                "timeout = \"5m\"",
                "timeout = \"soon\"",
                "trial.timeout",
                Duration,
            ),
            (
                "timeout = \"5m\"",
                "timeout = \"5m\"\ngrace = \"0s\"",
                "trial.grace",
                Duration,
            ),
            ("\"{trial_dir}\"]", "\"{nope}\"]", "trial.command", Value),
            ("\"{trial_dir}\"]", "\"{}\"]", "trial.command", Value),
            (
                "timeout = \"5m\"",
                "timeout = \"5m\"\ncheck = [\"{lr}\"]",
                "trial.check",
                Value,
            ),
            (
                "timeout = \"5m\"",
                "timeout = \"5m\"\nenv = { \"A=B\" = \"1\" }",
                "trial.env",
                Value,
            ),
            (
                "opt = {",
                "trial = { type = \"int\", low = 1, high = 2 }\nopt = {",
                "space.trial",
                Conflict,
            ),
        ],
    );
    let no_command = GOOD.replacen(
        "command = [\"python3\", \"train.py\", \"--lr\", \"{lr}\", \"--opt={opt}\", \"{trial_dir}\"]\n",
        "",
        1,
    );
    assert_ne!(no_command, GOOD);
    let e = check(&no_command).expect_err("no command");
    assert_eq!(
        (e.key.as_deref(), e.kind),
        (Some("trial.command"), Missing),
        "{e}"
    );
    assert!(quotes(&e.message, "trial.command"), "{e}");
}

#[test]
fn builtin_trial_mistakes_carry_their_key_and_kind() {
    use SpecErrorKind::*;
    check(BUILTIN).expect("the builtin base study checks");
    assert_key_and_kind(
        BUILTIN,
        &[
            (
                "kind = \"mlp\"",
                "kind = \"lstm\"",
                "trial.model.kind",
                Value,
            ),
            ("kind = \"mlp\"", "kind = 3", "trial.model.kind", Type),
            ("kind = \"mlp\"\n", "", "trial.model.kind", Missing),
            (
                "kind = \"mlp\"",
                "kind = \"mlp\"\ncolour = 1",
                "trial.model.colour",
                UnknownKey,
            ),
            (
                "epochs = 3",
                "epochs = 3\ncolour = 1",
                "trial.colour",
                UnknownKey,
            ),
            (
                "dataset = \"digits\"",
                "dataset = 3",
                "trial.data.dataset",
                Type,
            ),
            ("epochs = 3", "epochs = 3\nlr = 0.1", "trial.lr", Conflict),
            (
                "timeout = \"5m\"",
                "timeout = \"soon\"",
                "trial.timeout",
                Duration,
            ),
            (
                "timeout = \"5m\"",
                "timeout = \"5m\"\nreport_every = -1",
                "trial.report_every",
                Value,
            ),
        ],
    );
}

#[test]
fn an_unreadable_file_and_text_that_is_not_toml_name_no_key() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let missing = dir.path().join("missing.toml");
    let e = load(&missing, &Overrides::default()).expect_err("no such file");
    assert_eq!((e.key.as_deref(), e.kind), (None, SpecErrorKind::Io), "{e}");
    assert_eq!(e.file, missing);
    assert!(e.message.starts_with("cannot read the study file: "), "{e}");
    for src in ["[study", "[study]\nname = ", "\u{0}", "a = 1\na = 2"] {
        let e = check(src).expect_err(src);
        assert_eq!(
            (e.key.as_deref(), e.kind),
            (None, SpecErrorKind::Syntax),
            "{src:?}: {e}"
        );
    }
}

#[test]
fn a_missing_or_unknown_section_is_named_by_its_table() {
    let e = check(&GOOD.replacen("[workers]", "[colours]\nred = 1\n[workers]", 1))
        .expect_err("unknown section");
    assert_eq!(
        (e.key.as_deref(), e.kind),
        (Some("colours"), SpecErrorKind::UnknownKey),
        "{e}"
    );
    let start = GOOD.find("[trial]").expect("GOOD has a trial");
    let end = GOOD.find("[[enqueue]]").expect("GOOD has an enqueue");
    let e = check(&format!("{}{}", &GOOD[..start], &GOOD[end..])).expect_err("no trial");
    assert_eq!(
        (e.key.as_deref(), e.kind),
        (Some("trial"), SpecErrorKind::Missing),
        "{e}"
    );
    assert!(quotes(&e.message, "trial"), "{e}");
}

#[test]
fn a_missing_key_is_named_under_its_table_and_a_missing_section_alone() {
    let cases = [
        ("[study]\nmetric = \"a\"\n[space]\n[trial]\n", "study.name"),
        ("[space]\n[trial]\n[study]\nname = \"a\"\n", "study.metric"),
        // The first table at the very start of the file is not the one missing.
        ("[study]\nname = \"x\"\nmetric = \"a\"\n[space]\n", "trial"),
        ("[space]\n[trial]\n", "study"),
    ];
    for (src, key) in cases {
        let e = check(src).expect_err(src);
        assert_eq!(
            (e.key.as_deref(), e.kind),
            (Some(key), SpecErrorKind::Missing),
            "{src:?}: {e}"
        );
    }
}
