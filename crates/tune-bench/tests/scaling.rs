//! `tune bench scaling --quick` (what `tune bench` hands over to) runs every case and prints
//! its two tables whole. Only their shape is checked: timings are the benchmark's to report,
//! never a test's to assert.

use std::process::Command;

/// The cells of a Markdown table row, trimmed.
fn cells(line: &str) -> Vec<&str> {
    line.trim_matches('|').split('|').map(str::trim).collect()
}

#[test]
fn the_quick_scaling_bench_prints_a_row_with_times_and_a_ratio_for_every_case() {
    let out = Command::new(env!("CARGO_BIN_EXE_tune-bench"))
        .args(["scaling", "--quick", "--repeat", "1"])
        .output()
        .expect("tune-bench starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .map(cells)
        .collect();
    let mut cases = Vec::new();
    for row in &rows {
        assert_eq!(row.len(), 5, "five columns: {row:?}\n{stdout}");
        if row[0] == "case" {
            continue;
        }
        for time in &row[2..4] {
            assert!(
                time.ends_with(" ms") || time.ends_with(" µs"),
                "a time: {row:?}"
            );
        }
        let ratio: f64 = row[4].parse().expect("the ratio is a number");
        assert!(ratio.is_finite() && ratio > 0.0, "{row:?}");
        cases.push(row[0]);
    }
    let mut expected: Vec<String> = Vec::new();
    for backend in ["memory", "SQLite file"] {
        for pruner in ["no pruner", "ASHA", "median"] {
            expected.push(format!("reports of one trial, {pruner}, {backend}"));
        }
    }
    expected.push("categorical check (`Space::from_toml`)".into());
    expected.push("stored log tail of one line (`last_bytes`)".into());
    expected.push("`tune discard` range selection".into());
    assert_eq!(cases, expected, "{stdout}");
    assert_eq!(
        rows.iter().filter(|r| r[0] == "case").count(),
        2,
        "two tables, each with its header:\n{stdout}"
    );
}
