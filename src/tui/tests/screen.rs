//! The main screens drawn: colours, tiny sizes, the snapshots of a study waiting, running and
//! finished, a trial opened, the dialogs, the summary line, and the workers' GPUs.

use super::*;

#[test]
fn no_color_set_to_anything_but_empty_turns_colours_off() {
    use std::ffi::OsStr;
    assert!(crate::tui::color_allowed_by(None));
    assert!(crate::tui::color_allowed_by(Some(OsStr::new(""))));
    assert!(!crate::tui::color_allowed_by(Some(OsStr::new("1"))));
}

#[test]
fn without_colour_no_cell_has_a_colour() {
    let s = state_with(30, 4, 4, Some(100));
    let t = terminal(&s, 160, 48);
    let coloured = t
        .backend()
        .buffer()
        .content()
        .iter()
        .filter(|c| c.fg != Color::Reset || c.bg != Color::Reset)
        .count();
    assert_eq!(coloured, 0);
    let mut s = s;
    s.color = true;
    let t = terminal(&s, 160, 48);
    assert!(
        t.backend()
            .buffer()
            .content()
            .iter()
            .any(|c| c.fg != Color::Reset)
    );
}

#[test]
fn every_screen_draws_at_tiny_sizes_without_panicking() {
    let mut s = state_with(30, 4, 4, Some(100));
    for (w, h) in [(1, 1), (10, 5), (40, 12), (80, 24), (300, 100)] {
        screen(&s, w, h);
        s.handle_key(code(KeyCode::Enter));
        screen(&s, w, h);
        s.handle_key(code(KeyCode::Esc));
        s.handle_key(key('?'));
        screen(&s, w, h);
        s.handle_key(key('?'));
    }
}

