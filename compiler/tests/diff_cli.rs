//! `rulec diff` as CI runs it before a deploy (docs/rulec.md#rulec-diff):
//! two builds of fixtures/rules, one step's `after` changed.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod support;

use support::{root, rulec};

/// A scratch dir with `old.bundle` (fixtures/rules) and `new.bundle`
/// (the same with hazards-on-alarm's "off" step after 45 s, not 30 s), and
/// the `new/` rules directory.
fn two_builds() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new");
    std::fs::create_dir(&new).unwrap();
    for entry in std::fs::read_dir(root().join("fixtures/rules")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.replace("after = \"30s\"", "after = \"45s\"");
            std::fs::write(new.join(path.file_name().unwrap()), text).unwrap();
        }
    }
    let rules = root().join("fixtures/rules");
    let (code, _, err) = rulec(
        dir.path(),
        &["build", rules.to_str().unwrap(), "-o", "old.bundle"],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = rulec(dir.path(), &["build", "new", "-o", "new.bundle"]);
    assert_eq!(code, 0, "{err}");
    dir
}

#[test]
fn a_changed_after_names_the_step_dropped_on_deploy() {
    let dir = two_builds();
    let (code, out, err) = rulec(dir.path(), &["diff", "old.bundle", "new.bundle"]);
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!("after-changed", out);
    let (code, json, _) = rulec(
        dir.path(),
        &["diff", "old.bundle", "new.bundle", "--format", "json"],
    );
    assert_eq!(code, 0);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    insta::assert_snapshot!(
        "after-changed-json",
        serde_json::to_string_pretty(&value).unwrap()
    );
    // A rules directory compares the same as its bundle.
    let (_, from_dir, _) = rulec(dir.path(), &["diff", "old.bundle", "new"]);
    assert_eq!(from_dir, out);
}

#[test]
fn deny_drops_is_the_ci_gate() {
    let dir = two_builds();
    let (code, _, err) = rulec(
        dir.path(),
        &["diff", "old.bundle", "new.bundle", "--deny-drops"],
    );
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "error: the deploy would drop 1 waiting step (--deny-drops)\n"
    );
    // The same rules: nothing changed, nothing dropped.
    let (code, out, _) = rulec(
        dir.path(),
        &["diff", "old.bundle", "old.bundle", "--deny-drops"],
    );
    assert_eq!(code, 0);
    assert_eq!(out, "dropped on deploy: none\n");
}

