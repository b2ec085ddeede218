//! `v1.reload` (request: [`super::Empty`]): the bundle file read again and
//! what changed; answered by the driver (docs/operating.md#deploying-a-new-bundle).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReply {
    pub bundle: String,
    pub previous: String,
    /// The file holds the loaded bundle: nothing changed.
    pub unchanged: bool,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    #[serde(rename = "runs-kept")]
    pub runs_kept: usize,
    #[serde(rename = "runs-ended")]
    pub runs_ended: usize,
    /// Subscribed now.
    pub channels: usize,
    pub patterns: usize,
    pub overrides: Vec<OverrideInForce>,
}

/// An override in force after the reload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideInForce {
    pub name: String,
    /// `enabled` or `disabled`.
    #[serde(rename = "override")]
    pub state: String,
    /// What the bundle says; `None`: the bundle has no such rule.
    #[serde(rename = "bundle-enabled")]
    pub bundle_enabled: Option<bool>,
    /// The override says otherwise than the bundle.
    pub contradicts: bool,
}
