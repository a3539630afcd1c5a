//! Data for the builtin trainer: loading real data sets (vendored, installed, or the user's own
//! `.npy` / `.safetensors` files), the train/validation split, normalisation, and the two ways
//! batches reach the model: a data set that fits is put on the device once and batches are
//! index selections there; one that does not is streamed by a background loader thread with
//! prefetch, pinned host memory and non-blocking copies (`stream`; this module says how a
//! split's samples become a batch). The `[trial.data]` table these follow
//! is checked by the orchestrator (`builtin::data`), not here.
//!
//! User arrays are memory-mapped, never read whole: a small one is copied into a tensor once,
//! a large one stays mapped and the loader gathers each batch's rows from the mapping.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind, Tensor};

use tune::builtin::data::{DataSpec, DeviceCache, Source};

use crate::snapshot::LoaderPosition;
use crate::stream::{Gather, Stage, Streamer};

const DIGITS_CSV_GZ: &[u8] = include_bytes!("../../../datasets/digits.csv.gz");
const GPL3_TEXT: &[u8] = include_bytes!("../../../datasets/gpl-3.0.txt");

/// What a data set asks of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    Classify {
        classes: i64,
    },
    /// Next-token prediction over this many token ids.
    Language {
        vocab: i64,
    },
}

/// A numeric array memory-mapped from a file: rows are gathered on demand.
#[derive(Debug, Clone)]
pub struct Mapped {
    map: Arc<memmap2::Mmap>,
    /// Byte offset of element 0.
    offset: usize,
    dtype: ElemType,
    /// Rows of the whole array (before the split).
    rows: usize,
    /// Elements per row.
    row_len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ElemType {
    F32,
    F64,
    U8,
    I32,
    I64,
}

impl ElemType {
    fn size(self) -> usize {
        match self {
            ElemType::F32 | ElemType::I32 => 4,
            ElemType::F64 | ElemType::I64 => 8,
            ElemType::U8 => 1,
        }
    }
}

impl Mapped {
    fn value(&self, i: usize) -> f64 {
        let s = self.dtype.size();
        let at = self.offset + i * s;
        let b = &self.map[at..at + s];
        match self.dtype {
            ElemType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            ElemType::F64 => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            ElemType::U8 => b[0] as f64,
            ElemType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            ElemType::I64 => {
                i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64
            }
        }
    }

