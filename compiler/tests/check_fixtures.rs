//! `rulec check` end to end: the real binary on fixtures/rules (must be
//! clean) and on every case in fixtures/invalid (docs/rules.md, docs/when-language.md, docs/rulec.md).
//!
//! Each invalid case is a `*.toml` file (copied alone into a temp directory)
//! or a directory of files. Its first line names the diagnostic code it is
//! about: `# expect: rulec::duration`. Cases named `warn-*` must produce
//! warnings only and exit 0; every other case must exit 1. Text and JSON
//! output of every case are snapshotted together, and the JSON is checked
//! against the text (every diagnostic's `file:line:column` appears there).
//!
//! `rulec check` runs with its default, the built-in Librescoot profile,
//! so every case is also held against the bus (a `# profile: librescoot`
//! line marks the cases about those checks,
//! docs/rules.md#checks-against-the-profile).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

fn rulec(args: &[&str]) -> Output {
    rulec_in(Path::new("."), args)
}

/// `rulec ARGS` run in `cwd`.
fn rulec_in(cwd: &Path, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_rulec"))
        .current_dir(cwd)
        .args(args)
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    Output {
        code: output.status.code().unwrap(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// Clean but for one warning, on purpose: the handlebar auto-lock cannot
/// see the silently written speed, so nothing proves the built-in guard
/// `hardware-parked` holds at its lock; the guard reads the speed at the
/// action (docs/safety.md#the-example).
#[test]
fn the_example_rules_check_clean_but_for_the_guarded_example() {
    let dir = fixtures().join("rules");
    let out = rulec(&["check", dir.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr
            .ends_with("6 files, 14 rules: 0 errors, 1 warning\n"),
        "{}",
        out.stderr
    );
    let json = rulec(&["check", dir.to_str().unwrap(), "--format", "json"]);
    assert_eq!(json.code, 0);
    let warnings: Vec<serde_json::Value> = json
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|line: &serde_json::Value| line.get("code").is_some())
        .collect();
    assert_eq!(warnings.len(), 1, "{}", json.stdout);
    assert_eq!(warnings[0]["code"], "rulec::guarded");
    assert_eq!(warnings[0]["severity"], "warning");
    assert_eq!(warnings[0]["rule"], "handlebar-auto-lock");
    assert_eq!(warnings[0]["step"], 1);
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("guard `hardware-parked` would refuse this step"),
        "{}",
        json.stdout
    );
}

#[test]
fn the_example_rules_survive_validation() {
    let report = rulec::session::Session::new(None)
        .check(&fixtures().join("rules"))
        .unwrap();
    let names: Vec<(&str, &str, bool)> = report
        .rules
        .iter()
        .map(|rule| (rule.source.as_str(), rule.name.as_str(), rule.enabled))
        .collect();
    insta::assert_debug_snapshot!(names);
}

/// The expected codes named on `# expect:` lines of a case's files.
fn expected_codes(files: &[PathBuf]) -> Vec<String> {
    let mut codes = Vec::new();
    for file in files {
        let bytes = std::fs::read(file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# expect:") {
                codes.extend(rest.split(',').map(|code| code.trim().to_string()));
            }
        }
    }
    codes
}

/// Runs one case: returns (snapshot text, exit code, parsed JSON lines).
fn run_case(dir: &Path) -> (String, i32, Vec<Value>) {
    // Run inside the case's directory, so that diagnostics name the files
    // as they are (docs/rulec.md#file-names), not by a temp path.
    let text = rulec_in(dir, &["check", "."]);
    let json = rulec_in(dir, &["check", ".", "--format", "json"]);
    assert_eq!(text.code, json.code, "text and json exit codes differ");
    assert_eq!(text.stdout, "", "text mode writes nothing to stdout");
    let summary = text.stderr.lines().last().unwrap_or("");
    assert_eq!(
        json.stderr.trim_end(),
        summary,
        "json mode prints only the summary on stderr"
    );
    let values: Vec<Value> = json
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let snapshot = format!(
        "exit: {}\n--- stderr ---\n{}--- stdout (--format json) ---\n{}",
        text.code, text.stderr, json.stdout
    );
    (snapshot, text.code, values)
}

fn check_json(case: &str, values: &[Value], text_output: &str, files: &[PathBuf]) {
    for value in values {
        for key in [
            "file", "rule", "step", "severity", "code", "message", "label", "help", "span", "line",
            "column", "related",
        ] {
            assert!(
                value.get(key).is_some(),
                "{case}: `{key}` missing in {value}"
            );
        }
        let code = value["code"].as_str().unwrap();
        assert!(code.starts_with("rulec::"), "{case}: code {code}");
        assert!(text_output.contains(code), "{case}: {code} not in text");
        let file = value["file"].as_str().unwrap();
        assert!(
            files.iter().any(|path| path.ends_with(file)),
            "{case}: file {file} is not one of the case's files"
        );
        if value["span"].is_null() {
            continue;
        }
        let offset = value["span"]["offset"].as_u64().unwrap() as usize;
        let length = value["span"]["length"].as_u64().unwrap() as usize;
        let source = std::fs::read(files.iter().find(|p| p.ends_with(file)).unwrap()).unwrap();
        assert!(offset + length <= source.len(), "{case}: span past the end");
        let position = format!(
            "{file}:{}:{}",
            value["line"].as_u64().unwrap(),
            value["column"].as_u64().unwrap()
        );
        assert!(
            text_output.contains(&position),
            "{case}: {position} not in the text output"
        );
    }
}

#[test]
fn every_invalid_case() {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(fixtures().join("invalid"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    assert!(entries.len() >= 40, "only {} cases", entries.len());
    for path in entries {
        let case = path.file_stem().unwrap().to_str().unwrap().to_string();
        let temp = tempfile::tempdir().unwrap();
        let (dir, files) = if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&path)
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .collect();
            files.sort();
            (path.clone(), files)
        } else {
            let copy = temp.path().join(path.file_name().unwrap());
            std::fs::copy(&path, &copy).unwrap();
            (temp.path().to_path_buf(), vec![copy])
        };
        let (snapshot, code, values) = run_case(&dir);
        insta::assert_snapshot!(format!("invalid__{case}"), snapshot);

        let expected = expected_codes(&files);
        assert!(!expected.is_empty(), "{case}: no `# expect:` line");
        let codes: Vec<&str> = values.iter().map(|v| v["code"].as_str().unwrap()).collect();
        for code in &expected {
            assert!(
                codes.contains(&code.as_str()),
                "{case}: expected {code}, got {codes:?}"
            );
        }
        if case.starts_with("warn-") {
            assert_eq!(code, 0, "{case}: a warning case must exit 0");
            assert!(values.iter().all(|v| v["severity"] == "warning"), "{case}");
        } else {
            assert_eq!(code, 1, "{case}: an error case must exit 1");
            assert!(values.iter().any(|v| v["severity"] == "error"), "{case}");
        }
        check_json(&case, &values, &snapshot, &files);
    }
}

#[test]
fn deny_warnings_fails_on_warnings() {
    let temp = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixtures().join("invalid/warn-pattern-literal-star.toml"),
        temp.path().join("rules.toml"),
    )
    .unwrap();
    let dir = temp.path().to_str().unwrap();
    assert_eq!(rulec(&["check", dir]).code, 0);
    let denied = rulec(&["check", dir, "--deny-warnings"]);
    assert_eq!(denied.code, 1);
    assert!(
        denied
            .stderr
            .ends_with("1 file, 1 rule: 2 errors (2 denied warnings), 0 warnings\n"),
        "{}",
        denied.stderr
    );
    // docs/rules.md#errors-and-warnings: denied warnings are errors, in text and in JSON.
    assert!(denied.stderr.contains("  x rule `"), "{}", denied.stderr);
    assert!(!denied.stderr.contains("  ! rule `"), "{}", denied.stderr);
    assert!(denied.stderr.contains("made an error by --deny-warnings"));
    let json = rulec(&["check", dir, "--deny-warnings", "--format", "json"]);
    assert_eq!(json.code, 1);
    // The pattern's own warning, and (held against the profile) that it
    // matches no known topic: both errors.
    let values: Vec<Value> = json
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(
        values.iter().all(|v| v["severity"] == "error"),
        "{values:?}"
    );
    assert_eq!(values[0]["code"], "rulec::pattern-literal-star");
    assert_eq!(values[1]["code"], "rulec::unknown-topic");
}

