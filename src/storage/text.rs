//! Text on its way into a database: the one place that decides what of a trial's own output
//! can be stored, and what a stored study file may keep of a database URL (no password:
//! [`study_file_for_storage`]).
//!
//! A trial writes what it likes: a NUL byte in its standard error or in a metric's name is
//! stored by SQLite but refused by PostgreSQL (SQLSTATE 22021, "invalid byte sequence"), which
//! would stop a study on the trial's output alone, and stop every rerun the same way. So every
//! backend passes a trial's reports and its ending through [`storable_report`] and
//! [`storable_status`], which replace each NUL by U+FFFD (`�`), the character that already
//! stands for bytes that are not UTF-8 (those are replaced where output is read). The trial's
//! log files keep the bytes as written. What the user writes (study names, metric names,
//! categorical choices) is checked before anything is stored and never reaches here with a
//! NUL.

use std::borrow::Cow;

use crate::trial::{Report, TrialStatus};

/// What stands in a stored text for a NUL byte.
pub const NUL_STANDS_AS: char = '\u{FFFD}';

/// `text` as every database stores it: each NUL byte replaced by [`NUL_STANDS_AS`].
pub fn storable(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', &NUL_STANDS_AS.to_string()))
    } else {
        Cow::Borrowed(text)
    }
}

/// A report whose metric names can be stored (see [`storable`]). Two names that differ only
/// where one has a NUL and the other U+FFFD become one metric: the later (by name order) wins.
pub fn storable_report(report: &Report) -> Cow<'_, Report> {
    if !report.metrics.keys().any(|k| k.contains('\0')) {
        return Cow::Borrowed(report);
    }
    Cow::Owned(Report {
        step: report.step,
        metrics: report
            .metrics
            .iter()
            .map(|(k, v)| (storable(k).into_owned(), *v))
            .collect(),
    })
}

/// A trial's end whose failure reason and log tail can be stored (see [`storable`]).
pub fn storable_status(status: &TrialStatus) -> Cow<'_, TrialStatus> {
    let TrialStatus::Failed {
        reason,
        log_tail,
        interrupted,
        ran,
    } = status
    else {
        return Cow::Borrowed(status);
    };
    let has_nul = reason.contains('\0') || log_tail.as_deref().is_some_and(|t| t.contains('\0'));
    if !has_nul {
        return Cow::Borrowed(status);
    }
    Cow::Owned(TrialStatus::Failed {
        reason: storable(reason).into_owned(),
        log_tail: log_tail.as_deref().map(|t| storable(t).into_owned()),
        interrupted: *interrupted,
        ran: ran.clone(),
    })
}

/// A study file's text as a database keeps it: without the password of its `storage` URL.
/// The database is shared and copied (`tune copy`), and the URL it was reached by is of no use
/// in it: `tune worker` and `tune run --db` reach it by their own. Only lines that set a
/// `storage` key are touched, so a trial's command keeps its arguments whatever they hold.
pub fn study_file_for_storage(source: &str) -> Cow<'_, str> {
    let sets_storage = |line: &str| {
        line.split_once('=').is_some_and(|(key, _)| {
            let key = key.trim().trim_matches('"');
            key == "storage" || key.ends_with(".storage") || key.ends_with("storage\"")
        }) || line.contains("storage =") // an inline table: `study = { storage = "…" }`
    };
    if !source
        .lines()
        .any(|l| sets_storage(l) && !super::url::password_spans(l.as_bytes()).is_empty())
    {
        return Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len());
    for line in source.split_inclusive('\n') {
        if sets_storage(line) {
            out.push_str(&super::url::without_password(line));
        } else {
            out.push_str(line);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::Ran;

    #[test]
    fn a_stored_study_file_keeps_no_storage_password_and_every_other_line() {
        let src = "[study]\nname = \"s\"\nstorage = \"postgresql://u:s3cret@h/db?password=x2&sslmode=require\"\n\n[trial]\ncommand = [\"sh\", \"t.sh\", \"password=keep\", \"u:keep@h\"]\n";
        let out = study_file_for_storage(src);
        assert_eq!(
            out,
            src.replace("u:s3cret@", "u@").replace("password=x2&", "")
        );
        assert!(!out.contains("s3cret") && !out.contains("x2"), "{out}");
        let inline = "study = { name = \"s\", storage = \"postgres://a:b@h/d\" }\n";
        assert_eq!(
            study_file_for_storage(inline),
            "study = { name = \"s\", storage = \"postgres://a@h/d\" }\n"
        );
        let clean = "[study]\nstorage = \"tune.db\"\n";
        assert!(matches!(study_file_for_storage(clean), Cow::Borrowed(_)));
    }

    #[test]
    fn nul_bytes_become_the_replacement_character_and_clean_text_is_not_copied() {
        assert_eq!(storable("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
        assert!(matches!(storable("clean é"), Cow::Borrowed(_)));
        let r = Report {
            step: 3,
            metrics: [("lo\0ss".to_string(), 1.0), ("acc".to_string(), 0.5)].into(),
        };
        let s = storable_report(&r);
        assert_eq!(s.step, 3);
        assert_eq!(s.metrics.get("lo\u{FFFD}ss"), Some(&1.0));
        assert_eq!(s.metrics.get("acc"), Some(&0.5));
        let f = TrialStatus::Failed {
            reason: "why\0".into(),
            log_tail: Some("\0tail".into()),
            interrupted: false,
            ran: Ran::default(),
        };
        let TrialStatus::Failed {
            reason, log_tail, ..
        } = storable_status(&f).into_owned()
        else {
            panic!("still failed")
        };
        assert_eq!(
            (reason.as_str(), log_tail.as_deref()),
            ("why\u{FFFD}", Some("\u{FFFD}tail"))
        );
    }
}
