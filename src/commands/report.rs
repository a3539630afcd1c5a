//! `tune report`: one self-contained HTML page of a study (`crate::insight::report`).

use std::process::ExitCode;

use super::plot::{check_output, load_view, plot_error, write_output};
use super::storage_fault;
use crate::cli::ReportArgs;
use crate::insight::report::{self, ReportContext};
use crate::storage::StorageUrl;

pub fn report(args: &ReportArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    check_output(&args.output, &["html", "htm"])?;
    let (view, storage, study) = load_view(&args.study, db, args.objective.as_deref())?;
    let stored = storage.study_file(&study).map_err(storage_fault)?;
    let path = stored.path.clone();
    let generated = chrono::Utc::now()
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string();
    let location = storage.location();
    let ctx = ReportContext {
        study_file: stored.text.as_deref(),
        study_path: path.as_deref(),
        location: &location,
        generated: &generated,
    };
    let page = report::html(&view, &ctx).map_err(plot_error)?;
    write_output(&args.output, page.as_bytes())?;
    println!(
        "wrote the report of study `{}` ({} trials) to {}",
        view.name,
        view.trials.len(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}
