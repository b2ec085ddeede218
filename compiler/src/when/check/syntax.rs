//! Problems found on the tokens, before or instead of evalexpr's parser
//! (DESIGN.md 4): its own messages for these would mislead.

use super::{problem, whole_span};
use crate::diagnostic::Code;
use crate::when::lex::{Tok, TokKind};
use crate::when::WhenProblem;
use evalexpr::EvalexprError;

/// Mistakes found on the tokens alone, before evalexpr's parser (whose
/// messages for these would be confusing: `'x'` parses as a variable name,
/// `a and b` as nested function calls).
pub(super) fn token_problems(text: &str, toks: &[Tok]) -> Vec<WhenProblem> {
    let mut out = Vec::new();
    let mut quoted_until = 0;
    // The next token starts right where token `index` ends (`=>`, `<>`).
    let next_is = |index: usize, kinds: &[TokKind]| {
        toks.get(index + 1).is_some_and(|next| {
            next.span.start == toks[index].span.end && kinds.contains(&next.kind)
        })
    };
    for (index, tok) in toks.iter().enumerate() {
        let span = tok.span.clone();
        match &tok.kind {
            TokKind::UnterminatedStr => out.push(problem(
                Code::WhenSyntax,
                "unterminated string".into(),
                span,
                "this string has no closing `\"`".into(),
                Some("close the string with `\"`".into()),
            )),
            TokKind::BadEscape(bad) => out.push(problem(
                Code::WhenSyntax,
                format!("unknown escape `{}` in a string", &text[bad.clone()]),
                bad.clone(),
                "not an escape evalexpr knows".into(),
                Some("the only escapes are `\\\"` and `\\\\`".into()),
            )),
            TokKind::UnterminatedComment => out.push(problem(
                Code::WhenSyntax,
                "unterminated comment".into(),
                span,
                "this `/*` has no closing `*/`".into(),
                None,
            )),
            TokKind::Ident(name) if name.contains('\'') => {
                if span.start < quoted_until {
                    continue;
                }
                // Find the quote in the text itself: the token's name can
                // differ from it (a comment inside the token is left out).
                let open = text[span.clone()]
                    .find('\'')
                    .map_or(span.start, |at| span.start + at);
                let close = text[open + 1..].find('\'').map(|at| open + 1 + at + 1);
                let quoted = open..close.unwrap_or(span.end);
                quoted_until = quoted.end;
                // The help quotes what was written, not a stock example.
                let inner = text[quoted.clone()].trim_matches('\'');
                out.push(problem(
                    Code::WhenSingleQuotes,
                    "strings are written in double quotes".into(),
                    quoted,
                    "single quotes do not make a string".into(),
                    Some(format!(
                        "write \"{inner}\", not '{inner}'; in TOML, put the whole expression \
                         in single quotes, e.g. when = 'to == \"{inner}\"'"
                    )),
                ));
            }
            // Words inside a single-quoted string: reported with it.
            TokKind::Ident(_) if span.start < quoted_until => {}
            TokKind::Ident(name) => {
                let fix = match name.to_ascii_lowercase().as_str() {
                    "and" => Some("&&"),
                    "or" => Some("||"),
                    "not" => Some("!"),
                    _ => None,
                };
                if let Some(fix) = fix {
                    // `!` binds tighter than `==`: `not a == b` must become
                    // `!(a == b)`, not `!a == b` (a type error).
                    let help = if fix == "!" {
                        "`when` uses `&&`, `||` and `!`: write `!(...)` around the condition, \
                         e.g. `!(from == \"driving\")`, or use `!=`"
                            .to_string()
                    } else {
                        format!("`when` uses `&&`, `||` and `!`: write `{fix}`")
                    };
                    out.push(problem(
                        Code::WhenWordOperator,
                        format!("`{name}` is not an operator here"),
                        span,
                        format!("use `{fix}` instead"),
                        Some(help),
                    ));
                }
            }
            TokKind::LoneAmpOrBar => {
                let doubled = &text[span.clone()].repeat(2);
                out.push(problem(
                    Code::WhenSyntax,
                    format!("`{}` is not an operator", &text[span.clone()]),
                    span,
                    format!("use `{doubled}`"),
                    Some("`&&` is logical and, `||` is logical or".into()),
                ));
            }
            TokKind::Assign
                if &text[span.clone()] == "=" && next_is(index, &[TokKind::Gt, TokKind::Lt]) =>
            {
                // `=>` and `=<`: a comparison written backwards.
                let fix = if toks[index + 1].kind == TokKind::Gt {
                    ">="
                } else {
                    "<="
                };
                let written = &text[span.start..toks[index + 1].span.end];
                out.push(problem(
                    Code::WhenSyntax,
                    format!("`{written}` is not an operator"),
                    span.start..toks[index + 1].span.end,
                    format!("use `{fix}`"),
                    Some(format!(
                        "write `{fix}`: the comparison comes first, then `=`"
                    )),
                ));
            }
            TokKind::Lt if next_is(index, &[TokKind::Gt]) => out.push(problem(
                Code::WhenSyntax,
                "`<>` is not an operator".into(),
                span.start..toks[index + 1].span.end,
                "use `!=`".into(),
                Some("`when` writes \"not equal\" as `!=`".into()),
            )),
            TokKind::Assign => {
                let is_plain = &text[span.clone()] == "=";
                out.push(problem(
                    Code::WhenAssignment,
                    "assignment is not allowed in `when`".into(),
                    span,
                    "assignment".into(),
                    Some(if is_plain {
                        "to compare, write `==`".into()
                    } else {
                        "a condition cannot change values".into()
                    }),
                ));
            }
            TokKind::Semicolon => out.push(problem(
                Code::WhenChain,
                "`;` chains are not allowed in `when`".into(),
                span,
                "expression chain".into(),
                Some("combine conditions with `&&` or `||`".into()),
            )),
            _ => {}
        }
    }
    out
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
