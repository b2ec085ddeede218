//! A string cut to a byte bound, on a character boundary: the one
//! definition a `when`'s reads (docs/when-language.md#what-a-condition-read),
//! traces (docs/semantics.md#traces), the bus's long values and the
//! service's rebuild record share.

/// `text` cut to at most `max` bytes, on a character boundary (the
/// longest prefix that fits); `text` itself when it fits.
pub fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_a_character_boundary_and_keeps_what_fits() {
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("aé", 3), "aé");
        assert_eq!(cut("abc", 10), "abc");
        assert_eq!(cut("€", 2), "");
        assert_eq!(cut("", 0), "");
    }
}
