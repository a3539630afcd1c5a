//! `tune ask-tell`: the optimizer over JSON lines on standard input and output
//! (`shared/spec/ask-tell.md`). Exactly one JSON line answers each request, flushed at once;
//! logs go to standard error; end of input ends the process with status 0.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ExitCode;

use serde_json::{Value, json};

use super::bad;
use crate::cli::AskTellArgs;
use crate::sampler::{AskContext, Sampler, SamplerKind};
use crate::space::{Params, Space};
use crate::storage::{Claim, SqliteStorage, StudyRow, WorkerId};
use crate::trial::{Direction, FinishedTrial, Outcome, TrialNumber, TrialState};

/// Reads the `[space]` table of a file (or a file that is only the table's keys).
pub fn read_space(path: &Path) -> anyhow::Result<Space> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("{}: cannot read: {e}", path.display())))?;
    let doc: toml::Table =
        toml::from_str(&text).map_err(|e| bad(format!("{}: {e}", path.display())))?;
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

/// The ask/tell state machine, separate from I/O so that it can be tested line by line.
pub struct AskTell {
    space: Space,
    direction: Direction,
    seed: u64,
    sampler: Box<dyn Sampler>,
    history: Vec<FinishedTrial>,
    pending: BTreeMap<u64, (Params, Option<i64>)>,
    next: u64,
    db: Option<(SqliteStorage, StudyRow, WorkerId)>,
}

impl AskTell {
    pub fn new(space: Space, kind: SamplerKind, seed: u64, direction: Direction) -> AskTell {
        AskTell {
            space,
            direction,
            seed,
            sampler: crate::sampler::build(kind),
            history: Vec::new(),
            pending: BTreeMap::new(),
            next: 0,
            db: None,
        }
    }

    /// Records the exchange in a database as study `name` (resuming its history).
    pub fn with_db(mut self, mut storage: SqliteStorage, name: &str) -> anyhow::Result<AskTell> {
        let row = storage.create_or_load_study(name, self.direction, "value", None, None)?;
        let worker = storage.register_worker(&row, &["cpu".to_string()])?;
        let (history, _) = storage.history(&row, &self.space)?;
        self.history = history;
        self.db = Some((storage, row, worker));
        Ok(self)
    }

