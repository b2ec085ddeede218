//! `rulec schema`: the JSON Schema of the rule file format (docs/rules.md),
//! for editors (e.g. Taplo / Even Better TOML). Written by hand so that
//! every key carries the same description and constraints as docs/README.md.

use crate::cli::{Console, Exit};
use crate::keys::{self, ActionKind, DefaultValue, Key, Level, Sign, Ty};
use serde_json::{json, Map, Value};
use std::io;

#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Example:
  rulec schema > rules.schema.json
  rulec schema --timeline > timeline.schema.json
  # then in a rule file, for Taplo / Even Better TOML:
  #:schema ./rules.schema.json")]
pub struct SchemaArgs {
    /// The schema of timeline and test files (docs/simulation.md) instead
    /// of rule files.
    #[arg(long)]
    pub timeline: bool,
}

/// Prints the schema to stdout.
pub fn run(args: &SchemaArgs, console: &mut Console<'_>) -> io::Result<Exit> {
    let schema = if args.timeline {
        timeline_schema()
    } else {
        schema()
    };
    let text = serde_json::to_string_pretty(&schema).map_err(io::Error::other)?;
    writeln!(console.out, "{text}")?;
    Ok(Exit::Success)
}

/// The JSON Schema of a timeline or test file (docs/simulation.md,
/// docs/rulec.md#rulec-test), from the simulator's own table of keys and
/// the expectations' fields.
pub fn timeline_schema() -> serde_json::Value {
    use ruled_engine::sim::{TimelineTy, TIMELINE_KINDS, TIMELINE_SETTINGS};
    use serde_json::{json, Map, Value};
    let of = |ty: TimelineTy| match ty {
        TimelineTy::Duration => json!({ "type": "string", "pattern": DURATION_PATTERN }),
        TimelineTy::Text => json!({ "type": "string" }),
        TimelineTy::Count => json!({ "type": "integer", "minimum": 0, "maximum": u32::MAX }),
        TimelineTy::Table => json!({ "type": "object" }),
        TimelineTy::Bool => json!({ "type": "boolean" }),
    };
    let mut properties = Map::new();
    for (key, ty) in TIMELINE_SETTINGS {
        properties.insert((*key).to_string(), of(*ty));
    }
    for (kind, keys) in TIMELINE_KINDS {
        let entry: Map<String, Value> = keys
            .iter()
            .map(|(key, ty, _)| ((*key).to_string(), of(*ty)))
            .collect();
        let required: Vec<&str> = keys
            .iter()
            .filter(|(_, _, required)| *required)
            .map(|(key, _, _)| *key)
            .collect();
        properties.insert(
            (*kind).to_string(),
            json!({
                "type": "array",
                "description": format!("[[{kind}]] entries (docs/simulation.md#entries)"),
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": required,
                    "properties": entry,
                }
            }),
        );
    }
    for (kind, none) in [("expect", false), ("expect-none", true)] {
        let duration = json!({ "type": "string", "pattern": DURATION_PATTERN });
        let mut keys = Map::new();
        keys.insert("kind".into(), json!({ "type": "string" }));
        keys.insert("at".into(), duration.clone());
        keys.insert(
            "between".into(),
            json!({ "type": "array", "items": duration, "minItems": 2, "maxItems": 2 }),
        );
        if !none {
            keys.insert("count".into(), json!({ "type": "integer", "minimum": 0 }));
        }
        for field in crate::rule_test::EXPECTATION_FIELDS {
            keys.insert(
                (*field).to_string(),
                json!({ "type": ["string", "integer", "boolean"] }),
            );
        }
        properties.insert(
            kind.to_string(),
            json!({
                "type": "array",
                "description": format!("[[{kind}]] expectations (docs/rulec.md#rulec-test)"),
                "items": { "type": "object", "additionalProperties": false, "properties": keys }
            }),
        );
    }
    json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "rulec timeline or test file",
        "type": "object",
        "additionalProperties": false,
        "properties": properties,
    })
}

/// Go duration syntax (docs/rules.md#durations), as a regular expression: an optional
/// sign, then number+unit pairs, or a bare `0`.
const DURATION_PATTERN: &str = r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";

