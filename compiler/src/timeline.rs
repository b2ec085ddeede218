//! Timeline and test files checked like rule files
//! (docs/simulation.md#checks): every problem of the simulator's timeline
//! parser and of `rulec test`'s expectation reader in one run, each placed
//! on the entry and key it names (so it prints as `file:line:column`);
//! then, against the rules, topics no rule, catalogue or profile knows (a
//! warning: an `[[expect-none]]` that passes because of a typo is the
//! worst test), `[[state]]` writes to hashes and fields nothing watches
//! (a warning: the write is a no-op), and rule names and step numbers of
//! `[[fail]]`, `[[expect]]` and `[[expect-none]]` (errors), each with "did
//! you mean".

use crate::diagnostic::{toml_string, Code, Diagnostic};
use crate::rule_test::{close_expectation_key, parse_all_expectations, ExpectError};
use rulecore::bundle::{Payload, StatePair};
use rulecore::suggest::did_you_mean;
use rulecore::TopicPattern;
use ruled_engine::sim::{Place, TimelineError};
use ruled_engine::{Engine, EngineConfig};
use std::ops::Range;
use std::sync::Arc;
use toml::de::{DeTable, DeValue};

/// What a timeline is checked against: the simulated rules, and the topics
/// of their catalogue and profile.
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// Each rule's name, with how many steps and finally steps it has (the
    /// most of any bundle that has it).
    pub rules: Vec<(String, usize, usize)>,
    /// Every rule's `on` and `cancel-on` patterns.
    pub patterns: Vec<TopicPattern>,
    /// The catalogue's topic names (the directory's, the inputs', the
    /// profile's); `None`: no catalogue (rules from a bundle file), topics
    /// are not checked.
    pub topics: Option<Vec<String>>,
    /// Every (hash, field) the simulated rules' engine reads: the rules'
    /// `state()` pairs, their inputs' fields, the profile's sources (with
    /// their `read` fields) and polls. A `[[state]]` write elsewhere
    /// changes nothing the rules see.
    pub watched: Vec<StatePair>,
}

impl Known {
    /// The rules of `payload` join what is known.
    pub fn add_rules(&mut self, payload: &Payload) {
        for rule in payload.rules.iter() {
            let finally = rule.options.as_ref().map_or(0, |o| o.finally.len());
            let steps = rule.steps.len();
            match self
                .rules
                .iter_mut()
                .find(|(name, _, _)| **name == *rule.name)
            {
                Some(known) => {
                    known.1 = known.1.max(steps);
                    known.2 = known.2.max(finally);
                }
                None => self.rules.push((rule.name.to_string(), steps, finally)),
            }
            self.patterns.extend(rule.on.iter().cloned());
            if let Some(options) = &rule.options {
                self.patterns.extend(options.cancel_on.iter().cloned());
            }
        }
        // The engine's own list of what it reads, so this check cannot
        // drift from what the simulator does with a write.
        let engine = Engine::new(Arc::new(payload.clone()), EngineConfig::default());
        for pair in engine.watched_pairs() {
            if !self.watched.contains(pair) {
                self.watched.push(pair.clone());
            }
        }
    }

    fn knows_topic(&self, topic: &str) -> bool {
        let Some(topics) = &self.topics else {
            return true;
        };
        topics.iter().any(|known| known == topic)
            || self
                .patterns
                .iter()
                .any(|pattern| !matches!(pattern, TopicPattern::Any) && pattern.matches(topic))
    }
}

/// A parsed timeline with its `timezone` read from the system's zone
/// database (docs/simulation.md#the-wall-clock).
pub fn with_zone(mut timeline: ruled_engine::sim::Timeline) -> ruled_engine::sim::Timeline {
    timeline.load_zone(rulecore_io::input_file::read_zone_file);
    timeline
}

/// Every problem of the timeline or test file `text` (named `name` in the
/// diagnostics): the parsers' first (in the file's order within each),
/// then, with `known`, its topics, rules and steps.
pub fn diagnostics(name: &str, text: &str, known: Option<&Known>) -> Vec<Diagnostic> {
    let document = match DeTable::parse(text) {
        Ok(document) => document,
        Err(error) => {
            return vec![Diagnostic::error(
                Code::Toml,
                format!("not valid TOML: {}", error.message()),
            )
            .in_file(name)
            .at(error.span().unwrap_or(0..0), "here")]
        }
    };
    let find = Finder {
        document: document.get_ref(),
    };
    let mut found = Vec::new();
    if let Ok(table) = toml::from_str::<toml::Table>(text) {
        if let Err(problems) = parse_all_expectations(&table) {
            found.extend(problems.iter().map(|p| expectation_problem(&find, p)));
        }
    }
    if let Err(problems) = ruled_engine::sim::parse_all(text) {
        found.extend(problems.iter().map(|p| timeline_problem(&find, p)));
    }
    if let Some(known) = known {
        found.extend(topics(&find, known));
        found.extend(state_writes(&find, known));
        found.extend(rules(&find, known));
    }
    found.into_iter().map(|d| d.in_file(name)).collect()
}

