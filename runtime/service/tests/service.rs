//! End-to-end tests of the `ruled` binary against a real `redis-server`
//! (docs/semantics.md): each test starts its own server and its own `ruled`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::sync::Arc;
use support::bundles::{self, hazards, payload, single};
use support::{list, now_ms, poll, wait_for, RedisServer, Ruled, Setup};

fn publish(redis: &RedisServer, topic: &str, json: &str) -> i64 {
    redis.query(&["PUBLISH", &format!("ev:{topic}"), json])
}

#[test]
fn hazards_on_then_off() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(300)));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
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

fn counter(redis: &RedisServer, field: &str) -> Option<String> {
    redis.query(&["HGET", "extensions", field])
}

fn wait_counter(redis: &RedisServer, ruled: &Ruled, field: &str, want: &str) {
    let got = poll(|| counter(redis, field).filter(|v| v == want));
    assert!(
        got.is_some(),
        "counter {field} never became {want} (is {:?}); log:\n{}",
        counter(redis, field),
        ruled.log_text()
    );
}

fn pending_ids(redis: &RedisServer) -> Vec<String> {
    redis.query(&["HKEYS", "extensions:pending"])
}

#[test]
fn counters_are_published_in_full_at_start() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let payload = payload(vec![hazards(300)], vec![], vec![]);
    let bundle = bundles::write(dir.path(), "rules.bundle", &payload);
    let id = rulecore_io::bundle_file::read(&bundle).unwrap().id;
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let all: std::collections::BTreeMap<String, String> = redis.query(&["HGETALL", "extensions"]);
    let fields: Vec<&str> = all.keys().map(String::as_str).collect();
    assert_eq!(
        fields,
        [
            "bundle",
            "dispatched",
            "dropped",
            "failed",
            "guarded",
            "host",
            "keys-forgotten",
            "limited",
            "overflow",
            "pending",
            "pid",
            "refused",
            "rejected",
            "retried",
            "rules",
            "runs-active",
            "started-at",
            "state",
            "tripped",
            "version"
        ]
    );
    assert_eq!(all["bundle"], id);
    assert_eq!(all["rules"], "1");
    assert_eq!(all["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(all["dispatched"], "0");
    assert!(ruled.log_text().contains(&id), "the bundle id is logged");

    // While the off step waits: one armed timer, one active run.
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("both", || list(&redis, "scooter:blinker") == ["both"]);
    wait_counter(&redis, &ruled, "dispatched", "2");
    wait_counter(&redis, &ruled, "runs-active", "0");
    wait_counter(&redis, &ruled, "pending", "0");
    let stats = poll(|| {
        let json: Option<String> = redis.query(&["HGET", "extensions:rules", "hazards-on-alarm"]);
        let stats: serde_json::Value = serde_json::from_str(&json?).ok()?;
        (stats["runs"] == 1 && stats["active"] == 0).then_some(stats)
    })
    .unwrap_or_else(|| panic!("per-rule stats; log:\n{}", ruled.log_text()));
    assert_eq!(stats["errors"], 0);
    assert!(
        stats["last-fire"].as_i64().unwrap() > 1_600_000_000_000,
        "{stats}"
    );
}

#[test]
fn undecodable_events_are_skipped_with_channel_and_reason() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(0)));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "alarm.triggered", "secret-payload{");
    publish(
        &redis,
        "alarm.triggered",
        r#"{"topic":"alarm.triggered","data":[1]}"#,
    );
    let line = ruled.wait_log(&["does not decode", "ev:alarm.triggered"]);
    assert!(!line.contains("secret-payload"), "{line}");
    ruled.wait_log(&["does not decode", "`data` must be an object"]);
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("a good event still fires", || {
        list(&redis, "scooter:blinker") == ["both", "off"]
    });
    assert!(!ruled.log_text().contains("secret-payload"));
}

/// An event over 64 KiB is skipped with its size (a queue of such events
/// could pass the 48 MB budget); a normal one still fires.
#[test]
fn an_oversized_event_is_skipped_with_its_size() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(0)));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let big = format!(
        r#"{{"topic":"alarm.triggered","data":{{"blob":"{}"}}}}"#,
        "x".repeat(70_000)
    );
    publish(&redis, "alarm.triggered", &big);
    let line = ruled.wait_log(&["skipping an event of", "over the 64 KiB limit"]);
    assert!(line.contains("ev:alarm.triggered"), "{line}");
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("a normal event still fires", || {
        list(&redis, "scooter:blinker") == ["both", "off"]
    });
    assert_eq!(list(&redis, "scooter:blinker"), ["both", "off"]);
}

/// A publisher spamming undecodable payloads gets 10 warn lines, then one
/// line (here at stop) with how many were held back.
#[test]
fn a_flood_of_undecodable_events_is_not_one_warn_line_each() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(0)));
    let mut ruled = Ruled::ready(&redis, &bundle, &[]);
    for _ in 0..100 {
        publish(&redis, "alarm.triggered", "not json");
    }
    // A good event after the flood: everything before it was handled.
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("the good event fired", || {
        list(&redis, "scooter:blinker") == ["both", "off"]
    });
    assert!(ruled.stop(), "clean exit; log:\n{}", ruled.log_text());
    let log = ruled.log_text();
    let warned = warn_lines(&log, "does not decode");
    assert_eq!(warned, 10, "{log}");
    assert!(
        log.contains("WARN more lines held back (shown at debug) lines=90 window_s=10"),
        "{log}"
    );
}

#[test]
fn cancel_on_stops_the_waiting_step() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut rule = hazards(3_000);
    rule.options_mut().cancel_on =
        vec![rulecore::TopicPattern::parse("alarm.disarmed").unwrap()].into();
    let bundle = bundles::write(dir.path(), "b", &single(rule));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("both and a pending record", || {
        list(&redis, "scooter:blinker") == ["both"] && pending_ids(&redis).len() == 1
    });
    publish(&redis, "alarm.disarmed", r#"{"topic":"alarm.disarmed"}"#);
    wait_for("record removed by the cancel", || {
        pending_ids(&redis).is_empty()
    });
    ruled.wait_log(&["run ended", "reason=\"cancelled\""]);
    // Plain values, not Rust's `Some("..")`.
    let line = ruled.wait_log(&["removing pending record", "reason=\"cancelled\""]);
    assert!(line.contains(" rule=hazards-on-alarm "), "{line}");
    wait_counter(&redis, &ruled, "runs-active", "0");
    assert_eq!(list(&redis, "scooter:blinker"), ["both"]);
}

