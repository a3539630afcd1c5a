//! Checkpoints (trial snapshots) of a builtin trial: everything the training loop needs to
//! continue a run exactly where it was, in one file per checkpoint, and the directory that
//! keeps the latest and the best of them.
//!
//! (Not to be confused with `checkpoint`, gradient checkpointing: activations recomputed in
//! the backward pass.)
//!
//! # What a snapshot holds
//! The model's variables (parameters and buffers), the optimizer's state (libtorch's archive
//! for its C++ optimizers, the moments and step counts of the fused Adam), the fp16 loss
//! scaler's scale and growth tracker, the skipped-step count, the state of the default random
//! generators (the CPU's, and the CUDA device's on a GPU: dropout's masks and the in-memory
//! loader's `randperm` come from them), the loader's position (its current permutation and
//! where in it, or the streamed plan's batch count), the running loss of the report interval,
//! and a JSON header: format version, step, epoch, step in the epoch, the training clock (for
//! a time budget's schedule), the objective value at this step and the best so far.
//!
//! # File format
//! `TUNESNAP` (8 bytes), then three length-prefixed (u64 little-endian) sections: the JSON
//! header, the tensors (libtorch's `save_multi` archive), the optimizer archive (empty for
//! the fused Adam, whose state is among the tensors); then the CRC-32 of all that precedes it.
//! A file cut short or altered fails the check and is reported as
//! [`SnapshotError::Corrupt`], never loaded.
//!
//! # Writing
//! Atomically: a temporary file in the same directory, fsync, rename over the target, fsync
//! of the directory. A crash leaves either the old file or the new one.
//!
//! # Retention
//! A [`SnapshotStore`] keeps `latest.snap` and `best.snap` (a hard link to the latest when it
//! was the best by the objective's direction). [`SnapshotStore::clean`] removes them at the
//! trial's end, keeping the best when the study asks for it.

use std::fs::{self, File};
use std::io::{Cursor, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tch::Tensor;

use tune::trial::Direction;

/// The version of the file format this build writes and reads.
pub const FORMAT: u32 = 1;
/// The mark a snapshot file starts with; `tune` reads a snapshot's step from the header after
/// it (`checkpoint::snapshot_step`) to record where a child of population-based training starts.
const MAGIC: &[u8; 8] = tune::checkpoint::SNAPSHOT_MARK;
/// The latest checkpoint's file name in a trial's checkpoint directory.
pub const LATEST: &str = "latest.snap";
/// The best checkpoint's file name.
pub const BEST: &str = "best.snap";

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("checkpoint {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Truncated, altered, or not a checkpoint: the caller falls back to an older one.
    #[error("checkpoint {path} is corrupt: {why}")]
    Corrupt { path: PathBuf, why: String },
    /// Written by another format version of tune.
    #[error("checkpoint {path} has format version {found}, this tune reads version {FORMAT}")]
    Version { path: PathBuf, found: u32 },
    /// Readable but not for this run (another model, optimizer or data set).
    #[error("checkpoint {path} does not fit this trial: {why}")]
    Mismatch { path: PathBuf, why: String },
    #[error("checkpoint: {0}")]
    Torch(String),
}

/// Where the training data loader is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LoaderPosition {
    /// The in-memory loader: `pos` samples into the permutation saved as `loader.perm`.
    Memory { pos: i64 },
    /// The streamed loader: `batches` micro-batches handed out since the start.
    Streamed { batches: u64 },
}

/// The running loss of the current report interval (see `loss_book`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub sum: f64,
    pub steps: u64,
    pub run: u64,
}

