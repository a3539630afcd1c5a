//! `tune ask-tell` (`shared/spec/ask-tell.md`) driven line by line through a pipe: one JSON
//! line answers each request at once, params are valid and typed, errors let it go on.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use rstest::rstest;
use serde_json::{Value, json};

use crate::common::{PATIENCE, Sandbox, wait_within};

/// Every kind of parameter of the spec: log and plain floats, a float step, log and stepped
/// ints, categorical strings, ints, floats and booleans, and conditional parameters.
const SPACE: &str = r#"[space]
lr        = { type = "float", low = 1e-5, high = 1e-1, log = true }
wd        = { type = "float", low = 0.0, high = 0.1 }
q         = { type = "float", low = 0.0, high = 1.0, step = 0.25 }
optimizer = { type = "categorical", choices = ["sgd", "adam", "adamw"] }
momentum  = { type = "float", low = 0.0, high = 0.99, when = { optimizer = "sgd" } }
beta      = { type = "float", low = 0.8, high = 0.999, when = { optimizer = ["adam", "adamw"] } }
batch     = { type = "int", low = 16, high = 512, log = true }
stride    = { type = "int", low = 0, high = 10, step = 5 }
layers    = { type = "int", low = 1, high = 6 }
width     = { type = "categorical", choices = [64, 128, 256] }
ratio     = { type = "categorical", choices = [0.5, 1.5] }
flag      = { type = "categorical", choices = [true, false] }
"#;

/// A running `tune ask-tell`: write one line, read the one line that answers it.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Session {
    fn start(sb: &Sandbox, args: &[&str]) -> Session {
        let mut all = vec!["ask-tell", "--space", "space.toml"];
        all.extend_from_slice(args);
        Session::start_with(sb, &all)
    }

    /// `tune ARGS` (the whole command line), as a session.
    fn start_with(sb: &Sandbox, all: &[&str]) -> Session {
        let mut child = sb
            .tune(all)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("tune ask-tell starts");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Session {
            stdin: child.stdin.take(),
            child,
            lines: rx,
        }
    }

    /// Sends one request and waits for its answer, which must come while stdin stays open
    /// (so it was flushed at once) and be exactly one JSON line.
    fn send(&mut self, request: &str) -> Value {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{request}").expect("write a request");
        stdin.flush().expect("flush the request");
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("no answer to `{request}`: {e}"));
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the answer to `{request}` is not JSON: `{line}`: {e}"));
        // Exactly one line: nothing else follows it.
        match self.lines.recv_timeout(Duration::from_millis(30)) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(extra) => panic!("a second line answered `{request}`: `{extra}`"),
            Err(RecvTimeoutError::Disconnected) => panic!("ask-tell died after `{request}`"),
        }
        v
    }

    /// Sends raw bytes as one request line and returns the one JSON answer.
    fn send_bytes(&mut self, request: &[u8]) -> Value {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(request).expect("write a request");
        stdin.write_all(b"\n").expect("write a newline");
        stdin.flush().expect("flush the request");
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("no answer to {request:?}: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: `{line}`: {e}"))
    }

    fn ask(&mut self) -> (u64, Value) {
        let a = self.send(r#"{"ask": {}}"#);
        let n = a["trial"]
            .as_u64()
            .unwrap_or_else(|| panic!("an ask answers a trial: {a}"));
        (n, a["params"].clone())
    }

    fn tell(&mut self, body: Value) -> Value {
        self.send(&json!({ "tell": body }).to_string())
    }

    /// Closes standard input and returns the exit status and anything printed after.
    fn finish(mut self) -> (std::process::ExitStatus, Vec<String>) {
        drop(self.stdin.take());
        let status = wait_within(&mut self.child, PATIENCE);
        let rest: Vec<String> = self.lines.iter().collect();
        (status, rest)
    }
}

fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    sb.write("space.toml", SPACE);
    sb
}

fn float_in(p: &Value, key: &str, low: f64, high: f64) -> f64 {
    let v = &p[key];
    assert!(v.is_f64(), "`{key}` is a JSON float: {p}");
    let x = v.as_f64().expect("a float");
    assert!(
        (low..=high).contains(&x),
        "`{key}` = {x} is outside [{low}, {high}]"
    );
    x
}

