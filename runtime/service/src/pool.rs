//! The worker pool (docs/semantics.md#worker-pool-and-actions): `workers` tasks behind a bounded queue,
//! admitting jobs as [`PoolConfig::admit`] says, and beside them the
//! Redis lane (`crate::lane`), one task that pipelines the Redis actions,
//! admitting them as [`PoolConfig::admit_to_lane`] says (the simulator's
//! virtual pool follows the same rules). A job that finds its part full,
//! or the pool stopping, is refused at once: [`Pool::submit`] never waits.
//! Every job's fate comes back to the driver on one channel as
//! [`Report`]s, and so does room opening in a pool that was full
//! ([`Report::Room`]: the engine's due backlog waits for it,
//! docs/semantics.md#due-steps-the-pool-refused).

use crate::can::CanSockets;
use crate::exec::{self, ExecError, RunningGroups};
use crate::lane;
use crate::record_store::StoreWriter;
use rulecore::bundle::Action;
use ruled_engine::pool::{Admission, Lane, Room};
use ruled_engine::{Job, JobId};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

pub use ruled_engine::pool::PoolConfig;

/// What happened to a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// A worker took the job, had its pending record removed (if any), and
    /// is about to perform it.
    Started(JobId),
    /// The action finished; `Err` carries a message naming what failed.
    Finished(JobId, Result<(), String>),
    /// Redis refused the Redis lane's transaction whole, or it could not
    /// be sent: the action did not run and `record` (the job's pending
    /// record) was not removed (docs/semantics.md#an-action-redis-refused-whole).
    NotPerformed {
        job: JobId,
        record: Option<Arc<str>>,
        why: String,
    },
    /// The job was still queued when the pool stopped: it never ran.
    Abandoned(JobId),
    /// A guard refused the job's action on its fresh read
    /// (docs/safety.md#guards): it was not performed.
    Guarded(JobId, ruled_engine::guard::Refusal),
    /// The pool was full (it refused a job, or a submission filled it) and
    /// now accepts one again: [`Pool::room`] says how many.
    Room,
}

/// Why a job was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("worker queue full")]
    QueueFull,
    #[error("worker pool stopping")]
    Stopping,
}

/// What the workers need to perform actions.
#[derive(Clone)]
pub struct Performers {
    /// For the guards' fresh reads. `None` in tests of the other kinds.
    pub redis: Option<redis::aio::ConnectionManager>,
    /// For `redis` and `publish` actions (one `LPUSH` or `PUBLISH` each),
    /// on the Redis lane: ruled's own connection (each clone one of its
    /// own, [`crate::direct::Direct`]). `None` in tests of the other kinds.
    pub lane: Option<crate::direct::Direct>,
    pub can: CanSockets,
    /// Removes a job's pending record before its action starts. `None` in
    /// tests without Redis (a job's `drop_record` is then ignored).
    pub store: Option<StoreWriter>,
}

impl std::fmt::Debug for Performers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Performers")
            .field("redis", &self.redis.is_some())
            .field("lane", &self.lane.is_some())
            .field("can", &self.can)
            .field("store", &self.store.is_some())
            .finish()
    }
}

/// A job handed over, and whether it had to wait for a busy worker (or
/// for the batch the Redis lane was sending).
#[derive(Debug)]
pub(crate) struct Handed {
    pub job: Job,
    pub waited: bool,
}

#[derive(Debug, Default)]
struct Shared {
    queue: VecDeque<Handed>,
    /// Workers waiting for a job (woken or about to be).
    idle: usize,
    stopping: bool,
    /// The workers' part full since its last [`Report::Room`]: the next
    /// worker that makes room reports it.
    workers_full: bool,
    /// The same of the Redis lane.
    lane_full: bool,
    /// Redis actions handed to the lane that it has not taken into a
    /// batch yet, in the order they were handed over.
    lane: VecDeque<Handed>,
    /// The lane is sending a batch: what is handed over now waits for the
    /// next.
    lane_sending: bool,
    /// Redis actions the lane holds: waiting in `lane`, or in the batch
    /// it is performing.
    lane_held: usize,
}

