//! Several machines on one study, with real machine failures: network namespaces joined by a
//! bridge stand for the machines (one runs PostgreSQL, one `tune run`, two `tune worker`), each
//! process in its own UTS and PID namespace so that it has a host name of its own and dies
//! whole. Mid-study one worker machine is killed with SIGKILL (the worker and its trials) and
//! the other is cut off the network for longer than the heartbeat grace. The study must still
//! end with its budget met exactly: no number twice, nothing left running, every interrupted
//! trial run again, and no result of a trial taken over while its machine was cut off counted.
//!
//! Needs root (namespaces) and PostgreSQL 15; says "skipped:" without them, unless
//! `TUNE_REQUIRE_PG=1` makes that a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Sandbox, assert_numbers_once, counted, output_within, text, tune_bin};
use crate::postgres::test_server::PgServer;

const PREFIX: &str = "tmh";
const TRIALS: usize = 60;
/// How long the second worker machine is cut off: past `heartbeat_grace` (2 s), and past the
/// time the server takes to notice a silent peer (keepalives after 5 s idle, 3 probes 2 s
/// apart): a machine cut off inside a transaction holds the study's lock until then, and
/// nobody can declare its trials interrupted before it is released.
const CUT: Duration = Duration::from_secs(15);
/// The whole study never takes this long; past it the test fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(120);

