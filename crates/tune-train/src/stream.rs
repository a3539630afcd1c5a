//! The streaming path of the builtin trainer's data: a training split too large for the
//! device (`max_device_mb`), or told to stay off it (`device_cache = "never"`), reaches the
//! model batch by batch. A producer thread gathers each batch on the host in the order of a
//! seeded [`Plan`]; on CUDA it copies the batch into pinned memory and starts its copy to the
//! device on a stream of its own, so the copy overlaps the training step. A bounded channel
//! keeps up to `prefetch` batches (at least [`MIN_PREFETCH`]) ready ahead. On the CPU the same
//! producer hands the host batches over as they are.
//!
//! What does not belong here: reading data sets and the in-memory path (`data`), which also
//! says how a split's samples become a batch ([`Gather`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use tch::Device;

use crate::cuda_copy::{self, CopyEvent};
use crate::data::{Batch, panic_message};

/// The fewest batches the producer keeps ready ahead, whatever `prefetch` says: with one, the
/// copy of the next batch could not start before the training step took the current one.
pub const MIN_PREFETCH: usize = 2;

/// Mixed into the trial's seed for the shuffle, so that the data order is not the same stream
/// as anything else drawn from that seed.
const ORDER_SEED: u64 = 0x10ad_e500;

/// Which samples each batch holds: every epoch a seeded shuffle of the previous epoch's order,
/// cut into full batches; the last partial batch of an epoch is left out, so that accumulated
/// steps are exact.
#[derive(Debug, Clone)]
pub struct Plan {
    rng: ChaCha8Rng,
    order: Vec<usize>,
    batch: usize,
    /// Where the next batch starts in `order`; past the end before the first epoch.
    pos: usize,
}

impl Plan {
    pub fn new(samples: usize, batch: usize, seed: u64) -> Plan {
        Plan {
            rng: ChaCha8Rng::seed_from_u64(seed ^ ORDER_SEED),
            order: (0..samples).collect(),
            batch: batch.max(1),
            pos: samples,
        }
    }

    /// Full batches in one epoch.
    pub fn per_epoch(&self) -> usize {
        self.order.len() / self.batch
    }

    /// The next batch's samples; `None` when the split does not hold one full batch.
    pub fn next_batch(&mut self) -> Option<&[usize]> {
        if self.per_epoch() == 0 {
            return None;
        }
        if self.pos + self.batch > self.order.len() {
            self.order.shuffle(&mut self.rng);
            self.pos = 0;
        }
        let at = self.pos;
        self.pos += self.batch;
        Some(&self.order[at..at + self.batch])
    }
}

/// How a split's samples become a host batch: rows of a tensor, windows of a token stream,
/// rows of a memory-mapped array. The producer thread owns it.
pub trait Gather: Send {
    /// Samples in the split (rows, or window starts for a language model).
    fn samples(&self) -> usize;
    /// The batch of these samples, in this order, on the host.
    fn gather(&self, samples: &[usize]) -> Result<Batch, String>;
}

/// Where the producer puts a batch once gathered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Handed over on the host as gathered (the trainer runs on the CPU).
    Host,
    /// Copied to `device` without blocking, from pinned memory when `pinned` (the staging a
    /// CUDA device gets; pinning needs CUDA).
    Copy { device: Device, pinned: bool },
}

impl Stage {
    /// The staging for a trainer on `device`: pinned, non-blocking copies on CUDA.
    pub fn for_device(device: Device) -> Stage {
        if device.is_cuda() {
            Stage::Copy {
                device,
                pinned: true,
            }
        } else {
            Stage::Host
        }
    }
}

/// Why the stream gave no batch: the trial fails with this message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StreamError {
    #[error("data loader failed: gathering a batch: {0}")]
    Gather(String),
    #[error("data loader failed: copying a batch to {device:?}: {message}")]
    Copy { device: Device, message: String },
    #[error("data loader failed: {0}")]
    Panicked(String),
    #[error("data loader failed: the batch of {batch} is larger than the {samples} samples")]
    Empty { samples: usize, batch: usize },
    #[error("the data loader thread could not start: {0}")]
    Spawn(String),
    #[error("the data loader thread stopped")]
    Stopped,
}

