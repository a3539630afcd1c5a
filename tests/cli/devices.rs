//! Devices are checked before any trial starts: a `cuda:N` the machine does not have, and a
//! builtin study on CUDA whose `tune-worker` was built without CUDA, exit with status 2 and the
//! fix in the message, and no study is created.
//!
//! `CUDA_VISIBLE_DEVICES` narrows what `tune` counts exactly as it narrows what CUDA shows, so
//! the tests hide every GPU with it and hold on a machine with GPUs too.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::{PATIENCE, Sandbox, output_within, sh_study, stderr, text, tune_bin};

fn with_devices(study: &str, devices: &str) -> String {
    study.replace("devices = [\"cpu\"]", &format!("devices = {devices}"))
}

fn refused(sb: &Sandbox, out: &Output, needles: &[&str]) {
    assert_eq!(out.status.code(), Some(2), "{}", text(out));
    let err = stderr(out);
    for needle in needles {
        assert!(err.contains(needle), "stderr lacks `{needle}`:\n{err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        !sb.join("t.db").exists(),
        "no study was created, so no trial started: {}",
        text(out)
    );
}

#[test]
fn a_cuda_device_the_machine_does_not_have_is_refused_before_any_trial() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo 'tune: {\"loss\": 1}'\n");
    sb.write(
        "s.toml",
        &with_devices(&sh_study("gpu", 2, 2, "", &[]), "[\"cuda:0\", \"cuda:7\"]"),
    );
    let out = output_within(
        {
            let mut c = sb.tune(&["--db", "t.db", "run", "s.toml", "--no-tui"]);
            c.env("CUDA_VISIBLE_DEVICES", "");
            c
        },
        PATIENCE,
    );
    refused(
        &sb,
        &out,
        &[
            "s.toml",
            "key `workers.devices`",
            "\"cuda:0\" (and cuda:7) is not on this machine",
            "no visible CUDA device",
            "devices = [\"cpu\"]",
        ],
    );
}

#[test]
fn a_device_index_past_every_gpu_is_refused_whatever_the_machine() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo 'tune: {\"loss\": 1}'\n");
    sb.write(
        "s.toml",
        &with_devices(&sh_study("gpu", 2, 1, "", &[]), "\"cuda:4096\""),
    );
    let out = sb.run(&["--db", "t.db", "run", "s.toml", "--no-tui"]);
    refused(&sb, &out, &["\"cuda:4096\" is not on this machine"]);
}

/// `tune` on a machine that stands for one with `gpus` GPUs (`TUNE_TEST_CUDA_DEVICES`, for tests
/// only), whatever GPUs this one has.
fn with_gpus(mut c: Command, gpus: usize) -> Command {
    c.env("TUNE_TEST_CUDA_DEVICES", gpus.to_string())
        .env_remove("CUDA_VISIBLE_DEVICES");
    c
}

/// Writes `s.toml`, a two-trial command study on `devices` (a TOML value), and runs it with
/// `tune run` on a machine that says it has `gpus` GPUs.
fn run_on_gpus(sb: &Sandbox, devices: &str, gpus: usize) -> Output {
    sb.write(
        "s.toml",
        &with_devices(&sh_study("gpu", 2, 1, "", &[]), devices),
    );
    output_within(
        with_gpus(
            sb.tune(&["--db", "t.db", "run", "s.toml", "--no-tui"]),
            gpus,
        ),
        PATIENCE,
    )
}

