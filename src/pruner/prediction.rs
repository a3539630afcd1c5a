//! Predictions users can see (issue 26): for a running trial, the forecast of its final value
//! and a band, whatever the pruner (ASHA, median, forecast, none).
//!
//! [`prediction`] is pure: the curve so far, the complete trials' curves, the direction and the
//! study's full resource give the forecast of [`super::forecast`] (kernel matching against the
//! complete curves) in the metric's own units. The band is that forecast's **80 % band**: the
//! range that, under the forecast's spread of the matched completions' remaining improvement,
//! holds the final value with probability 0.8 (its edges are the 10th and 90th percentiles).
//! The coverage test below checks it on simulated curve families. Nothing is predicted before
//! [`MIN_CURVES`] complete curves reach the full resource (the forecast pruner's default
//! `min_trials`), nor for a curve already there.
//!
//! [`Predictor`] keeps the complete curves of a study as they end, for a reader that sees a
//! stream of reports (the line printer, the live UI, `tune watch`): the resource is the report's
//! step.

use std::collections::HashMap;

use super::forecast::{Place, Reference, forecast};
use super::reached;
use crate::trial::{Direction, Report};

/// Complete curves needed before anything is predicted (the forecast pruner's `min_trials`
/// default).
pub const MIN_CURVES: usize = 3;

/// The two-sided probability of the band shown with a prediction: 0.8, the 10th to the 90th
/// percentile.
pub const BAND: f64 = 0.8;

/// The predicted final value of a running trial, in the metric's own units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// The predicted value at the study's full resource.
    pub value: f64,
    /// The band's lower and upper edges (`low ≤ value ≤ high`, in the metric's units whatever
    /// the direction): the 10th and 90th percentiles.
    pub low: f64,
    pub high: f64,
    /// The resource (step) of the curve's latest point the prediction was made from.
    pub at_step: f64,
    /// The complete curves it was matched against.
    pub from_curves: usize,
}

impl Prediction {
    /// `→ 0.112 [0.0981, 0.130]`, the compact form for lines (three significant digits: a
    /// forecast is no more precise than that).
    pub fn compact(&self) -> String {
        let f = |v: f64| crate::fmt::Precision::LABEL.fmt(v);
        format!("→ {} [{}, {}]", f(self.value), f(self.low), f(self.high))
    }
}

/// Predicts the final value of `curve` (its `(resource, value)` points so far, any order, in the
/// metric's units) from the `complete` trials' curves (in losses, as the pruners keep them:
/// [`Direction::loss`] of the values) that reach `max_resource` (`None`: the furthest any of them
/// reaches). `None` with fewer than [`MIN_CURVES`] such curves, a curve with no finite point,
/// or a curve already at the full resource.
pub fn prediction(
    curve: &[(f64, f64)],
    complete: &[Reference],
    direction: Direction,
    max_resource: Option<f64>,
) -> Option<Prediction> {
    let max = max_resource.unwrap_or_else(|| {
        complete
            .iter()
            .map(Reference::reach)
            .fold(f64::NEG_INFINITY, f64::max)
    });
    if !max.is_finite() {
        return None;
    }
    let reaching = complete.iter().filter(|k| reached(k.reach(), max)).count();
    if reaching < MIN_CURVES {
        return None;
    }
    let mut own: Vec<(f64, f64)> = curve
        .iter()
        .filter(|(r, v)| r.is_finite() && v.is_finite())
        .map(|&(r, v)| (r, direction.loss(v)))
        .collect();
    own.sort_by(|a, b| a.0.total_cmp(&b.0));
    let now = *own.last()?;
    if reached(now.0, max) {
        return None;
    }
    let earlier = own.iter().rev().find(|p| p.0 < now.0 && p.0 > 0.0).copied();
    // Usually every complete curve reaches the full resource: no copy then (this runs per
    // report in the UI).
    let shorter: Vec<Reference>;
    let refs = if reaching == complete.len() {
        complete
    } else {
        shorter = complete
            .iter()
            .filter(|k| reached(k.reach(), max))
            .cloned()
            .collect();
        &shorter
    };
    let f = forecast(refs, earlier, now, &Place::default(), BAND)?;
    let (a, b) = (direction.loss(f.low), direction.loss(f.high));
    Some(Prediction {
        value: direction.loss(f.mean),
        low: a.min(b),
        high: a.max(b),
        at_step: now.0,
        from_curves: refs.len(),
    })
}

/// A study's complete curves as they end, and the curves of its running trials, for readers of
/// a stream of reports: the resource is the report's step, the value the study's metric.
#[derive(Debug, Clone)]
pub struct Predictor {
    direction: Direction,
    metric: String,
    max_resource: Option<f64>,
    complete: Vec<Reference>,
    running: HashMap<u64, Vec<(f64, f64)>>,
}

