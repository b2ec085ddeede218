//! The Redis side of the service: connections with backoff, the pub/sub
//! subscription set, state seeding and re-reads (DESIGN.md 6.6), the pending
//! store and the counters hash (6.5, 6.7), written in order by one task.

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink, PubSubStream};
use rulecore::bundle::StatePair;
use rulecore::topic::{Subscription, TopicPattern};
use ruled_engine::PENDING_HASH;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The counters hash (DESIGN.md 6.7).
pub const COUNTERS_HASH: &str = "extensions";
/// Per-rule statistics (DESIGN.md 6.7): one field per rule name, a JSON
/// object `{"runs", "last-fire", "errors", "active"}`.
pub const RULE_STATS_HASH: &str = "extensions:rules";

/// First and longest wait between connection attempts.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one command may take before it counts as failed.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Exponential backoff between attempts, capped at [`BACKOFF_MAX`].
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: BACKOFF_MIN }
    }
}

impl Backoff {
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        delay
    }
}

/// Opens the command connection, retrying with backoff until it works;
/// `ConnectionManager` then reconnects by itself after a lost connection.
pub async fn connect_manager(client: &redis::Client) -> ConnectionManager {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_min_delay(BACKOFF_MIN)
        .set_max_delay(BACKOFF_MAX)
        .set_number_of_retries(6);
    let mut backoff = Backoff::default();
    loop {
        // The manager retries its first connection silently; probe with a
        // plain connection first so every failed attempt is logged.
        let probe =
            tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
                .await
                .unwrap_or_else(|_| {
                    Err(redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "connection attempt timed out",
                    )))
                });
        let attempt = match probe {
            Ok(_) => ConnectionManager::new_with_config(client.clone(), config.clone()).await,
            Err(e) => Err(e),
        };
        match attempt {
            Ok(manager) => return manager,
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(
                    "cannot connect to redis ({e}); retrying in {}ms",
                    delay.as_millis()
                );
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Runs `cmd`, and once more if the first attempt met a dropped
/// connection: one that was already gone when the command went out (the
/// server closed it: Redis' `timeout` for idle clients, `CLIENT KILL`, a
/// restart). `ConnectionManager` starts a new connection on such an error,
/// so one more attempt normally lands.
pub async fn query<T: redis::FromRedisValue>(
    con: &mut ConnectionManager,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    match cmd.query_async(con).await {
        Err(e) if e.is_connection_dropped() => {
            tracing::debug!("command connection was closed ({e}); trying once more");
            cmd.query_async(con).await
        }
        other => other,
    }
}

/// [`query`] for a pipeline.
async fn query_pipe<T: redis::FromRedisValue>(
    con: &mut ConnectionManager,
    pipe: &redis::Pipeline,
) -> redis::RedisResult<T> {
    match pipe.query_async(con).await {
        Err(e) if e.is_connection_dropped() => {
            tracing::debug!("command connection was closed ({e}); trying once more");
            pipe.query_async(con).await
        }
        other => other,
    }
}

/// Whether `error` is about reaching Redis (connection lost, refused, timed
/// out), as opposed to an answer Redis gave (WRONGTYPE, a value that is not
/// UTF-8). After a transport error the value is unknown until the next read
/// succeeds; after an answer it is known not to be a usable string.
fn is_transport(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
}

/// `error` as a log line reads it: a server error as Redis words it
/// (`WRONGTYPE Operation against a key holding the wrong kind of value`,
/// as redis-cli shows it), anything else as the client describes it.
pub fn describe(error: &redis::RedisError) -> String {
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => error.to_string(),
    }
}

