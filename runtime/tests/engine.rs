//! The engine's behaviours (DESIGN.md 6.2-6.7), one test each, on virtual
//! time. Payloads are built by hand; `when` programs from bytecode ops.

use rulecore::bundle::{Action, Concurrency, Fingerprint, Payload, Repeat, Rule, StatePair, Step};
use rulecore::bytecode::{Const, EventField, Op, Program};
use rulecore::event::Event;
use rulecore::topic::TopicPattern;
use ruled::engine::{
    Counters, DropReason, Effect, EndReason, Engine, EngineConfig, JobId, Note, PendingRecord,
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
    Rule {
        name: name.into(),
        source: "test.toml".into(),
        enabled: true,
        on: pats(on),
        cancel_on: vec![],
        concurrency: Concurrency::Restart,
        cooldown_ns: 0,
        debounce_ns: 0,
        repeat: Repeat {
            count: 1,
            every_ns: 0,
        },
        when: None,
        steps,
    }
}

fn fingerprint(push: &str, after_ms: u64) -> Fingerprint {
    let mut bytes = [0u8; 16];
    for (i, b) in push.bytes().chain(after_ms.to_le_bytes()).enumerate() {
        bytes[i % 16] = bytes[i % 16].wrapping_mul(31).wrapping_add(b);
    }
    Fingerprint(bytes)
}

fn push(value: &str, after_ms: u64) -> Step {
    Step {
        action: Action::Redis {
            list: "scooter:blinker".into(),
            push: value.into(),
        },
        when: None,
        after_ns: after_ms * 1_000_000,
        durable: after_ms > 0,
        fingerprint: fingerprint(value, after_ms),
    }
}

/// The hazards rule of DESIGN.md 1.
fn hazards() -> Rule {
    let mut r = rule(
        "hazards",
        &["alarm.triggered"],
        vec![push("both", 0), push("off", 30_000)],
    );
    r.cancel_on = pats(&["alarm.disarmed"]);
    r
}

/// Const pool used by every test payload: 0 = "parked", 1 = true.
fn payload(rules: Vec<Rule>) -> Payload {
    Payload {
        compiler_version: "test".into(),
        rules,
        state_pairs: vec![StatePair {
            hash: "vehicle".into(),
            field: "state".into(),
        }],
        consts: vec![Const::Str("parked".into()), Const::Bool(true)],
    }
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
    jobs: Vec<ruled::engine::Job>,
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
        self.engine.handle_event(t, w, event);
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
            self.engine.handle_timeout(t, w);
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
        self.engine.action_finished(t, w, job, result);
        self.pump();
    }
    fn refuse(&mut self, job: JobId) {
        self.jobs.retain(|j| j.id != job);
        let (t, w) = (self.t(), self.wall());
        self.engine.action_refused(t, w, job);
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
                Effect::Log(_) | Effect::Note(_) => {}
            }
        }
        for job in ready {
            self.start(job);
            self.finish(job, Ok(()));
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
            let what = match &job.action {
                Action::Redis { push, .. } => push.clone(),
                other => format!("{other:?}"),
            };
            let owns = job
                .drop_record
                .as_ref()
                .map(|id| format!(" owns {id}"))
                .unwrap_or_default();
            format!(
                "submit {} s{} p{} {what}{owns}",
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
        Effect::Note(note) => match note {
            Note::RunStart { run, .. } => format!("run-start {run}"),
            Note::RunEnd { run, reason, .. } => format!("run-end {run} {}", reason.as_str()),
            Note::StepSkipped { run, step, .. } => format!("step-skipped {run} s{step}"),
            Note::Trigger { rule, outcome } => format!("{} {rule}", outcome.kind()),
            Note::ReplayResume {
                run, step, pass, ..
            } => {
                format!("replay-resume {run} s{step} p{pass}")
            }
            Note::ReplayDrop { id, reason, .. } => format!("replay-drop {id} {}", reason.as_str()),
            Note::RecordKept { run, .. } => format!("record-kept {run}"),
        },
    }
}

fn lines(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

// ----- 6.3 walking a sequence -------------------------------------------

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
    r.steps = vec![push("off", 30_000)];
    let mut h = H::new(vec![r]);
    // Both events reach the engine before the driver performs anything.
    h.engine.handle_event(
        Time::ZERO,
        WALL0,
        Event {
            topic: "alarm.triggered".into(),
            ..Event::default()
        },
    );
    h.engine.handle_event(
        Time::ZERO,
        WALL0,
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
    h.start(job);
    h.finish(job, Ok(()));
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
    h.start(job);
    h.finish(job, Err("boom".into()));
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
fn a_refused_step_ends_the_run_counts_dropped_and_keeps_its_record() {
    let mut h = H::new(vec![hazards()]).manual();
    h.event("alarm.triggered");
    let job = h.last_job();
    h.start(job);
    h.finish(job, Ok(()));
    h.to(30_000);
    let off = h.last_job();
    h.take();
    h.refuse(off);
    assert_eq!(h.take(), lines(&["30000 run-end hazards#t-1 refused"]));
    assert_eq!(h.records.len(), 1, "it provably did not run");
    assert_eq!(h.counters().dropped, 1);
    assert_eq!(h.counters().runs_active, 0);
}

#[test]
fn stop_keeps_records_of_waiting_runs_and_an_abandoned_step_keeps_its_record() {
    let mut a = hazards();
    a.name = "a".into();
    let mut b = hazards();
    b.name = "b".into();
    b.on = pats(&["b"]);
    let mut h = H::new(vec![a, b]).manual();
    h.event("alarm.triggered");
    let j = h.last_job();
    h.start(j);
    h.finish(j, Ok(()));
    h.event("b");
    let j = h.last_job();
    h.start(j);
    h.finish(j, Ok(()));
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
    h.start(job);
    h.finish(job, Ok(()));
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
