//! The topic catalogue (docs/rules.md#the-topic-catalogue): `[[topic]]`
//! declarations in any rule file, and what `rulec check` holds the rules
//! against once a directory declares at least one topic: `on` and
//! `cancel-on` patterns that match no declared topic (a warning, with "did
//! you mean"; an error when one edit from a known topic), and, for a rule whose `on` patterns match only declared
//! topics, every `data.*` key its conditions read (an undeclared key or a
//! type mismatch is an error). The catalogue is not in the bundle.
//!
//! With a bus profile, its derived topics join the declarations (a
//! directory's own `[[topic]]` of the same name wins), and a rule whose
//! `on` matches only profile topics has its `to`/`from` comparisons held
//! against their values (`super::profile`).

use super::checker::Pattern;
use super::{CheckedExpr, CheckedRule, Validated};
use crate::diagnostic::{Code, Diagnostic, Severity};
use crate::keys::DATA_TYPES;
use crate::load::SourceFile;
use crate::profile::catalogue::{DataType, TopicShape};
use crate::profile::Catalogue;
use crate::rulefile::RawTopic;
use crate::span::StringMap;
use crate::when::{BinOp, Expr, ExprKind, Ty};
use rulecore::bundle::InputSource;
use rulecore::suggest::{did_you_mean, edit_distance};
use rulecore::TopicPattern;
use std::collections::BTreeMap;
use std::ops::Range;
use toml::de::DeValue;

/// The declared type of a `data` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DataTy {
    Str,
    Int,
    Float,
    Bool,
    /// Not checked.
    Any,
}

impl DataTy {
    fn parse(name: &str) -> Option<DataTy> {
        Some(match name {
            "string" => DataTy::Str,
            "int" => DataTy::Int,
            "float" => DataTy::Float,
            "bool" => DataTy::Bool,
            "any" => DataTy::Any,
            _ => return None,
        })
    }

    /// As `[[topic]]` writes it.
    fn keyword(self) -> &'static str {
        match self {
            DataTy::Str => "string",
            DataTy::Int => "int",
            DataTy::Float => "float",
            DataTy::Bool => "bool",
            DataTy::Any => "any",
        }
    }

    fn name(self) -> &'static str {
        match self {
            DataTy::Str => "a string",
            DataTy::Int => "an int",
            DataTy::Float => "a float",
            DataTy::Bool => "a boolean",
            DataTy::Any => "any value",
        }
    }
}

/// Where a topic of the catalogue comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicOrigin {
    /// A `[[topic]]` of the directory.
    Declared,
    /// A `[[rule.input]]`'s implicit topic (docs/rules.md#inputs).
    Input,
    /// The bus profile derives it (docs/sources.md).
    Profile,
}

/// One topic of the catalogue the rules were held against: what editors
/// complete and explain (docs/editors.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogueTopic {
    pub name: String,
    /// Each `data` key and its type as `[[topic]]` writes it (`int`, `any`).
    pub data: Vec<(String, &'static str)>,
    /// The rule file of its `[[topic]]` or input (empty for the profile's).
    pub file: String,
    /// That table in the file.
    pub span: Range<usize>,
    pub origin: TopicOrigin,
}

/// One declared topic.
#[derive(Debug, Clone)]
pub(super) struct Topic {
    name: String,
    data: BTreeMap<String, DataTy>,
    file: String,
    span: Range<usize>,
    /// The profile's shape, for a topic the profile derives.
    shape: Option<TopicShape>,
}

