//! `tune worker --db URL --study NAME`: join a study from any machine. The study's definition
//! (space, sampler, pruner, trial command or builtin config) comes from the database, where the
//! first `tune run STUDY.toml --db URL` stored it, so a worker machine needs only the binary,
//! the user's code and data. The slots' devices are this machine's own.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::{bad, storage_fault};
use crate::cli::WorkerArgs;
use crate::spec::{self, Overrides};
use crate::storage::{Storage, StorageUrl, StudyRow};

/// How often a worker looks for a study that does not exist yet.
const LOOK_EVERY: Duration = Duration::from_secs(2);

pub fn worker(args: &WorkerArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let url = db.ok_or_else(|| {
        bad("tune worker needs the database that holds the study: --db URL (or TUNE_DB)")
    })?;
    let wait = crate::limits::duration("--wait", &args.wait).map_err(|e| bad(e.to_string()))?;
    let storage = crate::storage::open(url).map_err(storage_fault)?;
    let row = wait_for_study(storage.as_ref(), &args.study, url, wait)?;
    let stored = storage.study_file(&row).map_err(storage_fault)?;
    let Some(text) = stored.text else {
        return Err(bad(format!(
            "{url}: study `{}` has no stored study file (it was not created by `tune run`), so a worker cannot know how to run its trials",
            args.study
        )));
    };
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let name = stored
        .path
        .as_deref()
        .and_then(|p| Path::new(p).file_name().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("study.toml"));
    let file = dir.join(name);
    if let Some(list) = args.devices.as_deref() {
        check_listed_devices(list, crate::devices::cuda_device_count())
            .map_err(|e| bad(e.to_string()))?;
    }
    let text = with_workers(&text, args.count, args.devices.as_deref())
        .map_err(|e| bad(format!("{}: {e}", file.display())))?;
    let mut study = spec::parse(
        &file,
        &text,
        &Overrides {
            db: Some(url.clone()),
        },
    )
    .map_err(|e| {
        bad(stored_study_refusal(
            &e,
            url,
            &row.name,
            args.count,
            args.devices.as_deref(),
        ))
    })?;
    if study.name != row.name {
        return Err(bad(format!(
            "{url}: the study file stored with `{}` names study `{}`",
            row.name, study.name
        )));
    }
    // This machine's devices are checked here, before any trial is claimed.
    if matches!(study.trial, crate::study::TrialSpec::Builtin(_)) {
        super::run::worker_exe()?;
    }
    // A refusal names what to change: the flag, or the stored file (not a path on this machine).
    let (whence, from) = match args.devices {
        Some(_) => (String::new(), crate::devices::DevicesFrom::Flag),
        None => (
            format!("the study file stored in {url} with `{}`: ", row.name),
            crate::devices::DevicesFrom::StudyFile,
        ),
    };
    super::run::check_devices(&mut study, &whence, from)?;
    super::run::check_command(&study, &whence)?;
    super::run::check_checkpoint_dir(&study, &whence)?;
    super::run::check_checkpoint_store(&study, &whence)?;
    if let Some(r) = &args.runs_dir {
        study.runs_dir = std::env::current_dir()?.join(r);
    }
    crate::say!(
        "tune worker: joining study `{}` in {url} with {} slot(s) on {}",
        study.name,
        study.slots.len(),
        study.slots.join(", ")
    );
    let ui = !args.no_tui && crate::tui::stdout_is_terminal();
    let file = study.file.display().to_string();
    let ways = super::run::WaysOut {
        study_arg: format!("--study {} --db {url}", study.name),
        raise: format!(
            "in the study file ({file}) and store it with `tune run {file} --db {url}`; workers read it from there"
        ),
    };
    super::run::run_study(study, storage, ui, &ways)
}

/// The study, once it exists: a worker may be started before `tune run` creates it.
fn wait_for_study(
    storage: &dyn Storage,
    name: &str,
    url: &StorageUrl,
    wait: Duration,
) -> anyhow::Result<StudyRow> {
    let deadline = Instant::now() + wait;
    let mut told = false;
    loop {
        if let Some(row) = storage.find_study(name).map_err(storage_fault)? {
            return Ok(row);
        }
        if Instant::now() >= deadline {
            return Err(bad(format!(
                "{url}: no study named `{name}` (waited {}); create it with `tune run STUDY.toml --db URL`",
                humantime::format_duration(wait)
            )));
        }
        if !told {
            crate::say!(
                "tune worker: waiting for study `{name}` to appear in {url} (up to {})",
                humantime::format_duration(wait)
            );
            told = true;
        }
        std::thread::sleep(LOOK_EVERY.min(deadline.saturating_duration_since(Instant::now())));
    }
}

