//! The resident-memory figures of `cargo xtask bench box` (docs/engine.md#the-48-mb-box):
//! the release `ruled` against a throwaway `redis-server`, its peak RSS
//! (`VmHWM` of `/proc/<pid>/status`) once ready with 10,000 one-step rules
//! and no records, with the same rules replaying 10,000 waiting records,
//! and with 100,000 rules and 10,000 records (the 48 MB cap).
//!
//! Run: `cargo xtask bench box` (or `cargo bench -p ruled --bench box_rss`).
//! `BOX_RSS_RULED=<program>` runs another `ruled` (an older build, for a
//! before/after comparison, or a script that runs it under
//! `valgrind --tool=massif`; ready may then take minutes), and
//! `BOX_RSS_ONLY=<n>` measures only the n-th figure (1 to 3).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/support/mod.rs"]
mod support;

use rulecore::bundle::Payload;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
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

/// Peak and current resident set, in bytes.
struct Rss {
    peak: u64,
    ready: u64,
    /// Of `ready`, file pages (the binary, the C library): what no heap
    /// work can lower.
    file: u64,
}

/// Starts ruled on `rules` rules with `records` waiting records, waits for
/// it to be ready (replay done, subscribed) and for the records to be
/// parked; returns its peak RSS and its RSS once ready.
fn measure(rule_count: usize, records: usize) -> Rss {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let payload = rules(rule_count);
    let bundle = bundles::write(dir.path(), "box.bundle", &payload);
    write_records(&redis, &payload, records);
    drop(payload);
    let flags = ["--log-level", "info"];
    let (mut ruled, deadline) = match std::env::var_os("BOX_RSS_RULED") {
        Some(program) => (
            Ruled::start_program(Command::new(program), &redis.url(), &bundle, &flags, &[]),
            Duration::from_secs(600),
        ),
        None => (
            Ruled::start(&redis, &bundle, &flags),
            Duration::from_secs(30),
        ),
    };
    if records > 0 {
        // Replay comes before ready and says how many records it resumed.
        ruled.wait_log_within(
            deadline,
            &[
                "replaying pending records",
                &format!("records={records} removed=0"),
            ],
        );
    }
    ruled.wait_log_within(deadline, &["ruled ready"]);
    let rss = Rss {
        peak: support::proc_status_kib(ruled.pid(), "VmHWM:") * 1024,
        ready: support::proc_status_kib(ruled.pid(), "VmRSS:") * 1024,
        file: support::proc_status_kib(ruled.pid(), "RssFile:") * 1024,
    };
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
    let only: Option<usize> = std::env::var("BOX_RSS_ONLY")
        .ok()
        .and_then(|n| n.parse().ok());
    println!(
        "{:<50} {:>14} {:>12} {:>6} {:>14} {:>10}",
        "figure (release ruled, VmHWM)", "peak RSS", "goal", "met", "RSS at ready", "of it file"
    );
    for (number, (name, rules, records, goal_mib)) in (1..).zip(figures) {
        if only.is_some_and(|only| only != number) {
            continue;
        }
        let rss = measure(rules, records);
        let (peak, ready) = (rss.peak as f64 / MIB, rss.ready as f64 / MIB);
        let file = rss.file as f64 / MIB;
        let met = if peak < goal_mib { "yes" } else { "NO" };
        println!(
            "{name:<50} {peak:>10.1} MiB {goal_mib:>8.1} MiB {met:>6} {ready:>10.1} MiB {file:>6.1} MiB"
        );
    }
}
