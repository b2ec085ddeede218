//! `[[expect]]` and `[[expect-none]]` in a timeline (docs/rulec.md#rulec-test):
//! which output lines an expectation selects, how many it wants, and the
//! words that describe it in a failure.

use rulecore::parse_duration;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;

/// The output fields an expectation may select on, besides `kind`
/// (docs/simulation.md#output).
pub const FIELDS: &[&str] = &[
    "rule", "step", "finally", "pass", "action", "list", "push", "channel", "command", "iface",
    "id", "data", "run", "reason", "message",
];

/// When a selected line must have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Any,
    /// `at`: exactly this virtual time, ms.
    At(u64),
    /// `between`: within these virtual times, ms, both included.
    Between(u64, u64),
}

/// One expectation.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    /// `[[expect-none]]`: no line may match.
    pub none: bool,
    /// 1-based, in file order within its kind of entry.
    pub number: usize,
    pub kind: String,
    /// Field name and the value it must have, in file order.
    pub fields: Vec<(String, Value)>,
    pub when: When,
    /// `count`: exactly this many lines; absent: at least one.
    pub count: Option<u64>,
}

/// An expectation that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpectError {
    #[error("`{kind}` must be a list of `[[{kind}]]` entries")]
    NotEntries { kind: &'static str },
    #[error("[[{kind}]] #{number}: unknown key `{key}`{}", suggestion(.key))]
    UnknownKey {
        kind: &'static str,
        number: usize,
        key: String,
    },
    #[error("[[{kind}]] #{number}: `{key}` must be {expected}")]
    WrongType {
        kind: &'static str,
        number: usize,
        key: String,
        expected: &'static str,
    },
    #[error("[[{kind}]] #{number}: `{key}` = {text:?} is not a duration such as \"30s\"")]
    BadDuration {
        kind: &'static str,
        number: usize,
        key: &'static str,
        text: String,
    },
    #[error("[[{kind}]] #{number}: give `at` or `between`, not both")]
    AtAndBetween { kind: &'static str, number: usize },
    #[error("[[{kind}]] #{number}: `between` ends before it starts")]
    BetweenReversed { kind: &'static str, number: usize },
    #[error("[[expect-none]] #{number}: `count` is for [[expect]]; [[expect-none]] wants none")]
    CountOnNone { number: usize },
}

/// The key of an expectation close to `key`, for a "did you mean".
pub fn close_key(key: &str) -> Option<&'static str> {
    let known = ["kind", "at", "between", "count"]
        .into_iter()
        .chain(FIELDS.iter().copied());
    rulecore::suggest::closest_within(key, known, 2)
}

fn suggestion(key: &str) -> String {
    match close_key(key) {
        Some(close) => format!(" (did you mean `{close}`?)"),
        None => format!(
            "; an expectation takes kind, at, between, count and the output fields {}",
            FIELDS.join(", ")
        ),
    }
}

/// Reads the `[[expect]]` and `[[expect-none]]` entries of a timeline file;
/// the first problem of [`parse_all`].
pub fn parse(table: &toml::Table) -> Result<Vec<Expectation>, ExpectError> {
    parse_all(table).map_err(|mut problems| problems.swap_remove(0))
}

/// [`parse`], with every problem (never an empty list).
pub fn parse_all(table: &toml::Table) -> Result<Vec<Expectation>, Vec<ExpectError>> {
    let mut all = Vec::new();
    let mut problems = Vec::new();
    for (kind, none) in [("expect", false), ("expect-none", true)] {
        let Some(value) = table.get(kind) else {
            continue;
        };
        let toml::Value::Array(entries) = value else {
            problems.push(ExpectError::NotEntries { kind });
            continue;
        };
        for (index, entry) in entries.iter().enumerate() {
            let toml::Value::Table(entry) = entry else {
                problems.push(ExpectError::NotEntries { kind });
                break;
            };
            let mut expectation = Expectation {
                none,
                number: index + 1,
                kind: "action".to_string(),
                fields: Vec::new(),
                when: When::Any,
                count: None,
            };
            for (key, value) in entry {
                if let Err(problem) = read_key(&mut expectation, kind, key, value) {
                    problems.push(problem);
                }
            }
            // In output order, whatever order the file wrote them in.
            expectation
                .fields
                .sort_by_key(|(key, _)| FIELDS.iter().position(|field| field == key));
            all.push(expectation);
        }
    }
    if problems.is_empty() {
        Ok(all)
    } else {
        Err(problems)
    }
}

/// Reads one key of an expectation into it.
fn read_key(
    expectation: &mut Expectation,
    kind: &'static str,
    key: &str,
    value: &toml::Value,
) -> Result<(), ExpectError> {
    let number = expectation.number;
    let none = expectation.none;
    let wrong = |key: &str, expected| ExpectError::WrongType {
        kind,
        number,
        key: key.to_string(),
        expected,
    };
    let duration = |key: &'static str, value: &toml::Value| -> Result<u64, ExpectError> {
        let toml::Value::String(text) = value else {
            return Err(wrong(key, "a duration string such as \"30s\""));
        };
        let bad = || ExpectError::BadDuration {
            kind,
            number,
            key,
            text: text.clone(),
        };
        let nanos = parse_duration(text).map_err(|_| bad())?;
        u64::try_from(nanos / 1_000_000).map_err(|_| bad())
    };
    match key {
        "kind" => match value {
            toml::Value::String(text) => expectation.kind = text.clone(),
            _ => return Err(wrong(key, "a string such as \"action\"")),
        },
        "at" => {
            if expectation.when != When::Any {
                return Err(ExpectError::AtAndBetween { kind, number });
            }
            expectation.when = When::At(duration("at", value)?);
        }
        "between" => {
            if expectation.when != When::Any {
                return Err(ExpectError::AtAndBetween { kind, number });
            }
            let pair = match value {
                toml::Value::Array(pair) if pair.len() == 2 => pair,
                _ => return Err(wrong(key, "two durations: [\"10s\", \"20s\"]")),
            };
            let (from, to) = (
                duration("between", &pair[0])?,
                duration("between", &pair[1])?,
            );
            if to < from {
                return Err(ExpectError::BetweenReversed { kind, number });
            }
            expectation.when = When::Between(from, to);
        }
        "count" if none => return Err(ExpectError::CountOnNone { number }),
        "count" => match value {
            toml::Value::Integer(n) if *n >= 0 => expectation.count = Some(n.unsigned_abs()),
            _ => return Err(wrong(key, "a whole number from 0")),
        },
        field if FIELDS.contains(&field) => {
            let value = match value {
                toml::Value::String(text) => Value::from(text.as_str()),
                toml::Value::Integer(n) => Value::from(*n),
                toml::Value::Boolean(b) => Value::from(*b),
                _ => return Err(wrong(key, "a string, a whole number or a boolean")),
            };
            expectation.fields.push((field.to_string(), value));
        }
        _ => {
            return Err(ExpectError::UnknownKey {
                kind,
                number,
                key: key.to_string(),
            })
        }
    }
    Ok(())
}

