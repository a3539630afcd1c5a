//! Cost-aware search: a model of how long a trial runs, so that the acquisition is expected
//! improvement per expected second (Snoek, Larochelle & Adams 2012, "EI per second").
//!
//! When the trials' durations depend on their params (batch size, width, epochs), a point that
//! promises a little more improvement at twenty times the compute is a bad buy. This room fits
//! a Gaussian-process regression on the logarithm of the durations of complete trials (the
//! only ones whose duration is that of a full run), sharing the value model's length scales as
//! `feasibility` does, and the acquisition becomes `log EI - COST_EXPONENT * log E[seconds]`
//! (the predicted mean of the log duration, centred on the history's; the centre does not
//! change the ranking). Built only when at least `MIN_DURATIONS` complete trials have a known
//! duration and the slowest took at least `MIN_RATIO` times the fastest: with durations that
//! barely vary (most objectives, every ask-tell study told at once) the proposals are exactly
//! those without the model.

use super::fit::Posterior;
use super::kernel::Layout;

/// Complete trials with a known duration needed before the cost term is used.
pub const MIN_DURATIONS: usize = 5;
/// The least ratio of the slowest to the fastest known duration for the cost term to be used.
pub const MIN_RATIO: f64 = 1.5;
/// The power of the expected duration that divides EI: 1 is EI per second.
pub const COST_EXPONENT: f64 = 1.0;
/// Durations are counted from this many seconds up: below a second, differences are the noise
/// of the machine (an ask-tell study told at once, instant objectives) and say nothing of the
/// params, so such durations are all equal and build no model.
pub const FLOOR_SECONDS: f64 = 1.0;
/// Noise of the standardised log durations: the same params may run a little faster or slower.
const NOISE: f64 = 0.05;

pub struct Cost {
    post: Posterior,
    mean: f64,
    sd: f64,
}

impl Cost {
    /// The model of log duration at points `x` that took `seconds`, or `None` when there are
    /// too few durations, they barely vary, or the model cannot be built. `theta` are the
    /// value model's hyper-parameters; its length scales are kept.
    pub fn fit(layout: &Layout, x: &[Vec<f64>], seconds: &[f64], theta: &[f64]) -> Option<Cost> {
        if seconds.len() < MIN_DURATIONS || seconds.len() != x.len() {
            return None;
        }
        let logs: Vec<f64> = seconds.iter().map(|&s| s.max(FLOOR_SECONDS).ln()).collect();
        let lo = logs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() || !hi.is_finite() || hi - lo < MIN_RATIO.ln() {
            return None;
        }
        let n = logs.len() as f64;
        let mean = logs.iter().sum::<f64>() / n;
        let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / n)
            .sqrt()
            .max(1e-9);
        let y: Vec<f64> = logs.iter().map(|l| (l - mean) / sd).collect();
        let g = layout.groups;
        let mut th = theta[..g].to_vec();
        th.push(0.0);
        th.push(NOISE.ln());
        let post = Posterior::new(layout, x.to_vec(), &y, &th)?;
        Some(Cost { post, mean, sd })
    }

    /// The predicted log duration (seconds) of each point.
    pub fn log_seconds(&self, feats: &[Vec<f64>]) -> Vec<f64> {
        self.post
            .predict(feats)
            .into_iter()
            .map(|(m, _)| self.mean + self.sd * m)
            .collect()
    }

    /// What each point's log EI gains: minus `COST_EXPONENT` times its predicted log duration,
    /// centred on the history's mean.
    pub fn log_weight(&self, feats: &[Vec<f64>]) -> Vec<f64> {
        self.log_seconds(feats)
            .into_iter()
            .map(|l| -COST_EXPONENT * (l - self.mean))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::Space;

    fn layout() -> Layout {
        let t: toml::Table = toml::from_str(
            "x = { type = \"float\", low = 0.0, high = 1.0 }\n\
             y = { type = \"float\", low = 0.0, high = 1.0 }",
        )
        .expect("toml");
        Layout::new(&Space::from_toml(&t).expect("space"))
    }

    #[test]
    fn the_cost_model_learns_a_planted_duration() {
        let l = layout();
        // A 5 x 5 grid; the duration grows 20-fold along x and does not depend on y.
        let mut xs = Vec::new();
        let mut secs = Vec::new();
        for i in 0..5 {
            for j in 0..5 {
                let (a, b) = (0.1 + 0.2 * i as f64, 0.1 + 0.2 * j as f64);
                xs.push(vec![a, b]);
                secs.push(10.0 * 20f64.powf(a));
            }
        }
        let theta = [(-1.0f64), -1.0, 0.0, -9.0];
        let c = Cost::fit(&l, &xs, &secs, &theta).expect("durations vary");
        let q = [vec![0.05, 0.5], vec![0.5, 0.2], vec![0.95, 0.8]];
        let ls = c.log_seconds(&q);
        assert!(ls[0] < ls[1] && ls[1] < ls[2], "{ls:?}");
        for (p, l) in q.iter().zip(&ls) {
            let want = (10.0 * 20f64.powf(p[0])).ln();
            assert!((l - want).abs() < 0.3, "{p:?}: {l} against {want}");
        }
        let w = c.log_weight(&q);
        assert!(w[0] > w[2] + 2.0, "cheap corner gains: {w:?}");
        // Durations that barely vary, all below a second, or too few of them, build no model.
        let instant: Vec<f64> = secs.iter().map(|s| s / 1e3).collect();
        assert!(Cost::fit(&l, &xs, &instant, &theta).is_none());
        let flat: Vec<f64> = secs.iter().map(|s| 100.0 + s / 100.0).collect();
        assert!(Cost::fit(&l, &xs, &flat, &theta).is_none());
        assert!(Cost::fit(&l, &xs[..4], &secs[..4], &theta).is_none());
    }
}