/// A batch on its way: on CUDA its copies may still be running until `copied` happens.
struct Staged {
    batch: Batch,
    copied: Option<CopyEvent>,
}

/// The background loader: a producer thread and the bounded channel it fills.
pub struct Streamer {
    /// `None` only while dropping (closing the channel wakes a producer blocked on it).
    rx: Option<Receiver<Result<Staged, StreamError>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    /// Why the thread could not start, said at the first batch.
    spawn_error: Option<String>,
    per_epoch: i64,
    samples: i64,
    /// Batches handed out since the plan's start, for a checkpoint.
    handed: u64,
}

impl Streamer {
    /// Starts the producer for `source` with batches of `batch` samples in the order of
    /// `Plan::new(samples, batch, seed)`, `prefetch` (at least [`MIN_PREFETCH`]) ready ahead.
    pub fn start(
        source: Box<dyn Gather>,
        stage: Stage,
        batch: usize,
        prefetch: usize,
        seed: u64,
    ) -> Streamer {
        Streamer::start_at(source, stage, batch, prefetch, seed, 0)
    }

    /// [`Streamer::start`] with the plan's first `skip` batches passed over (not gathered): a
    /// run resumed from a checkpoint gets the batches it would have had next.
    pub fn start_at(
        source: Box<dyn Gather>,
        stage: Stage,
        batch: usize,
        prefetch: usize,
        seed: u64,
        skip: u64,
    ) -> Streamer {
        let mut plan = Plan::new(source.samples(), batch, seed);
        if plan.per_epoch() > 0 {
            for _ in 0..skip {
                plan.next_batch();
            }
        }
        let per_epoch = plan.per_epoch() as i64;
        let samples = source.samples() as i64;
        let (tx, rx) = sync_channel(prefetch.max(MIN_PREFETCH));
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        // The sender is shared with the panic handler below, so that a panic's message goes
        // down the channel before it closes: the consumer then never sees a closed channel
        // without the reason.
        let tx = Arc::new(Mutex::new(Some(tx)));
        let tx2 = tx.clone();
        let spawned = std::thread::Builder::new()
            .name("tune-loader".into())
            .spawn(move || {
                // No `tch::set_num_threads` here: it resizes libtorch's shared thread pools
                // (NNPACK's pthreadpool among them) under the training thread's feet, which
                // corrupts the heap when a convolution runs at that moment. The worker set one
                // intra-op thread for the whole process before anything ran.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    produce(plan, source.as_ref(), stage, &tx2, &stop2)
                }));
                let tx = tx2.lock().ok().and_then(|mut t| t.take());
                if let (Err(p), Some(tx)) = (r, tx) {
                    let _ = tx.send(Err(StreamError::Panicked(panic_message(&p))));
                }
            });
        drop(tx);
        let (handle, spawn_error) = match spawned {
            Ok(h) => (Some(h), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Streamer {
            rx: Some(rx),
            stop,
            handle,
            spawn_error,
            per_epoch,
            samples,
            handed: skip,
        }
    }

    /// Batches handed out since the plan's start (skipped ones included).
    pub fn handed(&self) -> u64 {
        self.handed
    }

    /// Full batches in one epoch.
    pub fn per_epoch(&self) -> i64 {
        self.per_epoch
    }

    /// Samples in the split.
    pub fn samples(&self) -> i64 {
        self.samples
    }

    /// The next batch, ready to use on the calling thread. On CUDA this waits on the host
    /// until the batch's copy is done, so that a copy slower than the training step shows as
    /// data wait rather than as training time.
    pub fn next_batch(&mut self) -> Result<Batch, StreamError> {
        if let Some(e) = &self.spawn_error {
            return Err(StreamError::Spawn(e.clone()));
        }
        let rx = self.rx.as_ref().ok_or(StreamError::Stopped)?;
        let Staged { batch, copied } = rx.recv().map_err(|_| StreamError::Stopped)??;
        if let Some(done) = copied {
            let device = batch.x.device();
            let failed = |message| StreamError::Copy { device, message };
            done.synchronize().map_err(failed)?;
            // The batch's memory was allocated on the loader's stream; this thread's kernels
            // will read it on another.
            cuda_copy::record_stream(&batch.x).map_err(failed)?;
            cuda_copy::record_stream(&batch.y).map_err(failed)?;
        }
        self.handed += 1;
        Ok(batch)
    }
}

