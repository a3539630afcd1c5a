//! The GP's view of a mixed space: the feature encoding of params and the Matérn-5/2 kernel.
//!
//! Every parameter is one *group* with its own length scale. A numeric parameter is one column
//! holding its unit-cube position (log scales and steps already applied by `Space::to_unit`, so
//! the model sees the value that was actually run, never an unrounded proposal). A categorical
//! parameter is one column holding the choice index, and the kernel compares it by identity
//! (Hamming distance: two different choices are at distance 1, whatever their order), so no
//! order is invented between categories. An inactive conditional parameter gets no value: a
//! categorical one takes an extra "inactive" index, a numeric one sits at a fixed point off the
//! segment (its flag column set to 1), which keeps the distance a Euclidean one and so the
//! kernel positive definite.

use crate::space::{ParamKind, Params, Space};

/// How one feature column is compared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ColKind {
    /// Squared difference.
    Num,
    /// 0 when equal, 1 otherwise.
    Cat,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Col {
    pub kind: ColKind,
    /// The parameter (and length-scale group) the column belongs to.
    pub group: usize,
}

/// The feature layout of a space.
#[derive(Debug, Clone)]
pub struct Layout {
    pub cols: Vec<Col>,
    pub groups: usize,
    /// For each parameter, its value column.
    pub value_col: Vec<usize>,
    /// For each conditional numeric parameter, its activity flag column.
    pub flag_col: Vec<Option<usize>>,
}

impl Layout {
    pub fn new(space: &Space) -> Layout {
        let mut cols = Vec::new();
        let mut value_col = Vec::new();
        let mut flag_col = Vec::new();
        for (g, p) in space.params().iter().enumerate() {
            value_col.push(cols.len());
            match p.kind {
                ParamKind::Categorical { .. } => {
                    cols.push(Col {
                        kind: ColKind::Cat,
                        group: g,
                    });
                    flag_col.push(None);
                }
                _ => {
                    cols.push(Col {
                        kind: ColKind::Num,
                        group: g,
                    });
                    if p.when.is_empty() {
                        flag_col.push(None);
                    } else {
                        flag_col.push(Some(cols.len()));
                        cols.push(Col {
                            kind: ColKind::Num,
                            group: g,
                        });
                    }
                }
            }
        }
        Layout {
            cols,
            groups: space.len(),
            value_col,
            flag_col,
        }
    }

    pub fn width(&self) -> usize {
        self.cols.len()
    }

    /// The features of a full set of params (as run or as proposed after decoding).
    pub fn encode(&self, space: &Space, params: &Params) -> Vec<f64> {
        let mut f = vec![0.0; self.width()];
        for (i, p) in space.params().iter().enumerate() {
            let c = self.value_col[i];
            match (params.get(&p.name), &p.kind) {
                (Some(v), ParamKind::Categorical { choices }) => {
                    f[c] = choices.iter().position(|x| x.same(v)).unwrap_or(0) as f64;
                }
                (None, ParamKind::Categorical { choices }) => f[c] = choices.len() as f64,
                (Some(v), _) => {
                    f[c] = p.to_unit(v);
                    if let Some(fc) = self.flag_col[i] {
                        f[fc] = 0.0;
                    }
                }
                (None, _) => {
                    f[c] = 0.5;
                    if let Some(fc) = self.flag_col[i] {
                        f[fc] = 1.0;
                    }
                }
            }
        }
        f
    }

    /// Per-group squared distances between two feature vectors, added into `out`.
    #[inline]
    pub fn group_sq(&self, a: &[f64], b: &[f64], out: &mut [f64]) {
        out.iter_mut().for_each(|x| *x = 0.0);
        for (k, c) in self.cols.iter().enumerate() {
            let d = match c.kind {
                ColKind::Num => {
                    let t = a[k] - b[k];
                    t * t
                }
                ColKind::Cat => {
                    if a[k] == b[k] {
                        0.0
                    } else {
                        1.0
                    }
                }
            };
            out[c.group] += d;
        }
    }

    /// The scaled squared distance `sum_g sq_g / l_g^2` given inverse squared length scales.
    #[inline]
    pub fn r2(&self, a: &[f64], b: &[f64], inv_l2: &[f64]) -> f64 {
        let mut s = 0.0;
        for (k, c) in self.cols.iter().enumerate() {
            let d = match c.kind {
                ColKind::Num => {
                    let t = a[k] - b[k];
                    t * t
                }
                ColKind::Cat => {
                    if a[k] == b[k] {
                        0.0
                    } else {
                        1.0
                    }
                }
            };
            s += d * inv_l2[c.group];
        }
        s
    }
}

const SQRT5: f64 = 2.236_067_977_499_79;

/// Matérn-5/2 correlation as a function of the squared scaled distance.
#[inline]
pub fn matern52(r2: f64) -> f64 {
    let r = r2.max(0.0).sqrt();
    (1.0 + SQRT5 * r + 5.0 / 3.0 * r2) * (-SQRT5 * r).exp()
}

/// The correlation and its derivative with respect to the squared distance. The derivative,
/// `-(5/6) (1 + sqrt5 r) exp(-sqrt5 r)`, is finite at r = 0, which is why the kernel is written
/// in r^2: identical points cause no division by zero.
#[inline]
pub fn matern52_and_d(r2: f64) -> (f64, f64) {
    let r2 = r2.max(0.0);
    let r = r2.sqrt();
    let e = (-SQRT5 * r).exp();
    (
        (1.0 + SQRT5 * r + 5.0 / 3.0 * r2) * e,
        -5.0 / 6.0 * (1.0 + SQRT5 * r) * e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matern_derivative_matches_finite_differences() {
        for &r2 in &[0.0, 0.01, 0.3, 1.0, 4.0] {
            let h = 1e-6;
            let (_, d) = matern52_and_d(r2);
            let fd =
                (matern52(r2 + h) - matern52((r2 - h).max(0.0))) / (r2 + h - (r2 - h).max(0.0));
            assert!((d - fd).abs() < 1e-4, "r2={r2}: {d} vs {fd}");
        }
        assert_eq!(matern52(0.0), 1.0);
    }

    #[test]
    fn inactive_params_have_no_invented_value() {
        let t: toml::Table = toml::from_str(
            "o = { type = \"categorical\", choices = [\"a\", \"b\"] }\n\
             m = { type = \"float\", low = 0.0, high = 1.0, when = { o = \"a\" } }",
        )
        .expect("toml");
        let s = Space::from_toml(&t).expect("space");
        let l = Layout::new(&s);
        assert_eq!(l.width(), 3);
        let f = l.encode(&s, &s.from_unit(&[0.9, 0.2]));
        // o = b, so m is inactive: flag set, the value column parked at the centre.
        assert_eq!(f, vec![1.0, 0.5, 1.0]);
    }
}
