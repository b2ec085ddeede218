//! One event (docs/semantics.md#handling-one-event): the rules it
//! cancels, then each rule it matches, in the index's order, a part at a
//! time if the driver asks; for each, the verdict of [`crate::decide`]
//! applied: a hold, a debounce window, a suppressed or refused trigger, a
//! run started, restarted or queued.

use crate::decide::{self, Verdict, WhenResult};
use crate::keyed::Focus;
use crate::rule_state::{Debounce, Fired};
use crate::timers::TimerKind;
use crate::{EndReason, Engine, Level, NonFireReason, Note, Now, TriggerOutcome};
use rulecore::bundle::{Payload, Rule};
use rulecore::event::Event;
use std::sync::Arc;

/// The buffers one event's index lookups reuse, so that the event path
/// allocates nothing once they have grown.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// The rules the event cancels, then the rules it starts.
    matches: Vec<u32>,
    /// The rules turned off that it would start (explain and traces only).
    disabled: Vec<u32>,
    /// The rule `when` just found true, with its reads (explain and
    /// traces only), for the decision that follows.
    pub(crate) judged: Option<crate::why::Judged>,
    /// What the `when` of the step being handed over read, for its job
    /// (explain only).
    pub(crate) step_read: Option<Vec<rulecore::vm::Read>>,
}

/// An event whose matched rules are handled a part at a time
/// ([`Engine::event_start`], [`Engine::event_next`]): the rules still to
/// handle, in the index's order.
#[derive(Debug)]
pub struct EventParts {
    pub(crate) now: Now,
    event: Arc<Event>,
    /// The payload the matches index into.
    payload: Arc<Payload>,
    matches: Vec<u32>,
    /// The next match to handle.
    next: usize,
}

/// What the engine's decision (`decide`) said of an operator's event for one matched
/// rule, and was applied ([`Engine::operator_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub rule: Arc<str>,
    pub verdict: Verdict,
    /// The run the verdict started (`start`, `restart`), while it is live.
    pub run: Option<Arc<str>>,
    /// The rule's `when` and what it read (docs/semantics.md#what-a-when-read);
    /// `None`: the rule has none.
    pub when: Option<crate::why::WhenCheck>,
}

impl Engine {
    /// One event from the bus (docs/semantics.md#handling-one-event).
    pub fn handle_event(&mut self, now: Now, event: Event) {
        if let Some(mut parts) = self.event_start(now, event) {
            while self.event_next(&mut parts, usize::MAX) {}
        }
    }

    /// [`Engine::handle_event`] a part at a time, so the caller can perform
    /// each part's effects (the pending records of the runs it parks)
    /// before the next part decides more: one event matching 10,000 rules
    /// then has its first record in Redis at once, not once all 10,000 are
    /// decided. Cancels the rules the event cancels now; returns the
    /// matches still to handle ([`Engine::event_next`]), `None` when there
    /// are none. Until they are all handled the caller gives the engine no
    /// other input, so the outcome and the order of every effect are
    /// [`Engine::handle_event`]'s.
    pub fn event_start(&mut self, now: Now, event: Event) -> Option<EventParts> {
        if self.stopped {
            return None;
        }
        let mut cancels = std::mem::take(&mut self.scratch.matches);
        self.indexes.cancel.lookup(&event.topic, &mut cancels);
        // 1. Cancel first, so an event can stop a rule and fire another, and
        // a rule with the topic in both `on` and `cancel-on` is stopped
        // before it starts again.
        for &rule in &cancels {
            // Every key of a keyed rule (docs/rules.md#keyed-runs).
            let rule = rule as usize;
            self.each_key(rule, |engine| engine.cancel_rule(rule, now));
        }
        let mut matches = cancels;
        self.indexes.on.lookup(&event.topic, &mut matches);
        let mut disabled = std::mem::take(&mut self.scratch.disabled);
        disabled.clear();
        if self.config.explain || self.traces.enabled() {
            self.indexes.disabled.lookup(&event.topic, &mut disabled);
        }
        if matches.is_empty() && disabled.is_empty() {
            self.scratch.matches = matches;
            self.scratch.disabled = disabled;
            return None;
        }
        let event = Arc::new(event);
        for &rule in &disabled {
            self.non_fire(
                rule as usize,
                NonFireReason::RuleDisabled,
                &event,
                now,
                None,
            );
        }
        self.scratch.disabled = disabled;
        Some(EventParts {
            now,
            event,
            payload: Arc::clone(&self.payload),
            matches,
            next: 0,
        })
    }

    /// Handles the next `count` rules `parts` matched (their `when`, hold,
    /// debounce or dispatch, in the index's order); returns whether any
    /// are left.
    pub fn event_next(&mut self, parts: &mut EventParts, count: usize) -> bool {
        self.event_part(parts, count, &mut |_, _| {})
    }

