//! docs/librescoot.md's table of events row by row, with the real pieces: rule files in a temp dir,
//! built by the real `rulec` with its built-in `librescoot` profile
//! (`profiles/librescoot/`), run by the real `ruled` against its own
//! `redis-server`, driven by the Librescoot bus emulator
//! (`support/librescoot.rs`) writing as each service does. Every envelope
//! `ruled` publishes is read from `PSUBSCRIBE ev:*` and `XRANGE events`
//! (the same, in order; `id` = the entry id, `src` "adapter", `ts`) and
//! compared with the table: the exact topics, in order, with their
//! `from`, `to` and `data`.
//!
//! Writes are paced as the bus needs (a notification carries the field's
//! name only: a writer that goes on before ruled read the field
//! overwrites what it would have read): each waits until the previous
//! write's envelopes are heard, or, for a write that emits nothing, until
//! ruled logged reading it.
//!
//! Needs `rulec` built beside `ruled` (`cargo build -p rulec`, or `cargo
//! nextest run --workspace`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use nix::sys::signal::Signal;
use serde_json::{json, Value};
use std::path::PathBuf;
use support::librescoot::{build_rules, published, Listener, Services};
use support::{commandstat, list, poll, replace_by_rename, script, wait_for, RedisServer, Ruled};

/// One envelope as the table gives it: topic, `from`, `to` (absent:
/// `None`), `data` (none: null).
#[derive(Debug, Clone, PartialEq)]
struct Row {
    topic: String,
    from: Option<String>,
    to: Option<String>,
    data: Value,
}

/// A change `from` -> `to`.
fn changed(topic: &str, from: &str, to: &str) -> Row {
    Row {
        topic: topic.into(),
        from: Some(from.into()),
        to: Some(to.into()),
        data: Value::Null,
    }
}

/// A channel message's event: no `from`, no `to`.
fn message(topic: &str) -> Row {
    Row {
        topic: topic.into(),
        from: None,
        to: None,
        data: Value::Null,
    }
}

impl Row {
    fn data(mut self, data: Value) -> Row {
        self.data = data;
        self
    }

    fn from(mut self, from: Option<&str>) -> Row {
        self.from = from.map(Into::into);
        self
    }
}

/// A rule file: `name` on `on`, pushing "x" onto list `test:<name>`.
fn pusher(name: &str, on: &[&str]) -> String {
    let on: Vec<String> = on.iter().map(|t| format!("{t:?}")).collect();
    format!(
        "[[rule]]\nname = \"{name}\"\non = [{}]\n\n[[rule.step]]\ndo = \"redis\"\n\
         list = \"test:{name}\"\npush = \"x\"\n",
        on.join(", ")
    )
}

/// A test's Redis, temp dir, the running `ruled` and a listener of
/// what it publishes.
struct Bus {
    redis: RedisServer,
    dir: tempfile::TempDir,
    bundle: PathBuf,
    ruled: Ruled,
    listener: Listener,
}

impl Bus {
    /// Builds `rules` with the real rulec, lets `seed` write the bus as it
    /// is before ruled starts, starts ruled (`extra` flags) and listens.
    fn start(rules: &str, extra: &[&str], seed: impl FnOnce(&Services<'_>)) -> Bus {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().expect("temp dir");
        let bundle = build_rules(dir.path(), "rules", &[("rules.toml", rules)]);
        seed(&Services::new(&redis));
        let ruled = Ruled::ready(&redis, &bundle, extra);
        let listener = Listener::start(&redis);
        Bus {
            redis,
            dir,
            bundle,
            ruled,
            listener,
        }
    }

    fn services(&self) -> Services<'_> {
        Services::new(&self.redis)
    }

    /// Waits until `count` envelopes were heard in all; checks them
    /// against the stream and returns them.
    fn heard(&self, count: usize) -> Vec<Row> {
        let heard = poll(|| Some(self.listener.heard()).filter(|h| h.len() >= count))
            .unwrap_or_else(|| {
                panic!(
                    "heard {:#?}, not {count} envelopes; log:\n{}",
                    self.listener.heard(),
                    self.ruled.log_text()
                )
            });
        published(&self.redis, &heard);
        heard
            .iter()
            .map(|heard| {
                let e = &heard.envelope;
                let text = |key: &str| e.get(key).map(|v| v.as_str().unwrap().to_string());
                Row {
                    topic: e["topic"].as_str().unwrap().to_string(),
                    from: text("from"),
                    to: text("to"),
                    data: e.get("data").cloned().unwrap_or(Value::Null),
                }
            })
            .collect()
    }

