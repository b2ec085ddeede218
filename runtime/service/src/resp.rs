//! ruled's own RESP2 reader and command encoding, for the connections it
//! reads itself: the subscription ([`crate::pubsub`]), where a message
//! too large to handle is skipped while it is read, never held whole, and
//! the hot path's command connection ([`crate::direct`]), where a reply is
//! read in the task that asked for it (docs/engine.md#cpu-per-notification).

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, BufReader};

/// The longest header line (`*3`, `$25000000`, `:1`, an error) read.
const MAX_LINE: u64 = 4096;
/// Bytes read from the socket at once: a flood is read in few calls.
pub(crate) const READ_BUFFER: usize = 64 * 1024;

/// What a connection reads: a socket, a unix socket, or TLS over TCP.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

#[derive(Debug, thiserror::Error)]
pub enum RespError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("Redis refused: {0}")]
    Refused(String),
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),
}

/// One element of a reply: a bulk string read whole, or only its length
/// when it was over the reader's limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Element {
    Bulk(Vec<u8>),
    Skipped(usize),
    Int(i64),
    Simple(String),
    /// An error reply inside an array (`EXEC`'s): the line after `-`.
    Error(String),
    Nil,
}

#[derive(Debug)]
pub(crate) enum Reply {
    Array(Vec<Element>),
    Single(Element),
}

/// Reads replies from `R`: bulk strings up to `limit` bytes whole, longer
/// ones skipped as they arrive; arrays of at most `max_elements`, not
/// nested.
pub(crate) struct RespReader<R> {
    io: BufReader<R>,
    pub(crate) limit: usize,
    max_elements: i64,
}

impl<R: AsyncRead + Unpin> RespReader<R> {
    /// A reader of `read` whose buffer holds `buffer` bytes: a bulk string
    /// longer than that is read past it, straight into its own bytes.
    pub(crate) fn new(read: R, buffer: usize, limit: usize, max_elements: usize) -> Self {
        Self {
            io: BufReader::with_capacity(buffer, read),
            limit,
            max_elements: i64::try_from(max_elements).unwrap_or(i64::MAX),
        }
    }

    /// The stream, for writing (a connection not split in halves).
    pub(crate) fn get_mut(&mut self) -> &mut R {
        self.io.get_mut()
    }

    /// Whether bytes the reader has not parsed are buffered.
    pub(crate) fn has_buffered(&self) -> bool {
        !self.io.buffer().is_empty()
    }

    /// The buffer, filled from the stream when empty (an empty slice at
    /// the end of the stream).
    pub(crate) async fn fill(&mut self) -> std::io::Result<&[u8]> {
        self.io.fill_buf().await
    }

    /// One reply; a top-level error reply is [`RespError::Refused`].
    pub(crate) async fn reply(&mut self) -> Result<Reply, RespError> {
        match self.header().await? {
            Header::Array(-1) => {
                // A nil array (`BRPOP` timed out, `EXEC` after `WATCH`).
                Ok(Reply::Single(Element::Nil))
            }
            Header::Array(count) => {
                if !(0..=self.max_elements).contains(&count) {
                    return Err(RespError::Protocol(format!("an array of {count}")));
                }
                let mut elements = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    elements.push(match self.header().await? {
                        Header::Error(text) => Element::Error(text),
                        header => self.element(header).await?,
                    });
                }
                Ok(Reply::Array(elements))
            }
            Header::Error(text) => Err(RespError::Refused(text)),
            header => Ok(Reply::Single(self.element(header).await?)),
        }
    }

    async fn element(&mut self, header: Header) -> Result<Element, RespError> {
        match header {
            Header::Bulk(len) => {
                let Ok(len) = usize::try_from(len) else {
                    return Ok(Element::Nil);
                };
                if len > self.limit {
                    // Read past it (and its CRLF) without keeping it.
                    let skip = len as u64 + 2;
                    let skipped =
                        tokio::io::copy(&mut (&mut self.io).take(skip), &mut tokio::io::sink())
                            .await?;
                    if skipped < skip {
                        return Err(eof());
                    }
                    return Ok(Element::Skipped(len));
                }
                // Most bulk strings are in the buffer whole: copied from
                // there, without zeroing a vector first and reading into it.
                if let Some(whole) = self.io.buffer().get(..len + 2) {
                    let bytes = whole[..len].to_vec();
                    self.io.consume(len + 2);
                    return Ok(Element::Bulk(bytes));
                }
                let mut bytes = vec![0; len + 2];
                self.io.read_exact(&mut bytes).await?;
                bytes.truncate(len);
                Ok(Element::Bulk(bytes))
            }
            Header::Int(n) => Ok(Element::Int(n)),
            Header::Simple(text) => Ok(Element::Simple(text)),
            Header::Error(text) => Err(RespError::Refused(text)),
            Header::Array(count) => Err(RespError::Protocol(format!(
                "an array of {count} inside an array"
            ))),
        }
    }

    /// One header line, read: from the buffer when it holds the whole
    /// line (most replies; an empty buffer is filled first, as when a
    /// message is awaited), else through a line read of its own.
    async fn header(&mut self) -> Result<Header, RespError> {
        if self.io.buffer().is_empty() && self.io.fill_buf().await?.is_empty() {
            return Err(eof());
        }
        let buffered = self.io.buffer();
        let window = &buffered[..buffered.len().min(MAX_LINE as usize)];
        if let Some(end) = window.iter().position(|&byte| byte == b'\n') {
            if let Some(line) = window[..end].strip_suffix(b"\r") {
                let header = Header::parse(line)?;
                self.io.consume(end + 1);
                return Ok(header);
            }
        }
        let mut line = Vec::new();
        (&mut self.io)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await?;
        if let Some(line) = line.strip_suffix(b"\r\n") {
            Header::parse(line)
        } else if (line.len() as u64) < MAX_LINE {
            // Cut short: the connection ended mid-line.
            Err(eof())
        } else {
            Err(RespError::Protocol("a header line too long".into()))
        }
    }
}

