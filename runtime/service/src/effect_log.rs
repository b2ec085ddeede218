//! How the engine's log lines and notes read in the journal (docs/service.md#start-and-stop,
//! docs/service.md "Logs"): levels, messages and fields, through the
//! per-rule [`Throttle`].

use crate::logging::{self, Throttle};
use crate::pool::Refused;
use ruled_engine::pool::Lane;
use ruled_engine::{DropReason, Effect, EndReason, Job, Level, Note, NoteReason, TriggerOutcome};
use std::borrow::Cow;
use std::time::Instant;

/// Logs an effect as a line: the engine's log lines and notes always; a
/// submit or record write only when it is not performed (at stop).
pub fn log_effect(effect: &Effect, throttle: &mut Throttle) {
    match effect {
        Effect::Log(line) => {
            let level = match line.level {
                Level::Error => tracing::Level::ERROR,
                Level::Warn => tracing::Level::WARN,
                Level::Info => tracing::Level::INFO,
                Level::Debug => tracing::Level::DEBUG,
            };
            let admitted =
                level == tracing::Level::DEBUG || throttle.admit(line.rule.as_deref(), level);
            // An absent field (`None`) is left out of the line.
            let run = line.run.as_deref().map(tracing::field::display);
            let reason = line.code;
            match (admitted, line.level) {
                (false, _) | (true, Level::Debug) => tracing::debug!(run, reason, "{line}"),
                (true, Level::Error) => tracing::error!(run, reason, "{line}"),
                (true, Level::Warn) => tracing::warn!(run, reason, "{line}"),
                (true, Level::Info) => tracing::info!(run, reason, "{line}"),
            }
        }
        Effect::Note(note) => log_note(note, throttle),
        Effect::Submit(job) => {
            tracing::debug!(rule = %job.rule, step = job.step, "not submitted: stopping")
        }
        Effect::PutRecord { id, .. } => tracing::debug!(run = %id, "record not written: stopping"),
        Effect::Toast { channel, .. } => {
            tracing::debug!(%channel, "toast not published: stopping")
        }
        Effect::DropRecord { id, .. } => tracing::debug!(run = %id, "record not removed: stopping"),
        Effect::Publish(events) => {
            tracing::debug!(
                events = events.len(),
                "derived events not published: stopping"
            )
        }
        Effect::Poll { hash, .. } => tracing::debug!(hash = %hash, "poll not read: stopping"),
        Effect::ScheduleFired { rule, .. } => {
            tracing::debug!(rule = %rule, "schedule fire not written: stopping")
        }
    }
}

/// A note as one log line: the note's own fields ([`Note::fields`]) and a
/// level and message per variant (below).
fn log_note(note: &Note, throttle: &mut Throttle) {
    let Some((info, message)) = note_message(note) else {
        return;
    };
    let fields = note.fields();
    let info = info && throttle.admit(Some(fields.rule), tracing::Level::INFO);
    let run = fields.run.map(tracing::field::display);
    // An absent field (`None`) is left out of the line.
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                rule = %fields.rule,
                run,
                step = fields.step,
                finally = fields.finally.then_some(true),
                pass = fields.pass,
                fire_at = fields.fire_at,
                reason = fields.reason.map(NoteReason::as_str),
                "{message}"
            )
        };
    }
    if info {
        line!(info);
    } else {
        line!(debug);
    }
}

