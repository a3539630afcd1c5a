-- Population-based training (`[pruner] kind = "pbt"`): a trial that continues from another
-- trial's checkpoint with explored params keeps its parent in Optuna's trial_system_attributes
-- under 'tune:parent' ({"trial": N, "step": S}: the parent's number and the step of the parent's
-- checkpoint it started from), so copies and Optuna tools carry it. No new column: the view gains
-- `parent` and `parent_step` last (null for a trial sampled afresh).
DROP VIEW tune_trials_view;
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
	x.error AS error,
	x.log_tail AS log_tail,
	w.host AS host,
	COALESCE(x.discarded, 0) <> 0 AS discarded,
	x.gpu_peak_mem_mb AS gpu_peak_mem_mb,
	x.gpu_mem_scope AS gpu_mem_scope,
	x.gpu_mean_sm_pct AS gpu_mean_sm_pct,
	x.gpu_mean_mem_bw_pct AS gpu_mean_mem_bw_pct,
	x.gpu_samples AS gpu_samples,
	(t.state = 'PRUNED' AND COALESCE(x.interrupted, 0) <> 0) AS paused,
	(SELECT (a.value_json::json->>'trial')::bigint FROM trial_system_attributes a
	 WHERE a.trial_id = t.trial_id AND a.key = 'tune:parent') AS parent,
	(SELECT (a.value_json::json->>'step')::bigint FROM trial_system_attributes a
	 WHERE a.trial_id = t.trial_id AND a.key = 'tune:parent') AS parent_step
FROM trials t
JOIN studies s ON s.study_id = t.study_id
LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
LEFT JOIN tune_workers w ON w.worker_id = x.worker_id;
