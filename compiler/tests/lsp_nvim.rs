//! One end-to-end run of `rulec lsp` with a real editor, headless:
//! Neovim's built-in LSP client (tests/editors/nvim.lua) opens a rule file
//! with a misspelt topic, gets the warning, applies the quick fix and sees
//! the diagnostics go (docs/editors.md#neovim). Without `nvim` on PATH the
//! test says SKIPPED and why; `.ci/run` installs it.

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
    let file = dir.path().join("parked.toml");
    std::fs::write(&file, RULE).unwrap();
    let out = dir.path().join("out.txt");
    let init = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/editors/nvim.lua");
    let mut nvim = Command::new("nvim")
        .args(["--headless", "--noplugin", "-n", "-i", "NONE", "-u"])
        .arg(&init)
        .env("RULEC", get_cargo_bin("rulec"))
        .env("RULE_FILE", &file)
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
        ],
        "{version}"
    );
}
