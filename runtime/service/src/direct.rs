//! The hot path's command connections (docs/service.md#connections): the
//! field reads, the publication of derived events and the lane's pushes
//! go out on connections ruled reads itself ([`crate::resp`]), one per
//! task that uses it, so a request is written and its reply read by the
//! task that asked, with no connection task of the Redis client between
//! (docs/engine.md#cpu-per-notification).
//!
//! Opened as the subscription is (TCP, a unix socket, TLS with the `tls`
//! feature, `AUTH` with the URL's user and password, `SELECT` of its
//! database), at the first request and again at the first request after
//! it was lost. A connection found closed before a request goes out (the
//! server closed it: Redis' `timeout` for idle clients, `CLIENT KILL`, a
//! restart) is replaced first, so the request reaches Redis once; one that
//! breaks or stays silent after the request went out is dropped, and the
//! request's outcome is unknown (the caller's error, as with the Redis
//! client's connection).

use crate::connection::CONNECT_TIMEOUT;
use crate::resp::{Element, Reply, RespError, RespReader, Stream};
use crate::tls::Tls;
use redis::{ConnectionInfo, RedisError, RedisResult, Value};
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Elements in one reply: an `EXEC` of a full lane batch, a read of many
/// fields of one hash.
const MAX_ELEMENTS: usize = 4096;
/// Bytes read from the socket at once: a reply is a few bytes to a few
/// hundred (a full lane batch's `EXEC` about 2 KiB); the subscription's
/// 64 KiB is for a flood of messages.
const READ_BUFFER: usize = 4096;
/// The largest bulk string a reply may hold whole: a watched field's bound
/// is checked by the read script itself, so anything larger is not a
/// reply of ruled's requests.
const MAX_BULK: usize = 1024 * 1024;

/// Where the connections go: the URL's address and settings, and the TLS
/// the subscription uses too.
#[derive(Debug, Clone)]
pub struct Target {
    info: ConnectionInfo,
    tls: Tls,
}

impl Target {
    pub fn new(info: ConnectionInfo, tls: Tls) -> Self {
        Self { info, tls }
    }

    /// A connection to it, opened at its first request; replies wait at
    /// most `response_timeout` (`None`: as long as the caller waits).
    pub fn connection(&self, response_timeout: Option<Duration>) -> Direct {
        Direct {
            target: self.clone(),
            response_timeout,
            open: None,
            owed: 0,
            buffer: Vec::new(),
            reply_wait: None,
        }
    }
}

/// A deadline beyond reach (a `timeout` of centuries), as tokio's own.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);
/// The largest request buffer a connection keeps between requests.
const KEEP_BUFFER: usize = 64 * 1024;

/// One command connection of one task. A clone is a connection of its
/// own to the same server, opened at its first request.
pub struct Direct {
    target: Target,
    response_timeout: Option<Duration>,
    open: Option<RespReader<Box<dyn Stream>>>,
    /// Replies still to come for requests whose wait ran out: read and
    /// set aside before the next request's. The connection is kept, so a
    /// request Redis holds (a stall, `CLIENT PAUSE`) still runs once it
    /// resumes, as it did on the Redis client's connection.
    owed: usize,
    /// The buffer requests are written in, kept between them
    /// ([`Direct::take_buffer`]): no allocation per request.
    buffer: Vec<u8>,
    /// The timer a reply is waited for with, made at the first request and
    /// moved to each one's deadline: moving a timer later is one atomic
    /// operation, where a new one per request is registered with the
    /// runtime's timer wheel and removed again
    /// (docs/engine.md#cpu-per-notification).
    reply_wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Clone for Direct {
    fn clone(&self) -> Self {
        self.target.connection(self.response_timeout)
    }
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Direct")
            .field("open", &self.open.is_some())
            .field("owed", &self.owed)
            .finish()
    }
}

/// What the socket of an open connection holds before a request.
enum Peek {
    /// Nothing: the connection is open and idle.
    Nothing,
    /// Bytes: late replies, or bytes nobody asked for.
    Bytes,
    /// The end of the stream, or an error: the connection is gone.
    Gone,
}

impl Direct {
    /// Sends `commands` (RESP, `resp::push_args`) in one write
    /// and reads their `count` replies: each its value or the error Redis
    /// answered. The whole is an error when Redis was not reached, the
    /// connection broke (it is then dropped) or a reply did not come in
    /// time (the connection is kept, its late replies set aside).
    pub async fn send(
        &mut self,
        commands: &[u8],
        count: usize,
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        self.send_within(commands, count, self.response_timeout)
            .await
    }

