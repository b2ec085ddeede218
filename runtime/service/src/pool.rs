//! The worker pool (docs/semantics.md#worker-pool-and-actions): `workers` tasks behind a bounded queue,
//! admitting jobs as [`PoolConfig::admit`] says (the simulator's virtual
//! pool follows the same rule). A job that finds the queue full, or the
//! pool stopping, is refused at once: [`Pool::submit`] never waits. Every
//! job's fate comes back to the driver on one channel as [`Report`]s, and
//! so does room opening in a pool that was full ([`Report::Room`]: the
//! engine's due backlog waits for it, docs/semantics.md#due-steps-the-pool-refused).

use crate::can::CanSockets;
use crate::connection::{describe, is_definite_failure, query};
use crate::exec::{self, ExecError, RunningGroups};
use crate::record_store::StoreWriter;
use rulecore::bundle::{Action, Text};
use ruled_engine::pool::Admission;
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
    /// The job was still queued when the pool stopped: it never ran.
    Abandoned(JobId),
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
    /// For `redis` actions (one LPUSH each). `None` in tests of the other kinds.
    pub redis: Option<redis::aio::ConnectionManager>,
    pub can: CanSockets,
    /// Removes a job's pending record before its action starts. `None` in
    /// tests without Redis (a job's `drop_record` is then ignored).
    pub store: Option<StoreWriter>,
}

impl std::fmt::Debug for Performers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Performers")
            .field("redis", &self.redis.is_some())
            .field("can", &self.can)
            .field("store", &self.store.is_some())
            .finish()
    }
}

/// A job handed over, and whether it had to wait for a busy worker.
#[derive(Debug)]
struct Handed {
    job: Job,
    waited: bool,
}

#[derive(Debug, Default)]
struct Shared {
    queue: VecDeque<Handed>,
    /// Workers waiting for a job (woken or about to be).
    idle: usize,
    stopping: bool,
    /// Full since the last [`Report::Room`]: the next worker that makes
    /// room reports it.
    full: bool,
}

impl Shared {
    /// Submissions accepted now, by [`PoolConfig::admit`]'s rule: one per
    /// idle worker and free queue slot.
    fn room(&self, config: PoolConfig) -> usize {
        if self.stopping {
            return 0;
        }
        (self.idle + config.queue).saturating_sub(self.queue.len())
    }

    /// Whether a worker that just took a job or went idle must report
    /// room; clears the flag when it must.
    fn room_to_report(&mut self, config: PoolConfig) -> bool {
        let report = self.full && self.room(config) > 0;
        if report {
            self.full = false;
        }
        report
    }
}