impl Shared {
    /// Submissions accepted now, by [`PoolConfig::room`]'s rule: one per
    /// idle worker, free queue slot and free place in the lane.
    fn room(&self, config: PoolConfig) -> Room {
        if self.stopping {
            return Room::default();
        }
        config.room(self.idle, self.queue.len(), self.lane_held)
    }

    /// Whether `lane`'s part was full and has room now, so the worker
    /// that just took a job or went idle, or the lane that finished a
    /// batch, must report it; clears the flag when it must.
    fn room_to_report(&mut self, config: PoolConfig, lane: Lane) -> bool {
        let room = self.room(config).of(lane) > 0;
        let full = self.full(lane);
        let report = *full && room;
        if report {
            *full = false;
        }
        report
    }

    /// Actions being performed (busy workers, and the Redis lane's batch
    /// being sent) and actions waiting (for a busy worker, or for the
    /// lane's next batch).
    fn load(&self, config: PoolConfig) -> (usize, usize) {
        // A job an idle worker is about to take is still in the queue.
        let workers = config.workers.max(1).saturating_sub(self.idle);
        let waiting = self.lane.len();
        let sending = self.lane_held.saturating_sub(waiting);
        (
            workers.saturating_add(sending),
            self.queue.len().saturating_add(waiting),
        )
    }

    fn full(&mut self, lane: Lane) -> &mut bool {
        match lane {
            Lane::Workers => &mut self.workers_full,
            Lane::Redis => &mut self.lane_full,
        }
    }
}

#[derive(Debug)]
pub struct Pool {
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
    /// Wakes the lane when a Redis action is handed over.
    wake_lane: Arc<Notify>,
    config: PoolConfig,
    reports: mpsc::UnboundedSender<Report>,
    groups: RunningGroups,
    workers: Vec<JoinHandle<()>>,
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    // The lock is never held across an await or a panic-prone call, so a
    // poisoned lock still holds consistent data.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pool {
    /// Starts the workers and the Redis lane on the current tokio runtime.
    pub fn start(
        config: PoolConfig,
        performers: Performers,
        reports: mpsc::UnboundedSender<Report>,
    ) -> Self {
        Self::start_publishing(config, performers, reports, None, None)
    }

