//! The engine's state of the safety envelope (docs/safety.md): each
//! limit's window ([`Engine::limit_admits`]), each rule's breaker
//! ([`Engine::breaker_admits`]), and the refusals counted per rule. Guards
//! keep no state: they are judged on a fresh read (`guard`).

use crate::fast_hash::FastMap;
use crate::window::Window;
use crate::{Effect, Engine, Level, LogLine, Now, Time};
use rulecore::bundle::Action;
use rulecore::envelope::Limit;

/// What refused: a guard, a limit, or the rule's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Guarded,
    Limited,
    Tripped,
}

/// A rule's refusals by the envelope (docs/safety.md#guards).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnvelopeCounts {
    pub guarded: u64,
    pub limited: u64,
    pub tripped: u64,
}

#[derive(Debug, Default)]
struct LimitState {
    window: Window,
    /// The end of the window already warned about: one `warn` line per
    /// window.
    warned_until: Option<Time>,
}

#[derive(Debug, Default)]
struct BreakerState {
    window: Window,
    /// Tripped until then.
    paused_until: Option<Time>,
}

#[derive(Debug, Default)]
pub(crate) struct EnvelopeState {
    limits: Vec<LimitState>,
    /// Only rules that started a run have one.
    breakers: FastMap<u32, BreakerState>,
    /// Only rules something refused have an entry.
    counts: FastMap<u32, EnvelopeCounts>,
}

impl EnvelopeState {
    pub(crate) fn new(payload: &rulecore::bundle::Payload) -> Self {
        let mut state = Self::default();
        state
            .limits
            .resize_with(payload.envelope.limits.len(), LimitState::default);
        state
    }

    /// A reload's carry-over into `next` (built on the new bundle):
    /// each rule's refusal counts and breaker follow it to its new
    /// position (`targets`, by old index; a removed rule's go), and each
    /// limit's window goes to the new bundle's limit of the same name and
    /// cover, so that a deploy never lets a rule past a limit or a pause
    /// (docs/safety.md#limits).
    pub(crate) fn carry_into(
        &mut self,
        next: &mut EnvelopeState,
        targets: &[Option<usize>],
        (old, new): (&[Limit], &[Limit]),
    ) {
        let moved = |rule: u32| {
            let target = targets.get(rule as usize).copied().flatten()?;
            u32::try_from(target).ok()
        };
        next.counts = (self.counts.drain())
            .filter_map(|(rule, counts)| Some((moved(rule)?, counts)))
            .collect();
        next.breakers = (self.breakers.drain())
            .filter_map(|(rule, breaker)| Some((moved(rule)?, breaker)))
            .collect();
        for (limit, state) in new.iter().zip(next.limits.iter_mut()) {
            let same =
                |(_, was): &(usize, &Limit)| was.name == limit.name && was.cover == limit.cover;
            if let Some((index, _)) = old.iter().enumerate().find(same) {
                if let Some(kept) = self.limits.get_mut(index) {
                    *state = std::mem::take(kept);
                }
            }
        }
    }

    pub(crate) fn count(&mut self, refusal: Refusal, rule: Option<usize>) {
        let Some(rule) = rule.and_then(|rule| u32::try_from(rule).ok()) else {
            return;
        };
        let counts = self.counts.entry(rule).or_default();
        match refusal {
            Refusal::Guarded => counts.guarded += 1,
            Refusal::Limited => counts.limited += 1,
            Refusal::Tripped => counts.tripped += 1,
        }
    }

    pub(crate) fn counts(&self, rule: usize) -> EnvelopeCounts {
        u32::try_from(rule)
            .ok()
            .and_then(|rule| self.counts.get(&rule))
            .copied()
            .unwrap_or_default()
    }
}

