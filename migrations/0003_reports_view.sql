-- Every report of every trial with the study's name and the trial's number, so that a learning
-- curve needs no join: SELECT step, json_extract(metrics, '$.loss') FROM tune_reports_view
-- WHERE study = 'x' AND number = 3 ORDER BY step. `metrics` is the report's JSON text (every
-- metric it had); `is_final` is 1 for a `"final": true` report. The view has no order of its
-- own: ORDER BY step (or reported_at) in the query.
CREATE VIEW tune_reports_view AS
SELECT
	s.study_name AS study,
	t.number AS number,
	r.step AS step,
	r.is_final AS is_final,
	r.metrics_json AS metrics,
	r.reported_at AS reported_at
FROM tune_reports r
JOIN trials t ON t.trial_id = r.trial_id
JOIN studies s ON s.study_id = t.study_id;
