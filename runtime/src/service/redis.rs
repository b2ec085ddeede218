//! The Redis side of the service: connections with backoff, the pub/sub
//! subscription set, state seeding and re-reads (DESIGN.md 6.6), the pending
//! store and the counters hash (6.5, 6.7), written in order by one task.

use crate::engine::PENDING_HASH;
use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink, PubSubStream};
use rulecore::bundle::StatePair;
use rulecore::topic::{Subscription, TopicPattern};
use std::collections::{BTreeMap, BTreeSet};
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

/// PINGs the command connection until it answers (a few tries), so that a
/// connection broken by a Redis restart is replaced before actions use it.
pub async fn wake_commands(con: &mut ConnectionManager) {
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
        let values: Vec<Option<String>> = command.query_async(con).await?;
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
    let fields: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
        .arg(PENDING_HASH)
        .query_async(con)
        .await?;
    Ok(fields)
}

/// One write to the pending store or the counters hash.
#[derive(Debug)]
pub enum StoreOp {
    Put {
        id: String,
        json: String,
    },
    Drop {
        id: String,
    },
    /// `HSET extensions f1 v1 f2 v2 ...`
    Counters(Vec<(&'static str, String)>),
    /// `HSET extensions:rules name json ...`
    RuleStats(Vec<(String, String)>),
    /// Answers once every earlier op was performed.
    Flush(oneshot::Sender<()>),
}

/// The one task that writes the pending store and the counters, in the
/// order the driver issued them, so a record's put never lands after its
/// own drop (DESIGN.md 6.5).
#[derive(Debug, Clone)]
pub struct StoreWriter {
    tx: mpsc::UnboundedSender<StoreOp>,
}

impl StoreWriter {
    pub fn start(con: ConnectionManager) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(store_task(con, rx));
        (Self { tx }, handle)
    }

    pub fn send(&self, op: StoreOp) {
        if self.tx.send(op).is_err() {
            tracing::error!(
                "the store writer has stopped; a pending-store or counter write was lost"
            );
        }
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

/// At most this many writes go out in one pipeline.
const STORE_BATCH: usize = 512;

async fn store_task(mut con: ConnectionManager, mut rx: mpsc::UnboundedReceiver<StoreOp>) {
    let mut batch = Vec::new();
    while let Some(op) = rx.recv().await {
        // Whatever queued up meanwhile goes out in one pipeline: one round
        // trip for a burst (one event parking many runs), same order.
        batch.push(op);
        while batch.len() < STORE_BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
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
            StoreOp::Put { id, json } => {
                pipe.cmd("HSET").arg(PENDING_HASH).arg(&id).arg(json);
                written.push(Written::Put(id));
            }
            StoreOp::Drop { id } => {
                pipe.cmd("HDEL").arg(PENDING_HASH).arg(&id);
                written.push(Written::Drop(id));
            }
            StoreOp::Counters(fields) if !fields.is_empty() => {
                let command = pipe.cmd("HSET").arg(COUNTERS_HASH);
                for (field, value) in fields {
                    command.arg(field).arg(value);
                }
                written.push(Written::Counters);
            }
            StoreOp::RuleStats(fields) if !fields.is_empty() => {
                let command = pipe.cmd("HSET").arg(RULE_STATS_HASH);
                for (field, value) in fields {
                    command.arg(field).arg(value);
                }
                written.push(Written::RuleStats);
            }
            StoreOp::Counters(_) | StoreOp::RuleStats(_) => {}
            StoreOp::Flush(done) => flushed.push(done),
        }
    }
    if !written.is_empty() {
        // Each reply on its own, so one failed write is reported as itself.
        let replies: redis::RedisResult<Vec<redis::RedisResult<redis::Value>>> =
            pipe.ignore_errors().query_async(con).await;
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

/// Re-reads watched fields after change notifications, one at a time in
/// arrival order, and hands (index, value) back to the driver.
#[derive(Debug, Clone)]
pub struct StateReader {
    tx: mpsc::UnboundedSender<(usize, String, String)>,
}

impl StateReader {
    pub fn start(
        con: ConnectionManager,
        values: mpsc::UnboundedSender<(usize, String)>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(state_task(con, rx, values));
        (Self { tx }, handle)
    }

    /// Asks for `HGET hash field`; the answer arrives as `(index, value)`.
    pub fn reread(&self, index: usize, hash: &str, field: &str) {
        if self
            .tx
            .send((index, hash.to_string(), field.to_string()))
            .is_err()
        {
            tracing::error!(hash, field, "the state reader has stopped");
        }
    }
}

async fn state_task(
    mut con: ConnectionManager,
    mut rx: mpsc::UnboundedReceiver<(usize, String, String)>,
    values: mpsc::UnboundedSender<(usize, String)>,
) {
    while let Some((index, hash, field)) = rx.recv().await {
        let value: redis::RedisResult<Option<String>> = redis::cmd("HGET")
            .arg(&hash)
            .arg(&field)
            .query_async(&mut con)
            .await;
        match value {
            // A deleted field is unknown again: `""`.
            Ok(value) => {
                if values.send((index, value.unwrap_or_default())).is_err() {
                    return;
                }
            }
            Err(e) => tracing::warn!(
                hash,
                field,
                "state re-read failed, keeping the old value: {e}"
            ),
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
