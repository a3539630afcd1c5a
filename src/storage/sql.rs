//! The statements that are the same on SQLite and PostgreSQL, written once, in one placeholder
//! style: `$1`, `$2`, … (PostgreSQL's). SQLite reads `$1` as a named parameter and numbers named
//! parameters in the order they first appear, so a statement here binds by position on both as
//! long as its `$n` first appear in order `$1`, `$2`, …: the tests below hold every statement
//! to that, on SQLite's own numbering. A statement that differs between the dialects is written
//! in each backend, whole.

/// Trials counted by the budget of study `$1`: ended on their own, or running now.
pub(crate) const TAKEN: &str =
    "SELECT COUNT(*) FROM trials t LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
     WHERE t.study_id = $1 AND (t.state IN ('COMPLETE', 'PRUNED', 'RUNNING')
           OR (t.state = 'FAIL' AND COALESCE(x.interrupted, 0) = 0))
           AND COALESCE(x.discarded, 0) = 0";

/// The id of trial number `$2` of study `$1` when it is paused: pruned, and stopped through
/// no fault of its own (`interrupted`), so resumable.
pub(crate) const PAUSED_TRIAL: &str = "SELECT t.trial_id FROM trials t
     JOIN tune_trials x ON x.trial_id = t.trial_id
     WHERE t.study_id = $1 AND t.number = $2 AND t.state = 'PRUNED'
           AND COALESCE(x.interrupted, 0) <> 0";

/// A promoted paused trial (id `$1`) becomes an earlier attempt of its re-run: failed as
/// interrupted, without a value (samplers, the budget and the rungs leave it out; the re-run
/// carries its curve on).
pub(crate) const PROMOTED_STATE: &str = "UPDATE trials SET state = 'FAIL' WHERE trial_id = $1";
pub(crate) const PROMOTED_VALUES: &str = "DELETE FROM trial_values WHERE trial_id = $1";
/// Its reason (`$1`) as an earlier attempt; `$1` comes first, since SQLite numbers `$N`
/// parameters in the order they appear.
pub(crate) const PROMOTED_REASON: &str = "UPDATE tune_trials SET error = $1 WHERE trial_id = $2";

/// Every re-run of study `$1` and the number of the trial whose params it runs again.
pub(crate) const RERUNS: &str = "SELECT t.number, x.retry_of FROM trials t
     JOIN tune_trials x ON x.trial_id = t.trial_id
     WHERE t.study_id = $1 AND x.retry_of IS NOT NULL";

/// Trials of study `$1` that ended on their own (what the budget has used up).
pub(crate) const COUNTED: &str =
    "SELECT COUNT(*) FROM trials t LEFT JOIN tune_trials x ON x.trial_id = t.trial_id
     WHERE t.study_id = $1 AND (t.state IN ('COMPLETE', 'PRUNED')
           OR (t.state = 'FAIL' AND COALESCE(x.interrupted, 0) = 0))
           AND COALESCE(x.discarded, 0) = 0";

/// The metrics of a trial's last report (`$1`), which become its user attributes when it ends.
pub(crate) const LAST_METRICS: &str =
    "SELECT metrics_json FROM tune_reports WHERE trial_id = $1 ORDER BY seq DESC LIMIT 1";

/// Stores user attribute `$2` = `$3` (JSON text) of trial `$1`.
pub(crate) const PUT_USER_ATTR: &str = r#"INSERT INTO trial_user_attributes (trial_id, "key", value_json)
     VALUES ($1, $2, $3)
     ON CONFLICT (trial_id, "key") DO UPDATE SET value_json = excluded.value_json"#;

/// Marks (`$1` = 1) or unmarks (0) finished trial number `$3` of study `$2` as discarded. A
/// trial another tool wrote has no `tune_trials` row yet: it gets one.
pub(crate) const SET_DISCARDED: &str = "INSERT INTO tune_trials (trial_id, discarded)
     SELECT trial_id, $1 FROM trials
     WHERE study_id = $2 AND number = $3 AND state IN ('COMPLETE', 'PRUNED', 'FAIL')
     ON CONFLICT (trial_id) DO UPDATE SET discarded = excluded.discarded
     WHERE tune_trials.discarded <> excluded.discarded";

