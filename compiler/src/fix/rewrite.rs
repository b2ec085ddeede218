//! The rewrite of one `when` expression from the Go event-service's syntax
//! (expr-lang) to this language (docs/rulec.md#rulec-fix): edits on the
//! decoded expression text, token by token, so that everything else stays
//! byte for byte.
//!
//! - `'text'` becomes `"text"` (`\'` inside becomes `'`, `"` becomes `\"`);
//! - the words `and`, `or`, `not` become `&&`, `||`, `!` (`not` takes the
//!   white space after it along: `not x` is `!x`). Both languages bind a
//!   prefix `not`/`!` tighter than `==`, so the meaning is unchanged;
//! - `x in [a, b]` becomes `contains((a, b), x)` and `x not in [a, b]`
//!   becomes `!contains((a, b), x)`; a one-item list becomes `x == a`
//!   (`x != a`), in parentheses when `==` or `!=` follows. expr-lang's `in`
//!   binds like `==`, tighter than `and`/`or` and looser than arithmetic;
//!   `contains(...)` is a call and binds tighter than anything around it.
//!   So the meaning is unchanged only where the operands are plain, and
//!   the rewrite is made only there: `x` is a name or path, a string, a
//!   number or a call (`state('vehicle', 'state')`), with nothing before it
//!   but the start, `(`, `,`, `and`/`or`/`&&`/`||`; the list holds such
//!   values, written in place, and nothing follows it but the end, `)`,
//!   `,`, `and`/`or`/`&&`/`||`, `==`/`!=`. Anything else (`a + b in [...]`,
//!   `(a) in [...]`, `not a in [...]`, `[...] + [...]`, an empty list) is
//!   reported, not changed (`Why`).
//!
//! The edits are sorted and do not overlap: the membership edit takes the
//! edits already queued inside its left operand into its own text.

use std::ops::Range;

/// One replacement in the decoded expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub range: Range<usize>,
    pub text: String,
}

/// Why a membership test is left as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The value before `in` is not a plain operand standing alone.
    Operand,
    /// What follows `in` is not a list of plain values standing alone.
    List,
    /// `[]`: `contains` needs at least two values.
    Empty,
}

impl Why {
    /// The reason, for the diagnostic's message.
    pub fn message(self) -> &'static str {
        match self {
            Why::Operand => {
                "the value before it is not a name, string, number or call standing alone"
            }
            Why::List => {
                "it is not a list of names, strings, numbers or calls, written in place and standing alone"
            }
            Why::Empty => "the list is empty",
        }
    }

    /// What to write instead, for the diagnostic's help.
    pub fn help(self) -> &'static str {
        match self {
            Why::Operand => {
                "`in` tests all that binds tighter before it (`a + b in [...]` tests `a + b`): write `contains((a, b), x)` with that value as `x`"
            }
            Why::List => "write `contains((a, b), x)` for `x in [a, b]`, the values written in place",
            Why::Empty => "`x in []` is always false and `x not in []` always true: write that",
        }
    }
}

/// What cannot be rewritten, with its range in the decoded expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrewritable {
    pub range: Range<usize>,
    pub what: &'static str,
    pub why: Why,
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

/// What a token is, as far as the rewrite needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Word,
    Number,
    Punct(char),
}

