//! The live UI's feed with [`crate::notice`]'s messages merged in: while a UI owns the terminal,
//! a "lost the database; retrying" written to standard error would land on top of its frame, so
//! it becomes a footer notice instead ([`Update::Notice`]). Without a UI (the line printer)
//! nothing is redirected and the messages stay on standard error.

use tokio::sync::mpsc::{self, UnboundedReceiver};

use super::{Event, Update};
use crate::notice::Redirect;

/// What a feed of the UI carries: a study's events, or the updates of a replay.
pub trait IntoUpdate: Send + 'static {
    fn into_update(self) -> Update;
}

impl IntoUpdate for Update {
    fn into_update(self) -> Update {
        self
    }
}

impl IntoUpdate for Event {
    fn into_update(self) -> Update {
        Update::Event(self)
    }
}

/// `feed`, with every message told meanwhile merged in as a notice, until the returned guard is
/// dropped (hold it exactly as long as the UI owns the terminal). The merged feed ends when
/// `feed` ends, so the UI still sees its source go away. Must run inside a tokio runtime.
pub fn merge<T: IntoUpdate>(
    mut feed: UnboundedReceiver<T>,
) -> (UnboundedReceiver<Update>, Redirect) {
    let (told_tx, mut told) = mpsc::unbounded_channel::<String>();
    let redirect = crate::notice::redirect(move |m| {
        // A closed channel means the UI is gone; the guard is about to be dropped.
        let _ = told_tx.send(m);
    });
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut telling = true;
        loop {
            let update = tokio::select! {
                u = feed.recv() => match u {
                    Some(u) => u.into_update(),
                    None => return,
                },
                m = told.recv(), if telling => match m {
                    Some(m) => Update::Notice(m),
                    None => {
                        telling = false;
                        continue;
                    }
                },
            };
            if tx.send(update).is_err() {
                return;
            }
        }
    });
    (rx, redirect)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_told_while_the_guard_lives_reach_the_feed_as_notices_and_the_feed_ends_with_its_source()
     {
        let _serial = crate::notice::SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(merged_feed());
    }

    async fn merged_feed() {
        let (tx, rx) = mpsc::unbounded_channel::<Update>();
        let (mut merged, guard) = merge(rx);
        crate::notice::tell("lost the database (x); retrying for up to 120 s");
        let mut seen = Vec::new();
        while let Some(u) = merged.recv().await {
            // Other tests of this process may tell meanwhile: look for ours.
            if let Update::Notice(m) = &u
                && m.starts_with("lost the database (x)")
            {
                seen.push(u);
                break;
            }
        }
        assert_eq!(seen.len(), 1);
        drop(guard);
        tx.send(Update::Notice("from the source".into()))
            .expect("the merge still reads its source");
        drop(tx);
        let mut rest = Vec::new();
        while let Some(u) = merged.recv().await {
            rest.push(u);
        }
        assert!(
            rest.contains(&Update::Notice("from the source".into())),
            "{rest:?}"
        );
    }
}
