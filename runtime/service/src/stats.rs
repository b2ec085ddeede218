//! The counters publisher (docs/semantics.md#counters): the engine's counters and rule
//! statistics, written in full at start and after a reconnect, then only
//! what changed at each stats tick.

use crate::record_store::{StoreOp, StoreWriter};
use ruled_engine::{Counters, Engine, RuleStats};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What was last written to the counters and rule statistics hashes, so a
/// stats tick writes only what changed (nothing at all when idle).
#[derive(Debug)]
pub struct StatsPublisher {
    counters: Counters,
    rules: Vec<RuleStats>,
    bundle_id: String,
    /// A write was refused (store queue full): what Redis holds is unknown,
    /// so the next tick writes everything again.
    stale: bool,
    /// Events the intake dropped at its bound (`overflow`), and the value
    /// last written.
    overflow: Arc<AtomicU64>,
    overflow_written: u64,
}

impl StatsPublisher {
    pub fn new(engine: &Engine, bundle_id: String) -> Self {
        let rules = (0..engine.payload().rules.len())
            .map(|index| engine.rule_stats(index).unwrap_or_default())
            .collect();
        Self {
            counters: engine.counters(),
            rules,
            bundle_id,
            stale: false,
            overflow: Arc::default(),
            overflow_written: 0,
        }
    }

    /// The bundle id the counters name from the next write on (a reload).
    pub fn set_bundle(&mut self, id: String) {
        self.bundle_id = id;
    }

    /// The `overflow` counter, for the intake to count in.
    pub fn overflow(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.overflow)
    }

    /// Writes the counters and every rule's statistics in full.
    pub fn write_all(&mut self, engine: &Engine, writer: &StoreWriter) {
        let overflow = Arc::clone(&self.overflow);
        *self = Self::new(engine, std::mem::take(&mut self.bundle_id));
        self.overflow = overflow;
        self.overflow_written = self.overflow.load(Ordering::Relaxed);
        let mut fields = full_counters(&self.counters, &self.bundle_id);
        fields.push(("overflow", self.overflow_written.to_string()));
        let counters = writer.send(StoreOp::Counters(fields));
        let rules = engine
            .payload()
            .rules
            .iter()
            .zip(&self.rules)
            .map(|(rule, stats)| (rule.name.clone(), rule_stats_json(stats)))
            .collect();
        let rules = writer.send(StoreOp::AllRuleStats(rules));
        self.stale = !(counters && rules);
    }

    pub fn write_changes(&mut self, engine: &Engine, writer: &StoreWriter) {
        if self.stale {
            self.write_all(engine, writer);
            return;
        }
        let counters = engine.counters();
        let mut changed = changed_counters(&self.counters, &counters);
        let overflow = self.overflow.load(Ordering::Relaxed);
        if overflow != self.overflow_written {
            changed.push(("overflow", overflow.to_string()));
            self.overflow_written = overflow;
        }
        if !changed.is_empty() {
            self.stale |= !writer.send(StoreOp::Counters(changed));
            self.counters = counters;
        }
        let mut rules = Vec::new();
        for (index, (rule, old)) in engine
            .payload()
            .rules
            .iter()
            .zip(self.rules.iter_mut())
            .enumerate()
        {
            let current = engine.rule_stats(index).unwrap_or_default();
            if current != *old {
                rules.push((rule.name.clone(), rule_stats_json(&current)));
                *old = current;
            }
        }
        if !rules.is_empty() {
            self.stale |= !writer.send(StoreOp::RuleStats(rules));
        }
    }
}

fn rule_stats_json(stats: &RuleStats) -> String {
    serde_json::json!({
        "runs": stats.runs_started,
        "last-fire": stats.last_fire_ms,
        "errors": stats.errors,
        "active": stats.active_runs,
    })
    .to_string()
}

/// The counters hash in full (docs/semantics.md#counters).
fn full_counters(counters: &Counters, bundle_id: &str) -> Vec<(&'static str, String)> {
    let mut fields = counter_fields(counters);
    fields.push(("version", env!("CARGO_PKG_VERSION").to_string()));
    fields.push(("bundle", bundle_id.to_string()));
    fields
}

fn counter_fields(c: &Counters) -> Vec<(&'static str, String)> {
    vec![
        ("rules", c.rules.to_string()),
        ("dispatched", c.dispatched.to_string()),
        ("dropped", c.dropped.to_string()),
        ("refused", c.refused.to_string()),
        ("failed", c.failed.to_string()),
        ("pending", c.pending.to_string()),
        ("runs-active", c.runs_active.to_string()),
    ]
}

/// Only the fields that differ from what was last written.
fn changed_counters(old: &Counters, new: &Counters) -> Vec<(&'static str, String)> {
    counter_fields(new)
        .into_iter()
        .zip(counter_fields(old))
        .filter(|(new, old)| new.1 != old.1)
        .map(|(new, _)| new)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changed_counters_are_written() {
        let old = Counters {
            rules: 2,
            dispatched: 5,
            ..Counters::default()
        };
        let new = Counters {
            rules: 2,
            dispatched: 7,
            pending: 1,
            ..Counters::default()
        };
        assert_eq!(
            changed_counters(&old, &new),
            vec![
                ("dispatched", "7".to_string()),
                ("pending", "1".to_string())
            ]
        );
        assert!(changed_counters(&new, &new).is_empty());
        let full = full_counters(&new, "abc");
        assert_eq!(full.len(), 9);
        assert_eq!(full[8], ("bundle", "abc".to_string()));
    }
}