fn int_in(p: &Value, key: &str, low: i64, high: i64) -> i64 {
    let v = &p[key];
    assert!(v.is_i64(), "`{key}` is a JSON integer: {p}");
    let x = v.as_i64().expect("an int");
    assert!(
        (low..=high).contains(&x),
        "`{key}` = {x} is outside [{low}, {high}]"
    );
    x
}

fn assert_valid(p: &Value) {
    float_in(p, "lr", 1e-5, 1e-1);
    float_in(p, "wd", 0.0, 0.1);
    let q = float_in(p, "q", 0.0, 1.0);
    assert_eq!((q * 4.0).fract(), 0.0, "`q` = {q} is on its step 0.25");
    int_in(p, "batch", 16, 512);
    let stride = int_in(p, "stride", 0, 10);
    assert_eq!(stride % 5, 0, "`stride` = {stride} is on its step 5");
    int_in(p, "layers", 1, 6);
    assert!(
        [json!(64), json!(128), json!(256)].contains(&p["width"]),
        "{p}"
    );
    assert!(
        p["width"].is_i64(),
        "integer choices come back as integers: {p}"
    );
    assert!([json!(0.5), json!(1.5)].contains(&p["ratio"]), "{p}");
    assert!(
        p["flag"].is_boolean(),
        "boolean choices come back as booleans: {p}"
    );
    let opt = p["optimizer"]
        .as_str()
        .expect("string choices come back as strings");
    assert!(["sgd", "adam", "adamw"].contains(&opt), "{p}");
    let obj = p.as_object().expect("params are an object");
    if opt == "sgd" {
        float_in(p, "momentum", 0.0, 0.99);
        assert!(
            !obj.contains_key("beta"),
            "an inactive param is absent: {p}"
        );
    } else {
        float_in(p, "beta", 0.8, 0.999);
        assert!(
            !obj.contains_key("momentum"),
            "an inactive param is absent: {p}"
        );
    }
    assert_eq!(obj.len(), 11, "exactly the active params: {p}");
}

#[rstest]
#[case::random(&["--sampler", "random", "--seed", "3"])]
#[case::sobol(&["--sampler", "sobol", "--seed", "3"])]
#[case::the_default_sampler(&[])]
fn every_answer_is_one_flushed_line_with_params_in_bounds_and_of_their_own_json_type(
    #[case] args: &[&str],
) {
    let sb = sandbox();
    let mut s = Session::start(&sb, args);
    let mut optimizers = BTreeSet::new();
    for i in 0..40u64 {
        let (n, p) = s.ask();
        assert_eq!(n, i, "trials are numbered from 0 in order");
        assert_valid(&p);
        optimizers.insert(p["optimizer"].as_str().expect("optimizer").to_string());
        let value = p["lr"].as_f64().expect("lr") * 100.0;
        assert_eq!(
            s.tell(json!({"trial": n, "value": value})),
            json!({"ok": true})
        );
    }
    assert_eq!(optimizers.len(), 3, "40 proposals reach every choice");
    let (status, rest) = s.finish();
    assert!(
        status.success(),
        "end of input ends the process with status 0: {status}"
    );
    assert!(rest.is_empty(), "nothing else on standard output: {rest:?}");
}

