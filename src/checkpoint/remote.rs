//! Checkpoints in an object store (`checkpoint_dir = "s3://bucket/prefix"`, `gs://…`, `az://…`):
//! the copy that lets a trial resume on a machine that shares no filesystem with the one that
//! ran it.
//!
//! A trial never sees the store: it works in its local staging directory, and tune copies that
//! directory to `<url>/<study>/trial-NNNNN/` after each checkpoint ([`TrialStore::upload`]),
//! fetches it back before an attempt starts ([`TrialStore::fetch`]) and cleans it when the
//! trial ends ([`TrialStore::clean`]). The `trial.json` object says whose checkpoints they are,
//! as the owner file of a local directory does (`checkpoint::claim`): a fetch takes only the
//! copy of this very trial (study, first attempt, seed, params).
//!
//! What belongs here: the URL, the client (the `object_store` crate, credentials and endpoint
//! from the environment as its builders read them), the probe run before any trial, and the
//! copies both ways. What does not: when to copy (the scheduler), the local directory's owner
//! and clean-up (`checkpoint::claim`, `checkpoint::clean`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreScheme, RetryConfig};
use tokio::io::AsyncWriteExt;

use super::{CheckpointError, Keep, OWNER};

/// How long one request may take: a checkpoint goes up in parts of at most 10 MiB
/// (`object_store::buffered::BufWriter`), so this bounds a part, not a whole snapshot.
const REQUEST_TIMEOUT: &str = "120s";
/// An unreachable endpoint is told within seconds, not after the client's default of minutes.
const CONNECT_TIMEOUT: &str = "5s";
/// Retries of one request, and the time they may take in all: a transient fault is retried, a
/// store that is down makes the upload fail soon (the next checkpoint retries it).
const MAX_RETRIES: usize = 3;
const RETRY_TIMEOUT: Duration = Duration::from_secs(30);
/// Our own temporary files in a staging directory (a fetch in progress): never uploaded.
const FETCH_TMP: &str = ".tune-fetch.";

/// A checked object-store URL of `checkpoint_dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrl {
    /// As written, without a trailing `/`.
    text: String,
    url: url::Url,
    scheme: ObjectStoreScheme,
    /// The prefix inside the bucket or container (may be empty).
    prefix: Key,
}

/// The URL schemes this build reads as object stores.
pub const SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "azure", "abfs", "abfss"];

impl StoreUrl {
    /// Parses `s3://bucket/prefix`, `gs://bucket/prefix`, `az://container/prefix` (and
    /// `s3a`, `azure`, `abfs`, `abfss`); the refusal names the key and says what is wrong.
    pub fn parse(s: &str) -> Result<StoreUrl, CheckpointError> {
        let refuse = |why: String| CheckpointError(format!("trial.checkpoint_dir: {why}"));
        let text = s.trim_end_matches('/').to_string();
        let url = url::Url::parse(&text).map_err(|e| refuse(format!("{s:?} is not a URL: {e}")))?;
        if !SCHEMES.contains(&url.scheme()) {
            return Err(refuse(format!(
                "{s:?}: scheme {:?} is not an object store this build knows ({})",
                url.scheme(),
                SCHEMES.join(", ")
            )));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(refuse(format!("{s:?} names no bucket or container")));
        }
        let (scheme, prefix) =
            ObjectStoreScheme::parse(&url).map_err(|e| refuse(format!("{s:?}: {e}")))?;
        Ok(StoreUrl {
            text,
            url,
            scheme,
            prefix,
        })
    }

