//! A live run (docs/semantics.md#walking-a-sequence): where it is
//! ([`Phase`]), who a job handed over belongs to ([`JobOwner`]), and the
//! walk through its steps: park on a step's `after` (its record first when
//! durable), judge the step's `when`, hand it to the pool, move on, end.

use crate::record::RecordRef;
use crate::time::{nanos_to_millis_ceil, Time};
use crate::timers::TimerKind;
use crate::why::KeptReads;
use crate::{
    finally, trace, values, DropReason, Effect, EndReason, Engine, Job, JobId, Level, LogLine,
    Note, Now, RecordWrite, StepAction, WhenRead, WhenResult, EVAL_ERROR_CODE,
};
use rulecore::bundle::{Rule, Step};
use rulecore::event::Event;
use rulecore::vm::Read;
use std::sync::Arc;

/// Where a live run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
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
pub(crate) struct Run {
    /// Engine-local serial, to recognise stale timers and jobs.
    pub(crate) serial: u64,
    pub(crate) id: Arc<str>,
    pub(crate) event: Arc<Event>,
    pub(crate) step: u32,
    pub(crate) pass: u32,
    /// In its finally steps (docs/semantics.md#finally): `step` counts
    /// them.
    pub(crate) finally: bool,
    pub(crate) phase: Phase,
    /// The run (not a job) owns a pending record in the store.
    pub(crate) owns_record: bool,
    /// The owned record's `fire-at` (Unix ms), to write it again after a
    /// reconnect ([`Engine::rewrite_records`]).
    pub(crate) fire_at: i64,
    /// Times the current step was tried again after Redis refused its
    /// action whole ([`crate::retry`]).
    pub(crate) retries: u8,
    /// When its current pass started: `repeat.period` counts from here
    /// (docs/rules.md#repeat).
    pub(crate) pass_start: Time,
}

/// Who a job handed over belongs to: its rule, its run's serial, and its
/// step (the run may have moved on, or ended, by the time it finishes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobOwner {
    pub(crate) rule: u32,
    pub(crate) serial: u64,
    pub(crate) step: u32,
    /// The job owns its step's pending record: refused, it waits in the
    /// due backlog instead of ending its run.
    pub(crate) record: bool,
    pub(crate) pass: u32,
    /// `step` is a finally step (docs/semantics.md#finally).
    pub(crate) finally: bool,
}

impl JobOwner {
    /// The step's trace record.
    pub(crate) fn at(&self) -> trace::At {
        trace::At {
            step: self.step,
            pass: self.pass,
            finally: self.finally,
        }
    }
}

impl Run {
    /// The step's trace record.
    pub(crate) fn at(&self) -> trace::At {
        trace::At {
            step: self.step,
            pass: self.pass,
            finally: self.finally,
        }
    }

    /// The step it is at: one of `spec`'s steps, or in its finally steps
    /// one of those.
    pub(crate) fn step_of<'p>(&self, spec: &'p Rule) -> Option<&'p Step> {
        let list = if self.finally {
            spec.finally()
        } else {
            &spec.steps
        };
        list.get(self.step as usize)
    }
}

impl Engine {
    /// A run was installed in `rule`'s slot: its trace starts, with what
    /// the rule's `when` read when it was found true for the run's event
    /// (`when`; nothing for a replayed run or a held or queued event).
    pub(crate) fn trace_run_started(
        &mut self,
        rule: usize,
        now: Now,
        replayed: bool,
        when: KeptReads,
    ) {
        if let Some(run) = self.rules.run(rule) {
            let (serial, id, event) = (run.serial, &run.id, &run.event);
            let start = trace::Start {
                now: now.time,
                replayed,
                when,
            };
            self.traces.run_started(rule, serial, id, event, start);
        }
    }

    pub(crate) fn start_run(&mut self, rule: usize, event: Arc<Event>, now: Now) {
        let name = self.name(rule);
        let id = self.rules.next_run_id(&name, &self.config.epoch);
        self.rules.install(rule, id, event, 0, 0);
        let (reads, kept) = self.take_judged(rule);
        if let Some(run) = self.rules.run(rule) {
            let run = Arc::clone(&run.id);
            self.note(Note::RunStart {
                run,
                rule: name,
                reads,
            });
        }
        self.trace_run_started(rule, now, false, kept);
        self.enter_step(rule, now);
    }

    /// The run reached its current step: park on its `after` (writing the
    /// record first when durable), or submit it now.
    pub(crate) fn enter_step(&mut self, rule: usize, now: Now) {
        let payload = Arc::clone(&self.payload);
        let spec: &Rule = &payload.rules[rule];
        let Some(run) = self.rules.run_mut(rule) else {
            return;
        };
        // A new step: its own retries (docs/semantics.md#an-action-redis-refused-whole).
        run.retries = 0;
        if run.step == 0 && !run.finally {
            run.pass_start = now.time;
        }
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
        self.wait_until(rule, now.time.plus_nanos(step.after_ns), durable, now);
    }

