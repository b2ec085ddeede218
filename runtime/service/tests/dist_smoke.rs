//! The scooter build's smoke test (docs/scooter-build.md#the-smoke-test):
//! the cross-built `ruled` runs under qemu-user against a throwaway
//! redis-server, with the bundle the host's `rulec` built from
//! `fixtures/rules` (the Librescoot profile), and the alarm service's
//! `HSET alarm status` + `PUBLISH alarm status` turns the blinkers on.
//!
//! `cargo xtask dist-smoke` builds both, then runs this test with:
//! `RULES_SMOKE_RULED` (the cross-built binary), `RULES_SMOKE_EMULATOR`
//! (`qemu-arm`), `RULES_SMOKE_SYSROOT` (the target's glibc, qemu's `-L`)
//! and `RULES_SMOKE_BUNDLE`. A plain `cargo test` lists it as ignored.
#![allow(clippy::expect_used, clippy::print_stderr)]

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use support::{poll_within, RedisServer, Ruled};

/// Generous: an emulated ARM core on a busy two-core machine.
const EMULATED_DEADLINE: Duration = Duration::from_secs(120);

/// What `cargo xtask dist-smoke` hands the test.
struct Smoke {
    ruled: PathBuf,
    emulator: String,
    sysroot: String,
    bundle: PathBuf,
}

impl Smoke {
    fn from_env() -> Self {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: run this test through `cargo xtask dist-smoke`")
            })
        };
        Self {
            ruled: var("RULES_SMOKE_RULED").into(),
            emulator: var("RULES_SMOKE_EMULATOR"),
            sysroot: var("RULES_SMOKE_SYSROOT"),
            bundle: var("RULES_SMOKE_BUNDLE").into(),
        }
    }

    /// `qemu-arm -L <sysroot> <ruled>`: qemu finds the target's dynamic
    /// loader and libc under the sysroot.
    fn command(&self) -> Command {
        let mut command = Command::new(&self.emulator);
        command.arg("-L").arg(&self.sysroot).arg(&self.ruled);
        command
    }
}

fn list(redis: &RedisServer, key: &str) -> Vec<String> {
    redis.query(&["LRANGE", key, "0", "-1"])
}

fn wait_within(what: &str, mut check: impl FnMut() -> bool) {
    if poll_within(EMULATED_DEADLINE, || check().then_some(())).is_none() {
        panic!("timed out after {EMULATED_DEADLINE:?} waiting for: {what}");
    }
}

#[test]
#[ignore = "needs the cross-built ruled and qemu-user: run by `cargo xtask dist-smoke`"]
fn cross_built_ruled_turns_the_hazards_on_under_qemu() {
    let smoke = Smoke::from_env();
    let redis = RedisServer::start();
    // The alarm service's hash as it stands before ruled starts: armed.
    let _: i64 = redis.query(&["HSET", "alarm", "status", "armed"]);
    let started = Instant::now();
    let mut ruled = Ruled::start_program(
        smoke.command(),
        &redis.url(),
        &smoke.bundle,
        &["--log-level", "info"],
        &[],
    );
    let ready = ruled.wait_log_within(EMULATED_DEADLINE, &["ruled ready"]);
    eprintln!(
        "smoke: {} ready after {:.2} s: {ready}",
        smoke.ruled.display(),
        started.elapsed().as_secs_f64()
    );

    // What the alarm service does on the real bus: HSET, then PUBLISH the
    // hash's name with the field; ruled derives `alarm.triggered`.
    let published = Instant::now();
    let _: i64 = redis.query(&["HSET", "alarm", "status", "level-2-triggered"]);
    let receivers: i64 = redis.query(&["PUBLISH", "alarm", "status"]);
    assert_eq!(receivers, 1, "ruled is subscribed to the `alarm` channel");
    wait_within("scooter:blinker receives `both`", || {
        list(&redis, "scooter:blinker") == ["both"]
    });
    eprintln!(
        "smoke: alarm.triggered -> LPUSH scooter:blinker both in {:.1} ms",
        published.elapsed().as_secs_f64() * 1000.0
    );
    // The `off` 30 s later waits as a pending record: the durable path
    // works on the target too.
    wait_within(
        "the hazards' `off` step waits in extensions:pending",
        || {
            let records: Vec<String> = redis.query(&["HVALS", "extensions:pending"]);
            records.iter().any(|r| r.contains("hazards-on-alarm"))
        },
    );

    assert!(
        ruled.stop(),
        "ruled stops cleanly on SIGTERM:\n{}",
        ruled.log_text()
    );
    let records: Vec<String> = redis.query(&["HVALS", "extensions:pending"]);
    assert!(
        records.iter().any(|r| r.contains("hazards-on-alarm")),
        "a stop keeps the pending record: {records:?}"
    );
    eprintln!("smoke: passed in {:.2} s", started.elapsed().as_secs_f64());
}
