//! The simulator (docs/simulation.md): the same [`Engine`] the service runs, on a
//! virtual clock, with a virtual worker pool and a virtual record store.
//! Actions are recorded, not performed. Pure: the caller parses the
//! timeline and loads the bundles.

mod lane;
use lane::Fate;
mod line;
mod timeline;

pub use line::{trace_json, Line, LineKind, LineReason};
pub use timeline::{
    entry_kinds, parse, parse_all, ClockEntry, Dur, EventEntry, FailEntry, MessageEntry, Place,
    ReloadEntry, RestartEntry, StateEntry, Timeline, TimelineError, EXPECTATION_KINDS,
};
/// The timeline format's keys, for its JSON Schema.
pub use timeline::{
    Keys as TimelineKeys, Ty as TimelineTy, KINDS as TIMELINE_KINDS, SETTINGS as TIMELINE_SETTINGS,
};

use crate::pool::{Admission, Lane, PoolConfig};
use crate::{
    DropReason, Effect, Engine, EngineConfig, Job, LogLine, Note, Now, PendingRecord, RuleTrace,
    Time, DEFAULT_REPLAY_WINDOW_MS, DEFAULT_TRACES, EVAL_ERROR_CODE,
};
use crate::{Expiry, Notified, ReadCause};
use line::action_line;
use rulecore::bundle::Payload;
use rulecore::event::Event;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

/// The virtual wall clock at virtual time zero: fixed, so output is
/// deterministic (2024-01-01T00:00:00Z).
pub const WALL_ORIGIN_MS: i64 = 1_704_067_200_000;

/// What a simulation produced.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub lines: Vec<Line>,
    /// The engine's log lines, with their virtual time in ms.
    pub logs: Vec<(u64, LogLine)>,
    /// Records left in the virtual store at the end.
    pub records: BTreeMap<String, String>,
    /// With [`Options::trace`]: every rule's traces at the end, times in
    /// virtual ms (docs/simulation.md#traces).
    pub traces: Vec<RuleTrace>,
}

/// How to simulate, beyond the timeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Add a `non-fire` line for every trigger that did not start a run
    /// (docs/simulation.md#explain).
    pub explain: bool,
    /// Keep traces and return them in [`Outcome::traces`]
    /// (docs/simulation.md#traces).
    pub trace: bool,
}

/// Runs `timeline` against `payload`. `after_restart`, when given, replaces
/// the rules at every `[[restart]]`.
pub fn simulate(
    payload: Arc<Payload>,
    timeline: &Timeline,
    after_restart: Option<Arc<Payload>>,
) -> Result<Outcome, TimelineError> {
    simulate_with(payload, timeline, after_restart, Options::default())
}

/// [`simulate`] with [`Options`]; a timeline with `[[reload]]` entries
/// needs [`simulate_reloading`].
pub fn simulate_with(
    payload: Arc<Payload>,
    timeline: &Timeline,
    after_restart: Option<Arc<Payload>>,
    options: Options,
) -> Result<Outcome, TimelineError> {
    simulate_reloading(payload, timeline, after_restart, Vec::new(), options)
}

/// [`simulate_with`] for a timeline with `[[reload]]` entries: `reloads`
/// holds the bundle of each, in file order (docs/simulation.md#reload).
pub fn simulate_reloading(
    payload: Arc<Payload>,
    timeline: &Timeline,
    after_restart: Option<Arc<Payload>>,
    reloads: Vec<Arc<Payload>>,
    options: Options,
) -> Result<Outcome, TimelineError> {
    timeline.validate()?;
    if reloads.len() != timeline.reload.len() {
        return Err(TimelineError::ReloadBundles {
            entries: timeline.reload.len(),
            given: reloads.len(),
        });
    }
    // A `[[fail]]` naming no rule, or a step its rule does not have, would
    // silently fail nothing: refused, like a typo in a rule file.
    for (index, fail) in timeline.fail.iter().enumerate() {
        let steps = std::iter::once(&payload)
            .chain(after_restart.as_ref())
            .chain(reloads.iter())
            .filter_map(|payload| payload.rules.iter().find(|rule| *rule.name == *fail.rule))
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
    let zone = timeline.local_zone()?;
    let mut sim = Sim::new(payload, timeline, after_restart, options);
    sim.zone = zone;
    sim.reloads = reloads;
    sim.run(timeline);
    Ok(sim.outcome)
}

/// Entry kinds in the order they apply at one instant (docs/simulation.md):
/// the one place that order is written down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Clock,
    State,
    Message,
    Fail,
    Reload,
    Restart,
    Event,
}

