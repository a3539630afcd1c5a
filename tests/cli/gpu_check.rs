//! `scripts/gpu-check.sh` on a machine without a GPU, and `scripts/setup.sh --cuda --check`: both
//! must refuse at once, with the reason, before anything runs, is built or is written. A stand-in
//! `nvidia-smi` plays each way a driver can be missing or broken.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Sandbox, output_within, stderr, text};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A PATH of the system's folders, without any real `nvidia-smi`, plus `bin` (stand-ins).
fn path_with(bin: &Path) -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display())
}

fn stand_in(sb: &Sandbox, name: &str, script: &str) -> PathBuf {
    let bin = sb.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let p = bin.join(name);
    std::fs::write(&p, script).expect("write the stand-in");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    bin
}

fn run_script(script: &str, args: &[&str], path: &str) -> (Output, Duration) {
    let mut c = Command::new("bash");
    c.arg(repo().join(script))
        .args(args)
        .env("PATH", path)
        .env_remove("TORCH_PYTHON")
        .stdin(Stdio::null());
    let t = Instant::now();
    let out = output_within(c, Duration::from_secs(60));
    (out, t.elapsed())
}

fn real_nvidia_smi() -> bool {
    [
        "/usr/local/bin/nvidia-smi",
        "/usr/bin/nvidia-smi",
        "/bin/nvidia-smi",
    ]
    .iter()
    .any(|p| Path::new(p).exists())
}

/// Refused with status 2 within seconds, the reason on stderr, and OUTDIR never created.
fn assert_refused(out: &Output, took: Duration, outdir: &Path, reason: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", text(out));
    assert!(
        stderr(out).contains(reason),
        "stderr lacks `{reason}`:\n{}",
        text(out)
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(!outdir.exists(), "{} was created", outdir.display());
}

#[test]
fn without_nvidia_smi_the_gpu_check_exits_2_at_once_and_writes_nothing() {
    if real_nvidia_smi() {
        eprintln!("skipped: this machine has nvidia-smi");
        return;
    }
    let sb = Sandbox::new();
    let bin = sb.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let outdir = sb.join("report");
    let (out, took) = run_script(
        "scripts/gpu-check.sh",
        &[outdir.to_str().expect("utf-8")],
        &path_with(&bin),
    );
    assert_refused(
        &out,
        took,
        &outdir,
        "no NVIDIA GPU here: nvidia-smi is not installed",
    );
    assert!(stderr(&out).contains("docs/gpu.md"), "{}", text(&out));
}

#[test]
fn a_driver_that_nvidia_smi_cannot_reach_or_that_lists_no_gpu_is_refused_with_its_words() {
    if real_nvidia_smi() {
        eprintln!("skipped: this machine has nvidia-smi");
        return;
    }
    for (script, reason) in [
        (
            "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n",
            "couldn't communicate with the NVIDIA driver",
        ),
        ("#!/bin/sh\nexit 0\n", "nvidia-smi cannot reach one"),
        (
            "#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n",
            "No devices were found",
        ),
    ] {
        let sb = Sandbox::new();
        let bin = stand_in(&sb, "nvidia-smi", script);
        let outdir = sb.join("report");
        let (out, took) = run_script(
            "scripts/gpu-check.sh",
            &[outdir.to_str().expect("utf-8")],
            &path_with(&bin),
        );
        assert_refused(&out, took, &outdir, "no NVIDIA GPU here");
        assert!(
            stderr(&out).contains(reason),
            "stderr lacks `{reason}`:\n{}",
            text(&out)
        );
    }
}

#[test]
fn the_gpu_check_without_an_outdir_or_with_a_flag_first_prints_its_usage() {
    let sb = Sandbox::new();
    let bin = sb.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    for args in [&[][..], &["--budget", "60"][..]] {
        let (out, _) = run_script("scripts/gpu-check.sh", args, &path_with(&bin));
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            stderr(&out).contains("usage: scripts/gpu-check.sh OUTDIR"),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn setup_cuda_check_refuses_a_missing_broken_or_old_driver_and_names_the_way_on_otherwise() {
    if real_nvidia_smi() {
        eprintln!("skipped: this machine has nvidia-smi");
        return;
    }
    // The driver as `nvidia-smi` reports it: its query, then its banner with the CUDA version.
    let driver = |version: &str, cuda: &str| {
        format!(
            "#!/bin/sh\ncase \"$1\" in --query-gpu=*) echo '{version}' ;; *) echo '| NVIDIA-SMI {version}   Driver Version: {version}   CUDA Version: {cuda}     |' ;; esac\n"
        )
    };
    let cases: Vec<(Option<String>, i32, &str)> = vec![
        (None, 2, "no nvidia-smi, so no NVIDIA driver here"),
        (
            Some("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n".into()),
            2,
            "nvidia-smi cannot talk to the NVIDIA driver",
        ),
        (
            Some(driver("535.104.05", "12.2")),
            2,
            "supports CUDA 12 at most",
        ),
        (
            Some(driver("580.95.05", "13.0")),
            0,
            "would install torch 2.13.0 and its CUDA libraries",
        ),
    ];
    for (script, code, needle) in cases {
        let sb = Sandbox::new();
        let bin = match &script {
            Some(s) => stand_in(&sb, "nvidia-smi", s),
            None => {
                let b = sb.join("bin");
                std::fs::create_dir_all(&b).expect("bin");
                b
            }
        };
        let (out, _) = run_script("scripts/setup.sh", &["--cuda", "--check"], &path_with(&bin));
        assert_eq!(out.status.code(), Some(code), "{needle}: {}", text(&out));
        assert!(
            text(&out).contains(needle),
            "output lacks `{needle}`:\n{}",
            text(&out)
        );
        // Nothing was installed or built on the way.
        assert!(!text(&out).contains("installing"), "{}", text(&out));
    }
}

#[test]
fn setup_check_goes_with_cuda() {
    let sb = Sandbox::new();
    let bin = sb.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let (out, _) = run_script("scripts/setup.sh", &["--check"], &path_with(&bin));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("--check goes with --cuda"),
        "{}",
        text(&out)
    );
}