/// The topics `raw` declares in `file`; a malformed declaration is an error
/// and is left out.
pub(super) fn declarations(
    file: &SourceFile,
    raw: &[RawTopic<'_>],
    out: &mut Validated,
) -> Vec<Topic> {
    raw.iter()
        .filter_map(|topic| declaration(file, topic, &mut out.diagnostics))
        .collect()
}

fn declaration(
    file: &SourceFile,
    raw: &RawTopic<'_>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Topic> {
    let error = |message: String, span: Range<usize>, label: &str, help: String| {
        Diagnostic::error(Code::Topic, message)
            .in_file(&file.name)
            .at(span, label)
            .with_help(help)
    };
    let before = diagnostics.len();
    let mut name = None;
    let mut data = BTreeMap::new();
    for (key, value) in raw.table.iter() {
        let span = value.span();
        match (key.get_ref().as_ref(), value.get_ref()) {
            ("name", DeValue::String(text)) if valid_topic(text) => name = Some(text.to_string()),
            ("name", _) => diagnostics.push(error(
                "a topic's `name` must be one topic, such as `battery.charge.changed`".into(),
                span,
                "not a topic name",
                "write the topic exactly as events carry it: no `*`, no white space".into(),
            )),
            ("from" | "to", DeValue::Boolean(_)) => {}
            ("data", DeValue::Table(table)) => {
                for (data_key, ty) in table.iter() {
                    let ty_span = ty.span();
                    match ty.get_ref().as_str().and_then(DataTy::parse) {
                        Some(ty) => {
                            data.insert(data_key.get_ref().to_string(), ty);
                        }
                        None => {
                            let near = near_type(ty.get_ref().as_str());
                            let diagnostic = error(
                                format!("`data.{}` has no type `when` knows", data_key.get_ref()),
                                ty_span.clone(),
                                "not a type",
                                type_help(near),
                            );
                            diagnostics.push(match near {
                                Some(near) => diagnostic.with_fix(ty_span, format!("\"{near}\"")),
                                None => diagnostic,
                            });
                        }
                    }
                }
            }
            (key, _) => diagnostics.push(error(
                format!("`{key}` has the wrong type in a topic"),
                span,
                "wrong type",
                match key {
                    "data" => "write `data = { slot = \"int\" }`".into(),
                    _ => format!("write `{key} = true` or `{key} = false`"),
                },
            )),
        }
    }
    if name.is_none() && diagnostics.len() == before {
        diagnostics.push(error(
            "a topic needs a `name`".into(),
            raw.span.clone(),
            "no name",
            "add e.g. `name = \"battery.charge.changed\"`".into(),
        ));
    }
    (diagnostics.len() == before).then(|| Topic {
        name: name.unwrap_or_default(),
        data,
        file: file.name.clone(),
        span: raw.span.clone(),
        shape: None,
    })
}

fn valid_topic(text: &str) -> bool {
    !text.is_empty() && !text.contains('*') && !text.contains(char::is_whitespace)
}

/// The type most likely meant by a `data` type `when` does not know.
fn near_type(written: Option<&str>) -> Option<&'static str> {
    written.and_then(|w| match w {
        "str" | "text" => Some("string"),
        "integer" | "number" => Some("int"),
        "boolean" => Some("bool"),
        "double" => Some("float"),
        other => did_you_mean(other, DATA_TYPES),
    })
}

fn type_help(near: Option<&str>) -> String {
    let list = DATA_TYPES.join(", ");
    match near {
        Some(near) => format!("did you mean `\"{near}\"`? the types are {list}"),
        None => format!("the types are {list} (`any` is not checked)"),
    }
}

