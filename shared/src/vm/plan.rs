//! A `when` program translated once, at load, into a form the VM runs with
//! fewer steps (docs/engine.md#the-when-plan). The bundle's bytecode stays
//! as it is (it is fingerprinted); the plan is the engine's own copy.
//!
//! - `x <op> constant` is one step, and so are `data.k <op> constant`,
//!   `field <op> constant` and `x <op> data.k`: the shapes nearly every
//!   condition is made of.
//! - A constant is decoded once: ints, floats and booleans are held in the
//!   step, strings by their pool index.
//! - Jumps name step indices; the boolean check after a comparison is
//!   dropped (a comparison gives a boolean or an error).
//!
//! The plan is the one evaluator of product code: every `when`, step
//! condition, guard, computed value and profile expression runs as a plan,
//! made once at load where the program is judged per event, or just before
//! its one use. Each step does what its ops do in the bytecode's
//! definition, through the same functions; the op-by-op interpreter in
//! `vm::oracle` is its test oracle (compiler/tests/differential.rs and
//! the VM's unit tests hold the two together). A program the translation
//! cannot prove well formed (stack depth, constant kinds, jump targets)
//! gets no plan; every bundle is verified at load, so that only happens to
//! a program built by hand, which then fails to evaluate
//! ([`EvalError::Malformed`]).

use super::{fast_binary, neg, not, push, top_mut, type_error, Machine, Slot, Stop};
use crate::bytecode::{Builtin, Const, EventField, Op, Program};
use crate::event::Event;
use crate::verify::MAX_STACK;
use crate::vm::{EvalError, Value, INLINE_STACK};

/// A constant, decoded.
#[derive(Debug, Clone, Copy)]
enum Lit {
    /// The pool index of a `Const::Str`.
    Str(u32),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// One step of a plan.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// An op the plan runs as the bytecode does (never `Const` or a jump).
    Op(Op),
    /// `Const`: push the constant.
    Push(Lit),
    /// `Const`, then a binary operator: the top becomes `top <op> constant`.
    WithLit(Op, Lit),
    /// `Data(path)`, `Const`, a binary operator.
    DataWithLit(u32, Op, Lit),
    /// `Field(field)`, `Const`, a binary operator.
    FieldWithLit(EventField, Op, Lit),
    /// `Data(path)`, then a binary operator: the top becomes
    /// `top <op> data`.
    WithData(Op, u32),
    /// `AndJump` / `OrJump` to a step index.
    AndJump(u32),
    OrJump(u32),
}

/// A translated `when` program (see the module docs).
#[derive(Debug, Clone)]
pub struct Plan {
    steps: Box<[Step]>,
    /// The most values on the stack at once: most conditions need two, and
    /// a small stack is cheaper to set up.
    depth: u16,
}

/// The stack of a plan of at most this depth is this long.
const SHALLOW: usize = 4;

/// What translation notes of each op index (and of the end,
/// `ops.len()`).
#[derive(Debug, Clone, Copy)]
struct Meta {
    /// The stack depth on entry; [`UNREACHED`] while no path reaches it.
    entry: u16,
    /// A jump lands here: only the first op of a fused group may be one.
    target: bool,
    /// The step this op index starts (for jumps).
    step: u32,
}

const UNREACHED: u16 = u16::MAX;

impl Meta {
    const FRESH: Meta = Meta {
        entry: UNREACHED,
        target: false,
        step: 0,
    };
}

/// Programs this short are planned on the native stack when they are
/// planned for one evaluation ([`eval_once`]): nothing is allocated.
const SHORT: usize = 16;

