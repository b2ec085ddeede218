//! The control protocol's server (docs/operating.md#the-wire-format): one
//! task with a connection of its own pops requests from `NS:rpc` one at a
//! time (a blocking pop without a timeout: no traffic while idle), checks
//! them against the Redis server's clock, hands each to the driver, which
//! owns the engine and answers at once ([`methods`]), and publishes the one
//! reply. `ruled ctl` is the client ([`client`]).

pub mod client;
pub mod definition;
pub mod escape;
pub mod methods;
pub mod overrides;
pub mod render;
pub mod signing;
pub mod trust;
pub mod wire;

use crate::connection::{describe, Backoff, CONNECT_TIMEOUT};
use redis::aio::MultiplexedConnection;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use trust::Trust;
use wire::{ControlKeys, Reply, Request};

/// How long one command besides the blocking pop may take before the
/// connection is opened again.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// One request for the driver, and where its answer goes.
#[derive(Debug)]
pub struct Call {
    pub request: Request,
    /// Signed with the control key, and verified (docs/operating.md#trust).
    pub signed: bool,
    pub answer: oneshot::Sender<Answer>,
}

/// The driver's answer: the reply, and an override to keep in
/// `NS:overrides` before the reply goes out.
#[derive(Debug)]
pub struct Answer {
    pub reply: Reply,
    pub keep: Option<(String, bool)>,
}

/// The running server: its calls for the driver, and its task.
#[derive(Debug)]
pub struct ControlServer {
    calls: mpsc::Receiver<Call>,
    task: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Starts serving `keys.rpc` on a connection of its own, under `trust`.
    pub fn start(client: redis::Client, keys: ControlKeys, trust: Trust) -> Self {
        // One request at a time: the server waits for each answer.
        let (tx, calls) = mpsc::channel(1);
        let task = tokio::spawn(serve(client, keys, trust, tx));
        Self {
            calls,
            task: Some(task),
        }
    }

    /// The next request for the driver. Cancel-safe.
    pub async fn next(&mut self) -> Option<Call> {
        self.calls.recv().await
    }

    /// Stops serving: a request popped and not yet answered gets no reply
    /// (its client sees no answer before its deadline).
    pub fn close(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.calls.close();
    }
}

async fn serve(
    client: redis::Client,
    keys: ControlKeys,
    mut trust: Trust,
    calls: mpsc::Sender<Call>,
) {
    let mut backoff = Backoff::default();
    loop {
        match connect(&client).await {
            Ok(mut con) => {
                backoff = Backoff::default();
                let error = serve_on(&mut con, &keys, &mut trust, &calls).await;
                if calls.is_closed() {
                    return;
                }
                tracing::warn!("control connection lost ({error}); opening it again");
            }
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(
                    "cannot open the control connection ({}); retrying in {}ms",
                    describe(&e),
                    delay.as_millis()
                );
                tokio::time::sleep(delay).await;
            }
        }
    }
}

async fn connect(client: &redis::Client) -> redis::RedisResult<MultiplexedConnection> {
    // No reply timeout: the pop blocks until a request comes.
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Serves until the connection fails; returns why.
async fn serve_on(
    con: &mut MultiplexedConnection,
    keys: &ControlKeys,
    trust: &mut Trust,
    calls: &mpsc::Sender<Call>,
) -> String {
    loop {
        let popped: redis::RedisResult<Option<(String, Vec<u8>)>> = // The tail: clients push at the head (`LPUSH`, as `lsc` does), so
        // the oldest request is served first.
        redis::cmd("BRPOP")
            .arg(&keys.rpc)
            .arg(0)
            .query_async(con)
            .await;
        let bytes = match popped {
            Ok(Some((_, bytes))) => bytes,
            Ok(None) => continue,
            Err(e) => return describe(&e),
        };
        let now_ms = match bounded(server_time_ms(con)).await {
            Ok(now) => now,
            Err(e) => return format!("TIME failed: {e}"),
        };
        let request = match wire::read_request(&bytes, keys, now_ms) {
            Ok(request) => request,
            Err(why) => {
                tracing::warn!("control request ignored: {why}");
                continue;
            }
        };
        let answer = match trust.judge(&bytes, &request, now_ms) {
            Ok(signed) => match ask_driver(calls, request.clone(), signed).await {
                Some(answer) => answer,
                None => return "the service is stopping".to_string(),
            },
            Err(refusal) => {
                tracing::warn!(method = %request.method, "control request refused: {}", refusal.error);
                Answer {
                    reply: refusal,
                    keep: None,
                }
            }
        };
        let sealed = Sealed {
            trust,
            bytes: &bytes,
        };
        if let Err(e) = bounded(reply(con, keys, &request, answer, sealed)).await {
            return e;
        }
    }
}

/// Hands the request to the driver; `None` once the driver stopped.
async fn ask_driver(calls: &mpsc::Sender<Call>, request: Request, signed: bool) -> Option<Answer> {
    let (answer, answered) = oneshot::channel();
    calls
        .send(Call {
            request,
            signed,
            answer,
        })
        .await
        .ok()?;
    answered.await.ok()
}

/// How a reply is sealed: the trust settings, and the request's bytes as
/// popped, which a signature covers.
struct Sealed<'a> {
    trust: &'a Trust,
    bytes: &'a [u8],
}

/// Keeps the answer's override (if any), then publishes the reply.
async fn reply(
    con: &mut MultiplexedConnection,
    keys: &ControlKeys,
    request: &Request,
    answer: Answer,
    sealed: Sealed<'_>,
) -> Result<(), String> {
    let mut reply = answer.reply;
    if let Some((rule, enabled)) = answer.keep {
        if let Err(e) = overrides::store(con, &keys.overrides, &rule, enabled).await {
            tracing::error!(rule = %rule, "override not kept in `{}`: {e}", keys.overrides);
            reply = Reply::error(format!(
                "rule `{rule}` is {} now, but the choice could not be kept in `{}` ({e}): \
                 it is lost at the next start",
                overrides::word(enabled),
                keys.overrides
            ));
        }
    }
    tracing::debug!(method = %request.method, ok = reply.ok, "control request answered");
    redis::cmd("PUBLISH")
        .arg(&request.reply_channel)
        .arg(sealed.trust.seal(sealed.bytes, &reply))
        .query_async::<i64>(con)
        .await
        .map(drop)
        .map_err(|e| describe(&e))
}

/// The Redis server's clock in Unix ms (`TIME`): what deadlines are
/// written in.
pub async fn server_time_ms(con: &mut MultiplexedConnection) -> Result<i64, String> {
    let (secs, micros): (i64, i64) = redis::cmd("TIME")
        .query_async(con)
        .await
        .map_err(|e| describe(&e))?;
    Ok(secs.saturating_mul(1000).saturating_add(micros / 1000))
}

/// `work`, failing after [`COMMAND_TIMEOUT`].
async fn bounded<T>(
    work: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(COMMAND_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| Err(format!("no reply within {}s", COMMAND_TIMEOUT.as_secs())))
}
