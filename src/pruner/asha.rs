//! Asynchronous successive halving (ASHA, Li et al. 2020, "A System for Massively Parallel
//! Hyperparameter Tuning"), as a pruning rule.
//!
//! Rung `k` sits at resource `min_resource · η^(s + k)` (η the reduction factor, `s` the
//! minimum early-stopping rate), below `max_resource`. When a trial's report first reaches a
//! rung, its value there is compared with the values there of every trial that has reached the
//! rung so far (running, complete, pruned or failed): it goes on if it is in the top
//! `max(1, ⌊n/η⌋)` of those `n` (ties go on), and is pruned otherwise. No trial ever waits for
//! a rung to fill, which is what makes it asynchronous; the price is that early arrivals face
//! few rivals, as in the paper. A trial's value at a rung is that of its first report at or
//! past the rung's resource, fixed once reported, so rungs are rebuilt identically from the
//! stored reports after a resume. A report that jumps over several rungs is judged at each of
//! them in turn, with the same value. This file holds the rung arithmetic that `hyperband`
//! reuses per bracket; the `[pruner]` keys are in [`super::AshaConfig`].

use std::cmp::Ordering;

use super::{
    AshaConfig, AshaMode, Memo, Point, Promotion, Prune, PruneContext, PruneWhy, Pruner, cmp_loss,
    reached,
};
use crate::trial::TrialNumber;

/// More rungs than any sane study has (η ≥ 2 makes rung 64 sit 2^64 times past the first);
/// bounds every loop even for a config that skipped [`super::PrunerConfig::check`].
const MAX_RUNGS: u32 = 64;

/// The resource of the rung with global index `index` (`s + k`).
pub(crate) fn rung_resource(min_resource: f64, eta: f64, index: u32) -> f64 {
    min_resource * eta.powi(i32::try_from(index).unwrap_or(i32::MAX))
}

/// The rungs of one ASHA ladder: their resources, ascending, all below `max_resource`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rungs {
    ladder: Vec<f64>,
    eta: f64,
}

/// A trial's values at the rungs it has reached, by rung index: each is the loss of its first
/// report at or past that rung's resource.
pub(crate) type RungValues = Vec<f64>;

impl Rungs {
    pub fn new(
        min_resource: f64,
        max_resource: Option<f64>,
        eta: f64,
        min_early_stopping_rate: u32,
    ) -> Rungs {
        let mut ladder: Vec<f64> = Vec::new();
        for k in 0..MAX_RUNGS {
            let r = rung_resource(min_resource, eta, min_early_stopping_rate.saturating_add(k));
            // A ladder that stops climbing (η ≤ 1 in an unchecked config) or overflows ends;
            // so does one that reaches the full trial.
            if !r.is_finite()
                || ladder.last().is_some_and(|&last| r <= last)
                || max_resource.is_some_and(|max| reached(r, max))
            {
                break;
            }
            ladder.push(r);
        }
        Rungs { ladder, eta }
    }

    /// The rungs' resources, ascending.
    pub fn ladder(&self) -> &[f64] {
        &self.ladder
    }

