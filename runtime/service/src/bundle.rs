//! Loading the bundle at start (docs/service.md#start-and-stop): rulecore's codec checks
//! magic, version, length and digest, decodes and verifies; any failure is
//! fatal and names the bundle file and the check that failed.

use rulecore::bundle::Payload;
use rulecore::codec::{self, BundleError};
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
    let bundle = codec::read(path).map_err(|source| LoadError {
        path: path.to_path_buf(),
        source: Box::new(source),
    })?;
    Ok(LoadedBundle {
        payload: bundle.payload,
        id: bundle.id,
    })
}
