//! `v1.guards` (request: [`super::Empty`]): the bundle's safety envelope
//! (docs/safety.md), every guard and limit with where it was declared and
//! what it covers; `ruled ctl guards`. [`CoveredStep`] is `v1.show`'s
//! part of it: which of the rule's steps a guard or limit covers.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardsReply {
    /// The profile's first, then the rules directory's, in declaration
    /// order.
    pub guards: Vec<GuardLine>,
    pub limits: Vec<LimitLine>,
}

/// One `[[guard]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardLine {
    pub name: String,
    /// The profile file or rule file that declared it.
    pub file: String,
    /// Declared by the profile (else by the rules directory).
    #[serde(rename = "from-profile")]
    pub from_profile: bool,
    /// What it covers, as docs/safety.md's tables write it:
    /// `scooter:hardware [handlebar:lock, engine:off]`.
    pub covers: String,
    /// The condition under which a covered action is performed, as written.
    pub when: String,
    /// The `state()` fields it reads fresh at the action, `hash field`.
    pub reads: Vec<String>,
    /// The dashboard toast on a refusal; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub say: Option<String>,
}

/// One `[[limit]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitLine {
    pub name: String,
    pub file: String,
    #[serde(rename = "from-profile")]
    pub from_profile: bool,
    pub covers: String,
    /// At most this many covered actions in any window of `per-ms`.
    pub max: u32,
    #[serde(rename = "per-ms")]
    pub per_ms: u64,
}

/// One step of a rule that a guard or limit covers (`v1.show`'s
/// `envelope`). A step whose value is computed (`${...}`) names every
/// guard and limit of its list or channel: which of them judge it depends
/// on the value computed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoveredStep {
    /// Its index among the rule's steps, or among its finally steps.
    pub step: u32,
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub finally: bool,
    /// The guards judging it at the action.
    pub guards: Vec<String>,
    /// The limits counting it.
    pub limits: Vec<String>,
}
