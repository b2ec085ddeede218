//! Event intake (docs/service.md#subscriptions): a task that drains the
//! subscription as fast as Redis delivers and holds what waits for the
//! engine in a queue bounded by count and bytes. Past the bound an event is
//! dropped, counted in `overflow` and logged (rate-limited): a flood costs
//! events, never memory. Change notifications of watched hashes never
//! queue: they go to the bus reader ([`BusReader::notified`]), which judges
//! them by the engine's snapshot and coalesces the reads.

use crate::bus::BusReader;
use crate::effect_log::log_skipped_event;
use crate::logging::Throttle;
use crate::pubsub::MAX_MESSAGE_BYTES;
use crate::subscriptions::{Bus, Subscriber};
use crate::waker_slot::WakerSlot;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Events that may wait for the engine, and their bytes (payload and
/// channel name, plus 128 bytes each).
pub const MAX_QUEUED: usize = 4096;
pub const MAX_QUEUED_BYTES: usize = 2 * 1024 * 1024;
const OVERHEAD: usize = 128;
/// Messages read before the intake lets the other tasks run: under a
/// flood it reads many times what the driver handles per turn (so the
/// excess is dropped here), without starving timers and actions.
const READ_TURN: u32 = 256;
/// At most one overflow line per this long.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The watched hashes, and who reads what their notifications ask for.
#[derive(Debug, Clone)]
pub struct StateWatch {
    pub reader: BusReader,
    /// Looked up per message, hashed like the engine's topic table (the
    /// names come from the bundle).
    pub hashes: ruled_engine::fast_hash::FastSet<String>,
}

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Bus>,
    bytes: usize,
    /// The driver's, while it waits for an item: taken and woken by the
    /// push that ends the wait. Kept under the queue's lock, so a wait and
    /// a push never miss each other, with one lock for both.
    waiting: WakerSlot,
    /// Dropped since the last overflow line, and when that line went out.
    unlogged: u64,
    logged_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Events dropped at the bound since start (the `overflow` counter).
    overflow: Arc<AtomicU64>,
    /// Messages over 64 KiB, skipped while read (counted in `rejected`).
    rejected: Arc<AtomicU64>,
    /// The watched state, replaced by a reload that changes it.
    watch: Mutex<Option<StateWatch>>,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Never held across an await or a panic-prone call.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The bounded queue between the subscription and the driver.
#[derive(Debug)]
pub struct Intake {
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl Intake {
    /// An intake that never delivers (nothing subscribed yet), counting in
    /// `overflow` and `rejected`.
    pub fn idle(overflow: Arc<AtomicU64>, rejected: Arc<AtomicU64>) -> Self {
        let shared = Shared {
            overflow,
            rejected,
            ..Shared::default()
        };
        Self {
            shared: Arc::new(shared),
            task: None,
        }
    }

    /// Starts draining `subscriber` (already opened).
    pub fn start(&mut self, subscriber: Subscriber, state: Option<StateWatch>) {
        self.set_state_watch(state);
        let shared = Arc::clone(&self.shared);
        self.task = Some(tokio::spawn(drain(subscriber, shared)));
    }

    /// Replaces the watched state (docs/service.md#live-reload): change
    /// notifications from here on are judged by `state`.
    pub fn set_state_watch(&self, state: Option<StateWatch>) {
        *self
            .shared
            .watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = state;
    }

    /// The next message or `Restored`, or `Pending` with `cx`'s waker kept
    /// until one is queued. One consumer (the driver's loop): a later
    /// wait's waker replaces an earlier one.
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Bus> {
        let mut queue = self.shared.queue();
        if let Some(bus) = queue.items.pop_front() {
            queue.bytes -= cost(&bus);
            return Poll::Ready(bus);
        }
        queue.waiting.keep(cx);
        Poll::Pending
    }

    /// Says how many events were dropped since the last overflow line, if
    /// any and that line is old enough (called at every stats tick, so the
    /// end of a burst is reported too).
    pub fn log_overflow(&self) {
        let mut queue = self.shared.queue();
        if queue.unlogged > 0 && due(queue.logged_at) {
            log_dropped(&mut queue, &self.shared.overflow);
        }
    }

    /// Closes the subscription.
    pub fn close(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let mut queue = self.shared.queue();
        queue.items.clear();
        queue.bytes = 0;
    }
}

fn cost(bus: &Bus) -> usize {
    match bus {
        Bus::Message(message) => {
            OVERHEAD + message.get_payload_bytes().len() + message.get_channel_name().len()
        }
        Bus::Oversized { .. } | Bus::Restored => 0,
    }
}

/// Whether an overflow line may go out, the last one having gone out at
/// `logged_at`.
fn due(logged_at: Option<Instant>) -> bool {
    logged_at.is_none_or(|at| at.elapsed() >= LOG_EVERY)
}

fn log_dropped(queue: &mut Queue, overflow: &AtomicU64) {
    tracing::warn!(
        dropped = queue.unlogged,
        overflow = overflow.load(Ordering::Relaxed),
        max_events = MAX_QUEUED,
        max_kib = MAX_QUEUED_BYTES / 1024,
        "event intake full (events arrive faster than the rules handle them): events dropped"
    );
    queue.unlogged = 0;
    queue.logged_at = Some(Instant::now());
}

/// The intake task: reads the subscription, marks state pairs, queues
/// events within the bound.
async fn drain(mut subscriber: Subscriber, shared: Arc<Shared>) {
    // Oversized messages are logged here, never queued: the queue may be
    // full exactly when they matter.
    let mut throttle = Throttle::new(Instant::now());
    let mut read = 0;
    loop {
        read += 1;
        if read >= READ_TURN {
            read = 0;
            tokio::task::yield_now().await;
        }
        // Unconstrained by tokio's task budget (it yields every
        // `READ_TURN` messages instead): the socket is read far faster than
        // events are handled, so under a flood the excess is dropped here
        // and Redis' output buffer for ruled stays small.
        let bus = tokio::task::unconstrained(subscriber.next()).await;
        if let Bus::Oversized { channel, bytes } = &bus {
            let why = format!(
                "of {bytes} bytes, over the {} KiB limit (skipped while read)",
                MAX_MESSAGE_BYTES / 1024
            );
            shared.rejected.fetch_add(1, Ordering::Relaxed);
            log_skipped_event(channel, &why, &mut throttle);
            continue;
        }
        if let Bus::Message(message) = &bus {
            if !message.from_pattern() && shared.state_notified(message) {
                continue;
            }
        }
        let size = cost(&bus);
        let mut queue = shared.queue();
        let full = queue.items.len() >= MAX_QUEUED || queue.bytes + size > MAX_QUEUED_BYTES;
        // `Restored` always queues: it makes the driver rewrite records.
        if full && matches!(bus, Bus::Message(_)) {
            shared.overflow.fetch_add(1, Ordering::Relaxed);
            queue.unlogged += 1;
            if due(queue.logged_at) {
                log_dropped(&mut queue, &shared.overflow);
            }
            continue;
        }
        queue.bytes += size;
        queue.items.push_back(bus);
        let waiting = queue.waiting.take();
        drop(queue);
        if let Some(waker) = waiting {
            waker.wake();
        }
    }
}

impl Shared {
    /// A change notification of watched state: handed to the state reader
    /// (`true`), never queued.
    fn state_notified(&self, message: &crate::pubsub::Message) -> bool {
        let watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        match watch.as_ref() {
            Some(state) if state.is_state_channel(message.get_channel_name()) => {
                state.notified(message);
                true
            }
            _ => false,
        }
    }
}

impl StateWatch {
    fn is_state_channel(&self, channel: &str) -> bool {
        self.hashes.contains(channel)
    }

    /// `PUBLISH <hash> <payload>`: what the engine's snapshot asks for.
    fn notified(&self, message: &crate::pubsub::Message) {
        let hash = message.get_channel_name();
        let payload = String::from_utf8_lossy(message.get_payload_bytes());
        self.reader.notified(hash, &payload);
    }
}
