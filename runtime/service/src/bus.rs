//! The Librescoot bus inside `ruled` (docs/service.md#the-bus,
//! docs/sources.md): watching, reading, polling and publishing, doing
//! only what the engine decides.
//!
//! - [`Watch`]: a snapshot of what the engine says about every
//!   notification on a watched hash ([`Engine::notified`]), which the
//!   intake task consults without the engine.
//! - [`BusReader`]: a task that performs the reads the notifications,
//!   polls and reconnects ask for, one `HMGET` each, coalesced (a flood of
//!   notifications costs no memory), and hands the values back in order
//!   ([`ReadOutcome`]) for [`Engine::fields_read`] / [`Engine::written_read`];
//!   its lines about watched fields go through a log budget.
//! - [`Publisher`] and [`Publications`]: each [`ruled_engine::Effect::Publish`]
//!   (ruled_engine::Effect) queued for the Redis lane, which writes it in
//!   the same write as the pushes it sends (`crate::lane`): per event an
//!   entry of stream `events` and a message on `ev:<topic>`, and the last
//!   id added in `NS:bus-last-id`.
//! - [`start_checks`]: the stream's newest id at start (our ids stay above
//!   it) and the warning when another adapter seems to publish the bus
//!   (not when the newest entry is this ruled's own, from before a restart).

use crate::connection::{describe, is_transport, query, Query};
use crate::direct::Direct;
use crate::logging::Throttle;
use crate::namespace::Namespace;
use crate::waker_slot::WakerSlot;
use redis::aio::ConnectionManager;
use rulecore::bundle::StatePair;
use rulecore::event::Event;
use rulecore::small_str::SmallStr;
use ruled_engine::fast_hash::{FastMap, FastSet};
use ruled_engine::{BusMode, Engine, Expiry, Notified, ReadCause, SourceSet};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The stream every derived event is an entry of (docs/service.md#the-bus).
pub const STREAM: &str = "events";
/// `XADD events MAXLEN ~ 2000`.
pub const STREAM_MAXLEN: u64 = 2000;
/// Reads asked for and not started yet, beyond which they collapse into
/// one re-read of every live pair (a flood of alternating notifications).
const MAX_ASKED: usize = 1024;
/// Outcomes read and not yet taken by the driver.
const OUTCOMES: usize = 16;
/// Publish effects waiting for Redis; more are dropped, logged.
const PUBLISH_QUEUE: usize = 1024;

/// `--bus own|follow` as the flag spells it.
pub fn bus_word(mode: BusMode) -> &'static str {
    match mode {
        BusMode::Own => "own",
        BusMode::Follow => "follow",
    }
}

/// `--sources all|used` as the flag spells it.
pub fn sources_word(set: SourceSet) -> &'static str {
    match set {
        SourceSet::All => "all",
        SourceSet::Used => "used",
    }
}

/// What the engine says about the notifications of the watched hashes,
/// and the pairs it wants read now (docs/sources.md#changes).
#[derive(Debug, Clone, Default)]
pub struct Watch {
    /// The engine's watched pairs (indices below refer to them).
    pub pairs: Arc<[StatePair]>,
    /// [`Engine::live_pairs`]: seeded, re-read after a reconnect.
    pub live: Vec<usize>,
    /// The hashes whose channels are subscribed.
    pub hashes: BTreeSet<String>,
    /// Per hash, per payload, what a notification asks for (absent:
    /// [`Notified::Ignore`]), as the read it asks: handed on without a
    /// copy of its pairs.
    notify: FastMap<String, FastMap<String, Request>>,
}

impl Watch {
    /// The snapshot of `engine` for the subscribed `hashes`: every watched
    /// field of them, `cleared` and `replaced`, as [`Engine::notified`]
    /// judges them (any other payload is ignored without a read).
    pub fn of(engine: &Engine, hashes: BTreeSet<String>) -> Self {
        let pairs: Arc<[StatePair]> = engine.watched_pairs().into();
        let mut notify: FastMap<String, FastMap<String, Request>> = FastMap::default();
        for hash in &hashes {
            let names = pairs
                .iter()
                .filter(|pair| pair.hash == *hash)
                .map(|pair| pair.field.as_str())
                .chain([
                    ruled_engine::derive::CLEARED,
                    ruled_engine::derive::REPLACED,
                ]);
            let by_name = notify.entry(hash.clone()).or_default();
            for name in names {
                let asked = match engine.notified(hash, name) {
                    Notified::Ignore => continue,
                    Notified::Read(pairs) => Request::Read(pairs.into()),
                    Notified::ReadWritten(pairs) => Request::ReadWritten(pairs.into()),
                    Notified::Reread(pairs) => Request::Reread(pairs.into()),
                };
                by_name.insert(name.to_string(), asked);
            }
        }
        Self {
            pairs,
            live: engine.live_pairs(),
            hashes,
            notify,
        }
    }

    /// What `PUBLISH <hash> <payload>` asks for (`None`:
    /// [`Notified::Ignore`]).
    fn notified(&self, hash: &str, payload: &str) -> Option<&Request> {
        self.notify.get(hash).and_then(|names| names.get(payload))
    }

    /// Whether `hash` is a source's (a `cleared` on it means something):
    /// such hashes are watched even while no rule is live.
    pub fn is_source_hash(engine: &Engine, hash: &str) -> bool {
        matches!(
            engine.notified(hash, ruled_engine::derive::CLEARED),
            Notified::Reread(_)
        )
    }
}

