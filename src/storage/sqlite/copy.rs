//! Copying studies out of and into a SQLite database.

use chrono::NaiveDateTime;
use rusqlite::{OptionalExtension, params};

use crate::storage::codec::direction_text;
use crate::storage::copy::{
    Copyable, GpuColumns, ReportDump, StudyDump, TrialDump, TuneTrialDump, WorkerDump,
};
use crate::storage::{DATETIME_FORMAT, SqliteStorage, Storage, StorageError};

fn time(text: Option<String>) -> Option<NaiveDateTime> {
    let text = text?;
    NaiveDateTime::parse_from_str(&text, DATETIME_FORMAT)
        .or_else(|_| NaiveDateTime::parse_from_str(&text, "%Y-%m-%d %H:%M:%S"))
        .ok()
}

fn text(t: Option<NaiveDateTime>) -> Option<String> {
    t.map(|t| t.format(DATETIME_FORMAT).to_string())
}

type Attrs = Vec<(String, Option<String>)>;

fn attrs(c: &rusqlite::Connection, sql: &str, id: i64) -> rusqlite::Result<Attrs> {
    let mut st = c.prepare_cached(sql)?;
    st.query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
}

impl Copyable for SqliteStorage {
    fn study_names(&self) -> Result<Vec<String>, StorageError> {
        let c = self.connection();
        let err = |e| self.copy_err(e);
        let mut st = c
            .prepare("SELECT study_name FROM studies ORDER BY study_id")
            .map_err(err)?;
        st.query_map([], |r| r.get(0))
            .map_err(err)?
            .collect::<Result<Vec<String>, _>>()
            .map_err(err)
    }

