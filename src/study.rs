//! The validated study: what the scheduler runs. Built only by [`crate::spec::load`], so nothing
//! downstream validates again.

use std::path::PathBuf;
use std::time::Duration;

use crate::pruner::PrunerConfig;
use crate::sampler::{SamplerKind, SamplerOptions};
use crate::space::{Params, Space};
use crate::trial::{Direction, Objective};

/// How each trial runs.
#[derive(Debug, Clone)]
pub enum TrialSpec {
    Command(CommandSpec),
    /// `[trial] kind = "builtin"`: the libtorch trainer in `tune-worker` processes.
    Builtin(Box<crate::builtin::BuiltinTrial>),
}

impl TrialSpec {
    /// `checkpoint_dir` when it names a directory: every trial's checkpoints in
    /// `<dir>/<study>/trial-NNNNN` (`crate::checkpoint::trial_dir`); `None`: the default place.
    pub fn checkpoint_dir(&self) -> Option<&std::path::Path> {
        match self {
            TrialSpec::Command(c) => match c.checkpoint_dir.as_deref() {
                Some(crate::checkpoint::Location::Dir(d)) => Some(d),
                _ => None,
            },
            TrialSpec::Builtin(b) => b.checkpoints.dir.as_deref(),
        }
    }

    /// `checkpoint_dir` when it names an object store, where tune keeps a copy of every
    /// trial's checkpoints (a builtin study's only while `checkpoints` is on).
    pub fn checkpoint_store(&self) -> Option<&crate::checkpoint::StoreUrl> {
        match self {
            TrialSpec::Command(c) => match c.checkpoint_dir.as_deref() {
                Some(crate::checkpoint::Location::Store(u)) => Some(u),
                _ => None,
            },
            TrialSpec::Builtin(b) if b.checkpoints.enabled => b.checkpoints.store.as_ref(),
            TrialSpec::Builtin(_) => None,
        }
    }

    /// What stays of a trial's checkpoints when it ends (a command study keeps none).
    pub fn keep_checkpoints(&self) -> crate::checkpoint::Keep {
        match self {
            TrialSpec::Command(_) => crate::checkpoint::Keep::None,
            TrialSpec::Builtin(b) => b.checkpoints.keep,
        }
    }

    /// The per-trial wall-clock limit.
    pub fn timeout(&self) -> Option<Duration> {
        match self {
            TrialSpec::Command(c) => c.timeout,
            TrialSpec::Builtin(b) => b.timeout,
        }
    }
}

/// `[trial] kind = "command"` (`docs/command-trials.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct CommandSpec {
    /// The argument vector with `{name}` placeholders (checked: every name is known).
    pub argv: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Per-trial wall-clock limit.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL when a trial is stopped.
    pub grace: Duration,
    /// The working directory: the study file's directory.
    pub workdir: PathBuf,
    /// Files the command needs (`[trial] requires`), relative to `workdir`: checked before any
    /// trial starts, so a study copied without them stops at once, naming them.
    pub requires: Vec<PathBuf>,
    /// A command run once before any trial (`[trial] check`, empty: none): when it fails, the
    /// study does not start and its standard error says why.
    pub check: Vec<String>,
    /// `[trial] launcher = "torchrun"`: `argv` is a Python script and its arguments, run on
    /// every GPU of the slot by `python -m torch.distributed.run`.
    pub launcher: Option<Launcher>,
    /// `[trial] checkpoint_dir`: where `TUNE_CHECKPOINT_DIR` points (a directory), or an
    /// object store tune copies it to; `None`: `checkpoints/` in the first attempt's run
    /// directory.
    /// Boxed: a URL is large, and a command study rarely sets it.
    pub checkpoint_dir: Option<Box<crate::checkpoint::Location>>,
}

/// How a command trial of several processes is launched (`[trial] launcher`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    /// The Python that runs `torch.distributed.run` (`[trial] python`, default `python3`).
    pub python: String,
}

#[derive(Debug, Clone)]
pub struct Study {
    /// The study file, and its directory (relative paths in the file are relative to it).
    pub file: PathBuf,
    pub dir: PathBuf,
    /// The file's text, stored with the study so a database says how it was made.
    pub source: String,
    pub name: String,
    /// The first objective: what a single-objective study optimises, and what pruners judge.
    pub metric: String,
    pub direction: Direction,
    /// The further objectives of a multi-objective study (empty for one objective).
    pub others: Vec<Objective>,
    pub trials: Option<u64>,
    pub timeout: Option<Duration>,
    pub seed: u64,
    pub storage: crate::storage::StorageUrl,
    pub space: Space,
    pub sampler: SamplerKind,
    pub sampler_options: SamplerOptions,
    pub pruner: PrunerConfig,
    /// The device of each worker slot.
    pub slots: Vec<String>,
    /// The devices came from `"auto"` (or no `devices` key): every visible GPU, else the CPU.
    pub auto_devices: bool,
    /// `workers.gpus_per_trial`: GPUs per slot (1 unless written); a slot's device is then a
    /// group such as `cuda:0,cuda:1`.
    pub gpus_per_trial: usize,
    /// `workers.gpu_memory_fraction`: the share of its GPU's memory one trial may hold (its
    /// caching allocator's cap), when set.
    pub gpu_memory_fraction: Option<f64>,
    pub trial: TrialSpec,
    /// `[[enqueue]]` params, run first.
    pub enqueue: Vec<Params>,
    /// How often running trials' heartbeats are stamped.
    pub heartbeat: Duration,
    /// How long a running trial may stay silent before another process takes it as
    /// interrupted.
    pub heartbeat_grace: Duration,
    /// Stop starting trials after this many in a row failed on their own (0: never).
    pub max_consecutive_failures: u64,
    /// Where trial directories (logs) go.
    pub runs_dir: PathBuf,
}

impl Study {
    /// Every objective, in order.
    pub fn objectives(&self) -> Vec<Objective> {
        crate::trial::objectives(&self.metric, self.direction, &self.others)
    }

    pub fn is_multi(&self) -> bool {
        !self.others.is_empty()
    }
}
