//! The keeper: a small process (the `tune` binary itself, started as `tune __keep-trial`)
//! between tune and every process a trial runs — a user's command or a `tune-worker` — so that
//! nothing a trial started outlives the trial or tune.
//!
//! Why a process of its own: a trial's daemon that double-forks or calls `setsid()` leaves the
//! trial's process group, and after `kill -9` of tune no code of tune runs at all. The keeper
//! is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so every orphan of the trial becomes its
//! child, and it holds the read end of a *lifeline* pipe whose only write end lives in tune.
//! It kills every descendant (found through `/proc`, whatever its session or group) when
//! - the trial's process ends (a daemon left behind does not survive the trial),
//! - tune drops the lifeline (the SIGKILL after the grace period), or
//! - tune dies in any way, `kill -9` included: the kernel closes the write end.
//!
//! A lifeline, not `PR_SET_PDEATHSIG`, between tune and the keeper: that signal fires when the
//! *thread* that forked the child exits (tokio's blocking threads come and go), and it reaches
//! only the direct child. Between the keeper (one thread) and the trial's process it is exact,
//! and is set, so that a keeper killed on its own takes the trial's process with it.
//! The keeper forwards SIGTERM (and SIGINT, SIGHUP) to the trial's process group, and ends with
//! the trial's own exit status, or dies of the trial's own signal, so the runners see the
//! trial's end as if there were no keeper.
//!
//! What does not belong here: deciding when to stop a trial (the runners) or what its end
//! means (the scheduler).

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The hidden first argument that makes `tune` a keeper.
pub const KEEPER_ARG: &str = "__keep-trial";

/// The exit status of a keeper that could not start its program (as a shell's "not found").
pub const CANNOT_START: i32 = 127;

/// The prefix of the keeper's own line on standard error when the program cannot start.
pub const CANNOT_START_PREFIX: &str = "tune: cannot start ";

/// How a runner starts a trial's process under a keeper: the `tune` binary to run as one.
#[derive(Debug, Clone)]
pub struct Keeper {
    exe: PathBuf,
}

/// The write end of a trial's lifeline: dropping it makes the keeper kill the whole trial.
#[derive(Debug)]
pub struct Lifeline {
    _write: OwnedFd,
}

impl Keeper {
    /// The keeper is this very binary (`tune`), which knows [`KEEPER_ARG`].
    pub fn current() -> Option<Keeper> {
        std::env::current_exe().ok().map(|exe| Keeper { exe })
    }

    /// A command that runs `program args` under a keeper, with a fresh lifeline. The caller
    /// sets its environment, directory and standard streams as for the program itself (the
    /// keeper passes them on untouched); the keeper leads a process group of its own, and the
    /// program another.
    pub fn command(
        &self,
        program: &str,
        args: &[String],
    ) -> std::io::Result<(tokio::process::Command, Lifeline)> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let read_fd = read.as_raw_fd();
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg(KEEPER_ARG)
            .arg(read_fd.to_string())
            .arg("--")
            .arg(program)
            .args(args)
            .process_group(0);
        // The read end must survive the exec into the keeper (it was made close-on-exec so
        // that no other child of tune inherits it); the flag is per process after the fork.
        // SAFETY: fcntl is async-signal-safe, and `read` outlives the spawn: it is moved into
        // the closure, which the command keeps until it is dropped.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(read.as_raw_fd(), libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok((cmd, Lifeline { _write: write }))
    }
}

/// The signal the keeper was last asked to pass on (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn remember(sig: libc::c_int) {
    PENDING.store(sig, Ordering::SeqCst);
}

extern "C" fn wake(_: libc::c_int) {}

/// The keeper's `main`: `args` are what follows [`KEEPER_ARG`]: the lifeline's descriptor,
/// `--`, the program and its arguments. Never returns: it exits with the program's status or
/// dies of its signal.
pub fn keeper_main(args: &[OsString]) -> ! {
    let (lifeline, program, rest) = match args {
        [fd, dashes, program, rest @ ..] if dashes == "--" => (
            fd.to_str().and_then(|s| s.parse::<RawFd>().ok()),
            program,
            rest,
        ),
        _ => {
            eprintln!(
                "tune: {KEEPER_ARG} is for tune's own use: {KEEPER_ARG} FD -- PROGRAM [ARG…]"
            );
            std::process::exit(2);
        }
    };
    // SAFETY: plain system calls on this process's own state, before any thread exists.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        if let Some(fd) = lifeline {
            // The trial never sees the lifeline.
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::signal(sig, remember as *const () as libc::sighandler_t);
        }
        // A handler (not the default, which ignores it) so that the trial's end interrupts
        // the wait on the lifeline at once (ppoll is never restarted after a signal). It stays
        // blocked outside that wait, which unblocks it atomically: a trial that ends just
        // before the wait still cuts it short. The program starts with an empty mask (std
        // resets it in the child).
        libc::signal(libc::SIGCHLD, wake as *const () as libc::sighandler_t);
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
    }
    use std::os::unix::process::CommandExt;
    let keeper = std::process::id() as libc::pid_t;
    let mut command = std::process::Command::new(program);
    command.args(rest).process_group(0);
    // SAFETY: async-signal-safe calls only, in the child between fork and exec. The keeper
    // has one thread, so the parent-death signal (which follows the forking *thread*) fires
    // exactly when the keeper dies: a keeper killed on its own (the OOM killer, a stray
    // kill -9) takes its trial's process with it instead of leaving it untethered.
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != keeper {
                libc::_exit(CANNOT_START); // the keeper died before the signal was set
            }
            Ok(())
        });
    }
    let child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{CANNOT_START_PREFIX}`{}`: {e}", program.to_string_lossy());
            std::process::exit(CANNOT_START);
        }
    };
    let pid = child.id() as libc::pid_t;
    // Its status is collected with waitpid below, together with the orphans'.
    drop(child);
    let mut status: Option<libc::c_int> = None;
    let mut lifeline = lifeline;
    loop {
        reap(pid, &mut status);
        if status.is_some() {
            break;
        }
        let sig = PENDING.swap(0, Ordering::SeqCst);
        if sig != 0 {
            // SAFETY: signalling the trial's own process group.
            unsafe { libc::kill(-pid, sig) };
        }
        match poll_gone(lifeline) {
            Some(true) => break,
            Some(false) => {}
            // Not a descriptor (started by hand): nothing to watch.
            None => lifeline = None,
        }
    }
    kill_descendants(pid, &mut status);
    mirror(status)
}

