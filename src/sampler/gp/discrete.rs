//! Low-cardinality discrete parameters: what keeps the GP from locking onto one value of an
//! integer or categorical parameter for a whole study.
//!
//! The failure this room prevents (issue "Optimizer v2"): a polynomial degree in 1..3 where
//! degree 1 is broad and looks best in the first trials while degree 2 wins in a narrow valley.
//! A coordinate search that flips the degree at the continuous values tuned for degree 1 scores
//! degree 2 where it is bad, and the model, fed only degree-1 trials, never learns otherwise.
//! Two remedies live here, both pure functions of the space and the history:
//!
//! - **Per-value candidates** ([`LowCard::substitutions`], [`LowCard::key`]): every value (and,
//!   when there are few, every combination of values) is substituted into the incumbent and the
//!   best candidates, candidates are grouped by their discrete values, and the best of each group
//!   is refined on the continuous parameters with its discrete values held: each value competes
//!   with its own best continuous setting, not with the incumbent's.
//! - **An exploration floor** ([`LowCard::starved_with`], [`floor`]): each value of a
//!   low-cardinality parameter is owed an even share of the trials in which its parameter is
//!   active, up to [`FLOOR_CAP`] trials, or uncapped while the value is unresolved
//!   ([`UNRESOLVED`]); while a value is behind, the next ask holds that value
//!   (alternately a space-filling point and the acquisition's best point within a box around
//!   the value's best trial, see the sampler).
//!   Pending trials count, so a batch of asks spreads over the starved values instead of
//!   repeating one. The combinations of the always-active categoricals are owed the same floor
//!   ([`LowCard::starved_combo`]): a deceptive pair (think `criterion` x `bootstrap`) can give
//!   each value its share while the winning combination is never run.
//! - **A way off a plateau** ([`LowCard::plateau_escape`]): when [`STALL`] complete trials in a
//!   row have not beaten the best, and the best trial's value (or combination of values) is a
//!   plateau (its trials' losses span less than [`PLATEAU`] of all trials' span: the other
//!   parameters barely matter there, so nothing is left to find), each further ask holds the
//!   least-tried other value, as a starved value's ask does, until a trial improves by more
//!   than [`STALL_MARGIN`].
//!
//! What does not belong here: the kernel (`kernel`), and the acquisition's maths
//! (`acquisition`).

use crate::space::{ParamKind, ParamValue, Params, Space};
use crate::trial::FinishedTrial;

/// Most distinct values for a parameter to count as low-cardinality: enough for a degree in
/// 1..5, a bootstrap flag and a categorical of a handful of choices; an integer such as a
/// gradient-accumulation count in 1..8 is left to the kernel, which orders it.
pub const MAX_VALUES: usize = 6;

/// Most combinations of the low-cardinality parameters that are substituted together; beyond,
/// values are substituted one parameter at a time.
pub const MAX_COMBOS: usize = 36;

/// Most groups (combinations of low-cardinality values) whose best candidate is refined on
/// its own, beyond the best few candidates: bounds the cost of an ask.
pub const MAX_GROUPS_REFINED: usize = 6;

/// Most trials the floor owes one value. Until then the floor is an even split (after `n`
/// trials each of `k` values is owed `n / k`); past it the model decides alone, unless the value
/// is unresolved ([`UNRESOLVED`]). The cap is the
/// "until evidence says otherwise": a value that had this many trials, half of them spread
/// evenly over the other parameters, has been seen well enough for the model to judge it.
/// Measured on the trap and public problems (docs/experiments/gp-mixed-space.md): a cap of 6 keeps the public
/// mixed problem's score; 9 or no cap frees more trap seeds and costs that problem 4-20 points.
pub const FLOOR_CAP: usize = 6;

/// One low-cardinality parameter: its position in the space, its values and their unit-cube
/// coordinates (the centre of each value's cell).
#[derive(Debug, Clone)]
pub struct Discrete {
    pub index: usize,
    pub values: Vec<ParamValue>,
    pub units: Vec<f64>,
    /// Whether the parameter is always active (the floor applies only to those: forcing a
    /// value of a conditional one would mean forcing its parents too).
    pub unconditional: bool,
    /// Whether its values are unordered (a categorical), which the kernel cannot order.
    pub categorical: bool,
}

