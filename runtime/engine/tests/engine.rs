//! The engine's behaviours (docs/semantics.md), one test each, on virtual
//! time. Payloads are built with rulecore's constructors; `when` programs
//! from bytecode ops.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulecore::bundle::{Action, Concurrency, Fingerprint, Payload, Repeat, Rule, StatePair, Step};
use rulecore::bytecode::{Const, EventField, Op, Program};
use rulecore::event::Event;
use rulecore::topic::TopicPattern;
use ruled_engine::{
    Counters, DropReason, Effect, EndReason, Engine, EngineConfig, JobId, Note, Now, PendingRecord,
    ReplayDropReason, Time, TriggerOutcome,
};
use std::collections::BTreeMap;
use std::sync::Arc;

const WALL0: i64 = 1_700_000_000_000;

// ----- building payloads ------------------------------------------------

fn pats(list: &[&str]) -> Vec<TopicPattern> {
    list.iter()
        .map(|p| TopicPattern::parse(p).unwrap())
        .collect()
}

fn rule(name: &str, on: &[&str], steps: Vec<Step>) -> Rule {
    Rule::new(name, "test.toml", pats(on), steps)
}

fn blinker(value: &str) -> Action {
    Action::redis("scooter:blinker", value)
}

fn push(value: &str, after_ms: u64) -> Step {
    Step::new(blinker(value), after_ms * 1_000_000)
}

/// The fingerprint of `push(value, after_ms)`, as a payload built by
/// [`payload`] gives it (no `when`).
fn fingerprint(value: &str, after_ms: u64) -> Fingerprint {
    push(value, after_ms).fingerprint
}

/// The hazards rule of README.md#what-this-is.
fn hazards() -> Rule {
    let mut r = rule(
        "hazards",
        &["alarm.triggered"],
        vec![push("both", 0), push("off", 30_000)],
    );
    r.options_mut().cancel_on = pats(&["alarm.disarmed"]).into();
    r
}

/// Const pool used by every test payload: 0 = "parked", 1 = true. Step
/// fingerprints are computed (after any `when` or `durable` edit).
fn payload(rules: Vec<Rule>) -> Payload {
    Payload::new(
        "test",
        rules,
        vec![StatePair {
            hash: "vehicle".into(),
            field: "state".into(),
        }],
        vec![Const::Str("parked".into()), Const::Bool(true)],
    )
}

/// `state("vehicle", "state") == "parked"`
fn when_parked() -> Program {
    Program {
        ops: vec![Op::State(0), Op::Const(0), Op::Eq],
    }
}

/// `!topic`: a type error at run time.
fn when_broken() -> Program {
    Program {
        ops: vec![Op::Field(EventField::Topic), Op::Not],
    }
}

// ----- driving the engine -----------------------------------------------

/// A driver: performs effects into a fake record store, and (in auto mode)
/// starts and finishes every submitted job at once.
struct H {
    engine: Engine,
    now: u64,
    wall_offset: i64,
    auto: bool,
    /// Jobs submitted and not yet reported, in order.
    jobs: Vec<ruled_engine::Job>,
    records: BTreeMap<String, String>,
    lines: Vec<String>,
}

impl H {
    fn new(rules: Vec<Rule>) -> Self {
        Self::with(payload(rules), EngineConfig::default())
    }
    fn with(payload: Payload, mut config: EngineConfig) -> Self {
        config.epoch = "t".into();
        Self {
            engine: Engine::new(Arc::new(payload), config),
            now: 0,
            wall_offset: WALL0,
            auto: true,
            jobs: vec![],
            records: BTreeMap::new(),
            lines: vec![],
        }
    }
    fn manual(mut self) -> Self {
        self.auto = false;
        self
    }
    fn t(&self) -> Time {
        Time::from_millis(self.now)
    }
    fn wall(&self) -> i64 {
        self.now as i64 + self.wall_offset
    }
    fn event(&mut self, topic: &str) {
        self.event_with(Event {
            topic: topic.into(),
            ..Event::default()
        });
    }
    fn event_with(&mut self, event: Event) {
        let (t, w) = (self.t(), self.wall());
        self.engine.handle_event(Now::new(t, w), event);
        self.pump();
    }
    /// Moves virtual time to `ms`, firing deadlines on the way.
    fn to(&mut self, ms: u64) {
        while let Some(deadline) = self.engine.next_deadline() {
            if deadline > Time::from_millis(ms) {
                break;
            }
            self.now = self.now.max(deadline.as_millis());
            let (t, w) = (deadline, self.wall());
            self.engine.handle_timeout(Now::new(t, w));
            self.pump();
        }
        self.now = ms;
    }
    fn start(&mut self, job: JobId) {
        let index = self.jobs.iter().position(|j| j.id == job).unwrap();
        if let Some(id) = &self.jobs[index].drop_record {
            self.records.remove(&**id);
            self.lines.push(format!("start-drop {id}"));
        }
        self.engine.action_started(job);
    }
    fn finish(&mut self, job: JobId, result: Result<(), String>) {
        self.jobs.retain(|j| j.id != job);
        let (t, w) = (self.t(), self.wall());
        self.engine.action_finished(Now::new(t, w), job, result);
        self.pump();
    }
    /// A worker starts `job` and it ends with `result`.
    fn complete(&mut self, job: JobId, result: Result<(), String>) {
        self.start(job);
        self.finish(job, result);
    }
    fn refuse(&mut self, job: JobId) {
        self.jobs.retain(|j| j.id != job);
        let (t, w) = (self.t(), self.wall());
        self.engine.action_refused(Now::new(t, w), job);
        self.pump();
    }
    fn last_job(&self) -> JobId {
        self.jobs.last().unwrap().id
    }
    fn pump(&mut self) {
        let mut ready = vec![];
        while let Some(effect) = self.engine.poll_effect() {
            let line = describe(&effect);
            self.lines.push(format!("{} {line}", self.now));
            match effect {
                Effect::Submit(job) => {
                    if self.auto {
                        ready.push(job.id);
                    }
                    self.jobs.push(job);
                }
                Effect::PutRecord { id, json, .. } => {
                    self.records.insert(id.to_string(), json);
                }
                Effect::DropRecord { id, .. } => {
                    self.records.remove(&*id);
                }
                Effect::Log(_)
                | Effect::Note(_)
                | Effect::Publish(_)
                | Effect::Poll { .. }
                | Effect::Toast { .. }
                | Effect::ScheduleFired { .. } => {}
            }
        }
        for job in ready {
            self.complete(job, Ok(()));
        }
    }
    fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines)
            .into_iter()
            .filter(|l| !l.contains(" log "))
            .collect()
    }
    fn counters(&self) -> Counters {
        self.engine.counters()
    }
    fn stored(&self) -> Vec<PendingRecord> {
        self.records
            .values()
            .map(|json| PendingRecord::decode(json.as_bytes()).unwrap())
            .collect()
    }
}

fn describe(effect: &Effect) -> String {
    match effect {
        Effect::Submit(job) => {
            let what = match &*job.action {
                Action::Redis { push, .. } => push.source().to_string(),
                other => format!("{other:?}"),
            };
            let owns = job
                .drop_record
                .as_ref()
                .map(|id| format!(" owns {id}"))
                .unwrap_or_default();
            // A finally step is `f0`, `f1`, ... (docs/semantics.md#finally).
            let list = if job.finally() { "f" } else { "s" };
            format!(
                "submit {} {list}{} p{} {what}{owns}",
                job.run, job.step, job.pass
            )
        }
        Effect::PutRecord {
            id,
            step,
            pass,
            fire_at,
            ..
        } => format!("put {id} s{step} p{pass} at+{}", fire_at - WALL0),
        Effect::DropRecord { id, reason, .. } => format!("drop {id} {}", reason.as_str()),
        Effect::Log(line) => format!("log {line}"),
        Effect::ScheduleFired { rule, fire_ms } => format!("schedule-fired {rule} {fire_ms}"),
        Effect::Note(note) => match note {
            Note::RunStart { run, .. } => format!("run-start {run}"),
            Note::RunEnd { run, reason, .. } => format!("run-end {run} {}", reason.as_str()),
            Note::StepSkipped {
                run, step, finally, ..
            } => {
                let list = if *finally { "f" } else { "s" };
                format!("step-skipped {run} {list}{step}")
            }
            Note::FinallyStart { run, .. } => format!("finally-start {run}"),
            Note::Trigger { rule, outcome } => format!("{} {rule}", outcome.kind()),
            Note::ReplayResume {
                run, step, pass, ..
            } => {
                format!("replay-resume {run} s{step} p{pass}")
            }
            Note::ReplayDrop { id, reason, .. } => format!("replay-drop {id} {}", reason.as_str()),
            Note::RecordKept { run, .. } => format!("record-kept {run}"),
            Note::DueWait { run, step, .. } => format!("due-wait {run} s{step}"),
            Note::NonFire { rule, reason, .. } => format!("non-fire {rule} {}", reason.as_str()),
        },
        Effect::Publish(events) => {
            let topics: Vec<&str> = events.iter().map(|e| &*e.topic).collect();
            format!("publish {}", topics.join(" "))
        }
        Effect::Poll { hash, pairs } => format!("poll {hash} {pairs:?}"),
        Effect::Toast { channel, message } => format!("toast {channel} {message}"),
    }
}

fn lines(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

// ----- walking a sequence (docs/semantics.md#walking-a-sequence) --------

#[test]
fn hazards_walk_record_before_timer_and_dropped_at_start() {
    let mut h = H::new(vec![hazards()]);
    h.event("alarm.triggered");
    assert_eq!(
        h.take(),
        lines(&[
            "0 run-start hazards#t-1",
            "0 submit hazards#t-1 s0 p0 both",
            "0 put hazards#t-1 s1 p0 at+30000",
        ])
    );
    assert_eq!(h.records.len(), 1);
    assert_eq!(h.counters().pending, 1);
    assert_eq!(h.engine.next_deadline(), Some(Time::from_millis(30_000)));
    h.to(29_999);
    assert!(h.take().is_empty());
    h.to(40_000);
    assert_eq!(
        h.take(),
        lines(&[
            "30000 submit hazards#t-1 s1 p0 off owns hazards#t-1",
            "start-drop hazards#t-1",
            "30000 run-end hazards#t-1 done",
        ])
    );
    assert!(h.records.is_empty());
    let c = h.counters();
    assert_eq!(
        (c.dispatched, c.pending, c.runs_active, c.rules),
        (2, 0, 0, 1)
    );
    let stats = h.engine.rule_stats(0).unwrap();
    assert_eq!(stats.runs_started, 1);
    assert_eq!(stats.last_fire_ms, Some(WALL0));
}

#[test]
fn a_record_is_written_before_its_timer_and_holds_the_design_fields() {
    let mut h = H::new(vec![hazards()]);
    h.event_with(Event {
        topic: "alarm.triggered".into(),
        to: Some("level-2".into()),
        ..Event::default()
    });
    let record = &h.stored()[0];
    assert_eq!(record.id, "hazards#t-1");
    assert_eq!((record.step, record.iter), (1, 0));
    assert_eq!(record.fire_at, WALL0 + 30_000);
    assert_eq!(record.source, "test.toml");
    assert_eq!(record.fingerprint, fingerprint("off", 30_000).to_string());
    assert_eq!(record.event.to(), "level-2");
}

#[test]
fn cancel_drops_timer_and_record_and_no_later_step_runs() {
    let mut h = H::new(vec![hazards()]);
    h.event("alarm.triggered");
    h.take();
    h.to(5_000);
    h.event("alarm.disarmed");
    assert_eq!(
        h.take(),
        lines(&[
            "5000 drop hazards#t-1 cancelled",
            "5000 run-end hazards#t-1 cancelled"
        ])
    );
    assert!(h.records.is_empty());
    assert_eq!(h.engine.next_deadline(), None);
    assert_eq!(h.counters().pending, 0);
    h.to(60_000);
    assert!(h.take().is_empty());
}

#[test]
fn cancel_between_record_write_and_timer_arm_leaves_no_record() {
    let mut r = hazards();
    r.steps = vec![push("off", 30_000)].into();
    let mut h = H::new(vec![r]);
    // Both events reach the engine before the driver performs anything.
    h.engine.handle_event(
        Now::new(Time::ZERO, WALL0),
        Event {
            topic: "alarm.triggered".into(),
            ..Event::default()
        },
    );
    h.engine.handle_event(
        Now::new(Time::ZERO, WALL0),
        Event {
            topic: "alarm.disarmed".into(),
            ..Event::default()
        },
    );
    let mut order = vec![];
    while let Some(effect) = h.engine.poll_effect() {
        match &effect {
            Effect::PutRecord { id, .. } => order.push(format!("put {id}")),
            Effect::DropRecord { id, .. } => order.push(format!("drop {id}")),
            _ => {}
        }
    }
    assert_eq!(order, ["put hazards#t-1", "drop hazards#t-1"]);
    assert_eq!(h.engine.next_deadline(), None);
}

#[test]
fn an_action_handed_over_still_runs_after_cancel_but_nothing_follows() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let job = h.last_job();
    h.event("alarm.disarmed");
    h.take();
    h.complete(job, Ok(()));
    // No record, no next step: the run is gone.
    assert!(h.records.is_empty());
    assert!(h.take().iter().all(|l| !l.contains("submit")));
    assert_eq!(h.counters().dispatched, 1);
}

#[test]
fn a_failed_action_ends_the_run_and_counts() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let job = h.last_job();
    h.complete(job, Err("boom".into()));
    let out = h.take();
    assert!(
        out.contains(&"0 run-end hazards#t-1 failed".to_string()),
        "{out:?}"
    );
    assert!(h.records.is_empty(), "step 1 never parked");
    assert_eq!(h.counters().failed, 1);
    assert_eq!(h.engine.next_deadline(), None);
}

