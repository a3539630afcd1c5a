//! `tune bench multifidelity` (issue 26): the optimizer and the pruner measured together, as
//! they are used, on the learning-curve problems of [`crate::curves`].
//!
//! Each run is one study in memory, driven through the one engine `tune run` uses (claims, the
//! sampler, the reports, the pruner's decisions, the stored outcomes), with `q` workers that each
//! train their trial one epoch at a time, in turn. A pruned trial frees its worker at once. The
//! clock is the compute spent: every epoch trained by any trial costs one, and the study stops
//! when it has spent its largest budget. **Measure**: at each budget (in full-trial equivalents,
//! `budget × epochs`), the true final loss of the complete trial whose reported final value is
//! the best so far (what a user would pick), scored as `tune bench optimizers` scores: 100 at
//! the optimum, 0 at the median of random search without pruning at the same compute (measured
//! in the same run with seeds of its own), clipped to ±100. A run that has completed no trial
//! at a budget scores as chance ([`curves::V0`]).
//!
//! **Population-based training** (the `pbt` arm) is simulated as Syne Tune simulates it on
//! tabulated and surrogate blackboxes: every trial records a checkpoint after each epoch, and a
//! child (queued by [`Engine::exploit`] from a parent's latest checkpoint, at epoch `s`)
//! follows **its own params' curve** from epoch `s + 1` on. The `s` epochs it inherits cost
//! nothing; only the epochs it trains are compute. The model credits inherited progress
//! without modelling weight inheritance: a child's loss is what its params would have reached
//! from scratch, not what the parent's weights trained on under its params would reach. It is
//! optimistic about PBT wherever the two differ (a learning rate raised late, a curve whose end
//! depends on its start), and the more so the later a child starts. A child of a complete
//! parent (`s` = the trial's epochs) has no epoch left to train: it is the parent's final
//! model, reported once at no cost (the parent's true final, with a noise draw of its own),
//! not a free look at its own params' final loss.
//!
//! With `TUNE_BENCH_TRACE` set, every finished trial is also traced on standard error (problem,
//! arm, seed, number, outcome, epochs trained, last reported and true final loss, the
//! incumbent's true final, params): what a run did, when a score needs explaining.
//!
//! What belongs here: the run loop, the accounting and the table. The problems and their truth
//! live in `curves`; the rules under test in `tune::sampler` and `tune::pruner`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::StandardNormal;

use crate::cli::MultifidelityArgs;
use crate::curves::{self, CurveProblem, V0};
use crate::optimizers::{median, score};
use tune::engine::{Decision, Engine, EngineSpec, Finish};
use tune::pruner::{
    AshaConfig, AshaMode, ForecastConfig, HyperbandConfig, MedianConfig, PbtConfig, PrunerConfig,
};
use tune::sampler::{SamplerKind, mix as mix_seed};
use tune::storage::MemoryStorage;
use tune::trial::{Direction, Report, TrialId, TrialNumber};

/// The pruners the benchmark pairs with every sampler, each over epochs with the trial's full
/// epochs as its maximum resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrunerArm {
    None,
    Median,
    Asha,
    /// ASHA with `mode = "promote"`: trials outside the top pause at a rung (checkpointed at
    /// their last epoch) and resume from there when promoted.
    AshaPromote,
    Hyperband,
    /// Hyperband with `mode = "promote"`.
    HyperbandPromote,
    Forecast,
    /// Population-based training: the bottom of a point is exploited into a child that
    /// continues from a top trial's checkpoint with explored params (the module's comment
    /// says how a child's curve is simulated).
    Pbt,
}

/// How many points (exploit opportunities) the `pbt` arm gives a trial's run: its interval is
/// `epochs / PBT_POINTS` (4 epochs of 27, 13 of 81, 3 of 20). The interval is also how long a
/// child trains on its own params before it is judged, so it is long enough for a curve's
/// early ordering to form (one epoch after a real child starts, its loss is still mostly its
/// parent's weights'); six points still let a lineage be renewed five times in a run, about as
/// often as ASHA at η = 3 judges (epochs 1, 3, 9 of 27). Not tuned here: 9 and 13 points score
/// within a few points of 6 (docs/experiments/pbt.md).
const PBT_POINTS: u64 = 6;

impl PrunerArm {
    pub const NAMES: &'static [&'static str] = &[
        "none",
        "median",
        "asha",
        "asha-promote",
        "hyperband",
        "hyperband-promote",
        "forecast",
        "pbt",
    ];

    pub fn parse(s: &str) -> Option<PrunerArm> {
        Some(match s {
            "none" => PrunerArm::None,
            "median" => PrunerArm::Median,
            "asha" => PrunerArm::Asha,
            "asha-promote" => PrunerArm::AshaPromote,
            "hyperband" => PrunerArm::Hyperband,
            "hyperband-promote" => PrunerArm::HyperbandPromote,
            "forecast" => PrunerArm::Forecast,
            "pbt" => PrunerArm::Pbt,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            PrunerArm::None => "none",
            PrunerArm::Median => "median",
            PrunerArm::Asha => "asha",
            PrunerArm::AshaPromote => "asha-promote",
            PrunerArm::Hyperband => "hyperband",
            PrunerArm::HyperbandPromote => "hyperband-promote",
            PrunerArm::Forecast => "forecast",
            PrunerArm::Pbt => "pbt",
        }
    }

    /// The `[pruner]` table a study of `epochs`-epoch trials would write for this arm.
    pub fn config(self, epochs: u64) -> PrunerConfig {
        let resource = "epoch".to_string();
        let max = Some(epochs as f64);
        match self {
            PrunerArm::None => PrunerConfig::None,
            PrunerArm::Median => PrunerConfig::Median(MedianConfig {
                resource,
                ..MedianConfig::default()
            }),
            PrunerArm::Asha => PrunerConfig::Asha(AshaConfig {
                max_resource: max,
                resource,
                ..AshaConfig::default()
            }),
            PrunerArm::AshaPromote => PrunerConfig::Asha(AshaConfig {
                max_resource: max,
                resource,
                mode: AshaMode::Promote,
                ..AshaConfig::default()
            }),
            PrunerArm::Hyperband => PrunerConfig::Hyperband(HyperbandConfig {
                max_resource: max,
                resource,
                ..HyperbandConfig::default()
            }),
            PrunerArm::HyperbandPromote => PrunerConfig::Hyperband(HyperbandConfig {
                max_resource: max,
                resource,
                mode: AshaMode::Promote,
                ..HyperbandConfig::default()
            }),
            PrunerArm::Forecast => PrunerConfig::Forecast(ForecastConfig {
                max_resource: max,
                resource,
                ..ForecastConfig::default()
            }),
            // The population is the default 8, not the workers `q`: tune's PBT ranks a trial
            // among the latest trials to reach a point, finished or not, so the population is
            // a window of the history rather than the trials running side by side, and the
            // benchmark's default `q = 1` could not be one (it must be 2 or more). The
            // quantile is the default 0.25 and `mutate` absent: every param is explored.
            PrunerArm::Pbt => PrunerConfig::Pbt(PbtConfig {
                interval: (epochs / PBT_POINTS).max(1) as f64,
                max_resource: max,
                resource,
                ..PbtConfig::default()
            }),
        }
    }

    /// Whether trials record a checkpoint after every epoch (parents for PBT's children).
    fn checkpoints_every_epoch(self) -> bool {
        self == PrunerArm::Pbt
    }
}

