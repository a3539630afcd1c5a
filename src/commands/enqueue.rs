//! `tune enqueue STUDY.toml --params JSON`: queue a trial with fixed params.

use std::process::ExitCode;

use super::{bad, load_study};
use crate::cli::EnqueueArgs;
use crate::space::{ParamValue, Params};
use crate::storage::{NewStudy, StorageUrl};

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
        .create_or_load_study(&NewStudy {
            name: &study.name,
            direction: study.direction,
            metric: &study.metric,
            others: &study.others,
            file: Some(&study.file),
            source: Some(&study.source),
        })
        .map_err(|e| super::storage_error(&study.file, e))?;
    let n = storage.enqueue(&row, &study.space, &params)?;
    println!("queued trial {n} in study `{}`", study.name);
    Ok(ExitCode::SUCCESS)
}