/// Three rules, one per policy, each `start` now and `end` 2s later;
/// each gets two triggers while its first run waits.
#[test]
fn concurrency_policies() {
    use rulecore::bundle::Concurrency;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let make = |name: &str, policy| {
        let mut rule = bundles::rule(
            name,
            &[&format!("{name}.go")],
            vec![
                bundles::redis_step(name, "start", 0),
                bundles::redis_step(name, "end", 2_000),
            ],
        );
        rule.concurrency = policy;
        rule
    };
    let rules = vec![
        make("restart", Concurrency::Restart),
        make("drop", Concurrency::Drop),
        make("queue", Concurrency::Queue),
    ];
    let bundle = bundles::write(dir.path(), "b", &payload(rules, vec![], vec![]));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    for name in ["restart", "drop", "queue"] {
        let topic = format!("{name}.go");
        let json = format!(r#"{{"topic":"{topic}"}}"#);
        publish(&redis, &topic, &json);
        wait_for(&format!("{name}: first start"), || {
            list(&redis, name) == ["start"]
        });
        publish(&redis, &topic, &json);
    }
    wait_for("every run finished", || {
        counter(&redis, "runs-active").as_deref() == Some("0")
            && counter(&redis, "pending").as_deref() == Some("0")
            && pending_ids(&redis).is_empty()
    });
    assert_eq!(list(&redis, "restart"), ["start", "start", "end"]);
    assert_eq!(list(&redis, "drop"), ["start", "end"]);
    assert_eq!(list(&redis, "queue"), ["start", "end", "start", "end"]);
    // In words, as docs/service.md lists them.
    ruled.wait_log(&["rule=drop", "trigger dropped: a run is live"]);
    ruled.wait_log(&["rule=queue", "trigger queued: a run is live"]);
    ruled.wait_log(&["rule=restart", "reason=\"restarted\""]);
}

/// SIGKILL while a durable step waits; the next start fires it once, at
/// its original due time.
#[test]
fn crash_then_replay_fires_once_on_time() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(3_000)));
    let mut ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(
        &redis,
        "alarm.triggered",
        r#"{"topic":"alarm.triggered","id":"ev-1"}"#,
    );
    wait_for("both and a pending record", || {
        list(&redis, "scooter:blinker") == ["both"] && pending_ids(&redis).len() == 1
    });
    let id = pending_ids(&redis).remove(0);
    assert!(id.starts_with("hazards-on-alarm#"), "{id}");
    let json: String = redis.query(&["HGET", "extensions:pending", &id]);
    let record: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(record["step"], 1);
    assert_eq!(record["iter"], 0);
    assert_eq!(record["event"]["id"], "ev-1");
    let fire_at = record["fire-at"].as_i64().unwrap();
    ruled.crash();

    let again = Ruled::ready(&redis, &bundle, &[]);
    // A resumed record is a run start like a live one (counted in `runs`).
    again.wait_log(&["run started (replayed)", &id, "step=1"]);
    wait_for("off after replay", || {
        list(&redis, "scooter:blinker") == ["both", "off"]
    });
    let seen = now_ms();
    assert!(seen >= fire_at, "fired {}ms early", fire_at - seen);
    assert!(seen < fire_at + 5_000, "fired {}ms late", seen - fire_at);
    wait_for("record removed", || pending_ids(&redis).is_empty());
    wait_counter(&redis, &again, "runs-active", "0");
    assert_eq!(
        list(&redis, "scooter:blinker"),
        ["both", "off"],
        "fired once"
    );
    // The replayed run counts as a run; it is not a new firing of the rule
    // (its trigger came before the crash): `last-fire` stays unknown.
    wait_for("replayed run in the rule's statistics", || {
        let json: Option<String> = redis.query(&["HGET", "extensions:rules", "hazards-on-alarm"]);
        json.is_some_and(|json| {
            let stats: serde_json::Value = serde_json::from_str(&json).unwrap();
            stats["runs"] == 1 && stats["last-fire"].is_null() && stats["active"] == 0
        })
    });
}

/// A rebuilt bundle whose waiting step changed: the record is dropped with
/// a log line and nothing fires.
#[test]
fn changed_fingerprint_drops_the_record() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let old = bundles::write(dir.path(), "old", &single(hazards(5_000)));
    let mut changed = hazards(5_000);
    Arc::make_mut(&mut changed.steps)[1] = bundles::redis_step("scooter:blinker", "left", 5_000);
    let new = bundles::write(dir.path(), "new", &single(changed));

    let mut ruled = Ruled::ready(&redis, &old, &[]);
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("both and a pending record", || {
        list(&redis, "scooter:blinker") == ["both"] && pending_ids(&redis).len() == 1
    });
    ruled.crash();

    let id = pending_ids(&redis).remove(0);
    let again = Ruled::ready(&redis, &new, &[]);
    let line = again.wait_log(&["pending record removed at replay", "reason=\"fingerprint\""]);
    assert!(line.contains("the step changed"), "{line}");
    assert!(pending_ids(&redis).is_empty(), "dropped before subscribing");
    // One line per removal, also at debug.
    let about: Vec<String> = again
        .log()
        .into_iter()
        .filter(|l| l.contains(&id))
        .collect();
    assert_eq!(about.len(), 1, "{about:#?}");
    wait_counter(&redis, &again, "runs-active", "0");
    assert_eq!(list(&redis, "scooter:blinker"), ["both"]);
}

#[test]
fn corrupt_record_is_removed_with_a_log_line() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(300)));
    let _: i64 = redis.query(&["HSET", "extensions:pending", "garbled#1-1", "{not json"]);
    // Valid JSON of a record, filed under another run's field.
    let record = serde_json::json!({
        "id": "hazards-on-alarm#1-7", "rule": "hazards-on-alarm", "source": "test.toml",
        "step": 1, "iter": 0, "fire-at": now_ms(), "fingerprint": "00".repeat(16),
        "event": {"topic": "alarm.triggered"}
    });
    let _: i64 = redis.query(&[
        "HSET",
        "extensions:pending",
        "hazards-on-alarm#1-8",
        &record.to_string(),
    ]);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    ruled.wait_log(&[
        "removing pending record",
        "garbled#1-1",
        "reason=\"not-a-record\"",
    ]);
    let line = ruled.wait_log(&[
        "removing pending record",
        "run=hazards-on-alarm#1-8",
        "reason=\"id-mismatch\"",
    ]);
    assert!(line.contains("differs from its hash field"), "{line}");
    wait_for("corrupt records gone", || pending_ids(&redis).is_empty());
    let log = ruled.log_text();
    assert!(!log.contains("undecodable"), "{log}");
    for id in ["garbled#1-1", "hazards-on-alarm#1-8"] {
        let lines = ruled.log().iter().filter(|l| l.contains(id)).count();
        assert_eq!(lines, 1, "one line for {id}:\n{log}");
    }
}

/// `stop` keeps the records of waiting runs (docs/semantics.md#durability-and-replay, docs/service.md#start-and-stop).
#[test]
fn sigterm_keeps_waiting_records() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(60_000)));
    let mut ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("a pending record", || pending_ids(&redis).len() == 1);
    assert!(ruled.stop(), "clean exit; log:\n{}", ruled.log_text());
    assert!(ruled.log_text().contains("pending record kept"));
    assert_eq!(pending_ids(&redis).len(), 1);
    let (_, subscribers): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", "ev:alarm.triggered"]);
    assert_eq!(subscribers, 0);
}