#[test]
fn malformed_lines_unknown_trials_and_second_tells_get_an_error_and_the_process_goes_on() {
    let sb = sandbox();
    let mut s = Session::start(&sb, &["--sampler", "random"]);
    let (n, _) = s.ask();
    assert_eq!(
        s.tell(json!({"trial": n, "value": 0.5})),
        json!({"ok": true})
    );
    for bad in [
        "not json".to_string(),
        "[1, 2]".to_string(),
        "42".to_string(),
        r#"{"ask": {}"#.to_string(),
        r#"{"ask": 1}"#.to_string(),
        r#"{"bogus": {}}"#.to_string(),
        r#"{"ask": {}, "tell": {"trial": 0}}"#.to_string(),
        r#"{"tell": 3}"#.to_string(),
        r#"{"tell": {"value": 1.0}}"#.to_string(),
        r#"{"tell": {"trial": -1, "value": 1.0}}"#.to_string(),
        r#"{"tell": {"trial": "zero", "value": 1.0}}"#.to_string(),
        json!({"tell": {"trial": n, "value": 0.5}}).to_string(),
        json!({"tell": {"trial": 99, "value": 0.5}}).to_string(),
    ] {
        let a = s.send(&bad);
        let e = a["error"]
            .as_str()
            .unwrap_or_else(|| panic!("`{bad}` got {a}"));
        assert!(!e.is_empty());
        assert_eq!(a.as_object().map(|o| o.len()), Some(1), "{a}");
    }
    let told_twice = s.tell(json!({"trial": n, "value": 0.5}));
    assert!(
        told_twice["error"]
            .as_str()
            .is_some_and(|e| e.contains("already")),
        "{told_twice}"
    );
    let unknown = s.tell(json!({"trial": 99, "value": 0.5}));
    assert!(
        unknown["error"].as_str().is_some_and(|e| e.contains("99")),
        "{unknown}"
    );
    // A trial that got an error stays open: bad tells of it do not consume it.
    let (m, _) = s.ask();
    for bad in [
        json!({"trial": m}),
        json!({"trial": m, "value": "high"}),
        json!({"trial": m, "state": "exploded"}),
        json!({"trial": m, "state": 7}),
        json!({"trial": m, "value": 1.0, "colour": "red"}),
    ] {
        let a = s.tell(bad.clone());
        assert!(a["error"].is_string(), "{bad} got {a}");
    }
    assert_eq!(
        s.tell(json!({"trial": m, "state": "fail"})),
        json!({"ok": true})
    );
    let (k, p) = s.ask();
    assert_eq!(k, m + 1);
    assert_valid(&p);
    assert_eq!(
        s.tell(json!({"trial": k, "state": "pruned", "value": 0.4})),
        json!({"ok": true})
    );
    let (status, rest) = s.finish();
    assert!(status.success());
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn outstanding_asks_get_distinct_params() {
    for sampler in ["random", "sobol", "auto"] {
        let sb = sandbox();
        let mut s = Session::start(&sb, &["--sampler", sampler, "--seed", "1"]);
        let asked: Vec<(u64, Value)> = (0..16).map(|_| s.ask()).collect();
        let numbers: BTreeSet<u64> = asked.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers.len(), 16, "{sampler}: every ask gets its own trial");
        let params: BTreeSet<String> = asked.iter().map(|(_, p)| p.to_string()).collect();
        assert_eq!(
            params.len(),
            16,
            "{sampler}: outstanding asks get distinct params"
        );
        // They can be told in any order.
        for (n, _) in asked.iter().rev() {
            assert_eq!(
                s.tell(json!({"trial": n, "value": 1.0})),
                json!({"ok": true})
            );
        }
        assert!(s.finish().0.success());
    }
}

#[test]
fn the_same_seed_and_requests_give_the_same_sequence_of_proposals() {
    let script = |seed: &str, sampler: &str| -> Vec<Value> {
        let sb = sandbox();
        let mut s = Session::start(&sb, &["--sampler", sampler, "--seed", seed]);
        let mut out = Vec::new();
        for i in 0..12u64 {
            let (n, p) = s.ask();
            out.push(p.clone());
            if i % 3 != 2 {
                let v = p["wd"].as_f64().expect("wd") + n as f64;
                s.tell(json!({"trial": n, "value": v}));
            }
        }
        assert!(s.finish().0.success());
        out
    };
    for sampler in ["random", "auto"] {
        let a = script("3", sampler);
        assert_eq!(a, script("3", sampler), "{sampler}: the same seed repeats");
        assert_ne!(a, script("4", sampler), "{sampler}: another seed differs");
    }
}

