//! Validation never panics and every span it reports lies inside its file on
//! character boundaries, whatever the file holds: every fixture, cut short
//! at every character and with each character removed in turn.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulec::diagnostic::{render_text, TextStyle};
use rulec::load::SourceFile;
use rulec::validate::validate;
use std::path::Path;

fn fixture_texts() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let mut texts = Vec::new();
    for dir in ["rules", "invalid"] {
        let mut paths: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        paths.sort();
        for path in paths {
            if let Ok(text) = std::fs::read_to_string(&path) {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                texts.push((name, text));
            }
        }
    }
    texts
}

fn assert_spans_inside(file: &SourceFile, render: bool) {
    let files = std::slice::from_ref(file);
    let validated = validate(files);
    for diagnostic in &validated.diagnostics {
        let Some(label) = &diagnostic.label else {
            continue;
        };
        let span = &label.span;
        assert!(
            span.start <= span.end
                && span.end <= file.text.len()
                && file.text.is_char_boundary(span.start)
                && file.text.is_char_boundary(span.end),
            "{}: span {span:?} outside or inside a character in {:?}\n{diagnostic:#?}",
            file.name,
            file.text
        );
    }
    // A rule is never dropped silently.
    if validated.diagnostics.is_empty() {
        assert_eq!(
            validated.rules.len(),
            validated.rules_read,
            "{}: a rule vanished without a diagnostic in {:?}",
            file.name,
            file.text
        );
    }
    if render {
        render_text(&validated.diagnostics, files, TextStyle::Plain);
    }
}

#[test]
fn truncated_fixtures() {
    let texts = fixture_texts();
    assert!(texts.len() > 80, "only {} fixture files", texts.len());
    for (name, text) in texts {
        for (cut, _) in text.char_indices() {
            let file = SourceFile {
                name: name.clone(),
                text: text[..cut].to_string(),
            };
            assert_spans_inside(&file, cut % 7 == 0);
        }
    }
}

#[test]
fn fixtures_with_one_character_removed() {
    for (name, text) in fixture_texts() {
        for (at, c) in text.char_indices() {
            let mut mutated = text.clone();
            mutated.replace_range(at..at + c.len_utf8(), "");
            let file = SourceFile {
                name: name.clone(),
                text: mutated,
            };
            assert_spans_inside(&file, at % 7 == 0);
        }
    }
}
