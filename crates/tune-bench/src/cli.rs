//! `tune-bench`'s command line (clap), nothing else: the same subcommands, flags and defaults
//! `tune bench` had when the benchmarks lived in `tune`, plus `tui`. `tune bench ARGS…` runs
//! this binary with the same arguments.

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "tune-bench",
    version,
    about = "Benchmarks of tune that print ratios against a baseline measured in the same run",
    long_about = "Benchmarks of tune that print ratios against a baseline measured in the same run.\n\n\
                  `tune bench ARGS` runs this binary with the same arguments; the overhead and \
                  pruning benchmarks run the `tune` binary installed beside it."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The orchestrator's own overhead: trials/s with trials that do nothing, the latency from
    /// a slot freeing to the next trial's process starting, and query times on 10 000 trials.
    Overhead(OverheadArgs),
    /// The optimizers on the benchmark problems of the benchmark suite: mean simple regret and the
    /// normalised score (100 = optimum, 0 = random search's median, measured in the same run)
    /// at each budget, sequential and with trials pending, and the median ms per ask.
    Optimizers(OptimizersArgs),
    /// The built-in trainer against PyTorch eager (the same torch 2.13.0) on the same model,
    /// data and batch: samples/s of each and the ratio, fp32, bf16 and fp16, on the CPU or a
    /// GPU. Arguments go to `tune-worker bench` (e.g. `--device cuda:0 --steps 200 --models
    /// mlp,cnn --amp off,bf16,fp16`).
    Trainer(TrainerBenchArgs),
    /// Pruning on a quickstart-shaped study (issue 5): `asha` against `none` with the same
    /// trials (best val_loss and epoch-compute of each) and with the same epoch-compute (best
    /// val_loss of each), per seed and the mean.
    Pruning(PruningArgs),
    /// Preemption (issue 27): a builtin study interrupted about once every N trial-epochs
    /// (SIGKILL, or SIGTERM with `--signal term`) and run again until done, with trial
    /// checkpoints and without: compute spent (wall time, epochs trained) over an uninterrupted
    /// study's, and whether the trials end at the uninterrupted values.
    Preemption(PreemptionArgs),
    /// The live UI (issue 6; goal: under 5 ms a frame): ms per frame with 10 000 trials at
    /// three terminal sizes, sorted by number and by value; the cost of one trial's events; and
    /// `tune watch`'s poll times on a database of as many trials.
    Tui(TuiArgs),
    /// Insight (issue 28; goal: `tune report` under 5 s at 10 000 trials): `tune report` and
    /// `tune importance` (PED-ANOVA, fANOVA) on a study of 10 000 trials with learning curves,
    /// and Optuna's `get_param_importances` with the same evaluators on the same file.
    Report(ReportBenchArgs),
    /// One study on one PostgreSQL server shared by 1, 8, 32 and 64 processes × 4 slots (what
    /// `tune worker` does to the database), against Optuna's RDBStorage on the same server with
    /// as many processes and tune on one SQLite file: trials/s, p50/p95 ask-and-claim latency,
    /// connections held, errors; with `--trial-ms 1000`, the orchestration overhead.
    Storage(StorageArgs),
    /// Multi-objective search (issue 13): hypervolume of the Pareto front after each budget on
    /// ZDT1, ZDT2, DTLZ2 (3 objectives) and a training-shaped problem (loss, seconds), mean
    /// and worst seed, as a fraction of the true front's, and ms per ask.
    Multi(MultiArgs),
    /// Learning curves (issue 26): every sampler × pruner on simulated trainings (power-law,
    /// exponential, crossing, plateau and diverging curves, some noisy), scored on the true
    /// final loss of the trial a user would pick after 10, 30 and 100 full trials' worth of
    /// epochs, against random search without pruning at the same compute.
    Multifidelity(MultifidelityArgs),
    /// Growth with input size (issue 29, item 15): each case at n and 10 n in the same run,
    /// and the ratio of per-item costs (1: linear, 10: quadratic): one trial's reports absorbed
    /// by the engine (no pruner, ASHA, median; memory and SQLite), a categorical's check,
    /// a stored log tail; and `tune discard` on a range as wide as the study against
    /// `0-99999999999`.
    Scaling(ScalingArgs),
    /// One process of `tune bench storage` (internal).
    #[command(hide = true)]
    StorageClient(StorageClientArgs),
}

