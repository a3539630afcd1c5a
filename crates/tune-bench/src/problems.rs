//! Benchmark problems: the four public ones of the benchmark suite's README (spaces, formulas and
//! optima exactly as published) and a few extra ones of the same kinds, kept apart so that the
//! optimizer is not tuned to the public four alone.

use tune::space::{ParamValue, Params, Space};

/// One minimisation problem with a known (or numerically found) optimum.
pub struct Problem {
    pub name: &'static str,
    pub public: bool,
    pub space_toml: &'static str,
    pub optimum: f64,
    pub f: fn(&Params) -> f64,
}

impl Problem {
    pub fn space(&self) -> anyhow::Result<Space> {
        let t: toml::Table = toml::from_str(self.space_toml)?;
        let inner = match t.get("space") {
            Some(toml::Value::Table(s)) => s.clone(),
            _ => t,
        };
        Ok(Space::from_toml(&inner)?)
    }
}

fn num(p: &Params, k: &str) -> f64 {
    p.get(k).and_then(ParamValue::as_f64).unwrap_or(f64::NAN)
}

fn text<'a>(p: &'a Params, k: &str) -> &'a str {
    match p.get(k) {
        Some(ParamValue::Str(s)) => s,
        _ => "",
    }
}

fn softplus(z: f64) -> f64 {
    if z > 30.0 { z } else { z.exp().ln_1p() }
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

pub fn branin(p: &Params) -> f64 {
    let (x0, x1) = (num(p, "x0"), num(p, "x1"));
    let pi = std::f64::consts::PI;
    (x1 - 5.1 / (4.0 * pi * pi) * x0 * x0 + 5.0 / pi * x0 - 6.0).powi(2)
        + 10.0 * (1.0 - 1.0 / (8.0 * pi)) * x0.cos()
        + 10.0
}

const H_ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
const H_A: [[f64; 6]; 4] = [
    [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
    [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
    [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
    [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
];
const H_P: [[f64; 6]; 4] = [
    [1312.0, 1696.0, 5569.0, 124.0, 8283.0, 5886.0],
    [2329.0, 4135.0, 8307.0, 3736.0, 1004.0, 9991.0],
    [2348.0, 1451.0, 3522.0, 2883.0, 3047.0, 6650.0],
    [4047.0, 8828.0, 8732.0, 5743.0, 1091.0, 381.0],
];

pub fn hartmann6(p: &Params) -> f64 {
    let x: Vec<f64> = (0..6).map(|j| num(p, &format!("x{j}"))).collect();
    -(0..4)
        .map(|i| {
            let s: f64 = (0..6)
                .map(|j| H_A[i][j] * (x[j] - 1e-4 * H_P[i][j]).powi(2))
                .sum();
            H_ALPHA[i] * (-s).exp()
        })
        .sum::<f64>()
}

pub fn rosenbrock4(p: &Params) -> f64 {
    let x: Vec<f64> = (0..4).map(|j| num(p, &format!("x{j}"))).collect();
    (0..3)
        .map(|i| 100.0 * (x[i + 1] - x[i] * x[i]).powi(2) + (1.0 - x[i]).powi(2))
        .sum()
}

pub fn train_surrogate(p: &Params) -> f64 {
    let lr = num(p, "lr");
    let bs = num(p, "batch_size");
    let acc = num(p, "accumulation");
    let wd = num(p, "weight_decay");
    let b = bs * acc;
    let r = (b / 256.0).log2();
    let (lr_eff, lr_star, w, base, extra) = match text(p, "optimizer") {
        "sgd" => {
            let m = num(p, "momentum");
            let lr_eff = lr / (1.0 - m);
            let lr_star = 0.1 * 2f64.powf(r);
            let wd_star = (5e-4 * lr_star / lr_eff).clamp(0.0, 0.1);
            let extra = 0.02 * ((1.0 - m) / 0.1).log10().powi(2)
                + 0.015 * ((wd + 1e-4) / (wd_star + 1e-4)).log10().powi(2);
            (lr_eff, lr_star, 0.5, 0.060, extra)
        }
        o => {
            let lr_star = 2e-3 * 2f64.powf(r / 2.0);
            let wd_w = (0.05 * (1e-3 / lr).sqrt()).clamp(0.0, 0.1);
            let extra = if o == "adamw" {
                5.0 * (wd - wd_w).powi(2)
            } else {
                5.0 * wd_w * wd_w + 0.5 * wd
            };
            (lr, lr_star, 0.7, 0.064, extra)
        }
    };
    let d = (lr_eff / lr_star).log10();
    let lr_pen = 0.03 * (d / w).powi(2);
    let bs_pen =
        0.010 * softplus(1.5 * (b / 2048.0).log2()) + 0.010 * softplus(1.5 * (32.0 / b).log2());
    let bn_pen = 0.008 * softplus(2.0 * (24.0 / bs).log2());
    let err = base + extra + lr_pen + bs_pen + bn_pen;
    let p_div = sigmoid(6.0 * (d - 1.0));
    0.9 * (1.0 - (-err / 0.9).exp()) * (1.0 - p_div) + 0.9 * p_div
}

/// Extra (not public): Ackley in 5-d on [-5, 10]^5, a multimodal synthetic function.
pub fn ackley5(p: &Params) -> f64 {
    let x: Vec<f64> = (0..5).map(|j| num(p, &format!("x{j}"))).collect();
    let n = x.len() as f64;
    let s1 = x.iter().map(|v| v * v).sum::<f64>() / n;
    let s2 = x
        .iter()
        .map(|v| (2.0 * std::f64::consts::PI * v).cos())
        .sum::<f64>()
        / n;
    -20.0 * (-0.2 * s1.sqrt()).exp() - s2.exp() + 20.0 + std::f64::consts::E
}

/// The space of both SVM problems (the surrogate and its quantised twin).
const SVM_SPACE: &str = "C      = { type = \"float\", low = 1e-3, high = 1e3, log = true }\n\
                         kernel = { type = \"categorical\", choices = [\"linear\", \"rbf\", \"poly\"] }\n\
                         gamma  = { type = \"float\", low = 1e-5, high = 10.0, log = true, when = { kernel = [\"rbf\", \"poly\"] } }\n\
                         degree = { type = \"int\", low = 2, high = 5, when = { kernel = \"poly\" } }";

/// Extra (not public): an SVM-like tuning task: validation error as a smooth function of C and
/// gamma (log), kernel, and polynomial degree (only with the poly kernel).
pub fn svm_surrogate(p: &Params) -> f64 {
    let c = num(p, "C").log10();
    let kernel = text(p, "kernel");
    let base = match kernel {
        "rbf" => {
            let g = num(p, "gamma").log10();
            // Best near C = 10^1.5, gamma = 10^-2.5, coupled (a ridge C * gamma ~ const).
            0.05 + 0.03 * (c - 1.5).powi(2) / 4.0
                + 0.05 * (g + 2.5).powi(2) / 2.0
                + 0.02 * ((c + g) - (-1.0)).powi(2) / 4.0
        }
        "poly" => {
            let g = num(p, "gamma").log10();
            let deg = num(p, "degree");
            0.07 + 0.03 * (c - 0.5).powi(2) / 4.0
                + 0.04 * (g + 1.5).powi(2) / 2.0
                + 0.01 * (deg - 3.0).powi(2)
        }
        _ => 0.09 + 0.02 * (c + 1.0).powi(2) / 4.0,
    };
    1.0 - (-base).exp()
}

/// Extra (not public): the SVM-like task as a validation error on 360 samples, so quantised in
/// steps of 1/360 with long plateaus and ties, as scikit-learn scores are.
pub fn svm_quantised(p: &Params) -> f64 {
    (svm_surrogate(p) * 360.0).ceil() / 360.0
}

/// Extra (not public): a gradient-boosting-like task with integer and stepped parameters.
pub fn boosting_surrogate(p: &Params) -> f64 {
    let n = num(p, "n_estimators");
    let depth = num(p, "max_depth");
    let lr = num(p, "learning_rate").log10();
    let sub = num(p, "subsample");
    let mcw = num(p, "min_child_weight").log10();
    // The best learning rate falls as the number of trees grows.
    let lr_star = -0.5 - 0.8 * (n / 100.0).log10();
    0.12 + 0.02 * (lr - lr_star).powi(2)
        + 0.004 * (depth - 6.0).powi(2)
        + 0.05 * (sub - 0.8).powi(2)
        + 0.01 * (mcw - 0.5).powi(2)
        + 0.00002 * n / 10.0
}

pub fn problems() -> Vec<Problem> {
    vec![
        Problem {
            name: "branin",
            public: true,
            space_toml: "x0 = { type = \"float\", low = -5.0, high = 10.0 }\n\
                         x1 = { type = \"float\", low = 0.0, high = 15.0 }",
            optimum: 0.397887357729739,
            f: branin,
        },
        Problem {
            name: "hartmann6",
            public: true,
            space_toml: "x0 = { type = \"float\", low = 0.0, high = 1.0 }\n\
                         x1 = { type = \"float\", low = 0.0, high = 1.0 }\n\
                         x2 = { type = \"float\", low = 0.0, high = 1.0 }\n\
                         x3 = { type = \"float\", low = 0.0, high = 1.0 }\n\
                         x4 = { type = \"float\", low = 0.0, high = 1.0 }\n\
                         x5 = { type = \"float\", low = 0.0, high = 1.0 }",
            optimum: -3.32236801141551,
            f: hartmann6,
        },
        Problem {
            name: "rosenbrock4",
            public: true,
            space_toml: "x0 = { type = \"float\", low = 0.01, high = 10.0, log = true }\n\
                         x1 = { type = \"float\", low = 0.01, high = 10.0, log = true }\n\
                         x2 = { type = \"float\", low = 0.01, high = 10.0, log = true }\n\
                         x3 = { type = \"float\", low = 0.01, high = 10.0, log = true }",
            optimum: 0.0,
            f: rosenbrock4,
        },
        Problem {
            name: "train_surrogate",
            public: true,
            space_toml: "lr           = { type = \"float\", low = 1e-05, high = 1.0, log = true }\n\
                         optimizer    = { type = \"categorical\", choices = [\"sgd\", \"adam\", \"adamw\"] }\n\
                         momentum     = { type = \"float\", low = 0.0, high = 0.99, when = { optimizer = \"sgd\" } }\n\
                         batch_size   = { type = \"int\", low = 16, high = 1024, log = true }\n\
                         accumulation = { type = \"int\", low = 1, high = 8 }\n\
                         weight_decay = { type = \"float\", low = 0.0, high = 0.1 }",
            optimum: 0.0600742,
            f: train_surrogate,
        },
        Problem {
            name: "ackley5",
            public: false,
            space_toml: "x0 = { type = \"float\", low = -5.0, high = 10.0 }\n\
                         x1 = { type = \"float\", low = -5.0, high = 10.0 }\n\
                         x2 = { type = \"float\", low = -5.0, high = 10.0 }\n\
                         x3 = { type = \"float\", low = -5.0, high = 10.0 }\n\
                         x4 = { type = \"float\", low = -5.0, high = 10.0 }",
            optimum: 0.0,
            f: ackley5,
        },
        Problem {
            name: "svm_surrogate",
            public: false,
            space_toml: SVM_SPACE,
            optimum: 1.0 - (-0.05f64).exp(),
            f: svm_surrogate,
        },
        Problem {
            name: "svm_quantised",
            public: false,
            space_toml: SVM_SPACE,
            optimum: ((1.0 - (-0.05f64).exp()) * 360.0).ceil() / 360.0,
            f: svm_quantised,
        },
        Problem {
            name: "boosting_surrogate",
            public: false,
            space_toml: "n_estimators     = { type = \"int\", low = 50, high = 1000, step = 50 }\n\
                         max_depth        = { type = \"int\", low = 2, high = 12 }\n\
                         learning_rate    = { type = \"float\", low = 1e-3, high = 1.0, log = true }\n\
                         subsample        = { type = \"float\", low = 0.5, high = 1.0, step = 0.05 }\n\
                         min_child_weight = { type = \"int\", low = 1, high = 100, log = true }",
            // 50 trees, the matching learning rate, depth 6, subsample 0.8, min_child_weight 3
            // (the integer nearest 10^0.5 on the log scale).
            optimum: 0.12 + 0.0001 + 0.01 * (3f64.log10() - 0.5).powi(2),
            f: boosting_surrogate,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(kv: &[(&str, ParamValue)]) -> Params {
        kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn public_optima_are_where_the_readme_says() {
        let f = |x: f64| ParamValue::Float(x);
        let b = branin(&params(&[
            ("x0", f(std::f64::consts::PI)),
            ("x1", f(2.275)),
        ]));
        assert!((b - 0.397887357729739).abs() < 1e-6);
        let h = hartmann6(&params(&[
            ("x0", f(0.20169)),
            ("x1", f(0.150011)),
            ("x2", f(0.476874)),
            ("x3", f(0.275332)),
            ("x4", f(0.311652)),
            ("x5", f(0.6573)),
        ]));
        assert!((h + 3.32236801141551).abs() < 1e-4);
        let r = rosenbrock4(&params(&[
            ("x0", f(1.0)),
            ("x1", f(1.0)),
            ("x2", f(1.0)),
            ("x3", f(1.0)),
        ]));
        assert_eq!(r, 0.0);
        let t = train_surrogate(&params(&[
            ("lr", f(0.00927)),
            ("optimizer", ParamValue::Str("sgd".into())),
            ("momentum", f(0.9)),
            ("batch_size", ParamValue::Int(262)),
            ("accumulation", ParamValue::Int(1)),
            ("weight_decay", f(0.00055)),
        ]));
        assert!((t - 0.0600742).abs() < 2e-4, "{t}");
        for p in problems() {
            p.space().expect("every space parses");
        }
    }
}
