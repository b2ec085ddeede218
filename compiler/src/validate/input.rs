//! Inputs (docs/rules.md#inputs): each `[[rule.input]]` of a rule (hash
//! or channel, fields, names, topic, format, `max-bytes`, at most 16), and
//! across the rules that survived (at most 64 distinct inputs, one format
//! per channel). The names' rules and the limits are `rulecore::limits`',
//! which the bundle loader applies again.

use super::checker::{entry, type_name, RuleChecker, Value};
use super::CheckedRule;
use crate::diagnostic::{Code, Diagnostic};
use crate::rulefile::Table;
use rulecore::bundle::{Input, InputSource, PayloadFormat};
use rulecore::limits::{
    input_name_problem, DEFAULT_INPUT_BYTES, INPUT_TOPIC_PREFIX, MAX_INPUTS, MAX_INPUTS_PER_RULE,
    MAX_INPUT_BYTES, MAX_INPUT_FIELDS,
};
use std::ops::Range;
use toml::de::DeValue;

/// One input that passed its checks, and where it is written.
#[derive(Debug, Clone)]
pub struct CheckedInput {
    pub input: Input,
    /// The `[[rule.input]]` table.
    pub span: Range<usize>,
}

/// The keys only one kind of input has.
const HASH_ONLY: [&str; 1] = ["fields"];
const CHANNEL_ONLY: [&str; 2] = ["format", "max-bytes"];