/// PINGs the command connection until it answers (a few tries), so that a
/// connection broken by a Redis restart is replaced before actions use it.
async fn wake_commands(con: &mut ConnectionManager) {
    let mut backoff = Backoff::default();
    for _ in 0..5 {
        match redis::cmd("PING").query_async::<String>(con).await {
            Ok(_) => return,
            Err(e) => {
                tracing::debug!("command connection not ready yet: {e}");
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
    }
    tracing::warn!("the command connection still fails after the pub/sub reconnect");
}

/// What to subscribe to: exact channels (SUBSCRIBE) and globs (PSUBSCRIBE).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscriptions {
    pub channels: BTreeSet<String>,
    pub patterns: BTreeSet<String>,
}

impl Subscriptions {
    /// The subscriptions for the live rules' `on` + `cancel-on` patterns
    /// (DESIGN.md 6.1) and the watched state hashes (6.6).
    ///
    /// Redis delivers a message once per matching subscription, so a topic
    /// covered by two subscriptions would reach the engine twice. Channels
    /// and globs that a broader glob already covers are therefore left out:
    /// every topic matches at most one subscription.
    pub fn compute(patterns: &[TopicPattern], state_hashes: &BTreeSet<String>) -> Self {
        let any = patterns.iter().any(|p| matches!(p, TopicPattern::Any));
        let mut prefixes: Vec<&str> = patterns
            .iter()
            .filter_map(|p| match p {
                TopicPattern::Prefix(prefix) => Some(prefix.as_str()),
                _ => None,
            })
            .collect();
        prefixes.sort_unstable();
        prefixes.dedup();
        // Keep only prefixes no shorter kept prefix covers; sorted order puts
        // a covering prefix right before the ones it covers.
        let mut kept: Vec<&str> = Vec::new();
        for prefix in prefixes {
            if !kept.iter().any(|k| prefix.starts_with(k)) {
                kept.push(prefix);
            }
        }
        let covered = |pattern: &TopicPattern| match pattern {
            TopicPattern::Any => false,
            TopicPattern::Prefix(prefix) => !kept.contains(&prefix.as_str()),
            TopicPattern::Exact(topic) => kept.iter().any(|k| topic.starts_with(k)),
        };
        let mut out = Self::default();
        let everything = [TopicPattern::Any];
        let live: Vec<&TopicPattern> = if any {
            everything.iter().collect()
        } else {
            patterns.iter().filter(|p| !covered(p)).collect()
        };
        for pattern in live {
            match pattern.subscription() {
                Subscription::Channel(channel) => out.channels.insert(channel),
                Subscription::Pattern(glob) => out.patterns.insert(glob),
            };
        }
        out.channels.extend(state_hashes.iter().cloned());
        out
    }

    pub fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.patterns.is_empty()
    }
}

/// Opens a pub/sub connection and subscribes to `subs`.
pub async fn open_pubsub(
    client: &redis::Client,
    subs: &Subscriptions,
) -> redis::RedisResult<(PubSubSink, PubSubStream)> {
    let pubsub = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub())
        .await
        .map_err(|_| {
            redis::RedisError::from((
                redis::ErrorKind::Io,
                "timed out opening the pub/sub connection",
            ))
        })??;
    let (mut sink, stream) = pubsub.split();
    if !subs.channels.is_empty() {
        let channels: Vec<&str> = subs.channels.iter().map(String::as_str).collect();
        sink.subscribe(channels).await?;
    }
    if !subs.patterns.is_empty() {
        let patterns: Vec<&str> = subs.patterns.iter().map(String::as_str).collect();
        sink.psubscribe(patterns).await?;
    }
    Ok((sink, stream))
}

/// Waits for the next pub/sub message; `None` when the connection is gone.
pub async fn next_message(stream: &mut PubSubStream) -> Option<redis::Msg> {
    stream.next().await
}

/// Reads every watched pair, one `HMGET` per hash (DESIGN.md 6.6). Returns
/// (index into `pairs`, value) for the fields that exist.
///
/// A hash that Redis refuses to read (another service stored a string
/// under that key: WRONGTYPE; a value that is not UTF-8) is logged, naming
/// it, and its fields stay unknown (`""`): one bad key must not keep every
/// rule from running. A lost connection is an error.
pub async fn seed_state(
    con: &mut ConnectionManager,
    pairs: &[StatePair],
) -> redis::RedisResult<Vec<(usize, String)>> {
    let mut by_hash: BTreeMap<&str, Vec<(usize, &str)>> = BTreeMap::new();
    for (index, pair) in pairs.iter().enumerate() {
        by_hash
            .entry(pair.hash.as_str())
            .or_default()
            .push((index, pair.field.as_str()));
    }
    let mut out = Vec::new();
    for (hash, fields) in by_hash {
        let mut command = redis::cmd("HMGET");
        command.arg(hash);
        for (_, field) in &fields {
            command.arg(*field);
        }
        let values: Vec<Option<String>> = match query(con, &command).await {
            Ok(values) => values,
            Err(e) if !is_transport(&e) => {
                tracing::warn!(
                    hash = %hash,
                    error = %describe(&e),
                    "cannot read the state hash; its fields read as \"\""
                );
                continue;
            }
            Err(e) => return Err(e),
        };
        for ((index, _), value) in fields.iter().zip(values) {
            if let Some(value) = value {
                out.push((*index, value));
            }
        }
    }
    Ok(out)
}

