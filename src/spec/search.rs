//! What a study searches and how: `[space]`, `[sampler]`, `[pruner]` and the `[[enqueue]]`d
//! trials to run first. The space's own rules (kinds, bounds, conditions) live in
//! [`crate::space`]; this file names the keys of the file they come from.

use serde::Deserialize;

use super::SpecErrorKind::{Missing, Type, Value};
use super::{Mistake, leading_key, table_into};
use crate::builtin::{BuiltinTrial, Knob};
use crate::pruner::PrunerConfig;
use crate::sampler::{SamplerKind, SamplerOptions};
use crate::space::{ParamKind, ParamValue, Params, Space, SpaceError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSampler {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    n_startup: Option<i64>,
    /// Read as any value, so that a wrong type is refused naming the key.
    #[serde(default)]
    cost_aware: Option<toml::Value>,
}

/// The key of a space mistake: the parameter it names, under `space`.
fn space_key(e: &SpaceError) -> String {
    match e {
        SpaceError::Empty => "space".to_string(),
        SpaceError::Param { param, .. } => format!("space.{param}"),
    }
}

/// `[space]`: the parameters searched.
pub(super) fn space(table: &toml::Table) -> Result<Space, Mistake> {
    Space::from_toml(table)
        .map_err(|e| Mistake::written(Value, Some(space_key(&e)), format!("key `space`: {e}")))
}

/// `[sampler]`: the sampler's kind and options.
pub(super) fn sampler(raw: Option<&RawSampler>) -> Result<(SamplerKind, SamplerOptions), Mistake> {
    let sampler = match raw.and_then(|r| r.kind.as_deref()) {
        None => SamplerKind::default(),
        Some(k) => SamplerKind::parse(k).ok_or_else(|| {
            Mistake::at(
                Value,
                "sampler.kind",
                format!(
                    "unknown sampler \"{k}\" (known: {})",
                    SamplerKind::NAMES.join(", ")
                ),
            )
        })?,
    };
    let sampler_options = SamplerOptions {
        n_startup: match raw.and_then(|r| r.n_startup) {
            None => None,
            Some(n) if (1..=100_000).contains(&n) => Some(n as usize),
            Some(n) => {
                return Err(Mistake::at(
                    Value,
                    "sampler.n_startup",
                    format!("must be between 1 and 100000, not {n}"),
                ));
            }
        },
        cost_aware: match raw.and_then(|r| r.cost_aware.as_ref()) {
            None => None,
            Some(toml::Value::Boolean(b)) => Some(*b),
            Some(v) => {
                return Err(Mistake::at(
                    Type,
                    "sampler.cost_aware",
                    format!("must be true or false, not {v}"),
                ));
            }
        },
    };
    Ok((sampler, sampler_options))
}

/// `[pruner]`, or the default: for a builtin trial that trains `epochs` epochs at most,
/// stopping by prediction over epochs (ASHA over epochs for a `multi`-objective study); no
/// pruning for a command. An epoch-based pruner's full resource is `epochs` unless the table
/// says.
pub(super) fn pruner(
    table: Option<&toml::Table>,
    epochs: Option<u64>,
    multi: bool,
) -> Result<PrunerConfig, Mistake> {
    Ok(match (table, epochs) {
        (None, Some(e)) if multi => PrunerConfig::builtin_default_multi(e),
        (None, Some(e)) => PrunerConfig::builtin_default(e),
        (None, None) => PrunerConfig::default(),
        (Some(t), e) => {
            let mut p = parse_pruner(t)?;
            if let Some(e) = e
                && p.resource() == "epoch"
            {
                p.fill_max_resource(e as f64);
            }
            p
        }
    })
}

fn parse_pruner(t: &toml::Table) -> Result<PrunerConfig, Mistake> {
    if !t.contains_key("kind") {
        return Err(Mistake::at(
            Missing,
            "pruner.kind",
            format!("missing (one of {})", PrunerConfig::NAMES.join(", ")),
        ));
    }
    let cfg: PrunerConfig = table_into(t, "pruner")?;
    cfg.check().map_err(|e| {
        // The pruner's own checks name the key first ("pruner.brackets must be …").
        let message = e.to_string();
        Mistake::written(Value, leading_key(&message), format!("key {message}"))
    })?;
    Ok(cfg)
}

/// The most epochs a builtin trial trains: the fixed `epochs`, or the upper bound of a
/// searched one.
pub(super) fn builtin_epochs(b: &BuiltinTrial, space: &Space) -> Option<u64> {
    match b.knobs.get("epochs")? {
        Knob::Fixed(ParamValue::Int(n)) => u64::try_from(*n).ok(),
        Knob::Fixed(_) => None,
        Knob::Searched => match &space.get("epochs")?.kind {
            ParamKind::Int { high, .. } => u64::try_from(*high).ok(),
            ParamKind::Categorical { choices } => choices
                .iter()
                .filter_map(|c| match c {
                    ParamValue::Int(n) => u64::try_from(*n).ok(),
                    _ => None,
                })
                .max(),
            ParamKind::Float { .. } => None,
        },
    }
}

/// `[[enqueue]]`: the trials to run first, each checked against the space.
pub(super) fn enqueue(tables: &[toml::Table], space: &Space) -> Result<Vec<Params>, Mistake> {
    let mut enqueue = Vec::with_capacity(tables.len());
    for (i, t) in tables.iter().enumerate() {
        let mut p = Params::new();
        for (k, v) in t {
            let pv = ParamValue::from_toml(v).ok_or_else(|| {
                Mistake::at(
                    Type,
                    &format!("enqueue[{i}].{k}"),
                    "must be a string, number or boolean",
                )
            })?;
            p.insert(k.clone(), pv);
        }
        let p = space.coerce(p);
        space
            .validate(&p)
            .map_err(|e| Mistake::at(Value, &format!("enqueue[{i}]"), e))?;
        enqueue.push(p);
    }
    Ok(enqueue)
}