#[test]
fn snapshot_waiting_for_the_study_80x24() {
    let s = UiState::new(Mode::Live, false, t0());
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_running_with_failures_80x24() {
    let s = state_with(30, 4, 4, Some(100));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_running_with_failures_160x48() {
    let s = state_with(30, 4, 4, Some(100));
    insta::assert_snapshot!(screen(&s, 160, 48));
}

#[test]
fn snapshot_finished_80x24() {
    let mut s = state_with(100, 0, 4, Some(100));
    finished(&mut s, "budget spent");
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_finished_sorted_by_value_160x48() {
    let mut s = state_with(100, 0, 4, Some(100));
    finished(&mut s, "budget spent");
    s.handle_key(key('3'));
    insta::assert_snapshot!(screen(&s, 160, 48));
}

#[test]
fn snapshot_failed_trial_opened_80x24() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.handle_key(key('f'));
    s.handle_key(key('f'));
    s.handle_key(key('f'));
    s.handle_key(key('f')); // failed
    s.handle_key(code(KeyCode::Enter));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_pruned_trial_opened_80x24() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.handle_key(key('f'));
    s.handle_key(key('f'));
    s.handle_key(key('f')); // pruned
    s.handle_key(code(KeyCode::Enter));
    let text = screen(&s, 80, 24);
    assert!(
        text.contains("pruned  at epoch 3 (rung 1: 3rd of 4 trials there, below the top 1/3)"),
        "{text}"
    );
    insta::assert_snapshot!(text);
}

#[test]
fn a_pruned_trials_reason_is_its_why_in_the_table() {
    let s = state_with(30, 4, 4, Some(100));
    let text = screen(&s, 160, 48);
    let row = text
        .lines()
        .find(|l| l.contains(" 28 + pruned"))
        .expect("trial 28's row");
    assert!(
        row.contains("at epoch 3 (rung 1: 3rd of 4 trials there, below the top 1/3)"),
        "{row}"
    );
}

#[test]
fn snapshot_running_trial_opened_160x48() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.handle_key(key('f')); // running
    s.handle_key(code(KeyCode::Enter));
    insta::assert_snapshot!(screen(&s, 160, 48));
}

#[test]
fn snapshot_paused_with_stop_dialog_80x24() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.apply(&Event::Paused(true));
    s.handle_key(key('f'));
    s.handle_key(key('x'));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_help_80x24() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.handle_key(key('?'));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_quit_dialog_80x24() {
    let mut s = state_with(30, 4, 4, Some(100));
    s.handle_key(key('q'));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn snapshot_watch_with_eight_slots_80x24() {
    let (events, now) = fixtures::study_events(60, 8, 8, Some(200));
    let mut s = UiState::new(Mode::Watch, false, now);
    events.iter().for_each(|e| s.apply(e));
    insta::assert_snapshot!(screen(&s, 80, 24));
}

#[test]
fn the_summary_line_names_the_counts_and_the_best_trial() {
    let mut s = state_with(10, 0, 2, None);
    finished(&mut s, "the trial budget is spent");
    let line = crate::tui::summary_line(&s);
    assert!(
        line.starts_with("mnist-mlp: 10 trials (8 complete, 2 pruned, 0 failed, 0 running); best trial 1 val_loss=0.11296 (batch_size=64"),
        "{line}"
    );
    assert!(
        line.ends_with("; finished: the trial budget is spent"),
        "{line}"
    );
}

#[test]
fn the_summary_line_names_the_best_of_the_study_when_another_process_found_it() {
    let mut s = state_with(10, 0, 2, None);
    let at = s.now;
    s.apply(&Event::StudyFinished {
        reason: "the trial budget is spent".into(),
        best: Some((crate::trial::TrialNumber(42), 0.05)),
        at,
    });
    let line = crate::tui::summary_line(&s);
    assert!(
        line.contains("; best of the study: trial 42 val_loss=0.05"),
        "{line}"
    );
}

#[test]
fn a_long_traceback_keeps_its_first_and_last_lines_and_the_log_paths_on_screen() {
    let mut s = fresh(Direction::Minimize, None);
    let mut err = vec!["exited with status 1".to_string()];
    err.extend((0..30).map(|i| format!("  frame {i}")));
    err.push("FileNotFoundError: digits.csv.gz".into());
    let mut t = failed_with(0, TrialState::Failed, None, &err.join("\n"));
    t.logs = vec!["/runs/0/stderr.log".into()];
    s.apply(&Event::TrialFinished {
        slot: 0,
        trial: t,
        at: t0(),
        study_best: None,
    });
    s.handle_key(code(KeyCode::Enter));
    let text = screen(&s, 80, 24);
    for want in [
        "exited with status 1",
        "… 25 more lines …",
        "FileNotFoundError: digits.csv.gz",
        "/runs/0/stderr.log",
    ] {
        assert!(text.contains(want), "{want:?} missing from\n{text}");
    }
}

#[test]
fn a_trial_on_an_unknown_slot_is_listed_but_on_no_slot() {
    let mut s = fresh(Direction::Minimize, None);
    for slot in [crate::tui::state::NO_SLOT, 2, 99] {
        s.apply(&Event::TrialStarted {
            number: TrialNumber(slot as u64 % 1000),
            slot,
            device: "cuda:7".into(),
            params: params(0),
            at: t0(),
        });
    }
    assert_eq!(s.slots.len(), 2, "the study's two slots, no more");
    assert!(s.slots.iter().all(|sl| sl.trial.is_none()));
    assert_eq!(s.counts.running, 3);
    assert!(s.trials.iter().all(|t| t.slot.is_none()));
    screen(&s, 80, 24);
}

fn gpu_sampled(n: u64, slot: usize, sm: f64, mem_mb: f64) -> Event {
    Event::GpuSampled {
        number: TrialNumber(n),
        slot,
        usage: crate::telemetry::SlotUsage::one(
            0,
            crate::telemetry::GpuSample::device(sm, 0.0, mem_mb),
        ),
    }
}

#[test]
fn the_worker_rows_show_each_slots_gpu_only_where_it_was_sampled() {
    let mut s = fresh(Direction::Minimize, Some(10));
    s.apply(&started(0, 0));
    s.apply(&started(1, 1));
    let before = screen(&s, 160, 48);
    assert!(
        !before.contains("gpu sm mem"),
        "no telemetry, no column:\n{before}"
    );
    s.apply(&gpu_sampled(0, 0, 33.0, 2150.0));
    let after = screen(&s, 160, 48);
    assert!(after.contains("gpu sm mem"), "{after}");
    assert!(after.contains(" 33% 2.1G"), "{after}");
    // Slot 1's trial was never sampled: a dash, not a zero.
    let row1 = after
        .lines()
        .find(|l| l.contains("#1 "))
        .expect("slot 1's row");
    assert!(!row1.contains('%'), "{row1}");
}

#[test]
fn a_group_slot_shows_its_gpus_in_the_device_column_and_each_gpus_level() {
    let mut s = fresh(Direction::Minimize, Some(10));
    s.slots[0].device = "cuda:4,cuda:6".into();
    s.slots[1].device = "cuda:0,cuda:1,cuda:2,cuda:3".into();
    s.apply(&started(0, 0));
    s.apply(&started(1, 1));
    let group = |n: u64, slot: usize, each: &[(u32, f64, f64)]| Event::GpuSampled {
        number: TrialNumber(n),
        slot,
        usage: crate::telemetry::SlotUsage::first(
            each.iter()
                .map(|&(i, sm, mb)| (i, crate::telemetry::GpuSample::device(sm, 0.0, mb))),
        )
        .expect("GPUs read"),
    };
    s.apply(&group(0, 0, &[(4, 40.0, 1000.0), (6, 40.0, 1000.0)]));
    s.apply(&group(
        1,
        1,
        &[
            (0, 100.0, 2000.0),
            (1, 50.0, 2150.0),
            (2, 3.0, 900.0),
            (3, 0.0, 500.0),
        ],
    ));
    let text = screen(&s, 160, 48);
    let row = |n: &str| {
        text.lines()
            .find(|l| l.contains(n))
            .unwrap_or_else(|| panic!("the row of {n}:\n{text}"))
            .to_string()
    };
    // Four GPUs in index order as a range, two apart joined; one level a GPU (an idle one
    // blank), then the group's mean and the most memory on one GPU.
    let r1 = row("#1 ");
    assert!(r1.contains("cuda:0-3"), "{r1}");
    assert!(r1.contains("█▄▁   38% 2.1G"), "{r1}");
    let r0 = row("#0 ");
    assert!(r0.contains("cuda:4+6"), "{r0}");
    assert!(r0.contains("▃▃  40% 1.0G"), "{r0}");
    // The trial screen: the group's summary, then a line for each GPU.
    s.handle_key(code(KeyCode::Enter));
    let text = screen(&s, 160, 48);
    assert!(
        text.contains("4 GPUs 38% SM, peak 2.1 GB on one GPU; now 38% SM (1 samples)"),
        "{text}"
    );
    for (gpu, line) in [
        ("cuda:0", "GPU 100% SM, peak 2.0 GB; now 100% SM, 2.0 GB"),
        ("cuda:3", "GPU 0% SM, peak 500 MB; now 0% SM, 500 MB"),
    ] {
        assert!(
            text.lines().any(|l| l.contains(gpu) && l.contains(line)),
            "{gpu}: {line}\n{text}"
        );
    }
}

#[test]
fn the_trial_screen_shows_the_mean_utilisation_and_peak_memory_of_its_gpu() {
    let mut s = fresh(Direction::Minimize, Some(10));
    s.apply(&started(0, 0));
    s.apply(&gpu_sampled(0, 0, 20.0, 1000.0));
    let mut u =
        crate::telemetry::SlotUsage::one(0, crate::telemetry::GpuSample::device(20.0, 0.0, 1000.0));
    u.add([(0, crate::telemetry::GpuSample::device(40.0, 0.0, 3000.0))]);
    s.apply(&Event::GpuSampled {
        number: TrialNumber(0),
        slot: 0,
        usage: u,
    });
    s.handle_key(code(KeyCode::Enter));
    let text = screen(&s, 160, 48);
    assert!(
        text.contains("GPU 30% SM, peak 2.9 GB; now 40% SM, 2.9 GB (2 samples)"),
        "{text}"
    );
}

#[test]
fn the_trial_screen_shows_a_pbt_childs_parent_and_a_parents_children() {
    let mut s = fresh(Direction::Minimize, Some(10));
    s.apply(&started(0, 0));
    s.apply(&started(1, 1));
    s.apply(&done(1, 1, TrialState::Pruned, Some(0.9)));
    s.apply(&started(2, 1));
    let lineage = Event::Lineage {
        child: TrialNumber(2),
        parent: crate::trial::Parent {
            trial: TrialNumber(0),
            step: 4,
        },
    };
    s.apply(&lineage);
    // Told twice (a replay after the live event): listed once.
    s.apply(&lineage);
    // A child whose parent is unknown here makes up no row.
    s.apply(&Event::Lineage {
        child: TrialNumber(2),
        parent: crate::trial::Parent {
            trial: TrialNumber(77),
            step: 1,
        },
    });
    assert!(s.trial(TrialNumber(77)).is_none());
    let child = s.trial(TrialNumber(2)).expect("the child");
    assert_eq!(
        child.parent.map(|p| p.step),
        Some(1),
        "the latest word counts"
    );
    s.apply(&lineage);
    // The child is the newest row: Enter opens it.
    s.handle_key(code(KeyCode::Enter));
    let text = screen(&s, 160, 48);
    assert!(
        text.contains("parent  trial 0 (from its checkpoint at step 4)"),
        "{text}"
    );
    let parent = s.trial(TrialNumber(0)).expect("the parent");
    assert_eq!(parent.children, vec![TrialNumber(2)]);
}

#[test]
fn a_running_trials_checkpoint_disk_use_shows_in_the_header_and_on_its_screen() {
    let mut s = fresh(Direction::Minimize, Some(10));
    s.apply(&started(0, 0));
    s.apply(&started(1, 1));
    let before = screen(&s, 160, 48);
    assert!(
        !before.contains("ckpt"),
        "nothing saved, nothing shown:\n{before}"
    );
    for (n, step, bytes) in [
        (0, 3, 3 * 1024 * 1024),
        (1, 1, 512 * 1024),
        (0, 4, 4 * 1024 * 1024),
    ] {
        s.apply(&Event::Checkpointed {
            number: TrialNumber(n),
            step,
            bytes,
        });
    }
    // Unknown trials are ignored.
    s.apply(&Event::Checkpointed {
        number: TrialNumber(42),
        step: 1,
        bytes: 1,
    });
    assert!(s.trial(TrialNumber(42)).is_none());
    let text = screen(&s, 160, 48);
    assert!(
        text.contains("ckpt 4.5 MiB"),
        "the latest of each running trial:\n{text}"
    );
    s.apply(&done(0, 0, TrialState::Complete, Some(0.3)));
    let text = screen(&s, 160, 48);
    assert!(
        text.contains("ckpt 512.0 KiB"),
        "running trials only:\n{text}"
    );
    s.handle_key(code(KeyCode::Enter));
    let text = screen(&s, 160, 48);
    assert!(text.contains("at step 1, 512.0 KiB on disk"), "{text}");
}
