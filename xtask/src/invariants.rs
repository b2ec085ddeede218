//! The invariants ARCHITECTURE.md states, checked so they cannot rot:
//!
//! - no build of the workspace links tokio, redis or nix into `rulec` or
//!   the engine (nor clap into the engine, nor evalexpr or the compiler
//!   into the runtime);
//! - the engine package builds on its own;
//! - `unsafe` appears in product code only in the files ARCHITECTURE.md
//!   names;
//! - `rulecore` and the engine name no file system, environment or
//!   terminal outside their unit tests;
//! - no clock read and nothing spawned in `rulecore` or the engine;
//! - every input file read through `rulecore_io::input_file`;
//! - `rulec`'s checking entered only through `session::Session`;
//! - the engine's root file at most [`MAX_ENGINE_ROOT_LINES`] lines;
//! - no product function is longer than [`MAX_FUNCTION_LINES`].
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
            "rulecore-io",
            "tempfile",
            "test-kit",
        ],
        "rulecore is pure data and functions both halves agree on",
    ),
    (
        "ruled-engine",
        &[
            "tokio",
            "redis",
            "nix",
            "clap",
            "evalexpr",
            "rulec",
            "ruled",
            "rulecore-io",
            "test-kit",
        ],
        "the engine and the simulator are pure: rulec links them",
    ),
    (
        "rulec",
        &["tokio", "redis", "nix", "ruled", "test-kit"],
        "the compiler links the engine, never the service (nor the tests' kit)",
    ),
    (
        "ruled",
        &["evalexpr", "rulec", "test-kit"],
        "the runtime never links the compiler, evalexpr or the tests' kit",
    ),
];

pub fn check() -> Result<()> {
    dependency_trees()?;
    let root = repository_root()?;
    let files = product_files(&root)?;
    unsafe_only_where_documented(&root, &files)?;
    pure_crates_do_no_io(&files)?;
    pure_crates_read_no_clock_and_spawn_nothing(&files)?;
    input_files_through_the_one_reader(&root, &files)?;
    one_front_door_into_checking(&files)?;
    one_evaluator_in_product_code(&files)?;
    engine_root_is_a_table_of_contents(&root)?;
    functions_are_short(&files)?;
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
    documented_files(root, "`unsafe` appears only in")
}

/// The backticked `.rs` paths of the ARCHITECTURE.md paragraph that
/// contains `marker`, each checked to exist.
fn documented_files(root: &Path, marker: &str) -> Result<Vec<PathBuf>> {
    let text =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).context("reading ARCHITECTURE.md")?;
    let paragraph = text
        .split("\n\n")
        .find(|p| {
            p.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .contains(marker)
        })
        .with_context(|| format!("ARCHITECTURE.md has no invariant saying \"{marker}\""))?;
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
                "ARCHITECTURE.md names {} (\"{marker}\"), which does not exist",
                file.display()
            );
        }
    }
    Ok(files)
}

pub(crate) fn repository_root() -> Result<PathBuf> {
    Ok(Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("xtask has no parent folder")?
        .to_path_buf())
}

/// A product source file: its path and its lines up to its unit tests,
/// which sit at the end of a file behind `#[cfg(test)]` and are not
/// product code.
struct ProductFile {
    path: PathBuf,
    /// The path relative to the repository, for messages.
    shown: String,
    lines: Vec<String>,
}

fn product_files(root: &Path) -> Result<Vec<ProductFile>> {
    let mut files = Vec::new();
    for dir in PRODUCT_DIRS {
        for path in rust_files(&root.join(dir))? {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let lines = text
                .lines()
                .take_while(|l| l.trim() != "#[cfg(test)]")
                .map(str::to_string)
                .collect();
            let shown = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            files.push(ProductFile { path, shown, lines });
        }
    }
    Ok(files)
}

/// Where product code lives (tests, benches and examples do not count).
const PRODUCT_DIRS: &[&str] = &[
    "shared/src",
    "shared-io/src",
    "compiler/src",
    "runtime/engine/src",
    "runtime/service/src",
    "xtask/src",
];

