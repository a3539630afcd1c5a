//! Which machine and process this is: what storage records with a worker and a trial, and
//! what tells a dead local owner (its process is gone) from a remote one (only its silence
//! tells).

/// This machine's name, for recording which host runs a trial.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Whether process `pid` exists on this machine.
pub fn process_alive(pid: i64) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::ESRCH) => false,
        // EPERM: it exists but belongs to someone else.
        Err(_) => true,
    }
}
