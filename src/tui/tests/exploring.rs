//! The header says when the sampler is still exploring.

use super::*;

/// A study whose sampler's initial design is `startup` trials, with `complete` complete trials
/// then `pruned` pruned ones.
fn exploring_state(startup: usize, complete: u64, pruned: u64) -> UiState {
    let mut s = UiState::new(Mode::Live, false, t0());
    let mut i = info(Some(20), 2);
    i.sampler = "gp".into();
    i.exploration = Some(crate::sampler::Exploration::new(startup));
    s.apply(&Event::StudyStarted {
        info: i,
        existing: Vec::new(),
        at: t0(),
    });
    for n in 0..complete + pruned {
        let state = if n < complete {
            TrialState::Complete
        } else {
            TrialState::Pruned
        };
        s.apply(&done(n, 0, state, Some(0.5 + n as f64)));
    }
    s
}

#[rstest::rstest]
#[case::all_pruned_past_the_design(3, 0, 5, true)]
#[case::one_complete_past_the_design(3, 1, 4, true)]
#[case::still_in_the_initial_design(8, 0, 5, false)]
#[case::two_complete(3, 2, 3, false)]
fn the_header_says_the_sampler_still_explores_by_its_own_rule(
    #[case] startup: usize,
    #[case] complete: u64,
    #[case] pruned: u64,
    #[case] shown: bool,
) {
    let s = exploring_state(startup, complete, pruned);
    for w in [80, 120] {
        let text = screen(&s, w, 24);
        let line = text.lines().nth(2).expect("the header's third line");
        assert_eq!(
            line.contains("sampler: exploring (Sobol) until 2 trials complete"),
            shown,
            "{w}: {line}"
        );
    }
}

#[test]
fn snapshot_sampler_exploring_after_pruning_80x24() {
    insta::assert_snapshot!(screen(&exploring_state(3, 1, 4), 80, 24));
}
