//! References stay inside the repository: a test, not a chore.
//!
//! The specification lives in `docs/`, and code comments point at it as
//! `docs/<page>.md#<heading>`. [`check`] reads the repository's tracked
//! `.rs`, `.md`, `.toml` and `.service` files (never `target/`) and reports,
//! as `file:line: problem`:
//!
//! - in the docs, profiles and units (not Rust comments), a design
//!   section cited by number (the word and a section number: the design is not in the
//!   repository);
//! - any mention of `../shared` (beside the checkout, not in it), and any
//!   path to a `.md` file that resolves outside the repository or to no
//!   file in it: a specification kept elsewhere cannot be cited;
//! - a `<page>.md#<heading>` whose heading anchor does not exist in that
//!   page (GitHub's anchors: lower case, spaces to `-`, punctuation
//!   dropped);
//! - a relative Markdown link between files (`[x](semantics.md#state)`)
//!   whose file or anchor does not exist.
//!
//! In Rust, comments and string literals are read, code is not; a string
//! literal that is nothing but a bare file name (`"NOTES.md"` in a test
//! asserting it is absent) is data, not a reference. A path is looked up
//! from the repository root, from the citing file's directory and each
//! directory above it, and, for a bare name, in `docs/`.
//!
//! `cargo nextest run -p xtask` runs it (CI runs every workspace test).

#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The file kinds read.
const SCANNED: &[&str] = &[".rs", ".md", ".toml", ".service"];

/// This file: its messages and test cases name what they look for.
/// (`design_refs.py`, the script that rewrites old references, skips it too.)
const CHECKER: &str = "xtask/src/refs.rs";

/// The repository as the checker sees it: every tracked path (to tell a
/// file from no file) and the text of the scanned ones.
#[derive(Debug, Default)]
struct Tree {
    paths: BTreeSet<String>,
    texts: BTreeMap<String, String>,
}

impl Tree {
    fn from_memory(files: &[(&str, &str)]) -> Self {
        let mut tree = Tree::default();
        for (path, text) in files {
            tree.paths.insert(path.to_string());
            tree.texts.insert(path.to_string(), text.to_string());
        }
        tree
    }

    fn read(root: &Path) -> anyhow::Result<Self> {
        let mut tree = Tree::default();
        for path in tracked(root)? {
            if path.starts_with("target/") {
                continue;
            }
            if path != CHECKER && SCANNED.iter().any(|ext| path.ends_with(ext)) {
                // A tracked file deleted in the work tree is no file.
                let Ok(bytes) = std::fs::read(root.join(&path)) else {
                    continue;
                };
                tree.texts
                    .insert(path.clone(), String::from_utf8_lossy(&bytes).into_owned());
            }
            tree.paths.insert(path);
        }
        Ok(tree)
    }

    /// Whether `path` (normalised, from the root) is a tracked file or a
    /// directory holding one.
    fn exists(&self, path: &str) -> bool {
        if path.is_empty() {
            return true;
        }
        let dir = format!("{}/", path.trim_end_matches('/'));
        self.paths.contains(path)
            || self
                .paths
                .range(dir.clone()..)
                .next()
                .is_some_and(|p| p.starts_with(&dir))
    }
}

/// `git ls-files`, or a walk that skips `target/` and hidden directories
/// where there is no git work tree.
fn tracked(root: &Path) -> anyhow::Result<Vec<String>> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output();
    if let Ok(out) = out {
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout)
                .split('\0')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect());
        }
    }
    let mut paths = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type()?.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    dirs.push(entry.path());
                }
            } else if let Ok(rel) = entry.path().strip_prefix(root) {
                paths.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    Ok(paths)
}

