//! A span-keeping tokenizer that splits an expression exactly as evalexpr 13
//! does (docs/when-language.md). evalexpr's tree carries no positions, so the checker
//! walks the tree in source order and takes each node's bytes from here.
//!
//! The splitting rules mirror evalexpr's: the characters `+ - * / % ^ ( ) , ;
//! = ! > < & |`, white space and `"` end a run; every other character joins a
//! "literal" run that becomes an int, a float, a boolean or an identifier;
//! `1e-3` is glued back together from `1e`, `-`, `3`; `//` and `/* */` are
//! comments.

use std::ops::Range;

/// What a token is, at the granularity the span mapping needs.
#[derive(Debug, Clone, PartialEq)]
pub enum TokKind {
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Hat,
    Eq,
    Neq,
    Gt,
    Lt,
    Geq,
    Leq,
    And,
    Or,
    Not,
    LParen,
    RParen,
    Comma,
    Semicolon,
    /// `=`, `+=`, `&&=`, ...: any assignment operator.
    Assign,
    /// A single `&` or `|` (evalexpr rejects these).
    LoneAmpOrBar,
    Ident(String),
    Int,
    Float,
    Bool,
    Str,
    /// A `"` with no closing quote: runs to the end of the text.
    UnterminatedStr,
    /// A string with an escape evalexpr does not know (only `\"` and `\\`).
    BadEscape(Range<usize>),
    /// `/*` with no closing `*/`.
    UnterminatedComment,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tok {
    pub kind: TokKind,
    pub span: Range<usize>,
}

/// evalexpr's first pass: single characters, literal runs, strings.
#[derive(Debug, Clone, PartialEq)]
enum Partial {
    Done(TokKind),
    /// The run's text; a comment inside a run does not split it (as in
    /// evalexpr), so the text may differ from the spanned bytes.
    Literal(String),
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Hat,
    Eq,
    Bang,
    Gt,
    Lt,
    Amp,
    Bar,
    Space,
}

fn partial_of(c: char) -> Partial {
    match c {
        '+' => Partial::Plus,
        '-' => Partial::Minus,
        '*' => Partial::Star,
        '/' => Partial::Slash,
        '%' => Partial::Percent,
        '^' => Partial::Hat,
        '(' => Partial::Done(TokKind::LParen),
        ')' => Partial::Done(TokKind::RParen),
        ',' => Partial::Done(TokKind::Comma),
        ';' => Partial::Done(TokKind::Semicolon),
        '=' => Partial::Eq,
        '!' => Partial::Bang,
        '>' => Partial::Gt,
        '<' => Partial::Lt,
        '&' => Partial::Amp,
        '|' => Partial::Bar,
        c if c.is_whitespace() => Partial::Space,
        c => Partial::Literal(c.to_string()),
    }
}

fn partials(text: &str) -> Vec<(Partial, Range<usize>)> {
    let mut out: Vec<(Partial, Range<usize>)> = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c == '"' {
            let mut bad_escape = None;
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    '\\' => match chars.next() {
                        Some((_, '"' | '\\')) => {}
                        Some((j, other)) => {
                            bad_escape.get_or_insert(i..j + other.len_utf8());
                        }
                        None => {
                            bad_escape.get_or_insert(i..i + 1);
                        }
                    },
                    _ => {}
                }
            }
            let kind = match (end, bad_escape) {
                (_, Some(bad)) => TokKind::BadEscape(bad),
                (Some(_), None) => TokKind::Str,
                (None, None) => TokKind::UnterminatedStr,
            };
            let end = end.unwrap_or(text.len());
            out.push((Partial::Done(kind), at..end));
            continue;
        }
        let partial = partial_of(c);
        if partial == Partial::Slash {
            match chars.peek() {
                Some(&(_, '/')) => {
                    for (_, c) in chars.by_ref() {
                        if c == '\n' {
                            break;
                        }
                    }
                    continue;
                }
                Some(&(_, '*')) => {
                    chars.next();
                    let mut closed = false;
                    while let Some((_, c)) = chars.next() {
                        if c == '*' && matches!(chars.peek(), Some(&(_, '/'))) {
                            chars.next();
                            closed = true;
                            break;
                        }
                    }
                    if !closed {
                        out.push((Partial::Done(TokKind::UnterminatedComment), at..text.len()));
                    }
                    continue;
                }
                _ => {}
            }
        }
        let span = at..at + c.len_utf8();
        match (out.last_mut(), &partial) {
            (Some((Partial::Literal(run), last)), Partial::Literal(more)) => {
                run.push_str(more);
                last.end = span.end;
            }
            _ => out.push((partial, span)),
        }
    }
    out
}

fn is_int(literal: &str) -> bool {
    if let Some(hex) = literal.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).is_ok()
    } else if let Some(bin) = literal.strip_prefix("0b") {
        i64::from_str_radix(bin, 2).is_ok()
    } else if let Some(oct) = literal.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).is_ok()
    } else {
        literal.parse::<i64>().is_ok()
    }
}

/// How evalexpr prints a partial token when it glues `1e`, `-`, `3`.
fn partial_text<'a>(text: &'a str, part: &'a (Partial, Range<usize>)) -> &'a str {
    match &part.0 {
        Partial::Literal(run) => run,
        Partial::Space => " ",
        _ => &text[part.1.clone()],
    }
}

