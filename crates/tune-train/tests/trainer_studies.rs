//! Every builtin study in `studies/` is executable documentation: its `[trial]` and `[space]`
//! must pass `parse_builtin`, and the small ones (and the quickstart, on the full
//! Fashion-MNIST, when it is installed) run to completion through worker processes.
//!
//! The studies run through the one ask/tell engine (in memory) on `workers.count` slots of the
//! real worker runner: this exercises the trainer, the worker processes and the engine, not the
//! scheduler's signals and UI (the CLI tests cover those).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};
use tune::builtin::{BuiltinTrial, parse_builtin};
use tune::engine::{Engine, EngineSpec, Finish};
use tune::pruner::PrunerConfig;
use tune::runner::worker::WorkerRunner;
use tune::runner::{Progress, RunEnd, StopRequest, TrialJob, TrialRunner};
use tune::sampler::{self, SamplerKind};
use tune::space::Space;
use tune::storage::MemoryStorage;
use tune::trial::Direction;

/// The repository's `studies/`: this crate sits two levels below the repository root.
fn studies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../studies")
}

fn studies() -> Vec<PathBuf> {
    let dir = studies_dir();
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("studies/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

struct Loaded {
    table: toml::Table,
    space: Space,
    trial: BuiltinTrial,
}

fn load(path: &Path) -> Option<Loaded> {
    let text = std::fs::read_to_string(path).expect("readable study");
    let table: toml::Table = toml::from_str(&text).expect("valid TOML");
    let trial_t = table["trial"].as_table().expect("[trial]").clone();
    if trial_t.get("kind").and_then(|k| k.as_str()) != Some("builtin") {
        return None;
    }
    let space = Space::from_toml(table["space"].as_table().expect("[space]")).expect("space");
    let dir = path.parent().expect("a study has a directory");
    let trial =
        parse_builtin(&trial_t, &space, dir).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(Loaded {
        table,
        space,
        trial,
    })
}

#[test]
fn every_builtin_study_file_passes_the_trainers_checks() {
    let mut n = 0;
    for p in studies() {
        if std::fs::read_to_string(&p)
            .expect("readable")
            .contains("fashion-mnist")
            && !Path::new(tune::builtin::FASHION_MNIST_DIR).exists()
        {
            continue;
        }
        if load(&p).is_some() {
            n += 1;
        }
    }
    assert!(n >= 3, "expected the builtin studies, found {n}");
}

/// Runs a study's trials on its worker slots; returns each trial's final metric value (NaN
/// for a failed trial) and the wall time.
async fn run_study(path: &Path, dir: &Path) -> (Vec<f64>, f64) {
    let s = load(path).expect("a builtin study");
    let study = s.table["study"].as_table().expect("[study]");
    let metric = study["metric"].as_str().expect("metric").to_string();
    let n_trials = study["trials"].as_integer().expect("trials") as u64;
    let seed = study.get("seed").and_then(|v| v.as_integer()).unwrap_or(0) as u64;
    let slots = s
        .table
        .get("workers")
        .and_then(|w| w.get("count"))
        .and_then(|c| c.as_integer())
        .unwrap_or(1) as usize;
    let timeout = s.trial.timeout;
    let runner = Arc::new(WorkerRunner::new(
        s.trial.clone(),
        PathBuf::from(env!("CARGO_BIN_EXE_tune-worker")),
    ));
    let pruner = PrunerConfig::None;
    let device = vec!["cpu".to_string(); slots];
    let spec = EngineSpec {
        others: &[],
        name: "trainer-study",
        metric: &metric,
        direction: Direction::Minimize,
        space: &s.space,
        seed,
        budget: Some(n_trials),
        heartbeat_grace: std::time::Duration::from_secs(3600),
        pruner: &pruner,
        file: None,
        source: None,
        slots: &device,
        enqueue: &[],
    };
    let engine = Engine::open(
        Box::new(MemoryStorage::new()),
        &spec,
        sampler::build(SamplerKind::Auto),
        tune::pruner::build(&pruner),
    )
    .expect("engine");
    let engine = Arc::new(std::sync::Mutex::new(engine));
    let start = Instant::now();
    let mut handles = Vec::new();
    for slot in 0..slots {
        let (runner, engine, dir) = (runner.clone(), engine.clone(), dir.to_path_buf());
        handles.push(tokio::spawn(async move {
            let mut values = Vec::new();
            loop {
                let asked = engine.lock().expect("engine lock").ask(slot, "cpu");
                let Some(trial) = asked.expect("ask") else {
                    break;
                };
                let (tx, mut rx) = mpsc::unbounded_channel();
                let (_stop_tx, stop_rx) = watch::channel(StopRequest::None);
                let job = TrialJob {
                    number: trial.number,
                    params: trial.params.clone(),
                    slot,
                    device: "cpu".into(),
                    trial_dir: dir.join(format!("trial-{}", trial.number)),
                    attempt: 1,
                    first: trial.number,
                    checkpoint_dir: tune::checkpoint::trial_dir(
                        None,
                        "study",
                        trial.number.0,
                        &dir.join(format!("trial-{}", trial.number)),
                    ),
                    timeout,
                    seed,
                };
                let res = runner.run(job, tx, stop_rx).await;
                let mut e = engine.lock().expect("engine lock");
                while let Ok(p) = rx.try_recv() {
                    match p {
                        Progress::Report(r) => {
                            e.report(trial.id, r).expect("report");
                        }
                        Progress::Checkpoint { step } => {
                            e.checkpoint(trial.id, step).expect("checkpoint");
                        }
                    }
                }
                let finish = match res.end {
                    RunEnd::Finished => Finish::Ended,
                    RunEnd::Failed { reason, log_tail } => Finish::Failed { reason, log_tail },
                    RunEnd::Stopped => Finish::Failed {
                        reason: "stopped".into(),
                        log_tail: None,
                    },
                };
                let done = e.finish(trial.id, finish, &res.logs).expect("finish");
                values.push(done.value().unwrap_or(f64::NAN));
            }
            values
        }));
    }
    let mut values = Vec::new();
    for h in handles {
        values.extend(h.await.expect("slot task"));
    }
    (values, start.elapsed().as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_digits_study_runs_to_completion_on_two_workers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = studies_dir().join("digits-mlp.toml");
    let (values, _) = run_study(&path, dir.path()).await;
    assert_eq!(values.len(), 6);
    assert!(values.iter().all(|v| v.is_finite()), "{values:?}");
}

/// The quickstart, on the full Fashion-MNIST: completes on 2 CPU workers and its best trial
/// is clearly better than its median one. Skipped (with a note) where the data set is not
/// installed; `scripts/setup.sh` installs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_study_completes_and_beats_its_median_trial() {
    if !Path::new(tune::builtin::FASHION_MNIST_DIR).exists() {
        eprintln!("skipped: Fashion-MNIST is not installed (run scripts/setup.sh)");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = studies_dir().join("quickstart.toml");
    let (values, secs) = run_study(&path, dir.path()).await;
    let mut finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    finite.sort_by(f64::total_cmp);
    let mut all = values.clone();
    // A failed trial ranks last.
    all.sort_by(|a, b| match (a.is_finite(), b.is_finite()) {
        (true, true) => a.total_cmp(b),
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => std::cmp::Ordering::Equal,
    });
    let median = all[all.len() / 2];
    let best = finite[0];
    eprintln!(
        "quickstart: {} trials in {secs:.1} s, best val_loss {best:.4}, median {median:.4}, values {values:?}",
        values.len()
    );
    assert_eq!(values.len(), 16);
    assert!(secs < 300.0, "took {secs:.0} s");
    assert!(
        !median.is_finite() || best < 0.9 * median,
        "best {best} is not clearly better than the median {median}"
    );
}