/// A token already scanned: the membership rewrite looks back at them for
/// its left operand.
#[derive(Debug, Clone)]
struct Token {
    range: Range<usize>,
    kind: Kind,
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

/// The end of the run of characters from `at` that `keep` accepts.
fn run_end(text: &str, at: usize, keep: impl Fn(char) -> bool) -> usize {
    text[at..]
        .find(|c: char| !keep(c))
        .map_or(text.len(), |i| at + i)
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

fn is_number_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

/// The word operators of expr-lang, never an operand.
fn is_operator_word(word: &str) -> bool {
    matches!(word, "and" | "or" | "not" | "in")
}

/// The rewrite of `text` (a decoded `when` expression).
pub fn rewrite(text: &str) -> Rewrite {
    let mut out = Rewrite::default();
    let mut tokens: Vec<Token> = Vec::new();
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
            tokens.push(Token {
                range: at..end,
                kind: Kind::Str,
            });
            at = end;
            previous = Some(c);
            continue;
        }
        if c.is_ascii_digit() {
            let end = run_end(text, at, is_number_char);
            tokens.push(Token {
                range: at..end,
                kind: Kind::Number,
            });
            previous = text[..end].chars().last();
            at = end;
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let field = previous == Some('.');
            at = word(text, at, field, &mut tokens, &mut out);
            previous = text[..at].chars().last();
            continue;
        }
        if !c.is_whitespace() {
            tokens.push(Token {
                range: at..at + c.len_utf8(),
                kind: Kind::Punct(c),
            });
            previous = Some(c);
        }
        at += c.len_utf8();
    }
    out
}

/// Scans the word starting at `at` (a field of a path when `field`), and
/// rewrites it when it is an operator; returns where scanning goes on.
fn word(text: &str, at: usize, field: bool, tokens: &mut Vec<Token>, out: &mut Rewrite) -> usize {
    let end = run_end(text, at, is_word_char);
    let before = tokens.len();
    tokens.push(Token {
        range: at..end,
        kind: Kind::Word,
    });
    match &text[at..end] {
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
            let spaces = run_end(text, end, char::is_whitespace);
            if next_word(text, spaces) != Some("in") {
                out.edits.push(Edit {
                    range: at..spaces,
                    text: "!".to_string(),
                });
                return end;
            }
            let after_in = spaces + 2;
            let token = match membership(text, &tokens[..before], out, at, after_in, true) {
                Some(end) => Token {
                    range: end - 1..end,
                    kind: Kind::Punct(']'),
                },
                // Past the `in`: it is part of this one.
                None => Token {
                    range: spaces..after_in,
                    kind: Kind::Word,
                },
            };
            let next = token.range.end;
            tokens.push(token);
            return next;
        }
        "in" => {
            if let Some(end) = membership(text, &tokens[..before], out, at, end, false) {
                tokens.push(Token {
                    range: end - 1..end,
                    kind: Kind::Punct(']'),
                });
                return end;
            }
        }
        _ => {}
    }
    end
}

/// Rewrites the membership test whose `in` (or `not in`) starts at
/// `start`, with `left` the tokens before it; returns where it ends. When
/// it cannot, records why and returns `None`.
fn membership(
    text: &str,
    left: &[Token],
    out: &mut Rewrite,
    start: usize,
    after_in: usize,
    negated: bool,
) -> Option<usize> {
    let what = if negated {
        "`not in [...]`"
    } else {
        "`in [...]`"
    };
    match membership_edit(text, left, out, after_in, negated) {
        Ok(edit) => {
            let end = edit.range.end;
            // The edits inside the left operand are part of this one.
            out.edits.retain(|e| e.range.start < edit.range.start);
            out.edits.push(edit);
            Some(end)
        }
        Err(why) => {
            out.unrewritable.push(Unrewritable {
                range: start..membership_end(text, after_in),
                what,
                why,
            });
            None
        }
    }
}

/// The edit replacing a whole membership test, from its left operand to
/// the `]` of its list.
fn membership_edit(
    text: &str,
    left: &[Token],
    out: &Rewrite,
    after_in: usize,
    negated: bool,
) -> Result<Edit, Why> {
    let operand = left_operand(text, left).ok_or(Why::Operand)?;
    if out
        .unrewritable
        .iter()
        .any(|u| u.range.start >= operand.start)
    {
        return Err(Why::Operand);
    }
    let (items, end) = list(text, after_in)?;
    let compared = match followed_by(text, end) {
        Some(compared) => compared,
        None => return Err(Why::List),
    };
    // The left operand as rewritten so far.
    let inner = Rewrite {
        edits: out
            .edits
            .iter()
            .filter(|e| e.range.start >= operand.start)
            .map(|e| Edit {
                range: e.range.start - operand.start..e.range.end - operand.start,
                text: e.text.clone(),
            })
            .collect(),
        unrewritable: Vec::new(),
    };
    let value = inner.apply(&text[operand.clone()]);
    let replacement = match items.as_slice() {
        [] => return Err(Why::Empty),
        [item] => {
            let operator = if negated { "!=" } else { "==" };
            if compared {
                format!("({value} {operator} {item})")
            } else {
                format!("{value} {operator} {item}")
            }
        }
        items => format!(
            "{}contains(({}), {value})",
            if negated { "!" } else { "" },
            items.join(", ")
        ),
    };
    Ok(Edit {
        range: operand.start..end,
        text: replacement,
    })
}

