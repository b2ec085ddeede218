//! What the engine hands back to its driver (docs/semantics.md): effects to
//! perform, and notes that say what happened (the simulator prints them,
//! the service may log them).

use rulecore::bundle::{Action, Payload};
use rulecore::event::Event;
use rulecore::vm::Read;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Identifies one submitted action, unique within an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u64);

/// One action to hand to the worker pool (docs/semantics.md#worker-pool-and-actions).
#[derive(Debug, Clone)]
pub struct Job {
    pub id: JobId,
    /// The run id, `<rule>#<epoch>-<n>` (a replayed run keeps its old id).
    pub run: Arc<str>,
    pub rule: Arc<str>,
    pub step: u32,
    /// 0-based repeat pass.
    pub pass: u32,
    /// The step's action, read from the loaded bundle (not a copy); whether
    /// `step` counts the rule's finally steps is [`Job::finally`].
    pub action: StepAction,
    /// The action as it is performed when the step computes something: its
    /// `${...}` values filled in, a `notify` turned into the `publish` of
    /// its JSON (docs/rules.md#computed-values). `None`: `action` as it is.
    pub computed: Option<Box<Action>>,
    /// The event that triggered the run.
    pub event: Arc<Event>,
    /// The pending record this job now owns (docs/semantics.md#durability-and-replay): the driver
    /// removes it exactly when the action **starts** on a worker, and keeps
    /// it when the pool refuses the job or abandons it at stop.
    pub drop_record: Option<Arc<str>>,
    /// The guards covering the action (docs/safety.md#guards): the worker
    /// reads their fields fresh and asks [`crate::guard::judge`] before
    /// performing it. `None` for an unguarded action.
    pub guard: Option<Box<crate::guard::GuardCheck>>,
    /// What the step's `when` read when it was found true just before
    /// the step was handed over; only with
    /// [`EngineConfig::explain`](crate::EngineConfig::explain) (the
    /// simulator's `action` line). Boxed: every effect is the size of a
    /// job, and the service never has them.
    pub when_read: Option<Box<WhenRead>>,
}

/// What a step's `when` read, kept on a job for the simulator's `--explain`
/// behind one pointer: every job and every [`Effect`] is as large as this
/// field makes them, and the event path moves each a few times
/// (docs/engine.md#the-event-path-by-instructions).
#[derive(Debug, Clone)]
pub struct WhenRead(pub Box<[Read]>);

/// One step's action, shared with the loaded bundle: a job points at the
/// step it performs instead of carrying a copy of its strings, and the
/// engine keeps no copy per rule either (docs/engine.md#memory-measured).
/// Reads as the [`Action`] itself.
#[derive(Clone)]
pub struct StepAction {
    payload: Arc<Payload>,
    rule: u32,
    step: u32,
    /// `step` is one of the rule's finally steps.
    finally: bool,
}

impl StepAction {
    /// The bundle the step is in.
    pub fn payload(&self) -> &Arc<Payload> {
        &self.payload
    }

    /// Step `step` of rule `rule` of `payload`; `None` when there is no such
    /// step.
    pub fn new(payload: Arc<Payload>, rule: usize, step: usize) -> Option<Self> {
        payload.rules.get(rule)?.steps.get(step)?;
        Some(Self {
            payload,
            rule: u32::try_from(rule).ok()?,
            step: u32::try_from(step).ok()?,
            finally: false,
        })
    }

    /// Finally step `step` of rule `rule` (docs/semantics.md#finally);
    /// `None` when there is no such step.
    pub fn of_finally(payload: Arc<Payload>, rule: usize, step: usize) -> Option<Self> {
        payload.rules.get(rule)?.finally().get(step)?;
        Some(Self {
            payload,
            rule: u32::try_from(rule).ok()?,
            step: u32::try_from(step).ok()?,
            finally: true,
        })
    }
}

impl Deref for StepAction {
    type Target = Action;

    fn deref(&self) -> &Action {
        // `new` checked both indices, and a payload behind an `Arc` never
        // changes.
        let rule = &self.payload.rules[self.rule as usize];
        let steps = if self.finally {
            rule.finally()
        } else {
            &rule.steps
        };
        &steps[self.step as usize].action
    }
}

impl fmt::Debug for StepAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Action::fmt(self, f)
    }
}

impl Job {
    /// `step` counts the rule's finally steps (docs/semantics.md#finally).
    pub fn finally(&self) -> bool {
        self.action.finally
    }

    /// What a worker performs: the computed action, or the bundle's.
    pub fn performed(&self) -> &Action {
        self.computed.as_deref().unwrap_or(&self.action)
    }

