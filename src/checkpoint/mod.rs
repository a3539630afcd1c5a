//! Where a trial's checkpoints live, and how long they stay (issue 27).
//!
//! What belongs here: the `[trial]` checkpoint settings of a study file (parsed and checked
//! before any trial starts), the choice of a trial's checkpoint directory, the clean-up of a
//! trial's checkpoints when it ends, and their disk use; the copy of them in an object store
//! (`remote`). What does not: writing and reading snapshots (the trainer,
//! `crates/tune-train/src/snapshot.rs`), the worker protocol (`runner::protocol`), and when a
//! copy goes up or comes back (the scheduler, which runs every trial's attempts).
//!
//! # Where
//! - Default: `checkpoints/` inside the run directory of the trial's first attempt.
//! - `checkpoint_dir = "/shared/ckpt"`: a directory (a shared filesystem for studies that
//!   run on several machines); each trial gets `<dir>/<study name>/trial-NNNNN`, the same for
//!   every attempt of the trial on any machine. A relative path is taken from the study
//!   file's directory.
//! - `checkpoint_dir = "s3://bucket/prefix"` (or `gs://`, `az://`, see [`remote::SCHEMES`]):
//!   the trial still works in the default directory, its local *staging* directory (what
//!   `TUNE_CHECKPOINT_DIR` names, where the trainer writes its snapshots); tune copies it to
//!   `<url>/<study name>/trial-NNNNN/` after each checkpoint the trial reports (changed files
//!   only, one upload at a time per trial, the newest checkpoint winning over those that
//!   queued behind a slow one), fetches that copy into the staging directory before each
//!   attempt of a trial that had checkpointed (only a copy whose owner object is this very
//!   trial, as [`claim`] judges a directory), and cleans it when the trial ends, as
//!   `keep_checkpoints` says. The store is probed (a small object written, read back and
//!   deleted) before any trial runs; a failed upload later is a warning and the next
//!   checkpoint retries it; a failed fetch leaves the attempt with what the staging directory
//!   holds (from scratch on a machine that never ran the trial).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod remote;
pub use remote::StoreUrl;

/// The latest checkpoint's file name in a trial's checkpoint directory (the trainer's
/// `snapshot::LATEST`).
pub const LATEST: &str = "latest.snap";
/// The best checkpoint's file name (the trainer's `snapshot::BEST`).
pub const BEST: &str = "best.snap";
/// The checkpoint directory's name inside a trial's run directory (the default place).
pub const IN_TRIAL_DIR: &str = "checkpoints";

/// A refused checkpoint setting; the message starts with its key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct CheckpointError(pub String);

/// What a trial's checkpoints leave behind when the trial ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Keep {
    /// Nothing: checkpoints exist to resume a trial, and a trial that ended needs none.
    #[default]
    None,
    /// The best checkpoint by the study's objective (`best.snap`), e.g. to reuse its weights.
    Best,
}

/// The `[trial]` checkpoint settings of a builtin study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointSpec {
    /// `checkpoints = false` turns them off (a trial then restarts from scratch when re-run).
    pub enabled: bool,
    /// `checkpoint_dir`: a directory holding one subdirectory per study and trial; `None`:
    /// inside each trial's run directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// `checkpoint_dir` as an object-store URL: trials stage their checkpoints in the default
    /// place and tune keeps a copy there. The worker never sees it (tune does the copying).
    #[serde(skip)]
    pub store: Option<StoreUrl>,
    /// `checkpoint_every`: a checkpoint within an epoch after this long (one comes at every
    /// epoch's end regardless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<Duration>,
    /// `keep_checkpoints`.
    #[serde(default)]
    pub keep: Keep,
    /// `keep_last`: how many of the most recent checkpoints stay while the trial runs (at
    /// least the latest), for a resume to fall back through when the latest is damaged.
    #[serde(default = "one")]
    pub keep_last: u32,
}

fn one() -> u32 {
    1
}

/// The most `keep_last` takes: each kept checkpoint is a whole copy of the model and the
/// optimizer's state.
pub const MAX_KEEP_LAST: u32 = 100;

impl Default for CheckpointSpec {
    fn default() -> CheckpointSpec {
        CheckpointSpec {
            enabled: true,
            dir: None,
            store: None,
            every: None,
            keep: Keep::None,
            keep_last: 1,
        }
    }
}

/// The `[trial]` keys this module reads.
pub const KEYS: &[&str] = &[
    "checkpoints",
    "checkpoint_dir",
    "checkpoint_every",
    "keep_checkpoints",
    "keep_last",
];

impl CheckpointSpec {
    /// The settings of a study file that names none of the keys.
    pub fn is_default(&self) -> bool {
        *self == CheckpointSpec::default()
    }