    fn export_study(&self, name: &str) -> Result<StudyDump, StorageError> {
        let row = self.study(name)?;
        let c = self.connection();
        let err = |e| self.copy_err(e);
        let (file, config, created): (Option<String>, Option<String>, Option<String>) = c
            .query_row(
                "SELECT study_file, config_toml, created_at FROM tune_studies WHERE study_id = ?1",
                [row.id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(err)?
            .unwrap_or((None, None, None));
        let mut dump = StudyDump {
            name: row.name.clone(),
            direction: row.direction,
            metric: row.metric.clone(),
            study_file: file,
            config_toml: config,
            created_at: time(created),
            user_attrs: attrs(
                c,
                "SELECT key, value_json FROM study_user_attributes WHERE study_id = ?1 ORDER BY study_user_attribute_id",
                row.id,
            )
            .map_err(err)?,
            system_attrs: attrs(
                c,
                "SELECT key, value_json FROM study_system_attributes WHERE study_id = ?1 ORDER BY study_system_attribute_id",
                row.id,
            )
            .map_err(err)?,
            workers: Vec::new(),
            trials: Vec::new(),
        };
        let mut st = c
            .prepare(
                "SELECT worker_id, host, pid, started_at, heartbeat, devices_json FROM tune_workers
                 WHERE study_id = ?1 ORDER BY worker_id",
            )
            .map_err(err)?;
        dump.workers = st
            .query_map([row.id], |r| {
                Ok(WorkerDump {
                    id: r.get(0)?,
                    host: r.get(1)?,
                    pid: r.get(2)?,
                    started_at: time(r.get(3)?),
                    heartbeat: time(r.get(4)?),
                    devices_json: r.get(5)?,
                })
            })
            .map_err(err)?
            .collect::<Result<_, _>>()
            .map_err(err)?;
        let mut st = c
            .prepare(
                "SELECT t.trial_id, t.number, t.state, t.datetime_start, t.datetime_complete, h.heartbeat
                 FROM trials t LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id
                 WHERE t.study_id = ?1 ORDER BY t.number",
            )
            .map_err(err)?;
        let trials: Vec<(i64, TrialDump)> = st
            .query_map([row.id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    TrialDump {
                        number: r.get(1)?,
                        state: r.get(2)?,
                        start: time(r.get(3)?),
                        complete: time(r.get(4)?),
                        params: Vec::new(),
                        values: Vec::new(),
                        intermediate: Vec::new(),
                        user_attrs: Vec::new(),
                        system_attrs: Vec::new(),
                        heartbeat: time(r.get(5)?),
                        tune: None,
                        reports: Vec::new(),
                    },
                ))
            })
            .map_err(err)?
            .collect::<Result<_, _>>()
            .map_err(err)?;
        for (id, mut t) in trials {
            let mut st = c
                .prepare_cached(
                    "SELECT param_name, param_value, distribution_json FROM trial_params WHERE trial_id = ?1 ORDER BY param_id",
                )
                .map_err(err)?;
            t.params = st
                .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(err)?
                .collect::<Result<_, _>>()
                .map_err(err)?;
            let mut st = c
                .prepare_cached(
                    "SELECT objective, value, value_type FROM trial_values WHERE trial_id = ?1 ORDER BY objective",
                )
                .map_err(err)?;
            t.values = st
                .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(err)?
                .collect::<Result<_, _>>()
                .map_err(err)?;
            let mut st = c
                .prepare_cached(
                    "SELECT step, intermediate_value, intermediate_value_type FROM trial_intermediate_values
                     WHERE trial_id = ?1 ORDER BY step",
                )
                .map_err(err)?;
            t.intermediate = st
                .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(err)?
                .collect::<Result<_, _>>()
                .map_err(err)?;
            t.user_attrs = attrs(
                c,
                "SELECT key, value_json FROM trial_user_attributes WHERE trial_id = ?1 ORDER BY trial_user_attribute_id",
                id,
            )
            .map_err(err)?;
            t.system_attrs = attrs(
                c,
                "SELECT key, value_json FROM trial_system_attributes WHERE trial_id = ?1 ORDER BY trial_system_attribute_id",
                id,
            )
            .map_err(err)?;
            t.tune = c
                .query_row(
                    "SELECT worker_id, slot, device, trial_dir, logs_json, error, log_tail, interrupted,
                            pruned_step, retry_of, discarded, gpu_peak_mem_mb, gpu_mem_scope,
                            gpu_mean_sm_pct, gpu_mean_mem_bw_pct, gpu_samples
                     FROM tune_trials WHERE trial_id = ?1",
                    [id],
                    |r| {
                        Ok(TuneTrialDump {
                            worker: r.get(0)?,
                            slot: r.get(1)?,
                            device: r.get(2)?,
                            trial_dir: r.get(3)?,
                            logs_json: r.get(4)?,
                            error: r.get(5)?,
                            log_tail: r.get(6)?,
                            interrupted: r.get(7)?,
                            pruned_step: r.get(8)?,
                            retry_of: r.get(9)?,
                            discarded: r.get(10)?,
                            gpu: GpuColumns {
                                peak_mem_mb: r.get(11)?,
                                mem_scope: r.get(12)?,
                                mean_sm_pct: r.get(13)?,
                                mean_mem_bw_pct: r.get(14)?,
                                samples: r.get(15)?,
                            },
                        })
                    },
                )
                .optional()
                .map_err(err)?;
            let mut st = c
                .prepare_cached(
                    "SELECT seq, step, is_final, metrics_json, reported_at FROM tune_reports
                     WHERE trial_id = ?1 ORDER BY seq",
                )
                .map_err(err)?;
            t.reports = st
                .query_map([id], |r| {
                    Ok(ReportDump {
                        seq: r.get(0)?,
                        step: r.get(1)?,
                        is_final: r.get(2)?,
                        metrics_json: r.get(3)?,
                        reported_at: time(r.get(4)?),
                    })
                })
                .map_err(err)?
                .collect::<Result<_, _>>()
                .map_err(err)?;
            dump.trials.push(t);
        }
        Ok(dump)
    }

