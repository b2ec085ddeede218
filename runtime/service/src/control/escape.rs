//! What `ruled ctl` prints is escaped (docs/operating.md#trust): rule
//! names, override fields, messages and errors come from Redis, where any
//! client may have planted ESC, CR or other control bytes to move a
//! terminal's cursor or rewrite what an operator sees. Every line `ruled
//! ctl` writes, on stdout or stderr, goes through [`terminal`].

use crate::logging::escape_controls;

/// `text` with every C0 and C1 control character, DEL and bytes that are
/// not UTF-8 written as escapes (`\r`, `\u{1b}`, `\u{9b}`, ...), except the
/// line breaks of the layout itself.
pub fn terminal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&escape_controls(line.as_bytes()));
    }
    out
}

/// One value (a name, a field) as one line: its line breaks escaped too,
/// so a planted name cannot forge a line of its own.
pub fn field(text: &str) -> String {
    escape_controls(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_lines_kept() {
        let planted = "rule\u{1b}[2J\rhidden\u{7f}\u{9b}31m\nnext\tline";
        assert_eq!(
            terminal(planted),
            "rule\\u{1b}[2J\\rhidden\\u{7f}\\u{9b}31m\nnext\\tline"
        );
        assert_eq!(field("a\nb"), "a\\nb");
        assert!(!terminal(planted)
            .chars()
            .any(|c| c.is_control() && c != '\n'));
    }
}
