//! Why, not only what (docs/semantics.md#what-a-when-read): every `when`
//! the engine evaluates where an explanation is kept (a dry run, a trace,
//! `EngineConfig::explain`'s notes) comes with the values it read, `to`,
//! `data.*` and `state()`, absent ones said to be absent; where none is
//! kept, nothing is listed.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::bundle::{Action, Payload, Rule, StatePair, Step};
use rulecore::bytecode::{Const, EventField, Op, Program};
use rulecore::event::Event;
use rulecore::topic::TopicPattern;
use ruled_engine::{
    read_text, Effect, Engine, EngineConfig, Note, Now, Time, TimeStyle, WhenResult,
};
use std::sync::Arc;

/// 0 `"level-2-triggered"`, 1 `data.level`, 2 `2`, 3 `"parked"`.
fn payload(rules: Vec<Rule>) -> Arc<Payload> {
    Arc::new(Payload::new(
        "test",
        rules,
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
    ))
}

/// `to == "level-2-triggered" && state("vehicle", "state") == "parked"`
fn when_level_2_parked() -> Program {
    Program {
        ops: vec![
            Op::Field(EventField::To),
            Op::Const(0),
            Op::Eq,
            Op::AndJump(7),
            Op::State(0),
            Op::Const(3),
            Op::Eq,
        ],
    }
}

/// `data.level >= 2`
fn when_level_at_least_2() -> Program {
    Program {
        ops: vec![Op::Data(1), Op::Const(2), Op::Ge],
    }
}

/// The hazards rule on `alarm.triggered`: its own `when`, and a second
/// step with one.
fn hazards() -> Rule {
    let blinker = |value: &str| Action::redis("scooter:blinker", value);
    let mut second = Step::new(blinker("off"), 0);
    second.when = Some(when_level_at_least_2());
    let mut rule = Rule::new(
        "hazards",
        "hazards.toml",
        vec![TopicPattern::parse("alarm.triggered").unwrap()],
        vec![Step::new(blinker("both"), 0), second],
    );
    rule.when = Some(Box::new(when_level_2_parked()));
    rule
}

