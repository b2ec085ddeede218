//! Maps evalexpr's position-less tree onto the token spans of [`super::lex`],
//! so that a problem points inside the `when` string (docs/rules.md#errors-and-warnings, docs/when-language.md).
//!
//! Every token but `(`, `)`, white space and comments becomes exactly one node
//! in evalexpr 13, and a source-order walk of the tree (left operand,
//! operator, right operand; prefix operators before their operand; a function
//! name before its argument) meets the nodes in token order. Parentheses are
//! `RootNode`s, except the tree's own root and the element roots under a
//! tuple or chain, which evalexpr adds without a token.

use super::lex::{Tok, TokKind};
use evalexpr::{Node, Operator};
use std::ops::Range;

/// The bytes of one node and of its children, parallel to the evalexpr tree.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanTree {
    /// The whole node, parentheses included.
    pub span: Range<usize>,
    /// The node's own token: the operator, the function or variable name,
    /// the literal; the whole node for parentheses and sequences.
    pub op: Range<usize>,
    pub kids: Vec<SpanTree>,
}

/// Maps `root` (as returned by `build_operator_tree`) onto `toks`. When the
/// walk and the tokens ever disagree, every node gets the whole text: a
/// coarse span is better than a wrong one.
pub fn map(root: &Node, toks: &[Tok], text_len: usize) -> Mapped {
    try_map(root, toks).unwrap_or_else(|| Mapped {
        tree: whole(root, 0..text_len),
        misplaced: Vec::new(),
    })
}

/// A mapped tree, and the binary operators written before both their
/// operands (`>= a b`), which evalexpr quietly accepts as `a >= b`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    pub tree: SpanTree,
    pub misplaced: Vec<(Range<usize>, Oddity)>,
}

/// Token orders evalexpr accepts by accident of its tree building; the
/// checker rejects them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Oddity {
    /// `>= a b`, read as `a >= b`.
    OperatorFirst,
    /// `2.5()`, read as `(2.5)`.
    ParensAfterValue,
}

/// Bounds the backtracking over operator placement on malformed input.
const BUDGET: usize = 10_000;

/// The exact mapping, or `None` where the walk and the tokens disagree.
fn try_map(root: &Node, toks: &[Tok]) -> Option<Mapped> {
    let mut walker = Walker {
        toks,
        pos: 0,
        budget: BUDGET,
        misplaced: Vec::new(),
    };
    let tree = walker.node(root, true)?;
    (walker.pos == toks.len()).then_some(Mapped {
        tree,
        misplaced: walker.misplaced,
    })
}

fn whole(node: &Node, span: Range<usize>) -> SpanTree {
    SpanTree {
        span: span.clone(),
        op: span.clone(),
        kids: node
            .children()
            .iter()
            .map(|kid| whole(kid, span.clone()))
            .collect(),
    }
}

struct Walker<'a> {
    toks: &'a [Tok],
    pos: usize,
    /// Node visits left; the walk gives up (whole-text spans) at zero.
    budget: usize,
    misplaced: Vec<(Range<usize>, Oddity)>,
}

