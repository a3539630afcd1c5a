//! The training loop of one trial: build the model, take optimizer steps of `accumulation`
//! micro-batches under autocast (and loss scaling for fp16), follow the schedule, evaluate and
//! report, and end on the budget, a stop request, divergence or out of memory.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Tensor};

use super::data::{self, Batch, DataCache, Loader, Task};
use super::graph::Stepper;
use super::loss_book::LossBook;
use super::precision::{Autocast, GradScaler};
use super::schedule::Schedule;
use super::snapshot::{self, Header, Saved, Snapshot, SnapshotError, SnapshotStore};
use super::{models, optim};
use tune::builtin::{Amp, BuiltinTrial, Hyper, ModelKind};
use tune::space::Params;
use tune::trial::Report;

/// How a training run ends other than by finishing its budget.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrainError {
    /// The loss became NaN or infinite.
    #[error("diverged: loss became {what} at step {step}")]
    Diverged { step: u64, what: &'static str },
    /// The allocator refused an allocation: the trial fails with reason "oom" and
    /// libtorch's own message ("CUDA out of memory. Tried to allocate 32.00 GiB…"), which says
    /// how much was asked and what was held.
    #[error("oom: {0}")]
    OutOfMemory(String),
    /// A stop request arrived; the run ended at a step boundary.
    #[error("stopped")]
    Stopped,
    #[error("{0}")]
    Failed(String),
}

/// What the loop says while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum TrainEvent {
    Report(Report),
}

/// Checkpoints (trial snapshots, [`snapshot`]) of one run: where they go, when, and where
/// the run starts.
pub struct Checkpoints<'a> {
    pub store: &'a SnapshotStore,
    /// Besides the one at every epoch's end, one at the first step boundary after this long
    /// since the last save (for long epochs).
    pub every: Option<Duration>,
    /// The report metric whose best checkpoint the store keeps (the trial's objective).
    pub metric: String,
    /// A "checkpoint now" request: honoured (and cleared) at the next step boundary.
    pub now: &'a AtomicBool,
    /// Continue from this checkpoint rather than from the start.
    pub resume: Option<Snapshot>,
    /// Told of each save once it is on disk.
    pub on_save: &'a mut dyn FnMut(&Saved),
}

/// Training state of one model: parameters, optimizer, precision.
pub struct Session {
    pub vs: nn::VarStore,
    model: Box<dyn ModuleT>,
    pub opt: optim::Optimizer,
    scaler: Option<GradScaler>,
    /// fp16 steps skipped for overflowing gradients, counted on the device.
    skipped: Tensor,
    amp: Amp,
    device: Device,
    task: Task,
    params: Vec<Tensor>,
    clip: f64,
}

/// The mean loss of a batch; logits are computed under the caller's autocast region.
fn loss_and_logits(model: &dyn ModuleT, b: &Batch, task: Task, train: bool) -> (Tensor, Tensor) {
    let logits = model.forward_t(&b.x, train);
    let (flat, target) = match task {
        Task::Classify { .. } => (logits.shallow_clone(), b.y.shallow_clone()),
        Task::Language { vocab } => (logits.reshape([-1, vocab]), b.y.reshape([-1])),
    };
    // Cross-entropy in f32 whatever the autocast dtype: a softmax over low-precision logits
    // loses the small probabilities.
    let loss = flat.to_kind(Kind::Float).cross_entropy_loss::<Tensor>(
        &target,
        None,
        tch::Reduction::Mean,
        -100,
        0.0,
    );
    (loss, flat)
}

/// A checkpoint's named tensors and the optimizer's archive bytes (see [`Session::snapshot_tensors`]).
pub type SnapshotParts = (Vec<(String, Tensor)>, Vec<u8>);

impl Session {
    pub fn new(
        h: &Hyper,
        task: Task,
        sample_shape: &[i64],
        device: Device,
        lr: f64,
    ) -> Result<Session, String> {
        let vs = nn::VarStore::new(device);
        let model = models::build(&vs.root(), h, task, sample_shape)?;
        models::prepare(&vs, h);
        let params = vs.trainable_variables();
        let opt = optim::build(&vs, &params, h, lr)?;
        Ok(Session {
            scaler: (h.amp == Amp::Fp16).then(|| GradScaler::new(device, 65536.0)),
            skipped: Tensor::zeros([1], (Kind::Float, device)),
            vs,
            model,
            opt,
            amp: h.amp,
            device,
            task,
            params,
            clip: h.clip_grad,
        })
    }

    /// Forward and backward over `batches` as the micro-batches of one step, each loss
    /// divided by their number, so the accumulated gradient is that of one batch of all their
    /// samples (exactly so when they are of equal size). Returns the summed (unscaled) mean
    /// losses of the micro-batches, detached.
    pub fn accumulate(
        &mut self,
        batches: &mut dyn FnMut() -> Result<Batch, TrainError>,
        k: i64,
    ) -> Result<Tensor, TrainError> {
        let mut total = Tensor::zeros([], (Kind::Float, self.device));
        for _ in 0..k {
            let b = batches()?;
            let loss = {
                let _ac = Autocast::enter(self.amp, self.device).map_err(TrainError::Failed)?;
                loss_and_logits(self.model.as_ref(), &b, self.task, true).0
            };
            let part = &loss / (k as f64);
            match &self.scaler {
                Some(s) => s.scale_loss(&part).backward(),
                None => part.backward(),
            }
            total += loss.detach();
        }
        Ok(total / (k as f64))
    }

    /// Applies the accumulated gradients (see [`Session::update`]) and clears them.
    pub fn apply(&mut self) -> Result<(), TrainError> {
        self.update()?;
        self.opt.zero_grad(&self.params);
        Ok(())
    }

    /// Applies the accumulated gradients (unscaling, clipping, skipping an fp16 step with
    /// non-finite gradients) and leaves them where they are, as a captured CUDA graph must.
    /// With the fused optimizers nothing is read back from the device: an fp16 overflow is
    /// found, counted and skipped there.
    pub fn update(&mut self) -> Result<(), TrainError> {
        let failed = TrainError::Failed;
        match &mut self.scaler {
            Some(s) => {
                s.unscale_on_device(&self.params).map_err(failed)?;
                let step = self.opt.skips_on_device() || s.all_finite();
                if step {
                    if self.clip > 0.0 {
                        optim::clip_grad_norm(&self.params, self.clip).map_err(failed)?;
                    }
                    self.opt.step(Some(s.found_inf())).map_err(failed)?;
                }
                self.skipped += s.found_inf();
                s.update();
            }
            None => {
                if self.clip > 0.0 {
                    optim::clip_grad_norm(&self.params, self.clip).map_err(failed)?;
                }
                self.opt.step(None).map_err(failed)?;
            }
        }
        Ok(())
    }

