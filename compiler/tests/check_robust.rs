//! Validation never panics and every span it reports lies inside its file on
//! character boundaries, whatever the file holds: every fixture, cut short
//! at every character and with each character removed in turn.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rulec::diagnostic::{render_text, TextStyle};
use rulec::load::SourceFile;
use rulec::session::Session;
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

/// Returns how many diagnostics the file got.
fn assert_spans_inside(file: &SourceFile, render: bool) -> usize {
    let files = std::slice::from_ref(file);
    let validated = Session::new(None).check_files(files);
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
    validated.diagnostics.len()
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

/// Random edits, several per file: pieces of TOML and `when` syntax
/// inserted, ranges deleted, lines duplicated or swapped. Fixed seed and
/// count by default; `RULES_FUZZ_SEED` / `RULES_FUZZ_SCALE` explore further
/// (docs/fuzzing.md).
#[test]
fn randomly_edited_fixtures() {
    const PIECES: &[&str] = &[
        "\"",
        "'",
        "'''",
        "\"\"\"",
        "[",
        "]",
        "[[rule]]",
        "[[rule.step]]",
        "{",
        "}",
        "=",
        ",",
        "\n",
        " ",
        "#",
        "\\",
        "\\u",
        "0x",
        "-1",
        "1e9",
        "9999999999999999999",
        "1s",
        "-5s",
        "true",
        "ß",
        "é",
        "\u{0}",
        "name = ",
        "on = [",
        "when = \"",
        "after = ",
        "do = ",
        "state(",
        "data.",
        "&&",
        "(",
        ")",
        "repeat = {",
        "count = 0",
    ];
    let fuzz =
        test_kit::fuzz::Fuzz::from_env("check_robust::randomly_edited_fixtures", 0xED17).unwrap();
    let mut rng = test_kit::fuzz::Rng::new(fuzz.seed());
    let mut next = move |n: usize| rng.below(n.max(1));
    let texts = fixture_texts();
    let cases = fuzz.cases(3_000);
    let mut flagged = 0;
    for case in 0..cases {
        let (name, text) = &texts[next(texts.len())];
        let mut text = text.clone();
        for _ in 0..1 + next(4) {
            // A character boundary at or before a random byte.
            let mut at = next(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            match next(4) {
                0 => text.insert_str(at, PIECES[next(PIECES.len())]),
                1 => {
                    let mut end = (at + 1 + next(12)).min(text.len());
                    while !text.is_char_boundary(end) {
                        end += 1;
                    }
                    text.replace_range(at..end, "");
                }
                _ => {
                    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
                    if lines.is_empty() {
                        continue;
                    }
                    let (i, j) = (next(lines.len()), next(lines.len()));
                    if next(2) == 0 {
                        lines.swap(i, j);
                    } else {
                        lines.insert(j, lines[i]);
                    }
                    text = lines.concat();
                }
            }
        }
        let file = SourceFile {
            name: name.clone(),
            text,
        };
        flagged += usize::from(assert_spans_inside(&file, case % 5 == 0) > 0);
    }
    // The edits must break files, not just shuffle comments.
    assert!(
        flagged > cases / 2,
        "only {flagged} of {cases} edited files got a diagnostic"
    );
}
