-- Per-trial GPU telemetry, stored with the trial when its slot's GPU was sampled through NVML
-- (NULL otherwise): the peak GPU memory in MB and whose it is (`process`: the trial's own
-- processes; `device`: the whole GPU, where they could not be told apart), the mean SM and
-- memory-bandwidth utilisation in percent, and the number of samples. Columns, not only Optuna
-- user attributes (which mirror them), so that plain SQL and the view read typed values that no
-- reported metric of the same name can overwrite. The view gains them last.
ALTER TABLE tune_trials ADD COLUMN gpu_peak_mem_mb REAL;
ALTER TABLE tune_trials ADD COLUMN gpu_mem_scope TEXT;
ALTER TABLE tune_trials ADD COLUMN gpu_mean_sm_pct REAL;
ALTER TABLE tune_trials ADD COLUMN gpu_mean_mem_bw_pct REAL;
ALTER TABLE tune_trials ADD COLUMN gpu_samples INTEGER;
DROP VIEW tune_trials_view;
CREATE VIEW tune_trials_view AS
SELECT
	s.study_name AS study,
	t.number AS number,
	lower(CASE t.state WHEN 'FAIL' THEN 'failed' WHEN 'WAITING' THEN 'queued' ELSE t.state END) AS state,
	v.value AS value,
	(SELECT json_group_object(p.param_name,
		CASE json_extract(p.distribution_json, '$.name')
			WHEN 'CategoricalDistribution'
				THEN json_extract(p.distribution_json, '$.attributes.choices[' || CAST(p.param_value AS INTEGER) || ']')
			WHEN 'IntDistribution' THEN CAST(p.param_value AS INTEGER)
			ELSE p.param_value END)
	 FROM trial_params p WHERE p.trial_id = t.trial_id) AS params,
	t.datetime_start AS started_at,
	t.datetime_complete AS finished_at,
	(julianday(t.datetime_complete) - julianday(t.datetime_start)) * 86400.0 AS duration_s,
	x.device AS device,
	x.error AS error,
	x.log_tail AS log_tail,
	w.host AS host,
	COALESCE(x.discarded, 0) <> 0 AS discarded,
	x.gpu_peak_mem_mb AS gpu_peak_mem_mb,
	x.gpu_mem_scope AS gpu_mem_scope,
	x.gpu_mean_sm_pct AS gpu_mean_sm_pct,
	x.gpu_mean_mem_bw_pct AS gpu_mean_mem_bw_pct,
	x.gpu_samples AS gpu_samples
FROM trials t
JOIN studies s ON s.study_id = t.study_id
LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
LEFT JOIN tune_workers w ON w.worker_id = x.worker_id;
