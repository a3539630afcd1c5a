//! The repository's Slurm script submitted to a real Slurm, as users submit it: one private
//! single-node cluster (slurmctld, slurmd and its own munged, on free ports, with its own
//! `SLURM_CONF`, spool, state and log directories in a temp dir) is started by the first test
//! that needs it and shared by all of them; it goes when the test binary exits. Where it cannot
//! start (no Slurm installed, not root) each test says "skipped:", unless `TUNE_REQUIRE_SLURM=1`
//! (scripts/test.sh sets it) or CI makes that a failure.
//!
//! The node claims 32 CPUs and 8 GPUs (`SlurmdParameters=config_overrides`, and the GPUs are
//! device nodes that stand for /dev/null): the script's own `#SBATCH` lines (16 CPUs and 4 GPUs
//! a task) are submitted unchanged, and two array tasks run at once. Trials run on the CPU
//! (`TUNE_DEVICES=cpu`, one of the variables the script documents).

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    Sandbox, assert_numbers_once, counted, output_within, sh_study, text, tune_bin,
};
use crate::postgres::test_server;

const SBATCH: &str = "docs/slurm/tune-worker.sbatch";

/// No wait on the cluster may hang the suite.
const LIMIT: Duration = Duration::from_secs(60);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The private cluster: its directory (configuration, state, spool, logs, munge's key and
/// socket) and its configuration file, which every Slurm command here is pointed at.
pub struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

/// The daemons' process ids and the cluster's directory, for the exit handler.
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static DIR: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);