/// A reply's header line, parsed.
enum Header {
    Array(i64),
    Bulk(i64),
    Int(i64),
    Simple(String),
    Error(String),
}

impl Header {
    fn parse(line: &[u8]) -> Result<Self, RespError> {
        let text = || String::from_utf8_lossy(&line[1..]).into_owned();
        match line.split_first() {
            Some((b'*', n)) => Ok(Self::Array(number(n)?)),
            Some((b'$', n)) => Ok(Self::Bulk(number(n)?)),
            Some((b':', n)) => Ok(Self::Int(number(n)?)),
            Some((b'+', _)) => Ok(Self::Simple(text())),
            Some((b'-', _)) => Ok(Self::Error(text())),
            _ => Err(RespError::Protocol(
                String::from_utf8_lossy(line).into_owned(),
            )),
        }
    }
}

pub(crate) fn eof() -> RespError {
    RespError::Io(std::io::ErrorKind::UnexpectedEof.into())
}

fn number(text: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| RespError::Protocol(String::from_utf8_lossy(text).into_owned()))
}

/// Appends a command's header: `*<args>`.
pub(crate) fn push_command(bytes: &mut Vec<u8>, args: usize) {
    push_header(bytes, b'*', args);
}

/// Appends one bulk string, the concatenation of `parts`: its header, its
/// bytes and the CRLF, room made once.
pub(crate) fn push_bulk(bytes: &mut Vec<u8>, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|part| part.len()).sum();
    bytes.reserve(len + 24);
    push_header(bytes, b'$', len);
    for part in parts {
        bytes.extend_from_slice(part);
    }
    bytes.extend_from_slice(b"\r\n");
}

/// Appends one whole command of `args`.
pub(crate) fn push_args(bytes: &mut Vec<u8>, args: &[&[u8]]) {
    push_command(bytes, args.len());
    for arg in args {
        push_bulk(bytes, &[arg]);
    }
}

/// Appends `<kind><n>\r\n` in one copy.
fn push_header(bytes: &mut Vec<u8>, kind: u8, mut n: usize) {
    let mut line = [0u8; 23];
    let mut at = line.len() - 2;
    line[at..].copy_from_slice(b"\r\n");
    loop {
        at -= 1;
        line[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    at -= 1;
    line[at] = kind;
    bytes.extend_from_slice(&line[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_encode_as_resp() {
        let mut bytes = Vec::new();
        push_args(&mut bytes, &[b"LPUSH", b"list", b""]);
        push_command(&mut bytes, 1);
        push_bulk(&mut bytes, &[b"ev:", b"x1234567890"]);
        assert_eq!(
            bytes,
            b"*3\r\n$5\r\nLPUSH\r\n$4\r\nlist\r\n$0\r\n\r\n*1\r\n$14\r\nev:x1234567890\r\n"
        );
        bytes.clear();
        push_command(&mut bytes, usize::MAX);
        assert_eq!(bytes, format!("*{}\r\n", usize::MAX).as_bytes());
    }

    #[tokio::test]
    async fn replies_are_read_errors_inside_arrays_too() {
        let input: &[u8] =
            b"*3\r\n:1\r\n-WRONGTYPE no\r\n$3\r\nabc\r\n-NOSCRIPT x\r\n*2\r\n$5\r\nhello\r\n$-1\r\n+OK\r\n";
        let mut reader = RespReader::new(input, 64, 4, 16);
        let Ok(Reply::Array(first)) = reader.reply().await else {
            panic!("an array");
        };
        assert_eq!(
            first,
            vec![
                Element::Int(1),
                Element::Error("WRONGTYPE no".into()),
                Element::Bulk(b"abc".to_vec())
            ]
        );
        assert!(matches!(reader.reply().await, Err(RespError::Refused(e)) if e == "NOSCRIPT x"));
        let Ok(Reply::Array(second)) = reader.reply().await else {
            panic!("an array");
        };
        assert_eq!(second, vec![Element::Skipped(5), Element::Nil]);
        assert!(matches!(
            reader.reply().await,
            Ok(Reply::Single(Element::Simple(ok))) if ok == "OK"
        ));
        assert!(reader.reply().await.is_err());
    }
}
