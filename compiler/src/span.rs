//! Byte spans in rule files: line/column lookup, and mapping a byte range in
//! a *decoded* TOML string (what the `when` checker sees) back to the bytes
//! of the file, through quotes and escapes (docs/rules.md#errors-and-warnings: an error inside a
//! `when` string points inside that string).

use std::ops::Range;

/// 1-based line and 1-based column (counted in Unicode scalar values) of a
/// byte offset. An offset past the end maps to the end.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// The line starts of one text, found once, so that positioning many
/// diagnostics in a large file costs a binary search each instead of a
/// scan from the start of the file (docs/diagnostics.md#output).
#[derive(Debug, Clone)]
pub struct Lines<'a> {
    text: &'a str,
    /// Byte offset of the start of every line; the first is 0.
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    pub fn new(text: &'a str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self { text, starts }
    }

    pub fn text(&self) -> &'a str {
        self.text
    }

    /// 0-based line of a byte offset (past the end: the last line).
    pub fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&start| start <= offset).max(1) - 1
    }

    /// The bytes of a 0-based line, without its line break.
    pub fn line_range(&self, line: usize) -> Range<usize> {
        let start = self.starts.get(line).copied().unwrap_or(self.text.len());
        let end = self
            .starts
            .get(line + 1)
            .map_or(self.text.len(), |next| next - 1);
        start..end.max(start)
    }

    /// The byte offset where a 0-based line starts (the text's end past the last).
    pub fn start_of(&self, line: usize) -> usize {
        self.starts.get(line).copied().unwrap_or(self.text.len())
    }

    /// [`line_col`] of an offset, without scanning the lines before it.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_of(offset);
        let start = self.start_of(line).min(offset);
        let column = self
            .text
            .get(start..offset)
            .map_or(0, |s| s.chars().count());
        (line + 1, column + 1)
    }
}

/// Maps byte offsets in the decoded value of one TOML string to byte offsets
/// in the file.
#[derive(Debug, Clone)]
pub struct StringMap {
    /// For every decoded byte, the file bytes that produced it.
    origin: Vec<Range<usize>>,
    /// File offset just after the content (where the closing quote starts).
    content_end: usize,
    /// The whole value, quotes included: the fallback.
    whole: Range<usize>,
    exact: bool,
}

impl StringMap {
    /// Builds the map for the string value at `value_span` in `file_text`.
    /// `decoded` is the value as the TOML parser decoded it; if our own
    /// decoding of the raw text disagrees (it should not), every range maps to
    /// the whole value rather than to a wrong place.
    pub fn new(file_text: &str, value_span: Range<usize>, decoded: &str) -> Self {
        let fallback = Self {
            origin: Vec::new(),
            content_end: value_span.end,
            whole: value_span.clone(),
            exact: false,
        };
        let Some(raw) = file_text.get(value_span.clone()) else {
            return fallback;
        };
        match decode(raw) {
            Some((text, origin, content_end)) if text == decoded => Self {
                origin: origin
                    .into_iter()
                    .map(|r| r.start + value_span.start..r.end + value_span.start)
                    .collect(),
                content_end: content_end + value_span.start,
                whole: value_span,
                exact: true,
            },
            _ => fallback,
        }
    }

    /// The map of a part of the decoded value (`${...}`'s expression in a
    /// computed value): offsets into that part map as the whole would.
    pub fn sub(&self, part: Range<usize>) -> StringMap {
        if !self.exact {
            return self.clone();
        }
        let content_end = self
            .origin
            .get(part.end)
            .map_or(self.content_end, |origin| origin.start);
        StringMap {
            origin: self.origin.get(part).unwrap_or_default().to_vec(),
            content_end,
            whole: self.whole.clone(),
            exact: true,
        }
    }

    /// Whether ranges map to their exact bytes (else to the whole value).
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// The file range for a range of decoded bytes. An empty range at the
    /// end of the text points at the closing quote.
    pub fn map(&self, decoded: Range<usize>) -> Range<usize> {
        if !self.exact {
            return self.whole.clone();
        }
        let Some(first) = self.origin.get(decoded.start) else {
            return self.content_end..self.content_end;
        };
        if decoded.end <= decoded.start {
            return first.start..first.start;
        }
        let last_index = decoded.end.min(self.origin.len()) - 1;
        let last = self.origin.get(last_index).unwrap_or(first);
        first.start..last.end.max(first.start)
    }
}