/// Refuses a `--devices` list that names GPUs this machine does not have (`visible` of them),
/// before the stored study groups the list by its `gpus_per_trial`: the missing GPUs are the
/// mistake to name, with the flag, not how many groups the list makes (three GPUs listed on a
/// machine with one would otherwise be told, of a key it never wrote, that cuda:2 sits unused).
fn check_listed_devices(list: &str, visible: usize) -> Result<(), crate::devices::DevicesError> {
    if list.trim() == "auto" {
        return Ok(());
    }
    // One slot string for the whole list: `check_slots` reads every `cuda:N` in it.
    crate::devices::check_slots(
        &[list.to_string()],
        visible,
        crate::devices::DevicesFrom::Flag,
    )
}

/// The refusal of the stored study as this machine reads it. A mistake in `[workers]` when
/// `--count` or `--devices` replaced the stored ones is the flags': the message names them
/// (the study's own text says `workers.devices`, which the user of this machine never wrote),
/// without the study file's path, which is no file on this machine.
fn stored_study_refusal(
    e: &spec::SpecError,
    url: &StorageUrl,
    study: &str,
    count: Option<u64>,
    devices: Option<&str>,
) -> String {
    let in_workers = e.key.as_deref().is_some_and(|k| k.starts_with("workers."));
    let flags: Vec<String> = count
        .map(|n| format!("--count {n}"))
        .into_iter()
        .chain(devices.map(|d| format!("--devices {d}")))
        .collect();
    if !in_workers || flags.is_empty() {
        return format!("the study stored in {url}: {e}");
    }
    format!(
        "{} (this machine's `[workers]` for study `{study}` stored in {url}): {}",
        flags.join(" "),
        e.message
    )
}

