//! The bus derivation (docs/sources.md#changes), driven through the
//! engine's API on virtual time: seeding, distinct and every changes,
//! first values, `cleared`, `replaced`, non-field names, `read` fields,
//! channel sources, ids, owned topics, `--sources used`, polls.
#![allow(clippy::unwrap_used)]

use rulecore::bundle::{Action, Payload, Rule, StatePair, Step};
use rulecore::bytecode::{Const, Op, Program};
use rulecore::event::Event;
use rulecore::event_data::DataValue;
use rulecore::profile::{Changes, DataSpec, Emit, Origin, Poll, Profile, Source};
use rulecore::topic::TopicPattern;
use rulecore::value_pattern::ValuePattern;
use ruled_engine::{
    BusMode, Effect, Engine, EngineConfig, Expiry, Notified, Now, ReadCause, SourceSet, Time,
    BUS_VALUE_BYTES, CUT_MARKER,
};
use std::sync::Arc;

const WALL0: i64 = 1_700_000_000_000;

fn at(ms: u64) -> Now {
    Now::new(Time::from_millis(ms), WALL0 + ms as i64)
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

fn profile() -> Profile {
    let mut passed = emit("keycard.auth.passed", &[], &["passed"]);
    passed.data = vec![("uid".into(), DataSpec::Field("uid".into()))];
    let mut charge = emit("battery.charge.changed", &[], &["<int>"]);
    charge.data = vec![("slot".into(), DataSpec::Int(0))];
    let mut seatbox = emit("button.seatbox.press", &[], &[]);
    seatbox.payload = pats(&["seatbox:press"]);
    seatbox.from_to = false;
    Profile {
        name: "test".into(),
        digest: "00".into(),
        sources: vec![
            field(
                "vehicle",
                "state",
                &[],
                Changes::Distinct,
                vec![
                    emit("vehicle.state.changed", &[], &[]),
                    emit("vehicle.unlocked", &["stand-by"], &["parked"]),
                    emit("ride.ended", &["ready-to-drive"], &[]),
                ],
            ),
            field(
                "keycard",
                "authentication",
                &["uid"],
                Changes::Every,
                vec![passed],
            ),
            field("battery:0", "charge", &[], Changes::Distinct, vec![charge]),
            Source {
                origin: Origin::Channel {
                    channel: "input-events".into(),
                },
                changes: Changes::Distinct,
                emits: vec![seatbox],
            },
        ],
        polls: vec![Poll {
            hash: "engine-ecu".into(),
            fields: vec!["speed".into()],
            every_ns: 1_000_000_000,
        }],
    }
}

fn rule(name: &str, on: &str) -> Rule {
    Rule::new(
        name,
        "r.toml",
        vec![TopicPattern::parse(on).unwrap()],
        vec![Step::new(Action::redis("scooter:blinker", "both"), 0)],
    )
}

/// Rules on `on`; with `speed`, one more that reads `state("engine-ecu", "speed")`.
fn payload(on: &[&str], speed: bool) -> Arc<Payload> {
    let mut rules: Vec<Rule> = on
        .iter()
        .enumerate()
        .map(|(i, on)| rule(&format!("r{i}"), on))
        .collect();
    let mut pairs = Vec::new();
    if speed {
        let mut reader = rule("fast", "never.sent");
        reader.when = Some(Box::new(Program {
            ops: vec![Op::State(0), Op::Const(0), Op::Eq],
        }));
        rules.push(reader);
        pairs.push(StatePair {
            hash: "engine-ecu".into(),
            field: "speed".into(),
        });
    }
    let mut payload = Payload::new("test", rules, pairs, vec![Const::Str("30".into())]);
    payload.profile = Some(profile());
    Arc::new(payload)
}

fn engine(payload: Arc<Payload>, bus: BusMode, sources: SourceSet) -> Engine {
    Engine::new(
        payload,
        EngineConfig {
            bus,
            sources,
            ..EngineConfig::default()
        },
    )
}

/// What a notification reads, read from `values` (field -> value); an
/// `every` source's hash expiry unknown (every notification counts).
fn notify(engine: &mut Engine, now: Now, hash: &str, name: &str, values: &[(&str, Option<&str>)]) {
    notify_at(engine, now, hash, name, values, Expiry::Unknown);
}

/// [`notify`] with the hash's expiry as Redis would give it; whether the
/// engine took the notification (`false`: counted in `rejected`).
fn notify_at(
    engine: &mut Engine,
    now: Now,
    hash: &str,
    name: &str,
    values: &[(&str, Option<&str>)],
    expiry: Expiry,
) -> bool {
    let value = |index: usize| {
        let pair = &engine.watched_pairs()[index];
        values
            .iter()
            .find(|(field, _)| *field == pair.field)
            .and_then(|(_, value)| value.map(str::to_string))
    };
    match engine.notified(hash, name) {
        Notified::Read(pairs) => {
            let read: Vec<_> = pairs.iter().map(|&i| (i, value(i))).collect();
            engine.fields_read(now, ReadCause::Notified, &read);
        }
        Notified::ReadWritten(pairs) => {
            let read: Vec<_> = pairs.iter().map(|&i| (i, value(i))).collect();
            return engine.written_read(now, expiry, &read);
        }
        Notified::Reread(pairs) => {
            let read: Vec<_> = pairs.iter().map(|&i| (i, value(i))).collect();
            engine.fields_read(now, ReadCause::Reread, &read);
        }
        Notified::Ignore => {}
    }
    true
}

/// The events published since the last call, and the rules submitted.
fn drain(engine: &mut Engine) -> (Vec<Event>, Vec<String>) {
    let (mut published, mut submitted) = (Vec::new(), Vec::new());
    while let Some(effect) = engine.poll_effect() {
        match effect {
            Effect::Publish(events) => published.extend(events),
            Effect::Submit(job) => submitted.push(job.rule.to_string()),
            _ => {}
        }
    }
    (published, submitted)
}

fn topics(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| &*e.topic).collect()
}