/// `HGETALL` as JSON: only the records that would go are listed.
#[test]
fn pending_lists_exactly_the_records_that_would_go() {
    let dir = two_builds();
    let bundle = rulecore::codec::read(&dir.path().join("old.bundle")).unwrap();
    let fingerprint = |rule: &str, step: usize| {
        let rule = bundle
            .payload
            .rules
            .iter()
            .find(|r| *r.name == *rule)
            .unwrap();
        rule.steps[step].fingerprint.to_string()
    };
    let record = |id: &str, rule: &str, step: u32| {
        serde_json::json!({
            "id": id, "rule": rule, "source": "x.toml", "step": step, "iter": 0,
            "fire-at": 1_704_067_230_000_i64,
            "fingerprint": fingerprint(rule, step as usize),
            "event": {"topic": "t", "data": {}},
        })
        .to_string()
    };
    let pending = serde_json::json!({
        "hazards-on-alarm#17-3": record("hazards-on-alarm#17-3", "hazards-on-alarm", 1),
        "parked-brake-blink#17-4": record("parked-brake-blink#17-4", "parked-brake-blink", 1),
    });
    std::fs::write(dir.path().join("pending.json"), pending.to_string()).unwrap();
    let (code, out, err) = rulec(
        dir.path(),
        &[
            "diff",
            "old.bundle",
            "new.bundle",
            "--pending",
            "pending.json",
            "--deny-drops",
        ],
    );
    assert_eq!(code, 1, "{err}");
    insta::assert_snapshot!("after-changed-pending", out);
    assert!(!out.contains("parked-brake-blink#17-4"));
    // Only the unchanged rule's record: nothing goes.
    let only_kept = serde_json::json!({
        "parked-brake-blink#17-4": record("parked-brake-blink#17-4", "parked-brake-blink", 1),
    });
    std::fs::write(dir.path().join("kept.json"), only_kept.to_string()).unwrap();
    let (code, _, err) = rulec(
        dir.path(),
        &[
            "diff",
            "old.bundle",
            "new.bundle",
            "--pending",
            "kept.json",
            "--deny-drops",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // Not a record: named.
    std::fs::write(dir.path().join("bad.json"), r#"{"x": "{}"}"#).unwrap();
    let (code, _, err) = rulec(
        dir.path(),
        &["diff", "old.bundle", "new.bundle", "--pending", "bad.json"],
    );
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: bad.json: record x is not a pending record"),
        "{err}"
    );
}

/// `--pending` is read like every other input file
/// (docs/rulec.md#input-files): a file over 16 MiB is refused unread, a
/// FIFO at once; both are usage errors.
#[test]
fn a_pending_file_is_read_only_up_to_its_bound() {
    let dir = two_builds();
    let big = std::fs::File::create(dir.path().join("big.json")).unwrap();
    // Sparse: 17 MiB of NUL bytes, valid UTF-8 to a whole-file read.
    big.set_len(17 << 20).unwrap();
    let (code, _, err) = rulec(
        dir.path(),
        &["diff", "old.bundle", "new.bundle", "--pending", "big.json"],
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(err, "error: big.json is larger than 16777216 bytes\n");
    let status = std::process::Command::new("mkfifo")
        .arg(dir.path().join("fifo"))
        .status()
        .unwrap();
    assert!(status.success());
    let (code, _, err) = rulec(
        dir.path(),
        &["diff", "old.bundle", "new.bundle", "--pending", "fifo"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("fifo is a FIFO (named pipe), not a regular file"),
        "{err}"
    );
}

#[test]
fn help_has_an_example() {
    let (_, help, _) = rulec(&root(), &["diff", "--help"]);
    assert!(
        help.contains("rulec diff old.bundle new.bundle --deny-drops"),
        "{help}"
    );
}

/// A changed finally step (docs/rules.md#finally) is a changed key of its
/// rule, named `finally N`, never a step's, and drops no waiting step.
#[test]
fn a_changed_finally_step_is_keyed_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new");
    std::fs::create_dir(&new).unwrap();
    let finally = "[[rule.finally]]\ndo = \"redis\"\nlist = \"scooter:blinker\"\npush = \"off\"";
    let alarm = std::fs::read_to_string(root().join("fixtures/rules/10-alarm.toml")).unwrap();
    assert!(alarm.contains(finally), "the fixture's finally step");
    let changed = alarm.replace(finally, &finally.replace("\"off\"", "\"left\""));
    std::fs::write(new.join("10-alarm.toml"), changed).unwrap();
    let old = dir.path().join("old");
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join("10-alarm.toml"), alarm).unwrap();
    let (code, json, err) = rulec(
        dir.path(),
        &[
            "diff",
            "old",
            "new",
            "--format",
            "json",
            "--profile",
            "none",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let keys: Vec<&str> = value["changed"][0]["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["finally 0 action"], "{value}");
    assert_eq!(value["dropped"], serde_json::json!([]));
}

/// a changed `when` reads as its source text (as `rulec dump`
/// reconstructs it from the bundle), its bytecode only with `--bytecode`.
#[test]
fn a_changed_when_shows_its_source_text() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new");
    std::fs::create_dir(&new).unwrap();
    for entry in std::fs::read_dir(root().join("fixtures/rules")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.replace(
                "name = \"low-battery-warning\"\non = [\"battery.charge.changed\"]\nwhen = 'int(to) < 15",
                "name = \"low-battery-warning\"\non = [\"battery.charge.changed\"]\nwhen = 'int(to) < 10",
            );
            std::fs::write(new.join(path.file_name().unwrap()), text).unwrap();
        }
    }
    let rules = root().join("fixtures/rules");
    let old = rules.to_str().unwrap();
    let (code, out, err) = rulec(dir.path(), &["diff", old, "new"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "changed  low-battery-warning\n  when: int(to) < 15 && state(\"vehicle\", \"state\") == \"ready-to-drive\" -> int(to) < 10 && state(\"vehicle\", \"state\") == \"ready-to-drive\"\ndropped on deploy: none\n"
    );
    let (code, json, _) = rulec(dir.path(), &["diff", old, "new", "--format", "json"]);
    assert_eq!(code, 0);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        value["changed"][0]["keys"][0]["new"],
        "int(to) < 10 && state(\"vehicle\", \"state\") == \"ready-to-drive\""
    );
    let (code, out, err) = rulec(dir.path(), &["diff", old, "new", "--bytecode"]);
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!("when-changed-bytecode", out);
    assert!(out.contains("const 10"), "{out}");
}