    /// Input ended: trials asked but never told are recorded as interrupted, like those of a
    /// stopped `tune run`, so that they do not stay `running` in the database forever and
    /// their params are queued for the next session on the study.
    pub fn end(&mut self) -> anyhow::Result<()> {
        let pending = std::mem::take(&mut self.pending);
        if let Some((storage, _, _)) = &mut self.db {
            for (_, id) in pending.into_values() {
                if let Some(id) = id {
                    storage.finish_trial(
                        id,
                        TrialState::Failed,
                        None,
                        Some("interrupted: ask-tell ended before this trial was told"),
                        None,
                        &[],
                        None,
                        true,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Answers one request line.
    pub fn handle(&mut self, line: &str) -> Value {
        match self.try_handle(line) {
            Ok(v) => v,
            Err(e) => json!({ "error": e }),
        }
    }

    fn try_handle(&mut self, line: &str) -> Result<Value, String> {
        let req: Value =
            serde_json::from_str(line).map_err(|e| format!("not a JSON object: {e}"))?;
        let Value::Object(obj) = req else {
            return Err("a request must be a JSON object".into());
        };
        if obj.len() != 1 {
            return Err("a request has exactly one key, `ask` or `tell`".into());
        }
        if let Some(a) = obj.get("ask") {
            if !a.is_object() {
                return Err("`ask` takes an object: {\"ask\": {}}".into());
            }
            return self.ask().map_err(|e| format!("storage: {e}"));
        }
        if let Some(t) = obj.get("tell") {
            return self.tell(t);
        }
        Err("unknown request: expected `ask` or `tell`".into())
    }

    fn ask(&mut self) -> anyhow::Result<Value> {
        let pending: Vec<Params> = self.pending.values().map(|(p, _)| p.clone()).collect();
        // Held until the params are stored, as in the scheduler (`SqliteStorage::ask_lock`).
        let _ask_lock = match &self.db {
            Some((storage, _, _)) => Some(storage.ask_lock()?),
            None => None,
        };
        let (number, trial_id, queued) = match &mut self.db {
            Some((storage, row, worker)) => {
                match storage.claim_trial(row, *worker, None, 0, "cpu")? {
                    Claim::New { trial_id, number } => (number.0, Some(trial_id), None),
                    Claim::Queued {
                        trial_id,
                        number,
                        params,
                    } => (number.0, Some(trial_id), Some(params)),
                    Claim::Full => anyhow::bail!("no trial available"),
                }
            }
            None => {
                let n = self.next;
                self.next += 1;
                (n, None, None)
            }
        };
        let params = match queued {
            Some(p) => p,
            None => {
                let ctx = AskContext {
                    space: &self.space,
                    direction: self.direction,
                    history: &self.history,
                    pending: &pending,
                    trial_number: TrialNumber(number),
                    seed: self.seed,
                };
                let p = self.sampler.ask(&ctx);
                if let (Some((storage, _, _)), Some(id)) = (&mut self.db, trial_id) {
                    storage.set_params(id, &self.space, &p)?;
                }
                p
            }
        };
        self.pending.insert(number, (params.clone(), trial_id));
        Ok(json!({ "trial": number, "params": params }))
    }

    fn tell(&mut self, t: &Value) -> Result<Value, String> {
        let Value::Object(t) = t else {
            return Err(
                "`tell` takes an object: {\"tell\": {\"trial\": 0, \"value\": 0.5}}".into(),
            );
        };
        for k in t.keys() {
            if !matches!(k.as_str(), "trial" | "value" | "state") {
                return Err(format!("unknown key `{k}` in tell (trial, value, state)"));
            }
        }
        let number = t
            .get("trial")
            .and_then(Value::as_u64)
            .ok_or("tell needs `trial`, a trial number")?;
        let state = match t.get("state") {
            None => TrialState::Complete,
            Some(s) => match s.as_str() {
                Some("complete") => TrialState::Complete,
                Some("fail" | "failed") => TrialState::Failed,
                Some("pruned") => TrialState::Pruned,
                _ => return Err(format!("unknown state {s}: complete, fail or pruned")),
            },
        };
        let value = match t.get("value") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => n.as_f64(),
            Some(other) => return Err(format!("`value` must be a number, not {other}")),
        };
        if state == TrialState::Complete && value.is_none() {
            return Err("a complete trial needs a `value`".into());
        }
        if !self.pending.contains_key(&number) {
            let told = self.history.iter().any(|h| h.number.0 == number);
            return Err(if told {
                format!("trial {number} was already told")
            } else {
                format!("unknown trial {number}: it was never asked")
            });
        }
        let (params, trial_id) = self.pending.remove(&number).ok_or("unknown trial")?;
        let outcome = match state {
            TrialState::Complete => Outcome::Complete {
                value: value.unwrap_or(f64::NAN),
            },
            TrialState::Pruned => Outcome::Pruned { value, step: None },
            _ => Outcome::Failed,
        };
        if let (Some((storage, _, _)), Some(id)) = (&mut self.db, trial_id) {
            storage
                .finish_trial(id, state, value, None, None, &[], None, false)
                .map_err(|e| format!("storage: {e}"))?;
        }
        self.history.push(FinishedTrial {
            number: TrialNumber(number),
            params,
            outcome,
            curve: Vec::new(),
        });
        Ok(json!({ "ok": true }))
    }
}

pub fn ask_tell(args: &AskTellArgs, db: Option<&Path>) -> anyhow::Result<ExitCode> {
    let space = read_space(&args.space)?;
    let kind = SamplerKind::parse(&args.sampler).ok_or_else(|| {
        bad(format!(
            "--sampler: unknown sampler \"{}\" (known: {})",
            args.sampler,
            SamplerKind::NAMES.join(", ")
        ))
    })?;
    let direction = match args.direction.as_str() {
        "minimize" => Direction::Minimize,
        "maximize" => Direction::Maximize,
        other => {
            return Err(bad(format!(
                "--direction: \"{other}\" is neither minimize nor maximize"
            )));
        }
    };
    let mut at = AskTell::new(space, kind, args.seed, direction);
    match (db, &args.study) {
        (Some(path), Some(name)) => at = at.with_db(SqliteStorage::open(path)?, name)?,
        (None, Some(_)) => return Err(bad("--study needs --db PATH (or TUNE_DB)")),
        _ => {}
    }
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = at.handle(&line);
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
            Direction::Minimize,
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
}
