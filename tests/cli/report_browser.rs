//! `tune report`'s page in a real browser: headless Chromium loads it from disk with nothing
//! else reachable, logs no console error and no failed load, lays out every section with its
//! figures, and takes a screenshot. Without Chromium the test says "skipped:", unless
//! `TUNE_REQUIRE_CHROMIUM=1` (scripts/test.sh sets it; `scripts/setup.sh --python-tests` installs
//! Debian's `chromium`) or CI makes that a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{Sandbox, output_within, text};
use crate::report::{SECTIONS, curve_study, section};

/// How long one browser run may take on a loaded machine.
const BROWSER_PATIENCE: Duration = Duration::from_secs(120);

/// The browser on PATH, or `None` with a `skipped:` line, unless it is required here.
fn chromium_or_skip() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    if std::env::var_os("CI").is_some()
        || std::env::var("TUNE_REQUIRE_CHROMIUM").as_deref() == Ok("1")
    {
        panic!(
            "Chromium is required here (TUNE_REQUIRE_CHROMIUM=1) but `chromium` is not on PATH: \
             `./scripts/setup.sh --python-tests` installs it"
        );
    }
    eprintln!(
        "skipped: chromium is not installed (`./scripts/setup.sh --python-tests` installs it)"
    );
    None
}

/// Headless Chromium on `page` with `args` (`--dump-dom`, `--screenshot=…`), its profile in
/// the sandbox so nothing outside it is touched, logging to standard error.
fn chromium(browser: &Path, sb: &Sandbox, page: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1000,3000",
    ])
    .arg(format!(
        "--user-data-dir={}",
        sb.join("chromium-profile").display()
    ))
    .args(args)
    .arg(format!("file://{}", page.display()))
    .current_dir(sb.path())
    .env("HOME", sb.path())
    .stdin(Stdio::null());
    output_within(c, BROWSER_PATIENCE)
}

/// The lines of Chromium's log that say the page misbehaved: any console message (headless
/// Chromium logs every one as `INFO:CONSOLE`, whatever its level, and the page has no script, so
/// any message at all is the browser complaining about it), an uncaught exception, or a resource
/// that did not load. The log's other errors (no D-Bus in a container) are the browser's own.
fn page_errors(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            l.contains(":CONSOLE")
                || l.contains("Uncaught")
                || l.contains("Failed to load resource")
                || l.contains("net::ERR_")
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn the_report_opens_in_headless_chromium_without_errors_and_shows_every_figure() {
    let Some(browser) = chromium_or_skip() else {
        return;
    };
    let sb = Sandbox::new();
    curve_study(&sb, "browser", 40);
    sb.ok(&["report", "s.toml", "-o", "report.html"]);
    let page = sb.join("report.html");

    // The check catches what it must: a page with a console error is flagged.
    let bad = sb.write(
        "bad.html",
        "<!DOCTYPE html><html><body><script>console.error('deliberate')</script></body></html>",
    );
    let out = chromium(&browser, &sb, &bad, &["--dump-dom"]);
    assert!(
        !page_errors(&String::from_utf8_lossy(&out.stderr)).is_empty(),
        "the console check missed a deliberate console.error:\n{}",
        text(&out)
    );

    let out = chromium(&browser, &sb, &page, &["--dump-dom"]);
    assert!(out.status.success(), "chromium --dump-dom: {}", text(&out));
    let log = String::from_utf8_lossy(&out.stderr);
    let errors = page_errors(&log);
    assert!(
        errors.is_empty(),
        "the page logged errors:\n{}",
        errors.join("\n")
    );
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    for (id, figures) in SECTIONS {
        let n = section(&dom, id).matches("<svg").count();
        assert!(
            n >= figures,
            "section `{id}` as the browser laid it out has {n} <svg>, wants {figures}"
        );
    }

    let shot = sb.join("report.png");
    let arg = format!("--screenshot={}", shot.display());
    let out = chromium(&browser, &sb, &page, &[&arg]);
    assert!(
        out.status.success(),
        "chromium --screenshot: {}",
        text(&out)
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot: {e}\n{}", text(&out)));
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "the screenshot is no PNG"
    );
    assert!(
        png.len() > 20_000,
        "a blank screenshot: {} bytes",
        png.len()
    );
    let errors = page_errors(&String::from_utf8_lossy(&out.stderr));
    assert!(
        errors.is_empty(),
        "the page logged errors:\n{}",
        errors.join("\n")
    );
}
