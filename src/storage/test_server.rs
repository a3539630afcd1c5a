//! An ephemeral PostgreSQL server for tests: its own cluster in a temporary directory, on a
//! free port, run as the `postgres` user (root cannot run it), stopped when dropped. It listens
//! on 127.0.0.1, or (for the multi-host test) on an address inside a network namespace.

use std::path::PathBuf;
use std::process::Command;

const BIN: &str = "/usr/lib/postgresql/15/bin";
pub const PASSWORD: &str = "tune-test-pw";

pub struct PgServer {
    dir: tempfile::TempDir,
    port: u16,
    /// The address it listens on, and the network namespace it runs in (`None`: this one).
    host: String,
    netns: Option<String>,
}

fn run_as_postgres(args: &[&str]) -> Result<String, String> {
    run_as_postgres_in(None, args)
}

/// `args` as the `postgres` user, inside network namespace `netns` when given.
fn run_as_postgres_in(netns: Option<&str>, args: &[&str]) -> Result<String, String> {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "runuser"]);
            c
        }
        None => Command::new("runuser"),
    };
    let out = cmd
        .args(["-u", "postgres", "--"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("runuser: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

impl PgServer {
    pub fn start() -> Result<PgServer, String> {
        Self::start_with(None, "127.0.0.1", None)
    }

    /// A server inside network namespace `netns`, listening on `addr` (an address of that
    /// namespace), that lets in password (scram) connections from `allow` (a CIDR such as
    /// `10.201.3.0/24`) as well as from 127.0.0.1.
    pub fn start_in_netns(netns: &str, addr: &str, allow: &str) -> Result<PgServer, String> {
        Self::start_with(Some(netns), addr, Some(allow))
    }

    fn start_with(
        netns: Option<&str>,
        addr: &str,
        allow: Option<&str>,
    ) -> Result<PgServer, String> {
        if !PathBuf::from(BIN).join("pg_ctl").exists() {
            return Err(format!("no PostgreSQL 15 in {BIN}"));
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let data = dir.path().join("data");
        Command::new("chown")
            .args(["postgres", &dir.path().display().to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).map_err(|e| e.to_string())?;
        Command::new("chown")
            .args(["postgres", &pwfile.display().to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        run_as_postgres(&[
            &format!("{BIN}/initdb"),
            "-D",
            &data.display().to_string(),
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            &format!("--pwfile={}", pwfile.display()),
        ])?;
        if let Some(net) = allow {
            use std::io::Write;
            let mut hba = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("pg_hba.conf"))
                .map_err(|e| format!("pg_hba.conf: {e}"))?;
            writeln!(hba, "host all all {net} scram-sha-256")
                .map_err(|e| format!("pg_hba.conf: {e}"))?;
        }
        let mut last = String::new();
        for _ in 0..5 {
            // A port free here is free in a fresh namespace too (it has no listeners at all).
            let port = free_port()?;
            let r = run_as_postgres_in(
                netns,
                &[
                    &format!("{BIN}/pg_ctl"),
                    "-D",
                    &data.display().to_string(),
                    "-l",
                    &dir.path().join("log").display().to_string(),
                    "-o",
                    &format!(
                        "-p {port} -k {} -c listen_addresses={addr} -c max_connections=300 -c fsync=off",
                        dir.path().display()
                    ),
                    "-w",
                    "start",
                ],
            );
            match r {
                Ok(_) => {
                    return Ok(PgServer {
                        dir,
                        port,
                        host: addr.to_string(),
                        netns: netns.map(str::to_string),
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A fresh database, and its URL (user `postgres` with the password).
    pub fn create_db(&self, name: &str) -> String {
        run_as_postgres(&[
            &format!("{BIN}/createdb"),
            "-h",
            &self.dir.path().display().to_string(),
            "-p",
            &self.port.to_string(),
            name,
        ])
        .expect("createdb");
        self.url(name)
    }

    /// The URL of database `name` (user `postgres` with the password).
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgresql://postgres:{PASSWORD}@{}:{}/{name}",
            self.host, self.port
        )
    }

    /// Runs SQL in database `db` with `psql` over the server's Unix socket (reachable from any
    /// network namespace), and returns its unaligned output: one row a line, `|` between
    /// columns.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        run_as_postgres(&[
            &format!("{BIN}/psql"),
            "-h",
            &self.dir.path().display().to_string(),
            "-p",
            &self.port.to_string(),
            "-d",
            db,
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
    }

    fn ctl(&self, what: &[&str]) -> Result<String, String> {
        let data = self.dir.path().join("data").display().to_string();
        let mut args = vec![format!("{BIN}/pg_ctl"), "-D".into(), data];
        args.extend(what.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        // In the server's namespace: a restarted server must bind its address there again.
        run_as_postgres_in(self.netns.as_deref(), &refs)
    }

    pub fn restart(&self) -> Result<(), String> {
        // With its log file named again: without `-l` the new server would keep this call's
        // output pipe open, and waiting for it would never end.
        let log = self.dir.path().join("log").display().to_string();
        self.ctl(&["-m", "fast", "-l", &log, "-w", "restart"])
            .map(|_| ())
    }
}

impl PgServer {
    /// Stops the server (fast: its sessions end) until [`PgServer::start_again`]: a database
    /// that is gone for as long as a test wants.
    pub fn stop(&self) -> Result<(), String> {
        self.ctl(&["-m", "fast", "-w", "stop"]).map(|_| ())
    }

    /// Starts a server that [`PgServer::stop`] stopped, on the same address and port.
    pub fn start_again(&self) -> Result<(), String> {
        let dir = self.dir.path().display().to_string();
        let log = self.dir.path().join("log").display().to_string();
        let opts = format!(
            "-p {} -k {dir} -c listen_addresses={} -c max_connections=300 -c fsync=off",
            self.port, self.host
        );
        self.ctl(&["-l", &log, "-o", &opts, "-w", "start"])
            .map(|_| ())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self.ctl(&["-m", "immediate", "stop"]);
    }
}

/// A server, or `None` with a `skipped:` line where none can start; in CI (or with
/// `TUNE_REQUIRE_PG=1`) a server that cannot start fails the test instead.
pub fn pg_or_skip() -> Option<PgServer> {
    match PgServer::start() {
        Ok(s) => Some(s),
        Err(e) => {
            if std::env::var_os("CI").is_some()
                || std::env::var("TUNE_REQUIRE_PG").as_deref() == Ok("1")
            {
                panic!("PostgreSQL is required here but could not start: {e}");
            }
            eprintln!("skipped: PostgreSQL could not start: {e}");
            None
        }
    }
}

/// A fresh database on a server shared by the tests running now (started by the first, stopped
/// when the last drops its handle), or `None` as [`pg_or_skip`] says.
pub fn shared_db() -> Option<(std::sync::Arc<PgServer>, String)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, Weak};
    static SERVER: Mutex<Weak<PgServer>> = Mutex::new(Weak::new());
    static N: AtomicUsize = AtomicUsize::new(0);
    let server = {
        let mut slot = SERVER.lock().unwrap_or_else(|e| e.into_inner());
        match slot.upgrade() {
            Some(s) => s,
            None => {
                let s = Arc::new(pg_or_skip()?);
                *slot = Arc::downgrade(&s);
                s
            }
        }
    };
    let name = format!(
        "t{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let url = server.create_db(&name);
    Some((server, url))
}
