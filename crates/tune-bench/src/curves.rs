//! Learning-curve problems (issue 26): simulated trainings whose validation loss after each
//! epoch follows a known curve, so that an optimizer and a pruner working together can be
//! scored on the **final** value they find against the compute they spend.
//!
//! Every problem has the same skeleton. A configuration θ (a learning rate `lr`, log-uniform in
//! [1e-5, 1], plus the parameters of a base surface) has a final loss `F(θ)` and a curve that
//! starts at `V0` (chance level of a 10-class problem) before the first epoch and reaches `F(θ)`
//! after the last one, `R` epochs later:
//!
//! * `F(θ) = 0.1 + 0.5 q(θ) + 0.35 (1 - exp(-p(lr, θ) / 2)) (+ the shape's own term)`, where
//!   `q ∈ [0, 1]` is the base surface normalised to 0 at its optimum (a bowl with a categorical
//!   optimizer, Branin, Hartmann-6) and `p` the squared distance, in decades, of `lr` from a best
//!   learning rate that moves with the base parameters (the interaction every real study has).
//!   The optimum is 0.1 on every problem.
//! * The shape says how the curve gets there, with a speed that grows with the learning rate:
//!   a power law, an exponential (on both, the fastest learners are near the best learning rate,
//!   so early ranks mostly hold), **crossing** curves (high learning rates converge fast to a
//!   worse loss, low ones slowly to a better one: early ranks mislead), a **plateau** (the best
//!   configurations start late), and **divergence** (learning rates past a threshold that depends
//!   on θ look best at first, then blow up to NaN).
//! * Noisy problems add Gaussian noise to every report, drawn from the seed, the trial number
//!   and the epoch; the score is of the noise-free final value of the trial that looked best.
//!
//! What belongs here: the problems and their truth. The harness that runs samplers and pruners
//! on them is `multifidelity`.

use crate::problems::{num, text};
use tune::space::{Params, Space};

/// The loss before any training: chance level of a 10-class problem.
pub const V0: f64 = 2.3;
/// The final loss of the best configuration of every problem.
pub const OPTIMUM: f64 = 0.1;

/// How a curve goes from [`V0`] to its final value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    PowerLaw,
    Exponential,
    Crossing,
    Plateau,
    Diverging,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::PowerLaw => "power",
            Shape::Exponential => "exp",
            Shape::Crossing => "crossing",
            Shape::Plateau => "plateau",
            Shape::Diverging => "diverging",
        }
    }
}

/// The surface that gives a configuration's quality apart from its learning rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// Three floats in [0, 1] (`x1`..`x3`) and a categorical optimizer (`adam` best, `sgd` wants a higher
    /// learning rate).
    Bowl,
    /// Branin on its usual square (`x0`, `x1`), log-normalised.
    Branin,
    /// Hartmann-6 on [0, 1]^6 (`x0`..`x5`).
    Hartmann6,
}

