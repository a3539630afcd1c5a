//! The protocol between the orchestrator and a `tune-worker` process: the one definition both
//! ends use (`runner::worker::WorkerRunner` on the orchestrator's side, the worker's main loop
//! in the `tune-train` crate on the other), so neither can drift from the other.
//!
//! What belongs here: the messages and their encoding. What does not: spawning, timeouts and
//! the trial's end (`runner::worker`), training (`tune-train`).
//!
//! # JSON lines
//! Orchestrator → worker, on the worker's stdin:
//! - `{"type":"job","number":N,"seed":S,"params":{…},"trial":{…BuiltinTrial…},"log":"…"}`
//!   A job may also carry `"checkpoint":{…CheckpointJob…}` (absent: no checkpoints, as
//!   before): the trial's checkpoint directory, whether to resume from what it holds, the
//!   period of mid-epoch checkpoints, the objective whose best checkpoint is kept and whether
//!   to keep that one when the trial ends.
//! - `{"type":"stop"}`: end the running trial at the next step boundary.
//! - `{"type":"checkpoint"}`: save a checkpoint of the running trial at the next step
//!   boundary (a worker about to be preempted); ignored when its job has no `checkpoint`.
//!
//! Worker → orchestrator, on the worker's stdout (its only use: the worker moves whatever
//! libtorch prints to stdout onto stderr, which goes to the trial's log file):
//! - `{"type":"report","step":N,"metrics":{"val_loss":0.4,…}}` (a non-finite metric is
//!   `null`, read back as NaN). `step` counts optimizer steps; among the metrics, `epoch`,
//!   `total_epochs` and `progress` say how far the run is, the same keys a command trial may
//!   send (`tui::state::keys`), so the UI draws both alike.
//! - `{"type":"checkpoint","step":N,"path":"…/latest.snap","best":false}`: a checkpoint of
//!   the trial at step N is on disk (written atomically), the equivalent of a command trial's
//!   `tune: {"checkpoint": true, "step": N}`; `best`: it is also the trial's best so far.
//!   Checkpoints come at every epoch's end, every `every_s` seconds within an epoch, and on a
//!   `checkpoint` request. The worker removes them when the trial finishes or fails (keeping
//!   the best with `keep_best`) and leaves them when it is stopped, which may be a pause.
//! - `{"type":"end","status":"finished"|"stopped"|"failed","reason":"…"}`
//!
//! The worker exits when its stdin closes, so it never outlives the orchestrator.
//!
//! # Capabilities
//! `tune-worker --capabilities` prints one [`Capabilities`] line and exits: `tune run` asks it
//! before a builtin study on CUDA starts, so that a worker built without CUDA is refused up
//! front instead of failing every trial.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::builtin::BuiltinTrial;
use crate::space::Params;
use crate::trial::Direction;

/// Where and how a builtin trial keeps its checkpoints (trial snapshots).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointJob {
    /// The trial's checkpoint directory, the same across its attempts.
    pub dir: PathBuf,
    /// Continue from the latest checkpoint in `dir` (falling back to the best when the
    /// latest is unreadable, to the start when there is none).
    #[serde(default)]
    pub resume: bool,
    /// Seconds between checkpoints within an epoch (besides one at every epoch's end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_s: Option<f64>,
    /// Keep the best checkpoint when the trial ends.
    #[serde(default)]
    pub keep_best: bool,
    /// How many of the most recent checkpoints stay while it runs (`[trial] keep_last`).
    #[serde(default = "one")]
    pub keep_last: u32,
    /// The report metric that judges the best checkpoint.
    #[serde(default = "default_metric")]
    pub metric: String,
    #[serde(default)]
    pub direction: Direction,
}

fn one() -> u32 {
    1
}

fn default_metric() -> String {
    "val_loss".into()
}

