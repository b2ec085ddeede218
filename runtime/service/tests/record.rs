//! `ruled record` (docs/recording.md) end to end, with the real pieces:
//! rules built by the real `rulec` with its built-in `librescoot`
//! profile, the real `ruled` running them against its own
//! `redis-server`, the Librescoot bus emulator (`support/librescoot.rs`)
//! writing a short ride, the real `ruled record` recording it, and the
//! real `rulec simulate` replaying the recording: the derived events and
//! the actions must be those the live `ruled` gave.
//!
//! Needs `rulec` built beside `ruled` (`cargo build -p rulec`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use support::librescoot::{build_rules, rulec, Listener, Services};
use support::{poll, wait_for, Monitor, RedisServer, Ruled};

/// A rule file: `name` on `on`, pushing `name` onto list `test:<name>`.
fn pusher(name: &str, on: &[&str]) -> String {
    let on: Vec<String> = on.iter().map(|t| format!("{t:?}")).collect();
    format!(
        "[[rule]]\nname = \"{name}\"\non = [{}]\n\n[[rule.step]]\ndo = \"redis\"\n\
         list = \"test:{name}\"\npush = \"{name}\"\n",
        on.join(", ")
    )
}

fn ride_rules() -> String {
    [
        pusher("unlocked", &["vehicle.unlocked"]),
        pusher("ride", &["ride.*"]),
        pusher("charge", &["battery.charge.changed"]),
        pusher("locked", &["vehicle.locked"]),
        pusher("alarm", &["alarm.triggered"]),
        pusher("brake", &["button.brake.left.hold"]),
    ]
    .join("\n")
}

fn battery(charge: &str) -> [(&str, &str); 5] {
    [
        ("present", "true"),
        ("state", "active"),
        ("charge", charge),
        ("voltage", "52000"),
        ("temperature-state", "ideal"),
    ]
}

/// A running `ruled record`.
struct Recorder {
    child: Child,
    out: PathBuf,
}

impl Recorder {
    fn start(redis: &RedisServer, bundle: &Path, out: PathBuf, extra: &[&str]) -> Recorder {
        let child = Command::new(env!("CARGO_BIN_EXE_ruled"))
            .arg("record")
            .arg("--bundle")
            .arg(bundle)
            .arg("--redis")
            .arg(redis.url())
            .arg("--out")
            .arg(&out)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ruled record");
        Recorder { child, out }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Entries of the recording so far (`[[...]]` headers).
    fn entries(&self) -> usize {
        self.text().lines().filter(|l| l.starts_with("[[")).count()
    }

    /// SIGINT, then the exit code and stderr.
    fn interrupt(mut self) -> (Option<i32>, String) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
        let status = poll(|| self.child.try_wait().expect("wait")).expect("ruled record stopped");
        let mut err = String::new();
        use std::io::Read;
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status.code(), err)
    }
}

/// What happened, as compared: derived events (topic, from, to, data)
/// and actions (list, push), each in order.
#[derive(Debug, Default, PartialEq)]
struct Happened {
    derived: Vec<(String, Value, Value, Value)>,
    actions: Vec<(String, String)>,
}

/// The live run's: every envelope heard on `ev:*`, every push MONITOR saw
/// on a `test:` list.
fn live(listener: &Listener, monitor: &Monitor) -> Happened {
    let derived = listener
        .heard()
        .into_iter()
        .map(|heard| {
            let e = heard.envelope;
            (
                e["topic"].as_str().unwrap_or_default().to_string(),
                e["from"].clone(),
                e["to"].clone(),
                e["data"].clone(),
            )
        })
        .collect();
    let actions = monitor
        .commands()
        .into_iter()
        .filter(|(_, args)| {
            args.len() == 3 && args[0].ends_with("PUSH") && args[1].starts_with("test:")
        })
        .map(|(_, args)| (args[1].clone(), args[2].clone()))
        .collect();
    Happened { derived, actions }
}

