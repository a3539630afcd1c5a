//! Copying studies out of and into a PostgreSQL database.

use std::collections::HashMap;

use super::blocking::{PgResult, Session, Sql};
use super::id32;
use crate::storage::codec::direction_text;
use crate::storage::copy::{
    Copyable, GpuColumns, ReportDump, StudyDump, TrialDump, TuneTrialDump, WorkerDump,
};
use crate::storage::{PostgresStorage, Storage, StorageError};

type Attrs = Vec<(String, Option<String>)>;

fn attrs(c: &impl Sql, sql: &str, id: i32) -> PgResult<Attrs> {
    Ok(c.query(sql, &[&id])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

fn export(c: &impl Sql, dump: &mut StudyDump, sid: i32) -> PgResult<()> {
    if let Some(r) = c.query_opt(
        "SELECT study_file, config_toml, created_at FROM tune_studies WHERE study_id = $1",
        &[&sid],
    )? {
        dump.study_file = r.get(0);
        dump.config_toml = r.get(1);
        dump.created_at = r.get(2);
    }
    dump.user_attrs = attrs(
        c,
        "SELECT key, value_json FROM study_user_attributes WHERE study_id = $1 ORDER BY study_user_attribute_id",
        sid,
    )?;
    dump.system_attrs = attrs(
        c,
        "SELECT key, value_json FROM study_system_attributes WHERE study_id = $1 ORDER BY study_system_attribute_id",
        sid,
    )?;
    dump.workers = c
        .query(
            "SELECT worker_id, host, pid, started_at, heartbeat, devices_json FROM tune_workers
         WHERE study_id = $1 ORDER BY worker_id",
            &[&sid],
        )?
        .iter()
        .map(|r| WorkerDump {
            id: r.get(0),
            host: r.get(1),
            pid: r.get(2),
            started_at: r.get(3),
            heartbeat: r.get(4),
            devices_json: r.get(5),
        })
        .collect();
    let trials = c.query(
        "SELECT t.trial_id, t.number, t.state::text, t.datetime_start, t.datetime_complete, h.heartbeat
         FROM trials t LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id
         WHERE t.study_id = $1 ORDER BY t.number",
        &[&sid],
    )?;
    for r in trials {
        let id: i32 = r.get(0);
        let mut t = TrialDump {
            number: r.get::<_, i32>(1) as i64,
            state: r.get(2),
            start: r.get(3),
            complete: r.get(4),
            params: Vec::new(),
            values: Vec::new(),
            intermediate: Vec::new(),
            user_attrs: Vec::new(),
            system_attrs: Vec::new(),
            heartbeat: r.get(5),
            tune: None,
            reports: Vec::new(),
        };
        t.params = c.query(
            "SELECT param_name, param_value, distribution_json FROM trial_params WHERE trial_id = $1 ORDER BY param_id",
            &[&id],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
        t.values = c.query(
            "SELECT objective, value, value_type::text FROM trial_values WHERE trial_id = $1 ORDER BY objective",
            &[&id],
        )?
        .iter()
        .map(|r| (r.get::<_, i32>(0) as i64, r.get(1), r.get(2)))
        .collect();
        t.intermediate = c.query(
            "SELECT step, intermediate_value, intermediate_value_type::text FROM trial_intermediate_values
             WHERE trial_id = $1 ORDER BY step",
            &[&id],
        )?
        .iter()
        .map(|r| (r.get::<_, i32>(0) as i64, r.get(1), r.get(2)))
        .collect();
        t.user_attrs = attrs(
            c,
            "SELECT key, value_json FROM trial_user_attributes WHERE trial_id = $1 ORDER BY trial_user_attribute_id",
            id,
        )?;
        t.system_attrs = attrs(
            c,
            "SELECT key, value_json FROM trial_system_attributes WHERE trial_id = $1 ORDER BY trial_system_attribute_id",
            id,
        )?;
        t.tune = c.query_opt(
            "SELECT worker_id, slot, device, trial_dir, logs_json, error, log_tail, interrupted,
                    pruned_step, retry_of, discarded, gpu_peak_mem_mb, gpu_mem_scope,
                    gpu_mean_sm_pct, gpu_mean_mem_bw_pct, gpu_samples
             FROM tune_trials WHERE trial_id = $1",
            &[&id],
        )?
        .map(|r| TuneTrialDump {
            worker: r.get(0),
            slot: r.get::<_, Option<i32>>(1).map(i64::from),
            device: r.get(2),
            trial_dir: r.get(3),
            logs_json: r.get(4),
            error: r.get(5),
            log_tail: r.get(6),
            interrupted: r.get::<_, i32>(7) as i64,
            pruned_step: r.get(8),
            retry_of: r.get(9),
            discarded: r.get::<_, i32>(10) as i64,
            gpu: GpuColumns {
                peak_mem_mb: r.get(11),
                mem_scope: r.get(12),
                mean_sm_pct: r.get(13),
                mean_mem_bw_pct: r.get(14),
                samples: r.get::<_, Option<i32>>(15).map(i64::from),
            },
        });
        t.reports = c
            .query(
                "SELECT seq, step, is_final, metrics_json, reported_at FROM tune_reports
             WHERE trial_id = $1 ORDER BY seq",
                &[&id],
            )?
            .iter()
            .map(|r| ReportDump {
                seq: r.get(0),
                step: r.get(1),
                is_final: r.get::<_, i32>(2) as i64,
                metrics_json: r.get(3),
                reported_at: r.get(4),
            })
            .collect();
        dump.trials.push(t);
    }
    Ok(())
}

/// Whether the import went in (`false`: a study of that name was already there).
fn import(c: &mut Session<'_>, d: &StudyDump) -> PgResult<bool> {
    let tx = c.transaction()?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&crate::storage::postgres::LOCK_CLASS, &d.name],
    )?;
    if tx
        .query_opt("SELECT 1 FROM studies WHERE study_name = $1", &[&d.name])?
        .is_some()
    {
        return Ok(false);
    }
    let sid: i32 = tx
        .query_one(
            "INSERT INTO studies (study_name) VALUES ($1) RETURNING study_id",
            &[&d.name],
        )?
        .get(0);
    tx.execute(
        "INSERT INTO study_directions (direction, study_id, objective) VALUES ($1::text::studydirection, $2, 0)",
        &[&direction_text(d.direction), &sid],
    )?;
    tx.execute(
        "INSERT INTO tune_studies (study_id, metric, study_file, config_toml, created_at)
         VALUES ($1, $2, $3, $4, COALESCE($5, clock_timestamp() AT TIME ZONE 'UTC'))",
        &[
            &sid,
            &d.metric,
            &d.study_file,
            &d.config_toml,
            &d.created_at,
        ],
    )?;
    for (k, v) in &d.user_attrs {
        tx.execute(
            "INSERT INTO study_user_attributes (study_id, key, value_json) VALUES ($1, $2, $3)",
            &[&sid, k, v],
        )?;
    }
    for (k, v) in &d.system_attrs {
        tx.execute(
            "INSERT INTO study_system_attributes (study_id, key, value_json) VALUES ($1, $2, $3)",
            &[&sid, k, v],
        )?;
    }
    let mut workers: HashMap<i64, i64> = HashMap::new();
    for w in &d.workers {
        let id: i64 = tx.query_one(
            "INSERT INTO tune_workers (study_id, host, pid, started_at, heartbeat, devices_json)
             VALUES ($1, $2, $3, COALESCE($4, clock_timestamp() AT TIME ZONE 'UTC'),
                     COALESCE($5, clock_timestamp() AT TIME ZONE 'UTC'), $6) RETURNING worker_id",
            &[
                &sid,
                &w.host,
                &w.pid,
                &w.started_at,
                &w.heartbeat,
                &w.devices_json,
            ],
        )?
        .get(0);
        workers.insert(w.id, id);
    }
    for t in &d.trials {
        let id: i32 = tx
            .query_one(
                "INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete)
             VALUES ($1, $2, $3::text::trialstate, $4, $5) RETURNING trial_id",
                &[&(t.number as i32), &sid, &t.state, &t.start, &t.complete],
            )?
            .get(0);
        for (n, v, dist) in &t.params {
            tx.execute(
                "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json)
                 VALUES ($1, $2, $3, $4)",
                &[&id, n, v, dist],
            )?;
        }
        for (o, v, ty) in &t.values {
            tx.execute(
                "INSERT INTO trial_values (trial_id, objective, value, value_type)
                 VALUES ($1, $2, $3, $4::text::trialvaluetype)",
                &[&id, &(*o as i32), v, ty],
            )?;
        }
        for (s, v, ty) in &t.intermediate {
            tx.execute(
                "INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, intermediate_value_type)
                 VALUES ($1, $2, $3, $4::text::trialintermediatevaluetype)",
                &[&id, &(*s as i32), v, ty],
            )?;
        }
        for (k, v) in &t.user_attrs {
            tx.execute(
                "INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES ($1, $2, $3)",
                &[&id, k, v],
            )?;
        }
        for (k, v) in &t.system_attrs {
            tx.execute(
                "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES ($1, $2, $3)",
                &[&id, k, v],
            )?;
        }
        if let Some(h) = t.heartbeat {
            tx.execute(
                "INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES ($1, $2)",
                &[&id, &h],
            )?;
        }
        if let Some(x) = &t.tune {
            let worker = x.worker.and_then(|w| workers.get(&w).copied());
            tx.execute(
                "INSERT INTO tune_trials (trial_id, worker_id, slot, device, trial_dir, logs_json,
                    error, log_tail, interrupted, pruned_step, retry_of, discarded,
                    gpu_peak_mem_mb, gpu_mem_scope, gpu_mean_sm_pct, gpu_mean_mem_bw_pct, gpu_samples)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
                &[
                    &id,
                    &worker,
                    &x.slot.map(|s| s as i32),
                    &x.device,
                    &x.trial_dir,
                    &x.logs_json,
                    &x.error,
                    &x.log_tail,
                    &(x.interrupted as i32),
                    &x.pruned_step,
                    &x.retry_of,
                    &(x.discarded as i32),
                    &x.gpu.peak_mem_mb,
                    &x.gpu.mem_scope,
                    &x.gpu.mean_sm_pct,
                    &x.gpu.mean_mem_bw_pct,
                    &x.gpu
                        .samples
                        .map(|n| i32::try_from(n.max(0)).unwrap_or(i32::MAX)),
                ],
            )?;
        }
        for r in &t.reports {
            tx.execute(
                "INSERT INTO tune_reports (trial_id, seq, step, is_final, metrics_json, reported_at)
                 VALUES ($1, $2, $3, $4, $5, COALESCE($6, clock_timestamp() AT TIME ZONE 'UTC'))",
                &[
                    &id,
                    &r.seq,
                    &r.step,
                    &(r.is_final as i32),
                    &r.metrics_json,
                    &r.reported_at,
                ],
            )?;
        }
    }
    tx.commit()?;
    Ok(true)
}

