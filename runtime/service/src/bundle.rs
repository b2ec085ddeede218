//! Loading the bundle at start (docs/service.md#start-and-stop): rulecore's codec checks
//! magic, version, length and digest, decodes and verifies; any failure is
//! fatal and names the bundle file and the check that failed.

use rulecore::bundle::Payload;
use rulecore::codec::BundleError;
use rulecore_io::bundle_file;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct LoadedBundle {
    pub payload: Payload,
    /// Hex blake3 digest of the payload.
    pub id: String,
}

/// A bundle that cannot be used; the message names the file and the check
/// that failed.
#[derive(Debug)]
pub struct LoadError {
    pub path: PathBuf,
    pub source: Box<BundleError>,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.source {
            // The codec's I/O error names the path itself.
            BundleError::Io { source, .. } => {
                write!(f, "cannot read bundle {}: {source}", self.path.display())
            }
            // docs/rulec.md#input-files: a FIFO or a device is refused at
            // once, never waited on.
            BundleError::NotAFile { kind, .. } => write!(
                f,
                "cannot read bundle {}: it is {kind}, not a regular file",
                self.path.display()
            ),
            other => write!(f, "cannot load bundle {}: {other}", self.path.display()),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

pub fn load(path: &Path) -> Result<LoadedBundle, LoadError> {
    let bundle = bundle_file::read(path).map_err(|source| LoadError {
        path: path.to_path_buf(),
        source: Box::new(source),
    })?;
    Ok(LoadedBundle {
        payload: bundle.payload,
        id: bundle.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_a_device_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("rules.bundle");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // No writer ever opens the FIFO: a blocking open would hang here.
        let error = load(&fifo).unwrap_err().to_string();
        assert!(
            error.ends_with("rules.bundle: it is a FIFO (named pipe), not a regular file"),
            "{error}"
        );
        let error = load(Path::new("/dev/zero")).unwrap_err().to_string();
        assert_eq!(
            error,
            "cannot read bundle /dev/zero: it is a character device, not a regular file"
        );
    }
}
