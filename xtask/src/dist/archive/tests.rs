//! The archive's path test, `install.sh` into a scratch root, and
//! `systemd-analyze verify` of the installed units.

use super::*;
use crate::invariants::repository_root;
use std::collections::BTreeSet;

/// The files of a `.tar.gz`, as `tar --list` names them.
pub(crate) fn list(archive: &Path) -> Result<Vec<String>> {
    let mut command = Command::new("tar");
    command.arg("--list").arg("--file").arg(archive);
    let out = output_of("tar --list", &mut command)?;
    Ok(out.lines().map(str::to_string).collect())
}

/// A folder with stand-ins for the binaries: scripts that fail, so an
/// installer asking `rulec --version` learns it cannot run it.
fn stand_in_binaries(dir: &Path) -> PathBuf {
    let bins = dir.join("stand-ins");
    fs::create_dir_all(&bins).unwrap();
    for binary in super::super::BINARIES {
        let path = bins.join(binary);
        fs::write(&path, "#!/bin/sh\nexit 1\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }
    bins
}

/// The host's debug `ruled` and `rulec`, which a workspace test run builds
/// (both packages have integration tests), beside this test's binary.
fn host_binaries() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?.to_path_buf();
    super::super::BINARIES
        .iter()
        .all(|b| dir.join(b).is_file())
        .then_some(dir)
}

/// An archive assembled in `dir` from `binaries`, unpacked in `dir/unpacked`;
/// the unpacked top folder.
fn unpacked(dir: &Path, binaries: &Path) -> PathBuf {
    let made = assemble(&repository_root().unwrap(), binaries, RECIPE_TRIPLE, dir).unwrap();
    let into = dir.join("unpacked");
    fs::create_dir_all(&into).unwrap();
    let status = Command::new("tar")
        .arg("--extract")
        .arg("--file")
        .arg(&made.archive)
        .arg("-C")
        .arg(&into)
        .status()
        .unwrap();
    assert!(status.success());
    into.join(stem(RECIPE_TRIPLE))
}

/// `sh install.sh` with `DESTDIR=root`; its standard output.
fn install(top: &Path, root: &Path) -> String {
    let out = Command::new("sh")
        .arg(top.join("install.sh"))
        .env("DESTDIR", root)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    stdout
}

/// The archive paths a line of install.sh (`put MODE FROM TO`) or of the
/// recipe (`${S}/FROM`) names.
fn named_paths(install_sh: &str, recipe: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let installer = install_sh
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words[..] {
                ["put" | "keep", _mode, from, _to] => Some(from.to_string()),
                _ => None,
            }
        })
        .collect();
    let recipe = recipe
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("${S}/"))
        .map(str::to_string)
        .collect();
    (installer, recipe)
}

#[test]
fn every_path_install_sh_and_the_recipe_name_is_in_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let bins = stand_in_binaries(dir.path());
    let made = assemble(
        &repository_root().unwrap(),
        &bins,
        RECIPE_TRIPLE,
        dir.path(),
    )
    .unwrap();
    let stem = stem(RECIPE_TRIPLE);
    let files: BTreeSet<String> = list(&made.archive)
        .unwrap()
        .into_iter()
        .filter(|name| !name.ends_with('/'))
        .filter_map(|name| name.strip_prefix(&format!("{stem}/")).map(str::to_string))
        .collect();
    let recipe_path = made.recipe.unwrap();
    assert_eq!(
        recipe_path.file_name().unwrap().to_str().unwrap(),
        format!("scooter-rules_{VERSION}.bb")
    );
    let recipe = fs::read_to_string(&recipe_path).unwrap();
    let install_sh = fs::read_to_string(
        repository_root()
            .unwrap()
            .join(DIST_SOURCES)
            .join("install.sh"),
    )
    .unwrap();
    let (installed, recipe_named) = named_paths(&install_sh, &recipe);
    assert!(
        installed.len() >= 10 && recipe_named.len() >= 8,
        "{installed:?} {recipe_named:?}"
    );
    for path in installed.iter().chain(&recipe_named) {
        assert!(
            files.contains(path),
            "{path} is named but not in the archive {files:?}"
        );
    }
    // Nothing in the archive that install.sh leaves behind.
    let mut left: BTreeSet<&String> = files.iter().collect();
    left.retain(|f| !installed.contains(*f) && *f != "install.sh");
    assert!(left.is_empty(), "install.sh installs none of {left:?}");
    // The recipe names the archive it was made for, with its digest.
    let by_pv = |text: &str| text.replace("${PV}", VERSION);
    let archive_name = made.archive.file_name().unwrap().to_str().unwrap();
    assert!(
        by_pv(&recipe).contains(&format!("/{archive_name}\"")),
        "{recipe}"
    );
    assert!(
        by_pv(&recipe).contains(&format!("S = \"${{WORKDIR}}/{stem}\"")),
        "{recipe}"
    );
    let sha = digest("sha256sum", &made.archive).unwrap();
    assert!(
        recipe.contains(&format!("SRC_URI[sha256sum] = \"{sha}\"")),
        "{recipe}"
    );
    assert!(!recipe.contains('@') && !recipe.contains("#@"), "{recipe}");
    for unit in UNITS {
        assert!(recipe.contains(unit), "{unit}");
    }
}

