//! An action Redis refused whole (docs/semantics.md#an-action-redis-refused-whole):
//! the Redis lane's transaction was discarded (out of memory, a
//! transaction error) or could not be sent, so the action did not run and
//! its pending record was not removed. The engine decides what follows,
//! for the service and the simulator alike: the step is tried again after
//! a back-off, its run keeping its record, or after [`RETRIES`] retries it
//! ends `failed` and its record goes. Either way no record is left without
//! a timer.

use crate::timers::TimerKind;
use crate::{DropReason, Effect, EndReason, Engine, JobId, Level, LogLine, Now, Phase};
use std::sync::Arc;

/// How many times a step whose action Redis refused whole is tried again
/// before its run ends `failed`.
pub const RETRIES: u8 = 5;

/// The wait before the first retry; each next one waits twice as long
/// (1 s, 2 s, 4 s, 8 s, 16 s: 31 s in all, well inside the default
/// replay window).
pub const FIRST_BACKOFF_NS: u64 = 1_000_000_000;

/// The wait before retry `n` (from 1).
pub fn backoff_ns(n: u8) -> u64 {
    FIRST_BACKOFF_NS.saturating_mul(1 << u32::from(n.saturating_sub(1)).min(20))
}

impl Engine {
    /// The job's action was not performed and its record (if the job owns
    /// one) not removed: Redis refused the transaction that carried it
    /// whole, or it could not be sent. The step is tried again after
    /// [`backoff_ns`], at most [`RETRIES`] times (counted in `retried`),
    /// then its run ends `failed` (counted in `failed`) and its record
    /// goes. A run that was cancelled meanwhile goes on to its finally
    /// steps; one that ended drops the record the job held (`record`, the
    /// job's [`crate::Job::record_to_drop_at_start`]). The driver has
    /// reported the job started ([`Engine::action_started`]), as the lane
    /// does when it sends a batch: that start is taken back from
    /// `dispatched`. After
    /// [`Engine::stop`] the record stays for the next start.
    pub fn action_not_performed(
        &mut self,
        now: Now,
        job: JobId,
        record: Option<Arc<str>>,
        message: &str,
    ) {
        // Reported started as its batch was sent (`dispatched` counted it):
        // it did not start after all.
        self.counters.dispatched = self.counters.dispatched.saturating_sub(1);
        let Some(owner) = self.rules.job_done(job) else {
            self.counters.failed += 1;
            return;
        };
        let rule = owner.rule as usize;
        self.focus_run(rule, owner.serial);
        let name = self.name(rule);
        let at = owner.at();
        if self.stopped || !self.is_acting(rule, owner.serial, job) {
            self.counters.failed += 1;
            let line = format!("action not performed: {message}");
            self.not_performed_line(&name, at.step, at.finally, line);
            if let Some(id) = record.filter(|_| !self.stopped) {
                self.drop_failed_record(id, &name);
            }
            if !self.stopped && self.is_draining(rule, owner.serial, job) {
                self.finally_after_drain(rule, now);
            }
            return;
        }
        let Some(run) = self.rules.run_mut(rule) else {
            return;
        };
        // The record is still in the store: the run holds it again.
        run.owns_record |= owner.record;
        if run.retries >= RETRIES {
            let (serial, id) = (run.serial, Arc::clone(&run.id));
            let owned = std::mem::take(&mut run.owns_record);
            self.counters.failed += 1;
            let attempts = u32::from(RETRIES) + 1;
            let line = format!("action failed: not performed in {attempts} attempts: {message}");
            self.not_performed_line(&name, at.step, at.finally, line);
            self.traces
                .step_finished(rule, serial, at, now.time, Err(message));
            if owned {
                self.drop_failed_record(id, &name);
            }
            self.end_run(rule, EndReason::Failed, now);
            return;
        }
        run.retries += 1;
        let (retry, delay) = (run.retries, backoff_ns(run.retries));
        self.counters.retried += 1;
        let token = self.arm(now.time.plus_nanos(delay), rule, TimerKind::Run);
        if let Some(run) = self.rules.run_mut(rule) {
            run.phase = Phase::Waiting { token };
        }
        let line = format!(
            "action not performed ({message}): retry {retry} of {RETRIES} in {}s",
            delay / 1_000_000_000
        );
        self.not_performed_line(&name, at.step, at.finally, line);
    }

    fn not_performed_line(&mut self, rule: &Arc<str>, step: u32, finally: bool, message: String) {
        self.effects.push_back(Effect::Log(LogLine {
            level: Level::Warn,
            rule: Some(Arc::clone(rule)),
            step: Some(step),
            finally,
            run: None,
            code: None,
            message,
        }));
    }

    /// Record `id` goes: its step has run its course.
    fn drop_failed_record(&mut self, id: Arc<str>, rule: &Arc<str>) {
        self.effects.push_back(Effect::DropRecord {
            id,
            rule: Some(Arc::clone(rule)),
            reason: DropReason::Failed,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_one_second() {
        let waits: Vec<u64> = (1..=RETRIES)
            .map(|n| backoff_ns(n) / 1_000_000_000)
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16]);
    }
}
