//! The checks of rules against a bus profile's [`Catalogue`]
//! (docs/rules.md#checks-against-the-profile): values the profile says a
//! `to`, `from` or `state()` can never hold, fields of a known hash that do
//! not exist or are never seen to change, values a command list does not
//! accept, and hashes, lists and `from` values one typo from the
//! profile's. The derived topics themselves join the topic catalogue in
//! `super::catalogue`.
//!
//! Each check is a pure function from the catalogue and what the rule
//! says to diagnostics without file, rule or step; the callers add those.

use crate::diagnostic::{Code, Diagnostic};
use crate::profile::catalogue::{Catalogue, HashInfo, TopicShape};
use crate::span::StringMap;
use crate::when::{self, BinOp, Expr, ExprKind, Lit};
use rulecore::bundle::StatePair;
use rulecore::bytecode::{Builtin, EventField};
use rulecore::suggest::did_you_mean;
use rulecore::value_pattern::{any_matches, ValuePattern};
use std::ops::Range;

/// How many values a help line lists before "...".
const LISTED: usize = 12;

/// How a literal meets the value it is held against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Eq,
    Ne,
    /// An element of `contains((...), value)`.
    Member,
}

impl How {
    fn outcome(self) -> &'static str {
        match self {
            How::Eq => "so this comparison can never be true",
            How::Ne => "so this comparison is always true",
            How::Member => "so this element of `contains` never matches",
        }
    }
}

/// `value == "lit"`, `"lit" == value`, `value != "lit"` or
/// `contains((..., "lit", ...), value)`: one literal against one value.
struct Comparison<'e> {
    value: &'e Expr,
    literal: &'e str,
    /// In the expression text, quotes included.
    literal_span: Range<usize>,
    how: How,
}

/// Every comparison of a value with a string literal in `expr`.
fn comparisons(expr: &Expr) -> Vec<Comparison<'_>> {
    let mut found = Vec::new();
    collect(expr, &mut found);
    found
}

fn collect<'e>(expr: &'e Expr, found: &mut Vec<Comparison<'e>>) {
    match &expr.kind {
        ExprKind::Binary(op, left, right) => {
            let how = match op {
                BinOp::Eq => Some(How::Eq),
                BinOp::Ne => Some(How::Ne),
                _ => None,
            };
            if let Some(how) = how {
                for (value, other) in [(left, right), (right, left)] {
                    if let ExprKind::Lit(Lit::Str(literal)) = &other.kind {
                        found.push(Comparison {
                            value,
                            literal,
                            literal_span: other.span.clone(),
                            how,
                        });
                    }
                }
            }
            collect(left, found);
            collect(right, found);
        }
        ExprKind::Call(Builtin::TupleContains, args) => {
            if let Some((value, elements)) = args.split_last() {
                for element in elements {
                    if let ExprKind::Lit(Lit::Str(literal)) = &element.kind {
                        found.push(Comparison {
                            value,
                            literal,
                            literal_span: element.span.clone(),
                            how: How::Member,
                        });
                    }
                }
            }
            args.iter().for_each(|arg| collect(arg, found));
        }
        ExprKind::Call(_, args) => args.iter().for_each(|arg| collect(arg, found)),
        ExprKind::Unary(_, inner) => collect(inner, found),
        ExprKind::Lit(_) | ExprKind::Field(_) | ExprKind::Data(_) | ExprKind::State(_) => {}
    }
}

/// Every `state()` read in `expr`, in order.
fn state_reads<'e>(expr: &'e Expr, found: &mut Vec<(&'e StatePair, Range<usize>)>) {
    match &expr.kind {
        ExprKind::State(pair) => found.push((pair, expr.span.clone())),
        ExprKind::Binary(_, left, right) => {
            state_reads(left, found);
            state_reads(right, found);
        }
        ExprKind::Call(_, args) => args.iter().for_each(|arg| state_reads(arg, found)),
        ExprKind::Unary(_, inner) => state_reads(inner, found),
        ExprKind::Lit(_) | ExprKind::Field(_) | ExprKind::Data(_) => {}
    }
}

/// `` `a`, `b`, `c` ``, at most [`LISTED`] of them.
fn listed(patterns: &[String]) -> String {
    let mut text: Vec<String> = patterns
        .iter()
        .take(LISTED)
        .map(|p| format!("`{p}`"))
        .collect();
    if patterns.len() > LISTED {
        text.push("...".into());
    }
    text.join(", ")
}