    /// [`Direct::send`], the replies waited for at most `response_timeout`
    /// (an action's own `timeout`) instead of the connection's.
    pub async fn send_within(
        &mut self,
        commands: &[u8],
        count: usize,
        response_timeout: Option<Duration>,
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        self.ensure_open().await?;
        let Self {
            open,
            owed,
            reply_wait,
            ..
        } = self;
        let Some(reader) = open.as_mut() else {
            return Err(std::io::Error::from(std::io::ErrorKind::NotConnected).into());
        };
        // Replies read whole so far (the late ones first), and whether the
        // request is being written or a reply read: a wait that runs out
        // then loses the place, and the connection with it.
        let (mut read, mut midway) = (0, true);
        let late = *owed;
        let exchange = async {
            reader.get_mut().write_all(commands).await?;
            reader.get_mut().flush().await?;
            midway = false;
            let mut replies = Vec::with_capacity(count);
            while read < late + count {
                reader.fill().await?;
                midway = true;
                let reply = match reader.reply().await {
                    Ok(reply) => Ok(value(reply)),
                    Err(RespError::Refused(text)) => Err(server_error(&text)),
                    Err(e) => return Err(e),
                };
                (read, midway) = (read + 1, false);
                if read > late {
                    replies.push(reply);
                }
            }
            Ok(replies)
        };
        let outcome = match response_timeout {
            Some(wait) => {
                // As `tokio::time::timeout` would: the exchange polled
                // first, the deadline far off when `wait` is beyond reach.
                let now = tokio::time::Instant::now();
                let at = now.checked_add(wait).unwrap_or_else(|| now + FAR_FUTURE);
                let timer =
                    reply_wait.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                timer.as_mut().reset(at);
                tokio::select! {
                    biased;
                    outcome = exchange => outcome,
                    () = timer.as_mut() => Err(RespError::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no reply from Redis in time",
                    ))),
                }
            }
            None => exchange.await,
        };
        match outcome {
            Ok(replies) => {
                *owed = 0;
                Ok(replies)
            }
            Err(RespError::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut && !midway => {
                *owed = late + count - read;
                Err(e.into())
            }
            Err(e) => {
                *open = None;
                *owed = 0;
                Err(transport(e))
            }
        }
    }

    /// One command's reply as `T`; an error reply is the error.
    pub async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> RedisResult<T> {
        let mut replies = self.send(&cmd.get_packed_command(), 1).await?;
        let reply = replies.pop().unwrap_or(Ok(Value::Nil))?;
        Ok(T::from_redis_value(reply)?)
    }

    /// The command of `args` (each one argument, as `resp::push_args`
    /// writes them) and its reply as `T`, the request written in the
    /// connection's own buffer.
    pub async fn query_args<T: redis::FromRedisValue>(&mut self, args: &[&[u8]]) -> RedisResult<T> {
        let mut request = self.take_buffer();
        crate::resp::push_args(&mut request, args);
        let replies = self.send(&request, 1).await;
        self.keep_buffer(request);
        let reply = replies?.pop().unwrap_or(Ok(Value::Nil))?;
        Ok(T::from_redis_value(reply)?)
    }

    /// The buffer to write the next request in, empty; give it back with
    /// [`Direct::keep_buffer`] (a buffer not given back is only allocated
    /// anew).
    pub fn take_buffer(&mut self) -> Vec<u8> {
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.clear();
        buffer
    }

    /// Keeps `buffer` for the next request, unless it grew large.
    pub fn keep_buffer(&mut self, buffer: Vec<u8>) {
        if buffer.capacity() <= KEEP_BUFFER {
            self.buffer = buffer;
        }
    }

    /// This connection when it is still open (late replies that arrived
    /// read and set aside), else a new one.
    async fn ensure_open(&mut self) -> RedisResult<()> {
        if let Some(open) = &mut self.open {
            let keep = match peek(open).await {
                Peek::Nothing => true,
                Peek::Bytes if self.owed > 0 => {
                    let drained = tokio::time::timeout(CONNECT_TIMEOUT, drain(open, self.owed));
                    match drained.await {
                        Ok(Ok(left)) => {
                            self.owed = left;
                            true
                        }
                        _ => false,
                    }
                }
                Peek::Bytes | Peek::Gone => false,
            };
            if !keep {
                tracing::debug!("command connection was closed; opening a new one");
                self.open = None;
                self.owed = 0;
            }
        }
        if self.open.is_none() {
            let opened = tokio::time::timeout(CONNECT_TIMEOUT, open(&self.target))
                .await
                .unwrap_or_else(|_| {
                    Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "connection attempt timed out",
                    )))
                })?;
            self.open = Some(opened);
        }
        Ok(())
    }
}