    /// Reads the checkpoint keys of a `[trial]` table (others are not looked at);
    /// `study_dir` resolves a relative `checkpoint_dir`.
    pub fn parse(table: &toml::Table, study_dir: &Path) -> Result<CheckpointSpec, CheckpointError> {
        let mut spec = CheckpointSpec::default();
        if let Some(v) = table.get("checkpoints") {
            spec.enabled = v.as_bool().ok_or_else(|| {
                CheckpointError(format!("trial.checkpoints: must be true or false, not {v}"))
            })?;
        }
        if let Some(v) = table.get("checkpoint_dir") {
            let s = v.as_str().ok_or_else(|| {
                CheckpointError(format!(
                    "trial.checkpoint_dir: must be a directory path (a string), not {v}"
                ))
            })?;
            match parse_location(s, study_dir)? {
                Location::Dir(d) => spec.dir = Some(d),
                Location::Store(u) => spec.store = Some(u),
            }
        }
        if let Some(v) = table.get("checkpoint_every") {
            let s = v.as_str().ok_or_else(|| {
                CheckpointError(format!(
                    "trial.checkpoint_every: must be a duration string such as \"10m\", not {v}"
                ))
            })?;
            let d = crate::limits::duration("trial.checkpoint_every", s)
                .map_err(|e| CheckpointError(e.to_string()))?;
            spec.every = Some(d);
        }
        if let Some(v) = table.get("keep_checkpoints") {
            spec.keep = match v.as_str() {
                Some("none") => Keep::None,
                Some("best") => Keep::Best,
                _ => {
                    return Err(CheckpointError(format!(
                        "trial.keep_checkpoints: must be \"none\" or \"best\", not {v}"
                    )));
                }
            };
        }
        if let Some(v) = table.get("keep_last") {
            spec.keep_last = v
                .as_integer()
                .and_then(|k| u32::try_from(k).ok())
                .filter(|k| (1..=MAX_KEEP_LAST).contains(k))
                .ok_or_else(|| {
                    CheckpointError(format!(
                        "trial.keep_last: must be an integer from 1 to {MAX_KEEP_LAST} (how many of the most recent checkpoints to keep), not {v}"
                    ))
                })?;
        }
        if !spec.enabled {
            for key in [
                "checkpoint_dir",
                "checkpoint_every",
                "keep_checkpoints",
                "keep_last",
            ] {
                if table.contains_key(key) {
                    return Err(CheckpointError(format!(
                        "trial.{key}: set, but `checkpoints = false` turns checkpoints off"
                    )));
                }
            }
        }
        Ok(spec)
    }

    /// The checkpoint directory of the trial whose first attempt is trial `first` of study
    /// `study`, run in `first_run_dir`: see [`trial_dir`].
    pub fn trial_dir(&self, study: &str, first: u64, first_run_dir: &Path) -> PathBuf {
        trial_dir(self.dir.as_deref(), study, first, first_run_dir)
    }
}

/// The one place that decides where a trial keeps its checkpoints, for builtin and command
/// trials alike: the same directory for every attempt at its params, on any machine that
/// shares it. Keyed by the FIRST attempt (its number `first`, its run directory
/// `first_run_dir`): `<checkpoint_dir>/<study>/trial-NNNNN` where the study sets
/// `checkpoint_dir` to a directory (`dir`), else `checkpoints/` inside the first attempt's run
/// directory (also the staging directory of a study whose checkpoints go to an object store).
pub fn trial_dir(dir: Option<&Path>, study: &str, first: u64, first_run_dir: &Path) -> PathBuf {
    match dir {
        Some(d) => d.join(sanitize(study)).join(format!("trial-{first:05}")),
        None => first_run_dir.join(IN_TRIAL_DIR),
    }
}

/// What `checkpoint_dir` names.
#[derive(Debug, Clone, PartialEq)]
pub enum Location {
    /// A directory, local or shared (absolute: a relative one is taken from the study file's).
    Dir(PathBuf),
    /// An object store.
    Store(StoreUrl),
}

/// A `checkpoint_dir` value: a path (relative ones from the study file's directory) or an
/// object-store URL; a URL of another scheme, or an empty string, is refused.
pub fn parse_location(s: &str, study_dir: &Path) -> Result<Location, CheckpointError> {
    if s.trim().is_empty() || s.contains('\0') {
        return Err(CheckpointError(
            "trial.checkpoint_dir: must be a directory path, not an empty string".into(),
        ));
    }
    if let Some((scheme, _)) = s.split_once("://") {
        let scheme = scheme.to_ascii_lowercase();
        if !remote::SCHEMES.contains(&scheme.as_str()) {
            return Err(CheckpointError(format!(
                "trial.checkpoint_dir: {s:?} is a URL of unknown scheme {scheme:?}; give a directory path or an object-store URL ({})",
                remote::SCHEMES.join(", ")
            )));
        }
        return StoreUrl::parse(s).map(Location::Store);
    }
    let p = PathBuf::from(s);
    Ok(Location::Dir(if p.is_absolute() {
        p
    } else {
        study_dir.join(p)
    }))
}

