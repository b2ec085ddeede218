//! docs/safety.md lists every built-in guard and limit, and the lists
//! cannot drift from the built-in profile: each table between
//! `<!-- envelope: NAME -->` and `<!-- /envelope -->` is exactly
//! `rulec::profile::markdown::envelope_sections` of `profiles/librescoot/`.
//!
//! After changing `profiles/librescoot/guards.toml`, `SAFETY_DOCS_WRITE=1
//! cargo test -p rulec --test safety_reference` rewrites the tables in
//! place; review the diff.

#![allow(clippy::unwrap_used)]

use rulec::profile::{self, markdown, ProfileChoice};
use std::path::PathBuf;

fn page() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/safety.md")
}

#[test]
fn the_guard_and_limit_tables_of_docs_safety_md_are_the_built_in_profile() {
    let loaded = profile::load(&ProfileChoice::Builtin).unwrap().unwrap();
    assert_eq!(loaded.errors(), 0);
    let text = std::fs::read_to_string(page()).unwrap();
    let mut expected = text.clone();
    for (name, table) in markdown::envelope_sections(&loaded) {
        let open = format!("<!-- envelope: {name} -->\n");
        let start = expected
            .find(&open)
            .unwrap_or_else(|| panic!("docs/safety.md has no `{}`", open.trim()))
            + open.len();
        let end = start + expected[start..].find("<!-- /envelope -->").unwrap();
        expected = format!("{}{table}{}", &expected[..start], &expected[end..]);
    }
    if std::env::var_os("SAFETY_DOCS_WRITE").is_some() {
        std::fs::write(page(), &expected).unwrap();
        return;
    }
    assert!(
        text == expected,
        "docs/safety.md's tables differ from profiles/librescoot/guards.toml; rewrite them \
         with SAFETY_DOCS_WRITE=1 cargo test -p rulec --test safety_reference"
    );
}
