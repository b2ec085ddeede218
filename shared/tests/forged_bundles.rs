//! Forged bundles (docs/bundle.md#file-layout, docs/fuzzing.md): a valid
//! payload, mutated and checksummed again as a forger would, is either
//! refused by the loader or, accepted, stays within the limits the checker
//! enforces, and every program in it evaluates without a malformed-program
//! error and within the VM's bound on built text. Nothing panics.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::bundle::{Action, Payload, Repeat, Rule, StatePair, Step};
use rulecore::bytecode::{Builtin, Const, Op, Program};
use rulecore::codec::{decode, encode, frame, HEADER_LEN};
use rulecore::event::Event;
use rulecore::limits::MAX_PATTERNS;
use rulecore::vm::{eval_bool, EvalError};
use rulecore::TopicPattern;
use std::sync::Arc;
use test_kit::fuzz::{Fuzz, Rng};

/// A payload with every part a forger could inflate: repeats, durations,
/// patterns, constants and a `when` that joins strings.
fn sample() -> Payload {
    let consts = vec![
        Const::Path(vec!["text".into()]),
        Const::Str("x".repeat(1000)),
        Const::Str("parked".into()),
    ];
    let state_pairs = vec![StatePair {
        hash: "vehicle".into(),
        field: "state".into(),
    }];
    let mut steps = vec![Step::new(Action::redis("scooter:horn", "on"), 0)];
    steps.push(Step {
        when: Some(Program {
            ops: vec![Op::State(0), Op::Const(2), Op::Eq],
        }),
        ..Step::new(
            Action::Exec {
                command: "/usr/bin/true".into(),
                timeout_ns: 1_000_000_000,
            },
            300_000_000,
        )
    });
    let on = vec![
        TopicPattern::parse("alarm.*").unwrap(),
        TopicPattern::parse("b").unwrap(),
    ];
    let mut rule = Rule::new("horn", "a.toml", on, steps);
    rule.options_mut().repeat = Repeat {
        count: 3,
        every_ns: 2_000_000_000,
        period_ns: 0,
    };
    rule.options_mut().cancel_on = vec![TopicPattern::parse("alarm.disarmed").unwrap()].into();
    rule.when = Some(Box::new(Program {
        ops: vec![
            Op::Data(0),
            Op::Data(0),
            Op::Add,
            Op::Const(1),
            Op::Add,
            Op::Call(Builtin::ToUppercase, 1),
            Op::Const(1),
            Op::Eq,
        ],
    }));
    Payload::new("0.1.0", vec![rule], state_pairs, consts)
}

