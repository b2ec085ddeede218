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
//! `Arc<Event>` that triggered it. A rule has at most one live run (one
//! per key with `per`, the keys' states kept by `keyed`): every
//! concurrency policy ends or refuses the old run before a new one starts.
//!
//! See docs/engine.md for the driver's contract.
//!
//! This root is the table of contents: the [`Engine`] and its parts, what
//! it answers, and the helpers every module shares. The parts own their
//! data: `runs` (each rule's slot, the jobs handed over, the run ids),
//! `records` (the due backlog, whether replay has run), `bus` (sources,
//! polls, event ids), `hold` (which holds a state change judges again),
//! `keyed`, `timers`, `envelope_state`, `schedule`.
//! The work is in the modules: `trigger` (one event), `decide` (the trigger decision, pure:
//! the event path and the dry run both ask it), `run` (a live run walking
//! its steps), `actions` (the pool's reports), `hold`, `finally`,
//! `backlog`, `replay`, `reload`, `input`, `bus`, `trace`; the safety
//! envelope in `guard`, `envelope_state` (limits and breakers) and `window`.

mod actions;
mod backlog;
mod bus;
mod config;
mod decide;
pub mod derive;
mod dry_run;
mod effect;
mod envelope_state;
pub mod fast_hash;
mod finally;
pub mod guard;
mod hold;
mod index;
mod input;
mod inspect;
mod key_table;
mod keyed;
mod memory;
mod overrides;
mod record;
mod records;
mod reload;
mod replay;
mod retry;
mod rule_state;
mod run;
mod run_id;
mod runs;
pub mod schedule;
mod time;
mod timers;
mod trace;
mod trigger;
mod values;
mod when_plans;
mod why;
mod window;

pub mod pool;
pub mod sim;

pub use bus::{BUS_VALUE_BYTES, CUT_MARKER};
pub use config::{EngineConfig, DEFAULT_QUEUE_BACKLOG, DEFAULT_REPLAY_WINDOW_MS};
pub use decide::{Verdict, WhenResult};
pub use derive::{BusMode, Expiry, Notified, PollPlan, ReadCause, SourceSet};
pub use dry_run::{DryRun, StepCheck};
pub use effect::{
    DropReason, Effect, EndReason, Job, JobId, Level, LogLine, NonFireReason, Note, NoteFields,
    NoteKind, NoteReason, RecordWrite, ReplayDropReason, StepAction, TriggerOutcome, WhenRead,
};
pub use envelope_state::EnvelopeCounts;
pub use input::INPUT_SKIPPED_CODE;
pub use inspect::{
    HoldView, KeyRun, RuleView, RunPhase, RunView, RunningHold, WaitingStep, KEYS_SHOWN,
};
pub use keyed::{MAX_KEYS, MAX_KEY_BYTES};
pub use memory::{estimated_heap, mebibytes, MEMORY_BUDGET};
pub use overrides::{EnableChange, UnknownRule};
pub use record::{PendingRecord, RecordError, Replay, PENDING_HASH};
pub use reload::ReloadSummary;
pub use replay::{refusal_without_clock, step_refusal};
pub use retry::{backoff_ns, RETRIES};
pub(crate) use run::{JobOwner, Phase, Run};
pub use time::{Now, Time};
pub use trace::{
    read_text, utc, NonFireTrace, RuleTrace, RunEndTrace, RunTrace, StepEndTrace, StepTrace,
    SubmitOutcome, SubmitTrace, TimeStyle, WaitTrace, WhenTrace, DEFAULT_TRACES,
    DEFAULT_TRACE_MEMORY,
};
pub use trigger::{Decided, EventParts};
pub use why::WhenCheck;

use rule_state::RuleState;
use rulecore::bundle::Payload;
use rulecore::bytecode::Program;
use rulecore::event::Event;
use rulecore::vm::eval_bool;
use std::collections::VecDeque;
use std::sync::Arc;
use timers::{TimerKind, Timers};
use trace::Traces;

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
    /// Actions that returned an error, or that Redis refused whole more
    /// often than they are retried.
    pub failed: u64,
    /// Retries of actions Redis refused whole (docs/semantics.md#an-action-redis-refused-whole).
    pub retried: u64,
    /// Armed timers: step waits, repeat gaps, debounce windows, holds.
    pub pending: u64,
    /// Live runs (a rule has at most one, one per key with `per`).
    pub runs_active: u64,
    /// Actions a guard refused (docs/safety.md#guards).
    pub guarded: u64,
    /// Actions a limit refused (docs/safety.md#limits).
    pub limited: u64,
    /// Triggers a tripped breaker refused, the trip included
    /// (docs/safety.md#the-breaker).
    pub tripped: u64,
    /// Keys of keyed rules forgotten to make room for a new one
    /// (docs/rules.md#keyed-runs).
    pub keys_forgotten: u64,
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
    /// 0 or 1: a rule has at most one live run (one per key with `per`).
    pub active_runs: u64,
    /// Its actions guards and limits refused, its triggers its breaker
    /// refused (docs/safety.md).
    pub refusals: EnvelopeCounts,
}

