//! `tune ask-tell`: the optimizer over JSON lines on standard input and output
//! (`docs/ask-tell.md`). Exactly one JSON line answers each request, flushed at once;
//! logs go to standard error; end of input ends the process with status 0.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ExitCode;

use serde_json::{Value, json};

use super::bad;
use crate::cli::AskTellArgs;
use crate::engine::{Engine, EngineSpec, Finish};
use crate::pruner::PrunerConfig;
use crate::sampler::SamplerKind;
use crate::space::Space;
use crate::storage::{MemoryStorage, Storage, StorageUrl};
use crate::trial::{Direction, Objective, TrialId, TrialNumber, TrialState};

/// Reads the `[space]` table of a file (or a file that is only the table's keys).
pub fn read_space(path: &Path) -> anyhow::Result<Space> {
    let doc = read_toml(path)?;
    space_of(path, &doc)
}

fn read_toml(path: &Path) -> anyhow::Result<toml::Table> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("{}: cannot read: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| bad(format!("{}: {e}", path.display())))
}

/// The `[pruner]` a session judges reports by: the file's `[pruner]` table (a study file's
/// syntax) or `--pruner KIND` with `--max-resource`, never both; none without either. Reports
/// carry a step, so the resource is the step.
fn session_pruner(
    path: &Path,
    doc: &toml::Table,
    args: &AskTellArgs,
) -> anyhow::Result<PrunerConfig> {
    let mut cfg = match (doc.get("pruner"), &args.pruner) {
        (Some(_), Some(_)) => {
            return Err(bad(format!(
                "--pruner: {} has a [pruner] table already; give one or the other",
                path.display()
            )));
        }
        (Some(toml::Value::Table(t)), None) => {
            if !t.contains_key("kind") {
                return Err(bad(format!(
                    "{}: key `pruner.kind`: missing (one of {})",
                    path.display(),
                    PrunerConfig::NAMES.join(", ")
                )));
            }
            toml::Value::Table(t.clone())
                .try_into::<PrunerConfig>()
                .map_err(|e| bad(format!("{}: key `pruner`: {}", path.display(), e.message())))?
        }
        (Some(_), None) => {
            return Err(bad(format!(
                "{}: key `pruner`: must be a table",
                path.display()
            )));
        }
        (None, Some(kind)) => {
            let mut t = toml::Table::new();
            t.insert("kind".into(), kind.as_str().into());
            toml::Value::Table(t)
                .try_into::<PrunerConfig>()
                .map_err(|_| {
                    bad(format!(
                        "--pruner: unknown pruner \"{kind}\" (known: {})",
                        PrunerConfig::NAMES.join(", ")
                    ))
                })?
        }
        (None, None) => PrunerConfig::None,
    };
    if let Some(max) = args.max_resource {
        if matches!(cfg, PrunerConfig::None | PrunerConfig::Median(_)) {
            return Err(bad(format!(
                "--max-resource: the {} pruner has no full-trial resource",
                cfg.name()
            )));
        }
        cfg.fill_max_resource(max);
    }
    if cfg.resource() != crate::pruner::DEFAULT_RESOURCE {
        return Err(bad(format!(
            "{}: key `pruner.resource`: ask-tell reports carry a step, so the resource is \"step\", not \"{}\"",
            path.display(),
            cfg.resource()
        )));
    }
    if matches!(cfg, crate::pruner::PrunerConfig::Pbt(_)) {
        return Err(bad(format!(
            "{}: key `pruner.kind`: \"pbt\" continues trials from other trials' checkpoints, which `tune ask-tell` cannot do (its client runs the trials); use \"asha\" or \"forecast\"",
            path.display()
        )));
    }
    if cfg.pauses() {
        return Err(bad(format!(
            "{}: key `pruner.mode`: \"promote\" pauses trials at a rung and resumes them from their checkpoints, which `tune ask-tell` cannot do (its client runs the trials); use mode = \"stop\"",
            path.display()
        )));
    }
    cfg.check().map_err(|e| {
        let where_ = if doc.contains_key("pruner") {
            format!("{}: key ", path.display())
        } else {
            "--pruner: ".to_string()
        };
        bad(format!("{where_}{e}"))
    })?;
    Ok(cfg)
}

