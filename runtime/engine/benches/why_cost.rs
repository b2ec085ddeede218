//! What keeping a `when`'s reads costs the event path
//! (docs/semantics.md#what-a-when-read): the hazards rule's `when`
//! (`to`, `data.level` and `state()`) judged on events, with traces on
//! and off, false (a `when-false` non-fire) and true (a run starts, its
//! step's `when` judged too).
//!
//! `cargo bench -p ruled-engine --bench why_cost -- MODE EVENTS`, MODE one
//! of `false`, `true`, `false-quiet`, `true-quiet` (`-quiet`: traces off).
//! Instruction counts, the figure docs quote, come from running the built
//! bench under `valgrind --tool=callgrind --toggle-collect='*judge_events*'`
//! with 1,000 and 11,000 events: the difference over 10,000 is one event.
//! Without valgrind it prints ns per event, for a rough look only.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use rulecore::bundle::{Action, Payload, Rule, StatePair, Step};
use rulecore::bytecode::{Const, EventField, Op, Program};
use rulecore::event::Event;
use rulecore::topic::TopicPattern;
use ruled_engine::{Effect, Engine, EngineConfig, Now, Time};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

/// `to == "level-2-triggered" && data.level >= 2 && state("vehicle", "state") == "parked"`
fn hazards_when() -> Program {
    Program {
        ops: vec![
            Op::Field(EventField::To),
            Op::Const(0),
            Op::Eq,
            Op::AndJump(11),
            Op::Data(1),
            Op::Const(2),
            Op::Ge,
            Op::AndJump(11),
            Op::State(0),
            Op::Const(3),
            Op::Eq,
        ],
    }
}

fn engine(traces: bool) -> Engine {
    let blinker = Action::redis("scooter:blinker", "both");
    let mut step = Step::new(blinker, 0);
    step.when = Some(hazards_when());
    let mut rule = Rule::new(
        "hazards",
        "bench.toml",
        vec![TopicPattern::parse("alarm.triggered").unwrap()],
        vec![step],
    );
    rule.when = Some(Box::new(hazards_when()));
    rule.options_mut().trip = rulecore::envelope::Breaker::Off;
    let payload = Payload::new(
        "bench",
        vec![rule],
        vec![StatePair {
            hash: "vehicle".into(),
            field: "state".into(),
        }],
        vec![
            Const::Str("level-2-triggered".into()),
            Const::Path(vec!["level".into()]),
            Const::Int(2),
            Const::Str("parked".into()),
        ],
    );
    let config = EngineConfig {
        traces: if traces { 5 } else { 0 },
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(Arc::new(payload), config);
    engine.set_state("vehicle", "state", "parked".into());
    engine
}

/// Judges `count` events, each run's job finished at once.
#[inline(never)]
fn judge_events(engine: &mut Engine, event: &Event, count: u64) {
    for i in 0..count {
        let now = Now::new(Time::from_millis(i), i as i64);
        engine.handle_event(now, event.clone());
        while let Some(effect) = engine.poll_effect() {
            if let Effect::Submit(job) = effect {
                engine.action_started(job.id);
                engine.action_finished(now, job.id, Ok(()));
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mode = args.first().map_or("false", String::as_str);
    let count: u64 = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let (to, traces) = match mode {
        "true" => ("level-2-triggered", true),
        "true-quiet" => ("level-2-triggered", false),
        "false-quiet" => ("level-1-triggered", false),
        _ => ("level-1-triggered", true),
    };
    let json = format!(r#"{{"topic":"alarm.triggered","to":"{to}","data":{{"level":2}}}}"#);
    let event = Event::decode(json.as_bytes()).unwrap();
    let mut engine = engine(traces);
    let start = Instant::now();
    judge_events(black_box(&mut engine), &event, count);
    let ns = start.elapsed().as_nanos() as f64 / count.max(1) as f64;
    println!("{mode}: {count} events, {ns:.0} ns/event");
}