/// What the reader read, in the order it was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    /// For [`Engine::fields_read`].
    Fields {
        cause: ReadCause,
        values: Vec<(usize, Option<String>)>,
    },
    /// For [`Engine::written_read`]: an `every` source's field, with the
    /// hash's expiry read in the same script.
    Written {
        expiry: Expiry,
        values: Vec<(usize, Option<String>)>,
    },
}

/// One read asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Request {
    /// After a notification: the notified pair first.
    Read(Arc<[usize]>),
    /// After a notification of an `every` source's field: with the
    /// hash's expiry.
    ReadWritten(Arc<[usize]>),
    /// After `replaced` or `cleared`, or a poll: each real change emits.
    Reread(Arc<[usize]>),
    /// Every live pair (a reconnect, or asks collapsed under a flood).
    All,
}

/// What makes two asks the same (the later is not queued again).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Read(usize),
    Reread(String),
}

/// The asks not started yet, in order; each key at most once since the
/// last barrier (`cleared`/`replaced`) of its hash.
#[derive(Debug, Default)]
struct Asked {
    queue: VecDeque<(u64, Request)>,
    keys: FastMap<Key, u64>,
    next: u64,
    /// Collapsed into [`Request::All`] since the last log line.
    collapsed: u64,
    /// The reader task's, while it waits for an ask: taken and woken by the
    /// next ask (under this lock, so the two never miss each other).
    waiting: WakerSlot,
}

impl Asked {
    fn push(&mut self, key: Option<Key>, request: Request) {
        if let Some(key) = &key {
            if self.keys.contains_key(key) {
                return;
            }
        }
        if self.queue.len() >= MAX_ASKED {
            // A flood: one re-read of everything live says as much.
            self.queue.clear();
            self.keys.clear();
            self.collapsed += 1;
            self.queue.push_back((self.next, Request::All));
            self.next += 1;
            return;
        }
        if let Some(key) = key {
            self.keys.insert(key, self.next);
        }
        self.queue.push_back((self.next, request));
        self.next += 1;
    }

    /// Drops the keys of `hash` (its reads, and its other barrier): asks
    /// after a `cleared` or `replaced` are queued behind it.
    fn barrier(&mut self, hash: &str, pairs: &[StatePair]) {
        self.keys.retain(|key, _| match key {
            Key::Read(pair) => pairs.get(*pair).is_none_or(|p| p.hash != hash),
            Key::Reread(h) => h != hash,
        });
    }

    fn pop(&mut self) -> Option<Request> {
        let (seq, request) = self.queue.pop_front()?;
        self.keys.retain(|_, at| *at != seq);
        Some(request)
    }
}

#[derive(Debug, Default)]
struct ReaderShared {
    asked: Mutex<Asked>,
    watch: Mutex<Arc<Watch>>,
}

