//! Overrides (docs/operating.md#turning-a-rule-off-or-on): an operator turns
//! a rule off or on while the engine runs. A rule turned off is treated like
//! a rule disabled in its bundle (docs/rules.md#disabled-rules): no new
//! trigger matches it and its `cancel-on` no longer applies, while its live
//! run walks to its end, so the vehicle is not left half-changed. What has
//! not started a run yet (a held debounce, a running hold, a `queue`
//! backlog) is dropped with it.

use super::Engine;
use crate::index::TopicIndex;
use rulecore::bundle::Payload;

/// The topic indexes of the rules that are on.
#[derive(Debug)]
pub(crate) struct Indexes {
    pub on: TopicIndex,
    pub cancel: TopicIndex,
    /// Rules that are off, by their `on` patterns, for
    /// [`NonFireReason::RuleDisabled`](crate::NonFireReason::RuleDisabled).
    pub disabled: TopicIndex,
    pub live_rules: u64,
}

/// Indexes every rule by whether `enabled(position)` says it is on.
pub(crate) fn indexes(payload: &Payload, enabled: impl Fn(usize) -> bool) -> Indexes {
    let mut indexes = Indexes {
        on: TopicIndex::default(),
        cancel: TopicIndex::default(),
        disabled: TopicIndex::default(),
        live_rules: 0,
    };
    for (position, rule) in payload.rules.iter().enumerate() {
        let index = u32::try_from(position).unwrap_or(u32::MAX);
        if enabled(position) {
            indexes.live_rules += 1;
            for pattern in &rule.on {
                indexes.on.insert(pattern, index);
            }
            for pattern in rule.cancel_on() {
                indexes.cancel.insert(pattern, index);
            }
        } else {
            for pattern in &rule.on {
                indexes.disabled.insert(pattern, index);
            }
        }
    }
    indexes.on.shrink();
    indexes.cancel.shrink();
    indexes.disabled.shrink();
    indexes
}

/// What [`Engine::set_enabled`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnableChange {
    /// The rule was already in that state.
    Unchanged,
    /// The rule changed state.
    Changed,
}

/// [`Engine::set_enabled`] named a rule the bundle does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the bundle has no rule named `{0}`")]
pub struct UnknownRule(pub String);

impl Engine {
    /// Turns rule `name` on or off from now on. Its live run (if any) is
    /// left to finish; a held debounce, a running hold and a `queue`
    /// backlog are dropped when it goes off. The service then subscribes to
    /// the patterns of the rules [`Engine::is_enabled`] says are on.
    pub fn set_enabled(&mut self, name: &str, enabled: bool) -> Result<EnableChange, UnknownRule> {
        let rule = self
            .rule_index(name)
            .ok_or_else(|| UnknownRule(name.to_string()))?;
        if !self.rules.set_enabled(rule, enabled) {
            return Ok(EnableChange::Unchanged);
        }
        if !enabled {
            // Every key of a keyed rule (docs/rules.md#keyed-runs).
            self.each_key(rule, |engine| {
                engine.hold_cancel(rule);
                let state = &mut engine.rules[rule];
                state.clear_backlog();
                if state.take_debounce().is_some() {
                    engine.timers.disarm();
                }
            });
        }
        self.reindex();
        Ok(EnableChange::Changed)
    }

    /// Whether the rule at `rule` (bundle position) is on now: its
    /// bundle's `enabled`, unless an override changed it.
    pub fn is_enabled(&self, rule: usize) -> bool {
        self.rules.is_enabled(rule)
    }

    fn reindex(&mut self) {
        let runs = &self.rules;
        self.indexes = indexes(&self.payload, |position| runs.is_enabled(position));
        self.bus_follow_rules();
    }
}