/// Every problem in the tree, as `file:line: problem`, in file order.
fn check(tree: &Tree) -> Vec<String> {
    let anchors: BTreeMap<&str, BTreeSet<String>> = tree
        .texts
        .iter()
        .filter(|(path, _)| path.ends_with(".md"))
        .map(|(path, text)| (path.as_str(), anchors_of(text)))
        .collect();
    let mut problems = Vec::new();
    for (path, text) in &tree.texts {
        let mut report = |offset: usize, message: String| {
            let line = text[..offset].matches('\n').count() + 1;
            problems.push(format!("{path}:{line}: {message}"));
        };
        for (start, end) in regions(path, text) {
            let region = &text[start..end];
            for (at, message) in outside_mentions(region) {
                report(start + at, message);
            }
            for (at, token) in md_tokens(region) {
                if path.ends_with(".md") && region[..at].ends_with("](") {
                    continue; // a link target: checked as a link below
                }
                if let Some(message) = resolve(tree, &anchors, path, token, false) {
                    report(start + at, message);
                }
            }
        }
        if path.ends_with(".md") {
            for (at, target) in markdown_links(text) {
                if let Some(message) = resolve(tree, &anchors, path, target, true) {
                    report(at, message);
                }
            }
        }
    }
    problems
}

/// The byte ranges of a file that are prose: comments and string literals
/// in Rust, everything elsewhere.
fn regions(path: &str, text: &str) -> Vec<(usize, usize)> {
    if path.ends_with(".rs") {
        rust_regions(text)
    } else {
        vec![(0, text.len())]
    }
}

