//! `rulec schema` prints one JSON Schema document on stdout, and that
//! schema agrees with `rulec check`: every fixture the checker accepts
//! validates, and every fixture with a mistake the schema can express (a
//! missing key per action, a negative duration, bad CAN data, ...) is
//! rejected, so an editor flags it while the author types.

#![allow(clippy::unwrap_used, clippy::panic)] // test helpers outside #[test] functions

use regex_automata::meta::Regex;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn schema() -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_rulec"))
        .arg("schema")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(output.stderr.is_empty());
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn schema_is_json_on_stdout() {
    let schema = schema();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    let rule = &schema["properties"]["rule"]["items"];
    assert_eq!(rule["required"], json!(["name", "step"]));
    assert_eq!(
        rule["properties"]["concurrency"]["enum"],
        json!(["restart", "drop", "queue"])
    );
    // `rulec check` counts the interface name in bytes; the schema can only
    // count characters, and says so.
    let step = &rule["properties"]["step"]["items"]["properties"];
    let iface = &step["iface"];
    assert_eq!(iface["maxLength"], 15);
    let description = iface["description"].as_str().unwrap();
    assert!(
        description.contains("15 bytes") && description.contains("counts characters"),
        "{description}"
    );
}

/// A validator for the part of JSON Schema draft-07 that `rulec schema`
/// uses. A keyword it does not know fails the test, so the schema cannot
/// grow a constraint this test silently skips.
fn errors(schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    let Some(keywords) = schema.as_object() else {
        panic!("schema at {at} is not an object");
    };
    for (keyword, arg) in keywords {
        let ok = match keyword.as_str() {
            "$schema" | "$id" | "title" | "description" | "examples" | "default" => true,
            "type" => {
                let types: Vec<&str> = match arg {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap()).collect(),
                    _ => panic!("type at {at}"),
                };
                types.iter().any(|t| match *t {
                    "object" => value.is_object(),
                    "array" => value.is_array(),
                    "string" => value.is_string(),
                    "boolean" => value.is_boolean(),
                    "integer" => value.is_i64() || value.is_u64(),
                    other => panic!("type {other} at {at}"),
                })
            }
            "properties" => {
                if let Some(object) = value.as_object() {
                    for (key, sub) in arg.as_object().unwrap() {
                        if let Some(v) = object.get(key) {
                            errors(sub, v, &format!("{at}/{key}"), out);
                        }
                    }
                }
                true
            }
            "additionalProperties" if arg == &json!(false) => {
                let known = schema["properties"].as_object().unwrap();
                value
                    .as_object()
                    .is_none_or(|o| o.keys().all(|k| known.contains_key(k)))
            }
            // A schema for every key (a topic's `data` types).
            "additionalProperties" => {
                assert!(schema.get("properties").is_none(), "at {at}");
                if let Some(object) = value.as_object() {
                    for (key, v) in object {
                        errors(arg, v, &format!("{at}/{key}"), out);
                    }
                }
                true
            }
            "required" => value.as_object().is_none_or(|o| {
                arg.as_array()
                    .unwrap()
                    .iter()
                    .all(|k| o.contains_key(k.as_str().unwrap()))
            }),
            "items" => {
                if let Some(items) = value.as_array() {
                    for (i, item) in items.iter().enumerate() {
                        errors(arg, item, &format!("{at}/{i}"), out);
                    }
                }
                true
            }
            "minItems" => value
                .as_array()
                .is_none_or(|a| a.len() as u64 >= arg.as_u64().unwrap()),
            "maxItems" => value
                .as_array()
                .is_none_or(|a| a.len() as u64 <= arg.as_u64().unwrap()),
            "minLength" => value
                .as_str()
                .is_none_or(|s| s.chars().count() as u64 >= arg.as_u64().unwrap()),
            "maxLength" => value
                .as_str()
                .is_none_or(|s| s.chars().count() as u64 <= arg.as_u64().unwrap()),
            "pattern" => value.as_str().is_none_or(|s| {
                // JSON Schema patterns are unanchored searches.
                Regex::new(arg.as_str().unwrap()).unwrap().is_match(s)
            }),
            "minimum" => value
                .as_i64()
                .is_none_or(|n| n as f64 >= arg.as_f64().unwrap()),
            "maximum" => match (value.as_i64(), value.as_u64()) {
                (_, Some(n)) => n as f64 <= arg.as_f64().unwrap(),
                (Some(n), None) => n as f64 <= arg.as_f64().unwrap(),
                _ => true,
            },
            "enum" => arg.as_array().unwrap().contains(value),
            "const" => arg == value,
            "allOf" => {
                for sub in arg.as_array().unwrap() {
                    errors(sub, value, at, out);
                }
                true
            }
            "anyOf" => arg.as_array().unwrap().iter().any(|sub| valid(sub, value)),
            "not" => !valid(arg, value),
            "if" => {
                let branch = if valid(arg, value) { "then" } else { "else" };
                if let Some(sub) = keywords.get(branch) {
                    errors(sub, value, at, out);
                }
                true
            }
            "then" | "else" => true,
            other => panic!("keyword {other} at {at} is not known to this test's validator"),
        };
        if !ok {
            out.push(format!("{at}: {keyword} {arg}"));
        }
    }
}