    /// `write`, then waits for exactly the envelopes `want` after those
    /// heard before (all envelopes so far are checked against the stream).
    fn expect<R>(&self, write: impl FnOnce(&Services<'_>) -> R, want: &[Row]) {
        let before = self.listener.heard().len();
        write(&self.services());
        let got = self.heard(before + want.len());
        assert_eq!(
            &got[before..],
            want,
            "after {before} envelopes; log:\n{}",
            self.ruled.log_text()
        );
    }

    /// How many reads of `hash` `field` (a notification's, first of its
    /// read) ruled has logged.
    fn reads(&self, hash: &str, field: &str) -> usize {
        let hash = format!("hash={hash} ");
        let field = format!("field={field} ");
        self.ruled
            .count_log(&["state changed", hash.as_str(), field.as_str()])
    }

    /// `write`, which emits nothing, then waits until ruled read `hash`
    /// `field` once more (so the next write cannot overwrite it unread).
    fn quiet<R>(&self, hash: &str, field: &str, write: impl FnOnce(&Services<'_>) -> R) {
        let before = self.reads(hash, field);
        write(&self.services());
        wait_for(&format!("ruled read {hash} {field}"), || {
            self.reads(hash, field) > before
        });
    }

    /// Everything heard so far, checked against the stream.
    fn all(&self) -> Vec<Row> {
        self.heard(self.listener.heard().len())
    }

    /// Waits until the rule `name` (a [`pusher`]) ran at least once.
    fn ran(&self, name: &str) {
        let key = format!("test:{name}");
        wait_for(&format!("rule {name} ran"), || {
            !list(&self.redis, &key).is_empty()
        });
    }
}

fn counter(redis: &RedisServer, field: &str) -> u64 {
    let value: Option<u64> = redis.query(&["HGET", "extensions", field]);
    value.unwrap_or(0)
}

// ---- The table, row by row -------------------------------------------

#[test]
fn vehicle_state_row() {
    let rules = pusher(
        "state",
        &[
            "vehicle.unlocked",
            "vehicle.locked",
            "ride.*",
            "vehicle.hibernating",
        ],
    );
    let bus = Bus::start(&rules, &[], |s| {
        s.set_with_timestamp("vehicle", "state", "stand-by")
    });
    let state =
        |to: &'static str| move |s: &Services<'_>| s.set_with_timestamp("vehicle", "state", to);
    let c = |from, to| changed("vehicle.state.changed", from, to);
    bus.expect(
        state("parked"),
        &[
            c("stand-by", "parked"),
            changed("vehicle.unlocked", "stand-by", "parked"),
        ],
    );
    bus.expect(
        state("ready-to-drive"),
        &[
            c("parked", "ready-to-drive"),
            changed("ride.started", "parked", "ready-to-drive"),
        ],
    );
    bus.expect(
        state("parked"),
        &[
            c("ready-to-drive", "parked"),
            changed("ride.ended", "ready-to-drive", "parked"),
        ],
    );
    bus.expect(state("hop-on"), &[c("parked", "hop-on")]);
    bus.expect(
        state("stand-by"),
        &[
            c("hop-on", "stand-by"),
            changed("vehicle.locked", "hop-on", "stand-by"),
        ],
    );
    // Into the waiting-hibernation family from outside it, then within it.
    bus.expect(
        state("waiting-hibernation"),
        &[
            c("stand-by", "waiting-hibernation"),
            changed("vehicle.hibernating", "stand-by", "waiting-hibernation"),
        ],
    );
    bus.expect(
        state("waiting-hibernation-confirm"),
        &[c("waiting-hibernation", "waiting-hibernation-confirm")],
    );
    bus.expect(
        state("parked"),
        &[c("waiting-hibernation-confirm", "parked")],
    );
    bus.expect(
        state("ready-to-drive"),
        &[
            c("parked", "ready-to-drive"),
            changed("ride.started", "parked", "ready-to-drive"),
        ],
    );
    // Several meanings of one change, in the table's order.
    bus.expect(
        state("stand-by"),
        &[
            c("ready-to-drive", "stand-by"),
            changed("vehicle.locked", "ready-to-drive", "stand-by"),
            changed("ride.ended", "ready-to-drive", "stand-by"),
        ],
    );
    bus.expect(
        state("waiting-hibernation-advanced"),
        &[
            c("stand-by", "waiting-hibernation-advanced"),
            changed(
                "vehicle.hibernating",
                "stand-by",
                "waiting-hibernation-advanced",
            ),
        ],
    );
    bus.expect(
        state("waiting-hibernation-seatbox"),
        &[c(
            "waiting-hibernation-advanced",
            "waiting-hibernation-seatbox",
        )],
    );
    bus.ran("state");
}

#[test]
fn vehicle_seatbox_lock_row() {
    let rules = pusher("seatbox", &["vehicle.seatbox.*"]);
    let bus = Bus::start(&rules, &[], |s| s.set("vehicle", "seatbox:lock", "closed"));
    // vehicle-service: the field, and the event-only `seatbox:opened`.
    bus.expect(
        |s| {
            s.set("vehicle", "seatbox:lock", "open");
            s.message("vehicle", "seatbox:opened");
        },
        &[changed("vehicle.seatbox.opened", "closed", "open")],
    );
    bus.expect(
        |s| s.set("vehicle", "seatbox:lock", "closed"),
        &[changed("vehicle.seatbox.closed", "open", "closed")],
    );
    bus.ran("seatbox");
}

#[test]
fn vehicle_kickstand_row() {
    let rules = pusher("kickstand", &["vehicle.kickstand.*"]);
    let bus = Bus::start(&rules, &[], |s| s.set("vehicle", "kickstand", "down"));
    bus.expect(
        |s| s.set("vehicle", "kickstand", "up"),
        &[changed("vehicle.kickstand.up", "down", "up")],
    );
    bus.expect(
        |s| s.set("vehicle", "kickstand", "down"),
        &[changed("vehicle.kickstand.down", "up", "down")],
    );
    bus.ran("kickstand");
}

#[test]
fn vehicle_handlebar_lock_sensor_row() {
    let rules = pusher("handlebar", &["vehicle.handlebar.*"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.set("vehicle", "handlebar:lock-sensor", "unlocked");
        s.set("vehicle", "handlebar:lock-state", "unlocked");
    });
    bus.expect(
        |s| s.set("vehicle", "handlebar:lock-sensor", "locked"),
        &[changed("vehicle.handlebar.locked", "unlocked", "locked")],
    );
    // The latched state is not the row's field: nothing.
    bus.expect(
        |s| {
            s.set("vehicle", "handlebar:lock-state", "locked");
            s.set("vehicle", "handlebar:lock-sensor", "unlocked");
        },
        &[changed("vehicle.handlebar.unlocked", "locked", "unlocked")],
    );
    bus.ran("handlebar");
}

#[test]
fn vehicle_blinker_switch_row() {
    let rules = pusher("blinker", &["vehicle.blinker.changed"]);
    let bus = Bus::start(&rules, &[], |s| s.set("vehicle", "blinker:switch", "off"));
    let c = |from, to| changed("vehicle.blinker.changed", from, to);
    bus.expect(
        |s| s.set("vehicle", "blinker:switch", "left"),
        &[c("off", "left")],
    );
    // `blinker:state` with SetManyPublishOne is not the row's field.
    bus.expect(
        |s| {
            s.set_many_publish_one(
                "vehicle",
                &[("blinker:state", "both"), ("blinker:start_nanos", "123")],
                "blinker:state",
                None,
            );
            s.set("vehicle", "blinker:switch", "both");
        },
        &[c("left", "both")],
    );
    bus.expect(
        |s| s.set("vehicle", "blinker:switch", "off"),
        &[c("both", "off")],
    );
    bus.ran("blinker");
}

/// battery-service's fields, all of them in each MULTI.
fn battery<'a>(present: &'a str, state: &'a str, charge: &'a str) -> [(&'a str, &'a str); 5] {
    [
        ("present", present),
        ("state", state),
        ("charge", charge),
        ("voltage", "52000"),
        ("temperature-state", "ideal"),
    ]
}

#[test]
fn battery_present_row() {
    let rules = pusher("present", &["battery.inserted", "battery.removed"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.battery(0, &battery("true", "idle", "80"), &[]);
        s.battery(1, &battery("false", "unknown", "0"), &[]);
    });
    bus.expect(
        |s| s.battery(1, &battery("true", "idle", "0"), &["present", "state"]),
        &[
            changed("battery.inserted", "false", "true").data(json!({"slot": 1})),
            changed("battery.state.changed", "unknown", "idle").data(json!({"slot": 1})),
        ],
    );
    bus.expect(
        |s| s.battery(0, &battery("false", "idle", "80"), &["present"]),
        &[changed("battery.removed", "true", "false").data(json!({"slot": 0}))],
    );
    bus.expect(
        |s| s.battery(1, &battery("false", "idle", "0"), &["present"]),
        &[changed("battery.removed", "true", "false").data(json!({"slot": 1}))],
    );
    bus.expect(
        |s| s.battery(0, &battery("true", "idle", "80"), &["present"]),
        &[changed("battery.inserted", "false", "true").data(json!({"slot": 0}))],
    );
    bus.ran("present");
}

#[test]
fn battery_state_row() {
    let rules = pusher("state", &["battery.state.changed"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.battery(0, &battery("true", "asleep", "80"), &[]);
        s.battery(1, &battery("true", "idle", "70"), &[]);
    });
    let c = |slot: u8, from, to| {
        changed("battery.state.changed", from, to).data(json!({ "slot": slot }))
    };
    bus.expect(
        |s| s.battery(0, &battery("true", "idle", "80"), &["state"]),
        &[c(0, "asleep", "idle")],
    );
    bus.expect(
        |s| s.battery(0, &battery("true", "active", "80"), &["state"]),
        &[c(0, "idle", "active")],
    );
    bus.expect(
        |s| s.battery(1, &battery("true", "unknown", "70"), &["state"]),
        &[c(1, "idle", "unknown")],
    );
    bus.ran("state");
}

#[test]
fn battery_charge_row() {
    let rules = pusher("charge", &["battery.charge.changed"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.battery(0, &battery("true", "active", "50"), &[]);
        s.battery(1, &battery("true", "active", "20"), &[]);
    });
    let c = |slot: u8, from, to| {
        changed("battery.charge.changed", from, to).data(json!({ "slot": slot }))
    };
    bus.expect(
        |s| s.battery(1, &battery("true", "active", "19"), &["charge"]),
        &[c(1, "20", "19")],
    );
    // Not an integer: nothing; it is still the next change's `from`.
    for not_int in ["19.5", "", "1e2", "n/a"] {
        bus.quiet("battery:1", "charge", |s| {
            s.battery(1, &battery("true", "active", not_int), &["charge"])
        });
    }
    bus.expect(
        |s| s.battery(1, &battery("true", "active", "18"), &["charge"]),
        &[c(1, "n/a", "18")],
    );
    bus.expect(
        |s| s.battery(0, &battery("true", "active", "49"), &["charge"]),
        &[c(0, "50", "49")],
    );
    bus.ran("charge");
}

#[test]
fn aux_and_cbb_charge_rows() {
    let rules = pusher("charges", &["aux.charge.changed", "cbb.charge.changed"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.set("aux-battery", "charge", "80");
        s.set("cb-battery", "charge", "95");
    });
    bus.expect(
        |s| s.set("aux-battery", "charge", "79"),
        &[changed("aux.charge.changed", "80", "79")],
    );
    bus.expect(
        |s| s.set("cb-battery", "charge", "96"),
        &[changed("cbb.charge.changed", "95", "96")],
    );
    bus.quiet("aux-battery", "charge", |s| {
        s.set("aux-battery", "charge", "n/a")
    });
    bus.services().set("aux-battery", "voltage", "12500");
    bus.expect(
        |s| s.set("aux-battery", "charge", "78"),
        &[changed("aux.charge.changed", "n/a", "78")],
    );
    bus.ran("charges");
}

#[test]
fn alarm_status_row() {
    let rules = pusher("alarm", &["alarm.*"]);
    let bus = Bus::start(&rules, &[], |s| s.set("alarm", "status", "disarmed"));
    let status = |to: &'static str| move |s: &Services<'_>| s.set("alarm", "status", to);
    let c = |from, to| changed("alarm.status.changed", from, to);
    bus.expect(status("delay-armed"), &[c("disarmed", "delay-armed")]);
    bus.expect(
        status("armed"),
        &[
            c("delay-armed", "armed"),
            changed("alarm.armed", "delay-armed", "armed"),
        ],
    );
    bus.expect(
        status("level-1-triggered"),
        &[
            c("armed", "level-1-triggered"),
            changed("alarm.triggered", "armed", "level-1-triggered").data(json!({"level": 1})),
        ],
    );
    bus.expect(
        status("level-2-triggered"),
        &[
            c("level-1-triggered", "level-2-triggered"),
            changed("alarm.triggered", "level-1-triggered", "level-2-triggered")
                .data(json!({"level": 2})),
        ],
    );
    bus.expect(
        status("disarmed"),
        &[
            c("level-2-triggered", "disarmed"),
            changed("alarm.disarmed", "level-2-triggered", "disarmed"),
        ],
    );
    bus.expect(
        status("disabled"),
        &[
            c("disarmed", "disabled"),
            changed("alarm.disarmed", "disarmed", "disabled"),
        ],
    );
    bus.expect(status("seatbox-access"), &[c("disabled", "seatbox-access")]);
    bus.expect(status("unknown"), &[c("seatbox-access", "unknown")]);
    bus.ran("alarm");
}

#[test]
fn power_manager_state_row() {
    let rules = pusher("power", &["power.state.changed"]);
    let bus = Bus::start(&rules, &[], |s| s.set("power-manager", "state", "running"));
    let c = |from, to| changed("power.state.changed", from, to);
    for (from, to) in [
        ("running", "suspending-imminent"),
        ("suspending-imminent", "suspending"),
        ("suspending", "running"),
        ("running", "hibernate-manual-pending"),
        ("hibernate-manual-pending", "hibernating-manual-imminent"),
    ] {
        bus.expect(|s| s.set("power-manager", "state", to), &[c(from, to)]);
    }
    bus.ran("power");
}

#[test]
fn power_manager_wakeup_source_row() {
    let rules = pusher("wake", &["power.wake"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.set("power-manager", "wakeup-source", "power-button")
    });
    bus.expect(
        |s| s.set("power-manager", "wakeup-source", "rtc"),
        &[changed("power.wake", "power-button", "rtc").data(json!({"source": "rtc"}))],
    );
    bus.expect(
        |s| s.set("power-manager", "wakeup-source", "45"),
        &[changed("power.wake", "rtc", "45").data(json!({"source": "45"}))],
    );
    // Other fields of the hash: nothing.
    bus.services().set("power-manager", "hibernate-level", "L2");
    bus.expect(
        |s| s.set("power-manager", "wakeup-source", "rtc"),
        &[changed("power.wake", "45", "rtc").data(json!({"source": "rtc"}))],
    );
    bus.ran("wake");
}

#[test]
fn internet_connectivity_row() {
    let rules = pusher("net", &["net.connectivity.changed"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.set("internet", "connectivity", "disconnected")
    });
    let c = |from, to| changed("net.connectivity.changed", from, to);
    for (from, to) in [
        ("disconnected", "connected"),
        ("connected", "no-sim"),
        ("no-sim", "failed"),
    ] {
        bus.expect(|s| s.set("internet", "connectivity", to), &[c(from, to)]);
    }
    bus.ran("net");
}

#[test]
fn ota_status_row() {
    let rules = pusher("ota", &["ota.status.changed"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.set("ota", "status:mdb", "idle");
        s.set("ota", "status:dbc", "idle");
        s.set("ota", "status", "idle");
    });
    let mdb = json!({"component": "mdb"});
    let dbc = json!({"component": "dbc"});
    bus.expect(
        |s| s.set("ota", "status:mdb", "downloading"),
        &[changed("ota.status.changed", "idle", "downloading").data(mdb.clone())],
    );
    bus.expect(
        |s| s.set("ota", "status:dbc", "installing"),
        &[changed("ota.status.changed", "idle", "installing").data(dbc)],
    );
    // The MDB instance's flat pair: not the row's field.
    bus.services().set("ota", "status", "downloading");
    bus.expect(
        |s| s.set("ota", "status:mdb", "pending-reboot"),
        &[changed("ota.status.changed", "downloading", "pending-reboot").data(mdb)],
    );
    bus.ran("ota");
}

#[test]
fn keycard_authentication_row() {
    let rules = pusher("tap", &["keycard.auth.*"]);
    let bus = Bus::start(&rules, &[], |_| {});
    let data = |uid: &str, kind: &str| json!({"uid": uid, "type": kind});
    // The first tap: an event too (no `from`: nothing was there).
    bus.expect(
        |s| s.keycard_tap("passed", "04a1b2c3", "scooter"),
        &[changed("keycard.auth.passed", "", "passed")
            .from(None)
            .data(data("04a1b2c3", "scooter"))],
    );
    // `passed` after `passed`: each tap is an event (*differs*).
    bus.expect(
        |s| s.keycard_tap("passed", "04a1b2c3", "scooter"),
        &[changed("keycard.auth.passed", "passed", "passed").data(data("04a1b2c3", "scooter"))],
    );
    bus.expect(
        |s| s.keycard_tap("failed", "beef", "factory"),
        &[changed("keycard.auth.failed", "passed", "failed").data(data("beef", "factory"))],
    );
    bus.expect(
        |s| s.keycard_tap("passed", "0badcafe", "activation"),
        &[changed("keycard.auth.passed", "failed", "passed").data(data("0badcafe", "activation"))],
    );
    // The hash expires (10 s on the scooter; here 200 ms). A tap written
    // after it without `uid`/`type` has neither in `data`. Its `from` is
    // what ruled saw last: the expiry is not announced.
    let _: i64 = bus.redis.query(&["PEXPIRE", "keycard", "200"]);
    wait_for("the keycard hash expired", || {
        bus.redis.query::<i64>(&["EXISTS", "keycard"]) == 0
    });
    bus.expect(
        |s| {
            s.set_many_publish_one(
                "keycard",
                &[("authentication", "failed")],
                "authentication",
                Some(10),
            )
        },
        &[changed("keycard.auth.failed", "passed", "failed")],
    );
    wait_for("the two passed taps and more ran the rule", || {
        list(&bus.redis, "test:tap").len() >= 2
    });
}

#[test]
fn dashboard_ready_row() {
    let rules = pusher("ready", &["dashboard.ready"]);
    let bus = Bus::start(&rules, &[], |s| s.set("dashboard", "ready", "false"));
    bus.expect(
        |s| s.set("dashboard", "ready", "true"),
        &[changed("dashboard.ready", "false", "true")],
    );
    // -> false emits nothing; it is the next change's `from`.
    bus.quiet("dashboard", "ready", |s| {
        s.set("dashboard", "ready", "false")
    });
    bus.services().set("dashboard", "mode", "speedometer");
    bus.expect(
        |s| s.set("dashboard", "ready", "true"),
        &[changed("dashboard.ready", "false", "true")],
    );
    bus.ran("ready");
}

#[test]
fn input_events_row() {
    let rules = pusher("buttons", &["button.*"]);
    let bus = Bus::start(&rules, &[], |_| {});
    let gestures = ["press", "release", "tap", "long-tap", "hold", "double-tap"];
    let mut want = Vec::new();
    for source in ["horn", "seatbox", "brake:left", "brake:right"] {
        for gesture in gestures {
            let payload = format!("{source}:{gesture}");
            let topic = format!("button.{}.{gesture}", source.replace(':', "."));
            // Anything else on the channel is ignored.
            bus.services().message("input-events", "horn:wiggle");
            assert_eq!(bus.services().message("input-events", &payload), 1);
            want.push(message(&topic));
        }
    }
    for ignored in [
        "brake:press",
        "brake:middle:hold",
        "horn",
        "horn:press:x",
        "HORN:PRESS",
        "seatbox:hold ",
        "",
    ] {
        bus.services().message("input-events", ignored);
    }
    // vehicle-service's raw edges on `buttons` are not a source.
    bus.services().message("buttons", "horn:on");
    // The marker: messages of a channel arrive in order, so once its
    // event is heard every message before it was taken.
    bus.services().message("input-events", "brake:left:hold");
    want.push(message("button.brake.left.hold"));
    assert_eq!(bus.heard(want.len()), want);
    assert_eq!(bus.all(), want, "more than the marker");
    for heard in bus.listener.heard() {
        let e = heard.envelope.as_object().unwrap();
        assert!(!e.contains_key("from") && !e.contains_key("to"), "{e:?}");
    }
    bus.ran("buttons");
}

#[test]
fn motion_interrupt_row() {
    let rules = pusher("motion", &["motion.detected"]);
    let bus = Bus::start(&rules, &[], |_| {});
    let edge = r#"{"type":"edge","timestamp":1796056530756,"engine":"any-motion"}"#;
    let wake = r#"{"type":"wake-hibernation","timestamp":1796056531000,"engine":"slow-motion"}"#;
    bus.expect(
        |s| s.message("motion:interrupt", edge),
        &[message("motion.detected").data(json!({"raw": edge}))],
    );
    bus.expect(
        |s| s.message("motion:interrupt", wake),
        &[message("motion.detected").data(json!({"raw": wake}))],
    );
    bus.expect(
        |s| s.message("motion:interrupt", "not json"),
        &[message("motion.detected").data(json!({"raw": "not json"}))],
    );
    bus.ran("motion");
}

#[test]
fn sms_received_row() {
    let rules = pusher("sms", &["sms.received"]);
    let bus = Bus::start(&rules, &[], |_| {});
    let sms =
        r#"{"from":"+4915112345678","text":"unlock, please","received":"2026-12-01T12:00:00Z"}"#;
    bus.expect(
        |s| s.message("sms:received", sms),
        &[message("sms.received").data(json!({"raw": sms}))],
    );
    // modem-service's `sms` hash and `sms:sent`: not sources.
    bus.quiet_unwatched(|s| {
        s.set("sms", "state", "sending");
        s.message("sms:sent", "{}");
    });
    bus.ran("sms");
}

impl Bus {
    /// `write` of things nobody watches, then a marker change: only the
    /// marker's envelope is heard.
    fn quiet_unwatched<R>(&self, write: impl FnOnce(&Services<'_>) -> R) {
        let before = self.listener.heard().len();
        write(&self.services());
        let value = format!("marker-{before}");
        self.services().message("sms:received", &value);
        let got = self.heard(before + 1);
        assert_eq!(
            &got[before..],
            [message("sms.received").data(json!({ "raw": value }))]
        );
    }
}

// ---- The rules under the table ----------------------------------------

/// At start the watched fields are read, emitting nothing; they are the
/// `from` of the next change. At a reload, the fields that become
/// watched (`--sources used`: a new rule's source) likewise.
#[test]
fn seeding_emits_nothing() {
    let rules = pusher("kickstand", &["vehicle.kickstand.*"]);
    let bus = Bus::start(&rules, &["--sources", "used"], |s| {
        s.set_with_timestamp("vehicle", "state", "parked");
        s.set("vehicle", "kickstand", "down");
        s.set("alarm", "status", "disarmed");
        s.battery(0, &battery("true", "active", "80"), &[]);
        s.keycard_tap("passed", "04a1b2c3", "scooter");
    });
    assert!(bus.all().is_empty(), "seeding emitted");
    bus.expect(
        |s| s.set("vehicle", "kickstand", "up"),
        &[changed("vehicle.kickstand.up", "down", "up")],
    );
    // The alarm is not live yet: its change is not read.
    bus.services().set("alarm", "status", "armed");
    let rules2 = format!("{rules}\n{}", pusher("alarm", &["alarm.status.changed"]));
    let next = build_rules(bus.dir.path(), "rules2", &[("rules.toml", &rules2)]);
    replace_by_rename(&bus.bundle, &std::fs::read(&next).unwrap());
    bus.ruled.signal(Signal::SIGHUP);
    bus.ruled.wait_log(&["bundle reloaded", "added=1"]);
    wait_for("ruled reads the alarm hash", || {
        bus.redis
            .query::<Vec<String>>(&["PUBSUB", "CHANNELS", "alarm"])
            .len()
            == 1
    });
    bus.expect(
        |s| s.set("alarm", "status", "delay-armed"),
        &[changed("alarm.status.changed", "armed", "delay-armed")],
    );
    bus.ran("alarm");
}

#[test]
fn equal_values_emit_nothing() {
    let rules = pusher("any", &["vehicle.*", "alarm.*", "battery.*"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.set_with_timestamp("vehicle", "state", "parked");
        s.set("vehicle", "kickstand", "down");
        s.set("alarm", "status", "armed");
        s.battery(0, &battery("true", "active", "80"), &[]);
    });
    for _ in 0..2 {
        bus.quiet("vehicle", "state", |s| {
            s.set_with_timestamp("vehicle", "state", "parked")
        });
        bus.quiet("vehicle", "kickstand", |s| {
            s.set("vehicle", "kickstand", "down")
        });
        bus.quiet("alarm", "status", |s| s.set("alarm", "status", "armed"));
        bus.quiet("battery:0", "charge", |s| {
            s.battery(0, &battery("true", "active", "80"), &["charge", "state"])
        });
    }
    assert!(bus.all().is_empty(), "an equal value emitted");
    bus.expect(
        |s| s.set("vehicle", "kickstand", "up"),
        &[changed("vehicle.kickstand.up", "down", "up")],
    );
    bus.expect(
        |s| s.battery(0, &battery("true", "active", "79"), &["charge"]),
        &[changed("battery.charge.changed", "80", "79").data(json!({"slot": 0}))],
    );
}

#[test]
fn first_value_is_the_baseline() {
    let rules = pusher("any", &["vehicle.*", "battery.*", "alarm.*"]);
    let bus = Bus::start(&rules, &[], |_| {});
    bus.quiet("vehicle", "kickstand", |s| {
        s.set("vehicle", "kickstand", "down")
    });
    bus.quiet("vehicle", "state", |s| {
        s.set_with_timestamp("vehicle", "state", "stand-by")
    });
    bus.quiet("alarm", "status", |s| s.set("alarm", "status", "armed"));
    bus.quiet("battery:1", "present", |s| {
        s.battery(
            1,
            &battery("true", "idle", "60"),
            &["present", "state", "charge"],
        )
    });
    wait_for("each battery field read", || {
        bus.reads("battery:1", "charge") == 1 && bus.reads("battery:1", "state") == 1
    });
    assert!(bus.all().is_empty(), "a first value emitted");
    bus.expect(
        |s| s.set("vehicle", "kickstand", "up"),
        &[changed("vehicle.kickstand.up", "down", "up")],
    );
    bus.expect(
        |s| s.battery(1, &battery("false", "idle", "60"), &["present"]),
        &[changed("battery.removed", "true", "false").data(json!({"slot": 1}))],
    );
}

/// `Clear`: the hash's watched fields become absent, nothing is emitted,
/// each next value is a first value. A field notified after it
/// disappeared emits nothing (*differs*).
#[test]
fn cleared_makes_fields_absent() {
    let rules = pusher("any", &["vehicle.*"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.set_with_timestamp("vehicle", "state", "parked");
        s.set("vehicle", "kickstand", "down");
    });
    // `cleared` is read (the hash's first watched field is `state`).
    bus.quiet("vehicle", "state", |s| s.clear("vehicle"));
    bus.quiet("vehicle", "kickstand", |s| {
        s.set("vehicle", "kickstand", "up")
    });
    bus.quiet("vehicle", "state", |s| {
        s.set_with_timestamp("vehicle", "state", "stand-by")
    });
    assert!(bus.all().is_empty(), "a clear or a first value emitted");
    bus.expect(
        |s| s.set_with_timestamp("vehicle", "state", "parked"),
        &[
            changed("vehicle.state.changed", "stand-by", "parked"),
            changed("vehicle.unlocked", "stand-by", "parked"),
        ],
    );
    // Notified, but gone (event-service emits `vehicle.kickstand.down`
    // without `to`): nothing.
    bus.quiet("vehicle", "kickstand", |s| {
        let _: i64 = s_redis(s).query(&["HDEL", "vehicle", "kickstand"]);
        s.message("vehicle", "kickstand");
    });
    bus.quiet("vehicle", "kickstand", |s| {
        s.set("vehicle", "kickstand", "down")
    });
    assert_eq!(bus.all().len(), 2, "a disappeared field emitted");
    bus.expect(
        |s| s.set("vehicle", "kickstand", "up"),
        &[changed("vehicle.kickstand.up", "down", "up")],
    );
}

/// The Redis a [`Services`] writes to.
fn s_redis<'a>(services: &Services<'a>) -> &'a RedisServer {
    services.redis()
}

