//! Per-trial GPU telemetry as the query commands show it: `tune show`, the trials table, CSV and
//! JSON, the Optuna user attributes and `tune copy`, on a database whose trials hold it, and
//! nothing of it (no key, no column, no attribute) where no GPU was sampled.
//!
//! This machine has no GPU: the study runs on the CPU, and then the telemetry of two more
//! trials, one on each memory scope, is written through the library, as the scheduler would
//! have from NVML's samples.

use serde_json::Value;

use crate::common::{Sandbox, sh_study};
use tune::storage::{ClaimRequest, SqliteStorage, Storage};
use tune::trial::{GpuMemScope, GpuTelemetry, Ran, Report, TrialState, TrialStatus};

fn json(out: std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const GPU_KEYS: [&str; 5] = [
    "gpu_peak_mem_mb",
    "gpu_mem_scope",
    "gpu_mean_sm_pct",
    "gpu_mean_mem_bw_pct",
    "gpu_samples",
];

/// The Optuna user attributes of trial `number` whose key starts with `gpu_`.
fn gpu_attributes(sb: &Sandbox, db: &str, number: u64) -> Vec<(String, String)> {
    let c = sb.db(db);
    let mut st = c
        .prepare(
            "SELECT a.key, a.value_json FROM trial_user_attributes a
             JOIN trials t ON t.trial_id = a.trial_id
             WHERE t.number = ?1 AND a.key LIKE 'gpu\\_%' ESCAPE '\\' ORDER BY a.key",
        )
        .expect("prepare");
    st.query_map([number as i64], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

/// Ends a new trial of study `tele` on `cuda:0`, as a run whose GPU was sampled would: a final
/// report (with the trainer's allocator peak) and the telemetry.
fn finish_sampled_trial(sb: &Sandbox, gpu: GpuTelemetry, loss: f64) {
    let study = tune::spec::load(&sb.join("s.toml"), &tune::spec::Overrides::default())
        .expect("the study file");
    let mut s = SqliteStorage::open(&sb.join("tune.db")).expect("the database");
    let row = s.study("tele").expect("the study");
    let w = s
        .register_worker(&row, &["cuda:0".to_string()])
        .expect("a worker");
    let params = s.trials(&row, None).expect("trials")[0].params.clone();
    let req = ClaimRequest {
        worker: w,
        budget: None,
        slot: 0,
        device: "cuda:0",
        space: &study.space,
    };
    let t = s
        .claim(&row, &req, &mut |_, _| params.clone())
        .expect("claim")
        .expect("a trial");
    let metrics = [
        ("loss".to_string(), loss),
        ("peak_mem_mb".to_string(), 1200.0),
    ];
    let report = Report {
        step: 3,
        metrics: metrics.into_iter().collect(),
    };
    s.add_report(t.id, 0, &report, true, "loss")
        .expect("report");
    let status =
        TrialStatus::ended(TrialState::Complete, Some(loss), "", Ran::default()).with_ran(Ran {
            gpu: Some(gpu),
            ..Ran::default()
        });
    s.finish_trial(t.id, &status, &[]).expect("finish");
}

#[test]
fn gpu_telemetry_shows_in_show_trials_csv_json_and_optuna_attributes_and_only_where_sampled() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("tele", 2, 1, "", &["{x}"]));
    sb.write(
        "trial.sh",
        "echo \"tune: {\\\"step\\\": 0, \\\"loss\\\": $1}\"\n",
    );
    sb.ok(&["run", "s.toml"]);

    // A study that ran without NVML (here: on the CPU) has no telemetry anywhere.
    for t in sb.trials("s.toml") {
        assert!(t.get("gpu").is_none(), "no `gpu` key: {t}");
    }
    let csv = stdout(&sb.ok(&["trials", "s.toml", "--format", "csv"]));
    assert!(!csv.contains("gpu_"), "no GPU columns:\n{csv}");
    let table = stdout(&sb.ok(&["trials", "s.toml"]));
    assert!(!table.contains("gpu"), "no GPU columns:\n{table}");
    let show = stdout(&sb.ok(&["show", "0", "s.toml"]));
    assert!(!show.contains("gpu"), "{show}");
    assert!(gpu_attributes(&sb, "tune.db", 0).is_empty());
    let view: Option<f64> = sb
        .db("tune.db")
        .query_row(
            "SELECT gpu_peak_mem_mb FROM tune_trials_view WHERE number = 0",
            [],
            |r| r.get(0),
        )
        .expect("the view has the column");
    assert_eq!(view, None);

    let own = GpuTelemetry {
        peak_mem_mb: 1536.0,
        mem_scope: GpuMemScope::Process,
        mean_sm_pct: 71.4,
        mean_mem_bw_pct: 33.6,
        samples: 12,
    };
    let device = GpuTelemetry {
        peak_mem_mb: 6348.8,
        mem_scope: GpuMemScope::Device,
        mean_sm_pct: 55.0,
        mean_mem_bw_pct: 20.0,
        samples: 4,
    };
    finish_sampled_trial(&sb, own, 0.5);
    finish_sampled_trial(&sb, device, 0.6);

    // JSON: a `gpu` object on the sampled trials only.
    let all = sb.trials("s.toml");
    assert_eq!(all.len(), 4);
    assert!(all[0].get("gpu").is_none(), "{}", all[0]);
    assert_eq!(
        all[2]["gpu"],
        serde_json::json!({"peak_mem_mb": 1536.0, "mem_scope": "process", "mean_sm_pct": 71.4,
                           "mean_mem_bw_pct": 33.6, "samples": 12})
    );
    assert_eq!(all[3]["gpu"]["mem_scope"], "device");
    let shown = json(sb.ok(&["show", "2", "s.toml", "--format", "json"]));
    assert_eq!(shown["gpu"], all[2]["gpu"]);
    assert_eq!(
        shown["metrics"]["peak_mem_mb"], 1200.0,
        "the allocator's own peak"
    );

    // CSV: the five columns, empty for a trial that was not sampled.
    let csv = stdout(&sb.ok(&["trials", "s.toml", "--format", "csv"]));
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let header: Vec<String> = rows
        .headers()
        .expect("a header")
        .iter()
        .map(str::to_string)
        .collect();
    let at: Vec<usize> = GPU_KEYS
        .iter()
        .map(|k| header.iter().position(|h| h == k).expect(k))
        .collect();
    let records: Vec<csv::StringRecord> = rows.records().map(|r| r.expect("a row")).collect();
    let cells =
        |i: usize| -> Vec<String> { at.iter().map(|&c| records[i][c].to_string()).collect() };
    assert_eq!(cells(0), ["", "", "", "", ""]);
    assert_eq!(cells(2), ["1536.0", "process", "71.4", "33.6", "12"]);
    assert_eq!(cells(3)[1], "device");

    // The table: GPU columns, a dash where there is nothing, the device scope said.
    let table = stdout(&sb.ok(&["trials", "s.toml"]));
    assert!(
        table.contains("gpu peak") && table.contains("gpu mem bw"),
        "{table}"
    );
    let line = |n: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| {n} ")))
            .unwrap_or_else(|| panic!("a row for trial {n}:\n{table}"))
            .to_string()
    };
    assert!(
        line("2").contains("1.5 GB") && line("2").contains("71%"),
        "{table}"
    );
    assert!(line("3").contains("6.2 GB (device)"), "{table}");
    assert!(!line("0").contains('%'), "{table}");

    // `tune show`: the driver's figures and the allocator's peak, each named.
    let show = stdout(&sb.ok(&["show", "2", "s.toml"]));
    assert!(
        show.contains("gpu: 71% SM, 34% memory bandwidth (means of 12 samples, NVML)"),
        "{show}"
    );
    assert!(
        show.contains("gpu memory peak: 1.5 GB (the trial's own processes, NVML)"),
        "{show}"
    );
    assert!(
        show.contains("allocator peak: 1.2 GB (metric `peak_mem_mb`"),
        "{show}"
    );
    let show = stdout(&sb.ok(&["show", "3", "s.toml"]));
    assert!(show.contains("6.2 GB (the whole GPU"), "{show}");

    // Optuna's user attributes mirror the telemetry.
    let attrs = gpu_attributes(&sb, "tune.db", 2);
    let expected: Vec<(String, String)> = [
        ("gpu_mean_mem_bw_pct", "33.6"),
        ("gpu_mean_sm_pct", "71.4"),
        ("gpu_mem_scope", "\"process\""),
        ("gpu_peak_mem_mb", "1536.0"),
        ("gpu_samples", "12"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(attrs, expected);

    // `tune copy` carries the telemetry, columns and attributes alike.
    sb.ok(&[
        "copy", "--from", "tune.db", "--to", "copy.db", "--study", "tele",
    ]);
    let copied = json(sb.ok(&[
        "trials", "--db", "copy.db", "--study", "tele", "--format", "json",
    ]));
    assert_eq!(copied[2]["gpu"], all[2]["gpu"]);
    assert_eq!(copied[3]["gpu"], all[3]["gpu"]);
    assert!(copied[0].get("gpu").is_none());
    assert_eq!(gpu_attributes(&sb, "copy.db", 2), expected);
}

#[test]
fn the_gpu_telemetry_check_refuses_at_once_with_status_2_on_a_machine_without_a_gpu() {
    // On a machine with an NVIDIA driver the script would run its study: not this test's work.
    if std::path::Path::new("/proc/driver/nvidia").exists() {
        return;
    }
    let sb = Sandbox::new();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu-telemetry-check.sh");
    let out = crate::common::output_within(
        {
            let mut c = std::process::Command::new("bash");
            c.arg(&script)
                .arg(sb.join("out"))
                .stdin(std::process::Stdio::null());
            c
        },
        crate::common::PATIENCE,
    );
    assert_eq!(out.status.code(), Some(2), "{}", crate::common::text(&out));
    assert!(
        crate::common::stderr(&out).contains("no NVIDIA GPU here"),
        "{}",
        crate::common::text(&out)
    );
    assert!(
        !sb.join("out").exists(),
        "nothing written before the refusal"
    );
}