    /// Appends the rows `rows` as f32 to `out`.
    fn gather_f32(&self, rows: &[usize], out: &mut Vec<f32>) {
        out.reserve(rows.len() * self.row_len);
        for &r in rows {
            let base = r * self.row_len;
            if self.dtype == ElemType::F32 {
                let at = self.offset + base * 4;
                let bytes = &self.map[at..at + self.row_len * 4];
                out.extend(
                    bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
            } else {
                out.extend((0..self.row_len).map(|j| self.value(base + j) as f32));
            }
        }
    }

    fn labels(&self, rows: &[usize]) -> Vec<i64> {
        rows.iter().map(|&r| self.value(r) as i64).collect()
    }
}

/// One split's samples.
#[derive(Debug)]
pub enum Split {
    /// Inputs (N, …) in f32 (tokens: i64, 1-D) and labels (N) on the host or the device.
    Tensors { x: Tensor, y: Tensor },
    /// Rows of memory-mapped arrays (large user data).
    Mapped {
        x: Mapped,
        y: Mapped,
        rows: Vec<usize>,
    },
}

impl Split {
    /// Samples (tokens for a language model).
    pub fn len(&self) -> i64 {
        match self {
            Split::Tensors { x, .. } => x.size().first().copied().unwrap_or(0),
            Split::Mapped { rows, .. } => rows.len() as i64,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A loaded data set.
#[derive(Debug)]
pub struct Dataset {
    pub task: Task,
    /// One sample's input shape, e.g. `[1, 28, 28]`, `[64]`; `[]` for tokens.
    pub sample_shape: Vec<i64>,
    pub train: Split,
    pub val: Split,
    /// Per-feature (or scalar) mean and std applied to mapped rows as they are gathered;
    /// tensor splits are standardised at load time.
    pub norm: Option<(Tensor, Tensor)>,
}

/// A failure to load data: the trial fails with this message.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DataError + '_ {
    move |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn format_err(path: &Path, message: impl Into<String>) -> DataError {
    DataError::Format {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn gunzip(path: &Path, bytes: &[u8]) -> Result<Vec<u8>, DataError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(io_err(path))?;
    Ok(out)
}

fn read_gz(path: &Path) -> Result<Vec<u8>, DataError> {
    let raw = std::fs::read(path).map_err(io_err(path))?;
    gunzip(path, &raw)
}

/// Parses an IDX file (`u8` data): returns its dimensions and the data.
fn idx(path: &Path, bytes: Vec<u8>) -> Result<(Vec<usize>, Vec<u8>), DataError> {
    if bytes.len() < 4 || bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 {
        return Err(format_err(path, "not an IDX file of unsigned bytes"));
    }
    let ndim = bytes[3] as usize;
    let header = 4 + 4 * ndim;
    if bytes.len() < header {
        return Err(format_err(path, "truncated IDX header"));
    }
    let dims: Vec<usize> = (0..ndim)
        .map(|i| {
            let b = &bytes[4 + 4 * i..8 + 4 * i];
            u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
        })
        .collect();
    let n: usize = dims.iter().product();
    if bytes.len() != header + n {
        return Err(format_err(
            path,
            format!("IDX data has {} bytes, expected {n}", bytes.len() - header),
        ));
    }
    Ok((dims, bytes[header..].to_vec()))
}

/// A deterministic permutation of `0..n` that does not depend on the trial: every trial of a
/// study validates on the same held-out samples.
fn split_order(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(0x5eed_da7a));
    order
}

fn apply_limit(n: usize, limit: Option<u64>) -> usize {
    limit.map_or(n, |l| n.min(l as usize))
}

/// Standardises `train` and `val` (f32, N × …) with the training mean and std.
fn standardise(train: &Tensor, val: &Tensor, per_feature: bool) -> (Tensor, Tensor) {
    let (mean, std) = if per_feature {
        (
            train.mean_dim(0, true, Kind::Float),
            train.std_dim(0, true, true).clamp_min(1e-6),
        )
    } else {
        (train.mean(Kind::Float), train.std(true).clamp_min(1e-6))
    };
    ((train - &mean) / &std, (val - &mean) / &std)
}

fn images(
    x: Vec<f32>,
    y: Vec<i64>,
    shape: &[i64],
    train_rows: &[usize],
    val_rows: &[usize],
    normalize: bool,
) -> (Split, Split) {
    let n = y.len() as i64;
    let mut full = vec![n];
    full.extend_from_slice(shape);
    let x = Tensor::from_slice(&x).view(full.as_slice());
    let y = Tensor::from_slice(&y);
    let pick = |rows: &[usize]| {
        let idx: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
        let idx = Tensor::from_slice(&idx);
        (x.index_select(0, &idx), y.index_select(0, &idx))
    };
    let (mut tx, ty) = pick(train_rows);
    let (mut vx, vy) = pick(val_rows);
    if normalize {
        (tx, vx) = standardise(&tx, &vx, false);
    }
    (
        Split::Tensors {
            x: tx.contiguous(),
            y: ty,
        },
        Split::Tensors {
            x: vx.contiguous(),
            y: vy,
        },
    )
}

fn load_digits(spec: &DataSpec) -> Result<Dataset, DataError> {
    let path = Path::new("datasets/digits.csv.gz");
    let text = gunzip(path, DIGITS_CSV_GZ)?;
    let text = String::from_utf8(text).map_err(|_| format_err(path, "not UTF-8"))?;
    let mut x = Vec::with_capacity(1797 * 64);
    let mut y = Vec::with_capacity(1797);
    for (i, line) in text.lines().enumerate() {
        let vals: Vec<f32> = line
            .split(',')
            .map(|v| v.trim().parse::<f32>())
            .collect::<Result<_, _>>()
            .map_err(|e| format_err(path, format!("line {}: {e}", i + 1)))?;
        if vals.len() != 65 {
            return Err(format_err(
                path,
                format!("line {}: expected 65 values", i + 1),
            ));
        }
        x.extend_from_slice(&vals[..64]);
        y.push(vals[64] as i64);
    }
    let order = split_order(y.len());
    let n_val = ((y.len() as f64) * spec.validation).round() as usize;
    let (val_rows, train_rows) = order.split_at(n_val);
    let train_rows = &train_rows[..apply_limit(train_rows.len(), spec.limit)];
    let (train, val) = images(x, y, &[1, 8, 8], train_rows, val_rows, spec.normalize);
    Ok(Dataset {
        task: Task::Classify { classes: 10 },
        sample_shape: vec![1, 8, 8],
        train,
        val,
        norm: None,
    })
}

fn load_fashion(dir: &Path, spec: &DataSpec) -> Result<Dataset, DataError> {
    let read = |name: &str| -> Result<(Vec<usize>, Vec<u8>), DataError> {
        let p = dir.join(name);
        let bytes = read_gz(&p)?;
        idx(&p, bytes)
    };
    let (tr_dims, tr_x) = read("train-images-idx3-ubyte.gz")?;
    let (_, tr_y) = read("train-labels-idx1-ubyte.gz")?;
    let (_, te_x) = read("t10k-images-idx3-ubyte.gz")?;
    let (_, te_y) = read("t10k-labels-idx1-ubyte.gz")?;
    let (h, w) = (tr_dims[1] as i64, tr_dims[2] as i64);
    let n_train = apply_limit(tr_y.len(), spec.limit);
    let px = (h * w) as usize;
    let to_f = |b: &[u8]| b.iter().map(|&v| v as f32 / 255.0).collect::<Vec<f32>>();
    let mut tx = Tensor::from_slice(&to_f(&tr_x[..n_train * px])).view([n_train as i64, 1, h, w]);
    let ty = Tensor::from_slice(
        &tr_y[..n_train]
            .iter()
            .map(|&v| v as i64)
            .collect::<Vec<_>>(),
    );
    let mut vx = Tensor::from_slice(&to_f(&te_x)).view([te_y.len() as i64, 1, h, w]);
    let vy = Tensor::from_slice(&te_y.iter().map(|&v| v as i64).collect::<Vec<_>>());
    if spec.normalize {
        (tx, vx) = standardise(&tx, &vx, false);
    }
    Ok(Dataset {
        task: Task::Classify { classes: 10 },
        sample_shape: vec![1, h, w],
        train: Split::Tensors { x: tx, y: ty },
        val: Split::Tensors { x: vx, y: vy },
        norm: None,
    })
}

fn load_tokens(bytes: &[u8], spec: &DataSpec) -> Dataset {
    let n_val = ((bytes.len() as f64) * spec.validation).round() as usize;
    let n_train = bytes.len() - n_val;
    let (train, val) = bytes.split_at(n_train);
    let train = &train[..apply_limit(train.len(), spec.limit)];
    let t = |b: &[u8]| Tensor::from_slice(&b.iter().map(|&v| v as i64).collect::<Vec<_>>());
    Dataset {
        task: Task::Language { vocab: 256 },
        sample_shape: vec![],
        train: Split::Tensors {
            x: t(train),
            y: Tensor::zeros([0], (Kind::Int64, Device::Cpu)),
        },
        val: Split::Tensors {
            x: t(val),
            y: Tensor::zeros([0], (Kind::Int64, Device::Cpu)),
        },
        norm: None,
    }
}

/// Parses a `.npy` header and maps the file.
fn map_npy(path: &Path) -> Result<(Mapped, Vec<usize>), DataError> {
    let file = File::open(path).map_err(io_err(path))?;
    // SAFETY: the file is opened read-only and the mapping is only read; a user who truncates
    // the file while a study runs can crash the worker, which the orchestrator survives.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(path))?;
    if map.len() < 10 || &map[..6] != b"\x93NUMPY" {
        return Err(format_err(path, "not a .npy file"));
    }
    let (hlen, hstart) = match map[6] {
        1 => (u16::from_le_bytes([map[8], map[9]]) as usize, 10),
        2 | 3 => {
            if map.len() < 12 {
                return Err(format_err(path, "truncated .npy header"));
            }
            (
                u32::from_le_bytes([map[8], map[9], map[10], map[11]]) as usize,
                12,
            )
        }
        v => return Err(format_err(path, format!("unsupported .npy version {v}"))),
    };
    let header = std::str::from_utf8(
        map.get(hstart..hstart + hlen)
            .ok_or_else(|| format_err(path, "truncated .npy header"))?,
    )
    .map_err(|_| format_err(path, "the .npy header is not text"))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))?;
        let rest = &header[at + key.len() + 2..];
        let rest = rest.trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = field("descr")
        .and_then(|r| r.strip_prefix('\''))
        .and_then(|r| r.split('\'').next())
        .ok_or_else(|| format_err(path, "no descr in the .npy header"))?;
    let dtype = match descr {
        "<f4" => ElemType::F32,
        "<f8" => ElemType::F64,
        "|u1" | "<u1" => ElemType::U8,
        "<i4" => ElemType::I32,
        "<i8" => ElemType::I64,
        d => {
            return Err(format_err(
                path,
                format!("dtype {d} is not supported (float32/64, uint8, int32/64 little-endian)"),
            ));
        }
    };
    if field("fortran_order").is_some_and(|r| r.starts_with("True")) {
        return Err(format_err(path, "Fortran-ordered arrays are not supported"));
    }
    let shape_src = field("shape")
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.split(')').next())
        .ok_or_else(|| format_err(path, "no shape in the .npy header"))?;
    let shape: Vec<usize> = shape_src
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| format_err(path, format!("bad shape ({shape_src})")))?;
    let offset = hstart + hlen;
    let elems: usize = shape.iter().product();
    if map.len() < offset + elems * dtype.size() {
        return Err(format_err(path, "the file is shorter than its shape says"));
    }
    let rows = shape.first().copied().unwrap_or(1);
    let row_len = shape.iter().skip(1).product();
    Ok((
        Mapped {
            map: Arc::new(map),
            offset,
            dtype,
            rows,
            row_len,
        },
        shape,
    ))
}

fn map_safetensors(path: &Path, key: &str) -> Result<(Mapped, Vec<usize>), DataError> {
    let file = File::open(path).map_err(io_err(path))?;
    // SAFETY: as in `map_npy`: read-only mapping of a file we do not write.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(path))?;
    let (header_len, meta) = safetensors::SafeTensors::read_metadata(&map)
        .map_err(|e| format_err(path, format!("not a safetensors file: {e:?}")))?;
    let info = meta
        .tensors()
        .get(key)
        .cloned()
        .ok_or_else(|| format_err(path, format!("no tensor named {key:?}")))?;
    let dtype = match info.dtype {
        safetensors::Dtype::F32 => ElemType::F32,
        safetensors::Dtype::F64 => ElemType::F64,
        safetensors::Dtype::U8 => ElemType::U8,
        safetensors::Dtype::I32 => ElemType::I32,
        safetensors::Dtype::I64 => ElemType::I64,
        d => {
            return Err(format_err(
                path,
                format!("tensor {key:?}: dtype {d:?} is not supported"),
            ));
        }
    };
    let shape = info.shape.clone();
    let offset = 8 + header_len + info.data_offsets.0;
    let rows = shape.first().copied().unwrap_or(1);
    let row_len = shape.iter().skip(1).product();
    Ok((
        Mapped {
            map: Arc::new(map),
            offset,
            dtype,
            rows,
            row_len,
        },
        shape,
    ))
}

/// Builds a data set from user arrays: split, optional limit, and either a copy into tensors
/// (when small enough) or mapped rows.
fn load_arrays(
    (x, x_shape): (Mapped, Vec<usize>),
    (y, y_shape): (Mapped, Vec<usize>),
    spec: &DataSpec,
    path: &Path,
) -> Result<Dataset, DataError> {
    if x.rows != y.rows {
        return Err(format_err(
            path,
            format!("inputs have {} rows but labels {}", x.rows, y.rows),
        ));
    }
    if y_shape.len() != 1 || matches!(y.dtype, ElemType::F32 | ElemType::F64) {
        return Err(format_err(
            path,
            "labels must be a 1-D array of integer class ids",
        ));
    }
    let order = split_order(x.rows);
    let n_val = ((x.rows as f64) * spec.validation).round().max(1.0) as usize;
    let (val_rows, train_rows) = order.split_at(n_val.min(x.rows));
    let mut train_rows = train_rows[..apply_limit(train_rows.len(), spec.limit)].to_vec();
    let val_rows = val_rows.to_vec();
    let classes = (0..x.rows).map(|r| y.value(r) as i64).max().unwrap_or(0) + 1;
    if (0..x.rows).any(|r| y.value(r) < 0.0) {
        return Err(format_err(path, "labels must be >= 0"));
    }
    let sample_shape: Vec<i64> = x_shape.iter().skip(1).map(|&d| d as i64).collect();
    // Sorting rows makes gathers walk the mapping forward (the order within a split is drawn
    // again every epoch anyway).
    train_rows.sort_unstable();
    let bytes = (train_rows.len() * x.row_len * 4) as u64;
    let small =
        bytes <= spec.max_device_mb * 1024 * 1024 && spec.device_cache != DeviceCache::Never;
    // Mean and std from up to 10 000 training rows, per feature.
    let stats = |rows: &[usize]| -> (Tensor, Tensor) {
        let step = (rows.len() / 10_000).max(1);
        let sample: Vec<usize> = rows.iter().step_by(step).copied().collect();
        let mut buf = Vec::new();
        x.gather_f32(&sample, &mut buf);
        let t = Tensor::from_slice(&buf).view([sample.len() as i64, x.row_len as i64]);
        let mut shape = vec![1i64];
        shape.extend_from_slice(&sample_shape);
        (
            t.mean_dim(0, false, Kind::Float).view(shape.as_slice()),
            t.std_dim(0, true, false)
                .clamp_min(1e-6)
                .view(shape.as_slice()),
        )
    };
    let norm = spec.normalize.then(|| stats(&train_rows));
    if small {
        let tensors = |rows: &[usize]| -> Split {
            let mut buf = Vec::new();
            x.gather_f32(rows, &mut buf);
            let mut shape = vec![rows.len() as i64];
            shape.extend_from_slice(&sample_shape);
            let mut xt = Tensor::from_slice(&buf).view(shape.as_slice());
            if let Some((m, s)) = &norm {
                xt = (xt - m) / s;
            }
            Split::Tensors {
                x: xt,
                y: Tensor::from_slice(&y.labels(rows)),
            }
        };
        let (train, val) = (tensors(&train_rows), tensors(&val_rows));
        Ok(Dataset {
            task: Task::Classify { classes },
            sample_shape,
            train,
            val,
            norm: None,
        })
    } else {
        Ok(Dataset {
            task: Task::Classify { classes },
            sample_shape,
            train: Split::Mapped {
                x: x.clone(),
                y: y.clone(),
                rows: train_rows,
            },
            val: Split::Mapped {
                x,
                y,
                rows: val_rows,
            },
            norm,
        })
    }
}

/// Loads a data set (CPU tensors or mappings).
pub fn load(spec: &DataSpec) -> Result<Dataset, DataError> {
    match &spec.source {
        Source::Digits => load_digits(spec),
        Source::FashionMnist { dir } => load_fashion(dir, spec),
        Source::Gpl3Text => Ok(load_tokens(GPL3_TEXT, spec)),
        Source::Text { path } => {
            let file = File::open(path).map_err(io_err(path))?;
            // SAFETY: read-only mapping of a file we do not write.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(path))?;
            Ok(load_tokens(&map, spec))
        }
        Source::Npy { x, y } => load_arrays(map_npy(x)?, map_npy(y)?, spec, x),
        Source::Safetensors { path, x_key, y_key } => load_arrays(
            map_safetensors(path, x_key)?,
            map_safetensors(path, y_key)?,
            spec,
            path,
        ),
    }
}

/// Data sets a worker has loaded, kept between trials so that a study decodes its data once
/// per worker, not once per trial. Tensors are not `Sync`, so the cache is per thread; a
/// worker trains on one thread.
pub struct DataCache {
    sets: HashMap<String, Rc<Dataset>>,
}

impl Default for DataCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DataCache {
    pub fn new() -> DataCache {
        DataCache {
            sets: HashMap::new(),
        }
    }

