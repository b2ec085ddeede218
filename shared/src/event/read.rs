//! Reads an event envelope (docs/events.md#the-envelope) in one pass over
//! the payload's bytes: the seven known keys straight into their fields,
//! `data` straight into a [`DataValue`], every other key checked and
//! skipped (docs/engine.md#reading-the-envelope).
//!
//! It accepts and refuses exactly what `serde_json` did when it read the
//! envelope through serde's derive (`shared/tests/event_decode.rs` holds
//! the two together): JSON's grammar and white space, a string's escapes
//! and UTF-8, at most 127 nested arrays and objects in everything read as
//! a value (unknown keys are only checked, not nested against that
//! bound), a known key given twice refused. A string is copied once; it is
//! unescaped only when it holds a `\`. A number that is not a short
//! integer or decimal fraction goes to `serde_json` itself, so that every
//! other float and every integer beyond `i64` reads exactly as it did.
//!
//! The release build optimises for size; the small steps of the scan are
//! `#[inline(always)]`, as in the VM, since a call each cost about a third
//! of the scan (callgrind).

use super::EventError;
use crate::event_data::{DataObject, DataValue};
use crate::small_str::SmallStr;
use std::borrow::Cow;

/// `serde_json`'s bound on nested arrays and objects: its count starts at
/// 128 and a value that would bring it to 0 is refused.
const DEPTH: u8 = 128;

/// The entries of one `data` object read before any allocation: most
/// objects fit, and then their slice is allocated once, at its size.
const INLINE_ENTRIES: usize = 8;

/// The most digits of a number read here rather than by `serde_json`:
/// below 2^53, so exact as an `f64` and as an `i64`.
const SHORT_DIGITS: usize = 15;

/// The fields of an envelope as read; `topic` may be absent.
#[derive(Debug, Default)]
pub(super) struct Envelope {
    pub id: Option<SmallStr>,
    pub ts: Option<i64>,
    pub topic: Option<SmallStr>,
    pub src: Option<SmallStr>,
    pub from: Option<SmallStr>,
    pub to: Option<SmallStr>,
    pub data: DataValue,
}

/// The known keys, in the order of their bits in `seen`.
const KNOWN: [&str; 7] = ["id", "ts", "topic", "src", "from", "to", "data"];

/// Reads `payload` as an envelope: one JSON object and nothing after it
/// but white space.
pub(super) fn envelope(payload: &[u8]) -> Result<Envelope, EventError> {
    let mut r = Reader {
        bytes: payload,
        // Checked once, whole: then each string is a slice of it. A
        // payload that is not all UTF-8 may still be an event (a string
        // under an unknown key is not checked), and is read the slow way.
        text: std::str::from_utf8(payload).ok(),
        at: 0,
        depth: DEPTH,
    };
    r.ws();
    if r.peek() != Some(b'{') {
        return Err(EventError::NotAnObject);
    }
    r.enter()?;
    r.at += 1;
    let mut envelope = Envelope::default();
    let mut seen = 0u8;
    r.ws();
    if !r.eat(b'}') {
        loop {
            let key = r.key()?;
            let bit = match key.as_ref() {
                "id" => 0,
                "ts" => 1,
                "topic" => 2,
                "src" => 3,
                "from" => 4,
                "to" => 5,
                "data" => 6,
                _ => KNOWN.len(),
            };
            if let Some(&field) = KNOWN.get(bit) {
                if seen & (1 << bit) != 0 {
                    return Err(EventError::RepeatedField { field });
                }
                seen |= 1 << bit;
            }
            match bit {
                0 => envelope.id = r.optional_string("id")?,
                1 => envelope.ts = r.optional_integer("ts")?,
                2 => envelope.topic = r.optional_string("topic")?,
                3 => envelope.src = r.optional_string("src")?,
                4 => envelope.from = r.optional_string("from")?,
                5 => envelope.to = r.optional_string("to")?,
                6 => envelope.data = r.value()?,
                _ => r.skip_value()?,
            }
            if r.after_entry(b'}')? {
                break;
            }
        }
    }
    r.ws();
    if r.at != r.bytes.len() {
        return Err(r.syntax("the end of the payload after the envelope"));
    }
    Ok(envelope)
}

