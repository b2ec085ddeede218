//! `rulec schema`: the JSON Schema of the rule file format (DESIGN.md 3),
//! for editors (e.g. Taplo / Even Better TOML). Written by hand so that
//! every key carries the same description and constraints as DESIGN.md.

use crate::cli::{Console, Exit};
use serde_json::{json, Value};
use std::io;

#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Example:
  rulec schema > rules.schema.json
  # then in a rule file, for Taplo / Even Better TOML:
  #:schema ./rules.schema.json")]
pub struct SchemaArgs {}

/// Prints the schema to stdout.
pub fn run(_args: &SchemaArgs, console: &mut Console<'_>) -> io::Result<Exit> {
    let text = serde_json::to_string_pretty(&schema()).map_err(io::Error::other)?;
    writeln!(console.out, "{text}")?;
    Ok(Exit::Success)
}

/// Go duration syntax (DESIGN.md 3.7), as a regular expression: an optional
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
/// understand) of one rule file. Key lists match [`crate::rulefile`]; a
/// test keeps them in step.
pub fn schema() -> Value {
    let duration = |description: &str| {
        json!({
            "type": "string",
            "pattern": DURATION_PATTERN,
            "description": description,
            "examples": ["30s", "300ms", "1.5h", "2h45m"],
        })
    };
    // `cooldown`, `after`: zero is allowed, negative is not (DESIGN.md 3.1, 3.2).
    let not_negative = |description: &str| {
        let mut value = duration(description);
        value["not"] =
            json!({ "pattern": NEGATIVE_DURATION, "not": { "pattern": ZERO_DURATION_PATTERN } });
        value
    };
    // `debounce`, exec `timeout`, `repeat.every` once count > 1: must be positive.
    let positive = |description: &str| {
        let mut value = duration(description);
        value["not"] = json!({ "anyOf": [{ "pattern": NEGATIVE_DURATION }, { "pattern": ZERO_DURATION_PATTERN }] });
        value
    };
    let zero = json!({ "pattern": ZERO_DURATION_PATTERN });
    let patterns = |description: &str| {
        json!({
            "type": "array",
            "items": {
                "type": "string",
                "minLength": 1,
                "description": "A topic (`alarm.triggered`), a prefix (`button.*`) or `*` for every topic."
            },
            "description": description,
        })
    };
    let when = |description: &str| {
        json!({
            "type": "string",
            "minLength": 1,
            // `rulec::when::empty`: white space alone is no expression.
            "pattern": "\\S",
            "description": description,
            "examples": ["to == \"parked\" && state(\"vehicle\", \"kickstand\") == \"down\""],
        })
    };
    let step = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["do"],
        "properties": {
            "do": {
                "enum": ["redis", "exec", "can"],
                "description": "The action: `redis` (LPUSH list push), `exec` (run a program), `can` (send one CAN frame)."
            },
            "when": when("Checked just before the step is submitted; false ends the run. Absent: always run once reached."),
            "after": not_negative("Delay after the previous step finished (or after the run started, for the first step). Default 0."),
            "durable": {
                "type": "boolean",
                "description": "Whether the delayed step survives a restart. Default: true when `after` > 0; only allowed when `after` > 0."
            },
            "list": { "type": "string", "minLength": 1, "description": "redis: the list to LPUSH to, e.g. `scooter:blinker`." },
            "push": { "type": "string", "minLength": 1, "description": "redis: the value to LPUSH, e.g. `both`." },
            "command": { "type": "string", "minLength": 1, "pattern": "^[^\\s\\u0000]+$", "description": "exec: an executable name or path; no arguments, no shell." },
            "timeout": positive("exec: kill the command after this long. Default 10s; must be positive."),
            "iface": { "type": "string", "minLength": 1, "maxLength": 15, "pattern": "^[^\\s/\\u0000]+$", "description": "can: the SocketCAN interface, e.g. `can0`: 1 to 15 bytes, no white space, `/` or NUL. maxLength counts characters (JSON Schema cannot count bytes), so a name with non-ASCII letters may pass here and still be too long for `rulec check`." },
            "id": {
                "type": ["string", "integer"],
                // at most 0x1FFFFFFF: up to 7 hex digits, or 8 starting with `1`
                "pattern": "^(0[xX])?0*1?[0-9a-fA-F]{1,7}$",
                "minimum": 0,
                "maximum": 0x1FFF_FFFF_u32,
                "description": "can: the frame id in hex (`\"0x123\"`), at most 0x1FFFFFFF; above 0x7FF the frame is extended."
            },
            "data": { "type": "string", "pattern": CAN_DATA_PATTERN, "description": "can: hex bytes, contiguous (`\"DEADBEEF\"`) or space-separated (`\"DE AD BE EF\"`), at most 8. Not with `rtr`." },
            "rtr": { "type": "boolean", "description": "can: send a remote frame (no data). Default false." },
            "dlc": { "type": "integer", "minimum": 0, "maximum": 8, "description": "can: the length a remote frame requests; only with `rtr = true`." }
        },
        // What the checker requires per action kind and between keys
        // (DESIGN.md 3.2, 3.6), so that an editor flags it while typing.
        "allOf": [
            { "if": { "properties": { "do": { "const": "redis" } }, "required": ["do"] }, "then": { "required": ["list", "push"] } },
            { "if": { "properties": { "do": { "const": "exec" } }, "required": ["do"] }, "then": { "required": ["command"] } },
            { "if": { "properties": { "do": { "const": "can" } }, "required": ["do"] }, "then": { "required": ["iface", "id"] } },
            { "if": { "required": ["durable"] }, "then": { "required": ["after"], "properties": { "after": { "not": zero } } } },
            { "if": { "required": ["dlc"] }, "then": { "required": ["rtr"], "properties": { "rtr": { "const": true } } } },
            { "if": { "required": ["rtr"], "properties": { "rtr": { "const": true } } }, "then": { "not": { "required": ["data"] } } }
        ]
    });
    json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://example.invalid/scooter-rules/rules.schema.json",
        "title": "scooter rule file",
        "description": "A file of `[[rule]]` tables for rulec / ruled (docs/diagnostics.md lists every key and check).",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "rule": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["name", "on", "step"],
                    "properties": {
                        "name": { "type": "string", "minLength": 1, "description": "Unique among the enabled rules of all files." },
                        "on": { "minItems": 1, "allOf": [patterns("Topic patterns that trigger the rule.")] },
                        "when": when("Condition on the triggering event and state(); absent: fire on every matching event."),
                        "concurrency": {
                            "enum": ["restart", "drop", "queue"],
                            "default": "restart",
                            "description": "What a trigger does while a run is live: restart it, drop the trigger, or queue it (at most 8)."
                        },
                        "cancel-on": patterns("Topic patterns that cancel the rule's live runs and backlog."),
                        "cooldown": not_negative("Ignore triggers for this long after the rule fired. Zero or absent: none."),
                        "debounce": positive("Wait for this long without a newer match, then fire with the latest event. Must be positive."),
                        "repeat": {
                            "type": "object",
                            "additionalProperties": false,
                            "required": ["count"],
                            "properties": {
                                "count": { "type": "integer", "minimum": 1, "maximum": u32::MAX, "description": "Passes in all." },
                                "every": duration("Pause between passes; required and positive when count > 1.")
                            },
                            "if": { "required": ["count"], "properties": { "count": { "minimum": 2 } } },
                            "then": {
                                "required": ["every"],
                                "properties": { "every": positive("Pause between passes; required and positive when count > 1.") }
                            }
                        },
                        "enabled": { "type": "boolean", "default": true, "description": "false: not matched, but compiled as replay-only." },
                        "step": { "type": "array", "minItems": 1, "items": step }
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rulefile::{REPEAT_KEYS, RULE_KEYS, STEP_KEYS};

    fn keys(value: &Value) -> Vec<String> {
        let mut keys: Vec<String> = value["properties"]
            .as_object()
            .map(|map| map.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    }

    fn sorted(keys: &[&str]) -> Vec<String> {
        let mut keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        keys.sort();
        keys
    }

    #[test]
    fn keys_match_the_validator() {
        let schema = schema();
        let rule = &schema["properties"]["rule"]["items"];
        assert_eq!(keys(rule), sorted(RULE_KEYS));
        assert_eq!(
            keys(&rule["properties"]["step"]["items"]),
            sorted(STEP_KEYS)
        );
        assert_eq!(keys(&rule["properties"]["repeat"]), sorted(REPEAT_KEYS));
    }
}
