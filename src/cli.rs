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
    /// Where studies live (overrides `[study] storage`; also from TUNE_DB): a SQLite file
    /// (`tune.db`, `sqlite:///tune.db`) or a PostgreSQL server
    /// (`postgresql://USER@HOST:PORT/DBNAME?sslmode=require`; keep the password in TUNE_DB,
    /// PGPASSWORD or ~/.pgpass rather than on the command line).
    #[arg(
        long,
        global = true,
        env = "TUNE_DB",
        value_name = "PATH|URL",
        hide_env_values = true
    )]
    pub db: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or resume a study and run it until its budget is spent.
    #[command(after_help = "Examples:\n  \
        tune run studies/quickstart.toml      # the live UI on a terminal\n  \
        tune studies/quickstart.toml          # the same (the shortcut)\n  \
        tune --db runs.db study.toml --no-tui # one line per trial event, in runs.db")]
    Run(RunArgs),
    /// Every study in the database with its counts and best value.
    #[command(after_help = "Examples:\n  \
        tune studies\n  \
        tune studies --db sweeps.db --format json")]
    Studies(StudiesArgs),
    /// The trials of a study.
    #[command(after_help = "Examples:\n  \
        tune trials study.toml --sort value --limit 5\n  \
        tune trials --study my-study --state failed --format json\n  \
        tune trials study.toml --format csv > trials.csv")]
    Trials(TrialsArgs),
    /// The best trial of a study.
    #[command(after_help = "Examples:\n  \
        tune best study.toml\n  \
        tune best --study my-study --format json")]
    Best(BestArgs),
    /// One trial whole: params, every report, logs.
    #[command(after_help = "Examples:\n  \
        tune show 7 study.toml\n  \
        tune show 7 --study my-study --format json\n  \
        tune show 7 study.toml --format csv   # the learning curve, one row per report")]
    Show(ShowArgs),
    /// Follow a study that another process (or machine) runs, read-only, in the live UI.
    #[command(after_help = "Examples:\n  \
        tune watch study.toml\n  \
        tune watch --study my-study --db postgresql://tune@db.example/tune")]
    Watch(WatchArgs),
    /// Queue a trial with fixed params; it runs first and teaches the sampler like any other.
    #[command(after_help = "Example:\n  \
        tune enqueue study.toml --params '{\"lr\": 0.01, \"optimizer\": \"adam\"}'")]
    Enqueue(EnqueueArgs),
    /// Drive the optimizer from another program over JSON lines (docs/ask-tell.md).
    #[command(after_help = "Example:\n  \
        echo '{\"ask\": {}}' | tune ask-tell --space space.toml --seed 1")]
    AskTell(AskTellArgs),
    /// Benchmarks that print ratios against a baseline measured in the same run (the
    /// `tune-bench` binary installed beside `tune`; `tune bench --help` lists them).
    Bench(BenchArgs),
    /// Join a study from this machine: run its trials on this machine's devices, with the
    /// study's definition read from the database (`tune run STUDY.toml --db URL` stores it).
    #[command(after_help = "Examples:\n  \
        export TUNE_DB='postgresql://tune@db.example:5432/tune?sslmode=require'\n  \
        tune run study.toml --no-tui          # once, anywhere: stores the study\n  \
        tune worker --study my-study --devices auto   # on every GPU machine")]
    Worker(WorkerArgs),
    /// Delete a study whole from its database: trials, params, values, curves, reports.
    #[command(after_help = "Examples:\n  \
        tune delete study.toml            # asks first\n  \
        tune delete --study old-sweep --db tune.db --yes")]
    Delete(DeleteArgs),
    /// Set finished trials aside: they stay stored and shown, but the sampler does not learn
    /// from them, the budget does not count them and they are never the best.
    #[command(
        after_help = "Trials are numbers (`3`), ranges (`3-7`) or both; the study file may \
        come before or after them. `--restore` takes the mark back.\n\n\
        Examples:\n  \
        tune discard study.toml 0-11          # a broken set-up failed trials 0 to 11\n  \
        tune discard study.toml --state failed\n  \
        tune discard --study my-study --db tune.db 4 9\n  \
        tune discard study.toml --restore 4"
    )]
    Discard(DiscardArgs),
    /// Which parameters mattered: each parameter's importance for each objective.
    #[command(after_help = "Examples:\n  \
        tune importance study.toml\n  \
        tune importance --study my-study --format json\n  \
        tune importance study.toml --objective 1 --format csv")]
    Importance(ImportanceArgs),
    /// Draw one figure of a study into an SVG or PNG file (docs/report.md).
    #[command(after_help = "Examples:\n  \
        tune plot history study.toml -o history.svg\n  \
        tune plot slice study.toml --params lr,batch -o slice.png\n  \
        tune plot timeline --study my-study --db tune.db -o slots.svg")]
    Plot(PlotArgs),
    /// One self-contained HTML page of a study: its definition, summary, every figure and its
    /// failures (docs/report.md).
    #[command(after_help = "Examples:\n  \
        tune report study.toml -o report.html\n  \
        tune report --study my-study --db postgresql://tune@db.example/tune -o report.html")]
    Report(ReportArgs),
    /// Copy studies between databases (SQLite ⇄ PostgreSQL), trials, reports and all.
    #[command(after_help = "Examples:\n  \
        tune copy --from tune.db --to postgresql://tune@db.example/tune --study my-study\n  \
        tune copy --from postgresql://tune@db.example/tune --to backup.db")]
    Copy(CopyArgs),
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The study to join (its name in the database).
    #[arg(long, value_name = "NAME")]
    pub study: String,
    /// How many trials to run at once on this machine, 1 to 1024 (default: the study file's
    /// `workers.count`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub count: Option<u64>,
    /// This machine's devices for the slots: `auto`, or a comma-separated list such as
    /// `cuda:0,cuda:1` or `cpu` (default: the study file's `workers.devices`). A list without
    /// `--count` gets one slot per device listed.
    #[arg(long, value_name = "LIST")]
    pub devices: Option<String>,
    /// Where this machine writes trial directories (default: the study file's `runs_dir`,
    /// relative to --dir).
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// The directory that stands for the study file's directory on this machine: commands run
    /// there and relative paths resolve from it (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// How long to wait for a study that does not exist yet (e.g. `30s`, `10m`; at most
    /// `10y`).
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub wait: String,
    /// Print one line per trial event instead of the live UI.
    #[arg(long)]
    pub no_tui: bool,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub study: StudyRef,
    /// Do not ask (needed when standard input is not a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct DiscardArgs {
    /// Trial numbers or ranges (`3`, `3-7`), and optionally the study file, in any order.
    #[arg(value_name = "N|A-B|STUDY.toml")]
    pub args: Vec<String>,
    /// The study's name in the database (instead of a study file).
    #[arg(long = "study", value_name = "NAME")]
    pub name: Option<String>,
    /// Every finished trial in this state too (`complete`, `pruned` or `failed`).
    #[arg(long, value_enum, value_name = "STATE")]
    pub state: Option<FinishedState>,
    /// Take the mark back: the trials count again.
    #[arg(long)]
    pub restore: bool,
}

