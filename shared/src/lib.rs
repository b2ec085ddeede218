//! `rulecore`: plain data and pure functions that the rule compiler (`rulec`)
//! and the runtime (`ruled`) agree on. Nothing here does I/O: no files, no
//! environment, no terminal (`cargo xtask invariants` checks it). Reading
//! and writing files is `rulecore-io`'s; the randomized tests' seeds are the
//! dev-only `test-kit`'s.
//!
//! The bundle (docs/bundle.md) is [`bundle`] (the data model), [`codec`] (the
//! file's bytes: encode, checked decode), [`payload_decode`] (the
//! payload decoded with exact-size vectors) and [`fingerprint`] (what a
//! step does, hashed). A `when` (docs/when-language.md) is a [`bytecode`] program,
//! checked once at load by [`verify`] (with the rule format's [`limits`]; its
//! types are [`when_types`], the compiler checker's too) and run by [`vm`]; a step's computed values (`${...}`) are [`template`]s run by
//! the same VM. The rest is small
//! shared vocabulary: Go [`duration`]s, [`topic`] patterns, the [`event`]
//! envelope and its parsed-once [`event_data`] and [`suggest`] for "did you mean".

pub mod bundle;
pub mod bytecode;
pub mod codec;
pub mod dump;
pub mod duration;
pub mod envelope;
pub mod event;
pub mod event_data;
pub mod fingerprint;
pub mod limits;
pub mod payload_decode;
pub mod profile;
pub mod rule_change;
pub mod schedule;
pub mod small_str;
pub mod suggest;
pub mod template;
pub mod text;
pub mod topic;
pub mod value_pattern;
pub mod verify;
pub mod vm;
pub mod when_types;

pub use duration::{parse_duration, DurationError};
pub use topic::{TopicPattern, TopicPatternError};
