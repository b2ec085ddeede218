//! The requests several methods share: a page, a rule's name, nothing.

use serde::{Deserialize, Serialize};

/// Rules or steps per page unless asked otherwise, and at most.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1000;

fn default_limit() -> usize {
    DEFAULT_LIMIT
}

/// `v1.list` and `v1.pending`'s request: `{offset?, limit?}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Page {
    #[serde(default)]
    pub offset: usize,
    #[serde(default = "default_limit")]
    pub limit: usize,
}

impl Page {
    /// The page, or why its `limit` is refused.
    pub fn checked(self) -> Result<Self, String> {
        if self.limit == 0 || self.limit > MAX_LIMIT {
            return Err(format!(
                "`limit` must be 1 to {MAX_LIMIT}, not {}",
                self.limit
            ));
        }
        Ok(self)
    }
}

/// `v1.show`'s request: `{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Named {
    pub name: String,
}

/// `v1.status` and `v1.reload`'s request: `{}` (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}
