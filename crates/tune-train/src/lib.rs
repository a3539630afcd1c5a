//! The built-in libtorch trainer: the training run a worker process performs for one trial of a
//! builtin study, from the [`BuiltinTrial`](tune::builtin::BuiltinTrial) the orchestrator
//! checked and the trial's params.
//!
//! What belongs here: everything that needs libtorch: models, data loading and batching, mixed
//! precision, optimizers, schedules and the training loop. What does not: the study keys of a
//! builtin trial and their validation (`builtin`), processes and the protocol between
//! orchestrator and worker (`runner`), scheduling, storage.
//!
//! # Reported metrics
//! Each report's `step` is the number of optimizer steps taken so far; its metrics:
//! `epoch` (fractional), `train_loss` (mean over the steps since the last report), `val_loss`,
//! `val_acc` (accuracy, or next-token accuracy for a language model), `samples_per_s`
//! (training samples per second of training time since the last report, evaluation
//! excluded), `data_wait` (fraction of that training time spent waiting for a batch; for a
//! streamed batch on CUDA, until its copy to the device is done), `lr`
//! (the learning rate of the last step), `skipped_steps` (fp16 steps skipped for non-finite
//! gradients) and `peak_mem_mb` (the worker's peak resident memory on the CPU; on CUDA the
//! caching allocator's peak allocation during the trial, as `torch.cuda.max_memory_allocated`).
//! On CUDA, `samples_per_s` is timed after a device sync at each report, so steps still queued
//! on the GPU count in the interval that launched them.

pub mod bench;
pub mod checkpoint;
pub mod cpu;
pub mod cuda;
pub mod cuda_copy;
pub mod data;
pub mod fit;
pub mod graph;
pub mod loss_book;
pub mod memory;
pub mod models;
pub mod optim;
pub mod precision;
pub mod schedule;
pub mod snapshot;
pub mod stream;
pub mod stream_bench;
pub mod worker;

pub use fit::{Checkpoints, TrainError, TrainEvent, train, train_with_checkpoints};

/// A small trial's settings for the unit tests (an MLP of width 16 on batches of 8, SGD at lr
/// 0.1, fp32, one epoch): each test changes what it is about with struct-update syntax.
#[cfg(test)]
pub(crate) fn test_hyper() -> tune::builtin::Hyper {
    use tune::builtin::{Amp, Hyper, LrScaling, ModelKind, OptimizerKind, ScheduleKind};
    Hyper {
        model: ModelKind::Mlp,
        lr: 0.1,
        optimizer: OptimizerKind::Sgd,
        momentum: 0.0,
        nesterov: false,
        weight_decay: 0.0,
        batch_size: 8,
        accumulation: 1,
        amp: Amp::Off,
        schedule: ScheduleKind::Constant,
        warmup: 0.0,
        lr_scaling: LrScaling::None,
        reference_batch: 256,
        clip_grad: 0.0,
        epochs: Some(1),
        time_budget: None,
        report_every: 0,
        width: 16,
        depth: 1,
        dropout: 0.0,
        heads: 1,
        context: 1,
        checkpointing: false,
    }
}

/// Serialises the unit tests that seed or draw from libtorch's global generator: tests run
/// on parallel threads of one process, which a worker never does.
#[cfg(test)]
pub(crate) fn torch_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