fn space_of(path: &Path, doc: &toml::Table) -> anyhow::Result<Space> {
    let table = match doc.get("space") {
        Some(toml::Value::Table(t)) => t.clone(),
        Some(_) => {
            return Err(bad(format!(
                "{}: key `space`: must be a table",
                path.display()
            )));
        }
        None => return Err(bad(format!("{}: no [space] table", path.display()))),
    };
    Space::from_toml(&table).map_err(|e| bad(format!("{}: key `space`: {e}", path.display())))
}

/// Why one request was refused; its message is the `error` of the answer, and the session
/// goes on.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    /// The request is not one this protocol knows, or its values do not fit the session.
    #[error("{0}")]
    Malformed(String),
    /// The study's storage failed to answer it.
    #[error("storage: {0}")]
    Storage(String),
}

impl RequestError {
    fn storage(e: impl std::fmt::Display) -> RequestError {
        RequestError::Storage(e.to_string())
    }
}

/// The ask/tell protocol over the one [`Engine`], separate from I/O so that it can be tested
/// line by line. Without a database the engine keeps the exchange in memory.
pub struct AskTell {
    engine: Engine,
    /// Trials asked and not told yet.
    pending: BTreeMap<u64, TrialId>,
    /// How many objectives a complete trial is told (`value` for one, `values` for more).
    objectives: usize,
}

/// The study name ask-tell uses in memory.
const IN_MEMORY: &str = "ask-tell";

/// How often a session stamps its outstanding trials as alive, and how long another process
/// waits for a silent one before recovering it: the defaults of a study file's
/// `study.heartbeat` and `study.heartbeat_grace`, so a session and `tune run` on one study
/// judge each other alike.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(2);
const HEARTBEAT_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

