//! Validation of rule tables (DESIGN.md 3.1–3.7, 3.3, 3.5): every key of
//! every rule and step, the `when` expressions (through [`crate::when`]),
//! names across files, and disabled rules. The output is one
//! [`CheckedRule`] per rule that survived, in bundle order, plus the
//! diagnostics.
//!
//! An error rejects only its rule; file-level problems (syntax, unknown keys)
//! are found earlier by [`crate::rulefile`].

use crate::diagnostic::{Diagnostic, Severity};
use crate::load::SourceFile;
use crate::rulefile::{self, did_you_mean, RawRule, Spanned, Table};
use crate::span::StringMap;
use crate::when::{self, CheckedWhen};
use rulecore::bundle::{Action, CanFrame, Concurrency, Repeat};
use rulecore::{parse_duration, DurationError, TopicPattern};
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use toml::de::DeValue;

/// Default `timeout` of an `exec` step (DESIGN.md 3.2).
pub const DEFAULT_EXEC_TIMEOUT_NS: u64 = 10_000_000_000;

/// A `when` expression that type-checked, with its source text.
#[derive(Debug, Clone)]
pub struct CheckedExpr {
    /// The decoded expression text, as written (TOML quoting removed).
    pub source: String,
    /// What the `when` checker made of it.
    pub checked: CheckedWhen,
    /// The string value in the rule file, quotes included.
    pub span: Range<usize>,
}

/// One step that passed every check; `build` turns it into a
/// `rulecore::bundle::Step` (lowering `when`, computing the fingerprint).
#[derive(Debug, Clone)]
pub struct CheckedStep {
    /// The action with every argument resolved (exec timeout defaulted, CAN
    /// frame parsed).
    pub action: Action,
    pub when: Option<CheckedExpr>,
    /// `after` in nanoseconds, >= 0.
    pub after_ns: u64,
    /// Explicit `durable`, or `after_ns > 0` by default.
    pub durable: bool,
    /// The `[[rule.step]]` header (or inline table) in the rule file.
    pub span: Range<usize>,
}

/// One rule that passed every check, ready for `build` to turn into a
/// `rulecore::bundle::Rule`.
#[derive(Debug, Clone)]
pub struct CheckedRule {
    pub name: String,
    /// The rule file's name relative to the rules directory.
    pub source: String,
    /// `false`: compiled as replay-only (DESIGN.md 3.5).
    pub enabled: bool,
    pub on: Vec<TopicPattern>,
    pub cancel_on: Vec<TopicPattern>,
    pub concurrency: Concurrency,
    /// 0 means none.
    pub cooldown_ns: u64,
    /// 0 means none.
    pub debounce_ns: u64,
    /// `{ count: 1, every_ns: 0 }` when the rule has no `repeat`.
    pub repeat: Repeat,
    pub when: Option<CheckedExpr>,
    pub steps: Vec<CheckedStep>,
    /// The `[[rule]]` header in the rule file.
    pub span: Range<usize>,
}

/// The outcome of validating a rules directory.
#[derive(Debug, Clone, Default)]
pub struct Validated {
    /// Rules that survived, in bundle order (file name order, then position
    /// in the file).
    pub rules: Vec<CheckedRule>,
    /// Every problem, in file order, then position in the file.
    pub diagnostics: Vec<Diagnostic>,
    /// Rule tables read from files that parsed (whether or not they passed).
    pub rules_read: usize,
}

/// Validates every file, in order.
pub fn validate(files: &[SourceFile]) -> Validated {
    let mut out = Validated::default();
    // Rules that passed their own checks, before names are settled.
    let mut candidates: Vec<(CheckedRule, Range<usize>)> = Vec::new();
    for file in files {
        let raw_rules = match rulefile::parse(file) {
            Ok(rules) => rules,
            Err(problems) => {
                out.diagnostics.extend(problems);
                continue;
            }
        };
        out.rules_read += raw_rules.len();
        for raw in &raw_rules {
            let mut checker = RuleChecker::new(file, raw);
            let checked = checker.check();
            let has_errors = checker
                .diagnostics
                .iter()
                .any(|d| d.severity == Severity::Error);
            if has_errors && !checker.enabled {
                // DESIGN.md 3.5: a disabled rule's problems do not fail the
                // check; the rule is left out of the bundle instead.
                for diagnostic in &mut checker.diagnostics {
                    if diagnostic.severity == Severity::Error {
                        diagnostic.severity = Severity::Warning;
                        let note = "this rule is disabled (`enabled = false`), so this is a warning and the rule is left out of the bundle";
                        diagnostic.help = Some(match diagnostic.help.take() {
                            Some(help) => format!("{help}\n{note}"),
                            None => note.to_string(),
                        });
                    }
                }
            }
            out.diagnostics.append(&mut checker.diagnostics);
            if let (Some(rule), false) = (checked, has_errors) {
                let name_span = checker.name_span.clone().unwrap_or(raw.span.clone());
                candidates.push((rule, name_span));
            }
        }
    }
    settle_names(candidates, &mut out);
    // Files are already in order; within a file, order by position. The sort
    // is stable, so diagnostics at one position keep their finding order.
    let file_order: HashMap<&str, usize> = files
        .iter()
        .enumerate()
        .map(|(i, file)| (file.name.as_str(), i))
        .collect();
    out.diagnostics.sort_by_key(|d| {
        (
            d.file
                .as_deref()
                .and_then(|name| file_order.get(name).copied()),
            d.label.as_ref().map_or(0, |label| label.span.start),
        )
    });
    out
}

