//! Which compute devices this machine has.

/// The number of CUDA devices libtorch can use here (0 on a CPU-only build or machine).
pub fn cuda_device_count() -> usize {
    // libtorch answers this without initialising a context; a CPU-only build says 0.
    let n = tch::Cuda::device_count();
    usize::try_from(n).unwrap_or(0)
}