/// The statements that delete study `$1` whole, children first: Optuna's tables and tune's.
pub(crate) const DELETE_STUDY: &[&str] = &[
    "DELETE FROM tune_reports WHERE trial_id IN (SELECT trial_id FROM trials WHERE study_id = $1)",
    "DELETE FROM tune_trials WHERE trial_id IN (SELECT trial_id FROM trials WHERE study_id = $1)",
    "DELETE FROM trial_params WHERE trial_id IN (SELECT trial_id FROM trials WHERE study_id = $1)",
    "DELETE FROM trial_values WHERE trial_id IN (SELECT trial_id FROM trials WHERE study_id = $1)",
    "DELETE FROM trial_intermediate_values WHERE trial_id IN (SELECT trial_id FROM trials WHERE study_id = $1)",
    "DELETE FROM trial_user_attributes WHERE trial_id IN (SELECT trial_id FROM trials WHERE study_id = $1)",
    "DELETE FROM trial_system_attributes WHERE trial_id IN (SELECT trial_id FROM trials WHERE study_id = $1)",
    "DELETE FROM trial_heartbeats WHERE trial_id IN (SELECT trial_id FROM trials WHERE study_id = $1)",
    "DELETE FROM trials WHERE study_id = $1",
    "DELETE FROM tune_workers WHERE study_id = $1",
    "DELETE FROM tune_studies WHERE study_id = $1",
    "DELETE FROM study_directions WHERE study_id = $1",
    "DELETE FROM study_user_attributes WHERE study_id = $1",
    "DELETE FROM study_system_attributes WHERE study_id = $1",
    "DELETE FROM studies WHERE study_id = $1",
];

/// The directions (Optuna's spelling, as text: PostgreSQL stores them as an enum) of study
/// `$1`'s further objectives, in order.
pub(crate) const OTHER_DIRECTIONS: &str = "SELECT CAST(direction AS TEXT) FROM study_directions
     WHERE study_id = $1 AND objective > 0 ORDER BY objective";

/// Study `$1`'s objective names as Optuna stores them (a JSON list).
pub(crate) const METRIC_NAMES: &str = r#"SELECT value_json FROM study_system_attributes
     WHERE study_id = $1 AND "key" = 'study:metric_names'"#;

/// Every study with its first objective's direction (as text), its metric and its trials
/// counted by state: columns id, name, direction, metric, then the counts in the order of
/// [`super::StudyCounts`] (all, queued, running, complete, pruned, failed).
pub(crate) const LIST_STUDIES: &str =
    "SELECT s.study_id, s.study_name, CAST(d.direction AS TEXT), COALESCE(ts.metric, 'value'),
        COUNT(t.trial_id),
        SUM(CASE WHEN t.state = 'WAITING' THEN 1 ELSE 0 END),
        SUM(CASE WHEN t.state = 'RUNNING' THEN 1 ELSE 0 END),
        SUM(CASE WHEN t.state = 'COMPLETE' THEN 1 ELSE 0 END),
        SUM(CASE WHEN t.state = 'PRUNED' THEN 1 ELSE 0 END),
        SUM(CASE WHEN t.state = 'FAIL' THEN 1 ELSE 0 END)
     FROM studies s
     LEFT JOIN study_directions d ON d.study_id = s.study_id AND d.objective = 0
     LEFT JOIN tune_studies ts ON ts.study_id = s.study_id
     LEFT JOIN trials t ON t.study_id = s.study_id
     GROUP BY s.study_id, s.study_name, d.direction, ts.metric
     ORDER BY s.study_id";

#[cfg(test)]
mod tests {
    use super::*;

    fn every_statement() -> Vec<&'static str> {
        let mut all = vec![
            TAKEN,
            COUNTED,
            PAUSED_TRIAL,
            RERUNS,
            PROMOTED_STATE,
            PROMOTED_VALUES,
            PROMOTED_REASON,
            LAST_METRICS,
            PUT_USER_ATTR,
            SET_DISCARDED,
            OTHER_DIRECTIONS,
            METRIC_NAMES,
            LIST_STUDIES,
        ];
        all.extend(DELETE_STUDY);
        all
    }

    /// The `$n` of a statement in the order they first appear.
    fn first_appearances(sql: &str) -> Vec<usize> {
        let mut seen = Vec::new();
        for (i, _) in sql.match_indices('$') {
            let digits: String = sql[i + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let n: usize = digits.parse().expect("a $ is followed by its number");
            if !seen.contains(&n) {
                seen.push(n);
            }
        }
        seen
    }

    #[test]
    fn placeholders_first_appear_in_order_so_both_drivers_bind_by_position() {
        for sql in every_statement() {
            let order = first_appearances(sql);
            let expected: Vec<usize> = (1..=order.len()).collect();
            assert_eq!(order, expected, "{sql}");
        }
        // The check sees a statement that would bind its values to the wrong places on SQLite.
        assert_eq!(first_appearances("SELECT $2, $1, $2"), vec![2, 1]);
    }

    /// SQLite's own numbering of each statement's parameters, on tune's schema: `$n` is
    /// parameter n, so rusqlite's positional values land where PostgreSQL's do.
    #[test]
    fn sqlite_numbers_each_placeholder_as_postgresql_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = crate::storage::SqliteStorage::open(&dir.path().join("s.db")).expect("opens");
        for sql in every_statement() {
            let stmt = s.connection().prepare(sql).expect("SQLite accepts it");
            let n = first_appearances(sql).len();
            assert_eq!(stmt.parameter_count(), n, "{sql}");
            for k in 1..=n {
                assert_eq!(
                    stmt.parameter_index(&format!("${k}")).expect("a name"),
                    Some(k),
                    "{sql}"
                );
            }
        }
    }
}
