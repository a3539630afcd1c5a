//! Stopping by prediction (`kind = "forecast"`, issue 26): a trial stops when the forecast of its
//! final value ([`super::forecast`]), band included, cannot beat the best complete trial.
//!
//! At each report at or past `min_resource` and below `max_resource`, the trial's curve (its
//! latest point and the one before) is forecast from the curves of the study's complete trials
//! that reached `max_resource`. It is pruned when even the optimistic edge of the band (the
//! `confidence` band's better side) is worse than the best final value among them. So a slow
//! starter whose curve still falls steeply goes on even while it ranks last, and a fast starter
//! that has flattened above the best stops, whatever its rank. Until `min_trials` trials have
//! completed there is nothing to forecast from, and nothing is pruned (a NaN value is, as by
//! every rule). The `[pruner]` keys are in [`super::ForecastConfig`].

use super::forecast::{Place, Reference, forecast};
use super::{ForecastConfig, Memo, Prune, PruneContext, PruneWhy, Pruner, reached};
use crate::trial::TrialState;

pub struct ForecastPruner {
    min_resource: f64,
    max_resource: f64,
    min_trials: usize,
    confidence: f64,
    /// Each complete trial's curve as a reference, so that a decision does not re-read every
    /// report of the study.
    memo: Memo<Option<Reference>>,
}

impl ForecastPruner {
    pub fn new(config: &ForecastConfig) -> ForecastPruner {
        ForecastPruner {
            min_resource: config.min_resource,
            max_resource: config.max_resource.unwrap_or(f64::INFINITY),
            min_trials: config.min_trials.max(1),
            confidence: config.confidence,
            memo: Memo::new(),
        }
    }
}

