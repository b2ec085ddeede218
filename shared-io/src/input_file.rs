//! Reading an input file whole, bounded (docs/rulec.md#input-files): every
//! file `rulec` and `ruled` read (rule files, profiles, timelines, bundles,
//! the Redis password and CA files, the control key) goes through
//! [`read_bounded`], or [`open`] then [`OpenInput::read`] when the caller
//! judges the opened file first. Only a regular file is read: a FIFO, a device
//! (`/dev/zero`), a socket or a directory is refused at once with its kind,
//! never waited on or read without end; a regular file longer than the
//! caller's bound is refused without reading more than the bound.

use std::fs::{File, FileType, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is {kind}, not a regular file", path.display())]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("{} is larger than {max} bytes", path.display())]
    TooLarge { path: PathBuf, max: u64 },
}

impl InputError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. } | Self::NotAFile { path, .. } | Self::TooLarge { path, .. } => {
                path
            }
        }
    }
}

/// What a file that is not a regular file is, for the message.
fn kind(file_type: FileType) -> &'static str {
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// Reads the regular file at `path` (symbolic links followed) whole, if it
/// holds at most `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, InputError> {
    open(path)?.read(max)
}

/// A zone file is small (Europe/Berlin: 2.3 KiB); more is not one.
pub const ZONE_FILE_MAX: u64 = 256 * 1024;

/// A time zone file of the system's database (`/usr/share/zoneinfo/...`,
/// `/etc/localtime`), as the schedules' zone reader takes it: `ruled`
/// and `rulec simulate` read zones the same way.
pub fn read_zone_file(path: &str) -> std::io::Result<Vec<u8>> {
    read_bounded(Path::new(path), ZONE_FILE_MAX)
        .map_err(|error| std::io::Error::other(error.to_string()))
}

/// An input file opened and known to be a regular file, not read yet: a
/// caller that must judge the file itself first (the control key's mode
/// and owner) looks at the [`metadata`](Self::metadata) of what was
/// opened, then [`read`](Self::read)s it, within its bound like every
/// input.
#[derive(Debug)]
pub struct OpenInput {
    file: File,
    metadata: Metadata,
    path: PathBuf,
}

/// Opens the regular file at `path` (symbolic links followed) for reading;
/// anything else is refused at once with its kind.
pub fn open(path: &Path) -> Result<OpenInput, InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Non-blocking: opening a FIFO for reading would otherwise wait for a
    // writer, forever. It changes nothing for a regular file.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    // The type of what was opened, not of what the path named a moment ago.
    let metadata = file.metadata().map_err(io)?;
    if !metadata.file_type().is_file() {
        return Err(InputError::NotAFile {
            path: path.to_path_buf(),
            kind: kind(metadata.file_type()),
        });
    }
    Ok(OpenInput {
        file,
        metadata,
        path: path.to_path_buf(),
    })
}

impl OpenInput {
    /// The metadata of the file that was opened.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The file whole, if it holds at most `max` bytes; refused without
    /// reading more than the bound otherwise.
    pub fn read(self, max: u64) -> Result<Vec<u8>, InputError> {
        let path = self.path;
        let bytes = read_at_most(self.file, max).map_err(|source| InputError::Io {
            path: path.clone(),
            source,
        })?;
        if bytes.len() as u64 > max {
            return Err(InputError::TooLarge { path, max });
        }
        Ok(bytes)
    }
}

/// At most `max + 1` bytes of `file`: one more than allowed tells "too
/// large" without reading the rest.
fn read_at_most(file: File, max: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn reads_a_regular_file_up_to_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_bounded(&path, 5).unwrap(), b"12345");
        assert!(matches!(
            read_bounded(&path, 4),
            Err(InputError::TooLarge { max: 4, .. })
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(read_bounded(&link, 5).unwrap(), b"12345");
        let missing = read_bounded(&dir.path().join("absent"), 5).unwrap_err();
        assert!(matches!(missing, InputError::Io { .. }), "{missing}");
        assert_eq!(missing.path(), dir.path().join("absent"));
    }

    #[test]
    fn fifos_devices_and_directories_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        // No writer ever opens it: a blocking open would hang here.
        let error = read_bounded(&fifo, 1 << 20).unwrap_err();
        assert!(error
            .to_string()
            .ends_with("is a FIFO (named pipe), not a regular file"));
        let zero = read_bounded(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(
            zero.to_string(),
            "/dev/zero is a character device, not a regular file"
        );
        let directory = read_bounded(dir.path(), 1 << 20).unwrap_err();
        assert!(matches!(
            directory,
            InputError::NotAFile {
                kind: "a directory",
                ..
            }
        ));
    }
}
