//! Trials that run the user's own command (`docs/command-trials.md`): an argument vector
//! without a shell, placeholders and environment filled in, `tune: {json}` report lines parsed
//! as they arrive, every other line to the trial's log files, SIGTERM then SIGKILL to the whole
//! process group on timeout or stop.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::watch;

use super::keeper::{CANNOT_START, CANNOT_START_PREFIX, Keeper, Lifeline};
use super::{
    Exit, Progress, ReportSender, RunEnd, RunFuture, RunResult, RunnerError, SlotProcesses,
    StopRequest, TrialJob, TrialRunner,
};
use crate::limits::MAX_STEP;
use crate::spec::placeholders;
use crate::study::CommandSpec;
use crate::trial::{Report, ReportNotes};

/// How many lines of standard error are kept for the trial's record.
const TAIL_LINES: usize = 20;

pub use crate::trial::FINAL_KEY;

pub struct CommandRunner {
    spec: CommandSpec,
    keeper: Option<Keeper>,
    processes: SlotProcesses,
}

impl CommandRunner {
    pub fn new(spec: CommandSpec) -> CommandRunner {
        CommandRunner {
            spec,
            keeper: None,
            processes: SlotProcesses::default(),
        }
    }

    /// Runs every trial under a keeper (`tune run` and `tune worker` do), so that nothing
    /// the command starts outlives the trial or tune (see [`super::keeper`]).
    pub fn with_keeper(mut self, keeper: Option<Keeper>) -> CommandRunner {
        self.keeper = keeper;
        self
    }
}

/// Checks, before any trial starts, what every trial of the command would otherwise fail on
/// the same way: its program (a path, taken from the working directory, or a name found on
/// `PATH`) and each file of `[trial] requires`. The message names the key and where it looked.
pub fn check_ready(spec: &CommandSpec) -> Result<(), RunnerError> {
    // Under a launcher the program is its Python; the command's script must be there.
    let program = match &spec.launcher {
        Some(l) => {
            let script = &spec.argv[0];
            let path = spec.workdir.join(script);
            if placeholders(script).is_empty() && !path.is_file() {
                return Err(RunnerError::NotReady(format!(
                    "key `trial.command`: the script {script:?} that torchrun runs on each GPU is not there ({} does not exist)",
                    path.display()
                )));
            }
            &l.python
        }
        None => &spec.argv[0],
    };
    if placeholders(program).is_empty() {
        if program.contains('/') {
            let path = spec.workdir.join(program);
            if !path.is_file() {
                return Err(RunnerError::NotReady(format!(
                    "key `trial.command`: the program {program:?} is not there ({} does not exist)",
                    path.display()
                )));
            }
        } else {
            let path_var = spec
                .env
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| std::ffi::OsString::from(v))
                .or_else(|| std::env::var_os("PATH"))
                .unwrap_or_default();
            if !std::env::split_paths(&path_var).any(|d| is_executable(&d.join(program))) {
                return Err(RunnerError::NotReady(format!(
                    "key `trial.command`: the program {program:?} is not on PATH (install it, or give its path)"
                )));
            }
        }
    }
    for r in &spec.requires {
        let path = spec.workdir.join(r);
        if !path.exists() {
            return Err(RunnerError::NotReady(format!(
                "key `trial.requires`: {} is not there ({} does not exist); the command needs it: copy it beside the study file, or fix the path",
                r.display(),
                path.display()
            )));
        }
    }
    if let Some((program, args)) = spec.check.split_first() {
        let (status, stderr) = run_check(program, args, spec).map_err(|e| {
            RunnerError::NotReady(format!("key `trial.check`: cannot run {program:?}: {e}"))
        })?;
        let Some(status) = status else {
            return Err(RunnerError::NotReady(format!(
                "key `trial.check`: {:?} did not finish within {}s, so no trial was started",
                spec.check.join(" "),
                CHECK_LIMIT.as_secs()
            )));
        };
        if !status.success() {
            let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = lines[lines.len().saturating_sub(5)..].join("\n  ");
            return Err(RunnerError::NotReady(format!(
                "key `trial.check`: {:?} failed ({status}), so no trial was started{}",
                spec.check.join(" "),
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(":\n  {tail}")
                }
            )));
        }
    }
    Ok(())
}

/// How long `[trial] check` may run.
const CHECK_LIMIT: Duration = Duration::from_secs(120);