/// The states a trial ends in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FinishedState {
    Complete,
    Pruned,
    Failed,
}

#[derive(Debug, Args)]
pub struct CopyArgs {
    /// The database to copy from: a SQLite file or `sqlite:///…`, or `postgresql://…`.
    #[arg(long, value_name = "PATH|URL")]
    pub from: String,
    /// The database to copy into (created or migrated as needed).
    #[arg(long, value_name = "PATH|URL")]
    pub to: String,
    /// Copy only this study (default: every study).
    #[arg(long, value_name = "NAME")]
    pub study: Option<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The study file.
    pub study: PathBuf,
    /// Go on with a study whose search space in the file differs from the one it was
    /// created with (refused otherwise: a changed space is usually a mistake).
    #[arg(long)]
    pub allow_space_change: bool,
    /// Print one line per trial event instead of the live UI.
    #[arg(long)]
    pub no_tui: bool,
}

/// How a query prints: a table for people, JSON (docs/cli.md has the shapes) or CSV for
/// spreadsheets and pandas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
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
    /// Output: `table` for people, `json` (shapes in docs/cli.md) or `csv`.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
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
    /// Only the trials in this state (`queued` trials wait for a slot; `failed` includes
    /// interrupted ones).
    #[arg(long, value_enum, default_value = "all")]
    pub state: StateFilter,
    /// `number` (the order they started in) or `value` (best first, in the study's
    /// direction; trials without a value last).
    #[arg(long, value_enum, default_value = "number")]
    pub sort: SortKey,
    /// At most this many trials, after filtering and sorting.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Output: `table` for people, `json` (shapes in docs/cli.md) or `csv`.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ImportanceArgs {
    #[command(flatten)]
    pub study: StudyRef,
    /// How importance is measured (`ped-anova`: Optuna's default, with its defaults; `fanova`).
    #[arg(long, value_enum, default_value = "ped-anova")]
    pub method: ImportanceMethod,
    /// Output: `text` (bars) for people, `json` (shape in docs/cli.md) or `csv`.
    #[arg(long, value_enum, default_value = "text")]
    pub format: TextFormat,
    /// Only this objective (0 is the first) of a multi-objective study; every one otherwise.
    #[arg(long, value_name = "N")]
    pub objective: Option<usize>,
}

