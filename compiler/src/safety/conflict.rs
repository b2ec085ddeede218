//! `rulec::conflict` (docs/safety-checks.md#conflicts): two steps that can
//! push different values onto one list for one event, at once or within
//! [`WINDOW_NS`] of each other, when their conditions are not provably
//! exclusive ([`super::facts`]). Steps of two rules whose `on` patterns
//! overlap, and two steps of one rule due at the same instant (a later
//! step of one run is the rule's own order, not a fight). A finally step
//! is timed from the cancelling event (`cancel-on`) and never conflicts
//! with a step of its own rule. Computed values are not compared.

use super::cause::plain;
use super::facts::{Const, Facts, Known, Subject};
use crate::diagnostic::{toml_string, Code, Diagnostic};
use crate::profile::Catalogue;
use crate::validate::{CheckedRule, CheckedStep};
use rulecore::bundle::Action;
use rulecore::TopicPattern;
use std::fmt::Write as _;

/// How close two pushes of one trigger must be to count as a fight.
pub const WINDOW_NS: u64 = 1_000_000_000;

/// One redis step with what it needs to be compared.
struct Push<'a> {
    rule: usize,
    step: usize,
    finally: bool,
    checked: &'a CheckedStep,
    list: &'a str,
    value: &'a str,
    /// The patterns of the event that starts it: `on`, or `cancel-on` for
    /// a finally step.
    trigger: &'a [TopicPattern],
    /// Its wait from that event: the rule's `debounce` or `for`, then the
    /// `after`s of its list up to it.
    offset_ns: u64,
    facts: Facts,
}

/// Every conflicting pair, one warning each, in rule order.
pub fn check(rules: &[CheckedRule], catalogue: Option<&Catalogue>) -> Vec<Diagnostic> {
    let pushes = pushes(rules);
    let mut out = Vec::new();
    for (i, a) in pushes.iter().enumerate() {
        for b in pushes.iter().skip(i + 1) {
            if let Some(topic) = conflict(a, b, catalogue) {
                out.push(warning(rules, a, b, &topic));
            }
        }
    }
    out
}

fn pushes(rules: &[CheckedRule]) -> Vec<Push<'_>> {
    let mut out = Vec::new();
    for (index, rule) in rules.iter().enumerate().filter(|(_, r)| r.enabled) {
        let lists = [
            (false, &rule.steps, &rule.on),
            (true, &rule.finally, &rule.cancel_on),
        ];
        // A rule with `debounce` or `for` starts its run that long after
        // the event (a finally step is timed from the cancelling one).
        let start_ns = rule.debounce_ns.saturating_add(rule.hold_ns);
        for (finally, steps, trigger) in lists {
            let mut offset_ns: u64 = if finally { 0 } else { start_ns };
            for (step, checked) in steps.iter().enumerate() {
                offset_ns = offset_ns.saturating_add(checked.after_ns);
                let Action::Redis { list, push, .. } = &checked.action else {
                    continue;
                };
                let Some(value) = plain(push) else {
                    continue;
                };
                // A finally step's event is the cancelling one: the rule's
                // `when` was about another.
                let rule_when = rule.when.as_ref().filter(|_| !finally);
                let whens = rule_when.into_iter().chain(&checked.when);
                out.push(Push {
                    rule: index,
                    step,
                    finally,
                    checked,
                    list,
                    value,
                    trigger,
                    offset_ns,
                    facts: Facts::of(whens.map(|w| &w.checked.expr)),
                });
            }
        }
    }
    out
}

/// The topic of an event that makes `a` and `b` fight, if one can.
fn conflict(a: &Push<'_>, b: &Push<'_>, catalogue: Option<&Catalogue>) -> Option<String> {
    if a.list != b.list || a.value == b.value {
        return None;
    }
    let apart = a.offset_ns.abs_diff(b.offset_ns);
    if a.rule == b.rule {
        // One run's steps follow each other in the rule's order.
        if a.finally != b.finally || apart != 0 {
            return None;
        }
    } else if apart > WINDOW_NS {
        return None;
    }
    if a.facts.exclusive(&b.facts) {
        return None;
    }
    a.trigger
        .iter()
        .find_map(|p| b.trigger.iter().find_map(|q| witness(p, q, catalogue)))
}