/// Runs the check command in the working directory: its exit status (`None` when it ran past
/// [`CHECK_LIMIT`] and was killed) and its standard error, read as it comes so a talkative
/// check never blocks on a full pipe.
fn run_check(
    program: &str,
    args: &[String],
    spec: &CommandSpec,
) -> std::io::Result<(Option<std::process::ExitStatus>, String)> {
    use std::io::Read;
    let mut child = std::process::Command::new(program)
        .args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut pipe = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    });
    let deadline = std::time::Instant::now() + CHECK_LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok((status, reader.join().unwrap_or_default()))
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Fills `{name}` placeholders: params (an inactive one leaves an empty string), `{trial}`,
/// `{trial_dir}`, `{checkpoint_dir}`, `{device}`, `{devices}` (the slot's device or group,
/// `cuda:0,cuda:1`), `{gpus}` (its CUDA indices, `0,1`; empty on the CPU).
pub fn fill_argv(argv: &[String], job: &TrialJob) -> Vec<String> {
    argv.iter()
        .map(|arg| {
            let mut out = String::with_capacity(arg.len());
            let mut last = 0;
            for (start, end, name) in placeholders(arg) {
                out.push_str(&arg[last..start]);
                match name {
                    "trial" => out.push_str(&job.number.to_string()),
                    "trial_dir" => out.push_str(&job.trial_dir.display().to_string()),
                    "checkpoint_dir" => {
                        out.push_str(&job.checkpoint_dir.display().to_string());
                    }
                    "device" => out.push_str(&job.device),
                    "devices" if !job.params.contains_key(name) => out.push_str(&job.device),
                    "gpus" if !job.params.contains_key(name) => {
                        out.push_str(&gpus(&job.device));
                    }
                    _ => {
                        if let Some(v) = job.params.get(name) {
                            out.push_str(&v.to_string());
                        }
                    }
                }
                last = end;
            }
            out.push_str(&arg[last..]);
            out
        })
        .collect()
}

/// What torchrun puts before each line of rank 0 that it shows (`--tee 3 --local-ranks-filter 0`).
const RANK0_PREFIX: &str = "[default0]:";

/// The directory in a trial's directory where torchrun writes each rank's output
/// (`ranks/<run>/attempt_0/<rank>/stdout.log`, `stderr.log`).
const RANK_LOGS: &str = "ranks";

/// The command line of a torchrun trial: `python -m torch.distributed.run` on one machine
/// (`--standalone`: a rendezvous of its own on a free port, so slots never collide) with one
/// process per GPU of the slot (`TUNE_NPROC`); every rank's output to the trial's `ranks/`
/// directory, and only rank 0's shown (so only its `tune:` lines are reports).
fn torchrun_argv(l: &crate::study::Launcher, job: &TrialJob, script: Vec<String>) -> Vec<String> {
    let nproc = crate::devices::cuda_indices(&job.device).len().max(1);
    let mut argv: Vec<String> = [
        l.python.as_str(),
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.push(nproc.to_string());
    argv.push("--log-dir".into());
    argv.push(job.trial_dir.join(RANK_LOGS).display().to_string());
    argv.extend(["--tee", "3", "--local-ranks-filter", "0"].map(String::from));
    argv.extend(script);
    argv
}

/// A failed torchrun trial's log tail: torchrun's own (which names the first rank that failed,
/// `rank : 1 (local_rank: 1)`), then the last lines that rank wrote on its standard error
/// (every rank's, where torchrun named none).
fn failed_rank_tail(rank_logs: &std::path::Path, tail: &str) -> String {
    let named: Option<usize> = tail
        .split("Root Cause")
        .nth(1)
        .and_then(|after| {
            after
                .lines()
                .find_map(|l| l.trim().strip_prefix("rank")?.trim().strip_prefix(':'))
        })
        .and_then(|r| r.split_whitespace().next()?.parse().ok());
    let mut files: Vec<(usize, PathBuf)> = Vec::new();
    for run in std::fs::read_dir(rank_logs).into_iter().flatten().flatten() {
        for attempt in std::fs::read_dir(run.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            for rank in std::fs::read_dir(attempt.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if let Some(r) = rank.file_name().to_str().and_then(|n| n.parse().ok())
                    && named.is_none_or(|n| n == r)
                {
                    files.push((r, rank.path().join("stderr.log")));
                }
            }
        }
    }
    files.sort();
    let mut out = tail.to_string();
    for (r, file) in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        if lines.is_empty() {
            continue;
        }
        let last = &lines[lines.len().saturating_sub(20)..];
        out.push_str(&format!(
            "\n--- rank {r}, the last lines of its stderr ---\n"
        ));
        out.push_str(&last.join("\n"));
        out.push('\n');
    }
    out
}

