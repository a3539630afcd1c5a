//! `tune discard N… [STUDY.toml]`: set finished trials aside (a broken set-up's failures, a run
//! on the wrong data) without deleting them. A discarded trial stays stored and shown (`tune
//! trials` marks it), but the sampler does not learn from it, the budget does not count it
//! and it is never the best; `--restore` takes the mark back. Optuna has no way to do this.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{bad, storage_fault, writable_study};
use crate::cli::{DiscardArgs, FinishedState, StudyRef};
use crate::storage::StorageUrl;
use crate::trial::{Trial, TrialState, TrialStatus};

/// One argument: a trial number, a range `A-B` (both included), or else the study file.
#[derive(Debug, PartialEq)]
enum Arg {
    Numbers(std::ops::RangeInclusive<u64>),
    File(PathBuf),
}

/// An argument that is none of [`Arg`].
#[derive(Debug, PartialEq, thiserror::Error)]
enum ArgError {
    #[error("`{0}`: a range goes from the lower number to the higher")]
    BackwardsRange(String),
    #[error("{0}: no such study file")]
    NoStudyFile(String),
    #[error("`{0}` is neither a trial number, a range such as 3-7, nor a study file")]
    Neither(String),
}

fn parse_arg(a: &str) -> Result<Arg, ArgError> {
    if Path::new(a).exists() {
        return Ok(Arg::File(PathBuf::from(a)));
    }
    if let Ok(n) = a.parse::<u64>() {
        return Ok(Arg::Numbers(n..=n));
    }
    if let Some((x, y)) = a.split_once('-')
        && let (Ok(x), Ok(y)) = (x.trim().parse::<u64>(), y.trim().parse::<u64>())
    {
        if x > y {
            return Err(ArgError::BackwardsRange(a.to_string()));
        }
        return Ok(Arg::Numbers(x..=y));
    }
    if a.ends_with(".toml") {
        return Err(ArgError::NoStudyFile(a.to_string()));
    }
    Err(ArgError::Neither(a.to_string()))
}

pub fn discard(args: &DiscardArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    // Ranges are kept as ranges: `0-99999999999` must not become a set of 10^11 numbers.
    let mut ranges = Vec::new();
    let mut file = None;
    for a in &args.args {
        match parse_arg(a).map_err(|e| bad(format!("tune discard: {e}")))? {
            Arg::Numbers(r) => ranges.push(r),
            Arg::File(f) if file.is_none() => file = Some(f),
            Arg::File(f) => {
                return Err(bad(format!(
                    "tune discard: two study files ({} and {}); give one",
                    file.unwrap_or_default().display(),
                    f.display()
                )));
            }
        }
    }
    if ranges.is_empty() && args.state.is_none() {
        return Err(bad(
            "tune discard: say which trials: numbers (`3 5`), a range (`0-11`) or --state failed",
        ));
    }
    let r = StudyRef {
        study_file: file,
        name: args.name.clone(),
    };
    let (mut storage, study, url) = writable_study(&r, db)?;
    let trials = storage.trials(&study, None).map_err(storage_fault)?;
    let by_number: BTreeMap<u64, &Trial> = trials.iter().map(|t| (t.number.0, t)).collect();
    // Every trial named must exist and have finished: nothing is changed otherwise. Each
    // range is walked over the trials inside it, so the work is bounded by the trials.
    let mut wanted = BTreeSet::new();
    for r in &ranges {
        let mut next = Some(*r.start());
        for (&n, t) in by_number.range(r.clone()) {
            if next != Some(n) {
                break;
            }
            if matches!(t.status, TrialStatus::Queued | TrialStatus::Running { .. }) {
                return Err(bad(format!(
                    "tune discard: trial {n} of `{}` is {}: only finished trials can be set aside; nothing changed",
                    study.name,
                    t.state().as_str()
                )));
            }
            wanted.insert(n);
            next = n.checked_add(1);
        }
        if let Some(n) = next.filter(|n| r.contains(n)) {
            return Err(bad(format!(
                "tune discard: study `{}` has no trial {n} (its trials are 0 to {}); nothing changed",
                study.name,
                trials.len().saturating_sub(1)
            )));
        }
    }
    if let Some(state) = args.state {
        let state = match state {
            FinishedState::Complete => TrialState::Complete,
            FinishedState::Pruned => TrialState::Pruned,
            FinishedState::Failed => TrialState::Failed,
        };
        wanted.extend(
            trials
                .iter()
                .filter(|t| t.state() == state && t.discarded == args.restore)
                .map(|t| t.number.0),
        );
    }
    let numbers: Vec<u64> = wanted.into_iter().collect();
    let changed = storage
        .set_discarded(&study, &numbers, !args.restore)
        .map_err(storage_fault)?;
    let counted = storage.counted(&study).map_err(storage_fault)?;
    let (verb, effect) = if args.restore {
        (
            "restored",
            "the sampler learns from them again and the budget counts them",
        )
    } else {
        (
            "discarded",
            "they stay stored and shown; the sampler leaves them out and the budget does not count them",
        )
    };
    let already = numbers.len() as u64 - changed;
    println!(
        "{verb} {changed} trial{} of study `{}` in {url}{}: {effect}; the budget now counts {counted} trial{}",
        if changed == 1 { "" } else { "s" },
        study.name,
        if already > 0 {
            format!(" ({already} already {verb})")
        } else {
            String::new()
        },
        if counted == 1 { "" } else { "s" },
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_numbers_ranges_or_a_study_file() {
        assert_eq!(parse_arg("7"), Ok(Arg::Numbers(7..=7)));
        assert_eq!(parse_arg("0-11"), Ok(Arg::Numbers(0..=11)));
        assert!(
            parse_arg("9-3")
                .unwrap_err()
                .to_string()
                .contains("lower number")
        );
        assert!(
            parse_arg("nope.toml")
                .unwrap_err()
                .to_string()
                .contains("no such study file")
        );
        assert!(
            parse_arg("x")
                .unwrap_err()
                .to_string()
                .contains("neither a trial number")
        );
    }
}
