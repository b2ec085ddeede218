//! Name resolution and type checking of a `when` expression (docs/when-language.md).
//!
//! evalexpr parses; this module walks its tree together with the spans from
//! [`super::spans`] and builds the typed [`Expr`]. A static type error is
//! reported only where the operation fails (or is constant) for *every*
//! input: a `data.*` value is `Any` and is checked at run time.
//!
//! Two passes live in their own files: `syntax` reports what the tokens
//! alone show (before evalexpr's parser, whose messages would mislead), and
//! `constant` evaluates the parts that read no event data, to catch those
//! that fail on every event. What stays here is the walk itself: names,
//! types and built-in calls, typed by `rulecore::when_types`, the table the
//! bundle verifier reads too; this module adds only its wording.

use super::lex::tokenize;
use super::spans::{self, Oddity, SpanTree};
use super::{BinOp, CheckedWhen, Expr, ExprKind, Lit, Ty, UnOp, WhenProblem};
use crate::diagnostic::Code;
use constant::{constant_context, constant_failures};
use evalexpr::{DefaultNumericTypes, Node, Operator, Value};
use rulecore::bundle::StatePair;
use rulecore::bytecode::{Builtin, EventField};
use rulecore::when_types::{self as types, Want};
use std::ops::{Range, RangeInclusive};
use syntax::{parse_problem, token_problems};

/// The functions `when` accepts, by their evalexpr name (the one table is
/// rulecore's, which the bundle verifier reads too).
pub use rulecore::when_types::FUNCTIONS;

/// evalexpr 13's other built-ins: known, but not supported by the VM.
const UNSUPPORTED_BUILTINS: &[&str] = &[
    "math::ln",
    "math::log",
    "math::log2",
    "math::log10",
    "math::exp",
    "math::exp2",
    "math::pow",
    "math::cos",
    "math::acos",
    "math::cosh",
    "math::acosh",
    "math::sin",
    "math::asin",
    "math::sinh",
    "math::asinh",
    "math::tan",
    "math::atan",
    "math::tanh",
    "math::atanh",
    "math::atan2",
    "math::sqrt",
    "math::cbrt",
    "math::hypot",
    "math::is_nan",
    "math::is_finite",
    "math::is_infinite",
    "math::is_normal",
    "typeof",
    "contains_any",
    "str::regex_matches",
    "str::regex_replace",
    "str::from",
    "str::substring",
    "random",
    "bitand",
    "bitor",
    "bitxor",
    "bitnot",
    "shl",
    "shr",
];

pub(crate) const FIELDS: &[(&str, EventField)] = &[
    ("topic", EventField::Topic),
    ("src", EventField::Src),
    ("from", EventField::From),
    ("to", EventField::To),
];

/// The parser, the checker and the lowering recurse over the tree; this
/// bounds their depth (and the bytecode length) far above any readable
/// condition, so no input can exhaust the stack.
pub const MAX_TOKENS: usize = 256;

/// Checks `text` in the order a reader would: its length, what the tokens
/// alone show, evalexpr's parse, the typed walk, the parts that fail on
/// every event, and last that the result is a boolean.
pub fn check(text: &str) -> Result<CheckedWhen, Vec<WhenProblem>> {
    check_as(text, true)
}

/// [`check`], with `boolean = false` for an expression whose value is
/// used as it is (a profile's `data = { expr = ... }`): any type is fine.
pub fn check_as(text: &str, boolean: bool) -> Result<CheckedWhen, Vec<WhenProblem>> {
    let toks = tokenize(text);
    if let Some(first_over) = toks.get(MAX_TOKENS) {
        return Err(vec![too_long(text, toks.len(), first_over.span.start)]);
    }
    let problems = token_problems(text, &toks);
    if !problems.is_empty() {
        return Err(problems);
    }
    let tree = evalexpr::build_operator_tree::<DefaultNumericTypes>(text)
        .map_err(|error| vec![parse_problem(text, &toks, &error)])?;
    let mapped = spans::map(&tree, &toks, text.len());
    if !mapped.misplaced.is_empty() {
        return Err(misplaced(text, mapped.misplaced));
    }
    let spans = mapped.tree;
    let mut checker = Checker {
        text,
        problems: Vec::new(),
        warnings: Vec::new(),
        state_pairs: Vec::new(),
    };
    let expr = checker.root(&tree, &spans);
    let mut problems = std::mem::take(&mut checker.problems);
    let context = constant_context();
    let constant = expr.is_some()
        && problems.is_empty()
        && constant_failures(text, &tree, &spans, &context, &mut problems);
    match expr {
        Some(expr) if problems.is_empty() => {
            if boolean && !matches!(expr.ty, Ty::Bool | Ty::Any) {
                return Err(vec![not_boolean(text, expr.ty)]);
            }
            Ok(CheckedWhen {
                state_pairs: checker.state_pairs,
                warnings: checker.warnings,
                // A constant that did not fail evaluates with evalexpr, the
                // authority, as it does in `constant_failures`.
                is_always_false: constant
                    && matches!(tree.eval_with_context(&context), Ok(Value::Boolean(false))),
                expr,
            })
        }
        // Every path that gives up reports why; this keeps the contract
        // ("an error has at least one problem") even if one ever does not.
        _ if problems.is_empty() => Err(vec![problem(
            Code::WhenSyntax,
            "cannot understand this expression".into(),
            whole_span(text),
            "incomplete expression".into(),
            None,
        )]),
        _ => Err(problems),
    }
}