#[derive(Debug)]
struct Running {
    finish: u64,
    seq: u64,
    job: Job,
    fate: Fate,
}

#[derive(Debug)]
struct Sim<'t> {
    engine: Engine,
    after_restart: Option<Arc<Payload>>,
    replay_window_ms: i64,
    options: Options,
    /// Virtual time, ns.
    now: u64,
    /// Wall clock offset from `wall_origin_ms + now`, ms.
    jump_ms: i64,
    /// The wall clock at virtual time zero: the timeline's `start`.
    wall_origin_ms: i64,
    /// Schedules fire up to here: `end`, else the last entry (a schedule
    /// always has a next fire, so it never keeps a simulation going).
    schedule_limit: u64,
    /// `NS:schedule`: each rule's last fire, Unix ms; survives restarts.
    schedule_store: BTreeMap<String, i64>,
    zone: crate::schedule::LocalZone,
    /// When the service comes back up, while it is down.
    up_at: Option<u64>,
    restarts: u32,
    pool: PoolConfig,
    action_ns: u64,
    running: Vec<Running>,
    /// The Redis lane's batch being sent and the actions waiting for it.
    lane: lane::VirtualLane,
    queued: VecDeque<Job>,
    seq: u64,
    fails: Vec<&'t FailEntry>,
    /// The datastore's hash fields: survive restarts.
    datastore: HashMap<(String, String), String>,
    /// When each expiring hash goes (virtual ns).
    expiries: Vec<(u64, String)>,
    /// The bundle of each `[[reload]]`, in file order.
    reloads: Vec<Arc<Payload>>,
    /// A bundle deployed while the service was down: the next start loads it
    /// (unless `after_restart` replaces it).
    deployed: Option<Arc<Payload>>,
    outcome: Outcome,
}

impl<'t> Sim<'t> {
    fn new(
        payload: Arc<Payload>,
        timeline: &'t Timeline,
        after_restart: Option<Arc<Payload>>,
        options: Options,
    ) -> Self {
        let replay_window_ms = timeline
            .replay_window
            .map(|d| d.0 / 1_000_000)
            .unwrap_or(DEFAULT_REPLAY_WINDOW_MS);
        Self {
            engine: Engine::new(payload, Self::config(replay_window_ms, 0, options)),
            after_restart,
            replay_window_ms,
            options,
            now: 0,
            jump_ms: 0,
            wall_origin_ms: timeline.start_ms(),
            schedule_limit: timeline.end.map_or(0, |d| d.0.unsigned_abs()),
            schedule_store: BTreeMap::new(),
            zone: crate::schedule::LocalZone::utc(),
            up_at: None,
            restarts: 0,
            pool: PoolConfig {
                workers: timeline.workers.unwrap_or(PoolConfig::default().workers),
                queue: timeline.queue.unwrap_or(PoolConfig::default().queue),
            },
            action_ns: timeline
                .action_time
                .map(|d| d.0.unsigned_abs())
                .unwrap_or(0),
            running: Vec::new(),
            lane: lane::VirtualLane::default(),
            queued: VecDeque::new(),
            seq: 0,
            fails: Vec::new(),
            datastore: HashMap::new(),
            expiries: Vec::new(),
            reloads: Vec::new(),
            deployed: None,
            outcome: Outcome::default(),
        }
    }

    fn config(replay_window_ms: i64, epoch: u32, options: Options) -> EngineConfig {
        EngineConfig {
            replay_window_ms,
            epoch: epoch.to_string(),
            explain: options.explain,
            // Nobody reads them without `--trace`.
            traces: if options.trace { DEFAULT_TRACES } else { 0 },
            ..EngineConfig::default()
        }
    }

