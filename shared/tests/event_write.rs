//! `Event::write_json` writes the envelope by hand (shared/src/event/write.rs);
//! it must write exactly the bytes `serde_json` writes through serde's
//! derive. Random events, with every string and number `serde_json` treats
//! apart, are written both ways and compared byte for byte.

use rulecore::event::Event;
use rulecore::event_data::DataValue;
use test_kit::fuzz::{Fuzz, Rng};

/// Writes `event` both ways, after a few bytes already in the buffer (it
/// appends), and compares.
fn check(event: &Event) {
    let want = serde_json::to_vec(event).unwrap_or_else(|e| panic!("{e}"));
    let mut ours = b"before".to_vec();
    event.write_json(&mut ours);
    assert_eq!(
        ours.strip_prefix(b"before"),
        Some(&want[..]),
        "{event:?}\n ours: {}\nserde: {}",
        String::from_utf8_lossy(&ours),
        String::from_utf8_lossy(&want)
    );
}

/// Pieces of strings: plain names, everything that is escaped (each
/// control byte, `"`, `\`), what is not (`/`, DEL, non-ASCII).
fn piece(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => char::from(rng.below(0x20) as u8).to_string(),
        1 => (*rng.pick(&["\"", "\\", "/", "\u{7f}", "\\u0041", "\\\""])).to_string(),
        2 => (*rng.pick(&["é", "€", "😀", "\u{2028}", "\u{fffd}", "ÿ"])).to_string(),
        3 => "x".repeat(rng.below(40)),
        _ => (*rng.pick(&["a", "vehicle", ".", "-", "kickstand", " ", "up", "0"])).to_string(),
    }
}

fn text(rng: &mut Rng) -> String {
    let mut out = String::new();
    // Empty, short (inline) and long (boxed) strings.
    let pieces = match rng.below(4) {
        0 => 0,
        1 => 1,
        2 => rng.below(6),
        _ => rng.below(40),
    };
    for _ in 0..pieces {
        out.push_str(&piece(rng));
    }
    out
}

fn maybe_text(rng: &mut Rng) -> Option<rulecore::event::SmallStr> {
    (!rng.one_in(3)).then(|| text(rng).into())
}

fn int(rng: &mut Rng) -> i64 {
    match rng.below(4) {
        0 => *rng.pick(&[
            0,
            -1,
            1,
            i64::MIN,
            i64::MAX,
            i64::MIN + 1,
            1_712_345_678_901,
        ]),
        1 => rng.next_u64() as i64,
        2 => (rng.next_u64() as i64) >> rng.below(64),
        _ => rng.below(1000) as i64 - 500,
    }
}

fn float(rng: &mut Rng) -> f64 {
    match rng.below(4) {
        0 => *rng.pick(&[
            0.0,
            -0.0,
            1.0,
            -1.5,
            0.1,
            1e20,
            1e21,
            1e-7,
            123456789.125,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            f64::EPSILON,
            5e-324,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ]),
        // Any bits: subnormals, NaNs and infinities among them.
        1 => f64::from_bits(rng.next_u64()),
        2 => (rng.next_u64() as i64 as f64) / 1000.0,
        _ => rng.below(100_000) as f64 / 100.0,
    }
}

fn value(rng: &mut Rng, depth: usize) -> DataValue {
    let kinds = if depth == 0 { 6 } else { 8 };
    match rng.below(kinds) {
        0 => DataValue::Null,
        1 => DataValue::Bool(rng.one_in(2)),
        2 => DataValue::Int(int(rng)),
        3 => DataValue::UInt(u64::MAX - rng.below(1 << 20) as u64 * (rng.next_u64() >> 20)),
        4 => DataValue::Float(float(rng)),
        5 => DataValue::Str(text(rng).into()),
        6 => DataValue::Array((0..rng.below(5)).map(|_| value(rng, depth - 1)).collect()),
        _ => object(rng, depth - 1),
    }
}

fn object(rng: &mut Rng, depth: usize) -> DataValue {
    // Repeated keys too: the object keeps the last.
    let entries: Vec<(String, DataValue)> = (0..rng.below(20))
        .map(|_| (text(rng), value(rng, depth)))
        .collect();
    DataValue::object(entries)
}

fn event(rng: &mut Rng) -> Event {
    Event {
        id: maybe_text(rng),
        ts: (!rng.one_in(3)).then(|| int(rng)),
        topic: text(rng).into(),
        src: maybe_text(rng),
        from: maybe_text(rng),
        to: maybe_text(rng),
        // Mostly null or an object, as on the bus; any value is written.
        data: match rng.below(4) {
            0 => DataValue::Null,
            1 => value(rng, 3),
            _ => object(rng, 3),
        },
    }
}

#[test]
fn writes_as_serde_json_does() {
    // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md).
    let fuzz = Fuzz::from_env("event_write::writes_as_serde_json_does", 0x3717E).unwrap();
    let mut rng = Rng::new(fuzz.seed());
    for _ in 0..fuzz.cases(20_000) {
        check(&event(&mut rng));
    }
}

#[test]
fn the_same_cases_by_hand() {
    // Every ASCII character and some beyond, in one string and each alone.
    let all: String = (0u8..0x80)
        .map(char::from)
        .chain("é€😀\u{2028}".chars())
        .collect();
    let mut events = vec![
        Event::default(),
        Event {
            topic: "vehicle.kickstand.up".into(),
            ..Event::default()
        },
        Event {
            id: Some(all.as_str().into()),
            ts: Some(i64::MIN),
            topic: all.as_str().into(),
            src: Some("".into()),
            from: Some(all.as_str().into()),
            to: Some("\"".into()),
            data: DataValue::object([(all.as_str(), DataValue::Str(all.as_str().into()))]),
        },
        Event {
            ts: Some(i64::MAX),
            data: DataValue::object(Vec::<(&str, DataValue)>::new()),
            ..Event::default()
        },
        Event {
            data: DataValue::Array(Box::new([])),
            ..Event::default()
        },
        Event::hash_input("vehicle.kickstand.up", "vehicle", "kickstand", "down", "up"),
        Event::channel_input(
            "scooter.power",
            "power",
            serde_json::json!({"a": [1, -2, 2.5, 1e300, null, true, "s\n"], "b": {}, "u": u64::MAX}),
        ),
    ];
    for ch in all.chars() {
        events.push(Event {
            topic: ch.to_string().into(),
            from: Some(format!("a{ch}b").into()),
            ..Event::default()
        });
    }
    // Each escaped byte at each place of a string read eight bytes at a
    // time, and in its tail.
    for at in 0..20 {
        for byte in [0u8, 0x1f, b'"', b'\\', b'\n', 0x7f, b' '] {
            let mut text = "x".repeat(20);
            text.insert(at, char::from(byte));
            events.push(Event {
                topic: text.as_str().into(),
                ..Event::default()
            });
        }
    }
    for event in &events {
        check(event);
    }
}