/// The engine. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    payload: Arc<Payload>,
    config: EngineConfig,
    /// The runs part (`runs`): each rule's slot (its live run, held
    /// debounce, hold, queue, stats), the jobs handed over, the run ids.
    rules: runs::Runs,
    /// Which rules an event's topic starts, cancels, or finds turned off.
    indexes: overrides::Indexes,
    /// Per watched pair ([`Engine::watched_pairs`]): its last observed
    /// value; the first `state_pairs.len()` are what `state()` reads.
    state: Vec<String>,
    inputs: input::Inputs,
    /// The bus profile's sources, polls and event ids (docs/sources.md).
    bus: bus::BusState,
    /// The holds part (`hold`): per state pair, the rules with `for` whose
    /// `when` reads it.
    holds: hold::Holds,
    /// Keyed rules' keys (`per`): the states not in their slot.
    keys: keyed::Keys,
    timers: Timers,
    /// The replay-and-records part (`records`): the due backlog
    /// (docs/semantics.md#due-steps-the-pool-refused), whether replay has run.
    records: records::Records,
    counters: Counters,
    effects: VecDeque<Effect>,
    stopped: bool,
    /// Buffers one event's rule lookups reuse.
    scratch: trigger::Scratch,
    traces: Traces,
    /// Each rule's `when` in the VM's faster form.
    when_plans: when_plans::WhenPlans,
    /// The limits' windows, the breakers, the refusals per rule.
    envelope: envelope_state::EnvelopeState,
    /// `at` and `every` (docs/rules.md#schedules).
    schedules: schedule::Schedules,
}

impl Engine {
    pub fn new(payload: Arc<Payload>, config: EngineConfig) -> Self {
        // Disabled rules are replay-only (docs/rules.md#disabled-rules): not indexed,
        // so they neither match nor cancel.
        let indexes = overrides::indexes(&payload, |position| payload.rules[position].enabled);
        let rules = runs::Runs::new(&payload);
        let inputs = input::Inputs::new(&payload);
        let state = vec![String::new(); inputs.watched().len()];
        let bus = bus::BusState::new(&payload, &config, &inputs);
        let holds = hold::Holds::new(&payload);
        let keys = keyed::Keys::new(&payload);
        let traces = Traces::new(config.traces, config.trace_memory);
        let when_plans = when_plans::WhenPlans::new(&payload);
        let envelope = envelope_state::EnvelopeState::new(&payload);
        Self {
            payload,
            config,
            rules,
            indexes,
            state,
            inputs,
            bus,
            holds,
            keys,
            timers: Timers::default(),
            records: records::Records::default(),
            counters: Counters::default(),
            effects: VecDeque::new(),
            stopped: false,
            scratch: trigger::Scratch::default(),
            traces,
            when_plans,
            envelope,
            schedules: schedule::Schedules::default(),
        }
    }

    pub fn payload(&self) -> &Arc<Payload> {
        &self.payload
    }

    // ----- inputs -------------------------------------------------------
    // Events: `trigger`; job reports: `actions`; state changes and channel
    // messages: `input`; replay: `replay`; a new bundle: `reload`. Here:
    // time, stop, and the records after a reconnect or a clock jump.

