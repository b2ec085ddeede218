//! `cargo xtask TASK --help` is a question, not a mistake: the usage on
//! stdout, exit 0, no error line; an unknown argument is still an error
//! (exit 2) followed by the usage.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_prints_the_usage_and_exits_0() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["help"],
        &["dist", "--help"],
        &["dist", "--target", "armv7-unknown-linux-gnueabihf", "-h"],
        &["dist-smoke", "--help"],
        &["fuzz", "--help"],
        &["bench", "--help"],
    ] {
        let out = xtask(args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "xtask {args:?}: {stderr}");
        assert!(
            stdout.starts_with("usage: cargo xtask"),
            "xtask {args:?}: {stdout}"
        );
        assert!(
            stderr.is_empty(),
            "xtask {args:?} wrote to stderr: {stderr}"
        );
    }
}

#[test]
fn an_unknown_argument_is_an_error_with_the_usage() {
    let out = xtask(&["dist", "--tsl"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: dist: unknown argument \"--tsl\""),
        "{stderr}"
    );
    assert!(stderr.contains("usage: cargo xtask"), "{stderr}");
}
