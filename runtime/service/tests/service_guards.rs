//! The built-in safety envelope (docs/safety.md) against the real `ruled`
//! and a real Redis: rule files built by the real `rulec` with its
//! built-in `librescoot` profile (`profiles/librescoot/guards.toml`),
//! the bus written as Librescoot's services write it (`HSET` + `PUBLISH`
//! for vehicle-service's `state`; ecu-service's `engine-ecu speed` with
//! `HSET` alone, never published), rules triggered by vehicle-service's
//! `PUBLISH input-events seatbox:press`.
//!
//! Each guard: refused while `ready-to-drive`, refused with a speed over
//! 0, performed parked at 0, refused with no speed field at all; the read
//! made at the action, not at the trigger (a state changed during a
//! step's `after`, the speed written silently then). Each refusal is seen
//! four ways: nothing pushed, the run ended `guarded` (its trace), the
//! `guarded` counter (total and the rule's), the `warn` line naming rule,
//! step and guard with the state read. Limits: each built-in one refuses
//! one over its `max` within its window (`limited`); a rules directory's
//! limit admits again after it.
//!
//! Needs `rulec` built beside `ruled` (`cargo build -p rulec`, or `cargo
//! nextest run --workspace`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use ruled::control::protocol::{CoveredStep, GuardsReply, ShowReply, TestReply};
use serde_json::Value;
use support::ctl::ctl;
use support::librescoot::{build_rules_warned, Services};
use support::{list, poll, RedisServer, Ruled};

/// Each built-in guard, the list it covers and a value it covers
/// (`hibernate-for:<int>` matched as a pattern).
const GUARDS: [(&str, &str, &str); 4] = [
    ("hardware-parked", "scooter:hardware", "handlebar:lock"),
    ("state-parked", "scooter:state", "lock"),
    ("power-parked", "scooter:power", "hibernate-for:60"),
    ("seatbox-parked", "scooter:seatbox", "open"),
];

/// The trigger every rule here starts on: vehicle-service's seat box
/// button (`button.seatbox.press`).
const PRESS: &str = "seatbox:press";

/// One rule per built-in guard, named after it, pushing the guarded
/// value when the seat box button is pressed, after `after` if given.
fn guarded_rules(after: Option<&str>) -> String {
    let after = after.map_or_else(String::new, |after| format!("after = \"{after}\"\n"));
    GUARDS
        .iter()
        .map(|(guard, list, value)| {
            format!(
                "[[rule]]\nname = \"{guard}-rule\"\non = [\"button.seatbox.press\"]\n\n\
                 [[rule.step]]\ndo = \"redis\"\n{after}list = \"{list}\"\npush = \"{value}\"\n\n"
            )
        })
        .collect()
}

/// A test's Redis, its rules built with warnings let through (each
/// guarded step is a `rulec::guarded` warning: rulec cannot show the
/// scooter parked, which is the point), and the running `ruled`.
struct Scooter {
    redis: RedisServer,
    ruled: Ruled,
    _dir: tempfile::TempDir,
}

impl Scooter {
    /// `seed` writes the bus before `ruled` starts.
    fn start(rules: &str, seed: impl FnOnce(&Services<'_>)) -> Scooter {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().expect("temp dir");
        let (bundle, warnings) = build_rules_warned(dir.path(), "rules", &[("rules.toml", rules)]);
        // The only warnings are the guards' own: any other (a topic
        // matching nothing, a typo) would make the test test nothing.
        for line in warnings.lines().filter(|line| line.contains("rulec::")) {
            assert!(line.contains("rulec::guarded"), "{warnings}");
        }
        seed(&Services::new(&redis));
        let ruled = Ruled::ready(&redis, &bundle, &[]);
        Scooter {
            redis,
            ruled,
            _dir: dir,
        }
    }

    fn services(&self) -> Services<'_> {
        Services::new(&self.redis)
    }

    fn press(&self) {
        assert_eq!(self.services().message("input-events", PRESS), 1);
    }

    fn counter(&self, field: &str) -> u64 {
        let value: Option<u64> = self.redis.query(&["HGET", "extensions", field]);
        value.unwrap_or(0)
    }

    /// Waits until the counters hash says `field` = `value`.
    fn wait_counter(&self, field: &str, value: u64) {
        poll(|| (self.counter(field) == value).then_some(())).unwrap_or_else(|| {
            panic!(
                "counter {field} is {}, not {value}; log:\n{}",
                self.counter(field),
                self.ruled.log_text()
            )
        });
    }

