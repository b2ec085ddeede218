//! Per-rule checking state and typed accessors for TOML values: each
//! accessor reports a wrongly typed or malformed value at its span and
//! returns `None` (docs/rules.md#errors-and-warnings: a problem names its file, rule and step
//! and points at the value).

use super::catalogue::RuleUses;
use super::CheckedExpr;
use crate::diagnostic::{Code, Diagnostic};
use crate::load::SourceFile;
use crate::profile::Catalogue;
use crate::rulefile::{RawRule, Spanned, Table};
use crate::span::StringMap;
use crate::when;
use rulecore::limits::MAX_PATTERNS;
use rulecore::{parse_duration, TopicPattern};
use std::ops::Range;
use toml::de::DeValue;

pub(super) type Value<'i> = Spanned<DeValue<'i>>;

/// A topic pattern and its string in the rule file.
pub(super) type Pattern = (TopicPattern, Range<usize>);

/// A key and its value, both with spans.
pub(super) struct Entry<'t, 'i> {
    pub(super) key_span: Range<usize>,
    pub(super) value: &'t Value<'i>,
}

pub(super) fn entry<'t, 'i>(table: &'t Table<'i>, key: &str) -> Option<Entry<'t, 'i>> {
    table
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .map(|(k, value)| Entry {
            key_span: k.span(),
            value,
        })
}

/// The one wrong-type diagnostic of a key's value (rule files, profiles,
/// the envelope's tables): `` `key` must be EXPECTED, found a string ``.
pub(crate) fn wrong_type(key: &str, value: &Value<'_>, expected: &str) -> Diagnostic {
    Diagnostic::error(
        Code::Type,
        format!(
            "`{key}` must be {expected}, found {}",
            type_name(value.get_ref())
        ),
    )
    .at(value.span(), format!("expected {expected}"))
}

