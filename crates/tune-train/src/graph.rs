//! One training step, run eagerly or replayed from a CUDA graph (`[trial] cuda_graphs`).
//!
//! A small model's step on a GPU is a few hundred microseconds of kernels and many more of
//! launching them. After [`WARMUP_STEPS`] eager steps on a side stream, the whole step (forward
//! and loss under autocast, backward, fp16 unscaling and overflow check, clipping, the fused
//! Adam/AdamW step, the skipped-step count and the device-side loss tally) is captured once in
//! a CUDA graph and each later step is one replay. What makes that possible:
//! - static inputs: each step copies its micro-batches into device tensors the graph reads
//!   ([`Statics`]); a batch of another shape runs eagerly ([`plan`]). The loaders hand out
//!   full batches only (the partial tail of an epoch is dropped), so in practice every step
//!   after the warm-up replays;
//! - the learning rate in a device tensor that the fused kernel reads
//!   ([`FusedAdam::lr_on_device`](crate::optim::FusedAdam::lr_on_device)), so a schedule
//!   changes it between replays without a new capture;
//! - optimizer and scaler state allocated before the capture (the warm-up steps do it);
//! - gradients set to none before the capture, so the captured backward writes rather than
//!   adds them; from then on they are never set to none again (the graph keeps writing the
//!   tensors it captured), and an eager step after the capture zeroes them in place first.
//!
//! What cannot be captured falls back to eager steps with a one-line reason in the trial's
//! log ([`unsupported`]): libtorch's own optimizers (SGD, RMSprop take the learning rate as a
//! number, fixed at capture), dropout (its masks come from the generator's state, which this
//! trainer does not register with the graph), a `tune-worker` built without the `cuda` feature,
//! and any error in the capture itself.
//!
//! What does not belong here: the training loop around the step (`fit`), the kernels (`optim`).

use tch::{Device, Tensor};

use super::data::Batch;
use super::fit::{Session, TrainError};
use super::loss_book::LossBook;
use super::optim::{self, Optimizer};
use tune::builtin::{CudaGraphs, Hyper, OptimizerKind};

/// Eager steps before the capture, as PyTorch's whole-network capture example does: enough for
/// lazy initialisation (optimizer state, cuBLAS workspaces, the autograd engine) to be done.
pub const WARMUP_STEPS: u32 = 3;

/// What a `tune-worker` built without the `cuda` feature says when graphs are asked for.
pub const NOT_BUILT: &str = "CUDA graphs need tune-worker built with --features tune-train/cuda";

/// Why the step of `h` on `device` is not captured, or `None` when it is.
pub fn unsupported(h: &Hyper, device: Device) -> Option<String> {
    if !device.is_cuda() {
        return Some("CUDA graphs are for CUDA devices; on the CPU every step is eager".into());
    }
    if !matches!(h.optimizer, OptimizerKind::Adam | OptimizerKind::Adamw) {
        return Some(format!(
            "optimizer {}: libtorch's step takes the learning rate as a number fixed at capture (only adam and adamw, the fused kernel, are captured)",
            format!("{:?}", h.optimizer).to_lowercase()
        ));
    }
    if h.dropout > 0.0 {
        return Some(format!(
            "dropout {}: its random masks are not captured",
            h.dropout
        ));
    }
    if h.checkpointing {
        // A checkpointed block calls back into Rust in the backward pass (and saves and restores
        // the generator's state): work a replay would skip.
        return Some(
            "checkpointing: its blocks recompute through Rust in the backward pass".into(),
        );
    }
    if !cfg!(feature = "cuda") {
        return Some(NOT_BUILT.into());
    }
    None
}

/// The one line a trial's log gets when `setting` asks for graphs that the step cannot use;
/// `None` when nothing is to be said (graphs off, used, or `auto` on the CPU).
pub fn fallback_message(setting: CudaGraphs, h: &Hyper, device: Device) -> Option<String> {
    let why = unsupported(h, device)?;
    match setting {
        CudaGraphs::Off => None,
        CudaGraphs::Auto if !device.is_cuda() => None,
        CudaGraphs::Auto | CudaGraphs::On => Some(format!(
            "tune worker: CUDA graphs off for this trial: {why}; training eagerly"
        )),
    }
}

/// How one step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Eagerly, as without graphs (never captured, or a batch of another shape).
    Eager,
    /// Eagerly on the side stream, from the static inputs: one of the warm-up steps.
    Warmup,
    /// Captured from the static inputs, then replayed once.
    Capture,
    /// Replayed.
    Replay,
}