    /// The indices of the rungs in `(after, upto]`, ascending. `after` is `None` for a trial
    /// with no earlier report.
    fn crossed(&self, after: Option<f64>, upto: f64) -> impl Iterator<Item = usize> + '_ {
        self.ladder
            .iter()
            .enumerate()
            .take_while(move |(_, r)| reached(upto, **r))
            .filter(move |(_, r)| after.is_none_or(|a| !reached(a, **r)))
            .map(|(k, _)| k)
    }

    /// A curve's values at the rungs it has reached.
    pub fn values(&self, curve: impl Iterator<Item = Point>) -> RungValues {
        let mut out = Vec::new();
        for p in curve {
            // A report past several rungs not reached before fills each of them.
            while let Some(&r) = self.ladder.get(out.len())
                && reached(p.resource, r)
            {
                out.push(p.loss);
            }
        }
        out
    }

    /// The ASHA decision for `ctx.trial`, against the trials for which `rival` holds; the
    /// reason names the first rung crossed now where the trial fell short.
    pub fn decide(
        &self,
        ctx: &PruneContext<'_>,
        memo: &mut Memo<RungValues>,
        rival: impl Fn(TrialNumber) -> bool,
    ) -> Option<Prune> {
        memo.enter(ctx);
        // The trial's points from its last one back. Between rungs (most reports of a long
        // trial) the report just before the last already stood at the highest rung the last
        // one reaches, so nothing is crossed and the walk stops there: a report costs the same
        // whatever the length of the curve, instead of a read of the whole curve each time.
        let mut back = ctx.own().iter().rev().filter_map(|r| ctx.point(r));
        let last = back.next()?;
        let top = *self
            .ladder
            .iter()
            .take_while(|r| reached(last.resource, **r))
            .last()?;
        let mut before: Option<f64> = None;
        for p in back {
            if reached(p.resource, top) {
                return None;
            }
            before = Some(before.map_or(p.resource, |b: f64| b.max(p.resource)));
        }
        let crossed: Vec<usize> = self.crossed(before, last.resource).collect();
        if crossed.is_empty() {
            return None;
        }
        // Every earlier report is below these rungs, so this report is the first one at or
        // past each: the trial's value there.
        let mine = last.loss;
        if mine.is_nan() {
            // A diverged trial cannot climb; without this it would go on whenever it is the
            // first to reach a rung.
            return Some(Prune::at(ctx, last.resource, PruneWhy::NotANumber));
        }
        let mut others: Vec<Vec<f64>> = vec![Vec::new(); crossed.len()];
        for t in ctx
            .trials
            .iter()
            .filter(|t| t.number != ctx.trial && rival(t.number))
        {
            let values = memo.get(ctx, t, |t| self.values(ctx.curve(&t.reports)));
            for (at, &k) in crossed.iter().enumerate() {
                if let Some(&v) = values.get(k) {
                    others[at].push(v);
                }
            }
        }
        others.iter().zip(&crossed).find_map(|(others, &rung)| {
            let n = others.len() + 1;
            let keep = ((n as f64 / self.eta).floor() as usize).max(1);
            let better = others
                .iter()
                .filter(|&&o| cmp_loss(o, mine) == Ordering::Less)
                .count();
            (better >= keep).then(|| {
                Prune::at(
                    ctx,
                    last.resource,
                    PruneWhy::Rung {
                        bracket: None,
                        rung,
                        rank: better + 1,
                        of: n,
                        keep,
                        eta: self.eta,
                    },
                )
            })
        })
    }
}

impl Rungs {
    /// The first of the `paused` trials to have earned its promotion, if any. A paused trial
    /// has earned it when, at the highest rung it has reached, it ranks in the top
    /// `max(1, ⌊n/η⌋)` of the `n` trials for which `rival` holds that have reached that rung
    /// (itself included; ties go on), as a trial arriving there now would be judged: it was
    /// outside that top when it arrived, and gets in as later trials arrive below it. The first
    /// is [`first_of`] them.
    ///
    /// One pass: every rival's rung values (memoised) go into one sorted list per rung, and each
    /// paused trial's rank is a binary search there, so an ask costs O(trials + paused · log),
    /// not O(trials · paused).
    pub fn promotion(
        &self,
        ctx: &PruneContext<'_>,
        memo: &mut Memo<RungValues>,
        rival: impl Fn(TrialNumber) -> bool,
        paused: &[TrialNumber],
    ) -> Option<Promotion> {
        memo.enter(ctx);
        let mut at: Vec<Vec<f64>> = vec![Vec::new(); self.ladder.len()];
        let mut mine: Vec<(TrialNumber, usize, f64)> = Vec::new();
        for t in ctx.trials.iter().filter(|t| rival(t.number)) {
            let values = memo.get(ctx, t, |t| self.values(ctx.curve(&t.reports)));
            for (k, &v) in values.iter().enumerate() {
                at[k].push(v);
            }
            if paused.contains(&t.number)
                && let Some((rung, &v)) = values.iter().enumerate().next_back()
                && !v.is_nan()
            {
                mine.push((t.number, rung, v));
            }
        }
        for values in &mut at {
            values.sort_by(|a, b| cmp_loss(*a, *b));
        }
        first_of(mine.into_iter().filter_map(|(trial, rung, v)| {
            let n = at[rung].len();
            let better = at[rung].partition_point(|&o| cmp_loss(o, v) == Ordering::Less);
            let keep = ((n as f64 / self.eta).floor() as usize).max(1);
            (better < keep).then_some(Promotion {
                trial,
                rung,
                rank: better + 1,
                of: n,
                keep,
                eta: self.eta,
            })
        }))
    }
}