#[test]
fn step_n_plus_1_is_considered_only_when_step_n_has_finished() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let job = h.last_job();
    h.start(job);
    h.take();
    // Step 0 is running: step 1 is not parked, no record, no timer.
    assert!(h.records.is_empty());
    assert_eq!(h.engine.next_deadline(), None);
    assert_eq!(h.counters().pending, 0);
    assert_eq!(h.counters().runs_active, 1);
    h.to(60_000);
    assert!(h.take().is_empty(), "nothing happens while step 0 runs");
    h.finish(job, Ok(()));
    assert_eq!(h.take(), lines(&["60000 put hazards#t-1 s1 p0 at+90000"]));
}

#[test]
fn a_failure_after_the_run_moved_on_is_logged_with_its_own_step() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let job = h.last_job();
    h.start(job);
    // Cancelled while step 0 runs; the action still runs and then fails.
    h.event("alarm.disarmed");
    h.finish(job, Err("boom".into()));
    let all = std::mem::take(&mut h.lines);
    assert!(
        all.contains(&"0 log rule hazards step 0: action failed: boom".to_string()),
        "{all:?}"
    );
    assert_eq!(h.counters().failed, 1);
}

#[test]
fn a_restart_lets_the_handed_over_action_run_but_only_the_new_run_goes_on() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let old = h.last_job();
    h.start(old);
    h.to(1_000);
    h.event("alarm.triggered");
    let new = h.last_job();
    assert_ne!(old, new);
    h.take();
    // The old run's action finishes: nothing follows from it.
    h.finish(old, Ok(()));
    assert!(h.take().is_empty());
    assert!(h.records.is_empty());
    h.complete(new, Ok(()));
    assert_eq!(h.take(), lines(&["1000 put hazards#t-2 s1 p0 at+31000"]));
    assert_eq!(h.counters().dispatched, 2);
}

#[test]
fn a_queue_rule_starts_its_oldest_held_trigger_when_the_run_fails() {
    let mut r = rule("q", &["go"], vec![push("x", 0)]);
    r.concurrency = Concurrency::Queue;
    let mut h = H::new(vec![r]).manual();
    for id in ["a", "b", "c"] {
        h.event_with(Event {
            topic: "go".into(),
            id: Some(id.into()),
            ..Event::default()
        });
    }
    let first = h.last_job();
    h.take();
    h.complete(first, Err("no".into()));
    assert_eq!(
        h.take(),
        lines(&[
            "0 run-end q#t-1 failed",
            "0 run-start q#t-2",
            "0 submit q#t-2 s0 p0 x",
        ])
    );
    assert_eq!(h.jobs.last().unwrap().event.id(), "b");
}

#[test]
fn a_refused_non_durable_step_ends_the_run_and_counts_dropped() {
    let mut rule = hazards();
    Arc::make_mut(&mut rule.steps)[1].durable = false;
    let mut h = H::new(vec![rule]).manual();
    h.event("alarm.triggered");
    let job = h.last_job();
    h.complete(job, Ok(()));
    h.to(30_000);
    let off = h.last_job();
    h.take();
    h.refuse(off);
    assert_eq!(h.take(), lines(&["30000 run-end hazards#t-1 refused"]));
    assert!(h.records.is_empty(), "a non-durable step has no record");
    assert_eq!(h.engine.due_backlog_len(), 0);
    assert_eq!(h.counters().dropped, 1);
    assert_eq!(h.counters().runs_active, 0);
}

#[test]
fn stop_keeps_records_of_waiting_runs_and_an_abandoned_step_keeps_its_record() {
    let mut a = hazards();
    a.name = "a".into();
    let mut b = hazards();
    b.name = "b".into();
    b.on = pats(&["b"]).into();
    let mut h = H::new(vec![a, b]).manual();
    h.event("alarm.triggered");
    let j = h.last_job();
    h.complete(j, Ok(()));
    h.event("b");
    let j = h.last_job();
    h.complete(j, Ok(()));
    h.to(30_000);
    // Both "off" steps are submitted; the pool holds them.
    let (ja, jb) = (h.jobs[0].id, h.jobs[1].id);
    assert_eq!(h.records.len(), 2);
    h.take();
    h.engine.stop();
    h.pump();
    assert_eq!(
        h.take(),
        lines(&["30000 run-end a#t-1 stopped", "30000 run-end b#t-2 stopped"])
    );
    // The pool drains `a` after the engine stopped: it starts, so its record
    // goes; `b` is abandoned in the queue, so its record stays.
    h.start(ja);
    h.engine.action_abandoned(jb);
    assert_eq!(h.records.keys().collect::<Vec<_>>(), ["b#t-2"]);
    let c = h.counters();
    assert_eq!((c.dispatched, c.dropped), (3, 1));
}

#[test]
fn stop_keeps_records_and_a_job_started_after_stop_still_drops_its_record() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let job = h.last_job();
    h.complete(job, Ok(()));
    h.take();
    h.engine.stop();
    h.pump();
    assert_eq!(
        h.take(),
        lines(&["0 record-kept hazards#t-1", "0 run-end hazards#t-1 stopped"])
    );
    assert_eq!(h.records.len(), 1);
    assert_eq!(h.counters().pending, 0);
    assert_eq!(h.engine.next_deadline(), None);
    // Events after stop do nothing.
    h.event("alarm.triggered");
    assert!(h.take().is_empty());
}

// ----- handling one event (docs/semantics.md#handling-one-event) --------

#[test]
fn cancel_on_and_on_with_the_same_topic_stops_then_starts_again() {
    let mut r = hazards();
    r.concurrency = Concurrency::Drop;
    r.options_mut().cancel_on = pats(&["alarm.triggered"]).into();
    let mut h = H::new(vec![r]);
    h.event("alarm.triggered");
    h.take();
    h.to(1_000);
    h.event("alarm.triggered");
    let out = h.take();
    assert_eq!(
        &out[..3],
        lines(&[
            "1000 drop hazards#t-1 cancelled",
            "1000 run-end hazards#t-1 cancelled",
            "1000 run-start hazards#t-2",
        ])
    );
    assert!(!out.iter().any(|l| l.contains("trigger-dropped")));
}

#[test]
fn one_event_cancels_one_rule_and_fires_another() {
    let mut first = hazards();
    first.name = "first".into();
    first.options_mut().cancel_on = pats(&["button.*"]).into();
    let second = rule("second", &["button.brake"], vec![push("x", 0)]);
    let mut h = H::new(vec![first, second]);
    h.event("alarm.triggered");
    h.take();
    h.event("button.brake");
    assert_eq!(
        h.take(),
        lines(&[
            "0 drop first#t-1 cancelled",
            "0 run-end first#t-1 cancelled",
            "0 run-start second#t-2",
            "0 submit second#t-2 s0 p0 x",
            "0 run-end second#t-2 done",
        ])
    );
}

#[test]
fn rules_an_event_fires_run_in_bundle_order_via_exact_prefix_and_any() {
    let rules = vec![
        rule("r0", &["*"], vec![push("0", 0)]),
        rule("r1", &["other"], vec![push("1", 0)]),
        rule("r2", &["button.*", "button.brake.left"], vec![push("2", 0)]),
        rule("r3", &["button.brake.left"], vec![push("3", 0)]),
        rule("r4", &["button.brake.*"], vec![push("4", 0)]),
    ];
    let mut h = H::new(rules);
    h.event("button.brake.left");
    let starts: Vec<String> = h
        .take()
        .into_iter()
        .filter(|l| l.contains("run-start"))
        .collect();
    assert_eq!(
        starts,
        lines(&[
            "0 run-start r0#t-1",
            "0 run-start r2#t-2",
            "0 run-start r3#t-3",
            "0 run-start r4#t-4",
        ])
    );
}

#[test]
fn disabled_rules_neither_match_nor_cancel() {
    let mut off = hazards();
    off.enabled = false;
    let mut other = hazards();
    other.name = "other".into();
    other.options_mut().cancel_on = pats(&["x"]).into();
    let mut canceller = rule("canceller", &["y"], vec![push("y", 0)]);
    canceller.enabled = false;
    canceller.options_mut().cancel_on = pats(&["alarm.triggered"]).into();
    let mut h = H::new(vec![off, other, canceller]);
    h.event("alarm.triggered");
    let out = h.take();
    assert!(out.iter().all(|l| !l.contains("hazards#")), "{out:?}");
    assert!(out.contains(&"0 run-start other#t-1".to_string()));
    assert!(!out.iter().any(|l| l.contains("cancelled")));
    assert_eq!(h.counters().rules, 1);
}

#[test]
fn rule_when_gates_and_an_eval_error_counts_as_not_met() {
    let mut gated = rule("gated", &["go"], vec![push("x", 0)]);
    gated.when = Some(Box::new(when_parked()));
    let mut broken = rule("broken", &["go"], vec![push("y", 0)]);
    broken.when = Some(Box::new(when_broken()));
    let mut h = H::new(vec![gated, broken]);
    h.event("go");
    assert!(h.take().is_empty());
    assert!(h.engine.set_state("vehicle", "state", "parked".into()));
    h.event("go");
    let all = std::mem::take(&mut h.lines);
    assert!(
        all.contains(&"0 run-start gated#t-1".to_string()),
        "{all:?}"
    );
    assert!(
        all.iter()
            .any(|l| l.contains("log rule broken: `when` failed to evaluate")),
        "{all:?}"
    );
    assert_eq!(h.engine.rule_stats(1).unwrap().errors, 2);
    assert_eq!(h.engine.rule_stats(0).unwrap().errors, 0);
}

#[test]
fn restart_ends_the_live_run_with_its_record_then_starts_anew() {
    let mut h = H::new(vec![hazards()]);
    h.event("alarm.triggered");
    h.take();
    h.to(10_000);
    h.event("alarm.triggered");
    assert_eq!(
        h.take(),
        lines(&[
            "10000 drop hazards#t-1 restarted",
            "10000 run-end hazards#t-1 restarted",
            "10000 run-start hazards#t-2",
            "10000 submit hazards#t-2 s0 p0 both",
            "10000 put hazards#t-2 s1 p0 at+40000",
        ])
    );
    assert_eq!(h.records.keys().collect::<Vec<_>>(), ["hazards#t-2"]);
    assert_eq!(h.counters().pending, 1);
    h.to(100_000);
    let out = h.take();
    assert_eq!(
        out[0],
        "40000 submit hazards#t-2 s1 p0 off owns hazards#t-2"
    );
}

#[test]
fn drop_ignores_triggers_while_a_run_is_live() {
    let mut r = hazards();
    r.concurrency = Concurrency::Drop;
    let mut h = H::new(vec![r]);
    h.event("alarm.triggered");
    h.take();
    h.event("alarm.triggered");
    assert_eq!(h.take(), lines(&["0 trigger-dropped hazards"]));
    h.to(30_000);
    h.take();
    h.event("alarm.triggered");
    assert_eq!(h.take()[0], "30000 run-start hazards#t-2");
}

#[test]
fn queue_holds_eight_refuses_the_ninth_and_starts_the_oldest_when_the_run_ends() {
    let mut r = rule("q", &["go"], vec![push("x", 1_000)]);
    r.concurrency = Concurrency::Queue;
    let mut h = H::new(vec![r]);
    for n in 0..10 {
        h.event_with(Event {
            topic: "go".into(),
            id: Some(format!("e{n}").into()),
            ..Event::default()
        });
    }
    let out = h.take();
    assert_eq!(
        out.iter().filter(|l| l.contains("trigger-queued")).count(),
        8
    );
    assert_eq!(
        out.iter().filter(|l| l.contains("trigger-refused")).count(),
        1
    );
    assert_eq!(h.counters().refused, 1);
    h.to(1_000);
    let out = h.take();
    assert_eq!(
        &out[..4],
        lines(&[
            "1000 submit q#t-1 s0 p0 x owns q#t-1",
            "start-drop q#t-1",
            "1000 run-end q#t-1 done",
            "1000 run-start q#t-2",
        ])
    );
    assert_eq!(h.stored()[0].event.id(), "e1", "the oldest held trigger");
    h.to(100_000);
    let starts = h.take().iter().filter(|l| l.contains("run-start")).count();
    assert_eq!(starts, 7);
}

#[test]
fn cancel_throws_the_queue_backlog_away() {
    let mut r = rule("q", &["go"], vec![push("x", 1_000)]);
    r.concurrency = Concurrency::Queue;
    r.options_mut().cancel_on = pats(&["stop"]).into();
    let mut h = H::new(vec![r]);
    h.event("go");
    h.event("go");
    h.event("go");
    h.event("stop");
    h.take();
    h.to(100_000);
    assert!(h.take().is_empty());
}

#[test]
fn cooldown_suppresses_triggers_within_it() {
    let mut r = rule("c", &["go"], vec![push("x", 0)]);
    r.options_mut().cooldown_ns = 10_000_000_000;
    let mut h = H::new(vec![r]);
    h.event("go");
    h.to(9_999);
    h.event("go");
    h.to(10_000);
    h.event("go");
    let out = h.take();
    assert_eq!(
        out.iter()
            .filter(|l| l.contains("run-start") || l.contains("trigger"))
            .cloned()
            .collect::<Vec<_>>(),
        lines(&[
            "0 run-start c#t-1",
            "9999 trigger-suppressed c",
            "10000 run-start c#t-2",
        ])
    );
}

#[test]
fn debounce_fires_once_with_the_latest_event_after_the_quiet_window() {
    let mut r = rule("d", &["go"], vec![push("x", 0)]);
    r.options_mut().debounce_ns = 500_000_000;
    r.options_mut().cancel_on = pats(&["stop"]).into();
    let mut h = H::new(vec![r]).manual();
    for (at, id) in [(0, "a"), (100, "b"), (400, "c")] {
        h.to(at);
        h.event_with(Event {
            topic: "go".into(),
            id: Some(id.into()),
            ..Event::default()
        });
    }
    assert_eq!(h.counters().pending, 1, "one debounce window");
    // A cancel does not clear a held debounce.
    h.event("stop");
    h.to(899);
    assert!(h.take().is_empty());
    h.to(900);
    assert_eq!(
        h.take(),
        lines(&["900 run-start d#t-1", "900 submit d#t-1 s0 p0 x"])
    );
    assert_eq!(h.jobs[0].event.id(), "c");
    assert_eq!(h.counters().pending, 0);
}