/// The most values on the stack at once, if the program is well formed:
/// no underflow, at most the verifier's [`MAX_STACK`] values, forward jumps in range that
/// arrive with the depth the fall-through has, one value at the end, and
/// every constant of the kind its op wants. `None` otherwise. Notes each
/// op's entry depth and jump targets in `meta` (`ops.len() + 1` long,
/// [`Meta::FRESH`]).
fn max_depth(ops: &[Op], consts: &[Const], meta: &mut [Meta]) -> Option<u16> {
    meta.first_mut()?.entry = 0;
    let mut deepest = 0;
    let arrive = |meta: &mut [Meta], at: usize, depth: usize| -> Option<()> {
        let slot = meta.get_mut(at)?;
        let depth = u16::try_from(depth).ok()?;
        match slot.entry {
            UNREACHED => {
                slot.entry = depth;
                Some(())
            }
            known if known == depth => Some(()),
            _ => None,
        }
    };
    for (pc, op) in ops.iter().enumerate() {
        // Every op is reached: jumps only skip forward over code that the
        // fall-through also runs on the other branch.
        let depth = match meta.get(pc)?.entry {
            UNREACHED => return None,
            depth => usize::from(depth),
        };
        let after = match *op {
            Op::Const(i) => {
                lit(consts, i)?;
                depth + 1
            }
            Op::Data(i) => {
                let Const::Path(_) = consts.get(i as usize)? else {
                    return None;
                };
                depth + 1
            }
            // A state index out of range is an evaluation-time error the
            // bytecode reports; the plan leaves it to the same code.
            Op::Field(_) | Op::State(_) => depth + 1,
            Op::Not | Op::Neg | Op::AssertBool => depth.checked_sub(1)? + 1,
            op if op.is_binary() => depth.checked_sub(2)? + 1,
            Op::AndJump(target) | Op::OrJump(target) => {
                let target = target as usize;
                if target <= pc || target > ops.len() {
                    return None;
                }
                depth.checked_sub(1)?;
                arrive(meta, target, depth)?;
                meta.get_mut(target)?.target = true;
                depth - 1
            }
            Op::Call(_, n) => depth.checked_sub(usize::from(n))? + 1,
            _ => return None,
        };
        if after > MAX_STACK {
            return None;
        }
        deepest = deepest.max(after);
        arrive(meta, pc + 1, after)?;
    }
    if meta.last()?.entry != 1 {
        return None;
    }
    u16::try_from(deepest).ok()
}

/// Translates `ops` into `steps` (at least `ops.len()` long), with `meta`
/// as [`max_depth`] wants it; the number of steps and the depth, or `None`
/// if the program is not well formed.
fn translate(
    ops: &[Op],
    consts: &[Const],
    meta: &mut [Meta],
    steps: &mut [Step],
) -> Option<(usize, u16)> {
    let depth = max_depth(ops, consts, meta)?;
    let mut len = 0usize;
    let mut pc = 0;
    while let Some(&op) = ops.get(pc) {
        meta.get_mut(pc)?.step = u32::try_from(len).ok()?;
        let landed = |at: usize| meta.get(at).is_some_and(|m| m.target);
        let next = |k: usize| ops.get(pc + k).copied().filter(|_| !landed(pc + k));
        let (step, width) = match (op, next(1), next(2)) {
            (Op::Data(path), Some(Op::Const(c)), Some(bin)) if bin.is_binary() => {
                (Step::DataWithLit(path, bin, lit(consts, c)?), 3)
            }
            (Op::Field(field), Some(Op::Const(c)), Some(bin)) if bin.is_binary() => {
                (Step::FieldWithLit(field, bin, lit(consts, c)?), 3)
            }
            (Op::Data(path), Some(bin), _) if bin.is_binary() => (Step::WithData(bin, path), 2),
            (Op::Const(c), Some(bin), _) if bin.is_binary() => {
                (Step::WithLit(bin, lit(consts, c)?), 2)
            }
            (Op::Const(c), _, _) => (Step::Push(lit(consts, c)?), 1),
            (Op::AndJump(t), _, _) => (Step::AndJump(t), 1),
            (Op::OrJump(t), _, _) => (Step::OrJump(t), 1),
            // The right side of `&&` / `||` is a comparison, which
            // only ever gives a boolean: its check has nothing to do.
            (Op::AssertBool, _, _)
                if !landed(pc) && len > 0 && steps.get(len - 1).is_some_and(compares) =>
            {
                pc += 1;
                continue;
            }
            (op, _, _) => (Step::Op(op), 1),
        };
        // The ops a group swallows are never jumped to: record them
        // anyway, so that a lookup cannot read a stale index.
        for k in 1..width {
            meta.get_mut(pc + k)?.step = u32::try_from(len).ok()?;
        }
        *steps.get_mut(len)? = step;
        len += 1;
        pc += width;
    }
    meta.last_mut()?.step = u32::try_from(len).ok()?;
    // Jumps named op indices: now they name steps.
    for step in steps.get_mut(..len)? {
        *step = match *step {
            Step::AndJump(t) => Step::AndJump(meta.get(t as usize)?.step),
            Step::OrJump(t) => Step::OrJump(meta.get(t as usize)?.step),
            other => other,
        };
    }
    Some((len, depth))
}

