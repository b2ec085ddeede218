//! `ruled-engine`: the rule runtime's pure half, shared by `ruled` (the
//! service) and `rulec simulate`.
//!
//! The crate root is the engine (docs/semantics.md): a pure, synchronous state machine.
//!
//! No I/O, no clock, no tokio: the driver (the Redis service, or `rulec
//! simulate`) feeds it events, action results, state changes, replayed
//! records and the time, and performs the [`Effect`]s it hands back, in
//! order. Timers live in one deadline queue; the driver sleeps until
//! [`Engine::next_deadline`] and then calls [`Engine::handle_timeout`].
//!
//! Every parked run is one small struct in its rule's slot plus the
//! `Arc<Event>` that triggered it. A rule has at most one live run: every
//! concurrency policy ends or refuses the old run before a new one starts.
//!
//! See docs/engine.md for the driver's contract.

mod backlog;
mod bus;
mod decide;
pub mod derive;
mod dry_run;
mod effect;
mod fast_hash;
mod finally;
mod hold;
mod index;
mod input;
mod inspect;
mod key_table;
mod memory;
mod overrides;
mod record;
mod reload;
mod rule_state;
mod run_id;
mod time;
mod timers;
mod trace;
mod values;
mod when_plans;

pub mod pool;
pub mod sim;

pub use bus::{BUS_VALUE_BYTES, CUT_MARKER};
pub use decide::{Verdict, WhenResult};
pub use derive::{BusMode, Expiry, Notified, PollPlan, ReadCause, SourceSet};
pub use dry_run::{DryRun, StepCheck};
pub use effect::{
    DropReason, Effect, EndReason, Job, JobId, Level, LogLine, NonFireReason, Note, NoteFields,
    NoteKind, NoteReason, RecordWrite, ReplayDropReason, StepAction, TriggerOutcome,
};
pub use input::INPUT_SKIPPED_CODE;
pub use inspect::{HoldView, RuleView, RunPhase, RunView, RunningHold, WaitingStep};
pub use memory::{estimated_heap, mebibytes, MEMORY_BUDGET};
pub use overrides::{EnableChange, UnknownRule};
use record::ReplayAction;
pub use record::{PendingRecord, RecordError, Replay, PENDING_HASH};
pub use reload::ReloadSummary;
pub use time::{Now, Time};
pub use trace::{
    NonFireTrace, RuleTrace, RunEndTrace, RunTrace, StepEndTrace, StepTrace, SubmitOutcome,
    SubmitTrace, TimeStyle, WaitTrace, WhenTrace, DEFAULT_TRACES, DEFAULT_TRACE_MEMORY,
};

use index::TopicIndex;
use record::RecordRef;
use rule_state::{Debounce, Fired, RuleState};
use rulecore::bundle::{Concurrency, Payload, Rule, Step};
use rulecore::bytecode::Program;
use rulecore::event::Event;
use rulecore::vm::eval_bool;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use time::nanos_to_millis_ceil;
use timers::{TimerKind, Timers};
use trace::Traces;

/// The replay checks that need no clock, in replay's order
/// (docs/semantics.md#durability-and-replay): the record's rule (`None`:
/// gone), its step, the step's fingerprint (`same_fingerprint`), and
/// whether `ruled` could have written it at all. `rulec diff` asks the same
/// of a deploy.
pub fn refusal_without_clock(
    rule: Option<&Rule>,
    step: u32,
    iter: u32,
    same_fingerprint: impl FnOnce(usize, &Step) -> bool,
) -> Option<ReplayDropReason> {
    if let Some(reason) = step_refusal(rule, step, same_fingerprint) {
        return Some(reason);
    }
    let (Some(rule), Some(spec)) = (rule, rule.and_then(|rule| rule.steps.get(step as usize)))
    else {
        return Some(ReplayDropReason::StepGone);
    };
    // Only a durable wait writes a record, on a pass the rule makes.
    if spec.after_ns == 0 || !spec.durable || iter >= rule.repeat().count {
        return Some(ReplayDropReason::NeverWritten);
    }
    None
}

/// Whether a step still stands in a bundle, the first three replay checks
/// (docs/semantics.md#durability-and-replay): the rule (`None`: gone), a
/// step at that index, and the same fingerprint (`same_fingerprint`). A
/// live reload asks the same of every live run
/// (docs/semantics.md#live-reload).
pub fn step_refusal(
    rule: Option<&Rule>,
    step: u32,
    same_fingerprint: impl FnOnce(usize, &Step) -> bool,
) -> Option<ReplayDropReason> {
    let Some(rule) = rule else {
        return Some(ReplayDropReason::RuleGone);
    };
    let index = step as usize;
    let Some(spec) = rule.steps.get(index) else {
        return Some(ReplayDropReason::StepGone);
    };
    if !same_fingerprint(index, spec) {
        return Some(ReplayDropReason::Fingerprint);
    }
    None
}

/// Default replay window (docs/semantics.md#durability-and-replay): 5 minutes.
pub const DEFAULT_REPLAY_WINDOW_MS: i64 = 5 * 60 * 1000;
/// Default `queue` backlog per rule (docs/semantics.md#handling-one-event).
pub const DEFAULT_QUEUE_BACKLOG: usize = 8;

/// An event whose matched rules are handled a part at a time
/// ([`Engine::event_start`], [`Engine::event_next`]): the rules still to
/// handle, in the index's order.
#[derive(Debug)]
pub struct EventParts {
    now: Now,
    event: Arc<Event>,
    /// The payload the matches index into.
    payload: Arc<Payload>,
    matches: Vec<u32>,
    /// The next match to handle.
    next: usize,
}

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// How far past due a replayed record may be; negative means zero.
    pub replay_window_ms: i64,
    /// Triggers a `queue` rule holds while its run is live.
    pub queue_backlog: usize,
    /// The process epoch in run ids `<rule>#<epoch>-<n>`: it must differ
    /// from every earlier process's (the service uses its start time).
    pub epoch: String,
    /// Note every non-fire decision ([`Note::NonFire`]): for
    /// `rulec simulate --explain` and traces (docs/simulation.md#explain).
    /// Off, the engine notes nothing per non-matching event.
    pub explain: bool,
    /// Runs traced per rule (docs/semantics.md#traces); 0 turns traces off.
    pub traces: usize,
    /// The byte budget of all traces together; the oldest go first.
    pub trace_memory: usize,
    /// `--bus own|follow` (docs/service.md#the-bus).
    pub bus: BusMode,
    /// `--sources all|used` (docs/sources.md#choosing-a-profile).
    pub sources: SourceSet,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            replay_window_ms: DEFAULT_REPLAY_WINDOW_MS,
            queue_backlog: DEFAULT_QUEUE_BACKLOG,
            epoch: "0".to_string(),
            explain: false,
            traces: DEFAULT_TRACES,
            bus: BusMode::default(),
            sources: SourceSet::default(),
            trace_memory: DEFAULT_TRACE_MEMORY,
        }
    }
}

/// The engine-side counters (docs/semantics.md#counters; `version` and
/// `bundle` are the service's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Live (enabled) rules.
    pub rules: u64,
    /// Actions started.
    pub dispatched: u64,
    /// Refused by the pool, or abandoned in its queue at stop.
    pub dropped: u64,
    /// `queue` backlog overflow.
    pub refused: u64,
    /// Actions that returned an error.
    pub failed: u64,
    /// Armed timers: step waits, repeat gaps, debounce windows, holds.
    pub pending: u64,
    /// Rules with a live run (a rule has at most one).
    pub runs_active: u64,
}

/// The log line `code` of a `when` that failed to evaluate: the simulator
/// prints these as `eval-error` lines (docs/simulation.md#output).
pub const EVAL_ERROR_CODE: &str = "when-error";

/// A live run as [`Engine::live_runs`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRun {
    pub rule: Arc<str>,
    pub run: Arc<str>,
    /// The step it waits at, acts on, or (between repeat passes) will start with.
    pub step: u32,
    pub pass: u32,
    /// `step` counts the rule's finally steps (docs/semantics.md#finally).
    pub finally: bool,
}