#[derive(Debug)]
pub struct Pool {
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
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
    /// Starts the workers on the current tokio runtime.
    pub fn start(
        config: PoolConfig,
        performers: Performers,
        reports: mpsc::UnboundedSender<Report>,
    ) -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let wake = Arc::new(Notify::new());
        let groups = RunningGroups::default();
        let workers = (0..config.workers.max(1))
            .map(|_| {
                tokio::spawn(worker(
                    Worker {
                        shared: Arc::clone(&shared),
                        wake: Arc::clone(&wake),
                        config,
                        reports: reports.clone(),
                        groups: groups.clone(),
                    },
                    performers.clone(),
                ))
            })
            .collect();
        Self {
            shared,
            wake,
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
    /// says where an accepted one went (an idle worker, or the queue).
    pub fn try_submit(&self, job: Job) -> Result<Admission, (Refused, Job)> {
        let mut shared = lock(&self.shared);
        if shared.stopping {
            return Err((Refused::Stopping, job));
        }
        // Jobs an idle worker will take wait in the queue too, briefly.
        let admission = self.config.admit(shared.idle, shared.queue.len());
        if admission == Admission::Refused {
            shared.full = true;
            return Err((Refused::QueueFull, job));
        }
        let waited = admission == Admission::Queue;
        shared.queue.push_back(Handed { job, waited });
        if shared.room(self.config) == 0 {
            shared.full = true;
        }
        drop(shared);
        self.wake.notify_one();
        Ok(admission)
    }

    /// How many submissions the pool accepts now.
    pub fn room(&self) -> usize {
        lock(&self.shared).room(self.config)
    }

    /// Jobs waiting for a worker.
    pub fn queued(&self) -> usize {
        lock(&self.shared).queue.len()
    }

    /// Workers performing an action now, and jobs waiting for one (what
    /// `v1.status` reports, docs/operating.md#status-fields).
    pub fn load(&self) -> (usize, usize) {
        let shared = lock(&self.shared);
        let workers = self.config.workers.max(1);
        // A job an idle worker is about to take is still in the queue.
        let busy = workers.saturating_sub(shared.idle);
        (busy, shared.queue.len())
    }

    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// Stops the pool: refuses new jobs, reports queued jobs as abandoned,
    /// kills the process group of every running `exec`, and waits (at most
    /// `grace`) for the workers to report what they were doing. Returns the
    /// number of abandoned jobs.
    pub async fn stop(&mut self, grace: Duration) -> usize {
        let abandoned: Vec<Job> = {
            let mut shared = lock(&self.shared);
            shared.stopping = true;
            shared.queue.drain(..).map(|handed| handed.job).collect()
        };
        for job in &abandoned {
            // The receiver lives in the driver, which is waiting for us.
            if self.reports.send(Report::Abandoned(job.id)).is_err() {
                tracing::debug!(job = job.id.0, "pool report receiver gone");
            }
        }
        self.wake.notify_waiters();
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
            (handed, state.room_to_report(config))
        };
        if room && reports.send(Report::Room).is_err() {
            return;
        }
        let Some(Handed { job, waited }) = handed else {
            notified.await;
            lock(&shared).idle -= 1;
            continue;
        };
        if waited {
            // The start of a job that waited for a busy worker; the
            // driver said when it handed over the others.
            tracing::debug!(
                rule = %job.rule, step = job.step, pass = job.pass, run = %job.run,
                "queued action started"
            );
        }
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

/// One Redis command of an action (`LPUSH list push`, `PUBLISH channel
/// message`), waiting at most `timeout` for the reply. Only a definite
/// failure fails the action ([`is_definite_failure`]); with the outcome
/// unknown (no reply in time, a connection broken while the reply was
/// awaited) Redis may still run it, so the run goes on and the line says
/// so (docs/semantics.md#worker-pool-and-actions).
async fn redis_action(
    con: &mut redis::aio::ConnectionManager,
    [verb, key, value]: [&str; 3],
    timeout: Duration,
    job: &Job,
) -> Result<(), String> {
    // Once more when the server had closed the connection (an idle
    // timeout): the first attempt then never reached it. Should the
    // server have run it before dropping the connection, the push lands
    // twice (docs/service.md#actions).
    let command = redis::cmd(verb).arg(key).arg(value).clone();
    let reply = tokio::time::timeout(timeout, query::<i64>(con, &command)).await;
    let unknown = match reply {
        Ok(Ok(_)) => return Ok(()),
        Ok(Err(e)) if is_definite_failure(&e) => {
            return Err(format!("{verb} {key}: {}", describe(&e)));
        }
        Ok(Err(e)) => describe(&e),
        Err(_) => format!("no reply within {}ms", timeout.as_millis()),
    };
    tracing::warn!(
        rule = %job.rule, step = job.step, run = %job.run, key,
        "{verb} outcome unknown ({unknown}): Redis may still perform it; the run goes on"
    );
    Ok(())
}

async fn perform<'a>(
    performers: &mut Performers,
    groups: &RunningGroups,
    job: &'a Job,
) -> Result<(), String> {
    // The engine computed every value (docs/rules.md#computed-values): a
    // template left here would be a bug, and fails rather than sending
    // its source.
    let plain = |text: &'a Text| {
        text.plain()
            .ok_or_else(|| "internal: a value was not computed before the step ran".to_string())
    };
    let (verb, key, value, timeout_ns) = match job.performed() {
        Action::Redis {
            list,
            push,
            timeout_ns,
        } => ("LPUSH", list, plain(push)?, timeout_ns),
        Action::Publish {
            channel,
            message,
            timeout_ns,
        } => ("PUBLISH", channel, plain(message)?, timeout_ns),
        other => return perform_other(performers, groups, job, other).await,
    };
    let Some(con) = performers.redis.as_mut() else {
        return Err(format!("no redis connection for the {verb}"));
    };
    redis_action(
        con,
        [verb, key, value],
        Duration::from_nanos(*timeout_ns),
        job,
    )
    .await
}

/// The actions that are not one Redis command.
async fn perform_other(
    performers: &mut Performers,
    groups: &RunningGroups,
    job: &Job,
    action: &Action,
) -> Result<(), String> {
    match action {
        Action::Redis { .. } | Action::Publish { .. } => {
            Err("internal: a redis command reached perform_other".to_string())
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
