//! The one deadline queue (docs/semantics.md#walking-a-sequence, ARCHITECTURE.md#invariants): step waits, repeat
//! gaps, debounce windows and holds. Cancellation is lazy: the owner forgets the
//! token and the stale entry is skipped when it surfaces (or compacted away
//! when stale entries outnumber live ones).

use super::Time;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// The rule's live run: a step wait or a repeat gap.
    Run,
    /// The rule's debounce window.
    Debounce,
    /// The rule's hold (`for`).
    Hold,
}

/// One heap entry; ordered by deadline, then arming order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub deadline: Time,
    pub token: u64,
    pub rule: u32,
    pub kind: TimerKind,
}

#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
    next_token: u64,
    armed: usize,
}

impl Timers {
    pub fn arm(&mut self, deadline: Time, rule: u32, kind: TimerKind) -> u64 {
        self.next_token += 1;
        let token = self.next_token;
        self.heap.push(Reverse(Entry {
            deadline,
            token,
            rule,
            kind,
        }));
        self.armed += 1;
        token
    }

    /// The owner forgot a live timer: it fired, or was cancelled. Only the
    /// count changes; a cancelled entry stays in the heap, stale, until it
    /// surfaces or a compaction drops it.
    pub fn disarm(&mut self) {
        self.armed = self.armed.saturating_sub(1);
    }

    pub fn armed(&self) -> usize {
        self.armed
    }

    pub fn peek(&self) -> Option<Entry> {
        self.heap.peek().map(|entry| entry.0)
    }

    pub fn pop(&mut self) -> Option<Entry> {
        self.heap.pop().map(|entry| entry.0)
    }

    /// Pops the earliest entry if it is due at `now` (live or stale).
    pub fn pop_due(&mut self, now: Time) -> Option<Entry> {
        if self.peek()?.deadline <= now {
            self.pop()
        } else {
            None
        }
    }

    /// Whether stale entries have piled up enough to be worth a compaction.
    pub fn wants_compaction(&self) -> bool {
        self.heap.len() > 2 * self.armed + 64
    }

    pub fn retain(&mut self, mut live: impl FnMut(&Entry) -> bool) {
        self.heap.retain(|entry| live(&entry.0));
    }

    /// Every entry (live or stale), in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.heap.iter().map(|entry| &entry.0)
    }

    /// Keeps the entries `keep` gives a rule index (their new one), with
    /// their tokens and deadlines, and drops every other; `keep` must
    /// return `None` for stale entries. For a live reload, which moves rules
    /// (docs/semantics.md#live-reload).
    pub fn remap(&mut self, mut keep: impl FnMut(&Entry) -> Option<u32>) {
        let heap = std::mem::take(&mut self.heap);
        self.heap = heap
            .into_iter()
            .filter_map(|Reverse(entry)| keep(&entry).map(|rule| Reverse(Entry { rule, ..entry })))
            .collect();
        self.armed = self.heap.len();
    }

    pub fn clear(&mut self) {
        self.heap.clear();
        self.armed = 0;
    }
}
