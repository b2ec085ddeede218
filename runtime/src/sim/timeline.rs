//! The timeline format (DESIGN.md 8). The caller parses the TOML (with
//! `toml::from_str`); this module only defines the shape and checks it.

use rulecore::event::Event;
use serde::{Deserialize, Deserializer};

/// A Go duration string (`"30s"`, `"-1h"`), as signed nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub i64);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        rulecore::parse_duration(&text)
            .map(Dur)
            .map_err(|error| serde::de::Error::custom(format!("duration {text:?}: {error}")))
    }
}

/// A whole timeline file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Timeline {
    #[serde(default)]
    pub event: Vec<EventEntry>,
    #[serde(default)]
    pub state: Vec<StateEntry>,
    #[serde(default)]
    pub restart: Vec<RestartEntry>,
    #[serde(default)]
    pub fail: Vec<FailEntry>,
    #[serde(default)]
    pub clock: Vec<ClockEntry>,
    /// Stop after this; default: when nothing is pending.
    pub end: Option<Dur>,
    /// Default 5m.
    pub replay_window: Option<Dur>,
    /// Default 2.
    pub workers: Option<usize>,
    /// Default 256.
    pub queue: Option<usize>,
    /// How long each action takes; default 0s.
    pub action_time: Option<Dur>,
}

/// `[[event]]`: an event arriving on the bus.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventEntry {
    pub at: Dur,
    pub topic: String,
    pub id: Option<String>,
    pub src: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub data: Option<serde_json::Value>,
}

impl EventEntry {
    pub fn to_event(&self) -> Event {
        Event {
            id: self.id.clone(),
            ts: None,
            topic: self.topic.clone(),
            src: self.src.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            data: self.data.clone().unwrap_or(serde_json::Value::Null),
        }
    }
}

/// `[[state]]`: a hash field changing in the datastore.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateEntry {
    pub at: Dur,
    pub hash: String,
    pub field: String,
    pub value: String,
}

/// `[[restart]]`: the service stops at `at` and starts again `down` later.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartEntry {
    pub at: Dur,
    pub down: Dur,
}

/// `[[fail]]`: actions of `rule` (and `step`, when given) started in
/// `[at, until)` fail.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailEntry {
    pub at: Dur,
    pub rule: String,
    pub step: Option<u32>,
    pub until: Option<Dur>,
}

/// `[[clock]]`: the wall clock jumps by `jump` (may be negative).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockEntry {
    pub at: Dur,
    pub jump: Dur,
}

/// A timeline that parsed but cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimelineError {
    #[error("[[{kind}]] entry {index}: `{key}` must not be negative")]
    Negative {
        kind: &'static str,
        index: usize,
        key: &'static str,
    },
    #[error("[[event]] entry {index}: `data` must be a table")]
    DataNotTable { index: usize },
    #[error("`{key}` must not be negative")]
    NegativeSetting { key: &'static str },
    #[error("`workers` must be at least 1")]
    NoWorkers,
    #[error("[[fail]] entry {index}: no rule named {rule:?} in the simulated rules")]
    UnknownFailRule { index: usize, rule: String },
}

impl Timeline {
    /// Checks what serde cannot: signs, and `data` being a table.
    pub fn validate(&self) -> Result<(), TimelineError> {
        fn at(kind: &'static str, index: usize, at: Dur) -> Result<(), TimelineError> {
            if at.0 < 0 {
                return Err(TimelineError::Negative {
                    kind,
                    index,
                    key: "at",
                });
            }
            Ok(())
        }
        for (index, entry) in self.event.iter().enumerate() {
            at("event", index, entry.at)?;
            if let Some(data) = &entry.data {
                if !data.is_object() {
                    return Err(TimelineError::DataNotTable { index });
                }
            }
        }
        for (index, entry) in self.state.iter().enumerate() {
            at("state", index, entry.at)?;
        }
        for (index, entry) in self.restart.iter().enumerate() {
            at("restart", index, entry.at)?;
            if entry.down.0 < 0 {
                return Err(TimelineError::Negative {
                    kind: "restart",
                    index,
                    key: "down",
                });
            }
        }
        for (index, entry) in self.fail.iter().enumerate() {
            at("fail", index, entry.at)?;
        }
        for (index, entry) in self.clock.iter().enumerate() {
            at("clock", index, entry.at)?;
        }
        for (key, value) in [("end", self.end), ("action-time", self.action_time)] {
            if value.is_some_and(|d| d.0 < 0) {
                return Err(TimelineError::NegativeSetting { key });
            }
        }
        if self.workers == Some(0) {
            return Err(TimelineError::NoWorkers);
        }
        Ok(())
    }
}
