//! The insight screen (issue 28): its keys, the importances' cache and throttle, and the
//! snapshots of each view on running, finished and multi-objective studies and on bad data
//! (no trials, only failed ones, one parameter, a categorical-only space, NaN values, no
//! declared space).

use super::*;
use crate::insight::ped_anova::PedAnova;
use crate::insight::{self, Importance};
use crate::space::{Param, ParamKind, ParamValue, Params, Space};
use crate::tui::state::InsightTab;

/// `s` with the insight screen open on `tab`.
pub(super) fn on(mut s: UiState, tab: InsightTab) -> UiState {
    s.handle_key(key('i'));
    s.insight.tab = tab;
    s
}

/// Every view of the insight screen, one after the other, each under its name.
pub(super) fn all_tabs(s: &mut UiState, w: u16, h: u16) -> String {
    if s.screen != Screen::Insight {
        s.handle_key(key('i'));
    }
    let mut out = String::new();
    for tab in InsightTab::ALL {
        s.insight.tab = tab;
        out.push_str(&format!("--- {}\n{}\n", tab.label(), screen(s, w, h)));
    }
    out
}

/// A running study (28 trials done: each slot's last one ended before the running ones
/// started) with its CUDA slots' trials (slots 0 and 1) sampled by NVML.
pub(super) fn running_with_gpu() -> UiState {
    let mut s = state_with(28, 4, 4, Some(100));
    for n in 0..32u64 {
        let slot = s.trial(TrialNumber(n)).and_then(|t| t.slot).unwrap_or(9);
        if slot < 2 {
            s.apply(&Event::GpuSampled {
                number: TrialNumber(n),
                slot,
                usage: crate::telemetry::SlotUsage::one(
                    0,
                    crate::telemetry::GpuSample::device(20.0 + (n * 37 % 80) as f64, 10.0, 2048.0),
                ),
            });
        }
    }
    s
}

pub(super) fn finished_study() -> UiState {
    let mut s = state_with(60, 0, 4, Some(60));
    finished(&mut s, "budget spent");
    s
}

/// A two-objective study: val_loss (min) and samples_per_s (max), 30 complete trials.
pub(super) fn two_objectives() -> UiState {
    let mut s = UiState::new(Mode::Live, false, t0());
    let mut i = info(Some(40), 2);
    i.others = vec![crate::trial::Objective {
        metric: "samples_per_s".into(),
        direction: Direction::Maximize,
    }];
    s.apply(&Event::StudyStarted {
        info: i,
        existing: Vec::new(),
        at: t0(),
    });
    for n in 0..30u64 {
        let bs = params(n)
            .get("batch_size")
            .and_then(ParamValue::as_f64)
            .unwrap_or(64.0);
        let ran = Ran::span(Placement::default(), t0(), Duration::from_secs(10));
        s.apply(&Event::TrialFinished {
            slot: (n % 2) as usize,
            trial: Trial::unstored(
                TrialNumber(n),
                params(n),
                TrialStatus::Complete {
                    value: fixtures::val_loss(n, 10),
                    others: vec![40.0 * bs + 100.0 * (n % 7) as f64],
                    ran,
                },
            ),
            at: t0() + Duration::from_secs(10 * (n + 1)),
            study_best: None,
        });
    }
    s
}

/// A study whose space is `space` and whose trials `0..n` have `params(k)`, report `val_loss`
/// for as many epochs as `outcome(k)` says, and end in its state with its value.
pub(super) fn study_of(
    space: Option<Space>,
    n: u64,
    params: impl Fn(u64) -> Params,
    outcome: impl Fn(u64) -> (TrialState, Option<f64>, u64),
) -> UiState {
    let mut s = UiState::new(Mode::Live, false, t0());
    let mut i = info(None, 2);
    i.space = space;
    s.apply(&Event::StudyStarted {
        info: i,
        existing: Vec::new(),
        at: t0(),
    });
    for k in 0..n {
        let slot = (k % 2) as usize;
        let start = t0() + Duration::from_secs(20 * (k / 2));
        s.apply(&Event::TrialStarted {
            number: TrialNumber(k),
            slot,
            device: "cpu".into(),
            params: params(k),
            at: start,
        });
        let (state, value, epochs) = outcome(k);
        for e in 1..=epochs {
            s.apply(&Event::TrialReported {
                number: TrialNumber(k),
                slot,
                report: report(k, e),
            });
        }
        let ran = Ran::span(Placement::default(), start, Duration::from_secs(15));
        let status = TrialStatus::ended(state, value, "exit status 1", ran);
        s.apply(&Event::TrialFinished {
            slot,
            trial: Trial::unstored(TrialNumber(k), params(k), status),
            at: start + Duration::from_secs(15),
            study_best: None,
        });
    }
    s.tick(t0() + Duration::from_secs(20 * n.div_ceil(2)));
    s
}

