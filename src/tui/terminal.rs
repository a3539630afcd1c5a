//! The terminal loop: owns the terminal, turns keys and events into state changes, sends the
//! user's steering to the scheduler and redraws.
//!
//! It redraws when something happened (an event, a key, a resize) or once a second for the
//! clocks, never faster than [`MIN_FRAME`], and sleeps otherwise: idle it costs a wake-up a
//! second plus the input thread's poll. The terminal is restored on every way out: return,
//! error (a guard's `Drop`), panic (a hook), SIGTERM and SIGHUP (handled as a clean stop).

use std::io::{self, Stdout, stdout};
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event as TermEvent};
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui::crossterm::{cursor, execute};
use ratatui::layout::Rect;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::time::{Instant, MissedTickBehavior};

use super::state::{Action, Mode, UiState, Update};
use super::view;
use crate::scheduler::{Control, Event};

/// The shortest time between two frames: bursts of reports coalesce into one redraw.
pub const MIN_FRAME: Duration = Duration::from_millis(50);
/// How often the clocks on screen move when nothing else happens.
pub const TICK: Duration = Duration::from_secs(1);
/// How long the input thread blocks in one poll before it checks whether to stop.
const INPUT_POLL: Duration = Duration::from_millis(250);

/// How the UI runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub mode: Mode,
    /// Colours on; see [`super::color_allowed`].
    pub color: bool,
}

/// Whether the terminal is ours right now (raw mode, alternate screen): the panic hook
/// restores it only then.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

fn restore_terminal() -> io::Result<()> {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return Ok(());
    }
    // Raw mode first: it has the most side effects if left on.
    let raw = disable_raw_mode();
    let screen = execute!(stdout(), LeaveAlternateScreen, cursor::Show);
    raw.and(screen)
}

fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // Restore before the message is printed, or it lands on the alternate screen
            // in raw mode and is lost.
            let _ = restore_terminal();
            previous(info);
        }));
    });
}

/// Owns the terminal while the UI runs and gives it back on drop, whatever the path out.
struct TerminalGuard {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl TerminalGuard {
    fn enter() -> io::Result<TerminalGuard> {
        install_panic_hook();
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        let setup = execute!(stdout(), EnterAlternateScreen)
            .and_then(|()| Terminal::new(CrosstermBackend::new(stdout())));
        match setup {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(e) => {
                let _ = restore_terminal();
                Err(e)
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = restore_terminal();
    }
}

/// Reads terminal input on its own thread (crossterm's reader blocks) and forwards it.
fn spawn_input(
    tx: UnboundedSender<TermEvent>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match event::poll(INPUT_POLL) {
                Ok(true) => match event::read() {
                    Ok(ev) => {
                        if tx.send(ev).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                },
                Ok(false) => {}
                Err(_) => return,
            }
        }
    })
}

/// Runs the UI on a study run in this process until the user leaves, or until the study
/// they asked to quit has ended.
///
/// `events` come from the scheduler; the user's steering goes to `controls`. Returns the final
/// state, so the caller can print a summary on the restored terminal.
pub async fn run(
    mut events: UnboundedReceiver<Event>,
    controls: UnboundedSender<Control>,
    opts: Options,
) -> io::Result<UiState> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(ev) = events.recv().await {
            if tx.send(Update::Event(ev)).is_err() {
                return;
            }
        }
    });
    run_updates(rx, Some(controls), opts).await
}

/// The loop itself, fed by [`Update`]s (the scheduler's events, or the `watch` poller's).
/// With no `controls` (watch), nothing is ever sent.
pub async fn run_updates(
    mut events: UnboundedReceiver<Update>,
    controls: Option<UnboundedSender<Control>>,
    opts: Options,
) -> io::Result<UiState> {
    let mut guard = TerminalGuard::enter()?;
    let (key_tx, mut keys) = mpsc::unbounded_channel();
    let stop_input = Arc::new(AtomicBool::new(false));
    let input = spawn_input(key_tx, stop_input.clone());
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;

    let mut state = UiState::new(opts.mode, opts.color, SystemTime::now());
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut events_open = true;
    let mut dirty = true;
    let mut last_draw: Option<Instant> = None;

    let send = |c: Control, mode: Mode| {
        if mode == Mode::Live
            && let Some(controls) = &controls
        {
            // A closed channel means the scheduler is gone; the state shows that already.
            let _ = controls.send(c);
        }
    };
    let mut batch: Vec<Update> = Vec::new();

    let result: io::Result<()> = loop {
        if state.should_exit() {
            break Ok(());
        }
        let due = last_draw.is_none_or(|t| t.elapsed() >= MIN_FRAME);
        if dirty && due {
            state.tick(SystemTime::now());
            let size = guard.terminal.size()?;
            state.set_page(view::table_rows(
                Rect::new(0, 0, size.width, size.height),
                &state,
            ));
            guard.terminal.draw(|f| view::render(f, &state))?;
            dirty = false;
            last_draw = Some(Instant::now());
        }
        let redraw_at = last_draw.map_or_else(Instant::now, |t| t + MIN_FRAME);
        tokio::select! {
            ev = events.recv(), if events_open => {
                match ev {
                    Some(ev) => {
                        // Drain what is already queued: one sort and one frame for a burst.
                        batch.push(ev);
                        while let Ok(ev) = events.try_recv() {
                            batch.push(ev);
                        }
                        state.apply_all(&batch);
                        batch.clear();
                    }
                    None => {
                        events_open = false;
                        state.disconnect();
                    }
                }
                dirty = true;
            }
            key = keys.recv() => {
                match key {
                    Some(TermEvent::Key(k)) => {
                        match state.handle_key(k) {
                            Some(Action::Control(c)) => send(c, opts.mode),
                            Some(Action::Exit) => break Ok(()),
                            None => {}
                        }
                    }
                    Some(TermEvent::Resize(..)) => {
                        // `draw` resizes its buffers; a full clear avoids stale cells on
                        // terminals that reflow on resize.
                        guard.terminal.clear()?;
                    }
                    Some(_) => {}
                    None => break Err(io::Error::other("terminal input closed")),
                }
                dirty = true;
            }
            _ = tick.tick() => dirty = true,
            _ = tokio::time::sleep_until(redraw_at), if dirty => {}
            _ = sigterm.recv() => {
                // A preemption (docs/cli.md, "Exit status"): the running trials checkpoint,
                // stop and are queued again; `tune run`'s own handler hears it too.
                send(Control::Preempt, opts.mode);
                break Ok(());
            }
            _ = sighup.recv() => {
                // The terminal is gone (an SSH session dropped): stop the study cleanly
                // rather than leave it running with no one to steer it.
                send(Control::Quit { graceful: false }, opts.mode);
                break Ok(());
            }
        }
    };
    stop_input.store(true, Ordering::Relaxed);
    drop(guard);
    // The input thread wakes within one poll; a panic there is not ours to propagate.
    let _ = tokio::task::spawn_blocking(move || input.join()).await;
    result.map(|()| state)
}
