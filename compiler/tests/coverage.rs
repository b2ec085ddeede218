//! `rulec test --coverage` and `--coverage-out` (docs/rulec.md#coverage),
//! run as CI runs them: the real `rulec` over the example rules and their
//! tests, the lcov file snapshot-tested and rendered by the real `genhtml`
//! (Debian's `lcov` package; `.ci/run` installs it, else the test says
//! SKIPPED); and a rules directory written here whose tests reach what the
//! examples do not (a step's `when`, a value that fails, queued triggers,
//! an action Redis refused whole).

#![allow(clippy::unwrap_used, clippy::print_stderr)] // test code: SKIPPED is printed

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use support::root;

/// `rulec test ARGS` from `dir`: exit code, stdout, stderr.
fn rulec_test(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let args: Vec<&str> = std::iter::once("test")
        .chain(args.iter().copied())
        .collect();
    support::rulec(dir, &args)
}

/// The lcov file of `rulec test DIR --coverage-out FILE` run from `cwd`.
/// `rulec test --coverage --format json` of a rules directory holding
/// `rules` (as `rules.toml`) and `test` (as `tests/all.toml`), without a
/// profile: its coverage object, after the run passed.
fn coverage_of(rules: &str, test: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rules");
    std::fs::create_dir_all(root.join("tests")).unwrap();
    std::fs::write(root.join("rules.toml"), rules).unwrap();
    std::fs::write(root.join("tests/all.toml"), test).unwrap();
    let (code, stdout, stderr) = rulec_test(
        dir.path(),
        &[
            "rules",
            "--profile",
            "none",
            "--coverage",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

fn lcov_of(cwd: &Path, dir: &str, extra: &[&str]) -> String {
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("rules.info");
    let file_arg = file.to_str().unwrap();
    let mut args = vec![dir, "--coverage-out", file_arg];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = rulec_test(cwd, &args);
    assert_eq!(code, 0, "{stdout}{stderr}");
    std::fs::read_to_string(&file).unwrap()
}

/// The lcov format's own arithmetic, record by record: `LF` counts the
/// `DA` lines, `LH` those with a count, `BRF`/`BRH` and `FNF`/`FNH` the
/// same for branches and functions; every record has `TN:`, `SF:` and
/// ends with `end_of_record`; `DA` lines ascend.
fn check_lcov_arithmetic(lcov: &str) {
    let records: Vec<&str> = lcov.split_terminator("end_of_record\n").collect();
    assert!(!records.is_empty(), "{lcov}");
    assert!(lcov.ends_with("end_of_record\n"), "{lcov}");
    for record in records {
        let lines: Vec<&str> = record.lines().collect();
        assert!(lines[0].starts_with("TN:"), "{record}");
        assert!(lines[1].starts_with("SF:"), "{record}");
        let field = |key: &str| -> usize {
            let prefix = format!("{key}:");
            let found: Vec<&str> = lines
                .iter()
                .filter_map(|l| l.strip_prefix(&prefix))
                .collect();
            assert_eq!(found.len(), 1, "one {key} in {record}");
            found[0].parse().unwrap()
        };
        let data: Vec<(u32, u64)> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("DA:"))
            .map(|da| {
                let (line, count) = da.split_once(',').unwrap();
                (line.parse().unwrap(), count.parse().unwrap())
            })
            .collect();
        assert!(data.windows(2).all(|w| w[0].0 < w[1].0), "{record}");
        assert_eq!(field("LF"), data.len(), "{record}");
        assert_eq!(field("LH"), data.iter().filter(|d| d.1 > 0).count());
        let branches: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("BRDA:"))
            .map(|b| b.rsplit(',').next().unwrap())
            .collect();
        assert_eq!(field("BRF"), branches.len(), "{record}");
        let hit = branches.iter().filter(|t| **t != "-" && **t != "0");
        assert_eq!(field("BRH"), hit.count());
        let functions: Vec<u64> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("FNDA:"))
            .map(|f| f.split_once(',').unwrap().0.parse().unwrap())
            .collect();
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("FN:")).count(),
            functions.len()
        );
        assert_eq!(field("FNF"), functions.len(), "{record}");
        assert_eq!(field("FNH"), functions.iter().filter(|&&n| n > 0).count());
    }
}

#[test]
fn the_example_rules_lcov_is_exact() {
    let lcov = lcov_of(&root(), "fixtures/rules", &[]);
    check_lcov_arithmetic(&lcov);
    insta::assert_snapshot!("fixtures-rules-lcov", lcov);
}

/// genhtml, or `None` (after printing SKIPPED) when it is missing.
fn genhtml() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join("genhtml"))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        eprintln!(
            "SKIPPED: genhtml is not on PATH (`apt-get install lcov`; .ci/run installs it), \
             so the lcov file of rulec test --coverage-out was not rendered"
        );
    }
    found
}

