//! Command-line definitions (clap), nothing else. The commands themselves live in
//! `src/commands/`, one file each.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "tune",
    version,
    about = "Hyperparameter tuning: a Bayesian optimizer, a worker pool, SQLite storage and a live UI",
    long_about = "Hyperparameter tuning: a Bayesian optimizer, a worker pool, SQLite storage and a live UI.\n\n\
                  `tune STUDY.toml` is the same as `tune run STUDY.toml`."
)]
pub struct Cli {
    /// The SQLite database (overrides `[study] storage`; also from TUNE_DB).
    #[arg(long, global = true, env = "TUNE_DB", value_name = "PATH")]
    pub db: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or resume a study and run it until its budget is spent.
    Run(RunArgs),
    /// Every study in the database with its counts and best value.
    Studies(StudiesArgs),
    /// The trials of a study.
    Trials(TrialsArgs),
    /// The best trial of a study.
    Best(BestArgs),
    /// One trial whole: params, every report, logs.
    Show(ShowArgs),
    /// Follow a study that another process (or machine) runs, read-only, in the live UI.
    Watch(WatchArgs),
    /// Queue a trial with fixed params; it runs first and teaches the sampler like any other.
    Enqueue(EnqueueArgs),
    /// Drive the optimizer from another program over JSON lines (shared/spec/ask-tell.md).
    AskTell(AskTellArgs),
    /// Benchmarks that print ratios against a baseline measured in the same run.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The study file.
    pub study: PathBuf,
    /// Print one line per trial event instead of the live UI.
    #[arg(long)]
    pub no_tui: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    Table,
    Json,
}

/// Names a study: a study file, or `--study NAME` in the database.
#[derive(Debug, Args, Clone)]
pub struct StudyRef {
    /// The study file (its `[study] name` and `storage` pick the study and database).
    pub study_file: Option<PathBuf>,
    /// The study's name in the database (instead of a study file).
    #[arg(long = "study", value_name = "NAME")]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct StudiesArgs {
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateFilter {
    All,
    Queued,
    Running,
    Complete,
    Pruned,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    Number,
    Value,
}

#[derive(Debug, Args)]
pub struct TrialsArgs {
    #[command(flatten)]
    pub study: StudyRef,
    #[arg(long, value_enum, default_value = "all")]
    pub state: StateFilter,
    #[arg(long, value_enum, default_value = "number")]
    pub sort: SortKey,
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct BestArgs {
    #[command(flatten)]
    pub study: StudyRef,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The trial number, and optionally the study file (in either order).
    #[arg(num_args = 1..=2, required = true, value_name = "N [STUDY.toml]")]
    pub args: Vec<String>,
    #[arg(long = "study", value_name = "NAME")]
    pub name: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub study: StudyRef,
}

#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// The study file.
    pub study: PathBuf,
    /// The params as a JSON object, e.g. '{"lr": 0.01, "optimizer": "adam"}'.
    #[arg(long)]
    pub params: String,
}

#[derive(Debug, Args)]
pub struct AskTellArgs {
    /// A TOML file with a `[space]` table (shared/spec/ask-tell.md).
    #[arg(long)]
    pub space: PathBuf,
    /// The sampler (default: the one studies use).
    #[arg(long, default_value = "auto")]
    pub sampler: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value = "minimize")]
    pub direction: String,
    /// Record the exchange as this study in the database given by --db.
    #[arg(long)]
    pub study: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The orchestrator's own overhead: trials/s with trials that do nothing, the latency from
    /// a slot freeing to the next trial's process starting, and query times on 10 000 trials.
    Overhead(OverheadArgs),
    /// The optimizers on the benchmark problems of `shared/bench/`: mean simple regret and the
    /// normalised score (100 = optimum, 0 = random search's median, measured in the same run)
    /// at each budget, sequential and with trials pending, and the median ms per ask.
    Optimizers(OptimizersArgs),
    /// The built-in trainer against PyTorch eager (the same torch 2.13.0) on the same model,
    /// data and batch: samples/s of each and the ratio, fp32 and bf16. Arguments go to
    /// `tune-worker bench` (e.g. `--steps 200 --models mlp,cnn --amp off,bf16`).
    Trainer(TrainerBenchArgs),
    /// Pruning on a quickstart-shaped study (issue 5): `asha` against `none` with the same
    /// trials (best val_loss and epoch-compute of each) and with the same epoch-compute (best
    /// val_loss of each), per seed and the mean.
    Pruning(PruningArgs),
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
    /// ASHA's first rung, in epochs.
    #[arg(long, default_value_t = 1.0 / 3.0)]
    pub min_resource: f64,
    /// ASHA's reduction factor η.
    #[arg(long, default_value_t = 3.0)]
    pub reduction_factor: f64,
    /// The sampler of every study (`random` gives both pruners the very same configurations).
    #[arg(long, default_value = "random")]
    pub sampler: String,
    /// Worker slots.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
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
    /// Problems (comma list): names, `public` (the default), `extra` or `all`.
    #[arg(long, value_delimiter = ',')]
    pub problems: Vec<String>,
    /// Budgets (trials) at which regret and score are reported.
    #[arg(long, value_delimiter = ',', default_value = "10,25,50")]
    pub budgets: Vec<usize>,
    /// Samplers to compare.
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