/// The promotion to make first: the highest rung, then the best rank there, then the lowest
/// number (as Li et al.'s `get_job` scans the rungs from the top).
pub(crate) fn first_of(found: impl IntoIterator<Item = Promotion>) -> Option<Promotion> {
    found.into_iter().min_by(|a, b| {
        b.rung
            .cmp(&a.rung)
            .then(a.rank.cmp(&b.rank))
            .then(a.trial.cmp(&b.trial))
    })
}

/// ASHA over all trials of the study.
pub struct AshaPruner {
    rungs: Rungs,
    memo: Memo<RungValues>,
    mode: AshaMode,
}

impl AshaPruner {
    pub fn new(config: &AshaConfig) -> AshaPruner {
        AshaPruner {
            rungs: Rungs::new(
                config.min_resource,
                config.max_resource,
                config.reduction_factor,
                config.min_early_stopping_rate,
            ),
            memo: Memo::new(),
            mode: config.mode,
        }
    }
}

impl Pruner for AshaPruner {
    fn decide(&mut self, ctx: &PruneContext<'_>) -> Option<Prune> {
        self.rungs.decide(ctx, &mut self.memo, |_| true)
    }

    fn pauses(&self) -> bool {
        self.mode == AshaMode::Promote
    }

    fn promotion(&mut self, ctx: &PruneContext<'_>, paused: &[TrialNumber]) -> Option<Promotion> {
        if self.mode != AshaMode::Promote {
            return None;
        }
        self.rungs.promotion(ctx, &mut self.memo, |_| true, paused)
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::pruner::testkit::{
        METRIC, Sim, lockstep, negated, prunings, report, report_at, sequential,
    };
    use crate::pruner::{PrunerConfig, TrialCurve};
    use crate::trial::{Direction, TrialState};

    /// Rungs at 1 and 3; 9 is the full trial, so not a rung.
    fn asha(f: impl FnOnce(&mut AshaConfig)) -> PrunerConfig {
        let mut c = AshaConfig {
            min_resource: 1.0,
            max_resource: Some(9.0),
            reduction_factor: 3.0,
            ..AshaConfig::default()
        };
        f(&mut c);
        PrunerConfig::Asha(c)
    }

    const FLAT: [[f64; 9]; 9] = [
        [5.0; 9], [3.0; 9], [4.0; 9], [1.0; 9], [2.0; 9], [6.0; 9], [0.5; 9], [2.5; 9], [0.8; 9],
    ];

    fn flat_trials() -> Vec<(u64, &'static [f64])> {
        FLAT.iter()
            .enumerate()
            .map(|(n, v)| (n as u64, v.as_slice()))
            .collect()
    }

    /// Trials with these rung values (rungs at 1 and 3 epochs), the listed ones paused.
    fn rung_curves(values: &[(u64, &[f64])], paused: &[u64]) -> Vec<TrialCurve> {
        values
            .iter()
            .map(|&(n, vs)| TrialCurve {
                place: Default::default(),
                number: TrialNumber(n),
                state: if paused.contains(&n) {
                    TrialState::Pruned
                } else {
                    TrialState::Running
                },
                reports: vs
                    .iter()
                    .zip([1, 3])
                    .map(|(&v, step)| report(step, v))
                    .collect(),
            })
            .collect()
    }

    fn promotion(
        config: &PrunerConfig,
        trials: &[TrialCurve],
        paused: &[u64],
    ) -> Option<Promotion> {
        let PrunerConfig::Asha(c) = config else {
            panic!("not asha")
        };
        let paused: Vec<TrialNumber> = paused.iter().map(|&n| TrialNumber(n)).collect();
        let ctx = PruneContext {
            direction: Direction::Minimize,
            metric: METRIC,
            resource: "step",
            trial: paused[0],
            trials,
            origins: &crate::pruner::NO_ORIGINS,
        };
        AshaPruner::new(c).promotion(&ctx, &paused)
    }

    #[test]
    fn a_paused_trial_is_promoted_once_enough_trials_rank_below_it_the_highest_rung_first() {
        let promote = asha(|c| c.mode = AshaMode::Promote);
        // Rung 0: 3, 4 (paused), 5 (paused), 6 — 4 trials, the top 1 goes on: neither paused
        // trial has earned it (4 ranks 2nd).
        let four: Vec<(u64, &[f64])> = vec![(1, &[3.0]), (2, &[4.0]), (0, &[5.0]), (3, &[6.0])];
        assert_eq!(
            promotion(&promote, &rung_curves(&four, &[0, 2]), &[0, 2]),
            None
        );
        // Two more arrive below: 6 trials, the top 2 go on, and 4 (2nd) is promoted.
        let mut six = four.clone();
        six.extend([(4, &[7.0][..]), (5, &[8.0][..])]);
        let p = promotion(&promote, &rung_curves(&six, &[0, 2]), &[0, 2]).expect("promoted");
        assert_eq!(
            (p.trial, p.rung, p.rank, p.of, p.keep),
            (TrialNumber(2), 0, 2, 6, 2)
        );
        assert_eq!(
            p.to_string(),
            "rung 0: 2nd of 6 trials there, in the top 1/3"
        );
        // A paused trial that earned rung 1 goes first: Li et al. scan the rungs from the top.
        let mut high = six.clone();
        high[0] = (1, &[3.0, 1.0]);
        high.extend([
            (6, &[2.0, 2.5][..]),
            (7, &[2.1, 3.0][..]),
            (8, &[2.2, 4.0][..]),
            (9, &[2.3, 5.0][..]),
            (10, &[2.4, 6.0][..]),
        ]);
        let p = promotion(&promote, &rung_curves(&high, &[0, 2, 6]), &[0, 2, 6]).expect("one");
        assert_eq!((p.trial, p.rung, p.rank, p.of), (TrialNumber(6), 1, 2, 6));
        // A diverged paused trial is never promoted; ASHA that stops promotes nothing.
        let mut nan = six.clone();
        nan[1] = (2, &[f64::NAN]);
        assert_eq!(promotion(&promote, &rung_curves(&nan, &[2]), &[2]), None);
        assert_eq!(
            promotion(&asha(|_| {}), &rung_curves(&six, &[0, 2]), &[0, 2]),
            None
        );
    }

    #[test]
    fn asha_keeps_the_top_third_of_each_rung_as_trials_arrive() {
        // Rung 1: 5 on; 3 on (best of 2); 4 out (keep 1 of 3); 1 on; 2 out; 6 out (keep 2
        // of 6); 0.5 on; 2.5 out (3 better, keep 2 of 8); 0.8 on (1 better, keep 3 of 9).
        // Rung 3 holds 5, 3, 1, 0.5 when 0.8 arrives: 1 better, keep 1 of 5, so out at 3.
        let pruned = prunings(
            asha(|_| {}),
            Direction::Minimize,
            &sequential(&flat_trials()),
        );
        assert_eq!(pruned, vec![(2, 1), (4, 1), (5, 1), (7, 1), (8, 3)]);
    }

    #[test]
    fn asha_maximizing_prunes_the_mirror_image() {
        let events = sequential(&flat_trials());
        let pruned = prunings(asha(|_| {}), Direction::Maximize, &negated(&events));
        assert_eq!(pruned, vec![(2, 1), (4, 1), (5, 1), (7, 1), (8, 3)]);
    }

    #[test]
    fn asha_compares_values_at_the_rung_not_later_ones() {
        // Trial 0 only gets good after rung 3; trial 1 beats its rung values and goes on.
        let late_bloomer = [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 0.1];
        let steady = [4.0; 9];
        let pruned = prunings(
            asha(|_| {}),
            Direction::Minimize,
            &sequential(&[(0, &late_bloomer), (1, &steady)]),
        );
        assert_eq!(pruned, vec![]);
    }

    #[test]
    fn asha_judges_at_the_first_report_at_or_past_each_rung() {
        // Reports every 2 steps: the report at 2 stands for rung 1, the one at 4 for rung 3;
        // a trial first heard of at 4 is judged at rung 1 and then rung 3 with that value.
        let events = vec![
            (0, report(2, 5.0)),
            (0, report(4, 4.0)),
            (0, report(6, 3.0)),
            (1, report(2, 4.0)),
            // Rung 3 holds trial 0's 4 (from step 4, not its later 3): 4.5 is out.
            (1, report(4, 4.5)),
            (1, report(6, 1.0)),
            // Rung 1 holds 5 and 4: 4.2 is out at rung 1 already.
            (2, report(4, 4.2)),
            // Best at rung 1 (5, 4, 4.2) and at rung 3 (4, 4.5, 4.2): on.
            (3, report(4, 3.9)),
            (3, report(6, 3.0)),
        ];
        let pruned = prunings(asha(|_| {}), Direction::Minimize, &events);
        assert_eq!(pruned, vec![(1, 4), (2, 4)]);
    }

    #[test]
    fn asha_reads_the_resource_from_the_named_report_key() {
        // Rungs at 0.1, 0.3 and 0.9 epochs; 0.1 * 3^2 is 0.9000000000000001 in floating point
        // and a report at exactly 0.9 has reached it.
        let config = asha(|c| {
            c.resource = "epoch".into();
            c.min_resource = 0.1;
            c.max_resource = Some(1.0);
        });
        let at = |step, epoch, v| report_at(step, "epoch", epoch, v);
        let events = vec![
            (0, at(10, 0.1, 5.0)),
            (0, at(30, 0.3, 4.0)),
            (0, at(90, 0.9, 1.0)),
            (0, at(100, 1.0, 0.5)),
            (1, at(10, 0.1, 4.0)),
            (1, at(30, 0.3, 3.0)),
            (1, at(89, 0.89, 0.9)),
            // Rung 0.9 reached here, with 2.0 against trial 0's 1.0: out.
            (1, at(90, 0.9, 2.0)),
            (1, at(100, 1.0, 0.2)),
        ];
        let pruned = prunings(config, Direction::Minimize, &events);
        assert_eq!(pruned, vec![(1, 90)]);
    }

    #[test]
    fn asha_skips_reports_without_the_objective_or_the_resource() {
        let config = asha(|c| c.resource = "epoch".into());
        let mut no_objective = report_at(2, "epoch", 1.0, 0.0);
        no_objective.metrics.remove(METRIC);
        let events = vec![
            (0, report_at(1, "epoch", 1.0, 5.0)),
            // Would be the best at rung 1, but carries no objective.
            (1, no_objective),
            // Carries no epoch: not on the curve either.
            (1, report(3, 0.1)),
            (1, report_at(4, "epoch", 1.0, 6.0)),
        ];
        let pruned = prunings(config, Direction::Minimize, &events);
        assert_eq!(pruned, vec![(1, 4)]);
    }

    #[rstest]
    #[case::unbounded(None, vec![(1, 9)])]
    #[case::full_trial_at_nine(Some(9.0), vec![])]
    #[case::full_trial_past_nine(Some(10.0), vec![(1, 9)])]
    fn asha_never_judges_at_the_full_resource(
        #[case] max_resource: Option<f64>,
        #[case] expected: Vec<(u64, u64)>,
    ) {
        let late_bloomer = [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 1.0];
        let steady = [4.0; 9];
        let pruned = prunings(
            asha(|c| c.max_resource = max_resource),
            Direction::Minimize,
            &sequential(&[(0, &late_bloomer), (1, &steady)]),
        );
        assert_eq!(pruned, expected);
    }

    #[rstest]
    // η = 2 keeps half, with rungs at 1, 2, 4, …: 4.5 is third of 4 at rung 1 (keep 2);
    // 3.5 is second of 4 there, then second of 3 at rung 2 (keep 1), where 4 never arrived.
    #[case::halving(2.0, 0, &[5.0, 3.0, 4.0, 4.5], vec![(2, 1), (3, 1)])]
    #[case::halving_second_of_four(2.0, 0, &[5.0, 3.0, 4.0, 3.5], vec![(2, 1), (3, 2)])]
    // Ties go on.
    #[case::tie(3.0, 0, &[5.0, 5.0, 5.0], vec![])]
    // s = 1: the first rung is at 3, nothing happens at 1.
    #[case::first_rung_at_three(3.0, 1, &[5.0, 3.0, 4.0], vec![(2, 3)])]
    fn asha_rung_table(
        #[case] eta: f64,
        #[case] s: u32,
        #[case] flat: &[f64],
        #[case] expected: Vec<(u64, u64)>,
    ) {
        let curves: Vec<Vec<f64>> = flat.iter().map(|&v| vec![v; 9]).collect();
        let trials: Vec<(u64, &[f64])> = curves
            .iter()
            .enumerate()
            .map(|(n, v)| (n as u64, v.as_slice()))
            .collect();
        let config = asha(|c| {
            c.reduction_factor = eta;
            c.min_early_stopping_rate = s;
            c.max_resource = Some(27.0);
        });
        assert_eq!(
            prunings(config, Direction::Minimize, &sequential(&trials)),
            expected
        );
    }

    #[test]
    fn asha_decides_parallel_trials_as_their_reports_arrive() {
        // Six trials in lockstep: at step 1 each meets the ones that reported before it.
        let curves = &flat_trials()[..6];
        let pruned = prunings(asha(|_| {}), Direction::Minimize, &lockstep(curves));
        assert_eq!(pruned, vec![(2, 1), (4, 1), (5, 1)]);

        // The same trials arriving in the reverse order: asynchronous, so the early arrivals
        // (6, 2, 1) go on and the late ones meet the full rung.
        let reversed: Vec<_> = curves.iter().rev().copied().collect();
        let pruned = prunings(asha(|_| {}), Direction::Minimize, &lockstep(&reversed));
        assert_eq!(pruned, vec![(2, 1), (1, 1), (0, 1)]);
    }

    #[test]
    fn asha_resumed_study_keeps_its_rungs() {
        let events = sequential(&flat_trials());
        let whole = prunings(asha(|_| {}), Direction::Minimize, &events);
        // Stop anywhere (mid-trial included), reopen from the stored trials, go on.
        for cut in [1, 9, 13, 30, 40, 45, 60, 73] {
            let mut first = Sim::new(asha(|_| {}), Direction::Minimize);
            first.play_part(&events, 0..cut);
            let stored = first.trials.clone();
            let mut resumed = Sim::resume(asha(|_| {}), Direction::Minimize, stored);
            resumed.play_part(&events, cut..events.len());
            let mut both = first.pruned.clone();
            both.extend(resumed.pruned.iter().copied());
            assert_eq!(both, whole, "cut after {cut} reports");
        }
    }

    #[test]
    fn asha_resumed_parallel_study_keeps_its_rungs() {
        let events = lockstep(&flat_trials());
        let whole = prunings(asha(|_| {}), Direction::Minimize, &events);
        for cut in 1..events.len() {
            let mut first = Sim::new(asha(|_| {}), Direction::Minimize);
            first.play_part(&events, 0..cut);
            let mut resumed = Sim::resume(asha(|_| {}), Direction::Minimize, first.trials.clone());
            resumed.play_part(&events, cut..events.len());
            let mut both = first.pruned.clone();
            both.extend(resumed.pruned.iter().copied());
            assert_eq!(both, whole, "cut after {cut} reports");
        }
    }

    #[test]
    fn asha_counts_failed_and_pruned_trials_at_a_rung() {
        let trials = vec![
            TrialCurve {
                place: Default::default(),
                number: TrialNumber(0),
                state: TrialState::Failed,
                reports: vec![report(1, 1.0)],
            },
            TrialCurve {
                place: Default::default(),
                number: TrialNumber(1),
                state: TrialState::Pruned,
                reports: vec![report(1, 1.5)],
            },
        ];
        let mut sim = Sim::resume(asha(|_| {}), Direction::Minimize, trials);
        // Third at rung 1 behind both: out. Best: on.
        assert_eq!(sim.send(2, report(1, 2.0)), Some(true));
        assert_eq!(sim.send(3, report(1, 0.5)), Some(false));
    }

    #[rstest]
    #[case(Direction::Minimize)]
    #[case(Direction::Maximize)]
    fn asha_treats_nan_as_the_worst_value(#[case] direction: Direction) {
        let nan = [f64::NAN; 9];
        let good = [5.0; 9];
        let diverges = [5.0, 5.0, f64::NAN, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0];
        let mut events = sequential(&[(0, &nan), (1, &good), (2, &diverges)]);
        if direction == Direction::Maximize {
            events = negated(&events);
        }
        // NaN is pruned even as the first at rung 1; it does not beat 5 there (nor, when
        // maximising, does -NaN); a trial that turns NaN is pruned at the next rung.
        assert_eq!(
            prunings(asha(|_| {}), direction, &events),
            vec![(0, 1), (2, 3)]
        );
    }

    #[test]
    fn asha_with_no_reports_or_an_unknown_trial_keeps_going() {
        let mut p = AshaPruner::new(&AshaConfig::default());
        let ctx = PruneContext {
            direction: Direction::Minimize,
            metric: METRIC,
            resource: "step",
            trial: TrialNumber(7),
            trials: &[],
            origins: &crate::pruner::NO_ORIGINS,
        };
        assert!(!p.should_prune(&ctx));
    }

    #[test]
    fn unchecked_ladders_end() {
        // η = 1 and a zero minimum would loop forever on a naive ladder.
        for (min, eta) in [(1.0, 1.0), (0.0, 3.0), (1.0, 0.5), (1.0, f64::INFINITY)] {
            let rungs = Rungs::new(min, None, eta, 0);
            assert!(rungs.crossed(None, 1e300).count() <= MAX_RUNGS as usize);
        }
        let rungs = Rungs::new(1.0, None, 3.0, u32::MAX);
        assert_eq!(rungs.crossed(None, f64::MAX).count(), 0);
    }

    #[test]
    fn ladder_lists_the_rungs_crossed_between_two_reports() {
        let rungs = Rungs::new(1.0, Some(100.0), 3.0, 0);
        assert_eq!(rungs.ladder, vec![1.0, 3.0, 9.0, 27.0, 81.0]);
        let crossed = |after, upto| rungs.crossed(after, upto).collect::<Vec<_>>();
        assert_eq!(crossed(None, 0.5), Vec::<usize>::new());
        assert_eq!(crossed(None, 1.0), vec![0]);
        assert_eq!(crossed(Some(1.0), 2.9), Vec::<usize>::new());
        assert_eq!(crossed(Some(1.0), 30.0), vec![1, 2, 3]);
        assert_eq!(crossed(Some(27.0), 1000.0), vec![4]);
        assert_eq!(crossed(Some(81.0), 1000.0), Vec::<usize>::new());
    }

    #[test]
    fn rung_values_are_the_first_report_at_or_past_each_rung() {
        let rungs = Rungs::new(1.0, Some(100.0), 3.0, 0);
        let p = |resource, loss| Point { resource, loss };
        let values =
            rungs.values([p(0.5, 9.0), p(2.0, 8.0), p(10.0, 7.0), p(11.0, 6.0)].into_iter());
        assert_eq!(values, vec![8.0, 7.0, 7.0]);
        assert_eq!(rungs.values(std::iter::empty()), Vec::<f64>::new());
    }
}
