//! fANOVA (Hutter, Hoos and Leyton-Brown, ICML 2014) on a random forest, as Optuna's
//! `FanovaImportanceEvaluator` computes it with its defaults, so that the two rank a study's
//! parameters alike:
//!
//! - the parameters evaluated are those every observation holds (Optuna's intersection search
//!   space: a conditional parameter is left out); a parameter with one possible value gets 0;
//! - numbers enter as they are (no log, no step transform) over the space's bounds, a
//!   categorical parameter as one column per choice (one-hot, bounds 0..1);
//! - a random forest of CART regression trees, scikit-learn's `RandomForestRegressor` as Optuna
//!   sets it (64 trees, depth at most 64, every feature tried at every split, a bootstrap
//!   sample per tree, squared error, thresholds halfway between neighbouring values);
//! - per tree, the variance of the marginal prediction of a parameter's columns over the
//!   space (uniform measure, each leaf a box), divided by the variance of the tree's
//!   prediction; the importance is the mean of that fraction over the trees with a variance.
//!
//! The forest is not scikit-learn's (its random numbers differ), so the numbers agree with
//! Optuna's statistically, not digit for digit. Deterministic for a given seed; the trees are
//! grown on all the cores.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Importance, Observation};
use crate::space::{Param, ParamKind, Space};

/// fANOVA with Optuna's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fanova {
    /// Trees in the forest (Optuna's `n_trees`).
    pub n_trees: usize,
    /// The deepest a tree grows (Optuna's `max_depth`).
    pub max_depth: usize,
    /// A node with fewer distinct samples is a leaf (scikit-learn's `min_samples_split`).
    pub min_samples_split: usize,
    /// The fewest distinct samples on either side of a split (`min_samples_leaf`).
    pub min_samples_leaf: usize,
    /// The forest's seed.
    pub seed: u64,
}

impl Default for Fanova {
    fn default() -> Self {
        Fanova {
            n_trees: 64,
            max_depth: 64,
            min_samples_split: 2,
            min_samples_leaf: 1,
            seed: 0,
        }
    }
}

impl Importance for Fanova {
    fn name(&self) -> &'static str {
        "fanova"
    }

    fn raw(&self, space: &Space, observations: &[Observation]) -> Vec<(String, f64)> {
        let params: Vec<&Param> = space
            .params()
            .iter()
            .filter(|p| {
                !observations.is_empty()
                    && observations.iter().all(|o| o.params.contains_key(&p.name))
            })
            .collect();
        let (single, varying): (Vec<&Param>, Vec<&Param>) =
            params.iter().copied().partition(|p| is_single(p));
        let zeros = |ps: &[&Param]| ps.iter().map(|p| (p.name.clone(), 0.0)).collect::<Vec<_>>();
        if varying.is_empty() || observations.len() <= 1 {
            return zeros(&params);
        }
        let data = Encoded::new(&varying, observations);
        let per_tree = self.per_tree_fractions(&data);
        let mut out: Vec<(String, f64)> = varying
            .iter()
            .enumerate()
            .map(|(g, p)| {
                let fr: Vec<f64> = per_tree
                    .iter()
                    .filter_map(|t| t.as_ref().map(|v| v[g]))
                    .collect();
                let mean = if fr.is_empty() {
                    0.0
                } else {
                    fr.iter().sum::<f64>() / fr.len() as f64
                };
                (p.name.clone(), mean)
            })
            .collect();
        out.extend(zeros(&single));
        out
    }
}

impl Fanova {
    /// Per tree, each group's share of the tree's variance (`None` for a tree whose prediction
    /// does not vary). Trees are grown on all the cores, each from its own seed.
    fn per_tree_fractions(&self, data: &Encoded) -> Vec<Option<Vec<f64>>> {
        let n_threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, self.n_trees.max(1));
        let mut out: Vec<Option<Vec<f64>>> = vec![None; self.n_trees];
        let chunk = self.n_trees.div_ceil(n_threads).max(1);
        std::thread::scope(|s| {
            for (c, slot) in out.chunks_mut(chunk).enumerate() {
                s.spawn(move || {
                    for (k, r) in slot.iter_mut().enumerate() {
                        let t = c * chunk + k;
                        let mut rng = ChaCha8Rng::seed_from_u64(self.seed.wrapping_add(t as u64));
                        let tree = Tree::grow(data, self, &mut rng);
                        *r = tree.fractions(data);
                    }
                });
            }
        });
        out
    }
}

