//! ruled's own RESP2 reader and command encoding, for the connections it
//! reads itself: the subscription ([`crate::pubsub`]), where a message
//! too large to handle is skipped while it is read, never held whole, and
//! the hot path's command connection ([`crate::direct`]), where a reply is
//! read in the task that asked for it (docs/engine.md#cpu-per-notification).

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, BufReader};

/// The longest header line (`*3`, `$25000000`, `:1`, an error) read.
const MAX_LINE: u64 = 4096;
/// The longest array read straight from the buffer
/// ([`RespReader::buffered_reply`]): a message, a field read, a few pushes.
const BUFFERED_ELEMENTS: i64 = 16;
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

    /// The buffer filled from the stream when empty; the end of the
    /// stream is an error.
    async fn filled(&mut self) -> Result<(), RespError> {
        if self.io.buffer().is_empty() && self.io.fill_buf().await?.is_empty() {
            return Err(eof());
        }
        Ok(())
    }

    /// One reply; a top-level error reply is [`RespError::Refused`].
    pub(crate) async fn reply(&mut self) -> Result<Reply, RespError> {
        // Filled first (a message awaited arrives whole, most often).
        self.filled().await?;
        if let Some((reply, took)) = self.buffered_reply() {
            self.io.consume(took);
            return reply;
        }
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

    /// The reply at the start of the buffer and the bytes it takes, when
    /// the buffer holds it whole with nothing to skip (most replies): read
    /// without the awaits of the path below, which reads everything else
    /// (and says what is wrong with a reply that is) from the same place.
    fn buffered_reply(&self) -> Option<(Result<Reply, RespError>, usize)> {
        let bytes = self.io.buffer();
        let (header, mut at) = buffered_header(bytes)?;
        let reply = match header {
            Header::Array(-1) => Ok(Reply::Single(Element::Nil)),
            Header::Array(count) => {
                // A long array (a batch's `EXEC`, a replay's read) is read
                // below: its elements are not made twice when the buffer
                // turns out to hold only part of it.
                if !(0..=BUFFERED_ELEMENTS).contains(&count) || count > self.max_elements {
                    return None;
                }
                let mut elements = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    let (header, took) = buffered_header(&bytes[at..])?;
                    at += took;
                    let (element, took) = match header {
                        Header::Error(text) => (Element::Error(text), 0),
                        header => self.buffered_element(header, &bytes[at..])?,
                    };
                    at += took;
                    elements.push(element);
                }
                Ok(Reply::Array(elements))
            }
            Header::Error(text) => Err(RespError::Refused(text)),
            header => {
                let (element, took) = self.buffered_element(header, &bytes[at..])?;
                at += took;
                Ok(Reply::Single(element))
            }
        };
        Some((reply, at))
    }

    /// The element `header` announces, from `bytes` after its header line,
    /// and the bytes it takes; `None` when they are not all there or it is
    /// to be skipped.
    fn buffered_element(&self, header: Header, bytes: &[u8]) -> Option<(Element, usize)> {
        match header {
            Header::Bulk(len) => {
                let Ok(len) = usize::try_from(len) else {
                    return Some((Element::Nil, 0));
                };
                if len > self.limit {
                    return None;
                }
                let whole = bytes.get(..len.checked_add(2)?)?;
                Some((Element::Bulk(whole[..len].to_vec()), len + 2))
            }
            Header::Int(n) => Some((Element::Int(n), 0)),
            Header::Simple(text) => Some((Element::Simple(text), 0)),
            Header::Error(_) | Header::Array(_) => None,
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
        self.filled().await?;
        if let Some((line, took)) = buffered_line(self.io.buffer()) {
            let header = Header::parse(line)?;
            self.io.consume(took);
            return Ok(header);
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

/// The line at the start of `bytes`, without its CRLF, and the bytes it
/// takes, when it is there whole within [`MAX_LINE`].
fn buffered_line(bytes: &[u8]) -> Option<(&[u8], usize)> {
    let window = &bytes[..bytes.len().min(MAX_LINE as usize)];
    let end = window.iter().position(|&byte| byte == b'\n')?;
    Some((window[..end].strip_suffix(b"\r")?, end + 1))
}

/// The header line at the start of `bytes` and the bytes it takes, when
/// it is there whole and well formed.
fn buffered_header(bytes: &[u8]) -> Option<(Header, usize)> {
    let (line, took) = buffered_line(bytes)?;
    Some((Header::parse(line).ok()?, took))
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

/// A header's number: what `i64`'s `FromStr` takes (a sign, then at least
/// one digit), without first checking the bytes as UTF-8.
fn number(text: &[u8]) -> Result<i64, RespError> {
    let refused = || RespError::Protocol(String::from_utf8_lossy(text).into_owned());
    let (negative, digits) = match text.split_first() {
        Some((b'-', digits)) => (true, digits),
        Some((b'+', digits)) => (false, digits),
        _ => (false, text),
    };
    if digits.is_empty() {
        return Err(refused());
    }
    let mut n: i64 = 0;
    for &byte in digits {
        let digit = match byte {
            b'0'..=b'9' => i64::from(byte - b'0'),
            _ => return Err(refused()),
        };
        // Accumulated negative when it is, so that i64::MIN reads too.
        n = n.checked_mul(10).ok_or_else(refused)?;
        n = if negative {
            n.checked_sub(digit)
        } else {
            n.checked_add(digit)
        }
        .ok_or_else(refused)?;
    }
    Ok(n)
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
    push_crlf(bytes);
}

/// Appends one whole command of `args`.
pub(crate) fn push_args(bytes: &mut Vec<u8>, args: &[&[u8]]) {
    push_command(bytes, args.len());
    for arg in args {
        push_bulk(bytes, &[arg]);
    }
}

/// Appends `<kind><n>\r\n`. The few bytes of a header and a CRLF are
/// pushed one by one: a copy call for each would cost more than they do.
#[inline]
fn push_header(bytes: &mut Vec<u8>, kind: u8, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    bytes.push(kind);
    for &digit in &digits[at..] {
        bytes.push(digit);
    }
    push_crlf(bytes);
}

#[inline]
fn push_crlf(bytes: &mut Vec<u8>) {
    bytes.push(b'\r');
    bytes.push(b'\n');
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

    #[test]
    fn numbers_read_as_i64_from_str_does() {
        let cases: &[&[u8]] = &[
            b"0",
            b"-1",
            b"+7",
            b"42",
            b"-0",
            b"9223372036854775807",
            b"-9223372036854775808",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"",
            b"-",
            b"+",
            b"1x",
            b" 1",
            b"--1",
            b"1-",
            b"\xff",
            b"00012",
        ];
        for &text in cases {
            let expected = std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<i64>().ok());
            assert_eq!(number(text).ok(), expected, "{text:?}");
        }
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

    /// Hands out what it holds a few bytes at a time, as a socket might.
    struct Trickle<'a> {
        bytes: &'a [u8],
        sizes: std::iter::Cycle<std::slice::Iter<'a, usize>>,
    }

    impl AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let size = self.sizes.next().copied().unwrap_or(1);
            let n = size.min(self.bytes.len()).min(buf.remaining());
            let (now, rest) = self.bytes.split_at(n);
            buf.put_slice(now);
            self.bytes = rest;
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A random stream of replies: arrays (errors inside, nil elements),
    /// integers, simple strings, errors, bulk strings around the limit,
    /// nil arrays, now and then a byte changed.
    fn replies(rng: &mut test_kit::fuzz::Rng) -> Vec<u8> {
        fn element(rng: &mut test_kit::fuzz::Rng, out: &mut Vec<u8>) {
            match rng.below(6) {
                0 => out.extend_from_slice(
                    format!(":{}\r\n", rng.below(2000) as i64 - 1000).as_bytes(),
                ),
                1 => out.extend_from_slice(b"+OK\r\n"),
                2 => out.extend_from_slice(b"-WRONGTYPE no\r\n"),
                3 => out.extend_from_slice(b"$-1\r\n"),
                _ => {
                    let len = rng.below(24);
                    out.extend_from_slice(format!("${len}\r\n").as_bytes());
                    out.extend((0..len).map(|i| b'a' + (i % 26) as u8));
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
        let mut out = Vec::new();
        for _ in 0..1 + rng.below(12) {
            match rng.below(4) {
                0 => out.extend_from_slice(b"*-1\r\n"),
                1 => element(rng, &mut out),
                _ => {
                    let count = rng.below(20);
                    out.extend_from_slice(format!("*{count}\r\n").as_bytes());
                    for _ in 0..count {
                        element(rng, &mut out);
                    }
                }
            }
        }
        if rng.one_in(4) {
            let at = rng.below(out.len());
            out[at] = *rng.pick(b"*$:+-\r\n01x");
        }
        out
    }

    /// Each reply read, as text, up to and including the first error that
    /// is not Redis' own (where what is left of the stream depends on how
    /// it was buffered).
    async fn read_all(mut reader: RespReader<impl AsyncRead + Unpin>) -> Vec<String> {
        let mut read = Vec::new();
        loop {
            match reader.reply().await {
                Ok(reply) => read.push(format!("{reply:?}")),
                Err(RespError::Refused(text)) => read.push(format!("refused {text}")),
                Err(RespError::Io(e)) => {
                    return [read, vec![format!("io {:?}", e.kind())]].concat()
                }
                Err(RespError::Protocol(text)) => {
                    return [read, vec![format!("protocol {text}")]].concat()
                }
            }
        }
    }

    #[tokio::test]
    async fn random_replies_read_alike_whole_or_in_pieces() {
        // RULES_FUZZ_SEED / RULES_FUZZ_SCALE explore further (docs/fuzzing.md).
        let fuzz = test_kit::fuzz::Fuzz::from_env(
            "resp::tests::random_replies_read_alike_whole_or_in_pieces",
            0x7E5B,
        )
        .unwrap();
        let mut rng = test_kit::fuzz::Rng::new(fuzz.seed());
        let (limit, max_elements) = (16, 12);
        for _ in 0..fuzz.cases(3_000) {
            let input = replies(&mut rng);
            // Whole in the buffer: the buffered path reads nearly all.
            let whole = read_all(RespReader::new(&input[..], 4096, limit, max_elements)).await;
            // A byte at a time into a buffer of one: never a whole line
            // buffered, so only the reading path reads.
            let one = Trickle {
                bytes: &input,
                sizes: [1].iter().cycle(),
            };
            let piecewise = read_all(RespReader::new(one, 1, limit, max_elements)).await;
            // Pieces of a few bytes: now one path, now the other.
            let sizes: Vec<usize> = (0..7).map(|_| 1 + rng.below(9)).collect();
            let mixed = Trickle {
                bytes: &input,
                sizes: sizes.iter().cycle(),
            };
            let mixed = read_all(RespReader::new(mixed, 64, limit, max_elements)).await;
            let input = String::from_utf8_lossy(&input);
            assert_eq!(whole, piecewise, "{input:?}");
            assert_eq!(whole, mixed, "{input:?} in pieces of {sizes:?}");
        }
    }
}