/// Where a graphed run is: `warmed` warm-up steps done, a graph `captured` or not; `fits`:
/// whether this step's micro-batches have the static inputs' shapes and kinds.
pub fn plan(warmed: u32, captured: bool, fits: bool) -> Plan {
    if !fits {
        Plan::Eager
    } else if captured {
        Plan::Replay
    } else if warmed < WARMUP_STEPS {
        Plan::Warmup
    } else {
        Plan::Capture
    }
}

/// The device tensors a graph reads its micro-batches from: `k` slots of one batch each.
struct Statics {
    x: Tensor,
    y: Tensor,
}

impl Statics {
    fn like(batches: &[Batch]) -> Statics {
        let stack = |t: &Tensor| {
            let mut shape = vec![batches.len() as i64];
            shape.extend(t.size());
            Tensor::zeros(shape, (t.kind(), t.device()))
        };
        Statics {
            x: stack(&batches[0].x),
            y: stack(&batches[0].y),
        }
    }

    /// Whether `batches` fill the slots exactly (number, shapes, kinds, device).
    fn fits(&self, batches: &[Batch]) -> bool {
        let fits = |s: &Tensor, t: &Tensor| {
            s.size()[1..] == t.size()[..] && s.kind() == t.kind() && s.device() == t.device()
        };
        self.x.size()[0] == batches.len() as i64
            && batches
                .iter()
                .all(|b| fits(&self.x, &b.x) && fits(&self.y, &b.y))
    }

    fn fill(&mut self, batches: &[Batch]) {
        for (i, b) in batches.iter().enumerate() {
            self.x.get(i as i64).copy_(&b.x);
            self.y.get(i as i64).copy_(&b.y);
        }
    }

    fn batches(&self) -> Vec<Batch> {
        (0..self.x.size()[0])
            .map(|i| Batch {
                x: self.x.get(i),
                y: self.y.get(i),
            })
            .collect()
    }
}

/// Forward and backward over `batches`, the loss tally, and the optimizer step; the gradients
/// are set to none afterwards (`clear`) or left where they are (inside and after a capture).
fn run_step(
    s: &mut Session,
    batches: Vec<Batch>,
    tally: &mut LossBook,
    clear: bool,
) -> Result<Tensor, TrainError> {
    let k = batches.len() as i64;
    let mut it = batches.into_iter();
    let mut next = || {
        it.next()
            .ok_or_else(|| TrainError::Failed("fewer micro-batches than accumulation".into()))
    };
    let loss = s.accumulate(&mut next, k)?;
    tally.add(&loss);
    if clear {
        s.apply()?;
    } else {
        s.update()?;
    }
    Ok(loss)
}

/// The training step of one trial, eager or graphed.
pub enum Stepper {
    Eager,
    Graphed(Box<Graphed>),
}

/// A graphed step's state: the graph, its static inputs and captured loss, the warm-up count.
pub struct Graphed {
    graph: ffi::Graph,
    statics: Option<Statics>,
    loss: Option<Tensor>,
    warmed: u32,
}

