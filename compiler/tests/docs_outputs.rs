//! Docs are checked against the binary: every quoted `rulec` output in
//! README.md and docs/*.md is marked with the command that produces it,
//!
//! ````text
//! <!-- output: rulec check fixtures/rules -->
//! ```console
//! $ rulec check fixtures/rules
//! 5 files, 11 rules: 0 errors, 0 warnings
//! ```
//! ````
//!
//! (`<!-- output: rulec ARGS; exit N -->` when the command exits N, 0
//! otherwise), and this test runs it from the repository root and fails
//! when the block drifts: every line of the block other than the `$`
//! command line and `...` (lines left out) must come out of the command,
//! stdout then stderr, in that order; and the exit status must match.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod support;

use support::{root, rulec};

/// One marked block: where it is, the command, its exit status, its lines.
struct Quoted {
    place: String,
    args: Vec<String>,
    exit: i32,
    lines: Vec<String>,
}

/// Every marked block of `text` (the file `name`).
fn quoted(name: &str, text: &str) -> Vec<Quoted> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(marker) = line
            .trim()
            .strip_prefix("<!-- output: ")
            .and_then(|rest| rest.strip_suffix("-->"))
        else {
            continue;
        };
        let place = format!("{name}:{}", at + 1);
        let (command, exit) = match marker.trim().split_once("; exit ") {
            Some((command, exit)) => (command, exit.trim().parse().unwrap()),
            None => (marker.trim(), 0),
        };
        let args: Vec<String> = command
            .strip_prefix("rulec ")
            .unwrap_or_else(|| panic!("{place}: the command must be `rulec ...`"))
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let fence = lines.get(at + 1).copied().unwrap_or_default();
        assert!(
            fence.trim_start().starts_with("```"),
            "{place}: a fenced block must follow the marker"
        );
        // A block in a list item is indented as its fence is.
        let indent = fence.len() - fence.trim_start().len();
        let block: Vec<String> = lines[at + 2..]
            .iter()
            .take_while(|line| !line.trim_start().starts_with("```"))
            .map(|line| line.get(indent..).unwrap_or_default().trim_end())
            .filter(|line| !line.starts_with("$ ") && line.trim() != "..." && !line.is_empty())
            .map(str::to_string)
            .collect();
        assert!(!block.is_empty(), "{place}: the block quotes nothing");
        found.push(Quoted {
            place,
            args,
            exit,
            lines: block,
        });
    }
    found
}

/// Every marked block of the README and docs/.
fn all_quoted() -> Vec<Quoted> {
    pages()
        .iter()
        .flat_map(|(name, text)| quoted(name, text))
        .collect()
}

#[test]
fn every_quoted_output_comes_from_the_binary() {
    let quoted = all_quoted();
    assert!(quoted.len() >= 10, "only {} marked blocks", quoted.len());
    let mut drifted = Vec::new();
    for block in &quoted {
        let args: Vec<&str> = block.args.iter().map(String::as_str).collect();
        let (code, out, err) = rulec(&root(), &args);
        let output = format!("{out}{err}");
        let produced: Vec<&str> = output.lines().map(str::trim_end).collect();
        if code != block.exit {
            drifted.push(format!(
                "{}: exit {code}, the docs say {}",
                block.place, block.exit
            ));
        }
        // Each quoted line, in order, among the lines produced.
        let mut rest = produced.iter();
        for line in &block.lines {
            if !rest.any(|produced| produced == line) {
                drifted.push(format!(
                    "{}: `rulec {}` does not print (in this order)\n  {line}\nit printed:\n{output}",
                    block.place,
                    args.join(" ")
                ));
                break;
            }
        }
    }
    assert!(drifted.is_empty(), "{}", drifted.join("\n\n"));
}

/// The check can fail: a line the command does not print is drift.
#[test]
fn a_drifted_count_is_caught() {
    let text = "<!-- output: rulec check fixtures/rules -->\n```console\n4 files, 9 rules: 0 errors, 0 warnings\n```\n";
    let block = &quoted("x.md", text)[0];
    let args: Vec<&str> = block.args.iter().map(String::as_str).collect();
    let (code, _, err) = rulec(&root(), &args);
    assert_eq!(code, block.exit);
    assert!(!err.lines().any(|line| line == block.lines[0]), "{err}");
}

/// The README and docs/*.md (every page a reader follows).
fn pages() -> Vec<(String, String)> {
    let root = root();
    let mut paths = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|path| {
            let name = path.strip_prefix(&root).unwrap().display().to_string();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

/// `cargo install` without `--locked` resolves the dependencies anew, to
/// versions no test ran: every `cargo install` the docs or CI type carries
/// `--locked`.
#[test]
fn every_cargo_install_is_locked() {
    let mut pages = pages();
    pages.push((
        ".ci/run".into(),
        std::fs::read_to_string(root().join(".ci/run")).unwrap(),
    ));
    let unlocked: Vec<String> = pages
        .iter()
        .flat_map(|(name, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, line)| line.contains("cargo install") && !line.contains("--locked"))
                .map(move |(at, line)| format!("{name}:{}: {}", at + 1, line.trim()))
        })
        .collect();
    assert!(
        unlocked.is_empty(),
        "without --locked:\n{}",
        unlocked.join("\n")
    );
}

/// `rulec simulate --help` and the README name every entry kind and
/// setting a timeline may hold (the list is the parser's own).
#[test]
fn simulate_help_names_every_timeline_entry() {
    use ruled_engine::sim::{TIMELINE_KINDS, TIMELINE_SETTINGS};
    let (code, help, _) = rulec(&root(), &["simulate", "--help"]);
    assert_eq!(code, 0);
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut missing = Vec::new();
    for (kind, _) in TIMELINE_KINDS {
        let entry = format!("[[{kind}]]");
        if !help.contains(&entry) {
            missing.push(format!("`rulec simulate --help` lacks {entry}"));
        }
        if !readme.contains(&format!("`{entry}`")) {
            missing.push(format!("README.md's timeline list lacks `{entry}`"));
        }
    }
    // The settings, as the help's wrapped prose writes them.
    let words: String = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for (setting, _) in TIMELINE_SETTINGS {
        if !words.contains(setting) {
            missing.push(format!(
                "`rulec simulate --help` lacks the setting {setting}"
            ));
        }
    }
    assert!(missing.is_empty(), "{}\n\n{help}", missing.join("\n"));
}
