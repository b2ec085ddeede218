//! The `when` bytecode (docs/when-language.md, docs/bundle.md): the contract between the compiler's
//! lowering (`rulec`) and the VM (`rulecore::vm`).
//!
//! A program is a flat list of ops over a value stack. There are no loops:
//! jumps only go forward, so evaluation cost is bounded by the program length.
//! Constants live in the bundle's constant pool and are referenced by index;
//! the fingerprint of a step resolves those indices to the constants
//! themselves so it does not depend on where other rules put theirs.

use crate::when_types::Operator;
use serde::{Deserialize, Serialize};

/// One compiled `when` expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Program {
    pub ops: Vec<Op>,
}

/// An entry of the bundle's constant pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Const {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A `data.a.b` path, split at the dots: `["a", "b"]`.
    Path(Vec<String>),
}

/// The event fields a `when` can name directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventField {
    Topic,
    Src,
    From,
    To,
}

/// Functions a `when` may call. The compiler accepts exactly these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Builtin {
    /// `len(string)` -> int (bytes, as evalexpr counts them)
    Len,
    /// `str::to_lowercase(s)`
    ToLowercase,
    /// `str::to_uppercase(s)`
    ToUppercase,
    /// `str::trim(s)`
    Trim,
    /// `min(a, b, ...)` over numbers
    Min,
    /// `max(a, b, ...)` over numbers
    Max,
    /// `if(cond, then, else)`: evaluates all three arguments, as evalexpr does
    If,
    /// `floor(x)`, `ceil(x)`, `round(x)`: float -> float, as evalexpr
    Floor,
    Ceil,
    Round,
    /// `math::abs(x)`
    Abs,
    /// `str::starts_with(a, b)` (ours; not an evalexpr built-in)
    StartsWith,
    /// `str::ends_with(a, b)` (ours)
    EndsWith,
    /// `str::contains(a, b)` (ours)
    Contains,
    /// `int(x)`: an int from an int, a float (truncated toward zero) or a
    /// string holding a decimal integer (docs/when-language.md#conversions)
    Int,
    /// `float(x)`: a float from a number or a decimal string
    Float,
    /// `str(x)`: the text of a scalar, as evalexpr's `str::from` writes it
    Str,
    /// `contains((a, b, ...), value)`, evalexpr's built-in: the tuple's
    /// elements come first on the stack, the value last
    /// (docs/when-language.md#membership)
    TupleContains,
}

/// One instruction. Stack effects are given as `[before] -> [after]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// `[] -> [pool[i]]`; the pool entry must not be a `Path`.
    Const(u32),
    /// `[] -> [field]`; an absent field is `""`.
    Field(EventField),
    /// `[] -> [value]`: the event's `data` at the `Path` constant `pool[i]`;
    /// a missing key is the empty value.
    Data(u32),
    /// `[] -> [string]`: the shadow value of the bundle's `state_pairs[i]`;
    /// `""` while unknown.
    State(u32),
    /// `[bool] -> [bool]`
    Not,
    /// `[number] -> [number]`
    Neg,
    /// `[a, b] -> [a op b]` with evalexpr's typing rules.
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
    /// Left side of `&&`: the top must be a bool. If it is `false`, keep it
    /// and jump to op index `target`; if `true`, pop it and fall through.
    AndJump(u32),
    /// Left side of `||`: the top must be a bool. If it is `true`, keep it
    /// and jump to `target`; if `false`, pop it and fall through.
    OrJump(u32),
    /// `[bool] -> [bool]`: the right side of `&&` / `||` must be a bool.
    AssertBool,
    /// `[a1 .. an] -> [f(a1 .. an)]`
    Call(Builtin, u8),
}

impl Op {
    /// The `when` operator of a binary op (two values in, one out), `None`
    /// for any other op: the one list of the binary ops, which the plan and
    /// `verify` ask (the test oracle spells its own out, on purpose).
    pub fn binary_operator(self) -> Option<Operator> {
        Some(match self {
            Op::Add => Operator::Add,
            Op::Sub => Operator::Sub,
            Op::Mul => Operator::Mul,
            Op::Div => Operator::Div,
            Op::Mod => Operator::Mod,
            Op::Pow => Operator::Pow,
            Op::Eq => Operator::Eq,
            Op::Ne => Operator::Ne,
            Op::Lt => Operator::Lt,
            Op::Le => Operator::Le,
            Op::Gt => Operator::Gt,
            Op::Ge => Operator::Ge,
            Op::Const(_)
            | Op::Field(_)
            | Op::Data(_)
            | Op::State(_)
            | Op::Not
            | Op::Neg
            | Op::AndJump(_)
            | Op::OrJump(_)
            | Op::AssertBool
            | Op::Call(..) => return None,
        })
    }

    /// Whether this is a binary op ([`Op::binary_operator`]).
    pub fn is_binary(self) -> bool {
        self.binary_operator().is_some()
    }
}