impl Base {
    pub fn name(self) -> &'static str {
        match self {
            Base::Bowl => "bowl",
            Base::Branin => "branin",
            Base::Hartmann6 => "hartmann6",
        }
    }

    fn space_toml(self) -> &'static str {
        match self {
            Base::Bowl => {
                r#"
lr = { type = "float", low = 1e-5, high = 1.0, log = true }
x1 = { type = "float", low = 0.0, high = 1.0 }
x2 = { type = "float", low = 0.0, high = 1.0 }
x3 = { type = "float", low = 0.0, high = 1.0 }
optimizer = { type = "categorical", choices = ["sgd", "adam", "rmsprop"] }
"#
            }
            Base::Branin => {
                r#"
lr = { type = "float", low = 1e-5, high = 1.0, log = true }
x0 = { type = "float", low = -5.0, high = 10.0 }
x1 = { type = "float", low = 0.0, high = 15.0 }
"#
            }
            Base::Hartmann6 => {
                r#"
lr = { type = "float", low = 1e-5, high = 1.0, log = true }
x0 = { type = "float", low = 0.0, high = 1.0 }
x1 = { type = "float", low = 0.0, high = 1.0 }
x2 = { type = "float", low = 0.0, high = 1.0 }
x3 = { type = "float", low = 0.0, high = 1.0 }
x4 = { type = "float", low = 0.0, high = 1.0 }
x5 = { type = "float", low = 0.0, high = 1.0 }
"#
            }
        }
    }

    /// The base quality `q ∈ [0, 1]`, 0 at the surface's optimum; and two coordinates in
    /// [0, 1] that the shapes tie to the learning rate (`a`) and to the divergence threshold
    /// (`b`).
    fn quality(self, p: &Params) -> (f64, f64, f64) {
        match self {
            Base::Bowl => {
                let (x1, x2, x3) = (num(p, "x1"), num(p, "x2"), num(p, "x3"));
                let d = (x1 - 0.3).powi(2) + (x2 - 0.7).powi(2) + (x3 - 0.55).powi(2);
                let opt = match text(p, "optimizer") {
                    "adam" => 0.0,
                    "rmsprop" => 0.08,
                    _ => 0.15,
                };
                ((d / 0.75 + opt).min(1.0), x1, x2)
            }
            Base::Branin => {
                let (x0, x1) = (num(p, "x0"), num(p, "x1"));
                let f = crate::problems::branin(p) - 0.397_887;
                let q = (f.max(0.0) + 1.0).ln() / 309.0_f64.ln();
                (q.min(1.0), (x0 + 5.0) / 15.0, x1 / 15.0)
            }
            Base::Hartmann6 => {
                let f = crate::problems::hartmann6(p);
                let q = (f + 3.322_37) / 3.322_37;
                (q.clamp(0.0, 1.0), num(p, "x0"), num(p, "x1"))
            }
        }
    }

    /// The decade of the best learning rate at `a`; `sgd` wants one decade more.
    fn best_lr(self, p: &Params, a: f64, shape: Shape) -> f64 {
        let centre = match shape {
            // Low learning rates win in the end, and take the whole budget to get there.
            Shape::Crossing => -3.6,
            // The best rates sit close to the divergence threshold, as in real training.
            Shape::Diverging => -2.5,
            _ => -3.0,
        };
        let sgd = if self == Base::Bowl && text(p, "optimizer") == "sgd" {
            0.8
        } else {
            0.0
        };
        centre + 0.8 * (a - 0.5) + sgd
    }
}

/// One learning-curve problem: minimise the final loss.
#[derive(Debug, Clone)]
pub struct CurveProblem {
    pub name: String,
    pub shape: Shape,
    pub base: Base,
    /// Epochs of a full trial.
    pub epochs: u64,
    /// Standard deviation of the Gaussian noise on every report (0: exact).
    pub noise: f64,
}

/// What a configuration's training looks like: its loss after each epoch (index 0 is epoch 1),
/// NaN from the epoch it diverged.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub losses: Vec<f64>,
}

impl Curve {
    /// The loss after the last epoch (the trial's true final value; NaN when it diverged).
    pub fn last(&self) -> f64 {
        self.losses.last().copied().unwrap_or(f64::NAN)
    }
}

impl CurveProblem {
    pub fn space(&self) -> anyhow::Result<Space> {
        let mut text = self.base.space_toml().to_string();
        if self.shape == Shape::Plateau {
            // How long the configuration warms up before it learns (a schedule's warm-up, a
            // small initialisation): the longer, the later it takes off and the lower it ends.
            text.push_str("warmup = { type = \"float\", low = 0.0, high = 1.0 }\n");
        }
        let t: toml::Table = toml::from_str(&text)?;
        Ok(Space::from_toml(&t)?)
    }

