//! Benchmark problems: the four public ones of the benchmark suite's README (spaces, formulas and
//! optima exactly as published), a few extra ones of the same kinds, kept apart so that the
//! optimizer is not tuned to the public four alone, and trap problems (issue "Optimizer v2"):
//! mixed spaces where one value of a low-cardinality integer or categorical looks best in the
//! first trials (a broad, shallow basin) while another wins (a deeper, narrow one), the shape on
//! which a model-based sampler can lock onto the early value for the whole run; and failure
//! problems (issue 13): a region of the space where the trial fails (diverges, runs out of
//! memory, crashes) and gives no value, bordering or containing the unconstrained optimum;
//! and cost problems (issue 13, cost-aware search): training-shaped problems whose trials take
//! a simulated time that depends on the params (epochs, width, layers, batch size), 16 to 96
//! times longer in the slowest corner than in the fastest, with an optimum that is not the
//! cheapest point; and noisy problems: public ones whose every value comes with Gaussian noise,
//! scored on the true value of the trial that looked best.

use tune::space::{ParamValue, Params, Space};

/// One minimisation problem with a known (or numerically found) optimum.
pub struct Problem {
    pub name: &'static str,
    pub public: bool,
    /// A trap problem (selected by `trap`, not by `extra`).
    pub trap: bool,
    /// A failure problem (selected by `fail`, not by `extra`): `f` is NaN where a trial fails
    /// (diverges, runs out of memory, crashes), and the harness tells such a trial as failed.
    pub fail: bool,
    /// A cost problem (selected by `cost`): the simulated seconds a trial at these params
    /// takes; `tune-bench optimizers` reports the best value within budgets of simulated time.
    pub cost: Option<fn(&Params) -> f64>,
    /// A noisy problem (selected by `noisy`, not by `extra`): the standard deviation of the
    /// Gaussian noise the harness adds to every value it tells, as a rerun of the same training
    /// with another data order would. The score is of the noise-free value of the trial with the
    /// best observed value (the one a user would pick), not of the luckiest draw. 0: exact.
    pub noise: f64,
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

pub(crate) fn num(p: &Params, k: &str) -> f64 {
    p.get(k).and_then(ParamValue::as_f64).unwrap_or(f64::NAN)
}

pub(crate) fn text<'a>(p: &'a Params, k: &str) -> &'a str {
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

/// `a + c * |x - centre|^2`: one branch of a trap problem, a bowl in the problem's own unit
/// coordinates whose minimum `a` is reached inside the box (so the optimum is exact).
fn bowl(a: f64, c: f64, x: &[f64], centre: &[f64]) -> f64 {
    a + c * x
        .iter()
        .zip(centre)
        .map(|(v, m)| (v - m).powi(2))
        .sum::<f64>()
}

/// Position of `v` in `[lo, hi]` on a log10 scale (0..1).
fn log_pos(v: f64, lo: f64, hi: f64) -> f64 {
    (v.log10() - lo.log10()) / (hi.log10() - lo.log10())
}

/// Trap (ordinal integer, 3 values): a polynomial degree. Degree 1 underfits: 0.30 whatever the
/// rest (a broad, shallow bowl), so it looks best in the first trials; degree 2 reaches 0.15 in
/// a narrow valley of (regularisation, feature scale); degree 3 overfits (0.20, narrower still).
pub fn trap_degree3(p: &Params) -> f64 {
    let x = [log_pos(num(p, "alpha"), 1e-6, 1e2), num(p, "scale")];
    match num(p, "degree") as i64 {
        1 => bowl(0.30, 0.08, &x, &[0.70, 0.50]),
        2 => bowl(0.15, 3.0, &x, &[0.35, 0.20]),
        _ => bowl(0.20, 4.0, &x, &[0.45, 0.25]),
    }
}