/// A study name as one path component: `/`, `\`, `..`-only and NUL characters replaced.
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| match c {
            '/' | '\\' | '\0' => '_',
            c => c,
        })
        .collect();
    if s.is_empty() || s.chars().all(|c| c == '.') {
        format!("_{s}")
    } else {
        s
    }
}

/// Whether `dir` holds a checkpoint the trainer could resume from: the latest, the best, or
/// one of the most recent kept with `keep_last` (`step-N.snap`).
pub fn has_snapshot(dir: &Path) -> bool {
    dir.join(LATEST).is_file()
        || dir.join(BEST).is_file()
        || std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                let name = e.file_name();
                let n = name.to_string_lossy();
                n.starts_with("step-") && n.ends_with(".snap")
            })
        })
}

/// Checks, before any trial runs, that this machine can write checkpoints under `dir` (a
/// `checkpoint_dir`): creates it if need be, then creates and removes a file in it. A
/// directory that is read-only, a path under a regular file, a parent that cannot be created
/// are each refused here with the OS's reason, rather than found by every trial in turn.
pub fn probe_writable(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".tune-probe.{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// Whether `dir` holds anything a re-run could resume from on this machine: the trainer's
/// snapshots for a builtin trial; for a command trial anything at all (what is in it is the
/// script's own).
pub fn holds_checkpoint(dir: &Path, builtin: bool) -> bool {
    if builtin {
        return has_snapshot(dir);
    }
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())
}

/// The file in a trial's checkpoint directory that says whose checkpoints they are.
pub const OWNER: &str = "trial.json";

/// Makes `dir` the checkpoint directory of the trial `owner` describes (its study, number,
/// seed and params, as JSON) and says whether what it holds may be resumed from: yes when it
/// holds checkpoints of this very trial (a re-run of it); otherwise its checkpoints are
/// removed (a deleted study run again under the same name, a trial number reused with other
/// params in a shared `checkpoint_dir`) and the trial starts from scratch.
pub fn claim(dir: &Path, owner: &str) -> std::io::Result<bool> {
    std::fs::create_dir_all(dir)?;
    let file = dir.join(OWNER);
    let same = match std::fs::read_to_string(&file) {
        Ok(text) => text == owner,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    if !same {
        clean(dir, Keep::None)?;
        std::fs::create_dir_all(dir)?;
        std::fs::write(&file, owner)?;
    }
    Ok(same && has_snapshot(dir))
}

/// Fills `child`, the checkpoint directory of a child of population-based training, with a
/// copy of `parent`'s checkpoints (every file, in subdirectories too, but the parent's
/// [`OWNER`] file, a builtin parent's [`BEST`] snapshot, and temporaries, hidden ones and
/// `.tmp` files: a save in progress is written to one and renamed),
/// then makes it the child's ([`OWNER`] = `owner`), so that the child resumes from it as a
/// re-run would from its own. Whatever `child` held before goes first. Files are copied, not
/// linked: a parent that rewrites a file in place does not change the child's. Returns the
/// files and bytes copied; none when `parent` holds no checkpoint. An error names the path it
/// met and what was done there: the fault may be the parent's (reading) or the child's
/// (emptying, writing), and the caller's message would otherwise blame one for the other.
pub fn seed_from(parent: &Path, child: &Path, owner: &str) -> std::io::Result<(usize, u64)> {
    /// A file with several names there (the latest and its `keep_last` link) gets the same
    /// names here, one copy linked, not one copy per name.
    type Copied = std::collections::HashMap<(u64, u64), PathBuf>;
    fn copy_tree(
        from: &Path,
        to: &Path,
        top: bool,
        n: &mut (usize, u64),
        copied: &mut Copied,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        std::fs::create_dir_all(to).map_err(at("creating", to))?;
        let reading = at("reading", from);
        for entry in std::fs::read_dir(from).map_err(&reading)? {
            let entry = entry.map_err(&reading)?;
            let name = entry.file_name();
            let text = name.to_string_lossy();
            // The parent's best (builtin) stays its own: the child's best is what it reaches.
            if text.starts_with('.')
                || text.ends_with(".tmp")
                || (top && (text == OWNER || text == BEST))
            {
                continue;
            }
            let (src, dest) = (entry.path(), to.join(&name));
            let kind = entry.file_type().map_err(at("reading", &src))?;
            if kind.is_dir() {
                copy_tree(&src, &dest, false, n, copied)?;
            } else if kind.is_file() {
                let meta = entry.metadata().map_err(at("reading", &src))?;
                let key = (meta.dev(), meta.ino());
                if let Some(first) = copied.get(&key).filter(|_| meta.nlink() > 1) {
                    std::fs::hard_link(first, &dest).map_err(at("linking", &dest))?;
                    continue;
                }
                let bytes = std::fs::copy(&src, &dest).map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("copying {} to {}: {e}", src.display(), dest.display()),
                    )
                })?;
                copied.insert(key, dest);
                n.0 += 1;
                n.1 += bytes;
            }
        }
        Ok(())
    }
    if child.exists() {
        std::fs::remove_dir_all(child).map_err(at("emptying", child))?;
    }
    let mut n = (0, 0);
    if parent.is_dir() {
        copy_tree(parent, child, true, &mut n, &mut Copied::new())?;
    }
    std::fs::create_dir_all(child).map_err(at("creating", child))?;
    let file = child.join(OWNER);
    std::fs::write(&file, owner).map_err(at("writing", &file))?;
    std::fs::File::open(child)
        .and_then(|d| d.sync_all())
        .map_err(at("syncing", child))?;
    Ok(n)
}