    /// An event an operator hands in (`v1.emit`,
    /// docs/operating.md#handing-the-rules-an-event): handled as one from
    /// the bus ([`Engine::handle_event`]: cancels, then each matched rule's
    /// verdict of the engine's decision (`decide`) applied), never published. Returns the
    /// first `shown` matched rules' verdicts with their `when`'s result and
    /// reads, in the index's order, and how many rules matched in all.
    pub fn operator_event(
        &mut self,
        now: Now,
        event: Event,
        shown: usize,
    ) -> (Vec<Decided>, usize) {
        let Some(mut parts) = self.event_start(now, event) else {
            return (Vec::new(), 0);
        };
        let total = parts.matches.len();
        let event = Arc::clone(&parts.event);
        let mut seen = Vec::with_capacity(total.min(shown));
        self.event_part(&mut parts, usize::MAX, &mut |rule, verdict| {
            if seen.len() < shown {
                seen.push((rule, verdict.clone()));
            }
        });
        let decided = seen
            .into_iter()
            .map(|(rule, verdict)| {
                // The run this event started, if it is still live.
                let started = matches!(verdict, Verdict::Start | Verdict::Restart { .. });
                let run = self.rules.run(rule).filter(|_| started);
                // Judged again by the bytecode VM with its reads: handling
                // the event changed neither it nor the state, so this is
                // the result the decision had.
                let when = self.payload.rules[rule].when.as_deref();
                Decided {
                    rule: self.name_of(rule),
                    run: run.map(|run| Arc::clone(&run.id)),
                    verdict,
                    when: when.map(|program| self.explain_when(program, &event)),
                }
            })
            .collect();
        (decided, total)
    }

    /// [`Engine::event_next`], telling `seen` each rule's verdict before
    /// it is applied.
    fn event_part(
        &mut self,
        parts: &mut EventParts,
        count: usize,
        seen: &mut impl FnMut(usize, &Verdict),
    ) -> bool {
        let end = parts.next.saturating_add(count).min(parts.matches.len());
        for position in parts.next..end {
            let rule = parts.matches[position] as usize;
            let payload = Arc::clone(&parts.payload);
            self.match_rule(&payload.rules[rule], rule, &parts.event, parts.now, seen);
        }
        parts.next = end;
        if end < parts.matches.len() {
            return true;
        }
        let mut matches = std::mem::take(&mut parts.matches);
        matches.clear();
        self.scratch.matches = matches;
        false
    }

    /// Steps 2 to 5 of docs/semantics.md#handling-one-event for one rule
    /// whose `on` matches: its `when` (an error logged and counted), then
    /// the verdict of [`decide::decide`], applied.
    pub(crate) fn match_rule(
        &mut self,
        spec: &Rule,
        rule: usize,
        event: &Arc<Event>,
        now: Now,
        seen: &mut impl FnMut(usize, &Verdict),
    ) {
        // 2. Match.
        let when = spec.when.as_ref().map(|program| {
            let result = self.eval(rule, None, program, event);
            match &result {
                Ok(true) => self.judged_true(rule, program, event),
                Ok(false) => self.when_not_met(rule, program, event, now, None),
                Err(error) => self.when_not_met(rule, program, event, now, Some(error)),
            }
            WhenResult::of(&result)
        });
        if spec.per().is_some() && !self.focus_event(rule, event, when.as_ref(), now, seen) {
            self.scratch.judged = None;
            return;
        }
        let trigger = decide::Trigger {
            spec,
            state: &self.rules[rule],
            matched: true,
            cancels: false,
            when: when.as_ref(),
            now: now.time,
            queue_backlog: self.config.queue_backlog,
        };
        // Applying a hold needs no time left: the hold keeps its timer.
        let verdict = decide::decide(&trigger, |_| 0);
        seen(rule, &verdict);
        self.apply(rule, verdict, Arc::clone(event), now);
        // A decision that did not take the reads (a queued event) leaves
        // them to no later one.
        self.scratch.judged = None;
    }

    /// A keyed rule (docs/rules.md#keyed-runs): the event's key into the
    /// rule's slot. A met trigger tracks a new key; one not met needs only
    /// a key already tracked (its hold may end). `false`: nothing more to
    /// do (the key failed, is not tracked, or every key is busy).
    fn focus_event(
        &mut self,
        rule: usize,
        event: &Arc<Event>,
        when: Option<&WhenResult>,
        now: Now,
        seen: &mut impl FnMut(usize, &Verdict),
    ) -> bool {
        let met = matches!(when, None | Some(WhenResult::True));
        let unmet = match when {
            Some(WhenResult::Error(_)) => Verdict::WhenError,
            _ => Verdict::WhenFalse,
        };
        let key = match self.event_key(rule, event) {
            Ok(key) => key,
            Err(error) => {
                if met {
                    self.non_fire(rule, NonFireReason::WhenError, event, now, Some(&error));
                }
                seen(rule, &Verdict::WhenError);
                return false;
            }
        };
        match self.focus_key(rule, &key, met, now) {
            Focus::Ready => true,
            Focus::Absent => {
                seen(rule, &unmet);
                false
            }
            Focus::Full => {
                seen(rule, &Verdict::Refused { backlog: 0 });
                self.counters.refused += 1;
                self.trigger_note(rule, TriggerOutcome::Refused, event, now);
                let name = self.name(rule);
                let max = crate::keyed::MAX_KEYS;
                self.log(
                    Level::Warn,
                    Some(name),
                    None,
                    format!(
                        "trigger refused: all {max} keys of the rule are busy (key {key:?} is new)"
                    ),
                );
                false
            }
        }
    }