impl Stepper {
    /// The stepper for `h` on `device` under `setting`; says in the trial's log (stderr) why
    /// graphs are not used where that is news (see [`fallback_message`]).
    pub fn new(setting: CudaGraphs, h: &Hyper, device: Device, s: &mut Session) -> Stepper {
        if setting == CudaGraphs::Off {
            return Stepper::Eager;
        }
        if unsupported(h, device).is_some() {
            // Said only where it is news: never for `auto` on the CPU.
            if let Some(line) = fallback_message(setting, h, device) {
                eprintln!("{line}");
            }
            return Stepper::Eager;
        }
        let graph = match ffi::Graph::new(device) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("tune worker: CUDA graphs off for this trial: {e}; training eagerly");
                return Stepper::Eager;
            }
        };
        if let Optimizer::Fused(f) = &mut s.opt {
            f.lr_on_device();
        }
        Stepper::Graphed(Box::new(Graphed {
            graph,
            statics: None,
            loss: None,
            warmed: 0,
        }))
    }

    /// Whether steps are being replayed from a captured graph.
    pub fn replaying(&self) -> bool {
        matches!(self, Stepper::Graphed(g) if g.loss.is_some())
    }

    /// One optimizer step over `k` micro-batches from `next`: the step's mean loss (detached,
    /// on the device), counted in `tally`.
    pub fn step(
        &mut self,
        s: &mut Session,
        next: &mut dyn FnMut() -> Result<Batch, TrainError>,
        k: i64,
        tally: &mut LossBook,
    ) -> Result<Tensor, TrainError> {
        let Stepper::Graphed(g) = self else {
            let loss = s.accumulate(next, k)?;
            tally.add(&loss);
            s.apply()?;
            return Ok(loss);
        };
        let batches = (0..k).map(|_| next()).collect::<Result<Vec<_>, _>>()?;
        let statics = g.statics.get_or_insert_with(|| Statics::like(&batches));
        match plan(g.warmed, g.loss.is_some(), statics.fits(&batches)) {
            Plan::Eager => {
                if g.loss.is_some() {
                    optim::zero_grads_in_place(s.params()).map_err(TrainError::Failed)?;
                }
                run_step(s, batches, tally, g.loss.is_none())
            }
            Plan::Warmup => {
                statics.fill(&batches);
                let fed = statics.batches();
                g.graph.enter_stream().map_err(TrainError::Failed)?;
                let r = run_step(s, fed, tally, true);
                g.warmed += 1;
                if r.is_err() || g.warmed == WARMUP_STEPS {
                    g.graph.exit_stream().map_err(TrainError::Failed)?;
                }
                r
            }
            Plan::Capture => {
                statics.fill(&batches);
                let mut fed = Some(statics.batches());
                let mut captured = None;
                let r = g.graph.capture(&mut || {
                    let batches = fed.take().ok_or("the step was captured twice")?;
                    let loss = run_step(s, batches, tally, false).map_err(|e| e.to_string())?;
                    captured = Some(loss);
                    Ok(())
                });
                match (r, captured) {
                    (Ok(()), Some(loss)) => {
                        g.graph.replay().map_err(TrainError::Failed)?;
                        let out = loss.shallow_clone();
                        g.loss = Some(loss);
                        Ok(out)
                    }
                    (r, _) => {
                        let why = r.err().unwrap_or_else(|| "the step gave no loss".into());
                        eprintln!(
                            "tune worker: CUDA graphs off for this trial: capturing the step failed: {why}; training eagerly"
                        );
                        // The failed capture may have left gradients in the graph's memory;
                        // nothing of it ran, so this step is taken eagerly afresh.
                        optim::grads_to_none(s.params());
                        *self = Stepper::Eager;
                        run_step(s, batches, tally, true)
                    }
                }
            }
            Plan::Replay => {
                statics.fill(&batches);
                g.graph.replay().map_err(TrainError::Failed)?;
                match &g.loss {
                    Some(loss) => Ok(loss.shallow_clone()),
                    None => Err(TrainError::Failed("replayed before any capture".into())),
                }
            }
        }
    }
}

/// The graph shim's C API (`src/graph_shim.cpp`), built with the `cuda` feature only.
#[cfg(feature = "cuda")]
mod ffi {
    use super::*;
    use std::ffi::{c_char, c_int, c_void};

    #[repr(C)]
    struct TuneGraph {
        _private: [u8; 0],
    }

    unsafe extern "C" {
        fn tune_graph_new(device: c_int, err: *mut c_char, err_len: c_int) -> *mut TuneGraph;
        fn tune_graph_enter_stream(g: *mut TuneGraph, err: *mut c_char, err_len: c_int) -> c_int;
        fn tune_graph_exit_stream(g: *mut TuneGraph, err: *mut c_char, err_len: c_int) -> c_int;
        fn tune_graph_capture(
            g: *mut TuneGraph,
            body: extern "C" fn(*mut c_void) -> c_int,
            ctx: *mut c_void,
            err: *mut c_char,
            err_len: c_int,
        ) -> c_int;
        fn tune_graph_replay(g: *mut TuneGraph, err: *mut c_char, err_len: c_int) -> c_int;
        fn tune_graph_free(g: *mut TuneGraph);
    }

    /// A graph holder on one device (owned; freed on drop).
    pub struct Graph(*mut TuneGraph);