/// Evaluates `program` by a plan made for this one evaluation: on the
/// native stack for a short program, else a [`Plan`] made and dropped.
pub(super) fn eval_once<'a>(
    program: &Program,
    consts: &'a [Const],
    event: &'a Event,
    state: &'a [String],
    scratch: &mut Vec<String>,
) -> Result<Slot<'a>, EvalError> {
    let ops = &program.ops;
    if ops.len() > SHORT {
        return Plan::checked(program, consts)?.run(consts, event, state, scratch);
    }
    let mut meta = [Meta::FRESH; SHORT + 1];
    let mut steps = [Step::Op(Op::Not); SHORT];
    let (len, depth) = meta
        .get_mut(..=ops.len())
        .and_then(|meta| translate(ops, consts, meta, &mut steps))
        .ok_or(Plan::UNPLANNED)?;
    let steps = steps.get(..len).ok_or(Plan::UNPLANNED)?;
    run_steps(steps, depth, consts, event, state, scratch)
}

// Inlined into each evaluation, as the loop it wraps: returning the
// large `Result` through memory from a call cost a twentieth of a short
// plan (callgrind, `shared/benches/when_eval.rs`).
#[inline(always)]
fn run_steps<'a>(
    steps: &[Step],
    depth: u16,
    consts: &'a [Const],
    event: &'a Event,
    state: &'a [String],
    scratch: &mut Vec<String>,
) -> Result<Slot<'a>, EvalError> {
    let mut machine = Machine::new(consts, event, state, scratch);
    let depth = usize::from(depth);
    let result = if depth <= SHALLOW {
        machine.run_plan(steps, &mut [Slot::Empty; SHALLOW])
    } else if depth <= INLINE_STACK {
        machine.run_plan(steps, &mut [Slot::Empty; INLINE_STACK])
    } else {
        return run_deep(steps, depth, machine);
    };
    result.map_err(Stop::into_eval_error)
}

/// A plan deeper than any readable `when` (the compiler's 256 tokens
/// rarely pass 16 values): its stack on the heap, as deep as it needs.
#[cold]
#[inline(never)]
fn run_deep<'a>(
    steps: &[Step],
    depth: usize,
    mut machine: Machine<'a, '_>,
) -> Result<Slot<'a>, EvalError> {
    machine
        .run_plan(steps, &mut vec![Slot::Empty; depth])
        .map_err(Stop::into_eval_error)
}

/// Whether a step's result is always a boolean (or an error): a comparison
/// of the value with a constant.
fn compares(step: &Step) -> bool {
    let op = match *step {
        Step::WithLit(op, _) | Step::DataWithLit(_, op, _) | Step::FieldWithLit(_, op, _) => op,
        _ => return false,
    };
    matches!(op, Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge)
}

fn lit(consts: &[Const], i: u32) -> Option<Lit> {
    Some(match consts.get(i as usize)? {
        Const::Str(_) => Lit::Str(i),
        Const::Int(n) => Lit::Int(*n),
        Const::Float(f) => Lit::Float(*f),
        Const::Bool(b) => Lit::Bool(*b),
        Const::Path(_) => return None,
    })
}

