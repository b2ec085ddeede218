//! `rulec::guarded` (docs/safety-checks.md#guards): for each step a guard
//! covers, try to show the guard holds whenever the step can run, from
//! what the run knows; otherwise warn, naming the guard and a state in
//! which it refuses. What is known at the action:
//!
//! - the step's own `when`, evaluated when the step is due;
//! - for a step with no wait before it (its `after`s and the earlier
//!   steps' sum to 0), also the rule's `when` and the trigger: the `to` and
//!   `from` the profile gives the rule's topics, and the field the topic
//!   comes from holding that `to` (`vehicle.locked` fixes `vehicle`
//!   `state` = `stand-by`). After a wait the scooter may have moved: only
//!   the step's own `when` counts.
//!
//! A guard's condition is proven part by part (its `&&` parts): an
//! equality or membership test implied by a fact of one subject, or a
//! part written the same in a `when`.

use super::facts::{Const, Facts, Known, Subject};
use crate::diagnostic::{Code, Diagnostic};
use crate::profile::Catalogue;
use crate::validate::{CheckedRule, CheckedStep};
use crate::when::{BinOp, Expr, ExprKind};
use rulecore::bundle::{Action, StatePair};
use rulecore::value_pattern::ValuePattern;
use rulecore::TopicPattern;
use std::collections::BTreeSet;
use std::ops::Range;

/// A guard as the proof reads it.
pub struct GuardView<'a> {
    pub name: &'a str,
    /// Where it is declared (a profile file or a rule file).
    pub file: &'a str,
    /// Its `when` as written, and checked.
    pub when_text: &'a str,
    pub when: &'a Expr,
    /// The `when` value's span in `file`, for a guard of a rule file.
    pub when_span: Option<Range<usize>>,
    /// Whether it covers an action (a computed value counts as covered
    /// when the guard names values: it may compute one of them).
    pub covers: Box<dyn Fn(&Action) -> bool + 'a>,
}

impl std::fmt::Debug for GuardView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardView")
            .field("name", &self.name)
            .field("file", &self.file)
            .field("when_text", &self.when_text)
            .finish_non_exhaustive()
    }
}

