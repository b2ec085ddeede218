//! What a step can do, against the real `ruled` and its own `redis-server`
//! (docs/rules.md#the-notify-action, docs/rules.md#the-publish-action,
//! docs/rules.md#computed-values): rules built by the real `rulec` with the
//! Librescoot profile, triggered by the bus as the services write it; the
//! dashboard's channel and a publish channel read with `SUBSCRIBE`.
//!
//! Needs `rulec` built beside `ruled` (`cargo build -p rulec`, or `cargo
//! nextest run --workspace`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use support::librescoot::{build_rules, Services};
use support::{list, poll, wait_for, RedisServer, Ruled};

/// `SUBSCRIBE channel` on its own connection, keeping every message.
struct Subscriber {
    heard: Arc<Mutex<Vec<String>>>,
}

impl Subscriber {
    /// Subscribed when it returns.
    fn start(redis: &RedisServer, channel: &'static str) -> Self {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&heard);
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let mut con = redis.con();
        std::thread::spawn(move || {
            let mut pubsub = con.as_pubsub();
            pubsub.subscribe(channel).expect("SUBSCRIBE");
            let _ = ready_tx.send(());
            while let Ok(message) = pubsub.get_message() {
                sink.lock()
                    .unwrap()
                    .push(message.get_payload().unwrap_or_default());
            }
        });
        ready.recv().expect("subscribed");
        Self { heard }
    }

    fn wait(&self, what: &str) -> Vec<String> {
        poll(|| Some(self.heard.lock().unwrap().clone()).filter(|h| !h.is_empty()))
            .unwrap_or_else(|| panic!("nothing heard: {what}"))
    }
}

fn counter(redis: &RedisServer, field: &str) -> u64 {
    let value: Option<u64> = redis.query(&["HGET", "extensions", field]);
    value.unwrap_or(0)
}

const NOTIFY_AND_PUBLISH: &str = r#"
[[rule]]
name = "alarm-toast"
on = ["alarm.triggered"]

[[rule.step]]
do = "notify"
title = "Alarm"
body = "level ${data.level}: \"${to}\""
severity = "critical"
ttl = "5s"

[[rule.step]]
do = "publish"
channel = "test:alarm"
message = "alarm ${to} at level ${data.level}"
"#;

#[test]
fn a_notify_step_publishes_its_exact_json_and_a_publish_step_its_message() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = build_rules(dir.path(), "rules", &[("rules.toml", NOTIFY_AND_PUBLISH)]);
    Services::new(&redis).set("alarm", "status", "armed");
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let dashboard = Subscriber::start(&redis, "scootui:notification");
    let published = Subscriber::start(&redis, "test:alarm");
    Services::new(&redis).set("alarm", "status", "level-2-triggered");
    let toasts = dashboard.wait("the alarm toast");
    assert_eq!(
        toasts,
        [
            r#"{"source":"rules","id":"alarm-toast","action":"show","title":"Alarm","body":"level 2: \"level-2-triggered\"","severity":"critical","ttl_ms":5000}"#
        ],
        "{}",
        ruled.log_text()
    );
    let messages = published.wait("the publish step");
    assert_eq!(messages, ["alarm level-2-triggered at level 2"]);
    wait_for("the run ended", || {
        counter(&redis, "runs-active") == 0 && counter(&redis, "dispatched") >= 1
    });
    assert_eq!(counter(&redis, "failed"), 0);
}

const PUSH_VALUES: &str = r#"
[[rule]]
name = "charge-log"
on = ["battery.charge.changed"]

[[rule.step]]
do = "redis"
list = "test:charge"
push = "slot ${data.slot} at ${int(to)} %, vehicle ${state(\"vehicle\", \"state\")}"

[[rule]]
name = "broken-value"
on = ["alarm.triggered"]

[[rule.step]]
do = "redis"
list = "test:broken"
push = "level ${data.level / 0}"

[[rule.step]]
do = "redis"
list = "test:broken"
push = "never"
"#;

#[test]
fn a_computed_push_is_sent_and_a_failing_value_fails_its_step() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = build_rules(dir.path(), "rules", &[("rules.toml", PUSH_VALUES)]);
    let bus = Services::new(&redis);
    bus.set("vehicle", "state", "parked");
    bus.set("alarm", "status", "armed");
    bus.battery(
        0,
        &[("present", "true"), ("state", "active"), ("charge", "50")],
        &[],
    );
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    bus.battery(0, &[("charge", "42")], &["charge"]);
    wait_for("the computed push", || {
        !list(&redis, "test:charge").is_empty()
    });
    assert_eq!(
        list(&redis, "test:charge"),
        ["slot 0 at 42 %, vehicle parked"],
        "{}",
        ruled.log_text()
    );

    bus.set("alarm", "status", "level-1-triggered");
    wait_for("the failed step counted", || counter(&redis, "failed") >= 1);
    ruled.wait_log(&["failed to compute", "broken-value"]);
    // Nothing pushed, and the run ended there: its second step never ran.
    assert_eq!(list(&redis, "test:broken"), Vec::<String>::new());
    assert_eq!(counter(&redis, "failed"), 1);
}
