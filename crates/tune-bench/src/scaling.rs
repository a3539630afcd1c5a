//! The growth benchmark (`tune bench scaling`, issue 29 item 15): how the cost of work whose
//! input a user controls grows with that input. Each case runs at a size `n` and at `10 n` in
//! the same run and prints the ratio of the per-item costs: about 1 is linear, about 10 is
//! quadratic, about 0.1 is a cost that does not grow at all.
//!
//! 1. Reports of one trial absorbed by the engine (`tune::engine::Engine`), with no pruner,
//!    ASHA and the median rule, on the in-memory backend and on a SQLite file.
//! 2. The check of a categorical parameter with many choices (`Space::from_toml`).
//! 3. `tune discard`'s selection of a range (the command's own function, on a SQLite study): a
//!    range as wide as the study against `0-99999999999`. Both are refused at the first number
//!    past the study's last trial, so both do the same work when the range is kept a range.
//! 4. The stored log tail of a failed trial (`trial::last_bytes` to `LOG_TAIL_BYTES`) of one
//!    line of 1 MB and of 10 MB.
//!
//! Only the work itself is timed: building the input (the engine and its first trial, the
//! TOML table, the study, the long line) is not.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::cli::ScalingArgs;
use tune::engine::{Decision, Engine, EngineSpec};
use tune::pruner::{AshaConfig, MedianConfig, PrunerConfig};
use tune::sampler::SamplerKind;
use tune::space::Space;
use tune::storage::{MemoryStorage, SqliteStorage, Storage, StorageUrl};
use tune::trial::{Direction, LOG_TAIL_BYTES, Report, last_bytes};

/// One row: a case measured at `n` and at `10 n` items.
struct Row {
    what: String,
    unit: &'static str,
    n: u64,
    at_n: Duration,
    at_10n: Duration,
}

impl Row {
    /// Per-item cost at `10 n` over per-item cost at `n`.
    fn ratio(&self) -> f64 {
        (self.at_10n.as_secs_f64() / (10 * self.n) as f64)
            / (self.at_n.as_secs_f64() / self.n as f64)
    }
}

/// The sizes of each case at `n` (the second measurement is at `10 n`).
struct Sizes {
    reports: u64,
    choices: u64,
    discard_trials: u64,
    line_bytes: u64,
}

impl Sizes {
    fn of(quick: bool) -> Sizes {
        if quick {
            Sizes {
                reports: 200,
                choices: 2_000,
                discard_trials: 20,
                line_bytes: 100_000,
            }
        } else {
            Sizes {
                reports: 2_000,
                choices: 20_000,
                discard_trials: 300,
                line_bytes: 1_000_000,
            }
        }
    }
}

pub fn run(a: &ScalingArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(a.repeat >= 1, "--repeat must be at least 1");
    let sizes = Sizes::of(a.quick);
    let dir = tempfile::Builder::new().prefix("tune-bench-").tempdir()?;
    println!(
        "tune bench scaling: each case at n and 10 n, median of {} run(s); ratio = per-item cost at 10 n ÷ per-item cost at n (1: linear, 10: quadratic, 0.1: constant)",
        a.repeat
    );
    let mut rows = Vec::new();
    let pruners = [
        ("no pruner", PrunerConfig::None),
        ("ASHA", PrunerConfig::Asha(AshaConfig::default())),
        ("median", PrunerConfig::Median(MedianConfig::default())),
    ];
    for sqlite in [false, true] {
        for (name, pruner) in &pruners {
            let backend = if sqlite { "SQLite file" } else { "memory" };
            let mut runs = 0u32;
            let mut at = |n: u64| {
                runs += 1;
                median_of(a.repeat, || {
                    let path = dir.path().join(format!("reports-{runs}.db"));
                    let _ = std::fs::remove_file(&path);
                    let storage: Box<dyn Storage> = if sqlite {
                        Box::new(SqliteStorage::open(&path)?)
                    } else {
                        Box::new(MemoryStorage::new())
                    };
                    absorb_reports(storage, pruner, n)
                })
            };
            let (at_n, at_10n) = (at(sizes.reports)?, at(10 * sizes.reports)?);
            rows.push(Row {
                what: format!("reports of one trial, {name}, {backend}"),
                unit: "reports",
                n: sizes.reports,
                at_n,
                at_10n,
            });
        }
    }
    rows.push(Row {
        what: "categorical check (`Space::from_toml`)".into(),
        unit: "choices",
        n: sizes.choices,
        at_n: check_categorical(a.repeat, sizes.choices)?,
        at_10n: check_categorical(a.repeat, 10 * sizes.choices)?,
    });
    rows.push(Row {
        what: "stored log tail of one line (`last_bytes`)".into(),
        unit: "bytes",
        n: sizes.line_bytes,
        at_n: log_tail(a.repeat, sizes.line_bytes),
        at_10n: log_tail(a.repeat, 10 * sizes.line_bytes),
    });
    let (narrow, absurd) = discard_ranges(dir.path(), a.repeat, sizes.discard_trials)?;

    println!();
    println!("| case | n | time at n | time at 10 n | ratio |");
    println!("|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} {} | {} | {} | {:.2} |",
            r.what,
            r.n,
            r.unit,
            show(r.at_n),
            show(r.at_10n),
            r.ratio()
        );
    }
    println!();
    println!("| case | trials | range as wide as the study | `0-99999999999` | ratio |");
    println!("|---|---|---|---|---|");
    println!(
        "| `tune discard` range selection | {} | {} | {} | {:.2} |",
        sizes.discard_trials,
        show(narrow),
        show(absurd),
        absurd.as_secs_f64() / narrow.as_secs_f64()
    );
    println!();
    println!(
        "The median rule reads the judged trial's whole curve on every report it judges, so one trial's reports cost quadratic time in its length with it (not fixed yet); ASHA and Hyperband walk back only to the last rung."
    );
    Ok(ExitCode::SUCCESS)
}

