//! Insight: what mattered in a study, read from its stored trials.
//!
//! This room turns a study's trials (read through the `Storage` trait by `commands/`, so a
//! SQLite or PostgreSQL study, finished or still running) into answers a user asks after a
//! study: which parameters mattered ([`Importance`]: PED-ANOVA in [`ped_anova`], fANOVA in
//! [`fanova`]). It does no I/O and reads no clock: trials and the space in, numbers out.
//! Drawing the answers (the terminal, a file) belongs to `commands/`.

pub mod fanova;
pub mod ped_anova;
pub mod plot;
pub mod report;

use std::collections::BTreeMap;

use crate::space::{Param, ParamKind, ParamValue, Params, Space};
use crate::trial::{Direction, Trial, TrialStatus};

/// A mistake in what an importance was asked of.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InsightError {
    #[error("objective {index} does not exist: the study has {count} (numbered from 0)")]
    NoObjective { index: usize, count: usize },
}

/// One complete trial as the importance evaluators see it: its active params and its value
/// of one objective, signed so that lower is better.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub params: Params,
    pub loss: f64,
}

/// A parameter importance method: complete trials in, each parameter's share out.
pub trait Importance {
    /// The method's name as the CLI spells it (`ped-anova`).
    fn name(&self) -> &'static str;

    /// Each parameter's raw (unnormalised) importance, for the parameters of `space` that at
    /// least one observation holds. Deterministic.
    fn raw(&self, space: &Space, observations: &[Observation]) -> Vec<(String, f64)>;

    /// Importances normalised to sum to 1 (equal shares when every raw value is 0, as Optuna's
    /// `get_param_importances` does), highest first, ties by name.
    fn importances(&self, space: &Space, observations: &[Observation]) -> Vec<(String, f64)> {
        normalise(self.raw(space, observations))
    }
}

/// Shares summing to 1, highest first (ties by name).
pub fn normalise(raw: Vec<(String, f64)>) -> Vec<(String, f64)> {
    let total: f64 = raw.iter().map(|(_, v)| v).sum();
    let n = raw.len() as f64;
    let mut out: Vec<(String, f64)> = raw
        .into_iter()
        .map(|(k, v)| {
            let share = if total > 0.0 && total.is_finite() {
                v / total
            } else {
                1.0 / n
            };
            (k, share)
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// Spearman's rank correlation of two samples of the same length, `1 − 6Σd²/(n(n²−1))` over
/// their ranks (ties ranked by position): 1 when both order the items alike, −1 when
/// reversed; NaN for fewer than two items. What the agreement checks compare (tune's
/// importances against Optuna's, forecasts against the finals they forecast).
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let rank = |v: &[f64]| {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
        let mut r = vec![0.0; v.len()];
        for (pos, &i) in idx.iter().enumerate() {
            r[i] = pos as f64;
        }
        r
    };
    let n = a.len().min(b.len()) as f64;
    let (ra, rb) = (rank(a), rank(b));
    let d2: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - y).powi(2)).sum();
    1.0 - 6.0 * d2 / (n * (n * n - 1.0))
}

/// The complete, not discarded trials with a finite value of objective `index` (0 is the
/// study's first objective), signed so that lower is better. `directions` are the study's
/// objectives' directions, in order.
pub fn observations(
    trials: &[Trial],
    directions: &[Direction],
    index: usize,
) -> Result<Vec<Observation>, InsightError> {
    let Some(direction) = directions.get(index) else {
        return Err(InsightError::NoObjective {
            index,
            count: directions.len(),
        });
    };
    let sign = match direction {
        Direction::Minimize => 1.0,
        Direction::Maximize => -1.0,
    };
    Ok(trials
        .iter()
        .filter(|t| !t.discarded)
        .filter_map(|t| match &t.status {
            TrialStatus::Complete { value, others, .. } => {
                let v = if index == 0 {
                    Some(*value)
                } else {
                    others.get(index - 1).copied()
                };
                v.filter(|v| v.is_finite()).map(|v| Observation {
                    params: t.params.clone(),
                    loss: sign * v,
                })
            }
            _ => None,
        })
        .collect())
}