/// `EngineConfig::explain` (docs/simulation.md#explain): a typed note for
/// every non-fire decision, and none without it.
#[test]
fn explain_notes_every_non_fire_decision() {
    let mut r = rule("d", &["go"], vec![push("x", 0)]);
    r.options_mut().debounce_ns = 500_000_000;
    r.options_mut().cooldown_ns = 60_000_000_000;
    let mut off = rule("off", &["go"], vec![push("y", 0)]);
    off.enabled = false;
    let config = EngineConfig {
        explain: true,
        ..EngineConfig::default()
    };
    let mut h = H::with(payload(vec![r.clone(), off.clone()]), config).manual();
    h.event("go");
    h.to(100);
    h.event("go");
    h.to(600);
    h.to(700);
    h.event("go");
    h.to(1200);
    assert_eq!(
        h.take(),
        lines(&[
            "0 non-fire off rule-disabled",
            "0 non-fire d debounce-held",
            "100 non-fire off rule-disabled",
            "100 non-fire d debounce-reset",
            "600 run-start d#t-1",
            "600 submit d#t-1 s0 p0 x",
            "700 non-fire off rule-disabled",
            "700 non-fire d debounce-held",
            "1200 trigger-suppressed d",
            "1200 non-fire d cooldown",
        ])
    );
    let mut h = H::new(vec![r, off]).manual();
    h.event("go");
    h.to(600);
    assert!(h.take().iter().all(|l| !l.contains("non-fire")));
}

#[test]
fn debounce_then_cooldown_checks_cooldown_at_the_debounced_dispatch() {
    let mut r = rule("dc", &["go"], vec![push("x", 0)]);
    r.options_mut().debounce_ns = 1_000_000_000;
    r.options_mut().cooldown_ns = 5_000_000_000;
    let mut h = H::new(vec![r]);
    h.event("go"); // dispatch at 1000
    h.to(2_000);
    h.event("go"); // dispatch at 3000: within 5s of 1000 -> suppressed
    h.to(6_000);
    h.event("go"); // dispatch at 7000: 6s after 1000 -> runs
    h.to(20_000);
    let out: Vec<String> = h
        .take()
        .into_iter()
        .filter(|l| l.contains("run-start") || l.contains("trigger"))
        .collect();
    assert_eq!(
        out,
        lines(&[
            "1000 run-start dc#t-1",
            "3000 trigger-suppressed dc",
            "7000 run-start dc#t-2",
        ])
    );
}

#[test]
fn step_when_is_evaluated_at_fire_time_not_schedule_time() {
    let mut r = hazards();
    Arc::make_mut(&mut r.steps)[1].when = Some(when_parked());
    let mut h = H::new(vec![r]);
    // Not parked when scheduled, parked when due: the step runs.
    h.event("alarm.triggered");
    h.to(5_000);
    h.engine.set_state("vehicle", "state", "parked".into());
    h.take();
    h.to(30_000);
    assert_eq!(
        h.take()[0],
        "30000 submit hazards#t-1 s1 p0 off owns hazards#t-1"
    );
    // Parked when scheduled, not when due: the step is skipped and the run
    // ends; its record goes.
    h.event("alarm.triggered");
    h.to(40_000);
    h.engine.set_state("vehicle", "state", "riding".into());
    h.take();
    h.to(60_000);
    assert_eq!(
        h.take(),
        lines(&[
            "60000 step-skipped hazards#t-2 s1",
            "60000 drop hazards#t-2 when-false",
            "60000 run-end hazards#t-2 when-false",
        ])
    );
    assert!(h.records.is_empty());
}

#[test]
fn a_step_when_error_ends_the_run_and_counts_an_error() {
    let mut r = hazards();
    Arc::make_mut(&mut r.steps)[0].when = Some(when_broken());
    let mut h = H::new(vec![r]);
    h.event("alarm.triggered");
    assert_eq!(
        h.take(),
        lines(&[
            "0 run-start hazards#t-1",
            "0 step-skipped hazards#t-1 s0",
            "0 run-end hazards#t-1 when-false",
        ])
    );
    assert_eq!(h.engine.rule_stats(0).unwrap().errors, 1);
}

#[test]
fn repeat_walks_the_steps_again_with_iter_in_records() {
    let mut r = rule("rep", &["go"], vec![push("on", 0), push("off", 2_000)]);
    r.options_mut().repeat = Repeat {
        count: 3,
        every_ns: 1_000_000_000,
        period_ns: 0,
    };
    let mut h = H::new(vec![r]);
    h.event("go");
    h.to(100_000);
    let out: Vec<String> = h
        .take()
        .into_iter()
        .filter(|l| l.contains("put") || l.contains("submit") || l.contains("run-end"))
        .collect();
    assert_eq!(
        out,
        lines(&[
            "0 submit rep#t-1 s0 p0 on",
            "0 put rep#t-1 s1 p0 at+2000",
            "2000 submit rep#t-1 s1 p0 off owns rep#t-1",
            "3000 submit rep#t-1 s0 p1 on",
            "3000 put rep#t-1 s1 p1 at+5000",
            "5000 submit rep#t-1 s1 p1 off owns rep#t-1",
            "6000 submit rep#t-1 s0 p2 on",
            "6000 put rep#t-1 s1 p2 at+8000",
            "8000 submit rep#t-1 s1 p2 off owns rep#t-1",
            "8000 run-end rep#t-1 done",
        ])
    );
}

#[test]
fn pending_counts_step_waits_repeat_gaps_and_debounce_windows() {
    let mut a = rule("a", &["a"], vec![push("x", 0)]);
    a.options_mut().repeat = Repeat {
        count: 2,
        every_ns: 1_000_000_000,
        period_ns: 0,
    };
    let b = rule("b", &["b"], vec![push("y", 5_000)]);
    let mut c = rule("c", &["c"], vec![push("z", 0)]);
    c.options_mut().debounce_ns = 1_000_000_000;
    let mut h = H::new(vec![a, b, c]);
    h.event("a");
    h.event("b");
    h.event("c");
    let c = h.counters();
    assert_eq!((c.pending, c.runs_active), (3, 2));
}

// ----- replay (docs/semantics.md#durability-and-replay) -----------------

fn record(
    id: &str,
    rule: &str,
    step: u32,
    iter: u32,
    fire_at_rel: i64,
    fp: Fingerprint,
) -> PendingRecord {
    PendingRecord {
        key: None,
        id: id.into(),
        rule: rule.into(),
        source: "test.toml".into(),
        step,
        iter,
        fire_at: WALL0 + fire_at_rel,
        fingerprint: fp.to_string(),
        event: Event {
            topic: "alarm.triggered".into(),
            id: Some(id.into()),
            ..Event::default()
        },
    }
}

fn off_fp() -> Fingerprint {
    fingerprint("off", 30_000)
}

fn replay(h: &mut H, records: Vec<PendingRecord>) {
    for r in &records {
        h.records.insert(r.id.clone(), r.encode().unwrap());
    }
    let (t, w) = (h.t(), h.wall());
    h.engine.replay(Now::new(t, w), records);
    h.pump();
}

#[test]
fn replay_drops_records_for_each_of_the_five_reasons() {
    let mut h = H::new(vec![hazards()]);
    replay(
        &mut h,
        vec![
            record("gone#x-1", "gone", 1, 0, 1_000, off_fp()),
            record("hazards#x-2", "hazards", 7, 0, 1_000, off_fp()),
            record(
                "hazards#x-3",
                "hazards",
                1,
                0,
                1_000,
                fingerprint("changed", 30_000),
            ),
            record("hazards#x-4", "hazards", 1, 0, -300_001, off_fp()),
            record("hazards#x-5", "hazards", 1, 0, 30_001, off_fp()),
        ],
    );
    let out: Vec<String> = h
        .take()
        .into_iter()
        .filter(|l| l.contains("replay-drop"))
        .collect();
    assert_eq!(
        out,
        lines(&[
            "0 replay-drop hazards#x-4 too-late",
            "0 replay-drop gone#x-1 rule-gone",
            "0 replay-drop hazards#x-2 step-gone",
            "0 replay-drop hazards#x-3 fingerprint",
            "0 replay-drop hazards#x-5 too-early",
        ])
    );
    assert!(h.records.is_empty());
    assert_eq!(h.counters().runs_active, 0);
}

#[test]
fn replay_resumes_overdue_now_and_future_after_what_is_left() {
    let mut a = hazards();
    a.name = "a".into();
    let mut b = hazards();
    b.name = "b".into();
    let mut h = H::new(vec![a, b]);
    replay(
        &mut h,
        vec![
            record("b#x-1", "b", 1, 0, 12_000, off_fp()),
            record("a#x-9", "a", 1, 0, -299_000, off_fp()),
        ],
    );
    assert_eq!(
        h.take(),
        lines(&[
            "0 replay-resume a#x-9 s1 p0",
            "0 submit a#x-9 s1 p0 off owns a#x-9",
            // (the test driver runs jobs after the batch of effects)
            "0 replay-resume b#x-1 s1 p0",
            "start-drop a#x-9",
            "0 run-end a#x-9 done",
        ])
    );
    assert_eq!(h.engine.next_deadline(), Some(Time::from_millis(12_000)));
    assert_eq!(h.engine.rule_stats(1).unwrap().runs_started, 1);
    h.to(12_000);
    assert_eq!(h.take()[0], "12000 submit b#x-1 s1 p0 off owns b#x-1");
    assert!(h.records.is_empty());
}

#[test]
fn replay_applies_the_concurrency_policy_across_records() {
    let mut restart = hazards();
    restart.name = "restart".into();
    let mut drop = hazards();
    drop.name = "drop".into();
    drop.concurrency = Concurrency::Drop;
    let mut queue = hazards();
    queue.name = "queue".into();
    queue.concurrency = Concurrency::Queue;
    let mut h = H::new(vec![restart, drop, queue]);
    replay(
        &mut h,
        vec![
            record("restart#x-1", "restart", 1, 0, 5_000, off_fp()),
            record("restart#x-2", "restart", 1, 0, 9_000, off_fp()),
            record("drop#x-3", "drop", 1, 0, 5_000, off_fp()),
            record("drop#x-4", "drop", 1, 0, 9_000, off_fp()),
            record("queue#x-5", "queue", 1, 0, 5_000, off_fp()),
            record("queue#x-6", "queue", 1, 0, 9_000, off_fp()),
        ],
    );
    let out = h.take();
    let dropped: Vec<&String> = out.iter().filter(|l| l.contains("replay-drop")).collect();
    assert_eq!(
        dropped,
        // In (fire-at, id) order: restart#x-1 is due at 5s, the others at 9s.
        [
            "0 replay-drop restart#x-1 concurrency",
            "0 replay-drop drop#x-4 concurrency",
            "0 replay-drop queue#x-6 concurrency",
        ]
    );
    assert_eq!(
        h.records.keys().collect::<Vec<_>>(),
        ["drop#x-3", "queue#x-5", "restart#x-2"]
    );
    assert_eq!(h.counters().runs_active, 3);
}

#[test]
fn replay_ties_are_taken_by_id() {
    let mut h = H::new(vec![hazards()]);
    replay(
        &mut h,
        vec![
            record("hazards#x-b", "hazards", 1, 0, 5_000, off_fp()),
            record("hazards#x-a", "hazards", 1, 0, 5_000, off_fp()),
        ],
    );
    // restart keeps the later one, and with equal fire-at the later is by id.
    assert!(h
        .take()
        .contains(&"0 replay-drop hazards#x-a concurrency".to_string()));
}

#[test]
fn a_negative_replay_window_means_zero() {
    let config = EngineConfig {
        replay_window_ms: -60_000,
        ..EngineConfig::default()
    };
    let mut h = H::with(payload(vec![hazards()]), config);
    replay(
        &mut h,
        vec![
            record("hazards#x-1", "hazards", 1, 0, -1, off_fp()),
            record("hazards#x-2", "hazards", 1, 0, 0, off_fp()),
        ],
    );
    let out = h.take();
    assert_eq!(out[0], "0 replay-drop hazards#x-1 too-late");
    assert_eq!(out[1], "0 drop hazards#x-1 too-late");
    assert_eq!(out[2], "0 replay-resume hazards#x-2 s1 p0");
}

/// Records no run writes (forged or edited by hand) are removed, not run:
/// a step without `after`, a step with `durable = false`, a pass past the
/// repeat count.
#[test]
fn records_ruled_never_writes_are_dropped() {
    let mut quick = Step::new(blinker("off"), 300_000_000);
    quick.durable = false;
    quick.fingerprint = rulecore::fingerprint::fingerprint_of(&quick, &[], &[]);
    let quick_fp = quick.fingerprint;
    let mut h = H::new(vec![hazards(), rule("quick", &["x"], vec![quick])]);
    replay(
        &mut h,
        vec![
            record("hazards#x-1", "hazards", 0, 0, 0, fingerprint("both", 0)),
            record("quick#x-2", "quick", 0, 0, 0, quick_fp),
            record("hazards#x-3", "hazards", 1, 1, 0, off_fp()),
        ],
    );
    assert_eq!(
        h.take(),
        lines(&[
            "0 replay-drop hazards#x-1 never-written",
            "0 drop hazards#x-1 never-written",
            "0 replay-drop hazards#x-3 never-written",
            "0 drop hazards#x-3 never-written",
            "0 replay-drop quick#x-2 never-written",
            "0 drop quick#x-2 never-written",
        ])
    );
}