struct Reader<'b> {
    bytes: &'b [u8],
    /// `bytes` when they are all UTF-8.
    text: Option<&'b str>,
    at: usize,
    /// How many more arrays and objects may open ([`DEPTH`]).
    depth: u8,
}

impl<'b> Reader<'b> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    #[inline(always)]
    fn eat(&mut self, byte: u8) -> bool {
        let hit = self.peek() == Some(byte);
        self.at += usize::from(hit);
        hit
    }

    /// Skips JSON's white space: space, tab, line feed, carriage return.
    #[inline(always)]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    #[cold]
    fn syntax(&self, expected: &'static str) -> EventError {
        EventError::Syntax {
            at: self.at,
            expected,
        }
    }

    /// Counts one more nested array or object against [`DEPTH`].
    fn enter(&mut self) -> Result<(), EventError> {
        self.depth -= 1;
        if self.depth == 0 {
            return Err(self.syntax("at most 127 nested arrays and objects"));
        }
        Ok(())
    }

    /// After an entry of an object (`close` `}`) or an element of an array
    /// (`]`): `true` at the end, `false` after a comma (white space
    /// skipped either way).
    #[inline(always)]
    fn after_entry(&mut self, close: u8) -> Result<bool, EventError> {
        self.ws();
        if self.eat(b',') {
            self.ws();
            return Ok(false);
        }
        if self.eat(close) {
            return Ok(true);
        }
        Err(self.syntax(if close == b'}' {
            "`,` or `}`"
        } else {
            "`,` or `]`"
        }))
    }

    /// An object's key and its `:`, white space around it skipped.
    #[inline(always)]
    fn key(&mut self) -> Result<Cow<'b, str>, EventError> {
        if self.peek() != Some(b'"') {
            return Err(self.syntax("a key (a string)"));
        }
        let key = self.string()?;
        self.ws();
        if !self.eat(b':') {
            return Err(self.syntax("`:`"));
        }
        self.ws();
        Ok(key)
    }

    /// The literal `word` (`true`, `false`, `null`) at the reader.
    #[inline]
    fn literal(&mut self, word: &[u8]) -> Result<(), EventError> {
        if self.bytes.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            return Ok(());
        }
        Err(self.syntax("a value"))
    }

    /// A string, its opening `"` at the reader: borrowed from the payload
    /// unless it holds an escape. Checked as UTF-8; a control character
    /// must be escaped.
    #[inline(always)]
    fn string(&mut self) -> Result<Cow<'b, str>, EventError> {
        let start = self.at + 1;
        let end = self.plain_run(start);
        match self.bytes.get(end) {
            Some(b'"') => {
                let text = self.utf8(start, end)?;
                self.at = end + 1;
                Ok(Cow::Borrowed(text))
            }
            _ => self.escaped_string(start, end).map(Cow::Owned),
        }
    }

    /// Where the run of bytes from `from` that need no attention ends: at
    /// a `"`, a `\\`, a control character or the end. Eight bytes at a
    /// time; the lowest byte [`attention`] flags is a real one.
    #[inline(always)]
    fn plain_run(&self, from: usize) -> usize {
        let rest = self.bytes.get(from..).unwrap_or_default();
        let mut at = 0;
        while let Some(Ok(word)) = rest.get(at..at + 8).map(<[u8; 8]>::try_from) {
            let flags = attention(u64::from_le_bytes(word));
            if flags != 0 {
                return from + at + (flags.trailing_zeros() / 8) as usize;
            }
            at += 8;
        }
        let tail = rest.get(at..).unwrap_or_default();
        from + at
            + tail
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(tail.len())
    }

    /// The bytes `start..end` (`start` after a `"`, `end` at one) as text.
    #[inline(always)]
    fn utf8(&self, start: usize, end: usize) -> Result<&'b str, EventError> {
        // Both ends are next to an ASCII `"`, so on character boundaries.
        if let Some(text) = self.text.and_then(|text| text.get(start..end)) {
            return Ok(text);
        }
        let bytes = self.bytes.get(start..end).unwrap_or_default();
        std::str::from_utf8(bytes).map_err(|e| EventError::Syntax {
            at: start + e.valid_up_to(),
            expected: "UTF-8",
        })
    }

    /// The rest of a string from its first byte that is not plain (at
    /// `end`), unescaping into a new buffer.
    #[cold]
    fn escaped_string(&mut self, start: usize, mut end: usize) -> Result<String, EventError> {
        let mut text = Vec::with_capacity(end - start + 16);
        text.extend_from_slice(self.bytes.get(start..end).unwrap_or_default());
        loop {
            self.at = end;
            match self.peek() {
                Some(b'"') => break,
                Some(b'\\') => {
                    self.at += 1;
                    self.escape(&mut text)?;
                }
                Some(_) => return Err(self.syntax("an escaped control character")),
                None => return Err(self.syntax("the string's closing `\"`")),
            }
            let from = self.at;
            end = self.plain_run(from);
            text.extend_from_slice(self.bytes.get(from..end).unwrap_or_default());
        }
        self.at = end + 1;
        String::from_utf8(text).map_err(|e| EventError::Syntax {
            at: start + e.utf8_error().valid_up_to(),
            expected: "UTF-8",
        })
    }

    /// One escape after its `\`, appended to `text` as UTF-8. A `\u` of a
    /// UTF-16 surrogate must be a leading one followed by a `\u` trailing
    /// one.
    fn escape(&mut self, text: &mut Vec<u8>) -> Result<(), EventError> {
        let byte = match self.peek() {
            Some(b'"') => b'"',
            Some(b'\\') => b'\\',
            Some(b'/') => b'/',
            Some(b'b') => 0x08,
            Some(b'f') => 0x0c,
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(b'u') => {
                self.at += 1;
                let unit = self.hex4()?;
                let code = match unit {
                    0xD800..=0xDBFF => {
                        if !(self.eat(b'\\') && self.eat(b'u')) {
                            return Err(self.syntax("a trailing surrogate after a leading one"));
                        }
                        let low = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(self.syntax("a trailing surrogate after a leading one"));
                        }
                        0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return Err(self.syntax("no lone trailing surrogate")),
                    _ => u32::from(unit),
                };
                let c = char::from_u32(code).ok_or_else(|| self.syntax("a character"))?;
                text.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                return Ok(());
            }
            _ => return Err(self.syntax("an escape")),
        };
        self.at += 1;
        text.push(byte);
        Ok(())
    }

    /// Four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Result<u16, EventError> {
        let digits = self
            .bytes
            .get(self.at..self.at + 4)
            .ok_or_else(|| self.syntax("four hex digits"))?;
        let mut unit = 0u16;
        for &d in digits {
            let v = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.syntax("four hex digits"))?;
            unit = unit << 4 | v as u16;
        }
        self.at += 4;
        Ok(unit)
    }

    /// A string field: a string, or `null` for absent.
    fn optional_string(&mut self, field: &'static str) -> Result<Option<SmallStr>, EventError> {
        match self.peek() {
            Some(b'"') => Ok(Some(match self.string()? {
                Cow::Borrowed(text) => SmallStr::new(text),
                Cow::Owned(text) => SmallStr::from(text),
            })),
            Some(b'n') => self.literal(b"null").map(|()| None),
            _ => Err(EventError::FieldType {
                field,
                expected: "a string",
            }),
        }
    }

    /// An integer field (`ts`): an integer in `i64`'s range, or `null`.
    fn optional_integer(&mut self, field: &'static str) -> Result<Option<i64>, EventError> {
        let wrong = EventError::FieldType {
            field,
            expected: "an integer",
        };
        match self.peek() {
            Some(b'n') => self.literal(b"null").map(|()| None),
            Some(b'-' | b'0'..=b'9') => match self.number()? {
                DataValue::Int(i) => Ok(Some(i)),
                _ => Err(wrong),
            },
            _ => Err(wrong),
        }
    }

    /// The bytes of the number at the reader: the longest run of bytes a
    /// JSON number may hold (its grammar is checked by whoever reads it).
    #[inline]
    fn number_token(&mut self) -> (usize, &'b [u8]) {
        let start = self.at;
        let rest = self.bytes.get(start..).unwrap_or_default();
        let len = rest
            .iter()
            .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .unwrap_or(rest.len());
        self.at += len;
        (start, rest.get(..len).unwrap_or_default())
    }

    /// A number: a short integer or a short decimal fraction read here,
    /// anything else by `serde_json`.
    #[inline(always)]
    fn number(&mut self) -> Result<DataValue, EventError> {
        if let Some((value, end)) = short_number(self.bytes, self.at) {
            self.at = end;
            return Ok(value);
        }
        let (start, token) = self.number_token();
        serde_json::from_slice(token).map_err(|_| EventError::Syntax {
            at: start,
            expected: "a number",
        })
    }

    /// Any value, as `data` holds it.
    fn value(&mut self) -> Result<DataValue, EventError> {
        Ok(match self.peek() {
            Some(b'"') => DataValue::Str(match self.string()? {
                Cow::Borrowed(s) => s.into(),
                Cow::Owned(s) => s.into_boxed_str(),
            }),
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(b'{') => DataValue::Object(self.object()?),
            Some(b'[') => self.array()?,
            Some(b't') => self.literal(b"true").map(|()| DataValue::Bool(true))?,
            Some(b'f') => self.literal(b"false").map(|()| DataValue::Bool(false))?,
            Some(b'n') => self.literal(b"null").map(|()| DataValue::Null)?,
            _ => return Err(self.syntax("a value")),
        })
    }

    /// An object, its `{` at the reader.
    fn object(&mut self) -> Result<DataObject, EventError> {
        self.enter()?;
        self.at += 1;
        self.ws();
        let mut inline: [(SmallStr, DataValue); INLINE_ENTRIES] = Default::default();
        let mut count = 0;
        let mut spilled: Vec<(SmallStr, DataValue)> = Vec::new();
        if !self.eat(b'}') {
            loop {
                let key = SmallStr::new(&self.key()?);
                let entry = (key, self.value()?);
                match inline.get_mut(count) {
                    Some(slot) if spilled.is_empty() => {
                        *slot = entry;
                        count += 1;
                    }
                    _ => {
                        if spilled.is_empty() {
                            spilled.reserve(INLINE_ENTRIES * 2);
                            spilled.extend(inline.iter_mut().map(std::mem::take));
                        }
                        spilled.push(entry);
                    }
                }
                if self.after_entry(b'}')? {
                    break;
                }
            }
        }
        self.depth += 1;
        Ok(if spilled.is_empty() {
            DataObject::from_read(&mut inline[..count])
        } else {
            DataObject::from_read(&mut spilled)
        })
    }

    /// An array, its `[` at the reader.
    fn array(&mut self) -> Result<DataValue, EventError> {
        self.enter()?;
        self.at += 1;
        self.ws();
        let mut items = Vec::new();
        if !self.eat(b']') {
            loop {
                items.push(self.value()?);
                if self.after_entry(b']')? {
                    break;
                }
            }
        }
        self.depth += 1;
        Ok(DataValue::Array(items.into_boxed_slice()))
    }

    /// Checks and skips the value of a key nobody reads, as `serde_json`
    /// ignores one: its grammar, its strings' escapes and control
    /// characters (not their UTF-8), with no bound on nesting (a stack of
    /// open containers, not recursion).
    fn skip_value(&mut self) -> Result<(), EventError> {
        let mut open: Vec<u8> = Vec::new();
        loop {
            self.ws();
            match self.peek() {
                Some(b'"') => self.skip_string()?,
                Some(b'-' | b'0'..=b'9') => {
                    let (start, token) = self.number_token();
                    if !number_grammar(token) {
                        return Err(EventError::Syntax {
                            at: start,
                            expected: "a number",
                        });
                    }
                }
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(open_byte @ (b'{' | b'[')) => {
                    self.at += 1;
                    self.ws();
                    let close = if open_byte == b'{' { b'}' } else { b']' };
                    if !self.eat(close) {
                        open.push(close);
                        if close == b'}' {
                            self.skip_key()?;
                        }
                        continue;
                    }
                }
                _ => return Err(self.syntax("a value")),
            }
            // A value ended: close what it ends, or go on after a comma.
            loop {
                let Some(&close) = open.last() else {
                    return Ok(());
                };
                if !self.after_entry(close)? {
                    if close == b'}' {
                        self.skip_key()?;
                    }
                    break;
                }
                open.pop();
            }
        }
    }

    /// A key of a skipped object and its `:`.
    fn skip_key(&mut self) -> Result<(), EventError> {
        if self.peek() != Some(b'"') {
            return Err(self.syntax("a key (a string)"));
        }
        self.skip_string()?;
        self.ws();
        if !self.eat(b':') {
            return Err(self.syntax("`:`"));
        }
        Ok(())
    }

    /// A skipped string: escapes checked (a `\u` only for its four hex
    /// digits), control characters refused, UTF-8 not checked.
    fn skip_string(&mut self) -> Result<(), EventError> {
        let mut end = self.plain_run(self.at + 1);
        loop {
            self.at = end;
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.at += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                            self.at += 1
                        }
                        Some(b'u') => {
                            self.at += 1;
                            self.hex4()?;
                        }
                        _ => return Err(self.syntax("an escape")),
                    }
                }
                Some(_) => return Err(self.syntax("an escaped control character")),
                None => return Err(self.syntax("the string's closing `\"`")),
            }
            end = self.plain_run(self.at);
        }
    }
}

