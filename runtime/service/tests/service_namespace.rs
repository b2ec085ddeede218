//! `ruled` on a shared Redis (docs/service.md#key-namespace,
//! docs/events.md): its keys under `--namespace`, beside a stand-in for the
//! Go event-service; the counters hash saying who writes it; the collision
//! warning; and the channel deciding an event's topic. Each test starts its
//! own `redis-server` and `ruled`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::collections::BTreeMap;
use support::bundles::{payload, redis_step, rule, single};
use support::go_service::GoEventService;
use support::{list, now_ms, poll, wait_for, RedisServer, Ruled, Setup};

fn hash(redis: &RedisServer, key: &str) -> BTreeMap<String, String> {
    redis.query(&["HGETALL", key])
}

fn field(redis: &RedisServer, key: &str, name: &str) -> Option<String> {
    redis.query(&["HGET", key, name])
}

fn wait_field(redis: &RedisServer, ruled: &Ruled, key: &str, name: &str, want: &str) {
    let got = poll(|| field(redis, key, name).filter(|v| v == want));
    assert!(
        got.is_some(),
        "{key} {name} never became {want} (is {:?}); log:\n{}",
        field(redis, key, name),
        ruled.log_text()
    );
}

/// A rule whose second step waits `after_ms` (durable): `now`, then `later`.
fn durable(after_ms: u64) -> rulecore::bundle::Payload {
    single(rule(
        "dur",
        &["alarm.triggered"],
        vec![
            redis_step("out", "now", 0),
            redis_step("out", "later", after_ms),
        ],
    ))
}

/// The documented recipe: the Go service on `extensions`, ruled on `ruled`.
/// A durable step parked in ruled survives a restart of both (the Go
/// service's start drops what it does not know from `extensions:pending`)
/// and fires once; ruled's counters are its own.
#[test]
fn beside_the_go_service_with_a_namespace_nothing_is_lost() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&durable(2_000));
    let go = GoEventService::start(&redis);
    let ns = ["--namespace", "ruled"];
    let mut ruled = Ruled::ready(&redis, &bundle, &ns);
    redis.query::<i64>(&["PUBLISH", "ev:alarm.triggered", "{}"]);
    wait_for("first step and a parked record in ruled:pending", || {
        list(&redis, "out") == ["now"] && hash(&redis, "ruled:pending").len() == 1
    });
    assert!(ruled.stop(), "clean stop; log:\n{}", ruled.log_text());
    assert_eq!(field(&redis, "ruled", "state").as_deref(), Some("stopped"));

    // The Go service restarts too: it drops every pending record it does
    // not know, as this planted one shows; ruled's are under its own name.
    let _: i64 = redis.query(&["HSET", "extensions:pending", "planted#1-1", "{}"]);
    drop(go);
    let go = GoEventService::start(&redis);
    assert!(hash(&redis, "extensions:pending").is_empty());
    assert_eq!(hash(&redis, "ruled:pending").len(), 1);

    let mut again = Ruled::ready(&redis, &bundle, &ns);
    again.wait_log(&["run started (replayed)", "rule=dur"]);
    wait_for("the parked step fired", || {
        list(&redis, "out") == ["now", "later"] && hash(&redis, "ruled:pending").is_empty()
    });
    wait_field(&redis, &again, "ruled", "dispatched", "1");
    wait_field(&redis, &again, "ruled", "runs-active", "0");
    // The Go service goes on writing `extensions` meanwhile: twice more.
    let ticks = GoEventService::ticks(&redis);
    wait_for("two more writes of the Go service", || {
        GoEventService::ticks(&redis) >= ticks + 2
    });
    let counters = hash(&redis, "ruled");
    assert_eq!(counters["state"], "running");
    assert_eq!(counters["pid"], again.pid().to_string());
    assert_eq!(counters["rules"], "1");
    assert_eq!(counters["dispatched"], "1");
    assert!(!counters.contains_key("ticks"), "{counters:?}");
    let theirs = hash(&redis, "extensions");
    assert!(!theirs.contains_key("state"), "{theirs:?}");
    assert!(!theirs.contains_key("dispatched"), "{theirs:?}");
    assert!(again.stop(), "clean stop; log:\n{}", again.log_text());
    drop(go);
    assert_eq!(list(&redis, "out"), ["now", "later"], "fired once");
    let log = format!("{}\n{}", ruled.log_text(), again.log_text());
    assert!(!log.contains("namespace collision"), "{log}");
}

/// Without `--namespace` both write `extensions`: ruled says so at start,
/// naming the collision and the flag.
#[test]
fn on_the_go_service_s_namespace_ruled_warns() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&durable(2_000));
    let _go = GoEventService::start(&redis);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let line = ruled.wait_log(&["WARN", "namespace collision", "--namespace"]);
    assert!(line.contains("fields=events-published,ticks"), "{line}");
    assert!(line.contains("never writes"), "{line}");
}

