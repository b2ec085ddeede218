//! `rulec fix` on rule files written for the Go event-service
//! (docs/rulec.md#rulec-fix): fixtures/fix/go-service (11 rules, with
//! comments) and fixtures/fix/go-service-membership (`in [...]`) check
//! clean after it, and nothing outside the `when` strings changes, byte
//! for byte; fixtures/fix/go-service-membership-left holds the membership
//! tests it reports instead.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod support;

use support::{root, rulec};

use std::path::Path;
use toml::de::{DeTable, DeValue};

/// A temp dir holding a copy of fixtures/fix/`case` as `rules/`.
fn copy(case: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    for entry in std::fs::read_dir(root().join("fixtures/fix").join(case)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, rules.join(path.file_name().unwrap())).unwrap();
    }
    dir
}

/// Every file of `dir`, by name.
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// The byte spans of every `when` string (rule and step), in file order.
fn when_spans(text: &str) -> Vec<std::ops::Range<usize>> {
    let document = DeTable::parse(text).unwrap();
    let mut spans = Vec::new();
    let DeValue::Array(rules) = document.get_ref()["rule"].get_ref() else {
        panic!("no rules")
    };
    for rule in rules {
        let DeValue::Table(rule) = rule.get_ref() else {
            continue;
        };
        if let Some(when) = rule.get("when") {
            spans.push(when.span());
        }
        if let Some(DeValue::Array(steps)) = rule.get("step").map(|s| s.get_ref()) {
            for step in steps {
                if let DeValue::Table(step) = step.get_ref() {
                    if let Some(when) = step.get("when") {
                        spans.push(when.span());
                    }
                }
            }
        }
    }
    spans.sort_by_key(|s| s.start);
    spans
}

/// The text between (and around) the `when` strings.
fn outside(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut at = 0;
    for span in when_spans(text) {
        parts.push(text[at..span.start].to_string());
        at = span.end;
    }
    parts.push(text[at..].to_string());
    parts
}

/// Byte for byte outside the `when` strings; the same strings, fixed.
fn assert_only_when_changed(before: &[(String, String)], after: &[(String, String)]) {
    assert_eq!(before.len(), after.len());
    for ((name, old), (_, new)) in before.iter().zip(after) {
        assert_eq!(outside(old), outside(new), "{name}");
        assert_eq!(when_spans(old).len(), when_spans(new).len(), "{name}");
    }
}