    /// Now on the virtual clocks.
    fn clocks(&self) -> Now {
        // Saturating: timeline durations and jumps are user input.
        let since_origin = i64::try_from(self.now / 1_000_000).unwrap_or(i64::MAX);
        let wall_ms = self
            .wall_origin_ms
            .saturating_add(since_origin)
            .saturating_add(self.jump_ms);
        Now::new(Time::from_nanos(self.now), wall_ms)
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
        // Written before the service starts: what its start reads.
        for entry in timeline.state.iter().filter(|e| e.before_start) {
            self.write_store(entry);
            for (field, value) in entry.written() {
                self.engine.set_state(&entry.hash, field, value.to_string());
            }
        }
        self.seed_expiries();
        schedule(
            Kind::State,
            &mut timeline
                .state
                .iter()
                .map(|e| if e.before_start { Dur(-1) } else { e.at }),
        );
        schedule(Kind::Message, &mut timeline.message.iter().map(|e| e.at));
        schedule(Kind::Fail, &mut timeline.fail.iter().map(|e| e.at));
        schedule(Kind::Reload, &mut timeline.reload.iter().map(|e| e.at));
        schedule(Kind::Restart, &mut timeline.restart.iter().map(|e| e.at));
        schedule(Kind::Event, &mut timeline.event.iter().map(|e| e.at));
        entries.sort();
        let end = timeline.end.map(|d| d.0.unsigned_abs());
        if end.is_none() {
            self.schedule_limit = entries.last().map_or(0, |entry| entry.0);
        }
        self.start_schedules();
        for (at, kind, index) in entries {
            if end.is_some_and(|end| at > end) {
                break;
            }
            if kind == Kind::State && timeline.state[index].before_start {
                continue;
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
                Kind::State => self.write_state(&timeline.state[index]),
                Kind::Message => {
                    // While the service is down nobody is subscribed.
                    if self.up_at.is_none() {
                        let entry = &timeline.message[index];
                        let now = self.clocks();
                        self.engine
                            .channel_message(now, &entry.channel, entry.payload.as_bytes());
                        self.perform();
                    }
                }
                Kind::Fail => self.fails.push(&timeline.fail[index]),
                Kind::Reload => self.reload(index, &timeline.reload[index].bundle),
                Kind::Restart => self.restart(timeline.restart[index].down.0.unsigned_abs()),
                Kind::Event => {
                    // While the service is down nobody is subscribed.
                    if self.up_at.is_none() {
                        let now = self.clocks();
                        self.engine
                            .handle_event(now, timeline.event[index].to_event());
                        self.perform();
                    }
                }
            }
        }
        match end {
            Some(end) => self.run_until(end),
            None => self.run_until(u64::MAX),
        }
        self.end_line();
        if self.options.trace {
            // On a clock that reads virtual ms. While the service is down,
            // the traces it had when it stopped.
            let at_ms = i64::try_from(self.at_ms()).unwrap_or(i64::MAX);
            let now = Now::new(Time::from_nanos(self.now), at_ms);
            self.outcome.traces = self.engine.traces(now);
        }
    }

    /// Exactly one `end` line closes every simulation, so a cut-short one
    /// does not look finished: the live runs (waiting for a step or a
    /// repeat gap, acting, queued in the pool) as `<rule>:<step>`, and the
    /// rules holding a debounced event. While the service is down: the
    /// records its start would replay (`reason=down`), nothing held.
    fn end_line(&mut self) {
        let (waiting, held, reason) = match self.up_at {
            Some(_) => {
                let waiting = self
                    .outcome
                    .records
                    .values()
                    .map(|json| match PendingRecord::decode(json.as_bytes()) {
                        Ok(record) => format!("{}:{}", record.rule, record.step),
                        // The simulator wrote it; shown as is if it ever is not a record.
                        Err(_) => json.clone(),
                    })
                    .collect();
                (waiting, Vec::new(), Some(LineReason::Down))
            }
            None => (
                self.engine
                    .live_runs()
                    .map(|run| {
                        // docs/simulation.md#output: a run in its finally steps.
                        let list = if run.finally { "finally." } else { "" };
                        format!("{}:{list}{}", run.rule, run.step)
                    })
                    .collect(),
                self.engine.held().map(str::to_string).collect(),
                None,
            ),
        };
        self.line(Line {
            reason,
            waiting: Some(waiting),
            held: Some(held),
            ..Line::new(LineKind::End)
        });
    }

