//! Which compute devices this machine has, found without loading libtorch.
//!
//! The `tune` binary itself never loads libtorch (only the `tune-worker` processes do): loading
//! its 1 GB of shared libraries takes about half a second, which every query command would pay.

use std::path::Path;

/// The CUDA devices visible to this process: the NVIDIA driver's GPUs (from `/proc`, or
/// `nvidia-smi -L` where `/proc` has no driver entry), narrowed by `CUDA_VISIBLE_DEVICES`.
pub fn cuda_device_count() -> usize {
    let installed = proc_gpus().unwrap_or_else(nvidia_smi_gpus);
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
    use super::visible;

    #[test]
    fn cuda_visible_devices_narrows_the_count() {
        assert_eq!(visible("", 4), 0);
        assert_eq!(visible("0,1", 4), 2);
        assert_eq!(visible("1,7,2", 4), 1);
        assert_eq!(visible("GPU-abc", 1), 1);
    }
}