/// `[[event]]` topics that nothing knows.
fn topics(find: &Finder<'_, '_>, known: &Known) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    let Some(catalogue) = &known.topics else {
        return found;
    };
    let mut names: Vec<&str> = catalogue.iter().map(String::as_str).collect();
    names.extend(known.patterns.iter().filter_map(|pattern| match pattern {
        TopicPattern::Exact(name) => Some(&**name),
        _ => None,
    }));
    for (table, _) in find.entries("event") {
        let Some((topic, span)) = Finder::string(table, "topic") else {
            continue;
        };
        if known.knows_topic(topic) {
            continue;
        }
        let near = did_you_mean(topic, &names);
        let help = match near {
            Some(near) => format!(
                "did you mean `{near}`? no rule listens to `{topic}`, and the catalogue and the profile do not declare it"
            ),
            None => "no rule listens to it, and the catalogue and the profile do not declare it: the event matches nothing".to_string(),
        };
        let diagnostic = Diagnostic::warning(
            Code::UnknownTopic,
            format!("the event's topic `{topic}` is not known"),
        )
        .at(span.clone(), "unknown topic")
        .with_help(help);
        found.push(match near {
            Some(near) => diagnostic.with_fix(span, toml_string(near)),
            None => diagnostic,
        });
    }
    found
}

