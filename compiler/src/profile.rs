//! Bus profiles (docs/sources.md): a profile directory (or the built-in
//! `librescoot` one) read, checked and lowered into the bundle's
//! `rulecore::profile::Profile`, with the [`Catalogue`] `rulec check`
//! holds rules against.
//!
//! In the order a profile travels: [`read`] finds its files (a directory,
//! or the files embedded from `profiles/librescoot/`, [`builtin`]) and
//! digests them; `parse` reads every table with spans and checks it,
//! leaving [`Decls`]; `lower` turns those into the bundle's profile (its
//! programs in the bundle's constant pool) and the [`Catalogue`].

pub mod builtin;
pub mod catalogue;
mod lower;
pub mod markdown;
mod parse;
pub mod read;

pub use catalogue::Catalogue;
pub use parse::{DataDecl, Decls, EmitDecl, HashDecl, ListDecl, SourceDecl};
pub use read::{ProfileChoice, ProfileError};

use crate::diagnostic::{Diagnostic, Severity};
use crate::load::SourceFile;
use crate::when::ConstPool;
use rulecore::bundle::StatePair;

/// A profile read and checked: its files (which its diagnostics point
/// into), what they declare, and the catalogue built from it.
#[derive(Debug, Clone)]
pub struct LoadedProfile {
    /// `name` of its `profile.toml`.
    pub name: String,
    pub description: Option<String>,
    /// blake3 hex of its files (docs/sources.md#choosing-a-profile).
    pub digest: String,
    /// Every file read, the built-in's first when it `extends` it, each
    /// named as its diagnostics name it (`profiles/librescoot/vehicle.toml`,
    /// `DIR/seat.toml`).
    pub files: Vec<SourceFile>,
    pub decls: Decls,
    pub catalogue: Catalogue,
    pub diagnostics: Vec<Diagnostic>,
}

impl LoadedProfile {
    pub fn errors(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    /// Every `state()` pair the profile's expressions read, for the
    /// bundle's sorted pair list ([`ConstPool::with_state_pairs`]).
    pub fn state_pairs(&self) -> impl Iterator<Item = StatePair> + '_ {
        self.decls.state_pairs()
    }

    /// The bundle's profile, its programs lowered into `pool`.
    pub fn lower(&self, pool: &mut ConstPool) -> rulecore::profile::Profile {
        lower::profile(self, pool)
    }
}

/// Reads, checks and catalogues the profile `choice` names; `Ok(None)` for
/// `--profile none`. Problems in the profile's files are diagnostics;
/// only an unreadable directory or file is an `Err`.
pub fn load(choice: &ProfileChoice) -> Result<Option<LoadedProfile>, ProfileError> {
    let Some(files) = read::files(choice)? else {
        return Ok(None);
    };
    Ok(Some(from_files(files)))
}

/// A profile from files already read (in their order).
pub fn from_files(files: read::ProfileFiles) -> LoadedProfile {
    let digest = read::digest(&files);
    let mut diagnostics = files.diagnostics;
    let parsed = parse::parse(&files.files, files.own_from, files.dir_label.as_deref());
    diagnostics.extend(parsed.diagnostics);
    let catalogue = lower::catalogue(&parsed.decls);
    LoadedProfile {
        name: parsed.name.unwrap_or_default(),
        description: parsed.description,
        digest,
        files: files.files,
        decls: parsed.decls,
        catalogue,
        diagnostics,
    }
}

#[cfg(test)]
mod tests;
