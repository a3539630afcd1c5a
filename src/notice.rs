//! What `tune` tells the user while the work goes on: the database lost and retried, then back;
//! a trial's result refused because another process re-queued it. These are not errors (the
//! work continues) and not events of the study (they say nothing about a trial's state).
//!
//! They go to standard error, one `tune: ` line each, except while a live UI owns the terminal:
//! a line written there lands on top of the UI's frame and stays until the next full redraw. The
//! UI's owner then holds a [`Redirect`], and the messages reach the UI's footer instead.
//! Everything here is a leaf: any room may tell, none of this knows who listens.

use std::sync::{Arc, Mutex, PoisonError};

/// `eprintln!` that never panics: where standard error is a pipe whose reader is gone (a parent
/// killed, `tune run … 2>&1 | head`), a line is lost, and nothing else changes. A long-running
/// command (`run`, `worker`) must still record every trial's state, answer SIGTERM and exit
/// with its documented status; `eprintln!` would panic instead, in whichever task wrote.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// [`say!`] for standard output.
#[macro_export]
macro_rules! say_out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// What every told line starts with on standard error.
const PREFIX: &str = "tune: ";

type Sink = Arc<dyn Fn(String) + Send + Sync>;

/// Where messages go; `None`: standard error.
static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// Tells the user `message` (no `tune: ` prefix, no newline): on standard error, or to whoever
/// holds the [`Redirect`]. A message that brings its own prefix loses it: written by the
/// caller as well, it printed `tune: tune: …`.
pub fn tell(message: impl Into<String>) {
    let mut message = message.into();
    if let Some(rest) = message.strip_prefix(PREFIX) {
        message = rest.to_string();
    }
    // Cloned out of the lock: a sink that tells again must not deadlock.
    let sink = SINK.lock().unwrap_or_else(PoisonError::into_inner).clone();
    match sink {
        Some(sink) => sink(message),
        None => crate::say!("{PREFIX}{message}"),
    }
}

/// Sends every message to `sink` until the returned guard is dropped; then standard error again.
#[must_use = "messages go back to standard error when the guard is dropped"]
pub fn redirect(sink: impl Fn(String) + Send + Sync + 'static) -> Redirect {
    *SINK.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(sink));
    Redirect { _private: () }
}

/// Holds messages away from standard error; see [`redirect`].
pub struct Redirect {
    _private: (),
}

impl Drop for Redirect {
    fn drop(&mut self) {
        *SINK.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// Tests that redirect take turns: there is one sink per process.
#[cfg(test)]
pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_the_redirect_while_it_is_held_and_standard_error_after() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let got = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&got);
        let guard = redirect(move |m| into.lock().expect("not poisoned").push(m));
        tell("lost the database");
        tell(String::from("reconnected"));
        drop(guard);
        tell("after: to standard error");
        // Other tests of this process may tell meanwhile: look for ours, in order.
        let got = got.lock().expect("not poisoned");
        let at = |m: &str| got.iter().position(|g| g == m);
        assert!(at("lost the database") < at("reconnected"), "{got:?}");
        assert!(at("lost the database").is_some(), "{got:?}");
        assert!(at("after: to standard error").is_none(), "{got:?}");
    }

    #[test]
    fn a_message_that_brings_its_own_prefix_is_told_with_one() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let got = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&got);
        let guard = redirect(move |m| into.lock().expect("not poisoned").push(m));
        tell("tune: trial 7: cannot fetch its checkpoints");
        tell("trial 8: tune: is part of the text");
        drop(guard);
        let got = got.lock().expect("not poisoned");
        assert!(
            got.iter()
                .any(|m| m == "trial 7: cannot fetch its checkpoints"),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|m| m == "trial 8: tune: is part of the text"),
            "{got:?}"
        );
    }
}
