//! GPU telemetry of the worker slots: the utilisation and memory of each slot's GPU, sampled
//! through NVML while a trial runs, so that a user sees a GPU that idles (a data-bound or
//! launch-bound trial) for command trials and builtin ones alike, live and afterwards (the
//! summary, a [`GpuTelemetry`], is stored with the trial).
//!
//! NVML is optional at run time: the driver's `libnvidia-ml.so.1` is loaded when a study with
//! a CUDA slot starts. Without it (no driver, CI, a CPU machine) [`Gpus::open`] gives `None`
//! and nothing is sampled, shown, reported or stored: no error, no empty columns.
//!
//! What belongs here: the [`GpuSource`] seam and its NVML implementation, one reading, its
//! attribution to a trial's processes, and the running summary of a trial's samples
//! ([`GpuUsage`]). What does not: when to sample and which processes are the trial's (the
//! scheduler, with the runner), storing (the engine), drawing (the UI).

use std::ffi::OsStr;

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

use crate::trial::{GpuMemScope, GpuTelemetry};

/// Bytes in the "MB" this module counts in (MiB, as `nvidia-smi` shows them).
const MB: f64 = 1024.0 * 1024.0;

/// One reading of a GPU as its driver gives it, before it is attributed to a trial.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    /// Percent of the last sample period in which a kernel ran (NVML's "GPU utilisation",
    /// what `nvidia-smi` shows as GPU-Util).
    pub sm_pct: f64,
    /// Percent of the last sample period in which device memory was read or written (NVML's
    /// "memory utilisation").
    pub mem_bw_pct: f64,
    /// Memory in use on the whole GPU, in MB (every process's).
    pub mem_mb: f64,
    /// The compute processes on the GPU with the memory each uses, in MB: empty where the
    /// driver lists none or cannot say (a process whose memory it cannot tell is left out).
    pub processes: Vec<(u32, f64)>,
}

impl GpuReading {
    /// This reading as a sample of one trial: `is_trial` says which process ids are the
    /// trial's. The trial's own memory is the sum over its processes, known only when at least
    /// one of them is listed (in a container with its own PID namespace the driver's ids are
    /// the host's, and none matches).
    pub fn of_trial(&self, is_trial: impl Fn(u32) -> bool) -> GpuSample {
        let own: Vec<f64> = self
            .processes
            .iter()
            .filter(|(pid, _)| is_trial(*pid))
            .map(|(_, mb)| *mb)
            .collect();
        GpuSample {
            sm_pct: self.sm_pct,
            mem_bw_pct: self.mem_bw_pct,
            mem_mb: self.mem_mb,
            own_mem_mb: (!own.is_empty()).then(|| own.iter().sum()),
        }
    }
}

/// One reading of a trial's GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuSample {
    /// See [`GpuReading::sm_pct`].
    pub sm_pct: f64,
    /// See [`GpuReading::mem_bw_pct`].
    pub mem_bw_pct: f64,
    /// Memory in use on the whole GPU, in MB (every process's, as `nvidia-smi` shows it).
    pub mem_mb: f64,
    /// Memory in use by the trial's own processes, in MB, where the driver listed one of them.
    pub own_mem_mb: Option<f64>,
}

impl GpuSample {
    /// The memory to show for the trial now: its own processes' where the driver listed one of
    /// them, else the whole GPU's.
    pub fn shown_mem_mb(&self) -> f64 {
        self.own_mem_mb.unwrap_or(self.mem_mb)
    }

    /// A sample of the whole device, its processes unknown (fixtures and tests).
    pub fn device(sm_pct: f64, mem_bw_pct: f64, mem_mb: f64) -> GpuSample {
        GpuSample {
            sm_pct,
            mem_bw_pct,
            mem_mb,
            own_mem_mb: None,
        }
    }
}

/// The GPU use of one trial so far: the latest sample, the mean utilisations and the peak
/// memory over its samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuUsage {
    pub latest: GpuSample,
    pub mean_sm_pct: f64,
    pub mean_mem_bw_pct: f64,
    /// The peak of the whole GPU's memory in use.
    pub peak_mem_mb: f64,
    /// The peak of the trial's own processes' memory, over the samples that listed one of them.
    pub peak_own_mem_mb: Option<f64>,
    pub samples: u32,
}

impl GpuUsage {
    /// The usage after one sample.
    pub fn first(s: GpuSample) -> GpuUsage {
        GpuUsage {
            latest: s,
            mean_sm_pct: s.sm_pct,
            mean_mem_bw_pct: s.mem_bw_pct,
            peak_mem_mb: s.mem_mb,
            peak_own_mem_mb: s.own_mem_mb,
            samples: 1,
        }
    }

