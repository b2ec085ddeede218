//! The bundle file format (docs/bundle.md): every corruption is caught by the
//! check meant for it, and nothing panics.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::bundle::{Action, CanFrame, Payload, Rule, StatePair, Step, FORMAT_VERSION};
use rulecore::bytecode::{Builtin, Const, EventField, Op, Program};
use rulecore::codec::{decode, encode, frame, BundleError, HEADER_LEN};
use rulecore::fingerprint::fingerprint_of;
use rulecore::verify::{PayloadError, VerifyError};
use rulecore::TopicPattern;
use std::sync::Arc;
use test_kit::fuzz::Fuzz;

fn topic(p: &str) -> TopicPattern {
    TopicPattern::parse(p).unwrap()
}

fn sample() -> Payload {
    let consts = vec![
        Const::Str("level-2-triggered".into()),
        Const::Path(vec!["level".into()]),
        Const::Int(1),
        Const::Str("parked".into()),
    ];
    let state_pairs = vec![StatePair {
        hash: "vehicle".into(),
        field: "state".into(),
    }];
    let steps = vec![
        Step::new(Action::redis("scooter:blinker", "both"), 0),
        Step {
            when: Some(Program {
                ops: vec![Op::State(0), Op::Const(3), Op::Eq],
            }),
            ..Step::new(
                Action::Exec {
                    command: "/usr/bin/true".into(),
                    timeout_ns: 10_000_000_000,
                },
                30_000_000_000,
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
            0,
        ),
    ];
    let mut rule = Rule::new(
        "hazards-on-alarm",
        "alarm.toml",
        vec![topic("alarm.*")],
        steps,
    );
    rule.options_mut().cancel_on = vec![topic("alarm.disarmed")].into();
    // docs/rules.md#finally: off at once on a cancel, unless parked.
    rule.options_mut().finally = vec![Step {
        when: Some(Program {
            ops: vec![Op::State(0), Op::Const(3), Op::Ne],
        }),
        ..Step::new(Action::redis("scooter:blinker", "off"), 0)
    }]
    .into();
    rule.when = Some(Box::new(Program {
        ops: vec![
            Op::Field(EventField::To),
            Op::Const(0),
            Op::Eq,
            Op::AndJump(9),
            Op::Data(1),
            Op::Const(2),
            Op::Ge,
            Op::AssertBool,
            Op::AssertBool,
        ],
    }));
    // Computes the exec step's fingerprint against the pools.
    Payload::new("0.1.0", vec![rule], state_pairs, consts)
}

#[test]
fn round_trip_is_exact_and_deterministic() {
    let bytes = encode(&sample()).unwrap();
    assert_eq!(bytes, encode(&sample()).unwrap());
    assert_eq!(&bytes[..8], b"SCRULES\0");
    let bundle = decode(&bytes).unwrap();
    assert_eq!(bundle.payload, sample());
    let p = &bundle.payload;
    assert_eq!(p.rules[0].finally().len(), 1);
    for step in p.rules[0].steps.iter().chain(p.rules[0].finally()) {
        assert_eq!(
            step.fingerprint,
            fingerprint_of(step, &p.consts, &p.state_pairs)
        );
    }
    assert_eq!(
        bundle.id,
        blake3::hash(&bytes[HEADER_LEN..]).to_hex().to_string()
    );
}

#[test]
fn every_single_byte_flip_is_rejected_by_its_check() {
    let bytes = encode(&sample()).unwrap();
    for pos in 0..bytes.len() {
        for mask in [0x01u8, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[pos] ^= mask;
            let err = decode(&bad).expect_err("a flipped byte must be rejected");
            let ok = match pos {
                0..=7 => matches!(err, BundleError::BadMagic),
                8..=9 => matches!(err, BundleError::UnsupportedVersion { .. }),
                10..=41 => matches!(err, BundleError::DigestMismatch),
                42..=49 => matches!(
                    err,
                    BundleError::Truncated { .. } | BundleError::TrailingBytes { .. }
                ),
                _ => matches!(err, BundleError::DigestMismatch),
            };
            assert!(ok, "byte {pos} ^ {mask:#x}: unexpected {err:?}");
        }
    }
}

#[test]
fn every_truncation_is_rejected() {
    let bytes = encode(&sample()).unwrap();
    for len in 0..bytes.len() {
        let err = decode(&bytes[..len]).expect_err("a truncated bundle must be rejected");
        let ok = if len < HEADER_LEN {
            matches!(err, BundleError::TooShort { len: l } if l == len)
        } else {
            matches!(err, BundleError::Truncated { declared, actual }
                if declared as usize == bytes.len() - HEADER_LEN && actual as usize == len - HEADER_LEN)
        };
        assert!(ok, "length {len}: unexpected {err:?}");
    }
}

#[test]
fn header_checks() {
    let bytes = encode(&sample()).unwrap();

    let mut wrong_magic = bytes.clone();
    wrong_magic[..8].copy_from_slice(b"PK\x03\x04zip!");
    assert!(matches!(decode(&wrong_magic), Err(BundleError::BadMagic)));

    let mut future = bytes.clone();
    future[8..10].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert!(matches!(
        decode(&future),
        Err(BundleError::UnsupportedVersion { found, supported })
            if found == FORMAT_VERSION + 1 && supported == FORMAT_VERSION
    ));

    let mut trailing = bytes.clone();
    trailing.extend_from_slice(b"garbage");
    assert!(matches!(
        decode(&trailing),
        Err(BundleError::TrailingBytes { extra: 7 })
    ));

    let mut huge = bytes.clone();
    huge[42..50].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        decode(&huge),
        Err(BundleError::Truncated {
            declared: u64::MAX,
            ..
        })
    ));
}