/// `ReplaceAll`: every watched field of the hash is read again, and each
/// real change is emitted at once (*differs*), in the profile's order.
#[test]
fn replaced_emits_real_changes() {
    let rules = pusher("any", &["vehicle.*", "ride.*"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.set_with_timestamp("vehicle", "state", "parked");
        s.set("vehicle", "kickstand", "down");
        s.set("vehicle", "blinker:switch", "off");
    });
    bus.expect(
        |s| {
            s.replace_all(
                "vehicle",
                &[
                    ("state", "ready-to-drive"),
                    ("kickstand", "up"),
                    ("blinker:switch", "off"),
                    ("seatbox:lock", "closed"),
                ],
            )
        },
        &[
            changed("vehicle.state.changed", "parked", "ready-to-drive"),
            changed("ride.started", "parked", "ready-to-drive"),
            changed("vehicle.kickstand.up", "down", "up"),
        ],
    );
    // The same again: nothing; `seatbox:lock` was a first value above.
    bus.quiet("vehicle", "state", |s| {
        s.replace_all(
            "vehicle",
            &[
                ("state", "ready-to-drive"),
                ("kickstand", "up"),
                ("blinker:switch", "off"),
                ("seatbox:lock", "closed"),
            ],
        )
    });
    bus.expect(
        |s| s.set("vehicle", "seatbox:lock", "open"),
        &[changed("vehicle.seatbox.opened", "closed", "open")],
    );
    // A field the new hash lacks becomes absent, emitting nothing; its
    // next value is a first value.
    bus.quiet("vehicle", "state", |s| {
        s.replace_all(
            "vehicle",
            &[("state", "ready-to-drive"), ("seatbox:lock", "open")],
        )
    });
    bus.quiet("vehicle", "kickstand", |s| {
        s.set("vehicle", "kickstand", "down")
    });
    bus.expect(
        |s| s.set("vehicle", "kickstand", "up"),
        &[changed("vehicle.kickstand.up", "down", "up")],
    );
}

