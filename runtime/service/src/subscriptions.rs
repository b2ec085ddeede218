//! The pub/sub side (docs/semantics.md#events, docs/events.md, docs/semantics.md#state, docs/service.md#start-and-stop): what to subscribe to, the
//! subscription itself, and the [`Subscriber`] that reopens it with backoff
//! after a lost connection.

use crate::connection::Backoff;
use crate::pubsub::{Commands, Delivery, Name, PubSub, PubSubError, MAX_MESSAGE_BYTES};
use crate::tls::Tls;
use rulecore::bundle::Payload;
use rulecore::event::{Event, EventError};
use rulecore::topic::{Subscription, TopicPattern, EVENT_CHANNEL_PREFIX};
use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

/// The longest topic handled (docs/service.md#subscriptions); vehicle
/// topics are a few dozen bytes.
pub(crate) const MAX_TOPIC_BYTES: usize = 1024;

/// Where an exact topic sits in the payload: rule `rule`, pattern `slot`
/// of its `on` patterns followed by its `cancel-on` patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TopicAt {
    rule: u32,
    slot: u32,
}

/// What to subscribe to: exact channels (SUBSCRIBE) and globs (PSUBSCRIBE).
///
/// The event channels of exact topics, one per rule in a large bundle,
/// are held as positions in the payload that owns their topics (8 bytes
/// each, sorted by topic), never as copies: 100,000 of them as strings in
/// a set took some 8 MB. The set keeps that payload alive while it is
/// subscribed (until a reload's change is sent).
#[derive(Debug, Clone, Default)]
pub struct Subscriptions {
    /// The owner of `topics`' topics (`None` with no topics).
    payload: Option<Arc<Payload>>,
    /// Exact event topics, sorted by topic, each once; channel `ev:<topic>`.
    topics: Box<[TopicAt]>,
    /// Other channels, subscribed exactly: state hashes, input channels.
    channels: BTreeSet<String>,
    /// Globs (PSUBSCRIBE).
    patterns: BTreeSet<String>,
}

impl Subscriptions {
    /// The subscriptions for the `on` + `cancel-on` patterns of `payload`'s
    /// rules that `live` says are on (docs/semantics.md#events), and the
    /// `channels` subscribed as they are (watched state hashes,
    /// docs/semantics.md#state, and input channels).
    ///
    /// Redis delivers a message once per matching subscription, so a topic
    /// covered by two subscriptions would reach the engine twice. Channels
    /// and globs that a broader glob already covers are therefore left out:
    /// every topic matches at most one subscription.
    pub fn compute(
        payload: &Arc<Payload>,
        live: impl Fn(usize) -> bool,
        channels: BTreeSet<String>,
    ) -> Self {
        Self::compute_refusing(payload, live, channels, |_| false)
    }

