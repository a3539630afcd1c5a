//! `tune plot KIND`: one figure of a study (`crate::insight::plot`) into an SVG or PNG file.
//! Also what `tune report` shares with it: reading a study into a [`StudyView`], checking an
//! output path before anything is read, and writing the file whole or not at all.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;

use super::importance::study_space;
use super::{bad, open_study, storage_fault};
use crate::cli::{PlotArgs, PlotKind};
use crate::insight::plot::{self, Figure, PlotError, StudyView};
use crate::storage::{Storage, StorageUrl, StudyRow};
use crate::trial::{Objective, TrialNumber};

/// The file formats `tune plot` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

pub fn plot(args: &PlotArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let format = match check_output(&args.output, &["svg", "png"])?.as_str() {
        "png" => Format::Png,
        _ => Format::Svg,
    };
    let figure = figure(args)?;
    let (view, _, _) = load_view(&args.study, db, args.objective.as_deref())?;
    let size = (args.width, args.height);
    let bytes = match format {
        Format::Svg => plot::svg(&view, &figure, size).map(String::into_bytes),
        Format::Png => plot::png(&view, &figure, size),
    }
    .map_err(plot_error)?;
    write_output(&args.output, &bytes)?;
    println!(
        "wrote the {} of study `{}` to {}",
        kind_name(args.kind),
        view.name,
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn kind_name(k: PlotKind) -> &'static str {
    match k {
        PlotKind::History => "optimization history",
        PlotKind::Importance => "parameter importance",
        PlotKind::Slice => "slice plot",
        PlotKind::Contour => "contour",
        PlotKind::Parallel => "parallel coordinates",
        PlotKind::Curves => "learning curves",
        PlotKind::PrunedCurves => "pruned trials' learning curves",
        PlotKind::Pareto => "Pareto front",
        PlotKind::Timeline => "slot timeline",
        PlotKind::Failures => "failures",
    }
}

/// The figure the flags ask for; `--params` only where a figure takes parameters.
fn figure(args: &PlotArgs) -> anyhow::Result<Figure> {
    let p = &args.params;
    Ok(match args.kind {
        PlotKind::Slice => Figure::Slice(p.clone()),
        PlotKind::Contour => match p.as_slice() {
            [] => Figure::Contour(None),
            [a, b] if a != b => Figure::Contour(Some((a.clone(), b.clone()))),
            _ => {
                return Err(bad(format!(
                    "--params: a contour takes two different parameters (`--params A,B`), not {}",
                    p.join(",")
                )));
            }
        },
        k if !p.is_empty() => {
            return Err(bad(format!(
                "--params: only `slice` and `contour` take parameters, not `{}`",
                clap::ValueEnum::to_possible_value(&k)
                    .map(|v| v.get_name().to_string())
                    .unwrap_or_default()
            )));
        }
        PlotKind::History => Figure::History,
        PlotKind::Importance => Figure::Importance,
        PlotKind::Parallel => Figure::Parallel,
        PlotKind::Curves => Figure::CurvesBest,
        PlotKind::PrunedCurves => Figure::CurvesPruned,
        PlotKind::Pareto => Figure::Pareto,
        PlotKind::Timeline => Figure::Timeline,
        PlotKind::Failures => Figure::Failures,
    })
}

/// A figure's error as the user reads it: a parameter the study lacks is bad input.
pub(crate) fn plot_error(e: PlotError) -> anyhow::Error {
    match e {
        PlotError::NoParam { .. } => bad(format!("--params: {e}")),
        PlotError::Draw(_) => anyhow::Error::new(e),
    }
}

/// The output path's extension (lower case) when it is one of `exts` and its directory exists:
/// checked before the study is read, so a typo costs nothing and creates nothing.
pub(crate) fn check_output(path: &Path, exts: &[&str]) -> anyhow::Result<String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    if !exts.contains(&ext.as_str()) {
        let want: Vec<String> = exts.iter().map(|e| format!("`.{e}`")).collect();
        return Err(bad(format!(
            "-o {}: the file must end in {} ({})",
            path.display(),
            want.join(" or "),
            if ext.is_empty() {
                "it has no extension".to_string()
            } else {
                format!("not `.{ext}`")
            }
        )));
    }
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && !dir.is_dir()
    {
        return Err(bad(format!(
            "-o {}: the directory {} does not exist (create it, or write into an existing one)",
            path.display(),
            dir.display()
        )));
    }
    if path.is_dir() {
        return Err(bad(format!("-o {}: is a directory", path.display())));
    }
    Ok(ext)
}

