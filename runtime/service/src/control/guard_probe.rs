//! The dry run's guards (docs/operating.md#testing-a-rule-against-an-event):
//! for each step a guard covers, the fields its guards read are read fresh
//! (one script, one round trip, as a worker reads them before a guarded
//! action) by the control server's task, never on the engine's loop, and
//! judged by the engine's one judgement (`ruled_engine::guard::judge`):
//! which guard would refuse the step now, and the state it read.

use super::protocol::{GuardProbe, StepLine};
use super::wire::Reply;
use crate::guard_read::{read_on, union_of, values_of};
use rulecore::bundle::{Action, Payload, Rule};
use ruled_engine::guard::{judge, GuardCheck};
use std::sync::Arc;

/// The covered steps of one dry run, for the server to judge.
#[derive(Debug)]
pub struct Probe {
    payload: Arc<Payload>,
    /// Per covered step: its index in the reply's `steps`, its guards.
    steps: Vec<(usize, GuardCheck)>,
}

impl Probe {
    /// The guards of `rule`'s steps, then its finally steps (as `lines`
    /// lists them): each covered line gets its guards' names; `None` when
    /// no step is covered.
    pub fn of(payload: &Arc<Payload>, rule: &Rule, lines: &mut [StepLine]) -> Option<Box<Probe>> {
        let specs = rule.steps.iter().chain(rule.finally());
        let mut steps = Vec::new();
        for (at, (spec, line)) in specs.zip(lines.iter_mut()).enumerate() {
            let Some(check) = check_of(payload, &spec.action) else {
                continue;
            };
            let guards = check
                .guards
                .iter()
                .filter_map(|&index| payload.envelope.guards.get(index as usize))
                .map(|guard| guard.name.clone())
                .collect();
            line.guard = Some(GuardProbe {
                guards,
                refused_by: None,
                read: Vec::new(),
            });
            steps.push((at, check));
        }
        (!steps.is_empty()).then(|| {
            Box::new(Probe {
                payload: Arc::clone(payload),
                steps,
            })
        })
    }

    /// Reads the fields fresh and writes each covered step's `refused-by`
    /// and `read` into `reply` (an answered `v1.test`).
    pub async fn complete(
        &self,
        con: &mut (impl redis::aio::ConnectionLike + Send),
        reply: &mut Reply,
    ) {
        if !reply.ok {
            return;
        }
        let payload = &self.payload;
        let fields = union_of(self.steps.iter().map(|(_, check)| check), payload);
        let reads = read_on(con, &fields).await;
        for (at, check) in &self.steps {
            let values = values_of(check, payload, &fields, &reads);
            let read: Vec<String> = check
                .fields(payload)
                .zip(&values)
                .map(|((hash, field), value)| value.text(&format!("{hash} {field}")))
                .collect();
            let refused_by = judge(payload, check, &values).err().map(|r| r.guard);
            let Some(line) = reply.payload["steps"].get_mut(*at) else {
                continue;
            };
            let guard = &mut line["guard"];
            if let Some(guard_name) = refused_by {
                guard["refused-by"] = guard_name.into();
            }
            guard["read"] = read.into();
        }
    }
}

/// The guards that may judge `action`: as a worker would for a plain value;
/// for a computed one, every guard of its list or channel (the value is
/// known only when the step runs). `None` when none does.
fn check_of(payload: &Payload, action: &Action) -> Option<GuardCheck> {
    GuardCheck::covering(payload, |cover| super::envelope::may_cover(cover, action))
}
