//! The one front door into checking: a [`Session`] holds what every check
//! of a rules directory needs (the bus profile, `--deny-warnings`, each
//! file's own checks kept while its text is the same) and takes rule files
//! from load to check; the [`CheckReport`] it gives lowers them
//! ([`CheckReport::assemble`], [`CheckReport::build`]). `rulec check`,
//! `build`, `simulate`, `test`, `diff`, `fix` and `lsp` all come through
//! here, so a rule is checked the same way whichever command reads it.

use crate::check::{self, CheckReport};
use crate::load::{LoadError, Loaded, SourceFile};
use crate::profile::{LoadedProfile, ProfileChoice, ProfileError};
use crate::validate::{self, FileChecks, Validated};
use std::path::Path;
use std::sync::Arc;

/// Checking rule files against one profile, with one `--deny-warnings`.
#[derive(Debug, Default)]
pub struct Session {
    profile: Option<Arc<LoadedProfile>>,
    deny_warnings: bool,
    /// Each file's own checks, reused while its text is the same (the
    /// profile never changes within a session, so they stay true).
    cache: FileChecks,
}

impl Session {
    /// A session against a profile already loaded (`None`: `--profile none`).
    pub fn new(profile: Option<Arc<LoadedProfile>>) -> Self {
        Session {
            profile,
            ..Session::default()
        }
    }

    /// A session against the profile `choice` names, read and checked now
    /// ([`crate::profile::load`]): only an unreadable profile is an `Err`.
    pub fn open(choice: &ProfileChoice) -> Result<Self, ProfileError> {
        Ok(Self::new(crate::profile::load(choice)?.map(Arc::new)))
    }

    /// `--deny-warnings` (docs/rules.md#errors-and-warnings): every warning
    /// is an error and rejects its rule.
    pub fn deny_warnings(mut self, deny: bool) -> Self {
        self.deny_warnings = deny;
        self
    }

    /// Whether every warning is an error ([`Session::deny_warnings`]).
    pub(crate) fn denies_warnings(&self) -> bool {
        self.deny_warnings
    }

    /// The profile the rules are checked against.
    pub fn profile(&self) -> Option<&Arc<LoadedProfile>> {
        self.profile.as_ref()
    }

    /// Loads and checks a rules directory, or one rule file with its
    /// directory's other files (docs/rulec.md#one-file). Only an unreadable
    /// directory or file is an `Err`; problems in the rules are diagnostics.
    pub fn check(&mut self, path: &Path) -> Result<CheckReport, LoadError> {
        check::check_path(path, self)
    }

    /// Checks rule files already read (by [`crate::load::load_dir`],
    /// perhaps with an editor's buffers laid over them,
    /// [`Loaded::overlay`]).
    pub fn check_loaded(&mut self, loaded: Loaded) -> CheckReport {
        check::check_loaded(loaded, self)
    }

    /// Checks rule files' texts alone, with no directory around them (what
    /// `rulec fix` holds its rewrite to).
    pub fn check_files(&mut self, files: &[SourceFile]) -> Validated {
        let catalogue = self.profile.as_deref().map(|profile| &profile.catalogue);
        validate::validate_cached(files, self.deny_warnings, catalogue, &mut self.cache)
    }
}
