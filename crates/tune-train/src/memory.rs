//! The peak memory of a stretch of work, for the benchmark: on CUDA the caching allocator's
//! peak allocation (`torch.cuda.max_memory_allocated`); on the CPU the process's peak resident
//! set (`VmHWM`), which Linux lets a process reset (`/proc/self/clear_refs`, "5"). Both are
//! reported as MB above the memory in use when the stretch began, so that the data set and
//! libtorch's own pages, there before and after, do not hide the difference between two runs.
//!
//! On the CPU, freed memory that glibc keeps for reuse would still count as resident at the
//! start of the next run (and hide that run's peak): it is handed back (`malloc_trim`) first.

use tch::Device;

/// A mark from which the peak is measured.
#[derive(Debug, Clone, Copy)]
pub struct PeakMemory {
    device: Device,
    start_mb: f64,
}

impl PeakMemory {
    /// Starts a new peak on `device`; `None` where it cannot be measured (no CUDA allocator,
    /// no `/proc`).
    pub fn start(device: Device) -> Option<PeakMemory> {
        let start_mb = if device.is_cuda() {
            crate::cuda::reset_peak(device);
            // Just after a reset the peak is what is allocated now.
            crate::cuda::peak_allocated_mb(device)?
        } else {
            // SAFETY: malloc_trim only returns free heap pages to the kernel.
            unsafe {
                libc::malloc_trim(0);
            }
            std::fs::write("/proc/self/clear_refs", "5").ok()?;
            status_mb("VmHWM")?
        };
        Some(PeakMemory { device, start_mb })
    }

    /// The most memory in use at once since the mark, above what was in use at the mark, in
    /// MB.
    pub fn peak_above_start_mb(&self) -> Option<f64> {
        let peak = if self.device.is_cuda() {
            crate::cuda::peak_allocated_mb(self.device)?
        } else {
            status_mb("VmHWM")?
        };
        Some((peak - self.start_mb).max(0.0))
    }
}

/// A `kB` line of `/proc/self/status` in MB.
fn status_mb(key: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_kb(&status, key).map(|kb| kb / 1024.0)
}

fn parse_status_kb(status: &str, key: &str) -> Option<f64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.trim().strip_suffix("kB")?.trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_file_s_kb_lines_are_read_by_key() {
        let s = "VmPeak:\t  900 kB\nVmHWM:\t   2048 kB\nVmRSS:\t    1024 kB\n";
        assert_eq!(parse_status_kb(s, "VmHWM"), Some(2048.0));
        assert_eq!(parse_status_kb(s, "VmRSS"), Some(1024.0));
        assert_eq!(parse_status_kb(s, "VmSwap"), None);
    }

    #[test]
    fn a_large_allocation_on_the_cpu_shows_in_the_peak_and_its_release_does_not_lower_it() {
        let Some(mark) = PeakMemory::start(Device::Cpu) else {
            return; // no /proc here
        };
        // 64 MB touched, then freed.
        let v = vec![1u8; 64 << 20];
        std::hint::black_box(&v);
        drop(v);
        let peak = mark.peak_above_start_mb().expect("readable");
        assert!(peak >= 60.0, "peak {peak} MB");
    }
}