/// Reads the pending store (`HGETALL extensions:pending`) for replay.
pub async fn read_pending(
    con: &mut ConnectionManager,
) -> redis::RedisResult<Vec<(String, Vec<u8>)>> {
    query(con, redis::cmd("HGETALL").arg(PENDING_HASH)).await
}

/// One write to the pending store or the counters hash.
#[derive(Debug)]
pub enum StoreOp {
    Put {
        id: String,
        json: String,
    },
    /// A `Put` of a record that may already be in the store (written again
    /// after a reconnect or a clock jump). Refused when the queue is full
    /// like a `Put`, but then the record's `Drop` is still sent: the
    /// earlier write may stand, and a record left behind would run its step
    /// again at the next start.
    Rewrite {
        id: String,
        json: String,
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
                Self::Put { id, json } | Self::Rewrite { id, json } => id.len() + json.len(),
                Self::Drop { id, .. } => id.len(),
                Self::Counters(fields) => fields.iter().map(|(f, v)| f.len() + v.len()).sum(),
                Self::RuleStats(fields) | Self::AllRuleStats(fields) => {
                    fields.iter().map(|(f, v)| f.len() + v.len()).sum()
                }
                Self::Wake | Self::Flush(_) => 0,
            }
    }
}

/// How many bytes of writes may wait for Redis (DESIGN.md 1: 48 MB for the
/// whole service). Past it, new records and counter updates are refused
/// (see [`StoreWriter::send`]); removals always queue.
pub const STORE_QUEUE_LIMIT: usize = 8 * 1024 * 1024;