impl Discrete {
    /// Whether the parameter takes part in the combinations that the floor owes a share
    /// ([`LowCard::combos`]): an always-active categorical. An ordinal integer is left out:
    /// the kernel orders its values, so its neighbours share what is learnt of each.
    fn in_combo(&self) -> bool {
        self.unconditional && self.categorical
    }
}

/// What a starved ask holds ([`LowCard::starved_with`], [`LowCard::plateau_escape`],
/// [`LowCard::starved_combo`]): one value of one parameter or one combination of categorical
/// values, as (parameter position, value index) pairs; how many trials ran it (pending ones
/// included); and the id of its own space-filling stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub values: Vec<(usize, usize)>,
    pub have: usize,
    pub stream: u64,
}

impl Held {
    /// One value of one parameter.
    pub fn value(pi: usize, vi: usize, have: usize) -> Held {
        Held {
            values: vec![(pi, vi)],
            have,
            stream: 0xF100_0000 ^ ((pi as u64) << 8) ^ vi as u64,
        }
    }

    /// Combination `c` of the categoricals ([`LowCard::combo_values`]).
    pub fn combination(low: &LowCard, c: usize, have: usize) -> Held {
        Held {
            values: low.combo_values(c),
            have,
            stream: 0xF200_0000 ^ c as u64,
        }
    }

    /// Whether a trial's key ([`LowCard::key`]) has the held values.
    pub fn matches(&self, key: &[Option<usize>]) -> bool {
        self.values.iter().all(|&(pi, vi)| key[pi] == Some(vi))
    }
}

/// The space's low-cardinality parameters.
#[derive(Debug, Clone)]
pub struct LowCard {
    pub params: Vec<Discrete>,
}

/// The value a unit-cube coordinate decodes to, as an index into the parameter's values.
fn index_of(d: &Discrete, v: &ParamValue) -> Option<usize> {
    d.values.iter().position(|x| x.same(v))
}

impl LowCard {
    pub fn new(space: &Space) -> LowCard {
        let mut params = Vec::new();
        for (index, p) in space.params().iter().enumerate() {
            let Some(n) = p.grid_size() else {
                continue;
            };
            if !(2..=MAX_VALUES as u128).contains(&n) {
                continue;
            }
            let values: Vec<ParamValue> = match &p.kind {
                ParamKind::Categorical { choices } => choices.clone(),
                ParamKind::Int {
                    low, high, step, ..
                } => (0..=(high - low) / step)
                    .map(|k| ParamValue::Int(low + k * step))
                    .collect(),
                ParamKind::Float {
                    low, step: Some(s), ..
                } => (0..n as usize)
                    .map(|k| p.from_unit(p.to_unit(&ParamValue::Float(low + k as f64 * s))))
                    .collect(),
                ParamKind::Float { step: None, .. } => continue,
            };
            let units = values.iter().map(|v| p.to_unit(v)).collect();
            params.push(Discrete {
                index,
                values,
                units,
                unconditional: p.when.is_empty(),
                categorical: matches!(p.kind, ParamKind::Categorical { .. }),
            });
        }
        LowCard { params }
    }

    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// The discrete values of a decoded point: one value index per low-cardinality parameter
    /// (`None` where it is inactive). Candidates with the same key compete for one group.
    pub fn key(&self, space: &Space, params: &Params) -> Vec<Option<usize>> {
        self.params
            .iter()
            .map(|d| {
                params
                    .get(&space.params()[d.index].name)
                    .and_then(|v| index_of(d, v))
            })
            .collect()
    }

    /// `base` with every value of every low-cardinality parameter substituted one at a time,
    /// and, when the parameters have at most [`MAX_COMBOS`] combinations, with every
    /// combination substituted at once (a deceptive pair of categoricals is left only by
    /// changing both).
    pub fn substitutions(&self, base: &[f64]) -> Vec<Vec<f64>> {
        let mut out = Vec::new();
        for d in &self.params {
            for &u in &d.units {
                let mut m = base.to_vec();
                m[d.index] = u;
                out.push(m);
            }
        }
        let combos: usize = self
            .params
            .iter()
            .map(|d| d.units.len())
            .try_fold(1usize, |a, n| a.checked_mul(n))
            .unwrap_or(usize::MAX);
        if self.params.len() >= 2 && combos <= MAX_COMBOS {
            for c in 0..combos {
                let mut m = base.to_vec();
                let mut r = c;
                for d in &self.params {
                    m[d.index] = d.units[r % d.units.len()];
                    r /= d.units.len();
                }
                out.push(m);
            }
        }
        out
    }