/// `[[state]]` writes to a hash, or a field of it, that nothing watches
///: a warning with "did you mean", since the write changes
/// nothing the rules see and a test around it would check nothing.
fn state_writes(find: &Finder<'_, '_>, known: &Known) -> Vec<Diagnostic> {
    let mut hashes: Vec<&str> = known.watched.iter().map(|p| p.hash.as_str()).collect();
    hashes.sort_unstable();
    hashes.dedup();
    let mut found = Vec::new();
    for (number, (table, _)) in (1..).zip(find.entries("state")) {
        let Some((hash, span)) = Finder::string(table, "hash") else {
            continue;
        };
        if !hashes.contains(&hash) {
            found.push(unwatched_hash(number, hash, span, &hashes));
            continue;
        }
        let fields: Vec<&str> = known
            .watched
            .iter()
            .filter(|pair| pair.hash == hash)
            .map(|pair| pair.field.as_str())
            .collect();
        for (field, span, quoted) in written_fields(table) {
            if fields.contains(&field) {
                continue;
            }
            let near = did_you_mean(field, &fields);
            let help = match near {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!(
                    "the watched fields of `{hash}` are {}",
                    fields
                        .iter()
                        .map(|f| format!("`{f}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let fix = near.map(|near| (span.clone(), key_text(near, quoted)));
            found.push(
                Diagnostic::warning(
                    Code::UnwatchedState,
                    format!(
                        "[[state]] #{number}: nothing watches `{hash}` `{field}`: the write changes nothing the rules see"
                    ),
                )
                .at(span, "no rule, input or profile source reads this field")
                .with_help(help)
                .with_fix_opt(fix),
            );
        }
    }
    found
}

fn unwatched_hash(number: usize, hash: &str, span: Range<usize>, hashes: &[&str]) -> Diagnostic {
    let near = did_you_mean(hash, hashes);
    let help = match near {
        Some(near) => format!("did you mean `{near}`?"),
        None => format!(
            "no rule's `state()`, no input and no profile source or poll reads `{hash}`: write a hash they read, or leave the entry out"
        ),
    };
    Diagnostic::warning(
        Code::UnwatchedState,
        format!(
            "[[state]] #{number}: nothing watches the hash `{hash}`: the write changes nothing the rules see"
        ),
    )
    .at(span.clone(), "no rule, input or profile source reads this hash")
    .with_help(help)
    .with_fix_opt(near.map(|near| (span, toml_string(near))))
}

/// The fields a `[[state]]` writes or deletes: its `field` (a string
/// value) and the keys of its `fields` table, each with its span and
/// whether the span is a string value (`true`) or a key.
fn written_fields<'t>(table: &'t DeTable<'_>) -> Vec<(&'t str, Range<usize>, bool)> {
    let mut written = Vec::new();
    if let Some((field, span)) = Finder::string(table, "field") {
        written.push((field, span, true));
    }
    if let Some((DeValue::Table(fields), _)) = Finder::key_value(table, "fields") {
        for (key, _) in fields.iter() {
            written.push((key.get_ref().as_ref(), key.span(), false));
        }
    }
    written
}

/// `name` as a string value, or as a key (bare when TOML allows it).
fn key_text(name: &str, value: bool) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if value || !bare {
        toml_string(name)
    } else {
        name.to_string()
    }
}

/// Rule names and step numbers of `[[fail]]`, `[[expect]]` and
/// `[[expect-none]]`.
fn rules(find: &Finder<'_, '_>, known: &Known) -> Vec<Diagnostic> {
    let names: Vec<&str> = known.rules.iter().map(|(name, ..)| name.as_str()).collect();
    let mut found = Vec::new();
    for kind in ["fail", "expect", "expect-none"] {
        for (number, (table, _)) in (1..).zip(find.entries(kind)) {
            let Some((rule, span)) = Finder::string(table, "rule") else {
                continue;
            };
            let Some((_, steps, finally)) = known.rules.iter().find(|(name, ..)| name == rule)
            else {
                let near = did_you_mean(rule, &names);
                let help = match near {
                    Some(near) => format!("did you mean `{near}`?"),
                    None => "`rule` names a rule of the simulated rules".to_string(),
                };
                let diagnostic = Diagnostic::error(
                    Code::UnknownRule,
                    format!("[[{kind}]] #{number}: no rule named `{rule}` in the simulated rules"),
                )
                .at(span.clone(), "unknown rule")
                .with_help(help);
                found.push(match near {
                    Some(near) => diagnostic.with_fix(span, toml_string(near)),
                    None => diagnostic,
                });
                continue;
            };
            let in_finally = Finder::key_value(table, "finally")
                .is_some_and(|(value, _)| matches!(value, DeValue::Boolean(true)));
            let count = if in_finally { *finally } else { *steps };
            let Some((DeValue::Integer(step), step_span)) = Finder::key_value(table, "step") else {
                continue;
            };
            let step = step.as_str().parse::<usize>().ok();
            if step.is_some_and(|step| step < count) {
                continue;
            }
            let list = if in_finally { "finally step" } else { "step" };
            found.push(
                Diagnostic::error(
                    Code::UnknownRule,
                    format!(
                        "[[{kind}]] #{number}: rule `{rule}` has no {list} {} (it has {count})",
                        step.map_or("so numbered".to_string(), |s| s.to_string())
                    ),
                )
                .at(step_span, "no such step")
                .with_help(format!(
                    "steps count from 0, so `step` is 0 to {}",
                    count.saturating_sub(1)
                )),
            );
        }
    }
    found
}

/// Where in the document a problem is.
pub(crate) struct Finder<'d, 'i> {
    document: &'d DeTable<'i>,
}

impl<'d, 'i> Finder<'d, 'i> {
    /// The tables of the `kind` entries, with their spans.
    fn entries(&self, kind: &str) -> Vec<(&'d DeTable<'i>, Range<usize>)> {
        let Some((_, value)) = self.document.iter().find(|(key, _)| key.get_ref() == kind) else {
            return Vec::new();
        };
        let DeValue::Array(items) = value.get_ref() else {
            return Vec::new();
        };
        items
            .iter()
            .filter_map(|item| match item.get_ref() {
                DeValue::Table(table) => Some((table, item.span())),
                _ => None,
            })
            .collect()
    }

    /// The table of entry `number` (from 1) of `kind`, and its span.
    fn entry(&self, kind: &str, number: usize) -> Option<(&'d DeTable<'i>, Range<usize>)> {
        let (_, value) = self
            .document
            .iter()
            .find(|(key, _)| key.get_ref() == kind)?;
        let DeValue::Array(items) = value.get_ref() else {
            return None;
        };
        let item = items.get(number.checked_sub(1)?)?;
        match item.get_ref() {
            DeValue::Table(table) => Some((table, item.span())),
            _ => None,
        }
    }

    /// The value of `key` in `table`, and its span.
    fn key_value<'t>(table: &'t DeTable<'i>, key: &str) -> Option<(&'t DeValue<'i>, Range<usize>)> {
        let (_, v) = table.iter().find(|(k, _)| k.get_ref() == key)?;
        Some((v.get_ref(), v.span()))
    }

    /// A string value of `key` in `table`, and its span.
    fn string<'t>(table: &'t DeTable<'i>, key: &str) -> Option<(&'t str, Range<usize>)> {
        match Self::key_value(table, key)? {
            (DeValue::String(text), span) => Some((text.as_ref(), span)),
            _ => None,
        }
    }

    /// The span of `key` (`value`: of its value) in `table`.
    fn key(table: &DeTable<'_>, key: &str, value: bool) -> Option<Range<usize>> {
        let (k, v) = table.iter().find(|(k, _)| k.get_ref() == key)?;
        Some(if value { v.span() } else { k.span() })
    }

    /// `key` of entry `number` of `kind`, else the entry, else the start.
    fn at(&self, kind: &str, number: usize, key: Option<&str>, value: bool) -> Range<usize> {
        let Some((table, span)) = self.entry(kind, number) else {
            return 0..0;
        };
        key.and_then(|key| Self::key(table, key, value))
            .unwrap_or(span)
    }

    /// A top-level key (or its value).
    fn top(&self, key: &str, value: bool) -> Range<usize> {
        Self::key(self.document, key, value).unwrap_or(0..0)
    }

    /// `key` at `place`.
    fn place(&self, place: &Place, key: &str, value: bool) -> Range<usize> {
        match place {
            Place::Entry { kind, number } => self.at(kind, *number, Some(key), value),
            Place::TopLevel => self.top(key, value),
        }
    }
}

