//! The rules directory (`--rules-dir`, docs/service.md#the-rules-directory):
//! the `*.toml` files `ruled rebuild` compiles into the bundle and `v1.add`
//! writes managed files into; its digest is the revision the control
//! protocol reports and checks (docs/operating.md#revisions); and the one
//! way `ruled` runs the installed `rulec` (bounded output, a timeout).

use rulecore_io::input_file::read_bounded;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The largest rule file read, as `rulec` reads them.
pub const MAX_RULE_FILE_BYTES: u64 = 16 << 20;
/// The most of `rulec`'s stdout and of its stderr kept.
pub const MAX_RULEC_OUTPUT: usize = 256 * 1024;

/// Where the rules are and which `rulec` checks and compiles them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesDir {
    pub dir: PathBuf,
    pub rulec: PathBuf,
}

/// The `rulec` used when `--rulec` is not given: the one beside the
/// running `ruled` (the archive installs both in one directory), else
/// `rulec` on the PATH.
pub fn default_rulec() -> PathBuf {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("rulec")));
    match beside {
        Some(path) if path.is_file() => path,
        _ => PathBuf::from("rulec"),
    }
}

/// The revision of a rules directory: blake3 (hex) over its rule files'
/// names and bytes, in byte-wise name order (the files `rulec` reads:
/// `*.toml`, not hidden, not directories). A missing directory holds no
/// rules; a file that cannot be read (too large, not a regular file, no
/// permission) counts by its name and the kind of failure, so the
/// revision still changes when it does. Blocking: run it off the loop.
pub fn digest(dir: &Path) -> String {
    let mut hasher = blake3::Hasher::new();
    let mut part = |bytes: &[u8]| {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    match rule_files(dir) {
        Ok(files) => {
            for (name, path) in files {
                part(name.as_encoded_bytes());
                match read_bounded(&path, MAX_RULE_FILE_BYTES) {
                    Ok(bytes) => part(&bytes),
                    Err(error) => {
                        tracing::warn!("rules directory digest: {error}");
                        part(format!("unreadable: {}", failure_kind(&error)).as_bytes());
                    }
                }
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!("rules directory {}: {error}", dir.display());
            part(format!("unreadable directory: {:?}", error.kind()).as_bytes());
        }
    }
    hasher.finalize().to_hex().to_string()
}

/// A failure without its path or OS wording, stable across reads.
fn failure_kind(error: &rulecore_io::input_file::InputError) -> String {
    use rulecore_io::input_file::InputError;
    match error {
        InputError::Io { source, .. } => format!("{:?}", source.kind()),
        InputError::NotAFile { kind, .. } => (*kind).to_string(),
        InputError::TooLarge { max, .. } => format!("over {max} bytes"),
    }
}

/// The rule files of `dir` (name, path), in byte-wise name order.
pub fn rule_files(dir: &Path) -> std::io::Result<Vec<(OsString, PathBuf)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let path = entry.path();
        let hidden = name.as_encoded_bytes().starts_with(b".");
        let is_toml = path.extension().is_some_and(|ext| ext == "toml");
        if is_toml && !hidden && !path.is_dir() {
            files.push((name, path));
        }
    }
    files.sort_by(|a, b| a.0.as_encoded_bytes().cmp(b.0.as_encoded_bytes()));
    Ok(files)
}

/// The loaded rules' revision, shared by the driver (which reports it)
/// and the control server (which checks and changes it at `v1.add`).
/// `None` without `--rules-dir`: the revision is the bundle id.
#[derive(Debug, Clone, Default)]
pub struct Revision(Option<Arc<Mutex<String>>>);

impl Revision {
    /// A revision over `dir`, computed now (blocking: call it off the loop).
    pub fn of(dir: &Path) -> Self {
        Self(Some(Arc::new(Mutex::new(digest(dir)))))
    }

    /// The digest, if there is a rules directory.
    pub fn get(&self) -> Option<String> {
        let cell = self.0.as_ref()?;
        Some(
            cell.lock()
                .map_or_else(|e| e.into_inner().clone(), |d| d.clone()),
        )
    }

    /// Computes the digest of `dir` again, off the loop, and keeps it;
    /// returns it.
    pub async fn refresh(&self, dir: &Path) -> Option<String> {
        let cell = self.0.as_ref()?;
        let dir = dir.to_path_buf();
        let fresh = match tokio::task::spawn_blocking(move || digest(&dir)).await {
            Ok(fresh) => fresh,
            Err(e) => {
                tracing::warn!("rules directory digest not computed: {e}");
                return self.get();
            }
        };
        match cell.lock() {
            Ok(mut held) => held.clone_from(&fresh),
            Err(e) => e.into_inner().clone_from(&fresh),
        }
        Some(fresh)
    }
}

