//! The bus end to end (docs/service.md#the-bus, docs/sources.md): the
//! real `ruled` against its own `redis-server`, driven by a Librescoot bus
//! emulator (`support/librescoot.rs`) that writes as each service does;
//! every envelope `ruled` publishes is read from `PSUBSCRIBE ev:*` and
//! `XRANGE events` and compared with what the profile derives.
#![allow(clippy::unwrap_used)]

mod support;

use rulecore::bundle::Payload;
use serde_json::{json, Value};
use support::bundles::{exec_step, redis_step, rule, single};
use support::librescoot::{published, stream, with_profile, Listener, Services};
use support::{commandstat, list, poll, script, wait_for, RedisServer, Ruled, Setup};

type Row = (String, String, String, Value);

fn row(topic: &str, from: &str, to: &str, data: Value) -> Row {
    (topic.into(), from.into(), to.into(), data)
}

/// A rule on `on` pushing `push` onto list `list`.
fn pusher(name: &str, on: &[&str], list_key: &str) -> rulecore::bundle::Rule {
    rule(name, on, vec![redis_step(list_key, "x", 0)])
}

fn bundle_of(rules: Vec<rulecore::bundle::Rule>) -> Payload {
    with_profile(support::bundles::payload(rules, Vec::new(), Vec::new()))
}

fn counter(redis: &RedisServer, field: &str) -> u64 {
    let value: Option<u64> = redis.query(&["HGET", "extensions", field]);
    value.unwrap_or(0)
}

/// Waits until ruled has logged `count` lines with every one of
/// `needles` (a notification read, a hash cleared): a writer that goes on
/// before ruled read the field overwrites what it would have read, as
/// with any reader of the bus.
fn settle(ruled: &Ruled, needles: &[&str], count: usize) {
    wait_for(&format!("{count} x {needles:?}"), || {
        ruled.count_log(needles) >= count
    });
}

/// Waits for `count` envelopes and checks them against the stream.
fn rows(redis: &RedisServer, listener: &Listener, ruled: &Ruled, count: usize) -> Vec<Row> {
    let heard = poll(|| Some(listener.heard()).filter(|h| h.len() >= count)).unwrap_or_else(|| {
        panic!(
            "heard {:?}, not {count}; log:\n{}",
            listener.heard(),
            ruled.log_text()
        )
    });
    published(redis, &heard)
}

