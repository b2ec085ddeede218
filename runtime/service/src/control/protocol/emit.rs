//! `v1.emit`: an event handed to the running rules as if it came from the
//! bus, never published on it (docs/operating.md#handing-the-rules-an-event).
//! It changes state (runs start), so it is a mutation: refused unsigned
//! where the bus would refuse the event, and under `--control-mutations
//! signed` (docs/operating.md#trust).

use super::{Verdict, When};
use rulecore::vm::Read;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmitRequest {
    pub topic: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The event's `data` object; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmitReply {
    pub topic: String,
    /// The matched rules' verdicts, in the order they were handled: the
    /// first [`EMIT_SHOWN`].
    pub matched: Vec<Matched>,
    /// Rules whose `on` matched, in all.
    #[serde(rename = "matched-total")]
    pub matched_total: usize,
    /// Runs the event started (among those shown).
    pub started: usize,
}

/// Matched rules an emit's reply lists at most.
pub const EMIT_SHOWN: usize = 100;

/// One matched rule: what `decide` said, the run it started, and its
/// `when`'s result with what it read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Matched {
    pub rule: String,
    pub verdict: Verdict,
    /// The run the event started (`start`, `restart`), while it is live.
    pub run: Option<String>,
    /// The rule's `when` for the event; absent: it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<When>,
    /// What the rule's `when` read (docs/operating.md#what-a-when-read).
    #[serde(rename = "when-read", default, skip_serializing_if = "Vec::is_empty")]
    pub when_read: Vec<Read>,
}