/// DESIGN.md 3.3 and 3.5: among enabled rules that compiled, the first
/// definition of a name keeps it and later ones are errors; a disabled rule
/// whose name is taken (by an enabled rule, or an earlier disabled one) is
/// left out with a warning, since a pending record could not tell which rule
/// it belongs to.
fn settle_names(candidates: Vec<(CheckedRule, Range<usize>)>, out: &mut Validated) {
    let mut enabled_names: HashMap<String, (String, Range<usize>)> = HashMap::new();
    let mut rejected = vec![false; candidates.len()];
    for (i, (rule, name_span)) in candidates.iter().enumerate() {
        if !rule.enabled {
            continue;
        }
        if let Some((first_file, first_span)) = enabled_names.get(&rule.name) {
            let where_first = if *first_file == rule.source {
                "earlier in this file".to_string()
            } else {
                format!("in {first_file}")
            };
            out.diagnostics.push(
                Diagnostic::error(
                    "rulec::duplicate-name",
                    format!(
                        "the rule name `{}` is already used {where_first}",
                        rule.name
                    ),
                )
                .in_file(&rule.source)
                .at(name_span.clone(), "second definition of this name")
                .with_related(first_file, first_span.clone(), "first defined here")
                .with_help("rule names must be unique across all rule files; rename one of them")
                .named(&rule.name),
            );
            rejected[i] = true;
        } else {
            enabled_names.insert(rule.name.clone(), (rule.source.clone(), name_span.clone()));
        }
    }
    let mut disabled_names: HashMap<String, (String, Range<usize>)> = HashMap::new();
    for (i, (rule, name_span)) in candidates.iter().enumerate() {
        if rule.enabled {
            continue;
        }
        let taken = enabled_names
            .get(&rule.name)
            .map(|first| (first, "an enabled rule"))
            .or_else(|| {
                disabled_names
                    .get(&rule.name)
                    .map(|first| (first, "another disabled rule"))
            });
        if let Some(((first_file, first_span), by)) = taken {
            out.diagnostics.push(
                Diagnostic::warning(
                    "rulec::disabled-duplicate-name",
                    format!(
                        "disabled rule left out: {by} is also named `{}`",
                        rule.name
                    ),
                )
                .in_file(&rule.source)
                .at(name_span.clone(), "this disabled rule is left out of the bundle")
                .with_related(first_file, first_span.clone(), "the name is used here")
                .with_help("a pending record could not tell which of the two rules it belongs to; rename one of them")
                .named(&rule.name),
            );
            rejected[i] = true;
        } else {
            disabled_names.insert(rule.name.clone(), (rule.source.clone(), name_span.clone()));
        }
    }
    out.rules = candidates
        .into_iter()
        .zip(rejected)
        .filter(|(_, rejected)| !rejected)
        .map(|((rule, _), _)| rule)
        .collect();
}

impl Diagnostic {
    fn named(mut self, rule: &str) -> Self {
        self.rule = Some(rule.to_string());
        self
    }
}

type Value<'i> = Spanned<DeValue<'i>>;

/// A key and its value, both with spans.
struct Entry<'t, 'i> {
    key_span: Range<usize>,
    value: &'t Value<'i>,
}

fn entry<'t, 'i>(table: &'t Table<'i>, key: &str) -> Option<Entry<'t, 'i>> {
    table
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .map(|(k, value)| Entry {
            key_span: k.span(),
            value,
        })
}