/// The CUDA indices of a slot's device as `CUDA_VISIBLE_DEVICES` writes them ("0,1"; empty
/// for the CPU).
fn gpus(device: &str) -> String {
    crate::devices::cuda_indices(device)
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The next line of `r` without its line ending, as bytes (any bytes: output need not be
/// UTF-8); `None` at the end of the stream or when it cannot be read any more.
async fn next_line<'a, R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &'a mut Vec<u8>,
) -> Option<&'a [u8]> {
    buf.clear();
    match r.read_until(b'\n', buf).await {
        Ok(0) | Err(_) => None,
        Ok(_) => {
            let mut line: &[u8] = buf;
            if let Some(l) = line.strip_suffix(b"\n") {
                line = l;
            }
            if let Some(l) = line.strip_suffix(b"\r") {
                line = l;
            }
            Some(line)
        }
    }
}

/// Reads a checkpoint line, `{"checkpoint": true, "step": N}` (the command saved a checkpoint
/// that holds everything up to step `N`): `Ok(Some(N))`. `Ok(None)` for a line that is no
/// checkpoint line (no `"checkpoint": true`: a report, or not JSON at all, which
/// [`parse_report`] words). A checkpoint line carries nothing else, and its step is required.
pub fn parse_checkpoint(json: &str) -> Result<Option<u64>, RunnerError> {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(json) else {
        return Ok(None);
    };
    // Only `true` makes a checkpoint line: a number under `checkpoint` stays a metric, as it
    // was before checkpoint lines existed.
    if map.get("checkpoint") != Some(&serde_json::Value::Bool(true)) {
        return Ok(None);
    }
    if let Some(k) = map.keys().find(|k| *k != "checkpoint" && *k != "step") {
        return Err(RunnerError::BadReport(format!(
            "a checkpoint line carries only `checkpoint` and `step`, not `{k}` (report metrics on a line of their own)"
        )));
    }
    match map.get("step") {
        Some(serde_json::Value::Number(n)) => match n.as_u64() {
            Some(s) if s <= MAX_STEP => Ok(Some(s)),
            _ => Err(RunnerError::BadReport(format!(
                "`step` must be an integer from 0 to {MAX_STEP}, not {n}"
            ))),
        },
        Some(other) => Err(RunnerError::BadReport(format!(
            "`step` must be an integer from 0 to {MAX_STEP}, not {other}"
        ))),
        None => Err(RunnerError::BadReport(
            "a checkpoint line needs the `step` its checkpoint holds".into(),
        )),
    }
}

/// Parses one `tune: {...}` line. `prev_step` is the step of the previous report, used when a
/// report has none. Returns a description of what is wrong otherwise.
pub fn parse_report(json: &str, prev_step: Option<u64>) -> Result<Report, RunnerError> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| RunnerError::BadReport(format!("not JSON: {e}")))?;
    let serde_json::Value::Object(map) = v else {
        return Err(RunnerError::BadReport(
            "a report must be a JSON object".into(),
        ));
    };
    let mut metrics = BTreeMap::new();
    let mut step = None;
    let mut is_final = false;
    for (k, v) in map {
        match (k.as_str(), &v) {
            // Hazard: the database holds steps as signed 64-bit integers; a larger one would
            // come back negative, so it is as malformed as a fraction.
            ("step", serde_json::Value::Number(n)) => match n.as_u64() {
                Some(s) if s <= MAX_STEP => step = Some(s),
                _ => {
                    return Err(RunnerError::BadReport(format!(
                        "`step` must be an integer from 0 to {MAX_STEP}, not {n}"
                    )));
                }
            },
            ("step", other) => {
                return Err(RunnerError::BadReport(format!(
                    "`step` must be an integer from 0 to {MAX_STEP}, not {other}"
                )));
            }
            ("final", serde_json::Value::Bool(b)) => is_final = *b,
            (_, serde_json::Value::Number(n)) => {
                metrics.insert(k, n.as_f64().unwrap_or(f64::NAN));
            }
            // JSON has no NaN or infinity; scripts that print Python's float('nan') via a
            // lenient encoder produce these strings, which are values too.
            (_, serde_json::Value::String(s))
                if matches!(
                    s.as_str(),
                    "NaN" | "nan" | "Infinity" | "-Infinity" | "inf" | "-inf"
                ) =>
            {
                let x = match s.as_str() {
                    "NaN" | "nan" => f64::NAN,
                    "Infinity" | "inf" => f64::INFINITY,
                    _ => f64::NEG_INFINITY,
                };
                metrics.insert(k, x);
            }
            (_, serde_json::Value::Null) => {
                metrics.insert(k, f64::NAN);
            }
            (_, other) => {
                return Err(RunnerError::BadReport(format!(
                    "metric `{k}` must be a number, not {other}"
                )));
            }
        }
    }
    if is_final {
        metrics.insert(FINAL_KEY.to_string(), 1.0);
    }
    let step = match (step, prev_step) {
        (Some(s), _) => s,
        (None, None) => 0,
        (None, Some(p)) if is_final => p,
        (None, Some(p)) if p < MAX_STEP => p + 1,
        (None, Some(p)) => {
            return Err(RunnerError::BadReport(format!(
                "no `step`, and the step after {p} would pass the largest, {MAX_STEP}"
            )));
        }
    };
    Ok(Report { step, metrics })
}

