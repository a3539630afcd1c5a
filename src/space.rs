//! The search space: parameter kinds, conditions, and the encoding to and from the unit cube.
//!
//! This is the one place that knows about log scales, integer rounding, steps and categorical
//! choices. Samplers work in the unit cube (one coordinate per parameter) and call
//! [`Param::from_unit`] at the edge, which is guaranteed to give a value inside the bounds and
//! on the step. Parsing follows `docs/ask-tell.md` exactly; every mistake is a
//! [`SpaceError`] naming the parameter, never a panic.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

/// One value of one parameter. Integers stay integers and categorical choices keep their own
/// JSON type, as the ask/tell protocol promises.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl ParamValue {
    /// The value as a number, for numeric parameters (ints widen to f64).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            ParamValue::Int(i) => Some(*i as f64),
            ParamValue::Float(f) => Some(*f),
            _ => None,
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            ParamValue::Bool(_) => "boolean",
            ParamValue::Int(_) => "integer",
            ParamValue::Float(_) => "float",
            ParamValue::Str(_) => "string",
        }
    }

    /// Equality as the user means it in `when` tables and choices: 3 and 3.0 are equal.
    pub fn same(&self, other: &ParamValue) -> bool {
        match (self, other) {
            (ParamValue::Int(a), ParamValue::Float(b))
            | (ParamValue::Float(b), ParamValue::Int(a)) => (*a as f64) == *b,
            (a, b) => a == b,
        }
    }

    /// Converts a JSON value into a parameter value (used by `tune enqueue` and ask/tell).
    pub fn from_json(v: &serde_json::Value) -> Option<ParamValue> {
        match v {
            serde_json::Value::Bool(b) => Some(ParamValue::Bool(*b)),
            serde_json::Value::Number(n) => n
                .as_i64()
                .map(ParamValue::Int)
                .or_else(|| n.as_f64().map(ParamValue::Float)),
            serde_json::Value::String(s) => Some(ParamValue::Str(s.clone())),
            _ => None,
        }
    }

    /// Converts a TOML scalar into a parameter value (`None` for tables, arrays, dates).
    pub fn from_toml(v: &toml::Value) -> Option<ParamValue> {
        match v {
            toml::Value::Boolean(b) => Some(ParamValue::Bool(*b)),
            toml::Value::Integer(i) => Some(ParamValue::Int(*i)),
            toml::Value::Float(f) => Some(ParamValue::Float(*f)),
            toml::Value::String(s) => Some(ParamValue::Str(s.clone())),
            _ => None,
        }
    }
}

impl fmt::Display for ParamValue {
    /// Floats in full precision (shortest round-trip form), booleans as `true`/`false`: the
    /// form `{name}` placeholders of command trials are replaced with.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Bool(b) => write!(f, "{b}"),
            ParamValue::Int(i) => write!(f, "{i}"),
            ParamValue::Float(x) => write!(f, "{x:?}"),
            ParamValue::Str(s) => write!(f, "{s}"),
        }
    }
}

/// A choice as [`ParamValue::same`] compares it, hashable: choices of one list share a type
/// (mixed lists are refused first), floats are finite, and `-0.0` is `0.0`.
#[derive(PartialEq, Eq, Hash)]
enum ChoiceKey {
    Bool(bool),
    Int(i64),
    Float(u64),
    Str(String),
}

impl ChoiceKey {
    fn of(v: &ParamValue) -> ChoiceKey {
        match v {
            ParamValue::Bool(b) => ChoiceKey::Bool(*b),
            ParamValue::Int(i) => ChoiceKey::Int(*i),
            ParamValue::Float(f) => ChoiceKey::Float(if *f == 0.0 { 0 } else { f.to_bits() }),
            ParamValue::Str(s) => ChoiceKey::Str(s.clone()),
        }
    }
}

/// The active parameters of one trial, by name. Inactive conditional parameters are absent.
pub type Params = BTreeMap<String, ParamValue>;

/// What values a parameter may take.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamKind {
    Float {
        low: f64,
        high: f64,
        log: bool,
        step: Option<f64>,
    },
    Int {
        low: i64,
        high: i64,
        log: bool,
        step: i64,
    },
    Categorical {
        choices: Vec<ParamValue>,
    },
}

/// `when = { parent = [values] }`: the parameter exists only when every listed parent is
/// active and took one of its values.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub parent: String,
    pub values: Vec<ParamValue>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
    pub when: Vec<Condition>,
}

/// A validated search space. Parameters are ordered so that every parent comes before the
/// parameters that depend on it; within that, in the order the file gives them.
#[derive(Debug, Clone, PartialEq)]
pub struct Space {
    params: Vec<Param>,
}