/// A space read from the trials themselves, for a study stored without its study file (an
/// ask-tell study): numbers span the values seen (integers stay integers), anything else is
/// a categorical parameter over the values seen. Parameters that no trial holds are absent.
pub fn infer_space(trials: &[Trial]) -> Option<Space> {
    let mut seen: BTreeMap<&str, Vec<&ParamValue>> = BTreeMap::new();
    for t in trials {
        for (k, v) in &t.params {
            seen.entry(k.as_str()).or_default().push(v);
        }
    }
    let params = seen
        .into_iter()
        .map(|(name, values)| {
            let ints: Option<Vec<i64>> = values
                .iter()
                .map(|v| match v {
                    ParamValue::Int(i) => Some(*i),
                    _ => None,
                })
                .collect();
            let floats: Option<Vec<f64>> = values.iter().map(|v| v.as_f64()).collect();
            let kind = if let Some(ints) = ints {
                let (low, high) = (ints.iter().min(), ints.iter().max());
                match (low, high) {
                    (Some(&low), Some(&high)) => ParamKind::Int {
                        low,
                        high,
                        log: false,
                        step: 1,
                    },
                    _ => ParamKind::Categorical { choices: vec![] },
                }
            } else if let Some(fs) = floats.filter(|fs| fs.iter().all(|f| f.is_finite())) {
                let low = fs.iter().copied().fold(f64::INFINITY, f64::min);
                let high = fs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                ParamKind::Float {
                    low,
                    high,
                    log: false,
                    step: None,
                }
            } else {
                let mut choices: Vec<ParamValue> = Vec::new();
                for v in values {
                    if !choices.iter().any(|c| c.same(v)) {
                        choices.push(v.clone());
                    }
                }
                ParamKind::Categorical { choices }
            };
            Param {
                name: name.to_string(),
                kind,
                when: Vec::new(),
            }
        })
        .collect();
    Space::new(params).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::{Ran, TrialNumber};

    fn complete(n: u64, x: f64, value: f64, others: Vec<f64>) -> Trial {
        let params = Params::from([("x".to_string(), ParamValue::Float(x))]);
        Trial::unstored(
            TrialNumber(n),
            params,
            TrialStatus::Complete {
                value,
                others,
                ran: Ran::default(),
            },
        )
    }

    #[test]
    fn observations_sign_by_direction_and_skip_non_finite_and_discarded() {
        let mut gone = complete(2, 0.3, 1.0, vec![4.0]);
        gone.discarded = true;
        let trials = vec![
            complete(0, 0.1, 2.0, vec![5.0]),
            complete(1, 0.2, f64::NAN, vec![6.0]),
            gone,
        ];
        let dirs = [Direction::Minimize, Direction::Maximize];
        let first = observations(&trials, &dirs, 0).unwrap();
        assert_eq!(first.iter().map(|o| o.loss).collect::<Vec<_>>(), vec![2.0]);
        let second = observations(&trials, &dirs, 1).unwrap();
        assert_eq!(
            second.iter().map(|o| o.loss).collect::<Vec<_>>(),
            vec![-5.0, -6.0]
        );
        assert_eq!(
            observations(&trials, &dirs, 2),
            Err(InsightError::NoObjective { index: 2, count: 2 })
        );
    }

    #[test]
    fn normalise_gives_equal_shares_when_all_zero_and_sorts() {
        let eq = normalise(vec![("b".into(), 0.0), ("a".into(), 0.0)]);
        assert_eq!(eq, vec![("a".into(), 0.5), ("b".into(), 0.5)]);
        let s = normalise(vec![("a".into(), 1.0), ("b".into(), 3.0)]);
        assert_eq!(s, vec![("b".into(), 0.75), ("a".into(), 0.25)]);
    }

    #[test]
    fn infer_space_keeps_integers_and_makes_strings_categorical() {
        let mut a = complete(0, 0.5, 1.0, vec![]);
        a.params.insert("n".into(), ParamValue::Int(3));
        a.params
            .insert("opt".into(), ParamValue::Str("adam".into()));
        let mut b = complete(1, 1.5, 1.0, vec![]);
        b.params.insert("n".into(), ParamValue::Int(7));
        b.params.insert("opt".into(), ParamValue::Str("sgd".into()));
        let space = infer_space(&[a, b]).unwrap();
        assert!(matches!(
            space.get("n").unwrap().kind,
            ParamKind::Int {
                low: 3,
                high: 7,
                ..
            }
        ));
        assert_eq!(space.get("opt").unwrap().n_choices(), 2);
        assert!(matches!(
            space.get("x").unwrap().kind,
            ParamKind::Float {
                low: 0.5,
                high: 1.5,
                ..
            }
        ));
    }
}
