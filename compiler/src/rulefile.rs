//! The shape of a rule file (docs/rules.md): TOML parsed with spans for
//! every key and value, and the checks that reject a **whole file**: TOML
//! syntax errors and unknown keys at any level (top level, rule, step,
//! `repeat`). What is left is a list of raw rule tables that `validate`
//! checks one by one.
//!
//! We parse to `toml::de::DeTable` and check keys by hand instead of using
//! serde's `deny_unknown_fields`: that gives the span of every key and value,
//! lets a wrongly typed value reject only its rule (serde would fail the
//! whole file), and lets an unknown key list the expected keys and suggest
//! the closest one.

use crate::diagnostic::{Code, Diagnostic};
use crate::keys::{self, Level, Ty};
use crate::load::SourceFile;
use rulecore::suggest::did_you_mean;
use std::ops::Range;
use toml::de::{DeTable, DeValue};

pub use toml::de::DeTable as Table;
pub use toml::Spanned;

/// One `[[rule]]` table, structurally sound (no unknown keys anywhere).
#[derive(Debug)]
pub struct RawRule<'i> {
    /// 0-based position in its file.
    pub index: usize,
    /// The `[[rule]]` header (or the inline table).
    pub span: Range<usize>,
    pub table: DeTable<'i>,
    /// The sub-tables (`repeat`, a step) in which a misspelt key is read
    /// under its close spelling: a problem of such a table as a whole
    /// (`repeat` needs `every`) rests on the guess, and is not reported
    /// besides the unknown key (docs/rules.md#errors-and-warnings).
    pub guessed: Vec<Range<usize>>,
}

/// One `[[topic]]` table of the catalogue (docs/rules.md#the-topic-catalogue), with no
/// unknown keys.
#[derive(Debug)]
pub struct RawTopic<'i> {
    /// The `[[topic]]` header (or the inline table).
    pub span: Range<usize>,
    pub table: DeTable<'i>,
}

/// What one file declares: its rules, its topics, and its `[[guard]]` and
/// `[[limit]]` tables (read by [`crate::envelope`]).
#[derive(Debug, Default)]
pub struct Parsed<'i> {
    pub rules: Vec<RawRule<'i>>,
    pub topics: Vec<RawTopic<'i>>,
    pub guards: Vec<Spanned<DeValue<'i>>>,
    pub limits: Vec<Spanned<DeValue<'i>>>,
}

/// Parses one file. `Err` holds the diagnostics that reject the whole file.
pub fn parse(file: &SourceFile) -> Result<Parsed<'_>, Vec<Diagnostic>> {
    let (parsed, problems) = parse_all(file);
    if problems.is_empty() {
        Ok(parsed)
    } else {
        Err(problems)
    }
}

