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
    rules: Arc<RuleStatsTable>,
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
            rules: Arc::new(RuleStatsTable::of(engine)),
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

    /// The bundle id the counters name from the next write on (a reload).
    pub fn set_bundle(&mut self, id: String) {
        self.bundle_id = id;
    }

    /// Every counter of the counters hash and its value now
    /// ([`counter_values`]): what `v1.status` reports.
    pub fn counters_now(&self, engine: &Engine) -> Vec<(&'static str, u64)> {
        counter_values(
            &engine.counters(),
            self.overflow.count.load(Ordering::Relaxed),
            self.rejected.count.load(Ordering::Relaxed),
        )
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
        known.extend(
            counter_values(&self.counters, 0, 0)
                .into_iter()
                .map(|(f, _)| f),
        );
        known
    }

    /// Writes the counters and every rule's statistics in full.
    pub fn write_all(&mut self, engine: &Engine, writer: &StoreWriter) {
        self.counters = engine.counters();
        self.rules = Arc::new(RuleStatsTable::of(engine));
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
        // Copies the statistics only while a full write still holds them.
        let rules = Arc::make_mut(&mut self.rules).update(engine);
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

/// The rule statistics last written, by rule index, of the rules whose
/// statistics are not all zero: with 100,000 rules most never fire, and a
/// full vector took 4 MB (40 bytes a rule).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleStatsTable {
    /// Sorted by rule index, each index once.
    entries: Vec<(usize, RuleStats)>,
}

impl RuleStatsTable {
    /// The engine's statistics now.
    pub fn of(engine: &Engine) -> Self {
        let entries = (0..engine.payload().rules.len())
            .filter_map(|index| {
                let stats = engine.rule_stats(index).unwrap_or_default();
                (stats != RuleStats::default()).then_some((index, stats))
            })
            .collect();
        Self { entries }
    }

    /// The statistics of the first `count` rules, in rule order.
    pub fn first(&self, count: usize) -> impl Iterator<Item = RuleStats> + '_ {
        let mut entries = self.entries.iter().peekable();
        (0..count).map(move |index| {
            entries
                .next_if(|(at, _)| *at == index)
                .map_or_else(RuleStats::default, |(_, stats)| *stats)
        })
    }

    /// Takes the engine's statistics now; returns the `NS:rules` fields of
    /// the rules whose statistics changed.
    fn update(&mut self, engine: &Engine) -> Vec<(String, String)> {
        let names = engine.payload().rules.iter().map(|rule| &rule.name[..]);
        self.take(names, |index| engine.rule_stats(index).unwrap_or_default())
    }

    /// [`Self::update`] for the rules named by `names`, in rule order,
    /// whose statistics `stats` says.
    fn take<'a>(
        &mut self,
        names: impl Iterator<Item = &'a str>,
        stats: impl Fn(usize) -> RuleStats,
    ) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        let mut added = Vec::new();
        let mut at = 0;
        for (index, name) in names.enumerate() {
            let current = stats(index);
            // Past entries of rules no longer there (none: a reload writes
            // all again).
            while self
                .entries
                .get(at)
                .is_some_and(|(entry, _)| *entry < index)
            {
                at += 1;
            }
            let old = match self.entries.get_mut(at) {
                Some((entry, stats)) if *entry == index => {
                    at += 1;
                    stats
                }
                _ if current == RuleStats::default() => continue,
                _ => {
                    added.push((index, current));
                    fields.push((name.to_string(), rule_stats_json(&current)));
                    continue;
                }
            };
            if current != *old {
                fields.push((name.to_string(), rule_stats_json(&current)));
                *old = current;
            }
        }
        if !added.is_empty() {
            self.entries.extend(added);
            self.entries.sort_unstable_by_key(|(index, _)| *index);
        }
        fields
    }
}

/// A rule's field in `NS:rules` (docs/semantics.md#counters): compact
/// JSON, keys sorted, formatted directly (a full write formats every
/// rule's, 10,000 at a start).
pub(crate) fn rule_stats_json(stats: &RuleStats) -> String {
    let last_fire = match stats.last_fire_ms {
        Some(ms) => ms.to_string(),
        None => "null".to_string(),
    };
    let refusals = &stats.refusals;
    format!(
        r#"{{"active":{},"errors":{},"guarded":{},"last-fire":{last_fire},"limited":{},"runs":{},"tripped":{}}}"#,
        stats.active_runs,
        stats.errors,
        refusals.guarded,
        refusals.limited,
        stats.runs_started,
        refusals.tripped
    )
}

