//! The replies Librescoot's `lsc ext` decodes (docs/operating.md#the-fields-lsc-reads):
//! a real `redis-server`, a real `ruled`, requests pushed as `lsc` pushes
//! them (`LPUSH`), and each reply decoded into structs with exactly the
//! field names and JSON types `lsc` reads. Extra fields are allowed (no
//! `deny_unknown_fields`); a field that goes missing or changes type fails
//! here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod support;

use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use support::lsc::{call_within, request_id, server_ms, Reply};
use support::{wait_for, RedisServer, Ruled, Setup};

#[derive(Debug, Deserialize)]
struct Status {
    version: String,
    api_version: i64,
    revision: String,
    applied_revision: String,
    pending_restart: bool,
    queue_depth: i64,
    queue_capacity: i64,
    workers: i64,
    busy_workers: i64,
    counters: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct RuleSummary {
    name: String,
    source: String,
    enabled: bool,
    loaded: bool,
    last_fire: i64,
    errors: i64,
    active_runs: i64,
    diagnostics: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct List {
    rules: Vec<RuleSummary>,
    total: i64,
    revision: String,
    applied_revision: String,
    pending_restart: bool,
    diagnostics: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Show {
    rule: RuleSummary,
    definition: String,
    revision: String,
    pending_restart: bool,
}

#[derive(Debug, Deserialize)]
struct TestStep {
    index: i64,
    kind: String,
    description: String,
    /// `lsc` prints it as a bool: absent reads as `false`, so it is
    /// always sent (`true` for a step without `when`).
    condition: bool,
    /// `lsc` prints it as text: the step's delay, a Go duration.
    after: String,
    durable: bool,
    #[serde(default)]
    error: String,
}

#[derive(Debug, Deserialize)]
struct Test {
    name: String,
    repeat_count: i64,
    /// `lsc` prints these as text: Go durations.
    repeat_every: String,
    cooldown: String,
    debounce: String,
    enabled: bool,
    matched: bool,
    steps: Vec<TestStep>,
    #[serde(default)]
    error: String,
    note: String,
}

/// `method` as `lsc` asks it, with `lsc`'s 5 s deadline.
fn call(redis: &RedisServer, method: &str, payload: Value) -> Reply {
    call_within(redis, method, payload, Duration::from_secs(5))
}

/// The payload of a successful `method`, decoded as `T`.
fn decoded<T: for<'de> Deserialize<'de>>(redis: &RedisServer, method: &str, payload: Value) -> T {
    let reply = call(redis, method, payload);
    assert!(reply.ok, "{method}: {}", reply.error);
    serde_json::from_value(reply.payload.clone())
        .unwrap_or_else(|e| panic!("{method}: {e} in {}", reply.payload))
}

const RULES: &str = r#"
[[rule]]
name = "hazards-on-alarm"
on = ["alarm.triggered"]
cancel-on = ["alarm.disarmed"]
when = 'data.level > 1'

[[rule.step]]
do = "redis"
list = "scooter:blinker"
push = "both"

[[rule.step]]
do = "redis"
after = "1m"
when = 'data.level > 2'
list = "scooter:blinker"
push = "off"

[[rule.finally]]
do = "redis"
list = "scooter:blinker"
push = "off"

[[rule]]
name = "horn"
on = ["button.horn"]
cooldown = "5s"

[[rule.step]]
do = "exec"
command = "/bin/true"
"#;

fn compiled(toml: &str) -> rulecore::bundle::Payload {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.toml"), toml).unwrap();
    let report = rulec::session::Session::new(None)
        .check(dir.path())
        .unwrap();
    assert_eq!(report.errors(), 0, "{}", report.summary());
    report.assemble("test")
}

/// A live run on `hazards-on-alarm`: its first step done, the second
/// waiting.
fn running() -> (Setup, Ruled) {
    let setup = Setup::new(&compiled(RULES));
    let ruled = Ruled::ready(&setup.redis, &setup.bundle, &[]);
    let event = json!({"topic": "alarm.triggered", "data": {"level": 2}}).to_string();
    let _: i64 = setup
        .redis
        .query(&["PUBLISH", "ev:alarm.triggered", &event]);
    wait_for("the first step", || {
        setup.redis.list("scooter:blinker") == ["both"]
    });
    (setup, ruled)
}

/// The bundle id `ruled` reports: what `revision` is.
fn bundle_id(redis: &RedisServer) -> String {
    let reply = call(redis, "v1.status", json!({}));
    reply.payload["bundle"].as_str().unwrap().to_string()
}

#[test]
fn status_has_lsc_s_fields_and_types() {
    let (setup, _ruled) = running();
    let status: Status = decoded(&setup.redis, "v1.status", json!({}));
    assert_eq!(status.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(status.api_version, 1);
    assert_eq!(status.revision, bundle_id(&setup.redis));
    assert_eq!(status.applied_revision, status.revision);
    assert!(!status.pending_restart);
    assert_eq!((status.workers, status.queue_capacity), (2, 256));
    assert!((0..=2).contains(&status.busy_workers), "{status:?}");
    assert!(status.queue_depth >= 0);
    let dispatched: u64 = status.counters["dispatched"].parse().unwrap();
    assert!(dispatched >= 1, "{status:?}");
    assert_eq!(status.counters["runs-active"], "1", "{status:?}");
}

#[test]
fn list_has_lsc_s_fields_and_types() {
    let (setup, _ruled) = running();
    let _: i64 = setup
        .redis
        .query(&["HSET", "extensions:overrides", "ghost", "disabled"]);
    let list: List = decoded(&setup.redis, "v1.list", json!({"offset": 0, "limit": 100}));
    assert_eq!(list.total, 2);
    assert_eq!(list.revision, bundle_id(&setup.redis));
    assert_eq!(list.applied_revision, list.revision);
    assert!(!list.pending_restart);
    // Read at start only: the override stored now is not in the list yet.
    assert!(list.diagnostics.is_empty(), "{list:?}");
    let hazards = &list.rules[0];
    assert_eq!(hazards.name, "hazards-on-alarm");
    assert_eq!(hazards.source, "rules.toml");
    assert!(hazards.enabled && hazards.loaded, "{hazards:?}");
    assert_eq!(hazards.active_runs, 1);
    assert_eq!(hazards.errors, 0);
    assert!(hazards.last_fire > 1_600_000_000_000, "{hazards:?}");
    assert!(hazards.diagnostics.is_empty());
    let horn = &list.rules[1];
    assert_eq!((horn.active_runs, horn.last_fire), (0, 0), "{horn:?}");
    assert!(horn.loaded);
}

#[test]
fn show_has_lsc_s_fields_and_a_definition_rulec_checks() {
    let (setup, _ruled) = running();
    let show: Show = decoded(&setup.redis, "v1.show", json!({"name": "hazards-on-alarm"}));
    assert_eq!(show.rule.name, "hazards-on-alarm");
    assert_eq!(show.rule.active_runs, 1);
    assert_eq!(show.revision, bundle_id(&setup.redis));
    assert!(!show.pending_restart);
    // The definition is a rule file the compiler takes back.
    let again = compiled(&show.definition);
    assert_eq!(again.rules.len(), 1, "{}", show.definition);
    assert_eq!(&*again.rules[0].name, "hazards-on-alarm");
    assert_eq!(again.rules[0].steps.len(), 2, "{}", show.definition);
    assert!(
        show.definition.contains("when = 'data.level > 1'"),
        "{}",
        show.definition
    );
}

#[test]
fn test_has_lsc_s_fields_a_passing_condition_without_when_and_the_delay() {
    let (setup, _ruled) = running();
    let event = json!({"topic": "alarm.triggered", "data": {"level": 2}});
    let test: Test = decoded(
        &setup.redis,
        "v1.test",
        json!({"name": "hazards-on-alarm", "event": event}),
    );
    assert_eq!(test.name, "hazards-on-alarm");
    assert!(test.enabled && test.matched, "{test:?}");
    assert!(test.error.is_empty(), "{test:?}");
    assert!(test.note.contains("would end run"), "{test:?}");
    assert_eq!(test.steps.len(), 3, "two steps and the finally step");
    assert_eq!((test.steps[0].index, test.steps[1].index), (0, 1));
    assert_eq!(test.steps[0].kind, "redis");
    assert_eq!(
        test.steps[0].description,
        "redis: list = 'scooter:blinker', push = 'both'"
    );
    assert_eq!(test.repeat_count, 1);
    let waits = (&*test.repeat_every, &*test.cooldown, &*test.debounce);
    assert_eq!(waits, ("0s", "0s", "0s"), "{test:?}");
    assert!(test.steps[0].condition, "no `when`: it passes");
    assert_eq!(test.steps[0].after, "0s");
    assert!(!test.steps[1].condition, "{test:?}");
    assert_eq!(test.steps[1].after, "1m0s", "the delay as lsc prints it");
    assert!(test.steps[1].durable);
    assert!(test.steps[1].error.is_empty());
    // The finally step, after the steps, said to be one.
    let finally = &test.steps[2];
    assert_eq!(finally.index, 2);
    assert_eq!(finally.kind, "redis");
    assert!(
        finally
            .description
            .starts_with("finally: redis: list = 'scooter:blinker', push = 'off'"),
        "{finally:?}"
    );
    assert!(finally.condition && !finally.durable, "{finally:?}");
    // `ruled ctl test` names it as `pending` does: `f0`.
    let shown = support::ctl::ctl(
        &setup.redis,
        &["test", "hazards-on-alarm", &event.to_string()],
    );
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(
        shown.stdout.contains("  step f0   when (none)"),
        "{}",
        shown.stdout
    );
    let horn: Test = decoded(
        &setup.redis,
        "v1.test",
        json!({"name": "horn", "event": {"topic": "button.horn"}}),
    );
    assert_eq!(horn.name, "horn");
    assert_eq!(horn.steps.len(), 1);
    assert_eq!(horn.steps[0].kind, "exec");
    assert_eq!(horn.cooldown, "5s", "{horn:?}");
    assert!(horn.steps[0].condition);
    // A `when` that fails says so in `error`.
    let failing: Test = decoded(
        &setup.redis,
        "v1.test",
        json!({"name": "hazards-on-alarm", "event": {"topic": "alarm.triggered", "data": {"level": "x"}}}),
    );
    assert!(!failing.error.is_empty(), "{failing:?}");
}

#[derive(Debug, Deserialize)]
struct Mutation {
    name: String,
    revision: String,
    pending_restart: bool,
    message: String,
}

#[test]
fn set_enabled_takes_the_revision_lsc_read_applies_live_and_refuses_a_stale_one() {
    let (setup, _ruled) = running();
    let redis = &setup.redis;
    let show: Show = decoded(redis, "v1.show", json!({"name": "horn"}));
    let off: Mutation = decoded(
        redis,
        "v1.set-enabled",
        json!({"name": "horn", "enabled": false, "expected_revision": show.revision}),
    );
    assert_eq!(off.name, "horn");
    assert_eq!(off.revision, show.revision);
    assert!(!off.pending_restart);
    assert!(off.message.contains("turned off now"), "{off:?}");
    // Live: the list says so at once.
    let list: List = decoded(redis, "v1.list", json!({}));
    assert!(!list.rules[1].enabled, "{list:?}");
    // A revision that is not the loaded one is refused and changes nothing.
    let stale = call(
        redis,
        "v1.set-enabled",
        json!({"name": "horn", "enabled": true, "expected_revision": "0".repeat(64)}),
    );
    assert!(!stale.ok);
    assert!(
        stale
            .error
            .contains("the rules changed since they were read"),
        "{}",
        stale.error
    );
    let list: List = decoded(redis, "v1.list", json!({}));
    assert!(!list.rules[1].enabled, "{list:?}");
    // Without one (as `ruled ctl` asks), no check.
    let on: Mutation = decoded(
        redis,
        "v1.set-enabled",
        json!({"name": "horn", "enabled": true}),
    );
    assert!(on.message.contains("turned on now"), "{on:?}");
}

/// `lsc` pushes with `LPUSH`: three requests queued while `ruled` is down
/// are answered in the order they were pushed.
#[test]
fn requests_queued_while_ruled_is_down_are_answered_first_in_first_out() {
    let setup = Setup::new(&compiled(RULES));
    let redis = &setup.redis;
    let ids: Vec<String> = (0..3).map(|_| request_id()).collect();
    let mut watcher = redis.con();
    let mut replies = watcher.as_pubsub();
    for id in &ids {
        replies
            .subscribe(format!("extensions:rpc:reply:{id}"))
            .unwrap();
    }
    replies
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let deadline = server_ms(redis) + DOWN_DEADLINE_MS;
    for id in &ids {
        let request = json!({
            "id": id, "method": "v1.status",
            "reply_channel": format!("extensions:rpc:reply:{id}"),
            "deadline": deadline, "payload": {},
        });
        let _: i64 = redis.query(&["LPUSH", "extensions:rpc", &request.to_string()]);
    }
    let _ruled = Ruled::ready(redis, &setup.bundle, &[]);
    let order: Vec<String> = (0..3)
        .map(|_| {
            let message = replies.get_message().expect("three replies");
            let channel = message.get_channel_name().to_string();
            channel.rsplit(':').next().unwrap().to_string()
        })
        .collect();
    assert_eq!(order, ids);
}

/// How far ahead the requests queued before `ruled` starts are stamped.
const DOWN_DEADLINE_MS: i64 = 20_000;

/// `ruled ctl` pushes at the same end as `lsc`: a request it queues after
/// another client's is answered after it.
#[test]
fn ruled_ctl_queues_behind_a_request_pushed_before_it() {
    let setup = Setup::new(&compiled(RULES));
    let redis = &setup.redis;
    let mut watcher = redis.con();
    let mut replies = watcher.as_pubsub();
    replies.psubscribe("extensions:rpc:reply:*").unwrap();
    replies
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let first = request_id();
    let request = json!({
        "id": first, "method": "v1.status",
        "reply_channel": format!("extensions:rpc:reply:{first}"),
        "deadline": server_ms(redis) + DOWN_DEADLINE_MS, "payload": {},
    });
    let _: i64 = redis.query(&["LPUSH", "extensions:rpc", &request.to_string()]);
    let url = redis.url();
    let ctl = std::thread::spawn(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_ruled"))
            .args(["ctl", "--redis", &url, "status", "--format", "json"])
            .env_remove("RULED_NAMESPACE")
            .output()
            .unwrap()
    });
    wait_for("ruled ctl's request queued", || {
        redis.query::<i64>(&["LLEN", "extensions:rpc"]) == 2
    });
    let _ruled = Ruled::ready(redis, &setup.bundle, &[]);
    let order: Vec<String> = (0..2)
        .map(|_| {
            let message = replies.get_message().expect("two replies");
            let channel = message.get_channel_name().to_string();
            channel.rsplit(':').next().unwrap().to_string()
        })
        .collect();
    assert_eq!(order[0], first, "{order:?}");
    let out = ctl.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `v1.status` request for `id` as `lsc` would push it, stamped `ahead_ms`
/// past the Redis server's clock.
fn stamped(redis: &RedisServer, id: &str, ahead_ms: i64) -> String {
    json!({
        "id": id, "method": "v1.status",
        "reply_channel": format!("extensions:rpc:reply:{id}"),
        "deadline": server_ms(redis) + ahead_ms, "payload": {},
    })
    .to_string()
}

/// `lsc`'s clock may run ahead of Redis': a deadline 20 s ahead is
/// answered; one past, or more than 30 s ahead, is not.
#[test]
fn a_deadline_up_to_30_s_ahead_is_answered_one_past_is_not() {
    let (setup, ruled) = running();
    let redis = &setup.redis;
    let ids: Vec<String> = (0..3).map(|_| request_id()).collect();
    let mut watcher = redis.con();
    let mut replies = watcher.as_pubsub();
    replies.psubscribe("extensions:rpc:reply:*").unwrap();
    replies
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for (id, ahead) in ids.iter().zip([-1_000, 40_000, 20_000]) {
        let _: i64 = redis.query(&["LPUSH", "extensions:rpc", &stamped(redis, id, ahead)]);
    }
    // Served in order: the one answered is the last pushed.
    let message = replies.get_message().expect("a reply");
    assert_eq!(
        message.get_channel_name(),
        format!("extensions:rpc:reply:{}", ids[2])
    );
    ruled.wait_log(&["control request ignored", "past its deadline"]);
    ruled.wait_log(&["control request ignored", "more than 30000 ms"]);
}