impl ReaderShared {
    fn asked(&self) -> MutexGuard<'_, Asked> {
        // Never held across an await or a panic-prone call.
        self.asked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn watch(&self) -> Arc<Watch> {
        Arc::clone(&self.watch.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Performs the reads of the bus and of `state()` (docs/sources.md#changes):
/// one `HMGET` per ask, asks coalesced, outcomes in the order asked.
#[derive(Debug, Clone)]
pub struct BusReader {
    shared: Arc<ReaderShared>,
}

impl BusReader {
    /// Starts the reader task; its outcomes go to `out` (bounded: while the
    /// driver is behind, asks coalesce here instead).
    pub fn start(con: Direct, watch: Watch) -> (Self, JoinHandle<()>, mpsc::Receiver<ReadOutcome>) {
        let shared = Arc::new(ReaderShared::default());
        *shared.watch.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(watch);
        let (tx, rx) = mpsc::channel(OUTCOMES);
        let task = tokio::spawn(reader_task(con, Arc::clone(&shared), tx));
        (Self { shared }, task, rx)
    }

    /// The snapshot the reader and the intake judge by.
    pub fn watch(&self) -> Arc<Watch> {
        self.shared.watch()
    }

    /// Replaces the snapshot (the same watched pairs: a rule turned on or
    /// off). Asks already queued stay: their indices still hold.
    pub fn set_watch(&self, watch: Watch) {
        *self
            .shared
            .watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(watch);
    }

    /// `PUBLISH <hash> <payload>` arrived on a watched hash's channel.
    pub fn notified(&self, hash: &str, payload: &str) {
        let watch = self.shared.watch();
        let Some(request) = watch.notified(hash, payload) else {
            tracing::trace!(channel = hash, payload, "notification not read");
            return;
        };
        let key = match request {
            // Coalesced like any read (an `every` source's too): a
            // notification while the last one's read still waits is judged
            // by that read.
            Request::Read(pairs) | Request::ReadWritten(pairs) => match pairs.first() {
                Some(&first) => Key::Read(first),
                None => return,
            },
            Request::Reread(_) | Request::All => Key::Reread(hash.into()),
        };
        let request = request.clone();
        let mut asked = self.shared.asked();
        if matches!(request, Request::Reread(_)) {
            asked.barrier(hash, &watch.pairs);
        }
        asked.push(Some(key), request);
        wake_reader(asked);
    }

    /// An [`Effect::Poll`](ruled_engine::Effect::Poll): read `pairs` of
    /// `hash` (a poll still waiting is not asked again).
    pub fn poll(&self, hash: &str, pairs: Vec<usize>) {
        let key = Key::Reread(format!("poll:{hash}"));
        let mut asked = self.shared.asked();
        asked.push(Some(key), Request::Reread(pairs.into()));
        wake_reader(asked);
    }

    /// Every live pair again (after a reconnect: notifications were missed).
    pub fn reread_all(&self) {
        let mut asked = self.shared.asked();
        asked.queue.clear();
        asked.keys.clear();
        asked.push(None, Request::All);
        wake_reader(asked);
    }
}

/// Wakes the reader task if it waits for an ask, once `asked` is unlocked.
fn wake_reader(mut asked: MutexGuard<'_, Asked>) {
    let waiting = asked.waiting.take();
    drop(asked);
    if let Some(waker) = waiting {
        waker.wake();
    }
}

/// The next ask, and the asks collapsed since the last call (a collapse
/// alone ends the wait too, to be logged); `Pending` with `cx`'s waker
/// kept until the next ask.
fn poll_ask(shared: &ReaderShared, cx: &mut Context<'_>) -> Poll<(Option<Request>, u64)> {
    let mut asked = shared.asked();
    let collapsed = std::mem::take(&mut asked.collapsed);
    let next = asked.pop();
    if next.is_some() || collapsed > 0 {
        return Poll::Ready((next, collapsed));
    }
    asked.waiting.keep(cx);
    Poll::Pending
}

async fn reader_task(mut con: Direct, shared: Arc<ReaderShared>, out: mpsc::Sender<ReadOutcome>) {
    // Every line about what was read goes through this budget: a watched
    // field that is not UTF-8, notified in a loop, is one line per read.
    let mut throttle = Throttle::new(Instant::now());
    loop {
        let (next, collapsed) = std::future::poll_fn(|cx| poll_ask(&shared, cx)).await;
        if collapsed > 0 {
            crate::logging::log_held(&throttle.roll(Instant::now()));
            if throttle.admit(None, tracing::Level::INFO) {
                tracing::info!(
                    times = collapsed,
                    max = MAX_ASKED,
                    "state notifications arrive faster than they are read: the reads \
                     waiting were replaced by one re-read of every watched field"
                );
            }
        }
        let Some(request) = next else {
            continue;
        };
        let watch = shared.watch();
        let mut read = Read {
            con: &mut con,
            pairs: &watch.pairs,
            throttle: &mut throttle,
        };
        let outcome = match request {
            Request::Read(pairs) => read.outcome(&pairs, ReadCause::Notified).await,
            Request::ReadWritten(pairs) => read.written(&pairs).await,
            Request::Reread(pairs) => read.outcome(&pairs, ReadCause::Reread).await,
            Request::All => read.outcome(&watch.live, ReadCause::Reread).await,
        };
        if let Some(outcome) = outcome {
            if out.send(outcome).await.is_err() {
                return;
            }
        }
    }
}

/// One read of the reader task: its connection, the watched pairs, and
/// the budget its lines go through.
struct Read<'a> {
    con: &'a mut Direct,
    pairs: &'a [StatePair],
    throttle: &'a mut Throttle,
}

impl Read<'_> {
    /// One read as an outcome; `None` when Redis was not reached (the
    /// value is not known to have changed: the reconnect's re-read
    /// settles it).
    async fn outcome(&mut self, indices: &[usize], cause: ReadCause) -> Option<ReadOutcome> {
        match read_pairs_within(self.con, self.pairs, indices, self.throttle).await {
            Ok(values) => Some(ReadOutcome::Fields { cause, values }),
            Err(e) => {
                self.lost(&e);
                None
            }
        }
    }

    /// An `every` source's notification: its pairs (all of one hash) and
    /// the hash's expiry, in one script.
    async fn written(&mut self, indices: &[usize]) -> Option<ReadOutcome> {
        let hash = self.pairs.get(*indices.first()?)?.hash.clone();
        let fields: Vec<(usize, &str)> = indices
            .iter()
            .filter_map(|&index| {
                let pair = self.pairs.get(index)?;
                (pair.hash == hash).then_some((index, pair.field.as_str()))
            })
            .collect();
        let names: Vec<&str> = fields.iter().map(|(_, field)| *field).collect();
        let read =
            crate::bounded_read::hmget_with_expiry(self.con, &hash, &names, self.throttle).await;
        match read {
            Ok((values, expiry)) => Some(ReadOutcome::Written {
                expiry,
                values: fields.iter().map(|(index, _)| *index).zip(values).collect(),
            }),
            Err(e) if is_transport(&e) => {
                self.lost(&e);
                None
            }
            Err(e) => {
                crate::logging::warn_within!(
                    self.throttle,
                    hash = %hash,
                    error = %describe(&e),
                    "cannot read the state hash; its fields keep their values"
                );
                None
            }
        }
    }

    fn lost(&mut self, e: &redis::RedisError) {
        crate::logging::warn_within!(
            self.throttle,
            error = %describe(e),
            "reading watched fields failed (connection); keeping the old values until the \
             reconnect re-reads them"
        );
    }
}

/// Reads the pairs `indices` of `pairs`, one bounded `HMGET` per hash
/// ([`crate::bounded_read::hmget`]: a value over 64 KiB or not UTF-8 reads
/// as absent), in the order given within a hash (the first of a
/// notification stays first). A hash Redis refuses to read (WRONGTYPE) is
/// logged, naming it, and its fields read as absent; only a lost
/// connection is an error. Its lines go through a log budget of its own.
pub async fn read_pairs(
    con: &mut ConnectionManager,
    pairs: &[StatePair],
    indices: &[usize],
) -> redis::RedisResult<Vec<(usize, Option<String>)>> {
    let mut throttle = Throttle::new(Instant::now());
    read_pairs_within(con, pairs, indices, &mut throttle).await
}

/// [`read_pairs`], its lines through `throttle`'s budget (the reader
/// task's, kept across reads).
async fn read_pairs_within(
    con: &mut impl Query,
    pairs: &[StatePair],
    indices: &[usize],
    throttle: &mut Throttle,
) -> redis::RedisResult<Vec<(usize, Option<String>)>> {
    let mut out = Vec::with_capacity(indices.len());
    // Each hash read once, at its first pair, in the order of the pairs:
    // no list of the hashes (a notification's read is of one hash).
    for (at, &index) in indices.iter().enumerate() {
        let Some(pair) = pairs.get(index) else {
            continue;
        };
        let seen = indices[..at]
            .iter()
            .any(|&earlier| pairs.get(earlier).is_some_and(|p| p.hash == pair.hash));
        if !seen {
            read_hash(con, pairs, indices, &pair.hash, throttle, &mut out).await?;
        }
    }
    Ok(out)
}

/// The pairs of `indices` that are of `hash`, read by one bounded
/// `HMGET`, appended to `out` (`read_pairs_within`).
async fn read_hash(
    con: &mut impl Query,
    pairs: &[StatePair],
    indices: &[usize],
    hash: &str,
    throttle: &mut Throttle,
    out: &mut Vec<(usize, Option<String>)>,
) -> redis::RedisResult<()> {
    let of_hash = |&&index: &&usize| pairs.get(index).is_some_and(|pair| pair.hash == hash);
    let names: Vec<&str> = indices
        .iter()
        .filter(of_hash)
        .filter_map(|&index| Some(pairs.get(index)?.field.as_str()))
        .collect();
    let read = crate::bounded_read::hmget(con, hash, &names, throttle).await;
    let values: Vec<Option<String>> = match read {
        Ok(values) => values,
        Err(e) if !is_transport(&e) => {
            crate::logging::warn_within!(
                throttle,
                hash = %hash,
                error = %describe(&e),
                "cannot read the state hash; each of its fields reads as absent (\"\")"
            );
            vec![None; names.len()]
        }
        Err(e) => return Err(e),
    };
    out.extend(indices.iter().filter(of_hash).copied().zip(values));
    Ok(())
}

/// Seeding (docs/sources.md#changes): the live pairs' values as they are,
/// fed to `state()` without emitting anything, and the expiry of each
/// `every` source's hash. Returns how many values were read.
pub async fn seed(
    con: &mut ConnectionManager,
    engine: &mut Engine,
    indices: &[usize],
) -> redis::RedisResult<usize> {
    let pairs = engine.watched_pairs().to_vec();
    let values = read_pairs(con, &pairs, indices).await?;
    let mut seeded = 0;
    for (index, value) in values {
        if let Some(value) = value {
            engine.state_changed(index, value);
            seeded += 1;
        }
    }
    let hashes: Vec<String> = engine
        .expiry_hashes()
        .into_iter()
        .map(str::to_string)
        .collect();
    for hash in hashes {
        let expiry = crate::bounded_read::expiry(con, &hash).await?;
        engine.expiry_seen(&hash, expiry);
    }
    Ok(seeded)
}

/// The envelopes of one event (docs/events.md#the-envelope): the stream
/// entry's `e` (without `id`: the entry id is it) and the `ev:` message
/// (with it), by serde_json: the tests' reference for what
/// [`publish_commands`] writes by hand.
#[cfg(test)]
pub fn envelopes(event: &Event) -> Result<(String, String), serde_json::Error> {
    let with_id = serde_json::to_string(event)?;
    let Some(id) = event.id.as_deref() else {
        return Ok((with_id.clone(), with_id));
    };
    // `id` is the envelope's first key: the entry is the message without
    // it, cut from the one encoding instead of a second one of a copy.
    let quoted = serde_json::to_string(id)?;
    let rest = with_id
        .strip_prefix("{\"id\":")
        .and_then(|rest| rest.strip_prefix(quoted.as_str()))
        .and_then(|rest| rest.strip_prefix(','));
    if let Some(rest) = rest {
        let mut entry = String::with_capacity(rest.len() + 1);
        entry.push('{');
        entry.push_str(rest);
        return Ok((entry, with_id));
    }
    let mut without = event.clone();
    without.id = None;
    Ok((serde_json::to_string(&without)?, with_id))
}

/// The publisher of derived events: queues each effect's events, in
/// order, for the Redis lane (docs/service.md#the-bus).
#[derive(Debug, Clone)]
pub struct Publisher {
    /// `None` once closed (at stop).
    tx: Option<mpsc::Sender<Vec<Event>>>,
    /// Effects dropped at the queue's bound since the last log line.
    dropped: Arc<Mutex<(u64, Option<Instant>)>>,
}

impl Publisher {
    /// The publisher, and the queue its events wait in for the Redis lane
    /// ([`crate::pool::Pool::start_publishing`]), which writes them with
    /// the pushes it sends; `last_id` is the key the last entry id added
    /// is kept in ([`Namespace::bus_last_id`]).
    pub fn new(last_id: String) -> (Self, Publications) {
        let (tx, rx) = mpsc::channel(PUBLISH_QUEUE);
        let dropped = Arc::new(Mutex::new((0, None)));
        (
            Self {
                tx: Some(tx),
                dropped,
            },
            Publications {
                rx: Some(rx),
                set_last_id: set_head(&last_id),
                last_id,
                json: Vec::new(),
                refusals: Refusals::default(),
            },
        )
    }

    /// Queues one effect's events. Past the bound (Redis far behind) they
    /// are dropped, logged at most every 10 s: our rules had them already.
    pub fn publish(&self, events: Vec<Event>) {
        let count = events.len();
        let Some(tx) = &self.tx else {
            tracing::debug!(events = count, "derived events not published: stopping");
            return;
        };
        match tx.try_send(events) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                let mut dropped = self.dropped.lock().unwrap_or_else(PoisonError::into_inner);
                dropped.0 += count as u64;
                if dropped
                    .1
                    .is_none_or(|at| at.elapsed() >= Duration::from_secs(10))
                {
                    tracing::warn!(
                        events = dropped.0,
                        queue = PUBLISH_QUEUE,
                        "derived events not published: Redis is behind (the publish queue \
                         is full); ruled's own rules had them"
                    );
                    *dropped = (0, Some(Instant::now()));
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::debug!(events = count, "derived events not published: stopping");
            }
        }
    }
}

impl Publisher {
    /// No more events: the lane publishes those queued, then no more.
    pub fn close(&mut self) {
        self.tx = None;
    }
}

/// The derived events waiting to be published, in order, and what the
/// replies to their commands are judged by: the Redis lane's
/// (docs/service.md#the-bus). It writes the events queued with the pushes
/// of the batch it sends, after them, in the same write.
#[derive(Debug)]
pub struct Publications {
    /// `None` once the publisher closed and every queued event was taken.
    rx: Option<mpsc::Receiver<Vec<Event>>>,
    last_id: String,
    /// `SET <last_id>` in RESP, the id to follow: written once.
    set_last_id: Vec<u8>,
    /// An event's envelope, encoded here before it is copied into the
    /// commands (kept: no allocation per event).
    json: Vec<u8>,
    refusals: Refusals,
}

/// The effects [`Publications::take`] took, and how many commands they are.
#[derive(Debug, Default)]
pub struct Taken {
    effects: Vec<Vec<Event>>,
    commands: usize,
}

impl Taken {
    /// How many replies the commands taken have.
    pub fn commands(&self) -> usize {
        self.commands
    }
}

impl Publications {
    /// Waits for the next effect's events; `None` once the publisher closed
    /// and nothing is left (then at once, every time). Cancel-safe.
    pub async fn next(&mut self) -> Option<Vec<Event>> {
        let events = self.rx.as_mut()?.recv().await;
        if events.is_none() {
            self.rx = None;
        }
        events
    }