/// Holds every enabled rule against the catalogue, once there is one. A
/// rule with an error (or, with `deny_warnings`, a warning) from it is
/// rejected like any other.
pub(super) fn check_rules<'o>(
    topics: &[Topic],
    profile: Option<&Catalogue>,
    files: &[SourceFile],
    deny_warnings: bool,
    candidates: &mut Vec<(CheckedRule, Range<usize>)>,
    others: impl Iterator<Item = &'o RuleUses>,
    out: &mut Validated,
) {
    let implicit = input_topics(candidates);
    let derived = profile.map(profile_topics).unwrap_or_default();
    if topics.is_empty() && implicit.is_empty() && derived.is_empty() {
        return;
    }
    let mut topics = unique(topics, &mut out.diagnostics);
    // An explicit declaration of an input topic wins over the generated
    // one, and of a derived topic over the profile's.
    for topic in implicit.iter().chain(&derived) {
        if !topics.iter().any(|declared| declared.name == topic.name) {
            topics.push(topic);
        }
    }
    out.topics = topics
        .iter()
        .map(|topic| {
            let origin = if topic.shape.is_some() {
                TopicOrigin::Profile
            } else if implicit.iter().any(|input| std::ptr::eq(input, *topic)) {
                TopicOrigin::Input
            } else {
                TopicOrigin::Declared
            };
            CatalogueTopic {
                name: topic.name.clone(),
                data: topic
                    .data
                    .iter()
                    .map(|(key, ty)| (key.clone(), ty.keyword()))
                    .collect(),
                file: topic.file.clone(),
                span: topic.span.clone(),
                origin,
            }
        })
        .collect();
    let known = if derived.is_empty() {
        "declared"
    } else {
        "known"
    };
    candidates.retain(|(rule, _)| {
        if !rule.enabled {
            // Replay-only: it matches nothing, so its topics do not matter.
            return true;
        }
        let Some(file) = files.iter().find(|file| file.name == rule.source) else {
            return true;
        };
        let found = check_uses(&topics, known, file, &View::of(rule));
        let rejected = found
            .iter()
            .any(|d| d.severity == Severity::Error || deny_warnings);
        for diagnostic in found {
            out.diagnostics
                .push(diagnostic.in_file(&rule.source).named(&rule.name));
        }
        !rejected
    });
    // Rules with other errors are held against the catalogue too, so that
    // one run tells all (docs/rules.md#errors-and-warnings).
    for uses in others.filter(|uses| uses.enabled) {
        let Some(file) = files.iter().find(|file| file.name == uses.source) else {
            continue;
        };
        for mut diagnostic in check_uses(&topics, known, file, &View::of_uses(uses)) {
            diagnostic.file = Some(uses.source.clone());
            diagnostic.rule = uses.name.clone();
            out.diagnostics.push(diagnostic);
        }
    }
}

/// What the catalogue checks read of a rule that was not compiled (it has
/// other errors, or its file is rejected): the parts of it that parsed.
#[derive(Debug, Clone, Default)]
pub(super) struct RuleUses {
    pub(super) name: Option<String>,
    pub(super) source: String,
    pub(super) enabled: bool,
    pub(super) on: Vec<Pattern>,
    /// Every `on` pattern parsed, so the topics they match type `data.*`.
    pub(super) on_complete: bool,
    /// Its `[[rule.input]]` failed: the topics it would declare are
    /// unknown, so `input.*` patterns are not held against the catalogue.
    pub(super) inputs_failed: bool,
    pub(super) cancel_on: Vec<Pattern>,
    /// Every expression that type-checked, with its step (`None`: the
    /// rule's `when`) and whether that is a finally step.
    pub(super) exprs: Vec<(Option<(usize, bool)>, CheckedExpr)>,
}

impl RuleUses {
    /// The uses of a rule that passed its own checks (in a rejected file).
    pub(super) fn of_rule(rule: &CheckedRule) -> RuleUses {
        let view = View::of(rule);
        RuleUses {
            name: Some(rule.name.clone()),
            source: rule.source.clone(),
            enabled: rule.enabled,
            on: view
                .on
                .iter()
                .map(|(p, s)| ((*p).clone(), (*s).clone()))
                .collect(),
            on_complete: true,
            inputs_failed: false,
            cancel_on: view
                .cancel_on
                .iter()
                .map(|(p, s)| ((*p).clone(), (*s).clone()))
                .collect(),
            exprs: view
                .exprs
                .iter()
                .map(|(step, expr)| (*step, (*expr).clone()))
                .collect(),
        }
    }
}

