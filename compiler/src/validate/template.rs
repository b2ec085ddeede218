//! Computed values (docs/rules.md#computed-values): `${expr}` segments in
//! `push`, `message`, `title` and `body`, each checked as a `when`-language
//! expression of any type, with spans inside the string; `$${` is a
//! literal `${`.

use super::checker::RuleChecker;
use super::{CheckedExpr, CheckedPart, CheckedTemplate};
use crate::diagnostic::{Code, Diagnostic};
use crate::span::StringMap;
use crate::when;
use rulecore::bytecode::Program;
use rulecore::template::{Part, Template, Text};
use std::ops::Range;

/// A piece of a value as written, before checking.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    /// The expression's bytes in the decoded value (between `${` and `}`).
    Expr(Range<usize>),
}

/// Splits a value at its `${...}` segments. The `}` that closes a segment
/// is the first one outside a string literal. `Err`: the range of a `${`
/// that is never closed, to the end of the value.
fn split(text: &str) -> Result<Vec<Piece>, Range<usize>> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        literal.push_str(&rest[..at]);
        let offset = text.len() - rest.len() + at;
        let after = &rest[at..];
        if let Some(escaped) = after.strip_prefix("$${") {
            literal.push_str("${");
            rest = escaped;
        } else if after.starts_with("${") {
            let start = offset + 2;
            let end = closing_brace(&text[start..]).ok_or(offset..text.len())? + start;
            if !literal.is_empty() {
                pieces.push(Piece::Literal(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Expr(start..end));
            rest = &text[end + 1..];
        } else {
            literal.push('$');
            rest = &after[1..];
        }
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    Ok(pieces)
}

/// The offset of the `}` that ends an expression, skipping string
/// literals (`"}"` inside one does not end it).
fn closing_brace(expr: &str) -> Option<usize> {
    let mut in_string = false;
    let mut escaped = false;
    for (at, c) in expr.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '}' if !in_string => return Some(at),
            _ => {}
        }
    }
    None
}

impl RuleChecker<'_, '_> {
    /// A value that may be computed: plain text, or a template whose
    /// expressions passed (`None` on any error, all of them reported).
    /// The template's programs are empty until `build` lowers them from
    /// the returned [`CheckedTemplate`].
    pub(super) fn text(
        &mut self,
        key: &str,
        text: String,
        span: Range<usize>,
    ) -> Option<(Text, Option<CheckedTemplate>)> {
        let map = StringMap::new(&self.file.text, span.clone(), &text);
        let pieces = match split(&text) {
            Ok(pieces) => pieces,
            Err(open) => {
                self.push(
                    Diagnostic::error(
                        Code::Template,
                        format!("a `${{` in `{key}` is never closed"),
                    )
                    .at(
                        map.map(open.start..open.start + 2),
                        "opened here, no `}` after it",
                    )
                    .with_help("end the expression with `}`, or write `$${` for a literal `${`"),
                );
                return None;
            }
        };
        if !pieces.iter().any(|piece| matches!(piece, Piece::Expr(_))) {
            let plain: String = pieces
                .into_iter()
                .map(|piece| match piece {
                    Piece::Literal(text) => text,
                    Piece::Expr(_) => String::new(),
                })
                .collect();
            return Some((Text::Plain(plain), None));
        }
        let mut checked = Vec::new();
        let mut ok = true;
        for piece in pieces {
            match piece {
                Piece::Literal(literal) => checked.push(CheckedPart::Literal(literal)),
                Piece::Expr(part) => match self.value_expr(key, &text, &span, &map, part) {
                    Some(expr) => checked.push(CheckedPart::Expr(expr)),
                    None => ok = false,
                },
            }
        }
        if !ok {
            return None;
        }
        let parts = checked
            .iter()
            .map(|part| match part {
                CheckedPart::Literal(text) => Part::Literal(text.clone()),
                CheckedPart::Expr(_) => Part::Expr(Program { ops: Vec::new() }),
            })
            .collect();
        let template = Template {
            source: text,
            parts,
        };
        Some((
            Text::Computed(Box::new(template)),
            Some(CheckedTemplate { parts: checked }),
        ))
    }

    /// One `${...}` expression: checked for any type, its problems pointed
    /// at inside the string.
    fn value_expr(
        &mut self,
        key: &str,
        text: &str,
        span: &Range<usize>,
        map: &StringMap,
        part: Range<usize>,
    ) -> Option<CheckedExpr> {
        let expr = &text[part.clone()];
        let inner = map.sub(part.clone());
        if expr.trim().is_empty() {
            self.push(
                Diagnostic::error(Code::Template, format!("an empty `${{}}` in `{key}`"))
                    .at(map.map(part.start - 2..part.end + 1), "no expression")
                    .with_help("write an expression between the braces, e.g. `${to}`, or `$${` for a literal `${`"),
            );
            return None;
        }
        match when::check_value(expr) {
            Ok(checked) => {
                for warning in &checked.warnings {
                    let mut diagnostic = Diagnostic::warning(warning.code, warning.message.clone())
                        .at(inner.map(warning.span.clone()), warning.label.clone());
                    diagnostic.help = warning.help.clone();
                    self.push(diagnostic);
                }
                if let Some(catalogue) = self.catalogue {
                    for diagnostic in
                        super::profile::state_uses(catalogue, &checked.expr, expr, &inner)
                    {
                        self.push(diagnostic);
                    }
                }
                let expr = CheckedExpr {
                    source: text.to_string(),
                    checked,
                    span: span.clone(),
                    part,
                };
                self.keep_expr(&expr);
                Some(expr)
            }
            Err(problems) => {
                for problem in problems {
                    let mut diagnostic = Diagnostic::error(problem.code, problem.message)
                        .at(inner.map(problem.span), problem.label);
                    diagnostic.help = problem.help;
                    self.push(diagnostic);
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(text: &str) -> Piece {
        Piece::Literal(text.to_string())
    }

    #[test]
    fn splits_at_segments_and_keeps_escapes_literal() {
        assert_eq!(split("both"), Ok(vec![lit("both")]));
        assert_eq!(split(""), Ok(vec![]));
        let text = "Battery ${data.slot + 1} at ${int(to)} %";
        let pieces = split(text).unwrap();
        assert_eq!(pieces.len(), 5);
        assert_eq!(pieces[0], lit("Battery "));
        let Piece::Expr(first) = &pieces[1] else {
            panic!("{pieces:?}")
        };
        assert_eq!(&text[first.clone()], "data.slot + 1");
        assert_eq!(pieces[4], lit(" %"));
        assert_eq!(split("a $${b} $5"), Ok(vec![lit("a ${b} $5")]));
        assert_eq!(split("$"), Ok(vec![lit("$")]));
    }

    #[test]
    fn a_brace_inside_a_string_literal_does_not_close() {
        let text = r#"${"}" + to}!"#;
        let pieces = split(text).unwrap();
        let Piece::Expr(expr) = &pieces[0] else {
            panic!("{pieces:?}")
        };
        assert_eq!(&text[expr.clone()], r#""}" + to"#);
        assert_eq!(pieces[1], lit("!"));
        let escaped = r#"${"a\"}" + to}"#;
        let Piece::Expr(expr) = &split(escaped).unwrap()[0] else {
            panic!()
        };
        assert_eq!(&escaped[expr.clone()], r#""a\"}" + to"#);
    }

    #[test]
    fn an_unclosed_segment_is_reported_from_its_opening() {
        assert_eq!(split("at ${to"), Err(3..7));
        assert_eq!(split(r#"${"}"#), Err(0..4));
    }
}
