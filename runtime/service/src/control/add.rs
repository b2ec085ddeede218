//! `v1.add` with `--rules-dir` (docs/operating.md#adding-a-rule): one rule
//! as TOML, compiled by the installed `rulec build` on a scratch copy of
//! the rules directory with the new file in it (so the directory's
//! catalogue and rule names count), its steps read back from that bundle
//! for what an unsigned request may add (docs/operating.md#trust), within
//! the managed files' quota, then written as the managed file
//! `DIR/lsc-<rule>.toml`, which the rebuild (`ruled rebuild`,
//! docs/service.md#ruled-rebuild) makes live. Runs in the control server's
//! task, its file work and `rulec` off the engine's loop. Every file it
//! creates is created exclusively, never through a symlink.

use super::protocol::{AddReply, AddRequest};
use super::trust;
use super::wire::Reply;
use crate::rules_dir::{self, Revision, RulesDir, MAX_RULE_FILE_BYTES};
use rulecore_io::input_file::read_bounded;
use serde::Deserialize;
use serde_json::Value;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest definition taken.
pub const MAX_DEFINITION_BYTES: usize = 32 * 1024;
/// How long `rulec build` of the scratch copy may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(20);
/// The most managed files `v1.add` keeps in the rules directory.
pub const MAX_MANAGED_FILES: usize = 64;
/// The most bytes the managed files hold in all.
pub const MAX_MANAGED_BYTES: u64 = 1024 * 1024;
/// The bundle `rulec build` writes in the scratch directory (not a rule
/// file: `rulec` reads `*.toml`).
const SCRATCH_BUNDLE: &str = "added.bundle";
/// Names tried for a scratch directory or a temporary file before giving
/// up (another holds the name: left over, or planted).
const NAME_TRIES: u32 = 16;
/// Diagnostics a refusal lists, and how long each may be.
const MAX_DIAGNOSTICS: usize = 20;
const MAX_DIAGNOSTIC_CHARS: usize = 400;
/// The longest rule name a managed file is named after.
const MAX_NAME_BYTES: usize = 100;
/// The first line of a managed file an unsigned request wrote; with
/// [`SIGNED_HEADER`], the only files `v1.add` replaces and counts.
pub const MANAGED_HEADER: &str =
    "# Written by ruled (v1.add); a later v1.add of this rule replaces it.";
/// The first line of a managed file a signed request wrote: only a signed
/// request replaces it, so an unsigned one cannot undo what the key's
/// holder added (docs/operating.md#trust).
pub const SIGNED_HEADER: &str =
    "# Written by ruled (v1.add, signed); only a signed v1.add of this rule replaces it.";

/// Who wrote a rule file, by its first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    /// Not `v1.add`: never replaced.
    Other,
    Unsigned,
    Signed,
}

impl Writer {
    fn of(bytes: &[u8]) -> Self {
        if bytes.starts_with(SIGNED_HEADER.as_bytes()) {
            Writer::Signed
        } else if bytes.starts_with(MANAGED_HEADER.as_bytes()) {
            Writer::Unsigned
        } else {
            Writer::Other
        }
    }
}

/// What `v1.add` works on.
#[derive(Debug, Clone)]
pub struct Adding {
    pub rules: RulesDir,
    pub revision: Revision,
}

/// Answers one `v1.add`; `signed`: the request was signed with the
/// control key, and verified.
pub async fn answer(adding: &Adding, payload: &Value, signed: bool) -> Reply {
    match add(adding, payload, signed).await {
        Ok(payload) => Reply::ok(payload),
        Err(error) => Reply::error(format!("v1.add: {error}")),
    }
}

