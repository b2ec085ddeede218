//! `cargo xtask dist` and `cargo xtask dist-smoke`: the scooter build and
//! its smoke test under qemu (docs/scooter-build.md).
//!
//! The cross linker is handed to cargo through its environment variables
//! (`CARGO_TARGET_<TRIPLE>_LINKER`, and `CC_<triple>` for C code such as
//! ring's), set here unless the caller set them: nobody edits
//! `~/.cargo/config.toml`, and a host build of the workspace never sees a
//! cross linker.

mod archive;
mod sizes;

use crate::{cargo, invariants::repository_root, run};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// A scooter CPU: its Rust target, and the Debian cross tools that link
/// for it and run its binaries on this machine.
#[derive(Debug, PartialEq)]
pub(crate) struct Target {
    pub(crate) triple: &'static str,
    /// The cross gcc: the linker, and the C compiler of any C code.
    gcc: &'static str,
    /// The Debian package that brings `gcc` and the target's glibc.
    gcc_package: &'static str,
    /// qemu-user's emulator for the CPU.
    qemu: &'static str,
    /// Where `gcc_package` puts the target's glibc: qemu's `-L`.
    sysroot: &'static str,
    /// The target's dynamic loader, under `sysroot`.
    loader: &'static str,
}

/// Every scooter CPU `dist` builds for; the first is the one the smoke
/// test runs by default (the scooter's own, a 32-bit ARM core).
pub(crate) const TARGETS: &[Target] = &[
    Target {
        triple: "armv7-unknown-linux-gnueabihf",
        gcc: "arm-linux-gnueabihf-gcc",
        gcc_package: "gcc-arm-linux-gnueabihf",
        qemu: "qemu-arm",
        sysroot: "/usr/arm-linux-gnueabihf",
        loader: "lib/ld-linux-armhf.so.3",
    },
    Target {
        triple: "aarch64-unknown-linux-gnu",
        gcc: "aarch64-linux-gnu-gcc",
        gcc_package: "gcc-aarch64-linux-gnu",
        qemu: "qemu-aarch64",
        sysroot: "/usr/aarch64-linux-gnu",
        loader: "lib/ld-linux-aarch64.so.1",
    },
];

/// The shipped binaries; each is built from the package of the same name.
const BINARIES: &[&str] = &["ruled", "rulec"];

/// The Debian package of qemu-user's emulators.
const QEMU_PACKAGE: &str = "qemu-user";

impl Target {
    fn find(triple: &str) -> Result<&'static Target> {
        match TARGETS.iter().find(|t| t.triple == triple) {
            Some(target) => Ok(target),
            None => {
                let known: Vec<&str> = TARGETS.iter().map(|t| t.triple).collect();
                bail!("unknown target {triple:?}; dist knows {}", known.join(", "))
            }
        }
    }

    /// `CARGO_TARGET_<TRIPLE>_LINKER`, cargo's name for this target's linker.
    fn linker_variable(&self) -> String {
        format!(
            "CARGO_TARGET_{}_LINKER",
            self.triple.to_uppercase().replace('-', "_")
        )
    }

    /// `CC_<triple>`, the cc crate's name for this target's C compiler.
    fn cc_variable(&self) -> String {
        format!("CC_{}", self.triple.replace('-', "_"))
    }

    /// The linker cargo will use: the caller's, else the cross gcc.
    fn linker(&self) -> String {
        std::env::var(self.linker_variable()).unwrap_or_else(|_| self.gcc.to_string())
    }

    /// `cargo build` for this target with the linker and C compiler set.
    fn cargo_build(&self) -> Command {
        let mut command = cargo();
        command.args(["build", "--release", "--target", self.triple]);
        command.env(self.linker_variable(), self.linker());
        let cc = self.cc_variable();
        if std::env::var_os(&cc).is_none() && std::env::var_os(self.cc_variable_dashed()).is_none()
        {
            command.env(cc, self.gcc);
        }
        command
    }

    /// The cc crate also reads `CC_<triple>` spelled with dashes.
    fn cc_variable_dashed(&self) -> String {
        format!("CC_{}", self.triple)
    }
}

/// Something a task needs that this machine lacks, and how to install it.
#[derive(Debug, PartialEq)]
struct Missing {
    what: String,
    /// The command that installs it.
    install: String,
}

/// Whether `program --version` runs.
fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Whether the Rust standard library for `triple` is installed.
fn has_std(triple: &str) -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    Command::new(rustc)
        .args(["--print", "target-libdir", "--target", triple])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .is_some_and(|dir| has_libstd(&dir))
}

/// `libstd-<hash>.rlib` in a target's library folder.
fn has_libstd(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("libstd-") && name.ends_with(".rlib")
        })
    })
}

