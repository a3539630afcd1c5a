//! Bad input is refused with status 2 and a message naming the file and the key or parameter,
//! before anything is written: study files, spaces (`shared/spec/ask-tell.md`) and flags.

use rstest::rstest;

use crate::common::{Sandbox, stderr, text};

/// A good study file; each case below spoils one line of it.
const GOOD: &str = r#"[study]
name = "good"
metric = "loss"
direction = "minimize"
trials = 2
seed = 1

[space]
x = { type = "float", low = -1.0, high = 1.0 }
k = { type = "int", low = 1, high = 4 }
c = { type = "categorical", choices = ["a", "b"] }

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "trial.sh", "{x}", "{trial_dir}"]
timeout = "1m"
"#;

const TRIAL: &str = "echo \"tune: {\\\"loss\\\": $1}\"\n";

fn spoil(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "the good study has `{from}`");
    GOOD.replacen(from, to, 1)
}

fn assert_refused(out: &std::process::Output, needles: &[&str]) {
    assert_eq!(out.status.code(), Some(2), "{}", text(out));
    let err = stderr(out);
    for n in needles {
        assert!(err.contains(n), "stderr lacks `{n}`:\n{}", text(out));
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[rstest]
#[case::unknown_key_in_study("seed = 1", "seed = 1\ncolour = \"red\"", "colour")]
#[case::unknown_table("[workers]", "[extras]\na = 1\n\n[workers]", "extras")]
#[case::unknown_key_in_trial("timeout = \"1m\"", "timeout = \"1m\"\nshell = true", "shell")]
#[case::unknown_key_in_workers("count = 1", "count = 1\ngpus = 2", "gpus")]
#[case::zero_trials("trials = 2", "trials = 0", "study.trials")]
#[case::negative_trials("trials = 2", "trials = -3", "study.trials")]
#[case::trials_not_a_number("trials = 2", "trials = \"ten\"", "trials")]
#[case::no_budget("trials = 2", "", "study.trials")]
#[case::bad_study_timeout("trials = 2", "trials = 2\ntimeout = \"soon\"", "study.timeout")]
#[case::zero_study_timeout("trials = 2", "trials = 2\ntimeout = \"0s\"", "study.timeout")]
#[case::bad_trial_timeout("timeout = \"1m\"", "timeout = \"forever\"", "trial.timeout")]
#[case::bad_direction("direction = \"minimize\"", "direction = \"down\"", "study.direction")]
#[case::metric_is_step("metric = \"loss\"", "metric = \"step\"", "study.metric")]
#[case::missing_metric("metric = \"loss\"\n", "", "metric")]
#[case::negative_seed("seed = 1", "seed = -1", "study.seed")]
#[case::bad_device("devices = [\"cpu\"]", "devices = [\"gpu0\"]", "workers.devices")]
#[case::bad_cuda_index("devices = [\"cpu\"]", "devices = \"cuda:x\"", "workers.devices")]
#[case::empty_devices("devices = [\"cpu\"]", "devices = []", "workers.devices")]
#[case::zero_workers("count = 1", "count = 0", "workers.count")]
#[case::unknown_placeholder("\"{trial_dir}\"]", "\"{learning_rate}\"]", "{learning_rate}")]
#[case::empty_command(
    "command = [\"sh\", \"trial.sh\", \"{x}\", \"{trial_dir}\"]",
    "command = []",
    "trial.command"
)]
#[case::unknown_trial_kind("kind = \"command\"", "kind = \"docker\"", "trial.kind")]
#[case::missing_trial_kind("kind = \"command\"\n", "", "trial.kind")]
#[case::unknown_sampler(
    "[workers]",
    "[sampler]\nkind = \"magic\"\n\n[workers]",
    "sampler.kind"
)]
#[case::unknown_pruner("[workers]", "[pruner]\nkind = \"psychic\"\n\n[workers]", "pruner")]
#[case::grace_shorter_than_heartbeat(
    "seed = 1",
    "seed = 1\nheartbeat = \"5s\"\nheartbeat_grace = \"2s\"",
    "study.heartbeat_grace"
)]
#[case::enqueue_outside_the_space(
    "timeout = \"1m\"",
    "timeout = \"1m\"\n\n[[enqueue]]\nx = 5.0\nk = 1\nc = \"a\"",
    "enqueue[0]"
)]
#[case::storage_in_a_missing_directory(
    "seed = 1",
    "seed = 1\nstorage = \"nowhere/deeper/x.db\"",
    "study.storage"
)]
#[case::empty_placeholder("\"{x}\", \"{trial_dir}\"", "\"{}\", \"{trial_dir}\"", "trial.command")]
#[case::unclosed_placeholder(
    "\"{x}\", \"{trial_dir}\"",
    "\"--x={x\", \"{trial_dir}\"",
    "never closed"
)]
#[case::nul_in_the_command("\"{x}\", \"{trial_dir}\"", "\"{x}\", \"a\\u0000b\"", "NUL")]
#[case::param_shadowed_by_a_builtin(
    "k = { type",
    "trial = { type = \"int\", low = 1, high = 2 }\nk = { type",
    "space.trial"
)]
#[case::empty_parameter_name(
    "k = { type",
    "\"\" = { type = \"int\", low = 1, high = 2 }\nk = { type",
    "space"
)]
#[case::placeholder_in_the_check(
    "timeout = \"1m\"",
    "timeout = \"1m\"\ncheck = [\"sh\", \"{x}\"]",
    "trial.check"
)]
#[case::empty_requires(
    "timeout = \"1m\"",
    "timeout = \"1m\"\nrequires = [\"\"]",
    "trial.requires"
)]
#[case::checkpoint_dir_not_a_string(
    "timeout = \"1m\"",
    "timeout = \"1m\"\ncheckpoint_dir = 3",
    "trial.checkpoint_dir"
)]
#[case::checkpoint_dir_of_an_unknown_scheme(
    "timeout = \"1m\"",
    "timeout = \"1m\"\ncheckpoint_dir = \"ftp://h/x\"",
    "trial.checkpoint_dir"
)]
#[case::checkpoint_store_without_a_bucket(
    "timeout = \"1m\"",
    "timeout = \"1m\"\ncheckpoint_dir = \"s3:///x\"",
    "names no bucket"
)]
#[case::not_toml("[study]", "[study", "line 1")]
#[case::missing_space("[space]", "[nothing]", "space")]
fn a_bad_study_file_is_refused_with_status_2_naming_the_file_and_the_key(
    #[case] from: &str,
    #[case] to: &str,
    #[case] key: &str,
) {
    let sb = Sandbox::new();
    sb.write("trial.sh", TRIAL);
    sb.write("bad.toml", &spoil(from, to));
    let out = sb.run(&["run", "bad.toml"]);
    assert_refused(&out, &["bad.toml", key]);
    assert!(
        !sb.join("tune.db").exists(),
        "a rejected study writes no database"
    );
    assert!(!sb.join("runs").exists(), "a rejected study runs nothing");
    // Every command that reads a study file refuses it the same way.
    let out = sb.run(&["trials", "bad.toml"]);
    assert_refused(&out, &["bad.toml", key]);
}

