//! How tune's values are stored, the same on every backend: a trial's status as Optuna's
//! columns (and tune's) hold it, a value with its `value_type` (infinities and NaN), a param
//! from its internal value and distribution, a time as Optuna's naive-UTC text.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::DATETIME_FORMAT;
use crate::space::{ParamValue, Params};
use crate::trial::{
    Direction, GpuTelemetry, Placement, Ran, Trial, TrialId, TrialNumber, TrialState, TrialStatus,
    WorkerId,
};

/// Optuna's spelling of a direction in `study_directions`. (A trial state's spelling is
/// [`TrialState::optuna`], beside the type.)
pub(crate) fn direction_text(d: Direction) -> &'static str {
    match d {
        Direction::Minimize => "MINIMIZE",
        Direction::Maximize => "MAXIMIZE",
    }
}

/// A direction back from `study_directions`: anything but "MAXIMIZE" (a missing row
/// included) minimizes, as Optuna's default does.
pub(crate) fn direction_of(text: Option<&str>) -> Direction {
    if text == Some(direction_text(Direction::Maximize)) {
        Direction::Maximize
    } else {
        Direction::Minimize
    }
}

/// A stored value back from Optuna's (value, value_type) pair: infinities and NaN are stored
/// as NULL with their type.
fn stored_value(value: Option<f64>, value_type: Option<&str>) -> Option<f64> {
    match value_type {
        Some("INF_POS") => Some(f64::INFINITY),
        Some("INF_NEG") => Some(f64::NEG_INFINITY),
        Some("NAN") => Some(f64::NAN),
        _ => value,
    }
}

/// Optuna's `value_type` of a value (its `value` column holds NULL unless the value is finite).
pub(crate) fn value_type(v: f64) -> &'static str {
    if v.is_nan() {
        "NAN"
    } else if v == f64::INFINITY {
        "INF_POS"
    } else if v == f64::NEG_INFINITY {
        "INF_NEG"
    } else {
        "FINITE"
    }
}

/// [`value_type`] where the column is PostgreSQL's `trialvaluetype` enum, which has no `NAN`: a
/// NaN (a failure upstream, which should never get here) is stored as a finite NULL.
pub(crate) fn value_type_without_nan(v: f64) -> &'static str {
    if v.is_nan() { "FINITE" } else { value_type(v) }
}

/// Decodes a stored param from Optuna's internal value and its parsed distribution, without
/// the study file (so that queries work on any database); a study has few distinct
/// distributions, so whole-study reads parse each once (a study has few distinct ones, so
/// whole-study reads parse each once).
pub(crate) fn decode_with(internal: f64, d: &serde_json::Value) -> Option<ParamValue> {
    match d.get("name")?.as_str()? {
        "CategoricalDistribution" => {
            let choices = d.get("attributes")?.get("choices")?.as_array()?;
            ParamValue::from_json(choices.get(internal as usize)?)
        }
        "IntDistribution" | "IntUniformDistribution" | "IntLogUniformDistribution" => {
            Some(ParamValue::Int(internal.round() as i64))
        }
        _ => Some(ParamValue::Float(internal)),
    }
}