#[test]
fn the_same_files_make_the_same_archive() {
    let dir = tempfile::tempdir().unwrap();
    let bins = stand_in_binaries(dir.path());
    let root = repository_root().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    fs::create_dir_all(&one).unwrap();
    fs::create_dir_all(&two).unwrap();
    let first = assemble(&root, &bins, "aarch64-unknown-linux-gnu", &one).unwrap();
    let second = assemble(&root, &bins, "aarch64-unknown-linux-gnu", &two).unwrap();
    assert!(first.recipe.is_none(), "only armv7 has a recipe");
    assert_eq!(
        fs::read(first.archive).unwrap(),
        fs::read(second.archive).unwrap()
    );
}

/// The mode of `path` (not following a symbolic link).
fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Every regular file under `dir`, as absolute paths of the installed root.
fn files_under(root: &Path, dir: &Path, found: &mut BTreeSet<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(root, &path, found);
        } else {
            found.insert(format!("/{}", path.strip_prefix(root).unwrap().display()));
        }
    }
}

#[test]
fn install_sh_into_a_scratch_root_lists_every_path_with_its_mode() {
    let Some(bins) = host_binaries() else {
        eprintln!(
            "SKIPPED: install.sh into a scratch root needs the host's debug ruled and rulec \
             beside this test (a workspace test run builds them); not found"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let top = unpacked(dir.path(), &bins);
    let root = dir.path().join("root");
    let printed = install(&top, &root);
    // For the record: what an install prints (shown with --nocapture).
    eprintln!("install.sh into a scratch root printed:\n{printed}");
    let mut listed = BTreeSet::new();
    for line in printed.lines() {
        let Some((mode_text, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(expected) = u32::from_str_radix(mode_text, 8) else {
            continue;
        };
        let path = rest.split(" (").next().unwrap().trim_end_matches('/');
        let on_disk = root.join(path.trim_start_matches('/'));
        assert_eq!(mode(&on_disk), expected, "{line}");
        listed.insert(path.to_string());
    }
    let mut installed = BTreeSet::new();
    files_under(&root, &root, &mut installed);
    let unlisted: Vec<&String> = installed.iter().filter(|f| !listed.contains(*f)).collect();
    assert!(
        unlisted.is_empty(),
        "installed but not listed: {unlisted:?}\n{printed}"
    );
    for path in [
        "/usr/bin/ruled",
        "/etc/ruled/control.key",
        "/var/lib/ruled/rules.bundle",
        "/data/extensions",
        "/etc/ruled",
    ] {
        assert!(listed.contains(path), "{path} not listed:\n{printed}");
    }
    assert!(
        printed.contains("DESTDIR is set: no unit enabled"),
        "{printed}"
    );
    let key = fs::read_to_string(root.join("etc/ruled/control.key")).unwrap();
    assert!(
        key.len() == 64 && key.chars().all(|c| c.is_ascii_hexdigit()),
        "{key:?}"
    );
    // Again: the key and the owner's settings stay; the rest is replaced.
    let again = install(&top, &root);
    assert!(again.contains("kept /etc/ruled/control.key"), "{again}");
    assert!(again.contains("kept /etc/default/ruled"), "{again}");
    assert_eq!(
        fs::read_to_string(root.join("etc/ruled/control.key")).unwrap(),
        key
    );
}

/// An owner who closed `/data/extensions` (0700) keeps it closed: a
/// directory that exists keeps its mode, and the listing says so.
#[test]
fn install_sh_keeps_the_mode_of_a_directory_that_exists() {
    let dir = tempfile::tempdir().unwrap();
    let top = unpacked(dir.path(), &stand_in_binaries(dir.path()));
    let root = dir.path().join("root");
    let rules = root.join("data/extensions");
    fs::create_dir_all(&rules).unwrap();
    fs::set_permissions(&rules, fs::Permissions::from_mode(0o700)).unwrap();
    let printed = install(&top, &root);
    assert_eq!(mode(&rules), 0o700, "{printed}");
    assert!(
        printed
            .lines()
            .any(|line| line == "0700 /data/extensions/ (exists, mode kept)"),
        "{printed}"
    );
    // A directory install.sh makes gets the mode it names.
    assert_eq!(mode(&root.join("var/lib/ruled")), 0o755, "{printed}");
}

#[test]
fn the_installed_units_pass_systemd_analyze_verify() {
    let host_units = Path::new("/usr/lib/systemd/system");
    let runs = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs || !host_units.join("sysinit.target").exists() {
        eprintln!(
            "SKIPPED: systemd-analyze verify needs systemd-analyze and the host's units in {} \
             (for the targets the units are ordered against); this machine lacks them",
            host_units.display()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let top = unpacked(dir.path(), &stand_in_binaries(dir.path()));
    let root = dir.path().join("root");
    install(&top, &root);
    // What verify resolves inside the root besides our files: systemd's
    // own units, and the `kill` of ExecReload.
    copy_tree(host_units, &root.join("usr/lib/systemd/system"));
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::copy("/bin/kill", root.join("bin/kill")).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(format!("--root={}", root.display()))
        .args(
            UNITS
                .iter()
                .map(|unit| format!("/etc/systemd/system/{unit}")),
        )
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {}\n{said}",
        out.status
    );
}

/// `from`'s files (and symbolic links, as links) copied under `to`.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (path, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&path).unwrap(), &target).unwrap();
        } else if kind.is_dir() {
            copy_tree(&path, &target);
        } else {
            fs::copy(&path, &target).unwrap();
        }
    }
}
