//! The `[trial.data]` table of a builtin study: where the data come from and how the trainer
//! should hold them, checked once when the study is loaded (a missing file or data set is a
//! study error, not one failed trial after another).
//!
//! What does not belong here: reading and batching the data, which needs libtorch and lives in
//! the `tune-train` crate's `data` module.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{KnobError, ModelKind};

/// Where a study's data come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "dataset")]
pub enum Source {
    /// scikit-learn's 1 797 8×8 digits, vendored (tests).
    Digits,
    /// Fashion-MNIST IDX files (Debian's `dataset-fashion-mnist`), 60 000 + 10 000 28×28.
    FashionMnist { dir: PathBuf },
    /// The GPL-3 text, vendored, as byte tokens (the Transformer's tests).
    Gpl3Text,
    /// A UTF-8 (or any) text file of the user's, as byte tokens.
    Text { path: PathBuf },
    /// Two `.npy` files: inputs (N, …) and integer labels (N).
    Npy { x: PathBuf, y: PathBuf },
    /// One `.safetensors` file holding inputs and integer labels under two names.
    Safetensors {
        path: PathBuf,
        x_key: String,
        y_key: String,
    },
}

/// When the data go onto the device whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceCache {
    /// When the training inputs take at most `max_device_mb`.
    Auto,
    Always,
    Never,
}

/// The validated `[trial.data]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSpec {
    pub source: Source,
    /// The fraction held out for validation when the source has no split of its own.
    pub validation: f64,
    /// Use at most this many training samples (tokens for text).
    pub limit: Option<u64>,
    /// Standardise inputs with the training split's mean and std.
    pub normalize: bool,
    pub device_cache: DeviceCache,
    pub max_device_mb: u64,
    /// Batches the loader thread prepares ahead.
    pub prefetch: usize,
}

