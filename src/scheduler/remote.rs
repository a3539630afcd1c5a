//! A trial's copy of its checkpoints in an object store, over one run of the trial: fetched
//! before the run starts, uploaded after each checkpoint the trial reports (on a task of its
//! own, one upload at a time, the newest checkpoint winning), cleaned when the trial ended for
//! good. The copying itself is `checkpoint::remote`; this file decides when.
//!
//! Nothing here fails the trial or the study: a store that is down is told to the user
//! (`crate::notice`) naming `trial.checkpoint_dir`, the URL and the cause, and the trial goes
//! on; the next checkpoint retries the upload.

use std::path::{Path, PathBuf};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::checkpoint::Keep;
use crate::checkpoint::remote::{Fetched, RemoteError, TrialStore, Uploaded};
use crate::runner::{RunEnd, StopRequest};
use crate::trial::TrialNumber;

/// One run's copy: what it needs before it starts.
pub(super) struct TrialCopy {
    pub store: TrialStore,
    /// The staging directory (the trial's `TUNE_CHECKPOINT_DIR`).
    pub dir: PathBuf,
    /// `checkpoint::owner` of the trial.
    pub owner: String,
    pub keep: Keep,
    pub number: TrialNumber,
    /// A builtin trial's runner cleans the staging directory itself when the trial ended for
    /// good, and keeps it when its worker died (for a next attempt): the copy does the same.
    pub runner_cleans: bool,
}

/// A running trial's uploader.
pub(super) struct Uploads {
    /// Bumped at each checkpoint; the task uploads once per change it sees, so checkpoints that
    /// come during an upload make one upload after it, of the newest.
    wake: watch::Sender<u64>,
    task: JoinHandle<Uploaded>,
    copy: TrialCopy,
    /// The fetch failed and the staging directory holds no checkpoint: the run starts from
    /// scratch, and its curve must keep nothing of the earlier attempts.
    pub from_scratch: bool,
}

impl TrialCopy {
    fn tell(&self, what: String) {
        crate::notice::tell(format!("trial {}: {what}", self.number.0));
    }

    /// Fetches the copy into the staging directory (see `TrialStore::fetch`), then starts the
    /// uploader. A failed fetch leaves the run with what the directory holds.
    pub async fn start(self) -> Uploads {
        let mut sent = Uploaded::default();
        let mut from_scratch = false;
        match self.store.fetch(&self.dir, &self.owner, &mut sent).await {
            Ok(Fetched::Ours { files, bytes }) if files > 0 => self.tell(format!(
                "fetched {files} checkpoint file(s), {}, from {} into {}",
                crate::checkpoint::fmt_bytes(bytes),
                self.store.url(),
                self.dir.display()
            )),
            Ok(_) => {}
            Err(e) => {
                // `runner_cleans` is true of builtin trials, whose snapshots alone count.
                let holds = crate::checkpoint::holds_checkpoint(&self.dir, self.runner_cleans);
                from_scratch = !holds;
                self.tell(fetch_failed(&e, &self.dir, holds));
            }
        }
        let (wake, mut woken) = watch::channel(0u64);
        let (store, dir, owner, number) = (
            self.store.clone(),
            self.dir.clone(),
            self.owner.clone(),
            self.number,
        );
        let task = tokio::spawn(async move {
            let mut failing = false;
            while woken.changed().await.is_ok() {
                match store.upload(&dir, &owner, &mut sent).await {
                    Ok(_) if failing => {
                        failing = false;
                        crate::notice::tell(format!(
                            "trial {}: its checkpoints go up to {} again",
                            number.0,
                            store.url()
                        ));
                    }
                    Ok(_) => {}
                    // Said once for a run of failures (a store down for an hour would say it
                    // at every checkpoint of every trial otherwise), and again when it is over.
                    Err(_) if failing => {}
                    Err(e) => {
                        failing = true;
                        crate::notice::tell(format!(
                            "trial {}: cannot upload its checkpoint (trial.checkpoint_dir): {e}; the trial goes on, and each checkpoint tries again (said once until an upload succeeds)",
                            number.0
                        ));
                    }
                }
            }
            sent
        });
        Uploads {
            wake,
            task,
            copy: self,
            from_scratch,
        }
    }
}

/// What a run is told when its copy cannot be fetched: the cause, and what it runs from, said
/// for this run (`holds`: whether its staging directory `dir` holds a checkpoint here), never
/// left for the user to guess.
fn fetch_failed(e: &RemoteError, dir: &Path, holds: bool) -> String {
    let from = if holds {
        format!("it runs from what {} holds", dir.display())
    } else {
        format!(
            "it starts from scratch: {} holds no checkpoint on this machine",
            dir.display()
        )
    };
    format!("cannot fetch its checkpoints (trial.checkpoint_dir): {e}; {from}")
}

impl Uploads {
    /// The trial saved a checkpoint: upload it (after the upload under way, if any).
    pub fn checkpointed(&self) {
        self.wake.send_modify(|n| *n += 1);
    }

    /// The run ended as `end`, asked to stop as `asked`: waits for the last upload; then a
    /// trial that ended for good (finished, failed, pruned, cancelled) has its copy cleaned as
    /// `keep_checkpoints` says, and one that may run again (interrupted, or a builtin trial
    /// whose worker died and left its checkpoints) gets a last upload of what its staging
    /// directory holds.
    pub async fn finish(self, end: &RunEnd, asked: StopRequest) {
        let Uploads {
            wake, task, copy, ..
        } = self;
        drop(wake);
        let mut sent = task.await.unwrap_or_default();
        let ended = match end {
            RunEnd::Finished | RunEnd::Failed { .. } => true,
            RunEnd::Stopped => matches!(asked, StopRequest::Prune | StopRequest::Cancel),
        };
        // The runner's clean-up leaves no latest snapshot (removed, or made the best).
        let kept_locally = copy.runner_cleans && copy.dir.join(crate::checkpoint::LATEST).exists();
        let for_good = ended && !kept_locally;
        let done = if for_good {
            copy.store
                .clean(&copy.dir, copy.keep, &mut sent)
                .await
                .map(|()| 0)
        } else {
            copy.store.upload(&copy.dir, &copy.owner, &mut sent).await
        };
        if let Err(e) = done {
            copy.tell(format!(
                "cannot {} its checkpoints (trial.checkpoint_dir): {e}",
                if for_good { "clean up" } else { "upload" }
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_fetch_says_whether_the_run_resumes_from_its_staging_directory_or_from_scratch() {
        let e = RemoteError::Garbled {
            url: "s3://b/p/st/trial-00000".into(),
        };
        let dir = Path::new("/runs/st/trial-00000/checkpoints");
        let head = "cannot fetch its checkpoints (trial.checkpoint_dir): s3://b/p/st/trial-00000: the test object read back differs from the one written; ";
        assert_eq!(
            fetch_failed(&e, dir, true),
            format!("{head}it runs from what {} holds", dir.display())
        );
        assert_eq!(
            fetch_failed(&e, dir, false),
            format!(
                "{head}it starts from scratch: {} holds no checkpoint on this machine",
                dir.display()
            )
        );
    }
}
