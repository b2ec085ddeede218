//! What a `when` read, for people asking why it gave what it gave
//! (docs/when-language.md#what-a-condition-read): every event field,
//! `data` path and `state()` pair the program names, with the value the
//! VM's own accessors find in the same event and state shadow.
//!
//! Never on the hot path: the engine asks for the reads only where an
//! explanation is wanted (a dry run, `rulec simulate --explain`, an emit's
//! reply) or a trace keeps the evaluation; a trace keeps only what
//! [`capture_state`] copies and lists the reads when it is viewed, from
//! the traced event and [`StateValues::Captured`]. The program is walked, not run, so the
//! evaluation itself is untouched; the values come from the same lookups
//! the VM makes (`Machine::field`, `Event::data_at`, the shadow by pair
//! index), so a result and its reads cannot disagree. A value behind a
//! short-circuited `&&`/`||` is listed too: it is what that side would
//! have seen.

use super::{eval_bool, EvalError};
use crate::bundle::StatePair;
use crate::bytecode::{Const, EventField, Op, Program};
use crate::event::Event;
use crate::event_data::DataValue;
use crate::text::cut;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A string read is kept up to this many bytes (traces hold reads under
/// their byte budget); `cut` says when it was longer.
pub const READ_TEXT_MAX: usize = 256;

/// One value a `when` read. JSON: `{"name", "value"?, "kind"?, "cut"?}`;
/// no `value` and no `kind`: absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// As the condition writes it: `to`, `data.level`,
    /// `state("vehicle", "state")`.
    pub name: String,
    /// A string, number, boolean or `null` (a JSON `null` in `data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
    /// `array` or `object`: a `data` value no expression can use (the
    /// evaluation fails on it); its contents are not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The string was longer than [`READ_TEXT_MAX`] bytes and is cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

impl Read {
    fn new(name: String) -> Self {
        Self {
            name,
            value: None,
            kind: None,
            cut: false,
        }
    }

    fn text(name: String, text: &str) -> Self {
        let kept = cut(text, READ_TEXT_MAX);
        Self {
            value: Some(serde_json::Value::from(kept)),
            cut: kept.len() < text.len(),
            ..Self::new(name)
        }
    }

    /// Heap bytes this read holds (for a trace's budget).
    pub fn heap(&self) -> usize {
        let value = match &self.value {
            Some(serde_json::Value::String(text)) => text.len(),
            _ => 0,
        };
        self.name.len() + value + self.kind.as_ref().map_or(0, String::len)
    }
}

impl fmt::Display for Read {
    /// `to = "level-2-triggered"`, `data.level = 2`,
    /// `data.level absent`, `data.list is an array`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match (&self.value, &self.kind) {
            (Some(value), _) => {
                let more = if self.cut { "..." } else { "" };
                write!(f, "{name} = {value}{more}")
            }
            (None, Some(kind)) => {
                let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                };
                write!(f, "{name} is {article} {kind}")
            }
            (None, None) => write!(f, "{name} absent"),
        }
    }
}

/// Where the reads are: the bundle's constants and state pairs, and the
/// `state()` values (the shadow, or what was captured of it).
#[derive(Debug, Clone, Copy)]
pub struct ReadContext<'a> {
    pub consts: &'a [Const],
    pub pairs: &'a [StatePair],
    pub state: StateValues<'a>,
}

/// Where a read finds `state()`'s values.
#[derive(Debug, Clone, Copy)]
pub enum StateValues<'a> {
    /// The shadow, by pair index (`""` while unknown), as the VM reads
    /// it; `present[i]`: pair `i` holds a value (`false` or missing:
    /// absent, the VM reads `""`).
    Shadow {
        values: &'a [String],
        present: &'a [bool],
    },
    /// The values [`capture_state`] kept when the `when` was judged.
    Captured(&'a [Captured]),
}

impl StateValues<'_> {
    /// Pair `index`'s value: `Some(None)` when absent, `None` when it is
    /// not known here (a pair nobody captured).
    fn get(&self, index: usize) -> Option<Option<&str>> {
        match self {
            Self::Shadow { values, present } => {
                if !present.get(index).copied().unwrap_or(false) {
                    return Some(None);
                }
                values.get(index).map(|value| Some(value.as_str()))
            }
            Self::Captured(captured) => captured
                .iter()
                .find(|c| c.pair as usize == index)
                .map(|c| c.value.as_deref()),
        }
    }
}

/// A `state()` value a `when` read, kept when it was judged, so its reads
/// can be listed later from the event and these (a trace's, when viewed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// The pair's index in the bundle's state pairs.
    pub pair: u32,
    /// `None`: absent. Cut at [`READ_TEXT_MAX`] bytes plus one character
    /// (at most 4 bytes), so a value [`Read`] cuts still shows as cut.
    pub value: Option<Box<str>>,
}

