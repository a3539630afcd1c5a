//! The `tune watch` poll benchmark: how long a replay of a large stored study takes, on a
//! database it fills itself (the render half of the UI benchmark is `tui::bench`).

use std::time::{Instant, SystemTime};

use crate::trial::Direction;
use crate::tui::bench as fixtures;

/// Times `tune watch`'s poller on a database of `n` finished trials with 3 reports each:
/// the first poll (the whole study), a poll when nothing was committed, and a poll after one
/// new report. Returns milliseconds for each, in that order.
pub fn watch_poll_ms(n: u64) -> Result<[f64; 3], crate::storage::StorageError> {
    use crate::storage::{ClaimRequest, NewStudy, SqliteStorage, Storage};
    use crate::trial::{Ran, TrialStatus};
    let dir = std::env::temp_dir().join(format!("tune-watch-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = dir.join("bench.db");
    let space = {
        let t: toml::Table = toml::from_str(
            r#"lr = { type = "float", low = 1e-4, high = 1.0, log = true }
               batch_size = { type = "categorical", choices = [32, 64, 128, 256] }
               optimizer = { type = "categorical", choices = ["adam", "sgd", "adamw"] }
               dropout = { type = "float", low = 0.0, high = 0.5 }"#,
        )
        .unwrap_or_default();
        crate::space::Space::from_toml(&t).map_err(|e| crate::storage::StorageError::Conflict {
            path: db.clone(),
            message: e.to_string(),
        })?
    };
    let mut w = SqliteStorage::open(&db)?;
    let study = w.create_or_load_study(&NewStudy {
        name: "bench",
        direction: Direction::Minimize,
        metric: "val_loss",
        file: None,
        source: None,
    })?;
    let worker = w.register_worker(&study, &["cpu".into()])?;
    let mut last = None;
    for k in 0..n {
        // Queued with its params, then claimed: filling the study stays linear in its size.
        w.enqueue(&study, &space, &fixtures::params(k))?;
        let req = ClaimRequest {
            worker,
            budget: None,
            slot: 0,
            device: "cpu",
            space: &space,
        };
        let Some(trial) = w.claim(&study, &req, &mut |_, _| fixtures::params(k))? else {
            continue;
        };
        let trial_id = trial.id;
        for e in 1..=3 {
            w.add_report(trial_id, e, &fixtures::report(k, e), false, "val_loss")?;
        }
        w.finish_trial(
            trial_id,
            &TrialStatus::Complete {
                value: fixtures::val_loss(k, 3),
                ran: Ran::default(),
            },
            &[],
        )?;
        last = Some(trial_id);
    }
    let mut p = crate::events::replay::Poller::open(&db, "bench")?;
    let now = SystemTime::now();
    let t = Instant::now();
    let first = p.poll(now)?;
    let first_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let idle = p.poll(now)?;
    let idle_ms = t.elapsed().as_secs_f64() * 1000.0;
    if let Some(last) = last {
        w.add_report(last, 4, &fixtures::report(n, 4), false, "val_loss")?;
    }
    let t = Instant::now();
    let one = p.poll(now)?;
    let one_ms = t.elapsed().as_secs_f64() * 1000.0;
    debug_assert!(first.len() as u64 >= n && idle.is_empty() && one.len() == 1);
    let _ = std::fs::remove_dir_all(&dir);
    Ok([first_ms, idle_ms, one_ms])
}