/// One sampler with one pruner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arm {
    pub sampler: SamplerKind,
    pub sampler_name: &'static str,
    pub pruner: PrunerArm,
}

impl Arm {
    pub fn label(&self) -> String {
        format!("{} + {}", self.sampler_name, self.pruner.name())
    }
}

/// What one run found and spent.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// Per budget, the true final loss of the trial a user would pick ([`V0`] when none had
    /// completed).
    pub best: Vec<f64>,
    /// Trials started, and those that ran to their last epoch, by the largest budget.
    pub trials: usize,
    /// Paused trials resumed (promotion-based ASHA and Hyperband; not in `trials`).
    pub resumed: usize,
    pub complete: usize,
    /// Trials the pruner stopped, and of them those whose true final loss was below the
    /// incumbent's when they were stopped: stops that cost the run its best trial.
    pub pruned: usize,
    pub false_stops: usize,
    /// Trials population-based training exploited (stopped for a child; not in `pruned`); the
    /// children that started as copies of a complete parent's final model (nothing left to
    /// train); and the epochs the other children that started inherited from their parents'
    /// checkpoints: progress credited without compute.
    pub exploited: usize,
    pub copies: usize,
    pub inherited: u64,
    /// Milliseconds of each ask (the sampler's proposal and the claim).
    pub ask_ms: Vec<f64>,
}

/// A trial on a worker.
struct Live {
    id: TrialId,
    trial: TrialNumber,
    /// The number of its first attempt (a promoted trial's re-run has a number of its own):
    /// its noise is drawn from it, so a resumed curve goes on as the paused one would have.
    number: u64,
    curve: curves::Curve,
    /// The epoch it started from (0, a promoted trial's checkpoint, a PBT parent's), and the
    /// last it trained.
    start: u64,
    epoch: u64,
    params: tune::space::Params,
}

/// The reported loss of `truth` at `epoch` of trial `number`: the truth plus the problem's
/// noise, drawn from the seed, the trial and the epoch (the same in every arm).
fn observe(problem: &CurveProblem, truth: f64, seed: u64, number: u64, epoch: u64) -> f64 {
    if problem.noise == 0.0 || !truth.is_finite() {
        return truth;
    }
    let mut rng = StdRng::seed_from_u64(mix_seed(mix_seed(seed, number), epoch));
    truth + problem.noise * rng.sample::<f64, _>(StandardNormal)
}

/// Runs `arm` on `problem` with `q` workers until `budgets`' largest is spent (budgets in
/// full-trial equivalents, ascending).
pub fn run_one(
    problem: &CurveProblem,
    arm: Arm,
    seed: u64,
    q: usize,
    budgets: &[f64],
) -> anyhow::Result<RunResult> {
    Ok(run_study(problem, arm, seed, q, budgets)?.0)
}

/// [`run_one`], with the engine it ran, whose storage holds the study (for the tests).
fn run_study(
    problem: &CurveProblem,
    arm: Arm,
    seed: u64,
    q: usize,
    budgets: &[f64],
) -> anyhow::Result<(RunResult, Engine)> {
    let space = problem.space()?;
    let pruner = arm.pruner.config(problem.epochs);
    pruner
        .check()
        .with_context(|| format!("the {} pruner for {}", arm.pruner.name(), problem.name))?;
    let slots = vec!["cpu".to_string(); q.max(1)];
    let mut engine = open_engine(problem, &space, arm.sampler, &pruner, seed, &slots, &[])?;
    let epochs = problem.epochs;
    let last_budget = budgets.last().copied().unwrap_or(0.0);
    let cap = (last_budget * epochs as f64).round() as u64;
    let mut workers: Vec<Option<Live>> = (0..slots.len()).map(|_| None).collect();
    let mut spent = 0u64;
    let mut next_budget = 0;
    // (reported final, true final) of the best complete trial so far.
    let mut incumbent: Option<(f64, f64)> = None;
    let mut result = RunResult {
        best: Vec::with_capacity(budgets.len()),
        trials: 0,
        resumed: 0,
        complete: 0,
        pruned: 0,
        false_stops: 0,
        exploited: 0,
        copies: 0,
        inherited: 0,
        ask_ms: Vec::new(),
    };
    // The true loss at the last epoch of every trial that reached it: what a child of its
    // final checkpoint inherits.
    let mut finals: BTreeMap<TrialNumber, f64> = BTreeMap::new();
    while spent < cap {
        for (slot, w) in workers.iter_mut().enumerate() {
            while w.is_none() {
                let at = Claim {
                    problem,
                    space: &space,
                    arm,
                    seed,
                    slot,
                };
                match start(&mut engine, &at, &finals, &mut result)? {
                    Started::Train(live) => *w = Some(live),
                    Started::Copied { trial, seen, truth } => {
                        finals.insert(trial, truth);
                        if !seen.is_nan() {
                            result.complete += 1;
                            if incumbent.is_none_or(|(best_seen, _)| seen < best_seen) {
                                incumbent = Some((seen, truth));
                            }
                        }
                    }
                }
            }
        }
        for w in workers.iter_mut() {
            if spent >= cap {
                break;
            }
            let Some(live) = w.as_mut() else { continue };
            live.epoch += 1;
            spent += 1;
            let truth = live.curve.losses[(live.epoch - 1) as usize];
            let seen = observe(problem, truth, seed, live.number, live.epoch);
            if live.epoch == epochs {
                finals.insert(live.trial, truth);
            }
            // Saved before the report, as a trainer saves at the end of its epoch: a trial
            // exploited at this report's point may take it as its parent.
            if arm.pruner.checkpoints_every_epoch() {
                engine.checkpoint(live.id, live.epoch)?;
            }
            let mut metrics = BTreeMap::new();
            metrics.insert("loss".to_string(), seen);
            metrics.insert("epoch".to_string(), live.epoch as f64);
            let decision = engine.report(
                live.id,
                Report {
                    step: live.epoch,
                    metrics,
                },
            )?;
            let ended = if seen.is_nan() {
                Some(Finish::Failed {
                    reason: "the loss diverged".into(),
                    log_tail: None,
                })
            } else if live.epoch == epochs {
                result.complete += 1;
                if incumbent.is_none_or(|(best_seen, _)| seen < best_seen) {
                    incumbent = Some((seen, truth));
                }
                Some(Finish::Ended)
            } else {
                stop(&mut engine, live, decision, incumbent, &mut result)?
            };
            if let Some(how) = ended {
                if std::env::var_os("TUNE_BENCH_TRACE").is_some() {
                    trace(problem, arm, seed, live, &how, seen, incumbent);
                }
                engine.finish(live.id, how, &[])?;
                *w = None;
            }
            while next_budget < budgets.len()
                && spent as f64 >= budgets[next_budget] * epochs as f64 - 1e-9
            {
                result.best.push(incumbent.map_or(V0, |(_, truth)| truth));
                next_budget += 1;
            }
        }
    }
    while result.best.len() < budgets.len() {
        result.best.push(incumbent.map_or(V0, |(_, truth)| truth));
    }
    Ok((result, engine))
}

