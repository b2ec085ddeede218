//! The coverage as people read it (a table, what was not covered, the
//! totals) and as one JSON object per rules directory
//! (docs/rulec.md#coverage).

use super::{Coverage, Outcomes, RuleCoverage, StepCoverage, StepLines};
use serde_json::{json, Value};

/// What was covered of how much, over a rules directory.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Totals {
    rules: usize,
    triggered: usize,
    steps: usize,
    steps_reached: usize,
    finally: usize,
    finally_reached: usize,
    /// Two per `when` (the rule's and its steps'): true and false.
    when_outcomes: usize,
    when_outcomes_seen: usize,
}

impl Totals {
    fn of(set: &Coverage) -> Self {
        let mut totals = Self::default();
        for rule in &set.rules {
            totals.rules += 1;
            totals.triggered += usize::from(rule.runs > 0);
            totals.steps += rule.steps.len();
            totals.steps_reached += rule.steps.iter().filter(|s| s.reached > 0).count();
            totals.finally += rule.finally.len();
            totals.finally_reached += rule.finally.iter().filter(|s| s.reached > 0).count();
            let whens = rule.when.iter().chain(
                rule.steps
                    .iter()
                    .chain(&rule.finally)
                    .filter_map(|step| step.when.as_ref()),
            );
            for when in whens {
                totals.when_outcomes += 2;
                totals.when_outcomes_seen +=
                    usize::from(when.seen_true > 0) + usize::from(when.seen_false > 0);
            }
        }
        totals
    }
}

/// A `when`'s outcomes as a cell: `true/false`, `-` without one.
fn outcomes(when: Option<&Outcomes>) -> String {
    when.map_or_else(
        || "-".to_string(),
        |when| format!("{}/{}", when.seen_true, when.seen_false),
    )
}

/// Each step's `reached` count, with its `when`'s outcomes after it:
/// `4 2(1/1)`; `-` without steps.
fn steps_cell(steps: &[StepCoverage]) -> String {
    if steps.is_empty() {
        return "-".to_string();
    }
    let cells: Vec<String> = steps
        .iter()
        .map(|step| match &step.when {
            None => step.reached.to_string(),
            Some(when) => format!("{}({})", step.reached, outcomes(Some(when))),
        })
        .collect();
    cells.join(" ")
}

/// What of one rule no test covered, in words; empty when all was.
fn missed(rule: &RuleCoverage) -> Vec<String> {
    let mut missed = Vec::new();
    if !rule.enabled {
        // Its events are not judged (docs/rules.md#disabled-rules).
        missed.push("disabled: never judged".to_string());
        return missed;
    }
    if rule.matched == 0 {
        missed.push("no event matched its `on`".to_string());
        return missed;
    }
    if let Some(when) = &rule.when {
        missed.extend(never("`when`", when));
    }
    if rule.runs == 0 {
        missed.push("never triggered".to_string());
        return missed;
    }
    for (kind, steps) in [("step", &rule.steps), ("finally", &rule.finally)] {
        for (index, step) in steps.iter().enumerate() {
            if step.reached == 0 {
                missed.push(format!("{kind} {index} never reached"));
            } else if let Some(when) = &step.when {
                missed.extend(never(&format!("{kind} {index} `when`"), when));
            }
        }
    }
    missed
}

/// `what never true` / `never false`, for the outcomes not seen.
fn never(what: &str, when: &Outcomes) -> Option<String> {
    match (when.seen_true > 0, when.seen_false > 0) {
        (true, true) => None,
        (false, true) => Some(format!("{what} never true")),
        (true, false) => Some(format!("{what} never false")),
        (false, false) => Some(format!("{what} never evaluated")),
    }
}