#[test]
fn a_clock_jumped_backwards_makes_records_too_early() {
    let mut h = H::new(vec![hazards()]);
    h.event("alarm.triggered");
    let kept: Vec<PendingRecord> = h.stored();
    assert_eq!(kept[0].fire_at, WALL0 + 30_000);
    // A new process whose wall clock is an hour behind.
    let mut next = H::new(vec![hazards()]);
    next.wall_offset = WALL0 - 3_600_000;
    replay(&mut next, kept);
    assert_eq!(
        next.take(),
        lines(&[
            "0 replay-drop hazards#t-1 too-early",
            "0 drop hazards#t-1 too-early"
        ])
    );
    assert!(next.records.is_empty());
}

#[test]
fn a_replayed_run_continues_on_its_pass_and_keeps_its_id() {
    let mut r = rule("rep", &["go"], vec![push("on", 0), push("off", 2_000)]);
    r.options_mut().repeat = Repeat {
        count: 3,
        every_ns: 1_000_000_000,
        period_ns: 0,
    };
    let mut h = H::new(vec![r]);
    replay(
        &mut h,
        vec![record(
            "rep#old-4",
            "rep",
            1,
            1,
            500,
            fingerprint("off", 2_000),
        )],
    );
    h.to(100_000);
    let out: Vec<String> = h
        .take()
        .into_iter()
        .filter(|l| l.contains("submit") || l.contains("run-end"))
        .collect();
    assert_eq!(
        out,
        lines(&[
            "500 submit rep#old-4 s1 p1 off owns rep#old-4",
            "1500 submit rep#old-4 s0 p2 on",
            "3500 submit rep#old-4 s1 p2 off owns rep#old-4",
            "3500 run-end rep#old-4 done",
        ])
    );
    // New runs still use this process's epoch.
    h.event("go");
    assert!(h.take().contains(&"100000 run-start rep#t-1".to_string()));
}

#[test]
fn replay_only_rules_take_part_in_replay_only() {
    let mut r = hazards();
    r.enabled = false;
    let mut h = H::new(vec![r]);
    replay(
        &mut h,
        vec![record("hazards#x-1", "hazards", 1, 0, 1_000, off_fp())],
    );
    h.to(1_000);
    let out = h.take();
    assert!(out.contains(&"1000 submit hazards#x-1 s1 p0 off owns hazards#x-1".to_string()));
    h.event("alarm.triggered");
    assert!(h.take().is_empty());
}

#[test]
fn undecodable_records_are_logged_and_removed() {
    let mut h = H::new(vec![hazards()]);
    let good = record("hazards#x-1", "hazards", 1, 0, 1_000, off_fp());
    let (t, w) = (h.t(), h.wall());
    h.engine.replay_raw(
        Now::new(t, w),
        vec![
            ("junk".into(), b"{not json".to_vec()),
            ("other-id".into(), good.encode().unwrap().into_bytes()),
            ("hazards#x-1".into(), good.encode().unwrap().into_bytes()),
        ],
    );
    h.pump();
    let all = std::mem::take(&mut h.lines);
    assert!(
        all.contains(&"0 drop junk undecodable".to_string()),
        "{all:?}"
    );
    assert!(
        all.contains(&"0 drop other-id undecodable".to_string()),
        "{all:?}"
    );
    assert!(all
        .iter()
        .any(|l| l.contains("log removing pending record \"junk\"")));
    assert!(all.contains(&"0 replay-resume hazards#x-1 s1 p0".to_string()));
}

/// event-service's waiting records, left in `NS:pending` by a migration:
/// dropped as `foreign`, one line naming the rule and the due time
/// (docs/service.md#migrating-from-event-service); a broken record of our
/// own format stays `undecodable`.
#[test]
fn foreign_records_are_dropped_as_foreign_naming_rule_and_due() {
    let mut h = H::new(vec![hazards()]);
    let (t, w) = (h.t(), h.wall());
    h.engine.replay_raw(
        Now::new(t, w),
        vec![
            (
                "evs-1".into(),
                br#"{"rule":"hazards","step":1,"due":1764657600000,"event":{}}"#.to_vec(),
            ),
            (
                "evs-2".into(),
                br#"{"rule_name":"lights","fire_at":"2026-12-02T07:00:00Z"}"#.to_vec(),
            ),
            (
                "ours-broken".into(),
                br#"{"id":"ours-broken","rule":"hazards","fire-at":5}"#.to_vec(),
            ),
        ],
    );
    h.pump();
    let all = std::mem::take(&mut h.lines);
    assert!(all.contains(&"0 drop evs-1 foreign".to_string()), "{all:?}");
    assert!(all.contains(&"0 drop evs-2 foreign".to_string()), "{all:?}");
    assert!(
        all.contains(&"0 drop ours-broken undecodable".to_string()),
        "{all:?}"
    );
    assert!(
        all.iter()
            .any(|l| l.contains("\"hazards\", due 1764657600000")),
        "{all:?}"
    );
    assert!(
        all.iter()
            .any(|l| l.contains("\"lights\", due 2026-12-02T07:00:00Z")),
        "{all:?}"
    );
}

#[test]
fn a_cancel_after_replay_drops_the_replayed_record() {
    let mut h = H::new(vec![hazards()]);
    replay(
        &mut h,
        vec![record("hazards#x-1", "hazards", 1, 0, 20_000, off_fp())],
    );
    h.take();
    h.event("alarm.disarmed");
    assert_eq!(
        h.take(),
        lines(&[
            "0 drop hazards#x-1 cancelled",
            "0 run-end hazards#x-1 cancelled"
        ])
    );
    assert!(h.records.is_empty());
}

#[test]
fn stale_timers_do_not_pile_up_under_a_stream_of_debounced_events() {
    let mut r = rule("d", &["go"], vec![push("x", 0)]);
    r.options_mut().debounce_ns = 10_000_000_000;
    let mut h = H::new(vec![r]);
    for at in 0..10_000 {
        h.now = at;
        h.event("go");
    }
    assert_eq!(h.counters().pending, 1);
    assert_eq!(
        h.engine.next_deadline(),
        Some(Time::from_millis(9_999 + 10_000))
    );
    h.to(30_000);
    assert_eq!(
        h.take().iter().filter(|l| l.contains("run-start")).count(),
        1
    );
}

#[test]
fn reason_and_kind_names_are_design_8s() {
    use EndReason as E;
    let ends = [
        E::Done,
        E::Cancelled,
        E::Restarted,
        E::WhenFalse,
        E::Failed,
        E::Refused,
        E::Stopped,
    ];
    assert_eq!(
        ends.map(E::as_str),
        [
            "done",
            "cancelled",
            "restarted",
            "when-false",
            "failed",
            "refused",
            "stopped"
        ]
    );
    use ReplayDropReason as R;
    let replays = [
        R::RuleGone,
        R::StepGone,
        R::Fingerprint,
        R::TooLate,
        R::TooEarly,
        R::Concurrency,
        R::NeverWritten,
    ];
    assert_eq!(
        replays.map(R::as_str),
        [
            "rule-gone",
            "step-gone",
            "fingerprint",
            "too-late",
            "too-early",
            "concurrency",
            "never-written"
        ]
    );
    assert_eq!(DropReason::Replay(R::TooLate).as_str(), "too-late");
    use TriggerOutcome as T;
    assert_eq!(
        [T::Dropped, T::Queued, T::Refused, T::Suppressed].map(T::kind),
        [
            "trigger-dropped",
            "trigger-queued",
            "trigger-refused",
            "trigger-suppressed"
        ]
    );
}

// ----- invariants under random input --------------------------------------

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn chaos_rules() -> Vec<Rule> {
    let mut a = hazards();
    a.name = "a".into();
    a.on = pats(&["x.*"]).into();
    a.options_mut().cancel_on = pats(&["stop"]).into();
    // docs/semantics.md#finally: a cleanup that waits, and one at once.
    a.options_mut().finally = vec![
        Step {
            durable: false,
            ..push("a-off", 800)
        },
        push("a-left", 0),
    ]
    .into();
    let mut b = rule(
        "b",
        &["x.one", "y"],
        vec![push("1", 500), push("2", 0), push("3", 2_000)],
    );
    b.concurrency = Concurrency::Queue;
    b.options_mut().cancel_on = pats(&["x.one"]).into();
    Arc::make_mut(&mut b.steps)[1].when = Some(when_parked());
    let mut c = rule("c", &["*"], vec![push("c", 700)]);
    c.concurrency = Concurrency::Drop;
    c.options_mut().debounce_ns = 300_000_000;
    c.options_mut().cooldown_ns = 1_000_000_000;
    c.options_mut().repeat = Repeat {
        count: 3,
        every_ns: 400_000_000,
        period_ns: 0,
    };
    let mut d = rule("d", &["y"], vec![push("d", 1_500)]);
    d.when = Some(Box::new(when_parked()));
    Arc::make_mut(&mut d.steps)[0].durable = false;
    vec![a, b, c, d]
}

#[test]
fn random_input_never_leaks_runs_timers_or_records() {
    // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md):
    // the seed picks the first of the consecutive per-case seeds.
    let fuzz = test_kit::fuzz::Fuzz::from_env(
        "engine::random_input_never_leaks_runs_timers_or_records",
        1,
    )
    .unwrap();
    for seed in (0..fuzz.cases(300) as u64).map(|i| fuzz.seed().wrapping_add(i)) {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut h = H::new(chaos_rules()).manual();
        let mut kept_by_refusal: std::collections::BTreeSet<String> = Default::default();
        let mut restarts = 0;
        for _ in 0..60 {
            match rng.below(10) {
                0..=3 => {
                    let topic = ["x.one", "x.two", "y", "stop", "z"][rng.below(5) as usize];
                    h.event(topic);
                }
                4..=5 => {
                    let to = h.now + rng.below(3_000);
                    h.to(to);
                }
                6 => {
                    let value = if rng.below(2) == 0 {
                        "parked"
                    } else {
                        "riding"
                    };
                    h.engine.set_state("vehicle", "state", value.into());
                }
                7 => {
                    // A restart: stop, keep the store, replay into a new engine.
                    h.engine.stop();
                    h.pump();
                    for job in std::mem::take(&mut h.jobs) {
                        if let Some(id) = &job.drop_record {
                            kept_by_refusal.insert(id.to_string());
                        }
                        h.engine.action_abandoned(job.id);
                    }
                    restarts += 1;
                    let config = EngineConfig {
                        epoch: format!("r{restarts}"),
                        ..EngineConfig::default()
                    };
                    h.engine = Engine::new(Arc::new(payload(chaos_rules())), config);
                    let fields = h
                        .records
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
                        .collect();
                    let (t, w) = (h.t(), h.wall());
                    h.engine.replay_raw(Now::new(t, w), fields);
                    h.pump();
                }
                _ => {}
            }
            // The pool: start, fail or refuse whatever was submitted.
            while !h.jobs.is_empty() {
                let job = h.jobs[0].id;
                match rng.below(10) {
                    0 => {
                        if let Some(id) = &h.jobs[0].drop_record {
                            kept_by_refusal.insert(id.to_string());
                        }
                        h.refuse(job);
                    }
                    1 => {
                        h.complete(job, Err("no".into()));
                    }
                    _ => {
                        h.complete(job, Ok(()));
                    }
                }
            }
            let c = h.counters();
            assert_eq!(
                h.engine.next_deadline().is_some(),
                c.pending > 0,
                "seed {seed}: pending {c:?}"
            );
            // Every stored record belongs to a waiting run or a refused job.
            for id in h.records.keys() {
                let owner = id.split('#').next().unwrap();
                let index = h.engine.rule_index(owner).unwrap();
                assert!(
                    h.engine.rule_stats(index).unwrap().active_runs == 1
                        || kept_by_refusal.contains(id),
                    "seed {seed}: orphan record {id}"
                );
            }
        }
        // Quiescence: everything finishes, nothing leaks.
        for _ in 0..100 {
            let to = h.now + 10_000;
            h.to(to);
            while let Some(job) = h.jobs.first().map(|j| j.id) {
                h.complete(job, Ok(()));
            }
        }
        let c = h.counters();
        assert_eq!((c.pending, c.runs_active), (0, 0), "seed {seed}");
        assert_eq!(h.engine.next_deadline(), None, "seed {seed}");
        for id in h.records.keys() {
            assert!(
                kept_by_refusal.contains(id),
                "seed {seed}: leaked record {id}"
            );
        }
    }
}

#[test]
fn replay_happens_once() {
    let mut h = H::new(vec![hazards()]);
    replay(&mut h, vec![]);
    let (t, w) = (h.t(), h.wall());
    h.engine
        .replay_raw(Now::new(t, w), vec![("junk".into(), b"x".to_vec())]);
    h.engine.replay(
        Now::new(t, w),
        vec![record("hazards#x-1", "hazards", 1, 0, 1_000, off_fp())],
    );
    h.pump();
    let all = std::mem::take(&mut h.lines);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all.iter().all(|l| l.contains("log replay called twice")));
    assert_eq!(h.counters().runs_active, 0);
}

#[test]
fn a_record_past_the_repeat_count_is_dropped() {
    // Written on pass 2 of a rule that (now) makes one pass only.
    let mut h = H::new(vec![hazards()]);
    replay(
        &mut h,
        vec![record("hazards#x-1", "hazards", 1, 2, -1, off_fp())],
    );
    assert_eq!(
        h.take(),
        lines(&[
            "0 replay-drop hazards#x-1 never-written",
            "0 drop hazards#x-1 never-written",
        ])
    );
}

#[test]
fn a_cancel_after_hand_over_leaves_the_record_to_the_job_even_if_abandoned() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let both = h.last_job();
    h.complete(both, Ok(()));
    h.to(30_000);
    let off = h.last_job();
    h.event("alarm.disarmed");
    assert_eq!(h.records.len(), 1, "the job owns it now");
    h.engine.stop();
    h.engine.action_abandoned(off);
    h.pump();
    assert_eq!(h.records.keys().collect::<Vec<_>>(), ["hazards#t-1"]);
}

