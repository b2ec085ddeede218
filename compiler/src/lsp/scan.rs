//! A forgiving reading of a TOML document's layout, for the editor
//! (docs/editors.md#what-the-server-does): its tables, their keys and where
//! each value is, also while it is being typed (`push = "` with no closing
//! quote). It checks nothing: the diagnostics, and everything hover and
//! completion say about the rules, come from the one check every command
//! runs (`crate::session::Session`, kept per directory by `workspace`).
//! This second reading stays because that check's TOML parser, rightly,
//! rejects a half-typed file and keeps no place for text it rejects,
//! while an editor asks where the cursor is in exactly such text: this
//! only says where the cursor is, for hover, completion and go to
//! definition.

use std::ops::Range;

/// A table: its header (`[[rule.step]]`) and the entries written under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The header's dotted name split (`["rule", "step"]`); empty for the
    /// top of the file.
    pub path: Vec<String>,
    /// The header's bytes (empty at 0 for the top of the file).
    pub header: Range<usize>,
    /// From the header to the next one (or the end of the text).
    pub span: Range<usize>,
    pub entries: Vec<Entry>,
}

/// `key = value`, or a key still being written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key as written, quotes removed, dotted parts joined by `.`.
    pub key: String,
    pub key_span: Range<usize>,
    /// `None` while there is no `=` yet.
    pub value: Option<Value>,
}

/// Where a value is and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    pub span: Range<usize>,
    pub kind: Kind,
    /// False while a string's closing quote (or an array's `]`, a table's
    /// `}`) is missing: its span then runs to the end of the line (of the
    /// text for a multi-line string, to the next statement for an array).
    pub closed: bool,
}

/// The kinds of value the editor tells apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Str,
    Array(Vec<Value>),
    Inline(Vec<Entry>),
    /// A number, a boolean, a date, or nothing yet.
    Other,
}

/// Reads the layout of `text`.
pub fn scan(text: &str) -> Vec<Table> {
    let mut scanner = Scanner { text, pos: 0 };
    let mut tables = vec![Table {
        path: Vec::new(),
        header: 0..0,
        span: 0..text.len(),
        entries: Vec::new(),
    }];
    loop {
        scanner.skip_blank(true);
        let Some(c) = scanner.peek() else { break };
        if c == '[' {
            let table = scanner.header();
            if let Some(last) = tables.last_mut() {
                last.span.end = table.header.start;
            }
            tables.push(table);
        } else if is_key_start(c) {
            let entry = scanner.entry();
            if let Some(last) = tables.last_mut() {
                last.entries.push(entry);
            }
        } else {
            scanner.skip_line();
        }
    }
    tables
}

fn is_key_start(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '"' | '\'')
}

