//! The control protocol's server (docs/operating.md#the-wire-format): one
//! task with a connection of its own pops requests from `NS:rpc` one at a
//! time (a blocking pop without a timeout: no traffic while idle), checks
//! them against the Redis server's clock, hands each to the driver, which
//! owns the engine and answers at once ([`methods`]), and publishes the one
//! reply. `ruled ctl` is the client ([`client`]).

pub mod add;
pub mod client;
pub mod definition;
pub mod envelope;
pub mod escape;
pub mod guard_probe;
pub mod list;
pub mod local;
pub mod methods;
mod override_removal;
pub mod overrides;
pub mod protocol;
pub mod render;
pub mod signing;
pub mod trust;
pub mod wire;

use crate::connection::{describe, Backoff, CONNECT_TIMEOUT};
use crate::logging::{self, Throttle};
use crate::tls::Tls;
use list::{Item, RequestList};
use local::Local;
use redis::aio::MultiplexedConnection;
use std::time::{Duration, Instant};
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
/// `NS:overrides` before the reply goes out (`None` for the rule: its
/// override removed); for a dry run of a guarded step, the guards the
/// server judges on a fresh read before replying ([`guard_probe`]).
#[derive(Debug)]
pub struct Answer {
    pub reply: Reply,
    pub keep: Option<(String, Option<bool>)>,
    pub probe: Option<Box<guard_probe::Probe>>,
}

impl Answer {
    /// An answer that keeps no override and probes nothing.
    pub fn reply(reply: Reply) -> Self {
        Self {
            reply,
            keep: None,
            probe: None,
        }
    }
}

