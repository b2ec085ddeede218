//! The counters publisher (docs/semantics.md#counters): the engine's counters and rule
//! statistics, written in full at start and after a reconnect, then only
//! what changed at each stats tick; who writes them (docs/service.md#key-namespace)
//! in full too, and `state = stopped` at the end.

use crate::owner::{Owner, STOPPED};
use crate::record_store::{AllRules, StoreOp, StoreWriter};
use ruled_engine::{Counters, Engine, RuleStats};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A counter the service counts outside the engine (the intake, the
/// driver), and the value last written.
#[derive(Debug, Default)]
struct BusCounter {
    count: Arc<AtomicU64>,
    written: u64,
}

impl BusCounter {
    /// The current value, if it differs from what was last written (then
    /// taken as written).
    fn changed(&mut self) -> Option<String> {
        let now = self.count.load(Ordering::Relaxed);
        (now != self.written).then(|| {
            self.written = now;
            now.to_string()
        })
    }

    fn all(&mut self) -> String {
        self.written = self.count.load(Ordering::Relaxed);
        self.written.to_string()
    }
}

/// What was last written to the counters and rule statistics hashes, so a
/// stats tick writes only what changed (nothing at all when idle).
#[derive(Debug)]
pub struct StatsPublisher {
    counters: Counters,
    /// Shared with a queued full write ([`AllRules`]), which formats its
    /// fields a chunk at a time from these.
    rules: Arc<Vec<RuleStats>>,
    bundle_id: String,
    /// `state`, `pid`, `host`, `started-at`: written with every full write.
    owner: Owner,
    /// A write was refused (store queue full): what Redis holds is unknown,
    /// so the next tick writes everything again.
    stale: bool,
    /// Events the intake dropped at its bound (`overflow`).
    overflow: BusCounter,
    /// Bus messages refused as events (`rejected`): a topic that differs
    /// from the channel's, over 64 KiB, not decodable.
    rejected: BusCounter,
}

impl StatsPublisher {
    pub fn new(engine: &Engine, bundle_id: String, owner: &Owner) -> Self {
        Self {
            counters: engine.counters(),
            rules: Arc::new(all_rule_stats(engine)),
            bundle_id,
            owner: owner.clone(),
            stale: false,
            overflow: BusCounter::default(),
            rejected: BusCounter::default(),
        }
    }

    /// This process, as the counters hash names it.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The loaded bundle's id.
    pub fn bundle_id(&self) -> &str {
        &self.bundle_id
    }

    /// Events the intake dropped at its bound so far.
    pub fn overflow_count(&self) -> u64 {
        self.overflow.count.load(Ordering::Relaxed)
    }

    /// The bundle id the counters name from the next write on (a reload).
    pub fn set_bundle(&mut self, id: String) {
        self.bundle_id = id;
    }

    /// The `overflow` counter, for the intake to count in.
    pub fn overflow(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.overflow.count)
    }

    /// The `rejected` counter, for the intake and the driver to count in.
    pub fn rejected(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.rejected.count)
    }

    /// Counts a bus message refused as an event (`rejected`).
    pub fn count_rejected(&self) {
        self.rejected.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Every field ruled writes in the counters hash: any other field there
    /// was written by someone else (docs/service.md#key-namespace).
    pub fn known_fields(&self) -> BTreeSet<&'static str> {
        let mut known: BTreeSet<&'static str> = full_counters(&self.counters, &self.bundle_id)
            .into_iter()
            .chain(self.owner.fields())
            .map(|(field, _)| field)
            .collect();
        known.extend(["overflow", "rejected"]);
        known
    }

    /// Writes the counters and every rule's statistics in full.
    pub fn write_all(&mut self, engine: &Engine, writer: &StoreWriter) {
        self.counters = engine.counters();
        self.rules = Arc::new(all_rule_stats(engine));
        let mut fields = self.owner.fields();
        fields.extend(full_counters(&self.counters, &self.bundle_id));
        fields.push(("overflow", self.overflow.all()));
        fields.push(("rejected", self.rejected.all()));
        let counters = writer.send(StoreOp::Counters(fields));
        let rules = writer.send(StoreOp::AllRuleStats(AllRules {
            payload: Arc::clone(engine.payload()),
            stats: Arc::clone(&self.rules),
        }));
        self.stale = !(counters && rules);
    }

    pub fn write_changes(&mut self, engine: &Engine, writer: &StoreWriter) {
        if self.stale {
            self.write_all(engine, writer);
            return;
        }
        let counters = engine.counters();
        let mut changed = changed_counters(&self.counters, &counters);
        if let Some(overflow) = self.overflow.changed() {
            changed.push(("overflow", overflow));
        }
        if let Some(rejected) = self.rejected.changed() {
            changed.push(("rejected", rejected));
        }
        if !changed.is_empty() {
            self.stale |= !writer.send(StoreOp::Counters(changed));
            self.counters = counters;
        }
        let mut rules = Vec::new();
        // Copies the statistics only while a full write still holds them.
        let written = Arc::make_mut(&mut self.rules);
        for (index, (rule, old)) in engine
            .payload()
            .rules
            .iter()
            .zip(written.iter_mut())
            .enumerate()
        {
            let current = engine.rule_stats(index).unwrap_or_default();
            if current != *old {
                rules.push((rule.name.to_string(), rule_stats_json(&current)));
                *old = current;
            }
        }
        if !rules.is_empty() {
            self.stale |= !writer.send(StoreOp::RuleStats(rules));
        }
    }
}

impl StatsPublisher {
    /// The last write of a stop: what changed, then `state = stopped`.
    pub fn write_stopped(&mut self, engine: &Engine, writer: &StoreWriter) {
        self.write_changes(engine, writer);
        writer.send(StoreOp::Counters(vec![("state", STOPPED.to_string())]));
    }
}

fn all_rule_stats(engine: &Engine) -> Vec<RuleStats> {
    (0..engine.payload().rules.len())
        .map(|index| engine.rule_stats(index).unwrap_or_default())
        .collect()
}

/// A rule's field in `NS:rules` (docs/semantics.md#counters).
pub(crate) fn rule_stats_json(stats: &RuleStats) -> String {
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