    /// The URL as written (no trailing `/`).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The URL of a trial's copy: `<url>/<study>/trial-NNNNN`.
    pub fn trial_url(&self, study: &str, first: u64) -> String {
        format!("{}/{}/trial-{first:05}", self.text, super::sanitize(study))
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// What went wrong with a store; the message names the URL, what tune was doing and the
/// cause.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The client could not be made (a setting of the environment it refused).
    #[error("{url}: cannot make a client: {source}")]
    Client {
        url: String,
        source: object_store::Error,
    },
    /// The store refused or did not answer a request.
    #[error("{url}: {doing}: {source}")]
    Store {
        url: String,
        doing: String,
        source: object_store::Error,
    },
    /// The probe read back something other than it wrote.
    #[error("{url}: the test object read back differs from the one written")]
    Garbled { url: String },
    /// The local staging directory.
    #[error("{}: {doing}: {source}", path.display())]
    Local {
        path: PathBuf,
        doing: &'static str,
        source: std::io::Error,
    },
}

/// An open store: one client for the whole study, shared by its trials.
#[derive(Debug, Clone)]
pub struct Store {
    url: StoreUrl,
    inner: Arc<dyn ObjectStore>,
}

impl Store {
    /// A client for `url`, configured from the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`
    /// as the crate's `from_env` builders read them). Makes no request.
    pub fn open(url: &StoreUrl) -> Result<Store, RemoteError> {
        let retry = RetryConfig {
            max_retries: MAX_RETRIES,
            retry_timeout: RETRY_TIMEOUT,
            ..RetryConfig::default()
        };
        let u = url.url.as_str();
        let (timeout, connect) = (ClientConfigKey::Timeout, ClientConfigKey::ConnectTimeout);
        // The three builders share their setters but no trait: one expansion each.
        macro_rules! build {
            ($builder:ty, $key:path) => {
                <$builder>::from_env()
                    .with_url(u)
                    .with_retry(retry)
                    .with_config($key(timeout), REQUEST_TIMEOUT)
                    .with_config($key(connect), CONNECT_TIMEOUT)
                    .build()
                    .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
            };
        }
        let built: object_store::Result<Arc<dyn ObjectStore>> = match url.scheme {
            ObjectStoreScheme::AmazonS3 => build!(
                object_store::aws::AmazonS3Builder,
                object_store::aws::AmazonS3ConfigKey::Client
            ),
            ObjectStoreScheme::GoogleCloudStorage => build!(
                object_store::gcp::GoogleCloudStorageBuilder,
                object_store::gcp::GoogleConfigKey::Client
            ),
            ObjectStoreScheme::MicrosoftAzure => build!(
                object_store::azure::MicrosoftAzureBuilder,
                object_store::azure::AzureConfigKey::Client
            ),
            // `StoreUrl::parse` lets only the schemes above through.
            _ => Err(object_store::Error::NotSupported {
                source: format!("scheme of {u}").into(),
            }),
        };
        built
            .map(|inner| Store {
                url: url.clone(),
                inner,
            })
            .map_err(|source| RemoteError::Client {
                url: url.text.clone(),
                source,
            })
    }

    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// Writes, reads back and deletes a small object under `<url>/<study>/`: a store that is
    /// unreachable, refuses our credentials or has no such bucket is told before any trial.
    pub async fn probe(&self, study: &str) -> Result<(), RemoteError> {
        let stamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let name = format!(".tune-probe-{}-{stamp}", std::process::id());
        let key = self
            .url
            .prefix
            .child(super::sanitize(study))
            .child(name.as_str());
        let at = format!("{}/{}/{name}", self.url, super::sanitize(study));
        let err = |doing: &str| {
            let (at, doing) = (at.clone(), doing.to_string());
            move |source| RemoteError::Store {
                url: at,
                doing,
                source,
            }
        };
        let body = format!("tune probe {stamp}");
        self.inner
            .put(&key, body.clone().into())
            .await
            .map_err(err("writing a test object"))?;
        let got = self
            .inner
            .get(&key)
            .await
            .map_err(err("reading the test object back"))?
            .bytes()
            .await
            .map_err(err("reading the test object back"))?;
        if got.as_ref() != body.as_bytes() {
            return Err(RemoteError::Garbled { url: at });
        }
        self.inner
            .delete(&key)
            .await
            .map_err(err("deleting the test object"))
    }

