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
use rulecore::TopicPattern;
use std::collections::{HashMap, VecDeque};

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

/// At most this many edges are followed: past it the graph is cut and the
/// check says so (a pathological directory, not a rule set).
pub const MAX_EDGES: usize = 1_000_000;

/// Every cycle of the cause graph, one warning per strongly connected set
/// of rules: the shortest cycle through its first rule.
pub fn check(
    rules: &[CheckedRule],
    catalogue: Option<&Catalogue>,
    inputs: &InputChannels,
) -> Vec<Diagnostic> {
    let (edges, cut) = edges(rules, catalogue, inputs);
    let mut adjacency: Vec<Vec<usize>> = vec![Vec::new(); rules.len()];
    for (index, edge) in edges.iter().enumerate() {
        if let Some(out) = adjacency.get_mut(edge.from) {
            out.push(index);
        }
    }
    let mut out = Vec::new();
    for component in components(&adjacency, &edges) {
        let Some(&start) = component.iter().min() else {
            continue;
        };
        let looped = component.len() > 1
            || adjacency.get(start).is_some_and(|out| {
                out.iter()
                    .any(|&e| edges.get(e).is_some_and(|e| e.to == start))
            });
        if !looped {
            continue;
        }
        if let Some(cycle) = shortest_cycle(start, &adjacency, &edges) {
            out.push(warning(rules, &cycle));
        }
    }
    if cut {
        out.push(Diagnostic::warning(
            Code::Loop,
            format!(
                "the rules' actions start other rules over {MAX_EDGES} times: loops past that \
                 were not looked for"
            ),
        ));
    }
    out
}

/// The rules each `on` pattern starts, found by topic.
struct OnIndex<'a> {
    exact: HashMap<&'a str, Vec<(usize, usize)>>,
    /// Prefix and `*` patterns, checked one by one.
    wide: Vec<(usize, usize, &'a TopicPattern)>,
}

impl<'a> OnIndex<'a> {
    fn new(rules: &'a [CheckedRule]) -> Self {
        let mut index = OnIndex {
            exact: HashMap::new(),
            wide: Vec::new(),
        };
        for (rule, checked) in rules.iter().enumerate().filter(|(_, r)| r.enabled) {
            for (on, pattern) in checked.on.iter().enumerate() {
                match pattern {
                    TopicPattern::Exact(topic) => {
                        index.exact.entry(topic).or_default().push((rule, on));
                    }
                    _ => index.wide.push((rule, on, pattern)),
                }
            }
        }
        index
    }

    /// Each rule `topic` starts, with its first matching pattern.
    fn started_by(&self, topic: &str) -> Vec<(usize, usize)> {
        let mut found: Vec<(usize, usize)> = self.exact.get(topic).cloned().unwrap_or_default();
        found.extend(
            self.wide
                .iter()
                .filter(|(_, _, pattern)| pattern.matches(topic))
                .map(|(rule, on, _)| (*rule, *on)),
        );
        found.sort_unstable();
        found.dedup_by_key(|(rule, _)| *rule);
        found
    }
}

/// The edges, and whether [`MAX_EDGES`] cut them short.
fn edges(
    rules: &[CheckedRule],
    catalogue: Option<&Catalogue>,
    inputs: &InputChannels,
) -> (Vec<Edge>, bool) {
    let index = OnIndex::new(rules);
    let mut edges = Vec::new();
    for (from, rule) in rules.iter().enumerate().filter(|(_, r)| r.enabled) {
        let steps = rule
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (i, false, s))
            .chain(rule.finally.iter().enumerate().map(|(i, s)| (i, true, s)));
        for (step, finally, checked) in steps {
            for topic in topics_made(&checked.action, catalogue, inputs) {
                for (to, on) in index.started_by(&topic) {
                    if edges.len() == MAX_EDGES {
                        return (edges, true);
                    }
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
    (edges, false)
}

/// The strongly connected sets of rules (Tarjan's, without recursion).
fn components(adjacency: &[Vec<usize>], edges: &[Edge]) -> Vec<Vec<usize>> {
    let count = adjacency.len();
    let mut order: Vec<Option<usize>> = vec![None; count];
    let mut low = vec![0usize; count];
    let mut on_stack = vec![false; count];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for root in 0..count {
        if order.get(root).copied().flatten().is_some() {
            continue;
        }
        // (node, how many of its edges were followed)
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (node, ref mut done)) = work.last_mut() {
            if *done == 0 && order[node].is_none() {
                order[node] = Some(next);
                low[node] = next;
                next += 1;
                stack.push(node);
                on_stack[node] = true;
            }
            let out_edges = &adjacency[node];
            if let Some(&edge) = out_edges.get(*done) {
                *done += 1;
                let to = edges[edge].to;
                match order[to] {
                    None => work.push((to, 0)),
                    Some(seen) if on_stack[to] => low[node] = low[node].min(seen),
                    Some(_) => {}
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[node]);
            }
            if Some(low[node]) == order[node] {
                let mut component = Vec::new();
                while let Some(member) = stack.pop() {
                    on_stack[member] = false;
                    component.push(member);
                    if member == node {
                        break;
                    }
                }
                out.push(component);
            }
        }
    }
    out
}

/// The shortest path of edges from `start` back to `start`, breadth first.
fn shortest_cycle(start: usize, adjacency: &[Vec<usize>], edges: &[Edge]) -> Option<Vec<Edge>> {
    // The edge each rule was first reached by.
    let mut reached: Vec<Option<usize>> = vec![None; adjacency.len()];
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &index in adjacency.get(node).into_iter().flatten() {
            let edge = edges.get(index)?;
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
            if reached.get(edge.to).is_some_and(Option::is_none) {
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
