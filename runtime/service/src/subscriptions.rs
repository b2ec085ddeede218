//! The pub/sub side (docs/semantics.md#events, docs/events.md, docs/semantics.md#state, docs/service.md#start-and-stop): what to subscribe to, the
//! subscription itself, and the [`Subscriber`] that reopens it with backoff
//! after a lost connection.

use crate::connection::Backoff;
use crate::pubsub::{Commands, Delivery, PubSub, PubSubError, MAX_MESSAGE_BYTES};
use crate::tls::Tls;
use rulecore::event::{Event, EventError};
use rulecore::topic::{Subscription, TopicPattern, EVENT_CHANNEL_PREFIX};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The longest topic handled (docs/service.md#subscriptions); vehicle
/// topics are a few dozen bytes.
const MAX_TOPIC_BYTES: usize = 1024;

/// What to subscribe to: exact channels (SUBSCRIBE) and globs (PSUBSCRIBE).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscriptions {
    pub channels: BTreeSet<String>,
    pub patterns: BTreeSet<String>,
}

impl Subscriptions {
    /// The subscriptions for the live rules' `on` + `cancel-on` patterns
    /// (docs/semantics.md#events) and the watched state hashes (docs/semantics.md#state).
    ///
    /// Redis delivers a message once per matching subscription, so a topic
    /// covered by two subscriptions would reach the engine twice. Channels
    /// and globs that a broader glob already covers are therefore left out:
    /// every topic matches at most one subscription.
    ///
    /// `patterns` borrow from the payload (walked three times, never
    /// copied): a copy of 100,000 rules' topics would cost megabytes for
    /// a moment at every start.
    pub fn compute<'a, I>(patterns: I, state_hashes: &BTreeSet<String>) -> Self
    where
        I: IntoIterator<Item = &'a TopicPattern>,
        I::IntoIter: Clone,
    {
        let patterns = patterns.into_iter();
        let any = patterns.clone().any(|p| matches!(p, TopicPattern::Any));
        let mut prefixes: Vec<&str> = patterns
            .clone()
            .filter_map(|p| match p {
                TopicPattern::Prefix(prefix) => Some(&**prefix),
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
            TopicPattern::Prefix(prefix) => !kept.contains(&&**prefix),
            TopicPattern::Exact(topic) => kept.iter().any(|k| topic.starts_with(k)),
        };
        let mut out = Self::default();
        let mut add = |pattern: &TopicPattern| match pattern.subscription() {
            Subscription::Channel(channel) => out.channels.insert(channel),
            Subscription::Pattern(glob) => out.patterns.insert(glob),
        };
        if any {
            add(&TopicPattern::Any);
        } else {
            patterns.filter(|p| !covered(p)).for_each(|p| {
                add(p);
            });
        }
        out.channels.extend(state_hashes.iter().cloned());
        out
    }

    pub fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.patterns.is_empty()
    }
}

/// Opens a pub/sub connection ([`PubSub`]) to `client`'s server (over
/// `tls` for a `rediss://` URL) and subscribes to `subs`.
pub async fn open_pubsub(
    client: &redis::Client,
    tls: &Tls,
    subs: &Subscriptions,
) -> Result<PubSub, PubSubError> {
    let channels: Vec<&str> = subs.channels.iter().map(String::as_str).collect();
    let patterns: Vec<&str> = subs.patterns.iter().map(String::as_str).collect();
    PubSub::open(client.get_connection_info(), tls, &channels, &patterns).await
}

/// What the bus said.
#[derive(Debug)]
pub enum Bus {
    Message(redis::Msg),
    /// A message over 64 KiB, skipped while it was read (never held).
    Oversized {
        channel: String,
        bytes: usize,
    },
    /// The subscription was reopened after a lost connection.
    Restored,
}

/// A topic quoted in a log line is cut to this many bytes: a refused
/// envelope's `topic` may be 64 KiB of anything.
const LOGGED_TOPIC_BYTES: usize = 128;

/// What a pub/sub message says.
#[derive(Debug)]
pub enum Inbound {
    Event(Event),
    /// Rejected, counted in `rejected` (docs/events.md); `why` completes
    /// "skipping an event ...". Logged by the caller, through its throttle.
    Skipped {
        channel: String,
        why: String,
    },
}

