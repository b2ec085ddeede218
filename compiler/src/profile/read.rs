//! Finding a profile's files (docs/sources.md#a-profile-directory): every
//! `*.toml` of the directory in byte-wise name order, the built-in's
//! embedded files first when the profile `extends` it; and the digest the
//! bundle records.

use super::builtin;
use crate::diagnostic::{Code, Diagnostic};
use crate::load::SourceFile;
use rulecore_io::input_file::{read_bounded, InputError};
use std::io;
use std::path::{Path, PathBuf};

/// What `--profile` names (docs/sources.md#choosing-a-profile).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ProfileChoice {
    /// `librescoot`: the built-in profile.
    #[default]
    Builtin,
    /// `none`: no sources, the bundle derives nothing.
    None,
    /// A profile directory (write `./librescoot` for a directory of that name).
    Dir(PathBuf),
}

impl std::str::FromStr for ProfileChoice {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            builtin::NAME => ProfileChoice::Builtin,
            "none" => ProfileChoice::None,
            "" => return Err("give `librescoot`, `none` or a profile directory".into()),
            dir => ProfileChoice::Dir(PathBuf::from(dir)),
        })
    }
}

impl std::fmt::Display for ProfileChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProfileChoice::Builtin => f.write_str(builtin::NAME),
            ProfileChoice::None => f.write_str("none"),
            ProfileChoice::Dir(dir) => write!(f, "{}", dir.display()),
        }
    }
}

/// A profile directory that cannot be read at all (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read profile directory {}: {source}", path.display())]
    Directory { path: PathBuf, source: io::Error },
    #[error("profile {} is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("cannot read profile file {}: {source}", path.display())]
    File { path: PathBuf, source: io::Error },
    #[error("profile file {error}")]
    Input { error: InputError },
}

/// The largest profile file read.
pub const MAX_PROFILE_FILE_LEN: u64 = 4 << 20;

/// A profile's files, in the order they are read.
#[derive(Debug, Clone, Default)]
pub struct ProfileFiles {
    /// Named as diagnostics name them.
    pub files: Vec<SourceFile>,
    /// Each file's bare name (`vehicle.toml`), for the digest.
    pub bare: Vec<String>,
    /// Index of the profile's own first file: those before are the
    /// built-in's, read because the profile extends it.
    pub own_from: usize,
    /// Files that could not be used (not UTF-8).
    pub diagnostics: Vec<Diagnostic>,
    /// How diagnostics about the directory itself name it.
    pub dir_label: Option<String>,
}

/// The files of the profile `choice` names; `None` for `none`.
pub fn files(choice: &ProfileChoice) -> Result<Option<ProfileFiles>, ProfileError> {
    match choice {
        ProfileChoice::None => Ok(None),
        ProfileChoice::Builtin => Ok(Some(builtin_files())),
        ProfileChoice::Dir(dir) => dir_files(dir).map(Some),
    }
}

/// The built-in profile's embedded files.
pub fn builtin_files() -> ProfileFiles {
    let mut files = ProfileFiles {
        dir_label: Some(builtin::DIR.to_string()),
        ..ProfileFiles::default()
    };
    push_builtin(&mut files);
    files
}

fn push_builtin(files: &mut ProfileFiles) {
    for (name, text) in builtin::FILES {
        files.files.push(SourceFile {
            name: format!("{}/{name}", builtin::DIR),
            text: (*text).to_string(),
        });
        files.bare.push((*name).to_string());
    }
}

/// Every `*.toml` directly inside `dir` (hidden names left out), in
/// byte-wise name order, after the built-in's files when its
/// `profile.toml` says `extends = "librescoot"`.
pub fn dir_files(dir: &Path) -> Result<ProfileFiles, ProfileError> {
    let metadata = std::fs::metadata(dir).map_err(|source| ProfileError::Directory {
        path: dir.to_path_buf(),
        source,
    })?;
    if !metadata.is_dir() {
        return Err(ProfileError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let directory_error = |source| ProfileError::Directory {
        path: dir.to_path_buf(),
        source,
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(directory_error)? {
        let entry = entry.map_err(directory_error)?;
        let path = entry.path();
        let hidden = entry.file_name().as_encoded_bytes().starts_with(b".");
        if !hidden && path.extension().is_some_and(|ext| ext == "toml") && !path.is_dir() {
            paths.push((entry.file_name(), path));
        }
    }
    paths.sort_by(|a, b| a.0.as_encoded_bytes().cmp(b.0.as_encoded_bytes()));
    let mut own = ProfileFiles {
        dir_label: Some(dir.display().to_string()),
        ..ProfileFiles::default()
    };
    for (file_name, path) in paths {
        let shown = path.display().to_string();
        let Some(bare) = file_name.to_str().map(str::to_string) else {
            own.diagnostics.push(
                Diagnostic::error(Code::Encoding, "the file name is not valid UTF-8")
                    .in_file(&shown)
                    .with_help("rename the file: profile file names must be UTF-8"),
            );
            continue;
        };
        let bytes = read_bounded(&path, MAX_PROFILE_FILE_LEN).map_err(|error| match error {
            InputError::Io { path, source } => ProfileError::File { path, source },
            other => ProfileError::Input { error: other },
        })?;
        match String::from_utf8(bytes) {
            Ok(text) => {
                own.files.push(SourceFile { name: shown, text });
                own.bare.push(bare);
            }
            Err(_) => own.diagnostics.push(
                Diagnostic::error(Code::Encoding, "the file is not valid UTF-8")
                    .in_file(&shown)
                    .with_help("TOML files must be UTF-8; re-save the file as UTF-8"),
            ),
        }
    }
    if !extends_builtin(&own) {
        return Ok(own);
    }
    let mut files = ProfileFiles {
        dir_label: own.dir_label,
        diagnostics: own.diagnostics,
        ..ProfileFiles::default()
    };
    push_builtin(&mut files);
    files.own_from = files.files.len();
    files.files.extend(own.files);
    files.bare.extend(own.bare);
    Ok(files)
}

/// Whether the directory's `profile.toml` says `extends = "librescoot"`
/// (a file that does not parse is reported by the parser, not here).
fn extends_builtin(own: &ProfileFiles) -> bool {
    own.bare
        .iter()
        .zip(&own.files)
        .find(|(bare, _)| *bare == "profile.toml")
        .and_then(|(_, file)| toml::de::DeTable::parse(&file.text).ok())
        .and_then(|table| {
            table
                .get_ref()
                .iter()
                .find(|(key, _)| key.get_ref() == "extends")
                .and_then(|(_, value)| value.get_ref().as_str().map(str::to_string))
        })
        .is_some_and(|extends| extends == builtin::NAME)
}

/// blake3 hex over every file, in read order: for each, its bare name and
/// its contents, each preceded by its length in bytes (8 bytes, little
/// endian), so that no two different sets of files hash alike.
pub fn digest(files: &ProfileFiles) -> String {
    let mut hasher = blake3::Hasher::new();
    for (bare, file) in files.bare.iter().zip(&files.files) {
        for part in [bare.as_bytes(), file.text.as_bytes()] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
    }
    hasher.finalize().to_hex().to_string()
}
