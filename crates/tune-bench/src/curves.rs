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
//! * A **recorded** problem replays a table of real curves: every epoch's validation loss of a
//!   grid of configurations of the builtin trainer's digits MLP, recorded once with
//!   `data/record_digits_curves.py` and shipped in `data/digits_mlp_curves.csv`. Its space is
//!   exactly the grid (categoricals, so every proposal has a recorded curve), the run's seed picks
//!   one of the recorded trainer seeds, and its optimum is the table's best final loss.
//!
//! What belongs here: the problems and their truth. The harness that runs samplers and pruners
//! on them is `multifidelity`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use anyhow::Context;

use crate::problems::{num, text};
use tune::space::{ParamValue, Params, Space};

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
    /// Real curves, replayed from a recorded table.
    Recorded,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::PowerLaw => "power",
            Shape::Exponential => "exp",
            Shape::Crossing => "crossing",
            Shape::Plateau => "plateau",
            Shape::Diverging => "diverging",
            Shape::Recorded => "real",
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
    /// The builtin trainer's digits MLP: the grid of a recorded [`CurveTable`].
    DigitsMlp,
}

impl Base {
    pub fn name(self) -> &'static str {
        match self {
            Base::Bowl => "bowl",
            Base::Branin => "branin",
            Base::Hartmann6 => "hartmann6",
            Base::DigitsMlp => "digits_mlp",
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
            // A recorded problem's space is its table's grid (`CurveProblem::space`).
            Base::DigitsMlp => "",
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
            Base::DigitsMlp => {
                unreachable!("a recorded problem's curves come from its table, not a surface")
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
    /// The recorded curves of a [`Shape::Recorded`] problem.
    pub table: Option<&'static CurveTable>,
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
    /// The search space in `[space]` syntax.
    pub fn space_table(&self) -> anyhow::Result<toml::Table> {
        if let Some(t) = self.table {
            return Ok(t.space_table());
        }
        let mut text = self.base.space_toml().to_string();
        if self.shape == Shape::Plateau {
            // How long the configuration warms up before it learns (a schedule's warm-up, a
            // small initialisation): the longer, the later it takes off and the lower it ends.
            text.push_str("warmup = { type = \"float\", low = 0.0, high = 1.0 }\n");
        }
        Ok(toml::from_str(&text)?)
    }

    pub fn space(&self) -> anyhow::Result<Space> {
        Ok(Space::from_toml(&self.space_table()?)?)
    }

    /// The best final loss of any configuration.
    pub fn optimum(&self) -> f64 {
        self.table.map_or(OPTIMUM, |t| t.optimum)
    }

    /// The curve of `params` in the run of `seed`: a recorded problem's seed picks one of its
    /// recorded runs, and params off its grid are an error; a simulated problem's curve does
    /// not depend on the seed (its noise does, see `multifidelity`).
    pub fn run_curve(&self, params: &Params, seed: u64) -> anyhow::Result<Curve> {
        match self.table {
            Some(t) => t.curve(params, seed),
            None => Ok(self.curve(params)),
        }
    }

    /// The true, noise-free curve of `params` (a recorded problem: its first recorded run; a
    /// configuration off its grid never learns, every epoch NaN).
    pub fn curve(&self, params: &Params) -> Curve {
        if let Some(t) = self.table {
            return t.curve(params, 0).unwrap_or_else(|_| Curve {
                losses: vec![f64::NAN; self.epochs as usize],
            });
        }
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
                Shape::Recorded => {
                    unreachable!("a recorded problem returned its table's curve above")
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
            table: None,
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

/// Every learning-curve problem: the simulated family and the recorded ones.
pub fn all_problems() -> anyhow::Result<Vec<CurveProblem>> {
    let mut all = curve_problems();
    let t = digits_table()?;
    all.push(CurveProblem {
        name: format!("{}_{}", Shape::Recorded.name(), Base::DigitsMlp.name()),
        shape: Shape::Recorded,
        base: Base::DigitsMlp,
        epochs: t.epochs,
        noise: 0.0,
        table: Some(t),
    });
    Ok(all)
}

/// The shipped table of the digits MLP's real curves (parsed once).
pub fn digits_table() -> anyhow::Result<&'static CurveTable> {
    static TABLE: OnceLock<Result<CurveTable, String>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            CurveTable::parse(include_str!("../data/digits_mlp_curves.csv"))
                .map_err(|e| format!("crates/tune-bench/data/digits_mlp_curves.csv: {e:#}"))
        })
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// A table of recorded learning curves: a complete grid of configurations, each trained with
/// every one of a few seeds, its loss after every epoch (NaN from the epoch it diverged).
///
/// The CSV: `#` lines are comments; a header of the parameter names, `seed`, then `e1`..`eN`;
/// one row per (configuration, seed). A column whose every value is an integer is an integer
/// parameter, one of numbers a float parameter, any other a string parameter.
#[derive(Debug, Clone)]
pub struct CurveTable {
    names: Vec<String>,
    /// Per parameter, its grid values, ascending.
    choices: Vec<Vec<ParamValue>>,
    /// The recorded trainer seeds, ascending.
    seeds: Vec<u64>,
    /// Per grid point (the index of each parameter's value), the curve of each seed.
    runs: BTreeMap<Vec<usize>, Vec<Vec<f64>>>,
    pub epochs: u64,
    /// The lowest final loss of any run.
    pub optimum: f64,
}

impl CurveTable {
    pub fn parse(text: &str) -> anyhow::Result<CurveTable> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
        let (_, header) = lines.next().context("no header line")?;
        let header: Vec<&str> = header.split(',').map(str::trim).collect();
        let s = header
            .iter()
            .position(|h| *h == "seed")
            .context("the header has no `seed` column")?;
        anyhow::ensure!(s > 0, "the header names no parameter before `seed`");
        let epochs = header.len() - s - 1;
        anyhow::ensure!(epochs > 0, "the header names no epoch column after `seed`");
        for (i, h) in header[s + 1..].iter().enumerate() {
            anyhow::ensure!(
                *h == format!("e{}", i + 1),
                "header column {h:?}: expected e{}",
                i + 1
            );
        }
        let names: Vec<String> = header[..s].iter().map(|h| h.to_string()).collect();
        let mut raw: Vec<(usize, Vec<String>, u64, Vec<f64>)> = Vec::new();
        for (n, line) in lines {
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            anyhow::ensure!(
                cells.len() == header.len(),
                "line {}: {} columns, the header has {}",
                n + 1,
                cells.len(),
                header.len()
            );
            let seed: u64 = cells[s].parse().with_context(|| {
                format!("line {}: seed {:?} is not an integer", n + 1, cells[s])
            })?;
            let mut losses = Vec::with_capacity(epochs);
            for c in &cells[s + 1..] {
                let v: f64 = c
                    .parse()
                    .with_context(|| format!("line {}: loss {c:?} is not a number", n + 1))?;
                losses.push(v);
            }
            raw.push((
                n + 1,
                cells[..s].iter().map(|c| c.to_string()).collect(),
                seed,
                losses,
            ));
        }
        anyhow::ensure!(!raw.is_empty(), "no rows");
        // Each column's type and grid values.
        let mut choices: Vec<Vec<ParamValue>> = Vec::new();
        for c in 0..names.len() {
            let col: Vec<&str> = raw.iter().map(|r| r.1[c].as_str()).collect();
            let mut values: Vec<ParamValue> = if col.iter().all(|v| v.parse::<i64>().is_ok()) {
                col.iter()
                    .filter_map(|v| v.parse().ok().map(ParamValue::Int))
                    .collect()
            } else if col
                .iter()
                .all(|v| v.parse::<f64>().is_ok_and(f64::is_finite))
            {
                col.iter()
                    .filter_map(|v| v.parse().ok().map(ParamValue::Float))
                    .collect()
            } else {
                col.iter().map(|v| ParamValue::Str(v.to_string())).collect()
            };
            values.sort_by(cmp_value);
            values.dedup_by(|a, b| a.same(b));
            choices.push(values);
        }
        let mut seeds: Vec<u64> = raw.iter().map(|r| r.2).collect();
        seeds.sort_unstable();
        seeds.dedup();
        let mut table = CurveTable {
            names,
            choices,
            seeds,
            runs: BTreeMap::new(),
            epochs: epochs as u64,
            optimum: f64::INFINITY,
        };
        let mut filled: BTreeMap<Vec<usize>, Vec<Option<Vec<f64>>>> = BTreeMap::new();
        for (line, cells, seed, losses) in raw {
            let key: Vec<usize> = cells
                .iter()
                .enumerate()
                .map(|(c, v)| {
                    let v = parse_like(&table.choices[c][0], v);
                    table.choices[c]
                        .iter()
                        .position(|x| x.same(&v))
                        .expect("every value of the column is one of its choices")
                })
                .collect();
            let si = table
                .seeds
                .binary_search(&seed)
                .expect("every seed of the rows is listed");
            let slot = filled
                .entry(key)
                .or_insert_with(|| vec![None; table.seeds.len()]);
            anyhow::ensure!(
                slot[si].is_none(),
                "line {line}: the configuration and seed {seed} are recorded twice"
            );
            slot[si] = Some(losses);
        }
        let points: usize = table.choices.iter().map(Vec::len).product();
        for key in grid(&table.choices) {
            let runs = filled
                .remove(&key)
                .map(|r| r.into_iter().collect::<Option<Vec<_>>>());
            let Some(Some(runs)) = runs else {
                anyhow::bail!(
                    "the grid point {} is missing (or misses a seed of {:?}); the grid has {points} points",
                    table.describe(&key),
                    table.seeds
                );
            };
            for r in &runs {
                if let Some(last) = r.last().filter(|v| v.is_finite()) {
                    table.optimum = table.optimum.min(*last);
                }
            }
            table.runs.insert(key, runs);
        }
        anyhow::ensure!(table.optimum.is_finite(), "no run ends at a finite loss");
        Ok(table)
    }

    fn describe(&self, key: &[usize]) -> String {
        self.names
            .iter()
            .zip(key)
            .enumerate()
            .map(|(c, (n, &i))| format!("{n}={}", show(&self.choices[c][i])))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The number of grid points.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The recorded trainer seeds.
    pub fn seeds(&self) -> &[u64] {
        &self.seeds
    }

    /// The grid as a `[space]` table: one categorical per parameter.
    pub fn space_table(&self) -> toml::Table {
        let mut t = toml::Table::new();
        for (n, values) in self.names.iter().zip(&self.choices) {
            let mut p = toml::Table::new();
            p.insert("type".into(), toml::Value::String("categorical".into()));
            let choices = values
                .iter()
                .map(|v| match v {
                    ParamValue::Int(i) => toml::Value::Integer(*i),
                    ParamValue::Float(f) => toml::Value::Float(*f),
                    ParamValue::Bool(b) => toml::Value::Boolean(*b),
                    ParamValue::Str(s) => toml::Value::String(s.clone()),
                })
                .collect();
            p.insert("choices".into(), toml::Value::Array(choices));
            t.insert(n.clone(), toml::Value::Table(p));
        }
        t
    }

    /// The curve of `params` in the recorded run that `seed` picks (`seed` modulo the number
    /// of recorded seeds).
    pub fn curve(&self, params: &Params, seed: u64) -> anyhow::Result<Curve> {
        let key = self
            .names
            .iter()
            .zip(&self.choices)
            .map(|(n, values)| {
                let v = params
                    .get(n)
                    .with_context(|| format!("params lack `{n}`"))?;
                values.iter().position(|x| x.same(v)).with_context(|| {
                    format!(
                        "`{n}` = {} is not on the recorded grid ({})",
                        show(v),
                        values.iter().map(show).collect::<Vec<_>>().join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<Vec<usize>>>()?;
        let runs = self
            .runs
            .get(&key)
            .expect("parse checked that every grid point is recorded");
        let i = (seed % runs.len() as u64) as usize;
        Ok(Curve {
            losses: runs[i].clone(),
        })
    }
}

/// Every grid point, as indices into each parameter's values.
fn grid(choices: &[Vec<ParamValue>]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new()];
    for values in choices {
        out = out
            .into_iter()
            .flat_map(|k| {
                (0..values.len()).map(move |i| {
                    let mut k = k.clone();
                    k.push(i);
                    k
                })
            })
            .collect();
    }
    out
}

fn parse_like(like: &ParamValue, v: &str) -> ParamValue {
    match like {
        ParamValue::Int(_) => v.parse().map_or(ParamValue::Str(v.into()), ParamValue::Int),
        ParamValue::Float(_) => v
            .parse()
            .map_or(ParamValue::Str(v.into()), ParamValue::Float),
        _ => ParamValue::Str(v.into()),
    }
}

fn cmp_value(a: &ParamValue, b: &ParamValue) -> std::cmp::Ordering {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        _ => show(a).cmp(&show(b)),
    }
}

fn show(v: &ParamValue) -> String {
    match v {
        ParamValue::Int(i) => i.to_string(),
        ParamValue::Float(f) => f.to_string(),
        ParamValue::Bool(b) => b.to_string(),
        ParamValue::Str(s) => s.clone(),
    }
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
            table: None,
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

    #[test]
    fn the_shipped_digits_table_loads_and_records_every_grid_point_for_every_seed() {
        let t = digits_table().unwrap();
        let space = Space::from_toml(&t.space_table()).unwrap();
        let points: usize = t.choices.iter().map(Vec::len).product();
        assert!(points >= 100, "{points} grid points");
        assert_eq!(t.len(), points);
        assert!(t.seeds().len() >= 2, "{:?}", t.seeds());
        assert!((20..=27).contains(&t.epochs), "{}", t.epochs);
        let mut best = f64::INFINITY;
        for key in grid(&t.choices) {
            let params: Params = t
                .names
                .iter()
                .zip(&key)
                .enumerate()
                .map(|(c, (n, &i))| (n.clone(), t.choices[c][i].clone()))
                .collect();
            space.validate(&params).unwrap();
            for s in 0..t.seeds().len() as u64 {
                let c = t.curve(&params, s).unwrap();
                assert_eq!(c.losses.len() as u64, t.epochs);
                // A run is finite until it diverged, then NaN to the end.
                let first_nan = c.losses.iter().position(|v| v.is_nan());
                let finite = first_nan.unwrap_or(c.losses.len());
                assert!(c.losses[..finite].iter().all(|v| v.is_finite() && *v > 0.0));
                assert!(c.losses[finite..].iter().all(|v| v.is_nan()));
                if c.last().is_finite() {
                    best = best.min(c.last());
                }
            }
        }
        assert_eq!(best, t.optimum);
        // Real learning: the best run ends far below chance and below where it started.
        assert!(t.optimum < 0.5 && t.optimum > 0.0, "{}", t.optimum);
    }

    #[test]
    fn the_recorded_problem_replays_its_table_and_its_seed_picks_the_run() {
        let p = all_problems()
            .unwrap()
            .into_iter()
            .find(|p| p.shape == Shape::Recorded)
            .unwrap();
        assert_eq!(p.name, "real_digits_mlp");
        let t = p.table.unwrap();
        assert_eq!(p.optimum(), t.optimum);
        let params = sample(&p, 1, 4).remove(0);
        let runs: Vec<Curve> = (0..t.seeds().len() as u64)
            .map(|s| p.run_curve(&params, s).unwrap())
            .collect();
        // Seeds wrap around the recorded runs; different trainer seeds give different curves.
        assert_eq!(
            p.run_curve(&params, t.seeds().len() as u64).unwrap(),
            runs[0]
        );
        assert_ne!(runs[0], runs[1]);
        assert_eq!(p.curve(&params), runs[0]);
        let mut off = params.clone();
        off.insert("lr".into(), ParamValue::Float(0.005));
        let e = p.run_curve(&off, 0).unwrap_err().to_string();
        assert!(
            e.contains("`lr` = 0.005 is not on the recorded grid"),
            "{e}"
        );
    }

    #[test]
    fn a_table_missing_a_grid_point_or_with_a_bad_cell_is_refused_naming_it() {
        let ok = "# c\nlr,opt,seed,e1,e2\n0.1,sgd,0,1.0,0.5\n0.1,adam,0,1.0,0.4\n0.01,sgd,0,1.1,0.6\n0.01,adam,0,1.2,nan\n";
        let t = CurveTable::parse(ok).unwrap();
        assert_eq!((t.len(), t.epochs, t.optimum), (4, 2, 0.4));
        let missing = ok.replace("0.01,adam,0,1.2,nan\n", "");
        let e = format!("{:#}", CurveTable::parse(&missing).unwrap_err());
        assert!(
            e.contains("the grid point lr=0.01 opt=adam is missing"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            CurveTable::parse(&ok.replace("1.1,0.6", "1.1,x")).unwrap_err()
        );
        assert!(e.contains("line 5: loss \"x\" is not a number"), "{e}");
        let twice = format!("{ok}0.1,sgd,0,1.0,0.5\n");
        let e = format!("{:#}", CurveTable::parse(&twice).unwrap_err());
        assert!(
            e.contains("line 7: the configuration and seed 0 are recorded twice"),
            "{e}"
        );
        let e = format!("{:#}", CurveTable::parse("lr,e1\n0.1,1\n").unwrap_err());
        assert!(e.contains("no `seed` column"), "{e}");
    }
}