/// The `state()` values `program` reads, from the shadow (`values` by
/// pair index, `present` whether each holds one): all a later
/// [`reads`] needs besides the event. Allocates nothing for a program
/// that reads no state.
pub fn capture_state(program: &Program, values: &[String], present: &[bool]) -> Box<[Captured]> {
    let mut captured: Vec<Captured> = Vec::new();
    for op in &program.ops {
        let Op::State(pair) = *op else { continue };
        if captured.iter().any(|c| c.pair == pair) {
            continue;
        }
        let index = pair as usize;
        let value = match values.get(index) {
            Some(value) if present.get(index).copied().unwrap_or(false) => {
                Some(cut(value, READ_TEXT_MAX + 4).into())
            }
            _ => None,
        };
        captured.push(Captured { pair, value });
    }
    captured.into_boxed_slice()
}

/// A `when` evaluated by the bytecode VM, and what it read.
#[derive(Debug, Clone, PartialEq)]
pub struct Explained {
    pub result: Result<bool, EvalError>,
    pub reads: Vec<Read>,
}

/// Evaluates `program` as [`eval_bool`] does, against the shadow
/// (`values` by pair index, `present` whether each holds one), and lists
/// what it read.
pub fn explain(
    program: &Program,
    event: &Event,
    consts: &[Const],
    pairs: &[StatePair],
    (values, present): (&[String], &[bool]),
) -> Explained {
    let context = ReadContext {
        consts,
        pairs,
        state: StateValues::Shadow { values, present },
    };
    Explained {
        result: eval_bool(program, consts, event, values),
        reads: reads(program, event, &context),
    }
}

/// Every value `program` names, in the order it first names it, each
/// once, as found in `event` and the state shadow.
pub fn reads(program: &Program, event: &Event, context: &ReadContext<'_>) -> Vec<Read> {
    let mut seen: Vec<Op> = Vec::new();
    let mut out = Vec::new();
    for op in &program.ops {
        if !matches!(op, Op::Field(_) | Op::Data(_) | Op::State(_)) || seen.contains(op) {
            continue;
        }
        seen.push(*op);
        let read = match *op {
            Op::Field(field) => field_read(field, event),
            Op::Data(index) => match context.consts.get(index as usize) {
                Some(Const::Path(path)) => data_read(path, event),
                // A malformed program: the evaluation says so itself.
                _ => continue,
            },
            Op::State(index) => match state_read(index as usize, context) {
                Some(read) => read,
                None => continue,
            },
            _ => continue,
        };
        out.push(read);
    }
    out
}

fn field_read(field: EventField, event: &Event) -> Read {
    let (name, value) = match field {
        EventField::Topic => ("topic", Some(event.topic.as_str())),
        EventField::Src => ("src", event.src.as_deref()),
        EventField::From => ("from", event.from.as_deref()),
        EventField::To => ("to", event.to.as_deref()),
    };
    match value {
        Some(text) => Read::text(name.to_string(), text),
        None => Read::new(name.to_string()),
    }
}

fn data_read(path: &[String], event: &Event) -> Read {
    let name = format!("data.{}", path.join("."));
    match event.data_at(path.iter().map(String::as_str)) {
        None => Read::new(name),
        Some(DataValue::Str(text)) => Read::text(name, text),
        Some(DataValue::Array(_)) => Read {
            kind: Some("array".to_string()),
            ..Read::new(name)
        },
        Some(DataValue::Object(_)) => Read {
            kind: Some("object".to_string()),
            ..Read::new(name)
        },
        Some(scalar) => Read {
            value: Some(scalar_json(scalar)),
            ..Read::new(name)
        },
    }
}

fn scalar_json(value: &DataValue) -> serde_json::Value {
    match value {
        DataValue::Bool(b) => serde_json::Value::Bool(*b),
        DataValue::Int(i) => serde_json::Value::from(*i),
        DataValue::UInt(u) => serde_json::Value::from(*u),
        // Floats in `data` came from JSON: finite, so never `null` here.
        DataValue::Float(f) => serde_json::Value::from(*f),
        DataValue::Str(text) => serde_json::Value::from(&**text),
        DataValue::Null | DataValue::Array(_) | DataValue::Object(_) => serde_json::Value::Null,
    }
}