/// Per-rule statistics (docs/semantics.md#counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleStats {
    /// Runs started, replays included.
    pub runs_started: u64,
    /// Wall-clock Unix ms of the last fire (the cooldown's "fired").
    pub last_fire_ms: Option<i64>,
    /// `when` evaluation errors.
    pub errors: u64,
    /// 0 or 1: a rule has at most one live run.
    pub active_runs: u64,
}

/// Where a live run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Parked on timer `token` before submitting `step`.
    Waiting { token: u64 },
    /// Parked on timer `token` between repeat passes.
    Gap { token: u64 },
    /// `step`'s action was handed to the pool as job `job`.
    Acting { job: u64 },
    /// Due, refused by a full pool: waits in the due backlog, with its
    /// too-late timer `token` (docs/semantics.md#due-steps-the-pool-refused).
    Due { token: u64 },
    /// Cancelled while its step's action was job `job`: the finally steps
    /// start when it finishes (docs/semantics.md#finally).
    Draining { job: u64 },
    /// Transient, while the engine decides (never observable between calls).
    Deciding,
}

#[derive(Debug)]
struct Run {
    /// Engine-local serial, to recognise stale timers and jobs.
    serial: u64,
    id: Arc<str>,
    event: Arc<Event>,
    step: u32,
    pass: u32,
    /// In its finally steps (docs/semantics.md#finally): `step` counts
    /// them.
    finally: bool,
    phase: Phase,
    /// The run (not a job) owns a pending record in the store.
    owns_record: bool,
    /// The owned record's `fire-at` (Unix ms), to write it again after a
    /// reconnect ([`Engine::rewrite_records`]).
    fire_at: i64,
}

/// Who a job handed over belongs to: its rule, its run's serial, and its
/// step (the run may have moved on, or ended, by the time it finishes).
#[derive(Debug, Clone, Copy)]
struct JobOwner {
    rule: u32,
    serial: u64,
    step: u32,
    /// The job owns its step's pending record: refused, it waits in the
    /// due backlog instead of ending its run.
    record: bool,
    pass: u32,
    /// `step` is a finally step (docs/semantics.md#finally).
    finally: bool,
}

impl JobOwner {
    /// The step's trace record.
    fn at(&self) -> trace::At {
        trace::At {
            step: self.step,
            pass: self.pass,
            finally: self.finally,
        }
    }
}

impl Run {
    /// The step's trace record.
    fn at(&self) -> trace::At {
        trace::At {
            step: self.step,
            pass: self.pass,
            finally: self.finally,
        }
    }

    /// The step it is at: one of `spec`'s steps, or in its finally steps
    /// one of those.
    fn step_of<'p>(&self, spec: &'p Rule) -> Option<&'p Step> {
        let list = if self.finally {
            spec.finally()
        } else {
            &spec.steps
        };
        list.get(self.step as usize)
    }
}

/// The engine. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    payload: Arc<Payload>,
    config: EngineConfig,
    rules: Vec<RuleState>,
    on_index: TopicIndex,
    cancel_index: TopicIndex,
    /// Disabled rules' `on` patterns, for [`NonFireReason::RuleDisabled`].
    disabled_index: TopicIndex,
    live_rules: u64,
    /// Per watched pair ([`Engine::watched_pairs`]): its last observed
    /// value; the first `state_pairs.len()` are what `state()` reads.
    state: Vec<String>,
    inputs: input::Inputs,
    /// The bus profile's sources, polls and event ids (docs/sources.md).
    bus: bus::BusState,
    /// Per state pair, the rules with `for` whose `when` reads it.
    hold_watchers: Vec<Vec<u32>>,
    timers: Timers,
    /// Jobs handed over and not yet finished.
    jobs: fast_hash::FastMap<u64, JobOwner>,
    /// Durable steps due while the pool was full (docs/semantics.md#due-steps-the-pool-refused).
    due: backlog::DueBacklog,
    next_job: u64,
    next_run: u64,
    next_serial: u64,
    counters: Counters,
    effects: VecDeque<Effect>,
    stopped: bool,
    replayed: bool,
    scratch: Vec<u32>,
    /// Disabled rules an event matches (explain and traces only).
    scratch_disabled: Vec<u32>,
    /// Where run ids are written before they are shared.
    id_scratch: String,
    traces: Traces,
    /// Each rule's `when` in the VM's faster form.
    when_plans: when_plans::WhenPlans,
}

impl Engine {
    pub fn new(payload: Arc<Payload>, config: EngineConfig) -> Self {
        // Disabled rules are replay-only (docs/rules.md#disabled-rules): not indexed,
        // so they neither match nor cancel.
        let overrides::Indexes {
            on: on_index,
            cancel: cancel_index,
            disabled: disabled_index,
            live_rules,
        } = overrides::indexes(&payload, |position| payload.rules[position].enabled);
        let rules = payload
            .rules
            .iter()
            .map(|rule| RuleState::idle(rule.enabled))
            .collect();
        let inputs = input::Inputs::new(&payload);
        let state = vec![String::new(); inputs.watched().len()];
        let bus = bus::BusState::new(&payload, &config, &inputs);
        let hold_watchers = hold::watchers(&payload);
        let traces = Traces::new(config.traces, config.trace_memory);
        let when_plans = when_plans::WhenPlans::new(&payload);
        Self {
            payload,
            config,
            rules,
            on_index,
            cancel_index,
            disabled_index,
            live_rules,
            state,
            inputs,
            bus,
            hold_watchers,
            timers: Timers::default(),
            jobs: fast_hash::FastMap::default(),
            due: backlog::DueBacklog::default(),
            next_job: 1,
            next_run: 1,
            next_serial: 1,
            counters: Counters::default(),
            effects: VecDeque::new(),
            stopped: false,
            replayed: false,
            scratch: Vec::new(),
            scratch_disabled: Vec::new(),
            id_scratch: String::new(),
            traces,
            when_plans,
        }
    }

    pub fn payload(&self) -> &Arc<Payload> {
        &self.payload
    }

    // ----- inputs -------------------------------------------------------

    /// One event from the bus (docs/semantics.md#handling-one-event).
    pub fn handle_event(&mut self, now: Now, event: Event) {
        if let Some(mut parts) = self.event_start(now, event) {
            while self.event_next(&mut parts, usize::MAX) {}
        }
    }

    /// [`Engine::handle_event`] a part at a time, so the caller can perform
    /// each part's effects (the pending records of the runs it parks)
    /// before the next part decides more: one event matching 10,000 rules
    /// then has its first record in Redis at once, not once all 10,000 are
    /// decided. Cancels the rules the event cancels now; returns the
    /// matches still to handle ([`Engine::event_next`]), `None` when there
    /// are none. Until they are all handled the caller gives the engine no
    /// other input, so the outcome and the order of every effect are
    /// [`Engine::handle_event`]'s.
    pub fn event_start(&mut self, now: Now, event: Event) -> Option<EventParts> {
        if self.stopped {
            return None;
        }
        let mut cancels = std::mem::take(&mut self.scratch);
        self.cancel_index.lookup(&event.topic, &mut cancels);
        // 1. Cancel first, so an event can stop a rule and fire another, and
        // a rule with the topic in both `on` and `cancel-on` is stopped
        // before it starts again.
        for &rule in &cancels {
            self.cancel_rule(rule as usize, now);
        }
        let mut matches = cancels;
        self.on_index.lookup(&event.topic, &mut matches);
        let mut disabled = std::mem::take(&mut self.scratch_disabled);
        disabled.clear();
        if self.config.explain || self.traces.enabled() {
            self.disabled_index.lookup(&event.topic, &mut disabled);
        }
        if matches.is_empty() && disabled.is_empty() {
            self.scratch = matches;
            self.scratch_disabled = disabled;
            return None;
        }
        let event = Arc::new(event);
        for &rule in &disabled {
            self.non_fire(
                rule as usize,
                NonFireReason::RuleDisabled,
                &event,
                now,
                None,
            );
        }
        self.scratch_disabled = disabled;
        Some(EventParts {
            now,
            event,
            payload: Arc::clone(&self.payload),
            matches,
            next: 0,
        })
    }