/// docs/rules.md: an unreadable `*.toml` entry is never skipped, and a
/// missing path that names a rule file is a typo, not an empty directory.
#[test]
#[cfg(unix)]
fn unreadable_and_missing_rule_files_exit_2() {
    let temp = tempfile::tempdir().unwrap();
    let rules = temp.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::copy(
        fixtures().join("rules/10-alarm.toml"),
        rules.join("good.toml"),
    )
    .unwrap();
    std::os::unix::fs::symlink("good.toml", rules.join("link.toml")).unwrap();
    let dir = rules.to_str().unwrap();
    // A link to a rule file is a rule file (its rules are read twice here,
    // so the names collide: that shows it was read).
    let out = rulec(&["check", dir]);
    assert!(
        out.stderr.contains("rulec::duplicate-name"),
        "{}",
        out.stderr
    );

    std::os::unix::fs::symlink("/nonexistent/bad.toml", rules.join("bad.toml")).unwrap();
    for command in ["check", "build"] {
        let output = temp.path().join("out.bundle");
        let out = rulec(
            &[command, dir, "-o", output.to_str().unwrap()]
                [..if command == "check" { 2 } else { 4 }],
        );
        assert_eq!(out.code, 2, "{command}: {}", out.stderr);
        assert!(
            out.stderr.contains("error: cannot read rule file") && out.stderr.contains("bad.toml"),
            "{command}: {}",
            out.stderr
        );
        assert!(!output.exists(), "{command} wrote a bundle");
    }
    // The dangling link named directly.
    let out = rulec(&["check", rules.join("bad.toml").to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("cannot read rule file"),
        "{}",
        out.stderr
    );

    // A mistyped file name.
    let typo = temp.path().join("rules/alarm.tmol.toml");
    let out = rulec(&["check", typo.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("error: no such rule file") && out.stderr.contains("alarm.tmol.toml"),
        "{}",
        out.stderr
    );
    // A missing directory is still no rules.
    let out = rulec(&["check", temp.path().join("nope").to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn hidden_files_in_a_directory_are_not_rule_files() {
    let temp = tempfile::tempdir().unwrap();
    let rules = temp.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    std::fs::copy(
        fixtures().join("rules/10-alarm.toml"),
        rules.join("10-alarm.toml"),
    )
    .unwrap();
    // What Emacs leaves while the file has unsaved changes: a dangling link.
    std::os::unix::fs::symlink("root@host.1234:1700000000", rules.join(".#10-alarm.toml")).unwrap();
    // What macOS leaves on a FAT or network volume: binary, not UTF-8.
    std::fs::write(rules.join("._10-alarm.toml"), b"\x00\x05\x16\x07\xff").unwrap();
    let out = rulec(&["check", rules.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .ends_with("1 file, 2 rules: 0 errors, 0 warnings\n"),
        "{}",
        out.stderr
    );
    // Named on its own, a hidden file is checked like any other.
    let out = rulec(&["check", rules.join("._10-alarm.toml").to_str().unwrap()]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("rulec::encoding"), "{}", out.stderr);
}

#[test]
fn a_rule_file_that_is_not_a_regular_file_is_refused_not_read() {
    let temp = tempfile::tempdir().unwrap();
    let rules = temp.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    // A device: `/dev/zero` would be read forever; `/dev/null` keeps this
    // test finite should the check ever go missing.
    std::os::unix::fs::symlink("/dev/null", rules.join("zero.toml")).unwrap();
    let out = rulec(&["check", rules.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("zero.toml is a character device, not a regular file"),
        "{}",
        out.stderr
    );
}

#[test]
fn dash_is_not_read_as_a_missing_directory() {
    for command in ["check", "build"] {
        let out = rulec(
            &[command, "-", "-o", "/nonexistent/x.bundle"]
                [..if command == "check" { 2 } else { 4 }],
        );
        assert_eq!(out.code, 2, "{command}: {}", out.stderr);
        assert!(
            out.stderr.contains("standard input"),
            "{command}: {}",
            out.stderr
        );
    }
}

#[test]
fn usage_and_io_errors_exit_2() {
    assert_eq!(rulec(&["check"]).code, 2);
    assert_eq!(rulec(&["check", ".", "--format", "yaml"]).code, 2);
    let out = rulec(&["check", "/dev/null"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("is neither a directory nor a rule file"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_single_file_is_checked_alone() {
    let file = fixtures().join("rules/10-alarm.toml");
    let out = rulec(&["check", file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .ends_with("1 file, 2 rules: 0 errors, 0 warnings\n"),
        "{}",
        out.stderr
    );
    let bad = fixtures().join("invalid/after-negative.toml");
    let out = rulec(&["check", bad.to_str().unwrap()]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("after-negative.toml"), "{}", out.stderr);
}

#[test]
fn missing_directory_is_no_rules() {
    let temp = tempfile::tempdir().unwrap();
    let missing = temp.path().join("nope");
    let out = rulec(&["check", missing.to_str().unwrap()]);
    assert_eq!(out.code, 0);
    assert!(out
        .stderr
        .ends_with("0 files, 0 rules: 0 errors, 0 warnings\n"));
    assert!(out.stderr.contains("does not exist"));
}

#[test]
fn only_toml_files_directly_inside_are_read_in_byte_order() {
    let temp = tempfile::tempdir().unwrap();
    let rule = |name: &str| {
        format!("[[rule]]\nname = \"{name}\"\non = [\"a\"]\n[[rule.step]]\ndo = \"redis\"\nlist = \"l\"\npush = \"p\"\n")
    };
    std::fs::write(temp.path().join("b.toml"), rule("from-b")).unwrap();
    std::fs::write(temp.path().join("B.toml"), rule("from-capital-b")).unwrap();
    std::fs::write(temp.path().join("a.toml"), rule("from-a")).unwrap();
    std::fs::write(temp.path().join("notes.txt"), "not a rule file").unwrap();
    std::fs::create_dir(temp.path().join("sub.toml")).unwrap();
    std::fs::create_dir(temp.path().join("nested")).unwrap();
    std::fs::write(temp.path().join("nested/c.toml"), rule("nested")).unwrap();
    let report = rulec::session::Session::new(None)
        .check(temp.path())
        .unwrap();
    let names: Vec<&str> = report.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["from-capital-b", "from-a", "from-b"]);
    assert_eq!(report.file_count, 3);
}

/// A renamed or deleted case must take its snapshot with it: a stale
/// snapshot would document a diagnostic nothing produces any more.
#[test]
fn every_invalid_snapshot_has_its_case() {
    let invalid = fixtures().join("invalid");
    let snapshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let mut stale = Vec::new();
    for entry in std::fs::read_dir(snapshots).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(case) = name
            .strip_prefix("check_fixtures__invalid__")
            .and_then(|rest| rest.strip_suffix(".snap"))
        else {
            continue;
        };
        if !invalid.join(case).is_dir() && !invalid.join(format!("{case}.toml")).is_file() {
            stale.push(name);
        }
    }
    assert!(stale.is_empty(), "snapshots without a case: {stale:?}");
}