/// Runs at the test binary's exit (`std::process::exit` runs libc's exit handlers): cancels
/// what is still queued or running, stops the daemons, removes the directory. The daemons also
/// get SIGTERM from the kernel if the process dies otherwise (`PR_SET_PDEATHSIG`, set for the
/// thread that started them, which never ends).
extern "C" fn stop_at_exit() {
    let dir = DIR.lock().map(|d| d.clone()).unwrap_or(None);
    if let Some((_, conf)) = &dir {
        let mut c = Command::new("scancel");
        c.args(["--quiet", "--full", "--user=root"])
            .env("SLURM_CONF", conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = output_within(c, Duration::from_secs(10));
    }
    let pids = RUNNING.lock().map(|p| p.clone()).unwrap_or_default();
    for pid in pids.iter().rev() {
        // SAFETY: kill(2) with a process id this binary started.
        unsafe { libc::kill(*pid as libc::pid_t, libc::SIGTERM) };
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5)
        && pids
            .iter()
            .any(|p| Path::new(&format!("/proc/{p}/stat")).exists() && !zombie(*p))
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some((dir, _)) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// A daemon in the foreground, its output in `log`, sent SIGTERM when the thread that started
/// it ends.
fn daemon(program: &str, args: &[&str], conf: &Path, log: &Path) -> Result<Child, String> {
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut c = Command::new(program);
    c.args(args)
        .env("SLURM_CONF", conf)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = c.spawn().map_err(|e| format!("{program}: {e}"))?;
    if let Ok(mut p) = RUNNING.lock() {
        p.push(child.id());
    }
    Ok(child)
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Result<(), String> {
    let t0 = Instant::now();
    while !ok() {
        if t0.elapsed() > limit {
            return Err(format!("gave up after {limit:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn tail(path: &Path) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

impl Cluster {
    fn start() -> Result<Cluster, String> {
        for bin in [
            "/usr/sbin/slurmctld",
            "/usr/sbin/slurmd",
            "/usr/sbin/munged",
            "/usr/bin/sbatch",
        ] {
            if !Path::new(bin).exists() {
                return Err(format!(
                    "no {bin} (./scripts/setup.sh --slurm installs slurm-wlm and munge)"
                ));
            }
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("slurmd runs jobs as their user and needs root here".into());
        }
        let dir = tempfile::Builder::new()
            .prefix("tune-slurm-")
            .tempdir()
            .map_err(|e| e.to_string())?
            .keep();
        let conf = dir.join("slurm.conf");
        if let Ok(mut d) = DIR.lock() {
            *d = Some((dir.clone(), conf.clone()));
        }
        // SAFETY: registering a function with C linkage that takes no arguments.
        unsafe { libc::atexit(stop_at_exit) };
        let sh = |script: &str| -> Result<(), String> {
            let out = Command::new("sh")
                .arg("-ec")
                .arg(script)
                .current_dir(&dir)
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{script}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        };
        // munged wants its key private to its user and its socket's directory open to all.
        sh(
            "chmod 755 .; mkdir -p state spool log key sock; chmod 700 key; \
            head -c 128 /dev/urandom > key/munge.key; chmod 400 key/munge.key; \
            for i in 0 1 2 3 4 5 6 7; do mknod gpu$i c 1 3; done",
        )?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_err(|e| e.to_string())?
            .trim()
            .to_string();
        let (ctld_port, d_port) = (free_port()?, free_port()?);
        let d = dir.display();
        std::fs::write(
            &conf,
            format!(
                "ClusterName=tunetest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/sock/munge.socket,cred_expire=10
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
KillWait=10
MinJobAge=3600
SchedulerParameters=sched_interval=2
NodeName={host} NodeAddr=127.0.0.1 CPUs=32 RealMemory=1000 Gres=gpu:8 State=UNKNOWN
PartitionName=main Nodes={host} Default=YES MaxTime=INFINITE State=UP
"
            ),
        )
        .map_err(|e| e.to_string())?;
        std::fs::write(
            dir.join("gres.conf"),
            format!("NodeName={host} Name=gpu File={d}/gpu[0-7]\n"),
        )
        .map_err(|e| e.to_string())?;

        let socket = dir.join("sock/munge.socket");
        daemon(
            "/usr/sbin/munged",
            &[
                "--foreground",
                "--force",
                &format!("--socket={}", socket.display()),
                &format!("--key-file={d}/key/munge.key"),
                &format!("--pid-file={d}/munged.pid"),
                &format!("--log-file={d}/log/munged.log"),
                &format!("--seed-file={d}/munged.seed"),
            ],
            &conf,
            &dir.join("log/munged.out"),
        )?;
        wait_for("munged's socket", Duration::from_secs(10), || {
            socket.exists()
        })
        .map_err(|e| format!("{e}: {}", tail(&dir.join("log/munged.out"))))?;
        daemon(
            "/usr/sbin/slurmctld",
            &["-D", "-i"],
            &conf,
            &dir.join("log/slurmctld.out"),
        )?;
        daemon(
            "/usr/sbin/slurmd",
            &["-D"],
            &conf,
            &dir.join("log/slurmd.out"),
        )?;
        let cluster = Cluster { dir, conf };
        cluster
            .wait_idle()
            .map_err(|e| format!("{e}\n{}", cluster.logs()))?;
        Ok(cluster)
    }

    /// Waits until the node takes jobs (`idle`), at most 30 s.
    fn wait_idle(&self) -> Result<(), String> {
        let t0 = Instant::now();
        let mut last = String::new();
        while t0.elapsed() < Duration::from_secs(30) {
            let out = output_within(
                {
                    let mut c = self.cmd("sinfo");
                    c.args(["--noheader", "--format=%t"]);
                    c
                },
                Duration::from_secs(10),
            );
            last = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if last == "idle" {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(format!("the node never became idle: sinfo says {last}"))
    }

    fn logs(&self) -> String {
        ["munged.out", "slurmctld.log", "slurmd.log"]
            .iter()
            .map(|f| format!("== {f}\n{}", tail(&self.dir.join("log").join(f))))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A Slurm command pointed at this cluster.
    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf).stdin(Stdio::null());
        c
    }

    /// `sbatch --parsable ARGS` in `dir`, with `env` added to this process's environment (which
    /// sbatch hands to the job); the job's id.
    pub fn sbatch(&self, dir: &Path, args: &[&str], env: &[(&str, String)]) -> u64 {
        let mut c = self.cmd("sbatch");
        c.arg("--parsable").args(args).current_dir(dir);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = output_within(c, Duration::from_secs(20));
        assert!(out.status.success(), "sbatch failed: {}", text(&out));
        let id = String::from_utf8_lossy(&out.stdout);
        id.trim()
            .split(';')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("sbatch printed no job id: {}", text(&out)))
    }

    /// Every task of job `job` (each array task, or the job alone): its fields as
    /// `scontrol show job --oneline` gives them (`JobState`, `ExitCode`, `ArrayTaskId`, ...).
    pub fn tasks(&self, job: u64) -> Vec<BTreeMap<String, String>> {
        let mut c = self.cmd("scontrol");
        c.args(["show", "job", "--oneline", &job.to_string()]);
        let out = output_within(c, Duration::from_secs(10));
        assert!(out.status.success(), "scontrol: {}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("JobId="))
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .collect()
    }

    /// Waits until no task of `job` is pending or running, then returns the tasks.
    pub fn wait_done(&self, job: u64, limit: Duration) -> Vec<BTreeMap<String, String>> {
        let t0 = Instant::now();
        loop {
            let tasks = self.tasks(job);
            let busy = tasks.iter().any(|t| {
                matches!(
                    t.get("JobState").map(String::as_str),
                    Some(
                        "PENDING"
                            | "RUNNING"
                            | "CONFIGURING"
                            | "COMPLETING"
                            | "REQUEUED"
                            | "RESIZING"
                            | "SUSPENDED"
                    )
                )
            });
            if !tasks.is_empty() && !busy {
                return tasks;
            }
            if t0.elapsed() > limit {
                let _ = self
                    .cmd("scancel")
                    .args(["--full", &job.to_string()])
                    .status();
                panic!(
                    "job {job} still busy after {limit:?}: {tasks:#?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The cluster shared by every Slurm test of this run, started by the first; `None` with a
/// `skipped:` line where it cannot start, unless `TUNE_REQUIRE_SLURM=1` or CI.
pub fn cluster_or_skip() -> Option<&'static Cluster> {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    let started = CLUSTER.get_or_init(|| {
        // The daemons are children of a thread that lives as long as the process: the kernel's
        // parent-death signal fires when the thread that forked them ends.
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("slurm-cluster".into())
            .spawn(move || {
                let _ = tx.send(Cluster::start());
                loop {
                    std::thread::park();
                }
            });
        match spawned {
            Ok(_) => rx
                .recv_timeout(LIMIT)
                .unwrap_or_else(|e| Err(format!("the cluster did not start: {e}"))),
            Err(e) => Err(format!("no thread for the cluster: {e}")),
        }
    });
    match started {
        Ok(c) => Some(c),
        Err(e) => {
            if std::env::var_os("CI").is_some()
                || std::env::var("TUNE_REQUIRE_SLURM").as_deref() == Ok("1")
            {
                panic!("Slurm is required here (TUNE_REQUIRE_SLURM=1) but could not start: {e}");
            }
            eprintln!("skipped: a private Slurm cluster could not start: {e}");
            None
        }
    }
}

/// A directory holding only `tune` (a link to the binary under test), for PATH.
fn bin_dir(sb: &Sandbox) -> PathBuf {
    let dir = sb.join("bin");
    std::fs::create_dir_all(&dir).expect("bin dir");
    let link = dir.join("tune");
    if !link.exists() {
        std::os::unix::fs::symlink(tune_bin(), &link).expect("link tune");
    }
    dir
}

/// What `sbatch` hands a task here beyond this process's environment: `tune` on PATH, the
/// study's database, the CPU as its device, and a node-local TMPDIR inside the sandbox.
fn task_env(sb: &Sandbox, url: &str) -> Vec<(&'static str, String)> {
    let tmp = sb.join("node-tmp");
    std::fs::create_dir_all(&tmp).expect("the node's TMPDIR");
    vec![
        ("PATH", format!("{}:/usr/bin:/bin", bin_dir(sb).display())),
        ("TUNE_DB", url.to_string()),
        ("TUNE_DEVICES", "cpu".to_string()),
        ("TMPDIR", tmp.display().to_string()),
    ]
}

fn trials_on(sb: &Sandbox, url: &str, study: &str) -> Vec<Value> {
    let out = sb.ok(&["trials", "--db", url, "--study", study, "--format", "json"]);
    match serde_json::from_slice(&out.stdout).expect("JSON") {
        Value::Array(a) => a,
        other => panic!("{other}"),
    }
}

/// The trial directories a task's worker made (`trial-NNNNN` under its runs directory).
fn trial_dirs(runs: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(runs)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("trial-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn sbatch_of_the_repository_script_runs_two_array_tasks_that_end_a_study_tune_run_created() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    let study = "slurm-array";
    sb.write("s.toml", &sh_study(study, 9, 1, "", &["{x}"]));
    sb.write("trial.sh", "sleep 1\necho \"tune: {\\\"loss\\\": $1}\"\n");
    // As users do: the array first (its workers wait for the study), then `tune run`, which
    // stores the study and runs trials beside them.
    let script = repo().join(SBATCH);
    let job = cluster.sbatch(
        sb.path(),
        &["--array=0-1", &script.display().to_string(), study],
        &task_env(&sb, &url),
    );
    let out_file = |task: u32| sb.join(&format!("tune-worker-{job}_{task}.out"));
    let read = |task: u32| std::fs::read_to_string(out_file(task)).unwrap_or_default();
    let t0 = Instant::now();
    while !(0..2).all(|t| read(t).contains(&format!("waiting for study `{study}`"))) {
        assert!(
            t0.elapsed() < LIMIT,
            "the tasks' workers never said they wait for the study: {:#?}\n{}\n{}\n{}",
            cluster.tasks(job),
            read(0),
            read(1),
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    sb.ok(&["run", "s.toml", "--db", &url, "--no-tui"]);

    let tasks = cluster.wait_done(job, LIMIT);
    assert_eq!(tasks.len(), 2, "{tasks:#?}");
    for t in &tasks {
        let n: u32 = t["ArrayTaskId"].parse().expect("a task id");
        assert_eq!(
            (t["JobState"].as_str(), t["ExitCode"].as_str()),
            ("COMPLETED", "0:0"),
            "task {n}: {t:#?}\n{}",
            read(n)
        );
    }

    let trials = trials_on(&sb, &url, study);
    assert_eq!(trials.len(), 9, "{trials:#?}");
    assert_eq!(counted(&trials), 9, "{trials:#?}");
    assert!(
        trials.iter().all(|t| t["state"] == "complete"),
        "{trials:#?}"
    );
    assert_numbers_once(&trials);

    // Each task's output file says what its worker did: it joined the study, and its trials
    // ran in its own runs directory on the node's disk (named after the array job and task).
    let mut by_tasks = 0;
    for task in 0..2 {
        let out = read(task);
        assert!(out.contains(&format!("joining study `{study}`")), "{out}");
        let dirs = trial_dirs(&sb.join(&format!("node-tmp/tune-runs-{job}-{task}")));
        assert!(!dirs.is_empty(), "task {task} ran no trial:\n{out}");
        for d in &dirs {
            let n: u64 = d["trial-".len()..].parse().expect("a trial number");
            assert!(
                out.contains(&format!("trial {n} ")),
                "task {task}'s output does not name trial {n}:\n{out}"
            );
        }
        by_tasks += dirs.len();
    }
    assert!(by_tasks <= 9);
    for task in 0..2 {
        assert!(
            !read(task).contains(test_server::PASSWORD),
            "the password was printed"
        );
    }
    drop(server);
}

// What a preemption or a time limit sends a task, and `tune worker`'s SIGTERM preemption (issue
// 27): the running trials are recorded as interrupted and queued again at once (not after
// `heartbeat_grace`, here 60 s), and the worker exits 75, so that Slurm's `scontrol requeue` /
// `--requeue` brings it back, and the study still ends with its exact budget.

/// A trial (touching `started-N`) that runs long (`$2` steps of 0.5 s) only as the first
/// attempt of the enqueued params (`x = 0.5`), and quickly otherwise: its interruption is what
/// the tests look at, and a re-run (`TUNE_ATTEMPT` 2) or another trial costs them no time.
const INTERRUPTIBLE: &str = r#"touch "started-$TUNE_TRIAL"
if [ "$1" = "0.5" ] && [ "${TUNE_ATTEMPT:-1}" = 1 ]; then
  i=0
  while [ "$i" -lt "$2" ]; do sleep 0.5; i=$((i + 1)); done
fi
echo "tune: {\"loss\": $1}"
"#;

/// The state and exit code of the job's only task.
fn state_of(cluster: &Cluster, job: u64) -> (String, String) {
    let t = cluster.tasks(job);
    let t = t.first().expect("the job is known");
    (t["JobState"].clone(), t["ExitCode"].clone())
}

/// Waits until `path` exists.
fn wait_file(path: &Path, limit: Duration, why: &dyn Fn() -> String) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(t0.elapsed() < limit, "no {}: {}", path.display(), why());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// After a stop: trial 0 is recorded interrupted (not counted), the task ended non-zero.
fn assert_stopped_and_requeued(
    cluster: &Cluster,
    sb: &Sandbox,
    url: &str,
    study: &str,
    job: u64,
    out: &dyn Fn() -> String,
) {
    // Stopped: no longer running, and either ended or queued again by Slurm itself.
    let t0 = Instant::now();
    let tasks = loop {
        let tasks = cluster.tasks(job);
        if !matches!(
            tasks[0]["JobState"].as_str(),
            "RUNNING" | "CONFIGURING" | "COMPLETING"
        ) {
            break tasks;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(100),
            "{tasks:#?}\n{}",
            out()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (state, exit) = (&tasks[0]["JobState"], &tasks[0]["ExitCode"]);
    assert_ne!(
        (state.as_str(), exit.as_str()),
        ("COMPLETED", "0:0"),
        "a stopped worker exits non-zero, so that Slurm may run it again:\n{}",
        out()
    );
    if state == "FAILED" {
        assert_eq!(exit, "75:0", "the preemption's exit status:\n{}", out());
    }
    let trials = trials_on(sb, url, study);
    let first = trials
        .iter()
        .find(|t| t["number"] == 0)
        .unwrap_or_else(|| panic!("{trials:#?}"));
    // Whatever state the preemption work gives an interrupted trial (failed as `interrupted`,
    // or queued to resume), it is no longer running (the heartbeat grace is 60 s), it did not
    // complete, and it does not count toward the budget.
    assert!(
        first["state"] != "running" && first["state"] != "complete",
        "trial 0 is recorded as interrupted at once: {trials:#?}\n{}",
        out()
    );
    assert_eq!(counted(&trials), 0, "{trials:#?}");
}

/// `scontrol requeue`, then the requeued worker ends the study: exactly its budget, trial 0's
/// params run again once.
fn requeue_and_finish(cluster: &Cluster, sb: &Sandbox, url: &str, study: &str, job: u64, n: usize) {
    // Slurm may have queued it again itself (it did after `--signal=B:TERM@N` and the time
    // limit, with Slurm 22.05); otherwise it is ours to do.
    if cluster.tasks(job)[0]["JobState"] != "PENDING" {
        let mut c = cluster.cmd("scontrol");
        c.args(["requeue", &job.to_string()]);
        let out = output_within(c, Duration::from_secs(10));
        assert!(out.status.success(), "scontrol requeue: {}", text(&out));
        // The requeue shows in the job's record a moment later.
        let t0 = Instant::now();
        while cluster.tasks(job)[0]["Restarts"] != "1" {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{:#?}",
                cluster.tasks(job)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let tasks = cluster.wait_done(job, LIMIT);
    assert_eq!(
        (tasks[0]["JobState"].as_str(), tasks[0]["ExitCode"].as_str()),
        ("COMPLETED", "0:0"),
        "{tasks:#?}"
    );
    assert_eq!(tasks[0]["Restarts"], "1", "{tasks:#?}");
    let trials = trials_on(sb, url, study);
    assert_eq!(counted(&trials), n, "{trials:#?}");
    let complete: Vec<&Value> = trials.iter().filter(|t| t["state"] == "complete").collect();
    assert_eq!(complete.len(), n, "{trials:#?}");
    let first = trials.iter().find(|t| t["number"] == 0).expect("trial 0");
    assert_eq!(
        complete
            .iter()
            .filter(|t| t["params"] == first["params"])
            .count(),
        1,
        "trial 0's params ran again exactly once: {trials:#?}"
    );
}

#[test]
fn scancel_signal_term_stops_the_worker_its_trial_is_requeued_and_scontrol_requeue_ends_the_study()
{
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    let study = "slurm-scancel";
    sb.write("s.toml", &sh_study(study, 3, 1, "", &["{x}", "40"]));
    sb.write("trial.sh", INTERRUPTIBLE);
    sb.ok(&[
        "enqueue",
        "s.toml",
        "--db",
        &url,
        "--params",
        r#"{"x": 0.5, "k": 2, "c": "a"}"#,
    ]);
    let script = repo().join(SBATCH).display().to_string();
    let job = cluster.sbatch(sb.path(), &[&script, study], &task_env(&sb, &url));
    let out = || {
        std::fs::read_to_string(sb.join(&format!("tune-worker-{job}_4294967294.out")))
            .or_else(|_| std::fs::read_to_string(sb.join(&format!("tune-worker-{job}.out"))))
            .unwrap_or_default()
    };
    wait_file(&sb.join("started-0"), LIMIT, &|| {
        format!("{:?} {}", state_of(cluster, job), out())
    });
    // `--batch`: the worker is the batch step's process (the script execs it); without it
    // scancel signals only job steps, and a batch job running `tune worker` has none.
    let mut c = cluster.cmd("scancel");
    c.args(["--batch", "--signal=TERM", &job.to_string()]);
    let sent = output_within(c, Duration::from_secs(10));
    assert!(sent.status.success(), "scancel: {}", text(&sent));
    let t0 = Instant::now();
    assert_stopped_and_requeued(cluster, &sb, &url, study, job, &out);
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "the worker stopped within the trial's grace, not at the trial's end"
    );
    requeue_and_finish(cluster, &sb, &url, study, job, 3);
    drop(server);
}

#[rstest::rstest]
#[case::signal_b_term_before_the_time_limit(&["--time=1", "--signal=B:TERM@50"])]
#[case::the_time_limit_itself(&["--time=1"])]
fn a_time_limit_mid_trial_stops_the_worker_its_trial_is_requeued_and_scontrol_requeue_ends_the_study(
    #[case] options: &[&str],
) {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let Some((server, url)) = test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    let study = format!("slurm-time-{}", options.len());
    // 200 steps of 0.5 s: the first attempt of a trial outlasts the time limit (a minute, the
    // least Slurm takes, enforced within 30 s after it).
    sb.write("s.toml", &sh_study(&study, 2, 1, "", &["{x}", "200"]));
    sb.write("trial.sh", INTERRUPTIBLE);
    sb.ok(&[
        "enqueue",
        "s.toml",
        "--db",
        &url,
        "--params",
        r#"{"x": 0.5, "k": 2, "c": "a"}"#,
    ]);
    let script = repo().join(SBATCH).display().to_string();
    let mut args: Vec<&str> = options.to_vec();
    args.extend([script.as_str(), study.as_str()]);
    let job = cluster.sbatch(sb.path(), &args, &task_env(&sb, &url));
    let out = || {
        std::fs::read_to_string(sb.join(&format!("tune-worker-{job}_4294967294.out")))
            .or_else(|_| std::fs::read_to_string(sb.join(&format!("tune-worker-{job}.out"))))
            .unwrap_or_default()
    };
    wait_file(&sb.join("started-0"), LIMIT, &|| {
        format!("{:?} {}", state_of(cluster, job), out())
    });
    // The limit is a minute, checked every 30 s: the stop comes within 100 s of the start.
    assert_stopped_and_requeued(cluster, &sb, &url, &study, job, &out);
    assert!(
        !(sb.join("ran-1").exists()),
        "trial 1 never started: the stop came mid-trial 0"
    );
    requeue_and_finish(cluster, &sb, &url, &study, job, 2);
    drop(server);
}

#[test]
fn setup_slurm_where_slurm_and_munge_are_installed_installs_nothing_and_says_nothing_of_them() {
    if cluster_or_skip().is_none() {
        return;
    }
    let t0 = Instant::now();
    let mut c = Command::new("bash");
    c.arg(repo().join("scripts/setup.sh"))
        .arg("--slurm")
        .stdin(Stdio::null());
    let out = output_within(c, LIMIT);
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("slurm") && !err.contains("munge"),
        "nothing to install, nothing to say: {err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}
