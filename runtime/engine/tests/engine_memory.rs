//! Bytes per parked run (ARCHITECTURE.md#invariants, the 48 MB cap of README.md#what-this-is): park 10,000
//! runs on a durable 30 s step and count the heap the engine keeps.
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

const RUNS: usize = 10_000;

fn payload() -> Payload {
    let rules = (0..RUNS)
        .map(|i| {
            let off = Action::redis("scooter:blinker", "off");
            Rule::new(
                format!("rule-{i}"),
                "bench.toml",
                vec![TopicPattern::parse(&format!("t.{i}")).unwrap()],
                vec![Step::new(off, 30_000_000_000)],
            )
        })
        .collect();
    Payload::new("test", rules, vec![], vec![])
}

#[test]
fn bytes_per_parked_run() {
    let payload = Arc::new(payload());
    let before_engine = LIVE.load(Ordering::Relaxed);
    let mut engine = Engine::new(payload, EngineConfig::default());
    let per_rule = (LIVE.load(Ordering::Relaxed) - before_engine) / RUNS as isize;
    // The events exist before they reach the engine (the service decoded
    // them); measure what the engine adds, and what the events cost.
    let events: Vec<Event> = (0..RUNS)
        .map(|i| Event {
            topic: format!("t.{i}"),
            ..Event::default()
        })
        .collect();
    // No warm-up: what the effect queue and the timer heap grow to is part
    // of what parking costs.
    let mut puts = 0;
    let start = LIVE.load(Ordering::Relaxed);
    for event in events {
        engine.handle_event(Now::new(Time::ZERO, 0), event);
        while let Some(effect) = engine.poll_effect() {
            puts += usize::from(matches!(effect, Effect::PutRecord { .. }));
        }
    }
    let end = LIVE.load(Ordering::Relaxed);
    assert_eq!(puts, RUNS);
    assert_eq!(engine.counters().runs_active, RUNS as u64);
    assert_eq!(engine.counters().pending, RUNS as u64);
    // `end - start` counts the parked runs (Arc<Event> moved in, run id,
    // timer entry) minus the `Vec<Event>` buffer freed on the way.
    let event_buffer = (RUNS * std::mem::size_of::<Event>()) as isize;
    let kept = end - start + event_buffer;
    let per_run = kept / RUNS as isize;
    // Arc<Event>: two counters + the struct (its strings were allocated by
    // the decoder and are not counted here).
    let event_arc = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Event>();
    println!(
        "bytes per parked run: {per_run} (of which {event_arc} are the Arc<Event>); \
         the rule table costs {per_rule} bytes per rule whether or not it runs"
    );
    assert!(
        per_run < 512,
        "a parked run should be small, got {per_run} bytes"
    );
}