    /// Handles the next `count` rules `parts` matched (their `when`, hold,
    /// debounce or dispatch, in the index's order); returns whether any
    /// are left.
    pub fn event_next(&mut self, parts: &mut EventParts, count: usize) -> bool {
        let end = parts.next.saturating_add(count).min(parts.matches.len());
        for position in parts.next..end {
            let rule = parts.matches[position] as usize;
            let payload = Arc::clone(&parts.payload);
            self.match_rule(&payload.rules[rule], rule, &parts.event, parts.now);
        }
        parts.next = end;
        if end < parts.matches.len() {
            return true;
        }
        let mut matches = std::mem::take(&mut parts.matches);
        matches.clear();
        self.scratch = matches;
        false
    }

    /// Steps 2 to 5 of docs/semantics.md#handling-one-event for one rule
    /// whose `on` matches: its `when` (an error logged and counted), then
    /// the verdict of [`decide::decide`], applied.
    fn match_rule(&mut self, spec: &Rule, rule: usize, event: &Arc<Event>, now: Now) {
        // 2. Match.
        let when = spec.when.as_ref().map(|program| {
            let result = self.eval(rule, None, program, event);
            match &result {
                Ok(true) => {}
                Ok(false) => self.non_fire(rule, NonFireReason::WhenFalse, event, now, None),
                Err(error) => {
                    let error = Some(error.as_str());
                    self.non_fire(rule, NonFireReason::WhenError, event, now, error);
                }
            }
            WhenResult::of(&result)
        });
        let trigger = decide::Trigger {
            spec,
            state: &self.rules[rule],
            matched: true,
            cancels: false,
            when: when.as_ref(),
            now: now.time,
            queue_backlog: self.config.queue_backlog,
        };
        // Applying a hold needs no time left: the hold keeps its timer.
        let verdict = decide::decide(&trigger, |_| 0);
        self.apply(rule, verdict, Arc::clone(event), now);
    }

    /// Fires every timer due at or before `now`.
    pub fn handle_timeout(&mut self, now: Now) {
        if self.stopped {
            return;
        }
        self.polls_due(now);
        while let Some(fired) = self.timers.pop_due(now.time) {
            if !self.timer_is_live(&fired) {
                // Cancelled lazily: the owner moved on.
                continue;
            }
            self.timers.disarm();
            let rule = fired.rule as usize;
            match fired.kind {
                TimerKind::Debounce => {
                    if let Some(held) = self.rules[rule].take_debounce() {
                        self.dispatch(rule, held.event, now);
                    }
                }
                TimerKind::Hold => self.hold_due(rule, now),
                TimerKind::Run => {
                    let Some(run) = self.rules[rule].run.as_mut() else {
                        continue;
                    };
                    match run.phase {
                        Phase::Waiting { .. } => self.submit_step(rule, now),
                        Phase::Due { .. } => self.due_too_late(rule, now),
                        Phase::Gap { .. } => {
                            run.pass += 1;
                            run.step = 0;
                            run.phase = Phase::Deciding;
                            self.enter_step(rule, now);
                        }
                        // A live run timer means a waiting or gap phase.
                        Phase::Acting { .. } | Phase::Draining { .. } | Phase::Deciding => {}
                    }
                }
            }
        }
    }

    /// The earliest armed timer, if any (stale, cancelled entries are
    /// discarded on the way, so a driver never wakes for nothing).
    pub fn next_deadline(&mut self) -> Option<Time> {
        let polls = self.poll_deadline().filter(|_| !self.stopped);
        while let Some(entry) = self.timers.peek() {
            if self.timer_is_live(&entry) {
                return Some(polls.map_or(entry.deadline, |poll| poll.min(entry.deadline)));
            }
            self.timers.pop();
        }
        polls
    }

    /// A job's action started on a worker (the driver has removed or is
    /// removing its `drop_record`). Valid after [`Engine::stop`] too.
    /// Only counted: the run moves on when the action finishes.
    pub fn action_started(&mut self, job: JobId) {
        self.counters.dispatched += 1;
        if let Some(owner) = self.jobs.get(&job.0) {
            let (rule, at) = (owner.rule as usize, owner.at());
            let started = SubmitOutcome::Started;
            self.traces.step_handled(rule, owner.serial, at, started);
        }
    }

    /// A job's action finished. Valid after [`Engine::stop`] (counted only).
    pub fn action_finished(&mut self, now: Now, job: JobId, result: Result<(), String>) {
        let owner = self.jobs.remove(&job.0);
        if let Err(message) = &result {
            self.counters.failed += 1;
            let (rule, step) = match owner {
                Some(owner) => (self.rule_name(owner.rule as usize), Some(owner.step)),
                None => (None, None),
            };
            self.effects.push_back(Effect::Log(LogLine {
                level: Level::Warn,
                rule,
                step,
                finally: owner.is_some_and(|owner| owner.finally),
                run: None,
                code: None,
                message: format!("action failed: {message}"),
            }));
        }
        let Some(owner) = owner else {
            return;
        };
        let (rule, serial) = (owner.rule as usize, owner.serial);
        if !self.stopped && self.is_draining(rule, serial, job) {
            // Whatever its outcome: the finally steps follow it.
            self.finally_after_drain(rule, now);
            return;
        }
        if self.stopped || !self.is_acting(rule, serial, job) {
            // The run was cancelled or restarted after handing the job over.
            return;
        }
        let outcome = result.as_ref().map(|_| ()).map_err(String::as_str);
        self.traces
            .step_finished(rule, serial, owner.at(), now.time, outcome);
        match result {
            Ok(()) => self.advance(rule, now),
            Err(_) => self.end_run(rule, EndReason::Failed, now),
        }
    }

    /// The pool refused the job (queue full or stopping): the run ends and
    /// counts `dropped`; the job's record is kept, since the step provably
    /// did not run (docs/semantics.md#walking-a-sequence, docs/semantics.md#durability-and-replay).
    /// A job that owns a record waits in the due backlog instead, until
    /// [`Engine::pool_has_room`] (docs/semantics.md#due-steps-the-pool-refused).
    pub fn action_refused(&mut self, now: Now, job: JobId) {
        let Some(owner) = self.jobs.remove(&job.0) else {
            self.counters.dropped += 1;
            return;
        };
        let rule = owner.rule as usize;
        let refused = SubmitOutcome::Refused;
        self.traces
            .step_handled(rule, owner.serial, owner.at(), refused);
        if !self.stopped && self.is_draining(rule, owner.serial, job) {
            // The action never ran; its cleanup still does.
            self.counters.dropped += 1;
            self.finally_after_drain(rule, now);
            return;
        }
        let live = !self.stopped && self.is_acting(rule, owner.serial, job);
        if live && owner.record {
            // A durable step keeps its record and waits for room
            // (docs/semantics.md#due-steps-the-pool-refused): not dropped.
            self.due_wait(rule, now);
            return;
        }
        self.counters.dropped += 1;
        // No log line here: the driver knows the cause (queue full or
        // stopping) and reports the refusal with it; the run-end note and
        // the `dropped` counter carry the rest.
        if live {
            self.end_run(rule, EndReason::Refused, now);
        }
    }

    /// The pool abandoned a queued job at stop: counts `dropped`; its record
    /// is kept (docs/semantics.md#durability-and-replay).
    pub fn action_abandoned(&mut self, job: JobId) {
        self.counters.dropped += 1;
        self.jobs.remove(&job.0);
    }

    /// A watched pair's value as read at start (seeding), or re-read
    /// without a change notification; `index` into
    /// [`Engine::watched_pairs`]. It makes no input event
    /// (docs/semantics.md#inputs). Out-of-range indices are ignored.
    pub fn state_changed(&mut self, index: usize, value: String) {
        if let Some(slot) = self.state.get_mut(index) {
            *slot = value;
            self.bus.present[index] = true;
            self.hold_state_changed(index);
        }
    }

    /// A watched pair's value after a change notification (a live
    /// change): it is stored like [`Engine::state_changed`], then every
    /// live hash input over the pair whose value differs from the last
    /// observed one dispatches its event (docs/semantics.md#inputs).
    pub fn field_changed(&mut self, now: Now, index: usize, value: String) {
        let Some(slot) = self.state.get_mut(index) else {
            return;
        };
        let old = std::mem::replace(slot, value);
        self.hold_state_changed(index);
        let events = self.inputs.hash_events(index, &old, &self.state[index]);
        for event in events {
            self.handle_event(now, event);
        }
    }