/// More than [`MAX_TOKENS`] tokens. Points where the limit is crossed:
/// underlining a whole long expression would fill the screen and say less.
fn too_long(text: &str, tokens: usize, first_over: usize) -> WhenProblem {
    problem(
        Code::WhenTooLong,
        format!("the expression has {tokens} tokens; the limit is {MAX_TOKENS}"),
        first_over..whole_span(text).end,
        format!("token {} and after are over the limit", MAX_TOKENS + 1),
        Some("split the condition across steps or rules".into()),
    )
}

/// Operators and parentheses that evalexpr accepted in a place where they
/// mean nothing (`* 2`, `x(1)`).
fn misplaced(text: &str, misplaced: Vec<(Range<usize>, Oddity)>) -> Vec<WhenProblem> {
    misplaced
        .into_iter()
        .map(|(at, oddity)| {
            let written = text[at.clone()].to_string();
            match oddity {
                Oddity::OperatorFirst => problem(
                    Code::WhenSyntax,
                    format!("`{written}` has no left operand"),
                    at,
                    "nothing before this operator".into(),
                    Some(format!("write it between its operands: `a {written} b`")),
                ),
                Oddity::ParensAfterValue => problem(
                    Code::WhenSyntax,
                    "parentheses after a value".into(),
                    at,
                    "a value cannot be called".into(),
                    Some("only functions take arguments: `len(topic)`".into()),
                ),
            }
        })
        .collect()
}

/// The whole expression is of type `ty`, not a boolean.
fn not_boolean(text: &str, ty: Ty) -> WhenProblem {
    let help = match ty {
        Ty::Str => "compare it, for example `... == \"value\"`",
        Ty::Int | Ty::Float | Ty::Num => "compare it, for example `... > 0`",
        _ => "compare it, for example `... == \"value\"` or `... > 0`",
    };
    problem(
        Code::WhenNotBoolean,
        format!("`when` must be a boolean, but this is {}", ty.a()),
        whole_span(text),
        format!("this is {}", ty.a()),
        Some(help.into()),
    )
}

/// The expression without surrounding white space (falls back to all of it).
fn whole_span(text: &str) -> Range<usize> {
    let start = text.len() - text.trim_start().len();
    let end = text.trim_end().len();
    if start < end {
        start..end
    } else {
        0..text.len()
    }
}

/// What an unknown name most likely meant: a data key, a field or boolean
/// with a typo, `data.` misspelt, or a null that `when` does not have. The
/// help, and the name to write instead when it is a "did you mean".
fn unknown_name_help(name: &str) -> (String, Option<String>) {
    let misspelt_data = name
        .split_once('.')
        .and_then(|(head, rest)| closest(head, ["data"]).map(|_| format!("data.{rest}")));
    let help = if name == "data" {
        "name a key of the event's data: data.KEY".to_string()
    } else if ["null", "nil", "none", "undefined"].contains(&name.to_ascii_lowercase().as_str()) {
        // docs/when-language.md, "Data values": a missing key is empty.
        "`when` has no null: a missing data key reads as empty, which equals nothing \
         but another empty value; compare with a value the key should have"
            .to_string()
    } else if let Some(near) = closest(
        name,
        FIELDS.iter().map(|(n, _)| *n).chain(["true", "false"]),
    )
    .or_else(|| closest(&name.to_ascii_lowercase(), ["true", "false"]))
    {
        return (format!("did you mean `{near}`?"), Some(near.to_string()));
    } else if let Some(near) = misspelt_data {
        return (format!("did you mean `{near}`?"), Some(near));
    } else if name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        format!(
            "for a key of the event's data, write `data.{name}`; the other names are \
             topic, src, from, to and state(\"hash\", \"field\")"
        )
    } else {
        "the names are topic, src, from, to, data.KEY and state(\"hash\", \"field\")".into()
    };
    (help, None)
}

/// How many arguments a built-in takes (the table's count), that number
/// in words, and how a call looks.
fn arity(builtin: Builtin) -> (RangeInclusive<usize>, &'static str, &'static str) {
    let (min, max) = types::builtin_arity(builtin);
    let (words, usage) = match builtin {
        Builtin::Min | Builtin::Max => ("at least two arguments", "(a, b, ...)"),
        Builtin::If => ("three arguments", "(condition, then, else)"),
        Builtin::StartsWith => ("two arguments", "(text, prefix)"),
        Builtin::EndsWith => ("two arguments", "(text, suffix)"),
        Builtin::Contains => ("two arguments", "(text, part)"),
        Builtin::Len | Builtin::ToLowercase | Builtin::ToUppercase | Builtin::Trim => {
            ("one argument", "(text)")
        }
        Builtin::Floor | Builtin::Ceil | Builtin::Round | Builtin::Abs => {
            ("one argument", "(number)")
        }
        Builtin::Int | Builtin::Float | Builtin::Str => ("one argument", "(value)"),
        // Written `contains((a, b, ...), value)`: `tuple_contains` checks it.
        Builtin::TupleContains => ("two arguments", "((a, b, ...), value)"),
    };
    (usize::from(min)..=usize::from(max), words, usage)
}