#[test]
fn with_db_and_study_the_exchange_is_recorded_and_tune_trials_shows_it() {
    let sb = sandbox();
    let args = ["--sampler", "random", "--db", "at.db", "--study", "remote"];
    let mut s = Session::start(&sb, &args);
    let asked: Vec<(u64, Value)> = (0..4).map(|_| s.ask()).collect();
    assert_eq!(
        s.tell(json!({"trial": 0, "value": 0.25})),
        json!({"ok": true})
    );
    assert_eq!(
        s.tell(json!({"trial": 1, "state": "fail"})),
        json!({"ok": true})
    );
    assert_eq!(
        s.tell(json!({"trial": 2, "state": "pruned", "value": 0.4})),
        json!({"ok": true})
    );
    let (status, _) = s.finish();
    assert!(status.success());

    let out = sb.ok(&[
        "trials", "--db", "at.db", "--study", "remote", "--format", "json",
    ]);
    let trials: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(trials.len(), 5, "{trials:#?}");
    for (t, (n, p)) in trials.iter().zip(&asked) {
        assert_eq!(&t["number"], n);
        assert_eq!(&t["params"], p, "the params stored are the params asked");
    }
    let states: Vec<&str> = trials
        .iter()
        .map(|t| t["state"].as_str().expect("state"))
        .collect();
    // Trial 3 was asked but never told: interrupted when input ended, not `running` forever,
    // and its params queued (as trial 4) for the next session.
    assert_eq!(states, ["complete", "failed", "pruned", "failed", "queued"]);
    assert!(
        trials[3]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("interrupted")),
        "{:#}",
        trials[3]
    );
    assert_eq!(trials[4]["params"], asked[3].1);
    assert_eq!(trials[0]["value"], 0.25);
    assert!(trials[1]["value"].is_null());
    assert_eq!(
        trials[2]["value"], 0.4,
        "a pruned trial keeps the value it was told"
    );
    // And says who pruned it (no pruner advised it here).
    let show = sb.ok(&[
        "show", "2", "--db", "at.db", "--study", "remote", "--format", "json",
    ]);
    let show: Value = serde_json::from_slice(&show.stdout).expect("JSON");
    assert_eq!(show["pruned_reason"], "by the ask-tell client", "{show:#}");

    // A second session on the same study goes on from its history: first the queued params.
    let mut s = Session::start(&sb, &args);
    let (n, p) = s.ask();
    assert_eq!(n, 4, "numbers are never given twice");
    assert_eq!(p, asked[3].1, "the params never told come back first");
    let (m, _) = s.ask();
    assert_eq!(m, 5);
    assert_eq!(
        s.tell(json!({"trial": n, "value": 0.125})),
        json!({"ok": true})
    );
    assert!(s.finish().0.success());
    let out = sb.ok(&[
        "best", "--db", "at.db", "--study", "remote", "--format", "json",
    ]);
    let best: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(best["number"], n);
    assert_eq!(best["value"], 0.125);
}

#[test]
fn a_request_that_is_not_utf8_gets_an_error_and_the_session_goes_on() {
    let sb = sandbox();
    let mut s = Session::start(&sb, &[]);
    let err = s.send_bytes(b"{\"ask\": {\xff\xfe}}");
    assert!(
        err["error"].as_str().is_some_and(|e| e.contains("UTF-8")),
        "{err}"
    );
    let (n, p) = s.ask();
    assert_eq!(n, 0);
    assert_valid(&p);
    let (status, _) = s.finish();
    assert!(status.success());
}

/// A learning curve for `report`: falls from 1.0 towards `end` over 9 steps.
fn curve_value(end: f64, step: u64) -> f64 {
    end + (1.0 - end) * (-(step as f64) / 2.0).exp()
}