    /// How many combinations the always-active categoricals have, when there are at least two
    /// of them and at most [`MAX_COMBOS`] combinations; `None` otherwise.
    pub fn combos(&self) -> Option<usize> {
        let (mut n, mut k) = (0, 1usize);
        for d in self.params.iter().filter(|d| d.in_combo()) {
            n += 1;
            k = k.checked_mul(d.values.len())?;
        }
        (n >= 2 && k <= MAX_COMBOS).then_some(k)
    }

    /// The combination of a key ([`LowCard::key`]), numbered as [`LowCard::combo_values`]
    /// reads it; `None` when there are no combinations or a categorical is absent.
    pub fn combo_of(&self, key: &[Option<usize>]) -> Option<usize> {
        self.combos()?;
        let (mut c, mut m) = (0, 1);
        for (d, k) in self.params.iter().zip(key) {
            if d.in_combo() {
                c += (*k)? * m;
                m *= d.values.len();
            }
        }
        Some(c)
    }

    /// The (parameter position, value index) pairs of combination `c`.
    pub fn combo_values(&self, mut c: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (pi, d) in self.params.iter().enumerate() {
            if d.in_combo() {
                out.push((pi, c % d.values.len()));
                c /= d.values.len();
            }
        }
        out
    }

    /// How many finished and pending trials ran each combination; `None` without combinations.
    pub fn combo_counts(
        &self,
        space: &Space,
        history: &[FinishedTrial],
        pending: &[Params],
    ) -> Option<Vec<usize>> {
        let mut counts = vec![0; self.combos()?];
        for params in history.iter().map(|t| &t.params).chain(pending) {
            if let Some(c) = self.combo_of(&self.key(space, params)) {
                counts[c] += 1;
            }
        }
        Some(counts)
    }

    /// The combination most behind its floor, or `None`: each of the `k` combinations is owed
    /// what a value of a `k`-valued parameter is ([`floor`], or [`unresolved_floor`] while the
    /// combination is unresolved); ties go to the first.
    pub fn starved_combo(&self, counts: &[usize], unresolved: &[bool]) -> Option<usize> {
        let n: usize = counts.iter().sum();
        let k = counts.len();
        let mut best: Option<(usize, usize)> = None;
        for (c, (&have, &u)) in counts.iter().zip(unresolved).enumerate() {
            let owed = if u {
                unresolved_floor(n, k)
            } else {
                floor(n, k)
            };
            if have < owed && best.is_none_or(|b| owed - have > b.1) {
                best = Some((c, owed - have));
            }
        }
        best.map(|b| b.0)
    }

    /// How many finished and pending trials ran each value, per low-cardinality parameter
    /// (trials where the parameter is inactive count for none of its values).
    pub fn counts(
        &self,
        space: &Space,
        history: &[FinishedTrial],
        pending: &[Params],
    ) -> Vec<Vec<usize>> {
        let mut counts: Vec<Vec<usize>> = self
            .params
            .iter()
            .map(|d| vec![0; d.values.len()])
            .collect();
        for params in history.iter().map(|t| &t.params).chain(pending) {
            for (c, k) in counts.iter_mut().zip(self.key(space, params)) {
                if let Some(k) = k {
                    c[k] += 1;
                }
            }
        }
        counts
    }

