//! The CUDA caching allocator, through the C++ shim `src/cuda_shim.cpp` (tch 0.26 exposes
//! none of it): freeing its cache after an out-of-memory failure and between trials, so a
//! worker never sits on memory that another trial on the same GPU needs, and its peak
//! allocation for `peak_mem_mb`.
//!
//! Every function is safe to call in a build or on a machine without CUDA: it does nothing and
//! says so.

use std::os::raw::{c_int, c_longlong};

use tch::Device;

unsafe extern "C" {
    fn tune_cuda_empty_cache() -> c_int;
    fn tune_cuda_peak_allocated(device: c_int) -> c_longlong;
    fn tune_cuda_reset_peak(device: c_int) -> c_int;
}

fn index(device: Device) -> Option<c_int> {
    match device {
        Device::Cuda(i) => c_int::try_from(i).ok(),
        _ => None,
    }
}

/// Returns the caching allocator's unused blocks to the driver (`torch.cuda.empty_cache()`).
/// Whether there was a CUDA allocator to empty.
pub fn empty_cache() -> bool {
    // SAFETY: the shim catches every C++ exception and touches no memory of ours.
    unsafe { tune_cuda_empty_cache() == 0 }
}

/// The most memory allocated at once on `device` since [`reset_peak`], in MB
/// (`torch.cuda.max_memory_allocated()`); `None` off CUDA.
pub fn peak_allocated_mb(device: Device) -> Option<f64> {
    let i = index(device)?;
    // SAFETY: as above.
    let bytes = unsafe { tune_cuda_peak_allocated(i) };
    (bytes >= 0).then(|| bytes as f64 / (1024.0 * 1024.0))
}

/// Starts a new peak on `device`; nothing off CUDA.
pub fn reset_peak(device: Device) {
    if let Some(i) = index(device) {
        // SAFETY: as above.
        unsafe {
            tune_cuda_reset_peak(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cuda_the_allocator_calls_do_nothing_and_say_so() {
        if tch::Cuda::is_available() {
            return;
        }
        assert!(!empty_cache());
        assert_eq!(peak_allocated_mb(Device::Cpu), None);
        assert_eq!(peak_allocated_mb(Device::Cuda(0)), None);
        reset_peak(Device::Cuda(0));
    }
}