pub(super) fn one_param_space() -> Space {
    Space::new(vec![Param {
        name: "lr".into(),
        kind: ParamKind::Float {
            low: 1e-4,
            high: 1e-1,
            log: true,
            step: None,
        },
        when: Vec::new(),
    }])
    .expect("a valid space")
}

pub(super) fn categorical_space() -> Space {
    let choices = |cs: &[&str]| ParamKind::Categorical {
        choices: cs.iter().map(|c| ParamValue::Str(c.to_string())).collect(),
    };
    Space::new(vec![
        Param {
            name: "optimizer".into(),
            kind: choices(&["adam", "sgd", "adamw"]),
            when: Vec::new(),
        },
        Param {
            name: "activation".into(),
            kind: choices(&["relu", "gelu"]),
            when: Vec::new(),
        },
    ])
    .expect("a valid space")
}

pub(super) fn only(name: &str, p: Params) -> Params {
    p.into_iter().filter(|(k, _)| k == name).collect()
}

pub(super) fn categorical_params(k: u64) -> Params {
    let mut p = only("optimizer", params(k));
    let act = ["relu", "gelu"][(k % 2) as usize];
    p.insert("activation".into(), ParamValue::Str(act.into()));
    p
}

// ----- keys -----------------------------------------------------------------------------------

#[test]
fn i_opens_the_insight_screen_and_computes_the_importances_at_once() {
    let mut s = state_with(30, 4, 4, Some(100));
    assert_eq!(
        s.insight.cache.computations, 0,
        "nobody looked: nothing computed"
    );
    assert_eq!(s.handle_key(key('i')), None);
    assert_eq!(s.screen, Screen::Insight);
    assert_eq!(s.insight.cache.computations, 1);
    let r = &s.insight.cache.rankings[0];
    assert_eq!(r.trials, s.counts.complete);
    assert_eq!(r.shares.len(), 4);
    for k in [KeyCode::Esc, KeyCode::Char('q'), KeyCode::Char('i')] {
        s.screen = Screen::Insight;
        s.handle_key(code(k));
        assert_eq!(s.screen, Screen::Main, "{k:?} goes back");
    }
}

#[test]
fn the_insight_screen_ranks_as_tune_importance_does() {
    let mut s = finished_study();
    s.handle_key(key('i'));
    // The same observations `tune importance` builds, from the UI's rows.
    let rows: Vec<Trial> = s
        .trials
        .iter()
        .map(|t| Trial::unstored(t.number, t.params.clone(), t.status.clone()))
        .collect();
    let obs = insight::observations(&rows, &[Direction::Minimize], 0).expect("objective 0");
    let want = PedAnova::default().importances(&fixtures::space(), &obs);
    assert_eq!(s.insight.cache.rankings[0].shares, want);
    assert_eq!(s.insight.cache.rankings[0].trials, obs.len());
}

#[test]
fn tab_and_the_arrows_go_through_the_views() {
    let mut s = on(state_with(30, 4, 4, Some(100)), InsightTab::Importance);
    let mut seen = vec![s.insight.tab];
    for _ in 0..4 {
        s.handle_key(code(KeyCode::Tab));
        seen.push(s.insight.tab);
    }
    assert_eq!(
        seen,
        [
            InsightTab::Importance,
            InsightTab::Pair,
            InsightTab::Parallel,
            InsightTab::Timeline,
            InsightTab::Importance
        ]
    );
    s.handle_key(code(KeyCode::BackTab));
    assert_eq!(s.insight.tab, InsightTab::Timeline);
    s.handle_key(code(KeyCode::Left));
    assert_eq!(s.insight.tab, InsightTab::Parallel);
    s.handle_key(code(KeyCode::Right));
    assert_eq!(s.insight.tab, InsightTab::Timeline);
}

