//! Pruners decide from intermediate reports whether a running trial should stop early.
//!
//! A pruner is pure: the reports already stored (of this trial and of every other trial of the
//! study, finished or running) go in, a decision comes out. No clock, no I/O, and nothing kept
//! between calls but a memo of per-trial summaries that never changes an answer, so a resumed
//! study rebuilds every decision from storage and keeps its rungs. This module holds the seam
//! ([`Pruner`], [`PruneContext`]), the `[pruner]` table of a study ([`PrunerConfig`], checked
//! once by [`PrunerConfig::check`]), and what every rule shares: a trial's curve in the
//! study's resource unit, the one ordering of values (a loss, NaN worst) and the memo that
//! makes a decision cost O(trials). The rules themselves live in `median`, `asha` and
//! `hyperband`; stopping the trial and recording it as pruned is the scheduler's work, not
//! ours.

mod asha;
pub mod forecast;
mod hyperband;
mod median;
pub mod pbt;
pub mod prediction;
mod predictive;

#[cfg(test)]
mod testkit;

use std::cmp::Ordering;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::trial::{Direction, Report, TrialNumber, TrialState};

pub use asha::AshaPruner;
pub use hyperband::HyperbandPruner;
pub use median::MedianPruner;
pub use pbt::{PbtConfig, PbtPruner};
pub use predictive::ForecastPruner;

/// The reports of one trial, as a pruner sees them.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialCurve {
    pub number: TrialNumber,
    pub state: TrialState,
    pub reports: Vec<Report>,
    /// Where its params sit in the search space (empty when not known).
    pub place: forecast::Place,
}

/// Everything a pruner may look at when trial `trial` has just reported.
pub struct PruneContext<'a> {
    pub direction: Direction,
    /// The objective's key in the reports.
    pub metric: &'a str,
    /// The key whose value is the trial's resource (`"step"` means the report's step); the
    /// scheduler passes [`PrunerConfig::resource`].
    pub resource: &'a str,
    /// The trial that reported; its reports are the last entry's in `trials` with this number.
    pub trial: TrialNumber,
    /// Every trial of the study with at least one report (including `trial`), in any state.
    pub trials: &'a [TrialCurve],
    /// The first attempt of each re-run among them (a trial missing here is its own first):
    /// an interrupted or promoted trial's params run again under a new number, and rules that
    /// place a trial by its number (Hyperband's bracket) place the re-run as its first run.
    pub origins: &'a Origins,
}

/// Re-run → the number of its first attempt (see [`PruneContext::origins`]).
pub type Origins = BTreeMap<TrialNumber, TrialNumber>;

/// No re-runs.
pub static NO_ORIGINS: Origins = BTreeMap::new();

impl PruneContext<'_> {
    /// The number of trial `n`'s first attempt.
    pub fn origin(&self, n: TrialNumber) -> TrialNumber {
        self.origins.get(&n).copied().unwrap_or(n)
    }

    /// The reports of the trial under decision.
    pub fn own(&self) -> &[Report] {
        self.trials
            .iter()
            .find(|t| t.number == self.trial)
            .map(|t| t.reports.as_slice())
            .unwrap_or(&[])
    }

    /// The resource a report stands at, in the study's unit.
    pub fn resource_of(&self, r: &Report) -> Option<f64> {
        if self.resource == "step" {
            Some(r.step as f64)
        } else {
            r.metrics.get(self.resource).copied()
        }
    }

    /// A trial's curve: its reports that carry both the resource and the objective, in report
    /// order, as (resource, loss) points. Reports without either (a training-loss-only report,
    /// a report before the resource key exists) say nothing a pruner can use and are skipped.
    pub(crate) fn curve<'b>(&'b self, reports: &'b [Report]) -> impl Iterator<Item = Point> + 'b {
        reports.iter().filter_map(|r| self.point(r))
    }

    /// One report as a point of a curve (see [`PruneContext::curve`]), if it is one.
    pub(crate) fn point(&self, r: &Report) -> Option<Point> {
        let resource = self.resource_of(r)?;
        let value = *r.metrics.get(self.metric)?;
        // A NaN resource cannot be placed on any rung; treat the report as absent.
        if resource.is_nan() {
            return None;
        }
        Some(Point {
            resource,
            loss: self.direction.loss(value),
        })
    }
}

/// One report of a trial, reduced to what pruning compares: where the trial stood and how good
/// it was there, as a loss (lower is better). `loss` may be NaN; compare with [`cmp_loss`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    pub resource: f64,
    pub loss: f64,
}

/// The one ordering of losses in pruning: ascending, NaN last (worst).
///
/// Hazard: `Direction::loss(NaN)` is `-NaN` when maximising, and `f64::total_cmp` orders `-NaN`
/// before every number, so a diverged trial would look like the best one. Checking `is_nan`
/// first makes every NaN the worst, whatever its sign bit.
pub(crate) fn cmp_loss(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.total_cmp(&b),
    }
}

/// Whether a curve has reached `resource`. Rung resources are products like `0.1 * 3^2`,
/// which floating point makes `0.9000000000000001`; a trial that reported exactly 0.9 has
/// reached that rung, so the comparison allows a relative hair of slack.
pub(crate) fn reached(at: f64, resource: f64) -> bool {
    at >= resource - resource.abs() * 1e-9
}

/// Per-trial summaries (a trial's values at the rungs, its best value by resource), memoised so
/// that a decision costs O(trials) rather than O(every report of the study).
///
/// A pure cache: decisions never depend on it, which the tests pin by asking a freshly built
/// pruner every decision too. Hazard it guards against: a summary reused for a curve that
/// changed. Stored reports are append-only, and the scheduler's curves only grow, so a trial
/// with the same number of reports and the same last report (step and objective) has the same
/// curve; any other change, or a change of the study's metric, resource or direction,
/// recomputes.
pub(crate) struct Memo<S> {
    context: Option<(String, String, Direction)>,
    entries: HashMap<TrialNumber, (Stamp, S)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Stamp {
    len: usize,
    last_step: Option<u64>,
    last_value: Option<u64>,
}

impl<S> Memo<S> {
    pub fn new() -> Memo<S> {
        Memo {
            context: None,
            entries: HashMap::new(),
        }
    }

    /// Forgets everything when the context's metric, resource or direction differ from the
    /// last call's.
    pub fn enter(&mut self, ctx: &PruneContext<'_>) {
        let same = self
            .context
            .as_ref()
            .is_some_and(|(m, r, d)| m == ctx.metric && r == ctx.resource && *d == ctx.direction);
        if !same {
            self.entries.clear();
            self.context = Some((
                ctx.metric.to_string(),
                ctx.resource.to_string(),
                ctx.direction,
            ));
        }
    }

