//! The worker pool's admission (docs/semantics.md#worker-pool-and-actions), shared by the service's
//! pool and the simulator's virtual one: a submitted job goes straight to
//! an idle worker; the queue holds only jobs waiting for a busy one, and a
//! job that finds the queue full is refused. Submitting never waits, so the
//! event path never blocks on actions.

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
}
