//! Reading the client's messages
//! (docs/editors.md#what-the-server-reads-and-its-bounds): the
//! `Content-Length` framing of LSP read with bounds, in place of
//! `lsp-server`'s reader, which allocates whatever length a header
//! announces and stops the server at the first message it cannot read.
//!
//! A message over [`MAX_MESSAGE_BYTES`] is read past as it arrives (never
//! held) and answered with an error; one that is not JSON, or not a JSON-RPC
//! message, is answered with an error; bytes that are no header are skipped
//! up to the next `Content-Length:`. The server goes on in each case.

use lsp_server::{ErrorCode, Message, Notification, Request, RequestId, Response, ResponseError};
use serde_json::Value;
use std::io::{self, BufRead, Read, Write};
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread::JoinHandle;

/// The largest message read: 16 MiB, the bound of every input file
/// (`rulec check`'s rule files, [`crate::load::MAX_RULE_FILE_LEN`]).
pub const MAX_MESSAGE_BYTES: u64 = crate::load::MAX_RULE_FILE_LEN;

/// The longest header line kept; a longer one keeps its end, where a
/// `Content-Length:` that follows junk on the same line would be.
const MAX_HEADER_LINE: usize = 4096;

/// What the client sent: a message, or why it is not one.
#[derive(Debug)]
pub enum Incoming {
    Message(Message),
    Malformed(Malformed),
}

/// A message that could not be read, answered with a JSON-RPC error.
#[derive(Debug)]
pub struct Malformed {
    /// The request's id when one could be read (else the reply's is `null`).
    pub id: Option<RequestId>,
    pub code: ErrorCode,
    pub message: String,
}

impl Malformed {
    fn parse_error(message: impl Into<String>) -> Self {
        Malformed {
            id: None,
            code: ErrorCode::ParseError,
            message: message.into(),
        }
    }
}

/// One message's header: its length, and whether junk came before it.
struct Header {
    length: Result<u64, String>,
    junk_before: bool,
}

/// Reads the client's messages from `input` one at a time.
pub struct Reader<R> {
    input: R,
    max: u64,
    /// A message read with the junk before it, answered after the junk.
    queued: Option<Incoming>,
}

impl<R: BufRead> Reader<R> {
    pub fn new(input: R, max: u64) -> Self {
        Reader {
            input,
            max,
            queued: None,
        }
    }

    /// The next message; `None` when the input ends (also inside one).
    pub fn next(&mut self) -> io::Result<Option<Incoming>> {
        if let Some(queued) = self.queued.take() {
            return Ok(Some(queued));
        }
        let Some(header) = self.header()? else {
            return Ok(None);
        };
        let incoming = match header.length {
            Ok(length) => match self.body(length)? {
                Some(incoming) => incoming,
                None => return Ok(None),
            },
            Err(why) => Incoming::Malformed(Malformed::parse_error(why)),
        };
        if header.junk_before {
            self.queued = Some(incoming);
            let skipped = "bytes that are no message header were skipped";
            return Ok(Some(Incoming::Malformed(Malformed::parse_error(skipped))));
        }
        Ok(Some(incoming))
    }

    /// Reads header lines up to the empty line that ends them.
    fn header(&mut self) -> io::Result<Option<Header>> {
        let mut length = None;
        let mut junk_before = false;
        let mut started = false;
        loop {
            let Some(line) = read_line_tail(&mut self.input, MAX_HEADER_LINE)? else {
                return Ok(None);
            };
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if started {
                    break;
                }
                continue;
            }
            // Junk (what is left of a message that was not framed right),
            // alone or before a `Content-Length:` on its line: skipped with
            // what came before it, and the header starts again.
            let (field, junk) = match find_content_length(line) {
                Some(at) if at > 0 => (header_field(&line[at..]), true),
                _ => {
                    let field = header_field(line);
                    (field, field.is_none())
                }
            };
            if junk {
                junk_before = true;
                length = None;
            }
            let Some((name, value)) = field else {
                started = false;
                continue;
            };
            started = true;
            if name.eq_ignore_ascii_case("Content-Length") {
                length = Some(
                    value
                        .trim()
                        .parse::<u64>()
                        .map_err(|_| "the Content-Length header is not a byte count".to_string()),
                );
            }
        }
        let length = length.unwrap_or_else(|| Err("a header without Content-Length".into()));
        Ok(Some(Header {
            length,
            junk_before,
        }))
    }

    /// Reads a body of `length` bytes, or past it when over the bound.
    fn body(&mut self, length: u64) -> io::Result<Option<Incoming>> {
        let mut limited = (&mut self.input).take(length);
        if length > self.max {
            let skipped = io::copy(&mut limited, &mut io::sink())?;
            if skipped < length {
                return Ok(None);
            }
            let message = format!(
                "a message of {length} bytes is over the {} MiB bound ({} bytes): skipped",
                self.max >> 20,
                self.max
            );
            return Ok(Some(Incoming::Malformed(Malformed {
                id: None,
                code: ErrorCode::InvalidRequest,
                message,
            })));
        }
        // At most the bound, so the announced length may be reserved.
        let mut body = Vec::with_capacity(usize::try_from(length).unwrap_or(0));
        limited.read_to_end(&mut body)?;
        if (body.len() as u64) < length {
            return Ok(None);
        }
        Ok(Some(parse(&body)))
    }
}

