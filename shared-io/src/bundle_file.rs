//! The bundle file (docs/bundle.md) on disk: read whole within
//! [`MAX_BUNDLE_LEN`] through the one bounded reader, then decoded and
//! verified by `rulecore::codec`; written atomically.

use crate::input_file::{read_bounded, InputError};
use rulecore::codec::{decode, Bundle, BundleError, MAX_BUNDLE_LEN};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Reads, decodes and verifies a bundle file. Only a regular file is read
/// ([`crate::input_file`]), and one larger than [`MAX_BUNDLE_LEN`] is
/// refused without reading more than that.
pub fn read(path: &Path) -> Result<Bundle, BundleError> {
    let bytes = read_bounded(path, MAX_BUNDLE_LEN).map_err(|error| match error {
        InputError::Io { path, source } => BundleError::Io { path, source },
        InputError::NotAFile { path, kind } => BundleError::NotAFile { path, kind },
        InputError::TooLarge { .. } => BundleError::TooLarge,
    })?;
    decode(&bytes)
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, flushed to disk, then renamed over `path`, then the directory
/// flushed. A reader sees the old file or the new one, never a mix, even
/// across a power cut (docs/bundle.md#building).
///
/// The temporary file is created exclusively (`O_EXCL`) under a random
/// name: a file or link planted at a name we chose ahead of time could
/// otherwise redirect the write to the link's target. The new file gets
/// the ordinary mode under the umask (0644 with umask 022), or the mode of
/// the file it replaces (docs/bundle.md#building).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BundleError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| BundleError::Io { path: p, source }
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| BundleError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
    })?;
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".tmp-");
    // Dropped on any error before `persist`, the temporary file is removed.
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix);
    // The ordinary mode under the umask (0644 with umask 022), not
    // tempfile's 0600: a bundle the service user cannot read is a deploy
    // that silently fails.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut tmp = builder
        .tempfile_in(&dir)
        .map_err(|error| io(&dir)(without_temp_path(error)))?;
    // A file it replaces keeps its mode.
    if let Ok(existing) = fs::metadata(path) {
        if existing.is_file() {
            tmp.as_file()
                .set_permissions(existing.permissions())
                .map_err(io(tmp.path()))?;
        }
    }
    tmp.write_all(bytes).map_err(io(tmp.path()))?;
    tmp.as_file().sync_all().map_err(io(tmp.path()))?;
    tmp.persist(path).map_err(|error| BundleError::Io {
        path: path.to_path_buf(),
        source: error.error,
    })?;
    fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io(&dir))
}

/// An error from `tempfile` without the ` at path "..."` it appends (the
/// temporary file's random name): the caller names the output it was asked
/// for, and that name would mean nothing to a user.
fn without_temp_path(error: std::io::Error) -> std::io::Error {
    let text = error.to_string();
    match text.rfind(" at path ") {
        Some(at) if error.get_ref().is_some() => std::io::Error::new(error.kind(), &text[..at]),
        _ => error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rulecore::bundle::Payload;
    use rulecore::codec::encode;

    fn empty() -> Payload {
        Payload::default()
    }

    #[test]
    fn a_planted_link_at_a_predictable_temp_name_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        // The names an earlier version used: `.NAME.tmp-PID-N`.
        for n in 0..4 {
            let planted = dir
                .path()
                .join(format!(".rules.bundle.tmp-{}-{n}", std::process::id()));
            std::os::unix::fs::symlink(&victim, planted).unwrap();
        }
        let path = dir.path().join("rules.bundle");
        let bytes = encode(&empty()).unwrap();
        write_atomic(&path, &bytes).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&path).unwrap(), bytes);
        assert!(!fs::symlink_metadata(&path).unwrap().is_symlink());
        // Only the planted links and the two real files are there.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 6);
    }

    #[test]
    fn writes_atomically() {
        let dir = std::env::temp_dir().join(format!("rulecore-codec-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rules.bundle");
        let bytes = encode(&empty()).unwrap();
        write_atomic(&path, &bytes).unwrap();
        write_atomic(&path, &bytes).unwrap();
        assert_eq!(read(&path).unwrap().payload, empty());
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("rules.bundle")]);
        assert!(matches!(
            write_atomic(&dir.join("missing/x.bundle"), &bytes),
            Err(BundleError::Io { .. })
        ));
        assert!(matches!(
            read(&dir.join("absent")),
            Err(BundleError::Io { .. })
        ));
        // A directory is refused, naming it, not a panic.
        assert!(matches!(read(&dir), Err(BundleError::NotAFile { path, .. }) if path == dir));
        let big = dir.join("big.bundle");
        let file = fs::File::create(&big).unwrap();
        file.set_len(MAX_BUNDLE_LEN + 1).unwrap();
        assert!(matches!(read(&big), Err(BundleError::TooLarge)));
        file.set_len(MAX_BUNDLE_LEN).unwrap();
        assert!(matches!(read(&big), Err(BundleError::BadMagic)));
        fs::remove_file(&big).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}