/// The one unknown-key diagnostic of a profile's or an envelope table's
/// key (`place`: "in a `[[guard]]`"), with "did you mean" and the keys
/// `allowed`.
pub(crate) fn unknown_key(
    name: &str,
    span: Range<usize>,
    place: &str,
    allowed: &[&str],
) -> Diagnostic {
    let list = allowed
        .iter()
        .map(|key| format!("`{key}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut help = format!("the keys allowed here are {list}");
    let label = match rulecore::suggest::did_you_mean(name, allowed) {
        Some(close) => {
            help = format!("did you mean `{close}`? {help}");
            format!("unknown key; did you mean `{close}`?")
        }
        None => "unknown key".to_string(),
    };
    Diagnostic::error(Code::UnknownKey, format!("unknown key `{name}` {place}"))
        .at(span, label)
        .with_help(help)
}

pub(crate) fn type_name(value: &DeValue<'_>) -> &'static str {
    match value {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Checks one rule; collects its diagnostics.
pub(super) struct RuleChecker<'a, 'i> {
    pub(super) file: &'a SourceFile,
    pub(super) raw: &'a RawRule<'i>,
    pub(super) name: Option<String>,
    pub(super) name_span: Option<Range<usize>>,
    pub(super) enabled: bool,
    /// The step being checked, for diagnostics.
    pub(super) step: Option<usize>,
    /// `step` counts `[[rule.finally]]` steps (docs/rules.md#finally).
    pub(super) finally: bool,
    pub(super) diagnostics: Vec<Diagnostic>,
    /// The bus profile's catalogue the rule is held against, if any.
    pub(super) catalogue: Option<&'a Catalogue>,
    /// What the catalogue checks read, kept whatever else fails: the
    /// rule's checks across files run on a rule with other errors too
    /// (docs/rules.md#errors-and-warnings).
    pub(super) uses: RuleUses,
}

impl<'a, 'i> RuleChecker<'a, 'i> {
    pub(super) fn new(
        file: &'a SourceFile,
        raw: &'a RawRule<'i>,
        catalogue: Option<&'a Catalogue>,
    ) -> Self {
        let enabled = !matches!(
            entry(&raw.table, "enabled").map(|e| e.value.get_ref()),
            Some(DeValue::Boolean(false))
        );
        Self {
            file,
            raw,
            name: None,
            name_span: None,
            enabled,
            step: None,
            finally: false,
            diagnostics: Vec::new(),
            catalogue,
            uses: RuleUses {
                source: file.name.clone(),
                enabled,
                ..RuleUses::default()
            },
        }
    }

    /// Keeps an expression that type-checked for the catalogue checks,
    /// with the step it belongs to.
    pub(super) fn keep_expr(&mut self, expr: &CheckedExpr) {
        let step = self.step.map(|index| (index, self.finally));
        self.uses.exprs.push((step, expr.clone()));
    }

    pub(super) fn push(&mut self, mut diagnostic: Diagnostic) {
        diagnostic.file = Some(self.file.name.clone());
        diagnostic.rule = self.name.clone();
        diagnostic.step = self.step;
        diagnostic.finally = self.finally && self.step.is_some();
        self.diagnostics.push(diagnostic);
    }

    pub(super) fn error(&mut self, code: Code, message: String, span: Range<usize>, label: &str) {
        self.push(Diagnostic::error(code, message).at(span, label));
    }

    pub(super) fn error_help(
        &mut self,
        code: Code,
        message: String,
        span: Range<usize>,
        label: &str,
        help: &str,
    ) {
        self.push(
            Diagnostic::error(code, message)
                .at(span, label)
                .with_help(help),
        );
    }

    pub(super) fn wrong_type(
        &mut self,
        key: &str,
        value: &Value<'_>,
        expected: &str,
        help: Option<&str>,
    ) {
        let mut diagnostic = wrong_type(key, value, expected);
        if let Some(help) = help {
            diagnostic = diagnostic.with_help(help);
        }
        self.push(diagnostic);
    }

    pub(super) fn missing(&mut self, key: &str, span: Range<usize>, what: &str, help: &str) {
        self.push(
            Diagnostic::error(Code::MissingKey, format!("missing `{key}`: {what}"))
                .at(span, format!("`{key}` is required here"))
                .with_help(help),
        );
    }

    pub(super) fn string(
        &mut self,
        table: &Table<'i>,
        key: &str,
    ) -> Option<(String, Range<usize>)> {
        let entry = entry(table, key)?;
        match entry.value.get_ref() {
            DeValue::String(text) => Some((text.to_string(), entry.value.span())),
            _ => {
                let help = string_help(key, entry.value.get_ref());
                self.wrong_type(key, entry.value, "a string", Some(&help));
                None
            }
        }
    }

    pub(super) fn boolean(&mut self, table: &Table<'i>, key: &str) -> Option<(bool, Range<usize>)> {
        let entry = entry(table, key)?;
        match entry.value.get_ref() {
            DeValue::Boolean(value) => Some((*value, entry.value.span())),
            _ => {
                self.wrong_type(
                    key,
                    entry.value,
                    "a boolean (`true` or `false`)",
                    Some(&format!(
                        "write `{key} = true` or `{key} = false`, without quotes"
                    )),
                );
                None
            }
        }
    }

    pub(super) fn integer(&mut self, table: &Table<'i>, key: &str) -> Option<(i128, Range<usize>)> {
        let entry = entry(table, key)?;
        match entry.value.get_ref() {
            DeValue::Integer(value) => {
                let digits = value.as_str().replace('_', "");
                match i128::from_str_radix(&digits, value.radix()) {
                    Ok(number) => Some((number, entry.value.span())),
                    Err(_) => {
                        self.error(
                            Code::Type,
                            format!("`{key}` is out of range"),
                            entry.value.span(),
                            "integer out of range",
                        );
                        None
                    }
                }
            }
            _ => {
                self.wrong_type(
                    key,
                    entry.value,
                    "an integer",
                    Some("write a whole number without quotes, e.g. `3`"),
                );
                None
            }
        }
    }

    /// A duration (Go syntax) in signed nanoseconds. Errors point inside the
    /// string where the parser stopped.
    pub(super) fn duration(&mut self, table: &Table<'i>, key: &str) -> Option<(i64, Range<usize>)> {
        let entry = entry(table, key)?;
        let DeValue::String(text) = entry.value.get_ref() else {
            self.wrong_type(
                key,
                entry.value,
                "a duration string",
                Some("write durations as strings in Go syntax, e.g. `\"30s\"`, `\"1.5h\"`, `\"300ms\"`"),
            );
            return None;
        };
        match parse_duration(text) {
            Ok(nanos) => Some((nanos, entry.value.span())),
            Err(error) => {
                let map = StringMap::new(&self.file.text, entry.value.span(), text);
                let (at, label, help) = super::duration::explain(text, &error);
                let span = if at.is_empty() && text.is_empty() {
                    entry.value.span()
                } else {
                    map.map(at)
                };
                let mut diagnostic = Diagnostic::error(
                    Code::Duration,
                    format!("invalid duration `{text}` for `{key}`"),
                )
                .at(span, label)
                .with_help(help);
                if let Some(fixed) = rulecore::suggest::duration_spelling(text) {
                    diagnostic = diagnostic.with_fix(entry.value.span(), format!("\"{fixed}\""));
                }
                self.push(diagnostic);
                None
            }
        }
    }

    /// A duration that must not be negative (`positive`: must be above
    /// zero). `Ok(None)` when absent; `Err` once the problem is reported.
    pub(super) fn bounded_duration(
        &mut self,
        table: &Table<'i>,
        key: &str,
        positive: bool,
        help: &str,
    ) -> Result<Option<u64>, ()> {
        match self.duration(table, key) {
            Some((nanos, span)) if nanos < 0 || (positive && nanos == 0) => {
                let message = if positive {
                    format!("`{key}` must be positive")
                } else {
                    format!("`{key}` is negative")
                };
                let label = if nanos == 0 {
                    format!("zero {key}")
                } else {
                    "negative duration".to_string()
                };
                self.error_help(Code::DurationRange, message, span, &label, help);
                Err(())
            }
            Some((nanos, _)) => Ok(Some(nanos.unsigned_abs())),
            None if entry(table, key).is_some() => Err(()),
            None => Ok(None),
        }
    }

    pub(super) fn when(&mut self, table: &Table<'i>) -> Result<Option<CheckedExpr>, ()> {
        let Some((text, span)) = self.string_or_fail(table, "when")? else {
            return Ok(None);
        };
        match when::check(&text) {
            Ok(checked) => {
                let map = StringMap::new(&self.file.text, span.clone(), &text);
                for warning in &checked.warnings {
                    let mut diagnostic = Diagnostic::warning(warning.code, warning.message.clone())
                        .at(map.map(warning.span.clone()), warning.label.clone());
                    diagnostic.help = warning.help.clone();
                    self.push(diagnostic);
                }
                if let Some(catalogue) = self.catalogue {
                    for diagnostic in
                        super::profile::state_uses(catalogue, &checked.expr, &text, &map)
                    {
                        self.push(diagnostic);
                    }
                }
                let expr = CheckedExpr {
                    part: 0..text.len(),
                    source: text,
                    checked,
                    span,
                };
                self.keep_expr(&expr);
                Ok(Some(expr))
            }
            Err(problems) => {
                let map = StringMap::new(&self.file.text, span, &text);
                for problem in problems {
                    let fix = problem
                        .fix
                        .and_then(|fix| map.fix(problem.span.clone(), &fix));
                    let mut diagnostic = Diagnostic::error(problem.code, problem.message)
                        .at(map.map(problem.span), problem.label)
                        .with_fix_opt(fix);
                    diagnostic.help = problem.help;
                    self.push(diagnostic);
                }
                Err(())
            }
        }
    }

    /// Like [`Self::string`], but distinguishes "absent" (`Ok(None)`) from
    /// "present and wrong" (`Err`).
    pub(super) fn string_or_fail(
        &mut self,
        table: &Table<'i>,
        key: &str,
    ) -> Result<Option<(String, Range<usize>)>, ()> {
        if entry(table, key).is_none() {
            return Ok(None);
        }
        self.string(table, key).map(Some).ok_or(())
    }

    /// The patterns of `key` that parsed, and whether all of them did
    /// (`None`: absent or not an array). The good ones are returned even
    /// when another failed, so that checks between keys (such as
    /// `redundant-cancel-on`) still report on them.
    pub(super) fn patterns(
        &mut self,
        table: &Table<'i>,
        key: &str,
    ) -> Option<(Vec<Pattern>, bool)> {
        let entry = entry(table, key)?;
        let DeValue::Array(items) = entry.value.get_ref() else {
            let help = if matches!(entry.value.get_ref(), DeValue::String(_)) {
                Some("write a list, even for one pattern: `[\"alarm.triggered\"]`")
            } else {
                None
            };
            self.wrong_type(key, entry.value, "an array of topic patterns", help);
            return None;
        };
        if items.len() > MAX_PATTERNS {
            self.error_help(
                Code::TooManyPatterns,
                format!(
                    "`{key}` lists {} patterns; at most {MAX_PATTERNS} are allowed",
                    items.len()
                ),
                entry.value.span(),
                "too many patterns",
                "a prefix such as `alarm.*` matches a whole family of topics; or split the rule",
            );
            return Some((Vec::new(), false));
        }
        let mut patterns = Vec::new();
        let mut ok = true;
        for item in items.iter() {
            let DeValue::String(text) = item.get_ref() else {
                self.wrong_type(key, item, "a topic pattern string", None);
                ok = false;
                continue;
            };
            let Ok(pattern) = TopicPattern::parse(text) else {
                self.error_help(
                    Code::Pattern,
                    format!("empty topic pattern in `{key}`"),
                    item.span(),
                    "empty pattern",
                    "write a topic such as `alarm.triggered`, a prefix such as `alarm.*`, or `*` for every topic",
                );
                ok = false;
                continue;
            };
            self.pattern_warnings(key, text, &pattern, item.span());
            if let Some((_, first)) = patterns.iter().find(|(p, _)| *p == pattern) {
                let first: &Range<usize> = first;
                self.push(
                    Diagnostic::warning(
                        Code::DuplicatePattern,
                        format!("the pattern `{text}` appears twice in `{key}`"),
                    )
                    .at(item.span(), "repeated pattern")
                    .with_related(&self.file.name, first.clone(), "first listed here")
                    .with_help("remove one of them"),
                );
            }
            patterns.push((pattern, item.span()));
        }
        Some((patterns, ok))
    }

    /// Warnings about how one pattern is written (docs/rules.md#topic-patterns): the
    /// channel prefix, a literal `*`, the empty prefix `.*`, an empty word,
    /// white space.
    fn pattern_warnings(
        &mut self,
        key: &str,
        text: &str,
        pattern: &TopicPattern,
        span: Range<usize>,
    ) {
        // README: events arrive on the channel `ev:<topic>`; the prefix is
        // the channel's, never part of the topic.
        let channel = text.strip_prefix("ev:");
        if let Some(topic) = channel {
            let topic = if topic.is_empty() { "*" } else { topic };
            self.push(
                Diagnostic::warning(
                    Code::PatternChannelPrefix,
                    format!("the pattern `{text}` in `{key}` starts with the channel prefix `ev:`: it can only match a topic that itself starts with `ev:`"),
                )
                .at(span.clone(), "`ev:` belongs to the Redis channel name, not to the topic")
                .with_help(format!("patterns match the topic: write `{topic}`")),
            );
        } else if pattern.has_literal_star() {
            self.push(
                Diagnostic::warning(
                    Code::PatternLiteralStar,
                    format!(
                        "the pattern `{text}` in `{key}` can only match the literal topic `{text}`"
                    ),
                )
                .at(
                    span.clone(),
                    "`*` only works as the whole pattern or as a trailing `.*`",
                )
                .with_help(literal_star_help(text)),
            );
        }
        if *pattern == TopicPattern::Prefix(".".into()) {
            self.push(
                Diagnostic::warning(
                    Code::PatternEmptyPrefix,
                    format!("the pattern `{text}` in `{key}` has an empty prefix: it matches only topics that start with `.`"),
                )
                .at(span.clone(), "nothing before `.*`")
                .with_help("write `*` for every topic, or `prefix.*` (e.g. `alarm.*`) for every topic under `prefix.`"),
            );
        }
        // Topics are dotted words (docs/rules.md#topic-patterns): no empty word. `.*` has
        // its own warning above.
        let body = text.strip_suffix(".*").unwrap_or(text);
        if channel.is_none() && !body.is_empty() && body.split('.').any(str::is_empty) {
            let help = match body.strip_suffix('.') {
                Some(prefix) if !prefix.is_empty() && !prefix.contains("..") => {
                    format!("to match every topic under `{body}`, write `{prefix}.*`")
                }
                _ => "topics are dotted words such as `alarm.triggered`; remove the extra `.`"
                    .to_string(),
            };
            self.push(
                Diagnostic::warning(
                    Code::PatternEmptySegment,
                    format!("the pattern `{text}` in `{key}` has an empty word between dots"),
                )
                .at(span.clone(), "a leading, trailing or doubled `.`")
                .with_help(help),
            );
        }
        if text.chars().any(char::is_whitespace) {
            self.push(
                Diagnostic::warning(
                    Code::PatternWhitespace,
                    format!("the pattern `{text}` in `{key}` contains white space"),
                )
                .at(span, "white space in a topic pattern")
                .with_help(
                    "topics are dotted words such as `alarm.triggered`; remove the white space",
                ),
            );
        }
    }
}

/// Help for a value that should have been a string.
pub(super) fn string_help(key: &str, found: &DeValue<'_>) -> String {
    match (key, found) {
        ("when", DeValue::Boolean(true)) => {
            "remove `when` to fire on every matching event; a condition is a string, \
             e.g. `when = 'to == \"parked\"'`"
                .to_string()
        }
        ("when", _) => {
            "write the condition as a string, e.g. `when = 'to == \"parked\"'`".to_string()
        }
        ("concurrency", _) => {
            "write one of \"restart\", \"drop\" or \"queue\", in quotes".to_string()
        }
        _ => format!("put the value in double quotes: `{key} = \"...\"`"),
    }
}

/// Help for a pattern whose `*` makes it literal: `alarm*` most likely meant
/// `alarm.*`.
fn literal_star_help(text: &str) -> String {
    match text.strip_suffix('*') {
        Some(prefix) if !prefix.is_empty() && !prefix.contains('*') => {
            format!("to match every topic under `{prefix}.`, write `{prefix}.*`")
        }
        _ => "use `*` for every topic or `prefix.*` for every topic under `prefix.`".to_string(),
    }
}