impl Plan {
    /// Translates `program` (whose constants are in `consts`); `None` if it
    /// is not well formed (see the module docs).
    pub fn new(program: &Program, consts: &[Const]) -> Option<Plan> {
        let ops = &program.ops;
        let mut meta = vec![Meta::FRESH; ops.len() + 1];
        let mut steps = vec![Step::Op(Op::Not); ops.len()];
        let (len, depth) = translate(ops, consts, &mut meta, &mut steps)?;
        steps.truncate(len);
        Some(Plan {
            steps: steps.into_boxed_slice(),
            depth,
        })
    }

    /// The heap this plan holds (docs/engine.md#the-when-plan).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.steps)
    }

    /// [`Plan::new`], or the error evaluating a program without a plan
    /// gives (only a hand-built, unverified program has none).
    pub(super) fn checked(program: &Program, consts: &[Const]) -> Result<Plan, EvalError> {
        Plan::new(program, consts).ok_or(Plan::UNPLANNED)
    }

    /// What evaluating a program without a plan gives.
    const UNPLANNED: EvalError = EvalError::Malformed {
        pc: 0,
        reason: "not well formed (a bundle's programs are verified at load)",
    };

    /// Evaluates the plan to a boolean (a `when`, a guard, an emit's
    /// condition).
    pub fn eval_bool(
        &self,
        consts: &[Const],
        event: &Event,
        state: &[String],
    ) -> Result<bool, EvalError> {
        let mut scratch = Vec::new();
        let result = self
            .run(consts, event, state, &mut scratch)
            .and_then(Slot::boolean);
        // Nearly every evaluation builds no string: its empty list owns no
        // memory, and skipping its drop saves a call into the allocator's
        // code (a tenth of a one-comparison condition, callgrind).
        if scratch.capacity() == 0 {
            std::mem::forget(scratch);
        }
        result
    }

    /// Evaluates the plan to its value (a step's computed text, a `per`
    /// key, a profile's `data` expression).
    pub fn eval<'a>(
        &self,
        consts: &'a [Const],
        event: &'a Event,
        state: &'a [String],
    ) -> Result<Value<'a>, EvalError> {
        let mut scratch = Vec::new();
        let slot = self.run(consts, event, state, &mut scratch)?;
        Ok(super::slot_value(slot, &mut scratch))
    }

    #[inline(always)]
    fn run<'a>(
        &self,
        consts: &'a [Const],
        event: &'a Event,
        state: &'a [String],
        scratch: &mut Vec<String>,
    ) -> Result<Slot<'a>, EvalError> {
        run_steps(&self.steps, self.depth, consts, event, state, scratch)
    }
}

