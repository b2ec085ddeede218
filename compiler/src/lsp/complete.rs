//! Completion (docs/editors.md#completion): the keys of each level and
//! the table headers; topics for `on` and `cancel-on`; `do` and the other
//! keys of a fixed set of values; durations; list names and each list's
//! `push` values; hashes and fields (`[[rule.input]]` and `state()`);
//! `data.*` keys of the rule's topics, names and functions in `when`.

use super::context::{self, At, Compared, InWhen, WhenPart};
use super::facts::Facts;
use super::scan::{self, Entry, Kind, Value};
use crate::keys::{self, ActionKind, Level, Sign, Ty};
use rulecore::value_pattern::ValuePattern;
use rulecore::TopicPattern;
use std::ops::Range;

/// What a completion item is, for its icon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    Key,
    Header,
    Value,
    Topic,
    Function,
    Field,
}

/// One completion: `insert` replaces the bytes `replace` of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub label: String,
    pub what: What,
    pub detail: Option<String>,
    pub doc: Option<String>,
    pub replace: Range<usize>,
    pub insert: String,
}

/// Durations offered for a duration key.
const DURATIONS: &[&str] = &[
    "100ms", "500ms", "1s", "2s", "5s", "10s", "30s", "1m", "5m", "1h",
];

/// The headers of a rule file.
const HEADERS: &[(&str, &str)] = &[
    ("[[rule]]", "a rule"),
    ("[[rule.step]]", "a step of the rule above"),
    (
        "[[rule.input]]",
        "an input of the rule above (docs/rules.md#inputs)",
    ),
    (
        "[[topic]]",
        "a topic of the catalogue (docs/rules.md#the-topic-catalogue)",
    ),
];

/// The completions at byte `offset` of the rule file `text`.
pub fn complete(text: &str, offset: usize, facts: Facts<'_>) -> Vec<Candidate> {
    let tables = scan::scan(text);
    let (table, at) = context::at(text, &tables, offset);
    match at {
        At::Header => match table {
            Some(table) => headers(table.header.start..offset.max(table.header.start)),
            None => Vec::new(),
        },
        At::Key {
            level,
            partial,
            siblings,
        } => {
            let mut out = key_candidates(level, partial.clone(), siblings, offset, text);
            // On a line of its own (not in `repeat = { ... }`), a new table
            // may start there too.
            let own_line = siblings
                .iter()
                .all(|e| e.key_span != partial || e.value.is_none());
            if level != Level::Repeat && own_line {
                out.extend(headers(partial));
            }
            out
        }
        At::Value {
            level,
            entry,
            value,
            siblings,
        } => {
            let patterns = table
                .and_then(|table| context::rule_of(&tables, table))
                .map(|rule| context::on_patterns(text, rule))
                .unwrap_or_default();
            let place = Place {
                text,
                offset,
                level,
                entry,
                value,
                siblings,
            };
            value_candidates(&place, facts, &patterns)
        }
        At::Nothing => Vec::new(),
    }
}

fn headers(replace: Range<usize>) -> Vec<Candidate> {
    HEADERS
        .iter()
        .map(|(header, doc)| Candidate {
            label: header.to_string(),
            what: What::Header,
            detail: Some(doc.to_string()),
            doc: None,
            replace: replace.clone(),
            insert: header.to_string(),
        })
        .collect()
}

/// The keys of `level` not yet written in the table; a step's keys only
/// of its action kind once `do` says which.
fn key_candidates(
    level: Level,
    partial: Range<usize>,
    siblings: &[Entry],
    offset: usize,
    text: &str,
) -> Vec<Candidate> {
    let kind = siblings
        .iter()
        .find(|e| e.key == "do")
        .and_then(|e| e.value.as_ref())
        .and_then(|v| v.plain_str(text))
        .and_then(ActionKind::from_name);
    // Editing the key of an entry that has its `=` already: the key alone.
    let has_value = siblings
        .iter()
        .any(|e| e.key_span.start <= offset && offset <= e.key_span.end && e.value.is_some());
    keys::keys(level)
        .filter(|key| !matches!(key.ty, Ty::Tables { .. }))
        .filter(|key| {
            !siblings
                .iter()
                .any(|e| e.key == key.name && e.key_span != partial)
        })
        .filter(|key| kind.is_none_or(|kind| key.actions.is_empty() || key.actions.contains(&kind)))
        .map(|key| Candidate {
            label: key.name.to_string(),
            what: What::Key,
            detail: Some(key.ty.describe()),
            doc: Some(Facts::key_text(key)),
            replace: partial.clone(),
            insert: if has_value {
                key.name.to_string()
            } else {
                format!("{} = ", key.name)
            },
        })
        .collect()
}