/// The first bytes of a builtin trainer's snapshot file (`snapshot.rs` in tune-train): then
/// the length of its JSON header (u64, little-endian), then the header.
pub const SNAPSHOT_MARK: &[u8; 8] = b"TUNESNAP";

/// A snapshot's header is a few hundred bytes: a longer one is damage, not a header.
const MAX_SNAPSHOT_HEADER: u64 = 1 << 20;

/// The step of the builtin trainer's snapshot at `path`, from its header alone (checking the
/// rest is the trainer's business): `None` when it is not one or cannot be read.
pub fn snapshot_step(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 16];
    file.read_exact(&mut head).ok()?;
    let (mark, len) = head.split_at(SNAPSHOT_MARK.len());
    if mark != SNAPSHOT_MARK {
        return None;
    }
    let len = u64::from_le_bytes(len.try_into().ok()?);
    if len > MAX_SNAPSHOT_HEADER {
        return None;
    }
    let mut header = vec![0; usize::try_from(len).ok()?];
    file.read_exact(&mut header).ok()?;
    serde_json::from_slice::<serde_json::Value>(&header).ok()?["step"].as_u64()
}

/// The step a builtin trial resuming from `dir` starts at: that of the snapshot the trainer
/// loads first (`SnapshotStore::load`: the latest, else the newest kept with `keep_last`,
/// else the best); `None` when `dir` holds none.
pub fn resume_step(dir: &Path) -> Option<u64> {
    let mut kept: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let step = name
                .to_str()?
                .strip_prefix("step-")?
                .strip_suffix(".snap")?
                .parse()
                .ok()?;
            Some((step, e.path()))
        })
        .collect();
    kept.sort_by_key(|k| std::cmp::Reverse(k.0));
    std::iter::once(dir.join(LATEST))
        .chain(kept.into_iter().map(|(_, p)| p))
        .chain(std::iter::once(dir.join(BEST)))
        .find_map(|p| snapshot_step(&p))
}

