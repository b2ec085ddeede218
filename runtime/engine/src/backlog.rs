//! The due backlog (docs/semantics.md#due-steps-the-pool-refused): durable
//! steps that came due while the worker pool was full. Each keeps its
//! pending record and waits here, earliest `fire-at` first (ties by run id,
//! the order replay takes records in), until the pool has room or the step
//! is more than the replay window past due.
//!
//! Entries are removed eagerly when their run ends, so the backlog holds
//! exactly the runs waiting in it: at most one per rule (a rule has at most
//! one live run), each with a record in the store.

use crate::timers::TimerKind;
use crate::{DropReason, Effect, EndReason, Engine, Note, Now, Phase};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where a waiting step sorts: its record's `fire-at` (Unix ms), then its
/// run id.
type Key = (i64, Arc<str>);

#[derive(Debug, Default)]
pub(crate) struct DueBacklog {
    /// Waiting steps, in the order they are submitted; the value is the
    /// rule's position in the bundle.
    waiting: BTreeMap<Key, u32>,
}

impl DueBacklog {
    pub fn insert(&mut self, fire_at: i64, run: Arc<str>, rule: u32) {
        self.waiting.insert((fire_at, run), rule);
    }

    /// Forgets a waiting step (its run ended); whether it was there.
    pub fn remove(&mut self, fire_at: i64, run: &Arc<str>) -> bool {
        self.waiting.remove(&(fire_at, Arc::clone(run))).is_some()
    }

    /// The earliest waiting step, taken out: its rule and run id.
    pub fn pop_first(&mut self) -> Option<(u32, Arc<str>)> {
        self.waiting.pop_first().map(|((_, run), rule)| (rule, run))
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Every record's `fire-at` moved by `delta_ms` (a wall clock jump):
    /// the order does not change, the keys do.
    pub fn shift(&mut self, delta_ms: i64) {
        if delta_ms == 0 || self.waiting.is_empty() {
            return;
        }
        self.waiting = std::mem::take(&mut self.waiting)
            .into_iter()
            .map(|((fire_at, run), rule)| ((fire_at.saturating_add(delta_ms), run), rule))
            .collect();
    }

    pub fn clear(&mut self) {
        self.waiting.clear();
    }
}

impl Engine {
    /// Durable steps waiting in the due backlog for room in the pool.
    pub fn due_backlog_len(&self) -> usize {
        self.due.len()
    }

    /// The pool accepts `room` more submissions now (an idle worker or a
    /// free queue slot each): the earliest waiting due steps are handed
    /// over, at most `room` of them. Drivers call it when the pool reports
    /// room after it was full; with nothing waiting it does nothing.
    pub fn pool_has_room(&mut self, now: Now, room: usize) {
        if self.stopped {
            return;
        }
        let mut left = room;
        while left > 0 {
            let Some((rule, run)) = self.due.pop_first() else {
                return;
            };
            let rule = rule as usize;
            let Some(live) = self
                .rules
                .get_mut(rule)
                .and_then(|state| state.run.as_mut())
            else {
                continue;
            };
            // Entries leave with their run, so a mismatch is not expected;
            // skipping one costs no room.
            if live.id != run || !matches!(live.phase, Phase::Due { .. }) {
                continue;
            }
            live.phase = Phase::Deciding;
            self.timers.disarm();
            self.hand_over(rule, now);
            left -= 1;
        }
    }

    /// Whether the live run's durable step, due now, must wait behind the
    /// steps already in the due backlog: the pool was full when they came
    /// due and has not reported room since, and they are earlier.
    pub(crate) fn due_goes_behind(&self, rule: usize) -> bool {
        !self.due.is_empty()
            && self.rules[rule]
                .run
                .as_ref()
                .is_some_and(|run| run.owns_record)
    }

    /// The live run's durable step waits in the due backlog, keeping its
    /// record, until the pool has room or it is more than the replay
    /// window past due (its too-late timer).
    pub(crate) fn due_wait(&mut self, rule: usize, now: Now) {
        let window = self.config.replay_window_ms.max(0);
        let Some(run) = self.rules[rule].run.as_mut() else {
            return;
        };
        // A refused job hands the record back to its run.
        run.owns_record = true;
        // "More than the window past due": the first whole ms after it.
        let too_late_at = run.fire_at.saturating_add(window).saturating_add(1);
        let left_ms = too_late_at.saturating_sub(now.wall_ms).max(0);
        let left_ns = left_ms.unsigned_abs().saturating_mul(1_000_000);
        let (fire_at, id) = (run.fire_at, Arc::clone(&run.id));
        let (step, pass) = (run.step, run.pass);
        let token = self.arm(now.time.plus_nanos(left_ns), rule, TimerKind::Run);
        if let Some(run) = self.rules[rule].run.as_mut() {
            run.phase = Phase::Due { token };
        }
        self.due.insert(fire_at, Arc::clone(&id), rule as u32);
        let name = self.name(rule);
        self.note(Note::DueWait {
            run: id,
            rule: name,
            step,
            pass,
        });
    }

    /// The step waited in the due backlog past the replay window: its
    /// record goes (`too-late`) and its run ends (`too-late`).
    pub(crate) fn due_too_late(&mut self, rule: usize, now: Now) {
        let name = self.name(rule);
        let Some(run) = self.rules[rule].run.as_mut() else {
            return;
        };
        self.due.remove(run.fire_at, &run.id);
        // The timer that fired was this phase's; nothing left to disarm.
        run.phase = Phase::Deciding;
        if std::mem::take(&mut run.owns_record) {
            self.effects.push_back(Effect::DropRecord {
                id: Arc::clone(&run.id),
                rule: Some(name),
                reason: DropReason::TooLate,
            });
        }
        self.end_run(rule, EndReason::TooLate, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_fire_at_first_then_run_id() {
        let mut backlog = DueBacklog::default();
        backlog.insert(20, "b#0-2".into(), 1);
        backlog.insert(10, "z#0-3".into(), 2);
        backlog.insert(20, "a#0-1".into(), 0);
        assert!(backlog.remove(10, &"z#0-3".into()));
        assert!(!backlog.remove(10, &"z#0-3".into()));
        backlog.insert(5, "c#0-4".into(), 3);
        backlog.shift(100);
        let order: Vec<_> = std::iter::from_fn(|| backlog.pop_first()).collect();
        assert_eq!(
            order,
            [
                (3, "c#0-4".into()),
                (0, "a#0-1".into()),
                (1, "b#0-2".into())
            ]
        );
        assert!(backlog.is_empty());
    }
}