#[rstest]
#[case::empty_file("")]
#[case::nul_bytes("\0\0\0")]
#[case::not_utf8("\u{fffd}[study]\u{7f}")]
#[case::study_is_a_number("study = 5")]
#[case::study_is_an_array("[[study]]\nname = \"a\"")]
#[case::name_is_a_number("[study]\nname = 3")]
fn garbage_is_refused_with_status_2_and_never_panics(#[case] source: &str) {
    let sb = Sandbox::new();
    sb.write("bad.toml", source);
    assert_refused(&sb.run(&["run", "bad.toml"]), &["bad.toml"]);
    assert_refused(&sb.run(&["bad.toml"]), &["bad.toml"]);
}

#[test]
fn a_study_file_that_does_not_exist_is_refused_with_status_2() {
    let sb = Sandbox::new();
    assert_refused(&sb.run(&["run", "missing.toml"]), &["missing.toml"]);
    assert_refused(&sb.run(&["missing.toml"]), &["missing.toml"]);
    assert!(!sb.join("tune.db").exists());
}

/// Every space error of `shared/spec/ask-tell.md`: the lines of a `[space]` table and what
/// the message must name.
#[rstest]
#[case::unknown_type("dropout = { type = \"complex\", low = 0.0, high = 1.0 }", "`dropout`")]
#[case::type_not_a_string("dropout = { type = 3, low = 0.0, high = 1.0 }", "`dropout`")]
#[case::missing_type("dropout = { low = 0.0, high = 1.0 }", "`dropout`")]
#[case::unknown_key(
    "dropout = { type = \"float\", low = 0.0, high = 1.0, scale = 2 }",
    "scale"
)]
#[case::missing_bound("dropout = { type = \"float\", low = 0.0 }", "high")]
#[case::nan_bound("dropout = { type = \"float\", low = nan, high = 1.0 }", "`dropout`")]
#[case::infinite_bound("dropout = { type = \"float\", low = 0.0, high = inf }", "`dropout`")]
#[case::bound_not_a_number("dropout = { type = \"float\", low = \"0\", high = 1.0 }", "low")]
#[case::low_equals_high("dropout = { type = \"float\", low = 1.0, high = 1.0 }", "`dropout`")]
#[case::low_above_high_int("dropout = { type = \"int\", low = 5, high = 1 }", "`dropout`")]
#[case::log_with_zero_low(
    "dropout = { type = \"float\", low = 0.0, high = 1.0, log = true }",
    "`dropout`"
)]
#[case::log_with_negative_low_int(
    "dropout = { type = \"int\", low = -1, high = 8, log = true }",
    "`dropout`"
)]
#[case::int_bound_not_integer("dropout = { type = \"int\", low = 0.5, high = 3 }", "`dropout`")]
#[case::zero_step(
    "dropout = { type = \"float\", low = 0.0, high = 1.0, step = 0.0 }",
    "`dropout`"
)]
#[case::negative_int_step(
    "dropout = { type = \"int\", low = 0, high = 10, step = -1 }",
    "`dropout`"
)]
#[case::step_wider_than_range(
    "dropout = { type = \"float\", low = 0.0, high = 1.0, step = 2.0 }",
    "`dropout`"
)]
#[case::int_step_wider_than_range(
    "dropout = { type = \"int\", low = 0, high = 3, step = 10 }",
    "`dropout`"
)]
#[case::log_not_a_bool(
    "dropout = { type = \"float\", low = 1.0, high = 2.0, log = \"yes\" }",
    "`dropout`"
)]
#[case::empty_choices("dropout = { type = \"categorical\", choices = [] }", "`dropout`")]
#[case::choices_not_a_list("dropout = { type = \"categorical\", choices = \"abc\" }", "`dropout`")]
#[case::mixed_choices(
    "dropout = { type = \"categorical\", choices = [\"a\", 1] }",
    "`dropout`"
)]
#[case::nan_choice(
    "dropout = { type = \"categorical\", choices = [1.0, nan] }",
    "`dropout`"
)]
#[case::when_unknown_parameter(
    "dropout = { type = \"float\", low = 0.0, high = 1.0, when = { ghost = \"a\" } }",
    "ghost"
)]
#[case::when_cycle(
    "dropout = { type = \"categorical\", choices = [\"a\", \"b\"], when = { gate = \"a\" } }\ngate = { type = \"categorical\", choices = [\"a\", \"b\"], when = { dropout = \"a\" } }",
    "cycle"
)]
#[case::when_on_itself(
    "dropout = { type = \"categorical\", choices = [\"a\", \"b\"], when = { dropout = \"a\" } }",
    "`dropout`"
)]
#[case::when_empty(
    "dropout = { type = \"float\", low = 0.0, high = 1.0, when = {} }",
    "`dropout`"
)]
#[case::param_not_a_table("dropout = 3", "`dropout`")]
#[case::int_range_of_the_whole_i64(
    "dropout = { type = \"int\", low = -9223372036854775808, high = 9223372036854775807 }",
    "2^53"
)]
#[case::int_beyond_what_a_float_holds(
    "dropout = { type = \"int\", low = 0, high = 9007199254740993 }",
    "2^53"
)]
#[case::float_range_whose_width_overflows(
    "dropout = { type = \"float\", low = -1.5e308, high = 1.5e308 }",
    "too wide"
)]
#[case::no_parameter_at_all("", "space")]
fn a_bad_space_is_refused_with_status_2_naming_the_parameter(
    #[case] lines: &str,
    #[case] needle: &str,
) {
    let sb = Sandbox::new();
    // Through `tune ask-tell --space`...
    sb.write("space.toml", &format!("[space]\n{lines}\n"));
    let out = sb.run(&["ask-tell", "--space", "space.toml", "--sampler", "random"]);
    assert_refused(&out, &["space.toml", needle]);
    assert!(
        out.stdout.is_empty(),
        "nothing on standard output: {}",
        text(&out)
    );
    // ...and through a study file's `[space]`.
    let study = GOOD.replace(
        "x = { type = \"float\", low = -1.0, high = 1.0 }\nk = { type = \"int\", low = 1, high = 4 }\nc = { type = \"categorical\", choices = [\"a\", \"b\"] }",
        lines,
    ).replace("\"{x}\", ", "");
    assert_ne!(study, GOOD);
    sb.write("bad.toml", &study);
    assert_refused(
        &sb.run(&["run", "bad.toml"]),
        &["bad.toml", "space", needle],
    );
    assert!(!sb.join("tune.db").exists());
}