/// `fault` (battery-service) and `seatbox:opened` (vehicle-service) are
/// not fields: ignored, without a read.
#[test]
fn non_field_names_are_ignored_without_a_read() {
    let rules = pusher("any", &["vehicle.*", "battery.*"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.set("vehicle", "kickstand", "down");
        s.battery(0, &battery("true", "active", "80"), &[]);
    });
    let reads = |redis: &RedisServer| commandstat(redis, "hmget") + commandstat(redis, "hget");
    let before = reads(&bus.redis);
    let s = bus.services();
    let _: i64 = bus.redis.query(&["SADD", "battery:0:fault", "34"]);
    s.message("battery:0", "fault");
    s.message("vehicle", "seatbox:opened");
    s.message("vehicle", "seatbox:closed");
    s.message("vehicle", "authentication");
    // The marker: one notification, one read.
    bus.expect(
        |s| s.set("vehicle", "kickstand", "up"),
        &[changed("vehicle.kickstand.up", "down", "up")],
    );
    assert_eq!(
        reads(&bus.redis) - before,
        1,
        "only the kickstand was read; log:\n{}",
        bus.ruled.log_text()
    );
}

/// battery-service's `MULTI` (`HMSET` of every field, one `PUBLISH` per
/// changed field): each notification reads its own field; each change
/// emits once, in the order published.
#[test]
fn battery_multi_each_change_once() {
    let rules = pusher("any", &["battery.*"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.battery(0, &battery("true", "idle", "80"), &[]);
    });
    let slot = json!({"slot": 0});
    bus.expect(
        |s| s.battery(0, &battery("true", "active", "79"), &["charge", "state"]),
        &[
            changed("battery.charge.changed", "80", "79").data(slot.clone()),
            changed("battery.state.changed", "idle", "active").data(slot.clone()),
        ],
    );
    bus.expect(
        |s| {
            s.battery(
                0,
                &battery("false", "asleep", "78"),
                &["present", "state", "charge", "voltage"],
            )
        },
        &[
            changed("battery.removed", "true", "false").data(slot.clone()),
            changed("battery.state.changed", "active", "asleep").data(slot.clone()),
            changed("battery.charge.changed", "79", "78").data(slot.clone()),
        ],
    );
    // Nothing changed, nothing published; then one change.
    bus.services()
        .battery(0, &battery("false", "asleep", "78"), &[]);
    bus.expect(
        |s| s.battery(0, &battery("false", "asleep", "77"), &["charge"]),
        &[changed("battery.charge.changed", "78", "77").data(slot)],
    );
}