#[test]
fn bad_bundle_is_a_fatal_error_naming_the_check() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(300)));
    let mut bytes = std::fs::read(&bundle).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xFF;
    std::fs::write(&bundle, bytes).unwrap();
    let mut ruled = Ruled::start(&redis, &bundle, &[]);
    let code = ruled.wait_exit();
    assert_eq!(code, Some(1), "log:\n{}", ruled.log_text());
    let log = ruled.log_text();
    assert!(log.contains("digest does not match"), "{log}");
    assert!(log.contains(&bundle.display().to_string()), "{log}");
}

/// Write commands seen by the server so far, from INFO commandstats.
fn write_calls(redis: &RedisServer) -> std::collections::BTreeMap<String, u64> {
    let info: String = redis.query(&["INFO", "commandstats"]);
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            let write = [
                "hset",
                "hdel",
                "hmset",
                "lpush",
                "publish",
                "subscribe",
                "psubscribe",
                "del",
                "set",
            ];
            write.contains(&name).then(|| (name.to_string(), calls))
        })
        .collect()
}

/// No live rule: no subscription (not even to the state a replay-only
/// rule reads), and no writes after the counters at start.
#[test]
fn idle_costs_nothing() {
    use rulecore::bundle::StatePair;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (program, consts) = bundles::state_equals("parked");
    let mut disabled = hazards(300);
    disabled.enabled = false;
    disabled.when = Some(Box::new(program));
    let pairs = vec![StatePair {
        hash: "vehicle".into(),
        field: "state".into(),
    }];
    let bundle = bundles::write(dir.path(), "b", &payload(vec![disabled], pairs, consts));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    ruled.wait_log(&["not subscribing to anything"]);
    wait_for("counters and rule statistics written at start", || {
        let stats: Vec<String> = redis.query(&["HKEYS", "extensions:rules"]);
        counter(&redis, "rules").as_deref() == Some("0") && stats == ["hazards-on-alarm"]
    });
    let before = write_calls(&redis);
    // Several stats intervals (200ms in tests) pass with nothing to say.
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    assert_eq!(write_calls(&redis), before);
    let clients: String = redis.query(&["CLIENT", "LIST"]);
    assert!(
        !clients.lines().any(|l| !l.contains("sub=0 psub=0")),
        "{clients}"
    );
    let patterns: i64 = redis.query(&["PUBSUB", "NUMPAT"]);
    assert_eq!(patterns, 0);
    let channels: Vec<String> = redis.query(&["PUBSUB", "CHANNELS"]);
    assert!(channels.is_empty(), "{channels:?}");
}

/// Two rules on `seat.opened`: `when-parked` pushes `yes` to `parked` when
/// `state("vehicle", "state") == "parked"`; `marker` always pushes `seen`
/// to `marker`. With `--workers 1` the marker's push runs after the other
/// one: once it is visible, the conditioned push would be too.
fn when_parked() -> rulecore::bundle::Payload {
    let (program, consts) = bundles::state_equals("parked");
    let mut conditioned = bundles::rule(
        "when-parked",
        &["seat.opened"],
        vec![bundles::redis_step("parked", "yes", 0)],
    );
    conditioned.when = Some(Box::new(program));
    let marker = bundles::rule(
        "marker",
        &["seat.opened"],
        vec![bundles::redis_step("marker", "seen", 0)],
    );
    let pairs = vec![rulecore::bundle::StatePair {
        hash: "vehicle".into(),
        field: "state".into(),
    }];
    payload(vec![conditioned, marker], pairs, consts)
}

/// `state()` is seeded at start and follows `HSET` + `PUBLISH <hash> <field>`.
#[test]
fn state_follows_change_notifications() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&when_parked());
    let _: i64 = redis.query(&["HSET", "vehicle", "state", "parked"]);
    let ruled = Ruled::ready(&redis, &bundle, &["--workers", "1"]);
    let seat = r#"{"topic":"seat.opened"}"#;

    publish(&redis, "seat.opened", seat);
    wait_for("seeded state: fired", || {
        list(&redis, "parked").len() == 1 && list(&redis, "marker").len() == 1
    });

    let _: i64 = redis.query(&["HSET", "vehicle", "state", "stand-by"]);
    let _: i64 = redis.query(&["PUBLISH", "vehicle", "state"]);
    ruled.wait_log(&["state changed", "vehicle"]);
    publish(&redis, "seat.opened", seat);
    wait_for("marker", || list(&redis, "marker").len() == 2);
    assert_eq!(list(&redis, "parked").len(), 1, "not parked: no push");

    let _: i64 = redis.query(&["HSET", "vehicle", "state", "parked"]);
    let _: i64 = redis.query(&["PUBLISH", "vehicle", "state"]);
    wait_for("second state change read", || {
        ruled
            .log()
            .iter()
            .filter(|l| l.contains("state changed"))
            .count()
            >= 2
    });
    publish(&redis, "seat.opened", seat);
    wait_for("parked again: fired", || list(&redis, "parked").len() == 2);
}

/// `exec` end to end: env and stdin reach the command; a timeout kills the
/// whole group (a background child too) and counts `failed`.
#[test]
fn exec_env_stdin_and_timeout_kill() {
    let Setup { redis, dir, bundle } = Setup::with(|dir| {
        let out = dir.join("out").display().to_string();
        let record = support::script(
            dir,
            "record.sh",
            &format!("cat > {out}.stdin\necho \"$LS_TOPIC $LS_ID $LS_DATA_LEVEL\" > {out}.env"),
        );
        let hang = support::script(
            dir,
            "hang.sh",
            &format!("sleep 600 &\necho $! > {out}.child\necho $$ > {out}.self\nwait"),
        );
        let rules = vec![
            bundles::rule(
                "record",
                &["x.record"],
                vec![bundles::exec_step(&record, 5_000, 0)],
            ),
            bundles::rule(
                "hang",
                &["x.hang"],
                vec![bundles::exec_step(&hang, 2_000, 0)],
            ),
        ];
        payload(rules, vec![], vec![])
    });
    let out = dir.path().join("out");
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let json = r#"{"topic":"x.record","id":"e7","data":{"level":3}}"#;
    publish(&redis, "x.record", json);
    let env_file = format!("{}.env", out.display());
    wait_for("record.sh ran", || {
        std::fs::read_to_string(&env_file).is_ok_and(|s| s.ends_with('\n'))
    });
    assert_eq!(
        std::fs::read_to_string(&env_file).unwrap(),
        "x.record e7 3\n"
    );
    let stdin = std::fs::read(format!("{}.stdin", out.display())).unwrap();
    let event: serde_json::Value = serde_json::from_slice(&stdin).unwrap();
    assert_eq!(event["data"]["level"], 3);

    publish(&redis, "x.hang", r#"{"topic":"x.hang"}"#);
    wait_counter(&redis, &ruled, "failed", "1");
    ruled.wait_log(&["timed out"]);
    let pid = |suffix: &str| support::wait_pid(&out.with_extension(suffix));
    let (child, parent) = (pid("child"), pid("self"));
    wait_for("script and background child gone", || {
        !support::alive(child) && !support::alive(parent)
    });
}

/// A killed subscriber connection is restored; events after that fire.
#[test]
fn reconnects_after_client_kill() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(0)));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let killed: i64 = redis.query(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert_eq!(killed, 1);
    ruled.wait_log(&["pub/sub connection lost", "not replayed"]);
    ruled.wait_log(&["pub/sub subscription restored"]);
    let receivers = publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    assert_eq!(receivers, 1);
    wait_for("fired after reconnect", || {
        list(&redis, "scooter:blinker") == ["both", "off"]
    });
}

