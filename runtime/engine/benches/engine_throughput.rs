//! Events per second through the engine with 1, 100 and 10,000 rules, each
//! event matching exactly one rule (docs/semantics.md#handling-one-event: no scan of every rule),
//! against a naive scan of every rule's patterns in the same run.
//!
//! `cargo bench -p ruled-engine --bench engine_throughput`
//! (plain `main`, no harness; prints one line per size).
//!
//! `THROUGHPUT_BATCHES=N` runs exactly N batches of each size instead of
//! running on the clock, and `THROUGHPUT_SIZES=1,100` picks the sizes: two
//! runs under callgrind with different N give the instructions per event as
//! their difference, which the machine's load does not move
//! (docs/engine.md#the-event-path-by-instructions).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use rulecore::bundle::{Action, Payload, Rule, Step};
use rulecore::event::Event;
use rulecore::topic::TopicPattern;
use ruled_engine::{Effect, Engine, EngineConfig, Now, Time};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn rules(count: usize) -> Vec<Rule> {
    (0..count)
        .map(|i| {
            // A mix of exact and prefix patterns, like real rule sets.
            let on = if i.is_multiple_of(4) {
                format!("group{i}.*")
            } else {
                format!("vehicle.thing{i}.changed")
            };
            let both = Action::redis("scooter:blinker", "both");
            let mut rule = Rule::new(
                format!("rule-{i}"),
                "bench.toml",
                vec![TopicPattern::parse(&on).unwrap()],
                vec![Step::new(both, 0)],
            );
            rule.options_mut().cancel_on =
                vec![TopicPattern::parse(&format!("cancel.{i}")).unwrap()].into();
            // Millions of starts: no breaker (docs/safety.md#the-breaker).
            rule.options_mut().trip = rulecore::envelope::Breaker::Off;
            rule
        })
        .collect()
}

fn topic(i: usize) -> String {
    if i.is_multiple_of(4) {
        format!("group{i}.x.y")
    } else {
        format!("vehicle.thing{i}.changed")
    }
}

/// Runs `body` repeatedly for about `budget`, or exactly `batches` times
/// when given; returns events per second.
fn measure(
    events_per_call: usize,
    budget: Duration,
    batches: Option<u64>,
    mut body: impl FnMut(),
) -> f64 {
    let start = Instant::now();
    let mut calls = 0u64;
    while batches.map_or(start.elapsed() < budget, |n| calls < n) {
        body();
        calls += 1;
    }
    (calls as f64 * events_per_call as f64) / start.elapsed().as_secs_f64()
}

fn main() {
    let budget = Duration::from_millis(1_500);
    println!(
        "{:>7} rules | {:>16} | {:>14} | {:>16}",
        "", "engine events/s", "engine ns/ev", "naive scan ev/s"
    );
    let mut first_rate = None;
    let batches = std::env::var("THROUGHPUT_BATCHES")
        .ok()
        .map(|n| n.parse::<u64>().expect("THROUGHPUT_BATCHES is a count"));
    let sizes: Vec<usize> = std::env::var("THROUGHPUT_SIZES").map_or_else(
        |_| vec![1, 100, 10_000],
        |list| {
            list.split(',')
                .map(|n| {
                    n.parse()
                        .expect("THROUGHPUT_SIZES is a comma-separated list of counts")
                })
                .collect()
        },
    );
    for count in sizes {
        let payload = Arc::new(Payload::new("bench", rules(count), vec![], vec![]));
        // A batch visits every rule (at least 1,000 events), in a scattered
        // order (7919 is prime), each event matching one: no fixed subset
        // of a large rule set stays in the cache.
        let events: Vec<Event> = (0..count.max(1_000))
            .map(|n| Event {
                topic: topic((n * 7919) % count).into(),
                ..Event::default()
            })
            .collect();

        let mut engine = Engine::new(Arc::clone(&payload), EngineConfig::default());
        let mut now = 0u64;
        let engine_rate = measure(events.len(), budget, batches, || {
            for event in &events {
                now += 1;
                let t = Time::from_nanos(now);
                // The whole path: match, start a run, submit, finish.
                engine.handle_event(Now::new(t, 0), event.clone());
                while let Some(effect) = engine.poll_effect() {
                    if let Effect::Submit(job) = effect {
                        engine.action_started(job.id);
                        engine.action_finished(Now::new(t, 0), job.id, Ok(()));
                    }
                }
            }
        });
        // Every event matched exactly one rule and ran its one step.
        assert_eq!(engine.counters().dispatched, now);
        assert_eq!(engine.counters().runs_active, 0);

        // The naive alternative: test every rule's patterns for each event
        // (matching only: no run is started), plus the same clone.
        // Not run when counting instructions: the difference is the engine's.
        let naive_rate = measure(events.len(), budget, batches.map(|_| 0), || {
            for event in &events {
                let event = black_box(event.clone());
                let mut matched = 0usize;
                for rule in &payload.rules {
                    if rule.cancel_on().iter().any(|p| p.matches(&event.topic)) {
                        matched += 1;
                    }
                    if rule.on.iter().any(|p| p.matches(&event.topic)) {
                        matched += 1;
                    }
                }
                assert_eq!(black_box(matched), 1);
            }
        });
        let ns_per_event = 1e9 / engine_rate;
        println!(
            "{count:>7} rules | {engine_rate:>16.0} | {ns_per_event:>14.0} | {naive_rate:>16.0}"
        );
        let first = *first_rate.get_or_insert(engine_rate);
        if count > 1 {
            // Flat means this stays near 1 as rules grow 100- and 10,000-fold.
            println!(
                "        cost per event vs 1 rule: {:.2}x",
                first / engine_rate
            );
        }
    }
}
