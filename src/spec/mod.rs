//! The study file as written (TOML, serde with `deny_unknown_fields`), and [`load`], which
//! checks it whole into a [`Study`] or a [`SpecError`] naming the file, the key, the kind of
//! mistake and what is wrong. Every mistake is caught here, before any trial starts.
//!
//! [`parse`] is a driver: each section of the file has its own check, in its own file —
//! `study` (`[study]`: name, objectives, budget, storage, heartbeat), `search` (`[space]`,
//! `[sampler]`, `[pruner]`, `[[enqueue]]`), `workers` (`[workers]`: the slots and their devices)
//! and `trial` (`[trial]`: a command or a builtin trial). Building the validated study itself
//! (what it means to run it) belongs to `study.rs` at the crate root, not here.

mod search;
mod study;
mod trial;
mod workers;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::study::{Study, TrialSpec};

pub use study::{DEFAULT_MAX_CONSECUTIVE_FAILURES, MIN_HEARTBEAT};
pub use trial::placeholders;

/// What kind of mistake a [`SpecError`] is, for callers that act on it (an exit status, a
/// hint) without searching its message, whose wording may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecErrorKind {
    /// The file cannot be read at all.
    Io,
    /// The text is not TOML.
    Syntax,
    /// A key or section tune does not know (a typo, or a key of another version).
    UnknownKey,
    /// A key the file must have, or that another key makes necessary, is absent.
    Missing,
    /// A key holds the wrong type of value (a string where a number belongs, say).
    Type,
    /// A key's value has the right type but is out of range or not allowed.
    Value,
    /// Two keys that each read fine contradict each other.
    Conflict,
    /// A duration key that does not hold a duration tune accepts.
    Duration,
}

/// A mistake in a study file: the file, the key it is about (dotted, as the message quotes it:
/// `study.trials`, `workers.devices`, `enqueue[0]`, `space.lr`), its kind and the message.
/// Shown as `{file}: {message}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct SpecError {
    pub file: PathBuf,
    /// The key the mistake is about; `None` where no single key is (TOML that does not parse,
    /// an unreadable file).
    pub key: Option<String>,
    pub kind: SpecErrorKind,
    pub message: String,
}

/// What one section's check found wrong, before [`parse`] names the file in a [`SpecError`]:
/// the key, the kind and the message (which quotes the key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
struct Mistake {
    key: Option<String>,
    kind: SpecErrorKind,
    message: String,
}

impl Mistake {
    /// A mistake at `key`, written "key `{key}`: {detail}", so that the message always quotes
    /// the key the error carries.
    fn at(kind: SpecErrorKind, key: &str, detail: impl std::fmt::Display) -> Mistake {
        Mistake {
            key: Some(key.to_string()),
            kind,
            message: format!("key `{key}`: {detail}"),
        }
    }

    /// A mistake whose message is already written (by another module, or naming two keys).
    fn written(kind: SpecErrorKind, key: Option<String>, message: impl Into<String>) -> Mistake {
        Mistake {
            key,
            kind,
            message: message.into(),
        }
    }

    /// A duration refused at `key`.
    fn duration(key: &str, e: crate::limits::DurationError) -> Mistake {
        Mistake::written(
            SpecErrorKind::Duration,
            Some(key.to_string()),
            e.to_string(),
        )
    }

