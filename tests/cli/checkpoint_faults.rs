//! Faults of checkpoint directories (issue 27), each with a clear message and no study lost: a
//! `trial.checkpoint_dir` this machine cannot write is refused before any trial runs; a re-run
//! whose machine does not see the checkpoint an earlier attempt recorded (a checkpoint directory
//! that is not shared) says so once and restarts from scratch with a curve of its own; a re-run
//! of a command that never reports a checkpoint says once that it starts from scratch.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rstest::rstest;

use crate::attempts::{resumable_study, saved_epoch, show};
use crate::common::{PATIENCE, Sandbox, counted, sh_study, stderr, text, wait_output, wait_until};

/// A builtin study with a `checkpoint_dir` (never run past the check: no libtorch needed).
fn builtin_study(checkpoint_dir: &Path) -> String {
    format!(
        r#"[study]
name = "ckpt"
metric = "val_loss"
trials = 2

[space]
lr = {{ type = "float", low = 1e-3, high = 1e-1, log = true }}

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "builtin"
epochs = 1
checkpoint_dir = {:?}

[trial.model]
kind = "mlp"

[trial.data]
dataset = "digits"
"#,
        checkpoint_dir.display().to_string()
    )
}

/// A read-only filesystem mounted on `dir` (a tmpfs), unmounted on drop.
struct ReadOnly(PathBuf);

impl ReadOnly {
    fn mount(dir: &Path) -> Result<ReadOnly, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=64k", "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(ReadOnly(dir.to_path_buf()))
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}

#[derive(Debug, Clone, Copy)]
enum Unwritable {
    /// A read-only filesystem (root writes through permission bits, not through this).
    ReadOnly,
    /// A path whose parent is a regular file.
    UnderAFile,
    /// A parent that cannot be created (`/proc` takes no new directories).
    ParentCannotBeCreated,
}

