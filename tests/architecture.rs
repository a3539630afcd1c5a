//! The orchestrator never links libtorch: the process boundary between `tune` and `tune-worker`
//! is a crate boundary, and code that needs libtorch lives in `crates/tune-train`. These checks
//! keep it so, since a single `use tch` in `tune` would make libtorch a build requirement of
//! every user again (and put its half-second load back into every query command).

use std::path::{Path, PathBuf};

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

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
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
    let mut files = Vec::new();
    files_under(&src, &mut files);
    assert!(files.len() > 20, "found the sources of tune: {files:?}");
    let mut offenders = Vec::new();
    for file in &files {
        // Snapshots and other non-UTF-8 files cannot hold Rust code.
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
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