impl Copyable for PostgresStorage {
    fn study_names(&self) -> Result<Vec<String>, StorageError> {
        self.run(|c| {
            Ok(
                c.query("SELECT study_name FROM studies ORDER BY study_id", &[])?
                    .iter()
                    .map(|r| r.get(0))
                    .collect(),
            )
        })
    }

    fn export_study(&self, name: &str) -> Result<StudyDump, StorageError> {
        let row = self.study(name)?;
        let sid = id32(row.id);
        self.run(|c| {
            let mut dump = StudyDump {
                name: row.name.clone(),
                direction: row.direction,
                metric: row.metric.clone(),
                study_file: None,
                config_toml: None,
                created_at: None,
                user_attrs: Vec::new(),
                system_attrs: Vec::new(),
                workers: Vec::new(),
                trials: Vec::new(),
            };
            // One snapshot, so a study that is running while it is copied copies consistently.
            let tx = c.snapshot()?;
            export(&tx, &mut dump, sid)?;
            tx.commit()?;
            Ok(dump)
        })
    }

    fn import_study(&mut self, d: &StudyDump) -> Result<(), StorageError> {
        if !self.run(|c| import(c, d))? {
            return Err(StorageError::Conflict {
                path: std::path::PathBuf::from(self.location()),
                message: format!(
                    "a study named `{}` is already there; nothing was copied",
                    d.name
                ),
            });
        }
        Ok(())
    }
}