#[test]
fn genhtml_renders_the_lcov_file_without_a_word() {
    let Some(genhtml) = genhtml() else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let info = out.path().join("rules.info");
    let (code, stdout, stderr) = rulec_test(
        &root(),
        &["fixtures/rules", "--coverage-out", info.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let html = out.path().join("html");
    // From the repository root, where the `SF:` paths lead to the rule
    // files genhtml reads and shows.
    let output = Command::new(genhtml)
        .current_dir(root())
        .args(["--branch-coverage", "--function-coverage", "-o"])
        .arg(&html)
        .arg(&info)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    for word in ["WARNING", "ERROR", "error", "warning"] {
        assert!(!said.contains(word), "genhtml said {word}:\n{said}");
    }
    // genhtml's summary counts every line, function and branch the file
    // has: what it read is what was written.
    let lcov = std::fs::read_to_string(&info).unwrap();
    let sum = |key: &str| -> u64 {
        lcov.lines()
            .filter_map(|line| line.strip_prefix(key))
            .map(|n| n.parse::<u64>().unwrap())
            .sum()
    };
    for (what, hit, found) in [
        ("lines", "LH:", "LF:"),
        ("functions", "FNH:", "FNF:"),
        ("branches", "BRH:", "BRF:"),
    ] {
        let counted = format!("({} of {} {what})", sum(hit), sum(found));
        assert!(said.contains(&counted), "{counted} in:\n{said}");
    }
    // The rule file's page shows its text (genhtml found it by `SF:`),
    // and its functions page the rules.
    let source = find(&html, "10-alarm.toml.gcov.html").unwrap_or_else(|| panic!("{said}"));
    let source = std::fs::read_to_string(source).unwrap();
    assert!(source.contains("alarm.triggered"), "{source}");
    let functions = find(&html, "10-alarm.toml.func.html").unwrap_or_else(|| panic!("{said}"));
    let functions = std::fs::read_to_string(functions).unwrap();
    assert!(functions.contains("hazards-on-alarm"), "{functions}");
}

/// The file named `name` under `dir` (genhtml drops the paths' common
/// prefix, so where it lands depends on the checkout).
fn find(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if let Some(found) = find(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

#[test]
fn the_table_shows_each_rule_and_what_was_not_covered() {
    let (code, stdout, stderr) = rulec_test(&root(), &["fixtures/rules", "--coverage"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let table = &stdout[stdout.find("coverage of").unwrap()..];
    insta::assert_snapshot!("fixtures-rules-table", table);
}

#[test]
fn json_has_one_coverage_object_after_the_tests() {
    let (code, stdout, stderr) = rulec_test(
        &root(),
        &["fixtures/rules", "--coverage", "--format", "json"],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let objects: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let (last, tests) = objects.split_last().unwrap();
    assert_eq!(tests.len(), 18);
    assert!(tests.iter().all(|t| t["status"] == "pass"), "{stdout}");
    assert_eq!(last["coverage"], "fixtures/rules", "{last}");
    assert_eq!(last["tests"], 18);
    let rule = |name: &str| -> Value {
        last["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rule"] == name)
            .unwrap_or_else(|| panic!("{name} in {last}"))
            .clone()
    };
    let hazards = rule("hazards-on-alarm");
    assert_eq!(hazards["file"], "fixtures/rules/10-alarm.toml");
    assert!(hazards["runs"].as_u64().unwrap() > 0, "{hazards}");
    assert_eq!(hazards["when"], Value::Null);
    assert!(hazards["finally"][0]["reached"].as_u64().unwrap() > 0);
    let winter = rule("winter-seat-heater");
    assert_eq!(winter["enabled"], false);
    assert_eq!(winter["runs"], 0);
    assert_eq!(winter["steps"][0]["reached"], 0);
}

const RULES: &str = r#"
[[rule]]
name = "step-when"
on = ["t.go"]

[[rule.step]]
do = "redis"
list = "l"
push = "a"

[[rule.step]]
when = 'to == "yes"'
do = "redis"
list = "l"
push = "b"

[[rule]]
name = "value-fails"
on = ["t.value"]
when = 'int(to) > 0'

[[rule.step]]
when = 'to != "0"'
do = "publish"
channel = "c"
message = "${100 / (int(to) - 5)}"

[[rule]]
name = "queued"
on = ["t.q"]
when = 'to == "x"'
concurrency = "queue"

[[rule.step]]
do = "exec"
command = "/bin/true"

[[rule.step]]
after = "10s"
durable = false
do = "exec"
command = "/bin/true"
"#;

const TEST: &str = r#"
# step-when: its step 1's `when` true once, false once; its first action
# is refused whole (Redis out of memory) and comes again after a back-off.
[[fail]]
at = "0s"
until = "500ms"
rule = "step-when"
step = 0
refused-whole = true

[[event]]
at = "0s"
topic = "t.go"
to = "yes"

[[event]]
at = "20s"
topic = "t.go"
to = "no"

# value-fails: `when` true (7), a value that fails (5: divides by zero),
# `when` false (0), an error (x).
[[event]]
at = "0s"
topic = "t.value"
to = "7"

[[event]]
at = "1s"
topic = "t.value"
to = "5"

[[event]]
at = "2s"
topic = "t.value"
to = "0"

[[event]]
at = "3s"
topic = "t.value"
to = "x"

# queued: one start, two queued triggers that start later, one false.
[[event]]
at = "0s"
topic = "t.q"
to = "x"

[[event]]
at = "1s"
topic = "t.q"
to = "x"

[[event]]
at = "2s"
topic = "t.q"
to = "x"

[[event]]
at = "3s"
topic = "t.q"
to = "y"

[[expect]]
rule = "step-when"
push = "b"
count = 1
"#;

#[test]
fn step_whens_failed_values_queued_triggers_and_refused_actions_count_once() {
    let coverage = coverage_of(RULES, TEST);
    let rules = coverage["rules"].as_array().unwrap();
    let [step_when, value_fails, queued] = rules.as_slice() else {
        panic!("{coverage}");
    };
    // Two runs; step 0 reached twice (its refused action counted once).
    assert_eq!(step_when["runs"], 2, "{step_when}");
    assert_eq!(step_when["on"]["matched"], 2, "{step_when}");
    assert_eq!(step_when["steps"][0]["reached"], 2, "{step_when}");
    assert_eq!(step_when["steps"][1]["reached"], 2, "{step_when}");
    assert_eq!(step_when["steps"][1]["when"]["true"], 1, "{step_when}");
    assert_eq!(step_when["steps"][1]["when"]["false"], 1, "{step_when}");
    assert_eq!(step_when["steps"][1]["when"]["line"], 12, "{step_when}");
    assert_eq!(step_when["steps"][1]["line"], 11, "{step_when}");
    // `when` true for 7 and 5, false for 0 and x (an error counts false);
    // the step's `when` was true both times, its value failed once.
    assert_eq!(value_fails["on"]["matched"], 4, "{value_fails}");
    assert_eq!(value_fails["runs"], 2, "{value_fails}");
    assert_eq!(value_fails["when"]["true"], 2, "{value_fails}");
    assert_eq!(value_fails["when"]["false"], 2, "{value_fails}");
    assert_eq!(value_fails["when"]["errors"], 1, "{value_fails}");
    assert_eq!(value_fails["steps"][0]["reached"], 2, "{value_fails}");
    assert_eq!(value_fails["steps"][0]["when"]["true"], 2, "{value_fails}");
    assert_eq!(value_fails["steps"][0]["when"]["false"], 0, "{value_fails}");
    // Three triggers true (two of them queued, then started), one false.
    assert_eq!(queued["on"]["matched"], 4, "{queued}");
    assert_eq!(queued["runs"], 3, "{queued}");
    assert_eq!(queued["when"]["true"], 3, "{queued}");
    assert_eq!(queued["when"]["false"], 1, "{queued}");
    assert_eq!(queued["steps"][1]["reached"], 3, "{queued}");
    assert_eq!(queued["line"], 28, "{queued}");
    assert_eq!(queued["on"]["line"], 30, "{queued}");
}

/// A hold judged again on a state change whose `when` fails to evaluate
/// ends the hold (`hold-ended`): an error of the rule's `when`, counted
/// in its `errors` as a `when-error` is.
#[test]
fn a_hold_ended_by_an_error_counts_as_one() {
    let coverage = coverage_of(
        r#"
[[rule]]
name = "held"
on = ["t.go"]
when = 'int(state("vehicle", "level")) > 0'
for = "5s"

[[rule.step]]
do = "redis"
list = "l"
push = "a"
"#,
        r#"
[[state]]
at = "0s"
hash = "vehicle"
fields = { level = "1" }

[[event]]
at = "1s"
topic = "t.go"

# Still true: the hold goes on.
[[state]]
at = "2s"
hash = "vehicle"
fields = { level = "2" }

# Fails to evaluate: the hold ends.
[[state]]
at = "3s"
hash = "vehicle"
fields = { level = "many" }

[[expect-none]]
rule = "held"
push = "a"
"#,
    );
    let held = &coverage["rules"][0];
    // True at the event and on the first change; false (an error) on the second.
    assert_eq!(held["when"]["true"], 2, "{held}");
    assert_eq!(held["when"]["false"], 1, "{held}");
    assert_eq!(held["when"]["errors"], 1, "{held}");
}
