//! `tune report`'s page: one self-contained HTML file (inline SVG, inline CSS, no script, no
//! link to anything outside it) with the study's definition and summary and every figure of
//! [`super::plot`], so it opens offline, in a mail attachment or years later.
//!
//! Like the rest of `insight`, it does no I/O: the view and what the command read beside it
//! (the stored study file, where the database is, the time) in, the page's text out.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::plot::{self, Figure, PlotError, StudyView};
use crate::fmt::Precision;
use crate::space::{ParamKind, Space};
use crate::trial::{TrialState, TrialStatus};

/// What the page says beside the trials.
#[derive(Debug, Clone, Copy)]
pub struct ReportContext<'a> {
    /// The study file's text as stored with the study (`None`: an ask-tell study).
    pub study_file: Option<&'a str>,
    /// Where that file was when the study was created.
    pub study_path: Option<&'a str>,
    /// The database, as messages name it (no password).
    pub location: &'a str,
    /// When the report was made, as people read it.
    pub generated: &'a str,
}

/// The most failed trials listed one by one under the failures figure (the figure counts them
/// all by reason).
pub const FAILURES_LISTED: usize = 100;

/// The sections of the page, in order: (id, heading). The browser test counts the `<svg>` of
/// each, so an id here is part of the report's contract.
pub const SECTIONS: [(&str, &str); 10] = [
    ("summary", "Study"),
    ("history", "Optimization history"),
    ("importance", "Parameter importance"),
    ("slice", "Slices of the most important parameters"),
    ("contour", "Contour of the two most important parameters"),
    ("parallel", "Parallel coordinates"),
    ("curves", "Learning curves"),
    ("pareto", "Pareto front"),
    ("timeline", "Slot timeline"),
    ("failures", "Failures"),
];

/// Text made safe inside HTML (element content and quoted attributes).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:0 auto;max-width:960px;padding:0 16px 48px;color:#222}\
h1{margin-top:24px}h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:40px}\
nav a{margin-right:12px}svg{max-width:100%;height:auto;display:block;margin:12px 0}\
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}\
pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px;margin:8px 0}p.why{color:#555}\
.cols{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}.cols>div{flex:1 1 300px;min-width:0}h3{margin:8px 0}";

/// The whole page.
pub fn html(view: &StudyView, ctx: &ReportContext<'_>) -> Result<String, PlotError> {
    let mut page = String::new();
    let title = format!("tune report: {}", view.name);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n<nav>",
        escape(&title),
        escape(&title)
    );
    for (id, heading) in SECTIONS {
        let _ = write!(page, "<a href=\"#{id}\">{}</a>", escape(heading));
    }
    page.push_str("</nav>\n");
    for (id, heading) in SECTIONS {
        let _ = writeln!(page, "<section id=\"{id}\"><h2>{}</h2>", escape(heading));
        match id {
            "summary" => summary(&mut page, view, ctx),
            "history" => {
                why(
                    &mut page,
                    "Each complete trial's value by trial number, pruned trials at their last reported value, failed trials as red marks on the floor, and the best value so far.",
                );
                figure(&mut page, view, &Figure::History, plot::SIZE)?;
            }
            "importance" => {
                why(
                    &mut page,
                    "Each parameter's share of the importance for the first objective, by PED-ANOVA over the complete trials (as `tune importance`).",
                );
                // About 44 pixels a bar: a three-parameter study's bars are not a wall of blue.
                let h = (140 + 44 * view.importances.len() as u32).clamp(260, 620);
                figure(&mut page, view, &Figure::Importance, (900, h))?;
            }
            "slice" => {
                why(
                    &mut page,
                    "The objective against each of the most important parameters: complete trials in blue, pruned ones (last value) as orange crosses, failed ones as red marks on the floor.",
                );
                let top = view.top_params(plot::TOP_PARAMS);
                if top.is_empty() {
                    figure(&mut page, view, &Figure::Slice(Vec::new()), (900, 400))?;
                }
                for p in top {
                    figure(&mut page, view, &Figure::Slice(vec![p]), (900, 400))?;
                }
            }
            "contour" => {
                why(
                    &mut page,
                    "The best value of the first objective in each cell of a grid over the two most important parameters (darker is better), with the trials as white dots.",
                );
                figure(&mut page, view, &Figure::Contour(None), (900, 620))?;
            }
            "parallel" => {
                why(
                    &mut page,
                    "The best complete trials across the most important parameters and the objective; each axis spans its parameter's range, darker lines are better trials.",
                );
                figure(&mut page, view, &Figure::Parallel, plot::SIZE)?;
            }
            "curves" => {
                why(
                    &mut page,
                    "The intermediate values of the best complete trials, then of the pruned trials coloured by the step they were stopped at (their rung).",
                );
                figure(&mut page, view, &Figure::CurvesBest, plot::SIZE)?;
                figure(&mut page, view, &Figure::CurvesPruned, plot::SIZE)?;
            }
            "pareto" => {
                why(
                    &mut page,
                    "For a multi-objective study: every complete trial on the first two objectives, the trials no other beats on every objective in red.",
                );
                figure(&mut page, view, &Figure::Pareto, plot::SIZE)?;
            }
            "timeline" => {
                why(
                    &mut page,
                    "Which trial ran on which slot and when, coloured by how it ended; white is a slot left idle.",
                );
                let lanes = view
                    .trials
                    .iter()
                    .filter_map(|t| t.status.placement())
                    .map(|p| (p.host.clone(), p.worker.map(|w| w.0), p.slot))
                    .collect::<std::collections::BTreeSet<_>>()
                    .len();
                let h = (160 + 26 * lanes.min(40) as u32).max(320);
                figure(&mut page, view, &Figure::Timeline, (900, h))?;
            }
            "failures" => {
                figure(&mut page, view, &Figure::Failures, (900, 360))?;
                failed_table(&mut page, view);
            }
            _ => {}
        }
        page.push_str("</section>\n");
    }
    let _ = write!(
        page,
        "<footer><p class=\"why\">Made by tune {} on {}.</p></footer>\n</body></html>\n",
        env!("CARGO_PKG_VERSION"),
        escape(ctx.generated)
    );
    Ok(page)
}

