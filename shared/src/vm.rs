//! The `when` VM (docs/when-language.md): evaluates a [`Program`] over a value stack.
//!
//! Semantics are evalexpr 13's, operator for operator (the compiler parses
//! with evalexpr, and differential tests hold the two evaluators together):
//!
//! - `+` adds two numbers or concatenates two strings; a string and a number
//!   is an error. `- * / %` take numbers only. Two ints give an int, checked:
//!   overflow is an error, and so is integer division or remainder by zero.
//!   An int mixed with a float is converted to float (IEEE rules: `1.0 / 0`
//!   is infinity, not an error).
//! - `^` always gives a float (`powf`), even for two ints.
//! - `< <= > >=` order two strings (bytewise), two ints, or two numbers of
//!   any mix (as floats); anything else is an error.
//! - `==` / `!=` never fail and compare type and value: `1 == 1.0` is false,
//!   a missing `data` key equals only another missing key.
//! - `!` takes a boolean; unary `-` a number (int negation is checked).
//! - `&&` / `||` short-circuit (evalexpr evaluates both sides; the only
//!   difference is an error on a side we never evaluate).
//! - `math::abs(i64::MIN)` is an overflow error (evalexpr panics in a debug
//!   build and wraps in a release build).
//!
//! Values on the stack are `Copy` slots that borrow from the constant pool,
//! the event and the state slice; a string the expression builds (`+` on
//! strings, `str::to_lowercase` of a string that is not already lowercase
//! ASCII, ...) goes to a per-evaluation scratch list that only allocates
//! when used. The stack is a small array on the native stack, with a heap
//! fallback only for programs deeper than [`INLINE_STACK`] values, which the
//! compiler never produces for a readable `when`.
//!
//! `data.*` values map from JSON: an integer that fits `i64` is an int, any
//! other number a float, strings and booleans as themselves, `null` or a
//! missing key the empty value (which only `==`/`!=` accept). An array or an
//! object is an evaluation error ([`EvalError::DataNotScalar`]): evalexpr has
//! no such value and silently treating it as empty would hide a typo'd path.
//!
//! The VM does not panic on any program: an unverified program that would
//! underflow the stack, jump backwards or name a missing constant gets
//! [`EvalError::Malformed`]. Bundles are verified at load
//! ([`crate::verify`]), so that error means a bug, not a user mistake.
//!
//! One evaluator (docs/engine.md#the-when-plan): every evaluation runs a
//! [`Plan`], which fuses common op sequences but computes every step with
//! this module's own functions (`fast_binary`, `not`, `neg`, the
//! `Machine`'s calls). The engine keeps the plan of each rule's `when`,
//! made at load; [`eval_bool`] and [`eval`] plan any other program for
//! its one evaluation. `oracle` runs a program op by op, only as the
//! plan's test oracle (`cargo xtask invariants` keeps it out of product
//! code).

use crate::bytecode::{Builtin, Const, EventField, Op, Program};
use crate::event::Event;
use crate::event_data::DataValue;
use crate::when_types::{builtin_arity, builtin_name};
use std::borrow::Cow;
use std::cmp::Ordering;

#[cfg(any(test, feature = "oracle"))]
pub mod oracle;
mod plan;
mod reads;
pub use plan::Plan;
pub use reads::{
    capture_state, explain, reads, Captured, Explained, Read, ReadContext, StateValues,
    READ_TEXT_MAX,
};

/// How many values fit the stack that lives on the native stack; deeper
/// programs (never produced by the compiler for a readable `when`) run again
/// with a heap-allocated stack.
pub const INLINE_STACK: usize = 16;

/// The most bytes of text one evaluation may build, all strings together
/// (docs/when-language.md#at-run-time): past it the evaluation fails, so a
/// program (from a forged bundle: the checker's 256 tokens cannot come
/// near) cannot grow a string without end. A real `when` builds a few
/// bytes; events are at most 64 KiB.
pub const MAX_BUILT_BYTES: usize = 1 << 20;

/// The least capacity of a string built by `+`, so that the rest of a chain
/// like `to + "/" + from` usually fits without growing it.
const MIN_BUILT: usize = 32;

/// A value an evaluation produced (see [`eval`]). Strings borrow where they
/// can.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A missing `data` key or a JSON `null` (evalexpr's `Value::Empty`).
    Empty,
}

impl Value<'_> {
    /// evalexpr's name for the type, used in error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Bool(_) => "boolean",
            Value::Empty => "empty",
        }
    }
}

/// Why an evaluation failed. The condition then counts as not met
/// (docs/when-language.md); the engine logs it with the rule and step.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    #[error("`{op}` expects {expected}, found {found}")]
    Type {
        op: &'static str,
        expected: &'static str,
        found: &'static str,
    },
    #[error("`{op}` cannot combine {left} and {right}")]
    Mismatch {
        op: &'static str,
        left: &'static str,
        right: &'static str,
    },
    #[error("integer overflow in `{op}`")]
    Overflow { op: &'static str },
    #[error("integer {what} by zero")]
    DivisionByZero { what: &'static str },
    #[error("`{function}` takes {expected} arguments, got {found}")]
    Arity {
        function: &'static str,
        expected: &'static str,
        found: u8,
    },
    #[error("`data.{path}` is {kind}, not a value an expression can use")]
    DataNotScalar { path: String, kind: &'static str },
    #[error("the condition gave {found}, not a boolean")]
    NotBool { found: &'static str },
    #[error("the condition builds more than {limit} bytes of text")]
    TooMuchText { limit: usize },
    #[error("`{function}` cannot convert {what}")]
    Conversion {
        function: &'static str,
        what: &'static str,
    },
    #[error("malformed program at op {pc}: {reason}")]
    Malformed { pc: usize, reason: &'static str },
}

/// Evaluates a `when` program to a boolean. `state` holds the shadow value
/// of each of the bundle's `state_pairs`, by index (`""` while unknown).
///
/// The program is planned ([`Plan`]) for this evaluation, on the native
/// stack when it is short, and the plan run: the plan is the one evaluator
/// of product code. A caller that judges the same program per event keeps
/// its plan instead (the engine plans each rule's `when` at load).
pub fn eval_bool(
    program: &Program,
    consts: &[Const],
    event: &Event,
    state: &[String],
) -> Result<bool, EvalError> {
    let mut scratch = Vec::new();
    plan::eval_once(program, consts, event, state, &mut scratch).and_then(Slot::boolean)
}

/// Evaluates a program to its value (a step's computed text, a `per` key,
/// the profile's `data` expressions), planned as [`eval_bool`] plans it.
pub fn eval<'a>(
    program: &Program,
    consts: &'a [Const],
    event: &'a Event,
    state: &'a [String],
) -> Result<Value<'a>, EvalError> {
    let mut scratch = Vec::new();
    let slot = plan::eval_once(program, consts, event, state, &mut scratch)?;
    Ok(slot_value(slot, &mut scratch))
}

/// The value a slot stands for; a built string is taken out of `scratch`.
fn slot_value<'a>(slot: Slot<'a>, scratch: &mut [String]) -> Value<'a> {
    match slot {
        Slot::Str(s) => Value::Str(Cow::Borrowed(s)),
        Slot::Owned(i) => Value::Str(Cow::Owned(
            scratch
                .get_mut(i as usize)
                .map(std::mem::take)
                .unwrap_or_default(),
        )),
        Slot::Int(i) => Value::Int(i),
        Slot::Float(f) => Value::Float(f),
        Slot::Bool(b) => Value::Bool(b),
        Slot::Empty => Value::Empty,
    }
}

