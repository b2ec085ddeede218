//! Hostile but valid inputs (issue "Hardening"): a rule file on one very
//! long line, floods of diagnostics, FIFOs and endless files given as
//! inputs. `rulec` reports and carries on; it never aborts, hangs or grows
//! without bound (docs/diagnostics.md#output, docs/rulec.md).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::Path;
use std::process::{Command, Output};

/// `rulec` in `dir`. These tests are about sizes, positions and counts of
/// rules on made-up topics, not about the bus: they check without a
/// profile, so the topics do not add warnings of their own.
fn rulec(dir: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rulec"));
    command.current_dir(dir).env("NO_COLOR", "1").args(args);
    if matches!(args.first(), Some(&("check" | "build"))) {
        command.args(["--profile", "none"]);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A valid rules file on one line, with a warning past column 65535 (a
/// blank `push`): miette cannot draw a label that far right.
fn one_long_line() -> String {
    let pad = " ".repeat(70_000);
    format!(
        "rule = [{{ name = \"x\", on = [\"a\"],{pad} step = [{{ do = \"redis\", list = \"l\", push = \" \" }}] }}]\n"
    )
}

#[test]
fn a_warning_past_column_65535_is_reported_by_position() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("long.toml"), one_long_line()).unwrap();
    let out = rulec(dir.path(), &["check", "long.toml"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("long.toml:1:700"), "{stderr}");
    assert!(stderr.contains("rulec::blank-value"), "{stderr}");
    assert!(stderr.contains("1 warning"), "{stderr}");
    assert!(stderr.len() < 4096, "the long line is not printed");
    let out = rulec(dir.path(), &["build", "long.toml", "-o", "long.bundle"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let bundle = rulecore_io::bundle_file::read(&dir.path().join("long.bundle")).unwrap();
    assert_eq!(bundle.payload.rules.len(), 1);
    let out = rulec(dir.path(), &["check", "long.toml", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["line"], 1);
    assert!(line["column"].as_u64().unwrap() > 70_000, "{line}");
}

fn rule(name: &str, extra: &str) -> String {
    format!(
        "[[rule]]\nname = \"{name}\"\non = [\"a\"]\n{extra}\n[[rule.step]]\ndo = \"redis\"\nlist = \"l\"\npush = \"p\"\n"
    )
}

/// `rulec check` in `dir` on `rules/`: exit code, stdout, stderr.
fn check_rules(files: &[(&str, String)], json: bool) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("rules")).unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join("rules").join(name), text).unwrap();
    }
    let mut args = vec!["check", "rules"];
    if json {
        args.extend(["--format", "json"]);
    }
    let out = rulec(dir.path(), &args);
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn twenty_thousand_errors_in_one_file_are_counted_and_capped() {
    let body: String = (0..20_000)
        .map(|i| rule(&format!("r{i}"), "concurrency = \"bogus\""))
        .collect();
    let (code, _, stderr) = check_rules(&[("a.toml", body.clone())], false);
    assert_eq!(code, Some(1));
    assert_eq!(stderr.matches("rulec::concurrency").count(), 100);
    assert!(
        stderr.contains(
            "... and 19900 more diagnostics in rules/a.toml (19900 errors, 0 warnings), not shown"
        ),
        "{}",
        &stderr[stderr.len().saturating_sub(300)..]
    );
    assert!(stderr.ends_with("1 file, 20000 rules: 20000 errors, 0 warnings\n"));
    let (code, stdout, _) = check_rules(&[("a.toml", body)], true);
    assert_eq!(code, Some(1));
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 101);
    assert_eq!(lines[99]["line"], 99 * 8 + 4);
    assert_eq!(
        lines[100],
        serde_json::json!({"file": "rules/a.toml", "omitted": 19900, "errors": 19900, "warnings": 0})
    );
}

#[test]
fn twenty_thousand_duplicate_names_across_two_files() {
    let body: String = (0..20_000).map(|i| rule(&format!("r{i}"), "")).collect();
    let (code, _, stderr) = check_rules(&[("a.toml", body.clone()), ("b.toml", body)], false);
    assert_eq!(code, Some(1));
    assert_eq!(stderr.matches("is already used in a.toml").count(), 100);
    assert!(stderr.contains("in rules/b.toml (19900 errors, 0 warnings)"));
    assert!(stderr.ends_with("2 files, 40000 rules: 20000 errors, 0 warnings\n"));
}

#[test]
fn fifty_thousand_patterns_are_one_error() {
    let patterns: Vec<String> = (0..50_000).map(|i| format!("\"t{i}\"")).collect();
    let list = patterns.join(", ");
    let text = format!(
        "[[rule]]\nname = \"x\"\non = [{list}]\ncancel-on = [{list}]\n[[rule.step]]\ndo = \"redis\"\nlist = \"l\"\npush = \"p\"\n"
    );
    let (code, _, stderr) = check_rules(&[("a.toml", text)], false);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.matches("rulec::too-many-patterns").count(),
        2,
        "{stderr}"
    );
    assert!(stderr.contains("`on` lists 50000 patterns; at most 256 are allowed"));
    // At the limit, a rule is fine.
    let list: Vec<String> = (0..256).map(|i| format!("\"t{i}\"")).collect();
    let text = rule("y", "").replace("on = [\"a\"]", &format!("on = [{}]", list.join(",")));
    let (code, _, stderr) = check_rules(&[("b.toml", text)], false);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_state_hash_named_like_an_event_channel_is_an_error() {
    let text = rule(
        "x",
        "when = 'state(\"ev:alarm.triggered\", \"x\") == \"1\"'",
    );
    let (code, _, stderr) = check_rules(&[("a.toml", text)], false);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("rulec::when::state-channel"), "{stderr}");
    assert!(
        stderr.contains("the state hash `ev:alarm.triggered` is named like an event channel"),
        "{stderr}"
    );
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success());
}

