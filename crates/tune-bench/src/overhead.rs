//! The orchestrator-overhead benchmark (`tune bench overhead`): what tune itself costs, with
//! trials that do nothing.
//!
//! 1. Throughput: a study of `echo` trials (each reports one value and exits) run by the real
//!    binary, against the baseline of spawning the same command as many times with the same
//!    concurrency straight from Rust, in the same run.
//! 2. Dispatch latency: from a slot's trial being recorded finished to the next trial on that
//!    slot being recorded started (from the database's own timestamps).
//! 3. Query latency: `tune trials` and `tune best` on a study of 10 000 trials, against the
//!    baseline of starting the binary at all (`tune --version`).

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use crate::cli::OverheadArgs;
use tune::space::{ParamValue, Params, Space};
use tune::storage::{ClaimRequest, NewStudy, SqliteStorage, Storage};
use tune::trial::{Direction, Ran, Report, TrialStatus};

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

pub fn run(a: &OverheadArgs) -> anyhow::Result<ExitCode> {
    let exe = crate::process::tune_exe()?;
    let dir = tempfile::Builder::new().prefix("tune-bench-").tempdir()?;
    println!(
        "tune bench overhead: {} trials on {} slots; queries on {} trials",
        a.trials, a.workers, a.query_trials
    );

    // --- 1. throughput, baseline first ---
    let t0 = Instant::now();
    let per_worker = a.trials.div_ceil(a.workers as u64);
    std::thread::scope(|s| {
        for _ in 0..a.workers {
            s.spawn(|| {
                for i in 0..per_worker {
                    let _ = Command::new("sh")
                        .arg("-c")
                        .arg(format!(
                            "printf 'tune: {{\"v\": {i}, \"t\": %s}}\\n' $(date +%s.%N)"
                        ))
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .output();
                }
            });
        }
    });
    let raw_s = t0.elapsed().as_secs_f64();
    let raw_rate = (per_worker * a.workers as u64) as f64 / raw_s;

    let study = dir.path().join("noop.toml");
    std::fs::write(
        &study,
        format!(
            r#"[study]
name = "noop"
metric = "v"
trials = {}
seed = 1
storage = "bench.db"

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}

[sampler]
kind = "random"

[workers]
count = {}
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "-c", '''printf 'tune: {{"v": %s, "t": %s}}\n' {{x}} $(date +%s.%N)''']
"#,
            a.trials, a.workers
        ),
    )?;
    let t0 = Instant::now();
    let st = crate::process::ends_with_bench(&mut Command::new(&exe))
        .args(["run", "--no-tui"])
        .arg(&study)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()?;
    let tune_s = t0.elapsed().as_secs_f64();
    anyhow::ensure!(st.success(), "the benchmark study failed: {st}");
    let tune_rate = a.trials as f64 / tune_s;

    // --- 2. dispatch latency from the stored timestamps ---
    let storage = SqliteStorage::open_read_only(&dir.path().join("bench.db"))?;
    // From a trial's end being recorded to the next trial's process running on the same slot
    // (its own clock reading, reported as `t`).
    let mut gaps = Vec::new();
    {
        let conn = storage.connection();
        let mut stmt = conn.prepare(
            "SELECT x.slot, t.datetime_complete,
                    (SELECT json_extract(metrics_json, '$.t') FROM tune_reports r WHERE r.trial_id = t.trial_id)
             FROM trials t JOIN tune_trials x USING (trial_id)
             ORDER BY x.slot, t.datetime_start",
        )?;
        let rows: Vec<(i64, String, Option<f64>)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?;
        for w in rows.windows(2) {
            if w[0].0 == w[1].0
                && let (Some(end), Some(t)) = (
                    chrono::NaiveDateTime::parse_from_str(&w[0].1, tune::storage::DATETIME_FORMAT)
                        .ok(),
                    w[1].2,
                )
            {
                let end_s = end.and_utc().timestamp_micros() as f64 / 1e6;
                gaps.push((t - end_s) * 1000.0);
            }
        }
    }
    let gap_med = median(&mut gaps);
    let gap_p95 = quantile(&mut gaps, 0.95);

    // --- 3. queries on a large study ---
    let qdb = dir.path().join("q.db");
    fill_query_study(&qdb, a.query_trials)?;
    let time_cmd = |args: &[&str]| -> anyhow::Result<f64> {
        let mut v = Vec::new();
        for _ in 0..a.repeat {
            let t = Instant::now();
            let st = Command::new(&exe)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
            v.push(t.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(st.success(), "`tune {}` failed: {st}", args.join(" "));
        }
        Ok(median(&mut v))
    };
    let q = qdb.display().to_string();
    let base_ms = time_cmd(&["--version"])?;
    let trials_table = time_cmd(&["trials", "--db", &q, "--study", "big"])?;
    let trials_json = time_cmd(&["trials", "--db", &q, "--study", "big", "--format", "json"])?;
    let trials_top = time_cmd(&[
        "trials", "--db", &q, "--study", "big", "--sort", "value", "--limit", "10",
    ])?;
    let best_ms = time_cmd(&["best", "--db", &q, "--study", "big"])?;

    println!();
    println!("| measure | tune | baseline | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| throughput, trials/s ({} trials, {} slots) | {:.1} | {:.1} (raw spawn of the same command) | {:.2} |",
        a.trials,
        a.workers,
        tune_rate,
        raw_rate,
        tune_rate / raw_rate
    );
    println!("| slot free → next trial started, median ms | {gap_med:.2} | – | – |");
    println!("| slot free → next trial started, p95 ms | {gap_p95:.2} | – | – |");
    for (name, ms) in [
        ("`tune trials` (table), ms", trials_table),
        ("`tune trials --format json`, ms", trials_json),
        ("`tune trials --sort value --limit 10`, ms", trials_top),
        ("`tune best`, ms", best_ms),
    ] {
        println!(
            "| {name} on {} trials | {ms:.1} | {base_ms:.1} (`tune --version`) | {:.1} |",
            a.query_trials,
            ms / base_ms
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A study of `n` finished trials with params and three reports each.
pub(crate) fn fill_query_study(path: &Path, n: u64) -> anyhow::Result<()> {
    let mut s = SqliteStorage::open(path)?;
    let space_t: toml::Table = toml::from_str(
        r#"lr = { type = "float", low = 1e-5, high = 1.0, log = true }
           optimizer = { type = "categorical", choices = ["sgd", "adam", "adamw"] }
           batch_size = { type = "int", low = 16, high = 512, log = true }"#,
    )?;
    let space = Space::from_toml(&space_t)?;
    let row = s.create_or_load_study(&NewStudy {
        others: &[],
        name: "big",
        direction: Direction::Minimize,
        metric: "val_loss",
        file: None,
        source: None,
    })?;
    let w = s.register_worker(&row, &["cpu".into()])?;
    for i in 0..n {
        let mut p = Params::new();
        p.insert(
            "lr".into(),
            ParamValue::Float(1e-4 * (1.0 + (i % 97) as f64)),
        );
        p.insert(
            "optimizer".into(),
            ParamValue::Str(["sgd", "adam", "adamw"][(i % 3) as usize].into()),
        );
        p.insert("batch_size".into(), ParamValue::Int(16 + (i % 400) as i64));
        // Queued with its params, then claimed: a claim of a queued trial proposes nothing, so
        // filling the study stays linear in its size.
        s.enqueue(&row, &space, &p)?;
        let req = ClaimRequest {
            worker: w,
            budget: None,
            slot: 0,
            device: "cpu",
            space: &space,
        };
        let Some(trial) = s.claim(&row, &req, &mut |_, _| p.clone())? else {
            anyhow::bail!("expected a trial");
        };
        let trial_id = trial.id;
        let v = 1.0 / (1.0 + (i % 1013) as f64);
        for step in 0..3u64 {
            let mut m = std::collections::BTreeMap::new();
            m.insert("val_loss".to_string(), v * (3 - step) as f64);
            m.insert("train_loss".to_string(), v);
            s.add_report(
                trial_id,
                step,
                &Report { step, metrics: m },
                false,
                "val_loss",
            )?;
        }
        s.finish_trial(
            trial_id,
            &TrialStatus::Complete {
                others: Vec::new(),
                value: v,
                ran: Ran::default(),
            },
            &[],
        )?;
    }
    Ok(())
}
