//! `tune run STUDY.toml`: create or resume the study and run it to its budget.

use crate::storage::StorageUrl;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::load_study;
use crate::cli::RunArgs;
use crate::runner::TrialRunner;
use crate::runner::command::CommandRunner;
use crate::runner::keeper::Keeper;
use crate::runner::worker::WorkerRunner;
use crate::scheduler::{Control, Scheduler};
use crate::study::TrialSpec;

pub fn run(args: &RunArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let mut study = load_study(&args.study, db)?;
    let ui = !args.no_tui && crate::tui::stdout_is_terminal();
    let whence = format!("{}: ", study.file.display());
    // A study that cannot run here is refused before its database is touched.
    check_checkpoint_dir(&study, &whence)?;
    if matches!(study.trial, TrialSpec::Builtin(_)) {
        worker_exe()?;
    }
    check_devices(&mut study, &whence, crate::devices::DevicesFrom::StudyFile)?;
    check_command(&study, &whence)?;
    check_checkpoint_store(&study, &whence)?;
    let file = study.file.clone();
    let mut storage =
        crate::storage::open(&study.storage).map_err(|e| super::storage_error(&file, e))?;
    follow_the_file(storage.as_mut(), &study, db, args.allow_space_change)?;
    let ways = WaysOut::of_file(&study.file, db);
    run_study(study, storage, ui, &ways)
}

/// How the commands that a run suggests at its end name the study: by its file for `tune run`
/// (with `--db` when one was given), by name and database for `tune worker`.
pub struct WaysOut {
    /// The study's arguments in a suggested command (`s.toml`, `--study s --db URL`).
    pub study_arg: String,
    /// Where `trials` is raised, as the end of a sentence.
    pub raise: String,
}

impl WaysOut {
    pub fn of_file(file: &std::path::Path, db: Option<&StorageUrl>) -> WaysOut {
        let file = file.display();
        WaysOut {
            study_arg: match db {
                Some(db) => format!("{file} --db {db}"),
                None => file.to_string(),
            },
            raise: format!("in {file}, then `tune run {file}` again"),
        }
    }
}

/// A study run again from a changed file: a changed search space is refused unless allowed
/// (its trials so far were sampled from the old one; usually the name was reused by mistake),
/// and the stored file becomes this one, so that workers and readers follow the change.
fn follow_the_file(
    storage: &mut dyn crate::storage::Storage,
    study: &crate::study::Study,
    db: Option<&StorageUrl>,
    allow_space_change: bool,
) -> anyhow::Result<()> {
    let Ok(row) = storage.study(&study.name) else {
        return Ok(()); // a new study
    };
    let new = super::new_study(study);
    if let Err(e) = crate::storage::check_same(&storage.location(), row.clone(), &new) {
        // Refused with the database untouched, saying what deleting the stored study loses.
        let trials = storage.trials(&row, None).map_err(super::storage_fault)?;
        let complete = trials
            .iter()
            .filter(|t| t.state() == crate::trial::TrialState::Complete)
            .count();
        return Err(match e {
            crate::storage::StorageError::Differs { .. } => {
                super::differs(&study.file, db, &e, Some((trials.len(), complete)))
            }
            other => super::storage_error(&study.file, other),
        });
    }
    let stored = storage.study_file(&row).map_err(super::storage_fault)?;
    let Some(text) = stored.text else {
        return Ok(());
    };
    if text == study.source {
        return Ok(());
    }
    let overrides = crate::spec::Overrides {
        db: Some(study.storage.clone()),
    };
    if let Ok(old) = crate::spec::parse(&study.file, &text, &overrides)
        && old.space != study.space
        && !allow_space_change
    {
        return Err(super::bad(format!(
            "{f}: study `{}` in {} was created with another search space ({}); its {} trials so far were sampled from the old one. To go on with the stored study, change the file back; to keep both, give this one another `study.name`; to start over from this file, `tune delete {f}{on}` deletes the stored study and its trials, then `tune run {f}{on}`; to go on with the new space, `tune run {f}{on} --allow-space-change`",
            study.name,
            study.storage,
            space_diff(&old.space, &study.space),
            storage.trials(&row, None).map(|t| t.len()).unwrap_or(0),
            f = study.file.display(),
            on = db.map(|d| format!(" --db {d}")).unwrap_or_default(),
        )));
    }
    storage
        .set_study_file(&row, &study.file, &study.source)
        .map_err(super::storage_fault)?;
    Ok(())
}

