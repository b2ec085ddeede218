//! Live reload (docs/semantics.md#live-reload): a new bundle takes over a
//! running engine without losing what is in flight.
//!
//! Each live run is judged by the replay checks ([`step_refusal`]: rule
//! gone, step gone, fingerprint) against the step it is at; a run that
//! fails one ends with `run-end` reason `reloaded` (its timer and record
//! go), the others keep their id, event, pass, timer and record. Cooldown
//! times, statistics, queue backlogs, debounce windows and holds of rules
//! that stay move to the rule's new position under its new settings. The
//! cost is one pass over the rules and one over the armed timers.

use super::{Engine, Phase, ReplayDropReason};
use crate::timers::{TimerKind, Timers};
use crate::{step_refusal, DropReason, EndReason, Level, LogLine, Note, Now};
use rulecore::bundle::{Concurrency, Payload, Rule, StatePair};
use rulecore::rule_change::Comparison;
use std::collections::HashMap;
use std::sync::Arc;

/// What a reload changed (docs/semantics.md#live-reload).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    /// The new bundle is the loaded one: nothing was done.
    pub unchanged: bool,
    /// Rules (by name) only the new bundle has, in its order.
    pub added: Vec<String>,
    /// Rules only the old bundle had, in its order.
    pub removed: Vec<String>,
    /// Rules in both whose definition differs, in the old bundle's order:
    /// `rulec diff`'s "changed" ([`rulecore::rule_change`]).
    pub changed: Vec<String>,
    /// Live runs that continue under the new bundle.
    pub runs_kept: usize,
    /// Live runs the reload ended (`run-end` reason `reloaded`).
    pub runs_ended: usize,
}

impl Engine {
    /// Replaces the rules with `payload`'s (docs/semantics.md#live-reload);
    /// the effects (record removals, `run-end` notes, log lines naming the
    /// replay reason) are queued as usual. A bundle equal to the loaded one
    /// changes nothing. Ignored after [`Engine::stop`].
    pub fn reload(&mut self, payload: Arc<Payload>, now: Now) -> ReloadSummary {
        if self.stopped || Arc::ptr_eq(&payload, &self.payload) {
            return ReloadSummary {
                unchanged: true,
                ..ReloadSummary::default()
            };
        }
        let Diff {
            mut summary,
            targets,
            in_order,
        } = diff(&self.payload, &payload);
        // Rules refer to state pairs and constants by index: equal rules
        // with other pools still behave differently.
        let same_pools = self.payload.state_pairs == payload.state_pairs
            && self.payload.consts == payload.consts
            && self.payload.inputs == payload.inputs
            && self.payload.profile == payload.profile;
        if summary.is_empty() && in_order && same_pools {
            // Only the compiler version differs.
            self.payload = payload;
            summary.unchanged = true;
            return summary;
        }
        for (rule, target) in targets.iter().enumerate() {
            let new = target.map(|index| &payload.rules[index]);
            // Every key's run of a keyed rule (docs/rules.md#keyed-runs).
            self.each_key(rule, |engine| {
                if engine.rules.run(rule).is_none() {
                    return;
                }
                match engine.run_refusal(rule, new) {
                    Some(reason) => {
                        engine.end_for_reload(rule, reason);
                        summary.runs_ended += 1;
                    }
                    None => summary.runs_kept += 1,
                }
            });
            if new.is_some_and(|new| new.per().is_none()) && self.keys.is_keyed(rule) {
                // One key from now on: the slot's run goes on, the other
                // keys' runs end as a second run of the rule would.
                let ended = self.end_parked_runs(rule);
                summary.runs_kept -= ended;
                summary.runs_ended += ended;
            }
        }
        let timers = self.remapped_timers(&targets, &payload);
        let mut next = Engine::new(Arc::clone(&payload), self.config.clone());
        next.timers = timers;
        self.carry_over(&mut next, &targets);
        let schedules = std::mem::take(&mut self.schedules);
        *self = next;
        self.schedules_reloaded(schedules, now);
        self.after_reload(now);
        summary
    }