/// A parameter with one possible value carries no information (Optuna's `single()`).
fn is_single(p: &Param) -> bool {
    match &p.kind {
        ParamKind::Float { low, high, .. } => low == high,
        ParamKind::Int {
            low, high, step, ..
        } => high - low < *step,
        ParamKind::Categorical { choices } => choices.len() <= 1,
    }
}

/// The observations as a numeric matrix (Optuna's `_SearchSpaceTransform` without log or step
/// transforms): one column per number, one per categorical choice.
struct Encoded {
    /// Column-major, `cols` columns of `n` rows: a split search reads one column at a time.
    x: Vec<f64>,
    y: Vec<f64>,
    n: usize,
    cols: usize,
    /// Each column's bounds (widened to the values seen, should a value lie outside).
    bounds: Vec<(f64, f64)>,
    /// Each parameter's columns.
    groups: Vec<Vec<usize>>,
    /// Column-major, each column's rows in ascending order of value (ties by row): sorted once
    /// for the whole forest, so that no node of any tree sorts.
    by_value: Vec<u32>,
}

impl Encoded {
    fn new(params: &[&Param], observations: &[Observation]) -> Encoded {
        let mut bounds = Vec::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for p in params {
            let start = bounds.len();
            match &p.kind {
                ParamKind::Float { low, high, .. } => bounds.push((*low, *high)),
                ParamKind::Int { low, high, .. } => bounds.push((*low as f64, *high as f64)),
                ParamKind::Categorical { choices } => {
                    bounds.extend(std::iter::repeat_n((0.0, 1.0), choices.len()))
                }
            }
            groups.push((start..bounds.len()).collect());
        }
        let cols = bounds.len();
        let n = observations.len();
        let mut x = vec![0.0; n * cols];
        for (i, o) in observations.iter().enumerate() {
            for (p, g) in params.iter().zip(&groups) {
                let Some(v) = o.params.get(&p.name) else {
                    continue;
                };
                let internal = p.to_internal(v);
                if p.is_categorical() {
                    x[(g[0] + internal as usize) * n + i] = 1.0;
                } else {
                    let c = g[0];
                    x[c * n + i] = internal;
                    let b = &mut bounds[c];
                    if internal.is_finite() {
                        b.0 = b.0.min(internal);
                        b.1 = b.1.max(internal);
                    }
                }
            }
        }
        Encoded::from_columns(
            x,
            observations.iter().map(|o| o.loss).collect(),
            bounds,
            groups,
        )
    }

    /// The matrix from its columns (column-major `x`), its rows presorted.
    fn from_columns(
        x: Vec<f64>,
        y: Vec<f64>,
        bounds: Vec<(f64, f64)>,
        groups: Vec<Vec<usize>>,
    ) -> Encoded {
        let (n, cols) = (y.len(), bounds.len());
        // Row numbers are u32 to halve the memory every tree's index moves; a study of more
        // than 4 billion trials does not fit in memory anyway.
        let n32 = u32::try_from(n).expect("fewer than 2^32 observations");
        let mut by_value = Vec::with_capacity(n * cols);
        for c in 0..cols {
            let col = &x[c * n..(c + 1) * n];
            let start = by_value.len();
            by_value.extend(0..n32);
            by_value[start..].sort_by(|&a, &b| col[a as usize].total_cmp(&col[b as usize]));
        }
        Encoded {
            x,
            y,
            n,
            cols,
            bounds,
            groups,
            by_value,
        }
    }

    fn column(&self, col: usize) -> &[f64] {
        &self.x[col * self.n..(col + 1) * self.n]
    }
}

/// scikit-learn's `FEATURE_THRESHOLD`: values closer than this are not split apart.
const FEATURE_THRESHOLD: f64 = 1e-7;

#[derive(Debug, Clone, Copy)]
struct Node {
    /// The split column; `None` for a leaf.
    feature: Option<usize>,
    threshold: f64,
    left: usize,
    right: usize,
    value: f64,
}