    /// Rule `rule`'s field of `extensions:rules`.
    fn rule_stats(&self, rule: &str) -> Value {
        let text: Option<String> = self.redis.query(&["HGET", "extensions:rules", rule]);
        text.map_or(Value::Null, |text| serde_json::from_str(&text).unwrap())
    }

    /// Rule `rule`'s last run's end reason, once it ended.
    fn wait_end(&self, rule: &str, reason: &str) -> Value {
        poll(|| {
            let out = ctl(&self.redis, &["trace", rule, "--format", "json"]);
            let json: Value = serde_json::from_str(&out.stdout).ok()?;
            // Oldest first: the last is the newest.
            let run = json["traces"][0]["runs"].as_array()?.last()?.clone();
            (run["end"]["reason"] == reason).then_some(run)
        })
        .unwrap_or_else(|| {
            let out = ctl(&self.redis, &["trace", rule]);
            panic!(
                "{rule}'s run did not end {reason}: {}\nlog:\n{}",
                out.stdout,
                self.ruled.log_text()
            )
        })
    }

    /// Every guard refused its rule's push: the four ways a refusal is
    /// seen. `read` is the state the `warn` line says was read.
    fn all_refused(&self, read: &str) {
        self.wait_counter("guarded", GUARDS.len() as u64);
        for (guard, list_key, _) in GUARDS {
            let rule = format!("{guard}-rule");
            let run = self.wait_end(&rule, "guarded");
            let step = &run["steps"][0];
            assert!(
                step.to_string().contains(&format!("guarded by {guard}")),
                "{run}"
            );
            let line =
                self.ruled
                    .wait_log(&["WARN", &rule, &format!("refused by guard `{guard}`")]);
            assert!(line.contains(read), "{line}");
            assert!(line.contains("step 0:"), "the line names the step: {line}");
            // The journal says no action ran: a guarded action's line goes
            // out only once it starts, past its guards.
            let log = self.ruled.log_text();
            let rule_field = format!("rule={rule} ");
            assert!(
                !log.lines()
                    .any(|l| l.contains("action: ") && l.contains(&rule_field)),
                "a refused action has no action line:\n{log}"
            );
            assert_eq!(self.rule_stats(&rule)["guarded"], 1, "{rule}");
            assert!(list(&self.redis, list_key).is_empty(), "{list_key}");
        }
        assert_eq!(self.counter("dispatched"), 0);
    }

    /// Every rule's push was performed.
    fn all_performed(&self) {
        for (guard, list_key, value) in GUARDS {
            let pushed = poll(|| Some(list(&self.redis, list_key)).filter(|l| !l.is_empty()))
                .unwrap_or_else(|| {
                    panic!(
                        "{guard}: nothing on {list_key}; log:\n{}",
                        self.ruled.log_text()
                    )
                });
            assert_eq!(pushed, [value]);
            self.wait_end(&format!("{guard}-rule"), "done");
            // A guarded action that ran has its line, as any other.
            self.ruled.wait_log(&[
                "INFO",
                &format!("action: LPUSH {list_key}"),
                &format!("rule={guard}-rule "),
            ]);
        }
        assert_eq!(self.counter("guarded"), 0);
    }
}

/// vehicle-service's state (`HSET` + `PUBLISH vehicle state`) and
/// ecu-service's speed (`HSET` alone).
fn scooter_at<'a>(state: &'a str, speed: Option<&'a str>) -> impl FnOnce(&Services<'_>) + 'a {
    move |s| {
        s.set("vehicle", "state", state);
        if let Some(speed) = speed {
            s.set_silently("engine-ecu", "speed", speed);
        }
    }
}

