//! Gradient checkpointing (`[trial.model] checkpointing = true`): a block's activations are
//! not kept in the forward pass but recomputed, block by block, in the backward pass, trading
//! one more forward pass of the blocks for memory that no longer grows with their depth.
//!
//! # Why an autograd Function in C++
//! tch has no `torch.utils.checkpoint` and no custom autograd functions, so the block runs as
//! a libtorch `torch::autograd::Function` (`src/checkpoint_shim.cpp`) whose forward and
//! recomputation call back into Rust. The other way, running the blocks under `no_grad` and
//! walking them back by hand after the loss with vector-Jacobian products, would need a
//! training step of its own: the loss scaler, gradient accumulation and every later change of
//! `fit.rs` would have to be taught it, and a model would have to split itself into blocks for
//! the loop. As a Function, a checkpointed block is one node of the ordinary graph:
//! `loss.backward()` drives it like any op, the engine accumulates its gradients, and nothing
//! outside the model knows it is there. This is `torch.utils.checkpoint(use_reentrant=True)`,
//! except that the parameters are inputs of the node, so their gradients come back through
//! the engine rather than being written into `.grad` from inside the backward pass.
//!
//! # What the recomputation keeps the same
//! - **Autocast**: the forward pass's autocast state (CPU and CUDA, enabled and dtype) is saved
//!   and put back around the recomputation, which may run after the autocast region ended or
//!   on the engine's device thread.
//! - **Dropout**: with `preserve_rng` the CPU generator's state (and that of the input's
//!   device) is saved before the block and restored for the recomputation, so it draws the
//!   same masks; the streams are put back afterwards, so training goes on exactly as without
//!   checkpointing. The Transformer asks for it when it has dropout; the ResNet's blocks draw
//!   nothing.
//! - **BatchNorm's running statistics** are updated once: the block is told when it is being
//!   recomputed ([`Pass::Recompute`]) and then normalises with the batch's statistics without
//!   touching the running ones (the output is the same: in training mode BatchNorm normalises
//!   with the batch's statistics either way).
//!
//! The block's closure is owned by the graph node and may run on the autograd engine's device
//! thread: it must be `Send + 'static` (a model shares its blocks with it through an `Arc`).

use std::ffi::{CStr, c_void};
use std::os::raw::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use tch::Tensor;
use torch_sys::C_tensor;

/// Which pass a checkpointed block runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The forward pass (or a plain run: evaluation, no gradient needed).
    Forward,
    /// The recomputation in the backward pass: the same output, no side effects again.
    Recompute,
}

type Call = unsafe extern "C" fn(
    state: *mut c_void,
    x: *mut C_tensor,
    recompute: c_int,
    out: *mut *mut C_tensor,
    err: *mut c_char,
    err_len: c_int,
) -> c_int;
type DropFn = unsafe extern "C" fn(state: *mut c_void);

unsafe extern "C" {
    fn tune_checkpoint(
        x: *mut C_tensor,
        params: *const *mut C_tensor,
        n: c_int,
        preserve_rng: c_int,
        state: *mut c_void,
        call: Call,
        drop: DropFn,
        out: *mut *mut C_tensor,
        err: *mut c_char,
        err_len: c_int,
    ) -> c_int;
}

type BlockFn = Box<dyn Fn(&Tensor, Pass) -> Tensor + Send>;

/// Writes `msg` into the C buffer `err` of `len` bytes, cut to fit, NUL-terminated.
///
/// # Safety
/// `err` must point to `len` writable bytes.
unsafe fn write_error(err: *mut c_char, len: c_int, msg: &str) {
    let Ok(len) = usize::try_from(len) else {
        return;
    };
    if err.is_null() || len == 0 {
        return;
    }
    let mut n = msg.len().min(len - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller gives `len` writable bytes; `n < len` leaves room for the NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr().cast::<c_char>(), err, n);
        *err.add(n) = 0;
    }
}

