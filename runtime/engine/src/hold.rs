//! Hold, a rule's `for` (docs/semantics.md#hold): the rule dispatches only
//! once its `when` has stayed true for that long, and then not again until
//! `when` was false once. A running hold is one entry in the engine's one
//! deadline queue ([`TimerKind::Hold`]), like a debounce window; it is not
//! durable.

use super::{Engine, NonFireReason, Now};
use crate::timers::TimerKind;
use rulecore::bundle::Payload;
use rulecore::bytecode::{Op, Program};
use rulecore::event::Event;
use std::sync::Arc;

/// A rule's hold, when it is not armed and idle.
#[derive(Debug)]
pub(crate) enum Hold {
    /// `when` has been true since the first event of this hold; `event` is
    /// the latest true one, `token` the timer that completes it.
    Running { event: Arc<Event>, token: u64 },
    /// The hold completed (and the rule dispatched, or cooldown suppressed
    /// it); a new hold waits until `when` is false once. `event` is the
    /// event it completed with, against which state changes are judged.
    Fired { event: Arc<Event> },
}

impl Hold {
    fn event(&self) -> &Arc<Event> {
        match self {
            Hold::Running { event, .. } | Hold::Fired { event } => event,
        }
    }

    /// The live timer of a running hold.
    pub(crate) fn token(&self) -> Option<u64> {
        match self {
            Hold::Running { token, .. } => Some(*token),
            Hold::Fired { .. } => None,
        }
    }
}

/// The holds part of the engine: per state pair, the rules with `for`
/// whose `when` reads it (a change of the pair judges their holds again).
/// Each hold itself ([`Hold`]) is in its rule's slot, or its key's: it
/// travels with the key (docs/rules.md#keyed-runs).
#[derive(Debug)]
pub(crate) struct Holds {
    watchers: Vec<Vec<u32>>,
}

impl Holds {
    pub fn new(payload: &Payload) -> Self {
        Self {
            watchers: watchers(payload),
        }
    }

    /// How many rules watch `pair`.
    fn watching(&self, pair: usize) -> usize {
        self.watchers.get(pair).map_or(0, Vec::len)
    }

    /// The `i`th rule watching `pair` (`i` below [`Holds::watching`]).
    fn watcher(&self, pair: usize, i: usize) -> Option<usize> {
        Some(*self.watchers.get(pair)?.get(i)? as usize)
    }
}

fn watchers(payload: &Payload) -> Vec<Vec<u32>> {
    let mut watchers = vec![Vec::new(); payload.state_pairs.len()];
    for (index, rule) in payload.rules.iter().enumerate() {
        let (true, Some(program)) = (rule.hold_ns() > 0, rule.when.as_ref()) else {
            continue;
        };
        let rule = u32::try_from(index).unwrap_or(u32::MAX);
        for op in &program.ops {
            if let Op::State(pair) = op {
                if let Some(list) = watchers.get_mut(*pair as usize) {
                    if list.last() != Some(&rule) {
                        list.push(rule);
                    }
                }
            }
        }
    }
    watchers
}

impl Engine {
    /// A matching event of a rule with `for`, after its `when` gave `met`
    /// (an evaluation error counts as not met).
    pub(crate) fn hold_match(&mut self, rule: usize, event: Arc<Event>, met: bool, now: Now) {
        let state = &mut self.rules[rule];
        match (met, state.take_hold()) {
            // The first true event starts the hold and its clock.
            (true, None) => {
                let deadline = now.time.plus_nanos(self.payload.rules[rule].hold_ns());
                let token = self.arm(deadline, rule, TimerKind::Hold);
                self.non_fire(rule, NonFireReason::HoldPending, &event, now, None);
                self.rules[rule].set_hold(Hold::Running { event, token });
            }
            // Later true events replace the held event, not the clock.
            (true, Some(Hold::Running { token, .. })) => {
                self.non_fire(rule, NonFireReason::HoldPending, &event, now, None);
                self.rules[rule].set_hold(Hold::Running { event, token });
            }
            // Still true after firing: nothing until `when` is false once.
            (true, Some(fired @ Hold::Fired { .. })) => {
                state.set_hold(fired);
                self.non_fire(rule, NonFireReason::HoldFired, &event, now, None);
            }
            // False (or an error) ends a running hold and re-arms the rule.
            (false, Some(Hold::Running { .. })) => self.timers.disarm(),
            (false, Some(Hold::Fired { .. }) | None) => {}
        }
    }

    /// The hold's timer: `when` stayed true for `for`; the held event goes
    /// on to cooldown and concurrency.
    pub(crate) fn hold_due(&mut self, rule: usize, now: Now) {
        let state = &mut self.rules[rule];
        if let Some(Hold::Running { event, .. }) = state.take_hold() {
            state.set_hold(Hold::Fired {
                event: Arc::clone(&event),
            });
            self.dispatch(rule, event, now);
        }
    }

    /// A `cancel-on` event (or a stop) ends a running hold without firing
    /// and re-arms the rule at once.
    pub(crate) fn hold_cancel(&mut self, rule: usize) {
        if let Some(Hold::Running { .. }) = self.rules[rule].take_hold() {
            self.timers.disarm();
        }
    }

    /// A watched state pair changed (at `at`: `None` for a value read
    /// without a notification, which has no time of its own): every rule
    /// with `for` whose `when` reads it is judged again against its held
    /// (or last fired) event; false or an error ends the hold, or re-arms
    /// a rule that fired. Each judgement is traced and, explaining, noted
    /// (`hold-kept`, `hold-ended`) with what the `when` read.
    pub(crate) fn hold_state_changed(&mut self, pair: usize, at: Option<Now>) {
        let payload = Arc::clone(&self.payload);
        for i in 0..self.holds.watching(pair) {
            let Some(rule) = self.holds.watcher(pair, i) else {
                continue;
            };
            let Some(program) = payload.rules[rule].when.as_ref() else {
                continue;
            };
            // Each key's hold (docs/rules.md#keyed-runs).
            self.each_key(rule, |engine| {
                let Some(hold) = engine.rules[rule].hold() else {
                    return;
                };
                let event = Arc::clone(hold.event());
                let result = engine.eval(rule, None, program, &event);
                engine.hold_judged(rule, program, &event, &result, at);
                if result != Ok(true) {
                    engine.hold_cancel(rule);
                }
            });
        }
    }
}

impl Engine {
    /// A hold judged again on a state change: traced, and noted when
    /// explaining, as `hold-kept` or `hold-ended`, with the reads.
    fn hold_judged(
        &mut self,
        rule: usize,
        program: &Program,
        event: &Arc<Event>,
        result: &Result<bool, String>,
        at: Option<Now>,
    ) {
        if !self.wants_reads() {
            return;
        }
        let reason = match result {
            Ok(true) => NonFireReason::HoldKept,
            _ => NonFireReason::HoldEnded,
        };
        let error = result.as_ref().err().map(String::as_str);
        let reads = (
            self.noted_reads(program, event),
            self.kept_reads(program, event),
        );
        let time = at.map_or_else(|| self.traces.latest(), |now| now.time);
        self.non_fire_reading(rule, reason, event, time, error, reads);
    }
}
