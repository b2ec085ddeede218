//! One end-to-end run of `rulec lsp` with a real editor, headless, set up
//! by the Neovim snippet of docs/editors.md#neovim as it is written there:
//! Neovim's built-in LSP client (tests/editors/nvim.lua) opens a rule file
//! with a misspelt topic, gets the warning, applies the quick fix and sees
//! the diagnostics go; a new file of the rules folder gets the client, a
//! `Cargo.toml` outside any rules folder does not. Debian's Neovim (0.7.2
//! in bookworm) is what `.ci/run` installs. Without `nvim` on PATH the
//! test says SKIPPED and why.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use insta_cmd::get_cargo_bin;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RULE: &str = r#"[[rule]]
name = "hazards-when-parked"
on = ["vehicle.sate.changed"]

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"
"#;

fn nvim_version() -> Option<String> {
    let output = Command::new("nvim").arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    output
        .status
        .success()
        .then(|| text.lines().next().unwrap_or_default().to_string())
}

/// The first ```lua block of the Neovim section of docs/editors.md.
fn docs_snippet() -> String {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/editors.md");
    let docs = std::fs::read_to_string(docs).unwrap();
    let section = &docs[docs.find("\n## Neovim").expect("a Neovim section")..];
    let start = section.find("```lua\n").expect("a lua block") + "```lua\n".len();
    let end = start + section[start..].find("```").unwrap();
    section[start..end].to_string()
}

#[test]
fn neovim_gets_the_warning_and_applies_the_fix() {
    let Some(version) = nvim_version() else {
        eprintln!(
            "SKIPPED: nvim is not on PATH (`apt-get install neovim`; .ci/run installs it), \
             so Neovim's LSP client was not run against rulec lsp"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    let file = rules.join("parked.toml");
    std::fs::write(&file, RULE).unwrap();
    let crate_dir = dir.path().join("crate");
    std::fs::create_dir(&crate_dir).unwrap();
    let cargo_toml = crate_dir.join("Cargo.toml");
    std::fs::write(&cargo_toml, "[workspace]\nmembers = [\"x\"]\n").unwrap();
    let snippet = dir.path().join("snippet.lua");
    std::fs::write(&snippet, docs_snippet()).unwrap();
    let out = dir.path().join("out.txt");
    // The snippet starts `rulec` from PATH.
    let rulec = get_cargo_bin("rulec");
    let path = std::env::join_paths(
        std::iter::once(rulec.parent().unwrap().to_path_buf()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .unwrap();
    let init = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/editors/nvim.lua");
    let mut nvim = Command::new("nvim")
        .args(["--headless", "--noplugin", "-n", "-i", "NONE", "-u"])
        .arg(&init)
        .env("PATH", path)
        .env("SNIPPET", &snippet)
        .env("RULE_FILE", &file)
        .env("NEW_FILE", rules.join("new.toml"))
        .env("OTHER_FILE", &cargo_toml)
        .env("OUT", &out)
        .env("XDG_STATE_HOME", dir.path())
        .env("XDG_CACHE_HOME", dir.path())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = nvim.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = nvim.kill();
            panic!("{version} did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(status.success(), "{version}: {status}\n{report}");
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(
        lines,
        [
            "diagnostic 3:7 rulec::near-miss-topic rule `hazards-when-parked`: `on` pattern \
             `vehicle.sate.changed` matches no known topic, and is one edit from \
             `vehicle.state.changed` (one edit from `vehicle.state.changed`)",
            "action Change to \"vehicle.state.changed\"",
            "line on = [\"vehicle.state.changed\"]",
            "diagnostics after the fix: 0",
            "new.toml: filetype toml, 1 client(s)",
            "Cargo.toml: filetype toml, 0 client(s)",
        ],
        "{version}"
    );
}
