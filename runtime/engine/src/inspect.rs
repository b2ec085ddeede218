//! What the control protocol reports about the engine
//! (docs/operating.md#what-runs): each rule's state, its live run and what
//! it waits for, and every waiting step, read without changing anything.

use super::{Engine, Phase, RuleStats, Time};
use crate::rule_state::RuleState;
use crate::time::Now;
use crate::timers::TimerKind;
use rulecore::bundle::Rule;
use std::collections::HashMap;
use std::sync::Arc;

/// One rule as `v1.list` and `v1.show` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleView {
    pub name: Arc<str>,
    pub source: String,
    /// On now (the bundle's `enabled`, or an override's).
    pub enabled: bool,
    /// What the bundle says, before any override.
    pub bundle_enabled: bool,
    pub run: Option<RunView>,
    /// Triggers held in a `queue` backlog.
    pub backlog: usize,
    /// Whether a debounce window holds an event.
    pub debounce_held: bool,
    /// Its `for` (docs/semantics.md#hold): running, or fired and waiting
    /// for `when` to be false once; `None` while armed and idle.
    pub hold: Option<HoldView>,
    pub stats: RuleStats,
    /// A keyed rule (docs/rules.md#keyed-runs): the keys with a live run,
    /// the first [`KEYS_SHOWN`] (the key an event, timer or job last
    /// chose first, whose run is `run` above; then the others in the order
    /// they were set aside), each with its run. Empty for a rule without
    /// `per`.
    pub keys: Vec<KeyRun>,
    /// How many keys have a live run (`keys` shows at most [`KEYS_SHOWN`]).
    pub keys_with_runs: usize,
    /// How many of those runs wait for a step (its `after`, or room in
    /// the pool).
    pub keys_waiting: usize,
}

/// The keys with runs a [`RuleView`] lists at most.
pub const KEYS_SHOWN: usize = 8;

/// One key of a keyed rule and its live run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRun {
    pub key: Arc<str>,
    pub run: RunView,
}

/// A rule's hold, as `v1.show`, `v1.list` and `v1.pending` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldView {
    /// `when` has stayed true since the hold started; the rule fires at
    /// `due_ms` (Unix ms), `left_ms` from now, unless it turns false first.
    Running { due_ms: i64, left_ms: u64 },
    /// The hold completed; a new one starts only after `when` was false
    /// once.
    Fired,
}

/// A running hold, as `v1.pending` lists it beside the waiting steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningHold {
    pub rule: Arc<str>,
    /// Unix ms.
    pub due_ms: i64,
    pub left_ms: u64,
}

/// A live run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunView {
    pub run: Arc<str>,
    pub step: u32,
    pub pass: u32,
    /// In its finally steps (docs/semantics.md#finally): `step` counts them.
    pub finally: bool,
    pub phase: RunPhase,
}

/// What a live run is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunPhase {
    /// Waiting for `step`'s `after`, due at `due_ms` (Unix ms).
    Waiting { due_ms: i64, durable: bool },
    /// Waiting between repeat passes, due at `due_ms`.
    Gap { due_ms: i64 },
    /// Durable `step` came due at `due_ms` (Unix ms) while the pool was
    /// full: it waits in the due backlog for room, its record kept
    /// (docs/semantics.md#due-steps-the-pool-refused).
    WaitingForRoom { due_ms: i64 },
    /// `step`'s action is queued in the pool or running.
    Acting,
    /// Cancelled while its step's action was queued or running: its
    /// finally steps start when that action finishes
    /// (docs/semantics.md#finally).
    Draining,
}

impl RunPhase {
    /// Waiting for a step: its `after`, or room in the pool.
    pub fn waits_for_step(self) -> bool {
        matches!(self, Self::Waiting { .. } | Self::WaitingForRoom { .. })
    }
}

/// One waiting step, as `v1.pending` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingStep {
    pub run: Arc<str>,
    pub rule: Arc<str>,
    pub step: u32,
    pub pass: u32,
    /// `step` counts the rule's finally steps (docs/semantics.md#finally).
    pub finally: bool,
    /// Unix ms.
    pub due_ms: i64,
    pub durable: bool,
}

impl Engine {
    /// Every rule, in bundle order.
    pub fn rule_views(&self, now: Now) -> Vec<RuleView> {
        let deadlines = self.run_deadlines();
        (0..self.rules.len())
            .filter_map(|rule| self.view(rule, now, &deadlines))
            .collect()
    }

    /// One rule by name.
    pub fn rule_view(&self, name: &str, now: Now) -> Option<RuleView> {
        let rule = self.rule_index(name)?;
        self.view(rule, now, &self.run_deadlines())
    }

    /// Every step waiting for its `after`, or due and waiting for room in
    /// the pool, earliest due first (ties by run id); every key's of a
    /// keyed rule.
    pub fn waiting_steps(&self, now: Now) -> Vec<WaitingStep> {
        let deadlines = self.run_deadlines();
        let mut waiting: Vec<WaitingStep> = self
            .all_states()
            .filter_map(|(rule, state)| {
                let spec = self.payload.rules.get(rule)?;
                let run = run_view(state, spec, now, &deadlines)?;
                let (due_ms, durable) = match run.phase {
                    RunPhase::Waiting { due_ms, durable } => (due_ms, durable),
                    RunPhase::WaitingForRoom { due_ms } => (due_ms, true),
                    RunPhase::Gap { .. } | RunPhase::Acting | RunPhase::Draining => return None,
                };
                Some(WaitingStep {
                    run: run.run,
                    rule: self.name_of(rule),
                    step: run.step,
                    pass: run.pass,
                    finally: run.finally,
                    due_ms,
                    durable,
                })
            })
            .collect();
        waiting.sort_by(|a, b| a.due_ms.cmp(&b.due_ms).then_with(|| a.run.cmp(&b.run)));
        waiting
    }