/// Parses Optuna's naive-UTC `DATETIME` text.
pub fn parse_time(text: &str) -> Option<SystemTime> {
    let t = chrono::NaiveDateTime::parse_from_str(text, DATETIME_FORMAT)
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S"))
        .ok()?
        .and_utc();
    let micros = u64::try_from(t.timestamp_micros()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
}

/// A trial's row as every backend's trial query reads it (Optuna's `trials` and `trial_values`
/// row 0, tune's `tune_trials`, the worker's host, the last report's metrics), each column
/// already in Rust's types: the one place a row becomes a [`Trial`].
pub(crate) struct TrialRow {
    pub id: i64,
    pub number: i64,
    pub state: String,
    pub value: Option<f64>,
    pub value_type: Option<String>,
    pub started: Option<SystemTime>,
    pub finished: Option<SystemTime>,
    pub error: Option<String>,
    pub device: Option<String>,
    pub trial_dir: Option<String>,
    pub logs_json: Option<String>,
    pub log_tail: Option<String>,
    pub pruned_step: Option<i64>,
    pub interrupted: bool,
    /// The last report's metrics (JSON); `None` where the query does not read them.
    pub metrics_json: Option<String>,
    pub worker: Option<i64>,
    pub slot: Option<i64>,
    pub host: Option<String>,
    pub discarded: bool,
    pub gpu: Option<GpuTelemetry>,
}

impl TrialRow {
    pub(crate) fn into_trial(self, params: Params) -> Trial {
        let status = StoredStatus {
            state: TrialState::from_optuna(&self.state).unwrap_or(TrialState::Failed),
            value: stored_value(self.value, self.value_type.as_deref()),
            error: self.error,
            log_tail: self.log_tail,
            pruned_step: self.pruned_step.map(|s| s.max(0) as u64),
            interrupted: self.interrupted,
            at: Placement {
                worker: self.worker.map(WorkerId),
                slot: self.slot.map(|s| s.max(0) as usize),
                device: self.device,
                host: self.host,
            },
            started: self.started,
            finished: self.finished,
            gpu: self.gpu,
        };
        Trial {
            id: TrialId(self.id),
            number: TrialNumber(self.number.max(0) as u64),
            params,
            status: status.into_status(),
            trial_dir: self.trial_dir.map(PathBuf::from),
            logs: self
                .logs_json
                .and_then(|l| serde_json::from_str::<Vec<PathBuf>>(&l).ok())
                .unwrap_or_default(),
            metrics: self
                .metrics_json
                .map(|m| super::metrics_from_json(&m))
                .unwrap_or_default(),
            discarded: self.discarded,
        }
    }
}

/// A trial's state as its columns hold it, before it becomes a [`TrialStatus`]: the one
/// mapping from Optuna's rows (and tune's) to the lifecycle.
struct StoredStatus {
    pub state: TrialState,
    pub value: Option<f64>,
    pub error: Option<String>,
    pub log_tail: Option<String>,
    pub pruned_step: Option<u64>,
    pub interrupted: bool,
    pub at: Placement,
    pub started: Option<std::time::SystemTime>,
    pub finished: Option<std::time::SystemTime>,
    pub gpu: Option<GpuTelemetry>,
}

impl StoredStatus {
    fn into_status(self) -> TrialStatus {
        let ran = Ran {
            at: self.at.clone(),
            started: self.started,
            finished: self.finished,
            gpu: self.gpu,
        };
        match self.state {
            TrialState::Queued => TrialStatus::Queued,
            TrialState::Running => TrialStatus::Running {
                at: self.at,
                started: self.started,
            },
            // A complete trial without a value (written by another tool) reads as NaN, which
            // samplers treat as a failure.
            TrialState::Complete => TrialStatus::Complete {
                others: Vec::new(),
                value: self.value.unwrap_or(f64::NAN),
                ran,
            },
            // A pruned trial stopped through no fault of its own is paused (resumable).
            TrialState::Pruned => TrialStatus::Pruned {
                value: self.value,
                step: self.pruned_step,
                reason: self.error,
                paused: self.interrupted,
                ran,
            },
            TrialState::Failed => TrialStatus::Failed {
                reason: self.error.unwrap_or_else(|| "failed".into()),
                log_tail: self.log_tail,
                interrupted: self.interrupted,
                ran,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_keep_their_type_and_postgresql_has_no_nan_type() {
        for (v, t) in [
            (0.5, "FINITE"),
            (f64::INFINITY, "INF_POS"),
            (f64::NEG_INFINITY, "INF_NEG"),
            (f64::NAN, "NAN"),
        ] {
            assert_eq!(value_type(v), t);
            let back = stored_value(v.is_finite().then_some(v), Some(t)).expect("a value");
            assert!(
                back == v || (back.is_nan() && v.is_nan()),
                "{v} read back as {back}"
            );
        }
        assert_eq!(value_type_without_nan(f64::NAN), "FINITE");
        assert_eq!(value_type_without_nan(f64::INFINITY), "INF_POS");
    }

    #[test]
    fn optuna_datetimes_parse_to_system_time() {
        let t = parse_time("2026-11-22 02:42:01.500000").expect("parses");
        let s = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after the epoch")
            .as_secs_f64();
        assert_eq!(s, 1_795_315_321.5);
        assert!(parse_time("yesterday").is_none());
    }
}
