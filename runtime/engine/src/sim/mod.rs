//! The simulator (DESIGN.md 8): the same [`Engine`] the service runs, on a
//! virtual clock, with a virtual worker pool and a virtual record store.
//! Actions are recorded, not performed. Pure: the caller parses the
//! timeline and loads the bundles.

mod timeline;

pub use timeline::{
    parse, ClockEntry, Dur, EventEntry, FailEntry, Place, RestartEntry, StateEntry, Timeline,
    TimelineError,
};

use crate::{
    Effect, Engine, EngineConfig, Job, JobId, LogLine, Note, Time, DEFAULT_REPLAY_WINDOW_MS,
};
use rulecore::bundle::{Action, Payload};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

/// The virtual wall clock at virtual time zero: fixed, so output is
/// deterministic (2024-01-01T00:00:00Z).
pub const WALL_ORIGIN_MS: i64 = 1_704_067_200_000;

/// One thing that happened, in time order. Fields are absent when not
/// relevant (DESIGN.md 8).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Line {
    pub at_ms: u64,
    pub kind: &'static str,
    pub rule: Option<String>,
    pub step: Option<u32>,
    pub pass: Option<u32>,
    pub action: Option<&'static str>,
    pub list: Option<String>,
    pub push: Option<String>,
    pub command: Option<String>,
    pub iface: Option<String>,
    pub id: Option<String>,
    pub data: Option<String>,
    pub run: Option<String>,
    /// `end` only: how many things were still waiting when `end` stopped
    /// the clock.
    pub pending: Option<u32>,
    pub reason: Option<String>,
}

/// One present field's value.
enum Value<'a> {
    Num(u32),
    Str(&'a str),
}

impl Line {
    /// The present fields after `at_ms` and `kind`, in output order (the
    /// one list both formats print).
    fn fields(&self) -> impl Iterator<Item = (&'static str, Value<'_>)> {
        fn text(value: &Option<String>) -> Option<Value<'_>> {
            value.as_deref().map(Value::Str)
        }
        [
            ("rule", text(&self.rule)),
            ("step", self.step.map(Value::Num)),
            ("pass", self.pass.map(Value::Num)),
            ("action", self.action.map(Value::Str)),
            ("list", text(&self.list)),
            ("push", text(&self.push)),
            ("command", text(&self.command)),
            ("iface", text(&self.iface)),
            ("id", text(&self.id)),
            ("data", text(&self.data)),
            ("run", text(&self.run)),
            ("pending", self.pending.map(Value::Num)),
            ("reason", text(&self.reason)),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.map(|value| (key, value)))
    }

    /// One JSON object: `at_ms`, `kind`, then the present fields.
    pub fn to_json(&self) -> String {
        let quoted = |text: &str| serde_json::Value::from(text).to_string();
        let mut out = format!("{{\"at_ms\":{},\"kind\":{}", self.at_ms, quoted(self.kind));
        for (key, value) in self.fields() {
            let value = match value {
                Value::Num(number) => number.to_string(),
                Value::Str(text) => quoted(text),
            };
            out.push_str(&format!(",\"{key}\":{value}"));
        }
        out.push('}');
        out
    }

    /// One text line: time, kind, then `key=value` for the present fields.
    pub fn to_text(&self) -> String {
        let mut out = format!("{:>8} ms  {:<18}", self.at_ms, self.kind);
        for (key, value) in self.fields() {
            match value {
                Value::Num(number) => out.push_str(&format!(" {key}={number}")),
                Value::Str(text) => out.push_str(&format!(" {key}={text}")),
            }
        }
        out.trim_end().to_string()
    }
}

/// What a simulation produced.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub lines: Vec<Line>,
    /// The engine's log lines, with their virtual time in ms.
    pub logs: Vec<(u64, LogLine)>,
    /// Records left in the virtual store at the end.
    pub records: BTreeMap<String, String>,
}

