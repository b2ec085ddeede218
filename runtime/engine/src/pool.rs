//! The worker pool's admission (docs/semantics.md#worker-pool-and-actions), shared by the service's
//! pool and the simulator's virtual one: a submitted job goes straight to
//! an idle worker; the queue holds only jobs waiting for a busy one, and a
//! job that finds the queue full is refused. A Redis action (`redis`) takes
//! no worker: it goes to the Redis lane, which pipelines the commands of
//! every action it holds, up to as many as the workers and their queue
//! hold together. Submitting never waits, so the event path never blocks
//! on actions.

use rulecore::bundle::Action;

/// How many workers, and how many jobs may wait for a busy one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    pub workers: usize,
    pub queue: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            queue: 256,
        }
    }
}

/// Where a submitted job goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// An idle worker takes it.
    Worker,
    /// It waits in the queue for a busy worker.
    Queue,
    /// The queue is full: refused (the run ends, counted in `dropped`).
    Refused,
    /// The Redis lane takes it: its command is sent with the others the
    /// lane holds, in one pipeline (a Redis action only).
    Lane,
}

/// The most Redis actions the lane sends in one batch.
pub const LANE_BATCH: usize = 512;

/// Which part of the pool performs an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// A worker, one action at a time: `exec`, `can`.
    Workers,
    /// The Redis lane: an action that is one Redis command (`redis`), sent
    /// in a pipeline with the other actions the lane holds.
    Redis,
}

impl Lane {
    pub fn of(action: &Action) -> Self {
        match action {
            Action::Redis { .. } | Action::Publish { .. } | Action::Notify(_) => Self::Redis,
            Action::Exec { .. } | Action::Can(_) => Self::Workers,
        }
    }
}

impl PoolConfig {
    /// Where a job submitted now goes, with `idle` workers waiting for a
    /// job and `waiting` jobs handed over that no worker has taken yet.
    pub fn admit(&self, idle: usize, waiting: usize) -> Admission {
        if waiting < idle {
            Admission::Worker
        } else if waiting - idle < self.queue {
            Admission::Queue
        } else {
            Admission::Refused
        }
    }

    /// How many Redis actions the lane holds at once, being sent or
    /// waiting for their replies: as many as the workers and their queue
    /// hold together, so a stalled Redis holds no more than it did when
    /// the workers sent them.
    pub fn lane_capacity(&self) -> usize {
        self.workers.max(1).saturating_add(self.queue)
    }

    /// Where a Redis action submitted now goes, with `held` actions in the
    /// lane, `sending` whether it is sending a batch now: the lane's next
    /// batch (at once when it is not sending, [`Admission::Lane`]; else it
    /// waits for the batch being sent, [`Admission::Queue`]), or refused
    /// when the lane is full.
    pub fn admit_to_lane(&self, held: usize, sending: bool) -> Admission {
        if held >= self.lane_capacity() {
            Admission::Refused
        } else if sending {
            Admission::Queue
        } else {
            Admission::Lane
        }
    }

    /// Submissions accepted now by each part: idle workers and free queue
    /// slots (`waiting` jobs handed over that no worker has taken), and the
    /// lane's free places (`held` Redis actions in it).
    pub fn room(&self, idle: usize, waiting: usize, held: usize) -> Room {
        Room {
            workers: idle.saturating_add(self.queue).saturating_sub(waiting),
            lane: self.lane_capacity().saturating_sub(held),
        }
    }
}

/// How many submissions each part of a pool accepts now
/// ([`crate::Engine::pool_has_room`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Room {
    /// Idle workers and free queue slots, for `exec` and `can` actions.
    pub workers: usize,
    /// Free places in the Redis lane, for `redis` actions.
    pub lane: usize,
}

impl Room {
    pub fn total(&self) -> usize {
        self.workers.saturating_add(self.lane)
    }

    /// The room for actions of `lane`.
    pub fn of(&self, lane: Lane) -> usize {
        match lane {
            Lane::Workers => self.workers,
            Lane::Redis => self.lane,
        }
    }

    /// One submission to `lane` fewer.
    pub fn take(&mut self, lane: Lane) {
        match lane {
            Lane::Workers => self.workers = self.workers.saturating_sub(1),
            Lane::Redis => self.lane = self.lane.saturating_sub(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_workers_first_then_the_queue_then_refusal() {
        let pool = PoolConfig {
            workers: 2,
            queue: 1,
        };
        assert_eq!(pool.admit(2, 0), Admission::Worker);
        assert_eq!(pool.admit(2, 1), Admission::Worker);
        assert_eq!(pool.admit(2, 2), Admission::Queue);
        assert_eq!(pool.admit(0, 0), Admission::Queue);
        assert_eq!(pool.admit(0, 1), Admission::Refused);
        let no_queue = PoolConfig { queue: 0, ..pool };
        assert_eq!(no_queue.admit(1, 0), Admission::Worker);
        assert_eq!(no_queue.admit(0, 0), Admission::Refused);
    }

    #[test]
    fn the_redis_lane_holds_as_many_as_the_workers_and_their_queue() {
        let pool = PoolConfig {
            workers: 2,
            queue: 1,
        };
        assert_eq!(pool.lane_capacity(), 3);
        assert_eq!(pool.admit_to_lane(2, false), Admission::Lane);
        assert_eq!(pool.admit_to_lane(2, true), Admission::Queue);
        assert_eq!(pool.admit_to_lane(3, false), Admission::Refused);
        assert_eq!(
            pool.room(2, 0, 0),
            Room {
                workers: 3,
                lane: 3
            }
        );
        assert_eq!(pool.room(0, 1, 3).total(), 0);
        assert_eq!(Lane::of(&Action::redis("l", "x")), Lane::Redis);
        let exec = Action::Exec {
            command: "/bin/true".into(),
            timeout_ns: 1,
        };
        assert_eq!(Lane::of(&exec), Lane::Workers);
    }
}
