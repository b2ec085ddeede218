//! Problems found on the tokens, before or instead of evalexpr's parser
//! (docs/when-language.md): its own messages for these would mislead.

use super::{problem, whole_span};
use crate::diagnostic::Code;
use crate::when::lex::{Tok, TokKind};
use crate::when::WhenProblem;
use evalexpr::EvalexprError;
use std::ops::Range;

/// Mistakes found on the tokens alone, before evalexpr's parser (whose
/// messages for these would be confusing: `'x'` parses as a variable name,
/// `a and b` as nested function calls).
pub(super) fn token_problems(text: &str, toks: &[Tok]) -> Vec<WhenProblem> {
    let mut out = Vec::new();
    // Where the last single-quoted "string" ends: its words are reported
    // with it.
    let mut quoted_until = 0;
    for (index, tok) in toks.iter().enumerate() {
        let span = tok.span.clone();
        let found = match &tok.kind {
            TokKind::Ident(_) if span.start < quoted_until => None,
            TokKind::Ident(name) if name.contains('\'') => {
                let quoted = single_quoted(text, span);
                quoted_until = quoted.span.end;
                Some(quoted)
            }
            TokKind::Ident(name) if name == "in" => Some(in_operator(text, toks, index)),
            TokKind::Ident(name) => word_operator(name, span),
            _ => lexical(text, tok).or_else(|| operator(text, toks, index)),
        };
        out.extend(found);
    }
    out
}

/// A string or comment the lexer could not finish, or a bad escape.
fn lexical(text: &str, tok: &Tok) -> Option<WhenProblem> {
    let span = tok.span.clone();
    Some(match &tok.kind {
        TokKind::UnterminatedStr => problem(
            Code::WhenSyntax,
            "unterminated string".into(),
            span,
            "this string has no closing `\"`".into(),
            Some("close the string with `\"`".into()),
        ),
        TokKind::BadEscape(bad) => problem(
            Code::WhenSyntax,
            format!("unknown escape `{}` in a string", &text[bad.clone()]),
            bad.clone(),
            "not an escape evalexpr knows".into(),
            Some("the only escapes are `\\\"` and `\\\\`".into()),
        ),
        TokKind::UnterminatedComment => problem(
            Code::WhenSyntax,
            "unterminated comment".into(),
            span,
            "this `/*` has no closing `*/`".into(),
            None,
        ),
        _ => return None,
    })
}

/// `'text'`, which evalexpr reads as a name with quotes in it; the problem
/// spans from the opening to the closing quote.
fn single_quoted(text: &str, span: Range<usize>) -> WhenProblem {
    // Find the quote in the text itself: the token's name can differ from
    // it (a comment inside the token is left out).
    let open = text[span.clone()]
        .find('\'')
        .map_or(span.start, |at| span.start + at);
    let close = text[open + 1..].find('\'').map(|at| open + 1 + at + 1);
    let quoted = open..close.unwrap_or(span.end);
    // The help quotes what was written, not a stock example.
    let inner = text[quoted.clone()].trim_matches('\'');
    problem(
        Code::WhenSingleQuotes,
        "strings are written in double quotes".into(),
        quoted,
        "single quotes do not make a string".into(),
        Some(format!(
            "write \"{inner}\", not '{inner}'; in TOML, put the whole expression \
             in single quotes, e.g. when = 'to == \"{inner}\"'"
        )),
    )
}

/// `and`, `or`, `not` (any case) written for `&&`, `||`, `!`.
fn word_operator(name: &str, span: Range<usize>) -> Option<WhenProblem> {
    let fix = match name.to_ascii_lowercase().as_str() {
        "and" => "&&",
        "or" => "||",
        "not" => "!",
        _ => return None,
    };
    // `!` binds tighter than `==`: `not a == b` must become `!(a == b)`,
    // not `!a == b` (a type error).
    let help = if fix == "!" {
        "`when` uses `&&`, `||` and `!`: write `!(...)` around the condition, \
         e.g. `!(from == \"driving\")`, or use `!=`"
            .to_string()
    } else {
        format!("`when` uses `&&`, `||` and `!`: write `{fix}`")
    };
    Some(problem(
        Code::WhenWordOperator,
        format!("`{name}` is not an operator here"),
        span,
        format!("use `{fix}` instead"),
        Some(help),
    ))
}

/// `to in ["parked", "stand-by"]` (expr-lang, Python): membership is the
/// function `contains` (docs/when-language.md#membership); the help
/// rewrites what was written.
fn in_operator(text: &str, toks: &[Tok], index: usize) -> WhenProblem {
    let span = toks[index].span.clone();
    // The left operand is the token before `in` only when nothing binds to
    // it from further left (`data.charge + 5 in [...]` is not about `5`).
    let left = index
        .checked_sub(1)
        .and_then(|i| toks.get(i))
        .filter(|tok| {
            let before = text[..tok.span.start].trim_end();
            before.is_empty() || before.ends_with(['(', ',', '&', '|'])
        })
        .map_or("<value>", |tok| text[tok.span.clone()].trim());
    let inner = bracketed_list(&text[span.end..]).unwrap_or("").trim();
    let fix = if inner.is_empty() {
        format!("contains((\"a\", \"b\"), {left})")
    } else if inner.contains(',') {
        format!("contains(({inner}), {left})")
    } else {
        format!("{left} == {inner}")
    };
    problem(
        Code::WhenWordOperator,
        "`in` is not an operator in `when`".into(),
        span,
        "membership is a function here".into(),
        Some(format!(
            "write `{fix}`: the tuple in parentheses, then the value"
        )),
    )
}