/// Seeding emits nothing, equal values emit nothing; a change emits its
/// topics in order, on `ev:<topic>` and as stream entries whose id is the
/// envelope's; the rule's action runs after `HSET` + `PUBLISH`.
#[test]
fn changes_are_published_in_order_and_seeding_or_equal_values_are_not() {
    let payload = bundle_of(vec![pusher("unlocked", &["vehicle.unlocked"], "blinks")]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let bus = Services::new(&redis);
    bus.set_with_timestamp("vehicle", "state", "stand-by");
    bus.set("vehicle", "kickstand", "down");
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let listener = Listener::start(&redis);

    bus.set_with_timestamp("vehicle", "state", "stand-by");
    bus.set("vehicle", "kickstand", "down");
    settle(&ruled, &["state changed", "field=kickstand"], 1);
    bus.set_with_timestamp("vehicle", "state", "parked");
    wait_for("the rule's push", || list(&redis, "blinks") == ["x"]);
    bus.set("vehicle", "kickstand", "up");
    let got = rows(&redis, &listener, &ruled, 3);
    assert_eq!(
        got,
        [
            row("vehicle.state.changed", "stand-by", "parked", Value::Null),
            row("vehicle.unlocked", "stand-by", "parked", Value::Null),
            row("vehicle.kickstand.up", "down", "up", Value::Null),
        ]
    );
    let ids: Vec<String> = stream(&redis).into_iter().map(|e| e.id).collect();
    let mut sorted = ids.clone();
    sorted.sort_by_key(|id| support::librescoot::id_key(id));
    assert_eq!(ids, sorted, "stream ids ascend");
    // Heard back through no glob here: nothing counted as forged.
    assert_eq!(counter(&redis, "rejected"), 0);
}

/// Keycard: every tap is an event (also `passed` after `passed`), with
/// `uid` and `type` read at the notification; the hash expires.
#[test]
fn every_keycard_tap_is_an_event_with_uid_and_type() {
    let payload = bundle_of(vec![pusher("tap", &["keycard.auth.passed"], "taps")]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let bus = Services::new(&redis);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let listener = Listener::start(&redis);
    bus.keycard_tap("passed", "04a1b2", "scooter");
    listener.wait(1);
    bus.keycard_tap("passed", "04a1b2", "scooter");
    listener.wait(2);
    bus.keycard_tap("failed", "beef", "factory");
    let got = rows(&redis, &listener, &ruled, 3);
    let data = |uid: &str, kind: &str| json!({"uid": uid, "type": kind});
    assert_eq!(
        got,
        [
            row(
                "keycard.auth.passed",
                "",
                "passed",
                data("04a1b2", "scooter")
            ),
            row(
                "keycard.auth.passed",
                "passed",
                "passed",
                data("04a1b2", "scooter")
            ),
            row(
                "keycard.auth.failed",
                "passed",
                "failed",
                data("beef", "factory")
            ),
        ]
    );
    wait_for("both passed taps ran the rule", || {
        list(&redis, "taps").len() == 2
    });
    let ttl: i64 = redis.query(&["TTL", "keycard"]);
    assert!((1..=10).contains(&ttl), "the keycard hash expires: {ttl}");
}

/// battery-service's `MULTI` (every field, one `PUBLISH` per changed
/// field): each change emits once, with `data.slot`.
#[test]
fn a_battery_multi_emits_each_change_once() {
    let payload = bundle_of(vec![pusher("low", &["battery.charge.changed"], "charges")]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let bus = Services::new(&redis);
    fn all<'a>(state: &'a str, charge: &'a str) -> [(&'a str, &'a str); 4] {
        [
            ("present", "true"),
            ("state", state),
            ("charge", charge),
            ("voltage", "52000"),
        ]
    }
    bus.battery(0, &all("idle", "80"), &[]);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let listener = Listener::start(&redis);
    bus.battery(0, &all("active", "79"), &["state", "charge"]);
    listener.wait(2);
    bus.battery(0, &all("active", "79"), &[]);
    bus.battery(0, &all("active", "78"), &["charge"]);
    let got = rows(&redis, &listener, &ruled, 3);
    let slot = json!({"slot": 0});
    assert_eq!(
        got,
        [
            row("battery.state.changed", "idle", "active", slot.clone()),
            row("battery.charge.changed", "80", "79", slot.clone()),
            row("battery.charge.changed", "79", "78", slot),
        ]
    );
    wait_for("two charge changes ran the rule", || {
        list(&redis, "charges").len() == 2
    });
}

/// `Clear`: nothing emitted, the next value is a first value; `ReplaceAll`:
/// every watched field read again, real changes emitted at once.
#[test]
fn cleared_and_replaced_hashes() {
    let payload = bundle_of(vec![pusher("ride", &["ride.started"], "rides")]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let bus = Services::new(&redis);
    bus.set_with_timestamp("vehicle", "state", "parked");
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let listener = Listener::start(&redis);
    bus.clear("vehicle");
    settle(
        &ruled,
        &["state changed", "hash=vehicle", "cause=Reread"],
        1,
    );
    bus.set_with_timestamp("vehicle", "state", "parked");
    settle(&ruled, &["state changed", "field=state", "parked"], 1);
    bus.replace_all(
        "vehicle",
        &[("state", "ready-to-drive"), ("kickstand", "up")],
    );
    listener.wait(2);
    bus.set("vehicle", "kickstand", "down");
    let got = rows(&redis, &listener, &ruled, 3);
    assert_eq!(
        got,
        [
            row(
                "vehicle.state.changed",
                "parked",
                "ready-to-drive",
                Value::Null
            ),
            row("ride.started", "parked", "ready-to-drive", Value::Null),
            row("vehicle.kickstand.down", "up", "down", Value::Null),
        ]
    );
    wait_for("the ride rule", || list(&redis, "rides") == ["x"]);
}

/// A forged `ev:alarm.disarmed` (owned) and `ev:input.x` never reach a
/// rule, exactly subscribed or through a glob; they count in `rejected`.
/// The real change does, and ruled's own events heard back through the
/// glob are not counted.
#[test]
fn forged_owned_and_input_topics_never_reach_a_rule() {
    let payload = bundle_of(vec![
        pusher("disarm", &["alarm.disarmed"], "disarmed"),
        pusher("alarms", &["alarm.*"], "alarms"),
        pusher("inputs", &["input.*", "input.x"], "inputs"),
    ]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let bus = Services::new(&redis);
    bus.set("alarm", "status", "armed");
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let channels: Vec<String> = redis.query(&["PUBSUB", "CHANNELS", "ev:*"]);
    assert!(
        channels.is_empty(),
        "no owned or input topic exactly: {channels:?}"
    );
    bus.message("ev:alarm.disarmed", r#"{"src":"alarm","to":"disarmed"}"#);
    bus.message("ev:input.x", "{}");
    wait_for("two rejected", || counter(&redis, "rejected") >= 2);
    ruled.wait_log(&[
        "skipping an event on a topic ruled derives",
        "ev:alarm.disarmed",
    ]);
    ruled.wait_log(&["skipping an event on an `input.*` topic", "ev:input.x"]);

    bus.set("alarm", "status", "disarmed");
    wait_for("the real disarm", || list(&redis, "disarmed") == ["x"]);
    wait_for("both alarm events", || list(&redis, "alarms").len() == 2);
    // Let a stats interval pass: ruled's own two events came back through
    // `ev:alarm.*` and are not counted.
    let dispatched = |redis: &RedisServer| counter(redis, "dispatched");
    wait_for("counters written", || dispatched(&redis) >= 3);
    assert_eq!(counter(&redis, "rejected"), 2, "{}", ruled.log_text());
    assert_eq!(
        ruled.count_log(&["skipping an event", "ev:alarm.status.changed"]),
        0,
        "our own event was refused: {}",
        ruled.log_text()
    );
    assert!(list(&redis, "inputs").is_empty());
    assert_eq!(list(&redis, "disarmed"), ["x"]);
}

/// `--sources used` with rules that need nothing of the profile:
/// nothing subscribed but the rule's topic, nothing read, nothing
/// published; `--sources all` watches every source.
#[test]
fn sources_used_watches_and_reads_nothing_unneeded() {
    let payload = bundle_of(vec![pusher("other", &["other.topic"], "others")]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let bus = Services::new(&redis);
    bus.set("vehicle", "state", "parked");
    let mut ruled = Ruled::ready(&redis, &bundle, &["--sources", "used"]);
    let channels: Vec<String> = redis.query(&["PUBSUB", "CHANNELS"]);
    assert_eq!(channels, ["ev:other.topic"]);
    let patterns: i64 = redis.query(&["PUBSUB", "NUMPAT"]);
    assert_eq!(patterns, 0);
    bus.set("vehicle", "state", "ready-to-drive");
    bus.message("input-events", "seatbox:press");
    bus.message("ev:other.topic", "{}");
    wait_for("the rule ran", || list(&redis, "others") == ["x"]);
    assert_eq!(commandstat(&redis, "hmget"), 0, "nothing read");
    assert_eq!(commandstat(&redis, "hget"), 0, "nothing read");
    assert!(stream(&redis).is_empty(), "nothing published");
    assert!(ruled.stop());

    let _ruled = Ruled::ready(&redis, &bundle, &["--sources", "all"]);
    let mut channels: Vec<String> = redis.query(&["PUBSUB", "CHANNELS"]);
    channels.sort();
    assert_eq!(
        channels,
        [
            "alarm",
            "battery:0",
            "battery:1",
            "ev:other.topic",
            "input-events",
            "keycard",
            "vehicle"
        ]
    );
}

/// The seatbox example: a rule on `button.seatbox.press` with an `exec`
/// step runs when vehicle-service publishes `input-events seatbox:press`.
#[test]
fn a_seatbox_press_runs_an_exec_rule() {
    let Setup { redis, dir, bundle } = Setup::with(|dir| {
        let out = dir.join("pressed");
        let command = script(dir, "press", &format!("cat > {}", out.display()));
        with_profile(single(rule(
            "seatbox",
            &["button.seatbox.press"],
            vec![exec_step(&command, 5_000, 0)],
        )))
    });
    let bus = Services::new(&redis);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let listener = Listener::start(&redis);
    assert_eq!(
        bus.message("input-events", "seatbox:press"),
        1,
        "ruled subscribes it"
    );
    let got = rows(&redis, &listener, &ruled, 1);
    assert_eq!(got, [row("button.seatbox.press", "", "", Value::Null)]);
    // `cat > pressed` makes the file before the event is written to it:
    // wait for the whole event, not for the file.
    let event: Value = poll(|| {
        let stdin = std::fs::read_to_string(dir.path().join("pressed")).ok()?;
        serde_json::from_str(&stdin).ok()
    })
    .unwrap_or_else(|| panic!("the exec step never ran; log:\n{}", ruled.log_text()));
    assert_eq!(event["topic"], "button.seatbox.press");
}

/// `--bus follow`: nothing derived or published; the bus (the Go
/// service) delivers `ev:*` as before.
#[test]
fn follow_mode_publishes_nothing_and_takes_the_bus() {
    let payload = bundle_of(vec![pusher("unlocked", &["vehicle.unlocked"], "blinks")]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let bus = Services::new(&redis);
    bus.set("vehicle", "state", "stand-by");
    let ruled = Ruled::ready(&redis, &bundle, &["--bus", "follow"]);
    let listener = Listener::start(&redis);
    bus.set_with_timestamp("vehicle", "state", "parked");
    bus.message(
        "ev:vehicle.unlocked",
        r#"{"src":"adapter","from":"stand-by","to":"parked"}"#,
    );
    wait_for("the rule ran", || list(&redis, "blinks") == ["x"]);
    assert_eq!(listener.wait(1).len(), 1, "only the Go service's");
    assert!(stream(&redis).is_empty());
    assert!(
        ruled.log_text().contains("bus=\"follow\""),
        "{}",
        ruled.log_text()
    );
}

/// At start in `own` mode: a recent entry of stream `events` and the Go
/// service's counters each warn naming `--bus follow`; our ids continue
/// above the stream's newest (here one from the future).
#[test]
fn another_adapter_is_warned_about_and_ids_stay_above_the_stream() {
    let payload = bundle_of(vec![pusher("unlocked", &["vehicle.unlocked"], "blinks")]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let ahead = support::now_ms() + 60_000;
    let id = format!("{ahead}-5");
    let _: String = redis.query(&["XADD", "events", &id, "topic", "x", "e", "{}"]);
    let _: i64 = redis.query(&["HSET", "extensions", "ticks", "1", "events-published", "3"]);
    let bus = Services::new(&redis);
    bus.set("vehicle", "state", "stand-by");
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    ruled.wait_log(&[
        "stream `events` has an entry this ruled did not write",
        "--bus follow",
    ]);
    ruled.wait_log(&["looks written by the Go event-service", "--bus follow"]);
    bus.set("vehicle", "state", "parked");
    wait_for("two entries added", || stream(&redis).len() == 3);
    let ids: Vec<String> = stream(&redis).into_iter().map(|e| e.id).collect();
    assert_eq!(ids, [id, format!("{ahead}-6"), format!("{ahead}-7")]);
}

/// `ruled ctl status`: the profile, the bus mode, the sources mode, and
/// how many hashes are watched and polls run.
#[test]
fn status_shows_the_profile_and_the_bus() {
    let payload = bundle_of(vec![pusher("unlocked", &["vehicle.unlocked"], "blinks")]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let _ruled = Ruled::ready(&redis, &bundle, &["--sources", "used"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["ctl", "--redis", &redis.url(), "status", "--format", "json"])
        .env_remove("RULED_NAMESPACE")
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    assert_eq!(status["profile"]["name"], "librescoot-test");
    assert_eq!(status["profile"]["digest"], "0123456789abcdef");
    assert_eq!(status["bus"]["mode"], "own");
    assert_eq!(status["bus"]["sources"], "used");
    assert_eq!(status["bus"]["watched-hashes"], 1, "{status}");
    assert_eq!(status["bus"]["polls"], 0);
}

fn ctl(redis: &RedisServer, args: &[&str]) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["ctl", "--redis", &redis.url()])
        .args(args)
        .env_remove("RULED_NAMESPACE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ruled ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn channels(redis: &RedisServer) -> Vec<String> {
    let mut channels: Vec<String> = redis.query(&["PUBSUB", "CHANNELS"]);
    channels.sort();
    channels
}

/// `--sources used` follows a rule turned off and on (`v1.set-enabled`):
/// its source's hash is unsubscribed and subscribed again, and the field
/// is read again when it becomes live, emitting nothing for what changed
/// meanwhile.
#[test]
fn a_rule_turned_off_and_on_changes_what_is_watched() {
    let payload = bundle_of(vec![
        pusher("unlocked", &["vehicle.unlocked"], "blinks"),
        pusher("other", &["other.topic"], "others"),
    ]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let bus = Services::new(&redis);
    bus.set("vehicle", "state", "stand-by");
    let ruled = Ruled::ready(&redis, &bundle, &["--sources", "used"]);
    assert_eq!(channels(&redis), ["ev:other.topic", "vehicle"]);
    ctl(&redis, &["set-enabled", "unlocked", "off"]);
    assert_eq!(channels(&redis), ["ev:other.topic"]);
    bus.set_with_timestamp("vehicle", "state", "parked");
    ctl(&redis, &["set-enabled", "unlocked", "on"]);
    assert_eq!(channels(&redis), ["ev:other.topic", "vehicle"]);
    let listener = Listener::start(&redis);
    bus.set_with_timestamp("vehicle", "state", "ready-to-drive");
    let got = rows(&redis, &listener, &ruled, 2);
    assert_eq!(
        got,
        [
            row(
                "vehicle.state.changed",
                "parked",
                "ready-to-drive",
                Value::Null
            ),
            row("ride.started", "parked", "ready-to-drive", Value::Null),
        ]
    );
    assert!(
        list(&redis, "blinks").is_empty(),
        "stand-by -> parked was not seen"
    );
}

/// Every line about watched fields goes through the log budget: 3 s of
/// notifications of a field that is not UTF-8 write fewer than 100 `warn`
/// lines (before: one per read, thousands).
#[test]
fn a_flood_of_non_utf8_values_is_logged_within_the_budget() {
    let payload = bundle_of(vec![pusher("any", &["vehicle.*"], "anys")]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let bus = Services::new(&redis);
    bus.set("vehicle", "kickstand", "down");
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let mut con = redis.con();
    let _: i64 = redis::cmd("HSET")
        .arg("vehicle")
        .arg("state")
        .arg(&b"\xff\xfe\x1b[2J"[..])
        .query(&mut con)
        .unwrap();
    let started = std::time::Instant::now();
    let mut published = 0_u64;
    while started.elapsed() < std::time::Duration::from_secs(3) {
        let _: i64 = redis::cmd("PUBLISH")
            .arg("vehicle")
            .arg("state")
            .query(&mut con)
            .unwrap();
        published += 1;
    }
    // The last notification's read is behind this one.
    bus.set("vehicle", "kickstand", "up");
    settle(&ruled, &["state changed", "field=kickstand"], 1);
    let reads = ruled.count_log(&["state changed", "field=state"]);
    let warns = ruled.count_log(&["WARN", "not UTF-8"]);
    eprintln!("{published} notifications, {reads} reads, {warns} warn lines");
    assert!(reads > 100, "a flood of reads: {reads}");
    assert!(warns < 100, "{warns} warn lines for {reads} reads");
    assert!(warns > 0, "the value is still reported");
}

/// A quick restart is no other adapter: stream `events`' newest entry is
/// this ruled's own (its id kept in `extensions:bus-last-id`), so no
/// warning; an entry someone else added after it still warns.
#[test]
fn a_restart_is_not_another_adapter_but_a_foreign_entry_is() {
    let payload = bundle_of(vec![pusher("unlocked", &["vehicle.unlocked"], "blinks")]);
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&payload);
    let bus = Services::new(&redis);
    bus.set("vehicle", "state", "stand-by");
    let mut ruled = Ruled::ready(&redis, &bundle, &[]);
    bus.set_with_timestamp("vehicle", "state", "parked");
    wait_for("two entries", || stream(&redis).len() == 2);
    assert!(ruled.stop());
    let warning = "stream `events` has an entry this ruled did not write";
    let mut ruled = Ruled::ready(&redis, &bundle, &[]);
    assert_eq!(ruled.count_log(&[warning]), 0, "{}", ruled.log_text());
    bus.set_with_timestamp("vehicle", "state", "stand-by");
    wait_for("two more entries", || stream(&redis).len() == 4);
    assert!(ruled.stop());
    let _: String = redis.query(&["XADD", "events", "*", "topic", "x", "e", "{}"]);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    ruled.wait_log(&[warning, "--bus follow"]);
}
