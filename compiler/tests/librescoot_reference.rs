//! docs/librescoot.md is the author's map of the bus, and it cannot drift
//! from the built-in profile: each table between `<!-- profile: NAME -->`
//! and `<!-- /profile -->` is exactly `rulec::profile::markdown::sections`
//! of `profiles/librescoot/`.
//!
//! After changing the profile, `LIBRESCOOT_DOCS_WRITE=1 cargo test -p rulec
//! --test librescoot_reference` rewrites the tables in place; review the diff.

#![allow(clippy::unwrap_used)]

use rulec::profile::{self, markdown, ProfileChoice};
use std::path::PathBuf;

fn page() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/librescoot.md")
}

#[test]
fn every_table_in_docs_librescoot_md_is_the_built_in_profile() {
    let loaded = profile::load(&ProfileChoice::Builtin).unwrap().unwrap();
    assert_eq!(loaded.errors(), 0);
    let text = std::fs::read_to_string(page()).unwrap();
    let mut expected = text.clone();
    for (name, table) in markdown::sections(&loaded) {
        let open = format!("<!-- profile: {name} -->\n");
        let start = expected
            .find(&open)
            .unwrap_or_else(|| panic!("docs/librescoot.md has no `{}`", open.trim()))
            + open.len();
        let end = start + expected[start..].find("<!-- /profile -->").unwrap();
        expected = format!("{}{table}{}", &expected[..start], &expected[end..]);
    }
    if std::env::var_os("LIBRESCOOT_DOCS_WRITE").is_some() {
        std::fs::write(page(), &expected).unwrap();
        return;
    }
    assert!(
        text == expected,
        "docs/librescoot.md's tables differ from profiles/librescoot/; rewrite them with \
         LIBRESCOOT_DOCS_WRITE=1 cargo test -p rulec --test librescoot_reference"
    );
}
