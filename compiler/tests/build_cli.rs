//! `rulec build` and `rulec dump` as a user runs them (docs/rulec.md): what
//! is printed where, the exit status, and whether a file is written.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use insta_cmd::{assert_cmd_snapshot, get_cargo_bin};
use std::fs;
use std::path::Path;
use std::process::Command;

const GOOD: &str = r#"
[[rule]]
name = "good"
on = ["alarm.triggered"]

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"
"#;

const BAD: &str = r#"
[[rule]]
name = "bad"
on = ["alarm.triggered"]
when = 'speed > 5'

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "off"
"#;

const WARNS: &str = r#"
[[rule]]
name = "warns"
on = ["alarm.triggered"]

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "off"
command = "/bin/true"
"#;

/// A scratch directory with `rules/` holding `files`; commands run inside
/// it with relative paths, so the output names no temp directory.
fn scratch(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("rules")).unwrap();
    for (name, text) in files {
        fs::write(dir.path().join("rules").join(name), text).unwrap();
    }
    dir
}

/// The names of the rules in the bundle at `path`, in bundle order.
fn rule_names(path: &Path) -> Vec<String> {
    let bundle = rulecore_io::bundle_file::read(path).unwrap();
    bundle
        .payload
        .rules
        .into_iter()
        .map(|r| r.name.into())
        .collect()
}

fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines().last().unwrap_or("").to_string()
}

fn rulec(dir: &Path) -> Command {
    let mut command = Command::new(get_cargo_bin("rulec"));
    command.current_dir(dir).env("NO_COLOR", "1");
    command
}

