//! The insight screen (issue 28): which view it shows, which parameter, pair and objective
//! are picked, and the parameter importances it draws, computed by [`crate::insight`]'s
//! PED-ANOVA (the same numbers `tune importance` prints) and cached here.
//!
//! What the views draw besides the importances (slices, pairs, parallel coordinates, the
//! slots' timeline) is read from the trials while drawing: it is a pass over the rows, as
//! cheap as the objective chart's. The importances are not: they are computed in [`refresh`],
//! which the terminal loop reaches through [`UiState::tick`] before each frame (never in
//! `render`), and only
//! - while the insight screen is open (nobody pays for a view nobody looks at),
//! - when the set of complete trials changed since the last computation, and then
//! - at once for a small study, but for a large one only after it grew by
//!   [`RECOMPUTE_GROWTH`] of its size or [`RECOMPUTE_AFTER`] passed: a study of 10 000 trials
//!   recomputes every 500 new complete trials or every 10 s, not every frame.
//!
//! [`refresh`]: UiState::refresh_insight

use std::time::{Duration, SystemTime};

use super::{Screen, UiState};
use crate::insight::ped_anova::PedAnova;
use crate::insight::{self, Importance};
use crate::space::{Param, Space};
use crate::trial::{Direction, Trial, TrialState};

/// A study this much larger (a share of its complete trials at the last computation) than at
/// the last computation gets its importances recomputed; below, it waits for the timer. The
/// ranking of thousands of trials barely moves with 5 % more, and PED-ANOVA's cost grows with
/// the trials.
pub const RECOMPUTE_GROWTH: f64 = 0.05;

/// Stale importances are recomputed after this long (by the injected clock) whatever the
/// growth, so that the last few trials of a large study show up.
pub const RECOMPUTE_AFTER: Duration = Duration::from_secs(10);

/// Which view the insight screen shows; `Tab` goes through them in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsightTab {
    /// The importances, and the objective against the picked parameter (its slice).
    Importance,
    /// The picked pair of parameters against each other, trials marked by how good they are.
    Pair,
    /// Parallel coordinates of the best trials.
    Parallel,
    /// Which trial ran on which slot when, with the idle gaps and the GPU's use.
    Timeline,
}

impl InsightTab {
    pub const ALL: [InsightTab; 4] = [
        InsightTab::Importance,
        InsightTab::Pair,
        InsightTab::Parallel,
        InsightTab::Timeline,
    ];

    pub fn label(self) -> &'static str {
        match self {
            InsightTab::Importance => "importance",
            InsightTab::Pair => "pair",
            InsightTab::Parallel => "parallel",
            InsightTab::Timeline => "timeline",
        }
    }

    fn index(self) -> usize {
        InsightTab::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }

    pub fn next(self) -> InsightTab {
        InsightTab::ALL[(self.index() + 1) % InsightTab::ALL.len()]
    }

    pub fn prev(self) -> InsightTab {
        let n = InsightTab::ALL.len();
        InsightTab::ALL[(self.index() + n - 1) % n]
    }
}

/// One objective's importances as last computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    /// The complete trials with a finite value of this objective it was computed from.
    pub trials: usize,
    /// Each parameter's share (summing to 1), highest first; empty with fewer than
    /// [`MIN_TRIALS`] trials.
    pub shares: Vec<(String, f64)>,
}

/// Fewer complete trials than this give no ranking: with one trial every share is equal (as
/// Optuna's), which would read as a finding.
pub const MIN_TRIALS: usize = 2;

/// The importances as last computed, and what they were computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportanceCache {
    /// One ranking per objective (the study's first, then its others), in order.
    pub rankings: Vec<Ranking>,
    /// The space they were computed in: the study's, else one inferred from the trials.
    pub space: Option<Space>,
    /// [`UiState`]'s count of changes to the complete trials when computed (`None`: never).
    version: Option<u64>,
    /// How many complete trials there were then.
    complete: usize,
    at: Option<SystemTime>,
    /// How many times they were computed (for tests of the throttle).
    pub computations: u64,
}

