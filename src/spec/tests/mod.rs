//! The study-file checks, through [`parse`]: what each mistake says, its key and its kind.

use std::path::Path;
use std::time::Duration;

use super::study::sanitize;
use super::trial::check_argument;
use super::*;
use crate::trial::{Direction, Objective};

#[test]
fn every_study_gets_a_runs_directory_of_its_own() {
    assert_eq!(sanitize("digits-softmax_2.b"), "digits-softmax_2.b");
    let names = ["a/b", "a_b", "a b", "λ", "μ", "..", ".", "", "a:b"];
    let dirs: Vec<String> = names.iter().map(|n| sanitize(n)).collect();
    let unique: std::collections::BTreeSet<&String> = dirs.iter().collect();
    assert_eq!(unique.len(), names.len(), "{dirs:?}");
    for d in &dirs {
        assert!(
            !d.contains('/') && d != ".." && d != "." && !d.is_empty(),
            "{d}"
        );
    }
    assert_eq!(sanitize("a/b"), sanitize("a/b"), "stable");
    for long in [
        "x".repeat(101),
        "x".repeat(300),
        "é".repeat(200),
        "a/".repeat(400),
    ] {
        let d = sanitize(&long);
        assert!(d.len() <= 110, "{} bytes: {d}", d.len());
        assert_ne!(d, sanitize(&format!("{long}y")), "still unique");
    }
    assert_eq!(sanitize(&"x".repeat(100)), "x".repeat(100));
}

pub(super) const GOOD: &str = r#"
[study]
name = "demo"
metric = "val_loss"
trials = 4

[space]
lr = { type = "float", low = 1e-4, high = 1e-1, log = true }
opt = { type = "categorical", choices = ["sgd", "adam"] }

[workers]
count = 2
devices = ["cpu"]

[trial]
kind = "command"
command = ["python3", "train.py", "--lr", "{lr}", "--opt={opt}", "{trial_dir}"]
timeout = "5m"

[[enqueue]]
lr = 0.01
opt = "adam"
"#;

#[test]
fn the_checkpoint_dir_is_a_placeholder_of_tunes_own_and_no_parameter_name() {
    let with = GOOD.replace(
        "\"{trial_dir}\"]",
        "\"{trial_dir}\", \"--ckpt={checkpoint_dir}\"]",
    );
    assert!(with.contains("{checkpoint_dir}"), "{with}");
    check(&with).expect("{checkpoint_dir} is tune's own placeholder");
    let shadowing = GOOD.replace(
        "opt = {",
        "checkpoint_dir = { type = \"int\", low = 1, high = 2 }\nopt = {",
    );
    let e = check(&shadowing).expect_err("a parameter named checkpoint_dir");
    assert!(e.to_string().contains("space.checkpoint_dir"), "{e}");
}

pub(super) fn check(src: &str) -> Result<Study, SpecError> {
    parse(Path::new("studies/x.toml"), src, &Overrides::default())
}

#[test]
fn a_good_study_file_becomes_a_study() {
    let s = check(GOOD).expect("valid");
    assert_eq!(s.name, "demo");
    assert_eq!(s.slots, ["cpu", "cpu"]);
    assert_eq!(s.trials, Some(4));
    let db = s.storage.as_sqlite().expect("a SQLite file");
    assert!(db.is_absolute(), "{}", db.display());
    assert!(db.ends_with("studies/tune.db"));
    assert_eq!(s.enqueue.len(), 1);
    let TrialSpec::Command(c) = &s.trial else {
        panic!("a command study")
    };
    assert_eq!(c.timeout, Some(Duration::from_secs(300)));
    assert_eq!(c.grace, Duration::from_secs(10));
}

