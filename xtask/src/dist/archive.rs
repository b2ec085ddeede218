//! The installable archive `cargo xtask dist` makes per target, and the
//! BitBake recipe beside the armv7 one (docs/scooter-build.md#the-archive):
//! the binaries, the systemd units, the `/etc/default/ruled` example, the
//! docs and `install.sh` (docs/librescoot.md#installing).
//!
//! Assembly takes the folder the binaries are in, so that the tests put
//! host-built binaries in an archive without a cross build.

use anyhow::{bail, Context, Result};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The version every archive and recipe is named with: the workspace's.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The project's home page, the recipe's `HOMEPAGE` and download mirror.
const HOMEPAGE: &str = env!("CARGO_PKG_REPOSITORY");

/// The target the BitBake recipe installs: the scooter's own CPU.
pub(crate) const RECIPE_TRIPLE: &str = "armv7-unknown-linux-gnueabihf";

/// Where the units, `install.sh`, the env file and the recipe template
/// live in the repository.
const DIST_SOURCES: &str = "runtime/service/dist";

/// The docs pages shipped (`doc/` in the archive).
const DOCS: &[&str] = &[
    "librescoot.md",
    "sources.md",
    "service.md",
    "operating.md",
    "rules.md",
    "rulec.md",
    "when-language.md",
    "semantics.md",
    "diagnostics.md",
];

/// The systemd units (`systemd/` in the archive).
const UNITS: &[&str] = &["ruled.service", "ruled-rules.path", "ruled-rules.service"];

/// One file of the archive: its path inside the archive's top folder,
/// where it comes from, and its mode.
#[derive(Debug)]
struct Entry {
    path: String,
    from: PathBuf,
    mode: u32,
}

/// What [`assemble`] made.
#[derive(Debug)]
pub(crate) struct Assembled {
    pub(crate) archive: PathBuf,
    /// `scooter-rules_<version>.bb`, for [`RECIPE_TRIPLE`] only.
    pub(crate) recipe: Option<PathBuf>,
}

/// `scooter-rules-<version>-<triple>`: the archive's name without
/// `.tar.gz`, and its top folder.
pub(crate) fn stem(triple: &str) -> String {
    format!("scooter-rules-{VERSION}-{triple}")
}

/// Every file of the archive for binaries in `binaries`.
fn entries(root: &Path, binaries: &Path) -> Vec<Entry> {
    let dist = root.join(DIST_SOURCES);
    let entry = |path: String, from: PathBuf, mode: u32| Entry { path, from, mode };
    let mut list = vec![
        entry("install.sh".into(), dist.join("install.sh"), 0o755),
        entry("LICENSE".into(), root.join("LICENSE"), 0o644),
        entry(
            "etc/default/ruled".into(),
            dist.join("default.ruled"),
            0o644,
        ),
    ];
    for binary in super::BINARIES {
        list.push(entry(format!("bin/{binary}"), binaries.join(binary), 0o755));
    }
    for unit in UNITS {
        list.push(entry(format!("systemd/{unit}"), dist.join(unit), 0o644));
    }
    for doc in DOCS {
        list.push(entry(
            format!("doc/{doc}"),
            root.join("docs").join(doc),
            0o644,
        ));
    }
    list
}

/// Makes `out/<stem>.tar.gz` for `triple` from the repository at `root` and
/// the binaries in `binaries`, and beside the armv7 one its recipe.
pub(crate) fn assemble(
    root: &Path,
    binaries: &Path,
    triple: &str,
    out: &Path,
) -> Result<Assembled> {
    let stem = stem(triple);
    let staging = out.join(format!(".{stem}.staging"));
    if staging.exists() {
        fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    for entry in entries(root, binaries) {
        let to = staging.join(&stem).join(&entry.path);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        fs::copy(&entry.from, &to)
            .with_context(|| format!("copying {} to {}", entry.from.display(), to.display()))?;
        fs::set_permissions(&to, fs::Permissions::from_mode(entry.mode))
            .with_context(|| format!("setting the mode of {}", to.display()))?;
    }
    let archive = out.join(format!("{stem}.tar.gz"));
    tar(&staging, &stem, &archive)?;
    fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    let recipe = if triple == RECIPE_TRIPLE {
        Some(write_recipe(root, &archive, out)?)
    } else {
        None
    };
    Ok(Assembled { archive, recipe })
}

/// GNU tar of `dir/stem` into `archive`, the same bytes for the same
/// files: names sorted, owner root, times `SOURCE_DATE_EPOCH` (else 0),
/// gzip without a name or time of its own.
fn tar(dir: &Path, stem: &str, archive: &Path) -> Result<()> {
    let epoch = std::env::var("SOURCE_DATE_EPOCH").unwrap_or_else(|_| "0".to_string());
    let mut command = Command::new("tar");
    command
        .arg("--create")
        .arg("--file")
        .arg(archive)
        .args(["--use-compress-program", "gzip -n"])
        .args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner"])
        .arg(format!("--mtime=@{epoch}"))
        .arg("-C")
        .arg(dir)
        .arg(stem);
    output_of("tar --create", &mut command).map(|_| ())
}

/// The standard output of `command`, which must succeed.
fn output_of(what: &str, command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("could not start {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("{what} printed non-UTF-8"))
}

/// The hex digest `tool` (`sha256sum`, `md5sum`) prints for `path`.
fn digest(tool: &str, path: &Path) -> Result<String> {
    let out = output_of(tool, Command::new(tool).arg(path))?;
    match out.split_whitespace().next() {
        Some(hex) if hex.chars().all(|c| c.is_ascii_hexdigit()) => Ok(hex.to_string()),
        _ => bail!("{tool} printed no digest for {}: {out:?}", path.display()),
    }
}

/// `scooter-rules_<version>.bb` in `out`, from the template, for `archive`.
fn write_recipe(root: &Path, archive: &Path, out: &Path) -> Result<PathBuf> {
    let template_path = root.join(DIST_SOURCES).join("scooter-rules.bb.in");
    let template = fs::read_to_string(&template_path)
        .with_context(|| format!("reading {}", template_path.display()))?;
    let recipe = recipe_text(
        &template,
        &digest("sha256sum", archive)?,
        &digest("md5sum", &root.join("LICENSE"))?,
    );
    let path = out.join(format!("scooter-rules_{VERSION}.bb"));
    fs::write(&path, recipe).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The recipe: the template without its own comment lines (`#@` at the
/// start), its placeholders filled in.
fn recipe_text(template: &str, sha256: &str, license_md5: &str) -> String {
    let mut text = String::new();
    for line in template.lines().filter(|line| !line.starts_with("#@")) {
        text.push_str(line);
        text.push('\n');
    }
    text.replace("@HOMEPAGE@", HOMEPAGE)
        .replace("@TRIPLE@", RECIPE_TRIPLE)
        .replace("@SHA256@", sha256)
        .replace("@LICENSE_MD5@", license_md5)
}

#[cfg(test)]
mod tests;
