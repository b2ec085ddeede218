//! `v1.pending` (request: [`super::Page`]): the steps waiting for their
//! time, a page of them, and the running holds.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingReply {
    pub total: usize,
    pub offset: usize,
    pub limit: usize,
    pub steps: Vec<PendingStep>,
    /// Running holds (`for`): not steps, but what their rules wait for.
    pub holds: Vec<PendingHold>,
    #[serde(rename = "holds-total")]
    pub holds_total: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingStep {
    pub run: String,
    pub rule: String,
    pub step: u32,
    pub pass: u32,
    /// Unix ms.
    pub due: i64,
    pub durable: bool,
    /// A finally step (docs/semantics.md#finally).
    #[serde(default, skip_serializing_if = "super::is_false")]
    pub finally: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingHold {
    pub rule: String,
    /// Unix ms.
    pub due: i64,
    #[serde(rename = "left-ms")]
    pub left_ms: u64,
}
