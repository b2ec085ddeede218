//! The control protocol end to end (docs/operating.md): a real
//! `redis-server`, a real `ruled`, and every method asked through the
//! `ruled ctl` binary; requests the server must ignore are pushed raw.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod support;

use ruled::control::protocol::{
    GuardsReply, ListReply, PendingReply, ReloadReply, RunState, SetEnabledReply, ShowReply,
    StatusReply, TestReply, TraceReply, Verdict,
};
use serde_json::{json, Value};
use std::time::Duration;
use support::bundles::{hazards, payload, redis_step, rule, single};
use support::ctl::{ctl, Ctl};
use support::{poll, wait_for, RedisServer, Ruled, Setup};

impl Ctl {
    fn json(&self) -> Value {
        assert_eq!(self.code, 0, "ruled ctl failed: {}", self.stderr);
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

/// `ruled ctl ARGS --format json` (the option after the method, as
/// people type it).
fn json_ctl(redis: &RedisServer, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--format", "json"]);
    ctl(redis, &all).json()
}

fn publish(redis: &RedisServer, topic: &str) {
    let json = json!({ "topic": topic }).to_string();
    let _: i64 = redis.query(&["PUBLISH", &format!("ev:{topic}"), &json]);
}

/// The Redis server's clock, Unix ms.
fn server_ms(redis: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut redis.con()).unwrap();
    secs * 1000 + micros / 1000
}

#[test]
fn every_method_answers_through_ruled_ctl() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(60_000)));
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "alarm.triggered");
    wait_for("the first step", || {
        redis.list("scooter:blinker") == ["both"]
    });

    let status: StatusReply = reads_back(&json_ctl(&redis, &["status"]));
    assert_eq!(status.namespace, "extensions");
    assert_eq!(status.workers, 2);
    assert_eq!(status.worker_pool.total, 2);
    assert_eq!(status.queue.capacity, 256);
    assert_eq!(status.rules.total, 1);
    assert!(!status.bundle.is_empty());
    let text = ctl(&redis, &["status"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(text.stdout.contains("uptime"), "{}", text.stdout);

    let listed: ListReply = reads_back(&json_ctl(&redis, &["list"]));
    assert_eq!(listed.total, 1);
    let line = &listed.rules[0];
    assert_eq!(line.name, "hazards-on-alarm");
    assert!(line.enabled);
    assert_eq!(line.override_state, None);
    assert_eq!(line.live_runs, 1);
    assert_eq!(line.waiting_steps, 1);
    assert!(line.last_fire_ms.is_some());
    let paged: ListReply = reads_back(&json_ctl(&redis, &["list", "--offset", "1"]));
    assert!(paged.rules.is_empty());

    let shown: ShowReply = reads_back(&json_ctl(&redis, &["show", "hazards-on-alarm"]));
    // `dump` is `rulec dump --format json`'s own format.
    assert_eq!(shown.dump["steps"][1]["after_ns"], 60_000_000_000u64);
    assert!(
        shown.text.contains("rule \"hazards-on-alarm\" (test.toml)"),
        "{shown:?}"
    );
    let live = shown.run.unwrap();
    assert_eq!(live.state, RunState::Waiting);
    assert_eq!(live.step, 1);
    assert_eq!(live.durable, Some(true));

    let pending: PendingReply = reads_back(&json_ctl(&redis, &["pending"]));
    assert_eq!(pending.total, 1);
    let waiting = &pending.steps[0];
    assert_eq!(waiting.rule, "hazards-on-alarm");
    let run = waiting.run.clone();
    let due = waiting.due;
    assert!(due > server_ms(&redis) + 50_000, "due {due}");

    let tested = json_ctl(
        &redis,
        &["test", "hazards-on-alarm", r#"{"topic":"alarm.triggered"}"#],
    );
    assert_eq!(tested["matched"], true);
    assert_eq!(tested["verdict"], json!({"kind": "restart", "run": run}));
    // A dry run: the live run, the record and the list are as they were.
    let pending_after = json_ctl(&redis, &["pending"]);
    assert_eq!(pending_after["steps"][0]["run"], run.as_str());
    assert_eq!(redis.list("scooter:blinker"), ["both"]);
    let other = json_ctl(&redis, &["test", "hazards-on-alarm", r#"{"topic":"x"}"#]);
    assert_eq!(other["verdict"]["kind"], "not-matched");

    let missing = ctl(&redis, &["show", "hazards-on-alarn"]);
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("did you mean `hazards-on-alarm`"),
        "{}",
        missing.stderr
    );
    // Without `--rules-dir`: the protocol's "not available" answer.
    let add = ctl(&redis, &["call", "v1.add", r#"{"definition":""}"#]);
    assert_eq!(add.code, 1);
    assert!(add.stderr.contains("rulec build"), "{}", add.stderr);
    assert!(add.stderr.contains("--rules-dir"), "{}", add.stderr);
    let unknown = ctl(&redis, &["call", "v1.nope"]);
    assert_eq!(unknown.code, 1);
    assert!(
        unknown.stderr.contains("unknown method `v1.nope`"),
        "{}",
        unknown.stderr
    );
    let bad = ctl(&redis, &["call", "v1.list", r#"{"limit":0}"#]);
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("`limit` must be"), "{}", bad.stderr);
}

#[test]
fn overrides_are_applied_live_kept_and_read_at_start() {
    let both = payload(
        vec![
            hazards(1_500),
            rule(
                "witness",
                &["alarm.triggered"],
                vec![redis_step("witness", "w", 0)],
            ),
        ],
        Vec::new(),
        Vec::new(),
    );
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&both);
    let mut ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "alarm.triggered");
    wait_for("the first step", || {
        redis.list("scooter:blinker") == ["both"]
    });
    // Off while its run waits: the run finishes, new triggers do not start one.
    let off: SetEnabledReply = reads_back(&json_ctl(
        &redis,
        &["set-enabled", "hazards-on-alarm", "off"],
    ));
    assert!(off.changed);
    assert!(off.live_run.is_some(), "{off:?}");
    let stored: Option<String> = redis.query(&["HGET", "extensions:overrides", "hazards-on-alarm"]);
    assert_eq!(stored.as_deref(), Some("disabled"));
    wait_for("the live run's last step", || {
        redis.list("scooter:blinker") == ["both", "off"]
    });
    publish(&redis, "alarm.triggered");
    wait_for("the witness saw the second trigger", || {
        redis.list("witness").len() == 2
    });
    assert_eq!(redis.list("scooter:blinker"), ["both", "off"]);

    // Kept across a restart, and one for a rule the bundle lacks is reported.
    let _: i64 = redis.query(&["HSET", "extensions:overrides", "ghost", "enabled"]);
    assert!(ruled.stop());
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    let listed = json_ctl(&redis, &["list"]);
    // Raw, the wire's names: `override` in both places.
    assert_eq!(listed["rules"][0]["override"], "disabled");
    assert_eq!(
        listed["overrides-without-rule"],
        json!([{"name": "ghost", "override": "enabled"}])
    );
    let listed: ListReply = reads_back(&listed);
    assert!(!listed.rules[0].enabled);
    assert!(listed.rules[0].bundle_enabled);
    publish(&redis, "alarm.triggered");
    wait_for("the witness saw the third trigger", || {
        redis.list("witness").len() == 3
    });
    assert_eq!(redis.list("scooter:blinker"), ["both", "off"]);

    let on: SetEnabledReply = reads_back(&json_ctl(
        &redis,
        &["set-enabled", "hazards-on-alarm", "on"],
    ));
    assert!(on.changed);
    publish(&redis, "alarm.triggered");
    wait_for("on again", || redis.list("scooter:blinker").len() == 3);
    let unknown = ctl(&redis, &["set-enabled", "nope", "on"]);
    assert_eq!(unknown.code, 1);
    assert!(
        unknown.stderr.contains("no rule `nope`"),
        "{}",
        unknown.stderr
    );
}

/// A raw request for `id`, as another client might push it.
fn raw_request(id: &str, deadline: i64) -> String {
    json!({
        "id": id, "method": "v1.status",
        "reply_channel": format!("extensions:rpc:reply:{id}"),
        "deadline": deadline, "payload": {}
    })
    .to_string()
}

#[test]
fn requests_past_their_deadline_malformed_or_oversized_are_ignored() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(100)));
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let ids = ["a".repeat(32), "b".repeat(32), "c".repeat(32)];
    let mut watcher = redis.con();
    let mut replies = watcher.as_pubsub();
    for id in &ids {
        replies
            .subscribe(format!("extensions:rpc:reply:{id}"))
            .unwrap();
    }
    let now = server_ms(&redis);
    let past = raw_request(&ids[0], now - 1_000);
    let ahead = raw_request(&ids[1], now + 60_000);
    let mut oversized = raw_request(&ids[2], now + 4_000);
    oversized.insert_str(1, &format!("\"pad\": \"{}\", ", "x".repeat(70 * 1024)));
    for request in [
        past.as_str(),
        ahead.as_str(),
        "not json",
        oversized.as_str(),
    ] {
        let _: i64 = redis.query(&["LPUSH", "extensions:rpc", request]);
    }
    // Served in order: once this one is answered, the others were seen.
    let status = json_ctl(&redis, &["status"]);
    assert_eq!(status["namespace"], "extensions");
    for why in [
        "past its deadline",
        "ahead of the server's clock",
        "not a request",
        "over the 64 KiB limit",
    ] {
        ruled.wait_log(&["control request ignored", why]);
    }
    // Published before the status reply, so already here if at all.
    replies
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let got = replies.get_message();
    assert!(got.is_err(), "an ignored request was answered: {got:?}");
    let left: i64 = redis.query(&["LLEN", "extensions:rpc"]);
    assert_eq!(left, 0);
}

#[test]
fn a_full_queue_refuses_the_33rd_request() {
    let redis = RedisServer::start();
    let now = server_ms(&redis);
    for n in 0..32 {
        let request = raw_request(&format!("{n:032x}"), now + 5_000);
        let _: i64 = redis.query(&["LPUSH", "extensions:rpc", &request]);
    }
    let refused = ctl(&redis, &["status"]);
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("is full (32 requests waiting)"),
        "{}",
        refused.stderr
    );
    let waiting: i64 = redis.query(&["LLEN", "extensions:rpc"]);
    assert_eq!(waiting, 32);
    // Below the bound the push goes in, expires with the list, and a
    // request nobody answered is taken back.
    let _: String = redis.query(&["RPOP", "extensions:rpc"]);
    let unanswered = ctl(&redis, &["--timeout", "300ms", "status"]);
    assert_eq!(unanswered.code, 3, "{}", unanswered.stderr);
    let waiting: i64 = redis.query(&["LLEN", "extensions:rpc"]);
    assert_eq!(waiting, 31);
    let ttl: i64 = redis.query(&["TTL", "extensions:rpc"]);
    assert!((1..=30).contains(&ttl), "ttl {ttl}");
}

