//! The command connection to Redis (docs/service.md#start-and-stop): opening it with
//! backoff, one retry of a command that met a dropped connection, and how a
//! Redis error reads in a log line.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::time::Duration;

/// First and longest wait between connection attempts.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long one connection attempt may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a record, counter or state command may wait for its reply
/// before it counts as failed: long enough to outlast the stalls of a
/// small board's Redis (a fork for a snapshot on slow flash takes seconds),
/// short enough that a Redis that never answers is noticed. Actions wait
/// as long as their own `timeout` instead (docs/semantics.md#worker-pool-and-actions).
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// Exponential backoff between attempts, capped at [`BACKOFF_MAX`].
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: BACKOFF_MIN }
    }
}

impl Backoff {
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        delay
    }
}

/// Opens the command connection, retrying with backoff until it works;
/// `ConnectionManager` then reconnects by itself after a lost connection.
pub async fn connect_manager(client: &redis::Client) -> ConnectionManager {
    connect_manager_with(client, Some(RESPONSE_TIMEOUT)).await
}

/// [`connect_manager`] with its own reply timeout; `None` for the actions'
/// connection, whose every command is bounded by its step's `timeout`.
pub async fn connect_manager_with(
    client: &redis::Client,
    response_timeout: Option<Duration>,
) -> ConnectionManager {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(response_timeout)
        .set_min_delay(BACKOFF_MIN)
        .set_max_delay(BACKOFF_MAX)
        .set_number_of_retries(6);
    let mut backoff = Backoff::default();
    loop {
        // The manager retries its first connection silently; probe with a
        // plain connection first so every failed attempt is logged.
        let probe =
            tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
                .await
                .unwrap_or_else(|_| {
                    Err(redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "connection attempt timed out",
                    )))
                });
        let attempt = match probe {
            Ok(_) => ConnectionManager::new_with_config(client.clone(), config.clone()).await,
            Err(e) => Err(e),
        };
        match attempt {
            Ok(manager) => return manager,
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(
                    "cannot connect to redis ({e}); retrying in {}ms",
                    delay.as_millis()
                );
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Runs `cmd`, and once more if the first attempt met a dropped
/// connection: one that was already gone when the command went out (the
/// server closed it: Redis' `timeout` for idle clients, `CLIENT KILL`, a
/// restart). `ConnectionManager` starts a new connection on such an error,
/// so one more attempt normally lands.
pub async fn query<T: redis::FromRedisValue>(
    con: &mut ConnectionManager,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    match cmd.query_async(con).await {
        Err(e) if e.is_connection_dropped() => {
            tracing::debug!("command connection was closed ({e}); trying once more");
            cmd.query_async(con).await
        }
        other => other,
    }
}

/// A connection one command at a time can go out on: the Redis client's
/// (every command but the hot path's) or ruled's own
/// ([`crate::direct::Direct`]: the bus reader's and the lane's), so the
/// code that reads through either is written once.
pub trait Query: Send {
    /// `cmd`'s reply as `T` ([`query`] on the Redis client's connection).
    fn query<T: redis::FromRedisValue + Send>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> impl std::future::Future<Output = redis::RedisResult<T>> + Send;

    /// The command of `args`, one argument each, and its reply as `T`:
    /// [`Query::query`] of the command they make, which ruled's own
    /// connection writes without building one.
    fn query_args<T: redis::FromRedisValue + Send>(
        &mut self,
        args: &[&[u8]],
    ) -> impl std::future::Future<Output = redis::RedisResult<T>> + Send {
        let mut cmd = redis::Cmd::new();
        for arg in args {
            cmd.arg(*arg);
        }
        async move { self.query(&cmd).await }
    }
}

impl Query for ConnectionManager {
    async fn query<T: redis::FromRedisValue + Send>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        query(self, cmd).await
    }
}

