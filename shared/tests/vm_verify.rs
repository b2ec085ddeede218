//! The VM and the verifier together, on random (mostly nonsensical)
//! programs: the VM never panics on any program, and a program the verifier
//! accepts never hits a structural failure ([`EvalError::Malformed`]) in the
//! VM, on any event or state.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::bytecode::{Builtin, Const, EventField, Op, Program};
use rulecore::event::Event;
use rulecore::verify::verify_program;
use rulecore::vm::{eval_bool, oracle, EvalError};
use test_kit::fuzz::{Fuzz, Rng};

const BUILTINS: &[Builtin] = &[
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
];

fn consts() -> Vec<Const> {
    vec![
        Const::Bool(true),
        Const::Bool(false),
        Const::Int(0),
        Const::Int(i64::MIN),
        Const::Int(7),
        Const::Float(2.5),
        Const::Float(f64::NAN),
        Const::Str("".into()),
        Const::Str("Parked ".into()),
        Const::Path(vec!["a".into()]),
        Const::Path(vec!["o".into()]),
        Const::Path(vec!["s".into()]),
    ]
}

fn random_op(rng: &mut Rng, len: usize, n_consts: usize) -> Op {
    let index = |rng: &mut Rng, n: usize| (rng.below(n + 2)) as u32;
    match rng.below(26) {
        0..=3 => Op::Const(index(rng, n_consts)),
        4 => Op::Field(
            [
                EventField::Topic,
                EventField::Src,
                EventField::From,
                EventField::To,
            ][rng.below(4)],
        ),
        5..=6 => Op::Data(index(rng, n_consts)),
        7 => Op::State(index(rng, 2)),
        8 => Op::Not,
        9 => Op::Neg,
        10 => Op::Add,
        11 => Op::Sub,
        12 => Op::Mul,
        13 => Op::Div,
        14 => Op::Mod,
        15 => Op::Pow,
        16 => Op::Eq,
        17 => Op::Ne,
        18 => Op::Lt,
        19 => Op::Ge,
        20 => Op::AndJump(rng.below(len + 2) as u32),
        21 => Op::OrJump(rng.below(len + 2) as u32),
        22 => Op::AssertBool,
        _ => Op::Call(BUILTINS[rng.below(BUILTINS.len())], rng.below(4) as u8),
    }
}

fn events() -> Vec<Event> {
    [
        r#"{"topic":"t","to":"Parked","data":{"a":3,"o":{"x":1},"s":" x "}}"#,
        r#"{"topic":"t","data":{"a":"3","s":null}}"#,
        r#"{"topic":"t","data":{"a":-9223372036854775808,"s":true}}"#,
        r#"{"topic":"t"}"#,
    ]
    .iter()
    .map(|json| Event::decode(json.as_bytes()).unwrap())
    .collect()
}

#[test]
fn random_programs_never_panic_and_verified_ones_never_malform() {
    let consts = consts();
    let events = events();
    let state = vec!["parked".to_string(), String::new()];
    // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md).
    let fuzz = Fuzz::from_env(
        "vm_verify::random_programs_never_panic_and_verified_ones_never_malform",
        42,
    )
    .unwrap();
    let mut rng = Rng::new(fuzz.seed());
    let mut verified = 0;
    for _ in 0..fuzz.cases(600_000) {
        let len = 1 + rng.below(10);
        let ops: Vec<Op> = (0..len)
            .map(|_| random_op(&mut rng, len, consts.len()))
            .collect();
        let program = Program { ops };
        let ok = verify_program(&program, &consts, state.len()).is_ok();
        verified += usize::from(ok);
        for event in &events {
            let result = eval_bool(&program, &consts, event, &state);
            let oracle = oracle::eval_bool(&program, &consts, event, &state);
            if ok {
                assert!(
                    !matches!(result, Err(EvalError::Malformed { .. })),
                    "verified {:?} gave {result:?}",
                    program.ops
                );
                // The plan (the product's evaluator) and the op-by-op
                // oracle agree on every verified program.
                assert_eq!(result, oracle, "{:?}", program.ops);
            }
        }
    }
    assert!(verified > 2_000, "only {verified} random programs verified");
}
