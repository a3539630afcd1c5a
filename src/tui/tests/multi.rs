//! Multi-objective studies: the Pareto front drawn and listed.

use super::*;

/// A study with objectives val_loss (min) and `others`, whose complete trials are `values`.
fn multi(others: &[(&str, Direction)], values: &[Vec<f64>]) -> UiState {
    let mut s = UiState::new(Mode::Live, false, t0());
    let mut i = info(Some(20), 2);
    i.others = others
        .iter()
        .map(|(m, d)| crate::trial::Objective {
            metric: m.to_string(),
            direction: *d,
        })
        .collect();
    let ran = Ran::span(Placement::default(), t0(), Duration::from_secs(10));
    let existing = values
        .iter()
        .enumerate()
        .map(|(n, v)| {
            Trial::unstored(
                TrialNumber(n as u64),
                params(n as u64),
                TrialStatus::Complete {
                    value: v[0],
                    others: v[1..].to_vec(),
                    ran: ran.clone(),
                },
            )
        })
        .collect();
    s.apply(&Event::StudyStarted {
        info: i,
        existing,
        at: t0(),
    });
    s
}

#[test]
fn a_two_objective_study_draws_its_trials_with_the_pareto_front() {
    // val_loss down, samples_per_s up: trials 0, 1 and 3 trade off; 2 is beaten by 1, 4 by 3.
    let s = multi(
        &[("samples_per_s", Direction::Maximize)],
        &[
            vec![0.10, 100.0],
            vec![0.20, 900.0],
            vec![0.30, 800.0],
            vec![0.50, 2000.0],
            vec![0.60, 1500.0],
        ],
    );
    let front: Vec<u64> = s.pareto_front().iter().map(|t| t.number.0).collect();
    assert_eq!(front, [0, 1, 3]);
    let text = screen(&s, 120, 34);
    assert!(text.contains("Pareto front 3 of 5"), "{text}");
    assert!(
        text.contains("val_loss ↓ min × samples_per_s ↑ max"),
        "{text}"
    );
    assert!(text.contains("samples_per_s ↑ max"), "{text}");
    // Three front marks are drawn, besides the legend's.
    let marks = |c: char| text.chars().filter(|x| *x == c).count();
    assert_eq!(marks('●'), 3 + 1, "{text}");
    // A discarded trial leaves the front.
    let mut s = s;
    let ran = Ran::span(Placement::default(), t0(), Duration::from_secs(10));
    let mut gone = Trial::unstored(
        TrialNumber(3),
        params(3),
        TrialStatus::Complete {
            value: 0.5,
            others: vec![2000.0],
            ran,
        },
    );
    gone.discarded = true;
    s.apply(&Event::TrialFinished {
        slot: 0,
        trial: gone,
        at: t0(),
        study_best: None,
    });
    let front: Vec<u64> = s.pareto_front().iter().map(|t| t.number.0).collect();
    assert_eq!(front, [0, 1, 4]);
}

#[test]
fn a_study_with_three_objectives_lists_its_pareto_front_in_a_table() {
    let s = multi(
        &[
            ("samples_per_s", Direction::Maximize),
            ("gpu_mem", Direction::Minimize),
        ],
        &[
            vec![0.10, 100.0, 8.0],
            vec![0.20, 900.0, 9.0],
            vec![0.30, 800.0, 9.5],
            vec![0.50, 50.0, 1.0],
        ],
    );
    let text = screen(&s, 120, 34);
    assert!(text.contains("Pareto front 3 trial(s)"), "{text}");
    assert!(text.contains("gpu_mem ↓"), "{text}");
    // Trial 2 is beaten by 1 on every objective: not listed. The rows follow val_loss.
    let listed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start_matches('"').split_whitespace().next())
        .skip_while(|w| *w != "#")
        .skip(1)
        .take_while(|w| w.parse::<u64>().is_ok())
        .collect();
    assert_eq!(listed, ["0", "1", "3"], "{text}");
}