/// A topic both patterns match: the exact one, else one the profile
/// derives, else one made up under the longer prefix.
fn witness(p: &TopicPattern, q: &TopicPattern, catalogue: Option<&Catalogue>) -> Option<String> {
    match (p, q) {
        (TopicPattern::Exact(topic), other) | (other, TopicPattern::Exact(topic)) => {
            other.matches(topic).then(|| topic.to_string())
        }
        _ => {
            let known = catalogue
                .into_iter()
                .flat_map(|c| &c.topics)
                .map(|shape| shape.name.as_str())
                .find(|topic| p.matches(topic) && q.matches(topic));
            if let Some(topic) = known {
                return Some(topic.to_string());
            }
            let prefix = |pattern: &TopicPattern| match pattern {
                TopicPattern::Prefix(prefix) => prefix.to_string(),
                _ => String::new(),
            };
            let (p, q) = (prefix(p), prefix(q));
            let longer = if p.len() >= q.len() { p } else { q };
            let topic = format!("{longer}event");
            Some(topic)
        }
    }
    .filter(|topic| p.matches(topic) && q.matches(topic))
}

fn step_name(push: &Push<'_>) -> String {
    let list = if push.finally { "finally step" } else { "step" };
    format!("{list} {}", push.step)
}

fn warning(rules: &[CheckedRule], a: &Push<'_>, b: &Push<'_>, topic: &str) -> Diagnostic {
    let (Some(rule_a), Some(rule_b)) = (rules.get(a.rule), rules.get(b.rule)) else {
        return Diagnostic::warning(Code::Conflict, "two steps push different values");
    };
    let whom = if a.rule == b.rule {
        format!("its {}", step_name(b))
    } else {
        format!("rule `{}` {}", rule_b.name, step_name(b))
    };
    let when = match a.offset_ns.abs_diff(b.offset_ns) {
        0 => "at the same instant".to_string(),
        ns => format!("{} ms apart", ns / 1_000_000),
    };
    let message = format!(
        "pushes `{}` onto `{}` and {whom} pushes `{}`, {when}, for one `{topic}` event",
        a.value, a.list, b.value
    );
    let mut diagnostic = Diagnostic::warning(Code::Conflict, message)
        .in_file(&rule_a.source)
        .at(a.checked.span.clone(), format!("pushes `{}`", a.value))
        .with_related(
            &rule_b.source,
            b.checked.span.clone(),
            format!("`{}` {} pushes `{}`", rule_b.name, step_name(b), b.value),
        )
        .with_help(format!(
            "which value the list ends with depends on timing; make the two conditions exclusive \
             (`==`, `contains` or integer `<`/`>` tests of one `to`, `from`, `data.*` or `state()` \
             that no value passes both, or a `when` and its negation) or push from one rule\n\
             a timeline that makes it happen (rulec simulate --timeline):\n{}",
            timeline(a, b, topic)
        ));
    diagnostic.rule = Some(rule_a.name.clone());
    diagnostic.step = Some(a.step);
    diagnostic.finally = a.finally;
    diagnostic
}

/// At most two TOML lines: the `state()` values both conditions need,
/// written before the start, then the event with the `to`, `from` and
/// `data` they need.
fn timeline(a: &Push<'_>, b: &Push<'_>, topic: &str) -> String {
    let mut states = Vec::new();
    let mut event = format!("at = \"0s\", topic = {}", toml_string(topic));
    let mut data = Vec::new();
    let subjects = a.facts.known.iter().chain(&b.facts.known);
    let mut done: Vec<&Subject> = Vec::new();
    for (subject, _) in subjects {
        if done.contains(&subject) {
            continue;
        }
        done.push(subject);
        let Some(value) = example(&a.facts, &b.facts, subject) else {
            continue;
        };
        let text = toml_string(&value.text());
        let base = match subject {
            Subject::Int(inner) => inner.as_ref(),
            other => other,
        };
        match base {
            Subject::From => {
                let _ = write!(event, ", from = {text}");
            }
            Subject::To => {
                let _ = write!(event, ", to = {text}");
            }
            Subject::Data(path) => {
                // `int(data.x) == 3` needs the text "3"; `data.x == 3` the int.
                let value = match (subject, &value) {
                    (Subject::Int(_), _) | (_, Const::Str(_)) => text,
                    (_, other) => other.text(),
                };
                data.push(format!("{} = {value}", path.join(".")));
            }
            Subject::State(pair) => states.push(format!(
                "{{ at = \"0s\", before-start = true, hash = {}, field = {}, value = {text} }}",
                toml_string(&pair.hash),
                toml_string(&pair.field)
            )),
            Subject::Int(_) => {}
        }
    }
    if !data.is_empty() {
        let _ = write!(event, ", data = {{ {} }}", data.join(", "));
    }
    let mut lines = String::new();
    if !states.is_empty() {
        let _ = writeln!(lines, "state = [{}]", states.join(", "));
    }
    let _ = write!(lines, "event = [{{ {event} }}]");
    lines
}

/// A value of `subject` every fact of both conditions allows.
fn example(a: &Facts, b: &Facts, subject: &Subject) -> Option<Const> {
    let mut known = Known::default();
    for facts in [a, b] {
        if let Some(theirs) = facts.get(subject) {
            known.meet(theirs);
        }
    }
    known.example()
}
