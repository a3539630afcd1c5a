//! Population-based training (PBT, Jaderberg et al. 2017, "Population Based Training of Neural
//! Networks"), asynchronous as in Ray Tune and Syne Tune, as a rule over the stored curves.
//!
//! Every `interval` of resource a trial reaches a *point* (`interval`, `2·interval`, …, below
//! `max_resource`). There its value is ranked against the values at that point of the latest
//! `population` trials (by number) that reached it, itself included: a trial in the bottom
//! `quantile` is *exploited*: it stops, and a new trial continues from the checkpoint of one of
//! the top `quantile` (the *parent*) with the parent's params, *explored* (each param of
//! `mutate` resampled from the space with `resample_probability`, else multiplied by one of
//! `perturb` (numbers) or moved to a neighbouring choice (categories)). A trial is judged from
//! the first point at or after its own first report on: a fresh trial at its first point, a
//! child at the first point past the checkpoint it started from.
//!
//! This file holds the rule ([`PbtPruner`]: which trial is exploited, and its candidate
//! parents, best first) and the exploration ([`explore`]); choosing a parent whose checkpoint
//! can be read, queueing the child and copying the checkpoint are the engine's and the
//! scheduler's. The `[pruner]` keys are in [`PbtConfig`].

use std::cmp::Ordering;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{Prune, PruneContext, PruneWhy, Pruner, cmp_loss, default_resource, reached};
use crate::space::{ParamKind, ParamValue, Params, Space};
use crate::trial::TrialNumber;

/// `[pruner] kind = "pbt"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PbtConfig {
    /// How many of the latest trials at a point a trial is ranked among (itself included).
    pub population: u32,
    /// The resource between two points at which trials are ranked (the perturbation interval).
    pub interval: f64,
    /// The share of the ranked trials that is exploited (the bottom) and that parents come
    /// from (the top): at least one of each where two or more are ranked, at most half.
    pub quantile: f64,
    /// The chance that an explored param is drawn afresh from the space rather than perturbed.
    pub resample_probability: f64,
    /// The factors a number is multiplied by when perturbed, one drawn at random.
    pub perturb: Vec<f64>,
    /// The params that are explored (the others are the parent's as they are); all the
    /// params that can change during a run when absent.
    pub mutate: Option<Vec<String>>,
    /// The resource of a full trial: no trial is exploited at or past it.
    pub max_resource: Option<f64>,
    pub resource: String,
}

impl Default for PbtConfig {
    fn default() -> Self {
        PbtConfig {
            population: 8,
            interval: 1.0,
            // Ray Tune's and the paper's truncation selection: the bottom 25 % copy the top 25 %.
            quantile: 0.25,
            resample_probability: 0.25,
            perturb: vec![0.8, 1.2],
            mutate: None,
            max_resource: None,
            resource: default_resource(),
        }
    }
}

impl PbtConfig {
    /// Validates the values; the error names the key.
    pub fn check(&self) -> Result<(), super::PrunerConfigError> {
        if self.population < 2 {
            return Err(super::PrunerConfigError::Invalid(format!(
                "pruner.population must be at least 2 (a trial is ranked among the population), got {}",
                self.population
            )));
        }
        if !(self.interval.is_finite() && self.interval > 0.0) {
            return Err(super::PrunerConfigError::Invalid(format!(
                "pruner.interval must be a positive number of the resource, got {}",
                self.interval
            )));
        }
        if !(self.quantile > 0.0 && self.quantile <= 0.5) {
            return Err(super::PrunerConfigError::Invalid(format!(
                "pruner.quantile must be above 0 and at most 0.5 (the bottom and the top share), got {}",
                self.quantile
            )));
        }
        if !(0.0..=1.0).contains(&self.resample_probability) {
            return Err(super::PrunerConfigError::Invalid(format!(
                "pruner.resample_probability must be from 0 to 1, got {}",
                self.resample_probability
            )));
        }
        if self.perturb.is_empty() || self.perturb.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
            return Err(super::PrunerConfigError::Invalid(format!(
                "pruner.perturb must be a list of positive factors (e.g. [0.8, 1.2]), got {:?}",
                self.perturb
            )));
        }
        if let Some(max) = self.max_resource
            && !(max.is_finite() && max > self.interval)
        {
            return Err(super::PrunerConfigError::Invalid(format!(
                "pruner.max_resource ({max}) must be above pruner.interval ({})",
                self.interval
            )));
        }
        Ok(())
    }
}