/// How often the keeper looks at the trial, its signals and the lifeline.
const TICK: Duration = Duration::from_millis(50);

/// Waits up to [`TICK`] on the lifeline (or, without one, for a signal): `Some(true)` when
/// tune is gone (the write end is closed, or something was written), `None` when `fd` is not
/// open. SIGCHLD and the forwarded signals cut the wait short.
fn poll_gone(fd: Option<RawFd>) -> Option<bool> {
    let mut p = libc::pollfd {
        fd: fd.unwrap_or(-1),
        events: libc::POLLIN,
        revents: 0,
    };
    let tick = libc::timespec {
        tv_sec: 0,
        tv_nsec: TICK.as_nanos() as libc::c_long,
    };
    // SAFETY: one pollfd (a negative fd is skipped by the kernel), a timespec and an empty
    // signal mask, all valid for the call.
    let n = unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::ppoll(&mut p, 1, &tick, &none)
    };
    if n <= 0 || fd.is_none() {
        return Some(false);
    }
    if p.revents & libc::POLLNVAL != 0 {
        return None;
    }
    Some(p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
}

/// Reaps every child that has ended (the trial and any orphan it left to the keeper), keeping
/// the trial's status.
fn reap(trial: libc::pid_t, status: &mut Option<libc::c_int>) {
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: waitpid writes one int.
        let p = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if p <= 0 {
            return;
        }
        if p == trial {
            *status = Some(st);
        }
    }
}

/// Kills every process below the keeper until none is left, and reaps them.
fn kill_descendants(trial: libc::pid_t, status: &mut Option<libc::c_int>) {
    // SAFETY: signalling the trial's own process group.
    unsafe { libc::kill(-trial, libc::SIGKILL) };
    let me = std::process::id() as libc::pid_t;
    // Bounded: a process that forks faster than SIGKILL lands cannot keep the keeper forever;
    // each round kills every process found, so a few rounds suffice in practice.
    for _ in 0..400 {
        let alive = descendants(me);
        if alive.is_empty() {
            break;
        }
        for p in alive {
            // SAFETY: `p` descends from this keeper.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        reap(trial, status);
        std::thread::sleep(Duration::from_millis(5));
    }
    // The trial itself may still be a zombie not yet reported.
    for _ in 0..200 {
        reap(trial, status);
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    reap(trial, status);
}

/// The live (not zombie) descendants of `root`, read from `/proc/*/stat`.
fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parent_of: Vec<(libc::pid_t, libc::pid_t, bool)> = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "PID (COMM) STATE PPID …": COMM may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next().unwrap_or("");
        let Some(ppid) = fields.next().and_then(|s| s.parse().ok()) else {
            continue;
        };
        parent_of.push((pid, ppid, state == "Z" || state == "X"));
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        for &(c, pp, _) in &parent_of {
            if pp == p && !found.contains(&c) {
                found.push(c);
            }
        }
        i += 1;
    }
    found
        .into_iter()
        .skip(1)
        .filter(|p| !parent_of.iter().any(|&(c, _, dead)| c == *p && dead))
        .collect()
}

/// The parent of `pid`, read from `/proc/PID/stat`; `None` when it is gone or unreadable.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID …": COMM may hold spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Whether process `pid` is `root` or descends from it: the walk up its parents (a few reads of
/// `/proc`, unlike `descendants`' scan of every process), which is how GPU telemetry tells a
/// trial's processes among those the driver lists. An orphan of the trial is the keeper's
/// child (it is a subreaper), so it still counts.
pub fn descends_from(pid: u32, root: u32) -> bool {
    // Bounded: a process tree deeper than this is no trial's, and a loop cannot keep us.
    let mut p = pid;
    for _ in 0..64 {
        if p == root {
            return true;
        }
        match parent_of(p) {
            Some(pp) if pp != 0 && pp != p => p = pp,
            _ => return false,
        }
    }
    false
}

/// Ends the keeper as its trial ended: the same exit status, or death by the same signal.
fn mirror(status: Option<libc::c_int>) -> ! {
    let Some(st) = status else {
        std::process::exit(1);
    };
    if libc::WIFEXITED(st) {
        std::process::exit(libc::WEXITSTATUS(st));
    }
    if libc::WIFSIGNALED(st) {
        let sig = libc::WTERMSIG(st);
        // SAFETY: this process's own signal disposition and limits, then the signal itself.
        unsafe {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // The trial dumped its core already, if it did; the keeper's would be noise.
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(1)
}