/// What changed between two spaces, by parameter: `+new`, `-gone`, `~changed`.
fn space_diff(old: &crate::space::Space, new: &crate::space::Space) -> String {
    let mut out = Vec::new();
    for p in new.params() {
        match old.get(&p.name) {
            None => out.push(format!("+{}", p.name)),
            Some(o) if o != p => out.push(format!("~{}", p.name)),
            Some(_) => {}
        }
    }
    for p in old.params() {
        if new.get(&p.name).is_none() {
            out.push(format!("-{}", p.name));
        }
    }
    out.join(" ")
}

/// Runs a checked study on `storage` until its budget is spent, its timeout passes or the
/// user stops it (`tune run` and `tune worker`).
pub fn run_study(
    study: crate::study::Study,
    storage: Box<dyn crate::storage::Storage>,
    ui: bool,
    ways: &WaysOut,
) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run_async(study, storage, ui, ways))
}

async fn run_async(
    study: crate::study::Study,
    storage: Box<dyn crate::storage::Storage>,
    ui: bool,
    ways: &WaysOut,
) -> anyhow::Result<ExitCode> {
    let runner: Arc<dyn TrialRunner> = match &study.trial {
        // Every trial's processes run under a keeper (this binary), so none outlives its
        // trial or this process, whatever ends it (src/runner/keeper.rs).
        TrialSpec::Command(c) => {
            Arc::new(CommandRunner::new(c.clone()).with_keeper(Keeper::current()))
        }
        TrialSpec::Builtin(b) => Arc::new(
            WorkerRunner::new((**b).clone(), worker_exe()?)
                .with_gpu_memory_fraction(study.gpu_memory_fraction)
                .with_objective(&study.name, &study.metric, study.direction)
                .with_keeper(Keeper::current()),
        ),
    };
    let sampler = crate::sampler::build_with(study.sampler, &study.sampler_options);
    let pruner = crate::pruner::build(&study.pruner);
    let (etx, erx) = mpsc::unbounded_channel();
    let (ctx, crx) = mpsc::unbounded_channel();
    let direction = study.direction;
    let metric = study.metric.clone();
    let file = study.file.clone();
    let (name, budget) = (study.name.clone(), study.trials);
    let scheduler = Scheduler::open(study, storage, sampler, pruner, runner, etx)
        .map_err(|e| super::storage_error(&file, e))?;

    // Ctrl-C once: stop asking for trials and let the running ones finish; twice: stop them
    // too. SIGTERM (a preemption, a time limit, an eviction): every running trial checkpoints
    // and stops as interrupted, queued again at once for any worker, and tune exits 75.
    // Every state is recorded either way.
    let signals = ctx.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let mut count = 0;
        loop {
            tokio::select! {
                r = tokio::signal::ctrl_c() => { if r.is_err() { return; } }
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {
                    crate::say!(
                        "tune: SIGTERM: preempted: no new trials; running ones checkpoint, stop and are queued again (exit {PREEMPTED})"
                    );
                    if signals.send(Control::Preempt).is_err() {
                        return;
                    }
                    continue;
                }
            }
            count += 1;
            let graceful = count == 1;
            if graceful {
                crate::say!(
                    "tune: stopping: no new trials; running ones finish (Ctrl-C again to stop them)"
                );
            } else {
                crate::say!("tune: stopping the running trials");
            }
            if signals.send(Control::Quit { graceful }).is_err() {
                return;
            }
        }
    });

    let summary = if ui {
        // The UI steers through its own sender; it stays open after the study ends, until
        // the user leaves, and restores the terminal on every way out.
        // While the UI owns the terminal, what would go to stderr (the database lost and
        // retried, say) goes to its footer: a line on stderr would land on top of its frame.
        let (updates, told) = crate::events::notices::merge(erx);
        let controls = ctx.clone();
        let ui = tokio::spawn(async move {
            let opts = crate::tui::Options {
                mode: crate::tui::Mode::Live,
                color: crate::tui::color_allowed(),
            };
            let state = crate::tui::terminal::run_updates(updates, Some(controls), opts).await;
            drop(told);
            state
        });
        drop(ctx);
        let summary = scheduler.run(crx).await;
        match ui.await {
            Ok(Ok(state)) => crate::say_out!("{}", crate::tui::summary_line(&state)),
            Ok(Err(e)) => crate::say!("tune: the terminal UI failed: {e}"),
            Err(e) => crate::say!("tune: the terminal UI failed: {e}"),
        }
        summary
    } else {
        let printer = tokio::spawn(crate::events::lines::print_lines(erx, direction, metric));
        let summary = scheduler.run(crx).await;
        drop(ctx);
        let _ = printer.await;
        summary
    };
    let summary = summary?;
    if summary.preempted {
        crate::say!(
            "tune: preempted: the interrupted trials run again from their checkpoints on the next `tune run` or `tune worker` of this study (exit {PREEMPTED})"
        );
        return Ok(ExitCode::from(PREEMPTED));
    }
    if let Some(why) = &summary.failing {
        crate::say!(
            "tune: stopped early: {why}\n  fix what makes them fail (`tune show N` has each one's stderr), then run the study again: it goes on with the budget that is left"
        );
        return Ok(ExitCode::from(1));
    }
    for note in budget_notes(&summary, &name, budget, ways) {
        crate::say!("tune: {note}");
    }
    if summary.complete == 0 {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// What a run says at its end when the budget is what stops the user: queued trials that will
/// not run, a study that had spent its budget before this run, and no complete trial at all
/// The exit status of a `tune run` or `tune worker` preempted by SIGTERM: 75, sysexits.h's
/// `EX_TEMPFAIL` ("temporary failure; the user is invited to retry"). Not 0, so Kubernetes
/// restarts the pod and Slurm's `--requeue` runs the job again; not 1, which says the study
/// failed.
pub const PREEMPTED: u8 = 75;

/// (with the failed trials that hold the budget). Each names the command that goes on.
pub fn budget_notes(
    summary: &crate::scheduler::RunSummary,
    name: &str,
    budget: Option<u64>,
    ways: &WaysOut,
) -> Vec<String> {
    let mut notes = Vec::new();
    let (counted, failed) = (summary.counted, summary.failed);
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    let trials = |n: u64| format!("{n} trial{}", plural(n));
    let budget_is = match budget {
        Some(b) => format!(
            "the budget (`trials = {b}`) is spent, with {} counted",
            trials(counted)
        ),
        None => "the budget is spent".to_string(),
    };
    let discard = format!(
        "`tune discard {} --state failed` sets the {} aside (kept and shown, but no longer counted) so that the next run runs that many again",
        ways.study_arg,
        if failed == 1 {
            "failed trial"
        } else {
            "failed trials"
        },
    );
    if summary.budget_spent && !summary.queued.is_empty() {
        let q = summary.queued.len() as u64;
        let numbers: Vec<String> = summary.queued.iter().map(u64::to_string).collect();
        notes.push(format!(
            "queued trial{} {} of study `{name}` did not run: {budget_is}; raise `trials` to {} {}",
            plural(q),
            numbers.join(", "),
            counted + q,
            ways.raise
        ));
    }
    if summary.complete == 0 {
        let mut note = format!("no trial completed in study `{name}`");
        if failed > 0 {
            note.push_str(&format!(
                ": its {} failed (`tune show N` has each one's error and stderr)",
                trials(failed)
            ));
            if summary.budget_spent {
                note.push_str(&format!(
                    " and {budget_is}. Once you have fixed what made them fail, {discard}"
                ));
            }
        }
        notes.push(note);
    } else if summary.budget_spent && summary.started == 0 && summary.queued.is_empty() {
        let mut note = format!(
            "study `{name}` had spent its budget before this run, so no trial ran: {budget_is}. To run more, raise `trials` {}",
            ways.raise
        );
        if failed > 0 {
            note.push_str(&format!(
                "; or, if the {} failed for a cause you have fixed, {discard}",
                trials(failed)
            ));
        }
        notes.push(note);
    }
    notes
}

/// A command study whose program or required files are missing here is refused before any
/// trial: every trial would fail the same way.
pub(super) fn check_command(study: &crate::study::Study, whence: &str) -> anyhow::Result<()> {
    if let TrialSpec::Command(c) = &study.trial {
        crate::runner::command::check_ready(c).map_err(|m| super::bad(format!("{whence}{m}")))?;
    }
    Ok(())
}

/// Refuses, before any trial starts, a study's `trial.checkpoint_dir` (a directory) that this
/// machine cannot write (read-only, under a regular file, a parent that cannot be created):
/// every trial would run without checkpoints, and a preempted one would lose all its work.
/// The refusal starts with `whence` (the study file) and names the key, the path and the OS
/// error.
pub(super) fn check_checkpoint_dir(
    study: &crate::study::Study,
    whence: &str,
) -> anyhow::Result<()> {
    if let TrialSpec::Builtin(b) = &study.trial
        && !b.checkpoints.enabled
    {
        return Ok(());
    }
    let Some(dir) = study.trial.checkpoint_dir() else {
        return Ok(());
    };
    crate::checkpoint::probe_writable(dir).map_err(|e| {
        super::bad(format!(
            "{whence}trial.checkpoint_dir: cannot write checkpoints in {}: {e} (give a directory this machine can write, shared by every machine that runs the study)",
            dir.display()
        ))
    })
}

/// A study whose checkpoints go to an object store that cannot take them (unreachable, no such
/// bucket, credentials refused) is refused before any trial and before its database is
/// touched: a small object is written, read back and deleted under `<url>/<study>/`.
pub(super) fn check_checkpoint_store(
    study: &crate::study::Study,
    whence: &str,
) -> anyhow::Result<()> {
    let Some(url) = study.trial.checkpoint_store() else {
        return Ok(());
    };
    let refuse = |e: crate::checkpoint::remote::RemoteError| {
        super::bad(format!(
            "{whence}trial.checkpoint_dir: cannot keep checkpoints in {url}: {e}"
        ))
    };
    let store = crate::checkpoint::remote::Store::open(url).map_err(refuse)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(store.probe(&study.name)).map_err(refuse)
}

/// Refuses, before any trial starts, slots whose device cannot run them: a builtin study on CUDA
/// with a `tune-worker` built without CUDA, or a `cuda:N` this machine does not have. Asked
/// here rather than in the spec: a query or `tune watch` of the same file may run anywhere.
///
/// `"auto"` means whatever can run here: with a `tune-worker` built for the CPU only, a
/// builtin study's slots go to the CPU, with a notice saying how to use the GPUs.
///
/// A refusal starts with `whence` (the study file) and names the key or flag (`from`) the
/// devices came from.
pub(super) fn check_devices(
    study: &mut crate::study::Study,
    whence: &str,
    from: crate::devices::DevicesFrom,
) -> anyhow::Result<()> {
    let visible = crate::devices::cuda_device_count();
    crate::devices::check_groups(&study.slots, study.gpus_per_trial, visible)
        .map_err(|e| super::bad(format!("{whence}{e}")))?;
    let on_cuda = study
        .slots
        .iter()
        .any(|d| crate::devices::cuda_index(d).is_some());
    if !on_cuda {
        return Ok(());
    }
    if let TrialSpec::Builtin(_) = &study.trial {
        let caps = crate::runner::worker::capabilities(&worker_exe()?)
            .map_err(|e| super::bad(format!("{whence}{e}")))?;
        if let Some(cpu) =
            crate::devices::auto_on_cpu_worker(&study.slots, study.auto_devices, &caps)
        {
            crate::say!(
                "tune: devices = \"auto\" found GPUs, but this tune-worker is built for the CPU only: the {} slot(s) train on the CPU (./scripts/setup.sh --cuda builds it with CUDA)",
                cpu.len()
            );
            study.slots = cpu;
            return Ok(());
        }
        crate::devices::check_worker(&study.slots, &caps, from)
            .map_err(|e| super::bad(format!("{whence}{e}")))?;
    }
    crate::devices::check_slots(&study.slots, visible, from)
        .map_err(|e| super::bad(format!("{whence}{e}")))?;
    if study.auto_devices
        && let Some(notice) = crate::devices::idle_gpus_notice(&study.slots, visible)
    {
        crate::say!("tune: {notice}");
    }
    Ok(())
}

/// The `tune-worker` binary that hosts libtorch: installed beside `tune`. It is built only with
/// the whole workspace (it links libtorch; `tune` alone does not), so a missing one is a set-up
/// mistake, reported as bad input before any trial starts.
pub fn worker_exe() -> anyhow::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let worker = exe.with_file_name("tune-worker");
    if !worker.is_file() {
        return Err(super::bad(format!(
            "builtin trials need `tune-worker` beside `tune` (it hosts the libtorch trainer), but {} does not exist; build both with `./scripts/setup.sh --libtorch && cargo build --release --workspace` (command trials need neither)",
            worker.display()
        )));
    }
    Ok(worker)
}
