//! The pruning benchmark (`tune bench pruning`, issues 5 and 26): what a pruner (ASHA by
//! default; `--pruner` picks any, or the builtin default) buys on a study of the quickstart's
//! shape (Fashion-MNIST, the MLP, the quickstart's space), measured by running the real binary
//! on generated study files in a temp dir and reading the SQLite databases.
//!
//! Per seed:
//! 1. Same trials: `none` and the pruner with the same number of trials, the same seed and the
//!    same sampler: the best validation loss of each, their relative difference, and the
//!    epoch-compute of each (the sum over trials of the epochs actually trained: the `epoch`
//!    of a trial's last report).
//! 2. Same compute: the pruner with a larger trial budget, cut after the last trial (by number)
//!    at which its cumulative epoch-compute is still within what `none` spent in 1; the best
//!    validation loss of those trials against `none`'s.
//!
//! The goals (issue 5's): in 1, the pruned study's best within 2 % of `none`'s at no more than
//! 40 % of its compute; in 2, a better best than `none`'s (issue 26's, for the builtin
//! default). What belongs here: the study files, the accounting ([`compute`], [`best`],
//! [`cut_at_compute`], [`Goals`]) and the table; the pruning rules live in `pruner`.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::Context;

use crate::cli::PruningArgs;
use tune::sampler::SamplerKind;
use tune::storage::SqliteStorage;
use tune::trial::TrialState;

/// Same trials: the pruned study's best may be at most this much worse than `none`'s, relatively.
pub const MAX_LOSS_GAP: f64 = 0.02;
/// Same trials: the pruned study may spend at most this fraction of `none`'s epoch-compute.
pub const MAX_COMPUTE_RATIO: f64 = 0.40;

/// One trial of a finished benchmark study, as the accounting sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRecord {
    pub number: u64,
    pub state: TrialState,
    /// The objective value stored for the trial (`None` for a failed one).
    pub value: Option<f64>,
    /// Epochs trained: the `epoch` of the trial's last report (0 without reports).
    pub epochs: f64,
}

/// The epoch-compute of `trials`: the sum of the epochs each trained.
pub fn compute(trials: &[TrialRecord]) -> f64 {
    trials.iter().map(|t| t.epochs).sum()
}

/// The best (lowest) value of a complete trial; pruned trials carry an intermediate value and
/// failed ones none, so neither counts, as in `tune best`.
pub fn best(trials: &[TrialRecord]) -> Option<f64> {
    trials
        .iter()
        .filter(|t| t.state == TrialState::Complete)
        .filter_map(|t| t.value)
        .filter(|v| v.is_finite())
        .min_by(f64::total_cmp)
}

/// The longest prefix of `trials` (ordered by number) whose epoch-compute stays within
/// `budget`: what the pruned study had found when it had spent as much as the baseline. Trials later by
/// number are left out even when short, since a study cannot know in advance which trials
/// will be pruned. Hazard: the sums are of fractions such as 1/3 epoch, so the comparison
/// allows a relative hair of slack, or a prefix that spent exactly the budget would be cut.
pub fn cut_at_compute(trials: &[TrialRecord], budget: f64) -> Vec<TrialRecord> {
    let mut sorted = trials.to_vec();
    sorted.sort_by_key(|t| t.number);
    let limit = budget + budget.abs() * 1e-9;
    let mut spent = 0.0;
    sorted
        .into_iter()
        .take_while(|t| {
            spent += t.epochs;
            spent <= limit
        })
        .collect()
}

/// How many trials the same-compute pruned study is given: enough to exceed `none`'s compute
/// at the per-trial compute the pruner showed with the same trials, with a wide margin (the cut
/// then decides), and never more than `cap`. The margin is wide because pruners stop more as
/// the study fills (ASHA's rungs: with more trials, each spends less (12 trials spent 1.9 epochs each, 74 of
/// them 0.8 in a first run).
pub fn trials_for_equal_compute(
    none_compute: f64,
    pruned_compute: f64,
    pruned_trials: u64,
    cap: u64,
) -> u64 {
    if pruned_trials == 0 || pruned_compute.is_nan() || pruned_compute <= 0.0 {
        return cap;
    }
    let per_trial = pruned_compute / pruned_trials as f64;
    let fit = (none_compute / per_trial * 2.5).ceil() + 2.0;
    if fit.is_finite() && fit < cap as f64 {
        (fit as u64).max(pruned_trials)
    } else {
        cap
    }
}