/// Where [`start`] claims a trial.
struct Claim<'a> {
    problem: &'a CurveProblem,
    space: &'a tune::space::Space,
    arm: Arm,
    seed: u64,
    slot: usize,
}

/// A claimed trial.
enum Started {
    /// To train from its `epoch` on.
    Train(Live),
    /// A child of population-based training whose parent had completed: nothing is left to
    /// train, it reported the parent's final model once (`seen`, true loss `truth`) and ended.
    Copied {
        trial: TrialNumber,
        seen: f64,
        truth: f64,
    },
}

/// Claims the next trial for worker `at.slot`: a new one starts at epoch 0, a promoted one at
/// its checkpoint's epoch, a child of population-based training at its parent's (the epochs
/// before it inherited, at no cost; `finals` holds what a child of a complete parent is).
fn start(
    engine: &mut Engine,
    at: &Claim<'_>,
    finals: &BTreeMap<TrialNumber, f64>,
    result: &mut RunResult,
) -> anyhow::Result<Started> {
    let problem = at.problem;
    let t0 = Instant::now();
    let trial = engine
        .ask(at.slot, "cpu")?
        .context("the engine stopped asking before the compute was spent")?;
    result.ask_ms.push(t0.elapsed().as_secs_f64() * 1e3);
    at.space
        .validate(&trial.params)
        .with_context(|| format!("{} proposed invalid params", at.arm.label()))?;
    let number = engine.attempt(trial.number)?.first.0;
    // A promoted trial's re-run resumes at the epoch its checkpoint holds.
    let resumed = engine.recorded_checkpoint(trial.number)?;
    let parent = engine.parent_of(trial.number)?;
    let epoch = match (&resumed, parent) {
        (Some(c), _) => {
            result.resumed += 1;
            c.step
        }
        (None, Some(parent)) => {
            result.trials += 1;
            if parent.step < problem.epochs {
                result.inherited += parent.step;
            } else {
                result.copies += 1;
            }
            parent.step
        }
        (None, None) => {
            result.trials += 1;
            0
        }
    };
    if let Some(parent) = parent.filter(|p| p.step >= problem.epochs) {
        let truth = *finals
            .get(&parent.trial)
            .with_context(|| format!("trial {} checkpointed its last epoch", parent.trial))?;
        let seen = observe(problem, truth, at.seed, number, problem.epochs);
        let mut metrics = BTreeMap::new();
        metrics.insert("loss".to_string(), seen);
        metrics.insert("epoch".to_string(), problem.epochs as f64);
        engine.report(
            trial.id,
            Report {
                step: problem.epochs,
                metrics,
            },
        )?;
        let how = if seen.is_nan() {
            Finish::Failed {
                reason: "the loss diverged".into(),
                log_tail: None,
            }
        } else {
            Finish::Ended
        };
        if std::env::var_os("TUNE_BENCH_TRACE").is_some() {
            eprintln!(
                "TRACE {} {} seed {} #{number} copy of #{}'s final model: seen {seen:.4} final {truth:.4} {:?}",
                problem.name,
                at.arm.label(),
                at.seed,
                parent.trial,
                trial.params,
            );
        }
        engine.finish(trial.id, how, &[])?;
        return Ok(Started::Copied {
            trial: trial.number,
            seen,
            truth,
        });
    }
    Ok(Started::Train(Live {
        id: trial.id,
        trial: trial.number,
        number,
        curve: problem.run_curve(&trial.params, at.seed)?,
        start: epoch,
        epoch,
        params: trial.params.clone(),
    }))
}

/// What the pruner's `decision` on running trial `live` (neither diverged nor at its end)
/// ends it with, if anything; counts the stops.
fn stop(
    engine: &mut Engine,
    live: &Live,
    decision: Decision,
    incumbent: Option<(f64, f64)>,
    result: &mut RunResult,
) -> anyhow::Result<Option<Finish>> {
    let pruned = Finish::Pruned {
        value: None,
        reason: None,
    };
    Ok(match decision {
        Decision::Continue => None,
        Decision::Pause => {
            // Checkpointed at this epoch, then stopped: paused, not counted as pruned.
            engine.checkpoint(live.id, live.epoch)?;
            Some(pruned)
        }
        Decision::Prune => {
            result.pruned += 1;
            if incumbent.is_none_or(|(_, best)| live.curve.last() < best) {
                result.false_stops += 1;
            }
            Some(pruned)
        }
        // Every checkpoint can be read here. `None`: no parent has one, and the trial goes on.
        Decision::Exploit => engine.exploit(live.id, |c| Some(c.step))?.map(|_| {
            result.exploited += 1;
            pruned
        }),
    })
}