/// The rule; see the module's comment.
pub struct PbtPruner {
    config: PbtConfig,
}

impl PbtPruner {
    pub fn new(config: PbtConfig) -> PbtPruner {
        PbtPruner { config }
    }
}

/// A trial's value at point `at`: the loss of its first report at or past it.
fn value_at(ctx: &PruneContext<'_>, reports: &[crate::trial::Report], at: f64) -> Option<f64> {
    ctx.curve(reports)
        .find(|p| reached(p.resource, at))
        .map(|p| p.loss)
}

/// How many of `of` ranked trials are the bottom (and the top): `⌈of · q⌉`, at most half.
fn share(of: usize, quantile: f64) -> usize {
    ((of as f64 * quantile).ceil() as usize).min(of / 2)
}

impl Pruner for PbtPruner {
    fn decide(&mut self, ctx: &PruneContext<'_>) -> Option<Prune> {
        let c = &self.config;
        let own: Vec<super::Point> = ctx.curve(ctx.own()).collect();
        let last = *own.last()?;
        if last.loss.is_nan() {
            return Some(Prune::at(ctx, last.resource, PruneWhy::NotANumber));
        }
        // The point this report reached first: none when an earlier report had reached it.
        let k = (last.resource / c.interval + 1e-9).floor();
        let point = k * c.interval;
        if k < 1.0
            || own.len() >= 2 && reached(own[own.len() - 2].resource, point)
            || c.max_resource.is_some_and(|max| reached(point, max))
        {
            return None;
        }
        // Judged from the first point at or after its own first report (a child's curve starts
        // past its parent's checkpoint).
        let first = (own[0].resource / c.interval - 1e-9).ceil().max(1.0);
        if k < first {
            return None;
        }
        let mut at: Vec<(TrialNumber, f64)> = ctx
            .trials
            .iter()
            .filter_map(|t| Some((t.number, value_at(ctx, &t.reports, point)?)))
            .collect();
        // The latest `population` trials there, itself among them.
        at.sort_by_key(|a| std::cmp::Reverse(a.0));
        let own_at = *at.iter().find(|(n, _)| *n == ctx.trial)?;
        let mut ranked: Vec<(TrialNumber, f64)> = at
            .into_iter()
            .filter(|(n, _)| *n != ctx.trial)
            .take(c.population as usize - 1)
            .collect();
        ranked.push(own_at);
        ranked.sort_by(|a, b| cmp_loss(a.1, b.1).then(a.0.cmp(&b.0)));
        let of = ranked.len();
        let q = share(of, c.quantile);
        let rank = ranked.iter().position(|(n, _)| *n == ctx.trial)? + 1;
        if q == 0 || rank <= of - q {
            return None;
        }
        // Ties with the top do not exploit: the trial is as good as a parent.
        let own_value = ranked[rank - 1].1;
        let parents: Vec<TrialNumber> = ranked[..q]
            .iter()
            .filter(|(n, v)| *n != ctx.trial && cmp_loss(*v, own_value) == Ordering::Less)
            .map(|(n, _)| *n)
            .collect();
        if parents.is_empty() {
            return None;
        }
        Some(Prune::at(
            ctx,
            point,
            PruneWhy::Exploit {
                rank,
                of,
                quantile: c.quantile,
                parents,
            },
        ))
    }
}

/// One param changed by [`explore`], for the user: `lr 0.01 → 0.012 (×1.2)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub param: String,
    pub from: ParamValue,
    pub to: ParamValue,
    pub how: How,
}

#[derive(Debug, Clone, PartialEq)]
pub enum How {
    /// Multiplied by this factor (then put back inside the bounds, on the step).
    Times(f64),
    /// Moved to the neighbouring choice.
    Neighbour,
    /// Drawn afresh from the space.
    Resampled,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = |p: &ParamValue| crate::fmt::fmt_param(p);
        write!(f, "{} {} → {}", self.param, v(&self.from), v(&self.to))?;
        match self.how {
            How::Times(x) => write!(f, " (×{})", crate::fmt::fmt_value(Some(x))),
            How::Neighbour => Ok(()),
            How::Resampled => write!(f, " (resampled)"),
        }
    }
}