/// The binary operators `when` supports.
fn bin_op(op: &Operator) -> Option<BinOp> {
    Some(match op {
        Operator::Add => BinOp::Add,
        Operator::Sub => BinOp::Sub,
        Operator::Mul => BinOp::Mul,
        Operator::Div => BinOp::Div,
        Operator::Mod => BinOp::Mod,
        Operator::Exp => BinOp::Pow,
        Operator::Eq => BinOp::Eq,
        Operator::Neq => BinOp::Ne,
        Operator::Lt => BinOp::Lt,
        Operator::Leq => BinOp::Le,
        Operator::Gt => BinOp::Gt,
        Operator::Geq => BinOp::Ge,
        Operator::And => BinOp::And,
        Operator::Or => BinOp::Or,
        _ => return None,
    })
}

fn problem(
    code: Code,
    message: String,
    span: Range<usize>,
    label: String,
    help: Option<String>,
) -> WhenProblem {
    WhenProblem {
        code,
        message,
        span,
        label,
        help,
        fix: None,
    }
}

/// A name within one edit of `name` (two for longer names), for "did you
/// mean".
fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = if name.chars().count() <= 3 { 1 } else { 2 };
    rulecore::suggest::closest_within(name, candidates, limit)
}

fn is_literal(expr: &Expr) -> bool {
    match &expr.kind {
        ExprKind::Lit(_) => true,
        ExprKind::Unary(UnOp::Neg, inner) => matches!(inner.kind, ExprKind::Lit(_)),
        _ => false,
    }
}

/// The word around `span` when it is joined to its neighbours by `-` with
/// no space (`stand-by`, `ready-to-drive`), which evalexpr reads as a
/// subtraction of names.
fn hyphenated_word(text: &str, span: &Range<usize>) -> Option<Range<usize>> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let start = text[..span.start]
        .char_indices()
        .rev()
        .take_while(|(_, c)| is_word(*c))
        .last()
        .map_or(span.start, |(at, _)| at);
    let end = text[span.end..]
        .char_indices()
        .take_while(|(_, c)| is_word(*c))
        .last()
        .map_or(span.end, |(at, c)| span.end + at + c.len_utf8());
    // Trim stray minus signs at either end (`-x`, `x-`).
    let around = &text[start..end];
    let word = around.trim_matches('-');
    let start = start + (around.len() - around.trim_start_matches('-').len());
    // Every part a word, not a number: `speed-1` is a real subtraction.
    let words = word
        .split('-')
        .all(|part| part.chars().next().is_some_and(|c| !c.is_ascii_digit()));
    let range = start..start + word.len();
    (range != *span && word.contains('-') && words).then_some(range)
}

/// Skips token-less and parenthesis roots that hold exactly one node.
fn unwrap_roots<'n, 's>(mut node: &'n Node, mut spans: &'s SpanTree) -> (&'n Node, &'s SpanTree) {
    while *node.operator() == Operator::RootNode {
        match (node.children(), spans.kids.first()) {
            ([kid], Some(kid_spans)) => {
                node = kid;
                spans = kid_spans;
            }
            _ => break,
        }
    }
    (node, spans)
}

struct Checker<'t> {
    /// The expression text, to see what surrounds a name.
    text: &'t str,
    problems: Vec<WhenProblem>,
    warnings: Vec<WhenProblem>,
    state_pairs: Vec<StatePair>,
}

