//! Topic index (docs/semantics.md#handling-one-event): rules by exact topic, by prefix, and the
//! `*` list, so an event costs what the rules it can match cost, not a scan
//! of every rule.

use crate::key_table::KeyTable;
use rulecore::topic::TopicPattern;

/// Maps topics to rule indices (positions in the bundle).
#[derive(Debug, Default)]
pub(crate) struct TopicIndex {
    exact: KeyTable,
    /// Keyed by the prefix with its trailing dot (`button.`).
    prefix: KeyTable,
    /// The longest key of `prefix`: no longer part of a topic can match.
    longest_prefix: usize,
    any: Vec<u32>,
}

impl TopicIndex {
    pub fn insert(&mut self, pattern: &TopicPattern, rule: u32) {
        match pattern {
            TopicPattern::Any => {
                if self.any.last() != Some(&rule) {
                    self.any.push(rule);
                }
            }
            TopicPattern::Prefix(prefix) => {
                self.longest_prefix = self.longest_prefix.max(prefix.len());
                self.prefix.insert(prefix, rule);
            }
            TopicPattern::Exact(topic) => self.exact.insert(topic, rule),
        }
    }

    /// Gives back what building reserved beyond what the index holds.
    pub fn shrink(&mut self) {
        self.exact.shrink();
        self.prefix.shrink();
        self.any.shrink_to_fit();
    }

    /// Rule indices whose patterns match `topic`, ascending (bundle order),
    /// without duplicates, written into `out` (cleared first).
    pub fn lookup(&self, topic: &str, out: &mut Vec<u32>) {
        out.clear();
        out.extend_from_slice(&self.any);
        if !self.exact.is_empty() {
            match self.exact.get(topic) {
                // The common case, without a copy call.
                [only] => out.push(*only),
                rules => out.extend_from_slice(rules),
            }
        }
        if !self.prefix.is_empty() {
            // Every prefix of the topic that ends in a dot is a candidate key,
            // up to the longest indexed prefix: the cost is bounded by the
            // bundle, not by the topic (a 64 KiB topic of dots would
            // otherwise hash 64 KiB prefixes 64 Ki times), nor by the rules.
            let dots = topic.match_indices('.');
            for (at, _) in dots.take_while(|(at, _)| *at < self.longest_prefix) {
                out.extend_from_slice(self.prefix.get(&topic[..=at]));
            }
        }
        if out.len() > 1 {
            out.sort_unstable();
            out.dedup();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> TopicPattern {
        TopicPattern::parse(text).unwrap()
    }

    #[test]
    fn finds_exact_prefix_and_any_in_bundle_order() {
        let mut index = TopicIndex::default();
        index.insert(&p("button.*"), 3);
        index.insert(&p("alarm.triggered"), 1);
        index.insert(&p("*"), 5);
        index.insert(&p("button.brake.*"), 0);
        index.insert(&p("button.brake.left"), 0);
        index.insert(&p("a*"), 2);
        let mut out = Vec::new();
        index.lookup("button.brake.left", &mut out);
        assert_eq!(out, [0, 3, 5]);
        index.lookup("alarm.triggered", &mut out);
        assert_eq!(out, [1, 5]);
        index.lookup("button", &mut out);
        assert_eq!(out, [5]);
        index.lookup("ab", &mut out);
        assert_eq!(out, [5]);
        index.lookup("a*", &mut out);
        assert_eq!(out, [2, 5]);
        index.insert(&p("alarm.triggered"), 4);
        index.insert(&p("alarm.triggered"), 4);
        index.insert(&p("alarm.triggered"), 6);
        index.lookup("alarm.triggered", &mut out);
        assert_eq!(out, [1, 4, 5, 6]);
        let dots = ".".repeat(64 * 1024);
        index.lookup(&format!("button.{dots}"), &mut out);
        assert_eq!(out, [3, 5]);
    }
}
