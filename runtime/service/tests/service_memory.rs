//! The heap the service keeps per rule beside the payload and the engine,
//! pinned (docs/engine.md#what-the-service-keeps-per-rule): the
//! subscription set and the rule statistics last written. A change that
//! copies every rule's topic or statistics again fails here.
//!
//! The counting allocator counts the bytes asked for, so the figures do
//! not depend on the allocator or the machine. The only test in this
//! binary, so the counting allocator sees nothing else.
#![allow(unsafe_code)] // a counting GlobalAlloc wrapper around System
#![allow(clippy::unwrap_used, clippy::print_stdout)]

#[path = "../../engine/tests/counting/mod.rs"]
mod counting;

use counting::LIVE;
use rulecore::bundle::{Action, Payload, Rule, Step};
use rulecore::topic::TopicPattern;
use ruled::stats::RuleStatsTable;
use ruled::subscriptions::Subscriptions;
use ruled_engine::{Engine, EngineConfig};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const RULES: usize = 10_000;
/// Bytes the subscription set keeps per rule of one exact topic, at most
/// (measured: 8, a place in the payload; as channel strings in a set it
/// took about 80).
const SUBSCRIPTIONS_PER_RULE: isize = 10;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// `count` rules, each on its own exact topic.
fn payload(count: usize) -> Payload {
    let rules = (0..count)
        .map(|i| {
            Rule::new(
                format!("rule-{i}"),
                "rules/many.toml",
                vec![TopicPattern::parse(&format!("vehicle.thing{i}.changed")).unwrap()],
                vec![Step::new(Action::redis("scooter:blinker", "off"), 0)],
            )
        })
        .collect();
    Payload::new("test", rules, vec![], vec![])
}

#[test]
fn the_service_keeps_no_copy_of_a_rule() {
    let payload = Arc::new(payload(RULES));
    let engine = Engine::new(Arc::clone(&payload), EngineConfig::default());

    let before = live();
    let subs = Subscriptions::compute(&payload, |rule| engine.is_enabled(rule), BTreeSet::new());
    let subscriptions = live() - before;
    assert_eq!(subs.channel_count(), RULES);

    let before = live();
    let stats = RuleStatsTable::of(&engine);
    let statistics = live() - before;

    println!(
        "per rule: subscriptions {} B, statistics {} B",
        subscriptions / RULES as isize,
        statistics / RULES as isize
    );
    assert!(
        subscriptions <= SUBSCRIPTIONS_PER_RULE * RULES as isize,
        "the subscription set keeps {subscriptions} B for {RULES} rules"
    );
    // No rule has run: nothing to remember.
    assert_eq!(statistics, 0, "statistics of rules that never ran");
    drop((subs, stats));
}
