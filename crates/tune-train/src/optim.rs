//! Optimizers: `sgd` (momentum, Nesterov), `rmsprop`, and on the CPU `adam` and `adamw`,
//! through libtorch's own C++ implementations; on a GPU `adam` and `adamw` through libtorch's
//! fused kernel (one kernel per step for all the parameters, as `torch.optim.Adam(fused=True)`).
//! Each with the trial's weight decay.
//!
//! libtorch's C++ Adam loops over the parameters with a dozen small ops each: on a GPU, where
//! a small model's step is bound by kernel launches, that loop cost tune's trainer 20% against
//! PyTorch eager's multi-tensor Adam on a ResNet (BENCHMARKS.md, "On a GPU"). The fused kernel
//! does the same arithmetic (bias-corrected moments; Adam's weight decay added to the gradient,
//! AdamW's decoupled) in one launch, and with fp16 takes the loss scaler's overflow flag on the
//! device, so that an overflowing step is skipped without a sync. On the CPU, where there are
//! no launches to save, its CPU kernel measured from 8% slower (ResNet, CNN) to 20% faster (MLP)
//! than libtorch's loop, so the CPU keeps the loop.

use std::ffi::{c_char, c_int};

use tch::{Kind, Tensor, nn};
use torch_sys::{C_optimizer, C_tensor};

use tune::builtin::{Hyper, OptimizerKind};

unsafe extern "C" {
    fn tune_fused_adam(
        params: *const *mut C_tensor,
        exp_avgs: *const *mut C_tensor,
        exp_avg_sqs: *const *mut C_tensor,
        steps: *const *mut C_tensor,
        n: c_int,
        lr: f64,
        lr_t: *mut C_tensor,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        decoupled: c_int,
        found_inf: *mut C_tensor,
        err: *mut c_char,
        err_len: c_int,
    ) -> c_int;
    fn tune_amp_unscale(
        params: *const *mut C_tensor,
        n: c_int,
        found_inf: *mut C_tensor,
        inv_scale: *mut C_tensor,
        err: *mut c_char,
        err_len: c_int,
    ) -> c_int;
    fn tune_clip_grad_norm(
        params: *const *mut C_tensor,
        n: c_int,
        max_norm: f64,
        err: *mut c_char,
        err_len: c_int,
    ) -> c_int;
    fn tune_grads_to_none(params: *const *mut C_tensor, n: c_int);
    fn tune_optimizer_save(
        opt: *mut C_optimizer,
        out: *mut *mut c_char,
        len: *mut usize,
        err: *mut c_char,
        err_len: c_int,
    ) -> c_int;
    fn tune_optimizer_load(
        opt: *mut C_optimizer,
        data: *const c_char,
        len: usize,
        device: c_int,
        err: *mut c_char,
        err_len: c_int,
    ) -> c_int;
    fn tune_free_bytes(p: *mut c_char);
    fn tune_grads_zero(
        params: *const *mut C_tensor,
        n: c_int,
        err: *mut c_char,
        err_len: c_int,
    ) -> c_int;
}

/// tch's handles of `ts`, for the shim (which reads them, and writes through them in place).
fn handles(ts: &[Tensor]) -> Vec<*mut C_tensor> {
    ts.iter().map(|t| t.as_ptr() as *mut C_tensor).collect()
}