async fn add(adding: &Adding, payload: &Value, signed: bool) -> Result<Value, String> {
    let AddRequest {
        definition,
        expected_revision,
    } = AddRequest::deserialize(payload).map_err(|e| format!("bad payload: {e}"))?;
    if definition.len() > MAX_DEFINITION_BYTES {
        return Err(format!(
            "the definition is {} bytes; at most {} KiB are taken",
            definition.len(),
            MAX_DEFINITION_BYTES / 1024
        ));
    }
    let loaded = adding.revision.get().unwrap_or_default();
    if !expected_revision.is_empty() && expected_revision != loaded {
        return Err(format!(
            "the rules changed since they were read: expected revision `{}`, the rules \
             directory's revision is `{loaded}`; nothing was written, read them again and retry",
            expected_revision.chars().take(100).collect::<String>()
        ));
    }
    let name = rule_name(&definition)?;
    let file_name = format!("lsc-{name}.toml");
    let header = if signed {
        SIGNED_HEADER
    } else {
        MANAGED_HEADER
    };
    let text = format!("{header}\n{definition}\n");
    let dir = adding.rules.dir.clone();
    let scratch = {
        let (file_name, text) = (file_name.clone(), text.clone());
        blocking(move || scratch_copy(&dir, &file_name, &text, signed)).await?
    };
    let built = build(&adding.rules.rulec, &scratch.0).await;
    // Read back, and the scratch copy removed, off the loop too.
    {
        let name = name.clone();
        blocking(move || {
            let allowed = built.and_then(|()| may_add(&scratch.0, &name, signed));
            drop(scratch);
            allowed
        })
        .await?;
    }
    let path = adding.rules.dir.join(&file_name);
    {
        let path = path.clone();
        blocking(move || write_managed(&path, &text)).await?;
    }
    let revision = adding.revision.refresh(&adding.rules.dir).await;
    tracing::info!(rule = %name, file = %path.display(), "rule added (v1.add)");
    super::methods::encoded(&AddReply {
        // `lsc`'s mutation reply (docs/operating.md#the-fields-lsc-reads).
        name,
        revision: revision.unwrap_or_default(),
        pending_restart: false,
        message: format!(
            "written to {}; the rebuild of the rules directory makes it live",
            path.display()
        ),
        // Ours.
        file: path.display().to_string(),
    })
}

/// Whether the request may add rule `name`, as `rulec` built it into the
/// scratch directory's bundle: signed, anything `rulec` takes; unsigned,
/// what [`trust::unsigned_may_add`] allows.
fn may_add(scratch: &Path, name: &str, signed: bool) -> Result<(), String> {
    if signed {
        return Ok(());
    }
    let bundle = rulecore_io::bundle_file::read(&scratch.join(SCRATCH_BUNDLE))
        .map_err(|e| format!("internal: the bundle rulec built is not readable: {e}"))?;
    let Some(rule) = bundle.payload.rules.iter().find(|r| &*r.name == name) else {
        // A disabled rule with errors is left out of the bundle: its steps
        // cannot be read, so an unsigned request cannot add it.
        return Err(format!(
            "refused, nothing was written: rule `{name}` is not in the bundle rulec built (a \
             disabled rule with errors is left out), so its steps cannot be checked; unsigned, \
             v1.add takes only a rule that compiles"
        ));
    };
    trust::unsigned_may_add(rule)
        .map_err(|refusal| format!("refused, nothing was written: {refusal}"))
}

/// Runs `work` on a blocking thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("internal: {e}"))?
}

/// The name of the definition's one rule, if it is safe as a file name.
fn rule_name(definition: &str) -> Result<String, String> {
    let table: toml::Table = definition
        .parse()
        .map_err(|e: toml::de::Error| format!("the definition is not TOML: {}", e.message()))?;
    let rules = table.get("rule").and_then(toml::Value::as_array);
    let [rule] = rules.map(Vec::as_slice).unwrap_or_default() else {
        return Err("the definition must hold exactly one rule (one `[[rule]]` table)".into());
    };
    let Some(name) = rule.get("name").and_then(toml::Value::as_str) else {
        return Err("the rule has no `name` string".into());
    };
    let safe = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !safe {
        return Err(format!(
            "the rule name {:?} cannot name a file: v1.add takes names of at most \
             {MAX_NAME_BYTES} letters, digits, `-`, `_` and `.`, not starting with `.`",
            name.chars().take(100).collect::<String>()
        ));
    }
    Ok(name.to_string())
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!("scratch directory {} not removed: {e}", self.0.display());
        }
    }
}