/// Parses one file: every rule and topic table found, and the diagnostics
/// that reject the whole file (empty when it is sound). A file rejected for
/// an unknown key still yields its tables, so that their other problems
/// are reported in the same run (docs/rules.md#errors-and-warnings); after
/// a TOML syntax error there are none.
pub fn parse_all(file: &SourceFile) -> (Parsed<'_>, Vec<Diagnostic>) {
    let document = match DeTable::parse(&file.text) {
        Ok(document) => document,
        Err(error) => return (Parsed::default(), vec![syntax_error(file, &error)]),
    };
    let mut problems = Vec::new();
    let mut rules = Vec::new();
    let mut topics = Vec::new();
    let (mut guards, mut limits) = (Vec::new(), Vec::new());
    for (key, value) in document.into_inner() {
        if keys::find(Level::Top, key.get_ref()).is_none() {
            problems.push(unknown_key(file, &key, Level::Top));
            continue;
        }
        let value_span = value.span();
        let is_topic = key.get_ref() == "topic";
        let name: &str = match key.get_ref().as_ref() {
            "topic" | "guard" | "limit" => key.get_ref(),
            _ => "rule",
        };
        let DeValue::Array(items) = value.into_inner() else {
            problems.push(
                Diagnostic::error(Code::Type, format!("`{name}` must be an array of tables"))
                    .in_file(&file.name)
                    .at(value_span, format!("expected `[[{name}]]` tables"))
                    .with_help(format!(
                        "start each {name} with a `[[{name}]]` header (two brackets)"
                    )),
            );
            continue;
        };
        if is_topic {
            topics.extend(topic_tables(file, &items, &mut problems));
            continue;
        }
        match name {
            "guard" => {
                guards.extend(items);
                continue;
            }
            "limit" => {
                limits.extend(items);
                continue;
            }
            _ => {}
        }
        for (index, item) in items.iter().enumerate() {
            let span = item.span();
            let DeValue::Table(table) = item.get_ref() else {
                problems.push(
                    Diagnostic::error(Code::Type, "each `rule` must be a table")
                        .in_file(&file.name)
                        .at(span, format!("found {}", item.get_ref().type_str()))
                        .with_help("start each rule with a `[[rule]]` header"),
                );
                continue;
            };
            let mut rule_problems = Vec::new();
            check_rule_keys(file, table, &mut rule_problems);
            // Name the rule in its problems when it has a usable name.
            let name = table
                .iter()
                .find(|(key, _)| key.get_ref() == "name")
                .and_then(|(_, value)| value.get_ref().as_str())
                .filter(|name| !name.is_empty());
            for problem in &mut rule_problems {
                problem.rule = name.map(str::to_string);
            }
            let misspelt = !rule_problems.is_empty();
            problems.append(&mut rule_problems);
            let mut table = table.clone();
            let mut guessed = Vec::new();
            if misspelt {
                respell(&mut table, Level::Rule, None, &mut guessed);
            }
            rules.push(RawRule {
                index,
                span,
                table,
                guessed,
            });
        }
    }
    (
        Parsed {
            rules,
            topics,
            guards,
            limits,
        },
        problems,
    )
}

/// The `[[topic]]` tables of a file, each checked for unknown keys.
fn topic_tables<'i>(
    file: &SourceFile,
    items: &[Spanned<DeValue<'i>>],
    problems: &mut Vec<Diagnostic>,
) -> Vec<RawTopic<'i>> {
    let mut topics = Vec::new();
    for item in items {
        let span = item.span();
        let DeValue::Table(table) = item.get_ref() else {
            problems.push(
                Diagnostic::error(Code::Type, "each `topic` must be a table")
                    .in_file(&file.name)
                    .at(span, format!("found {}", item.get_ref().type_str()))
                    .with_help("start each topic with a `[[topic]]` header"),
            );
            continue;
        };
        check_keys(file, table, Level::Topic, problems);
        topics.push(RawTopic {
            span,
            table: table.clone(),
        });
    }
    topics
}

