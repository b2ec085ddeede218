//! `rulecore`: plain data and pure functions that the rule compiler (`rulec`)
//! and the runtime (`ruled`) agree on. Nothing here does I/O except the
//! bundle's atomic file write, which both halves share.

pub mod bundle;
pub mod bytecode;
pub mod codec;
pub mod duration;
pub mod event;
pub mod fingerprint;
pub mod fuzz;
pub mod suggest;
pub mod topic;
pub mod verify;
pub mod vm;

pub use duration::{parse_duration, DurationError};
pub use topic::{TopicPattern, TopicPatternError};
