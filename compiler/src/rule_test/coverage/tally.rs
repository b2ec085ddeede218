//! Counting one simulation's output lines (docs/simulation.md#output) into
//! the rules' coverage (docs/rulec.md#coverage). The simulation runs with
//! `--explain`, so every decision on a matching event is a line: a
//! `non-fire` with its reason, or a `run-start`.
//!
//! - The rule's `when`: `non-fire` `when-false` and `when-error` are false;
//!   `hold-kept` and `hold-ended` (a hold judged again on a state change)
//!   are true and false, with no matching event, and a `hold-ended` right
//!   after the rule's own `eval-error` line is an error besides;
//!   every other reason but `rule-disabled` came after a true `when`, and
//!   so does a `run-start` that is no deferred start (the end of a debounce
//!   window or a hold, whose event had its `non-fire` already, or a queued
//!   trigger starting when the run before it ends).
//! - A step: reached once per run, pass and step, by its `action` (a
//!   refused-whole action comes again: counted once), its `step-skipped`
//!   (its `when` false or failed), or its `eval-error` when the next line
//!   of the rule is no `step-skipped` (a value that failed to compute,
//!   after a true `when`).

use super::{RuleCoverage, StepCoverage};
use rulecore::bundle::Payload;
use ruled_engine::sim::{Line, LineKind, LineReason};
use ruled_engine::{EndReason, NonFireReason, NoteKind, NoteReason};
use std::collections::{HashMap, HashSet};

/// One simulation's count, into the coverage of its rules.
pub(super) struct Tally<'a> {
    payload: &'a Payload,
    rules: &'a mut [RuleCoverage],
    /// Rule indices by name; a disabled rule may share an enabled one's
    /// name (docs/rules.md#disabled-rules), so each has its own.
    enabled: HashMap<&'a str, usize>,
    disabled: HashMap<&'a str, usize>,
    /// Each rule's previous line.
    previous: HashMap<usize, LineKind>,
    /// Steps reached: (rule, run, finally, step, pass).
    reached: HashSet<(usize, String, bool, u32, u32)>,
    /// A step's `eval-error` waiting for the rule's next line, which says
    /// whether it was the `when` (a `step-skipped` follows) or a value.
    eval_error: HashMap<usize, (u32, bool)>,
    /// Rules whose own `when` just failed (an `eval-error` line with no
    /// step), waiting for the rule's next line.
    when_failed: HashSet<usize>,
    /// Triggers a `queue` rule holds in its backlog.
    queued: HashMap<usize, u64>,
    /// Runs in their finally steps.
    in_finally: HashSet<String>,
}

impl<'a> Tally<'a> {
    pub(super) fn new(payload: &'a Payload, rules: &'a mut [RuleCoverage]) -> Self {
        let mut enabled = HashMap::new();
        let mut disabled = HashMap::new();
        for (index, rule) in payload.rules.iter().enumerate() {
            let names = if rule.enabled {
                &mut enabled
            } else {
                &mut disabled
            };
            names.entry(&*rule.name).or_insert(index);
        }
        Self {
            payload,
            rules,
            enabled,
            disabled,
            previous: HashMap::new(),
            reached: HashSet::new(),
            eval_error: HashMap::new(),
            when_failed: HashSet::new(),
            queued: HashMap::new(),
            in_finally: HashSet::new(),
        }
    }

    /// Counts every line, in order.
    pub(super) fn lines(mut self, lines: &[Line]) {
        for line in lines {
            self.line(line);
        }
        let pending: Vec<(usize, (u32, bool))> = self.eval_error.drain().collect();
        for (rule, (step, finally)) in pending {
            self.value_failed(rule, step, finally);
        }
    }

    fn line(&mut self, line: &Line) {
        if line.kind == LineKind::Restart {
            // A stop ends every run and forgets every backlog.
            self.queued.clear();
            self.in_finally.clear();
        }
        let disabled_line = line.reason == Some(non_fire(NonFireReason::RuleDisabled));
        let names = if disabled_line {
            &self.disabled
        } else {
            &self.enabled
        };
        let Some(rule) = line
            .rule
            .as_deref()
            .and_then(|name| names.get(name).copied())
        else {
            return;
        };
        if line.kind != LineKind::Note(NoteKind::NonFire) {
            self.when_failed.remove(&rule);
        }
        if let Some((step, finally)) = self.eval_error.remove(&rule) {
            let skipped = line.kind == LineKind::Note(NoteKind::StepSkipped)
                && line.step == Some(step)
                && line.finally == finally;
            if !skipped {
                self.value_failed(rule, step, finally);
            }
        }
        match line.kind {
            LineKind::Note(NoteKind::NonFire) => {
                let when_failed = self.when_failed.remove(&rule);
                self.non_fire(rule, line.reason, when_failed);
            }
            LineKind::Note(NoteKind::RunStart) => self.run_start(rule),
            LineKind::Note(NoteKind::FinallyStart) => {
                // The cancel emptied the backlog before the finally steps.
                self.queued.remove(&rule);
                self.in_finally.extend(line.run.clone());
            }
            LineKind::Note(NoteKind::RunEnd) => self.run_end(rule, line),
            LineKind::Action => self.step_judged(rule, line, true),
            LineKind::Note(NoteKind::StepSkipped) => self.step_judged(rule, line, false),
            // The rule's own `when` error has its `non-fire when-error`,
            // or, a hold judged again, its `hold-ended`.
            LineKind::EvalError => match line.step {
                Some(step) => {
                    self.eval_error.insert(rule, (step, line.finally));
                }
                None => {
                    self.when_failed.insert(rule);
                }
            },
            _ => {}
        }
        self.previous.insert(rule, line.kind);
    }

