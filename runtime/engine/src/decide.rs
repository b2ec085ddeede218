//! The trigger decision, pure (docs/semantics.md#handling-one-event): what
//! a rule does with an event, given its spec, its state, the `when`'s
//! result and the time. It changes nothing; the engine applies the
//! verdict (`Engine::match_rule`, `Engine::dispatch`) and the dry run
//! reports it (`v1.test`), so the two cannot drift apart.

use crate::rule_state::RuleState;
use crate::time::Time;
use crate::Run;
use rulecore::bundle::{Concurrency, Rule};
use std::sync::Arc;

/// A `when`'s result: judged by the dry run, recorded by a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhenResult {
    True,
    False,
    /// The evaluation failed; a live trigger counts it as not met.
    Error(Box<str>),
}

/// What the rule's policies do with the trigger, checked in the order of
/// docs/semantics.md#handling-one-event.
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

/// One rule facing one event: what the decision reads.
pub(crate) struct Trigger<'a> {
    pub spec: &'a Rule,
    pub state: &'a RuleState,
    /// An `on` pattern matches the topic.
    pub matched: bool,
    /// A `cancel-on` pattern matches and the cancel is still to come (the
    /// dry run); `false` once the engine has cancelled.
    pub cancels: bool,
    /// The rule's `when`; `None`: it has none.
    pub when: Option<&'a WhenResult>,
    pub now: Time,
    /// [`crate::EngineConfig::queue_backlog`].
    pub queue_backlog: usize,
}

/// The whole decision, steps 2 to 5 of docs/semantics.md#handling-one-event.
/// `hold_left_ns`: how long the running hold of timer `token` has left.
pub(crate) fn decide(trigger: &Trigger<'_>, hold_left_ns: impl FnOnce(u64) -> u64) -> Verdict {
    match (trigger.when, trigger.state.enabled, trigger.matched) {
        (_, false, _) => Verdict::Disabled,
        (_, true, false) => Verdict::NotMatched,
        (Some(WhenResult::False), ..) => Verdict::WhenFalse,
        (Some(WhenResult::Error(_)), ..) => Verdict::WhenError,
        _ if trigger.spec.hold_ns() > 0 => hold(trigger, hold_left_ns),
        _ if trigger.spec.debounce_ns() > 0 => Verdict::Debounce {
            window_ms: trigger.spec.debounce_ns() / 1_000_000,
        },
        _ => policy(trigger),
    }
}

/// What a met trigger does to a rule with `for`
/// (docs/semantics.md#hold). A cancel ends the hold first, whatever it
/// was, so the trigger starts a new one.
fn hold(trigger: &Trigger<'_>, hold_left_ns: impl FnOnce(u64) -> u64) -> Verdict {
    let for_ms = trigger.spec.hold_ns() / 1_000_000;
    let hold = trigger.state.hold().filter(|_| !trigger.cancels);
    match hold.map(|hold| hold.token()) {
        None => Verdict::Hold { for_ms },
        Some(None) => Verdict::HoldFired,
        Some(Some(token)) => Verdict::Holding {
            for_ms,
            left_ms: hold_left_ns(token).div_ceil(1_000_000),
        },
    }
}

/// Steps 4 and 5 of docs/semantics.md#handling-one-event for a trigger
/// past its `when`, hold and debounce: cooldown, then concurrency.
pub(crate) fn policy(trigger: &Trigger<'_>) -> Verdict {
    let (spec, state) = (trigger.spec, trigger.state);
    if let Some(last) = state.last_fire() {
        let since = trigger.now.since(last.time);
        if spec.cooldown_ns() > 0 && since < spec.cooldown_ns() {
            return Verdict::Cooldown {
                left_ms: (spec.cooldown_ns() - since).div_ceil(1_000_000),
            };
        }
    }
    // A cancel ends the live run (and the backlog) before the match; a
    // run with finally steps goes on to them, and one in them is not
    // cancelled (docs/semantics.md#finally).
    let ended = |run: &Run| trigger.cancels && !run.finally && spec.finally().is_empty();
    let Some(run) = state.run.as_ref().filter(|run| !ended(run)) else {
        return Verdict::Start;
    };
    let run = Arc::clone(&run.id);
    let backlog = if trigger.cancels {
        0
    } else {
        state.backlog_len()
    };
    match spec.concurrency {
        Concurrency::Restart => Verdict::Restart { run },
        Concurrency::Drop => Verdict::Drop { run },
        Concurrency::Queue if backlog < trigger.queue_backlog => Verdict::Queue {
            position: backlog + 1,
        },
        Concurrency::Queue => Verdict::Refused { backlog },
    }
}
