//! The study file as written (TOML, serde with `deny_unknown_fields`), and [`load`], which
//! checks it whole into a [`Study`] or a [`SpecError`] naming the file, the key and what is
//! wrong. Every mistake is caught here, before any trial starts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::pruner::PrunerConfig;
use crate::sampler::{SamplerKind, SamplerOptions};
use crate::space::{ParamValue, Params, Space};
use crate::study::{CommandSpec, Study, TrialSpec};
use crate::trial::{Direction, Objective};

/// What one check of a study file found wrong, before [`parse`] names the file in a
/// [`SpecError`]. Each message names the key it is about.
#[derive(Debug, thiserror::Error)]
enum Mistake {
    /// A duration key that does not hold a duration tune accepts.
    #[error(transparent)]
    Duration(#[from] crate::limits::DurationError),
    /// Any other key whose value is wrong.
    #[error("{0}")]
    Key(String),
}

/// A mistake in a study file.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct SpecError {
    pub file: PathBuf,
    pub message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStudyFile {
    study: RawStudy,
    space: toml::Table,
    #[serde(default)]
    sampler: Option<RawSampler>,
    #[serde(default)]
    pruner: Option<toml::Table>,
    #[serde(default)]
    workers: Option<RawWorkers>,
    trial: toml::Table,
    #[serde(default)]
    enqueue: Vec<toml::Table>,
}

/// `metric` and `direction`: one name, or a list (a multi-objective study).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn list(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStudy {
    name: String,
    metric: OneOrMany,
    #[serde(default)]
    direction: Option<OneOrMany>,
    #[serde(default)]
    trials: Option<i64>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    storage: Option<String>,
    #[serde(default)]
    heartbeat: Option<String>,
    #[serde(default)]
    heartbeat_grace: Option<String>,
    #[serde(default)]
    runs_dir: Option<String>,
    #[serde(default)]
    max_consecutive_failures: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSampler {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    n_startup: Option<i64>,
    /// Read as any value, so that a wrong type is refused naming the key.
    #[serde(default)]
    cost_aware: Option<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkers {
    #[serde(default)]
    count: Option<i64>,
    #[serde(default)]
    devices: Option<toml::Value>,
    #[serde(default)]
    slots_per_device: Option<i64>,
    #[serde(default)]
    gpu_memory_fraction: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommandTrial {
    #[allow(dead_code)]
    kind: String,
    command: Vec<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    grace: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    requires: Vec<String>,
    #[serde(default)]
    check: Vec<String>,
}

/// Overrides from the command line, applied before checking.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub db: Option<crate::storage::StorageUrl>,
}

/// A study stops starting trials after this many in a row failed on their own (`0`: never).
pub const DEFAULT_MAX_CONSECUTIVE_FAILURES: u64 = 5;

/// The shortest `study.heartbeat`: each beat is a database write.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// Reads and checks a study file.
pub fn load(file: &Path, overrides: &Overrides) -> Result<Study, SpecError> {
    let err = |message: String| SpecError {
        file: file.to_path_buf(),
        message,
    };
    let source = std::fs::read_to_string(file)
        .map_err(|e| err(format!("cannot read the study file: {e}")))?;
    parse(file, &source, overrides)
}

/// Parses and checks a study file's text (`file` names it in errors and anchors relative paths).
/// The study's objectives from `study.metric` and `study.direction`: one metric (direction
/// "minimize" unless named), or lists of equal length (a multi-objective study).
fn objectives(s: &RawStudy) -> Result<Vec<Objective>, Mistake> {
    let metrics = s.metric.list();
    let multi = matches!(s.metric, OneOrMany::Many(_));
    if metrics.is_empty() {
        return Err(Mistake::Key(
            "key `study.metric`: the list is empty (name at least one reported metric)".into(),
        ));
    }
    for (i, m) in metrics.iter().enumerate() {
        if m.trim().is_empty() || m == "step" || m == "final" {
            return Err(Mistake::Key(format!(
                "key `study.metric`: `{m}` cannot be the objective (name a reported metric such as \"val_loss\")"
            )));
        }
        if m.contains('\0') {
            return Err(Mistake::Key(format!(
                "key `study.metric`: {m:?} contains a NUL byte, which no report can name"
            )));
        }
        if metrics[..i].contains(m) {
            return Err(Mistake::Key(format!(
                "key `study.metric`: `{m}` is named twice"
            )));
        }
    }
    let directions = match &s.direction {
        None if multi && metrics.len() > 1 => {
            return Err(Mistake::Key(format!(
                "key `study.direction`: missing; a study with {} metrics needs a list of {} directions, such as [\"minimize\", \"maximize\"]",
                metrics.len(),
                metrics.len()
            )));
        }
        None => vec!["minimize".to_string(); metrics.len()],
        Some(d) => d.list(),
    };
    if directions.len() != metrics.len() {
        return Err(Mistake::Key(format!(
            "key `study.direction`: {} direction(s) for {} metric(s); give one per metric, in the same order",
            directions.len(),
            metrics.len()
        )));
    }
    metrics
        .into_iter()
        .zip(directions)
        .map(|(metric, d)| {
            let direction = match d.as_str() {
                "minimize" => Direction::Minimize,
                "maximize" => Direction::Maximize,
                other => {
                    return Err(Mistake::Key(format!(
                        "key `study.direction`: \"{other}\" is neither \"minimize\" nor \"maximize\""
                    )));
                }
            };
            Ok(Objective { metric, direction })
        })
        .collect()
}

pub fn parse(file: &Path, source: &str, overrides: &Overrides) -> Result<Study, SpecError> {
    let err = |message: String| SpecError {
        file: file.to_path_buf(),
        message,
    };
    let raw: RawStudyFile = toml::from_str(source).map_err(|e| err(toml_message(&e)))?;
    let dir = file
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."));
    // Absolute, because the trial directories and log paths derived from it are handed to
    // commands (which may change directory) and recorded in the database (read from anywhere).
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());

    let s = &raw.study;
    if s.name.trim().is_empty() {
        return Err(err("key `study.name`: must not be empty".into()));
    }
    if s.name.contains('\0') {
        return Err(err(format!(
            "key `study.name`: {:?} contains a NUL byte, which no database stores",
            s.name
        )));
    }
    let objectives = objectives(s).map_err(|e| err(e.to_string()))?;
    let (first, others) = objectives.split_first().expect("at least one objective");
    let trials = match s.trials {
        None => None,
        Some(n) if n > 0 => Some(n as u64),
        Some(n) => {
            return Err(err(format!(
                "key `study.trials`: must be a positive integer, not {n}"
            )));
        }
    };
    let timeout = s
        .timeout
        .as_deref()
        .map(|t| duration("study.timeout", t))
        .transpose()
        .map_err(|e| err(e.to_string()))?;
    if trials.is_none() && timeout.is_none() {
        return Err(err(
            "key `study.trials`: a study needs a budget: set `study.trials`, `study.timeout`, or both".into(),
        ));
    }
    let seed = match s.seed {
        None => 0,
        Some(n) if n >= 0 => n as u64,
        Some(n) => {
            return Err(err(format!(
                "key `study.seed`: must be a non-negative integer, not {n}"
            )));
        }
    };
    let storage = match (&overrides.db, &s.storage) {
        (Some(db), _) => db.clone(),
        (None, Some(p)) => {
            let url = crate::storage::StorageUrl::parse(p, &dir)
                .map_err(|e| err(format!("key `study.storage`: {e}")))?;
            if let Some(parent) = url.as_sqlite().and_then(Path::parent)
                && !parent.as_os_str().is_empty()
                && !parent.is_dir()
            {
                return Err(err(format!(
                    "key `study.storage`: the directory {} does not exist (create it, or name a database in an existing directory)",
                    parent.display()
                )));
            }
            url
        }
        (None, None) => crate::storage::StorageUrl::Sqlite(dir.join("tune.db")),
    };
    let heartbeat = s
        .heartbeat
        .as_deref()
        .map(|t| duration("study.heartbeat", t))
        .transpose()
        .map_err(|e| err(e.to_string()))?
        .unwrap_or(Duration::from_secs(2));
    let heartbeat_grace = s
        .heartbeat_grace
        .as_deref()
        .map(|t| duration("study.heartbeat_grace", t))
        .transpose()
        .map_err(|e| err(e.to_string()))?
        .unwrap_or(Duration::from_secs(60));
    if heartbeat < MIN_HEARTBEAT {
        return Err(err(format!(
            "key `study.heartbeat`: {:?} is shorter than {}ms; a heartbeat that often would keep the database busy writing it",
            s.heartbeat.as_deref().unwrap_or_default(),
            MIN_HEARTBEAT.as_millis()
        )));
    }
    if heartbeat_grace <= heartbeat {
        return Err(err(format!(
            "key `study.heartbeat_grace`: must be longer than `study.heartbeat` ({}s)",
            heartbeat.as_secs_f64()
        )));
    }
    let max_consecutive_failures = match s.max_consecutive_failures {
        None => DEFAULT_MAX_CONSECUTIVE_FAILURES,
        Some(n) if n >= 0 => n as u64,
        Some(n) => {
            return Err(err(format!(
                "key `study.max_consecutive_failures`: must be 0 (never stop) or more, not {n}"
            )));
        }
    };
    let runs_dir = dir
        .join(s.runs_dir.as_deref().unwrap_or("runs"))
        .join(sanitize(&s.name));

    let space = Space::from_toml(&raw.space).map_err(|e| err(format!("key `space`: {e}")))?;

    let (sampler, sampler_options) =
        sampler_section(raw.sampler.as_ref()).map_err(|e| err(e.to_string()))?;

    let slots = workers(raw.workers.as_ref()).map_err(|e| err(e.to_string()))?;
    let auto_devices = match raw.workers.as_ref().and_then(|w| w.devices.as_ref()) {
        None => true,
        Some(toml::Value::String(s)) => s == "auto",
        Some(_) => false,
    };
    let gpu_memory_fraction = memory_fraction(
        raw.workers.as_ref().and_then(|w| w.gpu_memory_fraction),
        &slots,
    )
    .map_err(|e| err(e.to_string()))?;

    let trial = trial_section(&raw.trial, &space, &dir, gpu_memory_fraction)
        .map_err(|e| err(e.to_string()))?;

    // Builtin studies train for a known number of epochs: ASHA over epochs is their default
    // pruner, and an epoch-based pruner's full resource is that number unless the table says.
    let epochs = match &trial {
        TrialSpec::Builtin(b) => builtin_epochs(b, &space),
        TrialSpec::Command(_) => None,
    };
    let pruner = match (&raw.pruner, epochs) {
        (None, Some(e)) => PrunerConfig::builtin_default(e),
        (None, None) => PrunerConfig::default(),
        (Some(t), e) => {
            let mut p = parse_pruner(t).map_err(|e| err(e.to_string()))?;
            if let Some(e) = e
                && p.resource() == "epoch"
            {
                p.fill_max_resource(e as f64);
            }
            p
        }
    };

    let enqueue = enqueue_section(&raw.enqueue, &space).map_err(|e| err(e.to_string()))?;

    Ok(Study {
        file: file.to_path_buf(),
        dir,
        source: source.to_string(),
        name: s.name.clone(),
        metric: first.metric.clone(),
        direction: first.direction,
        others: others.to_vec(),
        trials,
        timeout,
        seed,
        storage,
        space,
        sampler,
        sampler_options,
        pruner,
        slots,
        auto_devices,
        gpu_memory_fraction,
        trial,
        enqueue,
        heartbeat,
        heartbeat_grace,
        max_consecutive_failures,
        runs_dir,
    })
}

/// `[sampler]`: the sampler's kind and options.
fn sampler_section(raw: Option<&RawSampler>) -> Result<(SamplerKind, SamplerOptions), Mistake> {
    let sampler = match raw.and_then(|r| r.kind.as_deref()) {
        None => SamplerKind::default(),
        Some(k) => SamplerKind::parse(k).ok_or_else(|| {
            Mistake::Key(format!(
                "key `sampler.kind`: unknown sampler \"{k}\" (known: {})",
                SamplerKind::NAMES.join(", ")
            ))
        })?,
    };
    let sampler_options = SamplerOptions {
        n_startup: match raw.and_then(|r| r.n_startup) {
            None => None,
            Some(n) if (1..=100_000).contains(&n) => Some(n as usize),
            Some(n) => {
                return Err(Mistake::Key(format!(
                    "key `sampler.n_startup`: must be between 1 and 100000, not {n}"
                )));
            }
        },
        cost_aware: match raw.and_then(|r| r.cost_aware.as_ref()) {
            None => None,
            Some(toml::Value::Boolean(b)) => Some(*b),
            Some(v) => {
                return Err(Mistake::Key(format!(
                    "key `sampler.cost_aware`: must be true or false, not {v}"
                )));
            }
        },
    };
    Ok((sampler, sampler_options))
}

/// `[trial]`: a command or a builtin trial. `gpu_memory_fraction` (of `[workers]`) goes to a
/// command trial's environment.
fn trial_section(
    table: &toml::Table,
    space: &Space,
    dir: &Path,
    gpu_memory_fraction: Option<f64>,
) -> Result<TrialSpec, Mistake> {
    let kind = match table.get("kind") {
        Some(toml::Value::String(k)) => k.as_str(),
        Some(other) => {
            return Err(Mistake::Key(format!(
                "key `trial.kind`: must be a string, not {}",
                other.type_str()
            )));
        }
        None => {
            return Err(Mistake::Key(
                "key `trial.kind`: missing (\"command\" or \"builtin\")".into(),
            ));
        }
    };
    Ok(match kind {
        "command" => {
            let raw_cmd: RawCommandTrial = table_into(table, "trial")?;
            let mut c = command(raw_cmd, space, dir)?;
            // A command trial applies the cap itself (PyTorch:
            // `torch.cuda.set_per_process_memory_fraction`); a value in `trial.env` wins.
            if let Some(f) = gpu_memory_fraction
                && !c.env.iter().any(|(k, _)| k == "TUNE_GPU_MEMORY_FRACTION")
            {
                c.env
                    .push(("TUNE_GPU_MEMORY_FRACTION".to_string(), f.to_string()));
            }
            TrialSpec::Command(c)
        }
        "builtin" => {
            let b = crate::builtin::parse_builtin(table, space, dir)
                .map_err(|e| Mistake::Key(e.to_string()))?;
            TrialSpec::Builtin(Box::new(b))
        }
        other => {
            return Err(Mistake::Key(format!(
                "key `trial.kind`: unknown kind \"{other}\" (\"command\" or \"builtin\")"
            )));
        }
    })
}

/// `[[enqueue]]`: the trials to run first, each checked against the space.
fn enqueue_section(tables: &[toml::Table], space: &Space) -> Result<Vec<Params>, Mistake> {
    let mut enqueue = Vec::with_capacity(tables.len());
    for (i, t) in tables.iter().enumerate() {
        let mut p = Params::new();
        for (k, v) in t {
            let pv = ParamValue::from_toml(v).ok_or_else(|| {
                Mistake::Key(format!(
                    "key `enqueue[{i}].{k}`: must be a string, number or boolean"
                ))
            })?;
            p.insert(k.clone(), pv);
        }
        let p = space.coerce(p);
        space
            .validate(&p)
            .map_err(|e| Mistake::Key(format!("key `enqueue[{i}]`: {e}")))?;
        enqueue.push(p);
    }
    Ok(enqueue)
}

/// toml's messages carry the line, the column and the offending line with a caret; keep them
/// whole but on the file's behalf.
fn toml_message(e: &toml::de::Error) -> String {
    e.to_string().trim_end().to_string()
}

/// A table of the study file read into `T`, refusing a wrong value by its key. Hazard: serde
/// on a detached table says only "invalid value: integer `-1`, expected u32", naming no key;
/// read from text, the error's span falls on the key's line, which names it.
fn table_into<T: serde::de::DeserializeOwned>(t: &toml::Table, name: &str) -> Result<T, Mistake> {
    let text = toml::to_string(t).map_err(|e| Mistake::Key(format!("in `[{name}]`: {e}")))?;
    toml::from_str::<T>(&text).map_err(|e| {
        let message = e.message().trim_end();
        let key = e
            .span()
            .filter(|s| s.start > 0 && !message.starts_with("missing field"))
            .and_then(|s| {
                let before = text.get(..s.start)?;
                let line_start = before.rfind('\n').map_or(0, |i| i + 1);
                let (key, _) = text.get(line_start..)?.split_once(" = ")?;
                // A sub-table (`[env]`) is written as a section after the plain keys.
                let section = before
                    .lines()
                    .rev()
                    .find_map(|l| l.strip_prefix('[').and_then(|l| l.strip_suffix(']')));
                let key = key.trim();
                Some(match section {
                    Some(sec) => format!("{sec}.{key}"),
                    None => key.to_string(),
                })
            });
        // An internally tagged enum (`[pruner]`, by `kind`) buffers its table and loses the
        // span: then the key is the one that fails alone beside the tag (every other key of
        // such a table has a default).
        let key = key.or_else(|| {
            if message.starts_with("missing field") {
                return None;
            }
            t.iter()
                .filter(|(k, _)| k.as_str() != "kind")
                .find(|(k, v)| {
                    let mut alone = toml::Table::new();
                    if let Some(kind) = t.get("kind") {
                        alone.insert("kind".into(), kind.clone());
                    }
                    alone.insert(k.to_string(), (*v).clone());
                    toml::Value::Table(alone).try_into::<T>().is_err()
                })
                .map(|(k, _)| k.clone())
        });
        Mistake::Key(match key {
            Some(k) => format!("key `{name}.{k}`: {message}"),
            None => format!("in `[{name}]`: {message}"),
        })
    })
}

fn parse_pruner(t: &toml::Table) -> Result<PrunerConfig, Mistake> {
    if !t.contains_key("kind") {
        return Err(Mistake::Key(format!(
            "key `pruner.kind`: missing (one of {})",
            PrunerConfig::NAMES.join(", ")
        )));
    }
    let cfg: PrunerConfig = table_into(t, "pruner")?;
    cfg.check().map_err(|e| Mistake::Key(format!("key {e}")))?;
    Ok(cfg)
}

/// The most epochs a builtin trial trains: the fixed `epochs`, or the upper bound of a
/// searched one.
fn builtin_epochs(b: &crate::builtin::BuiltinTrial, space: &Space) -> Option<u64> {
    match b.knobs.get("epochs")? {
        crate::builtin::Knob::Fixed(ParamValue::Int(n)) => u64::try_from(*n).ok(),
        crate::builtin::Knob::Fixed(_) => None,
        crate::builtin::Knob::Searched => match &space.get("epochs")?.kind {
            crate::space::ParamKind::Int { high, .. } => u64::try_from(*high).ok(),
            crate::space::ParamKind::Categorical { choices } => choices
                .iter()
                .filter_map(|c| match c {
                    ParamValue::Int(n) => u64::try_from(*n).ok(),
                    _ => None,
                })
                .max(),
            crate::space::ParamKind::Float { .. } => None,
        },
    }
}

/// Parses a duration such as "90s", "20m", "1h 30m" or a number of seconds, longer than zero
/// and at most [`crate::limits::MAX_DURATION`].
pub fn duration(key: &str, text: &str) -> Result<Duration, crate::limits::DurationError> {
    crate::limits::duration(&format!("key `{key}`"), text)
}

/// The directory name of a study's runs: the name itself when it is a plain file name, else
/// its safe characters plus `@` and a hash of the exact name, so that two studies never share a
/// directory (`a/b` and `a_b`, or two names in another script, would otherwise both be `a_b`).
fn sanitize(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe == name && !name.is_empty() && name != "." && name != ".." && name.len() <= DIR_NAME_MAX
    {
        return safe;
    }
    // FNV-1a: stable across releases and platforms, which the directory must be.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let safe = safe.trim_matches('.');
    // `safe` is ASCII, so any byte index is a character boundary.
    format!(
        "{}@{:08x}",
        &safe[..safe.len().min(DIR_NAME_MAX)],
        hash as u32
    )
}

/// The longest study name kept whole as a directory name: a path component may have 255
/// bytes, and a longer name would fail every trial. Longer names keep this many characters
/// plus `@` and the hash, as unsafe names do.
const DIR_NAME_MAX: usize = 100;

/// The devices of the worker slots: `count` slots over `devices` ("auto", "cpu", "cuda:N" or a
/// list), round-robin; or `slots_per_device` slots on each device.
fn workers(raw: Option<&RawWorkers>) -> Result<Vec<String>, Mistake> {
    let count = match raw.and_then(|w| w.count) {
        None => None,
        Some(n) if (1..=1024).contains(&n) => Some(n as usize),
        Some(n) => {
            return Err(Mistake::Key(format!(
                "key `workers.count`: must be between 1 and 1024, not {n}"
            )));
        }
    };
    let per_device = match raw.and_then(|w| w.slots_per_device) {
        None => None,
        Some(_) if count.is_some() => {
            return Err(Mistake::Key("keys `workers.count` and `workers.slots_per_device`: give one of them (count slots round-robin over the devices, or slots_per_device slots on each device), not both".to_string()));
        }
        Some(n) if (1..=64).contains(&n) => Some(n as usize),
        Some(n) => {
            return Err(Mistake::Key(format!(
                "key `workers.slots_per_device`: must be between 1 and 64, not {n}"
            )));
        }
    };
    let listed = raw
        .and_then(|w| w.devices.as_ref())
        .is_some_and(|d| d.as_str() != Some("auto"));
    let devices: Vec<String> = match raw.and_then(|w| w.devices.as_ref()) {
        None => auto_devices(),
        Some(toml::Value::String(s)) if s == "auto" => auto_devices(),
        Some(toml::Value::String(s)) => vec![check_device(s)?],
        Some(toml::Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|v| match v.as_str() {
                Some("auto") => Err(Mistake::Key(
                    "key `workers.devices`: \"auto\" stands alone, not in a list".to_string(),
                )),
                Some(s) => check_device(s),
                None => Err(Mistake::Key(format!(
                    "key `workers.devices`: entries must be strings, not {}",
                    v.type_str()
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(Mistake::Key(format!(
                "key `workers.devices`: must be \"auto\", a device such as \"cpu\" or \"cuda:0\", or a non-empty list of them, not {}",
                other
            )));
        }
    };
    if let Some(k) = per_device {
        // Slot order: each device's slots side by side, so the UI's worker rows group by GPU.
        return Ok(devices
            .iter()
            .flat_map(|d| std::iter::repeat_n(d.clone(), k))
            .collect());
    }
    let n = count.unwrap_or(devices.len());
    // Devices written out one by one are each meant to be used: fewer slots than devices would
    // leave the last ones idle without a word. ("auto" may find more GPUs than a count wants.)
    if listed && n < devices.len() {
        let unused = devices[n..].join(", ");
        return Err(Mistake::Key(format!(
            "key `workers.count`: {n} slot{} over the {} devices listed in `workers.devices` would leave {unused} unused; raise `count` to {} or more, or list only the devices to use",
            if n == 1 { "" } else { "s" },
            devices.len(),
            devices.len()
        )));
    }
    Ok((0..n).map(|i| devices[i % devices.len()].clone()).collect())
}

/// `workers.gpu_memory_fraction`: the share of its GPU's memory each trial's caching allocator
/// may hold, so that trials sharing a GPU cannot starve each other. The shares of the slots on
/// one GPU must fit in it.
fn memory_fraction(raw: Option<f64>, slots: &[String]) -> Result<Option<f64>, Mistake> {
    let Some(f) = raw else {
        return Ok(None);
    };
    if !(f > 0.0 && f <= 1.0) {
        return Err(Mistake::Key(format!(
            "key `workers.gpu_memory_fraction`: must be above 0 and at most 1 (a share of the GPU's memory per trial), not {f}"
        )));
    }
    let mut per_gpu: BTreeMap<&str, usize> = BTreeMap::new();
    for d in slots.iter().filter(|d| d.starts_with("cuda:")) {
        *per_gpu.entry(d.as_str()).or_default() += 1;
    }
    if let Some((d, n)) = per_gpu
        .into_iter()
        .find(|&(_, n)| n as f64 * f > 1.0 + 1e-9)
    {
        return Err(Mistake::Key(format!(
            "key `workers.gpu_memory_fraction`: {n} slots on {d} × {f} is more than the whole GPU; write at most {:.3} (1 / {n})",
            1.0 / n as f64
        )));
    }
    Ok(Some(f))
}

fn check_device(s: &str) -> Result<String, Mistake> {
    if s == "cpu" {
        return Ok(s.to_string());
    }
    if let Some(n) = s.strip_prefix("cuda:")
        && n.parse::<u32>().is_ok()
    {
        return Ok(s.to_string());
    }
    Err(Mistake::Key(format!(
        "key `workers.devices`: \"{s}\" is not a device (\"cpu\", \"cuda:0\", \"cuda:1\", … or \"auto\")"
    )))
}

/// Every visible CUDA device, or the CPU when there is none.
fn auto_devices() -> Vec<String> {
    let n = crate::devices::cuda_device_count();
    if n == 0 {
        vec!["cpu".to_string()]
    } else {
        (0..n).map(|i| format!("cuda:{i}")).collect()
    }
}

/// The characters of a placeholder's name: letters and digits of any script, `_`, `-`, `.`.
fn name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-' || c == '.'
}

/// The placeholders of a command argument: `{name}` where the name is made of characters `name_char` accepts
/// and does not start with a digit, as byte ranges and the name. Braces around anything else
/// (`{"a": 1}`, `{1}`) are not placeholders and stay as written.
pub fn placeholders(arg: &str) -> Vec<(usize, usize, &str)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = arg[i..].find('{') {
        let start = i + off;
        let rest = &arg[start + 1..];
        let len: usize = rest
            .chars()
            .take_while(|&c| name_char(c))
            .map(char::len_utf8)
            .sum();
        let name = &rest[..len];
        if len > 0
            && rest[len..].starts_with('}')
            && !name.starts_with(|c: char| c.is_ascii_digit())
        {
            out.push((start, start + 1 + len + 1, name));
            i = start + len + 2;
        } else {
            i = start + 1;
        }
    }
    out
}

/// What in a command argument would not do what it seems to: a NUL byte (no program can
/// receive it), `{}`, and a placeholder left open at the end (`--lr={lr`).
fn check_argument(arg: &str) -> Result<(), Mistake> {
    if arg.contains('\0') {
        return Err(Mistake::Key(
            "contains a NUL byte, which no program can be given".into(),
        ));
    }
    if arg.contains("{}") {
        return Err(Mistake::Key(
            "has an empty placeholder `{}` (a placeholder names a parameter, e.g. `{lr}`, or one of {trial}, {trial_dir}, {device})".into(),
        ));
    }
    if let Some(open) = arg.rfind('{') {
        let rest = &arg[open + 1..];
        if !rest.is_empty()
            && rest.chars().all(name_char)
            && !rest.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(Mistake::Key(format!(
                "has a placeholder that is never closed: `{{{rest}`"
            )));
        }
    }
    Ok(())
}

const BUILTIN_PLACEHOLDERS: &[&str] = &["trial", "trial_dir", "device"];

fn command(raw: RawCommandTrial, space: &Space, dir: &Path) -> Result<CommandSpec, Mistake> {
    if raw.command.is_empty() {
        return Err(Mistake::Key(
            "key `trial.command`: must name a program (a non-empty list of arguments)".into(),
        ));
    }
    if raw.command[0].trim().is_empty() {
        return Err(Mistake::Key(
            "key `trial.command`: the program (first element) is empty".into(),
        ));
    }
    for b in BUILTIN_PLACEHOLDERS {
        if space.get(b).is_some() {
            return Err(Mistake::Key(format!(
                "key `space.{b}`: a parameter of a command study may not be named `{b}`: {{{b}}} in the command is tune's own (rename the parameter)"
            )));
        }
    }
    for (i, arg) in raw.command.iter().enumerate() {
        check_argument(arg)
            .map_err(|e| Mistake::Key(format!("key `trial.command`: element {i} ({arg:?}) {e}")))?;
        for (_, _, name) in placeholders(arg) {
            if space.get(name).is_none() && !BUILTIN_PLACEHOLDERS.contains(&name) {
                return Err(Mistake::Key(format!(
                    "key `trial.command`: placeholder {{{name}}} is neither a parameter of the space nor one of {{trial}}, {{trial_dir}}, {{device}}"
                )));
            }
        }
    }
    for k in raw.env.keys() {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(Mistake::Key(format!(
                "key `trial.env`: {k:?} is not a valid environment variable name"
            )));
        }
    }
    let timeout = raw
        .timeout
        .as_deref()
        .map(|t| duration("trial.timeout", t))
        .transpose()?;
    let grace = raw
        .grace
        .as_deref()
        .map(|t| duration("trial.grace", t))
        .transpose()?
        .unwrap_or(Duration::from_secs(10));
    for (i, r) in raw.requires.iter().enumerate() {
        if r.trim().is_empty() || r.contains('\0') {
            return Err(Mistake::Key(format!(
                "key `trial.requires`: element {i} ({r:?}) is not a path"
            )));
        }
    }
    for (i, arg) in raw.check.iter().enumerate() {
        check_argument(arg)
            .map_err(|e| Mistake::Key(format!("key `trial.check`: element {i} ({arg:?}) {e}")))?;
        if !placeholders(arg).is_empty() {
            return Err(Mistake::Key(format!(
                "key `trial.check`: element {i} ({arg:?}) has a placeholder; the check runs once, before any trial, with no params"
            )));
        }
    }
    if raw.check.first().is_some_and(|p| p.trim().is_empty()) {
        return Err(Mistake::Key(
            "key `trial.check`: the program (first element) is empty".into(),
        ));
    }
    Ok(CommandSpec {
        check: raw.check,
        argv: raw.command,
        env: raw.env.into_iter().collect(),
        timeout,
        grace,
        workdir: dir.to_path_buf(),
        requires: raw.requires.into_iter().map(PathBuf::from).collect(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_study_gets_a_runs_directory_of_its_own() {
        assert_eq!(super::sanitize("digits-softmax_2.b"), "digits-softmax_2.b");
        let names = ["a/b", "a_b", "a b", "λ", "μ", "..", ".", "", "a:b"];
        let dirs: Vec<String> = names.iter().map(|n| super::sanitize(n)).collect();
        let unique: std::collections::BTreeSet<&String> = dirs.iter().collect();
        assert_eq!(unique.len(), names.len(), "{dirs:?}");
        for d in &dirs {
            assert!(
                !d.contains('/') && d != ".." && d != "." && !d.is_empty(),
                "{d}"
            );
        }
        assert_eq!(super::sanitize("a/b"), super::sanitize("a/b"), "stable");
        for long in [
            "x".repeat(101),
            "x".repeat(300),
            "é".repeat(200),
            "a/".repeat(400),
        ] {
            let d = super::sanitize(&long);
            assert!(d.len() <= 110, "{} bytes: {d}", d.len());
            assert_ne!(d, super::sanitize(&format!("{long}y")), "still unique");
        }
        assert_eq!(super::sanitize(&"x".repeat(100)), "x".repeat(100));
    }

    use super::*;

    const GOOD: &str = r#"
[study]
name = "demo"
metric = "val_loss"
trials = 4

[space]
lr = { type = "float", low = 1e-4, high = 1e-1, log = true }
opt = { type = "categorical", choices = ["sgd", "adam"] }

[workers]
count = 2
devices = ["cpu"]

[trial]
kind = "command"
command = ["python3", "train.py", "--lr", "{lr}", "--opt={opt}", "{trial_dir}"]
timeout = "5m"

[[enqueue]]
lr = 0.01
opt = "adam"
"#;

    fn check(src: &str) -> Result<Study, SpecError> {
        parse(Path::new("studies/x.toml"), src, &Overrides::default())
    }

    #[test]
    fn a_good_study_file_becomes_a_study() {
        let s = check(GOOD).expect("valid");
        assert_eq!(s.name, "demo");
        assert_eq!(s.slots, ["cpu", "cpu"]);
        assert_eq!(s.trials, Some(4));
        let db = s.storage.as_sqlite().expect("a SQLite file");
        assert!(db.is_absolute(), "{}", db.display());
        assert!(db.ends_with("studies/tune.db"));
        assert_eq!(s.enqueue.len(), 1);
        let TrialSpec::Command(c) = &s.trial else {
            panic!("a command study")
        };
        assert_eq!(c.timeout, Some(Duration::from_secs(300)));
        assert_eq!(c.grace, Duration::from_secs(10));
    }

    #[test]
    fn metric_and_direction_lists_make_a_multi_objective_study() {
        let src = GOOD.replacen(
            "metric = \"val_loss\"",
            "metric = [\"val_loss\", \"samples_per_s\"]\ndirection = [\"minimize\", \"maximize\"]",
            1,
        );
        let s = check(&src).expect("valid");
        assert_eq!(s.metric, "val_loss");
        assert_eq!(s.direction, Direction::Minimize);
        assert_eq!(
            s.others,
            [Objective {
                metric: "samples_per_s".into(),
                direction: Direction::Maximize
            }]
        );
        assert!(s.is_multi());
        // One metric in a list is a single-objective study.
        let s = check(&GOOD.replacen("metric = \"val_loss\"", "metric = [\"val_loss\"]", 1))
            .expect("one in a list");
        assert!(!s.is_multi());
        let bad: &[(&str, &str)] = &[
            ("metric = []", "the list is empty"),
            (
                "metric = [\"a\", \"b\"]",
                "a study with 2 metrics needs a list of 2 directions",
            ),
            (
                "metric = [\"a\", \"b\"]\ndirection = [\"minimize\"]",
                "1 direction(s) for 2 metric(s)",
            ),
            (
                "metric = [\"a\", \"a\"]\ndirection = [\"minimize\", \"minimize\"]",
                "`a` is named twice",
            ),
            (
                "metric = [\"a\", \"step\"]\ndirection = [\"minimize\", \"minimize\"]",
                "`step` cannot be the objective",
            ),
            (
                "metric = [\"a\", \"b\"]\ndirection = [\"minimize\", \"up\"]",
                "\"up\" is neither",
            ),
        ];
        for (with, says) in bad {
            let e = check(&GOOD.replacen("metric = \"val_loss\"", with, 1))
                .expect_err(with)
                .to_string();
            assert!(e.contains("studies/x.toml"), "{e}");
            assert!(
                e.contains("study.metric") || e.contains("study.direction"),
                "{e}"
            );
            assert!(e.contains(says), "{with}: {e}");
        }
    }

    #[test]
    fn sampler_cost_aware_is_read_and_left_to_the_default_when_absent() {
        let s = check(GOOD).expect("good");
        assert_eq!(s.sampler_options.cost_aware, None);
        let src = GOOD.replacen("[workers]", "[sampler]\ncost_aware = false\n[workers]", 1);
        let s = check(&src).expect("cost_aware = false");
        assert_eq!(s.sampler_options.cost_aware, Some(false));
    }

    #[test]
    fn every_mistake_names_the_file_and_the_key() {
        let cases: &[(&str, &str, &str)] = &[
            ("trials = 4", "trials = -1", "study.trials"),
            ("trials = 4", "trials = 4\ncolour = \"red\"", "colour"),
            ("metric = \"val_loss\"", "metric = \"step\"", "study.metric"),
            (
                "trials = 4",
                "trials = 4\ndirection = \"up\"",
                "study.direction",
            ),
            (
                "trials = 4",
                "trials = 4\ntimeout = \"soon\"",
                "study.timeout",
            ),
            ("trials = 4", "", "budget"),
            ("count = 2", "count = 0", "workers.count"),
            (
                "count = 2\ndevices = [\"cpu\"]",
                "count = 1\ndevices = [\"cpu\", \"cuda:0\"]",
                "cuda:0 unused",
            ),
            (
                "devices = [\"cpu\"]",
                "devices = [\"gpu\"]",
                "workers.devices",
            ),
            ("\"{trial_dir}\"]", "\"{nope}\"]", "{nope}"),
            (
                "timeout = \"5m\"",
                "timeout = \"5m\"\nshell = true",
                "shell",
            ),
            ("kind = \"command\"", "kind = \"docker\"", "trial.kind"),
            ("lr = 0.01", "lr = 5.0", "enqueue[0]"),
            ("high = 1e-1", "high = 1e-5", "`lr`"),
            (
                "[workers]",
                "[sampler]\nkind = \"magic\"\n[workers]",
                "sampler.kind",
            ),
            (
                "[workers]",
                "[sampler]\ncost_aware = \"yes\"\n[workers]",
                "sampler.cost_aware",
            ),
            (
                "count = 2",
                "count = 2\nslots_per_device = 2",
                "workers.slots_per_device",
            ),
            (
                "count = 2",
                "slots_per_device = 0",
                "workers.slots_per_device",
            ),
            (
                "count = 2",
                "count = 2\ngpu_memory_fraction = 1.5",
                "workers.gpu_memory_fraction",
            ),
            (
                "count = 2",
                "count = 2\ngpu_memory_fraction = 0.0",
                "workers.gpu_memory_fraction",
            ),
        ];
        for (from, to, want) in cases {
            assert!(GOOD.contains(from), "{from}");
            let src = GOOD.replacen(from, to, 1);
            let e = check(&src).expect_err(to).to_string();
            assert!(e.starts_with("studies/x.toml: "), "{e}");
            assert!(e.contains(want), "for {to:?}: `{e}` lacks `{want}`");
        }
    }

    fn workers_of(table: &str) -> Result<Study, SpecError> {
        let start = GOOD.find("[workers]").expect("GOOD has workers");
        let end = GOOD.find("[trial]").expect("GOOD has a trial");
        check(&format!("{}{table}\n{}", &GOOD[..start], &GOOD[end..]))
    }

    #[test]
    fn slots_per_device_puts_that_many_slots_on_each_device_side_by_side() {
        let s = workers_of("[workers]\nslots_per_device = 2\ndevices = [\"cuda:0\", \"cuda:1\"]")
            .expect("valid");
        assert_eq!(s.slots, ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]);
        assert_eq!(s.gpu_memory_fraction, None);
        assert!(!s.auto_devices);
        let s = workers_of("[workers]\nslots_per_device = 3\ndevices = \"cpu\"").expect("valid");
        assert_eq!(s.slots, ["cpu", "cpu", "cpu"]);
        assert!(
            workers_of("[workers]\ndevices = \"auto\"")
                .expect("valid")
                .auto_devices
        );
        assert!(workers_of("").expect("valid").auto_devices);
    }

    #[test]
    fn the_gpu_memory_shares_of_one_gpus_slots_must_fit_in_it() {
        let s = workers_of(
            "[workers]\nslots_per_device = 2\ndevices = [\"cuda:0\"]\ngpu_memory_fraction = 0.45",
        )
        .expect("two shares of 0.45 fit");
        assert_eq!(s.gpu_memory_fraction, Some(0.45));
        let e = workers_of(
            "[workers]\nslots_per_device = 3\ndevices = [\"cuda:0\"]\ngpu_memory_fraction = 0.5",
        )
        .expect_err("three shares of 0.5 do not")
        .to_string();
        assert!(e.contains("3 slots on cuda:0 × 0.5"), "{e}");
        assert!(e.contains("at most 0.333"), "{e}");
        let TrialSpec::Command(c) = &s.trial else {
            panic!("a command study")
        };
        assert!(
            c.env
                .contains(&("TUNE_GPU_MEMORY_FRACTION".to_string(), "0.45".to_string())),
            "{:?}",
            c.env
        );
        // CPU slots take no share of a GPU.
        workers_of("[workers]\ncount = 4\ndevices = [\"cpu\"]\ngpu_memory_fraction = 0.5")
            .expect("no GPU slot");
    }

    #[test]
    fn garbage_never_panics() {
        for src in [
            "",
            "[study",
            "\u{0}",
            "[study]\nname = 3",
            "study = 5",
            "[[study]]",
        ] {
            assert!(check(src).is_err());
        }
    }

    #[test]
    fn placeholders_are_found_only_around_identifiers() {
        let p: Vec<_> = placeholders("--lr={lr} {\"json\": 1} {trial_dir}/x {}")
            .into_iter()
            .map(|x| x.2)
            .collect();
        assert_eq!(p, ["lr", "trial_dir"]);
        let p: Vec<_> = placeholders("{λ}/{lr_μ}-{1x}{a.b}")
            .into_iter()
            .map(|x| x.2)
            .collect();
        assert_eq!(p, ["λ", "lr_μ", "a.b"]);
        let arg = "x{λ}y";
        let (s, e, _) = placeholders(arg)[0];
        assert_eq!(&arg[s..e], "{λ}");
    }

    #[test]
    fn arguments_that_would_not_do_what_they_seem_are_found() {
        assert!(check_argument("--lr={lr}").is_ok());
        assert!(check_argument("{\"json\": 1}").is_ok());
        assert!(
            check_argument("a\0b")
                .unwrap_err()
                .to_string()
                .contains("NUL")
        );
        assert!(
            check_argument("{}")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert!(
            check_argument("--lr={lr")
                .unwrap_err()
                .to_string()
                .contains("never closed")
        );
    }
}

#[cfg(test)]
#[path = "spec_fuzz.rs"]
mod fuzz;