    fn cancel_rule(&mut self, rule: usize, now: Now) {
        // A cancel ends a hold and re-arms the rule (docs/semantics.md#hold).
        self.hold_cancel(rule);
        // The backlog goes first so ending the run does not start a held trigger.
        self.rules[rule].clear_backlog();
        self.cancel_run(rule, now);
    }

    /// Steps 4 and 5 of docs/semantics.md#handling-one-event for a trigger
    /// past its `when`, hold and debounce: cooldown, then concurrency.
    pub(crate) fn dispatch(&mut self, rule: usize, event: Arc<Event>, now: Now) {
        let payload = Arc::clone(&self.payload);
        let trigger = decide::Trigger {
            spec: &payload.rules[rule],
            state: &self.rules[rule],
            matched: true,
            cancels: false,
            when: None,
            now: now.time,
            queue_backlog: self.config.queue_backlog,
        };
        let verdict = decide::policy(&trigger);
        self.apply(rule, verdict, event, now);
    }

    /// Does what [`decide::decide`] said of a trigger of `rule`.
    fn apply(&mut self, rule: usize, verdict: Verdict, event: Arc<Event>, now: Now) {
        let fired = Fired {
            time: now.time,
            wall_ms: now.wall_ms,
        };
        match verdict {
            // The index hands over enabled, matching rules only.
            Verdict::Disabled | Verdict::NotMatched => {}
            Verdict::WhenFalse | Verdict::WhenError => {
                // `for`: a false `when` matters too (docs/semantics.md#hold).
                if self.payload.rules[rule].hold_ns() > 0 {
                    self.hold_match(rule, event, false, now);
                }
            }
            Verdict::Hold { .. } | Verdict::Holding { .. } | Verdict::HoldFired => {
                self.hold_match(rule, event, true, now);
            }
            Verdict::Debounce { .. } => self.debounce(rule, event, now),
            Verdict::Cooldown { .. } => {
                self.trigger_note(rule, TriggerOutcome::Suppressed, &event, now);
            }
            Verdict::Start | Verdict::Restart { .. } if !self.breaker_admits(rule, now) => {
                // Tripped (docs/safety.md#the-breaker): a live run goes on.
                self.non_fire(rule, NonFireReason::Tripped, &event, now, None);
            }
            Verdict::Start => {
                self.rules[rule].set_last_fire(fired);
                self.start_run(rule, event, now);
            }
            Verdict::Restart { .. } => {
                self.rules[rule].set_last_fire(fired);
                self.end_run(rule, EndReason::Restarted, now);
                self.start_run(rule, event, now);
            }
            Verdict::Drop { .. } => {
                self.rules[rule].set_last_fire(fired);
                self.trigger_note(rule, TriggerOutcome::Dropped, &event, now);
            }
            Verdict::Queue { .. } => {
                self.rules[rule].set_last_fire(fired);
                self.rules[rule].push_backlog(Arc::clone(&event));
                self.trigger_note(rule, TriggerOutcome::Queued, &event, now);
            }
            Verdict::Refused { .. } => {
                self.rules[rule].set_last_fire(fired);
                self.refuse(rule, &event, now);
            }
        }
    }

    /// 3. Debounce: hold the latest event, restart the quiet window.
    fn debounce(&mut self, rule: usize, event: Arc<Event>, now: Now) {
        let reason = if self.rules[rule].take_debounce().is_some() {
            self.timers.disarm();
            NonFireReason::DebounceReset
        } else {
            NonFireReason::DebounceHeld
        };
        self.non_fire(rule, reason, &event, now, None);
        let window = self.payload.rules[rule].debounce_ns();
        let token = self.arm(now.time.plus_nanos(window), rule, TimerKind::Debounce);
        self.rules[rule].set_debounce(Debounce { event, token });
    }

    /// `queue`: the backlog is full, the trigger is refused and counted.
    fn refuse(&mut self, rule: usize, event: &Arc<Event>, now: Now) {
        self.counters.refused += 1;
        self.trigger_note(rule, TriggerOutcome::Refused, event, now);
        let cap = self.config.queue_backlog;
        let name = self.name(rule);
        self.log(
            Level::Warn,
            Some(name),
            None,
            format!("trigger refused: the queue backlog is full ({cap})"),
        );
    }

    /// A trigger that did not start a run: its note, and the non-fire.
    fn trigger_note(&mut self, rule: usize, outcome: TriggerOutcome, event: &Arc<Event>, now: Now) {
        let name = self.name(rule);
        self.note(Note::Trigger {
            rule: name,
            outcome,
        });
        self.non_fire(rule, outcome.into(), event, now, None);
    }
}