    pub fn get(&mut self, spec: &DataSpec) -> Result<Rc<Dataset>, DataError> {
        let key = cache_key(spec);
        if let Some(d) = self.sets.get(&key) {
            return Ok(d.clone());
        }
        let d = Rc::new(load(spec)?);
        // One data set at a time: a study uses one, and a worker should not hoard memory.
        self.sets.clear();
        self.sets.insert(key, d.clone());
        Ok(d)
    }
}

/// The key under which a worker keeps a loaded data set between trials.
fn cache_key(spec: &DataSpec) -> String {
    format!(
        "{:?}|{}|{:?}|{}",
        spec.source, spec.validation, spec.limit, spec.normalize
    )
}

/// One training batch on the device.
pub struct Batch {
    pub x: Tensor,
    pub y: Tensor,
}

/// Hands out training batches and accounts for the time spent waiting for them.
pub enum Loader {
    /// The training split is on the device; batches are index selections there.
    OnDevice {
        x: Tensor,
        y: Tensor,
        perm: Tensor,
        pos: i64,
        batch: i64,
        context: Option<i64>,
    },
    /// A background thread prepares batches ahead.
    Streamed(Streamer),
}

/// Copies a split to the device, keeping it if it already is there.
fn to_device(t: &Tensor, device: Device) -> Tensor {
    if t.device() == device {
        t.shallow_clone()
    } else {
        t.to_device(device)
    }
}

impl Loader {
    /// A loader for `ds.train` with micro-batches of `batch` samples. `context`: the window
    /// length for a language model.
    pub fn new(
        ds: &Dataset,
        device: Device,
        batch: i64,
        context: Option<i64>,
        spec: &DataSpec,
        seed: u64,
    ) -> Loader {
        Loader::new_at(ds, device, batch, context, spec, seed, None)
    }