/// What stands between the `[` that opens `rest` (after white space) and
/// its matching `]`, skipping brackets inside strings; `None` when `rest`
/// does not start with a closed list.
fn bracketed_list(rest: &str) -> Option<&str> {
    let list = rest.trim_start().strip_prefix('[')?;
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in list.char_indices() {
        match (quote, c) {
            (Some(_), '\\') if !escaped => {
                escaped = true;
                continue;
            }
            (Some(q), c) if c == q && !escaped => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') if depth == 0 => return Some(&list[..i]),
            (None, ']') => depth -= 1,
            _ => {}
        }
        escaped = false;
    }
    None
}

/// Operators from other languages (`&`, `=>`, `<>`), assignments and `;`.
fn operator(text: &str, toks: &[Tok], index: usize) -> Option<WhenProblem> {
    let span = toks[index].span.clone();
    // The next token starts right where this one ends (`=>`, `<>`).
    let next = toks
        .get(index + 1)
        .filter(|next| next.span.start == span.end);
    let next_kind = next.map(|next| &next.kind);
    let next_end = next.map_or(span.end, |next| next.span.end);
    Some(match toks[index].kind {
        TokKind::LoneAmpOrBar => {
            let doubled = &text[span.clone()].repeat(2);
            problem(
                Code::WhenSyntax,
                format!("`{}` is not an operator", &text[span.clone()]),
                span,
                format!("use `{doubled}`"),
                Some("`&&` is logical and, `||` is logical or".into()),
            )
        }
        TokKind::Assign
            if &text[span.clone()] == "="
                && matches!(next_kind, Some(TokKind::Gt | TokKind::Lt)) =>
        {
            // `=>` and `=<`: a comparison written backwards.
            let fix = if next_kind == Some(&TokKind::Gt) {
                ">="
            } else {
                "<="
            };
            let written = &text[span.start..next_end];
            problem(
                Code::WhenSyntax,
                format!("`{written}` is not an operator"),
                span.start..next_end,
                format!("use `{fix}`"),
                Some(format!(
                    "write `{fix}`: the comparison comes first, then `=`"
                )),
            )
        }
        TokKind::Lt if next_kind == Some(&TokKind::Gt) => problem(
            Code::WhenSyntax,
            "`<>` is not an operator".into(),
            span.start..next_end,
            "use `!=`".into(),
            Some("`when` writes \"not equal\" as `!=`".into()),
        ),
        TokKind::Assign => {
            let is_plain = &text[span.clone()] == "=";
            problem(
                Code::WhenAssignment,
                "assignment is not allowed in `when`".into(),
                span,
                "assignment".into(),
                Some(if is_plain {
                    "to compare, write `==`".into()
                } else {
                    "a condition cannot change values".into()
                }),
            )
        }
        TokKind::Semicolon => problem(
            Code::WhenChain,
            "`;` chains are not allowed in `when`".into(),
            span,
            "expression chain".into(),
            Some("combine conditions with `&&` or `||`".into()),
        ),
        _ => return None,
    })
}

/// Turns an evalexpr parse error into a problem with the best span we can
/// find on the tokens.
pub(super) fn parse_problem(text: &str, toks: &[Tok], error: &EvalexprError) -> WhenProblem {
    let mut open = Vec::new();
    let mut stray_close = None;
    for tok in toks {
        match tok.kind {
            TokKind::LParen => open.push(tok.span.clone()),
            TokKind::RParen => {
                let matched = open.pop();
                if matched.is_none() {
                    stray_close.get_or_insert(tok.span.clone());
                }
            }
            _ => {}
        }
    }
    if let Some(span) = stray_close {
        return problem(
            Code::WhenSyntax,
            "unmatched `)`".into(),
            span,
            "no `(` opens this".into(),
            None,
        );
    }
    if let Some(span) = open.pop() {
        return problem(
            Code::WhenSyntax,
            "unmatched `(`".into(),
            span,
            "this `(` is never closed".into(),
            Some("add a `)`".into()),
        );
    }
    // Two values next to each other: `to == "a" from == "b"`.
    for pair in toks.windows(2) {
        let ends_value = matches!(
            pair[0].kind,
            TokKind::Int | TokKind::Float | TokKind::Bool | TokKind::Str | TokKind::RParen
        );
        let starts_value = matches!(
            pair[1].kind,
            TokKind::Int
                | TokKind::Float
                | TokKind::Bool
                | TokKind::Str
                | TokKind::Ident(_)
                | TokKind::LParen
        );
        if ends_value && pair[1].kind == TokKind::LParen {
            return problem(
                Code::WhenSyntax,
                "parentheses after a value".into(),
                pair[1].span.clone(),
                "a value cannot be called".into(),
                Some("only functions take arguments: `len(topic)`".into()),
            );
        }
        if ends_value && starts_value {
            return problem(
                Code::WhenSyntax,
                "missing operator between two values".into(),
                pair[0].span.start..pair[1].span.end,
                "nothing joins these".into(),
                Some("join conditions with `&&` or `||`".into()),
            );
        }
    }
    problem(
        Code::WhenSyntax,
        format!("cannot parse the expression: {error}"),
        whole_span(text),
        "evalexpr cannot parse this".into(),
        None,
    )
}

#[cfg(test)]
mod membership_tests {
    use super::bracketed_list;

    #[test]
    fn the_list_after_in_ends_at_its_own_bracket() {
        assert_eq!(
            bracketed_list(r#" ["parked", "stand-by"] && from == "driving""#),
            Some(r#""parked", "stand-by""#)
        );
        assert_eq!(bracketed_list(r#"["a]", 'b\'']"#), Some(r#""a]", 'b\''"#));
        assert_eq!(bracketed_list("[[1], 2] || x"), Some("[1], 2"));
        assert_eq!(bracketed_list("[1, 2"), None);
        assert_eq!(bracketed_list("x"), None);
    }
}