impl<'i> RuleChecker<'_, 'i> {
    /// The rule's `[[rule.input]]` tables; `None` once any is wrong.
    pub(super) fn inputs(&mut self, table: &Table<'i>) -> Option<Vec<CheckedInput>> {
        let Some(e) = entry(table, "input") else {
            return Some(Vec::new());
        };
        let DeValue::Array(items) = e.value.get_ref() else {
            self.wrong_type(
                "input",
                e.value,
                "an array of input tables",
                Some("start each input with a `[[rule.input]]` header (two brackets)"),
            );
            return None;
        };
        let mut inputs = Vec::new();
        let mut ok = true;
        for (index, item) in items.iter().enumerate() {
            if index == MAX_INPUTS_PER_RULE {
                self.error_help(
                    Code::InputLimit,
                    format!(
                        "the rule has {} inputs; at most {MAX_INPUTS_PER_RULE} are allowed",
                        items.len()
                    ),
                    item.span(),
                    "one input too many",
                    "split the rule, or watch several fields of one hash in one input",
                );
                ok = false;
            }
            let DeValue::Table(input) = item.get_ref() else {
                self.wrong_type("input", item, "a table", None);
                ok = false;
                continue;
            };
            match self.input(input, item.span()) {
                Some(input) => inputs.push(input),
                None => ok = false,
            }
        }
        ok.then_some(inputs)
    }

    /// One `[[rule.input]]` table.
    fn input(&mut self, table: &Table<'i>, span: Range<usize>) -> Option<CheckedInput> {
        let hash = self.input_name(table, "hash");
        let channel = self.input_name(table, "channel");
        let topic = self.input_topic(table);
        let source = match (hash, channel) {
            (Some(hash), None) => {
                let fields = self.fields(table, &span);
                self.not_here(table, &CHANNEL_ONLY, "a hash input")?;
                InputSource::Hash {
                    hash: hash.ok()?,
                    fields: fields.ok()?,
                }
            }
            (None, Some(channel)) => {
                let format = self.format(table);
                let max_bytes = self.max_bytes(table);
                self.not_here(table, &HASH_ONLY, "a channel input")?;
                let channel = channel.ok()?;
                self.not_a_watched_hash(table, &channel)?;
                if let (Ok(None), Some(e)) = (&topic, entry(table, "channel")) {
                    self.error_help(
                        Code::InputTopic,
                        format!("the channel input `{channel}` has no `topic`"),
                        e.key_span,
                        "its messages would go nowhere",
                        "add e.g. `topic = \"input.accessory-report\"`",
                    );
                    return None;
                }
                InputSource::Channel {
                    channel,
                    format: format.ok()?,
                    max_bytes: max_bytes.ok()?,
                }
            }
            (Some(_), Some(_)) => {
                let (Some(h), Some(c)) = (entry(table, "hash"), entry(table, "channel")) else {
                    return None;
                };
                self.push(
                    Diagnostic::error(
                        Code::InputSource,
                        "an input is a hash or a channel, not both",
                    )
                    .at(c.key_span, "a channel")
                    .with_related(&self.file.name, h.key_span, "and a hash")
                    .with_help("write two `[[rule.input]]` tables, one for each"),
                );
                return None;
            }
            (None, None) => {
                self.error_help(
                    Code::InputSource,
                    "an input needs `hash` (with `fields`) or `channel`".to_string(),
                    span,
                    "neither `hash` nor `channel`",
                    "add e.g. `hash = \"vehicle\"` and `fields = [\"engine-power\"]`, or `channel = \"accessory:report\"`",
                );
                return None;
            }
        };
        Some(CheckedInput {
            input: Input {
                source,
                topic: topic.ok()?,
            },
            span,
        })
    }

    /// A channel input on a hash the profile declares: the channel carries
    /// that hash's change notifications, which its watch reads.
    fn not_a_watched_hash(&mut self, table: &Table<'i>, channel: &str) -> Option<()> {
        let declared = self
            .catalogue
            .is_some_and(|catalogue| catalogue.hashes.contains_key(channel));
        let (true, Some(e)) = (declared, entry(table, "channel")) else {
            return Some(());
        };
        self.error_help(
            Code::InputChannelHash,
            format!(
                "the channel `{channel}` is where the profile's hash `{channel}` announces its changed fields"
            ),
            e.value.span(),
            "a watched hash's channel",
            &watch_the_hash_help(channel),
        );
        None
    }

    /// `hash` or `channel`: `None` when absent; `Some(Err)` once reported.
    fn input_name(&mut self, table: &Table<'i>, key: &str) -> Option<Result<String, ()>> {
        entry(table, key)?;
        let Some((name, span)) = self.string(table, key) else {
            return Some(Err(()));
        };
        let problem = input_name_problem(&name).or_else(|| {
            (key == "channel" && name.starts_with("ev:"))
                .then_some("is under `ev:`, where the rules' own events are published")
        });
        let Some(problem) = problem else {
            return Some(Ok(name));
        };
        self.name_problem(key, &name, problem, span);
        Some(Err(()))
    }

    fn name_problem(&mut self, key: &str, name: &str, problem: &str, span: Range<usize>) {
        let help = if problem.contains("ev:") {
            "a channel input reads raw messages; react to an event with `on` instead"
        } else {
            "write the exact name, at most 128 bytes, without white space, control or glob characters"
        };
        self.error_help(
            Code::InputName,
            format!(
                "the input {key} `{}` {problem}",
                crate::diagnostic::escape_controls(name)
            ),
            span,
            "not an exact name",
            help,
        );
    }

    /// A hash input's `fields`: 1 to 64 names.
    fn fields(&mut self, table: &Table<'i>, span: &Range<usize>) -> Result<Vec<String>, ()> {
        let Some(e) = entry(table, "fields") else {
            self.error_help(
                Code::InputFields,
                "a hash input needs `fields`".to_string(),
                span.clone(),
                "no `fields`",
                "add the fields to watch, e.g. `fields = [\"engine-power\"]`",
            );
            return Err(());
        };
        let DeValue::Array(items) = e.value.get_ref() else {
            self.wrong_type("fields", e.value, "an array of field names", None);
            return Err(());
        };
        if items.is_empty() || items.len() > MAX_INPUT_FIELDS {
            self.error_help(
                Code::InputFields,
                format!(
                    "`fields` has {} names; a hash input watches 1 to {MAX_INPUT_FIELDS}",
                    items.len()
                ),
                e.value.span(),
                "no fields or too many",
                "list the fields to watch; split a longer list over two inputs",
            );
            return Err(());
        }
        let mut fields = Vec::with_capacity(items.len());
        for item in items {
            match self.field(item) {
                Some(field) if !fields.contains(&field) => fields.push(field),
                Some(_) => {}
                None => return Err(()),
            }
        }
        Ok(fields)
    }

    fn field(&mut self, item: &Value<'i>) -> Option<String> {
        let DeValue::String(name) = item.get_ref() else {
            self.error(
                Code::Type,
                format!(
                    "a field name must be a string, found {}",
                    type_name(item.get_ref())
                ),
                item.span(),
                "expected a string",
            );
            return None;
        };
        if let Some(problem) = input_name_problem(name) {
            self.name_problem("field", name, problem, item.span());
            return None;
        }
        Some(name.to_string())
    }

    /// `topic`: absent, or `input.` and a name.
    fn input_topic(&mut self, table: &Table<'i>) -> Result<Option<String>, ()> {
        let Some((topic, span)) = self.string_or_fail(table, "topic")? else {
            return Ok(None);
        };
        let rest = topic.strip_prefix(INPUT_TOPIC_PREFIX).unwrap_or_default();
        if !rest.is_empty() && !topic.contains('*') && !topic.contains(char::is_whitespace) {
            return Ok(Some(topic));
        }
        let suggestion = topic
            .trim_start_matches(INPUT_TOPIC_PREFIX)
            .replace('*', "");
        self.error_help(
            Code::InputTopic,
            format!("the input topic `{topic}` does not start with `input.` and a name"),
            span,
            "not an input topic",
            &format!(
                "input topics are `input.` and a name, e.g. `input.{}`, so they never pass for bus events",
                if suggestion.trim().is_empty() { "engine-power" } else { suggestion.trim() }
            ),
        );
        Err(())
    }

    fn format(&mut self, table: &Table<'i>) -> Result<PayloadFormat, ()> {
        let Some((format, span)) = self.string_or_fail(table, "format")? else {
            return Ok(PayloadFormat::String);
        };
        match format.as_str() {
            "string" => Ok(PayloadFormat::String),
            "json" => Ok(PayloadFormat::Json),
            _ => {
                self.error_help(
                    Code::InputFormat,
                    format!("unknown input format `{format}`"),
                    span,
                    "not a format",
                    "write `format = \"string\"` (the default) or `format = \"json\"`",
                );
                Err(())
            }
        }
    }

    fn max_bytes(&mut self, table: &Table<'i>) -> Result<u32, ()> {
        let Some((bytes, span)) = self.integer(table, "max-bytes") else {
            return match entry(table, "max-bytes") {
                Some(_) => Err(()),
                None => Ok(DEFAULT_INPUT_BYTES),
            };
        };
        match u32::try_from(bytes) {
            Ok(0) => Ok(DEFAULT_INPUT_BYTES),
            Ok(bytes) if bytes <= MAX_INPUT_BYTES => Ok(bytes),
            _ => {
                self.error_help(
                    Code::InputMaxBytes,
                    format!("`max-bytes` is {bytes}; it must be 0 to {MAX_INPUT_BYTES}"),
                    span,
                    "out of range",
                    "0 means the default (4096); the most is 65536, the bus' own limit",
                );
                Err(())
            }
        }
    }

    /// Keys of the other kind of input are an error; `None` once reported.
    fn not_here(&mut self, table: &Table<'i>, keys: &[&str], kind: &str) -> Option<()> {
        let Some((key, e)) = keys
            .iter()
            .find_map(|key| entry(table, key).map(|e| (key, e)))
        else {
            return Some(());
        };
        self.error_help(
            Code::InputSource,
            format!("`{key}` has no meaning in {kind}"),
            e.key_span,
            "not for this kind of input",
            "`fields` belongs to a hash input; `format` and `max-bytes` to a channel input",
        );
        None
    }
}