impl Inbound {
    /// What an event message says. Change notifications of watched state
    /// never get here: the intake hands them to the state reader.
    pub fn read(message: &redis::Msg) -> Self {
        let channel = message.get_channel_name();
        let payload = message.get_payload_bytes();
        let skipped = |why: String| Self::Skipped {
            channel: channel.to_string(),
            why,
        };
        // The subscription reader skips larger messages while reading them
        // (pubsub.rs); the check stays for any other source of messages.
        if payload.len() > MAX_MESSAGE_BYTES {
            return skipped(format!(
                "of {} bytes, over the {} KiB limit",
                payload.len(),
                MAX_MESSAGE_BYTES / 1024
            ));
        }
        // The channel decides the topic (docs/events.md#the-channel-decides-the-topic).
        let Some(topic) = channel.strip_prefix(EVENT_CHANNEL_PREFIX) else {
            return skipped("on a channel that is not an event channel (`ev:<topic>`)".into());
        };
        if topic.len() > MAX_TOPIC_BYTES {
            return skipped(format!(
                "with a topic of {} bytes, over the {MAX_TOPIC_BYTES}-byte limit",
                topic.len()
            ));
        }
        match Event::decode_on_channel(topic, payload) {
            Ok(event) => {
                tracing::debug!(channel, topic = %event.topic, "event");
                Self::Event(event)
            }
            Err(EventError::TopicMismatch { topic: claimed }) => skipped(format!(
                "whose topic {:?} differs from its channel's {topic:?}: the channel decides \
                 the topic",
                clip(&claimed, LOGGED_TOPIC_BYTES)
            )),
            Err(e) => skipped(format!("that does not decode: {e}")),
        }
    }
}

/// At most `max` bytes of `text`, cut at a character boundary, with `...`
/// when cut.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let end = (0..=max)
        .rev()
        .find(|&at| text.is_char_boundary(at))
        .unwrap_or(0);
    format!("{}...", &text[..end])
}

/// The pub/sub side: the subscription, and its reconnection with backoff
/// after a lost connection (docs/service.md#start-and-stop).
pub struct Subscriber {
    client: redis::Client,
    tls: Tls,
    /// What to subscribe to, shared with the [`SubscriptionHandle`] that
    /// changes it at a reload.
    control: Arc<Control>,
    stream: Option<PubSub>,
    reconnect_at: Option<tokio::time::Instant>,
    backoff: Backoff,
}

/// What is to be subscribed, and the open connection with what it is
/// subscribed to. `live` is locked across a (re)open and across a change,
/// so the two never interleave.
///
/// Both hold the same [`Arc`]: with 100,000 exact topics one copy of the
/// set is some 8 MB.
#[derive(Debug)]
struct Control {
    target: std::sync::Mutex<Arc<Subscriptions>>,
    live: tokio::sync::Mutex<Option<(Commands, Arc<Subscriptions>)>>,
    /// A change gave an idle subscriber something to subscribe to.
    changed: tokio::sync::Notify,
}

impl Control {
    fn target(&self) -> Arc<Subscriptions> {
        Arc::clone(
            &self
                .target
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Changes what a [`Subscriber`] is subscribed to while it runs
/// (docs/service.md#live-reload).
#[derive(Debug, Clone)]
pub struct SubscriptionHandle(Arc<Control>);

impl SubscriptionHandle {
    /// Subscribes what `next` has and the open connection lacks, and
    /// unsubscribes what it has and `next` lacks, on the same connection:
    /// a channel in both is never interrupted. Without an open connection
    /// the next (re)open subscribes `next`. A failed command is logged; the
    /// connection is then broken and its reconnect subscribes `next`.
    pub async fn change(&self, next: Arc<Subscriptions>) {
        let mut live = self.0.live.lock().await;
        *self
            .0
            .target
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::clone(&next);
        let Some((commands, subscribed)) = live.as_mut() else {
            if !next.is_empty() {
                self.0.changed.notify_one();
            }
            return;
        };
        let diff = [
            ("UNSUBSCRIBE", minus(&subscribed.channels, &next.channels)),
            ("PUNSUBSCRIBE", minus(&subscribed.patterns, &next.patterns)),
            ("SUBSCRIBE", minus(&next.channels, &subscribed.channels)),
            ("PSUBSCRIBE", minus(&next.patterns, &subscribed.patterns)),
        ];
        for (command, names) in diff {
            // An empty UNSUBSCRIBE would drop every channel.
            if names.is_empty() {
                continue;
            }
            if let Err(e) = commands.send_chunked(command, &names).await {
                tracing::warn!("cannot change the subscription ({command}: {e}); it is reopened");
            }
        }
        *subscribed = next;
    }

    /// What is to be subscribed now.
    pub fn subscriptions(&self) -> Arc<Subscriptions> {
        self.0.target()
    }
}

/// The names in `a` and not in `b`.
fn minus<'a>(a: &'a BTreeSet<String>, b: &BTreeSet<String>) -> Vec<&'a str> {
    a.iter()
        .filter(|name| !b.contains(*name))
        .map(String::as_str)
        .collect()
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("subs", &self.control.target())
            .field("open", &self.stream.is_some())
            .field("reconnect_at", &self.reconnect_at)
            .finish()
    }
}

impl Subscriber {
    pub fn new(client: redis::Client, tls: Tls, subs: Subscriptions) -> Self {
        let control = Control {
            target: std::sync::Mutex::new(Arc::new(subs)),
            live: tokio::sync::Mutex::new(None),
            changed: tokio::sync::Notify::new(),
        };
        Self {
            client,
            tls,
            control: Arc::new(control),
            stream: None,
            reconnect_at: None,
            backoff: Backoff::default(),
        }
    }