/// The small part of a checkpoint: where the run is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: u32,
    /// Optimizer steps taken.
    pub step: u64,
    /// Whole epochs done (`step / steps_per_epoch`).
    pub epoch: u64,
    /// Steps into the current epoch.
    pub step_in_epoch: u64,
    pub steps_per_epoch: u64,
    /// Seconds of the run's clock (the time budget's and the schedule's) at this step.
    pub elapsed_s: f64,
    /// The step of the last report.
    pub last_reported: u64,
    pub loader: LoaderPosition,
    pub tally: Tally,
    /// The CUDA device whose generator state is saved as `rng.cuda`, if any.
    pub cuda_device: Option<usize>,
    /// The objective's value at this step (a checkpoint at an epoch's end, right after its
    /// report), `None` mid-epoch.
    pub value: Option<f64>,
    /// The best objective value up to this step.
    pub best: Option<f64>,
}

/// A checkpoint's tensors, by name.
pub type NamedTensors = Vec<(String, Tensor)>;

/// One checkpoint: its header, its named tensors (on the CPU once read), and libtorch's
/// optimizer archive.
pub struct Snapshot {
    pub header: Header,
    pub tensors: NamedTensors,
    pub optimizer_archive: Vec<u8>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, why: impl Into<String>) -> SnapshotError {
    SnapshotError::Corrupt {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename, fsync of
/// the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io(path)(e)
    })
}

impl Snapshot {
    /// The file's bytes.
    pub fn encode(&self) -> Result<Vec<u8>, SnapshotError> {
        let header = serde_json::to_vec(&self.header)
            .map_err(|e| SnapshotError::Torch(format!("encoding the header: {e}")))?;
        let mut tensors = Vec::new();
        Tensor::save_multi_to_stream(&self.tensors, &mut tensors)
            .map_err(|e| SnapshotError::Torch(e.to_string()))?;
        let mut out = Vec::with_capacity(
            MAGIC.len() + 28 + header.len() + tensors.len() + self.optimizer_archive.len(),
        );
        out.extend_from_slice(MAGIC);
        for section in [&header[..], &tensors[..], &self.optimizer_archive[..]] {
            out.extend_from_slice(&(section.len() as u64).to_le_bytes());
            out.extend_from_slice(section);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Writes the checkpoint to `path` atomically.
    pub fn write(&self, path: &Path) -> Result<(), SnapshotError> {
        write_atomic(path, &self.encode()?)
    }

    /// Reads the checkpoint at `path`, checking its checksum and format version.
    pub fn read(path: &Path) -> Result<Snapshot, SnapshotError> {
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(io(path))?;
        Snapshot::decode(path, &bytes)
    }

    /// Decodes a checkpoint's bytes (`path` names it in errors).
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
        if bytes.len() < MAGIC.len() + 4 || &bytes[..MAGIC.len()] != MAGIC {
            return Err(corrupt(path, "not a tune checkpoint (no TUNESNAP mark)"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let want = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32fast::hash(body) != want {
            return Err(corrupt(
                path,
                format!(
                    "checksum mismatch ({} bytes: truncated or altered)",
                    bytes.len()
                ),
            ));
        }
        let mut at = MAGIC.len();
        let mut section = || -> Result<&[u8], SnapshotError> {
            let len_bytes = body
                .get(at..at + 8)
                .ok_or_else(|| corrupt(path, "a section length is missing"))?;
            let mut len = [0u8; 8];
            len.copy_from_slice(len_bytes);
            let len = u64::from_le_bytes(len) as usize;
            let s = body
                .get(at + 8..at + 8 + len)
                .ok_or_else(|| corrupt(path, "a section is cut short"))?;
            at += 8 + len;
            Ok(s)
        };
        let header = section()?;
        let tensors = section()?;
        let archive = section()?;
        let version: serde_json::Value =
            serde_json::from_slice(header).map_err(|e| corrupt(path, format!("header: {e}")))?;
        let found = version["format"].as_u64().unwrap_or(0) as u32;
        if found != FORMAT {
            return Err(SnapshotError::Version {
                path: path.to_path_buf(),
                found,
            });
        }
        let header: Header =
            serde_json::from_value(version).map_err(|e| corrupt(path, format!("header: {e}")))?;
        let tensors = Tensor::load_multi_from_stream(Cursor::new(tensors))
            .map_err(|e| corrupt(path, format!("tensors: {e}")))?;
        Ok(Snapshot {
            header,
            tensors,
            optimizer_archive: archive.to_vec(),
        })
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

/// What a save did, for the worker's report to the orchestrator.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    pub step: u64,
    pub path: PathBuf,
    /// Whether this checkpoint is now also the best.
    pub best: bool,
    pub bytes: u64,
}

/// A trial's checkpoint directory: the latest and the best checkpoint, and with
/// `keep_last = K` (K > 1) the K most recent as `step-NNNNNNNNNNNN.snap` (the newest a hard
/// link of the latest, so it costs no space of its own).
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    dir: PathBuf,
    direction: Direction,
    keep_last: u32,
}

/// The file name of the kept checkpoint at `step` (`keep_last`), sortable by step.
pub fn step_name(step: u64) -> String {
    format!("step-{step:012}.snap")
}

/// The step of a kept checkpoint's file name, if it is one.
fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix("step-")?
        .strip_suffix(".snap")?
        .parse()
        .ok()
}

impl SnapshotStore {
    /// The store in `dir` (created if missing); the best is judged by `direction`.
    pub fn open(dir: &Path, direction: Direction) -> Result<SnapshotStore, SnapshotError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        Ok(SnapshotStore {
            dir: dir.to_path_buf(),
            direction,
            keep_last: 1,
        })
    }

    /// Keeps the `k` most recent checkpoints (at least 1: the latest), for a resume to fall
    /// back through when the latest is damaged.
    pub fn keep_last(mut self, k: u32) -> SnapshotStore {
        self.keep_last = k.max(1);
        self
    }

    /// The kept checkpoints (`keep_last`), newest first.
    fn kept(&self) -> Vec<(u64, PathBuf)> {
        let mut out: Vec<(u64, PathBuf)> = fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let step = step_of(&e.file_name().to_string_lossy())?;
                Some((step, e.path()))
            })
            .collect();
        out.sort_by_key(|b| std::cmp::Reverse(b.0));
        out
    }

