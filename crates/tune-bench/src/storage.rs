//! The storage benchmark (`tune bench storage`): one study shared by many processes on one
//! PostgreSQL server, against Optuna's `RDBStorage` on the same server with the same number of
//! processes, and tune on one SQLite file, all in the same run.
//!
//! Each tune process is what `tune worker` is to the database: one engine (ask, claim, finish
//! through the `Storage` trait, the sampler proposing under the study's lock) with 4 slots and
//! one connection. Trials do nothing (or sleep `--trial-ms`): what is measured is the
//! orchestration. Per process count: sustained trials/s, p50/p95 of the ask-and-claim latency,
//! the most connections the database held, and errors. With `--trial-ms 1000`, the overhead:
//! 1 − trials done / the trials 4 slots × P processes could run in the time.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::cli::{StorageArgs, StorageClientArgs};
use tune::engine::{Engine, EngineSpec, Finish};
use tune::pruner::PrunerConfig;
use tune::sampler::{SamplerKind, SamplerOptions, build_with};
use tune::space::Space;
use tune::storage::StorageUrl;
use tune::trial::Direction;

const STUDY: &str = "bench";
const SLOTS: usize = 4;

fn space() -> anyhow::Result<Space> {
    let t: toml::Table = toml::from_str(
        "x = { type = \"float\", low = -5.0, high = 5.0 }\n\
         y = { type = \"float\", low = 1e-4, high = 1.0, log = true }\n\
         k = { type = \"int\", low = 1, high = 8 }",
    )?;
    Ok(Space::from_toml(&t)?)
}

