//! The control protocol's typed requests and replies
//! (docs/operating.md#ruled-ctl), one file per method: what the server
//! builds its replies from, what `ruled ctl` reads them back through, and
//! what the contract tests read. The wire keeps its names, `lsc`'s
//! snake_case beside our kebab-case: each field that differs from its Rust
//! name says its wire name (docs/decisions.md, "The control protocol's
//! types keep the wire").
//!
//! Serialized through `serde_json::Value` (whose objects keep their keys in
//! sorted order), a reply is the same text as before it was typed.

mod add;
mod dry_run;
mod emit;
mod guards;
mod list;
mod page;
mod pending;
mod reload;
mod set_enabled;
mod show;
mod status;
mod trace;

pub use add::{AddReply, AddRequest};
pub use dry_run::{GuardProbe, StepLine, TestReply, TestRequest, Verdict, When};
pub use emit::{EmitReply, EmitRequest, Matched, EMIT_SHOWN};
pub use guards::{CoveredStep, GuardLine, GuardsReply, LimitLine};
pub use list::{Hold, ListReply, OverrideWithoutRule, RuleLine};
pub use page::{Empty, Named, Page, DEFAULT_LIMIT, MAX_LIMIT};
pub use pending::{PendingHold, PendingReply, PendingStep};
pub use reload::{OverrideInForce, ReloadReply};
pub use set_enabled::{SetEnabledReply, SetEnabledRequest};
pub use show::{KeyRunLine, RunLine, RunState, ShowReply};
pub use status::{
    BusFacts, LastRebuild, ProfileFacts, QueueFacts, RebuildRecord, RuleCount, ScheduleFacts,
    StatusReply, WorkerPool,
};
pub use trace::{Paged, TraceReply, TraceRequest};

/// For `skip_serializing_if`: a flag the wire carries only when set.
fn is_zero(count: &usize) -> bool {
    *count == 0
}

fn is_false(flag: &bool) -> bool {
    !flag
}

/// For a field whose presence says something even when it is `null`
/// (`Option<Option<T>>`: absent, `null`, a value); with `default`.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}
