//! `v1.add`: a rule file written into the rules directory
//! (docs/operating.md#adding-a-rule); `lsc`'s mutation reply
//! (docs/operating.md#the-fields-lsc-reads) and the file written.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddRequest {
    /// The rule file's text.
    pub definition: String,
    /// The revision the client read; absent or empty: no check.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expected_revision: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddReply {
    pub name: String,
    pub revision: String,
    pub pending_restart: bool,
    pub message: String,
    /// The path written.
    pub file: String,
}
