//! The floor: the least any program can do on a path `ruled` serves, so
//! that a benchmark can say how far above it `ruled` is, measured in the
//! same run on the same machine (docs/engine.md#the-unit-the-floor).
//!
//! A blocking Redis client with nothing in it but the path: one connection
//! subscribed to a channel, one for commands, each message answered at
//! once. No parsing of the message beyond RESP, no allocation that can be
//! kept, no runtime, no log. Two shapes:
//!
//! - **relay**: a message in, `LPUSH list value` out (what a one-step rule
//!   does on an `ev:` event);
//! - **reading relay**: a message in (its payload is a hash field, as
//!   redis-ipc publishes), `HGET hash field`, then `LPUSH` (what a rule on
//!   a derived event does after the read every notification needs).
//!
//! [`SHAPE_ENV`] serves the reading relay on tokio instead, with or
//! without `ruled`'s bus work ([`Shape`]): steps between the floor and
//! `ruled`, measured in the same run.
//!
//! It runs as a process of its own, like `ruled`, so the scheduler places
//! and wakes it the same way: [`run_from_env`] makes a benchmark binary
//! act as the floor when started with [`FLOOR_ENV`] set.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// The variable that makes a benchmark binary run [`run_from_env`]'s relay:
/// `SOCKET CHANNEL LIST [HASH]`, tab-separated (a `HASH` makes it the
/// reading relay).
pub const FLOOR_ENV: &str = "RULES_BENCH_FLOOR";

/// The variable that serves [`FLOOR_ENV`]'s reading relay on tokio
/// instead (`tokio`), or on tokio doing `ruled`'s bus work too
/// (`tokio-publishing`): [`Shape`].
pub const SHAPE_ENV: &str = "RULES_BENCH_FLOOR_SHAPE";

/// How a relay is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Blocking reads and writes, no runtime: the floor.
    Blocking,
    /// The reading relay on tokio's current-thread runtime, as `ruled`
    /// runs: what the runtime itself costs.
    Tokio,
    /// [`Shape::Tokio`], and the derived event's `XADD`, `PUBLISH` and
    /// last-id `SET` with the push, as `ruled` sends them for a
    /// notification: what the bus work costs.
    TokioPublishing,
}

impl Shape {
    /// The value of [`SHAPE_ENV`] that selects it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Blocking => "blocking",
            Self::Tokio => "tokio",
            Self::TokioPublishing => "tokio-publishing",
        }
    }

    fn from_env() -> io::Result<Self> {
        let Ok(name) = std::env::var(SHAPE_ENV) else {
            return Ok(Self::Blocking);
        };
        [Self::Blocking, Self::Tokio, Self::TokioPublishing]
            .into_iter()
            .find(|shape| shape.name() == name)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{SHAPE_ENV}={name:?}: not blocking, tokio or tokio-publishing"),
                )
            })
    }
}

/// What a relay does with each message.
#[derive(Debug, Clone)]
pub struct Relay {
    /// The Redis unix socket.
    pub socket: PathBuf,
    /// The channel it subscribes to.
    pub channel: String,
    /// The list each message pushes `x` to.
    pub list: String,
    /// For the reading relay: the hash whose field (the message) it reads
    /// before pushing.
    pub read: Option<String>,
}

impl Relay {
    /// The relay's settings as [`FLOOR_ENV`] carries them.
    pub fn to_env(&self) -> String {
        let mut text = format!("{}\t{}\t{}", self.socket.display(), self.channel, self.list);
        if let Some(hash) = &self.read {
            text.push('\t');
            text.push_str(hash);
        }
        text
    }

