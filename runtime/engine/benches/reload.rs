//! What a live reload costs (docs/semantics.md#live-reload) against what a
//! restart's replay of the same waiting runs costs: 100,000 rules, 10,000
//! of them waiting on a durable step. Three reloads: a bundle changing one
//! unrelated rule (every run kept), a bundle changing every waiting step
//! (every run ended), and the same bundle (a no-op). A restart pays
//! building the engine and the replay; a reload pays matching the rules,
//! building the changed ones, and carrying the rest over.
//!
//! `cargo xtask bench reload` (plain `main`, no harness; prints one line
//! per case).
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use rulecore::bundle::{Action, Payload, Rule, Step};
use rulecore::event::Event;
use rulecore::topic::TopicPattern;
use ruled_engine::{Effect, Engine, EngineConfig, Now, PendingRecord, Time};
use std::sync::Arc;
use std::time::Instant;

const RULES: usize = 100_000;
const WAITING: usize = 10_000;

/// Rule `i` on topic `t<i>`: push now, then `off` (or `later`) after 30 s.
fn payload(later: &str, changed: Option<usize>) -> Arc<Payload> {
    let rules = (0..RULES)
        .map(|i| {
            let last = if changed == Some(i) { "changed" } else { later };
            Rule::new(
                format!("rule-{i}"),
                "bench.toml",
                vec![TopicPattern::parse(&format!("t{i}")).unwrap()],
                vec![
                    Step::new(Action::redis("scooter:blinker", "both"), 0),
                    Step::new(Action::redis("scooter:blinker", last), 30_000_000_000),
                ],
            )
        })
        .collect();
    Arc::new(Payload::new("bench", rules, vec![], vec![]))
}

/// An engine with `WAITING` runs parked on step 1, and their records.
fn parked() -> (Engine, Vec<PendingRecord>) {
    let mut engine = Engine::new(payload("off", None), EngineConfig::default());
    let now = Now::new(Time::from_nanos(0), 1_700_000_000_000);
    let mut records = Vec::new();
    for i in 0..WAITING {
        let event = Event {
            topic: format!("t{}", i * (RULES / WAITING)).into(),
            ..Event::default()
        };
        engine.handle_event(now, event);
        while let Some(effect) = engine.poll_effect() {
            match effect {
                Effect::Submit(job) => {
                    engine.action_started(job.id);
                    engine.action_finished(now, job.id, Ok(()));
                }
                Effect::PutRecord { json, .. } => {
                    records.push(PendingRecord::decode(json.as_bytes()).unwrap());
                }
                _ => {}
            }
        }
    }
    (engine, records)
}

fn main() {
    let now = Now::new(Time::from_nanos(1_000), 1_700_000_000_001);
    let (_, records) = parked();
    let bundle = payload("off", None);
    let started = Instant::now();
    let mut fresh = Engine::new(bundle, EngineConfig::default());
    let new = started.elapsed();
    let started = Instant::now();
    fresh.replay(now, records);
    let replay = started.elapsed();
    println!("start: Engine::new {new:?}, replay of {WAITING} records ({RULES} rules) {replay:?}");
    for (case, next) in [
        (
            "one unrelated rule changed",
            payload("off", Some(RULES - 1)),
        ),
        ("every waiting step changed", payload("later", None)),
        ("the same bundle", payload("off", None)),
    ] {
        let (mut engine, _) = parked();
        // The caller holds the old bundle (the service drops it after the
        // reload); a restart does not free one either.
        let old = std::sync::Arc::clone(engine.payload());
        let started = Instant::now();
        let summary = engine.reload(next, now);
        let took = started.elapsed();
        drop(old);
        let effects = engine.drain_effects().count();
        println!(
            "reload, {case}: {took:?} (runs kept {}, ended {}, effects {effects})",
            summary.runs_kept, summary.runs_ended
        );
    }
}
