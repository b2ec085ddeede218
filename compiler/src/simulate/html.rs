//! The timeline picture (docs/simulation.md#the-timeline-picture): one
//! self-contained HTML page of a simulation, written by `rulec simulate
//! --html FILE` and, for each failing test, by `rulec test --html DIR`.
//!
//! The page embeds its data as one JSON object: the output lines exactly as
//! `--format json` prints them, the rules they name as `rulec dump --format
//! json` shows them, and the timeline's entries as the file writes them
//! (with their durations in milliseconds). `html/page.js` draws it; nothing
//! is fetched, so it opens from `file://`.

use rulecore::bundle::Payload;
use rulecore::dump::rule_json;
use ruled_engine::sim::Line;
use ruled_engine::LogLine;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

const TEMPLATE: &str = include_str!("html/page.html");
const STYLE: &str = include_str!("html/page.css");
const SCRIPT: &str = include_str!("html/page.js");

/// The timeline's entry kinds, in the order entries at one instant apply
/// (docs/simulation.md#order-at-one-instant).
const ENTRY_KINDS: [&str; 7] = [
    "clock", "state", "message", "fail", "reload", "restart", "event",
];

/// An entry's duration keys: each also given as `<key>_ms`.
const DURATION_KEYS: [&str; 5] = ["at", "down", "jump", "until", "expire"];

/// A failing test, as its page shows it: the expectation not met and the
/// lines to point at (`rulec test`'s `marked`).
#[derive(Debug, Clone)]
pub struct Failure {
    pub file: String,
    pub expectation: String,
    pub problem: String,
    pub marked: Vec<usize>,
    /// The rule the expectation names, if it names one.
    pub rule: Option<String>,
    /// Its `at` or `between`, in ms: drawn as the expected window.
    pub window: Option<(u64, u64)>,
}

/// What one page shows.
#[derive(Debug)]
pub struct Page<'a> {
    /// The page's heading: the command that made it.
    pub title: String,
    pub lines: &'a [Line],
    /// The rules simulated: the first bundle, then any that replaced it
    /// (`--bundle-after-restart`, `[[reload]]`), in that order.
    pub bundles: Vec<&'a Payload>,
    /// The timeline file as TOML, for its entries.
    pub timeline: &'a toml::Table,
    pub failure: Option<Failure>,
    /// The engine's log lines with their time in ms: the envelope's
    /// refusals that no output line names (a limit's name, a breaker's
    /// trip, docs/safety.md) are drawn from them.
    pub logs: &'a [(u64, LogLine)],
}

/// The log codes of the envelope's refusals a page draws.
const REFUSAL_CODES: [&str; 2] = ["limited", "tripped"];

/// The JSON the page embeds (the snapshot tests read this): `title`,
/// `rules`, `quiet`, `entries`, `test`, `refusals`, then `lines`, each
/// output line as `--format json` prints it; one rule, entry, refusal or
/// line per line of text.
pub fn data(page: &Page<'_>) -> String {
    let (rules, quiet) = rules(page);
    let lines: Vec<String> = page.lines.iter().map(Line::to_json).collect();
    let test = page.failure.as_ref().map_or(Value::Null, failure_json);
    format!(
        "{{\"title\":{},\n\"rules\":{},\n\"quiet\":{},\n\"entries\":{},\n\"test\":{test},\n\"refusals\":{},\n\"lines\":{}}}\n",
        Value::from(page.title.as_str()),
        list(rules.iter().map(Value::to_string)),
        Value::from(quiet),
        list(entries(page.timeline).iter().map(Value::to_string)),
        list(refusals(page.logs).iter().map(Value::to_string)),
        list(lines.into_iter()),
    )
}

/// The envelope's refusals the engine logged (docs/safety.md): `at_ms`,
/// `rule`, `code` (`limited`: the first refusal of a limit's window, the
/// message naming the limit; `tripped`: a breaker's trip, with its pause
/// in `pause_ms`) and `message`.
fn refusals(logs: &[(u64, LogLine)]) -> Vec<Value> {
    logs.iter()
        .filter_map(|(at_ms, log)| {
            let code = log.code.filter(|code| REFUSAL_CODES.contains(code))?;
            Some(json!({
                "at_ms": at_ms,
                "rule": log.rule.as_deref(),
                "code": code,
                "message": log.message,
            }))
        })
        .collect()
}

/// A JSON array of already encoded items, one per line.
fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        return "[]".into();
    }
    format!("[\n{}\n]", items.join(",\n"))
}

/// The whole page: the template with the style, the data and the script.
pub fn render(page: &Page<'_>) -> String {
    // `<` only occurs inside JSON strings, where `\u003c` means the same;
    // so no `</script>` in a value can end the data element early.
    let data = data(page).replace('<', "\\u003c");
    fill(
        TEMPLATE,
        &[
            ("{{title}}", &escape_html(&page.title)),
            ("{{style}}", STYLE),
            ("{{data}}", &data),
            ("{{script}}", SCRIPT),
        ],
    )
}

