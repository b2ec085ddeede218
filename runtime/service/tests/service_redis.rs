//! The Redis side of the service against a real `redis-server`: the
//! ordered store writer, state seeding, pending-store reads, subscriptions
//! (docs/semantics.md#events, docs/semantics.md#durability-and-replay, docs/semantics.md#state).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use rulecore::bundle::StatePair;
use ruled::bus::read_pairs;
use ruled::connection::connect_manager;
use ruled::direct::Target;
use ruled::namespace::Namespace;
use ruled::pubsub::Delivery;
use ruled::record_store::{read_pending, StoreOp, StoreWriter};
use ruled::subscriptions::{open_pubsub, Subscriptions};
use ruled::tls::Tls;
use ruled_engine::{PendingRecord, RecordWrite};
use std::collections::BTreeSet;
use support::{commandstat, runtime, RedisServer};

async fn manager(redis: &RedisServer) -> redis::aio::ConnectionManager {
    let client = redis::Client::open(redis.url()).unwrap();
    connect_manager(&client).await
}

#[test]
fn store_writes_land_in_issue_order() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let (writer, task) = StoreWriter::start(manager(&redis).await, &Namespace::default());
        for i in 0..1_000 {
            let id = format!("r#1-{i}");
            writer.send(StoreOp::Put {
                id: id.clone(),
                json: "{}".into(),
                write: RecordWrite::First,
            });
            // Every other record is removed right after its put: if a drop
            // ever overtook its put, the record would survive.
            if i % 2 == 0 {
                writer.send(StoreOp::Drop { id, ack: None });
            }
        }
        writer.send(StoreOp::Counters(vec![("rules", "3".into())]));
        writer.send(StoreOp::RuleStats(vec![("a".into(), "{}".into())]));
        writer.flush().await;
        drop(writer);
        task.await.unwrap();
    });
    let left: Vec<String> = redis.query(&["HKEYS", "extensions:pending"]);
    assert_eq!(left.len(), 500);
    assert!(left.iter().all(|id| {
        let n: u32 = id.rsplit('-').next().unwrap().parse().unwrap();
        n % 2 == 1
    }));
    let rules: String = redis.query(&["HGET", "extensions", "rules"]);
    assert_eq!(rules, "3");
    let stats: String = redis.query(&["HGET", "extensions:rules", "a"]);
    assert_eq!(stats, "{}");
}

#[test]
fn a_failed_write_does_not_stop_the_others() {
    let redis = RedisServer::start();
    // The counters key has the wrong type: its HSET fails, the rest lands.
    let _: () = redis.query(&["SET", "extensions", "not a hash"]);
    runtime().block_on(async {
        let (writer, task) = StoreWriter::start(manager(&redis).await, &Namespace::default());
        writer.send(StoreOp::Counters(vec![("rules", "1".into())]));
        writer.send(StoreOp::Put {
            id: "x#1-1".into(),
            json: "{}".into(),
            write: RecordWrite::First,
        });
        writer.flush().await;
        drop(writer);
        task.await.unwrap();
    });
    let left: Vec<String> = redis.query(&["HKEYS", "extensions:pending"]);
    assert_eq!(left, ["x#1-1"]);
}