/// Every flag also reads its environment variable, and `--log-level`
/// really filters: at `warn`, none of the info lines appear.
#[test]
fn env_configuration_and_log_filter() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(0)));
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .env("RULED_REDIS", redis.url())
        .env("RULED_BUNDLE", &bundle)
        .env("RULED_LOG_LEVEL", "warn")
        .env("RULED_WORKERS", "1")
        .env("RULED_STATS_INTERVAL", "100ms")
        .env_remove("JOURNAL_STREAM")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("subscribed through env configuration", || {
        let (_, n): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", "ev:alarm.triggered"]);
        n == 1
    });
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("fired", || {
        list(&redis, "scooter:blinker") == ["both", "off"]
    });
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!log.contains("INFO"), "{log}");
    assert!(!log.contains("ruled ready"), "{log}");
}

#[test]
fn help_has_an_example_and_bad_flags_are_refused() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("Example:"), "{text}");
    for flag in [
        "--redis",
        "--bundle",
        "--workers",
        "--queue",
        "--replay-window",
        "--stats-interval",
        "--traces",
        "--trace-memory",
        "--log-level",
        "RULED_REDIS",
    ] {
        assert!(text.contains(flag), "{flag} missing:\n{text}");
    }
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["--bundle", "x", "--stats-interval", "10"])
        .env_remove("RULED_STATS_INTERVAL")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("missing unit"));
    // A bare word that is not a level would otherwise silence every log.
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["--bundle", "x", "--log-level", "verbose"])
        .env_remove("RULED_LOG_LEVEL")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a level"));
    // A negative number or duration gets the range message, not clap's
    // "unexpected argument '-1' found".
    for (flag, value, says) in [
        ("--workers", "-1", "-1 is not in 1..="),
        ("--workers", "0", "0 is not in 1..="),
        ("--queue", "-1", "-1 is not in 0..="),
        ("--stats-interval", "-1s", "must be positive"),
        ("--stats-interval", "0s", "must be positive"),
        ("--traces", "-1", "-1 is not in 0..="),
        ("--trace-memory", "-1", "expected a number of bytes"),
        ("--trace-memory", "1GB", "optionally with KiB or MiB"),
    ] {
        let bad = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
            .args(["--bundle", "x", flag, value])
            .env_remove("RULED_WORKERS")
            .env_remove("RULED_QUEUE")
            .env_remove("RULED_STATS_INTERVAL")
            .env_remove("RULED_TRACES")
            .env_remove("RULED_TRACE_MEMORY")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(bad.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(says), "{flag} {value}: {stderr}");
    }
    // A negative replay window is valid (it means zero): the start goes on
    // to the (missing) bundle.
    let ok = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["--bundle", "/nonexistent/b", "--replay-window", "-1s"])
        .env_remove("RULED_REPLAY_WINDOW")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&ok.stderr);
    assert_eq!(ok.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot read bundle"), "{stderr}");
}

/// A malformed `--redis` URL is a fatal error naming it, at once.
#[test]
fn bad_redis_url_is_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundles::write(dir.path(), "b", &single(hazards(0)));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["--redis", "http://localhost:6379", "--bundle"])
        .arg(&bundle)
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("invalid redis URL `http://localhost:6379`"),
        "{log}"
    );
}

/// A hand-written record 10 minutes overdue: removed as too late with the
/// default 5-minute window, run at once with `--replay-window 1h`.
#[test]
fn replay_window_decides_overdue_records() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let payload = payload(vec![hazards(60_000)], vec![], vec![]);
    let bundle = bundles::write(dir.path(), "b", &payload);
    let fingerprint = payload.rules[0].steps[1].fingerprint.to_string();
    let record = |id: &str| {
        serde_json::json!({
            "id": id, "rule": "hazards-on-alarm", "source": "test.toml", "step": 1,
            "iter": 0, "fire-at": now_ms() - 600_000, "fingerprint": fingerprint,
            "event": {"topic": "alarm.triggered"}
        })
        .to_string()
    };
    let _: i64 = redis.query(&[
        "HSET",
        "extensions:pending",
        "hazards-on-alarm#1-1",
        &record("hazards-on-alarm#1-1"),
    ]);
    let mut ruled = Ruled::ready(&redis, &bundle, &[]);
    ruled.wait_log(&["pending record removed at replay", "replay window"]);
    assert!(pending_ids(&redis).is_empty());
    assert!(list(&redis, "scooter:blinker").is_empty());
    assert!(ruled.stop());

    let _: i64 = redis.query(&[
        "HSET",
        "extensions:pending",
        "hazards-on-alarm#1-2",
        &record("hazards-on-alarm#1-2"),
    ]);
    let _ruled = Ruled::ready(&redis, &bundle, &["--replay-window", "1h"]);
    wait_for("overdue step runs at once", || {
        list(&redis, "scooter:blinker") == ["off"]
    });
    wait_for("record removed", || pending_ids(&redis).is_empty());
}

