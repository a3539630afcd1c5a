//! Which compute devices this machine has, found without loading libtorch.
//!
//! The `tune` binary itself never loads libtorch (only the `tune-worker` processes do): loading
//! its 1 GB of shared libraries takes about half a second, which every query command would pay.
//!
//! For tests only: `TUNE_TEST_CUDA_DEVICES=N` stands for the machine's installed GPU count (then
//! narrowed by `CUDA_VISIBLE_DEVICES` as usual), so that the refusal of `cuda:7` on a machine
//! with one GPU is tested on any machine. It changes nothing but the count `tune` checks slots
//! against; a trial on a device that is not there still fails. Not for users.

use std::path::Path;

use crate::runner::protocol::Capabilities;

/// Where a study's devices were written, to name it in a refusal and say the fix in its terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevicesFrom {
    /// `[workers] devices` of the study file (the stored one, for `tune worker`).
    StudyFile,
    /// `tune worker --devices`.
    Flag,
}

impl DevicesFrom {
    fn key(self) -> &'static str {
        match self {
            DevicesFrom::StudyFile => "key `workers.devices`",
            DevicesFrom::Flag => "--devices",
        }
    }

    fn cpu(self) -> &'static str {
        match self {
            DevicesFrom::StudyFile => "write `devices = [\"cpu\"]`",
            DevicesFrom::Flag => "pass `--devices cpu`",
        }
    }
}

/// A study's devices refused before any trial starts. Each message names the key or flag the
/// devices came from and says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DevicesError {
    /// A `cuda:N` this machine does not have (or does not show, `CUDA_VISIBLE_DEVICES`).
    #[error("{0}")]
    NotOnMachine(String),
    /// CUDA slots that this `tune-worker` cannot train on: built for the CPU only, or its
    /// libtorch sees fewer GPUs than the driver.
    #[error("{0}")]
    WorkerCannotTrain(String),
}

/// The CUDA index of a slot's device (`cuda:N`), `None` for the CPU.
pub fn cuda_index(device: &str) -> Option<usize> {
    device.strip_prefix("cuda:")?.parse().ok()
}

/// Refuses slots on CUDA devices this machine does not have (`visible` of them), before any
/// trial starts: otherwise every trial on such a slot fails and burns the budget. The message
/// names the key and what to write instead.
pub fn check_slots(
    slots: &[String],
    visible: usize,
    from: DevicesFrom,
) -> Result<(), DevicesError> {
    let mut missing: Vec<&str> = slots
        .iter()
        .filter(|d| cuda_index(d).is_some_and(|i| i >= visible))
        .map(String::as_str)
        .collect();
    missing.dedup();
    let Some(first) = missing.first() else {
        return Ok(());
    };
    let have = match visible {
        0 => "no visible CUDA device (no NVIDIA driver in /proc/driver/nvidia/gpus nor nvidia-smi, or CUDA_VISIBLE_DEVICES hides them all)".to_string(),
        1 => "1 visible CUDA device (cuda:0)".to_string(),
        n => format!("{n} visible CUDA devices (cuda:0 to cuda:{})", n - 1),
    };
    let fix = if visible == 0 {
        format!(
            "{} (or \"auto\", which takes every GPU there is, else the CPU)",
            from.cpu()
        )
    } else {
        format!(
            "use devices among cuda:0 to cuda:{}, or \"auto\" for all of them",
            visible - 1
        )
    };
    let list = if missing.len() > 1 {
        format!(" (and {})", missing[1..].join(", "))
    } else {
        String::new()
    };
    Err(DevicesError::NotOnMachine(format!(
        "{}: \"{first}\"{list} is not on this machine, which has {have}; {fix}",
        from.key()
    )))
}

/// The slots of a builtin study whose devices came from `"auto"` when its `tune-worker` is
/// built for the CPU only: the same number of slots, all on the CPU (`"auto"` means whatever
/// can run here). `None` when the slots stand as they are.
pub fn auto_on_cpu_worker(
    slots: &[String],
    auto: bool,
    caps: &Capabilities,
) -> Option<Vec<String>> {
    let on_cuda = slots.iter().any(|d| cuda_index(d).is_some());
    (auto && on_cuda && !caps.cuda).then(|| vec!["cpu".to_string(); slots.len()])
}

/// Refuses a builtin study with slots on CUDA when its `tune-worker` cannot train there: built
/// without CUDA (every trial would fail with the same message), or a CUDA build whose libtorch
/// sees fewer GPUs than the driver (a driver too old for its CUDA).
pub fn check_worker(
    slots: &[String],
    caps: &Capabilities,
    from: DevicesFrom,
) -> Result<(), DevicesError> {
    let Some(first) = slots.iter().find(|d| cuda_index(d).is_some()) else {
        return Ok(());
    };
    let key = from.key();
    if !caps.cuda {
        return Err(DevicesError::WorkerCannotTrain(format!(
            "{key}: \"{first}\" needs a `tune-worker` built with CUDA, but this one was built for the CPU only; install a CUDA libtorch and rebuild it with `./scripts/setup.sh --cuda` (see the README, \"Training on NVIDIA GPUs\"), or {}",
            from.cpu()
        )));
    }
    if let Some(d) = slots
        .iter()
        .find(|d| cuda_index(d).is_some_and(|i| i >= caps.cuda_devices))
    {
        return Err(DevicesError::WorkerCannotTrain(format!(
            "{key}: \"{d}\" is not usable by `tune-worker`: its CUDA libtorch sees {} CUDA device(s); check that the NVIDIA driver is new enough for the CUDA version of that libtorch (`nvidia-smi` shows the highest CUDA it supports)",
            caps.cuda_devices
        )));
    }
    Ok(())
}

