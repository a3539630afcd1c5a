//! `tune importance`: which parameters mattered, for each objective (`crate::insight`).

use std::process::ExitCode;

use super::{bad, open_study, storage_fault};
use crate::cli::{ImportanceArgs, ImportanceMethod, TextFormat};
use crate::insight::fanova::Fanova;
use crate::insight::ped_anova::PedAnova;
use crate::insight::{self, Importance};
use crate::space::Space;
use crate::storage::{Storage, StorageUrl, StudyRow};
use crate::trial::Objective;

/// One objective's ranking.
struct Ranked {
    index: usize,
    objective: Objective,
    trials: usize,
    importances: Vec<(String, f64)>,
}

pub fn importance(args: &ImportanceArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let (storage, study, _) = open_study(&args.study, db)?;
    let trials = storage.trials(&study, None).map_err(storage_fault)?;
    let space = study_space(storage.as_ref(), &study)?
        .or_else(|| insight::infer_space(&trials))
        .ok_or_else(|| {
            bad(format!(
                "study `{}` has no trial with params yet",
                study.name
            ))
        })?;
    let method: Box<dyn Importance> = match args.method {
        ImportanceMethod::PedAnova => Box::new(PedAnova::default()),
        ImportanceMethod::Fanova => Box::new(Fanova::default()),
    };
    let objectives = study.objectives();
    let directions: Vec<_> = objectives.iter().map(|o| o.direction).collect();
    let which: Vec<usize> = match args.objective {
        Some(i) if i >= objectives.len() => {
            return Err(bad(format!(
                "--objective {i}: study `{}` has {} objective{} (numbered from 0)",
                study.name,
                objectives.len(),
                if objectives.len() == 1 { "" } else { "s" }
            )));
        }
        Some(i) => vec![i],
        None => (0..objectives.len()).collect(),
    };
    let mut ranked = Vec::new();
    for i in which {
        let obs = insight::observations(&trials, &directions, i).map_err(|e| bad(e.to_string()))?;
        if obs.is_empty() {
            eprintln!(
                "tune: study `{}` has no complete trial with a finite `{}` yet: nothing to rank",
                study.name, objectives[i].metric
            );
            return Ok(ExitCode::from(1));
        }
        ranked.push(Ranked {
            index: i,
            objective: objectives[i].clone(),
            trials: obs.len(),
            importances: method.importances(&space, &obs),
        });
    }
    match args.format {
        TextFormat::Text => print_text(&study, method.name(), &ranked),
        TextFormat::Json => {
            let v = to_json(&study, method.name(), &ranked);
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        TextFormat::Csv => {
            let mut w = csv::Writer::from_writer(std::io::stdout());
            w.write_record(["objective", "metric", "param", "importance"])?;
            for r in &ranked {
                for (p, v) in &r.importances {
                    w.write_record([
                        r.index.to_string(),
                        r.objective.metric.clone(),
                        p.clone(),
                        v.to_string(),
                    ])?;
                }
            }
            w.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The space the study was run with, from its stored study file (`None` where it has none:
/// an ask-tell study, whose space is then read from its trials).
pub(crate) fn study_space(
    storage: &dyn Storage,
    study: &StudyRow,
) -> anyhow::Result<Option<Space>> {
    let stored = storage.study_file(study).map_err(storage_fault)?;
    let Some(text) = stored.text else {
        return Ok(None);
    };
    let at = stored
        .path
        .unwrap_or_else(|| "the stored study file".into());
    let doc: toml::Table = toml::from_str(&text)
        .map_err(|e| bad(format!("{at} (as stored with study `{}`): {e}", study.name)))?;
    match doc.get("space") {
        Some(toml::Value::Table(t)) => Space::from_toml(t)
            .map(Some)
            .map_err(|e| bad(format!("{at} (as stored): key `space`: {e}"))),
        _ => Ok(None),
    }
}

fn to_json(study: &StudyRow, method: &str, ranked: &[Ranked]) -> serde_json::Value {
    serde_json::json!({
        "study": study.name,
        "method": method,
        "objectives": ranked.iter().map(|r| serde_json::json!({
            "objective": r.index,
            "metric": r.objective.metric,
            "direction": r.objective.direction.as_str(),
            "trials": r.trials,
            "importances": r.importances.iter().map(|(p, v)| serde_json::json!({
                "param": p,
                "importance": v,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// Bars 40 cells wide for the largest share, eighths for the remainder.
fn bar(share: f64, max: f64) -> String {
    const WIDTH: f64 = 40.0;
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let cells = if max > 0.0 { share / max * WIDTH } else { 0.0 };
    let eighths = (cells * 8.0).round() as usize;
    let mut s = "█".repeat(eighths / 8);
    let rest = eighths % 8;
    if rest != 0 {
        s.push(PARTS[rest]);
    }
    s
}

fn print_text(study: &StudyRow, method: &str, ranked: &[Ranked]) {
    for (k, r) in ranked.iter().enumerate() {
        if k > 0 {
            println!();
        }
        println!(
            "importance for `{}` ({}) of study `{}`, {method} over {} complete trial{}:",
            r.objective.metric,
            r.objective.direction.as_str(),
            study.name,
            r.trials,
            if r.trials == 1 { "" } else { "s" }
        );
        let width = r
            .importances
            .iter()
            .map(|(p, _)| p.len())
            .max()
            .unwrap_or(0);
        let max = r.importances.first().map(|x| x.1).unwrap_or(0.0);
        for (p, v) in &r.importances {
            println!("  {p:<width$}  {:>5.3}  {}", v, bar(*v, max));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_share() {
        assert_eq!(bar(0.5, 0.5).chars().count(), 40);
        assert_eq!(bar(0.25, 0.5).chars().count(), 20);
        assert_eq!(bar(0.0, 0.5), "");
        assert_eq!(bar(0.5 / 320.0, 0.5), "▏");
    }
}