/// `engine-ecu` (silent HSETs, `throttle`, `odometer` on every frame) and
/// `settings` are no source's: not subscribed, nothing emitted.
#[test]
fn unwatched_hashes_emit_nothing() {
    let rules = pusher("any", &["*"]);
    let bus = Bus::start(&rules, &[], |s| s.set("vehicle", "kickstand", "down"));
    let mut channels: Vec<String> = bus.redis.query(&["PUBSUB", "CHANNELS"]);
    channels.sort();
    // The built-in guards read `engine-ecu speed`, but fresh at the
    // action (docs/safety.md#guards): a field only guards read is not
    // subscribed to.
    for unwatched in ["engine-ecu", "settings", "gps", "buttons", "internet-usage"] {
        assert!(!channels.iter().any(|c| c == unwatched), "{channels:?}");
    }
    let s = bus.services();
    for speed in ["10", "20", "30"] {
        s.set_silently("engine-ecu", "speed", speed);
        s.set("engine-ecu", "odometer", "12345");
        s.set("engine-ecu", "kers", "on");
    }
    s.set("engine-ecu", "throttle", "on");
    s.set("engine-ecu", "throttle", "off");
    s.set("settings", "alarm.enabled", "true");
    s.set("settings", "alarm.enabled", "false");
    s.set("settings", "scooter.auto-standby-seconds", "300");
    s.set_silently("gps", "latitude", "52.520008");
    s.message("gps:tpv", r#"{"lat":52.520008}"#);
    bus.expect(
        |s| s.set("vehicle", "kickstand", "up"),
        &[changed("vehicle.kickstand.up", "down", "up")],
    );
    assert_eq!(counter(&bus.redis, "rejected"), 0);
}

// ---- The issue's must-shows ---------------------------------------------

/// A rules directory of one event-service-era file (a rule on
/// `button.seatbox.press` with one `exec` step), built by `rulec build`
/// with nothing else, run by `ruled` alone with a Redis: vehicle-service's
/// `PUBLISH input-events seatbox:press` runs it.
#[test]
fn an_event_service_rule_runs_on_ruled_alone() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let touched = dir.path().join("touched");
    let command = script(
        dir.path(),
        "open-seatbox-light",
        &format!("touch {}", touched.display()),
    );
    let file = format!(
        "# event-service: light the seatbox on a press\n\
         [[rule]]\nname = \"seatbox-light\"\non = [\"button.seatbox.press\"]\n\n\
         [[rule.step]]\ndo = \"exec\"\ncommand = \"{command}\"\n"
    );
    let bundle = build_rules(dir.path(), "rules", &[("seatbox.toml", &file)]);
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let heard: i64 = redis.query(&["PUBLISH", "input-events", "seatbox:press"]);
    assert_eq!(heard, 1, "ruled subscribes `input-events`");
    if poll(|| touched.exists().then_some(())).is_none() {
        panic!("the exec step never ran; log:\n{}", ruled.log_text());
    }
}