/// The shim's callback: runs the block on `x` and hands the result's handle to C++. A panic
/// (a libtorch error inside the block, out of memory among them) becomes an error code and
/// libtorch's own message, so that it reaches the training loop as any libtorch error does.
unsafe extern "C" fn call_block(
    state: *mut c_void,
    x: *mut C_tensor,
    recompute: c_int,
    out: *mut *mut C_tensor,
    err: *mut c_char,
    err_len: c_int,
) -> c_int {
    // SAFETY: `state` is the `Box<BlockFn>` that `checkpoint` leaked for the node, alive until
    // `drop_block`; the node calls this and that one at a time.
    let f = unsafe { &*(state as *const BlockFn) };
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `x` is a live handle of the shim's for the duration of this call; this
        // makes a handle of our own to the same tensor.
        let x = unsafe { Tensor::clone_from_ptr(x) };
        let pass = if recompute != 0 {
            Pass::Recompute
        } else {
            Pass::Forward
        };
        f(&x, pass)
    }));
    match r {
        Ok(y) => {
            // The handle goes to C++, which deletes it (tch's handles are `new`ed C++
            // tensors): Rust must not free it too.
            let mut y = std::mem::ManuallyDrop::new(y);
            // SAFETY: the shim gives a valid out-pointer.
            unsafe { *out = y.as_mut_ptr() };
            0
        }
        Err(p) => {
            let msg = crate::fit::torch_message(&crate::data::panic_message(&p));
            // SAFETY: the shim gives `err_len` writable bytes.
            unsafe { write_error(err, err_len, &msg) };
            -1
        }
    }
}

unsafe extern "C" fn drop_block(state: *mut c_void) {
    // SAFETY: `state` came from `Box::into_raw` in `checkpoint`, and the node calls this once.
    drop(unsafe { Box::from_raw(state as *mut BlockFn) });
}