    /// [`Loader::new`] at a checkpoint's position: the in-memory loader's permutation and
    /// place in it, or the streamed plan's batch count.
    pub fn new_at(
        ds: &Dataset,
        device: Device,
        batch: i64,
        context: Option<i64>,
        spec: &DataSpec,
        seed: u64,
        at: Option<(LoaderPosition, Option<&Tensor>)>,
    ) -> Loader {
        let fits = |x: &Tensor| -> bool {
            let bytes = x.numel() as u64 * x.kind().elt_size_in_bytes() as u64;
            match spec.device_cache {
                DeviceCache::Always => true,
                DeviceCache::Never => false,
                DeviceCache::Auto => device == Device::Cpu || bytes <= spec.max_device_mb << 20,
            }
        };
        match &ds.train {
            Split::Tensors { x, y } if fits(x) => {
                let (perm, pos) = match at {
                    Some((LoaderPosition::Memory { pos }, Some(perm))) => {
                        (perm.to_device(device), pos)
                    }
                    _ => (Tensor::zeros([0], (Kind::Int64, device)), 0),
                };
                Loader::OnDevice {
                    x: to_device(x, device),
                    y: to_device(y, device),
                    perm,
                    pos,
                    batch,
                    context,
                }
            }
            split => Loader::Streamed(Streamer::start_at(
                stream_source(split, ds, context),
                Stage::for_device(device),
                batch.max(1) as usize,
                spec.prefetch,
                seed,
                match at {
                    Some((LoaderPosition::Streamed { batches }, _)) => batches,
                    _ => 0,
                },
            )),
        }
    }

