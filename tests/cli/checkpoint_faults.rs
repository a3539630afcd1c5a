//! Faults of checkpoint directories (issue 27), each with a clear message and no study lost: a
//! `trial.checkpoint_dir` this machine cannot write is refused before any trial runs; one that
//! breaks mid-study (made a regular file, a path component made one, its filesystem full)
//! fails the trials that need it, each saying why, and the study ends with its budget; a re-run
//! whose machine does not see the checkpoint an earlier attempt recorded (a checkpoint directory
//! that is not shared) says so once and restarts from scratch with a curve of its own; a re-run
//! of a command that never reports a checkpoint says once that it starts from scratch; a
//! checkpoint damaged between two attempts is the script's to judge (the example starts over
//! and says so), and the re-run completes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rstest::rstest;

use crate::attempts::{resumable_study, saved_epoch, show};
use crate::checkpoint_store::{slow_epochs, store_study};
use crate::common::{
    PATIENCE, Sandbox, counted, report_steps, sh_study, stderr, text, wait_output, wait_until,
};

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

/// A small tmpfs mounted on `dir` with mount options `options` (`ro,size=64k`: read-only),
/// unmounted on drop. Needs root (tests run as root; where mounting is not permitted the test
/// says `skipped:`).
pub(crate) struct Tmpfs(PathBuf);

