//! `rulecore`: plain data and pure functions that the rule compiler (`rulec`)
//! and the runtime (`ruled`) agree on. Nothing here does I/O except the
//! bundle's atomic file write and [`input_file`] (reading an input file
//! whole, bounded), which both halves share.
//!
//! The bundle (docs/bundle.md) is [`bundle`] (the data model), [`codec`] (the
//! file: encode, checked decode, atomic write), [`payload_decode`] (the
//! payload decoded with exact-size vectors) and [`fingerprint`] (what a
//! step does, hashed). A `when` (docs/when-language.md) is a [`bytecode`] program,
//! checked once at load by [`verify`] (with the rule format's [`limits`]; its
//! types are [`when_types`], the compiler checker's too) and run by [`vm`]; a step's computed values (`${...}`) are [`template`]s run by
//! the same VM. The rest is small
//! shared vocabulary: Go [`duration`]s, [`topic`] patterns, the [`event`]
//! envelope and its parsed-once [`event_data`], [`suggest`] for "did you mean", and [`fuzz`] for the
//! randomized tests' seeds and generator.

pub mod bundle;
pub mod bytecode;
pub mod codec;
pub mod dump;
pub mod duration;
pub mod event;
pub mod event_data;
pub mod fingerprint;
pub mod fuzz;
pub mod input_file;
pub mod limits;
pub mod payload_decode;
pub mod profile;
pub mod rule_change;
pub mod schedule;
pub mod small_str;
pub mod suggest;
pub mod template;
pub mod topic;
pub mod value_pattern;
pub mod verify;
pub mod vm;
pub mod when_types;

pub use duration::{parse_duration, DurationError};
pub use topic::{TopicPattern, TopicPatternError};
