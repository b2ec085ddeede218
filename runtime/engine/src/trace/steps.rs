//! A run trace's step records, oldest first. Most runs have one step: its
//! record is kept inline, so tracing a run allocates nothing for it
//! (starting a run is on the event path, docs/engine.md#the-48-mb-box).

use super::{At, StepRecord};

#[derive(Debug, Default)]
pub(super) struct StepRecords {
    first: Option<StepRecord>,
    /// The records after `first`; empty while `first` is `None`.
    rest: Vec<StepRecord>,
}

impl StepRecords {
    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    pub fn last(&self) -> Option<&StepRecord> {
        self.rest.last().or(self.first.as_ref())
    }

    pub fn last_mut(&mut self) -> Option<&mut StepRecord> {
        match self.rest.last_mut() {
            Some(last) => Some(last),
            None => self.first.as_mut(),
        }
    }

    /// The record of step `at`: the latest, or a new one after it, the
    /// oldest going first when `max` are kept; then whether one went and
    /// whether one was added.
    pub fn at(&mut self, at: At, max: usize) -> (&mut StepRecord, bool, bool) {
        let current = self.last().is_some_and(|last| {
            (last.step, last.pass, last.finally) == (at.step, at.pass, at.finally)
        });
        let mut dropped = false;
        if !current {
            if self.len() >= max {
                self.drop_oldest();
                dropped = true;
            }
            if self.first.is_some() {
                // Exactly what is kept: a second step is rare enough.
                self.rest.reserve_exact(1);
                self.rest.push(StepRecord::new(at));
            } else {
                self.first = Some(StepRecord::new(at));
            }
        }
        let record = match self.rest.len() {
            0 => self.first.get_or_insert_with(|| StepRecord::new(at)),
            len => &mut self.rest[len - 1],
        };
        (record, dropped, !current)
    }

    /// Drops the oldest record.
    pub fn drop_oldest(&mut self) {
        self.first = if self.rest.is_empty() {
            None
        } else {
            Some(self.rest.remove(0))
        };
    }

    pub fn iter(&self) -> impl Iterator<Item = &StepRecord> {
        self.first.iter().chain(&self.rest)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut StepRecord> {
        self.first.iter_mut().chain(&mut self.rest)
    }

    /// The bytes allocated beyond the inline record.
    pub fn allocated(&self) -> usize {
        self.rest.capacity() * std::mem::size_of::<StepRecord>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(step: u32) -> At {
        At {
            step,
            pass: 0,
            finally: false,
        }
    }

    #[test]
    fn the_first_record_is_inline_and_the_order_holds() {
        let mut steps = StepRecords::default();
        assert!(steps.last().is_none() && steps.len() == 0);
        assert!(steps.at(at(0), 3).2);
        assert_eq!((steps.len(), steps.allocated()), (1, 0));
        let (current, _, added) = steps.at(at(0), 3);
        current.end = None;
        assert!(!added);
        assert_eq!(steps.len(), 1);
        steps.at(at(1), 3);
        steps.at(at(2), 3);
        // A fourth with three kept drops the oldest.
        assert!(steps.at(at(3), 3).1);
        steps.drop_oldest();
        let order: Vec<u32> = steps.iter().map(|s| s.step).collect();
        assert_eq!(order, [2, 3]);
        assert_eq!(steps.last_mut().map(|s| s.step), Some(3));
        steps.drop_oldest();
        steps.drop_oldest();
        assert_eq!(steps.len(), 0);
    }

    #[test]
    fn a_finally_step_is_a_record_of_its_own() {
        let mut steps = StepRecords::default();
        steps.at(at(0), 3);
        let finally = At {
            finally: true,
            ..at(0)
        };
        steps.at(finally, 3);
        steps.at(finally, 3);
        let kept: Vec<bool> = steps.iter().map(|s| s.finally).collect();
        assert_eq!(kept, [false, true]);
    }
}