/// `rulec simulate BUNDLE --timeline RECORDING --format json`'s.
fn simulated(bundle: &Path, recording: &Path) -> Happened {
    let out = Command::new(rulec())
        .arg("simulate")
        .arg(bundle)
        .arg("--timeline")
        .arg(recording)
        .arg("--format")
        .arg("json")
        .output()
        .expect("run rulec simulate");
    assert!(
        out.status.success(),
        "rulec simulate failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut happened = Happened::default();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let line: Value = serde_json::from_str(line).expect("a JSON line");
        let text = |key: &str| line[key].as_str().unwrap_or_default().to_string();
        match line["kind"].as_str() {
            Some("derived") => {
                let data = line["data"]
                    .as_str()
                    .map_or(Value::Null, |d| serde_json::from_str(d).unwrap());
                happened.derived.push((
                    text("topic"),
                    line["from"].clone(),
                    line["to"].clone(),
                    data,
                ));
            }
            Some("action") => happened.actions.push((text("list"), text("push"))),
            _ => {}
        }
    }
    happened
}

#[test]
fn a_recorded_ride_simulates_as_ruled_ran_it() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let bundle = build_rules(dir.path(), "rules", &[("rules.toml", &ride_rules())]);
    let bus = Services::new(&redis);
    // The scooter as it stands before the ride.
    bus.set_with_timestamp("vehicle", "state", "stand-by");
    bus.battery(0, &battery("80"), &[]);
    bus.set("alarm", "status", "disarmed");

    let recorder = Recorder::start(&redis, &bundle, dir.path().join("ride.toml"), &[]);
    wait_for("the recorder seeded and subscribed", || {
        recorder.text().contains("before-start = true")
            && redis
                .query::<Vec<redis::Value>>(&["PUBSUB", "NUMSUB", "vehicle"])
                .get(1)
                == Some(&redis::Value::Int(1))
    });
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let listener = Listener::start(&redis);
    let monitor = Monitor::start(&redis, dir.path().join("monitor.log"));

    type Write = Box<dyn Fn(&Services<'_>)>;
    let ride: Vec<(Write, &str)> = vec![
        (
            Box::new(|s| s.set_with_timestamp("vehicle", "state", "parked")),
            "test:unlocked",
        ),
        (
            Box::new(|s| s.set_with_timestamp("vehicle", "state", "ready-to-drive")),
            "test:ride",
        ),
        (
            Box::new(|s| s.battery(0, &battery("79"), &["charge"])),
            "test:charge",
        ),
        (
            Box::new(|s| {
                s.message("input-events", "brake:left:hold");
            }),
            "test:brake",
        ),
        (
            Box::new(|s| s.battery(0, &battery("78"), &["charge"])),
            "test:charge",
        ),
        (
            Box::new(|s| s.set_with_timestamp("vehicle", "state", "parked")),
            "test:ride",
        ),
        (
            Box::new(|s| s.set_with_timestamp("vehicle", "state", "stand-by")),
            "test:locked",
        ),
        (Box::new(|s| s.set("alarm", "status", "armed")), ""),
        (
            Box::new(|s| s.set("alarm", "status", "level-1-triggered")),
            "test:alarm",
        ),
    ];
    // Paced as the bus needs (a notification names the field only): each
    // write waits until ruled published what it derived, acted on it, and
    // the recorder wrote it down.
    for (write, list) in &ride {
        let (heard, recorded) = (listener.heard().len(), recorder.entries());
        let pushed = if list.is_empty() {
            0
        } else {
            redis.list(list).len()
        };
        write(&bus);
        wait_for("ruled derived, acted and the recorder recorded", || {
            listener.heard().len() > heard
                && recorder.entries() > recorded
                && (list.is_empty() || redis.list(list).len() > pushed)
        });
    }
    let want = live(&listener, &monitor);
    assert_eq!(want.actions.len(), 8, "{want:#?}\n{}", ruled.log_text());
    let (code, err) = recorder.interrupt();
    assert_eq!(code, Some(0), "ruled record: {err}");

    let text = std::fs::read_to_string(dir.path().join("ride.toml")).unwrap();
    assert!(text.starts_with("# ruled record"), "{text}");
    assert!(text.contains("# profile: librescoot "), "{text}");
    let got = simulated(&bundle, &dir.path().join("ride.toml"));
    assert_eq!(got, want, "the recording:\n{text}");
    assert_eq!(
        want.derived.first().map(|d| d.0.as_str()),
        Some("vehicle.state.changed")
    );
    assert!(want
        .derived
        .iter()
        .any(|d| d.0 == "battery.charge.changed" && d.3 == json!({"slot": 0})));
}