/// The client: one process of the study. Prints one JSON line.
pub fn client(a: &StorageClientArgs) -> anyhow::Result<ExitCode> {
    let url = StorageUrl::parse(&a.url, Path::new(""))?;
    let space = space()?;
    let pruner = PrunerConfig::None;
    let kind = SamplerKind::parse(&a.sampler)
        .ok_or_else(|| anyhow::anyhow!("unknown sampler {}", a.sampler))?;
    let slots = vec!["cpu".to_string(); SLOTS];
    let spec = EngineSpec {
        others: &[],
        name: STUDY,
        metric: "value",
        direction: Direction::Minimize,
        space: &space,
        seed: a.seed,
        budget: None,
        heartbeat_grace: Duration::from_secs(3600),
        pruner: &pruner,
        file: None,
        source: None,
        slots: &slots,
        enqueue: &[],
    };
    let storage = tune::storage::open(&url)?;
    let mut engine = Engine::open(
        storage,
        &spec,
        build_with(kind, &SamplerOptions::default()),
        tune::pruner::build(&pruner),
    )?;
    // Every process starts at the same instant, so that process start-up is not timed.
    let start = std::time::UNIX_EPOCH + Duration::from_secs_f64(a.start_at);
    if let Ok(wait) = start.duration_since(std::time::SystemTime::now()) {
        std::thread::sleep(wait);
    }
    let deadline = Instant::now() + Duration::from_secs_f64(a.seconds);
    let (mut trials, mut errors) = (0u64, 0u64);
    let mut ask_ms: Vec<f64> = Vec::new();
    let mut first_error: Option<String> = None;
    while Instant::now() < deadline {
        let mut running = Vec::with_capacity(SLOTS);
        for slot in 0..SLOTS {
            let t0 = Instant::now();
            match engine.ask(slot, "cpu") {
                Ok(Some(t)) => {
                    ask_ms.push(t0.elapsed().as_secs_f64() * 1e3);
                    running.push(t);
                }
                Ok(None) => {}
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        if a.trial_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.trial_ms));
        }
        for t in running {
            let v = t
                .params
                .values()
                .filter_map(|p| p.as_f64())
                .map(|x| x * x)
                .sum::<f64>();
            match engine.finish(t.id, Finish::Value(v), &[]) {
                Ok(_) => trials += 1,
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
    println!(
        "{}",
        serde_json::json!({
            "trials": trials,
            "errors": errors,
            "ask_ms": ask_ms,
            "first_error": first_error,
        })
    );
    Ok(ExitCode::SUCCESS)
}

struct Side {
    trials: u64,
    seconds: f64,
    errors: u64,
    p50: f64,
    p95: f64,
    connections: i64,
    first_error: Option<String>,
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Runs `procs` client processes on `url` for `seconds` and gathers their lines; `count`
/// samples the connections the database holds while they run.
fn run_tune(
    a: &StorageArgs,
    url: &str,
    procs: usize,
    count: &dyn Fn() -> Option<i64>,
) -> anyhow::Result<Side> {
    let me = std::env::current_exe()?;
    // The study and schema first, so the clients time the study, not its creation.
    {
        let u = StorageUrl::parse(url, Path::new(""))?;
        let mut s = tune::storage::open(&u)?;
        s.create_or_load_study(&tune::storage::NewStudy {
            others: &[],
            name: STUDY,
            direction: Direction::Minimize,
            metric: "value",
            file: None,
            source: None,
        })?;
    }
    let start_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64()
        + 1.0
        + procs as f64 * 0.05;
    let children: Vec<_> = (0..procs)
        .map(|i| {
            Command::new(&me)
                .args([
                    "storage-client",
                    "--url",
                    url,
                    "--seconds",
                    &a.seconds.to_string(),
                    "--trial-ms",
                    &a.trial_ms.to_string(),
                    "--sampler",
                    &a.sampler,
                    "--seed",
                    &i.to_string(),
                    "--start-at",
                    &start_at.to_string(),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut connections = 0;
    let sample_until = Instant::now()
        + Duration::from_secs_f64(start_at - now_secs() + a.seconds).min(Duration::from_secs(600));
    while Instant::now() < sample_until {
        if let Some(n) = count() {
            connections = connections.max(n);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let (mut trials, mut errors) = (0, 0);
    let mut asks = Vec::new();
    let mut first_error = None;
    for c in children {
        let out = c.wait_with_output()?;
        let line = String::from_utf8_lossy(&out.stdout);
        match serde_json::from_str::<serde_json::Value>(line.trim()) {
            Ok(v) => {
                trials += v["trials"].as_u64().unwrap_or(0);
                errors += v["errors"].as_u64().unwrap_or(0);
                if let Some(a) = v["ask_ms"].as_array() {
                    asks.extend(a.iter().filter_map(|x| x.as_f64()));
                }
                if first_error.is_none() {
                    first_error = v["first_error"].as_str().map(str::to_string);
                }
            }
            Err(_) => {
                errors += 1;
                first_error.get_or_insert_with(|| {
                    String::from_utf8_lossy(&out.stderr)
                        .chars()
                        .take(300)
                        .collect()
                });
            }
        }
    }
    Ok(Side {
        trials,
        seconds: a.seconds,
        errors,
        p50: quantile(&mut asks, 0.5),
        p95: quantile(&mut asks, 0.95),
        connections,
        first_error,
    })
}

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Optuna's `RDBStorage` with the same process count on the same server (its own database).
fn run_optuna(a: &StorageArgs, sqlalchemy_url: &str, procs: usize) -> anyhow::Result<Side> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/optuna_storage_bench.py");
    let out = Command::new(&a.python)
        .arg(&script)
        .args([
            "--storage",
            sqlalchemy_url,
            "--processes",
            &procs.to_string(),
            "--duration",
            &a.seconds.to_string(),
        ])
        .output()?;
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim().lines().last().unwrap_or(""))
        .map_err(|e| {
            anyhow::anyhow!(
                "Optuna's side printed no result ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
                    .chars()
                    .take(500)
                    .collect::<String>()
            )
        })?;
    let ms = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    Ok(Side {
        trials: v["trials"].as_u64().unwrap_or(0),
        seconds: v["elapsed_s"].as_f64().unwrap_or(a.seconds),
        errors: v["errors"].as_u64().unwrap_or(0),
        p50: ms("ask_p50_ms"),
        p95: ms("ask_p95_ms"),
        connections: v["max_connections"].as_i64().unwrap_or(-1),
        first_error: v["first_error"].as_str().map(str::to_string),
    })
}

fn row(who: &str, procs: usize, s: &Side, ideal: Option<f64>) {
    let rate = s.trials as f64 / s.seconds;
    let overhead = ideal.map_or(String::new(), |i| {
        format!("  overhead {:>5.1}%", 100.0 * (1.0 - s.trials as f64 / i))
    });
    println!(
        "{who:<18} {procs:>3} procs  {rate:>8.1} trials/s  ask p50 {:>7.2} ms  p95 {:>7.2} ms  conns {:>3}  errors {}{overhead}",
        s.p50, s.p95, s.connections, s.errors
    );
    if let Some(e) = &s.first_error
        && s.errors > 0
    {
        println!("{:<18}           first error: {e}", "");
    }
}

pub fn run(a: &StorageArgs) -> anyhow::Result<ExitCode> {
    let own;
    let (base, admin_port): (String, Option<u16>) = match &a.url {
        Some(u) => (u.trim_end_matches('/').to_string(), None),
        None => {
            own = tune::storage::test_server::PgServer::start()
                .map_err(|e| anyhow::anyhow!("cannot start a local PostgreSQL: {e}"))?;
            let u = own.create_db("tune_bench_probe");
            let base = u.rsplit_once('/').map(|(b, _)| b.to_string()).unwrap_or(u);
            (base, Some(own.port()))
        }
    };
    println!(
        "tune bench storage: {} s per run, 4 slots per process, trials of {} ms, tune's sampler {}, Optuna's default; server {}",
        a.seconds,
        a.trial_ms,
        a.sampler,
        tune::storage::url::redact(&base)
    );
    let dir = tempfile::tempdir()?;
    for (i, &procs) in a.procs.iter().enumerate() {
        let ideal = (a.trial_ms > 0)
            .then(|| procs as f64 * SLOTS as f64 * a.seconds * 1000.0 / a.trial_ms as f64);
        let db = format!("tb_tune_{i}");
        create_db(&base, &db)?;
        let url = format!("{base}/{db}");
        let count = || count_connections(&base, &db);
        let tune_pg = run_tune(a, &url, procs, &count)?;
        row("tune (PostgreSQL)", procs, &tune_pg, ideal);
        if !a.no_optuna && a.trial_ms == 0 {
            let odb = format!("tb_optuna_{i}");
            create_db(&base, &odb)?;
            let sa = format!(
                "{}/{odb}",
                base.replacen("postgresql://", "postgresql+psycopg2://", 1)
            );
            match run_optuna(a, &sa, procs) {
                Ok(o) => {
                    row("Optuna RDBStorage", procs, &o, None);
                    let r = (tune_pg.trials as f64 / tune_pg.seconds)
                        / (o.trials as f64 / o.seconds).max(1e-9);
                    println!("{:<18} {procs:>3} procs  tune/Optuna = {r:.2}x", "ratio");
                }
                Err(e) => println!("Optuna RDBStorage  {procs:>3} procs  not measured: {e}"),
            }
        }
        if !a.no_sqlite {
            let file = dir.path().join(format!("s{i}.db"));
            let side = run_tune(a, &file.display().to_string(), procs, &|| None)?;
            row("tune (SQLite)", procs, &side, ideal);
        }
    }
    let _ = admin_port;
    Ok(ExitCode::SUCCESS)
}

/// A fresh database on the server (dropped first if a previous run left it).
fn create_db(base: &str, name: &str) -> anyhow::Result<()> {
    let u = StorageUrl::parse(&format!("{base}/postgres"), Path::new(""))?;
    let StorageUrl::Postgres(pg) = u else {
        anyhow::bail!("not a PostgreSQL URL")
    };
    let s = tune::storage::PostgresStorage::connect_admin(&pg)?;
    s.admin(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
    s.admin(&format!("CREATE DATABASE {name}"))?;
    Ok(())
}

fn count_connections(base: &str, db: &str) -> Option<i64> {
    let u = StorageUrl::parse(&format!("{base}/postgres"), Path::new("")).ok()?;
    let StorageUrl::Postgres(pg) = u else {
        return None;
    };
    let s = tune::storage::PostgresStorage::connect_admin(&pg).ok()?;
    s.admin_count(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}'"
    ))
    .ok()
}
