//! `v1.status`: the service's facts and counters. The snake_case fields
//! are what `lsc ext status` reads (docs/operating.md#the-fields-lsc-reads);
//! the kebab-case ones are ours.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReply {
    pub version: String,
    pub api_version: u32,
    pub revision: String,
    pub applied_revision: String,
    pub pending_restart: bool,
    pub queue_depth: usize,
    pub queue_capacity: usize,
    pub workers: usize,
    pub busy_workers: usize,
    /// Each counter's value as a string, as `lsc` decodes them.
    pub counters: BTreeMap<String, String>,
    pub bundle: String,
    pub compiler: String,
    pub namespace: String,
    pub pid: u32,
    #[serde(rename = "uptime-ms")]
    pub uptime_ms: u64,
    #[serde(rename = "worker-pool")]
    pub worker_pool: WorkerPool,
    pub queue: QueueFacts,
    pub rules: RuleCount,
    #[serde(rename = "counter-values")]
    pub counter_values: BTreeMap<String, u64>,
    pub profile: Option<ProfileFacts>,
    pub bus: BusFacts,
    /// Read by the control server beside the engine's answer
    /// (docs/operating.md#the-last-rebuild); `null`: none recorded.
    #[serde(rename = "last-rebuild", default)]
    pub last_rebuild: Option<LastRebuild>,
    /// Each schedule key's next fire (docs/rules.md#schedules), soonest
    /// first; absent when no rule has one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<ScheduleFacts>,
    /// The pending file's records wait for the wall clock to pass its
    /// write time (docs/service.md#the-pending-file); absent when not.
    #[serde(
        rename = "replay-held",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub replay_held: bool,
}

/// One rule's `at` or `every`, and when it fires next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleFacts {
    pub rule: String,
    /// `time.at` or `time.every`.
    pub topic: String,
    /// The next fire's `data.at`, local time.
    pub at: String,
    /// The next fire, Unix ms.
    #[serde(rename = "next-fire-ms")]
    pub next_fire_ms: i64,
    /// The local time zone it is read in.
    pub timezone: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPool {
    pub busy: usize,
    pub total: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueFacts {
    pub depth: usize,
    pub capacity: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleCount {
    pub total: usize,
}

/// The bus profile the bundle was built for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileFacts {
    pub name: String,
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BusFacts {
    pub mode: String,
    /// `--sources all|used`.
    pub sources: String,
    #[serde(rename = "watched-hashes")]
    pub watched_hashes: usize,
    pub polls: usize,
    #[serde(rename = "owned-topics")]
    pub owned_topics: usize,
}

/// The last rebuild of the rules directory, or why it was not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LastRebuild {
    Recorded(RebuildRecord),
    Unreadable { unreadable: String },
}

/// What `NS:rebuild` holds (docs/operating.md#the-last-rebuild).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildRecord {
    #[serde(rename = "at-ms")]
    pub at_ms: i64,
    pub ok: bool,
    #[serde(rename = "first-error")]
    pub first_error: Option<String>,
    pub errors: Option<u64>,
    pub warnings: Option<u64>,
    pub bundle: Option<String>,
    pub rules: Option<u64>,
}