/// A rule as the catalogue checks read it, borrowed from a
/// [`CheckedRule`] or from [`RuleUses`].
struct View<'r> {
    on: Vec<(&'r TopicPattern, &'r Range<usize>)>,
    on_complete: bool,
    cancel_on: Vec<(&'r TopicPattern, &'r Range<usize>)>,
    exprs: Vec<(Option<(usize, bool)>, &'r CheckedExpr)>,
}

impl<'r> View<'r> {
    fn of(rule: &'r CheckedRule) -> View<'r> {
        View {
            on: rule.on.iter().zip(&rule.on_spans).collect(),
            on_complete: true,
            cancel_on: rule.cancel_on.iter().zip(&rule.cancel_on_spans).collect(),
            exprs: rule
                .when
                .iter()
                .map(|expr| (None, expr))
                .chain(
                    rule.step_whens()
                        .map(|(index, finally, expr)| (Some((index, finally)), expr)),
                )
                .collect(),
        }
    }

    fn of_uses(uses: &'r RuleUses) -> View<'r> {
        // An input that failed declares nothing: its topics' patterns
        // would be reported for that other error.
        let kept = |(pattern, _): &&Pattern| !(uses.inputs_failed && covers_input(pattern));
        View {
            on: uses.on.iter().filter(kept).map(|(p, s)| (p, s)).collect(),
            on_complete: uses.on_complete && !uses.inputs_failed,
            cancel_on: uses
                .cancel_on
                .iter()
                .filter(kept)
                .map(|(p, s)| (p, s))
                .collect(),
            exprs: uses
                .exprs
                .iter()
                .map(|(step, expr)| (*step, expr))
                .collect(),
        }
    }
}

/// Whether `pattern` may match an input's topic (`input.*`).
fn covers_input(pattern: &TopicPattern) -> bool {
    match pattern {
        TopicPattern::Exact(name) => name.starts_with("input."),
        TopicPattern::Prefix(prefix) => {
            prefix.starts_with("input.") || "input.".starts_with(&**prefix)
        }
        TopicPattern::Any => true,
    }
}

/// One rule's catalogue checks: its topics, its `data.*` keys, and its
/// `to`/`from` values against the profile's topics.
fn check_uses(
    topics: &[&Topic],
    known: &str,
    file: &SourceFile,
    rule: &View<'_>,
) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    let typed = patterns(topics, known, rule, &mut found);
    let Some(matched) = typed.filter(|_| rule.on_complete) else {
        return found;
    };
    for (_, expr) in &rule.exprs {
        data_uses(&matched, file, expr, &mut found);
    }
    // `to`/`from` are known only when every matched topic is the
    // profile's.
    let shapes: Option<Vec<&TopicShape>> =
        matched.iter().map(|topic| topic.shape.as_ref()).collect();
    if let Some(shapes) = shapes {
        for (step, expr) in &rule.exprs {
            let map = expr.map(&file.text);
            for mut diagnostic in super::profile::event_values(&shapes, &expr.checked.expr, &map) {
                diagnostic.step = step.map(|(index, _)| index);
                diagnostic.finally = step.is_some_and(|(_, finally)| finally);
                found.push(diagnostic);
            }
        }
    }
    found
}

/// The topics the live rules' inputs declare implicitly, with the shape
/// of the events they make (docs/rules.md#inputs): `from`/`to` and
/// `data.hash`/`data.field` strings for a hash input, `data.channel` a
/// string and `data.payload` anything for a channel input.
fn input_topics(candidates: &[(CheckedRule, Range<usize>)]) -> Vec<Topic> {
    let mut topics = Vec::new();
    for (rule, _) in candidates.iter().filter(|(rule, _)| rule.enabled) {
        for checked in &rule.inputs {
            let Some(name) = &checked.input.topic else {
                continue;
            };
            let data: BTreeMap<String, DataTy> = match checked.input.source {
                InputSource::Hash { .. } => [("hash", DataTy::Str), ("field", DataTy::Str)],
                InputSource::Channel { .. } => [("channel", DataTy::Str), ("payload", DataTy::Any)],
            }
            .into_iter()
            .map(|(key, ty)| (key.to_string(), ty))
            .collect();
            topics.push(Topic {
                name: name.clone(),
                data,
                file: rule.source.clone(),
                span: checked.span.clone(),
                shape: None,
            });
        }
    }
    topics
}

/// The topics a profile derives, as declarations with their shapes: the
/// `data` types as `[[topic]]` writes them (a type known only at run time
/// is `any`).
fn profile_topics(catalogue: &Catalogue) -> Vec<Topic> {
    catalogue
        .topics
        .iter()
        .map(|shape| Topic {
            name: shape.name.clone(),
            data: shape
                .data
                .iter()
                .map(|(key, ty)| {
                    let ty = match ty {
                        Some(DataType::Str) => DataTy::Str,
                        Some(DataType::Int) => DataTy::Int,
                        Some(DataType::Float) => DataTy::Float,
                        Some(DataType::Bool) => DataTy::Bool,
                        None => DataTy::Any,
                    };
                    (key.clone(), ty)
                })
                .collect(),
            file: String::new(),
            span: 0..0,
            shape: Some(shape.clone()),
        })
        .collect()
}

/// The declarations, the first of each name: a second one is an error.
fn unique<'t>(topics: &'t [Topic], diagnostics: &mut Vec<Diagnostic>) -> Vec<&'t Topic> {
    let mut kept: Vec<&Topic> = Vec::new();
    for topic in topics {
        match kept.iter().find(|first| first.name == topic.name) {
            Some(first) => diagnostics.push(
                Diagnostic::error(
                    Code::Topic,
                    format!("the topic `{}` is declared twice", topic.name),
                )
                .in_file(&topic.file)
                .at(topic.span.clone(), "second declaration")
                .with_related(&first.file, first.span.clone(), "first declared here")
                .with_help("keep one declaration of each topic"),
            ),
            None => kept.push(topic),
        }
    }
    kept
}