fn seed(engine: &mut Engine, hash: &str, field: &str, value: &str) {
    assert!(
        engine.set_state(hash, field, value.into()),
        "{hash}.{field} watched"
    );
}

#[test]
fn a_change_emits_its_topics_in_order_after_the_rules_had_them() {
    let mut e = engine(
        payload(&["vehicle.unlocked"], false),
        BusMode::Own,
        SourceSet::All,
    );
    seed(&mut e, "vehicle", "state", "stand-by");
    notify(
        &mut e,
        at(10),
        "vehicle",
        "state",
        &[("state", Some("parked"))],
    );
    let (events, submitted) = drain(&mut e);
    assert_eq!(
        topics(&events),
        ["vehicle.state.changed", "vehicle.unlocked"]
    );
    assert_eq!(submitted, ["r0"]);
    let first = &events[0];
    assert_eq!(
        (first.from(), first.to(), first.src()),
        ("stand-by", "parked", "adapter")
    );
    assert_eq!(first.ts, Some(WALL0 + 10));
    // Ids are stream ids: ms, then a sequence within the ms.
    let ids: Vec<&str> = events.iter().map(|e| e.id()).collect();
    assert_eq!(
        ids,
        [format!("{}-0", WALL0 + 10), format!("{}-1", WALL0 + 10)]
    );
    // The rule's event is the published one, id and all.
    notify(
        &mut e,
        at(20),
        "vehicle",
        "state",
        &[("state", Some("ready-to-drive"))],
    );
    notify(
        &mut e,
        at(30),
        "vehicle",
        "state",
        &[("state", Some("parked"))],
    );
    let (events, _) = drain(&mut e);
    assert_eq!(
        topics(&events),
        [
            "vehicle.state.changed",
            "vehicle.state.changed",
            "ride.ended"
        ]
    );
    assert_eq!(e.state_value("vehicle", "state"), Some("parked"));
}