/// The issue's goals for one seed (or for the means over seeds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Goals {
    /// `(pruned − none) / none` of the best values with the same trials (NaN without a best).
    pub loss_gap: f64,
    /// The pruned study's epoch-compute over `none`'s, with the same trials.
    pub compute_ratio: f64,
    /// `(pruned − none) / none` at the same compute; negative is better.
    pub equal_compute_gap: f64,
}

impl Goals {
    pub fn new(
        none_best: Option<f64>,
        pruned_best: Option<f64>,
        none_compute: f64,
        pruned_compute: f64,
        pruned_equal_best: Option<f64>,
    ) -> Goals {
        let gap = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b != 0.0 => (a - b) / b.abs(),
            _ => f64::NAN,
        };
        Goals {
            loss_gap: gap(pruned_best, none_best),
            compute_ratio: if none_compute > 0.0 {
                pruned_compute / none_compute
            } else {
                f64::NAN
            },
            equal_compute_gap: gap(pruned_equal_best, none_best),
        }
    }

    /// Within 2 % of `none`'s best (NaN fails).
    pub fn close_enough(&self) -> bool {
        self.loss_gap <= MAX_LOSS_GAP
    }

    /// At most 40 % of `none`'s compute (NaN fails).
    pub fn cheap_enough(&self) -> bool {
        self.compute_ratio <= MAX_COMPUTE_RATIO
    }

    /// Strictly better than `none` at the same compute (NaN fails).
    pub fn better_at_equal_compute(&self) -> bool {
        self.equal_compute_gap < 0.0
    }
}

/// A finished benchmark study.
struct StudyRun {
    trials: Vec<TrialRecord>,
    wall_s: f64,
}

