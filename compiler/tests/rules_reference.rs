//! docs/rules.md is the author reference, and it cannot drift from the key
//! table (`rulec::keys`): each level's table in the page is exactly
//! `keys::markdown_table` of that level, between the markers
//! `<!-- keys: LEVEL -->` and `<!-- /keys -->`. So every key appears there
//! with its type, default, meaning and example.
//!
//! After changing the key table, `RULES_DOCS_WRITE=1 cargo test -p rulec
//! --test rules_reference` rewrites the tables in place; review the diff.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulec::keys::{self, Level, KEYS};
use std::path::PathBuf;

fn page() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/rules.md")
}

/// The marker name of a level.
fn marker(level: Level) -> &'static str {
    match level {
        Level::Top => "file",
        Level::Rule => "rule",
        Level::Repeat => "repeat",
        Level::Step => "step",
        Level::Topic => "topic",
        Level::Input => "input",
        Level::Guard => "guard",
        Level::Limit => "limit",
        Level::Trip => "trip",
    }
}

/// `text` with the table of `level` replaced by `table`; `None` when the
/// markers are missing.
fn with_table(text: &str, level: Level, table: &str) -> Option<String> {
    let open = format!("<!-- keys: {} -->\n", marker(level));
    let start = text.find(&open)? + open.len();
    let end = start + text[start..].find("<!-- /keys -->")?;
    Some(format!("{}{table}{}", &text[..start], &text[end..]))
}

#[test]
fn every_level_table_in_docs_rules_md_is_the_key_table() {
    let text = std::fs::read_to_string(page()).unwrap();
    let mut expected = text.clone();
    for level in Level::ALL {
        expected =
            with_table(&expected, level, &keys::markdown_table(level)).unwrap_or_else(|| {
                panic!(
                    "docs/rules.md has no `<!-- keys: {} -->` table",
                    marker(level)
                )
            });
    }
    if std::env::var_os("RULES_DOCS_WRITE").is_some() {
        std::fs::write(page(), &expected).unwrap();
        return;
    }
    assert!(
        text == expected,
        "docs/rules.md's key tables differ from compiler/src/keys.rs; rewrite them with \
         RULES_DOCS_WRITE=1 cargo test -p rulec --test rules_reference"
    );
}

#[test]
fn every_key_appears_in_docs_rules_md_with_its_default() {
    let text = std::fs::read_to_string(page()).unwrap();
    for key in KEYS {
        let row = format!(
            "| `{}` | {} | {} |",
            key.name,
            key.ty.describe(),
            keys::default_cell(key)
        );
        assert!(text.contains(&row), "docs/rules.md lacks the row {row}");
    }
}