/// One worker (`--workers 1 --queue <queue>`) kept busy by a script that
/// sleeps (rule `busy` on `x.busy`, its step `busy_after_ms` after the
/// trigger), beside rule `<other>` on `x.<other>`: one durable redis step
/// 200 ms after its trigger. Returns the setup, ruled (ready, `x.busy`
/// published, the script running), and the script's pid.
fn busy_worker(busy_after_ms: u64, other: &str, queue: &str) -> (Setup, Ruled, i32) {
    let mut pid_file = std::path::PathBuf::new();
    let setup = Setup::with(|dir| {
        let (busy, pid) = support::busy_script(dir, "busy.sh");
        pid_file = pid;
        // An `exec` step too: it needs the worker (a `redis` step would
        // go to the Redis lane beside it).
        let ran = dir.join(format!("{other}.ran")).display().to_string();
        let marker = support::script(dir, &format!("{other}.sh"), &format!("touch {ran}"));
        let rules = vec![
            bundles::rule(
                "busy",
                &["x.busy"],
                vec![bundles::exec_step(&busy, 600_000, busy_after_ms)],
            ),
            bundles::rule(
                other,
                &[&format!("x.{other}")],
                vec![bundles::exec_step(&marker, 5_000, 200)],
            ),
        ];
        payload(rules, vec![], vec![])
    });
    let ruled = Ruled::ready(
        &setup.redis,
        &setup.bundle,
        &["--workers", "1", "--queue", queue],
    );
    publish(&setup.redis, "x.busy", r#"{"topic":"x.busy"}"#);
    let pid = support::wait_pid(&pid_file);
    (setup, ruled, pid)
}

/// The `WARN` lines of `rule` in ruled's log so far.
fn rule_warnings(ruled: &Ruled, rule: &str) -> Vec<String> {
    let field = format!("rule={rule}");
    ruled
        .log()
        .into_iter()
        .filter(|l| l.contains("WARN") && l.contains(&field))
        .collect()
}

/// A durable step the pool refuses (one busy worker, no queue) keeps its
/// pending record and waits for room in the due backlog: not `dropped`, no
/// warning. At stop the running exec's group is killed and the waiting
/// step's record stays for the next start.
#[test]
fn refused_durable_step_waits_with_its_record_and_stop_kills_exec() {
    let (setup, mut ruled, pid) = busy_worker(0, "later", "0");
    let Setup { redis, dir, .. } = setup;
    publish(&redis, "x.later", r#"{"topic":"x.later"}"#);
    ruled.wait_log(&[
        "rule=later",
        "worker pool full: the durable step waits for room",
    ]);
    ruled.wait_log(&["rule=later", "step due, worker pool full: waiting for room"]);
    let warnings = rule_warnings(&ruled, "later");
    assert!(warnings.is_empty(), "{warnings:#?}");
    let kept = pending_ids(&redis);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].starts_with("later#"), "{kept:?}");
    assert!(!dir.path().join("later.ran").exists());

    assert!(support::alive(pid));
    assert!(ruled.stop(), "clean exit; log:\n{}", ruled.log_text());
    wait_for("exec killed at stop", || !support::alive(pid));
    assert_eq!(
        pending_ids(&redis).len(),
        1,
        "the waiting step's record stays"
    );
    assert_eq!(counter(&redis, "dropped").as_deref(), Some("0"));
}

/// A non-durable step the pool refuses still ends its run, counts
/// `dropped`, and says so at `warn` with the cause.
#[test]
fn refused_non_durable_step_ends_its_run_and_counts_dropped() {
    let (setup, ruled, _pid) = busy_worker(0, "now", "0");
    let Setup {
        redis, dir: _dir, ..
    } = setup;
    // `busy` again: its step has no `after`, so no record.
    publish(&redis, "x.busy", r#"{"topic":"x.busy"}"#);
    wait_counter(&redis, &ruled, "dropped", "1");
    ruled.wait_log(&["rule=busy", "reason=\"refused\""]);
    let warnings = rule_warnings(&ruled, "busy");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("cause=worker queue full"),
        "{warnings:#?}"
    );
}

/// The whole server goes away and comes back (empty): ruled resubscribes,
/// and its command connection reconnects for the actions.
#[test]
fn survives_a_redis_restart() {
    let Setup {
        mut redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(0)));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    redis.restart();
    ruled.wait_log(&["pub/sub connection lost", "not replayed"]);
    ruled.wait_log(&["pub/sub subscription restored"]);
    // The command connection is woken right after the resubscription,
    // before the next event is handled: the first actions already succeed.
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("fired after the restart", || {
        list(&redis, "scooter:blinker") == ["both", "off"]
    });
    // The new server started empty: the counters were written in full again.
    let id = rulecore_io::bundle_file::read(&bundle).unwrap().id;
    wait_for("counters rewritten", || {
        counter(&redis, "bundle").as_deref() == Some(id.as_str())
            && counter(&redis, "dispatched").as_deref() == Some("2")
    });
    assert!(
        !ruled.log_text().contains("action failed"),
        "{}",
        ruled.log_text()
    );
}

/// A burst of triggers refused by a full `queue` backlog does not write one
/// warn line each: the rule's log budget lets 10 through, the rest go to
/// `debug`, and one line says how many were held back (here at the stop,
/// which closes the window). The counter counts every refusal.
#[test]
fn a_burst_of_refusals_is_not_one_warn_line_each() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::with(|dir| {
        let (busy, _pid) = support::busy_script(dir, "busy.sh");
        let mut rule = bundles::rule("q", &["q.go"], vec![bundles::exec_step(&busy, 600_000, 0)]);
        rule.concurrency = rulecore::bundle::Concurrency::Queue;
        single(rule)
    });
    let mut ruled = Ruled::ready(&redis, &bundle, &["--stats-interval", "50ms"]);
    for _ in 0..200 {
        publish(&redis, "q.go", r#"{"topic":"q.go"}"#);
    }
    wait_for("every refusal counted", || {
        counter(&redis, "refused").as_deref() == Some("191")
    });
    assert!(ruled.stop(), "clean exit; log:\n{}", ruled.log_text());
    let log = ruled.log_text();
    let warned = warn_lines(&log, "trigger refused");
    assert_eq!(warned, 10, "{log}");
    // 200 triggers: one runs, 8 wait in the backlog, 191 are refused; 10
    // refusals were logged at warn, and the rest held back with the failure
    // of the busy action killed at the stop (a warn line of the same rule).
    assert!(
        log.contains("more lines of this rule held back (shown at debug) rule=q lines=182"),
        "{log}"
    );
}

/// Redis restarts empty while a durable step waits: ruled writes the
/// waiting run's record again after the reconnect (same value), so a stop
/// or crash of ruled afterwards still leaves the step for the next start.
#[test]
fn pending_records_are_written_again_after_a_redis_restart() {
    let Setup {
        mut redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(600_000)));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    let before = poll(|| {
        let fields: Vec<(String, String)> = redis.query(&["HGETALL", "extensions:pending"]);
        fields.into_iter().next()
    })
    .expect("record written");
    redis.restart();
    ruled.wait_log(&["pending records written again", "records=1"]);
    let after = poll(|| {
        let fields: Vec<(String, String)> = redis.query(&["HGETALL", "extensions:pending"]);
        fields.into_iter().next()
    })
    .expect("record written again");
    assert_eq!(before, after, "the same record, fire-at included");
}

/// Under systemd (`JOURNAL_STREAM` set) lines carry a `<N>` priority and no
/// timestamp.
#[test]
fn journal_lines_have_priority_and_no_timestamp() {
    let redis = RedisServer::start();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args([
            "--redis",
            &redis.url(),
            "--bundle",
            "/nonexistent/rules.bundle",
        ])
        .env("JOURNAL_STREAM", "8:12345")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let log = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = log.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<6>INFO ruled starting")),
        "{log}"
    );
    // The level's name follows the priority unpadded, the same for every
    // level (not `<6> INFO` beside `<7>DEBUG`).
    assert!(
        lines.iter().any(|l| l
            .starts_with("<3>ERROR cannot read bundle /nonexistent/rules.bundle: No such file")),
        "{log}"
    );
    assert!(!log.contains("Z "), "no timestamps: {log}");
}

/// Started before Redis: every failed attempt is logged, and once Redis
/// answers the start continues as usual.
#[test]
fn waits_for_redis_at_start() {
    let Setup {
        mut redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(0)));
    redis.kill();
    let ruled = Ruled::start(&redis, &bundle, &[]);
    ruled.wait_log(&["cannot connect to redis", "retrying"]);
    redis.respawn();
    ruled.wait_ready();
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("fired", || {
        list(&redis, "scooter:blinker") == ["both", "off"]
    });
}

