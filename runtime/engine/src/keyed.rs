//! Keyed runs, a rule's `per` (docs/rules.md#keyed-runs): concurrency,
//! cooldown, debounce and `for` holds kept apart per value of the key,
//! so the second battery's low-charge warning is not swallowed by the
//! first's cooldown.
//!
//! Every part of the engine works on a rule's one slot (`Engine::rules`).
//! A keyed rule keeps the state of each of its keys here and swaps the one
//! it works on into that slot first ([`Engine::focus_key`]): by the event's
//! key, a timer's token, or a job's run. So the rest of the engine needs no
//! key at all, and a rule without `per` pays nothing. At most [`MAX_KEYS`]
//! keys per rule are tracked; past that the idle key used longest ago is
//! forgotten (counted in [`crate::Counters::keys_forgotten`]); a key with a
//! live run, a backlog, a debounce window or a running hold is not idle.

use crate::rule_state::RuleState;
use crate::timers::{Entry, TimerKind};
use crate::{Engine, Level, Now, Phase, RuleStats, Time};
use rulecore::bundle::Payload;
use rulecore::event::Event;
use std::sync::Arc;

/// Keys tracked per keyed rule.
pub const MAX_KEYS: usize = 64;

/// The longest key kept, in bytes: a longer one is an evaluation error of
/// `per` (a key is a slot, a battery, a door; not a payload).
pub const MAX_KEY_BYTES: usize = 256;

/// One key's state while another key's is in the rule's slot.
#[derive(Debug)]
struct Parked {
    key: Arc<str>,
    /// When an event last chose this key (the engine's clock).
    used: Time,
    state: RuleState,
}

/// A keyed rule's keys.
#[derive(Debug, Default)]
struct KeyTable {
    /// The key whose state is in the rule's slot; `None` before the first.
    current: Option<Arc<str>>,
    current_used: Time,
    parked: Vec<Parked>,
    /// What forgotten keys had counted: their runs and `when` errors.
    forgotten_runs: u64,
    forgotten_errors: u64,
}

impl KeyTable {
    fn tracked(&self) -> usize {
        self.parked.len() + usize::from(self.current.is_some())
    }
}

/// Every keyed rule's keys, by bundle position (`None`: a rule without
/// `per`).
#[derive(Debug, Default)]
pub(crate) struct Keys {
    tables: Vec<Option<Box<KeyTable>>>,
    /// Keys forgotten to make room for a new one, all rules.
    pub forgotten: u64,
}

/// What focusing on an event's key gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Focus {
    /// The key's state is in the rule's slot.
    Ready,
    /// The key is not tracked, and was not to be made.
    Absent,
    /// All [`MAX_KEYS`] keys are busy: none could be forgotten.
    Full,
}

impl Keys {
    pub fn new(payload: &Payload) -> Self {
        // Nothing per rule while no rule has `per`.
        let keyed = payload.rules.iter().any(|rule| rule.per().is_some());
        let tables = match keyed {
            true => (payload.rules.iter())
                .map(|rule| rule.per().map(|_| Box::default()))
                .collect(),
            false => Vec::new(),
        };
        Self {
            tables,
            forgotten: 0,
        }
    }

    pub fn is_keyed(&self, rule: usize) -> bool {
        matches!(self.tables.get(rule), Some(Some(_)))
    }

    /// The key whose state is in rule `rule`'s slot.
    pub fn current(&self, rule: usize) -> Option<&Arc<str>> {
        self.tables.get(rule)?.as_ref()?.current.as_ref()
    }

    /// The states of rule `rule`'s keys not in its slot.
    pub fn parked(&self, rule: usize) -> impl Iterator<Item = &RuleState> + '_ {
        self.tables
            .get(rule)
            .and_then(Option::as_ref)
            .into_iter()
            .flat_map(|table| table.parked.iter().map(|parked| &parked.state))
    }

    /// Rule `rule`'s keys with their states, `slot` (the rule's slot) for
    /// the current key first, then the parked ones in the order they were
    /// parked; nothing for a rule without `per`.
    pub fn states<'a>(
        &'a self,
        rule: usize,
        slot: &'a RuleState,
    ) -> impl Iterator<Item = (&'a Arc<str>, &'a RuleState)> + 'a {
        let table = self.tables.get(rule).and_then(Option::as_ref);
        let current = table.and_then(|table| table.current.as_ref().map(|key| (key, slot)));
        let parked = table.into_iter().flat_map(|table| {
            table
                .parked
                .iter()
                .map(|parked| (&parked.key, &parked.state))
        });
        current.into_iter().chain(parked)
    }

    /// Keys tracked for rule `rule` (0 for a rule without `per`).
    pub fn tracked(&self, rule: usize) -> usize {
        self.tables
            .get(rule)
            .and_then(Option::as_ref)
            .map_or(0, |table| table.tracked())
    }
}