#[test]
fn metric_and_direction_lists_make_a_multi_objective_study() {
    let src = GOOD.replacen(
        "metric = \"val_loss\"",
        "metric = [\"val_loss\", \"samples_per_s\"]\ndirection = [\"minimize\", \"maximize\"]",
        1,
    );
    let s = check(&src).expect("valid");
    assert_eq!(s.metric, "val_loss");
    assert_eq!(s.direction, Direction::Minimize);
    assert_eq!(
        s.others,
        [Objective {
            metric: "samples_per_s".into(),
            direction: Direction::Maximize
        }]
    );
    assert!(s.is_multi());
    // One metric in a list is a single-objective study.
    let s = check(&GOOD.replacen("metric = \"val_loss\"", "metric = [\"val_loss\"]", 1))
        .expect("one in a list");
    assert!(!s.is_multi());
    let bad: &[(&str, &str)] = &[
        ("metric = []", "the list is empty"),
        (
            "metric = [\"a\", \"b\"]",
            "a study with 2 metrics needs a list of 2 directions",
        ),
        (
            "metric = [\"a\", \"b\"]\ndirection = [\"minimize\"]",
            "1 direction(s) for 2 metric(s)",
        ),
        (
            "metric = [\"a\", \"a\"]\ndirection = [\"minimize\", \"minimize\"]",
            "`a` is named twice",
        ),
        (
            "metric = [\"a\", \"step\"]\ndirection = [\"minimize\", \"minimize\"]",
            "`step` cannot be the objective",
        ),
        (
            "metric = [\"a\", \"b\"]\ndirection = [\"minimize\", \"up\"]",
            "\"up\" is neither",
        ),
    ];
    for (with, says) in bad {
        let e = check(&GOOD.replacen("metric = \"val_loss\"", with, 1))
            .expect_err(with)
            .to_string();
        assert!(e.contains("studies/x.toml"), "{e}");
        assert!(
            e.contains("study.metric") || e.contains("study.direction"),
            "{e}"
        );
        assert!(e.contains(says), "{with}: {e}");
    }
}

#[test]
fn sampler_cost_aware_is_read_and_left_to_the_default_when_absent() {
    let s = check(GOOD).expect("good");
    assert_eq!(s.sampler_options.cost_aware, None);
    let src = GOOD.replacen("[workers]", "[sampler]\ncost_aware = false\n[workers]", 1);
    let s = check(&src).expect("cost_aware = false");
    assert_eq!(s.sampler_options.cost_aware, Some(false));
}

#[test]
fn every_mistake_names_the_file_and_the_key() {
    let cases: &[(&str, &str, &str)] = &[
        ("trials = 4", "trials = -1", "study.trials"),
        ("trials = 4", "trials = 4\ncolour = \"red\"", "colour"),
        ("metric = \"val_loss\"", "metric = \"step\"", "study.metric"),
        (
            "trials = 4",
            "trials = 4\ndirection = \"up\"",
            "study.direction",
        ),
        (
            "trials = 4",
            "trials = 4\ntimeout = \"soon\"",
            "study.timeout",
        ),
        ("trials = 4", "", "budget"),
        ("count = 2", "count = 0", "workers.count"),
        (
            "count = 2\ndevices = [\"cpu\"]",
            "count = 1\ndevices = [\"cpu\", \"cuda:0\"]",
            "cuda:0 unused",
        ),
        (
            "devices = [\"cpu\"]",
            "devices = [\"gpu\"]",
            "workers.devices",
        ),
        ("\"{trial_dir}\"]", "\"{nope}\"]", "{nope}"),
        (
            "timeout = \"5m\"",
            "timeout = \"5m\"\nshell = true",
            "shell",
        ),
        ("kind = \"command\"", "kind = \"docker\"", "trial.kind"),
        ("lr = 0.01", "lr = 5.0", "enqueue[0]"),
        ("high = 1e-1", "high = 1e-5", "`lr`"),
        (
            "[workers]",
            "[sampler]\nkind = \"magic\"\n[workers]",
            "sampler.kind",
        ),
        (
            "[workers]",
            "[sampler]\ncost_aware = \"yes\"\n[workers]",
            "sampler.cost_aware",
        ),
        (
            "count = 2",
            "count = 2\nslots_per_device = 2",
            "workers.slots_per_device",
        ),
        (
            "count = 2",
            "slots_per_device = 0",
            "workers.slots_per_device",
        ),
        (
            "count = 2",
            "count = 2\ngpu_memory_fraction = 1.5",
            "workers.gpu_memory_fraction",
        ),
        (
            "count = 2",
            "count = 2\ngpu_memory_fraction = 0.0",
            "workers.gpu_memory_fraction",
        ),
    ];
    for (from, to, want) in cases {
        assert!(GOOD.contains(from), "{from}");
        let src = GOOD.replacen(from, to, 1);
        let e = check(&src).expect_err(to).to_string();
        assert!(e.starts_with("studies/x.toml: "), "{e}");
        assert!(e.contains(want), "for {to:?}: `{e}` lacks `{want}`");
    }
}

fn workers_of(table: &str) -> Result<Study, SpecError> {
    let start = GOOD.find("[workers]").expect("GOOD has workers");
    let end = GOOD.find("[trial]").expect("GOOD has a trial");
    check(&format!("{}{table}\n{}", &GOOD[..start], &GOOD[end..]))
}

