//! A Librescoot bus emulator for the integration tests (docs/librescoot.md,
//! docs/sources.md#changes): writes into the test's Redis as each
//! service does (redis-ipc's pipelined `HSET` + `PUBLISH`,
//! `SetWithTimestamp`, `SetManyPublishOne` with the keycard hash's expiry,
//! battery-service's `MULTI`, `Clear`, `ReplaceAll`, raw channels), the
//! profile the test bundles carry, and a listener of what `ruled`
//! publishes (`PSUBSCRIBE ev:*`, `XRANGE events`). Written from the
//! measured conventions, not from any service's source.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use super::{poll, RedisServer};
use rulecore::bundle::Payload;
use rulecore::profile::{Changes, DataSpec, Emit, Origin, Poll, Profile, Source};
use rulecore::value_pattern::ValuePattern;
use std::sync::{Arc, Mutex};

/// The hand-built profile of the tests that build their bundles by hand
/// (`service_bus.rs`): a few rows of docs/librescoot.md's events under the name
/// `librescoot-test`. The built-in `profiles/librescoot` itself is tested
/// through [`build_rules`] (the real `rulec`), in `librescoot_profile.rs`.
pub fn profile() -> Profile {
    hand_built_profile()
}

/// A bundle payload with [`profile`].
pub fn with_profile(mut payload: Payload) -> Payload {
    payload.profile = Some(profile());
    payload
}

fn pats(list: &[&str]) -> Vec<ValuePattern> {
    list.iter()
        .map(|p| ValuePattern::parse(p).unwrap())
        .collect()
}

fn emit(topic: &str, from: &[&str], to: &[&str]) -> Emit {
    Emit {
        topic: topic.into(),
        from: pats(from),
        to: pats(to),
        payload: Vec::new(),
        when: None,
        data: Vec::new(),
        from_to: true,
    }
}

fn with_data(mut emit: Emit, data: Vec<(&str, DataSpec)>) -> Emit {
    emit.data = data.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    emit
}

fn field(hash: &str, name: &str, read: &[&str], changes: Changes, emits: Vec<Emit>) -> Source {
    Source {
        origin: Origin::Field {
            hash: hash.into(),
            field: name.into(),
            read: read.iter().map(|r| r.to_string()).collect(),
        },
        changes,
        emits,
    }
}

fn button(source: &str, gesture: &str) -> Emit {
    let mut emit = emit(
        &format!("button.{}.{gesture}", source.replace(':', ".")),
        &[],
        &[],
    );
    emit.payload = pats(&[&format!("{source}:{gesture}")]);
    emit.from_to = false;
    emit
}

