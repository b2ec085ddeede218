//! The replay-and-records part of the engine: the durable side's own
//! state. The due backlog (`backlog`: durable steps due while their part
//! of the pool was full, each keeping its record) and whether replay
//! has run (it runs once, at start: docs/semantics.md#durability-and-replay).
//! The records themselves are in the store; the runs that own one say so
//! in their slot ([`crate::Run::owns_record`]).

use crate::backlog::DueBacklog;
use crate::pool::{Lane, Room};
use std::sync::Arc;

#[derive(Debug, Default)]
pub(crate) struct Records {
    due: DueBacklog,
    replayed: bool,
}

impl Records {
    /// Run `run` of rule `rule` waits in the due backlog for room in
    /// `lane`, sorted by its record's `fire_at`.
    pub fn wait_due(&mut self, fire_at: i64, run: Arc<str>, rule: u32, lane: Lane) {
        self.due.insert(fire_at, run, rule, lane);
    }

    /// Run `run`'s step leaves the due backlog (its run ended or left the
    /// phase); whether it was there.
    pub fn forget_due(&mut self, fire_at: i64, run: &Arc<str>) -> bool {
        self.due.remove(fire_at, run)
    }

    /// The earliest waiting step of a part of the pool with `room`, taken
    /// out: its part, rule and run id.
    pub fn next_due(&mut self, room: &Room) -> Option<(Lane, u32, Arc<str>)> {
        self.due.pop_first(room)
    }

    /// Steps waiting in the due backlog.
    pub fn due_len(&self) -> usize {
        self.due.len()
    }

    /// Whether a step of `lane` waits in the due backlog.
    pub fn due_waiting(&self, lane: Lane) -> bool {
        !self.due.is_empty(lane)
    }

    /// The wall clock jumped: every waiting step's `fire-at` moves with it.
    pub fn clock_jumped(&mut self, delta_ms: i64) {
        self.due.shift(delta_ms);
    }

    /// Stop: the due backlog is dropped (its records are kept).
    pub fn stop(&mut self) {
        self.due.clear();
    }

    /// Whether replay has run.
    pub fn replayed(&self) -> bool {
        self.replayed
    }

    /// Replay starts: `false` the first time, `true` when it has run before.
    pub fn replay_again(&mut self) -> bool {
        std::mem::replace(&mut self.replayed, true)
    }

    /// A reload: `next` (the new bundle's) knows whether replay has run;
    /// the due backlog it rebuilds from the runs it takes over.
    pub fn carry_into(&self, next: &mut Records) {
        next.replayed = self.replayed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_runs_once_and_a_reload_remembers_it() {
        let mut records = Records::default();
        assert!(!records.replayed() && !records.replay_again());
        assert!(records.replayed() && records.replay_again());
        let mut next = Records::default();
        records.carry_into(&mut next);
        assert!(next.replayed());
    }

    #[test]
    fn a_waiting_step_leaves_once_and_moves_with_the_clock() {
        let mut records = Records::default();
        let run: Arc<str> = "r#1-1".into();
        records.wait_due(1_000, Arc::clone(&run), 0, Lane::Redis);
        assert!(records.due_waiting(Lane::Redis) && !records.due_waiting(Lane::Workers));
        records.clock_jumped(500);
        assert!(
            !records.forget_due(1_000, &run),
            "its key moved with the clock"
        );
        assert!(records.forget_due(1_500, &run) && records.due_len() == 0);
        records.wait_due(1_000, run, 0, Lane::Workers);
        records.stop();
        assert_eq!(records.due_len(), 0);
    }
}
