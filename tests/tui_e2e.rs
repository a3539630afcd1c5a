//! End to end: a real study under `tmux`, its screen read with `capture-pane`, steered with
//! `send-keys` (pause, sort, open a trial, stop a trial, quit), and the database checked to
//! agree with what the screen says. `tune watch` follows the same study from a second pane.
//!
//! Skips, saying why, when tmux is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

mod common;

struct Tmux {
    session: String,
}

impl Tmux {
    fn start(name: &str, dir: &Path, shell: &str, w: u16, h: u16) -> Tmux {
        let session = format!("tune-e2e-{}-{name}", std::process::id());
        let ok = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                &session,
                "-x",
                &w.to_string(),
                "-y",
                &h.to_string(),
                "-c",
            ])
            .arg(dir)
            .arg(shell)
            .status()
            .expect("tmux runs");
        assert!(ok.success(), "tmux new-session failed");
        Tmux { session }
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.session])
            .output()
            .expect("capture-pane runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            let ok = Command::new("tmux")
                .args(["send-keys", "-t", &self.session, k])
                .status()
                .expect("send-keys runs");
            assert!(ok.success());
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// Waits until the screen satisfies `pred`; panics with the last screen after `secs`.
    fn wait_for(&self, what: &str, secs: u64, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn wait_text(&self, text: &str, secs: u64) -> String {
        self.wait_for(&format!("{text:?}"), secs, |s| s.contains(text))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.session])
            .status();
    }
}

fn db(path: &Path) -> Connection {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("opens the db")
}

fn count(path: &Path, state: Option<&str>) -> i64 {
    let c = db(path);
    match state {
        Some(s) => c.query_row("SELECT COUNT(*) FROM trials WHERE state = ?1", [s], |r| {
            r.get(0)
        }),
        None => c.query_row("SELECT COUNT(*) FROM trials", [], |r| r.get(0)),
    }
    .expect("counts")
}