impl Walker<'_> {
    fn take(&mut self, want: impl Fn(&TokKind) -> bool) -> Option<Range<usize>> {
        let tok = self.toks.get(self.pos)?;
        if want(&tok.kind) {
            self.pos += 1;
            Some(tok.span.clone())
        } else {
            None
        }
    }

    /// Where an empty, token-less root sits: after the previous token.
    fn here(&self) -> Range<usize> {
        match self.pos.checked_sub(1).and_then(|p| self.toks.get(p)) {
            Some(prev) => prev.span.clone(),
            None => 0..0,
        }
    }

    /// The spans of `node` and its children, taking their tokens in order.
    /// `synthetic`: a root evalexpr made up (a tuple element), with no
    /// parentheses of its own.
    fn node(&mut self, node: &Node, synthetic: bool) -> Option<SpanTree> {
        self.budget = self.budget.checked_sub(1)?;
        let kids = node.children();
        match node.operator() {
            Operator::RootNode if synthetic => self.synthetic_root(kids),
            Operator::RootNode => self.root(kids),
            Operator::Tuple => self.separated(kids, &TokKind::Comma),
            Operator::Chain => self.separated(kids, &TokKind::Semicolon),
            Operator::Neg => self.prefix(kids, &TokKind::Minus),
            Operator::Not => self.prefix(kids, &TokKind::Not),
            Operator::Const { .. } => {
                let op = self.take(|k| {
                    matches!(
                        k,
                        TokKind::Int | TokKind::Float | TokKind::Bool | TokKind::Str
                    )
                })?;
                Some(leaf(op))
            }
            Operator::VariableIdentifierRead { identifier }
            | Operator::VariableIdentifierWrite { identifier } => {
                let op = self.take(|k| matches!(k, TokKind::Ident(name) if name == identifier))?;
                Some(leaf(op))
            }
            Operator::FunctionIdentifier { identifier } => self.function(identifier, kids),
            binary => self.binary(kids, &binary_token(binary)?),
        }
    }

    /// A root without tokens: empty, or the span of its one child.
    fn synthetic_root(&mut self, kids: &[Node]) -> Option<SpanTree> {
        match kids {
            [] => {
                let here = self.here();
                Some(SpanTree {
                    span: here.clone(),
                    op: here,
                    kids: Vec::new(),
                })
            }
            [kid] => {
                let kid = self.node(kid, false)?;
                Some(SpanTree {
                    span: kid.span.clone(),
                    op: kid.span.clone(),
                    kids: vec![kid],
                })
            }
            _ => None,
        }
    }

    /// `( kids )`, or `x()`, where evalexpr moves the value before `()`
    /// into them.
    fn root(&mut self, kids: &[Node]) -> Option<SpanTree> {
        let (pos, misplaced) = (self.pos, self.misplaced.len());
        if let Some(tree) = self.parens(kids) {
            return Some(tree);
        }
        self.pos = pos;
        self.misplaced.truncate(misplaced);
        let [kid] = kids else { return None };
        let kid = self.node(kid, false)?;
        self.take(|k| *k == TokKind::LParen)?;
        let close = self.take(|k| *k == TokKind::RParen)?;
        self.misplaced
            .push((kid.span.end..close.end, Oddity::ParensAfterValue));
        Some(SpanTree {
            span: kid.span.start..close.end,
            op: kid.span.start..close.end,
            kids: vec![kid],
        })
    }

    /// A tuple (`,`) or chain (`;`): the elements and their separators.
    fn separated(&mut self, kids: &[Node], sep: &TokKind) -> Option<SpanTree> {
        let mut mapped = Vec::new();
        let mut first_sep = None;
        for (i, kid) in kids.iter().enumerate() {
            if i > 0 {
                let at = self.take(|k| k == sep)?;
                first_sep.get_or_insert(at);
            }
            // Element roots are token-less; evalexpr can also put a bare
            // node there in malformed input.
            let synthetic = *kid.operator() == Operator::RootNode;
            mapped.push(self.node(kid, synthetic)?);
        }
        let start = mapped.first()?.span.start;
        let end = mapped.last()?.span.end;
        Some(SpanTree {
            span: start.min(end)..end.max(start),
            op: first_sep?,
            kids: mapped,
        })
    }

    /// `-x` or `!x`.
    fn prefix(&mut self, kids: &[Node], want: &TokKind) -> Option<SpanTree> {
        let op = self.take(|k| k == want)?;
        match kids {
            [kid] => {
                let kid = self.node(kid, false)?;
                Some(SpanTree {
                    span: op.start..kid.span.end,
                    op,
                    kids: vec![kid],
                })
            }
            // `!` at the end: evalexpr parses it without an operand.
            [] => Some(leaf(op)),
            _ => None,
        }
    }

    /// `name(args)`: the name, then its one argument node.
    fn function(&mut self, identifier: &str, kids: &[Node]) -> Option<SpanTree> {
        let op = self.take(|k| matches!(k, TokKind::Ident(name) if name == identifier))?;
        let kid = match kids {
            [kid] => self.node(kid, false)?,
            // `a "x"` after an operator: evalexpr makes `a` a function and
            // may leave its argument beside it.
            [] => return Some(leaf(op)),
            _ => return None,
        };
        Some(SpanTree {
            span: op.start..kid.span.end,
            op,
            kids: vec![kid],
        })
    }

    /// `left op right`, or the operator first (`>= a b`), which evalexpr
    /// also accepts.
    fn binary(&mut self, kids: &[Node], want: &TokKind) -> Option<SpanTree> {
        let (pos, misplaced) = (self.pos, self.misplaced.len());
        if let Some(tree) = self.in_order(kids, want) {
            return Some(tree);
        }
        self.pos = pos;
        self.misplaced.truncate(misplaced);
        let op = self.take(|k| k == want)?;
        let mut mapped = Vec::new();
        for kid in kids {
            mapped.push(self.node(kid, false)?);
        }
        if !mapped.is_empty() {
            self.misplaced.push((op.clone(), Oddity::OperatorFirst));
        }
        let end = mapped.last().map_or(op.end, |kid| kid.span.end);
        Some(SpanTree {
            span: op.start..end,
            op,
            kids: mapped,
        })
    }

    /// `( kids )`.
    fn parens(&mut self, kids: &[Node]) -> Option<SpanTree> {
        let open = self.take(|k| *k == TokKind::LParen)?;
        let mut mapped = Vec::new();
        for kid in kids {
            mapped.push(self.node(kid, false)?);
        }
        let close = self.take(|k| *k == TokKind::RParen)?;
        let span = open.start..close.end;
        Some(SpanTree {
            span: span.clone(),
            op: span,
            kids: mapped,
        })
    }

    /// `left op right`, or `left op` with the right operand missing.
    fn in_order(&mut self, kids: &[Node], want: &TokKind) -> Option<SpanTree> {
        let (left, right) = match kids {
            [left, right] => (left, Some(right)),
            [left] => (left, None),
            _ => return None,
        };
        let left = self.node(left, false)?;
        let op = self.take(|k| k == want)?;
        let mut mapped = vec![left];
        if let Some(right) = right {
            mapped.push(self.node(right, false)?);
        }
        let start = mapped[0].span.start;
        let end = mapped.last().map_or(op.end, |kid| kid.span.end.max(op.end));
        Some(SpanTree {
            span: start..end,
            op,
            kids: mapped,
        })
    }
}