/// Runs `timeline` against `payload`. `after_restart`, when given, replaces
/// the rules at every `[[restart]]`.
pub fn simulate(
    payload: Arc<Payload>,
    timeline: &Timeline,
    after_restart: Option<Arc<Payload>>,
) -> Result<Outcome, TimelineError> {
    timeline.validate()?;
    // A `[[fail]]` naming no rule, or a step its rule does not have, would
    // silently fail nothing: refused, like a typo in a rule file.
    for (index, fail) in timeline.fail.iter().enumerate() {
        let steps = std::iter::once(&payload)
            .chain(after_restart.as_ref())
            .filter_map(|payload| payload.rules.iter().find(|rule| rule.name == fail.rule))
            .map(|rule| rule.steps.len())
            .max();
        match (steps, fail.step) {
            (None, _) => {
                return Err(TimelineError::UnknownFailRule {
                    number: index + 1,
                    rule: fail.rule.clone(),
                })
            }
            (Some(steps), Some(step)) if step as usize >= steps => {
                return Err(TimelineError::FailStepOutOfRange {
                    number: index + 1,
                    rule: fail.rule.clone(),
                    step,
                    steps,
                })
            }
            _ => {}
        }
    }
    let mut sim = Sim::new(payload, timeline, after_restart);
    sim.run(timeline);
    Ok(sim.outcome)
}

/// Entry kinds in the order they apply at one instant (DESIGN.md 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Clock,
    State,
    Fail,
    Restart,
    Event,
}

#[derive(Debug)]
struct Running {
    finish: u64,
    seq: u64,
    job: Job,
    fails: bool,
}

#[derive(Debug)]
struct Sim<'t> {
    engine: Engine,
    after_restart: Option<Arc<Payload>>,
    replay_window_ms: i64,
    /// Virtual time, ns.
    now: u64,
    /// Wall clock offset from `WALL_ORIGIN_MS + now`, ms.
    jump_ms: i64,
    /// When the service comes back up, while it is down.
    up_at: Option<u64>,
    restarts: u32,
    workers: usize,
    queue_cap: usize,
    action_ns: u64,
    running: Vec<Running>,
    queued: VecDeque<Job>,
    seq: u64,
    fails: Vec<&'t FailEntry>,
    /// The datastore's hash fields: survive restarts.
    datastore: HashMap<(String, String), String>,
    outcome: Outcome,
}

impl<'t> Sim<'t> {
    fn new(
        payload: Arc<Payload>,
        timeline: &'t Timeline,
        after_restart: Option<Arc<Payload>>,
    ) -> Self {
        let replay_window_ms = timeline
            .replay_window
            .map(|d| d.0 / 1_000_000)
            .unwrap_or(DEFAULT_REPLAY_WINDOW_MS);
        Self {
            engine: Engine::new(payload, Self::config(replay_window_ms, 0)),
            after_restart,
            replay_window_ms,
            now: 0,
            jump_ms: 0,
            up_at: None,
            restarts: 0,
            workers: timeline.workers.unwrap_or(2),
            queue_cap: timeline.queue.unwrap_or(256),
            action_ns: timeline
                .action_time
                .map(|d| d.0.unsigned_abs())
                .unwrap_or(0),
            running: Vec::new(),
            queued: VecDeque::new(),
            seq: 0,
            fails: Vec::new(),
            datastore: HashMap::new(),
            outcome: Outcome::default(),
        }
    }

    fn config(replay_window_ms: i64, epoch: u32) -> EngineConfig {
        EngineConfig {
            replay_window_ms,
            epoch: epoch.to_string(),
            ..EngineConfig::default()
        }
    }

    fn t(&self) -> Time {
        Time::from_nanos(self.now)
    }