#[test]
fn slots_per_device_puts_that_many_slots_on_each_device_side_by_side() {
    let s = workers_of("[workers]\nslots_per_device = 2\ndevices = [\"cuda:0\", \"cuda:1\"]")
        .expect("valid");
    assert_eq!(s.slots, ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]);
    assert_eq!(s.gpu_memory_fraction, None);
    assert!(!s.auto_devices);
    let s = workers_of("[workers]\nslots_per_device = 3\ndevices = \"cpu\"").expect("valid");
    assert_eq!(s.slots, ["cpu", "cpu", "cpu"]);
    assert!(
        workers_of("[workers]\ndevices = \"auto\"")
            .expect("valid")
            .auto_devices
    );
    assert!(workers_of("").expect("valid").auto_devices);
}

#[test]
fn the_gpu_memory_shares_of_one_gpus_slots_must_fit_in_it() {
    let s = workers_of(
        "[workers]\nslots_per_device = 2\ndevices = [\"cuda:0\"]\ngpu_memory_fraction = 0.45",
    )
    .expect("two shares of 0.45 fit");
    assert_eq!(s.gpu_memory_fraction, Some(0.45));
    let e = workers_of(
        "[workers]\nslots_per_device = 3\ndevices = [\"cuda:0\"]\ngpu_memory_fraction = 0.5",
    )
    .expect_err("three shares of 0.5 do not")
    .to_string();
    assert!(e.contains("3 slots on cuda:0 × 0.5"), "{e}");
    assert!(e.contains("at most 0.333"), "{e}");
    let TrialSpec::Command(c) = &s.trial else {
        panic!("a command study")
    };
    assert!(
        c.env
            .contains(&("TUNE_GPU_MEMORY_FRACTION".to_string(), "0.45".to_string())),
        "{:?}",
        c.env
    );
    // CPU slots take no share of a GPU.
    workers_of("[workers]\ncount = 4\ndevices = [\"cpu\"]\ngpu_memory_fraction = 0.5")
        .expect("no GPU slot");
}

#[test]
fn garbage_never_panics() {
    for src in [
        "",
        "[study",
        "\u{0}",
        "[study]\nname = 3",
        "study = 5",
        "[[study]]",
    ] {
        assert!(check(src).is_err());
    }
}

#[test]
fn placeholders_are_found_only_around_identifiers() {
    let p: Vec<_> = placeholders("--lr={lr} {\"json\": 1} {trial_dir}/x {}")
        .into_iter()
        .map(|x| x.2)
        .collect();
    assert_eq!(p, ["lr", "trial_dir"]);
    let p: Vec<_> = placeholders("{λ}/{lr_μ}-{1x}{a.b}")
        .into_iter()
        .map(|x| x.2)
        .collect();
    assert_eq!(p, ["λ", "lr_μ", "a.b"]);
    let arg = "x{λ}y";
    let (s, e, _) = placeholders(arg)[0];
    assert_eq!(&arg[s..e], "{λ}");
}

#[test]
fn arguments_that_would_not_do_what_they_seem_are_found() {
    assert!(check_argument("--lr={lr}").is_ok());
    assert!(check_argument("{\"json\": 1}").is_ok());
    assert!(
        check_argument("a\0b")
            .unwrap_err()
            .to_string()
            .contains("NUL")
    );
    assert!(
        check_argument("{}")
            .unwrap_err()
            .to_string()
            .contains("empty")
    );
    assert!(
        check_argument("--lr={lr")
            .unwrap_err()
            .to_string()
            .contains("never closed")
    );
}

mod keys;

#[test]
fn gpus_per_trial_makes_each_slot_a_group_of_the_listed_gpus() {
    let four = "devices = [\"cuda:0\", \"cuda:1\", \"cuda:2\", \"cuda:3\"]";
    let s = workers_of(&format!("[workers]\ngpus_per_trial = 2\n{four}")).expect("valid");
    assert_eq!(s.slots, ["cuda:0,cuda:1", "cuda:2,cuda:3"]);
    let s = workers_of(&format!("[workers]\ngpus_per_trial = 4\n{four}")).expect("valid");
    assert_eq!(s.slots, ["cuda:0,cuda:1,cuda:2,cuda:3"]);
    // slots_per_device puts that many slots on each group; count goes round-robin over them.
    let s = workers_of(&format!(
        "[workers]\ngpus_per_trial = 2\nslots_per_device = 2\n{four}"
    ))
    .expect("valid");
    assert_eq!(
        s.slots,
        [
            "cuda:0,cuda:1",
            "cuda:0,cuda:1",
            "cuda:2,cuda:3",
            "cuda:2,cuda:3"
        ]
    );
    let s =
        workers_of(&format!("[workers]\ngpus_per_trial = 2\ncount = 3\n{four}")).expect("valid");
    assert_eq!(s.slots, ["cuda:0,cuda:1", "cuda:2,cuda:3", "cuda:0,cuda:1"]);
    // One GPU per trial is what a study without the key gets.
    let s = workers_of("[workers]\ngpus_per_trial = 1\ndevices = [\"cuda:0\", \"cuda:1\"]")
        .expect("valid");
    assert_eq!(s.slots, ["cuda:0", "cuda:1"]);
}