/// What one `rulec` run gave.
#[derive(Debug)]
pub struct RulecOutput {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// At most [`MAX_RULEC_OUTPUT`] bytes of each.
    pub stdout: String,
    pub stderr: String,
}

/// Why `rulec` gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum RulecError {
    #[error("cannot run `{}`: {source}", rulec.display())]
    Spawn {
        rulec: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` gave no answer within {}s; it was killed", rulec.display(), timeout.as_secs())]
    Timeout { rulec: PathBuf, timeout: Duration },
    #[error("reading `{}`'s output: {source}", rulec.display())]
    Output {
        rulec: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Runs `rulec ARGS` (stdin closed), keeping a bounded part of its output;
/// killed after `timeout`.
pub async fn run_rulec(
    rulec: &Path,
    args: &[&std::ffi::OsStr],
    timeout: Duration,
) -> Result<RulecOutput, RulecError> {
    use tokio::io::AsyncReadExt;
    let mut child = tokio::process::Command::new(rulec)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| RulecError::Spawn {
            rulec: rulec.to_path_buf(),
            source,
        })?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(RulecError::Output {
            rulec: rulec.to_path_buf(),
            source: std::io::Error::other("no pipe"),
        });
    };
    // Read to the end (the child must not block on a full pipe), keeping
    // only the bound.
    let read = |pipe: Box<dyn tokio::io::AsyncRead + Unpin + Send>| async move {
        let mut kept = Vec::new();
        let mut pipe = pipe.take(MAX_RULEC_OUTPUT as u64);
        pipe.read_to_end(&mut kept).await?;
        tokio::io::copy(&mut pipe.into_inner(), &mut tokio::io::sink()).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&kept).into_owned())
    };
    let work = async {
        let (out, err, status) =
            tokio::join!(read(Box::new(stdout)), read(Box::new(stderr)), child.wait());
        Ok::<_, std::io::Error>((out?, err?, status?))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok((stdout, stderr, status))) => Ok(RulecOutput {
            code: status.code(),
            stdout,
            stderr,
        }),
        Ok(Err(source)) => Err(RulecError::Output {
            rulec: rulec.to_path_buf(),
            source,
        }),
        Err(_) => Err(RulecError::Timeout {
            rulec: rulec.to_path_buf(),
            timeout,
        }),
    }
}

/// One diagnostic line of `rulec --format json`, as people read it:
/// `file:line: severity[code]: message`, the file named relative to the
/// checked directory `dir`.
pub fn diagnostic_text(line: &serde_json::Value, dir: &Path) -> Option<String> {
    let severity = line.get("severity")?.as_str()?;
    let message = line.get("message")?.as_str()?;
    let file = line.get("file").and_then(|f| f.as_str()).unwrap_or("rules");
    let mut place = Path::new(file)
        .strip_prefix(dir)
        .map_or(file, |inside| inside.to_str().unwrap_or(file))
        .to_string();
    if let Some(number) = line.get("line").and_then(serde_json::Value::as_u64) {
        place.push_str(&format!(":{number}"));
    }
    let code = line.get("code").and_then(|c| c.as_str()).unwrap_or("");
    Some(format!("{place}: {severity}[{code}]: {message}"))
}

/// The diagnostics of `rulec --format json`'s stdout for the directory
/// `dir`, in order, as text; `true` for an error.
pub fn diagnostics(stdout: &str, dir: &Path) -> Vec<(bool, String)> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|line| {
            let error = line.get("severity")?.as_str()? == "error";
            Some((error, diagnostic_text(&line, dir)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_follows_the_rule_files_only() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let empty = digest(dir.path());
        assert_eq!(empty, digest(&dir.path().join("missing")));
        std::fs::write(dir.path().join("a.toml"), "x").unwrap_or_else(|e| panic!("{e}"));
        let one = digest(dir.path());
        assert_ne!(one, empty);
        // Not rule files: hidden, other extensions.
        std::fs::write(dir.path().join(".a.toml"), "y").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("a.toml.bak"), "y").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(digest(dir.path()), one);
        // Name and bytes are kept apart: `a.toml` = "x" differs from a
        // renamed file with the same bytes.
        std::fs::rename(dir.path().join("a.toml"), dir.path().join("b.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(digest(dir.path()), one);
        assert_eq!(one.len(), 64);
    }

    #[test]
    fn rulec_json_lines_read_as_text() {
        let out = "{\"file\":\"/r/a.toml\",\"line\":3,\"severity\":\"error\",\"code\":\"rulec::x\",\"message\":\"bad\"}\n{\"bundle\":\"id\"}\n";
        assert_eq!(
            diagnostics(out, Path::new("/r")),
            vec![(true, "a.toml:3: error[rulec::x]: bad".to_string())]
        );
    }
}