#[test]
fn status_against_a_stopped_ruled_exits_non_zero_and_says_why() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(100)));
    let mut ruled = Ruled::ready(&redis, &bundle, &[]);
    let first = poll(|| {
        let run = ctl(&redis, &["status"]);
        (run.code == 0).then_some(run)
    });
    assert!(first.is_some(), "a running ruled answers");
    assert!(ruled.stop());
    let dead = ctl(&redis, &["--timeout", "1s", "status"]);
    assert_eq!(dead.code, 3, "{}", dead.stderr);
    assert!(
        dead.stderr.contains("no answer from ruled within 1000ms"),
        "{}",
        dead.stderr
    );
    assert!(dead.stdout.is_empty());
    let other = ctl(
        &redis,
        &["--timeout", "1s", "--namespace", "ruled", "status"],
    );
    assert_eq!(other.code, 3, "{}", other.stderr);
    assert!(
        other.stderr.contains("namespace `ruled`"),
        "{}",
        other.stderr
    );
}

/// A bundle built by the compiler from rule-file text.
fn compiled(toml: &str) -> rulecore::bundle::Payload {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.toml"), toml).unwrap();
    let report = rulec::session::Session::new(None)
        .check(dir.path())
        .unwrap();
    report.assemble("test")
}

const TRACED: &str = r#"
[[rule]]
name = "gated"
on = ["go"]
cooldown = "1m"