/// What building for `target` needs and this machine lacks.
fn missing_to_build(target: &Target) -> Vec<Missing> {
    let mut missing = Vec::new();
    if !has_std(target.triple) {
        missing.push(Missing {
            what: format!("the Rust standard library for {}", target.triple),
            install: format!("rustup target add {}", target.triple),
        });
    }
    let linker = target.linker();
    if !runs(&linker) {
        let chosen = if std::env::var_os(target.linker_variable()).is_some() {
            format!(", set by {}", target.linker_variable())
        } else {
            String::new()
        };
        missing.push(Missing {
            what: format!("the linker for {} (`{linker}`{chosen})", target.triple),
            install: format!("apt-get install {}", target.gcc_package),
        });
    }
    missing
}

/// What running `target`'s `ruled` under qemu needs beyond building it.
fn missing_to_emulate(target: &Target) -> Vec<Missing> {
    let mut missing = Vec::new();
    if !runs(target.qemu) {
        missing.push(Missing {
            what: format!("the emulator `{}`", target.qemu),
            install: format!("apt-get install {QEMU_PACKAGE}"),
        });
    }
    let loader = Path::new(target.sysroot).join(target.loader);
    if !loader.exists() {
        missing.push(Missing {
            what: format!("the target's glibc ({})", loader.display()),
            install: format!("apt-get install {}", target.gcc_package),
        });
    }
    if !runs("redis-server") {
        missing.push(Missing {
            what: "`redis-server`".to_string(),
            install: "apt-get install redis-server".to_string(),
        });
    }
    missing
}

/// Every missing piece with its command, then the commands once each.
fn describe_missing(missing: &[Missing]) -> String {
    let mut text = String::new();
    for piece in missing {
        text.push_str(&format!("  - {}: {}\n", piece.what, piece.install));
    }
    let mut rustup: Vec<&str> = Vec::new();
    let mut apt: Vec<&str> = Vec::new();
    for piece in missing {
        let (list, names) = if let Some(names) = piece.install.strip_prefix("rustup target add ") {
            (&mut rustup, names)
        } else if let Some(names) = piece.install.strip_prefix("apt-get install ") {
            (&mut apt, names)
        } else {
            continue;
        };
        for name in names.split_whitespace() {
            if !list.contains(&name) {
                list.push(name);
            }
        }
    }
    text.push_str("Install them with:\n");
    if !rustup.is_empty() {
        text.push_str(&format!("  rustup target add {}\n", rustup.join(" ")));
    }
    if !apt.is_empty() {
        text.push_str(&format!("  apt-get install {}\n", apt.join(" ")));
    }
    text
}

// ------------------------------------------------------------------ dist --

/// What `cargo xtask dist` was asked for.
#[derive(Debug, PartialEq)]
pub(crate) struct DistOptions {
    pub(crate) targets: Vec<&'static Target>,
    /// Build `ruled` with the `tls` feature (docs/service.md#tls).
    pub(crate) tls: bool,
}

impl DistOptions {
    pub(crate) fn parse(args: &[String]) -> Result<DistOptions> {
        let mut targets = Vec::new();
        let mut tls = false;
        let mut args = args.iter();
        while let Some(flag) = args.next() {
            match flag.as_str() {
                "--target" => {
                    let triple = args.next().context("--target needs a target triple")?;
                    targets.push(Target::find(triple)?);
                }
                "--tls" => tls = true,
                other => bail!("dist: unknown argument {other:?}"),
            }
        }
        if targets.is_empty() {
            targets = TARGETS.iter().collect();
        }
        Ok(DistOptions { targets, tls })
    }
}