impl Engine {
    /// Whether every limit covering `action` allows one more now; counts
    /// it in each when so. The first limit that does not is named in one
    /// `warn` line per window (docs/safety.md#limits).
    pub(crate) fn limit_admits(&mut self, rule: usize, action: &Action, now: Now) -> bool {
        let payload = std::sync::Arc::clone(&self.payload);
        let envelope = &payload.envelope;
        if envelope.limits.is_empty() {
            return true;
        }
        let value = crate::guard::covered_value(action);
        let covering: Vec<usize> = envelope.limits_of(action, value).map(|(i, _)| i).collect();
        // Judge all before counting any: a refused action is counted nowhere.
        let full = covering.iter().copied().find(|&index| {
            let limit = &envelope.limits[index];
            let mut probe = self.envelope.limits[index].window.clone();
            !probe.admit(now.time, limit.per_ns, limit.max)
        });
        let Some(full) = full else {
            for index in covering {
                let limit = &envelope.limits[index];
                self.envelope.limits[index]
                    .window
                    .admit(now.time, limit.per_ns, limit.max);
            }
            return true;
        };
        let limit = &envelope.limits[full];
        self.counters.limited += 1;
        self.envelope.count(Refusal::Limited, Some(rule));
        let state = &mut self.envelope.limits[full];
        if state.warned_until.is_none_or(|until| now.time >= until) {
            state.warned_until = Some(now.time.plus_nanos(limit.per_ns));
            let message = format!(
                "action refused by limit `{}`: at most {} per {} ms ({})",
                limit.name,
                limit.max,
                limit.per_ns / 1_000_000,
                limit.cover.describe()
            );
            self.warn(rule, "limited", message);
        }
        false
    }

    /// Whether rule `rule` may start a run now under its breaker
    /// (docs/safety.md#the-breaker); counts the start when so. A rule that
    /// trips is refused for its pause: one `warn` line and one toast per
    /// trip.
    pub(crate) fn breaker_admits(&mut self, rule: usize, now: Now) -> bool {
        let Some(trip) = self.payload.rules.get(rule).and_then(|r| r.trip()) else {
            return true;
        };
        let key = u32::try_from(rule).unwrap_or(u32::MAX);
        // A rule whose last fire is a window ago (or that never fired) and
        // is not paused keeps no entry: most rules never hold one.
        let last = self.rules[rule].last_fire().map(|fired| fired.time);
        let recent = last.filter(|last| now.time.since(*last) < trip.per_ns);
        let state = match (self.envelope.breakers.get_mut(&key), recent) {
            (Some(state), _) => state,
            (None, None) => return true,
            (None, Some(last)) => {
                let mut state = BreakerState::default();
                state.window.admit(last, trip.per_ns, trip.starts);
                self.envelope.breakers.entry(key).or_insert(state)
            }
        };
        if let Some(until) = state.paused_until {
            if now.time < until {
                self.counters.tripped += 1;
                self.envelope.count(Refusal::Tripped, Some(rule));
                return false;
            }
            state.paused_until = None;
            state.window.clear();
        }
        if state.window.admit(now.time, trip.per_ns, trip.starts) {
            if recent.is_none() {
                // Quiet for a window: forget it again.
                self.envelope.breakers.remove(&key);
            }
            return true;
        }
        state.paused_until = Some(now.time.plus_nanos(trip.pause_ns));
        self.counters.tripped += 1;
        self.envelope.count(Refusal::Tripped, Some(rule));
        let name = self
            .rule_name(rule)
            .map(|n| n.to_string())
            .unwrap_or_default();
        let message = format!(
            "rule tripped: more than {} runs started within {} ms; its triggers are refused for {} ms",
            trip.starts,
            trip.per_ns / 1_000_000,
            trip.pause_ns / 1_000_000
        );
        self.warn(rule, "tripped", message);
        self.submit_toast(
            &format!("tripped-{name}"),
            &format!("Rule {name} paused: it started too often"),
        );
        false
    }

    fn warn(&mut self, rule: usize, code: &'static str, message: String) {
        let name = self.rule_name(rule);
        self.effects.push_back(Effect::Log(LogLine {
            level: Level::Warn,
            rule: name,
            step: None,
            finally: false,
            run: None,
            code: Some(code),
            message,
        }));
    }

    /// A rule's refusals by the envelope.
    pub fn envelope_counts(&self, rule: usize) -> EnvelopeCounts {
        self.envelope.counts(rule)
    }
}