fn unsafe_only_where_documented(root: &Path, files: &[ProductFile]) -> Result<()> {
    eprintln!("==> `unsafe` only where ARCHITECTURE.md says");
    let allowed = documented_unsafe_files(root)?;
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !allowed.contains(&f.path)) {
        for (n, line) in file.lines.iter().enumerate() {
            if uses_unsafe(line) {
                found.push(format!("{}:{}: {}", file.shown, n + 1, line.trim()));
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

/// The pure crates (`rulecore`, `ruled-engine`) touch no file, no
/// environment variable and no terminal outside their unit tests: reading
/// and writing files is `rulecore-io`'s, the tests' seeds `test-kit`'s.
fn pure_crates_do_no_io(files: &[ProductFile]) -> Result<()> {
    eprintln!("==> no file, environment or terminal access in rulecore or ruled-engine");
    let found = lines_naming(files.iter().filter(|f| is_pure(&f.shown)), IO_WORDS);
    if !found.is_empty() {
        bail!(
            "file, environment or terminal access in a pure crate (move it to rulecore-io, \
             the compiler or the service):\n  {}",
            found.join("\n  ")
        );
    }
    Ok(())
}

/// Whether a product file (relative path) belongs to a pure crate.
fn is_pure(shown: &str) -> bool {
    shown.starts_with("shared/src/") || shown.starts_with("runtime/engine/src/")
}

/// `rulecore` and the engine read no clock and spawn nothing: time comes
/// in as `now`, work goes out as effects.
fn pure_crates_read_no_clock_and_spawn_nothing(files: &[ProductFile]) -> Result<()> {
    eprintln!("==> no clock read and nothing spawned in rulecore or ruled-engine");
    const WORDS: &[&str] = &[
        "SystemTime::now",
        "Instant::now",
        "thread::spawn",
        "tokio::spawn",
        "Command::new",
    ];
    let found = lines_naming(files.iter().filter(|f| is_pure(&f.shown)), WORDS);
    if !found.is_empty() {
        bail!(
            "a clock read or a spawn in a pure crate (pass `now` in, hand work out as an effect):\n  {}",
            found.join("\n  ")
        );
    }
    Ok(())
}

/// Every input file is read through `rulecore_io::input_file` (a regular
/// file, within a bound): no other product file opens or reads a file
/// whole, except the ones ARCHITECTURE.md names in its paragraph "reads a
/// file only through".
fn input_files_through_the_one_reader(root: &Path, files: &[ProductFile]) -> Result<()> {
    eprintln!("==> every input file through rulecore-io's bounded reader");
    let allowed = documented_files(root, "reads a file only through")?;
    const WORDS: &[&str] = &["fs::read(", "fs::read_to_string(", "File::open("];
    let readers = files.iter().filter(|f| {
        (f.shown.starts_with("compiler/src/") || f.shown.starts_with("runtime/"))
            && !allowed.contains(&f.path)
            && !is_unit_test_file(&f.shown)
    });
    let found = lines_naming(readers, WORDS);
    if !found.is_empty() {
        bail!(
            "a file read outside rulecore_io::input_file (read it with read_bounded, or name \
             the file in ARCHITECTURE.md with why):\n  {}",
            found.join("\n  ")
        );
    }
    Ok(())
}

/// `rulec`'s checking has one way in, `session::Session`: the validator's
/// entry and the report's builders are named nowhere else.
fn one_front_door_into_checking(files: &[ProductFile]) -> Result<()> {
    eprintln!("==> one front door into checking (rulec's Session)");
    const DOOR: &[&str] = &[
        "compiler/src/session.rs",
        "compiler/src/check.rs",
        "compiler/src/validate/mod.rs",
    ];
    const WORDS: &[&str] = &[
        "validate_cached(",
        "check::check_loaded(",
        "check::check_path(",
    ];
    let others = files.iter().filter(|f| {
        f.shown.starts_with("compiler/src/")
            && !DOOR.contains(&f.shown.as_str())
            && !is_unit_test_file(&f.shown)
    });
    let found = lines_naming(others, WORDS);
    if !found.is_empty() {
        bail!(
            "checking entered around rulec's Session (use session::Session):\n  {}",
            found.join("\n  ")
        );
    }
    Ok(())
}

/// The plan is the one `when` evaluator of product code; the op-by-op
/// interpreter (`rulecore::vm::oracle`) is only the tests' oracle
/// (docs/engine.md#the-when-plan).
fn one_evaluator_in_product_code(files: &[ProductFile]) -> Result<()> {
    eprintln!("==> one `when` evaluator in product code (the oracle only in tests)");
    const WORDS: &[&str] = &["oracle::"];
    let others = files.iter().filter(|f| {
        f.shown != "shared/src/vm/oracle.rs"
            && f.shown != "xtask/src/invariants.rs"
            && !is_unit_test_file(&f.shown)
    });
    let found = lines_naming(others, WORDS);
    if !found.is_empty() {
        bail!(
            "product code evaluates through the test oracle (use vm::eval, vm::eval_bool or a Plan):\n  {}",
            found.join("\n  ")
        );
    }
    Ok(())
}

/// The most lines the engine's root file may have: it is a table of
/// contents (the struct, construction, outputs); behaviour lives in the
/// modules it names.
pub const MAX_ENGINE_ROOT_LINES: usize = 600;

fn engine_root_is_a_table_of_contents(root: &Path) -> Result<()> {
    eprintln!("==> runtime/engine/src/lib.rs at most {MAX_ENGINE_ROOT_LINES} lines");
    let path = root.join("runtime/engine/src/lib.rs");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let lines = text.lines().count();
    if lines > MAX_ENGINE_ROOT_LINES {
        bail!(
            "runtime/engine/src/lib.rs has {lines} lines (at most {MAX_ENGINE_ROOT_LINES}): \
             move behaviour into a module of its own"
        );
    }
    Ok(())
}

/// A module of unit tests in a file of its own (`tests.rs`, or under a
/// `tests/` folder of `src`): compiled only under `#[cfg(test)]`.
fn is_unit_test_file(shown: &str) -> bool {
    shown.ends_with("/tests.rs") || shown.contains("/tests/")
}

/// `path:line: text` of every line of `files` whose code names one of
/// `words`.
fn lines_naming<'f>(files: impl Iterator<Item = &'f ProductFile>, words: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        for (n, line) in file.lines.iter().enumerate() {
            if names_any(line, words) {
                found.push(format!("{}:{}: {}", file.shown, n + 1, line.trim()));
            }
        }
    }
    found
}

/// What names the file system, the environment or the terminal.
const IO_WORDS: &[&str] = &[
    "std::fs",
    "fs::",
    "std::env",
    "env::var",
    "print!",
    "println!",
    "eprint!",
    "eprintln!",
    "File::",
    "OpenOptions",
    "tempfile",
    "stdout()",
    "stderr()",
    "stdin()",
];

/// Whether the code part of a line (not a `//` comment) names one of
/// `words`.
fn names_any(line: &str, words: &[&str]) -> bool {
    let code = line.split("//").next().unwrap_or_default();
    words.iter().any(|word| code.contains(word))
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

/// A function a reader can hold in their head; past this, split it into
/// named steps. (Long files are fine when cohesive; long functions are not.)
pub const MAX_FUNCTION_LINES: usize = 100;

fn functions_are_short(files: &[ProductFile]) -> Result<()> {
    eprintln!("==> no product function over {MAX_FUNCTION_LINES} lines");
    let mut long = Vec::new();
    for file in files {
        for (start, name, lines) in function_lengths(&file.lines) {
            if lines > MAX_FUNCTION_LINES {
                long.push(format!(
                    "{}:{}: fn {name}: {lines} lines",
                    file.shown,
                    start + 1
                ));
            }
        }
    }
    if !long.is_empty() {
        bail!(
            "functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n  {}",
            long.join("\n  ")
        );
    }
    Ok(())
}

/// `(first line index, name, length in lines)` of every function with a
/// body. Relies on rustfmt's layout (`cargo fmt --check` runs first in
/// CI): a body closes with a `}` alone at the indentation of its `fn`.
fn function_lengths(lines: &[String]) -> Vec<(usize, String, usize)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some((indent, name)) = function_start(&lines[i]) else {
            i += 1;
            continue;
        };
        // The signature may span lines: it ends at `{` (a body) or `;`.
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            break;
        };
        if lines[open].trim_end().ends_with(';') {
            i = open + 1;
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        if let Some(end) = (open + 1..lines.len()).find(|&k| lines[k].trim_end() == close) {
            found.push((i, name, end - i + 1));
        }
        // Nested functions are counted too: continue inside the body.
        i = open + 1;
    }
    found
}