    /// Whether the publisher closed and every event was taken.
    pub fn closed(&self) -> bool {
        self.rx.is_none()
    }

    /// The commands of `first` (when given) and of every effect queued now,
    /// in order, appended to `bytes`.
    pub fn take(&mut self, first: Option<Vec<Event>>, bytes: &mut Vec<u8>) -> Taken {
        let mut taken = Taken::default();
        let mut next = first;
        loop {
            let events = match next.take() {
                Some(events) => events,
                None => match self.rx.as_mut().map(mpsc::Receiver::try_recv) {
                    Some(Ok(events)) => events,
                    _ => break,
                },
            };
            taken.commands += publish_commands(&events, &self.set_last_id, &mut self.json, bytes);
            taken.effects.push(events);
        }
        taken
    }

    /// Judges the replies to the commands `taken` (logged through a budget),
    /// or says they were not published when Redis was not reached.
    pub fn judge(
        &mut self,
        taken: &Taken,
        replies: Result<&[redis::RedisResult<redis::Value>], &redis::RedisError>,
    ) {
        let mut replies = match replies {
            Ok(replies) => replies.iter(),
            Err(e) => {
                let events: usize = taken.effects.iter().map(Vec::len).sum();
                if events > 0 {
                    tracing::warn!(
                        events,
                        error = %describe(e),
                        "derived events not published (connection); ruled's own rules had them"
                    );
                }
                return;
            }
        };
        let refusals = &mut self.refusals;
        for events in &taken.effects {
            // XADD, PUBLISH, XADD, PUBLISH, ..., SET of the last id.
            for event in events {
                if let Some(Err(e)) = replies.next() {
                    refusals.refused(event, e);
                }
                if let Some(Err(e)) = replies.next() {
                    crate::logging::warn_within!(
                        &mut refusals.throttle,
                        topic = %event.topic,
                        error = %describe(e),
                        "PUBLISH of a derived event refused"
                    );
                }
            }
            if events
                .last()
                .and_then(|event| event.id.as_deref())
                .is_some()
            {
                if let Some(Err(e)) = replies.next() {
                    crate::logging::warn_within!(
                        &mut refusals.throttle,
                        key = %self.last_id,
                        error = %describe(e),
                        "the last event id not kept"
                    );
                }
            }
        }
    }
}

/// `XADD events MAXLEN ~ 2000` in RESP, the header of a command of 10
/// arguments: the entry id, `topic`, the topic, `e` and the entry follow.
const XADD_HEAD: &[u8] =
    b"*10\r\n$4\r\nXADD\r\n$6\r\nevents\r\n$6\r\nMAXLEN\r\n$1\r\n~\r\n$4\r\n2000\r\n";
/// `PUBLISH`, of 3 arguments: the channel and the message follow.
const PUBLISH_HEAD: &[u8] = b"*3\r\n$7\r\nPUBLISH\r\n";

/// `SET <key>` in RESP, of 3 arguments: the value follows.
fn set_head(key: &str) -> Vec<u8> {
    let mut head = Vec::new();
    crate::resp::push_command(&mut head, 3);
    crate::resp::push_bulk(&mut head, &[b"SET"]);
    crate::resp::push_bulk(&mut head, &[key.as_bytes()]);
    head
}

/// Appends the commands of one effect, in RESP, to `bytes`, ending with
/// the `SET` of its last id (`set_last_id`, its head: [`set_head`]), and
/// returns how many there are. Each envelope is written once, into `json`
/// (`Event::write_json`: serde_json's bytes by hand), and copied from
/// there into both commands (docs/engine.md#cpu-per-notification).
fn publish_commands(
    events: &[Event],
    set_last_id: &[u8],
    json: &mut Vec<u8>,
    bytes: &mut Vec<u8>,
) -> usize {
    use crate::resp::push_bulk;
    let mut count = 0;
    // The entry of an event whose id needs an escape, written apart.
    let mut entry_apart = Vec::new();
    for event in events {
        json.clear();
        event.write_json(json);
        let id = event.id.as_deref();
        // The entry is the message without its `id` (the first key): cut
        // from the one encoding where the id needs no escape, else written
        // without it.
        let entry: [&[u8]; 2] = match id.map(|id| entry_rest(json, id)) {
            None => [json, b""],
            Some(Some(rest)) => [b"{", &json[rest..]],
            Some(None) => {
                let mut without = event.clone();
                without.id = None;
                entry_apart.clear();
                without.write_json(&mut entry_apart);
                [&entry_apart, b""]
            }
        };
        let message: &[u8] = json;
        let id = id.unwrap_or("*");
        let topic = event.topic.as_bytes();
        bytes.reserve(2 * message.len() + 2 * topic.len() + id.len() + 160);
        bytes.extend_from_slice(XADD_HEAD);
        push_bulk(bytes, &[id.as_bytes()]);
        bytes.extend_from_slice(b"$5\r\ntopic\r\n");
        push_bulk(bytes, &[topic]);
        bytes.extend_from_slice(b"$1\r\ne\r\n");
        push_bulk(bytes, &entry);
        bytes.extend_from_slice(PUBLISH_HEAD);
        push_bulk(
            bytes,
            &[rulecore::topic::EVENT_CHANNEL_PREFIX.as_bytes(), topic],
        );
        push_bulk(bytes, &[message]);
        count += 2;
    }
    if let Some(id) = events.last().and_then(|event| event.id.as_deref()) {
        bytes.extend_from_slice(set_last_id);
        push_bulk(bytes, &[id.as_bytes()]);
        count += 1;
    }
    count
}

/// Where, in `json` (an envelope whose `id` is `id`), what follows
/// `{"id":"<id>",` starts: the entry is `{` and the rest. `None` when the
/// id would be escaped in JSON or the envelope does not start so.
fn entry_rest(json: &[u8], id: &str) -> Option<usize> {
    if rulecore::event::needs_json_escape(id) {
        return None;
    }
    let rest = json
        .strip_prefix(b"{\"id\":\"")?
        .strip_prefix(id.as_bytes())?
        .strip_prefix(b"\",")?;
    Some(json.len() - rest.len())
}

/// Refused `XADD`s: logged through a budget, the `--bus follow` advice once.
#[derive(Debug)]
struct Refusals {
    throttle: Throttle,
    advised: bool,
}

impl Default for Refusals {
    fn default() -> Self {
        Self {
            throttle: Throttle::new(Instant::now()),
            advised: false,
        }
    }
}

impl Refusals {
    fn refused(&mut self, event: &Event, error: &redis::RedisError) {
        let id = event.id.as_deref().unwrap_or("");
        crate::logging::log_held(&self.throttle.roll(Instant::now()));
        let too_small = error.to_string().contains("equal or smaller");
        let cause = if too_small {
            "its id is not above the stream's newest entry: someone else writes stream `events`"
        } else {
            "Redis refused it"
        };
        if self.throttle.admit(None, tracing::Level::WARN) {
            tracing::warn!(
                topic = %event.topic, id, error = %describe(error),
                "derived event not added to stream `{STREAM}` ({cause}); still published on ev:"
            );
        } else {
            tracing::debug!(topic = %event.topic, id, "derived event not added to stream `{STREAM}` ({cause})");
        }
        if too_small && !self.advised {
            self.advised = true;
            tracing::warn!(
                "another adapter (the Go event-service?) writes the bus: if it is to keep \
                 publishing, run ruled with --bus follow (RULED_BUS=follow)"
            );
        }
    }
}

/// At start, in `own` mode with a profile: sets the engine's id floor to
/// the stream's newest entry, and warns when another adapter seems to
/// publish the bus: the Go event-service's counters in hash `extensions`,
/// or an entry of stream `events` newer than two stats intervals that is
/// not this ruled's own from before a restart (its id is above the one
/// kept in `NS:bus-last-id`). A failed read is logged; only a lost
/// connection is an error.
pub async fn start_checks(
    con: &mut ConnectionManager,
    engine: &mut Engine,
    namespace: &Namespace,
    checks: StartChecks<'_>,
) -> redis::RedisResult<()> {
    let StartChecks {
        known,
        me,
        stats_interval,
    } = checks;
    if engine.bus_mode() != BusMode::Own || engine.owned_topics().is_empty() {
        return Ok(());
    }
    let newest: redis::RedisResult<Vec<(String, HashMap<String, String>)>> = query(
        con,
        redis::cmd("XREVRANGE")
            .arg(STREAM)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1),
    )
    .await;
    let newest = match newest {
        Ok(entries) => entries.into_iter().next(),
        Err(e) if is_transport(&e) => return Err(e),
        Err(e) => {
            tracing::warn!(error = %describe(&e), "cannot read stream `{STREAM}`; event ids start at the clock");
            None
        }
    };
    let ours = last_own_id(con, namespace).await?;
    if let Some((id, fields)) = &newest {
        if let Some((ms, seq)) = parse_id(id) {
            engine.set_bus_floor(ms, seq);
            let age_ms = crate::clock::wall_ms().saturating_sub(ms);
            let window =
                i64::try_from(stats_interval.saturating_mul(2).as_millis()).unwrap_or(i64::MAX);
            let own = ours.is_some_and(|ours| (ms, seq) <= ours);
            if own {
                tracing::debug!(id = %id, age_ms, "stream `{STREAM}`'s newest entry is this ruled's own, from before a restart");
            } else if age_ms <= window {
                tracing::warn!(
                    id = %id,
                    topic = %fields.get("topic").map_or("", String::as_str),
                    age_ms,
                    "stream `{STREAM}` has an entry this ruled did not write, {age_ms} ms old: \
                     another adapter (the Go event-service, or another ruled) publishes the bus. \
                     If it is to keep publishing, run ruled with --bus follow (RULED_BUS=follow)"
                );
            }
        }
    }
    let go = crate::owner::read(con, &Namespace::default()).await?;
    if let Some(crate::owner::Collision::ForeignFields(fields)) =
        crate::owner::judge(&go, me, known, stats_interval)
    {
        tracing::warn!(
            fields = %fields.join(","),
            "the counters hash `extensions` looks written by the Go event-service, which \
             publishes the bus itself: with both, every event is published twice. Run ruled with \
             --bus follow (RULED_BUS=follow) while it runs, or stop it"
        );
    }
    Ok(())
}