#[derive(Debug, Args)]
pub struct StorageArgs {
    /// A PostgreSQL server to use (`postgresql://USER:PW@HOST:PORT`, no database: the benchmark
    /// creates its own); default: a private one started for the run (needs Debian's
    /// PostgreSQL 15 and root).
    #[arg(long)]
    pub url: Option<String>,
    /// Process counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    pub procs: Vec<usize>,
    /// Seconds each measurement runs.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// How long each trial takes (0: no-op trials; 1000: the overhead measurement).
    #[arg(long, default_value_t = 0)]
    pub trial_ms: u64,
    /// tune's sampler (`tpe` is what Optuna's default is).
    #[arg(long, default_value = "tpe")]
    pub sampler: String,
    /// The Python with optuna and psycopg2 (`scripts/setup.sh --python-tests` makes .venv).
    #[arg(long, default_value = ".venv/bin/python")]
    pub python: String,
    /// Skip Optuna's side.
    #[arg(long)]
    pub no_optuna: bool,
    /// Skip tune on SQLite.
    #[arg(long)]
    pub no_sqlite: bool,
}

#[derive(Debug, Args)]
pub struct StorageClientArgs {
    #[arg(long)]
    pub url: String,
    #[arg(long)]
    pub seconds: f64,
    #[arg(long, default_value_t = 0)]
    pub trial_ms: u64,
    #[arg(long, default_value = "tpe")]
    pub sampler: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Unix time at which to start, so all processes start together.
    #[arg(long)]
    pub start_at: f64,
}

