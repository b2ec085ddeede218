//! The pending record (docs/semantics.md#durability-and-replay): one field of the Redis hash
//! `extensions:pending` per waiting durable step, keyed by the run id.

use crate::effect::ReplayDropReason;
use crate::time::Now;
use rulecore::bundle::Fingerprint;
use rulecore::event::Event;
use serde::{Deserialize, Serialize};

/// The Redis hash that holds pending records in the default namespace;
/// `ruled --namespace NS` uses `NS:pending` (docs/service.md#key-namespace).
pub const PENDING_HASH: &str = "extensions:pending";

/// The JSON value of one pending record:
/// `{"id", "rule", "source", "step", "iter", "fire-at", "fingerprint", "event"}`,
/// and `"key"` when the rule is keyed (`per`, docs/rules.md#keyed-runs). A
/// record without `key` (written before keys existed, or by an unkeyed
/// rule) reads as it always did; one with it resumes on that key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingRecord {
    /// The run id, `<rule>#<epoch>-<n>`; also the hash field.
    pub id: String,
    pub rule: String,
    /// The rule file the rule came from (for people reading Redis).
    pub source: String,
    /// Step index.
    pub step: u32,
    /// 0-based repeat pass.
    pub iter: u32,
    /// When the step is due, Unix milliseconds.
    #[serde(rename = "fire-at")]
    pub fire_at: i64,
    /// The step's fingerprint, 32 lowercase hex characters.
    pub fingerprint: String,
    /// The event that triggered the run.
    pub event: Event,
    /// The run's key, for a rule with `per`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A replay decided and not yet fully acted on ([`crate::Engine::replay_start`]):
/// the records still to act on and what to do with each, both in
/// reverse (fire-at, id) order (the next one last).
#[derive(Debug)]
pub struct Replay {
    pub(crate) now: Now,
    pub(crate) records: Vec<PendingRecord>,
    pub(crate) actions: Vec<ReplayAction>,
}

/// What replay does with a record: resume it as a run of the rule at
/// that position, or remove it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReplayAction {
    Resume(usize),
    Remove(ReplayDropReason),
}

/// Why a stored record could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("pending record is not valid JSON of the expected shape: {0}")]
    Json(#[from] serde_json::Error),
    #[error("pending record's `id` {id:?} differs from its hash field {field:?}")]
    IdMismatch { field: String, id: String },
    #[error("pending record's event `data` is not an object")]
    DataNotObject,
    /// A JSON object in another program's format that names a rule: the
    /// Go event-service's waiting step, left in `NS:pending` by a
    /// migration (docs/service.md#migrating-from-event-service).
    #[error("pending record in another program's format (event-service's?) for rule {rule:?}, due {due}: it cannot resume here")]
    Foreign { rule: String, due: String },
}

impl RecordError {
    /// A stable short name for log fields (`reason=not-a-record`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Json(_) => "not-a-record",
            Self::IdMismatch { .. } => "id-mismatch",
            Self::DataNotObject => "data-not-object",
            Self::Foreign { .. } => "foreign",
        }
    }
}