    /// The pending record to remove when this job's action starts: a
    /// worker (real or virtual) removes it right then, before the action
    /// runs, with reason [`DropReason::Started`] (docs/semantics.md#durability-and-replay). The other
    /// order, action first, would leave a window in which a crash runs the
    /// step again at the next start; a job that never starts (refused,
    /// abandoned at stop) keeps its record.
    pub fn record_to_drop_at_start(&self) -> Option<&Arc<str>> {
        self.drop_record.as_ref()
    }
}

/// Whether a `PutRecord` writes a record for the first time or again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordWrite {
    /// A durable step starts waiting.
    First,
    /// The same record written again (`Engine::rewrite_records`,
    /// `Engine::clock_jumped`): an earlier write may be in the store.
    Again,
}

/// Something the driver must do or may report, in order.
#[derive(Debug, Clone)]
pub enum Effect {
    /// Hand this job to the worker pool without blocking. Report back with
    /// `action_started`, then `action_finished`, or `action_refused` /
    /// `action_abandoned`.
    Submit(Job),
    /// `HSET extensions:pending <id> <json>`. A failed write is logged; the
    /// step still runs (docs/semantics.md#durability-and-replay).
    PutRecord {
        id: Arc<str>,
        rule: Arc<str>,
        step: u32,
        pass: u32,
        /// Unix milliseconds.
        fire_at: i64,
        /// The [`PendingRecord`](super::PendingRecord) JSON.
        json: String,
        write: RecordWrite,
    },
    /// `HDEL extensions:pending <id>`. A failed removal is logged with its
    /// cost: the step will run again at the next start.
    DropRecord {
        id: Arc<str>,
        rule: Option<Arc<str>>,
        reason: DropReason,
    },
    Log(LogLine),
    Note(Note),
    /// Publish events the bus profile derived (docs/sources.md), in order,
    /// in one round trip: each as an entry of stream `events` (its `id` is
    /// the entry id) and on `ev:<topic>`. The engine has already handed
    /// them to its own rules.
    Publish(Vec<Event>),
    /// Read these watched pairs of `hash` (one `HMGET`) for a poll
    /// (docs/sources.md#polls), and hand the values to
    /// [`crate::Engine::fields_read`] with [`crate::ReadCause::Reread`].
    Poll {
        hash: String,
        pairs: Vec<usize>,
    },
    /// `PUBLISH channel message`: the dashboard toast of a refusal by the
    /// safety envelope (docs/safety.md), performed without waiting.
    Toast {
        channel: String,
        message: String,
    },
    /// `HSET NS:schedule <rule> <fire_ms>`: a schedule fired rule `rule`
    /// (docs/rules.md#schedules), or, for a rule with no last fire at
    /// start, the start itself (its baseline); start reads it back to find
    /// a fire missed while the service was down.
    ScheduleFired {
        rule: Arc<str>,
        fire_ms: i64,
    },
}

/// Why a pending record is removed: by the engine itself, or (`Started`)
/// by the worker that starts the job owning it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The owning job's action started ([`Job::record_to_drop_at_start`]).
    Started,
    Cancelled,
    Restarted,
    /// The step's `when` was false (or failed) at fire time.
    WhenFalse,
    /// Replay refused the record.
    Replay(ReplayDropReason),
    /// The step waited in the due backlog until it was more than the
    /// replay window past due (docs/semantics.md#due-steps-the-pool-refused).
    TooLate,
    /// A live reload ended the run that owned it, for this replay reason
    /// (docs/semantics.md#live-reload).
    Reloaded(ReplayDropReason),
    /// The stored value did not decode.
    Undecodable,
    /// The stored value is another program's waiting step (the Go
    /// event-service's, left by a migration): it names a rule but cannot
    /// resume here (docs/service.md#migrating-from-event-service).
    Foreign,
    /// The step's `${...}` value failed to compute: the step failed
    /// (docs/rules.md#computed-values).
    ValueFailed,
    /// Redis refused the step's action whole more often than it is
    /// retried: the step failed (docs/semantics.md#an-action-redis-refused-whole).
    Failed,
}

impl DropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Cancelled => "cancelled",
            Self::Restarted => "restarted",
            Self::WhenFalse => "when-false",
            Self::Replay(reason) | Self::Reloaded(reason) => reason.as_str(),
            Self::TooLate => "too-late",
            Self::Undecodable => "undecodable",
            Self::Foreign => "foreign",
            Self::ValueFailed => "value-failed",
            Self::Failed => "failed",
        }
    }
}

