//! Inputs (docs/semantics.md#inputs): the one definition of what a
//! `[[rule.input]]` does at run time. Which hash fields are watched (the
//! bundle's state pairs, then every input field not among them), which
//! topics a change of each makes, which raw channels are read, and how a
//! channel message becomes an event or is skipped. The engine calls
//! [`Inputs::hash_events`] and [`Inputs::channel_events`] and handles the
//! events like any other; the service and the simulator only deliver
//! values and messages.

use crate::effect::{Effect, Level, LogLine};
use crate::{Engine, Now};
use rulecore::bundle::{InputSource, Payload, PayloadFormat, StatePair};
use rulecore::event::Event;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The stable log code of a skipped channel message.
pub const INPUT_SKIPPED_CODE: &str = "input-skipped";

/// One live channel input: its topic and how it reads a message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ChannelInput {
    topic: Arc<str>,
    format: PayloadFormat,
    max_bytes: usize,
}

/// The inputs of a bundle, as the engine runs them.
#[derive(Debug, Default)]
pub(crate) struct Inputs {
    /// The bundle's state pairs first (same indices), then the input
    /// fields not among them.
    watched: Vec<StatePair>,
    /// Per watched pair, the distinct topics of the live rules' hash
    /// inputs over it, in declaration order.
    topics: Vec<Vec<Arc<str>>>,
    /// The live rules' channel inputs by channel, distinct.
    channels: BTreeMap<Box<str>, Vec<ChannelInput>>,
    /// How many of `watched` are the state pairs and inputs' fields; the
    /// profile's fields follow (docs/sources.md).
    own_pairs: usize,
}

impl Inputs {
    pub(crate) fn new(payload: &Payload) -> Self {
        let mut inputs = Inputs {
            watched: payload.state_pairs.clone(),
            ..Inputs::default()
        };
        // Every input's fields feed `state()`, a disabled rule's too.
        for input in &payload.inputs {
            if let InputSource::Hash { hash, fields } = &input.source {
                for field in fields {
                    inputs.watch(hash, field);
                }
            }
        }
        inputs.topics = vec![Vec::new(); inputs.watched.len()];
        // Only the live rules' inputs make events.
        let mut live: Vec<usize> = payload
            .rules
            .iter()
            .filter(|rule| rule.enabled)
            .flat_map(|rule| rule.inputs().iter())
            .filter_map(|&index| usize::try_from(index).ok())
            .collect();
        live.sort_unstable();
        live.dedup();
        for input in live.iter().filter_map(|&index| payload.inputs.get(index)) {
            let Some(topic) = input.topic.as_deref() else {
                continue;
            };
            match &input.source {
                InputSource::Hash { hash, fields } => {
                    for field in fields {
                        let index = inputs.watch(hash, field);
                        let topics = &mut inputs.topics[index];
                        if !topics.iter().any(|known| &**known == topic) {
                            topics.push(topic.into());
                        }
                    }
                }
                InputSource::Channel {
                    channel,
                    format,
                    max_bytes,
                } => {
                    let reader = ChannelInput {
                        topic: topic.into(),
                        format: *format,
                        max_bytes: usize::try_from(*max_bytes).unwrap_or(usize::MAX),
                    };
                    let readers = inputs.channels.entry(channel.as_str().into()).or_default();
                    if !readers.contains(&reader) {
                        readers.push(reader);
                    }
                }
            }
        }
        inputs.own_pairs = inputs.watched.len();
        for pair in crate::derive::profile_pairs(payload) {
            inputs.watch(&pair.hash, &pair.field);
        }
        inputs
    }

    /// How many watched pairs are the bundle's state pairs and its
    /// inputs' fields (always watched); the profile's fields follow.
    pub(crate) fn own_pairs(&self) -> usize {
        self.own_pairs
    }

    /// The index of `(hash, field)` among the watched pairs, added if new.
    fn watch(&mut self, hash: &str, field: &str) -> usize {
        if let Some(index) = self.index(hash, field) {
            return index;
        }
        self.watched.push(StatePair {
            hash: hash.to_string(),
            field: field.to_string(),
        });
        self.topics.push(Vec::new());
        self.watched.len() - 1
    }

    pub(crate) fn index(&self, hash: &str, field: &str) -> Option<usize> {
        self.watched
            .iter()
            .position(|pair| pair.hash == hash && pair.field == field)
    }

    /// Every watched pair: what the service seeds and keeps current.
    pub(crate) fn watched(&self) -> &[StatePair] {
        &self.watched
    }