#[test]
fn equal_values_first_values_and_deleted_fields_emit_nothing() {
    let mut e = engine(payload(&["*"], false), BusMode::Own, SourceSet::All);
    // Absent at start: the first value is the baseline.
    notify(
        &mut e,
        at(1),
        "vehicle",
        "state",
        &[("state", Some("parked"))],
    );
    assert!(drain(&mut e).0.is_empty(), "first value");
    notify(
        &mut e,
        at(2),
        "vehicle",
        "state",
        &[("state", Some("parked"))],
    );
    assert!(drain(&mut e).0.is_empty(), "equal value");
    notify(&mut e, at(3), "vehicle", "state", &[("state", None)]);
    assert!(drain(&mut e).0.is_empty(), "deleted field");
    notify(
        &mut e,
        at(4),
        "vehicle",
        "state",
        &[("state", Some("stand-by"))],
    );
    assert!(drain(&mut e).0.is_empty(), "first value after the deletion");
    notify(
        &mut e,
        at(5),
        "vehicle",
        "state",
        &[("state", Some("parked"))],
    );
    assert_eq!(
        topics(&drain(&mut e).0),
        ["vehicle.state.changed", "vehicle.unlocked"]
    );
    // Not a field: ignored without a read.
    assert_eq!(e.notified("vehicle", "seatbox:opened"), Notified::Ignore);
}

#[test]
fn cleared_makes_fields_absent_and_replaced_emits_real_changes() {
    let mut e = engine(payload(&["*"], false), BusMode::Own, SourceSet::All);
    seed(&mut e, "vehicle", "state", "stand-by");
    assert!(matches!(
        e.notified("vehicle", "cleared"),
        Notified::Reread(_)
    ));
    notify(&mut e, at(1), "vehicle", "cleared", &[]);
    assert_eq!(e.state_value("vehicle", "state"), Some(""));
    notify(
        &mut e,
        at(2),
        "vehicle",
        "state",
        &[("state", Some("parked"))],
    );
    assert!(drain(&mut e).0.is_empty(), "a first value after cleared");
    notify(
        &mut e,
        at(3),
        "vehicle",
        "replaced",
        &[("state", Some("stand-by"))],
    );
    assert_eq!(topics(&drain(&mut e).0), ["vehicle.state.changed"]);
    notify(
        &mut e,
        at(4),
        "vehicle",
        "replaced",
        &[("state", Some("stand-by"))],
    );
    assert!(drain(&mut e).0.is_empty(), "replaced with the same value");
}

/// Issue 29: a bare `PUBLISH alarm cleared` (no `DEL`) made the next real
/// change a first value. `cleared` is checked by reading: a field still
/// there keeps its value, and the next change emits.
#[test]
fn a_bare_cleared_changes_nothing() {
    let mut e = engine(
        payload(&["vehicle.unlocked"], false),
        BusMode::Own,
        SourceSet::All,
    );
    seed(&mut e, "vehicle", "state", "stand-by");
    notify(
        &mut e,
        at(1),
        "vehicle",
        "cleared",
        &[("state", Some("stand-by"))],
    );
    assert_eq!(e.state_value("vehicle", "state"), Some("stand-by"));
    notify(
        &mut e,
        at(2),
        "vehicle",
        "state",
        &[("state", Some("parked"))],
    );
    let (events, submitted) = drain(&mut e);
    assert_eq!(
        topics(&events),
        ["vehicle.state.changed", "vehicle.unlocked"]
    );
    assert_eq!(submitted, ["r0"]);
}