    /// Folds in the next sample.
    pub fn add(&mut self, s: GpuSample) {
        let n = f64::from(self.samples);
        self.mean_sm_pct = (self.mean_sm_pct * n + s.sm_pct) / (n + 1.0);
        self.mean_mem_bw_pct = (self.mean_mem_bw_pct * n + s.mem_bw_pct) / (n + 1.0);
        self.peak_mem_mb = self.peak_mem_mb.max(s.mem_mb);
        self.peak_own_mem_mb = match (self.peak_own_mem_mb, s.own_mem_mb) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.latest = s;
        self.samples += 1;
    }

    /// The summary stored with the trial: the peak of its own processes' memory where the
    /// driver ever listed one of them (scope `process`), else the whole GPU's (`device`): with
    /// two slots on one GPU the device's memory mixes two trials, so the trial's own is the
    /// figure to keep whenever there is one.
    pub fn telemetry(&self) -> GpuTelemetry {
        let (peak_mem_mb, mem_scope) = match self.peak_own_mem_mb {
            Some(own) => (own, GpuMemScope::Process),
            None => (self.peak_mem_mb, GpuMemScope::Device),
        };
        GpuTelemetry {
            peak_mem_mb,
            mem_scope,
            mean_sm_pct: self.mean_sm_pct,
            mean_mem_bw_pct: self.mean_mem_bw_pct,
            samples: self.samples,
        }
    }

    /// "GPU 33% SM, peak 2.1 GB" as the line printer and the trial screen write it (the peak
    /// as [`GpuUsage::telemetry`] keeps it).
    pub fn summary(&self) -> String {
        format!(
            "GPU {:.0}% SM, peak {}",
            self.mean_sm_pct,
            fmt_mb(self.telemetry().peak_mem_mb)
        )
    }
}

/// The GPU use of the trial on one slot: one [`GpuUsage`] for each GPU of the slot, by CUDA
/// index (one for a slot of one GPU, each GPU of a group with `[workers] gpus_per_trial`), so
/// that a rank whose GPU idles shows as such.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotUsage {
    /// Each GPU of the slot that has been read, in the slot's order.
    pub gpus: Vec<(u32, GpuUsage)>,
}

impl SlotUsage {
    /// The usage of a slot of one GPU after one sample.
    pub fn one(index: u32, s: GpuSample) -> SlotUsage {
        SlotUsage {
            gpus: vec![(index, GpuUsage::first(s))],
        }
    }

    /// The usage of a slot after one round of readings, one for each GPU that could be read;
    /// `None` when none could.
    pub fn first(readings: impl IntoIterator<Item = (u32, GpuSample)>) -> Option<SlotUsage> {
        let gpus: Vec<(u32, GpuUsage)> = readings
            .into_iter()
            .map(|(i, s)| (i, GpuUsage::first(s)))
            .collect();
        (!gpus.is_empty()).then_some(SlotUsage { gpus })
    }

    /// Folds in one round of readings: a GPU read for the first time joins, one not read this
    /// time keeps what it had.
    pub fn add(&mut self, readings: impl IntoIterator<Item = (u32, GpuSample)>) {
        for (index, s) in readings {
            match self.gpus.iter_mut().find(|(i, _)| *i == index) {
                Some((_, u)) => u.add(s),
                None => self.gpus.push((index, GpuUsage::first(s))),
            }
        }
    }

    /// Whether the slot is a group of GPUs (more than one read).
    pub fn is_group(&self) -> bool {
        self.gpus.len() > 1
    }

    /// The utilisation now: the mean over the slot's GPUs of their latest samples.
    pub fn now_sm_pct(&self) -> f64 {
        mean(self.gpus.iter().map(|(_, u)| u.latest.sm_pct))
    }

    /// The memory to show now: the most any one GPU of the slot holds for the trial (what
    /// decides whether the next, larger trial fits).
    pub fn now_mem_mb(&self) -> f64 {
        self.gpus
            .iter()
            .map(|(_, u)| u.latest.shown_mem_mb())
            .fold(0.0, f64::max)
    }

    /// How many rounds of samples the usage is over.
    pub fn samples(&self) -> u32 {
        self.gpus.iter().map(|(_, u)| u.samples).max().unwrap_or(0)
    }