/// An event whose `data.text` is 60 KB: joined to itself, it would grow
/// fast without the VM's bound.
fn big_event() -> Event {
    let text = "y".repeat(60_000);
    Event::decode(format!(r#"{{"topic":"alarm.x","data":{{"text":"{text}"}}}}"#).as_bytes())
        .unwrap()
}

/// What an accepted payload must satisfy.
fn assert_bounded(payload: &Payload, event: &Event) {
    let state = vec![String::new(); payload.state_pairs.len()];
    for rule in &payload.rules {
        assert!(
            rule.repeat().count == 1 || rule.repeat().every_ns > 0,
            "{rule:?}"
        );
        assert!(rule.on.len() <= MAX_PATTERNS && rule.cancel_on().len() <= MAX_PATTERNS);
        for ns in [
            rule.cooldown_ns(),
            rule.debounce_ns(),
            rule.repeat().every_ns,
        ] {
            assert!(ns <= i64::MAX as u64);
        }
        let programs = rule
            .when
            .as_deref()
            .into_iter()
            .chain(rule.steps.iter().filter_map(|s| s.when.as_ref()));
        for program in programs {
            let result = eval_bool(program, &payload.consts, event, &state);
            assert!(
                !matches!(result, Err(EvalError::Malformed { .. })),
                "a verified program malformed: {program:?}"
            );
        }
        for step in rule.steps.iter() {
            assert!(step.after_ns <= i64::MAX as u64);
            assert!(!step.durable || step.after_ns > 0);
        }
    }
}

/// Random edits of the payload's bytes, behind a fresh, valid header.
fn mutate_bytes(rng: &mut Rng, body: &[u8]) -> Vec<u8> {
    let mut bytes = body.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(4) {
            0 if !bytes.is_empty() => {
                let at = rng.below(bytes.len());
                bytes[at] = rng.next_u64() as u8;
            }
            1 if !bytes.is_empty() => {
                let at = rng.below(bytes.len());
                bytes[at] = *rng.pick(&[0x00, 0x01, 0x7f, 0x80, 0xff]);
            }
            2 => {
                let at = rng.below(bytes.len() + 1);
                bytes.insert(at, rng.next_u64() as u8);
            }
            _ if !bytes.is_empty() => {
                let at = rng.below(bytes.len());
                bytes.remove(at);
            }
            _ => {}
        }
    }
    frame(&bytes)
}

/// Random edits of the payload's fields, encoded (and so checksummed) again.
fn mutate_fields(rng: &mut Rng, payload: &Payload) -> Vec<u8> {
    let mut payload = payload.clone();
    let rule = &mut payload.rules[0];
    match rng.below(7) {
        0 => {
            rule.options_mut().repeat.count = *rng.pick(&[0, 1, 2, u32::MAX]);
            rule.options_mut().repeat.every_ns = *rng.pick(&[0, 1, u64::MAX]);
        }
        1 => {
            Arc::make_mut(&mut rule.steps)[1].after_ns =
                *rng.pick(&[0, 1, i64::MAX as u64, u64::MAX])
        }
        2 => {
            let n = *rng.pick(&[MAX_PATTERNS, MAX_PATTERNS + 1]);
            rule.on = (0..n)
                .map(|i| TopicPattern::parse(&format!("t{i}")).unwrap())
                .collect();
        }
        3 => payload.state_pairs[0].hash = "ev:alarm.triggered".into(),
        4 => {
            // A constant bomb: a large constant joined again and again.
            payload.consts[1] = Const::Str("z".repeat(rng.below(1 << 20)));
            let mut ops = vec![Op::Const(1)];
            for _ in 0..rng.below(64) {
                ops.extend([Op::Const(1), Op::Add]);
            }
            ops.extend([Op::Const(1), Op::Eq]);
            rule.when = Some(Box::new(Program { ops }));
        }
        5 => {
            let mut ops = vec![Op::Data(0)];
            for _ in 0..rng.below(200) {
                ops.extend([Op::Data(0), Op::Add]);
            }
            ops.extend([Op::Const(1), Op::Eq]);
            rule.when = Some(Box::new(Program { ops }));
        }
        _ => Arc::make_mut(&mut rule.steps)[0].durable = rng.one_in(2),
    }
    encode(&payload).unwrap()
}

#[test]
fn forged_bundles_are_refused_or_stay_bounded() {
    // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md).
    let fuzz = Fuzz::from_env(
        "forged_bundles::forged_bundles_are_refused_or_stay_bounded",
        11,
    )
    .unwrap();
    let mut rng = Rng::new(fuzz.seed());
    let good = sample();
    let body = encode(&good).unwrap()[HEADER_LEN..].to_vec();
    let event = big_event();
    assert_bounded(&decode(&encode(&good).unwrap()).unwrap().payload, &event);
    let (mut accepted, mut refused) = (0usize, 0usize);
    for _ in 0..fuzz.cases(600) {
        let bytes = if rng.one_in(2) {
            mutate_bytes(&mut rng, &body)
        } else {
            mutate_fields(&mut rng, &good)
        };
        match decode(&bytes) {
            Ok(bundle) => {
                accepted += 1;
                assert_bounded(&bundle.payload, &event);
            }
            Err(_) => refused += 1,
        }
    }
    // Both kinds of outcome are exercised.
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
}