#[test]
fn cuda_7_on_a_machine_with_one_gpu_is_refused_naming_the_one_it_has() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo 'tune: {\"loss\": 1}'\n");
    let out = run_on_gpus(&sb, "[\"cuda:7\"]", 1);
    refused(
        &sb,
        &out,
        &[
            "s.toml: key `workers.devices`",
            "\"cuda:7\" is not on this machine, which has 1 visible CUDA device (cuda:0)",
            "cuda:0 to cuda:0",
        ],
    );
    // The device it has is taken: a command trial on it runs (and sees it as its only GPU).
    sb.write(
        "trial.sh",
        "echo \"gpu=$CUDA_VISIBLE_DEVICES\" >&2\necho 'tune: {\"loss\": 1}'\n",
    );
    let out = run_on_gpus(&sb, "[\"cuda:0\"]", 1);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn tune_worker_devices_naming_a_gpu_the_machine_lacks_is_refused_naming_the_flag() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo 'tune: {\"loss\": 1}'\n");
    sb.write("s.toml", &sh_study("gpu", 2, 1, "", &[]));
    sb.ok(&["--db", "t.db", "run", "s.toml", "--no-tui"]);
    for (devices, gpus, has) in [
        ("cuda:0", 0, "no visible CUDA device"),
        ("cuda:7", 1, "1 visible CUDA device (cuda:0)"),
    ] {
        let out = output_within(
            with_gpus(
                sb.tune(&[
                    "--db",
                    "t.db",
                    "worker",
                    "--study",
                    "gpu",
                    "--devices",
                    devices,
                    "--no-tui",
                ]),
                gpus,
            ),
            PATIENCE,
        );
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = stderr(&out);
        assert!(err.contains("--devices: \"cuda:"), "{err}");
        assert!(err.contains("is not on this machine, which has"), "{err}");
        assert!(err.contains(has), "{err}");
        assert!(!err.contains("workers.devices"), "{err}");
    }
    // The devices were checked before any trial was claimed: the budget was spent, but a
    // worker that got past the check would have recorded itself.
    let workers: i64 = sb
        .db("t.db")
        .query_row("SELECT COUNT(*) FROM tune_workers", [], |r| r.get(0))
        .expect("count the workers");
    assert_eq!(workers, 1, "only the first run's");
}

