//! The house rules of ARCHITECTURE.md that are easiest to break by accident, checked by a scan
//! of the sources: which room may import which.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)
            .expect("readable source dir")
            .flatten()
        {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The lines of the files under `src/<room>` that name any of `banned`, outside comments and
/// test modules (a test may assemble pieces from several rooms).
fn offenders(room: &str, banned: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(room);
    let files = if root.is_dir() {
        rust_files(&root)
    } else {
        vec![root.with_extension("rs")]
    };
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable source file");
        let code_end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
        for (i, line) in text[..code_end].lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if banned.iter().any(|b| code.contains(b)) {
                out.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    out
}

#[test]
fn the_ui_never_imports_storage_or_the_spec() {
    let bad = offenders("tui", &["crate::storage", "crate::spec", "rusqlite"]);
    assert!(
        bad.is_empty(),
        "the UI draws events, never rows:\n{}",
        bad.join("\n")
    );
}

#[test]
fn samplers_and_pruners_stay_pure() {
    let banned = [
        "crate::storage",
        "crate::scheduler",
        "crate::engine",
        "tokio",
        "SystemTime::now",
        "Instant::now",
        "thread_rng",
        "std::fs",
    ];
    for room in ["sampler", "pruner"] {
        let bad: Vec<String> = offenders(room, &banned)
            .into_iter()
            // The pruner testkit drives the engine on purpose: it is the engine's test bench.
            .filter(|l| !l.contains("testkit.rs"))
            .collect();
        assert!(bad.is_empty(), "{room} must be pure:\n{}", bad.join("\n"));
    }
}

#[test]
fn storage_and_the_engine_know_nothing_of_the_scheduler_or_the_ui() {
    for room in ["storage", "engine", "events"] {
        let mut banned = vec!["crate::scheduler", "crate::tui", "crate::commands"];
        if room != "events" {
            banned.push("crate::events");
        }
        let bad = offenders(room, &banned);
        assert!(bad.is_empty(), "{room} imports upward:\n{}", bad.join("\n"));
    }
}