struct Tree {
    nodes: Vec<Node>,
}

/// A node still to grow: its range of every column's segment, its depth, and its parent's
/// child slot (node, is left).
struct Pending {
    start: usize,
    end: usize,
    depth: usize,
    parent: Option<(usize, bool)>,
}

/// A node's best split: on column `col` at `threshold`, the first `pos` of its rows in the
/// column's order going left.
#[derive(Debug, Clone, Copy)]
struct Split {
    proxy: f64,
    col: usize,
    threshold: f64,
    pos: usize,
}

/// One tree's working state: the bootstrap sample and, per column, its distinct rows in order
/// of value. A node owns the range `start..end` of every column's segment (the same rows in
/// each, each segment in its column's order); a split partitions every segment's range
/// stably, so the children's ranges stay sorted without sorting again.
struct Grower<'a> {
    data: &'a Encoded,
    params: &'a Fanova,
    /// How often each row was drawn, and that times its loss.
    w: Vec<f64>,
    wy: Vec<f64>,
    /// Distinct rows drawn, in row order: the root's rows; their number is the length of
    /// each column's segment of `idx`.
    root: Vec<u32>,
    m: usize,
    idx: Vec<u32>,
    goes_left: Vec<bool>,
    right: Vec<u32>,
}

impl<'a> Grower<'a> {
    fn new(data: &'a Encoded, params: &'a Fanova, rng: &mut ChaCha8Rng) -> Grower<'a> {
        let n = data.n;
        let mut w = vec![0.0f64; n];
        for _ in 0..n {
            w[rng.random_range(0..n)] += 1.0;
        }
        let wy: Vec<f64> = w.iter().zip(&data.y).map(|(w, y)| w * y).collect();
        let root: Vec<u32> = (0..n as u32).filter(|&r| w[r as usize] > 0.0).collect();
        let m = root.len();
        let idx: Vec<u32> = data
            .by_value
            .iter()
            .copied()
            .filter(|&r| w[r as usize] > 0.0)
            .collect();
        Grower {
            data,
            params,
            w,
            wy,
            root,
            m,
            idx,
            goes_left: vec![false; n],
            right: Vec::with_capacity(m),
        }
    }

    /// The rows of `start..end` in column `col`'s order.
    fn segment(&self, col: usize, start: usize, end: usize) -> &[u32] {
        &self.idx[col * self.m + start..col * self.m + end]
    }

    /// The weight, weighted loss sum, mean and impurity (weighted variance) of a node's rows.
    fn stats(&self, rows: &[u32]) -> (f64, f64, f64, f64) {
        let (sw, swy) = rows.iter().fold((0.0, 0.0), |(a, b), &i| {
            (a + self.w[i as usize], b + self.wy[i as usize])
        });
        let mean = swy / sw;
        let impurity = rows
            .iter()
            .map(|&i| self.w[i as usize] * (self.data.y[i as usize] - mean).powi(2))
            .sum::<f64>()
            / sw;
        (sw, swy, mean, impurity)
    }

    /// The largest drop in weighted squared error over the columns in `order` (ties go to the
    /// first found, as in scikit-learn); thresholds halfway between neighbouring values.
    fn best_split(
        &self,
        order: &[usize],
        start: usize,
        end: usize,
        sw: f64,
        swy: f64,
    ) -> Option<Split> {
        let min_leaf = self.params.min_samples_leaf;
        let len = end - start;
        let mut best: Option<Split> = None;
        for &c in order {
            let rows = self.segment(c, start, end);
            let x = self.data.column(c);
            if x[rows[len - 1] as usize] <= x[rows[0] as usize] + FEATURE_THRESHOLD {
                continue;
            }
            let (mut lw, mut lwy) = (0.0, 0.0);
            for pos in 1..len {
                let i = rows[pos - 1] as usize;
                lw += self.w[i];
                lwy += self.wy[i];
                let (a, b) = (x[i], x[rows[pos] as usize]);
                if b <= a + FEATURE_THRESHOLD || pos < min_leaf || len - pos < min_leaf {
                    continue;
                }
                let (rw, rwy) = (sw - lw, swy - lwy);
                let proxy = lwy * lwy / lw + rwy * rwy / rw;
                if best.is_none_or(|s| proxy > s.proxy) {
                    let mut threshold = a / 2.0 + b / 2.0;
                    if threshold == b || !threshold.is_finite() {
                        threshold = a;
                    }
                    best = Some(Split {
                        proxy,
                        col: c,
                        threshold,
                        pos,
                    });
                }
            }
        }
        best
    }

    /// Splits `start..end` at `split`: the left rows first in every column's segment, each
    /// side still in the column's order (a stable partition through one buffer).
    fn partition(&mut self, split: Split, start: usize, end: usize) {
        let m = self.m;
        let split_rows = &self.idx[split.col * m + start..split.col * m + end];
        for (k, &r) in split_rows.iter().enumerate() {
            self.goes_left[r as usize] = k < split.pos;
        }
        self.right.resize(end - start, 0);
        for c in (0..self.data.cols).filter(|&c| c != split.col) {
            let rows = &mut self.idx[c * m + start..c * m + end];
            // Branch-free: every row is written to both sides and only its side's cursor
            // moves (a row's side is a coin toss to the branch predictor).
            let (mut l, mut r) = (0, 0);
            for k in 0..rows.len() {
                let row = rows[k];
                let left = usize::from(self.goes_left[row as usize]);
                rows[l] = row;
                self.right[r] = row;
                l += left;
                r += 1 - left;
            }
            rows[l..].copy_from_slice(&self.right[..r]);
        }
    }
}

