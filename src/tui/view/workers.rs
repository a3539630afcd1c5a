//! The workers: one row a slot, with its trial's params, progress, latest value, rate, data
//! wait and (where NVML sampled it) its GPU.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row, Table};

use super::theme::{Theme, section};
use super::{fit_items, param_items, truncate};
use crate::fmt::{Precision, fmt_count, fmt_rate};
use crate::tui::state::{TrialRow, UiState, keys};

pub(super) fn render_workers(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let metric = state
        .info
        .as_ref()
        .map(|i| i.metric.as_str())
        .unwrap_or("value");
    if area.height == 0 {
        return;
    }
    let busy = state.slots.iter().filter(|s| s.trial.is_some()).count();
    let shown = area.height.saturating_sub(2) as usize;
    let hidden = state.slots.len().saturating_sub(shown);
    let mut title = vec![
        Span::styled(" Workers ", theme.title()),
        Span::styled(format!("{busy}/{} busy ", state.slots.len()), theme.dim()),
    ];
    if hidden > 0 {
        title.push(Span::styled(
            format!("({hidden} more on a taller terminal) "),
            theme.dim(),
        ));
    }
    let block = section(Line::from(title), theme);
    let wide = area.width >= 120;
    // The GPU column exists only where NVML sampled a running trial: no driver, no column.
    let gpu_col = state
        .slots
        .iter()
        .filter_map(|s| s.trial.and_then(|n| state.trial(n)))
        .any(|t| t.gpu.is_some());
    let mut header = vec![
        Cell::from("slot"),
        Cell::from("device"),
        Cell::from("trial"),
        Cell::from("params"),
        Cell::from("progress"),
        Cell::from(truncate(metric, 9)),
        Cell::from("samp/s"),
        Cell::from("wait"),
    ];
    if gpu_col {
        header.push(Cell::from("gpu sm mem"));
    }
    let header = Row::new(header).style(theme.header());
    let progress_w: u16 = if wide { 30 } else { 16 };
    // The progress texts first: every bar starts in the same column, after the widest text.
    let texts: Vec<Option<(String, Option<f64>)>> = state
        .slots
        .iter()
        .map(|s| {
            let t = s.trial.and_then(|n| state.trial(n))?;
            Some(progress_text(t, wide))
        })
        .collect();
    let text_w = texts
        .iter()
        .flatten()
        .filter(|(_, r)| r.is_some())
        .map(|(t, _)| t.chars().count())
        .max()
        .unwrap_or(0);
    let gauge_w = (progress_w as usize).saturating_sub(text_w + 1);
    // A group's GPUs each get a cell of their own in the GPU column (see `gpu_cell`).
    let group = state
        .slots
        .iter()
        .filter_map(|s| s.trial.and_then(|n| state.trial(n)))
        .filter_map(|t| t.gpu.as_ref())
        .map(|u| if u.is_group() { u.gpus.len() + 1 } else { 0 })
        .max()
        .unwrap_or(0);
    let gpu_width = GPU_W + group as u16;
    let gpu_w: usize = if gpu_col { gpu_width as usize + 1 } else { 0 };
    // The device column fits the widest slot's device (a group as `cuda:0-3`).
    let devices: Vec<String> = state
        .slots
        .iter()
        .map(|s| short_device(&s.device))
        .collect();
    let device_w = devices
        .iter()
        .map(|d| d.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(7, 16);
    // What the params column gets of the width: the rest of the row after the fixed columns
    // and the spaces between the eight columns.
    let params_w = (area.width as usize)
        .saturating_sub(4 + device_w + 6 + progress_w as usize + 9 + 6 + 4 + 7 + gpu_w);
    let rows: Vec<Row> = state
        .slots
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let t = s.trial.and_then(|n| state.trial(n));
            let Some(t) = t else {
                return Row::new(vec![
                    Cell::from(format!("{i}")),
                    Cell::from(devices[i].clone()),
                    Cell::from("idle").style(theme.dim()),
                ]);
            };
            let progress = match texts.get(i).cloned().flatten() {
                Some((text, Some(ratio))) if gauge_w >= 3 => {
                    let (full, rest) = line_bar(ratio, gauge_w);
                    Line::from(vec![
                        Span::raw(format!("{text:<text_w$} ")),
                        Span::styled(full, theme.slot(i)),
                        Span::styled(rest, theme.dim()),
                    ])
                }
                Some((text, _)) => Line::raw(text),
                None => Line::raw(""),
            };
            let na = || "–".to_string();
            let mut cells = vec![
                Cell::from(format!("{i}")),
                Cell::from(devices[i].clone()),
                Cell::from(format!("#{}", t.number)).style(theme.slot(i)),
                Cell::from(fit_items(&param_items(&t.params), params_w)),
                Cell::from(progress),
                Cell::from(
                    t.latest()
                        .map(|v| Precision::CELL.fmt(v))
                        .unwrap_or_else(na),
                ),
                Cell::from(
                    t.metric(keys::SAMPLES_PER_S)
                        .map(fmt_rate)
                        .unwrap_or_else(na),
                ),
                Cell::from(
                    t.metric(keys::DATA_WAIT)
                        .map(|w| format!("{:.0}%", w * 100.0))
                        .unwrap_or_else(na),
                ),
            ];
            if gpu_col {
                // The GPU's utilisation and the trial's memory now (its own processes' where
                // NVML lists them): an idle GPU under a running trial says the trial waits on
                // data or on kernel launches.
                cells.push(Cell::from(t.gpu.as_ref().map(gpu_cell).unwrap_or_else(na)));
            }
            Row::new(cells)
        })
        .collect();
    let mut widths = vec![
        Constraint::Length(4),
        Constraint::Length(device_w as u16),
        Constraint::Length(6),
        Constraint::Fill(1),
        Constraint::Length(progress_w),
        Constraint::Length(9),
        Constraint::Length(6),
        Constraint::Length(4),
    ];
    if gpu_col {
        widths.push(Constraint::Length(gpu_width));
    }
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .column_spacing(1)
            .block(block),
        area,
    );
}