/// A mistake in a search space, naming the parameter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpaceError {
    #[error("the space has no parameter at all")]
    Empty,
    #[error("parameter `{param}`: {message}")]
    Param { param: String, message: String },
}

fn perr(param: &str, message: impl Into<String>) -> SpaceError {
    SpaceError::Param {
        param: param.to_string(),
        message: message.into(),
    }
}

fn finite_number(param: &str, key: &str, v: &toml::Value) -> Result<f64, SpaceError> {
    let x = match v {
        toml::Value::Integer(i) => *i as f64,
        toml::Value::Float(f) => *f,
        other => {
            return Err(perr(
                param,
                format!("`{key}` must be a number, not {}", other.type_str()),
            ));
        }
    };
    if !x.is_finite() {
        return Err(perr(
            param,
            format!("`{key}` must be a finite number, not {x}"),
        ));
    }
    Ok(x)
}

fn integer(param: &str, key: &str, v: &toml::Value) -> Result<i64, SpaceError> {
    match v {
        toml::Value::Integer(i) => Ok(*i),
        toml::Value::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
            Ok(*f as i64)
        }
        toml::Value::Float(f) => Err(perr(
            param,
            format!("`{key}` of an int parameter must be an integer, not {f}"),
        )),
        other => Err(perr(
            param,
            format!("`{key}` must be an integer, not {}", other.type_str()),
        )),
    }
}

fn boolean(param: &str, key: &str, v: &toml::Value) -> Result<bool, SpaceError> {
    v.as_bool().ok_or_else(|| {
        perr(
            param,
            format!("`{key}` must be true or false, not {}", v.type_str()),
        )
    })
}

impl Space {
    /// Parses a `[space]` table. Every key is a parameter whose value is an inline table.
    pub fn from_toml(table: &toml::Table) -> Result<Space, SpaceError> {
        if table.is_empty() {
            return Err(SpaceError::Empty);
        }
        let mut params = Vec::with_capacity(table.len());
        for (name, value) in table {
            if name.trim().is_empty() || name.chars().any(char::is_control) {
                return Err(perr(
                    name,
                    "a parameter needs a name without control characters, not blank",
                ));
            }
            params.push(parse_param(name, value)?);
        }
        Space::new(params)
    }

