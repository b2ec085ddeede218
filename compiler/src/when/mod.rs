//! The `when` language (docs/when-language.md): parsing with evalexpr, name
//! resolution, type checking, and lowering to `rulecore` bytecode.
//!
//! Contract with the rule validator: [`check`] takes the *decoded* expression
//! text (TOML quoting already removed) and reports problems as byte ranges
//! into that text; the validator maps them back to the rule file.
//! [`lower`] turns a checked expression into bytecode, interning constants
//! and `state()` pairs in a bundle-wide [`ConstPool`].
//!
//! The language is documented for rule authors in `docs/when-language.md`.

mod check;
pub(crate) mod lex;
mod lower;
pub mod reference;
mod spans;

use crate::diagnostic::Code;
pub(crate) use check::{FIELDS, FUNCTIONS};
pub use lower::{lower, ConstPool};
use rulecore::bundle::StatePair;
use rulecore::bytecode::{Builtin, EventField};
use rulecore::when_types::Operator;
use std::ops::Range;

/// One problem in a `when` expression; always an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhenProblem {
    /// Stable code, e.g. `rulec::when::unknown-name`.
    pub code: Code,
    /// One line: what is wrong.
    pub message: String,
    /// Byte range into the expression text.
    pub span: Range<usize>,
    /// The label shown at the span.
    pub label: String,
    /// How to fix it, where that is known.
    pub help: Option<String>,
    /// What to write over `span` instead, when the help is one edit ("did
    /// you mean").
    pub fix: Option<String>,
}

/// A `when` expression that parsed and type-checked to a boolean.
#[derive(Debug, Clone)]
pub struct CheckedWhen {
    /// Every `state("hash", "field")` pair the expression reads, in order of
    /// first appearance, without duplicates.
    pub state_pairs: Vec<StatePair>,
    /// The expression reads no event data and is `false`: the literal
    /// `false`, or `false && x`, `"a" == "b"`, ... (the rule never fires, a
    /// later step never runs).
    pub is_always_false: bool,
    /// Problems that do not reject the expression (warnings), such as
    /// `data.x == ""`, which a missing key never satisfies.
    pub warnings: Vec<WhenProblem>,
    /// The typed tree, what [`lower`] compiles.
    pub expr: Expr,
}

/// Static types: the one table of them, shared with the bundle verifier,
/// is `rulecore::when_types` (docs/when-language.md#types).
pub use rulecore::when_types::Ty;

/// A checked, typed expression node.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Ty,
    /// The node's bytes in the expression text.
    pub span: Range<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    Lit(Lit),
    Field(EventField),
    /// `data.a.b` as `["a", "b"]`.
    Data(Vec<String>),
    State(StatePair),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Call(Builtin, Vec<Expr>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Lit {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

impl UnOp {
    /// Its name in the table of types (`rulecore::when_types`).
    pub fn operator(self) -> Operator {
        match self {
            UnOp::Neg => Operator::Neg,
            UnOp::Not => Operator::Not,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    /// Its name in the table of types (`rulecore::when_types`).
    pub fn operator(self) -> Operator {
        match self {
            BinOp::Add => Operator::Add,
            BinOp::Sub => Operator::Sub,
            BinOp::Mul => Operator::Mul,
            BinOp::Div => Operator::Div,
            BinOp::Mod => Operator::Mod,
            BinOp::Pow => Operator::Pow,
            BinOp::Eq => Operator::Eq,
            BinOp::Ne => Operator::Ne,
            BinOp::Lt => Operator::Lt,
            BinOp::Le => Operator::Le,
            BinOp::Gt => Operator::Gt,
            BinOp::Ge => Operator::Ge,
            BinOp::And => Operator::And,
            BinOp::Or => Operator::Or,
        }
    }

    /// `==`, `!=` and the orderings.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }

    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Pow => "^",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }
}

/// The string literals inside `text[span]` (quotes included), as byte
/// ranges into `text`, in order: the arguments of a `state("hash",
/// "field")` call, whose node keeps only the whole call's span.
pub fn string_literals(text: &str, span: Range<usize>) -> Vec<Range<usize>> {
    let Some(part) = text.get(span.clone()) else {
        return Vec::new();
    };
    lex::tokenize(part)
        .into_iter()
        .filter(|tok| tok.kind == lex::TokKind::Str)
        .map(|tok| tok.span.start + span.start..tok.span.end + span.start)
        .collect()
}

/// Checks one expression. All problems found are returned, not just the first.
pub fn check(text: &str) -> Result<CheckedWhen, Vec<WhenProblem>> {
    check::check(text)
}

/// Checks an expression whose value is used as it is, of any type (a
/// profile's `data = { expr = '...' }`, docs/sources.md).
pub fn check_value(text: &str) -> Result<CheckedWhen, Vec<WhenProblem>> {
    check::check_as(text, false)
}