    /// [`Pool::start`] with the lane publishing the derived events of
    /// `publications` too, in the same writes as its pushes
    /// (docs/service.md#the-bus), and reporting its actions started on
    /// `started` when given: a channel the driver only takes from when it
    /// wakes for something else (at the latest the same actions'
    /// outcomes, which follow on `reports`), so a batch wakes it once, not
    /// twice (docs/engine.md#cpu-per-notification).
    pub fn start_publishing(
        config: PoolConfig,
        performers: Performers,
        reports: mpsc::UnboundedSender<Report>,
        publications: Option<crate::bus::Publications>,
        started: Option<mpsc::UnboundedSender<Report>>,
    ) -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let wake = Arc::new(Notify::new());
        let wake_lane = Arc::new(Notify::new());
        let groups = RunningGroups::default();
        let worker_of = |wake: &Arc<Notify>| Worker {
            shared: Arc::clone(&shared),
            wake: Arc::clone(wake),
            config,
            reports: reports.clone(),
            groups: groups.clone(),
        };
        let mut workers: Vec<JoinHandle<()>> = (0..config.workers.max(1))
            .map(|_| tokio::spawn(worker(worker_of(&wake), performers.clone())))
            .collect();
        let started = started.unwrap_or_else(|| reports.clone());
        workers.push(tokio::spawn(redis_lane(
            worker_of(&wake_lane),
            performers,
            publications,
            started,
        )));
        Self {
            shared,
            wake,
            wake_lane,
            config,
            reports,
            groups,
            workers,
        }
    }

    /// Hands a job over without waiting.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        self.try_submit(job).map(|_| ()).map_err(|(cause, _)| cause)
    }

    /// [`Pool::submit`] that hands a refused job back, so that the caller
    /// can report it without keeping a copy of every job it submits, and
    /// says where an accepted one went (an idle worker or the queue, the
    /// Redis lane's next batch or the one after the batch being sent).
    // A refused job comes back by value, once per refusal; boxing it would
    // cost every accepted submission an allocation instead.
    #[allow(clippy::result_large_err)]
    pub fn try_submit(&self, job: Job) -> Result<Admission, (Refused, Job)> {
        let mut shared = lock(&self.shared);
        if shared.stopping {
            return Err((Refused::Stopping, job));
        }
        let lane = Lane::of(&job.action);
        let admission = match lane {
            Lane::Redis => self
                .config
                .admit_to_lane(shared.lane_held, shared.lane_sending),
            // Jobs an idle worker will take wait in the queue too, briefly.
            Lane::Workers => self.config.admit(shared.idle, shared.queue.len()),
        };
        if admission == Admission::Refused {
            *shared.full(lane) = true;
            return Err((Refused::QueueFull, job));
        }
        let waited = admission == Admission::Queue;
        match lane {
            Lane::Redis => {
                shared.lane.push_back(Handed { job, waited });
                shared.lane_held += 1;
            }
            Lane::Workers => shared.queue.push_back(Handed { job, waited }),
        }
        // Full for this part: the part that makes room again reports it.
        if shared.room(self.config).of(lane) == 0 {
            *shared.full(lane) = true;
        }
        drop(shared);
        match lane {
            Lane::Redis => self.wake_lane.notify_one(),
            Lane::Workers => self.wake.notify_one(),
        }
        Ok(admission)
    }

    /// How many submissions each part of the pool accepts now.
    pub fn room(&self) -> Room {
        lock(&self.shared).room(self.config)
    }

    /// Jobs waiting for a worker.
    pub fn queued(&self) -> usize {
        lock(&self.shared).queue.len()
    }

    /// Actions being performed now, and actions waiting to be (what
    /// `v1.status` reports as `busy` and `queue`, docs/operating.md#status-fields).
    pub fn load(&self) -> (usize, usize) {
        lock(&self.shared).load(self.config)
    }

    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// Stops the pool: refuses new jobs, reports queued jobs (and those
    /// waiting for the Redis lane) as abandoned, kills the process group of
    /// every running `exec`, and waits (at most `grace`) for the workers
    /// and the lane to report what they were doing. Returns the number of
    /// abandoned jobs.
    pub async fn stop(&mut self, grace: Duration) -> usize {
        let abandoned: Vec<Job> = {
            let mut shared = lock(&self.shared);
            shared.stopping = true;
            let lane: Vec<Job> = shared.lane.drain(..).map(|handed| handed.job).collect();
            shared.lane_held -= lane.len();
            let queued = shared.queue.drain(..).map(|handed| handed.job);
            queued.chain(lane).collect()
        };
        for job in &abandoned {
            // The receiver lives in the driver, which is waiting for us.
            if self.reports.send(Report::Abandoned(job.id)).is_err() {
                tracing::debug!(job = job.id.0, "pool report receiver gone");
            }
        }
        self.wake.notify_waiters();
        self.wake_lane.notify_waiters();
        self.groups.kill_all();
        let mut workers = std::mem::take(&mut self.workers);
        let joined = tokio::time::timeout(grace, async {
            for handle in &mut workers {
                if let Err(e) = handle.await {
                    tracing::error!("worker task failed: {e}");
                }
            }
        })
        .await;
        if joined.is_err() {
            tracing::warn!(
                "workers still busy {}ms after stop; leaving them",
                grace.as_millis()
            );
            for handle in &workers {
                handle.abort();
            }
        }
        abandoned.len()
    }
}

/// What every worker shares with the pool.
struct Worker {
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
    config: PoolConfig,
    reports: mpsc::UnboundedSender<Report>,
    groups: RunningGroups,
}

