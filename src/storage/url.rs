//! Where a study lives, as written in `[study] storage`, `--db` or `TUNE_DB`: a SQLite file
//! (a path, or Optuna's `sqlite:///path`) or a PostgreSQL server (`postgresql://…`,
//! `postgres://…`). Parsing only checks; nothing is opened or created here, so a bad URL is
//! refused before anything is written. A password is kept apart from everything that prints:
//! `Display` never shows it.

use std::fmt;
use std::path::{Path, PathBuf};

/// A checked storage location.
#[derive(Clone, PartialEq, Eq)]
pub enum StorageUrl {
    Sqlite(PathBuf),
    Postgres(PgUrl),
}

/// How a PostgreSQL connection uses TLS (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    /// TLS when the server offers it, without checking its certificate (libpq's default).
    Prefer,
    /// TLS or no connection, without checking the certificate.
    Require,
    /// TLS with a certificate signed by a trusted authority.
    VerifyCa,
    /// TLS with a trusted certificate that names the host.
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// A PostgreSQL server and database.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    pub user: String,
    /// From the URL, or later from `PGPASSWORD` / `~/.pgpass` ([`PgUrl::password`]).
    password: Option<String>,
    /// A host name or address, or a directory holding the server's Unix socket.
    pub host: String,
    pub port: u16,
    pub dbname: String,
    pub sslmode: SslMode,
    /// A file of trusted root certificates (PEM) for `verify-ca`/`verify-full`.
    pub sslrootcert: Option<PathBuf>,
    pub connect_timeout: Option<std::time::Duration>,
    pub application_name: Option<String>,
}

/// A storage location that cannot be used; the message never contains a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("storage `{shown}`: {message}")]
pub struct UrlError {
    pub shown: String,
    pub message: String,
}

/// What is wrong in a `postgresql://` URL, before [`StorageUrl::parse`] names the storage in a
/// [`UrlError`]. Hazard: no variant holds the password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum PgUrlError {
    #[error("not a valid URL: {0}")]
    NotAUrl(#[from] url::ParseError),
    #[error("the URL has an invalid percent-encoding")]
    PercentEncoding,
    #[error("`{0}` is not a database name")]
    NotADatabaseName(String),
    #[error("sslmode `{0}` is not one of disable, allow, prefer, require, verify-ca, verify-full")]
    UnknownSslMode(String),
    #[error("port `{0}` is not a port number")]
    NotAPort(String),
    #[error("connect_timeout `{0}` is not a whole number of seconds")]
    NotSeconds(String),
    #[error("unknown parameter `{0}`; tune knows {params}", params = PG_PARAMS.join(", "))]
    UnknownParameter(String),
    #[error("the URL names no database: `postgresql://USER@HOST:PORT/DBNAME`")]
    NoDatabase,
}

/// The query parameters a `postgresql://` URL may carry.
const PG_PARAMS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "host",
    "port",
    "user",
    "dbname",
    "password",
    "connect_timeout",
    "application_name",
];

impl StorageUrl {
    /// Parses a location. `base` is the directory a relative file path is relative to (the
    /// study file's, or the working directory for `--db`).
    pub fn parse(text: &str, base: &Path) -> Result<StorageUrl, UrlError> {
        let err = |message: String| UrlError {
            shown: redact(text),
            message,
        };
        let lower = text.to_ascii_lowercase();
        if lower.starts_with("postgresql://") || lower.starts_with("postgres://") {
            return PgUrl::parse(text)
                .map(StorageUrl::Postgres)
                .map_err(|e| err(e.to_string()));
        }
        if let Some(rest) = lower.strip_prefix("sqlite:") {
            // SQLAlchemy's spelling: three slashes then a relative path, four for an
            // absolute one (`sqlite:////abs/x.db`).
            let Some(path) = rest.strip_prefix("///") else {
                return Err(err(
                    "a SQLite URL is `sqlite:///relative/path.db` or `sqlite:////absolute/path.db`"
                        .into(),
                ));
            };
            if path.is_empty() {
                return Err(err("the SQLite URL names no file".into()));
            }
            // The original spelling of the path (the lower-cased copy only found the scheme).
            let path = &text[text.len() - path.len()..];
            return Ok(StorageUrl::Sqlite(base.join(path)));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(err(format!(
                "`{scheme}://` is not a storage tune knows; use a file path, `sqlite:///PATH` or `postgresql://USER@HOST:PORT/DBNAME`"
            )));
        }
        if text.trim().is_empty() {
            return Err(err("the storage is empty; name a file or a URL".into()));
        }
        // Neither is a file: taken as a SQLite path, each would create a file named after a
        // server, and maybe its password.
        if let Some(scheme) = url_scheme(text) {
            return Err(err(format!(
                "`{scheme}:` starts a URL, but not one tune reads (a PostgreSQL URL is `postgresql://USER@HOST:PORT/DBNAME`, with two slashes); a file whose name starts so is `./{}`",
                redact(text)
            )));
        }
        if let Some(key) = libpq_keyword(text) {
            return Err(err(format!(
                "this is a libpq keyword string (`{key}=…`), which tune does not read; write it as a URL, `postgresql://USER@HOST:PORT/DBNAME?sslmode=…`, with the password in PGPASSWORD or ~/.pgpass (a file whose name starts so is `./NAME`)"
            )));
        }
        Ok(StorageUrl::Sqlite(base.join(text)))
    }

