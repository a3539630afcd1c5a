//! PED-ANOVA (Watanabe et al., IJCAI 2023; conditional spaces: KDD 2026), as Optuna's
//! `PedAnovaImportanceEvaluator` computes it with its defaults, so that the two rank a study's
//! parameters alike:
//!
//! - the target set is the trials better than the `target_quantile` (0.1) quantile, the region
//!   the whole study (`region_quantile` 1.0), compared in the region (`evaluate_on_local`);
//! - each parameter's values are counted on a grid (50 points; fewer for a step or an integer
//!   range, log2 of the range for a log integer), in log space for a log parameter;
//! - a Parzen estimator over the grid (Scott's bandwidth, at least 0.5/1.64 of a cell, and a
//!   prior kernel of weight 1 over the whole grid; categorical choices get a smoothed one-hot
//!   kernel) is built for the target and for the region, and the importance is the Pearson
//!   divergence of the two;
//! - a conditional parameter counts per regime (active / inactive; a regime with fewer than 2
//!   trials is left out): the active regime's divergence weighted by alpha^2 / beta (its share
//!   of the target set, squared, over its share of the region), all scaled by
//!   (|target| / |region|)^2.
//!
//! Everything is deterministic: no random numbers.

use statrs::function::erf::erfc;

use super::{Importance, Observation};
use crate::space::{Param, ParamKind, Space};

/// PED-ANOVA with Optuna's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PedAnova {
    /// The share of the trials that counts as good (Optuna's `target_quantile`).
    pub target_quantile: f64,
    /// Grid points of a continuous parameter (Optuna's `_n_steps`).
    pub n_steps: usize,
    /// The weight of the prior kernel (Optuna's `_prior_weight`).
    pub prior_weight: f64,
    /// A regime with fewer trials is left out (Optuna's `_min_n_trials_in_regime`).
    pub min_trials_in_regime: usize,
}

impl Default for PedAnova {
    fn default() -> Self {
        PedAnova {
            target_quantile: 0.1,
            n_steps: 50,
            prior_weight: 1.0,
            min_trials_in_regime: 2,
        }
    }
}

impl Importance for PedAnova {
    fn name(&self) -> &'static str {
        "ped-anova"
    }

    fn raw(&self, space: &Space, observations: &[Observation]) -> Vec<(String, f64)> {
        let params: Vec<&Param> = space
            .params()
            .iter()
            .filter(|p| observations.iter().any(|o| o.params.contains_key(&p.name)))
            .collect();
        if observations.len() <= 1 {
            return params.iter().map(|p| (p.name.clone(), 0.0)).collect();
        }
        let is_target = top_quantile(observations, self.target_quantile);
        let n_target = is_target.iter().filter(|t| **t).count();
        let n_region = observations.len();
        let quantile = n_target as f64 / n_region as f64;
        params
            .into_iter()
            .map(|p| {
                // The active regime only: the inactive one has no distribution to compare.
                let region: Vec<usize> = (0..n_region)
                    .filter(|&i| observations[i].params.contains_key(&p.name))
                    .collect();
                let target: Vec<usize> = region.iter().copied().filter(|&i| is_target[i]).collect();
                let mut imp = 0.0;
                if region.len() >= self.min_trials_in_regime && !target.is_empty() && !single(p) {
                    let alpha = target.len() as f64 / n_target as f64;
                    let beta = region.len() as f64 / n_region as f64;
                    let counts_top = self.grid_counts(p, observations, &target);
                    let counts_region = self.grid_counts(p, observations, &region);
                    let pdf_top = self.pdf(p, &counts_top);
                    let pdf_region = self.pdf(p, &counts_region);
                    let div: f64 = pdf_top
                        .iter()
                        .zip(&pdf_region)
                        .map(|(t, l)| {
                            let (t, l) = (t + 1e-12, l + 1e-12);
                            l * (t / l - 1.0).powi(2)
                        })
                        .sum();
                    imp = alpha * alpha / beta * div;
                }
                (p.name.clone(), imp * quantile * quantile)
            })
            .collect()
    }
}

