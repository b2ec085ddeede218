//! The install by hand, as the docs write it (README.md#building-for-the-scooter-and-installing,
//! docs/scooter-build.md#installing): every fenced `sh` block between
//! `<!-- install by hand ... -->` and `<!-- end install by hand -->` is run,
//! line by line, as written, then `ruled` is started the way the installed
//! unit says and must come up.
//!
//! Nothing is run on a scooter, and nothing outside temp dirs is touched:
//! - the blocks for your machine run in a scratch folder laid out as the
//!   checkout (`rules/` with the example rules, the unit as shipped, and
//!   this host's `ruled` where the cross-built one would be), with `rulec`
//!   the host's;
//! - a block whose first line is a comment ending `as root` runs on the
//!   scooter (or board): every absolute path but `/dev/...` moved into a
//!   scratch root that has the folders every root has (`/tmp`, `/usr/bin`,
//!   `/etc/systemd/system`, `/var/lib`), relative paths in the checkout;
//! - `scp HOST:/DIR/` copies into the scratch root's `/DIR/`; `systemctl`,
//!   `journalctl` and `cargo` (its build is already done: the host's
//!   `ruled` is in place) only record what they were asked (shims on the
//!   `PATH`);
//! - `systemctl enable --now ruled` is then done by this test: the
//!   installed unit's `ExecStart` with its `Environment=` lines (and its
//!   `EnvironmentFile=` when there is one), paths in the scratch root, and
//!   `--redis` to a throwaway redis-server of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::ctl::ctl;
use support::librescoot::rulec;
use support::{RedisServer, Ruled};

/// The marked blocks of one doc: each block's lines.
fn blocks(doc: &str) -> Vec<Vec<String>> {
    let Some(start) = doc.find("<!-- install by hand") else {
        return Vec::new();
    };
    let section = &doc[start..];
    let end = section
        .find("<!-- end install by hand -->")
        .expect("the install-by-hand section is closed by `<!-- end install by hand -->`");
    let mut found = Vec::new();
    let mut block: Option<Vec<String>> = None;
    for line in section[..end].lines() {
        match (&mut block, line.trim_start().starts_with("```")) {
            (None, true) => block = Some(Vec::new()),
            (Some(_), true) => found.extend(block.take()),
            (Some(lines), false) => lines.push(line.to_string()),
            (None, false) => {}
        }
    }
    found
}

/// A block for the scooter (or board): its first line is a comment ending
/// `as root`.
fn runs_as_root(block: &[String]) -> bool {
    block
        .first()
        .is_some_and(|line| line.starts_with('#') && line.trim_end().ends_with("as root"))
}

/// `line` with each absolute path (a `/` at the start of a word, or after
/// `>`, `<`, `=` or `(`) moved under `root`; `/dev/...` stays.
fn into_root(line: &str, root: &Path) -> String {
    let root = root.display().to_string();
    let mut out = String::new();
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        let starts_path = matches!(previous, ' ' | '>' | '<' | '=' | '(');
        if c == '/' && starts_path && !line[at..].starts_with("/dev/") {
            out.push_str(&root);
        }
        out.push(c);
        previous = c;
    }
    out
}

