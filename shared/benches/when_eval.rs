//! The `when` evaluators counted in instructions, not time: the box is
//! shared and loaded, so wall-clock figures are noise there.
//!
//! `cargo bench -p rulecore --bench when_eval --no-run`, then
//! `valgrind --tool=callgrind --toggle-collect='*run_mode*' BINARY MODE`
//! with MODE `plan` (a plan made at load and kept, `vm::Plan`, as the
//! engine judges a rule's `when`), `once` (`vm::eval_bool`: the plan made
//! at the call, as a step's condition or computed text is judged), `oracle`
//! (the op-by-op interpreter the tests hold the plan to) or `decode` (an
//! event with a `data` object decoded, instructions / ROUNDS a decode),
//! and optionally the index of one condition;
//! each condition is evaluated
//! [`ROUNDS`] times, so instructions / (ROUNDS * conditions) is the cost
//! of one evaluation, the loop's own included (docs/engine.md#the-when-plan).
//! Plain `main`, no harness; prints the conditions' answers so the work is
//! not optimised away.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use rulecore::bytecode::{Builtin, Const, EventField, Op, Program};
use rulecore::event::Event;
use rulecore::vm::{eval_bool, oracle, Plan};
use std::hint::black_box;

const ROUNDS: usize = 10_000;

fn consts() -> Vec<Const> {
    vec![
        Const::Path(vec!["level".into()]),      // 0
        Const::Int(2),                          // 1
        Const::Str("level-1-triggered".into()), // 2
        Const::Str("armed".into()),             // 3
        Const::Path(vec!["level".into()]),      // 4
        Const::Int(0),                          // 5
        Const::Int(3),                          // 6
        Const::Int(3),                          // 7
        Const::Path(vec!["level".into()]),      // 8
        Const::Float(0.5),                      // 9
        Const::Float(2.5),                      // 10
    ]
}

/// The conditions of docs/engine.md's table, as `rulec` lowers them.
fn programs() -> Vec<(&'static str, Vec<Op>)> {
    use Op::*;
    vec![
        ("data.level >= 2", vec![Data(0), Const(1), Ge]),
        (
            "to == \"level-1-triggered\"",
            vec![Field(EventField::To), Const(2), Eq],
        ),
        (
            "data.level > 0 && data.level < 3",
            vec![
                Data(4),
                Const(5),
                Gt,
                AndJump(8),
                Data(4),
                Const(6),
                Lt,
                AssertBool,
            ],
        ),
        (
            "from == \"armed\" && to == \"level-1-triggered\"",
            vec![
                Field(EventField::From),
                Const(3),
                Eq,
                AndJump(8),
                Field(EventField::To),
                Const(2),
                Eq,
                AssertBool,
            ],
        ),
        (
            "len(to) > 3 && data.level > 0.5",
            vec![
                Field(EventField::To),
                Call(Builtin::Len, 1),
                Const(7),
                Gt,
                AndJump(9),
                Data(8),
                Const(9),
                Gt,
                AssertBool,
            ],
        ),
        (
            "data.level * 2 > 2.5",
            vec![Data(0), Const(1), Mul, Const(10), Gt],
        ),
    ]
}

fn event() -> Event {
    Event::decode(
        br#"{"topic":"alarm.triggered","from":"armed","to":"level-1-triggered","data":{"level":1}}"#,
    )
    .unwrap()
}

/// A `data` object as the bus sends one: short keys, and one of 17 to 22
/// bytes (`data`'s keys are `SmallStr`s, inline up to 16).
const DECODED: &[u8] = br#"{"topic":"battery.0.changed","from":"a","to":"b","data":{"charge":80,"state":"active","temperature":21,"cycle_count":12,"temperature_state":"ideal"}}"#;

/// Decodes [`DECODED`] [`ROUNDS`] times (mode `decode`).
#[inline(never)]
fn run_mode_decode() -> usize {
    let mut keys = 0;
    for _ in 0..ROUNDS {
        let event = Event::decode(black_box(DECODED)).unwrap();
        keys += event.data_at(["temperature_state"]).map_or(0, |_| 1);
    }
    keys
}

/// How [`run_mode`] evaluates (see the module docs).
#[derive(Clone, Copy)]
enum Mode {
    Plan,
    Once,
    Oracle,
}

/// The measured loop (callgrind's `--toggle-collect` names it): every
/// condition [`ROUNDS`] times, in `mode`.
#[inline(never)]
fn run_mode(
    mode: Mode,
    programs: &[Program],
    plans: &[Plan],
    consts: &[Const],
    event: &Event,
) -> usize {
    let mut met = 0;
    for _ in 0..ROUNDS {
        for (program, plan) in programs.iter().zip(plans) {
            let result = match mode {
                Mode::Plan => black_box(plan).eval_bool(consts, black_box(event), &[]),
                Mode::Once => eval_bool(black_box(program), consts, black_box(event), &[]),
                Mode::Oracle => {
                    oracle::eval_bool(black_box(program), consts, black_box(event), &[])
                }
            };
            met += usize::from(result == Ok(true));
        }
    }
    met
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "plan".into());
    // An optional second argument picks one condition by its index.
    let only: Option<usize> = std::env::args().nth(2).map(|i| i.parse().unwrap());
    let consts = consts();
    let event = event();
    let named: Vec<_> = programs()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|only| only == *i))
        .map(|(_, named)| named)
        .collect();
    let programs: Vec<Program> = named
        .iter()
        .map(|(_, ops)| Program { ops: ops.clone() })
        .collect();
    let plans: Vec<Plan> = programs
        .iter()
        .map(|program| Plan::new(program, &consts).unwrap())
        .collect();
    for (program, (text, _)) in programs.iter().zip(&named) {
        rulecore::verify::verify_program(program, &consts, 0).unwrap();
        let plan = Plan::new(program, &consts).unwrap();
        let answer = plan.eval_bool(&consts, &event, &[]);
        assert_eq!(
            answer,
            oracle::eval_bool(program, &consts, &event, &[]),
            "{text}"
        );
    }
    if mode == "decode" {
        println!("decode: {ROUNDS} events, {} found", run_mode_decode());
        return;
    }
    let by = match mode.as_str() {
        "plan" => Mode::Plan,
        "once" => Mode::Once,
        "oracle" => Mode::Oracle,
        other => panic!("mode is `plan`, `once`, `oracle` or `decode`, not `{other}`"),
    };
    let met = run_mode(by, &programs, &plans, &consts, &event);
    println!(
        "{mode}: {} conditions x {ROUNDS} rounds, {met} met",
        programs.len()
    );
}