[[rule.step]]
do = "redis"
list = "out"
push = "first"

[[rule.step]]
do = "redis"
when = "false"
list = "out"
push = "never"

[[rule]]
name = "single"
on = ["long"]
concurrency = "drop"

[[rule.step]]
do = "redis"
after = "1m"
list = "out"
push = "late"

[[rule]]
name = "guarded"
on = ["guard"]
when = "data.level > 2"

[[rule.step]]
do = "redis"
list = "out"
push = "guarded"
"#;

#[test]
fn trace_shows_a_false_step_when_a_refused_trigger_and_a_cooldown() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&compiled(TRACED));
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "go");
    wait_for("the first step", || redis.list("out") == ["first"]);
    // The cooldown suppresses the second trigger.
    publish(&redis, "go");
    let _: i64 = redis.query(&[
        "PUBLISH",
        "ev:guard",
        &json!({"topic": "guard", "data": {"level": 1}}).to_string(),
    ]);
    // A trigger `drop` refuses: the rule's run is still waiting.
    publish(&redis, "long");
    publish(&redis, "long");
    let traced = poll(|| {
        let all = json_ctl(&redis, &["trace"]);
        let text = all.to_string();
        let all_in = ["cooldown", "when-false", "dropped"];
        all_in.iter().all(|word| text.contains(word)).then_some(all)
    })
    .expect("the cooldown and the false `when` in the traces");
    let traces = traced["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 3, "{traced}");
    let single = ctl(&redis, &["trace", "single"]);
    assert!(single.stdout.contains("dropped"), "{}", single.stdout);
    let text = ctl(&redis, &["trace", "gated"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    // The run: its first step done, its second step's `when` false; then
    // the trigger the cooldown refused.
    assert!(text.stdout.contains("trace gated"), "{}", text.stdout);
    assert!(text.stdout.contains("when false"), "{}", text.stdout);
    assert!(text.stdout.contains("cooldown"), "{}", text.stdout);
    let guarded = ctl(&redis, &["trace", "guarded"]);
    assert!(guarded.stdout.contains("when-false"), "{}", guarded.stdout);
    let missing = ctl(&redis, &["trace", "gatd"]);
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("did you mean `gated`"),
        "{}",
        missing.stderr
    );
}

#[test]
fn reload_through_ruled_ctl_answers_what_changed_and_refuses_a_bad_bundle() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(60_000)));
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    let same = json_ctl(&redis, &["reload"]);
    assert_eq!(same["unchanged"], true, "{same}");

    let mut two = single(hazards(60_000));
    two.rules.push(rule(
        "horn",
        &["button.horn"],
        vec![redis_step("scooter:horn", "beep", 0)],
    ));
    // An override outlives the reload (docs/operating.md#turning-a-rule-off-or-on).
    assert_eq!(
        ctl(&redis, &["set-enabled", "hazards-on-alarm", "off"]).code,
        0
    );
    let bytes = rulecore::codec::encode(&two).unwrap();
    let staged = bundle.with_extension("new");
    std::fs::write(&staged, &bytes).unwrap();
    std::fs::rename(&staged, &bundle).unwrap();
    let reloaded = json_ctl(&redis, &["reload"]);
    assert_eq!(reloaded["added"], json!(["horn"]), "{reloaded}");
    let listed = json_ctl(&redis, &["list"]);
    let hazards = &listed["rules"][0];
    assert_eq!(hazards["name"], "hazards-on-alarm", "{listed}");
    assert_eq!(hazards["enabled"], false, "{listed}");
    assert_eq!(hazards["override"], "disabled", "{listed}");
    assert_ne!(reloaded["bundle"], reloaded["previous"]);
    let text = ctl(&redis, &["reload"]);
    assert!(text.stdout.contains("nothing changed"), "{}", text.stdout);
    publish(&redis, "button.horn");
    wait_for("the new rule", || redis.list("scooter:horn") == ["beep"]);

    std::fs::write(&staged, b"not a bundle").unwrap();
    std::fs::rename(&staged, &bundle).unwrap();
    let refused = ctl(&redis, &["reload"]);
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("the loaded bundle keeps running"),
        "{}",
        refused.stderr
    );
    assert_eq!(json_ctl(&redis, &["status"])["rules"]["total"], 2);
}