/// Comments and string literals of Rust source, found by a small lexer
/// (char literals and lifetimes told apart, raw strings, nested block
/// comments). A literal that is only a bare file name is left out.
fn rust_regions(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let n = bytes.len();
    let word = |i: usize| i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    let mut out = Vec::new();
    let mut push_string = |start: usize, end: usize| {
        if !is_bare_file_name(&text[start..end]) {
            out.push((start, end));
        }
    };
    let mut i = 0;
    while i < n {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(n, |e| i + e);
            push_string(i, end);
            i = end;
        } else if rest.starts_with("/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < n && depth > 0 {
                if text[j..].starts_with("/*") {
                    depth += 1;
                    j += 2;
                } else if text[j..].starts_with("*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            push_string(i, j);
            i = j;
        } else if !word(i)
            && (rest.starts_with("r\"")
                || rest.starts_with("r#")
                || rest.starts_with("br\"")
                || rest.starts_with("br#"))
        {
            let open = if rest.starts_with('b') { i + 2 } else { i + 1 };
            let hashes = text[open..].bytes().take_while(|&b| b == b'#').count();
            if bytes.get(open + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let start = open + hashes + 1;
            let close = format!("\"{}", "#".repeat(hashes));
            let end = text[start..].find(&close).map_or(n, |e| start + e);
            push_string(start, end);
            i = (end + close.len()).min(n);
        } else if bytes[i] == b'"' || (!word(i) && rest.starts_with("b\"")) {
            let start = if bytes[i] == b'b' { i + 2 } else { i + 1 };
            let mut j = start;
            while j < n && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let end = j.min(n);
            push_string(start, end);
            i = end + 1;
        } else if bytes[i] == b'\'' {
            // A char literal ('a', '\n', '\''), or a lifetime or label ('a).
            let mut chars = rest.char_indices().skip(1);
            match (chars.next(), chars.next()) {
                (Some((_, '\\')), _) => {
                    // Past the escaped character, so that '\'' ends right.
                    let close = rest
                        .get(3..)
                        .and_then(|r| r.find('\''))
                        .map_or(n, |e| i + 3 + e);
                    i = close + 1;
                }
                (Some(_), Some((at, '\''))) => i += at + 1,
                _ => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

fn is_bare_file_name(text: &str) -> bool {
    text.strip_suffix(".md").is_some_and(|name| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    })
}

/// How a design section is cited (the word, a space, then its number).
/// Spelt in two parts so that this file, which looks for it, does not
/// itself read as a citation to a scanner of the tree.
const CITED: &str = concat!("DES", "IGN ");

/// Mentions of files outside the repository that need no lookup.
fn outside_mentions(region: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (at, _) in region.match_indices("../shared") {
        found.push((
            at,
            "refers to ../shared, outside the repository".to_string(),
        ));
    }
    // A section of the design cited by number, which lives outside; in
    // docs, the profiles rulec embeds, units and Rust comments alike.
    for (at, _) in region.match_indices(CITED) {
        let number: String = region[at + CITED.len()..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let number = number.trim_end_matches('.');
        if !number.is_empty() {
            found.push((
                at,
                format!(
                    "cites {CITED}{number}, a design section outside the repository: \
                     point at the docs/ page that says it"
                ),
            ));
        }
    }
    found
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// Path-like tokens naming a `.md` file, with their anchor:
/// `docs/semantics.md#state`, `README.md`, `../docs/diagnostics.md`.
fn md_tokens(region: &str) -> Vec<(usize, &str)> {
    let mut found = Vec::new();
    for (at, _) in region.match_indices(".md") {
        let after = at + 3;
        if region[after..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue; // `.mdx`, `.md_file`
        }
        let start = region[..at]
            .char_indices()
            .rev()
            .take_while(|&(_, c)| is_path_char(c))
            .last()
            .map_or(at, |(i, _)| i);
        let name = &region[start..at];
        if name.is_empty() || name.ends_with('/') || name.ends_with('.') {
            continue; // `*.md`, a placeholder such as `<page>.md`
        }
        if region[..start].ends_with("://") || region[..start].ends_with(':') {
            continue; // a URL
        }
        let mut end = after;
        if region[end..].starts_with('#') {
            let anchor_len = region[end + 1..]
                .char_indices()
                .find(|&(_, c)| !(c.is_alphanumeric() || c == '-' || c == '_'))
                .map_or(region.len() - end - 1, |(i, _)| i);
            if anchor_len > 0 {
                end += 1 + anchor_len;
            }
        }
        found.push((start, &region[start..end]));
    }
    found
}

/// Targets of inline Markdown links `[text](target)`, outside fenced code
/// blocks and code spans.
fn markdown_links(text: &str) -> Vec<(usize, &str)> {
    let mut found = Vec::new();
    let mut offset = 0;
    let mut fence: Option<&str> = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => {
                let mut in_code = false;
                let mut i = 0;
                while i < line.len() {
                    let rest = &line[i..];
                    if rest.starts_with('`') {
                        in_code = !in_code;
                    } else if !in_code && rest.starts_with("](") {
                        if let Some(close) = rest[2..].find(')') {
                            let target = rest[2..2 + close].split_whitespace().next().unwrap_or("");
                            found.push((offset + i + 2, target));
                        }
                    }
                    i += rest.chars().next().map_or(1, char::len_utf8);
                }
            }
            _ => {}
        }
        offset += line.len();
    }
    found
}

/// Why `reference` (`page.md#anchor`, `#anchor`, `../x/`, a link target)
/// cited in `from` does not resolve inside the tree; `None` if it does.
/// `link`: a Markdown link, looked up from the citing file's directory
/// only, and allowed to name any file (not only `.md`).
fn resolve(
    tree: &Tree,
    anchors: &BTreeMap<&str, BTreeSet<String>>,
    from: &str,
    reference: &str,
    link: bool,
) -> Option<String> {
    if link
        && (reference.is_empty() || reference.contains("://") || reference.starts_with("mailto:"))
    {
        return None;
    }
    let (path, anchor) = match reference.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (reference, None),
    };
    let dir = from.rsplit_once('/').map_or("", |(dir, _)| dir);
    let resolved = if path.is_empty() {
        Some(from.to_string())
    } else if path.starts_with('/') {
        return Some(format!(
            "{reference}: an absolute path, outside the repository"
        ));
    } else {
        let mut bases: Vec<String> = vec![dir.to_string()];
        if !link {
            let mut d = dir;
            while let Some((up, _)) = d.rsplit_once('/') {
                bases.push(up.to_string());
                d = up;
            }
            bases.push(String::new());
            if !path.contains('/') {
                bases.push("docs".to_string());
            }
        }
        let mut escaped = 0;
        let mut hit = None;
        for base in &bases {
            match normalise(base, path) {
                None => escaped += 1,
                Some(p) if tree.exists(&p) => {
                    hit = Some(p);
                    break;
                }
                Some(_) => {}
            }
        }
        if hit.is_none() {
            return Some(if escaped == bases.len() {
                format!("{reference}: outside the repository")
            } else {
                format!("{reference}: no such file in the repository")
            });
        }
        hit
    };
    let (Some(target), Some(anchor)) = (resolved, anchor) else {
        return None;
    };
    let known = anchors.get(target.as_str())?;
    if known.contains(anchor) {
        None
    } else {
        Some(format!(
            "{reference}: {target} has no heading with the anchor #{anchor}"
        ))
    }
}

/// `base/rel` with `.` and `..` resolved; `None` if it climbs out of the root.
fn normalise(base: &str, rel: &str) -> Option<String> {
    let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(parts.join("/"))
}

/// The heading anchors GitHub gives a Markdown file, and its explicit
/// `<a id>` anchors.
fn anchors_of(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(m) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            fence = match fence {
                None => Some(m),
                Some(f) if f == m => None,
                other => other,
            };
            continue;
        }
        if fence.is_some() {
            continue;
        }
        // An explicit anchor (`<a id="keyed-runs"></a>`) names a place in
        // a list, where no heading can stand.
        for part in line.split("<a id=\"").skip(1) {
            if let Some((id, _)) = part.split_once('"') {
                anchors.insert(id.to_string());
            }
        }
        let hashes = line.bytes().take_while(|&b| b == b'#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug = slug(line[hashes..].trim().trim_end_matches('#').trim());
        let count = seen.entry(slug.clone()).or_insert(0);
        let anchor = if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        };
        *count += 1;
        anchors.insert(anchor);
    }
    anchors
}

/// GitHub's slug of a heading: its text as rendered (a link is its text),
/// lower case, letters, digits, `-` and `_` kept, spaces to `-`, the rest
/// dropped.
fn slug(heading: &str) -> String {
    let mut rendered = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| {
            after[close + 2..]
                .find(')')
                .map(|end| (close, close + 2 + end + 1))
        }) {
            Some((close, end)) => {
                rendered.push_str(&rest[..open]);
                rendered.push_str(&after[..close]);
                rest = &after[end..];
            }
            None => {
                rendered.push_str(&rest[..open + 1]);
                rest = after;
            }
        }
    }
    rendered.push_str(rest);
    rendered
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