    /// Where the loader is, for a checkpoint: the position and, in memory, the permutation.
    pub fn position(&self) -> (LoaderPosition, Option<Tensor>) {
        match self {
            Loader::OnDevice { perm, pos, .. } => (
                LoaderPosition::Memory { pos: *pos },
                Some(perm.to_device(Device::Cpu)),
            ),
            Loader::Streamed(s) => (
                LoaderPosition::Streamed {
                    batches: s.handed(),
                },
                None,
            ),
        }
    }

    /// Micro-batches in one epoch (full batches only, so that accumulated steps are exact).
    pub fn batches_per_epoch(&self) -> i64 {
        match self {
            Loader::OnDevice {
                x, batch, context, ..
            } => samples_in(x.size()[0], *context) / batch,
            Loader::Streamed(s) => s.per_epoch(),
        }
    }

    /// Training samples in one epoch: rows, or window starts for a language model.
    pub fn samples(&self) -> i64 {
        match self {
            Loader::OnDevice { x, context, .. } => samples_in(x.size()[0], *context),
            Loader::Streamed(s) => s.samples(),
        }
    }

    /// The next batch and the time spent waiting for it.
    pub fn next_batch(&mut self) -> Result<(Batch, Duration), String> {
        let t0 = Instant::now();
        match self {
            Loader::OnDevice {
                x,
                y,
                perm,
                pos,
                batch,
                context,
            } => {
                let n = samples_in(x.size()[0], *context);
                if *pos + *batch > perm.size()[0] {
                    *perm = Tensor::randperm(n, (Kind::Int64, x.device()));
                    *pos = 0;
                }
                let idx = perm.narrow(0, *pos, *batch);
                *pos += *batch;
                let b = match context {
                    None => Batch {
                        x: x.index_select(0, &idx),
                        y: y.index_select(0, &idx),
                    },
                    Some(c) => windows(x, &idx, *c),
                };
                Ok((b, t0.elapsed()))
            }
            Loader::Streamed(s) => {
                // Includes, on CUDA, waiting for the batch's copy to the device to finish.
                let b = s.next_batch().map_err(|e| e.to_string())?;
                Ok((b, t0.elapsed()))
            }
        }
    }
}

/// Samples in a split: rows, or window starts for a language model.
pub fn samples_in(n: i64, context: Option<i64>) -> i64 {
    match context {
        None => n,
        Some(c) => (n - c - 1).max(0) / c,
    }
}

/// Language-model windows: inputs `tokens[s..s+c]`, targets `tokens[s+1..s+c+1]`, where the
/// starts are `idx * c` plus a shift within the window so every offset gets seen.
fn windows(tokens: &Tensor, idx: &Tensor, c: i64) -> Batch {
    let starts = idx * c;
    let offsets = Tensor::arange(c + 1, (Kind::Int64, tokens.device()));
    let at = starts.unsqueeze(1) + offsets.unsqueeze(0);
    let w = tokens.index_select(0, &at.view([-1])).view([-1, c + 1]);
    Batch {
        x: w.narrow(1, 0, c),
        y: w.narrow(1, 1, c),
    }
}

/// The validation split, ready to be walked batch by batch on the device.
pub enum ValSet<'a> {
    /// Batches prepared once per trial and kept on the device.
    Ready(Vec<Batch>),
    /// Memory-mapped rows of large user data, gathered batch by batch at each evaluation so
    /// the split is never held whole.
    Mapped {
        ds: &'a Dataset,
        device: Device,
        batch: usize,
    },
}

