//! Each rule's `when`, translated once at load into the VM's faster form
//! ([`rulecore::vm::Plan`], docs/engine.md#the-when-plan): the condition
//! every matching event is judged by. Steps' conditions, judged once per
//! step, run from the bundle's bytecode (`rulecore::vm::eval_bool`, the
//! same functions without the fusing): a plan saves about 75 instructions
//! an evaluation (docs/engine.md#the-when-plan), which matters per event,
//! not per step.

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
    /// program is one the plan does not take (it then runs as bytecode).
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