/// Warns on every `on` and `cancel-on` pattern that matches no declared
/// topic. Returns the declared topics the rule's `on` matches, when each
/// of its `on` patterns matches at least one (then `data.*` is typed).
fn patterns<'t>(
    topics: &[&'t Topic],
    known: &str,
    rule: &View<'_>,
    found: &mut Vec<Diagnostic>,
) -> Option<Vec<&'t Topic>> {
    let mut matched = Vec::new();
    let mut typed = true;
    let lists = [("on", &rule.on), ("cancel-on", &rule.cancel_on)];
    for (key, list) in lists {
        for &(pattern, span) in list.iter() {
            let hits: Vec<&Topic> = topics
                .iter()
                .copied()
                .filter(|topic| pattern.matches(&topic.name))
                .collect();
            if hits.is_empty() {
                found.push(unknown_topic(topics, known, key, pattern, span.clone()));
                typed &= key != "on";
            } else if key == "on" {
                matched.extend(hits);
            }
        }
    }
    typed.then_some(matched)
}

fn unknown_topic(
    topics: &[&Topic],
    known: &str,
    key: &str,
    pattern: &TopicPattern,
    span: Range<usize>,
) -> Diagnostic {
    let names: Vec<&str> = topics.iter().map(|topic| topic.name.as_str()).collect();
    // The pattern most likely meant, as it would be written.
    let near = match pattern {
        TopicPattern::Exact(name) => did_you_mean(name, &names).map(str::to_string),
        TopicPattern::Prefix(prefix) => {
            // Prefixes of the declared topics, as patterns: `battery.*`.
            let mut prefixes: Vec<String> = names
                .iter()
                .flat_map(|name| {
                    name.match_indices('.')
                        .map(|(at, _)| format!("{}.", &name[..at]))
                })
                .collect();
            prefixes.sort();
            prefixes.dedup();
            let refs: Vec<&str> = prefixes.iter().map(String::as_str).collect();
            did_you_mean(prefix, &refs).map(|near| format!("{near}*"))
        }
        TopicPattern::Any => None,
    };
    // One edit from a known topic is surely a typo, and the rule would
    // build and never fire: an error, unless a `[[topic]]` says the
    // pattern's topic is meant (then it matches it and we are not here).
    if let Some(near) = near.as_deref().filter(|near| one_edit(pattern, near)) {
        return Diagnostic::error(
            Code::NearMissTopic,
            format!("`{key}` pattern `{pattern}` matches no {known} topic, and is one edit from `{near}`"),
        )
        .at(span.clone(), format!("one edit from `{near}`"))
        .with_help(match declared_name(pattern) {
            Some(name) => format!(
                "did you mean `{near}`? if `{pattern}` is meant, declare its topic in a `[[topic]]` table (`name = \"{name}\"`)"
            ),
            None => format!("did you mean `{near}`?"),
        })
        .with_fix(span, crate::diagnostic::toml_string(near));
    }
    let help = match &near {
        Some(near) => {
            format!("did you mean `{near}`? otherwise declare the topic in a `[[topic]]` table")
        }
        None => "declare the topic in a `[[topic]]` table, or fix the pattern".into(),
    };
    let diagnostic = Diagnostic::warning(
        Code::UnknownTopic,
        format!("`{key}` pattern `{pattern}` matches no {known} topic"),
    )
    .at(span.clone(), format!("no {known} topic matches"))
    .with_help(help);
    match near {
        Some(near) => diagnostic.with_fix(span, crate::diagnostic::toml_string(&near)),
        None => diagnostic,
    }
}