    /// The summary of `trial`, computed by `summarise` unless the memo already holds it.
    pub fn get(
        &mut self,
        ctx: &PruneContext<'_>,
        trial: &TrialCurve,
        summarise: impl FnOnce(&TrialCurve) -> S,
    ) -> &S {
        let last = trial.reports.last();
        let stamp = Stamp {
            len: trial.reports.len(),
            last_step: last.map(|r| r.step),
            last_value: last
                .and_then(|r| r.metrics.get(ctx.metric))
                .map(|v| v.to_bits()),
        };
        let slot = match self.entries.entry(trial.number) {
            Entry::Occupied(o) => {
                let e = o.into_mut();
                if e.0 != stamp {
                    *e = (stamp, summarise(trial));
                }
                e
            }
            Entry::Vacant(v) => v.insert((stamp, summarise(trial))),
        };
        &slot.1
    }
}

/// The seam between the scheduler and the pruning rules.
pub trait Pruner: Send {
    /// Whether `ctx.trial` should stop now, and if so why. Asked after each stored report of
    /// a running trial; the answer depends on `ctx` alone, so asking again with the same
    /// context (after a resume, say) gives the same answer.
    fn decide(&mut self, ctx: &PruneContext<'_>) -> Option<Prune>;

    /// Whether `ctx.trial` should stop now: [`Pruner::decide`] without its reason.
    fn should_prune(&mut self, ctx: &PruneContext<'_>) -> bool {
        self.decide(ctx).is_some()
    }

    /// Whether this pruner ever looks at the reports: `false` lets the engine keep no curves
    /// at all (a study without a pruner then costs nothing per report beyond storing it).
    fn judges(&self) -> bool {
        true
    }

    /// Whether a trial this pruner stops at a rung is paused there (checkpointed and resumable)
    /// rather than pruned: promotion-based ASHA (`mode = "promote"`). A diverged trial (NaN)
    /// is pruned all the same.
    fn pauses(&self) -> bool {
        false
    }

    /// Which of the `paused` trials (paused at a rung, see [`Pruner::pauses`]) has earned its
    /// resumption now, if any; `ctx.trial` is any of them, and `ctx.trials` every curve of the
    /// study as for [`Pruner::decide`].
    fn promotion(&mut self, _ctx: &PruneContext<'_>, _paused: &[TrialNumber]) -> Option<Promotion> {
        None
    }
}

/// A paused trial to resume, and why: at rung `rung` it ranks `rank` of the `of` trials that
/// have reached the rung, within the top `keep` (a `1/eta` share, at least one).
#[derive(Debug, Clone, PartialEq)]
pub struct Promotion {
    pub trial: TrialNumber,
    pub rung: usize,
    pub rank: usize,
    pub of: usize,
    pub keep: usize,
    pub eta: f64,
}

impl std::fmt::Display for Promotion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rung {}: {} of {} trials there, in the top 1/{}",
            self.rung,
            ordinal(self.rank),
            self.of,
            crate::fmt::fmt_value(Some(self.eta))
        )
    }
}

/// Never prunes.
pub struct NoPruner;

impl Pruner for NoPruner {
    fn decide(&mut self, _ctx: &PruneContext<'_>) -> Option<Prune> {
        None
    }

    fn judges(&self) -> bool {
        false
    }
}

/// A decision to stop a trial, with its reason: where the trial stood and what the rule found
/// there. Its `Display` is what the user reads after "pruned ": `at epoch 3 (rung 1: 3rd of 4
/// trials there, below the top 1/3)`. The scheduler stores that text with the trial, so
/// `tune show` and `tune watch` can tell it later.
#[derive(Debug, Clone, PartialEq)]
pub struct Prune {
    /// The key trials are judged by: `step`, `epoch` or another report key.
    pub resource: String,
    /// Where the trial stood, in that key's unit.
    pub at: f64,
    pub why: PruneWhy,
}

/// What a pruning rule found.
#[derive(Debug, Clone, PartialEq)]
pub enum PruneWhy {
    /// ASHA, or one bracket of Hyperband: at rung `rung` (counted from 0, the rung at the
    /// first resource of the schedule), it ranked `rank` of the `of` trials that have reached
    /// that rung, and only the top `keep` (a `1/eta` share) go on.
    Rung {
        bracket: Option<usize>,
        rung: usize,
        rank: usize,
        of: usize,
        keep: usize,
        eta: f64,
    },
    /// The median rule: its best value so far (`best`) is worse than `median`, the median of
    /// the best values that `of` complete trials had reached by the same resource; both in
    /// the objective's own terms (not as losses).
    Median { best: f64, median: f64, of: usize },
    /// Stopping by prediction: the forecast of its final value (`predicted`, with the better
    /// edge of its band at `optimistic`) cannot beat `best`, the best final value of the `of`
    /// complete trials it was forecast from; all in the objective's own terms.
    Forecast {
        predicted: f64,
        optimistic: f64,
        best: f64,
        of: usize,
    },
    /// Population-based training: at its point it ranked `rank` of the `of` latest trials
    /// there, in the bottom `quantile`; a child continues from one of `parents` (the top
    /// `quantile` that did better, best first) with explored params.
    Exploit {
        rank: usize,
        of: usize,
        quantile: f64,
        parents: Vec<TrialNumber>,
    },
    /// Its value is NaN: a diverged trial cannot win.
    NotANumber,
}

