//! Forecasts of a trial's final value from the start of its learning curve, learnt from the
//! curves of the study's complete trials.
//!
//! A partial curve stands at resource `r` with loss `y` and, when it has an earlier point at
//! `r₀`, a rate `s = (y(r₀) − y) / ln(r / r₀)` (loss gained per e-fold of resource: a power law
//! is a straight line in it). Every complete trial's curve is read at the same `r₀` and `r`
//! (linear interpolation between its reports), which gives its own `y_k`, `s_k` and the
//! improvement it still made from `r` to its end, `Δ_k = final_k − y_k`. The forecast is
//! `y + Δ`, where `Δ` is the kernel-weighted mean of the `Δ_k` of the complete trials whose
//! curves stood where this one stands (features standardised over the complete trials, the
//! bandwidth the distance to the `k`-th nearest, `k = max(3, √n)`). Its spread is the weighted
//! spread of those `Δ_k`, widened by the effective number of neighbours and by how far the
//! nearest one is: a curve unlike any complete one gets a wide band, not a confident guess.
//! Where the trial's [`Place`] in the search space is known, the band also widens (up to
//! threefold) by its distance to the nearest complete trial over their typical spacing: a
//! curve matched only against another region's curves is a guess too, however alike they look.
//!
//! Why this shape: a curve's rate at `r` says what a loss at `r` is worth (a slow starter at a
//! high loss but falling fast is not a fast starter that has flattened), which is exactly where
//! rank-based rules (ASHA, median) go wrong on crossing curves; and matching against the
//! study's own complete curves needs no assumed curve family and costs `O(complete trials)`.
//! Everything is in losses (lower is better), as the pruners compare.

use std::sync::OnceLock;

use super::reached;
use crate::space::{ParamKind, Params, Space};

/// How many times wider a forecast's band grows, at most, for a trial far in the search space
/// from every complete trial (see [`Place`]).
const REACH_CAP: f64 = 3.0;

/// Where a trial sits in the search space, so that a forecast knows how far it reaches: a
/// curve matched only against complete trials of another region (another optimizer, a learning
/// rate two decades away) is a guess, however alike the curves look so far. Each param's
/// position in [0, 1] on its own scale (a categorical: its choice, equal or not). Empty when
/// unknown: the forecast then widens by the curves alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Place(Vec<Coord>);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Coord {
    Inactive,
    Number(f64),
    Choice(f64),
}

impl Place {
    /// The place of `params` in `space` (a param missing from `params` is inactive).
    pub fn of(space: &Space, params: &Params) -> Place {
        Place(
            space
                .params()
                .iter()
                .map(|p| match params.get(&p.name) {
                    None => Coord::Inactive,
                    Some(v) => match p.kind {
                        ParamKind::Categorical { .. } => Coord::Choice(p.to_unit(v)),
                        _ => Coord::Number(p.to_unit(v)),
                    },
                })
                .collect(),
        )
    }

    /// The root-mean-square difference over the params: 1 between places that differ in every
    /// categorical and sit at opposite ends of every range. `None` when either is unknown.
    fn distance(&self, other: &Place) -> Option<f64> {
        if self.0.is_empty() || self.0.len() != other.0.len() {
            return None;
        }
        let sum: f64 = self
            .0
            .iter()
            .zip(&other.0)
            .map(|(a, b)| match (a, b) {
                (Coord::Inactive, Coord::Inactive) => 0.0,
                (Coord::Number(a), Coord::Number(b)) => (a - b).powi(2),
                (Coord::Choice(a), Coord::Choice(b)) if a == b => 0.0,
                _ => 1.0,
            })
            .sum();
        Some((sum / self.0.len() as f64).sqrt())
    }
}

/// A forecast of a final loss: the central value and a two-sided band.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Forecast {
    pub mean: f64,
    /// The band's edges at the requested confidence (`low ≤ mean ≤ high`).
    pub low: f64,
    pub high: f64,
    /// Complete trials the forecast leant on (the effective number of neighbours).
    pub support: f64,
}

/// A complete trial's curve, sorted by resource, and its final loss.
#[derive(Debug, Clone)]
pub struct Reference {
    points: Vec<(f64, f64)>,
    last: f64,
    place: Place,
}

