//! `[study]`: the study's name, objectives, budget, seed, storage, heartbeat and where its runs
//! go. Nothing about the search or the trials.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::SpecErrorKind::{Conflict, Missing, Value};
use super::{Mistake, Overrides, duration_at};
use crate::storage::StorageUrl;
use crate::trial::{Direction, Objective};

/// A study stops starting trials after this many in a row failed on their own (`0`: never).
pub const DEFAULT_MAX_CONSECUTIVE_FAILURES: u64 = 5;

/// The shortest `study.heartbeat`: each beat is a database write.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// `metric` and `direction`: one name, or a list (a multi-objective study).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany {
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
pub(super) struct RawStudy {
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

/// `[study]` checked.
pub(super) struct StudySection {
    pub name: String,
    /// At least one.
    pub objectives: Vec<Objective>,
    pub trials: Option<u64>,
    pub timeout: Option<Duration>,
    pub seed: u64,
    pub storage: StorageUrl,
    pub heartbeat: Duration,
    pub heartbeat_grace: Duration,
    pub max_consecutive_failures: u64,
    pub runs_dir: PathBuf,
}

/// Checks `[study]`; `dir` is the study file's directory, which relative paths are read against.
pub(super) fn check(
    s: &RawStudy,
    overrides: &Overrides,
    dir: &Path,
) -> Result<StudySection, Mistake> {
    if s.name.trim().is_empty() {
        return Err(Mistake::at(Value, "study.name", "must not be empty"));
    }
    if s.name.contains('\0') {
        return Err(Mistake::at(
            Value,
            "study.name",
            format!("{:?} contains a NUL byte, which no database stores", s.name),
        ));
    }
    let objectives = objectives(s)?;
    let (trials, timeout) = budget(s)?;
    let seed = match s.seed {
        None => 0,
        Some(n) if n >= 0 => n as u64,
        Some(n) => {
            return Err(Mistake::at(
                Value,
                "study.seed",
                format!("must be a non-negative integer, not {n}"),
            ));
        }
    };
    let storage = storage(s, overrides, dir)?;
    let (heartbeat, heartbeat_grace) = heartbeat(s)?;
    let max_consecutive_failures = match s.max_consecutive_failures {
        None => DEFAULT_MAX_CONSECUTIVE_FAILURES,
        Some(n) if n >= 0 => n as u64,
        Some(n) => {
            return Err(Mistake::at(
                Value,
                "study.max_consecutive_failures",
                format!("must be 0 (never stop) or more, not {n}"),
            ));
        }
    };
    let runs_dir = dir
        .join(s.runs_dir.as_deref().unwrap_or("runs"))
        .join(sanitize(&s.name));
    Ok(StudySection {
        name: s.name.clone(),
        objectives,
        trials,
        timeout,
        seed,
        storage,
        heartbeat,
        heartbeat_grace,
        max_consecutive_failures,
        runs_dir,
    })
}

/// The study's objectives from `study.metric` and `study.direction`: one metric (direction
/// "minimize" unless named), or lists of equal length (a multi-objective study).
fn objectives(s: &RawStudy) -> Result<Vec<Objective>, Mistake> {
    let metrics = s.metric.list();
    let multi = matches!(s.metric, OneOrMany::Many(_));
    if metrics.is_empty() {
        return Err(Mistake::at(
            Value,
            "study.metric",
            "the list is empty (name at least one reported metric)",
        ));
    }
    for (i, m) in metrics.iter().enumerate() {
        if m.trim().is_empty() || m == "step" || m == "final" {
            return Err(Mistake::at(
                Value,
                "study.metric",
                format!(
                    "`{m}` cannot be the objective (name a reported metric such as \"val_loss\")"
                ),
            ));
        }
        if m.contains('\0') {
            return Err(Mistake::at(
                Value,
                "study.metric",
                format!("{m:?} contains a NUL byte, which no report can name"),
            ));
        }
        if metrics[..i].contains(m) {
            return Err(Mistake::at(
                Value,
                "study.metric",
                format!("`{m}` is named twice"),
            ));
        }
    }
    let directions = match &s.direction {
        None if multi && metrics.len() > 1 => {
            return Err(Mistake::at(
                Missing,
                "study.direction",
                format!(
                    "missing; a study with {} metrics needs a list of {} directions, such as [\"minimize\", \"maximize\"]",
                    metrics.len(),
                    metrics.len()
                ),
            ));
        }
        None => vec!["minimize".to_string(); metrics.len()],
        Some(d) => d.list(),
    };
    if directions.len() != metrics.len() {
        return Err(Mistake::at(
            Conflict,
            "study.direction",
            format!(
                "{} direction(s) for {} metric(s); give one per metric, in the same order",
                directions.len(),
                metrics.len()
            ),
        ));
    }
    metrics
        .into_iter()
        .zip(directions)
        .map(|(metric, d)| {
            let direction = match d.as_str() {
                "minimize" => Direction::Minimize,
                "maximize" => Direction::Maximize,
                other => {
                    return Err(Mistake::at(
                        Value,
                        "study.direction",
                        format!("\"{other}\" is neither \"minimize\" nor \"maximize\""),
                    ));
                }
            };
            Ok(Objective { metric, direction })
        })
        .collect()
}

/// `study.trials` and `study.timeout`: at least one of them.
fn budget(s: &RawStudy) -> Result<(Option<u64>, Option<Duration>), Mistake> {
    let trials = match s.trials {
        None => None,
        Some(n) if n > 0 => Some(n as u64),
        Some(n) => {
            return Err(Mistake::at(
                Value,
                "study.trials",
                format!("must be a positive integer, not {n}"),
            ));
        }
    };
    let timeout = duration_at("study.timeout", s.timeout.as_deref())?;
    if trials.is_none() && timeout.is_none() {
        return Err(Mistake::at(
            Missing,
            "study.trials",
            "a study needs a budget: set `study.trials`, `study.timeout`, or both",
        ));
    }
    Ok((trials, timeout))
}

/// `study.storage`, unless the command line names a database: a SQLite file in an existing
/// directory, or a server URL. The default is `tune.db` beside the study file.
fn storage(s: &RawStudy, overrides: &Overrides, dir: &Path) -> Result<StorageUrl, Mistake> {
    Ok(match (&overrides.db, &s.storage) {
        (Some(db), _) => db.clone(),
        (None, Some(p)) => {
            let url =
                StorageUrl::parse(p, dir).map_err(|e| Mistake::at(Value, "study.storage", e))?;
            if let Some(parent) = url.as_sqlite().and_then(Path::parent)
                && !parent.as_os_str().is_empty()
                && !parent.is_dir()
            {
                return Err(Mistake::at(
                    Value,
                    "study.storage",
                    format!(
                        "the directory {} does not exist (create it, or name a database in an existing directory)",
                        parent.display()
                    ),
                ));
            }
            url
        }
        (None, None) => StorageUrl::Sqlite(dir.join("tune.db")),
    })
}

/// `study.heartbeat` (2 s unless set, at least [`MIN_HEARTBEAT`]) and `study.heartbeat_grace`
/// (60 s unless set, longer than the heartbeat).
fn heartbeat(s: &RawStudy) -> Result<(Duration, Duration), Mistake> {
    let heartbeat =
        duration_at("study.heartbeat", s.heartbeat.as_deref())?.unwrap_or(Duration::from_secs(2));
    let grace = duration_at("study.heartbeat_grace", s.heartbeat_grace.as_deref())?
        .unwrap_or(Duration::from_secs(60));
    if heartbeat < MIN_HEARTBEAT {
        return Err(Mistake::at(
            Value,
            "study.heartbeat",
            format!(
                "{:?} is shorter than {}ms; a heartbeat that often would keep the database busy writing it",
                s.heartbeat.as_deref().unwrap_or_default(),
                MIN_HEARTBEAT.as_millis()
            ),
        ));
    }
    if grace <= heartbeat {
        return Err(Mistake::at(
            Conflict,
            "study.heartbeat_grace",
            format!(
                "must be longer than `study.heartbeat` ({}s)",
                heartbeat.as_secs_f64()
            ),
        ));
    }
    Ok((heartbeat, grace))
}

/// The directory name of a study's runs: the name itself when it is a plain file name, else
/// its safe characters plus `@` and a hash of the exact name, so that two studies never share a
/// directory (`a/b` and `a_b`, or two names in another script, would otherwise both be `a_b`).
pub(super) fn sanitize(name: &str) -> String {
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