/// One line on standard error for a finished trial (`TUNE_BENCH_TRACE`).
fn trace(
    problem: &CurveProblem,
    arm: Arm,
    seed: u64,
    live: &Live,
    how: &Finish,
    seen: f64,
    incumbent: Option<(f64, f64)>,
) {
    eprintln!(
        "TRACE {} {} seed {seed} #{} {:?} epochs {}..={} seen {:.4} final {:.4} inc {:?} {:?}",
        problem.name,
        arm.label(),
        live.number,
        match how {
            Finish::Ended => "complete",
            Finish::Pruned { .. } => "pruned",
            _ => "failed",
        },
        live.start + 1,
        live.epoch,
        seen,
        live.curve.last(),
        incumbent.map(|i| (i.1 * 1e4).round() / 1e4),
        live.params,
    );
}

/// The engine of `tune run` on memory storage for a study of `problem` (minimising `loss`),
/// with `enqueue`'s params run first.
pub(crate) fn open_engine(
    problem: &CurveProblem,
    space: &tune::space::Space,
    sampler: SamplerKind,
    pruner: &PrunerConfig,
    seed: u64,
    slots: &[String],
    enqueue: &[tune::space::Params],
) -> anyhow::Result<Engine> {
    let spec = EngineSpec {
        others: &[],
        name: &problem.name,
        metric: "loss",
        direction: Direction::Minimize,
        space,
        seed,
        budget: None,
        heartbeat_grace: Duration::from_secs(3600),
        pruner,
        file: None,
        source: None,
        slots,
        enqueue,
    };
    Ok(Engine::open(
        Box::new(MemoryStorage::new()),
        &spec,
        tune::sampler::build(sampler),
        tune::pruner::build(pruner),
    )?)
}

/// One cell of the table: an arm on one problem, over seeds.
#[derive(Debug, Clone)]
pub struct Cell {
    /// Per budget, the score of every seed.
    pub scores: Vec<Vec<f64>>,
    /// Per budget, the mean true final loss.
    pub loss: Vec<f64>,
    pub trials: f64,
    pub complete: f64,
    pub pruned: f64,
    pub false_stops: f64,
    pub exploited: f64,
    pub copies: f64,
    pub inherited: f64,
    pub ask_ms: Vec<f64>,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i]
}

/// What the command line chose.
pub struct Options {
    pub problems: Vec<CurveProblem>,
    pub arms: Vec<Arm>,
    pub seeds: u64,
    pub ref_seeds: u64,
    pub budgets: Vec<f64>,
    pub q: usize,
    pub jobs: usize,
    pub per_problem: bool,
}

impl Options {
    pub fn from_args(a: &MultifidelityArgs) -> anyhow::Result<Options> {
        let all = curves::all_problems()?;
        let problems: Vec<CurveProblem> = if a.problems == "all" {
            all
        } else {
            let wanted: Vec<&str> = a.problems.split(',').map(str::trim).collect();
            for w in &wanted {
                if !all
                    .iter()
                    .any(|p| p.name == *w || p.shape.name() == *w || p.base.name() == *w)
                {
                    anyhow::bail!(
                        "--problems: no learning-curve problem, shape or base named {w:?} (problems: {})",
                        all.iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
            }
            all.into_iter()
                .filter(|p| {
                    wanted
                        .iter()
                        .any(|w| p.name == *w || p.shape.name() == *w || p.base.name() == *w)
                })
                .collect()
        };
        let mut samplers = Vec::new();
        for s in a.samplers.split(',').map(str::trim) {
            let kind = SamplerKind::parse(s)
                .filter(|k| !matches!(k, SamplerKind::Nsga2))
                .with_context(|| {
                    format!("--samplers: {s:?} is not one of auto, gp, tpe, random, sobol")
                })?;
            let name: &'static str = match kind {
                SamplerKind::Random => "random",
                SamplerKind::Sobol => "sobol",
                SamplerKind::Gp => "gp",
                SamplerKind::Tpe => "tpe",
                SamplerKind::Auto => "auto",
                SamplerKind::Nsga2 => unreachable!("filtered above"),
            };
            samplers.push((kind, name));
        }
        let mut pruners = Vec::new();
        for p in a.pruners.split(',').map(str::trim) {
            pruners.push(PrunerArm::parse(p).with_context(|| {
                format!(
                    "--pruners: {p:?} is not one of {}",
                    PrunerArm::NAMES.join(", ")
                )
            })?);
        }
        let mut budgets = Vec::new();
        for b in a.budgets.split(',').map(str::trim) {
            let v: f64 = b
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0)
                .with_context(|| format!("--budgets: {b:?} is not a positive number"))?;
            budgets.push(v);
        }
        budgets.sort_by(f64::total_cmp);
        budgets.dedup();
        anyhow::ensure!(a.seeds > 0, "--seeds: must be at least 1");
        anyhow::ensure!(a.ref_seeds > 0, "--ref-seeds: must be at least 1");
        anyhow::ensure!(a.q > 0, "--q: must be at least 1");
        let arms = samplers
            .iter()
            .flat_map(|&(sampler, sampler_name)| {
                pruners.iter().map(move |&pruner| Arm {
                    sampler,
                    sampler_name,
                    pruner,
                })
            })
            .collect();
        Ok(Options {
            problems,
            arms,
            seeds: a.seeds,
            ref_seeds: a.ref_seeds,
            budgets,
            q: a.q,
            jobs: a.jobs.max(1),
            per_problem: a.per_problem,
        })
    }
}

/// The reference arm: random search, every trial to its end.
const REFERENCE: Arm = Arm {
    sampler: SamplerKind::Random,
    sampler_name: "random",
    pruner: PrunerArm::None,
};

/// Seeds of the reference runs, apart from the arms' seeds.
const REF_SEED_BASE: u64 = 1_000_000;

/// Runs `tasks` on `jobs` threads; the results in task order.
fn run_tasks<T: Sync, R: Send>(
    tasks: &[T],
    jobs: usize,
    f: impl Fn(&T) -> anyhow::Result<R> + Sync,
) -> anyhow::Result<Vec<R>> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<anyhow::Result<R>>>> =
        Mutex::new((0..tasks.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(tasks.len()).max(1) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(t) = tasks.get(i) else { break };
                    let r = f(t);
                    out.lock().expect("no thread panics holding it")[i] = Some(r);
                }
            });
        }
    });
    out.into_inner()
        .expect("no thread panics holding it")
        .into_iter()
        .map(|r| r.expect("every task ran"))
        .collect()
}

/// The per-problem reference (random search's median true final loss at each budget), and
/// every arm's cells.
pub struct Measured {
    pub reference: Vec<Vec<f64>>,
    /// `cells[arm][problem]`.
    pub cells: Vec<Vec<Cell>>,
}