impl Reference {
    /// A complete trial's curve as `(resource, loss)` points (any order; NaN losses dropped).
    /// `None` when it has no finite point.
    pub fn new(points: impl IntoIterator<Item = (f64, f64)>) -> Option<Reference> {
        let mut points: Vec<(f64, f64)> = points
            .into_iter()
            .filter(|(r, y)| r.is_finite() && y.is_finite())
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let last = points.last()?.1;
        Some(Reference {
            points,
            last,
            place: Place::default(),
        })
    }

    /// The same, at `place` in the search space.
    pub fn placed(mut self, place: Place) -> Reference {
        self.place = place;
        self
    }

    /// The furthest resource its reports reach.
    pub fn reach(&self) -> f64 {
        self.points.last().map_or(f64::NAN, |p| p.0)
    }

    /// Its final loss.
    pub fn last(&self) -> f64 {
        self.last
    }

    /// Its loss at `r`, linearly interpolated between the reports around it; before the first
    /// report, the first; `None` past the last.
    fn at(&self, r: f64) -> Option<f64> {
        let i = self.points.partition_point(|p| p.0 < r);
        match (i.checked_sub(1).map(|j| self.points[j]), self.points.get(i)) {
            (_, Some(&(r1, y1))) if r1 == r => Some(y1),
            (Some((r0, y0)), Some(&(r1, y1))) => Some(y0 + (y1 - y0) * (r - r0) / (r1 - r0)),
            (None, Some(&(_, y1))) => Some(y1),
            (_, None) => {
                let (rl, yl) = *self.points.last()?;
                reached(rl, r).then_some(yl)
            }
        }
    }
}

/// The rate of a curve between `r0` and `r`: loss gained per e-fold of resource.
fn rate(y0: f64, y: f64, r0: f64, r: f64) -> f64 {
    (y0 - y) / (r / r0).ln()
}

/// The half-width, in standard deviations, of a two-sided normal band holding `confidence`
/// (0.9 → 1.645).
pub fn z_of(confidence: f64) -> f64 {
    let p = 0.5 + confidence.clamp(1e-6, 1.0 - 1e-12) / 2.0;
    std::f64::consts::SQRT_2 * statrs::function::erf::erf_inv(2.0 * p - 1.0)
}

/// Forecasts the final loss of a curve now at `(r, y)`, with `earlier` its point before (if
/// any), from `refs` (complete trials, each reaching past `r`). `None` without a reference that
/// reaches `r`.
pub fn forecast(
    refs: &[Reference],
    earlier: Option<(f64, f64)>,
    (r, y): (f64, f64),
    place: &Place,
    confidence: f64,
) -> Option<Forecast> {
    Matched::at(refs, earlier.map(|p| p.0), r)?.forecast(earlier.map(|p| p.1), y, place, confidence)
}

/// Per reference: its loss at `r`, its rate before `r`, its improvement still to come.
type Row = (f64, Option<f64>, f64);

/// The references read where a curve stands: at `r` (and `r₀`, the curve's earlier point, if
/// any), what [`forecast`] matches a curve against. Curves that stand at the same `r₀` and `r`
/// (trials pruned at the same rung) share one: a model that forecasts many of them reads the
/// references once.
pub struct Matched {
    r0: Option<f64>,
    r: f64,
    rows: Vec<Row>,
    /// The spread of the references' losses and rates at `r` (before the floor).
    spread_y: f64,
    spread_s: f64,
    /// The scale of what is left to gain.
    scale: f64,
    /// The references' places, and how far apart they typically sit (read on first use).
    places: Vec<Place>,
    spacing: OnceLock<Option<f64>>,
}

impl Matched {
    /// `None` without a reference that reaches `r`.
    pub fn at(refs: &[Reference], r0: Option<f64>, r: f64) -> Option<Matched> {
        let (rows, places): (Vec<Row>, Vec<Place>) = refs
            .iter()
            .filter_map(|k| {
                let yk = k.at(r)?;
                if !reached(k.reach(), r) {
                    return None;
                }
                let sk = r0.and_then(|r0| Some(rate(k.at(r0)?, yk, r0, r)));
                Some(((yk, sk, k.last() - yk), k.place.clone()))
            })
            .unzip();
        if rows.is_empty() {
            return None;
        }
        let spread = |v: &mut dyn Iterator<Item = f64>| -> f64 {
            let v: Vec<f64> = v.collect();
            let n = v.len() as f64;
            let m = v.iter().sum::<f64>() / n;
            (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n).sqrt()
        };
        let spread_y = spread(&mut rows.iter().map(|r| r.0));
        let spread_s = spread(&mut rows.iter().filter_map(|r| r.1));
        // The scale of what is left to gain, so that a band never collapses to a point on a
        // handful of identical references.
        let scale = rows.iter().map(|r| r.2.abs()).sum::<f64>() / rows.len() as f64;
        Some(Matched {
            r0,
            r,
            rows,
            spread_y,
            spread_s,
            scale,
            places,
            spacing: OnceLock::new(),
        })
    }