/// A running trial's progress as its worker row says it, and the fraction for its bar where
/// the trial says how far it goes: `ep 3/6` (`epoch 3/6` when `wide`), `step 1874/5000`,
/// `37%`; without a total, `step 1874` or `epoch 3.4`, and no bar.
fn progress_text(t: &TrialRow, wide: bool) -> (String, Option<f64>) {
    let Some(last) = &t.last else {
        return ("starting".into(), None);
    };
    let (ep, st) = if wide {
        ("epoch ", "step ")
    } else {
        ("ep ", "")
    };
    match t.progress() {
        Some((done, total, "ep")) => (
            format!("{ep}{}/{}", fmt_count(done), fmt_count(total)),
            Some(done / total),
        ),
        Some((done, total, "step")) => (
            format!("{st}{}/{}", fmt_count(done), fmt_count(total)),
            Some(done / total),
        ),
        Some((done, total, _)) => (format!("{:.0}%", 100.0 * done / total), Some(done / total)),
        None => match t.metric(keys::EPOCH).filter(|e| e.is_finite()) {
            Some(e) => (format!("epoch {}", fmt_count(e)), None),
            None => (format!("step {}", fmt_count(last.step as f64)), None),
        },
    }
}

/// The worker rows' GPU column: "100% 65.6G" (a group's per-GPU levels come before it).
const GPU_W: u16 = 10;

/// A running trial's GPU now: its utilisation and memory ("62% 2.1G"); for a group, first one
/// level a GPU ("▅▇ 62% 2.1G": cuda:0 at about 60 %, cuda:1 at about 90 %), so that a GPU of
/// the group that idles stands out, then the group's mean utilisation and the most memory on
/// any one of its GPUs.
fn gpu_cell(u: &crate::telemetry::SlotUsage) -> String {
    let now = format!("{:>3.0}% {}", u.now_sm_pct(), fmt_gb_short(u.now_mem_mb()));
    if !u.is_group() {
        return now;
    }
    const LEVELS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let levels: String = u
        .gpus
        .iter()
        .map(|(_, g)| {
            let pct = g.latest.sm_pct;
            let pct = if pct.is_finite() {
                pct.clamp(0.0, 100.0)
            } else {
                0.0
            };
            // Any work at all shows at least the lowest block; only an idle GPU is blank.
            let level = ((pct / 100.0) * 8.0).round() as usize;
            LEVELS[if pct > 0.0 { level.max(1) } else { 0 }]
        })
        .collect();
    format!("{levels} {now}")
}

/// A slot's device in few characters: `cuda:0` and `cpu` as they are, a group of GPUs in
/// index order as a range (`cuda:0-3`), any other group with its indices joined (`cuda:0+2`).
pub(super) fn short_device(device: &str) -> String {
    let gpus = crate::devices::cuda_indices(device);
    if gpus.len() < 2 {
        return device.to_string();
    }
    let run = gpus.windows(2).all(|w| w[1] == w[0] + 1);
    if run && gpus.len() > 2 {
        format!("cuda:{}-{}", gpus[0], gpus[gpus.len() - 1])
    } else {
        let each: Vec<String> = gpus.iter().map(|g| g.to_string()).collect();
        format!("cuda:{}", each.join("+"))
    }
}

/// GPU memory in a few characters: "812M", "2.1G", "65.6G".
fn fmt_gb_short(mb: f64) -> String {
    if mb < 1000.0 {
        format!("{mb:.0}M")
    } else {
        format!("{:.1}G", mb / 1024.0)
    }
}

/// A thin gauge for rows stacked one above the other (blocks would merge into one slab):
/// heavy line for the done part, in halves of a cell, light line for the rest.
fn line_bar(ratio: f64, width: usize) -> (String, String) {
    let ratio = if ratio.is_finite() {
        ratio.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let halves = (ratio * width as f64 * 2.0).round() as usize;
    let mut done = "━".repeat(halves / 2);
    if halves % 2 == 1 {
        done.push('╸');
    }
    let used = halves.div_ceil(2);
    (done, "─".repeat(width.saturating_sub(used)))
}
