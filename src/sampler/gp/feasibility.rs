//! Failed trials as a learned constraint: the probability that a point runs to completion.
//!
//! A failed trial already enters the regression model at the worst value seen, which keeps the
//! search away from it; but a failure says nothing about how good the point would have been,
//! only that it does not run (an out-of-memory batch size, a diverging learning rate). This
//! room fits that second question apart: a Gaussian-process classifier by least squares on the
//! labels (+1 finished, -1 failed; Rasmussen & Williams 2006, sec. 6.5), sharing the regression
//! model's length scales, with a prior mean at the study's success rate so that an unexplored
//! region is as likely to run as the study so far. The probability of feasibility multiplies
//! the expected improvement (its logarithm is added to log EI), and a point below `SAFE` ranks
//! behind every point above it, whatever its EI. Built only when the history holds both
//! outcomes; pruned trials are neither.
//!
//! Why the rank rule: near an optimum on the border of a failing region (the usual place: the
//! largest batch that fits, the highest learning rate that does not diverge), EI beyond the
//! border is many nats above EI on the known side, and a factor of p = 0.3 does not outweigh
//! it, so the product alone kept probing across: 8.1 / 8.3 / 7.6 failed trials of 50 on
//! tune-bench's three failure problems, no fewer than with the penalty alone (8.5 / 8.1 / 8.3).
//! Ranking p < 0.9 last gave 3.7 / 5.9 / 5.4 with scores as good or better (BENCHMARKS.md, "Failed trials as a
//! learned constraint"; 0.5 and 0.7 failed more, 0.95 and 0.98 scored worse at 25 trials; docs/experiments/failure-constraint.md).

use super::fit::Posterior;
use super::kernel::Layout;

/// Noise of the ±1 labels: a smooth boundary rather than an interpolation of every label.
const LABEL_NOISE: f64 = 0.1;
/// The slope of the probit link on the classifier's output.
const LINK: f64 = 2.0;
/// The lowest probability the acquisition is multiplied by: a point the classifier is sure
/// fails is still ranked, behind every point that may run.
const MIN_P: f64 = 1e-6;
/// The chance of running below which a point ranks behind every point above it.
pub const SAFE: f64 = 0.9;
/// What a point below `SAFE` loses (nats of log EI): more than any gap of log EI between two
/// candidates, so the rule is lexicographic, while points below it still rank among themselves
/// (when every candidate is below, as early in a study that fails often).
const RISKY: f64 = 1e3;

pub struct Feasibility {
    post: Posterior,
    prior: f64,
}

impl Feasibility {
    /// The classifier of points `x` with outcomes `ok`, or `None` when every trial finished
    /// (or every one failed: there is no boundary to learn) or the model cannot be built.
    /// `theta` are the regression model's hyper-parameters; its length scales are kept.
    pub fn fit(layout: &Layout, x: &[Vec<f64>], ok: &[bool], theta: &[f64]) -> Option<Feasibility> {
        let n_ok = ok.iter().filter(|&&o| o).count();
        if n_ok == 0 || n_ok == ok.len() {
            return None;
        }
        // The success rate, kept off ±1 so that the prior never rules a region in or out.
        let rate = (n_ok as f64 + 1.0) / (ok.len() as f64 + 2.0);
        let prior = 2.0 * rate - 1.0;
        let y: Vec<f64> = ok
            .iter()
            .map(|&o| if o { 1.0 - prior } else { -1.0 - prior })
            .collect();
        let g = layout.groups;
        let mut th = theta[..g].to_vec();
        th.push(0.0);
        th.push(LABEL_NOISE.ln());
        let post = Posterior::new(layout, x.to_vec(), &y, &th)?;
        Some(Feasibility { post, prior })
    }

    /// What each point's log EI gains: the log of its chance of running, less `RISKY` below
    /// `SAFE`.
    pub fn log_weight(&self, feats: &[Vec<f64>]) -> Vec<f64> {
        self.prob(feats)
            .into_iter()
            .map(|p| p.ln() - if p < SAFE { RISKY } else { 0.0 })
            .collect()
    }

    /// The probability that each point runs to completion.
    pub fn prob(&self, feats: &[Vec<f64>]) -> Vec<f64> {
        self.post
            .predict(feats)
            .into_iter()
            .map(|(m, v)| {
                let z = LINK * (m + self.prior) / (1.0 + v).sqrt();
                super::acquisition::norm_cdf(z).max(MIN_P)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::Space;

    #[test]
    fn the_classifier_learns_a_planted_boundary() {
        let t: toml::Table = toml::from_str(
            "x = { type = \"float\", low = 0.0, high = 1.0 }\n\
             y = { type = \"float\", low = 0.0, high = 1.0 }",
        )
        .expect("toml");
        let s = Space::from_toml(&t).expect("space");
        let l = Layout::new(&s);
        // A 5 x 5 grid; every point with x > 0.6 fails, whatever y.
        let mut xs = Vec::new();
        let mut ok = Vec::new();
        for i in 0..5 {
            for j in 0..5 {
                let (a, b) = (0.1 + 0.2 * i as f64, 0.1 + 0.2 * j as f64);
                xs.push(vec![a, b]);
                ok.push(a <= 0.6);
            }
        }
        let theta = [(-1.0f64), -1.0, 0.0, -9.0];
        let f = Feasibility::fit(&l, &xs, &ok, &theta).expect("both outcomes");
        let p = f.prob(&[
            vec![0.2, 0.5],
            vec![0.35, 0.9],
            vec![0.85, 0.5],
            vec![0.95, 0.1],
        ]);
        assert!(p[0] > 0.9 && p[1] > 0.8, "feasible side: {p:?}");
        assert!(p[2] < 0.1 && p[3] < 0.1, "failing side: {p:?}");
        // A likely failure ranks behind a likely run by more than any gap of log EI.
        let w = f.log_weight(&[vec![0.2, 0.5], vec![0.85, 0.5]]);
        assert!(w[0] > -0.2 && w[1] < -RISKY, "{w:?}");
        // Without a failure there is nothing to learn.
        assert!(Feasibility::fit(&l, &xs, &vec![true; xs.len()], &theta).is_none());
    }
}
