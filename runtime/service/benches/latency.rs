//! End-to-end latency through `ruled` (run by `cargo xtask bench`).
//!
//! A throwaway `redis-server`, a release `ruled` with one rule: on
//! `bench.ping`, `LPUSH bench:out x`. Each sample is one `PUBLISH
//! ev:bench.ping` until the push is visible to the client (`BLPOP`). Beside
//! it, in the same run, the same client doing the work itself: `PUBLISH`
//! to a channel nobody listens to, then `LPUSH`, the two round trips a
//! client needs without ruled. Prints p50 / p90 / p99 / max of each.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};
use support::bundles::{self, payload};
use support::{RedisServer, Ruled};

const WARMUP: usize = 500;
const SAMPLES: usize = 10_000;

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name:<44} n={:<6} p50={:>8.1}µs p90={:>8.1}µs p99={:>8.1}µs max={:>8.1}µs",
        samples.len(),
        at(0.50).as_secs_f64() * 1e6,
        at(0.90).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        at(1.0).as_secs_f64() * 1e6,
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that names another bench
    // means this one should not run.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"latency".contains(a.as_str()))
    {
        return;
    }
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut rule = bundles::rule(
        "bench",
        &["bench.ping"],
        vec![bundles::redis_step("bench:out", "x", 0)],
    );
    // Thousands of starts a second: no breaker (docs/safety.md#the-breaker).
    rule.options_mut().trip = rulecore::envelope::Breaker::Off;
    let bundle = bundles::write(dir.path(), "bench.bundle", &bundles::single(rule));
    let mut ruled = Ruled::start(&redis, &bundle, &["--log-level", "warn"]);
    // `--log-level warn` hides "ready": wait for the subscription instead.
    support::wait_for("ruled subscribed", || {
        let (_, n): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", "ev:bench.ping"]);
        n == 1
    });

    let mut con = redis.con();
    let mut query = |args: &[&str]| -> redis::Value { support::query(&mut con, args) };
    let event = r#"{"topic":"bench.ping","src":"bench"}"#;
    let mut through_ruled = Vec::with_capacity(SAMPLES);
    let mut raw = Vec::with_capacity(SAMPLES);
    for i in 0..WARMUP + SAMPLES {
        let start = Instant::now();
        query(&["PUBLISH", "ev:bench.ping", event]);
        let popped = query(&["BLPOP", "bench:out", "5"]);
        let ruled_sample = start.elapsed();
        assert!(popped != redis::Value::Nil, "ruled did not push within 5 s");

        let start = Instant::now();
        query(&["PUBLISH", "ev:nobody", event]);
        query(&["LPUSH", "bench:raw", "x"]);
        let raw_sample = start.elapsed();
        query(&["RPOP", "bench:raw"]);

        if i >= WARMUP {
            through_ruled.push(ruled_sample);
            raw.push(raw_sample);
        }
    }
    println!("latency over a unix socket, {SAMPLES} events after {WARMUP} warm-up:");
    percentiles("PUBLISH -> LPUSH visible through ruled", through_ruled);
    percentiles("raw client PUBLISH + LPUSH round trips", raw);
    ruled.stop();

    memory(&redis, dir.path());
}

/// VmRSS with no rules, with 10,000 rules loaded, and with 10,000 runs
/// parked on a durable 10-minute step (one record each in Redis).
fn memory(redis: &RedisServer, dir: &std::path::Path) {
    const RULES: usize = 10_000;
    let empty = bundles::write(dir, "empty.bundle", &payload(vec![], vec![], vec![]));
    let mut idle = Ruled::start(redis, &empty, &["--log-level", "info"]);
    idle.wait_ready();
    let idle_rss = support::proc_status_kib(idle.pid(), "VmRSS:");
    idle.stop();

    let rules = (0..RULES)
        .map(|i| {
            bundles::rule(
                &format!("park-{i}"),
                &["park"],
                vec![bundles::redis_step("bench:parked", "x", 600_000)],
            )
        })
        .collect();
    let many = bundles::write(dir, "many.bundle", &payload(rules, vec![], vec![]));
    let mut ruled = Ruled::start(redis, &many, &["--log-level", "info"]);
    ruled.wait_ready();
    let loaded_rss = support::proc_status_kib(ruled.pid(), "VmRSS:");
    let _: i64 = redis.query(&["PUBLISH", "ev:park", r#"{"topic":"park"}"#]);
    let started = Instant::now();
    let parked = support::poll(|| {
        let records: usize = redis.query(&["HLEN", "extensions:pending"]);
        (records == RULES).then_some(())
    });
    assert!(parked.is_some(), "10,000 records were not written");
    // Polled every 20 ms: a resolution of 20 ms.
    let parked_time = started.elapsed();
    // The counters follow at the next stats tick.
    let counted = support::poll(|| {
        let pending: Option<String> = redis.query(&["HGET", "extensions", "pending"]);
        (pending.as_deref() == Some(&RULES.to_string())).then_some(())
    });
    assert!(counted.is_some(), "10,000 timers not counted");
    let parked_rss = support::proc_status_kib(ruled.pid(), "VmRSS:");
    ruled.stop();
    let _: i64 = redis.query(&["DEL", "extensions:pending"]);
    println!("resident memory (VmRSS) of ruled:");
    println!("  {:<36} {idle_rss:>7} KiB", "idle, no rules");
    println!(
        "  {:<36} {loaded_rss:>7} KiB",
        format!("{RULES} rules loaded, idle")
    );
    println!(
        "  {:<36} {parked_rss:>7} KiB  (one event parked them all, records written, in {:.0} ms)",
        format!("{RULES} runs parked (records in Redis)"),
        parked_time.as_secs_f64() * 1e3
    );
}
