//! The `rulec` command line (docs/rulec.md): the clap definitions and the
//! small types every subcommand shares. `main.rs` parses [`Cli`] and calls
//! one library function per [`Command`]; adding a subcommand is one variant
//! here and one match arm there.

use crate::diagnostic::TextStyle;
use clap::{Parser, Subcommand};
use std::io::Write;

/// Check, compile, inspect and simulate scooter rules.
#[derive(Debug, Parser)]
#[command(
    name = "rulec",
    version,
    about,
    long_about = None,
    after_help = "\
Examples:
  rulec check rules/
  rulec build rules/ -o rules.bundle
  rulec dump rules.bundle
  rulec test rules/
  rulec diff deployed.bundle rules/ --deny-drops
  rulec diff deployed.bundle rules/ --replay ride.toml --deny-changes
  rulec fix rules/ --dry-run
  rulec lsp                       (for editors: docs/editors.md)

Each command's --help shows its options and more examples."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a rules directory and print its diagnostics.
    Check(crate::check::CheckArgs),
    /// Check a rules directory, then compile it to a bundle file.
    Build(crate::build::BuildArgs),
    /// Print a bundle as stable text (or JSON).
    Dump(crate::dump::DumpArgs),
    /// Print the JSON Schema of the rule file format, for editors.
    Schema(crate::schema::SchemaArgs),
    /// Run rules against a timeline on a virtual clock and print what happens.
    Simulate(crate::simulate::SimulateArgs),
    /// Compare two rule sets: what changed, what a deploy drops, what it does differently.
    Diff(crate::diff::DiffArgs),
    /// Rewrite `when` written for the Go event-service into this language, in place.
    Fix(crate::fix::FixArgs),
    /// Run the timelines with expectations under DIR/tests/ and report pass or fail.
    Test(crate::rule_test::TestArgs),
    /// Serve editors as a language server on stdin/stdout (LSP).
    Lsp(crate::lsp::LspArgs),
}

/// Where a subcommand writes: data to `out` (stdout), people-facing text and
/// diagnostics to `err` (stderr).
pub struct Console<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    /// `Fancy` when stderr is a terminal.
    pub style: TextStyle,
    /// Notes already printed (a directory's skipped files): each is
    /// printed once per command, however often its directory is loaded.
    pub noted: std::collections::HashSet<String>,
}

impl std::fmt::Debug for Console<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("style", &self.style)
            .finish_non_exhaustive()
    }
}

/// A subcommand's outcome, as the process exit code (docs/rulec.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: clean (warnings allowed unless denied).
    Success,
    /// 1: errors in the rules (or warnings with `--deny-warnings`).
    Failure,
    /// 2: usage or I/O error.
    Usage,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Failure => 1,
            Self::Usage => 2,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(exit.code())
    }
}