impl Checker<'_> {
    fn report(
        &mut self,
        code: Code,
        message: String,
        span: Range<usize>,
        label: String,
        help: Option<String>,
    ) {
        self.problems
            .push(problem(code, message, span, label, help));
    }

    /// Gives the problem just reported the edit its "did you mean" names.
    fn fix_last(&mut self, fix: Option<String>) {
        if let Some(problem) = self.problems.last_mut() {
            problem.fix = fix;
        }
    }

    /// The top of the tree: an empty expression, or its one node.
    fn root(&mut self, tree: &Node, spans: &SpanTree) -> Option<Expr> {
        if !tree.children().is_empty() {
            return self.node(tree, spans);
        }
        self.report(
            Code::WhenEmpty,
            "the expression is empty".into(),
            0..self.text.len(),
            "nothing to evaluate".into(),
            Some("remove `when` to run every time, or write a condition".into()),
        );
        None
    }

    /// Checks every child even after a failure, so that all problems are
    /// reported at once.
    fn kids(&mut self, node: &Node, spans: &SpanTree) -> Option<Vec<Expr>> {
        let checked: Vec<Option<Expr>> = node
            .children()
            .iter()
            .zip(&spans.kids)
            .map(|(kid, span)| self.node(kid, span))
            .collect();
        checked.into_iter().collect()
    }

    /// One node of evalexpr's tree: a literal, a name, a call or an
    /// operator; tuples, chains and assignments are refused.
    fn node(&mut self, node: &Node, spans: &SpanTree) -> Option<Expr> {
        let span = spans.span.clone();
        let op_span = spans.op.clone();
        match node.operator() {
            Operator::RootNode => self.parenthesized(node, spans),
            Operator::Const { value } => self.literal(value, span),
            Operator::VariableIdentifierRead { identifier } => self.name(identifier, span),
            Operator::FunctionIdentifier { identifier } => {
                let (Some(arg), Some(arg_spans)) = (node.children().first(), spans.kids.first())
                else {
                    self.missing_operator_after(identifier, op_span);
                    return None;
                };
                self.call(identifier, arg, arg_spans, op_span, span)
            }
            Operator::Tuple => {
                // The elements' own problems are reported too; the tuple is
                // an error whatever they are.
                let _ = self.kids(node, spans);
                self.report(
                    Code::WhenTuple,
                    "tuples are only allowed as function arguments".into(),
                    span,
                    "a tuple".into(),
                    Some("a `,` separates function arguments, as in `min(a, b)`".into()),
                );
                None
            }
            Operator::Chain => {
                self.report(
                    Code::WhenChain,
                    "`;` chains are not allowed in `when`".into(),
                    op_span,
                    "expression chain".into(),
                    None,
                );
                None
            }
            Operator::VariableIdentifierWrite { .. }
            | Operator::Assign
            | Operator::AddAssign
            | Operator::SubAssign
            | Operator::MulAssign
            | Operator::DivAssign
            | Operator::ModAssign
            | Operator::ExpAssign
            | Operator::AndAssign
            | Operator::OrAssign => {
                self.report(
                    Code::WhenAssignment,
                    "assignment is not allowed in `when`".into(),
                    op_span,
                    "assignment".into(),
                    Some("to compare, write `==`".into()),
                );
                None
            }
            Operator::Neg | Operator::Not => self.unary(node, spans),
            binary => self.binary_node(node, spans, binary),
        }
    }

    /// `( ... )`: the one expression inside.
    fn parenthesized(&mut self, node: &Node, spans: &SpanTree) -> Option<Expr> {
        if let ([kid], Some(kid_spans)) = (node.children(), spans.kids.first()) {
            return self.node(kid, kid_spans);
        }
        self.report(
            Code::WhenSyntax,
            "empty parentheses".into(),
            spans.span.clone(),
            "nothing inside".into(),
            None,
        );
        None
    }

    /// A string, int, float or boolean literal.
    fn literal(&mut self, value: &Value, span: Range<usize>) -> Option<Expr> {
        let (lit, ty) = match value {
            Value::String(s) => (Lit::Str(s.clone()), Ty::Str),
            Value::Int(i) => (Lit::Int(*i), Ty::Int),
            Value::Float(f) => (Lit::Float(*f), Ty::Float),
            Value::Boolean(b) => (Lit::Bool(*b), Ty::Bool),
            Value::Tuple(_) | Value::Empty => {
                self.report(
                    Code::WhenSyntax,
                    "unexpected value".into(),
                    span,
                    "not a literal `when` supports".into(),
                    None,
                );
                return None;
            }
        };
        Some(Expr {
            kind: ExprKind::Lit(lit),
            ty,
            span,
        })
    }

    /// `-x` (a number) and `!x` (a boolean).
    fn unary(&mut self, node: &Node, spans: &SpanTree) -> Option<Expr> {
        if node.children().len() != 1 {
            return self.missing_operand(node.operator(), spans.op.clone());
        }
        let mut kids = self.kids(node, spans)?;
        let inner = kids.pop()?;
        let (op, sym, wanted) = if *node.operator() == Operator::Neg {
            (UnOp::Neg, "-", "a number")
        } else {
            (UnOp::Not, "!", "a boolean")
        };
        let operator = op.operator();
        if types::operand(operator).is_some_and(|want| !want.admits(inner.ty)) {
            self.operand_error(sym, wanted, &inner);
            return None;
        }
        let ty = types::unary_result(operator, inner.ty);
        Some(Expr {
            kind: ExprKind::Unary(op, Box::new(inner)),
            ty,
            span: spans.span.clone(),
        })
    }

    /// A binary operator node: both operands, then the operator's types.
    /// When an operand failed, a comparison may add help about quotes or
    /// `!`'s precedence.
    fn binary_node(&mut self, node: &Node, spans: &SpanTree, binary: &Operator) -> Option<Expr> {
        let op_span = spans.op.clone();
        let Some(op) = bin_op(binary) else {
            self.report(
                Code::WhenSyntax,
                format!("unsupported operator `{binary}`"),
                op_span,
                "not supported".into(),
                None,
            );
            return None;
        };
        if node.children().len() != 2 {
            return self.missing_operand(binary, op_span);
        }
        let kids = self.kids(node, spans);
        if kids.is_none() && matches!(op, BinOp::Eq | BinOp::Ne) {
            self.suggest_quotes(node, spans);
        }
        if kids.is_none() && op.is_comparison() {
            self.explain_not_precedence(node, spans, op);
        }
        let mut kids = kids?;
        let right = kids.pop()?;
        let left = kids.pop()?;
        let span = spans.span.clone();
        let ty = self.binary(op, &left, &right, op_span, span.clone())?;
        Some(Expr {
            kind: ExprKind::Binary(op, Box::new(left), Box::new(right)),
            ty,
            span,
        })
    }

    /// `to == parked`: an unknown bare word compared with a string was most
    /// likely meant as text, so the help for it says to quote it first.
    fn suggest_quotes(&mut self, node: &Node, spans: &SpanTree) {
        let sides: Vec<(&Node, &SpanTree)> = node
            .children()
            .iter()
            .zip(&spans.kids)
            .map(|(kid, kid_spans)| unwrap_roots(kid, kid_spans))
            .collect();
        let is_string = |side: &Node| match side.operator() {
            Operator::Const {
                value: Value::String(_),
            } => true,
            Operator::VariableIdentifierRead { identifier } => {
                FIELDS.iter().any(|(n, _)| n == identifier)
            }
            Operator::FunctionIdentifier { identifier } => identifier == "state",
            _ => false,
        };
        for (i, (side, side_spans)) in sides.iter().enumerate() {
            let other = if i == 0 { 1 } else { 0 };
            if sides.get(other).is_some_and(|(other, _)| is_string(other)) {
                self.quote_hint(side, side_spans, "compare with");
            }
        }
    }

    /// Rewrites the help of an unknown bare word where text is expected:
    /// quotes first, then the `data.` form.
    fn quote_hint(&mut self, side: &Node, side_spans: &SpanTree, use_: &str) {
        let Operator::VariableIdentifierRead { identifier: word } = side.operator() else {
            return;
        };
        let data_help = format!("for a key of the event's data, write `data.{word}`");
        for problem in &mut self.problems {
            let is_this = problem.code == Code::WhenUnknownName
                && problem.span == side_spans.span
                && problem
                    .help
                    .as_deref()
                    .is_some_and(|help| help.starts_with(&data_help));
            if is_this {
                problem.help = Some(format!(
                    "to {use_} the text `{word}`, put it in double quotes: \"{word}\"; \
                     {data_help}"
                ));
            }
        }
    }

    /// `!to == "x"` is `(!to) == "x"`: when `!` on the left of a comparison
    /// got a non-boolean, the help shows the parenthesised form.
    fn explain_not_precedence(&mut self, node: &Node, spans: &SpanTree, op: BinOp) {
        let (Some(left), Some(left_spans)) = (node.children().first(), spans.kids.first()) else {
            return;
        };
        let (left, left_spans) = unwrap_roots(left, left_spans);
        if *left.operator() != Operator::Not {
            return;
        }
        let Some(inner) = left_spans.kids.first() else {
            return;
        };
        let Some(written) = self.text.get(spans.span.clone()) else {
            return;
        };
        let Some(negated) = written.trim_start().strip_prefix('!') else {
            return;
        };
        let alternative = if op == BinOp::Eq { ", or use `!=`" } else { "" };
        let help = format!(
            "`!` applies only to what follows it directly: this is `(!{}) {} ...`; \
             write `!({})`{alternative}",
            self.text.get(inner.span.clone()).unwrap_or_default(),
            op.symbol(),
            negated.trim_start(),
        );
        for problem in &mut self.problems {
            if problem.code == Code::WhenTypeMismatch && problem.span == inner.span {
                problem.help = Some(help.clone());
            }
        }
    }

    /// evalexpr reads a name followed by a value (`to "x"`) as a call.
    fn missing_operator_after(&mut self, name: &str, name_span: Range<usize>) {
        self.report(
            Code::WhenSyntax,
            format!("missing operator after `{name}`"),
            name_span,
            "a value follows this name with no operator between".into(),
            Some("put an operator between them, e.g. `to == \"parked\"`".into()),
        );
    }

    fn missing_operand(&mut self, op: &Operator, op_span: Range<usize>) -> Option<Expr> {
        self.report(
            Code::WhenSyntax,
            format!("`{op}` is missing an operand"),
            op_span,
            "operand missing".into(),
            Some(if matches!(op, Operator::Neg | Operator::Not) {
                format!("write a value after `{op}`, or remove it")
            } else {
                format!("write a value on each side of `{op}`, or remove it")
            }),
        );
        None
    }

    fn operand_error(&mut self, op: &str, wanted: &str, operand: &Expr) {
        self.report(
            Code::WhenTypeMismatch,
            format!("`{op}` needs {wanted}, but this is {}", operand.ty.a()),
            operand.span.clone(),
            format!("this is {}", operand.ty.a()),
            None,
        );
    }

    /// `+` and the orderings take two strings or two numbers: a boolean
    /// side, or a string against a known number, fails for every input
    /// (reported with `mismatch`). `false` when a problem was reported.
    fn strings_or_numbers(
        &mut self,
        op: BinOp,
        mismatch: String,
        left: &Expr,
        right: &Expr,
        op_span: Range<usize>,
    ) -> bool {
        let sym = op.symbol();
        let admitted = |side: &&Expr| Want::NumberOrStr.admits(side.ty);
        if let Some(side) = [left, right].into_iter().find(|side| !admitted(side)) {
            self.operand_error(sym, "numbers or strings", side);
            return false;
        }
        let (a, b) = (left.ty, right.ty);
        if types::mixes_string_and_number(op.operator(), a, b) {
            let side = if a == Ty::Str { left } else { right };
            let text = self.text.get(side.span.clone()).unwrap_or("x").trim();
            // A number written as a string (`int(to) < "20"`): the fix is
            // the number itself, not a conversion of the constant.
            let quoted_number = match &side.kind {
                ExprKind::Lit(Lit::Str(value)) if value.trim().parse::<f64>().is_ok() => {
                    Some(value.trim())
                }
                _ => None,
            };
            let help = if let (Some(number), false) = (quoted_number, sym == "+") {
                format!(
                    "evalexpr never converts by itself: write the number itself, `{number}`, \
                     instead of the string {text}"
                )
            } else if sym == "+" {
                format!(
                    "evalexpr never converts by itself: write `int({text})` to add as \
                     numbers, or `str(...)` around the number to join as text"
                )
            } else {
                format!(
                    "evalexpr never converts by itself: write `int({text})` (or \
                     `float({text})` for a decimal) to compare as numbers"
                )
            };
            self.report(
                Code::WhenTypeMismatch,
                mismatch,
                op_span,
                "string and number".into(),
                Some(help),
            );
            return false;
        }
        true
    }

    /// The type of `left op right`, or a problem when it fails for every input.
    fn binary(
        &mut self,
        op: BinOp,
        left: &Expr,
        right: &Expr,
        op_span: Range<usize>,
        span: Range<usize>,
    ) -> Option<Ty> {
        let (a, b) = (left.ty, right.ty);
        let sym = op.symbol();
        let result = types::binary_result(op.operator(), a, b);
        match op {
            BinOp::Add => {
                let mismatch = format!("`+` cannot add {} and {}", a.a(), b.a());
                self.strings_or_numbers(op, mismatch, left, right, op_span)
                    .then_some(result)
            }
            BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod | BinOp::Pow => self
                .each_operand(op, "numbers", [left, right])
                .then_some(result),
            BinOp::Eq | BinOp::Ne => {
                if is_literal(left) && is_literal(right) && a != b {
                    self.report(
                        Code::WhenLiteralComparison,
                        format!("`{sym}` compares {} literal with {} literal", a.a(), b.a()),
                        span,
                        "values of different types are never equal".into(),
                        Some(if a != Ty::Str && b != Ty::Str {
                            "evalexpr does not convert: `1 == 1.0` is false".to_string()
                        } else {
                            "evalexpr never converts between strings and numbers: write both \
                             sides as strings or both as numbers"
                                .to_string()
                        }),
                    );
                    return None;
                }
                if !types::may_equal(a, b) {
                    let help = if a.is_known_number() && b.is_known_number() {
                        "evalexpr compares ints and floats as different values (`1 == 1.0` is \
                         false); floor, ceil, round and ^ return floats"
                    } else {
                        "evalexpr never converts between types, so this is constant"
                    };
                    self.report(
                        Code::WhenTypeMismatch,
                        format!(
                            "`{sym}` compares {} with {}: the result never changes",
                            a.a(),
                            b.a()
                        ),
                        op_span,
                        format!("{} {sym} {}", a.name(), b.name()),
                        Some(help.into()),
                    );
                    return None;
                }
                self.empty_string_data(op, left, right, span);
                Some(result)
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let mismatch = format!("`{sym}` cannot order {} against {}", a.a(), b.a());
                self.strings_or_numbers(op, mismatch, left, right, op_span)
                    .then_some(result)
            }
            BinOp::And | BinOp::Or => self
                .each_operand(op, "booleans", [left, right])
                .then_some(result),
        }
    }

    /// Reports every operand of `op` that cannot be what the table says it
    /// must be (`wanted`, in words); `true` when none was reported.
    fn each_operand(&mut self, op: BinOp, wanted: &str, sides: [&Expr; 2]) -> bool {
        let Some(want) = types::operand(op.operator()) else {
            return true;
        };
        let mut ok = true;
        for side in sides {
            if !want.admits(side.ty) {
                self.operand_error(op.symbol(), wanted, side);
                ok = false;
            }
        }
        ok
    }

    /// `data.x == ""` reads as "x is missing or empty", but a missing key
    /// is *empty*, which equals only another empty value (docs/
    /// when-language.md, "Data values"): the comparison is false for a
    /// missing key, and `!=` true. Legal, and a warning.
    fn empty_string_data(&mut self, op: BinOp, left: &Expr, right: &Expr, span: Range<usize>) {
        let empty = Lit::Str(String::new());
        let path = match (&left.kind, &right.kind) {
            (ExprKind::Data(path), ExprKind::Lit(lit))
            | (ExprKind::Lit(lit), ExprKind::Data(path))
                if *lit == empty =>
            {
                path.join(".")
            }
            _ => return,
        };
        let is = if op == BinOp::Eq { "false" } else { "true" };
        self.warnings.push(WhenProblem {
            code: Code::WhenEmptyStringData,
            message: format!(
                "`{}` is {is} when the event has no `{path}`: a missing key is empty, not `\"\"`",
                self.text.get(span.clone()).unwrap_or("").trim()
            ),
            span,
            label: format!("{is} for a missing key"),
            help: Some(
                "a missing key equals only another missing key, and `when` has no test for \
                 one: write the condition on the values the key has when present \
                 (`data.state == \"on\"` is false while it is missing)"
                    .into(),
            ),
            fix: None,
        });
    }

    /// A name: an event field, a `data.*` path, or an unknown name with
    /// help for what was most likely meant.
    fn name(&mut self, name: &str, span: Range<usize>) -> Option<Expr> {
        if let Some((_, field)) = FIELDS.iter().find(|(n, _)| *n == name) {
            return Some(Expr {
                kind: ExprKind::Field(*field),
                ty: Ty::Str,
                span,
            });
        }
        if let Some(path) = name.strip_prefix("data.") {
            return self.data_path(name, path, span);
        }
        let is_function = name == "state"
            || FUNCTIONS.iter().any(|(n, _)| *n == name)
            || UNSUPPORTED_BUILTINS.contains(&name);
        if is_function {
            self.report(
                Code::WhenUnknownName,
                format!("`{name}` is a function, not a value"),
                span,
                "needs arguments".into(),
                Some(if name == "state" {
                    "call it: state(\"hash\", \"field\")".into()
                } else {
                    format!("call it: {name}(...)")
                }),
            );
            return None;
        }
        if let Some(word) = hyphenated_word(self.text, &span) {
            self.hyphenated(name, word);
            return None;
        }
        let (help, fix) = unknown_name_help(name);
        self.report(
            Code::WhenUnknownName,
            format!("unknown name `{name}`"),
            span,
            "not a name `when` knows".into(),
            Some(help),
        );
        self.fix_last(fix);
        None
    }

    /// `data.KEY.SUB`: no key may be empty.
    fn data_path(&mut self, name: &str, path: &str, span: Range<usize>) -> Option<Expr> {
        let keys: Vec<String> = path.split('.').map(str::to_string).collect();
        if keys.iter().any(String::is_empty) {
            self.report(
                Code::WhenUnknownName,
                format!("`{name}` is not a valid data path"),
                span,
                "empty key in the path".into(),
                Some("write data.KEY or data.KEY.SUB".into()),
            );
            return None;
        }
        Some(Expr {
            kind: ExprKind::Data(keys),
            ty: Ty::Any,
            span,
        })
    }

    /// `stand-by` is `stand - by` to evalexpr: one problem for the whole
    /// word, however many unknown names it splits into.
    fn hyphenated(&mut self, name: &str, word: Range<usize>) {
        let reported = self.problems.iter().any(|p| {
            p.code == Code::WhenUnknownName && p.span.start >= word.start && p.span.end <= word.end
        });
        if reported {
            return;
        }
        let written = &self.text[word.clone()];
        let in_path = self.text[..word.start].ends_with('.');
        let help = if in_path {
            "evalexpr reads `-` as minus, so this is a subtraction; a data key \
             with `-` in it cannot be read in `when`"
                .to_string()
        } else {
            format!(
                "evalexpr reads `-` as minus, so `{written}` is a subtraction; for the \
                 text, write \"{written}\""
            )
        };
        let label = format!("read as `{}`", written.replace('-', " - "));
        self.report(
            Code::WhenUnknownName,
            format!("unknown name `{name}` in `{written}`"),
            word,
            label,
            Some(help),
        );
    }

    /// A call of a function `when` does not have, or of an evalexpr
    /// built-in it does not support. The arguments are still checked for
    /// their own problems; their types are moot once the call is unknown.
    fn unknown_function(
        &mut self,
        name: &str,
        name_span: Range<usize>,
        raw_args: &[(&Node, &SpanTree)],
    ) {
        let supported = || {
            let mut names: Vec<&str> = FUNCTIONS.iter().map(|(n, _)| *n).collect();
            names.push("state");
            names
        };
        if UNSUPPORTED_BUILTINS.contains(&name) {
            self.report(
                Code::WhenUnsupportedFunction,
                format!("`{name}` is an evalexpr built-in that `when` does not support"),
                name_span,
                "not supported".into(),
                Some(format!(
                    "the supported functions are {}",
                    supported().join(", ")
                )),
            );
        } else {
            let near = closest(name, supported());
            let help = near
                .map(|near| format!("did you mean `{near}`?"))
                .unwrap_or_else(|| {
                    format!("the supported functions are {}", supported().join(", "))
                });
            self.report(
                Code::WhenUnknownFunction,
                format!("unknown function `{name}`"),
                name_span,
                "not a function `when` knows".into(),
                Some(help),
            );
            self.fix_last(near.map(str::to_string));
        }
        for (node, spans) in raw_args {
            let _ = self.node(node, spans);
        }
    }

    /// Splits a function's argument node into the argument list: `f(a, b)` is
    /// a parenthesis root holding a tuple, whose elements are roots again.
    fn arguments<'n, 's>(arg: &'n Node, spans: &'s SpanTree) -> Vec<(&'n Node, &'s SpanTree)> {
        let (mut node, mut span) = (arg, spans);
        while *node.operator() == Operator::RootNode {
            match (node.children(), span.kids.first()) {
                ([kid], Some(kid_span)) => {
                    node = kid;
                    span = kid_span;
                }
                ([], _) => return Vec::new(),
                _ => break,
            }
        }
        if *node.operator() == Operator::Tuple {
            node.children()
                .iter()
                .zip(&span.kids)
                .map(|(kid, kid_span)| unwrap_roots(kid, kid_span))
                .collect()
        } else {
            vec![(node, span)]
        }
    }

    fn call(
        &mut self,
        name: &str,
        arg: &Node,
        arg_spans: &SpanTree,
        name_span: Range<usize>,
        span: Range<usize>,
    ) -> Option<Expr> {
        let is_value_name = FIELDS.iter().any(|(n, _)| *n == name)
            || name.starts_with("data.")
            || name == "true"
            || name == "false";
        if is_value_name {
            self.missing_operator_after(name, name_span);
            return None;
        }
        let raw_args = Self::arguments(arg, arg_spans);
        if name == "state" {
            return self.state(&raw_args, span);
        }
        let Some(&(_, builtin)) = FUNCTIONS.iter().find(|(n, _)| *n == name) else {
            self.unknown_function(name, name_span, &raw_args);
            return None;
        };
        if builtin == Builtin::TupleContains {
            return self.tuple_contains(&raw_args, span);
        }
        let checked: Vec<Option<Expr>> = raw_args
            .iter()
            .map(|(node, spans)| self.node(node, spans))
            .collect();
        if matches!(
            builtin,
            Builtin::StartsWith | Builtin::EndsWith | Builtin::Contains
        ) {
            // `str::contains(topic, alarm)`: both arguments are text.
            for (arg, arg_spans) in &raw_args {
                self.quote_hint(arg, arg_spans, "use");
            }
        }
        let args: Vec<Expr> = checked.into_iter().collect::<Option<_>>()?;
        let (arity, arity_text, usage) = arity(builtin);
        if !arity.contains(&args.len()) {
            self.report(
                Code::WhenArguments,
                format!("`{name}` takes {arity_text}, but is given {}", args.len()),
                span,
                "wrong number of arguments".into(),
                Some(format!("write {name}{usage}")),
            );
            return None;
        }
        let ty = self.call_type(name, builtin, &args)?;
        Some(Expr {
            kind: ExprKind::Call(builtin, args),
            ty,
            span,
        })
    }

    /// The type of a call, by the table: every argument that cannot be
    /// what the built-in takes is reported.
    fn call_type(&mut self, name: &str, builtin: Builtin, args: &[Expr]) -> Option<Ty> {
        let wanted = match builtin {
            Builtin::Len | Builtin::ToLowercase | Builtin::ToUppercase | Builtin::Trim => {
                "a string"
            }
            Builtin::StartsWith | Builtin::EndsWith | Builtin::Contains => "strings",
            Builtin::Min | Builtin::Max => "numbers",
            Builtin::Int | Builtin::Float => "a number or a string",
            Builtin::If => "a boolean condition",
            _ => "a number",
        };
        let mut good = true;
        for (index, arg) in args.iter().enumerate() {
            if types::argument(builtin, index).is_some_and(|want| !want.admits(arg.ty)) {
                self.operand_error(name, wanted, arg);
                good = false;
            }
        }
        let tys: Vec<Ty> = args.iter().map(|arg| arg.ty).collect();
        good.then(|| types::call_result(builtin, &tys))
    }

    /// `contains((a, b, ...), value)`: the first argument must be a tuple
    /// written in place (docs/when-language.md#membership), its elements
    /// and the value scalars.
    fn tuple_contains(&mut self, args: &[(&Node, &SpanTree)], span: Range<usize>) -> Option<Expr> {
        let usage = "write contains((\"parked\", \"stand-by\"), to)";
        let [(tuple, tuple_spans), (value, value_spans)] = args else {
            self.report(
                Code::WhenArguments,
                format!(
                    "`contains` takes two arguments, but is given {}",
                    args.len()
                ),
                span,
                "wrong number of arguments".into(),
                Some(usage.into()),
            );
            return None;
        };
        if *tuple.operator() != Operator::Tuple {
            let _ = self.node(tuple, tuple_spans);
            let _ = self.node(value, value_spans);
            self.report(
                Code::WhenArguments,
                "the first argument of `contains` must be a tuple of values".into(),
                tuple_spans.span.clone(),
                "not a tuple".into(),
                Some(format!("{usage}; for a single value, compare with `==`")),
            );
            return None;
        }
        let elements = self.kids(tuple, tuple_spans);
        let value = self.node(value, value_spans);
        let mut args = elements?;
        let value = value?;
        args.push(value);
        Some(Expr {
            kind: ExprKind::Call(Builtin::TupleContains, args),
            ty: Ty::Bool,
            span,
        })
    }

    fn state(&mut self, args: &[(&Node, &SpanTree)], span: Range<usize>) -> Option<Expr> {
        let help = Some("write state(\"hash\", \"field\") with two string literals".to_string());
        if args.len() != 2 {
            self.report(
                Code::WhenArguments,
                format!("`state` takes two arguments, but is given {}", args.len()),
                span,
                "wrong number of arguments".into(),
                help,
            );
            return None;
        }
        let mut strings = Vec::new();
        for (node, spans) in args {
            match node.operator() {
                Operator::Const {
                    value: Value::String(s),
                } => strings.push(s.clone()),
                _ => {
                    self.report(
                        Code::WhenArguments,
                        "`state` arguments must be string literals".into(),
                        spans.span.clone(),
                        "not a string literal".into(),
                        help.clone(),
                    );
                }
            }
        }
        let [hash, field] = <[String; 2]>::try_from(strings).ok()?;
        if hash.starts_with("ev:") {
            // docs/service.md#subscriptions: a hash's change notifications
            // arrive on the channel named after it, where these events are.
            self.report(
                Code::WhenStateChannel,
                format!("the state hash `{hash}` is named like an event channel"),
                args[0].1.span.clone(),
                "an event channel, not a state hash".into(),
                Some(
                    "`ruled` subscribes to a state hash's name for its change notifications, \
                     and events arrive on `ev:<topic>`: that channel's events would be taken \
                     for state notifications; name the hash without `ev:`"
                        .into(),
                ),
            );
            return None;
        }
        let pair = StatePair { hash, field };
        if !self.state_pairs.contains(&pair) {
            self.state_pairs.push(pair.clone());
        }
        Some(Expr {
            kind: ExprKind::State(pair),
            ty: Ty::Str,
            span,
        })
    }
}

mod constant;
mod syntax;

#[cfg(test)]
mod tests;
