//! The builtin trial as a study states it: the `[trial] kind = "builtin"` table checked once
//! into a [`BuiltinTrial`], and its knobs resolved against a trial's params into a [`Hyper`].
//!
//! What belongs here: the study keys of a builtin trial and their validation ([`parse_builtin`]),
//! the knob table and defaults, the `[trial.data]` table ([`DataSpec`]), the concrete
//! hyperparameters of one trial ([`Hyper`]) and its seed ([`trial_seed`]). It is plain typed
//! serde, so the orchestrator checks a builtin study and sends it to a worker without linking
//! libtorch. What does not: anything that trains (models, data loading, precision, the training
//! loop), which is the `tune-train` crate, the only one that links libtorch; processes and the
//! protocol between orchestrator and worker (`runner`); scheduling; storage.
//!
//! # The rule for knobs
//! Every knob (learning rate, optimizer, batch size, model width, …) is set in exactly one
//! place: in the `[trial]` / `[trial.model]` table (fixed for the study), or as a `[space]`
//! parameter of the same name (searched). Both is an error; neither takes the knob's default,
//! and a knob without a default (`lr`) must be given. A searched categorical knob must offer
//! only choices the trainer supports, and a searched numeric knob must stay in its range: both
//! are checked before any trial starts. A `[space]` parameter that is no knob is an error too,
//! since the trainer would silently ignore it.
//!
//! # Study keys
//! ```toml
//! [trial]
//! kind = "builtin"
//! epochs = 3                # training length (a knob: may be searched); and/or
//! time_budget = "90s"       # training time per trial: the run ends at whichever comes first
//! timeout = "10m"           # wall-clock limit: past it the trial fails ("timed out after …")
//! report_every = 0          # report every N optimizer steps; 0 = at the end of each epoch
//! cuda_graphs = "auto"      # auto | true | false: replay each training step from a CUDA graph
//!                           # (auto: on a CUDA device where the step can be captured)
//! # Training knobs (fixed here, or searched as a [space] parameter of the same name):
//! lr = 1e-3                 # required; the peak of the schedule
//! optimizer = "adamw"       # sgd | adam | adamw | rmsprop
//! momentum = 0.9            # sgd and rmsprop
//! nesterov = false          # sgd (needs momentum > 0)
//! weight_decay = 0.0        # L2 for sgd/adam/rmsprop, decoupled for adamw
//! batch_size = 128          # samples per forward pass
//! accumulation = 1          # micro-batches per optimizer step (effective batch = product)
//! amp = "off"               # off | bf16 | fp16 (autocast; fp16 with dynamic loss scaling)
//! schedule = "constant"     # constant | cosine | onecycle
//! warmup = 0.0              # fraction of training spent warming up (onecycle: its rise)
//! lr_scaling = "none"       # none | linear | sqrt, against reference_batch
//! reference_batch = 256
//! clip_grad = 0.0           # max global gradient norm; 0 = no clipping
//!
//! [trial.model]
//! kind = "mlp"              # mlp | cnn | resnet | transformer (fixed)
//! width = 128               # knobs: units / base channels / model dimension
//! depth = 2                 # hidden layers / conv blocks / blocks per stage / layers
//! dropout = 0.0
//! heads = 4                 # transformer only
//! context = 64              # transformer only: tokens per window
//! checkpointing = false     # resnet and transformer: recompute each block's activations in
//!                           # the backward pass instead of keeping them (less memory, ~1/3
//!                           # more compute)
//!
//! [trial.data]
//! dataset = "digits"        # digits | fashion-mnist | gpl3-text | text | npy | safetensors
//! dir = "…"                 # fashion-mnist: default /usr/share/datasets/fashion-mnist
//! path = "…"                # text, safetensors (relative to the study file)
//! x = "x.npy"               # npy: inputs (N, …) and integer labels (N)
//! y = "y.npy"
//! x_key = "x"               # safetensors tensor names
//! y_key = "y"
//! validation = 0.1          # held-out fraction (digits, text, user data; Fashion-MNIST
//!                           # validates on its own 10 000 test images)
//! limit = 10000             # at most this many training samples (tokens for text)
//! normalize = true          # standardise with the training split's mean and std
//! device_cache = "auto"     # auto | always | never: keep the training set on the device
//! max_device_mb = 2048      # auto: the largest training set copied whole (user arrays
//!                           # beyond it stay memory-mapped and are streamed) or kept on a GPU
//! prefetch = 4              # batches the loader thread prepares ahead when streaming
//! ```

pub mod data;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::checkpoint::CheckpointSpec;
use crate::space::{ParamKind, ParamValue, Params, Space};

pub use data::{DataSpec, DeviceCache, Source};

/// The model families of `[trial.model] kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    Mlp,
    Cnn,
    Resnet,
    Transformer,
}

impl ModelKind {
    fn parse(s: &str) -> Option<ModelKind> {
        Some(match s {
            "mlp" => ModelKind::Mlp,
            "cnn" => ModelKind::Cnn,
            "resnet" => ModelKind::Resnet,
            "transformer" => ModelKind::Transformer,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::Mlp => "mlp",
            ModelKind::Cnn => "cnn",
            ModelKind::Resnet => "resnet",
            ModelKind::Transformer => "transformer",
        }
    }
}

/// Where a knob's value comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Knob {
    /// Set in the `[trial]` table (or its default): the same for every trial.
    Fixed(ParamValue),
    /// A `[space]` parameter of this name; when the parameter is inactive (a condition), the
    /// knob's default applies.
    Searched,
}