#[test]
fn reports_are_answered_with_the_pruners_decision_and_a_pruned_trial_keeps_its_reason() {
    let sb = sandbox();
    let args = [
        "--sampler",
        "random",
        "--db",
        "at.db",
        "--study",
        "curves",
        "--pruner",
        "asha",
        "--max-resource",
        "9",
    ];
    let mut s = Session::start(&sb, &args);
    // Without a pruner advising, every report is answered `prune: false`; with ASHA over
    // steps 1, 3 (η = 3), a trial worse than the top third at a rung is told to stop.
    let mut pruned = Vec::new();
    for i in 0..6u64 {
        let (n, _) = s.ask();
        let end = 0.1 * (i + 1) as f64;
        let mut stopped = None;
        for step in 1..=9u64 {
            let a = s.send(
                &json!({"report": {"trial": n, "step": step, "value": curve_value(end, step)}})
                    .to_string(),
            );
            assert!(a["prune"].is_boolean(), "{a}");
            if a["prune"] == true {
                let reason = a["reason"].as_str().expect("a reason");
                assert!(reason.contains("rung"), "{reason}");
                stopped = Some(step);
                break;
            }
        }
        match stopped {
            Some(step) => {
                // Asked again, the advice stands.
                let again = s.send(
                    &json!({"report": {"trial": n, "step": step + 1, "value": 0.0}}).to_string(),
                );
                assert_eq!(again["prune"], true, "{again}");
                assert_eq!(
                    s.tell(json!({"trial": n, "state": "pruned"})),
                    json!({"ok": true})
                );
                pruned.push(n);
            }
            None => assert_eq!(
                s.tell(json!({"trial": n, "value": curve_value(end, 9)})),
                json!({"ok": true})
            ),
        }
    }
    assert!(
        !pruned.is_empty(),
        "later, worse trials are pruned at a rung"
    );
    // Bad reports get an error and the session goes on.
    for bad in [
        json!({"report": {"trial": 0, "step": 1, "value": 0.5}}),
        json!({"report": {"trial": 99, "step": 1, "value": 0.5}}),
        json!({"report": {"trial": 0, "value": 0.5}}),
        json!({"report": {"trial": 0, "step": -1, "value": 0.5}}),
        json!({"report": {"trial": 0, "step": 1, "value": "low"}}),
        json!({"report": {"trial": 0, "step": 1}}),
        json!({"report": {"trial": 0, "step": 1, "value": 0.5, "epoch": 3}}),
        json!({"report": [1, 2]}),
    ] {
        let a = s.send(&bad.to_string());
        assert!(a["error"].is_string(), "{bad} → {a}");
    }
    let (n, _) = s.ask();
    assert_eq!(
        s.send(&json!({"report": {"trial": n, "step": 1, "value": 0.0}}).to_string())["prune"],
        false,
        "the best value at its rung goes on"
    );
    assert!(s.finish().0.success());
    // The pruned trial is stored with its last reported value and the pruner's reason.
    let show = sb.ok(&[
        "show",
        &pruned[0].to_string(),
        "--db",
        "at.db",
        "--study",
        "curves",
        "--format",
        "json",
    ]);
    let show: Value = serde_json::from_slice(&show.stdout).expect("JSON");
    assert_eq!(show["state"], "pruned", "{show:#}");
    assert!(show["value"].is_number(), "{show:#}");
    assert!(
        show["pruned_reason"]
            .as_str()
            .is_some_and(|r| r.contains("rung")),
        "{show:#}"
    );
}

#[rstest]
#[case::unknown_kind(&["--pruner", "bogus"], "space.toml", "--pruner: unknown pruner")]
#[case::forecast_without_a_full_trial(&["--pruner", "forecast"], "space.toml", "max_resource is required")]
#[case::median_with_a_full_trial(&["--pruner", "median", "--max-resource", "9"], "space.toml", "--max-resource")]
#[case::max_resource_nan(&["--pruner", "asha", "--max-resource", "nan"], "space.toml", "max_resource")]
#[case::max_resource_infinite(&["--pruner", "forecast", "--max-resource", "inf"], "space.toml", "max_resource")]
#[case::max_resource_negative(&["--pruner", "hyperband", "--max-resource=-3"], "space.toml", "max_resource")]
#[case::max_resource_below_the_first_step(&["--pruner", "asha", "--max-resource", "0.5"], "space.toml", "max_resource")]
#[case::table_and_flag(&["--pruner", "asha"], "pruned.toml", "give one or the other")]
#[case::table_over_another_key(&[], "epochs.toml", "pruner.resource")]
#[case::table_out_of_range(&[], "eta.toml", "reduction_factor")]
fn a_bad_pruner_is_refused_before_the_session_starts(
    #[case] args: &[&str],
    #[case] file: &str,
    #[case] says: &str,
) {
    let sb = sandbox();
    sb.write(
        "pruned.toml",
        &format!("{SPACE}\n[pruner]\nkind = \"asha\"\nmax_resource = 9\n"),
    );
    sb.write(
        "epochs.toml",
        &format!("{SPACE}\n[pruner]\nkind = \"asha\"\nresource = \"epoch\"\n"),
    );
    sb.write(
        "eta.toml",
        &format!("{SPACE}\n[pruner]\nkind = \"asha\"\nreduction_factor = 1\n"),
    );
    let mut all = vec!["ask-tell", "--space", file];
    all.extend_from_slice(args);
    let out = sb.run(&all);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(says), "{err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
}

