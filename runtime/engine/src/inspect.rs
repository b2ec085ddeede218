//! What the control protocol reports about the engine
//! (docs/operating.md#what-runs): each rule's state, its live run and what
//! it waits for, and every waiting step, read without changing anything.

use super::{Engine, Phase, RuleStats, Time};
use crate::time::Now;
use crate::timers::TimerKind;
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
    /// the pool, earliest due first (ties by run id).
    pub fn waiting_steps(&self, now: Now) -> Vec<WaitingStep> {
        let mut waiting: Vec<WaitingStep> = self
            .rule_views(now)
            .into_iter()
            .filter_map(|view| {
                let run = view.run?;
                let (due_ms, durable) = match run.phase {
                    RunPhase::Waiting { due_ms, durable } => (due_ms, durable),
                    RunPhase::WaitingForRoom { due_ms } => (due_ms, true),
                    RunPhase::Gap { .. } | RunPhase::Acting | RunPhase::Draining => return None,
                };
                Some(WaitingStep {
                    run: run.run,
                    rule: view.name,
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

    /// Every running hold, earliest due first (ties by rule name).
    pub fn running_holds(&self, now: Now) -> Vec<RunningHold> {
        let mut holds: Vec<RunningHold> = self
            .rule_views(now)
            .into_iter()
            .filter_map(|view| match view.hold? {
                HoldView::Running { due_ms, left_ms } => Some(RunningHold {
                    rule: view.name,
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
        let left = |token: u64| {
            deadlines
                .get(&token)
                .map_or(0, |deadline| deadline.since(now.time))
        };
        let due = |token: u64| {
            now.wall_ms
                .saturating_add(i64::try_from(left(token) / 1_000_000).unwrap_or(i64::MAX))
        };
        let hold = state.hold().map(|hold| match hold.token() {
            Some(token) => HoldView::Running {
                due_ms: due(token),
                left_ms: left(token).div_ceil(1_000_000),
            },
            None => HoldView::Fired,
        });
        let run = state.run.as_ref().map(|run| RunView {
            run: Arc::clone(&run.id),
            step: run.step,
            pass: run.pass,
            finally: run.finally,
            phase: match run.phase {
                Phase::Waiting { token } => RunPhase::Waiting {
                    due_ms: due(token),
                    // A finally step never is (docs/semantics.md#finally).
                    durable: !run.finally && run.step_of(spec).is_some_and(|step| step.durable),
                },
                Phase::Gap { token } => RunPhase::Gap { due_ms: due(token) },
                Phase::Due { .. } => RunPhase::WaitingForRoom {
                    due_ms: run.fire_at,
                },
                Phase::Acting { .. } | Phase::Deciding => RunPhase::Acting,
                Phase::Draining { .. } => RunPhase::Draining,
            },
        });
        Some(RuleView {
            name: self.name_of(rule),
            source: spec.source.to_string(),
            enabled: state.enabled,
            bundle_enabled: spec.enabled,
            run,
            backlog: state.backlog_len(),
            debounce_held: state.debounce().is_some(),
            hold,
            stats: self.rule_stats(rule).unwrap_or_default(),
        })
    }
}