impl Tree {
    /// A CART regression tree on a bootstrap sample (each row weighted by how often it was
    /// drawn), grown as scikit-learn's best splitter grows it, depth first, left child first.
    fn grow(data: &Encoded, params: &Fanova, rng: &mut ChaCha8Rng) -> Tree {
        let mut g = Grower::new(data, params, rng);
        let mut tree = Tree { nodes: Vec::new() };
        let mut order: Vec<usize> = (0..data.cols).collect();
        let mut stack = vec![Pending {
            start: 0,
            end: g.m,
            depth: 0,
            parent: None,
        }];
        while let Some(Pending {
            start,
            end,
            depth,
            parent,
        }) = stack.pop()
        {
            // The rows in the order of the parent's split column, the order the trees were first
            // grown in: a sum taken in another order can differ in its last bit and turn a
            // tie between two splits (two columns cutting a small node alike) the other way.
            let rows = match parent.and_then(|(p, _)| tree.nodes[p].feature) {
                Some(c) => g.segment(c, start, end),
                None => &g.root,
            };
            let (sw, swy, mean, impurity) = g.stats(rows);
            let id = tree.nodes.len();
            tree.nodes.push(Node {
                feature: None,
                threshold: 0.0,
                left: 0,
                right: 0,
                value: mean,
            });
            if let Some((p, is_left)) = parent {
                if is_left {
                    tree.nodes[p].left = id;
                } else {
                    tree.nodes[p].right = id;
                }
            }
            let len = end - start;
            if depth >= params.max_depth
                || len < params.min_samples_split
                || len < 2 * params.min_samples_leaf
                || impurity <= f64::EPSILON
            {
                continue;
            }
            // Features tried in a random order, so that ties between them go to a random one.
            for k in (1..order.len()).rev() {
                order.swap(k, rng.random_range(0..=k));
            }
            let Some(split) = g.best_split(&order, start, end, sw, swy) else {
                continue;
            };
            tree.nodes[id].feature = Some(split.col);
            tree.nodes[id].threshold = split.threshold;
            g.partition(split, start, end);
            let mid = start + split.pos;
            stack.push(Pending {
                start: mid,
                end,
                depth: depth + 1,
                parent: Some((id, false)),
            });
            stack.push(Pending {
                start,
                end: mid,
                depth: depth + 1,
                parent: Some((id, true)),
            });
        }
        tree
    }