    /// The true, noise-free curve of `params`.
    pub fn curve(&self, params: &Params) -> Curve {
        let r_max = self.epochs as f64;
        let (q, a, b) = self.base.quality(params);
        let lr = num(params, "lr").log10();
        let best = self.base.best_lr(params, a, self.shape);
        let p = (lr - best).powi(2);
        // How fast a configuration learns. Where learning rates only trade speed for a worse
        // end (crossing, diverging), the higher the faster; elsewhere the fastest learning rate
        // sits half a decade above the best one and speed falls off both ways, so that early
        // ranks mostly tell the final ones (the shape pruning assumes).
        let speed = match self.shape {
            Shape::Crossing | Shape::Diverging => sigmoid(1.5 * (lr + 3.0)),
            _ => (-(lr - best - 0.5).powi(2) / 2.0).exp(),
        };
        let mut last = OPTIMUM + 0.5 * q + 0.35 * (1.0 - (-p / 2.0).exp());
        let warmup = num(params, "warmup");
        if self.shape == Shape::Plateau {
            // Slow starters win: the later a configuration takes off, the lower it ends.
            last += 0.15 * (1.0 - warmup);
        }
        let decay = |r: f64| -> f64 {
            match self.shape {
                Shape::PowerLaw => {
                    let e = 0.4 + 1.6 * speed;
                    ((r + 1.0).powf(-e) - (r_max + 1.0).powf(-e)) / (1.0 - (r_max + 1.0).powf(-e))
                }
                Shape::Exponential | Shape::Diverging => {
                    exp_decay(r, r_max, r_max * (0.03 + 0.35 * (1.0 - speed)))
                }
                Shape::Crossing => {
                    exp_decay(r, r_max, r_max * (0.02 + 0.9 * (1.0 - speed).powi(2)))
                }
                Shape::Plateau => {
                    let onset = (0.6 * warmup * r_max).floor();
                    if r <= onset {
                        1.0
                    } else {
                        exp_decay(r - onset, r_max - onset, (r_max - onset) * 0.15)
                    }
                }
            }
        };
        let mut losses: Vec<f64> = (1..=self.epochs)
            .map(|r| last + (V0 - last) * decay(r as f64))
            .collect();
        if self.shape == Shape::Diverging {
            // Past the threshold, the loss falls as fast as any, then turns and grows until it
            // is no number at all; the further past, the sooner.
            let threshold = -1.5 - 0.5 * b;
            let excess = lr - threshold;
            if excess > 0.0 {
                let turn = (r_max * (0.8 - excess).max(0.1)).ceil();
                let mut diverged = false;
                for (i, v) in losses.iter_mut().enumerate() {
                    let r = (i + 1) as f64;
                    if diverged {
                        *v = f64::NAN;
                    } else if r > turn {
                        *v *= (0.6 * (r - turn)).exp();
                        if *v > 10.0 {
                            *v = f64::NAN;
                            diverged = true;
                        }
                    }
                }
            }
        }
        Curve { losses }
    }
}

