//! The safety envelope as the control protocol shows it (docs/safety.md):
//! `v1.guards`' every guard and limit, and `v1.show`'s steps of one rule a
//! guard or limit covers.

use super::protocol::{CoveredStep, GuardLine, GuardsReply, LimitLine};
use rulecore::bundle::{Action, Payload, Rule, Step};
use rulecore::envelope::{Cover, DeclaredIn};

/// Every guard and limit of `payload`, in the bundle's order.
pub fn guards_reply(payload: &Payload) -> GuardsReply {
    let envelope = &payload.envelope;
    let guards = envelope
        .guards
        .iter()
        .map(|guard| GuardLine {
            name: guard.name.clone(),
            file: guard.declared_in.file().to_string(),
            from_profile: matches!(guard.declared_in, DeclaredIn::Profile(_)),
            covers: guard.cover.describe(),
            when: guard.when_text.clone(),
            reads: guard
                .reads
                .iter()
                .filter_map(|&pair| payload.state_pairs.get(pair as usize))
                .map(|pair| format!("{} {}", pair.hash, pair.field))
                .collect(),
            say: guard.say.clone(),
        })
        .collect();
    let limits = envelope
        .limits
        .iter()
        .map(|limit| LimitLine {
            name: limit.name.clone(),
            file: limit.declared_in.file().to_string(),
            from_profile: matches!(limit.declared_in, DeclaredIn::Profile(_)),
            covers: limit.cover.describe(),
            max: limit.max,
            per_ms: limit.per_ns / 1_000_000,
        })
        .collect();
    GuardsReply { guards, limits }
}

/// The steps of `rule` (then its finally steps) a guard or limit of
/// `payload` covers; empty when none is.
pub fn covered_steps(rule: &Rule, payload: &Payload) -> Vec<CoveredStep> {
    let envelope = &payload.envelope;
    if envelope.is_empty() {
        return Vec::new();
    }
    let of = |steps: &[Step], finally: bool| -> Vec<CoveredStep> {
        steps
            .iter()
            .zip(0u32..)
            .filter_map(|(step, index)| {
                let action = &*step.action;
                let names = |covers: &mut dyn Iterator<Item = (&str, &Cover)>| -> Vec<String> {
                    covers
                        .filter(|(_, cover)| may_cover(cover, action))
                        .map(|(name, _)| name.to_string())
                        .collect()
                };
                let guards = names(&mut envelope.guards.iter().map(|g| (&*g.name, &g.cover)));
                let limits = names(&mut envelope.limits.iter().map(|l| (&*l.name, &l.cover)));
                (!guards.is_empty() || !limits.is_empty()).then_some(CoveredStep {
                    step: index,
                    finally,
                    guards,
                    limits,
                })
            })
            .collect()
    };
    let mut covered = of(&rule.steps, false);
    covered.extend(of(rule.finally(), true));
    covered
}

/// Whether `cover` takes in `action`: its plain value judged now; a
/// computed one by its list or channel alone (its value is known only
/// when the step runs).
pub fn may_cover(cover: &Cover, action: &Action) -> bool {
    let computed = match action {
        Action::Redis { push: text, .. } | Action::Publish { message: text, .. } => {
            text.is_computed()
        }
        _ => false,
    };
    if computed {
        let any_value = Cover {
            target: cover.target.clone(),
            values: Vec::new(),
        };
        return any_value.covers(action, "");
    }
    cover.covers(action, ruled_engine::guard::covered_value(action))
}