    fn import_study(&mut self, d: &StudyDump) -> Result<(), StorageError> {
        if self.find_study(&d.name)?.is_some() {
            return Err(StorageError::Conflict {
                path: self.path().to_path_buf(),
                message: format!(
                    "a study named `{}` is already there; nothing was copied",
                    d.name
                ),
            });
        }
        let now = crate::storage::now_text();
        self.write(|tx| {
            tx.execute("INSERT INTO studies (study_name) VALUES (?1)", [&d.name])?;
            let sid = tx.last_insert_rowid();
            tx.execute(
                "INSERT INTO study_directions (direction, study_id, objective) VALUES (?1, ?2, 0)",
                params![direction_text(d.direction), sid],
            )?;
            tx.execute(
                "INSERT INTO tune_studies (study_id, metric, study_file, config_toml, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    sid,
                    d.metric,
                    d.study_file,
                    d.config_toml,
                    text(d.created_at).unwrap_or_else(|| now.clone())
                ],
            )?;
            for (k, v) in &d.user_attrs {
                tx.execute(
                    "INSERT INTO study_user_attributes (study_id, key, value_json) VALUES (?1, ?2, ?3)",
                    params![sid, k, v],
                )?;
            }
            for (k, v) in &d.system_attrs {
                tx.execute(
                    "INSERT INTO study_system_attributes (study_id, key, value_json) VALUES (?1, ?2, ?3)",
                    params![sid, k, v],
                )?;
            }
            let mut workers = std::collections::HashMap::new();
            for w in &d.workers {
                tx.execute(
                    "INSERT INTO tune_workers (study_id, host, pid, started_at, heartbeat, devices_json)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        sid,
                        w.host,
                        w.pid,
                        text(w.started_at).unwrap_or_else(|| now.clone()),
                        text(w.heartbeat).unwrap_or_else(|| now.clone()),
                        w.devices_json
                    ],
                )?;
                workers.insert(w.id, tx.last_insert_rowid());
            }
            for t in &d.trials {
                tx.execute(
                    "INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![t.number, sid, t.state, text(t.start), text(t.complete)],
                )?;
                let id = tx.last_insert_rowid();
                for (n, v, dist) in &t.params {
                    tx.execute(
                        "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json)
                         VALUES (?1, ?2, ?3, ?4)",
                        params![id, n, v, dist],
                    )?;
                }
                for (o, v, ty) in &t.values {
                    tx.execute(
                        "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?1, ?2, ?3, ?4)",
                        params![id, o, v, ty],
                    )?;
                }
                for (s, v, ty) in &t.intermediate {
                    tx.execute(
                        "INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, intermediate_value_type)
                         VALUES (?1, ?2, ?3, ?4)",
                        params![id, s, v, ty],
                    )?;
                }
                for (k, v) in &t.user_attrs {
                    tx.execute(
                        "INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?1, ?2, ?3)",
                        params![id, k, v],
                    )?;
                }
                for (k, v) in &t.system_attrs {
                    tx.execute(
                        "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES (?1, ?2, ?3)",
                        params![id, k, v],
                    )?;
                }
                if let Some(h) = text(t.heartbeat) {
                    tx.execute(
                        "INSERT INTO trial_heartbeats (trial_id, heartbeat) VALUES (?1, ?2)",
                        params![id, h],
                    )?;
                }
                if let Some(x) = &t.tune {
                    tx.execute(
                        "INSERT INTO tune_trials (trial_id, worker_id, slot, device, trial_dir, logs_json,
                            error, log_tail, interrupted, pruned_step, retry_of, discarded,
                            gpu_peak_mem_mb, gpu_mem_scope, gpu_mean_sm_pct, gpu_mean_mem_bw_pct,
                            gpu_samples)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                            ?16, ?17)",
                        params![
                            id,
                            x.worker.and_then(|w| workers.get(&w)),
                            x.slot,
                            x.device,
                            x.trial_dir,
                            x.logs_json,
                            x.error,
                            x.log_tail,
                            x.interrupted,
                            x.pruned_step,
                            x.retry_of,
                            x.discarded,
                            x.gpu.peak_mem_mb,
                            x.gpu.mem_scope,
                            x.gpu.mean_sm_pct,
                            x.gpu.mean_mem_bw_pct,
                            x.gpu.samples
                        ],
                    )?;
                }
                for r in &t.reports {
                    tx.execute(
                        "INSERT INTO tune_reports (trial_id, seq, step, is_final, metrics_json, reported_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        params![
                            id,
                            r.seq,
                            r.step,
                            r.is_final,
                            r.metrics_json,
                            text(r.reported_at).unwrap_or_else(|| now.clone())
                        ],
                    )?;
                }
            }
            Ok(())
        })
    }
}

impl SqliteStorage {
    fn copy_err(&self, e: rusqlite::Error) -> StorageError {
        StorageError::Sqlite {
            path: self.path().to_path_buf(),
            error: e,
        }
    }
}