impl ImportanceCache {
    /// How many complete trials there were when they were computed.
    pub fn complete(&self) -> usize {
        self.complete
    }
}

/// What the insight screen shows and what it has computed.
#[derive(Debug, Clone, PartialEq)]
pub struct InsightView {
    pub tab: InsightTab,
    /// The picked parameter (`None`: the first of [`UiState::insight_params`]).
    pub param: Option<String>,
    /// The second parameter of the pair (`None`, or the same as `param`: the next one).
    pub pair: Option<String>,
    /// The picked objective: 0 is the study's metric, 1.. its others.
    pub objective: usize,
    pub cache: ImportanceCache,
}

impl Default for InsightView {
    fn default() -> Self {
        InsightView {
            tab: InsightTab::Importance,
            param: None,
            pair: None,
            objective: 0,
            cache: ImportanceCache::default(),
        }
    }
}

impl UiState {
    /// The space the insight views scale by: the study's as declared, else the one inferred
    /// from the trials at the last computation.
    pub fn insight_space(&self) -> Option<&Space> {
        self.info
            .as_ref()
            .and_then(|i| i.space.as_ref())
            .or(self.insight.cache.space.as_ref())
    }

    /// The parameters the keys go through, in order: by importance for the picked objective
    /// (as last computed), then the rest of the space in its order.
    pub fn insight_params(&self) -> Vec<&Param> {
        let Some(space) = self.insight_space() else {
            return Vec::new();
        };
        let mut out: Vec<&Param> = Vec::new();
        if let Some(r) = self.insight.cache.rankings.get(self.insight.objective) {
            out.extend(r.shares.iter().filter_map(|(n, _)| space.get(n)));
        }
        for p in space.params() {
            if !out.iter().any(|q| q.name == p.name) {
                out.push(p);
            }
        }
        out
    }

    /// The picked parameter and the other one of the pair (`None` with a single parameter).
    pub fn insight_pair(&self) -> Option<(&Param, Option<&Param>)> {
        let params = self.insight_params();
        let first = self
            .insight
            .param
            .as_deref()
            .and_then(|n| params.iter().find(|p| p.name == n))
            .or(params.first())
            .copied()?;
        let second = self
            .insight
            .pair
            .as_deref()
            .filter(|n| *n != first.name)
            .and_then(|n| params.iter().find(|p| p.name == n))
            .or_else(|| params.iter().find(|p| p.name != first.name))
            .copied();
        Some((first, second))
    }

    /// The objectives' names and directions, in the order [`InsightView::objective`] counts.
    pub fn objectives(&self) -> Vec<(String, Direction)> {
        let Some(info) = &self.info else {
            return Vec::new();
        };
        std::iter::once((info.metric.clone(), info.direction))
            .chain(info.others.iter().map(|o| (o.metric.clone(), o.direction)))
            .collect()
    }

    /// Opens the insight screen, computing its importances now if they are stale.
    pub(super) fn open_insight(&mut self) {
        self.screen = Screen::Insight;
        self.refresh_insight();
    }

    /// Moves the picked parameter (`pair`: the pair's second one) by `by` in
    /// [`UiState::insight_params`].
    pub(super) fn cycle_param(&mut self, by: isize, pair: bool) {
        let names: Vec<String> = self
            .insight_params()
            .iter()
            .map(|p| p.name.clone())
            .collect();
        if names.is_empty() {
            self.notice = Some("no parameter to pick yet".into());
            return;
        }
        let Some((first, second)) = self.insight_pair() else {
            return;
        };
        let (first, second) = (first.name.clone(), second.map(|p| p.name.clone()));
        if pair && second.is_none() {
            self.notice = Some("a pair needs two parameters; this space has one".into());
            return;
        }
        let current = if pair {
            second.as_deref()
        } else {
            Some(&*first)
        };
        let n = names.len() as isize;
        let mut i = current
            .and_then(|c| names.iter().position(|x| x == c))
            .unwrap_or(0) as isize;
        // The pair's two ends never meet: skip the other end.
        loop {
            i = (i + by).rem_euclid(n);
            let other = if pair {
                Some(&*first)
            } else {
                second.as_deref()
            };
            if !pair || Some(names[i as usize].as_str()) != other {
                break;
            }
        }
        let picked = names[i as usize].clone();
        if pair {
            self.insight.pair = Some(picked.clone());
            self.notice = Some(format!("pair: {first} × {picked}"));
        } else {
            // Picking the pair's other end swaps the two.
            if second.as_deref() == Some(picked.as_str()) {
                self.insight.pair = Some(first.clone());
            }
            self.insight.param = Some(picked.clone());
            self.notice = Some(format!("parameter: {picked}"));
        }
    }

