//! The built-in profile's files on disk, for go to definition
//! (docs/editors.md#go-to-definition): the built-in profile lives only in
//! the binary, so the files a definition points into are written to a
//! folder of this server's own: a fresh name under the temporary
//! directory, created exclusively with mode 0700 (a planted file or
//! symbolic link at the name makes the creation fail, and another name is
//! tried), removed when the server ends. Nothing in it is ever opened
//! that the server did not create there itself.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fs::{DirBuilder, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// How many fresh names are tried before giving up (each taken name is
/// someone else's folder or a planted link).
const ATTEMPTS: usize = 16;

/// The server's private folder and the files written to it.
#[derive(Debug)]
pub struct ProfileCopy {
    root: PathBuf,
    written: HashMap<String, PathBuf>,
}

impl ProfileCopy {
    /// Creates a fresh private folder under `parent`.
    pub fn create(parent: &Path) -> io::Result<ProfileCopy> {
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let root = parent.join(format!("rulec-profile-{}", random_name()));
            // `mkdir` neither follows nor reuses what is at the name.
            match DirBuilder::new().mode(0o700).create(&root) {
                Ok(()) => {
                    // The umask may have taken bits away; none are added.
                    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
                    return Ok(ProfileCopy {
                        root,
                        written: HashMap::new(),
                    });
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => last = Some(error),
                Err(error) => return Err(error),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no fresh folder name")))
    }

    /// The file `name` (a relative path, as the profile names its files)
    /// holding `text`, written the first time it is asked for.
    pub fn file(&mut self, name: &str, text: &str) -> io::Result<PathBuf> {
        if let Some(path) = self.written.get(name) {
            return Ok(path.clone());
        }
        let relative = Path::new(name);
        let plain = relative
            .components()
            .all(|component| matches!(component, Component::Normal(_)));
        if !plain {
            let message = format!("profile file name `{name}` is not a plain relative path");
            return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
        }
        let path = self.root.join(relative);
        if let Some(folder) = path.parent() {
            // Inside a 0700 folder of ours: nobody else can have put
            // anything here.
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(folder)?;
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(text.as_bytes())?;
        self.written.insert(name.to_string(), path.clone());
        Ok(path)
    }
}

impl Drop for ProfileCopy {
    fn drop(&mut self) {
        // Best effort, and nothing to report it to: the server is ending,
        // and what may stay behind is a copy of the built-in profile in a
        // folder only this user can read. `remove_dir_all` follows no
        // symbolic link.
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// 32 hex digits nobody can guess: SipHash with the keys the standard
/// library draws from the operating system's randomness for each
/// `RandomState`, over the process id and the time.
fn random_name() -> String {
    let mut name = String::with_capacity(32);
    for _ in 0..2 {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            hasher.write_u128(now.as_nanos());
        }
        name.push_str(&format!("{:016x}", hasher.finish()));
    }
    name
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_fresh_private_folder_written_once_and_removed() {
        let parent = tempfile::tempdir().unwrap();
        let mut copy = ProfileCopy::create(parent.path()).unwrap();
        let root = copy.root.clone();
        let meta = std::fs::symlink_metadata(&root).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let file = copy
            .file("profiles/librescoot/vehicle.toml", "x = 1\n")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x = 1\n");
        assert_eq!(
            copy.file("profiles/librescoot/vehicle.toml", "x = 1\n")
                .unwrap(),
            file
        );
        assert!(copy.file("../escape.toml", "").is_err());
        assert!(copy.file("/etc/passwd", "").is_err());
        let other = ProfileCopy::create(parent.path()).unwrap();
        assert_ne!(other.root, root);
        drop(copy);
        assert!(!root.exists());
    }
}