/// The range of the left operand of `in`, whose tokens end `left`, when it
/// is plain and stands alone: nothing binding tighter than `in` before it.
fn left_operand(text: &str, left: &[Token]) -> Option<Range<usize>> {
    let last = left.last()?;
    let first = match last.kind {
        Kind::Str | Kind::Number => left.len() - 1,
        Kind::Word => {
            let field = left.len() >= 2 && left[left.len() - 2].kind == Kind::Punct('.');
            if !field && is_operator_word(&text[last.range.clone()]) {
                return None;
            }
            path_start(left, left.len() - 1)
        }
        Kind::Punct(')') => {
            let open = matching_open(left)?;
            // A call: a name right before the `(`; `(a)` is not delimited.
            let name = open.checked_sub(1)?;
            let token = &left[name];
            if token.kind != Kind::Word
                || token.range.end != left[open].range.start
                || is_operator_word(&text[token.range.clone()])
            {
                return None;
            }
            path_start(left, name)
        }
        Kind::Punct(_) => return None,
    };
    let alone = match first.checked_sub(1).map(|i| (i, &left[i])) {
        None => true,
        Some((_, token)) if matches!(token.kind, Kind::Punct('(' | ',')) => true,
        Some((_, token)) if token.kind == Kind::Word => {
            matches!(&text[token.range.clone()], "and" | "or")
        }
        Some((i, token)) => match token.kind {
            Kind::Punct(c @ ('&' | '|')) => i
                .checked_sub(1)
                .map(|j| &left[j])
                .is_some_and(|t| t.kind == Kind::Punct(c) && t.range.end == token.range.start),
            _ => false,
        },
    };
    alone.then(|| left[first].range.start..last.range.end)
}

/// The first token of the path (`data.a.b`) ending with the word `last`.
fn path_start(tokens: &[Token], last: usize) -> usize {
    let mut first = last;
    while first >= 2
        && tokens[first - 1].kind == Kind::Punct('.')
        && tokens[first - 2].kind == Kind::Word
    {
        first -= 2;
    }
    first
}

