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
    let bundle = rulecore_io::bundle_file::read(&dir.path().join("old.bundle")).unwrap();
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

// `rulec diff OLD NEW --replay FILE` (docs/rulec.md#replaying-a-timeline):
// both rule sets run over one timeline, their actions compared.

/// `rules` (fixtures/rules, each file passed through `edit` with its
/// name) copied into `dir/name`, and built into `dir/name.bundle`.
fn edited_rules(dir: &std::path::Path, name: &str, edit: impl Fn(&str, String) -> String) {
    let out = dir.join(name);
    std::fs::create_dir(&out).unwrap();
    for entry in std::fs::read_dir(root().join("fixtures/rules")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let file = path.file_name().unwrap().to_str().unwrap().to_string();
            let text = edit(&file, std::fs::read_to_string(&path).unwrap());
            std::fs::write(out.join(&file), text).unwrap();
        }
    }
    let bundle = format!("{name}.bundle");
    let (code, _, err) = rulec(dir, &["build", name, "-o", &bundle]);
    assert_eq!(code, 0, "{err}");
}

/// A fixture timeline copied into `dir` (so the output names it as
/// `name`, wherever the repository is).
fn fixture_timeline(dir: &std::path::Path, name: &str) {
    std::fs::copy(root().join("fixtures/timelines").join(name), dir.join(name)).unwrap();
}

/// `rulec diff ARGS --replay ...` in text and JSON: both snapshotted,
/// the exit status without and with `--deny-changes`, and what that says.
fn replay_outputs(dir: &std::path::Path, args: &[&str], snapshot: &str) {
    let (code, out, err) = rulec(dir, args);
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!(snapshot, out);
    let json_args: Vec<&str> = args.iter().copied().chain(["--format", "json"]).collect();
    let (code, json, err) = rulec(dir, &json_args);
    assert_eq!(code, 0, "{err}");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    insta::assert_snapshot!(
        format!("{snapshot}-json"),
        serde_json::to_string_pretty(&value["replay"]).unwrap()
    );
    let deny: Vec<&str> = args.iter().copied().chain(["--deny-changes"]).collect();
    let (code, denied, err) = rulec(dir, &deny);
    assert_eq!(code, 1, "{denied}");
    assert!(
        err.ends_with("(--deny-changes)\n") && err.starts_with("error: the replay differs in "),
        "{err}"
    );
    assert_eq!(denied, out, "--deny-changes prints the same report");
}

/// hazards-on-alarm's "off" 45 s after the alarm, not 30 s: the one
/// action of the replay that moved, with its time on each side.
#[test]
fn replay_names_a_changed_delay_with_the_time_on_each_side() {
    let dir = two_builds();
    fixture_timeline(dir.path(), "hazards.toml");
    replay_outputs(
        dir.path(),
        &[
            "diff",
            "old.bundle",
            "new.bundle",
            "--replay",
            "hazards.toml",
        ],
        "replay-delay-changed",
    );
}

