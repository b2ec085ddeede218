//! Positions as the protocol counts them (docs/editors.md#the-protocol):
//! lines from 0 and columns in UTF-16 code units, to and from the byte
//! offsets of the checker; and the edits a client sends.

use crate::span::Lines;
use lsp_types::{Position, Range as LspRange, TextDocumentContentChangeEvent};
use std::ops::Range;

/// The protocol position of byte `offset` (past the end: the end; inside
/// a character: its start).
pub fn position(lines: &Lines<'_>, offset: usize) -> Position {
    let text = lines.text();
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let line = lines.line_of(offset);
    let start = lines.start_of(line).min(offset);
    let character = text[start..offset].encode_utf16().count();
    Position::new(to_u32(line), to_u32(character))
}

/// The byte offset of a protocol position (a column past the line's end:
/// the line's end; a line past the end: the text's end).
pub fn offset(lines: &Lines<'_>, position: Position) -> usize {
    let text = lines.text();
    let line = position.line as usize;
    let range = lines.line_range(line);
    if line > lines.line_of(text.len()) {
        return text.len();
    }
    let mut units = position.character as usize;
    for (at, c) in text[range.clone()].char_indices() {
        if units == 0 {
            return range.start + at;
        }
        units = units.saturating_sub(c.len_utf16());
    }
    range.end
}

/// The protocol range of a byte range.
pub fn range(lines: &Lines<'_>, span: &Range<usize>) -> LspRange {
    LspRange::new(position(lines, span.start), position(lines, span.end))
}

/// Applies one change a client sent (`range` absent: the whole text).
pub fn apply(text: &mut String, change: &TextDocumentContentChangeEvent) {
    match change.range {
        None => text.clone_from(&change.text),
        Some(range) => {
            let lines = Lines::new(text);
            let start = offset(&lines, range.start);
            let end = offset(&lines, range.end).max(start);
            text.replace_range(start..end, &change.text);
        }
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_columns_both_ways() {
        let text = "a = \"µ😀x\"\nb\n";
        let lines = Lines::new(text);
        let x = text.find('x').unwrap();
        // `a = "` is 5 units, µ is 1, 😀 is 2.
        assert_eq!(position(&lines, x), Position::new(0, 8));
        assert_eq!(offset(&lines, Position::new(0, 8)), x);
        assert_eq!(offset(&lines, Position::new(1, 0)), text.find('b').unwrap());
        assert_eq!(offset(&lines, Position::new(0, 99)), x + 2);
        assert_eq!(offset(&lines, Position::new(9, 0)), text.len());
    }

    #[test]
    fn edits_replace_ranges() {
        let mut text = "on = [\"vehicle.sate.changed\"]\n".to_string();
        let change = TextDocumentContentChangeEvent {
            range: Some(LspRange::new(Position::new(0, 15), Position::new(0, 19))),
            range_length: None,
            text: "state".into(),
        };
        apply(&mut text, &change);
        assert_eq!(text, "on = [\"vehicle.state.changed\"]\n");
    }
}