fn wait_db(what: &str, secs: u64, pred: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !pred() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for the database: {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The number on the selected row of the trials table (`▸12 …`).
fn selected_row(screen: &str) -> Option<u64> {
    screen.lines().find_map(|l| {
        let rest = l.strip_prefix('▸')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

const STUDY: &str = r#"
[study]
name = "e2e"
metric = "loss"
direction = "minimize"
trials = 14
seed = 3

[space]
x = { type = "float", low = 0.0, high = 1.0 }
k = { type = "int", low = 1, high = 4 }

[workers]
count = 2
devices = ["cpu"]

[trial]
kind = "command"
# Eight reports, 0.4 s apart: slow enough to steer, quick enough for a test.
command = ["sh", "-c", "i=1; while [ $i -le 8 ]; do awk -v x={x} -v k={k} -v i=$i 'BEGIN { printf \"tune: {\\\"step\\\": %d, \\\"loss\\\": %.6f, \\\"epoch\\\": %d, \\\"total_epochs\\\": 8}\\n\", i, (x - 0.3) * (x - 0.3) + k * 0.01 + 1.0 / i, i }'; i=$((i + 1)); sleep 0.4; done"]
timeout = "1m"
"#;

#[test]
fn a_real_study_is_watched_sorted_opened_paused_stopped_and_quit_from_the_terminal() {
    if Command::new("tmux").arg("-V").output().is_err() {
        println!("SKIPPED: tmux is not installed (apt-get install -y tmux)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // A private copy: the shared target directory's binary may be rebuilt while we run.
    let bin: PathBuf = dir.path().join("tune");
    std::fs::copy(env!("CARGO_BIN_EXE_tune"), &bin).expect("copies the binary");
    let has_watch = Command::new(&bin)
        .args(["watch", "--help"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_watch,
        "{} has no `watch` command: not the binary this test was built with (another branch \
         rebuilt it in a shared target directory?)",
        env!("CARGO_BIN_EXE_tune")
    );
    std::fs::write(dir.path().join("study.toml"), STUDY).expect("writes the study");
    let dbp = dir.path().join("tune.db");

    let run = Tmux::start(
        "run",
        dir.path(),
        &format!("{} study.toml; echo EXIT=$?; sleep 60", bin.display()),
        100,
        30,
    );
    let s = run.wait_for("both workers busy", 30, |s| {
        s.contains("Workers 2/2 busy") && s.contains("e2e")
    });
    assert!(s.contains("loss ↓ min"), "{s}");

    // `watch` from a second terminal, read-only, on the same database.
    let watch = Tmux::start(
        "watch",
        dir.path(),
        &format!(
            "{} watch --study e2e --db tune.db; echo WATCH_EXIT=$?; sleep 60",
            bin.display()
        ),
        100,
        30,
    );
    watch.wait_for("watch to show the running study", 20, |s| {
        s.contains("watch") && s.contains("e2e") && s.contains("running")
    });

    // Pause: no new trial starts; the running ones finish.
    wait_db("two complete trials", 30, || {
        count(&dbp, Some("COMPLETE")) >= 2
    });
    run.keys(&["p"]);
    run.wait_text("‖ paused", 10);
    wait_db("the running trials to finish", 30, || {
        count(&dbp, Some("RUNNING")) == 0
    });
    let n_paused = count(&dbp, None);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(count(&dbp, None), n_paused, "a trial started while paused");
    run.wait_text("Workers 0/2 busy", 10);

    // Sort by value (column 3): the best trial comes first, as the database says.
    run.keys(&["3"]);
    let s = run.wait_text("sort value ▲", 5);
    println!("{s}");
    let best: i64 = db(&dbp)
        .query_row(
            "SELECT t.number FROM trials t JOIN trial_values v ON v.trial_id = t.trial_id
             WHERE t.state = 'COMPLETE' ORDER BY v.value, t.number LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("a best trial");
    assert_eq!(selected_row(&s), Some(best as u64), "{s}");
    let header = s.lines().nth(2).unwrap_or_default().to_string();
    assert!(header.contains(&format!("best #{best} ")), "{header}");

    // Open it: all its params, as stored.
    run.keys(&["Enter"]);
    let s = run.wait_text(&format!("Trial #{best} "), 5);
    println!("{s}");
    assert!(s.contains("★ best"), "{s}");
    let (x, k): (f64, f64) = db(&dbp)
        .query_row(
            "SELECT (SELECT param_value FROM trial_params p WHERE p.trial_id = t.trial_id AND param_name = 'x'),
                    (SELECT param_value FROM trial_params p WHERE p.trial_id = t.trial_id AND param_name = 'k')
             FROM trials t WHERE t.number = ?1",
            [best],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("params");
    let shown = |name: &str| -> f64 {
        s.lines()
            .find_map(|l| {
                let l = l.trim_start_matches('│').trim_start();
                let v = l.strip_prefix(name)?.split_whitespace().next()?;
                v.parse().ok()
            })
            .unwrap_or_else(|| panic!("param {name} not on screen:\n{s}"))
    };
    // The screen writes a float param in 6 significant digits (0.466111 for
    // 0.46611106395721436): within half a unit of the sixth digit of the stored value.
    let close = |shown: f64, stored: f64| (shown - stored).abs() <= 5e-6 * stored.abs();
    assert!(close(shown("x "), x), "x on screen vs stored {x}:\n{s}");
    assert!(close(shown("k "), k), "k on screen vs stored {k}:\n{s}");
    assert!(s.contains("reports 8 (last at step 8)"), "{s}");
    run.keys(&["Escape"]);
    run.wait_text("Trials", 5);

    // Resume: trials start again.
    run.keys(&["p"]);
    run.wait_text("▶ running", 10);
    wait_db("a new trial after resuming", 20, || {
        count(&dbp, None) > n_paused
    });

    // Stop one running trial, recorded as pruned.
    run.keys(&["f"]);
    let s = run.wait_for("a running trial in the filtered table", 20, |s| {
        s.contains("filter running") && selected_row(s).is_some()
    });
    let victim = selected_row(&s).expect("a selected running trial");
    run.keys(&["x"]);
    run.wait_text(&format!("Stop trial {victim}"), 5);
    run.keys(&["p"]);
    wait_db("the stopped trial to be pruned", 20, || {
        db(&dbp)
            .query_row(
                "SELECT state FROM trials WHERE number = ?1",
                [victim as i64],
                |r| r.get::<_, String>(0),
            )
            .map(|st| st == "PRUNED")
            .unwrap_or(false)
    });

    // Quit, stopping the study now: the UI leaves once the study has stopped cleanly.
    run.keys(&["q"]);
    run.wait_text("Quit the study?", 5);
    run.keys(&["s"]);
    let s = run.wait_text("EXIT=", 30);
    println!("{s}");
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(s.contains("e2e: "), "the summary line:\n{s}");
    // The terminal is back in cooked mode with echo.
    common::assert_cooked(&run.session);
    assert_eq!(count(&dbp, Some("RUNNING")), 0, "a trial was left running");
    assert!(
        count(&dbp, Some("COMPLETE")) < 14,
        "the study ran to its budget instead of stopping"
    );

    // The watcher saw the study end, and leaves on q.
    watch.wait_text("finished", 60);
    watch.keys(&["q"]);
    let s = watch.wait_text("WATCH_EXIT=", 10);
    assert!(s.contains("WATCH_EXIT=0"), "{s}");
}
