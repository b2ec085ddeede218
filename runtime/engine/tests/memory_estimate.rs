//! `estimated_heap` (docs/bundle.md#building) against the heap really
//! taken by decoding a bundle and building the engine from it, counted by
//! a wrapping allocator, on rule sets of several shapes. The only test in
//! this binary, so the counting allocator sees nothing else.
#![allow(unsafe_code)] // a counting GlobalAlloc wrapper around System
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use rulecore::bundle::{Action, CanFrame, Payload, Repeat, Rule, StatePair, Step};
use rulecore::bytecode::{Const, Op, Program};
use rulecore::codec::{decode, encode};
use rulecore::topic::TopicPattern;
use ruled_engine::{estimated_heap, Engine, EngineConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod counting;
use counting::LIVE;

fn topic(text: &str) -> TopicPattern {
    TopicPattern::parse(text).unwrap()
}

/// `n` rules of one exact topic and one redis step each.
fn simple(n: usize) -> Payload {
    let rules = (0..n)
        .map(|i| {
            let off = Action::redis("scooter:blinker", "off");
            Rule::new(
                format!("rule-{i}"),
                "bench.toml",
                vec![topic(&format!("t.{i}"))],
                vec![Step::new(off, 30_000_000_000)],
            )
        })
        .collect();
    Payload::new("test", rules, vec![], vec![])
}

/// `n` rules with `when`s, shared and own prefixes, cancel-on lists, three
/// kinds of steps, repeats, finally steps, some disabled.
fn varied(n: usize) -> Payload {
    let consts = vec![
        Const::Path(vec!["level".into()]),
        Const::Int(2),
        Const::Str("parked".into()),
    ];
    let state_pairs = vec![StatePair {
        hash: "vehicle".into(),
        field: "state".into(),
    }];
    let when = Program {
        ops: vec![
            Op::Data(0),
            Op::Const(1),
            Op::Gt,
            Op::AndJump(8),
            Op::State(0),
            Op::Const(2),
            Op::Eq,
            Op::AssertBool,
        ],
    };
    let rules = (0..n)
        .map(|i| {
            let steps = vec![
                Step {
                    when: Some(when.clone()),
                    ..Step::new(
                        Action::Exec {
                            command: format!("/usr/local/bin/step-{i}"),
                            timeout_ns: 10_000_000_000,
                        },
                        0,
                    )
                },
                Step::new(
                    Action::Can(CanFrame {
                        iface: "can0".into(),
                        id: 0x123,
                        extended: false,
                        rtr: false,
                        dlc: 2,
                        data: vec![1, 2],
                    }),
                    500_000_000,
                ),
                Step::new(
                    Action::redis("scooter:dashboard", format!("message-{i}")),
                    1_000_000_000,
                ),
            ];
            let on = vec![
                topic(&format!("family.{}.*", i % 50)),
                topic(&format!("device.{i}.pressed")),
                topic("alarm.triggered"),
            ];
            let mut rule = Rule::new(format!("varied-rule-{i}"), "varied.toml", on, steps);
            rule.options_mut().cancel_on =
                vec![topic("alarm.disarmed"), topic(&format!("device.{i}.*"))].into();
            rule.when = Some(Box::new(when.clone()));
            rule.enabled = i % 7 != 0;
            if i % 2 == 0 {
                // docs/rules.md#finally: its own cleanup, counted like a step.
                let clear = Action::redis("scooter:dashboard", format!("clear-{i}"));
                rule.options_mut().finally = vec![Step::new(clear, 0)].into();
            }
            if i % 3 == 0 {
                rule.options_mut().repeat = Repeat {
                    count: 3,
                    every_ns: 2_000_000_000,
                    period_ns: 0,
                };
            }
            rule
        })
        .collect();
    Payload::new("test", rules, state_pairs, consts)
}

/// `simple(n)` with a bus profile the size of the Librescoot one: 60
/// field sources of three emits (patterns, constant and field data), a
/// channel source of 24 emits, two polls.
fn with_profile(n: usize) -> Payload {
    use rulecore::profile::{Changes, DataSpec, Emit, Origin, Poll, Profile, Source};
    use rulecore::value_pattern::ValuePattern;
    let pattern = |text: &str| ValuePattern::parse(text).unwrap();
    let emit = |topic: String, to: &[&str], payload: &[&str]| Emit {
        topic,
        from: Vec::new(),
        to: to.iter().map(|t| pattern(t)).collect(),
        payload: payload.iter().map(|t| pattern(t)).collect(),
        when: None,
        data: vec![
            ("slot".into(), DataSpec::Int(1)),
            ("uid".into(), DataSpec::Field("uid".into())),
        ],
        from_to: payload.is_empty(),
    };
    let mut sources: Vec<Source> = (0..60)
        .map(|i| Source {
            origin: Origin::Field {
                hash: format!("hash-{}", i / 6),
                field: format!("field-{i}"),
                read: vec!["uid".into()],
            },
            changes: Changes::Distinct,
            emits: vec![
                emit(format!("thing{i}.changed"), &[], &[]),
                emit(format!("thing{i}.on"), &["on", "start:<int>"], &[]),
                emit(format!("thing{i}.off"), &["off"], &[]),
            ],
        })
        .collect();
    sources.push(Source {
        origin: Origin::Channel {
            channel: "input-events".into(),
        },
        changes: Changes::Distinct,
        emits: (0..24)
            .map(|i| emit(format!("button.b{i}.press"), &[], &["b:press"]))
            .collect(),
    });
    let mut payload = simple(n);
    payload.profile = Some(Profile {
        name: "librescoot".into(),
        digest: "0".repeat(64),
        sources,
        polls: vec![Poll {
            hash: "engine-ecu".into(),
            fields: (0..12).map(|i| format!("f{i}")).collect(),
            every_ns: 1_000_000_000,
        }],
    });
    payload
}

/// The heap of decoding `payload`'s bundle and building the engine.
fn measured(payload: &Payload) -> usize {
    let bytes = encode(payload).unwrap();
    let before = LIVE.load(Ordering::Relaxed);
    let bundle = decode(&bytes).unwrap();
    let id = bundle.id.capacity() as isize;
    let engine = Engine::new(Arc::new(bundle.payload), EngineConfig::default());
    let after = LIVE.load(Ordering::Relaxed);
    drop(engine);
    (after - before - id) as usize
}

#[test]
fn the_estimate_is_within_a_fifth_of_the_measured_heap() {
    for (name, payload) in [
        ("1,000 simple rules", simple(1_000)),
        ("20,000 simple rules", simple(20_000)),
        ("300 varied rules", varied(300)),
        ("20,000 varied rules", varied(20_000)),
        ("10 rules and a bus profile", with_profile(10)),
    ] {
        let estimate = estimated_heap(&payload);
        let heap = measured(&payload);
        let error = estimate as f64 / heap as f64 - 1.0;
        println!(
            "{name}: estimated {estimate} bytes, measured {heap} bytes ({:+.1} %)",
            error * 100.0
        );
        assert!(
            error.abs() < 0.2,
            "{name}: estimate {estimate}, heap {heap}"
        );
    }
}
