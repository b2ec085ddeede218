//! The invariants ARCHITECTURE.md states, checked so they cannot rot:
//!
//! - no build of the workspace links tokio, redis or nix into `rulec` or
//!   the engine (nor clap into the engine, nor evalexpr or the compiler
//!   into the runtime);
//! - the engine package builds on its own;
//! - `unsafe` appears in product code only in the files ARCHITECTURE.md
//!   names.
//!
//! (`cargo doc` without warnings is a step of its own in `ci`.)

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

use crate::{cargo, run};

/// Which crates each workspace package must never have in its normal or
/// build dependency tree, and why.
const FORBIDDEN: &[(&str, &[&str], &str)] = &[
    (
        "rulecore",
        &[
            "tokio",
            "redis",
            "nix",
            "clap",
            "evalexpr",
            "ruled-engine",
            "rulec",
            "ruled",
        ],
        "rulecore is pure data and functions both halves agree on",
    ),
    (
        "ruled-engine",
        &[
            "tokio", "redis", "nix", "clap", "evalexpr", "rulec", "ruled",
        ],
        "the engine and the simulator are pure: rulec links them",
    ),
    (
        "rulec",
        &["tokio", "redis", "nix", "ruled"],
        "the compiler links the engine, never the service",
    ),
    (
        "ruled",
        &["evalexpr", "rulec"],
        "the runtime never links the compiler or evalexpr",
    ),
];

pub fn check() -> Result<()> {
    dependency_trees()?;
    unsafe_only_where_documented()?;
    let mut alone = cargo();
    alone.args(["build", "--package", "ruled-engine", "--lib"]);
    run("the engine package builds on its own", alone)
}

/// Every path from a forbidden crate up to a workspace package, over the
/// whole workspace with every feature on: the build where cargo unifies
/// the most, so the one where a leak would show.
fn dependency_trees() -> Result<()> {
    eprintln!("==> dependency invariants (cargo tree --workspace --all-features -i ...)");
    let mut crates: Vec<&str> = FORBIDDEN
        .iter()
        .flat_map(|(_, f, _)| f.iter().copied())
        .collect();
    crates.sort_unstable();
    crates.dedup();
    let mut broken = Vec::new();
    for krate in crates {
        let dependents = inverted_tree(krate)?;
        for (package, forbidden, why) in FORBIDDEN {
            if forbidden.contains(&krate) && dependents.iter().any(|d| d == package) {
                broken.push(format!(
                    "{package} depends on {krate} ({why}); see `cargo tree --workspace \
                     --all-features -e normal,build -i {krate}`"
                ));
            }
        }
    }
    if !broken.is_empty() {
        bail!("dependency invariants broken:\n  {}", broken.join("\n  "));
    }
    Ok(())
}

/// The names of every package that depends (normally or to build) on
/// `krate`, `krate` included; empty when it is not in the graph at all.
fn inverted_tree(krate: &str) -> Result<Vec<String>> {
    let out = cargo()
        .args([
            "tree",
            "--workspace",
            "--all-features",
            "--edges",
            "normal,build",
        ])
        .args(["--prefix", "none", "--invert", krate])
        .output()
        .context("could not start cargo tree")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if stderr.contains("did not match any packages") {
            return Ok(Vec::new());
        }
        bail!("cargo tree -i {krate} failed: {stderr}");
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// The files ARCHITECTURE.md allows `unsafe` in: the backticked paths on
/// its line "`unsafe` appears only in ...".
fn documented_unsafe_files(root: &Path) -> Result<Vec<PathBuf>> {
    let text =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).context("reading ARCHITECTURE.md")?;
    let paragraph = text
        .split("\n\n")
        .find(|p| p.contains("`unsafe` appears only in"))
        .context("ARCHITECTURE.md has no invariant saying where `unsafe` appears")?;
    let files: Vec<PathBuf> = paragraph
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.ends_with(".rs"))
        .map(|s| root.join(s))
        .collect();
    for file in &files {
        if !file.is_file() {
            bail!(
                "ARCHITECTURE.md allows `unsafe` in {}, which does not exist",
                file.display()
            );
        }
    }
    Ok(files)
}

fn unsafe_only_where_documented() -> Result<()> {
    eprintln!("==> `unsafe` only where ARCHITECTURE.md says");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("xtask has no parent folder")?
        .to_path_buf();
    let allowed = documented_unsafe_files(&root)?;
    let mut found = Vec::new();
    for dir in [
        "shared/src",
        "compiler/src",
        "runtime/engine/src",
        "runtime/service/src",
        "xtask/src",
    ] {
        for file in rust_files(&root.join(dir))? {
            if allowed.contains(&file) {
                continue;
            }
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            // Unit tests sit at the end of a file, behind `#[cfg(test)]`:
            // they are not product code.
            let product = text.lines().take_while(|l| l.trim() != "#[cfg(test)]");
            for (n, line) in product.enumerate() {
                if uses_unsafe(line) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    if !found.is_empty() {
        bail!(
            "`unsafe` outside the files ARCHITECTURE.md names (add it there, with why, or remove it):\n  {}",
            found.join("\n  ")
        );
    }
    Ok(())
}

/// `unsafe` as a word in the code part of a line: not in a `//` comment,
/// not inside a string literal.
fn uses_unsafe(line: &str) -> bool {
    let mut code = String::with_capacity(line.len());
    let mut in_string = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if in_string => {
                chars.next();
            }
            '"' => {
                in_string = !in_string;
                code.push(' ');
            }
            '/' if !in_string && chars.peek() == Some(&'/') => break,
            c if !in_string => code.push(c),
            _ => {}
        }
    }
    code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|word| word == "unsafe")
}

fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_is_found_in_code_not_in_comments_or_names() {
        assert!(uses_unsafe("    let x = unsafe { f() };"));
        assert!(uses_unsafe("unsafe impl Send for X {}"));
        assert!(!uses_unsafe("// unsafe is only in sys.rs"));
        assert!(!uses_unsafe("#![deny(unsafe_code)]"));
        assert!(!uses_unsafe("let not_unsafe = 1; // unsafe"));
        assert!(!uses_unsafe(r#"bail!("no `unsafe` \" here", x);"#));
        assert!(uses_unsafe(r#"f("a"); unsafe { g() }"#));
    }
}