/// Why replay removed a record instead of resuming it (docs/semantics.md#durability-and-replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplayDropReason {
    RuleGone,
    StepGone,
    Fingerprint,
    TooLate,
    TooEarly,
    /// Another record of the same rule won under its concurrency policy
    /// (`restart` keeps the later record, `drop`/`queue` the first).
    Concurrency,
    /// No run writes such a record: its step has no `after` or is not
    /// durable, or its pass is beyond the rule's repeat count.
    NeverWritten,
}

impl ReplayDropReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RuleGone => "rule-gone",
            Self::StepGone => "step-gone",
            Self::Fingerprint => "fingerprint",
            Self::TooLate => "too-late",
            Self::TooEarly => "too-early",
            Self::Concurrency => "concurrency",
            Self::NeverWritten => "never-written",
        }
    }

    /// Why, in words, for log lines.
    pub fn describe(self) -> &'static str {
        match self {
            Self::RuleGone => "its rule is not in the bundle",
            Self::StepGone => "its rule has no step at that index",
            Self::Fingerprint => "the step changed since it was written (fingerprint differs)",
            Self::TooLate => "it is more than the replay window past due",
            Self::TooEarly => {
                "it is dated further ahead than its step's `after` allows (the clock went backwards)"
            }
            Self::Concurrency => "another record of the rule was kept under its concurrency policy",
            Self::NeverWritten => {
                "ruled never writes such a record (its step has no `after` or is not durable, or its pass is past the rule's repeat count)"
            }
        }
    }
}

/// How a run ended (docs/simulation.md's `run-end` reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    Done,
    Cancelled,
    Restarted,
    WhenFalse,
    Failed,
    Refused,
    Stopped,
    /// Its step waited in the due backlog past the replay window.
    TooLate,
    /// A live reload changed or removed the step the run was at
    /// (docs/semantics.md#live-reload).
    Reloaded,
    /// A guard refused its action (docs/safety.md#guards).
    Guarded,
    /// A limit refused its action (docs/safety.md#limits).
    Limited,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Cancelled => "cancelled",
            Self::Restarted => "restarted",
            Self::WhenFalse => "when-false",
            Self::Failed => "failed",
            Self::Refused => "refused",
            Self::Stopped => "stopped",
            Self::TooLate => "too-late",
            Self::Reloaded => "reloaded",
            Self::Guarded => "guarded",
            Self::Limited => "limited",
        }
    }
}

/// What happened to a trigger that did not start a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TriggerOutcome {
    /// `drop` policy, a run is live.
    Dropped,
    /// `queue` policy, held in the backlog.
    Queued,
    /// `queue` policy, backlog full; counted in `refused`.
    Refused,
    /// Within the cooldown.
    Suppressed,
}

impl TriggerOutcome {
    pub fn kind(self) -> &'static str {
        match self {
            Self::Dropped => "trigger-dropped",
            Self::Queued => "trigger-queued",
            Self::Refused => "trigger-refused",
            Self::Suppressed => "trigger-suppressed",
        }
    }
}

/// Why a matching event did not start a run (docs/simulation.md#explain):
/// the engine notes one of these per decision when
/// [`EngineConfig::explain`](crate::EngineConfig::explain) is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NonFireReason {
    /// The rule's `when` was false for the event.
    WhenFalse,
    /// The rule's `when` failed to evaluate (counted as false).
    WhenError,
    /// The event is held in a new debounce window.
    DebounceHeld,
    /// A newer event replaced the held one and restarted the window.
    DebounceReset,
    /// `for`: `when` is true but has not stayed true that long yet.
    HoldPending,
    /// `for`: the hold already fired; `when` must be false once before a
    /// new hold starts.
    HoldFired,
    /// Within the cooldown.
    Cooldown,
    /// `drop` policy, a run is live.
    Dropped,
    /// `queue` policy, held in the backlog.
    Queued,
    /// `queue` policy, backlog full.
    Refused,
    /// The rule is disabled (replay-only).
    RuleDisabled,
    /// The rule's breaker is tripped (docs/safety.md#the-breaker).
    Tripped,
    /// `for`: a change of a state pair the `when` reads, judged against
    /// the held (or fired) event, left it true: the hold goes on (or
    /// stays fired).
    HoldKept,
    /// `for`: a change of a state pair the `when` reads made it false (or
    /// fail) for the held (or fired) event: the hold ended without firing
    /// (or the rule that fired is re-armed).
    HoldEnded,
}

