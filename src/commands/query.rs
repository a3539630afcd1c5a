//! `tune studies`, `tune trials`, `tune best`, `tune show`: read-only queries.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use comfy_table::Table;

use super::{bad, fmt_params, fmt_value, open_study};
use crate::cli::{
    BestArgs, Format, ShowArgs, SortKey, StateFilter, StudiesArgs, StudyRef, TrialsArgs,
};
use crate::storage::{Storage, StorageUrl, StudyRow};
use crate::telemetry::fmt_mb;
use crate::trial::{GpuMemScope, GpuTelemetry, Trial, TrialNumber, TrialState, TrialStatus};

fn table() -> Table {
    Table::new()
}

fn print_json(v: &serde_json::Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// The columns every format of `tune studies` shares, and a study's cells in them.
const STUDY_COLUMNS: [&str; 9] = [
    "study",
    "direction",
    "metric",
    "trials",
    "complete",
    "pruned",
    "failed",
    "running",
    "queued",
];

fn study_cells(s: &crate::storage::StudySummary) -> Vec<String> {
    // A multi-objective study lists every objective, comma-separated.
    let list = |first: String, rest: Vec<String>| {
        std::iter::once(first)
            .chain(rest)
            .collect::<Vec<_>>()
            .join(",")
    };
    vec![
        s.name.clone(),
        list(
            s.direction.as_str().into(),
            s.others
                .iter()
                .map(|o| o.direction.as_str().into())
                .collect(),
        ),
        list(
            s.metric.clone(),
            s.others.iter().map(|o| o.metric.clone()).collect(),
        ),
        s.trials.to_string(),
        s.complete.to_string(),
        s.pruned.to_string(),
        s.failed.to_string(),
        s.running.to_string(),
        s.queued.to_string(),
    ]
}

pub fn studies(args: &StudiesArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let storage = super::open_read(
        &super::default_storage(db),
        super::DbFrom::of_flag(db, false),
    )?;
    let mut list = storage.list_studies()?;
    for s in &mut list {
        if let Some(row) = storage.find_study(&s.name)?
            && row.is_multi()
        {
            let front = pareto_trials(&row, storage.trials(&row, Some(TrialState::Complete))?);
            s.pareto_front = Some(front.len() as u64);
            s.others = row.others;
        }
    }
    match args.format {
        Format::Json => print_json(&serde_json::to_value(&list)?)?,
        Format::Csv => {
            let mut w = csv::Writer::from_writer(std::io::stdout().lock());
            let mut header = STUDY_COLUMNS.to_vec();
            header.extend(["best_value", "best_trial"]);
            w.write_record(&header)?;
            for s in &list {
                let mut row = study_cells(s);
                row.push(s.best_value.map(|v| v.to_string()).unwrap_or_default());
                row.push(s.best_trial.map(|n| n.to_string()).unwrap_or_default());
                w.write_record(&row)?;
            }
            w.flush()?;
        }
        Format::Table => {
            let mut t = table();
            let mut header = STUDY_COLUMNS.to_vec();
            header.push("best");
            t.set_header(header);
            for s in &list {
                let mut row = study_cells(s);
                row.push(match (s.pareto_front, s.best_trial) {
                    (Some(k), _) if k > 0 => format!("Pareto front: {k} trial(s)"),
                    (_, Some(n)) => format!("{} (trial {n})", fmt_value(s.best_value)),
                    _ => "-".into(),
                });
                t.add_row(row);
            }
            println!("{t}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Orders by value in the study's direction, trials without a finite value last.
fn by_value(study: &StudyRow, a: &Trial, b: &Trial) -> Ordering {
    let key = |t: &Trial| {
        t.value()
            .filter(|v| v.is_finite())
            .map(|v| study.direction.loss(v))
    };
    match (key(a), key(b)) {
        (Some(x), Some(y)) => x.total_cmp(&y).then(a.number.cmp(&b.number)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.number.cmp(&b.number),
    }
}

pub fn trials(args: &TrialsArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let (storage, study, _) = open_study(&args.study, db)?;
    let state = match args.state {
        StateFilter::All => None,
        StateFilter::Queued => Some(TrialState::Queued),
        StateFilter::Running => Some(TrialState::Running),
        StateFilter::Complete => Some(TrialState::Complete),
        StateFilter::Pruned => Some(TrialState::Pruned),
        StateFilter::Failed => Some(TrialState::Failed),
    };
    let mut rows = storage.trials(&study, state)?;
    if args.sort == SortKey::Value {
        rows.sort_by(|a, b| by_value(&study, a, b));
    }
    if let Some(n) = args.limit {
        rows.truncate(n);
    }
    print_trials(&rows, args.format)?;
    Ok(ExitCode::SUCCESS)
}

fn print_trials(rows: &[Trial], format: Format) -> anyhow::Result<()> {
    match format {
        Format::Json => {
            let v: Vec<_> = rows.iter().map(Trial::to_json).collect();
            print_json(&serde_json::Value::Array(v))?;
        }
        Format::Csv => {
            let params: BTreeSet<&String> = rows.iter().flat_map(|r| r.params.keys()).collect();
            let metrics: BTreeSet<&String> = rows.iter().flat_map(|r| r.metrics.keys()).collect();
            let mut w = csv::Writer::from_writer(std::io::stdout().lock());
            let mut header: Vec<String> = [
                "number",
                "state",
                "value",
                "started_at",
                "finished_at",
                "duration_s",
                "error",
                "log_tail",
                "discarded",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            // The GPU columns only where some trial has telemetry: a CPU study's CSV keeps the
            // columns it always had.
            let gpu = rows.iter().any(|r| r.status.gpu().is_some());
            if gpu {
                header.extend(GpuTelemetry::KEYS.iter().map(|k| k.to_string()));
            }
            header.extend(params.iter().map(|p| format!("params.{p}")));
            header.extend(metrics.iter().map(|m| format!("metrics.{m}")));
            w.write_record(&header)?;
            for r in rows {
                let j = r.to_json();
                let text = |k: &str| j[k].as_str().unwrap_or_default().to_string();
                let mut rec = vec![
                    r.number.to_string(),
                    r.state().as_str().to_string(),
                    r.value().map(|v| v.to_string()).unwrap_or_default(),
                    text("started_at"),
                    text("finished_at"),
                    j["duration_s"]
                        .as_f64()
                        .map(|v| format!("{v:.3}"))
                        .unwrap_or_default(),
                    r.status.reason().unwrap_or_default().to_string(),
                    match &r.status {
                        TrialStatus::Failed {
                            log_tail: Some(t), ..
                        } => t.clone(),
                        _ => String::new(),
                    },
                    r.discarded.to_string(),
                ];
                if gpu {
                    rec.extend(gpu_cells(r.status.gpu()));
                }
                rec.extend(
                    params
                        .iter()
                        .map(|p| r.params.get(*p).map(|v| v.to_string()).unwrap_or_default()),
                );
                rec.extend(
                    metrics
                        .iter()
                        .map(|m| r.metrics.get(*m).map(|v| v.to_string()).unwrap_or_default()),
                );
                w.write_record(&rec)?;
            }
            w.flush()?;
        }
        Format::Table => {
            let mut t = table();
            let gpu = rows.iter().any(|r| r.status.gpu().is_some());
            let mut header = vec!["#", "state", "value", "duration"];
            if gpu {
                header.extend(["gpu peak", "gpu sm", "gpu mem bw"]);
            }
            header.extend(["params", "error"]);
            t.set_header(header);
            for r in rows {
                let mut row = vec![
                    r.number.to_string(),
                    state_cell(r),
                    fmt_value(r.value()),
                    duration_s(r)
                        .map(|d| format!("{d:.1}s"))
                        .unwrap_or_else(|| "-".into()),
                ];
                if gpu {
                    row.extend(match r.status.gpu() {
                        Some(g) => [
                            gpu_peak_cell(g),
                            fmt_pct(g.mean_sm_pct),
                            fmt_pct(g.mean_mem_bw_pct),
                        ],
                        None => ["-".into(), "-".into(), "-".into()],
                    });
                }
                row.extend([
                    fmt_params(&r.params),
                    r.status
                        .why()
                        .map(|e| e.chars().take(100).collect())
                        .unwrap_or_default(),
                ]);
                t.add_row(row);
            }
            println!("{t}");
        }
    }
    Ok(())
}

/// A trial's GPU telemetry in the CSV's `gpu_*` columns (empty cells where it has none).
fn gpu_cells(gpu: Option<&GpuTelemetry>) -> Vec<String> {
    match gpu {
        Some(g) => g
            .fields()
            .into_iter()
            .map(|(_, v)| match v {
                serde_json::Value::String(s) => s,
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            })
            .collect(),
        None => vec![String::new(); GpuTelemetry::KEYS.len()],
    }
}

/// A percentage for people: "71%"; "-" where it is not a number.
fn fmt_pct(p: f64) -> String {
    if p.is_finite() {
        format!("{p:.0}%")
    } else {
        "-".into()
    }
}

/// The GPU memory peak for people, saying when it is the whole device's: "1.5 GB",
/// "6.2 GB (device)".
fn gpu_peak_cell(g: &GpuTelemetry) -> String {
    match g.mem_scope {
        GpuMemScope::Process => fmt_mb(g.peak_mem_mb),
        GpuMemScope::Device => format!("{} (device)", fmt_mb(g.peak_mem_mb)),
    }
}

/// The metric the builtin trainer reports its CUDA allocator's peak under, shown beside the
/// driver's figure by `tune show`.
const ALLOCATOR_PEAK_METRIC: &str = "peak_mem_mb";

/// `tune show`'s lines on a trial's GPU: the means and the peak as the driver saw them, and the
/// allocator's own peak where the trainer reported one (a different figure: tensors only,
/// without the CUDA context or the allocator's cache).
fn gpu_lines(g: &GpuTelemetry, metrics: &std::collections::BTreeMap<String, f64>) -> Vec<String> {
    let whose = match g.mem_scope {
        GpuMemScope::Process => "the trial's own processes",
        GpuMemScope::Device => "the whole GPU: the trial's processes could not be told apart",
    };
    let mut out = vec![
        format!(
            "gpu: {} SM, {} memory bandwidth (means of {} samples, NVML)",
            fmt_pct(g.mean_sm_pct),
            fmt_pct(g.mean_mem_bw_pct),
            g.samples
        ),
        format!("gpu memory peak: {} ({whose}, NVML)", fmt_mb(g.peak_mem_mb)),
    ];
    if let Some(p) = metrics.get(ALLOCATOR_PEAK_METRIC).filter(|p| p.is_finite()) {
        out.push(format!(
            "allocator peak: {} (metric `{ALLOCATOR_PEAK_METRIC}`: tensors only, as the trainer's CUDA allocator counts them)",
            fmt_mb(*p)
        ));
    }
    out
}

/// A trial's state for people: a discarded one says so, and a paused one (pruned, resumable:
/// promotion-based ASHA) is `paused`.
fn state_cell(t: &Trial) -> String {
    let state = if t.status.paused() {
        "paused"
    } else {
        t.state().as_str()
    };
    if t.discarded {
        format!("{state} (discarded)")
    } else {
        state.to_string()
    }
}

/// How long a finished trial ran, in seconds.
fn duration_s(t: &Trial) -> Option<f64> {
    t.to_json()["duration_s"].as_f64()
}

/// The complete trials (not discarded) of a multi-objective study that no other complete trial
/// dominates, in number order.
pub(crate) fn pareto_trials(study: &StudyRow, trials: Vec<Trial>) -> Vec<Trial> {
    let done: Vec<(Trial, Vec<f64>)> = trials
        .into_iter()
        .filter(|t| !t.discarded)
        .filter_map(|t| {
            let TrialStatus::Complete { value, others, .. } = &t.status else {
                return None;
            };
            let l = crate::trial::losses(study.direction, &study.others, *value, others)?;
            Some((t, l))
        })
        .collect();
    let losses: Vec<Vec<f64>> = done.iter().map(|(_, l)| l.clone()).collect();
    let front: std::collections::HashSet<usize> =
        crate::sampler::multi::pareto::pareto_front(&losses)
            .into_iter()
            .collect();
    done.into_iter()
        .enumerate()
        .filter(|(i, _)| front.contains(i))
        .map(|(_, (t, _))| t)
        .collect()
}

/// `tune best` on a multi-objective study: its Pareto front.
fn best_front(study: &StudyRow, storage: &dyn Storage, format: Format) -> anyhow::Result<ExitCode> {
    let front = pareto_trials(study, storage.trials(study, Some(TrialState::Complete))?);
    if front.is_empty() {
        eprintln!("tune: study `{}` has no complete trial yet", study.name);
        return Ok(ExitCode::from(1));
    }
    let objectives = study.objectives();
    match format {
        Format::Json => {
            let v: Vec<_> = front.iter().map(Trial::to_json).collect();
            print_json(&serde_json::Value::Array(v))?;
        }
        Format::Csv => print_trials(&front, Format::Csv)?,
        Format::Table => {
            let names: Vec<String> = objectives
                .iter()
                .map(|o| format!("{} ({})", o.metric, o.direction.as_str()))
                .collect();
            println!(
                "Pareto front of `{}`: {} trial(s) that no other complete trial beats on every objective: {}",
                study.name,
                front.len(),
                names.join(", ")
            );
            let params: BTreeSet<&String> = front.iter().flat_map(|r| r.params.keys()).collect();
            let mut t = table();
            let mut header = vec!["trial".to_string()];
            header.extend(objectives.iter().map(|o| o.metric.clone()));
            header.extend(params.iter().map(|p| p.to_string()));
            t.set_header(header);
            for r in &front {
                let mut row = vec![r.number.to_string(), fmt_value(r.value())];
                row.extend(r.status.others().iter().map(|v| fmt_value(Some(*v))));
                row.extend(
                    params
                        .iter()
                        .map(|p| r.params.get(*p).map(|v| v.to_string()).unwrap_or_default()),
                );
                t.add_row(row);
            }
            println!("{t}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn best(args: &BestArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let (storage, study, _) = open_study(&args.study, db)?;
    if study.is_multi() {
        return best_front(&study, storage.as_ref(), args.format);
    }
    let Some((n, _)) = storage.best(&study)? else {
        eprintln!("tune: study `{}` has no complete trial yet", study.name);
        return Ok(ExitCode::from(1));
    };
    let row = storage
        .trial(&study, n)?
        .ok_or_else(|| anyhow::anyhow!("trial {n} vanished while reading"))?;
    match args.format {
        Format::Json => print_json(&row.to_json())?,
        Format::Csv => print_trials(std::slice::from_ref(&row), Format::Csv)?,
        Format::Table => {
            println!(
                "best trial {} of `{}`: {} = {}",
                row.number,
                study.name,
                study.metric,
                fmt_value(row.value())
            );
            let mut t = table();
            t.set_header(["param", "value"]);
            for (k, v) in &row.params {
                t.add_row([k.clone(), v.to_string()]);
            }
            println!("{t}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The predicted final value of a running or pruned trial from its stored reports (issue 26),
/// matched against the curves of the study's complete trials as stored now (by step);
/// `None` before three complete curves.
fn predicted_final(
    storage: &dyn Storage,
    study: &StudyRow,
    reports: &[crate::storage::StoredReport],
) -> anyhow::Result<Option<crate::pruner::prediction::Prediction>> {
    use crate::pruner::prediction::{Predictor, prediction};
    let all = storage.reports(study)?;
    let mut complete = Predictor::new(study.direction, study.metric.clone());
    for t in storage.trials(study, Some(TrialState::Complete))? {
        if !t.discarded
            && let Some(r) = all.get(&t.number)
        {
            complete.add_complete(r);
        }
    }
    let curve: Vec<(f64, f64)> = reports
        .iter()
        .filter(|r| !r.is_final)
        .filter_map(|r| Some((r.report.step as f64, *r.report.metrics.get(&study.metric)?)))
        .collect();
    Ok(prediction(
        &curve,
        complete.references(),
        study.direction,
        None,
    ))
}

pub fn show(args: &ShowArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let mut number = None;
    let mut file = None;
    for a in &args.args {
        match a.parse::<u64>() {
            Ok(n) if number.is_none() && !Path::new(a).exists() => number = Some(n),
            _ => file = Some(PathBuf::from(a)),
        }
    }
    let number = number
        .ok_or_else(|| bad("tune show: give the trial number, e.g. `tune show 3 study.toml`"))?;
    let r = StudyRef {
        study_file: file,
        name: args.name.clone(),
    };
    let (storage, study, _) = open_study(&r, db)?;
    let row = storage
        .trial(&study, TrialNumber(number))?
        .ok_or_else(|| bad(format!("study `{}` has no trial {number}", study.name)))?;
    let reports = storage.trial_reports(row.id)?;
    let predicted = match row.state() {
        TrialState::Running | TrialState::Pruned => predicted_final(&*storage, &study, &reports)?,
        _ => None,
    };
    // Which attempt at its params it is: an interrupted trial's params run again as the next.
    let attempt = storage.attempt(&study, row.number)?;
    let retry_of = storage.retry_of(&study, row.number)?;
    // Population-based training: the trial it continues from, and those continuing from it.
    let lineage = storage.lineage(&study)?;
    let parent = lineage
        .iter()
        .find(|l| l.child == row.number)
        .map(|l| l.parent);
    let children: Vec<&crate::storage::Lineage> = lineage
        .iter()
        .filter(|l| l.parent.trial == row.number)
        .collect();
    match args.format {
        Format::Csv => {
            // The learning curve: one row per report, every metric a column.
            let keys: BTreeSet<&String> = reports
                .iter()
                .flat_map(|r| r.report.metrics.keys())
                .collect();
            let mut w = csv::Writer::from_writer(std::io::stdout().lock());
            let mut header = vec!["trial".to_string(), "step".into(), "final".into()];
            header.extend(keys.iter().map(|k| k.to_string()));
            header.push("at".into());
            w.write_record(&header)?;
            for r in &reports {
                let mut rec = vec![
                    row.number.to_string(),
                    r.report.step.to_string(),
                    r.is_final.to_string(),
                ];
                rec.extend(keys.iter().map(|k| {
                    r.report
                        .metrics
                        .get(*k)
                        .map(|v| v.to_string())
                        .unwrap_or_default()
                }));
                rec.push(
                    r.at.map(|t| {
                        chrono::DateTime::<chrono::Utc>::from(t)
                            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                    })
                    .unwrap_or_default(),
                );
                w.write_record(&rec)?;
            }
            w.flush()?;
        }
        Format::Json => {
            let mut v = row.to_json();
            if let serde_json::Value::Object(m) = &mut v {
                m.insert(
                    "reports".into(),
                    reports
                        .iter()
                        .map(|r| {
                            let at = r.at.map(|t| {
                                chrono::DateTime::<chrono::Utc>::from(t)
                                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                            });
                            serde_json::json!({"step": r.report.step, "final": r.is_final, "metrics": r.report.metrics, "at": at})
                        })
                        .collect(),
                );
                m.insert("logs".into(), serde_json::json!(row.logs));
                m.insert("trial_dir".into(), serde_json::json!(row.trial_dir));
                m.insert("attempt".into(), serde_json::json!(attempt.attempt));
                m.insert("first_attempt".into(), serde_json::json!(attempt.first.0));
                m.insert("retry_of".into(), serde_json::json!(retry_of.map(|n| n.0)));
                // Only a trial of population-based training has these keys.
                if let Some(p) = parent {
                    m.insert(
                        "parent".into(),
                        serde_json::json!({"trial": p.trial.0, "step": p.step}),
                    );
                }
                if !children.is_empty() {
                    m.insert(
                        "children".into(),
                        children
                            .iter()
                            .map(|l| serde_json::json!({"trial": l.child.0, "step": l.parent.step}))
                            .collect(),
                    );
                }
                let (log_tail, pruned_step) = match &row.status {
                    TrialStatus::Failed { log_tail, .. } => (log_tail.clone(), None),
                    TrialStatus::Pruned { step, .. } => (None, *step),
                    _ => (None, None),
                };
                let device = row.status.placement().and_then(|p| p.device.clone());
                m.insert("device".into(), serde_json::json!(device));
                let host = row.status.placement().and_then(|p| p.host.clone());
                m.insert("host".into(), serde_json::json!(host));
                m.insert("log_tail".into(), serde_json::json!(log_tail));
                m.insert("pruned_step".into(), serde_json::json!(pruned_step));
                m.insert(
                    "pruned_reason".into(),
                    serde_json::json!(row.status.pruned_reason()),
                );
                m.insert(
                    "predicted".into(),
                    match predicted {
                        Some(p) => serde_json::json!({
                            "value": p.value,
                            "low": p.low,
                            "high": p.high,
                            "band": crate::pruner::prediction::BAND,
                            "at_step": p.at_step,
                            "from_curves": p.from_curves,
                        }),
                        None => serde_json::Value::Null,
                    },
                );
            }
            print_json(&v)?;
        }
        Format::Table => {
            println!(
                "trial {} of `{}`: {}, {} = {}, {}",
                row.number,
                study.name,
                state_cell(&row),
                study.metric,
                fmt_value(row.value()),
                duration_s(&row)
                    .map(|d| format!("{d:.1}s"))
                    .unwrap_or_else(|| "-".into())
            );
            if let Some(earlier) = retry_of {
                println!(
                    "attempt {} at these params: re-runs interrupted trial {} (first attempt: trial {})",
                    attempt.attempt, earlier.0, attempt.first.0
                );
            }
            if let Some(p) = parent {
                println!(
                    "continues trial {} from its checkpoint at step {} (population-based training; its params explored from trial {}'s)",
                    p.trial, p.step, p.trial
                );
            }
            if !children.is_empty() {
                let each: Vec<String> = children
                    .iter()
                    .map(|l| format!("trial {} (from step {})", l.child, l.parent.step))
                    .collect();
                println!("continued by {}", each.join(", "));
            }
            if let Some(at) = row.status.placement() {
                match (&at.host, &at.device) {
                    (Some(h), Some(d)) => println!("device: {d} on {h}"),
                    (None, Some(d)) => println!("device: {d}"),
                    (Some(h), None) => println!("host: {h}"),
                    (None, None) => {}
                }
            }
            if let Some(g) = row.status.gpu() {
                for line in gpu_lines(g, &row.metrics) {
                    println!("{line}");
                }
            }
            let mut t = table();
            t.set_header(["param", "value"]);
            for (k, v) in &row.params {
                t.add_row([k.clone(), v.to_string()]);
            }
            println!("{t}");
            if !reports.is_empty() {
                let keys: BTreeSet<&String> = reports
                    .iter()
                    .flat_map(|r| r.report.metrics.keys())
                    .collect();
                let mut t = table();
                let mut h = vec!["step".to_string()];
                h.extend(keys.iter().map(|k| k.to_string()));
                t.set_header(h);
                for stored in &reports {
                    let r = &stored.report;
                    let mut row = vec![if stored.is_final {
                        format!("{} (final)", r.step)
                    } else {
                        r.step.to_string()
                    }];
                    row.extend(keys.iter().map(|k| fmt_value(r.metrics.get(*k).copied())));
                    t.add_row(row);
                }
                println!("{t}");
            }
            if let Some(reason) = row.status.pruned_reason() {
                if row.status.paused() {
                    println!(
                        "paused {reason}; resumable from its checkpoint, once enough trials rank below it there (pruner.mode = \"promote\")"
                    );
                } else {
                    println!("pruned {reason}");
                }
            }
            if let Some(p) = predicted {
                let what = match row.state() {
                    TrialState::Pruned => "would have reached",
                    _ => "predicted final",
                };
                println!(
                    "{what}: {} {} (80 % band, from step {} against {} complete curves)",
                    study.metric,
                    p.compact(),
                    p.at_step,
                    p.from_curves
                );
            }
            if let TrialStatus::Failed {
                reason, log_tail, ..
            } = &row.status
            {
                println!("error: {reason}");
                if let Some(tail) = log_tail {
                    println!("last lines of standard error:\n{tail}");
                }
            }
            for l in &row.logs {
                println!("log: {}", l.display());
            }
            if let Some(line) = checkpoint_line(storage.as_ref(), &study, &row) {
                println!("{line}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `checkpoints: 1.5 MiB in DIR` for a trial whose checkpoint directory holds some (a running
/// trial's, an interrupted one's, or the best kept), read on this machine; for checkpoints in an
/// object store, what the trial's copy there holds.
/// `checkpoints: 1.5 MiB in 2 objects at s3://…/trial-00003`, listed in the store (nothing for
/// an empty copy); a store that cannot be listed says why.
fn remote_checkpoint_line(
    url: &crate::checkpoint::StoreUrl,
    study: &str,
    first: u64,
) -> Option<String> {
    let at = url.trial_url(study, first);
    let listed = crate::checkpoint::remote::Store::open(url)
        .and_then(|store| crate::checkpoint::remote::block_on(store.trial(study, first).usage()));
    match listed {
        Ok((0, _)) => None,
        Ok((n, bytes)) => Some(format!(
            "checkpoints: {} in {n} object(s) at {at}",
            crate::checkpoint::fmt_bytes(bytes)
        )),
        Err(e) => Some(format!("checkpoints: cannot list {at}: {e}")),
    }
}

fn checkpoint_line(storage: &dyn Storage, study: &StudyRow, row: &Trial) -> Option<String> {
    let stored = storage.study_file(study).ok()?;
    let spec = crate::checkpoint::of_study_file(
        stored.text.as_deref()?,
        stored.path.as_deref().map(Path::new),
    )?;
    // Every attempt at the trial's params shares its first attempt's directory.
    let first = storage.attempt(study, row.number).ok()?.first;
    let first_row = if first == row.number {
        None
    } else {
        storage.trial(study, first).ok()?
    };
    let run_dir = first_row.as_ref().unwrap_or(row).trial_dir.as_deref()?;
    if let Some(url) = &spec.store {
        return remote_checkpoint_line(url, &study.name, first.0);
    }
    let dir = spec.trial_dir(&study.name, first.0, run_dir);
    match crate::checkpoint::disk_use(&dir) {
        Ok(0) => None,
        Ok(n) => Some(format!(
            "checkpoints: {} in {}",
            crate::checkpoint::fmt_bytes(n),
            dir.display()
        )),
        Err(e) => Some(format!("checkpoints: cannot read {}: {e}", dir.display())),
    }
}