/// Issue 29: a replayed `PUBLISH keycard authentication` re-fired
/// `keycard.auth.passed` while the hash lived. A tap counts when the
/// hash's expiry moved later (or it had none we knew of); a replay is
/// not applied and is refused (the service counts it in `rejected`).
#[test]
fn a_replayed_every_notification_is_refused() {
    let mut e = engine(
        payload(&["keycard.auth.passed"], false),
        BusMode::Own,
        SourceSet::All,
    );
    let tap = [("authentication", Some("passed")), ("uid", Some("04a1"))];
    let mut taken = Vec::new();
    taken.push(notify_at(
        &mut e,
        at(1),
        "keycard",
        "authentication",
        &tap,
        Expiry::At(10_001),
    ));
    for ms in 2..7 {
        taken.push(notify_at(
            &mut e,
            at(ms),
            "keycard",
            "authentication",
            &tap,
            Expiry::At(10_001),
        ));
    }
    let (events, submitted) = drain(&mut e);
    assert_eq!(taken, [true, false, false, false, false, false]);
    assert_eq!(topics(&events), ["keycard.auth.passed"]);
    assert_eq!(submitted.len(), 1, "1 tap + 5 replays = 1 run");
    // A new tap rewrites the hash: its expiry moves later.
    assert!(notify_at(
        &mut e,
        at(500),
        "keycard",
        "authentication",
        &tap,
        Expiry::At(10_500)
    ));
    assert_eq!(topics(&drain(&mut e).0), ["keycard.auth.passed"]);
    // The key lost its expiry: a new key (`HSET` keeps an expiry).
    let lost = Expiry::Persistent;
    assert!(notify_at(
        &mut e,
        at(550),
        "keycard",
        "authentication",
        &tap,
        lost
    ));
    assert_eq!(topics(&drain(&mut e).0), ["keycard.auth.passed"]);
    // A hash without expiry cannot tell a tap from a replay: only a
    // changed value counts, as for a `distinct` source.
    let failed = [("authentication", Some("failed")), ("uid", Some("04a1"))];
    assert!(!notify_at(
        &mut e,
        at(600),
        "keycard",
        "authentication",
        &tap,
        Expiry::Persistent
    ));
    assert!(notify_at(
        &mut e,
        at(700),
        "keycard",
        "authentication",
        &failed,
        Expiry::Persistent
    ));
    assert!(
        drain(&mut e).0.is_empty(),
        "to `failed`: no topic of the test profile"
    );
    assert!(notify_at(
        &mut e,
        at(800),
        "keycard",
        "authentication",
        &tap,
        Expiry::Persistent
    ));
    assert_eq!(topics(&drain(&mut e).0), ["keycard.auth.passed"]);
}

/// Seeding reads the `every` sources' hashes' expiries: a tap from before
/// the start, replayed after it, is refused.
#[test]
fn seeding_keeps_the_expiry_a_replay_is_judged_by() {
    let mut e = engine(
        payload(&["keycard.auth.passed"], false),
        BusMode::Own,
        SourceSet::All,
    );
    assert_eq!(e.expiry_hashes(), ["keycard"]);
    seed(&mut e, "keycard", "authentication", "passed");
    e.expiry_seen("keycard", Expiry::At(10_001));
    let tap = [("authentication", Some("passed"))];
    let replay = Expiry::At(10_001);
    assert!(!notify_at(
        &mut e,
        at(1),
        "keycard",
        "authentication",
        &tap,
        replay
    ));
    assert!(drain(&mut e).0.is_empty());
}

/// Issue 29: a 63 KiB value made stream `events` grow to 263 MB. The bus
/// gets each value cut at 1 KiB with a marker; the rules get it whole.
#[test]
fn values_are_cut_for_the_bus_and_whole_for_the_rules() {
    let mut e = engine(
        payload(&["vehicle.state.changed"], false),
        BusMode::Own,
        SourceSet::All,
    );
    seed(&mut e, "vehicle", "state", "stand-by");
    let big = "é".repeat(30_000);
    notify(&mut e, at(1), "vehicle", "state", &[("state", Some(&big))]);
    let mut published = Vec::new();
    let mut ran = Vec::new();
    while let Some(effect) = e.poll_effect() {
        match effect {
            Effect::Publish(events) => published.extend(events),
            Effect::Submit(job) => ran.push(job.event),
            _ => {}
        }
    }
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0].to(), big, "the rule saw the whole value");
    let to = published[0].to();
    assert!(to.len() <= BUS_VALUE_BYTES + 40, "{} bytes", to.len());
    assert!(big.starts_with(to.split(CUT_MARKER).next().unwrap()));
    assert!(to.ends_with(&format!("{CUT_MARKER}60000 bytes]")), "{to}");
    assert_eq!(published[0].from(), "stand-by", "short values stay");
}