/// Per problem and budget, random search's median true final loss without pruning.
pub fn reference(opts: &Options) -> anyhow::Result<Vec<Vec<f64>>> {
    let ref_tasks: Vec<(usize, u64)> = (0..opts.problems.len())
        .flat_map(|p| (0..opts.ref_seeds).map(move |s| (p, REF_SEED_BASE + s)))
        .collect();
    let ref_runs = run_tasks(&ref_tasks, opts.jobs, |&(p, seed)| {
        run_one(&opts.problems[p], REFERENCE, seed, opts.q, &opts.budgets)
    })?;
    let reference: Vec<Vec<f64>> = (0..opts.problems.len())
        .map(|p| {
            (0..opts.budgets.len())
                .map(|b| {
                    let mut v: Vec<f64> = ref_tasks
                        .iter()
                        .zip(&ref_runs)
                        .filter(|((q, _), _)| *q == p)
                        .map(|(_, r)| r.best[b])
                        .collect();
                    median(&mut v)
                })
                .collect()
        })
        .collect();
    Ok(reference)
}

pub fn measure(opts: &Options) -> anyhow::Result<Measured> {
    let reference = reference(opts)?;
    let tasks: Vec<(usize, usize, u64)> = (0..opts.arms.len())
        .flat_map(|a| {
            (0..opts.problems.len()).flat_map(move |p| (0..opts.seeds).map(move |s| (a, p, s)))
        })
        .collect();
    let runs = run_tasks(&tasks, opts.jobs, |&(a, p, seed)| {
        run_one(&opts.problems[p], opts.arms[a], seed, opts.q, &opts.budgets).with_context(|| {
            format!(
                "{} on {} (seed {seed})",
                opts.arms[a].label(),
                opts.problems[p].name
            )
        })
    })?;
    let mut cells = Vec::new();
    for a in 0..opts.arms.len() {
        let mut row = Vec::new();
        for (p, reference) in reference.iter().enumerate() {
            let mine: Vec<&RunResult> = tasks
                .iter()
                .zip(&runs)
                .filter(|((ta, tp, _), _)| *ta == a && *tp == p)
                .map(|(_, r)| r)
                .collect();
            let scores = (0..opts.budgets.len())
                .map(|b| {
                    mine.iter()
                        .map(|r| score(r.best[b], opts.problems[p].optimum(), reference[b]))
                        .collect()
                })
                .collect();
            let loss = (0..opts.budgets.len())
                .map(|b| mean(&mine.iter().map(|r| r.best[b]).collect::<Vec<_>>()))
                .collect();
            row.push(Cell {
                scores,
                loss,
                trials: mean(&mine.iter().map(|r| r.trials as f64).collect::<Vec<_>>()),
                complete: mean(&mine.iter().map(|r| r.complete as f64).collect::<Vec<_>>()),
                pruned: mean(&mine.iter().map(|r| r.pruned as f64).collect::<Vec<_>>()),
                false_stops: mean(
                    &mine
                        .iter()
                        .map(|r| r.false_stops as f64)
                        .collect::<Vec<_>>(),
                ),
                exploited: mean(&mine.iter().map(|r| r.exploited as f64).collect::<Vec<_>>()),
                copies: mean(&mine.iter().map(|r| r.copies as f64).collect::<Vec<_>>()),
                inherited: mean(&mine.iter().map(|r| r.inherited as f64).collect::<Vec<_>>()),
                ask_ms: mine.iter().flat_map(|r| r.ask_ms.iter().copied()).collect(),
            });
        }
        cells.push(row);
    }
    Ok(Measured { reference, cells })
}

/// The arm's mean score over problems and seeds at budget `b`, and its worst seed: the lowest,
/// over seeds, of the seed's mean score over the problems.
pub fn summary(cells: &[Cell], b: usize) -> (f64, f64) {
    let all: Vec<f64> = cells.iter().flat_map(|c| c.scores[b].clone()).collect();
    let seeds = cells.first().map_or(0, |c| c.scores[b].len());
    let per_seed: Vec<f64> = (0..seeds)
        .map(|s| mean(&cells.iter().map(|c| c.scores[b][s]).collect::<Vec<_>>()))
        .collect();
    (
        mean(&all),
        per_seed.iter().copied().fold(f64::INFINITY, f64::min),
    )
}

pub fn render(opts: &Options, m: &Measured) -> String {
    let mut out = String::new();
    let budgets: Vec<String> = opts.budgets.iter().map(|b| format!("@{b}")).collect();
    let _ = writeln!(
        out,
        "learning-curve problems: {} ({}), {} seeds, q = {}; score: 100 = optimum, 0 = random search without pruning (median of {} seeds) at the same compute; budgets in full-trial equivalents",
        opts.problems.len(),
        opts.problems
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        opts.seeds,
        opts.q,
        opts.ref_seeds,
    );
    let _ = writeln!(out);
    let _ = write!(out, "| sampler + pruner |");
    for b in &budgets {
        let _ = write!(out, " mean {b} | worst seed {b} |");
    }
    let _ = writeln!(
        out,
        " trials | complete | pruned (would have led) | exploited (copies; epochs inherited) | ask ms p50 / p99 | crossing: pruned − none {} |",
        budgets.last().map_or("", |s| s.as_str())
    );
    let _ = write!(out, "|---|");
    for _ in &budgets {
        let _ = write!(out, "---|---|");
    }
    let _ = writeln!(out, "---|---|---|---|---|---|");
    let crossing: Vec<usize> = opts
        .problems
        .iter()
        .enumerate()
        .filter(|(_, p)| p.shape == curves::Shape::Crossing)
        .map(|(i, _)| i)
        .collect();
    let last = opts.budgets.len() - 1;
    for (a, arm) in opts.arms.iter().enumerate() {
        let cells = &m.cells[a];
        let _ = write!(out, "| {} |", arm.label());
        for b in 0..opts.budgets.len() {
            let (mean_score, worst) = summary(cells, b);
            let _ = write!(out, " {mean_score:.1} | {worst:.1} |");
        }
        let asks: Vec<f64> = cells.iter().flat_map(|c| c.ask_ms.clone()).collect();
        // The same sampler without pruning, for the crossing-curve goal.
        let unpruned = opts
            .arms
            .iter()
            .position(|o| o.sampler == arm.sampler && o.pruner == PrunerArm::None);
        let cross = match unpruned {
            Some(u) if u != a && !crossing.is_empty() => {
                let mine = mean(
                    &crossing
                        .iter()
                        .flat_map(|&p| cells[p].scores[last].clone())
                        .collect::<Vec<_>>(),
                );
                let theirs = mean(
                    &crossing
                        .iter()
                        .flat_map(|&p| m.cells[u][p].scores[last].clone())
                        .collect::<Vec<_>>(),
                );
                format!("{:+.1}", mine - theirs)
            }
            _ => "–".to_string(),
        };
        let exploited = if arm.pruner == PrunerArm::Pbt {
            format!(
                "{:.1} ({:.1}; {:.0})",
                mean(&cells.iter().map(|c| c.exploited).collect::<Vec<_>>()),
                mean(&cells.iter().map(|c| c.copies).collect::<Vec<_>>()),
                mean(&cells.iter().map(|c| c.inherited).collect::<Vec<_>>()),
            )
        } else {
            "–".to_string()
        };
        let _ = writeln!(
            out,
            " {:.0} | {:.1} | {:.1} ({:.2}) | {exploited} | {:.2} / {:.2} | {cross} |",
            mean(&cells.iter().map(|c| c.trials).collect::<Vec<_>>()),
            mean(&cells.iter().map(|c| c.complete).collect::<Vec<_>>()),
            mean(&cells.iter().map(|c| c.pruned).collect::<Vec<_>>()),
            mean(&cells.iter().map(|c| c.false_stops).collect::<Vec<_>>()),
            percentile(&asks, 0.5),
            percentile(&asks, 0.99),
        );
    }
    if opts.per_problem {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "per problem, mean score (mean true final loss) {}; reference = random search's median final loss:",
            budgets.last().map_or("", |s| s.as_str())
        );
        let _ = write!(out, "| problem | reference |");
        for arm in &opts.arms {
            let _ = write!(out, " {} |", arm.label());
        }
        let _ = writeln!(out);
        let _ = write!(out, "|---|---|");
        for _ in &opts.arms {
            let _ = write!(out, "---|");
        }
        let _ = writeln!(out);
        for (p, problem) in opts.problems.iter().enumerate() {
            let _ = write!(out, "| {} | {:.3} |", problem.name, m.reference[p][last]);
            for a in 0..opts.arms.len() {
                let c = &m.cells[a][p];
                let _ = write!(out, " {:.1} ({:.3}) |", mean(&c.scores[last]), c.loss[last]);
            }
            let _ = writeln!(out);
        }
    }
    out
}

