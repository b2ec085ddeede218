//! The simulator's Redis lane (docs/simulation.md#settings),
//! as the service's works (docs/service.md#durable-work-in-bulk): one
//! batch of Redis actions sent at a time, each action of it taking
//! `action-time` and all ending together; actions handed over while a
//! batch is sent wait for the next one. The actions submitted at the
//! instant a batch starts from an idle lane join it (the service takes
//! every action handed over before the lane gets to run).

use crate::pool::LANE_BATCH;
use crate::Job;
use std::collections::VecDeque;

/// What becomes of an action started in the simulation (`[[fail]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    Performed,
    Fails,
    /// Redis refuses the lane's transaction whole (`refused-whole`): not
    /// performed, its record kept; the engine retries it
    /// (docs/semantics.md#an-action-redis-refused-whole).
    RefusedWhole,
}

/// A batch being sent.
#[derive(Debug)]
pub(super) struct Batch {
    pub started: u64,
    pub finish: u64,
    /// Started by a submission to an idle lane: others at that instant
    /// join it. A batch of waiting actions takes no more.
    joinable: bool,
    /// Each action, and what becomes of it (`[[fail]]`).
    pub jobs: Vec<(Job, Fate)>,
}

#[derive(Debug, Default)]
pub(super) struct VirtualLane {
    pub sending: Option<Batch>,
    pub waiting: VecDeque<Job>,
}

impl VirtualLane {
    /// Redis actions the lane holds: sending or waiting.
    pub fn held(&self) -> usize {
        self.sending.as_ref().map_or(0, |batch| batch.jobs.len()) + self.waiting.len()
    }

    /// Whether an action submitted at `now` waits for the batch being sent.
    pub fn busy_at(&self, now: u64) -> bool {
        self.sending
            .as_ref()
            .is_some_and(|batch| !(batch.joinable && batch.started == now))
    }

    /// When the batch being sent ends.
    pub fn finish(&self) -> Option<u64> {
        self.sending.as_ref().map(|batch| batch.finish)
    }

    /// The batch an action submitted to the idle lane at `now` joins.
    pub fn joining(&mut self, now: u64, action_ns: u64) -> &mut Vec<(Job, Fate)> {
        &mut self
            .sending
            .get_or_insert_with(|| Batch {
                started: now,
                finish: now.saturating_add(action_ns),
                joinable: true,
                jobs: Vec::new(),
            })
            .jobs
    }

    /// The batch that ended, and the waiting actions that form the next.
    pub fn turn(&mut self) -> (Option<Batch>, Vec<Job>) {
        let done = self.sending.take();
        let take = self.waiting.len().min(LANE_BATCH);
        (done, self.waiting.drain(..take).collect())
    }

    /// The next batch, of actions that waited, starting at `now`.
    pub fn start(&mut self, now: u64, action_ns: u64, jobs: Vec<(Job, Fate)>) {
        if jobs.is_empty() {
            return;
        }
        self.sending = Some(Batch {
            started: now,
            finish: now.saturating_add(action_ns),
            joinable: false,
            jobs,
        });
    }
}