/// Splits `text` into tokens with byte spans, as evalexpr 13 would.
pub fn tokenize(text: &str) -> Vec<Tok> {
    let parts = partials(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < parts.len() {
        let (first, span) = &parts[i];
        let second = parts.get(i + 1).map(|p| &p.0);
        let third = parts.get(i + 2);
        let two = |kind| (kind, span.start..parts[i + 1].1.end, 2);
        let one = |kind| (kind, span.clone(), 1);
        let (kind, span, used) = match first {
            Partial::Done(kind) => one(kind.clone()),
            Partial::Space => {
                i += 1;
                continue;
            }
            Partial::Plus | Partial::Star | Partial::Slash | Partial::Percent | Partial::Hat
                if second == Some(&Partial::Eq) =>
            {
                two(TokKind::Assign)
            }
            Partial::Minus if second == Some(&Partial::Eq) => two(TokKind::Assign),
            Partial::Plus => one(TokKind::Plus),
            Partial::Minus => one(TokKind::Minus),
            Partial::Star => one(TokKind::Star),
            Partial::Slash => one(TokKind::Slash),
            Partial::Percent => one(TokKind::Percent),
            Partial::Hat => one(TokKind::Hat),
            Partial::Eq if second == Some(&Partial::Eq) => two(TokKind::Eq),
            Partial::Eq => one(TokKind::Assign),
            Partial::Bang if second == Some(&Partial::Eq) => two(TokKind::Neq),
            Partial::Bang => one(TokKind::Not),
            Partial::Gt if second == Some(&Partial::Eq) => two(TokKind::Geq),
            Partial::Gt => one(TokKind::Gt),
            Partial::Lt if second == Some(&Partial::Eq) => two(TokKind::Leq),
            Partial::Lt => one(TokKind::Lt),
            Partial::Amp | Partial::Bar if second == Some(first) => match third {
                Some((Partial::Eq, s)) => (TokKind::Assign, span.start..s.end, 3),
                _ => two(if *first == Partial::Amp {
                    TokKind::And
                } else {
                    TokKind::Or
                }),
            },
            Partial::Amp | Partial::Bar => one(TokKind::LoneAmpOrBar),
            Partial::Literal(literal) => {
                let literal = literal.as_str();
                if is_int(literal) {
                    one(TokKind::Int)
                } else if literal.parse::<f64>().is_ok() {
                    one(TokKind::Float)
                } else if literal.parse::<bool>().is_ok() {
                    one(TokKind::Bool)
                } else {
                    // evalexpr's `1e-3` rule: the literal, a sign, and the
                    // next partial token's text, parsed as one float.
                    let glued = match (second, third) {
                        (Some(Partial::Minus | Partial::Plus), Some((_, s3))) => {
                            let whole = span.start..s3.end;
                            let sign = &text[parts[i + 1].1.clone()];
                            let joined =
                                format!("{literal}{sign}{}", partial_text(text, &parts[i + 2]));
                            joined.parse::<f64>().is_ok().then_some(whole)
                        }
                        _ => None,
                    };
                    match glued {
                        Some(whole) => (TokKind::Float, whole, 3),
                        None => one(TokKind::Ident(literal.to_string())),
                    }
                }
            }
        };
        out.push(Tok { kind, span });
        i += used;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(TokKind, &str)> {
        tokenize(text)
            .into_iter()
            .map(|t| {
                let s = &text[t.span.clone()];
                (t.kind, s)
            })
            .collect()
    }

    #[test]
    fn splits_like_evalexpr() {
        use TokKind::*;
        assert_eq!(
            kinds(r#"data.a.b>=1e-3&&!str::contains(to,"x\"y")"#),
            vec![
                (Ident("data.a.b".into()), "data.a.b"),
                (Geq, ">="),
                (Float, "1e-3"),
                (And, "&&"),
                (Not, "!"),
                (Ident("str::contains".into()), "str::contains"),
                (LParen, "("),
                (Ident("to".into()), "to"),
                (Comma, ","),
                (Str, r#""x\"y""#),
                (RParen, ")"),
            ]
        );
        assert_eq!(
            kinds("a = 1 /* c */ ; b += 2 // end"),
            vec![
                (Ident("a".into()), "a"),
                (Assign, "="),
                (Int, "1"),
                (Semicolon, ";"),
                (Ident("b".into()), "b"),
                (Assign, "+="),
                (Int, "2"),
            ]
        );
        assert_eq!(
            kinds("x-1 & 0x1f ||= true"),
            vec![
                (Ident("x".into()), "x"),
                (Minus, "-"),
                (Int, "1"),
                (LoneAmpOrBar, "&"),
                (Int, "0x1f"),
                (Assign, "||="),
                (Bool, "true"),
            ]
        );
    }

    #[test]
    fn odd_strings_and_comments() {
        assert_eq!(
            kinds(r#"to == "abc"#),
            vec![
                (TokKind::Ident("to".into()), "to"),
                (TokKind::Eq, "=="),
                (TokKind::UnterminatedStr, r#""abc"#),
            ]
        );
        assert_eq!(
            kinds(r#""a\nb""#),
            vec![(TokKind::BadEscape(2..4), r#""a\nb""#)]
        );
        assert_eq!(
            kinds("1 /* open"),
            vec![
                (TokKind::Int, "1"),
                (TokKind::UnterminatedComment, "/* open")
            ]
        );
    }
}
