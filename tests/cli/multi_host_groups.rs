//! GPU groups (`[workers] gpus_per_trial = 2`) across machines: network-namespace machines as
//! in `multi_host.rs` (PostgreSQL on one, `tune run` on one, `tune worker` on two), each with a
//! stand-in GPU count of its own (`TUNE_TEST_CUDA_DEVICES`). Each machine groups its own GPUs:
//! machine A with four makes two slots (cuda:0,cuda:1 and cuda:2,cuda:3); machine B with three
//! makes one and says that cuda:2 sits idle. Every command trial records where it ran and what
//! it was given; each must match the placement stored for it (`tune show`: host and device),
//! no GPU of a machine may run two trials at once, and the budget is met exactly. A machine
//! whose `--devices` cannot make the groups is refused before it claims anything, naming the
//! flag.
//!
//! Needs root (namespaces) and PostgreSQL 15; says "skipped:" without them, unless
//! `TUNE_REQUIRE_PG=1` makes that a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Sandbox, assert_numbers_once, counted, output_within, text, tune_bin};
use crate::multi_host::{Net, Proc, count_in, machines_with_a_database, poll};

const DB: &str = "groups";
const TRIALS: usize = 16;
/// The whole test never takes this long; past it the test fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(60);
/// The machines: (namespace index, host name, its directory, stand-in GPU count). Index 0 is
/// PostgreSQL's.
const RUN: (usize, &str, &str, usize) = (1, "mr", "r", 2);
const A: (usize, &str, &str, usize) = (2, "ma", "a", 4);
const B: (usize, &str, &str, usize) = (3, "mb", "b", 3);

fn study_file() -> String {
    format!(
        r#"[study]
name = "{DB}"
metric = "loss"
trials = {TRIALS}
seed = 3

[sampler]
kind = "random"

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}

[workers]
devices = "auto"
gpus_per_trial = 2

[trial]
kind = "command"
command = ["sh", "trial.sh", "{{devices}}", "{{gpus}}", "{{x}}"]
"#
    )
}

/// Notes its host, its GPUs as the environment and the placeholders give them, and when it
/// ran (this process's own start and end), then reports `loss = x`.
const TRIAL: &str = r#"start=$(date +%s.%N)
sleep 0.6
printf '%s|%s|%s|%s|%s|%s|%s\n' "$(uname -n)" "$CUDA_VISIBLE_DEVICES" "$TUNE_NPROC" "$1" "$2" "$start" "$(date +%s.%N)" > "env-$TUNE_TRIAL.txt"
echo "tune: {\"loss\": $3}"
"#;

/// `tune` on machine `(i, host)` as if it had `gpus` GPUs, in `dir`.
fn tune_on(net: &Net, (i, host): (usize, &str), gpus: usize, dir: &Path) -> Command {
    let mut c = net.command(i, host, &tune_bin());
    c.env("TUNE_TEST_CUDA_DEVICES", gpus.to_string())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .current_dir(dir);
    c
}

/// One trial as its command saw itself (a line of `env-N.txt`).
#[derive(Debug)]
struct Seen {
    host: String,
    visible: String,
    nproc: String,
    devices: String,
    gpus: String,
    start: f64,
    end: f64,
}

fn seen(path: &Path) -> Option<Seen> {
    let line = std::fs::read_to_string(path).ok()?;
    let f: Vec<&str> = line.trim_end().split('|').collect();
    let [host, visible, nproc, devices, gpus, start, end] = f[..] else {
        panic!("{}: {line:?}", path.display());
    };
    let time = |s: &str| {
        s.parse::<f64>()
            .unwrap_or_else(|_| panic!("a time in {line:?}"))
    };
    Some(Seen {
        host: host.into(),
        visible: visible.into(),
        nproc: nproc.into(),
        devices: devices.into(),
        gpus: gpus.into(),
        start: time(start),
        end: time(end),
    })
}

/// When one GPU of a machine was busy: (start, end, trial) of each trial that ran on it, its
/// own times in seconds (every machine here reads one clock).
type Busy = Vec<(f64, f64, u64)>;

/// `tune worker --devices` lists that cannot make groups of two on a machine with `gpus` GPUs:
/// each is refused (status 2) naming the flag, saying `why`.
const REFUSALS: [(&str, usize, &str); 2] = [
    // GPUs the machine lacks: named before any grouping.
    (
        "cuda:0,cuda:1,cuda:2",
        1,
        "--devices: \"cuda:1\" (and cuda:2) is not on this machine, which has 1 visible CUDA device (cuda:0)",
    ),
    // GPUs it has, but not a multiple of the group size.
    (
        "cuda:0,cuda:1,cuda:2",
        3,
        "would leave cuda:2 unused; list a multiple of 2 GPUs",
    ),
];