pub(crate) fn required() -> bool {
    std::env::var("TUNE_REQUIRE_PG").as_deref() == Ok("1")
}

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}`: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Machines as network namespaces on one bridge, named after this test process and a letter
/// of its own (tests of one process run side by side: two `Net`s of the same names would
/// take each other's bridge, and one that failed to start would remove the other's), so that
/// runs side by side never meet; all removed on drop, panic or not.
pub(crate) struct Net {
    /// `tmh<pid><letter>`: the start of every name (the pid first, for `remove_leftovers`).
    tag: String,
    pub(crate) machines: Vec<String>,
    subnet: (u32, u32),
}

/// The `Net`s this process made, for their letters.
static NETS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

impl Net {
    pub(crate) fn new(machines: &[&str]) -> Result<Net, String> {
        remove_leftovers();
        let pid = std::process::id();
        let k = NETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("{PREFIX}{pid}{}", char::from(b'a' + k % 26));
        // 10.X.Y.0/24 from the pid; the bridge has no address here, so it never meets this
        // machine's own routes (and each `Net` is a network of its own, so two may share it).
        let subnet = (100 + (pid / 256) % 150, pid % 256);
        let net = Net {
            tag,
            machines: Vec::new(),
            subnet,
        };
        let br = net.bridge();
        sh(&["ip", "link", "add", &br, "type", "bridge"])?;
        let mut net = net;
        sh(&["ip", "link", "set", &br, "up"])?;
        for (i, m) in machines.iter().enumerate() {
            let ns = format!("{}{m}", net.tag);
            sh(&["ip", "netns", "add", &ns])?;
            net.machines.push(ns.clone());
            let host = net.host_end(i);
            let inner = format!("{}n{i}", net.tag);
            sh(&[
                "ip", "link", "add", &host, "type", "veth", "peer", "name", &inner,
            ])?;
            sh(&["ip", "link", "set", &inner, "netns", &ns])?;
            sh(&["ip", "link", "set", &host, "master", &br])?;
            sh(&["ip", "link", "set", &host, "up"])?;
            let addr = format!("{}/24", net.addr(i));
            sh(&["ip", "-n", &ns, "addr", "add", &addr, "dev", &inner])?;
            sh(&["ip", "-n", &ns, "link", "set", &inner, "up"])?;
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    /// The root-namespace end of machine `i`'s cable: pulling it cuts the machine off.
    fn host_end(&self, i: usize) -> String {
        format!("{}h{i}", self.tag)
    }

    pub(crate) fn addr(&self, i: usize) -> String {
        format!("10.{}.{}.{}", self.subnet.0, self.subnet.1, i + 1)
    }

    pub(crate) fn cidr(&self) -> String {
        format!("10.{}.{}.0/24", self.subnet.0, self.subnet.1)
    }

    fn link(&self, i: usize, up: bool) {
        sh(&[
            "ip",
            "link",
            "set",
            &self.host_end(i),
            if up { "up" } else { "down" },
        ])
        .expect("set the link");
    }

    /// A command on machine `i`, with host name `host`, in a PID namespace of its own (so that
    /// killing its first process kills every process it started).
    pub(crate) fn command(&self, i: usize, host: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.machines[i]])
            .args([
                "unshare",
                "--uts",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "--",
                "sh",
                "-c",
                "hostname \"$0\" && exec \"$@\"",
                host,
                program,
            ])
            .env_remove("TUNE_DB")
            .stdin(Stdio::null());
        c
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.machines {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        let _ = sh(&["ip", "link", "del", &self.bridge()]);
    }
}

/// Namespaces and bridges left by a run of this test that was killed before its clean-up.
fn remove_leftovers() {
    let owner_gone = |name: &str| {
        let digits: String = name[PREFIX.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        !digits.is_empty() && !Path::new(&format!("/proc/{digits}")).exists()
    };
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if name.starts_with(PREFIX) && owner_gone(name) {
                let _ = sh(&["ip", "netns", "del", name]);
            }
        }
    }
    if let Ok(out) = Command::new("ip")
        .args(["-o", "link", "show", "type", "bridge"])
        .output()
    {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split(": ").nth(1).unwrap_or("");
            if name.starts_with(PREFIX) && owner_gone(name) {
                let _ = sh(&["ip", "link", "del", name]);
            }
        }
    }
}

/// A process on a machine, its output in files; killed with its whole PID namespace on drop.
pub(crate) struct Proc {
    child: Option<Child>,
    out: std::path::PathBuf,
    err: std::path::PathBuf,
}

impl Proc {
    pub(crate) fn spawn(mut cmd: Command, dir: &Path, name: &str) -> Proc {
        let out = dir.join(format!("{name}.out"));
        let err = dir.join(format!("{name}.err"));
        let child = cmd
            .stdout(File::create(&out).expect("an output file"))
            .stderr(File::create(&err).expect("an output file"))
            .spawn()
            .expect("the machine's process starts");
        Proc {
            child: Some(child),
            out,
            err,
        }
    }

    /// SIGKILL to the first process of the PID namespace (`unshare`'s child): the kernel
    /// then kills every process in it, trials included.
    pub(crate) fn kill_machine(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        let pid = child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for init in children.split_whitespace() {
            let _ = sh(&["kill", "-KILL", init]);
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// `sig` to the machine's own process (`unshare`'s child, the first of its PID namespace:
    /// `unshare` passes no signal on, and the kernel delivers one from outside the namespace
    /// to its first process only when that installed a handler, as tune does for SIGTERM).
    pub(crate) fn signal(&self, sig: &str) {
        let Some(child) = self.child.as_ref() else {
            return;
        };
        let pid = child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for init in children.split_whitespace() {
            sh(&["kill", &format!("-{sig}"), init]).expect("a signal");
        }
    }

    /// The process's exit status if it has ended, without waiting.
    pub(crate) fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Waits for the process to end (failing the test past `limit`) and returns its output.
    pub(crate) fn wait(&mut self, limit: Duration) -> Output {
        let child = self.child.as_mut().expect("still held");
        let status = crate::common::wait_within(child, limit);
        self.child = None;
        Output {
            status,
            stdout: std::fs::read(&self.out).unwrap_or_default(),
            stderr: std::fs::read(&self.err).unwrap_or_default(),
        }
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill_machine();
    }
}

fn study_file() -> String {
    format!(
        r#"[study]
name = "many"
metric = "loss"
trials = {TRIALS}
seed = 11
heartbeat = "500ms"
heartbeat_grace = "2s"

[sampler]
kind = "random"

[space]
x = {{ type = "float", low = -2.0, high = 2.0 }}

[workers]
count = 1
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "trial.sh", "{{x}}"]
"#
    )
}

/// Sleeps, notes that it ran to its end on this machine, then reports.
const TRIAL: &str =
    "sleep 0.4\necho \"$TUNE_TRIAL\" >> done.txt\necho \"tune: {\\\"loss\\\": $1}\"\n";

/// One number from `psql` in this test's database.
fn count(server: &PgServer, sql: &str) -> u64 {
    count_in(server, "many", sql)
}

/// One number from `psql` in database `db` (0 when there is none yet).
pub(crate) fn count_in(server: &PgServer, db: &str, sql: &str) -> u64 {
    server
        .psql(db, sql)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// How many of the study's trials in Optuna's `state` ran on machine `host`.
fn on_host(server: &PgServer, state: &str, host: &str) -> u64 {
    count(
        server,
        &format!(
            "SELECT count(*) FROM trials t JOIN tune_trials x ON x.trial_id = t.trial_id
             JOIN tune_workers w ON w.worker_id = x.worker_id
             WHERE t.state = '{state}' AND w.host = '{host}'"
        ),
    )
}

pub(crate) fn poll(
    what: &str,
    deadline: Instant,
    procs: &mut [&mut Proc],
    mut cond: impl FnMut() -> bool,
) {
    while !cond() {
        for p in procs.iter_mut() {
            if let Some(c) = p.child.as_mut()
                && let Ok(Some(s)) = c.try_wait()
            {
                panic!(
                    "a machine's process ended ({s}) while waiting for {what}:\n{}",
                    p.stderr()
                );
            }
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn done_on(dir: &Path) -> BTreeSet<u64> {
    std::fs::read_to_string(dir.join("done.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Network-namespace machines named `names`, the first running PostgreSQL; `None` (the test
/// skips, saying why) where namespaces or PostgreSQL are missing and not required.
pub(crate) fn machines_with_a_database(names: &[&str]) -> Option<(Net, PgServer)> {
    let net = match Net::new(names) {
        Ok(n) => n,
        Err(e) if !required() => {
            eprintln!("skipped: cannot create network namespaces: {e}");
            return None;
        }
        Err(e) => panic!("network namespaces are required here (TUNE_REQUIRE_PG=1): {e}"),
    };
    let server = match PgServer::start_in_netns(&net.machines[0], &net.addr(0), &net.cidr()) {
        Ok(s) => s,
        Err(e) if !required() && std::env::var_os("CI").is_none() => {
            eprintln!("skipped: PostgreSQL could not start: {e}");
            return None;
        }
        Err(e) => panic!("PostgreSQL is required here but could not start: {e}"),
    };
    Some((net, server))
}

#[test]
fn a_study_on_four_machines_survives_a_killed_worker_and_a_cut_one_with_its_budget_exact() {
    let t0 = Instant::now();
    let Some((net, server)) = machines_with_a_database(&["db", "r", "w1", "w2"]) else {
        return;
    };
    let url = server.create_db("many");
    let sb = Sandbox::new();
    let dirs: Vec<_> = ["r", "w1", "w2"]
        .iter()
        .map(|m| {
            sb.write(&format!("{m}/trial.sh"), TRIAL);
            sb.join(m)
        })
        .collect();
    sb.write("r/study.toml", &study_file());
    let deadline = t0 + LIMIT;

    // The study is stored by `tune run` on machine r; the workers wait for it to appear.
    let mut run = net.command(1, "r", &tune_bin());
    run.args(["run", "study.toml", "--db", &url, "--no-tui"])
        .current_dir(&dirs[0]);
    let mut run = Proc::spawn(run, sb.path(), "r");
    let mut workers: Vec<Proc> = [(2, "m1"), (3, "m2")]
        .into_iter()
        .map(|(i, host)| {
            let mut w = net.command(i, host, &tune_bin());
            w.args([
                "worker", "--db", &url, "--study", "many", "--count", "2", "--wait", "60s",
                "--no-tui",
            ])
            .current_dir(&dirs[i - 1]);
            Proc::spawn(w, sb.path(), host)
        })
        .collect();
    let (w1, w2) = workers.split_at_mut(1);
    let (w1, w2) = (&mut w1[0], &mut w2[0]);

    // Both worker machines busy, a sixth of the budget done: kill machine 1 outright.
    poll(
        "both workers running trials",
        deadline,
        &mut [&mut run, &mut *w1, &mut *w2],
        || {
            on_host(&server, "RUNNING", "m1") == 2
                && on_host(&server, "RUNNING", "m2") >= 1
                && on_host(&server, "COMPLETE", "m1") >= 1
                && on_host(&server, "COMPLETE", "m2") >= 1
                && count(
                    &server,
                    "SELECT count(*) FROM trials WHERE state = 'COMPLETE'",
                ) >= 10
        },
    );
    w1.kill_machine();
    let killed_with = on_host(&server, "RUNNING", "m1");
    assert!(killed_with >= 1, "machine 1 died with trials running");
    // Then cut machine 2 off while it runs trials, for longer than the grace.
    poll(
        "machine 2 running a trial",
        deadline,
        &mut [&mut run, &mut *w2],
        || on_host(&server, "RUNNING", "m2") >= 1,
    );
    net.link(3, false);
    std::thread::sleep(CUT);
    net.link(3, true);
    let complete_at_restore = count(
        &server,
        "SELECT count(*) FROM trials WHERE state = 'COMPLETE'",
    );
    assert!(
        complete_at_restore < TRIALS as u64,
        "the faults came before the study's end"
    );

    let left = deadline.saturating_duration_since(Instant::now());
    let r_out = run.wait(left);
    assert!(r_out.status.success(), "tune run: {}", text(&r_out));
    let left = deadline.saturating_duration_since(Instant::now());
    let w2_out = w2.wait(left);
    assert!(w2_out.status.success(), "machine 2: {}", text(&w2_out));
    let w2_text = text(&w2_out);
    assert!(
        w2_text.contains("taken over") || w2_text.contains("taken it over"),
        "machine 2 was told its trials had been taken over: {w2_text}\nmachine r: {}",
        text(&r_out)
    );

    // Everything as `tune trials` reads it, from machine r.
    let mut q = net.command(1, "r", &tune_bin());
    q.args([
        "trials", "--db", &url, "--study", "many", "--state", "all", "--format", "json",
    ]);
    let out = output_within(q, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out));
    let trials: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    let by_number: BTreeMap<u64, &Value> = trials
        .iter()
        .map(|t| (t["number"].as_u64().expect("a number"), t))
        .collect();
    assert_numbers_once(&trials);
    assert_eq!(counted(&trials), TRIALS, "the budget, exactly: {trials:#?}");
    let complete = trials.iter().filter(|t| t["state"] == "complete").count();
    assert_eq!(complete, TRIALS, "every counted trial is complete");
    let interrupted: Vec<u64> = trials
        .iter()
        .filter(|t| {
            t["state"] == "failed"
                && t["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("interrupted"))
        })
        .map(|t| t["number"].as_u64().expect("a number"))
        .collect();
    assert_eq!(
        complete + interrupted.len(),
        trials.len(),
        "nothing left running or queued, no other failure: {trials:#?}"
    );
    for n in &interrupted {
        assert!(
            by_number[n]["value"].is_null(),
            "interrupted trial {n} has no value: {:#?}",
            by_number[n]
        );
    }

    // Every interrupted trial was run again with its params, and its line of reruns ends in
    // a complete trial.
    let retries: BTreeMap<u64, u64> = server
        .psql(
            "many",
            "SELECT x.retry_of, t.number FROM trials t JOIN tune_trials x ON x.trial_id = t.trial_id
             WHERE x.retry_of IS NOT NULL",
        )
        .expect("psql")
        .lines()
        .filter_map(|l| {
            let (of, n) = l.split_once('|')?;
            Some((of.parse().ok()?, n.parse().ok()?))
        })
        .collect();
    for n in &interrupted {
        let mut at = *n;
        let mut hops = 0;
        while by_number[&at]["state"] != "complete" {
            let Some(next) = retries.get(&at) else {
                panic!("interrupted trial {at} was never run again: {retries:?}");
            };
            assert_eq!(
                by_number[next]["params"], by_number[&at]["params"],
                "trial {next} reruns {at} with its params"
            );
            at = *next;
            hops += 1;
            assert!(hops <= trials.len(), "a loop of retries");
        }
    }

    // Machine 1's trials that were running when it died are interrupted, not lost.
    let m1_unfinished = count(
        &server,
        "SELECT count(*) FROM trials t JOIN tune_trials x ON x.trial_id = t.trial_id
         JOIN tune_workers w ON w.worker_id = x.worker_id
         WHERE w.host = 'm1' AND x.interrupted = 1",
    );
    assert!(
        m1_unfinished >= killed_with,
        "machine 1's {killed_with} running trials were declared interrupted ({m1_unfinished})"
    );
    // Fencing: machine 2 ran some trials to their end while cut off, after they had been
    // taken over; those results were refused (the trials stayed interrupted, without a value).
    let fenced: Vec<u64> = done_on(&dirs[2])
        .into_iter()
        .filter(|n| interrupted.contains(n))
        .collect();
    assert!(
        !fenced.is_empty(),
        "machine 2 finished a trial that had been taken over: done {:?}, interrupted {interrupted:?}",
        done_on(&dirs[2])
    );
    let hosts = server
        .psql(
            "many",
            "SELECT DISTINCT w.host FROM tune_trials x JOIN tune_workers w ON w.worker_id = x.worker_id
             JOIN trials t ON t.trial_id = x.trial_id WHERE t.state = 'COMPLETE' ORDER BY 1",
        )
        .expect("psql");
    assert_eq!(
        hosts.lines().collect::<Vec<_>>(),
        ["m1", "m2", "r"],
        "every machine completed trials"
    );
    eprintln!(
        "multi-host: {} trials ({} interrupted, {} fenced) in {:.1} s",
        trials.len(),
        interrupted.len(),
        fenced.len(),
        t0.elapsed().as_secs_f64()
    );
    drop(workers);
    drop(server);
    drop(net);
}
