//! The rewrite of one `when` expression from the Go event-service's syntax
//! (expr-lang) to this language (docs/rulec.md#rulec-fix): edits on the
//! decoded expression text, token by token, so that everything else stays
//! byte for byte.
//!
//! - `'text'` becomes `"text"` (`\'` inside becomes `'`, `"` becomes `\"`);
//! - the words `and`, `or`, `not` become `&&`, `||`, `!` (`not` takes the
//!   white space after it along: `not x` is `!x`). Both languages bind a
//!   prefix `not`/`!` tighter than `==`, so the meaning is unchanged;
//! - `in [...]` and `not in [...]` have no rewrite while the language has
//!   no membership test: they are reported, not changed.

use std::ops::Range;

/// One replacement in the decoded expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub range: Range<usize>,
    pub text: String,
}

/// What cannot be rewritten, with its range in the decoded expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrewritable {
    pub range: Range<usize>,
    pub what: &'static str,
}

/// The rewrite of one expression.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rewrite {
    pub edits: Vec<Edit>,
    pub unrewritable: Vec<Unrewritable>,
}

impl Rewrite {
    /// The expression with the edits applied.
    pub fn apply(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for edit in &self.edits {
            out.push_str(&text[at..edit.range.start]);
            out.push_str(&edit.text);
            at = edit.range.end;
        }
        out.push_str(&text[at..]);
        out
    }
}

/// The end of a quoted string starting at `start` (the byte after the
/// closing quote), and its content unescaped for `'`; `None` when it is not
/// closed.
fn quoted_end(text: &str, start: usize, quote: char) -> Option<(usize, String)> {
    let mut content = String::new();
    let mut chars = text[start + 1..].char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '\'')) if quote == '\'' => content.push('\''),
                Some((_, other)) => {
                    content.push('\\');
                    content.push(other);
                }
                None => return None,
            },
            c if c == quote => return Some((start + 1 + i + 1, content)),
            '"' => content.push_str("\\\""),
            c => content.push(c),
        }
    }
    None
}

/// The rewrite of `text` (a decoded `when` expression).
pub fn rewrite(text: &str) -> Rewrite {
    let mut out = Rewrite::default();
    let mut at = 0;
    // The last non-space character before a word: `data.and` is a field.
    let mut previous: Option<char> = None;
    while at < text.len() {
        let Some(c) = text[at..].chars().next() else {
            break;
        };
        if c == '"' || c == '\'' {
            let Some((end, content)) = quoted_end(text, at, c) else {
                break; // unterminated: the checker reports it
            };
            if c == '\'' {
                out.edits.push(Edit {
                    range: at..end,
                    text: format!("\"{content}\""),
                });
            }
            at = end;
            previous = Some(c);
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let end = text[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(text.len(), |i| at + i);
            let word = &text[at..end];
            let field = previous == Some('.');
            match word {
                _ if field => {}
                "and" => out.edits.push(Edit {
                    range: at..end,
                    text: "&&".to_string(),
                }),
                "or" => out.edits.push(Edit {
                    range: at..end,
                    text: "||".to_string(),
                }),
                "not" => {
                    let spaces = text[end..]
                        .find(|c: char| !c.is_whitespace())
                        .map_or(text.len(), |i| end + i);
                    if next_word(text, spaces) == Some("in") {
                        out.unrewritable.push(Unrewritable {
                            range: at..membership_end(text, spaces + 2),
                            what: "`not in [...]`",
                        });
                        // Past the `in`: it is part of this one.
                        at = spaces + 2;
                        previous = Some('n');
                        continue;
                    } else {
                        out.edits.push(Edit {
                            range: at..spaces,
                            text: "!".to_string(),
                        });
                    }
                }
                "in" => out.unrewritable.push(Unrewritable {
                    range: at..membership_end(text, end),
                    what: "`in [...]`",
                }),
                _ => {}
            }
            at = end;
            previous = word.chars().last();
            continue;
        }
        if !c.is_whitespace() {
            previous = Some(c);
        }
        at += c.len_utf8();
    }
    out
}

/// The word starting at `at`, if one does.
fn next_word(text: &str, at: usize) -> Option<&str> {
    let rest = text.get(at..)?;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Where the list after `in` ends: after its `]` when one follows.
fn membership_end(text: &str, after_in: usize) -> usize {
    let rest = &text[after_in..];
    let trimmed = rest.trim_start();
    if trimmed.starts_with('[') {
        if let Some(close) = trimmed.find(']') {
            return after_in + (rest.len() - trimmed.len()) + close + 1;
        }
    }
    after_in
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(text: &str) -> String {
        rewrite(text).apply(text)
    }

    #[test]
    fn quotes_and_word_operators() {
        assert_eq!(
            fixed("to == 'parked' and not from == 'driving' or x"),
            "to == \"parked\" && !from == \"driving\" || x"
        );
        assert_eq!(fixed(r#"a == 'it\'s "so"'"#), r#"a == "it's \"so\"""#);
        assert_eq!(fixed(r#"a == "keep 'this'""#), r#"a == "keep 'this'""#);
    }

    #[test]
    fn fields_and_longer_words_are_left_alone() {
        assert_eq!(fixed("data.and == android"), "data.and == android");
        assert_eq!(fixed("str::len(order) > 0"), "str::len(order) > 0");
    }

    #[test]
    fn membership_is_reported_not_rewritten() {
        let text = "to in ['parked', 'stand-by'] and x not in [1, 2]";
        let result = rewrite(text);
        let spans: Vec<&str> = result
            .unrewritable
            .iter()
            .map(|u| &text[u.range.clone()])
            .collect();
        assert_eq!(spans, ["in ['parked', 'stand-by']", "not in [1, 2]"]);
        assert_eq!(
            result.apply(text),
            "to in [\"parked\", \"stand-by\"] && x not in [1, 2]"
        );
    }
}