/// Where a value is being written.
struct Place<'t, 'd> {
    text: &'t str,
    offset: usize,
    level: Level,
    entry: &'d Entry,
    value: &'d Value,
    siblings: &'d [Entry],
}

impl Place<'_, '_> {
    fn sibling(&self, key: &str) -> Option<&str> {
        self.siblings
            .iter()
            .find(|e| e.key == key)
            .and_then(|e| e.value.as_ref())
            .and_then(|v| v.plain_str(self.text))
    }

    /// Inside a string: its content up to the cursor is replaced.
    fn in_string(&self) -> bool {
        self.value.kind == Kind::Str
    }

    /// What a value replaces: the string's content so far, or, outside a
    /// string, the cursor (the value is inserted with its quotes).
    fn replace(&self) -> Range<usize> {
        if self.in_string() {
            let quote = self.text[self.value.span.clone()]
                .chars()
                .next()
                .map_or(1, char::len_utf8);
            self.value.span.start + quote..self.offset
        } else if self.value.kind == Kind::Other {
            self.value.span.start..self.offset.max(self.value.span.start)
        } else {
            self.offset..self.offset
        }
    }

    fn candidate(&self, label: &str, what: What, detail: Option<String>) -> Candidate {
        let insert = if self.in_string() {
            label.to_string()
        } else {
            crate::diagnostic::toml_string(label)
        };
        Candidate {
            label: label.to_string(),
            what,
            detail,
            doc: None,
            replace: self.replace(),
            insert,
        }
    }
}

fn value_candidates(
    place: &Place<'_, '_>,
    facts: Facts<'_>,
    patterns: &[TopicPattern],
) -> Vec<Candidate> {
    let key = place.entry.key.as_str();
    let values = |labels: Vec<String>, what: What| -> Vec<Candidate> {
        labels
            .iter()
            .map(|label| place.candidate(label, what, None))
            .collect()
    };
    match (place.level, key) {
        (Level::Rule | Level::Step, "when") if place.in_string() => {
            match InWhen::read(place.text, place.value, place.offset) {
                Some(when) => when_candidates(place, &when, facts, patterns),
                None => Vec::new(),
            }
        }
        (Level::Rule, "on" | "cancel-on") => facts
            .topics
            .iter()
            .map(|topic| place.candidate(&topic.name, What::Topic, facts.topic_text(&topic.name)))
            .collect(),
        (Level::Step, "list") => match facts.catalogue() {
            Some(catalogue) => values(catalogue.lists.keys().cloned().collect(), What::Value),
            None => Vec::new(),
        },
        (Level::Step, "push") => match place.sibling("list").and_then(|l| facts.list_values(l)) {
            Some(accepted) => values(literals(accepted), What::Value),
            None => Vec::new(),
        },
        (Level::Input, "hash") => match facts.catalogue() {
            Some(catalogue) => values(catalogue.hashes.keys().cloned().collect(), What::Value),
            None => Vec::new(),
        },
        (Level::Input, "field") => match place
            .sibling("hash")
            .and_then(|hash| facts.catalogue()?.hashes.get(hash))
        {
            Some(info) => values(info.fields.keys().cloned().collect(), What::Field),
            None => Vec::new(),
        },
        _ => match keys::find(place.level, key).map(|k| k.ty) {
            Some(Ty::Choice(choices)) => {
                values(choices.iter().map(|c| c.to_string()).collect(), What::Value)
            }
            Some(Ty::Duration(sign)) => {
                let mut durations: Vec<String> = DURATIONS.iter().map(|d| d.to_string()).collect();
                if sign != Sign::Positive {
                    durations.insert(0, "0".into());
                }
                values(durations, What::Value)
            }
            Some(Ty::Bool) if !place.in_string() => ["true", "false"]
                .iter()
                .map(|b| Candidate {
                    insert: b.to_string(),
                    ..place.candidate(b, What::Value, None)
                })
                .collect(),
            _ => Vec::new(),
        },
    }
}