impl Prune {
    /// A decision of `ctx`'s rule at `at`.
    pub(crate) fn at(ctx: &PruneContext<'_>, at: f64, why: PruneWhy) -> Prune {
        Prune {
            resource: ctx.resource.to_string(),
            at,
            why,
        }
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

impl std::fmt::Display for Prune {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let num = |v: f64| crate::fmt::fmt_value(Some(v));
        write!(f, "at {} {} (", self.resource, num(self.at))?;
        match &self.why {
            PruneWhy::Rung {
                bracket,
                rung,
                rank,
                of,
                // The top `keep` is the `1/eta` share rounded down (at least one): the share
                // is what the user set.
                keep: _,
                eta,
            } => {
                if let Some(b) = bracket {
                    write!(f, "bracket {b}, ")?;
                }
                write!(
                    f,
                    "rung {rung}: {} of {of} trials there, below the top 1/{})",
                    ordinal(*rank),
                    num(*eta)
                )
            }
            PruneWhy::Median { best, median, of } => write!(
                f,
                "its best {} is worse than the median {} of {of} complete trial{} there)",
                num(*best),
                num(*median),
                if *of == 1 { "" } else { "s" }
            ),
            PruneWhy::Forecast {
                predicted,
                optimistic,
                best,
                of,
            } => write!(
                f,
                "forecast to end at {} (at best {}), which cannot beat the best {} of {of} \
                 complete trial{})",
                num(*predicted),
                num(*optimistic),
                num(*best),
                if *of == 1 { "" } else { "s" }
            ),
            PruneWhy::Exploit {
                rank, of, quantile, ..
            } => write!(
                f,
                "{} of {of} trials there, in the bottom {})",
                ordinal(*rank),
                share_text(*quantile)
            ),
            PruneWhy::NotANumber => write!(f, "its value is NaN)"),
        }
    }
}

/// A share as people say it: `1/4` for 0.25, `30%` where it is not one over a whole number.
fn share_text(q: f64) -> String {
    let inv = 1.0 / q;
    if (inv - inv.round()).abs() < 1e-9 {
        format!("1/{}", inv.round())
    } else {
        format!("{}%", crate::fmt::fmt_value(Some(q * 100.0)))
    }
}

/// The key whose value is a trial's resource when the study names none: the report's step.
pub const DEFAULT_RESOURCE: &str = "step";

fn default_resource() -> String {
    DEFAULT_RESOURCE.to_string()
}

/// The `[pruner]` table of a study, as written.
///
/// ```toml
/// [pruner]
/// kind = "asha"            # "none" | "median" | "asha" | "hyperband" | "forecast"
/// resource = "epoch"       # "step" (the report's step, the default) or a report key
/// min_resource = 1
/// reduction_factor = 3
/// ```
///
/// Every parameter has a default; [`PrunerConfig::check`] validates the values once, and
/// [`build`] expects a checked config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "lowercase", from = "TaggedConfig")]
pub enum PrunerConfig {
    #[default]
    None,
    Median(MedianConfig),
    Asha(AshaConfig),
    Hyperband(HyperbandConfig),
    Forecast(ForecastConfig),
    Pbt(PbtConfig),
}

/// What `[pruner]` deserialises through. Hazard: serde lets an internally tagged *unit*
/// variant ignore every other key, so `kind = "none"` with a stray `warmup_steps` would pass
/// silently; an empty struct variant with `deny_unknown_fields` rejects it, and the public
/// enum keeps its plain `None`.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum TaggedConfig {
    None {},
    Median(MedianConfig),
    Asha(AshaConfig),
    Hyperband(HyperbandConfig),
    Forecast(ForecastConfig),
    Pbt(PbtConfig),
}

impl From<TaggedConfig> for PrunerConfig {
    fn from(c: TaggedConfig) -> Self {
        match c {
            TaggedConfig::None {} => PrunerConfig::None,
            TaggedConfig::Median(c) => PrunerConfig::Median(c),
            TaggedConfig::Asha(c) => PrunerConfig::Asha(c),
            TaggedConfig::Hyperband(c) => PrunerConfig::Hyperband(c),
            TaggedConfig::Forecast(c) => PrunerConfig::Forecast(c),
            TaggedConfig::Pbt(c) => PrunerConfig::Pbt(c),
        }
    }
}

/// The median rule: after warm-up, a trial whose best value so far is worse than the median of
/// the best values that complete trials had reached by the same resource is pruned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MedianConfig {
    /// Nothing is pruned before the trial's resource reaches this (in the resource's unit,
    /// steps by default; the name is Optuna's `n_warmup_steps`).
    pub warmup_steps: f64,
    /// Nothing is pruned until this many complete trials have reached the same resource
    /// (Optuna's `n_startup_trials`).
    pub min_trials: usize,
    /// A trial is judged at most once per `interval` of resource after warm-up.
    pub interval: f64,
    pub resource: String,
}

impl Default for MedianConfig {
    fn default() -> Self {
        // Optuna's defaults, which users of the median rule know.
        MedianConfig {
            warmup_steps: 0.0,
            min_trials: 5,
            interval: 1.0,
            resource: default_resource(),
        }
    }
}

/// Asynchronous successive halving (ASHA, Li et al. 2020): rung `k` sits at resource
/// `min_resource * reduction_factor^(min_early_stopping_rate + k)`; a trial reaching a rung
/// goes on only if it is in the top `1/reduction_factor` of the trials that reached that rung.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AshaConfig {
    pub min_resource: f64,
    /// The resource of a full trial; rungs at or past it are not decision points (a trial
    /// there has finished, and pruning it would only mislabel a complete trial).
    pub max_resource: Option<f64>,
    pub reduction_factor: f64,
    /// `s` in the paper: the first rung sits at `min_resource * reduction_factor^s`.
    pub min_early_stopping_rate: u32,
    pub resource: String,
    /// What happens to a trial outside the top at a rung: stopped for good (`stop`), or
    /// paused with a checkpoint and resumed once enough later trials rank below it
    /// (`promote`, Li et al.'s original ASHA).
    pub mode: AshaMode,
}

/// What ASHA does with a trial outside the top `1/reduction_factor` at a rung.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AshaMode {
    /// Prune it: the trial ends there for good.
    #[default]
    Stop,
    /// Pause it (its run checkpoints and stops); when a slot is free, a paused trial that now
    /// ranks in the top `1/reduction_factor` of its rung, counting every trial that has
    /// reached the rung since, is resumed from its checkpoint before any new trial starts.
    Promote,
}

impl Default for AshaConfig {
    fn default() -> Self {
        AshaConfig {
            min_resource: 1.0,
            max_resource: None,
            // η = 3 as in the Hyperband paper: each rung keeps a third.
            reduction_factor: 3.0,
            min_early_stopping_rate: 0,
            resource: default_resource(),
            mode: AshaMode::Stop,
        }
    }
}

/// Hyperband over ASHA brackets: bracket `b` is ASHA with `min_early_stopping_rate = b`, a
/// trial's bracket follows from its trial number, and trials compete only within a bracket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HyperbandConfig {
    pub min_resource: f64,
    /// The resource of a full trial: required, since it fixes the number of brackets.
    pub max_resource: Option<f64>,
    pub reduction_factor: f64,
    /// How many brackets to use, the most aggressive first; all of them when absent
    /// (`floor(log_η(max_resource / min_resource)) + 1`).
    pub brackets: Option<u32>,
    pub resource: String,
    /// As ASHA's: prune a trial outside the top of its bracket's rung (`stop`), or pause it
    /// and resume it once it has earned it there (`promote`).
    pub mode: AshaMode,
}

impl Default for HyperbandConfig {
    fn default() -> Self {
        HyperbandConfig {
            min_resource: 1.0,
            max_resource: None,
            reduction_factor: 3.0,
            brackets: None,
            resource: default_resource(),
            mode: AshaMode::Stop,
        }
    }
}