    /// The raw channels the live rules' inputs read, sorted.
    pub(crate) fn channels(&self) -> impl Iterator<Item = &str> + '_ {
        self.channels.keys().map(|channel| &**channel)
    }

    /// The events a live change of watched pair `index` from `old` to
    /// `new` makes: one per distinct topic over the pair, none when the
    /// value did not change (docs/semantics.md#inputs).
    pub(crate) fn hash_events(&self, index: usize, old: &str, new: &str) -> Vec<Event> {
        let (Some(pair), Some(topics)) = (self.watched.get(index), self.topics.get(index)) else {
            return Vec::new();
        };
        if old == new {
            return Vec::new();
        }
        topics
            .iter()
            .map(|topic| Event::hash_input(topic, &pair.hash, &pair.field, old, new))
            .collect()
    }

    /// The events one message on `channel` makes, and a log line for
    /// each input that skipped it: too large for its `max-bytes`, or not
    /// JSON for a `json` input. The line gives the size and the reason,
    /// never the payload.
    pub(crate) fn channel_events(
        &self,
        channel: &str,
        payload: &[u8],
        logs: &mut Vec<LogLine>,
    ) -> Vec<Event> {
        let Some(readers) = self.channels.get(channel) else {
            return Vec::new();
        };
        let mut events = Vec::with_capacity(readers.len());
        for reader in readers {
            let decoded = if payload.len() > reader.max_bytes {
                Err(format!("over its max-bytes of {}", reader.max_bytes))
            } else {
                decode(reader.format, payload)
            };
            match decoded {
                Ok(value) => events.push(Event::channel_input(&reader.topic, channel, value)),
                Err(why) => logs.push(LogLine {
                    level: Level::Warn,
                    rule: None,
                    step: None,
                    finally: false,
                    run: None,
                    code: Some(INPUT_SKIPPED_CODE),
                    message: format!(
                        "input channel {channel} (topic {}): message of {} bytes skipped: {why}",
                        reader.topic,
                        payload.len()
                    ),
                }),
            }
        }
        events
    }
}

/// `data.payload` of a message: the text, or the decoded JSON value.
fn decode(format: PayloadFormat, payload: &[u8]) -> Result<serde_json::Value, String> {
    match format {
        PayloadFormat::String => Ok(serde_json::Value::String(
            String::from_utf8_lossy(payload).into_owned(),
        )),
        // serde_json's message names line and column, never the input.
        PayloadFormat::Json => {
            serde_json::from_slice(payload).map_err(|error| format!("not JSON ({error})"))
        }
    }
}

/// The engine fed its inputs: state seeded or changed, channel messages.
impl Engine {
    /// A watched pair's value as read at start (seeding), or re-read
    /// without a change notification; `index` into
    /// [`Engine::watched_pairs`]. It makes no input event
    /// (docs/semantics.md#inputs). Out-of-range indices are ignored.
    pub fn state_changed(&mut self, index: usize, value: String) {
        if let Some(slot) = self.state.get_mut(index) {
            *slot = value;
            self.bus.present[index] = true;
            self.hold_state_changed(index, None);
        }
    }

    /// A watched pair's value after a change notification (a live
    /// change): it is stored like [`Engine::state_changed`], then every
    /// live hash input over the pair whose value differs from the last
    /// observed one dispatches its event (docs/semantics.md#inputs).
    pub fn field_changed(&mut self, now: Now, index: usize, value: String) {
        let Some(slot) = self.state.get_mut(index) else {
            return;
        };
        let old = std::mem::replace(slot, value);
        // A field that changed to a value is there, as a read says.
        if let Some(present) = self.bus.present.get_mut(index) {
            *present = true;
        }
        self.hold_state_changed(index, Some(now));
        let events = self.inputs.hash_events(index, &old, &self.state[index]);
        for event in events {
            self.handle_event(now, event);
        }
    }

    /// A message on a raw channel that a live rule's input reads
    /// (docs/semantics.md#inputs): each input on the channel makes its
    /// event, or skips the message with a log line.
    pub fn channel_message(&mut self, now: Now, channel: &str, payload: &[u8]) {
        let mut logs = Vec::new();
        let events = self.inputs.channel_events(channel, payload, &mut logs);
        self.effects.extend(logs.into_iter().map(Effect::Log));
        for event in events {
            self.handle_event(now, event);
        }
        self.channel_derived(now, channel, payload);
    }

    /// Every pair the service seeds and keeps current: the bundle's
    /// `state_pairs` (same indices), then the inputs' hash fields not
    /// among them.
    pub fn watched_pairs(&self) -> &[rulecore::bundle::StatePair] {
        self.inputs.watched()
    }

    /// The raw channels the live rules' inputs read, sorted: subscribed
    /// to exactly (docs/semantics.md#inputs).
    pub fn input_channels(&self) -> Vec<String> {
        let mut channels: Vec<String> = self
            .inputs
            .channels()
            .chain(self.source_channels())
            .map(str::to_string)
            .collect();
        channels.sort_unstable();
        channels.dedup();
        channels
    }

    /// The index of `(hash, field)` in [`Engine::watched_pairs`].
    pub fn state_index(&self, hash: &str, field: &str) -> Option<usize> {
        self.inputs.index(hash, field)
    }