fn write_script(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A scratch machine: the host folder laid out as the checkout, the
/// scooter's scratch root, and the shims.
struct Scratch {
    dir: tempfile::TempDir,
    host: PathBuf,
    root: PathBuf,
    shims: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let (host, root, shims) = (
            dir.path().join("host"),
            dir.path().join("root"),
            dir.path().join("shims"),
        );
        // The folders every root has (the files are copied to /tmp).
        for made in ["tmp", "usr/bin", "etc/systemd/system", "var/lib"] {
            std::fs::create_dir_all(root.join(made)).unwrap();
        }
        for made in [&host, &shims] {
            std::fs::create_dir_all(made).unwrap();
        }
        // The checkout's files the commands name; the host's ruled stands
        // in for the cross-built one (the same program, another CPU).
        let rules = host.join("rules");
        std::fs::create_dir_all(&rules).unwrap();
        for entry in std::fs::read_dir(repo.join("fixtures/rules")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "toml") {
                std::fs::copy(&path, rules.join(path.file_name().unwrap())).unwrap();
            }
        }
        for built in [
            "target/dist/armv7-unknown-linux-gnueabihf",
            "target/release",
        ] {
            let dir = host.join(built);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::copy(env!("CARGO_BIN_EXE_ruled"), dir.join("ruled")).unwrap();
        }
        let units = host.join("runtime/service/dist");
        std::fs::create_dir_all(&units).unwrap();
        std::fs::copy(
            repo.join("runtime/service/dist/ruled.service"),
            units.join("ruled.service"),
        )
        .unwrap();
        std::os::unix::fs::symlink(rulec(), shims.join("rulec")).unwrap();
        write_script(
            &shims.join("scp"),
            &format!(
                "#!/bin/sh\n# scp FILE... HOST:DIR/: into the scratch root's DIR\n\
                 for last; do :; done\n\
                 dest={root}/${{last#*:}}\n\
                 while [ $# -gt 1 ]; do cp \"$1\" \"$dest\" || exit 1; shift; done\n",
                root = root.display()
            ),
        );
        for recorded in ["systemctl", "journalctl", "cargo"] {
            write_script(
                &shims.join(recorded),
                &format!(
                    "#!/bin/sh\necho \"$0 $*\" >> {}/asked.log\n",
                    dir.path().display()
                ),
            );
        }
        Self {
            dir,
            host,
            root,
            shims,
        }
    }

    /// Runs one block's lines, each with `sh -c`, stopping at a failure.
    fn run(&self, place: &str, block: &[String]) {
        let on_scooter = runs_as_root(block);
        let path = format!(
            "{}:{}",
            self.shims.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        for line in block {
            let text = if on_scooter {
                into_root(line, &self.root)
            } else {
                line.clone()
            };
            let out = Command::new("sh")
                .args(["-c", &text])
                .current_dir(&self.host)
                .env("PATH", &path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{place}: `{line}` (run as `{text}`) failed: {}\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// What `systemctl`, `journalctl` and `cargo` were asked, one call a line.
    fn asked(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("asked.log")).unwrap_or_default()
    }

    /// The installed unit's program and environment, in the scratch root.
    fn unit(&self) -> (PathBuf, Vec<(String, String)>) {
        let unit = std::fs::read_to_string(self.root.join("etc/systemd/system/ruled.service"))
            .expect("the unit is installed in /etc/systemd/system");
        let mut program = None;
        let mut env = Vec::new();
        let assignment = |line: &str, env: &mut Vec<(String, String)>| {
            if let Some((name, value)) = line.split_once('=') {
                env.push((name.to_string(), into_root(value, &self.root)));
            }
        };
        for line in unit.lines().map(str::trim) {
            if let Some(exec) = line.strip_prefix("ExecStart=") {
                program = Some(PathBuf::from(into_root(exec, &self.root)));
            } else if let Some(setting) = line.strip_prefix("Environment=") {
                assignment(setting, &mut env);
            } else if let Some(file) = line.strip_prefix("EnvironmentFile=") {
                // `-`: a file that is not there is no error.
                let (optional, file) = match file.strip_prefix('-') {
                    Some(file) => (true, file),
                    None => (false, file),
                };
                match std::fs::read_to_string(into_root(file, &self.root)) {
                    Ok(text) => text
                        .lines()
                        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                        .for_each(|l| assignment(l.trim(), &mut env)),
                    Err(e) => assert!(optional, "EnvironmentFile={file}: {e}"),
                }
            }
        }
        (program.expect("the unit has ExecStart="), env)
    }
}

/// The install by hand of one doc, then `ruled` as its unit starts it.
fn install_by_hand(doc: &str) {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(doc),
    )
    .unwrap();
    let blocks = blocks(&text);
    assert!(
        blocks.iter().any(|block| runs_as_root(block)),
        "{doc}: no marked install-by-hand block that runs on the scooter (`# ..., as root`)"
    );
    let scratch = Scratch::new();
    for block in &blocks {
        scratch.run(doc, block);
    }
    assert!(
        scratch.asked().contains("systemctl daemon-reload")
            && scratch.asked().contains("systemctl enable --now ruled"),
        "{doc}: the blocks run `systemctl enable --now ruled`; asked:\n{}",
        scratch.asked()
    );

    let (program, env) = scratch.unit();
    let value = |name: &str| {
        env.iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let bundle = PathBuf::from(value("RULED_BUNDLE").expect("the unit names RULED_BUNDLE"));
    let redis = RedisServer::start();
    let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let ruled = Ruled::start_program(
        Command::new(&program),
        &redis.url(),
        &bundle,
        &["--log-level", "info"],
        &env,
    );
    ruled.wait_log(&["ruled ready"]);
    // The key the unit names is the one it signs with: `ruled ctl` with it
    // gets a reply that verifies (exit 5 otherwise).
    if let Some(key) = value("RULED_CONTROL_KEY") {
        let status = ctl(&redis, &["--control-key", &key, "status"]);
        assert_eq!(status.code, 0, "{doc}: ruled ctl status: {status:?}");
    }
}

#[test]
fn the_readme_install_by_hand_starts_ruled() {
    install_by_hand("README.md");
}

#[test]
fn the_scooter_build_install_by_hand_starts_ruled() {
    install_by_hand("docs/scooter-build.md");
}

#[test]
fn the_service_install_by_hand_starts_ruled() {
    install_by_hand("docs/service.md");
}

#[test]
fn the_moved_path_keeps_dev_and_relative_words() {
    let root = Path::new("/r");
    assert_eq!(
        into_root(
            "od -N32 /dev/urandom > /etc/k && install -D /tmp/a x/y",
            root
        ),
        "od -N32 /dev/urandom > /r/etc/k && install -D /r/tmp/a x/y"
    );
    assert_eq!(into_root("RULED_X=/var/lib", root), "RULED_X=/r/var/lib");
}
