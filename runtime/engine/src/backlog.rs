//! The due backlog (docs/semantics.md#due-steps-the-pool-refused): durable
//! steps that came due while their part of the pool (the workers, or the
//! Redis lane: [`Lane`]) was full. Each keeps its pending record and waits
//! here, earliest `fire-at` first (ties by run id, the order replay takes
//! records in), until its part has room or the step is more than the
//! replay window past due.
//!
//! Entries are removed eagerly when their run ends, so the backlog holds
//! exactly the runs waiting in it: at most one per rule (a rule has at most
//! one live run), each with a record in the store.

use crate::pool::{Lane, Room};
use crate::timers::TimerKind;
use crate::{DropReason, Effect, EndReason, Engine, Note, Now, Phase};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where a waiting step sorts: its record's `fire-at` (Unix ms), then its
/// run id.
type Key = (i64, Arc<str>);

#[derive(Debug, Default)]
pub(crate) struct DueBacklog {
    /// Waiting steps of each part of the pool (workers, then the Redis
    /// lane), in the order they are submitted; the value is the rule's
    /// position in the bundle.
    waiting: [BTreeMap<Key, u32>; 2],
}

fn part(lane: Lane) -> usize {
    match lane {
        Lane::Workers => 0,
        Lane::Redis => 1,
    }
}

impl DueBacklog {
    pub fn insert(&mut self, fire_at: i64, run: Arc<str>, rule: u32, lane: Lane) {
        self.waiting[part(lane)].insert((fire_at, run), rule);
    }

    /// Forgets a waiting step (its run ended); whether it was there.
    pub fn remove(&mut self, fire_at: i64, run: &Arc<str>) -> bool {
        let key = (fire_at, Arc::clone(run));
        self.waiting
            .iter_mut()
            .any(|part| part.remove(&key).is_some())
    }

    /// The earliest waiting step of a part that has `room`, taken out: its
    /// part, rule and run id.
    pub fn pop_first(&mut self, room: &Room) -> Option<(Lane, u32, Arc<str>)> {
        let lane = [Lane::Workers, Lane::Redis]
            .into_iter()
            .filter(|&lane| room.of(lane) > 0)
            .filter_map(|lane| Some((self.waiting[part(lane)].first_key_value()?.0, lane)))
            .min_by(|a, b| a.0.cmp(b.0))
            .map(|(_, lane)| lane)?;
        let ((_, run), rule) = self.waiting[part(lane)].pop_first()?;
        Some((lane, rule, run))
    }

    pub fn len(&self) -> usize {
        self.waiting.iter().map(BTreeMap::len).sum()
    }

    /// Whether no step of `lane` waits.
    pub fn is_empty(&self, lane: Lane) -> bool {
        self.waiting[part(lane)].is_empty()
    }

    /// Every record's `fire-at` moved by `delta_ms` (a wall clock jump):
    /// the order does not change, the keys do.
    pub fn shift(&mut self, delta_ms: i64) {
        if delta_ms == 0 {
            return;
        }
        for part in &mut self.waiting {
            *part = std::mem::take(part)
                .into_iter()
                .map(|((fire_at, run), rule)| ((fire_at.saturating_add(delta_ms), run), rule))
                .collect();
        }
    }

    pub fn clear(&mut self) {
        self.waiting.iter_mut().for_each(BTreeMap::clear);
    }
}

impl Engine {
    /// Durable steps waiting in the due backlog for room in the pool.
    pub fn due_backlog_len(&self) -> usize {
        self.records.due_len()
    }