/// "did you mean `x`?" from the literal values among `patterns`, else the
/// values, with `what` naming whose they are.
fn values_help<'p>(
    literal: &str,
    patterns: &[&'p ValuePattern],
    what: &str,
) -> (String, Option<&'p str>) {
    let literals: Vec<&str> = patterns.iter().filter_map(|p| p.as_literal()).collect();
    if let Some(near) = did_you_mean(literal, &literals) {
        return (format!("did you mean `{near}`?"), Some(near));
    }
    // In the profile's order, each once.
    let mut all: Vec<String> = Vec::new();
    for pattern in patterns {
        let text = pattern.to_string();
        if !all.contains(&text) {
            all.push(text);
        }
    }
    (format!("{what} {}", listed(&all)), None)
}

/// The fix of a literal compared with a value it never is: `near` inside
/// its quotes.
fn literal_fix(
    map: &StringMap,
    literal_span: &Range<usize>,
    near: Option<&str>,
) -> Option<(Range<usize>, String)> {
    let inside = literal_span.start + 1..literal_span.end.saturating_sub(1);
    map.fix(inside, near?)
}

/// The `state()` reads of one expression against the profile's hashes
/// (docs/rules.md#checks-against-the-profile): for a hash the profile declares, a field it does not
/// have (a warning), a comparison with a value outside the field's values
/// (an error), and a silent field no poll reads (a warning). Hashes the
/// profile does not declare are not checked. `source` is the expression
/// text, `map` maps its bytes into the rule file.
pub(super) fn state_uses(
    catalogue: &Catalogue,
    expr: &Expr,
    source: &str,
    map: &StringMap,
) -> Vec<Diagnostic> {
    let mut found = state_fields(catalogue, expr, source, map);
    found.extend(state_values(catalogue, expr, map));
    found
}

/// `state("hash", "field")` as written, for messages.
fn state_call(pair: &StatePair) -> String {
    format!("state(\"{}\", \"{}\")", pair.hash, pair.field)
}

/// The fields `state()` reads, each pair once, against the profile's
/// hashes: a field the hash does not have, or one never seen to change.
fn state_fields(
    catalogue: &Catalogue,
    expr: &Expr,
    source: &str,
    map: &StringMap,
) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    let mut reads = Vec::new();
    state_reads(expr, &mut reads);
    let mut seen: Vec<&StatePair> = Vec::new();
    for (pair, span) in reads {
        if seen.contains(&pair) {
            continue;
        }
        seen.push(pair);
        let Some(hash) = catalogue.hashes.get(&pair.hash) else {
            found.extend(unknown_state_hash(catalogue, pair, span, source, map));
            continue;
        };
        if !hash.fields.contains_key(&pair.field) {
            found.push(unknown_state_field(hash, pair, span, source, map));
        } else if !hash.is_live(&pair.field) {
            found.push(silent_state(pair, span, map));
        }
    }
    found
}

/// A `state()` read of a field the profile's hash does not have (a
/// warning), pointing at the field's literal in the call.
fn unknown_state_field(
    hash: &HashInfo,
    pair: &StatePair,
    span: Range<usize>,
    source: &str,
    map: &StringMap,
) -> Diagnostic {
    let call = state_call(pair);
    let field_literal = when::string_literals(source, span.clone()).get(1).cloned();
    let field_span = field_literal.clone().unwrap_or(span);
    let fields: Vec<&str> = hash.fields.keys().map(String::as_str).collect();
    let near = did_you_mean(&pair.field, &fields);
    let help = match near {
        Some(near) => format!("did you mean `{near}`?"),
        None => {
            let names: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
            format!(
                "the profile's `{}` fields are {}",
                pair.hash,
                listed(&names)
            )
        }
    };
    Diagnostic::warning(
        Code::UnknownStateField,
        format!(
            "the profile's hash `{}` has no field `{}`: `{call}` reads a field no service writes",
            pair.hash, pair.field
        ),
    )
    .at(map.map(field_span.clone()), "not a field of this hash")
    .with_help(help)
    .with_fix_opt(field_literal.and_then(|literal| literal_fix(map, &literal, near)))
}