    /// The model's variables, the optimizer's and the scaler's state, the skipped-step count and
    /// the generators' state, as a checkpoint's tensors and optimizer archive.
    pub fn snapshot_tensors(&self) -> Result<SnapshotParts, String> {
        let cpu = |t: &Tensor| t.to_device(Device::Cpu);
        let mut vars: Vec<(String, Tensor)> = self
            .vs
            .variables()
            .into_iter()
            .map(|(n, t)| (format!("model.{n}"), cpu(&t.detach())))
            .collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let archive = match self.opt.state()? {
            optim::OptimizerState::Archive(bytes) => bytes,
            optim::OptimizerState::Fused {
                exp_avg,
                exp_avg_sq,
                steps,
            } => {
                for (what, ts) in [("m", exp_avg), ("v", exp_avg_sq), ("step", steps)] {
                    for (i, t) in ts.into_iter().enumerate() {
                        vars.push((format!("opt.{what}.{i}"), t));
                    }
                }
                Vec::new()
            }
        };
        if let Some(sc) = &self.scaler {
            let (scale, growth) = sc.state();
            vars.push(("scaler.scale".into(), cpu(scale)));
            vars.push(("scaler.growth".into(), cpu(growth)));
        }
        vars.push(("skipped".into(), cpu(&self.skipped)));
        vars.push(("rng.cpu".into(), snapshot::rng_state(None)?));
        if let Device::Cuda(i) = self.device {
            vars.push(("rng.cuda".into(), snapshot::rng_state(Some(i))?));
        }
        Ok((vars, archive))
    }

    /// Puts back everything [`Session::snapshot_tensors`] saved, in place: the same tensors
    /// stay the model's and the optimizer's (a CUDA graph may be captured over them later).
    pub fn restore(
        &mut self,
        snap: &Snapshot,
        path: &std::path::Path,
    ) -> Result<(), SnapshotError> {
        let mismatch = |why: String| SnapshotError::Mismatch {
            path: path.to_path_buf(),
            why,
        };
        let get = |name: &str| {
            snap.tensor(name)
                .ok_or_else(|| mismatch(format!("it holds no {name}")))
        };
        let vars = self.vs.variables();
        let saved = snap
            .tensors
            .iter()
            .filter(|(n, _)| n.starts_with("model."))
            .count();
        if saved != vars.len() {
            return Err(mismatch(format!(
                "it holds {saved} model variables, this model has {}",
                vars.len()
            )));
        }
        tch::no_grad(|| -> Result<(), SnapshotError> {
            for (name, mut t) in vars {
                let src = get(&format!("model.{name}"))?;
                if src.size() != t.size() || src.kind() != t.kind() {
                    return Err(mismatch(format!(
                        "model.{name} is {:?} {:?} there, {:?} {:?} here",
                        src.kind(),
                        src.size(),
                        t.kind(),
                        t.size()
                    )));
                }
                t.copy_(src);
            }
            Ok(())
        })?;
        let state = if self.opt.skips_on_device() {
            let take = |what: &str| -> Vec<Tensor> {
                (0..)
                    .map_while(|i| snap.tensor(&format!("opt.{what}.{i}")))
                    .map(Tensor::shallow_clone)
                    .collect()
            };
            optim::OptimizerState::Fused {
                exp_avg: take("m"),
                exp_avg_sq: take("v"),
                steps: take("step"),
            }
        } else {
            optim::OptimizerState::Archive(snap.optimizer_archive.clone())
        };
        self.opt.restore(&state).map_err(mismatch)?;
        if let Some(sc) = &mut self.scaler {
            sc.restore(get("scaler.scale")?, get("scaler.growth")?);
        }
        let skipped = get("skipped")?;
        tch::no_grad(|| self.skipped.copy_(skipped));
        snapshot::set_rng_state(None, get("rng.cpu")?).map_err(SnapshotError::Torch)?;
        if let (Device::Cuda(i), Some(_)) = (self.device, snap.header.cuda_device) {
            snapshot::set_rng_state(Some(i), get("rng.cuda")?).map_err(SnapshotError::Torch)?;
        }
        Ok(())
    }

    /// The trainable variables, in the optimizer's order.
    pub fn params(&self) -> &[Tensor] {
        &self.params
    }

    /// fp16 steps skipped so far for overflowing gradients (reads the device's count).
    pub fn skipped_steps(&self) -> u64 {
        if self.scaler.is_none() {
            return 0;
        }
        self.skipped.double_value(&[0]) as u64
    }

    /// Mean loss and accuracy over the validation set (evaluation mode, no gradients).
    pub fn evaluate(&self, val: &data::ValSet<'_>) -> (f64, f64) {
        tch::no_grad(|| {
            let _ac = Autocast::enter(self.amp, self.device).ok();
            let (mut loss, mut correct, mut n) = (0.0, 0.0, 0.0);
            val.for_each(&mut |b| {
                let (l, logits) = loss_and_logits(self.model.as_ref(), b, self.task, false);
                let target = b.y.reshape([-1]);
                let count = target.size()[0] as f64;
                loss += l.double_value(&[]) * count;
                correct += logits
                    .argmax(-1, false)
                    .eq_tensor(&target)
                    .sum(Kind::Float)
                    .double_value(&[]);
                n += count;
            });
            if n == 0.0 {
                (f64::NAN, f64::NAN)
            } else {
                (loss / n, correct / n)
            }
        })
    }

    /// The gradients of the trainable variables (test support).
    pub fn grads(&self) -> Vec<Tensor> {
        self.params.iter().map(|p| p.grad().copy()).collect()
    }
}

/// The worker's peak resident memory in MB (Linux reports `ru_maxrss` in KB).
fn peak_rss_mb() -> Option<f64> {
    // SAFETY: getrusage only writes the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    (rc == 0).then(|| u.ru_maxrss as f64 / 1024.0)
}

