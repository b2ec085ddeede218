//! A bundle larger than one write or one subscribe command
//! (docs/service.md#per-rule-statistics-hash-extensionsrules,
//! docs/service.md#subscriptions): `NS:rules` is written and the topics
//! subscribed in parts of 1,024, and the result is the same as in one.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use support::bundles::{self, payload};
use support::{list, wait_for, Ruled, Setup};

const RULES: usize = 2_500;

fn many_rules() -> rulecore::bundle::Payload {
    let rules = (0..RULES)
        .map(|i| {
            bundles::rule(
                &format!("rule-{i}"),
                &[&format!("thing{i}.changed")],
                vec![bundles::redis_step("fired", &format!("rule-{i}"), 0)],
            )
        })
        .collect();
    payload(rules, vec![], vec![])
}

#[test]
fn every_rule_is_written_and_subscribed_past_one_command() {
    let Setup {
        redis,
        dir: _dir,
        bundle,
    } = Setup::new(&many_rules());
    let _: i64 = redis.query(&["HSET", "extensions:rules", "gone-rule", "{}"]);
    let _ruled = Ruled::ready(&redis, &bundle, &[]);
    wait_for("every rule's statistics and no other", || {
        let count: usize = redis.query(&["HLEN", "extensions:rules"]);
        let gone: bool = redis.query(&["HEXISTS", "extensions:rules", "gone-rule"]);
        count == RULES && !gone
    });
    for i in [0, 1_023, 1_024, 2_047, 2_048, RULES - 1] {
        let json: String = redis.query(&["HGET", "extensions:rules", &format!("rule-{i}")]);
        let stats: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(stats["runs"], 0, "rule-{i}: {json}");
    }
    let channels: Vec<String> = redis.query(&["PUBSUB", "CHANNELS", "ev:thing*"]);
    assert_eq!(channels.len(), RULES);
    // The subscription reads events after its three commands' confirmations.
    for i in [0, 1_024, RULES - 1] {
        let _: i64 = redis.query(&["PUBLISH", &format!("ev:thing{i}.changed"), "{}"]);
    }
    wait_for("the three rules fired", || list(&redis, "fired").len() == 3);
    assert_eq!(list(&redis, "fired"), ["rule-0", "rule-1024", "rule-2499"]);
}