#[test]
fn replay_output_comes_in_fire_at_order_whatever_each_record_becomes() {
    // A resume due early must come before the drops of records due later,
    // and the concurrency losers sit at their own fire-at (docs/semantics.md#durability-and-replay).
    let mut drop = hazards();
    drop.name = "drop".into();
    drop.concurrency = Concurrency::Drop;
    let mut restart = hazards();
    restart.name = "restart".into();
    let mut h = H::new(vec![restart, drop]);
    replay(
        &mut h,
        vec![
            record("gone#x-1", "gone", 1, 0, 20_000, off_fp()),
            record("restart#x-2", "restart", 1, 0, 3_000, off_fp()),
            record("drop#x-3", "drop", 1, 0, 1_000, off_fp()),
            record("restart#x-4", "restart", 1, 0, 15_000, off_fp()),
            record("drop#x-5", "drop", 1, 0, 10_000, off_fp()),
            record("restart#x-6", "restart", 7, 0, 2_000, off_fp()),
        ],
    );
    let out: Vec<String> = h
        .take()
        .into_iter()
        .filter(|l| l.contains("replay-"))
        .collect();
    assert_eq!(
        out,
        lines(&[
            "0 replay-resume drop#x-3 s1 p0",
            "0 replay-drop restart#x-6 step-gone",
            "0 replay-drop restart#x-2 concurrency",
            "0 replay-drop drop#x-5 concurrency",
            "0 replay-resume restart#x-4 s1 p0",
            "0 replay-drop gone#x-1 rule-gone",
        ])
    );
    assert_eq!(
        h.records.keys().collect::<Vec<_>>(),
        ["drop#x-3", "restart#x-4"]
    );
    assert_eq!(h.counters().runs_active, 2);
}

#[test]
fn replay_in_parts_says_and_does_what_replay_at_once_does() {
    // The service takes each part's effects before the next part
    // (docs/engine.md#the-decoded-payload-and-replay): every outcome, and
    // the order of every note and effect, must be those of one call.
    let rules = || {
        let mut drop = hazards();
        drop.name = "drop".into();
        drop.concurrency = Concurrency::Drop;
        let mut restart = hazards();
        restart.name = "restart".into();
        let mut queue = hazards();
        queue.name = "queue".into();
        queue.concurrency = Concurrency::Queue;
        vec![restart, drop, queue]
    };
    let records = || {
        vec![
            record("gone#x-1", "gone", 1, 0, 20_000, off_fp()),
            record("restart#x-2", "restart", 1, 0, 3_000, off_fp()),
            record("drop#x-3", "drop", 1, 0, -1_000, off_fp()),
            record("restart#x-4", "restart", 1, 0, 15_000, off_fp()),
            record("drop#x-5", "drop", 1, 0, 10_000, off_fp()),
            record("restart#x-6", "restart", 7, 0, 2_000, off_fp()),
            record("queue#x-7", "queue", 1, 0, -2_000, off_fp()),
            record("queue#x-8", "queue", 1, 0, -2_000, off_fp()),
            record("queue#x-9", "queue", 1, 0, 4_000, off_fp()),
        ]
    };
    let mut whole = H::new(rules()).manual();
    replay(&mut whole, records());
    let expected = whole.take();
    assert!(
        expected.iter().any(|l| l.contains("submit")),
        "overdue records run now: {expected:?}"
    );
    for part in [1, 2, 4, 100] {
        let mut h = H::new(rules()).manual();
        for r in &records() {
            h.records.insert(r.id.clone(), r.encode().unwrap());
        }
        let now = Now::new(h.t(), h.wall());
        let mut replay = h.engine.replay_start(now, records()).unwrap();
        let mut parts = 1;
        while h.engine.replay_next(&mut replay, part) {
            h.pump();
            parts += 1;
        }
        h.pump();
        assert_eq!(parts, 9_usize.div_ceil(part).max(1), "part of {part}");
        assert_eq!(h.take(), expected, "part of {part}");
        assert_eq!(h.records, whole.records, "part of {part}");
        assert_eq!(h.counters(), whole.counters(), "part of {part}");
    }
    // Once only, as `replay`.
    let mut h = H::new(rules());
    replay(&mut h, records());
    assert!(h
        .engine
        .replay_start(Now::new(h.t(), h.wall()), records())
        .is_none());
}

// ----- overrides, inspection and the dry run (docs/operating.md) ---------

fn now_of(h: &H) -> Now {
    Now::new(h.t(), h.wall())
}

#[test]
fn turning_a_rule_off_lets_its_live_run_finish_and_stops_new_triggers() {
    let mut h = H::new(vec![hazards()]);
    h.event("alarm.triggered");
    h.take();
    assert_eq!(
        h.engine.set_enabled("hazards", false),
        Ok(ruled_engine::EnableChange::Changed)
    );
    assert_eq!(h.counters().rules, 0);
    assert!(!h.engine.is_enabled(0));
    // A new trigger and the cancel are ignored; the parked step still runs.
    h.event("alarm.triggered");
    h.event("alarm.disarmed");
    h.to(30_000);
    let out = h.take();
    assert!(
        out.iter().any(|l| l.contains("submit hazards#t-1 s1")),
        "{out:?}"
    );
    assert!(!out.iter().any(|l| l.contains("hazards#t-2")), "{out:?}");
    assert_eq!(
        h.engine.set_enabled("hazards", false),
        Ok(ruled_engine::EnableChange::Unchanged)
    );
    assert!(h.engine.set_enabled("nope", true).is_err());
    // Back on: triggers start runs again.
    h.engine.set_enabled("hazards", true).unwrap();
    h.event("alarm.triggered");
    assert!(h
        .take()
        .contains(&"30000 run-start hazards#t-2".to_string()));
}

#[test]
fn a_rule_disabled_in_its_bundle_can_be_turned_on() {
    let mut off = hazards();
    off.enabled = false;
    let mut h = H::new(vec![off]);
    assert!(!h.engine.is_enabled(0));
    h.engine.set_enabled("hazards", true).unwrap();
    assert!(h.engine.is_enabled(0));
    h.event("alarm.triggered");
    assert!(h.take().contains(&"0 run-start hazards#t-1".to_string()));
    let view = h.engine.rule_view("hazards", now_of(&h)).unwrap();
    assert!(view.enabled && !view.bundle_enabled);
}

#[test]
fn inspection_reports_waiting_steps_with_their_wall_clock_due_time() {
    let mut h = H::new(vec![hazards()]);
    h.event("alarm.triggered");
    h.to(10_000);
    let waiting = h.engine.waiting_steps(now_of(&h));
    assert_eq!(waiting.len(), 1);
    assert_eq!(&*waiting[0].run, "hazards#t-1");
    assert_eq!(waiting[0].step, 1);
    assert!(waiting[0].durable);
    assert_eq!(waiting[0].due_ms, WALL0 + 30_000);
    let view = h.engine.rule_view("hazards", now_of(&h)).unwrap();
    assert_eq!(
        view.run.unwrap().phase,
        ruled_engine::RunPhase::Waiting {
            due_ms: WALL0 + 30_000,
            durable: true
        }
    );
}

