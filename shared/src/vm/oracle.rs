//! The op-by-op interpreter of a [`Program`]: the test oracle of the
//! [`Plan`](super::Plan), which is the one evaluator of product code
//! (docs/engine.md#the-when-plan).
//!
//! It runs each op as the bytecode defines it, one at a time, with no
//! fusing and no fast paths of its own (binary operators go through
//! `Machine::binary`, never `fast_binary`), so that it shares with the
//! plan only the functions that define each operator. The differential
//! tests (compiler/tests/differential.rs, shared/src/vm.rs's unit tests,
//! shared/tests/vm_verify.rs) compare the two. It is compiled only for
//! tests and benches (`#[cfg(test)]`, or the feature `oracle`, which only
//! dev-dependencies turn on), and `cargo xtask invariants` checks that no
//! product code names it.

use super::{malformed, push, top_mut, type_error, EvalError, Machine, Slot, Stop, Value};
use crate::bytecode::{Const, Op, Program};
use crate::event::Event;

/// [`super::eval_bool`], computed op by op.
pub fn eval_bool(
    program: &Program,
    consts: &[Const],
    event: &Event,
    state: &[String],
) -> Result<bool, EvalError> {
    let mut scratch = Vec::new();
    run_program(program, consts, event, state, &mut scratch).and_then(Slot::boolean)
}

/// [`super::eval`], computed op by op.
pub fn eval<'a>(
    program: &Program,
    consts: &'a [Const],
    event: &'a Event,
    state: &'a [String],
) -> Result<Value<'a>, EvalError> {
    let mut scratch = Vec::new();
    let slot = run_program(program, consts, event, state, &mut scratch)?;
    Ok(super::slot_value(slot, &mut scratch))
}

fn run_program<'a>(
    program: &Program,
    consts: &'a [Const],
    event: &'a Event,
    state: &'a [String],
    scratch: &mut Vec<String>,
) -> Result<Slot<'a>, EvalError> {
    let mut machine = Machine::new(consts, event, state, scratch);
    // Each op pushes at most one value: a stack as long as the program
    // cannot fill up.
    let mut stack = vec![Slot::Empty; program.ops.len() + 1];
    machine
        .interpret(&program.ops, &mut stack)
        .map_err(Stop::into_eval_error)
}

impl<'a> Machine<'a, '_> {
    fn interpret(&mut self, ops: &[Op], stack: &mut [Slot<'a>]) -> Result<Slot<'a>, Stop> {
        let mut len = 0usize;
        let mut pc = 0usize;
        while let Some(op) = ops.get(pc) {
            let mut next = pc + 1;
            match *op {
                Op::Const(i) => {
                    let constant = self.constant(pc, i)?;
                    push(stack, &mut len, constant)?;
                }
                Op::Field(field) => push(stack, &mut len, Slot::Str(self.field(field)))?,
                Op::Data(i) => push(stack, &mut len, self.data(pc, i)?)?,
                Op::State(i) => push(stack, &mut len, self.state_slot(pc, i)?)?,
                Op::Not => {
                    let top = top_mut(stack, len, pc)?;
                    *top = super::not(*top)?;
                }
                Op::Neg => {
                    let top = top_mut(stack, len, pc)?;
                    *top = super::neg(*top)?;
                }
                Op::Add
                | Op::Sub
                | Op::Mul
                | Op::Div
                | Op::Mod
                | Op::Pow
                | Op::Eq
                | Op::Ne
                | Op::Lt
                | Op::Le
                | Op::Gt
                | Op::Ge => {
                    let (Some(a), Some(b)) = (len.checked_sub(2), len.checked_sub(1)) else {
                        return Err(malformed(pc, "stack underflow"));
                    };
                    let (Some(&x), Some(&y)) = (stack.get(a), stack.get(b)) else {
                        return Err(malformed(pc, "stack underflow"));
                    };
                    let result = self.binary(*op, x, y)?;
                    len -= 1;
                    *top_mut(stack, len, pc)? = result;
                }
                Op::AndJump(target) | Op::OrJump(target) => {
                    let jump_on = matches!(op, Op::OrJump(_));
                    let top = *top_mut(stack, len, pc)?;
                    let Slot::Bool(b) = top else {
                        let name = if jump_on { "||" } else { "&&" };
                        return Err(type_error(name, "a boolean", top).into());
                    };
                    if b == jump_on {
                        let target = target as usize;
                        if target <= pc || target > ops.len() {
                            return Err(malformed(pc, "jump target not forward or out of range"));
                        }
                        next = target;
                    } else {
                        len -= 1;
                    }
                }
                Op::AssertBool => {
                    let top = *top_mut(stack, len, pc)?;
                    if !matches!(top, Slot::Bool(_)) {
                        return Err(type_error("&&/||", "a boolean", top).into());
                    }
                }
                Op::Call(builtin, n) => {
                    let args = len
                        .checked_sub(usize::from(n))
                        .and_then(|from| stack.get(from..len))
                        .ok_or_else(|| malformed(pc, "stack underflow"))?;
                    let result = self.call(builtin, args)?;
                    len -= usize::from(n);
                    push(stack, &mut len, result)?;
                }
            }
            pc = next;
        }
        match (len, stack.first()) {
            (1, Some(&slot)) => Ok(slot),
            _ => Err(malformed(pc, "the program must leave exactly one value")),
        }
    }
}