async fn worker(pool: Worker, mut performers: Performers) {
    let Worker {
        shared,
        wake,
        config,
        reports,
        groups,
    } = pool;
    loop {
        let notified = wake.notified();
        tokio::pin!(notified);
        let (handed, room) = {
            let mut state = lock(&shared);
            if state.stopping {
                return;
            }
            let handed = state.queue.pop_front();
            if handed.is_none() {
                state.idle += 1;
                // Registered while the lock is held, so neither a submit
                // nor a stop between the unlock and the await is missed.
                notified.as_mut().enable();
            }
            (handed, state.room_to_report(config, Lane::Workers))
        };
        if room && reports.send(Report::Room).is_err() {
            return;
        }
        let Some(Handed { job, waited }) = handed else {
            notified.await;
            lock(&shared).idle -= 1;
            continue;
        };
        let job = started_from_queue(Handed { job, waited });
        let store = performers.store.as_ref();
        let screened =
            crate::guard_read::screen(vec![job], performers.redis.as_mut(), store, &reports).await;
        let Some(job) = screened.into_iter().next() else {
            continue;
        };
        if let (Some(id), Some(store)) = (job.record_to_drop_at_start(), &performers.store) {
            remove_record_first(store, id, redis_wait(&job.action)).await;
        }
        if reports.send(Report::Started(job.id)).is_err() {
            return;
        }
        let outcome = perform(&mut performers, &groups, &job).await;
        if reports.send(Report::Finished(job.id, outcome)).is_err() {
            return;
        }
    }
}

/// The Redis lane: takes the Redis actions handed over in batches
/// ([`lane::take_batch`]), performs each batch ([`lane::perform`]: its
/// records' removal confirmed, then its commands in one write, the derived
/// events queued in `publications` after them), and makes room for as
/// many as the batch held. Derived events that come without an action are
/// published on their own; at stop those still queued go out first.
async fn redis_lane(
    pool: Worker,
    mut performers: Performers,
    mut publications: Option<crate::bus::Publications>,
    started: mpsc::UnboundedSender<Report>,
) {
    let Worker {
        shared,
        wake,
        config,
        reports,
        ..
    } = pool;
    loop {
        let notified = wake.notified();
        tokio::pin!(notified);
        let (batch, stopping) = {
            let mut state = lock(&shared);
            let batch = if state.stopping {
                Vec::new()
            } else {
                lane::take_batch(&mut state.lane)
            };
            state.lane_sending = !batch.is_empty();
            if batch.is_empty() {
                // Registered under the lock: no hand-over is missed.
                notified.as_mut().enable();
            }
            (batch, state.stopping)
        };
        if stopping {
            if let Some(publications) = publications.as_mut() {
                lane::publish_at_stop(performers.lane.as_mut(), publications).await;
            }
            return;
        }
        if batch.is_empty() {
            match publications.as_mut().filter(|p| !p.closed()) {
                Some(queued) => {
                    tokio::select! {
                        biased;
                        () = &mut notified => {}
                        events = queued.next() => {
                            if let Some(events) = events {
                                lane::publish(performers.lane.as_mut(), queued, events).await;
                            }
                        }
                    }
                }
                None => notified.await,
            }
            continue;
        }
        let batch: Vec<Job> = batch.into_iter().map(started_from_queue).collect();
        let held = batch.len();
        let store = performers.store.as_ref();
        let batch =
            crate::guard_read::screen(batch, performers.redis.as_mut(), store, &reports).await;
        let sent = lane::perform(
            &batch,
            performers.lane.as_mut(),
            store,
            &reports,
            &started,
            publications.as_mut(),
        );
        if !sent.await {
            return;
        }
        let room = {
            let mut state = lock(&shared);
            state.lane_held -= held;
            state.lane_sending = false;
            state.room_to_report(config, Lane::Redis)
        };
        if room && reports.send(Report::Room).is_err() {
            return;
        }
    }
}

/// The job of `handed`, said to start now when it had to wait (for a busy
/// worker, or for the lane's batch); the driver said when it handed over
/// the others.
fn started_from_queue(handed: Handed) -> Job {
    let Handed { job, waited } = handed;
    if waited {
        tracing::debug!(
            rule = %job.rule, step = job.step, pass = job.pass, run = %job.run,
            "queued action started"
        );
    }
    job
}