#[test]
fn go_service_rules_check_clean_after_fix_and_only_when_changes() {
    let dir = copy("go-service");
    let rules = dir.path().join("rules");
    let before = files(&rules);
    let (code, _, err) = rulec(dir.path(), &["check", "rules"]);
    assert_eq!(code, 1, "the Go syntax does not check: {err}");
    let rule_count: usize = before
        .iter()
        .map(|(_, text)| text.matches("[[rule]]").count())
        .sum();
    assert!(rule_count >= 10, "{rule_count} rules");

    // --dry-run: a unified diff, nothing written.
    let (code, diff, err) = rulec(dir.path(), &["fix", "rules", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(files(&rules), before);
    insta::assert_snapshot!("go-service-dry-run", diff);
    assert!(
        err.ends_with("would fix 11 `when` strings in 3 files; 0 errors left\n"),
        "{err}"
    );

    let (code, _, err) = rulec(dir.path(), &["fix", "rules"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.ends_with("fixed 11 `when` strings in 3 files; 0 errors left\n"),
        "{err}"
    );
    // The sample's accessory topics (`battery.cells`, `light.ambient`) are
    // not on the Librescoot bus: checked without a profile, the rewrite
    // itself must leave nothing to warn about.
    let (code, _, err) = rulec(dir.path(), &["check", "rules", "--profile", "none"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err, "3 files, 11 rules: 0 errors, 0 warnings\n");

    let after = files(&rules);
    assert_only_when_changed(&before, &after);
    // The dry run showed exactly what was written.
    let applied: String = after.iter().map(|(_, text)| text.as_str()).collect();
    for line in diff
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
    {
        assert!(applied.contains(&line[1..]), "{line}");
    }

    // A second run has nothing left to do.
    let (code, diff, err) = rulec(dir.path(), &["fix", "rules", "--dry-run"]);
    assert_eq!((code, diff.as_str()), (0, ""), "{err}");
}

#[test]
fn membership_is_rewritten_with_contains() {
    let dir = copy("go-service-membership");
    let rules = dir.path().join("rules");
    let before = files(&rules);
    let (code, _, err) = rulec(dir.path(), &["check", "rules"]);
    assert_eq!(code, 1, "the Go syntax does not check: {err}");

    let (code, diff, err) = rulec(dir.path(), &["fix", "rules", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    // The diff, then the check of the fixed files: clean.
    insta::assert_snapshot!("go-service-membership", format!("{diff}\n{err}"));
    let (code, _, err) = rulec(dir.path(), &["fix", "rules"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.ends_with("fixed 4 `when` strings in 1 file; 0 errors left\n"),
        "{err}"
    );
    let (code, _, err) = rulec(dir.path(), &["check", "rules"]);
    assert_eq!(code, 0, "{err}");
    // Clean but for a real fight over the dashboard: a charge of 5 while
    // riding starts both `battery-steps` and `low-while-riding`
    // (docs/safety-checks.md#conflicts).
    assert!(err.contains("rulec::conflict"), "{err}");
    assert!(
        err.ends_with("1 file, 4 rules: 0 errors, 1 warning\n"),
        "{err}"
    );
    assert_only_when_changed(&before, &files(&rules));

    // A second run has nothing left to do.
    let (code, diff, err) = rulec(dir.path(), &["fix", "rules", "--dry-run"]);
    assert_eq!((code, diff.as_str()), (0, ""), "{err}");
}

#[test]
fn membership_it_cannot_rewrite_is_reported_and_the_rest_is_fixed() {
    let dir = copy("go-service-membership-left");
    let rules = dir.path().join("rules");
    let before = files(&rules);
    let (code, _, err) = rulec(dir.path(), &["fix", "rules"]);
    assert_eq!(code, 1, "{err}");
    insta::assert_snapshot!("go-service-membership-left", err);
    assert_only_when_changed(&before, &files(&rules));
    let text = std::fs::read_to_string(rules.join("10-left.toml")).unwrap();
    assert!(
        text.contains(r#"when = "to in [] || from == \"ready-to-drive\"""#),
        "{text}"
    );
}

#[test]
fn one_file_and_a_missing_path() {
    let dir = copy("go-service");
    let (code, _, err) = rulec(dir.path(), &["fix", "rules/20-battery.toml"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.ends_with("fixed 3 `when` strings in 1 file; 0 errors left\n"),
        "{err}"
    );
    let (code, _, err) = rulec(dir.path(), &["fix", "nowhere"]);
    assert_eq!(code, 2);
    assert_eq!(err, "error: nowhere does not exist\n");
}

#[test]
fn help_has_an_example() {
    let (_, help, _) = rulec(&root(), &["fix", "--help"]);
    assert!(help.contains("rulec fix rules/ --dry-run"), "{help}");
}

/// `--dry-run` is linear in its input (issue: a whole-text diff of a file
/// where every rule has a `when` to rewrite costs lines × changes). Both
/// runs read, check and rewrite the same 12,000 rules; the dry run prints
/// the diff instead of writing, and may not cost more than twice the real
/// fix (plus 5 s). Before, the debug build took 59 s for the dry run and
/// 13 s for the fix.
#[test]
fn dry_run_costs_about_what_the_fix_costs() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    let body: String = (0..12_000)
        .map(|i| {
            format!(
                "[[rule]]\nname = \"r{i}\"\non = [\"a\"]\nwhen = \"data.x == 'v{i}' and not data.y\"\n\
                 [[rule.step]]\ndo = \"redis\"\nlist = \"l\"\npush = \"p\"\n\n"
            )
        })
        .collect();
    std::fs::write(rules.join("many.toml"), &body).unwrap();
    let started = std::time::Instant::now();
    let (code, diff, err) = rulec(dir.path(), &["fix", "rules", "--dry-run"]);
    let dry_run = started.elapsed();
    assert_eq!(code, 0, "{err}");
    assert_eq!(diff.matches("\n@@ ").count(), 12_000, "one hunk per rule");
    assert!(
        diff.contains("-when = \"data.x == 'v11999' and not data.y\"\n+when = "),
        "{}",
        &diff[diff.len().saturating_sub(400)..]
    );
    let started = std::time::Instant::now();
    let (code, _, err) = rulec(dir.path(), &["fix", "rules"]);
    let fix = started.elapsed();
    assert_eq!(code, 0, "{err}");
    eprintln!("12,000 rewritten `when`s: --dry-run {dry_run:?}, fix {fix:?}");
    assert!(
        dry_run < fix * 2 + std::time::Duration::from_secs(5),
        "--dry-run {dry_run:?}, fix {fix:?}"
    );
}
