//! Hyperband (Li et al. 2018) over asynchronous successive-halving brackets, as Optuna's
//! `HyperbandPruner` runs it.
//!
//! With `s_max = ⌊log_η(max_resource / min_resource)⌋` there are `s_max + 1` brackets (or the
//! `brackets` most aggressive ones); bracket `b` is ASHA with minimum early-stopping rate `b`,
//! so bracket 0 judges trials from `min_resource` on and the last one barely prunes. Bracket
//! `b` gets a share of trials proportional to the paper's `n = ⌈(s_max+1) η^s / (s+1)⌉` with
//! `s = s_max − b`. A trial's bracket follows from its trial number alone, by Fibonacci
//! hashing (`number · 2^64/φ`, whose fractional parts spread evenly), so every run and every
//! resume puts a trial in the same bracket without storing it, and trials compete only with
//! trials of their own bracket. The `[pruner]` keys are in [`super::HyperbandConfig`].

use super::asha::{RungValues, Rungs, first_of, rung_resource};
use super::{
    AshaMode, HyperbandConfig, Memo, Promotion, Prune, PruneContext, PruneWhy, Pruner, reached,
};
use crate::trial::TrialNumber;

/// `⌊log_η(max / min)⌋ + 1`, counted by multiplication so that `max = min · η^k` exactly is
/// not lost to a logarithm's rounding.
pub(crate) fn bracket_count(min: f64, max: f64, eta: f64) -> u32 {
    let mut s_max = 0;
    // 63 brackets at most, like the rung ladder: bounds the loop for unchecked values.
    while s_max < 63 && reached(max, rung_resource(min, eta, s_max + 1)) && eta > 1.0 {
        s_max += 1;
    }
    s_max + 1
}

/// The bracket of a trial: its Fibonacci hash's place in [0, 1), scaled by the shares.
fn bracket_in(brackets: &[(Rungs, f64)], total: f64, trial: TrialNumber) -> usize {
    let u = trial.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) as f64 / 18_446_744_073_709_551_616.0;
    let mut target = u * total;
    for (b, (_, share)) in brackets.iter().enumerate() {
        if target < *share {
            return b;
        }
        target -= share;
    }
    brackets.len().saturating_sub(1)
}

pub struct HyperbandPruner {
    /// Bracket `b`'s ladder and its share of trials.
    brackets: Vec<(Rungs, f64)>,
    total: f64,
    /// One memo for all brackets: a trial is only ever summarised on its own bracket's ladder,
    /// since only its own bracket's trials meet it.
    memo: Memo<RungValues>,
    mode: AshaMode,
}

impl HyperbandPruner {
    pub fn new(config: &HyperbandConfig) -> HyperbandPruner {
        let eta = config.reduction_factor;
        let all = config
            .max_resource
            .map_or(1, |max| bracket_count(config.min_resource, max, eta));
        let used = config.brackets.map_or(all, |b| b.clamp(1, all));
        let brackets: Vec<(Rungs, f64)> = (0..used)
            .map(|b| {
                let s = all - 1 - b;
                let n =
                    all as f64 * eta.powi(i32::try_from(s).unwrap_or(i32::MAX)) / (s as f64 + 1.0);
                let rungs = Rungs::new(config.min_resource, config.max_resource, eta, b);
                (rungs, n.ceil())
            })
            .collect();
        let total = brackets.iter().map(|(_, w)| w).sum();
        HyperbandPruner {
            brackets,
            total,
            memo: Memo::new(),
            mode: config.mode,
        }
    }

    /// The bracket of a trial.
    pub fn bracket_of(&self, trial: TrialNumber) -> usize {
        bracket_in(&self.brackets, self.total, trial)
    }

    /// The number of brackets in use.
    pub fn brackets(&self) -> usize {
        self.brackets.len()
    }
}