fn state_read(index: usize, context: &ReadContext<'_>) -> Option<Read> {
    let pair = context.pairs.get(index)?;
    let quoted = |text: &str| serde_json::Value::from(text).to_string();
    let name = format!("state({}, {})", quoted(&pair.hash), quoted(&pair.field));
    match context.state.get(index)? {
        None => Some(Read::new(name)),
        Some(value) => Some(Read::text(name, value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytecode::Op;

    fn pairs() -> Vec<StatePair> {
        vec![
            StatePair {
                hash: "vehicle".into(),
                field: "state".into(),
            },
            StatePair {
                hash: "battery:0".into(),
                field: "charge".into(),
            },
        ]
    }

    fn event(json: &str) -> Event {
        serde_json::from_str(json).unwrap()
    }

    fn texts(reads: &[Read]) -> Vec<String> {
        reads.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn reads_name_each_value_once_in_program_order() {
        // to == "level-2-triggered" && data.level >= 2 && state(vehicle, state) == "parked" && to != ""
        let consts = vec![
            Const::Str("level-2-triggered".into()),
            Const::Path(vec!["level".into()]),
            Const::Int(2),
            Const::Str("parked".into()),
            Const::Str(String::new()),
        ];
        let program = Program {
            ops: vec![
                Op::Field(EventField::To),
                Op::Const(0),
                Op::Eq,
                Op::AndJump(15),
                Op::Data(1),
                Op::Const(2),
                Op::Ge,
                Op::AndJump(15),
                Op::State(0),
                Op::Const(3),
                Op::Eq,
                Op::AndJump(15),
                Op::Field(EventField::To),
                Op::Const(4),
                Op::Ne,
            ],
        };
        let pairs = pairs();
        let state = vec!["parked".to_string(), String::new()];
        let e = event(r#"{"topic":"alarm.triggered","to":"level-2-triggered","data":{"level":2}}"#);
        let explained = explain(&program, &e, &consts, &pairs, (&state, &[true, false]));
        assert_eq!(explained.result, Ok(true));
        assert_eq!(
            texts(&explained.reads),
            [
                r#"to = "level-2-triggered""#,
                "data.level = 2",
                r#"state("vehicle", "state") = "parked""#,
            ]
        );
        // Absent values say so; the VM read `""` and an empty value.
        let absent = event(r#"{"topic":"alarm.triggered"}"#);
        let explained = explain(&program, &absent, &consts, &pairs, (&state, &[]));
        assert_eq!(explained.result, Ok(false));
        assert_eq!(
            texts(&explained.reads),
            [
                "to absent",
                "data.level absent",
                r#"state("vehicle", "state") absent"#
            ]
        );
    }

    #[test]
    fn non_scalars_nulls_and_long_strings() {
        let consts = vec![
            Const::Path(vec!["list".into()]),
            Const::Path(vec!["gone".into()]),
            Const::Path(vec!["name".into()]),
            Const::Path(vec!["a".into(), "b".into()]),
        ];
        let program = Program {
            ops: vec![Op::Data(0), Op::Data(1), Op::Data(2), Op::Data(3)],
        };
        let long = "x".repeat(READ_TEXT_MAX + 10);
        let e = event(&format!(
            r#"{{"topic":"t","data":{{"list":[1],"gone":null,"name":"{long}","a":{{"b":1.5}}}}}}"#
        ));
        let context = ReadContext {
            consts: &consts,
            pairs: &[],
            state: StateValues::Shadow {
                values: &[],
                present: &[],
            },
        };
        let reads = reads(&program, &e, &context);
        let text = texts(&reads);
        assert_eq!(text[0], "data.list is an array");
        assert_eq!(text[1], "data.gone = null");
        assert!(reads[2].cut && text[2].ends_with("x\"..."));
        assert_eq!(text[3], "data.a.b = 1.5");
        // The JSON form: no `value` is absent.
        let json = serde_json::to_value(&reads[0]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"name": "data.list", "kind": "array"})
        );
        let back: Read = serde_json::from_value(json).unwrap();
        assert_eq!(back, reads[0]);
    }

    #[test]
    fn captured_state_lists_as_the_shadow_did() {
        // state("vehicle", "state") == "parked" || state("battery:0", "charge") == "x"
        let consts = vec![Const::Str("parked".into()), Const::Str("x".into())];
        let program = Program {
            ops: vec![
                Op::State(0),
                Op::Const(0),
                Op::Eq,
                Op::OrJump(7),
                Op::State(1),
                Op::Const(1),
                Op::Eq,
                Op::State(0),
            ],
        };
        let pairs = pairs();
        let long = "é".repeat(READ_TEXT_MAX);
        let values = vec![long.clone(), "50".to_string()];
        let shadow = ReadContext {
            consts: &consts,
            pairs: &pairs,
            state: StateValues::Shadow {
                values: &values,
                present: &[true, false],
            },
        };
        let e = event(r#"{"topic":"t"}"#);
        let captured = capture_state(&program, &values, &[true, false]);
        // Each pair once; the absent one kept as absent; the long one cut
        // to a few bytes past what a read keeps.
        assert_eq!(captured.len(), 2);
        assert_eq!(
            captured[1],
            Captured {
                pair: 1,
                value: None
            }
        );
        assert!(captured[0]
            .value
            .as_ref()
            .is_some_and(|v| v.len() <= READ_TEXT_MAX + 4));
        let later = ReadContext {
            state: StateValues::Captured(&captured),
            ..shadow
        };
        let (now, then) = (reads(&program, &e, &shadow), reads(&program, &e, &later));
        assert_eq!(now, then);
        assert!(then[0].cut && then[1].value.is_none());
        // A program without `state()` captures nothing (and allocates nothing).
        let bare = Program {
            ops: vec![Op::Const(0)],
        };
        assert!(capture_state(&bare, &values, &[true, true]).is_empty());
    }
}
