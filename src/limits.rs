//! The bounds every number and duration a user gives must fit in, and the one parser of
//! durations (study file, builtin trial, command-line flags). A leaf: it imports nothing of
//! `tune`, so `spec`, `builtin`, `runner` and `commands` all check against the same limits.
//!
//! Hazard these prevent: a value that parses but overflows later, far from where it was
//! written: `Instant::now() + timeout` and `DateTime - TimeDelta` panic past their range, and a
//! `u64` step stored in an `i64` column comes back negative. Each is refused where it is read.

use std::time::Duration;

/// The longest duration anything accepts: 10 years (humantime's `"10y"`, 365.25 days each).
/// Far past any study, and far inside what an `Instant` or a `chrono::DateTime` can add.
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 31_557_600);

/// How `MAX_DURATION` reads in messages.
pub const MAX_DURATION_TEXT: &str = "10y";

/// The largest report step (and trial number): what the database's 64-bit signed columns hold.
pub const MAX_STEP: u64 = i64::MAX as u64;

/// A duration refused by [`duration`]. `what` names the key or flag it was given to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// A plain number of seconds that is zero, negative or NaN.
    #[error("{what}: {text:?} must be longer than zero (e.g. \"90s\", \"20m\", \"1h\")")]
    NotPositive { what: String, text: String },
    /// Neither a number nor something humantime reads (`reason` is humantime's word).
    #[error(
        "{what}: {text:?} is not a duration ({reason}); write e.g. \"90s\", \"20m\", \"1h\", at most {MAX_DURATION_TEXT}"
    )]
    NotADuration {
        what: String,
        text: String,
        reason: String,
    },
    /// A duration that reads as zero (`"0s"`).
    #[error("{what}: {text:?} must be longer than zero")]
    Zero { what: String, text: String },
    /// Past [`MAX_DURATION`].
    #[error(
        "{what}: {text:?} is longer than the longest duration tune accepts, {MAX_DURATION_TEXT} ({} s)",
        MAX_DURATION.as_secs()
    )]
    TooLong { what: String, text: String },
}

/// Parses a duration such as `"90s"`, `"20m"`, `"1h 30m"` or a number of seconds (`"90"`,
/// `"0.5"`), longer than zero and at most [`MAX_DURATION`]. `what` names the key or flag in the
/// message (`` key `study.timeout` `` or `--wait`).
pub fn duration(what: &str, text: &str) -> Result<Duration, DurationError> {
    let (what, t) = (what.to_string(), text.trim());
    let text = text.to_string();
    let d = if let Ok(secs) = t.parse::<f64>() {
        if secs.is_nan() || secs <= 0.0 {
            return Err(DurationError::NotPositive { what, text });
        }
        // Past the bound (or past what a Duration holds at all): the same refusal below.
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    } else {
        // humantime refuses "999999999999y" itself ("number is too large").
        match humantime::parse_duration(t) {
            Ok(d) => d,
            Err(e) => {
                return Err(DurationError::NotADuration {
                    what,
                    text,
                    reason: e.to_string(),
                });
            }
        }
    };
    if d.is_zero() {
        return Err(DurationError::Zero { what, text });
    }
    if d > MAX_DURATION {
        return Err(DurationError::TooLong { what, text });
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_within_bounds_and_refuse_the_rest_by_name() {
        assert_eq!(duration("k", "90s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("k", "0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("k", "10y"), Ok(MAX_DURATION));
        for bad in [
            "0",
            "-1",
            "0s",
            "nan",
            "-inf",
            "inf",
            "1e30",
            "18446744073709551615",
            "18446744073709551616",
            "999999999999y",
            "11y",
            "soon",
            "",
        ] {
            let e = duration("key `k`", bad).expect_err(bad).to_string();
            assert!(e.starts_with("key `k`: "), "{bad}: {e}");
        }
        assert!(
            duration("k", "11y")
                .unwrap_err()
                .to_string()
                .contains("10y")
        );
    }
}