    /// The copy of the trial whose first attempt is `first`.
    pub fn trial(&self, study: &str, first: u64) -> TrialStore {
        TrialStore {
            inner: Arc::clone(&self.inner),
            prefix: self
                .url
                .prefix
                .child(super::sanitize(study))
                .child(format!("trial-{first:05}")),
            url: self.url.trial_url(study, first),
        }
    }
}

/// What a fetch found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetched {
    /// No copy of the trial (it never checkpointed, or its copy was cleaned).
    Nothing,
    /// A copy of another trial of the same name and number (a study deleted and run again):
    /// removed, and the trial starts from scratch.
    NotOurs,
    /// This trial's copy: `files` objects, `bytes` in all, now in the staging directory.
    Ours { files: usize, bytes: u64 },
}

/// When a local file was last uploaded as it is now: its length and modification time.
type Stamp = (u64, Option<SystemTime>);

/// One trial's copy, `<url>/<study>/trial-NNNNN/`.
#[derive(Debug, Clone)]
pub struct TrialStore {
    inner: Arc<dyn ObjectStore>,
    prefix: Key,
    url: String,
}

impl TrialStore {
    /// `<url>/<study>/trial-NNNNN`, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn err(&self, doing: impl Into<String>) -> impl FnOnce(object_store::Error) -> RemoteError {
        let (url, doing) = (self.url.clone(), doing.into());
        move |source| RemoteError::Store { url, doing, source }
    }

    async fn list(&self) -> Result<Vec<object_store::ObjectMeta>, RemoteError> {
        self.inner
            .list(Some(&self.prefix))
            .try_collect()
            .await
            .map_err(self.err("listing the trial's checkpoints"))
    }

    /// The objects of the copy and their bytes in all (`tune show`).
    pub async fn usage(&self) -> Result<(usize, u64), RemoteError> {
        let objects = self.list().await?;
        Ok((objects.len(), objects.iter().map(|o| o.size).sum()))
    }

    /// Fetches the copy into `dir` when its owner object is `owner`: files missing there, or
    /// older there than in the store (a local file newer than its object is an upload that did
    /// not finish, on this very machine: it stays). A copy of another owner is removed. What
    /// came down is recorded in `sent`, as already in the store.
    pub async fn fetch(
        &self,
        dir: &Path,
        owner: &str,
        sent: &mut Uploaded,
    ) -> Result<Fetched, RemoteError> {
        let key = self.prefix.child(OWNER);
        let theirs = match self.inner.get(&key).await {
            Ok(g) => g.bytes().await.map_err(self.err("reading its owner"))?,
            Err(object_store::Error::NotFound { .. }) => return Ok(Fetched::Nothing),
            Err(e) => return Err(self.err("reading its owner")(e)),
        };
        if theirs.as_ref() != owner.as_bytes() {
            self.delete_all(|_| true).await?;
            return Ok(Fetched::NotOurs);
        }
        let (mut files, mut bytes) = (0, 0);
        for meta in self.list().await? {
            let Some(rel) = self.relative(&meta.location) else {
                continue;
            };
            let path = dir.join(&rel);
            let local = std::fs::metadata(&path)
                .ok()
                .and_then(|m| m.modified().ok());
            if local.is_some_and(|t| t >= SystemTime::from(meta.last_modified)) {
                continue;
            }
            self.download(&meta.location, &path).await?;
            if rel != OWNER
                && let Ok(m) = std::fs::metadata(&path)
            {
                sent.files.insert(rel, (m.len(), m.modified().ok()));
            }
            files += 1;
            bytes += meta.size;
        }
        sent.owner = true;
        Ok(Fetched::Ours { files, bytes })
    }

    /// Downloads every object of the copy but its owner into `dir`, comparing and removing
    /// nothing (a child of population-based training starts from its parent's copy, which
    /// stays the parent's). Returns the files and bytes.
    pub async fn download_all(&self, dir: &Path) -> Result<(usize, u64), RemoteError> {
        let (mut files, mut bytes) = (0, 0);
        for meta in self.list().await? {
            let Some(rel) = self.relative(&meta.location) else {
                continue;
            };
            if rel == OWNER {
                continue;
            }
            self.download(&meta.location, &dir.join(&rel)).await?;
            files += 1;
            bytes += meta.size;
        }
        Ok((files, bytes))
    }

    /// One object to `path`, through a temporary file renamed at the end: a fetch cut short
    /// leaves no half file where the trial would read it.
    async fn download(&self, key: &Key, path: &Path) -> Result<(), RemoteError> {
        let local = |doing: &'static str| {
            let path = path.to_path_buf();
            move |source| RemoteError::Local {
                path,
                doing,
                source,
            }
        };
        let parent = path.parent().unwrap_or(Path::new("."));
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(local("creating the staging directory"))?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let tmp = parent.join(format!("{FETCH_TMP}{name}"));
        let mut stream = self
            .inner
            .get(key)
            .await
            .map_err(self.err(format!("fetching {key}")))?
            .into_stream();
        let mut file = tokio::fs::File::create(&tmp)
            .await
            .map_err(local("writing a fetched checkpoint"))?;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(self.err(format!("fetching {key}")))?;
            file.write_all(&chunk)
                .await
                .map_err(local("writing a fetched checkpoint"))?;
        }
        file.sync_all()
            .await
            .map_err(local("writing a fetched checkpoint"))?;
        tokio::fs::rename(&tmp, path)
            .await
            .map_err(local("writing a fetched checkpoint"))
    }

    /// Uploads what changed in `dir` since the last upload (`sent` remembers it), and the
    /// owner object the first time. Each object is replaced whole (an object store's PUT,
    /// or a multipart upload, is atomic): a reader sees the old checkpoint or the new one.
    /// Returns how many files went up.
    pub async fn upload(
        &self,
        dir: &Path,
        owner: &str,
        sent: &mut Uploaded,
    ) -> Result<usize, RemoteError> {
        if !sent.owner {
            self.inner
                .put(&self.prefix.child(OWNER), owner.to_string().into())
                .await
                .map_err(self.err("writing its owner"))?;
            sent.owner = true;
        }
        let mut n = 0;
        let local = local_files(dir).map_err(|source| RemoteError::Local {
            path: dir.to_path_buf(),
            doing: "reading the staging directory",
            source,
        })?;
        let here: std::collections::BTreeSet<String> =
            local.iter().map(|(rel, _)| rel.clone()).collect();
        for (rel, stamp) in local {
            if sent.files.get(&rel) == Some(&stamp) {
                continue;
            }
            self.put_file(&dir.join(&rel), &rel).await?;
            sent.files.insert(rel, stamp);
            n += 1;
        }
        // What the trial removed since (an older checkpoint past `keep_last`) goes from the
        // copy too, so the store holds what the staging directory holds, not every save.
        let gone: Vec<String> = sent
            .files
            .keys()
            .filter(|rel| !here.contains(*rel))
            .cloned()
            .collect();
        for rel in gone {
            match self.inner.delete(&self.key(&rel)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.err("removing a checkpoint the trial removed")(e)),
            }
            sent.files.remove(&rel);
        }
        Ok(n)
    }

    /// The object of the file at `rel` (relative to the staging directory, `/` between parts).
    fn key(&self, rel: &str) -> object_store::path::Path {
        rel.split('/')
            .fold(self.prefix.clone(), |k, part| k.child(part))
    }

    async fn put_file(&self, path: &Path, rel: &str) -> Result<(), RemoteError> {
        let key = self.key(rel);
        let local = |source| RemoteError::Local {
            path: path.to_path_buf(),
            doing: "reading a checkpoint to upload",
            source,
        };
        let mut file = tokio::fs::File::open(path).await.map_err(local)?;
        let mut w = object_store::buffered::BufWriter::new(Arc::clone(&self.inner), key);
        let copied = tokio::io::copy(&mut file, &mut w).await;
        match copied {
            Ok(_) => w
                .shutdown()
                .await
                .map_err(|e| self.io_err(format!("uploading {rel}"), e)),
            Err(e) => {
                let _ = w.abort().await;
                Err(self.io_err(format!("uploading {rel}"), e))
            }
        }
    }

    /// An upload's `std::io::Error`: the store's own error where it carries one.
    fn io_err(&self, doing: String, e: std::io::Error) -> RemoteError {
        let source = match e.downcast::<object_store::Error>() {
            Ok(source) => source,
            Err(e) => object_store::Error::Generic {
                store: "upload",
                source: Box::new(e),
            },
        };
        RemoteError::Store {
            url: self.url.clone(),
            doing,
            source,
        }
    }

    /// Cleans the copy of a trial that ended for good, as `checkpoint::clean` does the local
    /// directory: nothing stays, or (with [`Keep::Best`]) the best checkpoint and the owner,
    /// uploaded from `dir` first if it changed there (the local clean may have made the latest
    /// the best).
    pub async fn clean(
        &self,
        dir: &Path,
        keep: Keep,
        sent: &mut Uploaded,
    ) -> Result<(), RemoteError> {
        if keep == Keep::Best {
            let best = dir.join(super::BEST);
            if let Ok(m) = std::fs::metadata(&best) {
                let stamp = (m.len(), m.modified().ok());
                if sent.files.get(super::BEST) != Some(&stamp) {
                    self.put_file(&best, super::BEST).await?;
                    sent.files.insert(super::BEST.to_string(), stamp);
                }
            }
            return self
                .delete_all(|rel| rel != super::BEST && rel != OWNER)
                .await;
        }
        self.delete_all(|_| true).await
    }

    async fn delete_all(&self, which: impl Fn(&str) -> bool) -> Result<(), RemoteError> {
        for meta in self.list().await? {
            if self.relative(&meta.location).is_some_and(|r| which(&r)) {
                self.inner
                    .delete(&meta.location)
                    .await
                    .map_err(self.err(format!("deleting {}", meta.location)))?;
            }
        }
        Ok(())
    }

    /// An object's path below the trial's prefix (`latest.snap`, `sub/x.pt`), decoded; `None`
    /// for anything that is not below it or would leave the staging directory.
    fn relative(&self, key: &Key) -> Option<String> {
        let parts: Vec<String> = key
            .prefix_match(&self.prefix)?
            .map(|p| {
                percent_encoding::percent_decode_str(p.as_ref())
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .collect();
        let safe = !parts.is_empty()
            && parts
                .iter()
                .all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains(['/', '\\']));
        safe.then(|| parts.join("/"))
    }
}