fn type_name(value: &DeValue<'_>) -> &'static str {
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

const REDIS_KEYS: &[&str] = &["list", "push"];
const EXEC_KEYS: &[&str] = &["command", "timeout"];
const CAN_KEYS: &[&str] = &["iface", "id", "data", "rtr", "dlc"];
const ACTION_KINDS: &[&str] = &["redis", "exec", "can"];

/// Checks one rule; collects its diagnostics.
struct RuleChecker<'a, 'i> {
    file: &'a SourceFile,
    raw: &'a RawRule<'i>,
    name: Option<String>,
    name_span: Option<Range<usize>>,
    enabled: bool,
    /// The step being checked, for diagnostics.
    step: Option<usize>,
    diagnostics: Vec<Diagnostic>,
}

impl<'a, 'i> RuleChecker<'a, 'i> {
    fn new(file: &'a SourceFile, raw: &'a RawRule<'i>) -> Self {
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
            diagnostics: Vec::new(),
        }
    }

    fn push(&mut self, mut diagnostic: Diagnostic) {
        diagnostic.file = Some(self.file.name.clone());
        diagnostic.rule = self.name.clone();
        diagnostic.step = self.step;
        self.diagnostics.push(diagnostic);
    }

    fn error(&mut self, code: &'static str, message: String, span: Range<usize>, label: &str) {
        self.push(Diagnostic::error(code, message).at(span, label));
    }

    fn error_help(
        &mut self,
        code: &'static str,
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

    fn wrong_type(&mut self, key: &str, value: &Value<'_>, expected: &str, help: Option<&str>) {
        let found = type_name(value.get_ref());
        let mut diagnostic = Diagnostic::error(
            "rulec::type",
            format!("`{key}` must be {expected}, found {}", found),
        )
        .at(value.span(), format!("expected {expected}"));
        if let Some(help) = help {
            diagnostic = diagnostic.with_help(help);
        }
        self.push(diagnostic);
    }

    fn missing(&mut self, key: &str, span: Range<usize>, what: &str, help: &str) {
        self.push(
            Diagnostic::error("rulec::missing-key", format!("missing `{key}`: {what}"))
                .at(span, format!("`{key}` is required here"))
                .with_help(help),
        );
    }

    fn string(&mut self, table: &Table<'i>, key: &str) -> Option<(String, Range<usize>)> {
        let entry = entry(table, key)?;
        match entry.value.get_ref() {
            DeValue::String(text) => Some((text.to_string(), entry.value.span())),
            _ => {
                self.wrong_type(key, entry.value, "a string", None);
                None
            }
        }
    }

    fn boolean(&mut self, table: &Table<'i>, key: &str) -> Option<(bool, Range<usize>)> {
        let entry = entry(table, key)?;
        match entry.value.get_ref() {
            DeValue::Boolean(value) => Some((*value, entry.value.span())),
            _ => {
                self.wrong_type(key, entry.value, "a boolean (`true` or `false`)", None);
                None
            }
        }
    }

    fn integer(&mut self, table: &Table<'i>, key: &str) -> Option<(i128, Range<usize>)> {
        let entry = entry(table, key)?;
        match entry.value.get_ref() {
            DeValue::Integer(value) => {
                let digits = value.as_str().replace('_', "");
                match i128::from_str_radix(&digits, value.radix()) {
                    Ok(number) => Some((number, entry.value.span())),
                    Err(_) => {
                        self.error(
                            "rulec::type",
                            format!("`{key}` is out of range"),
                            entry.value.span(),
                            "integer out of range",
                        );
                        None
                    }
                }
            }
            _ => {
                self.wrong_type(key, entry.value, "an integer", None);
                None
            }
        }
    }

    /// A duration (Go syntax) in signed nanoseconds. Errors point inside the
    /// string where the parser stopped.
    fn duration(&mut self, table: &Table<'i>, key: &str) -> Option<(i64, Range<usize>)> {
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
                let (span, label) = match &error {
                    DurationError::Empty | DurationError::Overflow => {
                        (entry.value.span(), error.to_string())
                    }
                    DurationError::ExpectedNumber { at } => {
                        (map.map(*at..*at + 1), "expected a number here".to_string())
                    }
                    DurationError::MissingUnit { at } => (
                        map.map(at.saturating_sub(1)..*at),
                        "missing unit after this number".to_string(),
                    ),
                    DurationError::UnknownUnit { unit, at } => (
                        map.map(*at..*at + unit.len()),
                        format!("unknown unit `{unit}`"),
                    ),
                };
                self.error_help(
                    "rulec::duration",
                    format!("invalid duration `{text}` for `{key}`"),
                    span,
                    &label,
                    "durations use Go syntax: a number and a unit (ns, us, µs, ms, s, m, h), e.g. `\"30s\"`, `\"1.5h\"`, `\"2h45m\"`, or `\"0\"`",
                );
                None
            }
        }
    }

    fn when(&mut self, table: &Table<'i>) -> Result<Option<CheckedExpr>, ()> {
        let Some((text, span)) = self.string_or_fail(table, "when")? else {
            return Ok(None);
        };
        match when::check(&text) {
            Ok(checked) => Ok(Some(CheckedExpr {
                source: text,
                checked,
                span,
            })),
            Err(problems) => {
                let map = StringMap::new(&self.file.text, span, &text);
                for problem in problems {
                    let mut diagnostic = Diagnostic::error(problem.code, problem.message)
                        .at(map.map(problem.span), problem.label);
                    diagnostic.help = problem.help;
                    self.push(diagnostic);
                }
                Err(())
            }
        }
    }

    /// Like [`Self::string`], but distinguishes "absent" (`Ok(None)`) from
    /// "present and wrong" (`Err`).
    fn string_or_fail(
        &mut self,
        table: &Table<'i>,
        key: &str,
    ) -> Result<Option<(String, Range<usize>)>, ()> {
        if entry(table, key).is_none() {
            return Ok(None);
        }
        self.string(table, key).map(Some).ok_or(())
    }

    fn patterns(
        &mut self,
        table: &Table<'i>,
        key: &str,
    ) -> Option<Vec<(TopicPattern, Range<usize>)>> {
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
        let mut patterns = Vec::new();
        let mut ok = true;
        for item in items.iter() {
            let DeValue::String(text) = item.get_ref() else {
                self.wrong_type(key, item, "a topic pattern string", None);
                ok = false;
                continue;
            };
            match TopicPattern::parse(text) {
                Ok(pattern) => {
                    if pattern.has_literal_star() {
                        self.push(
                            Diagnostic::warning(
                                "rulec::pattern-literal-star",
                                format!("the pattern `{text}` in `{key}` can only match the literal topic `{text}`"),
                            )
                            .at(item.span(), "`*` only works as the whole pattern or as a trailing `.*`")
                            .with_help("use `*` for every topic or `prefix.*` for every topic under `prefix.`"),
                        );
                    }
                    if let Some((_, first)) = patterns.iter().find(|(p, _)| *p == pattern) {
                        let first: &Range<usize> = first;
                        self.push(
                            Diagnostic::warning(
                                "rulec::duplicate-pattern",
                                format!("the pattern `{text}` appears twice in `{key}`"),
                            )
                            .at(item.span(), "repeated pattern")
                            .with_related(&self.file.name, first.clone(), "first listed here")
                            .with_help("remove one of them"),
                        );
                    }
                    patterns.push((pattern, item.span()));
                }
                Err(_) => {
                    self.error_help(
                        "rulec::pattern",
                        format!("empty topic pattern in `{key}`"),
                        item.span(),
                        "empty pattern",
                        "write a topic such as `alarm.triggered`, a prefix such as `alarm.*`, or `*` for every topic",
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(patterns)
    }

    fn check(&mut self) -> Option<CheckedRule> {
        let table = &self.raw.table;
        let header = self.raw.span.clone();
        let mut ok = true;

        // name first, so later diagnostics can name the rule.
        match entry(table, "name") {
            None => {
                self.missing(
                    "name",
                    header.clone(),
                    "every rule needs a name",
                    "add `name = \"...\"` under `[[rule]]`",
                );
                ok = false;
            }
            Some(e) => match e.value.get_ref() {
                DeValue::String(text) if text.trim().is_empty() => {
                    self.error_help(
                        "rulec::empty-name",
                        "the rule name is empty".to_string(),
                        e.value.span(),
                        "empty name",
                        "give the rule a short unique name such as `hazards-on-alarm`",
                    );
                    ok = false;
                }
                DeValue::String(text) => {
                    self.name = Some(text.to_string());
                    self.name_span = Some(e.value.span());
                }
                _ => {
                    self.wrong_type("name", e.value, "a string", None);
                    ok = false;
                }
            },
        }
        if let Some(e) = entry(table, "enabled") {
            if !matches!(e.value.get_ref(), DeValue::Boolean(_)) {
                self.wrong_type("enabled", e.value, "a boolean (`true` or `false`)", None);
                ok = false;
            }
        }

        let on = match self.patterns(table, "on") {
            Some(on) if on.is_empty() => {
                let span = entry(table, "on").map_or(header.clone(), |e| e.value.span());
                self.error_help(
                    "rulec::empty-on",
                    "`on` is empty: the rule could never fire".to_string(),
                    span,
                    "no topic patterns",
                    "list at least one topic pattern, e.g. `on = [\"alarm.triggered\"]`",
                );
                ok = false;
                Vec::new()
            }
            Some(on) => on,
            None => {
                if entry(table, "on").is_none() {
                    self.missing(
                        "on",
                        header.clone(),
                        "a rule needs the topics that trigger it",
                        "add e.g. `on = [\"alarm.triggered\"]`",
                    );
                }
                ok = false;
                Vec::new()
            }
        };

        let when = match self.when(table) {
            Ok(when) => when,
            Err(()) => {
                ok = false;
                None
            }
        };
        if let Some(expr) = &when {
            if expr.checked.is_literal_false {
                self.push(
                    Diagnostic::warning(
                        "rulec::never-fires",
                        "the rule's `when` is always false: it can never fire",
                    )
                    .at(expr.span.clone(), "always false")
                    .with_help("remove the rule, or set `enabled = false` to keep it around"),
                );
            }
        }

        let concurrency = match self.string(table, "concurrency") {
            None => {
                ok &= entry(table, "concurrency").is_none();
                Concurrency::Restart
            }
            Some((text, span)) => match text.as_str() {
                "restart" => Concurrency::Restart,
                "drop" => Concurrency::Drop,
                "queue" => Concurrency::Queue,
                other => {
                    let close = did_you_mean(other, &["restart", "drop", "queue"]);
                    let label = match close {
                        Some(close) => format!("unknown policy; did you mean `{close}`?"),
                        None => "unknown policy".to_string(),
                    };
                    self.push(
                        Diagnostic::error("rulec::concurrency", format!("unknown concurrency `{other}`"))
                            .at(span, label)
                            .with_help("`concurrency` is one of \"restart\" (the default: a new trigger restarts the run), \"drop\" (ignore triggers while a run is live) or \"queue\" (run them one after another)"),
                    );
                    ok = false;
                    Concurrency::Restart
                }
            },
        };

        let cancel_on = match self.patterns(table, "cancel-on") {
            Some(cancel_on) => cancel_on,
            None => {
                ok &= entry(table, "cancel-on").is_none();
                Vec::new()
            }
        };
        if concurrency == Concurrency::Restart {
            for (pattern, span) in &cancel_on {
                if let Some((_, on_span)) = on.iter().find(|(p, _)| p == pattern) {
                    self.push(
                        Diagnostic::warning(
                            "rulec::redundant-cancel-on",
                            format!("`cancel-on` repeats the `on` pattern `{pattern}`"),
                        )
                        .at(span.clone(), "also in `on`")
                        .with_related(&self.file.name, on_span.clone(), "the same pattern in `on`")
                        .with_help("under `concurrency = \"restart\"` a new trigger already ends the live run; remove it from `cancel-on`"),
                    );
                }
            }
        }

        let cooldown_ns = match self.duration(table, "cooldown") {
            Some((nanos, span)) if nanos < 0 => {
                self.error_help(
                    "rulec::duration-range",
                    "`cooldown` is negative".to_string(),
                    span,
                    "negative duration",
                    "write a positive duration, or `\"0s\"` (or nothing) for no cooldown",
                );
                ok = false;
                0
            }
            Some((nanos, _)) => nanos.unsigned_abs(),
            None => {
                ok &= entry(table, "cooldown").is_none();
                0
            }
        };
        let debounce_ns = match self.duration(table, "debounce") {
            Some((nanos, span)) if nanos <= 0 => {
                self.error_help(
                    "rulec::duration-range",
                    "`debounce` must be positive".to_string(),
                    span,
                    if nanos == 0 {
                        "zero debounce"
                    } else {
                        "negative duration"
                    },
                    "write a positive quiet window such as `\"500ms\"`, or remove `debounce`",
                );
                ok = false;
                0
            }
            Some((nanos, _)) => nanos.unsigned_abs(),
            None => {
                ok &= entry(table, "debounce").is_none();
                0
            }
        };

        let repeat = match self.repeat(table) {
            Some(repeat) => repeat,
            None => {
                ok = false;
                Repeat {
                    count: 1,
                    every_ns: 0,
                }
            }
        };

        let steps = self.steps(table, &header);
        let steps = match steps {
            Some(steps) => steps,
            None => {
                ok = false;
                Vec::new()
            }
        };

        let name = self.name.clone()?;
        if !ok {
            return None;
        }
        Some(CheckedRule {
            name,
            source: self.file.name.clone(),
            enabled: self.enabled,
            on: on.into_iter().map(|(p, _)| p).collect(),
            cancel_on: cancel_on.into_iter().map(|(p, _)| p).collect(),
            concurrency,
            cooldown_ns,
            debounce_ns,
            repeat,
            when,
            steps,
            span: header,
        })
    }

    /// `None` on error; one pass when absent.
    fn repeat(&mut self, table: &Table<'i>) -> Option<Repeat> {
        let Some(e) = entry(table, "repeat") else {
            return Some(Repeat {
                count: 1,
                every_ns: 0,
            });
        };
        let DeValue::Table(repeat) = e.value.get_ref() else {
            self.wrong_type(
                "repeat",
                e.value,
                "a table `{ count, every }`",
                Some("e.g. `repeat = { count = 3, every = \"10s\" }`"),
            );
            return None;
        };
        let count = match self.integer(repeat, "count") {
            None => {
                if entry(repeat, "count").is_none() {
                    self.error_help(
                        "rulec::repeat",
                        "`repeat` needs a `count`".to_string(),
                        e.value.span(),
                        "no `count`",
                        "write e.g. `repeat = { count = 3, every = \"10s\" }` (count >= 1), or remove `repeat` for one pass",
                    );
                }
                return None;
            }
            Some((count, span)) => match u32::try_from(count) {
                Ok(count) if count >= 1 => count,
                _ => {
                    self.error_help(
                        "rulec::repeat",
                        format!(
                            "`repeat.count` must be at least 1 and at most {}, found {count}",
                            u32::MAX
                        ),
                        span,
                        "out of range",
                        "`count` is the number of passes in all; 1 means no repetition",
                    );
                    return None;
                }
            },
        };
        let every = self.duration(repeat, "every");
        match every {
            None if entry(repeat, "every").is_some() => None,
            None if count > 1 => {
                self.error_help(
                    "rulec::repeat",
                    format!("`repeat` with `count = {count}` needs `every`"),
                    e.value.span(),
                    "no `every`",
                    "add the pause between passes, e.g. `every = \"10s\"`",
                );
                None
            }
            None => Some(Repeat { count, every_ns: 0 }),
            Some((nanos, span)) if nanos <= 0 && count > 1 => {
                self.error_help(
                    "rulec::repeat",
                    "`repeat.every` must be positive".to_string(),
                    span,
                    "not positive",
                    "write the pause between passes, e.g. `every = \"10s\"`",
                );
                None
            }
            Some((nanos, span)) => {
                if count == 1 {
                    self.push(
                        Diagnostic::warning(
                            "rulec::repeat-every-unused",
                            "`repeat.every` has no effect with `count = 1`",
                        )
                        .at(span, "never used")
                        .with_help("raise `count`, or remove `repeat`"),
                    );
                    return Some(Repeat { count, every_ns: 0 });
                }
                Some(Repeat {
                    count,
                    every_ns: nanos.unsigned_abs(),
                })
            }
        }
    }

    /// `None` on error in any step.
    fn steps(&mut self, table: &Table<'i>, header: &Range<usize>) -> Option<Vec<CheckedStep>> {
        let Some(e) = entry(table, "step") else {
            self.missing(
                "step",
                header.clone(),
                "a rule needs at least one step",
                "add a `[[rule.step]]` table after the rule's keys, e.g. `do = \"redis\"`, `list = \"scooter:blinker\"`, `push = \"both\"`",
            );
            return None;
        };
        let DeValue::Array(items) = e.value.get_ref() else {
            self.wrong_type(
                "step",
                e.value,
                "an array of step tables",
                Some("start each step with a `[[rule.step]]` header (two brackets)"),
            );
            return None;
        };
        if items.is_empty() {
            self.error_help(
                "rulec::no-steps",
                "`step` is empty: a rule needs at least one step".to_string(),
                e.value.span(),
                "no steps",
                "add a `[[rule.step]]` table",
            );
            return None;
        }
        let mut steps = Vec::new();
        let mut ok = true;
        let mut never_past: Option<(usize, Range<usize>)> = None;
        for (index, item) in items.iter().enumerate() {
            self.step = Some(index);
            let DeValue::Table(step) = item.get_ref() else {
                self.wrong_type("step", item, "a table", None);
                ok = false;
                continue;
            };
            if let Some((false_step, false_span)) = &never_past {
                let (false_step, false_span) = (*false_step, false_span.clone());
                self.push(
                    Diagnostic::warning(
                        "rulec::unreachable-step",
                        format!("this step can never run: step {false_step}'s `when` is always false"),
                    )
                    .at(item.span(), "unreachable")
                    .with_related(&self.file.name, false_span, "always false: ends every run here")
                    .with_help("a `when` that is false ends the run; remove the condition or the steps after it"),
                );
                never_past = None;
            }
            match self.step_table(step, item.span()) {
                Some(checked) => {
                    if let Some(expr) = &checked.when {
                        if expr.checked.is_literal_false {
                            never_past = Some((index, expr.span.clone()));
                        }
                    }
                    steps.push(checked);
                }
                None => ok = false,
            }
        }
        self.step = None;
        ok.then_some(steps)
    }

    fn step_table(&mut self, step: &Table<'i>, span: Range<usize>) -> Option<CheckedStep> {
        let mut ok = true;
        let when = match self.when(step) {
            Ok(when) => when,
            Err(()) => {
                ok = false;
                None
            }
        };
        let after_ns = match self.duration(step, "after") {
            Some((nanos, span)) if nanos < 0 => {
                self.error_help(
                    "rulec::duration-range",
                    "`after` is negative".to_string(),
                    span,
                    "negative duration",
                    "`after` is a delay: write a positive duration, or `\"0s\"` to run at once",
                );
                ok = false;
                0
            }
            Some((nanos, _)) => nanos.unsigned_abs(),
            None => {
                ok &= entry(step, "after").is_none();
                0
            }
        };
        let durable = match self.boolean(step, "durable") {
            Some((durable, durable_span)) => {
                if after_ns == 0 && ok {
                    let mut diagnostic = Diagnostic::error(
                        "rulec::durable-without-after",
                        "`durable` on a step without a delay",
                    )
                    .at(durable_span, "only meaningful with `after` > 0")
                    .with_help("`durable` says whether a delayed step survives a restart; remove it, or add `after`");
                    if let Some(after) = entry(step, "after") {
                        diagnostic = diagnostic.with_related(
                            &self.file.name,
                            after.value.span(),
                            "`after` is zero here",
                        );
                    }
                    self.push(diagnostic);
                    ok = false;
                }
                durable
            }
            None => {
                ok &= entry(step, "durable").is_none();
                after_ns > 0
            }
        };

        let action = match entry(step, "do") {
            None => {
                self.missing(
                    "do",
                    span.clone(),
                    "every step needs an action",
                    "add `do = \"redis\"`, `do = \"exec\"` or `do = \"can\"`",
                );
                None
            }
            Some(e) => match e.value.get_ref() {
                DeValue::String(kind) => {
                    let kind: &str = kind;
                    match kind {
                        "redis" | "exec" | "can" => {
                            self.other_kind_keys(step, kind);
                            match kind {
                                "redis" => self.redis(step, &span),
                                "exec" => self.exec(step, &span),
                                _ => self.can(step, &span),
                            }
                        }
                        "lua" | "http" => {
                            self.error_help(
                                "rulec::action-unsupported",
                                format!("`{kind}` actions are not supported yet"),
                                e.value.span(),
                                "not supported yet",
                                "supported actions are \"redis\", \"exec\" and \"can\"; an `exec` step can run a script",
                            );
                            None
                        }
                        other => {
                            let label = match did_you_mean(other, ACTION_KINDS) {
                                Some(close) => format!("unknown action; did you mean `{close}`?"),
                                None => "unknown action".to_string(),
                            };
                            self.error_help(
                                "rulec::unknown-action",
                                format!("unknown action `{other}`"),
                                e.value.span(),
                                &label,
                                "`do` is one of \"redis\", \"exec\" or \"can\"",
                            );
                            None
                        }
                    }
                }
                _ => {
                    self.wrong_type(
                        "do",
                        e.value,
                        "a string",
                        Some("`do` is one of \"redis\", \"exec\" or \"can\""),
                    );
                    None
                }
            },
        };
        let action = action?;
        ok.then_some(CheckedStep {
            action,
            when,
            after_ns,
            durable,
            span,
        })
    }

    fn other_kind_keys(&mut self, step: &Table<'i>, kind: &str) {
        for (others, other_kind) in [
            (REDIS_KEYS, "redis"),
            (EXEC_KEYS, "exec"),
            (CAN_KEYS, "can"),
        ] {
            if other_kind == kind {
                continue;
            }
            for key in others {
                if let Some(e) = entry(step, key) {
                    self.push(
                        Diagnostic::warning(
                            "rulec::other-action-key",
                            format!("`{key}` has no effect on a `{kind}` step"),
                        )
                        .at(e.key_span, format!("belongs to `do = \"{other_kind}\"`"))
                        .with_help(format!(
                            "remove `{key}`, or change `do` if this step should be `{other_kind}`"
                        )),
                    );
                }
            }
        }
    }

    /// A required, non-empty string argument of an action.
    fn required_string(
        &mut self,
        step: &Table<'i>,
        key: &str,
        kind: &str,
        header: &Range<usize>,
        example: &str,
    ) -> Option<(String, Range<usize>)> {
        if entry(step, key).is_none() {
            self.missing(
                key,
                header.clone(),
                &format!(
                    "{} `{kind}` step needs `{key}`",
                    if kind == "exec" { "an" } else { "a" }
                ),
                &format!("add e.g. `{key} = {example}`"),
            );
            return None;
        }
        let (text, span) = self.string(step, key)?;
        if text.is_empty() {
            self.error_help(
                "rulec::empty-value",
                format!("`{key}` is empty"),
                span,
                "empty string",
                &format!("write e.g. `{key} = {example}`"),
            );
            return None;
        }
        Some((text, span))
    }

    fn redis(&mut self, step: &Table<'i>, header: &Range<usize>) -> Option<Action> {
        let list = self.required_string(step, "list", "redis", header, "\"scooter:blinker\"");
        let push = self.required_string(step, "push", "redis", header, "\"both\"");
        Some(Action::Redis {
            list: list?.0,
            push: push?.0,
        })
    }

    fn exec(&mut self, step: &Table<'i>, header: &Range<usize>) -> Option<Action> {
        let command = self.required_string(
            step,
            "command",
            "exec",
            header,
            "\"/usr/local/bin/lights-off\"",
        );
        if let Some((text, span)) = &command {
            if text.chars().any(char::is_whitespace) {
                self.push(
                    Diagnostic::warning(
                        "rulec::exec-arguments",
                        format!("`command` contains white space: `{text}` is run as one executable name, not split into arguments"),
                    )
                    .at(span.clone(), "one program path, no arguments, no shell")
                    .with_help("put the arguments in a small script and run that; the event arrives on stdin and in `LS_*` variables"),
                );
            }
        }
        let timeout_ns = match self.duration(step, "timeout") {
            Some((nanos, span)) if nanos <= 0 => {
                self.error_help(
                    "rulec::duration-range",
                    "`timeout` must be positive".to_string(),
                    span,
                    if nanos == 0 { "zero timeout" } else { "negative duration" },
                    "write how long the command may run, e.g. `timeout = \"5s\"` (the default is 10s)",
                );
                None
            }
            Some((nanos, _)) => Some(nanos.unsigned_abs()),
            None if entry(step, "timeout").is_some() => None,
            None => Some(DEFAULT_EXEC_TIMEOUT_NS),
        };
        Some(Action::Exec {
            command: command?.0,
            timeout_ns: timeout_ns?,
        })
    }

    /// DESIGN.md 3.6.
    fn can(&mut self, step: &Table<'i>, header: &Range<usize>) -> Option<Action> {
        let mut ok = true;
        let iface = match self.required_string(step, "iface", "can", header, "\"can0\"") {
            Some((iface, span)) => {
                let bad = iface
                    .chars()
                    .find(|c| c.is_whitespace() || *c == '/' || *c == '\0');
                if iface.len() > 15 {
                    self.error_help(
                        "rulec::can-iface",
                        format!(
                            "interface name `{iface}` is {} bytes long; at most 15",
                            iface.len()
                        ),
                        span,
                        "too long",
                        "SocketCAN interface names are 1 to 15 bytes, e.g. `can0`",
                    );
                    ok = false;
                } else if let Some(bad) = bad {
                    self.error_help(
                        "rulec::can-iface",
                        format!("interface name `{}` contains {bad:?}", iface.escape_debug()),
                        span,
                        "white space, `/` and NUL are not allowed",
                        "SocketCAN interface names look like `can0` or `vcan1`",
                    );
                    ok = false;
                }
                iface
            }
            None => {
                ok = false;
                String::new()
            }
        };

        let id = match entry(step, "id") {
            None => {
                self.missing(
                    "id",
                    header.clone(),
                    "a `can` step needs the frame's `id`",
                    "add e.g. `id = \"0x123\"`",
                );
                None
            }
            Some(e) => {
                let span = e.value.span();
                let parsed: Option<u64> = match e.value.get_ref() {
                    DeValue::String(text) => {
                        let digits = text
                            .strip_prefix("0x")
                            .or_else(|| text.strip_prefix("0X"))
                            .unwrap_or(text);
                        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
                            self.error_help("rulec::can-id", format!("`id` `{text}` is not hexadecimal"), span.clone(), "expected hex digits, optionally after `0x`", "write e.g. `id = \"0x123\"` (standard) or `id = \"0x18FF50E5\"` (extended)");
                            None
                        } else {
                            Some(u64::from_str_radix(digits, 16).unwrap_or(u64::MAX))
                        }
                    }
                    DeValue::Integer(_) => match self.integer(step, "id") {
                        Some((n, _)) if n < 0 => {
                            self.error_help(
                                "rulec::can-id",
                                format!("`id` is negative ({n})"),
                                span.clone(),
                                "negative id",
                                "write e.g. `id = \"0x123\"`",
                            );
                            None
                        }
                        Some((n, _)) => Some(u64::try_from(n).unwrap_or(u64::MAX)),
                        None => None,
                    },
                    _ => {
                        self.wrong_type(
                            "id",
                            e.value,
                            "a hex string",
                            Some("write e.g. `id = \"0x123\"`"),
                        );
                        None
                    }
                };
                match parsed {
                    Some(id) if id <= 0x1FFF_FFFF => u32::try_from(id).ok(),
                    Some(_) => {
                        self.error_help(
                            "rulec::can-id",
                            "`id` is larger than 0x1FFFFFFF".to_string(),
                            span,
                            "above the 29-bit extended range",
                            "standard ids go up to 0x7FF, extended ids up to 0x1FFFFFFF",
                        );
                        None
                    }
                    None => None,
                }
            }
        };

        let data = match self.string(step, "data") {
            Some((text, span)) => match parse_can_data(&text) {
                Ok(bytes) => Some(Some((bytes, span))),
                Err(problem) => {
                    self.error_help("rulec::can-data", format!("`data` `{text}`: {problem}"), span, &problem, "write hex bytes, contiguous (`\"DEADBEEF\"`) or separated by spaces (`\"DE AD BE EF\"`), at most 8 bytes");
                    None
                }
            },
            None if entry(step, "data").is_some() => None,
            None => Some(None),
        };
        let rtr = match self.boolean(step, "rtr") {
            Some((rtr, _)) => Some(rtr),
            None if entry(step, "rtr").is_some() => None,
            None => Some(false),
        };
        let dlc = match self.integer(step, "dlc") {
            Some((dlc, span)) => match u8::try_from(dlc) {
                Ok(dlc) if dlc <= 8 => Some(Some((dlc, span))),
                _ => {
                    self.error_help(
                        "rulec::can-dlc",
                        format!("`dlc` must be 0 to 8, found {dlc}"),
                        span,
                        "out of range",
                        "a classic CAN frame carries 0 to 8 bytes",
                    );
                    None
                }
            },
            None if entry(step, "dlc").is_some() => None,
            None => Some(None),
        };
        let (id, data, rtr, dlc) = (id?, data?, rtr?, dlc?);
        if !ok {
            return None;
        }
        let (data_bytes, dlc) = if rtr {
            if let Some((_, span)) = data.filter(|(bytes, _)| !bytes.is_empty()) {
                self.error_help(
                    "rulec::can-rtr-data",
                    "a remote frame (`rtr = true`) carries no data".to_string(),
                    span,
                    "data on a remote frame",
                    "remove `data`, and use `dlc` for the length the remote frame requests",
                );
                return None;
            }
            (Vec::new(), dlc.map_or(0, |(dlc, _)| dlc))
        } else {
            if let Some((_, span)) = dlc {
                self.error_help("rulec::can-dlc", "`dlc` is only for remote frames (`rtr = true`)".to_string(), span, "only with `rtr = true`", "a data frame's length is the length of `data`; remove `dlc`, or set `rtr = true`");
                return None;
            }
            let bytes = data.map(|(bytes, _)| bytes).unwrap_or_default();
            let len = u8::try_from(bytes.len()).unwrap_or(u8::MAX);
            (bytes, len)
        };
        Some(Action::Can(CanFrame {
            iface,
            id,
            extended: id > 0x7FF,
            rtr,
            dlc,
            data: data_bytes,
        }))
    }
}

/// CAN `data` (DESIGN.md 3.6): hex, either contiguous (even length) or byte
/// pairs separated by white space, at most 8 bytes, may be empty.
pub fn parse_can_data(text: &str) -> Result<Vec<u8>, String> {
    let groups: Vec<&str> = text.split_whitespace().collect();
    let pairs: Vec<Cow<'_, str>> = if groups.len() > 1 {
        if let Some(bad) = groups.iter().find(|g| g.len() != 2) {
            return Err(format!("`{bad}` is not one byte (two hex digits)"));
        }
        groups.into_iter().map(Cow::Borrowed).collect()
    } else {
        let joined = groups.first().copied().unwrap_or("");
        if joined.len() % 2 != 0 {
            return Err("odd number of hex digits".to_string());
        }
        (0..joined.len() / 2)
            .map(|i| Cow::Borrowed(joined.get(2 * i..2 * i + 2).unwrap_or("")))
            .collect()
    };
    let mut bytes = Vec::new();
    for pair in pairs {
        let byte = u8::from_str_radix(&pair, 16)
            .ok()
            .filter(|_| pair.chars().all(|c| c.is_ascii_hexdigit()))
            .ok_or_else(|| format!("`{pair}` is not hexadecimal"))?;
        bytes.push(byte);
    }
    if bytes.len() > 8 {
        return Err(format!(
            "{} bytes; a CAN frame carries at most 8",
            bytes.len()
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn can_data_forms() {
        assert_eq!(parse_can_data(""), Ok(vec![]));
        assert_eq!(parse_can_data("DEADbeef"), Ok(vec![0xDE, 0xAD, 0xBE, 0xEF]));
        assert_eq!(
            parse_can_data(" de ad  be\tef "),
            Ok(vec![0xDE, 0xAD, 0xBE, 0xEF])
        );
        assert!(parse_can_data("ABC").is_err());
        assert!(parse_can_data("AB C").is_err());
        assert!(parse_can_data("zz").is_err());
        assert!(parse_can_data("+1").is_err());
        assert!(parse_can_data("0102030405060708").is_ok());
        assert!(parse_can_data("010203040506070809").is_err());
        // A non-ASCII character must not panic on slicing.
        assert!(parse_can_data("éé").is_err());
    }
}