/// The counters hash in full (docs/semantics.md#counters).
fn full_counters(counters: &Counters, bundle_id: &str) -> Vec<(&'static str, String)> {
    let mut fields = counter_fields(counters);
    fields.push(("version", env!("CARGO_PKG_VERSION").to_string()));
    fields.push(("bundle", bundle_id.to_string()));
    fields
}

/// Every counter of the counters hash (docs/semantics.md#counters), in
/// the hash's order: the engine's, then the service's own (`overflow`,
/// `rejected`). The one list the writes and `v1.status` read.
pub fn counter_values(c: &Counters, overflow: u64, rejected: u64) -> Vec<(&'static str, u64)> {
    let mut values = engine_counters(c).to_vec();
    values.extend([("overflow", overflow), ("rejected", rejected)]);
    values
}

/// The engine's counters: the part of [`counter_values`] a stats tick
/// compares with what it last wrote.
fn engine_counters(c: &Counters) -> [(&'static str, u64); 12] {
    [
        ("rules", c.rules),
        ("dispatched", c.dispatched),
        ("dropped", c.dropped),
        ("refused", c.refused),
        ("failed", c.failed),
        ("retried", c.retried),
        ("pending", c.pending),
        ("runs-active", c.runs_active),
        ("keys-forgotten", c.keys_forgotten),
        ("guarded", c.guarded),
        ("limited", c.limited),
        ("tripped", c.tripped),
    ]
}

fn counter_fields(c: &Counters) -> Vec<(&'static str, String)> {
    engine_counters(c)
        .into_iter()
        .map(|(field, value)| (field, value.to_string()))
        .collect()
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
    use ruled_engine::EnvelopeCounts;

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
        // The engine's 12 (`retried`, `keys-forgotten` and the envelope's
        // `guarded`, `limited`, `tripped` among them), the version, the
        // bundle.
        assert_eq!(full.len(), 14);
        assert_eq!(full[5], ("retried", "0".to_string()));
        assert_eq!(full[8], ("keys-forgotten", "0".to_string()));
        assert_eq!(full[9], ("guarded", "0".to_string()));
        assert_eq!(full[11], ("tripped", "0".to_string()));
        assert_eq!(full[13], ("bundle", "abc".to_string()));
    }

    /// The direct formatting reads as serde_json writes the object.
    #[test]
    fn rule_stats_json_is_the_json_object() {
        for last_fire_ms in [None, Some(1_712_345_678_901), Some(-5)] {
            let stats = RuleStats {
                runs_started: 3,
                last_fire_ms,
                errors: 7,
                active_runs: 1,
                refusals: EnvelopeCounts {
                    guarded: 2,
                    limited: 4,
                    tripped: 5,
                },
            };
            let expected = serde_json::json!({
                "runs": 3, "last-fire": last_fire_ms, "errors": 7, "active": 1,
                "guarded": 2, "limited": 4, "tripped": 5,
            });
            assert_eq!(rule_stats_json(&stats), expected.to_string());
        }
    }

    fn ran(runs: u64, active: u64) -> RuleStats {
        RuleStats {
            runs_started: runs,
            last_fire_ms: Some(1_000),
            errors: 0,
            active_runs: active,
            refusals: EnvelopeCounts::default(),
        }
    }

    #[test]
    fn rule_statistics_keep_only_rules_that_ran_and_write_what_changed() {
        let names = ["a", "b", "c", "d"];
        let mut now = vec![RuleStats::default(); 4];
        let mut table = RuleStatsTable::default();
        let take = |table: &mut RuleStatsTable, now: &[RuleStats]| {
            let fields = table.take(names.iter().copied(), |index| now[index]);
            fields.into_iter().map(|(name, _)| name).collect::<Vec<_>>()
        };
        assert!(take(&mut table, &now).is_empty());
        assert!(table.entries.is_empty());

        now[2] = ran(1, 1);
        assert_eq!(take(&mut table, &now), ["c"]);
        now[0] = ran(1, 1);
        now[2] = ran(1, 0);
        now[3] = ran(2, 1);
        assert_eq!(take(&mut table, &now), ["a", "c", "d"]);
        assert!(take(&mut table, &now).is_empty());
        let indices: Vec<usize> = table.entries.iter().map(|(index, _)| *index).collect();
        assert_eq!(indices, [0, 2, 3]);
        assert_eq!(table.first(4).collect::<Vec<_>>(), now);
        assert_eq!(table.first(2).collect::<Vec<_>>(), now[..2]);
    }
}
