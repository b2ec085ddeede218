//! `rulec`: loads TOML rule files, checks them with precise diagnostics,
//! compiles them to a bundle, and dumps or simulates bundles. The binary in
//! `main.rs` only parses flags and calls into this library.

pub mod build;
pub mod check;
pub mod cli;
pub mod diagnostic;
pub mod dump;
pub mod load;
pub mod rulefile;
pub mod schema;
pub mod simulate;
pub mod span;
pub mod validate;
pub mod when;