#[test]
fn a_gpus_per_trial_that_cannot_be_met_is_refused_saying_why() {
    let cases = [
        (
            "gpus_per_trial = 2\ndevices = [\"cpu\", \"cuda:0\"]",
            "`workers.devices` lists \"cpu\"",
        ),
        ("gpus_per_trial = 2\ndevices = \"cpu\"", "need CUDA devices"),
        (
            "gpus_per_trial = 4\ndevices = [\"cuda:0\", \"cuda:1\"]",
            "4 GPUs per trial, but `workers.devices` lists 2; write at most 2",
        ),
        (
            "gpus_per_trial = 2\ndevices = [\"cuda:0\", \"cuda:1\", \"cuda:2\"]",
            "make 1 group(s) of 2 and would leave cuda:2 unused",
        ),
        (
            "gpus_per_trial = 2\ndevices = [\"cuda:0\", \"cuda:0\"]",
            "lists cuda:0 twice",
        ),
        (
            "gpus_per_trial = 0\ndevices = [\"cuda:0\"]",
            "must be between 1 and 64",
        ),
        (
            "gpus_per_trial = [1, 2, 4]\ndevices = [\"cuda:0\"]",
            "may come later",
        ),
        (
            "gpus_per_trial = { type = \"categorical\", choices = [1, 2] }\ndevices = [\"cuda:0\"]",
            "may come later",
        ),
        (
            "gpus_per_trial = \"2\"\ndevices = [\"cuda:0\"]",
            "must be a whole number of GPUs",
        ),
    ];
    for (table, want) in cases {
        let e = workers_of(&format!("[workers]\n{table}")).expect_err(table);
        let text = e.to_string();
        assert!(text.contains("key `workers.gpus_per_trial`"), "{text}");
        assert!(
            text.contains(want),
            "for {table:?}: `{text}` lacks `{want}`"
        );
    }
}

#[test]
fn a_builtin_study_with_several_gpus_per_trial_is_refused_naming_the_later_step() {
    let builtin = super::fuzz::BUILTIN.replace(
        "[workers]\ndevices = \"cpu\"\nslots_per_device = 2\ngpu_memory_fraction = 0.5",
        "[workers]\ndevices = [\"cuda:0\", \"cuda:1\"]\ngpus_per_trial = 2",
    );
    assert!(builtin.contains("gpus_per_trial"), "the fixture changed");
    let e = check(&builtin)
        .expect_err("builtin on two GPUs")
        .to_string();
    assert!(e.contains("key `workers.gpus_per_trial`"), "{e}");
    assert!(
        e.contains("data-parallel training in it is a later step"),
        "{e}"
    );
}

#[test]
fn devices_and_gpus_are_placeholders_unless_a_parameter_has_the_name() {
    let src = GOOD.replacen(
        "\"{trial_dir}\"]",
        "\"{trial_dir}\", \"{devices}\", \"{gpus}\"]",
        1,
    );
    assert_ne!(src, GOOD, "the fixture changed");
    check(&src).expect("{devices} and {gpus} are tune's own");
}

#[test]
fn the_torchrun_launcher_is_read_and_its_mistakes_named() {
    let src = GOOD.replacen(
        "kind = \"command\"",
        "kind = \"command\"\nlauncher = \"torchrun\"",
        1,
    );
    assert_ne!(src, GOOD, "the fixture changed");
    match check(&src).expect("valid").trial {
        TrialSpec::Command(c) => assert_eq!(
            c.launcher,
            Some(crate::study::Launcher {
                python: "python3".into()
            })
        ),
        TrialSpec::Builtin(_) => panic!("a command study"),
    }
    let cases = [
        (
            "launcher = \"mpirun\"",
            "key `trial.launcher`: must be \"torchrun\"",
        ),
        ("python = \"python3.11\"", "there is no `trial.launcher`"),
        (
            "launcher = \"torchrun\"\npython = \"\"",
            "key `trial.python`",
        ),
    ];
    for (line, want) in cases {
        let src = GOOD.replacen(
            "kind = \"command\"",
            &format!("kind = \"command\"\n{line}"),
            1,
        );
        let e = check(&src).expect_err(line).to_string();
        assert!(e.contains(want), "for {line:?}: `{e}` lacks `{want}`");
    }
}