/// It only reads: with the recorder alone on the bus, every command that
/// changes anything is the emulator's, and no key is added.
#[test]
fn the_recorder_writes_nothing() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let bundle = build_rules(dir.path(), "rules", &[("rules.toml", &ride_rules())]);
    let bus = Services::new(&redis);
    bus.set("alarm", "status", "disarmed");
    let monitor = Monitor::start(&redis, dir.path().join("monitor.log"));
    let recorder = Recorder::start(&redis, &bundle, dir.path().join("quiet.toml"), &[]);
    wait_for("the recorder seeded", || {
        recorder.text().contains("before-start = true")
    });
    let keys_before: Vec<String> = redis.query(&["KEYS", "*"]);
    bus.set("alarm", "status", "armed");
    bus.keycard_tap("passed", "04a1b2c3", "scooter");
    bus.clear("alarm");
    bus.message("input-events", "brake:left:hold");
    wait_for("the seed and the four writes recorded", || {
        recorder.entries() >= 5
    });
    let (code, err) = recorder.interrupt();
    assert_eq!(code, Some(0), "{err}");
    // The emulator's writes: HSET, PUBLISH, EXPIRE, DEL (MULTI/EXEC
    // around none of them here), and this test's KEYS.
    let emulator = ["HSET", "PUBLISH", "EXPIRE", "DEL", "KEYS"];
    // MONITOR shows the commands a script runs after its EVAL(SHA).
    let reads = [
        "EVAL",
        "EVALSHA",
        "HMGET",
        "PEXPIRETIME",
        "SUBSCRIBE",
        "CLIENT",
        "PING",
        "HELLO",
        "SELECT",
        "INFO",
    ];
    let commands = monitor.commands();
    for (_, args) in &commands {
        let name = args[0].to_ascii_uppercase();
        assert!(
            emulator.contains(&name.as_str()) || reads.contains(&name.as_str()),
            "a command neither the emulator's nor a read: {args:?}"
        );
    }
    let publishes = commands.iter().filter(|(_, a)| a[0] == "PUBLISH").count();
    assert_eq!(publishes, 4, "only the emulator's PUBLISHes");
    // Every EVAL is the bounded read (HMGET, no write), and every EVALSHA
    // one of its two scripts by their SHA-1.
    for (_, args) in commands.iter().filter(|(_, a)| a[0] == "EVAL") {
        assert!(
            args[1].contains("HMGET") && !args[1].contains("HSET"),
            "{args:?}"
        );
    }
    let bounded = [
        ruled::bounded_read::HMGET_SCRIPT,
        ruled::bounded_read::HMGET_EXPIRY_SCRIPT,
    ];
    for (_, args) in commands.iter().filter(|(_, a)| a[0] == "EVALSHA") {
        assert!(
            bounded.iter().any(|script| args[1] == script.sha1),
            "{args:?}"
        );
    }
    let mut keys_after: Vec<String> = redis.query(&["KEYS", "*"]);
    let mut want = keys_before;
    want.push("keycard".into());
    want.retain(|k| k != "alarm");
    want.sort();
    keys_after.sort();
    assert_eq!(keys_after, want);
    let text = recorder_text(&dir.path().join("quiet.toml"));
    assert!(text.contains("hash = \"keycard\""), "{text}");
    assert!(
        text.contains("expire = "),
        "the keycard hash's expiry: {text}"
    );
    assert!(text.contains("clear = true"), "{text}");
    assert!(text.contains("[[message]]"), "{text}");
}

fn recorder_text(path: &Path) -> String {
    std::fs::read_to_string(path).expect("the recording")
}

