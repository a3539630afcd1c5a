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

/// What only the terminal loop (`tui/terminal.rs`) may touch: the terminal, files, the
/// environment, the runtime and the clock.
const UI_IO: &[&str] = &[
    "std::io",
    "std::fs",
    "std::env",
    "tokio",
    "SystemTime::now",
    "Instant::now",
    "crossterm::terminal",
    "crossterm::execute",
    "ratatui::Terminal",
    "terminal::",
];

#[test]
fn the_ui_state_and_view_stay_pure() {
    // The state is updated by events and keys with an injected clock, the view draws it: both
    // are tested alone on a `TestBackend`, and the same state always draws the same screen.
    for room in ["tui/state", "tui/view"] {
        let bad = offenders(room, UI_IO);
        assert!(
            bad.is_empty(),
            "src/{room} does no I/O and reads no clock; the terminal loop does:\n{}",
            bad.join("\n")
        );
    }
}

/// The UI in rooms (issue 30): a file of the UI that grows past this is several rooms.
const UI_FILE_MAX_LINES: usize = 600;

#[test]
fn no_file_of_the_ui_is_over_600_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tui");
    let long: Vec<String> = rust_files(&root)
        .into_iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(&f)
                .expect("readable source file")
                .lines()
                .count();
            (n > UI_FILE_MAX_LINES).then(|| format!("{}: {n} lines", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these by what they hold (at most {UI_FILE_MAX_LINES} lines a file):\n{}",
        long.join("\n")
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

/// The lines of every file under `src/<room>` that name any of `banned`, outside comments,
/// test modules included.
fn offenders_with_tests(room: &str, banned: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(room);
    let mut out = Vec::new();
    for f in rust_files(&root) {
        let text = std::fs::read_to_string(&f).expect("readable source file");
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if banned.iter().any(|b| code.contains(b)) {
                out.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    out
}

/// The two database backends mirror each other: what both need (how a status, a value, a
/// direction is stored; the statements they share; the test fixtures) lives in `storage/`
/// itself, never in the other backend.
#[test]
fn the_storage_backends_import_nothing_from_each_other() {
    let bad = offenders_with_tests("storage/postgres", &["sqlite", "rusqlite"]);
    assert!(
        bad.is_empty(),
        "storage/postgres imports from SQLite:\n{}",
        bad.join("\n")
    );
    let bad = offenders_with_tests("storage/sqlite", &["postgres", "Postgres"]);
    assert!(
        bad.is_empty(),
        "storage/sqlite imports from PostgreSQL:\n{}",
        bad.join("\n")
    );
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

/// The files under `src/` compiled only for tests (or the test fixtures feature): the target
/// of a `mod x;` under `#[cfg(test)]` or `#[cfg(any(test, …))]`.
fn test_only_files(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).expect("readable source file");
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let dir = match stem {
            "mod" | "lib" | "main" => f.parent().expect("a file has a folder").to_path_buf(),
            _ => f.with_extension(""),
        };
        for (i, line) in lines.iter().enumerate() {
            if !(line.starts_with("#[cfg(test)]") || line.starts_with("#[cfg(any(test")) {
                continue;
            }
            let mut path_attr = None;
            let mut j = i + 1;
            while let Some(l) = lines.get(j).filter(|l| l.starts_with("#[")) {
                if let Some(p) = l.strip_prefix("#[path = \"") {
                    path_attr = p.split('"').next();
                }
                j += 1;
            }
            let item = lines.get(j).copied().unwrap_or("");
            let Some(name) = item
                .split("mod ")
                .nth(1)
                .and_then(|rest| rest.strip_suffix(';'))
            else {
                continue;
            };
            let parent = f.parent().expect("a file has a folder");
            match path_attr {
                Some(p) => out.push(parent.join(p)),
                None => {
                    out.push(dir.join(format!("{name}.rs")));
                    out.push(dir.join(name).join("mod.rs"));
                }
            }
        }
    }
    out
}

/// The code of a source file without its test modules (by the house's habit, at the end of the
/// file) and without comment lines.
fn code_outside_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut code = String::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t.starts_with("#[cfg(test)]")
            && lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.starts_with("#["))
                .is_some_and(|l| l.contains("mod ") && l.ends_with('{'))
        {
            break;
        }
        if !t.starts_with("//") {
            code.push_str(line);
            code.push('\n');
        }
    }
    code
}

/// Each `Result<…, String>` in `code` (over several lines too), as written.
fn string_results(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("Result<") {
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let inner_start = at + "Result<".len();
        let (mut depth, mut commas, mut end) = (1, vec![inner_start - 1], None);
        for (k, c) in code[inner_start..].char_indices() {
            match c {
                '<' => depth += 1,
                '>' if code[..inner_start + k].ends_with('-') => {}
                '>' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(inner_start + k);
                        break;
                    }
                }
                ',' if depth == 1 => commas.push(inner_start + k),
                _ => {}
            }
        }
        let Some(end) = end else { continue };
        commas.push(end);
        // The arguments, a trailing comma's empty one left out: the last is the error type.
        let error_type = commas
            .windows(2)
            .map(|w| code[w[0] + 1..w[1]].trim())
            .filter(|a| !a.is_empty())
            .nth(1);
        if error_type == Some("String") {
            out.push(
                code[at..=end]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
    }
    out
}

#[test]
fn the_check_sees_string_results_over_lines_but_not_other_errors() {
    assert_eq!(
        string_results("fn f() -> Result<(), String> {"),
        ["Result<(), String>"]
    );
    assert_eq!(
        string_results("fn f() -> Result<\n    BTreeMap<String, Vec<u8>>,\n    String,\n> {"),
        ["Result< BTreeMap<String, Vec<u8>>, String, >"]
    );
    assert!(string_results("fn f() -> Result<String, SpecError> {").is_empty());
    assert!(string_results("fn f() -> anyhow::Result<String> {").is_empty());
    assert!(string_results("fn f() -> io::Result<Vec<String>> {").is_empty());
    assert!(string_results("fn f() -> TryResult<(), String> {").is_empty());
    let text = "fn a() -> Result<(), E> {}\n// Result<(), String>\n#[cfg(test)]\nmod tests {\n    fn b() -> Result<(), String> {}\n}\n";
    assert!(string_results(&code_outside_tests(text)).is_empty());
}

/// Errors are types (`thiserror`, one per module, with kinds callers match on), never strings:
/// a `String` error can only be shown or searched, and a caller that picks an exit status by
/// searching a message breaks silently when the wording changes.
#[test]
fn no_function_of_the_orchestrators_src_returns_a_string_error() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    let test_only = test_only_files(&files);
    assert!(
        test_only
            .iter()
            .any(|f| f.ends_with("storage/test_server.rs")),
        "found the test-only files: {test_only:?}"
    );
    let mut offenders = Vec::new();
    for file in files.iter().filter(|f| !test_only.contains(f)) {
        let text = std::fs::read_to_string(file).expect("readable source file");
        for found in string_results(&code_outside_tests(&text)) {
            offenders.push(format!("{}: {found}", file.display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "return a `thiserror` type of the module instead of a String error:\n{}",
        offenders.join("\n")
    );
}