/// Trap (ordinal integer, 5 values, 3 continuous): degree 1 broad at 0.30, the winner is degree
/// 3 (0.16), its neighbours 2 and 4 are good but narrower, 5 overfits.
pub fn trap_degree5(p: &Params) -> f64 {
    let x = [
        log_pos(num(p, "alpha"), 1e-6, 1e2),
        log_pos(num(p, "lr"), 1e-4, 1.0),
        num(p, "frac"),
    ];
    match num(p, "degree") as i64 {
        1 => bowl(0.30, 0.06, &x, &[0.70, 0.50, 0.50]),
        2 => bowl(0.24, 2.0, &x, &[0.45, 0.40, 0.30]),
        3 => bowl(0.16, 3.0, &x, &[0.35, 0.30, 0.25]),
        4 => bowl(0.20, 4.0, &x, &[0.30, 0.30, 0.20]),
        _ => bowl(0.27, 5.0, &x, &[0.25, 0.30, 0.20]),
    }
}

/// Trap (two categoricals): a random forest's criterion x bootstrap. (gini, bootstrap) is broad
/// at 0.30 and looks best early; (entropy, no bootstrap) wins at 0.17 in a narrow valley of
/// (max_features, min_samples_leaf = 4); (log_loss, no bootstrap) is its near twin at 0.20.
pub fn trap_cat_pair(p: &Params) -> f64 {
    let x = [
        (num(p, "max_features") - 0.1) / 0.9,
        num(p, "min_samples_leaf").log2() / 5.0,
    ];
    let boot = matches!(p.get("bootstrap"), Some(ParamValue::Bool(true)));
    match (text(p, "criterion"), boot) {
        ("gini", true) => bowl(0.30, 0.06, &x, &[0.5, 0.5]),
        ("gini", false) => bowl(0.27, 1.5, &x, &[0.4, 0.2]),
        ("entropy", true) => bowl(0.26, 1.5, &x, &[0.6, 0.6]),
        ("entropy", false) => bowl(0.17, 2.5, &x, &[0.3, 0.4]),
        (_, true) => bowl(0.28, 1.5, &x, &[0.6, 0.6]),
        (_, false) => bowl(0.20, 2.5, &x, &[0.3, 0.4]),
    }
}

/// Trap (a categorical of 5 values with an ordinal integer and two floats): an activation
/// function. relu is broad at 0.30; gelu wins at 0.16 with 3 layers in a narrow valley of
/// (lr, dropout); silu is close (0.19); tanh and elu are poor.
pub fn trap_cat5(p: &Params) -> f64 {
    let x = [log_pos(num(p, "lr"), 1e-4, 1.0), num(p, "dropout") / 0.5];
    let layers = num(p, "layers");
    match text(p, "activation") {
        "relu" => bowl(0.30, 0.05, &x, &[0.5, 0.5]) + 0.005 * (layers - 2.0).powi(2),
        "tanh" => bowl(0.34, 1.0, &x, &[0.5, 0.3]) + 0.02 * (layers - 2.0).powi(2),
        "gelu" => bowl(0.16, 2.5, &x, &[0.4, 0.2]) + 0.03 * (layers - 3.0).powi(2),
        "silu" => bowl(0.19, 2.5, &x, &[0.45, 0.25]) + 0.03 * (layers - 3.0).powi(2),
        _ => bowl(0.27, 1.5, &x, &[0.55, 0.4]) + 0.02 * (layers - 2.0).powi(2),
    }
}

/// Failure (a diverging learning rate): a training surrogate whose run diverges (fails, no
/// value) when the learning rate passes a limit that grows with the square root of the batch
/// size; the best learning rate is half that limit, so the optimum lies 0.3 decades from the
/// failing region. Best: 0.08 at batch 64, lr 0.0075, weight decay 0.01.
pub fn fail_diverge(p: &Params) -> f64 {
    let lr = num(p, "lr");
    let bs = num(p, "batch_size");
    let wd = num(p, "weight_decay");
    let lr_div = 0.03 * (bs / 256.0).sqrt();
    if lr > lr_div {
        return f64::NAN;
    }
    let d = (lr / (0.5 * lr_div)).log10();
    0.08 + 0.04 * d * d + 0.004 * (bs / 64.0).log2().powi(2) + 2.0 * (wd - 0.01).powi(2)
}