    /// Fires every timer due at or before `now`.
    pub fn handle_timeout(&mut self, now: Now) {
        if self.stopped {
            return;
        }
        self.polls_due(now);
        self.schedules_due(now);
        while let Some(fired) = self.timers.pop_due(now.time) {
            if !self.timer_is_live(&fired) {
                // Cancelled lazily: the owner moved on.
                continue;
            }
            self.timers.disarm();
            let rule = fired.rule as usize;
            // A keyed rule's timer: its key's state into the slot first.
            self.focus_timer(&fired);
            match fired.kind {
                TimerKind::Debounce => {
                    if let Some(held) = self.rules[rule].take_debounce() {
                        self.dispatch(rule, held.event, now);
                    }
                }
                TimerKind::Hold => self.hold_due(rule, now),
                TimerKind::Run => {
                    let Some(run) = self.rules.run_mut(rule) else {
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

    /// Stop (docs/service.md#start-and-stop): drop timers, backlogs and debounce windows;
    /// keep the records of waiting runs ([`Note::RecordKept`]). Later
    /// events and timeouts are ignored; action reports are still counted.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.records.stop();
        self.schedules_stopped();
        for rule in 0..self.rules.len() {
            self.each_key(rule, |engine| engine.stop_run(rule));
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
            self.each_key(rule, |engine| {
                let fire_at = match engine.rules.run(rule) {
                    Some(run) if run.owns_record => run.fire_at,
                    _ => return,
                };
                engine.put_record(rule, &spec.source, fire_at, RecordWrite::Again);
                queued += 1;
            });
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
        self.schedules_clock_jumped();
        self.records.clock_jumped(delta_ms);
        for rule in 0..self.rules.len() {
            self.each_key(rule, |engine| {
                if let Some(run) = engine.rules.run_mut(rule).filter(|run| run.owns_record) {
                    run.fire_at = run.fire_at.saturating_add(delta_ms);
                }
            });
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
            rules: self.indexes.live_rules,
            pending: self.timers.armed() as u64,
            runs_active: self.all_states().filter(|(_, r)| r.run.is_some()).count() as u64,
            keys_forgotten: self.keys.forgotten,
            ..self.counters
        }
    }

    /// Every live run, in bundle order: waiting for a step's `after` or a
    /// repeat gap, acting, or queued in the pool (for the simulator's `end`
    /// line, docs/simulation.md#output).
    pub fn live_runs(&self) -> impl Iterator<Item = LiveRun> + '_ {
        self.all_states().filter_map(|(rule, state)| {
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
        self.all_states()
            .filter(|(_, state)| state.debounce().is_some())
            .filter_map(|(rule, _)| self.payload.rules.get(rule).map(|rule| &*rule.name))
    }

    /// Per-rule stats, by bundle position.
    pub fn rule_stats(&self, rule: usize) -> Option<RuleStats> {
        let mut stats = self.keyed_stats(rule)?;
        stats.refusals = self.envelope_counts(rule);
        Some(stats)
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
        self.traces.view(&self.payload, rule, now.time, now.wall_ms)
    }

    /// Every rule's traces, in bundle order; see [`Engine::trace`].
    pub fn traces(&self, now: Now) -> Vec<RuleTrace> {
        self.traces
            .traced_rules()
            .into_iter()
            .filter_map(|rule| self.traces.view(&self.payload, rule, now.time, now.wall_ms))
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
        self.rules.name(rule, &self.payload)
    }

    /// [`Engine::name`] for a caller that cannot keep it: a view.
    fn name_of(&self, rule: usize) -> Arc<str> {
        self.rules.name_of(rule, &self.payload)
    }

    /// [`Engine::name`] of a rule that may be out of range.
    fn rule_name(&mut self, rule: usize) -> Option<Arc<str>> {
        (rule < self.rules.len()).then(|| self.name(rule))
    }

    /// A non-fire decision (docs/semantics.md#traces): the rule's trace
    /// keeps it, and it is noted when asked to explain, with what the
    /// rule's `when` read when it was found true for this event. `error`:
    /// a `when-error`'s text.
    pub(crate) fn non_fire(
        &mut self,
        rule: usize,
        reason: NonFireReason,
        event: &Arc<Event>,
        now: Now,
        error: Option<&str>,
    ) {
        let reads = self.take_judged(rule);
        self.non_fire_reading(rule, reason, event, now.time, error, reads);
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
        // runs from its plan, made at load; any other program is planned
        // here, for this evaluation (docs/engine.md#the-when-plan).
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

    /// Whether the timer's owner (its rule's slot, or one of its keys)
    /// still waits for it.
    fn timer_is_live(&self, entry: &timers::Entry) -> bool {
        self.timer_owned(entry)
    }

    fn arm(&mut self, deadline: Time, rule: usize, kind: TimerKind) -> u64 {
        if self.timers.wants_compaction() {
            let mut timers = std::mem::take(&mut self.timers);
            timers.retain(|entry| self.timer_is_live(entry));
            self.timers = timers;
        }
        self.timers.arm(deadline, rule as u32, kind)
    }
}
