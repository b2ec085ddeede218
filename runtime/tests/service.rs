//! End-to-end tests of `ruled` against a real `redis-server` (DESIGN.md 6).

mod support;

use support::RedisServer;

#[test]
fn harness_starts_redis() {
    let redis = RedisServer::start();
    let pong: String = redis.query(&["PING"]);
    assert_eq!(pong, "PONG");
}