    /// The value to try when the search has stalled on a plateau, as (parameter position, value
    /// index), or `None`. `done` are the complete trials in trial order, `counts` as
    /// [`LowCard::counts`]. The search has stalled when the last [`STALL`] of more than
    /// `STALL + 5` complete trials did not beat the best before them. A parameter is on a
    /// plateau when the best trial's value of it, or its whole combination of values, has at
    /// least 4 trials whose losses span less than [`PLATEAU`] of all complete trials' span. The
    /// answer is the least-tried other value of such a parameter (always active ones only);
    /// ties go to the first parameter and value.
    pub fn plateau_escape(&self, done: &[Done], counts: &[Vec<usize>]) -> Option<(usize, usize)> {
        if done.len() <= STALL + 5 {
            return None;
        }
        let mut best = f64::INFINITY;
        let mut since = 0;
        for d in done {
            if d.z < best - STALL_MARGIN {
                best = d.z;
                since = 0;
            } else {
                since += 1;
            }
        }
        if since < STALL {
            return None;
        }
        let incumbent = done.iter().min_by(|a, b| a.z.total_cmp(&b.z))?;
        let span = |keep: &dyn Fn(&Done) -> bool| -> Option<f64> {
            let (mut lo, mut hi, mut n) = (f64::INFINITY, f64::NEG_INFINITY, 0);
            for d in done.iter().filter(|d| keep(d)) {
                lo = lo.min(d.loss);
                hi = hi.max(d.loss);
                n += 1;
            }
            (n >= 4).then_some(hi - lo)
        };
        let all = span(&|_| true)?;
        let flat = |s: Option<f64>| s.is_some_and(|s| s < PLATEAU * all);
        let whole = flat(span(&|d| d.key == incumbent.key));
        let mut pick: Option<(usize, usize, usize)> = None;
        for (pi, (d, c)) in self.params.iter().zip(counts).enumerate() {
            let Some(v) = incumbent.key[pi] else {
                continue;
            };
            if !d.unconditional || !(whole || flat(span(&|t| t.key[pi] == Some(v)))) {
                continue;
            }
            for (vi, &have) in c.iter().enumerate() {
                if vi != v && pick.is_none_or(|p| have < p.2) {
                    pick = Some((pi, vi, have));
                }
            }
        }
        pick.map(|(p, v, _)| (p, v))
    }

    /// The value most behind its floor, as (parameter position in `self.params`, value index),
    /// or `None` when every value of every unconditional low-cardinality parameter has its
    /// share. Ties go to the first parameter and the first value, so the choice depends on the
    /// history alone.
    #[cfg(test)]
    pub fn starved(&self, counts: &[Vec<usize>]) -> Option<(usize, usize)> {
        let resolved: Vec<Vec<bool>> = counts.iter().map(|c| vec![false; c.len()]).collect();
        self.starved_with(counts, &resolved)
    }

    /// The value most behind its floor, as (parameter position, value index), or `None`;
    /// ties go to the first. A value marked unresolved (one flag per value, laid out as
    /// `counts`) is owed the uncapped even split ([`unresolved_floor`]), any other its capped
    /// share ([`floor`]).
    pub fn starved_with(
        &self,
        counts: &[Vec<usize>],
        unresolved: &[Vec<bool>],
    ) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize, usize)> = None;
        for (pi, (d, c)) in self.params.iter().zip(counts).enumerate() {
            if !d.unconditional {
                continue;
            }
            let n: usize = c.iter().sum();
            for (vi, &have) in c.iter().enumerate() {
                let owed = if unresolved[pi][vi] {
                    unresolved_floor(n, c.len())
                } else {
                    floor(n, c.len())
                };
                if have < owed {
                    let deficit = owed - have;
                    if best.is_none_or(|b| deficit > b.2) {
                        best = Some((pi, vi, deficit));
                    }
                }
            }
        }
        best.map(|(p, v, _)| (p, v))
    }
}

/// The band of quantiles (of the complete trials' warped losses, best first) where a value's
/// best trial must lie for the floor to keep owing it an even share past [`FLOOR_CAP`]: a value
/// whose best is among the best 40% is already competitive (the acquisition tries it on its
/// own), one whose best is in the worst 30% is clearly bad; in between, the value is plausible
/// but unresolved, as a trap's winner is while its narrow valley has not been met. Measured on
/// the trap and public problems (docs/experiments/gp-mixed-space.md, "Adaptive floor").
pub const UNRESOLVED: (f64, f64) = (0.4, 0.7);

/// Complete trials in a row without a better one after which a plateau is left
/// ([`LowCard::plateau_escape`]).
pub const STALL: usize = 10;

