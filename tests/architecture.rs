//! The house rules of ARCHITECTURE.md that are easiest to break by accident, checked by a scan
//! of the sources: which room may import which, and that the orchestrator never links libtorch
//! (the process boundary between `tune` and `tune-worker` is a crate boundary: a single
//! `use tch` in `tune` would make libtorch a build requirement of every user again, and put
//! its half-second load back into every query command).

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

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Where `text` has `needle` starting a word (`watch::` holds `tch::`, but not as a word).
fn word_at(text: &str, needle: &str, whole: bool) -> bool {
    text.match_indices(needle).any(|(at, _)| {
        let starts = text[..at].chars().next_back().is_none_or(|c| !is_ident(c));
        let ends = !whole
            || text[at + needle.len()..]
                .chars()
                .next()
                .is_none_or(|c| !is_ident(c));
        starts && ends
    })
}

/// What in `text` names libtorch's crates: a `tch::` path, a `use tch`, or `torch_sys` at all.
fn libtorch_mention(text: &str) -> Option<&'static str> {
    if word_at(text, "tch::", false) {
        Some("tch::")
    } else if word_at(text, "use tch", true) {
        Some("use tch")
    } else if word_at(text, "torch_sys", true) {
        Some("torch_sys")
    } else {
        None
    }
}

#[test]
fn the_check_sees_tch_paths_uses_and_torch_sys_but_not_watch() {
    assert_eq!(libtorch_mention("let d = tch::Device::Cpu;"), Some("tch::"));
    assert_eq!(libtorch_mention("use tch::{Kind, Tensor};"), Some("tch::"));
    assert_eq!(libtorch_mention("use tch;"), Some("use tch"));
    assert_eq!(
        libtorch_mention("extern crate torch_sys;"),
        Some("torch_sys")
    );
    assert_eq!(libtorch_mention("let (tx, rx) = watch::channel(0);"), None);
    assert_eq!(libtorch_mention("use tchotchke::Trinket;"), None);
    assert_eq!(libtorch_mention("tch-rs issue 980"), None);
}

#[test]
fn no_file_of_the_orchestrators_src_names_tch_or_torch_sys() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    assert!(files.len() > 20, "found the sources of tune: {files:?}");
    let mut offenders = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable source file");
        if let Some(what) = libtorch_mention(&text) {
            offenders.push(format!("{}: `{what}`", file.display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "the orchestrator must not use libtorch (move this code to crates/tune-train):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_root_package_does_not_depend_on_tch_or_torch_sys() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let manifest: toml::Table = toml::from_str(&std::fs::read_to_string(&path).expect("readable"))
        .expect("Cargo.toml is TOML");
    let mut tables: Vec<(String, &toml::Table)> = Vec::new();
    for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
        if let Some(t) = manifest.get(kind).and_then(toml::Value::as_table) {
            tables.push((kind.to_string(), t));
        }
        // [target.'cfg(…)'.dependencies] and the like.
        if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
            for (cfg, t) in targets {
                if let Some(t) = t.get(kind).and_then(toml::Value::as_table) {
                    tables.push((format!("target.{cfg}.{kind}"), t));
                }
            }
        }
    }
    assert!(
        tables.iter().any(|(k, _)| k == "dependencies"),
        "the root package has dependencies"
    );
    for (kind, deps) in tables {
        for (key, spec) in deps {
            // A renamed dependency names its crate in `package`.
            let package = spec
                .get("package")
                .and_then(toml::Value::as_str)
                .unwrap_or(key);
            assert!(
                !matches!(package, "tch" | "torch-sys"),
                "Cargo.toml: [{kind}] {key} is {package}; libtorch belongs to crates/tune-train only"
            );
        }
    }
}

/// Every file a user reads or runs: the README, docs, examples, scripts, and the sources that
/// `--help` and messages come from.
fn user_facing_files(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut stack: Vec<PathBuf> = ["docs", "studies", "scripts", "src", "crates", "migrations"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if matches!(
                p.extension().and_then(|x| x.to_str()),
                Some("md" | "rs" | "toml" | "py" | "sh" | "sbatch" | "yaml" | "sql")
            ) {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn nothing_users_read_points_at_the_projects_private_shared_folder() {
    // A clone of the project has no `shared/` beside it: what users read must stand alone
    // (the references live in docs/).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = user_facing_files(root);
    assert!(
        files.len() > 50,
        "the walk found too little: {}",
        files.len()
    );
    let mut bad = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            if ["shared/spec", "shared/bench", "shared/notes", "../shared"]
                .iter()
                .any(|s| line.contains(s))
            {
                bad.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(bad.is_empty(), "pointers at shared/:\n{}", bad.join("\n"));
}
