//! The trials table: each cell's text, which whole columns fit, and the table itself.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Span;
use ratatui::widgets::{Cell, HighlightSpacing, Paragraph, Row, Table, TableState};

use super::theme::{Theme, section, state_mark};
use super::{fit_title, truncate};
use crate::fmt::{Precision, fmt_duration};
use crate::trial::TrialState;
use crate::tui::state::{Column, Filter, TrialRow, UiState};

pub(in crate::tui) fn cell_text(col: &Column, t: &TrialRow, state: &UiState) -> String {
    match col {
        Column::Number => t.number.to_string(),
        Column::State => state_mark(t.state).to_string(),
        Column::Value => match (t.value(), t.state) {
            (Some(v), _) => Precision::CELL.fmt(v),
            (None, TrialState::Running) => t
                .latest()
                .map(|v| format!("({})", Precision::CELL.fmt(v)))
                .unwrap_or_default(),
            _ => String::new(),
        },
        Column::Duration => t.elapsed(state.now).map(fmt_duration).unwrap_or_default(),
        Column::Step => t
            .last
            .as_ref()
            .map(|r| r.step.to_string())
            .unwrap_or_default(),
        Column::Param(p) => t
            .params
            .get(p)
            .map(|v| Precision::LABEL.param(v))
            .unwrap_or_default(),
        Column::Why => t.why.clone().unwrap_or_default(),
        Column::Predicted => t
            .predicted
            .map(|p| {
                format!(
                    "{} [{}, {}]",
                    Precision::LABEL.fmt(p.value),
                    Precision::LABEL.fmt(p.low),
                    Precision::LABEL.fmt(p.high)
                )
            })
            .unwrap_or_default(),
    }
}

/// What a column of the trials table needs: its widest visible cell (never cut), its title's
/// width (a title may be shortened to [`TITLE_MIN`] with `…`), and whether it is the error
/// text, which takes whatever the row has left and is cut with `…` (prose, not a number).
struct ColumnNeed {
    cells: usize,
    title: usize,
    rest: bool,
}

/// The narrowest a shortened column title gets: three letters and `…`.
const TITLE_MIN: usize = 4;

