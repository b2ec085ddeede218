//! docs/when-language.md: "Evaluation allocates nothing on the heap for expressions
//! that do not build strings". Counted with a per-thread counting allocator,
//! so other test threads do not disturb the count.

#![allow(unsafe_code)] // a GlobalAlloc impl is unsafe by definition; it only forwards to System
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::bytecode::{Builtin, Const, EventField, Op, Program};
use rulecore::event::Event;
use rulecore::vm::{Plan, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

fn consts() -> Vec<Const> {
    vec![
        Const::Path(vec!["charge".into()]), // 0
        Const::Int(15),                     // 1
        Const::Str("parked".into()),        // 2
        Const::Str("down".into()),          // 3
        Const::Float(3.6),                  // 4
        Const::Path(vec!["speed".into()]),  // 5
        Const::Str("Parked".into()),        // 6
        Const::Path(vec!["name".into()]),   // 7
        Const::Str(" 19 ".into()),          // 8
        Const::Str("7.5".into()),           // 9
        Const::Bool(true),                  // 10
        Const::Str("true".into()),          // 11
    ]
}

fn event() -> Event {
    Event::decode(
        br#"{"topic":"vehicle.state","to":"parked","data":{"charge":12,"speed":7.5,"name":"Bob"}}"#,
    )
    .unwrap()
}

#[test]
fn expressions_that_build_no_string_allocate_nothing() {
    let consts = consts();
    let event = event();
    let state = vec!["ready-to-drive".to_string(), "down-left".to_string()];
    let programs: Vec<(&str, Vec<Op>)> = vec![
        (
            "data.charge < 15 && to == \"parked\"",
            vec![
                Op::Data(0),
                Op::Const(1),
                Op::Lt,
                Op::AndJump(8),
                Op::Field(EventField::To),
                Op::Const(2),
                Op::Eq,
                Op::AssertBool,
            ],
        ),
        (
            "str::starts_with(state(1), \"down\")",
            vec![Op::State(1), Op::Const(3), Op::Call(Builtin::StartsWith, 2)],
        ),
        (
            "data.speed * 3.6 > max(data.charge, 15) % 7",
            vec![
                Op::Data(5),
                Op::Const(4),
                Op::Mul,
                Op::Data(0),
                Op::Const(1),
                Op::Call(Builtin::Max, 2),
                Op::Const(1),
                Op::Mod,
                Op::Gt,
            ],
        ),
        (
            "str::to_lowercase(to) == \"parked\" (already lowercase)",
            vec![
                Op::Field(EventField::To),
                Op::Call(Builtin::ToLowercase, 1),
                Op::Const(2),
                Op::Eq,
            ],
        ),
        (
            "len(str::trim(data.name)) == 15",
            vec![
                Op::Data(7),
                Op::Call(Builtin::Trim, 1),
                Op::Call(Builtin::Len, 1),
                Op::Const(1),
                Op::Eq,
            ],
        ),
        (
            "int(\" 19 \") < 15 || int(data.speed) > 15 (docs/when-language.md#conversions)",
            vec![
                Op::Const(8),
                Op::Call(Builtin::Int, 1),
                Op::Const(1),
                Op::Lt,
                Op::OrJump(10),
                Op::Data(5),
                Op::Call(Builtin::Int, 1),
                Op::Const(1),
                Op::Gt,
                Op::AssertBool,
            ],
        ),
        (
            "float(\"7.5\") == data.speed && float(data.charge) > 3.6",
            vec![
                Op::Const(9),
                Op::Call(Builtin::Float, 1),
                Op::Data(5),
                Op::Eq,
                Op::AndJump(10),
                Op::Data(0),
                Op::Call(Builtin::Float, 1),
                Op::Const(4),
                Op::Gt,
                Op::AssertBool,
            ],
        ),
        (
            "str(true) == \"true\" && str(to) == \"parked\" (str of a non-number)",
            vec![
                Op::Const(10),
                Op::Call(Builtin::Str, 1),
                Op::Const(11),
                Op::Eq,
                Op::AndJump(10),
                Op::Field(EventField::To),
                Op::Call(Builtin::Str, 1),
                Op::Const(2),
                Op::Eq,
                Op::AssertBool,
            ],
        ),
        (
            "contains((\"down\", \"parked\", 15), to)",
            vec![
                Op::Const(3),
                Op::Const(2),
                Op::Const(1),
                Op::Field(EventField::To),
                Op::Call(Builtin::TupleContains, 4),
            ],
        ),
    ];
    for (text, ops) in programs {
        // Planned once, as the engine plans a rule's `when` at load.
        let program = Plan::new(&Program { ops }, &consts).unwrap();
        // Once outside the count, so lazy one-time setup is not counted.
        let _ = program.eval_bool(&consts, &event, &state);
        let mut result = Ok(false);
        let n = allocations_during(|| {
            for _ in 0..100 {
                result = program.eval_bool(&consts, &event, &state);
            }
        });
        assert!(result.is_ok(), "{text}: {result:?}");
        assert_eq!(n, 0, "{text}: {n} allocations in 100 evaluations");
    }
}

/// `program` planned against [`consts`], as the engine plans at load.
fn plan(program: Program) -> Plan {
    Plan::new(&program, &consts()).unwrap()
}

#[test]
fn building_a_string_is_what_allocates() {
    let consts = consts();
    let event = event();
    // "Parked" + "parked": concatenation builds a string.
    let concat = plan(Program {
        ops: vec![Op::Const(6), Op::Const(2), Op::Add],
    });
    let n = allocations_during(|| {
        let value = concat.eval(&consts, &event, &[]).unwrap();
        assert_eq!(value, Value::Str("Parkedparked".into()));
    });
    assert_eq!(n, 2, "the new string and the evaluation's scratch list");
    // A `+` chain extends the string it built: still one allocation.
    let chain = plan(Program {
        ops: vec![
            Op::Const(6),
            Op::Const(2),
            Op::Add,
            Op::Const(3),
            Op::Add,
            Op::Const(2),
            Op::Add,
        ],
    });
    let n = allocations_during(|| {
        let value = chain.eval(&consts, &event, &[]).unwrap();
        assert_eq!(value, Value::Str("Parkedparkeddownparked".into()));
    });
    assert_eq!(n, 2, "one string, grown in place, and the scratch list");
    // Lower-casing a string with capitals builds one too.
    let lower = plan(Program {
        ops: vec![Op::Const(6), Op::Call(Builtin::ToLowercase, 1)],
    });
    let n = allocations_during(|| {
        lower.eval(&consts, &event, &[]).unwrap();
    });
    assert_eq!(n, 2, "the new string and the evaluation's scratch list");
    // Two strings built side by side.
    let two = plan(Program {
        ops: vec![
            Op::Const(6),
            Op::Call(Builtin::ToLowercase, 1),
            Op::Const(6),
            Op::Const(2),
            Op::Add,
            Op::Eq,
        ],
    });
    let n = allocations_during(|| {
        let value = two.eval(&consts, &event, &[]).unwrap();
        assert_eq!(value, Value::Bool(false));
    });
    assert_eq!(n, 3, "two strings and the scratch list");
}

/// `str` of a number is the one conversion that builds a string
/// (docs/when-language.md#conversions).
#[test]
fn str_of_a_number_allocates() {
    let consts = consts();
    let event = event();
    let program = plan(Program {
        ops: vec![Op::Data(5), Op::Call(Builtin::Str, 1)],
    });
    let n = allocations_during(|| {
        let value = program.eval(&consts, &event, &[]).unwrap();
        assert_eq!(value, Value::Str("7.5".into()));
    });
    assert!(n >= 1, "str(7.5) built no string");
}