    /// What the capture callback runs, and what it says when it fails.
    struct Body<'a> {
        f: &'a mut dyn FnMut() -> Result<(), String>,
        error: Option<String>,
    }

    /// Runs the body; a Rust panic (tch panics on a libtorch error) is caught here, since it
    /// must not unwind through C++.
    extern "C" fn trampoline(ctx: *mut c_void) -> c_int {
        // SAFETY: `ctx` is the `Body` that `capture` passed, alive for the whole call.
        let body = unsafe { &mut *(ctx as *mut Body<'_>) };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (body.f)()));
        let error = match r {
            Ok(Ok(())) => return 0,
            Ok(Err(e)) => e,
            Err(p) => crate::data::panic_message(&p),
        };
        body.error = Some(error);
        1
    }

    /// Runs a shim call that reports a C++ exception through an error buffer.
    fn checked(call: impl FnOnce(*mut c_char, c_int) -> c_int) -> Result<c_int, String> {
        let mut buf = vec![0u8; 1024];
        let rc = call(buf.as_mut_ptr() as *mut c_char, buf.len() as c_int);
        if rc != -1 {
            return Ok(rc);
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Err(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    impl Graph {
        pub fn new(device: Device) -> Result<Graph, String> {
            let index = match device {
                Device::Cuda(i) => i as c_int,
                _ => return Err("CUDA graphs are for CUDA devices".into()),
            };
            let mut ptr = std::ptr::null_mut();
            // SAFETY: the shim writes at most `len` bytes of message and catches exceptions.
            checked(|err, len| {
                ptr = unsafe { tune_graph_new(index, err, len) };
                if ptr.is_null() { -1 } else { 0 }
            })
            .map_err(|e| format!("cannot make a CUDA graph: {e}"))?;
            Ok(Graph(ptr))
        }

        pub fn enter_stream(&mut self) -> Result<(), String> {
            // SAFETY: `self.0` is a live holder from `tune_graph_new`.
            checked(|err, len| unsafe { tune_graph_enter_stream(self.0, err, len) })
                .map(|_| ())
                .map_err(|e| format!("the warm-up stream: {e}"))
        }

        pub fn exit_stream(&mut self) -> Result<(), String> {
            // SAFETY: as above.
            checked(|err, len| unsafe { tune_graph_exit_stream(self.0, err, len) })
                .map(|_| ())
                .map_err(|e| format!("the warm-up stream: {e}"))
        }

        /// Captures what `f` launches; nothing of it runs until [`Graph::replay`].
        pub fn capture(&mut self, f: &mut dyn FnMut() -> Result<(), String>) -> Result<(), String> {
            let mut body = Body { f, error: None };
            let ctx = &mut body as *mut Body<'_> as *mut c_void;
            // SAFETY: `body` outlives the call; the shim calls `trampoline` on this thread only.
            let rc = checked(|err, len| unsafe {
                tune_graph_capture(self.0, trampoline, ctx, err, len)
            })?;
            match (rc, body.error) {
                (0, _) => Ok(()),
                (_, Some(e)) => Err(e),
                (rc, None) => Err(format!("the capture ended with code {rc}")),
            }
        }

        pub fn replay(&mut self) -> Result<(), String> {
            // SAFETY: as above.
            checked(|err, len| unsafe { tune_graph_replay(self.0, err, len) })
                .map(|_| ())
                .map_err(|e| format!("replaying the CUDA graph: {e}"))
        }
    }

    impl Drop for Graph {
        fn drop(&mut self) {
            // SAFETY: `self.0` came from `tune_graph_new` and is freed only here.
            unsafe { tune_graph_free(self.0) }
        }
    }
}

/// Without the `cuda` feature there is no graph to make: [`unsupported`] says so first, and
/// this is what a caller reaching past it gets.
#[cfg(not(feature = "cuda"))]
mod ffi {
    use super::*;

    pub struct Graph;

    impl Graph {
        pub fn new(_device: Device) -> Result<Graph, String> {
            Err(NOT_BUILT.into())
        }
        pub fn enter_stream(&mut self) -> Result<(), String> {
            Err(NOT_BUILT.into())
        }
        pub fn exit_stream(&mut self) -> Result<(), String> {
            Err(NOT_BUILT.into())
        }
        pub fn capture(
            &mut self,
            _f: &mut dyn FnMut() -> Result<(), String>,
        ) -> Result<(), String> {
            Err(NOT_BUILT.into())
        }
        pub fn replay(&mut self) -> Result<(), String> {
            Err(NOT_BUILT.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    fn hyper(optimizer: OptimizerKind, dropout: f64) -> Hyper {
        Hyper {
            lr: 1e-3,
            optimizer,
            reference_batch: 8,
            dropout,
            ..crate::test_hyper()
        }
    }

    #[test]
    fn steps_warm_up_then_capture_once_then_replay_and_a_batch_of_another_shape_runs_eagerly() {
        let plans: Vec<Plan> = (0..WARMUP_STEPS)
            .map(|w| plan(w, false, true))
            .chain([
                plan(WARMUP_STEPS, false, true),
                plan(WARMUP_STEPS, true, true),
            ])
            .collect();
        let mut want = vec![Plan::Warmup; WARMUP_STEPS as usize];
        want.extend([Plan::Capture, Plan::Replay]);
        assert_eq!(plans, want);
        // A partial batch never reaches the graph, before or after the capture.
        assert_eq!(plan(0, false, false), Plan::Eager);
        assert_eq!(plan(WARMUP_STEPS, false, false), Plan::Eager);
        assert_eq!(plan(WARMUP_STEPS, true, false), Plan::Eager);
    }

    #[test]
    fn what_cannot_be_captured_says_why_and_the_cpu_says_nothing_unless_asked() {
        let adam = hyper(OptimizerKind::Adamw, 0.0);
        let gpu = Device::Cuda(0);
        assert_eq!(fallback_message(CudaGraphs::Auto, &adam, Device::Cpu), None);
        assert_eq!(fallback_message(CudaGraphs::Off, &adam, Device::Cpu), None);
        assert_eq!(
            fallback_message(CudaGraphs::On, &adam, Device::Cpu).as_deref(),
            Some(
                "tune worker: CUDA graphs off for this trial: CUDA graphs are for CUDA devices; on the CPU every step is eager; training eagerly"
            )
        );
        let sgd = unsupported(&hyper(OptimizerKind::Sgd, 0.0), gpu).expect("sgd");
        assert!(sgd.starts_with("optimizer sgd: "), "{sgd}");
        let rms = unsupported(&hyper(OptimizerKind::Rmsprop, 0.0), gpu).expect("rmsprop");
        assert!(rms.starts_with("optimizer rmsprop: "), "{rms}");
        let drop = unsupported(&hyper(OptimizerKind::Adam, 0.1), gpu).expect("dropout");
        assert_eq!(drop, "dropout 0.1: its random masks are not captured");
        let ckpt = Hyper {
            checkpointing: true,
            ..hyper(OptimizerKind::Adam, 0.0)
        };
        let why = unsupported(&ckpt, gpu).expect("checkpointing");
        assert!(why.starts_with("checkpointing: "), "{why}");
        let line = fallback_message(CudaGraphs::Auto, &hyper(OptimizerKind::Sgd, 0.0), gpu);
        assert!(line.is_some_and(|l| l.contains("optimizer sgd")));
        assert_eq!(
            fallback_message(CudaGraphs::Off, &hyper(OptimizerKind::Sgd, 0.0), gpu),
            None
        );
        if cfg!(feature = "cuda") {
            assert_eq!(unsupported(&adam, gpu), None);
        } else {
            assert_eq!(unsupported(&adam, gpu).as_deref(), Some(NOT_BUILT));
        }
    }

    #[test]
    fn static_inputs_take_batches_of_their_shape_only_and_give_them_back_in_order() {
        let batch = |v: f64, n: i64| Batch {
            x: Tensor::full([n, 3], v, (Kind::Float, Device::Cpu)),
            y: Tensor::full([n], v as i64, (Kind::Int64, Device::Cpu)),
        };
        let two = [batch(1.0, 4), batch(2.0, 4)];
        let mut st = Statics::like(&two);
        assert_eq!(st.x.size(), [2, 4, 3]);
        assert!(st.fits(&two));
        let (x_ptr, y_ptr) = (st.x.data_ptr(), st.y.data_ptr());
        st.fill(&two);
        assert_eq!(
            (st.x.data_ptr(), st.y.data_ptr()),
            (x_ptr, y_ptr),
            "copied in place"
        );
        let back = st.batches();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].x.double_value(&[3, 2]), 2.0);
        assert_eq!(back[0].y.int64_value(&[0]), 1);
        // The partial tail of an epoch, a different accumulation, another dtype: eager.
        assert!(!st.fits(&[batch(1.0, 4), batch(2.0, 3)]));
        assert!(!st.fits(&[batch(1.0, 4)]));
        let half = Batch {
            x: two[0].x.to_kind(Kind::Half),
            y: two[0].y.shallow_clone(),
        };
        assert!(!st.fits(&[half, batch(2.0, 4)]));
    }
}