/// Unknown keys in a rule and, through the key table, in its sub-tables
/// (`repeat`, each step).
fn check_rule_keys(file: &SourceFile, rule: &DeTable<'_>, problems: &mut Vec<Diagnostic>) {
    for (key, value) in rule.iter() {
        let Some(known) = keys::find(Level::Rule, key.get_ref()) else {
            problems.push(unknown_key(file, key, Level::Rule));
            continue;
        };
        // A value of the wrong type is the validator's `rulec::type`.
        // docs/rules.md#finally: steps, numbered in their own list.
        let finally = known.ty == Ty::Finally;
        match (known.ty, known.ty.tables_of(), value.get_ref()) {
            (Ty::Table(level), _, DeValue::Table(table)) => {
                check_keys(file, table, level, problems)
            }
            (_, Some(level), DeValue::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    if let DeValue::Table(table) = item.get_ref() {
                        let before = problems.len();
                        check_keys(file, table, level, problems);
                        // Only a step has a number problems name.
                        for problem in problems[before..]
                            .iter_mut()
                            .filter(|_| level == Level::Step)
                        {
                            problem.step = Some(index);
                            problem.finally = finally;
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// In a file rejected for unknown keys, a misspelt key with one close
/// spelling that its table lacks is read under that spelling, so that the
/// rule's other problems are reported in the same run and `evry = "10s"`
/// does not also make "`repeat` needs `every`" (docs/rules.md#errors-and-warnings).
/// `span` is the table's own, for a sub-table; it joins `guessed` when a
/// key of it is read under a guess.
fn respell(
    table: &mut DeTable<'_>,
    level: Level,
    span: Option<Range<usize>>,
    guessed: &mut Vec<Range<usize>>,
) {
    let names = keys::names(level);
    let entries: Vec<_> = std::mem::take(table).into_iter().collect();
    let mut present: Vec<String> = entries
        .iter()
        .map(|(k, _)| k.get_ref().to_string())
        .collect();
    for (key, mut value) in entries {
        let key = match did_you_mean(key.get_ref(), &names) {
            Some(close)
                if keys::find(level, key.get_ref()).is_none()
                    && !present.iter().any(|p| p == close) =>
            {
                // Two misspellings of one key: only the first is read as it.
                present.push(close.to_string());
                guessed.extend(span.clone());
                Spanned::new(key.span(), std::borrow::Cow::Owned(close.to_string()))
            }
            _ => key,
        };
        if let Some(known) = keys::find(level, key.get_ref()) {
            let value_span = value.span();
            match (known.ty, known.ty.tables_of(), value.get_mut()) {
                (Ty::Table(sub), _, DeValue::Table(inner)) => {
                    respell(inner, sub, Some(value_span), guessed)
                }
                (_, Some(sub), DeValue::Array(items)) => {
                    for item in items.iter_mut() {
                        let item_span = item.span();
                        if let DeValue::Table(inner) = item.get_mut() {
                            respell(inner, sub, Some(item_span), guessed);
                        }
                    }
                }
                _ => {}
            }
        }
        table.insert(key, value);
    }
}

fn check_keys(
    file: &SourceFile,
    table: &DeTable<'_>,
    level: Level,
    problems: &mut Vec<Diagnostic>,
) {
    for (key, _) in table.iter() {
        if keys::find(level, key.get_ref()).is_none() {
            problems.push(unknown_key(file, key, level));
        }
    }
}

fn unknown_key(
    file: &SourceFile,
    key: &Spanned<std::borrow::Cow<'_, str>>,
    level: Level,
) -> Diagnostic {
    let name = key.get_ref();
    let place = level.place();
    let expected = keys::names(level);
    let list = expected
        .iter()
        .map(|key| format!("`{key}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut help = format!("the keys allowed {place} are {list}");
    // `[[step]]` or a rule key at the top level: the `rule.` is missing.
    let in_rule = level != Level::Rule && keys::find(Level::Rule, name).is_some();
    if in_rule {
        let header = if name == "step" {
            "`[[rule.step]]`".to_string()
        } else {
            format!("`{name}` inside a `[[rule]]` table, before its first `[[rule.step]]`")
        };
        help = format!("`{name}` belongs to a rule: write {header}; {help}");
    }
    let close = did_you_mean(name, &expected);
    let label = match close {
        Some(close) => {
            help = format!("did you mean `{close}`? {help}");
            format!("unknown key; did you mean `{close}`?")
        }
        None => "unknown key".to_string(),
    };
    let diagnostic = Diagnostic::error(
        Code::UnknownKey,
        format!("unknown key `{name}` {place}: the whole file is ignored"),
    )
    .in_file(&file.name)
    .at(key.span(), label)
    .with_help(help);
    match close {
        Some(close) => diagnostic.with_fix(key.span(), close),
        None => diagnostic,
    }
}

/// The most common syntax error in a rule file: a value written without
/// quotes (`when = to == "parked"`, `after = 30s`). When the error is after
/// the `=` of such a `key = value` line, says how to write it, with the
/// author's own text.
fn unquoted_value(text: &str, at: usize) -> Option<String> {
    let line_start = text.get(..at)?.rfind('\n').map_or(0, |i| i + 1);
    let line_end = text.get(at..)?.find('\n').map_or(text.len(), |i| at + i);
    let line = text.get(line_start..line_end)?.trim_end_matches('\r');
    let (key, value) = line.split_once('=')?;
    let key = key.trim();
    let value = value.trim();
    let is_key = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let equals = line_start + line.find('=')?;
    let quoted = value.starts_with(['"', '\'', '[', '{']);
    if !is_key || at <= equals || value.is_empty() || quoted || value.contains('#') {
        return None;
    }
    if key == "when" && !value.contains('\'') {
        // Single quotes: the expression's own double quotes stay as they are.
        Some(format!(
            "the condition is a TOML string: quote all of it, in single quotes so that its \
             double quotes need no escaping: `when = '{value}'`"
        ))
    } else if !value.contains(['"', '\\']) {
        Some(format!(
            "text values are TOML strings: write `{key} = \"{value}\"`"
        ))
    } else {
        None
    }
}

fn syntax_error(file: &SourceFile, error: &toml::de::Error) -> Diagnostic {
    let message = error.message().trim().to_string();
    let span = error.span().unwrap_or(0..0);
    // The parser reports an unclosed `[` where the next line fails to be an
    // array element, often lines later: say what most likely happened.
    let help = if message.contains("array elements") {
        "an array opened earlier may be missing its `]`; until the TOML syntax is fixed the \
         whole file is ignored"
            .to_string()
    } else if let Some(fix) = unquoted_value(&file.text, span.start) {
        format!("{fix}; until the TOML syntax is fixed the whole file is ignored")
    } else {
        "fix the TOML syntax; until then the whole file is ignored".to_string()
    };
    Diagnostic::error(Code::Toml, format!("TOML syntax error: {message}"))
        .in_file(&file.name)
        .at(span, message)
        .with_help(help)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> SourceFile {
        SourceFile {
            name: "t.toml".into(),
            text: text.into(),
        }
    }

    #[test]
    fn unknown_keys_at_every_level_reject_the_file() {
        let text = "top = 1\n[[rule]]\nnme = 'x'\nrepeat = { count = 2, evry = '1s' }\n[[rule.step]]\ndo = 'redis'\nlsit = 'a'\n";
        let problems = parse(&file(text)).unwrap_err();
        let keys: Vec<&str> = problems
            .iter()
            .map(|d| &text[d.label.as_ref().unwrap().span.clone()])
            .collect();
        assert_eq!(keys.len(), 4, "{problems:#?}");
        for key in ["top", "nme", "evry", "lsit"] {
            assert!(keys.contains(&key), "{key} missing from {keys:?}");
        }
        assert!(problems.iter().all(|d| d.code == "rulec::unknown-key"));
    }

    #[test]
    fn rules_keep_file_order_and_header_spans() {
        let text = "[[rule]]\nname = 'b'\n[[rule]]\nname = 'a'\n";
        let source = file(text);
        let rules = parse(&source).unwrap().rules;
        assert_eq!(rules.len(), 2);
        assert_eq!(&text[rules[1].span.clone()], "[[rule]]");
        assert_eq!(rules[1].span.start, 20);
    }

    #[test]
    fn a_step_outside_a_rule_says_where_it_belongs() {
        let text = "[[rule]]\nname = \"r\"\non = [\"a\"]\n[[step]]\ndo = \"exec\"\n";
        let problems = parse(&file(text)).unwrap_err();
        let help = problems[0].help.clone().unwrap();
        assert!(
            help.starts_with("`step` belongs to a rule: write `[[rule.step]]`"),
            "{help}"
        );
    }

    #[test]
    fn an_unquoted_value_gets_its_quoted_spelling() {
        let help = |text: &str| {
            let problems = parse(&file(text)).unwrap_err();
            assert_eq!(problems[0].code, "rulec::toml");
            problems[0].help.clone().unwrap()
        };
        let text = "[[rule]]\nname = \"r\"\non = [\"a\"]\nwhen = to == \"parked\"\n";
        assert!(
            help(text).contains(r#"`when = 'to == "parked"'`"#),
            "{}",
            help(text)
        );
        let text = "[[rule]]\r\nname = \"r\"\r\nafter = 30s\r\n";
        assert!(help(text).contains(r#"`after = "30s"`"#), "{}", help(text));
        // Both kinds of quote inside: no single spelling to offer.
        let text = "[[rule]]\nname = \"r\"\nwhen = to == \"a\" && to != 'x'\n";
        assert!(
            help(text).starts_with("fix the TOML syntax"),
            "{}",
            help(text)
        );
        // Not a value problem: the generic help.
        assert!(help("[[rule]\n").starts_with("fix the TOML syntax"));
    }

    #[test]
    fn syntax_error_points_into_the_file() {
        let problems = parse(&file("[[rule]]\nname = \n")).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].code, "rulec::toml");
        assert!(problems[0].label.is_some());
    }
}
