//! `ruled ctl emit` / `v1.emit` end to end (docs/operating.md#handing-the-rules-an-event):
//! a real `redis-server`, a real `ruled`, the `ruled ctl` binary. The
//! event reaches the rules through the bus's path (their `decide`), is not
//! published, and is refused unsigned where the bus would refuse it
//! (an owned topic, `input.*`) and under `--control-mutations signed`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use support::bundles::{hazards, single};
use support::ctl::ctl;
use support::{wait_for, Ruled, Setup};

const RULE: &str = "hazards-on-alarm";

/// A control key file of mode 0600 in `dir`.
fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("control.key");
    std::fs::write(&path, "3f9a1c0e7b2d4f6a8c1e3b5d7f9a2c4e\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// MUST SHOW: `ruled ctl emit alarm.triggered --to level-2-triggered`
/// runs the hazards rule on a live `ruled` (its LPUSH seen), the rule saw
/// the event's `to`, the event was not published on the bus, and the
/// request is logged at `warn` with its topic. A bundle without a profile
/// owns no topic: any Redis client could publish this event, so an
/// unsigned emit is served; an `input.*` topic is not.
#[test]
fn emit_runs_the_hazards_rule_unsigned_on_a_topic_nobody_owns() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(60_000)));
    let ruled = Ruled::ready(&redis, &bundle, &[]);

    let out = ctl(
        &redis,
        &[
            "emit",
            "alarm.triggered",
            "--to",
            "level-2-triggered",
            "--data",
            "level=2",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(RULE), "{}", out.stdout);
    assert!(out.stdout.contains("start"), "{}", out.stdout);
    wait_for("the hazards rule's LPUSH", || {
        redis.list("scooter:blinker") == ["both"]
    });
    ruled.wait_log(&["WARN", "control request v1.emit", "alarm.triggered"]);
    let trace = ctl(&redis, &["trace", RULE, "--format", "json"]);
    assert_eq!(trace.code, 0, "{trace:?}");
    assert!(
        trace.stdout.contains("level-2-triggered"),
        "{}",
        trace.stdout
    );
    // Handed to the rules, never published: nothing in stream `events`.
    let entries: Vec<(String, Vec<(String, String)>)> =
        redis.query(&["XRANGE", "events", "-", "+"]);
    assert!(entries.is_empty(), "{entries:?}");

    let json = ctl(
        &redis,
        &[
            "emit",
            "alarm.triggered",
            "--format",
            "json",
            "--from",
            "armed",
        ],
    );
    assert_eq!(json.code, 0, "{json:?}");
    let reply: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(reply["matched"][0]["rule"], RULE, "{reply}");
    assert_eq!(reply["matched"][0]["verdict"]["kind"], "restart", "{reply}");

    let input = ctl(&redis, &["emit", "input.door"]);
    assert_eq!(input.code, 1, "{input:?}");
    assert!(input.stderr.contains("signed"), "{}", input.stderr);
    assert!(input.stderr.contains("input."), "{}", input.stderr);
}

/// With the bus profile, `alarm.triggered` is owned (ruled derives it, and
/// refuses it from the bus): an unsigned emit is refused with a reason
/// naming the signature, and nothing runs; the same emit signed with the
/// control key runs the rule.
#[test]
fn an_owned_topic_needs_a_signed_emit() {
    let Setup { redis, dir, bundle } =
        Setup::new(&support::librescoot::with_profile(single(hazards(60_000))));
    let key = key_file(dir.path());
    let key_arg = key.to_str().unwrap();
    let ruled = Ruled::ready(&redis, &bundle, &["--control-key", key_arg]);

    let emit = ["emit", "alarm.triggered", "--to", "level-2-triggered"];
    let refused = ctl(&redis, &emit);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("signed request"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("owned"), "{}", refused.stderr);
    ruled.wait_log(&["WARN", "control request v1.emit", "alarm.triggered"]);
    assert!(redis.list("scooter:blinker").is_empty());

    let mut signed = vec!["--control-key", key_arg];
    signed.extend_from_slice(&emit);
    let out = ctl(&redis, &signed);
    assert_eq!(out.code, 0, "{out:?}");
    wait_for("the hazards rule's LPUSH", || {
        redis.list("scooter:blinker") == ["both"]
    });
    ruled.wait_log(&["WARN", "control request v1.emit", "signed=true"]);
    // ruled publishes what it derives; the emitted event it does not.
    let published = support::librescoot::stream(&redis);
    assert!(
        published
            .iter()
            .all(|entry| entry.topic != "alarm.triggered"),
        "{:?}",
        published.iter().map(|e| &e.topic).collect::<Vec<_>>()
    );
}

/// `--control-mutations signed`: every unsigned emit is refused, even on a
/// topic nobody owns; signed, it runs.
#[test]
fn signed_mutations_refuse_an_unsigned_emit() {
    let Setup { redis, dir, bundle } = Setup::new(&single(hazards(60_000)));
    let key = key_file(dir.path());
    let key_arg = key.to_str().unwrap();
    let _ruled = Ruled::ready(
        &redis,
        &bundle,
        &["--control-key", key_arg, "--control-mutations", "signed"],
    );
    let refused = ctl(&redis, &["emit", "alarm.triggered"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("--control-mutations signed"),
        "{}",
        refused.stderr
    );
    assert!(redis.list("scooter:blinker").is_empty());
    let out = ctl(
        &redis,
        &["--control-key", key_arg, "emit", "alarm.triggered"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    wait_for("the hazards rule's LPUSH", || {
        redis.list("scooter:blinker") == ["both"]
    });
}