/// How long a step without a `timeout` of its own (`can`) waits for Redis
/// to confirm the removal of its pending record: the rule files' default
/// `timeout` (docs/semantics.md#worker-pool-and-actions).
const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// How long `action` waits for Redis: its `timeout`, or [`DEFAULT_WAIT`].
fn redis_wait(action: &Action) -> Duration {
    action
        .timeout_ns()
        .map_or(DEFAULT_WAIT, Duration::from_nanos)
}

/// Removes a durable step's pending record and waits until Redis has
/// performed the `HDEL` (`Job::record_to_drop_at_start`).
///
/// The removal goes through the store writer's one ordered queue, so it
/// never lands before the record's own write. The wait is bounded by the
/// step's `timeout`, as a `redis` action's reply is: with Redis stalled
/// that long the outcome is unknown, and the step runs anyway (a crash
/// before the removal lands runs it again at the next start).
async fn remove_record_first(store: &StoreWriter, id: &str, wait: Duration) {
    let done = store.drop_acked(id);
    // An error means nothing was queued (the record was never written, or
    // the writer stopped, logged there): nothing to wait for.
    if tokio::time::timeout(wait, done).await.is_err() {
        tracing::warn!(
            run = %id,
            wait_ms = wait.as_millis(),
            "pending record removal: no reply from Redis within the step's timeout, outcome \
             unknown; running the step anyway (should the removal not land, a crash or \
             restart runs the step again)"
        );
    }
}

async fn perform(
    performers: &mut Performers,
    groups: &RunningGroups,
    job: &Job,
) -> Result<(), String> {
    match job.performed() {
        // The lane's (the pool hands it every Redis action); performed the
        // same way here, as a batch of one.
        action @ (Action::Redis { .. } | Action::Publish { .. }) => {
            let timeout = action
                .timeout_ns()
                .map_or(DEFAULT_WAIT, Duration::from_nanos);
            let batch = std::slice::from_ref(job);
            let outcome = lane::send(performers.lane.as_mut(), batch, timeout, None, None).await;
            // The record went first, on its own: a refusal is a failure.
            match outcome.into_iter().next() {
                Some(lane::Outcome::Finished(result)) => result,
                Some(lane::Outcome::NotPerformed(why)) => Err(why),
                None => Ok(()),
            }
        }
        // The engine makes every notify a publish.
        Action::Notify(_) => Err("internal: a notify was not made into its publish".to_string()),
        Action::Exec {
            command,
            timeout_ns,
        } => exec::run(
            command,
            Duration::from_nanos(*timeout_ns),
            &job.event,
            groups,
        )
        .await
        .map_err(|e: ExecError| e.to_string()),
        Action::Can(frame) => performers
            .can
            .send(frame)
            .map_err(|e| format!("can {}: {e}", frame.iface)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64) -> Job {
        use rulecore::bundle::{Payload, Rule, Step};
        let step = Step::new(Action::redis("list", "x"), 0);
        let rule = Rule::new("r", "t.toml", vec![], vec![step]);
        let payload = Arc::new(Payload::new("t", vec![rule], vec![], vec![]));
        Job {
            id: JobId(id),
            run: "r#0-1".into(),
            rule: "r".into(),
            step: 0,
            pass: 0,
            action: ruled_engine::StepAction::new(payload, 0, 0).expect("step 0"),
            computed: None,
            event: Arc::default(),
            drop_record: None,
            guard: None,
            when_read: None,
        }
    }

    /// `v1.status`'s `busy` and `queue` count the Redis lane: the batch it
    /// is sending as busy, the actions behind it as queued.
    #[test]
    fn the_load_counts_the_redis_lane() {
        let config = PoolConfig {
            workers: 2,
            queue: 4,
        };
        let mut shared = Shared {
            idle: 1,
            ..Shared::default()
        };
        shared.queue.push_back(Handed {
            job: job(1),
            waited: true,
        });
        assert_eq!(
            shared.load(config),
            (1, 1),
            "one worker busy, one job queued"
        );
        // The lane sends a batch of 3 while 2 more wait for the next.
        shared.lane_sending = true;
        shared.lane_held = 5;
        for id in 2..4 {
            shared.lane.push_back(Handed {
                job: job(id),
                waited: true,
            });
        }
        assert_eq!(shared.load(config), (1 + 3, 1 + 2));
    }
}