/// Runs a shim call that reports a C++ exception through an error buffer.
pub(crate) fn checked(
    what: &str,
    call: impl FnOnce(*mut c_char, c_int) -> c_int,
) -> Result<(), String> {
    let mut buf = vec![0u8; 1024];
    let rc = call(buf.as_mut_ptr() as *mut c_char, buf.len() as c_int);
    if rc == 0 {
        return Ok(());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Err(format!("{what}: {}", String::from_utf8_lossy(&buf[..end])))
}

/// Multiplies the gradients of `params` by `inv_scale` and sets `found_inf` where one is not
/// finite: one multi-tensor kernel, nothing read back.
pub fn unscale(params: &[Tensor], found_inf: &Tensor, inv_scale: &Tensor) -> Result<(), String> {
    let p = handles(params);
    checked("unscaling the gradients", |err, len| unsafe {
        tune_amp_unscale(
            p.as_ptr(),
            p.len() as c_int,
            found_inf.as_ptr() as *mut C_tensor,
            inv_scale.as_ptr() as *mut C_tensor,
            err,
            len,
        )
    })
}

/// Scales the gradients of `params` to a global 2-norm of at most `max_norm`, on the device.
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64) -> Result<(), String> {
    let p = handles(params);
    checked("clipping the gradients", |err, len| unsafe {
        tune_clip_grad_norm(p.as_ptr(), p.len() as c_int, max_norm, err, len)
    })
}

/// Zeroes the defined gradients of `params` in place (one multi-tensor kernel per dtype), so
/// that they stay the tensors a CUDA graph captured.
pub fn zero_grads_in_place(params: &[Tensor]) -> Result<(), String> {
    let p = handles(params);
    checked("zeroing the gradients", |err, len| unsafe {
        tune_grads_zero(p.as_ptr(), p.len() as c_int, err, len)
    })
}

/// Drops the gradients of `params` (`zero_grad(set_to_none=True)`).
pub fn grads_to_none(params: &[Tensor]) {
    let p = handles(params);
    // SAFETY: the shim only resets each handle's gradient; it throws nothing.
    unsafe { tune_grads_to_none(p.as_ptr(), p.len() as c_int) }
}

/// Adam or AdamW over a model's parameters in libtorch's fused kernel.
pub struct FusedAdam {
    params: Vec<Tensor>,
    exp_avg: Vec<Tensor>,
    exp_avg_sq: Vec<Tensor>,
    /// Steps taken, per parameter (f32 scalars on the parameter's device, as the kernel wants).
    steps: Vec<Tensor>,
    lr: f64,
    /// The learning rate as a one-element f32 tensor on the device, read by the kernel there
    /// (see [`FusedAdam::lr_on_device`]); `None`: passed as a number at each step.
    lr_tensor: Option<Tensor>,
    betas: (f64, f64),
    weight_decay: f64,
    eps: f64,
    decoupled: bool,
}

impl FusedAdam {
    pub fn new(params: Vec<Tensor>, lr: f64, weight_decay: f64, decoupled: bool) -> FusedAdam {
        let exp_avg = params.iter().map(Tensor::zeros_like).collect();
        let exp_avg_sq = params.iter().map(Tensor::zeros_like).collect();
        let steps = params
            .iter()
            .map(|p| Tensor::zeros([], (Kind::Float, p.device())))
            .collect();
        FusedAdam {
            params,
            exp_avg,
            exp_avg_sq,
            steps,
            lr,
            lr_tensor: None,
            betas: (0.9, 0.999),
            weight_decay,
            eps: 1e-8,
            decoupled,
        }
    }

    /// Keeps the learning rate in a device tensor from now on, which each step's kernel reads
    /// there: a CUDA graph replays the kernel with the address it captured, so this is how a
    /// schedule reaches a replayed step without a new capture. `set_lr` then writes the
    /// tensor (one small kernel, no sync).
    pub fn lr_on_device(&mut self) {
        if self.lr_tensor.is_none() {
            let device = self.steps.first().map_or(tch::Device::Cpu, Tensor::device);
            self.lr_tensor = Some(Tensor::full([1], self.lr, (Kind::Float, device)));
        }
    }

