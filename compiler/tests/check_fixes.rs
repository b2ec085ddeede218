//! The fix a diagnostic carries (docs/editors.md#quick-fixes): over every
//! case in fixtures/invalid, each diagnostic whose help or label says "did
//! you mean" has one, and applying it (as an editor's quick fix does)
//! takes that diagnostic away.

#![allow(clippy::unwrap_used)]

use rulec::check::CheckReport;
use rulec::load::{load_dir, Loaded};
use rulec::profile::{load, ProfileChoice};
use rulec::session::Session;
use std::path::Path;
use std::sync::Arc;

fn check(loaded: &Loaded) -> CheckReport {
    let profile = load(&ProfileChoice::Builtin).unwrap().map(Arc::new);
    check_loaded(loaded.clone(), profile)
}

/// A fresh session's check: nothing cached.
fn check_loaded(
    loaded: Loaded,
    profile: Option<Arc<rulec::profile::LoadedProfile>>,
) -> CheckReport {
    Session::new(profile).check_loaded(loaded)
}

fn count(report: &CheckReport, file: &str, code: rulec::diagnostic::Code) -> usize {
    report
        .diagnostics
        .iter()
        .filter(|d| d.file.as_deref() == Some(file) && d.code == code)
        .count()
}

#[test]
fn every_did_you_mean_is_a_fix_that_works() {
    let invalid = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/invalid");
    let mut cases: Vec<_> = std::fs::read_dir(&invalid)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    cases.sort();
    let mut applied = Vec::new();
    for case in cases {
        let Ok(loaded) = load_dir(&case) else {
            continue;
        };
        let report = check(&loaded);
        for diagnostic in &report.diagnostics {
            let says =
                |text: &Option<String>| text.as_deref().is_some_and(|t| t.contains("did you mean"));
            let label = diagnostic.label.as_ref().map(|l| l.text.clone());
            if (says(&diagnostic.help) || says(&label)) && diagnostic.fix.is_none() {
                panic!(
                    "{}: a \"did you mean\" without a fix: {diagnostic:?}",
                    case.display()
                );
            }
            let (Some(fix), Some(file)) = (&diagnostic.fix, &diagnostic.file) else {
                continue;
            };
            let source = loaded.files.iter().find(|f| &f.name == file).unwrap();
            let mut text = source.text.clone();
            text.replace_range(fix.span.clone(), &fix.replacement);
            let mut fixed = loaded.clone();
            fixed.overlay(file, &text);
            let after = check(&fixed);
            assert!(
                count(&after, file, diagnostic.code) < count(&report, file, diagnostic.code),
                "{}: writing {:?} did not fix {diagnostic:?}; now: {:?}",
                case.display(),
                fix.replacement,
                after.diagnostics
            );
            applied.push(format!("{} {}", diagnostic.code, fix.replacement));
        }
    }
    // The cases of each kind of fix are there (a fix that vanished fails).
    for code in [
        "rulec::unknown-key",
        "rulec::unknown-topic",
        "rulec::near-miss-topic",
        "rulec::unknown-state-hash",
        "rulec::unknown-list",
        "rulec::unknown-data-key",
        "rulec::concurrency",
        "rulec::unknown-action",
        "rulec::duration",
        "rulec::state-value",
        "rulec::list-value",
        "rulec::event-value",
        "rulec::when::unknown-function",
        "rulec::when::unknown-name",
    ] {
        assert!(
            applied.iter().any(|a| a.starts_with(&format!("{code} "))),
            "no fix of {code} applied: {applied:#?}"
        );
    }
}

/// `rulec lsp` reuses each file's own checks while its text is the same
/// (docs/editors.md#how-fast): the report is the fresh check's.
#[test]
fn a_cached_check_is_the_fresh_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/rules");
    let profile = load(&ProfileChoice::Builtin).unwrap().map(Arc::new);
    // One session across the edits, as the language server keeps one.
    let mut session = Session::new(profile.clone());
    let loaded = load_dir(&dir).unwrap();
    let mut edits = vec![loaded.clone()];
    let mut changed = loaded.clone();
    let alarm = &loaded
        .files
        .iter()
        .find(|f| f.name == "10-alarm.toml")
        .unwrap()
        .text;
    changed.overlay(
        "10-alarm.toml",
        &alarm.replace("alarm.triggered", "alarm.trigered"),
    );
    edits.push(changed);
    let mut duplicated = loaded.clone();
    duplicated.overlay("50-copy.toml", alarm);
    edits.push(duplicated);
    edits.push(loaded);
    for (step, files) in edits.iter().enumerate() {
        let cached = session.check_loaded(files.clone());
        let fresh = check_loaded(files.clone(), profile.clone());
        assert_eq!(cached.diagnostics, fresh.diagnostics, "step {step}");
        assert_eq!(cached.topics, fresh.topics, "step {step}");
        let names = |r: &CheckReport| {
            r.rules
                .iter()
                .map(|rule| rule.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&cached), names(&fresh), "step {step}");
        assert_eq!(cached.rules_read, fresh.rules_read, "step {step}");
    }
    assert!(!check_loaded(edits[1].clone(), profile.clone())
        .diagnostics
        .is_empty());
    assert!(!check_loaded(edits[2].clone(), profile)
        .diagnostics
        .is_empty());
}