/// The params of a child of `parent_params`: each param of `mutate` that the parent has is
/// resampled from `space` with `resample_probability`, else perturbed (a number times one of
/// `perturb`, kept inside its bounds and on its step; a choice moved to a neighbour); the
/// others are the parent's. Params that switch others on or off (`when`) are never changed,
/// so the child has exactly the parent's set of params. Deterministic in `seed`.
pub fn explore(
    space: &Space,
    parent_params: &Params,
    mutate: &[String],
    config: &PbtConfig,
    seed: u64,
) -> (Params, Vec<Change>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let parents_of_conditions: Vec<&str> = space
        .params()
        .iter()
        .flat_map(|p| p.when.iter().map(|c| c.parent.as_str()))
        .collect();
    let mut params = parent_params.clone();
    let mut changes = Vec::new();
    for p in space.params() {
        if !mutate.contains(&p.name) || parents_of_conditions.contains(&p.name.as_str()) {
            continue;
        }
        let Some(from) = parent_params.get(&p.name) else {
            continue;
        };
        let (to, how) = if rng.random::<f64>() < config.resample_probability {
            (p.from_unit(rng.random::<f64>()), How::Resampled)
        } else {
            match &p.kind {
                ParamKind::Categorical { choices } => {
                    let i = choices.iter().position(|c| c.same(from)).unwrap_or(0);
                    let j = if choices.len() < 2 {
                        i
                    } else if i == 0 {
                        1
                    } else if i + 1 == choices.len() || rng.random::<bool>() {
                        i - 1
                    } else {
                        i + 1
                    };
                    (choices[j].clone(), How::Neighbour)
                }
                ParamKind::Float { .. } | ParamKind::Int { .. } => {
                    let factor = config.perturb[rng.random_range(0..config.perturb.len())];
                    let x = from.as_f64().unwrap_or(f64::NAN) * factor;
                    (
                        p.from_unit(p.to_unit(&ParamValue::Float(x))),
                        How::Times(factor),
                    )
                }
            }
        };
        if !to.same(from) {
            changes.push(Change {
                param: p.name.clone(),
                from: from.clone(),
                to: to.clone(),
                how,
            });
        }
        params.insert(p.name.clone(), to);
    }
    (params, changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pruner::{NO_ORIGINS, TrialCurve};
    use crate::trial::{Direction, Report, TrialState};

    fn curve(number: u64, points: &[(u64, f64)]) -> TrialCurve {
        TrialCurve {
            place: Default::default(),
            number: TrialNumber(number),
            state: TrialState::Running,
            reports: points
                .iter()
                .map(|&(step, v)| Report {
                    step,
                    metrics: [("loss".to_string(), v)].into_iter().collect(),
                })
                .collect(),
        }
    }

    fn decide(config: &PbtConfig, trials: &[TrialCurve], trial: u64) -> Option<Prune> {
        let ctx = PruneContext {
            direction: Direction::Minimize,
            metric: "loss",
            resource: "step",
            trial: TrialNumber(trial),
            trials,
            origins: &NO_ORIGINS,
        };
        PbtPruner::new(config.clone()).decide(&ctx)
    }

    fn config() -> PbtConfig {
        PbtConfig {
            population: 4,
            interval: 2.0,
            max_resource: Some(10.0),
            ..PbtConfig::default()
        }
    }

    #[test]
    fn the_bottom_quarter_at_a_point_is_exploited_with_the_top_quarter_as_parents() {
        // Four trials at step 2; trial 3 reports last and is the worst.
        let mut trials = vec![
            curve(0, &[(1, 0.5), (2, 0.4)]),
            curve(1, &[(1, 0.6), (2, 0.2)]),
            curve(2, &[(1, 0.7), (2, 0.5)]),
            curve(3, &[(1, 0.9)]),
        ];
        assert_eq!(decide(&config(), &trials, 3), None, "step 1 is no point");
        trials[3].reports.push(Report {
            step: 2,
            metrics: [("loss".to_string(), 0.8)].into_iter().collect(),
        });
        let p = decide(&config(), &trials, 3).expect("exploited");
        assert_eq!(p.at, 2.0);
        assert_eq!(
            p.why,
            PruneWhy::Exploit {
                rank: 4,
                of: 4,
                quantile: 0.25,
                parents: vec![TrialNumber(1)],
            }
        );
        assert_eq!(
            p.to_string(),
            "at step 2 (4th of 4 trials there, in the bottom 1/4)"
        );
        // The others are not in the bottom.
        for n in 0..3 {
            assert_eq!(decide(&config(), &trials, n), None, "trial {n}");
        }
    }

    #[test]
    fn a_trial_is_judged_once_a_point_after_an_interval_of_its_own_and_never_at_the_end() {
        let cfg = config();
        let rivals = |extra: TrialCurve| {
            let mut t: Vec<TrialCurve> = (0..3)
                .map(|n| {
                    curve(
                        n,
                        &(1..=10).map(|s| (s, 0.1 * n as f64)).collect::<Vec<_>>(),
                    )
                })
                .collect();
            t.push(extra);
            t
        };
        // A child that started from a checkpoint at step 4: its first report is step 5, so it
        // is first judged at 6, two steps of its own later.
        let child = |upto: u64| curve(9, &(5..=upto).map(|s| (s, 5.0)).collect::<Vec<_>>());
        assert_eq!(decide(&cfg, &rivals(child(5)), 9), None);
        assert!(
            decide(&cfg, &rivals(child(6)), 9).is_some(),
            "6 is a whole interval past 4"
        );
        // Judged once at a point: the next report past it says nothing.
        let mut c = child(6);
        c.reports.push(Report {
            step: 7,
            metrics: [("loss".to_string(), 5.0)].into_iter().collect(),
        });
        assert_eq!(decide(&cfg, &rivals(c), 9), None);
        // A trial whose first report sits on a point is judged there: it trained since the
        // point before (a trial that reports every other step).
        let sparse = curve(9, &[(6, 5.0)]);
        assert!(decide(&cfg, &rivals(sparse), 9).is_some());
        // The last point, at max_resource, is the trial's end: never exploited there.
        let full = curve(9, &(1..=10).map(|s| (s, 5.0)).collect::<Vec<_>>());
        assert_eq!(decide(&cfg, &rivals(full), 9), None);
    }

    #[test]
    fn only_the_latest_population_counts_and_ties_and_lone_trials_are_not_exploited() {
        let cfg = PbtConfig {
            population: 2,
            ..config()
        };
        // Old trial 0 was great at step 2; the latest two are 5 and 6: 6 ranks against 5 only.
        let trials = vec![
            curve(0, &[(2, 0.0)]),
            curve(5, &[(2, 0.5)]),
            curve(6, &[(2, 0.4)]),
        ];
        assert_eq!(decide(&cfg, &trials, 6), None, "better than 5, 0 is not in");
        let p = decide(&cfg, &trials, 5).expect("5 is the bottom of {5, 6}");
        assert!(
            matches!(&p.why, PruneWhy::Exploit { parents, of: 2, .. } if parents == &vec![TrialNumber(6)])
        );
        // Alone at a point: nobody to copy.
        assert_eq!(decide(&config(), &[curve(0, &[(2, 0.9)])], 0), None);
        // A tie with the top: as good as a parent.
        let tied = vec![curve(0, &[(2, 0.5)]), curve(1, &[(2, 0.5)])];
        assert_eq!(decide(&config(), &tied, 1), None);
        // NaN is pruned outright.
        let nan = vec![curve(0, &[(2, 0.5)]), curve(1, &[(1, f64::NAN)])];
        assert_eq!(
            decide(&config(), &nan, 1).map(|p| p.why),
            Some(PruneWhy::NotANumber)
        );
    }

    fn space() -> Space {
        Space::from_toml(
            &toml::from_str(
                r#"
lr = { type = "float", low = 1e-4, high = 1e-1, log = true }
layers = { type = "int", low = 1, high = 8 }
opt = { type = "categorical", choices = ["sgd", "adam", "adamw"] }
mom = { type = "float", low = 0.0, high = 0.99, when = { opt = ["sgd"] } }
"#,
            )
            .expect("toml"),
        )
        .expect("space")
    }

    #[test]
    fn exploring_perturbs_within_bounds_resamples_sometimes_and_keeps_the_rest() {
        let space = space();
        let parent: Params = [
            ("lr".to_string(), ParamValue::Float(0.01)),
            ("layers".to_string(), ParamValue::Int(8)),
            ("opt".to_string(), ParamValue::Str("sgd".into())),
            ("mom".to_string(), ParamValue::Float(0.9)),
        ]
        .into_iter()
        .collect();
        let all: Vec<String> = ["lr", "layers", "opt", "mom"].map(String::from).to_vec();
        let only_perturb = PbtConfig {
            resample_probability: 0.0,
            ..PbtConfig::default()
        };
        let mut factors = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let (child, changes) = explore(&space, &parent, &all, &only_perturb, seed);
            space.validate(&child).expect("a valid point of the space");
            // `opt` switches `mom` on: never changed.
            assert_eq!(child["opt"], parent["opt"]);
            let lr = child["lr"].as_f64().expect("lr");
            assert!(
                (lr - 0.008).abs() < 1e-12 || (lr - 0.012).abs() < 1e-12,
                "{lr}"
            );
            factors.insert((lr * 1e4).round() as i64);
            // 8 × 1.2 is past the bound: kept at 8 (no change listed); 8 × 0.8 = 6.4 → 6.
            let layers = child["layers"].as_f64().expect("layers");
            assert!(layers == 8.0 || layers == 6.0, "{layers}");
            assert!(changes.iter().all(|c| c.param != "opt"));
            assert_eq!(
                changes.iter().any(|c| c.param == "layers"),
                layers == 6.0,
                "{changes:?}"
            );
        }
        assert_eq!(factors.len(), 2, "both factors drawn");
        // Same seed, same child.
        assert_eq!(
            explore(&space, &parent, &all, &PbtConfig::default(), 7),
            explore(&space, &parent, &all, &PbtConfig::default(), 7)
        );
        // Only `mutate` changes; resampling always redraws from the space.
        let resample = PbtConfig {
            resample_probability: 1.0,
            ..PbtConfig::default()
        };
        let (child, changes) = explore(&space, &parent, &["lr".to_string()], &resample, 3);
        assert_eq!(child["layers"], parent["layers"]);
        assert_eq!(child["mom"], parent["mom"]);
        assert!(
            changes
                .iter()
                .all(|c| c.how == How::Resampled && c.param == "lr")
        );
        // A categorical param without dependants moves to a neighbour.
        let flat = Space::from_toml(
            &toml::from_str(
                r#"opt = { type = "categorical", choices = ["sgd", "adam", "adamw"] }"#,
            )
            .expect("toml"),
        )
        .expect("space");
        let p: Params = [("opt".to_string(), ParamValue::Str("sgd".into()))]
            .into_iter()
            .collect();
        let (child, changes) = explore(&flat, &p, &["opt".to_string()], &only_perturb, 1);
        assert_eq!(child["opt"], ParamValue::Str("adam".into()));
        assert_eq!(changes[0].to_string(), "opt sgd → adam");
    }

    #[test]
    fn check_names_the_bad_key() {
        for (c, key) in [
            (
                PbtConfig {
                    population: 1,
                    ..PbtConfig::default()
                },
                "pruner.population",
            ),
            (
                PbtConfig {
                    interval: 0.0,
                    ..PbtConfig::default()
                },
                "pruner.interval",
            ),
            (
                PbtConfig {
                    quantile: 0.6,
                    ..PbtConfig::default()
                },
                "pruner.quantile",
            ),
            (
                PbtConfig {
                    resample_probability: 1.5,
                    ..PbtConfig::default()
                },
                "pruner.resample_probability",
            ),
            (
                PbtConfig {
                    perturb: vec![],
                    ..PbtConfig::default()
                },
                "pruner.perturb",
            ),
            (
                PbtConfig {
                    perturb: vec![0.8, -1.0],
                    ..PbtConfig::default()
                },
                "pruner.perturb",
            ),
            (
                PbtConfig {
                    max_resource: Some(0.5),
                    ..PbtConfig::default()
                },
                "pruner.max_resource",
            ),
        ] {
            let e = c.check().expect_err(key);
            assert!(e.to_string().starts_with(key), "{e}");
        }
        PbtConfig::default()
            .check()
            .expect("the defaults are valid");
    }
}
