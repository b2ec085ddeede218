//! Where the cursor is in a rule file (docs/editors.md#what-the-server-does):
//! in a header, on a key of some level, or in a value of some key; and,
//! inside a `when` string, in which part of the expression. Read from
//! [`super::scan`]'s layout and the `when` tokenizer, so that it works
//! while the text is being typed and does not parse. What the rules mean
//! (topics, names, types) comes from the one check (`crate::session`),
//! through `super::facts`; what a header or key is, from `crate::keys`.

use super::scan::{Entry, Kind, Table, Value};
use crate::keys::{self, Level, Ty};
use crate::span::StringMap;
use crate::when::lex::{tokenize, Tok, TokKind};
use std::ops::Range;

/// The level of the table a header opens.
pub fn level_of(path: &[String]) -> Option<Level> {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    Level::of_header(&path)
}

/// What the cursor is on.
#[derive(Debug, Clone)]
pub enum At<'d> {
    /// A table header.
    Header,
    /// Where a key is written at `level`: `partial` is the part of the key
    /// before the cursor (empty on a blank line).
    Key {
        level: Level,
        partial: Range<usize>,
        /// The other entries of the same table.
        siblings: &'d [Entry],
    },
    /// Inside a value of `entry` (of a key of `level`); `value` is the
    /// innermost value holding the cursor (a string in an array), or the
    /// array itself between its items.
    Value {
        level: Level,
        entry: &'d Entry,
        value: &'d Value,
        siblings: &'d [Entry],
    },
    Nothing,
}

/// The cursor at byte `offset` of `text`, whose layout is `tables`.
pub fn at<'d>(text: &str, tables: &'d [Table], offset: usize) -> (Option<&'d Table>, At<'d>) {
    let Some(table) = tables.iter().rev().find(|t| t.span.start <= offset) else {
        return (None, At::Nothing);
    };
    if offset > table.header.start && offset <= table.header.end {
        return (Some(table), At::Header);
    }
    let Some(level) = level_of(&table.path) else {
        return (Some(table), At::Nothing);
    };
    if let Some(at) = in_entries(&table.entries, level, offset) {
        return (Some(table), at);
    }
    let partial = word_before(text, offset);
    let line_start = text[..partial.start].rfind('\n').map_or(0, |at| at + 1);
    let at = if text[line_start..partial.start].trim().is_empty() {
        At::Key {
            level,
            partial,
            siblings: &table.entries,
        }
    } else {
        At::Nothing
    };
    (Some(table), at)
}

fn in_entries(entries: &[Entry], level: Level, offset: usize) -> Option<At<'_>> {
    for entry in entries {
        let on_key = entry.key_span.start <= offset && offset <= entry.key_span.end;
        if on_key && entry.value.as_ref().is_none_or(|v| offset < v.span.start) {
            return Some(At::Key {
                level,
                partial: entry.key_span.start..offset,
                siblings: entries,
            });
        }
        let Some(value) = &entry.value else { continue };
        if value.holds(offset) {
            return Some(in_value(entries, entry, value, level, offset));
        }
    }
    None
}

/// Inside `value` of `entry`: descends into arrays and inline tables.
fn in_value<'d>(
    siblings: &'d [Entry],
    entry: &'d Entry,
    value: &'d Value,
    level: Level,
    offset: usize,
) -> At<'d> {
    let child = keys::find(level, &entry.key).and_then(|key| match key.ty {
        Ty::Table(level) | Ty::Tables { level, .. } => Some(level),
        _ => None,
    });
    let at_value = At::Value {
        level,
        entry,
        value,
        siblings,
    };
    match &value.kind {
        Kind::Inline(inner) => match child {
            Some(child) => in_entries(inner, child, offset).unwrap_or(At::Key {
                level: child,
                partial: offset..offset,
                siblings: inner,
            }),
            None => At::Nothing,
        },
        Kind::Array(items) => match items.iter().find(|item| item.holds(offset)) {
            Some(item) => match (&item.kind, child) {
                (Kind::Inline(_), Some(child)) => in_value(siblings, entry, item, child, offset),
                _ => At::Value {
                    level,
                    entry,
                    value: item,
                    siblings,
                },
            },
            None => at_value,
        },
        Kind::Str | Kind::Other => at_value,
    }
}

/// The `[[rule]]` a table belongs to: itself, or the rule its step or
/// input follows.
pub fn rule_of<'d>(tables: &'d [Table], table: &Table) -> Option<&'d Table> {
    if table.path.first().map(String::as_str) != Some("rule") {
        return None;
    }
    tables
        .iter()
        .rev()
        .find(|t| t.span.start <= table.span.start && t.path == ["rule"])
}

/// The rule's `on` patterns that parse.
pub fn on_patterns(text: &str, rule: &Table) -> Vec<rulecore::TopicPattern> {
    let Some(Value {
        kind: Kind::Array(items),
        ..
    }) = rule.get("on")
    else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| item.plain_str(text))
        .filter_map(|written| rulecore::TopicPattern::parse(written).ok())
        .collect()
}