/// How much (in model outputs, which have unit variance) a trial must improve on the best to
/// end a stall. A search that creeps along a plateau, improving by hairs, is still stalled: on
/// trap_degree5 one seed in 80 crept along degree 1's flat bowl (0.30032, 0.30029, 0.30025 and
/// 0.300005 at trials 19, 29, 36 and 37), each hair restarting the count, never left it and
/// ended below random search's median. Measured on the trap problems (BENCHMARKS.md, "Trap problems (robust mixed-space search)";
/// docs/experiments/gp-mixed-space.md, "Combinations of categoricals"): 0.01 and 0.05 both free that seed; 0.05 left the worst seed at 20.1, 0.01 at 3.2.
pub const STALL_MARGIN: f64 = 0.05;

/// The share of all complete trials' loss span under which the trials of one value (or of one
/// combination of values) make a plateau. Measured on the trap problems and train_surrogate
/// (docs/experiments/gp-mixed-space.md, "A way off a plateau"): with 0.15 or 0.2 and a stall of 10, the traps' seeds
/// below random's median fall from 0.205 to 0.057 (q = 1) and from 0.258 to 0.090 (q = 4),
/// train_surrogate is unchanged; without the plateau condition (every stall leaves the
/// incumbent's values) train_surrogate lost 19 points.
pub const PLATEAU: f64 = 0.15;

/// A complete trial as [`LowCard::plateau_escape`] sees it: its low-cardinality values, its
/// modelled loss (for "better") and its loss (for spans).
#[derive(Debug, Clone)]
pub struct Done {
    pub key: Vec<Option<usize>>,
    pub z: f64,
    pub loss: f64,
}

/// Trials owed to each of `k` values after `n` trials to a value that is still unresolved
/// (see [`UNRESOLVED`]): the even split, uncapped.
pub fn unresolved_floor(n: usize, k: usize) -> usize {
    n.checked_div(k).unwrap_or(0)
}