impl StudyRun {
    fn count(&self, state: TrialState) -> usize {
        self.trials.iter().filter(|t| t.state == state).count()
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Arm {
    None,
    Pruned,
}

/// The pruners `--pruner` takes.
pub const PRUNERS: [&str; 6] = ["asha", "hyperband", "median", "forecast", "pbt", "default"];

/// The `[pruner]` table of the pruned arm (its `max_resource` is filled from `epochs` by the
/// study check), or `None` for `default`: no table, the builtin default.
fn pruner_table(a: &PruningArgs) -> anyhow::Result<Option<String>> {
    let min = |default: Option<f64>| {
        a.min_resource
            .or(default)
            .map_or(String::new(), |m| format!("\nmin_resource = {m}"))
    };
    let eta = format!("\nreduction_factor = {}", a.reduction_factor);
    let body = |kind: &str, rest: String| format!("kind = \"{kind}\"\nresource = \"epoch\"{rest}");
    Ok(match a.pruner.as_str() {
        "asha" => Some(body("asha", min(Some(1.0 / 3.0)) + &eta)),
        "hyperband" => Some(body("hyperband", min(None) + &eta)),
        "median" | "forecast" => Some(body(&a.pruner, min(None))),
        // Three points a run (a third of the epochs apart), a population of the slots.
        "pbt" => Some(body(
            "pbt",
            format!(
                "\ninterval = {}\npopulation = {}",
                (a.epochs as f64 / 3.0).max(1.0),
                a.workers.max(2)
            ),
        )),
        "default" => None,
        other => anyhow::bail!(
            "--pruner: unknown pruner `{other}` (one of {})",
            PRUNERS.join(", ")
        ),
    })
}

/// The study file: the quickstart's space, model and trainer settings, on a subset of the
/// training images, with several epochs and reports inside each.
fn study_toml(a: &PruningArgs, arm: Arm, seed: u64, trials: u64) -> anyhow::Result<String> {
    let pruner = match arm {
        Arm::None => Some("kind = \"none\"".to_string()),
        Arm::Pruned => pruner_table(a)?,
    }
    .map_or(String::new(), |t| format!("[pruner]\n{t}\n"));
    Ok(format!(
        r#"[study]
name = "pruning"
metric = "val_loss"
direction = "minimize"
trials = {trials}
seed = {seed}
storage = "bench.db"

[space]
lr = {{ type = "float", low = 1e-5, high = 1.0, log = true }}
optimizer = {{ type = "categorical", choices = ["sgd", "adam", "adamw"] }}
momentum = {{ type = "float", low = 0.0, high = 0.95, when = {{ optimizer = "sgd" }} }}
width = {{ type = "categorical", choices = [64, 128, 256] }}
batch_size = {{ type = "categorical", choices = [64, 128, 256] }}
dropout = {{ type = "float", low = 0.0, high = 0.3 }}

[sampler]
kind = "{sampler}"

{pruner}
[workers]
count = {workers}
devices = ["{device}"]

[trial]
kind = "builtin"
epochs = {epochs}
report_every = {report_every}
schedule = "cosine"
warmup = 0.05
amp = "bf16"
timeout = "10m"

[trial.model]
kind = "mlp"
depth = 2

[trial.data]
dataset = "fashion-mnist"
limit = {limit}
"#,
        sampler = a.sampler,
        workers = a.workers,
        epochs = a.epochs,
        report_every = a.report_every,
        limit = a.limit,
        device = a.device,
    ))
}

/// Runs one study with the real binary in a fresh directory under `root`.
fn run_study(exe: &Path, root: &Path, label: &str, toml_text: &str) -> anyhow::Result<StudyRun> {
    let dir = root.join(label);
    std::fs::create_dir_all(&dir)?;
    let study = dir.join("study.toml");
    std::fs::write(&study, toml_text)?;
    let t0 = Instant::now();
    let out = crate::process::ends_with_bench(&mut Command::new(exe))
        .args(["run", "--no-tui"])
        .arg(&study)
        .current_dir(&dir)
        // The parent's `--db` (or TUNE_DB) would send every study to one database.
        .env_remove("TUNE_DB")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {}", exe.display()))?;
    let wall_s = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        let tail = |b: &[u8]| {
            let s = String::from_utf8_lossy(b);
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        anyhow::bail!(
            "the benchmark study {label} failed ({}):\n{}\n{}",
            out.status,
            tail(&out.stdout),
            tail(&out.stderr)
        );
    }
    Ok(StudyRun {
        trials: read_trials(&dir.join("bench.db"))?,
        wall_s,
    })
}

/// Every trial of the (only) study in `db`, by number, with its epochs trained.
fn read_trials(db: &Path) -> anyhow::Result<Vec<TrialRecord>> {
    let storage = SqliteStorage::open_read_only(db)?;
    let conn = storage.connection();
    let mut stmt = conn.prepare(
        "SELECT t.number, t.state, v.value,
                (SELECT json_extract(r.metrics_json, '$.epoch') FROM tune_reports r
                 WHERE r.trial_id = t.trial_id
                   AND json_extract(r.metrics_json, '$.epoch') IS NOT NULL
                 ORDER BY r.seq DESC LIMIT 1),
                (SELECT r.step FROM tune_reports r
                 WHERE r.trial_id = t.trial_id
                   AND json_extract(r.metrics_json, '$.epoch') IS NOT NULL
                 ORDER BY r.seq DESC LIMIT 1),
                (SELECT json_extract(a.value_json, '$.step') FROM trial_system_attributes a
                 WHERE a.trial_id = t.trial_id AND a.key = 'tune:parent')
         FROM trials t
         LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
         ORDER BY t.number",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<f64>>(2)?,
            r.get::<_, Option<f64>>(3)?,
            r.get::<_, Option<f64>>(4)?,
            r.get::<_, Option<f64>>(5)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (number, state, value, epochs, step, parent_step) = row?;
        // A child of population-based training resumes its parent's checkpoint: its epochs
        // count on from the parent's, and it trained only those past the checkpoint's step
        // (the epoch a step stands at, from its own last report).
        let inherited = match (epochs, step, parent_step) {
            (Some(e), Some(s), Some(p)) if s > 0.0 => p * e / s,
            _ => 0.0,
        };
        let state = TrialState::from_optuna(&state)
            .ok_or_else(|| anyhow::anyhow!("trial {number}: unknown state {state:?}"))?;
        out.push(TrialRecord {
            number: u64::try_from(number)?,
            state,
            value,
            epochs: (epochs.unwrap_or(0.0) - inherited).max(0.0),
        });
    }
    Ok(out)
}

/// One seed's three studies, reduced.
struct SeedResult {
    seed: u64,
    none: StudyRun,
    pruned: StudyRun,
    /// The same-compute ASHA study, whole; `equal` is its cut.
    pruned_long: StudyRun,
    equal: Vec<TrialRecord>,
    goals: Goals,
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("–".to_string(), |v| format!("{v:.4}"))
}

fn pass(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { s / n as f64 }
}

pub fn run(a: &PruningArgs) -> anyhow::Result<ExitCode> {
    crate::process::require_fashion_mnist("pruning")?;
    anyhow::ensure!(!a.seeds.is_empty(), "--seeds: give at least one seed");
    anyhow::ensure!(a.trials >= 1, "--trials must be at least 1");
    anyhow::ensure!(
        a.epochs >= 2,
        "--epochs must be at least 2 for anything to prune"
    );
    anyhow::ensure!(a.workers >= 1, "--workers must be at least 1");
    anyhow::ensure!(
        SamplerKind::parse(&a.sampler).is_some(),
        "--sampler: unknown sampler `{}` (one of {})",
        a.sampler,
        SamplerKind::NAMES.join(", ")
    );
    // The pruned arm's study file, checked as `tune run` checks it, so that a bad flag is said
    // before any training.
    let pruner = tune::spec::parse(
        Path::new("study.toml"),
        &study_toml(a, Arm::Pruned, 0, a.trials)?,
        &Default::default(),
    )
    .map_err(|e| {
        anyhow::anyhow!("{e} (from --pruner, --min-resource, --reduction-factor, --epochs)")
    })?
    .pruner;
    let name = a.pruner.as_str();

    let exe = crate::process::tune_exe()?;
    tune::commands::run::worker_exe()?;
    let root = tempfile::Builder::new()
        .prefix("tune-bench-pruning-")
        .tempdir()?;
    if a.keep {
        eprintln!("studies and databases kept in {}", root.path().display());
    }
    println!(
        "tune bench pruning: Fashion-MNIST ({} training images, 10 000 validation), MLP depth 2, \
         the quickstart's space, {} epochs, a report every {} steps, sampler {}, {} workers on {}; \
         {name}: {pruner:?}; {} trials; seeds {:?}",
        a.limit, a.epochs, a.report_every, a.sampler, a.workers, a.device, a.trials, a.seeds
    );
    let t_all = Instant::now();
    let mut results = Vec::new();
    for &seed in &a.seeds {
        let none = run_study(
            &exe,
            root.path(),
            &format!("s{seed}-none"),
            &study_toml(a, Arm::None, seed, a.trials)?,
        )?;
        eprintln!(
            "  seed {seed}: none, {} trials: best {}, {:.2} epochs, {:.0} s",
            none.trials.len(),
            fmt_opt(best(&none.trials)),
            compute(&none.trials),
            none.wall_s
        );
        let pruned = run_study(
            &exe,
            root.path(),
            &format!("s{seed}-{}", a.pruner),
            &study_toml(a, Arm::Pruned, seed, a.trials)?,
        )?;
        eprintln!(
            "  seed {seed}: {name}, {} trials: best {}, {:.2} epochs, {:.0} s",
            pruned.trials.len(),
            fmt_opt(best(&pruned.trials)),
            compute(&pruned.trials),
            pruned.wall_s
        );
        let long_trials = trials_for_equal_compute(
            compute(&none.trials),
            compute(&pruned.trials),
            a.trials,
            a.trials * 20,
        );
        let pruned_long = run_study(
            &exe,
            root.path(),
            &format!("s{seed}-{}-long", a.pruner),
            &study_toml(a, Arm::Pruned, seed, long_trials)?,
        )?;
        let equal = cut_at_compute(&pruned_long.trials, compute(&none.trials));
        eprintln!(
            "  seed {seed}: {name}, {} trials: {} within none's compute, best {}, {:.0} s",
            pruned_long.trials.len(),
            equal.len(),
            fmt_opt(best(&equal)),
            pruned_long.wall_s
        );
        let goals = Goals::new(
            best(&none.trials),
            best(&pruned.trials),
            compute(&none.trials),
            compute(&pruned.trials),
            best(&equal),
        );
        results.push(SeedResult {
            seed,
            none,
            pruned,
            pruned_long,
            equal,
            goals,
        });
    }
    print_tables(a, name, &results, t_all.elapsed().as_secs_f64());
    if a.keep {
        let _ = root.keep();
    }
    Ok(ExitCode::SUCCESS)
}

fn print_tables(a: &PruningArgs, name: &str, results: &[SeedResult], total_s: f64) {
    println!();
    println!("Same trials ({} each, same seed and sampler):", a.trials);
    println!();
    println!(
        "| seed | none best val_loss | {name} best val_loss | {name} vs none | none epochs | {name} epochs | {name}/none compute | {name} pruned | wall s none / {name} |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in results {
        println!(
            "| {} | {} | {} | {:+.2} % | {:.2} | {:.2} | {:.1} % | {}/{} | {:.0} / {:.0} |",
            r.seed,
            fmt_opt(best(&r.none.trials)),
            fmt_opt(best(&r.pruned.trials)),
            r.goals.loss_gap * 100.0,
            compute(&r.none.trials),
            compute(&r.pruned.trials),
            r.goals.compute_ratio * 100.0,
            r.pruned.count(TrialState::Pruned),
            r.pruned.trials.len(),
            r.none.wall_s,
            r.pruned.wall_s
        );
    }
    let mean_gap = mean(results.iter().map(|r| r.goals.loss_gap));
    let mean_ratio = mean(results.iter().map(|r| r.goals.compute_ratio));
    let mean_eq = mean(results.iter().map(|r| r.goals.equal_compute_gap));
    println!(
        "| mean | | | {:+.2} % | | | {:.1} % | | |",
        mean_gap * 100.0,
        mean_ratio * 100.0
    );
    println!();
    println!(
        "Same epoch-compute ({name} given more trials, cut after the last trial by number whose \
         cumulative epochs stay within none's):"
    );
    println!();
    println!(
        "| seed | none best val_loss ({} trials) | {name} best val_loss | {name} trials within the compute | {name} epochs | {name} vs none |",
        a.trials
    );
    println!("|---|---|---|---|---|---|");
    for r in results {
        println!(
            "| {} | {} | {} | {} (of {} run) | {:.2} | {:+.2} % |",
            r.seed,
            fmt_opt(best(&r.none.trials)),
            fmt_opt(best(&r.equal)),
            r.equal.len(),
            r.pruned_long.trials.len(),
            compute(&r.equal),
            r.goals.equal_compute_gap * 100.0
        );
    }
    println!("| mean | | | | | {:+.2} % |", mean_eq * 100.0);
    println!();
    let mean_goals = Goals {
        loss_gap: mean_gap,
        compute_ratio: mean_ratio,
        equal_compute_gap: mean_eq,
    };
    let per_seed = |f: fn(&Goals) -> bool| {
        results
            .iter()
            .map(|r| format!("seed {}: {}", r.seed, pass(f(&r.goals))))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "Goal: same trials, {name}'s best within {:.0} % of none's: {} (mean {:+.2} %; {})",
        MAX_LOSS_GAP * 100.0,
        pass(mean_goals.close_enough()),
        mean_gap * 100.0,
        per_seed(Goals::close_enough)
    );
    println!(
        "Goal: same trials, {name} spends at most {:.0} % of none's epoch-compute: {} (mean {:.1} %; {})",
        MAX_COMPUTE_RATIO * 100.0,
        pass(mean_goals.cheap_enough()),
        mean_ratio * 100.0,
        per_seed(Goals::cheap_enough)
    );
    println!(
        "Goal: same compute, {name} finds a better best: {} (mean {:+.2} %; {})",
        pass(mean_goals.better_at_equal_compute()),
        mean_eq * 100.0,
        per_seed(Goals::better_at_equal_compute)
    );
    println!("Total wall time: {total_s:.0} s");
}

#[cfg(test)]
mod tests {
    use super::*;
    use tune::pruner::{AshaConfig, PrunerConfig};

    fn t(number: u64, state: TrialState, value: Option<f64>, epochs: f64) -> TrialRecord {
        TrialRecord {
            number,
            state,
            value,
            epochs,
        }
    }

    #[test]
    fn compute_sums_the_epochs_every_trial_trained_pruned_and_failed_included() {
        let trials = [
            t(0, TrialState::Complete, Some(0.5), 9.0),
            t(1, TrialState::Pruned, Some(0.9), 1.0 / 3.0),
            t(2, TrialState::Failed, None, 0.25),
        ];
        assert!((compute(&trials) - (9.0 + 1.0 / 3.0 + 0.25)).abs() < 1e-12);
        assert_eq!(compute(&[]), 0.0);
    }

    #[test]
    fn best_counts_only_complete_trials_with_finite_values() {
        let trials = [
            t(0, TrialState::Complete, Some(0.5), 9.0),
            // A pruned trial's stored value is intermediate: lower here, yet not a result.
            t(1, TrialState::Pruned, Some(0.1), 1.0),
            t(2, TrialState::Failed, None, 0.2),
            t(3, TrialState::Complete, Some(f64::NAN), 9.0),
            t(4, TrialState::Complete, Some(0.4), 9.0),
        ];
        assert_eq!(best(&trials), Some(0.4));
        assert_eq!(best(&trials[1..3]), None);
    }

    #[test]
    fn cut_keeps_the_trials_by_number_until_the_budget_is_spent() {
        // Out of order, as a parallel study finishes them.
        let trials = [
            t(2, TrialState::Pruned, Some(0.9), 1.0 / 3.0),
            t(0, TrialState::Complete, Some(0.5), 9.0),
            t(1, TrialState::Pruned, Some(0.8), 1.0),
            t(3, TrialState::Complete, Some(0.3), 9.0),
            t(4, TrialState::Pruned, Some(0.7), 1.0 / 3.0),
        ];
        let cut = cut_at_compute(&trials, 10.5);
        assert_eq!(
            cut.iter().map(|t| t.number).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        // Trial 4 would fit, but trial 3 came first and did not.
        assert_eq!(best(&cut), Some(0.5));
        assert_eq!(cut_at_compute(&trials, 100.0).len(), 5);
        assert!(cut_at_compute(&trials, 1.0).is_empty());
    }

    #[test]
    fn cut_keeps_a_prefix_that_spends_exactly_the_budget_despite_rounding() {
        let third = 1.0 / 3.0;
        let trials: Vec<_> = (0..9)
            .map(|i| t(i, TrialState::Pruned, Some(1.0), third))
            .collect();
        // Nine thirds sum to a hair off 3.0 in floating point; all nine have spent 3 epochs.
        assert_eq!(cut_at_compute(&trials, 3.0).len(), 9);
    }

    #[test]
    fn equal_compute_budget_scales_with_ashas_compute_per_trial() {
        // ASHA spent 30 of none's 100 epochs over 10 trials: 3 per trial, so about 34 trials
        // fit; two and a half times that and two, capped.
        assert_eq!(trials_for_equal_compute(100.0, 30.0, 10, 100), 86);
        assert_eq!(trials_for_equal_compute(100.0, 30.0, 10, 20), 20);
        assert_eq!(trials_for_equal_compute(100.0, 0.0, 10, 20), 20);
        assert_eq!(trials_for_equal_compute(100.0, f64::NAN, 10, 20), 20);
        // Never fewer than the same-trials study.
        assert_eq!(trials_for_equal_compute(10.0, 100.0, 10, 100), 10);
    }

    #[test]
    fn goals_compare_relative_gaps_and_the_compute_ratio() {
        let g = Goals::new(Some(0.40), Some(0.404), 100.0, 35.0, Some(0.39));
        assert!((g.loss_gap - 0.01).abs() < 1e-12);
        assert!((g.compute_ratio - 0.35).abs() < 1e-12);
        assert!((g.equal_compute_gap + 0.025).abs() < 1e-12);
        assert!(g.close_enough() && g.cheap_enough() && g.better_at_equal_compute());

        let g = Goals::new(Some(0.40), Some(0.41), 100.0, 45.0, Some(0.40));
        assert!(!g.close_enough() && !g.cheap_enough() && !g.better_at_equal_compute());
    }

    #[test]
    fn goals_fail_when_a_study_found_nothing() {
        let g = Goals::new(Some(0.4), None, 0.0, 10.0, None);
        assert!(g.loss_gap.is_nan() && g.compute_ratio.is_nan());
        assert!(!g.close_enough() && !g.cheap_enough() && !g.better_at_equal_compute());
    }

    /// ASHA's arguments at their defaults, on a small study.
    fn args(sampler: &str) -> PruningArgs {
        PruningArgs {
            seeds: vec![1],
            trials: 4,
            epochs: 9,
            limit: 1000,
            report_every: 13,
            pruner: "asha".into(),
            min_resource: None,
            reduction_factor: 3.0,
            sampler: sampler.into(),
            workers: 2,
            device: "cpu".into(),
            keep: false,
        }
    }

    #[test]
    fn study_files_of_both_arms_pass_the_study_check() {
        let dir = tempfile::tempdir().unwrap();
        let a = args("random");
        for arm in [Arm::None, Arm::Pruned] {
            let path = dir.path().join("study.toml");
            let text = study_toml(&a, arm, 1, 4).unwrap();
            match tune::spec::parse(&path, &text, &Default::default()) {
                Ok(study) => {
                    assert_eq!(study.trials, Some(4));
                    assert_eq!(study.sampler, SamplerKind::Random);
                    match arm {
                        Arm::None => assert_eq!(study.pruner, PrunerConfig::None),
                        // The full trial's epochs become ASHA's max_resource.
                        Arm::Pruned => assert_eq!(
                            study.pruner,
                            PrunerConfig::Asha(AshaConfig {
                                min_resource: 1.0 / 3.0,
                                max_resource: Some(9.0),
                                reduction_factor: 3.0,
                                min_early_stopping_rate: 0,
                                resource: "epoch".into(),
                                mode: tune::pruner::AshaMode::Stop,
                            })
                        ),
                    }
                }
                // Everything else was checked before the data set's install.
                Err(e) if e.message.contains("fashion-mnist is not installed") => {}
                Err(e) => panic!("{e}"),
            }
        }
        // `--device` puts every slot on it (a GPU run, docs/gpu.md).
        let gpu = PruningArgs {
            device: "cuda:0".into(),
            ..args("gp")
        };
        for arm in [Arm::None, Arm::Pruned] {
            let text = study_toml(&gpu, arm, 1, 4).unwrap();
            assert!(text.contains("devices = [\"cuda:0\"]\n"), "{text}");
        }
    }

    #[test]
    fn every_pruner_gets_its_table_and_default_none_at_all() {
        let mut a = args("gp");
        let table = |a: &PruningArgs| pruner_table(a).map_err(|e| e.to_string());
        assert_eq!(
            table(&a).unwrap().unwrap(),
            format!(
                "kind = \"asha\"\nresource = \"epoch\"\nmin_resource = {}\nreduction_factor = 3",
                1.0 / 3.0
            )
        );
        a.pruner = "forecast".into();
        assert_eq!(
            table(&a).unwrap().unwrap(),
            "kind = \"forecast\"\nresource = \"epoch\""
        );
        a.min_resource = Some(2.0);
        assert_eq!(
            table(&a).unwrap().unwrap(),
            "kind = \"forecast\"\nresource = \"epoch\"\nmin_resource = 2"
        );
        // Population-based training: three points a run, the slots as its population, and a
        // study file `tune run` takes (a builtin trainer's checkpoints are on by default).
        a.pruner = "pbt".into();
        assert_eq!(
            table(&a).unwrap().unwrap(),
            "kind = \"pbt\"\nresource = \"epoch\"\ninterval = 3\npopulation = 2"
        );
        let text = study_toml(&a, Arm::Pruned, 1, 4).unwrap();
        match tune::spec::parse(Path::new("study.toml"), &text, &Default::default()) {
            Ok(study) => assert!(matches!(study.pruner, PrunerConfig::Pbt(_)), "{text}"),
            Err(e) if e.message.contains("fashion-mnist is not installed") => {}
            Err(e) => panic!("{e}"),
        }
        a.pruner = "default".into();
        assert_eq!(table(&a).unwrap(), None);
        assert!(
            !study_toml(&a, Arm::Pruned, 1, 4)
                .unwrap()
                .contains("[pruner]")
        );
        assert!(
            study_toml(&a, Arm::None, 1, 4)
                .unwrap()
                .contains("[pruner]\nkind = \"none\"")
        );
        a.pruner = "sha".into();
        let e = table(&a).unwrap_err();
        assert!(
            e.contains("--pruner") && e.contains("`sha`") && e.contains("forecast"),
            "{e}"
        );
    }
}