/// Parses Python-style `NaN`/`Infinity` literals too, which `json.dumps` emits by default.
fn lenient_json(json: &str) -> String {
    // Only rewrite bare tokens outside strings.
    let mut out = String::with_capacity(json.len() + 8);
    let mut in_str = false;
    let mut escaped = false;
    let mut rest = json;
    while let Some(c) = rest.chars().next() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_str = true;
            out.push(c);
            rest = &rest[1..];
            continue;
        }
        let mut matched = false;
        for (tok, rep) in [
            ("-Infinity", "\"-Infinity\""),
            ("Infinity", "\"Infinity\""),
            ("NaN", "\"NaN\""),
        ] {
            if rest.starts_with(tok) {
                out.push_str(rep);
                rest = &rest[tok.len()..];
                matched = true;
                break;
            }
        }
        if !matched {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn signal_group(pid: Option<u32>, sig: nix::sys::signal::Signal) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // The child leads its own process group, so this reaches whatever it started too.
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), sig);
    }
}

impl TrialRunner for CommandRunner {
    fn run(
        &self,
        job: TrialJob,
        reports: ReportSender,
        stop: watch::Receiver<StopRequest>,
    ) -> RunFuture {
        let spec = self.spec.clone();
        let keeper = self.keeper.clone();
        let processes = self.processes.clone();
        Box::pin(run_command(spec, keeper, processes, job, reports, stop))
    }

    fn trial_process(&self, slot: usize) -> Option<u32> {
        self.processes.get(slot)
    }
}

/// Opens a fresh log file in the trial's directory: never an existing file, and never through
/// a symbolic link planted at its name (whose target would otherwise be truncated).
pub(crate) fn create_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// How the runner ends a trial's process: through its keeper's lifeline where there is one,
/// else by signalling its process group (the command leads its own).
struct Ender {
    pid: Option<u32>,
    lifeline: Option<Lifeline>,
}

impl Ender {
    /// SIGTERM to the trial's process group (a keeper passes it on).
    fn term(&self) {
        signal_group(self.pid, nix::sys::signal::Signal::SIGTERM);
    }

    /// Kills the trial and everything it started.
    fn kill(&mut self) {
        if self.lifeline.take().is_none() {
            signal_group(self.pid, nix::sys::signal::Signal::SIGKILL);
        }
        // Else dropping the lifeline made the keeper kill every descendant, however far it
        // went (`setsid()`, a double fork); a SIGKILL to the keeper would orphan them instead.
    }
}