/// Writes `bytes` to `path` whole: into a temporary file beside it, renamed over it at the end,
/// so a reader (a browser refreshing the report of a running study) never sees half a file.
pub(crate) fn write_output(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let what = |e: std::io::Error| anyhow::anyhow!("writing {}: {e}", path.display());
    let mut tmp = tempfile::Builder::new()
        .prefix(".tune-")
        .tempfile_in(dir)
        .map_err(what)?;
    tmp.write_all(bytes).map_err(what)?;
    // A temporary file is private (0600); the figure is a document to share, as `cp` makes it.
    {
        use std::os::unix::fs::PermissionsExt as _;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(what)?;
    }
    tmp.persist(path).map_err(|e| what(e.error))?;
    Ok(())
}

/// Reads the study `r` names into a view of its trials and learning curves, read-only, as it
/// is now (a running study too). `objective` (`--objective`: a number from 0 or a metric name)
/// picks the objective the figures show; checked before the trials are read.
pub(crate) fn load_view(
    r: &crate::cli::StudyRef,
    db: Option<&StorageUrl>,
    objective: Option<&str>,
) -> anyhow::Result<(StudyView, Box<dyn Storage>, StudyRow)> {
    let (storage, study, _) = open_study(r, db)?;
    let objectives = study.objectives();
    let k = match objective {
        Some(o) => pick_objective(&study.name, &objectives, o)?,
        None => 0,
    };
    let metric = objectives[k].metric.clone();
    let mut trials = storage.trials(&study, None).map_err(storage_fault)?;
    let reports = storage.reports(&study).map_err(storage_fault)?;
    let curves: BTreeMap<TrialNumber, Vec<(u64, f64)>> = reports
        .into_iter()
        .map(|(n, rs)| {
            let curve = rs
                .iter()
                .filter_map(|r| r.metrics.get(&metric).map(|v| (r.step, *v)))
                .collect();
            (n, curve)
        })
        .collect();
    let mut order = objectives;
    if k > 0 {
        order.swap(0, k);
        for t in &mut trials {
            t.status.promote_objective(k, curves.get(&t.number));
        }
    }
    let space = study_space(storage.as_ref(), &study)?;
    let view = StudyView::new(&study.name, order, space, trials, curves, SystemTime::now());
    Ok((view, storage, study))
}

/// The objective `--objective` names: a number (0 is the first) or a metric's name.
fn pick_objective(study: &str, objectives: &[Objective], o: &str) -> anyhow::Result<usize> {
    let names = || {
        objectives
            .iter()
            .enumerate()
            .map(|(i, o)| format!("{i} `{}`", o.metric))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Ok(i) = o.trim().parse::<usize>() {
        if i < objectives.len() {
            return Ok(i);
        }
        return Err(bad(format!(
            "--objective {i}: study `{study}` has {} objective{} (numbered from 0: {})",
            objectives.len(),
            if objectives.len() == 1 { "" } else { "s" },
            names()
        )));
    }
    objectives
        .iter()
        .position(|x| x.metric == o)
        .ok_or_else(|| {
            bad(format!(
                "--objective {o:?}: study `{study}` has no objective of that name (its objectives: {})",
                names()
            ))
        })
}