/// Whether `pattern` is one edit (a character added, left out, changed,
/// or two neighbours swapped) from the pattern `near` as written.
fn one_edit(pattern: &TopicPattern, near: &str) -> bool {
    edit_distance(&pattern.to_string(), near) == 1
}

/// A topic name a `[[topic]]` could declare so that `pattern` matches it;
/// `None` when no topic can be so named (white space in the pattern).
fn declared_name(pattern: &TopicPattern) -> Option<String> {
    let name = match pattern {
        TopicPattern::Exact(name) => name.to_string(),
        TopicPattern::Prefix(prefix) => format!("{prefix}NAME"),
        TopicPattern::Any => return None,
    };
    valid_topic(&name).then_some(name)
}

/// The `data.*` reads of one expression, against what the matched topics
/// declare: a key none declares, or a use its type makes fail or constant,
/// is an error.
fn data_uses(
    matched: &[&Topic],
    file: &SourceFile,
    expr: &CheckedExpr,
    found: &mut Vec<Diagnostic>,
) {
    let map = expr.map(&file.text);
    let mut walk = DataWalk {
        matched,
        map: &map,
        found,
    };
    walk.expr(&expr.checked.expr);
}

struct DataWalk<'a> {
    matched: &'a [&'a Topic],
    map: &'a StringMap,
    found: &'a mut Vec<Diagnostic>,
}