    /// The SQLite file, when it is one.
    pub fn as_sqlite(&self) -> Option<&Path> {
        match self {
            StorageUrl::Sqlite(p) => Some(p),
            StorageUrl::Postgres(_) => None,
        }
    }

    pub fn is_server(&self) -> bool {
        matches!(self, StorageUrl::Postgres(_))
    }
}

impl fmt::Display for StorageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageUrl::Sqlite(p) => write!(f, "{}", p.display()),
            StorageUrl::Postgres(u) => write!(f, "{u}"),
        }
    }
}

impl fmt::Debug for StorageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StorageUrl({self})")
    }
}

impl PgUrl {
    fn parse(text: &str) -> Result<PgUrl, PgUrlError> {
        let url = url::Url::parse(text)?;
        let dec = |s: &str| -> Result<String, PgUrlError> {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| PgUrlError::PercentEncoding)
        };
        let mut u = PgUrl {
            user: dec(url.username())?,
            password: url.password().map(dec).transpose()?,
            host: url
                .host_str()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
                .unwrap_or_default(),
            port: url.port().unwrap_or(5432),
            dbname: dec(url.path().trim_start_matches('/'))?,
            sslmode: SslMode::Prefer,
            sslrootcert: None,
            connect_timeout: None,
            application_name: None,
        };
        if u.dbname.contains('/') {
            return Err(PgUrlError::NotADatabaseName(u.dbname));
        }
        for (k, v) in url.query_pairs() {
            let v = v.into_owned();
            match k.as_ref() {
                "sslmode" => {
                    u.sslmode = match v.as_str() {
                        "disable" => SslMode::Disable,
                        "allow" | "prefer" => SslMode::Prefer,
                        "require" => SslMode::Require,
                        "verify-ca" => SslMode::VerifyCa,
                        "verify-full" => SslMode::VerifyFull,
                        other => return Err(PgUrlError::UnknownSslMode(other.to_string())),
                    }
                }
                "sslrootcert" => u.sslrootcert = Some(PathBuf::from(v)),
                "host" => u.host = v,
                "port" => u.port = v.parse().map_err(|_| PgUrlError::NotAPort(v.clone()))?,
                "user" => u.user = v,
                "dbname" => u.dbname = v,
                "password" => u.password = Some(v),
                "connect_timeout" => {
                    let s: u64 = v.parse().map_err(|_| PgUrlError::NotSeconds(v.clone()))?;
                    u.connect_timeout = Some(std::time::Duration::from_secs(s));
                }
                "application_name" => u.application_name = Some(v),
                other => return Err(PgUrlError::UnknownParameter(other.to_string())),
            }
        }
        if u.host.is_empty() {
            u.host = std::env::var("PGHOST").unwrap_or_else(|_| "localhost".into());
        }
        if u.user.is_empty() {
            u.user = std::env::var("PGUSER")
                .ok()
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "postgres".into());
        }
        if u.dbname.is_empty() {
            return Err(PgUrlError::NoDatabase);
        }
        Ok(u)
    }

    /// The password: the URL's, else `PGPASSWORD`, else the first matching line of
    /// `PGPASSFILE` or `~/.pgpass` (libpq's rules); `None` when there is none.
    pub fn password(&self) -> Option<String> {
        self.password_from().map(|(p, _)| p)
    }

    /// The password and where it came from (for messages, which never show the password).
    pub fn password_from(&self) -> Option<(String, PasswordFrom)> {
        if let Some(p) = &self.password {
            return Some((p.clone(), PasswordFrom::Url));
        }
        if let Ok(p) = std::env::var("PGPASSWORD") {
            return Some((p, PasswordFrom::Env));
        }
        let file = passfile()?;
        let text = std::fs::read_to_string(&file).ok()?;
        pgpass_lookup(&text, &self.host, self.port, &self.dbname, &self.user)
            .map(|p| (p, PasswordFrom::File(file)))
    }

    /// Whether the host is a Unix socket directory rather than a network address.
    pub fn is_socket(&self) -> bool {
        self.host.starts_with('/')
    }
}

