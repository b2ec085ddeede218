//! The pool's reports of a job handed over (docs/engine.md): started,
//! finished, refused or abandoned; the run it belongs to moves on, ends,
//! or waits for room.

use crate::{Effect, EndReason, Engine, JobId, Level, LogLine, Now, Phase, SubmitOutcome};

impl Engine {
    /// A job's action started on a worker (the driver has removed or is
    /// removing its `drop_record`). Valid after [`Engine::stop`] too.
    /// Only counted: the run moves on when the action finishes.
    pub fn action_started(&mut self, job: JobId) {
        self.counters.dispatched += 1;
        if let Some(owner) = self.rules.job(job) {
            let (rule, at) = (owner.rule as usize, owner.at());
            let started = SubmitOutcome::Started;
            self.traces.step_handled(rule, owner.serial, at, started);
        }
    }

    /// A job's action finished. Valid after [`Engine::stop`] (counted only).
    pub fn action_finished(&mut self, now: Now, job: JobId, result: Result<(), String>) {
        let owner = self.rules.job_done(job);
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
        // A keyed rule: the run's key into the slot (docs/rules.md#keyed-runs).
        self.focus_run(rule, serial);
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
        let Some(owner) = self.rules.job_done(job) else {
            self.counters.dropped += 1;
            return;
        };
        let rule = owner.rule as usize;
        self.focus_run(rule, owner.serial);
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
        self.rules.job_done(job);
    }

    pub(crate) fn is_acting(&self, rule: usize, serial: u64, job: JobId) -> bool {
        self.rules
            .run(rule)
            .is_some_and(|run| run.serial == serial && run.phase == Phase::Acting { job: job.0 })
    }
}