    /// Why the live run of `rule` cannot continue under `new` (its rule in
    /// the new bundle, `None`: gone), by the replay checks; `None`: it
    /// continues. Between repeat passes a run is at step 0 of its next pass.
    fn run_refusal(&self, rule: usize, new: Option<&Rule>) -> Option<ReplayDropReason> {
        let run = self.rules.run(rule)?;
        let step = match run.phase {
            // Draining: at the first finally step, which comes next.
            Phase::Gap { .. } | Phase::Draining { .. } => 0,
            Phase::Waiting { .. } | Phase::Due { .. } | Phase::Acting { .. } | Phase::Deciding => {
                run.step
            }
        };
        if run.finally {
            // The same checks against the finally steps (docs/semantics.md#finally).
            let old = self.payload.rules[rule].finally().get(step as usize);
            let Some(new) = new else {
                return Some(ReplayDropReason::RuleGone);
            };
            return match new.finally().get(step as usize) {
                None => Some(ReplayDropReason::StepGone),
                Some(spec) if old.is_some_and(|old| old.fingerprint == spec.fingerprint) => None,
                Some(_) => Some(ReplayDropReason::Fingerprint),
            };
        }
        let old = self.payload.rules[rule].steps.get(step as usize);
        step_refusal(new, step, |_, spec| {
            old.is_some_and(|old| old.fingerprint == spec.fingerprint)
        })
    }

    /// Ends a run the new bundle cannot continue: its timer and record go,
    /// the log names the replay reason, and an action it handed over still
    /// runs (its report is then only counted). The rule's backlog is kept
    /// for [`Engine::after_reload`].
    pub(crate) fn end_for_reload(&mut self, rule: usize, reason: ReplayDropReason) {
        let Some(run) = self.rules.take_run(rule) else {
            return;
        };
        let name = self.name(rule);
        if let Phase::Waiting { .. } | Phase::Gap { .. } | Phase::Due { .. } = run.phase {
            self.timers.disarm();
        }
        if let Phase::Due { .. } = run.phase {
            self.records.forget_due(run.fire_at, &run.id);
        }
        if run.owns_record {
            self.effects.push_back(crate::Effect::DropRecord {
                id: Arc::clone(&run.id),
                rule: Some(Arc::clone(&name)),
                reason: DropReason::Reloaded(reason),
            });
        }
        self.effects.push_back(crate::Effect::Log(LogLine {
            level: Level::Info,
            rule: Some(Arc::clone(&name)),
            step: Some(run.step),
            finally: run.finally,
            run: Some(Arc::clone(&run.id)),
            code: Some(reason.as_str()),
            message: format!("the reload ends this run: {}", reason.describe()),
        }));
        self.note(Note::RunEnd {
            run: run.id,
            rule: name,
            reason: EndReason::Reloaded,
        });
    }

    /// The armed timers that survive, renumbered to the new positions of
    /// their rules: kept runs' waits and gaps, and debounce windows and
    /// holds of rules that keep the setting.
    fn remapped_timers(&mut self, targets: &[Option<usize>], payload: &Payload) -> Timers {
        let mut timers = std::mem::take(&mut self.timers);
        timers.remap(|entry| {
            let target = targets.get(entry.rule as usize).copied().flatten()?;
            let spec = &payload.rules[target];
            let carried = match entry.kind {
                TimerKind::Run => true,
                TimerKind::Debounce => spec.debounce_ns() > 0,
                TimerKind::Hold => spec.hold_ns() > 0,
            };
            (carried && self.timer_is_live(entry)).then_some(target as u32)
        });
        timers
    }

    /// Moves what survives from `self` (the old engine, its ended runs
    /// already gone) into `next` (built on the new bundle): counters,
    /// queued effects, state values, jobs, and per rule its run,
    /// cooldown time, statistics, and (where the new rule still has the
    /// setting) backlog, debounce window and hold.
    fn carry_over(&mut self, next: &mut Engine, targets: &[Option<usize>]) {
        let payload = Arc::clone(&next.payload);
        for (rule, target) in targets.iter().enumerate() {
            let Some(target) = *target else { continue };
            let spec = &payload.rules[target];
            let settings = (
                spec.concurrency == Concurrency::Queue,
                spec.debounce_ns() > 0,
                spec.hold_ns() > 0,
            );
            self.rules[rule].carry_into(&mut next.rules[target], settings);
            self.carry_keys(rule, next, target, settings);
        }
        self.rules.carry_jobs_into(&mut next.rules, targets);
        carry_state(self.inputs.watched(), &self.state, &self.bus.present, next);
        next.bus.last_id = self.bus.last_id;
        // Steps waiting for room keep their place (docs/semantics.md#due-steps-the-pool-refused),
        // under their rule's new position: every key's of a keyed rule.
        let waiting: Vec<_> = (next.all_states())
            .filter_map(|(rule, state)| {
                let run = state.run.as_ref()?;
                let due = matches!(run.phase, Phase::Due { .. });
                due.then(|| (run.fire_at, Arc::clone(&run.id), rule, next.step_lane(rule)))
            })
            .collect();
        for (fire_at, id, rule, lane) in waiting {
            next.records.wait_due(fire_at, id, rule as u32, lane);
        }
        // Traces follow their rules; a removed rule's go. Their reads are
        // listed now, by the bundle their `when`s belong to.
        self.traces.settle(&self.payload);
        std::mem::swap(&mut next.traces, &mut self.traces);
        next.traces.remap(|old| {
            let target = targets.get(old as usize).copied().flatten()?;
            u32::try_from(target).ok()
        });
        next.counters = self.counters;
        let limits = (&*self.payload.envelope.limits, &*payload.envelope.limits);
        self.envelope
            .carry_into(&mut next.envelope, targets, limits);
        next.effects = std::mem::take(&mut self.effects);
        self.records.carry_into(&mut next.records);
    }