struct Scanner<'t> {
    text: &'t str,
    pos: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn bump(&mut self) {
        if let Some(c) = self.peek() {
            self.pos += c.len_utf8();
        }
    }

    /// Skips spaces and comments, and line breaks when `lines`.
    fn skip_blank(&mut self, lines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\r' => self.bump(),
                '\n' if lines => self.bump(),
                '#' => self.skip_to_line_end(),
                _ => break,
            }
        }
    }

    fn skip_to_line_end(&mut self) {
        self.pos = self
            .rest()
            .find('\n')
            .map_or(self.text.len(), |at| self.pos + at);
    }

    fn skip_line(&mut self) {
        self.skip_to_line_end();
        self.bump();
    }

    /// `[table]` or `[[array.of.tables]]`, to the end of its line.
    fn header(&mut self) -> Table {
        let start = self.pos;
        let line_end = self
            .rest()
            .find('\n')
            .map_or(self.text.len(), |at| self.pos + at);
        let line = &self.text[start..line_end];
        let close = line.find(']').map_or(line.len(), |at| {
            at + usize::from(line[at + 1..].starts_with(']')) + 1
        });
        let name = line[..close].trim_matches(|c| c == '[' || c == ']');
        let path = name
            .split('.')
            .map(|part| part.trim().trim_matches(['"', '\'']).to_string())
            .filter(|part| !part.is_empty())
            .collect();
        self.pos = line_end;
        Table {
            path,
            header: start..start + close,
            span: start..self.text.len(),
            entries: Vec::new(),
        }
    }

    /// A key, possibly dotted or quoted.
    fn key(&mut self) -> (String, Range<usize>) {
        let start = self.pos;
        let mut parts = Vec::new();
        loop {
            match self.peek() {
                Some(quote @ ('"' | '\'')) => {
                    self.bump();
                    let part_start = self.pos;
                    while let Some(c) = self.peek() {
                        if c == quote || c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                    parts.push(self.text[part_start..self.pos].to_string());
                    if self.peek() == Some(quote) {
                        self.bump();
                    }
                }
                _ => {
                    let part_start = self.pos;
                    while self
                        .peek()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
                    {
                        self.bump();
                    }
                    parts.push(self.text[part_start..self.pos].to_string());
                }
            }
            let before_dot = self.pos;
            self.skip_blank(false);
            if self.peek() == Some('.') {
                self.bump();
                self.skip_blank(false);
            } else {
                self.pos = before_dot;
                break;
            }
        }
        (parts.join("."), start..self.pos)
    }

    /// `key = value`; a key with no `=` yet ends at its line.
    fn entry(&mut self) -> Entry {
        let (key, key_span) = self.key();
        self.skip_blank(false);
        if self.peek() != Some('=') {
            self.skip_to_line_end();
            return Entry {
                key,
                key_span,
                value: None,
            };
        }
        self.bump();
        self.skip_blank(false);
        let value = self.value();
        Entry {
            key,
            key_span,
            value: Some(value),
        }
    }

    fn value(&mut self) -> Value {
        let start = self.pos;
        let (kind, closed) = match self.peek() {
            Some('"') if self.rest().starts_with("\"\"\"") => self.multi_string("\"\"\""),
            Some('\'') if self.rest().starts_with("'''") => self.multi_string("'''"),
            Some(quote @ ('"' | '\'')) => self.string(quote),
            Some('[') => self.array(),
            Some('{') => self.inline(),
            _ => {
                while self
                    .peek()
                    .is_some_and(|c| !matches!(c, ',' | ']' | '}' | '#' | '\n'))
                {
                    self.bump();
                }
                (Kind::Other, true)
            }
        };
        let mut end = self.pos;
        if kind == Kind::Other {
            end = start + self.text[start..end].trim_end().len();
        }
        Value {
            span: start..end,
            kind,
            closed,
        }
    }

    /// A one-line string; unclosed, it ends at the line's end.
    fn string(&mut self, quote: char) -> (Kind, bool) {
        self.bump();
        while let Some(c) = self.peek() {
            match c {
                '\n' => return (Kind::Str, false),
                '\\' if quote == '"' => {
                    self.bump();
                    if self.peek() != Some('\n') {
                        self.bump();
                    }
                }
                c if c == quote => {
                    self.bump();
                    return (Kind::Str, true);
                }
                _ => self.bump(),
            }
        }
        (Kind::Str, false)
    }

    fn multi_string(&mut self, delimiter: &str) -> (Kind, bool) {
        self.pos += delimiter.len();
        let basic = delimiter.starts_with('"');
        while let Some(c) = self.peek() {
            if basic && c == '\\' {
                self.bump();
                self.bump();
                continue;
            }
            if self.rest().starts_with(delimiter) {
                self.pos += delimiter.len();
                // `""""` ends with the content's own quote first.
                while self.rest().starts_with(&delimiter[..1]) {
                    self.bump();
                }
                return (Kind::Str, true);
            }
            self.bump();
        }
        (Kind::Str, false)
    }

    /// Whether the text at the cursor, at the start of a line, begins a
    /// new statement (a header or `key =`): an array or inline table left
    /// open ends before it.
    fn at_statement(&self) -> bool {
        let line = self.rest().lines().next().unwrap_or_default().trim();
        if line.starts_with("[[") || (line.starts_with('[') && line.ends_with(']')) {
            return !line.contains(',') && !line.contains('"');
        }
        let key_len = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
            .unwrap_or(line.len());
        key_len > 0 && line[key_len..].trim_start().starts_with('=')
    }

    /// Skips blanks; `true` when they crossed a line into a new statement.
    fn skip_blank_inside(&mut self) -> bool {
        let before = self.pos;
        self.skip_blank(true);
        self.text[before..self.pos].contains('\n') && self.at_statement()
    }

    fn array(&mut self) -> (Kind, bool) {
        self.bump();
        let mut items = Vec::new();
        let mut closed = false;
        loop {
            if self.skip_blank_inside() {
                break;
            }
            match self.peek() {
                None => break,
                Some(']') => {
                    self.bump();
                    closed = true;
                    break;
                }
                Some(',') => self.bump(),
                Some('}') => break,
                Some(_) => {
                    let before = self.pos;
                    items.push(self.value());
                    if self.pos == before {
                        self.bump();
                    }
                }
            }
        }
        (Kind::Array(items), closed)
    }

    fn inline(&mut self) -> (Kind, bool) {
        self.bump();
        let mut entries = Vec::new();
        let mut closed = false;
        loop {
            if self.skip_blank_inside() {
                break;
            }
            match self.peek() {
                None => break,
                Some('}') => {
                    self.bump();
                    closed = true;
                    break;
                }
                Some(',') => self.bump(),
                Some(c) if is_key_start(c) => {
                    let (key, key_span) = self.key();
                    self.skip_blank(false);
                    let value = (self.peek() == Some('=')).then(|| {
                        self.bump();
                        self.skip_blank(false);
                        self.value()
                    });
                    entries.push(Entry {
                        key,
                        key_span,
                        value,
                    });
                }
                Some(_) => {
                    // Not a key: leave the table (a typo, or `]`).
                    break;
                }
            }
        }
        (Kind::Inline(entries), closed)
    }
}