    /// Handles service start, pool completions and engine deadlines due at
    /// or before `limit`, in time order, then moves the clock to `limit`.
    fn run_until(&mut self, limit: u64) {
        loop {
            let up = self.up_at;
            let finish = self.running.iter().map(|r| (r.finish, r.seq)).min();
            let batch = self.lane.finish();
            let deadline = if up.is_none() {
                let schedule = self
                    .engine
                    .next_schedule()
                    .map(Time::as_nanos)
                    .filter(|&at| at <= self.schedule_limit);
                self.engine
                    .next_deadline()
                    .map(Time::as_nanos)
                    .into_iter()
                    .chain(schedule)
                    .min()
            } else {
                None
            };
            let next = [up, finish.map(|f| f.0), batch, deadline]
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
                // The finished run's own next step first, as the service
                // handles the report of the finish before the pool's room.
                self.perform();
                self.offer_room();
            } else if batch == Some(next) {
                self.finish_batch();
                self.offer_room();
            } else {
                let now = self.clocks();
                self.engine.handle_timeout(now);
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
        self.line(Line::new(LineKind::Restart));
        self.engine.stop();
        self.perform();
        // The pool stops: running actions are killed (their records went
        // when they started); queued ones are abandoned and keep theirs.
        self.running.clear();
        self.lane.sending = None;
        let waiting = std::mem::take(&mut self.lane.waiting);
        for job in std::mem::take(&mut self.queued).into_iter().chain(waiting) {
            self.engine.action_abandoned(job.id);
        }
        self.perform();
        self.up_at = Some(self.now.saturating_add(down_ns));
    }

    /// `[[reload]]` #`index`: a running service reloads at once
    /// ([`Engine::reload`]); a stopped one loads the bundle at its start.
    fn reload(&mut self, index: usize, name: &str) {
        let Some(payload) = self.reloads.get(index).cloned() else {
            return;
        };
        self.line(Line {
            bundle: Some(name.to_string()),
            ..Line::new(LineKind::Reload)
        });
        if self.up_at.is_some() {
            self.deployed = Some(payload);
            return;
        }
        let now = self.clocks();
        self.engine.reload(payload, now);
        self.perform();
    }

    /// The service starts again: fresh engine, state read, replay.
    fn start_again(&mut self) {
        self.up_at = None;
        self.restarts += 1;
        let deployed = self.deployed.take();
        let payload = match self.after_restart.as_ref().or(deployed.as_ref()) {
            Some(next) => Arc::clone(next),
            None => Arc::clone(self.engine.payload()),
        };
        self.engine = Engine::new(
            payload,
            Self::config(self.replay_window_ms, self.restarts, self.options),
        );
        self.expire_due();
        let mut pairs: Vec<_> = self.datastore.iter().collect();
        pairs.sort();
        for ((hash, field), value) in pairs {
            self.engine.set_state(hash, field, value.clone());
        }
        self.seed_expiries();
        let fields: Vec<(String, Vec<u8>)> = self
            .outcome
            .records
            .iter()
            .map(|(id, json)| (id.clone(), json.clone().into_bytes()))
            .collect();
        let now = self.clocks();
        self.engine.replay_raw(now, fields);
        self.start_schedules();
    }

    /// The service's start after replay: schedules armed, a missed fire
    /// judged against `NS:schedule` (docs/rules.md#schedules).
    fn start_schedules(&mut self) {
        self.engine.set_zone(self.zone.clone());
        let last: Vec<(String, i64)> = self
            .schedule_store
            .iter()
            .map(|(rule, ms)| (rule.clone(), *ms))
            .collect();
        let now = self.clocks();
        self.engine.start_schedules(now, &last);
        self.perform();
    }

    fn fate(&self, job: &Job) -> Fate {
        let now = self.now;
        let fail = self.fails.iter().find(|fail| {
            *job.rule == *fail.rule
                // `step` names one of the rule's steps, never a finally step.
                && fail.step.is_none_or(|step| !job.finally() && step == job.step)
                && fail.at.0.unsigned_abs() <= now
                && fail.until.is_none_or(|until| now < until.0.unsigned_abs())
        });
        match fail {
            None => Fate::Performed,
            // Only the Redis lane sends a transaction Redis can refuse whole.
            Some(fail) if fail.refused_whole && Lane::of(&job.action) == Lane::Redis => {
                Fate::RefusedWhole
            }
            Some(_) => Fate::Fails,
        }
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
                        rule: Some(rule.to_string()),
                        step: Some(step),
                        pass: Some(pass),
                        run: Some(id.to_string()),
                        ..Line::new(LineKind::RecordPut)
                    });
                }
                Effect::DropRecord { id, rule, reason } => {
                    self.drop_record(&id, rule.as_deref(), reason);
                }
                // An evaluation error is a line of the output (kind
                // `eval-error`), not a log line on the side.
                Effect::Log(log) if log.code == Some(EVAL_ERROR_CODE) => {
                    self.line(Line {
                        rule: log.rule.map(|rule| rule.to_string()),
                        step: log.step,
                        finally: log.finally,
                        message: Some(log.message),
                        ..Line::new(LineKind::EvalError)
                    });
                }
                Effect::Log(log) => {
                    let at = self.at_ms();
                    self.outcome.logs.push((at, log));
                }
                Effect::Note(note) => self.note(note),
                Effect::Toast { channel, message } => {
                    self.line(Line {
                        message: Some(format!("PUBLISH {channel} {message}")),
                        ..Line::new(LineKind::Toast)
                    });
                }
                Effect::Publish(events) => {
                    for event in events {
                        self.derived_line(&event);
                    }
                }
                Effect::ScheduleFired { rule, fire_ms } => {
                    self.schedule_store.insert(rule.to_string(), fire_ms);
                }
                Effect::Poll { pairs, .. } => {
                    self.expire_due();
                    let values = self.read_pairs(&pairs);
                    let now = self.clocks();
                    self.engine.fields_read(now, ReadCause::Reread, &values);
                }
            }
        }
    }

    /// One `[[state]]` (docs/simulation.md#state-entries): the datastore
    /// written, then each published name handled as the service handles a
    /// notification (nobody hears them while the service is down).
    fn write_state(&mut self, entry: &StateEntry) {
        self.write_store(entry);
        if self.up_at.is_some() {
            return;
        }
        for name in entry.published() {
            let now = self.clocks();
            match self.engine.notified(&entry.hash, name) {
                Notified::Ignore => {}
                Notified::Read(pairs) => {
                    let values = self.read_pairs(&pairs);
                    self.engine.fields_read(now, ReadCause::Notified, &values);
                }
                Notified::ReadWritten(pairs) => {
                    let values = self.read_pairs(&pairs);
                    let expiry = self.expiry(&entry.hash);
                    // A replay changes nothing; the service counts it in
                    // `rejected`, which the simulator has no counter for.
                    let _taken = self.engine.written_read(now, expiry, &values);
                }
                Notified::Reread(pairs) => {
                    let values = self.read_pairs(&pairs);
                    self.engine.fields_read(now, ReadCause::Reread, &values);
                }
            }
            self.perform();
        }
    }

    /// The datastore side of a `[[state]]`.
    fn write_store(&mut self, entry: &StateEntry) {
        self.expire_due();
        let hash = &entry.hash;
        if entry.clear || entry.replace {
            self.datastore.retain(|(h, _), _| h != hash);
            // `DEL` takes the key's expiry with it.
            self.expiries.retain(|(_, h)| h != hash);
        }
        if entry.delete {
            if let Some(field) = &entry.field {
                self.datastore.remove(&(hash.clone(), field.clone()));
            }
        }
        for (field, value) in entry.written() {
            self.datastore
                .insert((hash.clone(), field.to_string()), value.to_string());
        }
        if let Some(expire) = entry.expire {
            let at = self.now.saturating_add(expire.0.unsigned_abs());
            self.expiries.retain(|(_, h)| h != hash);
            self.expiries.push((at, hash.clone()));
        }
        // A hash with no field left is no key (Redis deletes an emptied
        // hash, and an expiry on no key sets nothing): no expiry either.
        if !self.datastore.keys().any(|(h, _)| h == hash) {
            self.expiries.retain(|(_, h)| h != hash);
        }
    }

    /// Seeding's read of the `every` sources' hashes' expiries, as the
    /// service's.
    fn seed_expiries(&mut self) {
        let hashes: Vec<String> = self
            .engine
            .expiry_hashes()
            .into_iter()
            .map(str::to_string)
            .collect();
        for hash in hashes {
            let expiry = self.expiry(&hash);
            self.engine.expiry_seen(&hash, expiry);
        }
    }

    /// `PEXPIRETIME` of `hash` in the virtual datastore (virtual ns: only
    /// compared with this hash's earlier expiries).
    fn expiry(&self, hash: &str) -> Expiry {
        if let Some((at, _)) = self.expiries.iter().find(|(_, h)| h == hash) {
            return Expiry::At(i64::try_from(*at).unwrap_or(i64::MAX));
        }
        if self.datastore.keys().any(|(h, _)| h == hash) {
            Expiry::Persistent
        } else {
            Expiry::Absent
        }
    }

    /// Hashes whose expiry has come are gone (silently, as Redis expires).
    fn expire_due(&mut self) {
        let now = self.now;
        let (due, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.expiries)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.expiries = kept;
        for (_, hash) in due {
            self.datastore.retain(|(h, _), _| *h != hash);
        }
    }

    /// The current values of watched pairs (`None`: absent), as `HMGET`.
    fn read_pairs(&self, pairs: &[usize]) -> Vec<(usize, Option<String>)> {
        let watched = self.engine.watched_pairs();
        pairs
            .iter()
            .filter_map(|&index| {
                let pair = watched.get(index)?;
                let key = (pair.hash.clone(), pair.field.clone());
                Some((index, self.datastore.get(&key).cloned()))
            })
            .collect()
    }

    /// A `derived` line: an event the profile derived and published.
    fn derived_line(&mut self, event: &Event) {
        let data = (!event.data.is_null()).then(|| event.data.to_json().to_string());
        self.line(Line {
            topic: Some(event.topic.to_string()),
            from: event.from.as_deref().map(str::to_string),
            to: event.to.as_deref().map(str::to_string),
            data,
            ..Line::new(LineKind::Derived)
        });
    }

    fn submit(&mut self, job: Job) {
        // The guards (docs/safety.md#guards), judged by the engine's one
        // judgement on the datastore at this instant (the timeline's
        // `[[state]]` entries so far, silent writes included).
        if let Some(check) = &job.guard {
            let payload = std::sync::Arc::clone(job.action.payload());
            let read: Vec<crate::guard::Read> = check
                .fields(&payload)
                .map(|(hash, field)| {
                    let key = (hash.to_string(), field.to_string());
                    match self.datastore.get(&key) {
                        Some(value) => crate::guard::Read::Value(value.clone()),
                        None => crate::guard::Read::Absent,
                    }
                })
                .collect();
            if let Err(refusal) = crate::guard::judge(&payload, check, &read) {
                if let Some(id) = job.record_to_drop_at_start() {
                    self.drop_record(id, Some(&job.rule), DropReason::Started);
                }
                let mut line = action_line(self.at_ms(), LineKind::Guarded, &job);
                line.message = Some(format!("guard {}: {}", refusal.guard, refusal.state_text()));
                self.line(line);
                let now = self.clocks();
                self.engine.action_guarded(now, job.id, refusal);
                return;
            }
        }
        let admission = match Lane::of(&job.action) {
            Lane::Redis => {
                let busy = self.lane.busy_at(self.now);
                self.pool.admit_to_lane(self.lane.held(), busy)
            }
            Lane::Workers => {
                let idle = self.pool.workers.saturating_sub(self.running.len());
                self.pool.admit(idle, self.queued.len())
            }
        };
        match admission {
            Admission::Worker => self.start_job(job),
            Admission::Lane => {
                let fate = self.begin(&job);
                self.lane
                    .joining(self.now, self.action_ns)
                    .push((job, fate));
            }
            Admission::Queue if Lane::of(&job.action) == Lane::Redis => {
                self.lane.waiting.push_back(job);
            }
            Admission::Queue => self.queued.push_back(job),
            Admission::Refused => {
                let now = self.clocks();
                self.engine.action_refused(now, job.id);
            }
        }
    }

    /// Tells the engine how many submissions the pool accepts now, when
    /// due steps wait for room (docs/semantics.md#due-steps-the-pool-refused).
    fn offer_room(&mut self) {
        if self.engine.due_backlog_len() == 0 {
            return;
        }
        let idle = self.pool.workers.saturating_sub(self.running.len());
        let room = self.pool.room(idle, self.queued.len(), self.lane.held());
        if room.total() > 0 {
            let now = self.clocks();
            self.engine.pool_has_room(now, room);
        }
    }

    /// An action starts: its record goes (unless Redis refuses the
    /// transaction that removes it), its line; what becomes of it.
    fn begin(&mut self, job: &Job) -> Fate {
        let fate = self.fate(job);
        if let Some(id) = job
            .record_to_drop_at_start()
            .filter(|_| fate != Fate::RefusedWhole)
        {
            self.drop_record(id, Some(&job.rule), DropReason::Started);
        }
        self.line(action_line(self.at_ms(), LineKind::Action, job));
        self.engine.action_started(job.id);
        fate
    }

    fn start_job(&mut self, job: Job) {
        let fate = self.begin(&job);
        self.seq += 1;
        self.running.push(Running {
            finish: self.now.saturating_add(self.action_ns),
            seq: self.seq,
            job,
            fate,
        });
    }

    /// An action ended: its failure line, if it fails, and the report;
    /// one Redis refused whole is reported as not performed, and the
    /// engine decides its retry.
    fn end(&mut self, job: &Job, fate: Fate) {
        if fate != Fate::Performed {
            let mut line = action_line(self.at_ms(), LineKind::ActionFailed, job);
            line.reason = Some(LineReason::SimulatedFailure);
            self.line(line);
        }
        let now = self.clocks();
        let failure = LineReason::SimulatedFailure.as_str();
        match fate {
            Fate::Performed => self.engine.action_finished(now, job.id, Ok(())),
            Fate::Fails => {
                let result = Err(failure.to_string());
                self.engine.action_finished(now, job.id, result);
            }
            Fate::RefusedWhole => {
                let record = job.record_to_drop_at_start().cloned();
                let why = format!("EXECABORT ({failure}: Redis refused the transaction whole)");
                self.engine.action_not_performed(now, job.id, record, &why);
            }
        }
    }

    fn finish_job(&mut self, seq: u64) {
        let Some(position) = self.running.iter().position(|r| r.seq == seq) else {
            return;
        };
        let done = self.running.remove(position);
        self.end(&done.job, done.fate);
        if let Some(next) = self.queued.pop_front() {
            self.start_job(next);
        }
    }

    /// The lane's batch ended: the actions that waited go as the next
    /// batch, then the ended ones are reported, each with its effects, as
    /// the service's lane takes the next batch before the driver reads
    /// the reports of the last.
    fn finish_batch(&mut self) {
        let (done, next) = self.lane.turn();
        let next: Vec<(Job, Fate)> = next
            .into_iter()
            .map(|job| {
                let fate = self.begin(&job);
                (job, fate)
            })
            .collect();
        self.lane.start(self.now, self.action_ns, next);
        for (job, fate) in done.map(|batch| batch.jobs).unwrap_or_default() {
            self.end(&job, fate);
            self.perform();
        }
    }

    fn note(&mut self, note: Note) {
        // Visible in the store at the end; not one of docs/simulation.md's kinds.
        if matches!(note, Note::RecordKept { .. }) {
            return;
        }
        let fields = note.fields();
        self.line(Line {
            rule: Some(fields.rule.to_string()),
            step: fields.step,
            finally: fields.finally,
            pass: fields.pass,
            run: fields.run.map(str::to_string),
            reason: fields.reason.map(LineReason::Note),
            read: (!fields.reads.is_empty())
                .then(|| fields.reads.iter().map(ToString::to_string).collect()),
            ..Line::new(LineKind::Note(note.kind()))
        });
    }

    /// Removes a record from the virtual store, with its `record-drop` line.
    fn drop_record(&mut self, id: &str, rule: Option<&str>, reason: DropReason) {
        self.outcome.records.remove(id);
        self.line(Line {
            rule: rule.map(str::to_string),
            run: Some(id.to_string()),
            reason: Some(LineReason::RecordDrop(reason)),
            ..Line::new(LineKind::RecordDrop)
        });
    }

    fn line(&mut self, mut line: Line) {
        line.at_ms = self.at_ms();
        self.outcome.lines.push(line);
    }
}
