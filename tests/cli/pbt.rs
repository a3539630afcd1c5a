//! Population-based training (`[pruner] kind = "pbt"`, issue 27): a trial in the bottom of a
//! point is exploited (pruned), and a child continues from a better trial's checkpoint with
//! explored params, recorded as its parent. Run on the shipped resumable example script on two
//! slots, with enqueued params whose ranks and paces are known: trial 0 (lr 0.1, decay 0: the
//! best) takes 0.6 s an epoch, trial 1 (decay 0.4) 0.9 s, so trial 0 reaches step 2 first and
//! is still running (its checkpoint a step or two further) when trial 1 reaches step 2 ranked
//! last of two. Only `lr` is explored, only by perturbation, so the child's params are known
//! up to the factor. A child whose checkpoint directory cannot be written fails alone, the
//! copy's message naming that directory.

use rstest::rstest;

use crate::attempts::show;
use crate::checkpoint_faults::Tmpfs;
use crate::common::{Sandbox, counted, report_steps, stderr, text};

fn pbt_study(sb: &Sandbox, extra: &str) -> &'static str {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("studies");
    let script = std::fs::read_to_string(root.join("resumable_curve.py")).expect("the script");
    sb.write("studies/resumable_curve.py", &script);
    let study = format!(
        r#"[study]
name = "pbt"
metric = "val_loss"
direction = "minimize"
trials = 3
seed = 3

[space]
lr = {{ type = "float", low = 1e-3, high = 1.0, log = true }}
decay = {{ type = "float", low = 0.0, high = 0.5 }}
pace = {{ type = "float", low = 0.1, high = 1.0 }}

[workers]
count = 2
devices = ["cpu"]

[trial]
kind = "command"
command = ["python3", "resumable_curve.py", "--lr", "{{lr}}", "--decay", "{{decay}}",
           "--epochs", "6", "--epoch-seconds", "{{pace}}"]
timeout = "1m"
requires = ["resumable_curve.py"]

[pruner]
kind = "pbt"
resource = "step"
interval = 2
max_resource = 5
population = 4
quantile = 0.5
resample_probability = 0.0
mutate = ["lr"]
{extra}
[[enqueue]]
lr = 0.1
decay = 0.0
pace = 0.6

[[enqueue]]
lr = 0.1
decay = 0.4
pace = 0.9
"#
    );
    let file = "studies/pbt.toml";
    sb.write(file, &study);
    file
}