/// `--list`: the selected problems, for another harness to drive through `--serve`.
pub fn list(opts: &Options) -> anyhow::Result<serde_json::Value> {
    let reference = reference(opts)?;
    let mut problems = Vec::new();
    for (p, reference) in opts.problems.iter().zip(reference) {
        let space = p.space_table()?;
        problems.push(serde_json::json!({
            "name": p.name,
            "shape": p.shape.name(),
            "base": p.base.name(),
            "epochs": p.epochs,
            "optimum": p.optimum(),
            "noise": p.noise,
            "space": space,
            "reference": reference,
        }));
    }
    Ok(serde_json::json!({
        "budgets": opts.budgets,
        "ref_seeds": opts.ref_seeds,
        "q": opts.q,
        "chance": V0,
        "problems": problems,
    }))
}

/// Answers one `--serve` line: the reported loss at the epoch (noise drawn from the seed, the
/// trial and the epoch, as in `run_one`) and the true final loss.
pub fn serve_line(problems: &[CurveProblem], line: &str) -> anyhow::Result<serde_json::Value> {
    let r: serde_json::Value = serde_json::from_str(line).context("not a JSON line")?;
    let r = r.as_object().context("not a JSON object")?;
    if let Some(k) = r
        .keys()
        .find(|k| !["problem", "seed", "params", "epoch", "trial"].contains(&k.as_str()))
    {
        anyhow::bail!("unknown key `{k}` (keys: problem, seed, params, epoch, trial)");
    }
    let int = |k: &str, default: Option<u64>| -> anyhow::Result<u64> {
        match r.get(k) {
            Some(v) => v
                .as_u64()
                .with_context(|| format!("`{k}`: {v} is not a non-negative integer")),
            None => default.with_context(|| format!("`{k}` is missing")),
        }
    };
    let name = r
        .get("problem")
        .and_then(|v| v.as_str())
        .context("`problem` is missing or not a string")?;
    let (seed, epoch, trial) = (
        int("seed", None)?,
        int("epoch", None)?,
        int("trial", Some(0))?,
    );
    let p = problems
        .iter()
        .find(|p| p.name == name)
        .with_context(|| format!("no problem named {name:?}"))?;
    anyhow::ensure!(
        (1..=p.epochs).contains(&epoch),
        "epoch {epoch} is not in 1..={} of {}",
        p.epochs,
        p.name
    );
    let mut params = tune::space::Params::new();
    for (k, v) in r
        .get("params")
        .and_then(|v| v.as_object())
        .context("`params` is missing or not an object")?
    {
        let v = tune::space::ParamValue::from_json(v)
            .with_context(|| format!("param `{k}`: {v} is not a number, string or boolean"))?;
        params.insert(k.clone(), v);
    }
    p.space()?
        .validate(&params)
        .with_context(|| format!("params of {}", p.name))?;
    let curve = p.run_curve(&params, seed)?;
    let truth = curve.losses[(epoch - 1) as usize];
    let value = observe(p, truth, seed, trial, epoch);
    let finite = |v: f64| v.is_finite().then_some(v);
    Ok(serde_json::json!({ "value": finite(value), "final": finite(curve.last()) }))
}

fn serve(opts: &Options) -> anyhow::Result<()> {
    use std::io::{BufRead, Write};
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line.context("reading standard input")?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = serve_line(&opts.problems, &line)
            .unwrap_or_else(|e| serde_json::json!({ "error": format!("{e:#}") }));
        writeln!(out, "{answer}").context("writing standard output")?;
        out.flush().context("writing standard output")?;
    }
    Ok(())
}