#[rstest]
#[case::read_only(Unwritable::ReadOnly)]
#[case::under_a_regular_file(Unwritable::UnderAFile)]
#[case::parent_cannot_be_created(Unwritable::ParentCannotBeCreated)]
fn a_checkpoint_dir_this_machine_cannot_write_is_refused_before_any_trial(#[case] how: Unwritable) {
    let sb = Sandbox::new();
    let _mounted;
    let (dir, os_error) = match how {
        Unwritable::ReadOnly => {
            match ReadOnly::mount(&sb.join("ro")) {
                Ok(m) => _mounted = m,
                Err(e) => {
                    eprintln!("skipped: cannot mount a read-only tmpfs: {e}");
                    return;
                }
            }
            (sb.join("ro/ckpt"), "Read-only file system")
        }
        Unwritable::UnderAFile => {
            sb.write("plain.txt", "a file, not a directory");
            (sb.join("plain.txt/ckpt"), "Not a directory")
        }
        Unwritable::ParentCannotBeCreated => (
            PathBuf::from(format!("/proc/tune-nowhere-{}/ckpt", std::process::id())),
            "os error",
        ),
    };
    sb.write("ckpt.toml", &builtin_study(&dir));
    let out = sb.run(&["--db", "t.db", "run", "ckpt.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(2), "{how:?}: {}", text(&out));
    let err = stderr(&out);
    let want = format!(
        "ckpt.toml: trial.checkpoint_dir: cannot write checkpoints in {}: ",
        dir.display()
    );
    assert!(err.contains(&want), "{how:?}: wanted {want:?} in:\n{err}");
    assert!(err.contains(os_error), "{how:?}: the OS error:\n{err}");
    assert!(!err.contains("panicked"), "{how:?}: {err}");
    assert!(
        !sb.join("t.db").exists(),
        "{how:?}: refused before the study was stored, so no trial ran"
    );
}

/// Starts `tune run FILE`, waits for `ready`, sends SIGTERM and expects the preemption's 75.
fn preempt_when(sb: &Sandbox, file: &str, what: &str, ready: impl FnMut() -> bool) -> Output {
    let child = sb
        .tune(&["run", file, "--no-tui"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts");
    wait_until(PATIENCE, what, ready);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let out = wait_output(child, PATIENCE);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    out
}

/// The non-final report steps of a trial as `tune show N --format json` gives them.
fn steps(shown: &serde_json::Value) -> Vec<i64> {
    shown["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .filter(|r| r["final"] != true)
        .map(|r| r["step"].as_i64().expect("a step"))
        .collect()
}

/// The lines of `text` that contain `needle`.
fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(needle)).collect()
}

/// A checkpoint directory that other machines do not share: trial 0 checkpointed on one
/// machine, and the machine of its re-run finds nothing there (here: the directory removed
/// between the two runs). The re-run says so once, restarts from scratch, and its curve is its
/// own: every epoch once, nothing kept of the lost attempt.
#[test]
fn a_rerun_whose_machine_lacks_the_recorded_checkpoint_says_so_once_and_restarts_from_scratch() {
    let sb = Sandbox::new();
    let file = resumable_study(&sb, 2);
    let ckpt: PathBuf = sb.join("studies/runs/resumable-curve/trial-00000/checkpoints");
    preempt_when(&sb, file, "trial 0 saved epoch 1", || {
        saved_epoch(&ckpt).is_some_and(|e| e >= 1)
    });
    let lost = show(&sb, file, 0);
    assert!(
        lost["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("interrupted: preempted")),
        "{lost:#}"
    );
    std::fs::remove_dir_all(&ckpt).expect("the checkpoint gone from this machine");

    let out = sb.ok(&["run", file, "--no-tui"]);
    let trials = sb.trials(file);
    assert_eq!(counted(&trials), 2, "exactly the budget: {trials:#?}");
    let rerun = trials
        .iter()
        .find(|t| t["number"] != 0 && t["params"] == lost["params"])
        .expect("trial 0's params ran again");
    assert_eq!(rerun["state"], "complete", "{rerun:#}");
    let r = rerun["number"].as_u64().expect("a number");
    let err = stderr(&out);
    let said = lines_with(&err, "holds no checkpoint on this machine");
    assert_eq!(said.len(), 1, "said once:\n{err}");
    let line = said[0];
    for needle in [
        "tune: trial 0 checkpointed at step ",
        "(on host ",
        &format!("but {} holds no checkpoint on this machine", ckpt.display()),
        "runs_dir",
        "shared by every machine?",
        &format!("trial {r} restarts from scratch"),
    ] {
        assert!(line.contains(needle), "`{needle}` in {line:?}");
    }
    // It did: the script found nothing and started at epoch 0, and the curve is its own.
    let log = std::fs::read_to_string(ckpt.join("attempts.log")).expect("attempts.log");
    assert_eq!(log, format!("attempt=2 trial={r} resumed_from=-1\n"));
    let shown = show(&sb, file, r);
    assert_eq!(shown["attempt"], 2, "{shown:#}");
    assert_eq!(steps(&shown), (0..6).collect::<Vec<i64>>(), "{shown:#}");
}

/// A command that reports epochs but never a checkpoint: its re-run after a preemption starts
/// from scratch, as always, and tune says so in one line for the trial (not one per report),
/// keeping none of the lost attempt's reports.
#[test]
fn a_rerun_of_a_command_that_never_reports_a_checkpoint_says_once_it_starts_from_scratch() {
    let sb = Sandbox::new();
    sb.write(
        "s.toml",
        &sh_study("nockpt", 1, 1, "", &["{x}"])
            .replace("kind = \"command\"", "kind = \"command\"\ngrace = \"1s\""),
    );
    sb.write(
        "trial.sh",
        "for i in 0 1 2 3 4; do sleep 0.3; echo \"tune: {\\\"step\\\": $i, \\\"loss\\\": $1}\"; done\n",
    );
    let reported = || {
        sb.db("tune.db")
            .query_row("SELECT count(*) FROM trial_intermediate_values", [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap_or(0)
    };
    preempt_when(&sb, "s.toml", "trial 0 reported twice", || reported() >= 2);

    let out = sb.ok(&["run", "s.toml", "--no-tui"]);
    let trials = sb.trials("s.toml");
    assert_eq!(counted(&trials), 1, "{trials:#?}");
    let rerun = trials
        .iter()
        .find(|t| t["state"] == "complete")
        .expect("the re-run completed");
    let r = rerun["number"].as_u64().expect("a number");
    let err = stderr(&out);
    let said = lines_with(&err, "from scratch");
    assert_eq!(
        said,
        [format!(
            "tune: trial {r} re-runs interrupted trial 0 from scratch: no attempt at its params reported a checkpoint (print `tune: {{\"checkpoint\": true, \"step\": N}}` after each save to resume from it; docs/command-trials.md)"
        )],
        "one line for the trial:\n{err}"
    );
    let shown = show(&sb, "s.toml", r);
    assert_eq!(shown["attempt"], 2, "{shown:#}");
    assert_eq!(steps(&shown), (0..5).collect::<Vec<i64>>(), "{shown:#}");
}