/// The rule files of `dir` copied into a fresh scratch directory, with
/// `text` as `file_name` (over a managed file of that name; refused over
/// a file nobody wrote through `v1.add`, unsigned over one a signed
/// request wrote, and when the managed files would pass their quota).
fn scratch_copy(dir: &Path, file_name: &str, text: &str, signed: bool) -> Result<Scratch, String> {
    let scratch = scratch_dir()?;
    let files = match rules_dir::rule_files(dir) {
        Ok(files) => files,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(format!(
                "cannot read the rules directory {}: {e}",
                dir.display()
            ))
        }
    };
    let mut managed = Managed::default();
    for (name, from) in files {
        let bytes = read_bounded(&from, MAX_RULE_FILE_BYTES).map_err(|e| e.to_string())?;
        let writer = Writer::of(&bytes);
        if name == file_name {
            replaceable(&from, writer, signed)?;
        } else {
            if writer != Writer::Other {
                managed.count(bytes.len());
            }
            write_new(&scratch.0.join(&name), &bytes).map_err(|e| format!("scratch copy: {e}"))?;
        }
    }
    managed.count(text.len());
    managed.check(dir, file_name)?;
    write_new(&scratch.0.join(file_name), text.as_bytes())
        .map_err(|e| format!("scratch copy: {e}"))?;
    Ok(scratch)
}

/// Whether the request may replace the rule file `path` its `writer`
/// wrote.
fn replaceable(path: &Path, writer: Writer, signed: bool) -> Result<(), String> {
    match (writer, signed) {
        (Writer::Other, _) => Err(format!(
            "{} exists and was not written by v1.add: it is not replaced; rename the rule \
             or edit that file",
            path.display()
        )),
        (Writer::Signed, false) => Err(format!(
            "refused, nothing was written: {} was written by a signed request, and only a \
             signed request (--control-key) replaces it",
            path.display()
        )),
        _ => Ok(()),
    }
}

/// A fresh scratch directory (mode 0700) under the temporary directory,
/// made by this call: a name that exists (left over, or a symlink planted
/// at the predictable `ruled-add-<pid>-<n>`) is passed over.
fn scratch_dir() -> Result<Scratch, String> {
    use std::os::unix::fs::DirBuilderExt;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut last = None;
    for _ in 0..NAME_TRIES {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("ruled-add-{}-{n}", std::process::id()));
        // `mkdir` creates or fails; it never follows a symlink at `path`.
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(Scratch(path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(path),
            Err(e) => {
                return Err(format!(
                    "cannot make a scratch directory {}: {e}",
                    path.display()
                ))
            }
        }
    }
    Err(format!(
        "cannot make a scratch directory: {NAME_TRIES} names taken, the last {}",
        last.unwrap_or_default().display()
    ))
}

/// The managed files a rules directory would hold after the add.
#[derive(Default)]
struct Managed {
    files: usize,
    bytes: u64,
}

impl Managed {
    fn count(&mut self, bytes: usize) {
        self.files += 1;
        self.bytes = self.bytes.saturating_add(bytes as u64);
    }

    /// Within [`MAX_MANAGED_FILES`] and [`MAX_MANAGED_BYTES`]: a full
    /// directory refuses new rules, not Redis clients' disk space.
    fn check(&self, dir: &Path, file_name: &str) -> Result<(), String> {
        if self.files > MAX_MANAGED_FILES {
            return Err(format!(
                "refused, nothing was written: {} holds {} managed files (written by v1.add), \
                 and {file_name} would be the {}th; v1.add keeps at most {MAX_MANAGED_FILES}: \
                 remove one (`rm {}/lsc-NAME.toml`, then `ruled rebuild`) or replace one by \
                 adding a rule of its name",
                dir.display(),
                self.files - 1,
                self.files,
                dir.display()
            ));
        }
        if self.bytes > MAX_MANAGED_BYTES {
            return Err(format!(
                "refused, nothing was written: with {file_name} the managed files in {} would \
                 hold {} bytes; v1.add keeps at most {} KiB ({MAX_MANAGED_BYTES} bytes) in all: \
                 remove or shorten one",
                dir.display(),
                self.bytes,
                MAX_MANAGED_BYTES / 1024
            ));
        }
        Ok(())
    }
}