#[test]
fn seeds_state_with_one_hmget_per_hash_and_reads_pending() {
    let redis = RedisServer::start();
    let _: i64 = redis.query(&["HSET", "vehicle", "state", "parked", "kickstand", "down"]);
    let _: i64 = redis.query(&["HSET", "battery:0", "charge", "80"]);
    let record = r#"{"id":"a#1-2","rule":"a","source":"a.toml","step":1,"iter":0,"fire-at":1,"fingerprint":"00000000000000000000000000000000","event":{"topic":"t"}}"#;
    let _: i64 = redis.query(&["HSET", "extensions:pending", "a#1-1", "{\"x\":1}"]);
    let _: i64 = redis.query(&["HSET", "extensions:pending", "a#1-2", record]);
    let pair = |hash: &str, field: &str| StatePair {
        hash: hash.into(),
        field: field.into(),
    };
    let pairs = vec![
        pair("battery:0", "charge"),
        pair("vehicle", "kickstand"),
        pair("vehicle", "missing"),
        pair("vehicle", "state"),
    ];
    let (seeded, pending) = runtime().block_on(async {
        let mut con = manager(&redis).await;
        let before = commandstat(&redis, "hmget");
        let seeded = read_pairs(&mut con, &pairs, &[0, 1, 2, 3]).await.unwrap();
        assert_eq!(commandstat(&redis, "hmget") - before, 2, "one per hash");
        (
            seeded,
            read_pending(&mut con, &Namespace::default()).await.unwrap(),
        )
    });
    let mut seeded = seeded;
    seeded.sort();
    assert_eq!(
        seeded,
        vec![
            (0, Some("80".to_string())),
            (1, Some("down".to_string())),
            (2, None),
            (3, Some("parked".to_string()))
        ]
    );
    // A value that is not a record is removed while reading.
    let ids: Vec<&str> = pending.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a#1-2"]);
    assert_eq!(
        pending[0],
        PendingRecord::decode_field("a#1-2", record.as_bytes()).unwrap()
    );
    let left: Vec<String> = redis.query(&["HKEYS", "extensions:pending"]);
    assert_eq!(left, ["a#1-2"]);
}

/// Each published event reaches a subscriber once, even where a glob and
/// an exact topic overlap.
#[test]
fn overlapping_patterns_deliver_each_event_once() {
    let redis = RedisServer::start();
    let payload = std::sync::Arc::new(support::bundles::payload(
        vec![
            support::bundles::rule("a", &["button.*", "button.seat"], vec![]),
            support::bundles::rule("b", &["alarm.triggered"], vec![]),
        ],
        vec![],
        vec![],
    ));
    let subs = Subscriptions::compute(&payload, |_| true, BTreeSet::new());
    runtime().block_on(async {
        let client = redis::Client::open(redis.url()).unwrap();
        let mut stream = open_pubsub(&client, &ruled::tls::Tls::default(), &subs)
            .await
            .unwrap();
        for channel in ["ev:button.seat", "ev:alarm.triggered", "ev:other"] {
            let _: i64 = redis.query(&["PUBLISH", channel, "{}"]);
        }
        let _: i64 = redis.query(&["PUBLISH", "ev:button.x", "last"]);
        let mut got = Vec::new();
        loop {
            let delivery = tokio::time::timeout(support::DEADLINE, stream.next())
                .await
                .unwrap()
                .unwrap();
            let Delivery::Message(message) = delivery else {
                panic!("{delivery:?}");
            };
            got.push(message.get_channel_name().to_string());
            if message.get_payload_bytes() == b"last" {
                break;
            }
        }
        assert_eq!(got, ["ev:button.seat", "ev:alarm.triggered", "ev:button.x"]);
    });
}

/// The store queue is bounded: past the limit a put and a counter write are
/// refused (and a refused put's drop skipped), a drop of a written record
/// is still accepted, and once the queue drained writes are accepted again.
#[test]
fn store_queue_is_bounded() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let put = |id: &str| StoreOp::Put {
            id: id.into(),
            json: "x".repeat(100),
            write: RecordWrite::First,
        };
        // Room for a few puts (each ~170 bytes with its overhead).
        let (writer, task) =
            StoreWriter::with_limit(manager(&redis).await, &Namespace::default(), 520);
        // The writer task does not run before this test awaits (one
        // thread): everything sent now waits in the queue.
        assert!(writer.send(put("a#1-1")));
        assert!(writer.send(put("a#1-2")));
        assert!(writer.send(put("a#1-3")));
        assert!(!writer.send(put("a#1-4")), "past the limit");
        assert!(!writer.send(StoreOp::Counters(vec![("rules", "1".into())])));
        assert!(
            writer.send(StoreOp::Drop {
                id: "a#1-1".into(),
                ack: None
            }),
            "drops always queue"
        );
        assert!(
            writer.send(StoreOp::Drop {
                id: "a#1-4".into(),
                ack: None
            }),
            "nothing to remove"
        );
        writer.flush().await;
        assert!(writer.send(put("a#1-5")), "room again once drained");
        writer.flush().await;
        drop(writer);
        task.await.unwrap();
    });
    let mut left: Vec<String> = redis.query(&["HKEYS", "extensions:pending"]);
    left.sort();
    assert_eq!(left, ["a#1-2", "a#1-3", "a#1-5"]);
    let counters: bool = redis.query(&["EXISTS", "extensions"]);
    assert!(!counters);
    let hdels = commandstat(&redis, "hdel");
    assert_eq!(hdels, 1, "the refused put's drop is not sent");
}

