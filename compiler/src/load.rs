//! Reading a rules directory (docs/rules.md): its `*.toml` files, not
//! recursive, in byte-wise file name order; other entries are listed as
//! skipped (except hidden ones and the `tests/` folder of `rulec test`). A missing
//! directory holds no rules (a normal state); an unreadable one is an error.
//! A `*.toml` entry that cannot be read (a dangling link, no permission) is
//! an error too, never skipped: a rule must not vanish from the bundle
//! without a word. A missing path that names a rule file (ends in `.toml`,
//! or is a dangling link) is an error, not an empty directory.

use crate::diagnostic::{Code, Diagnostic};
use rulecore_io::input_file::{read_bounded, InputError};
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

/// The largest rule file read (docs/rules.md#the-rules-directory): 20,000
/// rules are 2.5 MB.
pub const MAX_RULE_FILE_LEN: u64 = 16 << 20;

/// One rule file, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// The file name relative to the rules directory (`alarm.toml`): the
    /// name diagnostics and the bundle use, never an absolute path.
    pub name: String,
    pub text: String,
}

/// What a rules directory holds.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// Readable UTF-8 rule files, in byte-wise name order.
    pub files: Vec<SourceFile>,
    /// Files that could not be used (not UTF-8): each rejects that file only.
    pub diagnostics: Vec<Diagnostic>,
    /// The directory does not exist.
    pub missing: bool,
    /// Entries of the directory that are not read, and why: listed as
    /// notes so that no rule file is left out without a word.
    pub skipped: Vec<Skipped>,
}

impl Loaded {
    /// Puts `text` in place of the rule file `name` (an editor's buffer,
    /// saved or not, over what the directory holds), or adds it in its
    /// byte-wise place when the directory has no such file; a problem
    /// reading the file from the directory no longer applies.
    pub fn overlay(&mut self, name: &str, text: &str) {
        self.diagnostics
            .retain(|diagnostic| diagnostic.file.as_deref() != Some(name));
        let file = SourceFile {
            name: name.to_string(),
            text: text.to_string(),
        };
        match self
            .files
            .binary_search_by(|other| other.name.as_bytes().cmp(name.as_bytes()))
        {
            Ok(at) => self.files[at] = file,
            Err(at) => self.files.insert(at, file),
        }
    }
}

/// A directory entry `load_dir` did not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The entry's name in the directory.
    pub name: String,
    pub why: SkipReason,
}

/// Why an entry is not a rule file (docs/rules.md#the-rules-directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Rule files are read from the directory itself, not from sub-folders.
    SubFolder,
    /// `.TOML`, `.Toml`: the extension is matched exactly.
    ExtensionCase,
    /// Any other name: `*.toml.bak`, `*.md`, `README`.
    NotToml,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.why {
            SkipReason::SubFolder => write!(
                f,
                "{}/ is a sub-folder: rule files are read from the directory itself, not recursively",
                self.name
            ),
            SkipReason::ExtensionCase => write!(
                f,
                "{} is not read: only names ending in `.toml` (lower case) are rule files",
                self.name
            ),
            SkipReason::NotToml => write!(
                f,
                "{} is not read: it does not end in `.toml`",
                self.name
            ),
        }
    }
}

/// The sub-folder `rulec test` reads its timelines from: not a skipped
/// rule folder, so not noted.
pub const TESTS_FOLDER: &str = "tests";

/// A rules directory or file that could not be read at all (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read rules directory {}: {source}", path.display())]
    Directory { path: PathBuf, source: io::Error },
    #[error("{} is neither a directory nor a rule file", path.display())]
    NotADirectory { path: PathBuf },
    #[error("cannot read rule file {}: {source}", path.display())]
    File { path: PathBuf, source: io::Error },
    #[error("no such rule file {}", path.display())]
    NoSuchFile { path: PathBuf },
    #[error("`-` (standard input) is not supported: give a rule file or a rules directory")]
    Stdin,
    #[error("rule file {error}")]
    Input {
        #[from]
        error: InputError,
    },
}

