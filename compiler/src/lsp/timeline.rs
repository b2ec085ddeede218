//! Diagnostics of timeline and test files (docs/editors.md#timelines-and-tests):
//! what the simulator's timeline parser and `rulec test`'s expectation
//! reader report, each placed on the entry and key it names. The parsers
//! stop at their first problem, so a file shows at most one of each.

use super::diagnostics::{Problem, TIMELINE_CODE};
use crate::diagnostic::{toml_string, Severity};
use crate::rule_test::{close_expectation_key, parse_expectations, ExpectError};
use ruled_engine::sim::{Place, TimelineError};
use std::ops::Range;
use toml::de::{DeTable, DeValue};

/// Every problem the parsers find in the timeline `text`.
pub fn problems(text: &str) -> Vec<Problem> {
    let document = match DeTable::parse(text) {
        Ok(document) => document,
        Err(error) => {
            return vec![problem(
                error.span().unwrap_or(0..0),
                format!("not valid TOML: {}", error.message()),
                None,
            )
            .with_code(crate::diagnostic::Code::Toml.as_str())]
        }
    };
    let document = document.get_ref();
    let mut found = Vec::new();
    if let Ok(table) = toml::from_str::<toml::Table>(text) {
        if let Err(error) = parse_expectations(&table) {
            found.push(expectation_problem(document, &error));
        }
    }
    if let Err(error) = ruled_engine::sim::parse(text) {
        found.push(timeline_problem(document, &error));
    }
    found
}

fn problem(span: Range<usize>, message: String, help: Option<String>) -> Problem {
    Problem {
        span,
        severity: Severity::Error,
        code: TIMELINE_CODE,
        message,
        help,
        fix: None,
        related: Vec::new(),
    }
}

/// Where in the document a problem is.
struct Finder<'d, 'i> {
    document: &'d DeTable<'i>,
}

impl<'i> Finder<'_, 'i> {
    /// The table of entry `number` (from 1) of `kind`, and its span.
    fn entry(&self, kind: &str, number: usize) -> Option<(&DeTable<'i>, Range<usize>)> {
        let (_, value) = self
            .document
            .iter()
            .find(|(key, _)| key.get_ref() == kind)?;
        let DeValue::Array(items) = value.get_ref() else {
            return None;
        };
        let item = items.get(number.checked_sub(1)?)?;
        match item.get_ref() {
            DeValue::Table(table) => Some((table, item.span())),
            _ => None,
        }
    }

    /// The span of `key` (`value`: of its value) in `table`.
    fn key(table: &DeTable<'_>, key: &str, value: bool) -> Option<Range<usize>> {
        let (k, v) = table.iter().find(|(k, _)| k.get_ref() == key)?;
        Some(if value { v.span() } else { k.span() })
    }

    /// `key` of entry `number` of `kind`, else the entry, else the start.
    fn at(&self, kind: &str, number: usize, key: Option<&str>, value: bool) -> Range<usize> {
        let Some((table, span)) = self.entry(kind, number) else {
            return 0..0;
        };
        key.and_then(|key| Self::key(table, key, value))
            .unwrap_or(span)
    }

    /// A top-level key (or its value).
    fn top(&self, key: &str, value: bool) -> Range<usize> {
        Self::key(self.document, key, value).unwrap_or(0..0)
    }

    /// `key` at `place`.
    fn place(&self, place: &Place, key: &str, value: bool) -> Range<usize> {
        match place {
            Place::Entry { kind, number } => self.at(kind, *number, Some(key), value),
            Place::TopLevel => self.top(key, value),
        }
    }
}

fn timeline_problem(document: &DeTable<'_>, error: &TimelineError) -> Problem {
    let find = Finder { document };
    let span = match error {
        TimelineError::Syntax { .. } | TimelineError::Shape { .. } => 0..0,
        TimelineError::ReloadBundles { .. } => find.top("reload", false),
        TimelineError::UnknownSetting { key } => find.top(key, false),
        TimelineError::NotEntries { kind } => find.top(kind, false),
        TimelineError::UnknownKey { place, key } => find.place(place, key, false),
        TimelineError::Missing { place, .. } => match place {
            Place::Entry { kind, number } => find.at(kind, *number, None, false),
            Place::TopLevel => 0..0,
        },
        TimelineError::WrongType { place, key, .. }
        | TimelineError::BadDuration { place, key, .. }
        | TimelineError::Negative { place, key } => find.place(place, key, true),
        TimelineError::DataNotTable { number } => find.at("event", *number, Some("data"), true),
        TimelineError::StateShape { number, .. } => find.at("state", *number, None, false),
        TimelineError::NoWorkers => find.top("workers", true),
        TimelineError::FailUntilNotAfterAt { number, .. } => {
            find.at("fail", *number, Some("until"), true)
        }
        TimelineError::UnknownFailRule { number, .. } => {
            find.at("fail", *number, Some("rule"), true)
        }
        TimelineError::FailStepOutOfRange { number, .. } => {
            find.at("fail", *number, Some("step"), true)
        }
    };
    let fix = error.suggestion().map(|suggestion| match error {
        TimelineError::BadDuration { .. } => (span.clone(), toml_string(&suggestion)),
        _ => (span.clone(), suggestion),
    });
    Problem {
        fix,
        ..problem(span, error.to_string(), error.help())
    }
}

fn expectation_problem(document: &DeTable<'_>, error: &ExpectError) -> Problem {
    let find = Finder { document };
    let mut fix = None;
    let span = match error {
        ExpectError::NotEntries { kind } => find.top(kind, false),
        ExpectError::UnknownKey { kind, number, key } => {
            let span = find.at(kind, *number, Some(key), false);
            fix = close_expectation_key(key).map(|close| (span.clone(), close.to_string()));
            span
        }
        ExpectError::WrongType {
            kind, number, key, ..
        } => find.at(kind, *number, Some(key), true),
        ExpectError::BadDuration {
            kind, number, key, ..
        } => find.at(kind, *number, Some(key), true),
        ExpectError::AtAndBetween { kind, number } => find.at(kind, *number, None, false),
        ExpectError::BetweenReversed { kind, number } => {
            find.at(kind, *number, Some("between"), true)
        }
        ExpectError::CountOnNone { number } => {
            find.at("expect-none", *number, Some("count"), false)
        }
    };
    Problem {
        fix,
        ..problem(span, error.to_string(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_point_at_their_entry_and_key() {
        let text =
            "[[event]]\nat = \"0s\"\ntopic = \"a\"\n\n[[event]]\nat = \"1s\"\ntpoic = \"b\"\n";
        let found = problems(text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(&text[found[0].span.clone()], "tpoic");
        assert_eq!(found[0].fix.as_ref().map(|f| f.1.as_str()), Some("topic"));

        let text = "[[event]]\nat = \"10 s\"\ntopic = \"a\"\n[[expect]]\nrlue = \"x\"\n";
        let found = problems(text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(&text[found[0].span.clone()], "rlue");
        assert_eq!(&text[found[1].span.clone()], "\"10 s\"");
        assert_eq!(found[1].fix.as_ref().map(|f| f.1.as_str()), Some("\"10s\""));

        let found = problems("[[event]\n");
        assert_eq!(found.len(), 1);
        assert!(found[0].message.starts_with("not valid TOML"), "{found:?}");
    }
}