impl Predictor {
    pub fn new(direction: Direction, metric: impl Into<String>) -> Predictor {
        Predictor {
            direction,
            metric: metric.into(),
            max_resource: None,
            complete: Vec::new(),
            running: HashMap::new(),
        }
    }

    /// The study's full resource when the pruner's configuration says it; otherwise the
    /// longest complete curve stands for it.
    pub fn with_max_resource(mut self, max: Option<f64>) -> Predictor {
        self.max_resource = max;
        self
    }

    /// A report of trial `number`.
    pub fn report(&mut self, number: u64, report: &Report) {
        if let Some(&v) = report.metrics.get(&self.metric) {
            self.running
                .entry(number)
                .or_default()
                .push((report.step as f64, v));
        }
    }

    /// The prediction for trial `number` from its reports so far.
    pub fn predict(&self, number: u64) -> Option<Prediction> {
        let curve = self.running.get(&number)?;
        prediction(curve, &self.complete, self.direction, self.max_resource)
    }

    /// Trial `number` ended: complete, its curve becomes a reference; either way it no longer
    /// runs. Returns the prediction its reports gave just before it ended (for a pruned trial:
    /// what it would have reached).
    pub fn finish(&mut self, number: u64, complete: bool) -> Option<Prediction> {
        let last = self.predict(number);
        if let Some(curve) = self.running.remove(&number)
            && complete
            && let Some(k) =
                Reference::new(curve.into_iter().map(|(r, v)| (r, self.direction.loss(v))))
        {
            self.complete.push(k);
        }
        last
    }

    /// A complete trial whose curve the reader did not see as a stream (an existing trial of a
    /// resumed or watched study).
    pub fn add_complete(&mut self, reports: &[Report]) {
        let points = reports.iter().filter_map(|r| {
            Some((
                r.step as f64,
                self.direction.loss(*r.metrics.get(&self.metric)?),
            ))
        });
        if let Some(k) = Reference::new(points) {
            self.complete.push(k);
        }
    }

    /// Complete curves known.
    pub fn complete_curves(&self) -> usize {
        self.complete.len()
    }

    /// The complete curves known, in losses (what [`prediction`] takes).
    pub fn references(&self) -> &[Reference] {
        &self.complete
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A small deterministic generator.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
        fn normal(&mut self) -> f64 {
            let (u, v) = (self.next().max(1e-12), self.next());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        }
    }

    /// Simulated learning curves of three families over steps 1..=20: power laws, exponential
    /// decays to a plateau, and slow starters that cross the fast ones, each with its own end
    /// and speed, plus observation noise.
    fn simulated(rng: &mut Lcg, family: usize, noise: f64) -> Vec<(f64, f64)> {
        let end = 0.1 + 0.5 * rng.next();
        let speed = 0.3 + 1.7 * rng.next();
        let start = 2.3;
        (1..=20)
            .map(|s| {
                let r = s as f64;
                let clean = match family {
                    0 => end + (start - end) * (r.powf(-speed) - 20f64.powf(-speed)),
                    1 => end + (start - end) * (-(speed * r / 4.0)).exp(),
                    _ => {
                        // Sigmoid drop: flat first, then falls to its end.
                        let mid = 4.0 + 8.0 * (speed - 0.3) / 1.7;
                        end + (start - end) / (1.0 + ((r - mid) / 1.5).exp())
                    }
                };
                (r, clean + noise * rng.normal())
            })
            .collect()
    }

    #[test]
    fn nothing_is_predicted_before_three_complete_curves_or_at_the_end() {
        let mut rng = Lcg(7);
        let refs: Vec<Reference> = (0..2)
            .map(|_| Reference::new(simulated(&mut rng, 0, 0.0)).unwrap())
            .collect();
        let c = simulated(&mut rng, 0, 0.0);
        assert_eq!(prediction(&c[..5], &refs, Direction::Minimize, None), None);
        let mut refs = refs;
        refs.push(Reference::new(simulated(&mut rng, 0, 0.0)).unwrap());
        let p = prediction(&c[..5], &refs, Direction::Minimize, None).unwrap();
        assert_eq!((p.at_step, p.from_curves), (5.0, 3));
        assert!(p.low <= p.value && p.value <= p.high, "{p:?}");
        assert_eq!(prediction(&c, &refs, Direction::Minimize, None), None);
        // A study's full resource beyond every complete curve leaves none to match.
        assert_eq!(
            prediction(&c[..5], &refs, Direction::Minimize, Some(40.0)),
            None
        );
        assert_eq!(prediction(&[], &refs, Direction::Minimize, None), None);
    }