    /// A message on a raw channel that a live rule's input reads
    /// (docs/semantics.md#inputs): each input on the channel makes its
    /// event, or skips the message with a log line.
    pub fn channel_message(&mut self, now: Now, channel: &str, payload: &[u8]) {
        let mut logs = Vec::new();
        let events = self.inputs.channel_events(channel, payload, &mut logs);
        self.effects.extend(logs.into_iter().map(Effect::Log));
        for event in events {
            self.handle_event(now, event);
        }
        self.channel_derived(now, channel, payload);
    }

    /// Every pair the service seeds and keeps current: the bundle's
    /// `state_pairs` (same indices), then the inputs' hash fields not
    /// among them.
    pub fn watched_pairs(&self) -> &[rulecore::bundle::StatePair] {
        self.inputs.watched()
    }

    /// The raw channels the live rules' inputs read, sorted: subscribed
    /// to exactly (docs/semantics.md#inputs).
    pub fn input_channels(&self) -> Vec<String> {
        let mut channels: Vec<String> = self
            .inputs
            .channels()
            .chain(self.source_channels())
            .map(str::to_string)
            .collect();
        channels.sort_unstable();
        channels.dedup();
        channels
    }

    /// The index of `(hash, field)` in [`Engine::watched_pairs`].
    pub fn state_index(&self, hash: &str, field: &str) -> Option<usize> {
        self.inputs.index(hash, field)
    }

    /// Sets a watched pair by name, as seeding does; returns `false` if
    /// the bundle does not watch it.
    pub fn set_state(&mut self, hash: &str, field: &str, value: String) -> bool {
        match self.state_index(hash, field) {
            Some(index) => {
                self.state_changed(index, value);
                true
            }
            None => false,
        }
    }

    /// [`Engine::field_changed`] by name: a live change of a watched
    /// pair; `false` if the bundle does not watch it.
    pub fn set_field(&mut self, now: Now, hash: &str, field: &str, value: String) -> bool {
        match self.state_index(hash, field) {
            Some(index) => {
                self.field_changed(now, index, value);
                true
            }
            None => false,
        }
    }

    /// Replay from raw hash fields (`field`, stored value), each decoded by
    /// [`PendingRecord::decode_field`], the one decoding of a stored record
    /// (docs/semantics.md#durability-and-replay); the service decodes as it
    /// reads and calls [`Engine::replay`]. A value that is not a
    /// record of its own run is logged once, with its
    /// [`RecordError::code`], and removed ([`DropReason::Undecodable`]);
    /// the rest go to [`Engine::replay`].
    pub fn replay_raw(&mut self, now: Now, fields: Vec<(String, Vec<u8>)>) {
        if self.stopped || self.replayed {
            // Leave every field alone; `replay` says why.
            return self.replay(now, Vec::new());
        }
        let mut records = Vec::with_capacity(fields.len());
        for (field, value) in fields {
            match PendingRecord::decode_field(&field, &value) {
                Ok(record) => records.push(record),
                Err(error) => {
                    let reason = match &error {
                        RecordError::Foreign { .. } => DropReason::Foreign,
                        _ => DropReason::Undecodable,
                    };
                    // The one report of the removal; the `DropRecord`
                    // below is not logged again.
                    self.effects.push_back(Effect::Log(LogLine {
                        level: Level::Warn,
                        rule: None,
                        step: None,
                        finally: false,
                        run: Some(field.as_str().into()),
                        code: Some(error.code()),
                        message: format!("removing pending record {field:?}: {error}"),
                    }));
                    self.effects.push_back(Effect::DropRecord {
                        id: field.into(),
                        rule: None,
                        reason,
                    });
                }
            }
        }
        self.replay(now, records);
    }

    /// Replay (docs/semantics.md#durability-and-replay): call once at start, after loading and before
    /// the first event. Records are taken earliest `fire-at` first, ties by
    /// id; invalid ones are removed with a reason; each rule's concurrency
    /// policy picks among the rest; the survivors resume under their own ids.
    pub fn replay(&mut self, now: Now, records: Vec<PendingRecord>) {
        if let Some(mut replay) = self.replay_start(now, records) {
            while self.replay_next(&mut replay, usize::MAX) {}
        }
    }

    /// [`Engine::replay`] a part at a time, so the caller can take each
    /// part's effects and notes ([`Engine::poll_effect`]) before the next
    /// part makes more: with 10,000 records, the notes of every resumed
    /// run queued at once are over a megabyte. Decides everything at once
    /// (validity, which record each rule's policy keeps) in the same
    /// (fire-at, id) order, so the outcome and the order of every note and
    /// effect are [`Engine::replay`]'s; then [`Engine::replay_next`] acts
    /// on the records in that order. `None` when there is nothing to do
    /// (stopped, or replay already called: logged, as [`Engine::replay`]).
    pub fn replay_start(&mut self, now: Now, mut records: Vec<PendingRecord>) -> Option<Replay> {
        if self.stopped {
            return None;
        }
        if std::mem::replace(&mut self.replayed, true) {
            // Replay is once, at start (docs/semantics.md#durability-and-replay): records seen later
            // belong to this process's own runs.
            self.log(
                Level::Error,
                None,
                None,
                "replay called twice; the second call is ignored".to_string(),
            );
            return None;
        }
        // Ids are unique (hash fields), so an unstable sort gives the same
        // order without a scratch buffer the size of the records.
        records.sort_unstable_by(|a, b| a.fire_at.cmp(&b.fire_at).then_with(|| a.id.cmp(&b.id)));
        let window = self.config.replay_window_ms.max(0);
        let payload = Arc::clone(&self.payload);
        // Only the rules the records name: with 100,000 rules and a few
        // records, a map of every rule would be megabytes for nothing.
        let mut by_name: HashMap<&str, Option<usize>> = records
            .iter()
            .map(|record| (record.rule.as_str(), None))
            .collect();
        for (index, rule) in payload.rules.iter().enumerate() {
            if let Some(slot @ None) = by_name.get_mut(&*rule.name) {
                *slot = Some(index);
            }
        }
        // Two passes over the same (fire-at, id) order: the first only
        // decides (validity, then which record each rule's policy keeps),
        // the second acts, so every note and effect comes out in fire-at
        // order (docs/semantics.md#durability-and-replay) whatever the outcome of each record.
        let verdicts: Vec<record::Verdict> = records
            .iter()
            .map(|record| {
                let rule = by_name.get(record.rule.as_str()).copied().flatten();
                (
                    rule,
                    rule.map_or(Some(ReplayDropReason::RuleGone), |rule| {
                        self.replay_refusal(rule, record, now.wall_ms, window)
                    }),
                )
            })
            .collect();
        let mut winner: HashMap<usize, usize> = HashMap::new();
        for (position, verdict) in verdicts.iter().enumerate() {
            if let (Some(rule), None) = *verdict {
                match payload.rules[rule].concurrency {
                    // `restart` keeps the later record.
                    Concurrency::Restart => {
                        winner.insert(rule, position);
                    }
                    // `drop` and `queue` keep the first.
                    Concurrency::Drop | Concurrency::Queue => {
                        winner.entry(rule).or_insert(position);
                    }
                }
            }
        }
        let mut actions: Vec<ReplayAction> = verdicts
            .into_iter()
            .enumerate()
            .map(|(position, verdict)| match verdict {
                (Some(rule), None) if winner.get(&rule) == Some(&position) => {
                    ReplayAction::Resume(rule)
                }
                (Some(_), None) => ReplayAction::Remove(ReplayDropReason::Concurrency),
                (_, reason) => ReplayAction::Remove(reason.unwrap_or(ReplayDropReason::RuleGone)),
            })
            .collect();
        // Taken from the end: each part's records are freed as it is
        // acted on (see `replay_next`).
        records.reverse();
        actions.reverse();
        Some(Replay {
            now,
            records,
            actions,
        })
    }

