//! Each rule's `when`, translated once at load into the VM's plan
//! ([`rulecore::vm::Plan`], docs/engine.md#the-when-plan) and kept: the
//! condition every matching event is judged by. Every other program (a
//! step's `when`, a computed value, a guard) is planned at its one use by
//! `rulecore::vm::eval_bool` / `eval`, which keeps nothing.

use rulecore::bundle::Payload;
use rulecore::vm::Plan;
use std::mem::size_of;

/// The plans, by rule index; empty when no rule has a `when`.
#[derive(Debug, Default)]
pub(crate) struct WhenPlans {
    plans: Box<[Option<Plan>]>,
}

impl WhenPlans {
    pub(crate) fn new(payload: &Payload) -> Self {
        if payload.rules.iter().all(|rule| rule.when.is_none()) {
            return Self::default();
        }
        let plans = payload
            .rules
            .iter()
            .map(|rule| {
                let when = rule.when.as_deref()?;
                Plan::new(when, &payload.consts)
            })
            .collect();
        Self { plans }
    }

    /// The plan of `rule`'s own `when`; `None` when it has none, or its
    /// program is not well formed (its evaluation then fails).
    #[inline]
    pub(crate) fn get(&self, rule: usize) -> Option<&Plan> {
        self.plans.get(rule)?.as_ref()
    }

    /// The heap the plans of `payload`'s rules take
    /// (docs/bundle.md#building's estimate): the table [`WhenPlans::new`]
    /// builds, measured, so the estimate and the engine cannot disagree.
    pub(crate) fn heap(payload: &Payload) -> usize {
        let plans = Self::new(payload).plans;
        plans.len() * size_of::<Option<Plan>>()
            + plans.iter().flatten().map(Plan::heap_bytes).sum::<usize>()
    }
}
