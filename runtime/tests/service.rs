//! End-to-end tests of the `ruled` binary against a real `redis-server`
//! (DESIGN.md 6): each test starts its own server and its own `ruled`.

mod support;

use support::bundles::{self, hazards, payload};
use support::{poll, wait_for, RedisServer, Ruled};

fn list(redis: &RedisServer, key: &str) -> Vec<String> {
    let mut items: Vec<String> = redis.query(&["LRANGE", key, "0", "-1"]);
    // LPUSH prepends: oldest first reads better.
    items.reverse();
    items
}

fn publish(redis: &RedisServer, topic: &str, json: &str) -> i64 {
    redis.query(&["PUBLISH", &format!("ev:{topic}"), json])
}

#[test]
fn hazards_on_then_off() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundles::write(
        dir.path(),
        "rules.bundle",
        &payload(vec![hazards(300)], vec![], vec![]),
    );
    let ruled = Ruled::start(&redis, &bundle, &[]);
    ruled.wait_ready();
    assert_eq!(
        publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#),
        1,
        "ruled subscribed"
    );
    wait_for("both, then off", || {
        list(&redis, "scooter:blinker") == ["both", "off"]
    });
    let pending: Vec<String> = redis.query(&["HKEYS", "extensions:pending"]);
    assert!(pending.is_empty(), "{pending:?}");
    let dispatched = poll(|| {
        let value: Option<String> = redis.query(&["HGET", "extensions", "dispatched"]);
        value.filter(|v| v == "2")
    });
    assert!(dispatched.is_some(), "counters: {}", ruled.log_text());
}
