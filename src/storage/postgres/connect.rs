//! Connecting to a PostgreSQL server: the client configuration from a [`PgUrl`], TLS after
//! libpq's `sslmode` rules (rustls), the session settings that keep a study safe when a machine
//! is cut off, and the classification of errors into "try again" and "tell the user".

use std::error::Error as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls};

use crate::storage::ServerFault;
use crate::storage::url::{PasswordFrom, PgUrl, SslMode, passfile};

/// How long a connection attempt waits for the server before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Sent on every new session. A machine that is cut off mid-transaction must not keep the
/// study's proposal lock (or any row lock) for hours: the server drops such a session after
/// `idle_in_transaction_session_timeout`, and notices a silent peer within seconds through its
/// own keepalives and `tcp_user_timeout` rather than the kernel's two-hour default.
const SESSION_SETUP: &str = "SET idle_in_transaction_session_timeout = '60s';
     SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; SET tcp_keepalives_count = 3;
     SET tcp_user_timeout = 10000; SET TIME ZONE 'UTC'";

/// Why a connection could not be made or used.
#[derive(Debug)]
pub(crate) enum PgFault {
    /// Worth trying again: the server is unreachable, restarting, or the link dropped.
    Transient(String),
    /// The user must change something (password, database name, TLS settings, permissions).
    Refused(String),
}

impl PgFault {
    pub(crate) fn message(&self) -> &str {
        match self {
            PgFault::Transient(m) | PgFault::Refused(m) => m,
        }
    }

    /// What the fault is to the user: a server that may come back, or one that refused.
    pub(crate) fn fault(&self) -> ServerFault {
        match self {
            PgFault::Transient(_) => ServerFault::Unreachable,
            PgFault::Refused(_) => ServerFault::Refused,
        }
    }
}

/// Why the TLS settings an `sslmode` means could not be built; the connection is refused.
#[derive(Debug, thiserror::Error)]
enum TlsError {
    #[error("TLS: {0}")]
    Tls(String),
    #[error("sslrootcert `{file}` cannot be read: {source}", file = .file.display())]
    RootCertUnreadable {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("sslrootcert `{file}`: {reason}", file = .file.display())]
    RootCertRejected { file: PathBuf, reason: String },
    #[error("sslmode={0} needs trusted root certificates: none found (set sslrootcert=FILE)")]
    NoRootCertificates(&'static str),
}

/// The client side of `sslmode`: which TLS settings a mode means.
fn tls_config(url: &PgUrl) -> Result<rustls::ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Tls(e.to_string()))?;
    match url.sslmode {
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let mut roots = rustls::RootCertStore::empty();
            if let Some(file) = &url.sslrootcert {
                let pem = std::fs::read(file).map_err(|source| TlsError::RootCertUnreadable {
                    file: file.clone(),
                    source,
                })?;
                for cert in rustls_pemfile_certs(&pem) {
                    roots.add(cert).map_err(|e| TlsError::RootCertRejected {
                        file: file.clone(),
                        reason: e.to_string(),
                    })?;
                }
            } else {
                let found = rustls_native_certs::load_native_certs();
                for cert in found.certs {
                    let _ = roots.add(cert);
                }
            }
            if roots.is_empty() {
                return Err(TlsError::NoRootCertificates(url.sslmode.as_str()));
            }
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| TlsError::Tls(e.to_string()))?;
            if url.sslmode == SslMode::VerifyCa {
                // verify-ca: a trusted chain, whatever name the certificate carries.
                Ok(builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
                    .with_no_client_auth())
            } else {
                Ok(builder.with_webpki_verifier(verifier).with_no_client_auth())
            }
        }
        // prefer/require: encrypted, certificate unchecked, as libpq does.
        _ => Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
            .with_no_client_auth()),
    }
}

/// The certificates of a PEM file.
fn rustls_pemfile_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect()
}

