//! `rulec`: loads TOML rule files, checks them with precise diagnostics,
//! compiles them to a bundle, and dumps or simulates bundles. The binary in
//! `main.rs` only parses flags and calls into this library.
//!
//! Where to start reading (docs/rules.md, docs/when-language.md, docs/bundle.md, docs/rulec.md), in the order a rules
//! directory travels:
//!
//! 1. [`load`] reads the `*.toml` files; [`rulefile`] parses each with spans
//!    and rejects whole files (TOML syntax, unknown keys); [`keys`] is the
//!    table of every key the format has.
//! 2. [`validate`] checks every rule and step key and, through [`when`], each
//!    `when` expression; problems become [`diagnostic`]s, positioned by
//!    [`span`].
//! 3. [`session`] is the one front door: a `Session` runs steps 1 and 2
//!    for every subcommand and the language server, and its report lowers
//!    the surviving rules into a bundle ([`build`], `rulec build`), with the
//!    data model, codec, VM and verifier in `rulecore`; [`check`] prints the
//!    report (`rulec check`).
//! 4. [`dump`] prints a bundle, [`simulate`] replays a timeline against one
//!    on the runtime's engine, [`schema`] prints the rule file JSON Schema;
//!    [`cli`] holds the flags they share.
//! 5. The tools for authors and CI: [`rule_test`] (`rulec test`) checks
//!    timelines' expectations,
//!    [`diff`] compares two rule sets for a deploy, [`fix`] rewrites `when`
//!    written for the Go event-service; [`lsp`] is the language server
//!    that editors start (`rulec lsp`), on the same checks.

pub mod build;
pub mod check;
pub mod cli;
pub mod diagnostic;
pub mod diff;
pub mod dump;
pub mod envelope;
pub mod fix;
pub mod keys;
pub mod load;
pub mod lsp;
pub mod profile;
pub mod rule_test;
pub mod rulefile;
pub mod safety;
pub mod schema;
pub mod session;
pub mod simulate;
pub mod span;
pub mod timeline;
pub mod validate;
pub mod when;