    #[test]
    fn a_maximised_metric_is_predicted_in_its_own_units() {
        let flip = |c: Vec<(f64, f64)>| c.into_iter().map(|(r, v)| (r, 1.0 - v / 3.0));
        let mut rng = Lcg(11);
        let mut p = Predictor::new(Direction::Maximize, "acc");
        for n in 0..12u64 {
            for (r, v) in flip(simulated(&mut rng, 0, 0.0)) {
                p.report(n, &report(r as u64, "acc", v));
            }
            p.finish(n, true);
        }
        let c: Vec<(f64, f64)> = flip(simulated(&mut rng, 0, 0.0)).collect();
        for &(r, v) in &c[..6] {
            p.report(99, &report(r as u64, "acc", v));
        }
        let got = p.predict(99).unwrap();
        let truth = c[19].1;
        assert!(got.low <= got.value && got.value <= got.high, "{got:?}");
        assert!(got.value > c[5].1, "an accuracy rises: {got:?}");
        assert!((got.value - truth).abs() < 0.1, "{got:?} vs {truth}");
    }

    fn report(step: u64, metric: &str, v: f64) -> Report {
        Report {
            step,
            metrics: BTreeMap::from([(metric.to_string(), v)]),
        }
    }

    #[test]
    fn the_band_holds_about_eighty_percent_of_finals_on_simulated_curves() {
        // 3 families × 40 complete curves as references; 3 × 60 test curves predicted from
        // steps 4, 8 and 12: the share of true finals inside the band.
        let mut rng = Lcg(2026);
        let mut refs = Vec::new();
        for family in 0..3 {
            for _ in 0..40 {
                refs.push(Reference::new(simulated(&mut rng, family, 0.01)).unwrap());
            }
        }
        let (mut inside, mut total, mut err) = (0usize, 0usize, 0.0);
        for family in 0..3 {
            for _ in 0..60 {
                let c = simulated(&mut rng, family, 0.01);
                let truth = c[19].1;
                for at in [4usize, 8, 12] {
                    let p = prediction(&c[..at], &refs, Direction::Minimize, None).unwrap();
                    total += 1;
                    inside += usize::from(p.low <= truth && truth <= p.high);
                    err += (p.value - truth).abs();
                }
            }
        }
        let coverage = inside as f64 / total as f64;
        let mae = err / total as f64;
        eprintln!("80 % band coverage {coverage:.3} over {total} predictions, mean error {mae:.4}");
        assert!(
            (0.7..=0.97).contains(&coverage),
            "coverage {coverage:.3} of the 80 % band (mean error {mae:.3})"
        );
        assert!(mae < 0.1, "mean error {mae:.3}");
    }

    /// The cost per report at the size the issue names: 1 000 complete trials of 20 reports.
    /// `cargo test -p tune --release --lib prediction_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement"]
    fn prediction_cost_at_a_thousand_trials_of_twenty_reports() {
        let mut rng = Lcg(5);
        let refs: Vec<Reference> = (0..1000)
            .map(|i| Reference::new(simulated(&mut rng, i % 3, 0.01)).unwrap())
            .collect();
        let curves: Vec<Vec<(f64, f64)>> =
            (0..200).map(|i| simulated(&mut rng, i % 3, 0.01)).collect();
        let start = std::time::Instant::now();
        let mut n = 0;
        for c in &curves {
            for at in 2..20 {
                assert!(prediction(&c[..at], &refs, Direction::Minimize, None).is_some());
                n += 1;
            }
        }
        let per = start.elapsed().as_secs_f64() / n as f64;
        eprintln!(
            "{n} predictions against 1000 curves: {:.1} µs each",
            per * 1e6
        );
    }

    #[test]
    fn the_predictor_follows_a_stream_and_says_what_a_pruned_trial_would_have_reached() {
        let mut rng = Lcg(3);
        let mut p = Predictor::new(Direction::Minimize, "loss");
        for n in 0..3u64 {
            for (r, v) in simulated(&mut rng, 1, 0.0) {
                p.report(n, &report(r as u64, "loss", v));
            }
            assert_eq!(p.predict(n), None, "no prediction before three complete");
            p.finish(n, true);
        }
        assert_eq!(p.complete_curves(), 3);
        let c = simulated(&mut rng, 1, 0.0);
        for &(r, v) in &c[..3] {
            p.report(7, &report(r as u64, "loss", v));
        }
        // Reports of another metric are no part of the curve.
        p.report(7, &report(9, "other", 0.0));
        let now = p.predict(7).unwrap();
        assert_eq!(now.at_step, 3.0);
        let pruned = p.finish(7, false).unwrap();
        assert_eq!(pruned, now);
        assert_eq!(p.complete_curves(), 3, "a pruned curve is no reference");
        assert_eq!(p.predict(7), None);
    }
}