impl fmt::Display for PgUrl {
    /// The URL without its password (and with only the parameters that matter to a reader).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.is_socket() {
            write!(
                f,
                "postgresql://{}@/{}?host={}",
                self.user, self.dbname, self.host
            )?;
        } else {
            write!(
                f,
                "postgresql://{}@{host}:{}/{}",
                self.user, self.port, self.dbname
            )?;
        }
        if self.sslmode != SslMode::Prefer {
            let sep = if self.is_socket() { '&' } else { '?' };
            write!(f, "{sep}sslmode={}", self.sslmode.as_str())?;
        }
        Ok(())
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgUrl({self})")
    }
}

/// Where a server password was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordFrom {
    Url,
    /// `PGPASSWORD`.
    Env,
    /// A line of this password file (`PGPASSFILE` or `~/.pgpass`).
    File(PathBuf),
}

/// The password file libpq reads: `PGPASSFILE`, else `~/.pgpass`; `None` without a home.
pub fn passfile() -> Option<PathBuf> {
    std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pgpass")))
}

/// `text` for a message: every password in it replaced by `***` (see [`password_spans`]). For
/// a location that did not parse, and for any message that may quote one.
pub fn redact(text: &str) -> String {
    let spans = password_spans(text.as_bytes());
    if spans.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for r in spans {
        // Spans are sorted and end on ASCII delimiters or the end, so these are char
        // boundaries; a span that is not (it cannot be) is masked whole all the same.
        let (from, to) = (r.start.max(at), r.end);
        if from > to || !text.is_char_boundary(from) || !text.is_char_boundary(to) {
            continue;
        }
        out.push_str(&text[at..from]);
        out.push_str("***");
        at = to;
    }
    out.push_str(&text[at..]);
    out
}

/// The scheme of a text that starts like a URL, `scheme:/…` (two characters or more, so no
/// drive letter) or `postgresql:…` without slashes, when it is not one tune reads (those are
/// parsed before this is asked).
fn url_scheme(text: &str) -> Option<&str> {
    let (scheme, rest) = text.split_once(':')?;
    let b = scheme.as_bytes();
    (b.len() >= 2
        && b[0].is_ascii_alphabetic()
        && b.iter().all(|&c| scheme_char(c))
        && (rest.starts_with('/')
            || scheme.eq_ignore_ascii_case("postgresql")
            || scheme.eq_ignore_ascii_case("postgres")))
    .then_some(scheme)
}

/// The connection keywords of libpq's `key=value …` strings that a location could start with.
const LIBPQ_KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "sslmode",
    "sslrootcert",
    "connect_timeout",
    "application_name",
    "service",
    "options",
    "target_session_attrs",
];

/// The first libpq keyword of a text that is a libpq keyword string (`host=h dbname=d …`):
/// some word of it is `KEYWORD=…`, optionally with spaces around `=`.
fn libpq_keyword(text: &str) -> Option<&'static str> {
    let squeezed = text.replace(" =", "=").replace("= ", "=");
    squeezed.split_whitespace().find_map(|word| {
        let (k, _) = word.split_once('=')?;
        LIBPQ_KEYWORDS
            .iter()
            .find(|kw| kw.eq_ignore_ascii_case(k))
            .copied()
    })
}