/// A header line's name and value (`Name: value`), if it is one.
fn header_field(line: &str) -> Option<(&str, &str)> {
    let (name, value) = line.split_once(':')?;
    let is_token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    is_token.then_some((name, value))
}

/// Where the last `Content-Length:` in `line` starts (any case).
fn find_content_length(line: &str) -> Option<usize> {
    const NAME: &[u8] = b"content-length:";
    let at = line
        .as_bytes()
        .windows(NAME.len())
        .rposition(|window| window.eq_ignore_ascii_case(NAME))?;
    line.is_char_boundary(at).then_some(at)
}

/// Reads up to and with the next `\n`, keeping at most its last `max`
/// bytes; `None` at the end of the input.
fn read_line_tail(input: &mut impl BufRead, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let mut any = false;
    loop {
        let buffer = match input.fill_buf() {
            Ok(buffer) => buffer,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if buffer.is_empty() {
            return Ok(any.then_some(line));
        }
        any = true;
        let (part, done) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (&buffer[..=at], true),
            None => (buffer, false),
        };
        line.extend_from_slice(part);
        if line.len() > max {
            line.drain(..line.len() - max);
        }
        let used = part.len();
        input.consume(used);
        if done {
            return Ok(Some(line));
        }
    }
}

/// Reads stdin on a thread of its own until it ends or brings `exit`.
/// The channel holds nothing: a message is read once the one before it
/// is taken, so no more than one waits in memory.
pub fn stdin() -> (Receiver<Incoming>, JoinHandle<io::Result<()>>) {
    let (sender, receiver) = sync_channel(0);
    let thread = std::thread::spawn(move || {
        let mut reader = Reader::new(io::stdin().lock(), MAX_MESSAGE_BYTES);
        while let Some(incoming) = reader.next()? {
            let exit = matches!(&incoming, Incoming::Message(Message::Notification(n)) if n.method == "exit");
            if sender.send(incoming).is_err() || exit {
                break;
            }
        }
        Ok(())
    });
    (receiver, thread)
}

/// Writes one framed JSON-RPC message.
pub fn write(out: &mut dyn Write, message: &serde_json::Value) -> io::Result<()> {
    let body = serde_json::to_vec(message)?;
    write!(out, "Content-Length: {}\r\n\r\n", body.len())?;
    out.write_all(&body)?;
    out.flush()
}

/// A body as a message, or the JSON-RPC error it gets: not JSON is a
/// parse error; JSON that is no request, response or notification (a
/// batch, a `method` that is not a string, an id that is neither a
/// string nor a 32-bit integer) an invalid request, answered with its id
/// when it has one.
fn parse(body: &[u8]) -> Incoming {
    let value = match serde_json::from_slice::<Value>(body) {
        Ok(value) => value,
        Err(not_json) => {
            return Incoming::Malformed(Malformed::parse_error(format!("not JSON: {not_json}")));
        }
    };
    match message(value) {
        Ok(message) => Incoming::Message(message),
        Err((id, why)) => Incoming::Malformed(Malformed {
            id,
            code: ErrorCode::InvalidRequest,
            message: format!("not a JSON-RPC request, response or notification: {why}"),
        }),
    }
}