    /// What replay would refuse of `records` before looking at a clock
    /// ([`refusal_without_clock`]: rule, step, fingerprint, never written),
    /// one answer per record in their order. The service's pending read
    /// removes such records as it reads them, so junk never counts against
    /// the replay budget (docs/service.md#what-ruled-reads-and-its-bounds).
    pub fn refusals_without_clock(
        &self,
        records: &[PendingRecord],
    ) -> Vec<Option<ReplayDropReason>> {
        let mut by_name: HashMap<&str, Option<usize>> = records
            .iter()
            .map(|record| (record.rule.as_str(), None))
            .collect();
        for (index, rule) in self.payload.rules.iter().enumerate() {
            if let Some(slot @ None) = by_name.get_mut(&*rule.name) {
                *slot = Some(index);
            }
        }
        records
            .iter()
            .map(|record| {
                let rule = by_name
                    .get(record.rule.as_str())
                    .copied()
                    .flatten()
                    .and_then(|index| self.payload.rules.get(index));
                let same = |_: usize, step: &Step| {
                    record::same_fingerprint(&record.fingerprint, &step.fingerprint)
                };
                refusal_without_clock(rule, record.step, record.iter, same)
            })
            .collect()
    }

    /// Acts on the next `count` records of `replay` (resume or remove, in
    /// the order [`Engine::replay_start`] decided); returns whether any
    /// are left.
    pub fn replay_next(&mut self, replay: &mut Replay, count: usize) -> bool {
        let now = replay.now;
        for _ in 0..count {
            let (Some(record), Some(action)) = (replay.records.pop(), replay.actions.pop()) else {
                return false;
            };
            match action {
                ReplayAction::Resume(rule) => self.resume(rule, record, now),
                ReplayAction::Remove(reason) => self.replay_drop(&record, reason),
            }
        }
        // The acted-on part's room goes back (in place, no copy) while the
        // runs it made take theirs: the records and the runs they become
        // are never all held twice.
        replay.records.shrink_to_fit();
        replay.actions.shrink_to_fit();
        !replay.records.is_empty()
    }

    /// Why replay must remove `record` of `rule`, checked in the order of
    /// docs/semantics.md#durability-and-replay; `None` when it may resume.
    fn replay_refusal(
        &self,
        rule: usize,
        record: &PendingRecord,
        wall_ms: i64,
        window: i64,
    ) -> Option<ReplayDropReason> {
        let spec = &self.payload.rules[rule];
        let same = |_: usize, step: &Step| {
            record::same_fingerprint(&record.fingerprint, &step.fingerprint)
        };
        if let Some(reason) = refusal_without_clock(Some(spec), record.step, record.iter, same) {
            return Some(reason);
        }
        let Some(step) = spec.steps.get(record.step as usize) else {
            return Some(ReplayDropReason::StepGone);
        };
        if wall_ms.saturating_sub(record.fire_at) > window {
            return Some(ReplayDropReason::TooLate);
        }
        if record.fire_at.saturating_sub(wall_ms) > nanos_to_millis_ceil(step.after_ns) {
            // The clock went backwards.
            return Some(ReplayDropReason::TooEarly);
        }
        None
    }