/// Across the rules that survived, in bundle order: a channel read with
/// two formats, a channel named like a watched hash, or more than 64
/// distinct inputs, rejects the later rule with an error naming both
/// places.
pub(super) fn check_across_rules(
    candidates: &mut Vec<(CheckedRule, Range<usize>)>,
) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    let rejected = find_across_rules(candidates, &mut found);
    let mut flags = rejected.into_iter();
    candidates.retain(|_| !flags.next().unwrap_or(false));
    found
}

/// [`check_across_rules`]' findings, and which candidates they reject.
fn find_across_rules(
    candidates: &[(CheckedRule, Range<usize>)],
    found: &mut Vec<Diagnostic>,
) -> Vec<bool> {
    // (input, file, span) of each distinct input kept so far.
    let mut seen: Vec<(&Input, String, Range<usize>)> = Vec::new();
    let mut rejected = vec![false; candidates.len()];
    for (index, (rule, _)) in candidates.iter().enumerate() {
        let before = seen.len();
        for checked in &rule.inputs {
            let problem =
                conflict(&seen, rule, checked).or_else(|| channel_on_hash(&seen, rule, checked));
            if let Some(problem) = problem {
                found.push(problem);
                rejected[index] = true;
            } else if !seen.iter().any(|(input, _, _)| **input == checked.input) {
                seen.push((&checked.input, rule.source.clone(), checked.span.clone()));
            }
        }
        if seen.len() > MAX_INPUTS {
            let (_, first_file, first_span) = &seen[0];
            let past = rule.inputs.iter().find(|c| {
                seen.iter()
                    .position(|(input, _, _)| **input == c.input)
                    .is_some_and(|at| at >= MAX_INPUTS)
            });
            let span = past.map_or(rule.span.clone(), |c| c.span.clone());
            found.push(
                Diagnostic::error(
                    Code::InputLimit,
                    format!("more than {MAX_INPUTS} distinct inputs in the rules"),
                )
                .in_file(&rule.source)
                .at(span, "past the limit")
                .with_related(first_file, first_span.clone(), "the first input")
                .with_help("share identical declarations (they count once), or watch several fields in one hash input")
                .named(&rule.name),
            );
            rejected[index] = true;
        }
        if rejected[index] {
            seen.truncate(before);
        }
    }
    rejected
}