#[test]
fn a_dry_run_judges_policies_and_changes_nothing() {
    use ruled_engine::{Verdict, WhenResult};
    let mut gated = rule("gated", &["go"], vec![push("x", 0), push("y", 1000)]);
    gated.when = Some(Box::new(when_parked()));
    Arc::make_mut(&mut gated.steps)[1].when = Some(when_broken());
    gated.concurrency = Concurrency::Drop;
    let mut h = H::new(vec![gated]).manual();
    let go = Event {
        topic: "go".into(),
        ..Event::default()
    };
    let dry = h.engine.dry_run("gated", &go, now_of(&h)).unwrap();
    let when = dry.when.as_ref().unwrap();
    assert_eq!(when.result, WhenResult::False);
    // What it read: the pair, absent until set (docs/semantics.md#what-a-when-read).
    assert_eq!(
        when.reads[0].to_string(),
        r#"state("vehicle", "state") absent"#
    );
    assert_eq!(dry.verdict, Verdict::WhenFalse);
    let step = dry.steps[1].when.as_ref().unwrap();
    assert!(matches!(step.result, WhenResult::Error(_)));
    assert_eq!(step.reads[0].to_string(), r#"topic = "go""#);
    h.engine.set_state("vehicle", "state", "parked".into());
    let dry = h.engine.dry_run("gated", &go, now_of(&h)).unwrap();
    assert_eq!(dry.verdict, Verdict::Start);
    let reads = &dry.when.as_ref().unwrap().reads;
    assert_eq!(
        reads[0].to_string(),
        r#"state("vehicle", "state") = "parked""#
    );
    assert!(h.engine.poll_effect().is_none(), "a dry run queues nothing");
    assert_eq!(h.engine.rule_stats(0).unwrap().errors, 0);
    h.event("go");
    let dry = h.engine.dry_run("gated", &go, now_of(&h)).unwrap();
    assert_eq!(
        dry.verdict,
        Verdict::Drop {
            run: "gated#t-1".into()
        }
    );
    let other = Event {
        topic: "other".into(),
        ..Event::default()
    };
    let dry = h.engine.dry_run("gated", &other, now_of(&h)).unwrap();
    assert_eq!(dry.verdict, Verdict::NotMatched);
    assert!(h.engine.dry_run("missing", &go, now_of(&h)).is_none());
}

#[test]
fn a_dry_run_follows_cancel_cooldown_debounce_and_the_queue_backlog() {
    use ruled_engine::Verdict;
    let go = Event {
        topic: "go".into(),
        ..Event::default()
    };
    let mut cooled = rule("cooled", &["go"], vec![push("c", 0)]);
    cooled.options_mut().cooldown_ns = 10_000 * 1_000_000;
    let mut quiet = rule("quiet", &["go"], vec![push("q", 0)]);
    quiet.options_mut().debounce_ns = 500 * 1_000_000;
    let mut queued = rule("queued", &["go"], vec![push("x", 0), push("y", 60_000)]);
    queued.concurrency = Concurrency::Queue;
    queued.options_mut().cancel_on = pats(&["stop"]).into();
    let mut h = H::new(vec![cooled, quiet, queued]);
    h.event("go");
    h.to(3_000);
    let now = now_of(&h);
    let verdict = |h: &H, name: &str, event: &Event| h.engine.dry_run(name, event, now).unwrap();
    assert_eq!(
        verdict(&h, "cooled", &go).verdict,
        Verdict::Cooldown { left_ms: 7_000 }
    );
    assert_eq!(
        verdict(&h, "quiet", &go).verdict,
        Verdict::Debounce { window_ms: 500 }
    );
    assert_eq!(
        verdict(&h, "queued", &go).verdict,
        Verdict::Queue { position: 1 }
    );
    for _ in 0..8 {
        h.event("go");
    }
    assert_eq!(
        verdict(&h, "queued", &go).verdict,
        Verdict::Refused { backlog: 8 }
    );
    // A topic in `cancel-on` but not in `on`: it cancels, and matches nothing.
    let stop = Event {
        topic: "stop".into(),
        ..Event::default()
    };
    let dry = verdict(&h, "queued", &stop);
    assert!(dry.cancels && !dry.matched);
    assert_eq!(dry.verdict, Verdict::NotMatched);
    h.engine.set_enabled("queued", false).unwrap();
    assert_eq!(verdict(&h, "queued", &go).verdict, Verdict::Disabled);
}
// ----- due backlog (docs/semantics.md#due-steps-the-pool-refused) -------

/// `n` rules `r0`.. on topic `go`, each one durable step `after_ms[i]`.
fn durable_rules(after_ms: &[u64]) -> Vec<Rule> {
    after_ms
        .iter()
        .enumerate()
        .map(|(n, &after)| rule(&format!("r{n}"), &["go"], vec![push("on", after)]))
        .collect()
}

/// A manual driver whose replay window is `window_ms`.
fn with_window(rules: Vec<Rule>, window_ms: i64) -> H {
    let config = EngineConfig {
        replay_window_ms: window_ms,
        ..EngineConfig::default()
    };
    H::with(payload(rules), config).manual()
}

impl H {
    /// The driver's pool reports room for `room` submissions (of either
    /// part: these rules' steps are all `redis`).
    fn room(&mut self, room: usize) {
        let (t, w) = (self.t(), self.wall());
        let room = ruled_engine::pool::Room {
            workers: room,
            lane: room,
        };
        self.engine.pool_has_room(Now::new(t, w), room);
        self.pump();
    }
    /// Refuses every job submitted and not yet reported, oldest first.
    fn refuse_all(&mut self) {
        let ids: Vec<JobId> = self.jobs.iter().map(|j| j.id).collect();
        for id in ids {
            self.refuse(id);
        }
    }
}

#[test]
fn a_refused_durable_step_keeps_its_record_waits_and_runs_when_the_pool_has_room() {
    let mut h = H::new(durable_rules(&[1_000])).manual();
    h.event("go");
    h.to(1_000);
    h.take();
    h.refuse_all();
    assert_eq!(h.take(), lines(&["1000 due-wait r0#t-1 s0"]));
    assert_eq!(h.records.len(), 1, "the record stays while it waits");
    assert_eq!(h.counters().dropped, 0, "waiting is not dropping");
    assert_eq!(h.counters().runs_active, 1, "a waiting run is live");
    assert_eq!(h.engine.due_backlog_len(), 1);
    h.now = 1_500;
    h.room(1);
    assert_eq!(
        h.take(),
        lines(&["1500 submit r0#t-1 s0 p0 on owns r0#t-1"])
    );
    assert_eq!(h.engine.due_backlog_len(), 0);
    let job = h.last_job();
    h.complete(job, Ok(()));
    assert!(h.records.is_empty(), "removed when the action started");
    assert_eq!(h.counters().dispatched, 1);
    assert_eq!(h.counters().runs_active, 0);
}

#[test]
fn the_due_backlog_runs_earliest_fire_at_first_ties_by_run_id_and_only_as_much_as_there_is_room() {
    // Due at 3 s (r0), 1 s (r1, r3: a tie) and 2 s (r2).
    let mut h = H::new(durable_rules(&[3_000, 1_000, 2_000, 1_000])).manual();
    h.event("go");
    h.to(3_000);
    h.refuse_all();
    h.take();
    assert_eq!(h.engine.due_backlog_len(), 4);
    h.room(3);
    assert_eq!(
        h.take(),
        lines(&[
            "3000 submit r1#t-2 s0 p0 on owns r1#t-2",
            "3000 submit r3#t-4 s0 p0 on owns r3#t-4",
            "3000 submit r2#t-3 s0 p0 on owns r2#t-3",
        ])
    );
    h.room(5);
    assert_eq!(
        h.take(),
        lines(&["3000 submit r0#t-1 s0 p0 on owns r0#t-1"])
    );
    h.room(5);
    assert!(h.take().is_empty(), "nothing waits: room changes nothing");
}

#[test]
fn a_durable_step_due_while_others_wait_goes_behind_them_without_a_submit() {
    let mut h = H::new(durable_rules(&[1_000, 2_000])).manual();
    h.event("go");
    h.to(1_000);
    h.refuse_all();
    h.take();
    h.to(2_000);
    assert_eq!(
        h.take(),
        lines(&["2000 due-wait r1#t-2 s0"]),
        "no submit: the pool has not reported room since r0 was refused"
    );
    h.room(1);
    assert_eq!(
        h.take(),
        lines(&["2000 submit r0#t-1 s0 p0 on owns r0#t-1"])
    );
}

#[test]
fn a_non_durable_step_does_not_wait_in_the_due_backlog() {
    let mut rules = durable_rules(&[1_000, 0]);
    rules[1].on = pats(&["now"]).into();
    let mut h = H::new(rules).manual();
    h.event("go");
    h.to(1_000);
    h.refuse_all();
    h.take();
    assert_eq!(h.engine.due_backlog_len(), 1);
    // r1 (no `after`, no record) comes due while r0 waits: submitted,
    // refused, ended.
    h.event("now");
    let job = h.last_job();
    h.refuse(job);
    let out = h.take();
    assert!(
        out.contains(&"1000 run-end r1#t-2 refused".to_string()),
        "{out:?}"
    );
    assert_eq!(h.counters().dropped, 1);
    assert_eq!(h.engine.due_backlog_len(), 1);
}

#[test]
fn replayed_overdue_records_the_pool_refuses_all_run_in_fire_at_order() {
    let mut h = H::new(durable_rules(&[30_000, 30_000, 30_000, 30_000])).manual();
    let fp = fingerprint("on", 30_000);
    replay(
        &mut h,
        vec![
            record("r0#x-1", "r0", 0, 0, -4_000, fp),
            record("r1#x-2", "r1", 0, 0, -1_000, fp),
            record("r2#x-3", "r2", 0, 0, -3_000, fp),
            record("r3#x-4", "r3", 0, 0, -2_000, fp),
        ],
    );
    // The pool takes the first (r0), refuses the rest.
    let ids: Vec<JobId> = h.jobs.iter().skip(1).map(|j| j.id).collect();
    for id in ids {
        h.refuse(id);
    }
    h.take();
    assert_eq!(h.records.len(), 4);
    let mut ran = vec![];
    while !h.jobs.is_empty() {
        let job = h.jobs[0].id;
        ran.push(h.jobs[0].run.to_string());
        h.complete(job, Ok(()));
        h.room(1);
    }
    assert_eq!(ran, ["r0#x-1", "r2#x-3", "r3#x-4", "r1#x-2"]);
    assert!(h.records.is_empty());
    assert_eq!(h.counters().dispatched, 4);
    assert_eq!(h.counters().dropped, 0);
}

#[test]
fn a_step_waiting_past_the_replay_window_drops_its_record_and_ends_too_late() {
    let mut h = with_window(durable_rules(&[1_000]), 10_000);
    h.event("go");
    h.to(1_000);
    h.refuse_all();
    h.take();
    // The deadline is a timer: the first ms more than the window past due.
    assert_eq!(h.engine.next_deadline(), Some(Time::from_millis(11_001)));
    assert_eq!(h.counters().pending, 1);
    h.to(11_000);
    assert!(
        h.take().is_empty(),
        "exactly the window past due still waits"
    );
    h.to(11_001);
    assert_eq!(
        h.take(),
        lines(&[
            "11001 drop r0#t-1 too-late",
            "11001 run-end r0#t-1 too-late",
        ])
    );
    assert!(h.records.is_empty());
    assert_eq!(h.engine.due_backlog_len(), 0);
    assert_eq!(h.counters().pending, 0);
    assert_eq!(h.counters().runs_active, 0);
    h.room(1);
    assert!(h.take().is_empty(), "nothing left to submit");
}

#[test]
fn a_replayed_step_waits_only_what_is_left_of_the_window() {
    let mut h = with_window(durable_rules(&[30_000]), 10_000);
    let fp = fingerprint("on", 30_000);
    replay(&mut h, vec![record("r0#x-1", "r0", 0, 0, -9_000, fp)]);
    h.refuse_all();
    h.take();
    assert_eq!(h.engine.next_deadline(), Some(Time::from_millis(1_001)));
}

#[test]
fn cancel_on_and_restart_end_a_run_waiting_in_the_due_backlog_and_drop_its_record() {
    let mut cancelled = rule("c", &["go"], vec![push("on", 1_000)]);
    cancelled.options_mut().cancel_on = pats(&["stop"]).into();
    let mut restarted = rule("r", &["go"], vec![push("on", 1_000)]);
    restarted.concurrency = Concurrency::Restart;
    let mut h = H::new(vec![cancelled, restarted]).manual();
    h.event("go");
    h.to(1_000);
    h.refuse_all();
    h.take();
    assert_eq!(h.engine.due_backlog_len(), 2);
    h.event("stop");
    assert_eq!(
        h.take(),
        lines(&["1000 drop c#t-1 cancelled", "1000 run-end c#t-1 cancelled"])
    );
    assert_eq!(h.engine.due_backlog_len(), 1, "gone from the backlog");
    h.event("go");
    let out = h.take();
    let restart = lines(&["1000 drop r#t-2 restarted", "1000 run-end r#t-2 restarted"]);
    assert!(out.windows(2).any(|w| w == restart), "{out:?}");
    // The new runs wait on their `after`; the backlog holds nothing stale.
    assert_eq!(h.engine.due_backlog_len(), 0);
    assert_eq!(h.records.len(), 2, "only the new runs' records");
    h.room(5);
    assert!(h.jobs.is_empty(), "nothing cancelled is submitted");
}

#[test]
fn a_backlog_step_queued_at_stop_keeps_its_record_and_one_still_waiting_too() {
    let mut h = H::new(durable_rules(&[1_000, 1_000])).manual();
    h.event("go");
    h.to(1_000);
    h.refuse_all();
    h.room(1);
    let queued = h.last_job();
    h.take();
    h.engine.stop();
    h.pump();
    assert_eq!(
        h.take(),
        lines(&[
            "1000 run-end r0#t-1 stopped",
            "1000 record-kept r1#t-2",
            "1000 run-end r1#t-2 stopped",
        ])
    );
    h.engine.action_abandoned(queued);
    assert_eq!(h.records.len(), 2, "neither step ran: both records stay");
    assert_eq!(h.engine.due_backlog_len(), 0);
    h.room(5);
    assert!(h.take().is_empty(), "a stopped engine submits nothing");
}

#[test]
fn the_due_backlog_holds_one_entry_per_waiting_run_whatever_the_churn() {
    let mut c = rule("c", &["go"], vec![push("on", 1_000)]);
    c.options_mut().cancel_on = pats(&["stop"]).into();
    let mut h = H::new(vec![c]).manual();
    for round in 0..100u64 {
        h.event("go");
        h.to(1_000 + round * 2_000);
        h.refuse_all();
        assert_eq!(h.engine.due_backlog_len(), 1);
        h.event("stop");
        assert_eq!(h.engine.due_backlog_len(), 0);
        h.to(2_000 + round * 2_000);
        assert!(h.records.is_empty());
    }
    assert_eq!(h.counters().pending, 0);
}

#[test]
fn a_clock_jump_moves_waiting_records_and_keeps_their_order() {
    let mut h = H::new(durable_rules(&[2_000, 1_000])).manual();
    h.event("go");
    h.to(2_000);
    h.refuse_all();
    h.take();
    assert_eq!(h.engine.clock_jumped(-60_000), 2);
    h.pump();
    let fire_ats: Vec<i64> = h.stored().iter().map(|r| r.fire_at - WALL0).collect();
    assert_eq!(fire_ats, [-58_000, -59_000]);
    h.take();
    h.room(2);
    assert_eq!(
        h.take(),
        lines(&[
            "2000 submit r1#t-2 s0 p0 on owns r1#t-2",
            "2000 submit r0#t-1 s0 p0 on owns r0#t-1",
        ])
    );
}

// ----- live reload (docs/semantics.md#live-reload) ------------------------

impl H {
    fn reload(&mut self, rules: Vec<Rule>) -> ruled_engine::ReloadSummary {
        let (t, w) = (self.t(), self.wall());
        let summary = self.engine.reload(Arc::new(payload(rules)), Now::new(t, w));
        self.pump();
        summary
    }
}

fn other(push_value: &str) -> Rule {
    rule("other", &["x"], vec![push(push_value, 0)])
}

#[test]
fn reload_of_the_same_bundle_changes_nothing() {
    let mut h = H::new(vec![hazards(), other("a")]);
    h.event("alarm.triggered");
    h.take();
    let summary = h.reload(vec![hazards(), other("a")]);
    assert!(summary.unchanged, "{summary:?}");
    assert!(h.take().is_empty());
    assert_eq!(h.counters().runs_active, 1);
}

#[test]
fn reload_keeps_a_run_whose_step_is_unchanged() {
    let mut h = H::new(vec![other("a"), hazards()]);
    h.event("alarm.triggered");
    h.to(10_000);
    let before = h.records.clone();
    h.take();
    // `hazards` moves to position 0 and `other` changes.
    let summary = h.reload(vec![
        hazards(),
        other("b"),
        rule("new", &["y"], vec![push("n", 0)]),
    ]);
    assert_eq!(summary.changed, ["other"]);
    assert_eq!(summary.added, ["new"]);
    assert_eq!((summary.runs_kept, summary.runs_ended), (1, 0));
    assert!(h.take().is_empty(), "no record written or dropped");
    assert_eq!(h.records, before);
    h.to(40_000);
    assert_eq!(
        h.take(),
        lines(&[
            "30000 submit hazards#t-1 s1 p0 off owns hazards#t-1",
            "start-drop hazards#t-1",
            "30000 run-end hazards#t-1 done",
        ])
    );
    assert!(h.records.is_empty());
    assert_eq!(h.counters().dispatched, 2);
}

#[test]
fn reload_ends_a_run_whose_step_changed_or_went() {
    let mut changed = hazards();
    Arc::make_mut(&mut changed.steps)[1] = push("left", 30_000);
    let mut shorter = hazards();
    let mut steps = shorter.steps.to_vec();
    steps.truncate(1);
    shorter.steps = steps.into();
    for (rules, reason) in [
        (vec![changed], "fingerprint"),
        (vec![shorter], "step-gone"),
        (vec![other("a")], "rule-gone"),
    ] {
        let mut h = H::new(vec![hazards()]);
        h.event("alarm.triggered");
        h.to(10_000);
        h.take();
        let summary = h.reload(rules);
        assert_eq!((summary.runs_kept, summary.runs_ended), (0, 1));
        assert_eq!(
            h.take(),
            lines(&[
                &format!("10000 drop hazards#t-1 {reason}"),
                "10000 run-end hazards#t-1 reloaded",
            ])
        );
        assert!(h.records.is_empty());
        h.to(60_000);
        assert!(h.take().is_empty(), "nothing fires at 30 s");
        assert_eq!(h.counters().pending, 0);
    }
}

#[test]
fn reload_lets_a_running_action_finish_and_takes_later_steps_from_the_new_bundle() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let job = h.last_job();
    h.start(job);
    h.take();
    let mut later = hazards();
    Arc::make_mut(&mut later.steps)[1] = push("later", 5_000);
    h.reload(vec![later]);
    assert!(h.take().is_empty());
    h.finish(job, Ok(()));
    h.to(5_000);
    let job = h.last_job();
    h.complete(job, Ok(()));
    assert_eq!(
        h.take(),
        lines(&[
            "0 put hazards#t-1 s1 p0 at+5000",
            "5000 submit hazards#t-1 s1 p0 later owns hazards#t-1",
            "start-drop hazards#t-1",
            "5000 run-end hazards#t-1 done",
        ])
    );
    // The run at a changed step ends; its running action still reports.
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let job = h.last_job();
    h.start(job);
    let mut first = hazards();
    Arc::make_mut(&mut first.steps)[0] = push("left", 0);
    h.reload(vec![first]);
    h.take();
    h.finish(job, Err("boom".into()));
    assert!(h.take().is_empty());
    assert_eq!((h.counters().failed, h.counters().runs_active), (1, 0));
}

#[test]
fn reload_carries_cooldown_debounce_and_counters_and_a_lower_repeat_ends_the_run() {
    let mut r = other("a");
    r.options_mut().cooldown_ns = 10_000_000_000;
    let mut h = H::new(vec![r.clone()]);
    h.event("x");
    let mut changed = r.clone();
    Arc::make_mut(&mut changed.steps)[0] = push("b", 0);
    h.reload(vec![changed]);
    h.take();
    h.event("x");
    assert_eq!(h.take(), lines(&["0 trigger-suppressed other"]));
    assert_eq!(h.counters().dispatched, 1);

    let mut d = other("a");
    d.options_mut().debounce_ns = 1_000_000_000;
    let mut h = H::new(vec![d.clone()]);
    h.event("x");
    h.to(500);
    let mut d2 = d.clone();
    Arc::make_mut(&mut d2.steps)[0] = push("b", 0);
    h.reload(vec![d2]);
    h.to(2_000);
    let out = h.take();
    assert!(
        out.contains(&"1000 submit other#t-1 s0 p0 b".to_string()),
        "{out:?}"
    );

    let mut rep = other("a");
    rep.options_mut().repeat = Repeat {
        count: 3,
        every_ns: 1_000_000_000,
        period_ns: 0,
    };
    let mut h = H::new(vec![rep.clone()]);
    h.event("x");
    h.take();
    rep.options_mut().repeat.count = 1;
    h.reload(vec![rep]);
    assert_eq!(h.take(), lines(&["0 run-end other#t-1 done"]));
    assert_eq!(h.counters().pending, 0);
}

