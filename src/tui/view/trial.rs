//! The trial screen: one trial's params, run, reports, error and logs, and its curve against
//! the best trial's.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use super::charts::{curves_of, render_curves};
use super::render_footer;
use super::theme::{Theme, section, state_mark};
use crate::fmt::{Precision, fmt_duration};
use crate::trial::TrialState;
use crate::tui::state::{TrialRow, UiState};

pub(super) fn render_trial(
    frame: &mut Frame,
    area: Rect,
    state: &UiState,
    n: crate::trial::TrialNumber,
    theme: &Theme,
) {
    let [body, footer] = Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(area);
    render_footer(frame, footer, state, theme);
    let Some(t) = state.trial(n) else {
        frame.render_widget(Paragraph::new(format!(" trial {n} is not known")), body);
        return;
    };
    let metric = state
        .info
        .as_ref()
        .map(|i| i.metric.as_str())
        .unwrap_or("value");
    let mut title = vec![
        Span::styled(format!(" Trial #{} ", t.number), theme.title()),
        Span::styled(state_mark(t.state), theme.state(t.state)),
    ];
    if let Some(v) = t.value() {
        title.push(Span::raw(format!("  {metric} {}", Precision::CELL.fmt(v))));
    }
    if state.best == Some(t.number) {
        title.push(Span::styled("  ★ best", theme.best()));
    }
    title.push(Span::raw(" "));
    let block = Block::bordered()
        .border_style(theme.dim())
        .title(Line::from(title));
    let inner = block.inner(body);
    frame.render_widget(block, body);

    let mut lines: Vec<Line> = Vec::new();
    let key_w = t
        .params
        .keys()
        .map(|k| k.chars().count())
        .max()
        .unwrap_or(0)
        .max(8);
    lines.push(Line::from(Span::styled("params", theme.header())));
    for (k, v) in &t.params {
        // Six significant digits, as the CLI writes them: the full binary expansion
        // (0.20127142100802745) is noise to a reader.
        lines.push(Line::from(format!(
            "  {k:<key_w$} {}",
            crate::fmt::fmt_param(v)
        )));
    }
    if let Some((step, bytes)) = t.checkpoint {
        lines.push(Line::from(vec![
            Span::styled("ckpt    ", theme.header()),
            Span::raw(format!(
                "at step {step}, {} on disk",
                crate::checkpoint::fmt_bytes(bytes)
            )),
        ]));
    }
    if let Some(p) = t.parent {
        lines.push(Line::from(vec![
            Span::styled("parent  ", theme.header()),
            Span::raw(format!(
                "trial {} (from its checkpoint at step {})",
                p.trial, p.step
            )),
        ]));
    }
    if !t.children.is_empty() {
        let each: Vec<String> = t.children.iter().map(|c| format!("trial {c}")).collect();
        lines.push(Line::from(vec![
            Span::styled("children", theme.header()),
            Span::raw(format!(" {}", each.join(", "))),
        ]));
    }
    let mut when = Vec::new();
    if let Some(d) = &t.device {
        when.push(format!("on {d}"));
    }
    if let Some(s) = t.slot {
        when.push(format!("slot {s}"));
    }
    if let Some(d) = t.elapsed(state.now) {
        when.push(format!(
            "{} {}",
            if t.state == TrialState::Running {
                "running for"
            } else {
                "took"
            },
            fmt_duration(d)
        ));
    }
    lines.push(Line::from(vec![
        Span::styled("run     ", theme.header()),
        Span::raw(when.join(", ")),
    ]));
    if let Some(u) = &t.gpu {
        let t = u.telemetry();
        lines.push(Line::from(vec![
            Span::styled("gpu     ", theme.header()),
            Span::raw(if u.is_group() {
                format!(
                    "{} GPUs {:.0}% SM, peak {} on one GPU; now {:.0}% SM ({} samples)",
                    u.gpus.len(),
                    t.mean_sm_pct,
                    crate::telemetry::fmt_mb(t.peak_mem_mb),
                    u.now_sm_pct(),
                    u.samples()
                )
            } else {
                format!(
                    "{}; now {:.0}% SM, {} ({} samples)",
                    u.summary(),
                    u.now_sm_pct(),
                    crate::telemetry::fmt_mb(u.now_mem_mb()),
                    u.samples()
                )
            }),
        ]));
        // A group: each GPU on a line of its own, so that a rank that idles stands out.
        if u.is_group() {
            for (i, g) in &u.gpus {
                lines.push(Line::from(vec![
                    Span::raw("        "),
                    Span::styled(format!("cuda:{i:<3}"), theme.dim()),
                    Span::raw(format!(
                        "{}; now {:.0}% SM, {}",
                        g.summary(),
                        g.latest.sm_pct,
                        crate::telemetry::fmt_mb(g.latest.shown_mem_mb())
                    )),
                ]));
            }
        }
    }
    lines.push(Line::from(vec![
        Span::styled("reports ", theme.header()),
        Span::raw(match &t.last {
            Some(r) => format!("{} (last at step {})", t.n_reports, r.step),
            None => "none".into(),
        }),
    ]));
    if let Some(r) = &t.last {
        let m = r
            .metrics
            .iter()
            .map(|(k, v)| format!("{k}={}", Precision::LABEL.fmt(*v)))
            .collect::<Vec<_>>()
            .join("  ");
        lines.push(Line::from(vec![
            Span::styled("last    ", theme.header()),
            Span::raw(m),
        ]));
    }
    if t.state == TrialState::Pruned
        && let Some(w) = &t.why
    {
        // A paused trial (promotion-based ASHA) may resume: the word says which.
        let word = if t.status.paused() {
            "paused  "
        } else {
            "pruned  "
        };
        lines.push(Line::from(vec![
            Span::styled(word, theme.header()),
            Span::raw(w.clone()),
        ]));
    }
    if let Some(e) = &t.error {
        lines.push(Line::from(Span::styled(
            "error",
            theme.state(TrialState::Failed).add_modifier(Modifier::BOLD),
        )));
        // A traceback can be long: its first line (what happened) and its last lines (where)
        // matter most, and the log paths below must stay on screen.
        let cap = if inner.height < 40 { 8 } else { 20 };
        let all: Vec<&str> = e.lines().collect();
        let shown: Vec<String> = if all.len() <= cap {
            all.iter().map(|l| format!("  {l}")).collect()
        } else {
            let tail = cap - 2;
            std::iter::once(format!("  {}", all[0]))
                .chain(std::iter::once(format!(
                    "  … {} more lines …",
                    all.len() - 1 - tail
                )))
                .chain(all[all.len() - tail..].iter().map(|l| format!("  {l}")))
                .collect()
        };
        for l in shown {
            lines.push(Line::from(Span::styled(l, theme.state(TrialState::Failed))));
        }
    }
    lines.push(Line::from(Span::styled("logs", theme.header())));
    if t.logs.is_empty() {
        lines.push(Line::from(Span::styled(
            "  (none recorded yet)",
            theme.dim(),
        )));
    }
    for l in &t.logs {
        lines.push(Line::from(format!("  {l}")));
    }
    let w = inner.width.max(1) as usize;
    let need: usize = lines.iter().map(|l| l.width().max(1).div_ceil(w)).sum();
    let info = Paragraph::new(lines).wrap(Wrap { trim: false });
    let (info_area, chart_area) = if inner.width >= 110 {
        let [a, b] = Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)])
            .areas(inner);
        (a, b)
    } else {
        // The text takes what it needs, leaving the chart at least 7 rows where it can.
        let need = need as u16;
        let chart_min = if t.curve.is_empty() { 2 } else { 7 };
        let text_h = need.min(inner.height.saturating_sub(chart_min).max(inner.height / 2));
        let [a, b] =
            Layout::vertical([Constraint::Length(text_h), Constraint::Min(0)]).areas(inner);
        (a, b)
    };
    frame.render_widget(info, info_area);

    let best = state.best_trial().filter(|b| b.number != t.number);
    let rows: Vec<&TrialRow> = best.into_iter().chain(std::iter::once(t)).collect();
    let (curves, by_epoch) = curves_of(&rows);
    let chart_title = Line::from(vec![
        Span::styled(
            format!(" {metric} by {} ", if by_epoch { "epoch" } else { "step" }),
            theme.title(),
        ),
        Span::styled(
            best.map(|b| format!("vs •best #{} ", b.number))
                .unwrap_or_default(),
            theme.best(),
        ),
    ]);
    let block = section(chart_title, theme);
    if t.curve.is_empty() {
        frame.render_widget(
            Paragraph::new(Span::styled(format!(" no {metric} reported"), theme.dim()))
                .block(block),
            chart_area,
        );
        return;
    }
    let slot = [(t.slot.unwrap_or(0), t)];
    render_curves(
        frame,
        chart_area,
        block,
        state.direction(),
        best.is_some(),
        (&curves, by_epoch),
        &slot,
        theme,
    );
}
