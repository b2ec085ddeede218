//! Signed control messages (docs/operating.md#trust): the control key
//! file, and the keyed MAC (blake3 in its keyed mode) that signs a reply
//! over the request it answers, or a request over its own text.
//!
//! A signature travels as the last field of the message's JSON object,
//! `"signature":"<64 hex>"`: clients that know nothing of it (`lsc`) decode
//! the message as before, and the signed text is exactly the message
//! without that field, so nothing is re-encoded to be checked.

use rulecore_io::input_file::{self, InputError};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The largest control key file read.
pub const KEY_FILE_MAX: u64 = 4096;
/// The fewest bytes a control key may hold (trailing white space aside).
pub const KEY_MIN_BYTES: usize = 16;
/// The JSON field a signature travels in.
pub const FIELD: &str = "signature";

/// What a signature is derived for: a reply and a request never share one.
const REPLY_TAG: &[u8] = b"ruled control reply v1";
const REQUEST_TAG: &[u8] = b"ruled control request v1";
/// The context blake3 derives the MAC key from the file's bytes in.
const KEY_CONTEXT: &str = "ruled control protocol 2026 key v1";
/// `,"signature":"` + 64 hex + `"}`.
const SUFFIX_LEN: usize = 2 + FIELD.len() + 3 + 64 + 2;

/// Why the control key file was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the control key {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the control key {} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error(
        "the control key {} has mode {mode:04o}: group and others must have no access \
         (`chmod 600 {}`)",
        path.display(),
        path.display()
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error(
        "the control key {} belongs to uid {owner}, neither root nor this process's user \
         (uid {me})",
        path.display()
    )]
    Owner { path: PathBuf, owner: u32, me: u32 },
    #[error(
        "the control key {} holds {bytes} bytes; it needs at least {KEY_MIN_BYTES} \
         (random bytes, as the installer writes)",
        path.display()
    )]
    TooShort { path: PathBuf, bytes: usize },
    #[error("the control key {} is larger than {KEY_FILE_MAX} bytes", path.display())]
    TooLarge { path: PathBuf },
}

impl From<InputError> for KeyError {
    fn from(error: InputError) -> Self {
        match error {
            InputError::Io { path, source } => Self::Io { path, source },
            InputError::NotAFile { path, .. } => Self::NotAFile { path },
            InputError::TooLarge { path, .. } => Self::TooLarge { path },
        }
    }
}

/// The control key: the MAC key derived from the key file's bytes.
#[derive(Clone)]
pub struct ControlKey {
    key: [u8; 32],
    path: PathBuf,
}

impl std::fmt::Debug for ControlKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ControlKey({}, ***)", self.path.display())
    }
}

impl ControlKey {
    /// Reads the key file at `path`: a regular file owned by root or by
    /// this process's user, with no access for group or others, 16 to
    /// 4096 bytes (trailing white space is not part of the key, so a key
    /// written as hex with a newline works).
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        // Opened like every input file (a regular file only, never waited
        // on); the mode judged is that of what was opened, not of what the
        // path named before.
        let file = input_file::open(path).map_err(KeyError::from)?;
        let meta = file.metadata();
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Exposed {
                path: path.to_path_buf(),
                mode,
            });
        }
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != 0 && meta.uid() != me {
            return Err(KeyError::Owner {
                path: path.to_path_buf(),
                owner: meta.uid(),
                me,
            });
        }
        let bytes = file.read(KEY_FILE_MAX).map_err(KeyError::from)?;
        let secret = bytes.trim_ascii_end();
        if secret.len() < KEY_MIN_BYTES {
            return Err(KeyError::TooShort {
                path: path.to_path_buf(),
                bytes: secret.len(),
            });
        }
        Ok(Self {
            key: blake3::derive_key(KEY_CONTEXT, secret),
            path: path.to_path_buf(),
        })
    }

    /// The file the key was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn mac(&self, tag: &[u8], parts: &[&[u8]]) -> blake3::Hash {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(tag);
        // Each part with its length first: no two splits of the same bytes
        // sign alike.
        for part in parts {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        hasher.finalize()
    }

    /// The signature of the reply `body` (its JSON without a signature) to
    /// the request popped as `request` (its bytes exactly as pushed): a
    /// reply is bound to its request's id, method and payload, so neither
    /// an old reply nor one to an altered request verifies.
    pub fn sign_reply(&self, request: &[u8], body: &[u8]) -> String {
        self.mac(REPLY_TAG, &[request, body]).to_hex().to_string()
    }

    /// The signature of a request's JSON `body` (without a signature): it
    /// covers id, method, reply channel, deadline and payload.
    pub fn sign_request(&self, body: &[u8]) -> String {
        self.mac(REQUEST_TAG, &[body]).to_hex().to_string()
    }

    /// Whether `signature` is the reply signature of `body` to `request`.
    /// Compared in constant time.
    pub fn verifies_reply(&self, request: &[u8], body: &[u8], signature: &str) -> bool {
        blake3::Hash::from_hex(signature)
            .is_ok_and(|given| given == self.mac(REPLY_TAG, &[request, body]))
    }

    /// Whether `signature` is the request signature of `body`.
    pub fn verifies_request(&self, body: &[u8], signature: &str) -> bool {
        blake3::Hash::from_hex(signature).is_ok_and(|given| given == self.mac(REQUEST_TAG, &[body]))
    }
}