fn valid(schema: &Value, value: &Value) -> bool {
    let mut out = Vec::new();
    errors(schema, value, "", &mut out);
    out.is_empty()
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The file as JSON, or `None` when it is not TOML at all (those cases are
/// for the TOML parser, not the schema).
fn as_json(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    let table: toml::Table = toml::from_str(&text).ok()?;
    Some(serde_json::to_value(table).unwrap())
}

#[test]
fn every_valid_fixture_validates() {
    let schema = schema();
    let mut checked = 0;
    for dir in [
        "rules",
        "rules-changed",
        "rules-winter",
        "rules-parked",
        "rules-why",
    ] {
        for path in toml_files(&fixtures().join(dir)) {
            let mut out = Vec::new();
            errors(&schema, &as_json(&path).unwrap(), "", &mut out);
            assert!(out.is_empty(), "{}: {out:?}", path.display());
            checked += 1;
        }
    }
    assert!(checked >= 5, "{checked}");
}

/// Checker codes for mistakes a JSON Schema can see in the file's
/// structure alone.
const EXPRESSIBLE: &[&str] = &[
    "rulec::type",
    "rulec::missing-key",
    "rulec::unknown-key",
    "rulec::empty-name",
    "rulec::empty-on",
    "rulec::no-steps",
    "rulec::empty-value",
    "rulec::pattern",
    "rulec::concurrency",
    "rulec::duration",
    "rulec::duration-range",
    "rulec::repeat",
    "rulec::durable-without-after",
    "rulec::exec-arguments",
    "rulec::action-unsupported",
    "rulec::unknown-action",
    "rulec::can-iface",
    "rulec::can-id",
    "rulec::can-data",
    "rulec::can-dlc",
    "rulec::can-rtr-data",
    "rulec::when::empty",
    // A `data` type that is not one of the five (the fixture's case).
    "rulec::topic",
    "rulec::input-source",
    "rulec::input-fields",
    "rulec::input-topic",
    "rulec::input-name",
    "rulec::input-format",
    "rulec::input-max-bytes",
    "rulec::notify-severity",
];

/// Cases with an expressible code that the schema still cannot see: a
/// duration that is well formed but does not fit in 64-bit nanoseconds.
/// And a channel under `ev:` (a name the schema's pattern allows).
const BEYOND_THE_SCHEMA: &[&str] = &["duration-overflow.toml", "input-channel-ev.toml"];

#[test]
fn schema_agrees_with_the_checker_on_the_invalid_fixtures() {
    let schema = schema();
    let mut problems = Vec::new();
    let mut rejected = 0;
    for path in toml_files(&fixtures().join("invalid")) {
        let Some(doc) = as_json(&path) else { continue };
        let text = std::fs::read_to_string(&path).unwrap();
        let codes: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect:"))
            .flat_map(|rest| rest.split(','))
            .map(str::trim)
            .collect();
        let name = path.file_name().unwrap().to_str().unwrap();
        let should_reject =
            codes.iter().any(|c| EXPRESSIBLE.contains(c)) && !BEYOND_THE_SCHEMA.contains(&name);
        let mut out = Vec::new();
        errors(&schema, &doc, "", &mut out);
        match (should_reject, out.is_empty()) {
            (true, true) => problems.push(format!("{name} ({codes:?}) validates")),
            (false, false) => problems.push(format!("{name} ({codes:?}) is rejected: {out:?}")),
            (true, false) => rejected += 1,
            (false, true) => {}
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(rejected > 40, "{rejected}");
}

#[test]
fn durations_and_can_data_edge_cases() {
    let schema = schema();
    let step = |extra: Value| {
        let mut step = json!({ "do": "can", "iface": "can0", "id": "0x123" });
        for (k, v) in extra.as_object().unwrap() {
            step[k] = v.clone();
        }
        json!({ "rule": [{ "name": "r", "on": ["a"], "step": [step] }] })
    };
    // What `rulec check` accepts.
    for extra in [
        json!({ "after": "-0s" }),
        json!({ "after": "0" }),
        json!({ "after": "+1.5s", "durable": false }),
        json!({ "data": "" }),
        json!({ "data": "0011223344556677" }),
        json!({ "data": " 00 11\t22 " }),
        json!({ "id": "0x1FFFFFFF" }),
        json!({ "id": "0000000123" }),
        json!({ "rtr": true, "dlc": 8 }),
    ] {
        let doc = step(extra.clone());
        assert!(valid(&schema, &doc), "{extra} should validate");
    }
    // What it rejects.
    for extra in [
        json!({ "after": "-1ms" }),
        json!({ "after": "0s", "durable": true }),
        json!({ "data": "001122334455667788" }),
        json!({ "data": "0 11" }),
        json!({ "id": "0x20000000" }),
        json!({ "dlc": 2 }),
        json!({ "rtr": false, "dlc": 2 }),
        json!({ "rtr": true, "data": "" }),
        json!({ "do": "redis" }),
        json!({ "do": "exec", "command": "x", "timeout": "0.0s" }),
    ] {
        let doc = step(extra.clone());
        assert!(!valid(&schema, &doc), "{extra} should be rejected");
    }
    let rule = |extra: Value| {
        let mut rule =
            json!({ "name": "r", "on": ["a"], "step": [{ "do": "exec", "command": "x" }] });
        for (k, v) in extra.as_object().unwrap() {
            rule[k] = v.clone();
        }
        json!({ "rule": [rule] })
    };
    for (extra, ok) in [
        (json!({ "cooldown": "0s" }), true),
        (json!({ "cooldown": "-1s" }), false),
        (json!({ "debounce": "1ns" }), true),
        (json!({ "debounce": "-0s" }), false),
        (json!({ "repeat": { "count": 1 } }), true),
        (json!({ "repeat": { "count": 1, "every": "0s" } }), true),
        (json!({ "repeat": { "count": 2 } }), false),
        (json!({ "repeat": { "count": 2, "every": "0s" } }), false),
        (json!({ "repeat": {} }), false),
        (json!({ "when": "  " }), false),
    ] {
        assert_eq!(valid(&schema, &rule(extra.clone())), ok, "{extra}");
    }
}

/// `rulec schema --timeline`: every fixture timeline and test validates,
/// and a misspelt key or a missing `at` does not.
#[test]
fn the_timeline_schema_validates_the_fixture_timelines_and_tests() {
    let output = Command::new(env!("CARGO_BIN_EXE_rulec"))
        .args(["schema", "--timeline"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let schema: Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut files = toml_files(&fixtures().join("timelines"));
    files.extend(toml_files(&fixtures().join("rules/tests")));
    assert!(files.len() > 20, "{files:?}");
    for path in &files {
        let mut out = Vec::new();
        errors(&schema, &as_json(path).unwrap(), "", &mut out);
        assert!(out.is_empty(), "{}: {out:?}", path.display());
    }
    let bad = json!({ "event": [{ "at": "0s", "tpoic": "alarm.triggered" }] });
    assert!(!valid(&schema, &bad));
    let bad = json!({ "expect": [{ "rul": "x" }] });
    assert!(!valid(&schema, &bad));
    let bad = json!({ "event": [{ "at": "10 sec", "topic": "a" }] });
    assert!(!valid(&schema, &bad));
}

/// A rule is triggered by `on`, `at` or `every` (docs/rules.md#schedules),
/// and a repeat of more than one pass has `every` or `period`: the schema
/// accepts what `rulec check` accepts there and rejects the rest.
#[test]
fn triggers_and_repeat_gaps() {
    let schema = schema();
    let rule = |extra: Value| {
        let mut rule = json!({ "name": "r", "step": [{ "do": "exec", "command": "/bin/true" }] });
        for (k, v) in extra.as_object().unwrap() {
            rule[k] = v.clone();
        }
        json!({ "rule": [rule] })
    };
    for extra in [
        json!({ "on": ["a"] }),
        json!({ "at": ["22:00"] }),
        json!({ "every": "5m" }),
        json!({ "on": ["a"], "at": ["22:00"] }),
        json!({ "on": ["a"], "repeat": { "count": 4, "period": "1s" } }),
        json!({ "on": ["a"], "repeat": { "count": 3, "every": "2s" } }),
        json!({ "on": ["a"], "repeat": { "count": 1 } }),
    ] {
        assert!(valid(&schema, &rule(extra.clone())), "rejected {extra}");
    }
    for extra in [
        json!({}),
        json!({ "when": "true" }),
        json!({ "on": ["a"], "repeat": { "count": 2 } }),
        json!({ "on": ["a"], "repeat": { "count": 2, "every": "1s", "period": "1s" } }),
        json!({ "on": ["a"], "repeat": { "count": 2, "period": "0s" } }),
    ] {
        assert!(!valid(&schema, &rule(extra.clone())), "accepted {extra}");
    }
}