impl StringMap {
    /// Decodes the string value at `value_span` itself, also one still
    /// being typed (`closed` false: read as if its closing quote followed):
    /// the text and the map. `None` when the bytes are not a string.
    pub fn read(file_text: &str, value_span: Range<usize>, closed: bool) -> Option<(String, Self)> {
        let raw = file_text.get(value_span.clone())?;
        let delim = ["\"\"\"", "'''", "\"", "'"]
            .into_iter()
            .find(|delim| raw.starts_with(delim))?;
        let owned;
        let raw = if closed {
            raw
        } else {
            owned = format!("{raw}{delim}");
            owned.as_str()
        };
        let (text, origin, content_end) = decode(raw)?;
        let map = Self {
            origin: origin
                .into_iter()
                .map(|r| r.start + value_span.start..r.end + value_span.start)
                .collect(),
            content_end: (content_end + value_span.start).min(value_span.end),
            whole: value_span,
            exact: true,
        };
        Some((text, map))
    }

    /// The decoded offset of a file offset inside the string: how many
    /// decoded bytes come before it.
    pub fn decoded_offset(&self, file_offset: usize) -> usize {
        self.origin
            .partition_point(|origin| origin.start < file_offset)
    }

    /// A fix that writes `replacement` over the decoded bytes `decoded`
    /// (a name, or the inside of a literal's quotes), as file bytes: `None`
    /// when the map is not exact or the replacement would need escaping
    /// inside the TOML string (a quote, a backslash, a control character).
    pub fn fix(&self, decoded: Range<usize>, replacement: &str) -> Option<(Range<usize>, String)> {
        let plain = !replacement
            .chars()
            .any(|c| matches!(c, '"' | '\\' | '\'') || c.is_control());
        (self.exact && plain).then(|| (self.map(decoded), replacement.to_string()))
    }
}