impl Tmpfs {
    pub(crate) fn mount(dir: &Path, options: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
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
            match Tmpfs::mount(&sb.join("ro"), "ro,size=64k") {
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

/// How a shared `checkpoint_dir` breaks mid-study, after the up-front check passed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Breaks {
    /// `checkpoint_dir` itself becomes a regular file (the directory moved aside).
    IntoAFile,
    /// A component of the trials' paths, `<checkpoint_dir>/<study>`, becomes a regular file.
    ComponentIntoAFile,
    /// Its filesystem fills up (a 64 KiB tmpfs, which took the first trial's checkpoints).
    Full,
}

/// Fills the filesystem of `dir` to the last block.
fn fill(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).expect("a file to fill it with");
    let block = [0u8; 4096];
    while f.write_all(&block).is_ok() {}
}

/// Why a failed trial failed, as `tune show N --format json` gives it: its error and the tail
/// of its stderr.
fn why(trial: &serde_json::Value) -> String {
    format!(
        "{} | {}",
        trial["error"].as_str().unwrap_or_default(),
        trial["log_tail"].as_str().unwrap_or_default()
    )
}

/// A shared checkpoint directory that breaks while trial 1 runs (trial 0 completed in it): the
/// trials that need it fail, each with a reason that names the directory (tune's own
/// `cannot create the checkpoint directory …`) or the script's own error (its save refused);
/// the study ends with its budget, no panic, and everything stored is still read.
#[rstest]
#[case::made_a_regular_file(Breaks::IntoAFile)]
#[case::a_path_component_made_a_regular_file(Breaks::ComponentIntoAFile)]
#[case::its_filesystem_full(Breaks::Full)]
fn a_checkpoint_dir_that_breaks_mid_study_fails_the_trials_needing_it_and_the_study_ends(
    #[case] how: Breaks,
) {
    let sb = Sandbox::new();
    let root = sb.join("ckpt");
    // Declared after the sandbox: unmounted before the sandbox is removed.
    let _mounted;
    if how == Breaks::Full {
        match Tmpfs::mount(&root, "size=64k") {
            Ok(m) => _mounted = m,
            Err(e) => {
                eprintln!("skipped: cannot mount a tmpfs: {e}");
                return;
            }
        }
    }
    let file = store_study(&sb, 3, &root.display().to_string());
    // Epochs of 1 s: trial 1 is still running when the directory breaks, on a loaded machine too.
    slow_epochs(&sb, file);
    let study_dir = root.join("resumable-curve");
    let trial = |n: u64| study_dir.join(format!("trial-{n:05}"));
    let child = sb
        .tune(&["run", file, "--no-tui"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tune starts");
    wait_until(PATIENCE, "trial 1's first checkpoint", || {
        saved_epoch(&trial(1)).is_some()
    });
    match how {
        Breaks::IntoAFile => {
            std::fs::rename(&root, sb.join("ckpt.moved")).expect("the directory moved aside");
            std::fs::write(&root, "a regular file now").expect("a file in its place");
        }
        Breaks::ComponentIntoAFile => {
            std::fs::rename(&study_dir, sb.join("study.moved")).expect("moved aside");
            std::fs::write(&study_dir, "a regular file now").expect("a file in its place");
        }
        Breaks::Full => fill(&root),
    }
    let out = wait_output(child, PATIENCE);
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{how:?}: {err}");
    // Trial 0 completed: the run ends as one that used its budget.
    assert!(out.status.success(), "{how:?}: {}", text(&out));
    let trials = sb.trials(file);
    assert_eq!(trials.len(), 3, "{how:?}: {trials:#?}");
    assert_eq!(counted(&trials), 3, "{how:?}: the budget: {trials:#?}");
    let states: Vec<&str> = trials
        .iter()
        .map(|t| t["state"].as_str().expect("a state"))
        .collect();
    assert_eq!(
        states,
        ["complete", "failed", "failed"],
        "{how:?}: {trials:#?}"
    );
    // Trial 1 failed at its next save: the script's error, with the path where it has one.
    let (saved, second) = (why(&show(&sb, file, 1)), why(&show(&sb, file, 2)));
    eprintln!("{how:?}: 1: {saved}\n{how:?}: 2: {second}");
    match how {
        Breaks::IntoAFile | Breaks::ComponentIntoAFile => {
            assert!(
                saved.contains("Not a directory") || saved.contains("No such file or directory"),
                "{how:?}: {saved}"
            );
            assert!(
                saved.contains(&trial(1).display().to_string()),
                "{how:?}: {saved}"
            );
            // Trial 2 never started: tune could not make its directory, and says which.
            assert!(
                second.contains(&format!(
                    "cannot create the checkpoint directory {}: ",
                    trial(2).display()
                )) && second.contains("Not a directory"),
                "{how:?}: {second}"
            );
        }
        Breaks::Full => {
            for t in [&saved, &second] {
                assert!(t.contains("No space left on device"), "{how:?}: {t}");
            }
            // The script's error names a file; tune's note names the trial's checkpoint
            // directory and says its filesystem is full.
            let note = format!(
                "its checkpoint directory {} is on a filesystem with ",
                trial(1).display()
            );
            assert!(
                saved.contains(&note) && saved.contains("(full)"),
                "{how:?}: {saved}"
            );
        }
    }
    // Nothing stored is lost: every report of trial 0, trial 1's up to the fault.
    assert_eq!(
        report_steps(&show(&sb, file, 0)),
        (0..6).collect::<Vec<i64>>(),
        "{how:?}"
    );
    assert!(
        report_steps(&show(&sb, file, 1)).starts_with(&[0]),
        "{how:?}: trial 1's reports kept"
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
    assert_eq!(
        report_steps(&shown),
        (0..6).collect::<Vec<i64>>(),
        "{shown:#}"
    );
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
    assert_eq!(
        report_steps(&shown),
        (0..5).collect::<Vec<i64>>(),
        "{shown:#}"
    );
}

/// How a checkpoint is damaged between an interrupted attempt and its re-run.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// Cut in the middle (a copy that stopped short).
    Truncated,
    /// Zero bytes.
    Emptied,
    /// Bytes that are not UTF-8.
    NotText,
}

/// A damaged checkpoint is the script's to judge (tune copies none of a command trial's files):
/// the shipped example cannot read its `state.json`, says so on its stderr and starts from
/// scratch; the re-run completes, and its curve restarts at step 0 with each step once (none
/// of the interrupted attempt's reports kept before its first).
#[rstest]
#[case::truncated(Damage::Truncated)]
#[case::emptied(Damage::Emptied)]
#[case::not_text(Damage::NotText)]
fn a_checkpoint_damaged_between_attempts_makes_the_example_start_over_and_say_so(
    #[case] how: Damage,
) {
    let sb = Sandbox::new();
    let file = resumable_study(&sb, 1);
    let ckpt: PathBuf = sb.join("studies/runs/resumable-curve/trial-00000/checkpoints");
    preempt_when(&sb, file, "trial 0 saved epoch 1", || {
        saved_epoch(&ckpt).is_some_and(|e| e >= 1)
    });
    let state = ckpt.join("state.json");
    let saved = std::fs::read(&state).expect("the checkpoint");
    let damaged: &[u8] = match how {
        Damage::Truncated => &saved[..saved.len() / 2],
        Damage::Emptied => b"",
        Damage::NotText => b"\xff\xfe{\"epoch\": 3",
    };
    std::fs::write(&state, damaged).expect("the checkpoint damaged");

    let out = sb.ok(&["run", file, "--no-tui"]);
    assert!(
        !stderr(&out).contains("panicked"),
        "{how:?}: {}",
        text(&out)
    );
    let trials = sb.trials(file);
    assert_eq!(counted(&trials), 1, "{how:?}: {trials:#?}");
    let rerun = trials
        .iter()
        .find(|t| t["state"] == "complete")
        .expect("the re-run completed");
    let r = rerun["number"].as_u64().expect("a number");
    let shown = show(&sb, file, r);
    assert_eq!(shown["attempt"], 2, "{how:?}: {shown:#}");
    assert_eq!(
        report_steps(&shown),
        (0..6).collect::<Vec<i64>>(),
        "{how:?}: {shown:#}"
    );
    let log = std::fs::read_to_string(ckpt.join("attempts.log")).expect("attempts.log");
    assert_eq!(
        log.lines().nth(1),
        Some(format!("attempt=2 trial={r} resumed_from=-1").as_str()),
        "{how:?}: {log}"
    );
    let dir = PathBuf::from(shown["trial_dir"].as_str().expect("its directory"));
    let said = std::fs::read_to_string(dir.join("stderr.log")).expect("the re-run's stderr");
    assert!(
        said.contains(&format!("cannot read the checkpoint {} (", state.display()))
            && said.contains("); starting from scratch"),
        "{how:?}: {said}"
    );
}
