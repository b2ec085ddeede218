//! `rulec test` as a user and CI run it (docs/rulec.md#rulec-test): the
//! shipped tests pass, a wrong expectation fails with the mismatch shown
//! against the output, in text, JSON and JUnit XML.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod support;

use support::root;

use insta_cmd::get_cargo_bin;
use std::path::Path;
use std::process::Command;

/// `rulec test ARGS` from `dir`: exit code, stdout, stderr.
fn rulec_test(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let args: Vec<&str> = std::iter::once("test")
        .chain(args.iter().copied())
        .collect();
    support::rulec(dir, &args)
}

/// A copy of fixtures/rules (rules and tests) in a temp dir, with one more
/// test file `tests/NAME.toml`.
fn rules_with_test(name: &str, test: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir_all(rules.join("tests")).unwrap();
    for sub in ["", "tests"] {
        for entry in std::fs::read_dir(root().join("fixtures/rules").join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::copy(&path, rules.join(sub).join(path.file_name().unwrap())).unwrap();
            }
        }
    }
    std::fs::write(rules.join("tests").join(format!("{name}.toml")), test).unwrap();
    dir
}

const WRONG_OFF: &str = r#"
[[event]]
at = "0s"
topic = "alarm.triggered"

[[expect]]
rule = "hazards-on-alarm"
push = "both"
at = "0s"

[[expect]]
rule = "hazards-on-alarm"
push = "off"
at = "20s"
"#;

#[test]
fn the_shipped_tests_pass() {
    let (code, out, err) = rulec_test(&root(), &["fixtures/rules"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("pass  fixtures/rules/tests/hazards.toml (5 expectations)"),
        "{out}"
    );
    assert!(err.ends_with("15 passed, 0 failed\n"), "{err}");
}

#[test]
fn a_planted_wrong_expectation_fails_and_shows_the_mismatch() {
    let dir = rules_with_test("wrong", WRONG_OFF);
    let (code, out, err) = rulec_test(dir.path(), &["rules"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.ends_with("15 passed, 1 failed\n"), "{err}");
    let failure = &out[out.find("FAIL").unwrap()..];
    let failure = &failure[..failure.find("\npass").unwrap_or(failure.len())];
    insta::assert_snapshot!("wrong-off", failure);
    // The near miss, at 30 s, is marked.
    assert!(
        failure.contains("> ")
            && failure.contains("   30000 ms  action")
            && failure.contains("push=off"),
        "{failure}"
    );
}

#[test]
fn files_given_by_name_and_json() {
    let dir = rules_with_test("wrong", WRONG_OFF);
    let (code, out, _) = rulec_test(
        dir.path(),
        &[
            "rules/tests/wrong.toml",
            "rules/tests/hazards.toml",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 1);
    let results: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["file"], "rules/tests/wrong.toml");
    assert_eq!(results[0]["status"], "fail");
    assert_eq!(
        results[0]["expectation"],
        "[[expect]] #2: kind=action rule=hazards-on-alarm push=off at=20s"
    );
    assert_eq!(
        results[0]["problem"],
        "expected at least one matching line, found none"
    );
    let marked = results[0]["marked"].as_array().unwrap();
    let output = results[0]["output"].as_array().unwrap();
    assert_eq!(marked.len(), 1);
    let near = output[marked[0].as_u64().unwrap() as usize]
        .as_str()
        .unwrap();
    assert!(
        near.contains("30000 ms") && near.contains("push=off"),
        "{near}"
    );
    assert_eq!(results[1]["status"], "pass");
    assert_eq!(results[1]["expectations"], 5);
}

#[test]
fn junit_is_valid_xml_with_one_testcase_per_file() {
    let dir = rules_with_test("wrong", WRONG_OFF);
    let report = dir.path().join("report.xml");
    let (code, _, _) = rulec_test(dir.path(), &["rules", "--junit", "report.xml"]);
    assert_eq!(code, 1);
    let xml = std::fs::read_to_string(&report).unwrap();
    let document = roxmltree::Document::parse(&xml).unwrap();
    let suites = document.root_element();
    assert_eq!(suites.tag_name().name(), "testsuites");
    assert_eq!(suites.attribute("tests"), Some("16"));
    assert_eq!(suites.attribute("failures"), Some("1"));
    let cases: Vec<_> = suites
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 16);
    let failed: Vec<_> = cases
        .iter()
        .filter(|case| case.children().any(|c| c.has_tag_name("failure")))
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].attribute("name"), Some("rules/tests/wrong.toml"));
    let failure = failed[0]
        .children()
        .find(|c| c.has_tag_name("failure"))
        .unwrap();
    assert_eq!(
        failure.attribute("message"),
        Some("expected at least one matching line, found none")
    );
    assert!(failure.text().unwrap().contains("push=off at=20s"));
}