/// Stopping by prediction: a trial stops when the forecast of its final value, from the curves
/// of the complete trials, cannot beat the best of them even at the optimistic edge of its band
/// (`pruner::predictive`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ForecastConfig {
    /// No trial is judged before its resource reaches this.
    pub min_resource: f64,
    /// The resource of a full trial: required (a builtin study fills in its epochs), since
    /// the forecast is of the value there.
    pub max_resource: Option<f64>,
    /// Complete trials needed before anything is pruned: the forecasts learn from them.
    pub min_trials: usize,
    /// The band a forecast must clear: a trial stops when the better edge of this two-sided
    /// band is still worse than the best complete trial (0.99: a 0.5 % chance left, one side).
    /// High, because a trial is judged at every report: at 0.9, its 5 % per decision compound
    /// over a long curve's many reports into good trials stopped by chance. 0.99 over 0.9 on
    /// `tune bench multifidelity` (12 problems, 12 seeds, @30): gp 74.6 → 83.9, tpe 50.7 →
    /// 53.2, random 8.8 → 4.9 (it gets fewer complete trials, where it needs many);
    /// docs/experiments/learning-curves.md.
    pub confidence: f64,
    pub resource: String,
}

impl Default for ForecastConfig {
    fn default() -> Self {
        ForecastConfig {
            min_resource: 1.0,
            max_resource: None,
            min_trials: 3,
            confidence: 0.99,
            resource: default_resource(),
        }
    }
}

impl PrunerConfig {
    pub const NAMES: &'static [&'static str] =
        &["none", "median", "asha", "hyperband", "forecast", "pbt"];

    /// The kind, as a study file spells it.
    pub fn name(&self) -> &'static str {
        match self {
            PrunerConfig::None => "none",
            PrunerConfig::Median(_) => "median",
            PrunerConfig::Asha(_) => "asha",
            PrunerConfig::Hyperband(_) => "hyperband",
            PrunerConfig::Forecast(_) => "forecast",
            PrunerConfig::Pbt(_) => "pbt",
        }
    }

    /// Whether it pauses trials at rungs and promotes them later (`mode = "promote"`), which
    /// needs trials that checkpoint and a driver that resumes them.
    pub fn pauses(&self) -> bool {
        match self {
            PrunerConfig::Asha(c) => c.mode == AshaMode::Promote,
            PrunerConfig::Hyperband(c) => c.mode == AshaMode::Promote,
            _ => false,
        }
    }

    /// The key whose value is a trial's resource (`"step"`: the report's step).
    pub fn resource(&self) -> &str {
        match self {
            PrunerConfig::None => DEFAULT_RESOURCE,
            PrunerConfig::Median(c) => &c.resource,
            PrunerConfig::Asha(c) => &c.resource,
            PrunerConfig::Hyperband(c) => &c.resource,
            PrunerConfig::Forecast(c) => &c.resource,
            PrunerConfig::Pbt(c) => &c.resource,
        }
    }

    /// The pruner of a builtin study whose `[pruner]` table is absent: stopping by prediction
    /// over epochs (`forecast`, its full resource the study's epochs) when a trial trains more
    /// than one epoch, none otherwise. The trainer's reports carry the `epoch` key. Chosen by
    /// `tune bench multifidelity` (BENCHMARKS.md, "Learning curves"): with the default sampler
    /// (the GP) at equal compute, on the real curves of the builtin digits MLP (10 seeds, @10 /
    /// @30) forecast 41.2 / 52.8 against ASHA's 11.1 / -25.7 and no pruning's 31.4 / 43.8; on
    /// the simulated family (12 seeds, @30) 83.9 against ASHA's -8.6. ASHA (the default before)
    /// ranks trials at its rungs, which crossing curves (fast starters that end worse) mislead.
    pub fn builtin_default(epochs: u64) -> PrunerConfig {
        if epochs > 1 {
            PrunerConfig::Forecast(ForecastConfig {
                max_resource: Some(epochs as f64),
                resource: "epoch".to_string(),
                ..ForecastConfig::default()
            })
        } else {
            PrunerConfig::None
        }
    }

    /// The default of a multi-objective builtin study: ASHA over epochs (rungs at 1, 3, 9, …
    /// epochs below the last), which stops a trial only when it is behind on every objective at
    /// a rung; the forecasts are of one objective's curve. η = 3 and a first rung at 1 epoch
    /// were chosen by `tune bench pruning` over 3-, 6- and 9-epoch studies: BENCHMARKS.md,
    /// "The builtin default".
    pub fn builtin_default_multi(epochs: u64) -> PrunerConfig {
        if epochs > 1 {
            PrunerConfig::Asha(AshaConfig {
                max_resource: Some(epochs as f64),
                resource: "epoch".to_string(),
                ..AshaConfig::default()
            })
        } else {
            PrunerConfig::None
        }
    }

    /// Sets `max_resource` where the table left it out: the study knows the full budget of a
    /// builtin trial (its epochs) when the user does not write it twice.
    pub fn fill_max_resource(&mut self, max: f64) {
        match self {
            PrunerConfig::Asha(c) if c.max_resource.is_none() => c.max_resource = Some(max),
            PrunerConfig::Hyperband(c) if c.max_resource.is_none() => c.max_resource = Some(max),
            PrunerConfig::Forecast(c) if c.max_resource.is_none() => c.max_resource = Some(max),
            PrunerConfig::Pbt(c) if c.max_resource.is_none() => c.max_resource = Some(max),
            _ => {}
        }
    }

    /// Validates the values; the error names the key, as `pruner.<key>`.
    pub fn check(&self) -> Result<(), PrunerConfigError> {
        match self {
            PrunerConfig::None => Ok(()),
            PrunerConfig::Median(c) => {
                check_resource_key(&c.resource)?;
                if !(c.warmup_steps.is_finite() && c.warmup_steps >= 0.0) {
                    return Err(PrunerConfigError::Invalid(format!(
                        "pruner.warmup_steps must be a non-negative number, got {}",
                        c.warmup_steps
                    )));
                }
                if c.min_trials < 1 {
                    return Err(PrunerConfigError::Invalid(
                        "pruner.min_trials must be at least 1, got 0".to_string(),
                    ));
                }
                if !(c.interval.is_finite() && c.interval > 0.0) {
                    return Err(PrunerConfigError::Invalid(format!(
                        "pruner.interval must be greater than 0, got {}",
                        c.interval
                    )));
                }
                Ok(())
            }
            PrunerConfig::Asha(c) => {
                check_resource_key(&c.resource)?;
                check_rungs(c.min_resource, c.max_resource, c.reduction_factor)?;
                if let Some(max) = c.max_resource {
                    let first = asha::rung_resource(
                        c.min_resource,
                        c.reduction_factor,
                        c.min_early_stopping_rate,
                    );
                    // The same test as the ladder's: a rung at or past the full trial is none.
                    if reached(first, max) {
                        return Err(PrunerConfigError::Invalid(format!(
                            "pruner.min_early_stopping_rate {} puts the first rung at {} which \
                             is not below pruner.max_resource {}, so nothing could be pruned",
                            c.min_early_stopping_rate, first, max
                        )));
                    }
                }
                Ok(())
            }
            PrunerConfig::Hyperband(c) => {
                check_resource_key(&c.resource)?;
                let Some(max) = c.max_resource else {
                    return Err(PrunerConfigError::Invalid(
                        "pruner.max_resource is required for hyperband (the resource \
                                of a full trial, e.g. its number of epochs)"
                            .to_string(),
                    ));
                };
                check_rungs(c.min_resource, Some(max), c.reduction_factor)?;
                let all = hyperband::bracket_count(c.min_resource, max, c.reduction_factor);
                if let Some(b) = c.brackets
                    && !(1..=all).contains(&b)
                {
                    return Err(PrunerConfigError::Invalid(format!(
                        "pruner.brackets must be between 1 and {all} (for min_resource {}, \
                         max_resource {max}, reduction_factor {}), got {b}",
                        c.min_resource, c.reduction_factor
                    )));
                }
                Ok(())
            }
            PrunerConfig::Forecast(c) => {
                check_resource_key(&c.resource)?;
                if !(c.min_resource.is_finite() && c.min_resource >= 0.0) {
                    return Err(PrunerConfigError::Invalid(format!(
                        "pruner.min_resource must be a non-negative number, got {}",
                        c.min_resource
                    )));
                }
                let Some(max) = c.max_resource else {
                    return Err(PrunerConfigError::Invalid(
                        "pruner.max_resource is required for forecast (the resource of a \
                         full trial, e.g. its number of epochs)"
                            .to_string(),
                    ));
                };
                if !(max.is_finite() && max > c.min_resource) {
                    return Err(PrunerConfigError::Invalid(format!(
                        "pruner.max_resource must be greater than pruner.min_resource ({}), \
                         got {max}",
                        c.min_resource
                    )));
                }
                if c.min_trials < 1 {
                    return Err(PrunerConfigError::Invalid(
                        "pruner.min_trials must be at least 1, got 0".to_string(),
                    ));
                }
                if !(c.confidence > 0.0 && c.confidence < 1.0) {
                    return Err(PrunerConfigError::Invalid(format!(
                        "pruner.confidence must be between 0 and 1 (exclusive), got {}",
                        c.confidence
                    )));
                }
                Ok(())
            }
            PrunerConfig::Pbt(c) => {
                check_resource_key(&c.resource)?;
                c.check()
            }
        }
    }
}