async fn run_command(
    spec: CommandSpec,
    keeper: Option<Keeper>,
    processes: SlotProcesses,
    job: TrialJob,
    reports: ReportSender,
    mut stop: watch::Receiver<StopRequest>,
) -> RunResult {
    let stdout_log = job.trial_dir.join("stdout.log");
    let stderr_log = job.trial_dir.join("stderr.log");
    let logs = vec![stdout_log.clone(), stderr_log.clone()];
    let fail = |reason: String, log_tail: Option<String>, logs: Vec<PathBuf>| RunResult {
        end: RunEnd::Failed { reason, log_tail },
        logs,
        notes: None,
    };
    let argv = match &spec.launcher {
        Some(l) => torchrun_argv(l, &job, fill_argv(&spec.argv, &job)),
        None => fill_argv(&spec.argv, &job),
    };
    let ranks = spec.launcher.is_some();
    let (mut cmd, lifeline) = match &keeper {
        Some(k) => match k.command(&argv[0], &argv[1..]) {
            Ok((cmd, lifeline)) => (cmd, Some(lifeline)),
            Err(e) => {
                return fail(
                    format!("cannot start the trial's keeper: {e}"),
                    None,
                    vec![],
                );
            }
        },
        None => {
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]).process_group(0).kill_on_drop(true);
            (cmd, None)
        }
    };
    cmd.current_dir(&spec.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("TUNE_TRIAL", job.number.to_string())
        .env(
            "TUNE_PARAMS",
            serde_json::to_string(&job.params).unwrap_or_else(|_| "{}".into()),
        )
        .env("TUNE_TRIAL_DIR", &job.trial_dir)
        .env("TUNE_ATTEMPT", job.attempt.to_string())
        .env("TUNE_CHECKPOINT_DIR", &job.checkpoint_dir);
    let group = crate::devices::cuda_indices(&job.device);
    cmd.env("TUNE_NPROC", group.len().max(1).to_string());
    if !group.is_empty() {
        // The trial sees only its own GPUs (a group: `[workers] gpus_per_trial`), which inside
        // the process are cuda:0, cuda:1, ….
        cmd.env("CUDA_VISIBLE_DEVICES", gpus(&job.device))
            .env("TUNE_DEVICE", "cuda:0")
            .env("TUNE_PHYSICAL_DEVICE", &job.device);
    } else {
        cmd.env("TUNE_DEVICE", &job.device)
            .env("CUDA_VISIBLE_DEVICES", "");
    }
    // A trial needs no way into the study's database: it reports on standard output. Its
    // credentials stay with tune unless `[trial] env` passes them on purpose (below).
    for k in super::DB_CREDENTIALS {
        cmd.env_remove(k);
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    let (mut out_file, mut err_file) = match (create_log(&stdout_log), create_log(&stderr_log)) {
        (Ok(a), Ok(b)) => (tokio::fs::File::from_std(a), tokio::fs::File::from_std(b)),
        (Err(e), _) | (_, Err(e)) => {
            return fail(
                format!(
                    "cannot create log files in {}: {e}",
                    job.trial_dir.display()
                ),
                None,
                vec![],
            );
        }
    };
    // Created before start, kept across attempts: the script resumes from what it finds.
    if let Err(e) = std::fs::create_dir_all(&job.checkpoint_dir) {
        return fail(
            format!(
                "cannot create the checkpoint directory {}: {e}",
                job.checkpoint_dir.display()
            ),
            None,
            logs,
        );
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot start `{}`: {e}", argv[0]), None, logs),
    };
    // The keeper's end of the lifeline lives in the command until it is dropped.
    drop(cmd);
    // Every process of the trial descends from this one while it runs (GPU telemetry).
    let _held = child.id().map(|pid| processes.hold(job.slot, pid));
    let mut ender = Ender {
        pid: child.id(),
        lifeline,
    };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        ender.kill();
        return fail(
            "the command's output pipes could not be opened".into(),
            None,
            logs,
        );
    };

    let stdout_task = tokio::spawn(async move {
        let mut reader = BufReader::new(stdout);
        let mut raw = Vec::new();
        let mut prev_step: Option<u64> = None;
        let mut notes = ReportNotes::default();
        // Output is bytes: a line that is not UTF-8 is logged as it came and read lossily,
        // never a reason to stop reading (which would kill the command with SIGPIPE).
        while let Some(bytes) = next_line(&mut reader, &mut raw).await {
            let line = String::from_utf8_lossy(bytes);
            // torchrun shows rank 0's lines only, each behind its `[default0]:` prefix.
            let line = match ranks {
                true => line
                    .strip_prefix(RANK0_PREFIX)
                    .map_or(line.clone(), |l| std::borrow::Cow::Owned(l.to_string())),
                false => line,
            };
            if let Some(json) = line.strip_prefix("tune:") {
                let json = lenient_json(json.trim());
                let parsed = match parse_checkpoint(&json) {
                    Ok(Some(step)) => {
                        // Also kept in the log, where the user looks for what the trial said.
                        let _ = out_file.write_all(line.as_bytes()).await;
                        let _ = out_file.write_all(b"\n").await;
                        let _ = reports.send(Progress::Checkpoint { step });
                        continue;
                    }
                    Ok(None) => parse_report(&json, prev_step),
                    Err(why) => Err(why),
                };
                match parsed {
                    Ok(r) => {
                        if let Some(p) = prev_step
                            && r.step < p
                        {
                            notes.backwards.get_or_insert((r.step, p));
                            let _ = out_file
                                .write_all(
                                    format!(
                                        "tune: warning: report step {} after step {p}\n",
                                        r.step
                                    )
                                    .as_bytes(),
                                )
                                .await;
                        }
                        prev_step = Some(r.step);
                        if r.metrics.keys().any(|k| k.contains('\0')) {
                            // Said here, where the user looks for what became of a report.
                            let _ = out_file
                                .write_all(
                                    b"tune: warning: a metric name holds a NUL byte; it is stored with U+FFFD in its place\n",
                                )
                                .await;
                        }
                        let _ = reports.send(Progress::Report(r));
                        continue;
                    }
                    Err(why) => {
                        notes.malformed += 1;
                        if notes.first_malformed.is_none() {
                            notes.first_malformed =
                                Some((ReportNotes::shown(&line), why.to_string()));
                        }
                        let _ = out_file
                            .write_all(
                                format!("tune: ignored a malformed report ({why}): {line}\n")
                                    .as_bytes(),
                            )
                            .await;
                        continue;
                    }
                }
            }
            if notes.unprefixed.is_none() && ReportNotes::looks_like_report(&line) {
                notes.unprefixed = Some(ReportNotes::shown(&line));
            }
            let _ = out_file.write_all(bytes).await;
            let _ = out_file.write_all(b"\n").await;
        }
        let _ = out_file.flush().await;
        notes
    });
    let stderr_task = tokio::spawn(async move {
        let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES);
        let mut reader = BufReader::new(stderr);
        let mut raw = Vec::new();
        // A report printed to the wrong stream (Python's logging writes to standard error).
        let mut on_stderr = None;
        while let Some(bytes) = next_line(&mut reader, &mut raw).await {
            let _ = err_file.write_all(bytes).await;
            let _ = err_file.write_all(b"\n").await;
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            let line = String::from_utf8_lossy(bytes);
            if on_stderr.is_none() && ReportNotes::looks_like_report(&line) {
                on_stderr = Some(ReportNotes::shown(&line));
            }
            // Each line cut to what could be stored, so that the tail held here stays small
            // however long the lines (the log file above has them whole).
            let kept = crate::trial::last_bytes(&line, crate::trial::LOG_TAIL_BYTES);
            tail.push_back(if kept.len() < line.len() {
                format!(
                    "[tune: cut the first {} bytes of this line]{kept}",
                    line.len() - kept.len()
                )
            } else {
                kept.to_string()
            });
        }
        let _ = err_file.flush().await;
        (tail.into_iter().collect::<Vec<_>>().join("\n"), on_stderr)
    });

    let deadline = job.timeout.map(|t| tokio::time::Instant::now() + t);
    enum Why {
        Exited(std::io::Result<std::process::ExitStatus>),
        TimedOut,
        Stopped,
    }
    let why = loop {
        tokio::select! {
            status = child.wait() => break Why::Exited(status),
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => break Why::TimedOut,
            changed = stop.changed() => {
                match changed {
                    Ok(()) if *stop.borrow() != StopRequest::None => break Why::Stopped,
                    Ok(()) => continue,
                    // The scheduler is gone: stop the trial rather than orphan it.
                    Err(_) => break Why::Stopped,
                }
            }
        }
    };
    let status = match why {
        Why::Exited(s) => Some(s),
        Why::TimedOut | Why::Stopped => {
            ender.term();
            match tokio::time::timeout(spec.grace, child.wait()).await {
                Ok(_) => {}
                Err(_) => {
                    ender.kill();
                    let _ = child.wait().await;
                }
            }
            None
        }
    };
    // Kill whatever the command left behind, so the pipes close (a keeper did already).
    ender.kill();
    let mut notes = tokio::time::timeout(Duration::from_secs(5), stdout_task)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let (tail, on_stderr) = tokio::time::timeout(Duration::from_secs(5), stderr_task)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    notes.on_stderr = on_stderr;
    let tail = Some(tail).filter(|t| !t.is_empty());
    let end = match (why_end(&status), job.timeout) {
        (Some(end), _) => end,
        (None, Some(t))
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
                && *stop.borrow() == StopRequest::None =>
        {
            RunEnd::Failed {
                reason: format!("timed out after {}", humantime::format_duration(t)),
                log_tail: None,
            }
        }
        (None, _) => RunEnd::Stopped,
    };
    let exited_127 = matches!(&status, Some(Ok(s)) if s.code() == Some(CANNOT_START));
    let end = match end {
        // The keeper could not start the program: say so as tune always has.
        RunEnd::Failed { .. }
            if keeper.is_some()
                && exited_127
                && let Some(why) = tail
                    .as_deref()
                    .and_then(|t| t.lines().last())
                    .and_then(|l| l.strip_prefix(CANNOT_START_PREFIX)) =>
        {
            RunEnd::Failed {
                reason: format!("cannot start {why}"),
                log_tail: None,
            }
        }
        RunEnd::Failed { reason, .. } if ranks => RunEnd::Failed {
            log_tail: Some(failed_rank_tail(
                &job.trial_dir.join(RANK_LOGS),
                tail.as_deref().unwrap_or_default(),
            ))
            .filter(|t| !t.is_empty()),
            reason,
        },
        RunEnd::Failed { reason, .. } => RunEnd::Failed {
            reason: match full_filesystem(&job.checkpoint_dir, tail.as_deref()) {
                Some(note) => format!("{reason}; {note}"),
                None => reason,
            },
            log_tail: tail,
        },
        other => other,
    };
    RunResult {
        end,
        logs,
        notes: Some(notes),
    }
}