    /// The summary stored with the trial. For one GPU, that GPU's ([`GpuUsage::telemetry`]).
    /// For a group: the utilisations' means over its GPUs, and the highest peak of any one
    /// GPU, the trial's own processes' where the driver listed them on every GPU of the group
    /// (scope `process`), else the whole GPUs' (`device`), never a mix of the two.
    pub fn telemetry(&self) -> GpuTelemetry {
        let each: Vec<GpuTelemetry> = self.gpus.iter().map(|(_, u)| u.telemetry()).collect();
        if let [one] = each.as_slice() {
            return *one;
        }
        let own = each.iter().all(|t| t.mem_scope == GpuMemScope::Process);
        let peak_mem_mb = if own {
            each.iter().map(|t| t.peak_mem_mb).fold(0.0, f64::max)
        } else {
            self.gpus
                .iter()
                .map(|(_, u)| u.peak_mem_mb)
                .fold(0.0, f64::max)
        };
        GpuTelemetry {
            peak_mem_mb,
            mem_scope: if own {
                GpuMemScope::Process
            } else {
                GpuMemScope::Device
            },
            mean_sm_pct: mean(each.iter().map(|t| t.mean_sm_pct)),
            mean_mem_bw_pct: mean(each.iter().map(|t| t.mean_mem_bw_pct)),
            samples: self.samples(),
        }
    }

    /// "GPU 33% SM, peak 2.1 GB" for one GPU; for a group, the same over the group and then
    /// each GPU's: "2 GPUs 62% SM, peak 2.1 GB (cuda:0 58% 2.1 GB, cuda:1 66% 1.9 GB)".
    pub fn summary(&self) -> String {
        match self.gpus.as_slice() {
            [(_, one)] => one.summary(),
            gpus => {
                let t = self.telemetry();
                let each: Vec<String> = gpus
                    .iter()
                    .map(|(i, u)| {
                        let own = if t.mem_scope == GpuMemScope::Process {
                            u.telemetry().peak_mem_mb
                        } else {
                            u.peak_mem_mb
                        };
                        format!("cuda:{i} {:.0}% {}", u.mean_sm_pct, fmt_mb(own))
                    })
                    .collect();
                format!(
                    "{} GPUs {:.0}% SM, peak {} ({})",
                    gpus.len(),
                    t.mean_sm_pct,
                    fmt_mb(t.peak_mem_mb),
                    each.join(", ")
                )
            }
        }
    }
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0u32), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { sum / f64::from(n) }
}

/// Megabytes for people: "812 MB", "2.1 GB", "65.6 GB".
pub fn fmt_mb(mb: f64) -> String {
    if mb < 1000.0 {
        format!("{mb:.0} MB")
    } else {
        format!("{:.1} GB", mb / 1024.0)
    }
}

/// Where GPU readings come from: NVML on a real machine ([`Gpus`]), scripted readings in
/// tests. One call reads one GPU; it must be quick (the scheduler calls it on its executor,
/// once a second per running CUDA trial).
pub trait GpuSource: Send + Sync {
    /// One reading of the GPU a slot's `cuda:N` names (N as NVML counts them, which is the PCI
    /// bus order); `None` when it cannot be read.
    fn read(&self, index: u32) -> Option<GpuReading>;
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
}

