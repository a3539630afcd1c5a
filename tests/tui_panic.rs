//! The terminal is restored when the program panics while the UI owns it: raw mode off, the
//! alternate screen left, the cursor shown, and the panic message readable.
//!
//! The test runs this same test binary inside `tmux` as a child that opens the UI and then
//! panics, and reads the pane afterwards. Skips, saying why, when tmux is not installed.

use std::process::Command;
use std::time::{Duration, Instant};

mod common;

const CHILD: &str = "TUNE_TUI_PANIC_CHILD";

/// In the child: the UI on a live study, then a panic on the main thread while it runs.
#[test]
fn panic_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (_events_tx, events) = tokio::sync::mpsc::unbounded_channel();
    let (controls, _controls_rx) = tokio::sync::mpsc::unbounded_channel();
    rt.spawn(tune::tui::run(
        events,
        controls,
        tune::tui::Options {
            mode: tune::tui::Mode::Live,
            color: true,
        },
    ));
    std::thread::sleep(Duration::from_millis(1500));
    panic!("deliberate panic while the UI runs");
}

#[test]
fn a_panic_while_the_ui_runs_restores_the_terminal() {
    if Command::new("tmux").arg("-V").output().is_err() {
        println!("SKIPPED: tmux is not installed (apt-get install -y tmux)");
        return;
    }
    let me = std::env::current_exe().expect("the test binary");
    let session = format!("tune-panic-{}", std::process::id());
    let shell = format!(
        "RUST_BACKTRACE=0 {CHILD}=1 {} --exact panic_child --nocapture --test-threads 1; echo CHILD_EXIT=$?; sleep 30",
        me.display()
    );
    let ok = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "100",
            "-y",
            "40",
            &shell,
        ])
        .status()
        .expect("tmux runs");
    assert!(ok.success());
    let screen = || {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &session])
            .output()
            .expect("capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut s = screen();
    let mut saw_ui = false;
    while !s.contains("CHILD_EXIT=") {
        saw_ui |= s.contains("waiting for the study");
        assert!(Instant::now() < deadline, "the child never ended:\n{s}");
        std::thread::sleep(Duration::from_millis(100));
        s = screen();
    }
    // The child has exited and the shell sleeps: the pane's modes are what the child left.
    let cooked = std::panic::catch_unwind(|| common::assert_cooked(&session));
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", &session])
        .status();
    if let Err(e) = cooked {
        std::panic::resume_unwind(e);
    }
    assert!(saw_ui, "the UI never showed");
    assert!(s.contains("deliberate panic while the UI runs"), "{s}");
    assert!(
        !s.contains("waiting for the study"),
        "still on the UI's screen:\n{s}"
    );
}
