//! The `when` language's static types and signatures
//! (docs/when-language.md#types): the one table that both the compiler's
//! checker (`rulec`'s `when::check`) and the bundle verifier
//! ([`crate::verify`]) read. What an operator or built-in accepts, what it
//! gives, and the arithmetic rules (int with int is an int, a float makes a
//! float) are written here once, so a program the checker accepts is typed
//! the same way when the verifier meets its bytecode.
//!
//! Each consumer keeps only its own wording: the checker's messages point
//! into the rule text, the verifier's at an op index.

use crate::bytecode::Builtin;

/// A statically known type. `Num` is "int or float, known only at run
/// time"; `Any` is a `data.*` value (or an `if` mixing types), known only
/// at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Bool,
    Int,
    Float,
    Num,
    Str,
    /// A sum of data values: a number or a string, never a boolean.
    NumOrStr,
    Any,
}

impl Ty {
    pub fn name(self) -> &'static str {
        match self {
            Ty::Bool => "boolean",
            Ty::Int => "int",
            Ty::Float => "float",
            Ty::Num => "number",
            Ty::Str => "string",
            Ty::NumOrStr => "number or string",
            Ty::Any => "data value",
        }
    }

    /// The name with its indefinite article: "an int", "a string".
    pub fn a(self) -> &'static str {
        match self {
            Ty::Bool => "a boolean",
            Ty::Int => "an int",
            Ty::Float => "a float",
            Ty::Num => "a number",
            Ty::Str => "a string",
            Ty::NumOrStr => "a number or string",
            Ty::Any => "a data value",
        }
    }

    /// An int, a float or a number: known to be one, whatever the input.
    pub fn is_known_number(self) -> bool {
        matches!(self, Ty::Int | Ty::Float | Ty::Num)
    }

    /// The type of a value that is `self` on one path and `other` on
    /// another (`if`'s branches, a jump's target).
    pub fn join(self, other: Ty) -> Ty {
        if self == other {
            self
        } else if self.is_known_number() && other.is_known_number() {
            Ty::Num
        } else {
            Ty::Any
        }
    }
}

/// What an operand must be able to be, or the operation fails for every
/// input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Bool,
    Number,
    Str,
    /// Anything but a boolean.
    NumberOrStr,
}

impl Want {
    /// Whether a value of type `ty` may be what this wants (a `data.*`
    /// value may be anything, so it always may).
    pub fn admits(self, ty: Ty) -> bool {
        match self {
            Want::Bool => matches!(ty, Ty::Bool | Ty::Any),
            Want::Number => matches!(ty, Ty::Int | Ty::Float | Ty::Num | Ty::NumOrStr | Ty::Any),
            Want::Str => matches!(ty, Ty::Str | Ty::NumOrStr | Ty::Any),
            Want::NumberOrStr => ty != Ty::Bool,
        }
    }
}

/// The operators of `when`, as the checker's tree and the bytecode both
/// have them (`&&` and `||` are jumps in the bytecode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    Neg,
    Not,
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

/// What each operand of `op` must be; `None` for `==` and `!=`, which
/// take anything.
pub fn operand(op: Operator) -> Option<Want> {
    Some(match op {
        Operator::Neg
        | Operator::Sub
        | Operator::Mul
        | Operator::Div
        | Operator::Mod
        | Operator::Pow => Want::Number,
        Operator::Not | Operator::And | Operator::Or => Want::Bool,
        Operator::Add | Operator::Lt | Operator::Le | Operator::Gt | Operator::Ge => {
            Want::NumberOrStr
        }
        Operator::Eq | Operator::Ne => return None,
    })
}

/// `+` and the orderings take two strings or two numbers, never one of
/// each: `true` when `a` and `b` are known to be a string and a number.
/// evalexpr never converts between them.
pub fn mixes_string_and_number(op: Operator, a: Ty, b: Ty) -> bool {
    let two_kinds = matches!(
        op,
        Operator::Add | Operator::Lt | Operator::Le | Operator::Gt | Operator::Ge
    );
    two_kinds && ((a == Ty::Str && b.is_known_number()) || (b == Ty::Str && a.is_known_number()))
}