impl ValSet<'_> {
    /// Calls `f` with each batch in turn.
    pub fn for_each(&self, f: &mut dyn FnMut(&Batch)) {
        match self {
            ValSet::Ready(batches) => batches.iter().for_each(f),
            ValSet::Mapped { ds, device, batch } => {
                if let Split::Mapped { x, y, rows } = &ds.val {
                    for chunk in rows.chunks(*batch) {
                        let b = gather_mapped(x, y, chunk, &ds.sample_shape, ds.norm.as_ref());
                        f(&Batch {
                            x: b.x.to_device(*device),
                            y: b.y.to_device(*device),
                        });
                    }
                }
            }
        }
    }
}

/// Validation batches of up to `batch` samples, on the device.
pub fn eval_batches(ds: &Dataset, device: Device, batch: i64, context: Option<i64>) -> ValSet<'_> {
    match &ds.val {
        Split::Tensors { x, y } => {
            let n = samples_in(x.size()[0], context);
            let mut out = Vec::new();
            let mut start = 0;
            while start < n {
                let len = batch.min(n - start);
                let b = match context {
                    None => Batch {
                        x: to_device(&x.narrow(0, start, len), device),
                        y: to_device(&y.narrow(0, start, len), device),
                    },
                    Some(c) => {
                        let idx =
                            Tensor::arange_start(start, start + len, (Kind::Int64, Device::Cpu));
                        let b = windows(x, &idx, c);
                        Batch {
                            x: b.x.to_device(device),
                            y: b.y.to_device(device),
                        }
                    }
                };
                out.push(b);
                start += len;
            }
            ValSet::Ready(out)
        }
        Split::Mapped { .. } => ValSet::Mapped {
            ds,
            device,
            batch: batch.max(1) as usize,
        },
    }
}

fn gather_mapped(
    x: &Mapped,
    y: &Mapped,
    rows: &[usize],
    sample_shape: &[i64],
    norm: Option<&(Tensor, Tensor)>,
) -> Batch {
    let mut buf = Vec::with_capacity(rows.len() * x.row_len);
    x.gather_f32(rows, &mut buf);
    let mut shape = vec![rows.len() as i64];
    shape.extend_from_slice(sample_shape);
    let mut xt = Tensor::from_slice(&buf).view(shape.as_slice());
    if let Some((m, s)) = norm {
        xt = (xt - m) / s;
    }
    Batch {
        x: xt,
        y: Tensor::from_slice(&y.labels(rows)),
    }
}

/// A tensor split's rows, gathered on the loader thread (tensors are `Send`: the thread gets
/// its own shallow handles).
struct HostRows {
    x: Tensor,
    y: Tensor,
}

impl Gather for HostRows {
    fn samples(&self) -> usize {
        self.x.size().first().map_or(0, |&n| n.max(0) as usize)
    }

