//! Inputs end to end (docs/semantics.md#inputs): `ruled` against its own
//! `redis-server`, with hash fields and a raw channel turned into
//! `input.*` events. Each fired rule runs a script that appends the event
//! JSON it got on stdin to a file, so the test reads exactly what fired.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use rulecore::bundle::{Input, InputSource, Payload, PayloadFormat};
use std::path::Path;
use support::bundles::{exec_step, rule, single};
use support::{poll, script, wait_for, RedisServer, Ruled, Setup};

/// A rule on `topic` whose one step appends the event to `dir/events`.
fn recording(dir: &Path, topic: &str, inputs: Vec<Input>) -> Payload {
    let out = dir.join("events");
    let command = script(
        dir,
        "record",
        &format!("cat >> {0}\necho >> {0}", out.display()),
    );
    let mut rule = rule("record", &[topic], vec![exec_step(&command, 5_000, 0)]);
    rule.options_mut().inputs = (0..inputs.len()).map(|i| i as u32).collect();
    let mut payload = single(rule);
    payload.inputs = inputs;
    payload
}

fn events(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("events"))
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn wait_events(dir: &Path, ruled: &Ruled, count: usize) -> Vec<serde_json::Value> {
    poll(|| Some(events(dir)).filter(|found| found.len() >= count)).unwrap_or_else(|| {
        panic!(
            "never {count} events (have {:?}); log:\n{}",
            events(dir),
            ruled.log_text()
        )
    })
}

fn hset_publish(redis: &RedisServer, field: &str, value: &str) {
    let _: i64 = redis.query(&["HSET", "vehicle", field, value]);
    let _: i64 = redis.query(&["PUBLISH", "vehicle", field]);
}

/// `HSET` + `PUBLISH` fires with `from`/`to`; the value seeded at start
/// and an unchanged value do not fire; a field that had no value fires
/// with `from = ""`.
#[test]
fn a_hash_input_fires_on_changes_only() {
    let input = Input {
        source: InputSource::Hash {
            hash: "vehicle".into(),
            fields: vec!["engine-power".into(), "kickstand".into()],
        },
        topic: Some("input.engine-power".into()),
    };
    let Setup { redis, dir, bundle } =
        Setup::with(|dir| recording(dir, "input.engine-power", vec![input]));
    let _: i64 = redis.query(&["HSET", "vehicle", "engine-power", "on"]);
    let ruled = Ruled::ready(&redis, &bundle, &["--workers", "1"]);

    hset_publish(&redis, "engine-power", "off");
    let first = wait_events(dir.path(), &ruled, 1);
    // Unchanged: nothing; then a field that had no value.
    hset_publish(&redis, "engine-power", "off");
    hset_publish(&redis, "kickstand", "down");
    let all = wait_events(dir.path(), &ruled, 2);
    assert_eq!(first[0]["topic"], "input.engine-power");
    assert_eq!(first[0]["src"], "adapter");
    assert_eq!(
        (&first[0]["from"], &first[0]["to"]),
        (&"on".into(), &"off".into())
    );
    assert_eq!(first[0]["data"]["hash"], "vehicle");
    assert_eq!(first[0]["data"]["field"], "engine-power");
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(
        (&all[1]["from"], &all[1]["to"]),
        (&"".into(), &"down".into())
    );
    assert_eq!(all[1]["data"]["field"], "kickstand");
}

/// A `json` channel input fires with the decoded `data.payload`; invalid
/// JSON and a message over `max-bytes` are skipped with a line giving
/// size and reason, never the payload.
#[test]
fn a_json_channel_input_decodes_and_skips_bad_messages() {
    let input = Input {
        source: InputSource::Channel {
            channel: "accessory:report".into(),
            format: PayloadFormat::Json,
            max_bytes: 32,
        },
        topic: Some("input.accessory-report".into()),
    };
    let Setup { redis, dir, bundle } =
        Setup::with(|dir| recording(dir, "input.accessory-report", vec![input]));
    let ruled = Ruled::ready(&redis, &bundle, &["--workers", "1"]);
    let publish = |payload: &str| -> i64 { redis.query(&["PUBLISH", "accessory:report", payload]) };
    assert_eq!(publish("{secret-not-json"), 1, "subscribed exactly");
    publish(r#"{"status":"secret-far-too-long-for-32-bytes"}"#);
    ruled.wait_log(&["input channel accessory:report", "not JSON"]);
    ruled.wait_log(&["input channel accessory:report", "over its max-bytes of 32"]);
    publish(r#"{"status":"ok"}"#);
    let all = wait_events(dir.path(), &ruled, 1);
    assert_eq!(all[0]["topic"], "input.accessory-report");
    assert_eq!(all[0]["data"]["channel"], "accessory:report");
    assert_eq!(all[0]["data"]["payload"]["status"], "ok");
    wait_for("the skip lines", || {
        ruled.log_text().matches("skipped").count() >= 2
    });
    let log = ruled.log_text();
    assert!(!log.contains("secret"), "a payload reached the log:\n{log}");
    assert!(log.contains("message of 16 bytes skipped"), "{log}");
    assert_eq!(events(dir.path()).len(), 1);
}