/// The validated `[trial]` table of a builtin study. Sent to the worker as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuiltinTrial {
    pub model: ModelKind,
    pub data: DataSpec,
    /// Every knob that applies to this model, by name, with where its value comes from.
    pub knobs: BTreeMap<String, Knob>,
    /// Training time per trial; training ends at the end of `epochs` or of this, the first.
    pub time_budget: Option<Duration>,
    /// Report every this many optimizer steps; 0 reports once per epoch.
    pub report_every: u64,
    /// `[trial] timeout`: the wall-clock limit of one trial (the scheduler puts it in
    /// `TrialJob::timeout`); unlike `time_budget` it fails the trial.
    pub timeout: Option<Duration>,
    /// `[trial] cuda_graphs`: whether the trainer captures its step in a CUDA graph. Absent
    /// from a worker request of an older `tune`, which meant eager steps: `auto` now.
    #[serde(default)]
    pub cuda_graphs: CudaGraphs,
    /// `[trial] checkpoints`, `checkpoint_dir`, `checkpoint_every`, `keep_checkpoints`: the
    /// orchestrator's settings (`crate::checkpoint`); the worker gets what they mean for a
    /// trial in its job's `checkpoint`. Absent from what an older `tune` stored: the defaults.
    #[serde(default, skip_serializing_if = "CheckpointSpec::is_default")]
    pub checkpoints: CheckpointSpec,
}

/// `[trial] cuda_graphs`: capture the training step in a CUDA graph after a few warm-up steps
/// and replay it, which saves a small model's kernel launches on a GPU. A setting, not a knob:
/// it changes the speed of a trial, not what it computes, so it is never searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CudaGraphs {
    /// On a CUDA device where the step can be captured; eager elsewhere, silently on the CPU
    /// and with a one-line reason on a GPU.
    #[default]
    Auto,
    /// As `Auto`, but a trial that cannot use graphs says why even on the CPU.
    On,
    /// Eager steps always.
    Off,
}

impl CudaGraphs {
    fn parse(v: &toml::Value) -> Result<CudaGraphs, KnobError> {
        match v {
            toml::Value::Boolean(true) => Ok(CudaGraphs::On),
            toml::Value::Boolean(false) => Ok(CudaGraphs::Off),
            toml::Value::String(s) if s == "auto" => Ok(CudaGraphs::Auto),
            other => Err(KnobError::Invalid(format!(
                "trial.cuda_graphs: must be true, false or \"auto\", not {other}"
            ))),
        }
    }
}

/// The type and range of one knob.
#[derive(Debug, Clone, Copy)]
enum KnobType {
    /// A float strictly above 0.
    Positive,
    /// A float at or above 0.
    NonNegative,
    /// A float in [0, 1).
    Fraction,
    /// An integer at or above this, and at most [`MAX_INT_KNOB`].
    IntAtLeast(i64),
    Bool,
    Choice(&'static [&'static str]),
}

/// The largest value of an integer knob (batch size, epochs, width, …): far past any real
/// trial, and small enough that products of two (the effective batch is `batch_size *
/// accumulation`) never overflow an `i64`.
pub const MAX_INT_KNOB: i64 = i32::MAX as i64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Trial,
    Model,
}

struct KnobSpec {
    name: &'static str,
    section: Section,
    ty: KnobType,
    /// The model kinds that use it (`None`: all).
    models: Option<&'static [ModelKind]>,
}

/// The knobs that may change while a trial runs, so population-based training explores them
/// (a child resumes its parent's checkpoint with new values): the others shape the model, the
/// data order, the optimizer's state or the loss scaling that the checkpoint holds.
pub const PBT_MUTABLE: &[&str] = &["lr", "momentum", "weight_decay", "clip_grad", "dropout"];

pub const OPTIMIZERS: &[&str] = &["sgd", "adam", "adamw", "rmsprop"];
pub const AMP_MODES: &[&str] = &["off", "bf16", "fp16"];
pub const SCHEDULES: &[&str] = &["constant", "cosine", "onecycle"];
pub const LR_SCALINGS: &[&str] = &["none", "linear", "sqrt"];

const KNOBS: &[KnobSpec] = &[
    KnobSpec {
        name: "lr",
        section: Section::Trial,
        ty: KnobType::Positive,
        models: None,
    },
    KnobSpec {
        name: "optimizer",
        section: Section::Trial,
        ty: KnobType::Choice(OPTIMIZERS),
        models: None,
    },
    KnobSpec {
        name: "momentum",
        section: Section::Trial,
        ty: KnobType::Fraction,
        models: None,
    },
    KnobSpec {
        name: "nesterov",
        section: Section::Trial,
        ty: KnobType::Bool,
        models: None,
    },
    KnobSpec {
        name: "weight_decay",
        section: Section::Trial,
        ty: KnobType::NonNegative,
        models: None,
    },
    KnobSpec {
        name: "batch_size",
        section: Section::Trial,
        ty: KnobType::IntAtLeast(1),
        models: None,
    },
    KnobSpec {
        name: "accumulation",
        section: Section::Trial,
        ty: KnobType::IntAtLeast(1),
        models: None,
    },
    KnobSpec {
        name: "amp",
        section: Section::Trial,
        ty: KnobType::Choice(AMP_MODES),
        models: None,
    },
    KnobSpec {
        name: "schedule",
        section: Section::Trial,
        ty: KnobType::Choice(SCHEDULES),
        models: None,
    },
    KnobSpec {
        name: "warmup",
        section: Section::Trial,
        ty: KnobType::Fraction,
        models: None,
    },
    KnobSpec {
        name: "lr_scaling",
        section: Section::Trial,
        ty: KnobType::Choice(LR_SCALINGS),
        models: None,
    },
    KnobSpec {
        name: "reference_batch",
        section: Section::Trial,
        ty: KnobType::IntAtLeast(1),
        models: None,
    },
    KnobSpec {
        name: "clip_grad",
        section: Section::Trial,
        ty: KnobType::NonNegative,
        models: None,
    },
    KnobSpec {
        name: "epochs",
        section: Section::Trial,
        ty: KnobType::IntAtLeast(1),
        models: None,
    },
    KnobSpec {
        name: "width",
        section: Section::Model,
        ty: KnobType::IntAtLeast(1),
        models: None,
    },
    KnobSpec {
        name: "depth",
        section: Section::Model,
        ty: KnobType::IntAtLeast(1),
        models: None,
    },
    KnobSpec {
        name: "dropout",
        section: Section::Model,
        ty: KnobType::Fraction,
        models: None,
    },
    KnobSpec {
        name: "heads",
        section: Section::Model,
        ty: KnobType::IntAtLeast(1),
        models: Some(&[ModelKind::Transformer]),
    },
    KnobSpec {
        name: "context",
        section: Section::Model,
        ty: KnobType::IntAtLeast(2),
        models: Some(&[ModelKind::Transformer]),
    },
    KnobSpec {
        name: "checkpointing",
        section: Section::Model,
        ty: KnobType::Bool,
        models: Some(&[ModelKind::Resnet, ModelKind::Transformer]),
    },
];