pub fn run(a: &MultifidelityArgs) -> anyhow::Result<ExitCode> {
    let opts = Options::from_args(a)?;
    if let Some(n) = a.ask_time {
        for name in ["power_hartmann6", "crossing_bowl"] {
            let problem = curves::curve_problems()
                .into_iter()
                .find(|p| p.name == name)
                .context("a learning-curve problem of the family")?;
            let mut kinds: Vec<SamplerKind> = Vec::new();
            for arm in &opts.arms {
                if !kinds.contains(&arm.sampler) {
                    kinds.push(arm.sampler);
                }
            }
            let rows = kinds
                .into_iter()
                .map(|kind| crate::mf_ask::measure(&problem, kind, n))
                .collect::<anyhow::Result<Vec<_>>>()?;
            println!("{}", crate::mf_ask::render(name, n, &rows));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.serve {
        serve(&opts)?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.list {
        println!("{}", list(&opts)?);
        return Ok(ExitCode::SUCCESS);
    }
    let t0 = Instant::now();
    let m = measure(&opts)?;
    print!("{}", render(&opts, &m));
    println!(
        "\n{:.0} s on {} threads",
        t0.elapsed().as_secs_f64(),
        opts.jobs
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(shape: curves::Shape) -> CurveProblem {
        curves::curve_problems()
            .into_iter()
            .find(|p| p.shape == shape && p.noise == 0.0 && p.epochs == 27)
            .unwrap()
    }

    fn arm(sampler: SamplerKind, pruner: PrunerArm) -> Arm {
        Arm {
            sampler,
            sampler_name: "t",
            pruner,
        }
    }

    #[test]
    fn without_pruning_every_trial_runs_its_epochs_and_the_compute_is_exact() {
        let p = problem(curves::Shape::PowerLaw);
        let r = run_one(
            &p,
            arm(SamplerKind::Random, PrunerArm::None),
            1,
            1,
            &[2.0, 5.0],
        )
        .unwrap();
        assert_eq!(r.trials, 5);
        assert_eq!(r.complete, 5);
        assert_eq!((r.pruned, r.false_stops), (0, 0));
        assert_eq!(r.best.len(), 2);
        assert!(r.best[1] <= r.best[0]);
        assert!(r.best[1] >= curves::OPTIMUM);
    }

    #[test]
    fn asha_starts_more_trials_than_no_pruning_for_the_same_compute() {
        let p = problem(curves::Shape::Exponential);
        let none = run_one(&p, arm(SamplerKind::Random, PrunerArm::None), 3, 2, &[10.0]).unwrap();
        let asha = run_one(&p, arm(SamplerKind::Random, PrunerArm::Asha), 3, 2, &[10.0]).unwrap();
        assert!(none.trials <= 11, "{}", none.trials);
        assert!(
            asha.trials > 2 * none.trials,
            "{} vs {}",
            asha.trials,
            none.trials
        );
        assert!(asha.complete < asha.trials);
        // Every trial started ran to its end, was stopped, or was still on one of the 2 workers
        // when the compute ran out (none diverge here); a stop that cost the run its best trial
        // is one of the stops.
        let ended = asha.pruned + asha.complete;
        assert!(ended <= asha.trials && ended + 2 >= asha.trials, "{asha:?}");
        assert!(asha.false_stops <= asha.pruned, "{asha:?}");
        // Pausing instead: some paused trials earn their promotion and resume where they
        // paused, so fewer new trials start for the same compute, and none is pruned (a
        // diverged one would be; none diverge here).
        // (Hyperband's brackets split the trials, so its rungs fill later: more compute.)
        for (promote, budget) in [
            (PrunerArm::AshaPromote, 10.0),
            (PrunerArm::HyperbandPromote, 30.0),
        ] {
            let r = run_one(&p, arm(SamplerKind::Random, promote), 3, 2, &[budget]).unwrap();
            assert!(r.resumed > 0, "{promote:?}: {r:?}");
            assert_eq!(r.pruned, 0, "{promote:?}: {r:?}");
            assert!(r.trials > none.trials, "{promote:?}: {r:?}");
        }
    }

    #[test]
    fn pbt_children_start_at_their_parents_epoch_and_pay_only_the_epochs_they_train() {
        let p = problem(curves::Shape::Exponential);
        // Four workers: parents are often still running when a trial is exploited, so most
        // children have epochs left to train.
        let (r, engine) =
            run_study(&p, arm(SamplerKind::Random, PrunerArm::Pbt), 3, 4, &[10.0]).unwrap();
        assert!(r.exploited > 0, "{r:?}");
        // An exploited trial is not a stop that cost the run its best trial.
        assert_eq!((r.pruned, r.false_stops), (0, 0), "{r:?}");
        let storage = engine.storage();
        let study = engine.study();
        let reports = storage.reports(study).unwrap();
        let parents: BTreeMap<_, _> = storage
            .lineage(study)
            .unwrap()
            .into_iter()
            .map(|l| (l.child, l.parent))
            .collect();
        // One child queued per exploited trial (the last may not have been claimed).
        assert_eq!(parents.len(), r.exploited, "{r:?}");
        let mut trained = 0;
        let mut inherited = 0;
        let mut copies = 0;
        for (number, curve) in &reports {
            let steps: Vec<u64> = curve.iter().map(|r| r.step).collect();
            let start = match parents.get(number) {
                // A child of a complete parent is its final model: one report, nothing trained.
                Some(parent) if parent.step == p.epochs => {
                    assert_eq!(steps, vec![p.epochs], "{number}");
                    copies += 1;
                    parent.step
                }
                Some(parent) => {
                    assert!(parent.step >= 1, "{number}: {parent:?}");
                    assert_eq!(steps[0], parent.step + 1, "{number}: {steps:?}");
                    inherited += parent.step;
                    parent.step
                }
                None => {
                    assert_eq!(steps[0], 1, "{number}: {steps:?}");
                    0
                }
            };
            // Every epoch once, from where the trial started.
            assert!(steps.windows(2).all(|w| w[1] == w[0] + 1), "{steps:?}");
            trained += steps.last().unwrap() - start;
        }
        assert!(
            parents
                .iter()
                .any(|(c, at)| at.step < p.epochs && reports.contains_key(c)),
            "some child trained"
        );
        // The compute is the epochs trained, one report each: 10 trials' worth, although the
        // trials reached further through what the children inherited.
        assert_eq!(trained, 10 * p.epochs);
        assert!(
            inherited > 0 && inherited <= r.inherited,
            "{inherited} vs {r:?}"
        );
        assert_eq!(copies, r.copies, "{r:?}");
        // The pick is the complete trial (children among them) with the best final. A child
        // that trained ends at its own params' curve's final (no noise here); one of a complete
        // parent at the parent's.
        let complete = storage
            .trials(study, Some(tune::trial::TrialState::Complete))
            .unwrap();
        assert!(
            complete
                .iter()
                .any(|t| parents.get(&t.number).is_some_and(|at| at.step < p.epochs)),
            "some child that trained completed"
        );
        let value_of = |n: TrialNumber| {
            let t = complete.iter().find(|t| t.number == n).unwrap();
            t.status.value().unwrap()
        };
        let best = complete
            .iter()
            .map(|t| {
                let last = match parents.get(&t.number) {
                    Some(at) if at.step == p.epochs => value_of(at.trial),
                    _ => p.run_curve(&t.params, 3).unwrap().last(),
                };
                assert_eq!(t.status.value(), Some(last), "{}", t.number);
                last
            })
            .fold(f64::INFINITY, f64::min);
        assert_eq!(r.best, vec![best]);
    }

    #[test]
    fn a_run_that_completed_nothing_scores_as_chance() {
        let p = problem(curves::Shape::Plateau);
        // Half a trial of compute on one worker: nothing can complete.
        let r = run_one(&p, arm(SamplerKind::Random, PrunerArm::None), 1, 1, &[0.5]).unwrap();
        assert_eq!(r.complete, 0);
        assert_eq!(r.best, vec![V0]);
    }

    #[test]
    fn diverging_trials_fail_and_are_never_the_incumbent() {
        let p = problem(curves::Shape::Diverging);
        let r = run_one(&p, arm(SamplerKind::Random, PrunerArm::None), 2, 1, &[30.0]).unwrap();
        assert!(r.complete < r.trials, "some of 30 random trials diverge");
        assert!(r.best[0].is_finite());
    }

    #[test]
    fn noise_is_the_same_for_the_same_trial_and_epoch_and_differs_between_them() {
        let mut p = problem(curves::Shape::PowerLaw);
        p.noise = 0.05;
        let a = observe(&p, 1.0, 7, 3, 4);
        assert_eq!(a, observe(&p, 1.0, 7, 3, 4));
        assert_ne!(a, observe(&p, 1.0, 7, 3, 5));
        assert_ne!(a, observe(&p, 1.0, 7, 4, 4));
        assert_ne!(a, 1.0);
    }

    #[test]
    fn the_summary_takes_the_mean_and_the_worst_seed_over_problems() {
        let cell = |s: Vec<f64>| Cell {
            scores: vec![s],
            loss: vec![0.0],
            trials: 0.0,
            complete: 0.0,
            pruned: 0.0,
            false_stops: 0.0,
            exploited: 0.0,
            copies: 0.0,
            inherited: 0.0,
            ask_ms: vec![],
        };
        let cells = [cell(vec![10.0, 50.0]), cell(vec![30.0, -10.0])];
        let (m, worst) = summary(&cells, 0);
        assert_eq!(m, 20.0);
        // seed 0: (10 + 30) / 2 = 20; seed 1: (50 - 10) / 2 = 20.
        assert_eq!(worst, 20.0);
        let cells = [cell(vec![0.0, 100.0]), cell(vec![0.0, 100.0])];
        assert_eq!(summary(&cells, 0), (50.0, 0.0));
    }

    #[test]
    fn serve_answers_the_reported_and_the_true_final_loss_of_the_same_problems() {
        let problems = curves::all_problems().unwrap();
        let p = problem(curves::Shape::PowerLaw);
        let params = p
            .space()
            .unwrap()
            .from_unit(&vec![0.4; p.space().unwrap().len()]);
        let curve = p.curve(&params);
        let json = serde_json::to_value(&params).unwrap();
        let line = serde_json::json!({"problem": p.name, "seed": 3, "params": json, "epoch": 5});
        let a = serve_line(&problems, &line.to_string()).unwrap();
        assert_eq!(a["value"].as_f64().unwrap(), curve.losses[4]);
        assert_eq!(a["final"].as_f64().unwrap(), curve.last());
        // The recorded problem: the seed picks the run.
        let real = problems.iter().find(|p| p.table.is_some()).unwrap();
        let params = real
            .space()
            .unwrap()
            .from_unit(&vec![0.9; real.space().unwrap().len()]);
        let json = serde_json::to_value(&params).unwrap();
        let line = serde_json::json!({"problem": real.name, "seed": 1, "params": json, "epoch": 2});
        let a = serve_line(&problems, &line.to_string()).unwrap();
        let run = real.run_curve(&params, 1).unwrap();
        assert_eq!(
            a["value"].as_f64(),
            run.losses[1].is_finite().then_some(run.losses[1])
        );
        // Mistakes are named.
        let bad = serde_json::json!({"problem": "nope", "seed": 1, "params": {}, "epoch": 2});
        let e = format!("{:#}", serve_line(&problems, &bad.to_string()).unwrap_err());
        assert!(e.contains("no problem named \"nope\""), "{e}");
        let bad = serde_json::json!({"problem": p.name, "seed": 1, "params": json, "epoch": 99});
        let e = format!("{:#}", serve_line(&problems, &bad.to_string()).unwrap_err());
        assert!(e.contains("epoch 99 is not in 1..=27"), "{e}");
    }

    #[test]
    fn list_gives_every_selected_problem_its_space_optimum_and_reference() {
        let opts = Options {
            problems: curves::all_problems()
                .unwrap()
                .into_iter()
                .filter(|p| p.name == "real_digits_mlp" || p.name == "crossing_bowl")
                .collect(),
            arms: vec![],
            seeds: 1,
            ref_seeds: 3,
            budgets: vec![2.0, 4.0],
            q: 1,
            jobs: 1,
            per_problem: false,
        };
        let l = list(&opts).unwrap();
        let ps = l["problems"].as_array().unwrap();
        assert_eq!(ps.len(), 2);
        for (p, j) in opts.problems.iter().zip(ps) {
            assert_eq!(j["name"], p.name.as_str());
            assert_eq!(j["optimum"].as_f64().unwrap(), p.optimum());
            let reference = j["reference"].as_array().unwrap();
            assert_eq!(reference.len(), 2);
            assert!(reference[1].as_f64().unwrap() >= p.optimum());
            // The space round-trips into the problem's own.
            let t: toml::Table = serde_json::from_value(j["space"].clone()).unwrap();
            assert_eq!(
                tune::space::Space::from_toml(&t).unwrap(),
                p.space().unwrap()
            );
        }
    }

    #[test]
    fn the_recorded_problem_is_scored_against_its_table_optimum() {
        let p = curves::all_problems()
            .unwrap()
            .into_iter()
            .find(|p| p.table.is_some())
            .unwrap();
        let r = run_one(&p, arm(SamplerKind::Random, PrunerArm::Asha), 2, 1, &[5.0]).unwrap();
        assert!(r.best[0] >= p.optimum());
        assert!(
            r.trials > 5,
            "ASHA starts more than five trials in five trials' compute"
        );
    }
}