#[test]
fn payload_checks_after_the_digest() {
    // Garbage with a valid digest: the postcard decoder refuses it.
    assert!(matches!(
        decode(&frame(&[0xff; 40])),
        Err(BundleError::Decode(_))
    ));
    // A valid payload followed by extra bytes inside the digested region.
    let mut body = postcard::to_allocvec(&sample()).unwrap();
    body.push(0);
    assert!(matches!(
        decode(&frame(&body)),
        Err(BundleError::PayloadTrailing { extra: 1 })
    ));
    // Every prefix of a valid payload, correctly framed: an error, no panic.
    let body = postcard::to_allocvec(&sample()).unwrap();
    for len in 0..body.len() {
        assert!(decode(&frame(&body[..len])).is_err(), "prefix {len}");
    }
    // Every byte of the payload flipped, correctly framed: decodes to
    // something, or is refused; never panics.
    for pos in 0..body.len() {
        let mut bad = body.clone();
        bad[pos] ^= 0xff;
        let _ = decode(&frame(&bad));
    }
}

#[test]
fn a_bad_program_fails_verification_naming_rule_and_step() {
    let mut payload = sample();
    Arc::make_mut(&mut payload.rules[0].steps)[1].when = Some(Program {
        ops: vec![Op::State(7), Op::Const(3), Op::Eq],
    });
    let bytes = encode(&payload).unwrap();
    match decode(&bytes) {
        Err(BundleError::Invalid(PayloadError::Program { rule, place, error })) => {
            assert_eq!(rule, "hazards-on-alarm");
            assert_eq!(place, "step 1 `when`");
            assert_eq!(
                error,
                VerifyError::StateOutOfRange {
                    pc: 0,
                    index: 7,
                    len: 1
                }
            );
        }
        other => panic!("unexpected {other:?}"),
    }

    let mut payload = sample();
    let options = payload.rules[0].options_mut();
    Arc::make_mut(&mut options.finally)[0].when = Some(Program {
        ops: vec![Op::State(7), Op::Const(3), Op::Eq],
    });
    match decode(&encode(&payload).unwrap()) {
        Err(BundleError::Invalid(PayloadError::Program { place, .. })) => {
            assert_eq!(place, "finally step 0 `when`");
        }
        other => panic!("unexpected {other:?}"),
    }
    let mut payload = sample();
    Arc::make_mut(&mut payload.rules[0].options_mut().finally)[0].action =
        Arc::new(Action::Can(CanFrame {
            iface: "can0".into(),
            id: 0x800,
            extended: false,
            rtr: false,
            dlc: 0,
            data: vec![],
        }));
    let error = decode(&encode(&payload).unwrap()).unwrap_err();
    assert!(
        error.to_string().contains(
            "rule `hazards-on-alarm`, finally step 0: CAN frame id above 0x7FF without the extended flag"
        ),
        "{error}"
    );

    let mut payload = sample();
    payload.rules[0].when = Some(Box::new(Program {
        ops: vec![Op::Const(1)],
    }));
    assert!(matches!(
        decode(&encode(&payload).unwrap()),
        Err(BundleError::Invalid(PayloadError::Program {
            error: VerifyError::ConstIsPath { .. },
            ..
        }))
    ));

    let mut payload = sample();
    payload.rules[0].when = Some(Box::new(Program {
        ops: vec![Op::Const(2), Op::Const(2), Op::Call(Builtin::Len, 2)],
    }));
    assert!(matches!(
        decode(&encode(&payload).unwrap()),
        Err(BundleError::Invalid(PayloadError::Program {
            error: VerifyError::Arity { .. },
            ..
        }))
    ));

    for bad in [
        TopicPattern::Exact("".into()),
        TopicPattern::Prefix("alarm".into()),
        TopicPattern::Prefix("a*.".into()),
        TopicPattern::Exact("alarm.*".into()),
    ] {
        let mut payload = sample();
        let mut cancel_on = payload.rules[0].cancel_on().to_vec();
        cancel_on.push(bad.clone());
        payload.rules[0].options_mut().cancel_on = cancel_on.into();
        assert!(
            matches!(
                decode(&encode(&payload).unwrap()),
                Err(BundleError::Invalid(PayloadError::Pattern { .. }))
            ),
            "{bad:?}"
        );
    }

    let mut payload = sample();
    payload.rules.push(payload.rules[0].clone());
    assert!(matches!(
        decode(&encode(&payload).unwrap()),
        Err(BundleError::Invalid(PayloadError::DuplicateRule { .. }))
    ));
}