    pub fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
        if let Some(t) = &mut self.lr_tensor {
            let _ = t.fill_(lr);
        }
    }

    /// One step over the parameters that have a gradient; with `found_inf` nonzero (fp16
    /// overflow) the parameters and moments stay as they were.
    pub fn step(&mut self, found_inf: Option<&Tensor>) -> Result<(), String> {
        let (p, m, v, s) = (
            handles(&self.params),
            handles(&self.exp_avg),
            handles(&self.exp_avg_sq),
            handles(&self.steps),
        );
        let inf = found_inf.map_or(std::ptr::null_mut(), |t| t.as_ptr() as *mut C_tensor);
        let lr_t = self
            .lr_tensor
            .as_ref()
            .map_or(std::ptr::null_mut(), |t| t.as_ptr() as *mut C_tensor);
        checked("the fused Adam step", |err, len| unsafe {
            tune_fused_adam(
                p.as_ptr(),
                m.as_ptr(),
                v.as_ptr(),
                s.as_ptr(),
                p.len() as c_int,
                self.lr,
                lr_t,
                self.betas.0,
                self.betas.1,
                self.weight_decay,
                self.eps,
                self.decoupled as c_int,
                inf,
                err,
                len,
            )
        })
    }
}

/// One of libtorch's C++ optimizers (SGD, RMSprop, Adam, AdamW), held through torch-sys's
/// handle rather than `tch::nn::Optimizer`, which keeps the handle to itself: a checkpoint
/// needs it to save and load the optimizer's state (`snapshot_shim.cpp`). It is built as
/// `tch::nn::OptimizerConfig::build` builds it: the trainable variables in order, one group.
pub struct LibtorchOptimizer {
    ptr: *mut C_optimizer,
    device: tch::Device,
}

// SAFETY: the optimizer is owned by this value alone and used from one thread at a time.
unsafe impl Send for LibtorchOptimizer {}

/// The pending libtorch error of the last torch-sys call, if any (torch-sys keeps it in a
/// global slot that each call sets on failure).
fn torch_sys_error() -> Option<String> {
    // SAFETY: returns a malloc'd C string or null; we free what we read.
    unsafe {
        let p = torch_sys::get_and_reset_last_err();
        if p.is_null() {
            return None;
        }
        let s = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        libc::free(p as *mut libc::c_void);
        Some(s)
    }
}

impl LibtorchOptimizer {
    fn new(
        ptr: *mut C_optimizer,
        params: &[Tensor],
        device: tch::Device,
    ) -> Result<LibtorchOptimizer, String> {
        if let Some(e) = torch_sys_error() {
            return Err(e);
        }
        if ptr.is_null() {
            return Err("libtorch returned no optimizer".into());
        }
        let opt = LibtorchOptimizer { ptr, device };
        for p in params {
            // SAFETY: both handles are live; libtorch copies the tensor handle.
            unsafe { torch_sys::ato_add_parameters(opt.ptr, p.as_ptr() as *mut C_tensor, 0) };
            if let Some(e) = torch_sys_error() {
                return Err(e);
            }
        }
        Ok(opt)
    }

    pub fn sgd(
        params: &[Tensor],
        lr: f64,
        momentum: f64,
        wd: f64,
        nesterov: bool,
    ) -> Result<LibtorchOptimizer, String> {
        // SAFETY: plain constructor; errors come back through `torch_sys_error`.
        let ptr = unsafe { torch_sys::ato_sgd(lr, momentum, 0.0, wd, c_int::from(nesterov)) };
        Self::new(ptr, params, device_of(params))
    }

    pub fn adam(
        params: &[Tensor],
        lr: f64,
        wd: f64,
        decoupled: bool,
    ) -> Result<LibtorchOptimizer, String> {
        // SAFETY: as above.
        let ptr = unsafe {
            if decoupled {
                torch_sys::ato_adamw(lr, 0.9, 0.999, wd, 1e-8, false)
            } else {
                torch_sys::ato_adam(lr, 0.9, 0.999, wd, 1e-8, false)
            }
        };
        Self::new(ptr, params, device_of(params))
    }