/// A forged `ev:alarm.disarmed` (a valid envelope) never cancels a real
/// rule's run: delivered by a rule's `alarm.*` pattern, it is counted in
/// `rejected`, and the run goes on to its end. The real
/// disarm (derived from the alarm hash) does cancel it.
#[test]
fn a_forged_owned_topic_never_cancels_a_run() {
    let rules = "[[rule]]\nname = \"alarm-log\"\non = [\"alarm.*\"]\n\n\
                 [[rule.step]]\ndo = \"redis\"\nlist = \"test:alarm-log\"\npush = \"x\"\n\n\
                 [[rule]]\nname = \"hazards\"\non = [\"alarm.triggered\"]\n\
                 cancel-on = [\"alarm.disarmed\"]\n\n\
                 [[rule.step]]\ndo = \"redis\"\nlist = \"test:hazards\"\npush = \"on\"\n\n\
                 [[rule.step]]\ndo = \"redis\"\nafter = \"4s\"\nlist = \"test:hazards\"\npush = \"off\"\n";
    let bus = Bus::start(rules, &[], |s| s.set("alarm", "status", "armed"));
    // Owned topics are not subscribed; the forgery reaches ruled through
    // the `alarm.*` rule's pattern only, and is dropped there.
    let exact: Vec<String> = bus.redis.query(&["PUBSUB", "CHANNELS", "ev:*"]);
    assert!(exact.is_empty(), "{exact:?}");
    let hazards = || list(&bus.redis, "test:hazards");
    bus.services().set("alarm", "status", "level-1-triggered");
    wait_for("the run started", || hazards() == ["on"]);
    let forged = json!({
        "id": "1-1", "ts": support::now_ms(), "topic": "alarm.disarmed", "src": "adapter",
        "from": "level-1-triggered", "to": "disarmed",
    });
    bus.services()
        .message("ev:alarm.disarmed", &forged.to_string());
    wait_for("the forgery counted", || {
        counter(&bus.redis, "rejected") == 1
    });
    bus.ruled.wait_log(&[
        "skipping an event on a topic ruled derives",
        "ev:alarm.disarmed",
    ]);
    wait_for("the run went on to its end", || hazards() == ["on", "off"]);
    assert_eq!(
        bus.ruled.count_log(&["run ended", "cancelled"]),
        0,
        "{}",
        bus.ruled.log_text()
    );
    // The real one cancels.
    bus.services().set("alarm", "status", "level-2-triggered");
    wait_for("the second run started", || hazards().len() == 3);
    bus.services().set("alarm", "status", "disarmed");
    bus.ruled.wait_log(&["run ended", "cancelled"]);
    assert_eq!(counter(&bus.redis, "rejected"), 1);
    // The listener heard the forgery too (`PSUBSCRIBE ev:*`); ruled
    // published only what it derived.
    let heard: Vec<_> = bus
        .listener
        .heard()
        .into_iter()
        .filter(|heard| heard.envelope["id"] != "1-1")
        .collect();
    assert_eq!(heard.len() + 1, bus.listener.heard().len());
    let topics: Vec<String> = published(&bus.redis, &heard)
        .into_iter()
        .map(|(topic, ..)| topic)
        .collect();
    assert_eq!(
        topics,
        [
            "alarm.status.changed",
            "alarm.triggered",
            "alarm.status.changed",
            "alarm.triggered",
            "alarm.status.changed",
            "alarm.disarmed",
        ]
    );
}

