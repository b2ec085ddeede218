//! Every diagnostic code the compiler can emit (every [`Code`] variant) is
//! documented in docs/diagnostics.md, and the docs list no code that is not
//! a variant.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulec::diagnostic::Code;
use std::collections::BTreeSet;
use std::path::Path;

/// The `rulec::...` codes written in `text` (prose prefixes such as
/// `rulec::when::` are left out).
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

#[test]
fn every_code_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let emitted: BTreeSet<String> = Code::ALL
        .iter()
        .map(|code| code.as_str().to_string())
        .collect();
    assert_eq!(emitted.len(), Code::ALL.len(), "a code string is repeated");
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
    assert!(stale.is_empty(), "documented but not a Code: {stale:?}");
}
