//! A bus profile as the bundle carries it (docs/sources.md): the sources
//! that turn datastore changes into events, and the polls of fields
//! nobody announces. Written by `rulec` from a profile directory
//! (`profiles/librescoot/` is built in); the engine derives events from it
//! (`ruled_engine::derive`). Part of no step fingerprint.

use crate::bytecode::Program;
use crate::value_pattern::ValuePattern;
use serde::{Deserialize, Serialize};

/// The profile a bundle was built with; absent for `--profile none`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// `name` of the profile's `profile.toml` (`librescoot`).
    pub name: String,
    /// blake3 of the profile's files (names and contents, in name order),
    /// hex: two bundles built with the same profile carry the same digest.
    pub digest: String,
    /// In declaration order: the order events of one change are emitted in
    /// follows it.
    pub sources: Vec<Source>,
    pub polls: Vec<Poll>,
}

impl Profile {
    /// Every topic any source can emit, sorted and distinct: the topics
    /// `ruled --bus own` owns (docs/sources.md#owned-topics).
    pub fn topics(&self) -> Vec<&str> {
        let mut topics: Vec<&str> = self
            .sources
            .iter()
            .flat_map(|source| source.emits.iter().map(|emit| emit.topic.as_str()))
            .collect();
        topics.sort_unstable();
        topics.dedup();
        topics
    }
}

/// One `[[source]]`: where a change comes from and the events it emits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    pub origin: Origin,
    pub changes: Changes,
    pub emits: Vec<Emit>,
}

/// Where a source's changes come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Origin {
    /// A hash field, announced by `PUBLISH <hash> <field>` and read back
    /// (or polled); `read` names other fields of the same hash read in the
    /// same `HMGET` at the notification (for `data`).
    Field {
        hash: String,
        field: String,
        read: Vec<String>,
    },
    /// A raw pub/sub channel; the message is the change.
    Channel { channel: String },
}

/// Which notifications of a field emit (docs/sources.md#changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Changes {
    /// Only a real change: a value different from the last one. A first
    /// value (none before) is the baseline and emits nothing.
    Distinct,
    /// Every notification whose field holds a value, equal or not, first
    /// or not (keycard taps).
    Every,
}

/// One `[[source.emit]]`: a topic and when it is emitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Emit {
    pub topic: String,
    /// The previous value matches one of these (empty: any).
    pub from: Vec<ValuePattern>,
    /// The new value matches one of these (empty: any).
    pub to: Vec<ValuePattern>,
    /// A channel source's message matches one of these (empty: any).
    pub payload: Vec<ValuePattern>,
    /// Further condition, a `when` program over the change
    /// (docs/sources.md#the-change-as-an-expression-sees-it).
    pub when: Option<Program>,
    /// The event's `data`, in key order.
    pub data: Vec<(String, DataSpec)>,
    /// `false` for a channel source: the event carries no `from`/`to`.
    pub from_to: bool,
}

/// Where one `data` value comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum DataSpec {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// The previous value, the new value, or the channel message, as a string.
    From,
    To,
    Payload,
    /// Another field of the same hash, read with the notification (one of
    /// the origin's `read`); the key is absent when the field is.
    Field(String),
    /// A `when` expression's value (string, int, float or bool); the key
    /// is absent when it gives an error or an empty value.
    Expr(Program),
}

/// Fields read on an interval (docs/sources.md#polls), only while a live
/// rule needs one of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Poll {
    pub hash: String,
    pub fields: Vec<String>,
    /// At least [`MIN_POLL_NS`].
    pub every_ns: u64,
}

/// The shortest poll interval: 100 ms.
pub const MIN_POLL_NS: u64 = 100_000_000;