/// The index of the `(` matching the `)` that ends `tokens`.
fn matching_open(tokens: &[Token]) -> Option<usize> {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().rev() {
        match token.kind {
            Kind::Punct(')') => depth += 1,
            Kind::Punct('(') => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The items of the list after `in`, rewritten, and the end of the list
/// (after its `]`).
fn list(text: &str, after_in: usize) -> Result<(Vec<String>, usize), Why> {
    let mut at = run_end(text, after_in, char::is_whitespace);
    if !text[at..].starts_with('[') {
        return Err(Why::List);
    }
    at += 1;
    let mut items = Vec::new();
    loop {
        at = run_end(text, at, char::is_whitespace);
        if text[at..].starts_with(']') {
            // `[a, b,]`: expr-lang allows the trailing comma.
            return Ok((items, at + 1));
        }
        let end = operand_end(text, at).ok_or(Why::List)?;
        let item = &text[at..end];
        // An item holds no `[`, so this recursion is one level deep.
        let fixed = rewrite(item);
        if !fixed.unrewritable.is_empty() {
            return Err(Why::List);
        }
        items.push(fixed.apply(item));
        at = run_end(text, end, char::is_whitespace);
        if text[at..].starts_with(',') {
            at += 1;
        } else if !text[at..].starts_with(']') {
            return Err(Why::List);
        }
    }
}

/// The end of the plain operand starting at `at`: a string, a number, a
/// name or path, a call.
fn operand_end(text: &str, at: usize) -> Option<usize> {
    let c = text[at..].chars().next()?;
    match c {
        '"' | '\'' => quoted_end(text, at, c).map(|(end, _)| end),
        '-' if text[at + 1..].starts_with(|c: char| c.is_ascii_digit()) => {
            Some(run_end(text, at + 1, is_number_char))
        }
        c if c.is_ascii_digit() => Some(run_end(text, at, is_number_char)),
        c if c.is_ascii_alphabetic() || c == '_' => {
            let mut end = run_end(text, at, is_word_char);
            if is_operator_word(&text[at..end]) {
                return None;
            }
            while text[end..].starts_with('.')
                && text[end + 1..].starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            {
                end = run_end(text, end + 1, is_word_char);
            }
            if text[end..].starts_with('(') {
                end = close_paren(text, end)?;
            }
            Some(end)
        }
        _ => None,
    }
}

/// The end (after the `)`) of the parenthesised arguments opening at
/// `open`, strings skipped; `None` when unbalanced or holding a `[`.
fn close_paren(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut at = open;
    while let Some(c) = text[at..].chars().next() {
        match c {
            '"' | '\'' => {
                at = quoted_end(text, at, c)?.0;
                continue;
            }
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at + 1);
                }
            }
            '[' | ']' => return None,
            _ => {}
        }
        at += c.len_utf8();
    }
    None
}

/// Whether the list ending at `end` stands alone: `Some(true)` when `==`
/// or `!=` follows (both bind like `in` in expr-lang, left to right),
/// `Some(false)` when the end, `)`, `,` or `and`/`or`/`&&`/`||` does,
/// `None` for anything else (`+` would take the list as its operand).
fn followed_by(text: &str, end: usize) -> Option<bool> {
    let rest = text[end..].trim_start();
    if rest.starts_with("==") || rest.starts_with("!=") {
        return Some(true);
    }
    let alone = rest.is_empty()
        || rest.starts_with([')', ','])
        || rest.starts_with("&&")
        || rest.starts_with("||")
        || matches!(next_word(rest, 0), Some("and" | "or"));
    alone.then_some(false)
}

