//! `rulec dump FILE` (docs/bundle.md, docs/rulec.md): reads and verifies a
//! bundle and prints it as stable, readable text, or as JSON. The layout
//! itself is `rulecore::dump`'s.

use crate::cli::{Console, Exit};
use rulecore::codec::BundleError;
use rulecore_io::bundle_file;
use std::io;
use std::path::PathBuf;

// The rendering is rulecore's, so that `ruled`'s `v1.show` shows a rule
// exactly as `rulec dump` does.
pub use rulecore::dump::{
    decompile, disassemble, render_json, render_text, rule_json, rule_text, write_json, write_text,
};

/// `rulec dump` flags.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  rulec dump rules.bundle\n  rulec dump rules.bundle --format json"
)]
pub struct DumpArgs {
    /// The bundle file written by `rulec build`.
    pub file: PathBuf,
    /// `text` (stable, for people and snapshots) or `json` (for machines).
    #[arg(long, value_enum, default_value_t = DumpFormat::Text)]
    pub format: DumpFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DumpFormat {
    Text,
    Json,
}

/// Reads, verifies and prints a bundle. An unreadable file exits 2; a file
/// that is not a valid bundle exits 1, naming the check that failed.
pub fn run(args: &DumpArgs, console: &mut Console<'_>) -> io::Result<Exit> {
    let bundle = match bundle_file::read(&args.file) {
        Ok(bundle) => bundle,
        Err(error) => {
            // An I/O error names the path itself.
            if let BundleError::Io { .. } | BundleError::NotAFile { .. } = error {
                writeln!(console.err, "error: {error}")?;
                return Ok(Exit::Usage);
            }
            writeln!(console.err, "error: {}: {error}", args.file.display())?;
            return Ok(Exit::Failure);
        }
    };
    match args.format {
        DumpFormat::Text => write_text(console.out, &bundle)?,
        DumpFormat::Json => write_json(console.out, &bundle)?,
    }
    Ok(Exit::Success)
}