    /// Sets a watched pair by name, as seeding does; returns `false` if
    /// the bundle does not watch it.
    pub fn set_state(&mut self, hash: &str, field: &str, value: String) -> bool {
        match self.state_index(hash, field) {
            Some(index) => {
                self.state_changed(index, value);
                true
            }
            None => false,
        }
    }

    /// [`Engine::field_changed`] by name: a live change of a watched
    /// pair; `false` if the bundle does not watch it.
    pub fn set_field(&mut self, now: Now, hash: &str, field: &str, value: String) -> bool {
        match self.state_index(hash, field) {
            Some(index) => {
                self.field_changed(now, index, value);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rulecore::bundle::{Action, Input, Rule, Step};
    use rulecore::event_data::DataValue;
    use rulecore::TopicPattern;

    fn payload(inputs: Vec<Input>, enabled: bool) -> Payload {
        let on = vec![TopicPattern::parse("input.*").unwrap_or(TopicPattern::Any)];
        let mut rule = Rule::new(
            "r",
            "a.toml",
            on,
            vec![Step::new(Action::redis("l", "x"), 0)],
        );
        rule.enabled = enabled;
        rule.options_mut().inputs = (0..inputs.len())
            .filter_map(|i| u32::try_from(i).ok())
            .collect();
        let mut payload = Payload::new(
            "test",
            vec![rule],
            vec![StatePair {
                hash: "vehicle".into(),
                field: "state".into(),
            }],
            Vec::new(),
        );
        payload.inputs = inputs;
        payload
    }

    fn hash(fields: &[&str], topic: Option<&str>) -> Input {
        Input {
            source: InputSource::Hash {
                hash: "vehicle".into(),
                fields: fields.iter().map(|f| f.to_string()).collect(),
            },
            topic: topic.map(str::to_string),
        }
    }

    fn channel(format: PayloadFormat, max_bytes: u32) -> Input {
        Input {
            source: InputSource::Channel {
                channel: "accessory:report".into(),
                format,
                max_bytes,
            },
            topic: Some("input.report".into()),
        }
    }

    #[test]
    fn state_pairs_keep_their_indices_and_input_fields_follow() {
        let inputs = Inputs::new(&payload(
            vec![hash(&["state", "engine-power"], Some("input.p"))],
            true,
        ));
        let names: Vec<&str> = inputs.watched().iter().map(|p| p.field.as_str()).collect();
        assert_eq!(names, ["state", "engine-power"]);
        let events = inputs.hash_events(1, "", "on");
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].from(), events[0].to()), ("", "on"));
        assert_eq!(events[0].src(), "adapter");
        assert_eq!(
            events[0].data_at(["field"]),
            Some(&DataValue::Str("engine-power".into()))
        );
        assert!(inputs.hash_events(1, "on", "on").is_empty(), "equal values");
    }

    #[test]
    fn shared_declarations_make_one_event_and_disabled_rules_none() {
        let same = hash(&["engine-power"], Some("input.p"));
        let inputs = Inputs::new(&payload(vec![same.clone(), same.clone()], true));
        assert_eq!(inputs.hash_events(1, "off", "on").len(), 1);
        let disabled = Inputs::new(&payload(vec![same], false));
        assert_eq!(disabled.watched().len(), 2, "fields still feed state()");
        assert!(disabled.hash_events(1, "off", "on").is_empty());
        assert_eq!(disabled.channels().count(), 0);
    }

    #[test]
    fn channel_messages_decode_or_are_skipped_without_the_payload() {
        let inputs = Inputs::new(&payload(vec![channel(PayloadFormat::Json, 16)], true));
        let mut logs = Vec::new();
        let events = inputs.channel_events("accessory:report", br#"{"status":"ok"}"#, &mut logs);
        assert_eq!(
            events[0].data_at(["payload", "status"]),
            Some(&DataValue::Str("ok".into()))
        );
        let secret = b"{secret-not-json";
        assert!(inputs
            .channel_events("accessory:report", secret, &mut logs)
            .is_empty());
        let big = br#"{"status":"far too long for it"}"#;
        assert!(inputs
            .channel_events("accessory:report", big, &mut logs)
            .is_empty());
        assert_eq!(logs.len(), 2);
        assert!(
            logs[0].message.contains("16 bytes skipped: not JSON"),
            "{}",
            logs[0].message
        );
        assert!(
            logs[1].message.contains("over its max-bytes of 16"),
            "{}",
            logs[1].message
        );
        assert!(logs.iter().all(|log| !log.message.contains("secret")));
        let text = Inputs::new(&payload(vec![channel(PayloadFormat::String, 4096)], true));
        let events = text.channel_events("accessory:report", b"plain", &mut logs);
        assert_eq!(
            events[0].data_at(["payload"]),
            Some(&DataValue::Str("plain".into()))
        );
    }
}