/// `body` (a JSON object's text) with `"signature":"<signature>"` as its
/// last field.
pub fn attach(body: &str, signature: &str) -> String {
    let inner = body.strip_suffix('}').unwrap_or(body);
    let comma = if inner.trim_end().ends_with('{') {
        ""
    } else {
        ","
    };
    format!("{inner}{comma}\"{FIELD}\":\"{signature}\"}}")
}

/// A message split into the text that was signed and its signature;
/// `None` when it does not end with a signature field as [`attach`] writes
/// it (unsigned, or signed some other way: neither verifies).
pub fn detach(text: &[u8]) -> Option<(Vec<u8>, String)> {
    let cut = text.len().checked_sub(SUFFIX_LEN)?;
    let (inner, suffix) = text.split_at(cut);
    let head = format!(",\"{FIELD}\":\"");
    let rest = suffix.strip_prefix(head.as_bytes())?;
    let hex = rest.strip_suffix(b"\"}")?;
    if hex.len() != 64 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut body = inner.to_vec();
    body.push(b'}');
    Some((body, String::from_utf8_lossy(hex).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn key(secret: &[u8]) -> ControlKey {
        ControlKey {
            key: blake3::derive_key(KEY_CONTEXT, secret),
            path: PathBuf::from("test"),
        }
    }

    #[test]
    fn attach_and_detach_are_inverse() {
        let body = r#"{"ok":true,"payload":{"a":[1,2.5]},"error":""}"#;
        let k = key(b"0123456789abcdef");
        let signature = k.sign_reply(b"req", body.as_bytes());
        let text = attach(body, &signature);
        let value: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(value["ok"], true);
        let (signed, got) = detach(text.as_bytes()).unwrap_or_else(|| panic!("no signature"));
        assert_eq!(signed, body.as_bytes());
        assert!(k.verifies_reply(b"req", &signed, &got));
        assert!(!k.verifies_reply(b"other", &signed, &got));
        assert!(!key(b"another key, 16+").verifies_reply(b"req", &signed, &got));
        assert!(detach(body.as_bytes()).is_none());
    }

    #[test]
    fn a_reply_signature_is_no_request_signature() {
        let k = key(b"0123456789abcdef");
        let signature = k.sign_request(b"{}");
        assert!(k.verifies_request(b"{}", &signature));
        assert!(!k.verifies_reply(b"", b"{}", &signature));
    }

    #[test]
    fn a_key_file_readable_by_others_is_refused_with_its_mode() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("control.key");
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n")
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640))
            .unwrap_or_else(|e| panic!("{e}"));
        let error = ControlKey::load(&path).map(drop).unwrap_err().to_string();
        assert!(
            error.contains("0640") && error.contains("control.key"),
            "{error}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(ControlKey::load(&path).is_ok());
        std::fs::write(&path, "short\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            ControlKey::load(&path),
            Err(KeyError::TooShort { bytes: 5, .. })
        ));
    }
}