#[rstest]
#[case::space_file_missing(&["ask-tell", "--space", "missing.toml"], "missing.toml")]
#[case::space_file_without_space(&["ask-tell", "--space", "trial.sh"], "trial.sh")]
#[case::unknown_sampler(&["ask-tell", "--space", "s.toml", "--sampler", "magic"], "--sampler")]
#[case::bad_direction(&["ask-tell", "--space", "s.toml", "--direction", "up"], "--direction")]
#[case::negative_seed(&["ask-tell", "--space", "s.toml", "--seed", "-3"], "-3")]
#[case::study_without_db(&["ask-tell", "--space", "s.toml", "--study", "x"], "--db")]
#[case::params_not_json(&["enqueue", "s.toml", "--params", "lr=0.1"], "--params")]
#[case::params_not_an_object(&["enqueue", "s.toml", "--params", "[0.1]"], "--params")]
#[case::params_out_of_bounds(&["enqueue", "s.toml", "--params", r#"{"x": 9.0, "k": 1, "c": "a"}"#], "`x`")]
#[case::params_unknown_choice(&["enqueue", "s.toml", "--params", r#"{"x": 0.5, "k": 1, "c": "z"}"#], "`c`")]
#[case::params_int_not_integer(&["enqueue", "s.toml", "--params", r#"{"x": 0.5, "k": 1.5, "c": "a"}"#], "`k`")]
#[case::params_wrong_type(&["enqueue", "s.toml", "--params", r#"{"x": "big", "k": 1, "c": "a"}"#], "`x`")]
#[case::params_unknown_name(&["enqueue", "s.toml", "--params", r#"{"x": 0.5, "k": 1, "c": "a", "w": 1}"#], "`w`")]
#[case::params_missing_one(&["enqueue", "s.toml", "--params", r#"{"x": 0.5, "c": "a"}"#], "`k`")]
#[case::params_nested(&["enqueue", "s.toml", "--params", r#"{"x": [0.5], "k": 1, "c": "a"}"#], "`x`")]
#[case::enqueue_without_params(&["enqueue", "s.toml"], "--params")]
#[case::unknown_state(&["trials", "s.toml", "--state", "finished"], "--state")]
#[case::unknown_format(&["trials", "s.toml", "--format", "xml"], "--format")]
#[case::unknown_sort(&["trials", "s.toml", "--sort", "speed"], "--sort")]
#[case::negative_limit(&["trials", "s.toml", "--limit", "-1"], "-1")]
#[case::unknown_study(&["trials", "--study", "nope", "--db", "tune.db"], "nope")]
#[case::missing_database(&["trials", "--study", "good", "--db", "missing.db"], "missing.db")]
#[case::no_study_named(&["trials", "--db", "tune.db"], "study")]
#[case::unknown_trial(&["show", "99", "s.toml"], "99")]
#[case::show_without_number(&["show", "s.toml"], "number")]
#[case::best_of_unknown_study(&["best", "--study", "nope", "--db", "tune.db"], "nope")]
#[case::unknown_flag(&["run", "s.toml", "--fast"], "--fast")]
#[case::unknown_global_flag(&["--frobnicate"], "--frobnicate")]
#[case::misspelt_subcommand(&["tirals", "s.toml"], "'trials'")]
#[case::misspelt_subcommand_after_db(&["--db", "tune.db", "shwo", "1"], "'show'")]
fn a_bad_flag_is_refused_with_status_2_naming_it(#[case] args: &[&str], #[case] needle: &str) {
    let sb = Sandbox::new();
    sb.write("trial.sh", TRIAL);
    sb.write("s.toml", GOOD);
    // A database with one queued trial, which no refused command may touch.
    sb.ok(&[
        "enqueue",
        "s.toml",
        "--params",
        r#"{"x": 0.5, "k": 2, "c": "b"}"#,
    ]);
    let before = sb.trials("s.toml");
    let out = sb.run(args);
    assert_refused(&out, &[needle]);
    assert_eq!(sb.trials("s.toml"), before);
}