#[test]
fn n_goes_through_the_parameters_by_importance_and_m_picks_the_pair() {
    let mut s = on(finished_study(), InsightTab::Importance);
    let order: Vec<String> = s.insight.cache.rankings[0]
        .shares
        .iter()
        .map(|p| p.0.clone())
        .collect();
    let pair = |s: &UiState| {
        let (a, b) = s.insight_pair().expect("a pair");
        (a.name.clone(), b.map(|p| p.name.clone()))
    };
    // At first: the most important, and the next one.
    assert_eq!(pair(&s), (order[0].clone(), Some(order[1].clone())));
    s.handle_key(key('n'));
    assert_eq!(pair(&s).0, order[1]);
    assert_eq!(
        pair(&s).1,
        Some(order[0].clone()),
        "picking the pair's other end swaps the two"
    );
    s.handle_key(key('N'));
    assert_eq!(pair(&s), (order[0].clone(), Some(order[1].clone())));
    // The pair's second end skips the first.
    let mut seconds = Vec::new();
    for _ in 0..3 {
        s.handle_key(key('m'));
        seconds.push(pair(&s).1.expect("a second parameter"));
    }
    assert_eq!(
        seconds,
        [order[2].clone(), order[3].clone(), order[1].clone()]
    );
    s.handle_key(key('M'));
    assert_eq!(pair(&s).1, Some(order[3].clone()));
    // Around the end and back to the start.
    for _ in 0..4 {
        s.handle_key(key('n'));
    }
    assert_eq!(pair(&s).0, order[0]);
    assert_ne!(pair(&s).1.as_deref(), Some(order[0].as_str()));
}

#[test]
fn o_picks_the_next_objective_of_a_multi_objective_study_only() {
    let mut s = on(two_objectives(), InsightTab::Importance);
    assert_eq!(
        s.insight.cache.rankings.len(),
        2,
        "importance per objective"
    );
    assert!(s.insight.cache.rankings.iter().all(|r| r.trials == 30));
    // samples_per_s is made of the batch size: it ranks first there, lr for val_loss.
    assert_eq!(s.insight.cache.rankings[0].shares[0].0, "lr");
    assert_eq!(s.insight.cache.rankings[1].shares[0].0, "batch_size");
    s.handle_key(key('o'));
    assert_eq!(s.insight.objective, 1);
    assert_eq!(s.insight_pair().expect("a pair").0.name, "batch_size");
    s.handle_key(key('o'));
    assert_eq!(s.insight.objective, 0);
    let mut single = on(state_with(10, 0, 2, None), InsightTab::Importance);
    single.handle_key(key('o'));
    assert_eq!(single.insight.objective, 0);
    assert!(
        single
            .notice
            .as_deref()
            .is_some_and(|n| n.contains("one objective"))
    );
}

#[test]
fn the_insight_screen_pauses_live_studies_and_only_reads_watched_ones() {
    let mut s = on(state_with(10, 2, 2, None), InsightTab::Timeline);
    assert_eq!(
        s.handle_key(key('p')),
        Some(Action::Control(Control::Pause))
    );
    let mut w = on(state_with(10, 2, 2, None), InsightTab::Timeline);
    w.mode = Mode::Watch;
    assert_eq!(w.handle_key(key('p')), None);
    assert!(w.notice.as_deref().is_some_and(|n| n.contains("read-only")));
    assert_eq!(w.handle_key(key('?')), None);
    assert_eq!(w.overlay, Some(Overlay::Help));
}