// ---- Issue 29: the bus findings ------------------------------------------

/// A bare `PUBLISH alarm cleared` (no `DEL`) changes nothing: the field
/// is read, still there, and keeps its value, so each real trigger after
/// it (alarm-service's `HSET` + `PUBLISH`) still derives
/// `alarm.triggered` and runs the alarm rule. Before: 5 triggers with the
/// forgery gave 0 runs.
#[test]
fn a_bare_cleared_does_not_silence_the_alarm() {
    let rules = pusher("alarm", &["alarm.triggered"]);
    let bus = Bus::start(&rules, &[], |s| s.set("alarm", "status", "armed"));
    // Each write waits until ruled took it (a read of the alarm hash).
    let took = || bus.ruled.count_log(&["hash=alarm"]);
    let paced = |write: &dyn Fn(&Services<'_>)| {
        let before = took();
        write(&bus.services());
        wait_for("ruled took the write", || took() > before);
    };
    let triggers = 5;
    for _ in 0..triggers {
        paced(&|s| {
            s.message("alarm", "cleared");
        });
        paced(&|s| s.set("alarm", "status", "level-2-triggered"));
        paced(&|s| {
            s.message("alarm", "cleared");
        });
        paced(&|s| s.set("alarm", "status", "armed"));
    }
    let runs = poll(|| Some(list(&bus.redis, "test:alarm").len()).filter(|n| *n >= triggers));
    assert_eq!(
        runs,
        Some(triggers),
        "{} runs of {triggers} triggers; log:\n{}",
        list(&bus.redis, "test:alarm").len(),
        bus.ruled.log_text()
    );
}