/// With `NOTIFY_SOCKET` set (systemd `Type=notify`), ruled says `READY=1`
/// once subscribed and `STOPPING=1` at SIGTERM.
#[test]
fn notifies_systemd() {
    let Setup { redis, dir, bundle } = Setup::new(&single(hazards(0)));
    let socket_path = dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(support::DEADLINE)).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["--redis", &redis.url(), "--bundle"])
        .arg(&bundle)
        .env("NOTIFY_SOCKET", &socket_path)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 64];
    let n = socket.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1");
    let (_, subscribers): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", "ev:alarm.triggered"]);
    assert_eq!(subscribers, 1, "ready means subscribed");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let n = socket.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert!(child.wait_with_output().unwrap().status.success());
}

/// SIGTERM while still waiting for Redis: a clean exit, at once.
#[test]
fn sigterm_during_start_exits_cleanly() {
    let Setup {
        mut redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(0)));
    redis.kill();
    let mut ruled = Ruled::start(&redis, &bundle, &[]);
    ruled.wait_log(&["cannot connect to redis"]);
    assert!(ruled.stop(), "log:\n{}", ruled.log_text());
    assert!(ruled
        .log_text()
        .contains("stopped before the start completed"));
}

/// A `queue` rule holds 8 triggers while its run is live; the rest are
/// refused and counted in `refused`; the held ones run in turn.
#[test]
fn queue_backlog_overflow_counts_refused() {
    use rulecore::bundle::Concurrency;
    // Each run waits on a gate (a file the test creates) between `start`
    // and `end`: the first run is live for as long as the test wants, on
    // any machine load.
    let mut gate = std::path::PathBuf::new();
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::with(|dir| {
        gate = dir.join("gate");
        let wait = support::script(
            dir,
            "wait.sh",
            &format!("while [ ! -e {} ]; do sleep 0.05; done", gate.display()),
        );
        let mut rule = bundles::rule(
            "queued",
            &["q.go"],
            vec![
                bundles::redis_step("queued", "start", 0),
                bundles::exec_step(&wait, 60_000, 0),
                bundles::redis_step("queued", "end", 0),
            ],
        );
        rule.concurrency = Concurrency::Queue;
        single(rule)
    });
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let json = r#"{"topic":"q.go"}"#;
    publish(&redis, "q.go", json);
    wait_for("first run started", || list(&redis, "queued") == ["start"]);
    for _ in 0..10 {
        publish(&redis, "q.go", json);
    }
    wait_counter(&redis, &ruled, "refused", "2");
    std::fs::write(&gate, b"").unwrap();
    wait_for("nine runs done", || list(&redis, "queued").len() == 18);
    wait_counter(&redis, &ruled, "runs-active", "0");
    assert_eq!(counter(&redis, "dispatched").as_deref(), Some("27"));
    let items = list(&redis, "queued");
    assert!(
        items.chunks(2).all(|pair| pair == ["start", "end"]),
        "{items:?}"
    );
}

/// A bad bundle is reported at once, even while Redis is not there: the
/// bundle is loaded before the first connection attempt.
#[test]
fn bad_bundle_fails_fast_without_redis() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b");
    std::fs::write(&bundle, b"not a bundle").unwrap();
    redis.kill();
    let mut ruled = Ruled::start(&redis, &bundle, &[]);
    let code = ruled.wait_exit();
    assert_eq!(code, Some(1), "log:\n{}", ruled.log_text());
    let log = ruled.log_text();
    assert!(log.contains(&bundle.display().to_string()), "{log}");
    assert!(!log.contains("cannot connect to redis"), "{log}");
}

/// A durable step's record goes when its action starts, not when it ends;
/// a step still queued at stop keeps its record and counts `dropped`.
#[test]
fn record_removed_at_start_and_kept_when_abandoned_at_stop() {
    let (setup, mut ruled, pid) = busy_worker(200, "queued", "4");
    let Setup { redis, dir, .. } = setup;
    assert!(support::alive(pid));
    wait_for("the running step's record removed", || {
        pending_ids(&redis).is_empty()
    });
    wait_counter(&redis, &ruled, "dispatched", "1");
    wait_counter(&redis, &ruled, "runs-active", "1");

    publish(&redis, "x.queued", r#"{"topic":"x.queued"}"#);
    // Its timer fires, its job waits behind busy.sh: no longer an armed
    // timer, not started, record still there.
    wait_counter(&redis, &ruled, "runs-active", "2");
    wait_counter(&redis, &ruled, "pending", "0");
    ruled.wait_log(&["submitting action", "rule=queued"]);
    let kept = pending_ids(&redis);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].starts_with("queued#"), "{kept:?}");
    assert_eq!(counter(&redis, "dispatched").as_deref(), Some("1"));

    assert!(ruled.stop(), "clean exit; log:\n{}", ruled.log_text());
    assert_eq!(
        pending_ids(&redis),
        kept,
        "the abandoned step keeps its record"
    );
    assert_eq!(counter(&redis, "dropped").as_deref(), Some("1"));
    assert!(!dir.path().join("queued.ran").exists());
    assert!(ruled.log_text().contains("abandoned"));
}

/// `pending` counts every armed timer: a debounce window and a repeat gap
/// too, not only step waits (docs/semantics.md#counters).
#[test]
fn pending_counts_debounce_windows_and_repeat_gaps() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut debounced = bundles::rule(
        "debounced",
        &["d.go"],
        vec![bundles::redis_step("debounced", "x", 0)],
    );
    debounced.options_mut().debounce_ns = 60_000 * bundles::MS;
    let mut repeated = bundles::rule(
        "repeated",
        &["r.go"],
        vec![bundles::redis_step("repeated", "x", 0)],
    );
    repeated.options_mut().repeat = rulecore::bundle::Repeat {
        count: 2,
        every_ns: 60_000 * bundles::MS,
        period_ns: 0,
    };
    let bundle = bundles::write(
        dir.path(),
        "b",
        &payload(vec![debounced, repeated], vec![], vec![]),
    );
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "d.go", r#"{"topic":"d.go"}"#);
    wait_counter(&redis, &ruled, "pending", "1");
    publish(&redis, "r.go", r#"{"topic":"r.go"}"#);
    wait_for("first pass", || list(&redis, "repeated") == ["x"]);
    wait_counter(&redis, &ruled, "pending", "2");
    assert!(list(&redis, "debounced").is_empty());
    assert!(pending_ids(&redis).is_empty(), "neither is durable");
}