/// Why the stored study file could not take this machine's `[workers]`.
#[derive(Debug, thiserror::Error)]
enum WorkersEditError {
    #[error("the stored study file does not parse: {0}")]
    NotToml(#[from] toml::de::Error),
    #[error("`workers` is not a table")]
    WorkersNotATable,
    #[error("--count {0} is too large")]
    CountTooLarge(u64),
    #[error("{0}")]
    Write(#[from] toml::ser::Error),
}

/// The stored study file with this machine's `[workers]`: `count` and `devices` from the
/// command line replace the file's, so the spec checks them like any study file's.
fn with_workers(
    text: &str,
    count: Option<u64>,
    devices: Option<&str>,
) -> Result<String, WorkersEditError> {
    if count.is_none() && devices.is_none() {
        return Ok(text.to_string());
    }
    let mut doc: toml::Table = toml::from_str(text)?;
    let workers = doc
        .entry("workers")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(workers) = workers.as_table_mut() else {
        return Err(WorkersEditError::WorkersNotATable);
    };
    // The command line's slots replace the file's whole: `--count` its count or its
    // slots_per_device, and a `--devices` list without `--count` one slot per device listed (a
    // stored count of 1 would otherwise leave the others idle), unless slots_per_device says how
    // many; `--devices auto` keeps the stored count.
    if let Some(n) = count {
        let n = i64::try_from(n).map_err(|_| WorkersEditError::CountTooLarge(n))?;
        workers.remove("slots_per_device");
        workers.insert("count".into(), toml::Value::Integer(n));
    } else if devices.is_some_and(|d| d.trim() != "auto") {
        workers.remove("count");
    }
    if let Some(d) = devices {
        let value = if d.trim() == "auto" {
            toml::Value::String("auto".into())
        } else {
            toml::Value::Array(
                d.split(',')
                    .map(|s| toml::Value::String(s.trim().to_string()))
                    .collect(),
            )
        };
        workers.insert("devices".into(), value);
    }
    Ok(toml::to_string(&doc)?)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::{check_listed_devices, stored_study_refusal, with_workers};
    use crate::spec::{SpecError, SpecErrorKind};
    use crate::storage::StorageUrl;

    #[test]
    fn a_devices_list_naming_gpus_the_machine_lacks_is_refused_naming_the_flag_before_any_grouping()
    {
        // Three GPUs listed on a machine with one: the missing two are named, not the way
        // three GPUs split into groups of two.
        let e = check_listed_devices("cuda:0,cuda:1,cuda:2", 1)
            .expect_err("cuda:1 and cuda:2 are not here")
            .to_string();
        assert!(
            e.starts_with("--devices: \"cuda:1\" (and cuda:2) is not on this machine"),
            "{e}"
        );
        assert!(!e.contains("workers.devices"), "{e}");
        assert!(check_listed_devices("cuda:0,cuda:1,cuda:2", 3).is_ok());
        assert!(check_listed_devices("auto", 0).is_ok());
        assert!(check_listed_devices("cpu", 0).is_ok());
    }

    fn workers_mistake() -> SpecError {
        SpecError {
            file: PathBuf::from("/here/study.toml"),
            key: Some("workers.gpus_per_trial".into()),
            kind: SpecErrorKind::Conflict,
            message: "key `workers.gpus_per_trial`: the 3 GPUs listed in `workers.devices` make 1 group(s) of 2 and would leave cuda:2 unused; list a multiple of 2 GPUs".into(),
        }
    }

    #[test]
    fn a_workers_mistake_of_the_flags_is_refused_naming_the_flags_not_the_stored_file() {
        let url = StorageUrl::Sqlite(PathBuf::from("t.db"));
        let msg = stored_study_refusal(
            &workers_mistake(),
            &url,
            "g",
            None,
            Some("cuda:0,cuda:1,cuda:2"),
        );
        assert_eq!(
            msg,
            "--devices cuda:0,cuda:1,cuda:2 (this machine's `[workers]` for study `g` stored in t.db): key `workers.gpus_per_trial`: the 3 GPUs listed in `workers.devices` make 1 group(s) of 2 and would leave cuda:2 unused; list a multiple of 2 GPUs"
        );
        let both = stored_study_refusal(&workers_mistake(), &url, "g", Some(3), Some("cpu"));
        assert!(
            both.starts_with("--count 3 --devices cpu (this machine's"),
            "{both}"
        );
        // Without the flags the stored `[workers]` is at fault, and so is any other key.
        let stored = stored_study_refusal(&workers_mistake(), &url, "g", None, None);
        assert!(
            stored.starts_with("the study stored in t.db: /here/study.toml: key"),
            "{stored}"
        );
        let mut space = workers_mistake();
        space.key = Some("space.x".into());
        let other = stored_study_refusal(&space, &url, "g", None, Some("cuda:0"));
        assert!(other.starts_with("the study stored in t.db:"), "{other}");
    }

    #[test]
    fn a_workers_count_and_devices_replace_the_stored_ones_and_keep_the_rest() {
        let text = "[study]\nname = \"s\"\n[workers]\ncount = 2\ndevices = [\"cpu\"]\n";
        let out = with_workers(text, Some(4), Some("cuda:0, cuda:1")).expect("edits");
        let doc: toml::Table = toml::from_str(&out).expect("parses");
        assert_eq!(doc["workers"]["count"].as_integer(), Some(4));
        let devs: Vec<&str> = doc["workers"]["devices"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(devs, ["cuda:0", "cuda:1"]);
        assert_eq!(doc["study"]["name"].as_str(), Some("s"));
        assert_eq!(with_workers(text, None, None).expect("same"), text);
        let auto = with_workers(text, None, Some("auto")).expect("auto");
        assert!(auto.contains("devices = \"auto\""), "{auto}");
        assert!(
            auto.contains("count = 2"),
            "--devices auto keeps the count: {auto}"
        );
    }

    #[test]
    fn a_devices_list_without_a_count_gets_one_slot_per_device_and_a_count_replaces_slots_per_device()
     {
        let one = "[workers]\ncount = 1\ndevices = [\"cpu\"]\n";
        let doc: toml::Table =
            toml::from_str(&with_workers(one, None, Some("cuda:0,cuda:1")).expect("edits"))
                .expect("parses");
        assert!(doc["workers"].get("count").is_none(), "{doc}");
        let per = "[workers]\nslots_per_device = 2\ndevices = [\"cpu\"]\n";
        let doc: toml::Table =
            toml::from_str(&with_workers(per, Some(3), None).expect("edits")).expect("parses");
        assert!(doc["workers"].get("slots_per_device").is_none(), "{doc}");
        assert_eq!(doc["workers"]["count"].as_integer(), Some(3));
        let doc: toml::Table =
            toml::from_str(&with_workers(per, None, Some("cuda:0,cuda:1")).expect("edits"))
                .expect("parses");
        assert_eq!(doc["workers"]["slots_per_device"].as_integer(), Some(2));
    }
}