impl AskTell {
    /// A session on `storage`, as study `name` (resuming its history when it exists).
    pub fn open(
        storage: Box<dyn Storage>,
        name: &str,
        space: Space,
        kind: SamplerKind,
        seed: u64,
        directions: &[Direction],
        pruner: &PrunerConfig,
    ) -> anyhow::Result<AskTell> {
        // Optuna's names for unnamed objectives: `value`, then `value1`, `value2`, …
        let others: Vec<Objective> = directions
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, d)| Objective {
                metric: format!("value{i}"),
                direction: *d,
            })
            .collect();
        let spec = EngineSpec {
            name,
            metric: "value",
            direction: directions.first().copied().unwrap_or_default(),
            others: &others,
            space: &space,
            seed,
            budget: None,
            heartbeat_grace: HEARTBEAT_GRACE,
            pruner,
            file: None,
            source: None,
            slots: &["cpu".to_string()],
            enqueue: &[],
        };
        let mut engine = Engine::open(
            storage,
            &spec,
            crate::sampler::build(kind),
            crate::pruner::build(pruner),
        )?;
        // Trials left `running` by a session (or a run) that died, as `tune run` does: a dead
        // process on this machine at once, one elsewhere after the grace. Their params are
        // queued, so the next asks hand them out again.
        let recovered = engine.recover()?;
        if !recovered.is_empty() {
            eprintln!(
                "tune ask-tell: recovered interrupted trial(s) {} (their params are asked again)",
                recovered
                    .iter()
                    .map(TrialNumber::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(AskTell {
            engine,
            pending: BTreeMap::new(),
            objectives: directions.len().max(1),
        })
    }

    /// A session that keeps nothing once it ends.
    pub fn new(
        space: Space,
        kind: SamplerKind,
        seed: u64,
        directions: &[Direction],
        pruner: &PrunerConfig,
    ) -> AskTell {
        // Memory storage never fails, so neither does opening a study in it.
        Self::open(
            Box::new(MemoryStorage::new()),
            IN_MEMORY,
            space,
            kind,
            seed,
            directions,
            pruner,
        )
        .expect("a study in memory always opens")
    }

    /// Input ended: trials asked but never told are recorded as interrupted, like those of a
    /// stopped `tune run`, so that they do not stay `running` in the database forever and
    /// their params are queued for the next session on the study.
    pub fn end(&mut self) -> anyhow::Result<()> {
        for id in std::mem::take(&mut self.pending).into_values() {
            self.engine.finish(
                id,
                Finish::Interrupted {
                    reason: "interrupted: ask-tell ended before this trial was told".into(),
                },
                &[],
            )?;
        }
        Ok(())
    }

    /// Stamps the outstanding trials as alive (and recovers other processes' dead ones), so
    /// that no other process takes them over while their client computes.
    pub fn heartbeat(&mut self) -> anyhow::Result<()> {
        Ok(self.engine.heartbeat()?)
    }

    /// Answers one request line.
    pub fn handle(&mut self, line: &str) -> Value {
        match self.try_handle(line) {
            Ok(v) => v,
            Err(e) => json!({ "error": e.to_string() }),
        }
    }

    fn try_handle(&mut self, line: &str) -> Result<Value, RequestError> {
        let req: Value = serde_json::from_str(line)
            .map_err(|e| RequestError::Malformed(format!("not a JSON object: {e}")))?;
        let Value::Object(obj) = req else {
            return Err(RequestError::Malformed(
                "a request must be a JSON object".into(),
            ));
        };
        if obj.len() != 1 {
            return Err(RequestError::Malformed(
                "a request has exactly one key, `ask`, `report` or `tell`".into(),
            ));
        }
        if let Some(a) = obj.get("ask") {
            if !a.is_object() {
                return Err(RequestError::Malformed(
                    "`ask` takes an object: {\"ask\": {}}".into(),
                ));
            }
            return self.ask().map_err(RequestError::storage);
        }
        if let Some(t) = obj.get("tell") {
            return self.tell(t);
        }
        if let Some(r) = obj.get("report") {
            return self.report(r);
        }
        Err(RequestError::Malformed(
            "unknown request: expected `ask`, `report` or `tell`".into(),
        ))
    }

    /// The outstanding trial `number` of a request, or why it is none.
    fn outstanding(&self, number: u64) -> Result<TrialId, RequestError> {
        if let Some(id) = self.pending.get(&number) {
            return Ok(*id);
        }
        let told = self
            .engine
            .storage()
            .trial(self.engine.study(), TrialNumber(number))
            .map_err(RequestError::storage)?
            .is_some_and(|t| t.state().is_finished());
        Err(RequestError::Malformed(if told {
            format!("trial {number} was already told")
        } else {
            format!("unknown trial {number}: it was never asked")
        }))
    }

    /// An intermediate value of an outstanding trial: stored as its report at `step`, and
    /// answered with the pruner's decision (`{"prune": false}`, or `true` with the reason).
    /// Once advised to stop, a trial is answered so at every later report until it is told.
    fn report(&mut self, r: &Value) -> Result<Value, RequestError> {
        let Value::Object(r) = r else {
            return Err(RequestError::Malformed(
                "`report` takes an object: {\"report\": {\"trial\": 0, \"step\": 1, \"value\": 0.5}}"
                    .into(),
            ));
        };
        for k in r.keys() {
            if !matches!(k.as_str(), "trial" | "step" | "value") {
                return Err(RequestError::Malformed(format!(
                    "unknown key `{k}` in report (trial, step, value)"
                )));
            }
        }
        let number = trial_number(r.get("trial"), "report")?;
        let step = r
            .get("step")
            .and_then(Value::as_u64)
            .filter(|n| *n <= crate::limits::MAX_STEP)
            .ok_or_else(|| {
                RequestError::Malformed(format!(
                    "report needs `step`, an integer from 0 to {} (epochs, batches: what the pruner's resource counts)",
                    crate::limits::MAX_STEP
                ))
            })?;
        let value = match r.get("value") {
            Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
            Some(other) => {
                return Err(RequestError::Malformed(format!(
                    "`value` must be a number, not {other}"
                )));
            }
            None => {
                return Err(RequestError::Malformed(
                    "report needs `value`, the objective's value at this step".into(),
                ));
            }
        };
        let id = self.outstanding(number)?;
        let report = crate::trial::Report {
            step,
            metrics: BTreeMap::from([("value".to_string(), value)]),
        };
        self.engine
            .report(id, report)
            .map_err(RequestError::storage)?;
        Ok(match self.engine.prune_reason(id) {
            Some(reason) => json!({ "prune": true, "reason": reason }),
            None => json!({ "prune": false }),
        })
    }

    fn ask(&mut self) -> anyhow::Result<Value> {
        let Some(trial) = self.engine.ask(0, "cpu")? else {
            anyhow::bail!("no trial available");
        };
        self.pending.insert(trial.number.0, trial.id);
        Ok(json!({ "trial": trial.number.0, "params": trial.params }))
    }

    fn tell(&mut self, t: &Value) -> Result<Value, RequestError> {
        let Value::Object(t) = t else {
            return Err(RequestError::Malformed(
                "`tell` takes an object: {\"tell\": {\"trial\": 0, \"value\": 0.5}}".into(),
            ));
        };
        for k in t.keys() {
            if !matches!(k.as_str(), "trial" | "value" | "values" | "state") {
                return Err(RequestError::Malformed(format!(
                    "unknown key `{k}` in tell (trial, value, values, state)"
                )));
            }
        }
        let number = trial_number(t.get("trial"), "tell")?;
        let state = match t.get("state") {
            None => TrialState::Complete,
            Some(s) => match s.as_str() {
                Some("complete") => TrialState::Complete,
                Some("fail" | "failed") => TrialState::Failed,
                Some("pruned") => TrialState::Pruned,
                _ => {
                    return Err(RequestError::Malformed(format!(
                        "unknown state {s}: complete, fail or pruned"
                    )));
                }
            },
        };
        let value = match t.get("value") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => n.as_f64(),
            Some(other) => {
                return Err(RequestError::Malformed(format!(
                    "`value` must be a number, not {other}"
                )));
            }
        };
        let values = match t.get("values") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => Some(
                a.iter()
                    .map(Value::as_f64)
                    .collect::<Option<Vec<f64>>>()
                    .ok_or_else(|| {
                        RequestError::Malformed(format!(
                            "`values` must be numbers, not {}",
                            Value::Array(a.clone())
                        ))
                    })?,
            ),
            Some(other) => {
                return Err(RequestError::Malformed(format!(
                    "`values` must be a list of numbers, not {other}"
                )));
            }
        };
        let k = self.objectives;
        if state == TrialState::Complete {
            match (&value, &values) {
                (Some(_), None) if k == 1 => {}
                (None, Some(v)) if v.len() == k => {}
                (_, Some(v)) if v.len() != k => {
                    return Err(RequestError::Malformed(format!(
                        "`values` has {} numbers; this session has {k} objective(s)",
                        v.len()
                    )));
                }
                _ if k == 1 => {
                    return Err(RequestError::Malformed(
                        "a complete trial needs a `value`".into(),
                    ));
                }
                _ => {
                    return Err(RequestError::Malformed(format!(
                        "a complete trial of this session needs `values`, a list of {k} numbers"
                    )));
                }
            }
        }
        let id = self.outstanding(number)?;
        self.pending.remove(&number);
        let finish = match (state, value, values) {
            (TrialState::Pruned, value, values) => Finish::Pruned {
                value: value.or_else(|| values.and_then(|v| v.first().copied())),
                // The pruner's reason where it advised this; else the client's own call.
                reason: Some("by the ask-tell client".into()),
            },
            (TrialState::Complete, _, Some(vs)) => Finish::Values(vs),
            (TrialState::Complete, Some(v), None) => Finish::Value(v),
            _ => Finish::Failed {
                reason: "told as failed".into(),
                log_tail: None,
            },
        };
        self.engine
            .finish(id, finish, &[])
            .map_err(RequestError::storage)?;
        Ok(json!({ "ok": true }))
    }
}

