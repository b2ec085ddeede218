//! The resident-memory figures of `cargo xtask bench box` (docs/engine.md#the-48-mb-box):
//! the release `ruled` against a throwaway `redis-server`, its peak RSS
//! (`VmHWM` of `/proc/<pid>/status`) once ready with 10,000 one-step rules
//! and no records, with the same rules replaying 10,000 waiting records,
//! and with 100,000 rules and 10,000 records (the 48 MB cap).
//!
//! Run: `cargo xtask bench box` (or `cargo bench -p ruled --bench box_rss`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/support/mod.rs"]
mod support;

use rulecore::bundle::Payload;
use std::time::{SystemTime, UNIX_EPOCH};
use support::bundles;
use support::{RedisServer, Ruled};

const MIB: f64 = 1024.0 * 1024.0;

/// `count` rules, each on its own exact topic with one durable redis step
/// an hour after its trigger.
fn rules(count: usize) -> Payload {
    let rules = (0..count)
        .map(|i| {
            bundles::rule(
                &format!("rule-{i}"),
                &[&format!("vehicle.thing{i}.changed")],
                vec![bundles::redis_step("scooter:blinker", "off", 3_600_000)],
            )
        })
        .collect();
    bundles::payload(rules, vec![], vec![])
}

/// Writes one waiting record (due in an hour) for each of the first
/// `count` rules of `payload`, in batches of 1,000 fields per `HSET`.
fn write_records(redis: &RedisServer, payload: &Payload, count: usize) {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut con = redis.con();
    for chunk in payload.rules[..count].chunks(1_000) {
        let mut command = redis::cmd("HSET");
        command.arg("extensions:pending");
        for rule in chunk {
            let id = format!("{}#1-1", rule.name);
            let record = serde_json::json!({
                "id": id, "rule": rule.name, "source": "test.toml", "step": 0,
                "iter": 0, "fire-at": now_ms + 3_600_000,
                "fingerprint": rule.steps[0].fingerprint.to_string(),
                "event": {"topic": format!("vehicle.{}.changed", rule.name),
                          "data": {"level": 2, "speed": 7.5}}
            });
            command.arg(id).arg(record.to_string());
        }
        let _: i64 = command.query(&mut con).unwrap();
    }
}

/// Peak resident set of `pid` in bytes (`VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in kB");
    kib * 1024
}

/// Starts ruled on `rules` rules with `records` waiting records, waits for
/// it to be ready (replay done, subscribed) and for the records to be
/// parked; returns its peak RSS.
fn measure(rule_count: usize, records: usize) -> u64 {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let payload = rules(rule_count);
    let bundle = bundles::write(dir.path(), "box.bundle", &payload);
    write_records(&redis, &payload, records);
    drop(payload);
    let mut ruled = Ruled::start(&redis, &bundle, &["--log-level", "info"]);
    if records > 0 {
        // Replay comes before ready and says how many records it resumed.
        ruled.wait_log(&[
            "replaying pending records",
            &format!("records={records} removed=0"),
        ]);
    }
    ruled.wait_ready();
    let rss = peak_rss(ruled.pid());
    assert!(ruled.stop(), "ruled stops cleanly");
    rss
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that names another bench
    // means this one should not run.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"box_rss".contains(a.as_str()))
    {
        return;
    }
    let figures = [
        ("ruled, 10,000 rules ready, no records", 10_000, 0, 12.0),
        (
            "ruled, 10,000 rules replaying 10,000 records",
            10_000,
            10_000,
            16.0,
        ),
        (
            "ruled, 100,000 rules replaying 10,000 records",
            100_000,
            10_000,
            48e6 / MIB,
        ),
    ];
    println!(
        "{:<50} {:>14} {:>12} {:>6}",
        "figure (release ruled, VmHWM)", "peak RSS", "goal", "met"
    );
    for (name, rules, records, goal_mib) in figures {
        let mib = measure(rules, records) as f64 / MIB;
        let met = if mib < goal_mib { "yes" } else { "NO" };
        println!("{name:<50} {mib:>10.1} MiB {:>8.1} MiB {met:>6}", goal_mib);
    }
}
