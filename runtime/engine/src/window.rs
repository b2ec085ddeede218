//! A sliding window of instants (docs/safety.md): how many things happened
//! in the last `per` nanoseconds. A limit counts its performed actions in
//! one, a rule's breaker its run starts. Holds at most `max + 1` instants.

use crate::Time;
use std::collections::VecDeque;

#[derive(Debug, Clone, Default)]
pub(crate) struct Window {
    instants: VecDeque<u64>,
}

impl Window {
    /// Counts one more at `now` if fewer than `max` happened in the window
    /// of `per_ns` ending at `now`; `false` (and nothing counted) if not.
    pub(crate) fn admit(&mut self, now: Time, per_ns: u64, max: u32) -> bool {
        let now = now.as_nanos();
        while let Some(&first) = self.instants.front() {
            if now.saturating_sub(first) >= per_ns {
                self.instants.pop_front();
            } else {
                break;
            }
        }
        if self.instants.len() >= max as usize {
            return false;
        }
        self.instants.push_back(now);
        true
    }

    pub(crate) fn clear(&mut self) {
        self.instants.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_in_any_window() {
        let mut window = Window::default();
        let at = Time::from_millis;
        assert!(window.admit(at(0), 10_000_000_000, 2));
        assert!(window.admit(at(5_000), 10_000_000_000, 2));
        assert!(!window.admit(at(9_999), 10_000_000_000, 2));
        // The first has left the window.
        assert!(window.admit(at(10_000), 10_000_000_000, 2));
        assert!(!window.admit(at(14_999), 10_000_000_000, 2));
    }
}
