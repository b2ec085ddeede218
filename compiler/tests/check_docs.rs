//! Every diagnostic code the compiler can emit is documented in
//! docs/diagnostics.md, and the docs list no code that does not exist.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::collections::BTreeSet;
use std::path::Path;

fn codes_in(text: &str) -> BTreeSet<String> {
    let mut codes = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("rulec::") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == ':' || c == '-'))
            .unwrap_or(tail.len());
        let code = tail[..end].trim_end_matches([':', '-']);
        // `rulec::when::...` as a prefix in prose, or a Rust path
        // (`rulec::check::run`) are not codes.
        if code.len() > "rulec::".len() {
            codes.insert(code.to_string());
        }
        rest = &tail[end..];
    }
    codes
}

fn source_codes(dir: &Path, codes: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_codes(&path, codes);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            // Only string literals are codes.
            for code in codes_in(&text) {
                if text.contains(&format!("\"{code}\"")) {
                    codes.insert(code);
                }
            }
        }
    }
}

#[test]
fn every_code_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut emitted = BTreeSet::new();
    source_codes(&root.join("src"), &mut emitted);
    assert!(emitted.len() > 30, "{emitted:?}");
    let docs = std::fs::read_to_string(root.join("../docs/diagnostics.md")).unwrap();
    let documented: BTreeSet<String> = codes_in(&docs)
        .into_iter()
        .filter(|code| docs.contains(&format!("`{code}`")))
        .collect();
    let missing: Vec<_> = emitted.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "not in docs/diagnostics.md: {missing:?}"
    );
    let stale: Vec<_> = documented.difference(&emitted).collect();
    assert!(stale.is_empty(), "documented but never emitted: {stale:?}");
}
