//! The subscription connection (docs/service.md#subscriptions): a small
//! RESP2 reader of its own, so a message too large to handle is skipped
//! while it is read, never held whole. The Redis client reads every reply
//! whole before anyone can look at its size; on this one connection, where
//! anyone may `PUBLISH` anything, that would let one 25 MB message take
//! the service's memory budget. Commands and replies elsewhere go through
//! the Redis client as before.

use crate::connection::CONNECT_TIMEOUT;
use crate::resp::{push_bulk, RespError, RespReader, Stream};
pub(crate) use crate::resp::{Element, Reply};
use crate::tls::Tls;
use redis::{ConnectionAddr, ConnectionInfo};
use std::sync::Arc;
use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};

/// The largest message payload (and channel name) read whole; a larger
/// one is skipped as it arrives. Events over 64 KiB are never handled
/// (docs/service.md#subscriptions): a job keeps its event until it runs,
/// so the pool queue (256 by default) times this must stay well inside the
/// service's 48 MB: 256 x 64 KiB is 16 MiB. Vehicle events are a few
/// hundred bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Elements in one reply; pub/sub replies have 3 or 4.
const MAX_ELEMENTS: usize = 16;
/// Channels or patterns per (un)subscribe command: 100,000 exact topics
/// in one `SUBSCRIBE` would be a 3 MB command, and as many confirmations
/// queued in Redis before the first is read.
const NAMES_PER_COMMAND: usize = 1024;

/// A channel or glob name as sent: `prefix`, then `rest`. An event
/// channel is `ev:` and a topic borrowed from the payload, so no name is
/// built to subscribe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Name<'a> {
    pub prefix: &'static str,
    pub rest: &'a str,
}

impl<'a> Name<'a> {
    /// A name sent as it is.
    pub fn plain(name: &'a str) -> Self {
        Self {
            prefix: "",
            rest: name,
        }
    }
}

/// The next at most [`NAMES_PER_COMMAND`] of `names`, in `chunk`
/// (emptied first); false when there are none.
fn next_chunk<'a>(names: &mut impl Iterator<Item = Name<'a>>, chunk: &mut Vec<Name<'a>>) -> bool {
    chunk.clear();
    chunk.extend(names.take(NAMES_PER_COMMAND));
    !chunk.is_empty()
}

#[derive(Debug, thiserror::Error)]
pub enum PubSubError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("timed out opening the pub/sub connection")]
    Timeout,
    #[error("`rediss://` (TLS) needs ruled built with `--features tls`")]
    Tls,
    #[error("Redis refused: {0}")]
    Refused(String),
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),
}

/// One message of the subscription: built straight from the reply's
/// elements, where redis-rs's `Msg` took a `Value` array built for it,
/// parsed it again and allocated its kind's name (two allocations and a
/// thousand instructions a notification).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `?` for a name that is not UTF-8, as redis-rs's `Msg` says.
    channel: Box<str>,
    payload: Vec<u8>,
    from_pattern: bool,
}

impl Message {
    fn new(channel: Vec<u8>, payload: Vec<u8>, from_pattern: bool) -> Self {
        let channel =
            String::from_utf8(channel).map_or_else(|_| "?".into(), String::into_boxed_str);
        Self {
            channel,
            payload,
            from_pattern,
        }
    }

    /// The channel it came on.
    pub fn get_channel_name(&self) -> &str {
        &self.channel
    }

    pub fn get_payload_bytes(&self) -> &[u8] {
        &self.payload
    }

    /// Whether a pattern subscription (`PSUBSCRIBE`) delivered it.
    pub fn from_pattern(&self) -> bool {
        self.from_pattern
    }
}

/// What the subscription delivered.
#[derive(Debug)]
pub enum Delivery {
    Message(Message),
    /// A message over [`MAX_MESSAGE_BYTES`] (payload or channel name),
    /// skipped unread; `channel` is cut to its first 200 bytes.
    Oversized {
        channel: String,
        bytes: usize,
    },
}

/// A subscribed connection.
pub struct PubSub {
    /// The largest message read; longer ones are skipped
    /// ([`MAX_MESSAGE_BYTES`] unless [`PubSub::set_limit`] said otherwise).
    io: RespReader<ReadHalf<Box<dyn Stream>>>,
    commands: Commands,
}

/// The writing half of a subscribed connection: (un)subscribe commands
/// sent while the reader waits for messages (docs/service.md#live-reload).
/// Their confirmations arrive on the reader, which skips them.
#[derive(Clone)]
pub struct Commands(Arc<tokio::sync::Mutex<WriteHalf<Box<dyn Stream>>>>);

impl std::fmt::Debug for Commands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Commands")
    }
}