    /// The pool accepts `room` more submissions now (an idle worker or a
    /// free queue slot each for the workers, a free place each in the
    /// Redis lane): the earliest waiting due steps of each part are handed
    /// over, as many as it has room for, earliest `fire-at` first across
    /// both. Drivers call it when the pool reports room after it was full;
    /// with nothing waiting it does nothing.
    pub fn pool_has_room(&mut self, now: Now, room: Room) {
        if self.stopped {
            return;
        }
        let mut left = room;
        while let Some((lane, rule, run)) = self.records.next_due(&left) {
            let rule = rule as usize;
            // A keyed rule: the run's key into the slot (docs/rules.md#keyed-runs).
            self.focus_where(rule, |state| {
                state.run.as_ref().is_some_and(|live| live.id == run)
            });
            let Some(live) = self.rules.run_mut(rule) else {
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
            left.take(lane);
        }
    }

    /// The part of the pool that performs the live run's current step.
    pub(crate) fn step_lane(&self, rule: usize) -> Lane {
        let step = self.rules.run(rule).map(|run| run.step as usize);
        let action = step.and_then(|step| self.payload.rules[rule].steps.get(step));
        action.map_or(Lane::Workers, |step| Lane::of(&step.action))
    }

    /// Whether the live run's durable step, due now, must wait behind the
    /// steps already in the due backlog: its part of the pool was full
    /// when they came due and has not reported room since, and they are
    /// earlier.
    pub(crate) fn due_goes_behind(&self, rule: usize) -> bool {
        self.records.due_waiting(self.step_lane(rule))
            && self.rules.run(rule).is_some_and(|run| run.owns_record)
    }

    /// The live run's durable step waits in the due backlog, keeping its
    /// record, until the pool has room or it is more than the replay
    /// window past due (its too-late timer).
    pub(crate) fn due_wait(&mut self, rule: usize, now: Now) {
        let window = self.config.replay_window_ms.max(0);
        let Some(run) = self.rules.run_mut(rule) else {
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
        if let Some(run) = self.rules.run_mut(rule) {
            run.phase = Phase::Due { token };
        }
        let lane = self.step_lane(rule);
        self.records
            .wait_due(fire_at, Arc::clone(&id), rule as u32, lane);
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
        let Some(run) = self.rules.run_mut(rule) else {
            return;
        };
        self.records.forget_due(run.fire_at, &run.id);
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
        backlog.insert(20, "b#0-2".into(), 1, Lane::Redis);
        backlog.insert(10, "z#0-3".into(), 2, Lane::Redis);
        backlog.insert(20, "a#0-1".into(), 0, Lane::Redis);
        assert!(backlog.remove(10, &"z#0-3".into()));
        assert!(!backlog.remove(10, &"z#0-3".into()));
        backlog.insert(5, "c#0-4".into(), 3, Lane::Redis);
        backlog.shift(100);
        let room = Room {
            workers: 0,
            lane: 9,
        };
        let order: Vec<_> = std::iter::from_fn(|| backlog.pop_first(&room)).collect();
        assert_eq!(
            order,
            [
                (Lane::Redis, 3, "c#0-4".into()),
                (Lane::Redis, 0, "a#0-1".into()),
                (Lane::Redis, 1, "b#0-2".into())
            ]
        );
        assert!(backlog.is_empty(Lane::Redis));
    }

    #[test]
    fn each_part_of_the_pool_takes_its_own_earliest_steps() {
        let mut backlog = DueBacklog::default();
        backlog.insert(10, "exec#0-1".into(), 0, Lane::Workers);
        backlog.insert(20, "redis#0-2".into(), 1, Lane::Redis);
        backlog.insert(30, "exec#0-3".into(), 2, Lane::Workers);
        // No worker: the Redis step goes, the earlier exec waits.
        let lane_only = Room {
            workers: 0,
            lane: 5,
        };
        assert_eq!(
            backlog.pop_first(&lane_only),
            Some((Lane::Redis, 1, "redis#0-2".into()))
        );
        assert_eq!(backlog.pop_first(&lane_only), None);
        let both = Room {
            workers: 1,
            lane: 1,
        };
        assert_eq!(
            backlog.pop_first(&both),
            Some((Lane::Workers, 0, "exec#0-1".into()))
        );
        assert_eq!(backlog.len(), 1);
    }
}
