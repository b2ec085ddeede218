//! `ruled`: the rule runtime.
//!
//! - [`engine`]: a pure, synchronous state machine (no I/O, no clock, no
//!   tokio). It is fed inputs with `now` and answers with effects.
//! - `service` (cargo feature, on by default): tokio + Redis + processes,
//!   performing the engine's effects.

pub mod engine;
#[cfg(feature = "service")]
pub mod service;