/// A second ruled on the same namespace, while the first runs, warns; a
/// ruled that was SIGKILLed is no collision, but is said to have gone
/// without a clean stop.
#[test]
fn a_second_live_ruled_is_a_collision_a_crashed_one_is_not() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&durable(2_000));
    let mut first = Ruled::ready(&redis, &bundle, &[]);
    // The window is two of the newcomer's stats intervals.
    let interval = ["--stats-interval", "10s"];
    let second = Ruled::ready(&redis, &bundle, &interval);
    let line = second.wait_log(&["WARN", "namespace collision", "another ruled"]);
    assert!(
        line.contains(&format!("other_pid={}", first.pid())),
        "{line}"
    );
    assert!(line.contains("--namespace"), "{line}");
    drop(second);

    first.crash();
    // Both were killed: the hash says `running` of a pid that is gone.
    let third = Ruled::ready(&redis, &bundle, &interval);
    third.wait_log(&["did not stop cleanly"]);
    assert!(
        !third.log_text().contains("namespace collision"),
        "{}",
        third.log_text()
    );
}

/// While up the counters hash names the process; after SIGTERM it says
/// `stopped`.
#[test]
fn the_counters_hash_says_who_runs_and_when_it_stopped() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&durable(2_000));
    let before = now_ms();
    let mut ruled = Ruled::ready(&redis, &bundle, &["--namespace", "rules-v2"]);
    let after = now_ms();
    let counters = hash(&redis, "rules-v2");
    assert_eq!(counters["state"], "running");
    assert_eq!(counters["pid"], ruled.pid().to_string());
    let host = nix::unistd::gethostname().unwrap();
    assert_eq!(counters["host"], host.to_string_lossy());
    let started: i64 = counters["started-at"].parse().unwrap();
    assert!(
        (before..=after).contains(&started),
        "{before} <= {started} <= {after}"
    );
    assert!(
        hash(&redis, "extensions").is_empty(),
        "nothing on the default"
    );
    let pid = ruled.pid().to_string();
    assert!(ruled.stop(), "clean stop; log:\n{}", ruled.log_text());
    let counters = hash(&redis, "rules-v2");
    assert_eq!(counters["state"], "stopped");
    assert_eq!(counters["pid"], pid);
}

/// A bad namespace is refused at the command line, naming what is wrong.
#[test]
fn a_bad_namespace_is_refused() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&durable(2_000));
    let mut ruled = Ruled::start(&redis, &bundle, &["--namespace", "ext*"]);
    assert_eq!(ruled.wait_exit(), Some(2));
    let log = ruled.log_text();
    assert!(
        log.contains("invalid value 'ext*' for '--namespace <NS>'")
            && log.contains("a glob character '*' at byte 3"),
        "{log}"
    );
}

/// A publisher on one channel cannot speak for another topic: a `topic`
/// that differs from the channel's is rejected, counted and logged with
/// both names; an envelope without `topic` takes the channel's.
#[test]
fn the_channel_decides_the_topic() {
    let rules = vec![
        rule(
            "alarm-off",
            &["alarm.disarmed"],
            vec![redis_step("out", "disarmed", 0)],
        ),
        rule(
            "seat",
            &["seatbox.opened"],
            vec![redis_step("out", "seat", 0)],
        ),
    ];
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload(rules, vec![], vec![]));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    assert_eq!(
        field(&redis, "extensions", "rejected").as_deref(),
        Some("0")
    );
    redis.query::<i64>(&[
        "PUBLISH",
        "ev:seatbox.opened",
        r#"{"topic":"alarm.disarmed"}"#,
    ]);
    let line = ruled.wait_log(&["WARN", "skipping an event whose topic"]);
    assert!(
        line.contains(r#"channel="ev:seatbox.opened""#)
            && line.contains(r#""alarm.disarmed" differs from its channel's "seatbox.opened""#),
        "{line}"
    );
    wait_field(&redis, &ruled, "extensions", "rejected", "1");
    // Over 64 KiB: rejected before it is decoded, counted the same way.
    let big = format!(r#"{{"data":{{"blob":"{}"}}}}"#, "x".repeat(70_000));
    redis.query::<i64>(&["PUBLISH", "ev:alarm.disarmed", &big]);
    ruled.wait_log(&["skipping an event of", "over the 64 KiB limit"]);
    wait_field(&redis, &ruled, "extensions", "rejected", "2");
    // No `topic`: the channel's. Same `topic`: as before.
    redis.query::<i64>(&["PUBLISH", "ev:alarm.disarmed", r#"{"src":"alarm"}"#]);
    wait_for("no-topic envelope fired", || {
        list(&redis, "out") == ["disarmed"]
    });
    redis.query::<i64>(&[
        "PUBLISH",
        "ev:seatbox.opened",
        r#"{"topic":"seatbox.opened"}"#,
    ]);
    wait_for("matching topic fired", || {
        list(&redis, "out") == ["disarmed", "seat"]
    });
    wait_field(&redis, &ruled, "extensions", "dispatched", "2");
    assert_eq!(
        field(&redis, "extensions", "rejected").as_deref(),
        Some("2")
    );
    assert_eq!(list(&redis, "out"), ["disarmed", "seat"]);
}