#[test]
fn expectations_with_counts_between_and_none() {
    let test = r#"
[[event]]
at = "0s"
topic = "alarm.triggered"
[[expect]]
rule = "hazards-on-alarm"
between = ["0s", "31s"]
count = 3
"#;
    let dir = rules_with_test("count", test);
    let (code, out, _) = rulec_test(dir.path(), &["rules/tests/count.toml"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("expected exactly 3 matching lines, found 2"),
        "{out}"
    );
    let test = "[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n\
                [[expect-none]]\nrule = \"hazards-on-alarm\"\npush = \"off\"\n";
    let dir = rules_with_test("none", test);
    let (code, out, _) = rulec_test(dir.path(), &["rules/tests/none.toml"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("expected no matching line, found 1"), "{out}");
    assert!(out.contains("  >    30000 ms  action"), "{out}");
}

#[test]
fn bad_expectations_are_errors_that_name_the_entry() {
    let cases = [
        (
            "[[expect]]\nrul = \"x\"\n",
            "[[expect]] #1: unknown key `rul` (did you mean `rule`?)",
        ),
        (
            "[[expect]]\nat = \"1s\"\nbetween = [\"0s\", \"2s\"]\n",
            "[[expect]] #1: give `at` or `between`, not both",
        ),
        (
            "[[expect-none]]\ncount = 1\n",
            "[[expect-none]] #1: `count` is for [[expect]]",
        ),
        (
            "[[expect]]\nbetween = [\"5s\", \"2s\"]\n",
            "[[expect]] #1: `between` ends before it starts",
        ),
        (
            "[[expect]]\nat = \"30\"\n",
            "`at` = \"30\" is not a duration",
        ),
    ];
    for (test, message) in cases {
        let dir = rules_with_test("bad", test);
        let (code, out, err) = rulec_test(dir.path(), &["rules/tests/bad.toml"]);
        assert_eq!(code, 1, "{out}");
        assert!(out.starts_with("ERROR rules/tests/bad.toml\n"), "{out}");
        // The problem is shown like a rule file's, at its line and column.
        assert!(err.contains(message), "{message}: {err}");
        assert!(err.contains("[rules/tests/bad.toml:"), "{err}");
    }
}

#[test]
fn no_tests_is_a_failure_and_a_missing_path_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("rules/tests")).unwrap();
    let (code, _, err) = rulec_test(dir.path(), &["rules"]);
    assert_eq!(code, 1);
    assert!(err.contains("no tests found"), "{err}");
    let (code, _, err) = rulec_test(dir.path(), &["nowhere"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no such test file or rules directory nowhere"),
        "{err}"
    );
}

#[test]
fn help_has_an_example() {
    let output = Command::new(get_cargo_bin("rulec"))
        .args(["test", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("rulec test fixtures/rules"), "{help}");
    assert!(help.contains("[[expect-none]]"), "{help}");
}

/// Rules that do not build: every test errs, and their diagnostics are
/// printed once, not once per test.
#[test]
fn rules_that_do_not_build_are_reported_once() {
    let dir = rules_with_test("wrong", WRONG_OFF);
    std::fs::write(
        dir.path().join("rules/90-bad.toml"),
        "[[rule]]\nname = \"bad\"\non = [\"x\"]\nwhen = 'speed > 5'\n[[rule.step]]\ndo = \"redis\"\nlist = \"l\"\npush = \"p\"\n",
    )
    .unwrap();
    let (code, out, err) = rulec_test(dir.path(), &["rules"]);
    assert_eq!(code, 1);
    assert_eq!(out.matches("ERROR").count(), 16, "{out}");
    assert!(out.contains("  the rules in rules do not build\n"), "{out}");
    assert_eq!(err.matches("rulec::when::unknown-name").count(), 1, "{err}");
}
