//! The ordered record store (docs/semantics.md#durability-and-replay, docs/semantics.md#counters): the pending records and
//! the counters hashes, written in the driver's order by one task, and the
//! pending store read for replay.

use crate::connection::{query, query_pipe, wake_commands};
use redis::aio::ConnectionManager;
use ruled_engine::{RecordWrite, PENDING_HASH};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{mpsc, oneshot};

/// The counters hash (docs/semantics.md#counters).
pub const COUNTERS_HASH: &str = "extensions";
/// Per-rule statistics (docs/semantics.md#counters): one field per rule name, a JSON
/// object `{"runs", "last-fire", "errors", "active"}`.
pub const RULE_STATS_HASH: &str = "extensions:rules";

/// Reads the pending store (`HGETALL extensions:pending`) for replay.
pub async fn read_pending(
    con: &mut ConnectionManager,
) -> redis::RedisResult<Vec<(String, Vec<u8>)>> {
    query(con, redis::cmd("HGETALL").arg(PENDING_HASH)).await
}

/// One write to the pending store or the counters hash.
#[derive(Debug)]
pub enum StoreOp {
    /// `HSET extensions:pending id json`. Refused when the queue is full;
    /// the record's `Drop` is then skipped for a [`RecordWrite::First`],
    /// and still sent for a [`RecordWrite::Again`] (written again after a
    /// reconnect or a clock jump): the earlier write may stand, and a
    /// record left behind would run its step again at the next start.
    Put {
        id: String,
        json: String,
        write: RecordWrite,
    },
    /// `HDEL extensions:pending id`; `ack` (if any) is answered once the
    /// removal was performed (or failed, logged), or at once when there is
    /// nothing to remove (the record's write was refused).
    Drop {
        id: String,
        ack: Option<oneshot::Sender<()>>,
    },
    /// `HSET extensions f1 v1 f2 v2 ...`
    Counters(Vec<(&'static str, String)>),
    /// `HSET extensions:rules name json ...`
    RuleStats(Vec<(String, String)>),
    /// `DEL extensions:rules`, then `HSET extensions:rules name json ...`:
    /// the hash holds exactly these rules (none of an earlier bundle's).
    AllRuleStats(Vec<(String, String)>),
    /// PING the command connection until it answers (a few tries), so a
    /// connection broken by a Redis restart is replaced before the writes
    /// queued after this one (and the actions) meet it.
    Wake,
    /// Answers once every earlier op was performed.
    Flush(oneshot::Sender<()>),
}

impl StoreOp {
    /// Roughly what the op holds in memory while it waits in the queue.
    fn cost(&self) -> usize {
        const OVERHEAD: usize = 64;
        OVERHEAD
            + match self {
                Self::Put { id, json, .. } => id.len() + json.len(),
                Self::Drop { id, .. } => id.len(),
                Self::Counters(fields) => fields.iter().map(|(f, v)| f.len() + v.len()).sum(),
                Self::RuleStats(fields) | Self::AllRuleStats(fields) => {
                    fields.iter().map(|(f, v)| f.len() + v.len()).sum()
                }
                Self::Wake | Self::Flush(_) => 0,
            }
    }
}

/// How many bytes of writes may wait for Redis (README.md#what-this-is: 48 MB for the
/// whole service). Past it, new records and counter updates are refused
/// (see [`StoreWriter::send`]); removals always queue.
pub const STORE_QUEUE_LIMIT: usize = 8 * 1024 * 1024;

/// The one task that writes the pending store and the counters, in the
/// order the driver issued them, so a record's put never lands after its
/// own drop (docs/semantics.md#durability-and-replay).
///
/// The queue is bounded by [`STORE_QUEUE_LIMIT`] bytes, so a long Redis
/// outage cannot eat the memory budget. Past the limit a `Put` is refused
/// (the step still runs, without restart protection) and so are counter
/// writes (the driver writes them in full once it can again); a `Drop` is
/// always accepted, since a record left behind would run its step again at
/// the next start, except the drop of a record whose put was refused: there
/// is nothing to remove.
#[derive(Debug, Clone)]
pub struct StoreWriter {
    tx: mpsc::UnboundedSender<StoreOp>,
    /// Bytes waiting in the queue; the task subtracts what it takes.
    queued: Arc<AtomicUsize>,
    limit: usize,
    overflow: Arc<Mutex<Overflow>>,
}

/// What the writer refused while its queue was full.
#[derive(Debug, Default)]
struct Overflow {
    /// Runs whose latest `Put` was refused: their `Drop` is skipped.
    unwritten: HashSet<String>,
    /// Writes refused since the queue last had room.
    refused: u64,
}

impl StoreWriter {
    pub fn start(con: ConnectionManager) -> (Self, tokio::task::JoinHandle<()>) {
        Self::with_limit(con, STORE_QUEUE_LIMIT)
    }

    /// [`StoreWriter::start`] with a queue of at most `limit` bytes.
    pub fn with_limit(con: ConnectionManager, limit: usize) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let handle = tokio::spawn(store_task(con, rx, Arc::clone(&queued)));
        let writer = Self {
            tx,
            queued,
            limit,
            overflow: Arc::default(),
        };
        (writer, handle)
    }

    /// Queues `op` without waiting. Returns whether it was accepted; a
    /// refused op was logged with what it costs.
    pub fn send(&self, op: StoreOp) -> bool {
        let cost = op.cost();
        let mut overflow = self.overflow.lock().unwrap_or_else(PoisonError::into_inner);
        let full = self.queued.load(Ordering::Relaxed) + cost > self.limit;
        match &op {
            StoreOp::Put {
                id,
                write: RecordWrite::First,
                ..
            } if full => {
                overflow.unwritten.insert(id.clone());
                overflow.note_refused(self.limit);
                tracing::debug!(run = %id, "pending record not written: store queue full");
                return false;
            }
            StoreOp::Put {
                id,
                write: RecordWrite::Again,
                ..
            } if full => {
                overflow.note_refused(self.limit);
                tracing::debug!(run = %id, "pending record not written again: store queue full");
                return false;
            }
            StoreOp::Counters(_) | StoreOp::RuleStats(_) | StoreOp::AllRuleStats(_) if full => {
                overflow.note_refused(self.limit);
                return false;
            }
            StoreOp::Put { id, .. } => {
                overflow.unwritten.remove(id);
            }
            StoreOp::Drop { id, .. } if overflow.unwritten.remove(id) => return true,
            _ => {}
        }
        if !full && overflow.refused > 0 {
            tracing::info!(
                refused = overflow.refused,
                "the store queue has room again; writes refused meanwhile are lost"
            );
            overflow.refused = 0;
        }
        drop(overflow);
        self.queued.fetch_add(cost, Ordering::Relaxed);
        if self.tx.send(op).is_err() {
            tracing::error!(
                "the store writer has stopped; a pending-store or counter write was lost"
            );
            return false;
        }
        true
    }

    /// Queues the removal of a pending record; the answer arrives once it
    /// was performed (or failed, logged), and at once (the sender dropped)
    /// when there is nothing to remove. The removal goes through the same
    /// ordered queue as the record's own write, so it cannot overtake it.
    pub fn drop_acked(&self, id: &str) -> oneshot::Receiver<()> {
        let (ack, done) = oneshot::channel();
        self.send(StoreOp::Drop {
            id: id.to_string(),
            ack: Some(ack),
        });
        done
    }

    /// Waits until everything sent so far was written (or failed).
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        self.send(StoreOp::Flush(done));
        if wait.await.is_err() {
            tracing::error!("the store writer stopped before flushing");
        }
    }
}