/// The rows of docs/librescoot.md's events the tests exercise, by hand.
fn hand_built_profile() -> Profile {
    let distinct = Changes::Distinct;
    let slot = |n: i64| vec![("slot", DataSpec::Int(n))];
    let mut sources = vec![
        field(
            "vehicle",
            "state",
            &[],
            distinct,
            vec![
                emit("vehicle.state.changed", &[], &[]),
                emit("vehicle.unlocked", &["stand-by"], &["parked"]),
                emit("vehicle.locked", &[], &["stand-by"]),
                emit("ride.started", &[], &["ready-to-drive"]),
                emit("ride.ended", &["ready-to-drive"], &[]),
            ],
        ),
        field(
            "vehicle",
            "kickstand",
            &[],
            distinct,
            vec![
                emit("vehicle.kickstand.up", &[], &["up"]),
                emit("vehicle.kickstand.down", &[], &["down"]),
            ],
        ),
        field(
            "alarm",
            "status",
            &[],
            distinct,
            vec![
                emit("alarm.status.changed", &[], &[]),
                emit("alarm.armed", &[], &["armed"]),
                emit("alarm.disarmed", &[], &["disarmed", "disabled"]),
                with_data(
                    emit("alarm.triggered", &[], &["level-1-triggered"]),
                    vec![("level", DataSpec::Int(1))],
                ),
                with_data(
                    emit("alarm.triggered", &[], &["level-2-triggered"]),
                    vec![("level", DataSpec::Int(2))],
                ),
            ],
        ),
        field(
            "keycard",
            "authentication",
            &["uid", "type"],
            Changes::Every,
            ["passed", "failed"]
                .iter()
                .map(|result| {
                    with_data(
                        emit(&format!("keycard.auth.{result}"), &[], &[result]),
                        vec![
                            ("uid", DataSpec::Field("uid".into())),
                            ("type", DataSpec::Field("type".into())),
                        ],
                    )
                })
                .collect(),
        ),
    ];
    for n in 0..2 {
        let hash = format!("battery:{n}");
        sources.push(field(
            &hash,
            "present",
            &[],
            distinct,
            vec![
                with_data(emit("battery.inserted", &[], &["true"]), slot(n)),
                with_data(emit("battery.removed", &[], &["false"]), slot(n)),
            ],
        ));
        sources.push(field(
            &hash,
            "state",
            &[],
            distinct,
            vec![with_data(emit("battery.state.changed", &[], &[]), slot(n))],
        ));
        sources.push(field(
            &hash,
            "charge",
            &[],
            distinct,
            vec![with_data(
                emit("battery.charge.changed", &[], &["<int>"]),
                slot(n),
            )],
        ));
    }
    let mut buttons = Vec::new();
    for source in ["horn", "seatbox", "brake:left", "brake:right"] {
        for gesture in ["press", "release", "tap", "long-tap", "hold", "double-tap"] {
            buttons.push(button(source, gesture));
        }
    }
    sources.push(Source {
        origin: Origin::Channel {
            channel: "input-events".into(),
        },
        changes: distinct,
        emits: buttons,
    });
    Profile {
        name: "librescoot-test".into(),
        digest: "0123456789abcdef".into(),
        sources,
        polls: vec![Poll {
            hash: "engine-ecu".into(),
            fields: vec!["speed".into()],
            every_ns: 200_000_000,
        }],
    }
}

/// Writes as Librescoot's services do.
#[derive(Debug)]
pub struct Services<'a> {
    redis: &'a RedisServer,
}

impl<'a> Services<'a> {
    pub fn new(redis: &'a RedisServer) -> Self {
        Self { redis }
    }

    /// The Redis written to (for a write no service helper covers).
    pub fn redis(&self) -> &'a RedisServer {
        self.redis
    }

    fn run(&self, pipe: &redis::Pipeline) {
        let _: redis::Value = pipe.query(&mut self.redis.con()).expect("pipeline");
    }

    /// redis-ipc `Set`: a plain pipeline (not MULTI) of `HSET` + `PUBLISH
    /// <hash> <field>`.
    pub fn set(&self, hash: &str, field: &str, value: &str) {
        let mut pipe = redis::pipe();
        pipe.cmd("HSET").arg(hash).arg(field).arg(value);
        pipe.cmd("PUBLISH").arg(hash).arg(field);
        self.run(&pipe);
    }

    /// redis-ipc `NoPublish()`: written silently.
    pub fn set_silently(&self, hash: &str, field: &str, value: &str) {
        let _: i64 = self.redis.query(&["HSET", hash, field, value]);
    }

    /// `SetWithTimestamp`: the field and `<field>:timestamp` (RFC3339),
    /// then only `<field>` published (vehicle-service's `state`).
    pub fn set_with_timestamp(&self, hash: &str, field: &str, value: &str) {
        let mut pipe = redis::pipe();
        pipe.cmd("HSET")
            .arg(hash)
            .arg(field)
            .arg(value)
            .arg(format!("{field}:timestamp"))
            .arg("2026-12-01T12:00:00Z");
        pipe.cmd("PUBLISH").arg(hash).arg(field);
        self.run(&pipe);
    }

    /// `SetManyPublishOne`: many fields, one chosen name published, and
    /// (keycard-service) the hash's expiry.
    pub fn set_many_publish_one(
        &self,
        hash: &str,
        fields: &[(&str, &str)],
        publish: &str,
        expire_s: Option<u64>,
    ) {
        let mut pipe = redis::pipe();
        let hset = pipe.cmd("HSET").arg(hash);
        for (field, value) in fields {
            hset.arg(*field).arg(*value);
        }
        if let Some(seconds) = expire_s {
            pipe.cmd("EXPIRE").arg(hash).arg(seconds);
        }
        pipe.cmd("PUBLISH").arg(hash).arg(publish);
        self.run(&pipe);
    }

    /// keycard-service: one tap (`passed`/`failed`), the hash expiring
    /// after 10 s.
    pub fn keycard_tap(&self, authentication: &str, uid: &str, kind: &str) {
        self.set_many_publish_one(
            "keycard",
            &[
                ("authentication", authentication),
                ("uid", uid),
                ("type", kind),
            ],
            "authentication",
            Some(10),
        );
    }

    /// battery-service: `MULTI`, `HMSET` of every field, one `PUBLISH` per
    /// changed field, `EXEC`.
    pub fn battery(&self, slot: u8, fields: &[(&str, &str)], changed: &[&str]) {
        let hash = format!("battery:{slot}");
        let mut pipe = redis::pipe();
        pipe.atomic();
        let hmset = pipe.cmd("HMSET").arg(&hash);
        for (field, value) in fields {
            hmset.arg(*field).arg(*value);
        }
        for field in changed {
            pipe.cmd("PUBLISH").arg(&hash).arg(*field);
        }
        self.run(&pipe);
    }

    /// redis-ipc `Clear`: `DEL`, then `PUBLISH <hash> cleared`.
    pub fn clear(&self, hash: &str) {
        let mut pipe = redis::pipe();
        pipe.cmd("DEL").arg(hash);
        pipe.cmd("PUBLISH").arg(hash).arg("cleared");
        self.run(&pipe);
    }

    /// redis-ipc `ReplaceAll`: `DEL`, `HSET` of every field, then
    /// `PUBLISH <hash> replaced`.
    pub fn replace_all(&self, hash: &str, fields: &[(&str, &str)]) {
        let mut pipe = redis::pipe();
        pipe.cmd("DEL").arg(hash);
        let hset = pipe.cmd("HSET").arg(hash);
        for (field, value) in fields {
            hset.arg(*field).arg(*value);
        }
        pipe.cmd("PUBLISH").arg(hash).arg("replaced");
        self.run(&pipe);
    }

    /// A raw channel message (vehicle-service's `input-events`, ...).
    pub fn message(&self, channel: &str, payload: &str) -> i64 {
        self.redis.query(&["PUBLISH", channel, payload])
    }
}