impl DataSpec {
    pub(super) fn parse(t: &toml::Table, study_dir: &Path) -> Result<DataSpec, KnobError> {
        const KEYS: &[&str] = &[
            "dataset",
            "path",
            "x",
            "y",
            "x_key",
            "y_key",
            "dir",
            "validation",
            "limit",
            "normalize",
            "device_cache",
            "max_device_mb",
            "prefetch",
        ];
        for k in t.keys() {
            if !KEYS.contains(&k.as_str()) {
                return Err(KnobError::UnknownKey(format!(
                    "trial.data.{k}: unknown key (known: {})",
                    KEYS.join(", ")
                )));
            }
        }
        let string = |k: &str| -> Result<Option<String>, KnobError> {
            match t.get(k) {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                Some(v) => Err(KnobError::Type(format!(
                    "trial.data.{k}: must be a string, not {}",
                    v.type_str()
                ))),
            }
        };
        let need = |k: &str, what: &str| -> Result<String, KnobError> {
            string(k)?
                .ok_or_else(|| KnobError::Missing(format!("trial.data.{k}: missing ({what})")))
        };
        let file = |k: &str, what: &str| -> Result<PathBuf, KnobError> {
            let p = super::resolve_path(study_dir, &need(k, what)?);
            if !p.is_file() {
                return Err(KnobError::Invalid(format!(
                    "trial.data.{k}: {} is not a readable file",
                    p.display()
                )));
            }
            Ok(p)
        };
        let dataset = need(
            "dataset",
            "digits, fashion-mnist, gpl3-text, text, npy or safetensors",
        )?;
        let only = |allowed: &[&str]| -> Result<(), KnobError> {
            for k in ["path", "x", "y", "x_key", "y_key", "dir"] {
                if t.contains_key(k) && !allowed.contains(&k) {
                    return Err(KnobError::Invalid(format!(
                        "trial.data.{k}: not used by dataset {dataset:?}"
                    )));
                }
            }
            Ok(())
        };
        let source = match dataset.as_str() {
            "digits" => {
                only(&[])?;
                Source::Digits
            }
            "fashion-mnist" => {
                only(&["dir"])?;
                let dir = string("dir")?
                    .map(|d| super::resolve_path(study_dir, &d))
                    .unwrap_or_else(|| PathBuf::from(super::FASHION_MNIST_DIR));
                // Checked when the study starts, so a missing install is one clear error and
                // not one failed trial after another.
                if !dir.join("train-images-idx3-ubyte.gz").is_file() {
                    return Err(KnobError::Invalid(format!(
                        "trial.data.dataset: fashion-mnist is not installed in {} (run scripts/setup.sh, which installs the Debian package dataset-fashion-mnist)",
                        dir.display()
                    )));
                }
                Source::FashionMnist { dir }
            }
            "gpl3-text" => {
                only(&[])?;
                Source::Gpl3Text
            }
            "text" => {
                only(&["path"])?;
                Source::Text {
                    path: file("path", "the text file")?,
                }
            }
            "npy" => {
                only(&["x", "y"])?;
                Source::Npy {
                    x: file("x", "the inputs' .npy file")?,
                    y: file("y", "the labels' .npy file")?,
                }
            }
            "safetensors" => {
                only(&["path", "x_key", "y_key"])?;
                Source::Safetensors {
                    path: file("path", "the .safetensors file")?,
                    x_key: string("x_key")?.unwrap_or_else(|| "x".into()),
                    y_key: string("y_key")?.unwrap_or_else(|| "y".into()),
                }
            }
            other => {
                return Err(KnobError::Invalid(format!(
                    "trial.data.dataset: unknown dataset {other:?} (digits, fashion-mnist, gpl3-text, text, npy, safetensors)"
                )));
            }
        };
        let validation = match t.get("validation") {
            None => 0.1,
            Some(v) => match v.as_float().or_else(|| v.as_integer().map(|i| i as f64)) {
                Some(f) if f > 0.0 && f < 1.0 => f,
                _ => {
                    return Err(KnobError::Invalid(format!(
                        "trial.data.validation: must be a fraction in (0, 1), not {v}"
                    )));
                }
            },
        };
        // Each with a bound far past any use, so that no product or allocation made from it
        // overflows (MB times 2^20 bytes; a prefetch queue is allocated up front).
        let positive = |k: &str, max: i64| -> Result<Option<u64>, KnobError> {
            match t.get(k) {
                None => Ok(None),
                Some(v) => match v.as_integer() {
                    Some(i) if (1..=max).contains(&i) => Ok(Some(i as u64)),
                    _ => Err(KnobError::Invalid(format!(
                        "trial.data.{k}: must be an integer from 1 to {max}, not {v}"
                    ))),
                },
            }
        };
        let normalize = match t.get("normalize") {
            None => true,
            Some(v) => v.as_bool().ok_or_else(|| {
                KnobError::Invalid(format!(
                    "trial.data.normalize: must be true or false, not {v}"
                ))
            })?,
        };
        let device_cache = match string("device_cache")?.as_deref() {
            None | Some("auto") => DeviceCache::Auto,
            Some("always") => DeviceCache::Always,
            Some("never") => DeviceCache::Never,
            Some(o) => {
                return Err(KnobError::Invalid(format!(
                    "trial.data.device_cache: must be auto, always or never, not {o:?}"
                )));
            }
        };
        Ok(DataSpec {
            source,
            validation,
            limit: positive("limit", i64::MAX)?,
            normalize,
            device_cache,
            max_device_mb: positive("max_device_mb", 1 << 30)?.unwrap_or(2048),
            prefetch: positive("prefetch", 1024)?.unwrap_or(4) as usize,
        })
    }

    /// Image models need images; the Transformer needs tokens.
    pub(super) fn check_model(&self, model: ModelKind) -> Result<(), KnobError> {
        let text = matches!(self.source, Source::Gpl3Text | Source::Text { .. });
        match (model, text) {
            (ModelKind::Transformer, false) => Err(KnobError::Invalid(
                "trial.data.dataset: the transformer is a language model; use gpl3-text or text"
                    .into(),
            )),
            (m, true) if m != ModelKind::Transformer => Err(KnobError::Invalid(format!(
                "trial.data.dataset: a text dataset needs model kind transformer, not {}",
                m.as_str()
            ))),
            _ => Ok(()),
        }
    }
}
