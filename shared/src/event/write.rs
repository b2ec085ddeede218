//! Writes an event envelope as JSON by hand: the same bytes
//! `serde_json::to_writer` writes through serde's derive (keys in field
//! order, the absent ones and a null `data` left out, `data`'s objects in
//! their key order), without serde's calls and `Result`s per field.
//! `ruled` writes every derived event it publishes so
//! (docs/engine.md#cpu-per-notification); `shared/tests/event_write.rs`
//! holds the two writers together.
//!
//! Strings are escaped as `serde_json` escapes them: `"`, `\` and the
//! bytes below 0x20 only (`\b \t \n \f \r` short, the others `\u00xx` in
//! lowercase hex), nothing else; a string that needs none is copied whole.
//! Integers are written by `itoa`, as `serde_json` writes them; floats by
//! `serde_json` itself, a float that is not finite as `null`.

use crate::event_data::DataValue;

impl super::Event {
    /// Appends the event to `out` as `serde_json::to_writer` would. It
    /// cannot fail: every value has a JSON form.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        // `topic` is always written and is the first field that is, so
        // the fields before it need no comma and those after it do.
        out.push(b'{');
        if let Some(id) = &self.id {
            out.extend_from_slice(b"\"id\":");
            string(out, id);
            out.push(b',');
        }
        if let Some(ts) = self.ts {
            out.extend_from_slice(b"\"ts\":");
            out.extend_from_slice(itoa::Buffer::new().format(ts).as_bytes());
            out.push(b',');
        }
        out.extend_from_slice(b"\"topic\":");
        string(out, &self.topic);
        for (key, value) in [
            (&b",\"src\":"[..], &self.src),
            (b",\"from\":", &self.from),
            (b",\"to\":", &self.to),
        ] {
            if let Some(value) = value {
                out.extend_from_slice(key);
                string(out, value);
            }
        }
        if !self.data.is_null() {
            out.extend_from_slice(b",\"data\":");
            value(out, &self.data);
        }
        out.push(b'}');
    }
}

/// Appends one JSON value.
fn value(out: &mut Vec<u8>, value: &DataValue) {
    match value {
        DataValue::Null => out.extend_from_slice(b"null"),
        DataValue::Bool(true) => out.extend_from_slice(b"true"),
        DataValue::Bool(false) => out.extend_from_slice(b"false"),
        DataValue::Int(n) => out.extend_from_slice(itoa::Buffer::new().format(*n).as_bytes()),
        DataValue::UInt(n) => out.extend_from_slice(itoa::Buffer::new().format(*n).as_bytes()),
        // serde_json's own float writer (which has changed between its
        // versions: ryu, then zmij), through `Number`'s `Display`: a
        // `String` per float, rare in a derived event.
        DataValue::Float(x) => match serde_json::Number::from_f64(*x) {
            Some(number) => out.extend_from_slice(number.to_string().as_bytes()),
            None => out.extend_from_slice(b"null"),
        },
        DataValue::Str(text) => string(out, text),
        DataValue::Array(items) => {
            out.push(b'[');
            for (at, item) in items.iter().enumerate() {
                if at > 0 {
                    out.push(b',');
                }
                self::value(out, item);
            }
            out.push(b']');
        }
        DataValue::Object(object) => {
            out.push(b'{');
            for (at, (key, item)) in object.iter().enumerate() {
                if at > 0 {
                    out.push(b',');
                }
                string(out, key);
                out.push(b':');
                self::value(out, item);
            }
            out.push(b'}');
        }
    }
}

/// Whether `byte` is escaped in a JSON string.
#[inline(always)]
fn escaped(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Whether any byte of `bytes` is escaped: eight bytes at a time, a
/// third of the instructions of a byte-by-byte scan (callgrind).
#[inline(always)]
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = ONES * 0x80;
    // The high bit of a byte of `word - ONES * n` under `!word` is set
    // for some byte exactly when some byte is below `n` (n <= 0x80): with
    // none below, no byte borrows.
    let below = |word: u64, n: u64| word.wrapping_sub(ONES * n) & !word;
    let mut words = bytes.chunks_exact(8);
    for chunk in &mut words {
        let word = u64::from_le_bytes(<[u8; 8]>::try_from(chunk).unwrap_or_default());
        let found = below(word, 0x20)
            | below(word ^ (ONES * u64::from(b'"')), 1)
            | below(word ^ (ONES * u64::from(b'\\')), 1);
        if found & HIGH != 0 {
            return true;
        }
    }
    words.remainder().iter().any(|&byte| escaped(byte))
}

/// Whether `text`, written as a JSON string, has an escape in it (the
/// bytes serde_json escapes: `"`, `\` and those below 0x20).
pub fn needs_json_escape(text: &str) -> bool {
    needs_escape(text.as_bytes())
}

/// Appends `text` as a JSON string.
fn string(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.push(b'"');
    // Envelope strings are names: most need no escape and are copied whole.
    if !needs_escape(bytes) {
        out.extend_from_slice(bytes);
    } else {
        escape(out, bytes);
    }
    out.push(b'"');
}

/// Appends `bytes` escaped, each run that needs no escape copied at once.
#[cold]
fn escape(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut run = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        if !escaped(byte) {
            continue;
        }
        out.extend_from_slice(bytes.get(run..at).unwrap_or_default());
        run = at + 1;
        let short = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x09 => b't',
            0x0a => b'n',
            0x0c => b'f',
            0x0d => b'r',
            _ => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
                continue;
            }
        };
        out.extend_from_slice(&[b'\\', short]);
    }
    out.extend_from_slice(bytes.get(run..).unwrap_or_default());
}
