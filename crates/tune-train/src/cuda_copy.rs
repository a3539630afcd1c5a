//! CUDA streams and events for the streaming data loader, through the C++ shim
//! `src/stream_shim.cpp` (tch 0.26 exposes none of them): the loader thread copies batches on
//! a stream of its own, an [`CopyEvent`] says when a batch's copy is done, and
//! [`record_stream`] keeps the caching allocator from reusing a batch's memory while the
//! training stream still reads it.
//!
//! Every function is safe to call in a build or on a machine without CUDA: it returns an error
//! that says so.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::NonNull;

use tch::{Device, Tensor};

unsafe extern "C" {
    fn tune_cuda_use_side_stream(device: c_int, err: *mut c_char, err_len: c_int) -> c_int;
    fn tune_cuda_event_record(device: c_int, err: *mut c_char, err_len: c_int) -> *mut c_void;
    fn tune_cuda_event_synchronize(event: *mut c_void, err: *mut c_char, err_len: c_int) -> c_int;
    fn tune_cuda_event_free(event: *mut c_void);
    fn tune_cuda_record_stream(tensor: *const c_void, err: *mut c_char, err_len: c_int) -> c_int;
    fn tune_pin_memory(tensor: *const c_void, err: *mut c_char, err_len: c_int) -> *mut c_void;
}

/// Room for the C++ side's message.
const ERR_LEN: usize = 512;

/// Runs a shim call with a message buffer; `Err` with the shim's message when `failed` says
/// the call failed.
fn call<T>(
    f: impl FnOnce(*mut c_char, c_int) -> T,
    failed: impl FnOnce(&T) -> bool,
) -> Result<T, String> {
    let mut err = [0 as c_char; ERR_LEN];
    let r = f(err.as_mut_ptr(), ERR_LEN as c_int);
    if failed(&r) {
        // SAFETY: the shim writes a NUL-terminated string of at most ERR_LEN bytes, or
        // nothing (the buffer starts zeroed).
        let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
        // libtorch's messages carry a C++ backtrace after the first line.
        let first = msg.lines().next().unwrap_or("").trim();
        return Err(if first.is_empty() {
            "unknown CUDA error".into()
        } else {
            first.to_string()
        });
    }
    Ok(r)
}

fn index(device: Device) -> Result<c_int, String> {
    match device {
        Device::Cuda(i) => c_int::try_from(i).map_err(|_| format!("no CUDA device {i}")),
        d => Err(format!("{d:?} is not a CUDA device")),
    }
}

/// Makes a stream from libtorch's pool the calling thread's current stream on `device`, for
/// the rest of the thread's life: the copies it starts then overlap the training thread's
/// kernels, which run on the default stream.
pub fn use_side_stream(device: Device) -> Result<(), String> {
    let i = index(device)?;
    // SAFETY: the shim catches every C++ exception and writes at most `len` bytes to `err`.
    call(
        |err, len| unsafe { tune_cuda_use_side_stream(i, err, len) },
        |rc| *rc != 0,
    )
    .map(|_| ())
}

/// An event recorded on the loader thread's stream after a batch's copies: it happens when
/// they are done.
#[derive(Debug)]
pub struct CopyEvent(NonNull<c_void>);

// SAFETY: a CUDA event may be waited on and destroyed from any thread; the handle is owned by
// exactly one `CopyEvent`.
unsafe impl Send for CopyEvent {}

impl CopyEvent {
    /// Records an event on the calling thread's current stream of `device`.
    pub fn record(device: Device) -> Result<CopyEvent, String> {
        let i = index(device)?;
        // SAFETY: as in `use_side_stream`.
        let p = call(
            |err, len| unsafe { tune_cuda_event_record(i, err, len) },
            |p| p.is_null(),
        )?;
        NonNull::new(p)
            .map(CopyEvent)
            .ok_or_else(|| "no CUDA event".into())
    }

    /// Waits on the host until the copies before the event are done.
    pub fn synchronize(&self) -> Result<(), String> {
        // SAFETY: the handle is live (owned by self); as in `use_side_stream`.
        call(
            |err, len| unsafe { tune_cuda_event_synchronize(self.0.as_ptr(), err, len) },
            |rc| *rc != 0,
        )
        .map(|_| ())
    }
}

impl Drop for CopyEvent {
    fn drop(&mut self) {
        // SAFETY: the handle came from `tune_cuda_event_record` and is freed once, here.
        unsafe { tune_cuda_event_free(self.0.as_ptr()) }
    }
}

/// Tells the caching allocator that `t`, copied on the loader's stream, is used on the calling
/// thread's current stream: its memory is reused only once that stream is done with it.
pub fn record_stream(t: &Tensor) -> Result<(), String> {
    let p = t.as_ptr() as *const c_void;
    // SAFETY: `p` is tch's live `torch::Tensor*` for `t`, which outlives the call; as in
    // `use_side_stream`.
    call(
        |err, len| unsafe { tune_cuda_record_stream(p, err, len) },
        |rc| *rc != 0,
    )
    .map(|_| ())
}

/// `t` copied into page-locked (pinned) host memory, from which a copy to a GPU can run
/// asynchronously. Unlike tch's `pin_memory(device)`, it passes libtorch no device, which
/// libtorch deprecates with a warning on every call.
pub fn pin_memory(t: &Tensor) -> Result<Tensor, String> {
    let p = t.as_ptr() as *const c_void;
    // SAFETY: `p` is tch's live `torch::Tensor*` for `t`; on success the shim returns a new
    // heap-allocated `at::Tensor*` whose ownership passes to the returned Tensor (tch frees
    // it on drop, as for the tensors its own bindings return).
    let out = call(
        |err, len| unsafe { tune_pin_memory(p, err, len) },
        |out| out.is_null(),
    )?;
    Ok(unsafe { Tensor::from_ptr(out as *mut _) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cuda_streams_and_events_are_refused_with_libtorch_s_reason() {
        if tch::Cuda::is_available() {
            return;
        }
        let e = use_side_stream(Device::Cuda(0)).expect_err("no CUDA here");
        assert!(e.contains("not linked with support for cuda"), "{e}");
        let e = CopyEvent::record(Device::Cuda(0)).expect_err("no CUDA here");
        assert!(e.contains("not linked with support for cuda"), "{e}");
        let e = record_stream(&Tensor::zeros([2], (tch::Kind::Float, Device::Cpu)))
            .expect_err("no CUDA here");
        assert!(e.contains("not linked with support for cuda"), "{e}");
        let e = use_side_stream(Device::Cpu).expect_err("not CUDA");
        assert!(e.contains("not a CUDA device"), "{e}");
    }

    #[test]
    fn pinning_gives_the_same_values_or_libtorch_s_refusal_never_an_abort() {
        let t = Tensor::arange(12, (tch::Kind::Float, Device::Cpu)).view([3, 4]);
        match pin_memory(&t) {
            // With a CUDA runtime: a pinned copy, equal.
            Ok(p) => {
                assert_eq!(p.size(), [3, 4]);
                assert!(p.equal(&t));
            }
            // Without one, libtorch's own reason, as a value.
            Err(e) => {
                assert!(!tch::Cuda::is_available(), "{e}");
                assert!(!e.is_empty());
            }
        }
    }
}