    /// Builds a space from parameters, checking conditions (known parents, compatible values,
    /// no cycles) and ordering parents first.
    pub fn new(params: Vec<Param>) -> Result<Space, SpaceError> {
        if params.is_empty() {
            return Err(SpaceError::Empty);
        }
        let index: HashMap<&str, usize> = params
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), i))
            .collect();
        if index.len() != params.len() {
            let mut seen = std::collections::HashSet::new();
            for p in &params {
                if !seen.insert(&p.name) {
                    return Err(perr(&p.name, "is defined twice"));
                }
            }
        }
        let mut choice_sets: HashMap<usize, std::collections::HashSet<ChoiceKey>> = HashMap::new();
        for p in &params {
            for c in &p.when {
                let Some(&pi) = index.get(c.parent.as_str()) else {
                    return Err(perr(
                        &p.name,
                        format!(
                            "`when` names `{}`, which is not a parameter of the space",
                            c.parent
                        ),
                    ));
                };
                if c.parent == p.name {
                    return Err(perr(
                        &p.name,
                        "`when` makes a cycle: it names the parameter itself",
                    ));
                }
                let parent = &params[pi];
                for v in &c.values {
                    let admitted = match &parent.kind {
                        // A set of the parent's choices, built once: a long `when` list
                        // against a long choice list would otherwise be quadratic.
                        ParamKind::Categorical { choices } => {
                            let set = choice_sets
                                .entry(pi)
                                .or_insert_with(|| choices.iter().map(ChoiceKey::of).collect());
                            set.contains(&ChoiceKey::of(v))
                                // `3` for a choice `3.0`: the set holds one type; ask `same`.
                                || (choices.first().is_some_and(|f| {
                                    std::mem::discriminant(f) != std::mem::discriminant(v)
                                }) && parent.admits(v))
                        }
                        _ => parent.admits(v),
                    };
                    if !admitted {
                        return Err(perr(
                            &p.name,
                            format!(
                                "`when` value {v} is never taken by `{}` ({})",
                                c.parent,
                                parent.describe()
                            ),
                        ));
                    }
                }
            }
        }
        // Topological order (Kahn), stable with respect to the file's order.
        let n = params.len();
        let mut placed = vec![false; n];
        let mut order = Vec::with_capacity(n);
        while order.len() < n {
            let mut progressed = false;
            for i in 0..n {
                if placed[i] {
                    continue;
                }
                let ready = params[i]
                    .when
                    .iter()
                    .all(|c| placed[index[c.parent.as_str()]]);
                if ready {
                    placed[i] = true;
                    order.push(i);
                    progressed = true;
                }
            }
            if !progressed {
                let stuck = (0..n)
                    .find(|&i| !placed[i])
                    .expect("loop runs only while some are unplaced");
                return Err(perr(
                    &params[stuck].name,
                    "`when` makes a cycle among conditional parameters",
                ));
            }
        }
        let mut slots: Vec<Option<Param>> = params.into_iter().map(Some).collect();
        let params = order
            .into_iter()
            .map(|i| {
                slots[i]
                    .take()
                    .expect("each index appears once in a topological order")
            })
            .collect();
        Ok(Space { params })
    }

    /// Parameters, parents before children.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    pub fn len(&self) -> usize {
        self.params.len()
    }

    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Whether `param` is active given the values chosen so far (parents come first, so a
    /// sampler filling params in order always has the parents it needs).
    pub fn is_active(&self, param: &Param, chosen: &Params) -> bool {
        param.when.iter().all(|c| match chosen.get(&c.parent) {
            Some(v) => c.values.iter().any(|w| w.same(v)),
            None => false,
        })
    }

    /// Builds a full set of params from one unit-cube coordinate per parameter (in
    /// [`Space::params`] order), leaving out the inactive ones.
    pub fn from_unit(&self, u: &[f64]) -> Params {
        let mut out = Params::new();
        for (p, &x) in self.params.iter().zip(u) {
            if self.is_active(p, &out) {
                out.insert(p.name.clone(), p.from_unit(x));
            }
        }
        out
    }

    /// Checks a full set of params against the space: each active parameter present and valid,
    /// inactive and unknown ones absent.
    pub fn validate(&self, params: &Params) -> Result<(), SpaceError> {
        for name in params.keys() {
            if self.get(name).is_none() {
                return Err(perr(name, "is not a parameter of the space"));
            }
        }
        let mut seen = Params::new();
        for p in &self.params {
            let active = self.is_active(p, &seen);
            match (active, params.get(&p.name)) {
                (true, Some(v)) => {
                    if !p.admits(v) {
                        return Err(perr(
                            &p.name,
                            format!("value {v} is outside the space ({})", p.describe()),
                        ));
                    }
                    seen.insert(p.name.clone(), v.clone());
                }
                (true, None) => return Err(perr(&p.name, "is active but has no value")),
                (false, Some(_)) => {
                    return Err(perr(
                        &p.name,
                        "is inactive under its `when` condition but has a value",
                    ));
                }
                (false, None) => {}
            }
        }
        Ok(())
    }

    /// Turns integers given for float parameters into floats (JSON and TOML write `1` for
    /// `1.0`), leaving everything else as it is; [`Space::validate`] then checks the result.
    pub fn coerce(&self, params: Params) -> Params {
        params
            .into_iter()
            .map(|(k, v)| {
                let v = match (self.get(&k).map(|p| &p.kind), v) {
                    (Some(ParamKind::Float { .. }), ParamValue::Int(i)) => {
                        ParamValue::Float(i as f64)
                    }
                    (_, v) => v,
                };
                (k, v)
            })
            .collect()
    }

    /// The number of distinct configurations when every parameter is discrete, or `None` when
    /// some float is continuous (or the count overflows). Samplers use it to know when every
    /// configuration has been seen.
    pub fn cardinality(&self) -> Option<u128> {
        // Conditional parameters make the count a sum over branches; an upper bound from the
        // product is good enough for "are unseen ones left", and exact without conditions.
        let mut total: u128 = 1;
        for p in &self.params {
            let n = p.grid_size()?;
            total = total.checked_mul(if p.when.is_empty() { n } else { n + 1 })?;
        }
        Some(total)
    }
}