impl Expectation {
    /// Whether an output line (as its JSON object) has the kind and fields.
    pub fn selects_fields(&self, line: &Value) -> bool {
        line["kind"].as_str() == Some(&self.kind)
            && self
                .fields
                .iter()
                // An absent flag (`finally`) is false.
                .all(|(key, want)| match line.get(key) {
                    Some(have) => have == want,
                    None => *want == Value::Bool(false),
                })
    }

    /// Whether `at_ms` is in the expectation's time.
    pub fn selects_time(&self, at_ms: u64) -> bool {
        match self.when {
            When::Any => true,
            When::At(at) => at_ms == at,
            When::Between(from, to) => (from..=to).contains(&at_ms),
        }
    }

    /// The lines (indices) the expectation selects.
    pub fn select(&self, lines: &[Value]) -> Vec<usize> {
        lines
            .iter()
            .enumerate()
            .filter(|(_, line)| {
                self.selects_fields(line)
                    && line["at_ms"]
                        .as_u64()
                        .is_some_and(|at| self.selects_time(at))
            })
            .map(|(index, _)| index)
            .collect()
    }

    /// `None` when `found` lines satisfy it, else what was wrong.
    pub fn judge(&self, found: usize) -> Option<String> {
        let found_text = match found {
            0 => "found none".to_string(),
            1 => "found 1".to_string(),
            n => format!("found {n}"),
        };
        match (self.none, self.count) {
            (true, _) if found > 0 => Some(format!("expected no matching line, {found_text}")),
            (false, Some(count)) if found as u64 != count => Some(format!(
                "expected exactly {count} matching line{}, {found_text}",
                if count == 1 { "" } else { "s" }
            )),
            (false, None) if found == 0 => {
                Some("expected at least one matching line, found none".to_string())
            }
            _ => None,
        }
    }
}

/// The output lines by kind and by kind and rule, each list in time
/// order: an expectation reads only the lines of its kind (and rule) in its
/// time window, so `rulec test` stays linear in many expectations over a
/// long output (each expectation scanning every line made it quadratic).
pub struct LineIndex<'a> {
    lines: &'a [Value],
    by_kind: HashMap<&'a str, Vec<(u64, usize)>>,
    by_rule: HashMap<(&'a str, &'a str), Vec<(u64, usize)>>,
}