    /// [`Subscriptions::compute`], leaving out the exact topics `refused`
    /// says never come from the bus (owned and `input.*` topics,
    /// docs/service.md#the-bus); globs stay, and what they deliver of
    /// those topics is dropped by the driver.
    pub fn compute_refusing(
        payload: &Arc<Payload>,
        live: impl Fn(usize) -> bool,
        channels: BTreeSet<String>,
        refused: impl Fn(&str) -> bool,
    ) -> Self {
        let patterns = || live_patterns(payload, &live);
        let any = patterns().any(|(_, p)| matches!(p, TopicPattern::Any));
        let mut prefixes: Vec<&str> = patterns()
            .filter_map(|(_, p)| match p {
                TopicPattern::Prefix(prefix) => Some(&prefix[..]),
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
        let mut out = Self {
            channels,
            ..Self::default()
        };
        if any {
            if let Subscription::Pattern(glob) = TopicPattern::Any.subscription() {
                out.patterns.insert(glob);
            }
            return out;
        }
        for prefix in &kept {
            if let Subscription::Pattern(glob) =
                TopicPattern::Prefix((*prefix).into()).subscription()
            {
                out.patterns.insert(glob);
            }
        }
        let mut topics: Vec<TopicAt> = patterns()
            .filter(|(_, p)| match p {
                TopicPattern::Exact(topic) => {
                    !kept.iter().any(|k| topic.starts_with(k)) && !refused(topic)
                }
                _ => false,
            })
            .map(|(at, _)| at)
            .collect();
        topics.sort_unstable_by(|a, b| topic(payload, *a).cmp(topic(payload, *b)));
        topics.dedup_by(|a, b| topic(payload, *a) == topic(payload, *b));
        if !topics.is_empty() {
            out.topics = topics.into_boxed_slice();
            out.payload = Some(Arc::clone(payload));
        }
        // A channel named like a subscribed event channel is subscribed once.
        let mut channels = std::mem::take(&mut out.channels);
        channels.retain(|channel| {
            channel
                .strip_prefix(EVENT_CHANNEL_PREFIX)
                .is_none_or(|t| out.find_topic(t).is_none())
        });
        out.channels = channels;
        out
    }

    pub fn is_empty(&self) -> bool {
        self.topics.is_empty() && self.channels.is_empty() && self.patterns.is_empty()
    }

    /// How many channels are subscribed exactly.
    pub fn channel_count(&self) -> usize {
        self.topics.len() + self.channels.len()
    }

    /// How many globs are subscribed.
    pub fn pattern_count(&self) -> usize {
        self.patterns.len()
    }

    /// Every channel subscribed exactly: event channels in topic order,
    /// then the others.
    pub fn channels(&self) -> impl Iterator<Item = Name<'_>> + Clone + Send {
        let event = self.topics.iter().map(|at| Name {
            prefix: EVENT_CHANNEL_PREFIX,
            rest: self.topic(*at),
        });
        event.chain(self.channels.iter().map(|c| Name::plain(c)))
    }

    /// Every glob.
    pub fn patterns(&self) -> impl Iterator<Item = Name<'_>> + Clone + Send {
        self.patterns.iter().map(|p| Name::plain(p))
    }

    /// Whether channel `name` is subscribed exactly.
    fn has_channel(&self, name: Name<'_>) -> bool {
        let event_topic = if name.prefix == EVENT_CHANNEL_PREFIX {
            Some(name.rest)
        } else if name.prefix.is_empty() {
            name.rest.strip_prefix(EVENT_CHANNEL_PREFIX)
        } else {
            None
        };
        if event_topic.is_some_and(|topic| self.find_topic(topic).is_some()) {
            return true;
        }
        if name.prefix.is_empty() {
            return self.channels.contains(name.rest);
        }
        // Compared in parts: no name is built for the lookup.
        self.channels
            .range::<str, _>((Bound::Included(name.prefix), Bound::Unbounded))
            .take_while(|channel| channel.starts_with(name.prefix))
            .any(|channel| &channel[name.prefix.len()..] == name.rest)
    }

    /// Whether glob `name` is subscribed.
    fn has_pattern(&self, name: Name<'_>) -> bool {
        name.prefix.is_empty() && self.patterns.contains(name.rest)
    }

    fn find_topic(&self, wanted: &str) -> Option<usize> {
        self.topics
            .binary_search_by(|at| self.topic(*at).cmp(wanted))
            .ok()
    }

    fn topic(&self, at: TopicAt) -> &str {
        self.payload
            .as_deref()
            .map_or("", |payload| topic(payload, at))
    }
}

/// The same channels and globs, wherever their names are held.
impl PartialEq for Subscriptions {
    fn eq(&self, other: &Self) -> bool {
        self.channel_count() == other.channel_count()
            && self.patterns == other.patterns
            && self.channels().all(|name| other.has_channel(name))
    }
}

impl Eq for Subscriptions {}