/// One envelope `ruled` published on `ev:<topic>`, as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Heard {
    pub channel: String,
    pub envelope: serde_json::Value,
}

/// `PSUBSCRIBE ev:*` on its own connection, collecting every message.
#[derive(Debug)]
pub struct Listener {
    heard: Arc<Mutex<Vec<Heard>>>,
}

impl Listener {
    /// Subscribed when it returns.
    pub fn start(redis: &RedisServer) -> Self {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&heard);
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let mut con = redis.con();
        std::thread::spawn(move || {
            let mut pubsub = con.as_pubsub();
            pubsub.psubscribe("ev:*").expect("PSUBSCRIBE ev:*");
            let _ = ready_tx.send(());
            while let Ok(message) = pubsub.get_message() {
                let payload: String = message.get_payload().unwrap_or_default();
                let envelope = serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null);
                sink.lock().unwrap().push(Heard {
                    channel: message.get_channel_name().to_string(),
                    envelope,
                });
            }
        });
        ready.recv().expect("listener subscribed");
        Self { heard }
    }

    pub fn heard(&self) -> Vec<Heard> {
        self.heard.lock().unwrap().clone()
    }

    /// Waits until at least `count` envelopes were heard; returns them all.
    pub fn wait(&self, count: usize) -> Vec<Heard> {
        poll(|| Some(self.heard()).filter(|heard| heard.len() >= count)).unwrap_or_else(|| {
            panic!(
                "never heard {count} envelopes on ev:*; heard {:?}",
                self.heard()
            )
        })
    }
}

/// One entry of stream `events`: its id, `topic` field and `e` (JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: String,
    pub topic: String,
    pub e: serde_json::Value,
}

/// `XRANGE events - +`.
pub fn stream(redis: &RedisServer) -> Vec<Entry> {
    let entries: Vec<(String, Vec<(String, String)>)> =
        redis.query(&["XRANGE", "events", "-", "+"]);
    entries
        .into_iter()
        .map(|(id, fields)| {
            let get = |name: &str| {
                fields
                    .iter()
                    .find(|(field, _)| field == name)
                    .map(|(_, value)| value.clone())
                    .unwrap_or_default()
            };
            Entry {
                id,
                topic: get("topic"),
                e: serde_json::from_str(&get("e")).unwrap_or(serde_json::Value::Null),
            }
        })
        .collect()
}