/// Which columns of the table fit in `width` cells (one between columns), and how wide each
/// is: `(column index, width)` in column order.
///
/// Columns are never cut: a column is shown whole or left out. The trial number, its state and
/// its value come first, then the column sorted by, then the rest in order, each taken if it
/// still fits (a wide categorical column left out does not hide the narrow ones after it).
/// Titles are shortened before any column is left out, and get their full width back
/// wherever room is left.
fn fit_columns(needs: &[ColumnNeed], sort: usize, width: usize) -> Vec<(usize, usize)> {
    let n = needs.len();
    let least = |c: &ColumnNeed| {
        if c.rest {
            c.title
        } else {
            c.cells.max(c.title.min(TITLE_MIN))
        }
    };
    let full = |c: &ColumnNeed| {
        if c.rest {
            least(c)
        } else {
            c.cells.max(c.title)
        }
    };
    let first = (0..n.min(3)).chain((sort >= 3 && sort < n).then_some(sort));
    let others = (3..n).filter(|&k| k != sort);
    let mut widths: Vec<Option<usize>> = vec![None; n];
    let mut used = 0usize;
    for k in first.chain(others) {
        let w = least(&needs[k]) + usize::from(used > 0);
        if used + w <= width {
            used += w;
            widths[k] = Some(least(&needs[k]));
        }
    }
    // Full titles back, in column order, where they fit.
    for (k, w) in widths.iter_mut().enumerate() {
        if let Some(w) = w {
            let more = full(&needs[k]) - *w;
            if used + more <= width {
                used += more;
                *w += more;
            }
        }
    }
    // What is left goes to the titles still shortened, a cell each in turn.
    while used < width {
        let mut grew = false;
        for (k, w) in widths.iter_mut().enumerate() {
            if let Some(w) = w
                && !needs[k].rest
                && *w < full(&needs[k])
                && used < width
            {
                *w += 1;
                used += 1;
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    // The error text takes the rest of the row.
    if let Some(w) = widths
        .iter_mut()
        .zip(needs)
        .filter(|(_, c)| c.rest)
        .find_map(|(w, _)| w.as_mut())
    {
        *w += width - used;
    }
    widths
        .into_iter()
        .enumerate()
        .filter_map(|(k, w)| w.map(|w| (k, w)))
        .collect()
}

/// Prose in `width` cells, cut with `…` after the last whole character that fits, with no
/// space before the `…` (a lone `…` reads as a word of its own).
fn cut_prose(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
    t.truncate(t.trim_end().len());
    t.push('…');
    t
}

/// A column title in `width` cells: whole, or shortened with `…` (a sort mark kept).
fn abbreviate(title: &str, width: usize) -> String {
    if title.chars().count() <= width {
        return title.to_string();
    }
    match title.strip_suffix(['▲', '▼']) {
        Some(name) => {
            let mark = &title[name.len()..];
            let mut t = truncate(name, width.saturating_sub(1));
            t.push_str(mark);
            t
        }
        None => truncate(title, width),
    }
}

pub(super) fn render_table(frame: &mut Frame, area: Rect, state: &UiState, theme: &Theme) {
    let cols = state.columns();
    let tv = &state.table;
    let rows_h = area.height.saturating_sub(2) as usize;
    // The state keeps the cursor in view for its page; clamp again in case the page it knows
    // is stale (a resize not yet seen).
    let mut offset = tv
        .offset
        .min(state.order.len().saturating_sub(rows_h.max(1)));
    if tv.cursor >= offset + rows_h.max(1) {
        offset = tv.cursor + 1 - rows_h.max(1);
    }
    if tv.cursor < offset {
        offset = tv.cursor;
    }
    let best = state.best;
    // The cells of the visible rows only: the table never formats 10 000 rows a frame.
    let visible: Vec<(&TrialRow, Vec<String>)> = state
        .order
        .iter()
        .skip(offset)
        .take(rows_h)
        .map(|&i| {
            let t = &state.trials[i];
            (t, cols.iter().map(|c| cell_text(c, t, state)).collect())
        })
        .collect();
    // Whole columns only: each as wide as its widest visible cell, so no number or state word
    // is ever cut to something that reads as another one; the columns that do not fit are left
    // out whole (the title says how many; the trial view shows them all).
    let titles: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut t = c.title().to_string();
            if i == tv.sort {
                t.push(if tv.descending { '▼' } else { '▲' });
            }
            t
        })
        .collect();
    let needs: Vec<ColumnNeed> = cols
        .iter()
        .enumerate()
        .map(|(k, c)| ColumnNeed {
            cells: visible
                .iter()
                .map(|(_, v)| v[k].chars().count())
                .max()
                .unwrap_or(0)
                .max(match c {
                    // Steady widths for the columns every row has, so they do not jump.
                    Column::State => 10,
                    Column::Value => 9,
                    _ => 0,
                }),
            // One cell after the title, for the sort mark or air; the error text, last in
            // the row, needs none.
            title: c.title().chars().count() + usize::from(!matches!(c, Column::Why)),
            rest: matches!(c, Column::Why),
        })
        .collect();
    // The highlight mark takes one cell before the first column.
    let fit = fit_columns(&needs, tv.sort, area.width.saturating_sub(1) as usize);
    let header = Row::new(
        fit.iter()
            .map(|&(k, w)| Cell::from(abbreviate(&titles[k], w))),
    )
    .style(theme.header());
    let widths: Vec<Constraint> = fit
        .iter()
        .map(|&(_, w)| Constraint::Length(w as u16))
        .collect();
    let visible: Vec<(&TrialRow, Vec<String>)> = visible
        .into_iter()
        .map(|(t, cells)| {
            let cells = fit
                .iter()
                .map(|&(k, w)| match cols[k] {
                    // Prose, not a number: as much of the error as fits, marked as cut.
                    Column::Why => cut_prose(&cells[k], w),
                    _ => cells[k].clone(),
                })
                .collect();
            (t, cells)
        })
        .collect();
    let hidden = cols.len() - fit.len();
    let title = vec![
        Span::styled(" Trials ", theme.title()),
        Span::styled(
            format!(
                "{}{} · sort {} {} · filter {} ",
                state.order.len(),
                if tv.filter == Filter::All {
                    String::new()
                } else {
                    format!("/{}", state.trials.len())
                },
                cols.get(tv.sort).map(|c| c.title()).unwrap_or("#"),
                if tv.descending { "▼" } else { "▲" },
                tv.filter.label()
            ),
            theme.dim(),
        ),
    ];
    // Whole or not at all, like every optional part of a title.
    let left_out = if hidden > 0 {
        vec![vec![Span::styled(
            format!(
                "· {hidden} column{} left out (⏎ shows all) ",
                if hidden == 1 { "" } else { "s" }
            ),
            theme.dim(),
        )]]
    } else {
        Vec::new()
    };
    let block = section(fit_title(title, left_out, area.width), theme);
    let rows: Vec<Row> = visible
        .into_iter()
        .map(|(t, cells)| {
            let mut style = theme.state(t.state);
            if Some(t.number) == best {
                style = theme.best();
            }
            Row::new(cells.into_iter().map(Cell::from)).style(style)
        })
        .collect();
    if rows.is_empty() {
        let msg = if state.trials.is_empty() {
            " no trials yet"
        } else {
            " no trial matches the filter (f to change it)"
        };
        frame.render_widget(
            Paragraph::new(Span::styled(msg, theme.dim())).block(block),
            area,
        );
        return;
    }
    // A table state local to this frame: the rows are already the visible window, so the
    // selection is the cursor's place in it.
    let mut ts = TableState::default();
    if tv.selected.is_some() && tv.cursor >= offset {
        ts.select(Some(tv.cursor - offset));
    }
    frame.render_stateful_widget(
        Table::new(rows, widths)
            .header(header)
            .column_spacing(1)
            .row_highlight_style(theme.selected())
            .highlight_symbol("▸")
            .highlight_spacing(HighlightSpacing::Always)
            .block(block),
        area,
        &mut ts,
    );
}