    /// Links the latest as the kept checkpoint of its step and removes the kept ones beyond
    /// the newest `keep_last`.
    fn rotate(&self, step: u64) -> Result<(), SnapshotError> {
        let target = self.dir.join(step_name(step));
        let tmp = self
            .dir
            .join(format!(".{}.tmp.{}", step_name(step), std::process::id()));
        let _ = fs::remove_file(&tmp);
        fs::hard_link(self.latest_path(), &tmp)
            .or_else(|_| fs::copy(self.latest_path(), &tmp).map(|_| ()))
            .and_then(|_| fs::rename(&tmp, &target))
            .map_err(io(&target))?;
        for (_, old) in self.kept().into_iter().skip(self.keep_last as usize) {
            match fs::remove_file(&old) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&old)(e)),
            }
        }
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.dir))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn latest_path(&self) -> PathBuf {
        self.dir.join(LATEST)
    }

    pub fn best_path(&self) -> PathBuf {
        self.dir.join(BEST)
    }

    /// Whether `value` beats `best` in the store's direction (anything beats nothing; NaN
    /// beats nothing).
    pub fn improves(&self, value: Option<f64>, best: Option<f64>) -> bool {
        match (value, best) {
            (Some(v), _) if v.is_nan() => false,
            (Some(_), None) => true,
            (Some(v), Some(b)) => self.direction.better(v, b),
            (None, _) => false,
        }
    }

    /// Writes `snap` as the latest checkpoint, and as the best when its value beats the best
    /// before it (the header's `best` is then expected to be that value).
    pub fn save(&self, snap: &Snapshot) -> Result<Saved, SnapshotError> {
        let bytes = snap.encode()?;
        let latest = self.latest_path();
        write_atomic(&latest, &bytes)?;
        if self.keep_last > 1 {
            self.rotate(snap.header.step)?;
        }
        let best = snap.header.value.is_some() && snap.header.value == snap.header.best;
        if best {
            // A hard link: the best stays this file when a later latest replaces the name.
            let tmp = self.dir.join(format!(".{BEST}.tmp.{}", std::process::id()));
            let _ = fs::remove_file(&tmp);
            let target = self.best_path();
            fs::hard_link(&latest, &tmp)
                .or_else(|_| fs::copy(&latest, &tmp).map(|_| ()))
                .and_then(|_| fs::rename(&tmp, &target))
                .and_then(|_| File::open(&self.dir)?.sync_all())
                .map_err(io(&target))?;
        }
        Ok(Saved {
            step: snap.header.step,
            path: latest,
            best,
            bytes: bytes.len() as u64,
        })
    }

    /// The checkpoint to resume from: the latest; when it is unreadable, the kept ones
    /// (`keep_last`) newest first, then the best, saying so in `warnings`; `None` when there
    /// is none (a fresh start).
    pub fn load(&self, warnings: &mut Vec<String>) -> Option<Snapshot> {
        let older = self.kept().into_iter().map(|(_, p)| p);
        for path in std::iter::once(self.latest_path())
            .chain(older)
            .chain(std::iter::once(self.best_path()))
        {
            if !path.exists() {
                continue;
            }
            match Snapshot::read(&path) {
                Ok(s) => return Some(s),
                Err(e) => warnings.push(format!("{e}; falling back to an older one")),
            }
        }
        None
    }

    /// Removes the checkpoints at the trial's end; with `keep_best`, the best stays (or the
    /// latest, renamed as the best, when no value was ever judged).
    pub fn clean(&self, keep_best: bool) -> Result<(), SnapshotError> {
        let (latest, best) = (self.latest_path(), self.best_path());
        if keep_best && !best.exists() && latest.exists() {
            fs::rename(&latest, &best).map_err(io(&latest))?;
        }
        let mut remove = vec![latest];
        remove.extend(self.kept().into_iter().map(|(_, p)| p));
        if !keep_best {
            remove.push(best);
        }
        for p in remove {
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&p)(e)),
            }
        }
        if !keep_best {
            // Only if empty: the directory may be shared with what else the trial keeps.
            let _ = fs::remove_dir(&self.dir);
        }
        Ok(())
    }
}