#[test]
fn a_bottom_trial_is_exploited_and_its_child_continues_from_the_parents_checkpoint() {
    let sb = Sandbox::new();
    let file = pbt_study(&sb, "");
    let out = sb.run(&["run", file, "--no-tui"]);
    assert!(out.status.success(), "{}", text(&out));
    let log = text(&out);
    assert!(
        log.contains("trial 1 pruned at step 2 (2nd of 2 trials there, in the bottom 1/2): exploited; trial 2 continues from trial 0's checkpoint at step"),
        "{log}"
    );
    assert!(log.contains("with lr 0.1 → "), "{log}");

    let child = show(&sb, file, 2);
    let parent = &child["parent"];
    assert_eq!(parent["trial"], 0, "{child}");
    let from = parent["step"].as_u64().expect("the parent's step");
    assert!((2..5).contains(&from), "{child}");
    assert!(
        log.contains(&format!(
            "trial 2 starts from trial 0's checkpoint at step {from} ("
        )),
        "{log}"
    );
    // The child's params: the parent's, `lr` perturbed by one of the factors.
    assert_eq!(child["params"]["decay"], 0.0, "{child}");
    assert_eq!(child["params"]["pace"], 0.6, "{child}");
    let lr = child["params"]["lr"].as_f64().expect("lr");
    assert!(
        (lr - 0.08).abs() < 1e-9 || (lr - 0.12).abs() < 1e-9,
        "{child}"
    );
    // It resumed after the parent's checkpoint: its curve goes on from there, each step once,
    // and it completed.
    assert_eq!(child["state"], "complete", "{child}");
    assert_eq!(
        report_steps(&child),
        ((from as i64 + 1)..6).collect::<Vec<_>>(),
        "{child}"
    );
    let dir = std::path::PathBuf::from(child["trial_dir"].as_str().expect("its directory"));
    let attempts = std::fs::read_to_string(dir.join("checkpoints").join("attempts.log"))
        .expect("the child's attempts log");
    assert!(
        attempts.contains(&format!("attempt=1 trial=2 resumed_from={from}")),
        "{attempts}"
    );
    // The exploited trial is pruned, saying so; the parent lists its child and is untouched.
    let exploited = show(&sb, file, 1);
    assert_eq!(exploited["state"], "pruned", "{exploited}");
    assert!(
        exploited["pruned_reason"]
            .as_str()
            .is_some_and(|r| r.contains("exploited; trial 2 continues from trial 0")),
        "{exploited}"
    );
    let first = show(&sb, file, 0);
    assert_eq!(first["state"], "complete", "{first}");
    assert_eq!(first["children"][0]["trial"], 2, "{first}");
    assert!(first.get("parent").is_none(), "{first}");
    // The budget counts every trial: 3. No staging copy is left behind.
    assert_eq!(sb.trials(file).len(), 3);
    assert!(!sb.join("studies/runs/pbt/.pbt").exists());
    // The text of `tune show` and the view say the same.
    let text_show = text(&sb.run(&["show", "2", file]));
    assert!(
        text_show.contains(&format!(
            "continues trial 0 from its checkpoint at step {from}"
        )),
        "{text_show}"
    );
    let conn = sb.db("studies/tune.db");
    let (p, s): (Option<i64>, Option<i64>) = conn
        .query_row(
            "SELECT parent, parent_step FROM tune_trials_view WHERE number = 2",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the view");
    assert_eq!((p, s), (Some(0), Some(from as i64)));
}

#[test]
fn pbt_is_refused_where_it_cannot_work_naming_the_key() {
    let sb = Sandbox::new();
    // A param that is not searched.
    let file = pbt_study(&sb, "");
    let study = std::fs::read_to_string(sb.join(file)).expect("study");
    sb.write(
        file,
        &study.replace("mutate = [\"lr\"]", "mutate = [\"lr\", \"depth\"]"),
    );
    let out = sb.run(&["run", file, "--no-tui"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("pruner.mutate") && t.contains("\"depth\" is not a param"),
        "{t}"
    );
    // Bad values name their key.
    for (from, to, key) in [
        ("population = 4", "population = 1", "pruner.population"),
        ("quantile = 0.5", "quantile = 0.9", "pruner.quantile"),
        ("interval = 2", "interval = 0", "pruner.interval"),
    ] {
        sb.write(file, &study.replace(from, to));
        let out = sb.run(&["run", file, "--no-tui"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(key), "{key}: {}", text(&out));
    }
    // A builtin study that saves no checkpoints.
    let builtin = r#"[study]
name = "b"
metric = "val_loss"
trials = 2

[space]
lr = { type = "float", low = 1e-3, high = 1.0, log = true }

[trial]
kind = "builtin"
epochs = 3
checkpoints = false

[trial.model]
kind = "mlp"

[trial.data]
dataset = "digits"

[pruner]
kind = "pbt"
"#;
    sb.write("b.toml", builtin);
    let out = sb.run(&["run", "b.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("checkpoints = false"), "{}", text(&out));
    // A builtin param that cannot change mid-run.
    sb.write(
        "b.toml",
        &builtin
            .replace("checkpoints = false\n", "")
            .replace(
                "kind = \"pbt\"",
                "kind = \"pbt\"\nmutate = [\"lr\", \"batch_size\"]",
            )
            .replace(
                "[space]\n",
                "[space]\nbatch_size = { type = \"categorical\", choices = [32, 64] }\n",
            ),
    );
    let out = sb.run(&["run", "b.toml", "--no-tui"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("\"batch_size\" cannot change while a builtin trial runs"),
        "{}",
        text(&out)
    );
    // ask-tell: its client runs the trials.
    sb.write(
        "s.toml",
        "[space]\nx = { type = \"float\", low = 0.0, high = 1.0 }\n\n[pruner]\nkind = \"pbt\"\n",
    );
    let out = sb.run(&["ask-tell", "--space", "s.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("s.toml: key `pruner.kind`: \"pbt\""),
        "{said}"
    );
}

/// How the child's directory in a shared `checkpoint_dir` cannot be written.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ChildDir {
    /// A regular file where it goes.
    ARegularFile,
    /// A read-only filesystem mounted there.
    AReadOnlyMount,
}

/// Tune itself copies a parent's checkpoint into its child's directory
/// (`checkpoint::seed_from`). Where that directory cannot be written, the copy says so, naming
/// the child's directory and what failed there (not the parent's, which is fine); the child
/// fails alone with its own reason, the parent and the exploited trial are untouched, and the
/// study ends with its budget.
#[rstest]
#[case::a_regular_file(ChildDir::ARegularFile)]
#[case::a_read_only_mount(ChildDir::AReadOnlyMount)]
fn a_child_whose_checkpoint_dir_cannot_be_written_fails_alone_and_the_copy_names_it(
    #[case] how: ChildDir,
) {
    let sb = Sandbox::new();
    let file = pbt_study(&sb, "");
    let root = sb.join("ckpt");
    let study = std::fs::read_to_string(sb.join(file)).expect("study");
    sb.write(
        file,
        &study.replace(
            "timeout = \"1m\"",
            &format!(
                "timeout = \"1m\"\ncheckpoint_dir = {:?}",
                root.display().to_string()
            ),
        ),
    );
    let child = root.join("pbt/trial-00002");
    // Declared after the sandbox: unmounted before the sandbox is removed.
    let _mounted;
    match how {
        ChildDir::ARegularFile => {
            sb.write("ckpt/pbt/trial-00002", "a regular file");
        }
        ChildDir::AReadOnlyMount => match Tmpfs::mount(&child, "ro,size=64k") {
            Ok(m) => _mounted = m,
            Err(e) => {
                eprintln!("skipped: cannot mount a read-only tmpfs: {e}");
                return;
            }
        },
    }
    let out = sb.run(&["run", file, "--no-tui"]);
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{how:?}: {err}");
    assert!(out.status.success(), "{how:?}: {}", text(&out));
    let said = err
        .lines()
        .find(|l| l.starts_with("tune: trial 2 cannot copy trial 0's checkpoint"))
        .unwrap_or_else(|| panic!("{how:?}: the failed copy is told: {err}"));
    let at = format!(
        "(trial.checkpoint_dir): emptying {}: {}",
        child.display(),
        match how {
            ChildDir::ARegularFile => "Not a directory",
            ChildDir::AReadOnlyMount => "Device or resource busy",
        }
    );
    assert!(said.contains(&at), "{how:?}: {at:?} in {said}");
    assert!(
        !said.contains(".pbt"),
        "{how:?}: names the child's directory, not the staging copy: {said}"
    );

    let trials = sb.trials(file);
    assert_eq!(counted(&trials), 3, "{how:?}: the budget: {trials:#?}");
    let shown = show(&sb, file, 2);
    assert_eq!(shown["state"], "failed", "{how:?}: {shown:#}");
    let why = format!(
        "{} | {}",
        shown["error"].as_str().unwrap_or_default(),
        shown["log_tail"].as_str().unwrap_or_default()
    );
    let want = match how {
        ChildDir::ARegularFile => {
            format!(
                "cannot create the checkpoint directory {}: ",
                child.display()
            )
        }
        ChildDir::AReadOnlyMount => format!(
            "Read-only file system: '{}'",
            child.join("attempts.log").display()
        ),
    };
    assert!(why.contains(&want), "{how:?}: {want:?} in {why}");
    // The parent and the exploited trial are as they would be without the fault.
    let parent = show(&sb, file, 0);
    assert_eq!(parent["state"], "complete", "{how:?}: {parent}");
    assert_eq!(report_steps(&parent), (0..6).collect::<Vec<_>>(), "{how:?}");
    assert_eq!(show(&sb, file, 1)["state"], "pruned", "{how:?}");
    assert!(!sb.join("studies/runs/pbt/.pbt").exists(), "{how:?}");
}