/// The table of one rules directory, what was not covered, and the totals.
pub fn text(set: &Coverage) -> String {
    let header = [
        "rule",
        "runs",
        "matched",
        "when true/false",
        "steps reached",
        "finally reached",
    ];
    let mut rows: Vec<[String; 6]> = vec![header.map(str::to_string)];
    for rule in &set.rules {
        let name = if rule.enabled {
            rule.name.clone()
        } else {
            format!("{} (disabled)", rule.name)
        };
        rows.push([
            name,
            rule.runs.to_string(),
            rule.matched.to_string(),
            outcomes(rule.when.as_ref()),
            steps_cell(&rule.steps),
            steps_cell(&rule.finally),
        ]);
    }
    let mut widths = [0; 6];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let tests = crate::check::plural(set.tests, "test");
    let mut out = format!("coverage of {} ({tests})\n", set.path.display());
    for row in &rows {
        let mut line = String::from(" ");
        for (column, (cell, width)) in row.iter().zip(widths).enumerate() {
            // Counts right-aligned, the rest left.
            let cell = if matches!(column, 1 | 2) {
                format!(" {cell:>width$}")
            } else {
                format!(" {cell:<width$}")
            };
            line.push_str(&cell);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let missed: Vec<(&str, Vec<String>)> = set
        .rules
        .iter()
        .map(|rule| (rule.name.as_str(), missed(rule)))
        .filter(|(_, missed)| !missed.is_empty())
        .collect();
    if !missed.is_empty() {
        out.push_str("not covered:\n");
        for (name, missed) in missed {
            out.push_str(&format!("  {name}: {}\n", missed.join("; ")));
        }
    }
    let t = Totals::of(set);
    out.push_str(&format!(
        "covered: {}/{} rules triggered, {}/{} steps reached, {}/{} finally steps reached, {}/{} `when` outcomes seen\n",
        t.triggered,
        t.rules,
        t.steps_reached,
        t.steps,
        t.finally_reached,
        t.finally,
        t.when_outcomes_seen,
        t.when_outcomes
    ));
    out
}

fn when_json(when: Option<&Outcomes>, line: Option<u32>) -> Value {
    when.map_or(Value::Null, |when| {
        json!({
            "line": line,
            "true": when.seen_true,
            "false": when.seen_false,
            "errors": when.errors,
        })
    })
}

fn steps_json(steps: &[StepCoverage], lines: Option<&Vec<StepLines>>) -> Value {
    steps
        .iter()
        .enumerate()
        .map(|(index, step)| {
            let lines = lines.and_then(|lines| lines.get(index));
            json!({
                "step": index,
                "line": lines.map(|l| l.table),
                "reached": step.reached,
                "when": when_json(step.when.as_ref(), lines.and_then(|l| l.when)),
            })
        })
        .collect()
}

fn rule_json(rule: &RuleCoverage) -> Value {
    let lines = rule.lines.as_ref();
    json!({
        "rule": rule.name,
        "file": lines.map(|l| l.file.as_str()),
        "line": lines.map(|l| l.table),
        "enabled": rule.enabled,
        "on": {"line": lines.map(|l| l.on), "matched": rule.matched},
        "runs": rule.runs,
        "when": when_json(rule.when.as_ref(), lines.and_then(|l| l.when)),
        "steps": steps_json(&rule.steps, lines.map(|l| &l.steps)),
        "finally": steps_json(&rule.finally, lines.map(|l| &l.finally)),
    })
}

/// One rules directory's coverage as one JSON object.
pub fn json(set: &Coverage) -> Value {
    let t = Totals::of(set);
    json!({
        "coverage": set.path.display().to_string(),
        "tests": set.tests,
        "rules": set.rules.iter().map(rule_json).collect::<Vec<_>>(),
        "totals": {
            "rules": t.rules,
            "triggered": t.triggered,
            "steps": t.steps,
            "steps_reached": t.steps_reached,
            "finally": t.finally,
            "finally_reached": t.finally_reached,
            "when_outcomes": t.when_outcomes,
            "when_outcomes_seen": t.when_outcomes_seen,
        },
    })
}