/// Decodes one raw TOML string token (delimiters included). Returns the
/// text, the raw range of every decoded byte, and the raw offset where the
/// content ends. `None` if the token is not a well-formed string.
fn decode(raw: &str) -> Option<(String, Vec<Range<usize>>, usize)> {
    let (delim, multi) = if raw.starts_with("\"\"\"") {
        ("\"\"\"", true)
    } else if raw.starts_with("'''") {
        ("'''", true)
    } else if raw.starts_with('"') {
        ("\"", false)
    } else if raw.starts_with('\'') {
        ("'", false)
    } else {
        return None;
    };
    let literal = delim.starts_with('\'');
    if raw.len() < 2 * delim.len() || !raw.ends_with(delim) {
        return None;
    }
    let content_end = raw.len() - delim.len();
    let mut pos = delim.len();
    // A newline right after a multi-line opening delimiter is not content.
    if multi {
        if raw[pos..].starts_with("\r\n") {
            pos += 2;
        } else if raw[pos..].starts_with('\n') {
            pos += 1;
        }
    }
    let mut text = String::new();
    let mut origin = Vec::new();
    let push = |text: &mut String, origin: &mut Vec<Range<usize>>, c: char, from: Range<usize>| {
        text.push(c);
        for _ in 0..c.len_utf8() {
            origin.push(from.clone());
        }
    };
    while pos < content_end {
        let c = raw[pos..].chars().next()?;
        if c != '\\' || literal {
            push(&mut text, &mut origin, c, pos..pos + c.len_utf8());
            pos += c.len_utf8();
            continue;
        }
        let esc = raw[pos + 1..].chars().next()?;
        let simple = match esc {
            'b' => Some('\u{8}'),
            't' => Some('\t'),
            'n' => Some('\n'),
            'f' => Some('\u{c}'),
            'r' => Some('\r'),
            'e' => Some('\u{1b}'),
            '"' => Some('"'),
            '\\' => Some('\\'),
            _ => None,
        };
        if let Some(decoded) = simple {
            push(&mut text, &mut origin, decoded, pos..pos + 2);
            pos += 2;
            continue;
        }
        let hex_len = match esc {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            _ => 0,
        };
        if hex_len > 0 {
            let hex = raw.get(pos + 2..pos + 2 + hex_len)?;
            let decoded = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
            push(&mut text, &mut origin, decoded, pos..pos + 2 + hex_len);
            pos += 2 + hex_len;
            continue;
        }
        // Line-ending backslash (multi-line basic strings): skips white space
        // and newlines up to the next other character.
        if multi && matches!(esc, ' ' | '\t' | '\r' | '\n') {
            let rest = &raw[pos + 1..content_end];
            let skipped = rest.len() - rest.trim_start_matches([' ', '\t', '\r', '\n']).len();
            if !rest[..skipped].contains('\n') {
                return None;
            }
            pos += 1 + skipped;
            continue;
        }
        return None;
    }
    Some((text, origin, content_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a file `when = <raw>` and maps `decoded_range` of the decoded
    /// `value`; returns the file text under the mapped range.
    fn mapped(raw: &str, value: &str, decoded_range: Range<usize>) -> String {
        let file = format!("when = {raw}\n");
        let span = 7..7 + raw.len();
        let map = StringMap::new(&file, span, value);
        assert!(map.exact, "decoding {raw} did not give {value:?}");
        file[map.map(decoded_range)].to_string()
    }

    #[test]
    fn plain_basic_string() {
        assert_eq!(mapped(r#""a == b""#, "a == b", 5..6), "b");
        assert_eq!(mapped(r#""a == b""#, "a == b", 0..6), "a == b");
    }

    #[test]
    fn escapes_take_their_raw_width() {
        // decoded: to == "x\y" é
        let raw = r#""to == \"x\\y\" \u00e9 z""#;
        let value = "to == \"x\\y\" é z";
        assert_eq!(mapped(raw, value, 6..11), r#"\"x\\y\""#);
        // é is two decoded bytes, both from the six-byte escape
        assert_eq!(mapped(raw, value, 12..14), r"\u00e9");
        assert_eq!(mapped(raw, value, 15..16), "z");
        assert_eq!(mapped(r#""a\nb""#, "a\nb", 2..3), "b");
        assert_eq!(mapped(r#""\x41b""#, "Ab", 0..1), r"\x41");
        assert_eq!(mapped(r#""\U0001F600x""#, "\u{1F600}x", 4..5), "x");
    }

    #[test]
    fn multi_byte_chars_in_the_source() {
        let raw = "\"名前 == x\"";
        assert_eq!(mapped(raw, "名前 == x", 10..11), "x");
        assert_eq!(mapped(raw, "名前 == x", 0..6), "名前");
    }

    #[test]
    fn literal_strings_have_no_escapes() {
        assert_eq!(
            mapped(r#"'to == "a\b"'"#, r#"to == "a\b""#, 6..11),
            r#""a\b""#
        );
        assert_eq!(
            mapped("'''\nx && \\y'''", "x && \\y", 5..7),
            "\\y",
            "multi-line literal trims the first newline"
        );
    }

    #[test]
    fn multi_line_basic_strings() {
        let raw = "\"\"\"\n  a &&\\\n     b\"\"\"";
        let value = "  a &&b";
        assert_eq!(mapped(raw, value, 6..7), "b");
        assert_eq!(mapped(raw, value, 2..3), "a");
    }

    #[test]
    fn empty_range_at_the_end_points_at_the_closing_quote() {
        let file = "when = \"a &&\"\n";
        let map = StringMap::new(file, 7..13, "a &&");
        assert_eq!(map.map(4..4), 12..12);
        assert_eq!(&file[12..13], "\"");
    }

    #[test]
    fn mismatch_falls_back_to_the_whole_value() {
        let file = "when = \"abc\"\n";
        let map = StringMap::new(file, 7..12, "something else");
        assert_eq!(map.map(1..2), 7..12);
    }

    #[test]
    fn line_index_agrees_with_the_scan() {
        for text in ["", "a", "ab\ncd\n", "\n\né\nxyz", "a\r\nb"] {
            let lines = Lines::new(text);
            for offset in 0..=text.len() + 2 {
                assert_eq!(
                    lines.line_col(offset),
                    line_col(text, offset),
                    "{text:?} {offset}"
                );
            }
        }
        let lines = Lines::new("ab\ncd");
        assert_eq!((lines.line_range(0), lines.line_range(1)), (0..2, 3..5));
    }

    #[test]
    fn line_and_column_are_one_based_and_count_chars() {
        let text = "ab\nné x\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 3), (2, 1));
        assert_eq!(line_col(text, 7), (2, 4));
        assert_eq!(line_col(text, 100), (3, 1));
    }
}