/// `--events`: stream `events` as `[[event]]` entries; replayed, the
/// rules do what the live `ruled` did.
#[test]
fn events_are_recorded_from_the_stream() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let bundle = build_rules(dir.path(), "rules", &[("rules.toml", &ride_rules())]);
    let bus = Services::new(&redis);
    bus.set_with_timestamp("vehicle", "state", "stand-by");
    bus.set("alarm", "status", "armed");
    let ruled = Ruled::ready(&redis, &bundle, &[]);
    let recorder = Recorder::start(
        &redis,
        &bundle,
        dir.path().join("events.toml"),
        &["--events"],
    );
    wait_for("the recorder started", || {
        recorder.text().starts_with("# ruled record --events")
    });
    bus.set_with_timestamp("vehicle", "state", "parked");
    wait_for("unlocked", || redis.list("test:unlocked").len() == 1);
    bus.set("alarm", "status", "level-2-triggered");
    wait_for("alarm", || redis.list("test:alarm").len() == 1);
    wait_for("four events recorded", || recorder.entries() >= 4);
    let (code, err) = recorder.interrupt();
    assert_eq!(code, Some(0), "{err}\n{}", ruled.log_text());
    let text = recorder_text(&dir.path().join("events.toml"));
    assert!(text.contains("topic = \"alarm.triggered\""), "{text}");
    assert!(text.contains("data = { level = 2 }"), "{text}");
    assert!(!text.contains("[[state]]"), "{text}");
    let got = simulated(&bundle, &dir.path().join("events.toml"));
    assert_eq!(
        got.actions,
        vec![
            ("test:unlocked".to_string(), "unlocked".to_string()),
            ("test:alarm".to_string(), "alarm".to_string()),
        ],
        "{text}"
    );
}

/// `--seconds N` ends the recording by itself, exit 0, the file whole.
#[test]
fn seconds_end_the_recording() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let bundle = build_rules(dir.path(), "rules", &[("rules.toml", &ride_rules())]);
    Services::new(&redis).set("alarm", "status", "disarmed");
    let mut recorder = Recorder::start(
        &redis,
        &bundle,
        dir.path().join("short.toml"),
        &["--seconds", "1"],
    );
    let status = support::poll(|| recorder.child.try_wait().expect("wait"))
        .expect("ruled record --seconds 1 stopped by itself");
    assert!(status.success(), "{status}");
    let text = recorder_text(&dir.path().join("short.toml"));
    let parsed: toml::Table = toml::from_str(&text).expect("the recording is TOML");
    assert_eq!(parsed["state"].as_array().map(Vec::len), Some(1), "{text}");
}

/// A subscription lost and restored: the gap is noted, and a watched
/// field that changed meanwhile is written as `ruled` rereads it.
#[test]
fn a_restored_subscription_rereads_what_changed() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let bundle = build_rules(dir.path(), "rules", &[("rules.toml", &ride_rules())]);
    let bus = Services::new(&redis);
    bus.set("alarm", "status", "disarmed");
    let recorder = Recorder::start(&redis, &bundle, dir.path().join("gap.toml"), &[]);
    wait_for("the recorder seeded", || {
        recorder.text().contains("before-start = true")
    });
    // The pub/sub connection dropped, the field written before it is back.
    let _: redis::Value = redis.query(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    bus.set_silently("alarm", "status", "armed");
    wait_for("the gap noted and the change reread", || {
        recorder.text().contains("lost and restored") && recorder.text().contains("replace = true")
    });
    let (code, err) = recorder.interrupt();
    assert_eq!(code, Some(0), "{err}");
    let text = recorder_text(&dir.path().join("gap.toml"));
    let parsed: toml::Table = toml::from_str(&text).expect("the recording is TOML");
    let last = parsed["state"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["hash"].as_str(), Some("alarm"), "{text}");
    assert_eq!(last["fields"]["status"].as_str(), Some("armed"), "{text}");
}

/// SIGINT while Redis does not answer yet: the recorder stops (it was
/// retrying the connection), exit 0.
#[test]
fn sigint_stops_a_recorder_waiting_for_redis() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bundle = build_rules(dir.path(), "rules", &[("rules.toml", &ride_rules())]);
    let nowhere = format!("redis+unix://{}", dir.path().join("none.sock").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ruled"))
        .args(["record", "--redis", &nowhere, "--bundle"])
        .arg(&bundle)
        .arg("--out")
        .arg(dir.path().join("never.toml"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ruled record");
    // It is trying: a warning per failed attempt.
    let mut stderr = child.stderr.take().unwrap();
    let mut first = [0u8; 1];
    use std::io::Read;
    stderr.read_exact(&mut first).expect("a warning");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let status = poll(|| child.try_wait().expect("wait"));
    if status.is_none() {
        let _ = child.kill();
    }
    assert_eq!(status.and_then(|s| s.code()), Some(0));
}