/// After the server restarts empty, the watched state is read again: a
/// field that is gone reads `""`, not its value from before the outage.
#[test]
fn state_is_read_again_after_a_redis_restart() {
    let Setup {
        mut redis,
        dir: _dir,
        bundle,
    } = Setup::new(&when_parked());
    let _: i64 = redis.query(&["HSET", "vehicle", "state", "parked"]);
    let ruled = Ruled::ready(&redis, &bundle, &["--workers", "1"]);
    redis.restart();
    ruled.wait_log(&["pub/sub subscription restored"]);
    ruled.wait_log(&["state changed", "vehicle"]);
    publish(&redis, "seat.opened", r#"{"topic":"seat.opened"}"#);
    wait_for("marker", || list(&redis, "marker").len() == 1);
    assert!(
        list(&redis, "parked").is_empty(),
        "state is \"\" now; log:\n{}",
        ruled.log_text()
    );
}

/// The per-rule statistics hash holds exactly the bundle's rules: fields
/// of rules from an earlier bundle are removed at start.
#[test]
fn rule_statistics_of_old_rules_are_removed_at_start() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(0)));
    let _: i64 = redis.query(&["HSET", "extensions:rules", "gone-rule", "{}"]);
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    wait_for("only the bundle's rules", || {
        let fields: Vec<String> = redis.query(&["HKEYS", "extensions:rules"]);
        fields == ["hazards-on-alarm"]
    });
}

/// SIGTERM while Redis is gone: the last writes cannot land, and ruled
/// still exits cleanly (the wait for them is bounded).
#[test]
fn stop_with_redis_gone_exits_cleanly() {
    let Setup {
        mut redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(60_000)));
    let mut ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("a pending record", || pending_ids(&redis).len() == 1);
    redis.kill();
    ruled.wait_log(&["pub/sub connection lost"]);
    assert!(ruled.stop(), "clean exit; log:\n{}", ruled.log_text());
    let log = ruled.log_text();
    assert!(log.contains("stopped"), "{log}");
}

/// The command connection closed by the server (Redis' `timeout` does that
/// to idle clients; here `CLIENT KILL`), the pub/sub one untouched: the
/// next action, record write and counter write still land.
#[test]
fn closed_command_connection_is_replaced_without_losing_writes() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(60_000)));
    let mut ruled = Ruled::ready(&redis, &bundle, &[]);
    let kill_commands = || {
        let killed: i64 = redis.query(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
        assert!(killed >= 1);
    };
    kill_commands();
    publish(&redis, "alarm.triggered", r#"{"topic":"alarm.triggered"}"#);
    wait_for("both and a pending record", || {
        list(&redis, "scooter:blinker") == ["both"] && pending_ids(&redis).len() == 1
    });
    wait_counter(&redis, &ruled, "runs-active", "1");
    kill_commands();
    // Stopping writes the last counters through the closed connection.
    assert!(ruled.stop(), "clean exit; log:\n{}", ruled.log_text());
    assert_eq!(counter(&redis, "runs-active").as_deref(), Some("0"));
    let log = ruled.log_text();
    assert!(!log.contains("action failed"), "{log}");
    assert!(!log.contains("not written"), "{log}");
}

/// A state hash stored with the wrong type by some other service: ruled
/// still starts, names the key, and reads its fields as `""`.
#[test]
fn unreadable_state_hash_is_logged_not_fatal() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&when_parked());
    let _: () = redis.query(&["SET", "vehicle", "parked"]);
    let ruled = Ruled::ready(&redis, &bundle, &["--workers", "1"]);
    let line = ruled.wait_log(&["cannot read the state hash", "vehicle"]);
    // Redis' own words, as redis-cli shows them.
    assert!(line.contains("WRONGTYPE Operation against a key"), "{line}");
    publish(&redis, "seat.opened", r#"{"topic":"seat.opened"}"#);
    wait_for("marker", || list(&redis, "marker").len() == 1);
    assert!(list(&redis, "parked").is_empty());
}

/// A watched hash that becomes a non-hash while ruled runs (DEL, SET, then
/// the change notification): its fields read as `""`, as at start
/// (docs/semantics.md#state "Unknown means \"\""), instead of keeping the old value.
#[test]
fn state_hash_turned_into_a_string_reads_empty() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&when_parked());
    let _: i64 = redis.query(&["HSET", "vehicle", "state", "parked"]);
    let ruled = Ruled::ready(&redis, &bundle, &["--workers", "1"]);
    let seat = r#"{"topic":"seat.opened"}"#;
    publish(&redis, "seat.opened", seat);
    wait_for("seeded state: fired", || {
        list(&redis, "parked").len() == 1 && list(&redis, "marker").len() == 1
    });

    let _: i64 = redis.query(&["DEL", "vehicle"]);
    let _: () = redis.query(&["SET", "vehicle", "str"]);
    let _: i64 = redis.query(&["PUBLISH", "vehicle", "state"]);
    let line = ruled.wait_log(&["cannot read the state hash", "hash=vehicle", "reads as"]);
    assert!(line.contains("WRONGTYPE Operation"), "{line}");
    assert!(!line.contains("\"WRONGTYPE\""), "readable: {line}");
    publish(&redis, "seat.opened", seat);
    wait_for("marker", || list(&redis, "marker").len() == 2);
    assert_eq!(list(&redis, "parked").len(), 1, "state reads \"\": no push");
}