/// A parameter-importance method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportanceMethod {
    PedAnova,
    /// fANOVA on a random forest (Optuna's `FanovaImportanceEvaluator`).
    Fanova,
}

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The figure (docs/report.md says what each shows).
    #[arg(value_enum, value_name = "KIND")]
    pub kind: PlotKind,
    #[command(flatten)]
    pub study: StudyRef,
    /// The file to write: `.svg` or `.png` (its directory must exist).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    /// The parameters of `slice` (any number) or `contour` (two), comma-separated (default: the
    /// most important).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub params: Vec<String>,
    /// The objective the figures show, by number (0 is the first) or metric name; the first
    /// when not given. Its Pareto front pairs it with the study's first objective.
    #[arg(long, value_name = "N|METRIC")]
    pub objective: Option<String>,
    /// The figure's width in pixels.
    #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u32).range(200..=8000))]
    pub width: u32,
    /// The figure's height in pixels.
    #[arg(long, default_value_t = 520, value_parser = clap::value_parser!(u32).range(150..=8000))]
    pub height: u32,
}

/// A figure of `tune plot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlotKind {
    /// Each trial's value by number, and the best so far.
    History,
    /// Each parameter's share of the importance (PED-ANOVA).
    Importance,
    /// The objective against each of the most important parameters (or `--params`).
    Slice,
    /// The best value over a grid of the two most important parameters (or `--params A,B`).
    Contour,
    /// The best 50 complete trials across the parameters and the objective.
    Parallel,
    /// The learning curves of the best 10 complete trials.
    Curves,
    /// The learning curves of pruned trials, by the step they stopped at.
    PrunedCurves,
    /// A multi-objective study's Pareto front on its first two objectives.
    Pareto,
    /// Which trial ran on which slot and when.
    Timeline,
    /// How many trials failed for each reason.
    Failures,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub study: StudyRef,
    /// The HTML file to write (`.html` or `.htm`; its directory must exist).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    /// The objective the report is about, by number (0 is the first) or metric name; the
    /// first when not given.
    #[arg(long, value_name = "N|METRIC")]
    pub objective: Option<String>,
}

/// How an insight command prints: text for people, JSON or CSV for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TextFormat {
    Text,
    Json,
    Csv,
}

#[derive(Debug, Args)]
pub struct BestArgs {
    #[command(flatten)]
    pub study: StudyRef,
    /// Output: `table` for people, `json` (shapes in docs/cli.md) or `csv`.
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
    /// Output: `table` for people, `json` (shapes in docs/cli.md) or `csv`.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
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
    /// A TOML file with a `[space]` table (docs/ask-tell.md).
    #[arg(long)]
    pub space: PathBuf,
    /// The sampler (default: the one studies use).
    #[arg(long, default_value = "auto")]
    pub sampler: String,
    /// The sampler's seed: the same seed and tells give the same asks.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `minimize` or `maximize` the told values; several objectives: a comma-separated list
    /// (`minimize,maximize`), each trial then told `"values": [..]`, one per objective.
    #[arg(long, default_value = "minimize")]
    pub direction: String,
    /// Record the exchange as this study in the database given by --db.
    #[arg(long)]
    pub study: Option<String>,
    /// Judge `report` requests with this pruner: none, median, asha, hyperband or forecast,
    /// with its defaults over the reports' steps (or a `[pruner]` table in the --space file).
    #[arg(long, value_name = "KIND")]
    pub pruner: Option<String>,
    /// The step of a full trial, for the pruner (asha: its last rung below; hyperband and
    /// forecast need it).
    #[arg(long, value_name = "STEPS")]
    pub max_resource: Option<f64>,
}

/// `tune bench ARGS…`: everything after `bench` goes unread to the `tune-bench` binary, which
/// owns the benchmarks' flags and help; clap must not answer `--help` itself here, or
/// `tune bench optimizers --help` would show this pass-through instead of the benchmark's flags.
#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct BenchArgs {
    /// The benchmark and its flags (`tune bench --help` lists them).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "BENCHMARK ARGS"
    )]
    pub args: Vec<std::ffi::OsString>,
}