/// Every step a guard covers and nothing shows it holds for: one warning
/// per step and guard.
pub fn check(
    rules: &[CheckedRule],
    guards: &[GuardView<'_>],
    catalogue: Option<&Catalogue>,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if guards.is_empty() {
        return out;
    }
    for rule in rules.iter().filter(|rule| rule.enabled) {
        let lists = [(false, &rule.steps), (true, &rule.finally)];
        for (finally, steps) in lists {
            let mut offset_ns: u64 = 0;
            for (index, step) in steps.iter().enumerate() {
                offset_ns = offset_ns.saturating_add(step.after_ns);
                let covering: Vec<&GuardView<'_>> =
                    guards.iter().filter(|g| (g.covers)(&step.action)).collect();
                if covering.is_empty() {
                    continue;
                }
                let at_trigger = !finally && offset_ns == 0;
                let facts = step_facts(rule, step, at_trigger, catalogue);
                for guard in covering {
                    if let Some(refusal) = refusal(guard.when, &facts, catalogue) {
                        out.push(warning(
                            rule, index, finally, step, guard, &refusal, at_trigger,
                        ));
                    }
                }
            }
        }
    }
    out
}

/// What holds when the step's action is performed.
pub fn step_facts(
    rule: &CheckedRule,
    step: &CheckedStep,
    at_trigger: bool,
    catalogue: Option<&Catalogue>,
) -> Facts {
    let rule_when = rule.when.as_ref().filter(|_| at_trigger);
    let whens = rule_when.into_iter().chain(&step.when);
    let mut facts = Facts::of(whens.map(|w| &w.checked.expr));
    if at_trigger {
        if let Some(catalogue) = catalogue {
            trigger_facts(&rule.on, catalogue, &mut facts);
        }
    }
    facts
}

/// The `to`, `from` and source field the rule's topics fix, when every
/// topic its `on` can match fixes them.
fn trigger_facts(on: &[TopicPattern], catalogue: &Catalogue, facts: &mut Facts) {
    let mut topics: Vec<&str> = Vec::new();
    for pattern in on {
        match pattern {
            TopicPattern::Exact(topic) => topics.push(topic),
            // Any topic may come from the bus; a prefix's too.
            TopicPattern::Prefix(_) | TopicPattern::Any => return,
        }
    }
    let literal = |patterns: &Option<Vec<ValuePattern>>| -> Option<BTreeSet<Const>> {
        let patterns = patterns.as_ref().filter(|p| !p.is_empty())?;
        patterns
            .iter()
            .map(|p| p.as_literal().map(|v| Const::Str(v.to_string())))
            .collect()
    };
    let mut to: Option<BTreeSet<Const>> = Some(BTreeSet::new());
    let mut from: Option<BTreeSet<Const>> = Some(BTreeSet::new());
    // The one field every topic comes from, if there is one.
    let mut field: Option<Option<&StatePair>> = None;
    for topic in &topics {
        let Some(shape) = catalogue.topic(topic) else {
            return;
        };
        let add = |set: &mut Option<BTreeSet<Const>>, more: Option<BTreeSet<Const>>| {
            *set = match (set.take(), more) {
                (Some(mut set), Some(more)) => {
                    set.extend(more);
                    Some(set)
                }
                _ => None,
            };
        };
        add(&mut to, literal(&shape.to));
        add(&mut from, literal(&shape.from).filter(|_| !shape.from_open));
        let one = match catalogue.topic_fields.get(*topic).map(Vec::as_slice) {
            Some([pair]) => Some(pair),
            _ => None,
        };
        field = Some(match field {
            None => one,
            Some(known) => known.filter(|known| Some(*known) == one),
        });
    }
    if topics.is_empty() {
        return;
    }
    if let Some(to) = to {
        // Topics of one field: at the event, that field holds `to`.
        if let Some(pair) = field.flatten() {
            facts.add_within(Subject::State(pair.clone()), to.clone());
        }
        facts.add_within(Subject::To, to);
    }
    if let Some(from) = from {
        facts.add_within(Subject::From, from);
    }
}

/// A state in which the guard refuses that the facts do not rule out,
/// or `None` when the facts prove every part of the guard.
pub fn refusal(guard: &Expr, facts: &Facts, catalogue: Option<&Catalogue>) -> Option<String> {
    let mut parts = Vec::new();
    conjuncts(guard, &mut parts);
    parts
        .into_iter()
        .find_map(|part| unproven(part, facts, catalogue))
}

fn conjuncts<'e>(expr: &'e Expr, out: &mut Vec<&'e Expr>) {
    if let ExprKind::Binary(BinOp::And, left, right) = &expr.kind {
        conjuncts(left, out);
        conjuncts(right, out);
    } else {
        out.push(expr);
    }
}

/// `None` when `part` is proven; else the refusing state in words.
fn unproven(part: &Expr, facts: &Facts, catalogue: Option<&Catalogue>) -> Option<String> {
    if facts.has_part(part) {
        return None;
    }
    let Some((subject, wanted)) = Facts::test_of(part) else {
        return Some("a state in which a part of it that is not an equality test is false".into());
    };
    let known = facts.get(&subject).cloned().unwrap_or_default();
    if implies(&known, &wanted) {
        return None;
    }
    let value = refusing_value(&subject, &known, &wanted, catalogue)?;
    Some(match subject.state_pair() {
        Some(pair) => format!("`{}` `{}` = `{}`", pair.hash, pair.field, value.text()),
        None => format!("`{subject}` = `{}`", value.text()),
    })
}

/// Whether every value `known` allows is one `wanted` allows.
fn implies(known: &Known, wanted: &Known) -> bool {
    if let Some(within) = &known.within {
        return within
            .iter()
            .filter(|value| known.allows(value))
            .all(|value| wanted.allows(value));
    }
    // No set of values: only a range, and what it leaves out.
    let range_holds = match (known.range, wanted.range) {
        (_, None) => true,
        (Some((a, b)), Some((c, d))) => c <= a && b <= d,
        (None, Some(_)) => false,
    };
    let outside_holds = wanted.outside.iter().all(|value| {
        known.outside.contains(value)
            || matches!((known.range, value), (Some((a, b)), Const::Int(v)) if *v < a || *v > b)
    });
    wanted.within.is_none() && range_holds && outside_holds
}