impl Commands {
    /// Sends `command` (`SUBSCRIBE`, `PUNSUBSCRIBE`, ...) for `names`, in
    /// as many commands of at most `NAMES_PER_COMMAND` (1,024) names as it takes
    /// (none for no names: an empty `UNSUBSCRIBE` would drop every channel).
    pub async fn send_chunked<'a>(
        &self,
        command: &str,
        names: impl IntoIterator<Item = Name<'a>>,
    ) -> Result<(), PubSubError> {
        let mut names = names.into_iter();
        let mut chunk = Vec::new();
        while next_chunk(&mut names, &mut chunk) {
            self.send_names(command, &chunk).await?;
        }
        Ok(())
    }

    async fn send_names(&self, command: &str, names: &[Name<'_>]) -> Result<(), PubSubError> {
        let mut bytes = Vec::new();
        crate::resp::push_command(&mut bytes, names.len() + 1);
        push_bulk(&mut bytes, &[command.as_bytes()]);
        for name in names {
            push_bulk(&mut bytes, &[name.prefix.as_bytes(), name.rest.as_bytes()]);
        }
        self.write(&bytes).await
    }

    /// Sends one command (`SUBSCRIBE a b`, `PUNSUBSCRIBE x`, ...).
    pub async fn send(&self, args: &[&[u8]]) -> Result<(), PubSubError> {
        let mut bytes = Vec::new();
        crate::resp::push_args(&mut bytes, args);
        self.write(&bytes).await
    }

    async fn write(&self, bytes: &[u8]) -> Result<(), PubSubError> {
        let mut stream = self.0.lock().await;
        stream.write_all(bytes).await?;
        stream.flush().await?;
        Ok(())
    }
}

impl std::fmt::Debug for PubSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PubSub")
    }
}

impl PubSub {
    /// Reads messages up to `bytes` long from now on: the control client
    /// waits for one reply, which may be longer than an event
    /// (docs/operating.md#the-wire-format).
    pub fn set_limit(&mut self, bytes: usize) {
        self.io.limit = bytes;
    }

    /// Connects to the server `info` names (over TLS with `tls` for a
    /// `rediss://` URL), authenticates, and subscribes to `channels` and
    /// `patterns`, waiting for every confirmation.
    pub async fn open<'a>(
        info: &ConnectionInfo,
        tls: &Tls,
        channels: impl Iterator<Item = Name<'a>> + Send,
        patterns: impl Iterator<Item = Name<'a>> + Send,
    ) -> Result<Self, PubSubError> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect(info.addr(), tls))
            .await
            .map_err(|_| PubSubError::Timeout)??;
        let (read, write) = tokio::io::split(stream);
        let mut pubsub = Self {
            io: RespReader::new(
                read,
                crate::resp::READ_BUFFER,
                MAX_MESSAGE_BYTES,
                MAX_ELEMENTS,
            ),
            commands: Commands(Arc::new(tokio::sync::Mutex::new(write))),
        };
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            let mut auth = vec!["AUTH".as_bytes()];
            if let Some(user) = settings.username() {
                auth.push(user.as_bytes());
            }
            auth.push(password.as_bytes());
            pubsub.send(&auth).await?;
            pubsub.expect_ok().await?;
        }
        // A command's confirmations are read before the next is sent, so
        // neither side holds more than one command's worth.
        let subscribe = async {
            let mut chunk = Vec::new();
            let mut channels = channels;
            while next_chunk(&mut channels, &mut chunk) {
                pubsub.commands.send_names("SUBSCRIBE", &chunk).await?;
                for _ in &chunk {
                    pubsub.confirmation().await?;
                }
            }
            let mut patterns = patterns;
            while next_chunk(&mut patterns, &mut chunk) {
                pubsub.commands.send_names("PSUBSCRIBE", &chunk).await?;
                for _ in &chunk {
                    pubsub.confirmation().await?;
                }
            }
            Ok::<(), PubSubError>(())
        };
        tokio::time::timeout(CONNECT_TIMEOUT, subscribe)
            .await
            .map_err(|_| PubSubError::Timeout)??;
        Ok(pubsub)
    }

    /// The next message. Not cancel-safe: a reply read halfway is lost
    /// with the connection (the intake never cancels it).
    pub async fn next(&mut self) -> Result<Delivery, PubSubError> {
        loop {
            let reply = self.reply().await?;
            if let Some(delivery) = delivery(reply) {
                return Ok(delivery);
            }
        }
    }

    async fn send(&mut self, args: &[&[u8]]) -> Result<(), PubSubError> {
        self.commands.send(args).await
    }

    /// Sends one command on a connection opened with nothing subscribed,
    /// and reads its reply with this reader: a bulk string over the limit
    /// comes back as [`Element::Skipped`], never read whole (the control
    /// server's pop, docs/service.md#what-ruled-reads-and-its-bounds).
    pub(crate) async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, PubSubError> {
        self.send(args).await?;
        self.reply().await
    }

    /// The connection's writing half, for later (un)subscribe commands.
    pub fn commands(&self) -> Commands {
        self.commands.clone()
    }

    async fn expect_ok(&mut self) -> Result<(), PubSubError> {
        match self.reply().await? {
            Reply::Single(Element::Simple(_)) => Ok(()),
            other => Err(PubSubError::Protocol(format!("{other:?}"))),
        }
    }

    /// A `subscribe` / `psubscribe` confirmation.
    async fn confirmation(&mut self) -> Result<(), PubSubError> {
        match self.reply().await? {
            Reply::Array(elements)
                if matches!(elements.first(), Some(Element::Bulk(kind))
                    if kind == b"subscribe" || kind == b"psubscribe") =>
            {
                Ok(())
            }
            other => Err(PubSubError::Protocol(format!("{other:?}"))),
        }
    }

    /// One reply; an error reply is [`PubSubError::Refused`].
    async fn reply(&mut self) -> Result<Reply, PubSubError> {
        Ok(self.io.reply().await?)
    }
}

