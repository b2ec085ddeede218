//! A rule's engine state, laid out for the event path
//! (docs/engine.md#the-48-mb-box): what every dispatch reads or writes
//! (the live run, the cooldown's last fire, the run count, on or off) sits
//! in one dense slot of the rules array, about a cache line; what only some
//! rules ever use (a `queue` backlog, a debounce window, a hold, `when`
//! errors) is boxed on first use, so the slot of a rule that has none of
//! them stays small and 100,000 rules stay dense.

use crate::hold::Hold;
use crate::{RuleStats, Run, Time};
use rulecore::event::Event;
use std::collections::VecDeque;
use std::sync::Arc;

/// A debounce window holding its latest event.
#[derive(Debug)]
pub(crate) struct Debounce {
    pub event: Arc<Event>,
    pub token: u64,
}

/// The parts of a rule's state most rules never use.
#[derive(Debug, Default)]
struct Cold {
    backlog: VecDeque<Arc<Event>>,
    debounce: Option<Debounce>,
    /// `for` (docs/semantics.md#hold): `None` while armed and idle.
    hold: Option<Hold>,
    /// `when` evaluation errors.
    errors: u64,
}

/// When the rule last fired: the engine's clock (the cooldown) and the
/// wall clock (its statistics).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fired {
    pub time: Time,
    pub wall_ms: i64,
}

#[derive(Debug)]
pub(crate) struct RuleState {
    /// Boxed: a rule without a live run (most of them) keeps 8 bytes.
    pub run: Option<Box<Run>>,
    /// The rule's name as the shared string its notes and effects carry,
    /// made the first time one needs it: the payload holds the name
    /// already, and most loaded rules never fire.
    pub name: Option<Arc<str>>,
    /// Valid when `fired`; two fields, not an `Option`, so the slot keeps
    /// within a cache line.
    last_fire: Fired,
    /// Runs started, replays included.
    pub runs_started: u64,
    cold: Option<Box<Cold>>,
    /// On now: the bundle's `enabled`, or an override's
    /// ([`crate::Engine::set_enabled`]).
    pub enabled: bool,
    fired: bool,
}

impl RuleState {
    /// The state of a rule nothing has happened to yet.
    pub fn idle(enabled: bool) -> Self {
        Self {
            run: None,
            name: None,
            last_fire: Fired {
                time: Time::ZERO,
                wall_ms: 0,
            },
            runs_started: 0,
            cold: None,
            enabled,
            fired: false,
        }
    }

    pub fn last_fire(&self) -> Option<Fired> {
        self.fired.then_some(self.last_fire)
    }

    pub fn set_last_fire(&mut self, fired: Fired) {
        self.last_fire = fired;
        self.fired = true;
    }

    fn cold_mut(&mut self) -> &mut Cold {
        self.cold.get_or_insert_with(Box::default)
    }

    pub fn stats(&self) -> RuleStats {
        RuleStats {
            runs_started: self.runs_started,
            last_fire_ms: self.last_fire().map(|fired| fired.wall_ms),
            errors: self.cold.as_ref().map_or(0, |cold| cold.errors),
            active_runs: u64::from(self.run.is_some()),
            refusals: crate::EnvelopeCounts::default(),
        }
    }

    pub fn count_error(&mut self) {
        self.cold_mut().errors += 1;
    }

    pub fn backlog_len(&self) -> usize {
        self.cold.as_ref().map_or(0, |cold| cold.backlog.len())
    }

    pub fn push_backlog(&mut self, event: Arc<Event>) {
        self.cold_mut().backlog.push_back(event);
    }

    pub fn pop_backlog(&mut self) -> Option<Arc<Event>> {
        self.cold.as_mut()?.backlog.pop_front()
    }

    pub fn clear_backlog(&mut self) {
        if let Some(cold) = self.cold.as_mut() {
            cold.backlog.clear();
        }
    }

    pub fn debounce(&self) -> Option<&Debounce> {
        self.cold.as_ref()?.debounce.as_ref()
    }

    pub fn take_debounce(&mut self) -> Option<Debounce> {
        self.cold.as_mut()?.debounce.take()
    }

    pub fn set_debounce(&mut self, debounce: Debounce) {
        self.cold_mut().debounce = Some(debounce);
    }

    pub fn hold(&self) -> Option<&Hold> {
        self.cold.as_ref()?.hold.as_ref()
    }

    pub fn take_hold(&mut self) -> Option<Hold> {
        self.cold.as_mut()?.hold.take()
    }

    pub fn set_hold(&mut self, hold: Hold) {
        self.cold_mut().hold = Some(hold);
    }

    /// What a reload carries into the rule's new state: the run, the
    /// cooldown, the statistics, and the backlog, debounce window and hold
    /// where the new rule still has the setting (`queue`, `debounce`,
    /// `hold`).
    pub fn carry_into(&mut self, new: &mut Self, (queue, debounce, hold): (bool, bool, bool)) {
        new.run = self.run.take();
        new.name = self.name.take();
        new.last_fire = self.last_fire;
        new.fired = self.fired;
        new.runs_started = self.runs_started;
        let Some(mut cold) = self.cold.take() else {
            return;
        };
        if !queue {
            cold.backlog = VecDeque::new();
        }
        if !debounce {
            cold.debounce = None;
        }
        if !hold {
            cold.hold = None;
        }
        new.cold = Some(cold);
    }

    /// Stop drops backlogs, debounce windows and holds.
    pub fn drop_waiting(&mut self) {
        if let Some(cold) = self.cold.as_mut() {
            cold.backlog.clear();
            cold.debounce = None;
            cold.hold = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dense_slot_stays_within_a_cache_line() {
        // The rules array is what a dispatch over many rules walks
        // (docs/engine.md#the-48-mb-box).
        assert!(std::mem::size_of::<RuleState>() <= 64);
    }

    #[test]
    fn cold_parts_are_boxed_on_first_use_and_carried_by_setting() {
        let mut state = RuleState::idle(true);
        assert!(state.pop_backlog().is_none() && state.take_debounce().is_none());
        state.clear_backlog();
        assert!(state.cold.is_none());
        state.push_backlog(Arc::new(Event::default()));
        state.count_error();
        state.set_debounce(Debounce {
            event: Arc::new(Event::default()),
            token: 3,
        });
        assert_eq!((state.backlog_len(), state.stats().errors), (1, 1));
        let mut new = RuleState::idle(true);
        state.carry_into(&mut new, (false, true, false));
        assert_eq!(new.backlog_len(), 0);
        assert_eq!(new.debounce().map(|d| d.token), Some(3));
        assert_eq!(new.stats().errors, 1);
    }
}
