//! `tune enqueue STUDY.toml --params JSON`: queue a trial with fixed params.

use std::path::Path;
use std::process::ExitCode;

use super::{bad, load_study};
use crate::cli::EnqueueArgs;
use crate::space::{ParamValue, Params};
use crate::storage::StorageUrl;
use crate::trial::TrialState;

pub fn enqueue(args: &EnqueueArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let study = load_study(&args.study, db)?;
    let v: serde_json::Value = serde_json::from_str(&args.params)
        .map_err(|e| bad(format!("--params: not a JSON object: {e}")))?;
    let serde_json::Value::Object(map) = v else {
        return Err(bad(
            "--params: must be a JSON object such as '{\"lr\": 0.01}'",
        ));
    };
    let mut params = Params::new();
    for (k, v) in map {
        let pv = ParamValue::from_json(&v).ok_or_else(|| {
            bad(format!(
                "--params: `{k}` must be a string, number or boolean"
            ))
        })?;
        params.insert(k, pv);
    }
    let params = study.space.coerce(params);
    study
        .space
        .validate(&params)
        .map_err(|e| bad(format!("--params: {e}")))?;
    let mut storage =
        crate::storage::open(&study.storage).map_err(|e| super::storage_error(&study.file, e))?;
    let row = storage
        .create_or_load_study(&super::new_study(&study))
        .map_err(|e| match e {
            crate::storage::StorageError::Differs { .. } => {
                super::differs(&study.file, db, &e, None)
            }
            other => super::storage_error(&study.file, other),
        })?;
    let n = storage.enqueue(&row, &study.space, &params)?;
    println!("queued trial {n} in study `{}`", study.name);
    if let Some(budget) = study.trials {
        let counted = storage.counted(&row).map_err(super::storage_fault)?;
        let running = storage
            .count_state(&row, TrialState::Running)
            .map_err(super::storage_fault)?;
        let queued = storage
            .count_state(&row, TrialState::Queued)
            .map_err(super::storage_fault)?;
        if let Some(note) = beyond_budget(budget, counted, running, queued, &study.file) {
            eprintln!("tune: {note}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `tune enqueue` says when the queue holds more trials than the budget has room for
/// (queued trials run first, but only while the budget allows): how many will wait, and the
/// `trials` that runs them all.
fn beyond_budget(
    budget: u64,
    counted: u64,
    running: u64,
    queued: u64,
    file: &Path,
) -> Option<String> {
    let room = budget.saturating_sub(counted + running);
    if queued <= room {
        return None;
    }
    let taken = if running > 0 {
        format!("{counted} trials counted and {running} running")
    } else {
        format!("{counted} trials counted")
    };
    let left = if room == 0 {
        format!(
            "the budget (`trials = {budget}` in {}) is spent, with {taken}",
            file.display()
        )
    } else {
        format!(
            "the budget (`trials = {budget}` in {}) has room for {room} more, with {taken}",
            file.display()
        )
    };
    let waiting = queued - room;
    let which = match (queued, waiting) {
        (1, _) => "it will not run".to_string(),
        (q, w) if q == w => "none of them will run".to_string(),
        (_, w) => format!("{w} of them will not run"),
    };
    Some(format!(
        "{left}, and {queued} trial{} queued: {which} until you raise `trials` to {} (then `tune run {}`)",
        if queued == 1 { " is" } else { "s are" },
        budget + waiting,
        file.display()
    ))
}