    pub fn rms_prop(
        params: &[Tensor],
        lr: f64,
        wd: f64,
        momentum: f64,
    ) -> Result<LibtorchOptimizer, String> {
        // SAFETY: as above.
        let ptr = unsafe { torch_sys::ato_rms_prop(lr, 0.99, 1e-8, wd, momentum, 0) };
        Self::new(ptr, params, device_of(params))
    }

    fn call(&self, f: impl FnOnce(*mut C_optimizer)) -> Result<(), String> {
        f(self.ptr);
        torch_sys_error().map_or(Ok(()), Err)
    }

    pub fn step(&mut self) -> Result<(), String> {
        // SAFETY: live handle.
        self.call(|p| unsafe { torch_sys::ato_step(p) })
    }

    pub fn zero_grad(&mut self) -> Result<(), String> {
        // SAFETY: live handle.
        self.call(|p| unsafe { torch_sys::ato_zero_grad(p) })
    }

    pub fn set_lr(&mut self, lr: f64) -> Result<(), String> {
        // SAFETY: live handle.
        self.call(|p| unsafe { torch_sys::ato_set_learning_rate(p, lr) })
    }

    /// The optimizer's whole state as the bytes of a libtorch archive.
    pub fn save_state(&self) -> Result<Vec<u8>, String> {
        let mut out: *mut c_char = std::ptr::null_mut();
        let mut len = 0usize;
        checked("saving the optimizer state", |err, elen| unsafe {
            tune_optimizer_save(self.ptr, &mut out, &mut len, err, elen)
        })?;
        // SAFETY: on success the shim handed us a malloc'd buffer of `len` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(out as *const u8, len).to_vec() };
        // SAFETY: freed once, by the allocator that made it.
        unsafe { tune_free_bytes(out) };
        Ok(bytes)
    }

    /// Replaces the optimizer's state with what [`LibtorchOptimizer::save_state`] wrote for
    /// an optimizer of the same kind over parameters of the same shapes.
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<(), String> {
        let device = match self.device {
            tch::Device::Cuda(i) => i as c_int,
            _ => -1,
        };
        checked("loading the optimizer state", |err, elen| unsafe {
            tune_optimizer_load(
                self.ptr,
                bytes.as_ptr() as *const c_char,
                bytes.len(),
                device,
                err,
                elen,
            )
        })
    }
}

impl Drop for LibtorchOptimizer {
    fn drop(&mut self) {
        // SAFETY: the handle is ours and freed once.
        unsafe { torch_sys::ato_free(self.ptr) };
    }
}

fn device_of(params: &[Tensor]) -> tch::Device {
    params.first().map_or(tch::Device::Cpu, Tensor::device)
}

/// The optimizer of a training session.
pub enum Optimizer {
    /// libtorch's C++ optimizer (SGD, RMSprop; Adam and AdamW on the CPU).
    Libtorch(LibtorchOptimizer),
    /// Adam and AdamW on a GPU.
    Fused(FusedAdam),
}

/// An optimizer's state for a checkpoint: libtorch's archive, or the fused Adam's tensors
/// (first moments, second moments, step counts, one of each per parameter).
pub enum OptimizerState {
    Archive(Vec<u8>),
    Fused {
        exp_avg: Vec<Tensor>,
        exp_avg_sq: Vec<Tensor>,
        steps: Vec<Tensor>,
    },
}

impl Optimizer {
    /// One step from the accumulated gradients. `found_inf`: the fp16 loss scaler's overflow
    /// flag, which the fused kernel reads on the device; libtorch's optimizers cannot, and
    /// their callers skip the step themselves.
    pub fn step(&mut self, found_inf: Option<&Tensor>) -> Result<(), String> {
        match self {
            Optimizer::Libtorch(o) => o.step(),
            Optimizer::Fused(f) => f.step(found_inf),
        }
    }

    /// Whether `step` honours the overflow flag on the device.
    pub fn skips_on_device(&self) -> bool {
        matches!(self, Optimizer::Fused(_))
    }