    /// Picks the next objective of a multi-objective study.
    pub(super) fn cycle_objective(&mut self) {
        let objectives = self.objectives();
        if objectives.len() <= 1 {
            self.notice = Some("the study has one objective".into());
            return;
        }
        self.insight.objective = (self.insight.objective + 1) % objectives.len();
        let (metric, _) = &objectives[self.insight.objective];
        self.notice = Some(format!("objective: {metric}"));
    }

    /// Recomputes the importances if the insight screen is open, the complete trials changed
    /// and the throttle (see the module's doc) lets it.
    pub fn refresh_insight(&mut self) {
        if self.screen != Screen::Insight {
            return;
        }
        let cache = &self.insight.cache;
        if cache.version == Some(self.complete_version) {
            return;
        }
        let complete = self.counts.complete;
        let due = match (cache.version, cache.at) {
            (Some(_), Some(at)) => {
                let grown = complete.abs_diff(cache.complete);
                let step = ((cache.complete as f64 * RECOMPUTE_GROWTH) as usize).max(1);
                grown >= step || self.now.duration_since(at).unwrap_or_default() >= RECOMPUTE_AFTER
            }
            _ => true,
        };
        if due {
            self.insight.cache = self.compute_importances();
        }
    }

    fn compute_importances(&self) -> ImportanceCache {
        // The trials as `insight` takes them: the same filter as `tune importance` (complete,
        // not discarded, a finite value of the objective) is applied there. Only an inferred
        // space needs the other finished trials too.
        let declared = self.info.as_ref().and_then(|i| i.space.clone());
        let as_trial = |t: &super::TrialRow| {
            let mut trial = Trial::unstored(t.number, t.params.clone(), t.status.clone());
            trial.discarded = t.discarded;
            trial
        };
        let (complete, space): (Vec<Trial>, Option<Space>) = match declared {
            Some(space) => (
                self.trials
                    .iter()
                    .filter(|t| t.state == TrialState::Complete)
                    .map(as_trial)
                    .collect(),
                Some(space),
            ),
            None => {
                let finished: Vec<Trial> = self
                    .trials
                    .iter()
                    .filter(|t| t.state.is_finished() && !t.params.is_empty())
                    .map(as_trial)
                    .collect();
                let space = insight::infer_space(&finished);
                let complete = finished
                    .into_iter()
                    .filter(|t| t.state() == TrialState::Complete)
                    .collect();
                (complete, space)
            }
        };
        let directions: Vec<Direction> = self.objectives().iter().map(|o| o.1).collect();
        let method = PedAnova::default();
        let rankings = (0..directions.len())
            .map(|i| {
                let obs = insight::observations(&complete, &directions, i).unwrap_or_default();
                let shares = match &space {
                    Some(space) if obs.len() >= MIN_TRIALS => method.importances(space, &obs),
                    _ => Vec::new(),
                };
                Ranking {
                    trials: obs.len(),
                    shares,
                }
            })
            .collect();
        ImportanceCache {
            rankings,
            // Only an inferred space is kept: the study's is in its info.
            space: if self.info.as_ref().is_some_and(|i| i.space.is_some()) {
                None
            } else {
                space
            },
            version: Some(self.complete_version),
            complete: self.counts.complete,
            at: Some(self.now),
            computations: self.insight.cache.computations + 1,
        }
    }
}