/// A replayed `PUBLISH keycard authentication` (the hash still living,
/// nothing written) runs nothing and is counted in `rejected`: 1 tap + 5
/// replays = 1 run, 5 counted (before: 6 runs, 0 counted). A real tap
/// after them (keycard-service writes the hash anew, with its expiry)
/// runs the rule again.
#[test]
fn a_replayed_keycard_tap_runs_nothing() {
    let rules = pusher("tap", &["keycard.auth.passed"]);
    let bus = Bus::start(&rules, &[], |_| {});
    let taps = || list(&bus.redis, "test:tap").len();
    bus.services().keycard_tap("passed", "04a1b2c3", "scooter");
    wait_for("the tap ran the rule", || taps() == 1);
    for _ in 0..5 {
        bus.quiet("keycard", "authentication", |s| {
            s.message("keycard", "authentication")
        });
    }
    let counted = poll(|| Some(counter(&bus.redis, "rejected")).filter(|n| *n >= 5));
    assert_eq!(
        (counted, taps()),
        (Some(5), 1),
        "rejected {}, runs {}; log:\n{}",
        counter(&bus.redis, "rejected"),
        taps(),
        bus.ruled.log_text()
    );
    bus.ruled
        .wait_log(&["skipping an event", "not written anew", "keycard"]);
    // The replays' reads took milliseconds: the new expiry is later.
    bus.services().keycard_tap("passed", "04a1b2c3", "scooter");
    wait_for("the second real tap ran the rule", || taps() == 2);
    assert_eq!(counter(&bus.redis, "rejected"), 5);
}

/// Owned means the whole family: a forged `ev:alarm.bogus` (no topic the
/// profile derives, but of the `alarm` family) reaches no `alarm.*` rule
/// and is counted in `rejected`. Before: the rule ran, nothing counted.
#[test]
fn a_forged_topic_of_an_owned_family_reaches_no_rule() {
    let rules = pusher("alarm", &["alarm.*"]);
    let bus = Bus::start(&rules, &[], |s| s.set("alarm", "status", "armed"));
    let forged = json!({
        "id": "1-1", "ts": support::now_ms(), "topic": "alarm.bogus", "src": "adapter",
    });
    bus.services()
        .message("ev:alarm.bogus", &forged.to_string());
    let counted = poll(|| Some(counter(&bus.redis, "rejected")).filter(|n| *n >= 1));
    assert_eq!(
        (counted, list(&bus.redis, "test:alarm").len()),
        (Some(1), 0),
        "log:\n{}",
        bus.ruled.log_text()
    );
    bus.ruled.wait_log(&[
        "skipping an event on a topic ruled derives",
        "ev:alarm.bogus",
    ]);
    // A real change still reaches the rule.
    bus.services().set("alarm", "status", "disarmed");
    bus.ran("alarm");
}

/// Stream `events` is bounded in bytes: a 60 KB watched value is cut at
/// 1 KiB with the marker in the envelope on the bus (stream entry and
/// `ev:` message), so 100 such changes keep the stream small (before:
/// each entry 120 KB, `from` and `to`).
#[test]
fn a_large_value_is_cut_on_the_bus() {
    let rules = pusher("state", &["vehicle.state.changed"]);
    let bus = Bus::start(&rules, &[], |s| s.set("vehicle", "state", "parked"));
    let changes = 100;
    for n in 0..changes {
        let value = format!("{n:03}{}", "x".repeat(60_000));
        let before = bus.listener.heard().len();
        bus.services().set("vehicle", "state", &value);
        bus.heard(before + 1);
    }
    let entries: Vec<(String, Vec<(String, String)>)> =
        bus.redis.query(&["XRANGE", "events", "-", "+"]);
    assert_eq!(entries.len(), changes);
    let largest = entries
        .iter()
        .flat_map(|(_, fields)| fields.iter().map(|(_, v)| v.len()))
        .max()
        .unwrap();
    let memory: i64 = bus.redis.query(&["MEMORY", "USAGE", "events"]);
    eprintln!(
        "{changes} changes of 60 KB: largest stream field {largest} bytes, stream {memory} bytes"
    );
    assert!(largest <= 3 * 1024, "a stream field of {largest} bytes");
    let heard = bus.listener.heard();
    let to = heard[1].envelope["to"].as_str().unwrap();
    assert!(to.starts_with("001xxx"), "{to:.40}");
    assert!(
        to.ends_with("…[cut from 60003 bytes]"),
        "{}",
        &to[to.len() - 40..]
    );
    assert!(to.len() < 1100, "{} bytes", to.len());
    bus.ran("state");
}

/// A tap from before the start, replayed after it, runs nothing either:
/// seeding reads the keycard hash's expiry with its values.
#[test]
fn a_tap_from_before_the_start_replayed_runs_nothing() {
    let rules = pusher("tap", &["keycard.auth.passed"]);
    let bus = Bus::start(&rules, &[], |s| {
        s.keycard_tap("passed", "04a1b2c3", "scooter")
    });
    bus.quiet("keycard", "authentication", |s| {
        s.message("keycard", "authentication")
    });
    let counted = poll(|| Some(counter(&bus.redis, "rejected")).filter(|n| *n >= 1));
    assert_eq!(
        (counted, list(&bus.redis, "test:tap").len()),
        (Some(1), 0),
        "log:\n{}",
        bus.ruled.log_text()
    );
    bus.services().keycard_tap("passed", "04a1b2c3", "scooter");
    bus.ran("tap");
}
