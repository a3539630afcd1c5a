//! `[workers]`: how many trials run at once and on which devices, and the share of a GPU's
//! memory each may hold. Which devices this machine has is [`crate::devices`]' to say.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::Mistake;
use super::SpecErrorKind::{Conflict, Type, Value};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorkers {
    #[serde(default)]
    count: Option<i64>,
    #[serde(default)]
    devices: Option<toml::Value>,
    #[serde(default)]
    slots_per_device: Option<i64>,
    #[serde(default)]
    gpu_memory_fraction: Option<f64>,
    #[serde(default)]
    gpus_per_trial: Option<toml::Value>,
}

/// `[workers]` checked.
pub(super) struct WorkersSection {
    /// The device of each worker slot.
    pub slots: Vec<String>,
    /// The devices came from `"auto"` (or no `devices` key).
    pub auto_devices: bool,
    pub gpu_memory_fraction: Option<f64>,
    /// GPUs per slot (`gpus_per_trial`, 1 when not written): a slot's device is then a group
    /// such as `cuda:0,cuda:1`.
    pub gpus_per_trial: usize,
}

/// Checks `[workers]` (absent: one slot on each device "auto" finds).
pub(super) fn check(raw: Option<&RawWorkers>) -> Result<WorkersSection, Mistake> {
    let gpus_per_trial = gpus_per_trial(raw.and_then(|w| w.gpus_per_trial.as_ref()))?;
    let slots = slots(raw, gpus_per_trial)?;
    let auto_devices = match raw.and_then(|w| w.devices.as_ref()) {
        None => true,
        Some(toml::Value::String(s)) => s == "auto",
        Some(_) => false,
    };
    let gpu_memory_fraction = memory_fraction(raw.and_then(|w| w.gpu_memory_fraction), &slots)?;
    Ok(WorkersSection {
        slots,
        auto_devices,
        gpu_memory_fraction,
        gpus_per_trial,
    })
}

/// `workers.gpus_per_trial`: a number of GPUs from 1 to 64. A searched one (a table or list,
/// one degree per trial) is not supported yet.
fn gpus_per_trial(raw: Option<&toml::Value>) -> Result<usize, Mistake> {
    const KEY: &str = "workers.gpus_per_trial";
    match raw {
        None => Ok(1),
        Some(toml::Value::Integer(n)) if (1..=64).contains(n) => Ok(*n as usize),
        Some(toml::Value::Integer(n)) => Err(Mistake::at(
            Value,
            KEY,
            format!("must be between 1 and 64 (GPUs per trial), not {n}"),
        )),
        Some(v @ (toml::Value::Table(_) | toml::Value::Array(_))) => Err(Mistake::at(
            Value,
            KEY,
            format!(
                "a searched number of GPUs per trial ({v}) may come later; for now write one number for every trial"
            ),
        )),
        Some(v) => Err(Mistake::at(
            Type,
            KEY,
            format!("must be a whole number of GPUs, not {}", v.type_str()),
        )),
    }
}

/// The devices as slots of `n` GPUs each (`n` > 1): groups of the GPUs listed, or of those
/// `"auto"` finds, closest-connected together (NVLink pairs first, [`crate::devices::gpu_links`]),
/// else in index order. Listed GPUs must all be used; `"auto"` leaves the GPUs over a multiple
/// of `n` idle (the run says so).
fn groups(devices: &[String], n: usize, listed: bool) -> Result<Vec<String>, Mistake> {
    const KEY: &str = "workers.gpus_per_trial";
    if !listed
        && (devices.len() < n
            || devices
                .iter()
                .any(|d| crate::devices::cuda_index(d).is_none()))
    {
        // Too few GPUs found here: the slots stay as found, so that queries of the study read
        // anywhere; running it is refused before any trial starts
        // ([`crate::devices::check_groups`]).
        return Ok(devices.to_vec());
    }
    if let Some(cpu) = devices
        .iter()
        .find(|d| crate::devices::cuda_index(d).is_none())
    {
        return Err(Mistake::at(
            Conflict,
            KEY,
            format!(
                "{n} GPUs per trial need CUDA devices, but `workers.devices` lists \"{cpu}\"; list GPUs only (e.g. devices = [\"cuda:0\", \"cuda:1\"]), or remove `gpus_per_trial` to train on the CPU"
            ),
        ));
    }
    let gpus: Vec<usize> = devices
        .iter()
        .filter_map(|d| crate::devices::cuda_index(d))
        .collect();
    for (i, g) in gpus.iter().enumerate() {
        if gpus[..i].contains(g) {
            return Err(Mistake::at(
                Conflict,
                KEY,
                format!("groups each GPU once, but `workers.devices` lists cuda:{g} twice"),
            ));
        }
    }
    if gpus.len() < n {
        return Err(Mistake::at(
            Value,
            KEY,
            format!(
                "{n} GPUs per trial, but `workers.devices` lists {}; write at most {} or list {n} GPUs or more",
                gpus.len(),
                gpus.len()
            ),
        ));
    }
    let links = if listed {
        crate::devices::gpu_links(gpus.iter().max().map_or(0, |m| m + 1)).map(|all| {
            gpus.iter()
                .map(|&a| gpus.iter().map(|&b| all[a][b]).collect())
                .collect::<Vec<Vec<u32>>>()
        })
    } else {
        crate::devices::gpu_links(gpus.len())
    };
    let (grouped, idle) = crate::devices::group_gpus(&gpus, &links.unwrap_or_default(), n);
    if listed && !idle.is_empty() {
        let idle: Vec<String> = idle.iter().map(|i| format!("cuda:{i}")).collect();
        return Err(Mistake::at(
            Conflict,
            KEY,
            format!(
                "the {} GPUs listed in `workers.devices` make {} group(s) of {n} and would leave {} unused; list a multiple of {n} GPUs",
                gpus.len(),
                grouped.len(),
                idle.join(", ")
            ),
        ));
    }
    Ok(grouped
        .iter()
        .map(|g| crate::devices::group_device(g))
        .collect())
}