/// The values of patterns as one would write them: a literal as it is, a
/// pattern up to its first placeholder (`start:<int>` as `start:`).
fn literals(patterns: &[ValuePattern]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for pattern in patterns {
        let text = match pattern.as_literal() {
            Some(literal) => literal.to_string(),
            None => pattern
                .to_string()
                .split('<')
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        if !text.is_empty() && !out.contains(&text) {
            out.push(text);
        }
    }
    out
}

/// Inside a `when` string.
fn when_candidates(
    place: &Place<'_, '_>,
    when: &InWhen,
    facts: Facts<'_>,
    patterns: &[TopicPattern],
) -> Vec<Candidate> {
    // Inside a basic string `"` must be escaped.
    let basic = place.text[place.value.span.clone()].starts_with('"')
        && !place.text[place.value.span.clone()].starts_with("\"\"\"");
    let encode = |text: &str| {
        if basic {
            text.replace('\\', "\\\\").replace('"', "\\\"")
        } else {
            text.to_string()
        }
    };
    let make =
        |labels: Vec<(String, What, Option<String>)>, token: &Range<usize>, inside_quotes: bool| {
            let start = token.start + usize::from(inside_quotes);
            let replace = when.map.map(start.min(when.offset)..when.offset);
            let replace = replace.start..place.offset.max(replace.start);
            labels
                .into_iter()
                .map(|(label, what, detail)| Candidate {
                    insert: encode(&label),
                    label,
                    what,
                    detail,
                    doc: None,
                    replace: replace.clone(),
                })
                .collect::<Vec<_>>()
        };
    let plain = |names: Vec<String>, what: What| -> Vec<(String, What, Option<String>)> {
        names.into_iter().map(|name| (name, what, None)).collect()
    };
    let catalogue = facts.catalogue();
    match when.part() {
        WhenPart::StateHash { token, .. } => {
            let hashes = catalogue
                .map(|c| c.hashes.keys().cloned().collect())
                .unwrap_or_default();
            make(plain(hashes, What::Value), &token, true)
        }
        WhenPart::StateField { hash, token, .. } => {
            let fields = catalogue
                .and_then(|c| c.hashes.get(&hash))
                .map(|info| info.fields.keys().cloned().collect())
                .unwrap_or_default();
            make(plain(fields, What::Field), &token, true)
        }
        WhenPart::ComparedWith { value, token, .. } => {
            let values = match value {
                Compared::State { hash, field } => facts
                    .field_values(&hash, &field)
                    .map(literals)
                    .unwrap_or_default(),
                Compared::To | Compared::From => {
                    event_values(facts, patterns, value == Compared::From)
                }
            };
            make(plain(values, What::Value), &token, true)
        }
        WhenPart::Name { written, token } => {
            let names: Vec<(String, What, Option<String>)> = if written.starts_with("data.") {
                facts
                    .data_keys(patterns)
                    .into_iter()
                    .map(|(key, ty)| (format!("data.{key}"), What::Field, Some(ty.to_string())))
                    .collect()
            } else {
                names()
            };
            make(names, &token, false)
        }
        WhenPart::Other => Vec::new(),
    }
}

/// The names of `when`: the event's fields, `data.`, `state(...)` and the
/// functions.
fn names() -> Vec<(String, What, Option<String>)> {
    let mut names: Vec<(String, What, Option<String>)> = crate::when::FIELDS
        .iter()
        .map(|(name, _)| {
            (
                name.to_string(),
                What::Field,
                Some("a field of the event".into()),
            )
        })
        .collect();
    names.push((
        "data.".into(),
        What::Field,
        Some("a key of the event's data".into()),
    ));
    names.push((
        "state(\"".into(),
        What::Function,
        Some("state(\"hash\", \"field\"): a field's current value".into()),
    ));
    names.extend(
        crate::when::FUNCTIONS
            .iter()
            .map(|(name, _)| (name.to_string(), What::Function, None)),
    );
    names.extend(["true", "false"].map(|b| (b.to_string(), What::Value, None)));
    names
}

/// The values `to` (or `from`) takes in the events of the rule's topics.
fn event_values(facts: Facts<'_>, patterns: &[TopicPattern], from: bool) -> Vec<String> {
    let Some(catalogue) = facts.catalogue() else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for pattern in patterns {
        for topic in facts.matching(pattern) {
            let Some(shape) = catalogue.topic(&topic.name) else {
                continue;
            };
            let values = if from { &shape.from } else { &shape.to };
            for value in literals(values.as_deref().unwrap_or_default()) {
                if !out.contains(&value) {
                    out.push(value);
                }
            }
        }
    }
    out
}
