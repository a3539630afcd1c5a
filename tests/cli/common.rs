//! What every test of the binary shares: the real `tune` binary, a temp dir per test, study
//! files and trial scripts written into it, and readers of what the binary printed and stored.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test: the one cargo built with this test, or the one `TUNE_TEST_BIN`
/// names (to test a release build or an installed binary with the same suite).
pub fn tune_bin() -> String {
    std::env::var("TUNE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tune").to_string())
}

/// No test may hang the suite: every wait on the binary gives up after this.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A temp dir of one test: study files, scripts, the database and the runs live here.
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::Builder::new()
                .prefix("tune-it-")
                .tempdir()
                .expect("a temp dir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a file (creating its directory) and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.join(name);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).expect("create the file's directory");
        }
        std::fs::write(&p, text).expect("write a file into the sandbox");
        p
    }

    /// `tune ARGS` run in the sandbox, its environment cleared of `TUNE_DB`.
    pub fn tune(&self, args: &[&str]) -> Command {
        let mut c = Command::new(tune_bin());
        c.args(args)
            .current_dir(self.path())
            .env_remove("TUNE_DB")
            .stdin(Stdio::null());
        c
    }

    /// Runs `tune ARGS` to its end (within [`PATIENCE`]) and returns what it printed.
    pub fn run(&self, args: &[&str]) -> Output {
        output_within(self.tune(args), PATIENCE)
    }

    /// Runs `tune ARGS` and insists on exit status 0.
    pub fn ok(&self, args: &[&str]) -> Output {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "`tune {}` failed with {}:\n{}",
            args.join(" "),
            out.status,
            text(&out)
        );
        out
    }

    /// `tune trials STUDY --format json`, parsed.
    pub fn trials(&self, study_file: &str) -> Vec<Value> {
        let out = self.ok(&["trials", study_file, "--format", "json"]);
        match serde_json::from_slice(&out.stdout).expect("`tune trials` prints JSON") {
            Value::Array(a) => a,
            other => panic!("`tune trials` printed {other}, not an array"),
        }
    }

    /// Opens the study's database directly.
    pub fn db(&self, name: &str) -> rusqlite::Connection {
        rusqlite::Connection::open(self.join(name)).expect("the database opens")
    }
}

/// Both streams of an output, for failure messages.
pub fn text(out: &Output) -> String {
    format!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs a command to its end, killing it when it outlives `limit` (and then failing the test).
pub fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    wait_output(child, limit)
}

/// Collects a spawned child's output (both streams piped), killing it after `limit`.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    // Read both pipes on threads so that a chatty child never blocks on a full pipe.
    let mut so = child.stdout.take().expect("stdout is piped");
    let mut se = child.stderr.take().expect("stderr is piped");
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = se.read_to_end(&mut b);
        b
    });
    let status = wait_within(&mut child, limit);
    Output {
        status,
        stdout: t_out.join().expect("stdout reader"),
        stderr: t_err.join().expect("stderr reader"),
    }
}

/// Waits for a child, killing it and failing the test when it outlives `limit`.
pub fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait on the child") {
            return s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the process ran past {limit:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `cond` until it holds, failing the test after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A study file for a command trial that runs `sh trial.sh ARGS...` (write `trial.sh` too).
/// `extra` is appended to the `[study]` table; `args` are the script's arguments.
pub fn sh_study(name: &str, trials: u64, workers: u64, extra: &str, args: &[&str]) -> String {
    let args: String = args.iter().map(|a| format!(", {a:?}")).collect();
    format!(
        r#"[study]
name = "{name}"
metric = "loss"
trials = {trials}
seed = 5
{extra}

[space]
x = {{ type = "float", low = -2.0, high = 2.0 }}
k = {{ type = "int", low = 1, high = 4 }}
c = {{ type = "categorical", choices = ["a", "b"] }}

[workers]
count = {workers}
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "trial.sh"{args}]
"#
    )
}

/// The trials that count toward the budget: complete, pruned, and failed on their own.
pub fn counted(trials: &[Value]) -> usize {
    trials
        .iter()
        .filter(|t| match t["state"].as_str() {
            Some("complete" | "pruned") => true,
            Some("failed") => !t["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("interrupted")),
            _ => false,
        })
        .count()
}

/// The numbers of the trials, in the order given.
pub fn numbers(trials: &[Value]) -> Vec<u64> {
    trials
        .iter()
        .map(|t| t["number"].as_u64().expect("a trial number"))
        .collect()
}

/// Asserts that the numbers are 0..n, each once.
pub fn assert_numbers_once(trials: &[Value]) {
    let mut n = numbers(trials);
    n.sort_unstable();
    let want: Vec<u64> = (0..n.len() as u64).collect();
    assert_eq!(n, want, "trial numbers are 0..N, each once");
}

/// Rows of `SELECT number, state` on the sandbox's `tune.db`, read-only; empty while the file
/// or its tables do not exist yet.
pub fn states(sb: &Sandbox) -> Vec<(u64, String)> {
    let Ok(db) = rusqlite::Connection::open_with_flags(
        sb.join("tune.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    ) else {
        return Vec::new();
    };
    let Ok(mut stmt) = db.prepare("SELECT number, state FROM trials ORDER BY number") else {
        return Vec::new();
    };
    stmt.query_map([], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

/// The non-final report steps of a trial as `tune show N --format json` gives them.
pub fn report_steps(shown: &Value) -> Vec<i64> {
    shown["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .filter(|r| r["final"] != true)
        .map(|r| r["step"].as_i64().expect("a step"))
        .collect()
}