/// A JSON value as the message it is, or its id (when it has a usable
/// one) and what is wrong with it.
fn message(value: Value) -> Result<Message, (Option<RequestId>, String)> {
    let Value::Object(mut object) = value else {
        return Err((None, "not an object (LSP has no batches)".into()));
    };
    let id = match object.remove("id") {
        None => None,
        Some(Value::String(id)) => Some(RequestId::from(id)),
        Some(Value::Number(n)) => match n.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) => Some(RequestId::from(n)),
            None => return Err((None, format!("the id {n} is not a 32-bit integer"))),
        },
        Some(_) => return Err((None, "the id is neither a string nor a number".into())),
    };
    let params = object.remove("params").unwrap_or(Value::Null);
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            Ok(Message::Request(Request { id, method, params }))
        }
        (Some(Value::String(method)), None) => {
            Ok(Message::Notification(Notification { method, params }))
        }
        (Some(_), id) => Err((id, "`method` is not a string".into())),
        (None, Some(id)) => {
            let error = match object.remove("error") {
                None => None,
                Some(error) => match serde_json::from_value::<ResponseError>(error) {
                    Ok(error) => Some(error),
                    Err(why) => return Err((Some(id), format!("bad `error`: {why}"))),
                },
            };
            let result = object.remove("result");
            if result.is_none() && error.is_none() {
                return Err((Some(id), "no `method`, `result` or `error`".into()));
            }
            Ok(Message::Response(Response { id, result, error }))
        }
        (None, None) => Err((None, "no `method` and no `id`".into())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn all(input: &[u8], max: u64) -> Vec<Result<String, (i32, String)>> {
        let mut reader = Reader::new(input, max);
        let mut out = Vec::new();
        while let Some(incoming) = reader.next().unwrap() {
            out.push(match incoming {
                Incoming::Message(Message::Request(r)) => Ok(r.method),
                Incoming::Message(Message::Notification(n)) => Ok(n.method),
                Incoming::Message(Message::Response(r)) => Ok(format!("response {}", r.id)),
                Incoming::Malformed(m) => Err((m.code as i32, m.message)),
            });
        }
        out
    }

    fn framed(body: &str) -> String {
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    }

    #[test]
    fn over_the_bound_is_read_past_and_the_next_is_read() {
        let big = format!("{{\"x\":\"{}\"}}", "a".repeat(100));
        let next = r#"{"jsonrpc":"2.0","method":"initialized"}"#;
        let input = format!("{}{}", framed(&big), framed(next));
        let out = all(input.as_bytes(), 64);
        assert_eq!(out.len(), 2, "{out:?}");
        let (code, message) = out[0].as_ref().unwrap_err();
        assert_eq!(*code, ErrorCode::InvalidRequest as i32);
        assert!(message.contains("108 bytes"), "{message}");
        assert_eq!(out[1], Ok("initialized".into()));
    }

    #[test]
    fn junk_and_a_length_that_is_no_number_are_answered() {
        let next = r#"{"jsonrpc":"2.0","id":3,"method":"shutdown"}"#;
        let input = format!(
            "junk{}Content-Length: lots\r\n\r\n{next}{}",
            framed(next),
            framed(next)
        );
        let out = all(input.as_bytes(), 1 << 20);
        let codes: Vec<_> = out
            .iter()
            .map(|o| o.as_ref().map_err(|m| m.0).map(String::as_str))
            .collect();
        // The junk, the message after it, the bad length; its body is junk
        // before the last message.
        assert_eq!(codes.len(), 5, "{out:?}");
        assert_eq!(
            codes,
            [
                Err(-32700),
                Ok("shutdown"),
                Err(-32700),
                Err(-32700),
                Ok("shutdown")
            ]
        );
    }

    #[test]
    fn an_input_that_ends_inside_a_message_ends_the_reading() {
        let out = all(b"Content-Length: 50\r\n\r\n{\"jsonrpc\"", 1 << 20);
        assert!(out.is_empty(), "{out:?}");
        let out = all(b"Content-Length: 5000\r\n\r\n{", 64);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn a_long_junk_line_keeps_its_end() {
        let next = r#"{"jsonrpc":"2.0","method":"exit"}"#;
        let input = format!("{}{}", "z".repeat(100_000), framed(next));
        let out = all(input.as_bytes(), 1 << 20);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[1], Ok("exit".into()));
    }
}
