use std::time::{Duration, SystemTime};

use super::figures::front;
use super::*;
use crate::space::{Param, ParamKind, ParamValue, Params};
use crate::trial::{Placement, Ran, TrialStatus, WorkerId};

fn space() -> Space {
    Space::new(vec![
        Param {
            name: "lr".into(),
            kind: ParamKind::Float {
                low: 1e-4,
                high: 1e-1,
                log: true,
                step: None,
            },
            when: Vec::new(),
        },
        Param {
            name: "opt".into(),
            kind: ParamKind::Categorical {
                choices: vec![
                    ParamValue::Str("adam".into()),
                    ParamValue::Str("sgd".into()),
                ],
            },
            when: Vec::new(),
        },
    ])
    .expect("a valid space")
}

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// Trial `n` of a synthetic study: lr sweeps its range, every 7th is pruned, every 11th fails,
/// on one of four slots, one second each.
fn trial(n: u64) -> Trial {
    let lr = 1e-4 * 1000f64.powf((n % 97) as f64 / 96.0);
    let params = Params::from([
        ("lr".to_string(), ParamValue::Float(lr)),
        (
            "opt".to_string(),
            ParamValue::Str(if n.is_multiple_of(2) { "adam" } else { "sgd" }.into()),
        ),
    ]);
    let at = Placement {
        worker: Some(WorkerId(1)),
        slot: Some((n % 4) as usize),
        device: Some("cpu".into()),
        host: None,
    };
    let ran = Ran::span(
        at,
        t0() + Duration::from_secs(n / 4),
        Duration::from_secs(1),
    );
    let value = (lr.log10() + 2.5).powi(2);
    let status = if n.is_multiple_of(11) {
        TrialStatus::Failed {
            reason: "exited with status 1".into(),
            log_tail: Some("RuntimeError: CUDA out of memory".into()),
            interrupted: false,
            ran,
        }
    } else if n.is_multiple_of(7) {
        TrialStatus::Pruned {
            value: Some(value + 1.0),
            step: Some(3),
            reason: None,
            paused: false,
            ran,
        }
    } else {
        TrialStatus::Complete {
            value,
            others: vec![1.0 / (1.0 + value)],
            ran,
        }
    };
    Trial::unstored(TrialNumber(n), params, status)
}

fn view(n: u64, multi: bool) -> StudyView {
    let trials: Vec<Trial> = (0..n).map(trial).collect();
    let curves = (0..n)
        .map(|i| {
            (
                TrialNumber(i),
                (0..20u64)
                    .map(|s| (s, 1.0 + 1.0 / (s + 1) as f64))
                    .collect(),
            )
        })
        .collect();
    let mut objectives = vec![Objective {
        metric: "loss".into(),
        direction: Direction::Minimize,
    }];
    if multi {
        objectives.push(Objective {
            metric: "cost".into(),
            direction: Direction::Minimize,
        });
    }
    StudyView::new(
        "synthetic",
        objectives,
        Some(space()),
        trials,
        curves,
        t0() + Duration::from_secs(n),
    )
}

const ALL: [Figure; 10] = [
    Figure::History,
    Figure::Importance,
    Figure::Slice(Vec::new()),
    Figure::Contour(None),
    Figure::Parallel,
    Figure::CurvesBest,
    Figure::CurvesPruned,
    Figure::Pareto,
    Figure::Timeline,
    Figure::Failures,
];

#[test]
fn thin_keeps_everything_that_fits_and_always_the_best_half() {
    let v: Vec<f64> = (0..10).map(|i| i as f64).collect();
    assert_eq!(thin(&v, |x| *x, 10), v);
    let big: Vec<f64> = (0..10_000).rev().map(|i| i as f64).collect();
    let kept = thin(&big, |x| *x, 2000);
    assert!(kept.len() <= 2000, "{}", kept.len());
    assert!(kept.len() >= 1900, "{}", kept.len());
    for best in 0..1000 {
        assert!(kept.contains(&(best as f64)), "lost the {best}th best");
    }
    // In the input's order.
    assert!(kept.windows(2).all(|w| w[0] > w[1]));
}

#[test]
fn stride_keeps_the_last_point_of_a_curve() {
    let v: Vec<u32> = (0..1000).collect();
    let s = stride(&v, 200);
    assert!(s.len() <= 201, "{}", s.len());
    assert_eq!(s.first(), Some(&0));
    assert_eq!(s.last(), Some(&999));
    assert_eq!(stride(&v[..5], 200), v[..5].to_vec());
}

#[test]
fn the_pareto_front_is_the_non_dominated_trials() {
    let l = vec![
        vec![1.0, 5.0],
        vec![2.0, 2.0],
        vec![3.0, 3.0], // dominated by [2, 2]
        vec![5.0, 1.0],
        vec![2.0, 2.0], // a duplicate counts once
    ];
    let mut f = front(&l);
    f.sort_unstable();
    assert_eq!(f, vec![0, 1, 3]);
}