/// Fixture rules built into `dir/rules.bundle`.
fn build_fixture_bundle(dir: &Path) {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/rules");
    let out = rulec(
        dir,
        &["build", rules.to_str().unwrap(), "-o", "rules.bundle"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn fifos_and_devices_as_inputs_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    mkfifo(&path.join("fifo"));
    build_fixture_bundle(path);
    std::fs::write(path.join("t.toml"), "").unwrap();
    // No writer ever opens the FIFO: each of these would hang on it.
    let cases: &[&[&str]] = &[
        &["dump", "fifo"],
        &["dump", "/dev/zero"],
        &["simulate", "fifo", "--timeline", "t.toml"],
        &["simulate", "rules.bundle", "--timeline", "fifo"],
        &["simulate", "rules.bundle", "--timeline", "/dev/zero"],
        &[
            "simulate",
            "rules.bundle",
            "--timeline",
            "t.toml",
            "--bundle-after-restart",
            "fifo",
        ],
    ];
    for args in cases {
        let out = rulec(path, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("not a regular file"), "{args:?}: {stderr}");
    }
    // A `*.toml` entry of a rules directory that is a FIFO.
    std::fs::create_dir(path.join("rules")).unwrap();
    mkfifo(&path.join("rules/a.toml"));
    let out = rulec(path, &["check", "rules"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("rule file rules/a.toml is a FIFO (named pipe), not a regular file"),
        "{stderr}"
    );
}

#[test]
fn a_rule_file_name_that_is_not_utf8_is_rejected() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    // Two names that would both read `a\u{FFFD}.toml` once made lossy.
    for (i, name) in [&b"a\xff.toml"[..], &b"a\xfe.toml"[..]].iter().enumerate() {
        let path = rules.join(std::ffi::OsStr::from_bytes(name));
        std::fs::write(path, rule(&format!("r{i}"), "")).unwrap();
    }
    std::fs::write(rules.join("b.toml"), rule("b", "")).unwrap();
    let out = rulec(
        dir.path(),
        &["build", "rules", "-o", "out.bundle", "--partial"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr
            .matches("the file name is not valid UTF-8; the whole file is ignored")
            .count(),
        2,
        "{stderr}"
    );
    assert!(stderr.contains("3 files, 1 rule: 2 errors"), "{stderr}");
    let bundle = rulecore_io::bundle_file::read(&dir.path().join("out.bundle")).unwrap();
    let names: Vec<_> = bundle.payload.rules.iter().map(|r| &*r.source).collect();
    assert_eq!(names, ["b.toml"]);
}

#[test]
fn streamed_dumps_are_the_rendered_ones() {
    let dir = tempfile::tempdir().unwrap();
    build_fixture_bundle(dir.path());
    let bundle = rulecore_io::bundle_file::read(&dir.path().join("rules.bundle")).unwrap();
    let out = rulec(dir.path(), &["dump", "rules.bundle"]);
    assert_eq!(text(&out.stdout), rulec::dump::render_text(&bundle));
    let out = rulec(dir.path(), &["dump", "rules.bundle", "--format", "json"]);
    let pretty = serde_json::to_string_pretty(&rulec::dump::render_json(&bundle)).unwrap();
    assert_eq!(text(&out.stdout), format!("{pretty}\n"));
}

#[test]
fn a_forged_endless_repeat_is_refused_by_dump_and_simulate() {
    let dir = tempfile::tempdir().unwrap();
    build_fixture_bundle(dir.path());
    let mut bundle = rulecore_io::bundle_file::read(&dir.path().join("rules.bundle")).unwrap();
    bundle.payload.rules[0].options_mut().repeat = rulecore::bundle::Repeat {
        count: u32::MAX,
        every_ns: 0,
        period_ns: 0,
    };
    // Re-checksummed, as a forger would.
    let bytes = rulecore::codec::encode(&bundle.payload).unwrap();
    std::fs::write(dir.path().join("forged.bundle"), bytes).unwrap();
    std::fs::write(dir.path().join("t.toml"), "").unwrap();
    for args in [
        &["dump", "forged.bundle"][..],
        &["simulate", "forged.bundle", "--timeline", "t.toml"],
    ] {
        let out = rulec(dir.path(), args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("`repeat` has 4294967295 passes and no gap between them"),
            "{stderr}"
        );
    }
}

#[test]
fn build_prints_the_memory_estimate_and_warns_over_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("rules")).unwrap();
    std::fs::write(dir.path().join("rules/small.toml"), rule("x", "")).unwrap();
    let out = rulec(dir.path(), &["build", "rules", "-o", "small.bundle"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("memory: about 1 KiB once loaded in ruled (budget 16 MiB)"),
        "{stderr}"
    );
    assert!(!stderr.contains("warning:"), "{stderr}");
    // Each rule pushes its own value on its own topic (one topic would be
    // a conflict of every pair, docs/safety-checks.md#conflicts), so no
    // two share a step: about 420
    // bytes per rule once loaded (docs/engine.md#the-48-mb-box), and
    // 60,000 are over 16 MiB. Rules that share one step cost less than
    // 300 bytes and would need about twice as many.
    let body: String = (0..60_000)
        .map(|i| {
            format!(
                "[[rule]]\nname = \"r{i}\"\non = [\"a{i}\"]\n[[rule.step]]\ndo = \"redis\"\nlist = \"l\"\npush = \"p{i}\"\n"
            )
        })
        .collect();
    std::fs::write(dir.path().join("rules/big.toml"), body).unwrap();
    let out = rulec(
        dir.path(),
        &["build", "rules", "-o", "big.bundle", "--format", "json"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // A diagnostic with its code, as a JSON line before the bundle's.
    let stdout = text(&out.stdout);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0]["code"], "rulec::memory-budget", "{stdout}");
    assert_eq!(lines[0]["severity"], "warning", "{stdout}");
    assert!(
        lines[1]["memory_estimate"].as_u64().unwrap() > 16 << 20,
        "{stdout}"
    );
    assert!(dir.path().join("big.bundle").exists());
    // With --deny-warnings: an error, and no bundle.
    let out = rulec(
        dir.path(),
        &["build", "rules", "-o", "denied.bundle", "--deny-warnings"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("rulec::memory-budget\n\n  x the bundle needs about"),
        "{stderr}"
    );
    assert!(
        stderr.contains("over the memory budget: not written (--deny-warnings)"),
        "{stderr}"
    );
    assert!(!dir.path().join("denied.bundle").exists());
}