/// What the OS says when a write finds its filesystem full (ENOSPC), as C, Python and the
/// shell print it.
const NO_SPACE: &str = "No space left on device";

/// A note for a failed command trial when a full filesystem is a likely cause: its output says
/// [`NO_SPACE`], or the filesystem of its checkpoint directory is (nearly) full. The script's own
/// error names a file at best; this names the trial's checkpoint directory and what is free
/// there, so the user knows which disk to clear (or which `trial.checkpoint_dir` to move).
fn full_filesystem(checkpoint_dir: &Path, tail: Option<&str>) -> Option<String> {
    let said = tail.is_some_and(|t| t.contains(NO_SPACE));
    let Ok(fs) = nix::sys::statvfs::statvfs(checkpoint_dir) else {
        return said.then(|| format!("its checkpoint directory is {}", checkpoint_dir.display()));
    };
    // statvfs's field types differ between platforms (u64 here, u32 on others).
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let (free, total) = {
        let block = fs.fragment_size() as u64;
        (
            u64::from(fs.blocks_available()) * block,
            u64::from(fs.blocks()) * block,
        )
    };
    // Nearly full: under 1 % of the filesystem and under 1 MiB left.
    let nearly_full = free < (total / 100).min(1 << 20);
    (said || nearly_full).then(|| {
        format!(
            "its checkpoint directory {} is on a filesystem with {} free of {}{}",
            checkpoint_dir.display(),
            crate::checkpoint::fmt_bytes(free),
            crate::checkpoint::fmt_bytes(total),
            if nearly_full { " (full)" } else { "" }
        )
    })
}