#[test]
fn axes_place_log_and_categorical_values_and_label_them() {
    let s = space();
    let lr = ParamAxis::of(s.get("lr").expect("lr"));
    assert_eq!(lr.pos(&ParamValue::Float(1e-2)), Some(-2.0));
    assert_eq!(lr.pos(&ParamValue::Float(-1.0)), None);
    assert_eq!(lr.label(-2.0), "0.01");
    assert_eq!(lr.title(), "lr (log)");
    let opt = ParamAxis::of(s.get("opt").expect("opt"));
    assert_eq!(opt.pos(&ParamValue::Str("sgd".into())), Some(1.0));
    assert_eq!(opt.pos(&ParamValue::Str("rmsprop".into())), None);
    assert_eq!(opt.label(1.0), "sgd");
    assert_eq!(opt.label(0.5), "");
}

#[test]
fn every_figure_of_an_empty_study_says_why_it_is_empty() {
    let v = StudyView::new(
        "empty",
        vec![Objective {
            metric: "loss".into(),
            direction: Direction::Minimize,
        }],
        None,
        Vec::new(),
        BTreeMap::new(),
        t0(),
    );
    for f in ALL {
        let svg = svg(&v, &f, SIZE).expect("an empty figure draws");
        assert!(
            [
                "no complete trials yet",
                "no parameters yet",
                "no pruned trials",
                "no Pareto front",
                "no trial has started yet",
                "no failed trials",
                "needs two parameters",
            ]
            .iter()
            .any(|w| svg.contains(w)),
            "{f:?}: {svg}"
        );
    }
}

#[test]
fn a_complete_trial_with_a_nan_value_is_left_out_and_counted() {
    let mut trials: Vec<Trial> = (1..6).map(trial).collect();
    trials.push(Trial::unstored(
        TrialNumber(6),
        trial(6).params,
        TrialStatus::Complete {
            value: f64::NAN,
            others: vec![],
            ran: Ran::default(),
        },
    ));
    let v = StudyView::new(
        "nan",
        vec![Objective {
            metric: "loss".into(),
            direction: Direction::Minimize,
        }],
        Some(space()),
        trials,
        BTreeMap::new(),
        t0(),
    );
    let svg = svg(&v, &Figure::History, SIZE).expect("draws");
    assert!(
        svg.contains("1 complete trial without a finite value not drawn"),
        "{svg}"
    );
    for f in ALL {
        let s = super::svg(&v, &f, SIZE).expect("draws");
        assert!(!s.contains("=\"NaN"), "{f:?}");
    }
}

/// 10 000 trials with 20-step curves: every figure stays small (downsampled) and says what it
/// left out. (How fast: `tune bench report`, BENCHMARKS.md, not a timed test.)
#[test]
fn ten_thousand_trials_draw_every_figure_small() {
    let v = view(10_000, true);
    for f in ALL {
        let s = svg(&v, &f, SIZE).expect("draws");
        assert!(s.len() < 1_500_000, "{f:?}: {} bytes", s.len());
    }
    let history = svg(&v, &Figure::History, SIZE).expect("draws");
    assert!(history.contains("drawn: the best half"), "{history}");
    let timeline = svg(&v, &Figure::Timeline, SIZE).expect("draws");
    assert!(timeline.contains("merged"), "{timeline}");
}

#[test]
fn a_png_is_a_png() {
    let v = view(50, false);
    let b = png(&v, &Figure::History, (400, 300)).expect("draws");
    assert!(b.starts_with(b"\x89PNG\r\n\x1a\n"));
}

#[test]
fn a_parameter_the_study_lacks_is_named_with_those_it_has() {
    let v = view(10, false);
    let e = svg(&v, &Figure::Slice(vec!["momentum".into()]), SIZE).expect_err("refused");
    assert_eq!(
        e.to_string(),
        "the study has no parameter `momentum` (it has `lr`, `opt`)"
    );
}

/// The contour's cells without a trial are interpolated from those with one (inverse distance,
/// in rank), in bands; across a categorical axis a cell learns only from its own choice.
#[test]
fn contour_cells_without_a_trial_are_interpolated_along_numeric_axes_only() {
    use std::collections::BTreeMap;
    let level = |grid: &[((usize, usize), f64)], k: (usize, usize)| {
        grid.iter().find(|(c, _)| *c == k).map(|(_, r)| *r)
    };
    let best = BTreeMap::from([((0, 0), 0.2), ((4, 0), 7.0)]);
    let grid = super::figures::contour_grid(&best, (5, 1), (false, false));
    assert_eq!(grid.len(), 5, "every cell is drawn");
    assert_eq!(level(&grid, (0, 0)), Some(0.0), "the best cell");
    assert_eq!(level(&grid, (4, 0)), Some(1.0), "the worst cell");
    // Halfway: 0.5, in band 5 of 0..=9; next to the best: 0.1, band 1.
    assert_eq!(level(&grid, (2, 0)), Some(5.0 / 9.0));
    assert_eq!(level(&grid, (1, 0)), Some(1.0 / 9.0));
    // A categorical x: choice 1 has no trial, so its column stays empty; choice 0's cells
    // learn from choice 0's trial only.
    let best = BTreeMap::from([((0, 0), 0.2)]);
    let grid = super::figures::contour_grid(&best, (2, 3), (true, false));
    let cells: Vec<(usize, usize)> = grid.iter().map(|(c, _)| *c).collect();
    assert_eq!(cells, vec![(0, 0), (0, 1), (0, 2)]);
}