impl Pruner for ForecastPruner {
    fn decide(&mut self, ctx: &PruneContext<'_>) -> Option<Prune> {
        let own: Vec<_> = ctx.curve(ctx.own()).collect();
        let now = *own.last()?;
        if !reached(now.resource, self.min_resource) || reached(now.resource, self.max_resource) {
            return None;
        }
        if now.loss.is_nan() {
            return Some(Prune::at(ctx, now.resource, PruneWhy::NotANumber));
        }
        self.memo.enter(ctx);
        let mut refs: Vec<Reference> = Vec::new();
        for t in ctx
            .trials
            .iter()
            .filter(|t| t.number != ctx.trial && t.state == TrialState::Complete)
        {
            let k = self.memo.get(ctx, t, |t| {
                Reference::new(ctx.curve(&t.reports).map(|p| (p.resource, p.loss)))
                    .map(|k| k.placed(t.place.clone()))
            });
            if let Some(k) = k.as_ref().filter(|k| reached(k.reach(), self.max_resource)) {
                refs.push(k.clone());
            }
        }
        if refs.len() < self.min_trials {
            return None;
        }
        let best = refs
            .iter()
            .map(Reference::last)
            .fold(f64::INFINITY, f64::min);
        // The point before the latest, at a resource strictly below it, for the curve's rate.
        let earlier = own
            .iter()
            .rev()
            .find(|p| p.resource < now.resource && p.loss.is_finite())
            .map(|p| (p.resource, p.loss));
        let place = ctx
            .trials
            .iter()
            .find(|t| t.number == ctx.trial)
            .map(|t| &t.place);
        let f = forecast(
            &refs,
            earlier,
            (now.resource, now.loss),
            place.unwrap_or(&Place::default()),
            self.confidence,
        )?;
        (f.low > best).then(|| {
            let value = |loss: f64| ctx.direction.loss(loss);
            Prune::at(
                ctx,
                now.resource,
                PruneWhy::Forecast {
                    predicted: value(f.mean),
                    optimistic: value(f.low),
                    best: value(best),
                    of: refs.len(),
                },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::pruner::TrialCurve;
    use crate::trial::{Direction, Report, TrialNumber};

    fn curve(number: u64, state: TrialState, losses: &[f64]) -> TrialCurve {
        TrialCurve {
            place: Default::default(),
            number: TrialNumber(number),
            state,
            reports: losses
                .iter()
                .enumerate()
                .map(|(i, &v)| Report {
                    step: i as u64 + 1,
                    metrics: BTreeMap::from([
                        ("loss".to_string(), v),
                        ("epoch".to_string(), (i + 1) as f64),
                    ]),
                })
                .collect(),
        }
    }

    fn config(min_trials: usize) -> ForecastConfig {
        ForecastConfig {
            max_resource: Some(9.0),
            min_trials,
            resource: "epoch".into(),
            ..ForecastConfig::default()
        }
    }

    fn decide(
        p: &mut ForecastPruner,
        trials: &[TrialCurve],
        n: u64,
        direction: Direction,
    ) -> Option<Prune> {
        p.decide(&PruneContext {
            direction,
            metric: "loss",
            resource: "epoch",
            trial: TrialNumber(n),
            trials,
            origins: &crate::pruner::NO_ORIGINS,
        })
    }

    /// Complete trials: fast ones that flatten high and slow ones that end low.
    fn complete() -> Vec<TrialCurve> {
        let mut v = Vec::new();
        for i in 0..4 {
            let d = 0.01 * i as f64;
            v.push(curve(
                i,
                TrialState::Complete,
                &[
                    0.9 + d,
                    0.7 + d,
                    0.62 + d,
                    0.6 + d,
                    0.6 + d,
                    0.6 + d,
                    0.6 + d,
                    0.6 + d,
                    0.6 + d,
                ],
            ));
            v.push(curve(
                10 + i,
                TrialState::Complete,
                &[
                    2.0 + d,
                    1.7 + d,
                    1.4 + d,
                    1.1 + d,
                    0.8 + d,
                    0.5 + d,
                    0.3 + d,
                    0.2 + d,
                    0.15 + d,
                ],
            ));
        }
        v
    }

    #[test]
    fn a_flattened_fast_starter_stops_and_a_steep_slow_starter_goes_on() {
        let mut p = ForecastPruner::new(&config(3));
        let mut trials = complete();
        trials.push(curve(20, TrialState::Running, &[0.92, 0.71, 0.63, 0.61]));
        trials.push(curve(21, TrialState::Running, &[2.02, 1.71, 1.41, 1.12]));
        let fast = decide(&mut p, &trials, 20, Direction::Minimize).expect("pruned");
        assert!(
            matches!(fast.why, PruneWhy::Forecast { of: 8, .. }),
            "{fast:?}"
        );
        assert_eq!(fast.at, 4.0);
        // Ranked last of every trial at epoch 4, yet it goes on.
        assert_eq!(decide(&mut p, &trials, 21, Direction::Minimize), None);
    }

    #[test]
    fn a_trial_far_in_the_space_from_every_complete_one_needs_more_evidence_to_stop() {
        use crate::pruner::forecast::Place;
        use crate::space::{ParamValue, Params, Space};
        let space = Space::from_toml(
            &toml::from_str(
                r#"
lr = { type = "float", low = 1e-4, high = 1e-1, log = true }
opt = { type = "categorical", choices = ["sgd", "adam"] }
"#,
            )
            .expect("toml"),
        )
        .expect("space");
        let at = |lr: f64, opt: &str| {
            Place::of(
                &space,
                &Params::from([
                    ("lr".to_string(), ParamValue::Float(lr)),
                    ("opt".to_string(), ParamValue::Str(opt.into())),
                ]),
            )
        };
        // The complete trials all used sgd, over the lr range.
        let mut trials = complete();
        for (i, t) in trials.iter_mut().enumerate() {
            t.place = at(1e-4 * 10f64.powf(3.0 * i as f64 / 7.0), "sgd");
        }
        // A curve that stops among them ...
        let decide_at = |losses: &[f64], place: Place| {
            let mut t = trials.clone();
            t.push(curve(20, TrialState::Running, losses));
            t.last_mut().unwrap().place = place;
            decide(
                &mut ForecastPruner::new(&config(3)),
                &t,
                20,
                Direction::Minimize,
            )
        };
        // A curve still falling that stops among them goes on with an optimizer no complete
        // trial used: its forecast leans on another region's curves only.
        let falling = [0.9, 0.7, 0.55, 0.45];
        assert!(decide_at(&falling, at(1e-3, "sgd")).is_some());
        assert_eq!(decide_at(&falling, at(1e-3, "adam")), None);
        // The widening is bounded: a curve that has flattened far above the best stops there too.
        let flat = [0.9, 0.66, 0.6, 0.59];
        assert!(decide_at(&flat, at(1e-3, "adam")).is_some());
    }

    #[test]
    fn nothing_is_pruned_before_enough_trials_complete_or_past_the_full_resource() {
        let mut trials: Vec<TrialCurve> = complete().into_iter().take(2).collect();
        trials.push(curve(20, TrialState::Running, &[0.92, 0.71, 0.63, 0.61]));
        let mut p = ForecastPruner::new(&config(3));
        assert_eq!(decide(&mut p, &trials, 20, Direction::Minimize), None);
        // Running and pruned trials are no yardstick.
        trials.push(curve(30, TrialState::Pruned, &[0.1, 0.1, 0.1]));
        trials.push(curve(31, TrialState::Running, &[0.1; 9]));
        assert_eq!(decide(&mut p, &trials, 20, Direction::Minimize), None);
        let mut trials = complete();
        trials.push(curve(20, TrialState::Running, &[0.9; 9]));
        assert_eq!(decide(&mut p, &trials, 20, Direction::Minimize), None);
    }

    #[test]
    fn a_nan_is_pruned_at_once_and_maximised_values_are_said_in_their_own_terms() {
        let mut p = ForecastPruner::new(&config(3));
        let mut trials = complete();
        trials.push(curve(20, TrialState::Running, &[0.9, f64::NAN]));
        let nan = decide(&mut p, &trials, 20, Direction::Minimize).unwrap();
        assert_eq!(nan.why, PruneWhy::NotANumber);
        // The same study maximising the negated metric prunes the same trial, and says its
        // values as the user reads them.
        let negate = |t: &TrialCurve| {
            let mut t = t.clone();
            for r in &mut t.reports {
                let v = r.metrics["loss"];
                r.metrics.insert("loss".into(), -v);
            }
            t
        };
        let mut trials: Vec<TrialCurve> = complete().iter().map(negate).collect();
        trials.push(negate(&curve(
            20,
            TrialState::Running,
            &[0.92, 0.71, 0.63, 0.61],
        )));
        let max = decide(&mut p, &trials, 20, Direction::Maximize).unwrap();
        match max.why {
            PruneWhy::Forecast {
                predicted, best, ..
            } => {
                assert!(predicted < best, "{predicted} {best}");
                assert!((best - (-0.15)).abs() < 1e-12);
            }
            w => panic!("{w:?}"),
        }
    }
}
