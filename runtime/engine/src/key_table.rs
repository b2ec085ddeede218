//! The topic index's table (docs/engine.md#the-48-mb-box): topic keys to
//! the rules that list them, in one open-addressing array of 16-byte slots.
//!
//! A map of boxed keys costs a key allocation per rule and, on lookup, a
//! cache miss for the control bytes, one for the slot and one for the key.
//! Here every key's text is in one string, back to back, and a slot holds
//! the key's place in it, a 32-bit part of its hash (so a probe that meets
//! another key rarely reads that key's text), and the key's rule inline
//! when it has one, which most keys do.

/// A slot's `rules` when it holds no key.
const EMPTY: u32 = u32::MAX;
/// Set in `rules`: the rest is a position in [`KeyTable::many`].
const MANY: u32 = 1 << 31;

#[derive(Debug, Clone, Copy)]
struct Slot {
    hash: u32,
    start: u32,
    len: u32,
    /// The one rule, or [`MANY`] and a list's position, or [`EMPTY`].
    rules: u32,
}

const EMPTY_SLOT: Slot = Slot {
    hash: 0,
    start: 0,
    len: 0,
    rules: EMPTY,
};

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct KeyTable {
    /// A power of two many, at most three quarters full; empty until the
    /// first key.
    slots: Box<[Slot]>,
    keys: usize,
    text: String,
    /// The rule lists of keys naming more than one rule, ascending.
    many: Vec<Vec<u32>>,
}

use crate::fast_hash::hash_text as hash;

impl KeyTable {
    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// Where `key` is, or the empty slot where it would go. The table is
    /// never full, so the probe ends.
    fn find(&self, key: &str, hash: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut at = hash as usize & mask;
        let tag = (hash >> 32) as u32;
        loop {
            let slot = &self.slots[at];
            if slot.rules == EMPTY {
                return at;
            }
            if slot.hash == tag && self.key(slot) == Some(key) {
                return at;
            }
            at = (at + 1) & mask;
        }
    }

    fn key(&self, slot: &Slot) -> Option<&str> {
        let start = slot.start as usize;
        self.text.get(start..start + slot.len as usize)
    }

    /// The rules of `key`, ascending, or none.
    pub fn get(&self, key: &str) -> &[u32] {
        if self.keys == 0 {
            return &[];
        }
        let slot = &self.slots[self.find(key, hash(key))];
        self.rules(slot)
    }

    fn rules<'a>(&'a self, slot: &'a Slot) -> &'a [u32] {
        match slot.rules {
            EMPTY => &[],
            rules if rules & MANY != 0 => self
                .many
                .get((rules & !MANY) as usize)
                .map_or(&[], Vec::as_slice),
            _ => std::slice::from_ref(&slot.rules),
        }
    }

    /// Adds `rule` to `key`'s rules; rules come in ascending order, and a
    /// rule listing the same key twice is kept once.
    pub fn insert(&mut self, key: &str, rule: u32) {
        if (self.keys + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let hash = hash(key);
        let at = self.find(key, hash);
        let slot = self.slots[at];
        if slot.rules == EMPTY {
            let (Ok(start), Ok(len)) = (u32::try_from(self.text.len()), u32::try_from(key.len()))
            else {
                // Over 4 GiB of topics cannot come from a bundle that
                // decoded within the box; refuse rather than mis-index.
                return;
            };
            self.text.push_str(key);
            let rules = if rule & MANY == 0 {
                rule
            } else {
                self.list(vec![rule])
            };
            self.slots[at] = Slot {
                hash: (hash >> 32) as u32,
                start,
                len,
                rules,
            };
            self.keys += 1;
            return;
        }
        if slot.rules & MANY != 0 {
            if let Some(list) = self.many.get_mut((slot.rules & !MANY) as usize) {
                if list.last() != Some(&rule) {
                    list.push(rule);
                }
            }
        } else if slot.rules != rule {
            self.slots[at].rules = self.list(vec![slot.rules, rule]);
        }
    }

    fn list(&mut self, rules: Vec<u32>) -> u32 {
        let position = u32::try_from(self.many.len()).unwrap_or(EMPTY);
        self.many.push(rules);
        MANY | position
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(8);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY_SLOT; size].into_boxed_slice());
        for slot in old.iter().filter(|slot| slot.rules != EMPTY) {
            let mask = size - 1;
            let full = hash(self.key(slot).unwrap_or_default());
            let mut at = full as usize & mask;
            while self.slots[at].rules != EMPTY {
                at = (at + 1) & mask;
            }
            self.slots[at] = *slot;
        }
    }

    /// Gives back what building reserved beyond the keys.
    pub fn shrink(&mut self) {
        self.text.shrink_to_fit();
        self.many.shrink_to_fit();
    }

    /// The heap of a table of `keys` keys of `text` bytes in all, with
    /// `lists` rules in lists of keys naming more than one
    /// ([`crate::memory`]'s model).
    pub fn heap(keys: usize, text: usize, lists: usize, list_count: usize) -> usize {
        if keys == 0 {
            return 0;
        }
        let mut slots = 8;
        while keys * 4 > slots * 3 {
            slots *= 2;
        }
        slots * std::mem::size_of::<Slot>()
            + text
            + list_count * std::mem::size_of::<Vec<u32>>()
            + lists * std::mem::size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_key_after_growing_and_keeps_lists_ascending() {
        let mut table = KeyTable::default();
        assert!(table.get("a").is_empty());
        for rule in 0..1_000u32 {
            table.insert(&format!("t.{rule}"), rule);
        }
        table.insert("t.7", 7);
        table.insert("t.7", 1_001);
        table.insert("t.7", 1_001);
        table.insert("t.7", 1_002);
        table.insert("big", MANY + 5);
        table.shrink();
        for rule in (0..1_000u32).filter(|&rule| rule != 7) {
            assert_eq!(table.get(&format!("t.{rule}")), [rule]);
        }
        assert_eq!(table.get("t.7"), [7, 1_001, 1_002]);
        assert_eq!(table.get("big"), [MANY + 5]);
        assert!(table.get("t.1000").is_empty() && table.get("").is_empty());
        assert_eq!(table.keys, 1_001);
        assert!(table.keys * 4 <= table.slots.len() * 3);
    }
}