impl Query for crate::direct::Direct {
    async fn query<T: redis::FromRedisValue + Send>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        crate::direct::Direct::query(self, cmd).await
    }

    async fn query_args<T: redis::FromRedisValue + Send>(
        &mut self,
        args: &[&[u8]],
    ) -> redis::RedisResult<T> {
        crate::direct::Direct::query_args(self, args).await
    }
}

/// [`query`] for a pipeline.
pub(crate) async fn query_pipe<T: redis::FromRedisValue>(
    con: &mut ConnectionManager,
    pipe: &redis::Pipeline,
) -> redis::RedisResult<T> {
    match pipe.query_async(con).await {
        Err(e) if e.is_connection_dropped() => {
            tracing::debug!("command connection was closed ({e}); trying once more");
            pipe.query_async(con).await
        }
        other => other,
    }
}

/// Whether `error` is about reaching Redis (connection lost, refused, timed
/// out), as opposed to an answer Redis gave (WRONGTYPE, a value that is not
/// UTF-8). After a transport error the value is unknown until the next read
/// succeeds; after an answer it is known not to be a usable string.
pub(crate) fn is_transport(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
}

/// Whether `error` says for certain that a command did not take effect: an
/// error reply from Redis, or a connection that could not be opened.
/// Anything else (no reply in time, a connection that broke, the client
/// cannot tell whether before or after the command went out) leaves the
/// outcome unknown: Redis may have run it
/// (docs/semantics.md#worker-pool-and-actions).
pub(crate) fn is_definite_failure(error: &redis::RedisError) -> bool {
    error.code().is_some() || error.is_connection_refusal()
}

/// `url` with its password (if any) replaced by `***`, for log lines and
/// errors (docs/service.md#flags). A URL that does not parse is shown as
/// its scheme only: it may hold a password in a shape the parser missed.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() && parsed.set_password(Some("***")).is_err() {
                return format!("{}://***", parsed.scheme());
            }
            // `?pass=` / `?password=` on a unix socket URL.
            let secret_query = parsed
                .query_pairs()
                .any(|(k, _)| matches!(k.as_ref(), "pass" | "password"));
            if parsed.password().is_none() && !secret_query {
                // Shown as written, not as the parser normalises it.
                return url.to_string();
            }
            let query: Vec<(String, String)> = parsed
                .query_pairs()
                .map(|(k, v)| {
                    let secret = matches!(k.as_ref(), "pass" | "password");
                    (
                        k.into_owned(),
                        if secret { "***".into() } else { v.into_owned() },
                    )
                })
                .collect();
            if !query.is_empty() {
                parsed.query_pairs_mut().clear().extend_pairs(query);
            }
            parsed.to_string()
        }
        Err(_) => match url.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://***"),
            None => "***".to_string(),
        },
    }
}

/// `error` as a log line reads it: a server error as Redis words it
/// (`WRONGTYPE Operation against a key holding the wrong kind of value`,
/// as redis-cli shows it), anything else as the client describes it.
pub fn describe(error: &redis::RedisError) -> String {
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => error.to_string(),
    }
}

/// PINGs the command connection until it answers (a few tries), so that a
/// connection broken by a Redis restart is replaced before actions use it.
pub(crate) async fn wake_commands(con: &mut ConnectionManager) {
    let mut backoff = Backoff::default();
    for _ in 0..5 {
        match redis::cmd("PING").query_async::<String>(con).await {
            Ok(_) => return,
            Err(e) => {
                tracing::debug!("command connection not ready yet: {e}");
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
    }
    tracing::warn!("the command connection still fails after the pub/sub reconnect");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://user:s3cret@host:6379/2"),
            "redis://user:***@host:6379/2"
        );
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=1&pass=s3cret"),
            "redis+unix:///run/redis.sock?db=1&pass=***"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(redact_url("redis://:s3cret@[bad"), "redis://***");
    }

    #[test]
    fn backoff_doubles_to_a_cap() {
        let mut backoff = Backoff::default();
        let delays: Vec<u128> = (0..8).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    }
}
