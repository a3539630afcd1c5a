//! docs/database.md is run, not only read: a small real study, then every SQLite block of the
//! page (fenced ```sql; the PostgreSQL ones are fenced ```sql postgres) against its tune.db.

use std::path::Path;

use serde_json::Value;

use crate::common::Sandbox;

/// The ```sql blocks of a markdown text whose fence says exactly `sql` (not `sql postgres`).
fn sqlite_blocks(md: &str) -> Vec<String> {
    blocks(md, "sql")
}

/// The fenced blocks of a markdown text whose info string is exactly `info`.
fn blocks(md: &str, info: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in md.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(i)) if i.trim() == info => current = Some(String::new()),
            (Some(b), Some(_)) => {
                blocks.push(std::mem::take(b));
                current = None;
            }
            (Some(b), None) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(
        current.is_none(),
        "a ```sql block of the page is never closed"
    );
    blocks
}

/// The statements of a block (one or more, each ending with `;`), comments kept.
fn statements(block: &str) -> Vec<String> {
    block
        .split(';')
        .map(str::trim)
        .filter(|s| {
            s.lines()
                .any(|l| !l.trim().is_empty() && !l.trim().starts_with("--"))
        })
        .map(str::to_string)
        .collect()
}

const STUDY: &str = r#"[study]
name = "quickstart"
metric = "val_loss"
trials = 6
seed = 3

[space]
lr = { type = "float", low = 1e-4, high = 1.0, log = true }
optimizer = { type = "categorical", choices = ["sgd", "adam"] }

[workers]
count = 2
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "trial.sh", "{lr}", "{optimizer}"]
"#;

/// Trial 1 fails; the others report four steps of val_loss and val_acc.
const TRIAL: &str = r#"[ "$TUNE_TRIAL" = 1 ] && { echo "out of patience" >&2; exit 3; }
for s in 0 1 2 3; do
  echo "tune: {\"step\": $s, \"val_loss\": $(awk "BEGIN{print $1 + 1/($s+1)}"), \"val_acc\": 0.$s}"
done
"#;

#[test]
fn every_sqlite_query_of_the_database_page_runs_on_a_real_study_and_returns_rows() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/database.md");
    let md = std::fs::read_to_string(&page).expect("docs/database.md");
    let blocks = sqlite_blocks(&md);
    assert!(
        blocks.len() >= 5,
        "docs/database.md has {} ```sql blocks; the ten best, best lr per optimizer, a learning curve, failed trials and trials per state should all be there",
        blocks.len()
    );

    let sb = Sandbox::new();
    sb.write("s.toml", STUDY);
    sb.write("trial.sh", TRIAL);
    sb.ok(&["run", "s.toml"]);
    let db = sb.db("tune.db");
    // This machine has no GPU: trial 0's telemetry as the scheduler stores it on one, so that
    // the page's GPU query has a row.
    db.execute(
        "UPDATE tune_trials SET gpu_peak_mem_mb = 1536.0, gpu_mem_scope = 'process',
            gpu_mean_sm_pct = 71.4, gpu_mean_mem_bw_pct = 33.6, gpu_samples = 12
         WHERE trial_id = (SELECT trial_id FROM trials WHERE number = 0)",
        [],
    )
    .expect("trial 0's telemetry");

    let mut curve = None;
    for block in &blocks {
        for sql in statements(block) {
            let mut stmt = db
                .prepare(&sql)
                .unwrap_or_else(|e| panic!("docs/database.md: this query fails: {e}\n{sql}"));
            let n = stmt.column_count();
            let rows: Vec<Vec<rusqlite::types::Value>> = stmt
                .query_map([], |r| {
                    (0..n)
                        .map(|i| r.get::<_, rusqlite::types::Value>(i))
                        .collect()
                })
                .and_then(|rows| rows.collect())
                .unwrap_or_else(|e| panic!("docs/database.md: this query fails: {e}\n{sql}"));
            assert!(
                !rows.is_empty(),
                "docs/database.md: this query returns no rows on a study with complete and failed trials:\n{sql}"
            );
            // No column of the first row may be entirely unknown to the study: a misspelt
            // JSON key (json_extract of a missing key) comes back null in every row.
            for i in 0..n {
                assert!(
                    rows.iter().any(|r| r[i] != rusqlite::types::Value::Null),
                    "docs/database.md: column {:?} is null in every row of:\n{sql}",
                    stmt.column_name(i).unwrap_or("?")
                );
            }
            if sql.contains("FROM tune_reports_view") {
                let step = stmt
                    .column_index("step")
                    .expect("the learning curve has a step column");
                curve = Some(
                    rows.iter()
                        .map(|r| match r[step] {
                            rusqlite::types::Value::Integer(s) => s,
                            ref other => panic!("step {other:?} is not an integer"),
                        })
                        .collect::<Vec<i64>>(),
                );
            }
        }
    }

    // The learning curve through the view is the one `tune show` prints.
    let curve = curve.expect("docs/database.md has a learning-curve query on tune_reports_view");
    let out = sb.ok(&["show", "s.toml", "3", "--format", "json"]);
    let shown: Value = serde_json::from_slice(&out.stdout).expect("`tune show` prints JSON");
    let steps: Vec<i64> = shown["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .map(|r| r["step"].as_i64().expect("step"))
        .collect();
    assert_eq!(curve, steps);
    assert_eq!(steps, [0, 1, 2, 3]);
}

#[test]
fn every_postgres_query_of_the_database_page_runs_on_a_real_study_on_postgresql() {
    let Some((server, url)) = crate::postgres::test_server::shared_db() else {
        return;
    };
    let db = url
        .rsplit('/')
        .next()
        .expect("a URL with a path")
        .to_string();
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/database.md");
    let md = std::fs::read_to_string(&page).expect("docs/database.md");
    let blocks = blocks(&md, "sql postgres");
    assert!(
        blocks.len() >= 3,
        "docs/database.md has {} ```sql postgres blocks",
        blocks.len()
    );
    let sb = Sandbox::new();
    sb.write("s.toml", STUDY);
    sb.write("trial.sh", TRIAL);
    sb.ok(&["run", "s.toml", "--db", &url, "--no-tui"]);
    let mut curve = None;
    for block in &blocks {
        for sql in statements(block) {
            let out = server
                .psql(&db, &sql)
                .unwrap_or_else(|e| panic!("docs/database.md: this query fails: {e}\n{sql}"));
            let rows: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
            assert!(
                !rows.is_empty(),
                "docs/database.md: this query returns no rows on PostgreSQL:\n{sql}"
            );
            if sql.contains("FROM tune_reports_view") {
                curve = Some(
                    rows.iter()
                        .map(|r| {
                            let step = r.split('|').next().expect("a column");
                            step.parse::<i64>()
                                .unwrap_or_else(|e| panic!("step {step:?}: {e}"))
                        })
                        .collect::<Vec<i64>>(),
                );
            }
        }
    }
    assert_eq!(
        curve,
        Some(vec![0, 1, 2, 3]),
        "the learning curve of trial 3"
    );
}

#[test]
fn the_markers_of_the_page_are_read_as_documented() {
    let md = "a\n```sql\nSELECT 1;\nSELECT 2;\n```\n```sql postgres\nSELECT 3;\n```\n```\nx\n```\n";
    let blocks = sqlite_blocks(md);
    assert_eq!(blocks, ["SELECT 1;\nSELECT 2;\n"]);
    assert_eq!(statements(&blocks[0]), ["SELECT 1", "SELECT 2"]);
}