impl From<RespError> for PubSubError {
    fn from(error: RespError) -> Self {
        match error {
            RespError::Io(e) => Self::Io(e),
            RespError::Refused(text) => Self::Refused(text),
            RespError::Protocol(text) => Self::Protocol(text),
        }
    }
}

pub(crate) async fn connect(
    addr: &ConnectionAddr,
    tls: &Tls,
) -> Result<Box<dyn Stream>, PubSubError> {
    use crate::socket::Socket;
    match addr {
        ConnectionAddr::Tcp(host, port) => {
            Ok(Box::new(Socket::new(tcp(host, *port).await?.into_std()?)?))
        }
        #[cfg(feature = "tls")]
        ConnectionAddr::TcpTls { host, port, .. } => {
            let stream = tcp(host, *port).await?;
            Ok(Box::new(tls.wrap(stream, host).await?))
        }
        ConnectionAddr::Unix(path) => {
            let stream = tokio::net::UnixStream::connect(path).await?;
            Ok(Box::new(Socket::new(stream.into_std()?)?))
        }
        _ => {
            let _ = tls; // holds nothing without the `tls` feature
            Err(PubSubError::Tls)
        }
    }
}

async fn tcp(host: &str, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let stream = tokio::net::TcpStream::connect((host, port)).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A `message` or `pmessage` reply as a [`Delivery`]; `None` for anything
/// else (a late confirmation, a `pong`).
fn delivery(reply: Reply) -> Option<Delivery> {
    let Reply::Array(elements) = reply else {
        return None;
    };
    let mut elements = elements.into_iter();
    let from_pattern = match elements.next()? {
        Element::Bulk(kind) if kind == b"message" => false,
        Element::Bulk(kind) if kind == b"pmessage" => {
            // The pattern it matched: not needed, but it must be there.
            elements.next()?;
            true
        }
        _ => return None,
    };
    let (channel, payload) = (elements.next()?, elements.next()?);
    if elements.next().is_some() {
        return None;
    }
    match (channel, payload) {
        (Element::Skipped(bytes), _) => Some(Delivery::Oversized {
            channel: "(a channel name over 64 KiB)".into(),
            bytes,
        }),
        (Element::Bulk(channel), Element::Skipped(bytes)) => Some(Delivery::Oversized {
            channel: String::from_utf8_lossy(&channel[..channel.len().min(200)]).into(),
            bytes,
        }),
        (Element::Bulk(channel), Element::Bulk(payload)) => Some(Delivery::Message(Message::new(
            channel,
            payload,
            from_pattern,
        ))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(text: &[u8]) -> Element {
        Element::Bulk(text.to_vec())
    }

    #[test]
    fn messages_and_oversized_ones_are_told_apart() {
        let Some(Delivery::Message(message)) =
            delivery(Reply::Array(vec![b(b"message"), b(b"ev:a"), b(b"{}")]))
        else {
            panic!("a message");
        };
        assert_eq!(message.get_channel_name(), "ev:a");
        assert!(!message.from_pattern());
        let Some(Delivery::Message(message)) = delivery(Reply::Array(vec![
            b(b"pmessage"),
            b(b"ev:*"),
            b(b"ev:b"),
            b(b"x"),
        ])) else {
            panic!("a pattern message");
        };
        assert!(message.from_pattern());
        assert_eq!(message.get_payload_bytes(), b"x");
        let oversized = delivery(Reply::Array(vec![
            b(b"message"),
            b(b"ev:big"),
            Element::Skipped(25_000_000),
        ]));
        assert!(
            matches!(oversized, Some(Delivery::Oversized { ref channel, bytes: 25_000_000 }) if channel == "ev:big"),
            "{oversized:?}"
        );
        let confirmation = Reply::Array(vec![b(b"subscribe"), b(b"ev:a"), Element::Int(1)]);
        assert!(delivery(confirmation).is_none());
    }
}