    /// Stop (docs/service.md#start-and-stop): drop timers, backlogs and debounce windows;
    /// keep the records of waiting runs ([`Note::RecordKept`]). Later
    /// events and timeouts are ignored; action reports are still counted.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.due.clear();
        for rule in 0..self.rules.len() {
            let state = &mut self.rules[rule];
            state.drop_waiting();
            if let Some(run) = state.run.take() {
                let name = self.name(rule);
                self.traces.run_stopped(rule, run.serial);
                if run.owns_record {
                    self.note(Note::RecordKept {
                        run: Arc::clone(&run.id),
                        rule: Arc::clone(&name),
                    });
                }
                self.note(Note::RunEnd {
                    run: run.id,
                    rule: name,
                    reason: EndReason::Stopped,
                });
            }
        }
        self.timers.clear();
    }

    /// Queues the pending record of every run that owns one again, as it
    /// was first written (same `fire-at`, same event). The service calls it
    /// after a lost Redis connection: the server may have restarted empty,
    /// and a run whose record is gone would not survive a restart of ruled
    /// (docs/semantics.md#durability-and-replay). Rewriting a record that is still there changes
    /// nothing. Returns how many were queued.
    pub fn rewrite_records(&mut self) -> usize {
        if self.stopped {
            return 0;
        }
        let payload = Arc::clone(&self.payload);
        let mut queued = 0;
        for (rule, spec) in payload.rules.iter().enumerate() {
            let fire_at = match self.rules.get(rule).and_then(|state| state.run.as_ref()) {
                Some(run) if run.owns_record => run.fire_at,
                _ => continue,
            };
            self.put_record(rule, &spec.source, fire_at, RecordWrite::Again);
            queued += 1;
        }
        queued
    }

    /// The wall clock jumped by `delta_ms` while runs wait (the service
    /// compares the wall clock with the monotonic one; the simulator's
    /// `[[clock]]`). Timers run on the monotonic clock and do not move, but
    /// each owned record's `fire-at` is shifted by the jump and written
    /// again, so it still names the instant the step falls due on the new
    /// clock: replay after a restart would otherwise judge it too late or
    /// too early (docs/semantics.md#durability-and-replay). Returns how many records were queued.
    pub fn clock_jumped(&mut self, delta_ms: i64) -> usize {
        if delta_ms == 0 {
            return 0;
        }
        self.due.shift(delta_ms);
        for state in &mut self.rules {
            if let Some(run) = state.run.as_mut().filter(|run| run.owns_record) {
                run.fire_at = run.fire_at.saturating_add(delta_ms);
            }
        }
        self.rewrite_records()
    }

    // ----- outputs ------------------------------------------------------

    /// The next effect to perform, in order.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// All effects queued so far, in order.
    pub fn drain_effects(&mut self) -> std::collections::vec_deque::Drain<'_, Effect> {
        self.effects.drain(..)
    }

    pub fn counters(&self) -> Counters {
        Counters {
            rules: self.live_rules,
            pending: self.timers.armed() as u64,
            runs_active: self.rules.iter().filter(|r| r.run.is_some()).count() as u64,
            ..self.counters
        }
    }

    /// Every live run, in bundle order: waiting for a step's `after` or a
    /// repeat gap, acting, or queued in the pool (for the simulator's `end`
    /// line, docs/simulation.md#output).
    pub fn live_runs(&self) -> impl Iterator<Item = LiveRun> + '_ {
        self.rules.iter().enumerate().filter_map(|(rule, state)| {
            state.run.as_ref().map(|run| LiveRun {
                rule: self.name_of(rule),
                run: Arc::clone(&run.id),
                step: run.step,
                pass: run.pass,
                finally: run.finally,
            })
        })
    }

    /// The rules holding an event in a debounce window, in bundle order.
    pub fn held(&self) -> impl Iterator<Item = &str> + '_ {
        self.rules
            .iter()
            .zip(self.payload.rules.iter())
            .filter(|(state, _)| state.debounce().is_some())
            .map(|(_, rule)| &*rule.name)
    }

    /// Per-rule stats, by bundle position.
    pub fn rule_stats(&self, rule: usize) -> Option<RuleStats> {
        self.rules.get(rule).map(RuleState::stats)
    }

    /// The position of a rule in the bundle by name.
    pub fn rule_index(&self, name: &str) -> Option<usize> {
        self.payload
            .rules
            .iter()
            .position(|rule| &*rule.name == name)
    }

    /// Rule `name`'s traces (docs/semantics.md#traces): its last runs and
    /// last non-fire, `None` when it has none (or no such rule). Times are
    /// shown on `now.wall_ms`'s clock: an engine time `t` reads as
    /// `now.wall_ms - (now.time - t)` in milliseconds.
    pub fn trace(&self, name: &str, now: Now) -> Option<RuleTrace> {
        let rule = self.rule_index(name)?;
        self.traces.view(rule, name, now.time, now.wall_ms)
    }

    /// Every rule's traces, in bundle order; see [`Engine::trace`].
    pub fn traces(&self, now: Now) -> Vec<RuleTrace> {
        self.traces
            .traced_rules()
            .into_iter()
            .filter_map(|rule| {
                let name = &self.payload.rules.get(rule)?.name;
                self.traces.view(rule, name, now.time, now.wall_ms)
            })
            .collect()
    }

    /// The bytes all traces hold now, as counted against
    /// [`EngineConfig::trace_memory`].
    pub fn trace_memory(&self) -> usize {
        self.traces.bytes()
    }

    // ----- internals ----------------------------------------------------

    fn note(&mut self, note: Note) {
        self.effects.push_back(Effect::Note(note));
    }

    /// Rule `rule`'s name as its notes and effects share it, made once
    /// (see [`RuleState::name`]).
    fn name(&mut self, rule: usize) -> Arc<str> {
        let payload = &self.payload;
        let state = &mut self.rules[rule];
        Arc::clone(
            state
                .name
                .get_or_insert_with(|| (&*payload.rules[rule].name).into()),
        )
    }

    /// [`Engine::name`] for a caller that cannot keep it: a view.
    fn name_of(&self, rule: usize) -> Arc<str> {
        match self.rules.get(rule).and_then(|state| state.name.as_ref()) {
            Some(name) => Arc::clone(name),
            None => self
                .payload
                .rules
                .get(rule)
                .map_or_else(|| "".into(), |spec| (&*spec.name).into()),
        }
    }

    /// [`Engine::name`] of a rule that may be out of range.
    fn rule_name(&mut self, rule: usize) -> Option<Arc<str>> {
        (rule < self.rules.len()).then(|| self.name(rule))
    }

    /// A trigger that did not start a run: its note, and the non-fire.
    fn trigger_note(&mut self, rule: usize, outcome: TriggerOutcome, event: &Arc<Event>, now: Now) {
        let name = self.name(rule);
        self.note(Note::Trigger {
            rule: name,
            outcome,
        });
        self.non_fire(rule, outcome.into(), event, now, None);
    }

    /// A non-fire decision (docs/semantics.md#traces): the rule's trace
    /// keeps it, and it is noted when asked to explain. `error`: a
    /// `when-error`'s text.
    pub(crate) fn non_fire(
        &mut self,
        rule: usize,
        reason: NonFireReason,
        event: &Arc<Event>,
        now: Now,
        error: Option<&str>,
    ) {
        self.traces.non_fire(rule, now.time, event, reason, error);
        if self.config.explain {
            let rule = self.name(rule);
            self.note(Note::NonFire { rule, reason });
        }
    }

    /// A run was installed in `rule`'s slot: its trace starts.
    fn trace_run_started(&mut self, rule: usize, now: Now, replayed: bool) {
        if let Some(run) = &self.rules[rule].run {
            let (serial, id, event) = (run.serial, &run.id, &run.event);
            self.traces
                .run_started(rule, serial, id, event, now.time, replayed);
        }
    }

    fn log(&mut self, level: Level, rule: Option<Arc<str>>, step: Option<u32>, message: String) {
        self.effects.push_back(Effect::Log(LogLine {
            level,
            rule,
            step,
            finally: false,
            run: None,
            code: None,
            message,
        }));
    }

    /// Evaluates a `when`; an evaluation error (`Err`, its text) counts as not met, is
    /// logged with the rule (and step: its index, and whether it is a
    /// finally step) and counted in the rule's errors (docs/when-language.md).
    fn eval(
        &mut self,
        rule: usize,
        step: Option<(u32, bool)>,
        program: &Program,
        event: &Event,
    ) -> Result<bool, String> {
        // A rule's own `when` (`step` is `None`: `program` is that `when`)
        // runs from its plan, made at load (docs/engine.md#the-when-plan).
        let plan = match step {
            None => self.when_plans.get(rule),
            Some(_) => None,
        };
        let result = match plan {
            Some(plan) => plan.eval_bool(&self.payload.consts, event, &self.state),
            None => eval_bool(program, &self.payload.consts, event, &self.state),
        };
        match result {
            Ok(met) => Ok(met),
            Err(error) => {
                let error = error.to_string();
                self.rules[rule].count_error();
                let name = self.name(rule);
                self.effects.push_back(Effect::Log(LogLine {
                    level: Level::Warn,
                    rule: Some(name),
                    step: step.map(|(index, _)| index),
                    finally: step.is_some_and(|(_, finally)| finally),
                    run: None,
                    code: Some(EVAL_ERROR_CODE),
                    message: format!("`when` failed to evaluate, counted as not met: {error}"),
                }));
                Err(error)
            }
        }
    }

    fn timer_is_live(&self, entry: &timers::Entry) -> bool {
        let state = &self.rules[entry.rule as usize];
        match entry.kind {
            TimerKind::Debounce => state.debounce().map(|d| d.token) == Some(entry.token),
            TimerKind::Hold => state.hold().and_then(hold::Hold::token) == Some(entry.token),
            TimerKind::Run => state.run.as_ref().is_some_and(|run| match run.phase {
                Phase::Waiting { token } | Phase::Gap { token } | Phase::Due { token } => {
                    token == entry.token
                }
                Phase::Acting { .. } | Phase::Draining { .. } | Phase::Deciding => false,
            }),
        }
    }

    fn arm(&mut self, deadline: Time, rule: usize, kind: TimerKind) -> u64 {
        if self.timers.wants_compaction() {
            let mut timers = std::mem::take(&mut self.timers);
            timers.retain(|entry| self.timer_is_live(entry));
            self.timers = timers;
        }
        self.timers.arm(deadline, rule as u32, kind)
    }

    fn is_acting(&self, rule: usize, serial: u64, job: JobId) -> bool {
        self.rules[rule]
            .run
            .as_ref()
            .is_some_and(|run| run.serial == serial && run.phase == Phase::Acting { job: job.0 })
    }

    fn cancel_rule(&mut self, rule: usize, now: Now) {
        // A cancel ends a hold and re-arms the rule (docs/semantics.md#hold).
        self.hold_cancel(rule);
        // The backlog goes first so ending the run does not start a held trigger.
        self.rules[rule].clear_backlog();
        self.cancel_run(rule, now);
    }

    /// Steps 4 and 5 of docs/semantics.md#handling-one-event for a trigger
    /// past its `when`, hold and debounce: cooldown, then concurrency.
    fn dispatch(&mut self, rule: usize, event: Arc<Event>, now: Now) {
        let payload = Arc::clone(&self.payload);
        let trigger = decide::Trigger {
            spec: &payload.rules[rule],
            state: &self.rules[rule],
            matched: true,
            cancels: false,
            when: None,
            now: now.time,
            queue_backlog: self.config.queue_backlog,
        };
        let verdict = decide::policy(&trigger);
        self.apply(rule, verdict, event, now);
    }

    /// Does what [`decide::decide`] said of a trigger of `rule`.
    fn apply(&mut self, rule: usize, verdict: Verdict, event: Arc<Event>, now: Now) {
        let fired = Fired {
            time: now.time,
            wall_ms: now.wall_ms,
        };
        match verdict {
            // The index hands over enabled, matching rules only.
            Verdict::Disabled | Verdict::NotMatched => {}
            Verdict::WhenFalse | Verdict::WhenError => {
                // `for`: a false `when` matters too (docs/semantics.md#hold).
                if self.payload.rules[rule].hold_ns() > 0 {
                    self.hold_match(rule, event, false, now);
                }
            }
            Verdict::Hold { .. } | Verdict::Holding { .. } | Verdict::HoldFired => {
                self.hold_match(rule, event, true, now);
            }
            Verdict::Debounce { .. } => self.debounce(rule, event, now),
            Verdict::Cooldown { .. } => {
                self.trigger_note(rule, TriggerOutcome::Suppressed, &event, now);
            }
            Verdict::Start => {
                self.rules[rule].set_last_fire(fired);
                self.start_run(rule, event, now);
            }
            Verdict::Restart { .. } => {
                self.rules[rule].set_last_fire(fired);
                self.end_run(rule, EndReason::Restarted, now);
                self.start_run(rule, event, now);
            }
            Verdict::Drop { .. } => {
                self.rules[rule].set_last_fire(fired);
                self.trigger_note(rule, TriggerOutcome::Dropped, &event, now);
            }
            Verdict::Queue { .. } => {
                self.rules[rule].set_last_fire(fired);
                self.rules[rule].push_backlog(Arc::clone(&event));
                self.trigger_note(rule, TriggerOutcome::Queued, &event, now);
            }
            Verdict::Refused { .. } => {
                self.rules[rule].set_last_fire(fired);
                self.refuse(rule, &event, now);
            }
        }
    }

    /// 3. Debounce: hold the latest event, restart the quiet window.
    fn debounce(&mut self, rule: usize, event: Arc<Event>, now: Now) {
        let reason = if self.rules[rule].take_debounce().is_some() {
            self.timers.disarm();
            NonFireReason::DebounceReset
        } else {
            NonFireReason::DebounceHeld
        };
        self.non_fire(rule, reason, &event, now, None);
        let window = self.payload.rules[rule].debounce_ns();
        let token = self.arm(now.time.plus_nanos(window), rule, TimerKind::Debounce);
        self.rules[rule].set_debounce(Debounce { event, token });
    }

    /// `queue`: the backlog is full, the trigger is refused and counted.
    fn refuse(&mut self, rule: usize, event: &Arc<Event>, now: Now) {
        self.counters.refused += 1;
        self.trigger_note(rule, TriggerOutcome::Refused, event, now);
        let cap = self.config.queue_backlog;
        let name = self.name(rule);
        self.log(
            Level::Warn,
            Some(name),
            None,
            format!("trigger refused: the queue backlog is full ({cap})"),
        );
    }

    fn start_run(&mut self, rule: usize, event: Arc<Event>, now: Now) {
        let n = self.next_run;
        self.next_run += 1;
        let name = self.name(rule);
        let id = run_id::run_id(&name, &self.config.epoch, n, &mut self.id_scratch);
        self.install_run(rule, id, event, 0, 0);
        if let Some(run) = &self.rules[rule].run {
            let run = Arc::clone(&run.id);
            self.note(Note::RunStart { run, rule: name });
        }
        self.trace_run_started(rule, now, false);
        self.enter_step(rule, now);
    }

    fn install_run(&mut self, rule: usize, id: Arc<str>, event: Arc<Event>, step: u32, pass: u32) {
        let serial = self.next_serial;
        self.next_serial += 1;
        let state = &mut self.rules[rule];
        state.runs_started += 1;
        state.run = Some(Box::new(Run {
            serial,
            id,
            event,
            step,
            pass,
            finally: false,
            phase: Phase::Deciding,
            owns_record: false,
            fire_at: 0,
        }));
    }

    /// The run reached its current step: park on its `after` (writing the
    /// record first when durable), or submit it now.
    fn enter_step(&mut self, rule: usize, now: Now) {
        let payload = Arc::clone(&self.payload);
        let spec: &Rule = &payload.rules[rule];
        let Some(run) = self.rules[rule].run.as_ref() else {
            return;
        };
        let Some(step) = run.step_of(spec) else {
            // Only a rule without steps gets here; the compiler forbids it.
            let reason = finally::walked_past(run);
            self.end_run(rule, reason, now);
            return;
        };
        if step.after_ns == 0 {
            self.submit_step(rule, now);
            return;
        }
        // A finally step is never durable (docs/semantics.md#finally).
        let durable = step.durable && !run.finally;
        if durable {
            // The record is written before the timer is armed (docs/semantics.md#durability-and-replay):
            // the effects are performed in order, so a crash between
            // the two leaves a record and no timer, which replay finishes.
            let fire_at = now
                .wall_ms
                .saturating_add(nanos_to_millis_ceil(step.after_ns));
            self.put_record(rule, &spec.source, fire_at, RecordWrite::First);
        }
        let due = now.time.plus_nanos(step.after_ns);
        let token = self.arm(due, rule, TimerKind::Run);
        if let Some(run) = self.rules[rule].run.as_mut() {
            run.phase = Phase::Waiting { token };
            let (serial, at) = (run.serial, run.at());
            let wait = trace::Wait {
                start: now.time,
                due,
                durable,
            };
            self.traces.step_waiting(rule, serial, at, wait);
        }
    }

    /// Queues the live run's pending record for its current step; the run
    /// owns it from here. A record that does not serialise is logged, and
    /// the step runs without restart protection.
    fn put_record(&mut self, rule: usize, source: &str, fire_at: i64, write: RecordWrite) {
        let name = self.name(rule);
        let state = &self.rules[rule];
        let Some(run) = state.run.as_ref() else {
            return;
        };
        // Hex only here, at the edge: the engine keeps the 16 bytes.
        let Some(step) = self.payload.rules[rule].steps.get(run.step as usize) else {
            return;
        };
        let fingerprint = step.fingerprint.to_string();
        let record = RecordRef {
            id: &run.id,
            rule: &name,
            source,
            step: run.step,
            iter: run.pass,
            fire_at,
            fingerprint: &fingerprint,
            event: &run.event,
        };
        match serde_json::to_string(&record) {
            Ok(json) => {
                let effect = Effect::PutRecord {
                    id: Arc::clone(&run.id),
                    rule: name,
                    step: run.step,
                    pass: run.pass,
                    fire_at,
                    json,
                    write,
                };
                self.effects.push_back(effect);
                if let Some(run) = self.rules[rule].run.as_mut() {
                    run.owns_record = true;
                    run.fire_at = fire_at;
                }
            }
            Err(error) => {
                let index = run.step;
                self.log(
                    Level::Error,
                    Some(name),
                    Some(index),
                    format!("pending record not written, the step runs without restart protection: {error}"),
                );
            }
        }
    }

    /// Just before submitting: the step's `when` against the triggering
    /// event and the current state (docs/semantics.md#walking-a-sequence), then hand it over.
    fn submit_step(&mut self, rule: usize, now: Now) {
        let payload = Arc::clone(&self.payload);
        let spec = &payload.rules[rule];
        let Some(run) = self.rules[rule].run.as_ref() else {
            return;
        };
        let (index, at, event) = (run.step, run.at(), Arc::clone(&run.event));
        let Some(step) = run.step_of(spec) else {
            let reason = finally::walked_past(run);
            self.end_run(rule, reason, now);
            return;
        };
        if let Some(program) = &step.when {
            let result = self.eval(rule, Some((index, at.finally)), program, &event);
            if let Some(run) = &self.rules[rule].run {
                let serial = run.serial;
                let when = WhenResult::of(&result);
                self.traces.step_when(rule, serial, at, when);
            }
            if result != Ok(true) {
                self.skip_step(rule, now);
                return;
            }
        }
        if self.due_goes_behind(rule) {
            // Earlier due steps wait for room: this one waits behind them.
            self.due_wait(rule, now);
            return;
        }
        self.hand_over(rule, now);
    }

    /// Hands the live run's current step to the pool (`when` already
    /// checked): the job takes over the run's record.
    fn hand_over(&mut self, rule: usize, now: Now) {
        let Some(run) = self.rules[rule].run.as_ref() else {
            return;
        };
        let (step, finally) = (run.step as usize, run.finally);
        let action = if finally {
            StepAction::of_finally(Arc::clone(&self.payload), rule, step)
        } else {
            StepAction::new(Arc::clone(&self.payload), rule, step)
        };
        let Some(action) = action else {
            // No such step: the run has walked past its last.
            let reason = finally::walked_past(run);
            self.end_run(rule, reason, now);
            return;
        };
        let computed = match self.run_values(rule, &action) {
            Ok(computed) => computed,
            Err(error) => {
                self.value_failed(rule, &error, now);
                return;
            }
        };
        let job = self.next_job;
        self.next_job += 1;
        let name = self.name(rule);
        let Some(run) = self.rules[rule].run.as_mut() else {
            return;
        };
        run.phase = Phase::Acting { job };
        let (index, pass, event) = (run.step, run.pass, Arc::clone(&run.event));
        let at = run.at();
        // The record's ownership moves to the job: it is removed when the
        // action starts, and kept if the action never does (docs/semantics.md#durability-and-replay).
        let drop_record = std::mem::take(&mut run.owns_record).then(|| Arc::clone(&run.id));
        self.jobs.insert(
            job,
            JobOwner {
                rule: rule as u32,
                serial: run.serial,
                step: index,
                record: drop_record.is_some(),
                pass,
                finally,
            },
        );
        self.traces.step_submitted(rule, run.serial, at, now.time);
        let submit = Job {
            id: JobId(job),
            run: Arc::clone(&run.id),
            rule: name,
            step: index,
            pass,
            finally,
            action,
            computed,
            event,
            drop_record,
        };
        self.effects.push_back(Effect::Submit(submit));
    }

    /// The live run's step's values, computed against its event and the
    /// state now (docs/rules.md#computed-values); a body cut to fit the
    /// dashboard is logged.
    fn run_values(
        &mut self,
        rule: usize,
        action: &rulecore::bundle::Action,
    ) -> Result<Option<Box<rulecore::bundle::Action>>, String> {
        let Some(run) = self.rules[rule].run.as_ref() else {
            return Ok(None);
        };
        let step = run.step;
        let values = values::compute(action, &self.payload.consts, &run.event, &self.state)?;
        if let Some((computed, cut)) = values {
            if cut > 0 {
                let name = self.name(rule);
                self.log(
                    Level::Info,
                    Some(name),
                    Some(step),
                    format!("the notification's body was cut by {cut} bytes to fit the dashboard's 4096"),
                );
            }
            return Ok(Some(computed));
        }
        Ok(None)
    }

    /// A value failed to compute: the step fails as an action does
    /// (counted in `failed`, logged with the rule and step), nothing is
    /// performed, and the record the run owns goes: the step has run its
    /// course.
    fn value_failed(&mut self, rule: usize, error: &str, now: Now) {
        self.counters.failed += 1;
        self.rules[rule].count_error();
        let name = self.name(rule);
        let Some(run) = self.rules[rule].run.as_mut() else {
            return;
        };
        let (step, serial, at) = (run.step, run.serial, run.at());
        let owned = std::mem::take(&mut run.owns_record).then(|| Arc::clone(&run.id));
        self.effects.push_back(Effect::Log(LogLine {
            level: Level::Warn,
            rule: Some(Arc::clone(&name)),
            step: Some(step),
            finally: at.finally,
            run: None,
            code: Some(EVAL_ERROR_CODE),
            message: format!("a `${{...}}` value failed to compute, the step fails: {error}"),
        }));
        if let Some(id) = owned {
            self.effects.push_back(Effect::DropRecord {
                id,
                rule: Some(name),
                reason: DropReason::ValueFailed,
            });
        }
        self.traces.step_submitted(rule, serial, at, now.time);
        self.traces
            .step_finished(rule, serial, at, now.time, Err(error));
        self.end_run(rule, EndReason::Failed, now);
    }

    /// The step's `when` was false at fire time: the run ends, and the
    /// record it owns goes (the step will never run).
    fn skip_step(&mut self, rule: usize, now: Now) {
        let name = self.name(rule);
        let Some(run) = self.rules[rule].run.as_mut() else {
            return;
        };
        let (id, owned) = (Arc::clone(&run.id), std::mem::take(&mut run.owns_record));
        let (step, pass, finally) = (run.step, run.pass, run.finally);
        self.note(Note::StepSkipped {
            run: Arc::clone(&id),
            rule: Arc::clone(&name),
            step,
            pass,
            finally,
        });
        if owned {
            self.effects.push_back(Effect::DropRecord {
                id,
                rule: Some(name),
                reason: DropReason::WhenFalse,
            });
        }
        self.end_run(rule, EndReason::WhenFalse, now);
    }

    /// The current step's action succeeded: next step, next pass, or done.
    fn advance(&mut self, rule: usize, now: Now) {
        let payload = Arc::clone(&self.payload);
        let spec = &payload.rules[rule];
        let Some(run) = self.rules[rule].run.as_mut() else {
            return;
        };
        run.phase = Phase::Deciding;
        if run.finally {
            // One walk of the finally steps, then the run ends.
            run.step += 1;
            self.enter_step(rule, now);
        } else if (run.step as usize) + 1 < spec.steps.len() {
            run.step += 1;
            self.enter_step(rule, now);
        } else if run.pass.saturating_add(1) < spec.repeat().count {
            if spec.repeat().every_ns == 0 {
                run.pass += 1;
                run.step = 0;
                self.enter_step(rule, now);
            } else {
                // The gap between passes is a plain timer: not durable.
                let token = self.arm(
                    now.time.plus_nanos(spec.repeat().every_ns),
                    rule,
                    TimerKind::Run,
                );
                if let Some(run) = self.rules[rule].run.as_mut() {
                    run.phase = Phase::Gap { token };
                }
            }
        } else {
            self.end_run(rule, EndReason::Done, now);
        }
    }

    /// Ends the rule's live run. Cancel and restart drop its timer and its
    /// record; a `queue` rule then starts its oldest held trigger.
    fn end_run(&mut self, rule: usize, reason: EndReason, now: Now) {
        let Some(run) = self.rules[rule].run.take() else {
            return;
        };
        let name = self.name(rule);
        self.traces.run_ended(rule, run.serial, now.time, reason);
        match run.phase {
            Phase::Waiting { .. } | Phase::Gap { .. } => self.timers.disarm(),
            Phase::Due { .. } => {
                self.timers.disarm();
                self.due.remove(run.fire_at, &run.id);
            }
            Phase::Acting { .. } | Phase::Draining { .. } | Phase::Deciding => {}
        }
        // Only cancel and restart end a run that still owns its record (a
        // skipped step drops it itself; stop keeps it).
        let record_drop = match reason {
            EndReason::Cancelled => Some(DropReason::Cancelled),
            EndReason::Restarted => Some(DropReason::Restarted),
            _ => None,
        };
        if let (true, Some(reason)) = (run.owns_record, record_drop) {
            self.effects.push_back(Effect::DropRecord {
                id: Arc::clone(&run.id),
                rule: Some(Arc::clone(&name)),
                reason,
            });
        }
        self.note(Note::RunEnd {
            run: run.id,
            rule: name,
            reason,
        });
        if reason == EndReason::Restarted {
            // A restart starts its own new run. A cancel has cleared the
            // backlog, but for triggers queued during finally steps, which
            // start now (docs/semantics.md#finally).
            return;
        }
        if let Some(next) = self.rules[rule].pop_backlog() {
            self.start_run(rule, next, now);
        }
    }

    fn replay_drop(&mut self, record: &PendingRecord, reason: ReplayDropReason) {
        let id: Arc<str> = record.id.as_str().into();
        let rule: Arc<str> = record.rule.as_str().into();
        // The note is the one report of this removal; drivers word it with
        // `ReplayDropReason::describe`.
        self.note(Note::ReplayDrop {
            id: Arc::clone(&id),
            rule: Arc::clone(&rule),
            step: record.step,
            pass: record.iter,
            reason,
        });
        self.effects.push_back(Effect::DropRecord {
            id,
            rule: Some(rule),
            reason: DropReason::Replay(reason),
        });
    }

    /// A replayed record resumes as a run under its own id, on its pass:
    /// overdue steps run now, others wait out what is left.
    fn resume(&mut self, rule: usize, record: PendingRecord, now: Now) {
        if self.rules[rule].run.is_some() {
            // Replay after events: the live run wins; the record is dropped.
            self.replay_drop(&record, ReplayDropReason::Concurrency);
            return;
        }
        let id: Arc<str> = record.id.into();
        self.install_run(
            rule,
            Arc::clone(&id),
            Arc::new(record.event),
            record.step,
            record.iter,
        );
        let name = self.name(rule);
        self.note(Note::ReplayResume {
            run: id,
            rule: name,
            step: record.step,
            pass: record.iter,
            fire_at: record.fire_at,
        });
        if let Some(run) = self.rules[rule].run.as_mut() {
            run.owns_record = true;
            run.fire_at = record.fire_at;
        }
        self.trace_run_started(rule, now, true);
        let left_ms = record.fire_at.saturating_sub(now.wall_ms);
        if left_ms <= 0 {
            self.submit_step(rule, now);
        } else {
            let left_ns = u64::try_from(left_ms)
                .unwrap_or(0)
                .saturating_mul(1_000_000);
            let due = now.time.plus_nanos(left_ns);
            let token = self.arm(due, rule, TimerKind::Run);
            if let Some(run) = self.rules[rule].run.as_mut() {
                run.phase = Phase::Waiting { token };
                // Only a durable wait leaves a record to resume.
                let (serial, at) = (run.serial, run.at());
                let wait = trace::Wait {
                    start: now.time,
                    due,
                    durable: true,
                };
                self.traces.step_waiting(rule, serial, at, wait);
            }
        }
    }
}