/// The pending record of a durable step is removed before its action's
/// effect (docs/semantics.md#durability-and-replay: removed exactly when the action starts): the
/// other order lets a crash in between run the step twice.
#[test]
fn durable_record_is_removed_before_its_action() {
    let Setup { redis, dir, bundle } = Setup::new(&single(bundles::rule(
        "dur",
        &["go"],
        vec![bundles::redis_step("l:dur", "x", 200)],
    )));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let monitor = support::Monitor::start(&redis, dir.path().join("monitor.txt"));
    for n in 1..=3 {
        publish(&redis, "go", r#"{"topic":"go"}"#);
        wait_for("pushed", || list(&redis, "l:dur").len() == n);
    }
    wait_for("records removed", || pending_ids(&redis).is_empty());
    let lines = monitor.lines();
    let commands: Vec<&String> = lines
        .iter()
        .filter(|l| {
            l.contains("\"LPUSH\" \"l:dur\"")
                || l.contains("\"HDEL\" \"extensions:pending\" \"dur#")
                || l.contains("\"HSET\" \"extensions:pending\" \"dur#")
        })
        .collect();
    let kinds: Vec<&str> = commands
        .iter()
        .map(|l| {
            if l.contains("LPUSH") {
                "push"
            } else if l.contains("HDEL") {
                "drop"
            } else {
                "put"
            }
        })
        .collect();
    assert_eq!(
        kinds,
        ["put", "drop", "push", "put", "drop", "push", "put", "drop", "push"],
        "{commands:#?}\nlog:\n{}",
        ruled.log_text()
    );
}

/// `last-fire` in `extensions:rules` is when the rule last accepted a
/// trigger past its cooldown (docs/semantics.md#handling-one-event step 4): a trigger within the
/// cooldown leaves it alone.
#[test]
fn last_fire_is_the_last_trigger_past_the_cooldown() {
    let mut rule = bundles::rule("cool", &["go"], vec![bundles::redis_step("cool", "x", 0)]);
    rule.options_mut().cooldown_ns = 60_000 * bundles::MS;
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(rule));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let stats = || -> serde_json::Value {
        let json: String = redis.query(&["HGET", "extensions:rules", "cool"]);
        serde_json::from_str(&json).unwrap()
    };
    assert!(stats()["last-fire"].is_null(), "{}", stats());
    let before = now_ms();
    publish(&redis, "go", r#"{"topic":"go"}"#);
    wait_for("fired", || stats()["runs"] == 1);
    let fired = stats()["last-fire"].as_i64().unwrap();
    assert!(fired >= before && fired <= now_ms(), "{fired}");
    publish(&redis, "go", r#"{"topic":"go"}"#);
    ruled.wait_log(&["rule=cool", "trigger ignored: within cooldown"]);
    // Proving that nothing is written takes a wait: two stats intervals
    // (200ms in tests), by which a changed `last-fire` would be in Redis.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(stats()["last-fire"].as_i64(), Some(fired), "{}", stats());
    assert_eq!(stats()["runs"], 1);
    assert_eq!(list(&redis, "cool"), ["x"]);
}

/// An `exec` child does not inherit `NOTIFY_SOCKET`: it must not talk to
/// systemd as ruled.
#[test]
fn exec_children_do_not_get_notify_socket() {
    let Setup { redis, dir, bundle } = Setup::with(|dir| {
        let out = dir.join("env.txt").display().to_string();
        let script = support::script(
            dir,
            "env.sh",
            &format!("env > {out}.tmp && mv {out}.tmp {out}"),
        );
        single(bundles::rule(
            "env",
            &["go"],
            vec![bundles::exec_step(&script, 5_000, 0)],
        ))
    });
    let socket_path = dir.path().join("notify.sock");
    let _socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["--redis", &redis.url(), "--bundle"])
        .arg(&bundle)
        .env("NOTIFY_SOCKET", &socket_path)
        .env_remove("JOURNAL_STREAM")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for("subscribed", || {
        let (_, n): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", "ev:go"]);
        n == 1
    });
    publish(&redis, "go", r#"{"topic":"go"}"#);
    let env_file = dir.path().join("env.txt");
    wait_for("the script ran", || env_file.exists());
    let env = std::fs::read_to_string(&env_file).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(env.contains("LS_TOPIC=go"), "{env}");
    assert!(!env.contains("NOTIFY_SOCKET"), "{env}");
}

/// With Redis stalled (`CLIENT PAUSE ... WRITE`: the record's `HDEL` gets
/// no answer), a durable step still runs, late by the bounded wait for the
/// removal's confirmation (2 s), not by the length of the stall.
#[test]
fn a_stalled_record_removal_does_not_hold_the_step() {
    let Setup { redis, dir, bundle } = Setup::with(|dir| {
        let out = dir.join("ran").display().to_string();
        let script = support::script(dir, "ran.sh", &format!("touch {out}"));
        single(bundles::rule(
            "stalled",
            &["go"],
            vec![bundles::exec_step(&script, 5_000, 300)],
        ))
    });
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "go", r#"{"topic":"go"}"#);
    wait_for("the record", || pending_ids(&redis).len() == 1);
    let paused = std::time::Instant::now();
    let _: () = redis.query(&["CLIENT", "PAUSE", "8000", "WRITE"]);
    let ran = dir.path().join("ran");
    wait_for("the step ran during the stall", || ran.exists());
    let took = paused.elapsed();
    assert!(
        took < std::time::Duration::from_secs(7),
        "ran {took:?} after the stall began; log:\n{}",
        ruled.log_text()
    );
    let _: () = redis.query(&["CLIENT", "UNPAUSE"]);
}

/// How many WARN lines of `log` contain `needle`.
fn warn_lines(log: &str, needle: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("WARN") && l.contains(needle))
        .count()
}

/// A keyed rule (`per = "data.slot"`, docs/rules.md#keyed-runs) on the real
/// service: the second battery's warning is not swallowed by the first's
/// cooldown, the first's next one is; a durable step's record carries its
/// key.
#[test]
fn a_keyed_rule_keeps_a_cooldown_per_key_and_its_records_carry_the_key() {
    use rulecore::bytecode::{Const, Op, Program};
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let per_slot = Program {
        ops: vec![Op::Data(0)],
    };
    let mut warning = bundles::rule(
        "battery-low",
        &["battery.charge.changed"],
        vec![bundles::redis_step("battery-low", "warn", 0)],
    );
    warning.options_mut().per = Some(per_slot.clone());
    warning.options_mut().cooldown_ns = 600_000 * bundles::MS;
    let mut waiting = bundles::rule(
        "battery-wait",
        &["battery.removed"],
        vec![bundles::redis_step("battery-wait", "late", 600_000)],
    );
    waiting.options_mut().per = Some(per_slot);
    let marker = bundles::rule(
        "marker",
        &["marker.go"],
        vec![bundles::redis_step("marker", "x", 0)],
    );
    let consts = vec![Const::Path(vec!["slot".into()])];
    let bundle = bundles::write(
        dir.path(),
        "b",
        &payload(vec![warning, waiting, marker], vec![], consts),
    );
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let charge = |slot: u8| {
        format!(r#"{{"topic":"battery.charge.changed","to":"9","data":{{"slot":{slot}}}}}"#)
    };
    publish(&redis, "battery.charge.changed", &charge(0));
    wait_for("slot 0 warns", || list(&redis, "battery-low").len() == 1);
    publish(&redis, "battery.charge.changed", &charge(1));
    wait_for("slot 1 warns too", || {
        list(&redis, "battery-low").len() == 2
    });
    publish(&redis, "battery.charge.changed", &charge(0));
    // Events are handled in order: once the marker ran, the third reading
    // was judged.
    publish(&redis, "marker.go", r#"{"topic":"marker.go"}"#);
    wait_for("marker", || list(&redis, "marker").len() == 1);
    assert_eq!(
        list(&redis, "battery-low").len(),
        2,
        "slot 0's cooldown; log:\n{}",
        ruled.log_text()
    );

    publish(
        &redis,
        "battery.removed",
        r#"{"topic":"battery.removed","data":{"slot":1}}"#,
    );
    let record = poll(|| {
        let values: Vec<String> = redis.query(&["HVALS", "extensions:pending"]);
        values.into_iter().next()
    })
    .unwrap_or_else(|| panic!("no record; log:\n{}", ruled.log_text()));
    let json: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert_eq!(json["key"], "1", "{record}");
    assert_eq!(json["rule"], "battery-wait");
}

/// A counters write Redis refuses (out of memory) is not lost: once Redis
/// takes writes again the counters are written whole, though nothing
/// changed since (docs/service.md#counters-hash-extensions).
#[test]
fn counters_redis_refused_are_written_again_once_it_takes_writes() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(0)));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    wait_counter(&redis, &ruled, "rejected", "0");
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory", "1"]);
    // An undecodable event: counted in `rejected`, which Redis then refuses
    // to store.
    assert_eq!(publish(&redis, "alarm.triggered", "not json"), 1);
    ruled.wait_log(&["counters not written to `extensions`"]);
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory", "0"]);
    wait_counter(&redis, &ruled, "rejected", "1");
}