/// The indentation and name of a line that starts a function item.
fn function_start(line: &str) -> Option<(usize, String)> {
    let indent = line.len() - line.trim_start().len();
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        if word == "fn" {
            let name = words.next()?;
            let name: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            return (!name.is_empty()).then_some((indent, name));
        }
        let modifier = word.starts_with("pub")
            || matches!(word, "async" | "const" | "unsafe" | "extern" | "default")
            || word.starts_with('"');
        if !modifier {
            return None;
        }
    }
    None
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

    fn does_io(line: &str) -> bool {
        names_any(line, IO_WORDS)
    }

    #[test]
    fn io_is_found_in_code_not_in_comments() {
        assert!(does_io("    let text = std::fs::read(path)?;"));
        assert!(does_io(r#"    eprintln!("{x}");"#));
        assert!(does_io("    let seed = env::var(SEED);"));
        assert!(!does_io("    // std::fs is read by the service, not here"));
        assert!(!does_io("    let files = 3; // println! in a comment"));
        assert!(does_io("    let tmp = tempfile::Builder::new();"));
        assert!(is_pure("shared/src/codec.rs"));
        assert!(is_pure("runtime/engine/src/lib.rs"));
        assert!(!is_pure("shared-io/src/input_file.rs"));
        assert!(is_unit_test_file("compiler/src/lsp/tests.rs"));
        assert!(is_unit_test_file("compiler/src/validate/profile/tests.rs"));
        assert!(!is_unit_test_file("compiler/src/session.rs"));
    }

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn function_lengths_follow_rustfmt_layout() {
        let code = lines(
            "pub fn short() {\n    x();\n}\n\nimpl A {\n    pub(crate) async fn long(\n        a: u8,\n    ) -> u8 {\n        let s = \"}\";\n        a\n    }\n    fn decl(&self);\n}\n// fn not_a_fn() {\nlet f = |x| x;\n",
        );
        assert_eq!(
            function_lengths(&code),
            vec![(0, "short".to_string(), 3), (5, "long".to_string(), 6)]
        );
    }

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