/// `sslmode=require`/`prefer`: encryption without authentication of the server.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `sslmode=verify-ca`: the chain must lead to a trusted root; the name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Opens one session on `rt` (whose worker thread then drives the connection) and prepares it.
pub(crate) fn connect(rt: &tokio::runtime::Runtime, url: &PgUrl) -> Result<Client, PgFault> {
    let mut cfg = Config::new();
    cfg.user(&url.user)
        .dbname(&url.dbname)
        .port(url.port)
        .connect_timeout(url.connect_timeout.unwrap_or(CONNECT_TIMEOUT))
        .application_name(url.application_name.as_deref().unwrap_or("tune"))
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(5))
        .keepalives_interval(Duration::from_secs(2))
        .keepalives_retries(3)
        .tcp_user_timeout(Duration::from_secs(10));
    if let Some(p) = url.password() {
        cfg.password(p);
    }
    if url.is_socket() {
        cfg.host_path(&url.host);
    } else {
        cfg.host(&url.host);
    }
    let tls = if url.is_socket() || url.sslmode == SslMode::Disable {
        cfg.ssl_mode(tokio_postgres::config::SslMode::Disable);
        None
    } else {
        cfg.ssl_mode(if url.sslmode == SslMode::Prefer {
            tokio_postgres::config::SslMode::Prefer
        } else {
            tokio_postgres::config::SslMode::Require
        });
        Some(tls_config(url).map_err(|e| PgFault::Refused(e.to_string()))?)
    };
    let fut = async move {
        let client = match tls {
            None => {
                let (client, conn) = cfg.connect(NoTls).await?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                client
            }
            Some(tls) => {
                let (client, conn) = cfg
                    .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
                    .await?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                client
            }
        };
        client.batch_execute(SESSION_SETUP).await?;
        Ok::<_, tokio_postgres::Error>(client)
    };
    match futures::executor::block_on(rt.spawn(fut)) {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(classify(url, &e)),
        Err(join) => Err(PgFault::Transient(format!(
            "the connection task ended: {join}"
        ))),
    }
}

/// Whether an error is worth retrying after reconnecting, and what to tell the user.
pub(crate) fn classify(url: &PgUrl, e: &tokio_postgres::Error) -> PgFault {
    let at = if url.is_socket() {
        url.host.clone()
    } else {
        format!("{}:{}", url.host, url.port)
    };
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        let msg = db.message();
        return if *code == SqlState::INVALID_PASSWORD {
            PgFault::Refused(wrong_password(url, &at))
        } else if *code == SqlState::INVALID_CATALOG_NAME {
            PgFault::Refused(format!(
                "database `{}` does not exist at {at}; create it first (e.g. `createdb -h {} -p {} {}`)",
                url.dbname, url.host, url.port, url.dbname
            ))
        } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
            PgFault::Refused(format!("the server at {at} refused the connection: {msg}"))
        } else if code.code().starts_with("08")
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
            || *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
        {
            PgFault::Transient(format!("{at}: {msg}"))
        } else {
            PgFault::Refused(format!("{at}: {msg} (SQLSTATE {})", code.code()))
        };
    }
    let text = e.to_string();
    let cause = e.source().map(|s| s.to_string()).unwrap_or_default();
    // The client's own refusal to go on when the server asks for a password it does not have
    // (tokio-postgres has no error kind for it, only this text).
    if cause.contains("password missing") && url.password().is_none() {
        return PgFault::Refused(missing_password(url, &at));
    }
    if text.contains("TLS") {
        return if cause.contains("does not support TLS") {
            PgFault::Refused(format!(
                "the server at {at} does not offer TLS, but sslmode={} asks for it",
                url.sslmode.as_str()
            ))
        } else {
            PgFault::Refused(format!("TLS with the server at {at} failed: {cause}"))
        };
    }
    if e.is_closed()
        || e.source().is_some_and(|s| s.is::<std::io::Error>())
        || text.starts_with("error connecting")
        || text.starts_with("timeout")
        || text.starts_with("error communicating")
    {
        let why = if cause.is_empty() { text } else { cause };
        return PgFault::Transient(format!("cannot reach the PostgreSQL server at {at}: {why}"));
    }
    let full = if cause.is_empty() {
        text
    } else {
        format!("{text}: {cause}")
    };
    PgFault::Refused(format!("{at}: {full}"))
}

/// The server refused the password: say where it came from, so the user fixes the right place.
fn wrong_password(url: &PgUrl, at: &str) -> String {
    let from = match url.password_from().map(|(_, from)| from) {
        Some(PasswordFrom::Url) => "the password from the URL".to_string(),
        Some(PasswordFrom::Env) => "the password from PGPASSWORD".to_string(),
        Some(PasswordFrom::File(f)) => format!("the password from {}", f.display()),
        None => "no password".to_string(),
    };
    format!(
        "password authentication failed for user `{}` at {at}, with {from}: correct it there (tune takes the URL's password, else PGPASSWORD, else the matching line of ~/.pgpass or PGPASSFILE)",
        url.user
    )
}

/// The server asks for a password and none was found: say where tune looked and how to give one.
fn missing_password(url: &PgUrl, at: &str) -> String {
    let line = format!("{}:{}:{}:{}", url.host, url.port, url.dbname, url.user);
    let file = match passfile() {
        Some(f) if f.is_file() => format!("{} has no line for {line}", f.display()),
        Some(f) => format!("{} does not exist", f.display()),
        None => "there is no ~/.pgpass (HOME is not set)".to_string(),
    };
    format!(
        "the server at {at} asks for a password for user `{}`, and none was given: the URL has none, PGPASSWORD is not set, and {file}. Set PGPASSWORD, or add a line `{line}:PASSWORD` to ~/.pgpass (chmod 600; PGPASSFILE names another file); a password in the URL works too but shows in your shell's history",
        url.user
    )
}
