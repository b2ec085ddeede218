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
use std::collections::BTreeMap;
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

/// At most this many pairs of steps are compared: past it the check says
/// so (thousands of steps on one list and topic, not a rule set).
pub const MAX_PAIRS: usize = 20_000_000;

/// The conflicts: for each step, the first later step it conflicts with
/// (one warning each, so a list many rules push onto says it once per
/// step, not once per pair).
pub fn check(rules: &[CheckedRule], catalogue: Option<&Catalogue>) -> Vec<Diagnostic> {
    let pushes = pushes(rules);
    let mut scan = Scan {
        pushes: &pushes,
        rules,
        catalogue,
        reported: vec![false; pushes.len()],
        compared: 0,
        out: Vec::new(),
    };
    // Only steps onto one list can conflict, and of those only steps
    // started by one topic: by exact topic, and a wider pattern with all.
    let mut by_list: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (index, push) in pushes.iter().enumerate() {
        by_list.entry(push.list).or_default().push(index);
    }
    for members in by_list.values() {
        let mut by_topic: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        let mut wide = Vec::new();
        for &index in members {
            let Some(push) = pushes.get(index) else {
                continue;
            };
            for pattern in push.trigger {
                match pattern {
                    TopicPattern::Exact(topic) => by_topic.entry(topic).or_default().push(index),
                    _ => wide.push(index),
                }
            }
        }
        wide.dedup();
        let buckets = by_topic.values().map(Vec::as_slice);
        for bucket in buckets.chain((!wide.is_empty()).then_some(members.as_slice())) {
            if !scan.bucket(bucket) {
                return scan.out;
            }
        }
    }
    scan.out
}

/// The pairs compared so far and the warnings found.
struct Scan<'p, 'r> {
    pushes: &'p [Push<'r>],
    rules: &'r [CheckedRule],
    catalogue: Option<&'r Catalogue>,
    /// Whether a step has had its warning as the first of a pair.
    reported: Vec<bool>,
    compared: usize,
    out: Vec<Diagnostic>,
}

impl Scan<'_, '_> {
    /// Compares the steps of one bucket (in push order) pairwise; `false`
    /// once [`MAX_PAIRS`] is reached (and said).
    fn bucket(&mut self, bucket: &[usize]) -> bool {
        // One value pushed by all: nothing to fight over.
        let first = bucket.first().and_then(|&i| self.pushes.get(i));
        let one_value = bucket
            .iter()
            .filter_map(|&i| self.pushes.get(i))
            .all(|push| first.is_some_and(|first| first.value == push.value));
        if one_value {
            return true;
        }
        for (at, &i) in bucket.iter().enumerate() {
            if self.reported.get(i).copied().unwrap_or(true) {
                continue;
            }
            let Some(a) = self.pushes.get(i) else {
                continue;
            };
            for &j in bucket.iter().skip(at + 1) {
                let Some(b) = self.pushes.get(j) else {
                    continue;
                };
                self.compared += 1;
                if self.compared > MAX_PAIRS {
                    self.out.push(Diagnostic::warning(
                        Code::Conflict,
                        format!(
                            "over {MAX_PAIRS} pairs of steps push onto `{}`: conflicts past \
                             them were not looked for",
                            a.list
                        ),
                    ));
                    return false;
                }
                if a.value == b.value || !may_overlap(a.trigger, b.trigger) {
                    continue;
                }
                if let Some(topic) = conflict(a, b, self.catalogue) {
                    self.out.push(warning(self.rules, a, b, &topic));
                    if let Some(done) = self.reported.get_mut(i) {
                        *done = true;
                    }
                    break;
                }
            }
        }
        true
    }
}

/// Whether some topic can match a pattern of each list (cheap: exact
/// topics compared, any wider pattern taken to overlap).
fn may_overlap(a: &[TopicPattern], b: &[TopicPattern]) -> bool {
    a.iter().any(|p| {
        b.iter().any(|q| match (p, q) {
            (TopicPattern::Exact(x), TopicPattern::Exact(y)) => x == y,
            _ => true,
        })
    })
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