/// The default of a knob for a model kind; `None` where the knob must be given.
fn knob_default(name: &str, model: ModelKind) -> Option<ParamValue> {
    use ParamValue::{Bool, Float, Int, Str};
    Some(match name {
        "optimizer" => Str("adamw".into()),
        "momentum" => Float(0.9),
        "nesterov" => Bool(false),
        "weight_decay" => Float(0.0),
        "batch_size" => Int(128),
        "accumulation" => Int(1),
        "amp" => Str("off".into()),
        "schedule" => Str("constant".into()),
        "warmup" => Float(0.0),
        "lr_scaling" => Str("none".into()),
        "reference_batch" => Int(256),
        "clip_grad" => Float(0.0),
        "width" => Int(match model {
            ModelKind::Mlp => 128,
            ModelKind::Cnn => 32,
            ModelKind::Resnet => 16,
            ModelKind::Transformer => 128,
        }),
        "depth" => Int(match model {
            ModelKind::Resnet => 1,
            _ => 2,
        }),
        "dropout" => Float(0.0),
        "heads" => Int(4),
        "context" => Int(64),
        "checkpointing" => Bool(false),
        // `lr` has no sensible default across optimizers; `epochs` may be left out when a
        // time budget is given (checked in `parse_builtin`).
        _ => return None,
    })
}

/// A builtin trial's key or knob refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KnobError {
    /// A `[trial]` key or knob of the study file (or a searched parameter's range) that a
    /// builtin trial cannot take; the message names it.
    #[error("{0}")]
    Invalid(String),
    /// A key a builtin trial does not know; the message names it and the known ones.
    #[error("{0}")]
    UnknownKey(String),
    /// A key a builtin trial needs and the study file lacks; the message names it.
    #[error("{0}")]
    Missing(String),
    /// A key of the wrong type (a string where a table belongs); the message names it.
    #[error("{0}")]
    Type(String),
    /// A knob both set in `[trial]` and searched in `[space]`; the message names it.
    #[error("{0}")]
    Conflict(String),
    /// `trial.timeout` or `trial.time_budget` that is not a duration tune accepts.
    #[error(transparent)]
    Duration(#[from] crate::limits::DurationError),
    /// A trial's params that do not resolve to every knob (a param outside the checked space,
    /// e.g. enqueued by hand); the trial fails with this message.
    #[error("{0}")]
    Unresolved(String),
}

impl KnobType {
    /// Checks one value; the message says what is wrong.
    fn check(self, v: &ParamValue) -> Result<(), KnobError> {
        match self {
            KnobType::Positive | KnobType::NonNegative | KnobType::Fraction => {
                let Some(x) = v.as_f64() else {
                    return Err(KnobError::Invalid(format!("must be a number, not {v}")));
                };
                let ok = match self {
                    KnobType::Positive => x > 0.0 && x.is_finite(),
                    KnobType::NonNegative => x >= 0.0 && x.is_finite(),
                    _ => (0.0..1.0).contains(&x),
                };
                if ok {
                    Ok(())
                } else {
                    Err(KnobError::Invalid(format!(
                        "must be {}, not {x}",
                        self.describe()
                    )))
                }
            }
            KnobType::IntAtLeast(min) => match v {
                ParamValue::Int(i) if (min..=MAX_INT_KNOB).contains(i) => Ok(()),
                _ => Err(KnobError::Invalid(format!(
                    "must be {}, not {v}",
                    self.describe()
                ))),
            },
            KnobType::Bool => match v {
                ParamValue::Bool(_) => Ok(()),
                _ => Err(KnobError::Invalid(format!(
                    "must be true or false, not {v}"
                ))),
            },
            KnobType::Choice(choices) => match v {
                ParamValue::Str(s) if choices.contains(&s.as_str()) => Ok(()),
                _ => Err(KnobError::Invalid(format!(
                    "must be one of {}, not {v}",
                    choices.join(", ")
                ))),
            },
        }
    }

    fn describe(self) -> String {
        match self {
            KnobType::Positive => "a number > 0".into(),
            KnobType::NonNegative => "a number >= 0".into(),
            KnobType::Fraction => "a number in [0, 1)".into(),
            KnobType::IntAtLeast(m) => format!("an integer from {m} to {MAX_INT_KNOB}"),
            KnobType::Bool => "true or false".into(),
            KnobType::Choice(c) => format!("one of {}", c.join(", ")),
        }
    }