/// A record written again (after a reconnect or a clock jump) that the full
/// queue refuses does not make its removal skipped: the first write stands
/// in Redis, and a record left behind would run its step again.
#[test]
fn a_refused_rewrite_keeps_the_removal() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let (writer, task) =
            StoreWriter::with_limit(manager(&redis).await, &Namespace::default(), 520);
        assert!(writer.send(StoreOp::Put {
            id: "a#1-1".into(),
            json: "x".repeat(100),
            write: RecordWrite::First,
        }));
        writer.flush().await;
        for n in 2..=4 {
            assert!(writer.send(StoreOp::Put {
                id: format!("a#1-{n}"),
                json: "x".repeat(100),
                write: RecordWrite::First,
            }));
        }
        assert!(!writer.send(StoreOp::Put {
            id: "a#1-1".into(),
            json: "y".repeat(100),
            write: RecordWrite::Again,
        }));
        assert!(writer.send(StoreOp::Drop {
            id: "a#1-1".into(),
            ack: None
        }));
        writer.flush().await;
        drop(writer);
        task.await.unwrap();
    });
    let mut left: Vec<String> = redis.query(&["HKEYS", "extensions:pending"]);
    left.sort();
    assert_eq!(left, ["a#1-2", "a#1-3", "a#1-4"]);
}

/// ruled's own connections (docs/service.md#connections): one the server
/// closed is replaced before the next request, which lands once; a reply
/// that does not come in time is set aside, the request still runs once
/// Redis resumes, and the next request gets its own reply.
#[test]
fn own_connections_replace_a_closed_one_and_set_late_replies_aside() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let client = redis::Client::open(redis.url()).unwrap();
        let target = Target::new(client.get_connection_info().clone(), Tls::default());
        let mut con = target.connection(None);
        let push = |value: &str| {
            let mut cmd = redis::cmd("LPUSH");
            cmd.arg("own:list").arg(value);
            cmd
        };
        let pushed: i64 = con.query(&push("a")).await.unwrap();
        assert_eq!(pushed, 1);
        let id: i64 = con.query(redis::cmd("CLIENT").arg("ID")).await.unwrap();
        let killed: i64 = redis.query(&["CLIENT", "KILL", "ID", &id.to_string()]);
        assert_eq!(killed, 1);
        // The runtime sees the closed socket at its next turn.
        tokio::task::yield_now().await;
        let pushed: i64 = con.query(&push("b")).await.unwrap();
        assert_eq!(pushed, 2, "pushed once, on a new connection");
        let new_id: i64 = con.query(redis::cmd("CLIENT").arg("ID")).await.unwrap();
        assert_ne!(new_id, id);

        let _: () = redis.query(&["CLIENT", "PAUSE", "500", "WRITE"]);
        let mut bytes = Vec::new();
        push("c").write_packed_command(&mut bytes);
        let late = con
            .send_within(&bytes, 1, Some(std::time::Duration::from_millis(50)))
            .await;
        assert!(late.is_err_and(|e| e.is_timeout()), "no reply in time");
        support::wait_for("the paused push after the pause", || {
            redis.list("own:list").len() == 3
        });
        let missing: Option<String> = con
            .query(redis::cmd("GET").arg("own:missing"))
            .await
            .unwrap();
        assert_eq!(missing, None, "its own reply, not the push's late one");
        assert_eq!(redis.list("own:list"), ["a", "b", "c"], "each pushed once");
    });
}