impl Overflow {
    fn note_refused(&mut self, limit: usize) {
        if self.refused == 0 {
            tracing::error!(
                limit_kib = limit / 1024,
                "store queue full (Redis slow or unreachable): new pending records are not \
                 written (their steps still run, without restart protection) and counter \
                 updates wait until the queue drains"
            );
        }
        self.refused += 1;
    }
}

/// At most this many writes go out in one pipeline.
const STORE_BATCH: usize = 512;

async fn store_task(
    mut con: ConnectionManager,
    mut rx: mpsc::UnboundedReceiver<StoreOp>,
    queued: Arc<AtomicUsize>,
) {
    let mut batch = Vec::new();
    while let Some(op) = rx.recv().await {
        // Whatever queued up meanwhile goes out in one pipeline: one round
        // trip for a burst (one event parking many runs), same order.
        let mut next = Some(op);
        while let Some(op) = next.take() {
            queued.fetch_sub(op.cost(), Ordering::Relaxed);
            match op {
                StoreOp::Wake => {
                    write_batch(&mut con, &mut batch).await;
                    wake_commands(&mut con).await;
                }
                op => batch.push(op),
            }
            if batch.len() < STORE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        write_batch(&mut con, &mut batch).await;
    }
}

/// What a pipelined write was, to say what its failure costs.
enum Written {
    Put(String),
    Drop(String),
    Counters,
    RuleStats,
}

impl Written {
    fn report(&self, error: &redis::RedisError) {
        match self {
            Self::Put(id) => tracing::error!(
                run = %id,
                "pending record not written ({error}): the step still runs, without restart protection"
            ),
            Self::Drop(id) => tracing::error!(
                run = %id,
                "pending record not removed ({error}): its step will run again at the next start"
            ),
            Self::Counters => tracing::warn!("counters not written to `{COUNTERS_HASH}`: {error}"),
            Self::RuleStats => {
                tracing::warn!("rule statistics not written to `{RULE_STATS_HASH}`: {error}")
            }
        }
    }
}

/// Performs `batch` in order as one pipeline, then answers its flushes.
async fn write_batch(con: &mut ConnectionManager, batch: &mut Vec<StoreOp>) {
    let mut pipe = redis::pipe();
    let mut written = Vec::with_capacity(batch.len());
    let mut flushed = Vec::new();
    for op in batch.drain(..) {
        match op {
            StoreOp::Put { id, json, .. } => {
                pipe.cmd("HSET").arg(PENDING_HASH).arg(&id).arg(json);
                written.push(Written::Put(id));
            }
            StoreOp::Drop { id, ack } => {
                pipe.cmd("HDEL").arg(PENDING_HASH).arg(&id);
                written.push(Written::Drop(id));
                flushed.extend(ack);
            }
            StoreOp::Counters(fields) if !fields.is_empty() => {
                hset(&mut pipe, COUNTERS_HASH, fields);
                written.push(Written::Counters);
            }
            StoreOp::RuleStats(fields) if !fields.is_empty() => {
                hset(&mut pipe, RULE_STATS_HASH, fields);
                written.push(Written::RuleStats);
            }
            StoreOp::AllRuleStats(fields) => {
                pipe.cmd("DEL").arg(RULE_STATS_HASH);
                written.push(Written::RuleStats);
                if !fields.is_empty() {
                    hset(&mut pipe, RULE_STATS_HASH, fields);
                    written.push(Written::RuleStats);
                }
            }
            StoreOp::Counters(_) | StoreOp::RuleStats(_) | StoreOp::Wake => {}
            StoreOp::Flush(done) => flushed.push(done),
        }
    }
    if !written.is_empty() {
        // Each reply on its own, so one failed write is reported as itself.
        let replies: redis::RedisResult<Vec<redis::RedisResult<redis::Value>>> =
            query_pipe(con, pipe.ignore_errors()).await;
        match replies {
            Ok(replies) => {
                for (what, reply) in written.iter().zip(replies) {
                    if let Err(e) = reply {
                        what.report(&e);
                    }
                }
            }
            Err(e) => {
                for what in &written {
                    what.report(&e);
                }
            }
        }
    }
    for done in flushed {
        // The driver may have given up waiting; nothing to report.
        let _ = done.send(());
    }
}

/// Appends `HSET hash f1 v1 f2 v2 ...` to `pipe` (`fields` not empty:
/// HSET with no field is an error).
fn hset<F: redis::ToRedisArgs>(pipe: &mut redis::Pipeline, hash: &str, fields: Vec<(F, String)>) {
    let command = pipe.cmd("HSET").arg(hash);
    for (field, value) in fields {
        command.arg(field).arg(value);
    }
}