fn timeline_problem(find: &Finder<'_, '_>, error: &TimelineError) -> Diagnostic {
    let span = match error {
        TimelineError::Syntax { .. } | TimelineError::Shape { .. } => 0..0,
        TimelineError::ReloadBundles { .. } => find.top("reload", false),
        TimelineError::UnknownSetting { key } => find.top(key, false),
        TimelineError::NotEntries { kind } => find.top(kind, false),
        TimelineError::UnknownKey { place, key } => find.place(place, key, false),
        TimelineError::Missing { place, .. } => match place {
            Place::Entry { kind, number } => find.at(kind, *number, None, false),
            Place::TopLevel => 0..0,
        },
        TimelineError::WrongType { place, key, .. }
        | TimelineError::BadDuration { place, key, .. }
        | TimelineError::Negative { place, key } => find.place(place, key, true),
        TimelineError::DataNotTable { number } => find.at("event", *number, Some("data"), true),
        TimelineError::StateShape { number, .. } => find.at("state", *number, None, false),
        TimelineError::NoWorkers => find.top("workers", true),
        TimelineError::BadStart { .. } => find.top("start", true),
        TimelineError::BadZone { .. } => find.top("timezone", true),
        TimelineError::FailUntilNotAfterAt { number, .. } => {
            find.at("fail", *number, Some("until"), true)
        }
        TimelineError::UnknownFailRule { number, .. } => {
            find.at("fail", *number, Some("rule"), true)
        }
        TimelineError::FailStepOutOfRange { number, .. } => {
            find.at("fail", *number, Some("step"), true)
        }
    };
    let fix = error.suggestion().map(|suggestion| match error {
        TimelineError::BadDuration { .. } => (span.clone(), toml_string(&suggestion)),
        _ => (span.clone(), suggestion),
    });
    let diagnostic = Diagnostic::error(Code::Timeline, error.to_string())
        .at(span, timeline_label(error))
        .with_fix_opt(fix);
    match error.help() {
        Some(help) => diagnostic.with_help(help),
        None => diagnostic,
    }
}

/// What the label under a timeline problem says.
fn timeline_label(error: &TimelineError) -> &'static str {
    match error {
        TimelineError::UnknownSetting { .. } | TimelineError::UnknownKey { .. } => "unknown key",
        TimelineError::Missing { .. } => "a key is missing here",
        TimelineError::WrongType { .. } => "wrong type",
        TimelineError::BadDuration { .. } => "not a duration",
        TimelineError::Negative { .. } => "negative",
        TimelineError::NotEntries { .. } => "not a list of entries",
        _ => "here",
    }
}

/// What the label under an expectation problem says.
fn expectation_label(error: &ExpectError) -> &'static str {
    match error {
        ExpectError::UnknownKey { .. } => "unknown key",
        ExpectError::WrongType { .. } => "wrong type",
        ExpectError::BadDuration { .. } => "not a duration",
        ExpectError::NotEntries { .. } => "not a list of entries",
        _ => "here",
    }
}

fn expectation_problem(find: &Finder<'_, '_>, error: &ExpectError) -> Diagnostic {
    let mut fix = None;
    let span = match error {
        ExpectError::NotEntries { kind } => find.top(kind, false),
        ExpectError::UnknownKey { kind, number, key } => {
            let span = find.at(kind, *number, Some(key), false);
            fix = close_expectation_key(key).map(|close| (span.clone(), close.to_string()));
            span
        }
        ExpectError::WrongType {
            kind, number, key, ..
        } => find.at(kind, *number, Some(key), true),
        ExpectError::BadDuration {
            kind, number, key, ..
        } => find.at(kind, *number, Some(key), true),
        ExpectError::AtAndBetween { kind, number } => find.at(kind, *number, None, false),
        ExpectError::BetweenReversed { kind, number } => {
            find.at(kind, *number, Some("between"), true)
        }
        ExpectError::CountOnNone { number } => {
            find.at("expect-none", *number, Some("count"), false)
        }
    };
    Diagnostic::error(Code::Timeline, error.to_string())
        .at(span, expectation_label(error))
        .with_fix_opt(fix)
}