/// Replaces each marker of `template` once, in the template's order; a
/// value is never searched for markers.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + values.iter().map(|v| v.1.len()).sum::<usize>());
    let mut rest = template;
    while let Some((at, marker, value)) = values
        .iter()
        .filter_map(|(marker, value)| rest.find(marker).map(|at| (at, *marker, *value)))
        .min_by_key(|found| found.0)
    {
        out.push_str(&rest[..at]);
        out.push_str(value);
        rest = &rest[at + marker.len()..];
    }
    out.push_str(rest);
    out
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The rules a line or a `[[fail]]` names, as `rulec dump --format json`
/// shows them (the first bundle that has each), in bundle order; and the
/// names of the others, which did nothing.
fn rules(page: &Page<'_>) -> (Vec<Value>, Vec<String>) {
    let mut named: BTreeSet<&str> = page
        .lines
        .iter()
        .filter_map(|l| l.rule.as_deref())
        .collect();
    let failing = page.timeline.get("fail").and_then(toml::Value::as_array);
    named.extend(
        failing
            .into_iter()
            .flatten()
            .filter_map(|f| f.get("rule")?.as_str()),
    );
    let mut seen = BTreeSet::new();
    let mut shown = Vec::new();
    let mut quiet = Vec::new();
    for payload in &page.bundles {
        for rule in &payload.rules {
            if !seen.insert(&*rule.name) {
                continue;
            }
            if named.contains(&*rule.name) {
                shown.push(rule_json(rule, payload));
            } else {
                quiet.push(rule.name.to_string());
            }
        }
    }
    (shown, quiet)
}

/// Every entry of the timeline: `entry` (its kind), `number` (from 1, in
/// file order within its kind, as error messages count), `at_ms` and the
/// other durations in ms, and `fields`, its keys as written; by time, then
/// in the order entries at one instant apply.
fn entries(timeline: &toml::Table) -> Vec<Value> {
    let mut entries = Vec::new();
    for kind in ENTRY_KINDS {
        let Some(list) = timeline.get(kind).and_then(toml::Value::as_array) else {
            continue;
        };
        for (index, entry) in list.iter().enumerate() {
            let mut object = Map::new();
            object.insert("entry".into(), kind.into());
            object.insert("number".into(), (index + 1).into());
            for key in DURATION_KEYS {
                let ms = entry
                    .get(key)
                    .and_then(toml::Value::as_str)
                    .and_then(|text| rulecore::parse_duration(text).ok())
                    .map(|ns| ns / 1_000_000);
                if let Some(ms) = ms {
                    object.insert(format!("{key}_ms"), ms.into());
                }
            }
            // An entry is a TOML table: serialising it cannot fail.
            object.insert(
                "fields".into(),
                serde_json::to_value(entry).unwrap_or(Value::Null),
            );
            entries.push(Value::Object(object));
        }
    }
    entries.sort_by_key(|entry| entry["at_ms"].as_i64().unwrap_or(0));
    entries
}

fn failure_json(failure: &Failure) -> Value {
    json!({
        "file": failure.file,
        "expectation": failure.expectation,
        "problem": failure.problem,
        "marked": failure.marked,
        "rule": failure.rule,
        "window": failure.window.map(|(from, to)| json!({"from_ms": from, "to_ms": to})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruled_engine::sim::LineKind;

    fn page<'a>(lines: &'a [Line], timeline: &'a toml::Table) -> Page<'a> {
        Page {
            title: "t <b>".into(),
            lines,
            bundles: Vec::new(),
            timeline,
            failure: None,
            logs: &[],
        }
    }

    #[test]
    fn a_value_cannot_end_the_data_element_and_markers_in_values_stay() {
        let line = Line {
            at_ms: 5,
            message: Some("</script><script>alert(1)</script> {{script}}".into()),
            ..Line::new(LineKind::EvalError)
        };
        let timeline = toml::Table::new();
        let lines = [line];
        let html = render(&page(&lines, &timeline));
        assert_eq!(
            html.matches("</script>").count(),
            2,
            "the data's and the script's"
        );
        assert!(html.contains("\\u003c/script> {{script}}"));
        assert!(html.contains("<title>t &lt;b&gt;</title>"));
    }

    #[test]
    fn entries_are_in_time_then_instant_order_with_durations_in_ms() {
        let timeline: toml::Table = toml::from_str(
            "[[event]]\nat = \"1s\"\ntopic = \"a\"\n[[restart]]\nat = \"1s\"\ndown = \"2s\"\n\
             [[clock]]\nat = \"3s\"\njump = \"-1h\"\n",
        )
        .unwrap();
        let entries = entries(&timeline);
        let kinds: Vec<&str> = entries
            .iter()
            .map(|e| e["entry"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["restart", "event", "clock"]);
        assert_eq!(entries[0]["down_ms"], 2000);
        assert_eq!(entries[2]["jump_ms"], -3_600_000);
        assert_eq!(entries[1]["fields"]["topic"], "a");
    }
}
