//! The trials table: its columns, the sort, the state filter, the selection and the window of
//! rows the screen shows. [`UiState::refresh_order`] rebuilds the rows after any change.

use std::cmp::Ordering;
use std::time::SystemTime;

use super::{TrialRow, UiState};
use crate::space::ParamValue;
use crate::trial::{Direction, TrialNumber, TrialState};

/// A column of the trials table; the params follow the fixed ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Column {
    Number,
    State,
    Value,
    Duration,
    Step,
    Param(String),
    /// Why a trial failed, on one line (the last column, shown once a trial has failed).
    Why,
    /// The predicted final value and its band (before `why`, shown once a trial has one).
    Predicted,
}

impl Column {
    pub fn title(&self) -> &str {
        match self {
            Column::Number => "#",
            Column::State => "state",
            Column::Value => "value",
            Column::Duration => "time",
            Column::Step => "step",
            Column::Param(p) => p,
            Column::Why => "why",
            Column::Predicted => "pred.",
        }
    }
}

/// The index of [`Column::Step`] in [`UiState::columns`].
pub(super) const STEP_COLUMN: usize = 4;

/// Which trials the table lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    All,
    Only(TrialState),
}

impl Filter {
    pub(super) fn next(self) -> Filter {
        match self {
            Filter::All => Filter::Only(TrialState::Running),
            Filter::Only(TrialState::Running) => Filter::Only(TrialState::Complete),
            Filter::Only(TrialState::Complete) => Filter::Only(TrialState::Pruned),
            Filter::Only(TrialState::Pruned) => Filter::Only(TrialState::Failed),
            Filter::Only(_) => Filter::All,
        }
    }

    pub fn admits(self, s: TrialState) -> bool {
        match self {
            Filter::All => true,
            Filter::Only(x) => x == s,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Filter::All => "all",
            Filter::Only(s) => s.as_str(),
        }
    }
}

/// The table's view: sort, filter, selection and scroll.
#[derive(Debug, Clone, PartialEq)]
pub struct TableView {
    /// Index into [`UiState::columns`].
    pub sort: usize,
    pub descending: bool,
    pub filter: Filter,
    /// The selected trial; the selection follows it when rows move.
    pub selected: Option<TrialNumber>,
    /// Its position in [`UiState::order`].
    pub cursor: usize,
    /// The cursor stays on the first row as rows come and go, until the user moves it (and
    /// again after `g`/Home): a live table reads like `top`.
    pub at_top: bool,
    /// The first row shown.
    pub offset: usize,
    /// Rows the table shows, set from the terminal size (for paging and scrolling).
    pub page: usize,
}

impl UiState {
    /// The table's columns: the fixed ones, then one per parameter.
    pub fn columns(&self) -> Vec<Column> {
        let mut c = vec![
            Column::Number,
            Column::State,
            Column::Value,
            Column::Duration,
            Column::Step,
        ];
        c.extend(self.param_names.iter().cloned().map(Column::Param));
        if self.predicted_any {
            c.push(Column::Predicted);
        }
        if self.failed_any {
            c.push(Column::Why);
        }
        c
    }

    /// The column sorted by, without building the column list (this runs per report).
    pub(super) fn sort_column(&self) -> Column {
        match self.table.sort {
            0 => Column::Number,
            1 => Column::State,
            2 => Column::Value,
            3 => Column::Duration,
            4 => Column::Step,
            k => match self.param_names.get(k - 5) {
                Some(p) => Column::Param(p.clone()),
                None if self.predicted_any && k == 5 + self.param_names.len() => Column::Predicted,
                None if self.failed_any
                    && k == 5 + self.param_names.len() + usize::from(self.predicted_any) =>
                {
                    Column::Why
                }
                None => Column::Number,
            },
        }
    }

    /// Rebuilds the table's rows after trials, the sort or the filter changed, and keeps the
    /// cursor on the selected trial.
    pub fn refresh_order(&mut self) {
        let col = self.sort_column();
        let filter = self.table.filter;
        let trials = &self.trials;
        self.order.clear();
        self.order
            .extend((0..trials.len()).filter(|&i| filter.admits(trials[i].state)));
        let desc = self.table.descending;
        let now = self.now;
        self.order.sort_by(|&a, &b| {
            let (ta, tb) = (&trials[a], &trials[b]);
            let ord = compare(&col, now, ta, tb, desc);
            // Ties fall back to the trial number, always ascending, so the order is total.
            ord.then(ta.number.cmp(&tb.number))
        });
        self.follow_selection();
    }