type Sender = Arc<Mutex<Option<SyncSender<Result<Staged, StreamError>>>>>;

/// The producer's loop: gather, stage, send, until stopped, the consumer is gone or a batch
/// fails (its error is the last thing sent).
fn produce(mut plan: Plan, source: &dyn Gather, stage: Stage, tx: &Sender, stop: &AtomicBool) {
    // A clone, so that the lock is not held while blocked on a full channel.
    let Some(tx) = tx.lock().ok().and_then(|t| t.clone()) else {
        return;
    };
    if let Stage::Copy { device, .. } = stage
        && device.is_cuda()
        && let Err(e) = cuda_copy::use_side_stream(device)
    {
        // Still correct on the default stream, only without the overlap.
        eprintln!("tune worker: the data loader copies on the default stream: {e}");
    }
    let batch = plan.batch;
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Some(samples) = plan.next_batch() else {
            let _ = tx.send(Err(StreamError::Empty {
                samples: plan.order.len(),
                batch,
            }));
            return;
        };
        let item = source
            .gather(samples)
            .map_err(StreamError::Gather)
            .and_then(|b| stage_batch(b, stage));
        let failed = item.is_err();
        if tx.send(item).is_err() || failed {
            return;
        }
    }
}

/// Puts a host batch where the consumer wants it (see [`Stage`]).
fn stage_batch(host: Batch, stage: Stage) -> Result<Staged, StreamError> {
    let Stage::Copy { device, pinned } = stage else {
        return Ok(Staged {
            batch: host,
            copied: None,
        });
    };
    let failed = |message: String| StreamError::Copy { device, message };
    let copy = |t: tch::Tensor| -> Result<tch::Tensor, StreamError> {
        // Pinned memory lets the copy run asynchronously with the step on the device; from
        // pageable memory CUDA copies synchronously whatever `non_blocking` says.
        let t = if pinned {
            crate::cuda_copy::pin_memory(&t).map_err(failed)?
        } else {
            t
        };
        // copy = true: on the CPU the batch is a new tensor too, as on a device.
        t.f_to_device_(device, t.kind(), true, true)
            .map_err(|e| failed(e.to_string()))
    };
    let batch = Batch {
        x: copy(host.x)?,
        y: copy(host.y)?,
    };
    let copied = if device.is_cuda() {
        Some(CopyEvent::record(device).map_err(failed)?)
    } else {
        None
    };
    Ok(Staged { batch, copied })
}