    fn wall(&self) -> i64 {
        // Saturating: timeline durations and jumps are user input.
        let since_origin = i64::try_from(self.now / 1_000_000).unwrap_or(i64::MAX);
        WALL_ORIGIN_MS
            .saturating_add(since_origin)
            .saturating_add(self.jump_ms)
    }

    fn at_ms(&self) -> u64 {
        self.now / 1_000_000
    }

    fn run(&mut self, timeline: &'t Timeline) {
        // (at, kind, index in its list), sorted: time, then kind order, then
        // file order.
        let mut entries: Vec<(u64, Kind, usize)> = Vec::new();
        let mut schedule = |kind: Kind, ats: &mut dyn Iterator<Item = Dur>| {
            entries.extend(
                ats.enumerate()
                    .map(|(i, at)| (at.0.unsigned_abs(), kind, i)),
            );
        };
        schedule(Kind::Clock, &mut timeline.clock.iter().map(|e| e.at));
        schedule(Kind::State, &mut timeline.state.iter().map(|e| e.at));
        schedule(Kind::Fail, &mut timeline.fail.iter().map(|e| e.at));
        schedule(Kind::Restart, &mut timeline.restart.iter().map(|e| e.at));
        schedule(Kind::Event, &mut timeline.event.iter().map(|e| e.at));
        entries.sort();
        let end = timeline.end.map(|d| d.0.unsigned_abs());
        for (at, kind, index) in entries {
            if end.is_some_and(|end| at > end) {
                break;
            }
            self.run_until(at);
            match kind {
                Kind::Clock => {
                    let delta_ms = timeline.clock[index].jump.0 / 1_000_000;
                    self.jump_ms = self.jump_ms.saturating_add(delta_ms);
                    // A running service sees the jump and rewrites its
                    // records (`Engine::clock_jumped`); a stopped one
                    // cannot: replay judges its records by the new clock.
                    if self.up_at.is_none() {
                        self.engine.clock_jumped(delta_ms);
                        self.perform();
                    }
                }
                Kind::State => {
                    let entry = &timeline.state[index];
                    self.datastore.insert(
                        (entry.hash.clone(), entry.field.clone()),
                        entry.value.clone(),
                    );
                    if self.up_at.is_none() {
                        self.engine
                            .set_state(&entry.hash, &entry.field, entry.value.clone());
                    }
                }
                Kind::Fail => self.fails.push(&timeline.fail[index]),
                Kind::Restart => self.restart(timeline.restart[index].down.0.unsigned_abs()),
                Kind::Event => {
                    // While the service is down nobody is subscribed.
                    if self.up_at.is_none() {
                        let (t, w) = (self.t(), self.wall());
                        self.engine
                            .handle_event(t, w, timeline.event[index].to_event());
                        self.perform();
                    }
                }
            }
        }
        match end {
            Some(end) => {
                self.run_until(end);
                self.end_line();
            }
            None => self.run_until(u64::MAX),
        }
    }

    /// At `end`, one `end` line when the clock stopped with something still
    /// waiting, so a cut-short simulation does not look finished: armed
    /// engine timers (step waits, repeat gaps, debounce windows) plus
    /// actions running or queued in the pool; while the service is down,
    /// the records its start would replay (`reason=down`).
    fn end_line(&mut self) {
        let (pending, reason) = match self.up_at {
            Some(_) => (self.outcome.records.len(), Some("down".to_string())),
            None => {
                let timers = usize::try_from(self.engine.counters().pending).unwrap_or(usize::MAX);
                (
                    timers
                        .saturating_add(self.running.len())
                        .saturating_add(self.queued.len()),
                    None,
                )
            }
        };
        if pending > 0 {
            self.line(Line {
                kind: "end",
                pending: Some(u32::try_from(pending).unwrap_or(u32::MAX)),
                reason,
                ..Line::default()
            });
        }
    }