    fn follow_selection(&mut self) {
        if self.table.at_top {
            self.table.cursor = 0;
            self.table.selected = self.order.first().map(|&i| self.trials[i].number);
            self.scroll_to_cursor();
            return;
        }
        let pos = self
            .table
            .selected
            .and_then(|n| self.order.iter().position(|&i| self.trials[i].number == n));
        match pos {
            Some(p) => self.table.cursor = p,
            None => {
                self.table.cursor = self.table.cursor.min(self.order.len().saturating_sub(1));
                self.table.selected = self
                    .order
                    .get(self.table.cursor)
                    .map(|&i| self.trials[i].number);
            }
        }
        self.scroll_to_cursor();
    }

    fn scroll_to_cursor(&mut self) {
        let page = self.table.page.max(1);
        let c = self.table.cursor;
        if c < self.table.offset {
            self.table.offset = c;
        } else if c >= self.table.offset + page {
            self.table.offset = c + 1 - page;
        }
        let max_offset = self.order.len().saturating_sub(page);
        self.table.offset = self.table.offset.min(max_offset);
    }

    /// Sets how many table rows the screen shows (from the terminal size).
    pub fn set_page(&mut self, rows: usize) {
        self.table.page = rows.max(1);
        self.scroll_to_cursor();
    }

    pub(super) fn move_cursor(&mut self, delta: isize) {
        if self.order.is_empty() {
            return;
        }
        let last = self.order.len() - 1;
        let c = self.table.cursor as isize + delta;
        self.table.cursor = c.clamp(0, last as isize) as usize;
        self.table.at_top = self.table.cursor == 0;
        self.table.selected = Some(self.trials[self.order[self.table.cursor]].number);
        self.scroll_to_cursor();
    }

    pub(super) fn selected_row(&self) -> Option<&TrialRow> {
        self.table.selected.and_then(|n| self.trial(n))
    }

    /// Sorts by column `i`; choosing the sorted column again reverses it. Value sorts best
    /// first; the number newest first.
    pub fn sort_by(&mut self, i: usize) {
        let ncols = self.columns().len();
        if i >= ncols {
            return;
        }
        if self.table.sort == i {
            self.table.descending = !self.table.descending;
        } else {
            self.table.sort = i;
            self.table.descending = match self.sort_column() {
                Column::Number | Column::Duration | Column::Step => true,
                Column::Value | Column::Predicted => self.direction() == Direction::Maximize,
                Column::State | Column::Param(_) | Column::Why => false,
            };
        }
        self.refresh_order();
        let col = self.sort_column();
        self.notice = Some(format!(
            "sorted by {} {}",
            col.title(),
            if self.table.descending { "▼" } else { "▲" }
        ));
    }
}

fn cmp_opt_f64(a: Option<f64>, b: Option<f64>, desc: bool) -> Ordering {
    // Missing values sort last whichever the direction; NaN sorts with them.
    let a = a.filter(|v| !v.is_nan());
    let b = b.filter(|v| !v.is_nan());
    match (a, b) {
        (Some(x), Some(y)) => {
            let o = x.total_cmp(&y);
            if desc { o.reverse() } else { o }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

fn cmp_param(a: Option<&ParamValue>, b: Option<&ParamValue>, desc: bool) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => {
            let o = match (x.as_f64(), y.as_f64()) {
                (Some(p), Some(q)) => p.total_cmp(&q),
                _ => x.to_string().cmp(&y.to_string()),
            };
            if desc { o.reverse() } else { o }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

fn state_rank(s: TrialState) -> u8 {
    match s {
        TrialState::Running => 0,
        TrialState::Queued => 1,
        TrialState::Complete => 2,
        TrialState::Pruned => 3,
        TrialState::Failed => 4,
    }
}

fn compare(col: &Column, now: SystemTime, a: &TrialRow, b: &TrialRow, desc: bool) -> Ordering {
    let flip = |o: Ordering| if desc { o.reverse() } else { o };
    match col {
        Column::Number => flip(a.number.cmp(&b.number)),
        Column::State => flip(state_rank(a.state).cmp(&state_rank(b.state))),
        // A running trial sorts by its latest value, so the table ranks it among the others.
        Column::Value => {
            let va = a.value().or_else(|| a.latest());
            let vb = b.value().or_else(|| b.latest());
            cmp_opt_f64(va, vb, desc)
        }
        Column::Duration => cmp_opt_f64(
            a.elapsed(now).map(|d| d.as_secs_f64()),
            b.elapsed(now).map(|d| d.as_secs_f64()),
            desc,
        ),
        Column::Step => cmp_opt_f64(
            a.last.as_ref().map(|r| r.step as f64),
            b.last.as_ref().map(|r| r.step as f64),
            desc,
        ),
        Column::Param(p) => cmp_param(a.params.get(p), b.params.get(p), desc),
        Column::Why => {
            let o = a.why.cmp(&b.why);
            if desc { o.reverse() } else { o }
        }
        Column::Predicted => cmp_opt_f64(
            a.predicted.map(|p| p.value),
            b.predicted.map(|p| p.value),
            desc,
        ),
    }
}