/// Failure (out of memory): batch size x width above 65 536 does not fit; the loss wants a
/// width of 1024 and a batch of 128 (product 131 072, inside the failing region), so the best
/// that runs lies on the border: 0.105004793919 at batch 90, width 728, lr 10^-2.5.
pub fn fail_oom(p: &Params) -> f64 {
    let bs = num(p, "batch_size");
    let w = num(p, "width");
    let lr = num(p, "lr");
    if bs * w > 65536.0 {
        return f64::NAN;
    }
    0.10 + 0.01 * (w.log2() - 10.0).powi(2)
        + 0.01 * (bs.log2() - 7.0).powi(2)
        + 0.05 * (lr.log10() + 2.5).powi(2)
}

/// Failure (a crash region that contains the unconstrained optimum, in a mixed space): every
/// run with lr above 0.3 diverges, and fp16 runs overflow (crash) when lr exceeds
/// 0.003 * (1 + 10 * warmup). fp16 is the best precision and its best lr (10^-1.5) crashes at
/// the best warmup (0.2), so the optimum trades warmup for lr on the crash border:
/// 0.106181202293 at fp16, warmup 0.41241, lr 0.015372; bf16's best is 0.11.
pub fn fail_crash(p: &Params) -> f64 {
    let lr = num(p, "lr");
    let w = num(p, "warmup");
    let prec = text(p, "precision");
    if lr > 0.3 || (prec == "fp16" && lr > 0.003 * (1.0 + 10.0 * w)) {
        return f64::NAN;
    }
    let base = match prec {
        "fp16" => 0.10,
        "bf16" => 0.11,
        _ => 0.13,
    };
    base + 0.04 * (lr.log10() + 1.5).powi(2) + 0.05 * (w - 0.2).powi(2)
}

/// Cost (an MLP's batch size, width, epochs and learning rate): more epochs help with
/// diminishing returns. Best: 0.10 + 0.15 e^(-10/3) at batch 64, width 256, 10 epochs, lr
/// 10^-2.5; a trial takes epochs x (1 + width / 512) x (1 + 32 / batch) seconds (2.3 to 90;
/// 22.5 at the optimum).
pub fn cost_mlp(p: &Params) -> f64 {
    let (bs, w, ep, lr) = (
        num(p, "batch_size"),
        num(p, "width"),
        num(p, "epochs"),
        num(p, "lr"),
    );
    0.10 + 0.01 * (w.log2() - 8.0).powi(2)
        + 0.008 * (bs.log2() - 6.0).powi(2)
        + 0.05 * (lr.log10() + 2.5).powi(2)
        + 0.15 * (-ep / 3.0).exp()
}

pub fn cost_mlp_seconds(p: &Params) -> f64 {
    let (bs, w, ep) = (num(p, "batch_size"), num(p, "width"), num(p, "epochs"));
    ep * (1.0 + w / 512.0) * (1.0 + 32.0 / bs)
}

/// Cost (a network's depth and width, dropout and learning rate). Best: 0.12 at 4 layers, width
/// 512, dropout 0.2, lr 10^-3; a trial takes (1 + layers) x (1 + width / 256) seconds (2.5 to
/// 45; 15 at the optimum).
pub fn cost_depth(p: &Params) -> f64 {
    let (l, w, d, lr) = (
        num(p, "layers"),
        num(p, "width"),
        num(p, "dropout"),
        num(p, "lr"),
    );
    0.12 + 0.005 * (l - 4.0).powi(2)
        + 0.01 * (w.log2() - 9.0).powi(2)
        + 0.1 * (d - 0.2).powi(2)
        + 0.04 * (lr.log10() + 3.0).powi(2)
}

pub fn cost_depth_seconds(p: &Params) -> f64 {
    (1.0 + num(p, "layers")) * (1.0 + num(p, "width") / 256.0)
}