#[test]
fn every_guard_refuses_while_ready_to_drive() {
    let scooter = Scooter::start(
        &guarded_rules(None),
        scooter_at("ready-to-drive", Some("0")),
    );
    scooter.press();
    scooter.all_refused(r#"vehicle state = "ready-to-drive""#);
}

#[test]
fn every_guard_refuses_with_a_speed() {
    let scooter = Scooter::start(&guarded_rules(None), scooter_at("parked", Some("12")));
    scooter.press();
    scooter.all_refused(r#"engine-ecu speed = "12""#);
}

#[test]
fn every_guard_allows_parked_at_zero() {
    let scooter = Scooter::start(&guarded_rules(None), scooter_at("parked", Some("0")));
    scooter.press();
    scooter.all_performed();
}

/// No `engine-ecu speed` at all (ecu-service not running yet): fail
/// closed.
#[test]
fn every_guard_refuses_without_a_speed() {
    let scooter = Scooter::start(&guarded_rules(None), scooter_at("parked", None));
    scooter.press();
    scooter.all_refused("engine-ecu speed absent");
}

/// A speed that is not a number (`int()` fails): fail closed.
#[test]
fn every_guard_refuses_an_unreadable_speed() {
    let scooter = Scooter::start(&guarded_rules(None), scooter_at("parked", Some("fast")));
    scooter.press();
    scooter.all_refused(r#"engine-ecu speed = "fast""#);
}

/// The read is made when the action is due, not at the trigger: parked
/// at 0 when the button is pressed, then moving during the step's 2 s
/// wait, the speed written silently (no notification reaches `ruled`):
/// the value Redis has at the action is the one judged, whatever `ruled`
/// saw before.
#[test]
fn the_read_is_at_the_action_not_the_trigger() {
    let scooter = Scooter::start(&guarded_rules(Some("2s")), scooter_at("parked", Some("0")));
    scooter.press();
    // Every rule's run waits for its step.
    for (guard, _, _) in GUARDS {
        scooter
            .ruled
            .wait_log(&[&format!("{guard}-rule"), "started"]);
    }
    scooter.services().set_silently("engine-ecu", "speed", "8");
    scooter.all_refused(r#"engine-ecu speed = "8""#);
}

/// And the other way: ready to drive at the trigger, parked and standing
/// by the time the step is due: performed.
#[test]
fn a_scooter_parked_during_the_wait_is_allowed() {
    let scooter = Scooter::start(
        &guarded_rules(Some("2s")),
        scooter_at("ready-to-drive", Some("5")),
    );
    scooter.press();
    for (guard, _, _) in GUARDS {
        scooter
            .ruled
            .wait_log(&[&format!("{guard}-rule"), "started"]);
    }
    let s = scooter.services();
    s.set_silently("engine-ecu", "speed", "0");
    s.set("vehicle", "state", "parked");
    scooter.all_performed();
}

/// One rule pushing `value` to `list` on every press, without a breaker
/// (the presses come faster than a person's).
fn pusher(name: &str, list: &str, value: &str) -> String {
    format!(
        "[[rule]]\nname = \"{name}\"\non = [\"button.seatbox.press\"]\ntrip = false\n\n\
         [[rule.step]]\ndo = \"redis\"\nlist = \"{list}\"\npush = \"{value}\"\n"
    )
}

impl Scooter {
    /// Presses once and waits until `list` holds `len` values.
    fn press_until(&self, list_key: &str, len: usize) {
        self.press();
        poll(|| (list(&self.redis, list_key).len() == len).then_some(())).unwrap_or_else(|| {
            panic!(
                "{list_key} holds {:?}, not {len} values; log:\n{}",
                list(&self.redis, list_key),
                self.ruled.log_text()
            )
        });
    }
}

/// One over a built-in limit's `max` within its window (docs/safety.md#limits):
/// `max` presses pushed, the next refused, the run ended `limited`, counted
/// (total and the rule's), one `warn` line naming the limit and its window.
/// Each value is one no guard covers, so only the limit judges it.
fn builtin_limit_refuses_one_over(
    limit: &str,
    list_key: &str,
    value: &str,
    max: usize,
    per_ms: u64,
) {
    let rules = pusher("pusher", list_key, value);
    let scooter = Scooter::start(&rules, scooter_at("parked", Some("0")));
    for pushed in 1..=max {
        scooter.press_until(list_key, pushed);
    }
    scooter.press();
    scooter.wait_counter("limited", 1);
    scooter.wait_end("pusher", "limited");
    let line = scooter
        .ruled
        .wait_log(&["WARN", "pusher", &format!("refused by limit `{limit}`")]);
    assert!(
        line.contains(&format!("at most {max} per {per_ms} ms")),
        "{line}"
    );
    assert_eq!(list(&scooter.redis, list_key).len(), max);
    assert_eq!(scooter.rule_stats("pusher")["limited"], 1);
}

/// `handlebar`: 2 per 10 s over every `handlebar:<text>`.
#[test]
fn the_builtin_handlebar_limit_refuses_the_third() {
    builtin_limit_refuses_one_over(
        "handlebar",
        "scooter:hardware",
        "handlebar:unlock",
        2,
        10_000,
    );
}

/// `state`: 4 per 10 s over every value of `scooter:state`.
#[test]
fn the_builtin_state_limit_refuses_the_fifth() {
    builtin_limit_refuses_one_over("state", "scooter:state", "unlock", 4, 10_000);
}

/// `power`: 2 per 60 s over every value of `scooter:power`.
#[test]
fn the_builtin_power_limit_refuses_the_third() {
    builtin_limit_refuses_one_over("power", "scooter:power", "run", 2, 60_000);
}

/// `horn`: 30 per 60 s of `scooter:horn on`.
#[test]
fn the_builtin_horn_limit_refuses_the_thirty_first() {
    builtin_limit_refuses_one_over("horn", "scooter:horn", "on", 30, 60_000);
}

/// A rules directory's own limit joins the built-in ones; with a short
/// window it shows the other half: once the window has passed, performed
/// again.
#[test]
fn a_limit_admits_again_after_its_window() {
    let rules = format!(
        "{}\n[[limit]]\nname = \"beeps\"\nlist = \"test:beep\"\nmax = 2\nper = \"3s\"\n",
        pusher("beep", "test:beep", "on")
    );
    let scooter = Scooter::start(&rules, scooter_at("parked", Some("0")));
    scooter.press_until("test:beep", 1);
    scooter.press_until("test:beep", 2);
    scooter.press();
    scooter.wait_counter("limited", 1);
    assert_eq!(list(&scooter.redis, "test:beep").len(), 2);
    // The window is 3 s from the first push; a press after it is
    // performed. Polled: each press the window still refuses is counted
    // `limited` again, which the loop allows for.
    let started = std::time::Instant::now();
    let admitted = poll_long(|| {
        std::thread::sleep(std::time::Duration::from_millis(500));
        scooter.press();
        std::thread::sleep(std::time::Duration::from_millis(200));
        (list(&scooter.redis, "test:beep").len() == 3).then_some(())
    });
    assert!(admitted.is_some(), "{}", scooter.ruled.log_text());
    assert!(started.elapsed() >= std::time::Duration::from_millis(1500));
}

/// Polls for longer than the window under test.
fn poll_long<T>(check: impl FnMut() -> Option<T>) -> Option<T> {
    support::poll_within(std::time::Duration::from_secs(20), check)
}

/// The breaker: a rule with `trip = { starts = 2, ... }` started a third
/// time within its window is tripped: counter `tripped`, its own too.
#[test]
fn the_breaker_trips_and_counts() {
    let rules = "[[rule]]\nname = \"beeper\"\non = [\"button.seatbox.press\"]\n\
                 trip = { starts = 2, per = \"30s\", pause = \"60s\" }\n\n\
                 [[rule.step]]\ndo = \"redis\"\nlist = \"test:beep\"\npush = \"on\"\n";
    let scooter = Scooter::start(rules, scooter_at("parked", Some("0")));
    scooter.press_until("test:beep", 1);
    scooter.press_until("test:beep", 2);
    scooter.press();
    scooter.wait_counter("tripped", 1);
    scooter.ruled.wait_log(&["WARN", "beeper", "rule tripped"]);
    assert_eq!(scooter.rule_stats("beeper")["tripped"], 1);
    assert_eq!(list(&scooter.redis, "test:beep").len(), 2);
}

/// `v1.guards` (`ruled ctl guards`) lists the built-in envelope and a
/// rules directory's own, each read back through its protocol type;
/// `v1.show` names the guards and limits covering each step.
#[test]
fn guards_are_listed_and_shown() {
    let rules = format!(
        "{}\n[[guard]]\nname = \"beep-parked\"\nlist = \"test:beep\"\n\
         when = 'state(\"vehicle\", \"state\") == \"parked\"'\n",
        guarded_rules(None)
    );
    let scooter = Scooter::start(&rules, scooter_at("parked", Some("0")));
    let json = |args: &[&str]| -> Value {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--format", "json"]);
        let out = ctl(&scooter.redis, &all);
        assert_eq!(out.code, 0, "{out:?}");
        serde_json::from_str(&out.stdout).unwrap()
    };
    let raw = json(&["guards"]);
    let listed: GuardsReply = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(
        serde_json::to_value(&listed).unwrap(),
        raw,
        "the type keeps every field"
    );
    let names: Vec<&str> = listed.guards.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "hardware-parked",
            "state-parked",
            "power-parked",
            "seatbox-parked",
            "beep-parked"
        ]
    );
    let hardware = &listed.guards[0];
    assert!(hardware.from_profile);
    assert_eq!(hardware.file, "profiles/librescoot/guards.toml");
    assert_eq!(hardware.reads, ["vehicle state", "engine-ecu speed"]);
    assert!(hardware
        .covers
        .starts_with("scooter:hardware [handlebar:lock"));
    assert!(!listed.guards[4].from_profile);
    assert_eq!(listed.guards[4].file, "rules.toml");
    let limits: Vec<(&str, u32, u64)> = listed
        .limits
        .iter()
        .map(|l| (l.name.as_str(), l.max, l.per_ms))
        .collect();
    assert_eq!(
        limits,
        [
            ("handlebar", 2, 10_000),
            ("state", 4, 10_000),
            ("power", 2, 60_000),
            ("horn", 30, 60_000)
        ]
    );
    let text = ctl(&scooter.redis, &["guards"]).stdout;
    assert!(
        text.contains("guard hardware-parked (profiles/librescoot/guards.toml, profile)\n"),
        "{text}"
    );
    assert!(
        text.contains("limit handlebar (profiles/librescoot/guards.toml, profile): at most 2 per 10s of scooter:hardware [handlebar:<text>]"),
        "{text}"
    );

    let raw = json(&["show", "hardware-parked-rule"]);
    let shown: ShowReply = serde_json::from_value(raw.clone()).unwrap();
    assert_eq!(serde_json::to_value(&shown).unwrap(), raw);
    assert_eq!(
        shown.envelope,
        [CoveredStep {
            step: 0,
            finally: false,
            guards: vec!["hardware-parked".into()],
            limits: vec!["handlebar".into()],
        }]
    );
    let text = ctl(&scooter.redis, &["show", "power-parked-rule"]).stdout;
    assert!(
        text.contains("step 0: guarded by power-parked; limited by power\n"),
        "{text}"
    );
}

/// The dry run (`v1.test`, `ruled ctl test`) says which guard would
/// refuse a covered step and the state it read fresh, written silently
/// just before: nothing `ruled` could have seen otherwise.
#[test]
fn the_dry_run_names_the_refusing_guard_and_its_fresh_read() {
    let scooter = Scooter::start(&guarded_rules(None), scooter_at("parked", Some("0")));
    let event = r#"{"topic":"button.seatbox.press"}"#;
    let tested = |speed: &str| -> TestReply {
        scooter
            .services()
            .set_silently("engine-ecu", "speed", speed);
        let out = ctl(
            &scooter.redis,
            &["test", "hardware-parked-rule", event, "--format", "json"],
        );
        assert_eq!(out.code, 0, "{out:?}");
        let raw: Value = serde_json::from_str(&out.stdout).unwrap();
        let typed: TestReply = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(
            serde_json::to_value(&typed).unwrap(),
            raw,
            "the type keeps every field"
        );
        typed
    };
    let moving = tested("7");
    let guard = moving.steps[0].guard.clone().expect("the step is guarded");
    assert_eq!(guard.guards, ["hardware-parked"]);
    assert_eq!(guard.refused_by.as_deref(), Some("hardware-parked"));
    assert_eq!(
        guard.read,
        [r#"vehicle state = "parked""#, r#"engine-ecu speed = "7""#]
    );
    let standing = tested("0");
    let guard = standing.steps[0]
        .guard
        .clone()
        .expect("the step is guarded");
    assert_eq!(guard.refused_by, None);
    assert_eq!(guard.read[1], r#"engine-ecu speed = "0""#);
    // Nothing ran, nothing was counted.
    assert!(list(&scooter.redis, "scooter:hardware").is_empty());
    assert_eq!(scooter.counter("guarded"), 0);

    scooter.services().set_silently("engine-ecu", "speed", "7");
    let text = ctl(&scooter.redis, &["test", "power-parked-rule", event]).stdout;
    assert!(
        text.contains(
            r#"guard refused by power-parked (vehicle state = "parked", engine-ecu speed = "7")"#
        ),
        "{text}"
    );
}