/// The warning of a trial whose checkpoints cannot be saved (a full disk, a directory made
/// read-only mid-run): said at the first failure only, since every later save of the trial
/// would fail the same way and repeat it at each epoch. The trial goes on from its state in
/// memory; the last checkpoint that was saved stays whole (saves are atomic), so a re-run
/// resumes from it.
#[derive(Debug, Default)]
pub struct SaveFailures {
    failed: u64,
}

impl SaveFailures {
    /// Counts a failed save at `step` in `dir`; the line to print the first time, `None` after.
    pub fn failed(&mut self, step: u64, dir: &Path, e: &str) -> Option<String> {
        self.failed += 1;
        (self.failed == 1).then(|| {
            format!(
                "tune worker: checkpoint at step {step} not saved: {e}; the trial goes on without new checkpoints (the last one saved in {} stays whole, and a re-run resumes from it); later failures of this trial are not repeated",
                dir.display()
            )
        })
    }

    /// How many saves failed.
    pub fn count(&self) -> u64 {
        self.failed
    }
}

/// The state of the default random generator of the CPU (`None`) or of a CUDA device.
pub fn rng_state(cuda: Option<usize>) -> Result<Tensor, String> {
    let mut out: *mut torch_sys::C_tensor = std::ptr::null_mut();
    let device = cuda.map_or(-1, |i| i as std::ffi::c_int);
    crate::optim::checked("reading the random generator's state", |err, len| unsafe {
        tune_rng_get_state(device, &mut out, err, len)
    })?;
    // SAFETY: on success the shim handed us a new tensor handle, which tch now owns.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// Sets the default random generator of the CPU (`None`) or of a CUDA device to `state`.
pub fn set_rng_state(cuda: Option<usize>, state: &Tensor) -> Result<(), String> {
    let device = cuda.map_or(-1, |i| i as std::ffi::c_int);
    crate::optim::checked(
        "restoring the random generator's state",
        |err, len| unsafe {
            tune_rng_set_state(device, state.as_ptr() as *mut torch_sys::C_tensor, err, len)
        },
    )
}

unsafe extern "C" {
    fn tune_rng_get_state(
        device: std::ffi::c_int,
        out: *mut *mut torch_sys::C_tensor,
        err: *mut std::ffi::c_char,
        err_len: std::ffi::c_int,
    ) -> std::ffi::c_int;
    fn tune_rng_set_state(
        device: std::ffi::c_int,
        state: *mut torch_sys::C_tensor,
        err: *mut std::ffi::c_char,
        err_len: std::ffi::c_int,
    ) -> std::ffi::c_int;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn sample(step: u64, value: Option<f64>, best: Option<f64>) -> Snapshot {
        Snapshot {
            header: Header {
                format: FORMAT,
                step,
                epoch: 1,
                step_in_epoch: 2,
                steps_per_epoch: 10,
                elapsed_s: 1.5,
                last_reported: 10,
                loader: LoaderPosition::Memory { pos: 16 },
                tally: Tally {
                    sum: 0.25,
                    steps: 2,
                    run: 0,
                },
                cuda_device: None,
                value,
                best,
            },
            tensors: vec![
                (
                    "model.w".into(),
                    Tensor::arange(6, (Kind::Float, Device::Cpu)).view([2, 3]),
                ),
                ("loader.perm".into(), Tensor::from_slice(&[3i64, 1, 2, 0])),
            ],
            optimizer_archive: vec![1, 2, 3, 4],
        }
    }

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let path = tmp.path().join("s.snap");
        let s = sample(12, Some(0.5), Some(0.5));
        s.write(&path).expect("writes");
        let r = Snapshot::read(&path).expect("reads");
        assert_eq!(r.header, s.header);
        assert_eq!(r.optimizer_archive, s.optimizer_archive);
        assert_eq!(r.tensors.len(), 2);
        for (name, t) in &s.tensors {
            assert!(r.tensor(name).expect(name).equal(t), "{name}");
        }
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(tmp.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["s.snap"]);
    }

    #[test]
    fn a_truncated_or_altered_snapshot_is_reported_as_corrupt() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let path = tmp.path().join("s.snap");
        let bytes = sample(3, None, None).encode().expect("encodes");
        for (what, b) in [
            ("truncated", bytes[..bytes.len() / 2].to_vec()),
            ("altered", {
                let mut b = bytes.clone();
                let mid = b.len() / 2;
                b[mid] ^= 0x40;
                b
            }),
            ("empty", Vec::new()),
        ] {
            fs::write(&path, &b).expect("write");
            match Snapshot::read(&path) {
                Err(SnapshotError::Corrupt { path: p, why }) => {
                    assert_eq!(p, path, "{what}");
                    assert!(!why.is_empty());
                }
                Err(e) => panic!("{what}: expected corrupt, got {e}"),
                Ok(_) => panic!("{what}: a damaged file was read"),
            }
        }
        let e = Snapshot::decode(Path::new("x.snap"), &bytes[..bytes.len() - 1])
            .err()
            .expect("fails");
        assert!(
            e.to_string().starts_with("checkpoint x.snap is corrupt: "),
            "{e}"
        );
    }

    /// A snapshot file with these sections, its checksum right.
    fn with_sections(header: &[u8], tensors: &[u8], archive: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        for section in [header, tensors, archive] {
            out.extend_from_slice(&(section.len() as u64).to_le_bytes());
            out.extend_from_slice(section);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The damages a checkpoint file meets: a crash while it was created (empty), a copy cut
    /// short, bytes that are not a checkpoint, a bit flipped, and a file whose checksum is
    /// right but whose tensors are not (written so by a faulty tool).
    fn damaged(good: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
        let header = serde_json::to_vec(&sample(3, None, None).header).expect("header");
        vec![
            ("zero bytes", Vec::new()),
            ("truncated to half", good[..good.len() / 2].to_vec()),
            ("cut by one byte", good[..good.len() - 1].to_vec()),
            (
                "garbage",
                (0..good.len()).map(|i| (i * 7 + 3) as u8).collect(),
            ),
            ("a flipped bit", {
                let mut b = good.to_vec();
                let mid = b.len() / 2;
                b[mid] ^= 0x01;
                b
            }),
            (
                "a valid header and checksum, a wrong body",
                with_sections(&header, b"not a tensor archive", &[1, 2]),
            ),
        ]
    }

    #[test]
    fn a_damaged_latest_falls_back_to_the_best_and_both_damaged_start_from_scratch_saying_so() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let store =
            SnapshotStore::open(&tmp.path().join("ckpt"), Direction::Minimize).expect("opens");
        let good = sample(30, Some(0.9), Some(0.5)).encode().expect("encodes");
        for (what, bytes) in damaged(&good) {
            store
                .save(&sample(10, Some(0.5), Some(0.5)))
                .expect("the best");
            // A worse one after it: the latest is then a file of its own, not the best's link.
            store
                .save(&sample(20, Some(0.7), Some(0.5)))
                .expect("the latest");
            fs::write(store.latest_path(), &bytes).expect("damage the latest");
            let mut warnings = Vec::new();
            let snap = store.load(&mut warnings).expect(what);
            assert_eq!(snap.header.step, 10, "{what}: the best");
            assert_eq!(warnings.len(), 1, "{what}: {warnings:?}");
            assert!(
                warnings[0].contains("latest.snap is corrupt")
                    && warnings[0].ends_with("falling back to an older one"),
                "{what}: {warnings:?}"
            );
            // Both damaged: nothing to resume from, each said.
            fs::write(store.best_path(), &bytes).expect("damage the best");
            let mut warnings = Vec::new();
            assert!(store.load(&mut warnings).is_none(), "{what}: from scratch");
            assert_eq!(warnings.len(), 2, "{what}: {warnings:?}");
            assert!(
                warnings[1].contains("best.snap is corrupt"),
                "{what}: {warnings:?}"
            );
            fs::remove_file(store.best_path()).expect("rm");
        }
    }

    /// `keep_last = 3`: the three most recent checkpoints stay (the newest the latest's own
    /// file), older ones go as new ones come; a damaged latest falls back to the most recent
    /// readable one before the best, each fall said; the trial's end removes them all.
    #[test]
    fn keep_last_keeps_the_k_most_recent_and_a_damaged_latest_falls_back_through_them() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join("ckpt");
        let store = SnapshotStore::open(&dir, Direction::Minimize)
            .expect("opens")
            .keep_last(3);
        store
            .save(&sample(10, Some(0.5), Some(0.5)))
            .expect("the best");
        for step in [20, 30, 40] {
            store
                .save(&sample(step, Some(0.7), Some(0.5)))
                .expect("saves");
        }
        let mut names: Vec<String> = fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [BEST, LATEST, &step_name(20), &step_name(30), &step_name(40)]
        );
        // Damaged in place: the latest and its link, the newest kept, are both unreadable.
        let good = sample(99, None, None).encode().expect("encodes");
        fs::write(store.latest_path(), &good[..good.len() / 2]).expect("damage");
        let mut warnings = Vec::new();
        let snap = store.load(&mut warnings).expect("an older one");
        assert_eq!(snap.header.step, 30, "{warnings:?}");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[1].contains(&step_name(40)), "{warnings:?}");
        // The end of the trial removes every snapshot.
        store.clean(false).expect("clean");
        assert!(!dir.exists(), "nothing left");
    }

    /// A full disk (a tmpfs of 256 KiB, mounted as root; skipped otherwise): a save that does
    /// not fit fails with the OS's reason, leaves no temporary file, and the checkpoint saved
    /// before it reads back whole; the warning is said once for the trial.
    #[test]
    fn a_save_on_a_full_disk_fails_cleanly_and_keeps_the_last_checkpoint_whole() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mnt = tmp.path().join("small");
        fs::create_dir(&mnt).expect("mkdir");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(&mnt)
            .output();
        match mounted {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                eprintln!(
                    "skipped: cannot mount a small tmpfs: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                return;
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount: {e}");
                return;
            }
        }
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(self.0).output();
            }
        }
        let _unmount = Unmount(&mnt);
        let store = SnapshotStore::open(&mnt.join("ckpt"), Direction::Minimize).expect("opens");
        store
            .save(&sample(10, Some(0.5), Some(0.5)))
            .expect("a small one fits");
        let mut big = sample(20, Some(0.4), Some(0.4));
        // 1 MiB of weights: four times the disk.
        big.tensors.push((
            "model.big".into(),
            Tensor::zeros([262_144], (Kind::Float, Device::Cpu)),
        ));
        let mut told = SaveFailures::default();
        let mut lines = Vec::new();
        for step in [20, 30, 40] {
            big.header.step = step;
            let e = store.save(&big).expect_err("no room");
            assert!(
                e.to_string().contains("No space left on device"),
                "the OS's reason: {e}"
            );
            lines.extend(told.failed(step, store.dir(), &e.to_string()));
        }
        assert_eq!(told.count(), 3);
        assert_eq!(lines.len(), 1, "said once: {lines:?}");
        assert!(
            lines[0].starts_with("tune worker: checkpoint at step 20 not saved: ")
                && lines[0].contains("the trial goes on without new checkpoints"),
            "{lines:?}"
        );
        let mut names: Vec<_> = fs::read_dir(store.dir())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [BEST, LATEST], "no half-written file left");
        let mut warnings = Vec::new();
        let kept = store.load(&mut warnings).expect("the last checkpoint");
        assert_eq!(kept.header.step, 10);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn another_format_version_is_refused_by_name() {
        let mut s = sample(3, None, None);
        s.header.format = FORMAT + 1;
        let bytes = s.encode().expect("encodes");
        match Snapshot::decode(Path::new("v.snap"), &bytes) {
            Err(e @ SnapshotError::Version { .. }) => assert_eq!(
                e.to_string(),
                format!(
                    "checkpoint v.snap has format version {}, this tune reads version {FORMAT}",
                    FORMAT + 1
                )
            ),
            Err(e) => panic!("expected a version error, got {e}"),
            Ok(_) => panic!("another version was read"),
        }
    }

    #[test]
    fn the_store_keeps_the_latest_and_the_best_and_falls_back_to_the_best_when_the_latest_is_corrupt()
     {
        let tmp = tempfile::tempdir().expect("temp dir");
        let store =
            SnapshotStore::open(&tmp.path().join("ckpt"), Direction::Minimize).expect("opens");
        assert!(store.improves(Some(0.5), None));
        assert!(store.improves(Some(0.4), Some(0.5)));
        assert!(!store.improves(Some(0.6), Some(0.5)));
        assert!(!store.improves(Some(f64::NAN), None));
        assert!(!store.improves(None, Some(0.5)));
        let a = store
            .save(&sample(10, Some(0.5), Some(0.5)))
            .expect("saves");
        assert!(a.best);
        // Worse: the latest only.
        let b = store
            .save(&sample(20, Some(0.7), Some(0.5)))
            .expect("saves");
        assert!(!b.best);
        // Mid-epoch: the latest only.
        let c = store.save(&sample(25, None, Some(0.5))).expect("saves");
        assert!(!c.best && c.bytes > 0);
        let best = Snapshot::read(&store.best_path()).expect("best");
        assert_eq!(best.header.step, 10);
        let mut warnings = Vec::new();
        assert_eq!(store.load(&mut warnings).expect("latest").header.step, 25);
        assert!(warnings.is_empty());
        // A corrupt latest: the best, and a word about it.
        let mut bytes = fs::read(store.latest_path()).expect("read");
        bytes.truncate(bytes.len() - 10);
        fs::write(store.latest_path(), bytes).expect("write");
        assert_eq!(store.load(&mut warnings).expect("best").header.step, 10);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("latest.snap is corrupt"),
            "{warnings:?}"
        );
        // Only the two files, no temporaries.
        let mut names: Vec<_> = fs::read_dir(store.dir())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [BEST, LATEST]);
        store.clean(true).expect("clean");
        assert!(store.best_path().exists() && !store.latest_path().exists());
        store.clean(false).expect("clean");
        assert!(!store.dir().exists());
        // Nothing at all: a fresh start.
        let empty = SnapshotStore::open(&tmp.path().join("e"), Direction::Maximize).expect("opens");
        assert!(empty.load(&mut warnings).is_none());
        assert!(empty.improves(Some(0.9), Some(0.8)));
    }

    /// What `tune` reads of a snapshot without libtorch (its header's step) agrees with the
    /// trainer: the step of the checkpoint the store loads, and of each file.
    #[test]
    fn tune_reads_the_step_of_the_checkpoint_the_store_resumes_from() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let store = SnapshotStore::open(&tmp.path().join("ckpt"), Direction::Minimize)
            .expect("opens")
            .keep_last(2);
        assert_eq!(tune::checkpoint::resume_step(store.dir()), None);
        store
            .save(&sample(10, Some(0.5), Some(0.5)))
            .expect("saves");
        store
            .save(&sample(20, Some(0.7), Some(0.5)))
            .expect("saves");
        store.save(&sample(25, None, Some(0.5))).expect("saves");
        let mut warnings = Vec::new();
        let loaded = store.load(&mut warnings).expect("latest").header.step;
        assert_eq!(tune::checkpoint::resume_step(store.dir()), Some(loaded));
        assert_eq!(
            tune::checkpoint::snapshot_step(&store.best_path()),
            Some(10)
        );
        assert_eq!(
            tune::checkpoint::snapshot_step(&store.dir().join(step_name(20))),
            Some(20)
        );
        // A damaged latest (a new file: the kept one of its step is a link to the old one):
        // both fall back to the newest kept one.
        fs::remove_file(store.latest_path()).expect("remove");
        fs::write(store.latest_path(), b"TUNESNAP").expect("write");
        let loaded = store.load(&mut warnings).expect("kept").header.step;
        assert_eq!(loaded, 25);
        assert_eq!(tune::checkpoint::resume_step(store.dir()), Some(loaded));
    }

    #[test]
    fn the_generator_state_round_trips_and_replays_the_same_draws() {
        let _rng = crate::torch_rng_lock();
        tch::manual_seed(11);
        let state = rng_state(None).expect("state");
        let a = Tensor::rand([5], (Kind::Float, Device::Cpu));
        let _ = Tensor::rand([7], (Kind::Float, Device::Cpu));
        set_rng_state(None, &state).expect("set");
        let b = Tensor::rand([5], (Kind::Float, Device::Cpu));
        assert!(a.equal(&b));
        let bad = Tensor::zeros([3], (Kind::Uint8, Device::Cpu));
        let e = set_rng_state(None, &bad).expect_err("a bad state");
        assert!(
            e.starts_with("restoring the random generator's state: "),
            "{e}"
        );
    }
}