/// The word starting at `at`, if one does.
fn next_word(text: &str, at: usize) -> Option<&str> {
    let rest = text.get(at..)?;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Where the list after `in` ends, for a report: after its `]` when one
/// follows.
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

    /// The reported spans and why.
    fn reported(text: &str) -> Vec<(&str, Why)> {
        rewrite(text)
            .unrewritable
            .iter()
            .map(|u| (&text[u.range.clone()], u.why))
            .collect()
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
        assert_eq!(fixed("data.in == 1.5"), "data.in == 1.5");
    }

    #[test]
    fn membership_of_a_name_or_path() {
        assert_eq!(
            fixed("to in ['parked', 'stand-by'] and from == 'driving'"),
            r#"contains(("parked", "stand-by"), to) && from == "driving""#
        );
        assert_eq!(
            fixed("data.level in [1, 2, 3]"),
            "contains((1, 2, 3), data.level)"
        );
        assert_eq!(fixed("data.in in [1, 2]"), "contains((1, 2), data.in)");
        assert_eq!(
            fixed("x or data.a.b in [\"a\",'b',]"),
            r#"x || contains(("a", "b"), data.a.b)"#
        );
    }

    #[test]
    fn negated_membership() {
        assert_eq!(
            fixed("to not in ['parked', 'stand-by']"),
            r#"!contains(("parked", "stand-by"), to)"#
        );
        assert_eq!(
            fixed("a && (data.level not in [-1, 2.5])"),
            "a && (!contains((-1, 2.5), data.level))"
        );
    }

    #[test]
    fn membership_of_a_string_or_call() {
        assert_eq!(
            fixed("'it\\'s' in [\"a\", 'b']"),
            r#"contains(("a", "b"), "it's")"#
        );
        assert_eq!(fixed("\"x\" not in [a, b]"), r#"!contains((a, b), "x")"#);
        assert_eq!(
            fixed("state('vehicle', 'state') in ['parked', 'stand-by']"),
            r#"contains(("parked", "stand-by"), state("vehicle", "state"))"#
        );
        assert_eq!(
            fixed(r#"state("vehicle", "state") not in ["parked", state('a', 'b')]"#),
            r#"!contains(("parked", state("a", "b")), state("vehicle", "state"))"#
        );
        assert_eq!(
            fixed("str::len(str::trim(to)) in [1, 2]"),
            "contains((1, 2), str::len(str::trim(to)))"
        );
    }

    #[test]
    fn one_item_is_a_comparison() {
        assert_eq!(fixed("to in ['parked']"), r#"to == "parked""#);
        assert_eq!(
            fixed("x and to not in ['parked'] or y"),
            r#"x && to != "parked" || y"#
        );
        // `==` after it: expr-lang reads `(to in [...]) == false`.
        assert_eq!(
            fixed("to in ['parked'] == false"),
            r#"(to == "parked") == false"#
        );
        assert_eq!(
            fixed("to in ['a', 'b'] != true"),
            r#"contains(("a", "b"), to) != true"#
        );
    }

    #[test]
    fn edits_stay_sorted_and_do_not_overlap() {
        let text = "'a' == x and state('v', 's') in ['p', 'q'] or 'z' == y";
        let result = rewrite(text);
        for pair in result.edits.windows(2) {
            assert!(pair[0].range.end <= pair[1].range.start, "{pair:?}");
        }
        assert_eq!(
            result.apply(text),
            r#""a" == x && contains(("p", "q"), state("v", "s")) || "z" == y"#
        );
        // Edits inside the left operand, a membership's too, are taken in.
        assert_eq!(
            fixed("f(x in ['a']) in [true, false]"),
            r#"contains((true, false), f(x == "a"))"#
        );
        // One reported inside it: the outer one is reported too.
        assert_eq!(
            reported("f(x in []) in [true, false]"),
            [("in []", Why::Empty), ("in [true, false]", Why::Operand)]
        );
        // A second run has nothing left to do.
        let once = result.apply(text);
        assert_eq!(rewrite(&once), Rewrite::default());
    }

    #[test]
    fn an_empty_list_is_reported() {
        assert_eq!(reported("to in []"), [("in []", Why::Empty)]);
        assert_eq!(reported("x && to not in [ ]"), [("not in [ ]", Why::Empty)]);
        assert_eq!(fixed("to in []"), "to in []");
    }

    #[test]
    fn a_left_operand_that_is_not_plain_is_reported() {
        for text in [
            "a + b in [1, 2]",
            "(a) in [1, 2]",
            "(a + b) in [1, 2]",
            "not a in [true, false]",
            "!a in [true, false]",
            "-1 in [1, 2]",
            "x == to in [true]",
            "f(x).y in [1, 2]",
            "in [1, 2]",
            "and in [1, 2]",
        ] {
            assert_eq!(reported(text).len(), 1, "{text}");
            assert_eq!(reported(text)[0].1, Why::Operand, "{text}");
            assert!(rewrite(text)
                .edits
                .iter()
                .all(|e| !e.text.contains("contains")));
        }
        assert_eq!(
            fixed("(to) in ['a', 'b']"),
            r#"(to) in ["a", "b"]"#,
            "the quotes are still rewritten"
        );
    }

    #[test]
    fn a_list_that_is_not_plain_is_reported() {
        for text in [
            "to in data.choices",
            "to in [1, 2] + [3]",
            "to in [1, [2]]",
            "to in [a + b, c]",
            "to in [1, 2",
            "to in [,]",
            "to in ['a', 'b'] in [true]",
        ] {
            assert_eq!(reported(text)[0].1, Why::List, "{text}");
        }
        let text = "to in ['parked', 'stand-by'] + x";
        assert_eq!(reported(text), [("in ['parked', 'stand-by']", Why::List)]);
        assert_eq!(fixed(text), r#"to in ["parked", "stand-by"] + x"#);
    }
}
