//! The traces' byte budget (docs/semantics.md#traces), counted by a
//! wrapping allocator: 100,000 rules that each fire once keep the traces'
//! heap under the budget, and a loaded bundle that never fires costs no
//! trace memory at all. The only test in this binary, so the counting
//! allocator sees nothing else.
#![allow(unsafe_code)] // a counting GlobalAlloc wrapper around System
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use rulecore::bundle::{Action, Payload, Rule, Step};
use rulecore::event::Event;
use rulecore::topic::TopicPattern;
use ruled_engine::{Effect, Engine, EngineConfig, Now, Time, DEFAULT_TRACE_MEMORY};
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod counting;
use counting::LIVE;

const RULES: usize = 100_000;

fn payload() -> Arc<Payload> {
    let rules = (0..RULES)
        .map(|i| {
            let on = Action::redis("scooter:blinker", "on");
            Rule::new(
                format!("rule-{i}"),
                "bench.toml",
                vec![TopicPattern::parse(&format!("t.{i}")).unwrap()],
                vec![Step::new(on, 0)],
            )
        })
        .collect();
    Arc::new(Payload::new("test", rules, vec![], vec![]))
}

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Heap the engine takes when built, and what firing every rule once (each
/// run done) leaves behind; the engine is then dropped.
fn measure(payload: &Arc<Payload>, traces: usize) -> (isize, isize, usize, usize) {
    let config = EngineConfig {
        traces,
        ..EngineConfig::default()
    };
    let before = live();
    let mut engine = Engine::new(Arc::clone(payload), config);
    let built = live() - before;
    // The events exist before they reach the engine (the service decoded
    // them); each carries a few fields, as a real one does.
    let mut events: Vec<Event> = (0..RULES)
        .map(|i| Event {
            topic: format!("t.{i}").into(),
            id: Some(format!("{i:032x}").into()),
            src: Some("vehicle".into()),
            data: serde_json::json!({ "level": i }).into(),
            ..Event::default()
        })
        .collect();
    let start = live();
    for (i, event) in events.drain(..).enumerate() {
        let now = Now::new(Time::from_millis(i as u64), i as i64);
        engine.handle_event(now, event);
        while let Some(effect) = engine.poll_effect() {
            if let Effect::Submit(job) = effect {
                engine.action_started(job.id);
                engine.action_finished(now, job.id, Ok(()));
            }
        }
    }
    let fired = live() - start;
    assert_eq!(engine.counters().dispatched, RULES as u64);
    assert_eq!(engine.counters().runs_active, 0);
    let accounted = engine.trace_memory();
    let now = Now::new(Time::from_millis(RULES as u64), RULES as i64);
    let kept = engine.traces(now).len();
    drop(engine);
    drop(events);
    (built, fired, accounted, kept)
}

#[test]
fn traces_stay_under_their_budget_and_cost_nothing_before_a_fire() {
    let payload = payload();
    let (built_off, fired_off, accounted_off, _) = measure(&payload, 0);
    // `traces` (a reader's copy) is dropped before the heap is read.
    let (built_on, fired_on, accounted_on, rules_kept) = measure(&payload, 5);
    assert_eq!(accounted_off, 0);
    // Loaded, nothing fired: the traces cost nothing per rule.
    let idle = built_on - built_off;
    // Every rule fired once: what the traces keep, measured, and counted.
    let kept = fired_on - fired_off;
    println!(
        "traces of {RULES} rules: {idle} bytes before any fire; after each fired once, \
         {kept} bytes measured, {accounted_on} counted (budget {DEFAULT_TRACE_MEMORY}), \
         the runs of the latest {rules_kept} rules kept"
    );
    assert!(rules_kept > 1_000, "only {rules_kept} runs kept");
    assert_eq!(idle, 0, "a rule that never fired costs no trace memory");
    assert!(
        kept <= DEFAULT_TRACE_MEMORY as isize,
        "the traces hold {kept} bytes, over the budget"
    );
    assert!(accounted_on <= DEFAULT_TRACE_MEMORY);
    // The count is honest: it covers what is really kept, within a tenth.
    assert!(
        kept as f64 <= accounted_on as f64 * 1.1,
        "counted {accounted_on}, measured {kept}"
    );
    assert!(
        kept as f64 >= accounted_on as f64 * 0.7,
        "counted {accounted_on}, measured only {kept}: the budget is wasted"
    );
}
