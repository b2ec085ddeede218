//! Traces (docs/semantics.md#traces) on virtual time: what a run, a refused
//! trigger and a cooldown leave in their rules' traces, through the public
//! reader API, as data, JSON and text.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::bundle::{Concurrency, Rule};
use rulecore::bytecode::{Op, Program};
use rulecore::event::Event;
use ruled_engine::{
    Effect, Engine, EngineConfig, Now, PendingRecord, RuleTrace, SubmitOutcome, Time, TimeStyle,
    WhenTrace,
};
use std::sync::Arc;

mod support;
use support::{go as rule, pats, payload, push};

/// `state("vehicle", "state") == "parked"`: false until set.
fn when_parked() -> Program {
    Program {
        ops: vec![Op::State(0), Op::Const(0), Op::Eq],
    }
}

/// The engine with a pool that starts and finishes every job at once;
/// times are virtual ms, and the reader's clock reads the same ms.
struct Harness {
    engine: Engine,
    now_ms: u64,
    /// Failure texts for the next jobs' actions.
    fail: Vec<String>,
}

impl Harness {
    fn new(rules: Vec<Rule>, config: EngineConfig) -> Self {
        Self::replaying(rules, config, Vec::new())
    }

    fn replaying(rules: Vec<Rule>, config: EngineConfig, records: Vec<PendingRecord>) -> Self {
        let mut engine = Engine::new(payload(rules), config);
        engine.replay(Now::new(Time::ZERO, 0), records);
        Self {
            engine,
            now_ms: 0,
            fail: Vec::new(),
        }
    }

    fn now(&self) -> Now {
        Now::new(Time::from_millis(self.now_ms), self.now_ms as i64)
    }

    fn run(&mut self) {
        while let Some(effect) = self.engine.poll_effect() {
            if let Effect::Submit(job) = effect {
                self.engine.action_started(job.id);
                let result = match self.fail.pop() {
                    Some(error) => Err(error),
                    None => Ok(()),
                };
                self.engine.action_finished(self.now(), job.id, result);
            }
        }
    }

    fn to(&mut self, ms: u64) {
        self.now_ms = ms;
        self.engine.handle_timeout(self.now());
        self.run();
    }

    fn event(&mut self, ms: u64, id: &str) {
        self.to(ms);
        let event = Event {
            topic: "go".into(),
            id: Some(id.into()),
            ..Event::default()
        };
        self.engine.handle_event(self.now(), event);
        self.run();
    }

    fn trace(&self, rule: &str) -> RuleTrace {
        self.engine
            .trace(rule, self.now())
            .unwrap_or_else(|| panic!("{rule} has no trace"))
    }
}