/// Cost (epochs against batch size, the learning rate scaled with the batch): the loss falls
/// as 0.5 / (epochs + 2), so the optimum is at the most epochs. Best: 0.08 + 0.5 / 32 at 30
/// epochs, batch 128, lr 10^-2; a trial takes (5 + epochs) x (1 + 64 / batch) seconds (6.4 to
/// 105; 52.5 at the optimum).
pub fn cost_epochs(p: &Params) -> f64 {
    let (ep, bs, lr) = (num(p, "epochs"), num(p, "batch_size"), num(p, "lr"));
    0.08 + 0.5 / (ep + 2.0)
        + 0.01 * (bs.log2() - 7.0).powi(2)
        + 0.05 * (lr.log10() + 2.0 - 0.5 * (bs / 128.0).log10()).powi(2)
}

pub fn cost_epochs_seconds(p: &Params) -> f64 {
    (5.0 + num(p, "epochs")) * (1.0 + 64.0 / num(p, "batch_size"))
}

/// Cost (eight training settings, where 50 trials do not solve it): width, depth, epochs and
/// batch size set the time; learning rate, weight decay, dropout and warmup are free. Best:
/// 0.10 + 0.12 e^-3 at batch 64, width 256, 3 layers, 12 epochs, lr 10^-2.5, weight decay
/// 10^-4, dropout 0.2, warmup 0.1; a trial takes epochs x (1 + layers / 4) x (1 + width / 512)
/// x (1 + 32 / batch) seconds (2.8 to 270; 47.3 at the optimum).
pub fn cost_wide(p: &Params) -> f64 {
    let (bs, w, l, ep) = (
        num(p, "batch_size"),
        num(p, "width"),
        num(p, "layers"),
        num(p, "epochs"),
    );
    let (lr, wd, d, wu) = (
        num(p, "lr"),
        num(p, "weight_decay"),
        num(p, "dropout"),
        num(p, "warmup"),
    );
    0.10 + 0.01 * (w.log2() - 8.0).powi(2)
        + 0.006 * (l - 3.0).powi(2)
        + 0.12 * (-ep / 4.0).exp()
        + 0.008 * (bs.log2() - 6.0).powi(2)
        + 0.05 * (lr.log10() + 2.5).powi(2)
        + 0.01 * (wd.log10() + 4.0).powi(2)
        + 0.1 * (d - 0.2).powi(2)
        + 0.2 * (wu - 0.1).powi(2)
}

pub fn cost_wide_seconds(p: &Params) -> f64 {
    let (bs, w, l, ep) = (
        num(p, "batch_size"),
        num(p, "width"),
        num(p, "layers"),
        num(p, "epochs"),
    );
    ep * (1.0 + l / 4.0) * (1.0 + w / 512.0) * (1.0 + 32.0 / bs)
}