    /// Handles service start, pool completions and engine deadlines due at
    /// or before `limit`, in time order, then moves the clock to `limit`.
    fn run_until(&mut self, limit: u64) {
        loop {
            let up = self.up_at;
            let finish = self.running.iter().map(|r| (r.finish, r.seq)).min();
            let deadline = if up.is_none() {
                self.engine.next_deadline().map(Time::as_nanos)
            } else {
                None
            };
            let next = [up, finish.map(|f| f.0), deadline]
                .into_iter()
                .flatten()
                .min();
            let Some(next) = next.filter(|&next| next <= limit) else {
                break;
            };
            self.now = self.now.max(next);
            if up == Some(next) {
                self.start_again();
            } else if let Some((_, seq)) = finish.filter(|f| f.0 == next) {
                self.finish_job(seq);
            } else {
                let (t, w) = (self.t(), self.wall());
                self.engine.handle_timeout(t, w);
            }
            self.perform();
        }
        if limit != u64::MAX {
            self.now = self.now.max(limit);
        }
    }

    fn restart(&mut self, down_ns: u64) {
        if self.up_at.is_some() {
            // Already down: the later restart only extends the outage.
            self.up_at = self.up_at.max(Some(self.now.saturating_add(down_ns)));
            return;
        }
        self.line(Line {
            kind: "restart",
            ..Line::default()
        });
        self.engine.stop();
        self.perform();
        // The pool stops: running actions are killed (their records went
        // when they started); queued ones are abandoned and keep theirs.
        self.running.clear();
        for job in std::mem::take(&mut self.queued) {
            self.engine.action_abandoned(job.id);
        }
        self.perform();
        self.up_at = Some(self.now.saturating_add(down_ns));
    }

    /// The service starts again: fresh engine, state read, replay.
    fn start_again(&mut self) {
        self.up_at = None;
        self.restarts += 1;
        let payload = match &self.after_restart {
            Some(next) => Arc::clone(next),
            None => Arc::clone(self.engine.payload()),
        };
        self.engine = Engine::new(payload, Self::config(self.replay_window_ms, self.restarts));
        let mut pairs: Vec<_> = self.datastore.iter().collect();
        pairs.sort();
        for ((hash, field), value) in pairs {
            self.engine.set_state(hash, field, value.clone());
        }
        let fields: Vec<(String, Vec<u8>)> = self
            .outcome
            .records
            .iter()
            .map(|(id, json)| (id.clone(), json.clone().into_bytes()))
            .collect();
        let (t, w) = (self.t(), self.wall());
        self.engine.replay_raw(t, w, fields);
    }

    fn fails(&self, job: &Job) -> bool {
        let now = self.now;
        self.fails.iter().any(|fail| {
            *job.rule == *fail.rule
                && fail.step.is_none_or(|step| step == job.step)
                && fail.at.0.unsigned_abs() <= now
                && fail.until.is_none_or(|until| now < until.0.unsigned_abs())
        })
    }

    /// Performs every queued effect, in order.
    fn perform(&mut self) {
        while let Some(effect) = self.engine.poll_effect() {
            match effect {
                Effect::Submit(job) => self.submit(job),
                Effect::PutRecord {
                    id,
                    rule,
                    step,
                    pass,
                    json,
                    ..
                } => {
                    self.outcome.records.insert(id.to_string(), json);
                    self.line(Line {
                        kind: "record-put",
                        rule: Some(rule.to_string()),
                        step: Some(step),
                        pass: Some(pass),
                        run: Some(id.to_string()),
                        ..Line::default()
                    });
                }
                Effect::DropRecord { id, rule, reason } => {
                    self.drop_record(&id, rule.as_deref(), reason.as_str());
                }
                Effect::Log(log) => {
                    let at = self.at_ms();
                    self.outcome.logs.push((at, log));
                }
                Effect::Note(note) => self.note(note),
            }
        }
    }

