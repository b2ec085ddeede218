//! `redis://host:port` end to end (docs/service.md#connections): the
//! subscription and the hot path's own connections over plain TCP, whose
//! sockets ruled registers for readability only (`socket.rs`). The other
//! tests reach Redis over a unix socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::bundles::{self, payload};
use support::{announce, free_port, librescoot, wait_for, RedisServer, Ruled};

#[test]
fn a_state_notification_is_read_derived_and_acted_on_over_tcp() {
    let port = free_port();
    let redis = RedisServer::start_with(&[
        "--bind".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string(),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let rules = vec![bundles::rule(
        "kickstand",
        &["vehicle.kickstand.up"],
        vec![bundles::redis_step("scooter:seen", "up", 0)],
    )];
    let bundle = bundles::write(
        dir.path(),
        "b",
        &librescoot::with_profile(payload(rules, vec![], vec![])),
    );
    let _: i64 = redis.query(&["HSET", "vehicle", "kickstand", "down"]);
    let url = format!("redis://127.0.0.1:{port}");
    let ruled = Ruled::start_with(&url, &bundle, &[], &[]);
    ruled.wait_ready();
    // Every one of ruled's connections came in over TCP: the server's
    // unix socket is the test's alone.
    let clients: String = redis.query(&["CLIENT", "LIST"]);
    let tcp = format!("laddr=127.0.0.1:{port} ");
    assert!(
        clients.lines().filter(|c| c.contains(&tcp)).count() >= 2,
        "{clients}"
    );
    // The field is read on the bus reader's connection, the push and the
    // derived event go out on the lane's, each a few times over.
    for round in 1..=3 {
        announce(&mut redis.con(), "vehicle", "kickstand", "up");
        wait_for("the rule's push", || {
            redis.list("scooter:seen").len() == round
        });
        announce(&mut redis.con(), "vehicle", "kickstand", "down");
        wait_for("the derived events in stream `events`", || {
            redis.query::<i64>(&["XLEN", "events"]) == 2 * i64::try_from(round).unwrap()
        });
    }
    assert_eq!(redis.list("scooter:seen"), ["up", "up", "up"]);
    ruled.wait_log(&["connected to redis", &url]);
}