    pub fn set_lr(&mut self, lr: f64) {
        match self {
            // Setting a number on a live optimizer cannot fail.
            Optimizer::Libtorch(o) => {
                let _ = o.set_lr(lr);
            }
            Optimizer::Fused(f) => f.set_lr(lr),
        }
    }

    /// Clears the gradients: set to none (the next backward writes them afresh).
    pub fn zero_grad(&mut self, params: &[Tensor]) {
        match self {
            // libtorch's `zero_grad` sets them to none too; it cannot fail on a live handle.
            Optimizer::Libtorch(o) => {
                let _ = o.zero_grad();
            }
            Optimizer::Fused(_) => grads_to_none(params),
        }
    }

    /// A copy of the optimizer's state (on the CPU for the fused one's tensors).
    pub fn state(&self) -> Result<OptimizerState, String> {
        match self {
            Optimizer::Libtorch(o) => o.save_state().map(OptimizerState::Archive),
            Optimizer::Fused(f) => {
                let copy =
                    |ts: &[Tensor]| ts.iter().map(|t| t.to_device(tch::Device::Cpu)).collect();
                Ok(OptimizerState::Fused {
                    exp_avg: copy(&f.exp_avg),
                    exp_avg_sq: copy(&f.exp_avg_sq),
                    steps: copy(&f.steps),
                })
            }
        }
    }

    /// Puts back a state [`Optimizer::state`] took from an optimizer of the same kind over
    /// parameters of the same shapes. The fused one's tensors are written in place, so that a
    /// CUDA graph captured later (or earlier) steps the restored state.
    pub fn restore(&mut self, state: &OptimizerState) -> Result<(), String> {
        match (self, state) {
            (Optimizer::Libtorch(o), OptimizerState::Archive(bytes)) => o.load_state(bytes),
            (
                Optimizer::Fused(f),
                OptimizerState::Fused {
                    exp_avg,
                    exp_avg_sq,
                    steps,
                },
            ) => {
                let n = f.params.len();
                if exp_avg.len() != n || exp_avg_sq.len() != n || steps.len() != n {
                    return Err(format!(
                        "the checkpoint's optimizer state holds {} parameters, the model {n}",
                        exp_avg.len()
                    ));
                }
                tch::no_grad(|| -> Result<(), String> {
                    for (dst, src) in [
                        (&mut f.exp_avg, exp_avg),
                        (&mut f.exp_avg_sq, exp_avg_sq),
                        (&mut f.steps, steps),
                    ] {
                        for (d, s) in dst.iter_mut().zip(src) {
                            if d.size() != s.size() {
                                return Err(format!(
                                    "the checkpoint's optimizer state has a tensor of shape {:?} where the model has {:?}",
                                    s.size(),
                                    d.size()
                                ));
                            }
                            d.copy_(s);
                        }
                    }
                    Ok(())
                })
            }
            (Optimizer::Libtorch(_), OptimizerState::Fused { .. }) => Err(
                "the checkpoint holds the fused Adam's state, this run uses libtorch's optimizer"
                    .into(),
            ),
            (Optimizer::Fused(_), OptimizerState::Archive(_)) => Err(
                "the checkpoint holds libtorch's optimizer state, this run uses the fused Adam"
                    .into(),
            ),
        }
    }
}