#[derive(Debug, Args)]
pub struct PreemptionArgs {
    /// Seeds; each runs every arm on its own params and interruption schedule.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub seeds: Vec<u64>,
    /// Trials of each study (enqueued params, the same in every arm).
    #[arg(long, default_value_t = 8)]
    pub trials: u64,
    /// Epochs of a trial.
    #[arg(long, default_value_t = 6)]
    pub epochs: u64,
    /// Training images used (of Fashion-MNIST's 60 000).
    #[arg(long, default_value_t = 5_000)]
    pub limit: u64,
    /// Worker slots.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// The mean number of reported trial-epochs between two interruptions.
    #[arg(long, default_value_t = 6.0)]
    pub every: f64,
    /// `kill` (SIGKILL: a lost machine) or `term` (SIGTERM: a preemption, with its grace).
    #[arg(long, default_value = "kill")]
    pub signal: String,
    /// Keep the temp dir with the study files and databases (its path is printed).
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct PruningArgs {
    /// Study seeds; each runs the whole comparison.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub seeds: Vec<u64>,
    /// Trials of the same-trials comparison (both `none` and `asha`).
    #[arg(long, default_value_t = 16)]
    pub trials: u64,
    /// Epochs of a full trial.
    #[arg(long, default_value_t = 9)]
    pub epochs: u64,
    /// Training images used (of Fashion-MNIST's 60 000; validation is always its 10 000).
    #[arg(long, default_value_t = 10_000)]
    pub limit: u64,
    /// Report (and evaluate) every this many optimizer steps, so that rungs can sit inside
    /// an epoch.
    #[arg(long, default_value_t = 13)]
    pub report_every: u64,
    /// The pruner set against `none`: `asha`, `hyperband`, `median`, `forecast`, `pbt`
    /// (population-based training: a point every third of the epochs, the slots as its
    /// population; a child counts only the epochs it trained past its parent's checkpoint), or
    /// `default`
    /// (a builtin study without a `[pruner]` table: what a user gets).
    #[arg(long, default_value = "asha")]
    pub pruner: String,
    /// The pruner's first rung (`asha`, `hyperband`) or first judged report (`median`,
    /// `forecast`), in epochs [default: 1/3 for `asha`, the pruner's own default otherwise].
    #[arg(long)]
    pub min_resource: Option<f64>,
    /// The reduction factor η of `asha` and `hyperband`.
    #[arg(long, default_value_t = 3.0)]
    pub reduction_factor: f64,
    /// The sampler of every study (`random` gives both pruners the very same configurations).
    #[arg(long, default_value = "random")]
    pub sampler: String,
    /// Worker slots.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// The device every slot trains on: `cpu`, or a GPU such as `cuda:0` (the slots share it).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Keep the temp dir with the study files and databases (its path is printed).
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
pub struct TrainerBenchArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct OptimizersArgs {
    /// Seeds per sampler, problem and mode.
    #[arg(long, default_value_t = 10)]
    pub seeds: u64,
    /// Seeds of the random-search reference.
    #[arg(long, default_value_t = 50)]
    pub random_seeds: u64,
    /// Problems (comma list): names, `public` (the default), `extra`, `trap` (a low-cardinality
    /// value that looks best early, another that wins), `fail` (regions where trials fail), `cost` (trial durations that vary with
    /// the params: regret within budgets of simulated time), `noisy` (public problems with
    /// Gaussian noise on every value, scored on the true value of the trial that looked best) or
    /// `all`.
    #[arg(long, value_delimiter = ',')]
    pub problems: Vec<String>,
    /// Budgets (trials) at which regret and score are reported.
    #[arg(long, value_delimiter = ',', default_value = "10,25,50")]
    pub budgets: Vec<usize>,
    /// Samplers to compare: `random`, `tpe`, `gp`, `auto`, and `gp-penalty` (the GP without its
    /// failure classifier: a failed trial only enters the model at the worst value) and
    /// `gp-plain` (the GP without its cost model: plain log EI).
    #[arg(long, value_delimiter = ',', default_value = "random,tpe,gp,auto")]
    pub samplers: Vec<String>,
    /// Outstanding asks: 1 is sequential.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub q: Vec<usize>,
    /// Trial counts at which the median ms per ask is reported (`none` to skip).
    #[arg(long, value_delimiter = ',', default_value = "25,50,100,200")]
    pub timing_at: Vec<String>,
    /// Seeds of the timing runs.
    #[arg(long, default_value_t = 1)]
    pub timing_seeds: u64,
    /// Trials of the initial design (default: each sampler's own).
    #[arg(long)]
    pub n_startup: Option<usize>,
}

#[derive(Debug, Args)]
pub struct MultiArgs {
    /// Samplers to compare: `tune`'s names, or `nsga2-pN` (NSGA-II with population N).
    #[arg(long, value_delimiter = ',', default_value = "random,nsga2,tpe,gp")]
    pub samplers: Vec<String>,
    /// Seeds per sampler and problem (0..seeds).
    #[arg(long, default_value_t = 10)]
    pub seeds: u64,
    /// Budgets (trials) at which hypervolume is reported.
    #[arg(long, value_delimiter = ',', default_value = "25,50")]
    pub budgets: Vec<usize>,
    /// Outstanding asks: 1 is sequential.
    #[arg(long, default_value_t = 1)]
    pub q: usize,
    /// Problems (comma list; default all): zdt1, zdt2, dtlz2, train.
    #[arg(long, value_delimiter = ',')]
    pub problems: Vec<String>,
}

#[derive(Debug, Args)]
pub struct MultifidelityArgs {
    /// Problems (comma list): names, shapes (`power`, `exp`, `crossing`, `plateau`,
    /// `diverging`), bases (`bowl`, `branin`, `hartmann6`) or `all`.
    #[arg(long, default_value = "all")]
    pub problems: String,
    /// Samplers (comma list): `random`, `tpe`, `gp`, `auto`, `sobol`.
    #[arg(long, default_value = "random,tpe,gp")]
    pub samplers: String,
    /// Pruners paired with every sampler (comma list): `none`, `median`, `asha`,
    /// `asha-promote` (ASHA that pauses and promotes), `hyperband`, `hyperband-promote`,
    /// `forecast`, `pbt` (population-based training; a child follows its own params' curve
    /// from its parent's checkpoint epoch, the epochs before it inherited at no cost).
    #[arg(long, default_value = "none,asha,hyperband,forecast")]
    pub pruners: String,
    /// Seeds per sampler, pruner and problem (0..seeds).
    #[arg(long, default_value_t = 20)]
    pub seeds: u64,
    /// Seeds of the reference (random search without pruning).
    #[arg(long, default_value_t = 50)]
    pub ref_seeds: u64,
    /// Budgets in full-trial equivalents of compute (comma list).
    #[arg(long, default_value = "10,30,100")]
    pub budgets: String,
    /// Workers training trials side by side.
    #[arg(long, default_value_t = 1)]
    pub q: usize,
    /// Threads running studies side by side.
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Also print a table per problem.
    #[arg(long)]
    pub per_problem: bool,
    /// Instead of the scores: the ask time of each sampler at this many finished trials with
    /// 20 reports or more each (on power_hartmann6 and crossing_bowl, the forecast pruner).
    #[arg(long)]
    pub ask_time: Option<usize>,
    /// Print the selected problems as one JSON object instead of running (name, epochs,
    /// optimum, space, random search's median final loss at each budget), for other
    /// optimizers' harnesses (python/multifidelity_bench.py).
    #[arg(long, conflicts_with = "serve")]
    pub list: bool,
    /// Answer evaluations instead of running: reads JSON lines `{"problem", "seed", "params",
    /// "epoch", "trial"}` on standard input, writes `{"value", "final"}` lines (the reported
    /// loss at that epoch and the true final loss; null for NaN) or `{"error"}`.
    #[arg(long)]
    pub serve: bool,
}

#[derive(Debug, Args)]
pub struct OverheadArgs {
    /// Trials in the throughput study.
    #[arg(long, default_value_t = 200)]
    pub trials: u64,
    /// Worker slots.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Trials in the query study.
    #[arg(long, default_value_t = 10_000)]
    pub query_trials: u64,
    /// Repetitions of each query.
    #[arg(long, default_value_t = 10)]
    pub repeat: usize,
}

#[derive(Debug, Args)]
pub struct ScalingArgs {
    /// Runs of each measurement; the median is shown.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Sizes a tenth as large (a test of the harness, not a measurement).
    #[arg(long)]
    pub quick: bool,
}

#[derive(Debug, Args)]
pub struct TuiArgs {
    /// Frames drawn per terminal size and sort order (after one warm-up frame).
    #[arg(long, default_value_t = 200)]
    pub frames: u32,
    /// Finished trials in the study that is drawn and in the database that is polled.
    #[arg(long, default_value_t = 10_000)]
    pub trials: u64,
}

#[derive(Debug, Args)]
pub struct ReportBenchArgs {
    /// Trials in the study.
    #[arg(long, default_value_t = 10_000)]
    pub trials: u64,
    /// Reports (learning-curve points) of a trial that runs to its end.
    #[arg(long, default_value_t = 20)]
    pub steps: u64,
    /// Runs of each `tune` command (the median is printed).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Runs of each Optuna evaluator (the median is printed).
    #[arg(long, default_value_t = 1)]
    pub optuna_repeat: u32,
    /// The Python with optuna and scikit-learn (`scripts/setup.sh --python-tests` makes .venv).
    #[arg(long, default_value = ".venv/bin/python")]
    pub python: String,
    /// Skip Optuna's side.
    #[arg(long)]
    pub no_optuna: bool,
    /// Stop an Optuna evaluator still running after this many seconds of wall time (its
    /// process: the interpreter's start and the imports included) and print "> LIMIT s":
    /// Optuna's fANOVA runs for hours at 10 000 trials.
    #[arg(long, default_value_t = 600)]
    pub optuna_limit: u64,
}
