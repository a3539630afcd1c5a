//! The processes a benchmark starts: the `tune` and `tune-worker` binaries installed beside
//! `tune-bench`, and the rule that they end with the benchmark.

use std::path::PathBuf;
use std::process::Command;

/// The `tune` binary the overhead and pruning benchmarks run: the one installed beside
/// `tune-bench`, so that a release `tune-bench` measures the release `tune` built with it and
/// never whatever `tune` is first on `PATH`.
pub fn tune_exe() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?.with_file_name("tune");
    anyhow::ensure!(
        exe.exists(),
        "{} not found: this benchmark runs the `tune` binary installed beside `tune-bench`; \
         build both with `cargo build --workspace` (with `--release` for figures)",
        exe.display()
    );
    Ok(exe)
}

/// Refuses to run the benchmark `what` where Fashion-MNIST, which it trains on, is missing.
pub fn require_fashion_mnist(what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        std::path::Path::new(tune::builtin::FASHION_MNIST_DIR)
            .join("train-images-idx3-ubyte.gz")
            .is_file(),
        "Fashion-MNIST is not installed in {} (run scripts/setup.sh, which installs the Debian \
         package dataset-fashion-mnist); the {what} benchmark trains on it",
        tune::builtin::FASHION_MNIST_DIR
    );
    Ok(())
}

/// Makes a child of a benchmark end with it: when the benchmark is killed (a `kill PID`, a
/// supervisor's SIGTERM), the child gets SIGTERM too instead of running on as an orphan. A
/// `tune run` child takes it as a preemption: no new trials, the running ones checkpoint and
/// stop as interrupted, every state recorded. Ctrl-C at a terminal already reaches the whole
/// process group.
///
/// Linux sends the signal when the *thread* that spawned the child ends, so only the main
/// thread, which lives as long as the benchmark, may spawn through this.
pub fn ends_with_bench(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and calls only prctl(2), which
    // is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn a_child_gets_sigterm_when_the_thread_that_started_it_ends() {
        // `spawn` returns only once the child has exec'd, so its death signal is already set
        // when the spawning thread ends: no race.
        let mut child = std::thread::spawn(|| {
            ends_with_bench(Command::new("sleep").arg("30"))
                .spawn()
                .expect("start sleep")
        })
        .join()
        .expect("the spawning thread");
        let status = child.wait().expect("wait for sleep");
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{status}");
    }
}