/// What a trial's uploads have sent so far (its uploader keeps one).
#[derive(Debug, Default)]
pub struct Uploaded {
    owner: bool,
    files: HashMap<String, Stamp>,
}

/// The files under `dir` (recursively), by their path relative to it with `/` between parts,
/// and their stamps; not the owner file (the owner object is tune's) nor temporary files (a
/// fetch's, the trainer's `.latest.snap.tmp.N`, any `*.tmp`). A directory that is not there has none.
fn local_files(dir: &Path) -> std::io::Result<Vec<(String, Stamp)>> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, Stamp)>) -> std::io::Result<()> {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let meta = entry.metadata()?;
            if meta.is_dir() {
                walk(&entry.path(), &path, out)?;
            } else if meta.is_file()
                && !name.starts_with(FETCH_TMP)
                // The trainer's snapshot being written (`.latest.snap.tmp.N`), renamed when done.
                && !name.contains(".snap.tmp")
                // A script's file being written (`state.json.tmp`, docs/command-trials.md).
                && !name.ends_with(".tmp")
                && path != OWNER
            {
                out.push((path, (meta.len(), meta.modified().ok())));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out)?;
    out.sort();
    Ok(out)
}

/// Runs `f` on a runtime of its own, for a command that is not async itself (`tune show`,
/// `tune delete`) and talks to a store once.
pub fn block_on<T>(
    f: impl std::future::Future<Output = Result<T, RemoteError>>,
) -> Result<T, RemoteError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| RemoteError::Local {
            path: PathBuf::from("."),
            doing: "starting the runtime",
            source,
        })?
        .block_on(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_store_urls_parse_and_others_are_refused_saying_why() {
        let u = StoreUrl::parse("s3://bucket/ckpt/").expect("parses");
        assert_eq!(u.as_str(), "s3://bucket/ckpt");
        assert_eq!(u.trial_url("a/b", 7), "s3://bucket/ckpt/a_b/trial-00007");
        for ok in [
            "gs://b",
            "az://container/p",
            "abfss://c@acct.dfs.core.windows.net/p",
        ] {
            StoreUrl::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, why) in [
            ("ftp://h/x", "not an object store"),
            ("s3:///x", "names no bucket"),
        ] {
            let e = StoreUrl::parse(bad).expect_err(bad).to_string();
            assert!(
                e.starts_with("trial.checkpoint_dir: ") && e.contains(why),
                "{bad}: {e}"
            );
        }
    }

    /// The in-memory store stands in for a real one here; tests/cli/checkpoint_store.rs runs
    /// real studies against an S3 server.
    #[tokio::test]
    async fn a_copy_goes_up_changed_files_only_comes_back_for_its_owner_and_is_cleaned() {
        let store = TrialStore {
            inner: Arc::new(object_store::memory::InMemory::new()),
            prefix: Key::from("ck/study/trial-00001"),
            url: "mem://ck/study/trial-00001".into(),
        };
        let a = tempfile::tempdir().expect("tempdir");
        std::fs::write(a.path().join(super::super::LATEST), b"epoch 1").expect("write");
        std::fs::create_dir(a.path().join("sub")).expect("mkdir");
        std::fs::write(a.path().join("sub/x.pt"), b"x").expect("write");
        std::fs::write(a.path().join(OWNER), b"local owner").expect("write");
        let mut sent = Uploaded::default();
        assert_eq!(store.upload(a.path(), "me", &mut sent).await.unwrap(), 2);
        assert_eq!(store.upload(a.path(), "me", &mut sent).await.unwrap(), 0);
        std::fs::write(a.path().join(super::super::LATEST), b"epoch 2!").expect("write");
        assert_eq!(store.upload(a.path(), "me", &mut sent).await.unwrap(), 1);
        assert_eq!(store.usage().await.unwrap(), (3, 8 + 1 + 2));
        // A file the trial removed (an older checkpoint past `keep_last`) leaves the copy.
        std::fs::write(a.path().join("step-000000000001.snap"), b"old").expect("write");
        assert_eq!(store.upload(a.path(), "me", &mut sent).await.unwrap(), 1);
        assert_eq!(store.usage().await.unwrap(), (4, 8 + 1 + 2 + 3));
        std::fs::remove_file(a.path().join("step-000000000001.snap")).expect("rm");
        assert_eq!(store.upload(a.path(), "me", &mut sent).await.unwrap(), 0);
        assert_eq!(store.usage().await.unwrap(), (3, 8 + 1 + 2));

        // Another machine: an empty staging directory gets the copy, owner included.
        let b = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            store
                .fetch(b.path(), "me", &mut Uploaded::default())
                .await
                .unwrap(),
            Fetched::Ours {
                files: 3,
                bytes: 11
            }
        );
        let read = |p: &str| std::fs::read_to_string(b.path().join(p)).expect("read");
        assert_eq!(read(super::super::LATEST), "epoch 2!");
        assert_eq!(read("sub/x.pt"), "x");
        assert_eq!(read(OWNER), "me");
        // Fetched again, nothing is newer in the store.
        assert_eq!(
            store
                .fetch(b.path(), "me", &mut Uploaded::default())
                .await
                .unwrap(),
            Fetched::Ours { files: 0, bytes: 0 }
        );

        // Keep the best: the latest made the best locally goes up, the rest goes.
        std::fs::rename(
            a.path().join(super::super::LATEST),
            a.path().join(super::super::BEST),
        )
        .expect("rename");
        store.clean(a.path(), Keep::Best, &mut sent).await.unwrap();
        assert_eq!(store.usage().await.unwrap(), (2, 8 + 2));
        // Someone else's copy is removed, not fetched.
        let c = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            store
                .fetch(c.path(), "other", &mut Uploaded::default())
                .await
                .unwrap(),
            Fetched::NotOurs
        );
        assert_eq!(store.usage().await.unwrap(), (0, 0));
        assert_eq!(
            store
                .fetch(c.path(), "other", &mut Uploaded::default())
                .await
                .unwrap(),
            Fetched::Nothing
        );
        assert!(std::fs::read_dir(c.path()).expect("dir").next().is_none());
    }
}
