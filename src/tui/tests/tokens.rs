//! Params and values that do not fit: long param names in the header and the worker rows, and
//! a trials table that never cuts a number, a state word or a param's value.

use super::*;

fn long_params(n: u64) -> crate::space::Params {
    use crate::space::ParamValue;
    let mut p = params(n);
    p.insert(
        "learning_rate_warmup".into(),
        ParamValue::Int(500 + n as i64),
    );
    p.insert("label_smoothing".into(), ParamValue::Float(0.05));
    p.insert("weight_decay".into(), ParamValue::Float(3.2e-4));
    p
}

/// A study whose trials have seven params with long names.
fn long_params_state() -> UiState {
    let mut s = fresh(Direction::Minimize, Some(10));
    for n in 0..4 {
        let mut t = summary(n, TrialState::Complete, Some(0.5 - 0.1 * n as f64));
        t.params = long_params(n);
        s.apply(&Event::TrialFinished {
            slot: 0,
            trial: t,
            at: t0(),
            study_best: None,
        });
    }
    s.apply(&Event::TrialStarted {
        number: TrialNumber(4),
        slot: 1,
        device: "cpu".into(),
        params: long_params(4),
        at: t0(),
    });
    s
}

#[test]
fn the_best_trials_params_are_never_cut_mid_word() {
    let s = long_params_state();
    let best = s.best_trial().expect("a best trial");
    let items: Vec<String> = best.params.keys().cloned().collect();
    for w in 80..=200 {
        let text = screen(&s, w, 24);
        let line = text.lines().nth(2).expect("the header's third line");
        let after = line
            .split("0.20000")
            .nth(1)
            .unwrap_or_else(|| panic!("no best value at {w}: {line}"));
        for token in after
            .trim_matches(|c| c == '"' || c == ' ')
            .split_whitespace()
        {
            let whole = token
                .split_once('=')
                .is_some_and(|(k, v)| items.iter().any(|i| i == k) && !v.is_empty());
            let more = token.starts_with('+') && token[1..].parse::<u32>().is_ok();
            assert!(
                whole || more || token == "more",
                "{token:?} is a cut item at width {w}: {line}"
            );
        }
    }
    // The worker rows keep whole items too.
    let text = screen(&s, 80, 24);
    let row = text
        .lines()
        .find(|l| l.contains("#4 "))
        .expect("slot 1's row");
    assert!(row.contains("batch_size=128 +6"), "{row}");
}

#[test]
fn snapshot_long_params_80x24() {
    insta::assert_snapshot!(screen(&long_params_state(), 80, 24));
}

#[test]
fn snapshot_long_params_120x30() {
    insta::assert_snapshot!(screen(&long_params_state(), 120, 30));
}

/// Params of every awkward shape: tiny and huge floats, negatives, a long categorical string,
/// a long int, a bool, and more of them than any screen has columns for.
fn awkward_params(n: u64) -> crate::space::Params {
    use crate::space::ParamValue;
    let k = n as f64;
    let mut p = crate::space::Params::new();
    p.insert("lr".into(), ParamValue::Float(1.99e-4 * (1.0 + k)));
    p.insert(
        "weight_decay".into(),
        ParamValue::Float(-5.44e-7 * (1.0 + k)),
    );
    p.insert("scale".into(), ParamValue::Float(-3.2e12 * (1.0 + k)));
    p.insert("eps".into(), ParamValue::Float(2.5e-300));
    p.insert(
        "seed_offset".into(),
        ParamValue::Int(-1_234_567_890_123 - n as i64),
    );
    p.insert(
        "optimizer".into(),
        ParamValue::Str(
            ["adamw_with_decoupled_weight_decay_and_amsgrad", "sgd"][n as usize % 2].into(),
        ),
    );
    p.insert("activation".into(), ParamValue::Str("leaky_relu".into()));
    p.insert("batch_size".into(), ParamValue::Int(4096));
    p.insert(
        "use_batch_norm".into(),
        ParamValue::Bool(n.is_multiple_of(2)),
    );
    p.insert("momentum".into(), ParamValue::Float(0.9));
    p.insert("label_smoothing_factor".into(), ParamValue::Float(0.05 * k));
    p
}