fn parse_param(name: &str, value: &toml::Value) -> Result<Param, SpaceError> {
    let toml::Value::Table(t) = value else {
        return Err(perr(
            name,
            format!(
                "must be a table such as {{ type = \"float\", low = 0.0, high = 1.0 }}, not {}",
                value.type_str()
            ),
        ));
    };
    let ty = match t.get("type") {
        Some(toml::Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(perr(
                name,
                format!("`type` must be a string, not {}", other.type_str()),
            ));
        }
        None => {
            return Err(perr(
                name,
                "has no `type` (one of \"float\", \"int\", \"categorical\")",
            ));
        }
    };
    let allowed: &[&str] = match ty {
        "float" | "int" => &["type", "low", "high", "log", "step", "when"],
        "categorical" => &["type", "choices", "when"],
        other => {
            return Err(perr(
                name,
                format!(
                    "unknown type \"{other}\" (expected \"float\", \"int\" or \"categorical\")"
                ),
            ));
        }
    };
    for key in t.keys() {
        if !allowed.contains(&key.as_str()) {
            return Err(perr(
                name,
                format!(
                    "unknown key `{key}` for a {ty} parameter (allowed: {})",
                    allowed.join(", ")
                ),
            ));
        }
    }
    let need = |key: &str| {
        t.get(key)
            .ok_or_else(|| perr(name, format!("a {ty} parameter needs `{key}`")))
    };
    let log = t
        .get("log")
        .map(|v| boolean(name, "log", v))
        .transpose()?
        .unwrap_or(false);
    let kind = match ty {
        "float" => {
            let low = finite_number(name, "low", need("low")?)?;
            let high = finite_number(name, "high", need("high")?)?;
            if low >= high {
                return Err(perr(
                    name,
                    format!("`low` ({low}) must be below `high` ({high})"),
                ));
            }
            if !(high - low).is_finite() {
                return Err(perr(
                    name,
                    format!(
                        "the range from {low} to {high} is too wide: `high - low` overflows a float (use `log = true`, or narrower bounds)"
                    ),
                ));
            }
            if log && low <= 0.0 {
                return Err(perr(
                    name,
                    format!("`log = true` needs `low` > 0, but `low` is {low}"),
                ));
            }
            let step = t
                .get("step")
                .map(|v| finite_number(name, "step", v))
                .transpose()?;
            if let Some(s) = step {
                if s <= 0.0 {
                    return Err(perr(name, format!("`step` must be positive, not {s}")));
                }
                if s > high - low {
                    return Err(perr(
                        name,
                        format!("`step` ({s}) is larger than `high - low` ({})", high - low),
                    ));
                }
            }
            ParamKind::Float {
                low,
                high,
                log,
                step,
            }
        }
        "int" => {
            let low = integer(name, "low", need("low")?)?;
            let high = integer(name, "high", need("high")?)?;
            // Optuna's schema stores every param as a float: beyond ±2^53 an int would come
            // back rounded, so such bounds are refused rather than silently changed.
            const EXACT: i64 = 1 << 53;
            for (key, v) in [("low", low), ("high", high)] {
                if !(-EXACT..=EXACT).contains(&v) {
                    return Err(perr(
                        name,
                        format!(
                            "`{key}` ({v}) is beyond ±2^53 ({EXACT}): params are stored as floats, which hold integers exactly only up to there"
                        ),
                    ));
                }
            }
            if low >= high {
                return Err(perr(
                    name,
                    format!("`low` ({low}) must be below `high` ({high})"),
                ));
            }
            if log && low <= 0 {
                return Err(perr(
                    name,
                    format!("`log = true` needs `low` > 0, but `low` is {low}"),
                ));
            }
            let step = t
                .get("step")
                .map(|v| integer(name, "step", v))
                .transpose()?
                .unwrap_or(1);
            if step <= 0 {
                return Err(perr(name, format!("`step` must be positive, not {step}")));
            }
            if step > high - low {
                return Err(perr(
                    name,
                    format!(
                        "`step` ({step}) is larger than `high - low` ({})",
                        high - low
                    ),
                ));
            }
            ParamKind::Int {
                low,
                high,
                log,
                step,
            }
        }
        _ => {
            let list = match need("choices")? {
                toml::Value::Array(a) => a,
                other => {
                    return Err(perr(
                        name,
                        format!("`choices` must be a list, not {}", other.type_str()),
                    ));
                }
            };
            if list.is_empty() {
                return Err(perr(name, "`choices` is empty"));
            }
            let mut choices: Vec<ParamValue> = Vec::with_capacity(list.len());
            // Duplicates found through a set, not by comparing each choice with every earlier
            // one: that was quadratic (700 000 choices took minutes).
            let mut seen: std::collections::HashSet<ChoiceKey> =
                std::collections::HashSet::with_capacity(list.len());
            for v in list {
                let c = ParamValue::from_toml(v).ok_or_else(|| {
                    perr(
                        name,
                        format!(
                            "choices must be strings, integers, floats or booleans, not {}",
                            v.type_str()
                        ),
                    )
                })?;
                if let ParamValue::Float(f) = c
                    && !f.is_finite()
                {
                    return Err(perr(name, format!("choice {f} is not a finite number")));
                }
                // A NUL byte cannot be passed to a command (argv and environment end at
                // one) and PostgreSQL refuses it: refused here, not found by every trial.
                if let ParamValue::Str(s) = &c
                    && s.contains('\0')
                {
                    return Err(perr(
                        name,
                        format!(
                            "choice {s:?} contains a NUL byte, which no command can be given and no database stores"
                        ),
                    ));
                }
                if let Some(first) = choices.first()
                    && std::mem::discriminant(first) != std::mem::discriminant(&c)
                {
                    return Err(perr(
                        name,
                        format!(
                            "choices mix types ({} and {}): use one type per list",
                            first.type_name(),
                            c.type_name()
                        ),
                    ));
                }
                if !seen.insert(ChoiceKey::of(&c)) {
                    return Err(perr(name, format!("choice {c} is listed twice")));
                }
                choices.push(c);
            }
            ParamKind::Categorical { choices }
        }
    };
    let when = match t.get("when") {
        None => Vec::new(),
        Some(toml::Value::Table(w)) => {
            if w.is_empty() {
                return Err(perr(name, "`when` is empty"));
            }
            let mut out = Vec::new();
            for (parent, vals) in w {
                let values = match vals {
                    toml::Value::Array(a) => a
                        .iter()
                        .map(ParamValue::from_toml)
                        .collect::<Option<Vec<_>>>(),
                    v => ParamValue::from_toml(v).map(|x| vec![x]),
                }
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    perr(
                        name,
                        format!("`when.{parent}` must be a value or a non-empty list of values"),
                    )
                })?;
                out.push(Condition {
                    parent: parent.clone(),
                    values,
                });
            }
            out
        }
        Some(other) => {
            return Err(perr(
                name,
                format!(
                    "`when` must be a table such as {{ optimizer = \"sgd\" }}, not {}",
                    other.type_str()
                ),
            ));
        }
    };
    Ok(Param {
        name: name.to_string(),
        kind,
        when,
    })
}