/// Where an ASHA or Hyperband pruner judges trials, for people: the live UI shows it, so that
/// a trial pruned at epoch 3 reads as a rung decision rather than a crash.
#[derive(Debug, Clone, PartialEq)]
pub struct RungSchedule {
    /// What the rungs measure: `"step"` or a reported key such as `"epoch"`.
    pub resource: String,
    /// The rungs' resources, ascending (Hyperband: those of its most aggressive bracket; the
    /// other brackets start further up the same ladder). At most [`RungSchedule::SHOWN`].
    pub rungs: Vec<f64>,
    /// The ladder goes on past the rungs listed (ASHA without `max_resource`).
    pub more: bool,
    /// Each rung keeps the top `1/reduction_factor`.
    pub reduction_factor: f64,
    /// Hyperband: the number of brackets in use.
    pub brackets: Option<u32>,
    /// Trials outside the top are paused (resumable), not pruned: ASHA's `mode = "promote"`.
    pub pauses: bool,
}

impl RungSchedule {
    /// Rungs listed before the rest is left to `…` (an ASHA without `max_resource` has an
    /// unbounded ladder).
    pub const SHOWN: usize = 6;

    /// `rungs at 1, 3 epochs, keeps 1/3`; Hyperband says its brackets first.
    pub fn text(&self) -> String {
        let mut at: Vec<String> = self
            .rungs
            .iter()
            .map(|&r| crate::fmt::fmt_value(Some(r)))
            .collect();
        if self.more {
            at.push("…".into());
        }
        let unit = match self.resource.as_str() {
            "epoch" | "step" if self.rungs.len() == 1 && !self.more && self.rungs[0] == 1.0 => {
                format!(" {}", self.resource)
            }
            "epoch" | "step" => format!(" {}s", self.resource),
            key => format!(" ({key})"),
        };
        let rungs = match at.as_slice() {
            [] => "no rung below a full trial".to_string(),
            [one] => format!("rung at {one}{unit}"),
            many => format!("rungs at {}{unit}", many.join(", ")),
        };
        let keeps = format!(
            "keeps 1/{}",
            crate::fmt::fmt_value(Some(self.reduction_factor))
        );
        let keeps = if self.pauses {
            format!("{keeps}, pauses the rest")
        } else {
            keeps
        };
        match self.brackets {
            Some(1) => format!("1 bracket, {rungs}, {keeps}"),
            Some(b) => format!("{b} brackets, {rungs}, {keeps}"),
            None => format!("{rungs}, {keeps}"),
        }
    }
}

impl PrunerConfig {
    /// The rung schedule of an ASHA or Hyperband pruner; `None` for the others.
    pub fn rung_schedule(&self) -> Option<RungSchedule> {
        let pauses = self.pauses();
        let (min, max, eta, rate, resource, brackets) = match self {
            PrunerConfig::None
            | PrunerConfig::Median(_)
            | PrunerConfig::Forecast(_)
            | PrunerConfig::Pbt(_) => {
                return None;
            }
            PrunerConfig::Asha(c) => (
                c.min_resource,
                c.max_resource,
                c.reduction_factor,
                c.min_early_stopping_rate,
                &c.resource,
                None,
            ),
            PrunerConfig::Hyperband(c) => {
                let all = c.max_resource.map_or(1, |max| {
                    hyperband::bracket_count(c.min_resource, max, c.reduction_factor)
                });
                let used = c.brackets.map_or(all, |b| b.clamp(1, all));
                (
                    c.min_resource,
                    c.max_resource,
                    c.reduction_factor,
                    0,
                    &c.resource,
                    Some(used),
                )
            }
        };
        // The same ladder the pruner climbs, so the UI cannot show rungs it does not judge at.
        let ladder = asha::Rungs::new(min, max, eta, rate);
        let all = ladder.ladder();
        Some(RungSchedule {
            resource: resource.clone(),
            rungs: all.iter().copied().take(RungSchedule::SHOWN).collect(),
            more: all.len() > RungSchedule::SHOWN,
            reduction_factor: eta,
            brackets,
            pauses,
        })
    }
}