/// A study of complete, pruned and failed trials with values from tiny to huge, negative and
/// NaN, and two running ones that have reported (their value in parentheses).
fn awkward_state() -> UiState {
    let values = [
        1.99e-4,
        -5.44e-7,
        3.2e12,
        -0.123456,
        1e-300,
        12345.678,
        -98765432.1,
        f64::NAN,
    ];
    let mut s = fresh(Direction::Minimize, Some(40));
    for (n, v) in values.iter().enumerate() {
        let n = n as u64;
        let state = [TrialState::Complete, TrialState::Pruned, TrialState::Failed][n as usize % 3];
        let mut t = failed_with(
            n,
            state,
            Some(*v),
            "exited with status 1: RuntimeError: CUDA out of memory while allocating 2.00 GiB",
        );
        t.params = awkward_params(n);
        s.apply(&Event::TrialFinished {
            slot: 0,
            trial: t,
            at: t0(),
            study_best: None,
        });
    }
    for (k, v) in [0.13456789, -7.77e-9].iter().enumerate() {
        let n = values.len() as u64 + k as u64;
        s.apply(&Event::TrialStarted {
            number: TrialNumber(n),
            slot: k,
            device: "cpu".into(),
            params: awkward_params(n),
            at: t0(),
        });
        let mut m = BTreeMap::new();
        m.insert("val_loss".into(), *v);
        s.apply(&Event::TrialReported {
            number: TrialNumber(n),
            slot: k,
            report: Report {
                step: 3,
                metrics: m,
            },
        });
    }
    s
}

/// The tokens of the trials table on a `w`×`h` screen that are not whole: every token of a row
/// must be a whole token of some cell of the state (a number, a state word, a param's value) or
/// of a column title; only prose and titles may be shortened, and then only with `…`.
fn cut_tokens(s: &UiState, w: u16, h: u16) -> Vec<String> {
    let cols = s.columns();
    let mut whole: BTreeSet<String> = BTreeSet::new();
    let mut prose: BTreeSet<String> = BTreeSet::new();
    for t in &s.trials {
        for c in &cols {
            let text = view::cell_text(c, t, s);
            let into = if matches!(c, Column::Why) {
                &mut prose
            } else {
                &mut whole
            };
            into.extend(text.split_whitespace().map(str::to_string));
        }
    }
    for c in &cols {
        prose.insert(c.title().to_string());
        whole.insert(c.title().to_string());
    }
    let text = screen(s, w, h);
    let lines: Vec<&str> = text.lines().map(|l| l.trim_matches('"')).collect();
    let top = lines
        .iter()
        .position(|l| l.starts_with(" Trials "))
        .expect("the trials table's title");
    let mut bad = Vec::new();
    for line in &lines[top + 1..lines.len() - 1] {
        for token in line.split_whitespace() {
            let token = token.trim_start_matches('▸');
            let token = token.trim_end_matches(['▲', '▼']);
            if token.is_empty() || whole.contains(token) || prose.contains(token) {
                continue;
            }
            let shortened = token
                .strip_suffix('…')
                .is_some_and(|stem| !stem.is_empty() && prose.iter().any(|p| p.starts_with(stem)));
            if !shortened {
                bad.push(format!("{token:?} at {w}x{h}: {line}"));
            }
        }
    }
    bad
}

#[test]
fn the_trials_table_never_cuts_a_number_or_a_state_word_at_any_width() {
    let mut s = awkward_state();
    for sort in [0, 2, 5, 8] {
        s.table.sort = sort;
        for w in (40..=200).step_by(4).chain([60, 80, 100, 120]) {
            for h in [24, 40] {
                let bad = cut_tokens(&s, w, h);
                assert!(bad.is_empty(), "cut tokens:\n{}", bad.join("\n"));
            }
        }
    }
}

#[test]
fn the_trials_table_of_the_long_params_study_never_cuts_a_token() {
    let s = long_params_state();
    for w in [60, 80, 100, 120] {
        let bad = cut_tokens(&s, w, 24);
        assert!(bad.is_empty(), "cut tokens:\n{}", bad.join("\n"));
    }
}

#[test]
fn the_trials_table_leaves_whole_columns_out_and_says_so() {
    let s = awkward_state();
    let narrow = screen(&s, 80, 24);
    assert!(narrow.contains("columns left out"), "{narrow}");
    // The number, the state and the value always stay; the sorted-by param stays too.
    let mut sorted = s.clone();
    let lr = sorted
        .columns()
        .iter()
        .position(|c| matches!(c, Column::Param(p) if p == "scale"))
        .expect("a scale column");
    sorted.table.sort = lr;
    let text = screen(&sorted, 80, 24);
    let header = text
        .lines()
        .find(|l| l.contains(" # ") || l.contains(" #▲") || l.contains(" #▼"))
        .unwrap_or_default();
    assert!(header.contains("scale"), "{text}");
    for word in ["state", "value"] {
        assert!(header.contains(word), "{header}");
    }
}

#[test]
fn snapshot_awkward_values_80x24() {
    insta::assert_snapshot!(screen(&awkward_state(), 80, 24));
}

#[test]
fn snapshot_awkward_values_120x30() {
    insta::assert_snapshot!(screen(&awkward_state(), 120, 30));
}