/// The devices of the worker slots: `count` slots over `devices` ("auto", "cpu", "cuda:N" or a
/// list), round-robin; or `slots_per_device` slots on each device.
fn slots(raw: Option<&RawWorkers>, gpus_per_trial: usize) -> Result<Vec<String>, Mistake> {
    let count = match raw.and_then(|w| w.count) {
        None => None,
        Some(n) if (1..=1024).contains(&n) => Some(n as usize),
        Some(n) => {
            return Err(Mistake::at(
                Value,
                "workers.count",
                format!("must be between 1 and 1024, not {n}"),
            ));
        }
    };
    let per_device = match raw.and_then(|w| w.slots_per_device) {
        None => None,
        Some(_) if count.is_some() => {
            return Err(Mistake::written(
                Conflict,
                Some("workers.slots_per_device".to_string()),
                "keys `workers.count` and `workers.slots_per_device`: give one of them (count slots round-robin over the devices, or slots_per_device slots on each device), not both",
            ));
        }
        Some(n) if (1..=64).contains(&n) => Some(n as usize),
        Some(n) => {
            return Err(Mistake::at(
                Value,
                "workers.slots_per_device",
                format!("must be between 1 and 64, not {n}"),
            ));
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
                Some("auto") => Err(Mistake::at(
                    Value,
                    "workers.devices",
                    "\"auto\" stands alone, not in a list",
                )),
                Some(s) => check_device(s),
                None => Err(Mistake::at(
                    Type,
                    "workers.devices",
                    format!("entries must be strings, not {}", v.type_str()),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            // An empty list has the right type; anything else that is no string or list not.
            let kind = if other.is_array() { Value } else { Type };
            return Err(Mistake::at(
                kind,
                "workers.devices",
                format!(
                    "must be \"auto\", a device such as \"cpu\" or \"cuda:0\", or a non-empty list of them, not {other}"
                ),
            ));
        }
    };
    let devices = if gpus_per_trial > 1 {
        groups(&devices, gpus_per_trial, listed)?
    } else {
        devices
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
        return Err(Mistake::at(
            Conflict,
            "workers.count",
            format!(
                "{n} slot{} over the {} devices listed in `workers.devices` would leave {unused} unused; raise `count` to {} or more, or list only the devices to use",
                if n == 1 { "" } else { "s" },
                devices.len(),
                devices.len()
            ),
        ));
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
        return Err(Mistake::at(
            Value,
            "workers.gpu_memory_fraction",
            format!(
                "must be above 0 and at most 1 (a share of the GPU's memory per trial), not {f}"
            ),
        ));
    }
    let mut per_gpu: BTreeMap<&str, usize> = BTreeMap::new();
    for d in slots.iter().filter(|d| d.starts_with("cuda:")) {
        *per_gpu.entry(d.as_str()).or_default() += 1;
    }
    if let Some((d, n)) = per_gpu
        .into_iter()
        .find(|&(_, n)| n as f64 * f > 1.0 + 1e-9)
    {
        return Err(Mistake::at(
            Conflict,
            "workers.gpu_memory_fraction",
            format!(
                "{n} slots on {d} × {f} is more than the whole GPU; write at most {:.3} (1 / {n})",
                1.0 / n as f64
            ),
        ));
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
    Err(Mistake::at(
        Value,
        "workers.devices",
        format!("\"{s}\" is not a device (\"cpu\", \"cuda:0\", \"cuda:1\", … or \"auto\")"),
    ))
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
