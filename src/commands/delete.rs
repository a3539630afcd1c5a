//! `tune delete STUDY.toml` / `tune delete --study NAME`: delete a study whole from its
//! database, after asking (or with `--yes`), and the checkpoints tune keeps for its trials:
//! a builtin trial's snapshots (left by an interrupted or paused trial), in its run directory
//! or the study's `checkpoint_dir`, and every trial's copy in an object store, so that a
//! deleted study leaves no checkpoint filling a shared disk or a bucket. What
//! `keep_checkpoints = "best"` kept stays (it was asked for), and so do the trial directories
//! (the user's files) and a command trial's local checkpoint directory (its script's files):
//! the message says where they are.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use super::{bad, storage_fault, writable_study};
use crate::cli::DeleteArgs;
use crate::storage::StorageUrl;

pub fn delete(args: &DeleteArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let (mut storage, row, url) = writable_study(&args.study, db)?;
    let trials = storage.trials(&row, None).map_err(storage_fault)?;
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(bad(format!(
                "tune delete asks before deleting study `{}` ({} trials) from {url}; without a terminal to ask on, add --yes",
                row.name,
                trials.len()
            )));
        }
        eprint!(
            "Delete study `{}` and its {} trials from {url}? This cannot be undone. [y/N] ",
            row.name,
            trials.len()
        );
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            eprintln!("nothing deleted");
            return Ok(ExitCode::SUCCESS);
        }
    }
    // Where the trials' checkpoints are, read before the study (its stored file) is gone.
    let checkpoints = Checkpoints::of(storage.as_ref(), &row, &trials);
    let n = storage.delete_study(&row).map_err(storage_fault)?;
    let dirs: std::collections::BTreeSet<_> = trials
        .iter()
        .filter_map(|t| t.trial_dir.as_ref().and_then(|d| d.parent()))
        .collect();
    println!("deleted study `{}` ({n} trials) from {url}", row.name);
    if let Some(c) = checkpoints {
        for line in c.remove(&row.name) {
            println!("{line}");
        }
    }
    for d in dirs {
        println!("its trial directories are left in {}", d.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The checkpoints of a study's trials: one directory (or object-store copy) per first
/// attempt, as `tune show` finds them.
struct Checkpoints {
    spec: crate::checkpoint::CheckpointSpec,
    builtin: bool,
    /// Each first attempt's number and checkpoint (staging) directory.
    trials: Vec<(u64, std::path::PathBuf)>,
}

impl Checkpoints {
    fn of(
        storage: &dyn crate::storage::Storage,
        study: &crate::storage::StudyRow,
        trials: &[crate::trial::Trial],
    ) -> Option<Checkpoints> {
        let stored = storage.study_file(study).ok()?;
        let text = stored.text.as_deref()?;
        let spec = crate::checkpoint::of_study_file(text, stored.path.as_deref().map(Path::new))?;
        let builtin = toml::from_str::<toml::Table>(text).ok().is_some_and(|d| {
            d.get("trial")
                .and_then(|t| t.get("kind"))
                .and_then(|k| k.as_str())
                == Some("builtin")
        });
        let mut firsts = Vec::new();
        for t in trials {
            // Every attempt at the same params shares its first attempt's directory.
            if storage.retry_of(study, t.number).ok()?.is_some() {
                continue;
            }
            if let Some(run_dir) = &t.trial_dir {
                firsts.push((t.number.0, spec.trial_dir(&study.name, t.number.0, run_dir)));
            }
        }
        Some(Checkpoints {
            spec,
            builtin,
            trials: firsts,
        })
    }

    /// Removes what tune keeps; returns what to tell the user.
    fn remove(&self, study: &str) -> Vec<String> {
        let keep = self.spec.keep;
        let mut out = Vec::new();
        if let Some(url) = &self.spec.store {
            let done = crate::checkpoint::remote::Store::open(url).and_then(|store| {
                crate::checkpoint::remote::block_on(async {
                    let (mut objects, mut bytes) = (0, 0);
                    for (first, dir) in &self.trials {
                        let copy = store.trial(study, *first);
                        let (n, b) = copy.usage().await?;
                        copy.clean(dir, keep, &mut Default::default()).await?;
                        let (left, left_b) = copy.usage().await?;
                        objects += n - left;
                        bytes += b - left_b;
                    }
                    Ok::<_, crate::checkpoint::remote::RemoteError>((objects, bytes))
                })
            });
            out.push(match done {
                Ok((0, _)) => format!("no checkpoint of it was left at {}", url.as_str()),
                Ok((n, bytes)) => format!(
                    "removed its checkpoints at {}: {n} object(s), {}",
                    url.as_str(),
                    crate::checkpoint::fmt_bytes(bytes)
                ),
                Err(e) => format!(
                    "its checkpoints at {} could not be removed ({e}); remove them by hand",
                    url.as_str()
                ),
            });
        }
        if !self.builtin {
            // A command trial's local checkpoint directory (with a store: its staging
            // directory) holds its script's files.
            let left: Vec<&std::path::PathBuf> = self
                .trials
                .iter()
                .map(|(_, d)| d)
                .filter(|d| d.exists())
                .collect();
            if let Some(d) = left.first().and_then(|d| d.parent()) {
                out.push(format!(
                    "its command trials' checkpoint directories (their scripts' files) are left, {} of them, e.g. under {}",
                    left.len(),
                    d.display()
                ));
            }
            return out;
        }
        let (mut freed, mut failed) = (0u64, Vec::new());
        for (_, dir) in &self.trials {
            let before = crate::checkpoint::disk_use(dir).unwrap_or(0);
            match crate::checkpoint::clean(dir, keep) {
                Ok(()) => {
                    freed += before - crate::checkpoint::disk_use(dir).unwrap_or(0).min(before)
                }
                Err(e) => failed.push(format!("{}: {e}", dir.display())),
            }
        }
        if freed > 0 {
            out.push(format!(
                "removed {} of its trials' checkpoints{}",
                crate::checkpoint::fmt_bytes(freed),
                if keep == crate::checkpoint::Keep::Best {
                    " (each trial's best.snap stays: keep_checkpoints = \"best\")"
                } else {
                    ""
                }
            ));
        }
        for f in failed {
            out.push(format!("could not remove checkpoints in {f}"));
        }
        out
    }
}