impl Drop for Streamer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Closing the channel wakes a producer blocked on a full one: its send fails and it
        // returns. One busy gathering a batch sees `stop` once that batch is done.
        self.rx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::{Duration, Instant};

    use tch::{Kind, Tensor};

    use super::*;

    /// The loader's order as it was written before the plan existed (the loop of the old
    /// producer thread): the plan must keep it, so that a seed reproduces its old trials.
    fn old_order(n: usize, batch: usize, seed: u64, batches: usize) -> Vec<Vec<usize>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x10ad_e500);
        let mut order: Vec<usize> = (0..n).collect();
        let mut out = Vec::new();
        loop {
            order.shuffle(&mut rng);
            for chunk in order.chunks_exact(batch) {
                if out.len() == batches {
                    return out;
                }
                out.push(chunk.to_vec());
            }
        }
    }

    #[test]
    fn the_plan_keeps_the_old_loader_s_order_over_several_epochs_and_seeds() {
        for (n, batch) in [(100, 10), (103, 10), (7, 3), (64, 64)] {
            for seed in [0, 1, 42, u64::MAX] {
                let batches = 4 * (n / batch) + 1;
                let mut plan = Plan::new(n, batch, seed);
                let got: Vec<Vec<usize>> = (0..batches)
                    .map(|_| plan.next_batch().expect("a batch").to_vec())
                    .collect();
                assert_eq!(
                    got,
                    old_order(n, batch, seed, batches),
                    "n {n} batch {batch}"
                );
                // Each epoch holds distinct samples; a partial last batch is left out.
                for epoch in got.chunks(n / batch) {
                    let mut seen: Vec<usize> = epoch.concat();
                    seen.sort_unstable();
                    seen.dedup();
                    assert_eq!(seen.len(), epoch.len() * batch);
                }
            }
        }
        assert_eq!(Plan::new(9, 10, 0).next_batch(), None);
    }

    /// Rows `i` of `x` hold `i` in every column; labels are `i`, so a batch says which samples
    /// it holds.
    struct Rows {
        x: Tensor,
        y: Tensor,
    }

    fn rows(n: i64) -> Rows {
        Rows {
            x: Tensor::arange(n, (Kind::Float, Device::Cpu))
                .unsqueeze(1)
                .repeat([1, 3]),
            y: Tensor::arange(n, (Kind::Int64, Device::Cpu)),
        }
    }

    impl Gather for Rows {
        fn samples(&self) -> usize {
            self.y.size()[0] as usize
        }
        fn gather(&self, samples: &[usize]) -> Result<Batch, String> {
            let idx: Vec<i64> = samples.iter().map(|&i| i as i64).collect();
            let idx = Tensor::from_slice(&idx);
            Ok(Batch {
                x: self.x.index_select(0, &idx),
                y: self.y.index_select(0, &idx),
            })
        }
    }

    fn same(a: &Batch, b: &Batch) -> bool {
        a.x.to_device(Device::Cpu)
            .equal(&b.x.to_device(Device::Cpu))
            && a.y
                .to_device(Device::Cpu)
                .equal(&b.y.to_device(Device::Cpu))
    }

    /// Every way to stage a batch on this machine: on the host, copied (non-blocking) to the
    /// CPU, and where CUDA is present copied to it from pinned memory or not.
    fn stages() -> Vec<Stage> {
        let mut s = vec![
            Stage::Host,
            Stage::Copy {
                device: Device::Cpu,
                pinned: false,
            },
        ];
        if tch::Cuda::is_available() {
            for pinned in [true, false] {
                s.push(Stage::Copy {
                    device: Device::Cuda(0),
                    pinned,
                });
            }
        }
        s
    }

    #[test]
    fn streamed_batches_are_the_plan_s_whatever_the_staging_and_prefetch() {
        // 103 samples in batches of 10: a partial last batch, left out of every epoch.
        let n = 103;
        for seed in [1, 7, 1234] {
            let source = rows(n);
            let mut plan = Plan::new(n as usize, 10, seed);
            let expected: Vec<Batch> = (0..35)
                .map(|_| {
                    source
                        .gather(plan.next_batch().expect("a batch"))
                        .expect("gathers")
                })
                .collect();
            for stage in stages() {
                for prefetch in [1, 2, 4, 64] {
                    let mut s = Streamer::start(Box::new(rows(n)), stage, 10, prefetch, seed);
                    assert_eq!((s.per_epoch(), s.samples()), (10, 103));
                    for (i, want) in expected.iter().enumerate() {
                        let got = s.next_batch().expect("a batch");
                        assert!(
                            same(&got, want),
                            "seed {seed} {stage:?} prefetch {prefetch}: batch {i} differs"
                        );
                    }
                }
            }
        }
    }

    /// Gives `ok` batches, then fails (or panics) at the next.
    struct Breaks {
        ok: usize,
        given: AtomicUsize,
        panics: bool,
    }

    impl Gather for Breaks {
        fn samples(&self) -> usize {
            100
        }
        fn gather(&self, samples: &[usize]) -> Result<Batch, String> {
            if self.given.fetch_add(1, Ordering::SeqCst) == self.ok {
                if self.panics {
                    panic!("a gather went wrong");
                }
                return Err("the disk went away".into());
            }
            rows(100).gather(samples)
        }
    }

    /// Runs `f` on another thread and fails the test if it takes longer than `limit` (a hang
    /// must fail, not stall the test run).
    fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(limit).expect("finished in time, no hang")
    }

    #[test]
    fn a_producer_that_fails_or_panics_ends_the_stream_with_its_message() {
        for (panics, message) in [
            (
                false,
                "data loader failed: gathering a batch: the disk went away",
            ),
            (true, "data loader failed: a gather went wrong"),
        ] {
            let errors = within(Duration::from_secs(20), move || {
                let source = Breaks {
                    ok: 3,
                    given: AtomicUsize::new(0),
                    panics,
                };
                let mut s = Streamer::start(Box::new(source), Stage::Host, 10, 4, 1);
                for _ in 0..3 {
                    s.next_batch().expect("the first batches are fine");
                }
                let first = s.next_batch().err().map(|e| e.to_string());
                let then = s.next_batch().err();
                (first, then)
            });
            assert_eq!(errors.0.as_deref(), Some(message));
            assert_eq!(errors.1, Some(StreamError::Stopped));
        }
    }

    #[test]
    fn a_batch_larger_than_the_split_ends_the_stream_instead_of_spinning() {
        let e = within(Duration::from_secs(20), || {
            let mut s = Streamer::start(Box::new(rows(5)), Stage::Host, 10, 2, 1);
            assert_eq!(s.per_epoch(), 0);
            s.next_batch().err()
        });
        assert_eq!(
            e,
            Some(StreamError::Empty {
                samples: 5,
                batch: 10
            })
        );
    }

    /// Counts the batches gathered, each taking `delay`.
    struct Counted {
        gathered: Arc<AtomicUsize>,
        delay: Duration,
    }

    impl Gather for Counted {
        fn samples(&self) -> usize {
            1000
        }
        fn gather(&self, samples: &[usize]) -> Result<Batch, String> {
            std::thread::sleep(self.delay);
            self.gathered.fetch_add(1, Ordering::SeqCst);
            rows(1000).gather(samples)
        }
    }

    #[test]
    fn the_producer_keeps_at_least_two_batches_ready_and_no_more_than_asked() {
        for (prefetch, ready) in [(1, MIN_PREFETCH), (2, 2), (5, 5)] {
            let gathered = Arc::new(AtomicUsize::new(0));
            let source = Counted {
                gathered: gathered.clone(),
                delay: Duration::ZERO,
            };
            let s = Streamer::start(Box::new(source), Stage::Host, 10, prefetch, 1);
            // The channel holds `ready`; one more is gathered and waits to be sent.
            let deadline = Instant::now() + Duration::from_secs(20);
            while gathered.load(Ordering::SeqCst) < ready + 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(
                gathered.load(Ordering::SeqCst),
                ready + 1,
                "prefetch {prefetch}"
            );
            drop(s);
        }
    }

    #[test]
    fn dropping_the_streamer_mid_epoch_stops_its_thread() {
        // A full channel (the producer blocked on send) and a producer busy gathering.
        for delay in [Duration::ZERO, Duration::from_millis(30)] {
            let gathered = Arc::new(AtomicUsize::new(0));
            let count = gathered.clone();
            within(Duration::from_secs(20), move || {
                let source = Counted {
                    gathered: count,
                    delay,
                };
                let mut s = Streamer::start(Box::new(source), Stage::Host, 10, 2, 1);
                s.next_batch().expect("a batch");
                std::thread::sleep(Duration::from_millis(50));
                // Drop joins the producer: returning proves the thread has ended.
                drop(s);
            });
            let after = gathered.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(
                gathered.load(Ordering::SeqCst),
                after,
                "nothing gathers after drop"
            );
        }
    }
}
