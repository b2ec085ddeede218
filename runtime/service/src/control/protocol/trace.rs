//! `v1.trace {name?, offset?, limit?}`: one rule's traces, or every traced
//! rule's (docs/semantics.md#traces). With a name the page is over the
//! rule's runs (its last non-fire on every page); without, over the
//! traced rules.

use super::DEFAULT_LIMIT;
use ruled_engine::RuleTrace;
use serde::{Deserialize, Serialize};

fn default_limit() -> usize {
    DEFAULT_LIMIT
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    /// One rule's; `None`: every traced rule's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub offset: usize,
    #[serde(default = "default_limit")]
    pub limit: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceReply {
    pub traces: Vec<RuleTrace>,
    /// What `total`, `offset` and `limit` count.
    pub paged: Paged,
    pub total: usize,
    pub offset: usize,
    pub limit: usize,
}

/// What a trace reply's page is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Paged {
    /// One rule's runs.
    Runs,
    /// The traced rules.
    Rules,
}

impl Paged {
    /// The word on the wire, as `ruled ctl` prints it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Runs => "runs",
            Self::Rules => "rules",
        }
    }
}
