//! `Event::decode` and `Event::decode_on_channel` read the envelope by hand
//! (shared/src/event/read.rs); they must accept, refuse and produce exactly
//! what reading it through serde's derive with `serde_json` did
//! (docs/events.md). Random envelopes, near-envelopes and broken ones are
//! decoded both ways and compared.

use rulecore::event::{Event, EventError};
use rulecore::event_data::DataValue;
use serde::Deserialize;
use test_kit::fuzz::{Fuzz, Rng};

/// The bus envelope as it was read before: every field optional.
#[derive(Deserialize)]
struct BusEnvelope {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    ts: Option<i64>,
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    src: Option<String>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    to: Option<String>,
    #[serde(default)]
    data: DataValue,
}

/// What a decode gave, errors by kind: a malformed payload is one kind
/// whatever its message (the messages differ by design).
#[derive(Debug, PartialEq)]
enum Outcome {
    Event(Event, String),
    DataNotObject,
    TopicMismatch(String),
    Malformed,
}

fn outcome(result: Result<Event, EventError>) -> Outcome {
    match result {
        Ok(event) => {
            let json = serde_json::to_string(&event).unwrap_or_else(|e| panic!("{e}"));
            Outcome::Event(event, json)
        }
        Err(EventError::DataNotObject) => Outcome::DataNotObject,
        Err(EventError::TopicMismatch { topic }) => Outcome::TopicMismatch(topic),
        Err(_) => Outcome::Malformed,
    }
}

fn is_object(payload: &[u8]) -> bool {
    payload.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// `Event::decode` as serde read it (an array, read as a struct's fields
/// in order, was never an envelope: docs/events.md#the-envelope).
fn reference_decode(payload: &[u8]) -> Outcome {
    if !is_object(payload) {
        return Outcome::Malformed;
    }
    outcome(match serde_json::from_slice::<Event>(payload) {
        Ok(event) if !(event.data.is_null() || event.data.is_object()) => {
            Err(EventError::DataNotObject)
        }
        Ok(event) => Ok(event),
        Err(_) => Err(EventError::MissingTopic),
    })
}

/// `Event::decode_on_channel` as serde read it.
fn reference_on_channel(channel: &str, payload: &[u8]) -> Outcome {
    if !is_object(payload) {
        return Outcome::Malformed;
    }
    let Ok(e) = serde_json::from_slice::<BusEnvelope>(payload) else {
        return Outcome::Malformed;
    };
    if !(e.data.is_null() || e.data.is_object()) {
        return Outcome::DataNotObject;
    }
    let topic = match e.topic {
        None => channel.to_string(),
        Some(topic) if topic == channel => topic,
        Some(topic) => return Outcome::TopicMismatch(topic),
    };
    outcome(Ok(Event {
        id: e.id.map(Into::into),
        ts: e.ts,
        topic: topic.into(),
        src: e.src.map(Into::into),
        from: e.from.map(Into::into),
        to: e.to.map(Into::into),
        data: e.data,
    }))
}

const CHANNEL: &str = "vehicle.state";

fn check(payload: &[u8]) {
    let shown = String::from_utf8_lossy(payload);
    assert_eq!(
        outcome(Event::decode(payload)),
        reference_decode(payload),
        "decode {shown}"
    );
    assert_eq!(
        outcome(Event::decode_on_channel(CHANNEL, payload)),
        reference_on_channel(CHANNEL, payload),
        "decode_on_channel {shown}"
    );
}

const STRINGS: &[&[u8]] = &[
    b"",
    b"vehicle.state",
    b"parked",
    b"e-1712345678901",
    "é€😀".as_bytes(),
    br"\u00e9",
    br"\ud83d\ude00",
    br"\ud83d",
    br"\ud83dx",
    br"\ud83d\u0041",
    br"\udc00",
    br"a\nb\tc\r\b\f",
    br#"\"\\\/"#,
    br"\x",
    br"\u12",
    br"\u12G4",
    br"\uFFFF",
    b"\x01",
    b"\t",
    b"\x7f",
    b"\xff",
    b"\xc3",
    b"\xc3\xa9",
    b"\xed\xa0\x80",
    br"vehicle\u002estate",
    br"top\u0069c",
];

const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "7",
    "-7",
    "01",
    "-01",
    "1.",
    "1.5",
    "-1.5e3",
    "1e400",
    "-1e400",
    "1E+2",
    "1e-2",
    "0.1e-2",
    "2.5E-1",
    "1.7976931348623157e308",
    "4.9e-324",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "123456789012345678",
    "-123456789012345678",
    "999999999999999999",
    "1234567890123456789",
    "1712345678901",
    "0.30000000000000004",
    "3.14159265358979323846264338327950288",
    "-",
    "+1",
    ".5",
    "1e",
    "1e+",
    "1-2",
    "1.5.3",
    "00",
];

