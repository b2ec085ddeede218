//! What `ruled record` writes (docs/recording.md#the-file): the timeline
//! entries the simulator parses (docs/simulation.md), `[[state]]`,
//! `[[message]]` and `[[event]]`, as TOML text, under the recording's
//! byte bound.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

/// The largest recording: past it the recorder stops with a note.
pub const MAX_RECORDING_BYTES: usize = 16 * 1024 * 1024;

/// A TOML basic string (quotes, backslashes and control characters
/// escaped).
pub fn quoted(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// A millisecond offset as a Go duration (`"1234ms"`).
pub fn at(ms: u64) -> String {
    format!("\"{ms}ms\"")
}

/// One `[[state]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    pub at_ms: u64,
    pub hash: String,
    /// `field = .., value = ..` (or `delete = true` when `value` is `None`).
    pub field: Option<(String, Option<String>)>,
    pub fields: BTreeMap<String, String>,
    pub clear: bool,
    pub replace: bool,
    /// `notify = false`: written without a notification.
    pub silent: bool,
    pub before_start: bool,
    /// The hash expires this long after the write.
    pub expire_ms: Option<u64>,
}

impl State {
    pub fn render(&self) -> String {
        let mut out = format!(
            "[[state]]\nat = {}\nhash = {}\n",
            at(self.at_ms),
            quoted(&self.hash)
        );
        match &self.field {
            Some((field, Some(value))) => {
                let _ = writeln!(out, "field = {}\nvalue = {}", quoted(field), quoted(value));
            }
            Some((field, None)) => {
                let _ = writeln!(out, "field = {}\ndelete = true", quoted(field));
            }
            None => {}
        }
        if !self.fields.is_empty() {
            let pairs: Vec<String> = self
                .fields
                .iter()
                .map(|(field, value)| format!("{} = {}", quoted(field), quoted(value)))
                .collect();
            let _ = writeln!(out, "fields = {{ {} }}", pairs.join(", "));
        }
        for (set, key) in [
            (self.clear, "clear"),
            (self.replace, "replace"),
            (self.before_start, "before-start"),
        ] {
            if set {
                let _ = writeln!(out, "{key} = true");
            }
        }
        if self.silent {
            out.push_str("notify = false\n");
        }
        if let Some(ms) = self.expire_ms {
            let _ = writeln!(out, "expire = {}", at(ms));
        }
        out
    }
}

/// One `[[message]]` entry: a raw channel message (UTF-8 only: a TOML
/// string holds nothing else).
pub fn message(at_ms: u64, channel: &str, payload: &str) -> String {
    format!(
        "[[message]]\nat = {}\nchannel = {}\npayload = {}\n",
        at(at_ms),
        quoted(channel),
        quoted(payload)
    )
}

/// One `[[event]]` entry from a stream entry's envelope: `topic`, `id`,
/// `src`, `from`, `to` and `data` as the bus said them (a `null` inside
/// `data` is left out: TOML has none).
pub fn event(at_ms: u64, id: &str, envelope: &serde_json::Value) -> Option<String> {
    let topic = envelope.get("topic")?.as_str()?;
    let mut out = format!(
        "[[event]]\nat = {}\ntopic = {}\nid = {}\n",
        at(at_ms),
        quoted(topic),
        quoted(id)
    );
    for key in ["src", "from", "to"] {
        if let Some(value) = envelope.get(key).and_then(serde_json::Value::as_str) {
            let _ = writeln!(out, "{key} = {}", quoted(value));
        }
    }
    if let Some(data) = envelope.get("data").and_then(toml_value) {
        let _ = writeln!(out, "data = {data}");
    }
    Some(out)
}

/// A JSON value as TOML (`None` for `null`, which TOML cannot say).
fn toml_value(value: &serde_json::Value) -> Option<toml::Value> {
    use serde_json::Value as J;
    Some(match value {
        J::Null => return None,
        J::Bool(b) => toml::Value::Boolean(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64()?),
        },
        J::String(s) => toml::Value::String(s.clone()),
        J::Array(items) => toml::Value::Array(items.iter().filter_map(toml_value).collect()),
        J::Object(map) => toml::Value::Table(
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), toml_value(v)?)))
                .collect(),
        ),
    })
}

/// The recording being written: each entry whole, or none once the bound
/// is reached.
pub struct Writer<W: Write> {
    out: W,
    written: usize,
    limit: usize,
    full: bool,
}

impl<W: Write> std::fmt::Debug for Writer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("written", &self.written)
            .field("limit", &self.limit)
            .field("full", &self.full)
            .finish_non_exhaustive()
    }
}

impl<W: Write> Writer<W> {
    pub fn new(out: W, limit: usize) -> Self {
        Self {
            out,
            written: 0,
            limit,
            full: false,
        }
    }

    /// Writes `text` (an entry or a comment) after a blank line (but the
    /// first), flushed;
    /// `false`
    /// once the bound is reached (the note is written then, once).
    pub fn entry(&mut self, text: &str) -> std::io::Result<bool> {
        if self.full {
            return Ok(false);
        }
        const NOTE_ROOM: usize = 128;
        if self.written + text.len() + 1 + NOTE_ROOM > self.limit {
            self.full = true;
            let note = format!(
                "\n# ruled record: stopped at the {} MiB bound of a recording\n",
                self.limit / (1024 * 1024)
            );
            self.out.write_all(note.as_bytes())?;
            self.written += note.len();
            self.out.flush()?;
            return Ok(false);
        }
        if self.written > 0 {
            self.out.write_all(b"\n")?;
        }
        self.out.write_all(text.as_bytes())?;
        // Each entry reaches the file whole at once: a recorder killed
        // without a chance to stop loses nothing written before.
        self.out.flush()?;
        self.written += text.len() + 1;
        Ok(true)
    }

    /// A comment line (the header, a gap in what was heard).
    pub fn comment(&mut self, text: &str) -> std::io::Result<bool> {
        let lines: Vec<String> = text.lines().map(|line| format!("# {line}")).collect();
        self.entry(&(lines.join("\n") + "\n"))
    }

    pub fn is_full(&self) -> bool {
        self.full
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let text = "a\"b\\c\u{7f}\n'";
        let table: toml::Table = toml::from_str(&format!("x = {}", quoted(text))).unwrap();
        assert_eq!(table["x"].as_str(), Some(text));
    }

    #[test]
    fn the_bound_stops_whole_entries() {
        let mut writer = Writer::new(Vec::new(), 300);
        assert!(writer.entry(&"x".repeat(100)).unwrap());
        assert!(!writer.entry(&"y".repeat(100)).unwrap());
        assert!(!writer.entry("z").unwrap());
        let text = String::from_utf8(writer.out).unwrap();
        assert!(!text.contains('y'));
        assert!(text.contains("bound"));
    }
}