#[test]
fn gpu_groups_on_three_machines_each_group_their_own_gpus_and_trials_see_their_group() {
    let t0 = Instant::now();
    let Some((net, server)) = machines_with_a_database(&["db", "r", "a", "b"]) else {
        return;
    };
    let url = server.create_db(DB);
    let sb = Sandbox::new();
    for m in [RUN, A, B] {
        sb.write(&format!("{}/trial.sh", m.2), TRIAL);
    }
    sb.write("r/study.toml", &study_file());
    let dir_of: BTreeMap<&str, PathBuf> = [RUN, A, B]
        .iter()
        .map(|&(_, host, dir, _)| (host, sb.join(dir)))
        .collect();
    let deadline = t0 + LIMIT;

    // The study is stored and run by `tune run` on machine R (two GPUs: one group); the
    // workers join once it is there, so that neither waits out a look for it.
    let mut run = tune_on(&net, (RUN.0, RUN.1), RUN.3, &dir_of[RUN.1]);
    run.args(["run", "study.toml", "--db", &url, "--no-tui"]);
    let mut run = Proc::spawn(run, sb.path(), RUN.1);
    poll("the study stored", deadline, &mut [&mut run], || {
        count_in(&server, DB, "SELECT count(*) FROM studies") == 1
    });
    // Machine A names its devices `auto` on the command line; B takes the stored "auto".
    let mut a = tune_on(&net, (A.0, A.1), A.3, &dir_of[A.1]);
    a.args([
        "worker",
        "--db",
        &url,
        "--study",
        DB,
        "--devices",
        "auto",
        "--wait",
        "30s",
        "--no-tui",
    ]);
    let mut a = Proc::spawn(a, sb.path(), A.1);
    let mut b = tune_on(&net, (B.0, B.1), B.3, &dir_of[B.1]);
    b.args([
        "worker", "--db", &url, "--study", DB, "--wait", "30s", "--no-tui",
    ]);
    let mut b = Proc::spawn(b, sb.path(), B.1);

    // While the study runs, a machine C (host name `mc`, on B's network) whose `--devices`
    // cannot make groups of two is refused before it claims a trial.
    let refused_dir = sb.join("c");
    std::fs::create_dir_all(&refused_dir).expect("machine C's directory");
    for (devices, gpus, why) in REFUSALS {
        let mut c = tune_on(&net, (B.0, "mc"), gpus, &refused_dir);
        c.args([
            "worker",
            "--db",
            &url,
            "--study",
            DB,
            "--devices",
            devices,
            "--no-tui",
        ]);
        let out = output_within(c, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(err.contains("--devices"), "names the flag: {err}");
        assert!(err.contains(why), "{devices} on {gpus} GPU(s): {err}");
    }

    let r_out = run.wait(deadline.saturating_duration_since(Instant::now()));
    assert!(r_out.status.success(), "tune run: {}", text(&r_out));
    let a_out = a.wait(deadline.saturating_duration_since(Instant::now()));
    assert!(a_out.status.success(), "machine A: {}", text(&a_out));
    let b_out = b.wait(deadline.saturating_duration_since(Instant::now()));
    assert!(b_out.status.success(), "machine B: {}", text(&b_out));

    // What each machine made of its GPUs, in its own words.
    let a_text = text(&a_out);
    assert!(
        a_text.contains("with 2 slot(s) on cuda:0,cuda:1, cuda:2,cuda:3"),
        "machine A: {a_text}"
    );
    assert!(!a_text.contains("sit idle"), "machine A: {a_text}");
    let b_text = text(&b_out);
    assert!(
        b_text.contains("with 1 slot(s) on cuda:0,cuda:1"),
        "machine B: {b_text}"
    );
    assert!(
        b_text.contains(
            "gpus_per_trial = 2: 3 visible GPUs make 1 group(s) of 2; 1 GPU(s) sit idle (cuda:2)"
        ),
        "machine B: {b_text}"
    );
    assert_eq!(
        count_in(
            &server,
            DB,
            "SELECT count(*) FROM tune_workers WHERE host = 'mc'"
        ),
        0,
        "the refused machine never joined"
    );

    // The budget, exactly, read from machine R.
    let tune_json = |args: &[&str]| {
        let mut q = net.command(RUN.0, RUN.1, &tune_bin());
        q.args(args)
            .args(["--db", &url, "--study", DB, "--format", "json"]);
        let out = output_within(q, Duration::from_secs(30));
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        serde_json::from_slice::<Value>(&out.stdout).expect("JSON")
    };
    let trials = tune_json(&["trials", "--state", "all"]);
    let trials = trials.as_array().expect("a list").clone();
    assert_numbers_once(&trials);
    assert_eq!(counted(&trials), TRIALS, "the budget, exactly: {trials:#?}");
    assert_eq!(
        trials.iter().filter(|t| t["state"] == "complete").count(),
        trials.len(),
        "every trial complete, none failed or left running: {trials:#?}"
    );

    // Each trial saw the group its stored placement names, on that machine.
    let groups_of: BTreeMap<&str, BTreeSet<&str>> = [
        (RUN.1, BTreeSet::from(["cuda:0,cuda:1"])),
        (A.1, BTreeSet::from(["cuda:0,cuda:1", "cuda:2,cuda:3"])),
        (B.1, BTreeSet::from(["cuda:0,cuda:1"])),
    ]
    .into();
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut per_host: BTreeMap<String, usize> = BTreeMap::new();
    let mut on_gpu: BTreeMap<(String, usize), Busy> = BTreeMap::new();
    for t in &trials {
        let n = t["number"].as_u64().expect("a number");
        let shown = tune_json(&["show", &n.to_string()]);
        let host = shown["host"].as_str().expect("a host");
        let device = shown["device"].as_str().expect("a device");
        assert!(
            groups_of.get(host).is_some_and(|g| g.contains(device)),
            "trial {n} placed on {device} of {host}, a group that machine has: {shown:#}"
        );
        let file = format!("env-{n}.txt");
        let s = seen(&dir_of[host].join(&file))
            .unwrap_or_else(|| panic!("trial {n} ran in {host}'s directory"));
        for (other, dir) in &dir_of {
            assert!(
                *other == host || !dir.join(&file).exists(),
                "trial {n} ran once, on {host} only (also on {other})"
            );
        }
        let gpus: Vec<usize> = device
            .split(',')
            .map(|d| {
                d.strip_prefix("cuda:")
                    .and_then(|i| i.parse().ok())
                    .expect("cuda:N")
            })
            .collect();
        let indices = gpus
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(s.host, host, "trial {n}'s host: {s:?}");
        assert_eq!(
            s.visible, indices,
            "trial {n}'s CUDA_VISIBLE_DEVICES: {s:?}"
        );
        assert_eq!(s.nproc, "2", "trial {n}'s TUNE_NPROC: {s:?}");
        assert_eq!(s.devices, device, "trial {n}'s {{devices}}: {s:?}");
        assert_eq!(s.gpus, indices, "trial {n}'s {{gpus}}: {s:?}");
        let x = shown["params"]["x"].as_f64().expect("x");
        let value = shown["value"].as_f64().expect("a value");
        assert!(
            (value - x).abs() < 1e-9,
            "trial {n} reported its x: {shown:#}"
        );
        used.entry(host.into()).or_default().insert(device.into());
        *per_host.entry(host.into()).or_default() += 1;
        for g in gpus {
            on_gpu
                .entry((host.into(), g))
                .or_default()
                .push((s.start, s.end, n));
        }
    }
    assert_eq!(
        used[A.1],
        BTreeSet::from(["cuda:0,cuda:1".to_string(), "cuda:2,cuda:3".to_string()]),
        "machine A ran trials on both its groups: {used:?}"
    );
    assert!(used.contains_key(B.1), "machine B ran trials: {used:?}");

    // No GPU of a machine ran two trials at once.
    for ((host, gpu), runs) in &mut on_gpu {
        runs.sort_by(|p, q| p.0.total_cmp(&q.0));
        for w in runs.windows(2) {
            assert!(
                w[1].0 >= w[0].1,
                "trials {} and {} overlapped on cuda:{gpu} of {host}: {runs:?}",
                w[0].2,
                w[1].2
            );
        }
    }
    eprintln!(
        "multi-host groups: {} trials ({per_host:?}) in {:.1} s",
        trials.len(),
        t0.elapsed().as_secs_f64()
    );
    drop(server);
    drop(net);
}