pub fn problems() -> Vec<Problem> {
    let mut all = vec![
        Problem {
            name: "branin",
            public: true,
            trap: false,
            fail: false,
            cost: None,
            noise: 0.0,
            space_toml: "x0 = { type = \"float\", low = -5.0, high = 10.0 }\n\
                         x1 = { type = \"float\", low = 0.0, high = 15.0 }",
            optimum: 0.397887357729739,
            f: branin,
        },
        Problem {
            name: "hartmann6",
            public: true,
            trap: false,
            fail: false,
            cost: None,
            noise: 0.0,
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
            trap: false,
            fail: false,
            cost: None,
            noise: 0.0,
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
            trap: false,
            fail: false,
            cost: None,
            noise: 0.0,
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
            trap: false,
            fail: false,
            cost: None,
            noise: 0.0,
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
            trap: false,
            fail: false,
            cost: None,
            noise: 0.0,
            space_toml: SVM_SPACE,
            optimum: 1.0 - (-0.05f64).exp(),
            f: svm_surrogate,
        },
        Problem {
            name: "svm_quantised",
            public: false,
            trap: false,
            fail: false,
            cost: None,
            noise: 0.0,
            space_toml: SVM_SPACE,
            optimum: ((1.0 - (-0.05f64).exp()) * 360.0).ceil() / 360.0,
            f: svm_quantised,
        },
        Problem {
            name: "boosting_surrogate",
            public: false,
            trap: false,
            fail: false,
            cost: None,
            noise: 0.0,
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
        Problem {
            name: "trap_degree3",
            public: false,
            trap: true,
            fail: false,
            cost: None,
            noise: 0.0,
            space_toml: "degree = { type = \"int\", low = 1, high = 3 }\n\
                         alpha  = { type = \"float\", low = 1e-6, high = 1e2, log = true }\n\
                         scale  = { type = \"float\", low = 0.0, high = 1.0 }",
            optimum: 0.15,
            f: trap_degree3,
        },
        Problem {
            name: "trap_degree5",
            public: false,
            trap: true,
            fail: false,
            cost: None,
            noise: 0.0,
            space_toml: "degree = { type = \"int\", low = 1, high = 5 }\n\
                         alpha  = { type = \"float\", low = 1e-6, high = 1e2, log = true }\n\
                         lr     = { type = \"float\", low = 1e-4, high = 1.0, log = true }\n\
                         frac   = { type = \"float\", low = 0.0, high = 1.0 }",
            optimum: 0.16,
            f: trap_degree5,
        },
        Problem {
            name: "trap_cat_pair",
            public: false,
            trap: true,
            fail: false,
            cost: None,
            noise: 0.0,
            space_toml: "criterion        = { type = \"categorical\", choices = [\"gini\", \"entropy\", \"log_loss\"] }\n\
                         bootstrap        = { type = \"categorical\", choices = [true, false] }\n\
                         max_features     = { type = \"float\", low = 0.1, high = 1.0 }\n\
                         min_samples_leaf = { type = \"int\", low = 1, high = 32, log = true }",
            optimum: 0.17,
            f: trap_cat_pair,
        },
        Problem {
            name: "trap_cat5",
            public: false,
            trap: true,
            fail: false,
            cost: None,
            noise: 0.0,
            space_toml: "activation = { type = \"categorical\", choices = [\"relu\", \"tanh\", \"gelu\", \"silu\", \"elu\"] }\n\
                         layers     = { type = \"int\", low = 1, high = 4 }\n\
                         lr         = { type = \"float\", low = 1e-4, high = 1.0, log = true }\n\
                         dropout    = { type = \"float\", low = 0.0, high = 0.5 }",
            optimum: 0.16,
            f: trap_cat5,
        },
        Problem {
            name: "fail_diverge",
            public: false,
            trap: false,
            fail: true,
            cost: None,
            noise: 0.0,
            space_toml: "lr           = { type = \"float\", low = 1e-5, high = 1.0, log = true }\n\
                         batch_size   = { type = \"int\", low = 16, high = 1024, log = true }\n\
                         weight_decay = { type = \"float\", low = 0.0, high = 0.1 }",
            optimum: 0.08,
            f: fail_diverge,
        },
        Problem {
            name: "fail_oom",
            public: false,
            trap: false,
            fail: true,
            cost: None,
            noise: 0.0,
            space_toml: "batch_size = { type = \"int\", low = 16, high = 1024, log = true }\n\
                         width      = { type = \"int\", low = 32, high = 2048, log = true }\n\
                         lr         = { type = \"float\", low = 1e-4, high = 0.1, log = true }",
            optimum: 0.1050047939192687,
            f: fail_oom,
        },
        Problem {
            name: "fail_crash",
            public: false,
            trap: false,
            fail: true,
            cost: None,
            noise: 0.0,
            space_toml: "precision = { type = \"categorical\", choices = [\"fp32\", \"bf16\", \"fp16\"] }\n\
                         lr        = { type = \"float\", low = 1e-4, high = 1.0, log = true }\n\
                         warmup    = { type = \"float\", low = 0.0, high = 1.0 }",
            optimum: 0.10618120229300967,
            f: fail_crash,
        },
        Problem {
            name: "cost_mlp",
            public: false,
            trap: false,
            fail: false,
            cost: Some(cost_mlp_seconds),
            noise: 0.0,
            space_toml: "batch_size = { type = \"int\", low = 16, high = 512, log = true }\n\
                         width      = { type = \"int\", low = 32, high = 1024, log = true }\n\
                         epochs     = { type = \"int\", low = 2, high = 10 }\n\
                         lr         = { type = \"float\", low = 1e-4, high = 1e-1, log = true }",
            optimum: 0.10 + 0.15 * (-10.0f64 / 3.0).exp(),
            f: cost_mlp,
        },
        Problem {
            name: "cost_depth",
            public: false,
            trap: false,
            fail: false,
            cost: Some(cost_depth_seconds),
            noise: 0.0,
            space_toml: "layers  = { type = \"int\", low = 1, high = 8 }\n\
                         width   = { type = \"int\", low = 64, high = 1024, log = true }\n\
                         dropout = { type = \"float\", low = 0.0, high = 0.5 }\n\
                         lr      = { type = \"float\", low = 1e-4, high = 1e-1, log = true }",
            optimum: 0.12,
            f: cost_depth,
        },
        Problem {
            name: "cost_epochs",
            public: false,
            trap: false,
            fail: false,
            cost: Some(cost_epochs_seconds),
            noise: 0.0,
            space_toml: "epochs     = { type = \"int\", low = 1, high = 30 }\n\
                         batch_size = { type = \"int\", low = 32, high = 1024, log = true }\n\
                         lr         = { type = \"float\", low = 1e-4, high = 1e-1, log = true }",
            optimum: 0.08 + 0.5 / 32.0,
            f: cost_epochs,
        },
        Problem {
            name: "cost_wide",
            public: false,
            trap: false,
            fail: false,
            cost: Some(cost_wide_seconds),
            noise: 0.0,
            space_toml: "batch_size   = { type = \"int\", low = 16, high = 512, log = true }\n\
                         width        = { type = \"int\", low = 32, high = 1024, log = true }\n\
                         layers       = { type = \"int\", low = 1, high = 6 }\n\
                         epochs       = { type = \"int\", low = 2, high = 12 }\n\
                         lr           = { type = \"float\", low = 1e-4, high = 1e-1, log = true }\n\
                         weight_decay = { type = \"float\", low = 1e-6, high = 1e-2, log = true }\n\
                         dropout      = { type = \"float\", low = 0.0, high = 0.5 }\n\
                         warmup       = { type = \"float\", low = 0.0, high = 0.3 }",
            optimum: 0.10 + 0.12 * (-3.0f64).exp(),
            f: cost_wide,
        },
    ];
    // Noisy twins of three public problems (`noisy`): noise of about a fifth of the gap between
    // random search's median at 50 trials and the optimum, as a rerun of the same training with
    // another data order gives on a validation loss.
    for (base, name, noise) in [
        ("branin", "branin_noisy", 0.1),
        ("hartmann6", "hartmann6_noisy", 0.2),
        ("train_surrogate", "train_surrogate_noisy", 0.002),
    ] {
        let p = all
            .iter()
            .find(|p| p.name == base)
            .expect("a problem of the list");
        all.push(Problem {
            name,
            public: false,
            noise,
            ..*p
        });
    }
    all
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

    #[test]
    fn trap_optima_are_reached_at_the_winning_value_and_the_early_value_is_broad() {
        let f = |x: f64| ParamValue::Float(x);
        let i = ParamValue::Int;
        let s = |x: &str| ParamValue::Str(x.into());
        // alpha = 10^(-6 + 8 * 0.35), scale 0.2, degree 2.
        let d3 = trap_degree3(&params(&[
            ("degree", i(2)),
            ("alpha", f(10f64.powf(-6.0 + 8.0 * 0.35))),
            ("scale", f(0.2)),
        ]));
        assert!((d3 - 0.15).abs() < 1e-12, "{d3}");
        let d5 = trap_degree5(&params(&[
            ("degree", i(3)),
            ("alpha", f(10f64.powf(-6.0 + 8.0 * 0.35))),
            ("lr", f(10f64.powf(-4.0 + 4.0 * 0.3))),
            ("frac", f(0.25)),
        ]));
        assert!((d5 - 0.16).abs() < 1e-12, "{d5}");
        let cp = trap_cat_pair(&params(&[
            ("criterion", s("entropy")),
            ("bootstrap", ParamValue::Bool(false)),
            ("max_features", f(0.1 + 0.9 * 0.3)),
            ("min_samples_leaf", i(4)),
        ]));
        assert!((cp - 0.17).abs() < 1e-12, "{cp}");
        let c5 = trap_cat5(&params(&[
            ("activation", s("gelu")),
            ("layers", i(3)),
            ("lr", f(10f64.powf(-4.0 + 4.0 * 0.4))),
            ("dropout", f(0.1)),
        ]));
        assert!((c5 - 0.16).abs() < 1e-12, "{c5}");
        // Every trap's optimum is its minimum over a dense sample of the space, and the early
        // value (degree 1, gini with bootstrap, relu) never leaves [0.30, 0.40].
        for p in problems().into_iter().filter(|p| p.trap) {
            let space = p.space().expect("parses");
            for k in 0..4000u64 {
                let u: Vec<f64> = (0..space.len())
                    .map(|j| {
                        ((k * (2 * j as u64 + 3) * 7919 + 13 * j as u64) % 1000) as f64 / 1000.0
                    })
                    .collect();
                let v = (p.f)(&space.from_unit(&u));
                assert!(v >= p.optimum - 1e-12, "{}: {v} below the optimum", p.name);
            }
        }
        for deg in [1i64] {
            for (a, sc) in [(1e-6, 0.0), (1e2, 1.0), (1e-2, 0.5)] {
                let v = trap_degree3(&params(&[
                    ("degree", i(deg)),
                    ("alpha", f(a)),
                    ("scale", f(sc)),
                ]));
                assert!((0.30..0.40).contains(&v), "{v}");
            }
        }
    }

    #[test]
    fn failure_optima_run_and_nothing_that_runs_is_below_them() {
        let f = |x: f64| ParamValue::Float(x);
        let i = ParamValue::Int;
        let dv = fail_diverge(&params(&[
            ("lr", f(0.0075)),
            ("batch_size", i(64)),
            ("weight_decay", f(0.01)),
        ]));
        assert!((dv - 0.08).abs() < 1e-12, "{dv}");
        assert!(
            fail_diverge(&params(&[
                ("lr", f(0.016)),
                ("batch_size", i(64)),
                ("weight_decay", f(0.01)),
            ]))
            .is_nan()
        );
        let oom = fail_oom(&params(&[
            ("batch_size", i(90)),
            ("width", i(728)),
            ("lr", f(10f64.powf(-2.5))),
        ]));
        assert!((oom - 0.1050047939192687).abs() < 1e-12, "{oom}");
        assert!(
            fail_oom(&params(&[
                ("batch_size", i(128)),
                ("width", i(1024)),
                ("lr", f(10f64.powf(-2.5))),
            ]))
            .is_nan()
        );
        let w = 0.41240712079313746;
        let cr = fail_crash(&params(&[
            ("precision", ParamValue::Str("fp16".into())),
            ("lr", f(0.003 * (1.0 + 10.0 * w))),
            ("warmup", f(w)),
        ]));
        assert!((cr - 0.10618120229300967).abs() < 1e-12, "{cr}");
        // Each problem fails on a sizeable part of its space, and nothing that runs is better
        // than the stated optimum.
        for p in problems().into_iter().filter(|p| p.fail) {
            let space = p.space().expect("parses");
            let mut failed = 0;
            let n = 4000u64;
            for k in 0..n {
                let u: Vec<f64> = (0..space.len())
                    .map(|j| {
                        ((k * (2 * j as u64 + 3) * 7919 + 13 * j as u64) % 1000) as f64 / 1000.0
                    })
                    .collect();
                let v = (p.f)(&space.from_unit(&u));
                if v.is_nan() {
                    failed += 1;
                } else {
                    assert!(v >= p.optimum - 1e-12, "{}: {v} below the optimum", p.name);
                }
            }
            let frac = failed as f64 / n as f64;
            assert!((0.1..0.6).contains(&frac), "{}: {frac} fails", p.name);
        }
    }
}