    /// Every running hold, earliest due first (ties by rule name); every
    /// key's of a keyed rule.
    pub fn running_holds(&self, now: Now) -> Vec<RunningHold> {
        let deadlines = self.run_deadlines();
        let mut holds: Vec<RunningHold> = self
            .all_states()
            .filter_map(|(rule, state)| match hold_view(state, now, &deadlines)? {
                HoldView::Running { due_ms, left_ms } => Some(RunningHold {
                    rule: self.name_of(rule),
                    due_ms,
                    left_ms,
                }),
                HoldView::Fired => None,
            })
            .collect();
        holds.sort_by(|a, b| a.due_ms.cmp(&b.due_ms).then_with(|| a.rule.cmp(&b.rule)));
        holds
    }

    /// The deadline of every live run and hold timer, by token: one pass
    /// over the deadline queue, however many runs wait.
    fn run_deadlines(&self) -> HashMap<u64, Time> {
        self.timers
            .entries()
            .filter(|entry| matches!(entry.kind, TimerKind::Run | TimerKind::Hold))
            .map(|entry| (entry.token, entry.deadline))
            .collect()
    }

    fn view(&self, rule: usize, now: Now, deadlines: &HashMap<u64, Time>) -> Option<RuleView> {
        let state = self.rules.get(rule)?;
        let spec = self.payload.rules.get(rule)?;
        let (keys, keys_with_runs, keys_waiting) = self.key_runs(rule, now, deadlines);
        Some(RuleView {
            name: self.name_of(rule),
            source: spec.source.to_string(),
            enabled: state.enabled,
            bundle_enabled: spec.enabled,
            run: run_view(state, spec, now, deadlines),
            backlog: state.backlog_len(),
            debounce_held: state.debounce().is_some(),
            hold: hold_view(state, now, deadlines),
            stats: self.rule_stats(rule).unwrap_or_default(),
            keys,
            keys_with_runs,
            keys_waiting,
        })
    }

    /// A keyed rule's keys with a live run (the first [`KEYS_SHOWN`]), how
    /// many there are, and how many of them wait for a step.
    fn key_runs(
        &self,
        rule: usize,
        now: Now,
        deadlines: &HashMap<u64, Time>,
    ) -> (Vec<KeyRun>, usize, usize) {
        let Some(spec) = self.payload.rules.get(rule) else {
            return (Vec::new(), 0, 0);
        };
        let mut shown = Vec::new();
        let (mut count, mut waiting) = (0, 0);
        for (key, state) in self.keys.states(rule, &self.rules[rule]) {
            let Some(run) = run_view(state, spec, now, deadlines) else {
                continue;
            };
            count += 1;
            waiting += usize::from(run.phase.waits_for_step());
            if shown.len() < KEYS_SHOWN {
                shown.push(KeyRun {
                    key: Arc::clone(key),
                    run,
                });
            }
        }
        (shown, count, waiting)
    }
}

/// Nanoseconds left until timer `token` (0 when it has none).
fn left(deadlines: &HashMap<u64, Time>, now: Now, token: u64) -> u64 {
    deadlines
        .get(&token)
        .map_or(0, |deadline| deadline.since(now.time))
}

/// Timer `token`'s deadline on the wall clock, Unix ms.
fn due(deadlines: &HashMap<u64, Time>, now: Now, token: u64) -> i64 {
    let left_ms = i64::try_from(left(deadlines, now, token) / 1_000_000).unwrap_or(i64::MAX);
    now.wall_ms.saturating_add(left_ms)
}

/// A rule state's hold, as the views show it.
fn hold_view(state: &RuleState, now: Now, deadlines: &HashMap<u64, Time>) -> Option<HoldView> {
    state.hold().map(|hold| match hold.token() {
        Some(token) => HoldView::Running {
            due_ms: due(deadlines, now, token),
            left_ms: left(deadlines, now, token).div_ceil(1_000_000),
        },
        None => HoldView::Fired,
    })
}

/// A rule state's live run, as the views show it.
fn run_view(
    state: &RuleState,
    spec: &Rule,
    now: Now,
    deadlines: &HashMap<u64, Time>,
) -> Option<RunView> {
    state.run.as_ref().map(|run| RunView {
        run: Arc::clone(&run.id),
        step: run.step,
        pass: run.pass,
        finally: run.finally,
        phase: match run.phase {
            Phase::Waiting { token } => RunPhase::Waiting {
                due_ms: due(deadlines, now, token),
                // A finally step never is (docs/semantics.md#finally).
                durable: !run.finally && run.step_of(spec).is_some_and(|step| step.durable),
            },
            Phase::Gap { token } => RunPhase::Gap {
                due_ms: due(deadlines, now, token),
            },
            Phase::Due { .. } => RunPhase::WaitingForRoom {
                due_ms: run.fire_at,
            },
            Phase::Acting { .. } | Phase::Deciding => RunPhase::Acting,
            Phase::Draining { .. } => RunPhase::Draining,
        },
    })
}
