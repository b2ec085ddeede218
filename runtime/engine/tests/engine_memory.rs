//! The engine's heap per loaded rule and per parked run, pinned
//! (docs/engine.md#memory-measured, the 48 MB cap of README.md#what-this-is):
//! a change that makes either grow past its bound fails here.
//!
//! The counting allocator counts the bytes asked for, not what the system
//! allocator rounds them up to, so the figures do not depend on the
//! allocator or the machine. A hash table's size jumps at powers of two, so
//! the per-rule figure is the largest over several rule counts, and each
//! bound keeps a margin over the figures measured when it was set.
//! The only test in this binary, so the counting allocator sees nothing else.
#![allow(unsafe_code)] // a counting GlobalAlloc wrapper around System
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use rulecore::bundle::{Action, Payload, Rule, Step};
use rulecore::event::Event;
use rulecore::topic::TopicPattern;
use ruled_engine::{Effect, Engine, EngineConfig, Now, Time};
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod counting;
use counting::LIVE;

/// Bytes of engine heap per loaded one-step rule (state, indexes), at most:
/// what 100,000 rules need to fit docs/engine.md#the-48-mb-box (measured:
/// 95 to 112).
const PER_RULE_BOUND: isize = 150;
/// Bytes of engine heap per parked run (the boxed run, its event's `Arc`,
/// run id, timer entry, and the rule's name, made when it first fires), at
/// most; the event's strings come from the decoder on top (measured: 350).
const PER_RUN_BOUND: isize = 360;

const RUNS: usize = 10_000;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// `count` rules of one exact topic and one durable step 30 s after it.
fn payload(count: usize) -> Payload {
    let rules = (0..count)
        .map(|i| {
            let off = Action::redis("scooter:blinker", "off");
            Rule::new(
                format!("rule-{i}"),
                "rules/blinkers.toml",
                vec![TopicPattern::parse(&format!("t.{i}")).unwrap()],
                vec![Step::new(off, 30_000_000_000)],
            )
        })
        .collect();
    Payload::new("test", rules, vec![], vec![])
}

/// The engine's own heap per rule for `count` rules (the payload excluded).
fn heap_per_rule(count: usize) -> isize {
    let payload = Arc::new(payload(count));
    let before = live();
    let engine = Engine::new(payload, EngineConfig::default());
    let per_rule = (live() - before) / count as isize;
    drop(engine);
    per_rule
}

/// Parks [`RUNS`] runs, one per rule; the engine heap each one adds.
fn heap_per_parked_run() -> isize {
    // Traces off: they hold at most `trace_memory` on top, whatever the
    // number of runs (tests/trace_memory.rs pins that bound).
    let config = EngineConfig {
        traces: 0,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(payload(RUNS)), config);
    // The events exist before they reach the engine (the service decoded
    // them); measure what the engine adds.
    let events: Vec<Event> = (0..RUNS)
        .map(|i| Event {
            topic: format!("t.{i}"),
            ..Event::default()
        })
        .collect();
    // No warm-up: what the effect queue and the timer heap grow to is part
    // of what parking costs.
    let mut puts = 0;
    let start = live();
    for event in events {
        engine.handle_event(Now::new(Time::ZERO, 0), event);
        while let Some(effect) = engine.poll_effect() {
            puts += usize::from(matches!(effect, Effect::PutRecord { .. }));
        }
    }
    let end = live();
    assert_eq!(puts, RUNS);
    assert_eq!(engine.counters().runs_active, RUNS as u64);
    assert_eq!(engine.counters().pending, RUNS as u64);
    // `end - start` counts the parked runs minus the `Vec<Event>` buffer
    // freed on the way.
    let event_buffer = (RUNS * std::mem::size_of::<Event>()) as isize;
    (end - start + event_buffer) / RUNS as isize
}

#[test]
fn heap_per_rule_and_per_parked_run_stay_under_their_bounds() {
    let per_rule = [1_000, 5_000, 10_000, 20_000, 50_000]
        .into_iter()
        .map(|count| (count, heap_per_rule(count)))
        .inspect(|(count, bytes)| println!("{count} rules: {bytes} bytes of engine heap per rule"))
        .map(|(_, bytes)| bytes)
        .max()
        .unwrap_or(0);
    let per_run = heap_per_parked_run();
    println!("bytes per parked run: {per_run}; per rule at most {per_rule}");
    assert!(
        per_rule <= PER_RULE_BOUND,
        "the engine keeps {per_rule} bytes per loaded rule, over the bound of \
         {PER_RULE_BOUND} (docs/engine.md#memory-measured)"
    );
    assert!(
        per_run <= PER_RUN_BOUND,
        "a parked run costs {per_run} bytes, over the bound of {PER_RUN_BOUND} \
         (docs/engine.md#memory-measured)"
    );
}
