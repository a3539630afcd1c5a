//! Log expected improvement and its maximisation over a mixed space.
//!
//! LogEI follows Ament et al. (2023), "Unexpected improvements to expected improvement": the
//! logarithm of `h(z) = phi(z) + z Phi(z)` is computed through the scaled complementary error
//! function where `z` is very negative, so that the acquisition keeps a useful, finite slope
//! far from the incumbent instead of underflowing to a flat zero.
//!
//! The search works on `u`, one unit-cube coordinate per parameter (as `Space::from_unit`
//! takes), and scores a `u` by decoding it to params and re-encoding the params: integers,
//! steps, categories and inactive branches are therefore scored exactly as they would run.
//! Continuous floats are refined by L-BFGS (argmin, analytic gradient, the box kept by a
//! `0.5 + 0.5 sin(y)` change of variable); discrete parameters by a coordinate search over
//! their neighbouring grid values and every category.

use std::cell::RefCell;

use argmin::core::{CostFunction, Error as ArgminError, Executor, Gradient, State};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use statrs::function::erf::erfc;

use super::cost::Cost;
use super::feasibility::Feasibility;
use super::fit::Posterior;
use super::kernel::Layout;
use crate::space::{ParamKind, Space};

const SQRT2: f64 = std::f64::consts::SQRT_2;
/// sqrt(pi / 2)
const SQRT_PI_2: f64 = 1.253_314_137_315_500_3;
/// ln(sqrt(2 pi))
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// The scaled complementary error function `exp(x^2) erfc(x)` for x >= 0.
fn erfcx(x: f64) -> f64 {
    if x < 25.0 {
        (x * x).exp() * erfc(x)
    } else {
        let x2 = x * x;
        let s = 1.0 - 0.5 / x2 + 0.75 / (x2 * x2) - 1.875 / (x2 * x2 * x2);
        s / (x * std::f64::consts::PI.sqrt())
    }
}

pub fn norm_pdf(z: f64) -> f64 {
    (-0.5 * z * z - LN_SQRT_2PI).exp()
}

pub fn norm_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / SQRT2)
}

/// `ln h(z)` with `h(z) = phi(z) + z Phi(z)`, and `d ln h / dz = Phi(z) / h(z)`; finite for every
/// finite z.
pub fn log_h(z: f64) -> (f64, f64) {
    if z > -1.0 {
        let cdf = norm_cdf(z);
        let h = norm_pdf(z) + z * cdf;
        (h.ln(), cdf / h)
    } else if z > -100.0 {
        // h = phi (1 + z Phi/phi), Phi/phi = sqrt(pi/2) erfcx(-z/sqrt2)
        let r = SQRT_PI_2 * erfcx(-z / SQRT2);
        let t = 1.0 + z * r;
        if t > 0.0 {
            (-0.5 * z * z - LN_SQRT_2PI + t.ln(), r / t)
        } else {
            asymptotic_log_h(z)
        }
    } else {
        asymptotic_log_h(z)
    }
}

fn asymptotic_log_h(z: f64) -> (f64, f64) {
    // h ~ phi(z) / z^2 (1 - 3/z^2 + 15/z^4); Phi/h ~ -z.
    let z2 = z * z;
    let corr = (1.0 - 3.0 / z2 + 15.0 / (z2 * z2)).ln();
    (-0.5 * z2 - LN_SQRT_2PI - z2.ln() + corr, -z)
}

/// Log expected improvement below `best` for a Gaussian with mean `mu` and variance `var`.
pub fn log_ei(mu: f64, var: f64, best: f64) -> f64 {
    let s = var.max(1e-300).sqrt();
    let z = (best - mu) / s;
    s.ln() + log_h(z).0
}

/// What the acquisition search needs to know.
pub struct Acq<'a> {
    pub space: &'a Space,
    pub layout: &'a Layout,
    pub post: &'a Posterior,
    pub best: f64,
    /// Score by minus the posterior mean instead of log EI: a refining ask, which exploits what
    /// the model knows near the incumbent (`GpPolicy::exploit_every`).
    pub greedy: bool,
    /// The probability of running to completion, when some trials failed: its logarithm (and a
    /// large penalty below `feasibility::SAFE`) is added to log EI in every score (the gradient
    /// steps of `refine_continuous` ignore it, and their result is kept only if its full score
    /// is better).
    pub feas: Option<&'a Feasibility>,
    /// The model of log duration, when durations vary: minus its prediction (times
    /// `cost::COST_EXPONENT`) is added to every score, as `feas` is (EI per second).
    pub cost: Option<&'a Cost>,
}