    /// Checks that every value a searched parameter can take is valid for this knob.
    fn check_param(self, kind: &ParamKind) -> Result<(), KnobError> {
        match (self, kind) {
            (_, ParamKind::Categorical { choices }) => {
                for c in choices {
                    // Integer knobs searched as a categorical of integers are fine; floats
                    // listed as choices of a float knob too.
                    let c = match (self, c) {
                        (
                            KnobType::Positive | KnobType::NonNegative | KnobType::Fraction,
                            ParamValue::Int(i),
                        ) => ParamValue::Float(*i as f64),
                        _ => c.clone(),
                    };
                    self.check(&c)
                        .map_err(|e| KnobError::Invalid(format!("choice {c}: {e}")))?;
                }
                Ok(())
            }
            (
                KnobType::Positive | KnobType::NonNegative | KnobType::Fraction,
                ParamKind::Float { low, high, .. },
            ) => {
                self.check(&ParamValue::Float(*low))
                    .map_err(|e| KnobError::Invalid(format!("low: {e}")))?;
                // The high end of a fraction is exclusive for the knob but inclusive for
                // the space: a space reaching 1.0 may sample it.
                self.check(&ParamValue::Float(*high))
                    .map_err(|e| KnobError::Invalid(format!("high: {e}")))
            }
            (
                KnobType::Positive | KnobType::NonNegative | KnobType::Fraction,
                ParamKind::Int { low, high, .. },
            ) => {
                self.check(&ParamValue::Float(*low as f64))
                    .map_err(|e| KnobError::Invalid(format!("low: {e}")))?;
                self.check(&ParamValue::Float(*high as f64))
                    .map_err(|e| KnobError::Invalid(format!("high: {e}")))
            }
            (KnobType::IntAtLeast(_), ParamKind::Int { low, high, .. }) => {
                self.check(&ParamValue::Int(*low))
                    .map_err(|e| KnobError::Invalid(format!("low: {e}")))?;
                self.check(&ParamValue::Int(*high))
                    .map_err(|e| KnobError::Invalid(format!("high: {e}")))
            }
            (ty, _) => Err(KnobError::Invalid(format!(
                "is {} here, so its parameter must be {}",
                ty.describe(),
                match ty {
                    KnobType::IntAtLeast(_) => "an int or a categorical of integers",
                    KnobType::Bool => "a categorical of true/false",
                    KnobType::Choice(_) => "a categorical of strings",
                    _ => "a float, an int or a categorical of numbers",
                }
            ))),
        }
    }
}

