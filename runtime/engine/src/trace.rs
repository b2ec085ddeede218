//! Traces (docs/semantics.md#traces): per rule, its last runs and its last
//! non-fire, kept in memory for people asking why a rule did or did not
//! act.
//!
//! All traces share one byte budget. They live in one map keyed by rule
//! position, holding only rules that have a trace, so a loaded bundle whose
//! rules never fire costs nothing here. One age queue, oldest first, says
//! which trace goes when the budget is exceeded. Bytes are counted from
//! what is allocated: each record's own heap, the per-rule deques, the
//! map's buckets and the age queue.

mod steps;
mod view;

pub use view::{
    read_text, utc, NonFireTrace, RuleTrace, RunEndTrace, RunTrace, StepEndTrace, StepTrace,
    SubmitOutcome, SubmitTrace, TimeStyle, WaitTrace, WhenTrace,
};

use crate::why::KeptReads;
use crate::{EndReason, NonFireReason, Time};
use rulecore::bundle::Payload;
use rulecore::event::{Event, SmallStr};
use rulecore::event_data::{DataValue, ENTRY_BYTES, INLINE_KEY};
use rulecore::text::cut;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::size_of;
use std::sync::Arc;

/// How a run's trace starts: when, whether replayed, and what the rule's
/// `when` read when it was found true for the run's event.
#[derive(Debug)]
pub(crate) struct Start {
    pub now: Time,
    pub replayed: bool,
    pub when: KeptReads,
}

/// Runs kept per rule unless configured (`ruled --traces`).
pub const DEFAULT_TRACES: usize = 5;
/// The budget of all traces together unless configured (`ruled --trace-memory`).
pub const DEFAULT_TRACE_MEMORY: usize = 1 << 20;
/// A traced event larger than this is kept as the start of its JSON.
pub const TRACE_EVENT_MAX: usize = 4096;
/// A traced error text (a failed action's, a `when`'s) is cut here.
pub const TRACE_ERROR_MAX: usize = 1024;
/// Step records kept per run trace: a long `repeat` keeps its latest.
pub const TRACE_STEPS_MAX: usize = 32;

/// The event a trace holds: shared with the engine when small (taking it
/// costs a reference count, and the trace frees it only when evicted),
/// else the start of its JSON.
#[derive(Debug)]
pub(crate) enum TracedEvent {
    Shared {
        event: Arc<Event>,
        bytes: usize,
    },
    /// The first [`TRACE_EVENT_MAX`] bytes of the event's JSON.
    Cut(Box<str>),
}

impl TracedEvent {
    fn new(event: &Arc<Event>) -> Self {
        match event_bytes(event) {
            Some(bytes) => Self::Shared {
                event: Arc::clone(event),
                bytes,
            },
            None => match serde_json::to_string(&**event) {
                Ok(json) => Self::Cut(cut(&json, TRACE_EVENT_MAX).into()),
                // Not expected of an event decoded from JSON; said in place of it.
                Err(error) => Self::Cut(format!("(event not serialisable: {error})").into()),
            },
        }
    }

    /// Heap kept alive by this trace (a shared event is counted whole:
    /// the trace may be its last owner).
    fn heap(&self) -> usize {
        match self {
            Self::Shared { bytes, .. } => *bytes,
            Self::Cut(json) => json.len(),
        }
    }

    /// The event, when it is kept whole.
    fn whole(&self) -> Option<&Event> {
        match self {
            Self::Shared { event, .. } => Some(event),
            Self::Cut(_) => None,
        }
    }
}

/// Whether a trace keeps `event` whole (else the start of its JSON): then
/// the reads of a `when` judged on it can wait until the trace is viewed.
pub(crate) fn kept_whole(event: &Event) -> bool {
    event_bytes(event).is_some()
}

/// The heap an event's `Arc` holds (counts, struct, strings, `data`), or
/// `None` once past [`TRACE_EVENT_MAX`]: the walk stops there.
fn event_bytes(event: &Event) -> Option<usize> {
    let text = |s: &Option<SmallStr>| s.as_deref().map_or(0, str::len);
    let bytes = 2 * size_of::<usize>()
        + size_of::<Event>()
        + event.topic.len()
        + text(&event.id)
        + text(&event.src)
        + text(&event.from)
        + text(&event.to);
    value_bytes(&event.data, bytes)
}

