//! Finally steps (docs/semantics.md#finally): what a cancel must still do.
//!
//! When `cancel-on` ends a run before its last step has finished, a rule
//! with `[[rule.finally]]` steps does not end the run: the run's timer and
//! record go as for any cancel, and the run walks its finally steps as its
//! tail, under the same id and event. A step's action already handed to the
//! pool finishes first (the run is `Draining` until then), so a cleanup
//! never overtakes what it cleans up after. The tail is not cancelled again;
//! its end reason is `cancelled` when it walks to its end.

use crate::{DropReason, Effect, EndReason, Engine, JobId, Note, Now, Phase, Run};
use std::sync::Arc;

/// Why a run that walked past its last step ends: `done`, or `cancelled`
/// after its finally steps.
pub(crate) fn walked_past(run: &Run) -> EndReason {
    if run.finally {
        EndReason::Cancelled
    } else {
        EndReason::Done
    }
}

impl Engine {
    /// Step 1 of docs/semantics.md#handling-one-event for the live run of
    /// `rule`, if any: it ends `cancelled`, or, with finally steps, goes on
    /// to them. A run already in its finally steps is left alone.
    pub(crate) fn cancel_run(&mut self, rule: usize, now: Now) {
        let Some(run) = self.rules.run(rule) else {
            return;
        };
        if run.finally {
            return;
        }
        if self.payload.rules[rule].finally().is_empty() {
            self.end_run(rule, EndReason::Cancelled, now);
            return;
        }
        self.begin_finally(rule, now);
    }

    /// The run's steps end here as a cancel ends them (timer disarmed,
    /// record removed, a due step out of the backlog); its finally steps
    /// start now, or once the action it handed over has finished.
    fn begin_finally(&mut self, rule: usize, now: Now) {
        let name = self.name(rule);
        let Some(run) = self.rules.run_mut(rule) else {
            return;
        };
        let phase = run.phase;
        let (id, serial, fire_at) = (Arc::clone(&run.id), run.serial, run.fire_at);
        let record = std::mem::take(&mut run.owns_record);
        run.finally = true;
        run.step = 0;
        run.phase = match phase {
            Phase::Acting { job } => Phase::Draining { job },
            _ => Phase::Deciding,
        };
        match phase {
            Phase::Waiting { .. } | Phase::Gap { .. } => self.timers.disarm(),
            Phase::Due { .. } => {
                self.timers.disarm();
                self.records.forget_due(fire_at, &id);
            }
            Phase::Acting { .. } | Phase::Draining { .. } | Phase::Deciding => {}
        }
        if record {
            self.effects.push_back(Effect::DropRecord {
                id: Arc::clone(&id),
                rule: Some(Arc::clone(&name)),
                reason: DropReason::Cancelled,
            });
        }
        self.traces.run_cancelled(rule, serial, now.time);
        self.note(Note::FinallyStart {
            run: id,
            rule: name,
        });
        if !matches!(phase, Phase::Acting { .. }) {
            self.enter_step(rule, now);
        }
    }

    /// Whether the live run of `rule` (serial `serial`) waits for `job` to
    /// finish before its finally steps.
    pub(crate) fn is_draining(&self, rule: usize, serial: u64, job: JobId) -> bool {
        self.rules
            .run(rule)
            .is_some_and(|run| run.serial == serial && run.phase == Phase::Draining { job: job.0 })
    }

    /// The action the cancelled run was waiting for finished (or never
    /// started): its first finally step comes now.
    pub(crate) fn finally_after_drain(&mut self, rule: usize, now: Now) {
        if let Some(run) = self.rules.run_mut(rule) {
            run.phase = Phase::Deciding;
            self.enter_step(rule, now);
        }
    }
}
