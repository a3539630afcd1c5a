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

/// The CUDA index of a slot's device (`cuda:N`; the first GPU of a group
/// `cuda:0,cuda:1`), `None` for the CPU.
pub fn cuda_index(device: &str) -> Option<usize> {
    cuda_indices(device).first().copied()
}

/// The CUDA indices of a slot's device: one for `cuda:N`, each GPU of a group
/// (`cuda:0,cuda:1`, `[workers] gpus_per_trial`), none for the CPU.
pub fn cuda_indices(device: &str) -> Vec<usize> {
    device
        .split(',')
        .filter_map(|d| d.trim().strip_prefix("cuda:")?.parse().ok())
        .collect()
}

/// The slot device of a group of GPUs: `cuda:0,cuda:1`.
pub fn group_device(gpus: &[usize]) -> String {
    gpus.iter()
        .map(|i| format!("cuda:{i}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Splits `gpus` into groups of `n` (`[workers] gpus_per_trial`), the closest-connected GPUs
/// together: `links[a][b]` says how closely `gpus[a]` and `gpus[b]` connect (higher is closer,
/// see [`gpu_links`]). Each group starts from the closest pair left and grows by the GPU with
/// the most link to the group's members; ties go to the lowest index, so that without any
/// topology (all links equal) the groups are in index order. Returns the groups (each sorted,
/// ordered by their first GPU) and the GPUs left over, which sit idle.
pub fn group_gpus(gpus: &[usize], links: &[Vec<u32>], n: usize) -> (Vec<Vec<usize>>, Vec<usize>) {
    let link = |a: usize, b: usize| -> u32 {
        links
            .get(a)
            .and_then(|row| row.get(b))
            .copied()
            .unwrap_or(0)
    };
    let mut left: Vec<usize> = (0..gpus.len()).collect();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    if n == 0 {
        return (groups, gpus.to_vec());
    }
    while left.len() >= n {
        let mut group: Vec<usize> = Vec::with_capacity(n);
        if n == 1 {
            group.push(left[0]);
        } else {
            // The closest pair left: the first (lowest positions) among equals.
            let mut best: Option<(u32, usize, usize)> = None;
            for (i, &a) in left.iter().enumerate() {
                for &b in &left[i + 1..] {
                    let l = link(a, b);
                    if best.is_none_or(|(bl, _, _)| l > bl) {
                        best = Some((l, a, b));
                    }
                }
            }
            if let Some((_, a, b)) = best {
                group.push(a);
                group.push(b);
            }
        }
        left.retain(|p| !group.contains(p));
        while group.len() < n {
            let mut best: Option<(u32, usize)> = None;
            for &c in &left {
                let l: u32 = group.iter().map(|&g| link(g, c)).sum();
                if best.is_none_or(|(bl, _)| l > bl) {
                    best = Some((l, c));
                }
            }
            let Some((_, c)) = best else { break };
            group.push(c);
            left.retain(|&p| p != c);
        }
        let mut members: Vec<usize> = group.iter().map(|&p| gpus[p]).collect();
        members.sort_unstable();
        groups.push(members);
    }
    groups.sort();
    (groups, left.iter().map(|&p| gpus[p]).collect())
}

/// NVML's `NVML_NVLINK_MAX_LINKS`: the most NVLink links a GPU has.
const NVLINK_MAX_LINKS: u32 = 18;

/// How closely each pair of `count` GPUs connects, from NVML: NVLink links between them count
/// most (10 each), then the PCIe path (6 on one board, 5 under one PCIe switch, 4 under several,
/// 3 under one host bridge, 2 in one NUMA node, 1 across the system). `None` where NVML says
/// nothing (no driver), where `CUDA_VISIBLE_DEVICES` renumbers the GPUs (NVML counts them all),
/// or with the stand-in GPU count of the tests: the groups are then in index order.
pub fn gpu_links(count: usize) -> Option<Vec<Vec<u32>>> {
    use nvml_wrapper::enum_wrappers::device::TopologyLevel;
    if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some()
        || std::env::var_os("TUNE_TEST_CUDA_DEVICES").is_some()
    {
        return None;
    }
    let nvml = nvml_wrapper::Nvml::builder()
        .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
        .init()
        .or_else(|_| nvml_wrapper::Nvml::init())
        .ok()?;
    let index = |i: usize| u32::try_from(i).ok();
    let bus_ids: Vec<Option<String>> = (0..count)
        .map(|i| {
            let d = nvml.device_by_index(index(i)?).ok()?;
            d.pci_info().ok().map(|p| p.bus_id.to_lowercase())
        })
        .collect();
    let mut links = vec![vec![0u32; count]; count];
    for (a, row) in links.iter_mut().enumerate() {
        let Some(da) = index(a).and_then(|i| nvml.device_by_index(i).ok()) else {
            continue;
        };
        // NVLink: each active link of `a` ends at some GPU's PCI bus id.
        for l in 0..NVLINK_MAX_LINKS {
            let link = da.link_wrapper_for(l);
            if !link.is_active().unwrap_or(false) {
                continue;
            }
            let Ok(remote) = link.remote_pci_info() else {
                continue;
            };
            let remote = remote.bus_id.to_lowercase();
            if let Some(b) = bus_ids
                .iter()
                .position(|id| id.as_deref() == Some(remote.as_str()))
                && b != a
            {
                row[b] += 10;
            }
        }
        for (b, cell) in row.iter_mut().enumerate() {
            if b == a {
                continue;
            }
            let Some(db) = index(b).and_then(|i| nvml.device_by_index(i).ok()) else {
                continue;
            };
            *cell += match da.topology_common_ancestor(db) {
                Ok(TopologyLevel::Internal) => 6,
                Ok(TopologyLevel::Single) => 5,
                Ok(TopologyLevel::Multiple) => 4,
                Ok(TopologyLevel::HostBridge) => 3,
                Ok(TopologyLevel::Node) => 2,
                Ok(TopologyLevel::System) => 1,
                _ => 0,
            };
        }
    }
    Some(links)
}

/// Refuses a study whose `[workers] gpus_per_trial` (`n` > 1) this machine cannot meet with
/// the GPUs `"auto"` found (`visible` of them): the slots then are not groups of `n`. Checked
/// before any trial starts, by `tune run` and by `tune worker` on each machine.
pub fn check_groups(slots: &[String], n: usize, visible: usize) -> Result<(), DevicesError> {
    if n <= 1 || slots.iter().all(|d| cuda_indices(d).len() == n) {
        return Ok(());
    }
    let why = match visible {
        0 => "\"auto\" found no visible CUDA device, only the CPU; remove `gpus_per_trial` to train on the CPU".to_string(),
        v => format!("this machine shows {v} visible CUDA device(s); write at most {v}"),
    };
    Err(DevicesError::NotOnMachine(format!(
        "key `workers.gpus_per_trial`: {n} GPUs per trial need {n} CUDA devices, but {why}, or run on a machine with {n} GPUs or more"
    )))
}

/// The notice for GPUs that no slot uses when `[workers] gpus_per_trial` groups the GPUs
/// `"auto"` found (6 GPUs in groups of 4: one slot, two idle); `None` when every one is used.
pub fn idle_gpus_notice(slots: &[String], visible: usize) -> Option<String> {
    let grouped = slots.iter().find(|d| d.contains(','))?;
    let n = cuda_indices(grouped).len();
    let used: std::collections::BTreeSet<usize> =
        slots.iter().flat_map(|d| cuda_indices(d)).collect();
    let idle: Vec<String> = (0..visible)
        .filter(|i| !used.contains(i))
        .map(|i| format!("cuda:{i}"))
        .collect();
    if idle.is_empty() {
        return None;
    }
    let groups: std::collections::BTreeSet<&String> = slots.iter().collect();
    Some(format!(
        "gpus_per_trial = {n}: {visible} visible GPUs make {} group(s) of {n}; {} GPU(s) sit idle ({})",
        groups.len(),
        idle.len(),
        idle.join(", ")
    ))
}

/// Refuses slots on CUDA devices this machine does not have (`visible` of them), before any
/// trial starts: otherwise every trial on such a slot fails and burns the budget. The message
/// names the key and what to write instead.
pub fn check_slots(
    slots: &[String],
    visible: usize,
    from: DevicesFrom,
) -> Result<(), DevicesError> {
    let mut missing: Vec<String> = slots
        .iter()
        .flat_map(|d| cuda_indices(d))
        .filter(|&i| i >= visible)
        .map(|i| format!("cuda:{i}"))
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

    /// A symmetric connectivity matrix of `n` GPUs with `score` on each listed pair.
    fn matrix(n: usize, pairs: &[(usize, usize, u32)]) -> Vec<Vec<u32>> {
        let mut m = vec![vec![0; n]; n];
        for &(a, b, s) in pairs {
            m[a][b] = s;
            m[b][a] = s;
        }
        m
    }

    #[test]
    fn without_topology_the_groups_are_in_index_order_and_the_rest_sits_idle() {
        let gpus: Vec<usize> = (0..6).collect();
        assert_eq!(
            group_gpus(&gpus, &[], 2),
            (vec![vec![0, 1], vec![2, 3], vec![4, 5]], vec![])
        );
        assert_eq!(
            group_gpus(&gpus, &matrix(6, &[]), 4),
            (vec![vec![0, 1, 2, 3]], vec![4, 5])
        );
        assert_eq!(group_gpus(&gpus[..3], &[], 4), (vec![], vec![0, 1, 2]));
        assert_eq!(
            group_gpus(&gpus[..2], &[], 1),
            (vec![vec![0], vec![1]], vec![])
        );
    }

    #[test]
    fn nvlink_pairs_are_grouped_first() {
        // 0–2 and 1–3 joined by NVLink (10 per link), every pair under one host bridge (3).
        let all: Vec<(usize, usize, u32)> = (0..4)
            .flat_map(|a| (a + 1..4).map(move |b| (a, b, 3)))
            .collect();
        let mut m = matrix(4, &all);
        for (a, b) in [(0, 2), (1, 3)] {
            m[a][b] += 20;
            m[b][a] += 20;
        }
        assert_eq!(
            group_gpus(&[0, 1, 2, 3], &m, 2),
            (vec![vec![0, 2], vec![1, 3]], vec![])
        );
        // The pair with the most links goes first, even past lower indices.
        let m = matrix(4, &[(2, 3, 40), (0, 1, 10)]);
        assert_eq!(
            group_gpus(&[0, 1, 2, 3], &m, 2),
            (vec![vec![0, 1], vec![2, 3]], vec![])
        );
        let m = matrix(3, &[(1, 2, 10)]);
        assert_eq!(group_gpus(&[0, 1, 2], &m, 2), (vec![vec![1, 2]], vec![0]));
    }

    #[test]
    fn groups_of_four_follow_the_nvlink_islands() {
        // Two islands of four GPUs, fully linked inside, {0, 2, 4, 6} and {1, 3, 5, 7}.
        let mut pairs = Vec::new();
        for island in [[0, 2, 4, 6], [1, 3, 5, 7]] {
            for (i, &a) in island.iter().enumerate() {
                for &b in &island[i + 1..] {
                    pairs.push((a, b, 20));
                }
            }
        }
        let m = matrix(8, &pairs);
        let gpus: Vec<usize> = (0..8).collect();
        assert_eq!(
            group_gpus(&gpus, &m, 4),
            (vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]], vec![])
        );
        // The matrix is by position: listed GPUs 4..8 keep their own numbers.
        let m = matrix(4, &[(0, 3, 10), (1, 2, 10)]);
        assert_eq!(
            group_gpus(&[4, 5, 6, 7], &m, 2),
            (vec![vec![4, 7], vec![5, 6]], vec![])
        );
    }

    #[test]
    fn a_group_is_one_slot_device_and_each_of_its_gpus_is_checked() {
        assert_eq!(group_device(&[0, 1]), "cuda:0,cuda:1");
        assert_eq!(cuda_indices("cuda:2,cuda:3"), [2, 3]);
        assert_eq!(cuda_index("cuda:2,cuda:3"), Some(2));
        assert_eq!(cuda_indices("cpu"), Vec::<usize>::new());
        let e = check_slots(
            &slots(&["cuda:0,cuda:1", "cuda:2,cuda:3"]),
            3,
            DevicesFrom::Flag,
        )
        .expect_err("cuda:3 is missing");
        assert!(
            e.to_string().contains("\"cuda:3\" is not on this machine"),
            "{e}"
        );
        assert!(check_slots(&slots(&["cuda:0,cuda:1"]), 2, DevicesFrom::Flag).is_ok());
    }

    #[test]
    fn groups_the_machine_cannot_make_are_refused_naming_the_key() {
        assert!(check_groups(&slots(&["cuda:0,cuda:1"]), 2, 2).is_ok());
        assert!(check_groups(&slots(&["cuda:0"]), 1, 1).is_ok());
        let e = check_groups(&slots(&["cuda:0", "cuda:1"]), 4, 2).expect_err("2 < 4");
        assert_eq!(
            e.to_string(),
            "key `workers.gpus_per_trial`: 4 GPUs per trial need 4 CUDA devices, but this machine shows 2 visible CUDA device(s); write at most 2, or run on a machine with 4 GPUs or more"
        );
        let e = check_groups(&slots(&["cpu"]), 2, 0).expect_err("no GPU");
        assert!(e.to_string().contains("only the CPU"), "{e}");
    }

    #[test]
    fn the_gpus_no_group_uses_are_named_as_idle() {
        let notice =
            idle_gpus_notice(&slots(&["cuda:0,cuda:1,cuda:2,cuda:3"]), 6).expect("two GPUs idle");
        assert_eq!(
            notice,
            "gpus_per_trial = 4: 6 visible GPUs make 1 group(s) of 4; 2 GPU(s) sit idle (cuda:4, cuda:5)"
        );
        assert_eq!(
            idle_gpus_notice(&slots(&["cuda:0,cuda:1", "cuda:2,cuda:3"]), 4),
            None
        );
        // One GPU per slot: no groups, nothing to say.
        assert_eq!(idle_gpus_notice(&slots(&["cuda:0"]), 4), None);
    }
}