/// hazards-on-alarm's step 1 pushes "left" (fixtures/rules-changed): the
/// action at 30 s, with its value on each side.
#[test]
fn replay_names_a_changed_push_value_on_each_side() {
    let dir = tempfile::tempdir().unwrap();
    let changed =
        std::fs::read_to_string(root().join("fixtures/rules-changed/10-alarm.toml")).unwrap();
    edited_rules(dir.path(), "old", |_, text| text);
    edited_rules(dir.path(), "new", |file, text| {
        if file == "10-alarm.toml" {
            changed.clone()
        } else {
            text
        }
    });
    fixture_timeline(dir.path(), "hazards.toml");
    replay_outputs(
        dir.path(),
        &[
            "diff",
            "old.bundle",
            "new.bundle",
            "--replay",
            "hazards.toml",
        ],
        "replay-push-changed",
    );
    // The rules directories replay as their bundles do.
    let (_, from_bundles, _) = rulec(
        dir.path(),
        &[
            "diff",
            "old.bundle",
            "new.bundle",
            "--replay",
            "hazards.toml",
        ],
    );
    let (code, from_dirs, err) = rulec(
        dir.path(),
        &["diff", "old", "new", "--replay", "hazards.toml"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(from_dirs, from_bundles);
}

/// Every fixture timeline: the bundle against itself, and against its
/// rules directory, is no change and passes `--deny-changes`. A timeline
/// that deploys rules of its own (`[[reload]]`) is refused: it would
/// replace both sides of the comparison.
#[test]
fn replay_of_the_rules_against_themselves_is_no_change() {
    let dir = two_builds();
    let rules = root().join("fixtures/rules");
    let mut replayed = 0;
    for entry in std::fs::read_dir(root().join("fixtures/timelines")).unwrap() {
        let path = entry.unwrap().path();
        let timeline = path.to_str().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        for new in ["old.bundle", rules.to_str().unwrap()] {
            let args = [
                "diff",
                "old.bundle",
                new,
                "--replay",
                timeline,
                "--deny-changes",
            ];
            let (code, out, err) = rulec(dir.path(), &args);
            if text.contains("[[reload]]") {
                assert_eq!(code, 1, "{timeline}: {out}");
                assert!(err.contains("[[reload]]"), "{err}");
                continue;
            }
            assert_eq!(code, 0, "{timeline}: {err}");
            let last = out.lines().last().unwrap();
            assert!(
                last.starts_with(&format!("replay {timeline}: no change (")),
                "{timeline}: {out}"
            );
            let (code, json, err) = rulec(dir.path(), &[&args[..], &["--format", "json"]].concat());
            assert_eq!(code, 0, "{timeline}: {err}");
            let value: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(value["replay"]["differences"], serde_json::json!([]));
            assert_eq!(
                value["replay"]["old_actions"], value["replay"]["new_actions"],
                "{timeline}"
            );
        }
        replayed += 1;
    }
    assert!(replayed >= 18, "{replayed} fixture timelines");
}

/// A recording as `ruled record` writes it (docs/recording.md#the-file):
/// an ordinary timeline. parked-brake-blink's second frame 2 s after
/// parking, not 1.5 s; the horn of accessory-fault is the same on both
/// sides and not listed.
#[test]
fn replay_of_a_recording_names_what_the_deploy_changes() {
    const RECORDING: &str = r#"# ruled record: 2026-12-04T22:40:07Z
# profile: librescoot 3f2a0c
# bundle: /var/lib/ruled/rules.bundle (9c41aa)
# redis: redis+unix:///var/run/redis/redis.sock
# replay: rulec simulate RULES_DIR --timeline THIS_FILE

[[state]]
at = "0ms"
hash = "vehicle"
fields = { "state" = "stand-by", "kickstand" = "down", "seatbox:lock" = "closed" }
before-start = true

[[state]]
at = "5121ms"
hash = "vehicle"
field = "state"
value = "parked"

[[message]]
at = "9034ms"
channel = "accessory:report"
payload = "{\"status\":\"fault\"}"

[[state]]
at = "12480ms"
hash = "vehicle"
field = "state"
value = "ready-to-drive"
"#;
    let dir = tempfile::tempdir().unwrap();
    edited_rules(dir.path(), "old", |_, text| text);
    edited_rules(dir.path(), "new", |_, text| {
        text.replace("after = \"1.5s\"", "after = \"2s\"")
    });
    std::fs::write(dir.path().join("ride.timeline.toml"), RECORDING).unwrap();
    let args = [
        "diff",
        "old.bundle",
        "new.bundle",
        "--replay",
        "ride.timeline.toml",
    ];
    let (code, out, err) = rulec(dir.path(), &args);
    assert_eq!(code, 0, "{err}");
    let replay = out
        .split_once("replay ride.timeline.toml: ")
        .map(|(_, replay)| replay)
        .unwrap_or_else(|| panic!("{out}"));
    assert!(replay.starts_with("1 action differs"), "{out}");
    assert!(
        replay.contains(
            "  parked-brake-blink step 1 #1: time\n    old     6621 ms  can iface=can0 id=0x18ff50e5 data=0000\n    new     7121 ms  can iface=can0 id=0x18ff50e5 data=0000\n"
        ),
        "{out}"
    );
    assert!(!replay.contains("accessory-fault"), "{out}");
    let (code, _, err) = rulec(dir.path(), &[&args[..], &["--deny-changes"]].concat());
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "error: the replay differs in 1 action (--deny-changes)\n"
    );
}

/// What `--replay` refuses, and how: `--deny-changes` means nothing
/// without a replay (usage); a timeline that cannot be read is a usage
/// error, one with problems is named at its line.
#[test]
fn replay_refuses_what_it_cannot_compare() {
    let dir = two_builds();
    let (code, _, err) = rulec(
        dir.path(),
        &["diff", "old.bundle", "new.bundle", "--deny-changes"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--replay"), "{err}");
    let (code, _, err) = rulec(
        dir.path(),
        &[
            "diff",
            "old.bundle",
            "new.bundle",
            "--replay",
            "missing.toml",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: cannot read the timeline missing.toml"),
        "{err}"
    );
    std::fs::write(
        dir.path().join("typo.toml"),
        "[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n\n[[fail]]\nat = \"0s\"\nrule = \"hazards-on-alarn\"\n",
    )
    .unwrap();
    let (code, out, err) = rulec(
        dir.path(),
        &["diff", "old.bundle", "new.bundle", "--replay", "typo.toml"],
    );
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("hazards-on-alarm"), "the did-you-mean: {err}");
    assert_eq!(out, "", "nothing is compared");
    // A [[fail]] of a rule NEW lacks (fixtures/rules-changed has only the
    // alarm's rules): the side is named.
    std::fs::write(
        dir.path().join("fail.toml"),
        "[[event]]\nat = \"0s\"\ntopic = \"alarm.triggered\"\n\n[[fail]]\nat = \"0s\"\nrule = \"parked-brake-blink\"\n",
    )
    .unwrap();
    let changed = root().join("fixtures/rules-changed");
    let (code, out, err) = rulec(
        dir.path(),
        &[
            "diff",
            "old.bundle",
            changed.to_str().unwrap(),
            "--replay",
            "fail.toml",
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        err.starts_with(&format!(
            "error: fail.toml: with NEW ({}): [[fail]] #1: no rule named \"parked-brake-blink\"",
            changed.display()
        )),
        "{err}"
    );
    assert!(err.contains("OLD and NEW both have"), "{err}");
}

#[test]
fn help_names_the_replay() {
    let (_, help, _) = rulec(&root(), &["diff", "--help"]);
    assert!(
        help.contains(
            "rulec diff deployed.bundle rules/ --replay ride.timeline.toml --deny-changes"
        ),
        "{help}"
    );
}
