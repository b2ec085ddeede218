//! `cargo xtask <task>`: every chore of the project, so there is no Makefile
//! and no shell script that only works on one machine.
//!
//! - `ci`: `cargo fmt --check`, clippy with `-D warnings`, the
//!   architecture's invariants (`invariants`), `cargo doc` without
//!   warnings, the scooter build's smoke test (`dist-smoke`), all tests;
//!   the last line is the tests' counts, `N passed, N failed, N skipped`.
//! - `invariants`: only the checks of ARCHITECTURE.md's invariants.
//! - `bench`: the benchmarks, in release mode; `bench box` every figure of
//!   the 48 MB box (peak RSS of the real `ruled`, heap, event path, `when`
//!   vs its peers) and of durable work in bulk in one run.
//! - `fuzz`: the randomized tests in a loop with fresh seeds (docs/fuzzing.md).
//! - `dist`, `dist-smoke`: the scooter build, and its cross-built `ruled`
//!   run under qemu (docs/scooter-build.md).

// A chore runner talks to its user on stderr.
#![allow(clippy::print_stderr)]

mod dist;
mod invariants;
mod refs;
mod summary;

use anyhow::{bail, Context, Result};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if asks_for_help(&args) {
        #[allow(clippy::print_stdout)] // asked for: the usage is the output
        {
            print!("{}", usage_text());
        }
        return Ok(());
    }
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("invariants") => invariants::check(),
        Some("bench") => bench(&args[1..]),
        Some("dist") => dist::dist(&or_usage(dist::DistOptions::parse(&args[1..]))),
        Some("dist-smoke") => dist::dist_smoke(or_usage(dist::smoke_target(&args[1..]))),
        Some("fuzz") => fuzz(&or_usage(FuzzOptions::parse(&args[1..]))),
        _ => {
            usage();
            std::process::exit(2);
        }
    }
}

/// The parsed arguments, or the error and the usage (exit status 2).
fn or_usage<T>(parsed: Result<T>) -> T {
    parsed.unwrap_or_else(|error| {
        eprintln!("error: {error:#}\n");
        usage();
        std::process::exit(2);
    })
}

/// The usage on stderr, after an error.
fn usage() {
    eprint!("{}", usage_text());
}

/// The usage: every task and its flags.
fn usage_text() -> String {
    let mut text = String::new();
    macro_rules! line {
        ($($arg:tt)*) => {{
            text.push_str(&format!($($arg)*));
            text.push('\n');
        }};
    }
    line!(
        "usage: cargo xtask <ci | invariants | bench [NAME] | fuzz [--seconds N] [--scale N] [--seed N]"
    );
    line!(
        "                    | dist [--target TRIPLE]... [--tls] | dist-smoke [--target TRIPLE]>"
    );
    line!("  ci          fmt --check, clippy -D warnings, invariants, cargo doc, dist-smoke,");
    line!("              every test; the last line is their counts:");
    line!("              `N passed, N failed, N skipped`");
    line!("  invariants  ARCHITECTURE.md's invariants: dependency trees, the engine");
    line!("              building alone, `unsafe` only where documented, no function");
    line!("              over 100 lines");
    line!("  bench  run the benchmarks in release mode (optionally one by name);");
    line!("         `bench box`: every figure of the 48 MB box (docs/engine.md) and of");
    line!("         durable work in bulk (docs/service.md)");
    line!("         `bench floor`: ruled against the floor relay of each path, and");
    line!("         the steps between (the relay on tokio, then with ruled's bus");
    line!("         work), as ratios in one run (docs/engine.md#the-unit-the-floor)");
    line!("         `bench guard`: what a guard adds to a guarded action, in PINGs,");
    line!("         and the envelope's RSS (docs/safety.md#what-it-costs)");
    line!("  fuzz   run the randomized tests (bundle decoder, VM + verifier, `when`");
    line!("         checker, differential vs evalexpr, checker vs verifier, engine,");
    line!("         ruled's RESP reader, pending records in Redis) in");
    line!("         rounds, each with a fresh seed from the clock, optimised (cargo");
    line!("         profile `fuzz`), until the time is up. A failure prints the seed");
    line!("         and the command that replays it, and exits 1. See docs/fuzzing.md.");
    line!("           --seconds N  stop starting runs after N seconds (default {DEFAULT_SECONDS})");
    line!(
        "           --scale N    case-count multiplier, RULES_FUZZ_SCALE (default {DEFAULT_SCALE})"
    );
    line!("           --seed N     one round with this RULES_FUZZ_SEED (replay), no loop");
    line!("  dist   build stripped release `ruled` and `rulec` for the scooter into");
    line!("         target/dist/<triple>/, print their sizes, and pack each target's");
    line!("         installable archive (binaries, units, install.sh, docs), with the");
    line!("         BitBake recipe beside the armv7 one (docs/scooter-build.md);");
    line!("         names a size that page states more than 3 % off what it built");
    line!("           --target T   only this target (repeatable); default: every one of");
    line!(
        "                        {}",
        dist::TARGETS
            .iter()
            .map(|t| t.triple)
            .collect::<Vec<_>>()
            .join(", ")
    );
    line!("           --tls        `ruled` with the `tls` feature (rediss://)");
    line!("  dist-smoke  the cross-built `ruled` under qemu-user against a throwaway");
    line!("         redis-server with the fixture rules; skipped, saying what to install,");
    line!("         when a tool is missing");
    line!(
        "           --target T   this target instead of {}",
        dist::TARGETS[0].triple
    );
    text
}

