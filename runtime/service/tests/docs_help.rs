//! What the docs say about `ruled`'s command line is what `ruled --help`
//! says: every environment variable it reads is in the README's list and
//! in docs/service.md#flags, and each flag's help names the key it writes
//! as the namespace does (`NS`), not as the default namespace spells it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// `ruled ARGS --help`, with no `RULED_*` variable of the test's own
/// environment shown as a value.
fn help(args: &[&str]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ruled"));
    command.args(args).arg("--help");
    for (key, _) in std::env::vars() {
        if key.starts_with("RULED_") {
            command.env_remove(key);
        }
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "ruled {args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Every `RULED_...` name in `text`.
fn variables(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("RULED_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        found.insert(tail[..end].trim_end_matches('_').to_string());
        rest = &tail[end..];
    }
    found
}

fn page(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(name),
    )
    .unwrap()
}

#[test]
fn every_environment_variable_is_documented() {
    let read: BTreeSet<String> = [&[][..], &["ctl"], &["rebuild"]]
        .iter()
        .flat_map(|args| variables(&help(args)))
        .collect();
    assert!(read.len() >= 15, "{read:?}");
    let readme = page("README.md");
    // The README's list: the paragraph that starts "Every flag has an
    // environment variable".
    let from = readme
        .find("Every flag has an environment variable")
        .expect("README.md lists the environment variables");
    let list = &readme[from..from + readme[from..].find("\n\n").unwrap()];
    let service = page("docs/service.md");
    let mut missing = Vec::new();
    for name in &read {
        if !list.contains(&format!("`{name}`")) {
            missing.push(format!("README.md's list lacks `{name}`"));
        }
        if !service.contains(&format!("`{name}`")) {
            missing.push(format!("docs/service.md lacks `{name}`"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    // And the docs name no variable ruled does not read.
    let listed = variables(list);
    let stale: Vec<&String> = listed.difference(&read).collect();
    assert!(
        stale.is_empty(),
        "README.md lists what ruled does not read: {stale:?}"
    );
}

/// The help of one flag: from its line to the next flag's.
fn flag_help<'a>(help: &'a str, flag: &str) -> &'a str {
    let from = help
        .find(&format!("      {flag} "))
        .unwrap_or_else(|| panic!("{flag} in:\n{help}"));
    let rest = &help[from + flag.len() + 6..];
    let end = rest.find("\n      -").unwrap_or(rest.len());
    &help[from..from + flag.len() + 6 + end]
}

#[test]
fn the_stats_interval_help_names_the_namespace() {
    let help = help(&[]);
    let stats = flag_help(&help, "--stats-interval");
    assert!(
        stats.contains("`NS`") && !stats.contains("hash `extensions`"),
        "{stats}"
    );
}
