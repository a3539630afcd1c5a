//! The event fold: scheduler [`Event`]s (live, or replayed from the database by `watch`) into
//! the state. Every change to a row's state goes through `set_state` and `recount`, so the
//! counts never drift from the rows.

use std::collections::BTreeSet;
use std::time::SystemTime;

use super::table::STEP_COLUMN;
use super::{Finished, Slot, TrialRow, UiState, Update, keys};
use crate::events::Event;
use crate::trial::{Placement, Trial, TrialNumber, TrialState, TrialStatus};

impl UiState {
    /// Folds one scheduler event into the state.
    pub fn apply(&mut self, ev: &Event) {
        if self.apply_quiet(ev) {
            self.refresh_order();
        }
    }

    /// Folds a burst of updates in, sorting the table once at the end rather than per event
    /// (a `watch` of 10 000 trials starts with that many).
    pub fn apply_all<'a>(&mut self, updates: impl IntoIterator<Item = &'a Update>) {
        let mut reorder = false;
        for u in updates {
            match u {
                Update::Event(ev) => reorder |= self.apply_quiet(ev),
                Update::Notice(m) => self.notice = Some(m.clone()),
            }
        }
        if reorder {
            self.refresh_order();
        }
    }

    /// Applies one event; returns whether the table's order may have changed.
    fn apply_quiet(&mut self, ev: &Event) -> bool {
        match ev {
            Event::StudyStarted { info, existing, at } => {
                self.slots = info
                    .slots
                    .iter()
                    .map(|d| Slot {
                        device: d.clone(),
                        trial: None,
                    })
                    .collect();
                self.info = Some(info.clone());
                self.started_at = Some(*at);
                self.finished = None;
                for t in existing {
                    self.upsert_trial(t, None);
                }
                self.finished_before = self.counts.finished();
                self.recompute_best();
                true
            }
            Event::Checkpointed {
                number,
                step,
                bytes,
            } => {
                if let Some(&i) = self.index.get(number) {
                    self.trials[i].checkpoint = Some((*step, *bytes));
                }
                false
            }
            // Rows only where the trials are known (no row is made up for them here).
            Event::Lineage { child, parent } => {
                if let Some(&i) = self.index.get(child) {
                    self.trials[i].parent = Some(*parent);
                }
                if let Some(&p) = self.index.get(&parent.trial) {
                    let children = &mut self.trials[p].children;
                    if !children.contains(child) {
                        children.push(*child);
                    }
                }
                false
            }
            Event::TrialStarted {
                number,
                slot,
                device,
                params,
                at,
            } => {
                let i = self.row_index(*number, TrialState::Running);
                self.set_state(i, TrialState::Running);
                let known = *slot < self.slots.len();
                let row = &mut self.trials[i];
                row.params = params.clone();
                row.started_at = Some(*at);
                row.slot = known.then_some(*slot);
                row.device = Some(device.clone());
                row.status = TrialStatus::Running {
                    at: Placement {
                        slot: row.slot,
                        device: row.device.clone(),
                        ..Placement::default()
                    },
                    started: row.started_at,
                };
                self.note_params(i);
                self.occupy_slot(*slot, *number);
                true
            }
            Event::TrialReported {
                number,
                slot,
                report,
            } => {
                let value = self
                    .info
                    .as_ref()
                    .and_then(|info| report.metrics.get(&info.metric).copied());
                let i = self.row_index(*number, TrialState::Running);
                let row = &mut self.trials[i];
                if let Some(v) = value {
                    row.curve.push((report.step, v));
                    if let Some(e) = report.metrics.get(keys::EPOCH).filter(|e| e.is_finite()) {
                        row.curve_epochs.push((*e, v));
                    }
                }
                row.n_reports += 1;
                row.last = Some(report.clone());
                if value.is_some()
                    && let Some(info) = &self.info
                {
                    let curve: Vec<(f64, f64)> =
                        row.curve.iter().map(|&(s, v)| (s as f64, v)).collect();
                    row.predicted = crate::pruner::prediction::prediction(
                        &curve,
                        &self.references,
                        info.direction,
                        None,
                    );
                    self.predicted_any |= row.predicted.is_some();
                }
                if row.slot.is_none() && *slot < self.slots.len() {
                    row.slot = Some(*slot);
                }
                // Only the step column can change order, and only when sorting by it.
                self.table.sort == STEP_COLUMN
            }
            Event::TrialFinished {
                slot, trial, at, ..
            } => {
                self.upsert_trial(trial, Some(*at));
                if let Some(s) = self.slots.get_mut(*slot)
                    && s.trial == Some(trial.number)
                {
                    s.trial = None;
                }
                true
            }
            Event::GpuSampled { number, usage, .. } => {
                let i = self.row_index(*number, TrialState::Running);
                self.trials[i].gpu = Some(usage.clone());
                false
            }
            Event::Paused(p) => {
                self.paused = *p;
                self.pause_pending = None;
                false
            }
            Event::Stopping { graceful } => {
                self.stopping = Some(*graceful);
                false
            }
            Event::StudyFinished { reason, best, at } => {
                self.finished = Some(Finished {
                    reason: reason.clone(),
                    best: *best,
                    at: *at,
                });
                for s in &mut self.slots {
                    s.trial = None;
                }
                false
            }
        }
    }

    /// Marks the event source gone (the channel closed, the database vanished).
    pub fn disconnect(&mut self) {
        self.disconnected = true;
    }

    /// The index of trial `n`'s row; a trial not seen before gets one, counted in `state`.
    fn row_index(&mut self, n: TrialNumber, state: TrialState) -> usize {
        if let Some(&i) = self.index.get(&n) {
            return i;
        }
        self.trials.push(TrialRow::new(n, state));
        *self.counts.slot(state) += 1;
        let i = self.trials.len() - 1;
        self.index.insert(n, i);
        i
    }

    fn set_state(&mut self, i: usize, s: TrialState) {
        let old = self.trials[i].state;
        if old != s {
            *self.counts.slot(old) -= 1;
            *self.counts.slot(s) += 1;
            // An interrupted trial that runs again is no longer a finished one: its state
            // leaves the finished ones, whatever its status says until the next event.
            self.recount(i, |row| row.state = s);
        }
    }

    /// Changes row `i` through `change`, keeping [`Counts::uncounted`] in step with it: every
    /// change to what decides [`TrialRow::uncounted`] goes through here, so the count can
    /// never drift from the rows (and underflow when a trial runs again).
    ///
    /// [`Counts::uncounted`]: super::Counts::uncounted
    fn recount(&mut self, i: usize, change: impl FnOnce(&mut TrialRow)) {
        let row = &mut self.trials[i];
        let before = row.uncounted();
        change(row);
        match (before, row.uncounted()) {
            (false, true) => self.counts.uncounted += 1,
            (true, false) => self.counts.uncounted -= 1,
            _ => {}
        }
    }

    fn upsert_trial(&mut self, t: &Trial, at: Option<SystemTime>) {
        let state = t.state();
        let i = self.row_index(t.number, state);
        if state == TrialState::Complete || self.trials[i].state == TrialState::Complete {
            self.complete_version += 1;
        }
        self.set_state(i, state);
        self.recount(i, |row| {
            row.status = t.status.clone();
            row.discarded = t.discarded;
        });
        let was_best = self.best == Some(t.number);
        let row = &mut self.trials[i];
        row.params = t.params.clone();
        row.error = t.status.error();
        // The table's column is narrow: the last line of the error (the exception its
        // standard error ended with, else the reason) says the most in the least space; a
        // pruned trial's is where and why it was pruned.
        row.why = match t.status.pruned_reason() {
            Some(r) => Some(r.to_string()),
            None => row
                .error
                .as_deref()
                .and_then(|e| e.lines().rev().map(str::trim).find(|l| !l.is_empty()))
                .map(str::to_string),
        };
        if row.why.is_some() {
            self.failed_any = true;
        }
        let duration = t.duration(at.unwrap_or(self.now));
        row.duration = duration;
        if !t.logs.is_empty() {
            row.logs = t.logs.iter().map(|p| p.display().to_string()).collect();
        }
        if state.is_finished() {
            row.finished_at = at.or(t.status.finished()).or(row.finished_at);
            if row.started_at.is_none()
                && let (Some(end), Some(d)) = (row.finished_at, duration)
            {
                row.started_at = end.checked_sub(d);
            }
        }
        // A pruned trial keeps what it would have reached; any other end has no prediction.
        if state.is_finished() && state != TrialState::Pruned {
            row.predicted = None;
        }
        if state == TrialState::Complete
            && !t.discarded
            && self.referenced.insert(t.number)
            && let Some(info) = &self.info
            && let Some(k) = crate::pruner::forecast::Reference::new(
                row.curve
                    .iter()
                    .map(|&(s, v)| (s as f64, info.direction.loss(v))),
            )
        {
            self.references.push(k);
        }
        self.note_params(i);
        if was_best {
            self.recompute_best();
        } else {
            self.consider_best(i);
        }
    }

    /// Puts trial `n` on its slot. A slot the study did not declare ([`NO_SLOT`] from
    /// `watch`, for a trial of a worker it cannot see) puts it on none: the trial is still
    /// in the table, and no index from an event can grow the slot list.
    ///
    /// [`NO_SLOT`]: super::NO_SLOT
    fn occupy_slot(&mut self, slot: usize, n: TrialNumber) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.trial = Some(n);
        }
    }

    fn note_params(&mut self, i: usize) {
        let new: Vec<&String> = self.trials[i]
            .params
            .keys()
            .filter(|k| self.param_names.binary_search(k).is_err())
            .collect();
        if new.is_empty() {
            return;
        }
        let mut all: BTreeSet<String> = self.param_names.drain(..).collect();
        all.extend(new.into_iter().cloned().collect::<Vec<_>>());
        let sorted_by = self.sort_column();
        self.param_names = all.into_iter().collect();
        // Keep sorting by the same column when a new param column shifts the indices.
        if let Some(pos) = self.columns().iter().position(|c| *c == sorted_by) {
            self.table.sort = pos;
        }
    }

    fn consider_best(&mut self, i: usize) {
        let row = &self.trials[i];
        let Some(v) = row.value().filter(|v| v.is_finite()) else {
            return;
        };
        // A discarded trial is never the best: storage's `best` leaves it out too.
        if row.state != TrialState::Complete || row.discarded {
            return;
        }
        let better = match self.best_trial().and_then(|b| b.value()) {
            None => true,
            Some(b) => self.direction().better(v, b),
        };
        if better {
            self.best = Some(row.number);
        }
    }

    fn recompute_best(&mut self) {
        self.best = None;
        for i in 0..self.trials.len() {
            self.consider_best(i);
        }
    }
}