#[test]
fn every_notification_of_an_every_source_emits_with_its_read_fields() {
    let mut e = engine(
        payload(&["keycard.auth.passed"], false),
        BusMode::Own,
        SourceSet::All,
    );
    let tap = [("authentication", Some("passed")), ("uid", Some("04a1"))];
    for ms in [1, 2] {
        notify(&mut e, at(ms), "keycard", "authentication", &tap);
    }
    let (events, submitted) = drain(&mut e);
    assert_eq!(
        topics(&events),
        ["keycard.auth.passed", "keycard.auth.passed"]
    );
    assert_eq!(submitted.len(), 2);
    assert_eq!(events[0].from, None, "no value before the first tap");
    assert_eq!(events[1].from(), "passed");
    assert_eq!(
        events[0].data_at(["uid"]),
        Some(&DataValue::Str("04a1".into()))
    );
    // The hash expired: no uid, so no `data.uid`.
    notify(
        &mut e,
        at(3),
        "keycard",
        "authentication",
        &[("authentication", Some("passed"))],
    );
    let (events, _) = drain(&mut e);
    assert_eq!(events[0].data_at(["uid"]), None);
}

#[test]
fn value_patterns_constants_and_channel_sources() {
    let mut e = engine(payload(&["*"], false), BusMode::Own, SourceSet::All);
    seed(&mut e, "battery:0", "charge", "80");
    notify(
        &mut e,
        at(1),
        "battery:0",
        "charge",
        &[("charge", Some("79"))],
    );
    notify(
        &mut e,
        at(2),
        "battery:0",
        "charge",
        &[("charge", Some("n/a"))],
    );
    let (events, _) = drain(&mut e);
    assert_eq!(
        topics(&events),
        ["battery.charge.changed"],
        "only to an integer"
    );
    assert_eq!(events[0].data_at(["slot"]), Some(&DataValue::Int(0)));
    assert_eq!(e.input_channels(), ["input-events"]);
    e.channel_message(at(3), "input-events", b"seatbox:press");
    e.channel_message(at(4), "input-events", b"seatbox:wiggle");
    let (events, _) = drain(&mut e);
    assert_eq!(topics(&events), ["button.seatbox.press"]);
    assert_eq!(
        (events[0].from.as_deref(), events[0].to.as_deref()),
        (None, None)
    );
}

#[test]
fn owned_and_input_topics_are_refused_from_the_bus_in_own_mode_only() {
    let own = engine(payload(&["*"], false), BusMode::Own, SourceSet::All);
    assert!(
        own.refuses_from_bus("alarm.disarmed") == own.owned_topics().contains(&"alarm.disarmed")
    );
    assert!(own.refuses_from_bus("vehicle.unlocked"));
    assert!(own.refuses_from_bus("input.anything"));
    assert!(!own.refuses_from_bus("accessory.report"));
    // Owned means the whole family (issue 29: a forged `ev:alarm.bogus`).
    for family in [
        "vehicle.bogus",
        "ride.anything",
        "keycard.auth.x",
        "button.a.b",
    ] {
        assert!(own.refuses_from_bus(family), "{family}");
    }
    for other in ["vehicle", "vehicles.x", "rides.x"] {
        assert!(!own.refuses_from_bus(other), "{other}");
    }
    let mut follow = engine(payload(&["*"], false), BusMode::Follow, SourceSet::All);
    assert!(!follow.refuses_from_bus("vehicle.unlocked"));
    assert!(follow.refuses_from_bus("input.anything"));
    seed(&mut follow, "vehicle", "state", "stand-by");
    notify(
        &mut follow,
        at(1),
        "vehicle",
        "state",
        &[("state", Some("parked"))],
    );
    assert!(drain(&mut follow).0.is_empty(), "follow derives nothing");
    assert!(follow.watched_hashes().is_empty(), "and watches no source");
}

#[test]
fn sources_used_watches_only_what_live_rules_need() {
    let none = engine(payload(&[], false), BusMode::Own, SourceSet::Used);
    assert!(none.live_pairs().is_empty());
    assert!(none.watched_hashes().is_empty());
    assert!(none.input_channels().is_empty());
    assert!(none.polls().is_empty());
    let mut some = engine(payload(&["button.*"], false), BusMode::Own, SourceSet::Used);
    assert!(some.watched_hashes().is_empty());
    assert_eq!(some.input_channels(), ["input-events"]);
    // Turning a rule off changes the set live.
    some.set_enabled("r0", false).unwrap();
    assert!(some.input_channels().is_empty());
    let all = engine(payload(&[], false), BusMode::Own, SourceSet::All);
    assert_eq!(all.watched_hashes(), ["battery:0", "keycard", "vehicle"]);
}