/// `bytes` plus the heap `value` holds, or `None` once past
/// [`TRACE_EVENT_MAX`]. Every level of nesting adds to `bytes`, so the
/// recursion ends within a few hundred levels.
fn value_bytes(value: &DataValue, mut bytes: usize) -> Option<usize> {
    if bytes > TRACE_EVENT_MAX {
        return None;
    }
    match value {
        DataValue::Str(s) => bytes += s.len(),
        DataValue::Array(items) => {
            bytes += items.len() * size_of::<DataValue>();
            for item in items.iter() {
                bytes = value_bytes(item, bytes)?;
            }
        }
        // One boxed slice of (key, value) entries; a long key is its own box.
        DataValue::Object(object) => {
            bytes += object.len() * ENTRY_BYTES;
            for (key, value) in object.iter() {
                let key_heap = if key.len() > INLINE_KEY { key.len() } else { 0 };
                bytes = value_bytes(value, bytes + key_heap)?;
            }
        }
        _ => {}
    }
    (bytes <= TRACE_EVENT_MAX).then_some(bytes)
}

fn error_text(text: &str) -> Box<str> {
    cut(text, TRACE_ERROR_MAX).into()
}

pub(crate) use crate::decide::WhenResult;

impl WhenResult {
    /// A `when`'s result as a trace holds it: an error's text cut to
    /// [`TRACE_ERROR_MAX`].
    pub(crate) fn of(result: &Result<bool, String>) -> Self {
        match result {
            Ok(true) => Self::True,
            Ok(false) => Self::False,
            Err(error) => Self::Error(error_text(error)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait {
    pub start: Time,
    pub due: Time,
    pub durable: bool,
}

/// Which step a record is of: a step, or a finally step
/// (docs/rules.md#finally), on a repeat pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct At {
    pub step: u32,
    pub pass: u32,
    pub finally: bool,
}

#[derive(Debug)]
struct StepRecord {
    step: u32,
    pass: u32,
    finally: bool,
    wait: Option<Wait>,
    when: Option<WhenResult>,
    /// What the `when` read (docs/semantics.md#what-a-when-read).
    reads: KeptReads,
    submit: Option<(Time, SubmitOutcome)>,
    end: Option<(Time, EndReason, Option<Box<str>>)>,
}

impl StepRecord {
    fn new(at: At) -> Self {
        Self {
            step: at.step,
            pass: at.pass,
            finally: at.finally,
            wait: None,
            when: None,
            reads: KeptReads::NONE,
            submit: None,
            end: None,
        }
    }

    fn heap(&self) -> usize {
        let when = match &self.when {
            Some(WhenResult::Error(text)) => text.len(),
            _ => 0,
        };
        let end = self.end.as_ref().and_then(|end| end.2.as_ref());
        when + self.reads.heap() + end.map_or(0, |text| text.len())
    }
}

#[derive(Debug)]
struct RunRecord {
    seq: u64,
    /// The engine's run serial: which live run this trace follows.
    serial: u64,
    id: Arc<str>,
    replayed: bool,
    event: TracedEvent,
    start: Time,
    /// What the rule's `when` read when it was found true for the event;
    /// [`KeptReads::NONE`] when the run did not start from that judgement.
    when: KeptReads,
    steps: steps::StepRecords,
    /// Step records dropped from the front ([`TRACE_STEPS_MAX`]).
    steps_left_out: u32,
    end: Option<(Time, EndReason)>,
    /// [`RunRecord::fixed_heap`], counted once: the id, the event and the
    /// `when`'s reads do not change after the start (but at a reload's
    /// settling), and a run's trace is counted again at every update
    /// that can change it.
    fixed: usize,
    /// What [`RunRecord::heap`] gave when last counted.
    counted: usize,
}

impl RunRecord {
    fn heap(&self) -> usize {
        self.fixed + self.steps.allocated() + self.steps.iter().map(StepRecord::heap).sum::<usize>()
    }

    /// The heap of the parts set at the start.
    fn fixed_heap(&self) -> usize {
        2 * size_of::<usize>() + self.id.len() + self.event.heap() + self.when.heap()
    }

    /// The record of step `at`: the latest, or a new one; `true` when the
    /// list of records changed (one added, maybe the oldest dropped), which
    /// changes the record's heap.
    fn step(&mut self, at: At) -> (&mut StepRecord, bool) {
        let (record, dropped, added) = self.steps.at(at, TRACE_STEPS_MAX);
        if dropped {
            self.steps_left_out = self.steps_left_out.saturating_add(1);
        }
        (record, added)
    }
}

#[derive(Debug)]
struct NonFireRecord {
    seq: u64,
    at: Time,
    reason: NonFireReason,
    error: Option<Box<str>>,
    /// What the rule's `when` read, when it was judged for the event.
    reads: KeptReads,
    event: TracedEvent,
}

impl NonFireRecord {
    fn heap(&self) -> usize {
        size_of::<Self>()
            + self.event.heap()
            + self.error.as_ref().map_or(0, |e| e.len())
            + self.reads.heap()
    }
}

#[derive(Debug, Default)]
struct RuleTraces {
    /// Oldest first.
    runs: VecDeque<RunRecord>,
    non_fire: Option<Box<NonFireRecord>>,
}

impl RuleTraces {
    fn holds(&self, seq: u64) -> bool {
        self.runs.iter().any(|run| run.seq == seq)
            || self.non_fire.as_ref().is_some_and(|nf| nf.seq == seq)
    }

    fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.non_fire.is_none()
    }
}

/// One entry of the age queue: a trace of `rule` numbered `seq`; stale
/// once that trace was replaced or dropped by its rule's own limit.
#[derive(Debug, Clone, Copy)]
struct Aged {
    rule: u32,
    seq: u64,
}

/// Every rule's traces, under one byte budget. See the module documentation.
#[derive(Debug)]
pub(crate) struct Traces {
    runs_per_rule: usize,
    budget: usize,
    /// Bytes of every record and every rule's run deque.
    records: usize,
    rules: HashMap<u32, RuleTraces, BuildHasherDefault<RuleHasher>>,
    age: VecDeque<Aged>,
    /// Age entries whose trace is gone.
    stale: usize,
    next_seq: u64,
    /// The latest engine time a trace was given: when `stop` ends runs.
    latest: Time,
    /// The map's capacity right after it last grew or shrank: deleted
    /// entries lower what `capacity()` says later, not the buckets.
    map_capacity: usize,
}

impl Traces {
    /// `runs_per_rule == 0` or `budget == 0` turns tracing off.
    pub(crate) fn new(runs_per_rule: usize, budget: usize) -> Self {
        Self {
            runs_per_rule: if budget == 0 { 0 } else { runs_per_rule },
            budget,
            records: 0,
            rules: HashMap::default(),
            age: VecDeque::new(),
            stale: 0,
            next_seq: 0,
            latest: Time::ZERO,
            map_capacity: 0,
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.runs_per_rule > 0
    }

    /// The bytes the traces hold now, containers included.
    pub(crate) fn bytes(&self) -> usize {
        let capacity = self.map_capacity;
        // hashbrown: a power-of-two bucket count above capacity * 8/7,
        // each bucket an entry and a control byte, plus one group of
        // control bytes.
        let buckets = if capacity == 0 {
            0
        } else {
            (capacity * 8 / 7 + 1).next_power_of_two()
        };
        let map =
            buckets * (size_of::<(u32, RuleTraces)>() + 1) + if capacity == 0 { 0 } else { 16 };
        self.records + map + self.age.capacity() * size_of::<Aged>()
    }

    /// The latest engine time a trace was given.
    pub(crate) fn latest(&self) -> Time {
        self.latest
    }

    fn seen(&mut self, now: Time) {
        self.latest = self.latest.max(now);
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// A run started (or resumed at replay): a new run trace, the rule's
    /// oldest going when it has its limit.
    pub(crate) fn run_started(
        &mut self,
        rule: usize,
        serial: u64,
        id: &Arc<str>,
        event: &Arc<Event>,
        start: Start,
    ) {
        if !self.enabled() {
            return;
        }
        self.seen(start.now);
        let seq = self.seq();
        let mut record = RunRecord {
            seq,
            serial,
            id: Arc::clone(id),
            replayed: start.replayed,
            event: TracedEvent::new(event),
            start: start.now,
            when: start.when,
            steps: steps::StepRecords::default(),
            steps_left_out: 0,
            end: None,
            fixed: 0,
            counted: 0,
        };
        record.fixed = record.fixed_heap();
        record.counted = record.heap();
        let limit = self.runs_per_rule;
        let key = rule_key(rule);
        let traces = self.rules.entry(key).or_default();
        let mut freed = 0;
        let mut dropped = 0;
        while traces.runs.len() >= limit {
            if let Some(old) = traces.runs.pop_front() {
                freed += old.counted;
                dropped += 1;
            }
        }
        let before = traces.runs.capacity();
        let added = record.counted;
        // Most rules keep one run or two: no room for four.
        traces.runs.reserve_exact(1);
        traces.runs.push_back(record);
        let grown = (traces.runs.capacity() - before) * size_of::<RunRecord>();
        self.records = self.records + added + grown - freed;
        self.stale += dropped;
        self.map_capacity = self.map_capacity.max(self.rules.capacity());
        self.age.push_back(Aged { rule: key, seq });
        self.fit();
    }

    /// Updates the trace of live run `serial` of `rule`, if it is still
    /// kept, and counts what the update allocated. `change` says whether it
    /// may have changed the record's heap (a text or reads stored or
    /// replaced, a step record added): most updates set a time or an
    /// outcome, and counting the record again at each of the four updates
    /// of a one-step run cost about 150 instructions an event
    /// (docs/engine.md#the-event-path-by-instructions).
    fn update_run(
        &mut self,
        rule: usize,
        serial: u64,
        change: impl FnOnce(&mut RunRecord) -> bool,
    ) {
        let Some(traces) = self.rules.get_mut(&rule_key(rule)) else {
            return;
        };
        let Some(run) = traces.runs.back_mut().filter(|run| run.serial == serial) else {
            return;
        };
        if !change(run) {
            return;
        }
        let now = run.heap();
        let grew = now > run.counted;
        self.records = self.records + now - run.counted;
        run.counted = now;
        // Most updates (a pool start, a finish, an end) add nothing: only
        // growth can cross the budget.
        if grew {
            self.fit();
        }
    }

    /// Changes the record of step `at` of the run; `change` says whether it
    /// may have changed the step record's heap, as for
    /// [`Traces::update_run`].
    fn update_step(
        &mut self,
        rule: usize,
        serial: u64,
        at: At,
        change: impl FnOnce(&mut StepRecord) -> bool,
    ) {
        self.update_run(rule, serial, |run| {
            let (step, added) = run.step(at);
            change(step) || added
        });
    }

    pub(crate) fn step_waiting(&mut self, rule: usize, serial: u64, at: At, wait: Wait) {
        self.seen(wait.start);
        self.update_step(rule, serial, at, |step| {
            step.wait = Some(wait);
            false
        });
    }

    pub(crate) fn step_when(
        &mut self,
        rule: usize,
        serial: u64,
        at: At,
        when: WhenResult,
        reads: KeptReads,
    ) {
        self.update_step(rule, serial, at, |step| {
            step.when = Some(when);
            step.reads = reads;
            true
        });
    }

    pub(crate) fn step_submitted(&mut self, rule: usize, serial: u64, at: At, now: Time) {
        self.seen(now);
        self.update_step(rule, serial, at, |step| {
            step.submit = Some((now, SubmitOutcome::Submitted));
            false
        });
    }

    /// The pool started or refused the submitted step.
    pub(crate) fn step_handled(
        &mut self,
        rule: usize,
        serial: u64,
        at: At,
        outcome: SubmitOutcome,
    ) {
        self.update_step(rule, serial, at, |step| {
            if let Some((_, current)) = step.submit.as_mut() {
                *current = outcome;
            }
            false
        });
    }

    /// The step's action finished: `Err` carries the failure's text.
    pub(crate) fn step_finished(
        &mut self,
        rule: usize,
        serial: u64,
        at: At,
        now: Time,
        result: Result<(), &str>,
    ) {
        self.seen(now);
        let end = match result {
            Ok(()) => (now, EndReason::Done, None),
            Err(error) => (now, EndReason::Failed, Some(error_text(error))),
        };
        self.update_step(rule, serial, at, |step| {
            let texts = end.2.is_some() || step.end.as_ref().is_some_and(|old| old.2.is_some());
            step.end = Some(end);
            texts
        });
    }

    /// The run ended: its reason, also the end of the step it was at when
    /// that step has none yet. The event stays shared: turning it into
    /// JSON here cost more than the rest of the trace on every run, and
    /// the room it saved kept only about a tenth more traces
    /// (docs/engine.md#the-48-mb-box).
    pub(crate) fn run_ended(&mut self, rule: usize, serial: u64, now: Time, reason: EndReason) {
        self.seen(now);
        self.update_run(rule, serial, |run| {
            run.end = Some((now, reason));
            if let Some(step) = run.steps.last_mut().filter(|step| step.end.is_none()) {
                step.end = Some((now, reason, None));
            }
            false
        });
    }

    /// `cancel-on` ended the run's steps, and its finally steps follow
    /// (docs/semantics.md#finally): the step it was at ends `cancelled`,
    /// the run goes on.
    pub(crate) fn run_cancelled(&mut self, rule: usize, serial: u64, now: Time) {
        self.seen(now);
        self.update_run(rule, serial, |run| {
            if let Some(step) = run.steps.last_mut().filter(|step| step.end.is_none()) {
                step.end = Some((now, EndReason::Cancelled, None));
            }
            false
        });
    }

    /// The engine stopped while the run was live; `stop` has no time, so
    /// the run ends at the latest time the traces were given.
    pub(crate) fn run_stopped(&mut self, rule: usize, serial: u64) {
        self.run_ended(rule, serial, self.latest, EndReason::Stopped);
    }

    /// A matching event did not start a run: it replaces the rule's last
    /// non-fire.
    pub(crate) fn non_fire(
        &mut self,
        rule: usize,
        now: Time,
        event: &Arc<Event>,
        reason: NonFireReason,
        error: Option<&str>,
        reads: KeptReads,
    ) {
        if !self.enabled() {
            return;
        }
        self.seen(now);
        let seq = self.seq();
        let record = Box::new(NonFireRecord {
            seq,
            at: now,
            reason,
            error: error.map(error_text),
            reads,
            event: TracedEvent::new(event),
        });
        let added = record.heap();
        let key = rule_key(rule);
        let traces = self.rules.entry(key).or_default();
        if let Some(old) = traces.non_fire.replace(record) {
            self.records -= old.heap();
            self.stale += 1;
        }
        self.map_capacity = self.map_capacity.max(self.rules.capacity());
        self.records += added;
        self.age.push_back(Aged { rule: key, seq });
        self.fit();
    }

    /// Evicts the oldest traces until the budget holds, and drops stale
    /// age entries once they outnumber the live ones.
    fn fit(&mut self) {
        while self.bytes() > self.budget {
            if !self.evict_oldest() {
                // Nothing left to evict: the containers are what is over.
                self.rules.shrink_to_fit();
                self.map_capacity = self.rules.capacity();
                self.age.shrink_to_fit();
                break;
            }
        }
        let live = self.age.len().saturating_sub(self.stale);
        if self.stale > live + 64 {
            let rules = &self.rules;
            self.age.retain(|aged| {
                rules
                    .get(&aged.rule)
                    .is_some_and(|traces| traces.holds(aged.seq))
            });
            self.stale = 0;
        }
        // Evictions leave the map and the queue sparse, and their buckets
        // count against the budget: give the room back.
        if self.map_capacity > 4 * self.rules.len() + 64 {
            self.rules.shrink_to(2 * self.rules.len());
            self.map_capacity = self.rules.capacity();
        }
        if self.age.capacity() > 4 * self.age.len() + 64 {
            self.age.shrink_to(2 * self.age.len());
        }
    }

    /// Drops the oldest trace still kept; `false` when none is.
    fn evict_oldest(&mut self) -> bool {
        while let Some(aged) = self.age.pop_front() {
            let Some(traces) = self.rules.get_mut(&aged.rule) else {
                self.stale = self.stale.saturating_sub(1);
                continue;
            };
            let freed = if traces.runs.front().is_some_and(|run| run.seq == aged.seq) {
                traces.runs.pop_front().map_or(0, |run| run.counted)
            } else if traces
                .non_fire
                .as_ref()
                .is_some_and(|nf| nf.seq == aged.seq)
            {
                traces.non_fire.take().map_or(0, |nf| nf.heap())
            } else {
                // Replaced or dropped earlier by the rule's own limit.
                self.stale = self.stale.saturating_sub(1);
                continue;
            };
            self.records -= freed;
            if traces.is_empty() {
                let deque = traces.runs.capacity() * size_of::<RunRecord>();
                self.records -= deque;
                self.rules.remove(&aged.rule);
            }
            return true;
        }
        false
    }

    /// Rule `rule` of `payload` (the loaded bundle), its traces for a
    /// reader, the reads of each `when` listed now; times are shown on the
    /// clock that reads `now_ms` at engine time `now`.
    pub(crate) fn view(
        &self,
        payload: &Payload,
        rule: usize,
        now: Time,
        now_ms: i64,
    ) -> Option<RuleTrace> {
        let traces = self.rules.get(&rule_key(rule))?;
        let spec = payload.rules.get(rule)?;
        let view = view::View {
            now,
            now_ms,
            spec,
            tables: (&payload.consts, &payload.state_pairs),
        };
        Some(RuleTrace {
            rule: spec.name.to_string(),
            runs: traces.runs.iter().map(|run| view.run(run)).collect(),
            last_non_fire: traces.non_fire.as_deref().map(|nf| view.non_fire(nf)),
        })
    }

    /// Lists every kept read whole while `payload` is still the bundle
    /// their `when`s belong to: a reload is about to replace it.
    pub(crate) fn settle(&mut self, payload: &Payload) {
        for (&rule, traces) in &mut self.rules {
            let Some(spec) = payload.rules.get(rule as usize) else {
                continue;
            };
            for run in &mut traces.runs {
                let event = run.event.whole();
                run.when.settle(payload, spec.when.as_deref(), event);
                for step in run.steps.iter_mut() {
                    let program = view::step_when(spec, step);
                    step.reads.settle(payload, program, event);
                }
                run.fixed = run.fixed_heap();
                let now = run.heap();
                self.records = self.records + now - run.counted;
                run.counted = now;
            }
            if let Some(nf) = traces.non_fire.as_deref_mut() {
                let before = nf.heap();
                nf.reads
                    .settle(payload, spec.when.as_deref(), nf.event.whole());
                self.records = self.records + nf.heap() - before;
            }
        }
        self.fit();
    }

    /// Re-keys every trace after the rules moved (a new bundle): `moved`
    /// gives a rule's new position, or `None` when the rule is gone, whose
    /// traces go.
    pub(crate) fn remap(&mut self, mut moved: impl FnMut(u32) -> Option<u32>) {
        let old = std::mem::take(&mut self.rules);
        let mut rules = HashMap::with_capacity_and_hasher(old.len(), Default::default());
        for (rule, traces) in old {
            match moved(rule) {
                Some(position) => {
                    rules.insert(position, traces);
                }
                None => {
                    let deque = traces.runs.capacity() * size_of::<RunRecord>();
                    let runs: usize = traces.runs.iter().map(|run| run.counted).sum();
                    let non_fire = traces.non_fire.as_ref().map_or(0, |nf| nf.heap());
                    self.records -= deque + runs + non_fire;
                }
            }
        }
        self.rules = rules;
        self.map_capacity = self.rules.capacity();
        self.age.retain_mut(|aged| match moved(aged.rule) {
            Some(position) => {
                aged.rule = position;
                true
            }
            None => false,
        });
        // Entries of gone rules were live or stale; recount from scratch.
        let rules = &self.rules;
        self.age
            .retain(|aged| rules.get(&aged.rule).is_some_and(|t| t.holds(aged.seq)));
        self.stale = 0;
        self.fit();
    }

    /// The positions of the rules with a trace, in bundle order.
    pub(crate) fn traced_rules(&self) -> Vec<usize> {
        let mut rules: Vec<usize> = self.rules.keys().map(|&key| key as usize).collect();
        rules.sort_unstable();
        rules
    }
}

/// Hashes a rule position with one multiplication: the keys are small
/// integers the engine chose, not input an attacker picks, and SipHash
/// would cost more than the rest of a trace update.
#[derive(Debug, Default)]
pub(crate) struct RuleHasher(u64);

impl Hasher for RuleHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Rule positions fit `u32`: the engine indexes rules by `u32` throughout.
fn rule_key(rule: usize) -> u32 {
    u32::try_from(rule).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle of `count` rules named `r`, none with a `when`.
    fn payload(count: usize) -> Payload {
        let rules = (0..count)
            .map(|_| rulecore::bundle::Rule::new("r", "t.toml", Vec::new(), Vec::new()))
            .collect();
        Payload::new("test", rules, Vec::new(), Vec::new())
    }

    fn start(now: Time) -> Start {
        Start {
            now,
            replayed: false,
            when: KeptReads::NONE,
        }
    }

    fn event(topic: &str) -> Arc<Event> {
        Arc::new(Event {
            topic: topic.into(),
            ..Event::default()
        })
    }

    #[test]
    fn a_rule_keeps_its_last_runs_and_the_budget_evicts_the_oldest() {
        let bundle = payload(100);
        let mut traces = Traces::new(2, 1 << 20);
        let id: Arc<str> = "r#1".into();
        for serial in 1..=3 {
            traces.run_started(0, serial, &id, &event("t"), start(Time::ZERO));
        }
        let view = traces
            .view(&bundle, 0, Time::ZERO, 0)
            .unwrap_or_else(|| panic!("traced"));
        assert_eq!(view.runs.len(), 2);
        // A budget of a few records keeps the newest.
        let mut small = Traces::new(5, 2048);
        for rule in 0..100 {
            small.non_fire(
                rule,
                Time::ZERO,
                &event("t"),
                NonFireReason::WhenFalse,
                None,
                KeptReads::NONE,
            );
            assert!(small.bytes() <= 2048, "{}", small.bytes());
        }
        assert!(small.view(&bundle, 99, Time::ZERO, 0).is_some());
        assert!(small.view(&bundle, 0, Time::ZERO, 0).is_none());
    }

    #[test]
    fn a_large_event_is_cut_on_a_character_boundary() {
        let big = Arc::new(Event {
            topic: "t".into(),
            data: serde_json::json!({ "text": "é".repeat(4000) }).into(),
            ..Event::default()
        });
        match TracedEvent::new(&big) {
            TracedEvent::Cut(json) => assert!(json.len() <= TRACE_EVENT_MAX && json.len() > 4000),
            TracedEvent::Shared { .. } => panic!("not cut"),
        }
        assert_eq!(cut("aé", 2), "a");
    }

    #[test]
    fn a_finished_run_keeps_sharing_its_event_however_full_the_budget() {
        // A budget this small is over half full with one trace: the end
        // of a run still leaves its event shared, not turned into JSON.
        let bundle = payload(1);
        let mut traces = Traces::new(5, 1024);
        let id: Arc<str> = "r#1".into();
        let shared = event("t");
        traces.run_started(0, 1, &id, &shared, start(Time::ZERO));
        assert!(traces.bytes() > 512, "{}", traces.bytes());
        traces.run_ended(0, 1, Time::from_millis(5), EndReason::Done);
        assert_eq!(Arc::strong_count(&shared), 2);
        let view = traces
            .view(&bundle, 0, Time::from_millis(5), 5)
            .unwrap_or_else(|| panic!("traced"));
        assert_eq!(view.runs[0].event.as_ref(), Some(&*shared));
        assert!(view.runs[0].end.is_some());
    }

    #[test]
    fn remap_moves_traces_with_their_rule_and_drops_a_gone_rules() {
        let bundle = payload(8);
        let mut traces = Traces::new(5, 1 << 20);
        let id: Arc<str> = "r#1".into();
        traces.run_started(0, 1, &id, &event("t"), start(Time::ZERO));
        traces.non_fire(
            1,
            Time::ZERO,
            &event("t"),
            NonFireReason::WhenFalse,
            None,
            KeptReads::NONE,
        );
        let full = traces.bytes();
        // Rule 0 moves to 7, rule 1 is gone.
        traces.remap(|rule| (rule == 0).then_some(7));
        assert!(traces.view(&bundle, 7, Time::ZERO, 0).is_some());
        assert!(traces.view(&bundle, 0, Time::ZERO, 0).is_none());
        assert!(traces.view(&bundle, 1, Time::ZERO, 0).is_none());
        assert!(traces.bytes() < full);
        assert_eq!(traces.age.len(), 1);
        traces.remap(|_| None);
        assert_eq!(traces.records, 0);
    }

    /// The records' bytes counted from scratch, as the running count
    /// should have them.
    fn recounted(traces: &Traces) -> usize {
        traces
            .rules
            .values()
            .map(|t| {
                t.runs.capacity() * size_of::<RunRecord>()
                    + t.runs.iter().map(RunRecord::heap).sum::<usize>()
                    + t.non_fire.as_ref().map_or(0, |nf| nf.heap())
            })
            .sum()
    }

    #[test]
    fn updates_that_skip_the_recount_keep_the_running_count_exact() {
        let mut traces = Traces::new(2, 1 << 20);
        let id: Arc<str> = "r#1".into();
        let at = |step| At {
            step,
            pass: 0,
            finally: false,
        };
        for serial in 1..=3 {
            traces.run_started(0, serial, &id, &event("t"), start(Time::ZERO));
            // More steps than a trace keeps: the oldest go.
            for step in 0..(TRACE_STEPS_MAX as u32 + 3) {
                let wait = Wait {
                    start: Time::ZERO,
                    due: Time::ZERO,
                    durable: step % 2 == 0,
                };
                traces.step_waiting(0, serial, at(step), wait);
                let when = if step % 3 == 0 {
                    WhenResult::Error("no such field".into())
                } else {
                    WhenResult::True
                };
                traces.step_when(0, serial, at(step), when, KeptReads::NONE);
                traces.step_submitted(0, serial, at(step), Time::ZERO);
                traces.step_handled(0, serial, at(step), SubmitOutcome::Submitted);
                let failed = if step % 2 == 0 {
                    Ok(())
                } else {
                    Err("refused")
                };
                traces.step_finished(0, serial, at(step), Time::ZERO, failed);
                // A failure replaced by a success, and the reverse.
                traces.step_finished(0, serial, at(step), Time::ZERO, Ok(()));
                traces.step_finished(0, serial, at(step), Time::ZERO, failed);
                assert_eq!(traces.records, recounted(&traces), "step {step}");
            }
            traces.run_cancelled(0, serial, Time::ZERO);
            traces.run_ended(0, serial, Time::ZERO, EndReason::Done);
            assert_eq!(traces.records, recounted(&traces), "run {serial}");
        }
    }

    #[test]
    fn replaced_non_fires_leave_no_growing_age_queue() {
        let mut traces = Traces::new(5, 1 << 20);
        for _ in 0..10_000 {
            traces.non_fire(
                3,
                Time::ZERO,
                &event("t"),
                NonFireReason::WhenFalse,
                None,
                KeptReads::NONE,
            );
        }
        assert!(traces.age.len() < 200, "{}", traces.age.len());
    }
}