/// A `state()` read of a hash the profile does not declare but one it
/// declares is close to (a warning with "did you mean"): the
/// read would see no service's writes. A hash far from every declared one
/// (an accessory's) gets nothing.
fn unknown_state_hash(
    catalogue: &Catalogue,
    pair: &StatePair,
    span: Range<usize>,
    source: &str,
    map: &StringMap,
) -> Option<Diagnostic> {
    let hashes: Vec<&str> = catalogue.hashes.keys().map(String::as_str).collect();
    let near = did_you_mean(&pair.hash, &hashes)?;
    let hash_literal = when::string_literals(source, span.clone()).first().cloned();
    let hash_span = hash_literal.clone().unwrap_or(span);
    Some(
        Diagnostic::warning(
            Code::UnknownStateHash,
            format!(
                "the profile declares no hash `{}`: `{}` reads a hash no service writes",
                pair.hash,
                state_call(pair)
            ),
        )
        .at(map.map(hash_span), "not a hash of the profile")
        .with_help(format!("did you mean `{near}`?"))
        .with_fix_opt(hash_literal.and_then(|literal| literal_fix(map, &literal, Some(near)))),
    )
}

/// A redis step's `list` the profile does not declare but one it declares
/// is close to (a warning with "did you mean"): nothing would
/// read the push. A list far from every declared one gets nothing. `span`
/// is the `list` string in the rule file.
pub(super) fn list_name(
    catalogue: &Catalogue,
    list: &str,
    span: Range<usize>,
) -> Option<Diagnostic> {
    if catalogue.lists.contains_key(list) {
        return None;
    }
    let lists: Vec<&str> = catalogue.lists.keys().map(String::as_str).collect();
    let near = did_you_mean(list, &lists)?;
    Some(
        Diagnostic::warning(
            Code::UnknownList,
            format!("the profile declares no list `{list}`: nothing would read the push"),
        )
        .at(span.clone(), "not a list of the profile")
        .with_help(format!("did you mean `{near}`?"))
        .with_fix(span, crate::diagnostic::toml_string(near)),
    )
}

/// A `state()` read of a field written without a notification and read by
/// no poll (a warning): it would hold the value read at start.
fn silent_state(pair: &StatePair, span: Range<usize>, map: &StringMap) -> Diagnostic {
    let call = state_call(pair);
    Diagnostic::warning(
        Code::SilentState,
        format!(
            "`{call}` would hold the value read at start: `{}` is written without a notification and no poll reads it",
            pair.field
        ),
    )
    .at(map.map(span), "never seen to change")
    .with_help(format!(
        "take the value from an event instead, or have the profile poll the field (`poll` and `polled` on its `[[hash]]` `{}`, docs/sources.md#polls)",
        pair.hash
    ))
}

/// `state()` compared with a literal outside the field's values (an
/// error).
fn state_values(catalogue: &Catalogue, expr: &Expr, map: &StringMap) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    for comparison in comparisons(expr) {
        let ExprKind::State(pair) = &comparison.value.kind else {
            continue;
        };
        let Some(patterns) = catalogue
            .hashes
            .get(&pair.hash)
            .and_then(|hash| hash.fields.get(&pair.field))
        else {
            continue;
        };
        // `""` is what an absent field reads as: a test for absence.
        if comparison.literal.is_empty() || any_matches(patterns, comparison.literal) {
            continue;
        }
        let call = state_call(pair);
        let refs: Vec<&ValuePattern> = patterns.iter().collect();
        let (help, near) = values_help(
            comparison.literal,
            &refs,
            &format!(
                "the profile's values of `{}` `{}` are",
                pair.hash, pair.field
            ),
        );
        found.push(
            Diagnostic::error(
                Code::StateValue,
                format!(
                    "`{call}` is never `\"{}\"`, {}",
                    comparison.literal,
                    comparison.how.outcome()
                ),
            )
            .at(
                map.map(comparison.literal_span.clone()),
                format!("not a value of `{}` `{}`", pair.hash, pair.field),
            )
            .with_help(help)
            .with_fix_opt(literal_fix(map, &comparison.literal_span, near)),
        );
    }
    found
}