#[test]
fn a_rule_off_at_start_turned_on_is_subscribed_at_once() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(60_000)));
    let _: i64 = redis.query(&[
        "HSET",
        "extensions:overrides",
        "hazards-on-alarm",
        "disabled",
    ]);
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    // No live rule: nothing is subscribed.
    let (channels, patterns): (Vec<String>, i64) = (
        redis.query(&["PUBSUB", "CHANNELS"]),
        redis.query(&["PUBSUB", "NUMPAT"]),
    );
    assert!(
        channels.iter().all(|c| !c.starts_with("ev:")),
        "{channels:?}"
    );
    assert_eq!(patterns, 0);
    let on: SetEnabledReply = reads_back(&json_ctl(
        &redis,
        &["set-enabled", "hazards-on-alarm", "on"],
    ));
    assert!(on.changed);
    let ev_channels = || -> Vec<String> { redis.query(&["PUBSUB", "CHANNELS", "ev:*"]) };
    // Nothing was subscribed at start: the subscription opens now.
    wait_for("the rule's topics subscribed", || {
        ev_channels().contains(&"ev:alarm.triggered".to_string())
    });
    publish(&redis, "alarm.triggered");
    wait_for("the rule turned on", || {
        redis.list("scooter:blinker") == ["both"]
    });
    // Off again: released.
    json_ctl(&redis, &["set-enabled", "hazards-on-alarm", "off"]);
    wait_for("the topics released", || ev_channels().is_empty());
}

