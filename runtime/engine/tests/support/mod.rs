//! Rules and payloads the engine's test binaries build alike.

use rulecore::bundle::{Action, Payload, Rule, StatePair, Step};
use rulecore::bytecode::Const;
use rulecore::topic::TopicPattern;
use std::sync::Arc;

pub fn pats(list: &[&str]) -> Vec<TopicPattern> {
    list.iter()
        .map(|p| TopicPattern::parse(p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .collect()
}

/// A step pushing `value` onto `scooter:blinker` after `after_ms`.
pub fn push(value: &str, after_ms: u64) -> Step {
    Step::new(
        Action::redis("scooter:blinker", value),
        after_ms * 1_000_000,
    )
}

/// A rule named `name` on topic `go`.
pub fn go(name: &str, steps: Vec<Step>) -> Rule {
    Rule::new(name, "go.toml", pats(&["go"]), steps)
}

/// One state pair (`vehicle`, `state`) and one constant, `"parked"`. Step
/// fingerprints are computed (after any `when` or `durable` edit).
pub fn payload(rules: Vec<Rule>) -> Arc<Payload> {
    Arc::new(Payload::new(
        "test",
        rules,
        vec![StatePair {
            hash: "vehicle".into(),
            field: "state".into(),
        }],
        vec![Const::Str("parked".into())],
    ))
}
