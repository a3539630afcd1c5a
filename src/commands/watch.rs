//! `tune watch`: follow a study that another process runs, read from its database only.
//! On a terminal, the live UI; otherwise one line per trial event, like `tune run`.

use crate::storage::StorageUrl;
use std::process::ExitCode;

use tokio::sync::mpsc;

use super::open_study;
use crate::cli::WatchArgs;
use crate::events::replay::{Poller, spawn_poller};
use crate::events::{Event, Update};
use crate::tui::{self, Mode, Options, UiState};

pub fn watch(args: &WatchArgs, db: Option<&StorageUrl>) -> anyhow::Result<ExitCode> {
    let (storage, row, path) = open_study(&args.study, db)?;
    drop(storage);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if tui::stdout_is_terminal() {
        let state = rt.block_on(watch_ui(&path, &row.name, tui::color_allowed()))?;
        println!("{}", tui::summary_line(&state));
        return Ok(ExitCode::SUCCESS);
    }
    let poller = Poller::open(&path, &row.name)?;
    rt.block_on(async move {
        let mut updates = spawn_poller(poller);
        let (tx, rx) = mpsc::unbounded_channel();
        let printer = tokio::spawn(crate::events::lines::print_lines(
            rx,
            row.direction,
            row.metric.clone(),
        ));
        while let Some(u) = updates.recv().await {
            if let Update::Event(e) = u {
                let done = matches!(e, Event::StudyFinished { .. });
                if tx.send(e).is_err() || done {
                    break;
                }
            }
        }
        drop(tx);
        let _ = printer.await;
    });
    Ok(ExitCode::SUCCESS)
}

/// The live UI on `study` in the database `db`, read-only, until the user leaves.
async fn watch_ui(db: &StorageUrl, study: &str, color: bool) -> anyhow::Result<UiState> {
    let polled = spawn_poller(Poller::open(db, study)?);
    // While the UI owns the terminal, the database lost and retried is told in its footer: a
    // line on stderr would land on top of its frame.
    let (rx, told) = crate::events::notices::merge(polled);
    let state = tui::terminal::run_updates(
        rx,
        None,
        Options {
            mode: Mode::Watch,
            color,
        },
    )
    .await;
    drop(told);
    Ok(state?)
}