/// `raw` read through the protocol's reply type `T` and written again:
/// the type describes every field of the wire JSON, with its wire name
/// (docs/decisions.md, "The control protocol's types keep the wire").
fn reads_back<T: serde::Serialize + serde::de::DeserializeOwned>(raw: &Value) -> T {
    let typed: T = serde_json::from_value(raw.clone())
        .unwrap_or_else(|e| panic!("not a {}: {e}\n{raw:#}", std::any::type_name::<T>()));
    let again = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &again,
        raw,
        "{} loses or renames a field",
        std::any::type_name::<T>()
    );
    typed
}

#[test]
fn every_reply_reads_back_through_its_protocol_type() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&single(hazards(60_000)));
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    publish(&redis, "alarm.triggered");
    wait_for("the first step", || {
        redis.list("scooter:blinker") == ["both"]
    });
    let _: i64 = redis.query(&["HSET", "extensions:overrides", "ghost", "enabled"]);

    let status: StatusReply = reads_back(&json_ctl(&redis, &["status"]));
    assert_eq!(status.namespace, "extensions");
    assert_eq!(status.worker_pool.total, status.workers);
    let listed: ListReply = reads_back(&json_ctl(&redis, &["list"]));
    assert_eq!(listed.rules[0].name, "hazards-on-alarm");
    assert_eq!(listed.rules[0].live_runs, 1);
    let shown: ShowReply = reads_back(&json_ctl(&redis, &["show", "hazards-on-alarm"]));
    assert!(shown.run.is_some_and(|run| run.durable == Some(true)));
    let pending: PendingReply = reads_back(&json_ctl(&redis, &["pending"]));
    assert_eq!(pending.total, 1);
    let tested: TestReply = reads_back(&json_ctl(
        &redis,
        &["test", "hazards-on-alarm", r#"{"topic":"alarm.triggered"}"#],
    ));
    assert!(matches!(tested.verdict, Verdict::Restart { .. }));
    let other: TestReply = reads_back(&json_ctl(
        &redis,
        &["test", "hazards-on-alarm", "{\"topic\":\"x\"}"],
    ));
    assert!(matches!(other.verdict, Verdict::NotMatched));
    let traced: TraceReply = reads_back(&json_ctl(&redis, &["trace"]));
    assert_eq!(traced.total, traced.traces.len());
    // A bundle without a profile has no envelope (service_guards.rs
    // reads the built-in one back).
    let guards: GuardsReply = reads_back(&json_ctl(&redis, &["guards"]));
    assert!(guards.guards.is_empty() && guards.limits.is_empty());
    assert_eq!(ctl(&redis, &["guards"]).stdout, "no guards and no limits\n");
    let off: SetEnabledReply = reads_back(&json_ctl(
        &redis,
        &["set-enabled", "hazards-on-alarm", "off"],
    ));
    assert_eq!(off.enabled, Some(false));
    assert!(off.removed.is_none());
    let removed: SetEnabledReply = reads_back(&json_ctl(
        &redis,
        &["set-enabled", "hazards-on-alarm", "default"],
    ));
    assert_eq!(removed.removed, Some(Some("disabled".to_string())));
    let reloaded: ReloadReply = reads_back(&json_ctl(&redis, &["reload"]));
    assert!(reloaded.unchanged);
}
