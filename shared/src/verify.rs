//! The bytecode verifier (docs/bundle.md): run once at bundle load over every
//! program, so that the VM can trust what it runs and a corrupted or
//! hand-crafted bundle is refused with a precise reason instead of failing
//! rule by rule at run time.
//!
//! One forward pass over the ops, tracking the type of each stack slot
//! (jumps only go forward, so every jump target is seen after all of its
//! sources and a single pass is exact). It checks: no underflow, a bounded
//! depth, exactly one value at the end, jump targets forward and in range
//! with the same stack depth on every path into them, constant indices in
//! range and of the right kind (`Data` needs a `Path`, `Const` must not be
//! one), state indices in range, call arities, and types wherever they are
//! statically known (a `Not` fed a string constant can only ever fail), by
//! the same table of types and signatures the compiler's checker reads
//! ([`crate::when_types`]).

use crate::bundle::Payload;
use crate::bytecode::{Builtin, Const, Op, Program};
use crate::topic::TopicPattern;
use crate::when_types::{
    argument, binary_result, builtin_arity, builtin_name, call_result, mixes_string_and_number,
    operand, unary_result, Operator, Ty, Want,
};

/// Deepest stack a verified program may need.
pub const MAX_STACK: usize = 256;
/// Longest program accepted (the compiler's are tens of ops).
pub const MAX_OPS: usize = 1 << 16;

/// What the verifier learnt about a program it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramInfo {
    /// The deepest the stack gets.
    pub max_stack: usize,
}

/// Why a program was refused. `pc` is the index of the offending op.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("empty program")]
    Empty,
    #[error("program has {len} ops; at most {MAX_OPS} are allowed")]
    TooLong { len: usize },
    #[error("op {pc} ({op}) needs {needs} values on the stack, finds {found}")]
    Underflow {
        pc: usize,
        op: String,
        needs: usize,
        found: usize,
    },
    #[error("op {pc} grows the stack beyond {MAX_STACK} values")]
    TooDeep { pc: usize },
    #[error("the program ends with {found} values on the stack; it must leave exactly one")]
    ResultCount { found: usize },
    #[error("op {pc} jumps to {target}, which is not after it")]
    JumpBackward { pc: usize, target: u32 },
    #[error("op {pc} jumps to {target}, past the end of the program ({len} ops)")]
    JumpOutOfRange { pc: usize, target: u32, len: usize },
    #[error("paths into op {pc} disagree on the stack depth ({a} vs {b})")]
    DepthMismatch { pc: usize, a: usize, b: usize },
    #[error("op {pc} names constant {index}, but the pool has {len}")]
    ConstOutOfRange { pc: usize, index: u32, len: usize },
    #[error("op {pc} pushes constant {index}, which is a data path, not a value")]
    ConstIsPath { pc: usize, index: u32 },
    #[error("op {pc} reads data at constant {index}, which is not a path")]
    DataNotPath { pc: usize, index: u32 },
    #[error("op {pc} reads data at constant {index}, an empty path")]
    EmptyPath { pc: usize, index: u32 },
    #[error("op {pc} reads state pair {index}, but the bundle lists {len}")]
    StateOutOfRange { pc: usize, index: u32, len: usize },
    #[error("op {pc} calls `{function}` with {found} arguments; it takes {expected}")]
    Arity {
        pc: usize,
        function: &'static str,
        expected: String,
        found: u8,
    },
    #[error("op {pc} ({op}) expects {expected}, but always gets {found}")]
    Type {
        pc: usize,
        op: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("the program always gives {found}, never a boolean")]
    ResultNotBool { found: &'static str },
}