    /// The handle that changes the subscription at a reload.
    pub fn handle(&self) -> SubscriptionHandle {
        SubscriptionHandle(Arc::clone(&self.control))
    }

    /// Subscribes, unless there is nothing to subscribe to (then nothing at
    /// all is opened: idle costs nothing).
    pub async fn open(&mut self) {
        if self.control.target().is_empty() {
            tracing::info!("no live rules and no watched state: not subscribing to anything");
            return;
        }
        self.open_or_retry("cannot subscribe").await;
    }

    async fn open_or_retry(&mut self, what: &str) {
        if let Err(e) = self.try_open().await {
            let delay = self.backoff.next_delay();
            tracing::warn!("{what} ({e}); retrying in {}ms", delay.as_millis());
            self.reconnect_at = Some(tokio::time::Instant::now() + delay);
        }
    }

    async fn try_open(&mut self) -> Result<(), PubSubError> {
        let mut live = self.control.live.lock().await;
        let subs = self.control.target();
        let stream = open_pubsub(&self.client, &self.tls, &subs).await?;
        *live = Some((stream.commands(), subs));
        self.stream = Some(stream);
        self.reconnect_at = None;
        self.backoff = Backoff::default();
        Ok(())
    }

    /// The connection is gone: changes wait for the reopen.
    async fn lost(&mut self) {
        self.stream = None;
        *self.control.live.lock().await = None;
    }

    /// The next message, or `Restored` after a reconnect. With nothing
    /// subscribed, pending until a reload gives something to subscribe to
    /// ([`SubscriptionHandle::change`]). Not cancel-safe while a message is being
    /// read (the intake task never cancels it).
    pub async fn next(&mut self) -> Bus {
        loop {
            if let Some(stream) = self.stream.as_mut() {
                let error = match stream.next().await {
                    Ok(Delivery::Message(message)) => return Bus::Message(message),
                    Ok(Delivery::Oversized { channel, bytes }) => {
                        return Bus::Oversized { channel, bytes }
                    }
                    Err(e) => e,
                };
                self.lost().await;
                tracing::warn!(
                    "pub/sub connection lost ({error}); reconnecting. Triggers published while \
                     disconnected are not replayed"
                );
                self.reconnect_at = Some(tokio::time::Instant::now() + self.backoff.next_delay());
            }
            let Some(at) = self.reconnect_at else {
                // Nothing subscribed: wait until a reload gives something.
                self.control.changed.notified().await;
                if self.stream.is_none() && !self.control.target().is_empty() {
                    self.open_or_retry("cannot subscribe").await;
                }
                continue;
            };
            tokio::time::sleep_until(at).await;
            match self.try_open().await {
                Ok(()) => {
                    tracing::info!("pub/sub subscription restored");
                    return Bus::Restored;
                }
                Err(e) => {
                    let delay = self.backoff.next_delay();
                    tracing::warn!(
                        "cannot resubscribe ({e}); retrying in {}ms",
                        delay.as_millis()
                    );
                    self.reconnect_at = Some(tokio::time::Instant::now() + delay);
                }
            }
        }
    }

    /// What is (or is to be) subscribed.
    pub fn subscriptions(&self) -> Arc<Subscriptions> {
        self.control.target()
    }

    /// Whether the subscription is open now (`false` while a failed
    /// SUBSCRIBE is being retried).
    pub fn is_open(&self) -> bool {
        self.stream.is_some()
    }

    pub fn close(&mut self) {
        self.stream = None;
        self.reconnect_at = None;
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
    fn long_topics_are_clipped_at_a_character() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "abc...");
        assert_eq!(clip("aé", 2), "a...");
    }

    #[test]
    fn nothing_when_nothing_is_live() {
        let subs = Subscriptions::compute([].iter(), &BTreeSet::new());
        assert!(subs.is_empty());
    }

    #[test]
    fn exact_topics_subscribe_and_globs_psubscribe() {
        let subs = Subscriptions::compute(
            [p("alarm.triggered"), p("button.*"), p("a?[b].*")].iter(),
            &set(&["vehicle"]),
        );
        assert_eq!(subs.channels, set(&["ev:alarm.triggered", "vehicle"]));
        assert_eq!(subs.patterns, set(&["ev:a\\?\\[b\\].*", "ev:button.*"]));
    }

    #[test]
    fn covered_subscriptions_are_left_out() {
        let subs = Subscriptions::compute(
            [
                p("button.brake.*"),
                p("button.*"),
                p("button.seat"),
                p("buttons.x"),
            ]
            .iter(),
            &BTreeSet::new(),
        );
        assert_eq!(subs.patterns, set(&["ev:button.*"]));
        assert_eq!(subs.channels, set(&["ev:buttons.x"]));

        let any = Subscriptions::compute([p("x"), p("*"), p("y.*")].iter(), &set(&["vehicle"]));
        assert_eq!(any.patterns, set(&["ev:*"]));
        assert_eq!(any.channels, set(&["vehicle"]));
    }
}