fn leaf(op: Range<usize>) -> SpanTree {
    SpanTree {
        span: op.clone(),
        op,
        kids: Vec::new(),
    }
}

fn binary_token(op: &Operator) -> Option<TokKind> {
    use Operator as O;
    Some(match op {
        O::Add => TokKind::Plus,
        O::Sub => TokKind::Minus,
        O::Mul => TokKind::Star,
        O::Div => TokKind::Slash,
        O::Mod => TokKind::Percent,
        O::Exp => TokKind::Hat,
        O::Eq => TokKind::Eq,
        O::Neq => TokKind::Neq,
        O::Gt => TokKind::Gt,
        O::Lt => TokKind::Lt,
        O::Geq => TokKind::Geq,
        O::Leq => TokKind::Leq,
        O::And => TokKind::And,
        O::Or => TokKind::Or,
        O::Assign
        | O::AddAssign
        | O::SubAssign
        | O::MulAssign
        | O::DivAssign
        | O::ModAssign
        | O::ExpAssign
        | O::AndAssign
        | O::OrAssign => TokKind::Assign,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::when::lex::tokenize;

    fn mapped(text: &str) -> SpanTree {
        let tree = evalexpr::build_operator_tree::<evalexpr::DefaultNumericTypes>(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        let mapped = map(&tree, &tokenize(text), text.len());
        assert!(mapped.misplaced.is_empty());
        mapped.tree
    }

    fn show<'a>(text: &'a str, tree: &SpanTree, out: &mut Vec<&'a str>) {
        out.push(&text[tree.op.clone()]);
        for kid in &tree.kids {
            show(text, kid, out);
        }
    }

    #[test]
    fn maps_operators_names_and_parens() {
        let text = r#"(data.x + 2) * -3 >= 1.5 && str::contains(to, "a")"#;
        let tree = mapped(text);
        let mut ops = Vec::new();
        show(text, &tree, &mut ops);
        assert_eq!(
            ops,
            vec![
                text,
                "&&",
                ">=",
                "*",
                "(data.x + 2)",
                "+",
                "data.x",
                "2",
                "-",
                "3",
                "1.5",
                "str::contains",
                r#"(to, "a")"#,
                ",",
                "to",
                "to",
                r#""a""#,
                r#""a""#,
            ]
        );
        // The `&&`'s operands span their whole sub-expressions.
        let and = &tree.kids[0];
        assert_eq!(&text[and.kids[0].span.clone()], "(data.x + 2) * -3 >= 1.5");
        assert_eq!(&text[and.kids[1].span.clone()], r#"str::contains(to, "a")"#);
    }

    #[test]
    fn nested_parens_and_comments() {
        let text = "((a)) /* c */ == (b)";
        let tree = mapped(text);
        let eq = &tree.kids[0];
        assert_eq!(&text[eq.op.clone()], "==");
        assert_eq!(&text[eq.kids[0].span.clone()], "((a))");
        assert_eq!(&text[eq.kids[0].kids[0].kids[0].span.clone()], "a");
        assert_eq!(&text[eq.kids[1].span.clone()], "(b)");
    }

    fn has_incomplete(node: &Node) -> bool {
        let want = match node.operator() {
            Operator::Neg | Operator::Not | Operator::FunctionIdentifier { .. } => 1,
            Operator::RootNode
            | Operator::Tuple
            | Operator::Chain
            | Operator::Const { .. }
            | Operator::VariableIdentifierRead { .. }
            | Operator::VariableIdentifierWrite { .. } => node.children().len(),
            _ => 2,
        };
        node.children().len() != want || node.children().iter().any(has_incomplete)
    }

    /// Whenever evalexpr parses a text with no operand missing, the walk meets every token: the
    /// source-order assumption holds for every tree shape evalexpr builds.
    #[test]
    fn every_parsed_soup_maps_exactly() {
        const PIECES: &[&str] = &[
            "a", "data.x", "f", "len", "(", ")", "\"s\"", ",", "==", "!", "&&", "||", "+", "-",
            "*", "/", "^", "%", "<", ">=", "1", "2.5", "1e", "true", " ", "/*c*/",
        ];
        // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md).
        let fuzz = test_kit::fuzz::Fuzz::from_env(
            "when::spans::every_parsed_soup_maps_exactly",
            0x9E37_79B9,
        )
        .unwrap();
        let mut rng = test_kit::fuzz::Rng::new(fuzz.seed());
        let mut next = move || rng.next_u64();
        let mut parsed = 0;
        for _ in 0..fuzz.cases(50_000) {
            let len = 1 + (next() % 8) as usize;
            let text: String = (0..len)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect();
            let Ok(tree) = evalexpr::build_operator_tree::<evalexpr::DefaultNumericTypes>(&text)
            else {
                continue;
            };
            // With an operand missing, evalexpr may hang nodes anywhere;
            // such a text is an error (missing operand) whose span may fall
            // back to the whole text.
            if has_incomplete(&tree) {
                continue;
            }
            parsed += 1;
            assert!(
                try_map(&tree, &tokenize(&text)).is_some_and(|m| m.tree.span.end <= text.len()),
                "{text:?} parses as {tree:?} but does not map"
            );
        }
        assert!(parsed > fuzz.cases(5_000), "only {parsed} soups parsed");
    }
}