/// Freezes a builtin parent's checkpoints in `parent` as they stand now, for a child of
/// population-based training: `staging` (emptied first) gets a hard link to each of its
/// files (not its [`OWNER`] file, nor hidden temporaries), and the step the child will resume
/// from ([`resume_step`]) comes back with the files and bytes linked; `None`, and no
/// `staging`, when `parent` holds no snapshot.
///
/// Why links, taken at once: the parent goes on and saves newer checkpoints, and removes them
/// all when it ends; a copy taken later, or slowly, could be of a newer checkpoint than the
/// step the child's record names (or find none). The trainer never writes into a snapshot
/// file (it writes a new one and renames it over the name, and links the best and the kept
/// ones), so a link keeps exactly this state. An error (`staging` on another filesystem than
/// `parent`, links refused) removes `staging`: the caller copies instead ([`seed_from`]).
pub fn freeze(parent: &Path, staging: &Path) -> std::io::Result<Option<(u64, usize, u64)>> {
    fn link_all(parent: &Path, staging: &Path) -> std::io::Result<(usize, u64)> {
        std::fs::create_dir_all(staging)?;
        let mut n = (0, 0);
        for entry in std::fs::read_dir(parent)? {
            let entry = entry?;
            let name = entry.file_name();
            let text = name.to_string_lossy();
            if text.starts_with('.') || text == OWNER {
                continue;
            }
            let kind = entry.file_type()?;
            if kind.is_dir() {
                // The trainer writes none: whatever this is, the caller's copy takes it.
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    format!("{} is a directory", entry.path().display()),
                ));
            }
            if !kind.is_file() {
                continue;
            }
            match std::fs::hard_link(entry.path(), staging.join(&name)) {
                Ok(()) => {
                    n.0 += 1;
                    n.1 += std::fs::metadata(staging.join(&name))?.len();
                }
                // A kept checkpoint rotated away since the listing: the others stand.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }
    if staging.exists() {
        std::fs::remove_dir_all(staging)?;
    }
    if !has_snapshot(parent) {
        return Ok(None);
    }
    let linked = link_all(parent, staging);
    // The step of the links themselves, not of the parent's names, which may be newer now.
    match linked.map(|n| (resume_step(staging), n)) {
        Ok((Some(step), (files, bytes))) => Ok(Some((step, files, bytes))),
        Ok((None, _)) => {
            std::fs::remove_dir_all(staging)?;
            Ok(None)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(staging);
            Err(e)
        }
    }
}

/// An I/O error of [`seed_from`] that says what it was doing where (`emptying
/// /c/trial-00002: Not a directory (os error 20)`), of the same kind.
fn at<'a>(doing: &'a str, path: &'a Path) -> impl Fn(std::io::Error) -> std::io::Error + 'a {
    move |e| std::io::Error::new(e.kind(), format!("{doing} {}: {e}", path.display()))
}

/// Removes a trial's checkpoints when it ended (the trainer removes its snapshots itself
/// after a finished or failed trial, not the [`OWNER`] file), keeping the best and its owner
/// with [`Keep::Best`]. The directory goes too when nothing else is left in it.
pub fn clean(dir: &Path, keep: Keep) -> std::io::Result<()> {
    // As the trainer does: with no judged best, the latest stands for it.
    let (latest, best) = (dir.join(LATEST), dir.join(BEST));
    if keep == Keep::Best && !best.exists() && latest.exists() {
        std::fs::rename(&latest, &best)?;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if keep == Keep::Best && name == BEST {
            continue;
        }
        // Only what the trainer writes: its snapshots and their temporary files.
        let n = name.to_string_lossy();
        if n.ends_with(".snap") || n.contains(".snap.") || (keep == Keep::None && n == OWNER) {
            std::fs::remove_file(entry.path())?;
        }
    }
    // Not empty (the best, or someone else's files): it stays.
    let _ = std::fs::remove_dir(dir);
    Ok(())
}

/// The bytes of the files under `dir` (0 when it does not exist); a symbolic link counts as
/// itself, never as what it points at.
pub fn disk_use(dir: &Path) -> std::io::Result<u64> {
    // A file with several names (the latest and its `keep_last` link, the best) counts once.
    fn walk(path: &Path, seen: &mut std::collections::HashSet<(u64, u64)>) -> std::io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        if !meta.is_dir() {
            let first = meta.nlink() < 2 || seen.insert((meta.dev(), meta.ino()));
            return Ok(if first { meta.len() } else { 0 });
        }
        let mut total = 0;
        for entry in std::fs::read_dir(path)? {
            total += walk(&entry?.path(), seen)?;
        }
        Ok(total)
    }
    walk(dir, &mut std::collections::HashSet::new())
}

/// The checkpoint settings of a study, read from its study file's text as stored with the
/// study (`path`: where the file was, for a relative `checkpoint_dir`): a builtin study's, or
/// a command study's `checkpoint_dir` (the rest at their defaults); `None` for a command study
/// without one, a study file that does not parse, or settings that are refused.
pub fn of_study_file(text: &str, path: Option<&Path>) -> Option<CheckpointSpec> {
    let doc: toml::Table = toml::from_str(text).ok()?;
    let trial = doc.get("trial")?.as_table()?;
    let dir = path
        .and_then(Path::parent)
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match trial.get("kind")?.as_str()? {
        "builtin" => CheckpointSpec::parse(trial, dir).ok(),
        "command" => {
            let mut spec = CheckpointSpec::default();
            match parse_location(trial.get("checkpoint_dir")?.as_str()?, dir).ok()? {
                Location::Dir(d) => spec.dir = Some(d),
                Location::Store(u) => spec.store = Some(u),
            }
            Some(spec)
        }
        _ => None,
    }
}

/// What says whose checkpoints a directory (its [`OWNER`] file) or an object-store copy (its
/// owner object) holds: the study, the trial's first attempt, the seed and the params, as
/// JSON. Every attempt at the same params writes the same text.
pub fn owner(study: &str, first: u64, seed: u64, params: &crate::space::Params) -> String {
    serde_json::json!({
        "study": study,
        "trial": first,
        "seed": seed,
        "params": params,
    })
    .to_string()
}

