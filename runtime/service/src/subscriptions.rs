//! The pub/sub side (docs/semantics.md#events, docs/events.md, docs/semantics.md#state, docs/service.md#start-and-stop): what to subscribe to, the
//! subscription itself, and the [`Subscriber`] that reopens it with backoff
//! after a lost connection.

use crate::connection::Backoff;
use crate::pubsub::{Delivery, PubSub, PubSubError, MAX_MESSAGE_BYTES};
use crate::tls::Tls;
use rulecore::event::{Event, EventError};
use rulecore::topic::{Subscription, TopicPattern, EVENT_CHANNEL_PREFIX};
use std::collections::BTreeSet;

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
    subs: Subscriptions,
    stream: Option<PubSub>,
    reconnect_at: Option<tokio::time::Instant>,
    backoff: Backoff,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("subs", &self.subs)
            .field("open", &self.stream.is_some())
            .field("reconnect_at", &self.reconnect_at)
            .finish()
    }
}

impl Subscriber {
    pub fn new(client: redis::Client, tls: Tls, subs: Subscriptions) -> Self {
        Self {
            client,
            tls,
            subs,
            stream: None,
            reconnect_at: None,
            backoff: Backoff::default(),
        }
    }

    /// Subscribes, unless there is nothing to subscribe to (then nothing at
    /// all is opened: idle costs nothing).
    pub async fn open(&mut self) {
        if self.subs.is_empty() {
            tracing::info!("no live rules and no watched state: not subscribing to anything");
            return;
        }
        if let Err(e) = self.try_open().await {
            let delay = self.backoff.next_delay();
            tracing::warn!(
                "cannot subscribe ({e}); retrying in {}ms",
                delay.as_millis()
            );
            self.reconnect_at = Some(tokio::time::Instant::now() + delay);
        }
    }

    async fn try_open(&mut self) -> Result<(), PubSubError> {
        let stream = open_pubsub(&self.client, &self.tls, &self.subs).await?;
        self.stream = Some(stream);
        self.reconnect_at = None;
        self.backoff = Backoff::default();
        Ok(())
    }

    /// The next message, or `Restored` after a reconnect. Pending forever
    /// when nothing is subscribed. Not cancel-safe while a message is being
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
                self.stream = None;
                tracing::warn!(
                    "pub/sub connection lost ({error}); reconnecting. Triggers published while \
                     disconnected are not replayed"
                );
                self.reconnect_at = Some(tokio::time::Instant::now() + self.backoff.next_delay());
            }
            let Some(at) = self.reconnect_at else {
                return std::future::pending().await;
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
    pub fn subscriptions(&self) -> &Subscriptions {
        &self.subs
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
}