/// The key characters just before `offset`.
fn word_before(text: &str, offset: usize) -> Range<usize> {
    let start = text[..offset]
        .char_indices()
        .rev()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
        .map_or(0, |(at, c)| at + c.len_utf8());
    start..offset
}

/// The cursor inside a `when` expression.
#[derive(Debug)]
pub struct InWhen {
    /// The expression, decoded.
    pub source: String,
    /// Maps its bytes to the file's.
    pub map: StringMap,
    pub tokens: Vec<Tok>,
    /// The cursor, in decoded bytes.
    pub offset: usize,
}

/// What part of an expression the cursor is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhenPart {
    /// The first argument of `state(`, as written so far.
    StateHash {
        written: String,
        token: Range<usize>,
    },
    /// Its second argument, with the hash.
    StateField {
        hash: String,
        written: String,
        token: Range<usize>,
    },
    /// A string compared with `to`, `from` or a `state()` call (`to == "`).
    ComparedWith {
        value: Compared,
        written: String,
        token: Range<usize>,
    },
    /// A name (`data.lev`, `to`, `str::`), as written so far.
    Name {
        written: String,
        token: Range<usize>,
    },
    /// Anything else (an operator, a number).
    Other,
}

/// What a string literal is compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compared {
    To,
    From,
    State { hash: String, field: String },
}

impl InWhen {
    /// Reads the `when` string `value` of `text` with the cursor at file
    /// offset `offset`.
    pub fn read(text: &str, value: &Value, offset: usize) -> Option<InWhen> {
        let (source, map) = StringMap::read(text, value.span.clone(), value.closed)?;
        let offset = map.decoded_offset(offset).min(source.len());
        let tokens = tokenize(&source);
        Some(InWhen {
            source,
            map,
            tokens,
            offset,
        })
    }

    /// The token the cursor is in or just after.
    fn token_index(&self) -> Option<usize> {
        self.tokens
            .iter()
            .position(|tok| tok.span.start < self.offset && self.offset <= tok.span.end)
    }

    /// A string token's text, without its quotes, up to the cursor.
    fn written(&self, tok: &Tok) -> String {
        let end = self.offset.min(tok.span.end).max(tok.span.start + 1);
        self.source
            .get(tok.span.start + 1..end)
            .unwrap_or_default()
            .trim_end_matches('"')
            .to_string()
    }

    /// What the cursor is on (at `offset` in the decoded text).
    pub fn part(&self) -> WhenPart {
        let Some(index) = self.token_index() else {
            return WhenPart::Name {
                written: String::new(),
                token: self.offset..self.offset,
            };
        };
        let tok = &self.tokens[index];
        let kind = |back: usize| {
            index
                .checked_sub(back)
                .and_then(|i| self.tokens.get(i))
                .map(|tok| &tok.kind)
        };
        match &tok.kind {
            TokKind::Str | TokKind::UnterminatedStr => {
                let written = self.written(tok);
                let token = tok.span.clone();
                let is_state =
                    |back| matches!(kind(back), Some(TokKind::Ident(name)) if name == "state");
                if kind(1) == Some(&TokKind::LParen) && is_state(2) {
                    return WhenPart::StateHash { written, token };
                }
                if kind(1) == Some(&TokKind::Comma)
                    && matches!(kind(2), Some(TokKind::Str))
                    && kind(3) == Some(&TokKind::LParen)
                    && is_state(4)
                {
                    let hash = self.literal(index - 2);
                    return WhenPart::StateField {
                        hash,
                        written,
                        token,
                    };
                }
                match self.compared(index) {
                    Some(value) => WhenPart::ComparedWith {
                        value,
                        written,
                        token,
                    },
                    None => WhenPart::Other,
                }
            }
            TokKind::Ident(_) | TokKind::Bool => WhenPart::Name {
                written: self
                    .source
                    .get(tok.span.start..self.offset)
                    .unwrap_or_default()
                    .to_string(),
                token: tok.span.clone(),
            },
            _ => WhenPart::Other,
        }
    }

    /// A string token's content.
    fn literal(&self, index: usize) -> String {
        self.tokens.get(index).map_or_else(String::new, |tok| {
            self.source
                .get(tok.span.start + 1..tok.span.end.saturating_sub(1))
                .unwrap_or_default()
                .to_string()
        })
    }

    /// What the string at `index` is compared with (`==` or `!=`), either
    /// side.
    fn compared(&self, index: usize) -> Option<Compared> {
        let is_comparison = |tok: Option<&Tok>| {
            tok.is_some_and(|tok| matches!(tok.kind, TokKind::Eq | TokKind::Neq))
        };
        if index >= 2 && is_comparison(self.tokens.get(index - 1)) {
            return self.value_ending_at(index - 2);
        }
        if is_comparison(self.tokens.get(index + 1)) {
            return self.value_starting_at(index + 2);
        }
        None
    }

