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
        // A write Redis refused (out of memory) left the hashes behind:
        // all again, not only what changes from here on.
        self.stale |= writer.take_stats_lost();
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
/// full vector took 4 MB (40 bytes a rule). Packed: each entry is its rule
/// index's distance from the previous entry's, then its numbers, each a
/// LEB128 varint (8 bytes for a rule that ran once and never fired,
/// 14 with a last fire). Unpacked, an entry was 72 bytes: after replaying
/// 10,000 records, 0.7 MB written just after replay, at `ruled`'s peak
/// (docs/engine.md#the-48-mb-box).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleStatsTable {
    /// The entries, by rule index, each index once.
    packed: Vec<u8>,
}

impl RuleStatsTable {
    /// The engine's statistics now.
    pub fn of(engine: &Engine) -> Self {
        let mut table = Self::default();
        let mut packer = Packer::default();
        for index in 0..engine.payload().rules.len() {
            let stats = engine.rule_stats(index).unwrap_or_default();
            if stats != RuleStats::default() {
                packer.put(&mut table.packed, index, &stats);
            }
        }
        table.packed.shrink_to_fit();
        table
    }

    /// The entries, by rule index.
    fn entries(&self) -> impl Iterator<Item = (usize, RuleStats)> + '_ {
        let mut unpacker = Unpacker {
            packed: &self.packed,
            at: 0,
            index: 0,
        };
        std::iter::from_fn(move || unpacker.next())
    }

    /// The statistics of the first `count` rules, in rule order.
    pub fn first(&self, count: usize) -> impl Iterator<Item = RuleStats> + '_ {
        let mut entries = self.entries().peekable();
        (0..count).map(move |index| {
            entries
                .next_if(|(at, _)| *at == index)
                .map_or_else(RuleStats::default, |(_, stats)| stats)
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
        let mut changed = Vec::new();
        let mut entries = self.entries().peekable();
        for (index, name) in names.enumerate() {
            let current = stats(index);
            // Past entries of rules no longer there (none: a reload writes
            // all again).
            while entries.next_if(|(entry, _)| *entry < index).is_some() {}
            let written = match entries.next_if(|(entry, _)| *entry == index) {
                Some((_, old)) => current != old,
                None => current != RuleStats::default(),
            };
            if written {
                fields.push((name.to_string(), rule_stats_json(&current)));
                changed.push((index, current));
            }
        }
        drop(entries);
        if !changed.is_empty() {
            self.merge(changed);
        }
        fields
    }

    /// The entries with `changed` (by rule index) put in, over an entry of
    /// the same rule.
    fn merge(&mut self, changed: Vec<(usize, RuleStats)>) {
        let mut packed = Vec::with_capacity(self.packed.len() + changed.len() * 16);
        let mut packer = Packer::default();
        let mut changed = changed.into_iter().peekable();
        for (index, old) in self.entries() {
            while let Some((new, stats)) = changed.next_if(|(new, _)| *new < index) {
                packer.put(&mut packed, new, &stats);
            }
            match changed.next_if(|(new, _)| *new == index) {
                Some((_, stats)) => packer.put(&mut packed, index, &stats),
                None => packer.put(&mut packed, index, &old),
            }
        }
        for (new, stats) in changed {
            packer.put(&mut packed, new, &stats);
        }
        packed.shrink_to_fit();
        self.packed = packed;
    }
}

/// Appends entries to a [`RuleStatsTable`], in rule order.
#[derive(Default)]
struct Packer {
    /// The index of the last entry put (0 before the first).
    index: usize,
}

impl Packer {
    fn put(&mut self, packed: &mut Vec<u8>, index: usize, stats: &RuleStats) {
        let distance = index - self.index;
        self.index = index;
        let refusals = &stats.refusals;
        put_varint(packed, distance as u64);
        for number in [stats.runs_started, stats.errors, stats.active_runs] {
            put_varint(packed, number);
        }
        for number in [refusals.guarded, refusals.limited, refusals.tripped] {
            put_varint(packed, number);
        }
        match stats.last_fire_ms {
            None => put_varint(packed, 0),
            Some(ms) => {
                put_varint(packed, 1);
                // Zigzag: small negative numbers stay short too.
                put_varint(packed, ((ms << 1) ^ (ms >> 63)) as u64);
            }
        }
    }
}

/// Reads the entries a [`Packer`] put, in order.
struct Unpacker<'a> {
    packed: &'a [u8],
    at: usize,
    index: usize,
}

impl Unpacker<'_> {
    fn next(&mut self) -> Option<(usize, RuleStats)> {
        if self.at >= self.packed.len() {
            return None;
        }
        self.index += self.varint() as usize;
        let mut stats = RuleStats {
            runs_started: self.varint(),
            errors: self.varint(),
            active_runs: self.varint(),
            ..RuleStats::default()
        };
        stats.refusals.guarded = self.varint();
        stats.refusals.limited = self.varint();
        stats.refusals.tripped = self.varint();
        if self.varint() == 1 {
            let zigzag = self.varint();
            stats.last_fire_ms = Some((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64));
        }
        Some((self.index, stats))
    }

    fn varint(&mut self) -> u64 {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.packed.get(self.at) else {
                break;
            };
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                break;
            }
        }
        value
    }
}

/// Appends `value` as a LEB128 varint: 7 bits a byte, low first, the top
/// bit set on all but the last.
fn put_varint(packed: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        packed.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    packed.push(value as u8);
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
        assert!(table.packed.is_empty());

        now[2] = ran(1, 1);
        assert_eq!(take(&mut table, &now), ["c"]);
        now[0] = ran(1, 1);
        now[2] = ran(1, 0);
        now[3] = ran(2, 1);
        assert_eq!(take(&mut table, &now), ["a", "c", "d"]);
        assert!(take(&mut table, &now).is_empty());
        let indices: Vec<usize> = table.entries().map(|(index, _)| index).collect();
        assert_eq!(indices, [0, 2, 3]);
        assert_eq!(table.first(4).collect::<Vec<_>>(), now);
        assert_eq!(table.first(2).collect::<Vec<_>>(), now[..2]);
    }

    #[test]
    fn packed_statistics_read_back_as_written() {
        let extreme = RuleStats {
            runs_started: u64::MAX,
            last_fire_ms: Some(i64::MIN),
            errors: 1 << 63,
            active_runs: 127,
            refusals: EnvelopeCounts {
                guarded: 128,
                limited: u64::MAX - 1,
                tripped: 16_384,
            },
        };
        let now = [
            ran(1, 1),
            RuleStats::default(),
            extreme,
            RuleStats {
                last_fire_ms: Some(-5),
                ..ran(300, 0)
            },
            RuleStats {
                last_fire_ms: Some(i64::MAX),
                ..RuleStats::default()
            },
        ];
        let mut table = RuleStatsTable::default();
        let names = ["a", "b", "c", "d", "e"];
        table.take(names.iter().copied(), |index| now[index]);
        let indices: Vec<usize> = table.entries().map(|(index, _)| index).collect();
        assert_eq!(indices, [0, 2, 3, 4]);
        assert_eq!(table.first(5).collect::<Vec<_>>(), now);
        // An entry changed between two kept ones, one added before them.
        let mut later = now;
        later[1] = ran(1, 0);
        later[3] = ran(301, 1);
        let fields = table.take(names.iter().copied(), |index| later[index]);
        let written: Vec<&str> = fields.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(written, ["b", "d"]);
        assert_eq!(table.first(5).collect::<Vec<_>>(), later);
    }
}