    fn gather(&self, samples: &[usize]) -> Result<Batch, String> {
        let idx = index_tensor(samples);
        Ok(Batch {
            x: self.x.f_index_select(0, &idx).map_err(|e| e.to_string())?,
            y: self.y.f_index_select(0, &idx).map_err(|e| e.to_string())?,
        })
    }
}

/// A token split's windows of `context` tokens (a language model).
struct HostWindows {
    tokens: Tensor,
    context: i64,
}

impl Gather for HostWindows {
    fn samples(&self) -> usize {
        samples_in(self.tokens.size()[0], Some(self.context)).max(0) as usize
    }

    fn gather(&self, samples: &[usize]) -> Result<Batch, String> {
        Ok(windows(&self.tokens, &index_tensor(samples), self.context))
    }
}

/// Rows of memory-mapped arrays, standardised as they are gathered.
struct MappedRows {
    x: Mapped,
    y: Mapped,
    rows: Vec<usize>,
    shape: Vec<i64>,
    norm: Option<(Tensor, Tensor)>,
}

impl Gather for MappedRows {
    fn samples(&self) -> usize {
        self.rows.len()
    }

    fn gather(&self, samples: &[usize]) -> Result<Batch, String> {
        let picked: Vec<usize> = samples.iter().map(|&i| self.rows[i]).collect();
        Ok(gather_mapped(
            &self.x,
            &self.y,
            &picked,
            &self.shape,
            self.norm.as_ref(),
        ))
    }
}

fn index_tensor(samples: &[usize]) -> Tensor {
    let idx: Vec<i64> = samples.iter().map(|&i| i as i64).collect();
    Tensor::from_slice(&idx)
}

/// What the loader thread gathers a split's batches from.
fn stream_source(split: &Split, ds: &Dataset, context: Option<i64>) -> Box<dyn Gather> {
    match (split, context) {
        (Split::Tensors { x, y }, None) => Box::new(HostRows {
            x: x.shallow_clone(),
            y: y.shallow_clone(),
        }),
        (Split::Tensors { x, .. }, Some(c)) => Box::new(HostWindows {
            tokens: x.shallow_clone(),
            context: c,
        }),
        (Split::Mapped { x, y, rows }, _) => Box::new(MappedRows {
            x: x.clone(),
            y: y.clone(),
            rows: rows.clone(),
            shape: ds.sample_shape.clone(),
            norm: ds
                .norm
                .as_ref()
                .map(|(m, s)| (m.shallow_clone(), s.shallow_clone())),
        }),
    }
}