impl PendingRecord {
    pub fn encode(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    pub fn decode(json: &[u8]) -> Result<Self, RecordError> {
        let record: PendingRecord = match serde_json::from_slice(json) {
            Ok(record) => record,
            Err(error) => return Err(foreign(json).unwrap_or(RecordError::Json(error))),
        };
        if !(record.event.data.is_null() || record.event.data.is_object()) {
            return Err(RecordError::DataNotObject);
        }
        Ok(record)
    }

    /// Decodes the value stored under hash field `field`, which must be the
    /// record's own id.
    pub fn decode_field(field: &str, json: &[u8]) -> Result<Self, RecordError> {
        let record = Self::decode(json)?;
        if record.id != field {
            return Err(RecordError::IdMismatch {
                field: field.to_string(),
                id: record.id,
            });
        }
        Ok(record)
    }
}

/// The keys of another program's record naming its rule, and its due
/// time, tried in this order (docs/service.md#migrating-from-event-service).
const FOREIGN_RULE_KEYS: &[&str] = &["rule", "rule_name"];
const FOREIGN_DUE_KEYS: &[&str] = &["due", "fire_at", "deadline"];
/// How much of a foreign record's rule name and due time is kept.
const FOREIGN_TEXT_CHARS: usize = 128;

/// A value that is not our record but a JSON object without our own keys
/// (`fire-at`, `fingerprint`) naming a rule as a string: another program's
/// waiting step. Only read once our format failed.
fn foreign(json: &[u8]) -> Option<RecordError> {
    let serde_json::Value::Object(object) = serde_json::from_slice(json).ok()? else {
        return None;
    };
    if object.contains_key("fire-at") || object.contains_key("fingerprint") {
        return None;
    }
    let rule = FOREIGN_RULE_KEYS
        .iter()
        .find_map(|key| object.get(*key)?.as_str())?;
    let due = FOREIGN_DUE_KEYS
        .iter()
        .find_map(|key| match object.get(*key)? {
            serde_json::Value::String(text) => Some(text.clone()),
            serde_json::Value::Number(number) => Some(number.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| "unknown".to_string());
    let cut = |text: &str| -> String {
        text.chars()
            .take(FOREIGN_TEXT_CHARS)
            .map(|c| if c.is_control() { '?' } else { c })
            .collect()
    };
    Some(RecordError::Foreign {
        rule: cut(rule),
        due: cut(&due),
    })
}

/// Serialises like [`PendingRecord`] without cloning the event.
#[derive(Serialize)]
pub(crate) struct RecordRef<'a> {
    pub id: &'a str,
    pub rule: &'a str,
    pub source: &'a str,
    pub step: u32,
    pub iter: u32,
    #[serde(rename = "fire-at")]
    pub fire_at: i64,
    pub fingerprint: &'a str,
    pub event: &'a Event,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<&'a str>,
}

/// Whether a record's `fingerprint` (32 lowercase hex characters) is
/// `fingerprint`, compared without formatting it.
pub(crate) fn same_fingerprint(hex: &str, fingerprint: &Fingerprint) -> bool {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    hex.len() == 2 * fingerprint.0.len()
        && hex
            .as_bytes()
            .chunks_exact(2)
            .zip(fingerprint.0)
            .all(|(pair, byte)| {
                matches!((digit(pair[0]), digit(pair[1])), (Some(high), Some(low)) if high << 4 | low == byte)
            })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_matches_its_own_hex_only() {
        let fingerprint = Fingerprint([0xab, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x9c]);
        let hex = fingerprint.to_string();
        assert!(same_fingerprint(&hex, &fingerprint));
        assert!(!same_fingerprint(&hex.to_uppercase(), &fingerprint));
        assert!(!same_fingerprint(&hex[..30], &fingerprint));
        assert!(!same_fingerprint(&format!("{hex}00"), &fingerprint));
        let other = Fingerprint([0xab, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x9d]);
        assert!(!same_fingerprint(&hex, &other));
        assert!(!same_fingerprint(&"zz".repeat(16), &fingerprint));
    }

    #[test]
    fn another_program_s_record_naming_a_rule_is_foreign() {
        let foreign = |json: &str| match PendingRecord::decode(json.as_bytes()) {
            Err(RecordError::Foreign { rule, due }) => Some((rule, due)),
            _ => None,
        };
        assert_eq!(
            foreign(r#"{"rule":"a","due":12}"#),
            Some(("a".into(), "12".into()))
        );
        assert_eq!(
            foreign(r#"{"rule_name":"b","deadline":"soon"}"#),
            Some(("b".into(), "soon".into()))
        );
        assert_eq!(
            foreign(r#"{"rule":"c"}"#),
            Some(("c".into(), "unknown".into()))
        );
        let long = format!(r#"{{"rule":"{}\n"}}"#, "x".repeat(500));
        let (rule, _) = foreign(&long).unwrap_or_default();
        assert_eq!(rule.chars().count(), FOREIGN_TEXT_CHARS);
        // Not foreign: no rule named, not an object, or our own keys.
        assert_eq!(foreign(r#"{"name":"a"}"#), None);
        assert_eq!(foreign(r#"{"rule":7}"#), None);
        assert_eq!(foreign(r#"["rule"]"#), None);
        assert_eq!(foreign(r#"{"rule":"a","fire-at":1}"#), None);
        let error = PendingRecord::decode(br#"{"rule":"a","due":1}"#).err();
        assert_eq!(error.map(|e| e.code()), Some("foreign"));
    }

    #[test]
    fn round_trips_with_the_design_field_names() {
        let record = PendingRecord {
            key: None,
            id: "r#e-1".into(),
            rule: "r".into(),
            source: "a.toml".into(),
            step: 1,
            iter: 2,
            fire_at: 1_712_345_678_901,
            fingerprint: "00".repeat(16),
            event: Event {
                topic: "alarm.triggered".into(),
                ..Event::default()
            },
        };
        let json = record.encode().unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let mut keys: Vec<_> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "event",
                "fingerprint",
                "fire-at",
                "id",
                "iter",
                "rule",
                "source",
                "step"
            ]
        );
        assert_eq!(PendingRecord::decode(json.as_bytes()).unwrap(), record);
        assert!(PendingRecord::decode_field("r#e-1", json.as_bytes()).is_ok());
        assert!(matches!(
            PendingRecord::decode_field("other", json.as_bytes()),
            Err(RecordError::IdMismatch { .. })
        ));
        assert!(matches!(
            PendingRecord::decode(b"{\"id\":1}"),
            Err(RecordError::Json(_))
        ));
    }
}
