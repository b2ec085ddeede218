//! `ruled`: the rule runtime.
//!
//! - [`engine`]: a pure, synchronous state machine (no I/O, no clock, no
//!   tokio). It is fed inputs with `now` and answers with effects.
//! - [`sim`]: the same engine on a virtual clock with a virtual worker pool
//!   and record store (`rulec simulate`, DESIGN.md 8).
//! - `service` (cargo feature, on by default): tokio + Redis + processes,
//!   performing the engine's effects.

pub mod engine;
#[cfg(feature = "service")]
pub mod service;
pub mod sim;
