//! Profile diagnostics end to end (docs/sources.md, docs/diagnostics.md#profiles):
//! `rulec check --profile DIR` on every broken profile under
//! fixtures/profiles/, text and JSON snapshotted together. Each case's
//! `profile.toml` names the code it is about on its first line
//! (`# expect: rulec::profile::value`), and every case exits 1.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::{Path, PathBuf};
use std::process::Command;

fn profiles() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/profiles")
}

/// `rulec check no-rules --profile CASE ARGS`, run in fixtures/profiles so
/// that files are named `CASE/x.toml`; the built-in's files are named
/// `profiles/librescoot/...` wherever it runs.
fn check(case: &str, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_rulec"))
        .current_dir(profiles())
        .args(["check", "no-rules", "--profile", case])
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn every_broken_profile_is_reported() {
    let mut cases: Vec<String> = std::fs::read_dir(profiles())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    cases.sort();
    assert!(cases.len() >= 6, "{cases:?}");
    for case in cases {
        let first = std::fs::read_to_string(profiles().join(&case).join("profile.toml")).unwrap();
        let expect = first
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{case}: no `# expect:` line"))
            .to_string();
        let (code, stdout, stderr) = check(&case, &[]);
        assert_eq!(code, 1, "{case}: {stderr}");
        assert_eq!(stdout, "", "{case}");
        assert!(stderr.contains(&expect), "{case}: {expect} not in {stderr}");
        let (json_code, json, _) = check(&case, &["--format", "json"]);
        assert_eq!(json_code, 1, "{case}");
        for line in json.lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(value["code"].as_str().is_some(), "{case}: {line}");
        }
        insta::assert_snapshot!(
            format!("profile__{case}"),
            format!("exit {code}\n--- stderr\n{stderr}--- json\n{json}")
        );
    }
}

#[test]
fn the_builtin_profile_and_none_check_clean() {
    for profile in ["librescoot", "none"] {
        let (code, stdout, stderr) = check(profile, &[]);
        assert_eq!(code, 0, "{profile}: {stderr}");
        assert_eq!(stdout, "");
        assert_eq!(
            stderr,
            "note: no-rules does not exist: no rules\n0 files, 0 rules: 0 errors, 0 warnings\n"
        );
    }
}

#[test]
fn a_missing_profile_directory_is_a_usage_error() {
    let (code, _, stderr) = check("no-such-profile", &[]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("error: cannot read profile directory no-such-profile:"),
        "{stderr}"
    );
}