/// A run with a false step `when`, a trigger refused by a full backlog, and
/// a cooldown suppressing one: each shows in its rule's trace.
#[test]
fn a_false_step_when_a_refused_trigger_and_a_cooldown_show_in_the_traces() {
    let mut steps = rule("steps", vec![push("both", 0), push("off", 10_000)]);
    Arc::make_mut(&mut steps.steps)[1].when = Some(when_parked());
    steps.concurrency = Concurrency::Queue;
    let mut cool = rule("cool", vec![push("x", 0)]);
    cool.options_mut().cooldown_ns = 60_000_000_000;
    let config = EngineConfig {
        queue_backlog: 1,
        ..EngineConfig::default()
    };
    let mut h = Harness::new(vec![steps, cool], config);
    h.event(0, "e1"); // steps: run 1; cool: run 1
    h.event(2_000, "e2"); // steps: queued; cool: cooldown
    h.event(3_000, "e3"); // steps: refused (backlog of 1 is full); cool: cooldown
    h.to(10_000); // steps: step 1's `when` is false; the queued e2 starts run 2

    let steps = h.trace("steps");
    assert_eq!(steps.runs.len(), 2);
    let first = &steps.runs[0];
    assert_eq!(first.event.as_ref().unwrap().id(), "e1");
    assert_eq!(first.start_ms, 0);
    let end = first.end.as_ref().unwrap();
    assert_eq!((end.at_ms, end.reason.as_str()), (10_000, "when-false"));
    let [step0, step1] = &first.steps[..] else {
        panic!("two steps: {:?}", first.steps)
    };
    assert_eq!(step0.submit.unwrap().outcome, SubmitOutcome::Started);
    assert_eq!(step0.end.as_ref().unwrap().reason, "done");
    let wait = step1.wait.unwrap();
    assert_eq!(
        (wait.start_ms, wait.due_ms, wait.durable),
        (0, 10_000, true)
    );
    assert_eq!(step1.when, Some(WhenTrace::False));
    assert_eq!(step1.submit, None);
    assert_eq!(step1.end.as_ref().unwrap().reason, "when-false");
    // The queued trigger's run is live, waiting at step 1.
    assert_eq!(steps.runs[1].event.as_ref().unwrap().id(), "e2");
    assert!(steps.runs[1].end.is_none());
    let refused = steps.last_non_fire.as_ref().unwrap();
    assert_eq!((refused.at_ms, refused.reason.as_str()), (3_000, "refused"));
    assert_eq!(refused.event.as_ref().unwrap().id(), "e3");

    let cool = h.trace("cool");
    assert_eq!(cool.runs.len(), 1);
    let suppressed = cool.last_non_fire.as_ref().unwrap();
    assert_eq!(
        (suppressed.at_ms, suppressed.reason.as_str()),
        (3_000, "cooldown")
    );

    // The same records as JSON (the control protocol's) and as text.
    let json = serde_json::to_value(&steps).unwrap();
    assert_eq!(json["runs"][0]["steps"][1]["when"]["result"], "false");
    assert_eq!(json["runs"][0]["end"]["reason"], "when-false");
    assert_eq!(json["last_non_fire"]["reason"], "refused");
    assert_eq!(json["last_non_fire"]["event"]["id"], "e3");
    // A client holding the JSON reads it back and renders the same text.
    let read_back: RuleTrace = serde_json::from_value(json).unwrap();
    assert_eq!(read_back, steps);
    let text = steps.to_text(TimeStyle::Millis);
    assert_eq!(
        text,
        "trace steps
  run steps#0-1 start 0 ms, end 10000 ms when-false
    event {\"id\":\"e1\",\"topic\":\"go\"}
    step 0 pass 0: submit 0 ms started; end 0 ms done
    step 1 pass 0: wait 0 ms to 10000 ms durable; when false [read state(\"vehicle\", \"state\") absent]; end 10000 ms when-false
  run steps#0-3 start 10000 ms, live
    event {\"id\":\"e2\",\"topic\":\"go\"}
    step 0 pass 0: submit 10000 ms started; end 10000 ms done
    step 1 pass 0: wait 10000 ms to 20000 ms durable
  last non-fire 3000 ms refused
    event {\"id\":\"e3\",\"topic\":\"go\"}
"
    );
}

/// A failed action's text, a `when` error's text, the per-rule run limit,
/// and the reader's clock.
#[test]
fn errors_are_kept_with_their_text_and_a_rule_keeps_its_last_runs() {
    let mut broken = rule("broken", vec![push("x", 0)]);
    // `!topic`: a type error at run time.
    broken.when = Some(Box::new(Program {
        ops: vec![Op::Field(rulecore::bytecode::EventField::Topic), Op::Not],
    }));
    let fails = rule("fails", vec![push("x", 0)]);
    let config = EngineConfig {
        traces: 2,
        ..EngineConfig::default()
    };
    let mut h = Harness::new(vec![broken, fails], config);
    h.fail.push("exit status 3: no such blinker".into());
    for (at, id) in [(0, "a"), (1_000, "b"), (2_000, "c")] {
        h.event(at, id);
    }
    let fails = h.trace("fails");
    let ids: Vec<&str> = fails
        .runs
        .iter()
        .map(|run| run.event.as_ref().unwrap().id())
        .collect();
    assert_eq!(ids, ["b", "c"], "the last two runs");
    // The first run failed; it is gone, the later ones are done.
    assert!(fails
        .runs
        .iter()
        .all(|r| r.end.as_ref().unwrap().reason == "done"));
    let broken = h.trace("broken");
    assert!(broken.runs.is_empty());
    let error = broken.last_non_fire.unwrap();
    assert_eq!(error.reason, "when-error");
    let text = error.error.unwrap();
    assert!(text.contains("bool"), "the evaluation error: {text}");

    // A failure kept: one run per rule.
    let mut h = Harness::new(
        vec![rule("fails", vec![push("x", 0)])],
        EngineConfig::default(),
    );
    h.fail.push("exit status 3: no such blinker".into());
    h.event(0, "a");
    let run = &h.trace("fails").runs[0];
    assert_eq!(run.end.as_ref().unwrap().reason, "failed");
    let step = run.steps[0].end.as_ref().unwrap();
    assert_eq!(step.reason, "failed");
    assert_eq!(
        step.error.as_deref(),
        Some("exit status 3: no such blinker")
    );
    // Read on a wall clock: engine time 0 is 1000 s before "now".
    let later = Now::new(Time::from_millis(1_000_000), 1_700_000_000_000);
    let wall = h.engine.trace("fails", later).unwrap();
    assert_eq!(wall.runs[0].start_ms, 1_700_000_000_000 - 1_000_000);
    assert!(wall
        .to_text(TimeStyle::Utc)
        .contains("start 2023-11-14T21:56:40.000Z"));
}

/// A run resumed at replay is traced from the step it resumes at, with
/// what is left of its wait.
#[test]
fn a_replayed_run_is_traced_from_its_resumed_step() {
    let hazards = rule("hazards", vec![push("both", 0), push("off", 10_000)]);
    let record = PendingRecord {
        key: None,
        id: "hazards#old-7".into(),
        rule: "hazards".into(),
        source: "test.toml".into(),
        step: 1,
        iter: 0,
        fire_at: 4_000,
        fingerprint: hazards.steps[1].fingerprint.to_string(),
        event: Event {
            topic: "go".into(),
            ..Event::default()
        },
    };
    let mut h = Harness::replaying(vec![hazards], EngineConfig::default(), vec![record]);
    h.to(4_000);
    let trace = h.trace("hazards");
    let run = &trace.runs[0];
    assert!(run.replayed);
    assert_eq!(run.run, "hazards#old-7");
    let [step] = &run.steps[..] else {
        panic!("one step: {:?}", run.steps)
    };
    assert_eq!(step.step, 1);
    let wait = step.wait.unwrap();
    assert_eq!((wait.start_ms, wait.due_ms, wait.durable), (0, 4_000, true));
    assert_eq!(step.submit.unwrap().outcome, SubmitOutcome::Started);
    assert_eq!(run.end.as_ref().unwrap().reason, "done");
    assert!(trace
        .to_text(TimeStyle::Millis)
        .contains("run hazards#old-7 (replayed) start 0 ms, end 4000 ms done"));
}

/// `traces = 0` keeps nothing; a rule that never matched has no trace.
#[test]
fn traces_off_keep_nothing() {
    let config = EngineConfig {
        traces: 0,
        ..EngineConfig::default()
    };
    let mut h = Harness::new(vec![rule("r", vec![push("x", 0)])], config);
    h.event(0, "a");
    assert!(h.engine.trace("r", h.now()).is_none());
    assert_eq!(h.engine.trace_memory(), 0);
    let mut h = Harness::new(
        vec![rule("r", vec![push("x", 0)]), {
            let mut quiet = rule("quiet", vec![push("x", 0)]);
            quiet.on = pats(&["other"]).into();
            quiet
        }],
        EngineConfig::default(),
    );
    h.event(0, "a");
    assert!(h.engine.trace("quiet", h.now()).is_none());
    assert_eq!(h.engine.traces(h.now()).len(), 1);
}