#[test]
fn polls_run_only_while_a_rule_reads_their_fields() {
    let mut idle = engine(payload(&["*"], false), BusMode::Own, SourceSet::All);
    assert!(idle.polls().is_empty(), "nothing reads engine-ecu speed");
    assert_eq!(idle.next_deadline(), None);
    let mut e = engine(payload(&[], true), BusMode::Own, SourceSet::All);
    assert_eq!(e.polls().len(), 1);
    assert_eq!(e.next_deadline(), Some(Time::ZERO));
    e.handle_timeout(at(0));
    let mut polled = Vec::new();
    while let Some(effect) = e.poll_effect() {
        if let Effect::Poll { hash, pairs } = effect {
            polled.push((hash, pairs));
        }
    }
    assert_eq!(polled, [("engine-ecu".to_string(), vec![0])]);
    assert_eq!(e.next_deadline(), Some(Time::from_millis(1_000)));
    e.fields_read(at(5), ReadCause::Reread, &[(0, Some("30".into()))]);
    assert_eq!(e.state_value("engine-ecu", "speed"), Some("30"));
    assert_eq!(
        e.notified("engine-ecu", "speed"),
        Notified::Ignore,
        "polled, not read"
    );
    drop(idle.poll_effect());
}

/// The simulator's `[[state]]` forms, with the profile: seeding before
/// the start, a keycard write announced once with its expiry, a silent
/// write, a hash cleared and replaced, a poll picking up a silent field.
#[test]
fn the_simulator_writes_and_announces_as_the_services_do() {
    use ruled_engine::sim::{parse, simulate, LineKind};
    let timeline = parse(
        r#"
end = "20s"

[[event]]
at = "19s"
topic = "never.sent"

[[state]]
at = "0s"
hash = "vehicle"
field = "state"
value = "stand-by"
before-start = true

[[state]]
at = "1s"
hash = "vehicle"
field = "state"
value = "parked"

[[state]]
at = "2s"
hash = "keycard"
fields = { authentication = "passed", uid = "04a1" }
publish = "authentication"
expire = "10s"

[[state]]
at = "13s"
hash = "keycard"
field = "authentication"
value = "passed"

[[state]]
at = "14s"
hash = "vehicle"
field = "state"
value = "ready-to-drive"
notify = false

[[state]]
at = "15s"
hash = "vehicle"
clear = true

[[state]]
at = "16s"
hash = "vehicle"
replace = true
fields = { state = "parked" }

[[state]]
at = "17s"
hash = "vehicle"
replace = true
fields = { state = "stand-by" }

[[state]]
at = "18s"
hash = "engine-ecu"
field = "speed"
value = "30"
notify = false
"#,
    )
    .unwrap();
    let outcome = simulate(payload(&["*"], true), &timeline, None).unwrap();
    let derived: Vec<String> = outcome
        .lines
        .iter()
        .filter(|line| line.kind == LineKind::Derived)
        .map(|line| {
            format!(
                "{} {} {}->{} {}",
                line.at_ms,
                line.topic.as_deref().unwrap_or(""),
                line.from.as_deref().unwrap_or("-"),
                line.to.as_deref().unwrap_or("-"),
                line.data.as_deref().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        derived,
        [
            "1000 vehicle.state.changed stand-by->parked ",
            "1000 vehicle.unlocked stand-by->parked ",
            "2000 keycard.auth.passed -->passed {\"uid\":\"04a1\"}",
            // The hash expired at 12 s: the tap has no uid, and its `from`
            // is the last value seen.
            "13000 keycard.auth.passed passed->passed ",
            // The silent write at 14 s is not seen; cleared at 15 s makes
            // the 16 s value a first one; 17 s is a real change.
            "17000 vehicle.state.changed parked->stand-by ",
        ]
    );
    // The poll of the silent speed, which a rule reads, saw 30.
    assert!(
        outcome
            .lines
            .iter()
            .any(|line| line.kind == LineKind::Action && line.rule.as_deref() == Some("fast")),
        "{:#?}",
        outcome.lines
    );
}