/// What [`start_checks`] judges the counters hash by.
#[derive(Debug, Clone, Copy)]
pub struct StartChecks<'a> {
    /// The fields this ruled writes into the counters hash.
    pub known: &'a BTreeSet<&'static str>,
    pub me: &'a crate::owner::Owner,
    pub stats_interval: Duration,
}

/// The id of the last entry this ruled (any earlier run in `namespace`)
/// added to stream `events`; `None` when none is kept or it does not
/// parse. A failed read is logged; only a lost connection is an error.
async fn last_own_id(
    con: &mut ConnectionManager,
    namespace: &Namespace,
) -> redis::RedisResult<Option<(i64, u64)>> {
    let key = namespace.bus_last_id();
    let kept: redis::RedisResult<Option<String>> = query(con, redis::cmd("GET").arg(&key)).await;
    match kept {
        Ok(id) => Ok(id.as_deref().and_then(parse_id)),
        Err(e) if is_transport(&e) => Err(e),
        Err(e) => {
            tracing::warn!(key = %key, error = %describe(&e), "cannot read the last event id ruled kept");
            Ok(None)
        }
    }
}

/// How many of our latest event ids [`RecentIds`] keeps.
const RECENT_IDS: usize = 1024;

/// The ids of the events this ruled published lately (bounded): an `ev:`
/// glob delivers them back, and they are ours, not forged. Held as
/// `SmallStr`s: an id (`<ms>-<seq>`, 15 bytes) is held inline, so keeping
/// one allocates nothing.
#[derive(Debug, Default)]
pub struct RecentIds {
    order: VecDeque<SmallStr>,
    set: FastSet<SmallStr>,
}

