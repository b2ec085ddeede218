//! The decoded payload's heap per one-step rule, pinned
//! (docs/engine.md#the-decoded-payload-and-replay): a change that makes it
//! grow past its bound fails here. Counted with a per-thread allocator,
//! which counts the bytes asked for, so the figure depends neither on the
//! allocator nor on the machine.

#![allow(unsafe_code)] // a GlobalAlloc impl is unsafe by definition; it only forwards to System
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use rulecore::bundle::{Action, Payload, Rule, Step};
use rulecore::codec::{decode, encode};
use rulecore::topic::TopicPattern;
use std::cell::Cell;

mod counting;
use counting::{LIVE, PEAK};

/// Bytes of decoded payload per one-step rule, at most (measured: 146).
const PER_RULE_BOUND: usize = 160;
/// What decoding holds at its peak beyond what it keeps, per rule, at most
/// (measured: 9, most of it verification sorting the rule names).
const TRANSIENT_PER_RULE_BOUND: usize = 16;

const RULES: usize = 10_000;

/// `count` rules as `rulec build` makes them from a typical file: one
/// exact topic, one redis step 30 s after the trigger (bench-box's rules).
fn payload(count: usize) -> Payload {
    let rules = (0..count)
        .map(|i| {
            let topic = TopicPattern::parse(&format!("vehicle.thing{i}.changed")).unwrap();
            let off = Step::new(Action::redis("scooter:blinker", "off"), 30_000_000_000);
            Rule::new(
                format!("rule-{i}"),
                "rules/blinkers.toml",
                vec![topic],
                vec![off],
            )
        })
        .collect();
    Payload::new("test", rules, vec![], vec![])
}

#[test]
fn decoded_payload_per_rule_stays_under_its_bound() {
    let bytes = encode(&payload(RULES)).unwrap();
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let bundle = decode(&bytes).unwrap();
    let peak = PEAK.with(Cell::get) - before;
    // The id is the bundle's, not the payload's.
    let kept = LIVE.with(Cell::get) - before - bundle.id.capacity();
    let per_rule = kept / RULES;
    let transient = (peak - kept) / RULES;
    println!("decoded payload: {per_rule} bytes per rule, {transient} more at the peak");
    assert!(
        per_rule <= PER_RULE_BOUND,
        "the decoded payload keeps {per_rule} bytes per one-step rule, over the bound of \
         {PER_RULE_BOUND} (docs/engine.md#the-decoded-payload-and-replay)"
    );
    assert!(
        transient <= TRANSIENT_PER_RULE_BOUND,
        "decoding holds {transient} bytes per rule beyond what it keeps, over the bound of \
         {TRANSIENT_PER_RULE_BOUND}"
    );
}