#[test]
fn reload_starts_a_queue_rules_held_trigger_when_it_ends_the_run() {
    let mut q = hazards();
    q.concurrency = Concurrency::Queue;
    let mut h = H::new(vec![q.clone()]);
    h.event("alarm.triggered");
    h.event("alarm.triggered");
    h.take();
    let mut changed = q;
    Arc::make_mut(&mut changed.steps)[1] = push("left", 30_000);
    let summary = h.reload(vec![changed.clone()]);
    assert_eq!(summary.changed, ["hazards"]);
    assert_eq!(
        h.take(),
        lines(&[
            "0 drop hazards#t-1 fingerprint",
            "0 run-end hazards#t-1 reloaded",
            "0 run-start hazards#t-2",
            "0 submit hazards#t-2 s0 p0 both",
            "0 put hazards#t-2 s1 p0 at+30000",
        ])
    );
    // Not `queue` any more: the backlog is not carried.
    let mut h = H::new(vec![changed.clone()]);
    h.event("alarm.triggered");
    h.event("alarm.triggered");
    let mut restart = changed;
    restart.concurrency = Concurrency::Restart;
    Arc::make_mut(&mut restart.steps)[1] = push("right", 30_000);
    h.reload(vec![restart]);
    h.take();
    assert_eq!(h.counters().runs_active, 0);
}

// ----- finally steps (docs/semantics.md#finally) ---------------------------

/// A finally step pushing `value` after `after_ms`: never durable.
fn finally_push(value: &str, after_ms: u64) -> Step {
    Step {
        durable: false,
        ..push(value, after_ms)
    }
}

/// README.md's hazards rule: off at once on a cancel.
fn hazards_finally() -> Rule {
    with_finally(hazards(), vec![finally_push("off", 0)])
}

fn with_finally(mut rule: Rule, steps: Vec<Step>) -> Rule {
    rule.options_mut().finally = steps.into();
    rule
}

#[test]
fn finally_a_cancel_during_the_wait_drops_the_record_and_runs_the_finally_step_at_once() {
    let mut h = H::new(vec![hazards_finally()]);
    h.event("alarm.triggered");
    h.to(5_000);
    h.take();
    h.event("alarm.disarmed");
    assert_eq!(
        h.take(),
        lines(&[
            "5000 drop hazards#t-1 cancelled",
            "5000 finally-start hazards#t-1",
            "5000 submit hazards#t-1 f0 p0 off",
            "5000 run-end hazards#t-1 cancelled",
        ])
    );
    assert!(h.records.is_empty());
    let c = h.counters();
    assert_eq!((c.pending, c.runs_active, c.dispatched), (0, 0, 2));
    h.to(60_000);
    assert!(h.take().is_empty(), "the waiting step never runs");
}

#[test]
fn finally_waits_for_the_action_still_queued_in_the_pool() {
    let mut h = H::new(vec![hazards_finally()]).manual();
    h.event("alarm.triggered");
    let both = h.last_job();
    h.take();
    // `both` is handed over, not started: queued behind a busy worker.
    h.event("alarm.disarmed");
    assert_eq!(h.take(), lines(&["0 finally-start hazards#t-1"]));
    assert_eq!(h.jobs.len(), 1, "no cleanup before `both` has run");
    assert_eq!(h.counters().runs_active, 1);
    h.to(1_000);
    h.complete(both, Ok(()));
    assert_eq!(h.take(), lines(&["1000 submit hazards#t-1 f0 p0 off"]));
    let off = h.last_job();
    h.complete(off, Ok(()));
    assert_eq!(h.take(), lines(&["1000 run-end hazards#t-1 cancelled"]));
    assert!(h.records.is_empty(), "step 1 never waited");
}

#[test]
fn finally_waits_for_the_running_action_whatever_its_outcome() {
    for outcome in [Ok(()), Err("no reply".to_string())] {
        let mut h = H::new(vec![hazards_finally()]).manual();
        h.event("alarm.triggered");
        let both = h.last_job();
        h.start(both);
        h.to(500);
        h.event("alarm.disarmed");
        h.take();
        assert!(h.jobs.len() == 1 && h.engine.next_deadline().is_none());
        h.to(2_000);
        h.finish(both, outcome.clone());
        assert_eq!(
            h.take(),
            lines(&["2000 submit hazards#t-1 f0 p0 off"]),
            "{outcome:?}"
        );
        let off = h.last_job();
        h.complete(off, Ok(()));
        assert_eq!(h.take(), lines(&["2000 run-end hazards#t-1 cancelled"]));
    }
}

#[test]
fn finally_follows_an_action_the_pool_refused_after_the_cancel() {
    let mut h = H::new(vec![hazards_finally()]).manual();
    h.event("alarm.triggered");
    let both = h.last_job();
    h.event("alarm.disarmed");
    h.take();
    h.refuse(both);
    assert_eq!(h.take(), lines(&["0 submit hazards#t-1 f0 p0 off"]));
    assert_eq!(h.counters().dropped, 1);
}

#[test]
fn finally_steps_run_in_order_with_their_waits_and_are_never_durable() {
    let rule = with_finally(
        hazards(),
        vec![finally_push("left", 0), finally_push("off", 2_000)],
    );
    let mut h = H::new(vec![rule]);
    h.event("alarm.triggered");
    h.to(1_000);
    h.take();
    h.event("alarm.disarmed");
    assert_eq!(
        h.take(),
        lines(&[
            "1000 drop hazards#t-1 cancelled",
            "1000 finally-start hazards#t-1",
            "1000 submit hazards#t-1 f0 p0 left",
        ])
    );
    assert!(
        h.records.is_empty(),
        "a finally step's wait writes no record"
    );
    assert_eq!(h.counters().pending, 1);
    let waiting = h.engine.waiting_steps(now_of(&h));
    assert_eq!(waiting.len(), 1);
    assert!(waiting[0].finally && !waiting[0].durable && waiting[0].step == 1);
    h.to(3_000);
    assert_eq!(
        h.take(),
        lines(&[
            "3000 submit hazards#t-1 f1 p0 off",
            "3000 run-end hazards#t-1 cancelled",
        ])
    );
}

#[test]
fn finally_a_stop_loses_a_waiting_finally_step() {
    let rule = with_finally(hazards(), vec![finally_push("off", 2_000)]);
    let mut h = H::new(vec![rule]);
    h.event("alarm.triggered");
    h.event("alarm.disarmed");
    h.take();
    h.engine.stop();
    h.pump();
    // No record to keep: the next start has nothing to replay.
    assert_eq!(h.take(), lines(&["0 run-end hazards#t-1 stopped"]));
    assert!(h.records.is_empty());
}

#[test]
fn finally_further_cancels_do_not_cancel_the_finally_steps_but_clear_the_backlog() {
    let mut rule = with_finally(hazards(), vec![finally_push("off", 2_000)]);
    rule.concurrency = Concurrency::Queue;
    let mut h = H::new(vec![rule]);
    h.event("alarm.triggered");
    h.event("alarm.disarmed");
    h.to(500);
    // A trigger during the finally steps waits in the backlog ...
    h.event("alarm.triggered");
    h.take();
    // ... which a second cancel throws away, leaving the finally step.
    h.event("alarm.disarmed");
    h.event("alarm.disarmed");
    assert!(h.take().is_empty());
    h.to(2_000);
    assert_eq!(
        h.take(),
        lines(&[
            "2000 submit hazards#t-1 f0 p0 off",
            "2000 run-end hazards#t-1 cancelled",
        ])
    );
    h.to(60_000);
    assert!(h.take().is_empty(), "the thrown-away trigger never starts");
}

#[test]
fn finally_a_queue_rule_starts_a_trigger_held_during_its_finally_steps_when_they_end() {
    let mut rule = with_finally(hazards(), vec![finally_push("off", 2_000)]);
    rule.concurrency = Concurrency::Queue;
    let mut h = H::new(vec![rule]);
    h.event("alarm.triggered");
    h.event("alarm.disarmed");
    h.to(500);
    h.take();
    h.event("alarm.triggered");
    assert_eq!(h.take(), lines(&["500 trigger-queued hazards"]));
    h.to(2_000);
    assert_eq!(
        h.take(),
        lines(&[
            "2000 submit hazards#t-1 f0 p0 off",
            "2000 run-end hazards#t-1 cancelled",
            "2000 run-start hazards#t-2",
            "2000 submit hazards#t-2 s0 p0 both",
            "2000 put hazards#t-2 s1 p0 at+32000",
        ])
    );
}

#[test]
fn finally_restart_and_drop_treat_the_finally_steps_as_the_live_run() {
    // restart: a new trigger ends them before the wait is over.
    let rule = with_finally(hazards(), vec![finally_push("off", 2_000)]);
    let mut h = H::new(vec![rule.clone()]);
    h.event("alarm.triggered");
    h.event("alarm.disarmed");
    h.to(500);
    h.take();
    h.event("alarm.triggered");
    assert_eq!(
        h.take(),
        lines(&[
            "500 run-end hazards#t-1 restarted",
            "500 run-start hazards#t-2",
            "500 submit hazards#t-2 s0 p0 both",
            "500 put hazards#t-2 s1 p0 at+30500",
        ])
    );
    h.to(3_000);
    assert!(h.take().is_empty(), "the ended finally step does not run");
    // drop: the trigger is ignored, the finally step runs.
    let mut dropping = rule;
    dropping.concurrency = Concurrency::Drop;
    let mut h = H::new(vec![dropping]);
    h.event("alarm.triggered");
    h.event("alarm.disarmed");
    h.to(500);
    h.take();
    h.event("alarm.triggered");
    assert_eq!(h.take(), lines(&["500 trigger-dropped hazards"]));
    h.to(2_000);
    assert_eq!(
        h.take(),
        lines(&[
            "2000 submit hazards#t-1 f0 p0 off",
            "2000 run-end hazards#t-1 cancelled",
        ])
    );
}

#[test]
fn finally_steps_are_no_fire_the_cooldown_counts_from_the_trigger() {
    let mut rule = with_finally(hazards(), vec![finally_push("off", 0)]);
    rule.options_mut().cooldown_ns = 10_000_000_000;
    let mut h = H::new(vec![rule]);
    h.event("alarm.triggered");
    h.to(4_000);
    h.event("alarm.disarmed");
    h.to(9_000);
    h.take();
    h.event("alarm.triggered");
    assert_eq!(h.take(), lines(&["9000 trigger-suppressed hazards"]));
    h.to(10_000);
    h.event("alarm.triggered");
    assert_eq!(h.take()[0], "10000 run-start hazards#t-2");
}

#[test]
fn finally_a_false_when_or_a_failed_action_ends_the_finally_steps() {
    let mut skipped = finally_push("left", 0);
    skipped.when = Some(when_parked());
    let rule = with_finally(hazards(), vec![skipped, finally_push("off", 0)]);
    let mut h = H::new(vec![rule.clone()]);
    h.event("alarm.triggered");
    h.take();
    h.event("alarm.disarmed");
    assert_eq!(
        h.take(),
        lines(&[
            "0 drop hazards#t-1 cancelled",
            "0 finally-start hazards#t-1",
            "0 step-skipped hazards#t-1 f0",
            "0 run-end hazards#t-1 when-false",
        ])
    );
    let failing = with_finally(
        hazards(),
        vec![finally_push("left", 0), finally_push("off", 0)],
    );
    let mut h = H::new(vec![failing]).manual();
    h.event("alarm.triggered");
    let both = h.last_job();
    h.complete(both, Ok(()));
    h.event("alarm.disarmed");
    let left = h.last_job();
    h.take();
    h.complete(left, Err("boom".into()));
    assert_eq!(h.take(), lines(&["0 run-end hazards#t-1 failed"]));
    assert!(h.jobs.is_empty(), "the second finally step does not run");
    assert_eq!(h.counters().failed, 1);
}

#[test]
fn finally_a_refused_finally_step_ends_the_run_refused() {
    let mut h = H::new(vec![hazards_finally()]).manual();
    h.event("alarm.triggered");
    let both = h.last_job();
    h.complete(both, Ok(()));
    h.event("alarm.disarmed");
    let off = h.last_job();
    h.take();
    h.refuse(off);
    assert_eq!(h.take(), lines(&["0 run-end hazards#t-1 refused"]));
    assert_eq!(h.counters().dropped, 1);
}

#[test]
fn finally_steps_do_not_run_when_the_run_completes_fails_is_refused_or_restarted() {
    // Completed: a later cancel finds no run.
    let mut h = H::new(vec![hazards_finally()]);
    h.event("alarm.triggered");
    h.to(30_000);
    h.event("alarm.disarmed");
    assert!(!h
        .take()
        .iter()
        .any(|l| l.contains("finally") || l.contains(" f0 ")));
    // Failed.
    let mut h = H::new(vec![hazards_finally()]).manual();
    h.event("alarm.triggered");
    let both = h.last_job();
    h.complete(both, Err("boom".into()));
    h.event("alarm.disarmed");
    assert!(!h.take().iter().any(|l| l.contains("finally")));
    assert!(h.jobs.is_empty());
    // Refused.
    let mut h = H::new(vec![hazards_finally()]).manual();
    h.event("alarm.triggered");
    let both = h.last_job();
    h.refuse(both);
    h.event("alarm.disarmed");
    assert!(!h.take().iter().any(|l| l.contains("finally")));
    assert!(h.jobs.is_empty());
    // Restarted by a new trigger: only the new run's cancel runs them, once.
    let mut h = H::new(vec![hazards_finally()]);
    h.event("alarm.triggered");
    h.to(1_000);
    h.event("alarm.triggered");
    h.event("alarm.disarmed");
    let out = h.take();
    assert!(out.contains(&"1000 run-end hazards#t-1 restarted".to_string()));
    let cleanups: Vec<&String> = out.iter().filter(|l| l.contains(" f0 ")).collect();
    assert_eq!(cleanups, ["1000 submit hazards#t-2 f0 p0 off"]);
}

