//! How long a keystroke takes to answer in `rulec lsp` (docs/editors.md#how-fast):
//! a rules directory of 1,000 rules in 50 files, one of them open; each
//! keystroke is one `didChange` that types or deletes one character, timed
//! from writing it to the server's stdin to reading the
//! `publishDiagnostics` of that version from its stdout. The real binary
//! over stdio, the built-in profile, as an editor runs it.
//!
//! Prints the spread of 100 keystrokes, and, in process, what a check of
//! the directory costs from scratch (`rulec check`) and with one file
//! changed (each keystroke: one `Session` kept across checks). The
//! goal is under 100 ms a keystroke; the figure is reported, not asserted
//! (it depends on the machine).
//!
//! Run: `cargo xtask bench lsp_keystroke` (or `cargo bench -p rulec --bench lsp_keystroke`).

#![allow(clippy::print_stdout, clippy::print_stderr)] // a benchmark reports on stdout
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixed inputs; a failure is a bench bug

#[path = "../tests/support/lsp_client.rs"]
mod lsp_client;

use lsp_client::{url, Client};
use rulec::session::Session;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FILES: usize = 50;
const RULES_PER_FILE: usize = 20;
const KEYSTROKES: usize = 100;

/// One rule of the kind a scooter runs: profile topics, a `when` reading
/// state, two redis steps on a profile list, one delayed.
fn rule(index: usize) -> String {
    format!(
        r#"[[rule]]
name = "rule-{index}"
on = ["vehicle.state.changed", "vehicle.kickstand.down"]
cancel-on = ["vehicle.unlocked"]
when = 'to == "parked" && state("vehicle", "kickstand") == "down" && state("battery:0", "charge") != ""'
cooldown = "{cooldown}s"

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"

[[rule.step]]
do = "redis"
after = "30s"
list = "scooter:blinker"
push = "off"
"#,
        cooldown = index % 50 + 1
    )
}

fn write_rules(dir: &Path) {
    for file in 0..FILES {
        let text: String = (0..RULES_PER_FILE)
            .map(|i| rule(file * RULES_PER_FILE + i))
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(dir.join(format!("{file:03}.toml")), text).unwrap();
    }
}

fn spread(mut times: Vec<Duration>) -> String {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    format!(
        "min {:.1} ms, median {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        ms(times[0]),
        ms(at(0.5)),
        ms(at(0.95)),
        ms(times[times.len() - 1])
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// In this process: checks of the whole directory from scratch (what
/// `rulec check` does), and with one file changed between checks, each
/// file's own checks reused (what a keystroke does).
fn in_process(dir: &Path) -> (Vec<Duration>, Vec<Duration>) {
    let profile = rulec::profile::load(&rulec::profile::ProfileChoice::Builtin)
        .unwrap()
        .map(Arc::new);
    let loaded = rulec::load::load_dir(dir).unwrap();
    let check = |report: rulec::check::CheckReport| {
        assert_eq!(report.rules_read, FILES * RULES_PER_FILE);
        assert_eq!(report.errors(), 0, "{:?}", report.diagnostics.first());
    };
    let fresh = (0..20)
        .map(|_| {
            let start = Instant::now();
            let report = Session::new(profile.clone()).check_loaded(loaded.clone());
            let took = start.elapsed();
            check(report);
            took
        })
        .collect();
    let mut session = Session::new(profile.clone());
    let name = loaded.files[25].name.clone();
    let text = loaded.files[25].text.clone();
    let cached = (0..20)
        .map(|round| {
            let mut files = loaded.clone();
            files.overlay(&name, &format!("{text}\n# {round}\n"));
            let start = Instant::now();
            let report = session.check_loaded(files);
            let took = start.elapsed();
            check(report);
            took
        })
        .collect();
    (fresh, cached)
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    write_rules(dir.path());
    let path = dir.path().join("025.toml");
    let uri = url(&path);
    let mut text = std::fs::read_to_string(&path).unwrap();

    let mut client = Client::start(Path::new(env!("CARGO_BIN_EXE_rulec")), dir.path(), &[]);
    let start = Instant::now();
    client.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": uri, "languageId": "toml", "version": 1, "text": text } }),
    );
    let diagnostics = client.diagnostics(&uri, Some(1));
    let opened = start.elapsed();
    assert!(diagnostics.is_empty(), "{diagnostics:?}");

    // Typing `x` into the first rule's name and deleting it again: the
    // whole directory is checked every time.
    let at = text.find("rule-").unwrap() + "rule-".len();
    let (line, column) = (1, at - text[..at].rfind('\n').unwrap() - 1);
    let mut times = Vec::with_capacity(KEYSTROKES);
    for stroke in 0..KEYSTROKES {
        let version = stroke as i64 + 2;
        let (range, typed) = if stroke % 2 == 0 {
            text.insert(at, 'x');
            ((column, column), "x")
        } else {
            text.remove(at);
            ((column, column + 1), "")
        };
        let change = json!({
            "range": { "start": { "line": line, "character": range.0 }, "end": { "line": line, "character": range.1 } },
            "text": typed,
        });
        let start = Instant::now();
        client.notify(
            "textDocument/didChange",
            json!({ "textDocument": { "uri": uri, "version": version }, "contentChanges": [change] }),
        );
        let diagnostics = client.diagnostics(&uri, Some(version));
        times.push(start.elapsed());
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
    }
    assert!(client.stop().success());

    println!(
        "rulec lsp, {} rules in {FILES} files, one open, built-in profile:",
        FILES * RULES_PER_FILE
    );
    println!("  didOpen to publishDiagnostics: {:.1} ms", ms(opened));
    println!(
        "  {KEYSTROKES} keystrokes, didChange to publishDiagnostics: {}",
        spread(times)
    );
    let (fresh, cached) = in_process(dir.path());
    println!(
        "  in process, the whole directory checked from scratch (20 runs): {}",
        spread(fresh)
    );
    println!(
        "  in process, one file changed, the others' own checks reused (20 runs): {}",
        spread(cached)
    );
}