/// The text of a panic payload.
pub fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(source: Source) -> DataSpec {
        DataSpec {
            source,
            validation: 0.2,
            limit: None,
            normalize: true,
            device_cache: DeviceCache::Auto,
            max_device_mb: 2048,
            prefetch: 2,
        }
    }

    #[test]
    fn digits_load_with_a_fixed_split() {
        let _rng = crate::torch_rng_lock();
        let ds = load(&spec(Source::Digits)).expect("digits load");
        assert_eq!(ds.train.len() + ds.val.len(), 1797);
        assert_eq!(ds.val.len(), 359);
        assert_eq!(ds.task, Task::Classify { classes: 10 });
    }

    fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) {
        let shape_s = match shape.len() {
            1 => format!("({},)", shape[0]),
            _ => format!(
                "({})",
                shape
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_s}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        std::fs::write(path, out).expect("write npy");
    }

    #[test]
    fn npy_arrays_are_mapped_split_and_streamed_when_told_not_to_cache() {
        let _rng = crate::torch_rng_lock();
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path();
        let n = 100usize;
        let x: Vec<u8> = (0..n * 3).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let y: Vec<u8> = (0..n)
            .flat_map(|i| ((i % 3) as i64).to_le_bytes())
            .collect();
        write_npy(&dir.join("x.npy"), "<f4", &[n, 3], &x);
        write_npy(&dir.join("y.npy"), "<i8", &[n], &y);
        let mut s = spec(Source::Npy {
            x: dir.join("x.npy"),
            y: dir.join("y.npy"),
        });
        s.device_cache = DeviceCache::Never;
        let ds = load(&s).expect("npy loads");
        assert_eq!(ds.task, Task::Classify { classes: 3 });
        assert_eq!(ds.train.len(), 80);
        assert!(matches!(ds.train, Split::Mapped { .. }));
        let mut loader = Loader::new(&ds, Device::Cpu, 16, None, &s, 1);
        assert_eq!(loader.batches_per_epoch(), 5);
        assert_eq!(loader.samples(), 80);
        for _ in 0..12 {
            let (b, _) = loader.next_batch().expect("a batch");
            assert_eq!(b.x.size(), vec![16, 3]);
            assert_eq!(b.y.size(), vec![16]);
        }
        s.device_cache = DeviceCache::Auto;
        let ds = load(&s).expect("npy loads");
        assert!(matches!(ds.train, Split::Tensors { .. }));
    }

    /// `n` rows of 3 features (row i: 3i, 3i + 1, 3i + 2) with labels i % 3, as `.npy` files.
    fn npy_pair(dir: &Path, n: usize) -> Source {
        let x: Vec<u8> = (0..n * 3).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let y: Vec<u8> = (0..n)
            .flat_map(|i| ((i % 3) as i64).to_le_bytes())
            .collect();
        write_npy(&dir.join("x.npy"), "<f4", &[n, 3], &x);
        write_npy(&dir.join("y.npy"), "<i8", &[n], &y);
        Source::Npy {
            x: dir.join("x.npy"),
            y: dir.join("y.npy"),
        }
    }

    #[test]
    fn mapped_rows_stream_exactly_as_the_same_rows_held_in_memory() {
        let _rng = crate::torch_rng_lock();
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut s = spec(npy_pair(tmp.path(), 213));
        s.device_cache = DeviceCache::Never;
        let mapped = load(&s).expect("loads");
        assert!(matches!(mapped.train, Split::Mapped { .. }));
        s.device_cache = DeviceCache::Auto;
        let held = load(&s).expect("loads");
        assert!(matches!(held.train, Split::Tensors { .. }));
        // 170 training rows in batches of 16: a partial last batch, several epochs.
        for seed in [3, 11] {
            let start = |ds: &Dataset| {
                Streamer::start(stream_source(&ds.train, ds, None), Stage::Host, 16, 2, seed)
            };
            let (mut a, mut b) = (start(&mapped), start(&held));
            assert_eq!(a.per_epoch(), 10);
            for i in 0..35 {
                let (a, b) = (
                    a.next_batch().expect("batch"),
                    b.next_batch().expect("batch"),
                );
                assert!(a.x.equal(&b.x) && a.y.equal(&b.y), "seed {seed}: batch {i}");
            }
        }
    }

    #[test]
    fn a_streamed_epoch_holds_the_same_samples_as_an_in_memory_epoch() {
        let _rng = crate::torch_rng_lock();
        tch::manual_seed(5);
        // 1 400 training digits in batches of 50: every sample in every epoch on both paths
        // (their orders differ: the in-memory path draws on the device).
        let mut s = spec(Source::Digits);
        s.limit = Some(1400);
        let ds = load(&s).expect("digits load");
        let epoch = |loader: &mut Loader| {
            assert_eq!(loader.batches_per_epoch(), 28);
            let batches: Vec<Batch> = (0..28)
                .map(|_| loader.next_batch().expect("a batch").0)
                .collect();
            let x = Tensor::cat(&batches.iter().map(|b| &b.x).collect::<Vec<_>>(), 0);
            let y = Tensor::cat(&batches.iter().map(|b| &b.y).collect::<Vec<_>>(), 0);
            // Per-pixel sums and the label histogram: equal for the same samples in any order.
            (
                x.sum_dim_intlist(0, false, Kind::Double),
                y.bincount::<Tensor>(None, 10),
            )
        };
        let mut held = Loader::new(&ds, Device::Cpu, 50, None, &s, 9);
        assert!(matches!(held, Loader::OnDevice { .. }));
        s.device_cache = DeviceCache::Never;
        let mut streamed = Loader::new(&ds, Device::Cpu, 50, None, &s, 9);
        assert!(matches!(streamed, Loader::Streamed(_)));
        for _ in 0..2 {
            let (hx, hy) = epoch(&mut held);
            let (sx, sy) = epoch(&mut streamed);
            assert!(hy.equal(&sy));
            assert!(hx.allclose(&sx, 1e-9, 1e-6, false));
        }
    }

    #[test]
    fn safetensors_inputs_and_labels_are_read_by_name() {
        let _rng = crate::torch_rng_lock();
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path();
        let n = 50usize;
        let xs: Vec<u8> = (0..n * 2).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let ys: Vec<u8> = (0..n)
            .flat_map(|i| ((i % 4) as i64).to_le_bytes())
            .collect();
        let header = format!(
            r#"{{"inputs":{{"dtype":"F32","shape":[{n},2],"data_offsets":[0,{a}]}},"labels":{{"dtype":"I64","shape":[{n}],"data_offsets":[{a},{b}]}}}}"#,
            a = xs.len(),
            b = xs.len() + ys.len()
        );
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        file.extend_from_slice(&xs);
        file.extend_from_slice(&ys);
        let path = dir.join("d.safetensors");
        std::fs::write(&path, file).expect("write");
        let mut s = spec(Source::Safetensors {
            path,
            x_key: "inputs".into(),
            y_key: "labels".into(),
        });
        s.normalize = false;
        let ds = load(&s).expect("loads");
        assert_eq!(ds.task, Task::Classify { classes: 4 });
        assert_eq!(ds.sample_shape, vec![2]);
        assert_eq!(ds.train.len() + ds.val.len(), 50);
        let Split::Tensors { x, y } = &ds.train else {
            panic!("small data are copied into tensors")
        };
        // Row r holds 2r and 2r + 1, and its label is r % 4.
        let r = (x.double_value(&[0, 0]) / 2.0) as i64;
        assert_eq!(x.double_value(&[0, 1]), (2 * r + 1) as f64);
        assert_eq!(y.int64_value(&[0]), r % 4);
    }
}