    /// The new settings take effect: a run between passes that the new
    /// `repeat` count does not allow another pass ends `done`, and a
    /// `queue` rule whose run the reload ended starts its oldest held
    /// trigger.
    fn after_reload(&mut self, now: Now) {
        let payload = Arc::clone(&self.payload);
        for (rule, spec) in payload.rules.iter().enumerate() {
            match self.rules.run(rule) {
                Some(run) => {
                    let gap = matches!(run.phase, Phase::Gap { .. });
                    if gap && run.pass.saturating_add(1) >= spec.repeat().count {
                        self.end_run(rule, EndReason::Done, now);
                    }
                }
                None => {
                    if let Some(event) = self.rules[rule].pop_backlog() {
                        self.start_run(rule, event, now);
                    }
                }
            }
        }
    }
}

impl ReloadSummary {
    /// No rule added, removed or changed.
    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// The last values of pairs both bundles watch (`state()` pairs and input
/// fields), by (hash, field): an input field keeps its last value, so an
/// unchanged value after a reload does not fire.
fn carry_state(
    old_pairs: &[StatePair],
    old_values: &[String],
    old_present: &[bool],
    next: &mut Engine,
) {
    let old: HashMap<&StatePair, (&String, bool)> = old_pairs
        .iter()
        .zip(old_values.iter().zip(old_present.iter().copied()))
        .collect();
    let watched = next.inputs.watched().to_vec();
    for (index, pair) in watched.iter().enumerate() {
        if let (Some((value, present)), Some(slot)) = (old.get(pair), next.state.get_mut(index)) {
            slot.clone_from(value);
            next.bus.present[index] = *present;
        }
    }
}

/// How the new bundle's rules relate to the old ones.
struct Diff {
    /// Added, removed and changed rules, by name.
    summary: ReloadSummary,
    /// Per old rule, its position in the new bundle (`None`: gone).
    targets: Vec<Option<usize>>,
    /// Both list the same names in the same order (the order events are
    /// handled in).
    in_order: bool,
}

/// Matches rules by name: position by position while both bundles list the
/// same names (a deploy that changes rules but adds, removes and moves
/// none), else through a map of the new names.
fn diff(old: &Payload, new: &Payload) -> Diff {
    let in_order = old.rules.len() == new.rules.len()
        && old
            .rules
            .iter()
            .zip(&new.rules)
            .all(|(a, b)| a.name == b.name);
    let targets: Vec<Option<usize>> = if in_order {
        (0..old.rules.len()).map(Some).collect()
    } else {
        let by_name: HashMap<&str, usize> = new
            .rules
            .iter()
            .enumerate()
            .map(|(index, rule)| (&*rule.name, index))
            .collect();
        old.rules
            .iter()
            .map(|rule| by_name.get(&*rule.name).copied())
            .collect()
    };
    let mut summary = ReloadSummary::default();
    let compare = Comparison::new(old, new);
    let mut found = vec![false; new.rules.len()];
    for (rule, target) in old.rules.iter().zip(&targets) {
        let Some(target) = *target else {
            summary.removed.push(rule.name.to_string());
            continue;
        };
        found[target] = true;
        // `rulec diff`'s definition (its constants and `state()` pairs
        // resolved), so the reply says what the tool says.
        if compare.changed(rule, &new.rules[target]) {
            summary.changed.push(rule.name.to_string());
        }
    }
    summary.added = new
        .rules
        .iter()
        .zip(&found)
        .filter(|(_, found)| !**found)
        .map(|(rule, _)| rule.name.to_string())
        .collect();
    Diff {
        summary,
        targets,
        in_order,
    }
}