impl Acq<'_> {
    pub fn features(&self, u: &[f64]) -> Vec<f64> {
        self.layout.encode(self.space, &self.space.from_unit(u))
    }

    /// LogEI (minus the posterior mean, when greedy) of many points of the unit cube, weighted by
    /// the chance of running.
    pub fn score(&self, us: &[Vec<f64>]) -> Vec<f64> {
        let feats: Vec<Vec<f64>> = us.iter().map(|u| self.features(u)).collect();
        let logw = self.feas.map(|f| f.log_weight(&feats));
        // A refining ask wants the incumbent's last digits, whatever they cost.
        let logc = self
            .cost
            .filter(|_| !self.greedy)
            .map(|c| c.log_weight(&feats));
        self.post
            .predict(&feats)
            .into_iter()
            .enumerate()
            .map(|(i, (m, v))| {
                let a = if self.greedy {
                    -m
                } else {
                    log_ei(m, v, self.best)
                } + logw.as_ref().map_or(0.0, |w| w[i])
                    + logc.as_ref().map_or(0.0, |c| c[i]);
                if a.is_nan() { f64::NEG_INFINITY } else { a }
            })
            .collect()
    }

    /// Parameters refined by L-BFGS at `u`: active floats without a step.
    fn continuous(&self, u: &[f64]) -> Vec<usize> {
        let p = self.space.from_unit(u);
        self.space
            .params()
            .iter()
            .enumerate()
            .filter(|(_, q)| {
                matches!(q.kind, ParamKind::Float { step: None, .. }) && p.contains_key(&q.name)
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Refines `u` by L-BFGS over its continuous coordinates; returns the new point and score.
    pub fn refine_continuous(&self, u: &[f64], score: f64, max_iters: u64) -> (Vec<f64>, f64) {
        let idx = self.continuous(u);
        if idx.is_empty() {
            return (u.to_vec(), score);
        }
        let y0: Vec<f64> = idx
            .iter()
            .map(|&i| (2.0 * u[i].clamp(1e-6, 1.0 - 1e-6) - 1.0).asin())
            .collect();
        let problem = AcqProblem {
            acq: self,
            base: u.to_vec(),
            idx: idx.clone(),
            cols: idx.iter().map(|&i| self.layout.value_col[i]).collect(),
            evals: RefCell::new(0),
        };
        let Ok(solver) = LBFGS::new(MoreThuenteLineSearch::new(), 5).with_tolerance_grad(1e-7)
        else {
            return (u.to_vec(), score);
        };
        let Ok(res) = Executor::new(problem, solver)
            .configure(|st| st.param(y0).max_iters(max_iters))
            .run()
        else {
            return (u.to_vec(), score);
        };
        let st = res.state();
        let Some(y) = st.get_best_param() else {
            return (u.to_vec(), score);
        };
        let mut out = u.to_vec();
        for (k, &i) in idx.iter().enumerate() {
            out[i] = 0.5 + 0.5 * y[k].sin();
        }
        let s = self.score(std::slice::from_ref(&out))[0];
        if s > score {
            (out, s)
        } else {
            (u.to_vec(), score)
        }
    }

    /// Coordinate search over the discrete parameters (every category, nearby grid values),
    /// a few passes, the parameters at the positions `frozen` held; returns the new point and
    /// score.
    pub fn refine_discrete(&self, u: &[f64], score: f64, frozen: &[usize]) -> (Vec<f64>, f64) {
        let mut cur = u.to_vec();
        let mut cur_s = score;
        for _ in 0..3 {
            let mut moves: Vec<Vec<f64>> = Vec::new();
            let params = self.space.from_unit(&cur);
            for (i, p) in self.space.params().iter().enumerate() {
                let Some(v) = params.get(&p.name) else {
                    continue;
                };
                if frozen.contains(&i) {
                    continue;
                }
                match &p.kind {
                    ParamKind::Categorical { choices } => {
                        let n = choices.len();
                        for (k, c) in choices.iter().enumerate() {
                            let nu = (k as f64 + 0.5) / n as f64;
                            if !c.same(v) {
                                let mut m = cur.clone();
                                m[i] = nu;
                                moves.push(m);
                            }
                        }
                    }
                    ParamKind::Int { .. } | ParamKind::Float { step: Some(_), .. } => {
                        for nv in grid_neighbours(&p.kind, v) {
                            let mut m = cur.clone();
                            m[i] = p.to_unit(&nv);
                            moves.push(m);
                        }
                    }
                    ParamKind::Float { step: None, .. } => {}
                }
            }
            if moves.is_empty() {
                break;
            }
            let scores = self.score(&moves);
            let Some((bi, bs)) = scores
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, s)| (i, *s))
            else {
                break;
            };
            if bs > cur_s + 1e-12 {
                cur = moves.swap_remove(bi);
                cur_s = bs;
            } else {
                break;
            }
        }
        (cur, cur_s)
    }
}