fn alarm(to: &str, level: i64) -> Event {
    let json = format!(r#"{{"topic":"alarm.triggered","to":"{to}","data":{{"level":{level}}}}}"#);
    Event::decode(json.as_bytes()).unwrap()
}

fn at(ms: u64) -> Now {
    Now::new(Time::from_millis(ms), ms as i64)
}

/// Runs every effect out, the pool finishing each job at once; the notes.
fn drain(engine: &mut Engine, now: Now) -> Vec<Note> {
    let mut notes = Vec::new();
    while let Some(effect) = engine.poll_effect() {
        match effect {
            Effect::Submit(job) => {
                engine.action_started(job.id);
                engine.action_finished(now, job.id, Ok(()));
            }
            Effect::Note(note) => notes.push(note),
            _ => {}
        }
    }
    notes
}

fn texts(reads: &[rulecore::vm::Read]) -> Vec<String> {
    reads.iter().map(ToString::to_string).collect()
}

#[test]
fn a_dry_run_shows_what_each_when_read() {
    let mut engine = Engine::new(payload(vec![hazards()]), EngineConfig::default());
    let dry = engine
        .dry_run("hazards", &alarm("level-2-triggered", 1), at(0))
        .unwrap();
    let when = dry.when.unwrap();
    assert_eq!(when.result, WhenResult::False);
    assert_eq!(
        texts(&when.reads),
        [
            r#"to = "level-2-triggered""#,
            r#"state("vehicle", "state") absent"#
        ]
    );
    assert_eq!(dry.steps[0].when, None);
    let step = dry.steps[1].when.as_ref().unwrap();
    assert_eq!(
        (step.result.clone(), texts(&step.reads)),
        (WhenResult::False, vec!["data.level = 1".to_string()])
    );
    engine.set_state("vehicle", "state", "parked".into());
    let dry = engine
        .dry_run("hazards", &alarm("level-2-triggered", 2), at(0))
        .unwrap();
    let when = dry.when.unwrap();
    assert_eq!(when.result, WhenResult::True);
    assert_eq!(
        texts(&when.reads)[1],
        r#"state("vehicle", "state") = "parked""#
    );
}

#[test]
fn a_trace_keeps_what_the_rule_and_step_when_read() {
    let mut engine = Engine::new(payload(vec![hazards()]), EngineConfig::default());
    engine.set_state("vehicle", "state", "parked".into());
    // The rule's `when` false: the last non-fire says what it read.
    engine.handle_event(at(0), alarm("level-1-triggered", 1));
    drain(&mut engine, at(0));
    // True, but the second step's `when` is false: the run ends there.
    engine.handle_event(at(1000), alarm("level-2-triggered", 1));
    drain(&mut engine, at(1000));
    let trace = engine.trace("hazards", at(2000)).unwrap();
    let non_fire = trace.last_non_fire.as_ref().unwrap();
    assert_eq!(non_fire.reason, "when-false");
    assert_eq!(
        read_text(&non_fire.read),
        r#"to = "level-1-triggered", state("vehicle", "state") = "parked""#
    );
    let step = &trace.runs[0].steps[1];
    assert_eq!(texts(&step.read), ["data.level = 1"]);
    // JSON: each read a `name` and its `value`; the text under the line.
    let json = serde_json::to_value(&trace).unwrap();
    assert_eq!(
        json["runs"][0]["steps"][1]["read"],
        serde_json::json!([{"name": "data.level", "value": 1}])
    );
    let text = trace.to_text(TimeStyle::Millis);
    assert!(
        text.contains("step 1 pass 0: when false [read data.level = 1]; end 1000 ms when-false"),
        "{text}"
    );
    assert!(
        text.contains(
            "last non-fire 0 ms when-false\n    read to = \"level-1-triggered\", state(\"vehicle\", \"state\") = \"parked\"\n"
        ),
        "{text}"
    );
}

#[test]
fn explaining_notes_the_reads_and_nothing_is_read_where_nothing_keeps_them() {
    let explain = EngineConfig {
        explain: true,
        traces: 0,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(payload(vec![hazards()]), explain);
    engine.handle_event(at(0), alarm("level-2-triggered", 1));
    let notes = drain(&mut engine, at(0));
    let reads = notes.iter().find_map(|note| match note {
        Note::NonFire { reads, .. } => Some(texts(reads)),
        _ => None,
    });
    assert_eq!(
        reads.unwrap(),
        [
            r#"to = "level-2-triggered""#,
            r#"state("vehicle", "state") absent"#
        ]
    );
    engine.set_state("vehicle", "state", "parked".into());
    engine.handle_event(at(10), alarm("level-2-triggered", 1));
    let notes = drain(&mut engine, at(0));
    let skipped = notes.iter().find_map(|note| match note {
        Note::StepSkipped { reads, step, .. } => Some((*step, texts(reads))),
        _ => None,
    });
    assert_eq!(skipped.unwrap(), (1, vec!["data.level = 1".to_string()]));

    // No trace and no explanation: the step-skipped note lists nothing.
    let quiet = EngineConfig {
        traces: 0,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(payload(vec![hazards()]), quiet);
    engine.set_state("vehicle", "state", "parked".into());
    engine.handle_event(at(0), alarm("level-2-triggered", 1));
    let notes = drain(&mut engine, at(0));
    assert!(notes.iter().all(|note| match note {
        Note::StepSkipped { reads, .. } | Note::NonFire { reads, .. } => reads.is_empty(),
        _ => true,
    }));
}

/// The rule's `when` and a step's found true: the run-start note and the
/// step's job carry their reads when explaining, and the trace keeps them
/// (worked out from the event and the captured `state()` when viewed).
#[test]
fn a_true_when_shows_what_it_read_in_notes_jobs_and_traces() {
    let explain = EngineConfig {
        explain: true,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(payload(vec![hazards()]), explain);
    engine.set_state("vehicle", "state", "parked".into());
    engine.handle_event(at(0), alarm("level-2-triggered", 2));
    // The state changes after the judgement: the trace shows what was read.
    engine.set_state("vehicle", "state", "ready-to-drive".into());
    let mut started = None;
    let mut step_reads = Vec::new();
    while let Some(effect) = engine.poll_effect() {
        match effect {
            Effect::Note(Note::RunStart { reads, .. }) => started = Some(texts(&reads)),
            Effect::Submit(job) => {
                step_reads.push(texts(job.when_read.as_deref().map_or(&[][..], |r| &r.0)));
                engine.action_started(job.id);
                engine.action_finished(at(0), job.id, Ok(()));
            }
            _ => {}
        }
    }
    let rule_reads = vec![
        r#"to = "level-2-triggered""#.to_string(),
        r#"state("vehicle", "state") = "parked""#.to_string(),
    ];
    assert_eq!(started.unwrap(), rule_reads);
    // Step 0 has no `when`; step 1's read `data.level`.
    assert_eq!(step_reads, [Vec::new(), vec!["data.level = 2".to_string()]]);
    let trace = engine.trace("hazards", at(10)).unwrap();
    let run = &trace.runs[0];
    assert_eq!(run.when, Some(ruled_engine::WhenTrace::True));
    assert_eq!(texts(&run.read), rule_reads);
    assert_eq!(texts(&run.steps[1].read), ["data.level = 2"]);
    let json = serde_json::to_value(&trace).unwrap();
    assert_eq!(
        json["runs"][0]["when"],
        serde_json::json!({"result": "true"})
    );
    assert_eq!(
        json["runs"][0]["read"][1],
        serde_json::json!({"name": "state(\"vehicle\", \"state\")", "value": "parked"})
    );
    let text = trace.to_text(TimeStyle::Millis);
    assert!(
        text.contains(
            "    when true [read to = \"level-2-triggered\", state(\"vehicle\", \"state\") = \"parked\"]\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("step 1 pass 0: when true [read data.level = 2]; submit"),
        "{text}"
    );
}

/// A `when` true and then refused by the cooldown: the non-fire keeps
/// what it read, and a reload that changes the rule keeps them as read.
#[test]
fn a_non_fire_after_a_true_when_keeps_its_reads_across_a_reload() {
    let mut rule = hazards();
    rule.steps = rule.steps[..1].to_vec().into();
    rule.options_mut().cooldown_ns = 60_000_000_000;
    let mut engine = Engine::new(payload(vec![rule.clone()]), EngineConfig::default());
    engine.set_state("vehicle", "state", "parked".into());
    engine.handle_event(at(0), alarm("level-2-triggered", 2));
    drain(&mut engine, at(0));
    engine.handle_event(at(1000), alarm("level-2-triggered", 3));
    drain(&mut engine, at(1000));
    let reads = |engine: &Engine| {
        let trace = engine.trace("hazards", at(2000)).unwrap();
        let non_fire = trace.last_non_fire.unwrap();
        (non_fire.reason, read_text(&non_fire.read))
    };
    let expected = (
        "cooldown".to_string(),
        r#"to = "level-2-triggered", state("vehicle", "state") = "parked""#.to_string(),
    );
    assert_eq!(reads(&engine), expected);
    // The new bundle's `when` reads `data.level` only: the trace still
    // says what the old one read.
    rule.when = Some(Box::new(when_level_at_least_2()));
    engine.reload(payload(vec![rule]), at(1500));
    assert_eq!(reads(&engine), expected);
}

/// A pair first given a value by a live change (no seeding) reads as
/// that value, not as absent.
#[test]
fn a_live_change_makes_a_pair_present() {
    let mut engine = Engine::new(payload(vec![hazards()]), EngineConfig::default());
    assert!(engine.set_field(at(0), "vehicle", "state", "parked".into()));
    let dry = engine
        .dry_run("hazards", &alarm("level-2-triggered", 2), at(0))
        .unwrap();
    assert_eq!(
        texts(&dry.when.unwrap().reads),
        [
            r#"to = "level-2-triggered""#,
            r#"state("vehicle", "state") = "parked""#
        ]
    );
}

/// MUST SHOW (issue 31, `for`): a hold judged again on a state change its
/// `when` reads is traced and noted with its result and reads:
/// `hold-kept` while true, `hold-ended` when false.
#[test]
fn a_hold_judged_again_on_a_state_change_is_traced_with_its_reads() {
    let mut rule = hazards();
    rule.steps = rule.steps[..1].to_vec().into();
    rule.options_mut().hold_ns = 5_000_000_000;
    let explain = EngineConfig {
        explain: true,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(payload(vec![rule]), explain);
    engine.set_state("vehicle", "state", "parked".into());
    engine.handle_event(at(0), alarm("level-2-triggered", 2));
    drain(&mut engine, at(0));
    let non_fire = |engine: &Engine| {
        let trace = engine.trace("hazards", at(3000)).unwrap();
        let nf = trace.last_non_fire.unwrap();
        (nf.at_ms, nf.reason, read_text(&nf.read))
    };
    assert_eq!(non_fire(&engine).1, "hold-pending");
    let index = engine
        .watched_pairs()
        .iter()
        .position(|p| p.hash == "vehicle" && p.field == "state")
        .unwrap();
    // Still true: the hold goes on.
    engine.field_changed(at(1000), index, "parked".into());
    let notes = drain(&mut engine, at(1000));
    assert_eq!(
        non_fire(&engine),
        (
            1000,
            "hold-kept".to_string(),
            r#"to = "level-2-triggered", state("vehicle", "state") = "parked""#.to_string()
        )
    );
    assert!(notes
        .iter()
        .any(|n| matches!(n, Note::NonFire { reads, .. } if reads.len() == 2)));
    // False: the hold ends, said with the value that ended it.
    engine.field_changed(at(2000), index, "ready-to-drive".into());
    let notes = drain(&mut engine, at(2000));
    assert_eq!(
        non_fire(&engine),
        (
            2000,
            "hold-ended".to_string(),
            r#"to = "level-2-triggered", state("vehicle", "state") = "ready-to-drive""#.to_string()
        )
    );
    let reasons: Vec<&str> = notes
        .iter()
        .filter_map(|n| match n {
            Note::NonFire { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, ["hold-ended"]);
    // The hold is gone: its timer fires nothing.
    engine.handle_timeout(at(6000));
    let notes = drain(&mut engine, at(6000));
    assert!(
        !notes.iter().any(|n| matches!(n, Note::RunStart { .. })),
        "{notes:?}"
    );
}