/// Says whether a panic message from libtorch means the allocator ran out of memory.
pub fn is_oom(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("out of memory")
        || m.contains("can't allocate memory")
        || m.contains("cannot allocate memory")
        || m.contains("not enough memory")
}

/// Runs one trial's training to its end. `on_event` gets each report as soon as it is made;
/// `stop` is polled at every step boundary. libtorch errors (panics in tch) become
/// `TrainError`s: out of memory as such, others with their message.
pub fn train(
    trial: &BuiltinTrial,
    params: &Params,
    device: Device,
    seed: u64,
    stop: &AtomicBool,
    cache: &mut DataCache,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<(), TrainError> {
    train_with_checkpoints(trial, params, device, seed, stop, cache, None, on_event)
}

/// [`train`] with checkpoints: saved at every epoch's end, every `every` within an epoch and
/// on request; and, with `resume`, continued from one, exactly as the run would have gone on
/// (bit for bit on the CPU). A checkpoint that cannot be written is said in the trial's log
/// and the run goes on; one that does not fit the trial fails it.
#[allow(clippy::too_many_arguments)]
pub fn train_with_checkpoints(
    trial: &BuiltinTrial,
    params: &Params,
    device: Device,
    seed: u64,
    stop: &AtomicBool,
    cache: &mut DataCache,
    checkpoints: Option<&mut Checkpoints<'_>>,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<(), TrainError> {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        train_inner(
            trial,
            params,
            device,
            seed,
            stop,
            cache,
            checkpoints,
            on_event,
        )
    }));
    match r {
        Ok(r) => r,
        Err(p) => {
            let msg = data::panic_message(&p);
            if is_oom(&msg) {
                // The whole text, backtrace included, goes to the trial's log; the worker
                // stays for the next trial, so it must not keep the failed trial's cache.
                eprintln!("tune worker: out of memory on {device:?}:\n{msg}");
                if device.is_cuda() {
                    crate::cuda::empty_cache();
                }
                Err(TrainError::OutOfMemory(torch_message(&msg)))
            } else {
                Err(TrainError::Failed(format!(
                    "libtorch error: {}",
                    torch_message(&msg)
                )))
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn train_inner(
    trial: &BuiltinTrial,
    params: &Params,
    device: Device,
    seed: u64,
    stop: &AtomicBool,
    cache: &mut DataCache,
    mut checkpoints: Option<&mut Checkpoints<'_>>,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<(), TrainError> {
    let h = trial
        .resolve(params)
        .map_err(|e| TrainError::Failed(e.to_string()))?;
    let ds = cache
        .get(&trial.data)
        .map_err(|e| TrainError::Failed(e.to_string()))?;
    if device == Device::Cpu && h.amp == Amp::Bf16 {
        // Into the trial's log: bf16 without AVX-512 is a slowdown the user may not expect.
        if let Some(note) = crate::cpu::CpuInfo::this_machine().bf16_note() {
            eprintln!("{note}");
        }
    }
    tch::manual_seed(seed as i64);
    crate::cuda::reset_peak(device);
    let context = (h.model == ModelKind::Transformer).then_some(h.context);
    let schedule = Schedule {
        kind: h.schedule,
        peak: h.peak_lr(),
        warmup: h.warmup,
    };
    let mut s = Session::new(&h, ds.task, &ds.sample_shape, device, schedule.lr(0.0))
        .map_err(TrainError::Failed)?;
    // The checkpoint to continue from: restored before any step, so before a CUDA graph is
    // captured.
    let resume = checkpoints.as_mut().and_then(|c| c.resume.take());
    if let (Some(snap), Some(c)) = (&resume, &checkpoints) {
        s.restore(snap, &c.store.latest_path())
            .map_err(|e| TrainError::Failed(e.to_string()))?;
    }
    let mut stepper = Stepper::new(trial.cuda_graphs, &h, device, &mut s);
    let at = resume
        .as_ref()
        .map(|r| (r.header.loader, r.tensor("loader.perm")));
    let mut loader = Loader::new_at(&ds, device, h.batch_size, context, &trial.data, seed, at);
    let k = h.accumulation;
    let steps_per_epoch = loader.batches_per_epoch() / k;
    if steps_per_epoch == 0 {
        return Err(TrainError::Failed(format!(
            "batch_size × accumulation = {} is larger than the training set ({} samples)",
            h.effective_batch(),
            loader.samples()
        )));
    }
    let total_steps = h.epochs.map(|e| e as u64 * steps_per_epoch as u64);
    let eval_batch = if context.is_some() { 64 } else { 1024 };
    let val = data::eval_batches(&ds, device, eval_batch, context);
    let report_every = if h.report_every > 0 {
        h.report_every
    } else {
        steps_per_epoch as u64
    };
    // How far training is, in [0, 1]: the epochs' steps or the time budget, whichever ends
    // first. The schedule's clock, and what the reports say of it.
    let progress_at = |step: u64, elapsed: Duration| match (total_steps, h.time_budget) {
        (Some(t), Some(b)) => (step as f64 / t as f64).max(elapsed.as_secs_f64() / b.as_secs_f64()),
        (Some(t), None) => step as f64 / t as f64,
        (None, Some(b)) => elapsed.as_secs_f64() / b.as_secs_f64(),
        (None, None) => 1.0,
    };
    // Reading the loss forces a device sync: every step on the CPU (free there), every few
    // steps on CUDA.
    let check_every = if device.is_cuda() { 16 } else { 1 };

    let start = Instant::now();
    // The run's clock: this attempt's time plus the time before the checkpoint it resumed.
    let before = resume.as_ref().map_or(Duration::ZERO, |r| {
        Duration::from_secs_f64(r.header.elapsed_s.max(0.0))
    });
    let elapsed = || before + start.elapsed();
    let mut train_time = Duration::ZERO;
    let mut wait = Duration::ZERO;
    let mut interval_samples = 0i64;
    // The interval's finite losses and the run of non-finite ones: on the device on CUDA
    // (in place, so a CUDA graph captures the counting), read every `check_every` steps; on
    // the host on the CPU.
    let mut tally = LossBook::new(device);
    let mut step = 0u64;
    let mut last_reported = 0u64;
    // The objective's value at the last report, and the best one a checkpoint holds.
    let mut reported_value: Option<(u64, f64)> = None;
    let mut best: Option<f64> = None;
    if let Some(r) = &resume {
        step = r.header.step;
        last_reported = r.header.last_reported;
        best = r.header.best;
        tally.restore(r.header.tally);
        eprintln!(
            "tune worker: resumed from the checkpoint at step {} (epoch {}, step {} of it)",
            r.header.step, r.header.epoch, r.header.step_in_epoch
        );
    }
    drop(resume);
    let mut last_save = Instant::now();
    let mut save_failures = crate::snapshot::SaveFailures::default();
    // Seconds this attempt spent saving checkpoints (state to host, write, fsync, rename): the
    // overhead a trial pays for being resumable, reported as `checkpoint_s`.
    let mut checkpoint_time = Duration::ZERO;
    let mut lr = schedule.lr(if step == 0 {
        0.0
    } else {
        progress_at(step, elapsed())
    });
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(TrainError::Stopped);
        }
        let progress = progress_at(step, elapsed());
        if progress >= 1.0 {
            break;
        }
        lr = schedule.lr(progress);
        s.opt.set_lr(lr);

        let t0 = Instant::now();
        let mut next = || -> Result<Batch, TrainError> {
            let (b, w) = loader.next_batch().map_err(TrainError::Failed)?;
            wait += w;
            Ok(b)
        };
        // The step is applied before its loss is checked: a diverged run ends either way.
        let loss = stepper.step(&mut s, &mut next, k, &mut tally)?;
        if (step + 1).is_multiple_of(check_every) {
            // With fp16 an overflowing forward pass is the scaler's business: the step is
            // skipped and the scale backs off. Only a run of them is divergence.
            let run = tally.nonfinite_run();
            if run > 0 && (h.amp != Amp::Fp16 || run > 20) {
                let what = if loss.double_value(&[]).is_nan() {
                    "NaN"
                } else {
                    "infinite"
                };
                return Err(TrainError::Diverged {
                    step: step + 1,
                    what,
                });
            }
        }
        step += 1;
        interval_samples += h.effective_batch();
        let end = total_steps.is_some_and(|t| step >= t);
        let report = step.is_multiple_of(report_every) || end;
        if report && device.is_cuda() {
            // CUDA runs the queued steps after the launch returns: only a sync before the
            // clock is read counts them all in this interval's training time.
            tch::Cuda::synchronize(device_index(device) as i64);
        }
        train_time += t0.elapsed();

        if report {
            let train_loss = tally.mean().unwrap_or(f64::NAN);
            if !train_loss.is_finite() && h.amp != Amp::Fp16 {
                return Err(TrainError::Diverged {
                    step,
                    what: if train_loss.is_nan() {
                        "NaN"
                    } else {
                        "infinite"
                    },
                });
            }
            let (val_loss, val_acc) = s.evaluate(&val);
            let mut m = BTreeMap::new();
            m.insert("epoch".into(), step as f64 / steps_per_epoch as f64);
            insert_progress(&mut m, h.epochs, progress_at(step, elapsed()));
            m.insert("train_loss".into(), train_loss);
            m.insert("val_loss".into(), val_loss);
            m.insert("val_acc".into(), val_acc);
            let secs = train_time.as_secs_f64();
            m.insert(
                "samples_per_s".into(),
                interval_samples as f64 / secs.max(1e-9),
            );
            m.insert("data_wait".into(), wait.as_secs_f64() / secs.max(1e-9));
            m.insert("lr".into(), lr);
            m.insert("skipped_steps".into(), s.skipped_steps() as f64);
            if checkpoints.is_some() {
                m.insert("checkpoint_s".into(), checkpoint_time.as_secs_f64());
            }
            let peak = if device.is_cuda() {
                crate::cuda::peak_allocated_mb(device)
            } else {
                peak_rss_mb()
            };
            if let Some(mb) = peak {
                m.insert("peak_mem_mb".into(), mb);
            }
            if device.is_cuda() {
                m.insert(
                    "cuda_graphs".into(),
                    f64::from(u8::from(stepper.replaying())),
                );
            }
            if let Some(c) = &checkpoints {
                reported_value = m.get(&c.metric).map(|v| (step, *v));
            }
            on_event(TrainEvent::Report(Report { step, metrics: m }));
            last_reported = step;
            train_time = Duration::ZERO;
            wait = Duration::ZERO;
            interval_samples = 0;
            tally.next_interval();
        }
        if let Some(c) = checkpoints.as_mut() {
            let epoch_end = step.is_multiple_of(steps_per_epoch as u64);
            let due = epoch_end
                || c.every.is_some_and(|d| last_save.elapsed() >= d)
                || c.now.swap(false, Ordering::Relaxed);
            if due {
                let save_started = Instant::now();
                let value = reported_value.filter(|(at, _)| *at == step).map(|(_, v)| v);
                if c.store.improves(value, best) {
                    best = value;
                }
                let (position, perm) = loader.position();
                let header = Header {
                    format: snapshot::FORMAT,
                    step,
                    epoch: step / steps_per_epoch as u64,
                    step_in_epoch: step % steps_per_epoch as u64,
                    steps_per_epoch: steps_per_epoch as u64,
                    elapsed_s: elapsed().as_secs_f64(),
                    last_reported,
                    loader: position,
                    tally: tally.tally(),
                    cuda_device: match device {
                        Device::Cuda(i) => Some(i),
                        _ => None,
                    },
                    value,
                    best,
                };
                let saved = s.snapshot_tensors().and_then(|(mut tensors, archive)| {
                    if let Some(perm) = perm {
                        tensors.push(("loader.perm".into(), perm));
                    }
                    c.store
                        .save(&Snapshot {
                            header,
                            tensors,
                            optimizer_archive: archive,
                        })
                        .map_err(|e| e.to_string())
                });
                match saved {
                    Ok(saved) => (c.on_save)(&saved),
                    Err(e) => {
                        if let Some(line) = save_failures.failed(step, c.store.dir(), &e) {
                            eprintln!("{line}");
                        }
                    }
                }
                last_save = Instant::now();
                checkpoint_time += save_started.elapsed();
            }
        }
    }
    if device.is_cuda() && step > last_reported {
        // The steps still queued on the GPU belong to this last interval's training time.
        let t = Instant::now();
        tch::Cuda::synchronize(device_index(device) as i64);
        train_time += t.elapsed();
    }
    if step > last_reported || step == 0 {
        // A time budget ended the run between reports: one last evaluation, so the final
        // value describes the final weights.
        let (val_loss, val_acc) = s.evaluate(&val);
        let mut m = BTreeMap::new();
        m.insert("epoch".into(), step as f64 / steps_per_epoch as f64);
        insert_progress(&mut m, h.epochs, progress_at(step, elapsed()));
        if let Some(mean) = tally.mean() {
            m.insert("train_loss".into(), mean);
        }
        m.insert("val_loss".into(), val_loss);
        m.insert("val_acc".into(), val_acc);
        if train_time > Duration::ZERO {
            let secs = train_time.as_secs_f64();
            m.insert("samples_per_s".into(), interval_samples as f64 / secs);
            m.insert("data_wait".into(), wait.as_secs_f64() / secs);
        }
        m.insert("lr".into(), lr);
        m.insert("skipped_steps".into(), s.skipped_steps() as f64);
        if checkpoints.is_some() {
            m.insert("checkpoint_s".into(), checkpoint_time.as_secs_f64());
        }
        on_event(TrainEvent::Report(Report { step, metrics: m }));
    }
    Ok(())
}

/// What a report says of the run's length besides `epoch`, so that the UI draws a bar rather
/// than a bare step count: `total_epochs` when the run has a number of epochs, and `progress`
/// (the fraction done, in [0, 1]) always, which a run with only a time budget needs.
fn insert_progress(m: &mut BTreeMap<String, f64>, epochs: Option<i64>, progress: f64) {
    if let Some(e) = epochs {
        m.insert("total_epochs".into(), e as f64);
    }
    m.insert("progress".into(), progress.clamp(0.0, 1.0));
}

/// The message of a tch panic without its wrapping and C++ backtrace: tch panics with
/// ``called `Result::unwrap()` on an `Err` value: Torch("msg\nException raised from …")``.
pub(crate) fn torch_message(panic: &str) -> String {
    let inner = match panic.find("Torch(\"") {
        Some(i) => &panic[i + 7..],
        None => panic,
    };
    let end = ["\\nException raised", "\\n", "\n"]
        .iter()
        .filter_map(|m| inner.find(m))
        .min()
        .unwrap_or(inner.len());
    inner[..end].trim_end_matches("\")").trim().to_string()
}

fn device_index(d: Device) -> usize {
    match d {
        Device::Cuda(i) => i,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use tune::builtin::parse_builtin;
    use tune::space::{ParamValue, Space};

    fn hyper(amp: Amp) -> Hyper {
        Hyper {
            amp,
            ..crate::test_hyper()
        }
    }

    #[test]
    fn libtorch_errors_lose_their_wrapping_and_backtrace() {
        let p = r#"called `Result::unwrap()` on an `Err` value: Torch("shape mismatch [2, 3]\nException raised from x at y.cpp:1\nframe #0: z")"#;
        assert_eq!(torch_message(p), "shape mismatch [2, 3]");
        assert_eq!(torch_message("plain"), "plain");
    }

    #[test]
    fn accumulating_k_batches_of_b_gives_the_gradient_of_one_batch_of_k_times_b() {
        let _rng = crate::torch_rng_lock();
        let task = Task::Classify { classes: 10 };
        tch::manual_seed(7);
        let x = Tensor::randn([32, 64], (Kind::Float, Device::Cpu));
        let y = Tensor::randint(10, [32], (Kind::Int64, Device::Cpu));
        tch::manual_seed(1);
        let mut one = Session::new(&hyper(Amp::Off), task, &[64], Device::Cpu, 0.1).expect("one");
        tch::manual_seed(1);
        let mut four = Session::new(&hyper(Amp::Off), task, &[64], Device::Cpu, 0.1).expect("four");
        let mut whole = Some(Batch {
            x: x.shallow_clone(),
            y: y.shallow_clone(),
        });
        let l1 = one
            .accumulate(&mut || Ok(whole.take().expect("called once")), 1)
            .expect("one batch");
        let mut i = 0;
        let l4 = four
            .accumulate(
                &mut || {
                    let b = Batch {
                        x: x.narrow(0, i * 8, 8),
                        y: y.narrow(0, i * 8, 8),
                    };
                    i += 1;
                    Ok(b)
                },
                4,
            )
            .expect("four batches");
        assert!((l1.double_value(&[]) - l4.double_value(&[])).abs() < 1e-5);
        for (a, b) in one.grads().iter().zip(four.grads()) {
            let diff = (a - &b).abs().max().double_value(&[]);
            let scale = a.abs().max().double_value(&[]).max(1e-6);
            assert!(
                diff / scale < 1e-5,
                "grad differs by {diff} (scale {scale})"
            );
        }
    }

    fn digits_trial(extra: &str, space: &str) -> BuiltinTrial {
        let src = format!(
            "kind = \"builtin\"\nepochs = 2\n{extra}\n[model]\nkind = \"mlp\"\nwidth = 32\ndepth = 1\n[data]\ndataset = \"digits\"\n"
        );
        let t: toml::Table = toml::from_str(&src).expect("table");
        let sp: toml::Table = toml::from_str(space).expect("space");
        let sp = Space::from_toml(&sp).expect("space valid");
        parse_builtin(&t, &sp, Path::new(".")).expect("trial valid")
    }

    fn run(
        trial: &BuiltinTrial,
        params: &Params,
        seed: u64,
    ) -> (Result<(), TrainError>, Vec<Report>) {
        let stop = AtomicBool::new(false);
        let mut cache = DataCache::new();
        let mut reports = Vec::new();
        let r = train(
            trial,
            params,
            Device::Cpu,
            seed,
            &stop,
            &mut cache,
            &mut |e| {
                let TrainEvent::Report(r) = e;
                reports.push(r);
            },
        );
        (r, reports)
    }

    #[test]
    fn an_mlp_learns_digits_and_reports_every_epoch() {
        let _rng = crate::torch_rng_lock();
        let t = digits_trial(
            "batch_size = 32",
            r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#,
        );
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(3e-3));
        let (r, reports) = run(&t, &p, 1);
        r.expect("trains");
        assert_eq!(reports.len(), 2);
        let last = &reports[1].metrics;
        assert!(last["val_acc"] > 0.8, "{last:?}");
        assert!(last["samples_per_s"] > 0.0);
        assert!((0.0..=1.0).contains(&last["data_wait"]));
        // 10% of 1 797 held out: 1 617 training samples.
        assert_eq!(reports[1].step, 2 * (1617 / 32));
        // The UI's epoch bar: how far, out of how many, as the reports say it.
        let epochs: Vec<[f64; 3]> = reports
            .iter()
            .map(|r| {
                [
                    r.metrics["epoch"],
                    r.metrics["total_epochs"],
                    r.metrics["progress"],
                ]
            })
            .collect();
        assert_eq!(epochs, [[1.0, 2.0, 0.5], [2.0, 2.0, 1.0]]);
    }

    #[test]
    fn a_batch_larger_than_the_training_set_fails_the_trial_and_says_how_many_samples_there_are() {
        let _rng = crate::torch_rng_lock();
        let t = digits_trial(
            "lr = 0.01",
            r#"batch_size = { type = "int", low = 16, high = 4096 }"#,
        );
        let mut p = Params::new();
        p.insert("batch_size".into(), ParamValue::Int(2048));
        let (r, reports) = run(&t, &p, 1);
        assert!(reports.is_empty());
        match r {
            // 10% of 1 797 held out: 1 617 training samples.
            Err(TrainError::Failed(e)) => assert_eq!(
                e,
                "batch_size × accumulation = 2048 is larger than the training set (1617 samples)"
            ),
            other => panic!("expected a failed trial, got {other:?}"),
        }
    }

    #[test]
    fn the_same_seed_and_params_give_the_same_result_on_cpu() {
        let _rng = crate::torch_rng_lock();
        let t = digits_trial(
            "lr = 0.01\noptimizer = \"sgd\"",
            r#"batch_size = { type = "int", low = 16, high = 64 }"#,
        );
        let mut p = Params::new();
        p.insert("batch_size".into(), ParamValue::Int(32));
        let (_, a) = run(&t, &p, 9);
        let (_, b) = run(&t, &p, 9);
        assert_eq!(a[1].metrics["val_loss"], b[1].metrics["val_loss"]);
        assert_eq!(a[1].metrics["train_loss"], b[1].metrics["train_loss"]);
    }

    #[test]
    fn cuda_graphs_asked_for_on_the_cpu_train_exactly_as_eager_steps() {
        let _rng = crate::torch_rng_lock();
        let space = r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#;
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(3e-3));
        let on = digits_trial("optimizer = \"adamw\"\ncuda_graphs = true", space);
        let off = digits_trial("optimizer = \"adamw\"\ncuda_graphs = false", space);
        let (r_on, a) = run(&on, &p, 5);
        let (r_off, b) = run(&off, &p, 5);
        r_on.expect("trains");
        r_off.expect("trains");
        // Everything but the clocks and the memory peak.
        let results = |rs: &[Report]| -> Vec<(u64, [f64; 4])> {
            rs.iter()
                .map(|r| {
                    let m = &r.metrics;
                    (
                        r.step,
                        [m["train_loss"], m["val_loss"], m["val_acc"], m["lr"]],
                    )
                })
                .collect()
        };
        assert_eq!(a.len(), 2);
        assert_eq!(results(&a), results(&b));
        // No graph on the CPU, and reports there say nothing of it.
        assert!(!a[1].metrics.contains_key("cuda_graphs"));
    }

    #[test]
    fn a_diverging_learning_rate_ends_as_diverged() {
        let _rng = crate::torch_rng_lock();
        let t = digits_trial(
            "optimizer = \"sgd\"\nmomentum = 0.9",
            r#"lr = { type = "float", low = 1e-4, high = 1e9, log = true }"#,
        );
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(1e9));
        let (r, _) = run(&t, &p, 1);
        match r {
            Err(TrainError::Diverged { step, .. }) => assert!(step >= 1),
            other => panic!("expected divergence, got {other:?}"),
        }
        let e = TrainError::Diverged {
            step: 3,
            what: "NaN",
        };
        assert_eq!(e.to_string(), "diverged: loss became NaN at step 3");
    }

    #[test]
    fn bf16_and_fp16_trials_train_on_the_cpu() {
        let _rng = crate::torch_rng_lock();
        for amp in ["bf16", "fp16"] {
            let t = digits_trial(
                &format!("amp = \"{amp}\"\nbatch_size = 256"),
                r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#,
            );
            let mut p = Params::new();
            p.insert("lr".into(), ParamValue::Float(1e-2));
            let (r, reports) = run(&t, &p, 1);
            r.expect("trains");
            assert!(reports[1].metrics["val_loss"].is_finite(), "{amp}");
        }
    }

    #[test]
    fn a_stop_request_ends_the_run_at_a_step_boundary() {
        let _rng = crate::torch_rng_lock();
        let t = digits_trial(
            "",
            r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#,
        );
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(1e-3));
        let stop = AtomicBool::new(true);
        let mut cache = DataCache::new();
        let r = train(&t, &p, Device::Cpu, 1, &stop, &mut cache, &mut |_| {});
        assert_eq!(r, Err(TrainError::Stopped));
    }

    fn trial_from(src: &str, space: &str) -> BuiltinTrial {
        let t: toml::Table = toml::from_str(src).expect("table");
        let sp: toml::Table = toml::from_str(space).expect("space");
        let sp = Space::from_toml(&sp).expect("space valid");
        parse_builtin(&t, &sp, Path::new(".")).expect("trial valid")
    }

    #[test]
    fn the_cnn_and_the_resnet_with_and_without_checkpointing_learn_digits() {
        let _rng = crate::torch_rng_lock();
        for model in [
            "kind = \"cnn\"\nwidth = 8",
            "kind = \"resnet\"\nwidth = 4",
            "kind = \"resnet\"\nwidth = 4\ncheckpointing = true",
        ] {
            let t = trial_from(
                &format!(
                    "epochs = 2\nbatch_size = 32\noptimizer = \"adam\"\n[model]\n{model}\n[data]\ndataset = \"digits\"\n"
                ),
                r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#,
            );
            let mut p = Params::new();
            p.insert("lr".into(), ParamValue::Float(1e-2));
            let (r, reports) = run(&t, &p, 3);
            r.expect("trains");
            let m = &reports[1].metrics;
            assert!(m["val_acc"] > 0.6, "{model}: {m:?}");
        }
    }

    #[test]
    fn the_transformer_learns_bytes_of_real_text_within_its_time_budget() {
        let _rng = crate::torch_rng_lock();
        let t = trial_from(
            "time_budget = \"3s\"\nreport_every = 20\nbatch_size = 16\noptimizer = \"adamw\"\namp = \"bf16\"\nschedule = \"cosine\"\n[model]\nkind = \"transformer\"\nwidth = 32\ndepth = 1\nheads = 2\ncontext = 32\n[data]\ndataset = \"gpl3-text\"\n",
            r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#,
        );
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(3e-3));
        let start = Instant::now();
        let (r, reports) = run(&t, &p, 3);
        r.expect("trains");
        assert!(start.elapsed() < Duration::from_secs(10));
        let first = &reports[0].metrics;
        let last = &reports[reports.len() - 1].metrics;
        // Uniform over 256 bytes is ln 256 = 5.55 nats; learning gets well below.
        assert!(last["val_loss"] < 4.0, "{last:?}");
        assert!(
            last["val_loss"] < first["val_loss"],
            "{first:?} -> {last:?}"
        );
    }

    #[test]
    fn a_data_set_that_may_not_stay_on_the_device_is_streamed_by_the_loader_thread() {
        let _rng = crate::torch_rng_lock();
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path();
        let n = 600usize;
        let mut x = Vec::new();
        let mut y = Vec::new();
        for i in 0..n {
            let label = (i % 2) as i64;
            for j in 0..4 {
                let v = if j == 0 {
                    label as f32 * 2.0 - 1.0
                } else {
                    (i * j % 7) as f32
                };
                x.extend_from_slice(&v.to_le_bytes());
            }
            y.extend_from_slice(&label.to_le_bytes());
        }
        let npy = |name: &str, descr: &str, shape: &str, data: &[u8]| {
            let mut h =
                format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
            while (10 + h.len() + 1) % 64 != 0 {
                h.push(' ');
            }
            h.push('\n');
            let mut out = b"\x93NUMPY\x01\x00".to_vec();
            out.extend_from_slice(&(h.len() as u16).to_le_bytes());
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(data);
            std::fs::write(dir.join(name), out).expect("write npy");
        };
        npy("x.npy", "<f4", &format!("({n}, 4)"), &x);
        npy("y.npy", "<i8", &format!("({n},)"), &y);
        let t = trial_from(
            &format!(
                "epochs = 3\nbatch_size = 20\n[model]\nkind = \"mlp\"\nwidth = 8\ndepth = 1\n[data]\ndataset = \"npy\"\nx = \"{}\"\ny = \"{}\"\ndevice_cache = \"never\"\nprefetch = 2\n",
                dir.join("x.npy").display(),
                dir.join("y.npy").display()
            ),
            r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#,
        );
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(3e-2));
        let (r, reports) = run(&t, &p, 1);
        r.expect("trains");
        assert_eq!(reports.len(), 3);
        let m = &reports[2].metrics;
        assert!(m["val_acc"] > 0.9, "{m:?}");
        assert!((0.0..=1.0).contains(&m["data_wait"]));
    }

    #[test]
    fn a_model_too_large_for_memory_fails_as_out_of_device_memory() {
        let _rng = crate::torch_rng_lock();
        // (2^31 - 1) × 64 floats = 512 GiB (the widest a knob may be): the allocator refuses at
        // once, nothing is touched.
        let t = trial_from(
            "epochs = 1\n[model]\nkind = \"mlp\"\ndepth = 1\n[data]\ndataset = \"digits\"\n",
            r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }
               width = { type = "int", low = 1, high = 2147483647, log = true }"#,
        );
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(1e-3));
        p.insert("width".into(), ParamValue::Int(1 << 30));
        let (r, _) = run(&t, &p, 1);
        match r {
            Err(e @ TrainError::OutOfMemory(_)) => {
                let text = e.to_string();
                assert!(text.starts_with("oom: "), "{text}");
                // libtorch's own words, without tch's wrapping or the C++ backtrace.
                assert!(is_oom(&text), "{text}");
                assert!(!text.contains("Exception raised"), "{text}");
            }
            other => panic!("expected out of memory, got {other:?}"),
        }
    }

    /// Trains with checkpoints in `dir`: resumed from the latest there when `resume`, a
    /// checkpoint every step when `every_step`, stopped right after the one at `stop_at`.
    fn run_checkpointed(
        trial: &BuiltinTrial,
        params: &Params,
        dir: &Path,
        every_step: bool,
        stop_at: Option<u64>,
        resume: bool,
    ) -> (Result<(), TrainError>, Vec<Report>, Vec<Saved>) {
        let store = SnapshotStore::open(dir, tune::trial::Direction::Minimize).expect("store");
        let stop = AtomicBool::new(false);
        let now = AtomicBool::new(false);
        let mut saves = Vec::new();
        let mut warnings = Vec::new();
        let snap = resume.then(|| store.load(&mut warnings).expect("a checkpoint"));
        assert!(warnings.is_empty(), "{warnings:?}");
        let mut reports = Vec::new();
        let mut on_save = |s: &Saved| {
            saves.push(s.clone());
            if Some(s.step) == stop_at {
                stop.store(true, Ordering::Relaxed);
            }
        };
        let mut ck = Checkpoints {
            store: &store,
            every: every_step.then_some(Duration::ZERO),
            metric: "val_loss".into(),
            now: &now,
            resume: snap,
            on_save: &mut on_save,
        };
        // A fresh cache: nothing of the first run's survives into the resumed one.
        let mut cache = DataCache::new();
        let r = train_with_checkpoints(
            trial,
            params,
            Device::Cpu,
            4,
            &stop,
            &mut cache,
            Some(&mut ck),
            &mut |e| {
                let TrainEvent::Report(r) = e;
                reports.push(r);
            },
        );
        (r, reports, saves)
    }

    /// What must be equal between runs: everything but the clocks and the memory peak.
    fn outcomes(rs: &[Report]) -> Vec<(u64, [f64; 5])> {
        rs.iter()
            .map(|r| {
                let m = &r.metrics;
                (
                    r.step,
                    [
                        m["epoch"],
                        m["train_loss"],
                        m["val_loss"],
                        m["val_acc"],
                        m["lr"],
                    ],
                )
            })
            .collect()
    }

    fn model_of(path: &Path) -> Vec<(String, Tensor)> {
        Snapshot::read(path)
            .expect("reads")
            .tensors
            .into_iter()
            .filter(|(n, _)| n.starts_with("model."))
            .collect()
    }

    #[test]
    fn a_run_resumed_from_a_checkpoint_continues_bit_for_bit_on_the_cpu() {
        let _rng = crate::torch_rng_lock();
        let space = r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#;
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(1e-2));
        // Each optimizer kind (libtorch's archives), fp32, bf16 autocast and the fp16 scaler,
        // accumulation, a schedule, and dropout (the generator's state).
        for (setting, dropout) in [
            (
                "optimizer = \"sgd\"\nmomentum = 0.9\nschedule = \"cosine\"\nwarmup = 0.1",
                "0.0",
            ),
            (
                "optimizer = \"adam\"\nweight_decay = 1e-4\naccumulation = 2",
                "0.2",
            ),
            ("optimizer = \"adamw\"\namp = \"bf16\"", "0.2"),
            ("optimizer = \"sgd\"\nmomentum = 0.5\namp = \"fp16\"", "0.0"),
            ("optimizer = \"rmsprop\"", "0.1"),
        ] {
            let t = trial_from(
                &format!(
                    "epochs = 3\nbatch_size = 64\n{setting}\n[model]\nkind = \"mlp\"\nwidth = 32\ndepth = 2\ndropout = {dropout}\n[data]\ndataset = \"digits\"\n"
                ),
                space,
            );
            let what = format!("{setting} dropout {dropout}");
            // Without checkpoints: the reference.
            let (r, plain) = run(&t, &p, 4);
            r.expect("trains");
            assert_eq!(plain.len(), 3, "{what}");
            let per_epoch = plain[0].step;
            // With checkpoints and no interruption: saving changes nothing.
            let tmp = tempfile::tempdir().expect("temp dir");
            let straight = tmp.path().join("straight");
            let (r, reports, saves) = run_checkpointed(&t, &p, &straight, false, None, false);
            r.expect("trains");
            assert_eq!(outcomes(&reports), outcomes(&plain), "{what}");
            assert_eq!(
                saves.iter().map(|s| s.step).collect::<Vec<_>>(),
                [per_epoch, 2 * per_epoch, 3 * per_epoch],
                "{what}: one checkpoint per epoch"
            );
            let reference = model_of(&straight.join(snapshot::LATEST));
            // Interrupted at an epoch's end, and in the middle of an epoch; every run
            // starts from nothing but the checkpoint directory.
            for (at, every_step) in [(per_epoch, false), (per_epoch + 7, true)] {
                let dir = tmp.path().join(format!("at-{at}"));
                let (r, first, _) = run_checkpointed(&t, &p, &dir, every_step, Some(at), false);
                assert_eq!(r, Err(TrainError::Stopped), "{what}");
                let (r, rest, _) = run_checkpointed(&t, &p, &dir, false, None, true);
                r.expect("resumes");
                let all: Vec<Report> = first.into_iter().chain(rest).collect();
                assert_eq!(outcomes(&all), outcomes(&plain), "{what}: stopped at {at}");
                let resumed = model_of(&dir.join(snapshot::LATEST));
                assert_eq!(resumed.len(), reference.len());
                for ((n, a), (m, b)) in resumed.iter().zip(&reference) {
                    assert_eq!(n, m);
                    assert!(a.equal(b), "{what}: stopped at {at}: {n} differs");
                }
            }
        }
    }

    #[test]
    fn a_checkpoint_request_saves_at_the_next_step_and_a_checkpoint_of_another_model_is_refused() {
        let _rng = crate::torch_rng_lock();
        let space = r#"lr = { type = "float", low = 1e-4, high = 1e-1, log = true }"#;
        let mut p = Params::new();
        p.insert("lr".into(), ParamValue::Float(1e-2));
        let t = digits_trial("batch_size = 64", space);
        let tmp = tempfile::tempdir().expect("temp dir");
        let store =
            SnapshotStore::open(tmp.path(), tune::trial::Direction::Minimize).expect("store");
        let stop = AtomicBool::new(false);
        // Asked before the first step: saved after it.
        let now = AtomicBool::new(true);
        let mut steps = Vec::new();
        let mut on_save = |s: &Saved| steps.push((s.step, s.best));
        let mut ck = Checkpoints {
            store: &store,
            every: None,
            metric: "val_loss".into(),
            now: &now,
            resume: None,
            on_save: &mut on_save,
        };
        let mut cache = DataCache::new();
        train_with_checkpoints(
            &t,
            &p,
            Device::Cpu,
            1,
            &stop,
            &mut cache,
            Some(&mut ck),
            &mut |_| {},
        )
        .expect("trains");
        assert!(!now.load(Ordering::Relaxed), "the request is cleared");
        // 1 617 training samples in batches of 64: 25 steps an epoch. The first epoch's
        // checkpoint is the best so far by definition.
        assert_eq!(steps[..2], [(1, false), (25, true)]);
        assert_eq!(steps.len(), 3);
        // A wider model cannot take this checkpoint.
        let wide = trial_from(
            "epochs = 2\nbatch_size = 64\n[model]\nkind = \"mlp\"\nwidth = 48\ndepth = 1\n[data]\ndataset = \"digits\"\n",
            space,
        );
        let mut warnings = Vec::new();
        let snap = store.load(&mut warnings);
        let mut on_save = |_: &Saved| {};
        let mut ck = Checkpoints {
            store: &store,
            every: None,
            metric: "val_loss".into(),
            now: &now,
            resume: snap,
            on_save: &mut on_save,
        };
        let r = train_with_checkpoints(
            &wide,
            &p,
            Device::Cpu,
            1,
            &stop,
            &mut cache,
            Some(&mut ck),
            &mut |_| {},
        );
        match r {
            Err(TrainError::Failed(e)) => {
                assert!(
                    e.contains("latest.snap does not fit this trial: model."),
                    "{e}"
                )
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_cuda_out_of_memory_panic_keeps_its_whole_first_line() {
        let p = r#"called `Result::unwrap()` on an `Err` value: Torch("CUDA out of memory. Tried to allocate 32.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 12.50 GiB is free. Of the allocated memory 65.60 GiB is allocated by PyTorch\nException raised from malloc at CUDACachingAllocator.cpp:1\nframe #0: x")"#;
        assert!(is_oom(p));
        let e = TrainError::OutOfMemory(torch_message(p));
        assert_eq!(
            e.to_string(),
            "oom: CUDA out of memory. Tried to allocate 32.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 12.50 GiB is free. Of the allocated memory 65.60 GiB is allocated by PyTorch"
        );
        assert!(!is_oom("shape mismatch [2, 3]"));
    }
}
