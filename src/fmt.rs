//! Numbers, params and durations written for people: one place, so the CLI, the line printer
//! and the UI write them alike.

use std::time::Duration;

/// A number for people: up to 6 significant digits.
pub fn fmt_value(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(0.0) => "0".into(),
        Some(x) if !x.is_finite() => format!("{x}"),
        Some(x) if x.abs() >= 1e-4 && x.abs() < 1e6 => {
            let s = format!(
                "{:.*}",
                (5 - x.abs().log10().floor() as i32).clamp(0, 10) as usize,
                x
            );
            if s.contains('.') {
                s.trim_end_matches('0').trim_end_matches('.').to_string()
            } else {
                s
            }
        }
        Some(x) => format!("{x:.4e}"),
    }
}

/// One param's value for people: a float in up to 6 significant digits (a sampled
/// `0.20127142100802745` reads `0.201271`, `0.1 + 0.2` reads `0.3`), anything else as written.
/// The exact value stays in `tune trials --format json`.
pub fn fmt_param(v: &crate::space::ParamValue) -> String {
    match v {
        crate::space::ParamValue::Float(x) => fmt_value(Some(*x)),
        other => other.to_string(),
    }
}

/// `k=v k=v` for a table cell.
pub fn fmt_params(p: &crate::space::Params) -> String {
    p.iter()
        .map(|(k, v)| format!("{k}={}", fmt_param(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A duration in its two largest units: `42s`, `3m07s`, `2h05m`, `1d03h`.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86400, (s % 86400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::space::ParamValue;

    #[rstest]
    #[case::a_sampled_float(ParamValue::Float(0.20127142100802745), "0.201271")]
    #[case::binary_noise_of_a_sum(ParamValue::Float(0.1 + 0.2), "0.3")]
    #[case::a_small_learning_rate(ParamValue::Float(0.001160426700592016), "0.00116043")]
    #[case::a_bound(ParamValue::Float(0.0), "0")]
    #[case::a_round_float(ParamValue::Float(1.0), "1")]
    #[case::an_int(ParamValue::Int(128), "128")]
    #[case::a_choice(ParamValue::Str("adamw".into()), "adamw")]
    fn a_param_reads_in_six_significant_digits_not_its_binary_noise(
        #[case] v: ParamValue,
        #[case] text: &str,
    ) {
        assert_eq!(fmt_param(&v), text);
    }
}
