//! The engine's configuration and its defaults.

use crate::{BusMode, SourceSet, DEFAULT_TRACES, DEFAULT_TRACE_MEMORY};

/// Default replay window (docs/semantics.md#durability-and-replay): 5 minutes.
pub const DEFAULT_REPLAY_WINDOW_MS: i64 = 5 * 60 * 1000;

/// Default `queue` backlog per rule (docs/semantics.md#handling-one-event).
pub const DEFAULT_QUEUE_BACKLOG: usize = 8;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// How far past due a replayed record may be; negative means zero.
    pub replay_window_ms: i64,
    /// Triggers a `queue` rule holds while its run is live.
    pub queue_backlog: usize,
    /// The process epoch in run ids `<rule>#<epoch>-<n>`: it must differ
    /// from every earlier process's (the service uses its start time).
    pub epoch: String,
    /// Note every non-fire decision ([`crate::Note::NonFire`]): for
    /// `rulec simulate --explain` and traces (docs/simulation.md#explain).
    /// Off, the engine notes nothing per non-matching event.
    pub explain: bool,
    /// Runs traced per rule (docs/semantics.md#traces); 0 turns traces off.
    pub traces: usize,
    /// The byte budget of all traces together; the oldest go first.
    pub trace_memory: usize,
    /// `--bus own|follow` (docs/service.md#the-bus).
    pub bus: BusMode,
    /// `--sources all|used` (docs/sources.md#choosing-a-profile).
    pub sources: SourceSet,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            replay_window_ms: DEFAULT_REPLAY_WINDOW_MS,
            queue_backlog: DEFAULT_QUEUE_BACKLOG,
            epoch: "0".to_string(),
            explain: false,
            traces: DEFAULT_TRACES,
            bus: BusMode::default(),
            sources: SourceSet::default(),
            trace_memory: DEFAULT_TRACE_MEMORY,
        }
    }
}