    fn submit(&mut self, job: Job) {
        if self.running.len() < self.workers {
            self.start_job(job);
        } else if self.queued.len() < self.queue_cap {
            self.queued.push_back(job);
        } else {
            let (t, w) = (self.t(), self.wall());
            self.engine.action_refused(t, w, job.id);
        }
    }

    fn start_job(&mut self, job: Job) {
        // The record goes exactly when the action starts (DESIGN.md 6.5).
        if let Some(id) = &job.drop_record {
            self.drop_record(id, Some(&job.rule), "started");
        }
        let fails = self.fails(&job);
        self.line(action_line(self.at_ms(), "action", &job));
        self.engine.action_started(job.id);
        self.seq += 1;
        self.running.push(Running {
            finish: self.now.saturating_add(self.action_ns),
            seq: self.seq,
            job,
            fails,
        });
    }

    fn finish_job(&mut self, seq: u64) {
        let Some(position) = self.running.iter().position(|r| r.seq == seq) else {
            return;
        };
        let done = self.running.remove(position);
        let result = if done.fails {
            let mut line = action_line(self.at_ms(), "action-failed", &done.job);
            line.reason = Some("simulated-failure".to_string());
            self.line(line);
            Err("simulated-failure".to_string())
        } else {
            Ok(())
        };
        let (t, w) = (self.t(), self.wall());
        let id: JobId = done.job.id;
        self.engine.action_finished(t, w, id, result);
        if let Some(next) = self.queued.pop_front() {
            self.start_job(next);
        }
    }

    fn note(&mut self, note: Note) {
        // Visible in the store at the end; not one of DESIGN.md 8's kinds.
        if matches!(note, Note::RecordKept { .. }) {
            return;
        }
        let fields = note.fields();
        self.line(Line {
            kind: note.kind(),
            rule: Some(fields.rule.to_string()),
            step: fields.step,
            pass: fields.pass,
            run: fields.run.map(str::to_string),
            reason: fields.reason.map(str::to_string),
            ..Line::default()
        });
    }

    /// Removes a record from the virtual store, with its `record-drop` line.
    fn drop_record(&mut self, id: &str, rule: Option<&str>, reason: &str) {
        self.outcome.records.remove(id);
        self.line(Line {
            kind: "record-drop",
            rule: rule.map(str::to_string),
            run: Some(id.to_string()),
            reason: Some(reason.to_string()),
            ..Line::default()
        });
    }

    fn line(&mut self, mut line: Line) {
        line.at_ms = self.at_ms();
        self.outcome.lines.push(line);
    }
}

fn action_line(at_ms: u64, kind: &'static str, job: &Job) -> Line {
    let mut line = Line {
        at_ms,
        kind,
        rule: Some(job.rule.to_string()),
        step: Some(job.step),
        pass: Some(job.pass),
        run: Some(job.run.to_string()),
        ..Line::default()
    };
    match &*job.action {
        Action::Redis { list, push } => {
            line.action = Some("redis");
            line.list = Some(list.clone());
            line.push = Some(push.clone());
        }
        Action::Exec { command, .. } => {
            line.action = Some("exec");
            line.command = Some(command.clone());
        }
        Action::Can(frame) => {
            line.action = Some("can");
            line.iface = Some(frame.iface.clone());
            line.id = Some(format!("0x{:x}", frame.id));
            line.data = Some(frame.data.iter().map(|b| format!("{b:02x}")).collect());
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_text_print_the_same_present_fields_and_json_escapes() {
        let line = Line {
            at_ms: 7,
            kind: "action",
            rule: Some("r".into()),
            step: Some(1),
            push: Some("say \"hi\"\n".into()),
            ..Line::default()
        };
        let json: serde_json::Value = serde_json::from_str(&line.to_json()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"at_ms": 7, "kind": "action", "rule": "r", "step": 1, "push": "say \"hi\"\n"})
        );
        assert_eq!(
            line.to_text(),
            "       7 ms  action             rule=r step=1 push=say \"hi\""
        );
    }
}