    /// The median distance from a reference to its nearest other one: how densely the complete
    /// trials cover the space they explored. `None` with fewer than two placed references.
    fn spacing(&self) -> Option<f64> {
        *self.spacing.get_or_init(|| {
            let mut nearest: Vec<f64> = self
                .places
                .iter()
                .enumerate()
                .filter_map(|(i, a)| {
                    self.places
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .filter_map(|(_, b)| a.distance(b))
                        .min_by(f64::total_cmp)
                })
                .collect();
            if nearest.is_empty() {
                return None;
            }
            let mid = nearest.len() / 2;
            let (_, m, _) = nearest.select_nth_unstable_by(mid, f64::total_cmp);
            Some(*m)
        })
    }

    /// How much wider a forecast at `place` gets for being far from every complete trial: its
    /// distance to the nearest over their typical spacing, between 1 and [`REACH_CAP`]. A trial
    /// as close to a complete one as they are to each other is forecast as the curves say;
    /// one in a region no complete trial has seen (a categorical value only pruned trials have
    /// tried) gets a band that says so.
    fn reach(&self, place: &Place) -> f64 {
        // An unknown place (the GP's imputation, the predictions shown) never pays for the
        // spacing, which is quadratic in the references.
        if place.0.is_empty() {
            return 1.0;
        }
        let Some(spacing) = self.spacing() else {
            return 1.0;
        };
        let Some(nearest) = self
            .places
            .iter()
            .filter_map(|k| place.distance(k))
            .min_by(f64::total_cmp)
        else {
            return 1.0;
        };
        (nearest / spacing.max(1e-3)).clamp(1.0, REACH_CAP)
    }