impl Value {
    /// Whether `offset` is inside the value: inside its quotes or brackets
    /// (at the closing one counts, past it does not; an unclosed value
    /// holds its end).
    pub fn holds(&self, offset: usize) -> bool {
        let inside_end = if self.closed {
            offset < self.span.end
        } else {
            offset <= self.span.end
        };
        match self.kind {
            Kind::Other => self.span.start <= offset && offset <= self.span.end,
            _ => self.span.start < offset && inside_end,
        }
    }

    /// The string's text when it is one plain string (no escapes to
    /// decode): what `list = "scooter:blinker"` names.
    pub fn plain_str<'t>(&self, text: &'t str) -> Option<&'t str> {
        if self.kind != Kind::Str {
            return None;
        }
        let raw = text.get(self.span.clone())?;
        let quote = raw.chars().next()?;
        let inner = raw.strip_prefix(quote)?;
        let inner = inner.strip_suffix(quote).unwrap_or(inner);
        (!inner.contains('\\') && !inner.starts_with(quote)).then_some(inner)
    }
}

impl Table {
    /// The value of `key` in this table.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries
            .iter()
            .find(|entry| entry.key == key)
            .and_then(|entry| entry.value.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_entries_and_open_strings() {
        let text = "[[rule]]\nname = \"a\"\non = [\"x.y\", \"z\"]\nrepeat = { count = 3, every = \"2s\" }\n\n[[rule.step]]\ndo = \"redis\"\npush = \"\n";
        let tables = scan(text);
        assert_eq!(tables.len(), 3);
        assert_eq!(tables[1].path, ["rule"]);
        assert_eq!(tables[2].path, ["rule", "step"]);
        let on = tables[1].get("on").unwrap();
        let Kind::Array(items) = &on.kind else {
            panic!("{on:?}")
        };
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].plain_str(text), Some("x.y"));
        let Kind::Inline(inner) = &tables[1].get("repeat").unwrap().kind else {
            panic!()
        };
        assert_eq!(inner[1].key, "every");
        let push = tables[2].get("push").unwrap();
        assert_eq!((&push.kind, push.closed), (&Kind::Str, false));
        assert!(push.holds(push.span.start + 1));
    }

    #[test]
    fn an_open_array_ends_before_the_next_statement() {
        let text = "[[rule]]\non = [\"vehicle.\nname = \"r\"\n[[rule.step]]\ndo = \"exec\"\n";
        let tables = scan(text);
        assert_eq!(tables.len(), 3);
        assert!(tables[1].get("name").is_some());
        assert_eq!(tables[2].get("do").unwrap().plain_str(text), Some("exec"));
    }

    #[test]
    fn multi_line_strings_and_comments() {
        let text = "# a comment [[rule]]\n[[rule]]\nwhen = \"\"\"\nto == \"parked\"\n\"\"\"\nname = 'x' # c\n";
        let tables = scan(text);
        assert_eq!(tables.len(), 2);
        let when = tables[1].get("when").unwrap();
        assert_eq!((&when.kind, when.closed), (&Kind::Str, true));
        assert_eq!(tables[1].get("name").unwrap().plain_str(text), Some("x"));
    }
}