#[test]
fn a_stored_study_on_a_gpu_this_worker_machine_lacks_is_refused_naming_the_stored_key() {
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo 'tune: {\"loss\": 1}'\n");
    // Created on a machine with eight GPUs...
    let out = run_on_gpus(&sb, "[\"cuda:7\"]", 8);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // ...joined from one with a single GPU.
    let out = output_within(
        with_gpus(
            sb.tune(&["--db", "t.db", "worker", "--study", "gpu", "--no-tui"]),
            1,
        ),
        PATIENCE,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    for needle in [
        "the study file stored in t.db with `gpu`: key `workers.devices`",
        "\"cuda:7\" is not on this machine, which has 1 visible CUDA device (cuda:0)",
    ] {
        assert!(err.contains(needle), "stderr lacks `{needle}`:\n{err}");
    }
}

#[test]
fn queries_of_a_study_file_naming_a_missing_gpu_still_work() {
    // Only `tune run` needs the devices: a study run on another machine reads anywhere.
    let sb = Sandbox::new();
    sb.write("trial.sh", "echo 'tune: {\"loss\": 1}'\n");
    let study = sh_study("gpu", 2, 1, "", &[]);
    sb.write("s.toml", &study);
    sb.ok(&["--db", "t.db", "run", "s.toml", "--no-tui"]);
    sb.write("s.toml", &with_devices(&study, "\"cuda:4096\""));
    let out = sb.ok(&["--db", "t.db", "trials", "s.toml", "--format", "json"]);
    let trials: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(trials.as_array().map(Vec::len), Some(2), "{}", text(&out));
}

/// `tune` copied alone into the sandbox's `bin/`, beside a stand-in `tune-worker` that answers
/// `--capabilities` with `caps` (a real one needs libtorch, which `tune`'s tests never do).
fn tune_beside_worker(sb: &Sandbox, caps: &str) -> PathBuf {
    std::fs::create_dir_all(sb.join("bin")).expect("create bin/");
    let tune = sb.join("bin/tune");
    std::fs::copy(tune_bin(), &tune).expect("copy the tune binary");
    let worker = sb.write(
        "bin/tune-worker",
        &format!(
            "#!/bin/sh\n[ \"$1\" = --capabilities ] || {{ echo \"started as $*\" >&2; exit 3; }}\necho '{caps}'\n"
        ),
    );
    std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755))
        .expect("make the stand-in worker executable");
    // Another test's fork can hold the script's write descriptor for a moment, and an exec
    // meanwhile fails with ETXTBSY ("Text file busy"): wait until the script runs here, so
    // that `tune`'s own exec of it cannot meet that.
    let deadline = std::time::Instant::now() + PATIENCE;
    while let Err(e) = Command::new(&worker).arg("--capabilities").output() {
        assert!(
            e.raw_os_error() == Some(26) && std::time::Instant::now() < deadline,
            "the stand-in worker does not run: {e}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    tune
}

const BUILTIN: &str = r#"[study]
name = "builtin"
metric = "val_loss"
trials = 2

[space]
lr = { type = "float", low = 1e-3, high = 1e-1, log = true }

[workers]
slots_per_device = 2
devices = ["cuda:0"]

[trial]
kind = "builtin"
epochs = 1

[trial.model]
kind = "mlp"

[trial.data]
dataset = "digits"
"#;

fn run_in(sb: &Sandbox, tune: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(tune);
    c.args(args)
        .current_dir(sb.path())
        .env_remove("TUNE_DB")
        .stdin(Stdio::null());
    output_within(c, PATIENCE)
}

#[test]
fn a_builtin_study_on_cuda_with_a_cpu_only_worker_is_refused_naming_the_cuda_setup() {
    let sb = Sandbox::new();
    let tune = tune_beside_worker(&sb, r#"{"cuda":false,"cuda_devices":0}"#);
    sb.write("b.toml", BUILTIN);
    let out = run_in(&sb, &tune, &["--db", "t.db", "run", "b.toml", "--no-tui"]);
    refused(
        &sb,
        &out,
        &[
            "b.toml",
            "\"cuda:0\" needs a `tune-worker` built with CUDA",
            "./scripts/setup.sh --cuda",
            "devices = [\"cpu\"]",
        ],
    );
}

#[test]
fn a_cuda_worker_that_sees_no_gpu_is_refused_naming_the_driver() {
    let sb = Sandbox::new();
    let tune = tune_beside_worker(&sb, r#"{"cuda":true,"cuda_devices":0}"#);
    sb.write("b.toml", BUILTIN);
    let out = run_in(&sb, &tune, &["--db", "t.db", "run", "b.toml", "--no-tui"]);
    refused(&sb, &out, &["is not usable by `tune-worker`", "driver"]);
}

#[test]
fn a_worker_that_cannot_say_what_it_can_do_is_refused_saying_to_rebuild_it() {
    let sb = Sandbox::new();
    let tune = tune_beside_worker(&sb, "not json");
    sb.write("b.toml", BUILTIN);
    let out = run_in(&sb, &tune, &["--db", "t.db", "run", "b.toml", "--no-tui"]);
    refused(&sb, &out, &["--capabilities", "tune-worker"]);
}

/// The names of the shared libraries an executable asks the loader for sit in its dynamic
/// string table; `tune`'s own text never spells these file names.
const TORCH_LIBRARIES: &[&str] = &[
    "libtorch_cpu.so",
    "libtorch_cuda.so",
    "libtorch.so",
    "libc10.so",
    "libc10_cuda.so",
    "libcudart.so",
];

#[test]
fn the_tune_binary_loads_neither_libtorch_nor_a_cuda_library() {
    // `tune` must start in milliseconds, and on a machine without the CUDA libraries: only
    // `tune-worker` links them (crates/tune-train/build.rs, per-binary link arguments).
    let bytes = std::fs::read(tune_bin()).expect("read the tune binary");
    for lib in TORCH_LIBRARIES {
        assert!(
            !bytes.windows(lib.len()).any(|w| w == lib.as_bytes()),
            "tune names {lib}"
        );
    }
}

/// A command study of two trials on `gpus_per_trial = 2` over `"auto"` on a machine that stands
/// for one with `gpus` GPUs; each trial writes what it was given to `env-<trial>.txt`.
fn run_grouped(sb: &Sandbox, gpus: usize, per_trial: usize) -> Output {
    sb.write(
        "trial.sh",
        "printf '%s|%s|%s|%s|%s|%s\\n' \"$CUDA_VISIBLE_DEVICES\" \"$TUNE_NPROC\" \"$TUNE_DEVICE\" \"$TUNE_PHYSICAL_DEVICE\" \"$1\" \"$2\" > \"env-$TUNE_TRIAL.txt\"\necho 'tune: {\"loss\": 1}'\n",
    );
    let study = sh_study("groups", 2, 1, "", &["{devices}", "{gpus}"])
        .replace("count = 1\n", "")
        .replace(
            "devices = [\"cpu\"]",
            &format!("devices = \"auto\"\ngpus_per_trial = {per_trial}"),
        );
    sb.write("s.toml", &study);
    output_within(
        with_gpus(
            sb.tune(&["--db", "t.db", "run", "s.toml", "--no-tui"]),
            gpus,
        ),
        PATIENCE,
    )
}

#[test]
fn a_group_of_gpus_reaches_a_command_trial_as_its_visible_devices_and_placeholders() {
    let sb = Sandbox::new();
    let out = run_grouped(&sb, 4, 2);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!stderr(&out).contains("sit idle"), "{}", text(&out));
    let mut seen: Vec<String> = (0..2)
        .map(|t| {
            std::fs::read_to_string(sb.join(&format!("env-{t}.txt")))
                .expect("each trial wrote its environment")
                .trim()
                .to_string()
        })
        .collect();
    seen.sort();
    // Two slots, one per group of two; each trial sees its own group only.
    for line in &seen {
        assert!(
            [
                "0,1|2|cuda:0|cuda:0,cuda:1|cuda:0,cuda:1|0,1",
                "2,3|2|cuda:0|cuda:2,cuda:3|cuda:2,cuda:3|2,3",
            ]
            .contains(&line.as_str()),
            "{line}"
        );
    }
    // `tune show` names the group as the trial's device, read on a machine without GPUs.
    let mut devices: Vec<String> = (0..2)
        .map(|n| {
            let n = n.to_string();
            let out = sb.ok(&[
                "show", &n, "--db", "t.db", "--study", "groups", "--format", "json",
            ]);
            let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            shown["device"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    devices.sort();
    assert_eq!(devices, ["cuda:0,cuda:1", "cuda:2,cuda:3"]);
}

#[test]
fn six_gpus_in_groups_of_four_make_one_slot_and_say_two_sit_idle() {
    let sb = Sandbox::new();
    let out = run_grouped(&sb, 6, 4);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("6 visible GPUs make 1 group(s) of 4; 2 GPU(s) sit idle (cuda:4, cuda:5)"),
        "{err}"
    );
    let line = std::fs::read_to_string(sb.join("env-0.txt")).expect("the trial ran");
    assert_eq!(
        line.trim(),
        "0,1,2,3|4|cuda:0|cuda:0,cuda:1,cuda:2,cuda:3|cuda:0,cuda:1,cuda:2,cuda:3|0,1,2,3"
    );
}

#[test]
fn more_gpus_per_trial_than_the_machine_has_is_refused_before_any_trial() {
    let sb = Sandbox::new();
    let out = run_grouped(&sb, 2, 4);
    refused(
        &sb,
        &out,
        &[
            "s.toml",
            "key `workers.gpus_per_trial`",
            "4 GPUs per trial need 4 CUDA devices, but this machine shows 2 visible CUDA device(s)",
        ],
    );
    let out = run_grouped(&sb, 0, 2);
    refused(
        &sb,
        &out,
        &["\"auto\" found no visible CUDA device, only the CPU"],
    );
}

#[test]
fn tune_worker_groups_the_gpus_of_its_own_machine() {
    let sb = Sandbox::new();
    // Created on a machine with four GPUs, in groups of two...
    let out = run_grouped(&sb, 4, 2);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // ...joined from one with a single GPU: no group of two fits there.
    let out = output_within(
        with_gpus(
            sb.tune(&["--db", "t.db", "worker", "--study", "groups", "--no-tui"]),
            1,
        ),
        PATIENCE,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("key `workers.gpus_per_trial`"), "{err}");
    assert!(
        err.contains("this machine shows 1 visible CUDA device(s)"),
        "{err}"
    );
    // `--devices` lists this machine's GPUs to group.
    let out = output_within(
        with_gpus(
            sb.tune(&[
                "--db",
                "t.db",
                "worker",
                "--study",
                "groups",
                "--devices",
                "cuda:0,cuda:1,cuda:2",
                "--no-tui",
            ]),
            3,
        ),
        PATIENCE,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("would leave cuda:2 unused"), "{err}");
    // The list is the flag's, not the stored file's: the refusal says so first.
    assert!(
        err.contains("--devices cuda:0,cuda:1,cuda:2 (this machine's `[workers]`"),
        "{err}"
    );
}
