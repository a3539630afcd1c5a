-- tune's own tables on PostgreSQL, the twin of migrations/0002_tune_tables.sql for SQLite: what
-- Optuna's schema has no place for (the study file and settings, every metric of every report,
-- the worker processes and devices, log paths, why a trial failed), and a view with one row per
-- trial for plain SQL. Same names, columns and meanings as on SQLite; times are UTC.
CREATE TABLE tune_studies (
	study_id INTEGER NOT NULL PRIMARY KEY REFERENCES studies (study_id),
	metric TEXT NOT NULL,
	study_file TEXT,
	config_toml TEXT,
	created_at TIMESTAMP NOT NULL
);
CREATE TABLE tune_workers (
	worker_id BIGSERIAL PRIMARY KEY,
	study_id INTEGER NOT NULL REFERENCES studies (study_id),
	host TEXT NOT NULL,
	pid BIGINT NOT NULL,
	started_at TIMESTAMP NOT NULL,
	heartbeat TIMESTAMP NOT NULL,
	devices_json TEXT NOT NULL
);
CREATE TABLE tune_trials (
	trial_id INTEGER NOT NULL PRIMARY KEY REFERENCES trials (trial_id),
	worker_id BIGINT REFERENCES tune_workers (worker_id),
	slot INTEGER,
	device TEXT,
	trial_dir TEXT,
	logs_json TEXT,
	error TEXT,
	log_tail TEXT,
	-- 1 when the trial failed because its run was interrupted (not its own fault): such trials
	-- do not count toward the budget and their params are queued again.
	interrupted INTEGER NOT NULL DEFAULT 0,
	pruned_step BIGINT,
	-- the number of the interrupted trial whose params this one runs again
	retry_of BIGINT
);
CREATE TABLE tune_reports (
	report_id BIGSERIAL PRIMARY KEY,
	trial_id INTEGER NOT NULL REFERENCES trials (trial_id),
	seq BIGINT NOT NULL,
	step BIGINT,
	is_final INTEGER NOT NULL DEFAULT 0,
	metrics_json TEXT NOT NULL,
	reported_at TIMESTAMP NOT NULL,
	UNIQUE (trial_id, seq)
);
CREATE INDEX ix_tune_reports_trial ON tune_reports (trial_id);
CREATE INDEX ix_trials_study_state ON trials (study_id, state);
CREATE INDEX ix_trials_study_number ON trials (study_id, number);
CREATE INDEX ix_tune_workers_study ON tune_workers (study_id);

-- One row per trial with its params (a JSON object of the values as the user sees them) and
-- its objective value.
CREATE VIEW tune_trials_view AS
SELECT
	s.study_name AS study,
	t.number AS number,
	lower(CASE t.state WHEN 'FAIL' THEN 'failed' WHEN 'WAITING' THEN 'queued' ELSE t.state::text END) AS state,
	v.value AS value,
	(SELECT json_object_agg(p.param_name,
		CASE p.distribution_json::json->>'name'
			WHEN 'CategoricalDistribution'
				THEN (p.distribution_json::json->'attributes'->'choices')->(p.param_value::int)
			WHEN 'IntDistribution' THEN to_json(p.param_value::bigint)
			ELSE to_json(p.param_value) END)
	 FROM trial_params p WHERE p.trial_id = t.trial_id) AS params,
	t.datetime_start AS started_at,
	t.datetime_complete AS finished_at,
	EXTRACT(EPOCH FROM (t.datetime_complete - t.datetime_start))::double precision AS duration_s,
	x.device AS device,
	x.error AS error
FROM trials t
JOIN studies s ON s.study_id = t.study_id
LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
LEFT JOIN tune_trials x ON x.trial_id = t.trial_id;