fn exp_decay(r: f64, r_max: f64, tau: f64) -> f64 {
    let end = (-r_max / tau).exp();
    (((-r / tau).exp()) - end) / (1.0 - end)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The learning-curve family: every shape on two bases, 27 epochs a trial, and noisy and
/// 81-epoch variants.
pub fn curve_problems() -> Vec<CurveProblem> {
    let make = |shape: Shape, base: Base, epochs: u64, noise: f64| {
        let mut name = format!("{}_{}", shape.name(), base.name());
        if noise > 0.0 {
            name.push_str("_noisy");
        }
        if epochs != 27 {
            name.push_str(&format!("_{epochs}"));
        }
        CurveProblem {
            name,
            shape,
            base,
            epochs,
            noise,
        }
    };
    vec![
        make(Shape::PowerLaw, Base::Bowl, 27, 0.0),
        make(Shape::PowerLaw, Base::Hartmann6, 27, 0.0),
        make(Shape::Exponential, Base::Branin, 27, 0.0),
        make(Shape::Exponential, Base::Bowl, 81, 0.0),
        make(Shape::Crossing, Base::Bowl, 27, 0.0),
        make(Shape::Crossing, Base::Hartmann6, 27, 0.0),
        make(Shape::Plateau, Base::Bowl, 27, 0.0),
        make(Shape::Plateau, Base::Branin, 27, 0.0),
        make(Shape::Diverging, Base::Bowl, 27, 0.0),
        make(Shape::Diverging, Base::Hartmann6, 27, 0.0),
        make(Shape::Crossing, Base::Branin, 27, 0.03),
        make(Shape::PowerLaw, Base::Hartmann6, 27, 0.03),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};
    use tune::space::ParamValue;

    fn sample(p: &CurveProblem, n: usize, seed: u64) -> Vec<Params> {
        let space = p.space().unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let u: Vec<f64> = (0..space.len()).map(|_| rng.random::<f64>()).collect();
                space.from_unit(&u)
            })
            .collect()
    }

    fn with(base: &Params, key: &str, v: ParamValue) -> Params {
        let mut p = base.clone();
        p.insert(key.to_string(), v);
        p
    }

    #[test]
    fn every_curve_starts_below_chance_and_no_configuration_beats_the_optimum() {
        for p in curve_problems() {
            for params in sample(&p, 2000, 7) {
                let c = p.curve(&params);
                assert_eq!(c.losses.len() as u64, p.epochs, "{}", p.name);
                for v in c.losses.iter().filter(|v| !v.is_nan()) {
                    assert!(*v >= OPTIMUM - 1e-12, "{}: {v} below the optimum", p.name);
                    assert!(*v <= 10.0, "{}: {v}", p.name);
                }
                // Only a diverging curve may end above where it started (or at NaN).
                let last = c.last();
                if p.shape != Shape::Diverging {
                    assert!(last.is_finite() && last <= V0, "{}: final {last}", p.name);
                }
            }
        }
    }

    #[test]
    fn the_optimum_is_reached_at_the_base_optimum_and_its_learning_rate() {
        let p = CurveProblem {
            name: "t".into(),
            shape: Shape::Exponential,
            base: Base::Bowl,
            epochs: 27,
            noise: 0.0,
        };
        let mut params = Params::new();
        params.insert("x1".into(), ParamValue::Float(0.3));
        params.insert("x2".into(), ParamValue::Float(0.7));
        params.insert("x3".into(), ParamValue::Float(0.55));
        params.insert("optimizer".into(), ParamValue::Str("adam".into()));
        // best decade at x1 = 0.3: -3 + 0.8 * (0.3 - 0.5) = -3.16
        params.insert("lr".into(), ParamValue::Float(10f64.powf(-3.16)));
        assert!((p.curve(&params).last() - OPTIMUM).abs() < 1e-9);
        let off = with(&params, "lr", ParamValue::Float(1e-2));
        assert!(p.curve(&off).last() > OPTIMUM + 0.1);
    }

    #[test]
    fn curves_fall_monotonically_except_where_they_diverge() {
        for p in curve_problems()
            .into_iter()
            .filter(|p| p.shape != Shape::Diverging)
        {
            for params in sample(&p, 300, 3) {
                let c = p.curve(&params);
                for w in c.losses.windows(2) {
                    assert!(w[1] <= w[0] + 1e-12, "{}: {:?}", p.name, c.losses);
                }
            }
        }
    }

    #[test]
    fn crossing_curves_rank_high_learning_rates_first_early_and_last_at_the_end() {
        let p = curve_problems()
            .into_iter()
            .find(|p| p.shape == Shape::Crossing && p.noise == 0.0)
            .unwrap();
        let base = sample(&p, 1, 11).remove(0);
        let slow = p.curve(&with(&base, "lr", ParamValue::Float(10f64.powf(-3.6))));
        let fast = p.curve(&with(&base, "lr", ParamValue::Float(10f64.powf(-1.5))));
        // After the first rung of ASHA (1 and 3 epochs of 27) the fast one looks better...
        assert!(fast.losses[0] < slow.losses[0]);
        assert!(fast.losses[2] < slow.losses[2]);
        // ...and ends worse.
        assert!(fast.last() > slow.last());
    }

    #[test]
    fn past_its_threshold_a_learning_rate_diverges_and_below_it_never_does() {
        let p = curve_problems()
            .into_iter()
            .find(|p| p.shape == Shape::Diverging)
            .unwrap();
        let base = sample(&p, 1, 5).remove(0);
        let below = p.curve(&with(&base, "lr", ParamValue::Float(1e-3)));
        assert!(below.losses.iter().all(|v| v.is_finite()));
        let past = p.curve(&with(&base, "lr", ParamValue::Float(0.5)));
        assert!(past.last().is_nan());
        // It looked good before it turned.
        let first_nan = past.losses.iter().position(|v| v.is_nan()).unwrap();
        assert!(first_nan > 1);
        assert!(past.losses[0] < below.losses[0]);
    }

    #[test]
    fn on_a_plateau_problem_the_late_starters_end_lowest() {
        let p = curve_problems()
            .into_iter()
            .find(|p| p.shape == Shape::Plateau)
            .unwrap();
        let base = sample(&p, 1, 9).remove(0);
        let early = p.curve(&with(&base, "warmup", ParamValue::Float(0.05)));
        let late = p.curve(&with(&base, "warmup", ParamValue::Float(0.95)));
        assert!(late.losses[9] > early.losses[9]);
        assert!(late.last() < early.last());
    }
}