/// `to` and `from` compared with a literal that none of the rule's topics
/// ever carries (docs/rules.md#checks-against-the-profile): an error. `shapes` are the profile shapes
/// of every topic the rule's `on` matches (all of them profile topics).
pub(super) fn event_values(
    shapes: &[&TopicShape],
    expr: &Expr,
    map: &StringMap,
) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    if shapes.is_empty() {
        return found;
    }
    for comparison in comparisons(expr) {
        let (name, field) = match &comparison.value.kind {
            ExprKind::Field(EventField::To) => ("to", EventField::To),
            ExprKind::Field(EventField::From) => ("from", EventField::From),
            _ => continue,
        };
        // `from == ""`: no previous value, a real case.
        if comparison.literal.is_empty() {
            continue;
        }
        let sets: Vec<Option<&Vec<ValuePattern>>> = shapes
            .iter()
            .map(|shape| match field {
                EventField::From => shape.from.as_ref(),
                _ => shape.to.as_ref(),
            })
            .collect();
        let possible = sets
            .iter()
            .any(|set| set.is_some_and(|patterns| any_matches(patterns, comparison.literal)));
        if possible {
            continue;
        }
        if field == EventField::From && shapes.iter().any(|shape| shape.from_open) {
            found.extend(unlisted_from(&comparison, &sets, map));
            continue;
        }
        let mut topics: Vec<&str> = shapes.iter().map(|shape| shape.name.as_str()).collect();
        topics.sort_unstable();
        topics.dedup();
        let named = match topics.as_slice() {
            [one] => format!("`{one}` events"),
            some if some.len() <= 3 => format!(
                "{} events",
                some.iter()
                    .map(|t| format!("`{t}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => "the rule's topics".to_string(),
        };
        let patterns: Vec<&ValuePattern> =
            sets.iter().flatten().flat_map(|set| set.iter()).collect();
        let (help, near) = if patterns.is_empty() {
            (format!("{named} carry no `{name}`"), None)
        } else {
            values_help(
                comparison.literal,
                &patterns,
                &format!("`{name}` of {named} is one of"),
            )
        };
        found.push(
            Diagnostic::error(
                Code::EventValue,
                format!(
                    "`{name}` is never `\"{}\"` in {named}, {}",
                    comparison.literal,
                    comparison.how.outcome()
                ),
            )
            .at(
                map.map(comparison.literal_span.clone()),
                format!("not a value of `{name}` for the rule's topics"),
            )
            .with_help(help)
            .with_fix_opt(literal_fix(map, &comparison.literal_span, near)),
        );
    }
    found
}

/// `from` compared with a literal the profile lists for none of the
/// fields, where `from` may hold unlisted values too (an emit without a
/// `from` condition): `from == "n/a"` is real, so nothing is
/// said unless the literal is close to a listed value (`from == "armd"`),
/// and then it is a warning with "did you mean".
fn unlisted_from(
    comparison: &Comparison<'_>,
    sets: &[Option<&Vec<ValuePattern>>],
    map: &StringMap,
) -> Option<Diagnostic> {
    let listed: Vec<&str> = sets
        .iter()
        .flatten()
        .flat_map(|set| set.iter())
        .filter_map(ValuePattern::as_literal)
        .collect();
    let near = did_you_mean(comparison.literal, &listed)?;
    Some(
        Diagnostic::warning(
            Code::UnlistedFrom,
            format!(
                "`from` is compared with `\"{}\"`, which the profile lists for none of the rule's topics",
                comparison.literal
            ),
        )
        .at(
            map.map(comparison.literal_span.clone()),
            format!("close to `{near}`"),
        )
        .with_help(format!(
            "did you mean `{near}`? (`from` may hold a value the profile does not list, such as `n/a`, so this is not an error)"
        ))
        .with_fix_opt(literal_fix(map, &comparison.literal_span, Some(near))),
    )
}

/// A redis step's `push` onto a list the profile declares, of a value
/// none of the list's patterns accepts: an error (docs/rules.md#checks-against-the-profile). Lists the
/// profile does not declare, and values with `${` (a template), are not
/// checked. `span` is the `push` string in the rule file.
pub(super) fn list_value(
    catalogue: &Catalogue,
    list: &str,
    push: &str,
    span: Range<usize>,
) -> Option<Diagnostic> {
    let patterns = catalogue.lists.get(list)?;
    if push.contains("${") || push.trim().is_empty() || any_matches(patterns, push) {
        return None;
    }
    let refs: Vec<&ValuePattern> = patterns.iter().collect();
    let (help, near) = values_help(push, &refs, &format!("`{list}` accepts"));
    let fix = near.map(|near| (span.clone(), crate::diagnostic::toml_string(near)));
    Some(
        Diagnostic::error(
            Code::ListValue,
            format!("`push = \"{push}\"` is not a value `{list}` accepts"),
        )
        .at(span, "not accepted by this list")
        .with_help(help)
        .with_fix_opt(fix),
    )
}

#[cfg(test)]
mod tests;
