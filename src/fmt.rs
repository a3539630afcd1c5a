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

/// `k=v k=v` for a table cell.
pub fn fmt_params(p: &crate::space::Params) -> String {
    p.iter()
        .map(|(k, v)| match v {
            crate::space::ParamValue::Float(x) => format!("{k}={}", fmt_value(Some(*x))),
            other => format!("{k}={other}"),
        })
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
