//! A real S3-compatible server for the tests of checkpoints in an object store (issue 27):
//! moto's server mode (`moto[server]` from PyPI, installed into `.venv` by
//! `scripts/setup.sh --python-tests`), started on a free loopback port for one test and
//! stopped when it ends. MinIO is not packaged here; moto answers the S3 API the
//! `object_store` crate speaks (PUT, GET, DELETE, ListObjectsV2, multipart uploads).
//!
//! Without moto a test says `skipped:` and passes, unless `TUNE_REQUIRE_MOTO=1`
//! (`scripts/test.sh` sets it) or `CI` is set: then a missing moto fails it.
//!
//! Standard library only: `crates/tune-train/tests/checkpoint_store.rs` includes this file too.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A moto server of one test; stopped (killed, by its pid) when dropped.
pub struct Moto {
    child: Child,
    pub port: u16,
    /// The `.venv`'s Python (with boto3, which moto depends on).
    python: PathBuf,
}

/// Where `scripts/setup.sh --python-tests` puts moto: the repository's `.venv`.
fn moto_server(repo: &Path) -> PathBuf {
    repo.join(".venv/bin/moto_server")
}

/// A port nobody listens on now (the kernel's choice, released at once).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

impl Moto {
    /// Starts moto for a test of the repository at `repo` (`env!("CARGO_MANIFEST_DIR")` of
    /// the root package), with `env` added to its environment; `None`, having printed why,
    /// when moto is not installed and not required.
    pub fn start(repo: &Path, env: &[(&str, &str)]) -> Option<Moto> {
        let exe = moto_server(repo);
        if !exe.is_file() {
            if std::env::var_os("CI").is_some()
                || std::env::var("TUNE_REQUIRE_MOTO").as_deref() == Ok("1")
            {
                panic!(
                    "moto is required here (TUNE_REQUIRE_MOTO=1) but {} is missing: \
                     `./scripts/setup.sh --python-tests` installs it",
                    exe.display()
                );
            }
            eprintln!(
                "skipped: moto is not installed in .venv (`./scripts/setup.sh --python-tests` installs it)"
            );
            return None;
        }
        let port = free_port();
        let mut cmd = Command::new(&exe);
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("moto_server starts");
        let moto = Moto {
            child,
            port,
            python: repo.join(".venv/bin/python"),
        };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "moto_server did not listen on port {port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(moto)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The environment that points `tune` (the `object_store` crate's `AmazonS3Builder`) at
    /// this server: moto takes any credentials unless started with auth on.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        s3_env(&self.endpoint())
    }

    /// Creates a bucket (an unsigned PUT, which moto takes).
    pub fn create_bucket(&self, name: &str) {
        let (status, body) = http(self.port, "PUT", &format!("/{name}"));
        assert_eq!(status, 200, "create bucket {name}: {body}");
    }

    /// An object's text, or `None` when it is not there: read by boto3 (moto's own
    /// dependency, in the same `.venv`), as moto refuses an unsigned GET of an object.
    pub fn get(&self, bucket: &str, key: &str) -> Option<String> {
        const GET: &str = r#"
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="tune-test", aws_secret_access_key="tune-test-secret")
try:
    body = s3.get_object(Bucket=sys.argv[2], Key=sys.argv[3])["Body"].read()
except s3.exceptions.NoSuchKey:
    sys.exit(3)
sys.stdout.buffer.write(body)
"#;
        let out = Command::new(&self.python)
            .args(["-c", GET, &self.endpoint(), bucket, key])
            .output()
            .expect("python runs");
        match out.status.code() {
            Some(0) => Some(String::from_utf8_lossy(&out.stdout).into_owned()),
            Some(3) => None,
            _ => panic!(
                "reading {bucket}/{key} from moto: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// The keys under `prefix` in `bucket` (ListObjectsV2, read from its XML).
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let (status, body) = http(
            self.port,
            "GET",
            &format!("/{bucket}?list-type=2&prefix={prefix}"),
        );
        assert_eq!(status, 200, "list {bucket}/{prefix}: {body}");
        body.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split("</Key>").next())
            .map(str::to_string)
            .collect()
    }

    /// Stops the server now (an outage in the middle of a study).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The environment of a client of the S3 endpoint `endpoint`.
pub fn s3_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", "tune-test".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "tune-test-secret".to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_ENDPOINT", endpoint.to_string()),
        ("AWS_ALLOW_HTTP", "true".to_string()),
    ]
}

/// A store that goes down at a chosen request: a loopback proxy in front of the server on
/// `upstream` that forwards HTTP/1.1 requests (one per connection: it answers each with
/// `Connection: close`) until one whose target contains `trigger` comes; that one gets no
/// answer, and from then on the proxy's port refuses connections. Tune's up-front probe of
/// the store passes through it, and the fault comes exactly where the test wants it (say, the
/// first request for a trial's copy), which stopping the server itself cannot time.
pub struct Outage {
    pub port: u16,
    down: Arc<AtomicBool>,
}

impl Outage {
    pub fn start(upstream: u16, trigger: &str) -> Outage {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        // Polled, so that the listener (and with it the port) goes as soon as `down` is set.
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let down = Arc::new(AtomicBool::new(false));
        let (flag, trigger) = (Arc::clone(&down), trigger.to_string());
        std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (flag, trigger) = (Arc::clone(&flag), trigger.clone());
                        std::thread::spawn(move || relay(client, upstream, &trigger, &flag));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => break,
                }
            }
        });
        Outage { port, down }
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Whether the trigger came (and the proxy went down).
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        self.down.store(true, Ordering::SeqCst);
    }
}

/// One request of `client` to the server on `upstream`, and its answer back; none when the
/// proxy is down or the request is the trigger (which takes it down). Errors drop the
/// connection, as a failing server would.
fn relay(mut client: TcpStream, upstream: u16, trigger: &str, down: &AtomicBool) {
    let _ = client.set_nonblocking(false);
    let _ = client.set_read_timeout(Some(Duration::from_secs(30)));
    let Some(head) = read_head(&mut client) else {
        return;
    };
    let target = head.split_whitespace().nth(1).unwrap_or_default();
    if down.load(Ordering::SeqCst) || target.contains(trigger) {
        down.store(true, Ordering::SeqCst);
        return;
    }
    let length: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        header(&head, "transfer-encoding").is_none(),
        "the proxy forwards bodies with a Content-Length only: {head}"
    );
    let mut body = vec![0; length];
    if client.read_exact(&mut body).is_err() {
        return;
    }
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    let _ = server.set_read_timeout(Some(Duration::from_secs(30)));
    if server.write_all(closing(&head).as_bytes()).is_err() || server.write_all(&body).is_err() {
        return;
    }
    let Some(answer) = read_head(&mut server) else {
        return;
    };
    if client.write_all(closing(&answer).as_bytes()).is_ok() {
        let _ = std::io::copy(&mut server, &mut client);
    }
}

/// An HTTP head (through its blank line), read a byte at a time so nothing after it is taken.
fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// The value of header `name` (lower case) in `head`.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// `head` with `Connection: close` in place of its own `Connection` header.
fn closing(head: &str) -> String {
    let mut out: String = head
        .trim_end()
        .lines()
        .filter(|l| {
            !l.split_once(':')
                .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"))
        })
        .map(|l| format!("{l}\r\n"))
        .collect();
    out.push_str("Connection: close\r\n\r\n");
    out
}

/// One HTTP/1.1 request without a body to the local server on `port`: its status and body.
fn http(port: u16, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("moto answers");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a read timeout");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .expect("the request goes out");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("the answer comes back");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

/// A chunked body's data.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}
