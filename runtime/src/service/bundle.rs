//! Loading the bundle at start (DESIGN.md 6.8): rulecore's codec checks
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

#[derive(Debug, thiserror::Error)]
#[error("cannot load bundle {}: {source}", path.display())]
pub struct LoadError {
    pub path: PathBuf,
    #[source]
    pub source: Box<BundleError>,
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
