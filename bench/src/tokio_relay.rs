//! The reading relay on tokio: the same path as [`crate::floor`]'s
//! blocking one, served by tokio's current-thread runtime over its unix
//! sockets, as `ruled` is, so that a benchmark can tell the runtime's own
//! cost (waiting in `epoll_wait`, then reading) from `ruled`'s work.
//!
//! With `publishing` it also does the bus work `ruled` does for a
//! notification of a profile field (docs/engine.md#cpu-per-notification):
//! the derived event's `XADD` to a stream, its `PUBLISH` and the `SET` of
//! the last id, in the same write as the `LPUSH`, their replies read. The
//! event is written as `ruled` writes it (`ts`, `topic`, `src`, `from`,
//! `to`), from the value read and the one before.

use crate::floor::Relay;
use std::io::{self, Write};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Serves messages until the server closes the subscription.
pub(crate) fn run(relay: &Relay, publishing: bool) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(relay, publishing))
}

async fn serve(relay: &Relay, publishing: bool) -> io::Result<()> {
    let mut commands = Connection::open(&relay.socket).await?;
    let mut messages = Connection::open(&relay.socket).await?;
    messages.command(&[b"SUBSCRIBE", relay.channel.as_bytes()])?;
    messages.flush().await?;
    messages.reply().await?;
    let mut stdout = io::stdout();
    writeln!(stdout, "subscribed")?;
    stdout.flush()?;
    let hash = relay.read.as_deref().unwrap_or(&relay.channel);
    let (mut before, mut sequence) = (Vec::new(), 0u64);
    loop {
        // ["message", channel, payload]
        let Some(payload) = messages.reply().await?.pop() else {
            continue;
        };
        commands.command(&[b"HGET", hash.as_bytes(), &payload])?;
        commands.flush().await?;
        let value = commands.reply().await?.pop().unwrap_or_default();
        commands.command(&[b"LPUSH", relay.list.as_bytes(), b"x"])?;
        let mut replies = 1;
        if publishing {
            sequence += 1;
            commands.publish(hash, &payload, &before, &value, sequence)?;
            replies += 3;
        }
        commands.flush().await?;
        for _ in 0..replies {
            commands.reply().await?;
        }
        before = value;
    }
}

/// A RESP connection over a tokio unix socket: commands gathered in one
/// buffer, written at once.
struct Connection {
    stream: BufReader<UnixStream>,
    out: Vec<u8>,
    line: Vec<u8>,
    event: Event,
}

/// The parts of a derived event, kept between events.
#[derive(Default)]
struct Event {
    id: Vec<u8>,
    topic: Vec<u8>,
    body: Vec<u8>,
    entry: Vec<u8>,
    message: Vec<u8>,
    channel: Vec<u8>,
}

impl Connection {
    async fn open(socket: &std::path::Path) -> io::Result<Self> {
        Ok(Self {
            stream: BufReader::new(UnixStream::connect(socket).await?),
            out: Vec::new(),
            line: Vec::new(),
            event: Event::default(),
        })
    }

    fn command(&mut self, args: &[&[u8]]) -> io::Result<()> {
        write!(self.out, "*{}\r\n", args.len())?;
        for arg in args {
            write!(self.out, "${}\r\n", arg.len())?;
            self.out.extend_from_slice(arg);
            self.out.extend_from_slice(b"\r\n");
        }
        Ok(())
    }

    /// The derived event of `field` going from `before` to `value`: its
    /// stream entry, its publication with its id, the last id kept. Each
    /// part is written into a buffer kept between events.
    fn publish(
        &mut self,
        hash: &str,
        field: &[u8],
        before: &[u8],
        value: &[u8],
        sequence: u64,
    ) -> io::Result<()> {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        let Event {
            id,
            topic,
            body,
            entry,
            message,
            channel,
        } = &mut self.event;
        id.clear();
        write!(id, "{ts}-{sequence}")?;
        topic.clear();
        for part in [hash.as_bytes(), b".", field, b".", value] {
            topic.extend_from_slice(part);
        }
        body.clear();
        write!(body, r#""ts":{ts},"topic":""#)?;
        for part in [
            &topic[..],
            br#"","src":"adapter","from":""#,
            before,
            br#"","to":""#,
            value,
            br#""}"#,
        ] {
            body.extend_from_slice(part);
        }
        entry.clear();
        entry.push(b'{');
        entry.extend_from_slice(body);
        message.clear();
        for part in [&br#"{"id":""#[..], id, br#"","#, body] {
            message.extend_from_slice(part);
        }
        channel.clear();
        channel.extend_from_slice(b"ev:");
        channel.extend_from_slice(topic);
        let event = std::mem::take(&mut self.event);
        self.command(&[
            b"XADD",
            b"floor:events",
            b"MAXLEN",
            b"~",
            b"2000",
            &event.id,
            b"topic",
            &event.topic,
            b"e",
            &event.entry,
        ])?;
        self.command(&[b"PUBLISH", &event.channel, &event.message])?;
        self.command(&[b"SET", b"floor:last-id", &event.id])?;
        self.event = event;
        Ok(())
    }

    async fn flush(&mut self) -> io::Result<()> {
        self.stream.get_mut().write_all(&self.out).await?;
        self.out.clear();
        Ok(())
    }

    /// One reply: the bulk strings of an array, or the one of a bulk
    /// string (none for an integer, a simple string or a nil).
    async fn reply(&mut self) -> io::Result<Vec<Vec<u8>>> {
        let (head, number) = self.header().await?;
        match head {
            b'*' => {
                let mut bulks = Vec::new();
                for _ in 0..number.max(0) {
                    let (head, number) = self.header().await?;
                    if head == b'$' {
                        bulks.extend(self.bulk(number).await?);
                    }
                }
                Ok(bulks)
            }
            b'$' => Ok(self.bulk(number).await?.into_iter().collect()),
            _ => Ok(Vec::new()),
        }
    }

    /// A header line: its kind and its number (0 for a simple string).
    async fn header(&mut self) -> io::Result<(u8, i64)> {
        self.line.clear();
        if self.stream.read_until(b'\n', &mut self.line).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        crate::floor::header(&self.line)
    }

    async fn bulk(&mut self, length: i64) -> io::Result<Option<Vec<u8>>> {
        let Ok(length) = usize::try_from(length) else {
            return Ok(None);
        };
        let mut bulk = vec![0; length + 2];
        self.stream.read_exact(&mut bulk).await?;
        bulk.truncate(length);
        Ok(Some(bulk))
    }
}