impl<'a> LineIndex<'a> {
    pub fn new(lines: &'a [Value]) -> Self {
        let mut by_kind: HashMap<&str, Vec<(u64, usize)>> = HashMap::new();
        let mut by_rule: HashMap<(&str, &str), Vec<(u64, usize)>> = HashMap::new();
        for (index, line) in lines.iter().enumerate() {
            let (Some(kind), Some(at)) = (line["kind"].as_str(), line["at_ms"].as_u64()) else {
                continue;
            };
            by_kind.entry(kind).or_default().push((at, index));
            if let Some(rule) = line["rule"].as_str() {
                by_rule.entry((kind, rule)).or_default().push((at, index));
            }
        }
        // The output is in time order already; a stable sort keeps it so.
        for list in by_kind.values_mut().chain(by_rule.values_mut()) {
            list.sort_by_key(|(at, _)| *at);
        }
        LineIndex {
            lines,
            by_kind,
            by_rule,
        }
    }

    /// The lines (indices, in output order) `expectation` selects: what
    /// [`Expectation::select`] answers, without reading the other lines.
    pub fn select(&self, expectation: &Expectation) -> Vec<usize> {
        let rule = expectation
            .fields
            .iter()
            .find(|(key, _)| key == "rule")
            .and_then(|(_, value)| value.as_str());
        let list = match rule {
            Some(rule) => self.by_rule.get(&(expectation.kind.as_str(), rule)),
            None => self.by_kind.get(expectation.kind.as_str()),
        };
        let Some(list) = list else {
            return Vec::new();
        };
        let (from, to) = match expectation.when {
            When::Any => (0, u64::MAX),
            When::At(at) => (at, at),
            When::Between(from, to) => (from, to),
        };
        let start = list.partition_point(|(at, _)| *at < from);
        let mut selected: Vec<usize> = list[start..]
            .iter()
            .take_while(|(at, _)| *at <= to)
            .map(|(_, index)| *index)
            .filter(|&index| expectation.selects_fields(&self.lines[index]))
            .collect();
        selected.sort_unstable();
        selected
    }
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entry = if self.none { "expect-none" } else { "expect" };
        write!(f, "[[{entry}]] #{}: kind={}", self.number, self.kind)?;
        for (key, value) in &self.fields {
            match value {
                Value::String(text) => write!(f, " {key}={text}")?,
                other => write!(f, " {key}={other}")?,
            }
        }
        let go = |ms: u64| {
            rulecore::duration::format_duration(
                i64::try_from(ms)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(1_000_000),
            )
        };
        match self.when {
            When::Any => {}
            When::At(at) => write!(f, " at={}", go(at))?,
            When::Between(from, to) => write!(f, " between={}..{}", go(from), go(to))?,
        }
        if let Some(count) = self.count {
            write!(f, " count={count}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Expectation {
        let table: toml::Table = text.parse().unwrap_or_default();
        match parse(&table) {
            Ok(mut all) if all.len() == 1 => all.remove(0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_index_selects_what_a_scan_selects() {
        let lines: Vec<Value> = (0..40)
            .map(|i| {
                serde_json::json!({
                    "at_ms": (i / 3) * 1000,
                    "kind": if i % 4 == 0 { "run-start" } else { "action" },
                    "rule": if i % 2 == 0 { "a" } else { "b" },
                    "step": i % 3,
                })
            })
            .collect();
        let index = LineIndex::new(&lines);
        for text in [
            "[[expect]]\n",
            "[[expect]]\nrule = \"a\"\n",
            "[[expect]]\nrule = \"b\"\nat = \"3s\"\n",
            "[[expect]]\nbetween = [\"2s\", \"7s\"]\nstep = 1\n",
            "[[expect]]\nkind = \"run-start\"\nrule = \"a\"\nbetween = [\"0s\", \"5s\"]\n",
            "[[expect]]\nrule = \"c\"\n",
        ] {
            let expectation = one(text);
            assert_eq!(
                index.select(&expectation),
                expectation.select(&lines),
                "{text}"
            );
        }
    }

    #[test]
    fn finally_selects_the_lines_of_finally_steps_and_absent_reads_false() {
        let finally = serde_json::json!({"at_ms": 0, "kind": "action", "step": 0, "finally": true});
        let step = serde_json::json!({"at_ms": 0, "kind": "action", "step": 0});
        let want = one("[[expect]]\nfinally = true\nstep = 0\n");
        assert!(want.selects_fields(&finally));
        assert!(!want.selects_fields(&step));
        let not = one("[[expect]]\nfinally = false\n");
        assert!(!not.selects_fields(&finally));
        assert!(not.selects_fields(&step));
        assert_eq!(
            want.to_string(),
            "[[expect]] #1: kind=action step=0 finally=true"
        );
    }
}
