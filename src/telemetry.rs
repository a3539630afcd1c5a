//! GPU telemetry of the worker slots: the utilisation and memory of each slot's GPU, sampled
//! through NVML while a trial runs, so that a user sees a GPU that idles (a data-bound or
//! launch-bound trial) for command trials and builtin ones alike.
//!
//! NVML is optional at run time: the driver's `libnvidia-ml.so.1` is loaded when a study with
//! a CUDA slot starts. Without it (no driver, CI, a CPU machine) [`Gpus::open`] gives `None`
//! and nothing is sampled, shown or reported: no error, no empty columns.
//!
//! What belongs here: opening NVML, one sample, and the running summary of a trial's samples
//! ([`GpuUsage`]). What does not: when to sample (the scheduler), drawing (the UI).

use std::ffi::OsStr;

use nvml_wrapper::Nvml;

/// One reading of a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuSample {
    /// Percent of the last sample period in which a kernel ran (NVML's "GPU utilisation",
    /// what `nvidia-smi` shows as GPU-Util).
    pub sm_pct: f64,
    /// Memory in use on the GPU, in MB (every process's, as `nvidia-smi` shows it).
    pub mem_mb: f64,
}

/// The GPU use of one trial so far: the latest sample, the mean utilisation and the peak
/// memory over its samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuUsage {
    pub latest: GpuSample,
    pub mean_sm_pct: f64,
    pub peak_mem_mb: f64,
    pub samples: u32,
}

impl GpuUsage {
    /// The usage after one sample.
    pub fn first(s: GpuSample) -> GpuUsage {
        GpuUsage {
            latest: s,
            mean_sm_pct: s.sm_pct,
            peak_mem_mb: s.mem_mb,
            samples: 1,
        }
    }

    /// Folds in the next sample.
    pub fn add(&mut self, s: GpuSample) {
        let n = f64::from(self.samples);
        self.mean_sm_pct = (self.mean_sm_pct * n + s.sm_pct) / (n + 1.0);
        self.peak_mem_mb = self.peak_mem_mb.max(s.mem_mb);
        self.latest = s;
        self.samples += 1;
    }

    /// "GPU 33% SM, peak 2.1 GB" as the line printer and the trial screen write it.
    pub fn summary(&self) -> String {
        format!(
            "GPU {:.0}% SM, peak {}",
            self.mean_sm_pct,
            fmt_mb(self.peak_mem_mb)
        )
    }
}

/// Megabytes for people: "812 MB", "2.1 GB", "65.6 GB".
pub fn fmt_mb(mb: f64) -> String {
    if mb < 1000.0 {
        format!("{mb:.0} MB")
    } else {
        format!("{:.1} GB", mb / 1024.0)
    }
}

/// The machine's NVIDIA driver, through NVML.
pub struct Gpus {
    nvml: Nvml,
}

impl Gpus {
    /// NVML from the driver, or `None` where there is no driver: never an error.
    pub fn open() -> Option<Gpus> {
        // A driver installs libnvidia-ml.so.1; the unversioned name (NVML's default) comes
        // only with development packages.
        let nvml = Nvml::builder()
            .lib_path(OsStr::new("libnvidia-ml.so.1"))
            .init()
            .or_else(|_| Nvml::init())
            .ok()?;
        Some(Gpus { nvml })
    }

    /// One sample of the GPU a slot's `cuda:N` names (N as NVML counts them, which is the
    /// PCI bus order); `None` when NVML cannot read it.
    pub fn sample(&self, index: u32) -> Option<GpuSample> {
        let d = self.nvml.device_by_index(index).ok()?;
        let u = d.utilization_rates().ok()?;
        let m = d.memory_info().ok()?;
        Some(GpuSample {
            sm_pct: f64::from(u.gpu),
            mem_mb: m.used as f64 / (1024.0 * 1024.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_keeps_the_mean_utilisation_and_the_peak_memory() {
        let mut u = GpuUsage::first(GpuSample {
            sm_pct: 20.0,
            mem_mb: 1000.0,
        });
        u.add(GpuSample {
            sm_pct: 40.0,
            mem_mb: 3000.0,
        });
        u.add(GpuSample {
            sm_pct: 90.0,
            mem_mb: 2000.0,
        });
        assert_eq!(u.samples, 3);
        assert!((u.mean_sm_pct - 50.0).abs() < 1e-9);
        assert_eq!(u.peak_mem_mb, 3000.0);
        assert_eq!(u.latest.mem_mb, 2000.0);
        assert_eq!(u.summary(), "GPU 50% SM, peak 2.9 GB");
        assert_eq!(fmt_mb(812.4), "812 MB");
    }

    #[test]
    fn without_an_nvidia_driver_there_is_no_telemetry_and_no_error() {
        // The driver's /proc entry is there exactly when its NVML can be: without it, open
        // must give None (not panic, not fail).
        if std::path::Path::new("/proc/driver/nvidia").exists() {
            return;
        }
        assert!(Gpus::open().is_none());
    }
}