/// A duration that is zero however it is written (`0`, `-0s`, `0.0m0s`).
const ZERO_DURATION_PATTERN: &str = r"^[-+]?(0|((0+(\.0*)?|\.0+)(ns|us|µs|μs|ms|s|m|h))+)$";

/// A negative duration: a leading `-` on anything that is not zero.
const NEGATIVE_DURATION: &str = r"^-";

/// CAN `data` as [`crate::validate::can::parse_can_data`] accepts it: up to
/// 8 bytes, contiguous or as two-digit groups separated by white space.
const CAN_DATA_PATTERN: &str =
    r"^\s*(([0-9a-fA-F]{2}){0,8}|[0-9a-fA-F]{2}(\s+[0-9a-fA-F]{2}){1,7})\s*$";

/// The JSON Schema (draft-07, what editors' TOML plugins such as Taplo
/// understand) of one rule file: each level's properties, their types,
/// descriptions and defaults come from the key table ([`crate::keys`]);
/// what holds between keys is written here.
pub fn schema() -> Value {
    let mut document = object(Level::Top);
    let extra = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://example.invalid/scooter-rules/rules.schema.json",
        "title": "scooter rule file",
        "description": "A file of `[[rule]]` tables for rulec / ruled (docs/rules.md describes every key, docs/diagnostics.md every check).",
    });
    merge(&mut document, extra);
    document
}

/// The object of the keys of `level`, with the constraints between them.
fn object(level: Level) -> Value {
    let properties: Map<String, Value> = keys::keys(level)
        .map(|key| (key.name.to_string(), property(key)))
        .collect();
    let required: Vec<&str> = keys::keys(level)
        .filter(|key| key.required && key.actions.is_empty())
        .map(|key| key.name)
        .collect();
    let mut object = json!({
        "type": "object",
        "additionalProperties": false,
        "properties": properties,
    });
    if !required.is_empty() {
        object["required"] = json!(required);
    }
    match level {
        Level::Step => object["allOf"] = step_constraints(),
        Level::Rule => merge(&mut object, rule_constraints()),
        Level::Repeat => merge(&mut object, repeat_constraints()),
        Level::Input => merge(&mut object, input_constraints()),
        Level::Top | Level::Topic | Level::Guard | Level::Limit | Level::Trip => {}
    }
    object
}

/// One key's schema: its type's constraints, its doc and its default.
fn property(key: &Key) -> Value {
    let mut value = match key.ty {
        Ty::Tables { level, non_empty } => {
            let mut tables = json!({ "type": "array", "items": object(level) });
            if non_empty {
                tables["minItems"] = json!(1);
            }
            tables
        }
        Ty::Table(level) => object(level),
        Ty::Finally => {
            // A step, never durable (docs/rules.md#finally): `rulec check`
            // reports `rulec::finally-durable`.
            let mut step = object(Level::Step);
            step["not"] = json!({ "required": ["durable"] });
            json!({ "type": "array", "items": step })
        }
        Ty::Text => json!({ "type": "string", "minLength": 1 }),
        Ty::Patterns { non_empty } => {
            let patterns = patterns(key.doc);
            // The description stays with the array it describes.
            return if non_empty {
                json!({ "minItems": 1, "allOf": [patterns] })
            } else {
                patterns
            };
        }
        Ty::When => when(),
        Ty::Choice(values) => json!({ "enum": values }),
        Ty::Duration(sign) => duration(sign),
        Ty::Bool => json!({ "type": "boolean" }),
        Ty::Integer { min, max } => json!({ "type": "integer", "minimum": min, "maximum": max }),
        Ty::Command => {
            json!({ "type": "string", "minLength": 1, "pattern": "^[^\\s\\u0000]+$" })
        }
        Ty::CanIface => json!({
            "type": "string", "minLength": 1, "maxLength": 15, "pattern": "^[^\\s/\\u0000]+$"
        }),
        // What a CAN id must be is in the `do = "can"` constraint.
        Ty::StepId => json!({ "type": ["string", "integer"], "minLength": 1 }),
        Ty::AnyText => json!({ "type": "string" }),
        Ty::TimesOfDay => json!({
            "type": "array",
            "minItems": 1,
            "items": { "type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$" }
        }),
        Ty::CanData => json!({ "type": "string", "pattern": CAN_DATA_PATTERN }),
        Ty::Names { non_empty } => json!({
            "type": "array",
            "items": input_name(),
            "minItems": u8::from(non_empty),
            "maxItems": rulecore::limits::MAX_INPUT_FIELDS,
        }),
        Ty::Name => input_name(),
        Ty::TripOrFalse => json!({ "oneOf": [object(Level::Trip), { "const": false }] }),
        Ty::ValuePatterns => json!({
            "type": "array",
            "minItems": 1,
            "items": { "type": "string", "minLength": 1 }
        }),
        Ty::DataTypes => json!({
            "type": "object",
            "additionalProperties": { "enum": keys::DATA_TYPES },
        }),
    };
    value["description"] = match key.ty {
        // The schema counts characters where `rulec check` counts bytes.
        Ty::CanIface => json!(format!(
            "{} maxLength counts characters (JSON Schema cannot count bytes), so a name with \
             non-ASCII letters may pass here and still be too long for `rulec check`.",
            key.doc
        )),
        _ => json!(key.doc),
    };
    match key.default {
        Some(DefaultValue::Str(text)) => value["default"] = json!(text),
        Some(DefaultValue::Bool(flag)) => value["default"] = json!(flag),
        Some(DefaultValue::Prose(_)) | None => {}
    }
    value
}