/// A value the facts allow and the guard refuses: the facts' own, the
/// guard's excluded ones, then the field's values in the profile, then
/// an integer.
fn refusing_value(
    subject: &Subject,
    known: &Known,
    wanted: &Known,
    catalogue: Option<&Catalogue>,
) -> Option<Const> {
    let refused = |value: &Const| known.allows(value) && !wanted.allows(value);
    if let Some(within) = &known.within {
        return within.iter().find(|v| refused(v)).cloned();
    }
    if let Some(value) = wanted.outside.iter().find(|v| refused(v)) {
        return Some(value.clone());
    }
    let listed: Vec<Const> = subject
        .state_pair()
        .and_then(|pair| {
            catalogue?
                .hashes
                .get(&pair.hash)?
                .fields
                .get(&pair.field)
                .cloned()
        })
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.as_literal().map(|v| Const::Str(v.to_string())))
        .collect();
    if let Some(value) = listed.iter().find(|v| refused(v)) {
        return Some(value.clone());
    }
    (1..=1000)
        .chain(-1000..=0)
        .map(Const::Int)
        .chain(std::iter::once(Const::Str(String::new())))
        .find(|value| refused(value))
}

fn warning(
    rule: &CheckedRule,
    index: usize,
    finally: bool,
    step: &CheckedStep,
    guard: &GuardView<'_>,
    refusal: &str,
    at_trigger: bool,
) -> Diagnostic {
    let why = if at_trigger {
        "its trigger, the rule's `when` and the step's `when`"
    } else {
        "the step's own `when` (after a wait, what held at the trigger may not hold)"
    };
    let mut diagnostic = Diagnostic::warning(
        Code::Guarded,
        format!(
            "guard `{}` would refuse this step with {refusal}",
            guard.name
        ),
    )
    .in_file(&rule.source)
    .at(
        step.span.clone(),
        format!("covered by guard `{}`", guard.name),
    )
    .with_help(format!(
        "nothing shows the guard holds when the step runs: from {why}, `rulec` cannot prove \
         `{}` (guard `{}`, {}); the step still builds and `ruled` refuses it while the guard is \
         false. Test the guard's fields in the step's `when` to say it",
        guard.when_text, guard.name, guard.file
    ));
    if let Some(span) = &guard.when_span {
        diagnostic = diagnostic.with_related(
            guard.file,
            span.clone(),
            format!("guard `{}`'s condition", guard.name),
        );
    }
    diagnostic.rule = Some(rule.name.clone());
    diagnostic.step = Some(index);
    diagnostic.finally = finally;
    diagnostic
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expr(text: &str) -> Expr {
        crate::when::check(text)
            .unwrap_or_else(|e| panic!("{text}: {e:?}"))
            .expr
    }

    const GUARD: &str = r#"state("vehicle", "state") != "ready-to-drive" && int(state("engine-ecu", "speed")) == 0"#;

    #[test]
    fn equalities_prove_the_guard() {
        let facts = Facts::of([&expr(
            r#"state("vehicle", "state") == "parked" && int(state("engine-ecu", "speed")) == 0"#,
        )]);
        assert_eq!(refusal(&expr(GUARD), &facts, None), None);
    }

    #[test]
    fn an_unproven_part_names_a_refusing_state() {
        let facts = Facts::of([&expr(r#"int(state("engine-ecu", "speed")) == 0"#)]);
        assert_eq!(
            refusal(&expr(GUARD), &facts, None).as_deref(),
            Some("`vehicle` `state` = `ready-to-drive`")
        );
        let facts = Facts::of([&expr(r#"state("vehicle", "state") == "parked""#)]);
        assert_eq!(
            refusal(&expr(GUARD), &facts, None).as_deref(),
            Some("`engine-ecu` `speed` = `1`")
        );
        // A set that holds the refused value.
        let facts = Facts::of([&expr(
            r#"contains(("parked", "ready-to-drive"), state("vehicle", "state")) && int(state("engine-ecu", "speed")) == 0"#,
        )]);
        assert_eq!(
            refusal(&expr(GUARD), &facts, None).as_deref(),
            Some("`vehicle` `state` = `ready-to-drive`")
        );
    }

    #[test]
    fn a_part_written_the_same_or_a_narrower_range_is_proven() {
        let guard = expr(r#"int(state("engine-ecu", "speed")) < 3"#);
        let facts = Facts::of([&expr(r#"int(state("engine-ecu", "speed")) < 3"#)]);
        assert_eq!(refusal(&guard, &facts, None), None);
        // A narrower range proves it, a wider one names a refusing speed.
        let narrower = Facts::of([&expr(r#"int(state("engine-ecu", "speed")) < 2"#)]);
        assert_eq!(refusal(&guard, &narrower, None), None);
        let wider = Facts::of([&expr(r#"int(state("engine-ecu", "speed")) <= 5"#)]);
        assert_eq!(
            refusal(&guard, &wider, None).as_deref(),
            Some("`engine-ecu` `speed` = `3`")
        );
    }
}