/// What `open` holds now, without waiting: reads only what the socket
/// already has.
async fn peek(open: &mut RespReader<Box<dyn Stream>>) -> Peek {
    if open.has_buffered() {
        return Peek::Bytes;
    }
    let mut fill = std::pin::pin!(open.fill());
    std::future::poll_fn(|cx| match fill.as_mut().poll(cx) {
        Poll::Pending => Poll::Ready(Peek::Nothing),
        Poll::Ready(Ok(bytes)) if !bytes.is_empty() => Poll::Ready(Peek::Bytes),
        Poll::Ready(_) => Poll::Ready(Peek::Gone),
    })
    .await
}

/// Reads and sets aside the late replies that have arrived, of `owed`;
/// returns how many are still to come.
async fn drain(
    open: &mut RespReader<Box<dyn Stream>>,
    mut owed: usize,
) -> Result<usize, RespError> {
    while owed > 0 {
        if !matches!(peek(open).await, Peek::Bytes) {
            break;
        }
        match open.reply().await {
            Ok(_) | Err(RespError::Refused(_)) => owed -= 1,
            Err(e) => return Err(e),
        }
    }
    Ok(owed)
}

/// A new connection to `target`, authenticated, its database selected.
async fn open(target: &Target) -> RedisResult<RespReader<Box<dyn Stream>>> {
    let stream = crate::pubsub::connect(target.info.addr(), &target.tls)
        .await
        .map_err(|e| match e {
            crate::pubsub::PubSubError::Io(e) => RedisError::from(e),
            other => RedisError::from(std::io::Error::other(other.to_string())),
        })?;
    let mut open = RespReader::new(stream, READ_BUFFER, MAX_BULK, MAX_ELEMENTS);
    let settings = target.info.redis_settings();
    let mut hello = Vec::new();
    let mut count = 0;
    if let Some(password) = settings.password() {
        let mut auth = vec!["AUTH".as_bytes()];
        if let Some(user) = settings.username() {
            auth.push(user.as_bytes());
        }
        auth.push(password.as_bytes());
        crate::resp::push_args(&mut hello, &auth);
        count += 1;
    }
    if settings.db() != 0 {
        let db = settings.db().to_string();
        crate::resp::push_args(&mut hello, &[b"SELECT", db.as_bytes()]);
        count += 1;
    }
    if count > 0 {
        let exchange = async {
            open.get_mut().write_all(&hello).await?;
            open.get_mut().flush().await?;
            for _ in 0..count {
                match open.reply().await {
                    Ok(_) => {}
                    Err(RespError::Refused(text)) => return Ok(Err(server_error(&text))),
                    Err(e) => return Err(e),
                }
            }
            Ok(Ok(()))
        };
        exchange.await.map_err(transport)??;
    }
    Ok(open)
}

/// A reply as the Redis client's value.
fn value(reply: Reply) -> Value {
    match reply {
        Reply::Single(element) => element_value(element),
        Reply::Array(elements) => Value::Array(elements.into_iter().map(element_value).collect()),
    }
}

fn element_value(element: Element) -> Value {
    match element {
        Element::Bulk(bytes) => Value::BulkString(bytes),
        Element::Int(n) => Value::Int(n),
        Element::Simple(text) if text == "OK" => Value::Okay,
        Element::Simple(text) => Value::SimpleString(text),
        Element::Error(text) => redis::parse_redis_value(format!("-{text}\r\n").as_bytes())
            .unwrap_or_else(|e| Value::SimpleString(e.to_string())),
        // Not within a reply of ruled's requests (MAX_BULK).
        Element::Skipped(_) | Element::Nil => Value::Nil,
    }
}

/// An error reply (`WRONGTYPE ...`, `NOSCRIPT ...`) as the Redis client
/// reads it, so its kind and code are the same.
fn server_error(text: &str) -> RedisError {
    match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
        Ok(value) => match value.extract_error() {
            Err(e) => e,
            Ok(_) => redis::make_extension_error(text.into(), None),
        },
        Err(e) => e,
    }
}

/// A failure to reach Redis or to read its reply, as the Redis client's
/// I/O error (`connection::is_transport` holds for it).
fn transport(error: RespError) -> RedisError {
    match error {
        RespError::Io(e) => RedisError::from(e),
        other => RedisError::from(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            other.to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_replies_read_as_the_redis_client_reads_them() {
        let error = server_error("NOSCRIPT No matching script. Please use EVAL.");
        assert_eq!(
            error.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        );
        let error =
            server_error("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert_eq!(
            crate::connection::describe(&error),
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
        assert!(crate::connection::is_definite_failure(&error));
        assert!(!crate::connection::is_transport(&error));
        let inner = element_value(Element::Error("ERR x".into()));
        assert!(matches!(inner, Value::ServerError(_)), "{inner:?}");
        let lost = transport(crate::resp::eof());
        assert!(
            crate::connection::is_transport(&lost)
                && !crate::connection::is_definite_failure(&lost)
        );
    }
}