    fn in_file(self, file: &Path) -> SpecError {
        SpecError {
            file: file.to_path_buf(),
            key: self.key,
            kind: self.kind,
            message: self.message,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStudyFile {
    study: study::RawStudy,
    space: toml::Table,
    #[serde(default)]
    sampler: Option<search::RawSampler>,
    #[serde(default)]
    pruner: Option<toml::Table>,
    #[serde(default)]
    workers: Option<workers::RawWorkers>,
    trial: toml::Table,
    #[serde(default)]
    enqueue: Vec<toml::Table>,
}

/// Overrides from the command line, applied before checking.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub db: Option<crate::storage::StorageUrl>,
}

/// Reads and checks a study file.
pub fn load(file: &Path, overrides: &Overrides) -> Result<Study, SpecError> {
    let source = std::fs::read_to_string(file).map_err(|e| {
        Mistake::written(
            SpecErrorKind::Io,
            None,
            format!("cannot read the study file: {e}"),
        )
        .in_file(file)
    })?;
    parse(file, &source, overrides)
}

/// Parses and checks a study file's text (`file` names it in errors and anchors relative paths).
pub fn parse(file: &Path, source: &str, overrides: &Overrides) -> Result<Study, SpecError> {
    let at_file = |m: Mistake| m.in_file(file);
    let raw: RawStudyFile = toml::from_str(source)
        .map_err(|e| whole_file_mistake(source, &e))
        .map_err(at_file)?;
    let dir = study_dir(file);

    let head = study::check(&raw.study, overrides, &dir).map_err(at_file)?;
    let space = search::space(&raw.space).map_err(at_file)?;
    let (sampler, sampler_options) = search::sampler(raw.sampler.as_ref()).map_err(at_file)?;
    let workers = workers::check(raw.workers.as_ref()).map_err(at_file)?;
    let trial =
        trial::check(&raw.trial, &space, &dir, workers.gpu_memory_fraction).map_err(at_file)?;
    if workers.gpus_per_trial > 1 && matches!(trial, TrialSpec::Builtin(_)) {
        return Err(at_file(Mistake::at(
            SpecErrorKind::Conflict,
            "workers.gpus_per_trial",
            format!(
                "{} GPUs per trial need a command trial (`[trial] command`): the builtin trainer trains each trial on one device, and data-parallel training in it is a later step; write 1 or leave the key out",
                workers.gpus_per_trial
            ),
        )));
    }
    // Builtin studies train for a known number of epochs: stopping by prediction over epochs
    // (ASHA for several objectives) is their default pruner, and an epoch-based pruner's full
    // resource is that number unless the table says.
    let epochs = match &trial {
        TrialSpec::Builtin(b) => search::builtin_epochs(b, &space),
        TrialSpec::Command(_) => None,
    };
    let multi = head.objectives.len() > 1;
    let mut pruner = search::pruner(raw.pruner.as_ref(), epochs, multi).map_err(at_file)?;
    if let crate::pruner::PrunerConfig::Pbt(c) = &mut pruner {
        check_pbt(c, &trial, &space, multi).map_err(at_file)?;
    }
    if let TrialSpec::Builtin(b) = &trial
        && pruner.pauses()
        && !b.checkpoints.enabled
    {
        return Err(at_file(Mistake::at(
            SpecErrorKind::Conflict,
            "pruner.mode",
            "\"promote\" pauses trials at a rung and resumes them from their checkpoints, but `trial.checkpoints = false` saves none; turn checkpoints on or use mode = \"stop\"".to_string(),
        )));
    }
    let enqueue = search::enqueue(&raw.enqueue, &space).map_err(at_file)?;

    let (first, others) = head
        .objectives
        .split_first()
        .expect("study::check returns at least one objective");
    Ok(Study {
        file: file.to_path_buf(),
        source: source.to_string(),
        name: head.name,
        metric: first.metric.clone(),
        direction: first.direction,
        others: others.to_vec(),
        trials: head.trials,
        timeout: head.timeout,
        seed: head.seed,
        storage: head.storage,
        space,
        sampler,
        sampler_options,
        pruner,
        slots: workers.slots,
        auto_devices: workers.auto_devices,
        gpus_per_trial: workers.gpus_per_trial,
        gpu_memory_fraction: workers.gpu_memory_fraction,
        trial,
        enqueue,
        heartbeat: head.heartbeat,
        heartbeat_grace: head.heartbeat_grace,
        max_consecutive_failures: head.max_consecutive_failures,
        runs_dir: head.runs_dir,
        dir,
    })
}

/// The directory relative paths of the file are read against. Absolute, because the trial
/// directories and log paths derived from it are handed to commands (which may change
/// directory) and recorded in the database (read from anywhere).
fn study_dir(file: &Path) -> PathBuf {
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
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// Parses a duration such as "90s", "20m", "1h 30m" or a number of seconds, longer than zero
/// and at most [`crate::limits::MAX_DURATION`].
pub fn duration(key: &str, text: &str) -> Result<Duration, crate::limits::DurationError> {
    crate::limits::duration(&format!("key `{key}`"), text)
}

/// A duration key read, or refused as a [`Mistake`] at `key`.
fn duration_at(key: &str, text: Option<&str>) -> Result<Option<Duration>, Mistake> {
    text.map(|t| duration(key, t))
        .transpose()
        .map_err(|e| Mistake::duration(key, e))
}

/// The kind of a serde refusal, from the fixed phrases of `serde::de::Error`'s provided
/// constructors (`unknown_field`, `missing_field`, `invalid_type`, …), which every serde
/// deserializer words the same; anything else a TOML parser says is a syntax error.
fn serde_kind(message: &str) -> SpecErrorKind {
    if message.starts_with("unknown field") {
        SpecErrorKind::UnknownKey
    } else if message.starts_with("missing field") {
        SpecErrorKind::Missing
    } else if message.starts_with("invalid type") {
        SpecErrorKind::Type
    } else if message.starts_with("invalid value")
        || message.starts_with("invalid length")
        || message.starts_with("unknown variant")
    {
        SpecErrorKind::Value
    } else {
        SpecErrorKind::Syntax
    }
}

/// The name between the first pair of backticks of `message` (serde quotes the field it means
/// so: "unknown field `colour`", "missing field `name`").
fn backticked(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once('`')?;
    rest.split_once('`').map(|(name, _)| name)
}

/// The dotted key at `offset` of a TOML `text`: the key written on that line (or the table a
/// header line opens) under the last `[section]` above it. Dotted keys and inline tables are
/// named by the key their line starts with.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(line_start..)?.lines().next().unwrap_or("").trim();
    let header = |l: &str| {
        let l = l.trim();
        let inner = l.strip_prefix("[[").and_then(|l| l.strip_suffix("]]"));
        inner
            .or_else(|| l.strip_prefix('[').and_then(|l| l.strip_suffix(']')))
            .map(|s| s.trim().to_string())
    };
    if let Some(h) = header(line) {
        return Some(h);
    }
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    let section = before[..line_start].lines().rev().find_map(header);
    Some(match section {
        Some(sec) => format!("{sec}.{key}"),
        None => key.to_string(),
    })
}

/// Population-based training (`[pruner] kind = "pbt"`) needs trials that checkpoint (a child
/// starts from its parent's checkpoint) and one objective (trials are ranked by it), and
/// explores only params that may change while a trial runs: `pruner.mutate` names params of
/// the space, and for a builtin trial only those the trainer takes up mid-run
/// ([`crate::builtin::PBT_MUTABLE`], its default: the searched ones among them).
fn check_pbt(
    c: &mut crate::pruner::PbtConfig,
    trial: &TrialSpec,
    space: &crate::space::Space,
    multi: bool,
) -> Result<(), Mistake> {
    if multi {
        return Err(Mistake::at(
            SpecErrorKind::Conflict,
            "pruner.kind",
            "\"pbt\" ranks trials by one objective, and this study has several; use kind = \"asha\" (which stops a trial only when it is behind on every objective)".to_string(),
        ));
    }
    if let Some(names) = &c.mutate {
        if names.is_empty() {
            return Err(Mistake::at(
                SpecErrorKind::Value,
                "pruner.mutate",
                "must name at least one param of [space] (leave the key out to explore every param that may change mid-run)".to_string(),
            ));
        }
        for n in names {
            if space.get(n).is_none() {
                let known: Vec<&str> = space.params().iter().map(|p| p.name.as_str()).collect();
                return Err(Mistake::at(
                    SpecErrorKind::Value,
                    "pruner.mutate",
                    format!(
                        "{n:?} is not a param of [space] (its params: {})",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    if let TrialSpec::Builtin(b) = trial {
        if !b.checkpoints.enabled {
            return Err(Mistake::at(
                SpecErrorKind::Conflict,
                "pruner.kind",
                "\"pbt\" starts each child from its parent's checkpoint, but `trial.checkpoints = false` saves none; turn checkpoints on or use another pruner".to_string(),
            ));
        }
        let fixed = |n: &str| !crate::builtin::PBT_MUTABLE.contains(&n);
        match &c.mutate {
            Some(names) => {
                if let Some(n) = names.iter().find(|n| fixed(n)) {
                    return Err(Mistake::at(
                        SpecErrorKind::Value,
                        "pruner.mutate",
                        format!(
                            "{n:?} cannot change while a builtin trial runs (its model, data order or optimizer state would no longer fit the checkpoint); the builtin trainer explores {}",
                            crate::builtin::PBT_MUTABLE.join(", ")
                        ),
                    ));
                }
            }
            None => {
                let names: Vec<String> = space
                    .params()
                    .iter()
                    .map(|p| p.name.clone())
                    .filter(|n| !fixed(n))
                    .collect();
                if names.is_empty() {
                    return Err(Mistake::at(
                        SpecErrorKind::Conflict,
                        "pruner.kind",
                        format!(
                            "\"pbt\" explores params that may change while a trial runs, and [space] searches none of them; search one of {}",
                            crate::builtin::PBT_MUTABLE.join(", ")
                        ),
                    ));
                }
                c.mutate = Some(names);
            }
        }
    }
    Ok(())
}

/// The mistake of a study file that does not read into [`RawStudyFile`]: TOML that does not
/// parse, or a key serde refuses. toml's messages carry the line, the column and the offending
/// line with a caret; they are kept whole, on the file's behalf.
fn whole_file_mistake(source: &str, e: &toml::de::Error) -> Mistake {
    let message = e.to_string().trim_end().to_string();
    let kind = serde_kind(e.message());
    let key = match kind {
        SpecErrorKind::Syntax => None,
        SpecErrorKind::UnknownKey => {
            // The span falls on the unknown key itself (or the header of an unknown table).
            let at = e.span().and_then(|s| key_at(source, s.start));
            at.or_else(|| backticked(e.message()).map(str::to_string))
        }
        SpecErrorKind::Missing => {
            // The span covers the header of the table that lacks the field, and is empty for
            // the top level (a missing section).
            let field = backticked(e.message()).map(str::to_string);
            let table = e
                .span()
                .filter(|s| !s.is_empty())
                .and_then(|s| key_at(source, s.start));
            match (table, field) {
                (Some(t), Some(f)) => Some(format!("{t}.{f}")),
                (None, f) => f,
                (t, None) => t,
            }
        }
        _ => e.span().and_then(|s| key_at(source, s.start)),
    };
    Mistake::written(kind, key, message)
}

/// A table of the study file read into `T`, refusing a wrong value by its key. Hazard: serde
/// on a detached table says only "invalid value: integer `-1`, expected u32", naming no key;
/// read from text, the error's span falls on the key's line, which names it.
fn table_into<T: serde::de::DeserializeOwned>(t: &toml::Table, name: &str) -> Result<T, Mistake> {
    let text = toml::to_string(t).map_err(|e| {
        Mistake::written(
            SpecErrorKind::Value,
            Some(name.to_string()),
            format!("in `[{name}]`: {e}"),
        )
    })?;
    toml::from_str::<T>(&text).map_err(|e| {
        let message = e.message().trim_end();
        let kind = serde_kind(message);
        let key = e
            .span()
            .filter(|s| s.start > 0 && kind != SpecErrorKind::Missing)
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
            if kind == SpecErrorKind::Missing {
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
        match key {
            Some(k) => Mistake::at(kind, &format!("{name}.{k}"), message),
            None => {
                // A missing field is named by serde in the message ("missing field `command`").
                let key = match kind {
                    SpecErrorKind::Missing => backticked(message).map(|f| format!("{name}.{f}")),
                    _ => Some(name.to_string()),
                };
                Mistake::written(kind, key, format!("in `[{name}]`: {message}"))
            }
        }
    })
}

/// The dotted key a message written by another module starts with (`trial.model.kind: …`,
/// `pruner.brackets must …`): those modules name the key first, as a word of its own.
fn leading_key(message: &str) -> Option<String> {
    let word = message.split([':', ' ']).next()?.trim_matches('`');
    let is_key = !word.is_empty()
        && word.contains('.')
        && word
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '[' | ']'));
    is_key.then(|| word.to_string())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;