const KEYS: &[&str] = &[
    "id",
    "ts",
    "topic",
    "src",
    "from",
    "to",
    "data",
    r"top\u0069c",
    r"d\u0061ta",
    "ID",
    "x",
    "data2",
    "",
    "v",
    "level",
    "speed",
];

const SPACE: &[&str] = &["", "", "", " ", "\n", "\t ", "\r\n", "\x0c"];

struct Gen<'r> {
    rng: &'r mut Rng,
    out: Vec<u8>,
}

impl Gen<'_> {
    fn ws(&mut self) {
        let space = if self.rng.one_in(40) {
            "\x0c"
        } else {
            self.rng.pick(&SPACE[..SPACE.len() - 1])
        };
        self.out.extend_from_slice(space.as_bytes());
    }

    fn string(&mut self) {
        self.out.push(b'"');
        for _ in 0..self.rng.below(3) {
            let part = self.rng.pick(STRINGS);
            self.out.extend_from_slice(part);
        }
        if !self.rng.one_in(200) {
            self.out.push(b'"');
        }
    }

    fn number(&mut self) {
        if self.rng.one_in(3) {
            // A decimal fraction, around the length read without serde_json.
            let digits = |rng: &mut Rng, n: usize| -> String {
                (0..n)
                    .map(|_| char::from(b'0' + rng.below(10) as u8))
                    .collect()
            };
            let (integer_len, fraction_len) = (1 + self.rng.below(9), 1 + self.rng.below(10));
            let integer = digits(self.rng, integer_len);
            let fraction = digits(self.rng, fraction_len);
            let sign = if self.rng.one_in(3) { "-" } else { "" };
            self.out
                .extend_from_slice(format!("{sign}{integer}.{fraction}").as_bytes());
        } else if self.rng.one_in(2) {
            let n = self.rng.next_u64() >> self.rng.below(64);
            let text = if self.rng.one_in(2) {
                format!("-{n}")
            } else {
                n.to_string()
            };
            self.out.extend_from_slice(text.as_bytes());
        } else {
            let text = self.rng.pick(NUMBERS);
            self.out.extend_from_slice(text.as_bytes());
        }
    }

    fn key(&mut self) {
        self.out.push(b'"');
        let key = self.rng.pick(KEYS);
        self.out.extend_from_slice(key.as_bytes());
        self.out.push(b'"');
    }

    fn value(&mut self, depth: usize) {
        self.ws();
        match self.rng.below(if depth == 0 { 6 } else { 9 }) {
            0 | 1 => self.string(),
            2 | 3 => self.number(),
            4 => {
                let word = self
                    .rng
                    .pick(&["true", "false", "null", "null", "nul", "tru", "True"]);
                self.out.extend_from_slice(word.as_bytes());
            }
            5 => self.number(),
            6 | 7 => self.object(depth - 1),
            _ => self.array(depth - 1),
        }
        self.ws();
    }

    fn object(&mut self, depth: usize) {
        self.out.push(b'{');
        self.ws();
        let n = self.rng.below(5);
        for i in 0..n {
            if i > 0 {
                self.out.push(b',');
            }
            self.ws();
            self.key();
            self.ws();
            if !self.rng.one_in(100) {
                self.out.push(b':');
            }
            self.value(depth);
        }
        if n > 0 && self.rng.one_in(100) {
            self.out.push(b',');
        }
        if !self.rng.one_in(100) {
            self.out.push(b'}');
        }
    }

    fn array(&mut self, depth: usize) {
        self.out.push(b'[');
        let n = self.rng.below(4);
        for i in 0..n {
            if i > 0 {
                self.out.push(b',');
            }
            self.value(depth);
        }
        if n > 0 && self.rng.one_in(100) {
            self.out.push(b',');
        }
        self.ws();
        if !self.rng.one_in(100) {
            self.out.push(b']');
        }
    }

    /// An envelope: the known keys mostly with values of their type.
    fn envelope(&mut self) {
        self.ws();
        self.out.push(b'{');
        let n = self.rng.below(9);
        for i in 0..n {
            if i > 0 {
                self.out.push(b',');
            }
            self.ws();
            let key = self.rng.pick(KEYS);
            self.out.push(b'"');
            self.out.extend_from_slice(key.as_bytes());
            self.out.push(b'"');
            self.ws();
            self.out.push(b':');
            self.ws();
            let usual = !self.rng.one_in(6);
            match *key {
                "ts" if usual => self.number(),
                "data" | r"d\u0061ta" if usual => self.object(3),
                "id" | "src" | "from" | "to" if usual => self.string(),
                "topic" | r"top\u0069c" if usual => {
                    const TOPICS: &[&[u8]] = &[
                        CHANNEL.as_bytes(),
                        CHANNEL.as_bytes(),
                        br"vehicle\u002estate",
                        b"alarm.disarmed",
                        b"",
                    ];
                    let topic = *self.rng.pick(TOPICS);
                    self.out.push(b'"');
                    self.out.extend_from_slice(topic);
                    self.out.push(b'"');
                }
                _ => self.value(3),
            }
            self.ws();
        }
        self.out.push(b'}');
        self.ws();
        if self.rng.one_in(50) {
            const TRAILING: &[&[u8]] = &[b"x", b"{}", b",", b"\x00"];
            let trailing = *self.rng.pick(TRAILING);
            self.out.extend_from_slice(trailing);
        }
    }
}