/// Converts a `data` value found in the event to a VM value (see the module
/// docs for the mapping). `path` is only used in the error.
pub fn data_to_value<'a>(
    value: Option<&'a DataValue>,
    path: &[String],
) -> Result<Value<'a>, EvalError> {
    Ok(match data_to_slot(value, path)? {
        Slot::Str(s) => Value::Str(Cow::Borrowed(s)),
        Slot::Int(i) => Value::Int(i),
        Slot::Float(f) => Value::Float(f),
        Slot::Bool(b) => Value::Bool(b),
        Slot::Empty | Slot::Owned(_) => Value::Empty,
    })
}

// Inlined into the VM loop: returning the large `Result` through memory
// cost a tenth of a two-lookup program (compiler/benches, perf).
#[inline(always)]
fn data_to_slot<'a>(value: Option<&'a DataValue>, path: &[String]) -> Result<Slot<'a>, EvalError> {
    Ok(match value {
        None | Some(DataValue::Null) => Slot::Empty,
        Some(DataValue::Bool(b)) => Slot::Bool(*b),
        Some(DataValue::Int(i)) => Slot::Int(*i),
        // Beyond `i64`: a float, as `serde_json` reads it.
        Some(DataValue::UInt(u)) => Slot::Float(*u as f64),
        Some(DataValue::Float(f)) => Slot::Float(*f),
        Some(DataValue::Str(s)) => Slot::Str(s),
        Some(DataValue::Array(_)) => return Err(not_scalar(path, "an array")),
        Some(DataValue::Object(_)) => return Err(not_scalar(path, "an object")),
    })
}

#[cold]
fn not_scalar(path: &[String], kind: &'static str) -> EvalError {
    EvalError::DataNotScalar {
        path: path.join("."),
        kind,
    }
}

/// The common cases of [`Machine::binary`] with the same results, inlined
/// into the VM loop: two ints, two numbers with a float among them, two
/// borrowed strings compared. `None` hands the operation to `binary`, which
/// also produces every error (overflow, division by zero, mismatched
/// types), so this function never has to.
#[inline(always)]
fn fast_binary<'a>(op: Op, a: Slot<'a>, b: Slot<'a>) -> Option<Slot<'a>> {
    Some(match (a, b) {
        (Slot::Int(x), Slot::Int(y)) => match op {
            Op::Add => Slot::Int(x.checked_add(y)?),
            Op::Sub => Slot::Int(x.checked_sub(y)?),
            Op::Mul => Slot::Int(x.checked_mul(y)?),
            Op::Div if y != 0 => Slot::Int(x.checked_div(y)?),
            Op::Mod if y != 0 => Slot::Int(x.checked_rem(y)?),
            Op::Pow => Slot::Float((x as f64).powf(y as f64)),
            Op::Eq => Slot::Bool(x == y),
            Op::Ne => Slot::Bool(x != y),
            Op::Lt => Slot::Bool(x < y),
            Op::Le => Slot::Bool(x <= y),
            Op::Gt => Slot::Bool(x > y),
            Op::Ge => Slot::Bool(x >= y),
            _ => return None,
        },
        (Slot::Int(_) | Slot::Float(_), Slot::Int(_) | Slot::Float(_)) => {
            let (x, y) = (a.as_number()?, b.as_number()?);
            let both_float = matches!((a, b), (Slot::Float(_), Slot::Float(_)));
            match op {
                Op::Add => Slot::Float(x + y),
                Op::Sub => Slot::Float(x - y),
                Op::Mul => Slot::Float(x * y),
                Op::Div => Slot::Float(x / y),
                Op::Mod => Slot::Float(x % y),
                Op::Pow => Slot::Float(x.powf(y)),
                // `==` compares type and value: an int never equals a float.
                Op::Eq => Slot::Bool(both_float && x == y),
                Op::Ne => Slot::Bool(!(both_float && x == y)),
                // IEEE comparisons: false against NaN, as `binary` gives.
                Op::Lt => Slot::Bool(x < y),
                Op::Le => Slot::Bool(x <= y),
                Op::Gt => Slot::Bool(x > y),
                Op::Ge => Slot::Bool(x >= y),
                _ => return None,
            }
        }
        (Slot::Str(x), Slot::Str(y)) => match op {
            Op::Eq => Slot::Bool(x == y),
            Op::Ne => Slot::Bool(x != y),
            Op::Lt => Slot::Bool(x < y),
            Op::Le => Slot::Bool(x <= y),
            Op::Gt => Slot::Bool(x > y),
            Op::Ge => Slot::Bool(x >= y),
            _ => return None,
        },
        _ => return None,
    })
}

/// A stack slot. `Copy`, so the stack has no drop glue; a string built
/// during the evaluation lives in the scratch list and is named by index.
#[derive(Debug, Clone, Copy)]
enum Slot<'a> {
    Str(&'a str),
    Owned(u32),
    Int(i64),
    Float(f64),
    Bool(bool),
    Empty,
}

impl Slot<'_> {
    /// A `when`'s answer: a boolean, or the error of any other value.
    fn boolean(self) -> Result<bool, EvalError> {
        match self {
            Slot::Bool(b) => Ok(b),
            other => Err(EvalError::NotBool {
                found: other.type_name(),
            }),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Slot::Str(_) | Slot::Owned(_) => "string",
            Slot::Int(_) => "int",
            Slot::Float(_) => "float",
            Slot::Bool(_) => "boolean",
            Slot::Empty => "empty",
        }
    }

    fn as_number(&self) -> Option<f64> {
        match self {
            Slot::Int(i) => Some(*i as f64),
            Slot::Float(f) => Some(*f),
            _ => None,
        }
    }

    fn is_number_or_string(&self) -> bool {
        !matches!(self, Slot::Bool(_) | Slot::Empty)
    }
}

enum Stop {
    Eval(EvalError),
    /// The stack buffer is too small: retry with a bigger one.
    StackFull,
}

impl Stop {
    fn into_eval_error(self) -> EvalError {
        match self {
            Stop::Eval(e) => e,
            Stop::StackFull => EvalError::Malformed {
                pc: 0,
                reason: "stack overflow",
            },
        }
    }
}

impl From<EvalError> for Stop {
    fn from(e: EvalError) -> Self {
        Stop::Eval(e)
    }
}

#[cold]
fn malformed(pc: usize, reason: &'static str) -> Stop {
    Stop::Eval(EvalError::Malformed { pc, reason })
}

#[cold]
fn type_error(op: &'static str, expected: &'static str, found: Slot<'_>) -> EvalError {
    EvalError::Type {
        op,
        expected,
        found: found.type_name(),
    }
}

fn op_symbol(op: Op) -> &'static str {
    match op {
        Op::Add => "+",
        Op::Sub => "-",
        Op::Mul => "*",
        Op::Div => "/",
        Op::Mod => "%",
        Op::Pow => "^",
        Op::Eq => "==",
        Op::Ne => "!=",
        Op::Lt => "<",
        Op::Le => "<=",
        Op::Gt => ">",
        Op::Ge => ">=",
        _ => "?",
    }
}

struct Machine<'a, 's> {
    consts: &'a [Const],
    event: &'a Event,
    state: &'a [String],
    /// Strings built by this evaluation; `Slot::Owned(i)` is `scratch[i]`.
    scratch: &'s mut Vec<String>,
    /// Bytes of text built so far ([`MAX_BUILT_BYTES`]).
    built: usize,
}

impl<'a, 's> Machine<'a, 's> {
    fn new(
        consts: &'a [Const],
        event: &'a Event,
        state: &'a [String],
        scratch: &'s mut Vec<String>,
    ) -> Self {
        Self {
            consts,
            event,
            state,
            scratch,
            built: 0,
        }
    }
}

