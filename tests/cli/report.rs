//! `tune plot` and `tune report` on studies the binary ran: every figure written as SVG and PNG,
//! the report's sections each with its figures, and bad input (an empty study, one with only
//! failed trials, one parameter, a categorical-only space, NaN reports, a study or a figure or a
//! parameter that does not exist, an output path that cannot be written) answered with a clear
//! message or an honest empty figure, never a panic, and nothing stored changed.

use std::path::Path;
use std::time::Duration;

use crate::common::{PATIENCE, Sandbox, sh_study, text, wait_until};

/// Every figure `tune plot` draws.
pub const KINDS: [&str; 10] = [
    "history",
    "importance",
    "slice",
    "contour",
    "parallel",
    "curves",
    "pruned-curves",
    "pareto",
    "timeline",
    "failures",
];

/// The report's sections (`insight::report::SECTIONS`) with how many figures each holds at
/// least.
pub const SECTIONS: [(&str, usize); 10] = [
    ("summary", 0),
    ("history", 1),
    ("importance", 1),
    ("slice", 1),
    ("contour", 1),
    ("parallel", 1),
    ("curves", 2),
    ("pareto", 1),
    ("timeline", 1),
    ("failures", 1),
];

/// The text of section `id` of a report page (up to its `</section>`).
pub fn section<'a>(page: &'a str, id: &str) -> &'a str {
    let open = format!("<section id=\"{id}\">");
    let start = page
        .find(&open)
        .unwrap_or_else(|| panic!("no section `{id}` in the report"));
    let end = page[start..]
        .find("</section>")
        .map(|e| start + e)
        .unwrap_or(page.len());
    &page[start..end]
}

/// Asserts every section is there with at least its figures.
pub fn assert_sections(page: &str) {
    for (id, figures) in SECTIONS {
        let n = section(page, id).matches("<svg").count();
        assert!(
            n >= figures,
            "section `{id}` has {n} <svg>, wants {figures}"
        );
    }
}

/// A study with a learning curve per trial (6 steps), the median pruner, and trials with k = 4
/// and c = b failing with a message on standard error.
pub fn curve_study(sb: &Sandbox, name: &str, trials: u64) {
    sb.write(
        "s.toml",
        &sh_study(name, trials, 4, "", &["{x}", "{k}", "{c}"]).replace(
            "[workers]",
            "[pruner]\nkind = \"median\"\nwarmup_steps = 1\n\n[workers]",
        ),
    );
    sb.write(
        "trial.sh",
        r#"if [ "$2" = 4 ] && [ "$3" = b ]; then echo "boom: k=4 with c=b" >&2; exit 3; fi
for s in 0 1 2 3 4 5; do
  v=$(awk "BEGIN { print ($1 * $1 + 0.01 * $2) * (1 + 1/($s+1)) }")
  echo "tune: {\"step\": $s, \"loss\": $v}"
done
"#,
    );
    let out = crate::common::output_within(
        sb.tune(&["run", "s.toml", "--no-tui"]),
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "{}", text(&out));
}