/// Trials owed to each of `k` values after `n` trials: an even split, rounded down, capped at
/// [`FLOOR_CAP`].
pub fn floor(n: usize, k: usize) -> usize {
    if k == 0 {
        return 0;
    }
    (n / k).min(FLOOR_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::{Outcome, TrialNumber};

    fn space(src: &str) -> Space {
        let t: toml::Table = toml::from_str(src).expect("toml");
        Space::from_toml(&t).expect("space")
    }

    const SRC: &str = "degree = { type = \"int\", low = 1, high = 3 }\n\
                       x = { type = \"float\", low = 0.0, high = 1.0 }\n\
                       wide = { type = \"int\", low = 1, high = 8 }\n\
                       c = { type = \"categorical\", choices = [\"a\", \"b\"] }\n\
                       m = { type = \"float\", low = 0.0, high = 1.0, step = 0.5, when = { c = \"a\" } }";

    /// A unit-cube point given by parameter name (the space orders its parameters itself).
    fn at(s: &Space, deg: f64, c: f64) -> Vec<f64> {
        s.params()
            .iter()
            .map(|p| match p.name.as_str() {
                "degree" => deg,
                "c" => c,
                "x" => 0.4,
                _ => 0.5,
            })
            .collect()
    }

    fn pos(s: &Space, name: &str) -> usize {
        s.params()
            .iter()
            .position(|p| p.name == name)
            .expect("a parameter of the space")
    }

    fn trial(n: u64, params: Params) -> FinishedTrial {
        FinishedTrial {
            others: Vec::new(),
            number: TrialNumber(n),
            params,
            outcome: Outcome::Complete { value: 1.0 },
            curve: Vec::new(),
            seconds: None,
        }
    }

    #[test]
    fn low_cardinality_params_are_the_small_discrete_ones() {
        let s = space(SRC);
        let l = LowCard::new(&s);
        let names: Vec<&str> = l
            .params
            .iter()
            .map(|d| s.params()[d.index].name.as_str())
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            ["c", "degree", "m"],
            "wide (8 values) and x are left out"
        );
        for d in &l.params {
            let name = s.params()[d.index].name.as_str();
            assert_eq!(d.values.len(), if name == "c" { 2 } else { 3 }, "{name}");
            assert_eq!(d.unconditional, name != "m", "{name}");
        }
    }

    #[test]
    fn substitutions_cover_every_value_and_every_combination() {
        let s = space(SRC);
        let l = LowCard::new(&s);
        let base = at(&s, 0.1, 0.1);
        let subs = l.substitutions(&base);
        let k_of = |name: &str| {
            l.params
                .iter()
                .position(|d| d.index == pos(&s, name))
                .expect("low-cardinality")
        };
        let (kd, kc, km) = (k_of("degree"), k_of("c"), k_of("m"));
        // 3 + 2 + 3 single substitutions, then 3 * 2 * 3 combinations.
        assert_eq!(subs.len(), 8 + 18);
        let keys: std::collections::HashSet<Vec<Option<usize>>> =
            subs.iter().map(|u| l.key(&s, &s.from_unit(u))).collect();
        // Every (degree, c) pair appears; m only where c = a.
        for deg in 0..3 {
            for c in 0..2 {
                assert!(
                    keys.iter().any(|k| k[kd] == Some(deg) && k[kc] == Some(c)),
                    "{deg} {c}"
                );
            }
        }
        assert!(keys.iter().all(|k| k[km].is_none() == (k[kc] == Some(1))));
        // The continuous coordinate is never touched.
        let x = pos(&s, "x");
        assert!(subs.iter().all(|u| u[x] == 0.4));
    }

    const PAIR: &str = "criterion = { type = \"categorical\", choices = [\"gini\", \"entropy\", \"log_loss\"] }\n\
                        bootstrap = { type = \"categorical\", choices = [true, false] }\n\
                        degree = { type = \"int\", low = 1, high = 3 }\n\
                        x = { type = \"float\", low = 0.0, high = 1.0 }";

    #[test]
    fn combinations_are_those_of_the_always_active_categoricals_numbered_both_ways() {
        let s = space(PAIR);
        let l = LowCard::new(&s);
        // criterion x bootstrap; the ordinal degree is left to the kernel.
        assert_eq!(l.combos(), Some(6));
        let mut seen = std::collections::HashSet::new();
        for c in 0..6 {
            let values = l.combo_values(c);
            assert_eq!(values.len(), 2, "{values:?}");
            let mut key = vec![Some(1); l.params.len()];
            for &(pi, vi) in &values {
                assert!(l.params[pi].categorical);
                key[pi] = Some(vi);
            }
            assert_eq!(l.combo_of(&key), Some(c));
            assert!(seen.insert(values));
        }
        // A key without one of the categoricals has no combination.
        let kc = l
            .params
            .iter()
            .position(|d| d.index == pos(&s, "criterion"))
            .expect("low-cardinality");
        let mut key = vec![Some(0); l.params.len()];
        key[kc] = None;
        assert_eq!(l.combo_of(&key), None);
        // One categorical (SRC's `m` is conditional): no combinations.
        assert_eq!(LowCard::new(&space(SRC)).combos(), None);
    }

    #[test]
    fn a_combination_never_run_is_owed_its_share_though_each_value_has_its_own() {
        let s = space(PAIR);
        let l = LowCard::new(&s);
        let combo = |crit: &str, boot: bool| {
            let mut p = Params::new();
            p.insert("criterion".into(), ParamValue::Str(crit.into()));
            p.insert("bootstrap".into(), ParamValue::Bool(boot));
            p.insert("degree".into(), ParamValue::Int(1));
            p.insert("x".into(), ParamValue::Float(0.5));
            l.combo_of(&l.key(&s, &p)).expect("a combination")
        };
        // 36 trials: 12 of each criterion, 24 with bootstrap and 12 without, but none of
        // (entropy, no bootstrap).
        let mut counts = vec![0; 6];
        for (crit, boot, n) in [
            ("gini", true, 6),
            ("gini", false, 6),
            ("entropy", true, 12),
            ("log_loss", true, 6),
            ("log_loss", false, 6),
        ] {
            counts[combo(crit, boot)] += n;
        }
        let none = vec![false; 6];
        assert_eq!(
            l.starved_combo(&counts, &none),
            Some(combo("entropy", false))
        );
        // Once it has its capped share, nothing; unresolved, it is owed the even split.
        counts[combo("entropy", false)] = FLOOR_CAP;
        assert_eq!(l.starved_combo(&counts, &none), None);
        let mut unresolved = none.clone();
        unresolved[combo("entropy", false)] = true;
        assert_eq!(
            l.starved_combo(&counts, &unresolved),
            Some(combo("entropy", false))
        );
    }

    #[test]
    fn the_floor_names_the_value_most_behind_and_counts_pending_trials() {
        let s = space(SRC);
        let l = LowCard::new(&s);
        let kd = l
            .params
            .iter()
            .position(|d| d.index == pos(&s, "degree"))
            .expect("low-cardinality");
        let kc = l
            .params
            .iter()
            .position(|d| d.index == pos(&s, "c"))
            .expect("low-cardinality");
        let p = |deg: f64, c: f64| s.from_unit(&at(&s, deg, c));
        // 9 trials, all degree 1 and c = b: degrees 2 and 3 are owed 9 / 3 = 3 each, c = a is
        // owed 4 and so the furthest behind.
        let h: Vec<FinishedTrial> = (0..9).map(|i| trial(i, p(0.1, 0.9))).collect();
        let counts = l.counts(&s, &h, &[]);
        assert_eq!(counts[kd], [9, 0, 0]);
        assert_eq!(l.starved(&counts), Some((kc, 0)));
        // Once c is balanced, degree 2 (the first of the two behind) is next.
        let mut h2 = h.clone();
        for t in h2.iter_mut().take(5) {
            t.params = p(0.1, 0.1);
        }
        assert_eq!(l.starved(&l.counts(&s, &h2, &[])), Some((kd, 1)));
        // Pending trials count: with three trials each of degrees 2 and 3 pending (c balanced),
        // nothing is owed any more (15 trials: 5 each, and degree 1 has 9).
        let mut pending = Vec::new();
        for (deg, c) in [
            (0.5, 0.1),
            (0.5, 0.9),
            (0.5, 0.1),
            (0.9, 0.9),
            (0.9, 0.1),
            (0.9, 0.9),
        ] {
            pending.push(p(deg, c));
        }
        let counts = l.counts(&s, &h2, &pending);
        assert_eq!(counts[kd], [9, 3, 3]);
        assert_eq!(
            l.starved(&counts),
            Some((kd, 1)),
            "15 trials: 5 owed, 3 had"
        );
        pending.extend([p(0.5, 0.1), p(0.5, 0.9), p(0.9, 0.1), p(0.9, 0.9)]);
        // 19 trials: 6 owed to each degree (19 / 3), 5 had by degrees 2 and 3.
        let counts = l.counts(&s, &h2, &pending);
        assert_eq!(counts[kd], [9, 5, 5]);
        assert_eq!(l.starved(&counts), Some((kd, 1)));
    }

    #[test]
    fn the_floor_is_an_even_split_capped_once_a_value_has_been_seen_enough() {
        assert_eq!(floor(2, 3), 0);
        assert_eq!(floor(9, 3), 3);
        assert_eq!(floor(50, 3), FLOOR_CAP);
        assert_eq!(floor(10, 5), 2);
        assert_eq!(floor(1000, 2), FLOOR_CAP);
        assert_eq!(floor(10, 0), 0);
    }

    #[test]
    fn a_value_that_has_its_cap_is_owed_nothing_more() {
        let s = space("d = { type = \"int\", low = 1, high = 2 }");
        let l = LowCard::new(&s);
        assert_eq!(l.starved(&[vec![100, FLOOR_CAP]]), None);
        assert_eq!(l.starved(&[vec![100, FLOOR_CAP - 1]]), Some((0, 1)));
    }

    #[test]
    fn an_unresolved_value_stays_owed_an_even_share_past_the_cap() {
        let s = space("d = { type = \"int\", low = 1, high = 3 }");
        let l = LowCard::new(&s);
        let counts = [vec![40, FLOOR_CAP, 8]];
        assert_eq!(l.starved(&counts), None);
        // 54 trials: 18 owed to an unresolved value, so 12 to degree 2 (6 had) and 10 to
        // degree 3 (8 had); a resolved value is owed its cap only.
        assert_eq!(
            l.starved_with(&counts, &[vec![false, true, true]]),
            Some((0, 1))
        );
        assert_eq!(
            l.starved_with(&counts, &[vec![false, false, true]]),
            Some((0, 2))
        );
        assert_eq!(unresolved_floor(54, 3), 18);
        assert_eq!(unresolved_floor(5, 0), 0);
    }
}

