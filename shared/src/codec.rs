//! The bundle file (docs/bundle.md): encoding, checked decoding, atomic write.
//!
//! Layout: [`MAGIC`] (8 bytes), [`FORMAT_VERSION`] (u16 LE), blake3 digest of
//! the payload (32 bytes), payload length (u64 LE), payload (postcard).
//! Decoding checks magic, version, length and digest, in that order and
//! before decoding anything, then decodes and verifies every program
//! ([`crate::verify`]). Every check has its own error, so a bad bundle at
//! start is a fatal error that names the check that failed (docs/service.md#start-and-stop).

use crate::bundle::{Payload, FORMAT_VERSION, MAGIC};
use crate::input_file::{read_bounded, InputError};
use crate::payload_decode::decode_payload;
use crate::verify::{verify_payload, PayloadError};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Magic, version, digest, length.
pub const HEADER_LEN: usize = 8 + 2 + 32 + 8;

/// The largest bundle file [`read`] accepts. Real bundles are kilobytes, a
/// few megabytes for thousands of rules; the limit keeps a wrong path (a
/// disk image, `/dev/zero`) from being read into the service's 48 MB
/// (README.md#what-this-is) before any check could refuse it.
pub const MAX_BUNDLE_LEN: u64 = 16 << 20;

/// A decoded and verified bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    pub payload: Payload,
    /// Hex blake3 digest of the payload bytes (64 lowercase characters).
    pub id: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("not a rule bundle (wrong magic bytes)")]
    BadMagic,
    #[error("bundle is {len} bytes, shorter than its {HEADER_LEN}-byte header")]
    TooShort { len: usize },
    #[error(
        "bundle format version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error(
        "bundle is truncated: the header announces {declared} payload bytes, the file has {actual}"
    )]
    Truncated { declared: u64, actual: u64 },
    #[error("bundle file is larger than {MAX_BUNDLE_LEN} bytes: not a rule bundle")]
    TooLarge,
    #[error("bundle has {extra} bytes after its payload")]
    TrailingBytes { extra: u64 },
    #[error("bundle digest does not match its payload (corrupted)")]
    DigestMismatch,
    #[error("bundle payload does not decode: {0}")]
    Decode(crate::payload_decode::DecodeError),
    #[error("bundle payload has {extra} undecoded bytes at its end")]
    PayloadTrailing { extra: usize },
    #[error("bundle fails verification: {0}")]
    Invalid(#[from] PayloadError),
    #[error("could not encode the bundle payload: {0}")]
    Encode(postcard::Error),
    #[error("{} is {kind}, not a regular file", path.display())]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The bundle id of a payload's bytes.
fn digest(payload: &[u8]) -> blake3::Hash {
    blake3::hash(payload)
}

/// Encodes a payload into bundle bytes. Deterministic: the same payload
/// always gives the same bytes (postcard has no maps or padding here).
pub fn encode(payload: &Payload) -> Result<Vec<u8>, BundleError> {
    let body = postcard::to_allocvec(payload).map_err(BundleError::Encode)?;
    Ok(frame(&body))
}

/// Puts the header (magic, version, digest, length) in front of payload
/// bytes. [`encode`] frames the postcard payload with it; tests frame
/// hand-made payload bytes to reach the checks after the digest.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(digest(body).as_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// The bundle id (hex blake3) of payload bytes (what follows the header),
/// without decoding them.
pub fn id_of_payload_bytes(payload: &[u8]) -> String {
    digest(payload).to_hex().to_string()
}

/// Decodes and verifies bundle bytes. Never panics.
pub fn decode(bytes: &[u8]) -> Result<Bundle, BundleError> {
    // A short file that does not even start like a bundle is "not a
    // bundle", not "truncated".
    let magic_len = bytes.len().min(MAGIC.len());
    if bytes[..magic_len] != MAGIC[..magic_len] {
        return Err(BundleError::BadMagic);
    }
    let (header, body) = match (bytes.get(..HEADER_LEN), bytes.get(HEADER_LEN..)) {
        (Some(h), Some(b)) => (h, b),
        _ => return Err(BundleError::TooShort { len: bytes.len() }),
    };
    let version = u16::from_le_bytes([header[8], header[9]]);
    if version != FORMAT_VERSION {
        return Err(BundleError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let mut want_digest = [0u8; 32];
    want_digest.copy_from_slice(&header[10..42]);
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&header[42..50]);
    let declared = u64::from_le_bytes(len_bytes);
    let actual = body.len() as u64;
    if declared > actual {
        return Err(BundleError::Truncated { declared, actual });
    }
    if declared < actual {
        return Err(BundleError::TrailingBytes {
            extra: actual - declared,
        });
    }
    let hash = digest(body);
    // Constant-time comparison is not needed (no secret), but blake3's
    // `Hash` equality is constant-time anyway.
    if hash != blake3::Hash::from_bytes(want_digest) {
        return Err(BundleError::DigestMismatch);
    }
    let (payload, rest) = decode_payload(body).map_err(BundleError::Decode)?;
    if !rest.is_empty() {
        return Err(BundleError::PayloadTrailing { extra: rest.len() });
    }
    verify_payload(&payload)?;
    Ok(Bundle {
        payload,
        id: hash.to_hex().to_string(),
    })
}

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

    fn empty() -> Payload {
        Payload {
            compiler_version: "0.0.0".into(),
            rules: vec![],
            state_pairs: vec![],
            consts: vec![],
            inputs: vec![],
            profile: None,
            envelope: Default::default(),
        }
    }

    #[test]
    fn round_trips_and_names_the_payload() {
        let bytes = encode(&empty()).unwrap();
        let bundle = decode(&bytes).unwrap();
        assert_eq!(bundle.payload, empty());
        assert_eq!(bundle.id, id_of_payload_bytes(&bytes[HEADER_LEN..]));
        assert_eq!(bundle.id.len(), 64);
    }

    #[test]
    fn short_inputs() {
        assert!(matches!(decode(b""), Err(BundleError::TooShort { len: 0 })));
        assert!(matches!(
            decode(b"SCR"),
            Err(BundleError::TooShort { len: 3 })
        ));
        assert!(matches!(decode(b"nope"), Err(BundleError::BadMagic)));
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