/// The running server: its calls for the driver, and its task.
#[derive(Debug)]
pub struct ControlServer {
    calls: mpsc::Receiver<Call>,
    task: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Starts serving `keys.rpc` on connections of its own (`tls` for a
    /// `rediss://` URL), under `trust`; `local` is what the server answers
    /// itself ([`local`]).
    pub fn start(
        client: redis::Client,
        tls: Tls,
        keys: ControlKeys,
        trust: Trust,
        local: Local,
    ) -> Self {
        // One request at a time: the server waits for each answer.
        let (tx, calls) = mpsc::channel(1);
        let task = tokio::spawn(serve(client, tls, keys, trust, tx, local));
        Self {
            calls,
            task: Some(task),
        }
    }

    /// The next request for the driver. Cancel-safe.
    pub fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Call>> {
        self.calls.poll_recv(cx)
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
    tls: Tls,
    keys: ControlKeys,
    mut trust: Trust,
    calls: mpsc::Sender<Call>,
    local: Local,
) {
    let mut backoff = Backoff::default();
    // Ignored requests are outside input: through a log budget of their own.
    let mut throttle = Throttle::new(Instant::now());
    loop {
        match connect(&client, &tls).await {
            Ok((mut con, mut list)) => {
                backoff = Backoff::default();
                let error = serve_on(
                    &mut con,
                    &mut list,
                    &keys,
                    &mut trust,
                    &calls,
                    &local,
                    &mut throttle,
                )
                .await;
                if calls.is_closed() {
                    return;
                }
                tracing::warn!("control connection lost ({error}); opening it again");
            }
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(
                    "cannot open the control connection ({e}); retrying in {}ms",
                    delay.as_millis()
                );
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// The command connection (clock, scripts, replies) and the one the
/// blocking pop waits on.
async fn connect(
    client: &redis::Client,
    tls: &Tls,
) -> Result<(MultiplexedConnection, RequestList), String> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(COMMAND_TIMEOUT));
    let con = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| describe(&e))?;
    let list = RequestList::open(client.get_connection_info(), tls)
        .await
        .map_err(|e| e.to_string())?;
    Ok((con, list))
}

/// Serves until a connection fails; returns why. Each blocking pop is
/// followed by one script taking what waits behind it, so a list full of
/// junk is emptied in one round trip.
async fn serve_on(
    con: &mut MultiplexedConnection,
    list: &mut RequestList,
    keys: &ControlKeys,
    trust: &mut Trust,
    calls: &mpsc::Sender<Call>,
    local: &Local,
    throttle: &mut Throttle,
) -> String {
    loop {
        // The tail: clients push at the head (`LPUSH`, as `lsc` does), so
        // the oldest request is served first.
        let first = match list.wait(&keys.rpc).await {
            Ok(Some(item)) => item,
            Ok(None) => continue,
            Err(e) => return e.to_string(),
        };
        let (now_ms, more) = match bounded(list::take_more(con, &keys.rpc)).await {
            Ok(taken) => taken,
            Err(e) => return format!("taking requests failed: {e}"),
        };
        for item in std::iter::once(first).chain(more) {
            let bytes = match item {
                Item::Oversized(bytes) => {
                    log_ignored(throttle, &wire::Ignored::TooLarge { bytes });
                    continue;
                }
                Item::Request(bytes) => bytes,
            };
            let request = match wire::read_request(&bytes, keys, now_ms) {
                Ok(request) => request,
                Err(why) => {
                    log_ignored(throttle, &why);
                    continue;
                }
            };
            let asked = Asked {
                keys,
                bytes: &bytes,
                request: &request,
                now_ms,
            };
            let Some(answer) = answer(con, trust, calls, local, asked).await else {
                return "the service is stopping".to_string();
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
}

/// One ignored request's line, at `warn` while the budget lasts
/// (docs/service.md#logs), else at `debug`.
fn log_ignored(throttle: &mut Throttle, why: &wire::Ignored) {
    logging::log_held(&throttle.roll(Instant::now()));
    if throttle.admit(None, tracing::Level::WARN) {
        tracing::warn!("control request ignored: {why}");
    } else {
        tracing::debug!("control request ignored: {why}");
    }
}

/// One request as popped: its bytes (which a signature covers), what
/// they say, and the server's clock when it was taken.
struct Asked<'a> {
    keys: &'a ControlKeys,
    bytes: &'a [u8],
    request: &'a Request,
    now_ms: i64,
}

/// Whether `asked` is served, and signed (docs/operating.md#trust): the
/// trust settings judge it, and a signed one is recorded in Redis before
/// anything acts on it, so it is served once, also across a restart.
async fn admit(
    con: &mut MultiplexedConnection,
    trust: &mut Trust,
    asked: &Asked<'_>,
) -> Result<bool, Reply> {
    let signed = trust.judge(asked.bytes, asked.request, asked.now_ms)?;
    if signed {
        // The connection's response timeout bounds it.
        trust::claim_once(con, asked.keys, asked.request, asked.now_ms).await?;
    }
    Ok(signed)
}

/// The answer to one request: refused by the trust settings
/// (docs/operating.md#trust), answered in this task ([`local`]), or by the
/// driver; `None` once the driver stopped.
async fn answer(
    con: &mut MultiplexedConnection,
    trust: &mut Trust,
    calls: &mpsc::Sender<Call>,
    local: &Local,
    asked: Asked<'_>,
) -> Option<Answer> {
    let request = asked.request;
    let signed = match admit(con, trust, &asked).await {
        Ok(signed) => signed,
        Err(refusal) => {
            tracing::warn!(method = %request.method, "control request refused: {}", refusal.error);
            return Some(Answer::reply(refusal));
        }
    };
    if let Some(reply) = local.answer(request, signed).await {
        // docs/operating.md#trust: a change asked for is logged at `warn`,
        // here as the driver's methods do (`v1.add` is answered here).
        if trust::changes_state(&request.method) {
            tracing::warn!(
                method = %logging::escape_controls(request.method.as_bytes()),
                signed,
                ok = reply.ok,
                "control request"
            );
        }
        return Some(Answer::reply(reply));
    }
    let mut answer = ask_driver(calls, request.clone(), signed).await?;
    local.complete(con, request, &mut answer.reply).await;
    if let Some(probe) = answer.probe.take() {
        // Bounded by the connection's response timeout.
        probe.complete(con, &mut answer.reply).await;
    }
    Some(answer)
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
            let what = match enabled {
                Some(enabled) => format!("is {} now", overrides::word(enabled)),
                None => "has its override removed now".to_string(),
            };
            reply = Reply::error(format!(
                "rule `{rule}` {what}, but the choice could not be kept in `{}` ({e}): \
                 it is lost at the next start",
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