/// The result of `- * / %` (and `+` on numbers), as evalexpr computes it:
/// int when both are ints, float when either is a float.
fn arith(a: Ty, b: Ty) -> Ty {
    match (a, b) {
        (Ty::Int, Ty::Int) => Ty::Int,
        (Ty::Float, _) | (_, Ty::Float) => Ty::Float,
        _ => Ty::Num,
    }
}

/// The type `-x` or `!x` gives, `x` of type `arg` (which [`operand`]
/// admits).
pub fn unary_result(op: Operator, arg: Ty) -> Ty {
    match (op, arg) {
        (Operator::Neg, Ty::Int | Ty::Float) => arg,
        (Operator::Neg, _) => Ty::Num,
        _ => Ty::Bool,
    }
}

/// The type `a op b` gives, its operands admitted by [`operand`] and not
/// [`mixes_string_and_number`].
pub fn binary_result(op: Operator, a: Ty, b: Ty) -> Ty {
    match op {
        Operator::Add => match (a, b) {
            (Ty::Str, _) | (_, Ty::Str) => Ty::Str,
            // Two data values add to a number or a string, never a boolean.
            (Ty::Any | Ty::NumOrStr, Ty::Any | Ty::NumOrStr) => Ty::NumOrStr,
            _ => arith(a, b),
        },
        Operator::Pow => Ty::Float,
        Operator::Sub | Operator::Mul | Operator::Div | Operator::Mod => arith(a, b),
        _ => Ty::Bool,
    }
}

/// Can a value of type `a` ever equal one of type `b`? evalexpr's `==` is
/// structural: an int never equals a float (`1 == 1.0` is false).
pub fn may_equal(a: Ty, b: Ty) -> bool {
    let num_or_str = |t| matches!(t, Ty::Int | Ty::Float | Ty::Num | Ty::Str | Ty::NumOrStr);
    a == b
        || a == Ty::Any
        || b == Ty::Any
        || (a == Ty::NumOrStr && num_or_str(b))
        || (b == Ty::NumOrStr && num_or_str(a))
        || (a == Ty::Num && matches!(b, Ty::Int | Ty::Float))
        || (b == Ty::Num && matches!(a, Ty::Int | Ty::Float))
}

/// Every built-in, in the order the checker lists them in its help.
pub const BUILTINS: [Builtin; 18] = [
    Builtin::Len,
    Builtin::ToLowercase,
    Builtin::ToUppercase,
    Builtin::Trim,
    Builtin::Min,
    Builtin::Max,
    Builtin::If,
    Builtin::Floor,
    Builtin::Ceil,
    Builtin::Round,
    Builtin::Abs,
    Builtin::StartsWith,
    Builtin::EndsWith,
    Builtin::Contains,
    Builtin::Int,
    Builtin::Float,
    Builtin::Str,
    Builtin::TupleContains,
];

/// The functions `when` accepts, by their evalexpr name.
pub const FUNCTIONS: &[(&str, Builtin)] = &{
    let mut table = [("", Builtin::Len); BUILTINS.len()];
    let mut i = 0;
    while i < BUILTINS.len() {
        table[i] = (builtin_name(BUILTINS[i]), BUILTINS[i]);
        i += 1;
    }
    table
};

/// evalexpr's spelling of each built-in, for messages and disassembly.
pub const fn builtin_name(builtin: Builtin) -> &'static str {
    match builtin {
        Builtin::Len => "len",
        Builtin::ToLowercase => "str::to_lowercase",
        Builtin::ToUppercase => "str::to_uppercase",
        Builtin::Trim => "str::trim",
        Builtin::Min => "min",
        Builtin::Max => "max",
        Builtin::If => "if",
        Builtin::Floor => "floor",
        Builtin::Ceil => "ceil",
        Builtin::Round => "round",
        Builtin::Abs => "math::abs",
        Builtin::StartsWith => "str::starts_with",
        Builtin::EndsWith => "str::ends_with",
        Builtin::Contains => "str::contains",
        Builtin::Int => "int",
        Builtin::Float => "float",
        Builtin::Str => "str",
        Builtin::TupleContains => "contains",
    }
}

