//! The Redis lane when Redis refuses a batch (docs/service.md#durable-work-in-bulk):
//! a real `redis-server` hits its `maxmemory` (policy `noeviction`) while
//! 600 durable `redis` steps come due. Redis refuses the lane's
//! transaction whole (`EXECABORT`, out of memory): no push ran and no
//! record was removed. Each step is retried with back-off, so once the
//! memory is back every step runs, once, and no record is left behind
//! without a timer.
#![allow(clippy::unwrap_used, clippy::print_stderr)] // test code

mod support;

use std::time::{Duration, Instant};
use support::bundles::{self, payload};
use support::{RedisServer, Ruled};

const RULES: usize = 600;
/// Where every step pushes its rule's name.
const LIST: &str = "done";
/// The durable wait: long enough to fill Redis's memory up behind it.
const WAIT_MS: u64 = 4_000;
/// Generous: back-off, a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(90);

fn rule_name(n: usize) -> String {
    format!("r{n:03}")
}

fn wait_until(what: &str, ruled: &Ruled, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}; log:\n{}",
            ruled.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_lane_batch_redis_refuses_for_memory_is_retried_and_leaves_no_record_behind() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rules: Vec<_> = (0..RULES)
        .map(|n| {
            let name = rule_name(n);
            bundles::rule(
                &name,
                &["x.go"],
                vec![bundles::redis_step(LIST, &name, WAIT_MS)],
            )
        })
        .collect();
    let bundle = bundles::write(dir.path(), "b", &payload(rules, vec![], vec![]));
    let ruled = Ruled::ready(&redis, &bundle, &["--log-level", "info"]);

    let _: i64 = redis.query(&["PUBLISH", "ev:x.go", r#"{"topic":"x.go"}"#]);
    wait_until("every run's record written", &ruled, || {
        redis.query::<usize>(&["HLEN", "extensions:pending"]) == RULES
    });
    // Out of memory from here on: every command that may grow the data
    // set (LPUSH among them) is refused, and a transaction holding one is
    // discarded whole.
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory", "1"]);
    wait_until("the lane's batch refused", &ruled, || {
        let errors: String = redis.query(&["INFO", "errorstats"]);
        errors.contains("errorstat_EXECABORT")
    });
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory", "0"]);

    // Every step still has its timer: each runs once the memory is back,
    // and its record goes with its push.
    let mut counts = (0, 0);
    wait_until("every step run and every record removed", &ruled, || {
        let pushed: usize = redis.query(&["LLEN", LIST]);
        let left: usize = redis.query(&["HLEN", "extensions:pending"]);
        if counts != (pushed, left) {
            eprintln!("{pushed} pushed, {left} records left");
            counts = (pushed, left);
        }
        pushed == RULES && left == 0
    });
    let mut pushed = redis.list(LIST);
    pushed.sort();
    pushed.dedup();
    assert_eq!(pushed.len(), RULES, "a step ran twice");
    // The lane held 258 of them (2 workers + 256): that batch was refused
    // and retried; the others waited for room, and went once the memory
    // was back (or were refused and retried too).
    wait_until("the retries counted", &ruled, || {
        let retried: Option<String> = redis.query(&["HGET", "extensions", "retried"]);
        retried.is_some_and(|n| n.parse::<usize>().unwrap() >= 258)
    });
    let retried: String = redis.query(&["HGET", "extensions", "retried"]);
    eprintln!("{RULES} steps due while Redis was out of memory: {retried} retried");
    let failed: Option<String> = redis.query(&["HGET", "extensions", "failed"]);
    assert_eq!(failed.as_deref(), Some("0"), "no step ended failed");
}
