//! `v1.list` (request: [`super::Page`]): a page of the loaded rules, each
//! as a [`RuleLine`], and the stored overrides that name no rule.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListReply {
    pub rules: Vec<RuleLine>,
    pub total: usize,
    pub revision: String,
    pub applied_revision: String,
    pub pending_restart: bool,
    /// The overrides without a rule, said in words where `lsc` shows them.
    pub diagnostics: Vec<String>,
    pub offset: usize,
    pub limit: usize,
    #[serde(rename = "overrides-without-rule-count")]
    pub overrides_without_rule_count: usize,
    /// The first few of them, by name.
    #[serde(rename = "overrides-without-rule")]
    pub overrides_without_rule: Vec<OverrideWithoutRule>,
}

/// A stored override naming no rule of the loaded bundle (kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideWithoutRule {
    pub name: String,
    /// `enabled` or `disabled`.
    #[serde(rename = "override")]
    pub state: String,
}

/// One rule's line in `v1.list`, and `v1.show`'s `rule` and `state`. The
/// snake_case fields are `lsc`'s RuleSummary
/// (docs/operating.md#the-fields-lsc-reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleLine {
    pub name: String,
    pub source: String,
    /// The result: the bundle's `enabled` unless overridden.
    pub enabled: bool,
    /// docs/operating.md#trust.
    pub protected: bool,
    /// Every rule listed is one of the loaded bundle.
    pub loaded: bool,
    /// Unix ms; 0 for never, as `lsc` reads it.
    pub last_fire: i64,
    pub errors: u64,
    pub active_runs: u8,
    pub diagnostics: Vec<String>,
    #[serde(rename = "bundle-enabled")]
    pub bundle_enabled: bool,
    /// `enabled` or `disabled`; `None`: no override.
    #[serde(rename = "override")]
    pub override_state: Option<String>,
    #[serde(rename = "live-runs")]
    pub live_runs: u8,
    #[serde(rename = "waiting-steps")]
    pub waiting_steps: u8,
    /// Unix ms; `None` for never.
    #[serde(rename = "last-fire")]
    pub last_fire_ms: Option<i64>,
    pub runs: u64,
    pub hold: Option<Hold>,
}

/// A rule's hold (`for`, docs/semantics.md#hold): running with its due
/// time (Unix ms) and what is left, or fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Hold {
    Running {
        due: i64,
        #[serde(rename = "left-ms")]
        left_ms: u64,
    },
    Fired,
}