/// Whether a note is logged at `info` (else `debug`), and its message;
/// `None`: not logged. `info` says that a rule fired, or that a run ended
/// other than `done`; a run's routine end and ignored triggers are
/// `debug`, to keep the journal (flash) quiet on a busy bus. Failures are logged by the engine at `warn`
/// already.
fn note_message(note: &Note) -> Option<(bool, Cow<'static, str>)> {
    let (info, message) = match note {
        Note::RunStart { .. } => (true, "run started"),
        // Every end but `done` says why at info (its `reason`): a run that
        // did not walk all its steps is news (docs/service.md#logs).
        Note::RunEnd { reason, .. } => (*reason != EndReason::Done, "run ended"),
        Note::StepSkipped { .. } => (false, "step's `when` is false: run ends"),
        // A cancel that a rule's finally steps answer (docs/semantics.md#finally).
        Note::FinallyStart { .. } => (true, "run cancelled: its finally steps run"),
        Note::Trigger { outcome, .. } => match outcome {
            TriggerOutcome::Suppressed => (false, "trigger ignored: within cooldown"),
            TriggerOutcome::Dropped => {
                (false, "trigger dropped: a run is live (concurrency `drop`)")
            }
            TriggerOutcome::Queued => {
                (false, "trigger queued: a run is live (concurrency `queue`)")
            }
            // The engine logs the refusal at warn, with the backlog size.
            TriggerOutcome::Refused => return None,
        },
        // A resumed record is a run start like any other (it counts in the
        // rule's `runs`); the fields say where it resumes.
        Note::ReplayResume { .. } => (true, "run started (replayed)"),
        Note::ReplayDrop { reason, .. } => {
            let message = format!("pending record removed at replay: {}", reason.describe());
            return Some((true, Cow::Owned(message)));
        }
        Note::RecordKept { .. } => (true, "stopping: pending record kept for the next start"),
        // Routine under a burst (thousands of overdue records at start);
        // the step still runs, or ends `too-late` at info.
        Note::DueWait { .. } => (false, "step due, worker pool full: waiting for room"),
        // Only with `EngineConfig::explain`, which the service leaves off.
        Note::NonFire { .. } => (false, "trigger did not fire"),
    };
    Some((info, Cow::Borrowed(message)))
}

/// The debug line of a record removal the engine decided. A replay removal
/// was logged by its note, at info, and an undecodable record by the
/// engine's warn line.
pub fn log_record_drop(id: &str, rule: Option<&str>, reason: DropReason) {
    if !matches!(
        reason,
        DropReason::Replay(_) | DropReason::Undecodable | DropReason::Foreign
    ) {
        tracing::debug!(
            run = %id,
            rule = rule.map(tracing::field::display),
            reason = reason.as_str(),
            "removing pending record"
        );
    }
}

/// The line after `submitting action` when the job waits for a busy
/// worker (or for the batch the Redis lane is sending); the worker (the
/// lane) says `queued action started` when it takes it.
pub fn log_queued(run: &str, lane: Lane) {
    match lane {
        Lane::Workers => tracing::debug!(run, "action queued: every worker is busy"),
        Lane::Redis => tracing::debug!(run, "action queued: the redis lane is sending a batch"),
    }
}

/// One line for an action the pool refused, with the cause the engine
/// does not know. A durable step refused by a full pool is not lost: it
/// waits in the engine's due backlog (docs/semantics.md#due-steps-the-pool-refused),
/// said at `debug` only, since thousands may come at once at start.
pub fn log_refused(job: &Job, cause: Refused, throttle: &mut Throttle) {
    if job.drop_record.is_some() && cause == Refused::QueueFull {
        tracing::debug!(
            rule = %job.rule, step = job.step, pass = job.pass, run = %job.run,
            "worker pool full: the durable step waits for room"
        );
        return;
    }
    logging::log_held(&throttle.roll(Instant::now()));
    let admitted = throttle.admit(Some(&job.rule), tracing::Level::WARN);
    macro_rules! refused {
        ($level:ident) => {
            tracing::$level!(
                rule = %job.rule,
                step = job.step,
                finally = job.finally().then_some(true),
                pass = job.pass,
                run = %job.run,
                cause = %cause,
                "worker pool refused the action; the run ends (counted in `dropped`)"
            )
        };
    }
    if admitted {
        refused!(warn);
    } else {
        refused!(debug);
    }
}

/// Logs an event that is not handled: the channel and the reason, never
/// the payload (docs/semantics.md#events). A publisher spamming garbage must not
/// flood the journal: these lines share the budget of lines of no rule.
pub fn log_skipped_event(channel: &str, why: &str, throttle: &mut Throttle) {
    logging::log_held(&throttle.roll(Instant::now()));
    if throttle.admit(None, tracing::Level::WARN) {
        tracing::warn!(channel, "skipping an event {why}");
    } else {
        tracing::debug!(channel, "skipping an event {why}");
    }
}