impl NonFireReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WhenFalse => "when-false",
            Self::WhenError => "when-error",
            Self::DebounceHeld => "debounce-held",
            Self::DebounceReset => "debounce-reset",
            Self::HoldPending => "hold-pending",
            Self::HoldFired => "hold-fired",
            Self::Cooldown => "cooldown",
            Self::Dropped => "dropped",
            Self::Queued => "queued",
            Self::Refused => "refused",
            Self::RuleDisabled => "rule-disabled",
            Self::Tripped => "tripped",
            Self::HoldKept => "hold-kept",
            Self::HoldEnded => "hold-ended",
        }
    }
}

impl From<TriggerOutcome> for NonFireReason {
    fn from(outcome: TriggerOutcome) -> Self {
        match outcome {
            TriggerOutcome::Dropped => Self::Dropped,
            TriggerOutcome::Queued => Self::Queued,
            TriggerOutcome::Refused => Self::Refused,
            TriggerOutcome::Suppressed => Self::Cooldown,
        }
    }
}

/// What kind of thing a note says happened: docs/simulation.md's `kind` of its
/// line (`record-kept` is ours).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoteKind {
    NonFire,
    RunStart,
    RunEnd,
    StepSkipped,
    Trigger(TriggerOutcome),
    ReplayResume,
    ReplayDrop,
    RecordKept,
    DueWait,
    FinallyStart,
}

impl NoteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NonFire => "non-fire",
            Self::RunStart => "run-start",
            Self::RunEnd => "run-end",
            Self::StepSkipped => "step-skipped",
            Self::Trigger(outcome) => outcome.kind(),
            Self::ReplayResume => "replay-resume",
            Self::ReplayDrop => "replay-drop",
            Self::RecordKept => "record-kept",
            Self::DueWait => "due-wait",
            Self::FinallyStart => "finally-start",
        }
    }
}

/// The reason a note carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoteReason {
    RunEnd(EndReason),
    ReplayDrop(ReplayDropReason),
    NonFire(NonFireReason),
}

impl NoteReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunEnd(reason) => reason.as_str(),
            Self::ReplayDrop(reason) => reason.as_str(),
            Self::NonFire(reason) => reason.as_str(),
        }
    }
}

/// Observable things that happened, for the simulator's output and the
/// service's debug log. They change nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// A matching event did not start a run, and why; only with
    /// [`EngineConfig::explain`](crate::EngineConfig::explain).
    NonFire {
        rule: Arc<str>,
        reason: NonFireReason,
        /// What the rule's `when` read when it was judged for the event
        /// (docs/semantics.md#what-a-when-read): false, failed, or true
        /// and then held, suppressed or queued; empty for the rest.
        reads: Vec<Read>,
    },
    RunStart {
        run: Arc<str>,
        rule: Arc<str>,
        /// What the rule's `when` read when it was found true for the
        /// run's event; only with
        /// [`EngineConfig::explain`](crate::EngineConfig::explain), and
        /// only for a run started by the event just judged.
        reads: Vec<Read>,
    },
    RunEnd {
        run: Arc<str>,
        rule: Arc<str>,
        reason: EndReason,
    },
    /// A step's `when` was false (or failed to evaluate): the run ends.
    StepSkipped {
        run: Arc<str>,
        rule: Arc<str>,
        step: u32,
        pass: u32,
        /// `step` counts the finally steps (docs/semantics.md#finally).
        finally: bool,
        /// What the step's `when` read; only with
        /// [`EngineConfig::explain`](crate::EngineConfig::explain).
        reads: Vec<Read>,
    },
    Trigger {
        rule: Arc<str>,
        outcome: TriggerOutcome,
    },
    ReplayResume {
        run: Arc<str>,
        rule: Arc<str>,
        step: u32,
        pass: u32,
        fire_at: i64,
    },
    ReplayDrop {
        id: Arc<str>,
        rule: Arc<str>,
        step: u32,
        pass: u32,
        reason: ReplayDropReason,
    },
    /// At stop: this waiting run's record stays for the next start.
    RecordKept { run: Arc<str>, rule: Arc<str> },
    /// A durable step came due while the pool was full: it keeps its
    /// record and waits in the due backlog for room
    /// (docs/semantics.md#due-steps-the-pool-refused).
    DueWait {
        run: Arc<str>,
        rule: Arc<str>,
        step: u32,
        pass: u32,
    },
    /// `cancel-on` ended the run's steps: its finally steps run next,
    /// after any action it handed over has finished
    /// (docs/semantics.md#finally).
    FinallyStart { run: Arc<str>, rule: Arc<str> },
}

