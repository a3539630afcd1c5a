//! Helpers shared by the terminal tests that drive a real pane in `tmux`.

use std::process::Command;

/// The terminal modes of a tmux session's pane, as `stty -a` prints them, read straight from
/// the pane's tty by this process. Reading them here, rather than from `stty` output on the
/// pane's screen, leaves no race between a screen capture and the shell's next command.
pub fn pane_modes(session: &str) -> String {
    let out = Command::new("tmux")
        .args(["display-message", "-p", "-t", session, "#{pane_tty}"])
        .output()
        .expect("tmux display-message");
    let tty = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        tty.starts_with("/dev/"),
        "no tty for tmux session {session}: {:?} {}",
        tty,
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("stty")
        .args(["-a", "-F", &tty])
        .output()
        .expect("stty runs");
    let modes = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "stty -a -F {tty} failed: {}{modes}",
        String::from_utf8_lossy(&out.stderr)
    );
    modes
}

/// The pane is back in cooked mode with echo, as a shell expects after a full-screen program.
pub fn assert_cooked(session: &str) {
    let modes = pane_modes(session);
    let words: Vec<&str> = modes.split([' ', ';', '\n']).collect();
    assert!(
        words.contains(&"icanon"),
        "the pane is not in canonical mode:\n{modes}"
    );
    assert!(words.contains(&"echo"), "echo is off in the pane:\n{modes}");
}