impl<'a> Machine<'a, '_> {
    #[inline(always)]
    fn lit(&self, pc: usize, lit: Lit) -> Result<Slot<'a>, Stop> {
        Ok(match lit {
            Lit::Str(i) => self.constant(pc, i)?,
            Lit::Int(n) => Slot::Int(n),
            Lit::Float(f) => Slot::Float(f),
            Lit::Bool(b) => Slot::Bool(b),
        })
    }

    /// `a <op> b` as the bytecode's binary operators compute it.
    #[inline(always)]
    fn apply(&mut self, op: Op, a: Slot<'a>, b: Slot<'a>) -> Result<Slot<'a>, Stop> {
        match fast_binary(op, a, b) {
            Some(slot) => Ok(slot),
            None => Ok(self.binary(op, a, b)?),
        }
    }

    // Inlined into its two call sites, each with its own stack length:
    // the call and the register saves were a tenth of a short plan.
    #[inline(always)]
    fn run_plan(&mut self, steps: &[Step], stack: &mut [Slot<'a>]) -> Result<Slot<'a>, Stop> {
        let mut len = 0usize;
        let mut pc = 0usize;
        while let Some(step) = steps.get(pc) {
            let mut next = pc + 1;
            match *step {
                Step::DataWithLit(path, op, lit) => {
                    let a = self.data(pc, path)?;
                    let b = self.lit(pc, lit)?;
                    let result = self.apply(op, a, b)?;
                    push(stack, &mut len, result)?;
                }
                Step::FieldWithLit(field, op, lit) => {
                    let a = Slot::Str(self.field(field));
                    let b = self.lit(pc, lit)?;
                    let result = self.apply(op, a, b)?;
                    push(stack, &mut len, result)?;
                }
                Step::WithLit(op, lit) => {
                    let b = self.lit(pc, lit)?;
                    let a = *top_mut(stack, len, pc)?;
                    let result = self.apply(op, a, b)?;
                    *top_mut(stack, len, pc)? = result;
                }
                Step::WithData(op, path) => {
                    let b = self.data(pc, path)?;
                    let a = *top_mut(stack, len, pc)?;
                    let result = self.apply(op, a, b)?;
                    *top_mut(stack, len, pc)? = result;
                }
                Step::Push(lit) => {
                    let slot = self.lit(pc, lit)?;
                    push(stack, &mut len, slot)?;
                }
                Step::AndJump(target) | Step::OrJump(target) => {
                    let jump_on = matches!(step, Step::OrJump(_));
                    let top = *top_mut(stack, len, pc)?;
                    let Slot::Bool(b) = top else {
                        let name = if jump_on { "||" } else { "&&" };
                        return Err(type_error(name, "a boolean", top).into());
                    };
                    if b == jump_on {
                        next = target as usize;
                    } else {
                        len -= 1;
                    }
                }
                Step::Op(Op::AssertBool) => {
                    let top = *top_mut(stack, len, pc)?;
                    if !matches!(top, Slot::Bool(_)) {
                        return Err(type_error("&&/||", "a boolean", top).into());
                    }
                }
                Step::Op(Op::Data(i)) => {
                    let slot = self.data(pc, i)?;
                    push(stack, &mut len, slot)?;
                }
                Step::Op(op) if op.is_binary() => {
                    let (Some(b), Some(at)) = (len.checked_sub(1), len.checked_sub(2)) else {
                        return Err(super::malformed(pc, "stack underflow"));
                    };
                    let (Some(&x), Some(&y)) = (stack.get(at), stack.get(b)) else {
                        return Err(super::malformed(pc, "stack underflow"));
                    };
                    let result = self.apply(op, x, y)?;
                    len -= 1;
                    *top_mut(stack, len, pc)? = result;
                }
                // `len(string)`, the one call conditions commonly make.
                Step::Op(Op::Call(Builtin::Len, 1)) => {
                    let top = top_mut(stack, len, pc)?;
                    match (*top, i64::try_from(self.text(*top).map_or(0, str::len))) {
                        (Slot::Str(_) | Slot::Owned(_), Ok(n)) => *top = Slot::Int(n),
                        _ => self.plain(Op::Call(Builtin::Len, 1), pc, stack, &mut len)?,
                    }
                }
                Step::Op(op) => self.plain(op, pc, stack, &mut len)?,
            }
            pc = next;
        }
        match (len, stack.first()) {
            (1, Some(&slot)) => Ok(slot),
            _ => Err(super::malformed(
                pc,
                "the program must leave exactly one value",
            )),
        }
    }

    /// The ops a plan runs one by one, each as the bytecode defines it.
    #[inline(always)]
    fn plain(
        &mut self,
        op: Op,
        pc: usize,
        stack: &mut [Slot<'a>],
        len: &mut usize,
    ) -> Result<(), Stop> {
        match op {
            Op::Field(field) => push(stack, len, Slot::Str(self.field(field))),
            Op::State(i) => {
                let slot = self.state_slot(pc, i)?;
                push(stack, len, slot)
            }
            Op::Not => {
                let top = top_mut(stack, *len, pc)?;
                *top = not(*top)?;
                Ok(())
            }
            Op::Neg => {
                let top = top_mut(stack, *len, pc)?;
                *top = neg(*top)?;
                Ok(())
            }
            Op::Call(builtin, n) => {
                let n = usize::from(n);
                let args = len
                    .checked_sub(n)
                    .and_then(|from| stack.get(from..*len))
                    .ok_or_else(|| super::malformed(pc, "stack underflow"))?;
                let result = self.call(builtin, args)?;
                *len -= n;
                push(stack, len, result)
            }
            // `Const`, `Data`, the binary operators, the jumps and
            // `AssertBool` are taken in `run_plan`.
            _ => Err(super::malformed(pc, "not a plain op")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytecode::Op::{Add, AndJump, AssertBool, Data, Eq, Field, Gt, Lt, Not, OrJump};

    fn event() -> Event {
        Event::decode(br#"{"topic":"t","to":"parked","data":{"v":20,"s":"x"}}"#).unwrap()
    }

    fn consts() -> Vec<Const> {
        vec![
            Const::Path(vec!["v".into()]),
            Const::Int(10),
            Const::Str("parked".into()),
            Const::Int(50),
            Const::Path(vec!["s".into()]),
        ]
    }

    fn both(ops: Vec<Op>) -> (Result<bool, EvalError>, Result<bool, EvalError>) {
        let (program, consts, event) = (Program { ops }, consts(), event());
        let plan = Plan::new(&program, &consts).unwrap();
        (
            plan.eval_bool(&consts, &event, &[]),
            super::super::oracle::eval_bool(&program, &consts, &event, &[]),
        )
    }

    #[test]
    fn fused_steps_answer_as_the_bytecode() {
        // data.v > 10 && data.v < 50
        let range = vec![
            Data(0),
            Op::Const(1),
            Gt,
            AndJump(7),
            Data(0),
            Op::Const(3),
            Lt,
        ];
        assert_eq!(both(range), (Ok(true), Ok(true)));
        // to == "parked"
        assert_eq!(
            both(vec![Field(EventField::To), Op::Const(2), Eq]),
            (Ok(true), Ok(true))
        );
        // data.s > 10: a type error, the same in both
        let (plan, bytecode) = both(vec![Data(4), Op::Const(1), Gt]);
        assert!(plan.is_err());
        assert_eq!(plan, bytecode);
        // !(data.v + 10 > 10): the plain ops
        assert_eq!(
            both(vec![Data(0), Op::Const(1), Add, Op::Const(1), Gt, Not]),
            (Ok(false), Ok(false))
        );
    }

    #[test]
    fn a_jump_into_a_group_keeps_it_apart() {
        // `OrJump` lands on the `Const` of `Data, Const, Gt`: fused into one
        // step, the jump would run the `data` read again.
        for (a, b) in [(1, 3), (3, 1)] {
            let ops = vec![
                Op::Const(a),
                Op::Const(b),
                Lt,
                OrJump(5),
                Data(0),
                Op::Const(1),
                Gt,
                AssertBool,
            ];
            let (plan, bytecode) = both(ops);
            assert_eq!(plan, bytecode, "{a} {b}");
        }
    }

    #[test]
    fn malformed_programs_get_no_plan() {
        let c = consts();
        for ops in [
            vec![Gt],
            vec![Op::Const(0)],
            vec![Data(1)],
            vec![Op::Const(9)],
            vec![Op::Const(1), Op::Const(1)],
            vec![Op::Const(1), AndJump(0)],
            vec![Op::Const(1), AndJump(9)],
            vec![],
        ] {
            assert!(
                Plan::new(&Program { ops: ops.clone() }, &c).is_none(),
                "{ops:?}"
            );
        }
    }

    #[test]
    fn a_step_is_at_most_32_bytes() {
        // The engine's memory estimate counts plans by this size.
        assert!(std::mem::size_of::<Step>() <= 32);
    }
}
