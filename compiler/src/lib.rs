//! `rulec`: loads TOML rule files, checks them with precise diagnostics,
//! compiles them to a bundle, and dumps or simulates bundles. The binary in
//! `main.rs` only parses flags and calls into this library.

pub mod when;