impl RecentIds {
    pub fn insert(&mut self, id: Option<&str>) {
        let Some(id) = id else { return };
        if self.order.len() >= RECENT_IDS {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(old.as_str());
            }
        }
        let id = SmallStr::new(id);
        self.order.push_back(id.clone());
        self.set.insert(id);
    }

    pub fn contains(&self, id: Option<&str>) -> bool {
        id.is_some_and(|id| self.set.contains(id))
    }
}

/// A stream entry id `<ms>-<seq>`.
pub fn parse_id(id: &str) -> Option<(i64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_bound_is_sent_as_it_is_declared() {
        let mut head = Vec::new();
        crate::resp::push_args(
            &mut head,
            &[
                b"XADD",
                STREAM.as_bytes(),
                b"MAXLEN",
                b"~",
                STREAM_MAXLEN.to_string().as_bytes(),
            ],
        );
        // The same, a command of 10 arguments.
        assert_eq!(XADD_HEAD[3..], head[2..]);
        assert_eq!(&XADD_HEAD[..3], b"*10");
    }

    /// The commands as they were built before they were written straight
    /// into the request: each argument on its own, both envelopes encoded
    /// apart.
    fn reference_commands(events: &[Event], last_id: &str) -> Vec<u8> {
        use crate::resp::push_args;
        let mut bytes = Vec::new();
        for event in events {
            let (entry, message) = envelopes(event).unwrap();
            let id = event.id.as_deref().unwrap_or("*");
            push_args(
                &mut bytes,
                &[
                    b"XADD",
                    STREAM.as_bytes(),
                    b"MAXLEN",
                    b"~",
                    STREAM_MAXLEN.to_string().as_bytes(),
                    id.as_bytes(),
                    b"topic",
                    event.topic.as_bytes(),
                    b"e",
                    entry.as_bytes(),
                ],
            );
            let channel = format!("ev:{}", event.topic);
            push_args(
                &mut bytes,
                &[b"PUBLISH", channel.as_bytes(), message.as_bytes()],
            );
        }
        if let Some(id) = events.last().and_then(|event| event.id.as_deref()) {
            push_args(&mut bytes, &[b"SET", last_id.as_bytes(), id.as_bytes()]);
        }
        bytes
    }

    #[test]
    fn publications_encode_as_each_command_on_its_own() {
        let event = Event {
            id: Some("1700000000000-7".into()),
            ts: Some(1_700_000_000_000),
            topic: "vehicle.kickstand.up".into(),
            src: Some("adapter".into()),
            from: Some("down".into()),
            to: Some("up \"quoted\" \u{1}".into()),
            ..Event::default()
        };
        let cases = [
            vec![event.clone()],
            vec![
                Event {
                    id: None,
                    ..event.clone()
                },
                event.clone(),
            ],
            vec![Event {
                id: Some("5\"-0".into()),
                ..event.clone()
            }],
            vec![Event {
                id: None,
                ..event.clone()
            }],
        ];
        let (mut json, set) = (Vec::new(), set_head("ruled:bus-last-id"));
        for events in &cases {
            let mut bytes = b"before".to_vec();
            let count = publish_commands(events, &set, &mut json, &mut bytes);
            let mut want = b"before".to_vec();
            want.extend(reference_commands(events, "ruled:bus-last-id"));
            assert_eq!(
                String::from_utf8_lossy(&bytes),
                String::from_utf8_lossy(&want)
            );
            let sets = usize::from(events.last().unwrap().id.is_some());
            assert_eq!(count, 2 * events.len() + sets);
        }
    }

    fn pairs() -> Vec<StatePair> {
        ["a", "b"]
            .iter()
            .map(|field| StatePair {
                hash: "h".into(),
                field: (*field).into(),
            })
            .collect()
    }

    #[test]
    fn asks_coalesce_until_a_barrier_and_stay_bounded() {
        let pairs = pairs();
        let mut asked = Asked::default();
        asked.push(Some(Key::Read(0)), Request::Read(vec![0].into()));
        asked.push(Some(Key::Read(0)), Request::Read(vec![0].into()));
        assert_eq!(asked.queue.len(), 1);
        asked.barrier("h", &pairs);
        asked.push(
            Some(Key::Reread("h".into())),
            Request::Reread(vec![0, 1].into()),
        );
        asked.push(
            Some(Key::Reread("h".into())),
            Request::Reread(vec![0, 1].into()),
        );
        asked.push(Some(Key::Read(0)), Request::Read(vec![0].into()));
        assert_eq!(asked.queue.len(), 3);
        assert_eq!(asked.pop(), Some(Request::Read(vec![0].into())));
        assert_eq!(asked.pop(), Some(Request::Reread(vec![0, 1].into())));
        // The read queued behind the barrier is still coalescing.
        asked.push(Some(Key::Read(0)), Request::Read(vec![0].into()));
        assert_eq!(asked.queue.len(), 1);
        for i in 0..(3 * MAX_ASKED) {
            asked.barrier("h", &pairs);
            asked.push(
                Some(Key::Reread(format!("{i}"))),
                Request::Reread(vec![0, 1].into()),
            );
        }
        assert!(asked.queue.len() <= MAX_ASKED);
        assert!(asked.collapsed > 0);
    }

    #[test]
    fn ids_parse() {
        assert_eq!(parse_id("1700000000000-3"), Some((1_700_000_000_000, 3)));
        assert_eq!(parse_id("x"), None);
    }

    #[test]
    fn the_stream_entry_has_no_id_and_the_message_has_it() {
        let event = Event {
            id: Some("5-0".into()),
            ts: Some(5),
            topic: "a.b".into(),
            src: Some("adapter".into()),
            to: Some("x".into()),
            ..Event::default()
        };
        let (entry, message) = envelopes(&event).unwrap();
        assert_eq!(entry, r#"{"ts":5,"topic":"a.b","src":"adapter","to":"x"}"#);
        assert_eq!(
            message,
            r#"{"id":"5-0","ts":5,"topic":"a.b","src":"adapter","to":"x"}"#
        );
        // No id: both are the one encoding; an id that needs escapes is
        // cut as encoded.
        let plain = Event {
            id: None,
            ..event.clone()
        };
        let (entry, message) = envelopes(&plain).unwrap();
        assert_eq!(entry, message);
        assert_eq!(entry, r#"{"ts":5,"topic":"a.b","src":"adapter","to":"x"}"#);
        let quoted = Event {
            id: Some("5\"-0".into()),
            ..event
        };
        let (entry, message) = envelopes(&quoted).unwrap();
        assert_eq!(entry, r#"{"ts":5,"topic":"a.b","src":"adapter","to":"x"}"#);
        assert_eq!(
            message,
            r#"{"id":"5\"-0","ts":5,"topic":"a.b","src":"adapter","to":"x"}"#
        );
    }
}