/// The `trial` of a request: a trial number ask gave.
fn trial_number(v: Option<&Value>, request: &str) -> Result<u64, RequestError> {
    v.and_then(Value::as_u64)
        .filter(|n| *n <= crate::limits::MAX_STEP)
        .ok_or_else(|| {
            RequestError::Malformed(format!(
                "{request} needs `trial`, a trial number (an integer from 0 that ask gave)"
            ))
        })
}

pub fn ask_tell(args: &AskTellArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let doc = read_toml(&args.space)?;
    let space = space_of(&args.space, &doc)?;
    let pruner = session_pruner(&args.space, &doc, args)?;
    let kind = SamplerKind::parse(&args.sampler).ok_or_else(|| {
        bad(format!(
            "--sampler: unknown sampler \"{}\" (known: {})",
            args.sampler,
            SamplerKind::NAMES.join(", ")
        ))
    })?;
    let directions = args
        .direction
        .split(',')
        .map(|d| match d.trim() {
            "minimize" => Ok(Direction::Minimize),
            "maximize" => Ok(Direction::Maximize),
            other => Err(bad(format!(
                "--direction: \"{other}\" is neither minimize nor maximize (several objectives: a comma-separated list, e.g. minimize,maximize)"
            ))),
        })
        .collect::<anyhow::Result<Vec<Direction>>>()?;
    let mut at = match (db, &args.study) {
        (Some(url), Some(name)) => AskTell::open(
            crate::storage::open(url).map_err(super::storage_fault)?,
            name,
            space,
            kind,
            args.seed,
            &directions,
            &pruner,
        )
        .map_err(|e| match e.downcast_ref::<crate::storage::StorageError>() {
            Some(crate::storage::StorageError::Differs {
                path, stored, given, ..
            }) => bad(format!(
                "--study {name}: {}: the study is stored with {stored}, but this session's objectives (--direction; ask-tell names them value, value1, …) are {given}. Give the session another --study NAME, or start over with `tune delete --study {name} --db {url}` (it deletes the stored study and its trials)",
                path.display()
            )),
            _ => e,
        })?,
        (None, Some(_)) => return Err(bad("--study needs --db PATH (or TUNE_DB)")),
        _ => AskTell::new(space, kind, args.seed, &directions, &pruner),
    };
    let mut out = std::io::stdout().lock();
    // Input is read on a thread of its own, so that the session stamps its heartbeat while it
    // waits for the next request (a client may compute for hours between ask and tell).
    let (tx, rx) = std::sync::mpsc::channel::<std::io::Result<Vec<u8>>>();
    std::thread::spawn(move || {
        for bytes in std::io::stdin().lock().split(b'\n') {
            if tx.send(bytes).is_err() {
                break;
            }
        }
    });
    let mut next_beat = std::time::Instant::now() + HEARTBEAT;
    loop {
        let now = std::time::Instant::now();
        if now >= next_beat {
            // A missed stamp is not fatal: the grace is many heartbeats long.
            if let Err(e) = at.heartbeat() {
                eprintln!("tune ask-tell: heartbeat failed: {e:#}");
            }
            next_beat = now + HEARTBEAT;
        }
        let bytes = match rx.recv_timeout(next_beat.saturating_duration_since(now)) {
            Ok(bytes) => bytes?,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        // The contract: a request that is not valid gets an error answer and the session
        // goes on; bytes that are not UTF-8 are no exception.
        let Ok(line) = std::str::from_utf8(&bytes) else {
            writeln!(
                out,
                "{}",
                serde_json::json!({"error": "the request is not valid UTF-8"})
            )?;
            out.flush()?;
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        let answer = at.handle(line);
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    at.end()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> AskTell {
        let t: toml::Table = toml::from_str(
            r#"x = { type = "float", low = 0.0, high = 1.0 }
               c = { type = "categorical", choices = ["a", "b"] }"#,
        )
        .expect("toml");
        AskTell::new(
            Space::from_toml(&t).expect("space"),
            SamplerKind::Random,
            1,
            &[Direction::Minimize],
            &PrunerConfig::None,
        )
    }

    #[test]
    fn asks_and_tells_follow_the_protocol() {
        let mut s = session();
        let a = s.handle(r#"{"ask": {}}"#);
        assert_eq!(a["trial"], 0);
        assert!(a["params"]["x"].is_f64());
        assert!(a["params"]["c"].is_string());
        assert_eq!(
            s.handle(r#"{"tell": {"trial": 0, "value": 0.5}}"#),
            json!({"ok": true})
        );
        assert!(
            s.handle(r#"{"tell": {"trial": 0, "value": 0.5}}"#)["error"]
                .as_str()
                .expect("error")
                .contains("already")
        );
        assert!(s.handle(r#"{"tell": {"trial": 9, "value": 0.5}}"#)["error"].is_string());
        assert!(s.handle("not json")["error"].is_string());
        assert!(s.handle(r#"{"bogus": 1}"#)["error"].is_string());
        s.handle(r#"{"ask": {}}"#);
        assert_eq!(
            s.handle(r#"{"tell": {"trial": 1, "state": "fail"}}"#),
            json!({"ok": true})
        );
        s.handle(r#"{"ask": {}}"#);
        assert_eq!(
            s.handle(r#"{"tell": {"trial": 2, "state": "pruned", "value": 0.4}}"#),
            json!({"ok": true})
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_proposals() {
        let run = || {
            let mut s = session();
            (0..5)
                .map(|_| s.handle(r#"{"ask": {}}"#))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn a_session_with_two_directions_is_told_values_and_searches_the_front() {
        let t: toml::Table =
            toml::from_str(r#"x = { type = "float", low = 0.0, high = 1.0 }"#).expect("toml");
        let mut s = AskTell::new(
            Space::from_toml(&t).expect("space"),
            SamplerKind::Gp,
            3,
            &[Direction::Minimize, Direction::Maximize],
            &PrunerConfig::None,
        );
        let a = s.handle(r#"{"ask": {}}"#);
        assert!(
            s.handle(r#"{"tell": {"trial": 0, "value": 0.5}}"#)["error"]
                .as_str()
                .is_some_and(|e| e.contains("`values`, a list of 2 numbers")),
        );
        assert!(
            s.handle(r#"{"tell": {"trial": 0, "values": [0.5]}}"#)["error"]
                .as_str()
                .is_some_and(|e| e.contains("has 1 numbers; this session has 2")),
        );
        let x = a["params"]["x"].as_f64().expect("x");
        assert_eq!(
            s.handle(&format!(
                r#"{{"tell": {{"trial": 0, "values": [{x}, {x}]}}}}"#
            )),
            json!({"ok": true})
        );
        // Both objectives grow with x, one minimised and one maximised: every point is on the
        // front, and the session goes on proposing and storing both values.
        for n in 1..12 {
            let a = s.handle(r#"{"ask": {}}"#);
            let x = a["params"]["x"].as_f64().expect("x");
            assert_eq!(
                s.handle(&format!(
                    r#"{{"tell": {{"trial": {n}, "values": [{x}, {x}]}}}}"#
                )),
                json!({"ok": true})
            );
        }
        let stored = s
            .engine
            .storage()
            .trials(s.engine.study(), None)
            .expect("trials");
        assert_eq!(stored.len(), 12);
        for t in &stored {
            assert_eq!(t.status.others().len(), 1, "{t:?}");
            assert_eq!(Some(t.status.others()[0]), t.value());
        }
    }
}
