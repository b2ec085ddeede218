//! `v1.set-enabled`: a rule turned off or on, kept across restarts, or its
//! override removed (`enabled = null`). The snake_case fields and
//! `message` are `lsc`'s mutation reply
//! (docs/operating.md#the-fields-lsc-reads).

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetEnabledRequest {
    pub name: String,
    /// `true`, `false`, or `null` to remove the override; required (a
    /// `Value`, so an absent field is an error, not a removal, and any
    /// other value gets the method's own answer).
    pub enabled: Value,
    /// The revision the client read (docs/operating.md#revisions); absent
    /// or empty: no check.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expected_revision: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetEnabledReply {
    pub name: String,
    pub revision: String,
    pub pending_restart: bool,
    pub message: String,
    /// The rule's state now; `None` after removing the override of a rule
    /// the bundle lacks.
    pub enabled: Option<bool>,
    pub changed: bool,
    /// A removal only: the override now, always `null`.
    #[serde(
        rename = "override",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::present"
    )]
    pub override_state: Option<Option<String>>,
    /// A removal only: the override removed (`enabled`, `disabled`), or
    /// `null` when there was none. Absent: an override was set.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::present"
    )]
    pub removed: Option<Option<String>>,
    /// The id of the rule's live run, which finishes when it is turned off.
    #[serde(rename = "live-run")]
    pub live_run: Option<String>,
}