fn why(page: &mut String, text: &str) {
    let _ = writeln!(page, "<p class=\"why\">{}</p>", escape(text));
}

/// One figure, inline: the SVG document less anything before its `<svg>` element.
fn figure(
    page: &mut String,
    view: &StudyView,
    f: &Figure,
    size: (u32, u32),
) -> Result<(), PlotError> {
    let svg = plot::svg(view, f, size)?;
    let start = svg.find("<svg").unwrap_or(0);
    page.push_str(&svg[start..]);
    page.push('\n');
    Ok(())
}

fn row(page: &mut String, key: &str, value: &str) {
    let _ = writeln!(
        page,
        "<tr><th>{}</th><td>{}</td></tr>",
        escape(key),
        escape(value)
    );
}

fn summary(page: &mut String, view: &StudyView, ctx: &ReportContext<'_>) {
    // The summary and the space beside the study file: the figures start within the first
    // screen.
    page.push_str("<div class=\"cols\"><div>\n<table>\n");
    row(page, "study", &view.name);
    row(page, "database", ctx.location);
    // The objective the figures show comes first (`--objective` picks it).
    let many = view.objectives.len() > 1;
    let objectives: Vec<String> = view
        .objectives
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let shown = if i == 0 && many { ", shown" } else { "" };
            format!("{} ({}{shown})", o.metric, o.direction.as_str())
        })
        .collect();
    row(page, "objectives", &objectives.join(", "));
    let count = |s| view.count(s);
    row(
        page,
        "trials",
        &format!(
            "{} ({} complete, {} pruned, {} failed, {} running, {} queued{})",
            view.trials.len(),
            count(TrialState::Complete),
            count(TrialState::Pruned),
            count(TrialState::Failed),
            count(TrialState::Running),
            count(TrialState::Queued),
            if view.discarded > 0 {
                format!("; {} discarded, not shown", view.discarded)
            } else {
                String::new()
            }
        ),
    );
    let o = view.objective();
    let best = view
        .complete()
        .into_iter()
        .min_by(|a, b| o.direction.loss(a.1).total_cmp(&o.direction.loss(b.1)));
    match best {
        Some((t, v)) => row(
            page,
            &if view.objectives.len() > 1 {
                format!("best of `{}` ({})", o.metric, o.direction.as_str())
            } else {
                "best".to_string()
            },
            &format!(
                "{} = {} (trial {}: {})",
                o.metric,
                Precision::FULL.fmt(v),
                t.number,
                crate::fmt::fmt_params(&t.params)
            ),
        ),
        None => row(page, "best", "no complete trials yet"),
    }
    let starts: Vec<SystemTime> = view
        .trials
        .iter()
        .filter_map(|t| t.status.started())
        .collect();
    let ends: Vec<SystemTime> = view
        .trials
        .iter()
        .filter_map(|t| t.status.finished())
        .collect();
    if let (Some(a), Some(b)) = (starts.iter().min(), ends.iter().max())
        && let Ok(d) = b.duration_since(*a)
    {
        row(
            page,
            "ran for",
            &crate::fmt::fmt_duration(std::time::Duration::from_secs(d.as_secs())),
        );
    }
    row(page, "report made", ctx.generated);
    page.push_str("</table>\n");
    if let Some(space) = &view.space {
        space_table(page, space);
    }
    page.push_str("</div><div>\n");
    match ctx.study_file {
        Some(text) => {
            let _ = writeln!(
                page,
                "<h3>Study file{}</h3>\n<pre>{}</pre>",
                ctx.study_path
                    .map(|p| format!(" ({})", escape(p)))
                    .unwrap_or_default(),
                escape(text)
            );
        }
        None => why(
            page,
            "No study file is stored with this study (an ask-tell study): its space is read from its trials.",
        ),
    }
    page.push_str("</div></div>\n");
}