fn check_resource_key(resource: &str) -> Result<(), PrunerConfigError> {
    if resource.trim().is_empty() {
        return Err(PrunerConfigError::Invalid(
            "pruner.resource must name a report key (or \"step\"), got \"\"".to_string(),
        ));
    }
    Ok(())
}

fn check_rungs(min: f64, max: Option<f64>, eta: f64) -> Result<(), PrunerConfigError> {
    if !(min.is_finite() && min > 0.0) {
        return Err(PrunerConfigError::Invalid(format!(
            "pruner.min_resource must be greater than 0, got {min}"
        )));
    }
    if !(eta.is_finite() && eta >= 2.0) {
        return Err(PrunerConfigError::Invalid(format!(
            "pruner.reduction_factor must be at least 2, got {eta}"
        )));
    }
    if let Some(max) = max
        && !(max.is_finite() && max > min)
    {
        return Err(PrunerConfigError::Invalid(format!(
            "pruner.max_resource must be greater than pruner.min_resource ({min}), got {max}"
        )));
    }
    Ok(())
}

/// A `[pruner]` value out of its range; the message names the key, as `pruner.<key>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrunerConfigError {
    #[error("{0}")]
    Invalid(String),
}

/// The pruner a checked config names.
pub fn build(config: &PrunerConfig) -> Box<dyn Pruner> {
    match config {
        PrunerConfig::None => Box::new(NoPruner),
        PrunerConfig::Median(c) => Box::new(MedianPruner::new(c)),
        PrunerConfig::Asha(c) => Box::new(AshaPruner::new(c)),
        PrunerConfig::Hyperband(c) => Box::new(HyperbandPruner::new(c)),
        PrunerConfig::Forecast(c) => Box::new(ForecastPruner::new(c)),
        PrunerConfig::Pbt(c) => Box::new(PbtPruner::new(c.clone())),
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn parse(toml_text: &str) -> Result<PrunerConfig, toml::de::Error> {
        #[derive(Deserialize)]
        struct Study {
            pruner: PrunerConfig,
        }
        toml::from_str::<Study>(toml_text).map(|s| s.pruner)
    }

    #[rstest]
    #[case::asha_over_epochs(
        "kind = \"asha\"\nresource = \"epoch\"\nmax_resource = 9",
        Some("rungs at 1, 3 epochs, keeps 1/3")
    )]
    #[case::asha_with_a_first_rung_further_up(
        "kind = \"asha\"\nresource = \"epoch\"\nmax_resource = 12\nmin_early_stopping_rate = 1",
        Some("rungs at 3, 9 epochs, keeps 1/3")
    )]
    #[case::asha_with_one_rung(
        "kind = \"asha\"\nresource = \"epoch\"\nmax_resource = 2\nreduction_factor = 2",
        Some("rung at 1 epoch, keeps 1/2")
    )]
    #[case::asha_without_a_full_trial_lists_the_first_rungs(
        "kind = \"asha\"",
        Some("rungs at 1, 3, 9, 27, 81, 243, … steps, keeps 1/3")
    )]
    #[case::asha_over_a_reported_key(
        "kind = \"asha\"\nresource = \"samples\"\nmin_resource = 1000\nmax_resource = 10000\nreduction_factor = 2.5",
        Some("rungs at 1000, 2500, 6250 (samples), keeps 1/2.5")
    )]
    #[case::hyperband(
        "kind = \"hyperband\"\nresource = \"epoch\"\nmax_resource = 9",
        Some("3 brackets, rungs at 1, 3 epochs, keeps 1/3")
    )]
    #[case::hyperband_with_one_bracket(
        "kind = \"hyperband\"\nmax_resource = 9\nbrackets = 1",
        Some("1 bracket, rungs at 1, 3 steps, keeps 1/3")
    )]
    #[case::median_has_no_rungs("kind = \"median\"", None)]
    #[case::none_has_no_rungs("kind = \"none\"", None)]
    fn the_rung_schedule_says_where_trials_are_judged(
        #[case] table: &str,
        #[case] text: Option<&str>,
    ) {
        let config = parse(&format!("[pruner]\n{table}")).expect("parses");
        config.check().expect("valid");
        assert_eq!(config.rung_schedule().map(|r| r.text()).as_deref(), text);
    }

    #[test]
    fn the_rung_schedule_is_the_ladder_the_pruner_judges_at() {
        let config = PrunerConfig::Asha(AshaConfig {
            max_resource: Some(12.0),
            resource: "epoch".to_string(),
            ..AshaConfig::default()
        });
        let schedule = config.rung_schedule().expect("asha");
        assert_eq!(schedule.rungs, vec![1.0, 3.0, 9.0]);
        assert!(!schedule.more);
    }

    #[test]
    fn pruner_table_with_only_a_kind_takes_every_default() {
        assert_eq!(
            parse("[pruner]\nkind = \"none\"").ok(),
            Some(PrunerConfig::None)
        );
        assert_eq!(
            parse("[pruner]\nkind = \"median\"").ok(),
            Some(PrunerConfig::Median(MedianConfig::default()))
        );
        assert_eq!(
            parse("[pruner]\nkind = \"asha\"").ok(),
            Some(PrunerConfig::Asha(AshaConfig::default()))
        );
        assert_eq!(
            parse("[pruner]\nkind = \"hyperband\"").ok(),
            Some(PrunerConfig::Hyperband(HyperbandConfig::default()))
        );
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let m = MedianConfig::default();
        assert_eq!((m.warmup_steps, m.min_trials, m.interval), (0.0, 5, 1.0));
        assert_eq!(m.resource, "step");
        let a = AshaConfig::default();
        assert_eq!(
            (a.min_resource, a.max_resource, a.reduction_factor),
            (1.0, None, 3.0)
        );
        assert_eq!(a.min_early_stopping_rate, 0);
        assert_eq!(a.resource, "step");
        let h = HyperbandConfig::default();
        assert_eq!(
            (
                h.min_resource,
                h.max_resource,
                h.reduction_factor,
                h.brackets
            ),
            (1.0, None, 3.0, None)
        );
        assert_eq!(PrunerConfig::default(), PrunerConfig::None);
    }

    #[test]
    fn pruner_table_reads_every_key_and_integers_as_numbers() {
        let c = parse(
            "[pruner]\nkind = \"asha\"\nresource = \"epoch\"\nmin_resource = 2\n\
             max_resource = 54.5\nreduction_factor = 3\nmin_early_stopping_rate = 1\n\
             mode = \"promote\"",
        );
        assert_eq!(
            c.ok(),
            Some(PrunerConfig::Asha(AshaConfig {
                min_resource: 2.0,
                max_resource: Some(54.5),
                reduction_factor: 3.0,
                min_early_stopping_rate: 1,
                resource: "epoch".into(),
                mode: AshaMode::Promote,
            }))
        );
        let c = parse(
            "[pruner]\nkind = \"median\"\nwarmup_steps = 10\nmin_trials = 3\ninterval = 5\n\
             resource = \"samples\"",
        );
        assert_eq!(
            c.ok(),
            Some(PrunerConfig::Median(MedianConfig {
                warmup_steps: 10.0,
                min_trials: 3,
                interval: 5.0,
                resource: "samples".into(),
            }))
        );
        let c = parse(
            "[pruner]\nkind = \"hyperband\"\nmax_resource = 81\nbrackets = 2\nmin_resource = 1",
        );
        assert_eq!(
            c.ok(),
            Some(PrunerConfig::Hyperband(HyperbandConfig {
                max_resource: Some(81.0),
                brackets: Some(2),
                ..HyperbandConfig::default()
            }))
        );
    }

    #[rstest]
    #[case::unknown_kind("kind = \"sha\"")]
    #[case::no_kind("min_resource = 1")]
    #[case::key_of_another_kind("kind = \"median\"\nreduction_factor = 3")]
    #[case::misspelt_key("kind = \"asha\"\nreduction = 3")]
    #[case::key_on_none("kind = \"none\"\nwarmup_steps = 3")]
    #[case::wrong_type("kind = \"asha\"\nmin_early_stopping_rate = 0.5")]
    fn pruner_table_rejects(#[case] body: &str) {
        assert!(parse(&format!("[pruner]\n{body}")).is_err(), "{body}");
    }

    #[test]
    fn config_round_trips_through_json() {
        let c = PrunerConfig::Hyperband(HyperbandConfig {
            max_resource: Some(27.0),
            ..HyperbandConfig::default()
        });
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.contains("\"kind\":\"hyperband\""), "{json}");
        assert_eq!(serde_json::from_str::<PrunerConfig>(&json).unwrap(), c);
    }

    fn asha(f: impl FnOnce(&mut AshaConfig)) -> PrunerConfig {
        let mut c = AshaConfig::default();
        f(&mut c);
        PrunerConfig::Asha(c)
    }

    fn median(f: impl FnOnce(&mut MedianConfig)) -> PrunerConfig {
        let mut c = MedianConfig::default();
        f(&mut c);
        PrunerConfig::Median(c)
    }

    fn hyperband(f: impl FnOnce(&mut HyperbandConfig)) -> PrunerConfig {
        let mut c = HyperbandConfig {
            max_resource: Some(27.0),
            ..HyperbandConfig::default()
        };
        f(&mut c);
        PrunerConfig::Hyperband(c)
    }

    #[rstest]
    #[case(asha(|c| c.reduction_factor = 1.0), "pruner.reduction_factor must be at least 2, got 1")]
    #[case(asha(|c| c.reduction_factor = f64::NAN), "pruner.reduction_factor must be at least 2, got NaN")]
    #[case(asha(|c| c.min_resource = 0.0), "pruner.min_resource must be greater than 0, got 0")]
    #[case(asha(|c| c.max_resource = Some(1.0)), "pruner.max_resource must be greater than pruner.min_resource (1), got 1")]
    #[case(asha(|c| { c.max_resource = Some(9.0); c.min_early_stopping_rate = 2 }), "pruner.min_early_stopping_rate 2 puts the first rung at 9 which is not below pruner.max_resource 9, so nothing could be pruned")]
    #[case(asha(|c| c.resource = " ".into()), "pruner.resource must name a report key (or \"step\"), got \"\"")]
    #[case(median(|c| c.warmup_steps = -1.0), "pruner.warmup_steps must be a non-negative number, got -1")]
    #[case(median(|c| c.min_trials = 0), "pruner.min_trials must be at least 1, got 0")]
    #[case(median(|c| c.interval = 0.0), "pruner.interval must be greater than 0, got 0")]
    #[case(hyperband(|c| c.max_resource = None), "pruner.max_resource is required for hyperband (the resource of a full trial, e.g. its number of epochs)")]
    #[case(hyperband(|c| c.reduction_factor = 1.5), "pruner.reduction_factor must be at least 2, got 1.5")]
    #[case(hyperband(|c| c.brackets = Some(5)), "pruner.brackets must be between 1 and 4 (for min_resource 1, max_resource 27, reduction_factor 3), got 5")]
    #[case(hyperband(|c| c.brackets = Some(0)), "pruner.brackets must be between 1 and 4 (for min_resource 1, max_resource 27, reduction_factor 3), got 0")]
    fn check_names_the_bad_key(#[case] config: PrunerConfig, #[case] message: &str) {
        assert_eq!(
            config.check().map_err(|e| e.to_string()),
            Err(message.to_string())
        );
    }

    #[rstest]
    #[case(PrunerConfig::None)]
    #[case(median(|_| {}))]
    #[case(asha(|_| {}))]
    #[case(asha(|c| { c.max_resource = Some(10.0); c.min_early_stopping_rate = 2 }))]
    #[case(asha(|c| { c.min_resource = 0.5; c.reduction_factor = 2.5 }))]
    #[case(hyperband(|_| {}))]
    #[case(hyperband(|c| c.brackets = Some(4)))]
    fn check_accepts_sensible_values(#[case] config: PrunerConfig) {
        assert_eq!(config.check(), Ok(()));
    }

    #[test]
    fn builtin_studies_with_more_than_one_epoch_default_to_forecasts_over_epochs() {
        assert_eq!(PrunerConfig::builtin_default(1), PrunerConfig::None);
        let c = PrunerConfig::builtin_default(10);
        assert_eq!(c.name(), "forecast");
        assert_eq!(c.resource(), "epoch");
        assert_eq!(
            c,
            PrunerConfig::Forecast(ForecastConfig {
                max_resource: Some(10.0),
                resource: "epoch".to_string(),
                ..ForecastConfig::default()
            })
        );
        // No rungs: every report from the first epoch on is judged.
        assert_eq!(c.rung_schedule(), None);
        for epochs in 2..50 {
            assert_eq!(PrunerConfig::builtin_default(epochs).check(), Ok(()));
        }
    }

    #[test]
    fn none_serialises_with_its_kind() {
        let json = serde_json::to_string(&PrunerConfig::None).unwrap();
        assert_eq!(json, r#"{"kind":"none"}"#);
        assert_eq!(
            serde_json::from_str::<PrunerConfig>(&json).unwrap(),
            PrunerConfig::None
        );
    }

    #[test]
    fn fill_max_resource_only_fills_what_the_table_left_out() {
        let mut c = asha(|_| {});
        c.fill_max_resource(10.0);
        assert!(matches!(
            c,
            PrunerConfig::Asha(AshaConfig {
                max_resource: Some(10.0),
                ..
            })
        ));
        let mut c = hyperband(|_| {});
        c.fill_max_resource(10.0);
        assert!(matches!(
            c,
            PrunerConfig::Hyperband(HyperbandConfig {
                max_resource: Some(27.0),
                ..
            })
        ));
    }

    #[test]
    fn names_and_resources() {
        for (c, name) in [
            (PrunerConfig::None, "none"),
            (median(|_| {}), "median"),
            (asha(|_| {}), "asha"),
            (hyperband(|_| {}), "hyperband"),
        ] {
            assert_eq!(c.name(), name);
            assert!(PrunerConfig::NAMES.contains(&name));
            assert_eq!(c.resource(), "step");
        }
        assert_eq!(asha(|c| c.resource = "epoch".into()).resource(), "epoch");
    }

    #[test]
    fn memo_recomputes_whenever_the_curve_or_the_context_changes() {
        use crate::pruner::testkit::{METRIC, report};
        let mut memo: Memo<usize> = Memo::new();
        let mut calls = 0;
        let mut trial = TrialCurve {
            place: Default::default(),
            number: TrialNumber(3),
            state: TrialState::Running,
            reports: vec![report(1, 1.0)],
        };
        let trials = [];
        let ctx = |resource| PruneContext {
            direction: Direction::Minimize,
            metric: METRIC,
            resource,
            trial: TrialNumber(0),
            trials: &trials,
            origins: &NO_ORIGINS,
        };
        let mut ask = |memo: &mut Memo<usize>, trial: &TrialCurve, resource| {
            let ctx = ctx(resource);
            memo.enter(&ctx);
            *memo.get(&ctx, trial, |t| {
                calls += 1;
                t.reports.len()
            })
        };
        assert_eq!(ask(&mut memo, &trial, "step"), 1);
        assert_eq!(ask(&mut memo, &trial, "step"), 1);
        trial.reports.push(report(2, 1.0));
        assert_eq!(ask(&mut memo, &trial, "step"), 2);
        // Same length, a different last report (a refresh from storage, say).
        trial.reports[1] = report(3, 1.0);
        ask(&mut memo, &trial, "step");
        trial.reports[1] = report(3, 0.5);
        ask(&mut memo, &trial, "step");
        ask(&mut memo, &trial, "epoch");
        ask(&mut memo, &trial, "epoch");
        assert_eq!(calls, 5);
    }

    fn rung(bracket: Option<usize>, rung: usize, rank: usize, of: usize, eta: f64) -> PruneWhy {
        PruneWhy::Rung {
            bracket,
            rung,
            rank,
            of,
            keep: ((of as f64 / eta).floor() as usize).max(1),
            eta,
        }
    }

    #[rstest]
    #[case(
        "epoch",
        3.0,
        rung(None, 1, 3, 4, 3.0),
        "at epoch 3 (rung 1: 3rd of 4 trials there, below the top 1/3)"
    )]
    #[case(
        "step",
        1.0,
        rung(None, 0, 2, 2, 3.0),
        "at step 1 (rung 0: 2nd of 2 trials there, below the top 1/3)"
    )]
    #[case(
        "samples",
        2500.0,
        rung(Some(1), 2, 11, 12, 2.5),
        "at samples 2500 (bracket 1, rung 2: 11th of 12 trials there, below the top 1/2.5)"
    )]
    #[case(
        "step",
        12.0,
        rung(None, 4, 21, 40, 3.0),
        "at step 12 (rung 4: 21st of 40 trials there, below the top 1/3)"
    )]
    #[case("step", 12.0, PruneWhy::Median { best: 0.52, median: 0.41, of: 5 }, "at step 12 (its best 0.52 is worse than the median 0.41 of 5 complete trials there)")]
    #[case("epoch", 2.0, PruneWhy::Median { best: -3e-7, median: -1.25e-7, of: 1 }, "at epoch 2 (its best -3.0000e-7 is worse than the median -1.2500e-7 of 1 complete trial there)")]
    #[case("step", 0.5, PruneWhy::NotANumber, "at step 0.5 (its value is NaN)")]
    fn a_prune_decision_says_where_and_why(
        #[case] resource: &str,
        #[case] at: f64,
        #[case] why: PruneWhy,
        #[case] text: &str,
    ) {
        let p = Prune {
            resource: resource.into(),
            at,
            why,
        };
        assert_eq!(p.to_string(), text);
    }

    #[rstest]
    #[case::asha(PrunerConfig::Asha(AshaConfig { max_resource: Some(9.0), ..AshaConfig::default() }), "rung 1: ")]
    #[case::hyperband(PrunerConfig::Hyperband(HyperbandConfig { max_resource: Some(9.0), brackets: Some(1), ..HyperbandConfig::default() }), "bracket 0, rung 1: ")]
    #[case::median(PrunerConfig::Median(MedianConfig { min_trials: 1, ..MedianConfig::default() }), "the median")]
    fn each_pruner_gives_its_reason_with_its_decision(
        #[case] config: PrunerConfig,
        #[case] words: &str,
    ) {
        use crate::pruner::testkit::{METRIC, report};
        // Trial 0 complete at 1.0 through step 3; trial 1 reports 5.0 up to step 3.
        let trials = [
            TrialCurve {
                place: Default::default(),
                number: TrialNumber(0),
                state: TrialState::Complete,
                reports: (0..=3).map(|s| report(s, 1.0)).collect(),
            },
            TrialCurve {
                place: Default::default(),
                number: TrialNumber(1),
                state: TrialState::Running,
                reports: (0..=3).map(|s| report(s, 5.0)).collect(),
            },
        ];
        let mut p = build(&config);
        let ctx = PruneContext {
            direction: Direction::Minimize,
            metric: METRIC,
            resource: "step",
            trial: TrialNumber(1),
            trials: &trials,
            origins: &NO_ORIGINS,
        };
        let prune = p.decide(&ctx).expect("trial 1 is pruned at step 3");
        let text = prune.to_string();
        assert!(text.starts_with("at step 3 ("), "{text}");
        assert!(text.contains(words), "{text}");
        assert!(p.should_prune(&ctx));
    }

    #[test]
    fn nan_is_the_worst_loss_whatever_its_sign() {
        let neg_nan = Direction::Maximize.loss(f64::NAN);
        assert_eq!(cmp_loss(neg_nan, f64::INFINITY), Ordering::Greater);
        assert_eq!(cmp_loss(f64::NAN, -1e300), Ordering::Greater);
        assert_eq!(cmp_loss(1.0, f64::NAN), Ordering::Less);
        assert_eq!(cmp_loss(neg_nan, f64::NAN), Ordering::Equal);
        assert_eq!(cmp_loss(1.0, 2.0), Ordering::Less);
    }
}