    /// Whether the rule's triggers go through a window first (`debounce`,
    /// `for`): its decisions are their `non-fire` lines, and what the
    /// window's end dispatches is no new decision.
    fn windowed(&self, rule: usize) -> bool {
        let spec = &self.payload.rules[rule];
        spec.debounce_ns() > 0 || spec.hold_ns() > 0
    }

    /// `when_failed`: the rule's line before this one was its own `when`'s
    /// `eval-error`.
    fn non_fire(&mut self, rule: usize, reason: Option<LineReason>, when_failed: bool) {
        let Some(LineReason::Note(NoteReason::NonFire(reason))) = reason else {
            return;
        };
        if reason == NonFireReason::Queued {
            *self.queued.entry(rule).or_default() += 1;
        }
        let windowed = self.windowed(rule);
        let coverage = &mut self.rules[rule];
        let when_true = match reason {
            NonFireReason::RuleDisabled => {
                coverage.matched += 1;
                return;
            }
            // A hold judged again on a state change: its `when` seen, no
            // matching event.
            NonFireReason::HoldKept | NonFireReason::HoldEnded => {
                // Its `when`'s own `eval-error` line (no step) comes
                // right before a `hold-ended` the error caused.
                let failed = when_failed && reason == NonFireReason::HoldEnded;
                if let Some(when) = coverage.when.as_mut() {
                    match reason {
                        NonFireReason::HoldKept => when.seen_true += 1,
                        _ => when.seen_false += 1,
                    }
                    when.errors += u64::from(failed);
                }
                return;
            }
            NonFireReason::WhenFalse | NonFireReason::WhenError => false,
            NonFireReason::DebounceHeld
            | NonFireReason::DebounceReset
            | NonFireReason::HoldPending
            | NonFireReason::HoldFired => true,
            // After a window these are what its end dispatched: counted
            // at the window's start.
            NonFireReason::Cooldown
            | NonFireReason::Dropped
            | NonFireReason::Queued
            | NonFireReason::Refused
                if windowed =>
            {
                return;
            }
            NonFireReason::Cooldown
            | NonFireReason::Dropped
            | NonFireReason::Queued
            | NonFireReason::Refused
            | NonFireReason::Tripped => true,
        };
        coverage.matched += 1;
        if let Some(when) = coverage.when.as_mut() {
            if when_true {
                when.seen_true += 1;
            } else {
                when.seen_false += 1;
                when.errors += u64::from(reason == NonFireReason::WhenError);
            }
        }
    }

    fn run_start(&mut self, rule: usize) {
        self.rules[rule].runs += 1;
        if self.windowed(rule) {
            return;
        }
        // A queued trigger starts right after the run before it ends.
        let after_end = self.previous.get(&rule) == Some(&LineKind::Note(NoteKind::RunEnd));
        if let Some(queued) = self.queued.get_mut(&rule).filter(|n| after_end && **n > 0) {
            *queued -= 1;
            return;
        }
        let coverage = &mut self.rules[rule];
        coverage.matched += 1;
        if let Some(when) = coverage.when.as_mut() {
            when.seen_true += 1;
        }
    }

    fn run_end(&mut self, rule: usize, line: &Line) {
        let in_finally = line
            .run
            .as_ref()
            .is_some_and(|run| self.in_finally.remove(run));
        let cancelled =
            line.reason == Some(LineReason::Note(NoteReason::RunEnd(EndReason::Cancelled)));
        // A cancel empties the backlog; one that ends the finally steps
        // leaves the triggers queued during them.
        if cancelled && !in_finally {
            self.queued.remove(&rule);
        }
    }

    /// A step's `action` (`when` true) or `step-skipped` (false), once
    /// per run, pass and step.
    fn step_judged(&mut self, rule: usize, line: &Line, met: bool) {
        let (Some(step), Some(run)) = (line.step, line.run.clone()) else {
            return;
        };
        let pass = line.pass.unwrap_or(0);
        if self.reached.insert((rule, run, line.finally, step, pass)) {
            self.reach(rule, step, line.finally, met);
        }
    }

    /// A step's value failed to compute: its `when` (if any) was true.
    fn value_failed(&mut self, rule: usize, step: u32, finally: bool) {
        self.reach(rule, step, finally, true);
    }

    fn reach(&mut self, rule: usize, step: u32, finally: bool, met: bool) {
        let coverage = &mut self.rules[rule];
        let steps: &mut [StepCoverage] = if finally {
            &mut coverage.finally
        } else {
            &mut coverage.steps
        };
        let Some(step) = usize::try_from(step).ok().and_then(|i| steps.get_mut(i)) else {
            return;
        };
        step.reached += 1;
        if let Some(outcomes) = step.when.as_mut() {
            if met {
                outcomes.seen_true += 1;
            } else {
                outcomes.seen_false += 1;
            }
        }
    }
}

fn non_fire(reason: NonFireReason) -> LineReason {
    LineReason::Note(NoteReason::NonFire(reason))
}