/// The number at `bytes[start..]` as `serde_json` reads it, and where it
/// ends, when it is short enough to read here: an integer of at most
/// [`SHORT_DIGITS`] digits, or such digits with a decimal point and no
/// exponent. `serde_json` makes a float of the digits as one integer
/// divided by the power of ten of the fraction's length; both are exact
/// below 2^53 and 10^22, so the one rounding of the division gives the
/// same float here.
#[inline(always)]
fn short_number(bytes: &[u8], start: usize) -> Option<(DataValue, usize)> {
    let digits = |at: &mut usize, value: &mut i64| {
        let from = *at;
        while let Some(d @ b'0'..=b'9') = bytes.get(*at).copied() {
            // Wrapping: a value of too many digits is not used.
            *value = value.wrapping_mul(10).wrapping_add(i64::from(d - b'0'));
            *at += 1;
        }
        *at - from
    };
    let negative = bytes.get(start) == Some(&b'-');
    let mut at = start + usize::from(negative);
    let mut value = 0i64;
    let leading_zero = bytes.get(at) == Some(&b'0');
    let integer_len = digits(&mut at, &mut value);
    if integer_len == 0 || (leading_zero && integer_len > 1) {
        return None;
    }
    let fraction_len = if bytes.get(at) == Some(&b'.') {
        at += 1;
        match digits(&mut at, &mut value) {
            0 => return None,
            n => Some(n),
        }
    } else {
        None
    };
    let ends_here = !matches!(
        bytes.get(at),
        Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
    );
    if !ends_here || integer_len + fraction_len.unwrap_or(0) > SHORT_DIGITS {
        return None;
    }
    let value = match fraction_len {
        // `-0` is a float to `serde_json` (`-0.0`).
        None if negative && value == 0 => return None,
        None => DataValue::Int(if negative { -value } else { value }),
        Some(len) => {
            let magnitude = value as f64 / POW10.get(len).copied()?;
            DataValue::Float(if negative { -magnitude } else { magnitude })
        }
    };
    Some((value, at))
}