/// The one task that writes the pending store and the counters, in the
/// order the driver issued them, so a record's put never lands after its
/// own drop (DESIGN.md 6.5).
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
            StoreOp::Put { id, .. } if full => {
                overflow.unwritten.insert(id.clone());
                overflow.note_refused(self.limit);
                tracing::debug!(run = %id, "pending record not written: store queue full");
                return false;
            }
            StoreOp::Rewrite { id, .. } if full => {
                overflow.note_refused(self.limit);
                tracing::debug!(run = %id, "pending record not written again: store queue full");
                return false;
            }
            StoreOp::Counters(_) | StoreOp::RuleStats(_) | StoreOp::AllRuleStats(_) if full => {
                overflow.note_refused(self.limit);
                return false;
            }
            StoreOp::Put { id, .. } | StoreOp::Rewrite { id, .. } => {
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
            StoreOp::Put { id, json } | StoreOp::Rewrite { id, json } => {
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

/// What the state reader is asked to do.
#[derive(Debug)]
enum Reread {
    /// `HGET hash field` after a change notification.
    Field {
        index: usize,
        hash: String,
        field: String,
    },
    /// Every watched pair again (after a reconnect: notifications were
    /// missed); a field that is gone reads `""`.
    All,
}

/// Re-reads watched fields after change notifications, one request at a
/// time in arrival order, and hands (index, value) back to the driver.
#[derive(Debug, Clone)]
pub struct StateReader {
    tx: mpsc::UnboundedSender<Reread>,
}

impl StateReader {
    /// `pairs` are the bundle's `state_pairs` (indices refer to them).
    pub fn start(
        con: ConnectionManager,
        pairs: Vec<StatePair>,
        values: mpsc::UnboundedSender<(usize, String)>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(state_task(con, pairs, rx, values));
        (Self { tx }, handle)
    }

    /// Asks for `HGET hash field`; the answer arrives as `(index, value)`.
    pub fn reread(&self, index: usize, hash: &str, field: &str) {
        self.request(Reread::Field {
            index,
            hash: hash.to_string(),
            field: field.to_string(),
        });
    }

    /// Asks for every watched pair again (one `HMGET` per hash); the answers
    /// arrive as `(index, value)`, `""` for a field that does not exist.
    pub fn reread_all(&self) {
        self.request(Reread::All);
    }

    fn request(&self, request: Reread) {
        if let Err(e) = self.tx.send(request) {
            tracing::error!("the state reader has stopped; {:?} not re-read", e.0);
        }
    }
}

async fn state_task(
    mut con: ConnectionManager,
    pairs: Vec<StatePair>,
    mut rx: mpsc::UnboundedReceiver<Reread>,
    values: mpsc::UnboundedSender<(usize, String)>,
) {
    while let Some(request) = rx.recv().await {
        let read = match request {
            Reread::Field { index, hash, field } => {
                let value: redis::RedisResult<Option<String>> =
                    query(&mut con, redis::cmd("HGET").arg(&hash).arg(&field)).await;
                match value {
                    // A deleted field is unknown again: `""`.
                    Ok(value) => vec![(index, value.unwrap_or_default())],
                    // Redis answered, but not with a string (another service
                    // stored a non-hash under the key: WRONGTYPE): unknown,
                    // `""`, as at start (DESIGN.md 6.6, `seed_state`).
                    Err(e) if !is_transport(&e) => {
                        tracing::warn!(
                            hash = %hash,
                            field = %field,
                            error = %describe(&e),
                            "cannot read the state hash; the field reads as \"\""
                        );
                        vec![(index, String::new())]
                    }
                    // Redis was not reached: the value is not known to have
                    // changed. The reconnect's full re-read settles it.
                    Err(e) => {
                        tracing::warn!(
                            hash = %hash,
                            field = %field,
                            error = %describe(&e),
                            "state re-read failed (connection); keeping the old value until the reconnect re-reads it"
                        );
                        continue;
                    }
                }
            }
            Reread::All => match seed_state(&mut con, &pairs).await {
                Ok(found) => {
                    let mut all = vec![String::new(); pairs.len()];
                    for (index, value) in found {
                        if let Some(slot) = all.get_mut(index) {
                            *slot = value;
                        }
                    }
                    all.into_iter().enumerate().collect()
                }
                Err(e) => {
                    tracing::warn!(
                        error = %describe(&e),
                        "re-reading state after the reconnect failed; keeping the old values"
                    );
                    continue;
                }
            },
        };
        for value in read {
            if values.send(value).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> TopicPattern {
        TopicPattern::parse(text).unwrap()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nothing_when_nothing_is_live() {
        let subs = Subscriptions::compute(&[], &BTreeSet::new());
        assert!(subs.is_empty());
    }

    #[test]
    fn exact_topics_subscribe_and_globs_psubscribe() {
        let subs = Subscriptions::compute(
            &[p("alarm.triggered"), p("button.*"), p("a?[b].*")],
            &set(&["vehicle"]),
        );
        assert_eq!(subs.channels, set(&["ev:alarm.triggered", "vehicle"]));
        assert_eq!(subs.patterns, set(&["ev:a\\?\\[b\\].*", "ev:button.*"]));
    }

    #[test]
    fn covered_subscriptions_are_left_out() {
        let subs = Subscriptions::compute(
            &[
                p("button.brake.*"),
                p("button.*"),
                p("button.seat"),
                p("buttons.x"),
            ],
            &BTreeSet::new(),
        );
        assert_eq!(subs.patterns, set(&["ev:button.*"]));
        assert_eq!(subs.channels, set(&["ev:buttons.x"]));

        let any = Subscriptions::compute(&[p("x"), p("*"), p("y.*")], &set(&["vehicle"]));
        assert_eq!(any.patterns, set(&["ev:*"]));
        assert_eq!(any.channels, set(&["vehicle"]));
    }

    #[test]
    fn backoff_doubles_to_a_cap() {
        let mut backoff = Backoff::default();
        let delays: Vec<u128> = (0..8).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    }
}