/// Whether `b` may be part of a URL scheme (RFC 3986: a letter, then letters, digits, `+`, `-`
/// and `.`).
fn scheme_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

/// Where passwords stand in `arg` (a command-line argument, a location, a message), for
/// masking in place: sorted, disjoint byte ranges. Malformed URLs count, since a typo is no
/// reason to show a password:
/// - `PW` in `scheme:[//]user:PW@host…`, up to the last `@` before the next whitespace, so a
///   password with a `/`, `?`, `@` or `:` in it, or a scheme with one slash, is covered whole;
/// - the value of every `password=PW` (any case, so `PGPASSWORD=` too; spaces around `=`
///   allowed), up to `&` or whitespace, or the quoted `'…'` value of a libpq keyword string.
pub fn password_spans(arg: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    // URLs: a scheme of two or more characters at the start of a word, then `:`.
    let mut i = 0;
    while i < arg.len() {
        let word_start = i == 0 || !scheme_char(arg[i - 1]);
        if !(word_start && arg[i].is_ascii_alphabetic()) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < arg.len() && scheme_char(arg[j]) {
            j += 1;
        }
        if j - i < 2 || arg.get(j) != Some(&b':') {
            i = j.max(i + 1);
            continue;
        }
        let mut auth = j + 1;
        while arg.get(auth) == Some(&b'/') {
            auth += 1;
        }
        let end = arg[auth..]
            .iter()
            .position(u8::is_ascii_whitespace)
            .map_or(arg.len(), |k| auth + k);
        if let Some(at) = arg[auth..end].iter().rposition(|&b| b == b'@')
            && let Some(colon) = arg[auth..auth + at].iter().position(|&b| b == b':')
        {
            out.push(auth + colon + 1..auth + at);
        }
        i = end;
    }
    // `password=` values.
    let lower = arg.to_ascii_lowercase();
    let mut from = 0;
    while let Some(k) = lower
        .get(from..)
        .and_then(|h| h.windows(8).position(|w| w == b"password"))
    {
        let mut v = from + k + 8;
        while arg.get(v).is_some_and(|&b| b == b' ' || b == b'\t') {
            v += 1;
        }
        if arg.get(v) != Some(&b'=') {
            from = from + k + 8;
            continue;
        }
        v += 1;
        while arg.get(v).is_some_and(|&b| b == b' ' || b == b'\t') {
            v += 1;
        }
        let end = if arg.get(v) == Some(&b'\'') {
            // libpq: a quoted value, `\'` and `\\` escaped inside.
            let mut e = v + 1;
            while e < arg.len() && arg[e] != b'\'' {
                e += if arg[e] == b'\\' { 2 } else { 1 };
            }
            (e + 1).min(arg.len())
        } else {
            arg[v..]
                .iter()
                .position(|&b| b == b'&' || b.is_ascii_whitespace())
                .map_or(arg.len(), |e| v + e)
        };
        if end > v {
            out.push(v..end);
        }
        from = end.max(from + k + 8);
    }
    out.sort_by_key(|r| r.start);
    // Disjoint: a `password=` inside a URL's masked userinfo merges with it.
    let mut merged: Vec<std::ops::Range<usize>> = Vec::with_capacity(out.len());
    for r in out {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// `text` with every password of [`password_spans`] taken out, not masked, so that what is
/// left still reads as a location: `scheme://user:PW@host` becomes `scheme://user@host`, and a
/// `password=PW` parameter goes with its `&` (or the `?` before it when it was alone).
pub fn without_password(text: &str) -> String {
    let mut out = text.to_string();
    for r in password_spans(text.as_bytes()).into_iter().rev() {
        let b = out.as_bytes();
        let (mut from, mut to) = (r.start, r.end);
        let before = out[..from].to_ascii_lowercase();
        let key = before.trim_end_matches([' ', '\t']);
        if let Some(key) = key.strip_suffix('=')
            && key.trim_end_matches([' ', '\t']).ends_with("password")
        {
            let k = key.trim_end_matches([' ', '\t']).len() - "password".len();
            from = k;
            if b.get(to) == Some(&b'&') {
                to += 1;
            } else if from > 0 && matches!(b[from - 1], b'&' | b'?') {
                from -= 1;
            }
        } else if from > 0 && b[from - 1] == b':' {
            from -= 1;
        }
        if out.is_char_boundary(from) && out.is_char_boundary(to) {
            out.replace_range(from..to, "");
        }
    }
    out
}

/// libpq's `.pgpass` format: `host:port:db:user:password`, `*` matches anything, `\:` and
/// `\\` escape; the first matching line wins.
fn pgpass_lookup(text: &str, host: &str, port: u16, db: &str, user: &str) -> Option<String> {
    let port = port.to_string();
    for line in text.lines() {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = Vec::new();
        let mut cur = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                }
                ':' if fields.len() < 4 => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        if fields.len() != 5 {
            continue;
        }
        let ok = |pat: &str, v: &str| pat == "*" || pat == v;
        let host_ok = ok(&fields[0], host)
            || (fields[0] == "localhost" && (host.starts_with('/') || host == "127.0.0.1"));
        if host_ok && ok(&fields[1], &port) && ok(&fields[2], db) && ok(&fields[3], user) {
            return Some(fields[4].clone());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn parse(s: &str) -> Result<StorageUrl, UrlError> {
        StorageUrl::parse(s, Path::new("/base"))
    }

    #[rstest]
    #[case("tune.db", "/base/tune.db")]
    #[case("/abs/x.db", "/abs/x.db")]
    #[case("sqlite:///rel/x.db", "/base/rel/x.db")]
    #[case("sqlite:////abs/x.db", "/abs/x.db")]
    #[case("sqlite:///Mixed/Case.db", "/base/Mixed/Case.db")]
    fn file_paths_and_sqlite_urls_name_a_sqlite_file(#[case] text: &str, #[case] path: &str) {
        assert_eq!(
            parse(text).unwrap(),
            StorageUrl::Sqlite(PathBuf::from(path))
        );
    }

    #[test]
    fn a_postgresql_url_keeps_every_part_and_never_shows_its_password() {
        let u = parse("postgresql://alice:s%40cret@db.example:6543/tune?sslmode=verify-full&application_name=x")
            .unwrap();
        let StorageUrl::Postgres(pg) = &u else {
            panic!("not postgres")
        };
        assert_eq!(pg.user, "alice");
        assert_eq!(pg.password().as_deref(), Some("s@cret"));
        assert_eq!((pg.host.as_str(), pg.port), ("db.example", 6543));
        assert_eq!(pg.dbname, "tune");
        assert_eq!(pg.sslmode, SslMode::VerifyFull);
        let shown = u.to_string();
        assert_eq!(
            shown,
            "postgresql://alice@db.example:6543/tune?sslmode=verify-full"
        );
        assert!(!format!("{u:?}").contains("cret"));
    }

    #[test]
    fn postgres_scheme_and_default_port_are_accepted() {
        let StorageUrl::Postgres(pg) = parse("postgres://bob@localhost/tune").unwrap() else {
            panic!()
        };
        assert_eq!((pg.port, pg.sslmode), (5432, SslMode::Prefer));
    }

    #[rstest]
    #[case("mysql://u:pw@h/db", "is not a storage tune knows")]
    #[case("postgresql://u:pw@h/db?sslmode=sometimes", "sslmode `sometimes`")]
    #[case("postgresql://u:pw@h:notaport/db", "not a valid URL")]
    #[case("postgresql://u:pw@h/", "names no database")]
    #[case("postgresql://u:pw@h/db?colour=blue", "unknown parameter `colour`")]
    #[case("sqlite://x.db", "sqlite:///relative")]
    #[case("", "empty")]
    fn bad_urls_are_refused_without_showing_the_password(#[case] text: &str, #[case] why: &str) {
        let e = parse(text).unwrap_err();
        let m = e.to_string();
        assert!(m.contains(why), "{m}");
        assert!(!m.contains(":pw@"), "{m}");
    }

    #[rstest]
    #[case("postgresql://u:pa/ss@h/db", "pa/ss")]
    #[case("postgresql://u:pa?ss@h/db", "pa?ss")]
    #[case("postgresql:/u:s3cret@h/db", "s3cret")]
    #[case("postgres:u:s3cret@h/db", "s3cret")]
    #[case("postgresql://u:s3cret@h:notaport/db", "s3cret")]
    #[case("host=h password=s3cret dbname=d", "s3cret")]
    #[case("host=h password = 's3 cret' dbname=d", "cret")]
    #[case("dbname=d PASSWORD=s3cret", "s3cret")]
    fn malformed_urls_and_keyword_strings_are_refused_without_their_password(
        #[case] text: &str,
        #[case] password: &str,
    ) {
        let m = parse(text)
            .map(|u| u.to_string())
            .unwrap_or_else(|e| e.to_string());
        assert!(!m.contains(password), "{m}");
        assert!(parse(text).is_err(), "{m}");
        assert!(!redact(text).contains(password), "{}", redact(text));
        assert!(!redact(&format!("error: `{text}`: bad")).contains(password));
    }

    #[test]
    fn an_at_sign_in_the_password_is_read_and_never_shown() {
        let u = parse("postgresql://u:p@ss@h/db").expect("a valid URL");
        let StorageUrl::Postgres(pg) = &u else {
            panic!("not postgres")
        };
        assert_eq!(pg.password().as_deref(), Some("p@ss"));
        assert!(!u.to_string().contains("p@ss"));
        assert_eq!(
            redact("x postgresql://u:p@ss@h/db y"),
            "x postgresql://u:***@h/db y"
        );
    }

    #[rstest]
    #[case("postgresql://u:pw@h:5/db", "postgresql://u@h:5/db")]
    #[case(
        "postgresql://u:p/w@h/db?sslmode=require",
        "postgresql://u@h/db?sslmode=require"
    )]
    #[case(
        "postgresql://u@h/db?password=pw&sslmode=require",
        "postgresql://u@h/db?sslmode=require"
    )]
    #[case(
        "postgresql://u@h/db?sslmode=require&password=pw",
        "postgresql://u@h/db?sslmode=require"
    )]
    #[case("postgresql://u@h/db?password=pw", "postgresql://u@h/db")]
    #[case(
        "storage = \"postgresql://u:pw@h/db\"",
        "storage = \"postgresql://u@h/db\""
    )]
    #[case("postgresql://u@h/db", "postgresql://u@h/db")]
    #[case("/a/tune.db", "/a/tune.db")]
    fn without_password_keeps_a_usable_location(#[case] text: &str, #[case] want: &str) {
        assert_eq!(without_password(text), want);
    }

    #[test]
    fn file_names_with_a_colon_or_an_equals_sign_stay_files() {
        for ok in ["./host=x.db", "a:b.db", "dir/x=1.db", "./postgresql:/x.db"] {
            assert!(matches!(parse(ok), Ok(StorageUrl::Sqlite(_))), "{ok}");
        }
    }

    #[test]
    fn redact_hides_passwords_in_the_authority_and_in_parameters() {
        assert_eq!(
            redact("postgresql://u:secret@h:5/db?password=x&sslmode=require"),
            "postgresql://u:***@h:5/db?password=***&sslmode=require"
        );
        assert_eq!(redact("/a/b.db"), "/a/b.db");
    }

    #[test]
    fn password_spans_cover_exactly_the_passwords_of_an_argument() {
        let arg = b"--db=postgresql://u:s3cr:t@h:5/db?password=x2&sslmode=require";
        let mut masked = arg.to_vec();
        for r in password_spans(arg) {
            for i in r {
                masked[i] = b'*';
            }
        }
        assert_eq!(
            String::from_utf8(masked).unwrap(),
            "--db=postgresql://u:******@h:5/db?password=**&sslmode=require"
        );
        assert!(password_spans(b"tune.db").is_empty());
        assert!(password_spans(b"postgresql://u@h/db").is_empty());
    }

    #[test]
    fn pgpass_lines_match_with_wildcards_and_escapes() {
        let text = "# comment\nother:5432:*:u:no\ndb.host:*:tune:u:p\\:w\n*:*:*:*:fallback\n";
        assert_eq!(
            pgpass_lookup(text, "db.host", 6000, "tune", "u").as_deref(),
            Some("p:w")
        );
        assert_eq!(
            pgpass_lookup(text, "elsewhere", 1, "x", "y").as_deref(),
            Some("fallback")
        );
        assert_eq!(pgpass_lookup("a:1:b:c:d\n", "z", 1, "b", "c"), None);
    }
}