/// Creates `path` holding `bytes`; fails if anything is there already,
/// a symlink included (`O_CREAT|O_EXCL`, and `O_NOFOLLOW`).
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = create_new(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// `path` created by this call, the ordinary mode under the umask; never
/// opened through a symlink.
fn create_new(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// `rulec build --format json` of the scratch directory into its bundle:
/// `Ok` when it has no errors, else the diagnostics, bounded.
async fn build(rulec: &Path, dir: &Path) -> Result<(), String> {
    let bundle = dir.join(SCRATCH_BUNDLE);
    let args = [
        "build".as_ref(),
        dir.as_os_str(),
        "-o".as_ref(),
        bundle.as_os_str(),
        "--format".as_ref(),
        "json".as_ref(),
    ];
    let output = rules_dir::run_rulec(rulec, &args, CHECK_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    if output.code == Some(0) {
        return Ok(());
    }
    let errors: Vec<String> = rules_dir::diagnostics(&output.stdout, dir)
        .into_iter()
        .filter(|(error, _)| *error)
        .map(|(_, text)| text.chars().take(MAX_DIAGNOSTIC_CHARS).collect())
        .collect();
    let mut message = String::from("refused, nothing was written: rulec build found ");
    if errors.is_empty() {
        let said: String = output
            .stderr
            .trim()
            .chars()
            .take(MAX_DIAGNOSTIC_CHARS)
            .collect();
        message.push_str(&format!("a problem (exit {:?}): {said}", output.code));
        return Err(message);
    }
    message.push_str(&format!("{} error(s)", errors.len()));
    for line in errors.iter().take(MAX_DIAGNOSTICS) {
        message.push_str("\n  ");
        message.push_str(line);
    }
    if errors.len() > MAX_DIAGNOSTICS {
        message.push_str(&format!(
            "\n  ... and {} more",
            errors.len() - MAX_DIAGNOSTICS
        ));
    }
    Err(message)
}

/// Writes `text` to `path` atomically (a hidden temporary file beside it,
/// created by this call and never through a symlink, then a rename, which
/// replaces a symlink at `path` itself), with the ordinary mode under the
/// umask.
fn write_managed(path: &Path, text: &str) -> Result<(), String> {
    let (temp, mut file) = temp_beside(path)?;
    let written = (|| {
        use std::io::Write;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    written.map_err(|e| {
        // Ours: made by this call.
        if let Err(left) = std::fs::remove_file(&temp) {
            tracing::warn!("temporary file {} not removed: {left}", temp.display());
        }
        format!("cannot write {}: {e}", path.display())
    })
}

/// A temporary file beside `path`, `.<name>.<pid>.tmp` (or `-<k>` after
/// the pid when that name is taken: left over, or planted), created by
/// this call.
fn temp_beside(path: &Path) -> Result<(PathBuf, File), String> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let pid = std::process::id();
    for k in 0..NAME_TRIES {
        let suffix = if k == 0 {
            String::new()
        } else {
            format!("-{k}")
        };
        let temp = path.with_file_name(format!(".{name}.{pid}{suffix}.tmp"));
        match create_new(&temp) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot write {}: {e}", temp.display())),
        }
    }
    Err(format!(
        "cannot write {}: {NAME_TRIES} temporary names beside it are taken",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_rule_names_the_file() {
        let one = "[[rule]]\nname = \"horn-2\"\non = [\"x\"]\n";
        assert_eq!(rule_name(one).as_deref(), Ok("horn-2"));
        let two = format!("{one}{one}");
        assert!(rule_name(&two).is_err_and(|e| e.contains("exactly one")));
        assert!(rule_name("x = 1").is_err_and(|e| e.contains("exactly one")));
        assert!(rule_name("[[rule]]\non = []").is_err_and(|e| e.contains("no `name`")));
        for bad in ["../x", ".hidden", "a/b", "a b", ""] {
            let text = format!("[[rule]]\nname = {bad:?}\n");
            assert!(
                rule_name(&text).is_err_and(|e| e.contains("cannot name a file")),
                "{bad}"
            );
        }
        assert!(rule_name("[[rule]\n").is_err_and(|e| e.contains("not TOML")));
    }
}