fn why_end(status: &Option<std::io::Result<std::process::ExitStatus>>) -> Option<RunEnd> {
    let status = status.as_ref()?;
    Some(match status {
        Ok(s) if s.success() => RunEnd::Finished,
        Ok(s) => {
            let reason = match Exit::of(*s) {
                Exit::Code(c) => format!("exited with status {c}"),
                Exit::Signal { name, .. } => format!("killed by {name}"),
                Exit::Other => "ended abnormally".into(),
            };
            RunEnd::Failed {
                reason,
                log_tail: None,
            }
        }
        Err(e) => RunEnd::Failed {
            reason: format!("waiting for the command failed: {e}"),
            log_tail: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::{ParamValue, Params};
    use crate::trial::TrialNumber;

    #[test]
    fn a_failure_that_says_its_disk_is_full_names_the_checkpoint_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tail = "Traceback …\nOSError: [Errno 28] No space left on device: 'ckpt.tmp'";
        let note = full_filesystem(dir.path(), Some(tail)).expect("a note");
        assert!(
            note.starts_with(&format!(
                "its checkpoint directory {} is on a filesystem with ",
                dir.path().display()
            )) && note.contains(" free of "),
            "{note}"
        );
        // Other failures on a filesystem with room get no note.
        assert_eq!(
            full_filesystem(dir.path(), Some("ValueError: bad lr")),
            None
        );
        assert_eq!(full_filesystem(dir.path(), None), None);
        // A directory that is gone still gets named when the output says the disk is full.
        let gone = dir.path().join("gone");
        assert_eq!(
            full_filesystem(&gone, Some(tail)),
            Some(format!("its checkpoint directory is {}", gone.display()))
        );
        assert_eq!(full_filesystem(&gone, Some("killed")), None);
    }

    #[test]
    fn a_checkpoint_line_is_read_apart_from_reports_and_a_numeric_checkpoint_stays_a_metric() {
        assert_eq!(
            parse_checkpoint(r#"{"checkpoint": true, "step": 12}"#).unwrap(),
            Some(12)
        );
        assert_eq!(
            parse_checkpoint(r#"{"step": 0, "checkpoint": true}"#).unwrap(),
            Some(0)
        );
        // Reports, and lines that are no JSON object, are not checkpoint lines.
        for line in [
            r#"{"step": 3, "val_loss": 0.4}"#,
            r#"{"step": 3, "checkpoint": 2.0, "val_loss": 0.4}"#,
            r#"{"checkpoint": false, "step": 3}"#,
            "not json",
            "[1, 2]",
        ] {
            assert_eq!(parse_checkpoint(line).unwrap(), None, "{line}");
        }
        // A metric named `checkpoint` still reports.
        let r = parse_report(r#"{"step": 3, "checkpoint": 2.0}"#, None).unwrap();
        assert_eq!(r.metrics["checkpoint"], 2.0);
        // Checkpoint lines that are wrong say what is wrong.
        for (line, says) in [
            (r#"{"checkpoint": true}"#, "needs the `step`"),
            (r#"{"checkpoint": true, "step": -1}"#, "integer from 0"),
            (r#"{"checkpoint": true, "step": 1.5}"#, "integer from 0"),
            (r#"{"checkpoint": true, "step": "3"}"#, "integer from 0"),
            (
                r#"{"checkpoint": true, "step": 9223372036854775808}"#,
                "integer from 0",
            ),
            (
                r#"{"checkpoint": true, "step": 3, "val_loss": 0.4}"#,
                "not `val_loss`",
            ),
        ] {
            let e = parse_checkpoint(line).unwrap_err().to_string();
            assert!(e.contains(says), "{line}: {e}");
        }
    }

    fn job(dir: &std::path::Path) -> TrialJob {
        let mut params = Params::new();
        params.insert("lr".into(), ParamValue::Float(0.001));
        params.insert("on".into(), ParamValue::Bool(true));
        TrialJob {
            number: TrialNumber(7),
            params,
            slot: 0,
            device: "cpu".into(),
            trial_dir: dir.to_path_buf(),
            attempt: 2,
            first: TrialNumber(5),
            checkpoint_dir: dir.join("checkpoints"),
            timeout: None,
            seed: 0,
        }
    }

    #[test]
    fn placeholders_are_filled_in_full_precision() {
        let j = job(std::path::Path::new("/tmp/t7"));
        let argv: Vec<String> = [
            "x",
            "--lr={lr}",
            "{on}",
            "{missing}",
            "{trial}:{device}",
            "{trial_dir}/log",
            "--resume={checkpoint_dir}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            fill_argv(&argv, &j),
            [
                "x",
                "--lr=0.001",
                "true",
                "",
                "7:cpu",
                "/tmp/t7/log",
                "--resume=/tmp/t7/checkpoints"
            ]
        );
    }

    #[test]
    fn reports_parse_steps_metrics_and_final() {
        let r = parse_report(r#"{"step": 3, "val_loss": 0.4, "acc": 1}"#, None).expect("ok");
        assert_eq!(r.step, 3);
        assert_eq!(r.metrics["acc"], 1.0);
        let r = parse_report(r#"{"val_loss": 0.4}"#, Some(3)).expect("ok");
        assert_eq!(r.step, 4);
        let r = parse_report(r#"{"final": true, "val_loss": 0.1}"#, Some(3)).expect("ok");
        assert_eq!(r.metrics[FINAL_KEY], 1.0);
        assert!(parse_report(r#"{"step": -1}"#, None).is_err());
        assert!(parse_report(r#"[1]"#, None).is_err());
        assert!(parse_report(r#"{"loss": "high"}"#, None).is_err());
        let r = parse_report(&lenient_json(r#"{"loss": NaN, "s": "NaN inside"}"#), None);
        assert!(r.is_err(), "a string metric is still an error");
        let r = parse_report(&lenient_json(r#"{"loss": NaN}"#), None).expect("ok");
        assert!(r.metrics["loss"].is_nan());
    }

    #[test]
    fn torchrun_runs_one_rank_per_gpu_of_the_group_and_shows_rank_0_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut j = job(dir.path());
        j.device = "cuda:2,cuda:3".into();
        let l = crate::study::Launcher {
            python: "py".into(),
        };
        let argv = torchrun_argv(&l, &j, vec!["train.py".into(), "--lr".into()]);
        let ranks = dir.path().join("ranks").display().to_string();
        assert_eq!(
            argv,
            [
                "py",
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                "2",
                "--log-dir",
                ranks.as_str(),
                "--tee",
                "3",
                "--local-ranks-filter",
                "0",
                "train.py",
                "--lr"
            ]
        );
        j.device = "cpu".into();
        assert!(torchrun_argv(&l, &j, vec![]).contains(&"1".to_string()));
    }

    #[test]
    fn a_failed_torchrun_trials_tail_ends_with_the_failed_ranks_stderr() {
        let dir = tempfile::tempdir().expect("temp dir");
        for (rank, text) in [("0", "rank 0 warning\n"), ("1", "\nTraceback\nboom\n")] {
            let d = dir.path().join("run_x/attempt_0").join(rank);
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(d.join("stderr.log"), text).expect("write");
        }
        let named = "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n";
        let tail = failed_rank_tail(dir.path(), named);
        assert!(tail.starts_with(named), "{tail}");
        assert!(
            tail.ends_with("--- rank 1, the last lines of its stderr ---\nTraceback\nboom\n"),
            "{tail}"
        );
        assert!(!tail.contains("rank 0 warning"), "{tail}");
        // No rank named: every rank's stderr.
        let tail = failed_rank_tail(dir.path(), "");
        assert!(
            tail.contains("--- rank 0,") && tail.contains("--- rank 1,"),
            "{tail}"
        );
    }
}