#[test]
fn build_writes_and_prints_the_id() {
    let dir = scratch(&[("a.toml", GOOD)]);
    assert_cmd_snapshot!(rulec(dir.path()).args(["build", "rules", "-o", "out.bundle"]));
    let bytes = fs::read(dir.path().join("out.bundle")).unwrap();
    let bundle = rulecore::codec::decode(&bytes).unwrap();
    assert_eq!(bundle.payload.rules.len(), 1);

    // `dump` prints what the library renders.
    let out = rulec(dir.path())
        .args(["dump", "out.bundle"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        rulec::dump::render_text(&bundle)
    );
    let out = rulec(dir.path())
        .args(["dump", "out.bundle", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["id"], bundle.id.as_str());
}

#[test]
fn errors_write_nothing() {
    let dir = scratch(&[("a.toml", GOOD), ("b.toml", BAD)]);
    // The diagnostics themselves are `rulec check`'s business (and its
    // snapshots); here: the exit, stdout, and the summary line.
    let out = rulec(dir.path())
        .args(["build", "rules", "-o", "out.bundle"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        last_line(&out.stderr),
        "2 files, 2 rules: 1 error, 0 warnings; nothing written (use --partial to write the rules that compiled)"
    );
    assert!(!dir.path().join("out.bundle").exists());
}

#[test]
fn output_dash_is_refused_not_a_file_named_dash() {
    let dir = scratch(&[("a.toml", GOOD)]);
    let out = rulec(dir.path())
        .args(["build", "rules", "-o", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("-o rules.bundle"), "{stderr}");
    assert!(!dir.path().join("-").exists());
}

#[test]
fn unwritable_output_names_the_output() {
    let dir = scratch(&[("a.toml", GOOD)]);
    let out = rulec(dir.path())
        .args(["build", "rules", "-o", "no-such-dir/out.bundle"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "error: cannot write the bundle no-such-dir/out.bundle: No such file or directory"
        ),
        "{stderr}"
    );
    // The temporary file's name (`.out.bundle.tmp-<pid>-<n>`) is an
    // implementation detail.
    assert!(!stderr.contains(".tmp-"), "{stderr}");
}

#[test]
fn partial_writes_what_compiled_and_still_fails() {
    let dir = scratch(&[("a.toml", GOOD), ("b.toml", BAD)]);
    let out = rulec(dir.path())
        // Without a profile: the size is the rules' alone.
        .args([
            "build",
            "rules",
            "-o",
            "out.bundle",
            "--partial",
            "--profile",
            "none",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        last_line(&out.stderr),
        "2 files, 2 rules: 1 error, 0 warnings; wrote out.bundle (partial): 1 rule, 1 step, 0 state pairs, 149 bytes"
    );
    assert_eq!(rule_names(&dir.path().join("out.bundle")), ["good"]);
}

/// A guard with an error, or a rejected file that declares one, fails the
/// build even with `--partial`: a bundle without the guard would weaken
/// the envelope (docs/safety.md#adding-to-it). A bad rule beside a good
/// guard still builds partially, with the guard in the bundle.
#[test]
fn partial_never_drops_a_guard_or_limit() {
    const GUARD: &str = "[[guard]]\nname = \"standing\"\nlist = \"scooter:blinker\"\nwhen = 'state(\"vehicle\", \"state\") == \"parked\"'\n";
    const BROKEN_GUARD: &str = "[[guard]]\nname = \"standing\"\nlist = \"scooter:blinker\"\nwhen = 'state(\"vehicle\", \"state\") == '\n";
    const BROKEN_LIMIT: &str =
        "[[limit]]\nname = \"blinks\"\nlist = \"scooter:blinker\"\nmax = 0\nper = \"10s\"\n";
    // A syntax error rejects the whole file, its guard with it.
    const UNPARSED: &str =
        "[[guard]]\nname = \"standing\"\nlist = \"scooter:blinker\"\nwhen = 'true'\n[[rule]\n";
    // Two guards with one name: the second is an error.
    let twice = format!("{GUARD}\n{GUARD}");
    let partial = |files: &[(&str, &str)]| {
        let dir = scratch(files);
        let out = rulec(dir.path())
            .args(["build", "rules", "-o", "out.bundle", "--partial"])
            .args(["--profile", "none"])
            .output()
            .unwrap();
        let written = dir.path().join("out.bundle").exists();
        (out, written, dir)
    };
    for (name, broken) in [
        ("guard", BROKEN_GUARD),
        ("limit", BROKEN_LIMIT),
        ("unparsed", UNPARSED),
        ("twice", twice.as_str()),
    ] {
        let (out, written, _dir) = partial(&[("a.toml", GOOD), ("b.toml", broken)]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(!written, "{name}: a bundle was written without the guard");
        let last = last_line(&out.stderr);
        assert!(
            last.ends_with(
                "nothing written: a guard or limit has errors (in b.toml), and a bundle \
                 without it would weaken the envelope"
            ),
            "{name}: {last}"
        );
    }
    // A broken rule beside a sound guard: partial as ever, guard kept.
    let guard_and_bad = format!("{GUARD}\n{BAD}");
    let (out, written, dir) = partial(&[("a.toml", GOOD), ("b.toml", &guard_and_bad)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(written, "{}", String::from_utf8_lossy(&out.stderr));
    let bundle = rulecore_io::bundle_file::read(&dir.path().join("out.bundle")).unwrap();
    assert_eq!(bundle.payload.envelope.guards[0].name, "standing");
    assert_eq!(rule_names(&dir.path().join("out.bundle")), ["good"]);
}

#[test]
fn denied_warnings_write_nothing() {
    let dir = scratch(&[("a.toml", WARNS)]);
    let status = rulec(dir.path())
        .args(["build", "rules", "-o", "out.bundle"])
        .output()
        .unwrap()
        .status;
    assert!(status.success(), "warnings alone do not fail the build");
    fs::remove_file(dir.path().join("out.bundle")).unwrap();

    let status = rulec(dir.path())
        .args(["build", "rules", "-o", "out.bundle", "--deny-warnings"])
        .output()
        .unwrap()
        .status;
    assert_eq!(status.code(), Some(1));
    assert!(!dir.path().join("out.bundle").exists());
}

/// A misspelt path is exit 2 and writes nothing; `--allow-empty` writes
/// the empty bundle (docs/rulec.md#rulec-build).
#[test]
fn missing_directory_is_an_error_unless_allowed_empty() {
    let dir = scratch(&[]);
    let out = rulec(dir.path())
        .args(["build", "absent", "-o", "out.bundle"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: absent does not exist: nothing written (use --allow-empty to write a bundle \
         with no rules)\n"
    );
    assert!(!dir.path().join("out.bundle").exists());
    assert_cmd_snapshot!(rulec(dir.path()).args([
        "build",
        "absent",
        "-o",
        "out.bundle",
        "--allow-empty"
    ]));
    let bundle = rulecore_io::bundle_file::read(&dir.path().join("out.bundle")).unwrap();
    assert!(bundle.payload.rules.is_empty());
}

/// Entries that are not rule files are listed as notes: a sub-folder,
/// `*.TOML`, `*.toml.bak`; hidden files and `tests/` are not.
#[test]
fn skipped_entries_are_listed_as_notes() {
    let dir = scratch(&[
        ("a.toml", GOOD),
        ("b.TOML", GOOD),
        ("c.toml.bak", GOOD),
        (".#a.toml", "x"),
    ]);
    fs::create_dir(dir.path().join("rules/more")).unwrap();
    fs::write(dir.path().join("rules/more/d.toml"), GOOD).unwrap();
    fs::create_dir(dir.path().join("rules/tests")).unwrap();
    for command in ["check", "build"] {
        let mut cmd = rulec(dir.path());
        cmd.args([command, "rules"]);
        if command == "build" {
            cmd.args(["-o", "out.bundle"]);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let err = String::from_utf8_lossy(&out.stderr);
        let notes: Vec<&str> = err.lines().filter(|l| l.starts_with("note:")).collect();
        assert_eq!(
            notes,
            [
                "note: rules: b.TOML is not read: only names ending in `.toml` (lower case) are rule files",
                "note: rules: c.toml.bak is not read: it does not end in `.toml`",
                "note: rules: more/ is a sub-folder: rule files are read from the directory itself, not recursively",
            ],
            "{command}"
        );
    }
    assert_eq!(rule_names(&dir.path().join("out.bundle")), ["good"]);
}

/// Diagnostics name files relative to the current directory, as the
/// directory was given, in text and JSON; a file given alone, as given.
#[test]
fn diagnostics_name_files_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("some/dir/bad3");
    fs::create_dir_all(&nested).unwrap();
    fs::write(nested.join("b.toml"), BAD).unwrap();
    let text = rulec(dir.path())
        .args(["check", "some/dir/bad3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&text.stderr);
    assert!(err.contains("[some/dir/bad3/b.toml:5:9]"), "{err}");
    let json = rulec(dir.path())
        .args(["check", "some/dir/bad3", "--format", "json"])
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&json.stdout)
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(value["file"], "some/dir/bad3/b.toml");
    assert_eq!(value["line"], 5);
    // One file alone: named as given.
    let one = rulec(dir.path())
        .args(["check", "some/dir/bad3/b.toml", "--format", "json"])
        .output()
        .unwrap();
    let value: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&one.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(value["file"], "some/dir/bad3/b.toml");
    // From inside the directory, `.`: the bare name.
    let here = Command::new(get_cargo_bin("rulec"))
        .current_dir(&nested)
        .args(["check", ".", "--format", "json"])
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&here.stdout)
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(value["file"], "b.toml");
}

#[test]
fn dump_refuses_a_corrupt_bundle() {
    let dir = scratch(&[("a.toml", GOOD)]);
    let status = rulec(dir.path())
        .args(["build", "rules", "-o", "out.bundle"])
        .output()
        .unwrap()
        .status;
    assert!(status.success());
    let path = dir.path().join("out.bundle");
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(&path, bytes).unwrap();
    assert_cmd_snapshot!(rulec(dir.path()).args(["dump", "out.bundle"]));
    assert_cmd_snapshot!(rulec(dir.path()).args(["dump", "missing.bundle"]));
}

/// docs/rules.md#errors-and-warnings: `--deny-warnings` makes a warning an error, and an error
/// rejects its rule: `--partial` writes the others only.
#[test]
fn denied_warnings_reject_their_rule_under_partial() {
    let dir = scratch(&[("a.toml", GOOD), ("b.toml", WARNS)]);
    let out = rulec(dir.path())
        .args([
            "build",
            "rules",
            "-o",
            "out.bundle",
            "--deny-warnings",
            "--partial",
            "--profile",
            "none",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("  x rule `warns`"), "{stderr}");
    assert_eq!(
        last_line(&out.stderr),
        "2 files, 2 rules: 1 error (1 denied warning), 0 warnings; wrote out.bundle (partial): 1 rule, 1 step, 0 state pairs, 149 bytes"
    );
    assert_eq!(rule_names(&dir.path().join("out.bundle")), ["good"]);
}

/// With `--format json`, stdout is JSON lines only: the diagnostics, then
/// one object for the bundle.
#[test]
fn json_build_prints_only_json_lines() {
    let dir = scratch(&[("a.toml", GOOD), ("b.toml", WARNS)]);
    let out = rulec(dir.path())
        .args(["build", "rules", "-o", "out.bundle", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    // The two rules push `both` and `off` onto the blinker for one
    // alarm: a conflict (docs/safety-checks.md#conflicts), in a.toml.
    assert_eq!(lines.len(), 3, "{stdout}");
    assert_eq!(lines[0]["code"], "rulec::conflict");
    assert_eq!(lines[1]["code"], "rulec::other-action-key");
    let bundle = rulecore_io::bundle_file::read(&dir.path().join("out.bundle")).unwrap();
    assert_eq!(lines[2]["bundle"], bundle.id.as_str());
    assert_eq!(lines[2]["rules"], 2);
    assert_eq!(lines[2]["output"], "out.bundle");
    assert_eq!(lines[2]["partial"], false);

    // Text mode: the bare id, as before.
    let out = rulec(dir.path())
        .args(["build", "rules", "-o", "out.bundle"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{}\n", bundle.id)
    );
}