    /// The forecast of a curve at loss `y` here, `y0` at `r₀` (given iff `r₀` was).
    pub fn forecast(
        &self,
        y0: Option<f64>,
        y: f64,
        place: &Place,
        confidence: f64,
    ) -> Option<Forecast> {
        let rows = &self.rows;
        let s = match (self.r0, y0) {
            (Some(r0), Some(y0)) => Some(rate(y0, y, r0, self.r)),
            _ => None,
        };
        // Standardise each feature over the references, with a floor so that identical curves
        // do not make every difference infinite.
        let floor = 1e-6 * (1.0 + y.abs());
        let sd_y = self.spread_y.max(floor);
        let sd_s = self.spread_s.max(floor);
        let dist: Vec<f64> = rows
            .iter()
            .map(|(yk, sk, _)| {
                let dy = (y - yk) / sd_y;
                let ds = match (s, sk) {
                    (Some(s), Some(sk)) => (s - sk) / sd_s,
                    _ => 0.0,
                };
                (dy * dy + ds * ds).sqrt()
            })
            .collect();
        let k = ((rows.len() as f64).sqrt().ceil() as usize)
            .max(3)
            .min(rows.len());
        // The nearest and the k-th nearest: a selection, not a sort.
        let mut order = dist.clone();
        let (_, kth, _) = order.select_nth_unstable_by(k - 1, f64::total_cmp);
        let h = kth.max(0.25);
        let nearest = dist.iter().copied().fold(f64::INFINITY, f64::min);
        let w: Vec<f64> = dist
            .iter()
            .map(|d| (-(d / h).powi(2) / 2.0).exp())
            .collect();
        let sw: f64 = w.iter().sum();
        let mean_d = rows.iter().zip(&w).map(|(r, w)| w * r.2).sum::<f64>() / sw;
        let var_d = rows
            .iter()
            .zip(&w)
            .map(|(r, w)| w * (r.2 - mean_d).powi(2))
            .sum::<f64>()
            / sw;
        let support = sw * sw / w.iter().map(|w| w * w).sum::<f64>();
        // Far from every complete curve, the neighbours say little: widen by the distance to
        // the nearest (in standard deviations of the features) past one.
        let far = nearest.max(1.0) * self.reach(place);
        let sd = (var_d * (1.0 + 1.0 / support))
            .sqrt()
            .max(0.05 * self.scale)
            * far;
        let z = z_of(confidence);
        let mean = y + mean_d;
        Some(Forecast {
            mean,
            low: mean - z * sd,
            high: mean + z * sd,
            support,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A power-law curve from `start` to `end` over `r_max` with speed `e`, at 1..=r_max.
    fn power(end: f64, e: f64, r_max: u32) -> Vec<(f64, f64)> {
        let f = |r: f64| {
            let top = (1.0f64).powf(-e) - (r_max as f64 + 1.0).powf(-e);
            end + (2.3 - end) * ((r + 1.0).powf(-e) - (r_max as f64 + 1.0).powf(-e)) / top
        };
        (1..=r_max).map(|r| (r as f64, f(r as f64))).collect()
    }

    #[test]
    fn a_curve_between_references_is_forecast_between_their_ends() {
        let refs: Vec<Reference> = [(0.2, 1.0), (0.4, 1.0), (0.6, 1.0)]
            .iter()
            .map(|&(end, e)| Reference::new(power(end, e, 27)).unwrap())
            .collect();
        let mid = power(0.3, 1.0, 27);
        let f = forecast(&refs, Some(mid[1]), mid[2], &Place::default(), 0.9).unwrap();
        assert!(f.mean > 0.2 && f.mean < 0.4, "{f:?}");
        assert!(f.low <= f.mean && f.mean <= f.high);
    }

    #[test]
    fn the_rate_tells_a_slow_starter_from_a_fast_one_at_the_same_loss() {
        // Fast learners flatten early at a worse end; slow ones are still falling steeply.
        let mut refs = Vec::new();
        for i in 0..8 {
            let end = 0.5 + 0.02 * i as f64;
            refs.push(Reference::new(power(end, 2.0, 27)).unwrap());
            let end = 0.1 + 0.02 * i as f64;
            refs.push(Reference::new(power(end, 0.3, 27)).unwrap());
        }
        let slow = power(0.15, 0.3, 27);
        let fast = power(0.55, 2.0, 27);
        let fs = forecast(&refs, Some(slow[2]), slow[8], &Place::default(), 0.9).unwrap();
        let ff = forecast(&refs, Some(fast[2]), fast[8], &Place::default(), 0.9).unwrap();
        assert!((fs.mean - 0.15).abs() < 0.08, "{fs:?}");
        assert!((ff.mean - 0.55).abs() < 0.08, "{ff:?}");
    }

    #[test]
    fn a_curve_unlike_every_reference_gets_a_wider_band() {
        let refs: Vec<Reference> = (0..10)
            .map(|i| Reference::new(power(0.3 + 0.01 * i as f64, 1.0, 27)).unwrap())
            .collect();
        let near = power(0.34, 1.0, 27);
        let far = power(0.05, 0.2, 27);
        let fn_ = forecast(&refs, Some(near[0]), near[2], &Place::default(), 0.9).unwrap();
        let ff = forecast(&refs, Some(far[0]), far[2], &Place::default(), 0.9).unwrap();
        assert!(
            ff.high - ff.low > 2.0 * (fn_.high - fn_.low),
            "{fn_:?} {ff:?}"
        );
    }

    fn space() -> Space {
        Space::from_toml(
            &toml::from_str(
                r#"
lr = { type = "float", low = 1e-4, high = 1e-1, log = true }
opt = { type = "categorical", choices = ["sgd", "adam"] }
mom = { type = "float", low = 0.0, high = 0.9, when = { opt = ["sgd"] } }
"#,
            )
            .expect("toml"),
        )
        .expect("space")
    }

    fn params(lr: f64, opt: &str, mom: Option<f64>) -> Params {
        use crate::space::ParamValue;
        let mut p = Params::from([
            ("lr".to_string(), ParamValue::Float(lr)),
            ("opt".to_string(), ParamValue::Str(opt.into())),
        ]);
        if let Some(m) = mom {
            p.insert("mom".into(), ParamValue::Float(m));
        }
        p
    }

    #[test]
    fn places_differ_by_position_choice_and_active_params() {
        let s = space();
        let a = Place::of(&s, &params(1e-3, "sgd", Some(0.0)));
        let d = |b: &Place| a.distance(b).unwrap();
        assert_eq!(d(&a.clone()), 0.0);
        // A decade of the three-decade lr range: a third of the way, over three params.
        let lr = d(&Place::of(&s, &params(1e-2, "sgd", Some(0.0))));
        assert!((lr - (1.0f64 / 9.0 / 3.0).sqrt()).abs() < 1e-9, "{lr}");
        // Another optimizer: its choice differs and `mom` is no longer active.
        let adam = d(&Place::of(&s, &params(1e-3, "adam", None)));
        assert!((adam - (2.0f64 / 3.0).sqrt()).abs() < 1e-9, "{adam}");
        assert_eq!(a.distance(&Place::default()), None);
    }

    #[test]
    fn a_curve_in_a_region_no_complete_trial_has_seen_gets_a_wider_band() {
        // Complete sgd trials spread over the lr range; two trials with the same partial curve,
        // one among them and one with adam, which no complete trial used.
        let s = space();
        let refs: Vec<Reference> = (0..10)
            .map(|i| {
                let lr = 1e-4 * 10f64.powf(3.0 * i as f64 / 9.0);
                Reference::new(power(0.3 + 0.01 * i as f64, 1.0, 27))
                    .unwrap()
                    .placed(Place::of(&s, &params(lr, "sgd", Some(0.5))))
            })
            .collect();
        let curve = power(0.34, 1.0, 27);
        let band = |place: &Place| {
            let f = forecast(&refs, Some(curve[2]), curve[8], place, 0.9).unwrap();
            (f.mean, f.high - f.low)
        };
        let among = band(&Place::of(&s, &params(1e-3, "sgd", Some(0.5))));
        let unseen = band(&Place::of(&s, &params(1e-3, "adam", None)));
        let unknown = band(&Place::default());
        // The place moves the band, never the central value.
        assert_eq!(among.0, unseen.0);
        assert_eq!(among, unknown);
        assert!(
            unseen.1 > 2.0 * among.1 && unseen.1 <= REACH_CAP * among.1 * (1.0 + 1e-12),
            "{among:?} {unseen:?}"
        );
    }

    #[test]
    fn planted_curves_are_ranked_by_their_forecast_from_their_first_third() {
        // A family of power-law curves whose speed and end vary independently: a third of the
        // way in, the raw losses rank them badly, the forecasts well.
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut curves = Vec::new();
        for _ in 0..120 {
            curves.push(power(0.1 + 0.5 * next(), 0.3 + 1.7 * next(), 27));
        }
        let (train, test) = curves.split_at(60);
        let refs: Vec<Reference> = train
            .iter()
            .map(|c| Reference::new(c.clone()).unwrap())
            .collect();
        let finals: Vec<f64> = test.iter().map(|c| c[26].1).collect();
        let forecasts: Vec<f64> = test
            .iter()
            .map(|c| {
                forecast(&refs, Some(c[5]), c[8], &Place::default(), 0.9)
                    .unwrap()
                    .mean
            })
            .collect();
        let raw: Vec<f64> = test.iter().map(|c| c[8].1).collect();
        let rho = crate::insight::spearman(&forecasts, &finals);
        assert!(rho >= 0.8, "Spearman {rho}");
        assert!(
            rho > crate::insight::spearman(&raw, &finals),
            "the forecast must beat the raw ranks"
        );
    }

    #[test]
    fn interpolation_reads_between_reports_and_not_past_the_last() {
        let k = Reference::new([(1.0, 2.0), (3.0, 1.0), (9.0, 0.5)]).unwrap();
        assert_eq!(k.at(2.0), Some(1.5));
        assert_eq!(k.at(3.0), Some(1.0));
        assert_eq!(k.at(0.5), Some(2.0));
        assert_eq!(k.at(9.0), Some(0.5));
        assert_eq!(k.at(10.0), None);
        assert!(Reference::new([(1.0, f64::NAN)]).is_none());
    }

    #[test]
    fn the_normal_quantile_is_close() {
        assert!((z_of(0.9) - 1.6449).abs() < 1e-3);
        assert!((z_of(0.95) - 1.96).abs() < 1e-3);
        assert!((z_of(0.5) - 0.6745).abs() < 1e-3);
    }
}