#[cfg(test)]
mod plateau_tests {
    use super::*;

    /// Two low-cardinality parameters (3 and 2 values, both always active): `LowCard` built by
    /// hand, positions 0 and 1.
    fn low() -> LowCard {
        let d = |n: usize| Discrete {
            index: 0,
            values: (0..n as i64).map(ParamValue::Int).collect(),
            units: (0..n).map(|i| (i as f64 + 0.5) / n as f64).collect(),
            unconditional: true,
            categorical: false,
        };
        LowCard {
            params: vec![d(3), d(2)],
        }
    }

    fn done(a: usize, b: usize, loss: f64) -> Done {
        Done {
            key: vec![Some(a), Some(b)],
            z: loss,
            loss,
        }
    }

    /// 4 spread-out trials, then `flat` trials of (0, 0) within 0.01 of 0.30, the best first.
    fn history(flat: usize) -> Vec<Done> {
        let mut h = vec![
            done(1, 0, 0.9),
            done(2, 1, 1.3),
            done(1, 1, 0.7),
            done(2, 0, 1.1),
        ];
        h.push(done(0, 0, 0.300));
        for k in 1..flat {
            h.push(done(0, 0, 0.301 + 0.009 * (k % 3) as f64 / 2.0));
        }
        h
    }

    #[test]
    fn a_stall_on_a_plateau_hands_the_next_ask_to_the_least_tried_other_value() {
        let l = low();
        let h = history(STALL + 5);
        // Counts as the history has them: (0, 0) most, value 2 of the first parameter once and
        // value 1 twice; the second parameter's value 1 twice.
        let counts = vec![vec![STALL + 5, 2, 1], vec![STALL + 7, 2]];
        assert_eq!(l.plateau_escape(&h, &counts), Some((0, 2)));
        // With fewer trials than STALL + 5 + 1 complete ones, or a recent improvement: nothing.
        assert_eq!(l.plateau_escape(&history(STALL), &counts), None);
        let mut improved = h.clone();
        improved.push(done(0, 0, 0.2));
        assert_eq!(l.plateau_escape(&improved, &counts), None);
    }