/// Nothing of the key would be lost by forgetting it.
fn idle(state: &RuleState) -> bool {
    state.run.is_none()
        && state.backlog_len() == 0
        && state.debounce().is_none()
        && state.hold().and_then(crate::hold::Hold::token).is_none()
}

/// Whether `state` owns timer `entry`.
pub(crate) fn owns_timer(state: &RuleState, entry: &Entry) -> bool {
    match entry.kind {
        TimerKind::Debounce => state.debounce().map(|d| d.token) == Some(entry.token),
        TimerKind::Hold => state.hold().and_then(crate::hold::Hold::token) == Some(entry.token),
        TimerKind::Run => state.run.as_ref().is_some_and(|run| match run.phase {
            Phase::Waiting { token } | Phase::Gap { token } | Phase::Due { token } => {
                token == entry.token
            }
            Phase::Acting { .. } | Phase::Draining { .. } | Phase::Deciding => false,
        }),
    }
}

impl Engine {
    /// How many keys rule `rule` tracks now (0 for a rule without `per`;
    /// at most [`MAX_KEYS`]).
    pub fn keys_tracked(&self, rule: usize) -> usize {
        self.keys.tracked(rule)
    }

    /// The key of `event` for keyed rule `rule`: its `per` rendered as
    /// `str()` does. An evaluation error (or a key over
    /// [`MAX_KEY_BYTES`]) is logged and counted as a `when` error is.
    pub(crate) fn event_key(&mut self, rule: usize, event: &Event) -> Result<Arc<str>, String> {
        let payload = Arc::clone(&self.payload);
        let Some(program) = payload.rules[rule].per() else {
            return Ok(Arc::from(""));
        };
        let key = rulecore::template::render_value(program, &payload.consts, event, &self.state)
            .map_err(|error| error.to_string())
            .and_then(|key| match key.len() {
                len if len > MAX_KEY_BYTES => Err(format!(
                    "the key is {len} bytes, more than the {MAX_KEY_BYTES} a key may have"
                )),
                _ => Ok(key),
            });
        match key {
            Ok(key) => Ok(Arc::from(key)),
            Err(error) => {
                self.rules[rule].count_error();
                let name = self.name(rule);
                self.log(
                    Level::Warn,
                    Some(name),
                    None,
                    format!("`per` failed to evaluate, the event counts as not met: {error}"),
                );
                Err(error)
            }
        }
    }

    /// Puts `key`'s state in keyed rule `rule`'s slot; `create`: track the
    /// key if it is new, forgetting the idle key used longest ago when
    /// [`MAX_KEYS`] are tracked. An event's focus marks the key used.
    pub(crate) fn focus_key(
        &mut self,
        rule: usize,
        key: &Arc<str>,
        create: bool,
        now: Now,
    ) -> Focus {
        let Some(Some(table)) = self.keys.tables.get_mut(rule) else {
            return Focus::Ready;
        };
        if table.current.as_deref() == Some(&**key) {
            table.current_used = now.time;
            return Focus::Ready;
        }
        if let Some(at) = table.parked.iter().position(|p| *p.key == **key) {
            self.swap_in(rule, at);
            self.touch(rule, now.time);
            return Focus::Ready;
        }
        if !create {
            return Focus::Absent;
        }
        if table.tracked() >= MAX_KEYS && !self.forget_one(rule) {
            return Focus::Full;
        }
        self.park_current(rule);
        if let Some(Some(table)) = self.keys.tables.get_mut(rule) {
            table.current = Some(Arc::clone(key));
            table.current_used = now.time;
        }
        Focus::Ready
    }

    /// Puts the state owning timer `entry` in its rule's slot; `false`:
    /// no key owns it (a stale entry).
    pub(crate) fn focus_timer(&mut self, entry: &Entry) -> bool {
        let rule = entry.rule as usize;
        self.focus_where(rule, |state| owns_timer(state, entry))
    }

