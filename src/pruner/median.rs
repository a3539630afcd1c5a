//! The median stopping rule (Golovin et al. 2017, "Google Vizier"; Optuna's `MedianPruner`).
//!
//! A trial whose latest report stands at resource `r` is judged when `r` has passed the warm-up
//! and has crossed into a new `interval` since its previous report. It is pruned when its best
//! value so far is strictly worse than the median of the best values that the other complete
//! trials had reached by the same resource `r` (their best over reports at or below `r`,
//! counting only trials whose reports reach `r`), provided at least `min_trials` such trials
//! exist. Only complete trials are the yardstick, as in Optuna: pruned trials would drag the
//! median towards the losers, and running ones would make the answer depend on which worker
//! happened to report first. A trial whose every value so far is NaN is pruned at its first
//! judgement past warm-up, before any yardstick exists, since it cannot win. Everything is
//! computed from the stored reports; the `[pruner]` keys are in [`super::MedianConfig`].

use std::cmp::Ordering;

use super::{MedianConfig, Memo, Point, Prune, PruneContext, PruneWhy, Pruner, cmp_loss, reached};
use crate::trial::TrialState;

pub struct MedianPruner {
    warmup: f64,
    min_trials: usize,
    interval: f64,
    memo: Memo<Yardstick>,
}

impl MedianPruner {
    pub fn new(config: &MedianConfig) -> MedianPruner {
        MedianPruner {
            warmup: config.warmup_steps,
            // A median needs a value: zero would read as one.
            min_trials: config.min_trials.max(1),
            interval: config.interval,
            memo: Memo::new(),
        }
    }

    /// Which interval after warm-up a resource falls in. The slack keeps `0.3 / 0.1`, which is
    /// `2.9999999999999996` in floating point, in interval 3.
    fn slot(&self, resource: f64) -> f64 {
        ((resource - self.warmup) / self.interval + 1e-9).floor()
    }

    /// Whether the trial's latest report is a judgement point.
    fn judged_now(&self, before: Option<f64>, now: f64) -> bool {
        if !reached(now, self.warmup) {
            return false;
        }
        match before {
            // The first report past warm-up is always judged.
            Some(b) if reached(b, self.warmup) => self.slot(now) > self.slot(b),
            _ => true,
        }
    }
}

/// A complete trial as a yardstick: its best loss by resource.
pub(crate) struct Yardstick {
    /// The furthest resource its reports reach.
    reach: f64,
    /// Its points sorted by resource, each with the best loss at or below that resource.
    best_by: Vec<(f64, f64)>,
}

impl Yardstick {
    fn new(curve: impl Iterator<Item = Point>) -> Yardstick {
        let mut points: Vec<Point> = curve.collect();
        points.sort_by(|a, b| a.resource.total_cmp(&b.resource));
        let mut best: Option<f64> = None;
        let best_by = points
            .iter()
            .map(|p| {
                let b = match best {
                    Some(b) if cmp_loss(b, p.loss) != Ordering::Greater => b,
                    _ => p.loss,
                };
                best = Some(b);
                (p.resource, b)
            })
            .collect();
        Yardstick {
            reach: points.last().map_or(f64::NEG_INFINITY, |p| p.resource),
            best_by,
        }
    }