    /// The live run waits for its current step until `due`: one timer,
    /// the run's phase, and the trace's waiting step.
    pub(crate) fn wait_until(&mut self, rule: usize, due: Time, durable: bool, now: Now) {
        let token = self.arm(due, rule, TimerKind::Run);
        if let Some(run) = self.rules.run_mut(rule) {
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
    pub(crate) fn put_record(
        &mut self,
        rule: usize,
        source: &str,
        fire_at: i64,
        write: RecordWrite,
    ) {
        let name = self.name(rule);
        let Some(run) = self.rules.run(rule) else {
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
            // A keyed rule's run is in its slot whenever it acts: the
            // slot's key is the run's (docs/rules.md#keyed-runs).
            key: self.keys.current(rule).map(|key| &**key),
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
                if let Some(run) = self.rules.run_mut(rule) {
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
    pub(crate) fn submit_step(&mut self, rule: usize, now: Now) {
        let payload = Arc::clone(&self.payload);
        let spec = &payload.rules[rule];
        let Some(run) = self.rules.run(rule) else {
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
            // The simulator's `step-skipped` or `action` line shows them
            // when explaining; the trace keeps its own.
            let noted = self.noted_reads(program, &event);
            if let Some(run) = self.rules.run(rule) {
                let serial = run.serial;
                let when = WhenResult::of(&result);
                let kept = self.kept_reads(program, &event);
                self.traces.step_when(rule, serial, at, when, kept);
            }
            if result != Ok(true) {
                self.skip_step(rule, now, noted);
                return;
            }
            self.scratch.step_read = Some(noted);
        }
        if self.due_goes_behind(rule) {
            // Earlier due steps wait for room: this one waits behind them.
            self.scratch.step_read = None;
            self.due_wait(rule, now);
            return;
        }
        self.hand_over(rule, now);
        self.scratch.step_read = None;
    }

    /// Hands the live run's current step to the pool (`when` already
    /// checked): the job takes over the run's record.
    pub(crate) fn hand_over(&mut self, rule: usize, now: Now) {
        let Some(run) = self.rules.run(rule) else {
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
        // The step's action looked up once (a `StepAction` finds it in
        // the bundle at each look).
        let spec: &rulecore::bundle::Action = &action;
        let computed = match self.run_values(rule, spec) {
            Ok(computed) => computed,
            Err(error) => {
                self.value_failed(rule, &error, now);
                return;
            }
        };
        // The envelope (docs/safety.md): a limit refuses here, on the
        // engine's clock; guards are judged by the worker on a fresh read.
        let guard = if self.payload.envelope.is_empty() {
            None
        } else {
            let performed = computed.as_deref().unwrap_or(spec);
            if !self.limit_admits(rule, performed, now) {
                self.end_run(rule, EndReason::Limited, now);
                return;
            }
            crate::guard::GuardCheck::of(&self.payload, performed)
        };
        let name = self.name(rule);
        // The record's ownership moves to the job.
        let Some((job, run, record)) = self.rules.make_job(rule) else {
            return;
        };
        let (index, pass, event) = (run.step, run.pass, Arc::clone(&run.event));
        let at = run.at();
        let drop_record = record.then(|| Arc::clone(&run.id));
        self.traces.step_submitted(rule, run.serial, at, now.time);
        let submit = Job {
            id: JobId(job),
            run: Arc::clone(&run.id),
            rule: name,
            step: index,
            pass,
            action,
            computed,
            event,
            drop_record,
            guard,
            when_read: std::mem::take(&mut self.scratch.step_read)
                .filter(|reads| !reads.is_empty())
                .map(|reads| Box::new(WhenRead(reads.into_boxed_slice()))),
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
        let Some(run) = self.rules.run(rule) else {
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
        let Some(run) = self.rules.run_mut(rule) else {
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
    fn skip_step(&mut self, rule: usize, now: Now, reads: Vec<Read>) {
        let name = self.name(rule);
        let Some(run) = self.rules.run_mut(rule) else {
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
            reads,
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
    pub(crate) fn advance(&mut self, rule: usize, now: Now) {
        let payload = Arc::clone(&self.payload);
        let spec = &payload.rules[rule];
        let Some(run) = self.rules.run_mut(rule) else {
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
            // `period` counts from the pass's start: a pass that took longer
            // is followed at once, never overlapped or skipped
            // (docs/rules.md#repeat); `every` is the pause after the pass.
            let repeat = spec.repeat();
            let next = match repeat.period_ns {
                0 => now.time.plus_nanos(repeat.every_ns),
                period => run.pass_start.plus_nanos(period),
            };
            if next <= now.time {
                run.pass += 1;
                run.step = 0;
                self.enter_step(rule, now);
            } else {
                // The gap between passes is a plain timer: not durable.
                let token = self.arm(next, rule, TimerKind::Run);
                if let Some(run) = self.rules.run_mut(rule) {
                    run.phase = Phase::Gap { token };
                }
            }
        } else {
            self.end_run(rule, EndReason::Done, now);
        }
    }

    /// Ends the rule's live run. Cancel and restart drop its timer and its
    /// record; a `queue` rule then starts its oldest held trigger.
    pub(crate) fn end_run(&mut self, rule: usize, reason: EndReason, now: Now) {
        let Some(run) = self.rules.take_run(rule) else {
            return;
        };
        let name = self.name(rule);
        self.traces.run_ended(rule, run.serial, now.time, reason);
        match run.phase {
            Phase::Waiting { .. } | Phase::Gap { .. } => self.timers.disarm(),
            Phase::Due { .. } => {
                self.timers.disarm();
                self.records.forget_due(run.fire_at, &run.id);
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
}

impl Engine {
    /// Stop (docs/service.md#start-and-stop) for the state in `rule`'s
    /// slot: waiting parts dropped, the run ended, its record kept.
    pub(crate) fn stop_run(&mut self, rule: usize) {
        let Some(run) = self.rules.stop(rule) else {
            return;
        };
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