    fn value_ending_at(&self, last: usize) -> Option<Compared> {
        match &self.tokens.get(last)?.kind {
            TokKind::Ident(name) => field(name),
            TokKind::RParen if last >= 5 => self.state_call(last - 5),
            _ => None,
        }
    }

    fn value_starting_at(&self, first: usize) -> Option<Compared> {
        match &self.tokens.get(first)?.kind {
            TokKind::Ident(name) if name == "state" => self.state_call(first),
            TokKind::Ident(name) => field(name),
            _ => None,
        }
    }

    /// `state ( "h" , "f" )` starting at token `first`.
    fn state_call(&self, first: usize) -> Option<Compared> {
        let kinds: Vec<&TokKind> = self
            .tokens
            .get(first..first + 6)?
            .iter()
            .map(|t| &t.kind)
            .collect();
        match kinds.as_slice() {
            [TokKind::Ident(name), TokKind::LParen, TokKind::Str, TokKind::Comma, TokKind::Str, TokKind::RParen]
                if name == "state" =>
            {
                Some(Compared::State {
                    hash: self.literal(first + 2),
                    field: self.literal(first + 4),
                })
            }
            _ => None,
        }
    }

    /// The `state("hash", "field")` call the cursor is anywhere in.
    pub fn state_call_here(&self) -> Option<(String, String)> {
        let index = self.token_index()?;
        (index.saturating_sub(5)..=index).find_map(|first| match self.state_call(first) {
            Some(Compared::State { hash, field }) => Some((hash, field)),
            _ => None,
        })
    }
}

fn field(name: &str) -> Option<Compared> {
    match name {
        "to" => Some(Compared::To),
        "from" => Some(Compared::From),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsp::scan::scan;

    fn at_marker(text: &str) -> (String, usize) {
        let offset = text.find('|').unwrap();
        (text.replacen('|', "", 1), offset)
    }

    #[test]
    fn keys_and_values_at_each_level() {
        let (text, offset) = at_marker("[[rule]]\nname = \"a\"\nrepeat = { cou| }\n");
        let tables = scan(&text);
        let (_, found) = at(&text, &tables, offset);
        assert!(
            matches!(
                found,
                At::Key {
                    level: Level::Repeat,
                    ..
                }
            ),
            "{found:?}"
        );

        let (text, offset) = at_marker("[[rule]]\nname = \"a\"\n\n[[rule.step]]\ndo = \"redis\"\nlist = \"scooter:blinker\"\npush = \"|\n");
        let tables = scan(&text);
        let (_, found) = at(&text, &tables, offset);
        let At::Value { level, entry, .. } = found else {
            panic!("{found:?}")
        };
        assert_eq!((level, entry.key.as_str()), (Level::Step, "push"));

        let (text, offset) = at_marker("[[rule]]\non = [\"vehicle.|\"]\n");
        let tables = scan(&text);
        let (_, found) = at(&text, &tables, offset);
        assert!(
            matches!(found, At::Value { entry, .. } if entry.key == "on"),
            "{found:?}"
        );

        let (text, offset) = at_marker("[[rule]]\nna|\n");
        let tables = scan(&text);
        let (_, found) = at(&text, &tables, offset);
        let At::Key { level, partial, .. } = found else {
            panic!("{found:?}")
        };
        assert_eq!((level, &text[partial]), (Level::Rule, "na"));
    }

    #[test]
    fn parts_of_a_when_expression() {
        let part = |line: &str| {
            let (text, offset) = at_marker(&format!("[[rule]]\nwhen = {line}\n"));
            let tables = scan(&text);
            let (_, found) = at(&text, &tables, offset);
            let At::Value { value, .. } = found else {
                panic!("{found:?}")
            };
            InWhen::read(&text, value, offset).unwrap().part()
        };
        assert!(
            matches!(part("'state(\"veh|'"), WhenPart::StateHash { written, .. } if written == "veh")
        );
        assert!(matches!(
            part("'state(\"vehicle\", \"st|\")'"),
            WhenPart::StateField { hash, written, .. } if hash == "vehicle" && written == "st"
        ));
        assert!(matches!(
            part("\"state(\\\"vehicle\\\", \\\"|"),
            WhenPart::StateField { hash, .. } if hash == "vehicle"
        ));
        assert!(matches!(
            part("'to == \"par|\"'"),
            WhenPart::ComparedWith { value: Compared::To, written, .. } if written == "par"
        ));
        assert!(matches!(
            part("'state(\"vehicle\", \"state\") != \"|'"),
            WhenPart::ComparedWith {
                value: Compared::State { .. },
                ..
            }
        ));
        assert!(
            matches!(part("'data.le|'"), WhenPart::Name { written, .. } if written == "data.le")
        );
    }
}