/// `cargo xtask dist`: both binaries for every asked target, stripped, in
/// `target/dist/<triple>/`, with their sizes; then per target the
/// installable archive, and beside the armv7 one its BitBake recipe.
pub(crate) fn dist(options: &DistOptions) -> Result<()> {
    let missing: Vec<Missing> = options
        .targets
        .iter()
        .flat_map(|t| missing_to_build(t))
        .collect();
    if !missing.is_empty() {
        // Not an `Err`: with RUST_BACKTRACE set, anyhow would bury the
        // install commands under a backtrace of xtask itself.
        eprintln!(
            "dist: this machine cannot build for the scooter yet. Missing:\n{}",
            describe_missing(&missing)
        );
        std::process::exit(1);
    }
    let started = Instant::now();
    let mut built = Vec::new();
    let mut made = Vec::new();
    for target in &options.targets {
        built.extend(build(target, BINARIES, options.tls)?);
        let dist_dir = target_dir()?.join("dist").join(target.triple);
        made.push(archive::assemble(
            &repository_root()?,
            &dist_dir,
            target.triple,
            &dist_dir,
        )?);
    }
    print_sizes(&built)?;
    for assembled in &made {
        eprintln!("    {}", assembled.archive.display());
        if let Some(recipe) = &assembled.recipe {
            eprintln!("    {}", recipe.display());
        }
    }
    eprintln!("dist: done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Builds `binaries` for `target` in the release profile and copies them
/// to `target/dist/<triple>/`; returns the copies.
fn build(target: &Target, binaries: &[&str], tls: bool) -> Result<Vec<PathBuf>> {
    let target_dir = target_dir()?;
    let built_dir = target_dir.join(target.triple).join("release");
    let dist_dir = target_dir.join("dist").join(target.triple);
    std::fs::create_dir_all(&dist_dir)
        .with_context(|| format!("creating {}", dist_dir.display()))?;
    let mut copies = Vec::new();
    for binary in binaries {
        // One package per build: built together, cargo would unify the
        // two packages' dependency features, and `ruled` would differ from
        // the one `cargo install` or the smoke test builds.
        let mut command = target.cargo_build();
        command.args(["--package", binary]);
        let mut what = format!(
            "cargo build --release --target {} --package {binary}",
            target.triple
        );
        if tls && *binary == "ruled" {
            command.args(["--features", "tls"]);
            what.push_str(" --features tls");
        }
        run(&what, command)?;
        let from = built_dir.join(binary);
        let to = dist_dir.join(binary);
        std::fs::copy(&from, &to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        copies.push(to);
    }
    Ok(copies)
}

/// Cargo's target folder: `CARGO_TARGET_DIR`, else `target/` in the
/// repository.
pub(crate) fn target_dir() -> Result<PathBuf> {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => Ok(repository_root()?.join("target")),
    }
}

fn print_sizes(binaries: &[PathBuf]) -> Result<()> {
    let root = repository_root()?;
    eprintln!("==> the scooter build (profile release, stripped)");
    let mut built = Vec::new();
    for path in binaries {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        built.push((path, bytes.len() as u64));
        let shown = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let glibc = match glibc_needed(&bytes) {
            Some(version) => format!("needs glibc {version} or newer"),
            None => "links no glibc".to_string(),
        };
        eprintln!(
            "    {shown:<52} {:>10} bytes  {:>6.2} MiB  {glibc}",
            bytes.len(),
            bytes.len() as f64 / (1024.0 * 1024.0)
        );
    }
    // The sizes the docs state, against these (docs/scooter-build.md).
    let stated = std::fs::read_to_string(root.join(sizes::PAGE))
        .with_context(|| format!("reading {}", sizes::PAGE))
        .and_then(|page| sizes::stated(&page));
    match stated {
        Ok(rows) => {
            for (path, bytes) in built {
                if let Some(said) = sizes::verdict(&rows, path, bytes) {
                    eprintln!("    docs: {said}");
                }
            }
        }
        Err(error) => eprintln!("    docs: the size table cannot be checked: {error:#}"),
    }
    Ok(())
}

/// The newest glibc symbol version a dynamically linked binary asks for
/// (`GLIBC_2.34`): the oldest glibc on the scooter that can run it. The
/// version names are plain strings in the binary's dynamic string table.
fn glibc_needed(bytes: &[u8]) -> Option<String> {
    const TAG: &[u8] = b"GLIBC_";
    let mut newest: Option<Vec<u32>> = None;
    let mut at = 0;
    while let Some(found) = find(&bytes[at..], TAG) {
        let start = at + found + TAG.len();
        let end = start
            + bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit() || **b == b'.')
                .count();
        at = end.max(start);
        let text = String::from_utf8_lossy(&bytes[start..end]);
        let parts: Option<Vec<u32>> = text.split('.').map(|p| p.parse().ok()).collect();
        if let Some(version) = parts.filter(|v| v.len() >= 2) {
            if newest.as_ref().is_none_or(|n| version > *n) {
                newest = Some(version);
            }
        }
    }
    newest.map(|v| v.iter().map(u32::to_string).collect::<Vec<_>>().join("."))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

// ------------------------------------------------------------ dist-smoke --

/// `dist-smoke`'s arguments: none, or `--target TRIPLE`.
pub(crate) fn smoke_target(args: &[String]) -> Result<&'static Target> {
    match args {
        [] => Ok(&TARGETS[0]),
        [flag, triple] if flag == "--target" => Target::find(triple),
        _ => bail!("dist-smoke: expected no argument or --target TRIPLE, got {args:?}"),
    }
}

/// `cargo xtask dist-smoke [--target TRIPLE]`: the cross-built `ruled`
/// under qemu-user against a throwaway redis-server, with a bundle the host
/// `rulec` built from `fixtures/rules` (the test is
/// `runtime/service/tests/dist_smoke.rs`). Skips, saying what to install,
/// when a tool is missing.
pub(crate) fn dist_smoke(target: &Target) -> Result<()> {
    let mut missing = missing_to_build(target);
    missing.extend(missing_to_emulate(target));
    if !missing.is_empty() {
        eprintln!(
            "dist-smoke: SKIPPED, {} `ruled` was not run under qemu. Missing:\n{}",
            target.triple,
            describe_missing(&missing)
        );
        return Ok(());
    }
    let started = Instant::now();
    let ruled = build(target, &["ruled"], false)?;
    print_sizes(&ruled)?;
    let bundle = host_bundle()?;
    let mut test = cargo();
    // `--all-features` only for the host's test harness: the features CI's
    // test run builds with, so neither build redoes the other's.
    test.args([
        "test",
        "--package",
        "ruled",
        "--all-features",
        "--test",
        "dist_smoke",
    ])
    .args(["--", "--ignored", "--nocapture"])
    .env("RULES_SMOKE_RULED", &ruled[0])
    .env("RULES_SMOKE_EMULATOR", target.qemu)
    .env("RULES_SMOKE_SYSROOT", target.sysroot)
    .env("RULES_SMOKE_BUNDLE", &bundle);
    run(
        &format!("{} ruled under {}", target.triple, target.qemu),
        test,
    )?;
    eprintln!(
        "dist-smoke: passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `rulec build fixtures/rules` by the host's `rulec`, as a deploy would.
fn host_bundle() -> Result<PathBuf> {
    let root = repository_root()?;
    let dir = target_dir()?.join("dist").join("smoke");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let bundle = dir.join("rules.bundle");
    let mut command = cargo();
    command
        .args(["run", "--quiet", "--package", "rulec", "--", "build"])
        .arg(root.join("fixtures/rules"))
        .arg("-o")
        .arg(&bundle);
    run("rulec build fixtures/rules (the host's rulec)", command)?;
    Ok(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::args;

    #[test]
    fn options_default_to_every_target_without_tls() {
        let options = DistOptions::parse(&[]).unwrap();
        assert_eq!(options.targets.len(), TARGETS.len());
        assert!(!options.tls);
        let options =
            DistOptions::parse(&args(&["--target", "aarch64-unknown-linux-gnu", "--tls"])).unwrap();
        assert_eq!(options.targets, [&TARGETS[1]]);
        assert!(options.tls);
        for bad in [
            &["--target"][..],
            &["--target", "x86_64-unknown-linux-gnu"],
            &["--lto"],
        ] {
            assert!(DistOptions::parse(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_smoke_test_runs_armv7_unless_told_otherwise() {
        assert_eq!(
            smoke_target(&[]).unwrap().triple,
            "armv7-unknown-linux-gnueabihf"
        );
        let aarch64 = smoke_target(&args(&["--target", "aarch64-unknown-linux-gnu"])).unwrap();
        assert_eq!(aarch64.qemu, "qemu-aarch64");
        assert!(smoke_target(&args(&["--target"])).is_err());
        assert!(smoke_target(&args(&["--tls"])).is_err());
    }

    #[test]
    fn cargo_variables_are_spelled_as_cargo_and_cc_read_them() {
        let armv7 = &TARGETS[0];
        assert_eq!(
            armv7.linker_variable(),
            "CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_LINKER"
        );
        assert_eq!(armv7.cc_variable(), "CC_armv7_unknown_linux_gnueabihf");
    }

    #[test]
    fn missing_pieces_come_with_one_install_line_per_tool() {
        let missing = [
            Missing {
                what: "std armv7".into(),
                install: "rustup target add armv7-unknown-linux-gnueabihf".into(),
            },
            Missing {
                what: "linker".into(),
                install: "apt-get install gcc-arm-linux-gnueabihf".into(),
            },
            Missing {
                what: "glibc".into(),
                install: "apt-get install gcc-arm-linux-gnueabihf".into(),
            },
            Missing {
                what: "qemu".into(),
                install: "apt-get install qemu-user".into(),
            },
        ];
        let text = describe_missing(&missing);
        assert!(text.contains("  - linker: apt-get install gcc-arm-linux-gnueabihf\n"));
        assert!(text.ends_with(
            "Install them with:\n  rustup target add armv7-unknown-linux-gnueabihf\n  \
             apt-get install gcc-arm-linux-gnueabihf qemu-user\n"
        ));
    }

    #[test]
    fn the_newest_glibc_version_is_found() {
        let dynstr =
            b"\0libc.so.6\0GLIBC_2.4\0GLIBC_2.34\0GLIBC_2.28\0GLIBC_PRIVATE\0GLIBC_2.3.4\0";
        assert_eq!(glibc_needed(dynstr).as_deref(), Some("2.34"));
        assert_eq!(glibc_needed(b"static, no versions"), None);
        assert_eq!(glibc_needed(b"GLIBC_"), None);
    }
}