fn space_table(page: &mut String, space: &Space) {
    page.push_str(
        "<h3>Search space</h3>\n<table><tr><th>parameter</th><th>kind</th><th>range</th></tr>\n",
    );
    for p in space.params() {
        let (kind, range) = match &p.kind {
            ParamKind::Float { low, high, log, .. } => (
                if *log { "float, log" } else { "float" },
                format!("{low} to {high}"),
            ),
            ParamKind::Int { low, high, log, .. } => (
                if *log { "int, log" } else { "int" },
                format!("{low} to {high}"),
            ),
            ParamKind::Categorical { choices } => (
                "categorical",
                choices
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        };
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{kind}</td><td>{}</td></tr>",
            escape(&p.name),
            escape(&range)
        );
    }
    page.push_str("</table>\n");
}

fn failed_table(page: &mut String, view: &StudyView) {
    let failed: Vec<_> = view
        .trials
        .iter()
        .filter(|t| matches!(t.status, TrialStatus::Failed { .. }))
        .collect();
    if failed.is_empty() {
        return;
    }
    let _ = writeln!(
        page,
        "<p class=\"why\">{}</p>\n<table><tr><th>trial</th><th>why</th><th>params</th></tr>",
        escape(&if failed.len() > FAILURES_LISTED {
            format!(
                "The first {FAILURES_LISTED} of {} failed trials (`tune trials --state failed` lists them all):",
                failed.len()
            )
        } else {
            "The failed trials:".to_string()
        })
    );
    for t in failed.iter().take(FAILURES_LISTED) {
        let mut why = t.status.why().unwrap_or_default();
        if t.status.interrupted() {
            why.push_str(" (interrupted: its params ran again)");
        }
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            t.number,
            escape(&why),
            escape(&crate::fmt::fmt_params(&t.params))
        );
    }
    page.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::trial::{Direction, Objective};

    #[test]
    fn escape_makes_markup_text() {
        assert_eq!(
            escape(r#"<script>alert("x") & 'y'</script>"#),
            "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;"
        );
    }

    #[test]
    fn a_page_has_every_section_and_no_markup_from_the_study() {
        let view = StudyView::new(
            "<b>bold</b>",
            vec![Objective {
                metric: "loss".into(),
                direction: Direction::Minimize,
            }],
            None,
            Vec::new(),
            BTreeMap::new(),
            SystemTime::UNIX_EPOCH,
        );
        let ctx = ReportContext {
            study_file: Some("[study]\nname = \"<img src=x onerror=alert(1)>\"\n"),
            study_path: Some("s.toml"),
            location: "tune.db",
            generated: "now",
        };
        let page = html(&view, &ctx).expect("a page");
        for (id, _) in SECTIONS {
            assert!(page.contains(&format!("<section id=\"{id}\">")), "{id}");
        }
        assert!(!page.contains("<b>bold</b>") && !page.contains("<img"));
        assert!(!page.contains("<script"));
    }
}