#[test]
fn a_pruner_table_in_the_space_file_judges_reports() {
    let sb = sandbox();
    sb.write(
        "pruned.toml",
        &format!("{SPACE}\n[pruner]\nkind = \"median\"\nmin_trials = 1\n"),
    );
    let mut child = Session::start_with(
        &sb,
        &["ask-tell", "--space", "pruned.toml", "--sampler", "random"],
    );
    let (a, _) = child.ask();
    for step in 1..=3 {
        child.send(&json!({"report": {"trial": a, "step": step, "value": 0.1}}).to_string());
    }
    child.tell(json!({"trial": a, "value": 0.1}));
    let (b, _) = child.ask();
    let r = child.send(&json!({"report": {"trial": b, "step": 1, "value": 0.9}}).to_string());
    assert_eq!(
        r["prune"], true,
        "worse than the median of complete trials: {r}"
    );
    assert!(child.finish().0.success());
}

#[test]
fn tune_show_says_what_a_pruned_trial_would_have_reached_once_three_curves_are_complete() {
    let sb = sandbox();
    let args = ["--sampler", "random", "--db", "at.db", "--study", "pred"];
    let mut s = Session::start(&sb, &args);
    let report = |s: &mut Session, n: u64, steps: std::ops::RangeInclusive<u64>, end: f64| {
        for step in steps {
            let a = s.send(
                &json!({"report": {"trial": n, "step": step, "value": curve_value(end, step)}})
                    .to_string(),
            );
            assert_eq!(a["prune"], false, "{a}");
        }
    };
    for end in [0.1, 0.2, 0.3] {
        let (n, _) = s.ask();
        report(&mut s, n, 1..=9, end);
        assert_eq!(
            s.tell(json!({"trial": n, "value": curve_value(end, 9)})),
            json!({"ok": true})
        );
    }
    let (n, _) = s.ask();
    report(&mut s, n, 1..=3, 0.2);
    assert_eq!(
        s.tell(json!({"trial": n, "state": "pruned", "value": curve_value(0.2, 3)})),
        json!({"ok": true})
    );
    assert!(s.finish().0.success());
    let show = |n: u64, format: &str| {
        sb.ok(&[
            "show",
            &n.to_string(),
            "--db",
            "at.db",
            "--study",
            "pred",
            "--format",
            format,
        ])
        .stdout
    };
    let v: Value = serde_json::from_slice(&show(n, "json")).expect("JSON");
    let p = &v["predicted"];
    let value = p["value"].as_f64().unwrap_or_else(|| panic!("{v:#}"));
    let truth = curve_value(0.2, 9);
    assert!((value - truth).abs() < 0.05, "{p} vs {truth}");
    assert!(p["low"].as_f64().unwrap() <= value && value <= p["high"].as_f64().unwrap());
    assert_eq!(
        (p["at_step"].as_f64(), p["from_curves"].as_u64()),
        (Some(3.0), Some(3))
    );
    assert_eq!(p["band"], 0.8);
    let text = String::from_utf8(show(n, "table")).expect("UTF-8");
    assert!(text.contains("would have reached: "), "{text}");
    assert!(
        text.contains("(80 % band, from step 3 against 3 complete curves)"),
        "{text}"
    );
    // A complete trial has its value, and no prediction.
    let v: Value = serde_json::from_slice(&show(0, "json")).expect("JSON");
    assert!(v["predicted"].is_null(), "{v:#}");
}