impl DataWalk<'_> {
    fn expr(&mut self, expr: &Expr) {
        match &expr.kind {
            ExprKind::Data(path) => {
                self.declared(path, expr.span.clone());
            }
            ExprKind::Unary(_, inner) => self.expr(inner),
            ExprKind::Binary(op, left, right) => {
                self.expr(left);
                self.expr(right);
                self.mismatch(*op, left, right);
                self.mismatch(*op, right, left);
            }
            ExprKind::Call(_, args) => args.iter().for_each(|arg| self.expr(arg)),
            ExprKind::Lit(_) | ExprKind::Field(_) | ExprKind::State(_) => {}
        }
    }

    /// The type the matched topics agree on for `path`'s key; `None` (and
    /// an error) when none declares it, `Any` when they disagree or the
    /// path goes deeper than a declared scalar.
    fn declared(&mut self, path: &[String], span: Range<usize>) -> Option<DataTy> {
        let key = path.first()?;
        let types: Vec<DataTy> = self
            .matched
            .iter()
            .filter_map(|topic| topic.data.get(key).copied())
            .collect();
        let Some(&first) = types.first() else {
            let mut keys: Vec<&str> = self
                .matched
                .iter()
                .flat_map(|topic| topic.data.keys().map(String::as_str))
                .collect();
            keys.sort_unstable();
            keys.dedup();
            let near = did_you_mean(key, &keys);
            let help = match near {
                Some(near) => format!("did you mean `data.{near}`?"),
                None if keys.is_empty() => {
                    "the rule's topics declare no data; declare the key in their `[[topic]]`"
                        .to_string()
                }
                None => format!(
                    "the rule's topics declare {}",
                    keys.iter()
                        .map(|k| format!("`data.{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let mut diagnostic = Diagnostic::error(
                Code::UnknownDataKey,
                format!("`data.{key}` is not declared for the rule's topics"),
            )
            .at(self.map.map(span.clone()), "no declared topic has this key")
            .with_help(help);
            if let (Some(near), true) = (near, self.map.is_exact()) {
                let rest: String = path.iter().skip(1).map(|part| format!(".{part}")).collect();
                diagnostic = diagnostic.with_fix(self.map.map(span), format!("data.{near}{rest}"));
            }
            self.found.push(diagnostic);
            return None;
        };
        let agreed = types.iter().all(|ty| *ty == first);
        Some(if agreed && path.len() == 1 {
            first
        } else {
            DataTy::Any
        })
    }

    /// `data.KEY op other` where the declared type of KEY makes the
    /// operation fail, or a comparison constant, for every event.
    fn mismatch(&mut self, op: BinOp, data: &Expr, other: &Expr) {
        let ExprKind::Data(path) = &data.kind else {
            return;
        };
        let declared = self
            .matched
            .iter()
            .filter_map(|topic| topic.data.get(path.first()?).copied())
            .collect::<Vec<_>>();
        let Some(&ty) = declared.first() else {
            return;
        };
        if path.len() > 1 || declared.iter().any(|d| *d != ty) {
            return;
        }
        let number = matches!(other.ty, Ty::Int | Ty::Float | Ty::Num);
        let clash = match (ty, other.ty) {
            (DataTy::Any, _) | (_, Ty::Any | Ty::NumOrStr) => false,
            (DataTy::Int | DataTy::Float, Ty::Str | Ty::Bool) => true,
            (DataTy::Str, _) => number || other.ty == Ty::Bool,
            (DataTy::Bool, _) => other.ty != Ty::Bool || !op.is_comparison(),
            // An int never equals a float, and the other way round.
            (DataTy::Int, Ty::Float) | (DataTy::Float, Ty::Int) => {
                matches!(op, BinOp::Eq | BinOp::Ne)
            }
            _ => false,
        };
        if !clash || matches!(op, BinOp::And | BinOp::Or) {
            return;
        }
        let key = path.join(".");
        let help = match (ty, other.ty) {
            (DataTy::Int | DataTy::Float, Ty::Str) => {
                "compare with a number: `data.level > 1`, not `\"1\"`".to_string()
            }
            (DataTy::Str, _) if number => {
                format!("convert it first: `int(data.{key})` (or `float(...)` for a decimal)")
            }
            (DataTy::Int, Ty::Float) | (DataTy::Float, Ty::Int) => {
                "an int never equals a float: write the literal as the declared type".into()
            }
            _ => "compare with a value of the declared type".into(),
        };
        self.found.push(
            Diagnostic::error(
                Code::DataType,
                format!(
                    "`data.{key}` is declared {}, so `{}` with {} always fails or never changes",
                    ty.name(),
                    op.symbol(),
                    other.ty.a()
                ),
            )
            .at(
                self.map.map(data.span.clone()),
                format!("declared {}", ty.name()),
            )
            .with_help(help),
        );
    }
}
