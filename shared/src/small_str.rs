//! A string that holds short text inline: an event's envelope strings
//! (`id`, `topic`, `src`, `from`, `to`) are mostly short names, and held
//! inline they cost no allocation when an event is decoded or cloned
//! (docs/engine.md#reading-the-envelope).

use arrayvec::ArrayString;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// The longest text held inline: with its 4-byte length and the variant's
/// tag it fills the 24 bytes a `String` takes, and `Option<SmallStr>` stays 24.
pub const INLINE_LEN: usize = 16;

/// Immutable text: up to [`INLINE_LEN`] bytes inline, longer text boxed.
/// It reads as a `str` (`Deref`), compares with `str`, `&str` and
/// `String`, and is a plain JSON string to serde.
#[derive(Clone)]
pub struct SmallStr(Repr);

#[derive(Clone)]
enum Repr {
    /// `ArrayString` reads as a `str` without checking its UTF-8 again
    /// (a safe check would cost about a hundred instructions per read).
    Inline(ArrayString<INLINE_LEN>),
    Heap(Box<str>),
}

impl SmallStr {
    /// The empty string (inline, so no allocation).
    pub const EMPTY: SmallStr = SmallStr(Repr::Inline(ArrayString::new_const()));

    /// `text`, inline when it is short enough.
    #[inline]
    pub fn new(text: &str) -> Self {
        match ArrayString::from(text) {
            Ok(inline) => SmallStr(Repr::Inline(inline)),
            Err(_) => SmallStr(Repr::Heap(text.into())),
        }
    }

    /// The text's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        self.as_str().as_bytes()
    }

    /// The text.
    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline(text) => text,
            Repr::Heap(text) => text,
        }
    }

    /// Whether the text is held inline (no allocation).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline(_))
    }
}

impl Default for SmallStr {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl Deref for SmallStr {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SmallStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SmallStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for SmallStr {
    #[inline]
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl From<&String> for SmallStr {
    fn from(text: &String) -> Self {
        Self::new(text)
    }
}

impl From<String> for SmallStr {
    /// Long text keeps its buffer (shrunk to its length).
    fn from(text: String) -> Self {
        match ArrayString::from(&text) {
            Ok(inline) => SmallStr(Repr::Inline(inline)),
            Err(_) => SmallStr(Repr::Heap(text.into_boxed_str())),
        }
    }
}

impl From<Box<str>> for SmallStr {
    fn from(text: Box<str>) -> Self {
        match ArrayString::from(&text) {
            Ok(inline) => SmallStr(Repr::Inline(inline)),
            Err(_) => SmallStr(Repr::Heap(text)),
        }
    }
}

impl From<SmallStr> for String {
    fn from(text: SmallStr) -> Self {
        match text.0 {
            Repr::Heap(text) => text.into_string(),
            Repr::Inline(inline) => inline.as_str().to_owned(),
        }
    }
}

impl fmt::Display for SmallStr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl fmt::Debug for SmallStr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for SmallStr {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for SmallStr {}

/// Equality with the other string types, both ways round.
macro_rules! eq_with {
    ($($other:ty),*) => {$(
        impl PartialEq<$other> for SmallStr {
            #[inline]
            fn eq(&self, other: &$other) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }
        impl PartialEq<SmallStr> for $other {
            #[inline]
            fn eq(&self, other: &SmallStr) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }
    )*};
}
eq_with!(str, &str, String);

impl PartialOrd for SmallStr {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmallStr {
    /// A `str`'s order is its bytes' order.
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for SmallStr {
    /// As a `str` hashes, so that `Borrow<str>` lookups find it.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl Serialize for SmallStr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SmallStr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl Visitor<'_> for TextVisitor {
            type Value = SmallStr;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<SmallStr, E> {
                Ok(SmallStr::new(text))
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<SmallStr, E> {
                Ok(SmallStr::from(text))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn short_text_is_inline_and_long_text_boxed() {
        for len in [0, 1, 13, INLINE_LEN, INLINE_LEN + 1, 200] {
            let text = "é".repeat(len / 2) + &"x".repeat(len % 2);
            assert_eq!(text.len(), len);
            for small in [SmallStr::new(&text), SmallStr::from(text.clone())] {
                assert_eq!(small.is_inline(), len <= INLINE_LEN, "{len}");
                assert_eq!(small.as_str(), text);
                assert_eq!(&*small, text.as_str());
                assert_eq!(small.len(), len);
                assert_eq!(String::from(small.clone()), text);
            }
        }
        assert_eq!(std::mem::size_of::<SmallStr>(), 24);
        assert_eq!(std::mem::size_of::<Option<SmallStr>>(), 24);
        assert_eq!(SmallStr::default(), "");
    }

    #[test]
    fn compares_orders_and_hashes_as_its_text() {
        let short = SmallStr::from("parked");
        let long = SmallStr::from("a.topic.longer.than.twenty-two.bytes");
        let owned = String::from("parked");
        assert_eq!(short, "parked");
        assert_eq!("parked", short);
        assert_eq!(short, *"parked");
        assert_eq!(*"parked", short);
        assert_eq!(short, owned);
        assert_eq!(owned, short);
        assert!(short != "parke" && short != long);
        assert_eq!(long, SmallStr::new(long.as_str()));
        assert!(long < short, "bytes' order, not inline before boxed");
        let set: HashSet<SmallStr> = [short.clone(), long.clone()].into_iter().collect();
        assert!(set.contains("parked") && set.contains(long.as_str()));
        assert_eq!(format!("{short} {short:?}"), "parked \"parked\"");
    }

    #[test]
    fn is_a_plain_json_string() -> Result<(), serde_json::Error> {
        for text in ["", "parked", "with \"quotes\" and a long tail to be boxed"] {
            let small = SmallStr::new(text);
            let json = serde_json::to_string(&small)?;
            assert_eq!(json, serde_json::to_string(text)?);
            assert_eq!(serde_json::from_str::<SmallStr>(&json)?, text);
        }
        assert!(serde_json::from_str::<SmallStr>("5").is_err());
        Ok(())
    }
}
