//! `cargo xtask <task>`: every chore of the project, so there is no Makefile
//! and no shell script that only works on one machine.
//!
//! - `ci`: build, `cargo fmt --check`, clippy with `-D warnings`, all tests.
//! - `bench`: the benchmarks, in release mode.

// A chore runner talks to its user on stderr.
#![allow(clippy::print_stderr)]

use anyhow::{bail, Context, Result};
use std::process::Command;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask <ci|bench [NAME]>");
            eprintln!("  ci     build, fmt --check, clippy -D warnings, every test");
            eprintln!("  bench  run the benchmarks in release mode (optionally one by name)");
            std::process::exit(2);
        }
    }
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()))
}

fn run(what: &str, mut command: Command) -> Result<()> {
    eprintln!("==> {what}");
    let status = command
        .status()
        .with_context(|| format!("could not start: {what}"))?;
    if !status.success() {
        bail!("failed: {what} ({status})");
    }
    Ok(())
}

fn has_nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false)
}

fn ci() -> Result<()> {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        bail!(
            "redis-server is not on the PATH; the integration tests start their own.\n\
             Install it: `apt-get install redis-server` (Debian/Ubuntu) or `brew install redis`."
        );
    }
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run("cargo fmt --all --check", fmt)?;

    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]);
    run("cargo clippy -D warnings", clippy)?;

    let mut doc = cargo();
    doc.args(["test", "--workspace", "--all-features", "--doc"]);
    run("doc tests", doc)?;

    // The README's main job must keep working.
    let mut example = cargo();
    example.args(["run", "--quiet", "--package", "rulec", "--"]);
    example.args([
        "simulate",
        "fixtures/rules",
        "--timeline",
        "fixtures/timelines/hazards.toml",
    ]);
    run("rulec simulate (the README's first command)", example)?;

    // The test runner goes last so its summary closes the log.
    // Snapshots must match as committed: never write new ones in CI.
    let mut tests = cargo();
    if has_nextest() {
        tests.args([
            "nextest",
            "run",
            "--workspace",
            "--all-features",
            "--no-fail-fast",
        ]);
    } else {
        tests.args(["test", "--workspace", "--all-features", "--no-fail-fast"]);
    }
    tests.env("INSTA_UPDATE", "no").env("CI", "true");
    run("tests", tests)?;

    Ok(())
}

fn bench(args: &[String]) -> Result<()> {
    let mut command = cargo();
    command.args(["bench", "--workspace", "--all-features"]);
    if let Some(name) = args.first() {
        command.args(["--bench", name]);
    }
    run("cargo bench", command)
}