fn read(sb: &Sandbox, name: &str) -> String {
    std::fs::read_to_string(sb.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// What a reader sees of the study: every trial whole, as JSON.
fn stored(sb: &Sandbox, study: &[&str]) -> String {
    let mut args = vec!["trials"];
    args.extend_from_slice(study);
    args.extend_from_slice(&["--format", "json"]);
    String::from_utf8_lossy(&sb.ok(&args).stdout).into_owned()
}

fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.len() > 100 && b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

#[test]
fn plot_writes_every_figure_as_svg_and_png_and_report_holds_them_all() {
    let sb = Sandbox::new();
    curve_study(&sb, "figs", 40);
    let before = stored(&sb, &["s.toml"]);
    for kind in KINDS {
        let svg = format!("{kind}.svg");
        let out = sb.ok(&["plot", kind, "s.toml", "-o", &svg]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&svg),
            "{}",
            text(&out)
        );
        let body = read(&sb, &svg);
        assert!(body.contains("<svg"), "{kind}: {body}");
        let png = format!("{kind}.png");
        sb.ok(&["plot", kind, "s.toml", "-o", &png]);
        assert!(is_png(&sb.join(&png)), "{kind}: not a PNG");
    }
    // What the figures say of this study: x matters most, two trials' kind of failure.
    assert!(read(&sb, "history.svg").contains("best so far"));
    assert!(
        read(&sb, "failures.svg").contains("boom: k=4 with c=b") || {
            // The reason is the exit status; stderr's last line is in the report's table.
            read(&sb, "failures.svg").contains("exited with status 3")
        }
    );
    assert!(read(&sb, "pareto.svg").contains("a single-objective study has no Pareto front"));
    let out = sb.ok(&["report", "s.toml", "-o", "report.html"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("report.html"),
        "{}",
        text(&out)
    );
    let page = read(&sb, "report.html");
    assert_sections(&page);
    assert!(page.starts_with("<!DOCTYPE html>"));
    // Self-contained: nothing is fetched from anywhere when it opens.
    for outside in ["<script", "<link", "src=\"http", "href=\"http", "@import"] {
        assert!(
            !page.contains(outside),
            "the report refers outside: {outside}"
        );
    }
    assert!(section(&page, "summary").contains("x = { type = &quot;float&quot;"));
    assert!(section(&page, "failures").contains("boom: k=4 with c=b"));
    assert!(
        section(&page, "slice").matches("<svg").count() == 3,
        "one slice per parameter (3)"
    );
    assert_eq!(
        stored(&sb, &["s.toml"]),
        before,
        "a figure changed the study"
    );
}

#[test]
fn plot_slice_and_contour_take_named_params_and_refuse_unknown_ones() {
    let sb = Sandbox::new();
    curve_study(&sb, "named", 12);
    sb.ok(&["plot", "slice", "s.toml", "--params", "c", "-o", "c.svg"]);
    let svg = read(&sb, "c.svg");
    assert!(
        svg.contains("against c") && !svg.contains("against x"),
        "{svg}"
    );
    sb.ok(&[
        "plot", "contour", "s.toml", "--params", "k,c", "-o", "kc.svg",
    ]);
    assert!(read(&sb, "kc.svg").contains("k × c"));

    let out = sb.run(&["plot", "slice", "s.toml", "--params", "lr", "-o", "lr.svg"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("no parameter `lr` (it has `x`, `k`, `c`)")
            || text(&out).contains("no parameter `lr`"),
        "{}",
        text(&out)
    );
    assert!(!sb.join("lr.svg").exists());
    for bad in ["x", "x,k,c", "x,x"] {
        let out = sb.run(&["plot", "contour", "s.toml", "--params", bad, "-o", "b.svg"]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out));
        assert!(
            text(&out).contains("two different parameters"),
            "{}",
            text(&out)
        );
    }
    let out = sb.run(&["plot", "history", "s.toml", "--params", "x", "-o", "h.svg"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("only `slice` and `contour` take parameters"),
        "{}",
        text(&out)
    );
}

#[test]
fn an_empty_study_gets_honest_empty_figures_not_an_error() {
    let sb = Sandbox::new();
    sb.write(
        "space.toml",
        "[space]\nx = { type = \"float\", low = 0.0, high = 1.0 }\n",
    );
    // Standard input is empty (`Sandbox::tune` gives it none): the study is created with no
    // trial.
    let c = sb.tune(&[
        "ask-tell",
        "--space",
        "space.toml",
        "--study",
        "empty",
        "--db",
        "tune.db",
    ]);
    let out = crate::common::output_within(c, PATIENCE);
    assert!(out.status.success(), "{}", text(&out));
    let db = ["--study", "empty", "--db", "tune.db"];
    for kind in KINDS {
        let file = format!("{kind}.svg");
        let mut args = vec!["plot", kind];
        args.extend_from_slice(&db);
        args.extend_from_slice(&["-o", &file]);
        sb.ok(&args);
        let svg = read(&sb, &file);
        let honest = [
            "no complete trials yet",
            "the study has no parameters yet",
            "no pruned trials",
            "a single-objective study has no Pareto front",
            "no trial has started yet",
            "no failed trials",
            "a contour needs two parameters",
        ];
        assert!(
            honest.iter().any(|h| svg.contains(h)),
            "{kind} of an empty study says nothing honest: {svg}"
        );
    }
    let mut args = vec!["report"];
    args.extend_from_slice(&db);
    args.extend_from_slice(&["-o", "r.html"]);
    sb.ok(&args);
    let page = read(&sb, "r.html");
    assert_sections(&page);
    assert!(section(&page, "summary").contains("no complete trials yet"));
}

#[test]
fn a_study_of_only_failed_trials_reports_its_failures() {
    let sb = Sandbox::new();
    sb.write("f.toml", &sh_study("fails", 3, 1, "", &[]));
    sb.write("trial.sh", "echo 'CUDA out of memory' >&2; exit 1\n");
    sb.run(&["run", "f.toml", "--no-tui"]);
    let before = stored(&sb, &["f.toml"]);
    sb.ok(&["plot", "history", "f.toml", "-o", "h.svg"]);
    assert!(read(&sb, "h.svg").contains("no complete trials yet"));
    sb.ok(&["plot", "failures", "f.toml", "-o", "f.svg"]);
    assert!(read(&sb, "f.svg").contains("failures by reason (3 failed trials)"));
    sb.ok(&["report", "f.toml", "-o", "r.html"]);
    let page = read(&sb, "r.html");
    assert_sections(&page);
    assert!(
        section(&page, "failures").contains("CUDA out of memory"),
        "{page}"
    );
    assert_eq!(stored(&sb, &["f.toml"]), before);
}

/// A study of one parameter, and one whose space is categorical only: every figure draws (a
/// contour says it needs two parameters), none panics.
#[test]
fn one_parameter_and_categorical_only_spaces_draw_every_figure() {
    let sb = Sandbox::new();
    let one = sh_study("one", 8, 2, "", &["{x}"]).replace(
        "k = { type = \"int\", low = 1, high = 4 }\nc = { type = \"categorical\", choices = [\"a\", \"b\"] }\n",
        "",
    );
    sb.write("one.toml", &one);
    let cat = sh_study("cat", 8, 2, "", &["{c}", "{d}"]).replace(
        "x = { type = \"float\", low = -2.0, high = 2.0 }\nk = { type = \"int\", low = 1, high = 4 }\n",
        "d = { type = \"categorical\", choices = [true, false] }\n",
    );
    sb.write("cat.toml", &cat);
    sb.write(
        "trial.sh",
        r#"v=$(awk -v a="$1" 'BEGIN { if (a == "a" || a == "true") print 1; else if (a == "b") print 2; else print a * a }')
echo "tune: {\"step\": 0, \"loss\": $v}"
"#,
    );
    sb.ok(&["run", "one.toml", "--no-tui"]);
    sb.ok(&["run", "cat.toml", "--no-tui"]);
    for file in ["one.toml", "cat.toml"] {
        for kind in KINDS {
            let out = format!("{file}-{kind}.svg");
            sb.ok(&["plot", kind, file, "-o", &out]);
        }
        sb.ok(&["report", file, "-o", "r.html"]);
        assert_sections(&read(&sb, "r.html"));
    }
    assert!(read(&sb, "one.toml-contour.svg").contains("a contour needs two parameters"));
    let slice = read(&sb, "cat.toml-slice.svg");
    assert!(
        slice.contains(">\na\n</text>"),
        "choices label the axis: {slice}"
    );
    assert!(
        read(&sb, "cat.toml-contour.svg").contains("c × d")
            || read(&sb, "cat.toml-contour.svg").contains("d × c")
    );
}

/// NaN reports (a diverged curve, a NaN final value that fails its trial) are left out of the
/// figures, and say so where it matters, never a panic or a NaN axis.
#[test]
fn nan_reports_are_left_out_of_the_figures() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("nan", 8, 2, "", &["{x}"]));
    sb.write(
        "trial.sh",
        r#"echo "tune: {\"step\": 0, \"loss\": NaN}"
case "$1" in -*) echo "tune: {\"step\": 1, \"loss\": NaN}";; *) echo "tune: {\"step\": 1, \"loss\": $1}";; esac
"#,
    );
    sb.run(&["run", "s.toml", "--no-tui"]);
    for kind in KINDS {
        let file = format!("{kind}.svg");
        sb.ok(&["plot", kind, "s.toml", "-o", &file]);
        let svg = read(&sb, &file);
        // A reason may say NaN; no coordinate may be one.
        let nan_at = ["=\"NaN", "=\"-NaN", "=\"inf", "=\"-inf"];
        let in_points = svg
            .split("points=\"")
            .skip(1)
            .filter_map(|p| p.split('"').next())
            .any(|p| p.contains("NaN") || p.contains("inf"));
        assert!(
            !in_points && !nan_at.iter().any(|n| svg.contains(n)),
            "{kind} draws at NaN: {svg}"
        );
    }
    sb.ok(&["report", "s.toml", "-o", "r.html"]);
    assert_sections(&read(&sb, "r.html"));
}