/// Milliseconds with three significant figures, or microseconds below one.
fn show(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 1.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.1} µs", ms * 1e3)
    }
}

fn median_of(
    repeat: usize,
    mut once: impl FnMut() -> anyhow::Result<Duration>,
) -> anyhow::Result<Duration> {
    let mut v = (0..repeat).map(|_| once()).collect::<Result<Vec<_>, _>>()?;
    v.sort();
    Ok(v[v.len() / 2])
}

/// The time the engine takes to absorb `n` reports (steps 1 to `n`, a falling loss) of one
/// trial, the study's only one.
fn absorb_reports(
    storage: Box<dyn Storage>,
    pruner: &PrunerConfig,
    n: u64,
) -> anyhow::Result<Duration> {
    let space_t: toml::Table = toml::from_str(r#"x = { type = "float", low = 0.0, high = 1.0 }"#)?;
    let space = Space::from_toml(&space_t)?;
    let spec = EngineSpec {
        others: &[],
        name: "scaling",
        metric: "loss",
        direction: Direction::Minimize,
        space: &space,
        seed: 1,
        budget: None,
        heartbeat_grace: Duration::from_secs(60),
        pruner,
        file: None,
        source: None,
        slots: &["cpu".to_string()],
        enqueue: &[],
    };
    let mut engine = Engine::open(
        storage,
        &spec,
        tune::sampler::build(SamplerKind::Random),
        tune::pruner::build(pruner),
    )?;
    let trial = engine.ask(0, "cpu")?.context("the engine gave no trial")?;
    let t0 = Instant::now();
    for step in 1..=n {
        let report = Report {
            step,
            metrics: BTreeMap::from([("loss".to_string(), 1.0 / step as f64)]),
        };
        // A pruned trial's later reports are not judged: the timing would stop measuring
        // the pruner. The study's only trial has no rival, so none may prune it.
        anyhow::ensure!(
            engine.report(trial.id, report)? == Decision::Continue,
            "the study's only trial was pruned at step {step}"
        );
    }
    Ok(t0.elapsed())
}

/// The time `Space::from_toml` takes on one categorical of `n` distinct string choices.
fn check_categorical(repeat: usize, n: u64) -> anyhow::Result<Duration> {
    let choices: Vec<toml::Value> = (0..n).map(|i| format!("c{i}").into()).collect();
    let mut param = toml::Table::new();
    param.insert("type".into(), "categorical".into());
    param.insert("choices".into(), toml::Value::Array(choices));
    let mut table = toml::Table::new();
    table.insert("c".into(), toml::Value::Table(param));
    median_of(repeat, || {
        let t0 = Instant::now();
        let space = Space::from_toml(&table)?;
        let took = t0.elapsed();
        drop(space);
        Ok(took)
    })
}

/// The time to keep the stored tail of one line of `n` bytes: the line's end, copied.
fn log_tail(repeat: usize, n: u64) -> Duration {
    let line = "é".repeat(n as usize / 2);
    // One call is microseconds: time a batch, and report one call.
    const BATCH: u32 = 100;
    let mut v: Vec<Duration> = (0..repeat)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..BATCH {
                std::hint::black_box(
                    last_bytes(std::hint::black_box(&line), LOG_TAIL_BYTES).to_owned(),
                );
            }
            t0.elapsed() / BATCH
        })
        .collect();
    v.sort();
    v[v.len() / 2]
}

/// `tune discard`'s time on a SQLite study of `trials` finished trials, for a range as wide as
/// the study plus one (`0-trials`) and for `0-99999999999`. Both are refused at trial number
/// `trials`, the first that does not exist, having changed nothing.
fn discard_ranges(dir: &Path, repeat: usize, trials: u64) -> anyhow::Result<(Duration, Duration)> {
    let db = dir.join("discard.db");
    crate::overhead::fill_query_study(&db, trials)?;
    let url = StorageUrl::parse(&db.display().to_string(), dir)?;
    let time = |range: String| {
        median_of(repeat, || {
            let args = tune::cli::DiscardArgs {
                args: vec![range.clone()],
                name: Some("big".into()),
                state: None,
                restore: false,
            };
            let t0 = Instant::now();
            let out = tune::commands::discard::discard(&args, Some(&url));
            let took = t0.elapsed();
            match out {
                Err(e) if e.to_string().contains(&format!("has no trial {trials}")) => Ok(took),
                Err(e) => Err(e.context(format!("`tune discard {range}`"))),
                Ok(_) => anyhow::bail!("`tune discard {range}` was not refused"),
            }
        })
    };
    Ok((time(format!("0-{trials}"))?, time("0-99999999999".into())?))
}
