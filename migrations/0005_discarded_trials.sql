-- `tune discard` marks finished trials as discarded: left out of what the samplers learn
-- from, of the budget and of the best, but kept and shown. The view gains the mark last.
ALTER TABLE tune_trials ADD COLUMN discarded INTEGER NOT NULL DEFAULT 0;
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
	COALESCE(x.discarded, 0) <> 0 AS discarded
FROM trials t
JOIN studies s ON s.study_id = t.study_id
LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
LEFT JOIN tune_workers w ON w.worker_id = x.worker_id;