#[test]
fn a_rejected_study_file_leaves_its_existing_database_intact() {
    let sb = Sandbox::new();
    sb.write("trial.sh", TRIAL);
    sb.write("s.toml", GOOD);
    sb.ok(&["run", "s.toml"]);
    let before = sb.trials("s.toml");
    assert_eq!(before.len(), 2);
    let dump = || -> Vec<String> {
        let db = sb.db("tune.db");
        let mut out = Vec::new();
        for table in [
            "studies",
            "study_directions",
            "trials",
            "trial_params",
            "trial_values",
            "trial_intermediate_values",
            "tune_studies",
            "tune_trials",
            "tune_reports",
        ] {
            let mut stmt = db
                .prepare(&format!("SELECT * FROM {table} ORDER BY 1"))
                .expect("query");
            let n = stmt.column_count();
            let rows = stmt
                .query_map([], |r| {
                    (0..n)
                        .map(|i| {
                            r.get::<_, rusqlite::types::Value>(i)
                                .map(|v| format!("{v:?}"))
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
                .expect("rows");
            for row in rows {
                out.push(format!("{table}: {}", row.expect("row").join(" | ")));
            }
        }
        out
    };
    let stored = dump();
    for (from, to, key) in [
        ("trials = 2", "trials = 0", "study.trials"),
        ("seed = 1", "seed = 1\ncolour = 1", "colour"),
        ("\"{trial_dir}\"]", "\"{nope}\"]", "{nope}"),
        ("low = -1.0", "low = 2.0", "`x`"),
        (
            "devices = [\"cpu\"]",
            "devices = [\"tpu\"]",
            "workers.devices",
        ),
        // Valid alone, but not the study stored under this name.
        (
            "direction = \"minimize\"",
            "direction = \"maximize\"",
            "direction",
        ),
        ("metric = \"loss\"", "metric = \"acc\"", "metric"),
    ] {
        sb.write("s.toml", &spoil(from, to));
        let out = sb.run(&["run", "s.toml"]);
        assert_refused(&out, &["s.toml", key]);
        assert_eq!(dump(), stored, "after `{to}`");
    }
    sb.write("s.toml", GOOD);
    sb.ok(&["run", "s.toml"]);
    assert_eq!(sb.trials("s.toml"), before);
}

#[test]
fn the_study_file_shortcut_works_with_options_before_the_file() {
    let sb = Sandbox::new();
    sb.write("trial.sh", TRIAL);
    sb.write("s.toml", GOOD);
    // `tune --db other.db --no-tui s.toml` is `tune run --db other.db --no-tui s.toml`.
    sb.ok(&["--db", "other.db", "--no-tui", "s.toml"]);
    assert!(!sb.join("tune.db").exists(), "--db was not honoured");
    let out = sb.ok(&[
        "trials", "--study", "good", "--db", "other.db", "--format", "json",
    ]);
    let trials: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(trials.as_array().map(Vec::len), Some(2), "{}", text(&out));
    // A study file named by a path (no `.toml`) still takes the shortcut.
    std::fs::copy(sb.join("s.toml"), sb.join("study")).expect("copy");
    sb.ok(&["--db", "third.db", "./study", "--no-tui"]);
    assert!(sb.join("third.db").exists());
}

#[test]
fn a_database_in_a_directory_that_does_not_exist_is_refused_not_created() {
    let sb = Sandbox::new();
    sb.write("trial.sh", TRIAL);
    sb.write("s.toml", GOOD);
    let out = sb.run(&["run", "s.toml", "--db", "nowhere/x.db"]);
    assert_refused(&out, &["--db", "nowhere", "does not exist"]);
    let out = sb.run(&["trials", "--study", "good", "--db", "nowhere/x.db"]);
    assert_refused(&out, &["nowhere"]);
    sb.write(
        "f.toml",
        &GOOD.replace("seed = 1", "seed = 1\nstorage = \"nowhere/x.db\""),
    );
    let out = sb.run(&["run", "f.toml"]);
    assert_refused(&out, &["f.toml", "study.storage", "nowhere"]);
    assert!(!sb.join("nowhere").exists(), "no directory was created");
}

#[rstest]
#[case::program_not_on_path(
    "[\"sh\", \"trial.sh\"",
    "[\"no-such-program-tune\", \"trial.sh\"",
    "not on PATH"
)]
#[case::program_path_missing(
    "[\"sh\", \"trial.sh\"",
    "[\"./bin/train\", \"trial.sh\"",
    "bin/train"
)]
#[case::required_file_missing(
    "timeout = \"1m\"",
    "timeout = \"1m\"\nrequires = [\"trial.sh\", \"data/train.csv\"]",
    "data/train.csv"
)]
#[case::check_fails(
    "timeout = \"1m\"",
    "timeout = \"1m\"\ncheck = [\"sh\", \"-c\", \"echo no GPU driver >&2; exit 3\"]",
    "no GPU driver"
)]
fn a_command_that_cannot_run_here_is_refused_before_any_trial(
    #[case] from: &str,
    #[case] to: &str,
    #[case] needle: &str,
) {
    let sb = Sandbox::new();
    sb.write("trial.sh", TRIAL);
    sb.write("bad.toml", &spoil(from, to));
    let out = sb.run(&["run", "bad.toml"]);
    assert_refused(&out, &["bad.toml", "trial.", needle]);
    assert!(!sb.join("tune.db").exists(), "nothing is stored");
    assert!(!sb.join("runs").exists(), "no trial ran");
    // A passing check and present files let it run.
    if to.contains("check") {
        sb.write(
            "ok.toml",
            &spoil(
                from,
                "timeout = \"1m\"\ncheck = [\"sh\", \"-c\", \"exit 0\"]",
            ),
        );
        sb.ok(&["run", "ok.toml", "--no-tui"]);
    }
}

#[test]
fn checkpointing_on_a_model_without_blocks_is_refused_with_status_2_naming_the_key() {
    let sb = Sandbox::new();
    let study = r#"[study]
name = "ckpt"
metric = "val_loss"
direction = "minimize"
trials = 1

[space]
lr = { type = "float", low = 1e-4, high = 1e-1, log = true }

[trial]
kind = "builtin"
epochs = 1

[trial.model]
kind = "cnn"
checkpointing = true

[trial.data]
dataset = "digits"
"#;
    sb.write("bad.toml", study);
    let out = sb.run(&["run", "bad.toml"]);
    assert_refused(
        &out,
        &[
            "bad.toml",
            "trial.model.checkpointing: not used by model kind cnn (only by resnet and transformer)",
        ],
    );
    assert!(
        !sb.join("tune.db").exists(),
        "a rejected study writes no database"
    );
}
