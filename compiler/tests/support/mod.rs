//! What the CLI tests share: the repository root and running the real
//! `rulec` binary.
#![allow(dead_code, clippy::unwrap_used)] // each test binary uses a part

pub mod lsp_client;

use insta_cmd::get_cargo_bin;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (fixtures/, docs/ live there).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `rulec ARGS` run from `dir`, colours off: exit code, stdout, stderr.
pub fn rulec(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(get_cargo_bin("rulec"))
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `stderr` without the one warning `fixtures/rules` has on purpose: the
/// handlebar auto-lock's `rulec::guarded` (docs/safety.md#the-example),
/// which every command over the example rules with the built-in profile
/// prints. Panics when it is not there, so a test using this notices the
/// warning gone.
pub fn without_the_guarded_example(stderr: &str) -> String {
    let start = stderr
        .find("rulec::guarded\n\n  ! rule `handlebar-auto-lock`, step 1:")
        .unwrap_or_else(|| panic!("no handlebar-auto-lock warning in:\n{stderr}"));
    let help = start + stderr[start..].find("\n  help: ").unwrap() + 1;
    let end = help + stderr[help..].find("\n\n").unwrap() + 2;
    format!("{}{}", &stderr[..start], &stderr[end..])
}