#[test]
fn decodes_as_serde_did() {
    // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md).
    let fuzz = Fuzz::from_env("event_decode::decodes_as_serde_did", 0xE7E7).unwrap();
    let mut rng = Rng::new(fuzz.seed());
    let (mut decoded, mut refused) = (0, 0);
    for _ in 0..fuzz.cases(60_000) {
        let mut gen = Gen {
            rng: &mut rng,
            out: Vec::new(),
        };
        gen.envelope();
        let mut payload = gen.out;
        // Now and then one byte changed, inserted or removed.
        if rng.one_in(8) && !payload.is_empty() {
            let at = rng.below(payload.len());
            let byte = *rng.pick(b"{}[]\":,\\ 0-.eE\x00\xff");
            match rng.below(3) {
                0 => payload[at] = byte,
                1 => payload.insert(at, byte),
                _ => {
                    payload.remove(at);
                }
            }
        }
        check(&payload);
        match Event::decode_on_channel(CHANNEL, &payload) {
            Ok(_) => decoded += 1,
            Err(_) => refused += 1,
        }
    }
    // The generator reaches both sides.
    assert!(decoded > 5_000 && refused > 5_000, "{decoded} {refused}");
}

#[test]
fn the_same_cases_by_hand() {
    for payload in [
        &br#"{"id":"e-1","ts":1712345678901,"topic":"vehicle.state","src":"vehicle","from":"Driving","to":"parked","data":{"v":20,"charge":12,"speed":7.5,"level":2}}"#[..],
        br#"{}"#,
        b" {} ",
        b"",
        b"[]",
        br#"["e1", 5, "vehicle.state"]"#,
        b"5",
        b"null",
        br#"{"topic":null}"#,
        br#"{"topic":"vehicle.state","topic":"vehicle.state"}"#,
        br#"{"topic":"vehicle.state","top\u0069c":null}"#,
        br#"{"x":1,"x":2}"#,
        br#"{"data":{"k":1,"k":2,"a":[1,{"b":null}],"k":3}}"#,
        br#"{"data":{"b":1,"a":2,"c":3,"a":4,"d":5,"e":6,"f":7,"g":8,"h":9,"i":10,"a":11}}"#,
        br#"{"data":null}"#,
        br#"{"data":[]}"#,
        br#"{"data":"x"}"#,
        br#"{"ts":-0}"#,
        br#"{"ts":1.0}"#,
        br#"{"ts":9223372036854775808}"#,
        br#"{"ts":-9223372036854775808}"#,
        br#"{"data":{"z":-0,"big":18446744073709551615,"bigger":18446744073709551616,"neg":-9223372036854775809}}"#,
        br#"{"junk":"\xff\ud800","topic":"vehicle.state"}"#,
        b"{\"junk\":\"\x01\"}",
        b"{\"src\":\"\xff\"}",
        br#"{"junk":1e400}"#,
        br#"{"data":{"f":1e400}}"#,
        br#"{"junk":[1,2,]}"#,
        br#"{"junk":{"a":1,}}"#,
        br#"{"junk":{1:2}}"#,
        br#"{"topic":"vehicle.state"} x"#,
        b"{\"topic\":\"vehicle.state\"}\x0c",
    ] {
        check(payload);
    }
}

#[test]
fn nesting_is_bounded_as_serde_bounds_it() {
    // `data`'s values nest up to serde_json's limit, the envelope counted.
    for depth in [120, 125, 126, 127, 128, 130] {
        let payload = format!(
            r#"{{"data":{{"a":{}1{}}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        check(payload.as_bytes());
    }
    // An unknown key's value is only checked, at any depth.
    let deep = format!(
        r#"{{"junk":{}1{},"topic":"vehicle.state"}}"#,
        "[{\"k\":".repeat(5_000),
        "}]".repeat(5_000)
    );
    check(deep.as_bytes());
    assert!(Event::decode(deep.as_bytes()).is_ok());
}
