//! Hand-built bundles for the integration tests (the compiler is tested on
//! its own; here the runtime's behaviour is what matters).
#![allow(dead_code, clippy::unwrap_used)]

use rulecore::bundle::{Action, Payload, Rule, StatePair, Step};
use rulecore::bytecode::{Const, Program};
use rulecore::TopicPattern;
use std::path::{Path, PathBuf};

pub const MS: u64 = 1_000_000;

pub fn redis_step(list: &str, push: &str, after_ms: u64) -> Step {
    step(Action::redis(list, push), after_ms)
}

pub fn exec_step(command: &str, timeout_ms: u64, after_ms: u64) -> Step {
    step(
        Action::Exec {
            command: command.into(),
            timeout_ns: timeout_ms * MS,
        },
        after_ms,
    )
}

pub fn step(action: Action, after_ms: u64) -> Step {
    Step::new(action, after_ms * MS)
}

pub fn rule(name: &str, on: &[&str], steps: Vec<Step>) -> Rule {
    let on = on.iter().map(|p| TopicPattern::parse(p).unwrap()).collect();
    Rule::new(name, "test.toml", on, steps)
}

/// A payload with correct fingerprints.
pub fn payload(rules: Vec<Rule>, state_pairs: Vec<StatePair>, consts: Vec<Const>) -> Payload {
    Payload::new("test", rules, state_pairs, consts)
}

/// A payload of one rule, no state, no constants.
pub fn single(rule: Rule) -> Payload {
    payload(vec![rule], Vec::new(), Vec::new())
}

/// Encodes `payload` into `dir/name`; returns the path.
pub fn write(dir: &Path, name: &str, payload: &Payload) -> PathBuf {
    let path = dir.join(name);
    let bytes = rulecore::codec::encode(payload).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The canonical hazards rule: `both` now, `off` after `off_after_ms`.
pub fn hazards(off_after_ms: u64) -> Rule {
    rule(
        "hazards-on-alarm",
        &["alarm.triggered"],
        vec![
            redis_step("scooter:blinker", "both", 0),
            redis_step("scooter:blinker", "off", off_after_ms),
        ],
    )
}

/// `when = state(hash, field) == value` as bytecode: ops over consts
/// `[Str(value)]` and state pair 0.
pub fn state_equals(value: &str) -> (Program, Vec<Const>) {
    use rulecore::bytecode::Op;
    (
        Program {
            ops: vec![Op::State(0), Op::Const(0), Op::Eq],
        },
        vec![Const::Str(value.into())],
    )
}