/// A message to the worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ToWorker {
    Job {
        number: u64,
        /// The study seed; the worker mixes in the trial number (`builtin::trial_seed`), or
        /// `seed_number` where given.
        seed: u64,
        /// The number whose seed the trial trains with: its first attempt's, so that every
        /// attempt at the same params draws the same (`None`: `number`, what an older
        /// orchestrator sends).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seed_number: Option<u64>,
        params: Params,
        trial: Box<BuiltinTrial>,
        /// The trial's log file: the worker sends its stderr there while the trial runs.
        log: PathBuf,
        /// Checkpoints of this trial; `None`: none (what an older orchestrator sends).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkpoint: Option<CheckpointJob>,
    },
    Stop,
    /// Save a checkpoint at the next step boundary.
    Checkpoint,
}

/// How the worker ended a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndStatus {
    Finished,
    Stopped,
    Failed,
}

/// A message from the worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum FromWorker {
    Report {
        step: u64,
        /// `None` stands for a non-finite value, which JSON cannot carry.
        metrics: BTreeMap<String, Option<f64>>,
    },
    /// A checkpoint is on disk.
    Checkpoint {
        step: u64,
        path: PathBuf,
        #[serde(default)]
        best: bool,
    },
    End {
        status: EndStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// What a `tune-worker` binary can do, printed as one JSON line by `tune-worker --capabilities`:
/// `{"cuda":false,"cuda_devices":0}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Built with `--features tune-train/cuda` (linked against libtorch_cuda).
    pub cuda: bool,
    /// The CUDA devices libtorch sees (0 without CUDA, or when the driver is missing or too
    /// old for the CUDA libtorch).
    pub cuda_devices: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_back_as_the_protocol_documents_them() {
        let stop: ToWorker = serde_json::from_str(r#"{"type":"stop"}"#).expect("stop parses");
        assert!(matches!(stop, ToWorker::Stop));
        let line = serde_json::to_string(&FromWorker::Report {
            step: 3,
            metrics: [("val_loss".to_string(), None)].into_iter().collect(),
        })
        .expect("encodes");
        assert_eq!(
            line,
            r#"{"type":"report","step":3,"metrics":{"val_loss":null}}"#
        );
        let end: FromWorker =
            serde_json::from_str(r#"{"type":"end","status":"failed","reason":"diverged"}"#)
                .expect("end parses");
        assert!(matches!(
            end,
            FromWorker::End {
                status: EndStatus::Failed,
                reason: Some(ref r),
            } if r == "diverged"
        ));
    }

    #[test]
    fn checkpoint_messages_read_back_and_a_job_without_them_still_parses() {
        let now: ToWorker =
            serde_json::from_str(r#"{"type":"checkpoint"}"#).expect("checkpoint parses");
        assert!(matches!(now, ToWorker::Checkpoint));
        let line = serde_json::to_string(&FromWorker::Checkpoint {
            step: 120,
            path: PathBuf::from("/c/latest.snap"),
            best: true,
        })
        .expect("encodes");
        assert_eq!(
            line,
            r#"{"type":"checkpoint","step":120,"path":"/c/latest.snap","best":true}"#
        );
        let job = CheckpointJob {
            dir: PathBuf::from("/c"),
            resume: true,
            every_s: Some(600.0),
            keep_best: false,
            keep_last: 3,
            metric: "val_acc".into(),
            direction: Direction::Maximize,
        };
        let back: CheckpointJob =
            serde_json::from_str(&serde_json::to_string(&job).expect("encodes")).expect("parses");
        assert_eq!(back, job);
        // Only the directory is required: the rest has defaults.
        let least: CheckpointJob = serde_json::from_str(r#"{"dir":"/c"}"#).expect("parses");
        assert_eq!(
            least,
            CheckpointJob {
                dir: PathBuf::from("/c"),
                resume: false,
                every_s: None,
                keep_best: false,
                keep_last: 1,
                metric: "val_loss".into(),
                direction: Direction::Minimize,
            }
        );
    }

    #[test]
    fn capabilities_read_back_from_one_json_line() {
        let c: Capabilities =
            serde_json::from_str(r#"{"cuda":true,"cuda_devices":2}"#).expect("parses");
        assert_eq!(
            c,
            Capabilities {
                cuda: true,
                cuda_devices: 2
            }
        );
        assert!(serde_json::from_str::<Capabilities>(r#"{"cuda":true}"#).is_err());
    }
}
