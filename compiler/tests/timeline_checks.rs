//! Timelines and test files checked like rule files (docs/simulation.md#checks):
//! every problem in one run at its `file:line:column`, topics nothing
//! knows warned with "did you mean", rule names and step numbers of
//! `[[fail]]`, `[[expect]]` and `[[expect-none]]` checked against the rules.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod support;

use support::{root, rulec};

/// Two key problems at once: both reported, each at its place.
#[test]
fn every_problem_of_a_timeline_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let timeline = dir.path().join("t.toml");
    std::fs::write(
        &timeline,
        "[[event]]\nat = \"10 sec\"\ntopic = \"alarm.triggered\"\n\n[[event]]\nat = \"1s\"\ntpoic = \"alarm.triggered\"\n\n[[restart]]\nat = \"2s\"\ndown = \"xx\"\n",
    )
    .unwrap();
    let rules = root().join("fixtures/rules");
    let (code, out, err) = rulec(
        dir.path(),
        &["simulate", rules.to_str().unwrap(), "--timeline", "t.toml"],
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(out, "");
    for place in ["[t.toml:2:6]", "[t.toml:7:1]", "[t.toml:11:8]"] {
        assert!(err.contains(place), "{place}: {err}");
    }
    // `tpoic` is one problem: the `topic` it misspells is not also missing.
    assert!(!err.contains("`topic` is missing"), "{err}");
}

/// The worst test: an `[[expect-none]]` that passes because the event's
/// topic is misspelt. And rules and steps that do not exist.
#[test]
fn topics_rules_and_steps_of_a_test_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir_all(rules.join("tests")).unwrap();
    for entry in std::fs::read_dir(root().join("fixtures/rules")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, rules.join(path.file_name().unwrap())).unwrap();
        }
    }
    let test = r#"[[event]]
at = "0s"
topic = "alarm.trigered"

[[fail]]
at = "0s"
rule = "hazards-on-alrm"

[[expect-none]]
rule = "hazards-on-alarm"
step = 5

[[expect-none]]
rule = "hazard-on-alarm"
"#;
    std::fs::write(rules.join("tests/typo.toml"), test).unwrap();
    let (code, out, err) = rulec(dir.path(), &["test", "rules/tests/typo.toml"]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.starts_with("ERROR rules/tests/typo.toml\n"), "{out}");
    insta::assert_snapshot!("test-file-names-checked", err);
    // The warning alone does not stop a run: `rulec simulate` warns and runs.
    std::fs::write(
        rules.join("tests/typo.toml"),
        "[[event]]\nat = \"0s\"\ntopic = \"alarm.trigered\"\n",
    )
    .unwrap();
    let (code, out, err) = rulec(
        dir.path(),
        &["simulate", "rules", "--timeline", "rules/tests/typo.toml"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("did you mean `alarm.triggered`?"), "{err}");
    assert!(err.contains("[rules/tests/typo.toml:3:9]"), "{err}");
    assert!(out.contains(" end "), "{out}");
}

/// Every fixture timeline and test is clean: no problem, no warning.
#[test]
fn the_fixture_timelines_and_tests_are_clean() {
    let root = root();
    let (code, out, err) = rulec(&root, &["test", "fixtures/rules"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let err = support::without_the_guarded_example(&err);
    assert!(!err.contains("rulec::"), "{err}");
    let mut timelines: Vec<_> = std::fs::read_dir(root.join("fixtures/timelines"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    timelines.sort();
    for timeline in timelines {
        let name = timeline.file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&timeline).unwrap();
        // Each names the rules it plays in its first lines, as a command.
        let rules = if text.contains("fixtures/rules-winter") {
            "fixtures/rules-winter"
        } else {
            "fixtures/rules"
        };
        let (_, _, err) = rulec(
            &root,
            &[
                "simulate",
                rules,
                "--timeline",
                &format!("fixtures/timelines/{name}"),
            ],
        );
        let err = if rules == "fixtures/rules" {
            support::without_the_guarded_example(&err)
        } else {
            err
        };
        assert!(!err.contains("rulec::"), "{name}: {err}");
    }
}

/// The note about a directory's skipped files is printed once per command,
/// however often its rules are loaded (here: the simulated rules, the rules
/// after the restart and two `[[reload]]`s, all one directory).
#[test]
fn the_skipped_files_note_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    for entry in std::fs::read_dir(root().join("fixtures/rules")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, rules.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(rules.join("notes.txt"), "not a rule file\n").unwrap();
    std::fs::write(
        dir.path().join("t.toml"),
        "[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n\n[[reload]]\nat = \"1s\"\nbundle = \"rules\"\n\n[[reload]]\nat = \"2s\"\nbundle = \"rules\"\n",
    )
    .unwrap();
    let (code, _, err) = rulec(
        dir.path(),
        &[
            "simulate",
            "rules",
            "--timeline",
            "t.toml",
            "--bundle-after-restart",
            "rules",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.matches("notes.txt is not read").count(), 1, "{err}");
}

/// a `[[state]]` write to a hash or field nothing watches (no
/// rule's `state()`, no input, no profile source or poll) is a no-op, so a
/// test could pass while checking nothing: a warning with "did you mean",
/// and the timeline still runs.
#[test]
fn state_writes_nothing_watches_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.toml"),
        r#"[[state]]
at = "0s"
hash = "vehicel"
field = "state"
value = "parked"

[[state]]
at = "1s"
hash = "vehicle"
fields = { sate = "parked", kickstand = "down" }

[[state]]
at = "2s"
hash = "vehicle"
field = "state"
value = "parked"

[[state]]
at = "3s"
hash = "heater"
clear = true
"#,
    )
    .unwrap();
    let rules = root().join("fixtures/rules");
    let (code, out, err) = rulec(
        dir.path(),
        &["simulate", rules.to_str().unwrap(), "--timeline", "t.toml"],
    );
    assert_eq!(code, 0, "a warning stops nothing: {err}");
    assert!(out.contains(" end "), "{out}");
    assert_eq!(err.matches("rulec::unwatched-state").count(), 3, "{err}");
    for (place, help) in [
        ("[t.toml:3:8]", "did you mean `vehicle`?"),
        ("[t.toml:10:12]", "did you mean `state`?"),
        ("[t.toml:20:8]", "no rule's `state()`"),
    ] {
        assert!(err.contains(place), "{place}: {err}");
        assert!(err.contains(help), "{help}: {err}");
    }
    for line in ["[t.toml:10:29]", "[t.toml:14:", "[t.toml:15:"] {
        assert!(!err.contains(line), "a watched write: {err}");
    }
}