    /// Puts the key whose run has serial `serial` in its rule's slot.
    pub(crate) fn focus_run(&mut self, rule: usize, serial: u64) -> bool {
        self.focus_where(rule, |state| {
            state.run.as_ref().is_some_and(|run| run.serial == serial)
        })
    }

    /// Whether any key of `entry`'s rule owns it (the slot's included).
    pub(crate) fn timer_owned(&self, entry: &Entry) -> bool {
        let rule = entry.rule as usize;
        self.rules.get(rule).is_some_and(|s| owns_timer(s, entry))
            || self.keys.parked(rule).any(|state| owns_timer(state, entry))
    }

    /// Runs `each` with every key of `rule` in its slot in turn (once, for
    /// a rule without `per`), in the order the keys were parked.
    pub(crate) fn each_key(&mut self, rule: usize, mut each: impl FnMut(&mut Engine)) {
        if !self.keys.is_keyed(rule) {
            return each(self);
        }
        let keys: Vec<Arc<str>> = self
            .keys
            .current(rule)
            .into_iter()
            .cloned()
            .chain(
                self.keys.tables[rule]
                    .iter()
                    .flat_map(|table| table.parked.iter().map(|parked| Arc::clone(&parked.key))),
            )
            .collect();
        for key in keys {
            if self.focus_quietly(rule, &key) {
                each(self);
            }
        }
    }

    /// Every rule's states, its keys' included, in bundle order.
    pub(crate) fn all_states(&self) -> impl Iterator<Item = (usize, &RuleState)> + '_ {
        self.rules.slots().enumerate().flat_map(|(rule, state)| {
            std::iter::once((rule, state)).chain(self.keys.parked(rule).map(move |s| (rule, s)))
        })
    }

    /// A rule's statistics over all its keys, the forgotten ones' runs and
    /// errors included.
    pub(crate) fn keyed_stats(&self, rule: usize) -> Option<RuleStats> {
        let mut stats = self.rules.get(rule)?.stats();
        for state in self.keys.parked(rule) {
            let key = state.stats();
            stats.runs_started += key.runs_started;
            stats.errors += key.errors;
            stats.active_runs += key.active_runs;
            stats.last_fire_ms = stats.last_fire_ms.max(key.last_fire_ms);
        }
        if let Some(Some(table)) = self.keys.tables.get(rule) {
            stats.runs_started += table.forgotten_runs;
            stats.errors += table.forgotten_errors;
        }
        Some(stats)
    }

    /// [`Engine::focus_key`] of a tracked key, not marking it used.
    fn focus_quietly(&mut self, rule: usize, key: &Arc<str>) -> bool {
        let Some(Some(table)) = self.keys.tables.get(rule) else {
            return false;
        };
        if table.current.as_deref() == Some(&**key) {
            return true;
        }
        match table.parked.iter().position(|p| *p.key == **key) {
            Some(at) => {
                self.swap_in(rule, at);
                true
            }
            None => false,
        }
    }

    pub(crate) fn focus_where(&mut self, rule: usize, owns: impl Fn(&RuleState) -> bool) -> bool {
        if self.rules.get(rule).is_some_and(&owns) {
            return true;
        }
        let at = match self.keys.tables.get(rule) {
            Some(Some(table)) => table.parked.iter().position(|p| owns(&p.state)),
            _ => None,
        };
        match at {
            Some(at) => {
                self.swap_in(rule, at);
                true
            }
            None => false,
        }
    }

    /// Parked key `at` into the slot, the slot's key parked in its place.
    fn swap_in(&mut self, rule: usize, at: usize) {
        let Some(Some(table)) = self.keys.tables.get_mut(rule) else {
            return;
        };
        let parked = table.parked.swap_remove(at);
        let outgoing = self.rules.swap_state(rule, parked.state);
        let (current, used) = (table.current.take(), table.current_used);
        if let Some(key) = current {
            table.parked.push(Parked {
                key,
                used,
                state: outgoing,
            });
        }
        table.current = Some(parked.key);
        table.current_used = parked.used;
    }

    fn touch(&mut self, rule: usize, now: Time) {
        if let Some(Some(table)) = self.keys.tables.get_mut(rule) {
            table.current_used = now;
        }
    }

    /// The slot's key parked, the slot left with a fresh state.
    fn park_current(&mut self, rule: usize) {
        let Some(Some(table)) = self.keys.tables.get_mut(rule) else {
            return;
        };
        let outgoing = self.rules.take_state(rule);
        if let Some(key) = table.current.take() {
            table.parked.push(Parked {
                key,
                used: table.current_used,
                state: outgoing,
            });
        }
    }

    /// Forgets the idle key used longest ago; `false`: every key is busy.
    fn forget_one(&mut self, rule: usize) -> bool {
        let Some(Some(table)) = self.keys.tables.get_mut(rule) else {
            return false;
        };
        let slot = &self.rules[rule];
        let parked = table
            .parked
            .iter()
            .enumerate()
            .filter(|(_, p)| idle(&p.state))
            .min_by_key(|(_, p)| p.used)
            .map(|(at, p)| (Some(at), p.used));
        let current = (table.current.is_some() && idle(slot)).then_some((None, table.current_used));
        let victim = match (parked, current) {
            (Some(p), Some(c)) if c.1 < p.1 => c,
            (Some(p), _) => p,
            (None, Some(c)) => c,
            (None, None) => return false,
        };
        let stats = match victim.0 {
            Some(at) => table.parked.swap_remove(at).state.stats(),
            None => {
                table.current = None;
                self.rules.take_state(rule).stats()
            }
        };
        table.forgotten_runs += stats.runs_started;
        table.forgotten_errors += stats.errors;
        self.keys.forgotten += 1;
        true
    }
}

