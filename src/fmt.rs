//! Numbers, params and durations written for people: one place, so the CLI, the line printer
//! and the UI write them alike.

use std::time::Duration;

/// How a number is written: how many significant digits, where it turns to exponent form and
/// whether trailing zeros go. One algorithm ([`Precision::fmt`]) with a few named settings, so
/// the CLI and the UI cannot drift apart on NaN, zero or the exponent form; the settings differ
/// only where the room differs (a table cell, an axis label).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Precision {
    /// Significant digits in fixed form.
    digits: i32,
    /// Fixed form for magnitudes in `[lo, hi)`, exponent form outside.
    fixed: (f64, f64),
    /// At most this many decimals in fixed form (fewer digits near the range's low end).
    max_decimals: i32,
    /// Decimals of the mantissa in exponent form.
    exp_decimals: usize,
    /// Trailing zeros (and a bare `.`) removed in fixed form.
    trim: bool,
    /// Trailing zeros removed from the mantissa in exponent form (`1.5e5`, `1e5`).
    trim_exp: bool,
}

impl Precision {
    /// Six significant digits, no trailing zeros: the CLI, the line printer, a trial's params.
    pub const FULL: Precision = Precision {
        digits: 6,
        fixed: (1e-4, 1e6),
        max_decimals: 10,
        exp_decimals: 4,
        trim: true,
        trim_exp: false,
    };
    /// About five significant digits with the zeros kept, so that values in a column line up
    /// by their digits: the UI's table cells and value readouts.
    pub const CELL: Precision = Precision {
        digits: 5,
        fixed: (1e-3, 1e5),
        max_decimals: 6,
        exp_decimals: 3,
        trim: false,
        trim_exp: false,
    };
    /// Three significant digits, no trailing zeros: the UI's axis labels and params in rows
    /// that share their width with other columns.
    pub const LABEL: Precision = Precision {
        digits: 3,
        fixed: (1e-2, 1e4),
        max_decimals: 4,
        exp_decimals: 2,
        trim: true,
        trim_exp: true,
    };

    /// `v` at this precision; NaN and the infinities as Rust writes them (`NaN`, `inf`,
    /// `-inf`), zero as `0`.
    pub fn fmt(self, v: f64) -> String {
        if !v.is_finite() {
            return format!("{v}");
        }
        let a = v.abs();
        if a == 0.0 {
            return "0".into();
        }
        if (self.fixed.0..self.fixed.1).contains(&a) {
            let decimals =
                (self.digits - 1 - a.log10().floor() as i32).clamp(0, self.max_decimals) as usize;
            let s = format!("{v:.decimals$}");
            return if self.trim { trim_zeros(&s) } else { s };
        }
        let d = self.exp_decimals;
        let s = format!("{v:.d$e}");
        match s.split_once('e') {
            Some((mantissa, exp)) if self.trim_exp => format!("{}e{exp}", trim_zeros(mantissa)),
            _ => s,
        }
    }

    /// One param's value: a float at this precision, anything else as written.
    pub fn param(self, v: &crate::space::ParamValue) -> String {
        match v {
            crate::space::ParamValue::Float(x) => self.fmt(*x),
            other => other.to_string(),
        }
    }
}

/// `1.500` as `1.5`, `2.000` as `2`; a number without a `.` as it is.
fn trim_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

/// A number for people at [`Precision::FULL`]: up to 6 significant digits; `-` for none.
pub fn fmt_value(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) => Precision::FULL.fmt(x),
    }
}

/// One param's value for people: a float in up to 6 significant digits (a sampled
/// `0.20127142100802745` reads `0.201271`, `0.1 + 0.2` reads `0.3`), anything else as written.
/// The exact value stays in `tune trials --format json`.
pub fn fmt_param(v: &crate::space::ParamValue) -> String {
    Precision::FULL.param(v)
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

/// A rate: `950`, `12.3k`, `4.1M`.
pub fn fmt_rate(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// A count that stays narrow: `3`, `3.4` (an epoch part way), `1874`, `18.7k`.
pub fn fmt_count(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v.abs() >= 1e4 {
        return fmt_rate(v);
    }
    if (v - v.round()).abs() < 0.05 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.1}")
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

    #[rstest]
    #[case::full_trims_its_zeros(Precision::FULL, 0.5, "0.5")]
    #[case::full_switches_to_exponents_at_a_million(Precision::FULL, 1.5e6, "1.5000e6")]
    #[case::cell_keeps_its_zeros_so_a_column_lines_up(Precision::CELL, 0.5, "0.50000")]
    #[case::cell_stops_at_six_decimals(Precision::CELL, 0.00123456, "0.001235")]
    #[case::cell_switches_to_exponents_at_a_hundred_thousand(Precision::CELL, 1.5e5, "1.500e5")]
    #[case::label_in_three_digits(Precision::LABEL, 1234.5, "1234")]
    #[case::label_trims_its_exponent_form(Precision::LABEL, 1.5e-3, "1.5e-3")]
    #[case::label_of_a_round_power(Precision::LABEL, 1e5, "1e5")]
    #[case::negative_zero_is_zero(Precision::CELL, -0.0, "0")]
    #[case::nan_as_rust_writes_it(Precision::LABEL, f64::NAN, "NaN")]
    #[case::minus_infinity(Precision::CELL, f64::NEG_INFINITY, "-inf")]
    fn each_precision_writes_a_number_its_own_way(
        #[case] p: Precision,
        #[case] v: f64,
        #[case] text: &str,
    ) {
        assert_eq!(p.fmt(v), text);
    }
}