/// The `on` and `cancel-on` patterns of the rules `live` says are on, with
/// where each sits (repeats included).
fn live_patterns<'p, L: Fn(usize) -> bool>(
    payload: &'p Payload,
    live: &'p L,
) -> impl Iterator<Item = (TopicAt, &'p TopicPattern)> + 'p {
    (0u32..)
        .zip(&payload.rules)
        .filter(move |(index, _)| live(*index as usize))
        .flat_map(|(rule, r)| {
            (0u32..)
                .zip(r.on.iter().chain(r.cancel_on().iter()))
                .map(move |(slot, pattern)| (TopicAt { rule, slot }, pattern))
        })
}

/// The exact topic at `at` ("" for any other place: never the case for a
/// place [`Subscriptions::compute`] took from the same payload).
fn topic(payload: &Payload, at: TopicAt) -> &str {
    let Some(rule) = payload.rules.get(at.rule as usize) else {
        return "";
    };
    let slot = at.slot as usize;
    let pattern = match slot.checked_sub(rule.on.len()) {
        None => rule.on.get(slot),
        Some(cancel) => rule.cancel_on().get(cancel),
    };
    match pattern {
        Some(TopicPattern::Exact(topic)) => topic,
        _ => "",
    }
}
/// Opens a pub/sub connection ([`PubSub`]) to `client`'s server (over
/// `tls` for a `rediss://` URL) and subscribes to `subs`.
pub async fn open_pubsub(
    client: &redis::Client,
    tls: &Tls,
    subs: &Subscriptions,
) -> Result<PubSub, PubSubError> {
    PubSub::open(
        client.get_connection_info(),
        tls,
        subs.channels(),
        subs.patterns(),
    )
    .await
}

/// What the bus said.
#[derive(Debug)]
pub enum Bus {
    Message(crate::pubsub::Message),
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
    pub fn read(message: &crate::pubsub::Message) -> Self {
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
        let (old, new) = (&**subscribed, &*next);
        send_missing(commands, "UNSUBSCRIBE", old.channels(), |n| {
            new.has_channel(n)
        })
        .await;
        send_missing(commands, "PUNSUBSCRIBE", old.patterns(), |n| {
            new.has_pattern(n)
        })
        .await;
        send_missing(commands, "SUBSCRIBE", new.channels(), |n| {
            old.has_channel(n)
        })
        .await;
        send_missing(commands, "PSUBSCRIBE", new.patterns(), |n| {
            old.has_pattern(n)
        })
        .await;
        *subscribed = next;
    }

    /// What is to be subscribed now.
    pub fn subscriptions(&self) -> Arc<Subscriptions> {
        self.0.target()
    }
}

/// Sends `command` for the `names` that `other_has` says the other set
/// lacks. A failure is logged: the connection is then broken, and its
/// reconnect subscribes what is to be subscribed.
async fn send_missing<'a>(
    commands: &Commands,
    command: &str,
    names: impl Iterator<Item = Name<'a>> + Send,
    other_has: impl Fn(Name<'a>) -> bool + Send,
) {
    // Collected before the await: a filter over borrowed names held across
    // it would keep the future from being `Send` (the driver is a task).
    let missing: Vec<Name<'a>> = names.filter(|name| !other_has(*name)).collect();
    if let Err(e) = commands.send_chunked(command, missing).await {
        tracing::warn!("cannot change the subscription ({command}: {e}); it is reopened");
    }
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
    use rulecore::bundle::{Action, Rule, Step};

    fn p(text: &str) -> TopicPattern {
        TopicPattern::parse(text).unwrap()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    /// One rule per entry: its `on` patterns, then its `cancel-on` ones.
    fn payload(rules: &[(&[&str], &[&str])]) -> Arc<Payload> {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, (on, cancel_on))| {
                let step = Step::new(Action::redis("list", "x"), 0);
                let mut rule = Rule::new(
                    format!("r{i}"),
                    "test.toml",
                    on.iter().map(|t| p(t)).collect(),
                    vec![step],
                );
                rule.options_mut().cancel_on = cancel_on.iter().map(|t| p(t)).collect();
                rule
            })
            .collect();
        Arc::new(Payload::new("test", rules, Vec::new(), Vec::new()))
    }

    fn on(patterns: &[&[&str]]) -> Arc<Payload> {
        let rules: Vec<(&[&str], &[&str])> = patterns.iter().map(|on| (*on, &[][..])).collect();
        payload(&rules)
    }

    fn all(_: usize) -> bool {
        true
    }

    fn names<'a>(names: impl Iterator<Item = Name<'a>>) -> Vec<String> {
        names.map(|n| format!("{}{}", n.prefix, n.rest)).collect()
    }

    #[test]
    fn long_topics_are_clipped_at_a_character() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "abc...");
        assert_eq!(clip("aé", 2), "a...");
    }

    #[test]
    fn nothing_when_nothing_is_live() {
        let subs = Subscriptions::compute(&on(&[]), all, BTreeSet::new());
        assert!(subs.is_empty());
        let off = Subscriptions::compute(&on(&[&["a"], &["b.*"]]), |_| false, BTreeSet::new());
        assert!(off.is_empty());
        assert_eq!(off.channel_count() + off.pattern_count(), 0);
    }

    #[test]
    fn exact_topics_subscribe_and_globs_psubscribe() {
        let payload = on(&[&["alarm.triggered", "button.*"], &["a?[b].*"]]);
        let subs = Subscriptions::compute(&payload, all, set(&["vehicle"]));
        assert_eq!(names(subs.channels()), ["ev:alarm.triggered", "vehicle"]);
        assert_eq!(names(subs.patterns()), ["ev:a\\?\\[b\\].*", "ev:button.*"]);
        assert_eq!((subs.channel_count(), subs.pattern_count()), (2, 2));
    }

    #[test]
    fn covered_subscriptions_are_left_out() {
        let payload = on(&[
            &["button.brake.*", "button.*"],
            &["button.seat"],
            &["buttons.x"],
        ]);
        let subs = Subscriptions::compute(&payload, all, BTreeSet::new());
        assert_eq!(names(subs.patterns()), ["ev:button.*"]);
        assert_eq!(names(subs.channels()), ["ev:buttons.x"]);

        let payload = on(&[&["x"], &["*"], &["y.*"]]);
        let any = Subscriptions::compute(&payload, all, set(&["vehicle"]));
        assert_eq!(names(any.patterns()), ["ev:*"]);
        assert_eq!(names(any.channels()), ["vehicle"]);
    }

    #[test]
    fn each_topic_once_in_order_from_live_rules_only() {
        let payload = payload(&[
            (&["c", "a"], &["b"]),
            (&["b"], &["d", "a"]),
            (&["off"], &["also-off"]),
        ]);
        let subs = Subscriptions::compute(&payload, |rule| rule != 2, set(&["ev:a", "ev:z"]));
        // `ev:a` the channel is the topic's channel: subscribed once.
        assert_eq!(
            names(subs.channels()),
            ["ev:a", "ev:b", "ev:c", "ev:d", "ev:z"]
        );
        assert!(subs.has_channel(Name::plain("ev:c")));
        assert!(subs.has_channel(Name {
            prefix: EVENT_CHANNEL_PREFIX,
            rest: "z"
        }));
        assert!(!subs.has_channel(Name::plain("ev:off")));
        assert!(!subs.has_channel(Name::plain("z")));
    }

    #[test]
    fn equal_whichever_payload_holds_the_topics() {
        let one = Subscriptions::compute(&on(&[&["a"], &["b"]]), all, set(&["h"]));
        let other = Subscriptions::compute(&on(&[&["b", "a"]]), all, set(&["h"]));
        assert_eq!(one, other);
        // The same channel as a topic or as a channel given apart.
        let apart = Subscriptions::compute(&on(&[&["b"]]), all, set(&["ev:a", "h"]));
        assert_eq!(one, apart);
        let fewer = Subscriptions::compute(&on(&[&["a"]]), all, set(&["h"]));
        assert_ne!(one, fewer);
        assert_ne!(fewer, one);
    }
}