    /// Each group's marginal variance over the tree's variance; `None` when the tree's
    /// prediction is constant over the space.
    fn fractions(&self, data: &Encoded) -> Option<Vec<f64>> {
        // Every leaf's box, by walking down from the root (a child's id is above its
        // parent's): one flat buffer, `cols` bounds a node, so the walk allocates once.
        let cols = data.cols;
        let mut node_boxes = vec![(0.0, 0.0); self.nodes.len() * cols];
        node_boxes[..cols].copy_from_slice(&data.bounds);
        let mut leaves: Vec<usize> = Vec::new();
        for (id, node) in self.nodes.iter().enumerate() {
            let Some(c) = node.feature else {
                leaves.push(id);
                continue;
            };
            let parent = id * cols..(id + 1) * cols;
            node_boxes.copy_within(parent.clone(), node.left * cols);
            node_boxes.copy_within(parent, node.right * cols);
            node_boxes[node.left * cols + c].1 = node.threshold;
            node_boxes[node.right * cols + c].0 = node.threshold;
        }
        let boxes: Vec<(f64, f64)> = leaves
            .iter()
            .flat_map(|&l| node_boxes[l * cols..(l + 1) * cols].iter().copied())
            .collect();
        let vols: Vec<f64> = boxes
            .chunks_exact(cols)
            .map(|b| b.iter().map(|(lo, hi)| hi - lo).product::<f64>())
            .collect();
        let values: Vec<f64> = leaves.iter().map(|&l| self.nodes[l].value).collect();
        let total = weighted_variance(&values, &vols);
        if total.is_nan() || total <= 0.0 {
            return None;
        }
        // Each column's split points in this tree.
        let mut splits: Vec<Vec<f64>> = vec![Vec::new(); data.cols];
        for n in &self.nodes {
            if let Some(c) = n.feature {
                splits[c].push(n.threshold);
            }
        }
        let edges: Vec<Vec<f64>> = splits
            .into_iter()
            .enumerate()
            .map(|(c, mut s)| {
                s.sort_by(f64::total_cmp);
                s.dedup();
                let (lo, hi) = data.bounds[c];
                let mut e = Vec::with_capacity(s.len() + 2);
                e.push(lo);
                e.extend(s);
                e.push(hi);
                e
            })
            .collect();
        let fractions = data
            .groups
            .iter()
            .map(|g| {
                let v = marginal_variance(g, &edges, &boxes, &vols, &values);
                v.max(0.0) / total
            })
            .collect();
        Some(fractions)
    }
}

/// The variance, over the uniform measure on the space, of the tree's prediction averaged over
/// every column but `group`'s (Optuna's `get_marginal_variance`): the columns' split points cut
/// them into cells; a cell's value is the average of the leaves whose box holds it, each
/// weighted by its volume in the other columns; a cell weighs its volume.
fn marginal_variance(
    group: &[usize],
    edges: &[Vec<f64>],
    // Every leaf's box, `edges.len()` bounds a leaf.
    boxes: &[(f64, f64)],
    vols: &[f64],
    values: &[f64],
) -> f64 {
    let dims: Vec<usize> = group.iter().map(|&c| edges[c].len() - 1).collect();
    let n_cells: usize = dims.iter().product();
    let mut num = vec![0.0f64; n_cells + 1];
    let mut den = vec![0.0f64; n_cells + 1];
    // The cell index range [a, b) a leaf covers in column c.
    let range = |c: usize, (lo, hi): (f64, f64)| {
        let e = &edges[c];
        let a = e.partition_point(|&x| x < lo).min(e.len() - 1);
        let b = e.partition_point(|&x| x < hi).clamp(a + 1, e.len() - 1);
        (a, b)
    };
    let cols = edges.len();
    for (k, b) in boxes.chunks_exact(cols).enumerate() {
        let width: f64 = group.iter().map(|&c| b[c].1 - b[c].0).product();
        if width <= 0.0 {
            continue;
        }
        let m = vols[k] / width;
        if group.len() == 1 {
            // One column: add over a range with a difference array.
            let (a, z) = range(group[0], b[group[0]]);
            num[a] += values[k] * m;
            num[z] -= values[k] * m;
            den[a] += m;
            den[z] -= m;
        } else {
            let ranges: Vec<(usize, usize)> = group.iter().map(|&c| range(c, b[c])).collect();
            let mut idx: Vec<usize> = ranges.iter().map(|r| r.0).collect();
            'cells: loop {
                let mut cell = 0;
                for (d, &i) in idx.iter().enumerate() {
                    cell = cell * dims[d] + i;
                }
                num[cell] += values[k] * m;
                den[cell] += m;
                // The next cell of the box, last column fastest.
                let mut d = idx.len();
                loop {
                    if d == 0 {
                        break 'cells;
                    }
                    d -= 1;
                    idx[d] += 1;
                    if idx[d] < ranges[d].1 {
                        break;
                    }
                    idx[d] = ranges[d].0;
                }
            }
        }
    }
    if group.len() == 1 {
        for i in 1..n_cells {
            num[i] += num[i - 1];
            den[i] += den[i - 1];
        }
    }
    let mut cell_values = Vec::with_capacity(n_cells);
    let mut cell_weights = Vec::with_capacity(n_cells);
    for cell in 0..n_cells {
        if den[cell] <= 0.0 {
            continue;
        }
        let mut size = 1.0;
        let mut rest = cell;
        for d in (0..dims.len()).rev() {
            let i = rest % dims[d];
            rest /= dims[d];
            let e = &edges[group[d]];
            size *= e[i + 1] - e[i];
        }
        cell_values.push(num[cell] / den[cell]);
        cell_weights.push(den[cell] * size);
    }
    weighted_variance(&cell_values, &cell_weights)
}

