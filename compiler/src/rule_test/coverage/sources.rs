//! Where each part of a rule is written (docs/rulec.md#coverage): the
//! lines of its `[[rule]]` table, its `on`, its `when`, and each step's
//! table and `when`, read from the rule files' spans again after the
//! rules built (the bundle keeps no lines).

use crate::load::{load_dir, SourceFile};
use crate::rulefile::{self, Table};
use crate::span::Lines;
use rulecore::bundle::Payload;
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use toml::de::DeValue;

/// Where one step (or finally step) is written: 1-based lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepLines {
    /// Its `[[rule.step]]` (`[[rule.finally]]`) header, or inline table.
    pub table: u32,
    /// Its `when` key.
    pub when: Option<u32>,
}

/// Where one rule is written: its file and 1-based lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleLines {
    /// The rule file as the tests named their rules
    /// (`fixtures/rules/10-alarm.toml`): what lcov's `SF:` says.
    pub file: String,
    /// Its `[[rule]]` header.
    pub table: u32,
    /// Its `on` key (the header's line if it has none).
    pub on: u32,
    pub when: Option<u32>,
    pub steps: Vec<StepLines>,
    pub finally: Vec<StepLines>,
}

/// The lines of every rule of `payload`, built from the rules at `path`, in
/// bundle order; `None` for a rule not found again (its file changed
/// since). `Err`: the rules are a bundle, or cannot be read again.
pub(super) fn read(path: &Path, payload: &Payload) -> Result<Vec<Option<RuleLines>>, String> {
    let rule_file = path.extension().is_some_and(|ext| ext == "toml");
    if !path.is_dir() && !rule_file {
        return Err("a bundle keeps no rule file lines".to_string());
    }
    let loaded = load_dir(path).map_err(|error| error.to_string())?;
    let mut by_file: HashMap<&str, std::vec::IntoIter<(String, RuleLines)>> = HashMap::new();
    for file in &loaded.files {
        let shown = if path.is_dir() {
            path.join(&file.name)
        } else {
            path.to_path_buf()
        };
        let rules = of_file(file, &shown.display().to_string());
        by_file.insert(&file.name, rules.into_iter());
    }
    // A file's rules are in the bundle in file order: the k-th rule of a
    // source is the k-th table of its file.
    Ok(payload
        .rules
        .iter()
        .map(|rule| {
            let (name, lines) = by_file.get_mut(&*rule.source)?.next()?;
            (name == *rule.name).then_some(lines)
        })
        .collect())
}

/// Every `[[rule]]` of one file, with its name and lines; none when the
/// file does not parse (it did when the rules built).
fn of_file(file: &SourceFile, shown: &str) -> Vec<(String, RuleLines)> {
    let Ok(parsed) = rulefile::parse(file) else {
        return Vec::new();
    };
    let lines = Lines::new(&file.text);
    let line = |span: Range<usize>| -> u32 {
        u32::try_from(lines.line_of(span.start) + 1).unwrap_or(u32::MAX)
    };
    parsed
        .rules
        .iter()
        .map(|raw| {
            let table = line(raw.span.clone());
            let name = key(&raw.table, "name")
                .and_then(|(_, value)| value.as_str())
                .unwrap_or_default()
                .to_string();
            let rule = RuleLines {
                file: shown.to_string(),
                table,
                on: key(&raw.table, "on").map_or(table, |(span, _)| line(span)),
                when: key(&raw.table, "when").map(|(span, _)| line(span)),
                steps: steps(&raw.table, "step", &line),
                finally: steps(&raw.table, "finally", &line),
            };
            (name, rule)
        })
        .collect()
}

/// The span of `name`'s key in `table`, and its value.
fn key<'t, 'i>(table: &'t Table<'i>, name: &str) -> Option<(Range<usize>, &'t DeValue<'i>)> {
    table
        .iter()
        .find(|(key, _)| key.get_ref() == name)
        .map(|(key, value)| (key.span(), value.get_ref()))
}

/// The lines of the steps under `name` (`step` or `finally`).
fn steps(table: &Table<'_>, name: &str, line: &dyn Fn(Range<usize>) -> u32) -> Vec<StepLines> {
    let Some((_, DeValue::Array(items))) = key(table, name) else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| StepLines {
            table: line(item.span()),
            when: match item.get_ref() {
                DeValue::Table(step) => key(step, "when").map(|(span, _)| line(span)),
                _ => None,
            },
        })
        .collect()
}
