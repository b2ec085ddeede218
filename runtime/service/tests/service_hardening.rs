//! Hardening against a slow Redis, hostile datastore contents and floods
//! (docs/semantics.md#worker-pool-and-actions, docs/service.md#pending-records-hash-extensionspending,
//! docs/service.md#subscriptions): each test starts its own `redis-server`
//! and its own `ruled`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::path::{Path, PathBuf};
use support::bundles::{self, hazards, payload};
use support::{wait_for, RedisServer, Ruled};

fn list(redis: &RedisServer, key: &str) -> Vec<String> {
    let mut items: Vec<String> = redis.query(&["LRANGE", key, "0", "-1"]);
    items.reverse();
    items
}

/// The shipped `fixtures/rules`, built as `rulec build` does.
fn fixture_bundle(dir: &Path) -> PathBuf {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rules");
    let report = rulec::check::check_dir(&rules).unwrap();
    let payload = rulec::build::assemble(&report.rules, "test");
    bundles::write(dir, "rules.bundle", &payload)
}

/// Sends `commands` as one pipeline (one write) and waits for the replies.
fn pipelined(redis: &RedisServer, commands: &[&[&str]]) {
    let mut pipe = redis::pipe();
    for command in commands {
        pipe.cmd(command[0]).arg(&command[1..]);
    }
    pipe.exec(&mut redis.con()).unwrap();
}

/// A Redis stall longer than the old 2 s reply timeout: the pushes made
/// while Redis is paused land once it resumes, and the runs go on, so every
/// `on` gets its `off`.
#[test]
fn a_paused_redis_does_not_split_on_off_pairs() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = fixture_bundle(dir.path());
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    pipelined(
        &redis,
        &[
            &[
                "PUBLISH",
                "ev:alarm.triggered",
                r#"{"topic":"alarm.triggered"}"#,
            ],
            &["CLIENT", "PAUSE", "2500", "WRITE"],
        ],
    );
    wait_for("three horn pulses, on and off", || {
        list(&redis, "scooter:horn") == ["on", "off", "on", "off", "on", "off"]
    });
    // The blinker's `off` comes 30 s after `both`: a longer deadline.
    let started = std::time::Instant::now();
    let mut done = None;
    while done.is_none() && started.elapsed() < std::time::Duration::from_secs(90) {
        done = (list(&redis, "scooter:blinker") == ["both", "off"]).then_some(());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        done.is_some(),
        "blinker {:?}; log:\n{}",
        list(&redis, "scooter:blinker"),
        ruled.log_text()
    );
    let failed: Option<String> = redis.query(&["HGET", "extensions", "failed"]);
    assert_eq!(failed.as_deref(), Some("0"), "{}", ruled.log_text());
}

/// Whatever `extensions:pending` holds, ruled starts: a field name that is
/// not UTF-8 and an oversized record are removed with a log line (the
/// name escaped), many records are read in bounded rounds, and a valid
/// record still resumes.
#[test]
fn hostile_pending_contents_cannot_stop_a_start() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundles::write(
        dir.path(),
        "rules.bundle",
        &payload(vec![hazards(300)], vec![], vec![]),
    );
    let mut con = redis.con();
    redis::cmd("HSET")
        .arg("extensions:pending")
        .arg(b"bad\xff\nWARN forged".as_slice())
        .arg("{}")
        .exec(&mut con)
        .unwrap();
    redis::cmd("HSET")
        .arg("extensions:pending")
        .arg("huge#1-1")
        .arg(vec![b'x'; 200 * 1024])
        .exec(&mut con)
        .unwrap();
    let mut pipe = redis::pipe();
    for n in 0..20_000 {
        pipe.cmd("HSET")
            .arg("extensions:pending")
            .arg(format!("junk#{n}"))
            .arg("not json")
            .ignore();
    }
    pipe.exec(&mut con).unwrap();
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let binary = ruled.wait_log(&["field name is not UTF-8"]);
    assert!(binary.contains(r"bad\xff\nWARN forged"), "{binary}");
    let huge = ruled.wait_log(&["over the size bound"]);
    assert!(huge.contains("huge#1-1"), "{huge}");
    wait_for("every hostile field removed", || {
        let left: i64 = redis.query(&["HLEN", "extensions:pending"]);
        left == 0
    });
    assert!(
        !ruled.log().iter().any(|l| l.starts_with("WARN forged")),
        "a field name forged a log line"
    );
}