/// The argument counts a built-in accepts, as the bytecode passes them:
/// `(min, max)`. evalexpr's `min` and `max` take a tuple, so one argument
/// is already an error there.
pub fn builtin_arity(builtin: Builtin) -> (u8, u8) {
    match builtin {
        Builtin::Min | Builtin::Max => (2, u8::MAX),
        Builtin::If => (3, 3),
        Builtin::StartsWith | Builtin::EndsWith | Builtin::Contains => (2, 2),
        // At least two tuple elements (evalexpr has no shorter tuple), then
        // the value.
        Builtin::TupleContains => (3, u8::MAX),
        Builtin::Int | Builtin::Float | Builtin::Str => (1, 1),
        Builtin::Len
        | Builtin::ToLowercase
        | Builtin::ToUppercase
        | Builtin::Trim
        | Builtin::Floor
        | Builtin::Ceil
        | Builtin::Round
        | Builtin::Abs => (1, 1),
    }
}

/// What argument `index` of `builtin` must be; `None` when it may be
/// anything (`str`, `contains`, `if`'s branches).
pub fn argument(builtin: Builtin, index: usize) -> Option<Want> {
    Some(match builtin {
        Builtin::Len
        | Builtin::ToLowercase
        | Builtin::ToUppercase
        | Builtin::Trim
        | Builtin::StartsWith
        | Builtin::EndsWith
        | Builtin::Contains => Want::Str,
        Builtin::Floor
        | Builtin::Ceil
        | Builtin::Round
        | Builtin::Abs
        | Builtin::Min
        | Builtin::Max => Want::Number,
        Builtin::Int | Builtin::Float => Want::NumberOrStr,
        Builtin::If if index == 0 => Want::Bool,
        Builtin::If | Builtin::Str | Builtin::TupleContains => return None,
    })
}

/// The type a call of `builtin` gives, its arguments of types `args`
/// (admitted by [`argument`], as many as [`builtin_arity`] allows).
pub fn call_result(builtin: Builtin, args: &[Ty]) -> Ty {
    match builtin {
        Builtin::Len | Builtin::Int => Ty::Int,
        Builtin::ToLowercase | Builtin::ToUppercase | Builtin::Trim | Builtin::Str => Ty::Str,
        Builtin::StartsWith | Builtin::EndsWith | Builtin::Contains | Builtin::TupleContains => {
            Ty::Bool
        }
        Builtin::Floor | Builtin::Ceil | Builtin::Round | Builtin::Float => Ty::Float,
        Builtin::Abs => match args.first() {
            Some(Ty::Int) => Ty::Int,
            Some(Ty::Float) => Ty::Float,
            _ => Ty::Num,
        },
        // evalexpr's min/max return an int only when every argument is
        // one; with floats it may still return an int (see the docs).
        Builtin::Min | Builtin::Max => {
            if args.iter().all(|t| *t == Ty::Int) {
                Ty::Int
            } else {
                Ty::Num
            }
        }
        Builtin::If => match args {
            [_, then, otherwise] => then.join(*otherwise),
            _ => Ty::Any,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_is_listed_once_by_its_name() {
        for (i, (name, builtin)) in FUNCTIONS.iter().enumerate() {
            assert_eq!(*name, builtin_name(*builtin));
            assert_eq!(FUNCTIONS.iter().position(|(_, b)| b == builtin), Some(i));
        }
        assert_eq!(FUNCTIONS.len(), BUILTINS.len());
    }

    #[test]
    fn arithmetic_follows_evalexpr() {
        assert_eq!(binary_result(Operator::Add, Ty::Int, Ty::Int), Ty::Int);
        assert_eq!(binary_result(Operator::Sub, Ty::Int, Ty::Float), Ty::Float);
        assert_eq!(binary_result(Operator::Mul, Ty::Int, Ty::Any), Ty::Num);
        assert_eq!(binary_result(Operator::Pow, Ty::Int, Ty::Int), Ty::Float);
        assert_eq!(binary_result(Operator::Add, Ty::Str, Ty::Any), Ty::Str);
        assert_eq!(binary_result(Operator::Add, Ty::Any, Ty::Any), Ty::NumOrStr);
        assert!(mixes_string_and_number(Operator::Lt, Ty::Str, Ty::Int));
        assert!(!mixes_string_and_number(Operator::Eq, Ty::Str, Ty::Int));
        assert!(!Want::Bool.admits(Ty::NumOrStr));
        assert!(Want::Str.admits(Ty::NumOrStr));
    }
}