/// Checks that what was heard on `ev:*` and the stream say the same, in
/// order (the message's `id` is the entry id, `e` is the envelope
/// without it), and returns (topic, from, to, data) of each.
pub fn published(
    redis: &RedisServer,
    heard: &[Heard],
) -> Vec<(String, String, String, serde_json::Value)> {
    let entries = stream(redis);
    assert_eq!(
        entries.len(),
        heard.len(),
        "stream {entries:?}\nchannels {heard:?}"
    );
    heard
        .iter()
        .zip(&entries)
        .map(|(heard, entry)| {
            let envelope = &heard.envelope;
            let topic = envelope["topic"].as_str().unwrap_or_default().to_string();
            assert_eq!(heard.channel, format!("ev:{topic}"), "{envelope}");
            assert_eq!(entry.topic, topic, "{entry:?}");
            assert_eq!(envelope["id"], entry.id.as_str(), "id = stream id");
            assert_eq!(envelope["src"], "adapter", "{envelope}");
            assert!(envelope["ts"].is_i64(), "{envelope}");
            let mut without = envelope.clone();
            without.as_object_mut().unwrap().remove("id");
            assert_eq!(entry.e, without, "the entry is the envelope without id");
            let text = |key: &str| envelope[key].as_str().unwrap_or_default().to_string();
            (topic, text("from"), text("to"), envelope["data"].clone())
        })
        .collect()
}

/// A stream id `<ms>-<seq>` as a sortable key.
pub fn id_key(id: &str) -> (i64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

/// The `rulec` binary beside `ruled` (the same target dir: `cargo nextest
/// run --workspace` builds every binary of the workspace). A `cargo test
/// -p ruled` alone does not build it: then this fails, saying what to do.
pub fn rulec() -> std::path::PathBuf {
    let ruled = std::path::Path::new(env!("CARGO_BIN_EXE_ruled"));
    let rulec = ruled.with_file_name(format!("rulec{}", std::env::consts::EXE_SUFFIX));
    assert!(
        rulec.is_file(),
        "these tests build their bundles with the real `rulec`, expected at {} (beside \
         `ruled`), which is not there: run `cargo build -p rulec` first (or `cargo nextest run \
         --workspace`, which builds every binary)",
        rulec.display()
    );
    rulec
}

/// Writes `files` (name, TOML) into the new directory `dir/name` and builds
/// it with the real `rulec build --deny-warnings` and its built-in
/// `librescoot` profile (a test rule rulec warns about, such as an `on`
/// pattern matching no topic, would test nothing); returns the bundle
/// `dir/name.bundle`. Panics with rulec's output when the build fails.
pub fn build_rules(
    dir: &std::path::Path,
    name: &str,
    files: &[(&str, &str)],
) -> std::path::PathBuf {
    build_rules_with(dir, name, files, true).0
}

/// [`build_rules`] letting warnings through (`--deny-warnings` off): for
/// rules rulec warns about on purpose, such as a step the built-in guards
/// may refuse (`rulec::guarded`). Returns the bundle and rulec's stderr,
/// for the test to judge the warnings.
pub fn build_rules_warned(
    dir: &std::path::Path,
    name: &str,
    files: &[(&str, &str)],
) -> (std::path::PathBuf, String) {
    build_rules_with(dir, name, files, false)
}

fn build_rules_with(
    dir: &std::path::Path,
    name: &str,
    files: &[(&str, &str)],
    deny_warnings: bool,
) -> (std::path::PathBuf, String) {
    let rules = dir.join(name);
    std::fs::create_dir_all(&rules).expect("rules dir");
    for (file, text) in files {
        std::fs::write(rules.join(file), text).expect("write a rule file");
    }
    let bundle = dir.join(format!("{name}.bundle"));
    let mut command = std::process::Command::new(rulec());
    command.arg("build");
    if deny_warnings {
        command.arg("--deny-warnings");
    }
    let out = command
        .arg(&rules)
        .arg("-o")
        .arg(&bundle)
        .output()
        .expect("run rulec build");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && bundle.is_file(),
        "rulec build {} failed ({}):\n{}\n{stderr}",
        rules.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
    );
    (bundle, stderr)
}