#[test]
fn bad_names_and_outputs_are_refused_with_a_message_and_write_nothing() {
    let sb = Sandbox::new();
    curve_study(&sb, "bad", 4);
    let before = stored(&sb, &["s.toml"]);

    let out = sb.run(&[
        "report", "--study", "nope", "--db", "tune.db", "-o", "r.html",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("nope") && text(&out).contains("`bad`"),
        "{}",
        text(&out)
    );

    let out = sb.run(&[
        "plot", "history", "--study", "nope", "--db", "tune.db", "-o", "h.svg",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    let out = sb.run(&["plot", "histogram", "s.toml", "-o", "h.svg"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("histogram") && text(&out).contains("history"),
        "the message names the kinds there are: {}",
        text(&out)
    );

    for (args, says) in [
        (
            vec!["plot", "history", "s.toml", "-o", "no/such/dir/h.svg"],
            "does not exist",
        ),
        (
            vec!["plot", "history", "s.toml", "-o", "h.jpg"],
            "must end in `.svg` or `.png`",
        ),
        (
            vec!["plot", "history", "s.toml", "-o", "h"],
            "it has no extension",
        ),
        (
            vec!["report", "s.toml", "-o", "r.pdf"],
            "must end in `.html` or `.htm`",
        ),
        (
            vec!["report", "s.toml", "-o", "missing/r.html"],
            "the directory missing does not exist",
        ),
        (vec!["report", "s.toml", "-o", "."], "must end in"),
    ] {
        let out = sb.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
        assert!(!text(&out).contains("panicked"), "{}", text(&out));
    }
    for f in ["h.svg", "h.jpg", "h", "r.pdf", "r.html", "missing"] {
        assert!(!sb.join(f).exists(), "{f} was written");
    }
    assert_eq!(stored(&sb, &["s.toml"]), before);
}

#[test]
fn extreme_figure_sizes_are_refused_by_their_flag() {
    let sb = Sandbox::new();
    curve_study(&sb, "sizes", 2);
    for (flag, v) in [
        ("--width", "0"),
        ("--width", "-1"),
        ("--width", "8001"),
        ("--height", "18446744073709551616"),
        ("--height", "1e9"),
    ] {
        let arg = format!("{flag}={v}");
        let out = sb.run(&["plot", "history", "s.toml", &arg, "-o", "h.png"]);
        assert_eq!(out.status.code(), Some(2), "{flag} {v}: {}", text(&out));
        assert!(text(&out).contains(flag), "{}", text(&out));
        assert!(!text(&out).contains("panicked"), "{}", text(&out));
    }
    assert!(!sb.join("h.png").exists());
    sb.ok(&[
        "plot",
        "history",
        "s.toml",
        "--width",
        "200",
        "--height",
        "150",
        "-o",
        "small.png",
    ]);
    assert!(is_png(&sb.join("small.png")));
}

/// A study that is still running: the report shows what is there, its running trials on the
/// timeline, and the run goes on undisturbed.
#[test]
fn report_of_a_running_study_shows_its_running_trials() {
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("live", 6, 2, "", &["{x}"]));
    sb.write(
        "trial.sh",
        "echo \"tune: {\\\"step\\\": 0, \\\"loss\\\": $1}\"\n[ \"$TUNE_TRIAL\" -ge 2 ] && sleep 30\necho \"tune: {\\\"step\\\": 1, \\\"loss\\\": $1}\"\n",
    );
    let mut run = sb.tune(&["run", "s.toml", "--no-tui"]);
    let mut child = run
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tune run starts");
    wait_until(PATIENCE, "two complete and two running trials", || {
        let s = crate::common::states(&sb);
        s.iter().filter(|t| t.1 == "COMPLETE").count() >= 2
            && s.iter().filter(|t| t.1 == "RUNNING").count() >= 2
    });
    sb.ok(&["report", "s.toml", "-o", "r.html"]);
    let page = read(&sb, "r.html");
    assert_sections(&page);
    assert!(
        section(&page, "summary").contains("2 running"),
        "{}",
        section(&page, "summary")
    );
    assert!(section(&page, "timeline").contains("running"));
    sb.ok(&["plot", "timeline", "s.toml", "-o", "t.png"]);
    let _ = child.kill();
    let _ = child.wait();
}

/// The same commands on a study stored on PostgreSQL (skipped without a server, as the other
/// PostgreSQL tests are).
#[test]
fn report_and_plot_read_a_study_stored_on_postgresql() {
    let Some((server, url)) = crate::postgres::test_server::shared_db() else {
        return;
    };
    let sb = Sandbox::new();
    sb.write("s.toml", &sh_study("pg-report", 6, 2, "", &["{x}"]));
    sb.write(
        "trial.sh",
        "echo \"tune: {\\\"step\\\": 0, \\\"loss\\\": 1}\"\necho \"tune: {\\\"step\\\": 1, \\\"loss\\\": $1}\"\n",
    );
    sb.ok(&["run", "s.toml", "--db", &url, "--no-tui"]);
    sb.ok(&[
        "report",
        "--study",
        "pg-report",
        "--db",
        &url,
        "-o",
        "r.html",
    ]);
    let page = read(&sb, "r.html");
    assert_sections(&page);
    assert!(
        section(&page, "summary").contains("6 (6 complete"),
        "{}",
        section(&page, "summary")
    );
    sb.ok(&[
        "plot",
        "curves",
        "--study",
        "pg-report",
        "--db",
        &url,
        "-o",
        "c.svg",
    ]);
    assert!(read(&sb, "c.svg").contains("#"));
    drop(server);
}