/// numpy's `average((v - average(v, w))**2, w)`; NaN when the weights sum to 0.
fn weighted_variance(values: &[f64], weights: &[f64]) -> f64 {
    let sw: f64 = weights.iter().sum();
    let mean = values.iter().zip(weights).map(|(v, w)| v * w).sum::<f64>() / sw;
    values
        .iter()
        .zip(weights)
        .map(|(v, w)| w * (v - mean).powi(2))
        .sum::<f64>()
        / sw
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::{ParamValue, Params};

    fn float(name: &str) -> Param {
        Param {
            name: name.into(),
            kind: ParamKind::Float {
                low: 0.0,
                high: 1.0,
                log: false,
                step: None,
            },
            when: Vec::new(),
        }
    }

    fn obs(f: impl Fn(f64, f64, usize) -> f64, n: usize) -> Vec<Observation> {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        (0..n)
            .map(|_| {
                let (x, y): (f64, f64) = (rng.random(), rng.random());
                let c = rng.random_range(0..3usize);
                let params = Params::from([
                    ("x".to_string(), ParamValue::Float(x)),
                    ("y".to_string(), ParamValue::Float(y)),
                    ("c".to_string(), ParamValue::Str(["a", "b", "z"][c].into())),
                ]);
                Observation {
                    params,
                    loss: f(x, y, c),
                }
            })
            .collect()
    }

    fn space() -> Space {
        let c = Param {
            name: "c".into(),
            kind: ParamKind::Categorical {
                choices: ["a", "b", "z"]
                    .iter()
                    .map(|s| ParamValue::Str((*s).into()))
                    .collect(),
            },
            when: Vec::new(),
        };
        Space::new(vec![float("x"), float("y"), c]).unwrap()
    }

    fn share(imp: &[(String, f64)], name: &str) -> f64 {
        imp.iter().find(|(k, _)| k == name).unwrap().1
    }

    /// The forest's first grower (sorting every node's rows for every column), kept to pin
    /// that the presorted one grows the same trees.
    fn grow_by_sorting(data: &Encoded, params: &Fanova, rng: &mut ChaCha8Rng) -> Tree {
        let at = |row: usize, col: usize| data.column(col)[row];
        let mut w = vec![0.0f64; data.n];
        for _ in 0..data.n {
            w[rng.random_range(0..data.n)] += 1.0;
        }
        let rows: Vec<usize> = (0..data.n).filter(|&i| w[i] > 0.0).collect();
        let mut tree = Tree { nodes: Vec::new() };
        let mut order: Vec<usize> = (0..data.cols).collect();
        type Pending = (Vec<usize>, usize, Option<(usize, bool)>);
        let mut stack: Vec<Pending> = vec![(rows, 0, None)];
        let mut sorted: Vec<usize> = Vec::new();
        while let Some((rows, depth, parent)) = stack.pop() {
            let (sw, swy) = rows
                .iter()
                .fold((0.0, 0.0), |(a, b), &i| (a + w[i], b + w[i] * data.y[i]));
            let mean = swy / sw;
            let impurity = rows
                .iter()
                .map(|&i| w[i] * (data.y[i] - mean).powi(2))
                .sum::<f64>()
                / sw;
            let id = tree.nodes.len();
            tree.nodes.push(Node {
                feature: None,
                threshold: 0.0,
                left: 0,
                right: 0,
                value: mean,
            });
            if let Some((p, is_left)) = parent {
                if is_left {
                    tree.nodes[p].left = id;
                } else {
                    tree.nodes[p].right = id;
                }
            }
            if depth >= params.max_depth
                || rows.len() < params.min_samples_split
                || rows.len() < 2 * params.min_samples_leaf
                || impurity <= f64::EPSILON
            {
                continue;
            }
            for k in (1..order.len()).rev() {
                order.swap(k, rng.random_range(0..=k));
            }
            let mut best: Option<(f64, usize, f64, usize)> = None;
            let mut best_sorted: Vec<usize> = Vec::new();
            for &c in &order {
                sorted.clear();
                sorted.extend_from_slice(&rows);
                sorted.sort_by(|&a, &b| at(a, c).total_cmp(&at(b, c)));
                if at(sorted[sorted.len() - 1], c) <= at(sorted[0], c) + FEATURE_THRESHOLD {
                    continue;
                }
                let (mut lw, mut lwy) = (0.0, 0.0);
                let mut found = false;
                for pos in 1..sorted.len() {
                    let i = sorted[pos - 1];
                    lw += w[i];
                    lwy += w[i] * data.y[i];
                    let (a, b) = (at(i, c), at(sorted[pos], c));
                    if b <= a + FEATURE_THRESHOLD
                        || pos < params.min_samples_leaf
                        || sorted.len() - pos < params.min_samples_leaf
                    {
                        continue;
                    }
                    let (rw, rwy) = (sw - lw, swy - lwy);
                    let proxy = lwy * lwy / lw + rwy * rwy / rw;
                    if best.is_none_or(|(bp, ..)| proxy > bp) {
                        let mut thr = a / 2.0 + b / 2.0;
                        if thr == b || !thr.is_finite() {
                            thr = a;
                        }
                        best = Some((proxy, c, thr, pos));
                        found = true;
                    }
                }
                if found {
                    best_sorted.clone_from(&sorted);
                }
            }
            let Some((_, c, thr, pos)) = best else {
                continue;
            };
            tree.nodes[id].feature = Some(c);
            tree.nodes[id].threshold = thr;
            stack.push((best_sorted[pos..].to_vec(), depth + 1, Some((id, false))));
            stack.push((best_sorted[..pos].to_vec(), depth + 1, Some((id, true))));
        }
        tree
    }

    /// Each group's share averaged over `n_trees` trees grown by `grow` (the forest's seeds).
    fn mean_fractions(
        data: &Encoded,
        grow: fn(&Encoded, &Fanova, &mut ChaCha8Rng) -> Tree,
    ) -> Vec<f64> {
        let params = Fanova::default();
        let per_tree: Vec<Vec<f64>> = (0..params.n_trees)
            .filter_map(|t| {
                let mut rng = ChaCha8Rng::seed_from_u64(params.seed.wrapping_add(t as u64));
                grow(data, &params, &mut rng).fractions(data)
            })
            .collect();
        (0..data.groups.len())
            .map(|g| per_tree.iter().map(|f| f[g]).sum::<f64>() / per_tree.len() as f64)
            .collect()
    }

    #[test]
    fn the_presorted_grower_grows_the_trees_that_sorting_every_node_grew() {
        // Distinct values in every column: the two growers add the same numbers in the same
        // order, so the trees are the same split for split.
        let o = obs(|x, y, _| (x - 0.3).powi(2) + x * y, 300);
        let xy = Space::new(vec![float("x"), float("y")]).unwrap();
        let params: Vec<&Param> = xy.params().iter().collect();
        let data = Encoded::new(&params, &o);
        for seed in 0..4 {
            let f = Fanova::default();
            let new = Tree::grow(&data, &f, &mut ChaCha8Rng::seed_from_u64(seed));
            let old = grow_by_sorting(&data, &f, &mut ChaCha8Rng::seed_from_u64(seed));
            assert_eq!(new.nodes.len(), old.nodes.len());
            for (a, b) in new.nodes.iter().zip(&old.nodes) {
                assert_eq!(
                    (a.feature, a.threshold, a.left, a.right),
                    (b.feature, b.threshold, b.left, b.right)
                );
                assert!((a.value - b.value).abs() < 1e-12, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn the_presorted_grower_keeps_the_importances_with_ties_and_one_hot_columns() {
        // Tied values (one-hot columns, a coarse x) are summed in another order, so a split
        // between two equally good columns may go the other way: the shares agree to noise.
        let o = obs(
            |x, y, c| [0.0, 0.6, 0.2][c] + (x * 8.0).floor() / 8.0 + 0.3 * y * y,
            500,
        );
        let s = space();
        let params: Vec<&Param> = s.params().iter().collect();
        let data = Encoded::new(&params, &o);
        let new = mean_fractions(&data, Tree::grow);
        let old = mean_fractions(&data, grow_by_sorting);
        for (a, b) in new.iter().zip(&old) {
            assert!((a - b).abs() < 0.005, "{new:?} vs {old:?}");
        }
    }

    #[test]
    fn a_parameter_the_loss_depends_on_alone_takes_nearly_everything() {
        let o = obs(|x, _, _| (x - 0.3).powi(2), 200);
        let imp = Fanova::default().importances(&space(), &o);
        assert_eq!(imp[0].0, "x");
        assert!(share(&imp, "x") > 0.9, "{imp:?}");
    }

    #[test]
    fn a_categorical_parameter_is_measured_over_its_one_hot_columns() {
        let o = obs(|x, _, c| [0.0, 5.0, 1.0][c] + 0.1 * x, 200);
        let imp = Fanova::default().importances(&space(), &o);
        assert_eq!(imp[0].0, "c", "{imp:?}");
        assert!(share(&imp, "y") < 0.05, "{imp:?}");
    }

    #[test]
    fn an_additive_function_splits_by_its_terms_variances() {
        // Var(2x) = 4/12, Var(y) = 1/12: shares 0.8 and 0.2.
        let o = obs(|x, y, _| 2.0 * x + y, 400);
        let imp = Fanova::default().importances(&space(), &o);
        assert!((share(&imp, "x") - 0.8).abs() < 0.08, "{imp:?}");
        assert!((share(&imp, "y") - 0.2).abs() < 0.08, "{imp:?}");
    }

    #[test]
    fn deterministic_for_a_seed_and_conditional_params_are_left_out() {
        let mut o = obs(|x, y, _| x * y, 60);
        o[0].params.remove("y");
        let a = Fanova::default().raw(&space(), &o);
        let b = Fanova::default().raw(&space(), &o);
        assert_eq!(a, b);
        assert!(a.iter().all(|(k, _)| k != "y"), "{a:?}");
    }

    #[test]
    fn too_few_trials_or_a_constant_loss_give_zeros() {
        let one = obs(|x, _, _| x, 1);
        assert!(
            Fanova::default()
                .raw(&space(), &one)
                .iter()
                .all(|(_, v)| *v == 0.0)
        );
        let flat = obs(|_, _, _| 1.0, 30);
        assert!(
            Fanova::default()
                .raw(&space(), &flat)
                .iter()
                .all(|(_, v)| *v == 0.0)
        );
    }

    #[test]
    fn marginal_variance_of_a_two_leaf_tree_is_exact() {
        // One split of x at 0.25 over [0, 1]: 0 left, 1 right. Variance 0.25 * 0.75.
        let data = Encoded::from_columns(
            vec![],
            vec![],
            vec![(0.0, 1.0), (0.0, 2.0)],
            vec![vec![0], vec![1]],
        );
        let leaf = |v| Node {
            feature: None,
            threshold: 0.0,
            left: 0,
            right: 0,
            value: v,
        };
        let tree = Tree {
            nodes: vec![
                Node {
                    feature: Some(0),
                    threshold: 0.25,
                    left: 1,
                    right: 2,
                    value: 0.75,
                },
                leaf(0.0),
                leaf(1.0),
            ],
        };
        let f = tree.fractions(&data).unwrap();
        assert!((f[0] - 1.0).abs() < 1e-12 && f[1].abs() < 1e-12, "{f:?}");
    }
}