impl Engine {
    /// A reload makes keyed rule `rule` a rule with one key: the runs of
    /// the keys not in its slot end (`concurrency`). Returns how many.
    pub(crate) fn end_parked_runs(&mut self, rule: usize) -> usize {
        let current = self.keys.current(rule).cloned();
        let mut ended = 0;
        self.each_key(rule, |engine| {
            if engine.keys.current(rule) != current.as_ref() && engine.rules.run(rule).is_some() {
                engine.end_for_reload(rule, crate::ReplayDropReason::Concurrency);
                ended += 1;
            }
        });
        if let Some(key) = current {
            self.focus_quietly(rule, &key);
        }
        ended
    }

    /// A reload (docs/semantics.md#live-reload): rule `rule`'s keys go to
    /// `next`'s rule `target` when both are keyed, each carried as the
    /// slot is ([`RuleState::carry_into`], `settings`). A rule that becomes
    /// keyed keeps its one state as the empty key's, where a record
    /// without a key resumes too.
    pub(crate) fn carry_keys(
        &mut self,
        rule: usize,
        next: &mut Engine,
        target: usize,
        settings: (bool, bool, bool),
    ) {
        let Some(Some(new)) = next.keys.tables.get_mut(target) else {
            return;
        };
        let Some(Some(old)) = self.keys.tables.get_mut(rule) else {
            new.current = Some(Arc::from(""));
            return;
        };
        new.current = old.current.take();
        new.current_used = old.current_used;
        new.forgotten_runs = old.forgotten_runs;
        new.forgotten_errors = old.forgotten_errors;
        let enabled = next.rules.is_enabled(target);
        for mut parked in old.parked.drain(..) {
            let mut state = RuleState::idle(enabled);
            parked.state.carry_into(&mut state, settings);
            state.name = None;
            new.parked.push(Parked { state, ..parked });
        }
    }
}

impl Engine {
    /// The state of `event`'s key of rule `rule`, read only (the dry run):
    /// the rule's slot for a rule without `per`, `None` for a key not
    /// tracked or one that does not evaluate.
    pub(crate) fn key_state(&self, rule: usize, event: &Event) -> Option<&RuleState> {
        let slot = self.rules.get(rule)?;
        let Some(program) = self.payload.rules.get(rule)?.per() else {
            return Some(slot);
        };
        let key =
            rulecore::template::render_value(program, &self.payload.consts, event, &self.state)
                .ok()?;
        let Some(Some(table)) = self.keys.tables.get(rule) else {
            return Some(slot);
        };
        if table.current.as_deref() == Some(key.as_str()) {
            return Some(slot);
        }
        table
            .parked
            .iter()
            .find(|parked| *parked.key == *key)
            .map(|parked| &parked.state)
    }
}