    #[test]
    fn hairs_of_improvement_on_a_plateau_do_not_end_the_stall() {
        let l = low();
        // The plateau's trials keep improving, each by a hair (1e-3 of a model output).
        let mut h = history(1);
        for k in 1..STALL + 5 {
            h.push(done(0, 0, 0.300 - 1e-3 * k as f64));
        }
        let counts = vec![vec![STALL + 5, 2, 1], vec![STALL + 7, 2]];
        assert_eq!(l.plateau_escape(&h, &counts), Some((0, 2)));
        // A real improvement ends it.
        h.push(done(0, 0, 0.2));
        assert_eq!(l.plateau_escape(&h, &counts), None);
    }

    #[test]
    fn a_stall_where_the_best_value_still_varies_is_no_plateau() {
        let l = low();
        // The best combination's trials span 0.3 .. 0.8, half the span of all: not flat.
        let mut h = history(1);
        for k in 0..STALL + 5 {
            h.push(done(0, 0, 0.35 + 0.45 * (k % 2) as f64));
        }
        let counts = vec![vec![STALL + 6, 2, 1], vec![STALL + 8, 2]];
        assert_eq!(l.plateau_escape(&h, &counts), None);
    }

    #[test]
    fn a_flat_combination_is_a_plateau_even_when_each_value_alone_varies() {
        let l = low();
        let mut h = history(STALL + 5);
        // Value 0 of the first parameter also ran with the second at 1, and varied there; so
        // did value 0 of the second parameter with the first at 1 and 2.
        h.insert(0, done(0, 1, 1.4));
        h.insert(0, done(1, 0, 0.35));
        h.insert(0, done(2, 0, 1.45));
        let counts = vec![vec![STALL + 6, 3, 2], vec![STALL + 8, 3]];
        // Least tried of the other values: (1, 1) has 3 and (0, 2) has 2: the first parameter's
        // value 2.
        assert_eq!(l.plateau_escape(&h, &counts), Some((0, 2)));
    }
}