/// Why a bundle's payload was refused, naming the rule and step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("rule `{rule}`, {place}: {error}")]
    Program {
        rule: String,
        /// "`when`" or "step N `when`".
        place: String,
        #[source]
        error: VerifyError,
    },
    #[error("profile source {source_index}, emit `{topic}`, {place}: {error}")]
    ProfileProgram {
        source_index: usize,
        topic: String,
        /// "`when`" or "data `KEY`".
        place: String,
        #[source]
        error: VerifyError,
    },
    #[error("profile poll of `{hash}` every {every_ns} ns: the shortest interval is 100ms")]
    PollTooShort { hash: String, every_ns: u64 },
    #[error("rule `{name}` appears twice")]
    DuplicateRule { name: String },
    #[error("rule `{rule}` has no steps")]
    NoSteps { rule: String },
    #[error("rule `{rule}` repeats 0 times")]
    ZeroRepeat { rule: String },
    #[error("rule `{rule}` has a topic pattern that is not in canonical form: {pattern:?}")]
    Pattern { rule: String, pattern: String },
    #[error("rule `{rule}`: {error}")]
    Limit {
        rule: String,
        #[source]
        error: crate::limits::LimitError,
    },
    #[error("guard `{guard}`: {error}")]
    GuardProgram {
        guard: String,
        #[source]
        error: VerifyError,
    },
    #[error("guard `{guard}`: {reason}")]
    Guard { guard: String, reason: &'static str },
    #[error("limit `{limit}`: {reason}")]
    EnvelopeLimit { limit: String, reason: &'static str },
    #[error("rule `{rule}`: its breaker {reason}")]
    Trip { rule: String, reason: &'static str },
    #[error("{0}")]
    StateChannel(#[source] crate::limits::LimitError),
    #[error("{0}")]
    Input(#[source] crate::limits::LimitError),
    #[error("rule `{rule}`, {list} {step}: CAN frame {reason}")]
    CanFrame {
        rule: String,
        /// `"step"`, or `"finally step"` (docs/rules.md#finally).
        list: &'static str,
        step: usize,
        reason: &'static str,
    },
}

/// The first rule, in bundle order, whose name an earlier rule has. Found
/// by sorting rule indices by name: 4 bytes a rule while it runs, where a
/// set of names took about 22 (100,000 rules: 0.4 MB instead of 2.2 MB on
/// top of the decoded payload, at the loader's peak).
fn first_duplicate_name(payload: &Payload) -> Option<usize> {
    let rules = &payload.rules;
    // More rules than `u32` can count do not fit in a bundle file.
    let mut order: Vec<u32> = (0..rules.len())
        .filter_map(|index| u32::try_from(index).ok())
        .collect();
    let name = |index: u32| &*rules[index as usize].name;
    order.sort_unstable_by(|&a, &b| name(a).cmp(name(b)).then(a.cmp(&b)));
    // In each run of equal names, the second is the first repeat of it.
    order
        .windows(2)
        .filter(|pair| name(pair[0]) == name(pair[1]))
        .map(|pair| pair[1] as usize)
        .min()
}

/// Verifies every program of a payload, and the few structural facts the
/// runtime relies on (unique rule names, at least one step, a repeat count
/// of at least one, CAN frames the kernel would accept).
pub fn verify_payload(payload: &Payload) -> Result<(), PayloadError> {
    let consts = &payload.consts;
    let states = payload.state_pairs.len();
    let duplicate = first_duplicate_name(payload);
    crate::limits::check_state_pairs(payload).map_err(PayloadError::StateChannel)?;
    crate::limits::check_inputs(payload).map_err(PayloadError::Input)?;
    for (index, rule) in payload.rules.iter().enumerate() {
        crate::limits::check_rule(rule).map_err(|error| PayloadError::Limit {
            rule: rule.name.to_string(),
            error,
        })?;
        if duplicate == Some(index) {
            return Err(PayloadError::DuplicateRule {
                name: rule.name.to_string(),
            });
        }
        if rule.steps.is_empty() {
            return Err(PayloadError::NoSteps {
                rule: rule.name.to_string(),
            });
        }
        if rule.repeat().count == 0 {
            return Err(PayloadError::ZeroRepeat {
                rule: rule.name.to_string(),
            });
        }
        // A pattern must be what parsing its text gives (`Prefix` ends with
        // a dot and holds no `*`, nothing is empty): the matcher and the
        // Redis subscription rely on it.
        for pattern in rule.on.iter().chain(rule.cancel_on()) {
            if TopicPattern::parse(&pattern.to_string()).as_ref() != Ok(pattern) {
                return Err(PayloadError::Pattern {
                    rule: rule.name.to_string(),
                    pattern: format!("{pattern:?}"),
                });
            }
        }
        let program_error = |place: String, error| PayloadError::Program {
            rule: rule.name.to_string(),
            place,
            error,
        };
        if let Some(when) = &rule.when {
            verify_program(when, consts, states).map_err(|e| program_error("`when`".into(), e))?;
        }
        if let Some(per) = rule.per() {
            verify_value_program(per, consts, states)
                .map_err(|e| program_error("`per`".into(), e))?;
        }
        for (index, step) in rule.steps.iter().enumerate() {
            verify_step(rule, step, consts, states, (index, "step"))?;
        }
        for (index, step) in rule.finally().iter().enumerate() {
            verify_step(rule, step, consts, states, (index, "finally step"))?;
        }
    }
    if let Some(profile) = &payload.profile {
        verify_profile(profile, consts, states)?;
    }
    verify_envelope(payload)?;
    Ok(())
}

/// The guards and limits (docs/safety.md): unique names, programs over
/// `state()` only whose reads are the pairs they list, sound counts; and
/// each rule's breaker.
fn verify_envelope(payload: &Payload) -> Result<(), PayloadError> {
    use crate::bytecode::Op;
    let (consts, states) = (&payload.consts, payload.state_pairs.len());
    let envelope = &payload.envelope;
    for (index, guard) in envelope.guards.iter().enumerate() {
        let refuse = |reason| PayloadError::Guard {
            guard: guard.name.clone(),
            reason,
        };
        if envelope.guards[..index]
            .iter()
            .any(|g| g.name == guard.name)
        {
            return Err(refuse("appears twice"));
        }
        verify_program(&guard.when, consts, states).map_err(|error| {
            PayloadError::GuardProgram {
                guard: guard.name.clone(),
                error,
            }
        })?;
        for op in &guard.when.ops {
            match op {
                Op::Field(_) | Op::Data(_) => return Err(refuse("reads the event")),
                Op::State(pair) if !guard.reads.contains(pair) => {
                    return Err(refuse("reads a field it does not list"))
                }
                _ => {}
            }
        }
        if guard.reads.iter().any(|&pair| pair as usize >= states) {
            return Err(refuse("lists a state pair the bundle has not"));
        }
        verify_cover(&guard.cover).map_err(refuse)?;
    }
    for (index, limit) in envelope.limits.iter().enumerate() {
        let refuse = |reason| PayloadError::EnvelopeLimit {
            limit: limit.name.clone(),
            reason,
        };
        if envelope.limits[..index]
            .iter()
            .any(|l| l.name == limit.name)
        {
            return Err(refuse("appears twice"));
        }
        if limit.max == 0 || limit.per_ns == 0 {
            return Err(refuse("allows nothing (max or per is 0)"));
        }
        verify_cover(&limit.cover).map_err(refuse)?;
    }
    for rule in &payload.rules {
        if let Some(trip) = rule.trip() {
            if trip.starts == 0 || trip.per_ns == 0 || trip.pause_ns == 0 {
                return Err(PayloadError::Trip {
                    rule: rule.name.to_string(),
                    reason: "has a zero starts, per or pause",
                });
            }
        }
    }
    Ok(())
}

/// A `can` or `exec` cover names no values.
fn verify_cover(cover: &crate::envelope::Cover) -> Result<(), &'static str> {
    use crate::envelope::Target;
    match cover.target {
        Target::Can(_) | Target::Exec if !cover.values.is_empty() => {
            Err("covers values of an action that has none")
        }
        _ => Ok(()),
    }
}

/// One step's `when` and CAN frame; `place` is its index and list
/// (`"step"`, or `"finally step"`, docs/rules.md#finally), for the error.
fn verify_step(
    rule: &crate::bundle::Rule,
    step: &crate::bundle::Step,
    consts: &[Const],
    states: usize,
    (index, list): (usize, &'static str),
) -> Result<(), PayloadError> {
    if let Some(when) = &step.when {
        verify_program(when, consts, states).map_err(|error| PayloadError::Program {
            rule: rule.name.to_string(),
            place: format!("{list} {index} `when`"),
            error,
        })?;
    }
    for (part, program) in step.action.texts().flat_map(|t| t.programs()).enumerate() {
        verify_value_program(program, consts, states).map_err(|error| PayloadError::Program {
            rule: rule.name.to_string(),
            place: format!("{list} {index} value `${{...}}` {part}"),
            error,
        })?;
    }
    if let crate::bundle::Action::Can(frame) = &*step.action {
        let reason = if frame.id > 0x1FFF_FFFF {
            Some("id above 0x1FFFFFFF")
        } else if frame.id > 0x7FF && !frame.extended {
            // docs/rules.md#the-can-action: such an id only exists as an extended
            // frame; sent as a standard one it would lose its top bits.
            Some("id above 0x7FF without the extended flag")
        } else if frame.data.len() > 8 || frame.dlc > 8 {
            Some("longer than 8 bytes")
        } else if frame.rtr && !frame.data.is_empty() {
            Some("is a remote frame with data")
        } else if !frame.rtr && usize::from(frame.dlc) != frame.data.len() {
            Some("length code differs from its data length")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(PayloadError::CanFrame {
                rule: rule.name.to_string(),
                list,
                step: index,
                reason,
            });
        }
    }
    Ok(())
}

/// A profile's programs (each emit's `when` and `data` expressions, against
/// the bundle's pools) and its polls' intervals (docs/sources.md#polls).
fn verify_profile(
    profile: &crate::profile::Profile,
    consts: &[Const],
    states: usize,
) -> Result<(), PayloadError> {
    for (source_index, source) in profile.sources.iter().enumerate() {
        for emit in &source.emits {
            let error = |place: String, error| PayloadError::ProfileProgram {
                source_index,
                topic: emit.topic.clone(),
                place,
                error,
            };
            if let Some(when) = &emit.when {
                verify_program(when, consts, states).map_err(|e| error("`when`".into(), e))?;
            }
            for (key, spec) in &emit.data {
                if let crate::profile::DataSpec::Expr(program) = spec {
                    verify_value_program(program, consts, states)
                        .map_err(|e| error(format!("data `{key}`"), e))?;
                }
            }
        }
    }
    for poll in &profile.polls {
        if poll.every_ns < crate::profile::MIN_POLL_NS {
            return Err(PayloadError::PollTooShort {
                hash: poll.hash.clone(),
                every_ns: poll.every_ns,
            });
        }
    }
    Ok(())
}

/// How the verifier names a type it found: a `data` value, or an `if`
/// that mixes types, may be anything.
fn found(ty: Ty) -> &'static str {
    if ty == Ty::Any {
        "anything"
    } else {
        ty.a()
    }
}

/// How the verifier names what an operand must be.
fn wanted(want: Want) -> &'static str {
    match want {
        Want::Bool => "a boolean",
        Want::Number => "a number",
        Want::Str => "a string",
        Want::NumberOrStr => "a number or a string",
    }
}

/// An operand of `op` of type `ty`, against what the table says it must be.
fn admit(pc: usize, op: &Op, want: Option<Want>, ty: Ty) -> Result<(), VerifyError> {
    match want {
        Some(want) if !want.admits(ty) => Err(type_error(pc, op, wanted(want), ty)),
        _ => Ok(()),
    }
}

fn op_name(op: &Op) -> String {
    match op {
        Op::Call(builtin, n) => format!("Call({}, {n})", builtin_name(*builtin)),
        other => format!("{other:?}"),
    }
}

/// Verifies one program against the bundle's constant pool and the number
/// of state pairs it lists: one pass over the ops, tracking the type of each
/// stack slot; a forward jump carries its stack to its target, where it is
/// merged with the stack that falls through.
pub fn verify_program(
    program: &Program,
    consts: &[Const],
    state_pairs: usize,
) -> Result<ProgramInfo, VerifyError> {
    verify_program_as(program, consts, state_pairs, true)
}

/// [`verify_program`] for a program whose value is used as it is (a
/// profile's `data` expression, docs/sources.md): one value of any type.
pub fn verify_value_program(
    program: &Program,
    consts: &[Const],
    state_pairs: usize,
) -> Result<ProgramInfo, VerifyError> {
    verify_program_as(program, consts, state_pairs, false)
}

fn verify_program_as(
    program: &Program,
    consts: &[Const],
    state_pairs: usize,
    boolean: bool,
) -> Result<ProgramInfo, VerifyError> {
    let ops = &program.ops;
    if ops.is_empty() {
        return Err(VerifyError::Empty);
    }
    if ops.len() > MAX_OPS {
        return Err(VerifyError::TooLong { len: ops.len() });
    }
    // The stack that jumps bring into each op index (len + 1 entries: a jump
    // may target the end).
    let mut incoming: Vec<Option<Vec<Ty>>> = vec![None; ops.len() + 1];
    let mut stack: Vec<Ty> = Vec::new();
    let mut max_stack = 0;

    for (pc, op) in ops.iter().enumerate() {
        if let Some(jumped) = incoming[pc].take() {
            stack = merge(pc, stack, jumped)?;
        }
        let args = pop_operands(pc, op, &mut stack)?;
        let result = match *op {
            Op::AndJump(target) | Op::OrJump(target) => {
                admit(pc, op, Some(Want::Bool), args[0])?;
                jump(pc, target, &stack, &mut incoming)?;
                continue;
            }
            Op::Const(_) | Op::Data(_) | Op::State(_) | Op::Field(_) => {
                load_type(pc, op, consts, state_pairs)?
            }
            Op::Not | Op::AssertBool | Op::Neg => unary_type(pc, op, args[0])?,
            Op::Call(builtin, n) => call_type(pc, op, builtin, n, &args)?,
            _ => binary_type(pc, op, args[0], args[1])?,
        };
        stack.push(result);
        max_stack = max_stack.max(stack.len());
        if stack.len() > MAX_STACK {
            return Err(VerifyError::TooDeep { pc });
        }
    }
    if let Some(jumped) = incoming[ops.len()].take() {
        stack = merge(ops.len(), stack, jumped)?;
    }
    match stack.as_slice() {
        [t] if !boolean || Want::Bool.admits(*t) => Ok(ProgramInfo { max_stack }),
        [t] => Err(VerifyError::ResultNotBool { found: found(*t) }),
        other => Err(VerifyError::ResultCount { found: other.len() }),
    }
}

fn type_error(pc: usize, op: &Op, expected: &'static str, ty: Ty) -> VerifyError {
    VerifyError::Type {
        pc,
        op: op_name(op),
        expected,
        found: found(ty),
    }
}

/// Takes `op`'s operands off the stack, deepest first.
fn pop_operands(pc: usize, op: &Op, stack: &mut Vec<Ty>) -> Result<Vec<Ty>, VerifyError> {
    let needs = match op {
        Op::Not | Op::Neg | Op::AndJump(_) | Op::OrJump(_) | Op::AssertBool => 1,
        Op::Call(_, n) => usize::from(*n),
        Op::Const(_) | Op::Field(_) | Op::Data(_) | Op::State(_) => 0,
        _ => 2,
    };
    if stack.len() < needs {
        return Err(VerifyError::Underflow {
            pc,
            op: op_name(op),
            needs,
            found: stack.len(),
        });
    }
    Ok(stack.split_off(stack.len() - needs))
}

/// A forward jump to `target`, at most the end: the stack it carries there
/// (taken: the boolean stays; not taken, it is popped).
fn jump(
    pc: usize,
    target: u32,
    stack: &[Ty],
    incoming: &mut [Option<Vec<Ty>>],
) -> Result<(), VerifyError> {
    let len = incoming.len() - 1;
    if target as usize <= pc {
        return Err(VerifyError::JumpBackward { pc, target });
    }
    if target as usize > len {
        return Err(VerifyError::JumpOutOfRange { pc, target, len });
    }
    let mut taken = stack.to_vec();
    taken.push(Ty::Bool);
    let slot = &mut incoming[target as usize];
    *slot = Some(match slot.take() {
        Some(other) => merge(target as usize, other, taken)?,
        None => taken,
    });
    Ok(())
}

/// The type an op that reads a value pushes: a constant, a data path, a
/// state pair or (any other op given) an event field, each checked against
/// the bundle.
fn load_type(pc: usize, op: &Op, consts: &[Const], state_pairs: usize) -> Result<Ty, VerifyError> {
    let constant = |index: u32| {
        consts
            .get(index as usize)
            .ok_or(VerifyError::ConstOutOfRange {
                pc,
                index,
                len: consts.len(),
            })
    };
    Ok(match *op {
        Op::Const(index) => match constant(index)? {
            Const::Path(_) => return Err(VerifyError::ConstIsPath { pc, index }),
            Const::Str(_) => Ty::Str,
            Const::Int(_) => Ty::Int,
            Const::Float(_) => Ty::Float,
            Const::Bool(_) => Ty::Bool,
        },
        Op::Data(index) => match constant(index)? {
            Const::Path(path) if path.is_empty() => {
                return Err(VerifyError::EmptyPath { pc, index })
            }
            Const::Path(_) => Ty::Any,
            _ => return Err(VerifyError::DataNotPath { pc, index }),
        },
        Op::State(index) => {
            if index as usize >= state_pairs {
                return Err(VerifyError::StateOutOfRange {
                    pc,
                    index,
                    len: state_pairs,
                });
            }
            Ty::Str
        }
        _ => Ty::Str,
    })
}

/// The type `-x` pushes, or (any other op given) `!x` and the final
/// boolean assertion.
fn unary_type(pc: usize, op: &Op, arg: Ty) -> Result<Ty, VerifyError> {
    let operator = if *op == Op::Neg {
        Operator::Neg
    } else {
        Operator::Not
    };
    admit(pc, op, operand(operator), arg)?;
    Ok(unary_result(operator, arg))
}

/// The table's name of a binary op ([`Op::binary_operator`]). Every other
/// op is typed by the match before `binary_type` is asked, so the default
/// is never taken.
fn binary_operator(op: &Op) -> Operator {
    op.binary_operator().unwrap_or(Operator::Ge)
}

/// The type a binary operator pushes, by the table: each operand
/// admitted, then no string against a number where that always fails.
fn binary_type(pc: usize, op: &Op, a: Ty, b: Ty) -> Result<Ty, VerifyError> {
    let operator = binary_operator(op);
    for t in [a, b] {
        admit(pc, op, operand(operator), t)?;
    }
    if mixes_string_and_number(operator, a, b) {
        // `+` names the number; an ordering its right side.
        let number = match operator {
            Operator::Add if a == Ty::Str => b,
            Operator::Add => a,
            _ => b,
        };
        return Err(type_error(pc, op, "two strings or two numbers", number));
    }
    Ok(binary_result(operator, a, b))
}

fn merge(pc: usize, a: Vec<Ty>, b: Vec<Ty>) -> Result<Vec<Ty>, VerifyError> {
    if a.len() != b.len() {
        return Err(VerifyError::DepthMismatch {
            pc,
            a: a.len(),
            b: b.len(),
        });
    }
    Ok(a.into_iter().zip(b).map(|(x, y)| x.join(y)).collect())
}

fn call_type(pc: usize, op: &Op, builtin: Builtin, n: u8, args: &[Ty]) -> Result<Ty, VerifyError> {
    let (min, max) = builtin_arity(builtin);
    if n < min || n > max {
        let expected = if min == max {
            min.to_string()
        } else {
            format!("at least {min}")
        };
        return Err(VerifyError::Arity {
            pc,
            function: builtin_name(builtin),
            expected,
            found: n,
        });
    }
    for (index, arg) in args.iter().enumerate() {
        if builtin == Builtin::If && index == 0 && !Want::Bool.admits(*arg) {
            return Err(type_error(pc, op, "a boolean condition", *arg));
        }
        admit(pc, op, argument(builtin, index), *arg)?;
    }
    Ok(call_result(builtin, args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{Action, Rule, Step};
    use crate::bytecode::Const as C;
    use crate::bytecode::EventField;
    use Op::*;

    fn consts() -> Vec<C> {
        vec![
            C::Bool(true),                 // 0
            C::Int(1),                     // 1
            C::Str("s".into()),            // 2
            C::Path(vec!["level".into()]), // 3
            C::Float(0.5),                 // 4
            C::Path(vec![]),               // 5
        ]
    }

    fn check(ops: Vec<Op>) -> Result<ProgramInfo, VerifyError> {
        verify_program(&Program { ops }, &consts(), 1)
    }

    #[test]
    fn accepts_well_formed_programs() {
        // data.level > 1 && (topic == "s" || state(0) == "s")
        let ops = vec![
            Data(3),
            Const(1),
            Gt,
            AndJump(13),
            Field(EventField::Topic),
            Const(2),
            Eq,
            OrJump(12),
            State(0),
            Const(2),
            Eq,
            AssertBool,
            AssertBool,
            // 13 = end
        ];
        assert_eq!(check(ops), Ok(ProgramInfo { max_stack: 2 }));
        assert!(check(vec![Const(0)]).is_ok());
        assert!(
            check(vec![Data(3)]).is_ok(),
            "a data value may be a boolean"
        );
        assert!(check(vec![Const(2), Const(2), Call(Builtin::Contains, 2)]).is_ok());
        assert!(check(vec![
            Const(1),
            Const(4),
            Const(1),
            Call(Builtin::Max, 3),
            Const(1),
            Gt
        ])
        .is_ok());
        assert!(check(vec![
            Const(0),
            Const(1),
            Const(4),
            Call(Builtin::If, 3),
            Const(1),
            Eq
        ])
        .is_ok());
    }

    #[test]
    fn rejects_structure_errors() {
        assert_eq!(check(vec![]), Err(VerifyError::Empty));
        assert!(matches!(
            check(vec![Const(1), Add]),
            Err(VerifyError::Underflow {
                pc: 1,
                needs: 2,
                found: 1,
                ..
            })
        ));
        assert!(matches!(
            check(vec![Call(Builtin::Len, 1)]),
            Err(VerifyError::Underflow { pc: 0, .. })
        ));
        assert_eq!(
            check(vec![Const(0), Const(0)]),
            Err(VerifyError::ResultCount { found: 2 })
        );
        let deep: Vec<Op> = vec![Const(0); MAX_STACK + 1];
        assert_eq!(check(deep), Err(VerifyError::TooDeep { pc: MAX_STACK }));
        assert_eq!(
            check(vec![Const(0); MAX_OPS + 1]),
            Err(VerifyError::TooLong { len: MAX_OPS + 1 })
        );
    }

    #[test]
    fn rejects_bad_jumps() {
        assert_eq!(
            check(vec![Const(0), AndJump(1), Const(0), AssertBool]),
            Err(VerifyError::JumpBackward { pc: 1, target: 1 })
        );
        assert_eq!(
            check(vec![Const(0), OrJump(5), Const(0), AssertBool]),
            Err(VerifyError::JumpOutOfRange {
                pc: 1,
                target: 5,
                len: 4
            })
        );
        // The jump lands where the fall-through path has one more value.
        assert!(matches!(
            check(vec![Const(0), AndJump(4), Const(0), Const(0), Eq]),
            Err(VerifyError::DepthMismatch { pc: 4, .. })
        ));
    }

    #[test]
    fn rejects_bad_indices() {
        assert_eq!(
            check(vec![Const(9)]),
            Err(VerifyError::ConstOutOfRange {
                pc: 0,
                index: 9,
                len: 6
            })
        );
        assert_eq!(
            check(vec![Const(3)]),
            Err(VerifyError::ConstIsPath { pc: 0, index: 3 })
        );
        assert_eq!(
            check(vec![Data(1)]),
            Err(VerifyError::DataNotPath { pc: 0, index: 1 })
        );
        assert_eq!(
            check(vec![Data(9)]),
            Err(VerifyError::ConstOutOfRange {
                pc: 0,
                index: 9,
                len: 6
            })
        );
        assert_eq!(
            check(vec![Data(5)]),
            Err(VerifyError::EmptyPath { pc: 0, index: 5 })
        );
        assert_eq!(
            check(vec![State(1), Const(2), Eq]),
            Err(VerifyError::StateOutOfRange {
                pc: 0,
                index: 1,
                len: 1
            })
        );
    }

    #[test]
    fn rejects_bad_arity() {
        assert!(matches!(
            check(vec![Const(1), Call(Builtin::Min, 1), Const(1), Eq]),
            Err(VerifyError::Arity {
                function: "min",
                found: 1,
                ..
            })
        ));
        assert!(matches!(
            check(vec![Const(0), Const(1), Call(Builtin::If, 2), Const(1), Eq]),
            Err(VerifyError::Arity {
                function: "if",
                found: 2,
                ..
            })
        ));
        assert!(matches!(
            check(vec![
                Const(2),
                Const(2),
                Call(Builtin::Len, 2),
                Const(1),
                Eq
            ]),
            Err(VerifyError::Arity {
                function: "len",
                ..
            })
        ));
    }

    #[test]
    fn rejects_static_type_errors() {
        let cases = vec![
            vec![Const(2), Not],
            vec![Const(1), AndJump(4), Const(0), AssertBool],
            vec![Const(0), AndJump(4), Const(1), AssertBool],
            vec![Const(2), Neg, Const(1), Eq],
            vec![Const(0), Const(1), Add, Const(1), Eq],
            vec![Const(2), Const(1), Add, Const(1), Eq],
            vec![Const(2), Const(2), Sub, Const(1), Eq],
            vec![Const(2), Const(1), Lt],
            vec![Const(0), Const(0), Lt],
            vec![Const(1), Call(Builtin::Len, 1), Const(1), Eq],
            vec![Const(1), Const(2), Call(Builtin::StartsWith, 2)],
            vec![Const(2), Call(Builtin::Floor, 1), Const(1), Eq],
            vec![
                Const(1),
                Const(1),
                Const(1),
                Call(Builtin::If, 3),
                Const(1),
                Eq,
            ],
        ];
        for ops in cases {
            let r = check(ops.clone());
            assert!(matches!(r, Err(VerifyError::Type { .. })), "{ops:?}: {r:?}");
        }
        assert_eq!(
            check(vec![Const(1)]),
            Err(VerifyError::ResultNotBool { found: "an int" })
        );
        assert_eq!(
            check(vec![Const(2), Const(2), Add]),
            Err(VerifyError::ResultNotBool { found: "a string" })
        );
        // Types flow through arithmetic, calls and branches.
        assert!(check(vec![Const(1), Const(4), Add, Not]).is_err());
        assert!(check(vec![Const(2), Call(Builtin::Trim, 1), Neg, Const(1), Eq]).is_err());
        assert!(check(vec![Data(3), Not]).is_ok(), "data may be a boolean");
        // `data + 1` is a number or fails, never a boolean: the checker's
        // rule, from the one table (when_types), so the verifier has it too.
        assert!(matches!(
            check(vec![Data(3), Const(1), Add, Not]),
            Err(VerifyError::Type {
                found: "a number",
                ..
            })
        ));
    }

    #[test]
    fn the_first_repeated_name_in_bundle_order_is_named() {
        let rule = |name: &str| {
            let on = vec![TopicPattern::parse("t").unwrap()];
            Rule::new(
                name,
                "f.toml",
                on,
                vec![Step::new(Action::redis("l", "x"), 0)],
            )
        };
        let payload = |names: &[&str]| {
            Payload::new(
                "test",
                names.iter().map(|n| rule(n)).collect(),
                vec![],
                vec![],
            )
        };
        assert_eq!(first_duplicate_name(&payload(&["a", "b", "c"])), None);
        // `a` repeats at 4, `z` at 3 (and 5): 3 comes first.
        let names = ["z", "a", "m", "z", "a", "z"];
        assert_eq!(first_duplicate_name(&payload(&names)), Some(3));
        assert!(matches!(
            verify_payload(&payload(&names)),
            Err(PayloadError::DuplicateRule { name }) if name == "z"
        ));
    }
}