/// A duration of `sign`: zero is allowed for `NotNegative` (`cooldown`,
/// `after`, docs/rules.md#rule-keys, docs/rules.md#step-keys), not for `Positive` (`debounce`, exec
/// `timeout`).
fn duration(sign: Sign) -> Value {
    let mut value = json!({
        "type": "string",
        "pattern": DURATION_PATTERN,
        "examples": ["30s", "300ms", "1.5h", "2h45m"],
    });
    match sign {
        Sign::Any => {}
        Sign::NotNegative => {
            value["not"] = json!({ "pattern": NEGATIVE_DURATION, "not": { "pattern": ZERO_DURATION_PATTERN } });
        }
        Sign::Positive => {
            value["not"] = json!({ "anyOf": [{ "pattern": NEGATIVE_DURATION }, { "pattern": ZERO_DURATION_PATTERN }] });
        }
    }
    value
}

/// A hash, channel or field name of an input (docs/rules.md#inputs): no
/// white space, control or glob characters, at most 128 bytes.
fn input_name() -> Value {
    json!({
        "type": "string",
        "minLength": 1,
        "maxLength": rulecore::limits::MAX_INPUT_NAME_BYTES,
        "pattern": "^[^\\s\\u0000-\\u001f\\u007f*?\\[\\]\\\\]+$",
    })
}

/// An input is a hash with `fields`, or a channel with a `topic`
/// (docs/rules.md#inputs).
fn input_constraints() -> Value {
    json!({
        "anyOf": [
            { "required": ["hash", "fields"], "not": { "anyOf": [
                { "required": ["channel"] }, { "required": ["format"] }, { "required": ["max-bytes"] }
            ] } },
            { "required": ["channel", "topic"], "not": { "anyOf": [
                { "required": ["hash"] }, { "required": ["fields"] }
            ] } },
        ],
        "allOf": [{ "properties": { "topic": { "pattern": "^input\\.\\S+$" } } }],
    })
}

fn patterns(description: &str) -> Value {
    json!({
        "type": "array",
        "items": {
            "type": "string",
            "minLength": 1,
            "description": "A topic (`alarm.triggered`), a prefix (`button.*`) or `*` for every topic."
        },
        "description": description,
    })
}

fn when() -> Value {
    json!({
        "type": "string",
        "minLength": 1,
        // `rulec::when::empty`: white space alone is no expression.
        "pattern": "\\S",
        "examples": ["to == \"parked\" && state(\"vehicle\", \"kickstand\") == \"down\""],
    })
}