/// Reads every `*.toml` file directly inside `dir`, or `dir` itself when it
/// is a single file.
pub fn load_dir(dir: &Path) -> Result<Loaded, LoadError> {
    // `-` would otherwise be a missing directory, "no rules", exit 0: an
    // editor or hook piping a file in would pass whatever it sent.
    if dir.as_os_str() == "-" {
        return Err(LoadError::Stdin);
    }
    let metadata = match std::fs::metadata(dir) {
        Ok(metadata) => metadata,
        Err(source) if source.kind() == io::ErrorKind::NotFound => {
            // A link that points nowhere is a file that cannot be read.
            if std::fs::symlink_metadata(dir).is_ok() {
                return Err(LoadError::File {
                    path: dir.to_path_buf(),
                    source,
                });
            }
            // docs/rules.md excuses a missing *directory* only: a mistyped
            // file name (`alarm.tmol` is caught by neither) must not pass.
            if dir.extension().is_some_and(|ext| ext == "toml") {
                return Err(LoadError::NoSuchFile {
                    path: dir.to_path_buf(),
                });
            }
            return Ok(Loaded {
                missing: true,
                ..Loaded::default()
            });
        }
        Err(source) => {
            return Err(LoadError::Directory {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    if metadata.is_file() {
        // One rule file on its own, as an editor or a pre-commit hook
        // would pass it: checked exactly as if it were alone in a directory.
        let name = dir.file_name().unwrap_or_default();
        let mut loaded = Loaded::default();
        read_file(&mut loaded, name, dir)?;
        return Ok(loaded);
    }
    if !metadata.is_dir() {
        return Err(LoadError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let directory_error = |source| LoadError::Directory {
        path: dir.to_path_buf(),
        source,
    };
    let mut paths = Vec::new();
    let mut skipped = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(directory_error)? {
        let entry = entry.map_err(directory_error)?;
        let path = entry.path();
        let is_toml = path.extension().is_some_and(|ext| ext == "toml");
        // Hidden names are not rule files: editors and file systems leave
        // them beside the real ones (Emacs's `.#alarm.toml` lock, a dangling
        // link while the file is being edited; macOS's `._alarm.toml`, not
        // UTF-8). Read, they would fail the whole check. A hidden file named
        // on the command line is still checked.
        let hidden = entry.file_name().as_encoded_bytes().starts_with(b".");
        if hidden {
            continue;
        }
        // `is_dir` follows symlinks: a link to a rule file counts, and a
        // dangling or unreadable entry is kept so that reading it fails
        // loudly (exit 2) instead of the rule silently going missing. Only
        // a directory named `*.toml` is not a rule file.
        if is_toml && !path.is_dir() {
            paths.push((entry.file_name(), path));
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(why) = skip_reason(&path, &name) {
            skipped.push(Skipped { name, why });
        }
    }
    skipped.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    // Byte-wise order of the file names, independent of locale and of the
    // order the file system lists them in.
    paths.sort_by(|a, b| a.0.as_encoded_bytes().cmp(b.0.as_encoded_bytes()));

    let mut loaded = Loaded {
        skipped,
        ..Loaded::default()
    };
    for (file_name, path) in paths {
        read_file(&mut loaded, &file_name, &path)?;
    }
    Ok(loaded)
}

/// Why a directory entry that is not a rule file is skipped; `None` for
/// one skipped without a note (the `tests/` folder of `rulec test`).
fn skip_reason(path: &Path, name: &str) -> Option<SkipReason> {
    Some(if path.is_dir() {
        if name == TESTS_FOLDER {
            return None;
        }
        SkipReason::SubFolder
    } else if path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("toml"))
    {
        SkipReason::ExtensionCase
    } else {
        SkipReason::NotToml
    })
}

/// Reads one rule file into `loaded`; a file whose name or text is not
/// UTF-8 becomes a diagnostic rejecting that file only.
fn read_file(loaded: &mut Loaded, name: &OsStr, path: &Path) -> Result<(), LoadError> {
    let Some(name) = name.to_str().map(str::to_string) else {
        // The name goes into the bundle and every log line: two names that
        // differ only in their invalid bytes would read the same there.
        loaded.diagnostics.push(
            Diagnostic::error(
                Code::Encoding,
                "the file name is not valid UTF-8; the whole file is ignored",
            )
            .in_file(&name.to_string_lossy())
            .with_help("rename the file: rule file names must be UTF-8"),
        );
        return Ok(());
    };
    // A `*.toml` entry that is a FIFO, a socket or a device (a link to
    // `/dev/zero`) would block or never end: only regular files are read,
    // and only up to a bound.
    let bytes = read_bounded(path, MAX_RULE_FILE_LEN).map_err(|error| match error {
        InputError::Io { path, source } => LoadError::File { path, source },
        other => LoadError::Input { error: other },
    })?;
    match String::from_utf8(bytes) {
        Ok(text) => loaded.files.push(SourceFile { name, text }),
        Err(error) => {
            // The text cannot be shown, so the message says where the
            // bad byte is: line and column from the valid part before it.
            let valid = error.utf8_error().valid_up_to();
            let before = String::from_utf8_lossy(&error.as_bytes()[..valid]);
            let (line, column) = crate::span::line_col(&before, valid);
            loaded.diagnostics.push(
                Diagnostic::error(
                    Code::Encoding,
                    format!(
                        "file is not valid UTF-8: invalid byte at line {line}, column {column} \
                         (byte offset {valid}); the whole file is ignored"
                    ),
                )
                .in_file(&name)
                .with_help("TOML files must be UTF-8; re-save the file as UTF-8"),
            )
        }
    }
    Ok(())
}
