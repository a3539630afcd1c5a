//! `[trial]`: what one trial runs. A command (its arguments, placeholders, environment,
//! timeouts and the check run once before any trial) is checked here; a builtin trial's keys
//! and knobs by [`crate::builtin`], whose refusals this file files under their key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::SpecErrorKind::{Conflict, Missing, Type, Value};
use super::{Mistake, SpecErrorKind, duration_at, leading_key, table_into};
use crate::builtin::KnobError;
use crate::space::Space;
use crate::study::{CommandSpec, Launcher, TrialSpec};

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
    #[serde(default)]
    launcher: Option<String>,
    #[serde(default)]
    python: Option<String>,
    #[serde(default)]
    checkpoint_dir: Option<toml::Value>,
}

/// `[trial]`: a command or a builtin trial. `gpu_memory_fraction` (of `[workers]`) goes to a
/// command trial's environment.
pub(super) fn check(
    table: &toml::Table,
    space: &Space,
    dir: &Path,
    gpu_memory_fraction: Option<f64>,
) -> Result<TrialSpec, Mistake> {
    let kind = match table.get("kind") {
        Some(toml::Value::String(k)) => k.as_str(),
        Some(other) => {
            return Err(Mistake::at(
                Type,
                "trial.kind",
                format!("must be a string, not {}", other.type_str()),
            ));
        }
        None => {
            return Err(Mistake::at(
                Missing,
                "trial.kind",
                "missing (\"command\" or \"builtin\")",
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
            let b = crate::builtin::parse_builtin(table, space, dir).map_err(builtin_mistake)?;
            TrialSpec::Builtin(Box::new(b))
        }
        other => {
            return Err(Mistake::at(
                Value,
                "trial.kind",
                format!("unknown kind \"{other}\" (\"command\" or \"builtin\")"),
            ));
        }
    })
}

/// A builtin trial's refusal, filed under the key its message starts with
/// (`trial.model.kind: …`), of the kind its [`KnobError`] variant says.
fn builtin_mistake(e: KnobError) -> Mistake {
    let message = e.to_string();
    let kind = match e {
        KnobError::Duration(_) => SpecErrorKind::Duration,
        KnobError::UnknownKey(_) => SpecErrorKind::UnknownKey,
        KnobError::Missing(_) => SpecErrorKind::Missing,
        KnobError::Type(_) => SpecErrorKind::Type,
        KnobError::Conflict(_) => SpecErrorKind::Conflict,
        KnobError::Invalid(_) | KnobError::Unresolved(_) => SpecErrorKind::Value,
    };
    Mistake::written(kind, leading_key(&message), message)
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
/// receive it), `{}`, and a placeholder left open at the end (`--lr={lr`). The mistake names
/// no key: the caller says which list and element the argument is.
pub(super) fn check_argument(arg: &str) -> Result<(), Mistake> {
    let fault = |message: String| Err(Mistake::written(Value, None, message));
    if arg.contains('\0') {
        return fault("contains a NUL byte, which no program can be given".into());
    }
    if arg.contains("{}") {
        return fault(
            "has an empty placeholder `{}` (a placeholder names a parameter, e.g. `{lr}`, or one of {trial}, {trial_dir}, {checkpoint_dir}, {device}, {devices}, {gpus})".into(),
        );
    }
    if let Some(open) = arg.rfind('{') {
        let rest = &arg[open + 1..];
        if !rest.is_empty()
            && rest.chars().all(name_char)
            && !rest.starts_with(|c: char| c.is_ascii_digit())
        {
            return fault(format!(
                "has a placeholder that is never closed: `{{{rest}`"
            ));
        }
    }
    Ok(())
}

/// `check_argument` for element `i` of the list at `key`.
fn check_element(key: &str, i: usize, arg: &str) -> Result<(), Mistake> {
    check_argument(arg).map_err(|e| Mistake::at(e.kind, key, format!("element {i} ({arg:?}) {e}")))
}

/// A checkpoint refusal's message without its leading `trial.checkpoint_dir: ` (a
/// [`Mistake`] adds the key itself).
fn strip_key(message: &str) -> String {
    message
        .strip_prefix("trial.checkpoint_dir: ")
        .unwrap_or(message)
        .to_string()
}

const BUILTIN_PLACEHOLDERS: &[&str] = &["trial", "trial_dir", "checkpoint_dir", "device"];
/// Placeholders added later (GPU groups): a parameter of the same name, which studies written
/// before them may have, is not refused and fills them instead.
pub(crate) const GROUP_PLACEHOLDERS: &[&str] = &["devices", "gpus"];

fn command(raw: RawCommandTrial, space: &Space, dir: &Path) -> Result<CommandSpec, Mistake> {
    if raw.command.is_empty() {
        return Err(Mistake::at(
            Value,
            "trial.command",
            "must name a program (a non-empty list of arguments)",
        ));
    }
    if raw.command[0].trim().is_empty() {
        return Err(Mistake::at(
            Value,
            "trial.command",
            "the program (first element) is empty",
        ));
    }
    for b in BUILTIN_PLACEHOLDERS {
        if space.get(b).is_some() {
            return Err(Mistake::at(
                Conflict,
                &format!("space.{b}"),
                format!(
                    "a parameter of a command study may not be named `{b}`: {{{b}}} in the command is tune's own (rename the parameter)"
                ),
            ));
        }
    }
    for (i, arg) in raw.command.iter().enumerate() {
        check_element("trial.command", i, arg)?;
        for (_, _, name) in placeholders(arg) {
            if space.get(name).is_none()
                && !BUILTIN_PLACEHOLDERS.contains(&name)
                && !GROUP_PLACEHOLDERS.contains(&name)
            {
                return Err(Mistake::at(
                    Value,
                    "trial.command",
                    format!(
                        "placeholder {{{name}}} is neither a parameter of the space nor one of {{trial}}, {{trial_dir}}, {{checkpoint_dir}}, {{device}}, {{devices}}, {{gpus}}"
                    ),
                ));
            }
        }
    }
    for k in raw.env.keys() {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(Mistake::at(
                Value,
                "trial.env",
                format!("{k:?} is not a valid environment variable name"),
            ));
        }
    }
    let timeout = duration_at("trial.timeout", raw.timeout.as_deref())?;
    let grace =
        duration_at("trial.grace", raw.grace.as_deref())?.unwrap_or(Duration::from_secs(10));
    for (i, r) in raw.requires.iter().enumerate() {
        if r.trim().is_empty() || r.contains('\0') {
            return Err(Mistake::at(
                Value,
                "trial.requires",
                format!("element {i} ({r:?}) is not a path"),
            ));
        }
    }
    for (i, arg) in raw.check.iter().enumerate() {
        check_element("trial.check", i, arg)?;
        if !placeholders(arg).is_empty() {
            return Err(Mistake::at(
                Value,
                "trial.check",
                format!(
                    "element {i} ({arg:?}) has a placeholder; the check runs once, before any trial, with no params"
                ),
            ));
        }
    }
    if raw.check.first().is_some_and(|p| p.trim().is_empty()) {
        return Err(Mistake::at(
            Value,
            "trial.check",
            "the program (first element) is empty",
        ));
    }
    let launcher = match raw.launcher.as_deref() {
        None if raw.python.is_some() => {
            return Err(Mistake::written(
                Conflict,
                Some("trial.python".to_string()),
                "key `trial.python`: names the Python of `launcher = \"torchrun\"`, but there is no `trial.launcher`; add it or remove `python`",
            ));
        }
        None => None,
        Some("torchrun") => {
            let python = raw.python.unwrap_or_else(|| "python3".to_string());
            if python.trim().is_empty() || python.contains('\0') {
                return Err(Mistake::at(
                    Value,
                    "trial.python",
                    format!("{python:?} is not a program"),
                ));
            }
            Some(Launcher { python })
        }
        Some(other) => {
            return Err(Mistake::at(
                Value,
                "trial.launcher",
                format!("must be \"torchrun\" (the only launcher so far), not {other:?}"),
            ));
        }
    };
    // The same key, and the same forms, as a builtin study's (`crate::checkpoint`).
    let checkpoint_dir = match raw.checkpoint_dir {
        None => None,
        Some(toml::Value::String(s)) => Some(Box::new(
            crate::checkpoint::parse_location(&s, dir)
                .map_err(|e| Mistake::at(Value, "trial.checkpoint_dir", strip_key(&e.0)))?,
        )),
        Some(v) => {
            return Err(Mistake::at(
                Type,
                "trial.checkpoint_dir",
                format!("must be a directory path or an object-store URL (a string), not {v}"),
            ));
        }
    };
    Ok(CommandSpec {
        checkpoint_dir,
        launcher,
        check: raw.check,
        argv: raw.command,
        env: raw.env.into_iter().collect(),
        timeout,
        grace,
        workdir: dir.to_path_buf(),
        requires: raw.requires.into_iter().map(PathBuf::from).collect(),
    })
}