/// What the checker requires per action kind (from the key table) and
/// between keys (docs/rules.md#step-keys, docs/rules.md#the-can-action), so that an editor flags it while
/// typing.
fn step_constraints() -> Value {
    let mut constraints: Vec<Value> = ActionKind::ALL
        .into_iter()
        .map(|kind| {
            let required: Vec<&str> = keys::keys(Level::Step)
                .filter(|key| key.required_on(kind))
                .map(|key| key.name)
                .collect();
            let mut then = json!({ "required": required });
            if kind == ActionKind::Can {
                then["properties"] = json!({ "id": can_id() });
            }
            json!({
                "if": { "properties": { "do": { "const": kind.as_str() } }, "required": ["do"] },
                "then": then,
            })
        })
        .collect();
    let zero = json!({ "pattern": ZERO_DURATION_PATTERN });
    constraints.extend([
        json!({ "if": { "required": ["durable"] }, "then": { "required": ["after"], "properties": { "after": { "not": zero } } } }),
        json!({ "if": { "required": ["dlc"] }, "then": { "required": ["rtr"], "properties": { "rtr": { "const": true } } } }),
        json!({ "if": { "required": ["rtr"], "properties": { "rtr": { "const": true } } }, "then": { "not": { "required": ["data"] } } }),
    ]);
    Value::Array(constraints)
}

/// A CAN frame id (docs/rules.md#the-can-action).
fn can_id() -> Value {
    json!({
        "type": ["string", "integer"],
        // at most 0x1FFFFFFF: up to 7 hex digits, or 8 starting with `1`
        "pattern": "^(0[xX])?0*1?[0-9a-fA-F]{1,7}$",
        "minimum": 0,
        "maximum": 0x1FFF_FFFF_u32,
    })
}

/// A rule is triggered by `on`, by a schedule (`at`, `every`), or both
/// (docs/rules.md#schedules): one of the three is required.
fn rule_constraints() -> Value {
    json!({
        "anyOf": [
            { "required": ["on"] },
            { "required": ["at"] },
            { "required": ["every"] },
        ],
    })
}

/// Once `count` > 1, exactly one of `every` (positive) and `period` is
/// required (docs/rules.md#rule-keys).
fn repeat_constraints() -> Value {
    let doc = |name| keys::find(Level::Repeat, name).map_or("", |key| key.doc);
    let mut every = duration(Sign::Positive);
    every["description"] = json!(doc("every"));
    let mut period = duration(Sign::Positive);
    period["description"] = json!(doc("period"));
    json!({
        "not": { "required": ["every", "period"] },
        "if": { "required": ["count"], "properties": { "count": { "minimum": 2 } } },
        "then": {
            "anyOf": [
                { "required": ["every"], "properties": { "every": every } },
                { "required": ["period"], "properties": { "period": period } },
            ],
        },
    })
}

/// Adds the keys of the object `extra` to the object `value`.
fn merge(value: &mut Value, extra: Value) {
    if let (Value::Object(target), Value::Object(extra)) = (value, extra) {
        target.extend(extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of(value: &Value) -> Vec<String> {
        let mut keys: Vec<String> = value["properties"]
            .as_object()
            .map(|map| map.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    }

    fn sorted(level: Level) -> Vec<String> {
        let mut keys: Vec<String> = keys::names(level).iter().map(|k| k.to_string()).collect();
        keys.sort();
        keys
    }

    #[test]
    fn keys_match_the_key_table() {
        let schema = schema();
        assert_eq!(keys_of(&schema), sorted(Level::Top));
        let rule = &schema["properties"]["rule"]["items"];
        assert_eq!(keys_of(rule), sorted(Level::Rule));
        assert_eq!(
            keys_of(&rule["properties"]["step"]["items"]),
            sorted(Level::Step)
        );
        assert_eq!(
            keys_of(&rule["properties"]["repeat"]),
            sorted(Level::Repeat)
        );
        let finally = &rule["properties"]["finally"]["items"];
        assert_eq!(keys_of(finally), sorted(Level::Step));
        assert_eq!(finally["not"], json!({ "required": ["durable"] }));
    }
}
