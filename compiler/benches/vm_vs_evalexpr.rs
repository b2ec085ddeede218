//! Our `when` VM against evalexpr 13's pre-built operator tree, on the same
//! expressions (every `when` in `fixtures/rules`, plus a few that exercise
//! arithmetic, built-ins and string building) and the same events.
//!
//! Prints, per expression: ns per evaluation for both, the speed-up, and heap
//! allocations per evaluation (counted by this binary's allocator). Goals
//! (docs/when-language.md): zero allocations for expressions that build no string —
//! checked, the run fails otherwise — and a speed-up of at least 5x —
//! reported only, since timing depends on the machine.
//!
//! Run: `cargo xtask bench vm_vs_evalexpr` (or `cargo bench -p rulec`).

#![allow(unsafe_code)] // the counting GlobalAlloc; it only forwards to System
#![allow(clippy::print_stdout, clippy::print_stderr)] // a benchmark reports on stdout
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixed inputs; a failure is a bench bug

use evalexpr::{
    ContextWithMutableFunctions, ContextWithMutableVariables, DefaultNumericTypes, Function,
    HashMapContext, Node, Value,
};
use rulec::when::{check, lower, ConstPool};
use rulecore::bundle::StatePair;
use rulecore::bytecode::{Const, Program};
use rulecore::event::Event;
use rulecore::event_data::DataValue;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Expressions beyond the fixtures: `true` in the second field means the
/// expression builds a string (so it may allocate).
const EXTRA: &[(&str, bool)] = &[
    ("data.speed * 3.6 > 25 || data.level >= 2", false),
    ("max(data.charge, 20) - min(data.speed, 5.5) < 10", false),
    (
        r#"src == "alarm" && (data.level == 2 || data.level == 3) && !(to == "disarmed")"#,
        false,
    ),
    (r#"if(data.level > 1, data.speed, 0.0) ^ 2 >= 56.25"#, false),
    (r#"len(to) > 3 && str::contains(topic, "state")"#, false),
    (r#"str::to_lowercase(from) == "parked""#, true),
    (r#"to + "/" + from == "parked/Driving""#, true),
    // Conversions and membership (docs/when-language.md#conversions): only
    // `str` of a number builds a string.
    (
        r#"int(state("climate", "outside-temp")) < 5 && int(data.speed) > 3"#,
        false,
    ),
    (
        r#"float(state("climate", "outside-temp")) + data.speed > 10.0"#,
        false,
    ),
    (
        r#"contains(("parked", "stand-by", "ready-to-drive"), to)"#,
        false,
    ),
    (
        r#"str(data.level > 1) == "true" && str(to) != "off""#,
        false,
    ),
    (r#"str(data.charge) == "12""#, true),
];

fn events() -> Vec<(&'static str, Event)> {
    let parse = |json: &str| Event::decode(json.as_bytes()).expect("bench event");
    vec![
        (
            "match",
            parse(
                r#"{"topic":"vehicle.state","src":"alarm","from":"Driving","to":"parked","data":{"charge":12,"speed":7.5,"level":2}}"#,
            ),
        ),
        (
            "miss",
            parse(
                r#"{"topic":"button.kickstand.up","src":"vehicle","to":"ready-to-drive","data":{"charge":80,"speed":0.0,"level":0}}"#,
            ),
        ),
    ]
}

fn state_values() -> HashMap<(String, String), String> {
    [
        (("vehicle", "state"), "ready-to-drive"),
        (("vehicle", "kickstand"), "down"),
        (("climate", "outside-temp"), "3"),
    ]
    .into_iter()
    .map(|((h, f), v)| ((h.to_string(), f.to_string()), v.to_string()))
    .collect()
}

/// The evalexpr context of one event, built as the differential tests build
/// it: event fields and scalar `data.*` keys as variables, `state()` and our
/// `str::*` tests as functions.
fn evalexpr_context(event: &Event) -> HashMapContext<DefaultNumericTypes> {
    let mut ctx = HashMapContext::<DefaultNumericTypes>::new();
    let fields = [
        ("topic", event.topic.as_str()),
        ("src", event.src()),
        ("from", event.from()),
        ("to", event.to()),
    ];
    for (name, value) in fields {
        ctx.set_value(name.into(), Value::String(value.into()))
            .unwrap();
    }
    if let Some(data) = event.data.as_object() {
        for (key, value) in data {
            let value = match value {
                DataValue::Int(i) => Value::Int(*i),
                DataValue::UInt(u) => Value::Float(*u as f64),
                DataValue::Float(f) => Value::Float(*f),
                DataValue::Str(s) => Value::String(s.to_string()),
                DataValue::Bool(b) => Value::Boolean(*b),
                _ => Value::Empty,
            };
            ctx.set_value(format!("data.{key}"), value).unwrap();
        }
    }
    let state = state_values();
    ctx.set_function(
        "state".into(),
        Function::new(move |arg| {
            let args = arg.as_fixed_len_tuple(2)?;
            let key = (args[0].as_string()?, args[1].as_string()?);
            Ok(Value::String(state.get(&key).cloned().unwrap_or_default()))
        }),
    )
    .unwrap();
    // Ours, as the checker and the differential test register them.
    for (name, function) in rulec::when::reference::functions() {
        ctx.set_function(name.into(), function).unwrap();
    }
    ctx
}

/// Runs `f` in batches until about `budget` has passed; returns ns per call
/// and allocations per call.
fn measure(budget: Duration, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..1000 {
        f();
    }
    let mut calls = 0u64;
    let allocations_before = ALLOCATIONS.load(Ordering::Relaxed);
    let start = Instant::now();
    while start.elapsed() < budget {
        for _ in 0..1000 {
            f();
        }
        calls += 1000;
    }
    let elapsed = start.elapsed();
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocations_before;
    (
        elapsed.as_nanos() as f64 / calls as f64,
        allocations as f64 / calls as f64,
    )
}

struct Case {
    text: String,
    builds_strings: bool,
    program: Program,
    tree: Node<DefaultNumericTypes>,
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument selects expressions.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/rules");
    let report = rulec::session::Session::new(None)
        .check(&fixtures)
        .expect("fixtures/rules");
    let mut texts: Vec<(String, bool)> = Vec::new();
    for rule in &report.rules {
        let whens = rule
            .when
            .iter()
            .chain(rule.steps.iter().filter_map(|s| s.when.as_ref()));
        for when in whens {
            if !texts.iter().any(|(t, _)| *t == when.source) {
                texts.push((when.source.clone(), false));
            }
        }
    }
    texts.extend(EXTRA.iter().map(|(t, b)| (t.to_string(), *b)));
    if let Some(filter) = &filter {
        texts.retain(|(t, _)| t.contains(filter.as_str()));
    }

    let checked: Vec<_> = texts
        .iter()
        .map(|(text, _)| check(text).unwrap_or_else(|p| panic!("{text}: {p:?}")))
        .collect();
    let mut pool =
        ConstPool::with_state_pairs(checked.iter().flat_map(|c| c.state_pairs.iter().cloned()));
    let cases: Vec<Case> = texts
        .iter()
        .zip(&checked)
        .map(|((text, builds_strings), checked)| Case {
            text: text.clone(),
            builds_strings: *builds_strings,
            program: lower(checked, &mut pool),
            tree: evalexpr::build_operator_tree(text).expect("evalexpr parses it"),
        })
        .collect();
    let (consts, pairs): (Vec<Const>, Vec<StatePair>) = pool.finish();
    let state_map = state_values();
    let state: Vec<String> = pairs
        .iter()
        .map(|p| {
            state_map
                .get(&(p.hash.clone(), p.field.clone()))
                .cloned()
                .unwrap_or_default()
        })
        .collect();

    let budget = Duration::from_millis(150);
    println!(
        "{:<72} {:>5} {:>9} {:>11} {:>7} {:>9} {:>9}",
        "expression", "event", "vm ns", "evalexpr ns", "ratio", "vm alloc", "ee alloc"
    );
    let mut failures = Vec::new();
    let mut ratios = Vec::new();
    for case in &cases {
        for (event_name, event) in events() {
            let ctx = evalexpr_context(&event);
            // Planned once, as the engine plans a rule's `when` at load.
            let plan = rulecore::vm::Plan::new(&case.program, &consts).unwrap();
            let vm_result = plan.eval_bool(&consts, &event, &state);
            let ee_result = case.tree.eval_boolean_with_context(&ctx);
            if vm_result.as_ref().ok() != ee_result.as_ref().ok() {
                failures.push(format!(
                    "{} on {event_name}: vm {vm_result:?}, evalexpr {ee_result:?}",
                    case.text
                ));
            }
            let (vm_ns, vm_allocs) = measure(budget, || {
                black_box(black_box(&plan).eval_bool(
                    black_box(&consts),
                    black_box(&event),
                    black_box(&state),
                ))
                .ok();
            });
            let (ee_ns, ee_allocs) = measure(budget, || {
                black_box(black_box(&case.tree).eval_boolean_with_context(black_box(&ctx))).ok();
            });
            let ratio = ee_ns / vm_ns;
            ratios.push(ratio);
            let mut text = case.text.clone();
            if text.chars().count() > 70 {
                text = text.chars().take(67).collect::<String>() + "...";
            }
            println!(
                "{text:<72} {event_name:>5} {vm_ns:>9.1} {ee_ns:>11.1} {ratio:>6.1}x {vm_allocs:>9.2} {ee_allocs:>9.2}"
            );
            if !case.builds_strings && vm_allocs > 0.0 {
                failures.push(format!(
                    "{} on {event_name}: {vm_allocs} allocations per evaluation, expected 0",
                    case.text
                ));
            }
        }
    }
    if !ratios.is_empty() {
        let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        let min = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
        println!(
            "\nspeed-up over evalexpr: geometric mean {geo:.1}x, lowest {min:.1}x (goal >= 5x)"
        );
    }
    if !failures.is_empty() {
        for failure in &failures {
            eprintln!("FAIL: {failure}");
        }
        std::process::exit(1);
    }
}