    /// Its best loss over reports at or below `r`, if its reports reach `r`.
    fn at(&self, r: f64) -> Option<f64> {
        if !reached(self.reach, r) {
            return None;
        }
        // `reached(r, resource)` holds for a prefix of the sorted points.
        let below = self
            .best_by
            .partition_point(|&(resource, _)| reached(r, resource));
        below.checked_sub(1).map(|i| self.best_by[i].1)
    }
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(|a, b| cmp_loss(*a, *b));
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        // NaN, the worst, stays NaN here: `cmp_loss` then ranks the median worst.
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

impl Pruner for MedianPruner {
    fn decide(&mut self, ctx: &PruneContext<'_>) -> Option<Prune> {
        let own: Vec<Point> = ctx.curve(ctx.own()).collect();
        let (last, earlier) = own.split_last()?;
        let before = earlier
            .iter()
            .map(|p| p.resource)
            .max_by(|a, b| a.total_cmp(b));
        if !self.judged_now(before, last.resource) {
            return None;
        }
        let r = last.resource;
        let mine = own
            .iter()
            .filter(|p| reached(r, p.resource))
            .map(|p| p.loss)
            .min_by(|a, b| cmp_loss(*a, *b))?;
        if mine.is_nan() {
            return Some(Prune::at(ctx, r, PruneWhy::NotANumber));
        }
        self.memo.enter(ctx);
        let mut yardstick: Vec<f64> = Vec::new();
        for t in ctx
            .trials
            .iter()
            .filter(|t| t.number != ctx.trial && t.state == TrialState::Complete)
        {
            let y = self
                .memo
                .get(ctx, t, |t| Yardstick::new(ctx.curve(&t.reports)));
            yardstick.extend(y.at(r));
        }
        let of = yardstick.len();
        if of < self.min_trials {
            return None;
        }
        let m = median(yardstick).filter(|m| cmp_loss(mine, *m) == Ordering::Greater)?;
        // Losses back to the objective's own terms (`loss` negates a maximised value, and
        // negating is its own inverse).
        Some(Prune::at(
            ctx,
            r,
            PruneWhy::Median {
                best: ctx.direction.loss(mine),
                median: ctx.direction.loss(m),
                of,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::pruner::PrunerConfig;
    use crate::pruner::TrialCurve;
    use crate::pruner::testkit::{Sim, lockstep, negated, prunings, report, report_at, sequential};
    use crate::trial::{Direction, Report, TrialNumber};

    fn median(f: impl FnOnce(&mut MedianConfig)) -> PrunerConfig {
        let mut c = MedianConfig {
            min_trials: 3,
            ..MedianConfig::default()
        };
        f(&mut c);
        PrunerConfig::Median(c)
    }

    /// Trials 0–2 are the first yardstick; 3 starts worse than their median; 4 reaches it
    /// exactly; 5 starts fine but falls behind once 4 has improved.
    fn script() -> Vec<(u64, Report)> {
        sequential(&[
            (0, &[4.0; 5]),
            (1, &[3.0; 5]),
            (2, &[2.0; 5]),
            (3, &[3.5, 2.5, 2.5, 2.5, 2.5]),
            (4, &[3.0, 3.0, 1.0, 1.0, 1.0]),
            (5, &[2.9; 5]),
        ])
    }

    #[test]
    fn median_rule_prunes_trials_worse_than_the_median_of_complete_ones() {
        // Step 1: 3.5 > median(4, 3, 2) = 3: out. 4's 3 is not worse than 3: on.
        // 5 at step 3: median of (4, 3, 2, 1) = 2.5 (3 is pruned, so not counted): out.
        let pruned = prunings(median(|_| {}), Direction::Minimize, &script());
        assert_eq!(pruned, vec![(3, 1), (5, 3)]);
    }

    #[test]
    fn median_rule_maximizing_prunes_the_mirror_image() {
        let pruned = prunings(median(|_| {}), Direction::Maximize, &negated(&script()));
        assert_eq!(pruned, vec![(3, 1), (5, 3)]);
    }

    #[rstest]
    // Trial 3 is past its bad start by step 3 and completes; 5 then meets 3's 2.5 too.
    #[case::three(3.0, vec![(5, 3)])]
    #[case::four(4.0, vec![(5, 4)])]
    #[case::five(5.0, vec![(5, 5)])]
    #[case::longer_than_every_trial(6.0, vec![])]
    fn median_rule_prunes_nothing_during_warmup(
        #[case] warmup: f64,
        #[case] expected: Vec<(u64, u64)>,
    ) {
        let pruned = prunings(
            median(|c| c.warmup_steps = warmup),
            Direction::Minimize,
            &script(),
        );
        assert!(pruned.iter().all(|&(_, step)| step as f64 >= warmup));
        assert_eq!(pruned, expected);
    }

    #[rstest]
    // Judged at the first report, then whenever a multiple of 2 is crossed: steps 1, 2, 4.
    #[case::every_second(0.0, 2.0, vec![(3, 1), (5, 4)])]
    // Judged at the first report past warm-up, then at 1 + 2k: steps 1, 3, 5.
    #[case::every_second_after_one(1.0, 2.0, vec![(3, 1), (5, 3)])]
    // Steps 1 and 4.
    #[case::every_fourth(0.0, 4.0, vec![(3, 1), (5, 4)])]
    // Step 1 only.
    #[case::once(0.0, 10.0, vec![(3, 1)])]
    fn median_rule_judges_once_per_interval(
        #[case] warmup: f64,
        #[case] interval: f64,
        #[case] expected: Vec<(u64, u64)>,
    ) {
        let config = median(|c| {
            c.warmup_steps = warmup;
            c.interval = interval;
        });
        assert_eq!(prunings(config, Direction::Minimize, &script()), expected);
    }

    #[test]
    fn median_rule_waits_for_min_trials_complete_ones() {
        // With five needed, 3 and 4 go through; 5 meets (4, 3, 2, 2.5, 1) at step 3.
        let pruned = prunings(median(|c| c.min_trials = 5), Direction::Minimize, &script());
        assert_eq!(pruned, vec![(5, 3)]);
        let pruned = prunings(median(|c| c.min_trials = 7), Direction::Minimize, &script());
        assert_eq!(pruned, vec![]);
    }

    #[test]
    fn median_rule_does_not_judge_against_running_trials() {
        // Four trials in parallel: while all run, none is judged, however bad. Trials 0–2
        // complete with their step 3 just before trial 3 reports its own; it meets
        // median(4, 3, 2) = 3 then.
        let mut sim = Sim::new(median(|c| c.min_trials = 1), Direction::Minimize);
        sim.play(&lockstep(&[
            (0, &[4.0; 3]),
            (1, &[3.0; 3]),
            (2, &[2.0; 3]),
            (3, &[10.0; 3]),
        ]));
        assert_eq!(sim.pruned, vec![(3, 3)]);
        // A later trial meets the same median: the pruned trial is no yardstick.
        assert_eq!(sim.send(4, report(1, 2.0)), Some(false));
        assert_eq!(sim.send(5, report(1, 3.1)), Some(true));
        // Trial 4 runs, so it is no yardstick either: counted, it would make the median 2.5.
        assert_eq!(sim.send(6, report(1, 2.6)), Some(false));
    }

    #[test]
    fn median_rule_resumed_study_decides_the_same() {
        let events = script();
        let whole = prunings(median(|_| {}), Direction::Minimize, &events);
        for cut in 1..events.len() {
            let mut first = Sim::new(median(|_| {}), Direction::Minimize);
            first.play_part(&events, 0..cut);
            let mut resumed =
                Sim::resume(median(|_| {}), Direction::Minimize, first.trials.clone());
            resumed.play_part(&events, cut..events.len());
            let mut both = first.pruned.clone();
            both.extend(resumed.pruned.iter().copied());
            assert_eq!(both, whole, "cut after {cut} reports");
        }
    }

    #[test]
    fn median_rule_compares_at_the_same_resource_when_reports_do_not_line_up() {
        // Trial 0 reports at epochs 1, 2, 3; trial 1 at 0.5, 1.5, 3.5.
        let config = median(|c| {
            c.min_trials = 1;
            c.resource = "epoch".into();
            c.interval = 0.5;
        });
        let at = |step, epoch, v| report_at(step, "epoch", epoch, v);
        let mut sim = Sim::new(config, Direction::Minimize);
        sim.play(&[
            (0, at(1, 1.0, 4.0)),
            (0, at(2, 2.0, 3.0)),
            (0, at(3, 3.0, 2.0)),
        ]);
        // At 0.5 trial 0 has no value yet: no yardstick.
        assert_eq!(sim.send(1, at(1, 0.5, 9.0)), Some(false));
        // At 1.5 trial 0 stood at 4 (its epoch-2 value is still ahead): 3.9 is better.
        assert_eq!(sim.send(1, at(2, 1.5, 3.9)), Some(false));
        // At 3.5 trial 0 has not been there: no yardstick, however bad.
        assert_eq!(sim.send(1, at(3, 3.5, 9.0)), Some(false));
        // A third trial at 1.5 with 4.1 is worse than trial 0's 4 there.
        assert_eq!(sim.send(2, at(1, 1.5, 4.1)), Some(true));
    }

    #[test]
    fn median_rule_uses_the_best_value_so_far() {
        // Trial 1's latest value is worse than the median, its best is not.
        let mut sim = Sim::new(median(|c| c.min_trials = 1), Direction::Minimize);
        sim.play(&sequential(&[(0, &[3.0, 3.0, 3.0])]));
        assert_eq!(sim.send(1, report(1, 2.0)), Some(false));
        assert_eq!(sim.send(1, report(2, 5.0)), Some(false));
        // Trial 2 is never better than 3.
        assert_eq!(sim.send(2, report(1, 3.0)), Some(false));
        assert_eq!(sim.send(2, report(2, 3.5)), Some(false));
        // Trial 3 is: out.
        assert_eq!(sim.send(3, report(1, 3.5)), Some(true));
    }

    #[rstest]
    #[case(Direction::Minimize)]
    #[case(Direction::Maximize)]
    fn median_rule_treats_nan_as_the_worst_value(#[case] direction: Direction) {
        let sign = if direction == Direction::Maximize {
            -1.0
        } else {
            1.0
        };
        // Stored complete trials whose values at step 1 are NaN, 4 and 3: with NaN the worst
        // the median is 4. (Dropping NaN would make it 3.5; ordering `-NaN` by `total_cmp`
        // when maximising would make it 3.)
        let stored = [f64::NAN, 4.0, 3.0]
            .iter()
            .enumerate()
            .map(|(n, &v)| TrialCurve {
                place: Default::default(),
                number: TrialNumber(n as u64),
                state: TrialState::Complete,
                reports: vec![report(1, sign * v)],
            })
            .collect();
        let mut sim = Sim::resume(median(|_| {}), direction, stored);
        assert_eq!(sim.send(3, report(1, sign * 3.9)), Some(false));
        assert_eq!(sim.send(4, report(1, sign * 4.1)), Some(true));
        // Nothing but NaN so far: pruned at its first judgement.
        assert_eq!(sim.send(5, report(1, f64::NAN)), Some(true));
        // NaN after a number: its best so far still counts.
        assert_eq!(sim.send(6, report(1, sign * 3.0)), Some(false));
        assert_eq!(sim.send(6, report(2, f64::NAN)), Some(false));
    }

    #[test]
    fn yardstick_gives_the_best_value_at_or_below_a_resource() {
        let p = |resource, loss| Point { resource, loss };
        // Reports out of resource order, a NaN among them.
        let y =
            Yardstick::new([p(2.0, 3.0), p(1.0, 4.0), p(3.0, f64::NAN), p(4.0, 3.5)].into_iter());
        assert_eq!(y.at(0.5), None);
        assert_eq!(y.at(1.0), Some(4.0));
        assert_eq!(y.at(2.5), Some(3.0));
        assert_eq!(y.at(4.0), Some(3.0));
        assert_eq!(y.at(4.5), None);
        let all_nan = Yardstick::new([p(1.0, f64::NAN)].into_iter());
        assert!(all_nan.at(1.0).is_some_and(f64::is_nan));
        assert_eq!(Yardstick::new(std::iter::empty()).at(0.0), None);
    }

    #[test]
    fn median_rule_prunes_an_all_nan_trial_before_any_yardstick_exists() {
        let mut sim = Sim::new(median(|c| c.warmup_steps = 2.0), Direction::Minimize);
        assert_eq!(sim.send(0, report(1, f64::NAN)), Some(false));
        assert_eq!(sim.send(0, report(2, f64::NAN)), Some(true));
    }
}