#[test]
fn finally_steps_do_not_run_when_a_reload_or_a_stop_ends_the_run() {
    let mut changed = hazards_finally();
    Arc::make_mut(&mut changed.steps)[1] = push("left", 30_000);
    let mut h = H::new(vec![hazards_finally()]);
    h.event("alarm.triggered");
    h.to(5_000);
    h.take();
    h.reload(vec![changed]);
    h.event("alarm.disarmed");
    assert_eq!(
        h.take(),
        lines(&[
            "5000 drop hazards#t-1 fingerprint",
            "5000 run-end hazards#t-1 reloaded",
        ])
    );
    let mut h = H::new(vec![hazards_finally()]);
    h.event("alarm.triggered");
    h.take();
    h.engine.stop();
    h.pump();
    h.event("alarm.disarmed");
    assert_eq!(
        h.take(),
        lines(&["0 record-kept hazards#t-1", "0 run-end hazards#t-1 stopped"])
    );
}

#[test]
fn finally_a_reload_keeps_finally_steps_whose_fingerprint_stands() {
    let slow = || with_finally(hazards(), vec![finally_push("off", 2_000)]);
    let mut h = H::new(vec![slow()]);
    h.event("alarm.triggered");
    h.event("alarm.disarmed");
    h.to(1_000);
    h.take();
    // Another main step, the same finally step: the finally step goes on.
    let mut kept = slow();
    Arc::make_mut(&mut kept.steps)[1] = push("left", 30_000);
    let summary = h.reload(vec![kept]);
    assert_eq!((summary.runs_kept, summary.runs_ended), (1, 0));
    h.to(2_000);
    assert_eq!(
        h.take(),
        lines(&[
            "2000 submit hazards#t-1 f0 p0 off",
            "2000 run-end hazards#t-1 cancelled",
        ])
    );
    // A changed finally step ends the run, with the replay reason.
    let mut h = H::new(vec![slow()]);
    h.event("alarm.triggered");
    h.event("alarm.disarmed");
    h.to(1_000);
    h.take();
    let changed = with_finally(hazards(), vec![finally_push("left", 2_000)]);
    let summary = h.reload(vec![changed]);
    assert_eq!((summary.runs_kept, summary.runs_ended), (0, 1));
    assert_eq!(h.take(), lines(&["1000 run-end hazards#t-1 reloaded"]));
    h.to(5_000);
    assert!(h.take().is_empty());
    assert_eq!(h.counters().pending, 0);
}

#[test]
fn finally_a_cancel_between_repeat_passes_runs_the_finally_steps_on_that_pass() {
    let mut rule = with_finally(
        rule("horn", &["go"], vec![push("on", 0)]),
        vec![finally_push("off", 0)],
    );
    rule.options_mut().cancel_on = pats(&["stop"]).into();
    rule.options_mut().repeat = Repeat {
        count: 3,
        every_ns: 2_000_000_000,
        period_ns: 0,
    };
    let mut h = H::new(vec![rule]);
    h.event("go");
    h.to(3_000);
    h.take();
    h.event("stop");
    assert_eq!(
        h.take(),
        lines(&[
            "3000 finally-start horn#t-1",
            "3000 submit horn#t-1 f0 p1 off",
            "3000 run-end horn#t-1 cancelled",
        ])
    );
    assert_eq!(h.counters().pending, 0);
}

#[test]
fn finally_steps_are_traced_as_such_and_inspected_while_draining() {
    let mut h = H::new(vec![hazards_finally()]).manual();
    h.event("alarm.triggered");
    let both = h.last_job();
    h.start(both);
    h.event("alarm.disarmed");
    let view = h.engine.rule_view("hazards", now_of(&h)).unwrap();
    let run = view.run.unwrap();
    assert!(run.finally && run.step == 0);
    assert_eq!(run.phase, ruled_engine::RunPhase::Draining);
    h.finish(both, Ok(()));
    let off = h.last_job();
    h.complete(off, Ok(()));
    let trace = h.engine.trace("hazards", now_of(&h)).unwrap();
    let steps: Vec<(u32, bool, Option<String>)> = trace.runs[0]
        .steps
        .iter()
        .map(|s| (s.step, s.finally, s.end.as_ref().map(|e| e.reason.clone())))
        .collect();
    assert_eq!(
        steps,
        [
            (0, false, Some("cancelled".into())),
            (0, true, Some("done".into())),
        ]
    );
    assert_eq!(trace.runs[0].end.as_ref().unwrap().reason, "cancelled");
    let text = trace.to_text(ruled_engine::TimeStyle::Millis);
    assert!(text.contains("    finally 0 pass 0: submit"), "{text}");
}

#[test]
fn finally_a_dry_run_sees_the_run_go_on_to_its_finally_steps() {
    let mut rule = hazards_finally();
    rule.on = pats(&["alarm.triggered", "alarm.disarmed"]).into();
    rule.concurrency = Concurrency::Drop;
    let mut h = H::new(vec![rule]);
    h.event("alarm.triggered");
    let disarm = Event {
        topic: "alarm.disarmed".into(),
        ..Event::default()
    };
    let dry = h.engine.dry_run("hazards", &disarm, now_of(&h)).unwrap();
    assert!(dry.cancels);
    assert!(
        matches!(dry.verdict, ruled_engine::Verdict::Drop { .. }),
        "{:?}",
        dry.verdict
    );
}

// ----- an action Redis refused whole (docs/semantics.md#an-action-redis-refused-whole)

impl H {
    /// Redis refused the transaction carrying `job` whole: nothing ran,
    /// its record (if any) is still stored.
    fn not_performed(&mut self, job: JobId) {
        let index = self.jobs.iter().position(|j| j.id == job).unwrap();
        let record = self.jobs.remove(index).drop_record;
        // The lane reports each action of a batch started as it sends it.
        self.engine.action_started(job);
        let (t, w) = (self.t(), self.wall());
        let message = "EXECABORT OOM command not allowed";
        self.engine
            .action_not_performed(Now::new(t, w), job, record, message);
        self.pump();
    }
}

#[test]
fn a_step_redis_refused_whole_keeps_its_record_and_is_retried_after_a_backoff() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let first = h.last_job();
    h.complete(first, Ok(()));
    h.to(30_000);
    h.take();
    h.not_performed(h.last_job());
    // Not performed: the record stays, and a timer with it.
    assert_eq!(h.records.len(), 1, "the record is kept");
    assert_eq!(h.take(), Vec::<String>::new());
    assert_eq!(h.engine.next_deadline(), Some(Time::from_millis(31_000)));
    assert_eq!((h.counters().retried, h.counters().failed), (1, 0));
    h.to(31_000);
    assert_eq!(
        h.take(),
        lines(&["31000 submit hazards#t-1 s1 p0 off owns hazards#t-1"])
    );
    h.complete(h.last_job(), Ok(()));
    assert_eq!(
        h.take(),
        lines(&["start-drop hazards#t-1", "31000 run-end hazards#t-1 done"])
    );
    assert!(h.records.is_empty());
}

#[test]
fn a_step_redis_refuses_whole_past_its_retries_ends_failed_and_its_record_goes() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let first = h.last_job();
    h.complete(first, Ok(()));
    h.to(30_000);
    h.take();
    let mut retried_at = vec![];
    for _ in 0..ruled_engine::RETRIES {
        h.not_performed(h.last_job());
        assert_eq!(h.records.len(), 1, "the record is kept while retried");
        let next = h.engine.next_deadline().unwrap().as_millis();
        retried_at.push(next - h.now);
        h.to(next);
    }
    // 1 s, then twice as long each time.
    assert_eq!(retried_at, [1_000, 2_000, 4_000, 8_000, 16_000]);
    h.take();
    h.not_performed(h.last_job());
    assert_eq!(
        h.take(),
        lines(&[
            "61000 drop hazards#t-1 failed",
            "61000 run-end hazards#t-1 failed",
        ])
    );
    assert!(h.records.is_empty(), "no record is left without a timer");
    assert_eq!(h.engine.next_deadline(), None);
    let c = h.counters();
    assert_eq!((c.retried, c.failed, c.runs_active), (5, 1, 0));
    // Only the first step ran: the six attempts Redis refused started nothing.
    assert_eq!(c.dispatched, 1);
}

#[test]
fn a_refused_step_of_a_run_that_ended_meanwhile_drops_its_record() {
    let mut rule = hazards();
    rule.concurrency = Concurrency::Restart;
    let mut h = H::new(vec![rule]).manual();
    h.event("alarm.triggered");
    let first = h.last_job();
    h.complete(first, Ok(()));
    h.to(30_000);
    let refused = h.last_job();
    // A restart while the step's batch is out: the new run starts.
    h.event("alarm.triggered");
    h.take();
    h.not_performed(refused);
    let stored: Vec<String> = h.stored().into_iter().map(|r| r.id).collect();
    assert!(!stored.contains(&"hazards#t-1".to_string()), "{stored:?}");
    assert!(h
        .take()
        .contains(&"30000 drop hazards#t-1 failed".to_string()));
}

/// The note a trigger's verdict foretells for rule `rule` (`None`: a
/// verdict that notes nothing without `explain`).
fn foretold(verdict: &ruled_engine::Verdict, rule: &str) -> Option<String> {
    use ruled_engine::Verdict;
    match verdict {
        Verdict::Start | Verdict::Restart { .. } => Some(format!("run-start {rule}#")),
        Verdict::Drop { .. } => Some(format!("trigger-dropped {rule}")),
        Verdict::Queue { .. } => Some(format!("trigger-queued {rule}")),
        Verdict::Refused { .. } => Some(format!("trigger-refused {rule}")),
        Verdict::Cooldown { .. } => Some(format!("trigger-suppressed {rule}")),
        _ => None,
    }
}

#[test]
fn a_dry_run_foretells_what_the_same_trigger_then_does() {
    use ruled_engine::Verdict;
    let mut queued = rule("q", &["go"], vec![push("x", 10_000)]);
    queued.concurrency = Concurrency::Queue;
    let mut cooled = rule("c", &["go"], vec![push("y", 10_000)]);
    cooled.concurrency = Concurrency::Restart;
    cooled.options_mut().cooldown_ns = 5_000_000_000;
    let mut dropped = rule("d", &["go"], vec![push("z", 10_000)]);
    dropped.concurrency = Concurrency::Drop;
    let config = EngineConfig {
        queue_backlog: 1,
        ..EngineConfig::default()
    };
    let mut h = H::with(payload(vec![queued, cooled, dropped]), config);
    let go = Event {
        topic: "go".into(),
        ..Event::default()
    };
    let mut seen = Vec::new();
    for at in [0, 1_000, 2_000, 6_000] {
        h.to(at);
        h.take();
        let verdicts: Vec<(String, Verdict)> = ["q", "c", "d"]
            .iter()
            .map(|name| {
                let dry = h.engine.dry_run(name, &go, now_of(&h)).unwrap();
                (name.to_string(), dry.verdict)
            })
            .collect();
        h.event("go");
        let lines = h.take();
        for (name, verdict) in verdicts {
            let expected = foretold(&verdict, &name).unwrap();
            assert!(
                lines.iter().any(|line| line.contains(&expected)),
                "at {at} ms {name}: the dry run said {verdict:?}, the engine did {lines:?}"
            );
            seen.push(verdict);
        }
    }
    // Every policy outcome was foretold once at least.
    for kind in ["Start", "Queue", "Refused", "Cooldown", "Restart", "Drop"] {
        assert!(
            seen.iter().any(|v| format!("{v:?}").starts_with(kind)),
            "{kind} not reached: {seen:?}"
        );
    }
}

/// `v1.emit` (docs/operating.md#handing-the-rules-an-event): an operator's
/// event does exactly what the same event from the bus does, and says
/// what `decide` gave each matched rule.
#[test]
fn an_operator_event_takes_the_bus_path_and_reports_its_verdicts() {
    let make = || {
        let mut cooled = rule("c", &["go"], vec![push("x", 0)]);
        cooled.options_mut().cooldown_ns = 10_000_000_000;
        H::new(vec![
            cooled,
            rule("d", &["go", "other"], vec![push("y", 5_000)]),
        ])
    };
    let (mut bus, mut operator) = (make(), make());
    bus.event("go");
    bus.to(1_000);
    bus.event("go");
    let go = || Event {
        topic: "go".into(),
        ..Event::default()
    };
    let mut verdicts = Vec::new();
    for at in [0, 1_000] {
        operator.to(at);
        let now = Now::new(operator.t(), operator.wall());
        verdicts.push(operator.engine.operator_event(now, go(), 100));
        operator.pump();
    }
    assert_eq!(bus.take(), operator.take());
    let (first, total) = &verdicts[0];
    assert_eq!(*total, 2);
    assert_eq!(first[0].verdict, ruled_engine::Verdict::Start);
    assert_eq!(first[0].run.as_deref(), Some("c#t-1"));
    assert_eq!(first[1].rule.as_ref(), "d");
    let (second, _) = &verdicts[1];
    assert!(
        matches!(second[0].verdict, ruled_engine::Verdict::Cooldown { .. }),
        "{second:?}"
    );
    assert_eq!(second[0].run, None);
    assert!(
        matches!(second[1].verdict, ruled_engine::Verdict::Restart { .. })
            || matches!(second[1].verdict, ruled_engine::Verdict::Drop { .. }),
        "{second:?}"
    );
    // Listed at most `shown`; the total still counts every match.
    let now = Now::new(operator.t(), operator.wall());
    let (listed, total) = operator.engine.operator_event(now, go(), 1);
    assert_eq!((listed.len(), total), (1, 2));
}
