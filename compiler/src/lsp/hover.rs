//! Hover (docs/editors.md#hover): a key's type, default and meaning; a
//! topic's shape; `state("hash", "field")`'s values and whether it is
//! polled; a list's accepted values, and the guards and limits covering a
//! pushed value.

use super::context::{self, At, InWhen, WhenPart};
use super::facts::Facts;
use super::scan::{self, Entry, Kind};
use crate::keys::{self, Level};
use rulecore::TopicPattern;

/// The hover text at byte `offset` of the rule file `text`.
pub fn hover(text: &str, offset: usize, facts: Facts<'_>) -> Option<String> {
    let tables = scan::scan(text);
    let (table, at) = context::at(text, &tables, offset);
    let patterns = table
        .and_then(|table| context::rule_of(&tables, table))
        .map(|rule| context::on_patterns(text, rule))
        .unwrap_or_default();
    match at {
        At::Key {
            level, siblings, ..
        } => {
            let entry = siblings
                .iter()
                .find(|e| e.key_span.start <= offset && offset <= e.key_span.end)?;
            keys::find(level, &entry.key).map(Facts::key_text)
        }
        At::Value {
            level,
            entry,
            value,
            siblings,
        } => {
            let written = value.plain_str(text);
            let sibling = |key: &str| {
                siblings
                    .iter()
                    .find(|e: &&Entry| e.key == key)
                    .and_then(|e| e.value.as_ref())
                    .and_then(|v| v.plain_str(text))
            };
            let special = match (level, entry.key.as_str()) {
                (Level::Rule, "on" | "cancel-on") if value.kind == Kind::Str => {
                    written.and_then(|w| facts.pattern_text(w))
                }
                (Level::Rule | Level::Step, "when") if value.kind == Kind::Str => {
                    let when = InWhen::read(text, value, offset)?;
                    when_hover(&when, facts, &patterns)
                }
                (Level::Step, "list") => written.and_then(|list| facts.list_text(list)),
                (Level::Step, "push") => {
                    sibling("list").and_then(|list| facts.push_text(list, written))
                }
                (Level::Input, "field") => sibling("hash")
                    .zip(written)
                    .map(|(hash, field)| facts.state_text(hash, field)),
                _ => None,
            };
            special.or_else(|| keys::find(level, &entry.key).map(Facts::key_text))
        }
        At::Header | At::Nothing => None,
    }
}

/// Inside a `when`: a `state()` call, a `data.*` key or a field.
fn when_hover(when: &InWhen, facts: Facts<'_>, patterns: &[TopicPattern]) -> Option<String> {
    if let Some((hash, field)) = when.state_call_here() {
        return Some(facts.state_text(&hash, &field));
    }
    match when.part() {
        WhenPart::Name { token, .. } => {
            let name = when.source.get(token)?;
            match name {
                "topic" => Some("**`topic`**: the event's topic (a string)".into()),
                "src" => Some("**`src`**: the event's source, who published it (a string)".into()),
                "from" | "to" => Some(format!(
                    "**`{name}`**: the {} value of the change the event reports (a string)",
                    if name == "from" { "previous" } else { "new" }
                )),
                _ => {
                    let key = name.strip_prefix("data.")?.split('.').next()?;
                    let keys = facts.data_keys(patterns);
                    let (_, ty) = keys.iter().find(|(known, _)| known == key)?;
                    Some(format!(
                        "**`data.{key}`**: {ty}, in the events of the rule's `on` topics"
                    ))
                }
            }
        }
        _ => None,
    }
}