/// Runs `block` on `x` without keeping its activations for the backward pass, which recomputes
/// them; `params` must be every parameter the block uses (one left out gets no gradient).
/// `preserve_rng`: the block draws random numbers (dropout), which the recomputation must
/// draw again. With autograd off, or nothing needing a gradient, the block just runs.
///
/// Panics as a libtorch op does (tch panics on libtorch errors) with libtorch's message, so
/// an out-of-memory error is still one to the training loop.
pub fn checkpoint<F>(x: &Tensor, params: &[Tensor], preserve_rng: bool, block: F) -> Tensor
where
    F: Fn(&Tensor, Pass) -> Tensor + Send + 'static,
{
    let state: *mut BlockFn = Box::into_raw(Box::new(Box::new(block)));
    let handles: Vec<*mut C_tensor> = params.iter().map(|p| p.as_ptr() as *mut _).collect();
    let n = c_int::try_from(handles.len()).expect("a block has far fewer than 2^31 parameters");
    let mut out: *mut C_tensor = std::ptr::null_mut();
    let mut err = [0 as c_char; 2048];
    // SAFETY: the handles live for the call (borrowed from `x` and `params`); the shim takes
    // `state` and frees it through `drop_block` exactly once, also on failure; it writes a new
    // handle to `out` on success and a NUL-terminated message to `err` otherwise.
    let rc = unsafe {
        tune_checkpoint(
            x.as_ptr() as *mut _,
            handles.as_ptr(),
            n,
            c_int::from(preserve_rng),
            state.cast(),
            call_block,
            drop_block,
            &mut out,
            err.as_mut_ptr(),
            err.len() as c_int,
        )
    };
    if rc != 0 || out.is_null() {
        // SAFETY: the shim NUL-terminates the message (the buffer starts zeroed).
        let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
        panic!("{msg}");
    }
    // SAFETY: a new handle of the shim's that nothing else owns.
    unsafe { Tensor::from_ptr(out) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tch::{Device, Kind};

    /// A small block with a parameter, counting its passes.
    struct Probe {
        w: Tensor,
        forward: Arc<AtomicUsize>,
        recompute: Arc<AtomicUsize>,
    }

    impl Probe {
        fn new() -> Probe {
            Probe {
                w: Tensor::randn([4, 4], (Kind::Float, Device::Cpu)).set_requires_grad(true),
                forward: Arc::new(AtomicUsize::new(0)),
                recompute: Arc::new(AtomicUsize::new(0)),
            }
        }

        fn block(&self) -> impl Fn(&Tensor, Pass) -> Tensor + Send + 'static {
            let w = self.w.shallow_clone();
            let (f, r) = (Arc::clone(&self.forward), Arc::clone(&self.recompute));
            move |x, pass| {
                match pass {
                    Pass::Forward => f.fetch_add(1, Ordering::SeqCst),
                    Pass::Recompute => r.fetch_add(1, Ordering::SeqCst),
                };
                x.matmul(&w).tanh().matmul(&w)
            }
        }
    }

    #[test]
    fn a_checkpointed_block_runs_once_forward_once_in_backward_and_gives_autograd_s_gradients() {
        let _rng = crate::torch_rng_lock();
        let p = Probe::new();
        let x = Tensor::randn([3, 4], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let plain = p.block()(&x, Pass::Forward);
        plain.square().sum(Kind::Float).backward();
        let (gx, gw) = (x.grad().copy(), p.w.grad().copy());
        let _ = x.grad().zero_();
        let _ = p.w.grad().zero_();
        p.forward.store(0, Ordering::SeqCst);

        let y = checkpoint(&x, &[p.w.shallow_clone()], false, p.block());
        assert_eq!(p.forward.load(Ordering::SeqCst), 1);
        assert_eq!(
            p.recompute.load(Ordering::SeqCst),
            0,
            "nothing recomputed yet"
        );
        assert_eq!((&y - &plain).abs().max().double_value(&[]), 0.0);
        y.square().sum(Kind::Float).backward();
        assert_eq!(p.recompute.load(Ordering::SeqCst), 1);
        assert!((x.grad() - gx).abs().max().double_value(&[]) < 1e-6);
        assert!((p.w.grad() - gw).abs().max().double_value(&[]) < 1e-6);
    }

    #[test]
    fn without_autograd_a_checkpointed_block_just_runs_and_keeps_nothing() {
        let _rng = crate::torch_rng_lock();
        let p = Probe::new();
        let x = Tensor::randn([3, 4], (Kind::Float, Device::Cpu));
        let y = tch::no_grad(|| checkpoint(&x, &[p.w.shallow_clone()], false, p.block()));
        assert!(!y.requires_grad());
        assert_eq!(p.forward.load(Ordering::SeqCst), 1);
        assert_eq!(
            Arc::strong_count(&p.forward),
            1,
            "the block's state was freed"
        );
    }

    #[test]
    fn the_graph_node_frees_the_block_when_the_graph_goes() {
        let _rng = crate::torch_rng_lock();
        let p = Probe::new();
        let x = Tensor::randn([3, 4], (Kind::Float, Device::Cpu));
        let y = checkpoint(&x, &[p.w.shallow_clone()], false, p.block());
        assert!(y.requires_grad());
        assert_eq!(Arc::strong_count(&p.forward), 2, "held by the node");
        drop(y);
        assert_eq!(Arc::strong_count(&p.forward), 1, "freed with the node");
    }

    #[test]
    fn a_libtorch_error_in_the_recomputation_fails_backward_with_its_message_not_an_abort() {
        let _rng = crate::torch_rng_lock();
        let w = Tensor::randn([4, 4], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let wb = w.shallow_clone();
        let x = Tensor::randn([3, 4], (Kind::Float, Device::Cpu));
        let y = checkpoint(&x, &[w.shallow_clone()], false, move |x, pass| {
            if pass == Pass::Recompute {
                // A shape mismatch: libtorch throws, tch panics.
                let _ = x.matmul(&Tensor::zeros([5, 5], (Kind::Float, Device::Cpu)));
            }
            x.matmul(&wb)
        });
        let e = y
            .sum(Kind::Float)
            .f_backward()
            .expect_err("the recomputation failed");
        let text = e.to_string();
        assert!(text.contains("cannot be multiplied"), "{text}");
        assert!(!text.contains("called `Result::unwrap()`"), "{text}");
    }

    #[test]
    fn a_libtorch_error_in_the_forward_pass_panics_with_libtorch_s_message() {
        let _rng = crate::torch_rng_lock();
        let w = Tensor::randn([4, 4], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let x = Tensor::randn([3, 5], (Kind::Float, Device::Cpu));
        let wb = w.shallow_clone();
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            checkpoint(&x, &[w.shallow_clone()], false, move |x, _| x.matmul(&wb))
        }));
        let msg = crate::data::panic_message(&r.expect_err("a shape mismatch"));
        assert!(
            msg.starts_with("mat1 and mat2 shapes cannot be multiplied"),
            "{msg}"
        );
    }
}
