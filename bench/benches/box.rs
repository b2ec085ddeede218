//! `cargo xtask bench box` (docs/engine.md#the-48-mb-box): every in-process
//! figure of the 48 MB box in one run, each beside its goal and, where one
//! exists, a peer or a naive baseline measured in the same run (the peak RSS
//! of the real `ruled` is `runtime/service/benches/box_rss.rs`).
//!
//! - heap per rule (decoded payload, engine), counted by this binary's
//!   allocator; 100,000 one-step rules with 10,000 parked runs;
//! - `Event::decode` vs parsing the same bytes into a `serde_json::Value`;
//! - starting a run;
//! - `when` evaluation vs zen-expression and evalexpr on the same nine
//!   expressions and event;
//! - dispatch with events spread over every one of 100,000 rules vs 1 rule,
//!   and a naive scan of every rule's patterns.
#![allow(unsafe_code)] // the counting GlobalAlloc; it only forwards to System
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use rulec::when::{check, lower, ConstPool};
use rulecore::bundle::{Action, Payload, Rule, Step};
use rulecore::bytecode::{Const, Program};
use rulecore::codec::{decode, encode};
use rulecore::event::Event;
use rulecore::event_data::DataValue;
use rulecore::topic::TopicPattern;
use rulecore::vm::Plan;
use ruled_engine::{Effect, Engine, EngineConfig, Now, Time};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(by: isize) {
    let live = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

const BUDGET: Duration = Duration::from_millis(700);

/// One figure: what, the measured value, the goal, whether it is met, and
/// the comparison line (peer or baseline) if any.
fn report(name: &str, value: String, goal: &str, met: bool, versus: &str) {
    let met = if met { "yes" } else { "NO" };
    println!("{name:<52} {value:>14} {goal:>12} {met:>4}  {versus}");
}

/// `count` rules as `rulec build` makes them from a typical file: one exact
/// topic, one redis step `after_ns` after the trigger, every key at its
/// default. The memory figures are of these.
fn rules(count: usize, after_ns: u64) -> Payload {
    let rules = (0..count)
        .map(|i| {
            Rule::new(
                format!("rule-{i}"),
                "rules/blinkers.toml",
                vec![TopicPattern::parse(&topic(i)).unwrap()],
                vec![Step::new(Action::redis("scooter:blinker", "off"), after_ns)],
            )
        })
        .collect();
    Payload::new("box", rules, vec![], vec![])
}

/// Virtual time between two events (or two batches of events) of the
/// timing figures: every rule keeps the default breaker (100 starts per
/// 10 s, docs/safety.md#the-breaker), and each starts again only after its
/// window has passed, as most rules do, so the breaker keeps no state for
/// it. A rule that starts again within its window pays for its window's
/// start times (docs/engine.md#the-48-mb-box gives what that costs).
/// Turning the breaker off instead (`trip = false`) would box every rule's
/// options, about 180 bytes that a typical rule does not have and one more
/// cache miss per event over 100,000 rules.
const STEP_NS: u64 = 11_000_000_000;

fn topic(i: usize) -> String {
    format!("vehicle.thing{i}.changed")
}

fn event(topic: String) -> Event {
    Event {
        topic: topic.into(),
        ..Event::default()
    }
}

/// ns per call of `f`, after a warm-up, over about [`BUDGET`].
fn ns_per_call(mut f: impl FnMut()) -> f64 {
    for _ in 0..1_000 {
        f();
    }
    let mut calls = 0u64;
    let start = Instant::now();
    while start.elapsed() < BUDGET {
        for _ in 0..1_000 {
            f();
        }
        calls += 1_000;
    }
    start.elapsed().as_nanos() as f64 / calls as f64
}

/// Heap of decoding a bundle of `count` rules and of building its engine,
/// per rule.
fn heap_per_rule(count: usize) -> (f64, f64) {
    let bytes = encode(&rules(count, 0)).unwrap();
    let before = live();
    let bundle = decode(&bytes).unwrap();
    let decoded = live();
    let engine = Engine::new(Arc::new(bundle.payload), EngineConfig::default());
    let built = live();
    drop(engine);
    let per = |bytes: isize| bytes as f64 / count as f64;
    (per(decoded - before), per(built - decoded))
}

fn memory() {
    let (payload, engine) = heap_per_rule(10_000);
    report(
        "engine heap per rule (10,000 rules)",
        format!("{engine:.0} B"),
        "< 300 B",
        engine < 300.0,
        &format!("+ decoded payload {payload:.0} B per rule"),
    );
    // 100,000 one-step durable rules, 10,000 of them parked: the bundle
    // file, the decoded payload, the engine and the runs, at their peak.
    let bytes = encode(&rules(100_000, 30_000_000_000)).unwrap();
    let events: Vec<Event> = (0..10_000).map(|i| event(topic(i * 10))).collect();
    PEAK.store(live(), Ordering::Relaxed);
    let before = live();
    let bundle = decode(&bytes).unwrap();
    let decode_peak = (PEAK.load(Ordering::Relaxed) - before) as f64;
    let decoded = (live() - before) as f64;
    report(
        "decoding 100,000 rules, peak heap over the file",
        format!("{:.1} MB", decode_peak / 1e6),
        "",
        true,
        &format!(
            "{:.1} MB kept ({:.0} B per rule), bundle file {:.1} MB",
            decoded / 1e6,
            decoded / 100_000.0,
            bytes.len() as f64 / 1e6
        ),
    );
    let mut engine = Engine::new(Arc::new(bundle.payload), EngineConfig::default());
    for event in events {
        engine.handle_event(Now::new(Time::ZERO, 0), event);
        engine.drain_effects().for_each(drop);
    }
    assert_eq!(engine.counters().runs_active, 10_000);
    let peak = (PEAK.load(Ordering::Relaxed) - before) as f64 + bytes.len() as f64;
    let kept = (live() - before) as f64;
    drop(engine);
    report(
        "100,000 rules + 10,000 parked runs, peak heap",
        format!("{:.1} MB", peak / 1e6),
        "< 48 MB",
        peak < 48e6,
        &format!(
            "{:.1} MB kept after load, bundle file {:.1} MB",
            kept / 1e6,
            bytes.len() as f64 / 1e6
        ),
    );
}

const EVENT_JSON: &str = r#"{"id":"e-1712345678901","ts":1712345678901,"topic":"vehicle.state","src":"vehicle","from":"Driving","to":"parked","data":{"v":20,"charge":12,"speed":7.5,"level":2}}"#;

fn decoding() {
    let bytes = EVENT_JSON.as_bytes();
    let ours = ns_per_call(|| {
        black_box(Event::decode(black_box(bytes)).unwrap());
    });
    let value = ns_per_call(|| {
        black_box(serde_json::from_slice::<serde_json::Value>(black_box(bytes)).unwrap());
    });
    report(
        "Event::decode (one 180-byte event)",
        format!("{ours:.0} ns"),
        "< 150 ns",
        ours < 150.0,
        &format!(
            "serde_json::Value {value:.0} ns ({:.2}x ours)",
            value / ours
        ),
    );
}

/// Drives every effect of `engine` to its end: each submitted job runs and
/// succeeds at `t`.
fn finish_jobs(engine: &mut Engine, t: Time) {
    while let Some(effect) = engine.poll_effect() {
        if let Effect::Submit(job) = effect {
            engine.action_started(job.id);
            engine.action_finished(Now::new(t, 0), job.id, Ok(()));
        }
    }
}

fn run_start() {
    const RULES: usize = 1_000;
    let mut engine = Engine::new(Arc::new(rules(RULES, 0)), EngineConfig::default());
    let batch: Vec<Event> = (0..RULES).map(|i| event(topic(i))).collect();
    let (mut timed, mut started) = (Duration::ZERO, 0u64);
    let mut now = 0u64;
    let start = Instant::now();
    while start.elapsed() < BUDGET * 2 {
        let events = batch.clone();
        now += STEP_NS;
        let t = Time::from_nanos(now);
        let began = Instant::now();
        for event in events {
            engine.handle_event(Now::new(t, 0), event);
        }
        timed += began.elapsed();
        started += RULES as u64;
        finish_jobs(&mut engine, t);
    }
    assert_eq!(engine.counters().dispatched, started);
    let ns = timed.as_nanos() as f64 / started as f64;
    report(
        "starting a run (event in, job submitted)",
        format!("{ns:.0} ns"),
        "< 80 ns",
        ns < 80.0,
        "",
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that names another bench
    // means this one should not run.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"box".contains(a.as_str()))
    {
        return;
    }
    println!(
        "{:<52} {:>14} {:>12} {:>4}  versus",
        "figure (release, in process)", "measured", "goal", "met"
    );
    memory();
    decoding();
    run_start();
    when::compare();
    dispatch();
}

fn dispatch() {
    const EVENTS: usize = 100_000;
    let mut per_event = Vec::new();
    for count in [1usize, 100_000] {
        let payload = Arc::new(rules(count, 0));
        // Every rule in turn, in a scattered order (7919 is prime, so
        // coprime with 100,000): each pass touches all of them.
        let events: Vec<Event> = (0..EVENTS)
            .map(|n| event(topic((n * 7919) % count)))
            .collect();
        let mut engine = Engine::new(Arc::clone(&payload), EngineConfig::default());
        let mut now = 0u64;
        let mut handled = 0u64;
        let start = Instant::now();
        while start.elapsed() < BUDGET * 2 || handled < EVENTS as u64 {
            for event in &events {
                now += STEP_NS;
                let t = Time::from_nanos(now);
                engine.handle_event(Now::new(t, 0), event.clone());
                finish_jobs(&mut engine, t);
            }
            handled += EVENTS as u64;
        }
        let ns = start.elapsed().as_nanos() as f64 / handled as f64;
        assert_eq!(engine.counters().dispatched, handled);
        per_event.push(ns);
        if count > 1 {
            let naive = naive_scan(&payload, &events[..100]);
            let ratio = ns / per_event[0];
            report(
                "dispatch, events over 100,000 rules vs 1 rule",
                format!("{ratio:.2}x"),
                "< 1.5x",
                ratio < 1.5,
                &format!(
                    "{:.0} vs {:.0} ns per event; naive scan of every rule {:.0} ns ({:.0}x)",
                    ns,
                    per_event[0],
                    naive,
                    naive / ns
                ),
            );
        }
    }
}

/// The naive alternative: test every rule's patterns for each event.
fn naive_scan(payload: &Payload, events: &[Event]) -> f64 {
    let start = Instant::now();
    for event in events {
        let matched = payload
            .rules
            .iter()
            .filter(|rule| rule.on.iter().any(|p| p.matches(black_box(&event.topic))))
            .count();
        assert_eq!(black_box(matched), 1);
    }
    start.elapsed().as_nanos() as f64 / events.len() as f64
}

/// `when` against its peers.
mod when {
    use super::*;
    use evalexpr::{ContextWithMutableVariables, DefaultNumericTypes, HashMapContext, Node};

    /// Ours and zen-expression's spelling of the same nine conditions.
    const EXPRESSIONS: &[(&str, &str)] = &[
        ("data.v > 10 && data.v < 50", "data.v > 10 and data.v < 50"),
        ("data.level >= 2", "data.level >= 2"),
        (r#"to == "parked""#, r#"to == "parked""#),
        (
            r#"from == "Driving" && to == "parked""#,
            r#"from == "Driving" and to == "parked""#,
        ),
        (
            r#"src == "vehicle" && (data.level == 2 || data.level == 3) && !(to == "disarmed")"#,
            r#"src == "vehicle" and (data.level == 2 or data.level == 3) and not (to == "disarmed")"#,
        ),
        (
            "data.speed * 3.6 > 25 || data.level >= 2",
            "data.speed * 3.6 > 25 or data.level >= 2",
        ),
        (
            "data.level < 1 || data.level > 2",
            "data.level < 1 or data.level > 2",
        ),
        (
            "len(to) > 3 && data.speed > 5.0",
            "len(to) > 3 and data.speed > 5.0",
        ),
        ("data.level * 2 > 2.5", "data.level * 2 > 2.5"),
    ];

    /// evalexpr's context for one event: the fields and the scalar `data`
    /// keys as variables.
    fn evalexpr_context(event: &Event) -> HashMapContext<DefaultNumericTypes> {
        use evalexpr::Value;
        let mut ctx = HashMapContext::<DefaultNumericTypes>::new();
        for (name, value) in [
            ("topic", event.topic.as_str()),
            ("src", event.src()),
            ("from", event.from()),
            ("to", event.to()),
        ] {
            ctx.set_value(name.into(), Value::String(value.into()))
                .unwrap();
        }
        for (key, value) in event.data.as_object().into_iter().flatten() {
            let value = match value {
                DataValue::Int(i) => Value::Int(*i),
                DataValue::Float(f) => Value::Float(*f),
                other => panic!("not a number: {other:?}"),
            };
            ctx.set_value(format!("data.{key}"), value).unwrap();
        }
        ctx
    }

    struct Case {
        /// The engine's form of the `when` (docs/engine.md#the-when-plan).
        ours: Plan,
        bytecode: Program,
        zen: zen_expression::Expression<zen_expression::expression::Standard>,
        evalexpr: Node<DefaultNumericTypes>,
    }

    fn cases() -> (Vec<Case>, Vec<Const>) {
        let mut pool = ConstPool::new();
        let cases = EXPRESSIONS
            .iter()
            .map(|(ours, zen)| (lower(&check(ours).unwrap(), &mut pool), ours, zen))
            .collect::<Vec<_>>();
        let consts = pool.finish().0;
        let cases = cases
            .into_iter()
            .map(|(bytecode, ours, zen)| Case {
                ours: Plan::new(&bytecode, &consts).unwrap(),
                bytecode,
                zen: zen_expression::compile_expression(zen).unwrap(),
                evalexpr: evalexpr::build_operator_tree(ours).unwrap(),
            })
            .collect();
        (cases, consts)
    }

    pub fn compare() {
        let event = Event::decode(EVENT_JSON.as_bytes()).unwrap();
        let json: serde_json::Value = serde_json::from_str(EVENT_JSON).unwrap();
        let zen_context = zen_expression::Variable::from(json);
        let ee_context = evalexpr_context(&event);
        let (cases, consts) = cases();
        let mut vm = zen_expression::vm::VM::new();
        let (mut zen_ratios, mut ee_ratios) = (Vec::new(), Vec::new());
        // The ratios of a condition planned where it is used (a step's
        // `when`, `vm::eval_bool`), for what keeping the plan saves.
        let mut once_ratios = Vec::new();
        for (case, (text, _)) in cases.iter().zip(EXPRESSIONS) {
            let ours = case.ours.eval_bool(&consts, &event, &[]).unwrap();
            let oracle = rulecore::vm::oracle::eval_bool(&case.bytecode, &consts, &event, &[]);
            assert_eq!(oracle, Ok(ours), "{text}");
            let zen = case
                .zen
                .evaluate_with(zen_context.clone(), &mut vm)
                .unwrap();
            let ee = case
                .evalexpr
                .eval_boolean_with_context(&ee_context)
                .unwrap();
            assert_eq!(zen, zen_expression::Variable::Bool(ours), "{text}");
            assert_eq!(ee, ours, "{text}");
            let ours_ns = ns_per_call(|| {
                black_box(black_box(&case.ours).eval_bool(&consts, black_box(&event), &[])).ok();
            });
            let once_ns = ns_per_call(|| {
                black_box(rulecore::vm::eval_bool(
                    black_box(&case.bytecode),
                    &consts,
                    black_box(&event),
                    &[],
                ))
                .ok();
            });
            let zen_ns = ns_per_call(|| {
                black_box(
                    case.zen
                        .evaluate_with(black_box(zen_context.clone()), &mut vm),
                )
                .ok();
            });
            let ee_ns = ns_per_call(|| {
                black_box(
                    case.evalexpr
                        .eval_boolean_with_context(black_box(&ee_context)),
                )
                .ok();
            });
            zen_ratios.push(zen_ns / ours_ns);
            once_ratios.push(zen_ns / once_ns);
            ee_ratios.push(ee_ns / ours_ns);
            if zen_ratios.len() == 1 {
                report(
                    &format!("`{text}`"),
                    format!("{ours_ns:.1} ns"),
                    "< 20 ns",
                    ours_ns < 20.0,
                    &format!("zen {zen_ns:.0} ns, evalexpr {ee_ns:.0} ns"),
                );
            }
            println!(
                "    {text:<76} ours {ours_ns:>6.1} ns (planned at use {once_ns:>5.1} ns)  zen {zen_ns:>6.0} ns ({:>4.1}x)  evalexpr {ee_ns:>6.0} ns ({:>4.1}x)",
                zen_ns / ours_ns,
                ee_ns / ours_ns
            );
        }
        let (geo, low) = summary(&zen_ratios);
        let (ee_geo, ee_low) = summary(&ee_ratios);
        let (once_geo, once_low) = summary(&once_ratios);
        report(
            "`when` vs zen-expression, geometric mean (lowest)",
            format!("{geo:.1}x ({low:.1}x)"),
            ">= 8x (4x)",
            geo >= 8.0 && low >= 4.0,
            &format!(
                "vs evalexpr {ee_geo:.1}x ({ee_low:.1}x); planned at each use {once_geo:.1}x ({once_low:.1}x)"
            ),
        );
    }

    fn summary(ratios: &[f64]) -> (f64, f64) {
        let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        (geo, ratios.iter().copied().fold(f64::INFINITY, f64::min))
    }
}
