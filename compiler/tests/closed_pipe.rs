//! A reader that stops early (`rulec dump rules.bundle | head -1`) is not
//! an error: `rulec` ends quietly with exit 0 when its standard output is
//! closed (docs/rulec.md#exit-status).

#![allow(clippy::unwrap_used)]

mod support;

use insta_cmd::get_cargo_bin;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::rulec;

/// A bundle whose dump is far larger than a pipe holds (64 KiB) plus what
/// `head` reads at once, so that `rulec` is still writing when `head`
/// exits.
fn large_bundle(dir: &Path) -> PathBuf {
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    let mut text = String::new();
    for n in 0..800 {
        text.push_str(&format!(
            "[[rule]]\nname = \"blink-{n}\"\non = [\"vehicle.state.changed\"]\n\
             when = 'to == \"parked\" && data.count != {n}'\n\n\
             [[rule.step]]\ndo = \"redis\"\nlist = \"scooter:blinker\"\npush = \"both\"\n\n"
        ));
    }
    std::fs::write(rules.join("many.toml"), text).unwrap();
    let bundle = dir.join("rules.bundle");
    let (code, out, err) = rulec(
        dir,
        &[
            "build",
            "--profile",
            "none",
            rules.to_str().unwrap(),
            "-o",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    bundle
}

/// `rulec ARGS | head -1` under `pipefail`: rulec's exit status, what
/// `head` printed, and rulec's stderr.
fn piped_to_head(args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let err_file = dir.path().join("stderr");
    let script = format!(
        "set -o pipefail; \"$0\" \"$@\" 2>{} | head -1",
        err_file.display()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg(get_cargo_bin("rulec"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        std::fs::read_to_string(err_file).unwrap_or_default(),
    )
}

#[test]
fn dump_piped_to_head_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = large_bundle(dir.path());
    let (_, full, _) = rulec(dir.path(), &["dump", bundle.to_str().unwrap()]);
    assert!(full.len() > 256 * 1024, "the dump is {} bytes", full.len());
    for format in ["text", "json"] {
        let (code, first, err) =
            piped_to_head(&["dump", bundle.to_str().unwrap(), "--format", format]);
        assert_eq!(
            (code, err.as_str()),
            (0, ""),
            "`rulec dump --format {format} | head -1`"
        );
        assert_eq!(first.lines().count(), 1, "{first}");
    }
}