/// Which observations are in the top `quantile` (Optuna's `_QuantileFilter`: the cutoff is
/// the `ceil(q n)`-th smallest loss, ties kept).
fn top_quantile(observations: &[Observation], quantile: f64) -> Vec<bool> {
    let mut losses: Vec<f64> = observations.iter().map(|o| o.loss).collect();
    let k = ((quantile * losses.len() as f64).ceil() as usize).clamp(1, losses.len()) - 1;
    losses.sort_by(f64::total_cmp);
    let cutoff = losses[k];
    observations.iter().map(|o| o.loss <= cutoff).collect()
}

/// A parameter with one possible value carries no information.
fn single(p: &Param) -> bool {
    match &p.kind {
        ParamKind::Float { low, high, .. } => low == high,
        ParamKind::Int {
            low, high, step, ..
        } => high - low < *step,
        ParamKind::Categorical { choices } => choices.len() <= 1,
    }
}

/// Python's `round`: halves to even.
fn round_half_even(x: f64) -> f64 {
    x.round_ties_even()
}

impl PedAnova {
    /// How many of `which` observations fall on each grid point of `p`.
    fn grid_counts(&self, p: &Param, obs: &[Observation], which: &[usize]) -> Vec<f64> {
        match &p.kind {
            ParamKind::Categorical { choices } => {
                let mut counts = vec![0.0; choices.len()];
                for &i in which {
                    if let Some(v) = obs[i].params.get(&p.name)
                        && let Some(c) = choices.iter().position(|c| c.same(v))
                    {
                        counts[c] += 1.0;
                    }
                }
                counts
            }
            ParamKind::Float {
                low,
                high,
                log,
                step,
            } => {
                let n = match step {
                    Some(s) if !*log => {
                        (round_half_even((high - low) / s) as usize + 1).min(self.n_steps)
                    }
                    _ => self.n_steps,
                };
                self.numeric_counts(p, obs, which, *low, *high, *log, n)
            }
            ParamKind::Int {
                low,
                high,
                log,
                step,
            } => {
                let n = if *log {
                    let size = (high - low + 1) as f64;
                    ((size.ln() / 2f64.ln()).ceil() as usize + 1).min(self.n_steps)
                } else {
                    (round_half_even((high - low) as f64 / *step as f64) as usize + 1)
                        .min(self.n_steps)
                };
                self.numeric_counts(p, obs, which, *low as f64, *high as f64, *log, n)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn numeric_counts(
        &self,
        p: &Param,
        obs: &[Observation],
        which: &[usize],
        low: f64,
        high: f64,
        log: bool,
        n: usize,
    ) -> Vec<f64> {
        let tr = |x: f64| if log { x.ln() } else { x };
        let (lo, hi) = (tr(low), tr(high));
        let width = (hi - lo) / (n as f64 - 1.0);
        let mut counts = vec![0.0; n];
        for &i in which {
            if let Some(x) = obs[i].params.get(&p.name).and_then(|v| v.as_f64()) {
                // Midpoint ties go to the lower grid point, as Optuna's `ceil(u - 0.5)`.
                let u = ((tr(x) - lo) / width - 0.5).ceil();
                let idx = if u.is_finite() {
                    u.clamp(0.0, n as f64 - 1.0) as usize
                } else {
                    0
                };
                counts[idx] += 1.0;
            }
        }
        counts
    }

    /// The Parzen estimator's probability of each grid point, from the counts on the grid.
    fn pdf(&self, p: &Param, counts: &[f64]) -> Vec<f64> {
        let observed: Vec<(usize, f64)> = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0.0)
            .map(|(i, c)| (i, *c))
            .collect();
        let size = counts.len();
        if observed.is_empty() {
            return vec![1.0 / size as f64; size];
        }
        let total: f64 = observed.iter().map(|o| o.1).sum::<f64>() + self.prior_weight;
        let mix: Vec<f64> = observed
            .iter()
            .map(|o| o.1 / total)
            .chain(std::iter::once(self.prior_weight / total))
            .collect();
        if p.is_categorical() {
            let kernels = observed.len() as f64 + 1.0;
            let fill = self.prior_weight / kernels;
            let row_sum = fill * size as f64 + 1.0;
            let prior_row = 1.0 / size as f64;
            (0..size)
                .map(|c| {
                    let from_obs: f64 = observed
                        .iter()
                        .zip(&mix)
                        .map(|((i, _), w)| {
                            let hit = if *i == c { 1.0 } else { 0.0 };
                            w * (fill + hit) / row_sum
                        })
                        .sum();
                    from_obs + mix[observed.len()] * prior_row
                })
                .collect()
        } else {
            self.numeric_pdf(&observed, &mix, size)
        }
    }

    /// Scott's rule on the grid indices, then discrete truncated normals over the grid.
    fn numeric_pdf(&self, observed: &[(usize, f64)], mix: &[f64], size: usize) -> Vec<f64> {
        let ws: f64 = observed.iter().map(|o| o.1).sum();
        let mean = observed.iter().map(|(i, w)| *i as f64 * w).sum::<f64>() / ws;
        let var = observed
            .iter()
            .map(|(i, w)| (*i as f64 - mean).powi(2) * w)
            .sum::<f64>()
            / (ws - 1.0).max(1.0);
        let mut cum = Vec::with_capacity(observed.len());
        let mut acc = 0.0;
        for (_, w) in observed {
            acc += w;
            cum.push(acc);
        }
        // numpy's searchsorted: "left" is the first index with cum >= x, "right" with cum > x.
        let q1 = (ws / 4.0).floor();
        let q3 = (ws * 3.0 / 4.0).floor();
        let q1_idx = cum.iter().position(|c| *c >= q1).unwrap_or(cum.len());
        let q3_idx = cum.iter().position(|c| *c > q3).unwrap_or(cum.len());
        let at = |k: usize| observed[k.min(observed.len() - 1)].0 as f64;
        let iqr = at(q3_idx) - at(q1_idx);
        let sigma = 1.059 * (iqr / 1.34).min(var.sqrt()) * ws.powf(-0.2);
        let sigma = sigma.max(0.5 / 1.64);
        let (low, high) = (0.0, size as f64 - 1.0);
        let kernels = observed
            .iter()
            .map(|(i, _)| (*i as f64, sigma))
            .chain(std::iter::once(((low + high) / 2.0, high - low + 1.0)));
        let mut pdf = vec![0.0; size];
        for ((mu, s), w) in kernels.zip(mix) {
            let z = mass(low - 0.5, high + 0.5, mu, s);
            if z <= 0.0 {
                continue;
            }
            for (x, p) in pdf.iter_mut().enumerate() {
                let x = x as f64;
                *p += w * mass(x - 0.5, x + 0.5, mu, s) / z;
            }
        }
        pdf
    }
}

/// The probability that N(mu, sigma) falls in [a, b], computed on the side of the tail it is
/// in, so that far tails keep their digits.
fn mass(a: f64, b: f64, mu: f64, sigma: f64) -> f64 {
    let (za, zb) = ((a - mu) / sigma, (b - mu) / sigma);
    let upper = |z: f64| 0.5 * erfc(z / std::f64::consts::SQRT_2); // P(Z > z)
    if za >= 0.0 {
        upper(za) - upper(zb)
    } else if zb <= 0.0 {
        upper(-zb) - upper(-za)
    } else {
        1.0 - upper(-za) - upper(zb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::{ParamValue, Params};

    fn space(toml_text: &str) -> Space {
        let t: toml::Table = toml::from_str(toml_text).unwrap();
        Space::from_toml(&t).unwrap()
    }

    fn obs(pairs: &[(&[(&str, ParamValue)], f64)]) -> Vec<Observation> {
        pairs
            .iter()
            .map(|(ps, loss)| Observation {
                params: ps
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect::<Params>(),
                loss: *loss,
            })
            .collect()
    }

    /// A mixed space with a conditional parameter, and Optuna 5.0's PED-ANOVA of three
    /// studies over it (testdata/make_ped_anova_reference.py wrote the file): tune's raw values
    /// are Optuna's to rounding, so the ranks agree exactly.
    #[test]
    fn agrees_with_optuna_on_a_conditional_mixed_space() {
        let space = space(
            r#"
x     = { type = "float", low = -5.0, high = 5.0 }
lr    = { type = "float", low = 1e-4, high = 1e-1, log = true }
n     = { type = "int", low = 1, high = 8 }
width = { type = "int", low = 16, high = 512, log = true }
q     = { type = "float", low = 0.0, high = 1.0, step = 0.1 }
opt   = { type = "categorical", choices = ["adam", "sgd", "rms"] }
mom   = { type = "float", low = 0.0, high = 0.99, when = { opt = "sgd" } }
"#,
        );
        let reference: serde_json::Value =
            serde_json::from_str(include_str!("testdata/ped_anova_optuna.json")).unwrap();
        let cases = reference["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 3);
        for case in cases {
            let sign = if case["maximize"].as_bool().unwrap() {
                -1.0
            } else {
                1.0
            };
            let observations: Vec<Observation> = case["trials"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| Observation {
                    params: t["params"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| (k.clone(), ParamValue::from_json(v).unwrap()))
                        .collect(),
                    loss: sign * t["value"].as_f64().unwrap(),
                })
                .collect();
            let raw = PedAnova::default().raw(&space, &observations);
            assert_eq!(raw.len(), 7);
            for (name, got) in &raw {
                let want = case["raw"][name].as_f64().unwrap();
                assert!(
                    (got - want).abs() <= 1e-9 * want.abs().max(1e-12),
                    "{} trials, {name}: tune {got}, Optuna {want}",
                    observations.len()
                );
            }
            let ranked = PedAnova::default().importances(&space, &observations);
            let want_top = case["importances"]
                .as_object()
                .unwrap()
                .iter()
                .max_by(|a, b| a.1.as_f64().unwrap().total_cmp(&b.1.as_f64().unwrap()))
                .unwrap()
                .0
                .clone();
            assert_eq!(ranked[0].0, want_top);
            let sum: f64 = ranked.iter().map(|r| r.1).sum();
            assert!((sum - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn a_study_of_one_trial_gives_equal_shares() {
        let space = space(
            r#"x = { type = "float", low = 0.0, high = 1.0 }
y = { type = "int", low = 0, high = 3 }"#,
        );
        let o = obs(&[(
            &[("x", ParamValue::Float(0.5)), ("y", ParamValue::Int(1))],
            1.0,
        )]);
        let imp = PedAnova::default().importances(&space, &o);
        assert_eq!(imp, vec![("x".to_string(), 0.5), ("y".to_string(), 0.5)]);
    }

    #[test]
    fn the_parameter_that_decides_the_value_ranks_first() {
        let space = space(
            r#"a = { type = "float", low = 0.0, high = 1.0 }
b = { type = "categorical", choices = ["u", "v"] }"#,
        );
        let o: Vec<Observation> = (0..100)
            .map(|i| {
                let a = (i as f64 * 0.618_034).fract();
                let b = if i % 2 == 0 { "u" } else { "v" };
                Observation {
                    params: Params::from([
                        ("a".to_string(), ParamValue::Float(a)),
                        ("b".to_string(), ParamValue::Str(b.into())),
                    ]),
                    loss: (a - 0.3).abs(),
                }
            })
            .collect();
        let imp = PedAnova::default().importances(&space, &o);
        assert_eq!(imp[0].0, "a");
        assert!(imp[0].1 > 0.9, "{imp:?}");
    }

    #[test]
    fn mass_sums_to_one_over_the_line_and_keeps_far_tails() {
        let m = mass(-0.5, 0.5, 0.0, 1.0) + mass(0.5, 1e9, 0.0, 1.0) + mass(-1e9, -0.5, 0.0, 1.0);
        assert!((m - 1.0).abs() < 1e-12);
        assert!(mass(10.0, 11.0, 0.0, 1.0) > 0.0);
    }

    #[test]
    fn top_quantile_keeps_ties_and_at_least_one() {
        let o = obs(&[(&[], 3.0), (&[], 1.0), (&[], 1.0), (&[], 2.0)]);
        assert_eq!(top_quantile(&o, 0.1), vec![false, true, true, false]);
        let o = obs(&[(&[], 3.0), (&[], 1.0)]);
        assert_eq!(top_quantile(&o, 0.1), vec![false, true]);
    }

    #[test]
    fn round_half_even_matches_python() {
        assert_eq!(round_half_even(2.5), 2.0);
        assert_eq!(round_half_even(3.5), 4.0);
        assert_eq!(round_half_even(2.4), 2.0);
    }
}