/// A channel input whose channel an earlier input reads with another format.
fn conflict(
    seen: &[(&Input, String, Range<usize>)],
    rule: &CheckedRule,
    checked: &CheckedInput,
) -> Option<Diagnostic> {
    let InputSource::Channel {
        channel, format, ..
    } = &checked.input.source
    else {
        return None;
    };
    let (_, file, span, other) =
        seen.iter()
            .find_map(|(input, file, span)| match &input.source {
                InputSource::Channel {
                    channel: c,
                    format: f,
                    ..
                } if c == channel && f != format => Some((input, file, span, f)),
                _ => None,
            })?;
    Some(
        Diagnostic::error(
            Code::InputConflict,
            format!(
                "the channel `{channel}` is read as {} here and as {} elsewhere",
                format.as_str(),
                other.as_str()
            ),
        )
        .in_file(&rule.source)
        .at(
            checked.span.clone(),
            format!("format \"{}\"", format.as_str()),
        )
        .with_related(file, span.clone(), format!("format \"{}\"", other.as_str()))
        .with_help("one channel has one format: use the same `format` in both inputs")
        .named(&rule.name),
    )
}

/// A channel input and a hash input of one name, the later of the two
/// (in bundle order) reported: the channel carries the hash's change
/// notifications, which the hash input's watch reads.
fn channel_on_hash(
    seen: &[(&Input, String, Range<usize>)],
    rule: &CheckedRule,
    checked: &CheckedInput,
) -> Option<Diagnostic> {
    let (name, other_kind) = match &checked.input.source {
        InputSource::Channel { channel, .. } => (channel, "hash"),
        InputSource::Hash { hash, .. } => (hash, "channel"),
    };
    let (_, file, span) = seen.iter().find(|(input, _, _)| match &input.source {
        InputSource::Channel { channel, .. } => other_kind == "channel" && channel == name,
        InputSource::Hash { hash, .. } => other_kind == "hash" && hash == name,
    })?;
    Some(
        Diagnostic::error(
            Code::InputChannelHash,
            format!(
                "the channel `{name}` is where the watched hash `{name}` announces its changed fields"
            ),
        )
        .in_file(&rule.source)
        .at(checked.span.clone(), format!("a {} input", if other_kind == "hash" { "channel" } else { "hash" }))
        .with_related(file, span.clone(), format!("a {other_kind} input"))
        .with_help(watch_the_hash_help(name))
        .named(&rule.name),
    )
}

/// What to do instead of reading a watched hash's channel.
fn watch_the_hash_help(hash: &str) -> String {
    format!(
        "that channel carries the names of changed fields, not data: watch them with \
         `hash = \"{hash}\"` and `fields = [...]`, or read a channel of its own"
    )
}