    fn from_env(text: &str) -> io::Result<Self> {
        let mut parts = text.split('\t');
        let mut next = |what: &str| {
            parts.next().map(str::to_owned).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{FLOOR_ENV}: no {what}"),
                )
            })
        };
        Ok(Self {
            socket: PathBuf::from(next("socket")?),
            channel: next("channel")?,
            list: next("list")?,
            read: next("hash").ok(),
        })
    }

    /// Serves messages until the server closes the subscription.
    pub fn run(&self) -> io::Result<()> {
        let mut commands = Connection::open(&self.socket)?;
        let mut messages = Connection::open(&self.socket)?;
        messages.send(&[b"SUBSCRIBE", self.channel.as_bytes()])?;
        messages.reply()?;
        // Told to the benchmark on stdout: it waits for this line.
        let mut stdout = io::stdout();
        writeln!(stdout, "subscribed")?;
        stdout.flush()?;
        loop {
            // ["message", channel, payload]
            let Reply::Array(mut parts) = messages.reply()? else {
                continue;
            };
            let Some(Reply::Bulk(payload)) = parts.pop() else {
                continue;
            };
            if let Some(hash) = &self.read {
                commands.send(&[b"HGET", hash.as_bytes(), &payload])?;
                commands.reply()?;
            }
            commands.send(&[b"LPUSH", self.list.as_bytes(), b"x"])?;
            commands.reply()?;
        }
    }
}

/// Runs the relay [`FLOOR_ENV`] describes and exits, when it is set;
/// returns when it is not. A benchmark calls it first thing in `main`.
pub fn run_from_env() {
    let Ok(text) = std::env::var(FLOOR_ENV) else {
        return;
    };
    let outcome = Relay::from_env(&text).and_then(|relay| match Shape::from_env()? {
        Shape::Blocking => relay.run(),
        Shape::Tokio if relay.read.is_some() => crate::tokio_relay::run(&relay, false),
        Shape::TokioPublishing if relay.read.is_some() => crate::tokio_relay::run(&relay, true),
        shape => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{SHAPE_ENV}={}: the reading relay only (a hash)",
                shape.name()
            ),
        )),
    });
    match outcome {
        // The server went away: the benchmark is over.
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => std::process::exit(0),
        Err(error) => {
            // Nothing more can be done if stderr is gone too.
            let _ = writeln!(io::stderr(), "floor relay: {error}");
            std::process::exit(1)
        }
        Ok(()) => std::process::exit(0),
    }
}

/// One RESP reply, as far as the relay needs it.
#[derive(Debug)]
enum Reply {
    Simple,
    Integer,
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

/// A blocking RESP connection over a unix socket.
struct Connection {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    line: Vec<u8>,
    out: Vec<u8>,
}

impl Connection {
    fn open(socket: &std::path::Path) -> io::Result<Self> {
        let stream = UnixStream::connect(socket)?;
        Ok(Self {
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
            line: Vec::new(),
            out: Vec::new(),
        })
    }

    /// Writes one command in a single `write`.
    fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        self.out.clear();
        write!(self.out, "*{}\r\n", args.len())?;
        for arg in args {
            write!(self.out, "${}\r\n", arg.len())?;
            self.out.extend_from_slice(arg);
            self.out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&self.out)
    }

    fn reply(&mut self) -> io::Result<Reply> {
        self.line.clear();
        if self.reader.read_until(b'\n', &mut self.line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let (head, number) = header(&self.line)?;
        match head {
            b'+' => Ok(Reply::Simple),
            b':' => Ok(Reply::Integer),
            b'$' => {
                let Ok(length) = usize::try_from(number) else {
                    return Ok(Reply::Nil);
                };
                let mut bulk = vec![0; length + 2];
                io::Read::read_exact(&mut self.reader, &mut bulk)?;
                bulk.truncate(length);
                Ok(Reply::Bulk(bulk))
            }
            b'*' => {
                let Ok(count) = usize::try_from(number) else {
                    return Ok(Reply::Nil);
                };
                (0..count)
                    .map(|_| self.reply())
                    .collect::<io::Result<_>>()
                    .map(Reply::Array)
            }
            _ => Err(not_resp()),
        }
    }
}

fn not_resp() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "not a RESP reply")
}

/// A reply's header line as read, its CRLF included: its kind and, but
/// for a simple string's, its number; an error reply is an error.
pub(crate) fn header(line: &[u8]) -> io::Result<(u8, i64)> {
    let head = *line.first().ok_or_else(not_resp)?;
    let body = line
        .get(1..line.len().saturating_sub(2))
        .ok_or_else(not_resp)?;
    match head {
        b'-' => Err(io::Error::other(String::from_utf8_lossy(body).into_owned())),
        b'+' => Ok((head, 0)),
        _ => std::str::from_utf8(body)
            .ok()
            .and_then(|text| text.parse().ok())
            .map(|number| (head, number))
            .ok_or_else(not_resp),
    }
}