/// 10^0 ..= 10^15, each exact as an `f64`.
const POW10: [f64; SHORT_DIGITS + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` that may be a `"`, a `\\` or a
/// control character (the usual bit trick: a borrow can flag a byte only
/// above a real one, so the lowest flag is always real).
#[inline(always)]
fn attention(word: u64) -> u64 {
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word;
    (zero(word ^ (ONES * u64::from(b'"'))) | zero(word ^ (ONES * u64::from(b'\\'))) | below_space)
        & HIGHS
}

/// Whether `token` is one JSON number:
/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
fn number_grammar(token: &[u8]) -> bool {
    let digits = |t: &[u8]| t.iter().take_while(|b| b.is_ascii_digit()).count();
    let mut rest = token.strip_prefix(b"-").unwrap_or(token);
    match digits(rest) {
        0 => return false,
        n if n > 1 && rest[0] == b'0' => return false,
        n => rest = &rest[n..],
    }
    if let Some(fraction) = rest.strip_prefix(b".") {
        let n = digits(fraction);
        if n == 0 {
            return false;
        }
        rest = &fraction[n..];
    }
    if let [b'e' | b'E', exponent @ ..] = rest {
        let exponent = match exponent {
            [b'+' | b'-', tail @ ..] => tail,
            tail => tail,
        };
        let n = digits(exponent);
        if n == 0 {
            return false;
        }
        rest = &exponent[n..];
    }
    rest.is_empty()
}