/// A byte count for people: `0 B`, `512 B`, `1.5 KiB`, `12.0 MiB`, `3.2 GiB`.
pub fn fmt_bytes(n: u64) -> String {
    const UNITS: &[&str] = &["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A file shaped as the trainer's snapshot at `step` (its tensors stand-in bytes), written
/// as the trainer writes one: a temporary renamed over the name.
#[cfg(test)]
pub(crate) fn test_snapshot(path: &Path, step: u64) {
    let header = serde_json::json!({ "format": 1, "step": step }).to_string();
    let mut bytes = SNAPSHOT_MARK.to_vec();
    bytes.extend_from_slice(&(header.len() as u64).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(b"tensors");
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_seeded_with_its_parents_checkpoints_and_made_its_own() {
        let t = tempfile::tempdir().expect("temp dir");
        let (parent, child) = (t.path().join("p"), t.path().join("c"));
        std::fs::create_dir_all(parent.join("sub")).expect("mkdir");
        std::fs::write(parent.join(OWNER), "parent").expect("write");
        std::fs::write(parent.join("latest.pt"), b"12345").expect("write");
        std::fs::hard_link(parent.join("latest.pt"), parent.join("step-4.pt")).expect("link");
        std::fs::write(parent.join("sub/opt.pt"), b"678").expect("write");
        std::fs::write(parent.join(".latest.pt.tmp"), b"half").expect("write");
        std::fs::write(parent.join("state.json.tmp"), b"half").expect("write");
        std::fs::write(parent.join(BEST), b"the parent's").expect("write");
        // A stale child directory (a trial number reused after `tune delete`).
        std::fs::create_dir_all(&child).expect("mkdir");
        std::fs::write(child.join("stale.pt"), b"old").expect("write");
        assert_eq!(seed_from(&parent, &child, "child").expect("seeded"), (2, 8));
        {
            use std::os::unix::fs::MetadataExt;
            let (a, b) = (
                std::fs::metadata(child.join("latest.pt")).expect("latest"),
                std::fs::metadata(child.join("step-4.pt")).expect("its link"),
            );
            assert_eq!(a.ino(), b.ino(), "linked as in the parent, copied once");
        }
        assert_eq!(
            std::fs::read(child.join("latest.pt")).expect("read"),
            b"12345"
        );
        assert_eq!(
            std::fs::read(child.join("sub/opt.pt")).expect("read"),
            b"678"
        );
        assert!(!child.join(".latest.pt.tmp").exists(), "no temporary");
        assert!(!child.join("state.json.tmp").exists(), "no temporary");
        assert!(!child.join(BEST).exists(), "the parent's best is its own");
        assert!(!child.join("stale.pt").exists(), "nothing stale");
        assert_eq!(
            std::fs::read_to_string(child.join(OWNER)).expect("owner"),
            "child"
        );
        // The child resumes from it as from its own.
        assert!(!claim(&child, "child").expect("claim") || has_snapshot(&child));
        // A parent without checkpoints gives an empty child, its own.
        let none = seed_from(&t.path().join("missing"), &child, "child").expect("seeded");
        assert_eq!(none, (0, 0));
        assert!(!child.join("latest.pt").exists());
        assert!(child.join(OWNER).exists());
    }

    use super::test_snapshot as snap;

    #[test]
    fn the_resume_step_is_that_of_the_snapshot_the_trainer_loads_first() {
        let t = tempfile::tempdir().expect("temp dir");
        let d = t.path();
        assert_eq!(resume_step(d), None);
        snap(&d.join(BEST), 4);
        assert_eq!(resume_step(d), Some(4), "the best alone");
        snap(&d.join("step-000000000006.snap"), 6);
        snap(&d.join("step-000000000008.snap"), 8);
        assert_eq!(resume_step(d), Some(8), "the newest kept before the best");
        std::fs::write(d.join(LATEST), b"TUNESNAP damaged").expect("write");
        assert_eq!(
            resume_step(d),
            Some(8),
            "an unreadable latest is passed over"
        );
        snap(&d.join(LATEST), 9);
        assert_eq!(resume_step(d), Some(9));
        assert_eq!(snapshot_step(&d.join(OWNER)), None, "not a snapshot");
    }

    /// The parent goes on after its child was queued: it saves newer checkpoints, then removes
    /// them all when it ends. What was frozen for the child stays the checkpoint whose step
    /// the child's record names.
    #[test]
    fn a_frozen_parent_checkpoint_keeps_its_step_while_the_parent_saves_on_and_ends() {
        let t = tempfile::tempdir().expect("temp dir");
        let (parent, staging) = (t.path().join("p"), t.path().join("runs/.pbt/s"));
        std::fs::create_dir_all(&parent).expect("mkdir");
        assert_eq!(freeze(&parent, &staging).expect("freeze"), None);
        assert!(!staging.exists());
        std::fs::write(parent.join(OWNER), "parent").expect("write");
        std::fs::write(parent.join(".latest.snap.tmp.1"), b"half").expect("write");
        snap(&parent.join(LATEST), 300);
        std::fs::hard_link(parent.join(LATEST), parent.join(BEST)).expect("link");
        let (step, files, bytes) = freeze(&parent, &staging)
            .expect("freeze")
            .expect("a snapshot");
        assert_eq!((step, files), (300, 2));
        assert_eq!(
            bytes,
            2 * std::fs::metadata(parent.join(LATEST)).expect("len").len()
        );
        assert!(!staging.join(OWNER).exists() && !staging.join(".latest.snap.tmp.1").exists());
        // The parent saves at step 400, then ends and removes its snapshots.
        snap(&parent.join(LATEST), 400);
        assert_eq!(resume_step(&parent), Some(400));
        clean(&parent, Keep::None).expect("clean");
        assert_eq!(resume_step(&staging), Some(300), "the frozen state");
        // The child's copy of it is its own (the parent's best stays the parent's).
        let child = t.path().join("c");
        assert_eq!(seed_from(&staging, &child, "child").expect("seeded").0, 1);
        assert!(!child.join(BEST).exists());
        assert_eq!(resume_step(&child), Some(300));
        // Freezing again empties what was there first.
        std::fs::create_dir_all(&parent).expect("mkdir");
        snap(&parent.join(LATEST), 500);
        assert_eq!(
            freeze(&parent, &staging).expect("freeze").map(|f| f.0),
            Some(500)
        );
        assert!(!staging.join(BEST).exists());
    }

    #[test]
    fn a_seed_that_cannot_be_written_names_the_childs_path_and_what_failed_there() {
        let t = tempfile::tempdir().expect("temp dir");
        let parent = t.path().join("p");
        std::fs::create_dir_all(&parent).expect("mkdir");
        std::fs::write(parent.join("state.json"), b"{}").expect("write");
        // The child's directory made a regular file: it cannot be emptied.
        let file = t.path().join("c");
        std::fs::write(&file, "a file").expect("write");
        let e = seed_from(&parent, &file, "child").expect_err("a file is no directory");
        assert!(
            e.to_string()
                .starts_with(&format!("emptying {}: Not a directory", file.display())),
            "{e}"
        );
        // A directory under a regular file: it cannot be created.
        let under = file.join("trial-00002");
        let e = seed_from(&parent, &under, "child").expect_err("under a file");
        assert!(
            e.to_string()
                .starts_with(&format!("creating {}: Not a directory", under.display())),
            "{e}"
        );
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::NotADirectory,
            "the kind is kept"
        );
        assert_eq!(
            std::fs::read(parent.join("state.json")).expect("the parent's"),
            b"{}",
            "the parent is untouched"
        );
    }

    fn parse(src: &str) -> Result<CheckpointSpec, CheckpointError> {
        let t: toml::Table = toml::from_str(src).expect("toml");
        CheckpointSpec::parse(&t, Path::new("/studies/a"))
    }

    #[test]
    fn the_default_is_on_inside_the_trial_run_directory_keeping_nothing() {
        let s = parse("").expect("parses");
        assert_eq!(s, CheckpointSpec::default());
        assert!(s.enabled);
        assert_eq!(
            s.trial_dir("mnist", 3, Path::new("/runs/trial-00003.2")),
            Path::new("/runs/trial-00003.2/checkpoints")
        );
    }

    #[test]
    fn a_checkpoint_dir_gives_each_trial_a_directory_stable_across_attempts() {
        let s = parse(
            "checkpoint_dir = \"ckpt\"\ncheckpoint_every = \"10m\"\nkeep_checkpoints = \"best\"",
        )
        .expect("parses");
        assert_eq!(s.every, Some(Duration::from_secs(600)));
        assert_eq!(s.keep, Keep::Best);
        let a = s.trial_dir("my/study", 7, Path::new("/runs/trial-00007"));
        let b = s.trial_dir("my/study", 7, Path::new("/runs/trial-00007.2"));
        assert_eq!(a, b);
        assert_eq!(a, Path::new("/studies/a/ckpt/my_study/trial-00007"));
        let abs = parse("checkpoint_dir = \"/shared/c\"").expect("parses");
        assert_eq!(
            abs.trial_dir("..", 1, Path::new("/x")),
            Path::new("/shared/c/_../trial-00001")
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        for (src, want) in [
            (
                "checkpoint_dir = \"s3:///ckpt\"",
                "trial.checkpoint_dir: \"s3:///ckpt\" names no bucket",
            ),
            (
                "checkpoint_dir = \"ftp://h/x\"",
                "trial.checkpoint_dir: \"ftp://h/x\" is a URL of unknown scheme \"ftp\"",
            ),
            (
                "checkpoint_dir = \"\"",
                "trial.checkpoint_dir: must be a directory path",
            ),
            (
                "checkpoint_dir = 3",
                "trial.checkpoint_dir: must be a directory path (a string), not 3",
            ),
            ("checkpoint_every = \"soon\"", "trial.checkpoint_every"),
            (
                "checkpoint_every = 5",
                "trial.checkpoint_every: must be a duration string",
            ),
            (
                "keep_checkpoints = \"last\"",
                "trial.keep_checkpoints: must be \"none\" or \"best\", not \"last\"",
            ),
            (
                "checkpoints = \"no\"",
                "trial.checkpoints: must be true or false",
            ),
            (
                "checkpoints = false\nkeep_checkpoints = \"best\"",
                "trial.keep_checkpoints: set, but `checkpoints = false` turns checkpoints off",
            ),
        ] {
            let e = parse(src).expect_err(src).to_string();
            assert!(e.starts_with(want), "{src}: {e}");
        }
        assert!(!parse("checkpoints = false").expect("parses").enabled);
    }

    #[test]
    fn an_object_store_url_keeps_the_staging_directory_in_the_default_place() {
        let s = parse("checkpoint_dir = \"s3://bucket/ckpt/\"").expect("parses");
        assert_eq!(s.dir, None);
        assert_eq!(
            s.store.as_ref().map(StoreUrl::as_str),
            Some("s3://bucket/ckpt")
        );
        assert_eq!(
            s.trial_dir("mnist", 3, Path::new("/runs/trial-00003")),
            Path::new("/runs/trial-00003/checkpoints")
        );
        let text = "[trial]\nkind = \"command\"\ncheckpoint_dir = \"gs://b/p\"\n";
        let c = of_study_file(text, None).expect("a command study's checkpoint_dir");
        assert_eq!(c.store.as_ref().map(StoreUrl::as_str), Some("gs://b/p"));
    }

    #[test]
    fn clean_removes_the_snapshots_and_keeps_the_best_when_asked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let c = dir.path().join("checkpoints");
        std::fs::create_dir(&c).expect("mkdir");
        for f in [LATEST, BEST, ".latest.snap.tmp.123"] {
            std::fs::write(c.join(f), b"0123456789").expect("write");
        }
        assert!(has_snapshot(&c));
        assert_eq!(disk_use(dir.path()).expect("size"), 30);
        // A kept checkpoint (`keep_last`) linked to the latest costs nothing more, and counts
        // as a checkpoint to resume from by itself.
        std::fs::hard_link(c.join(LATEST), c.join("step-000000000007.snap")).expect("link");
        assert_eq!(disk_use(dir.path()).expect("size"), 30);
        std::fs::remove_file(c.join(LATEST)).expect("rm");
        std::fs::remove_file(c.join(BEST)).expect("rm");
        assert!(has_snapshot(&c), "a kept step-N.snap alone");
        std::fs::hard_link(c.join("step-000000000007.snap"), c.join(LATEST)).expect("link");
        std::fs::write(c.join(BEST), b"0123456789").expect("write");
        clean(&c, Keep::Best).expect("clean");
        assert!(
            !c.join("step-000000000007.snap").exists(),
            "kept ones go at the end"
        );
        assert!(c.join(BEST).is_file());
        assert!(!c.join(LATEST).exists() && !c.join(".latest.snap.tmp.123").exists());
        std::fs::write(c.join(LATEST), b"01").expect("write");
        std::fs::remove_file(c.join(BEST)).expect("rm");
        clean(&c, Keep::Best).expect("clean");
        assert_eq!(
            std::fs::read(c.join(BEST)).expect("the latest became the best"),
            b"01"
        );
        clean(&c, Keep::None).expect("clean");
        assert!(!c.exists(), "an empty checkpoint directory goes too");
        assert!(!has_snapshot(&c));
        assert_eq!(disk_use(&c).expect("size"), 0);
        clean(&c, Keep::None).expect("cleaning what is gone is fine");
    }

    #[test]
    fn a_stored_builtin_study_file_gives_its_settings_and_sizes_read_for_people() {
        let text = "[study]\nname = \"s\"\n[trial]\nkind = \"builtin\"\ncheckpoint_dir = \"ck\"\n";
        let s = of_study_file(text, Some(Path::new("/st/s.toml"))).expect("builtin");
        assert_eq!(s.dir.as_deref(), Some(Path::new("/st/ck")));
        assert!(of_study_file("[trial]\nkind = \"command\"\n", None).is_none());
        assert!(of_study_file("not toml [", None).is_none());
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(1536), "1.5 KiB");
        assert_eq!(fmt_bytes(12 * 1024 * 1024), "12.0 MiB");
        assert_eq!(fmt_bytes(u64::MAX), "16777216.0 TiB");
    }

    #[test]
    fn only_the_same_trial_resumes_from_a_directory_others_find_it_emptied() {
        let dir = tempfile::tempdir().expect("temp dir");
        let c = dir.path().join("st/trial-00001");
        let (a, b) = (r#"{"lr":0.1}"#, r#"{"lr":0.2}"#);
        assert!(!claim(&c, a).expect("claims"), "nothing to resume yet");
        std::fs::write(c.join(LATEST), b"x").expect("write");
        assert!(claim(&c, a).expect("claims"), "the same trial resumes");
        assert!(!claim(&c, b).expect("claims"), "another trial does not");
        assert!(!c.join(LATEST).exists(), "and the stale checkpoint is gone");
        assert_eq!(std::fs::read_to_string(c.join(OWNER)).expect("owner"), b);
        std::fs::write(c.join(LATEST), b"x").expect("write");
        clean(&c, Keep::None).expect("clean");
        assert!(!c.exists(), "the owner file goes with the last checkpoint");
    }
}