impl Pruner for HyperbandPruner {
    fn decide(&mut self, ctx: &PruneContext<'_>) -> Option<Prune> {
        // A re-run (of an interrupted or a promoted trial) stays in its first run's bracket.
        let b = self.bracket_of(ctx.origin(ctx.trial));
        let (rungs, _) = self.brackets.get(b)?;
        let (brackets, total) = (&self.brackets, self.total);
        let mut prune = rungs.decide(ctx, &mut self.memo, |t| {
            bracket_in(brackets, total, ctx.origin(t)) == b
        })?;
        if let PruneWhy::Rung { bracket, .. } = &mut prune.why {
            *bracket = Some(b);
        }
        Some(prune)
    }

    fn pauses(&self) -> bool {
        self.mode == AshaMode::Promote
    }

    fn promotion(&mut self, ctx: &PruneContext<'_>, paused: &[TrialNumber]) -> Option<Promotion> {
        if self.mode != AshaMode::Promote {
            return None;
        }
        let (brackets, total) = (&self.brackets, self.total);
        let bracket = |t: TrialNumber| bracket_in(brackets, total, ctx.origin(t));
        // Each bracket promotes among its own trials, on its own ladder; then the first of
        // the brackets' firsts, by the same order.
        let mut found: Vec<Promotion> = Vec::new();
        for (b, (rungs, _)) in brackets.iter().enumerate() {
            let mine: Vec<TrialNumber> = paused
                .iter()
                .copied()
                .filter(|&t| bracket(t) == b)
                .collect();
            if mine.is_empty() {
                continue;
            }
            if let Some(p) = rungs.promotion(ctx, &mut self.memo, |t| bracket(t) == b, &mine) {
                found.push(p);
            }
        }
        first_of(found)
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::pruner::testkit::{Sim, negated, prunings, report, sequential};
    use crate::pruner::{AshaConfig, PrunerConfig};
    use crate::trial::Direction;

    /// Brackets: 0 judges at 1 and 3, 1 at 3, 2 never (its first rung is the full trial).
    fn config(f: impl FnOnce(&mut HyperbandConfig)) -> HyperbandConfig {
        let mut c = HyperbandConfig {
            min_resource: 1.0,
            max_resource: Some(9.0),
            reduction_factor: 3.0,
            ..HyperbandConfig::default()
        };
        f(&mut c);
        c
    }

    #[rstest]
    #[case(1.0, 27.0, 3.0, 4)]
    #[case(1.0, 26.9, 3.0, 3)]
    #[case(1.0, 81.0, 3.0, 5)]
    #[case(1.0, 10.0, 3.0, 3)]
    #[case(0.1, 0.9, 3.0, 3)]
    #[case(1.0, 2.0, 3.0, 1)]
    #[case(1.0, 9.0, 2.0, 4)]
    #[case(1.0, 1e300, 2.0, 64)]
    fn bracket_count_is_floor_log_eta_plus_one(
        #[case] min: f64,
        #[case] max: f64,
        #[case] eta: f64,
        #[case] expected: u32,
    ) {
        assert_eq!(bracket_count(min, max, eta), expected);
    }

    fn counts(p: &HyperbandPruner, trials: std::ops::Range<u64>) -> Vec<usize> {
        let mut counts = vec![0; p.brackets()];
        for t in trials {
            counts[p.bracket_of(TrialNumber(t))] += 1;
        }
        counts
    }

    /// A re-run (of an interrupted or a promoted trial) is judged in its first run's bracket,
    /// against that bracket's trials, whatever bracket its own number hashes to; and a paused
    /// trial is promoted against its own bracket's trials only.
    #[test]
    fn a_rerun_stays_in_its_first_runs_bracket_and_promotions_stay_within_a_bracket() {
        use crate::pruner::{Origins, TrialCurve};
        use crate::trial::TrialState;
        let mut p = HyperbandPruner::new(&config(|c| c.mode = AshaMode::Promote));
        let hash = HyperbandPruner::new(&config(|_| {}));
        let in_bracket = |b: usize, skip: &[u64]| {
            (0..1000)
                .find(|&n| hash.bracket_of(TrialNumber(n)) == b && !skip.contains(&n))
                .expect("a trial in the bracket")
        };
        // `first` hashes to bracket 2 (no rung below a full trial); its re-run `rerun` and a
        // rival hash to bracket 0 (rungs at 1 and 3).
        let first = in_bracket(2, &[]);
        let rival = in_bracket(0, &[]);
        let rerun = (first + 1..2000)
            .find(|&n| hash.bracket_of(TrialNumber(n)) == 0 && n != rival)
            .expect("a later number in bracket 0");
        let curve = |n: u64, v: f64, state: TrialState| TrialCurve {
            place: Default::default(),
            number: TrialNumber(n),
            state,
            reports: vec![report(1, v)],
        };
        let trials = vec![
            curve(rival, 1.0, TrialState::Running),
            curve(rerun, 5.0, TrialState::Running),
        ];
        let ctx = |origins| PruneContext {
            direction: Direction::Minimize,
            metric: crate::pruner::testkit::METRIC,
            resource: "step",
            trial: TrialNumber(rerun),
            trials: &trials,
            origins,
        };
        let none = Origins::new();
        assert!(
            p.decide(&ctx(&none)).is_some(),
            "by its own number: bracket 0, 2nd of 2"
        );
        let origins = Origins::from([(TrialNumber(rerun), TrialNumber(first))]);
        assert_eq!(
            p.decide(&ctx(&origins)),
            None,
            "as its first run: bracket 2"
        );

        // Two trials of bracket 0 at rung 0 (step 1): the paused one (2nd of 2) is not
        // promoted; a better trial of another bracket there does not count against it.
        let paused = in_bracket(0, &[rival]);
        let other = in_bracket(1, &[]);
        let trials = vec![
            curve(rival, 3.0, TrialState::Running),
            curve(paused, 4.0, TrialState::Pruned),
            curve(other, 0.5, TrialState::Running),
        ];
        let ctx = PruneContext {
            direction: Direction::Minimize,
            metric: crate::pruner::testkit::METRIC,
            resource: "step",
            trial: TrialNumber(paused),
            trials: &trials,
            origins: &none,
        };
        assert_eq!(p.promotion(&ctx, &[TrialNumber(paused)]), None);
        // Four more of bracket 0 arrive below it: 2nd of 6, in the top 2.
        let mut trials = trials.clone();
        let mut taken = vec![rival, paused];
        for v in [5.0, 6.0, 7.0, 8.0] {
            let n = in_bracket(0, &taken);
            taken.push(n);
            trials.push(curve(n, v, TrialState::Running));
        }
        let ctx = PruneContext {
            trials: &trials,
            ..ctx
        };
        let got = p.promotion(&ctx, &[TrialNumber(paused)]).expect("promoted");
        assert_eq!((got.trial, got.rank, got.of), (TrialNumber(paused), 2, 6));
    }

    #[test]
    fn brackets_get_the_papers_shares_of_trials_evenly_spread() {
        // Shares ⌈3·9/3⌉ = 9, ⌈3·3/2⌉ = 5, ⌈3·1/1⌉ = 3 of every 17 trials.
        let p = HyperbandPruner::new(&config(|_| {}));
        assert_eq!(p.brackets(), 3);
        assert_eq!(p.total, 17.0);
        let many = counts(&p, 0..1700);
        for (got, want) in many.iter().zip([900, 500, 300]) {
            assert!(got.abs_diff(want) <= 5, "{many:?}");
        }
        // Spread evenly, not in blocks: every window of 17 consecutive trials is close to
        // the shares.
        for start in 0..100 {
            let window = counts(&p, start..start + 17);
            for (got, want) in window.iter().zip([9, 5, 3]) {
                assert!(got.abs_diff(want) <= 2, "from {start}: {window:?}");
            }
        }
    }

    #[test]
    fn bracket_of_a_trial_is_the_same_in_every_pruner_built_from_the_config() {
        let a = HyperbandPruner::new(&config(|_| {}));
        let b = HyperbandPruner::new(&config(|_| {}));
        for t in (0..500).chain([u64::MAX - 1, u64::MAX]) {
            assert_eq!(a.bracket_of(TrialNumber(t)), b.bracket_of(TrialNumber(t)));
            assert!(a.bracket_of(TrialNumber(t)) < 3);
        }
    }

    #[test]
    fn limiting_brackets_keeps_the_most_aggressive_ones() {
        let p = HyperbandPruner::new(&config(|c| c.brackets = Some(2)));
        assert_eq!(p.brackets(), 2);
        assert_eq!(p.total, 14.0);
        let p = HyperbandPruner::new(&config(|c| c.max_resource = None));
        assert_eq!(p.brackets(), 1);
    }

    fn first_in(p: &HyperbandPruner, bracket: usize, nth: usize) -> u64 {
        (0..)
            .filter(|&t| p.bracket_of(TrialNumber(t)) == bracket)
            .nth(nth)
            .expect("every bracket has trials")
    }

    #[test]
    fn hyperband_trials_compete_only_within_their_bracket() {
        let c = config(|_| {});
        let p = HyperbandPruner::new(&c);
        let (a, b) = (first_in(&p, 0, 0), first_in(&p, 0, 1));
        let (x, y) = (first_in(&p, 1, 0), first_in(&p, 1, 1));
        let z = first_in(&p, 2, 0);
        let events = sequential(&[
            // Bracket 1's x is excellent at rung 3, but a (bracket 0) does not meet it there.
            (x, &[0.1; 9]),
            (a, &[5.0; 9]),
            // Second in bracket 0 at rung 1, behind a: out at 1.
            (b, &[6.0; 9]),
            // Bracket 1's first rung is at 3, where y is behind x: out at 3.
            (y, &[0.2; 9]),
            // Bracket 2 never prunes.
            (z, &[100.0; 9]),
        ]);
        let pruner = PrunerConfig::Hyperband(c);
        assert_eq!(
            prunings(pruner.clone(), Direction::Minimize, &events),
            vec![(b, 1), (y, 3)]
        );
        assert_eq!(
            prunings(pruner, Direction::Maximize, &negated(&events)),
            vec![(b, 1), (y, 3)]
        );
    }

    #[test]
    fn hyperband_with_one_bracket_is_asha() {
        let flat: Vec<Vec<f64>> = [5.0, 3.0, 4.0, 1.0, 2.0, 6.0, 0.5, 2.5, 0.8]
            .iter()
            .map(|&v| vec![v; 9])
            .collect();
        let trials: Vec<(u64, &[f64])> = flat
            .iter()
            .enumerate()
            .map(|(n, v)| (n as u64, v.as_slice()))
            .collect();
        let events = sequential(&trials);
        let hyperband = PrunerConfig::Hyperband(config(|c| c.brackets = Some(1)));
        let asha = PrunerConfig::Asha(AshaConfig {
            min_resource: 1.0,
            max_resource: Some(9.0),
            reduction_factor: 3.0,
            ..AshaConfig::default()
        });
        let expected = vec![(2, 1), (4, 1), (5, 1), (7, 1), (8, 3)];
        assert_eq!(prunings(asha, Direction::Minimize, &events), expected);
        assert_eq!(prunings(hyperband, Direction::Minimize, &events), expected);
    }

    #[test]
    fn hyperband_resumed_study_keeps_its_brackets_and_rungs() {
        // 40 trials with values that wander, so every bracket sees promotions and prunings.
        let curves: Vec<Vec<f64>> = (0..40u64)
            .map(|t| {
                let base = ((t * 37) % 11) as f64;
                (1..=9)
                    .map(|s| base + ((t + s) % 3) as f64 / s as f64)
                    .collect()
            })
            .collect();
        let trials: Vec<(u64, &[f64])> = curves
            .iter()
            .enumerate()
            .map(|(n, v)| (n as u64, v.as_slice()))
            .collect();
        let events = sequential(&trials);
        let pruner = PrunerConfig::Hyperband(config(|_| {}));
        let whole = prunings(pruner.clone(), Direction::Minimize, &events);
        assert!(whole.len() >= 10, "{whole:?}");
        for cut in (1..events.len()).step_by(7) {
            let mut first = Sim::new(pruner.clone(), Direction::Minimize);
            first.play_part(&events, 0..cut);
            let mut resumed =
                Sim::resume(pruner.clone(), Direction::Minimize, first.trials.clone());
            resumed.play_part(&events, cut..events.len());
            let mut both = first.pruned.clone();
            both.extend(resumed.pruned.iter().copied());
            assert_eq!(both, whole, "cut after {cut} reports");
        }
    }
}