/// The CUDA devices visible to this process: the NVIDIA driver's GPUs (from `/proc`, or
/// `nvidia-smi -L` where `/proc` has no driver entry; `TUNE_TEST_CUDA_DEVICES` in tests),
/// narrowed by `CUDA_VISIBLE_DEVICES`.
pub fn cuda_device_count() -> usize {
    let installed = match std::env::var("TUNE_TEST_CUDA_DEVICES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) => n,
        None => proc_gpus().unwrap_or_else(nvidia_smi_gpus),
    };
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => visible(&v, installed),
        Err(_) => installed,
    }
}

/// How many of `installed` GPUs a `CUDA_VISIBLE_DEVICES` value leaves visible (CUDA stops at
/// the first invalid entry; an empty value hides them all).
fn visible(value: &str, installed: usize) -> usize {
    let mut n = 0;
    for part in value.split(',').map(str::trim) {
        if part.is_empty() {
            break;
        }
        match part.parse::<usize>() {
            Ok(i) if i < installed => n += 1,
            Ok(_) => break,
            // UUIDs ("GPU-…"): trust them.
            Err(_) if part.starts_with("GPU-") || part.starts_with("MIG-") => n += 1,
            Err(_) => break,
        }
    }
    n
}

fn proc_gpus() -> Option<usize> {
    let dir = Path::new("/proc/driver/nvidia/gpus");
    let n = std::fs::read_dir(dir).ok()?.count();
    Some(n)
}

fn nvidia_smi_gpus() -> usize {
    std::process::Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.starts_with("GPU "))
                .count()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(d: &[&str]) -> Vec<String> {
        d.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_cuda_device_beyond_the_machines_gpus_is_refused_with_the_ones_it_has() {
        let e = check_slots(&slots(&["cuda:0", "cuda:7"]), 1, DevicesFrom::StudyFile)
            .expect_err("cuda:7 of 1")
            .to_string();
        assert!(e.contains("\"cuda:7\" is not on this machine"), "{e}");
        assert!(e.contains("1 visible CUDA device (cuda:0)"), "{e}");
        assert!(e.contains("key `workers.devices`"), "{e}");
        assert!(
            check_slots(
                &slots(&["cuda:0", "cuda:0", "cpu"]),
                1,
                DevicesFrom::StudyFile
            )
            .is_ok()
        );
        assert!(check_slots(&slots(&["cuda:1"]), 2, DevicesFrom::StudyFile).is_ok());
    }

    #[test]
    fn without_a_gpu_every_cuda_device_is_refused_and_the_cpu_is_suggested() {
        let e = check_slots(
            &slots(&["cuda:0", "cuda:0", "cuda:1"]),
            0,
            DevicesFrom::StudyFile,
        )
        .expect_err("no GPU")
        .to_string();
        assert!(e.contains("\"cuda:0\" (and cuda:1)"), "{e}");
        assert!(e.contains("no visible CUDA device"), "{e}");
        assert!(e.contains("devices = [\"cpu\"]"), "{e}");
        assert!(check_slots(&slots(&["cpu", "cpu"]), 0, DevicesFrom::StudyFile).is_ok());
    }

    #[test]
    fn a_refusal_of_the_devices_flag_names_the_flag_and_its_fix() {
        let e = check_slots(&slots(&["cuda:0"]), 0, DevicesFrom::Flag)
            .expect_err("no GPU")
            .to_string();
        assert!(
            e.starts_with("--devices: \"cuda:0\" is not on this machine"),
            "{e}"
        );
        assert!(e.contains("`--devices cpu`"), "{e}");
        assert!(!e.contains("workers.devices"), "{e}");
    }

    #[test]
    fn a_cpu_only_worker_is_refused_for_cuda_slots_naming_the_cuda_setup() {
        let cpu_build = Capabilities {
            cuda: false,
            cuda_devices: 0,
        };
        let e = check_worker(
            &slots(&["cpu", "cuda:0"]),
            &cpu_build,
            DevicesFrom::StudyFile,
        )
        .expect_err("no CUDA")
        .to_string();
        assert!(e.contains("./scripts/setup.sh --cuda"), "{e}");
        assert!(check_worker(&slots(&["cpu"]), &cpu_build, DevicesFrom::StudyFile).is_ok());
        let sees_one = Capabilities {
            cuda: true,
            cuda_devices: 1,
        };
        assert!(
            check_worker(
                &slots(&["cuda:0", "cuda:0"]),
                &sees_one,
                DevicesFrom::StudyFile
            )
            .is_ok()
        );
        let e = check_worker(&slots(&["cuda:1"]), &sees_one, DevicesFrom::StudyFile)
            .expect_err("sees one")
            .to_string();
        assert!(e.contains("driver"), "{e}");
    }

    #[test]
    fn auto_devices_fall_back_to_the_cpu_with_a_cpu_only_worker_and_only_then() {
        let cpu_build = Capabilities {
            cuda: false,
            cuda_devices: 0,
        };
        let gpus = slots(&["cuda:0", "cuda:1"]);
        assert_eq!(
            auto_on_cpu_worker(&gpus, true, &cpu_build),
            Some(slots(&["cpu", "cpu"]))
        );
        // Named devices are what the user asked for: refused, not moved.
        assert_eq!(auto_on_cpu_worker(&gpus, false, &cpu_build), None);
        let cuda_build = Capabilities {
            cuda: true,
            cuda_devices: 2,
        };
        assert_eq!(auto_on_cpu_worker(&gpus, true, &cuda_build), None);
    }

    #[test]
    fn cuda_visible_devices_narrows_the_count() {
        assert_eq!(visible("", 4), 0);
        assert_eq!(visible("0,1", 4), 2);
        assert_eq!(visible("1,7,2", 4), 1);
        assert_eq!(visible("GPU-abc", 1), 1);
    }
}