/// The fields a note shows wherever it is printed (the simulator's line,
/// the service's log line), in that output order: the one place that maps
/// each variant to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoteFields<'a> {
    pub rule: &'a str,
    /// The run id; for [`Note::ReplayDrop`] the removed record's id, which
    /// is its run's.
    pub run: Option<&'a str>,
    pub step: Option<u32>,
    pub pass: Option<u32>,
    /// `step` counts the rule's finally steps (docs/semantics.md#finally).
    pub finally: bool,
    /// [`Note::ReplayResume`] only: when the step was due, Unix ms.
    pub fire_at: Option<i64>,
    pub reason: Option<NoteReason>,
    /// What a `when` read: [`Note::NonFire`], [`Note::StepSkipped`],
    /// [`Note::RunStart`].
    pub reads: &'a [Read],
}

impl<'a> NoteFields<'a> {
    fn new(rule: &'a str, run: Option<&'a str>) -> Self {
        Self {
            rule,
            run,
            step: None,
            pass: None,
            finally: false,
            fire_at: None,
            reason: None,
            reads: &[],
        }
    }
}

impl Note {
    /// The note's fields; see [`NoteFields`].
    pub fn fields(&self) -> NoteFields<'_> {
        match self {
            Self::RunStart { run, rule, reads } => NoteFields {
                reads,
                ..NoteFields::new(rule, Some(run))
            },
            Self::RecordKept { run, rule } | Self::FinallyStart { run, rule } => {
                NoteFields::new(rule, Some(run))
            }
            Self::RunEnd { run, rule, reason } => NoteFields {
                reason: Some(NoteReason::RunEnd(*reason)),
                ..NoteFields::new(rule, Some(run))
            },
            Self::StepSkipped {
                run,
                rule,
                step,
                pass,
                finally,
                reads,
            } => NoteFields {
                step: Some(*step),
                pass: Some(*pass),
                finally: *finally,
                reads,
                ..NoteFields::new(rule, Some(run))
            },
            Self::DueWait {
                run,
                rule,
                step,
                pass,
            } => NoteFields {
                step: Some(*step),
                pass: Some(*pass),
                ..NoteFields::new(rule, Some(run))
            },
            Self::Trigger { rule, .. } => NoteFields::new(rule, None),
            Self::NonFire {
                rule,
                reason,
                reads,
            } => NoteFields {
                reason: Some(NoteReason::NonFire(*reason)),
                reads,
                ..NoteFields::new(rule, None)
            },
            Self::ReplayResume {
                run,
                rule,
                step,
                pass,
                fire_at,
            } => NoteFields {
                step: Some(*step),
                pass: Some(*pass),
                fire_at: Some(*fire_at),
                ..NoteFields::new(rule, Some(run))
            },
            Self::ReplayDrop {
                id,
                rule,
                step,
                pass,
                reason,
            } => NoteFields {
                step: Some(*step),
                pass: Some(*pass),
                reason: Some(NoteReason::ReplayDrop(*reason)),
                ..NoteFields::new(rule, Some(id))
            },
        }
    }

    /// The kind of the note's output line; see [`NoteKind`].
    pub fn kind(&self) -> NoteKind {
        match self {
            Self::NonFire { .. } => NoteKind::NonFire,
            Self::RunStart { .. } => NoteKind::RunStart,
            Self::RunEnd { .. } => NoteKind::RunEnd,
            Self::StepSkipped { .. } => NoteKind::StepSkipped,
            Self::Trigger { outcome, .. } => NoteKind::Trigger(*outcome),
            Self::ReplayResume { .. } => NoteKind::ReplayResume,
            Self::ReplayDrop { .. } => NoteKind::ReplayDrop,
            Self::RecordKept { .. } => NoteKind::RecordKept,
            Self::DueWait { .. } => NoteKind::DueWait,
            Self::FinallyStart { .. } => NoteKind::FinallyStart,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

/// A log line; the message never includes an event payload.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub level: Level,
    pub rule: Option<Arc<str>>,
    pub step: Option<u32>,
    /// `step` counts the rule's finally steps (docs/semantics.md#finally).
    pub finally: bool,
    /// The run (or pending record) the line is about, for a log field; the
    /// message names it already where it matters.
    pub run: Option<Arc<str>>,
    /// A stable short name of what went wrong, for a log field
    /// ([`RecordError::code`](super::RecordError::code)).
    pub code: Option<&'static str>,
    pub message: String,
}

impl fmt::Display for LogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(rule) = &self.rule {
            write!(f, "rule {rule}")?;
            if let Some(step) = self.step {
                let list = if self.finally { "finally step" } else { "step" };
                write!(f, " {list} {step}")?;
            }
            f.write_str(": ")?;
        }
        f.write_str(&self.message)
    }
}