#[test]
fn random_inputs_never_panic() {
    // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md).
    let fuzz = Fuzz::from_env("bundle_codec::random_inputs_never_panic", 7).unwrap();
    let good = encode(&sample()).unwrap();
    let mut rng = test_kit::fuzz::Rng::new(fuzz.seed());
    for _ in 0..fuzz.cases(2000) {
        let mut bytes = good.clone();
        let edits = 1 + rng.next_u64() % 4;
        for _ in 0..edits {
            let pos = (rng.next_u64() as usize) % bytes.len();
            bytes[pos] = rng.next_u64() as u8;
        }
        if rng.next_u64().is_multiple_of(3) {
            let cut = (rng.next_u64() as usize) % bytes.len();
            bytes.truncate(cut);
        }
        assert!(decode(&bytes).is_err() || bytes == good);
        // The same edits behind a valid header reach the decoder itself.
        let _ = decode(&frame(&bytes[HEADER_LEN.min(bytes.len())..]));
    }
}

/// The CAN frame checks of the loader (docs/rules.md#the-can-action): one bad field each.
#[test]
fn bad_can_frames_are_refused_naming_the_step() {
    let good = CanFrame {
        iface: "can0".into(),
        id: 0x123,
        extended: false,
        rtr: false,
        dlc: 2,
        data: vec![1, 2],
    };
    let cases = [
        (
            CanFrame {
                id: 0x2000_0000,
                extended: true,
                ..good.clone()
            },
            "id above 0x1FFFFFFF",
        ),
        (
            CanFrame {
                id: 0x800,
                ..good.clone()
            },
            "id above 0x7FF without the extended flag",
        ),
        (
            CanFrame {
                dlc: 9,
                data: vec![0; 9],
                ..good.clone()
            },
            "longer than 8 bytes",
        ),
        (
            CanFrame {
                rtr: true,
                ..good.clone()
            },
            "is a remote frame with data",
        ),
        (
            CanFrame {
                dlc: 3,
                ..good.clone()
            },
            "length code differs from its data length",
        ),
    ];
    for (frame, want) in cases {
        let mut payload = sample();
        Arc::make_mut(&mut payload.rules[0].steps)[2].action = Arc::new(Action::Can(frame.clone()));
        match decode(&encode(&payload).unwrap()) {
            Err(BundleError::Invalid(PayloadError::CanFrame {
                rule,
                list,
                step,
                reason,
            })) => {
                assert_eq!(
                    (rule.as_str(), list, step, reason),
                    ("hazards-on-alarm", "step", 2, want)
                );
            }
            other => panic!("{frame:?}: unexpected {other:?}"),
        }
    }
    // The limits themselves are accepted: an extended 29-bit id, 8 bytes,
    // a remote frame asking for 8.
    for frame in [
        CanFrame {
            id: 0x1FFF_FFFF,
            extended: true,
            ..good.clone()
        },
        CanFrame {
            dlc: 8,
            data: vec![0; 8],
            ..good.clone()
        },
        CanFrame {
            rtr: true,
            dlc: 8,
            data: vec![],
            ..good.clone()
        },
    ] {
        let mut payload = sample();
        Arc::make_mut(&mut payload.rules[0].steps)[2].action = Arc::new(Action::Can(frame.clone()));
        assert!(decode(&encode(&payload).unwrap()).is_ok(), "{frame:?}");
    }
}