/// Builds the optimizer of `h` over `params` (the trainable variables of `vs`), at learning
/// rate `lr`.
pub fn build(
    vs: &nn::VarStore,
    params: &[Tensor],
    h: &Hyper,
    lr: f64,
) -> Result<Optimizer, String> {
    let wd = h.weight_decay;
    let r = match h.optimizer {
        OptimizerKind::Sgd => {
            // libtorch rejects Nesterov without momentum; without momentum it is plain SGD.
            let nesterov = h.nesterov && h.momentum > 0.0;
            LibtorchOptimizer::sgd(params, lr, h.momentum, wd, nesterov)
        }
        // Adam's weight decay is L2 added to the gradient, AdamW's is decoupled: as in PyTorch,
        // in the fused kernel and in libtorch's loop alike.
        OptimizerKind::Adam | OptimizerKind::Adamw if vs.device().is_cuda() => {
            let decoupled = h.optimizer == OptimizerKind::Adamw;
            let own: Vec<Tensor> = params.iter().map(Tensor::shallow_clone).collect();
            return Ok(Optimizer::Fused(FusedAdam::new(own, lr, wd, decoupled)));
        }
        OptimizerKind::Adam => LibtorchOptimizer::adam(params, lr, wd, false),
        OptimizerKind::Adamw => LibtorchOptimizer::adam(params, lr, wd, true),
        OptimizerKind::Rmsprop => LibtorchOptimizer::rms_prop(params, lr, wd, h.momentum),
    };
    r.map(Optimizer::Libtorch)
        .map_err(|e| format!("cannot build the {:?} optimizer: {e}", h.optimizer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;
    use tch::nn::Module;

    /// A small regression whose gradients every step depend on the last: the parameters after
    /// `steps` steps of `opt` (fused or libtorch's), flattened.
    fn train(fused: bool, decoupled: bool, steps: usize, overflow_at: Option<usize>) -> Vec<f64> {
        let _rng = crate::torch_rng_lock();
        tch::manual_seed(7);
        let vs = nn::VarStore::new(Device::Cpu);
        let lin = nn::linear(vs.root() / "l", 5, 3, Default::default());
        let params = vs.trainable_variables();
        let (lr, wd) = (0.05, 0.1);
        let mut opt = if fused {
            let own = params.iter().map(Tensor::shallow_clone).collect();
            Optimizer::Fused(FusedAdam::new(own, lr, wd, decoupled))
        } else if decoupled {
            Optimizer::Libtorch(LibtorchOptimizer::adam(&params, lr, wd, true).expect("adamw"))
        } else {
            Optimizer::Libtorch(LibtorchOptimizer::adam(&params, lr, wd, false).expect("adam"))
        };
        let x = Tensor::arange(40, (Kind::Float, Device::Cpu)).view([8, 5]) / 40.0;
        let y = Tensor::arange(24, (Kind::Float, Device::Cpu))
            .view([8, 3])
            .cos();
        for i in 0..steps {
            let loss = (lin.forward(&x) - &y).square().mean(Kind::Float);
            loss.backward();
            let inf = Tensor::full(
                [1],
                if overflow_at == Some(i) { 1.0 } else { 0.0 },
                (Kind::Float, Device::Cpu),
            );
            opt.step(Some(&inf)).expect("step");
            opt.zero_grad(&params);
        }
        params
            .iter()
            .flat_map(|p| {
                Vec::<f64>::try_from(p.flatten(0, -1).to_kind(Kind::Double)).expect("values")
            })
            .collect()
    }

    fn max_diff(a: &[f64], b: &[f64]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    }

    #[test]
    fn the_fused_adam_and_adamw_steps_match_libtorch_s_own() {
        for decoupled in [false, true] {
            let fused = train(true, decoupled, 6, None);
            let reference = train(false, decoupled, 6, None);
            let d = max_diff(&fused, &reference);
            assert!(d < 1e-6, "decoupled {decoupled}: differs by {d}");
            let start = train(false, decoupled, 0, None);
            assert!(
                max_diff(&fused, &start) > 1e-2,
                "the steps moved the parameters"
            );
        }
    }

    #[test]
    fn a_learning_rate_kept_on_the_device_steps_as_the_number_does_and_follows_set_lr() {
        let _rng = crate::torch_rng_lock();
        let run = |on_device: bool| {
            tch::manual_seed(3);
            let vs = nn::VarStore::new(Device::Cpu);
            let lin = nn::linear(vs.root() / "l", 4, 2, Default::default());
            let params = vs.trainable_variables();
            let mut f = FusedAdam::new(
                params.iter().map(Tensor::shallow_clone).collect(),
                0.1,
                0.01,
                true,
            );
            if on_device {
                f.lr_on_device();
            }
            let x = Tensor::arange(12, (Kind::Float, Device::Cpu)).view([3, 4]) / 12.0;
            for lr in [0.1, 0.05, 0.2] {
                f.set_lr(lr);
                lin.forward(&x).square().sum(Kind::Float).backward();
                f.step(None).expect("step");
                grads_to_none(&params);
            }
            params
                .iter()
                .flat_map(|p| {
                    Vec::<f64>::try_from(p.flatten(0, -1).to_kind(Kind::Double)).expect("values")
                })
                .collect::<Vec<f64>>()
        };
        let (number, tensor) = (run(false), run(true));
        assert!(
            max_diff(&number, &tensor) < 1e-7,
            "{number:?} vs {tensor:?}"
        );
    }

    #[test]
    fn zeroing_in_place_keeps_each_gradient_s_tensor() {
        let p = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
        p.square().sum(Kind::Float).backward();
        let before = p.grad().data_ptr();
        zero_grads_in_place(std::slice::from_ref(&p)).expect("zero");
        assert_eq!(p.grad().data_ptr(), before);
        assert_eq!(p.grad().abs().sum(Kind::Float).double_value(&[]), 0.0);
    }

    #[test]
    fn an_overflowing_fp16_step_leaves_the_parameters_moments_and_step_count_alone() {
        // Six steps with an overflow at the third are five clean steps, exactly.
        let skipped = train(true, true, 6, Some(2));
        let five = train(true, true, 5, None);
        assert!(max_diff(&skipped, &five) < 1e-7);
        assert!(max_diff(&skipped, &train(true, true, 6, None)) > 1e-4);
    }

    #[test]
    fn a_libtorch_error_in_the_shim_comes_back_as_an_error_not_an_abort() {
        let p = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
        p.square().sum(Kind::Float).backward();
        let inv = Tensor::ones([1], (Kind::Float, Device::Cpu));
        // The overflow flag must hold one element.
        let two = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        let e = unscale(std::slice::from_ref(&p), &two, &inv).expect_err("a bad flag");
        assert!(e.starts_with("unscaling the gradients: "), "{e}");
        let one = Tensor::zeros([1], (Kind::Float, Device::Cpu));
        unscale(std::slice::from_ref(&p), &one, &inv).expect("a good flag");
    }

    #[test]
    fn clipping_brings_the_global_gradient_norm_down_to_the_limit_and_leaves_a_smaller_one() {
        let a = Tensor::from_slice(&[3.0f32, 0.0]).set_requires_grad(true);
        let b = Tensor::from_slice(&[0.0f32, 4.0]).set_requires_grad(true);
        let grads = |scale: f64| {
            (a.square().sum(Kind::Float) * scale / 2.0 + b.square().sum(Kind::Float) * scale / 2.0)
                .backward();
        };
        let params = [a.shallow_clone(), b.shallow_clone()];
        grads(1.0); // gradients (3, 0) and (0, 4): global norm 5
        clip_grad_norm(&params, 1.0).expect("clip");
        let norm = (a.grad().square().sum(Kind::Float) + b.grad().square().sum(Kind::Float))
            .sqrt()
            .double_value(&[]);
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        assert!((a.grad().double_value(&[0]) - 0.6).abs() < 1e-5);
        let mut none = Optimizer::Fused(FusedAdam::new(
            params.iter().map(Tensor::shallow_clone).collect(),
            0.1,
            0.0,
            true,
        ));
        none.zero_grad(&params);
        assert!(!a.grad().defined(), "set to none");
        grads(0.1); // norm 0.5: below the limit, untouched
        clip_grad_norm(&params, 1.0).expect("clip");
        assert!((b.grad().double_value(&[1]) - 0.4).abs() < 1e-6);
    }
}