/// Parses and checks the `[trial]` table of a builtin study. See the module documentation for
/// the rule of knobs; user data paths are resolved against `study_dir`.
pub fn parse_builtin(
    table: &toml::Table,
    space: &Space,
    study_dir: &Path,
) -> Result<BuiltinTrial, KnobError> {
    let model_table = match table.get("model") {
        Some(toml::Value::Table(t)) => t.clone(),
        Some(other) => {
            return Err(KnobError::Type(format!(
                "trial.model: must be a table, not {}",
                other.type_str()
            )));
        }
        None => {
            return Err(KnobError::Missing(
                "trial.model: missing (a table with `kind = \"mlp\"` etc.)".into(),
            ));
        }
    };
    let model = match model_table.get("kind") {
        Some(toml::Value::String(s)) => ModelKind::parse(s).ok_or_else(|| {
            KnobError::Invalid(format!(
                "trial.model.kind: must be one of mlp, cnn, resnet, transformer, not {s:?}"
            ))
        })?,
        Some(other) => {
            return Err(KnobError::Type(format!(
                "trial.model.kind: must be a string, not {}",
                other.type_str()
            )));
        }
        None => {
            return Err(KnobError::Missing(
                "trial.model.kind: missing (mlp, cnn, resnet or transformer)".into(),
            ));
        }
    };
    let data = match table.get("data") {
        Some(toml::Value::Table(t)) => DataSpec::parse(t, study_dir)?,
        Some(other) => {
            return Err(KnobError::Type(format!(
                "trial.data: must be a table, not {}",
                other.type_str()
            )));
        }
        None => {
            return Err(KnobError::Missing(
                "trial.data: missing (a table with `dataset = \"digits\"` etc.)".into(),
            ));
        }
    };
    data.check_model(model)?;

    let mut time_budget = None;
    let mut timeout = None;
    let mut report_every = 0;
    let mut cuda_graphs = CudaGraphs::Auto;
    let checkpoints =
        CheckpointSpec::parse(table, study_dir).map_err(|e| KnobError::Invalid(e.to_string()))?;
    for (key, value) in table {
        match key.as_str() {
            "kind" | "model" | "data" => {}
            k if crate::checkpoint::KEYS.contains(&k) => {}
            "time_budget" | "timeout" => {
                let s = value.as_str().ok_or_else(|| {
                    KnobError::Invalid(format!(
                        "trial.{key}: must be a duration string such as \"90s\" or \"5m\""
                    ))
                })?;
                let d = crate::limits::duration(&format!("trial.{key}"), s)?;
                if key == "timeout" {
                    timeout = Some(d);
                } else {
                    time_budget = Some(d);
                }
            }
            "cuda_graphs" => cuda_graphs = CudaGraphs::parse(value)?,
            "report_every" => match value.as_integer() {
                Some(n) if (0..=MAX_INT_KNOB).contains(&n) => report_every = n as u64,
                _ => {
                    return Err(KnobError::Invalid(format!(
                        "trial.report_every: must be an integer from 0 to {MAX_INT_KNOB} (steps; 0 = every epoch), not {value}"
                    )));
                }
            },
            k if KNOBS
                .iter()
                .any(|s| s.name == k && s.section == Section::Trial) => {}
            k if KNOBS.iter().any(|s| s.name == k) => {
                return Err(KnobError::Invalid(format!(
                    "trial.{k}: a model knob; set it in [trial.model] (or search it in [space])"
                )));
            }
            k => {
                return Err(KnobError::UnknownKey(format!(
                    "trial.{k}: unknown key (known: time_budget, timeout, report_every, cuda_graphs, {}, model, data, {})",
                    crate::checkpoint::KEYS.join(", "),
                    KNOBS
                        .iter()
                        .filter(|s| s.section == Section::Trial)
                        .map(|s| s.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    for key in model_table.keys() {
        if key == "kind" {
            continue;
        }
        match KNOBS.iter().find(|s| s.name == key) {
            Some(s) if s.section == Section::Model => {
                if let Some(models) = s.models
                    && !models.contains(&model)
                {
                    return Err(KnobError::Invalid(format!(
                        "trial.model.{key}: not used by model kind {} (only by {})",
                        model.as_str(),
                        models
                            .iter()
                            .map(|m| m.as_str())
                            .collect::<Vec<_>>()
                            .join(" and ")
                    )));
                }
            }
            Some(_) => {
                return Err(KnobError::Invalid(format!(
                    "trial.model.{key}: a training knob; set it in [trial] (or search it in [space])"
                )));
            }
            None => {
                return Err(KnobError::UnknownKey(format!(
                    "trial.model.{key}: unknown key (known: kind, {})",
                    KNOBS
                        .iter()
                        .filter(|s| s.section == Section::Model
                            && s.models.is_none_or(|m| m.contains(&model)))
                        .map(|s| s.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }

    let mut knobs = BTreeMap::new();
    for spec in KNOBS {
        if let Some(models) = spec.models
            && !models.contains(&model)
        {
            if space.get(spec.name).is_some() {
                return Err(KnobError::Invalid(format!(
                    "space.{}: not used by model kind {} (only by {})",
                    spec.name,
                    model.as_str(),
                    models
                        .iter()
                        .map(|m| m.as_str())
                        .collect::<Vec<_>>()
                        .join(" and ")
                )));
            }
            continue;
        }
        let (section_table, path) = match spec.section {
            Section::Trial => (table, format!("trial.{}", spec.name)),
            Section::Model => (&model_table, format!("trial.model.{}", spec.name)),
        };
        let fixed = section_table.get(spec.name);
        let searched = space.get(spec.name);
        let knob = match (fixed, searched) {
            (Some(_), Some(_)) => {
                return Err(KnobError::Conflict(format!(
                    "{path}: set here and searched in [space] as well; keep one"
                )));
            }
            (Some(v), None) => {
                let v = ParamValue::from_toml(v).ok_or_else(|| {
                    KnobError::Invalid(format!("{path}: must be {}, not {v}", spec.ty.describe()))
                })?;
                let v = widen(spec.ty, v);
                spec.ty
                    .check(&v)
                    .map_err(|e| KnobError::Invalid(format!("{path}: {e}")))?;
                Knob::Fixed(v)
            }
            (None, Some(p)) => {
                spec.ty
                    .check_param(&p.kind)
                    .map_err(|e| KnobError::Invalid(format!("space.{}: {e}", spec.name)))?;
                if !p.when.is_empty() && knob_default(spec.name, model).is_none() {
                    return Err(KnobError::Invalid(format!(
                        "space.{}: has a condition, but {path} has no default to use when the condition is false",
                        spec.name
                    )));
                }
                Knob::Searched
            }
            (None, None) => match knob_default(spec.name, model) {
                Some(v) => Knob::Fixed(v),
                None if spec.name == "epochs" => {
                    if time_budget.is_none() {
                        return Err(KnobError::Missing(
                            "trial.epochs: missing; give epochs, a time_budget, or both".into(),
                        ));
                    }
                    continue;
                }
                None => {
                    return Err(KnobError::Missing(format!(
                        "{path}: missing (set it here or search it in [space])"
                    )));
                }
            },
        };
        knobs.insert(spec.name.to_string(), knob);
    }
    for p in space.params() {
        if !knobs.contains_key(&p.name) {
            return Err(KnobError::Invalid(format!(
                "space.{}: not a knob of the builtin trainer for model kind {} (knobs: {})",
                p.name,
                model.as_str(),
                knobs.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let trial = BuiltinTrial {
        model,
        data,
        knobs,
        time_budget,
        report_every,
        timeout,
        cuda_graphs,
        checkpoints,
    };
    // A fixed combination that can never work is a study error, not a failure of each trial.
    if let (Some(Knob::Fixed(w)), Some(Knob::Fixed(h))) =
        (trial.knobs.get("width"), trial.knobs.get("heads"))
        && let (ParamValue::Int(w), ParamValue::Int(h)) = (w, h)
        && w % h != 0
    {
        return Err(KnobError::Invalid(format!(
            "trial.model.width: {w} is not a multiple of trial.model.heads = {h}"
        )));
    }
    Ok(trial)
}

/// `lr = 1` means 1.0: float knobs accept integers.
fn widen(ty: KnobType, v: ParamValue) -> ParamValue {
    match (ty, v) {
        (KnobType::Positive | KnobType::NonNegative | KnobType::Fraction, ParamValue::Int(i)) => {
            ParamValue::Float(i as f64)
        }
        (_, v) => v,
    }
}

/// The optimizer of a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    Sgd,
    Adam,
    Adamw,
    Rmsprop,
}

/// Precision of the forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Amp {
    Off,
    Bf16,
    Fp16,
}

impl fmt::Display for Amp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Amp::Off => "off",
            Amp::Bf16 => "bf16",
            Amp::Fp16 => "fp16",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    Constant,
    Cosine,
    Onecycle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LrScaling {
    None,
    Linear,
    Sqrt,
}

/// The concrete hyperparameters of one trial: the knobs resolved against its params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hyper {
    pub model: ModelKind,
    /// The learning rate as given, before `lr_scaling`; see [`Hyper::peak_lr`].
    pub lr: f64,
    pub optimizer: OptimizerKind,
    pub momentum: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    /// Samples per forward pass (micro-batch).
    pub batch_size: i64,
    /// Micro-batches per optimizer step.
    pub accumulation: i64,
    pub amp: Amp,
    pub schedule: ScheduleKind,
    pub warmup: f64,
    pub lr_scaling: LrScaling,
    pub reference_batch: i64,
    /// Max global gradient norm; 0 = no clipping.
    pub clip_grad: f64,
    pub epochs: Option<i64>,
    pub time_budget: Option<Duration>,
    pub report_every: u64,
    pub width: i64,
    pub depth: i64,
    pub dropout: f64,
    pub heads: i64,
    pub context: i64,
    /// Recompute the blocks' activations in the backward pass instead of keeping them
    /// (ResNet and Transformer; always false for the others). Absent in a `Hyper` written
    /// before the knob existed: false.
    #[serde(default)]
    pub checkpointing: bool,
}

impl Hyper {
    /// Samples per optimizer step: the one place the effective batch is computed.
    pub fn effective_batch(&self) -> i64 {
        self.batch_size * self.accumulation
    }

    /// The peak learning rate after `lr_scaling` against `reference_batch`.
    pub fn peak_lr(&self) -> f64 {
        let ratio = self.effective_batch() as f64 / self.reference_batch as f64;
        match self.lr_scaling {
            LrScaling::None => self.lr,
            LrScaling::Linear => self.lr * ratio,
            LrScaling::Sqrt => self.lr * ratio.sqrt(),
        }
    }
}

impl BuiltinTrial {
    /// The value of one knob for a trial with these params.
    fn value(&self, name: &str, params: &Params) -> Result<Option<ParamValue>, KnobError> {
        match self.knobs.get(name) {
            Some(Knob::Fixed(v)) => Ok(Some(v.clone())),
            Some(Knob::Searched) => match params.get(name) {
                Some(v) => Ok(Some(v.clone())),
                None => Ok(knob_default(name, self.model)),
            },
            None => Ok(None),
        }
    }

    /// Resolves every knob against a trial's params. Params come from the space that
    /// `parse_builtin` checked, so an error here means a param outside it (e.g. enqueued by
    /// hand); the trial then fails with this message.
    pub fn resolve(&self, params: &Params) -> Result<Hyper, KnobError> {
        let get = |name: &str| -> Result<ParamValue, KnobError> {
            let v = self
                .value(name, params)?
                .ok_or_else(|| KnobError::Unresolved(format!("knob `{name}` has no value")))?;
            let spec = KNOBS
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| KnobError::Unresolved(format!("knob `{name}` is unknown")))?;
            let v = widen(spec.ty, v);
            spec.ty
                .check(&v)
                .map_err(|e| KnobError::Unresolved(format!("param `{name}`: {e}")))?;
            Ok(v)
        };
        let f = |name: &str| -> Result<f64, KnobError> {
            get(name)?
                .as_f64()
                .ok_or_else(|| KnobError::Unresolved(format!("param `{name}` is not a number")))
        };
        let i = |name: &str| -> Result<i64, KnobError> {
            match get(name)? {
                ParamValue::Int(i) => Ok(i),
                v => Err(KnobError::Unresolved(format!(
                    "param `{name}` is not an integer: {v}"
                ))),
            }
        };
        let s = |name: &str| -> Result<String, KnobError> {
            match get(name)? {
                ParamValue::Str(s) => Ok(s),
                v => Err(KnobError::Unresolved(format!(
                    "param `{name}` is not a string: {v}"
                ))),
            }
        };
        let b = |name: &str| -> Result<bool, KnobError> {
            match get(name)? {
                ParamValue::Bool(b) => Ok(b),
                v => Err(KnobError::Unresolved(format!(
                    "param `{name}` is not a boolean: {v}"
                ))),
            }
        };
        let optimizer = match s("optimizer")?.as_str() {
            "sgd" => OptimizerKind::Sgd,
            "adam" => OptimizerKind::Adam,
            "adamw" => OptimizerKind::Adamw,
            _ => OptimizerKind::Rmsprop,
        };
        let amp = match s("amp")?.as_str() {
            "bf16" => Amp::Bf16,
            "fp16" => Amp::Fp16,
            _ => Amp::Off,
        };
        let schedule = match s("schedule")?.as_str() {
            "cosine" => ScheduleKind::Cosine,
            "onecycle" => ScheduleKind::Onecycle,
            _ => ScheduleKind::Constant,
        };
        let lr_scaling = match s("lr_scaling")?.as_str() {
            "linear" => LrScaling::Linear,
            "sqrt" => LrScaling::Sqrt,
            _ => LrScaling::None,
        };
        let epochs = match self.value("epochs", params)? {
            Some(_) => Some(i("epochs")?),
            None => None,
        };
        let transformer = self.model == ModelKind::Transformer;
        let hyper = Hyper {
            model: self.model,
            lr: f("lr")?,
            optimizer,
            momentum: f("momentum")?,
            nesterov: b("nesterov")?,
            weight_decay: f("weight_decay")?,
            batch_size: i("batch_size")?,
            accumulation: i("accumulation")?,
            amp,
            schedule,
            warmup: f("warmup")?,
            lr_scaling,
            reference_batch: i("reference_batch")?,
            clip_grad: f("clip_grad")?,
            epochs,
            time_budget: self.time_budget,
            report_every: self.report_every,
            width: i("width")?,
            depth: i("depth")?,
            dropout: f("dropout")?,
            heads: if transformer { i("heads")? } else { 1 },
            context: if transformer { i("context")? } else { 1 },
            checkpointing: match self.model {
                ModelKind::Resnet | ModelKind::Transformer => b("checkpointing")?,
                ModelKind::Mlp | ModelKind::Cnn => false,
            },
        };
        if transformer && hyper.width % hyper.heads != 0 {
            return Err(KnobError::Unresolved(format!(
                "width {} is not a multiple of heads {}",
                hyper.width, hyper.heads
            )));
        }
        Ok(hyper)
    }
}

/// The seed of one trial: the study seed mixed with the trial number (splitmix64), so trials
/// differ from each other and a study seed reproduces all of them.
pub fn trial_seed(study_seed: u64, number: u64) -> u64 {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    // libtorch takes an i64 seed; keep it non-negative so it round-trips.
    mix(study_seed ^ mix(number)) >> 1
}

/// The default location of the Debian package's Fashion-MNIST.
pub const FASHION_MNIST_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// Resolves a user path against the study directory.
fn resolve_path(study_dir: &Path, p: &str) -> PathBuf {
    let p = PathBuf::from(p);
    if p.is_absolute() {
        p
    } else {
        study_dir.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(src: &str) -> Space {
        let t: toml::Table = toml::from_str(src).expect("test space parses");
        Space::from_toml(&t).expect("test space is valid")
    }

    fn table(src: &str) -> toml::Table {
        toml::from_str(src).expect("test table parses")
    }

    const BASE: &str = r#"
        kind = "builtin"
        epochs = 2
        [model]
        kind = "mlp"
        [data]
        dataset = "digits"
    "#;

    #[test]
    fn a_knob_searched_in_the_space_takes_the_trials_param() {
        let s = space(r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#);
        let t = parse_builtin(&table(BASE), &s, Path::new(".")).expect("valid");
        assert_eq!(t.knobs["lr"], Knob::Searched);
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(0.01));
        let h = t.resolve(&p).expect("resolves");
        assert_eq!(h.lr, 0.01);
        assert_eq!(h.batch_size, 128);
        assert_eq!(h.epochs, Some(2));
    }

    #[test]
    fn cuda_graphs_defaults_to_auto_and_takes_true_false_or_auto() {
        let s = space(r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#);
        let t = parse_builtin(&table(BASE), &s, Path::new(".")).expect("valid");
        assert_eq!(t.cuda_graphs, CudaGraphs::Auto);
        for (v, want) in [
            ("true", CudaGraphs::On),
            ("false", CudaGraphs::Off),
            ("\"auto\"", CudaGraphs::Auto),
        ] {
            let src = format!("cuda_graphs = {v}\n{BASE}");
            let t = parse_builtin(&table(&src), &s, Path::new(".")).expect("valid");
            assert_eq!(t.cuda_graphs, want, "{v}");
        }
        for bad in ["\"yes\"", "1"] {
            let src = format!("cuda_graphs = {bad}\n{BASE}");
            let e = parse_builtin(&table(&src), &s, Path::new(".")).expect_err(bad);
            assert_eq!(
                e.to_string(),
                format!("trial.cuda_graphs: must be true, false or \"auto\", not {bad}")
            );
        }
    }

    #[test]
    fn a_worker_request_without_cuda_graphs_reads_as_auto() {
        let s = space(r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#);
        let t = parse_builtin(&table(BASE), &s, Path::new(".")).expect("valid");
        let mut json = serde_json::to_value(&t).expect("serialises");
        json.as_object_mut()
            .expect("an object")
            .remove("cuda_graphs")
            .expect("the field is sent");
        let back: BuiltinTrial = serde_json::from_value(json).expect("an older request");
        assert_eq!(back.cuda_graphs, CudaGraphs::Auto);
    }

    #[test]
    fn a_knob_both_fixed_and_searched_is_an_error_naming_it() {
        let s = space(r#"width = { type = "int", low = 8, high = 64 }"#);
        let src =
            format!("lr = 0.1\n{BASE}").replace("kind = \"mlp\"", "kind = \"mlp\"\nwidth = 32");
        let e = parse_builtin(&table(&src), &s, Path::new("."))
            .expect_err("both")
            .to_string();
        assert!(e.starts_with("trial.model.width"), "{e}");
    }

    #[test]
    fn a_missing_learning_rate_is_an_error() {
        let s = space(r#"width = { type = "int", low = 8, high = 64 }"#);
        let e = parse_builtin(&table(BASE), &s, Path::new("."))
            .expect_err("no lr")
            .to_string();
        assert!(e.starts_with("trial.lr: missing"), "{e}");
    }

    #[test]
    fn unsupported_optimizer_choices_are_rejected_before_any_trial() {
        let s = space(
            r#"lr = { type = "float", low = 1e-4, high = 1e-1 }
               optimizer = { type = "categorical", choices = ["adam", "lion"] }"#,
        );
        let e = parse_builtin(&table(BASE), &s, Path::new("."))
            .expect_err("lion")
            .to_string();
        assert!(e.starts_with("space.optimizer"), "{e}");
        assert!(e.contains("lion"), "{e}");
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_path() {
        let s = space(r#"lr = { type = "float", low = 1e-4, high = 1e-1 }"#);
        let src = BASE.replace("[model]\n", "[model]\n        widht = 3\n");
        let e = parse_builtin(&table(&src), &s, Path::new("."))
            .expect_err("typo")
            .to_string();
        assert!(e.starts_with("trial.model.widht"), "{e}");
        let src = format!("lrr = 1.0\n{BASE}");
        let e = parse_builtin(&table(&src), &s, Path::new("."))
            .expect_err("typo")
            .to_string();
        assert!(e.starts_with("trial.lrr"), "{e}");
    }

    #[test]
    fn a_space_parameter_that_is_no_knob_is_an_error() {
        let s = space(
            r#"lr = { type = "float", low = 1e-4, high = 1e-1 }
               heads = { type = "int", low = 1, high = 4 }"#,
        );
        let e = parse_builtin(&table(BASE), &s, Path::new("."))
            .expect_err("heads on mlp")
            .to_string();
        assert!(e.starts_with("space.heads"), "{e}");
    }

    /// `BASE` with this model kind (and extra model keys), on data the model can take.
    fn base_for(kind: &str, model_keys: &str) -> String {
        let src = BASE.replace(
            "kind = \"mlp\"",
            &format!("kind = \"{kind}\"\n{model_keys}"),
        );
        if kind == "transformer" {
            src.replace("\"digits\"", "\"gpl3-text\"")
        } else {
            src
        }
    }

    #[test]
    fn checkpointing_is_a_model_knob_of_the_resnet_and_the_transformer_only() {
        let s = space(r#"lr = { type = "float", low = 1e-4, high = 1e-1 }"#);
        let p = Params::new();
        for kind in ["resnet", "transformer"] {
            let src = base_for(kind, "");
            let t = parse_builtin(&table(&src), &s, Path::new(".")).expect("valid");
            assert_eq!(
                t.knobs["checkpointing"],
                Knob::Fixed(ParamValue::Bool(false))
            );
            let mut p = p.clone();
            p.insert("lr".into(), ParamValue::Float(0.01));
            assert!(
                !t.resolve(&p).expect("resolves").checkpointing,
                "off by default"
            );
            let on = base_for(kind, "checkpointing = true");
            let t = parse_builtin(&table(&on), &s, Path::new(".")).expect("valid");
            assert!(t.resolve(&p).expect("resolves").checkpointing, "{kind}");
        }
        for kind in ["mlp", "cnn"] {
            let src = base_for(kind, "checkpointing = true");
            let e = parse_builtin(&table(&src), &s, Path::new("."))
                .expect_err("no blocks to checkpoint")
                .to_string();
            assert_eq!(
                e,
                format!(
                    "trial.model.checkpointing: not used by model kind {kind} (only by resnet and transformer)"
                )
            );
        }
        let e = parse_builtin(
            &table(&base_for("resnet", "checkpointing = 1")),
            &s,
            Path::new("."),
        )
        .expect_err("not a bool")
        .to_string();
        assert_eq!(e, "trial.model.checkpointing: must be true or false, not 1");
    }

    #[test]
    fn checkpointing_may_be_searched_as_a_categorical_of_booleans() {
        let s = space(
            r#"lr = { type = "float", low = 1e-4, high = 1e-1 }
               checkpointing = { type = "categorical", choices = [true, false] }"#,
        );
        let t =
            parse_builtin(&table(&base_for("transformer", "")), &s, Path::new(".")).expect("valid");
        assert_eq!(t.knobs["checkpointing"], Knob::Searched);
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(0.01));
        p.insert("checkpointing".into(), ParamValue::Bool(true));
        assert!(t.resolve(&p).expect("resolves").checkpointing);
        let e = parse_builtin(&table(BASE), &s, Path::new("."))
            .expect_err("searched on an mlp")
            .to_string();
        assert_eq!(
            e,
            "space.checkpointing: not used by model kind mlp (only by resnet and transformer)"
        );
    }

    #[test]
    fn a_hyper_written_before_the_checkpointing_knob_reads_as_without_it() {
        let s = space(r#"lr = { type = "float", low = 1e-4, high = 1e-1 }"#);
        let t = parse_builtin(&table(BASE), &s, Path::new(".")).expect("valid");
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(0.01));
        let h = t.resolve(&p).expect("resolves");
        let mut json = serde_json::to_value(&h).expect("serialises");
        json.as_object_mut()
            .expect("an object")
            .remove("checkpointing");
        let back: Hyper = serde_json::from_value(json).expect("reads without the key");
        assert_eq!(back, h);
    }

    #[test]
    fn checkpoint_keys_are_trial_settings_and_their_defaults_are_not_written() {
        let s = space(r#"lr = { type = "float", low = 1e-4, high = 1e-1 }"#);
        let t = parse_builtin(&table(BASE), &s, Path::new(".")).expect("valid");
        assert!(t.checkpoints.enabled);
        let json = serde_json::to_value(&t).expect("serialises");
        assert!(json.get("checkpoints").is_none(), "{json}");
        let back: BuiltinTrial = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, t);
        let src = format!(
            "checkpoint_every = \"5m\"\nkeep_checkpoints = \"best\"\ncheckpoint_dir = \"ck\"\n{BASE}"
        );
        let t = parse_builtin(&table(&src), &s, Path::new("/st")).expect("valid");
        assert_eq!(t.checkpoints.every, Some(Duration::from_secs(300)));
        assert_eq!(t.checkpoints.keep, crate::checkpoint::Keep::Best);
        assert_eq!(t.checkpoints.dir.as_deref(), Some(Path::new("/st/ck")));
        let json = serde_json::to_string(&t).expect("serialises");
        let back: BuiltinTrial = serde_json::from_str(&json).expect("reads back");
        assert_eq!(back, t);
        // An object store: the worker is not told (tune copies the staging directory).
        let url = format!("checkpoint_dir = \"gs://b/c\"\n{BASE}");
        let t = parse_builtin(&table(&url), &s, Path::new(".")).expect("an object store");
        assert_eq!(
            t.checkpoints.store.as_ref().map(|u| u.as_str()),
            Some("gs://b/c")
        );
        let json = serde_json::to_string(&t).expect("serialises");
        assert!(!json.contains("gs://"), "{json}");
        let typo = format!("checkpoint_evry = \"5m\"\n{BASE}");
        let e = parse_builtin(&table(&typo), &s, Path::new(".")).expect_err("a typo");
        assert!(e.to_string().contains("checkpoint_every"), "{e}");
    }

    #[test]
    fn linear_lr_scaling_uses_the_effective_batch() {
        let s = space(r#"batch_size = { type = "int", low = 16, high = 512 }"#);
        let src = format!(
            "lr = 0.1\naccumulation = 2\nlr_scaling = \"linear\"\nreference_batch = 128\n{BASE}"
        );
        let t = parse_builtin(&table(&src), &s, Path::new(".")).expect("valid");
        let mut p = Params::new();
        p.insert("batch_size".into(), ParamValue::Int(128));
        let h = t.resolve(&p).expect("resolves");
        assert_eq!(h.effective_batch(), 256);
        assert!((h.peak_lr() - 0.2).abs() < 1e-12);
    }
}
