//! The dry run behind `v1.test` (docs/operating.md#testing-a-rule-against-an-event):
//! what one rule would do with a supplied event, against the current state
//! and the rule's current runs, cooldown and backlog. It changes nothing:
//! no run starts, no counter moves, no effect is queued.

use super::{Engine, Time};
use crate::decide::{decide, Trigger, Verdict};
use crate::time::Now;
use crate::why::WhenCheck;
use rulecore::event::Event;
use std::sync::Arc;

/// One step of the rule, with its own `when` judged now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCheck {
    pub index: u32,
    pub after_ms: u64,
    pub durable: bool,
    /// `None`: the step has no `when`.
    pub when: Option<WhenCheck>,
}

/// The whole dry run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DryRun {
    pub rule: Arc<str>,
    pub enabled: bool,
    /// An `on` pattern matches the topic.
    pub matched: bool,
    /// A `cancel-on` pattern matches: the live run and backlog would end
    /// first.
    pub cancels: bool,
    /// `None`: the rule has no `when`.
    pub when: Option<WhenCheck>,
    pub steps: Vec<StepCheck>,
    /// The `finally` steps (docs/rules.md#finally), their `when` judged
    /// now too; indexed from 0 among themselves.
    pub finally: Vec<StepCheck>,
    pub verdict: Verdict,
}

impl Engine {
    /// Judges `event` against rule `name` without changing anything;
    /// `None` when the bundle has no such rule.
    pub fn dry_run(&self, name: &str, event: &Event, now: Now) -> Option<DryRun> {
        let rule = self.rule_index(name)?;
        let spec = &self.payload.rules[rule];
        // A keyed rule: the state of the event's key, fresh when it has
        // none yet (docs/rules.md#keyed-runs).
        let fresh = crate::rule_state::RuleState::idle(self.rules.is_enabled(rule));
        let state = self.key_state(rule, event).unwrap_or(&fresh);
        let matched = spec.on.iter().any(|pattern| pattern.matches(&event.topic));
        let cancels = state.enabled && spec.cancel_on().iter().any(|p| p.matches(&event.topic));
        let when = spec
            .when
            .as_ref()
            .map(|program| self.explain_when(program, event));
        let checks = |steps: &[rulecore::bundle::Step]| -> Vec<StepCheck> {
            steps
                .iter()
                .zip(0u32..)
                .map(|(step, index)| StepCheck {
                    index,
                    after_ms: step.after_ns / 1_000_000,
                    durable: step.durable,
                    when: step
                        .when
                        .as_ref()
                        .map(|program| self.explain_when(program, event)),
                })
                .collect()
        };
        let steps = checks(&spec.steps);
        let finally = checks(spec.finally());
        let trigger = Trigger {
            spec,
            state,
            matched,
            cancels,
            when: when.as_ref().map(|check| &check.result),
            now: now.time,
            queue_backlog: self.config.queue_backlog,
        };
        let verdict = decide(&trigger, |token| self.hold_left_ns(token, now.time));
        Some(DryRun {
            rule: self.name_of(rule),
            enabled: state.enabled,
            matched,
            cancels,
            when,
            steps,
            finally,
            verdict,
        })
    }

    /// How long the running hold of timer `token` has left at `now`.
    fn hold_left_ns(&self, token: u64, now: Time) -> u64 {
        self.timers
            .entries()
            .find(|entry| entry.token == token)
            .map_or(0, |entry| entry.deadline.since(now))
    }
}