impl GpuSource for Gpus {
    fn read(&self, index: u32) -> Option<GpuReading> {
        let d = self.nvml.device_by_index(index).ok()?;
        let u = d.utilization_rates().ok()?;
        let m = d.memory_info().ok()?;
        // The per-process list is a refinement: a driver that will not give it (NotSupported
        // on some boards, no permission) still gives the device's figures.
        let processes = d
            .running_compute_processes()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some((p.pid, bytes as f64 / MB)),
                UsedGpuMemory::Unavailable => None,
            })
            .collect();
        Some(GpuReading {
            sm_pct: f64::from(u.gpu),
            mem_bw_pct: f64::from(u.memory),
            mem_mb: m.used as f64 / MB,
            processes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_keeps_the_mean_utilisations_and_the_peak_memory() {
        let mut u = GpuUsage::first(GpuSample::device(20.0, 10.0, 1000.0));
        u.add(GpuSample::device(40.0, 30.0, 3000.0));
        u.add(GpuSample::device(90.0, 50.0, 2000.0));
        assert_eq!(u.samples, 3);
        assert!((u.mean_sm_pct - 50.0).abs() < 1e-9);
        assert!((u.mean_mem_bw_pct - 30.0).abs() < 1e-9);
        assert_eq!(u.peak_mem_mb, 3000.0);
        assert_eq!(u.latest.mem_mb, 2000.0);
        assert_eq!(u.summary(), "GPU 50% SM, peak 2.9 GB");
        assert_eq!(fmt_mb(812.4), "812 MB");
        let t = u.telemetry();
        assert_eq!(t.mem_scope, GpuMemScope::Device);
        assert_eq!((t.peak_mem_mb, t.samples), (3000.0, 3));
        assert!((t.mean_mem_bw_pct - 30.0).abs() < 1e-9);
    }

    #[test]
    fn a_trial_sharing_its_gpu_keeps_the_peak_of_its_own_processes() {
        // Two trials on one GPU: ours (pids 10 and its child 11) and another (20).
        let ours = |pid: u32| pid == 10 || pid == 11;
        let reading = |own: f64, child: Option<f64>, other: f64| GpuReading {
            sm_pct: 60.0,
            mem_bw_pct: 25.0,
            mem_mb: own + child.unwrap_or(0.0) + other + 300.0,
            processes: [(10, Some(own)), (11, child), (20, Some(other))]
                .into_iter()
                .filter_map(|(p, m)| Some((p, m?)))
                .collect(),
        };
        let mut u = GpuUsage::first(reading(500.0, None, 4000.0).of_trial(ours));
        assert_eq!(u.latest.own_mem_mb, Some(500.0));
        assert_eq!(
            u.latest.shown_mem_mb(),
            500.0,
            "its own, not the device's 4.8 GB"
        );
        u.add(reading(900.0, Some(200.0), 6000.0).of_trial(ours));
        u.add(reading(700.0, Some(100.0), 7000.0).of_trial(ours));
        let t = u.telemetry();
        assert_eq!(t.mem_scope, GpuMemScope::Process);
        assert_eq!(
            t.peak_mem_mb, 1100.0,
            "900 + 200: its own, not the device's"
        );
        assert_eq!(u.peak_mem_mb, 7000.0 + 800.0 + 300.0);
        assert_eq!(u.summary(), "GPU 60% SM, peak 1.1 GB");
    }

    #[test]
    fn a_sample_without_the_trials_processes_says_nothing_of_its_own_memory() {
        // In a container the driver's process ids are the host's: none is the trial's.
        let r = GpuReading {
            sm_pct: 10.0,
            mem_bw_pct: 5.0,
            mem_mb: 2048.0,
            processes: vec![(4242, 1024.0)],
        };
        let s = r.of_trial(|_| false);
        assert_eq!(s.own_mem_mb, None);
        assert_eq!(s.shown_mem_mb(), 2048.0);
        assert_eq!(s.mem_mb, 2048.0);
        // A trial seen once on its own and once not keeps the scope of its own processes.
        let mut u = GpuUsage::first(s);
        u.add(r.of_trial(|p| p == 4242));
        assert_eq!(u.telemetry().mem_scope, GpuMemScope::Process);
        assert_eq!(u.telemetry().peak_mem_mb, 1024.0);
    }

    #[test]
    fn a_groups_usage_keeps_each_gpu_and_sums_up_over_the_group() {
        let own = |sm: f64, mb: f64| GpuSample {
            sm_pct: sm,
            mem_bw_pct: sm / 2.0,
            mem_mb: mb + 1000.0,
            own_mem_mb: Some(mb),
        };
        let mut u = SlotUsage::first([(2, own(80.0, 3000.0)), (3, own(0.0, 900.0))])
            .expect("two GPUs read");
        u.add([(2, own(60.0, 3500.0)), (3, own(10.0, 800.0))]);
        assert!(u.is_group());
        assert_eq!(u.samples(), 2);
        assert!((u.now_sm_pct() - 35.0).abs() < 1e-9, "(60 + 10) / 2 now");
        assert_eq!(u.now_mem_mb(), 3500.0, "the most on one GPU now");
        let t = u.telemetry();
        assert_eq!(t.mem_scope, GpuMemScope::Process);
        assert!(
            (t.mean_sm_pct - 37.5).abs() < 1e-9,
            "means 70 and 5, over the group"
        );
        assert_eq!(
            t.peak_mem_mb, 3500.0,
            "the highest peak of one GPU, not a sum"
        );
        assert_eq!(
            u.summary(),
            "2 GPUs 38% SM, peak 3.4 GB (cuda:2 70% 3.4 GB, cuda:3 5% 900 MB)"
        );
        // One GPU whose trial processes the driver never listed: the whole GPUs' figures for
        // all, never a mix.
        u.add([(5, GpuSample::device(10.0, 5.0, 5000.0))]);
        assert_eq!(u.gpus.len(), 3, "a GPU read for the first time joins");
        let t = u.telemetry();
        assert_eq!(t.mem_scope, GpuMemScope::Device);
        assert_eq!(t.peak_mem_mb, 5000.0);
        u.add([(5, GpuSample::device(10.0, 5.0, 100.0))]);
        assert_eq!(u.samples(), 2, "rounds, not GPU readings");
        // A slot of one GPU says what it said before groups.
        let one = SlotUsage::one(0, GpuSample::device(20.0, 10.0, 1000.0));
        assert!(!one.is_group());
        assert_eq!(one.summary(), "GPU 20% SM, peak 1.0 GB");
        assert_eq!(
            one.telemetry(),
            GpuUsage::first(GpuSample::device(20.0, 10.0, 1000.0)).telemetry()
        );
        assert_eq!(SlotUsage::first([]), None, "no GPU read, no usage");
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
