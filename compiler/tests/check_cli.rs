//! The command line as a whole (docs/rulec.md): every subcommand's `--help`
//! carries an example, and usage errors exit 2.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::process::Command;

fn rulec(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_rulec"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// Subcommand names listed under `Commands:` in `rulec --help`.
fn subcommands() -> Vec<String> {
    let (code, help, _) = rulec(&["--help"]);
    assert_eq!(code, 0);
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_subcommand_help_has_an_example() {
    let names = subcommands();
    assert!(names.contains(&"check".to_string()), "{names:?}");
    assert!(names.contains(&"schema".to_string()), "{names:?}");
    for name in names {
        let (code, help, _) = rulec(&[&name, "--help"]);
        assert_eq!(code, 0, "{name} --help");
        assert!(
            help.contains("Example"),
            "`rulec {name} --help` has no example:\n{help}"
        );
        assert!(
            help.contains(&format!("rulec {name}")),
            "{name}: example does not run it"
        );
    }
    let (_, top, _) = rulec(&["--help"]);
    assert!(top.contains("Examples:"), "{top}");
}

#[test]
fn usage_errors_exit_2_on_stderr() {
    let (code, out, err) = rulec(&["frobnicate"]);
    assert_eq!(code, 2);
    assert_eq!(out, "");
    assert!(err.contains("frobnicate"), "{err}");
    let (code, _, _) = rulec(&[]);
    assert_eq!(code, 2);
}

#[test]
fn diagnostics_come_in_file_order() {
    // `b.toml` is not UTF-8 (a problem found while loading), `a.toml` and
    // `c.toml` have rule errors (found while validating): the output still
    // follows the files' byte-wise order.
    let dir = tempfile::tempdir().unwrap();
    let bad_rule =
        "[[rule]]\nname = \"r\"\non = []\n[[rule.step]]\ndo = \"exec\"\ncommand = \"x\"\n";
    std::fs::write(dir.path().join("a.toml"), bad_rule).unwrap();
    std::fs::write(dir.path().join("b.toml"), b"name = \"\xe9\"\n").unwrap();
    std::fs::write(dir.path().join("c.toml"), bad_rule).unwrap();
    let path = dir.path().to_str().unwrap();
    let (code, out, _) = rulec(&["check", path, "--format", "json"]);
    assert_eq!(code, 1);
    let files: Vec<String> = out
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            value["file"].as_str().unwrap().to_string()
        })
        .collect();
    // Named as the directory was given (docs/rulec.md#file-names).
    assert_eq!(
        files,
        ["a.toml", "b.toml", "c.toml"].map(|name| format!("{path}/{name}"))
    );
}