/// Values one and two grid steps away from `v` (inside the bounds).
fn grid_neighbours(
    kind: &ParamKind,
    v: &crate::space::ParamValue,
) -> Vec<crate::space::ParamValue> {
    use crate::space::ParamValue;
    let mut out = Vec::new();
    match kind {
        ParamKind::Int {
            low, high, step, ..
        } => {
            if let Some(x) = v.as_f64() {
                let x = x as i64;
                for d in [-2, -1, 1, 2] {
                    let n = x + d * step;
                    if n >= *low && n <= *high {
                        out.push(ParamValue::Int(n));
                    }
                }
            }
        }
        ParamKind::Float {
            low,
            high,
            step: Some(s),
            ..
        } => {
            if let Some(x) = v.as_f64() {
                for d in [-2.0, -1.0, 1.0, 2.0] {
                    let n = x + d * s;
                    if n >= *low - 1e-12 && n <= *high + 1e-12 {
                        out.push(ParamValue::Float(n.clamp(*low, *high)));
                    }
                }
            }
        }
        _ => {}
    }
    out
}

/// argmin's view: minimise -LogEI (or the posterior mean, when greedy) over `y`, with `u_i = 0.5 + 0.5 sin(y_i)` for the refined
/// coordinates and the rest of `base` fixed.
struct AcqProblem<'a, 'b> {
    acq: &'a Acq<'b>,
    base: Vec<f64>,
    idx: Vec<usize>,
    cols: Vec<usize>,
    evals: RefCell<usize>,
}

impl AcqProblem<'_, '_> {
    fn both(&self, y: &[f64]) -> Result<(f64, Vec<f64>), ArgminError> {
        let mut e = self.evals.borrow_mut();
        *e += 1;
        if *e > 200 {
            return Err(ArgminError::msg("evaluation budget spent"));
        }
        let mut u = self.base.clone();
        for (k, &i) in self.idx.iter().enumerate() {
            u[i] = 0.5 + 0.5 * y[k].sin();
        }
        let mut f = self.acq.features(&u);
        // The decoded value of a continuous float is u itself (up to rounding); use u exactly so
        // that the gradient is that of the function being minimised.
        for (k, &c) in self.cols.iter().enumerate() {
            f[c] = u[self.idx[k]];
        }
        let (mu, var, dmu, dvar) = self.acq.post.predict_grad(&f, &self.cols);
        if self.acq.greedy {
            let g: Vec<f64> = (0..self.idx.len())
                .map(|k| dmu[k] * 0.5 * y[k].cos())
                .collect();
            if !mu.is_finite() || g.iter().any(|x| !x.is_finite()) {
                return Err(ArgminError::msg("non-finite mean"));
            }
            return Ok((mu, g));
        }
        let s = var.sqrt();
        let z = (self.acq.best - mu) / s;
        let (lh, dlh) = log_h(z);
        let val = s.ln() + lh;
        let mut g = vec![0.0; self.idx.len()];
        for k in 0..self.idx.len() {
            let ds = dvar[k] / (2.0 * s);
            let dz = -dmu[k] / s - z * ds / s;
            let dval = ds / s + dlh * dz;
            g[k] = -dval * 0.5 * y[k].cos();
        }
        if !val.is_finite() || g.iter().any(|x| !x.is_finite()) {
            return Err(ArgminError::msg("non-finite acquisition"));
        }
        Ok((-val, g))
    }
}

impl CostFunction for AcqProblem<'_, '_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, p: &Self::Param) -> Result<f64, ArgminError> {
        Ok(self.both(p)?.0)
    }
}

impl Gradient for AcqProblem<'_, '_> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, p: &Self::Param) -> Result<Vec<f64>, ArgminError> {
        Ok(self.both(p)?.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_h_is_finite_and_matches_the_direct_formula() {
        for &z in &[
            3.0, 0.5, 0.0, -0.9, -1.5, -5.0, -20.0, -99.0, -150.0, -1e4, -1e8,
        ] {
            let (v, d) = log_h(z);
            assert!(v.is_finite() && d.is_finite(), "z={z}");
            if z > -20.0 {
                let direct = (norm_pdf(z) + z * norm_cdf(z)).ln();
                assert!((v - direct).abs() < 1e-6 * direct.abs().max(1.0), "z={z}");
            }
        }
        // Continuous across the branch points.
        for &z in &[-1.0, -100.0] {
            let a = log_h(z - 1e-9).0;
            let b = log_h(z + 1e-9).0;
            assert!((a - b).abs() < 1e-5, "z={z}: {a} vs {b}");
        }
        // Monotone: more improvement is better.
        assert!(log_h(-30.0).0 < log_h(-29.0).0);
    }

    #[test]
    fn log_h_slope_matches_finite_differences() {
        for &z in &[1.0f64, -0.5, -3.0, -30.0, -300.0] {
            let h = 1e-6 * z.abs().max(1.0);
            let fd = (log_h(z + h).0 - log_h(z - h).0) / (2.0 * h);
            let d = log_h(z).1;
            assert!(
                (fd - d).abs() < 1e-3 * d.abs().max(1.0),
                "z={z}: {fd} vs {d}"
            );
        }
    }
}