impl<'a> Machine<'a, '_> {
    /// The text of a string slot.
    fn text<'t>(&'t self, slot: Slot<'a>) -> Option<&'t str>
    where
        'a: 't,
    {
        match slot {
            Slot::Str(s) => Some(s),
            Slot::Owned(i) => self.scratch.get(i as usize).map(String::as_str),
            _ => None,
        }
    }

    /// Counts `bytes` of text this evaluation builds against
    /// [`MAX_BUILT_BYTES`], before they are allocated.
    fn charge(&mut self, bytes: usize) -> Result<(), EvalError> {
        self.built = self.built.saturating_add(bytes);
        if self.built > MAX_BUILT_BYTES {
            return Err(EvalError::TooMuchText {
                limit: MAX_BUILT_BYTES,
            });
        }
        Ok(())
    }

    fn own(&mut self, s: String) -> Slot<'a> {
        let index = u32::try_from(self.scratch.len()).unwrap_or(u32::MAX);
        self.scratch.push(s);
        Slot::Owned(index)
    }

    /// `Const(i)`: a literal from the pool. The loads below are inlined
    /// into `run`, the hot loop, as their code was before it was split.
    #[inline(always)]
    fn constant(&self, pc: usize, i: u32) -> Result<Slot<'a>, Stop> {
        match self.consts.get(i as usize) {
            Some(Const::Str(s)) => Ok(Slot::Str(s)),
            Some(Const::Int(n)) => Ok(Slot::Int(*n)),
            Some(Const::Float(f)) => Ok(Slot::Float(*f)),
            Some(Const::Bool(b)) => Ok(Slot::Bool(*b)),
            Some(Const::Path(_)) => Err(malformed(pc, "Const names a path")),
            None => Err(malformed(pc, "constant index out of range")),
        }
    }

    /// `Field(field)`: the event's topic, src, from or to.
    #[inline(always)]
    fn field(&self, field: EventField) -> &'a str {
        let event = self.event;
        match field {
            EventField::Topic => event.topic.as_str(),
            EventField::Src => event.src(),
            EventField::From => event.from(),
            EventField::To => event.to(),
        }
    }

    /// `Data(i)`: the event's data at the path constant `i`.
    #[inline(always)]
    fn data(&self, pc: usize, i: u32) -> Result<Slot<'a>, Stop> {
        let Some(Const::Path(path)) = self.consts.get(i as usize) else {
            return Err(malformed(pc, "Data does not name a path constant"));
        };
        // Most paths are one key (`data.v`): no iterator to set up.
        let value = match (path.as_slice(), &self.event.data) {
            ([key], DataValue::Object(object)) => object.get(key),
            ([_], _) => None,
            _ => self.event.data_at(path.iter().map(String::as_str)),
        };
        Ok(data_to_slot(value, path)?)
    }

    /// `State(i)`: the shadow's value of state pair `i`.
    #[inline(always)]
    fn state_slot(&self, pc: usize, i: u32) -> Result<Slot<'a>, Stop> {
        match self.state.get(i as usize) {
            Some(s) => Ok(Slot::Str(s)),
            None => Err(malformed(pc, "state index out of range")),
        }
    }

    /// `==` as evalexpr's derived `PartialEq` on values: same type and value.
    fn equal(&self, a: Slot<'a>, b: Slot<'a>) -> bool {
        match (a, b) {
            (Slot::Int(x), Slot::Int(y)) => x == y,
            (Slot::Float(x), Slot::Float(y)) => x == y,
            (Slot::Bool(x), Slot::Bool(y)) => x == y,
            (Slot::Empty, Slot::Empty) => true,
            _ => match (self.text(a), self.text(b)) {
                (Some(x), Some(y)) => x == y,
                _ => false,
            },
        }
    }

    /// The binary operators, as evalexpr's `Operator::eval` defines them:
    /// equality on anything, then the operand types, then the operator.
    /// The slow path (`fast_binary` takes the common cases); its steps are
    /// `#[inline]` so that the split costs no call.
    fn binary(&mut self, op: Op, a: Slot<'a>, b: Slot<'a>) -> Result<Slot<'a>, EvalError> {
        let sym = op_symbol(op);
        match op {
            Op::Eq => return Ok(Slot::Bool(self.equal(a, b))),
            Op::Ne => return Ok(Slot::Bool(!self.equal(a, b))),
            _ => check_operands(op, sym, a, b)?,
        }
        match op {
            Op::Add => self.add(sym, a, b),
            Op::Sub | Op::Mul | Op::Div | Op::Mod => arithmetic(op, sym, a, b),
            Op::Pow => match (a.as_number(), b.as_number()) {
                (Some(x), Some(y)) => Ok(Slot::Float(x.powf(y))),
                _ => Err(mismatch(sym, a, b)),
            },
            Op::Lt | Op::Le | Op::Gt | Op::Ge => self.order(op, sym, a, b),
            _ => Err(EvalError::Malformed {
                pc: 0,
                reason: "not a binary operator",
            }),
        }
    }

    /// `+`: joins two strings, adds two numbers.
    #[inline]
    fn add(&mut self, sym: &'static str, a: Slot<'a>, b: Slot<'a>) -> Result<Slot<'a>, EvalError> {
        // `a + b + c` parses as `(a + b) + c`: a string this evaluation
        // built is extended in place (no slot refers to it once popped),
        // and a new one gets room for a few more short parts.
        if let (Slot::Owned(i), Slot::Str(y)) = (a, b) {
            self.charge(y.len())?;
            if let Some(built) = self.scratch.get_mut(i as usize) {
                built.push_str(y);
                return Ok(a);
            }
        }
        let lengths = (self.text(a).map(str::len), self.text(b).map(str::len));
        if let (Some(x_len), Some(y_len)) = lengths {
            // Joining with "" builds nothing new.
            if y_len == 0 {
                return Ok(a);
            }
            if x_len == 0 {
                return Ok(b);
            }
            self.charge(x_len + y_len)?;
            let (x, y) = (self.text(a).unwrap_or(""), self.text(b).unwrap_or(""));
            let mut s = String::with_capacity((x.len() + y.len()).max(MIN_BUILT));
            s.push_str(x);
            s.push_str(y);
            return Ok(self.own(s));
        }
        match (a, b) {
            (Slot::Int(x), Slot::Int(y)) => x
                .checked_add(y)
                .map(Slot::Int)
                .ok_or(EvalError::Overflow { op: sym }),
            _ => match (a.as_number(), b.as_number()) {
                (Some(x), Some(y)) => Ok(Slot::Float(x + y)),
                _ => Err(mismatch(sym, a, b)),
            },
        }
    }

    /// `< <= > >=`: ints, strings (byte-wise) or numbers.
    #[inline]
    fn order(
        &self,
        op: Op,
        sym: &'static str,
        a: Slot<'a>,
        b: Slot<'a>,
    ) -> Result<Slot<'a>, EvalError> {
        let ordering = match (a, b) {
            (Slot::Int(x), Slot::Int(y)) => Some(x.cmp(&y)),
            _ => match (self.text(a), self.text(b)) {
                (Some(x), Some(y)) => Some(x.cmp(y)),
                _ => match (a.as_number(), b.as_number()) {
                    (Some(x), Some(y)) => x.partial_cmp(&y),
                    _ => return Err(mismatch(sym, a, b)),
                },
            },
        };
        // `None` is a NaN: every ordering comparison is false, as in Rust.
        Ok(Slot::Bool(match (op, ordering) {
            (_, None) => false,
            (Op::Lt, Some(o)) => o == Ordering::Less,
            (Op::Le, Some(o)) => o != Ordering::Greater,
            (Op::Gt, Some(o)) => o == Ordering::Greater,
            (_, Some(o)) => o != Ordering::Less,
        }))
    }

    fn string_arg(&self, name: &'static str, v: Slot<'a>) -> Result<&str, EvalError> {
        self.text(v).ok_or_else(|| type_error(name, "a string", v))
    }

    /// The built-ins, as evalexpr's `builtin_function` defines them (ours:
    /// `str::starts_with`, `str::ends_with`, `str::contains`).
    fn call(&mut self, builtin: Builtin, args: &[Slot<'a>]) -> Result<Slot<'a>, EvalError> {
        let (min, max) = builtin_arity(builtin);
        if args.len() < min as usize || args.len() > max as usize {
            return Err(arity_error(builtin, args.len()));
        }
        let name = builtin_name(builtin);
        let number = |v: Slot<'a>| v.as_number().ok_or_else(|| type_error(name, "a number", v));
        match builtin {
            Builtin::Len => {
                let n = self.string_arg(name, args[0])?.len();
                let n = i64::try_from(n).map_err(|_| EvalError::Overflow { op: name })?;
                Ok(Slot::Int(n))
            }
            Builtin::ToLowercase | Builtin::ToUppercase => {
                let lower = builtin == Builtin::ToLowercase;
                let s = self.string_arg(name, args[0])?;
                // An ASCII string already in the target case maps to itself.
                let unchanged = s.is_ascii()
                    && !s.bytes().any(|b| {
                        if lower {
                            b.is_ascii_uppercase()
                        } else {
                            b.is_ascii_lowercase()
                        }
                    });
                if unchanged {
                    return Ok(args[0]);
                }
                let len = s.len();
                self.charge(len)?;
                let s = self.string_arg(name, args[0])?;
                let mapped = if lower {
                    s.to_lowercase()
                } else {
                    s.to_uppercase()
                };
                // A few characters map to longer ones (`ß` to `SS`).
                self.charge(mapped.len().saturating_sub(len))?;
                Ok(self.own(mapped))
            }
            Builtin::Trim => match args[0] {
                Slot::Str(s) => Ok(Slot::Str(s.trim())),
                other => {
                    let s = self.string_arg(name, other)?;
                    if s.trim().len() == s.len() {
                        return Ok(other);
                    }
                    let trimmed_len = s.trim().len();
                    self.charge(trimmed_len)?;
                    let trimmed = self.string_arg(name, other)?.trim().to_string();
                    Ok(self.own(trimmed))
                }
            },
            Builtin::Min | Builtin::Max => min_max(builtin == Builtin::Min, name, args),
            Builtin::If => {
                let Slot::Bool(cond) = args[0] else {
                    return Err(type_error(name, "a boolean condition", args[0]));
                };
                Ok(args[if cond { 1 } else { 2 }])
            }
            Builtin::Floor => Ok(Slot::Float(number(args[0])?.floor())),
            Builtin::Ceil => Ok(Slot::Float(number(args[0])?.ceil())),
            Builtin::Round => Ok(Slot::Float(number(args[0])?.round())),
            Builtin::Abs => match args[0] {
                Slot::Float(f) => Ok(Slot::Float(f.abs())),
                // evalexpr's `i64::abs` panics (debug) or wraps (release) on
                // i64::MIN; an error is the only sane reading of both.
                Slot::Int(i) => i
                    .checked_abs()
                    .map(Slot::Int)
                    .ok_or(EvalError::Overflow { op: name }),
                other => Err(type_error(name, "a number", other)),
            },
            Builtin::StartsWith | Builtin::EndsWith | Builtin::Contains => {
                let a = self.string_arg(name, args[0])?;
                let b = self.string_arg(name, args[1])?;
                Ok(Slot::Bool(match builtin {
                    Builtin::StartsWith => a.starts_with(b),
                    Builtin::EndsWith => a.ends_with(b),
                    _ => a.contains(b),
                }))
            }
            Builtin::Int => self.convert_int(args[0]),
            Builtin::Float => self.convert_float(args[0]),
            Builtin::Str => self.convert_str(args[0]),
            Builtin::TupleContains => self.tuple_contains(args),
        }
    }

    /// `int(x)` (docs/when-language.md#conversions): ints as they are,
    /// floats truncated toward zero, decimal strings (white space around
    /// allowed) parsed; anything else, or a float outside the int range, is
    /// an error.
    fn convert_int(&self, v: Slot<'a>) -> Result<Slot<'a>, EvalError> {
        let fail = |what| EvalError::Conversion {
            function: "int",
            what,
        };
        match v {
            Slot::Int(_) => Ok(v),
            Slot::Float(f) => {
                let t = f.trunc();
                // 2^63 is exact as a float; every float below it in
                // magnitude truncates to a value that fits.
                if t.is_nan()
                    || !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&t)
                {
                    return Err(fail("a float outside the int range"));
                }
                Ok(Slot::Int(t as i64))
            }
            Slot::Str(_) | Slot::Owned(_) => {
                let s = self.text(v).unwrap_or_default();
                s.trim()
                    .parse::<i64>()
                    .map(Slot::Int)
                    .map_err(|_| fail("a string that is not a decimal integer"))
            }
            other => Err(type_error("int", "a number or a string", other)),
        }
    }

    /// `float(x)`: numbers converted, decimal strings parsed (digits, sign,
    /// point and exponent only: not `inf` or `NaN`).
    fn convert_float(&self, v: Slot<'a>) -> Result<Slot<'a>, EvalError> {
        match v {
            Slot::Int(i) => Ok(Slot::Float(i as f64)),
            Slot::Float(_) => Ok(v),
            Slot::Str(_) | Slot::Owned(_) => {
                let s = self.text(v).unwrap_or_default().trim();
                let decimal = s
                    .bytes()
                    .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'));
                match s.parse::<f64>() {
                    Ok(f) if decimal => Ok(Slot::Float(f)),
                    _ => Err(EvalError::Conversion {
                        function: "float",
                        what: "a string that is not a decimal number",
                    }),
                }
            }
            other => Err(type_error("float", "a number or a string", other)),
        }
    }

    /// `str(x)`: a string as it is, a boolean as `true`/`false`, a number
    /// as evalexpr's `str::from` writes it (the one conversion that
    /// allocates).
    fn convert_str(&mut self, v: Slot<'a>) -> Result<Slot<'a>, EvalError> {
        match v {
            Slot::Str(_) | Slot::Owned(_) => Ok(v),
            Slot::Bool(b) => Ok(Slot::Str(if b { "true" } else { "false" })),
            Slot::Int(i) => Ok(self.own(i.to_string())),
            Slot::Float(f) => Ok(self.own(f.to_string())),
            Slot::Empty => Err(type_error("str", "a string, number or boolean", v)),
        }
    }

    /// `contains((a, b, ...), value)`: whether an element equals the value
    /// (same type and value, as `==`); the value must be a scalar.
    fn tuple_contains(&self, args: &[Slot<'a>]) -> Result<Slot<'a>, EvalError> {
        let Some((&value, elements)) = args.split_last() else {
            return Err(arity_error(Builtin::TupleContains, args.len()));
        };
        if matches!(value, Slot::Empty) {
            return Err(type_error("contains", "a string, number or boolean", value));
        }
        Ok(Slot::Bool(elements.iter().any(|e| self.equal(*e, value))))
    }
}

/// The operand types `op` accepts: numbers or strings for `+` and the
/// orderings, numbers for the rest of the arithmetic.
#[inline]
fn check_operands(op: Op, sym: &'static str, a: Slot<'_>, b: Slot<'_>) -> Result<(), EvalError> {
    let number_or_string = matches!(op, Op::Add | Op::Lt | Op::Le | Op::Gt | Op::Ge);
    for v in [a, b] {
        if number_or_string && !v.is_number_or_string() {
            return Err(type_error(sym, "a number or a string", v));
        }
        if !number_or_string && v.as_number().is_none() {
            return Err(type_error(sym, "a number", v));
        }
    }
    Ok(())
}

/// `- * / %`: checked on two ints (a zero divisor is an error), IEEE on
/// any other two numbers.
#[inline]
fn arithmetic<'a>(
    op: Op,
    sym: &'static str,
    a: Slot<'a>,
    b: Slot<'a>,
) -> Result<Slot<'a>, EvalError> {
    if let (Slot::Int(x), Slot::Int(y)) = (a, b) {
        let result = match op {
            Op::Sub => x.checked_sub(y),
            Op::Mul => x.checked_mul(y),
            Op::Div | Op::Mod if y == 0 => {
                let what = if op == Op::Div {
                    "division"
                } else {
                    "remainder"
                };
                return Err(EvalError::DivisionByZero { what });
            }
            Op::Div => x.checked_div(y),
            _ => x.checked_rem(y),
        };
        return result.map(Slot::Int).ok_or(EvalError::Overflow { op: sym });
    }
    let (Some(x), Some(y)) = (a.as_number(), b.as_number()) else {
        return Err(mismatch(sym, a, b));
    };
    Ok(Slot::Float(match op {
        Op::Sub => x - y,
        Op::Mul => x * y,
        Op::Div => x / y,
        _ => x % y,
    }))
}

#[cold]
fn mismatch(sym: &'static str, a: Slot<'_>, b: Slot<'_>) -> EvalError {
    EvalError::Mismatch {
        op: sym,
        left: a.type_name(),
        right: b.type_name(),
    }
}

/// `!x`.
#[inline(always)]
fn not(top: Slot<'_>) -> Result<Slot<'_>, EvalError> {
    match top {
        Slot::Bool(b) => Ok(Slot::Bool(!b)),
        other => Err(type_error("!", "a boolean", other)),
    }
}

/// `-x`.
#[inline(always)]
fn neg(top: Slot<'_>) -> Result<Slot<'_>, EvalError> {
    match top {
        Slot::Int(i) => i
            .checked_neg()
            .map(Slot::Int)
            .ok_or(EvalError::Overflow { op: "-" }),
        Slot::Float(f) => Ok(Slot::Float(-f)),
        other => Err(type_error("-", "a number", other)),
    }
}

fn push<'a>(stack: &mut [Slot<'a>], len: &mut usize, slot: Slot<'a>) -> Result<(), Stop> {
    let place = stack.get_mut(*len).ok_or(Stop::StackFull)?;
    *place = slot;
    *len += 1;
    Ok(())
}

fn top_mut<'s, 'a>(
    stack: &'s mut [Slot<'a>],
    len: usize,
    pc: usize,
) -> Result<&'s mut Slot<'a>, Stop> {
    match len.checked_sub(1) {
        Some(i) => stack
            .get_mut(i)
            .ok_or_else(|| malformed(pc, "stack underflow")),
        None => Err(malformed(pc, "stack underflow")),
    }
}

fn arity_error(builtin: Builtin, found: usize) -> EvalError {
    let expected = match builtin_arity(builtin) {
        (1, 1) => "1",
        (2, 2) => "2",
        (3, 3) => "3",
        (3, _) => "at least 3",
        _ => "at least 2",
    };
    EvalError::Arity {
        function: builtin_name(builtin),
        expected,
        found: u8::try_from(found).unwrap_or(u8::MAX),
    }
}

/// evalexpr's `min` / `max`: the extreme int and the extreme float are found
/// separately (NaN floats are skipped by `f64::min`), then the int wins only
/// if it is strictly beyond the float once converted. With no float at all
/// the float side is infinite, so the int wins; with no int, the int side is
/// `i64::MAX` / `i64::MIN`, which the float beats unless it is huge or NaN.
fn min_max<'a>(is_min: bool, name: &'static str, args: &[Slot<'a>]) -> Result<Slot<'a>, EvalError> {
    let (mut int, mut float) = if is_min {
        (i64::MAX, f64::INFINITY)
    } else {
        (i64::MIN, f64::NEG_INFINITY)
    };
    for arg in args {
        match (*arg, is_min) {
            (Slot::Float(f), true) => float = float.min(f),
            (Slot::Float(f), false) => float = float.max(f),
            (Slot::Int(i), true) => int = int.min(i),
            (Slot::Int(i), false) => int = int.max(i),
            (other, _) => return Err(type_error(name, "numbers", other)),
        }
    }
    let int_wins = if is_min {
        (int as f64) < float
    } else {
        (int as f64) > float
    };
    Ok(if int_wins {
        Slot::Int(int)
    } else {
        Slot::Float(float)
    })
}

#[cfg(test)]
mod tests {
    use super::Const as C;
    use super::*;
    use Op::*;

    fn program(ops: Vec<Op>) -> Program {
        Program { ops }
    }

    fn event() -> Event {
        Event::decode(
            br#"{"topic":"alarm.triggered","src":"alarm","to":"level-2","data":{"level":2,"temp":21.5,"name":"Bob","on":true,"nil":null,"big":18446744073709551615,"nested":{"deep":"x"},"list":[1,2]}}"#,
        )
        .unwrap()
    }

    /// Evaluates `ops` with the given constants against the test event, and
    /// state `["parked"]`, by plan (the product's evaluator); the oracle
    /// must give the same answer, or, for a program without a plan, fail
    /// too.
    fn run_with(consts: &[C], ops: Vec<Op>) -> Result<Value<'static>, EvalError> {
        let event = event();
        let state = vec!["parked".to_string()];
        let p = program(ops);
        let planned = eval(&p, consts, &event, &state).map(owned);
        let oracle = oracle::eval(&p, consts, &event, &state).map(owned);
        match (&planned, &oracle) {
            (Err(EvalError::Malformed { .. }), _) => assert!(oracle.is_err(), "{p:?}: {oracle:?}"),
            // NaN is the one value unequal to itself.
            (Ok(Value::Float(a)), Ok(Value::Float(b))) if a.is_nan() => assert!(b.is_nan()),
            _ => assert_eq!(planned, oracle, "{p:?}"),
        }
        planned
    }

    fn owned(v: Value<'_>) -> Value<'static> {
        match v {
            Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
            Value::Int(i) => Value::Int(i),
            Value::Float(f) => Value::Float(f),
            Value::Bool(b) => Value::Bool(b),
            Value::Empty => Value::Empty,
        }
    }

    fn s(text: &str) -> Value<'static> {
        Value::Str(Cow::Owned(text.to_string()))
    }

    /// `a op b` over constants.
    fn bin(a: C, op: Op, b: C) -> Result<Value<'static>, EvalError> {
        run_with(&[a, b], vec![Const(0), Const(1), op])
    }

    #[test]
    fn an_evaluation_builds_at_most_its_bound_of_text() {
        // A 60 KB event field, joined to itself again and again.
        let big = "x".repeat(60_000);
        let payload = format!(r#"{{"topic":"t","data":{{"big":"{big}"}}}}"#);
        let event = Event::decode(payload.as_bytes()).unwrap();
        let consts = [C::Path(vec!["big".into()]), C::Str(big.clone())];
        let mut ops = vec![Data(0)];
        for _ in 0..40 {
            ops.extend([Data(0), Add]);
        }
        ops.extend([Const(1), Eq]);
        let too_much = Err(EvalError::TooMuchText {
            limit: MAX_BUILT_BYTES,
        });
        assert_eq!(eval_bool(&program(ops), &consts, &event, &[]), too_much);
        // Seventeen parts (1 MB) are fine.
        let mut ops = vec![Data(0)];
        for _ in 0..16 {
            ops.extend([Data(0), Add]);
        }
        ops.extend([Const(1), Eq]);
        assert_eq!(eval_bool(&program(ops), &consts, &event, &[]), Ok(false));
        // A constant bomb: one large constant, upper-cased and joined.
        let bomb = [C::Str("ß".repeat(300_000))];
        let mut ops = vec![Const(0)];
        for _ in 0..1000 {
            ops.extend([Const(0), Call(Builtin::ToUppercase, 1), Add]);
        }
        ops.extend([Const(0), Eq]);
        assert_eq!(eval_bool(&program(ops), &bomb, &event, &[]), too_much);
    }

    #[test]
    fn add_ints_floats_strings() {
        assert_eq!(bin(C::Int(2), Add, C::Int(3)), Ok(Value::Int(5)));
        assert_eq!(bin(C::Int(2), Add, C::Float(0.5)), Ok(Value::Float(2.5)));
        assert_eq!(bin(C::Float(0.5), Add, C::Int(2)), Ok(Value::Float(2.5)));
        assert_eq!(
            bin(C::Str("ab".into()), Add, C::Str("cd".into())),
            Ok(s("abcd"))
        );
        assert_eq!(
            bin(C::Str("ab".into()), Add, C::Str("".into())),
            Ok(s("ab"))
        );
        assert!(matches!(
            bin(C::Str("a".into()), Add, C::Int(1)),
            Err(EvalError::Mismatch { op: "+", .. })
        ));
        assert!(matches!(
            bin(C::Bool(true), Add, C::Int(1)),
            Err(EvalError::Type { op: "+", .. })
        ));
        assert_eq!(
            bin(C::Int(i64::MAX), Add, C::Int(1)),
            Err(EvalError::Overflow { op: "+" })
        );
    }

    #[test]
    fn sub_mul_checked() {
        assert_eq!(bin(C::Int(2), Sub, C::Int(3)), Ok(Value::Int(-1)));
        assert_eq!(bin(C::Int(2), Sub, C::Float(0.5)), Ok(Value::Float(1.5)));
        assert_eq!(
            bin(C::Int(i64::MIN), Sub, C::Int(1)),
            Err(EvalError::Overflow { op: "-" })
        );
        assert_eq!(bin(C::Int(4), Mul, C::Int(3)), Ok(Value::Int(12)));
        assert_eq!(bin(C::Float(1.5), Mul, C::Int(2)), Ok(Value::Float(3.0)));
        assert_eq!(
            bin(C::Int(i64::MAX), Mul, C::Int(2)),
            Err(EvalError::Overflow { op: "*" })
        );
        assert!(matches!(
            bin(C::Str("a".into()), Sub, C::Str("b".into())),
            Err(EvalError::Type { op: "-", .. })
        ));
        assert!(matches!(
            bin(C::Str("a".into()), Mul, C::Int(2)),
            Err(EvalError::Type { op: "*", .. })
        ));
    }

    #[test]
    fn div_and_mod() {
        assert_eq!(bin(C::Int(7), Div, C::Int(2)), Ok(Value::Int(3)));
        assert_eq!(bin(C::Int(-7), Div, C::Int(2)), Ok(Value::Int(-3)));
        assert_eq!(bin(C::Int(7), Div, C::Float(2.0)), Ok(Value::Float(3.5)));
        assert_eq!(
            bin(C::Int(7), Div, C::Int(0)),
            Err(EvalError::DivisionByZero { what: "division" })
        );
        assert_eq!(
            bin(C::Int(i64::MIN), Div, C::Int(-1)),
            Err(EvalError::Overflow { op: "/" })
        );
        assert_eq!(
            bin(C::Int(1), Div, C::Float(0.0)),
            Ok(Value::Float(f64::INFINITY))
        );
        assert_eq!(bin(C::Int(-7), Mod, C::Int(3)), Ok(Value::Int(-1)));
        assert_eq!(bin(C::Float(7.5), Mod, C::Int(2)), Ok(Value::Float(1.5)));
        assert_eq!(
            bin(C::Int(7), Mod, C::Int(0)),
            Err(EvalError::DivisionByZero { what: "remainder" })
        );
        assert_eq!(
            bin(C::Int(i64::MIN), Mod, C::Int(-1)),
            Err(EvalError::Overflow { op: "%" })
        );
        assert!(matches!(
            bin(C::Float(1.0), Mod, C::Float(0.0)),
            Ok(Value::Float(f)) if f.is_nan()
        ));
    }

    #[test]
    fn pow_is_always_float() {
        assert_eq!(bin(C::Int(2), Pow, C::Int(10)), Ok(Value::Float(1024.0)));
        assert_eq!(
            bin(C::Float(4.0), Pow, C::Float(0.5)),
            Ok(Value::Float(2.0))
        );
        assert!(matches!(
            bin(C::Str("2".into()), Pow, C::Int(2)),
            Err(EvalError::Type { op: "^", .. })
        ));
    }

    #[test]
    fn equality_is_typed() {
        assert_eq!(bin(C::Int(1), Eq, C::Int(1)), Ok(Value::Bool(true)));
        assert_eq!(bin(C::Int(1), Eq, C::Float(1.0)), Ok(Value::Bool(false)));
        assert_eq!(bin(C::Int(1), Ne, C::Float(1.0)), Ok(Value::Bool(true)));
        assert_eq!(
            bin(C::Str("a".into()), Eq, C::Str("a".into())),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            bin(C::Str("1".into()), Eq, C::Int(1)),
            Ok(Value::Bool(false))
        );
        assert_eq!(bin(C::Bool(true), Eq, C::Bool(true)), Ok(Value::Bool(true)));
        assert_eq!(
            bin(C::Float(f64::NAN), Eq, C::Float(f64::NAN)),
            Ok(Value::Bool(false))
        );
        assert_eq!(
            bin(C::Float(0.0), Eq, C::Float(-0.0)),
            Ok(Value::Bool(true))
        );
    }

    #[test]
    fn ordering_across_types() {
        assert_eq!(bin(C::Int(1), Lt, C::Int(2)), Ok(Value::Bool(true)));
        assert_eq!(bin(C::Int(2), Le, C::Int(2)), Ok(Value::Bool(true)));
        assert_eq!(bin(C::Int(2), Gt, C::Float(1.5)), Ok(Value::Bool(true)));
        assert_eq!(bin(C::Float(2.0), Ge, C::Int(2)), Ok(Value::Bool(true)));
        assert_eq!(
            bin(C::Str("abc".into()), Lt, C::Str("abd".into())),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            bin(C::Str("B".into()), Gt, C::Str("a".into())),
            Ok(Value::Bool(false)),
            "bytewise: uppercase sorts first"
        );
        assert!(matches!(
            bin(C::Str("1".into()), Lt, C::Int(2)),
            Err(EvalError::Mismatch { op: "<", .. })
        ));
        assert!(matches!(
            bin(C::Bool(false), Lt, C::Bool(true)),
            Err(EvalError::Type { op: "<", .. })
        ));
        for op in [Lt, Le, Gt, Ge] {
            assert_eq!(
                bin(C::Float(f64::NAN), op, C::Int(1)),
                Ok(Value::Bool(false))
            );
        }
        // Large ints compare exactly, not via f64.
        assert_eq!(
            bin(C::Int(i64::MAX), Gt, C::Int(i64::MAX - 1)),
            Ok(Value::Bool(true))
        );
    }

    #[test]
    fn not_and_neg() {
        assert_eq!(
            run_with(&[C::Bool(true)], vec![Const(0), Not]),
            Ok(Value::Bool(false))
        );
        assert!(matches!(
            run_with(&[C::Int(1)], vec![Const(0), Not]),
            Err(EvalError::Type { op: "!", .. })
        ));
        assert_eq!(
            run_with(&[C::Int(5)], vec![Const(0), Neg]),
            Ok(Value::Int(-5))
        );
        assert_eq!(
            run_with(&[C::Float(0.5)], vec![Const(0), Neg]),
            Ok(Value::Float(-0.5))
        );
        assert_eq!(
            run_with(&[C::Int(i64::MIN)], vec![Const(0), Neg]),
            Err(EvalError::Overflow { op: "-" })
        );
        assert!(matches!(
            run_with(&[C::Str("a".into())], vec![Const(0), Neg]),
            Err(EvalError::Type { op: "-", .. })
        ));
    }

    #[test]
    fn event_fields_and_state() {
        assert_eq!(
            run_with(&[], vec![Field(EventField::Topic)]),
            Ok(s("alarm.triggered"))
        );
        assert_eq!(run_with(&[], vec![Field(EventField::Src)]), Ok(s("alarm")));
        assert_eq!(
            run_with(&[], vec![Field(EventField::From)]),
            Ok(s("")),
            "absent is empty string"
        );
        assert_eq!(run_with(&[], vec![Field(EventField::To)]), Ok(s("level-2")));
        assert_eq!(run_with(&[], vec![State(0)]), Ok(s("parked")));
        assert!(matches!(
            run_with(&[], vec![State(1)]),
            Err(EvalError::Malformed { .. })
        ));
    }

    fn data(path: &[&str]) -> Result<Value<'static>, EvalError> {
        let path = C::Path(path.iter().map(|p| p.to_string()).collect());
        run_with(&[path], vec![Data(0)])
    }

    #[test]
    fn data_values_map_from_json() {
        assert_eq!(data(&["level"]), Ok(Value::Int(2)));
        assert_eq!(data(&["temp"]), Ok(Value::Float(21.5)));
        assert_eq!(data(&["name"]), Ok(s("Bob")));
        assert_eq!(data(&["on"]), Ok(Value::Bool(true)));
        assert_eq!(data(&["nil"]), Ok(Value::Empty));
        assert_eq!(data(&["missing"]), Ok(Value::Empty));
        assert_eq!(data(&["level", "below"]), Ok(Value::Empty));
        assert_eq!(data(&["nested", "deep"]), Ok(s("x")));
        assert_eq!(
            data(&["big"]),
            Ok(Value::Float(18446744073709551615.0)),
            "beyond i64 is a float"
        );
        assert!(matches!(
            data(&["nested"]),
            Err(EvalError::DataNotScalar {
                kind: "an object",
                ..
            })
        ));
        assert!(matches!(
            data(&["list"]),
            Err(EvalError::DataNotScalar {
                kind: "an array",
                ..
            })
        ));
    }

    #[test]
    fn empty_only_compares_equal() {
        let consts = [C::Path(vec!["missing".into()]), C::Int(1)];
        assert_eq!(
            run_with(&consts, vec![Data(0), Data(0), Eq]),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run_with(&consts, vec![Data(0), Const(1), Eq]),
            Ok(Value::Bool(false))
        );
        for op in [Add, Sub, Mul, Div, Mod, Pow, Lt, Le, Gt, Ge] {
            assert!(
                matches!(
                    run_with(&consts, vec![Data(0), Const(1), op]),
                    Err(EvalError::Type { .. })
                ),
                "{op:?}"
            );
        }
        assert!(run_with(&consts, vec![Data(0), Neg]).is_err());
        assert!(run_with(&consts, vec![Data(0), Not]).is_err());
    }

    /// `a && b` / `a || b` as the compiler lowers them.
    fn logic(jump: fn(u32) -> Op, a: C, b: C) -> Result<Value<'static>, EvalError> {
        run_with(&[a, b], vec![Const(0), jump(4), Const(1), AssertBool])
    }

    #[test]
    fn and_or_short_circuit() {
        let t = || C::Bool(true);
        let f = || C::Bool(false);
        assert_eq!(logic(AndJump, t(), t()), Ok(Value::Bool(true)));
        assert_eq!(logic(AndJump, t(), f()), Ok(Value::Bool(false)));
        assert_eq!(logic(AndJump, f(), t()), Ok(Value::Bool(false)));
        assert_eq!(logic(OrJump, f(), f()), Ok(Value::Bool(false)));
        assert_eq!(logic(OrJump, f(), t()), Ok(Value::Bool(true)));
        assert_eq!(logic(OrJump, t(), f()), Ok(Value::Bool(true)));
        // The right side is never evaluated once the left decides.
        assert_eq!(logic(AndJump, f(), C::Int(1)), Ok(Value::Bool(false)));
        assert_eq!(logic(OrJump, t(), C::Int(1)), Ok(Value::Bool(true)));
        // Otherwise both sides must be booleans.
        assert!(matches!(
            logic(AndJump, t(), C::Int(1)),
            Err(EvalError::Type { .. })
        ));
        assert!(matches!(
            logic(AndJump, C::Int(1), t()),
            Err(EvalError::Type { op: "&&", .. })
        ));
        assert!(matches!(
            logic(OrJump, C::Str("x".into()), t()),
            Err(EvalError::Type { op: "||", .. })
        ));
    }

    fn call1(builtin: Builtin, arg: C) -> Result<Value<'static>, EvalError> {
        run_with(&[arg], vec![Const(0), Call(builtin, 1)])
    }

    fn calln(builtin: Builtin, args: Vec<C>) -> Result<Value<'static>, EvalError> {
        let n = args.len();
        let mut ops: Vec<Op> = (0..n as u32).map(Const).collect();
        ops.push(Call(builtin, n as u8));
        run_with(&args, ops)
    }

    #[test]
    fn string_builtins() {
        assert_eq!(
            call1(Builtin::Len, C::Str("héllo".into())),
            Ok(Value::Int(6))
        );
        assert!(matches!(
            call1(Builtin::Len, C::Int(5)),
            Err(EvalError::Type { .. })
        ));
        assert_eq!(
            call1(Builtin::ToLowercase, C::Str("ÄbC".into())),
            Ok(s("äbc"))
        );
        assert_eq!(
            call1(Builtin::ToLowercase, C::Str("abc".into())),
            Ok(s("abc"))
        );
        assert_eq!(
            call1(Builtin::ToUppercase, C::Str("straße".into())),
            Ok(s("STRASSE"))
        );
        assert_eq!(
            call1(Builtin::Trim, C::Str("  a b \n".into())),
            Ok(s("a b"))
        );
        assert!(call1(Builtin::Trim, C::Bool(true)).is_err());
        let two = |a: &str, b: &str| vec![C::Str(a.into()), C::Str(b.into())];
        assert_eq!(
            calln(Builtin::StartsWith, two("alarm.x", "alarm.")),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            calln(Builtin::EndsWith, two("alarm.x", "alarm")),
            Ok(Value::Bool(false))
        );
        assert_eq!(
            calln(Builtin::Contains, two("alarm.x", "m.")),
            Ok(Value::Bool(true))
        );
        assert!(calln(Builtin::Contains, vec![C::Str("a".into()), C::Int(1)]).is_err());
    }

    #[test]
    fn number_builtins() {
        assert_eq!(call1(Builtin::Floor, C::Float(1.7)), Ok(Value::Float(1.0)));
        assert_eq!(call1(Builtin::Floor, C::Int(3)), Ok(Value::Float(3.0)));
        assert_eq!(call1(Builtin::Ceil, C::Float(1.2)), Ok(Value::Float(2.0)));
        assert_eq!(call1(Builtin::Round, C::Float(2.5)), Ok(Value::Float(3.0)));
        assert_eq!(
            call1(Builtin::Round, C::Float(-2.5)),
            Ok(Value::Float(-3.0))
        );
        assert!(call1(Builtin::Round, C::Str("1".into())).is_err());
        assert_eq!(call1(Builtin::Abs, C::Int(-3)), Ok(Value::Int(3)));
        assert_eq!(call1(Builtin::Abs, C::Float(-0.5)), Ok(Value::Float(0.5)));
        assert_eq!(
            call1(Builtin::Abs, C::Int(i64::MIN)),
            Err(EvalError::Overflow { op: "math::abs" })
        );
        assert!(call1(Builtin::Abs, C::Bool(true)).is_err());
    }

    #[test]
    fn min_max_follow_evalexpr() {
        use Builtin::{Max, Min};
        assert_eq!(calln(Min, vec![C::Int(3), C::Int(1)]), Ok(Value::Int(1)));
        assert_eq!(calln(Max, vec![C::Int(3), C::Int(1)]), Ok(Value::Int(3)));
        assert_eq!(
            calln(Min, vec![C::Int(3), C::Float(1.5)]),
            Ok(Value::Float(1.5))
        );
        assert_eq!(
            calln(Min, vec![C::Int(1), C::Float(1.0)]),
            Ok(Value::Float(1.0)),
            "a tie goes to the float"
        );
        assert_eq!(
            calln(Max, vec![C::Float(2.0), C::Int(3), C::Float(2.5)]),
            Ok(Value::Int(3))
        );
        assert_eq!(
            calln(Min, vec![C::Float(1.0), C::Float(f64::NAN)]),
            Ok(Value::Float(1.0))
        );
        assert_eq!(
            calln(Min, vec![C::Float(f64::NAN), C::Float(f64::NAN)]),
            Ok(Value::Int(i64::MAX)),
            "evalexpr's quirk: no usable float, so the int sentinel wins"
        );
        assert!(calln(Min, vec![C::Int(1), C::Str("2".into())]).is_err());
        assert!(matches!(
            calln(Min, vec![C::Int(1)]),
            Err(EvalError::Arity { .. })
        ));
    }

    #[test]
    fn if_picks_a_branch() {
        let args = |c| vec![C::Bool(c), C::Int(1), C::Str("x".into())];
        assert_eq!(calln(Builtin::If, args(true)), Ok(Value::Int(1)));
        assert_eq!(calln(Builtin::If, args(false)), Ok(s("x")));
        assert!(calln(Builtin::If, vec![C::Int(1), C::Int(1), C::Int(2)]).is_err());
        assert!(matches!(
            calln(Builtin::If, vec![C::Bool(true), C::Int(1)]),
            Err(EvalError::Arity { .. })
        ));
    }

    #[test]
    fn eval_bool_wants_a_boolean() {
        let e = event();
        let consts = [C::Int(1), C::Bool(true)];
        let p = program(vec![Const(1)]);
        assert_eq!(eval_bool(&p, &consts, &e, &[]), Ok(true));
        let p = program(vec![Const(0)]);
        assert_eq!(
            eval_bool(&p, &consts, &e, &[]),
            Err(EvalError::NotBool { found: "int" })
        );
    }

    #[test]
    fn malformed_programs_error_instead_of_panicking() {
        let consts = [C::Int(1), C::Path(vec!["a".into()])];
        let bad: Vec<Vec<Op>> = vec![
            vec![],
            vec![Add],
            vec![Const(0), Add],
            vec![Not],
            vec![Call(Builtin::Len, 1)],
            vec![Const(9)],
            vec![Const(1)],
            vec![Data(0)],
            vec![Const(0), Const(0)],
            vec![AssertBool],
            vec![AndJump(0)],
        ];
        for ops in bad {
            let r = run_with(&consts, ops.clone());
            assert!(r.is_err(), "{ops:?} gave {r:?}");
        }
        // Backward and out-of-range jumps are refused, not followed.
        let consts = [C::Bool(false)];
        assert!(matches!(
            run_with(&consts, vec![Const(0), AndJump(0)]),
            Err(EvalError::Malformed { .. })
        ));
        assert!(matches!(
            run_with(&consts, vec![Const(0), AndJump(9)]),
            Err(EvalError::Malformed { .. })
        ));
    }

    #[test]
    fn deep_programs_fall_back_to_the_heap() {
        let n = INLINE_STACK * 2;
        let mut ops = vec![Const(0); n];
        ops.extend(std::iter::repeat_n(Add, n - 1));
        assert_eq!(run_with(&[C::Int(1)], ops), Ok(Value::Int(n as i64)));
    }

    #[test]
    fn built_strings_chain_and_nest() {
        let consts = [
            C::Str("ab".into()),
            C::Str("/".into()),
            C::Str("cd".into()),
            C::Str("ÄB".into()),
        ];
        // ((ab + /) + cd) + /: extended in place.
        let chain = vec![Const(0), Const(1), Add, Const(2), Add, Const(1), Add];
        assert_eq!(run_with(&consts, chain), Ok(s("ab/cd/")));
        // (ab + /) + (cd + ab): two built strings joined, the first kept.
        let nested = vec![Const(0), Const(1), Add, Const(2), Const(0), Add, Add];
        assert_eq!(run_with(&consts, nested), Ok(s("ab/cdab")));
        // lower(ÄB) + / == "äb/", and the built left side is unchanged by
        // being compared.
        let mixed = vec![
            Const(3),
            Call(Builtin::ToLowercase, 1),
            Const(1),
            Add,
            Const(3),
            Call(Builtin::ToLowercase, 1),
            Const(1),
            Add,
            Eq,
        ];
        assert_eq!(run_with(&consts, mixed), Ok(Value::Bool(true)));
        // if(true, built, other) + /: the picked built string grows alone.
        let picked = vec![
            C::Bool(true),
            C::Str("x".into()),
            C::Str("y".into()),
            C::Str("z".into()),
        ];
        let ops = vec![
            Const(0),
            Const(1),
            Const(2),
            Add,
            Const(3),
            Const(1),
            Add,
            Call(Builtin::If, 3),
            Const(2),
            Add,
        ];
        assert_eq!(run_with(&picked, ops), Ok(s("xyy")));
    }

    /// The inlined fast path must give exactly what `binary` gives, on
    /// every operator and every pair of interesting values.
    #[test]
    fn fast_binary_agrees_with_binary() {
        let values = [
            Slot::Int(0),
            Slot::Int(1),
            Slot::Int(-1),
            Slot::Int(7),
            Slot::Int(i64::MAX),
            Slot::Int(i64::MIN),
            Slot::Float(0.0),
            Slot::Float(-0.0),
            Slot::Float(1.0),
            Slot::Float(2.5),
            Slot::Float(f64::NAN),
            Slot::Float(f64::INFINITY),
            Slot::Str(""),
            Slot::Str("a"),
            Slot::Str("b"),
            Slot::Bool(true),
            Slot::Empty,
        ];
        let ops = [Add, Sub, Mul, Div, Mod, Pow, Eq, Ne, Lt, Le, Gt, Ge];
        let event = Event::default();
        let mut scratch = Vec::new();
        let mut machine = Machine {
            consts: &[],
            event: &event,
            state: &[],
            scratch: &mut scratch,
            built: 0,
        };
        let mut fast = 0;
        for op in ops {
            for a in values {
                for b in values {
                    let Some(got) = fast_binary(op, a, b) else {
                        continue;
                    };
                    fast += 1;
                    let want = machine.binary(op, a, b);
                    let same = match (got, &want) {
                        (Slot::Float(x), Ok(Slot::Float(y))) => x.to_bits() == y.to_bits(),
                        (Slot::Int(x), Ok(Slot::Int(y))) => x == *y,
                        (Slot::Bool(x), Ok(Slot::Bool(y))) => x == *y,
                        _ => false,
                    };
                    assert!(same, "{op:?} {a:?} {b:?}: fast {got:?}, binary {want:?}");
                }
            }
        }
        // The fast path does take the common cases.
        assert!(fast > 300, "{fast}");
    }
}