impl Param {
    /// Whether `v` is a value this parameter can take (type, bounds and step).
    pub fn admits(&self, v: &ParamValue) -> bool {
        match (&self.kind, v) {
            (
                ParamKind::Float {
                    low, high, step, ..
                },
                _,
            ) => {
                let Some(x) = v.as_f64() else { return false };
                if !(x >= *low && x <= *high) {
                    return false;
                }
                match step {
                    Some(s) => {
                        let k = (x - low) / s;
                        (k - k.round()).abs() < 1e-6
                    }
                    None => true,
                }
            }
            (
                ParamKind::Int {
                    low, high, step, ..
                },
                ParamValue::Int(i),
            ) => i >= low && i <= high && (i - low) % step == 0,
            (
                ParamKind::Int {
                    low, high, step, ..
                },
                ParamValue::Float(f),
            ) => {
                f.fract() == 0.0
                    && *f >= *low as f64
                    && *f <= *high as f64
                    && ((*f as i64) - low) % step == 0
            }
            (ParamKind::Int { .. }, _) => false,
            (ParamKind::Categorical { choices }, v) => choices.iter().any(|c| c.same(v)),
        }
    }

    /// A short human description, for error messages.
    pub fn describe(&self) -> String {
        match &self.kind {
            ParamKind::Float {
                low,
                high,
                log,
                step,
            } => format!(
                "float in [{low}, {high}]{}{}",
                if *log { ", log" } else { "" },
                step.map(|s| format!(", step {s}")).unwrap_or_default()
            ),
            ParamKind::Int {
                low,
                high,
                log,
                step,
            } => format!(
                "int in [{low}, {high}]{}{}",
                if *log { ", log" } else { "" },
                if *step != 1 {
                    format!(", step {step}")
                } else {
                    String::new()
                }
            ),
            ParamKind::Categorical { choices } => format!(
                "one of [{}]",
                choices
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    pub fn is_categorical(&self) -> bool {
        matches!(self.kind, ParamKind::Categorical { .. })
    }

    /// Number of categorical choices (0 for numeric parameters).
    pub fn n_choices(&self) -> usize {
        match &self.kind {
            ParamKind::Categorical { choices } => choices.len(),
            _ => 0,
        }
    }

    /// Number of distinct values, or `None` for a continuous float.
    pub fn grid_size(&self) -> Option<u128> {
        match &self.kind {
            ParamKind::Float {
                low,
                high,
                step: Some(s),
                ..
            } => Some(((high - low) / s + 1e-9).floor() as u128 + 1),
            ParamKind::Float { step: None, .. } => None,
            ParamKind::Int {
                low, high, step, ..
            } => Some(((high - low) / step) as u128 + 1),
            ParamKind::Categorical { choices } => Some(choices.len() as u128),
        }
    }

    /// Maps a value to the unit interval: linear or log position for numbers (integers padded
    /// by half a step so every integer owns an equal share), the centre of its cell for a
    /// categorical choice. The inverse of [`Param::from_unit`] up to rounding.
    pub fn to_unit(&self, v: &ParamValue) -> f64 {
        match &self.kind {
            ParamKind::Float { low, high, log, .. } => {
                let x = v.as_f64().unwrap_or(*low).clamp(*low, *high);
                if *log {
                    (x.ln() - low.ln()) / (high.ln() - low.ln())
                } else {
                    (x - low) / (high - low)
                }
            }
            ParamKind::Int {
                low,
                high,
                log,
                step,
            } => {
                let (lo, hi) = int_range(*low, *high, *log, *step);
                let x = v
                    .as_f64()
                    .unwrap_or(*low as f64)
                    .clamp(*low as f64, *high as f64);
                let t = if *log { x.ln() } else { x };
                ((t - lo) / (hi - lo)).clamp(0.0, 1.0)
            }
            ParamKind::Categorical { choices } => {
                let i = choices.iter().position(|c| c.same(v)).unwrap_or(0);
                (i as f64 + 0.5) / choices.len() as f64
            }
        }
    }

    /// Maps a point of the unit interval to a valid value: always inside the bounds and on the
    /// step, whatever `u` is (values outside [0, 1] and NaN are clamped).
    pub fn from_unit(&self, u: f64) -> ParamValue {
        let u = if u.is_nan() { 0.5 } else { u.clamp(0.0, 1.0) };
        // Optimizers push points against a bound up to rounding (u = 1e-17): snap those onto
        // the bound, so that such a point reads 0 rather than 1.1e-16 and two of them are one
        // configuration, not two that differ in the last bit.
        let u = if u < 1e-9 {
            0.0
        } else if u > 1.0 - 1e-9 {
            1.0
        } else {
            u
        };
        match &self.kind {
            ParamKind::Float {
                low,
                high,
                log,
                step,
            } => {
                let mut x = if *log {
                    (low.ln() + u * (high.ln() - low.ln())).exp()
                } else {
                    low + u * (high - low)
                };
                if let Some(s) = step {
                    let kmax = ((high - low) / s + 1e-9).floor();
                    let k = ((x - low) / s).round().clamp(0.0, kmax);
                    x = low + k * s;
                    // Re-derive from the grid index to avoid accumulating rounding noise such
                    // as 0.30000000000000004 when it matters for display.
                    x = (x * 1e12).round() / 1e12;
                }
                ParamValue::Float(x.clamp(*low, *high))
            }
            ParamKind::Int {
                low,
                high,
                log,
                step,
            } => {
                let (lo, hi) = int_range(*low, *high, *log, *step);
                let t = lo + u * (hi - lo);
                let x = if *log { t.exp() } else { t };
                let kmax = (high - low) / step;
                let k = (((x - *low as f64) / *step as f64).round() as i64).clamp(0, kmax);
                ParamValue::Int(low + k * step)
            }
            ParamKind::Categorical { choices } => {
                let n = choices.len();
                let i = ((u * n as f64).floor() as usize).min(n - 1);
                choices[i].clone()
            }
        }
    }

    /// Optuna's internal representation (the `trial_params.param_value` column): the number
    /// itself for numeric parameters, the choice index for categorical ones.
    pub fn to_internal(&self, v: &ParamValue) -> f64 {
        match &self.kind {
            ParamKind::Categorical { choices } => {
                choices.iter().position(|c| c.same(v)).unwrap_or(0) as f64
            }
            _ => v.as_f64().unwrap_or(f64::NAN),
        }
    }

    /// The inverse of [`Param::to_internal`].
    pub fn from_internal(&self, x: f64) -> Option<ParamValue> {
        match &self.kind {
            ParamKind::Categorical { choices } => {
                if x.is_finite() && x >= 0.0 {
                    choices.get(x as usize).cloned()
                } else {
                    None
                }
            }
            ParamKind::Int { .. } => x.is_finite().then_some(ParamValue::Int(x.round() as i64)),
            ParamKind::Float { .. } => Some(ParamValue::Float(x)),
        }
    }

    /// Optuna's `distribution_json` for this parameter, so that Optuna's tools read our
    /// databases unchanged.
    pub fn optuna_distribution_json(&self) -> serde_json::Value {
        use serde_json::json;
        match &self.kind {
            ParamKind::Float {
                low,
                high,
                log,
                step,
            } => json!({
                "name": "FloatDistribution",
                "attributes": {"step": step, "low": low, "high": high, "log": log}
            }),
            ParamKind::Int {
                low,
                high,
                log,
                step,
            } => json!({
                "name": "IntDistribution",
                "attributes": {"log": log, "step": step, "low": low, "high": high}
            }),
            ParamKind::Categorical { choices } => json!({
                "name": "CategoricalDistribution",
                "attributes": {"choices": choices}
            }),
        }
    }
}

/// The transformed range of an integer parameter, padded by half a step on each side.
fn int_range(low: i64, high: i64, log: bool, step: i64) -> (f64, f64) {
    let half = step as f64 / 2.0;
    let (lo, hi) = (low as f64 - half, high as f64 + half);
    if log {
        // low >= 1 for log ints, so lo >= 0.5 > 0.
        (lo.max(0.5).ln(), hi.ln())
    } else {
        (lo, hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(src: &str) -> Result<Space, SpaceError> {
        let t: toml::Table = toml::from_str(src).expect("test TOML parses");
        Space::from_toml(t["space"].as_table().expect("has [space]"))
    }

    const SPEC_SPACE: &str = r#"
[space]
lr           = { type = "float", low = 1e-5, high = 1e-1, log = true }
weight_decay = { type = "float", low = 0.0, high = 0.1 }
optimizer    = { type = "categorical", choices = ["sgd", "adam", "adamw"] }
momentum     = { type = "float", low = 0.0, high = 0.99, when = { optimizer = "sgd" } }
batch_size   = { type = "int", low = 16, high = 512, log = true }
accumulation = { type = "int", low = 1, high = 8 }
layers       = { type = "int", low = 1, high = 6, step = 1 }
width        = { type = "categorical", choices = [64, 128, 256, 512] }
"#;

    #[test]
    fn the_spec_example_space_parses_with_parents_first() {
        let s = space(SPEC_SPACE).expect("valid");
        assert_eq!(s.len(), 8);
        let names: Vec<_> = s.params().iter().map(|p| p.name.as_str()).collect();
        let opt = names
            .iter()
            .position(|n| *n == "optimizer")
            .expect("present");
        let mom = names
            .iter()
            .position(|n| *n == "momentum")
            .expect("present");
        assert!(opt < mom);
    }

    #[test]
    fn from_unit_is_always_in_bounds_and_on_step() {
        let s = space(SPEC_SPACE).expect("valid");
        for i in 0..=200 {
            let u = i as f64 / 200.0;
            let p = s.from_unit(&vec![u; s.len()]);
            s.validate(&p).expect("every decoded point is valid");
        }
        let p = s.from_unit(&[f64::NAN, -3.0, 7.0, 0.5, 2.0, -1.0, 0.3, 0.99]);
        s.validate(&p).expect("clamped");
    }

    #[test]
    fn inactive_parameters_are_absent() {
        let s = space(SPEC_SPACE).expect("valid");
        // optimizer index 2 of 3 → "adamw", so momentum is inactive.
        let mut u = vec![0.5; s.len()];
        let iopt = s
            .params()
            .iter()
            .position(|p| p.name == "optimizer")
            .expect("present");
        u[iopt] = 0.9;
        let p = s.from_unit(&u);
        assert_eq!(p["optimizer"], ParamValue::Str("adamw".into()));
        assert!(!p.contains_key("momentum"));
        u[iopt] = 0.1;
        assert!(s.from_unit(&u).contains_key("momentum"));
    }

    #[test]
    fn unit_round_trip_keeps_values() {
        let s = space(SPEC_SPACE).expect("valid");
        for p in s.params() {
            for i in 0..50 {
                let v = p.from_unit(i as f64 / 49.0);
                let back = p.from_unit(p.to_unit(&v));
                assert!(
                    back.same(&v)
                        || (back
                            .as_f64()
                            .zip(v.as_f64())
                            .is_some_and(|(a, b)| (a - b).abs() < 1e-9 * b.abs().max(1.0))),
                    "{} {v} {back}",
                    p.name
                );
            }
        }
    }

    #[test]
    fn integers_get_equal_shares_of_the_unit_interval() {
        let s = space("[space]\nk = { type = \"int\", low = 1, high = 4 }").expect("valid");
        let p = &s.params()[0];
        let mut counts = [0; 4];
        for i in 0..4000 {
            if let ParamValue::Int(k) = p.from_unit((i as f64 + 0.5) / 4000.0) {
                counts[(k - 1) as usize] += 1;
            }
        }
        assert_eq!(counts, [1000; 4]);
    }

    #[test]
    fn float_steps_snap_to_the_grid() {
        let s = space("[space]\nx = { type = \"float\", low = 0.0, high = 1.0, step = 0.3 }")
            .expect("valid");
        let p = &s.params()[0];
        assert_eq!(p.from_unit(1.0), ParamValue::Float(0.9));
        assert_eq!(p.from_unit(0.16), ParamValue::Float(0.3));
        assert_eq!(p.grid_size(), Some(4));
    }

    #[test]
    fn bad_spaces_name_the_parameter() {
        let cases = [
            ("[space]", "no parameter"),
            ("[space]\nx = { type = \"weird\" }", "unknown type"),
            (
                "[space]\nx = { type = \"float\", low = 0.0, high = 1.0, lo = 3 }",
                "unknown key `lo`",
            ),
            (
                "[space]\nx = { type = \"float\", low = nan, high = 1.0 }",
                "finite",
            ),
            (
                "[space]\nx = { type = \"float\", low = 0.0, high = inf }",
                "finite",
            ),
            (
                "[space]\nx = { type = \"float\", low = 1.0, high = 1.0 }",
                "below",
            ),
            (
                "[space]\nx = { type = \"float\", low = 0.0, high = 1.0, log = true }",
                "log = true",
            ),
            (
                "[space]\nx = { type = \"int\", low = 0.5, high = 3 }",
                "integer",
            ),
            (
                "[space]\nx = { type = \"int\", low = 0, high = 3, step = 0 }",
                "positive",
            ),
            (
                "[space]\nx = { type = \"int\", low = 0, high = 3, step = 5 }",
                "larger",
            ),
            (
                "[space]\nx = { type = \"float\", low = 0.0, high = 1.0, step = -0.1 }",
                "positive",
            ),
            (
                "[space]\nx = { type = \"categorical\", choices = [] }",
                "empty",
            ),
            (
                "[space]\nx = { type = \"categorical\", choices = [1, \"a\"] }",
                "mix",
            ),
            (
                "[space]\nx = { type = \"float\", low = 0.0, high = 1.0, when = { y = 1 } }",
                "not a parameter",
            ),
            (
                "[space]\nx = { type = \"categorical\", choices = [1,2], when = { y = 1 } }\ny = { type = \"categorical\", choices = [1,2], when = { x = 1 } }",
                "cycle",
            ),
            (
                "[space]\nx = { type = \"float\", low = 0.0 }",
                "needs `high`",
            ),
            ("[space]\nx = 3", "must be a table"),
        ];
        for (src, want) in cases {
            let err = space(src).expect_err(src).to_string();
            assert!(err.contains(want), "{src}: got `{err}`, want `{want}`");
            if src != "[space]" {
                assert!(err.contains("`x`"), "{src}: {err}");
            }
        }
    }

    #[test]
    fn params_serialise_with_their_own_json_types() {
        let mut p = Params::new();
        p.insert("a".into(), ParamValue::Int(3));
        p.insert("b".into(), ParamValue::Float(0.5));
        p.insert("c".into(), ParamValue::Str("adam".into()));
        p.insert("d".into(), ParamValue::Bool(true));
        assert_eq!(
            serde_json::to_string(&p).expect("serialises"),
            r#"{"a":3,"b":0.5,"c":"adam","d":true}"#
        );
    }

    #[test]
    fn optuna_internal_repr_round_trips() {
        let s = space(SPEC_SPACE).expect("valid");
        let p = s.get("optimizer").expect("present");
        let v = ParamValue::Str("adamw".into());
        assert_eq!(p.to_internal(&v), 2.0);
        assert_eq!(p.from_internal(2.0), Some(v));
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn param_strategy() -> impl Strategy<Value = ParamKind> {
        prop_oneof![
            (
                -1e6f64..1e6,
                1e-6f64..1e6,
                any::<bool>(),
                prop::option::of(0.0f64..1.0)
            )
                .prop_map(|(low, span, log, step)| {
                    let low = if log { low.abs().max(1e-9) } else { low };
                    let high = low + span;
                    ParamKind::Float {
                        low,
                        high,
                        log,
                        step: step.map(|s| (s * span).max(span * 1e-3)),
                    }
                }),
            (-1000i64..1000, 1i64..5000, any::<bool>(), 1i64..50).prop_map(
                |(low, span, log, step)| {
                    let low = if log { low.abs().max(1) } else { low };
                    ParamKind::Int {
                        low,
                        high: low + span,
                        log,
                        step: step.min(span),
                    }
                }
            ),
            prop::collection::vec("[a-z]{1,6}", 1..6).prop_map(|mut v| {
                v.sort();
                v.dedup();
                ParamKind::Categorical {
                    choices: v.into_iter().map(ParamValue::Str).collect(),
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn any_unit_point_decodes_to_a_valid_value(kind in param_strategy(), u in prop::num::f64::ANY) {
            let p = Param { name: "x".into(), kind, when: vec![] };
            let v = p.from_unit(u);
            prop_assert!(p.admits(&v), "{v} not admitted by {}", p.describe());
            let back = p.from_unit(p.to_unit(&v));
            prop_assert!(p.admits(&back));
        }

        #[test]
        fn arbitrary_space_tables_never_panic(src in "[a-z =\\[\\]{}\",.0-9-]{0,120}") {
            if let Ok(t) = toml::from_str::<toml::Table>(&src) {
                let _ = Space::from_toml(&t);
            }
        }
    }
}
