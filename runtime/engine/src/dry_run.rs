//! The dry run behind `v1.test` (docs/operating.md#testing-a-rule-against-an-event):
//! what one rule would do with a supplied event, against the current state
//! and the rule's current runs, cooldown and backlog. It changes nothing:
//! no run starts, no counter moves, no effect is queued.

use super::{Engine, Time};
use crate::time::Now;
use rulecore::bundle::Concurrency;
use rulecore::bytecode::Program;
use rulecore::event::Event;
use rulecore::vm::eval_bool;
use std::sync::Arc;

/// A `when` evaluated against the event and the current state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhenResult {
    True,
    False,
    /// The evaluation failed; a live trigger would count it as not met.
    Error(String),
}

/// One step of the rule, with its own `when` judged now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCheck {
    pub index: u32,
    pub after_ms: u64,
    pub durable: bool,
    /// `None`: the step has no `when`.
    pub when: Option<WhenResult>,
}

/// What the rule's policies would do with the trigger, checked in the
/// order of docs/semantics.md#handling-one-event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The rule is off (bundle or override): nothing matches it.
    Disabled,
    /// No `on` pattern matches the event's topic.
    NotMatched,
    WhenFalse,
    WhenError,
    /// `for`: a hold would start; the rule fires only once `when` has
    /// stayed true this long.
    Hold {
        for_ms: u64,
    },
    /// `for`: a hold is running; the event would replace its held event,
    /// and the rule fires in `left_ms` unless `when` turns false first.
    Holding {
        for_ms: u64,
        left_ms: u64,
    },
    /// `for`: the hold completed already; no new one starts until `when`
    /// was false once.
    HoldFired,
    /// `debounce`: the event would be held for a quiet window this long.
    Debounce {
        window_ms: u64,
    },
    /// `cooldown`: suppressed, the rule fired too recently.
    Cooldown {
        left_ms: u64,
    },
    /// A new run would start.
    Start,
    /// `restart`: the live run would end and a new one start.
    Restart {
        run: Arc<str>,
    },
    /// `drop`: ignored while the live run goes on.
    Drop {
        run: Arc<str>,
    },
    /// `queue`: held in the backlog at this 1-based position.
    Queue {
        position: usize,
    },
    /// `queue`: refused, the backlog is full.
    Refused {
        backlog: usize,
    },
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
    pub when: Option<WhenResult>,
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
        let state = &self.rules[rule];
        let matched = spec.on.iter().any(|pattern| pattern.matches(&event.topic));
        let cancels = state.enabled && spec.cancel_on().iter().any(|p| p.matches(&event.topic));
        let when = spec.when.as_ref().map(|program| self.judge(program, event));
        let checks = |steps: &[rulecore::bundle::Step]| -> Vec<StepCheck> {
            steps
                .iter()
                .zip(0u32..)
                .map(|(step, index)| StepCheck {
                    index,
                    after_ms: step.after_ns / 1_000_000,
                    durable: step.durable,
                    when: step.when.as_ref().map(|program| self.judge(program, event)),
                })
                .collect()
        };
        let steps = checks(&spec.steps);
        let finally = checks(spec.finally());
        let verdict = match (&when, state.enabled, matched) {
            (_, false, _) => Verdict::Disabled,
            (_, true, false) => Verdict::NotMatched,
            (Some(WhenResult::False), ..) => Verdict::WhenFalse,
            (Some(WhenResult::Error(_)), ..) => Verdict::WhenError,
            _ => self.policy_verdict(rule, cancels, now.time),
        };
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

    fn judge(&self, program: &Program, event: &Event) -> WhenResult {
        match eval_bool(program, &self.payload.consts, event, &self.state) {
            Ok(true) => WhenResult::True,
            Ok(false) => WhenResult::False,
            Err(error) => WhenResult::Error(error.to_string()),
        }
    }

    /// What a met trigger does to a rule with `for`
    /// (docs/semantics.md#hold). A cancel ends the hold first, whatever it
    /// was, so the trigger starts a new one.
    fn hold_verdict(&self, rule: usize, cancels: bool, now: Time) -> Verdict {
        let for_ms = self.payload.rules[rule].hold_ns() / 1_000_000;
        let hold = self.rules[rule].hold().filter(|_| !cancels);
        match hold.map(|hold| hold.token()) {
            None => Verdict::Hold { for_ms },
            Some(None) => Verdict::HoldFired,
            Some(Some(token)) => {
                let left_ns = self
                    .timers
                    .entries()
                    .find(|entry| entry.token == token)
                    .map_or(0, |entry| entry.deadline.since(now));
                Verdict::Holding {
                    for_ms,
                    left_ms: left_ns.div_ceil(1_000_000),
                }
            }
        }
    }

    /// Steps 3 to 5 of docs/semantics.md#handling-one-event for a met trigger.
    fn policy_verdict(&self, rule: usize, cancels: bool, now: Time) -> Verdict {
        let spec = &self.payload.rules[rule];
        let state = &self.rules[rule];
        if spec.hold_ns() > 0 {
            return self.hold_verdict(rule, cancels, now);
        }
        if spec.debounce_ns() > 0 {
            return Verdict::Debounce {
                window_ms: spec.debounce_ns() / 1_000_000,
            };
        }
        if let Some(last) = state.last_fire() {
            let since = now.since(last.time);
            if spec.cooldown_ns() > 0 && since < spec.cooldown_ns() {
                return Verdict::Cooldown {
                    left_ms: (spec.cooldown_ns() - since).div_ceil(1_000_000),
                };
            }
        }
        // A cancel ends the live run (and the backlog) before the match; a
        // run with finally steps goes on to them, and one in them is not
        // cancelled (docs/semantics.md#finally).
        let ended = |run: &crate::Run| cancels && !run.finally && spec.finally().is_empty();
        let Some(run) = state.run.as_ref().filter(|run| !ended(run)) else {
            return Verdict::Start;
        };
        let run = Arc::clone(&run.id);
        let backlog = if cancels { 0 } else { state.backlog_len() };
        match spec.concurrency {
            Concurrency::Restart => Verdict::Restart { run },
            Concurrency::Drop => Verdict::Drop { run },
            Concurrency::Queue if backlog < self.config.queue_backlog => Verdict::Queue {
                position: backlog + 1,
            },
            Concurrency::Queue => Verdict::Refused { backlog },
        }
    }
}