mod tests {
    use super::*;

    #[test]
    fn the_repository_refers_only_to_itself() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask sits in the repository root");
        let tree = Tree::read(root).expect("reading the repository");
        assert!(
            tree.texts.contains_key("docs/semantics.md"),
            "the walk found no docs: {} files",
            tree.texts.len()
        );
        let problems = check(&tree);
        assert!(
            problems.is_empty(),
            "{} reference(s) that do not resolve inside the repository:\n{}",
            problems.len(),
            problems.join("\n")
        );
    }

    fn problems(files: &[(&str, &str)]) -> Vec<String> {
        check(&Tree::from_memory(files))
    }

    const DOCS: (&str, &str) = (
        "docs/semantics.md",
        "# Runtime semantics\n\n## Durability and replay\n\n## `rulec dump` (text)\n\n## State\n\n## State\n\n```\n## not a heading\n```\n",
    );

    #[test]
    fn slugs_follow_github() {
        assert_eq!(slug("Durability and replay"), "durability-and-replay");
        assert_eq!(slug("`rulec dump` (text)"), "rulec-dump-text");
        assert_eq!(
            slug("Pending records: hash `extensions:pending`"),
            "pending-records-hash-extensionspending"
        );
        assert_eq!(
            slug("How it is built ([Runtime semantics](semantics.md))"),
            "how-it-is-built-runtime-semantics"
        );
        assert_eq!(slug("Snake_case – and ü"), "snake_case--and-ü");
        let anchors = anchors_of(DOCS.1);
        assert!(anchors.contains("state") && anchors.contains("state-1"));
        assert!(!anchors.contains("not-a-heading"));
    }

    #[test]
    fn good_references_pass() {
        let rs = "//! See docs/semantics.md#durability-and-replay and docs/semantics.md.\n\
                  /// docs/semantics.md#state's value, README.md, semantics.md.\n\
                  fn f() { let _ = root.join(\"../docs/semantics.md\"); let c = 'a'; }\n\
                  fn g<'a>(x: &'a str) { assert!(!x.contains(\"NOTES.md\")); }\n";
        let md = "See [state](semantics.md#state), [dump](semantics.md#rulec-dump-text), \
                  [top](../README.md), [src](../src/) and <https://example.com/x.md>.\n\
                  Walks `*.md` files and `docs/<page>.md#<heading>` references.\n";
        assert_eq!(
            problems(&[
                DOCS,
                ("src/lib.rs", rs),
                ("docs/index.md", md),
                ("README.md", "# scooter\n"),
            ]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn outside_references_fail_with_file_and_line() {
        let rs = "fn main() {}\n// Replay (SPEC.md 6.5).\n/* as ../../SPEC.md 3.3 says */\n\
                  const X: &str = \"see ../shared/notes\";\n";
        let got = problems(&[DOCS, ("src/main.rs", rs)]);
        assert_eq!(got.len(), 3, "{got:#?}");
        assert!(
            got[0].starts_with("src/main.rs:2: SPEC.md: no such file"),
            "{got:#?}"
        );
        assert!(
            got[1].starts_with("src/main.rs:3: ../../SPEC.md: outside the repository"),
            "{got:#?}"
        );
        assert!(
            got[2].starts_with("src/main.rs:4: refers to ../shared"),
            "{got:#?}"
        );

        let md = "# Doc\n\nThe spec is `SPEC.md`, see [style](../../STYLE.md).\n\
                  As STYLE.md says.\n";
        let got = problems(&[("docs/a.md", md)]);
        assert_eq!(got.len(), 3, "{got:#?}");
        assert!(got
            .iter()
            .any(|p| p.starts_with("docs/a.md:3: SPEC.md: no such file")));
        assert!(got
            .iter()
            .any(|p| p.starts_with("docs/a.md:3: ../../STYLE.md: outside the repository")));
        assert!(got
            .iter()
            .any(|p| p.starts_with("docs/a.md:4: STYLE.md: no such file")));
    }

    /// The design's sections are not in the repository: citing one by
    /// number (a profile's comment did) points outside it.
    #[test]
    fn a_design_section_cited_by_number_is_outside() {
        let toml = format!(
            "# polled only while a live rule reads one ({CITED}14.4).\n\
             # a {}ER's note is no citation\n",
            CITED.trim_end()
        );
        let rs = format!("// {CITED}23\n");
        let got = problems(&[("profiles/p/ecu.toml", &toml), ("src/a.rs", &rs)]);
        assert_eq!(got.len(), 2, "{got:#?}");
        assert!(
            got[0].starts_with(&format!("profiles/p/ecu.toml:1: cites {CITED}14.4")),
            "{got:#?}"
        );
        assert!(
            got[1].starts_with(&format!("src/a.rs:1: cites {CITED}23")),
            "{got:#?}"
        );
    }

    #[test]
    fn missing_files_and_anchors_fail() {
        let rs = "// docs/semantics.md#durability (renamed heading)\n\
                  // docs/nothing.md\n\
                  fn f() { g(\"docs/semantics.md#state-2\"); }\n";
        let md = "[a](semantics.md#stat) [b](gone.md) [c](#nowhere) [d](../missing/)\n\
                  ```\n[in code](gone.md)\n```\n";
        let got = problems(&[DOCS, ("src/lib.rs", rs), ("docs/b.md", md)]);
        let want = [
            "docs/b.md:1: semantics.md#stat: docs/semantics.md has no heading with the anchor #stat",
            "docs/b.md:1: gone.md: no such file in the repository",
            "docs/b.md:1: #nowhere: docs/b.md has no heading with the anchor #nowhere",
            "docs/b.md:1: ../missing/: no such file in the repository",
            "src/lib.rs:1: docs/semantics.md#durability: docs/semantics.md has no heading with the anchor #durability",
            "src/lib.rs:2: docs/nothing.md: no such file in the repository",
            "src/lib.rs:3: docs/semantics.md#state-2: docs/semantics.md has no heading with the anchor #state-2",
        ];
        for line in want {
            assert!(
                got.iter().any(|p| p == line),
                "missing {line:?} in {got:#?}"
            );
        }
        assert_eq!(got.len(), want.len(), "{got:#?}");
    }

    #[test]
    fn rust_code_is_not_prose() {
        // A path in code (a field access, after a char or a lifetime) is
        // not a reference.
        let rs = "const C: u8 = b'D'; fn f<'a>() -> usize { gone.md.len() + r#\"x\"#.len() }\n";
        assert_eq!(problems(&[("src/x.rs", rs)]), Vec::<String>::new());
        // ... while a raw string and a block comment are read.
        let rs = "fn f() -> &'static str { r#\"gone.md \"quoted\"\"# } /* /* gone.md */ */\n";
        assert_eq!(problems(&[("src/x.rs", rs)]).len(), 2);
    }
}