/// `--help` or `-h` anywhere, or the task `help`: a question, answered on
/// stdout with exit 0 (not an unknown argument).
fn asks_for_help(args: &[String]) -> bool {
    args.first().is_some_and(|task| task == "help")
        || args.iter().any(|arg| arg == "--help" || arg == "-h")
}

pub(crate) fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()))
}

pub(crate) fn run(what: &str, mut command: Command) -> Result<()> {
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

    invariants::check()?;

    // Broken intra-doc links and the like fail the build, not only warn.
    let mut docs = cargo();
    docs.args(["doc", "--workspace", "--all-features", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    run("cargo doc (warnings are errors)", docs)?;

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

    // The shipped rules do what their tests say (docs/rulec.md#rulec-test).
    let mut rule_tests = cargo();
    rule_tests.args(["run", "--quiet", "--package", "rulec", "--"]);
    rule_tests.args(["test", "fixtures/rules"]);
    run("rulec test fixtures/rules", rule_tests)?;

    // The scooter build: the armv7 `ruled` under qemu (about two minutes
    // of building on a quiet two-core machine). Skipped, saying what to
    // install, without the cross tools (docs/scooter-build.md#in-ci).
    dist::dist_smoke(&dist::TARGETS[0])?;

    // The test runner goes last; its counts close the log.
    every_test()
}

/// Every test of the workspace, then the artefacts they left, then the
/// counts as the last line; exits 1 when a test failed.
fn every_test() -> Result<()> {
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
    let (status, counts) = summary::run_counted("tests", tests)?;

    // compiler/tests/html_page.rs's screenshots (docs/simulation.md#the-timeline-picture).
    for (file, timeline) in [
        ("timeline.png", "hazards-clock-jump"),
        ("timeline-finally.png", "hazards-cancel"),
    ] {
        let screenshot = dist::target_dir()?.join("ci-artifacts").join(file);
        if screenshot.is_file() {
            eprintln!(
                "CI artefact: {} (the timeline page of fixtures/timelines/{timeline}.toml)",
                screenshot.display()
            );
        }
    }
    if !counts.seen {
        bail!("failed: tests ({status}), and the runner printed no summary to count");
    }
    // The last line of the log: the real counts, pass or fail.
    eprintln!("{counts}");
    if !status.success() || counts.failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn bench(args: &[String]) -> Result<()> {
    if args.first().map(String::as_str) == Some("box") {
        return bench_box();
    }
    let mut command = cargo();
    command.args(["bench", "--workspace", "--all-features"]);
    if let Some(name) = args.first() {
        command.args(["--bench", name]);
    }
    run("cargo bench", command)
}

/// Every figure of the 48 MB box (docs/engine.md#the-48-mb-box) in one
/// run: the peak RSS of the release `ruled` against a throwaway
/// redis-server, then the in-process figures with their peers, then the
/// durable work in bulk (docs/service.md#durable-work-in-bulk) in PINGs.
fn bench_box() -> Result<()> {
    let mut rss = cargo();
    rss.args(["bench", "--package", "ruled", "--bench", "box_rss"]);
    run("peak RSS of the release ruled (box_rss)", rss)?;
    let mut figures = cargo();
    figures.args(["bench", "--package", "bench-box", "--bench", "box"]);
    run(
        "heap, event path and `when` vs its peers (bench-box)",
        figures,
    )?;
    let mut durable = cargo();
    durable.args(["bench", "--package", "ruled", "--bench", "durable"]);
    run(
        "durable work in bulk: a 10,000-run park, 10,000 overdue records (durable)",
        durable,
    )
}

// ------------------------------------------------------------------ fuzz --

const DEFAULT_SECONDS: u64 = 300;
const DEFAULT_SCALE: u64 = 10;
/// Optimised like release, without fat LTO (a link per test binary would
/// take minutes on a small machine) and with overflow checks and debug
/// assertions kept, so a fuzzed input trips every check the debug tests have.
const FUZZ_PROFILE: &str = "fuzz";

/// One test binary and the randomized tests in it. Every test listed here
/// reads `RULES_FUZZ_SEED` and `RULES_FUZZ_SCALE` through `test_kit::fuzz`.
struct FuzzTarget {
    package: &'static str,
    /// `None`: the library's unit tests.
    test: Option<&'static str>,
    names: &'static [&'static str],
}

const FUZZ_TARGETS: &[FuzzTarget] = &[
    FuzzTarget {
        package: "rulecore",
        test: Some("bundle_codec"),
        names: &["random_inputs_never_panic"],
    },
    FuzzTarget {
        package: "rulecore",
        test: Some("forged_bundles"),
        names: &["forged_bundles_are_refused_or_stay_bounded"],
    },
    FuzzTarget {
        package: "rulecore",
        test: Some("codec_alloc"),
        names: &["random_bodies_allocate_little"],
    },
    FuzzTarget {
        package: "rulecore",
        test: Some("vm_verify"),
        names: &["random_programs_never_panic_and_verified_ones_never_malform"],
    },
    FuzzTarget {
        package: "rulec",
        test: None,
        names: &[
            "when::spans::tests::every_parsed_soup_maps_exactly",
            "when::check::tests::never_panics_and_spans_are_in_bounds",
        ],
    },
    FuzzTarget {
        package: "rulec",
        test: Some("check_robust"),
        names: &["randomly_edited_fixtures"],
    },
    FuzzTarget {
        package: "rulec",
        test: Some("build_verify"),
        names: &["every_accepted_when_verifies"],
    },
    FuzzTarget {
        package: "rulec",
        test: Some("differential"),
        names: &[
            "generated_expressions_agree",
            "fixture_expressions_agree",
            "accepted_token_soup_agrees",
            "shared_pool_agrees",
        ],
    },
    FuzzTarget {
        package: "ruled-engine",
        test: Some("engine"),
        names: &["random_input_never_leaks_runs_timers_or_records"],
    },
    FuzzTarget {
        package: "ruled",
        test: None,
        names: &["resp::tests::random_replies_read_alike_whole_or_in_pieces"],
    },
    FuzzTarget {
        package: "ruled",
        test: Some("pending_fuzz"),
        names: &["random_pending_contents_never_stop_a_replay"],
    },
];

impl FuzzTarget {
    fn label(&self) -> String {
        match self.test {
            Some(test) => format!("{} --test {test}", self.package),
            None => format!("{} --lib", self.package),
        }
    }

    /// `cargo test` arguments up to and including the `--` before the
    /// harness's own.
    fn cargo_args(&self) -> Vec<String> {
        let mut args: Vec<String> = ["test", "--profile", FUZZ_PROFILE, "--package", self.package]
            .iter()
            .map(|s| s.to_string())
            .collect();
        match self.test {
            Some(test) => args.extend(["--test".to_string(), test.to_string()]),
            None => args.push("--lib".to_string()),
        }
        args.push("--".to_string());
        args
    }

    /// The command that replays one run, as a user would type it.
    fn replay(&self, seed: u64, scale: u64) -> String {
        format!(
            "RULES_FUZZ_SEED={seed} RULES_FUZZ_SCALE={scale} cargo {} --exact {}",
            self.cargo_args().join(" "),
            self.names.join(" ")
        )
    }
}

#[derive(Debug, PartialEq)]
struct FuzzOptions {
    seconds: u64,
    scale: u64,
    seed: Option<u64>,
}

impl FuzzOptions {
    fn parse(args: &[String]) -> Result<FuzzOptions> {
        let mut options = FuzzOptions {
            seconds: DEFAULT_SECONDS,
            scale: DEFAULT_SCALE,
            seed: None,
        };
        let mut args = args.iter();
        while let Some(flag) = args.next() {
            let mut value = |flag: &str| -> Result<u64> {
                let value = args
                    .next()
                    .with_context(|| format!("{flag} needs a number after it"))?;
                value
                    .parse()
                    .with_context(|| format!("{flag} {value:?}: not an unsigned integer"))
            };
            match flag.as_str() {
                "--seconds" => options.seconds = value("--seconds")?,
                "--scale" => options.scale = value("--scale")?,
                "--seed" => options.seed = Some(value("--seed")?),
                other => bail!("fuzz: unknown argument {other:?}"),
            }
        }
        if options.scale == 0 {
            bail!("--scale 0: the scale multiplies case counts and must be at least 1");
        }
        Ok(options)
    }
}

/// A fresh seed per round. The clock's nanoseconds, mixed so that rounds a
/// moment apart still differ in every bit.
fn clock_seed(round: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut z = nanos ^ round.rotate_left(32);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fuzz(options: &FuzzOptions) -> Result<()> {
    // Build every target first (not counted against --seconds) and check
    // that each listed test still exists: a renamed test must not turn the
    // loop into one that quietly runs nothing.
    for target in FUZZ_TARGETS {
        let what = format!("build and list {}", target.label());
        eprintln!("==> {what}");
        let mut command = cargo();
        command
            .args(target.cargo_args())
            .args(["--list", "--format", "terse"]);
        let out = command
            .output()
            .with_context(|| format!("could not start: {what}"))?;
        if !out.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&out.stderr));
            bail!("failed: {what} ({})", out.status);
        }
        let listed = String::from_utf8_lossy(&out.stdout);
        for name in target.names {
            if !listed.lines().any(|line| line == format!("{name}: test")) {
                bail!(
                    "{}: no test named {name}; update FUZZ_TARGETS in xtask/src/main.rs",
                    target.label()
                );
            }
        }
    }

    let limit = Duration::from_secs(options.seconds);
    let started = Instant::now();
    let mut round = 0u64;
    let mut runs = 0u64;
    loop {
        round += 1;
        let seed = options.seed.unwrap_or_else(|| clock_seed(round));
        eprintln!(
            "==> round {round}: RULES_FUZZ_SEED={seed} RULES_FUZZ_SCALE={}",
            options.scale
        );
        for target in FUZZ_TARGETS {
            if options.seed.is_none() && started.elapsed() >= limit {
                eprintln!(
                    "fuzz: {runs} runs in {round} rounds ({:.0} s), no failure",
                    started.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            let run_started = Instant::now();
            let mut command = cargo();
            command
                .args(target.cargo_args())
                .arg("--exact")
                .args(target.names)
                .env("RULES_FUZZ_SEED", seed.to_string())
                .env("RULES_FUZZ_SCALE", options.scale.to_string())
                .env("INSTA_UPDATE", "no");
            let out = command
                .output()
                .with_context(|| format!("could not start cargo test for {}", target.label()))?;
            runs += 1;
            if !out.status.success() {
                // The harness's report (the panic and the test's own replay
                // line), cargo's, then the seed and command last, where the
                // eye lands.
                eprintln!("{}", String::from_utf8_lossy(&out.stdout).trim_end());
                eprintln!("{}", String::from_utf8_lossy(&out.stderr).trim_end());
                eprintln!(
                    "fuzz: {} FAILED ({}) in round {round} with RULES_FUZZ_SEED={seed}",
                    target.label(),
                    out.status
                );
                eprintln!("replay: {}", target.replay(seed, options.scale));
                // Not an `Err`: anyhow would bury the replay line under a
                // backtrace of xtask itself when RUST_BACKTRACE is set.
                std::process::exit(1);
            }
            eprintln!(
                "    {:<28} ok  {:>6.1} s",
                target.label(),
                run_started.elapsed().as_secs_f64()
            );
        }
        if options.seed.is_some() {
            eprintln!("fuzz: the round with seed {seed} passed");
            return Ok(());
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Command-line words, as `main` gets them.
    pub(crate) fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fuzz_options_parse() {
        assert_eq!(
            FuzzOptions::parse(&[]).unwrap(),
            FuzzOptions {
                seconds: DEFAULT_SECONDS,
                scale: DEFAULT_SCALE,
                seed: None
            }
        );
        assert_eq!(
            FuzzOptions::parse(&args(&["--seconds", "30", "--seed", "9", "--scale", "2"])).unwrap(),
            FuzzOptions {
                seconds: 30,
                scale: 2,
                seed: Some(9)
            }
        );
        for bad in [
            &["--seconds"][..],
            &["--seconds", "x"],
            &["--scale", "0"],
            &["--minutes", "1"],
        ] {
            assert!(FuzzOptions::parse(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_replay_command_names_seed_scale_and_tests() {
        let replay = FUZZ_TARGETS[0].replay(5, 3);
        assert_eq!(
            replay,
            "RULES_FUZZ_SEED=5 RULES_FUZZ_SCALE=3 cargo test --profile fuzz --package rulecore \
             --test bundle_codec -- --exact random_inputs_never_panic"
        );
    }

    #[test]
    fn clock_seeds_differ_per_round() {
        assert_ne!(clock_seed(1), clock_seed(2));
    }
}
