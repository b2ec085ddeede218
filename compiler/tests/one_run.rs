//! One run tells all (docs/rules.md#errors-and-warnings): the catalogue
//! and profile checks run on a rule with other errors too, a diagnostic
//! that rests on a guessed spelling is not repeated, and `rulec check FILE`
//! gives exactly what checking its directory gives for that file.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::Path;
use std::process::Command;

fn rulec(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_rulec"))
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

const TOPICS: &str = r#"[[topic]]
name = "battery.charge.changed"
from = true
to = true
data = { charge = "int", slot = "int" }
"#;

/// A `when` that does not parse, a `cancel-on` topic nobody declares and a
/// step reading an undeclared `data` key, all in one rule.
const THREE_PROBLEMS: &str = r#"[[rule]]
name = "low-battery"
on = ["battery.charge.changed"]
cancel-on = ["alarm.trigered"]
when = "int(to) < 20 &&"

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"
when = "data.chrage < 20"
"#;

#[test]
fn a_syntax_error_an_unknown_topic_and_an_unknown_data_key_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("00-topics.toml"), TOPICS).unwrap();
    std::fs::write(dir.path().join("battery.toml"), THREE_PROBLEMS).unwrap();
    let (code, out, err) = rulec(dir.path(), &["check", "."]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(out, "");
    assert!(err.contains("rulec::when::syntax"), "{err}");
    // One edit from a topic the profile derives: an error.
    assert!(err.contains("rulec::near-miss-topic"), "{err}");
    assert!(err.contains("rulec::unknown-data-key"), "{err}");
    insta::assert_snapshot!("three_problems_in_one_run", err);
}

#[test]
fn a_guessed_spelling_is_one_error() {
    let dir = tempfile::tempdir().unwrap();
    let rule = r#"[[rule]]
name = "pulses"
on = ["alarm.triggered"]
repeat = { conut = 3 }

[[rule.step]]
do = "redis"
list = "scooter:horn"
push = "on"
"#;
    std::fs::write(dir.path().join("horn.toml"), rule).unwrap();
    let (code, _, err) = rulec(dir.path(), &["check", "."]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("unknown key `conut`"), "{err}");
    assert!(!err.contains("needs `every`"), "{err}");
    // The file is rejected, so none of its rules is read.
    assert!(
        err.ends_with("1 file, 0 rules: 1 error, 0 warnings\n"),
        "{err}"
    );
}

/// `rulec check --format json` lines of `file` (named as the directory
/// check names it), without the summary.
fn json_of(dir: &Path, target: &str, file: &str) -> (Vec<serde_json::Value>, i32) {
    let (code, out, _) = rulec(dir, &["check", target, "--format", "json"]);
    let lines = out
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|line| line["file"] == file)
        .collect();
    (lines, code)
}

#[test]
fn one_file_gets_the_answer_of_its_directory() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let fixtures = root.join("fixtures/rules");
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&fixtures).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "toml") {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    // A typo'd file: an undeclared data key and topic, found only with
    // the other files' catalogue.
    std::fs::write(
        dir.path().join("50-typo.toml"),
        r#"[[rule]]
name = "typo"
on = ["battery.charge.changed"]
when = "data.chrage < 20"

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"
"#,
    )
    .unwrap();
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in &names {
        let (whole, _) = json_of(dir.path(), ".", name);
        let (alone, code) = json_of(dir.path(), name, name);
        assert_eq!(alone, whole, "{name}");
        let errors = whole.iter().filter(|d| d["severity"] == "error").count();
        assert_eq!(code, i32::from(errors > 0), "{name}");
    }
    let (typo, _) = json_of(dir.path(), "50-typo.toml", "50-typo.toml");
    assert!(
        typo.iter().any(|d| d["code"] == "rulec::unknown-data-key"),
        "{typo:?}"
    );
    let (_, _, err) = rulec(dir.path(), &["check", "50-typo.toml"]);
    assert!(
        err.ends_with("1 file, 1 rule: 1 error, 0 warnings\n"),
        "{err}"
    );
}
