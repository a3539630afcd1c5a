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
