//! The hasher of the engine's tables (docs/engine.md#the-48-mb-box): job ids
//! and topic-index keys; and of the service's tables on the notification
//! path (the watched hashes' notifications, the reads asked, ruled's own
//! event ids, the log budget's rules). std's default, SipHash, resists an
//! attacker who chooses keys to collide; these tables' keys are chosen by
//! the engine (sequential job ids, event ids) or fixed at load by the
//! bundle (topics, watched fields, rule names), and what arrives from the
//! bus is only looked up, never inserted. So a multiply-and-rotate hash
//! over eight bytes at a time is enough, and several times faster on the
//! event path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// An odd constant with well-mixed bits (2^64 divided by the golden ratio).
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// See the module documentation.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(MULTIPLIER);
    }
}

/// `text`'s [`FastHasher`] hash: the topic table's keys, replay's rule
/// names.
pub(crate) fn hash_text(text: &str) -> u64 {
    let mut hasher = FastHasher::default();
    hasher.write(text.as_bytes());
    hasher.finish()
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        // A product's high bits depend on every input bit, its low bits
        // only on the input's low bits: topics alike in their first bytes
        // ("vehicle.thing1…", "vehicle.thing2…") would share their low
        // bits, and so their buckets. A final shift-multiply-shift
        // spreads every bit over all of them.
        let mixed = (self.0 ^ (self.0 >> 33)).wrapping_mul(MULTIPLIER);
        mixed ^ (mixed >> 33)
    }
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A `HashSet` with [`FastHasher`].
pub type FastSet<T> = std::collections::HashSet<T, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash + ?Sized>(value: &T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(value)
    }

    #[test]
    fn spreads_sequential_ids_and_similar_topics() {
        let ids: std::collections::HashSet<u64> = (0..10_000u64).map(|n| hash(&n) >> 57).collect();
        // The top seven bits (hashbrown's control byte) take every value.
        assert_eq!(ids.len(), 128);
        assert_ne!(
            hash("vehicle.thing1.changed"),
            hash("vehicle.thing2.changed")
        );
        // Topics that differ only past their first bytes still spread over
        // the low bits, which pick a bucket.
        // 10,000 keys over 16,384 buckets fill some 7,500 when spread.
        let low: std::collections::HashSet<u64> = (0..10_000)
            .map(|n| hash(&format!("vehicle.thing{n}.changed")) & 0x3fff)
            .collect();
        assert!(low.len() > 7_000, "{} of 16,384 buckets", low.len());
        // A str hashes its length marker too: "ab" then "" is not "a" then "b".
        assert_ne!(hash(&("ab", "")), hash(&("a", "b")));
        let mut map = FastMap::default();
        map.insert("t.1".to_string(), 1);
        assert_eq!(map.get("t.1"), Some(&1));
    }
}