#[test]
fn a_pair_needs_two_parameters() {
    let mut s = study_of(
        Some(one_param_space()),
        6,
        |k| only("lr", params(k)),
        |k| (TrialState::Complete, Some(fixtures::val_loss(k, 10)), 0),
    );
    s.handle_key(key('i'));
    s.handle_key(key('m'));
    assert!(
        s.notice
            .as_deref()
            .is_some_and(|n| n.contains("two parameters"))
    );
    s.handle_key(key('n'));
    assert_eq!(s.insight_pair().map(|p| p.0.name.as_str()), Some("lr"));
}

#[test]
fn keys_with_nothing_to_pick_say_so_and_do_not_panic() {
    let mut s = UiState::new(Mode::Live, false, t0());
    s.handle_key(key('i'));
    for c in ['n', 'N', 'm', 'M', 'o'] {
        s.handle_key(key(c));
    }
    assert_eq!(s.insight_pair().map(|p| p.0.name.clone()), None);
    assert!(s.notice.is_some());
}

// ----- the cache and its throttle -------------------------------------------------------------

#[test]
fn importances_are_recomputed_only_when_the_complete_trials_change() {
    let mut s = on(state_with(30, 4, 4, Some(100)), InsightTab::Importance);
    assert_eq!(s.insight.cache.computations, 1);
    s.tick(s.now + Duration::from_secs(60));
    assert_eq!(s.insight.cache.computations, 1, "nothing changed");
    // A report, a GPU sample, a failed trial: the complete trials are the same.
    s.apply(&Event::TrialReported {
        number: TrialNumber(30),
        slot: 0,
        report: report(30, 9),
    });
    s.apply(&done(31, 1, TrialState::Failed, None));
    s.tick(s.now + Duration::from_secs(60));
    assert_eq!(s.insight.cache.computations, 1, "no complete trial changed");
    s.apply(&done(30, 0, TrialState::Complete, Some(0.1)));
    s.tick(s.now + Duration::from_secs(1));
    assert_eq!(s.insight.cache.computations, 2);
    // Closed, nothing is computed however much changes.
    s.handle_key(code(KeyCode::Esc));
    s.apply(&done(32, 2, TrialState::Complete, Some(0.2)));
    s.tick(s.now + Duration::from_secs(60));
    assert_eq!(s.insight.cache.computations, 2);
    s.handle_key(key('i'));
    assert_eq!(
        s.insight.cache.computations, 3,
        "stale on opening: computed at once"
    );
}

#[test]
fn ten_thousand_trials_recompute_by_growth_or_timer_not_per_trial() {
    let mut s = fresh(Direction::Minimize, None);
    s.handle_key(key('i'));
    let ran = Ran::span(Placement::default(), t0(), Duration::from_secs(1));
    let mut recomputed_at = Vec::new();
    for n in 0..10_000u64 {
        s.apply(&Event::TrialFinished {
            slot: 0,
            trial: Trial::unstored(
                TrialNumber(n),
                params(n),
                TrialStatus::Complete {
                    value: fixtures::val_loss(n, 10),
                    others: Vec::new(),
                    ran: ran.clone(),
                },
            ),
            at: t0(),
            study_best: None,
        });
        // A frame after every trial, ten trials a second.
        let before = s.insight.cache.computations;
        s.tick(t0() + Duration::from_millis(100 * n));
        if s.insight.cache.computations > before {
            recomputed_at.push(n);
        }
    }
    // Every trial while small, then every 5 % of the study or 10 s: far fewer than 10 000.
    assert!(recomputed_at.len() < 250, "{}", recomputed_at.len());
    assert!(
        recomputed_at[..20].iter().copied().eq(0..20),
        "{recomputed_at:?}"
    );
    let late: Vec<u64> = recomputed_at
        .windows(2)
        .map(|w| w[1] - w[0])
        .skip(150)
        .collect();
    assert!(late.iter().all(|gap| *gap >= 100), "{late:?}");
    // The shown ranking says how old it is; the timer brings it up to date.
    s.tick(s.now + crate::tui::state::RECOMPUTE_AFTER);
    assert_eq!(s.insight.cache.rankings[0].trials, 10_000);
    assert_eq!(s.insight.cache.complete(), 10_000);
}
