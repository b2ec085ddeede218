//! Every file `rulec` writes gets the ordinary mode under the umask (0644
//! with umask 022), and a file it replaces keeps its mode
//! (docs/bundle.md#building): a bundle the service user cannot read is a
//! deploy that silently fails.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod support;

use insta_cmd::get_cargo_bin;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use support::root;

/// `rulec ARGS` run from `dir` under `umask`; its exit code and stderr.
fn rulec_under(umask: &str, dir: &Path, args: &[&str]) -> (i32, String) {
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
        .arg(get_cargo_bin("rulec"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// A temp dir holding a copy of fixtures/`from` as `rules/`.
fn copy(from: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    fs::create_dir_all(&rules).unwrap();
    for entry in fs::read_dir(root().join("fixtures").join(from)).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            fs::copy(&path, rules.join(path.file_name().unwrap())).unwrap();
        }
    }
    dir
}

#[test]
fn a_bundle_gets_the_umask_s_mode_and_a_replaced_one_keeps_its_own() {
    let dir = copy("rules");
    let bundle = dir.path().join("rules.bundle");
    let (code, err) = rulec_under("022", dir.path(), &["build", "rules", "-o", "rules.bundle"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mode(&bundle), 0o644, "umask 022");
    let (code, err) = rulec_under("027", dir.path(), &["build", "rules", "-o", "other.bundle"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mode(&dir.path().join("other.bundle")), 0o640, "umask 027");
    // Replaced: the mode an operator gave it stays.
    fs::set_permissions(&bundle, fs::Permissions::from_mode(0o640)).unwrap();
    let (code, err) = rulec_under("077", dir.path(), &["build", "rules", "-o", "rules.bundle"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mode(&bundle), 0o640, "replaced");
}

#[test]
fn a_fix_rewrite_keeps_the_file_s_mode() {
    let dir = copy("fix/go-service");
    let rules = dir.path().join("rules");
    let readable = rules.join("20-battery.toml");
    let private = rules.join("30-lights.toml");
    fs::set_permissions(&readable, fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o600)).unwrap();
    let before = (fs::read(&readable).unwrap(), fs::read(&private).unwrap());
    let (code, err) = rulec_under("022", dir.path(), &["fix", "rules"]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(fs::read(&readable).unwrap(), before.0, "rewritten");
    assert_ne!(fs::read(&private).unwrap(), before.1, "rewritten");
    assert_eq!(mode(&readable), 0o644);
    assert_eq!(mode(&private), 0o600);
}

#[test]
fn a_junit_report_gets_the_umask_s_mode() {
    let dir = copy("rules");
    let tests = dir.path().join("rules/tests");
    fs::create_dir_all(&tests).unwrap();
    for entry in fs::read_dir(root().join("fixtures/rules/tests")).unwrap() {
        let path = entry.unwrap().path();
        fs::copy(&path, tests.join(path.file_name().unwrap())).unwrap();
    }
    let (code, err) = rulec_under(
        "022",
        dir.path(),
        &["test", "rules", "--junit", "report.xml"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(mode(&dir.path().join("report.xml")), 0o644);
}

/// A rule file that is a symbolic link is never replaced by a regular
/// file (which would cut the link): `rulec fix` writes nothing and names
/// the link's target. Through the link, `--dry-run` still shows the fix.
#[test]
fn fix_refuses_to_replace_a_symbolic_link_and_names_its_target() {
    let dir = copy("fix/go-service");
    let rules = dir.path().join("rules");
    let shared = dir.path().join("shared.toml");
    fs::rename(rules.join("30-lights.toml"), &shared).unwrap();
    std::os::unix::fs::symlink(&shared, rules.join("30-lights.toml")).unwrap();
    let before = (
        fs::read(rules.join("20-battery.toml")).unwrap(),
        fs::read(&shared).unwrap(),
    );
    let (code, err) = rulec_under("022", dir.path(), &["fix", "rules"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "error: rules/30-lights.toml is a symbolic link to {}: not replaced, nothing written",
            shared.display()
        )),
        "{err}"
    );
    let link = fs::symlink_metadata(rules.join("30-lights.toml")).unwrap();
    assert!(link.file_type().is_symlink(), "still a link");
    assert_eq!(fs::read(&shared).unwrap(), before.1, "target untouched");
    assert_eq!(
        fs::read(rules.join("20-battery.toml")).unwrap(),
        before.0,
        "no other file written either"
    );
    let (code, err) = rulec_under("022", dir.path(), &["fix", "rules", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
}
