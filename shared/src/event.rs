//! The event envelope (docs/events.md), as published on `ev:<topic>`.

use crate::event_data::DataValue;
pub use crate::small_str::SmallStr;
use serde::{Deserialize, Serialize};

mod read;
mod write;
pub use write::needs_json_escape;

/// One event. Every field but `topic` may be absent; absent strings read as
/// `""` in `when` expressions. Its strings are [`SmallStr`]s: the short
/// ones, most of them, inline (docs/engine.md#reading-the-envelope).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Event {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<SmallStr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<i64>,
    pub topic: SmallStr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<SmallStr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<SmallStr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<SmallStr>,
    /// The `data` object, parsed once (docs/engine.md#the-48-mb-box);
    /// `Null` when absent.
    #[serde(default, skip_serializing_if = "DataValue::is_null")]
    pub data: DataValue,
}

/// Why a payload is not an event (docs/events.md#the-envelope).
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum EventError {
    #[error("not an event: expected {expected} at byte {at}")]
    Syntax { at: usize, expected: &'static str },
    #[error("not an event: `{field}` must be {expected}")]
    FieldType {
        field: &'static str,
        expected: &'static str,
    },
    #[error("not an event: `{field}` given twice")]
    RepeatedField { field: &'static str },
    #[error("not an event: it has no `topic`")]
    MissingTopic,
    #[error("`data` must be an object")]
    DataNotObject,
    #[error("an event must be a JSON object")]
    NotAnObject,
    /// On the bus the channel decides the topic (docs/events.md#the-channel-decides-the-topic).
    #[error("its `topic` differs from its channel's")]
    TopicMismatch { topic: String },
}

impl Event {
    /// Decodes an event given whole (its `topic` required). `data`, when
    /// present, must be an object. Read by hand, in one pass
    /// (`event/read.rs`; docs/engine.md#reading-the-envelope), with serde's rules.
    pub fn decode(payload: &[u8]) -> Result<Self, EventError> {
        let mut envelope = read::envelope(payload)?;
        let topic = envelope.topic.take().ok_or(EventError::MissingTopic)?;
        Self::from_envelope(envelope, topic)
    }

    /// The event of an envelope read whole, with its topic decided.
    fn from_envelope(envelope: read::Envelope, topic: SmallStr) -> Result<Self, EventError> {
        if !(envelope.data.is_null() || envelope.data.is_object()) {
            return Err(EventError::DataNotObject);
        }
        Ok(Self {
            id: envelope.id,
            ts: envelope.ts,
            topic,
            src: envelope.src,
            from: envelope.from,
            to: envelope.to,
            data: envelope.data,
        })
    }

    /// Decodes a payload published on the channel of `channel_topic`
    /// (docs/events.md#the-channel-decides-the-topic): an absent `topic` is
    /// the channel's; one that differs is refused, so a publisher on one
    /// channel cannot speak for another topic.
    pub fn decode_on_channel(channel_topic: &str, payload: &[u8]) -> Result<Self, EventError> {
        let mut envelope = read::envelope(payload)?;
        // `data` is checked before the topic, as it always was.
        if !(envelope.data.is_null() || envelope.data.is_object()) {
            return Err(EventError::DataNotObject);
        }
        let topic = match envelope.topic.take() {
            None => SmallStr::new(channel_topic),
            Some(topic) if topic == channel_topic => topic,
            Some(topic) => {
                return Err(EventError::TopicMismatch {
                    topic: topic.into(),
                })
            }
        };
        Self::from_envelope(envelope, topic)
    }

    /// The `src` of every event an input makes (docs/rules.md#inputs).
    pub const INPUT_SRC: &'static str = "adapter";

    /// The event a hash input makes when a watched field changed:
    /// `{topic, src: "adapter", from, to, data: {hash, field}}`
    /// (docs/rules.md#inputs). The one place such an event is built.
    pub fn hash_input(topic: &str, hash: &str, field: &str, from: &str, to: &str) -> Event {
        Event {
            topic: topic.into(),
            src: Some(Self::INPUT_SRC.into()),
            from: Some(from.into()),
            to: Some(to.into()),
            data: DataValue::object([
                ("hash", DataValue::Str(hash.into())),
                ("field", DataValue::Str(field.into())),
            ]),
            ..Event::default()
        }
    }

    /// The event a channel input makes for one message:
    /// `{topic, src: "adapter", data: {channel, payload}}`, `payload` the
    /// string or the decoded JSON value (docs/rules.md#inputs).
    pub fn channel_input(topic: &str, channel: &str, payload: serde_json::Value) -> Event {
        Event {
            topic: topic.into(),
            src: Some(Self::INPUT_SRC.into()),
            data: DataValue::object([
                ("channel", DataValue::Str(channel.into())),
                ("payload", DataValue::from(&payload)),
            ]),
            ..Event::default()
        }
    }

    pub fn src(&self) -> &str {
        self.src.as_deref().unwrap_or("")
    }
    pub fn from(&self) -> &str {
        self.from.as_deref().unwrap_or("")
    }
    pub fn to(&self) -> &str {
        self.to.as_deref().unwrap_or("")
    }
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or("")
    }

    /// Looks up `data.a.b` by its path segments (`["a", "b"]`).
    #[inline]
    pub fn data_at<'a, I>(&self, path: I) -> Option<&DataValue>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut value = &self.data;
        for key in path {
            value = value.as_object()?.get(key)?;
        }
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_full_and_minimal() {
        let full = br#"{"id":"e1","ts":1712345678901,"topic":"alarm.triggered","src":"alarm","from":"armed","to":"level-2-triggered","data":{"level":2,"x":{"y":"z"}}}"#;
        let event = Event::decode(full).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(event.topic, "alarm.triggered");
        assert_eq!(event.to(), "level-2-triggered");
        assert_eq!(event.data_at(["x", "y"]), Some(&DataValue::Str("z".into())));
        assert_eq!(event.data_at(["missing"]), None);

        let minimal = Event::decode(br#"{"topic":"t"}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(minimal.src(), "");
        assert!(minimal.data.is_null());
    }

    #[test]
    fn the_channel_decides_the_topic() {
        let decode = |payload: &[u8]| Event::decode_on_channel("seatbox.opened", payload);
        let absent = decode(br#"{"src":"seatbox","data":{"n":1}}"#);
        let absent = absent.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(absent.topic, "seatbox.opened");
        assert_eq!(absent.src(), "seatbox");
        assert_eq!(absent.data_at(["n"]), Some(&DataValue::Int(1)));
        let same = decode(br#"{"topic":"seatbox.opened","ts":5}"#);
        assert_eq!(same.map(|e| e.ts).ok(), Some(Some(5)));
        assert!(matches!(
            decode(br#"{"topic":"alarm.disarmed"}"#),
            Err(EventError::TopicMismatch { topic }) if topic == "alarm.disarmed"
        ));
        assert!(matches!(
            decode(br#"{"topic":""}"#),
            Err(EventError::TopicMismatch { .. })
        ));
        assert!(matches!(
            decode(br#"{"data":"x"}"#),
            Err(EventError::DataNotObject)
        ));
        assert!(decode(br#"{"topic":5}"#).is_err());
        assert!(matches!(decode(b" []"), Err(EventError::NotAnObject)));
        assert!(matches!(decode(b""), Err(EventError::NotAnObject)));
        assert!(decode(b" {}").is_ok());
    }

    #[test]
    fn rejects_bad_payloads() {
        assert!(Event::decode(b"not json").is_err());
        assert!(
            Event::decode(br#"{"id":"x"}"#).is_err(),
            "topic is required"
        );
        assert!(matches!(
            Event::decode(br#"{"topic":"t","data":[1]}"#),
            Err(EventError::DataNotObject)
        ));
    }
}
