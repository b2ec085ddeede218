//! `rulec::loop` (docs/safety-checks.md#loops): rules that trigger each
//! other for ever. The cause graph joins a rule to the rules its steps
//! start: a step's action makes topics ([`super::cause`]), and a rule
//! whose `on` matches one of them starts. A cycle in it is a warning that
//! names every rule, step and topic on it. Enabled rules only; finally
//! steps count (they run when a run is cancelled). A `when` does not cut
//! an edge: whether it holds for the loop's own event is not known here.

use super::cause::{describe, topics_made, InputChannels};
use crate::diagnostic::{Code, Diagnostic};
use crate::profile::Catalogue;
use crate::validate::{CheckedRule, CheckedStep};
use std::collections::VecDeque;

/// One edge: rule `from`'s step makes `topic`, which rule `to`'s `on`
/// pattern `on` matches.
#[derive(Debug, Clone)]
struct Edge {
    from: usize,
    step: usize,
    finally: bool,
    topic: String,
    to: usize,
    on: usize,
}

/// Every cycle of the cause graph, one warning each: the shortest cycle
/// through each rule that is on one, reported once per set of rules.
pub fn check(
    rules: &[CheckedRule],
    catalogue: Option<&Catalogue>,
    inputs: &InputChannels,
) -> Vec<Diagnostic> {
    let edges = edges(rules, catalogue, inputs);
    let mut seen: Vec<Vec<usize>> = Vec::new();
    let mut out = Vec::new();
    for start in 0..rules.len() {
        let Some(cycle) = shortest_cycle(start, rules.len(), &edges) else {
            continue;
        };
        let mut members: Vec<usize> = cycle.iter().map(|edge| edge.from).collect();
        members.sort_unstable();
        if seen.contains(&members) {
            continue;
        }
        seen.push(members);
        out.push(warning(rules, &cycle));
    }
    out
}

fn edges(
    rules: &[CheckedRule],
    catalogue: Option<&Catalogue>,
    inputs: &InputChannels,
) -> Vec<Edge> {
    let mut edges = Vec::new();
    for (from, rule) in rules.iter().enumerate() {
        if !rule.enabled {
            continue;
        }
        let steps = rule
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (i, false, s))
            .chain(rule.finally.iter().enumerate().map(|(i, s)| (i, true, s)));
        for (step, finally, checked) in steps {
            for topic in topics_made(&checked.action, catalogue, inputs) {
                for (to, target) in rules.iter().enumerate() {
                    if !target.enabled {
                        continue;
                    }
                    if let Some(on) = target.on.iter().position(|p| p.matches(&topic)) {
                        edges.push(Edge {
                            from,
                            step,
                            finally,
                            topic: topic.clone(),
                            to,
                            on,
                        });
                    }
                }
            }
        }
    }
    edges
}

/// The shortest path of edges from `start` back to `start`, breadth first.
fn shortest_cycle(start: usize, count: usize, edges: &[Edge]) -> Option<Vec<Edge>> {
    // The edge each rule was first reached by.
    let mut reached: Vec<Option<usize>> = vec![None; count];
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for (index, edge) in edges.iter().enumerate().filter(|(_, e)| e.from == node) {
            if edge.to == start {
                let mut path = vec![edge.clone()];
                let mut at = node;
                while at != start {
                    let back = reached.get(at).copied().flatten()?;
                    let edge = edges.get(back)?;
                    path.push(edge.clone());
                    at = edge.from;
                }
                path.reverse();
                return Some(path);
            }
            if edge.to != start && reached.get(edge.to).is_some_and(Option::is_none) {
                if let Some(slot) = reached.get_mut(edge.to) {
                    *slot = Some(index);
                }
                queue.push_back(edge.to);
            }
        }
    }
    None
}

fn step_of<'a>(rule: &'a CheckedRule, edge: &Edge) -> Option<&'a CheckedStep> {
    let steps = if edge.finally {
        &rule.finally
    } else {
        &rule.steps
    };
    steps.get(edge.step)
}

fn step_name(edge: &Edge) -> String {
    let list = if edge.finally { "finally step" } else { "step" };
    format!("{list} {}", edge.step)
}

fn warning(rules: &[CheckedRule], cycle: &[Edge]) -> Diagnostic {
    let mut chain = Vec::new();
    let mut related = Vec::new();
    for edge in cycle {
        let (Some(from), Some(to)) = (rules.get(edge.from), rules.get(edge.to)) else {
            continue;
        };
        let Some(step) = step_of(from, edge) else {
            continue;
        };
        chain.push(format!(
            "`{}` {} pushes {} -> `{}` -> `{}`",
            from.name,
            step_name(edge),
            describe(&step.action),
            edge.topic,
            to.name
        ));
        related.push((
            from.source.clone(),
            step.span.clone(),
            format!(
                "`{}` {}: {} makes `{}`",
                from.name,
                step_name(edge),
                describe(&step.action),
                edge.topic
            ),
        ));
        if let Some(span) = to.on_spans.get(edge.on) {
            related.push((
                to.source.clone(),
                span.clone(),
                format!("`{}` starts on `{}`", to.name, edge.topic),
            ));
        }
    }
    let first = cycle.first();
    let rule = first.and_then(|edge| rules.get(edge.from));
    let names: Vec<String> = cycle
        .iter()
        .filter_map(|edge| rules.get(edge.from))
        .map(|rule| format!("`{}`", rule.name))
        .collect();
    let message = if names.len() == 1 {
        format!("rule {} starts itself again: a loop", names.join(""))
    } else {
        format!("rules {} start each other in a loop", names.join(", "))
    };
    let mut diagnostic = Diagnostic::warning(Code::Loop, message).with_help(format!(
        "{}\nbreak the loop: a `when` that the loop's own event fails, or a `cancel-on`; \
         at run time the trip breaker stops a rule that starts too often",
        chain.join("; then ")
    ));
    let mut related = related.into_iter();
    if let (Some(rule), Some(first)) = (rule, first) {
        diagnostic = diagnostic.in_file(&rule.source);
        diagnostic.rule = Some(rule.name.clone());
        diagnostic.step = Some(first.step);
        diagnostic.finally = first.finally;
        if let Some((_, span, text)) = related.next() {
            diagnostic = diagnostic.at(span, text);
        }
    }
    for (file, span, text) in related {
        diagnostic = diagnostic.with_related(&file, span, text);
    }
    diagnostic
}
